/* The JSON tree of json.h: a recursive-descent parser (RFC 8259, depth-limited),
 * lookups and a compact writer. Strings are kept as UTF-8; \u escapes are
 * decoded, surrogate pairs included. */
#include "json.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

typedef struct parser {
    const char *s, *end;
    char *err;
    size_t err_size;
    bool failed;
} parser;

static void fail(parser *p, const char *fmt, ...)
{
    if (p->failed) return;
    p->failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err, p->err_size, fmt, ap);
    va_end(ap);
}

static void skip_space(parser *p)
{
    while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r')) p->s++;
}

qfi_json *qfi_json_new(qfi_json_type type)
{
    qfi_json *j = calloc(1, sizeof *j);
    if (j) j->type = type;
    return j;
}

void qfi_json_free(qfi_json *j)
{
    if (!j) return;
    for (int i = 0; i < j->n; i++) qfi_json_free(j->items[i]);
    free(j->items);
    free(j->key);
    free(j->text);
    free(j);
}

static bool push(qfi_json *parent, qfi_json *child)
{
    if (parent->n == parent->cap) {
        int cap = parent->cap ? 2 * parent->cap : 4;
        qfi_json **items = realloc(parent->items, (size_t)cap * sizeof *items);
        if (!items) return false;
        parent->items = items;
        parent->cap = cap;
    }
    parent->items[parent->n++] = child;
    return true;
}

/* Appends code point cp as UTF-8. */
static char *put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        *o++ = (char)cp;
    } else if (cp < 0x800) {
        *o++ = (char)(0xC0 | cp >> 6);
        *o++ = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *o++ = (char)(0xE0 | cp >> 12);
        *o++ = (char)(0x80 | (cp >> 6 & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *o++ = (char)(0xF0 | cp >> 18);
        *o++ = (char)(0x80 | (cp >> 12 & 0x3F));
        *o++ = (char)(0x80 | (cp >> 6 & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    }
    return o;
}

static bool hex4(parser *p, unsigned *out)
{
    if (p->end - p->s < 4) return false;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return false;
    }
    p->s += 4;
    *out = v;
    return true;
}

/* A string starting at the opening quote; the decoded text is never longer than the source. */
static char *parse_string(parser *p)
{
    p->s++;
    const char *q = p->s;
    while (q < p->end && *q != '"') q += *q == '\\' ? 2 : 1;
    if (q >= p->end) {
        fail(p, "unterminated string");
        return NULL;
    }
    char *out = malloc((size_t)(q - p->s) + 1), *o = out;
    if (!out) {
        fail(p, "out of memory");
        return NULL;
    }
    while (*p->s != '"') {
        unsigned char c = (unsigned char)*p->s++;
        if (c < 0x20) {
            fail(p, "control character in a string");
            break;
        }
        if (c != '\\') {
            *o++ = (char)c;
            continue;
        }
        char e = *p->s++;
        switch (e) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (!hex4(p, &cp)) {
                fail(p, "bad \\u escape");
                break;
            }
            if (cp >= 0xD800 && cp < 0xDC00) {
                if (p->end - p->s < 6 || p->s[0] != '\\' || p->s[1] != 'u' || (p->s += 2, !hex4(p, &lo)) ||
                    lo < 0xDC00 || lo >= 0xE000) {
                    fail(p, "unpaired surrogate in a \\u escape");
                    break;
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp < 0xE000) {
                fail(p, "unpaired surrogate in a \\u escape");
                break;
            }
            o = put_utf8(o, cp);
            break;
        }
        default: fail(p, "bad escape \\%c", e);
        }
        if (p->failed) break;
    }
    if (p->failed) {
        free(out);
        return NULL;
    }
    *o = 0;
    p->s++;
    return out;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static qfi_json *parse_value(parser *p, int depth);

/* The members or items of an object or array, after its opening bracket. */
static qfi_json *parse_container(parser *p, int depth, qfi_json_type type)
{
    char close = type == QFI_JSON_OBJECT ? '}' : ']';
    qfi_json *j = qfi_json_new(type);
    if (!j) {
        fail(p, "out of memory");
        return NULL;
    }
    p->s++;
    skip_space(p);
    if (p->s < p->end && *p->s == close) {
        p->s++;
        return j;
    }
    for (;;) {
        char *key = NULL;
        skip_space(p);
        if (type == QFI_JSON_OBJECT) {
            if (p->s >= p->end || *p->s != '"') {
                fail(p, "expected a member name");
                break;
            }
            if (!(key = parse_string(p))) break;
            skip_space(p);
            if (p->s >= p->end || *p->s != ':') {
                fail(p, "expected ':' after member \"%s\"", key);
                free(key);
                break;
            }
            p->s++;
        }
        qfi_json *child = parse_value(p, depth + 1);
        if (!child) {
            free(key);
            break;
        }
        child->key = key;
        if (!push(j, child)) {
            qfi_json_free(child);
            fail(p, "out of memory");
            break;
        }
        skip_space(p);
        if (p->s < p->end && *p->s == ',') {
            p->s++;
            continue;
        }
        if (p->s < p->end && *p->s == close) {
            p->s++;
            return j;
        }
        fail(p, "expected ',' or '%c'", close);
        break;
    }
    qfi_json_free(j);
    return NULL;
}

static qfi_json *parse_number(parser *p)
{
    const char *start = p->s;
    if (*p->s == '-') p->s++;
    if (p->s < p->end && *p->s == '0') p->s++;
    else if (p->s < p->end && is_digit(*p->s)) while (p->s < p->end && is_digit(*p->s)) p->s++;
    else goto bad;
    if (p->s < p->end && *p->s == '.') {
        p->s++;
        if (p->s >= p->end || !is_digit(*p->s)) goto bad;
        while (p->s < p->end && is_digit(*p->s)) p->s++;
    }
    if (p->s < p->end && (*p->s == 'e' || *p->s == 'E')) {
        p->s++;
        if (p->s < p->end && (*p->s == '+' || *p->s == '-')) p->s++;
        if (p->s >= p->end || !is_digit(*p->s)) goto bad;
        while (p->s < p->end && is_digit(*p->s)) p->s++;
    }
    qfi_json *j = qfi_json_new(QFI_JSON_NUMBER);
    if (j) j->text = strndup(start, (size_t)(p->s - start));
    if (!j || !j->text) {
        qfi_json_free(j);
        fail(p, "out of memory");
        return NULL;
    }
    return j;
bad:
    fail(p, "malformed number '%.*s'", (int)(p->s - start + (p->s < p->end)), start);
    return NULL;
}

static bool literal(parser *p, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(p->end - p->s) < n || memcmp(p->s, word, n) != 0) return false;
    p->s += n;
    return true;
}

static qfi_json *parse_value(parser *p, int depth)
{
    if (depth > MAX_DEPTH) {
        fail(p, "nested deeper than %d levels", MAX_DEPTH);
        return NULL;
    }
    skip_space(p);
    if (p->s >= p->end) {
        fail(p, "unexpected end of text");
        return NULL;
    }
    char c = *p->s;
    if (c == '{') return parse_container(p, depth, QFI_JSON_OBJECT);
    if (c == '[') return parse_container(p, depth, QFI_JSON_ARRAY);
    if (c == '"') {
        char *s = parse_string(p);
        if (!s) return NULL;
        qfi_json *j = qfi_json_new(QFI_JSON_STRING);
        if (!j) {
            free(s);
            fail(p, "out of memory");
            return NULL;
        }
        j->text = s;
        return j;
    }
    if (c == '-' || is_digit(c)) return parse_number(p);
    qfi_json_type t = QFI_JSON_NULL;
    bool b = false;
    if (literal(p, "true")) t = QFI_JSON_BOOL, b = true;
    else if (literal(p, "false")) t = QFI_JSON_BOOL;
    else if (!literal(p, "null")) {
        fail(p, "unexpected character '%c'", c);
        return NULL;
    }
    qfi_json *j = qfi_json_new(t);
    if (!j) fail(p, "out of memory");
    else j->boolean = b;
    return j;
}

qfi_json *qfi_json_parse(const char *text, size_t len, char *err, size_t err_size)
{
    parser p = {.s = text, .end = text + len, .err = err, .err_size = err_size};
    if (err_size) err[0] = 0;
    qfi_json *j = parse_value(&p, 0);
    skip_space(&p);
    if (j && p.s != p.end) {
        fail(&p, "text after the value at offset %td", p.s - text);
        qfi_json_free(j);
        j = NULL;
    }
    return j;
}

qfi_json *qfi_json_get(const qfi_json *obj, const char *key)
{
    if (!obj || obj->type != QFI_JSON_OBJECT) return NULL;
    for (int i = 0; i < obj->n; i++)
        if (strcmp(obj->items[i]->key, key) == 0) return obj->items[i];
    return NULL;
}

bool qfi_json_int(const qfi_json *j, int64_t *out)
{
    if (!j || (j->type != QFI_JSON_NUMBER && j->type != QFI_JSON_STRING)) return false;
    const char *s = j->text;
    char *end;
    if (!*s || (!is_digit(*s) && *s != '-')) return false;
    long long v = strtoll(s, &end, 10);
    if (*end) return false;
    *out = v;
    return true;
}

const char *qfi_json_str(const qfi_json *j) { return j && j->type == QFI_JSON_STRING ? j->text : NULL; }

qfi_json *qfi_json_new_string(const char *s)
{
    qfi_json *j = qfi_json_new(QFI_JSON_STRING);
    if (j && !(j->text = strdup(s))) {
        free(j);
        return NULL;
    }
    return j;
}

qfi_json *qfi_json_new_int(int64_t v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    qfi_json *j = qfi_json_new(QFI_JSON_NUMBER);
    if (j && !(j->text = strdup(buf))) {
        free(j);
        return NULL;
    }
    return j;
}

bool qfi_json_add(qfi_json *obj, const char *key, qfi_json *child)
{
    if (!child) return false;
    if (obj->type == QFI_JSON_OBJECT && !(child->key = strdup(key))) {
        qfi_json_free(child);
        return false;
    }
    if (!push(obj, child)) {
        qfi_json_free(child);
        return false;
    }
    return true;
}

bool qfi_json_set(qfi_json *obj, const char *key, qfi_json *child)
{
    if (!child) return false;
    if (obj->type != QFI_JSON_OBJECT) {
        qfi_json_free(child);
        return false;
    }
    for (int i = 0; i < obj->n; i++) {
        if (strcmp(obj->items[i]->key, key) == 0) {
            if (!(child->key = strdup(key))) {
                qfi_json_free(child);
                return false;
            }
            qfi_json_free(obj->items[i]);
            obj->items[i] = child;
            return true;
        }
    }
    return qfi_json_add(obj, key, child);
}

/* ---- writer ------------------------------------------------------------------------ */

typedef struct sbuf {
    char *s;
    size_t len, cap;
    bool oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->len + n + 1 > cap) cap *= 2;
        char *t = realloc(b->s, cap);
        if (!t) {
            b->oom = true;
            return;
        }
        b->s = t;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

static void put_quoted(sbuf *b, const char *s)
{
    put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            put(b, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            put(b, esc, 6);
        } else {
            put(b, s, 1);
        }
    }
    put(b, "\"", 1);
}

static void write_value(sbuf *b, const qfi_json *j)
{
    switch (j->type) {
    case QFI_JSON_NULL: put(b, "null", 4); break;
    case QFI_JSON_BOOL: j->boolean ? put(b, "true", 4) : put(b, "false", 5); break;
    case QFI_JSON_NUMBER: put(b, j->text, strlen(j->text)); break;
    case QFI_JSON_STRING: put_quoted(b, j->text); break;
    case QFI_JSON_ARRAY:
    case QFI_JSON_OBJECT:
        put(b, j->type == QFI_JSON_OBJECT ? "{" : "[", 1);
        for (int i = 0; i < j->n; i++) {
            if (i) put(b, ",", 1);
            if (j->type == QFI_JSON_OBJECT) {
                put_quoted(b, j->items[i]->key);
                put(b, ":", 1);
            }
            write_value(b, j->items[i]);
        }
        put(b, j->type == QFI_JSON_OBJECT ? "}" : "]", 1);
        break;
    }
}

char *qfi_json_write(const qfi_json *j)
{
    sbuf b = {0};
    write_value(&b, j);
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}
