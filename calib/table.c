/* table.calib (qforge-calib(5)) writing and strict reading and the TensorRT
 * calibration cache; every output goes through the all-or-nothing writer of
 * lib/atomic_file.c. The reader accepts exactly what the writer produces: anything else is an error
 * naming the line, because a silently misread threshold ruins a model quietly. */
#include "calib_internal.h"
#include <errno.h>
#include <math.h>
#include <unistd.h>
#include <sys/stat.h>

#define TABLE_MAGIC "qforge-calib"
#define TABLE_MAX_BYTES ((size_t)256 << 20)  /* QF_MAX_VALUES lines of ~600 bytes */
#define MIN_KEY "min"                       /* a tensor line's minimum field (version 3) */
#define TRT_VERSION "8601"                  /* TensorRT 8.6.1, the cache header it writes */

/* ---- table helpers --------------------------------------------------------------------- */

void qf_calib_table_free(qf_calib_table *t)
{
    if (!t) return;
    for (int i = 0; i < t->n; i++) free(t->entries[i].name);
    free(t->entries);
    free(t->preprocess);
    free(t);
}

qf_calib_method qf_calib_table_default_method(const qf_calib_table *t)
{
    for (int m = 0; m < QF_CALIB_METHOD_COUNT; m++)
        if (t->methods & (1u << m)) return (qf_calib_method)m;
    return QF_CALIB_ENTROPY;
}

int qf_calib_table_find(const qf_calib_table *t, const char *name)
{
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->entries[i].name, name)) return i;
    return -1;
}

/* Shortest of %.15g..%.17g that reads back as the same double (99.99, not 99.989999999999995). */
static void format_double(char *buf, size_t n, double v)
{
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) return;
    }
}

/* "auto,entropy,minmax,percentile=99.99,mse": the header's method list, in enum order. */
static void methods_string(unsigned methods, double percentile, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int m = 0; m < QF_CALIB_METHOD_COUNT; m++) {
        if (!(methods & (1u << m))) continue;
        char p[40] = "";
        if (m == QF_CALIB_PERCENTILE) {
            p[0] = '=';
            format_double(p + 1, sizeof p - 1, percentile);
        }
        len += (size_t)snprintf(buf + len, n - len, "%s%s%s", len ? "," : "", qf_calib_method_name(m), p);
        if (len >= n) break;  // cannot happen with the callers' 128 bytes; never write past
    }
}

qf_status qf_calib_table_amax(const qf_calib_table *t, int i, qf_calib_method m, float *amax)
{
    if (i < 0 || i >= t->n) return qf_error(QF_ERR_USAGE, "calibration table: no entry %d", i);
    if ((unsigned)m >= QF_CALIB_METHOD_COUNT || !(t->methods & (1u << m))) {
        char list[128];
        methods_string(t->methods, t->percentile, list, sizeof list);
        return qf_error(QF_ERR_INVALID, "calibration table: tensor %s has no %s threshold (the table records %s)",
                        t->entries[i].name, qf_calib_method_name(m), list);
    }
    *amax = t->entries[i].amax[m];
    return QF_OK;
}

float qf_calib_table_min(const qf_calib_table *t, int i)
{
    return i >= 0 && i < t->n && t->entries[i].has_min ? t->entries[i].min : NAN;
}

/* Length of the UTF-8 sequence at p (at most n bytes), or 0 if it is not valid
 * UTF-8 (overlong forms, surrogates and code points above U+10FFFF included). */
static size_t utf8_len(const unsigned char *p, size_t n)
{
    if (p[0] < 0x80) return 1;
    size_t len;
    uint32_t cp;
    if ((p[0] & 0xe0) == 0xc0) len = 2, cp = p[0] & 0x1f;
    else if ((p[0] & 0xf0) == 0xe0) len = 3, cp = p[0] & 0x0f;
    else if ((p[0] & 0xf8) == 0xf0) len = 4, cp = p[0] & 0x07;
    else return 0;
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

/* ---- writing ------------------------------------------------------------------------- */

/* Percent-escapes the bytes that would break the line structure or the UTF-8 of
 * the file: control bytes, DEL, '%', bytes that are not part of valid UTF-8 and (in
 * names, which are space-separated fields) the space. Valid UTF-8 passes unchanged. */
static void put_escaped(FILE *f, const char *s, bool escape_space)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t k = utf8_len(p + i, n - i);
        if (k > 1) {
            fwrite(p + i, 1, k, f);
            i += k;
            continue;
        }
        unsigned char ch = p[i++];
        if (!k || ch < 0x20 || ch == 0x7f || ch == '%' || (escape_space && ch == ' '))
            fprintf(f, "%%%02X", ch);
        else
            fputc(ch, f);
    }
}

static bool valid_amax(float a)
{
    return isfinite(a) && a >= 0.0f;
}

/* Checks what the writer would otherwise turn into a table the reader rejects. */
static qf_status table_validate(const qf_calib_table *t, const char *path)
{
    if (!t->methods || (t->methods & ~QF_CALIB_ALL))
        return qf_error(QF_ERR_USAGE, "%s: the table has no valid method (mask 0x%x)", path, t->methods);
    if ((t->methods & (1u << QF_CALIB_PERCENTILE)) && !(t->percentile > 0.0 && t->percentile <= 100.0))
        return qf_error(QF_ERR_USAGE, "%s: percentile %g is not in (0, 100]", path, t->percentile);
    if (!qfi_is_sha256_hex(t->model_sha256))
        return qf_error(QF_ERR_USAGE, "%s: the model SHA-256 must be 64 lowercase hex digits", path);
    if (t->equalized[0] && !qfi_is_sha256_hex(t->equalized))
        return qf_error(QF_ERR_USAGE, "%s: the equalization digest must be 64 lowercase hex digits", path);
    if (t->images < 0) return qf_error(QF_ERR_USAGE, "%s: negative image count", path);
    if (t->n < 0 || t->n > QF_MAX_VALUES) return qf_error(QF_ERR_USAGE, "%s: %d tensors", path, t->n);
    for (int i = 0; i < t->n; i++) {
        const qf_calib_entry *e = &t->entries[i];
        if (!e->name || !e->name[0]) return qf_error(QF_ERR_USAGE, "%s: tensor %d has no name", path, i);
        for (int m = 0; m < QF_CALIB_METHOD_COUNT; m++)
            if ((t->methods & (1u << m)) && !valid_amax(e->amax[m]))
                return qf_error(QF_ERR_INVALID, "%s: tensor %s: %s threshold %g is not a finite number >= 0",
                                path, e->name, qf_calib_method_name(m), e->amax[m]);
        if (e->has_min && !isfinite(e->min))
            return qf_error(QF_ERR_INVALID, "%s: tensor %s: minimum %g is not a finite number", path, e->name,
                            (double)e->min);
    }
    return QF_OK;
}

/* 2 adds the 'equalized' line, so that a qforge older than it refuses such a
 * table instead of applying its thresholds to the graph it was not made on; 3
 * adds the tensors' minimums (and makes that line optional). A table is
 * written in the oldest version that holds it, except that one read as
 * version 3 stays 3: a round trip keeps a table's version (a version 3
 * table may have neither minimums nor the 'equalized' line). */
int qfi_calib_table_version(const qf_calib_table *t)
{
    if (t->version >= 3) return 3;
    for (int i = 0; i < t->n; i++)
        if (t->entries[i].has_min) return 3;
    return t->equalized[0] ? 2 : 1;
}

qf_status qf_calib_table_write(const qf_calib_table *t, const char *path)
{
    QF_CHECK(table_validate(t, path));
    qfi_atomic_file af;
    QF_CHECK(qfi_atomic_open(&af, path));
    FILE *f = af.f;
    char list[128];
    methods_string(t->methods, t->percentile, list, sizeof list);
    fprintf(f, "%s %d\n", TABLE_MAGIC, qfi_calib_table_version(t));
    fprintf(f, "method %s\n", list);
    fprintf(f, "images %lld\n", (long long)t->images);
    fprintf(f, "model-sha256 %s\n", t->model_sha256);
    fputs("preprocess", f);
    if (t->preprocess && t->preprocess[0]) {
        fputc(' ', f);
        put_escaped(f, t->preprocess, false);
    }
    fputc('\n', f);
    if (t->equalized[0]) fprintf(f, "equalized %s\n", t->equalized);
    fprintf(f, "tensors %d\n", t->n);
    bool single = !(t->methods & (t->methods - 1));
    for (int i = 0; i < t->n; i++) {
        const qf_calib_entry *e = &t->entries[i];
        put_escaped(f, e->name, true);
        for (int m = 0; m < QF_CALIB_METHOD_COUNT; m++) {
            if (!(t->methods & (1u << m))) continue;
            // %.9g: nine significant digits name every float uniquely. + 0.0f turns -0 into 0.
            double a = e->amax[m] + 0.0f;
            if (single)
                fprintf(f, " %.9g", a);
            else
                fprintf(f, " %s=%.9g", qf_calib_method_name(m), a);
        }
        if (e->has_min) fprintf(f, " %s=%.9g", MIN_KEY, (double)(e->min + 0.0f));
        fputc('\n', f);
    }
    return qfi_atomic_commit(&af);
}

qf_status qf_calib_table_write_trt(const qf_calib_table *t, qf_calib_method m, const char *path)
{
    if ((unsigned)m >= QF_CALIB_METHOD_COUNT || !(t->methods & (1u << m)))
        return qf_error(QF_ERR_USAGE, "%s: the table has no %s thresholds", path, qf_calib_method_name(m));
    if (t->equalized[0])
        return qf_error(QF_ERR_USAGE, "%s: the table describes the cross-layer equalized graph, whose tensors are "
                        "not the ONNX model's that TensorRT runs; calibrate without --equalize", path);
    for (int i = 0; i < t->n; i++) {
        const char *name = t->entries[i].name;
        if (!name || !name[0] || strpbrk(name, "\n\r"))
            return qf_error(QF_ERR_INVALID, "%s: tensor %d's name cannot be written to a TensorRT cache", path, i);
        if (!valid_amax(t->entries[i].amax[m]))
            return qf_error(QF_ERR_INVALID, "%s: tensor %s: bad threshold %g", path, name, t->entries[i].amax[m]);
    }
    qfi_atomic_file af;
    QF_CHECK(qfi_atomic_open(&af, path));
    fprintf(af.f, "TRT-%s-%s\n", TRT_VERSION, m == QF_CALIB_MINMAX ? "MinMaxCalibration" : "EntropyCalibration2");
    for (int i = 0; i < t->n; i++) {
        // TensorRT stores the scale (amax/127) as the hex of its float32 bits.
        float scale = qf_calib_scale(t->entries[i].amax[m]);
        uint32_t bits;
        memcpy(&bits, &scale, sizeof bits);
        fprintf(af.f, "%s: %08x\n", t->entries[i].name, bits);
    }
    return qfi_atomic_commit(&af);
}

qf_status qf_calib_table_check_model(const qf_calib_table *t, const char *table_path,
                                     const char *model_sha256, bool force)
{
    if (model_sha256 && !strcmp(t->model_sha256, model_sha256)) return QF_OK;
    if (force) {
        qf_log(QF_LOG_WARN, "%s: calibrated for another model (sha256 %.16s..., this model %.16s...); used anyway",
               table_path, t->model_sha256, model_sha256 ? model_sha256 : "?");
        return QF_OK;
    }
    return qf_error(QF_ERR_INVALID,
                    "%s: calibrated for another model (sha256 %.16s..., this model %.16s...); recalibrate, or force its use",
                    table_path, t->model_sha256, model_sha256 ? model_sha256 : "?");
}

/* ---- reading ----------------------------------------------------------------------- */

typedef struct reader {
    const char *path;
    char *buf;
    size_t len, pos;
    int line;       /* number of the line last returned */
} reader;

__attribute__((format(printf, 2, 3)))
static qf_status bad_line(const reader *r, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return qf_error(QF_ERR_FORMAT, "%s:%d: %s", r->path, r->line, msg);
}

/* Next line, NUL-terminated in place: 1 with *out set, 0 at the end of the file,
 * or an error (as the negated qf_status) for a line the format forbids. */
static int next_line(reader *r, char **out, qf_status *st)
{
    if (r->pos >= r->len) return 0;
    r->line++;
    char *s = r->buf + r->pos;
    size_t rest = r->len - r->pos;
    char *nl = memchr(s, '\n', rest);
    if (!nl) {
        *st = bad_line(r, "truncated: the last line has no newline");
        return -1;
    }
    size_t n = (size_t)(nl - s);
    for (size_t i = 0; i < n;) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '\r') {
            *st = bad_line(r, "carriage return (the file was converted to CRLF line ends?)");
            return -1;
        }
        if (ch < 0x20 || ch == 0x7f) {
            *st = bad_line(r, "control byte 0x%02x", ch);
            return -1;
        }
        size_t k = utf8_len((const unsigned char *)s + i, n - i);
        if (!k) {
            *st = bad_line(r, "not UTF-8 text (byte 0x%02x at column %zu)", ch, i + 1);
            return -1;
        }
        i += k;
    }
    *nl = '\0';
    r->pos += n + 1;
    *out = s;
    return 1;
}

/* The next line, which must exist (a header line or a tensor line). */
static qf_status need_line(reader *r, char **out, const char *what)
{
    qf_status st = QF_OK;
    int got = next_line(r, out, &st);
    if (got < 0) return st;
    if (got == 0) {
        r->line++;
        return bad_line(r, "truncated: the file ends where %s was expected", what);
    }
    return QF_OK;
}

/* "key value": returns the value, or NULL if the line does not start with "key ". */
static char *after_key(char *line, const char *key)
{
    size_t k = strlen(key);
    return !strncmp(line, key, k) && line[k] == ' ' ? line + k + 1 : NULL;
}

static bool parse_int64(const char *s, int64_t max, int64_t *out)
{
    if (!*s) return false;
    int64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return false;
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *p - '0', &v)) return false;
    }
    if (v > max || (s[0] == '0' && s[1])) return false;  // no leading zeros: one spelling per number
    *out = v;
    return true;
}

/* A finite float as the writer prints it (%.9g: no '+' in front). */
static bool parse_float(const char *s, float *out)
{
    if (!*s || strspn(s, "0123456789.e+-") != strlen(s) || s[0] == '+') return false;
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (*end || !isfinite(v)) return false;
    *out = v;
    return true;
}

/* A threshold as the writer prints it (%.9g of a finite float >= 0). */
static bool parse_amax(const char *s, float *out)
{
    return s[0] != '-' && parse_float(s, out) && valid_amax(*out);
}

/* Undoes put_escaped() in place; false on a malformed escape. */
static bool unescape(char *s)
{
    char *w = s;
    for (char *p = s; *p; p++) {
        if (*p != '%') {
            *w++ = *p;
            continue;
        }
        int v = 0;
        for (int k = 1; k <= 2; k++) {
            char c = p[k];
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            if (d < 0) return false;
            v = v * 16 + d;
        }
        if (v == 0) return false;
        *w++ = (char)v;
        p += 2;
    }
    *w = '\0';
    return true;
}

static qf_status parse_methods(reader *r, char *list, qf_calib_table *t)
{
    int last = -1;
    for (char *item = list, *next; item; item = next) {
        next = strchr(item, ',');
        if (next) *next++ = '\0';
        char *arg = strchr(item, '=');
        if (arg) *arg++ = '\0';
        int m = 0;
        while (m < QF_CALIB_METHOD_COUNT && strcmp(item, qf_calib_method_name(m))) m++;
        if (m == QF_CALIB_METHOD_COUNT) return bad_line(r, "unknown method '%s'", item);
        if (m <= last) return bad_line(r, "methods must be listed once each, in the order auto,entropy,minmax,percentile,mse");
        last = m;
        t->methods |= 1u << m;
        if (m == QF_CALIB_PERCENTILE) {
            char *end;
            if (!arg || !*arg || strspn(arg, "0123456789.e+-") != strlen(arg))
                return bad_line(r, "percentile needs its value (percentile=P)");
            t->percentile = strtod(arg, &end);
            if (*end || !(t->percentile > 0.0 && t->percentile <= 100.0))
                return bad_line(r, "percentile '%s' is not a number in (0, 100]", arg);
        } else if (arg) {
            return bad_line(r, "method %s takes no value", item);
        }
    }
    return QF_OK;
}

static qf_status parse_header(reader *r, qf_calib_table *t, int64_t *ntensors)
{
    char *line, *v;
    QF_CHECK(need_line(r, &line, "the header"));
    if (!(v = after_key(line, TABLE_MAGIC)))
        return bad_line(r, "not a qforge calibration table (it must start with '%s %d')", TABLE_MAGIC, QF_CALIB_TABLE_VERSION);
    int64_t version;
    if (!parse_int64(v, INT32_MAX, &version)) return bad_line(r, "bad format version '%s'", v);
    if (version < 1 || version > QF_CALIB_TABLE_VERSION)
        return bad_line(r, "format version %lld is not supported (this qforge reads versions 1 to %d)",
                   (long long)version, QF_CALIB_TABLE_VERSION);
    t->version = (int)version;

    QF_CHECK(need_line(r, &line, "the 'method' line"));
    if (!(v = after_key(line, "method"))) return bad_line(r, "expected 'method LIST'");
    t->percentile = QF_CALIB_PERCENTILE_DEFAULT;
    QF_CHECK(parse_methods(r, v, t));

    QF_CHECK(need_line(r, &line, "the 'images' line"));
    if (!(v = after_key(line, "images")) || !parse_int64(v, INT64_MAX, &t->images))
        return bad_line(r, "expected 'images COUNT'");

    QF_CHECK(need_line(r, &line, "the 'model-sha256' line"));
    if (!(v = after_key(line, "model-sha256")) || !qfi_is_sha256_hex(v))
        return bad_line(r, "expected 'model-sha256' and 64 lowercase hex digits");
    memcpy(t->model_sha256, v, 65);

    QF_CHECK(need_line(r, &line, "the 'preprocess' line"));
    if (!strcmp(line, "preprocess")) v = line + strlen(line);  // none recorded
    else if (!(v = after_key(line, "preprocess")) || !*v) return bad_line(r, "expected 'preprocess [DESCRIPTION]'");
    if (!unescape(v)) return bad_line(r, "malformed %%XX escape in the preprocessing description");
    if (!(t->preprocess = qfi_strdup(v))) return QF_ERR_NOMEM;

    /* version 2 has the 'equalized' line always, version 3 for an equalized graph */
    QF_CHECK(need_line(r, &line, t->version == 2 ? "the 'equalized' line" : "the 'tensors' line"));
    if (t->version == 2 || (t->version >= 3 && after_key(line, "equalized"))) {
        if (!(v = after_key(line, "equalized")) || !qfi_is_sha256_hex(v))
            return bad_line(r, "expected 'equalized' and 64 lowercase hex digits");
        memcpy(t->equalized, v, 65);
        QF_CHECK(need_line(r, &line, "the 'tensors' line"));
    }

    if (!(v = after_key(line, "tensors")) || !parse_int64(v, QF_MAX_VALUES, ntensors))
        return bad_line(r, "expected 'tensors COUNT' (at most %d)", QF_MAX_VALUES);
    // Every tensor line takes at least 4 bytes ("a 0\n"): check before allocating.
    if ((uint64_t)*ntensors > (r->len - r->pos) / 4)
        return bad_line(r, "%lld tensors announced, but the file is too short to hold them (truncated?)",
                   (long long)*ntensors);
    return QF_OK;
}

/* Set of names seen so far, to reject duplicates in O(1) each. */
typedef struct name_set {
    const char **slot;
    size_t mask;
} name_set;

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Inserts name; false if it was already there. */
static bool name_set_add(name_set *ns, const char *name)
{
    for (size_t i = hash_name(name) & ns->mask;; i = (i + 1) & ns->mask) {
        if (!ns->slot[i]) {
            ns->slot[i] = name;
            return true;
        }
        if (!strcmp(ns->slot[i], name)) return false;
    }
}

static qf_status parse_entry(reader *r, char *line, const qf_calib_table *t, qf_calib_entry *e)
{
    char *field[QF_CALIB_METHOD_COUNT + 3];
    int nf = 0;
    for (char *p = line;;) {
        char *sp = strchr(p, ' ');
        if (nf == (int)QF_ARRAY_LEN(field)) return bad_line(r, "too many fields");
        field[nf++] = p;
        if (!sp) break;
        *sp = '\0';
        p = sp + 1;
    }
    int want = 1 + __builtin_popcount(t->methods);
    for (int k = 0; k < nf; k++)
        if (!field[k][0]) return bad_line(r, "empty field (two spaces in a row, or a space at the end of the line)");
    /* version 3: the minimum may follow the thresholds */
    char *min = t->version >= 3 && nf == want + 1 ? field[want] : NULL;
    if (nf != want && !min)
        return bad_line(r, "expected a tensor name and %d threshold%s%s, found %d fields", want - 1, want > 2 ? "s" : "",
                        t->version >= 3 ? " (then " MIN_KEY "=VALUE or nothing)" : "", nf);
    if (!unescape(field[0])) return bad_line(r, "malformed %%XX escape in the tensor name");
    if (!(e->name = qfi_strdup(field[0]))) return QF_ERR_NOMEM;
    bool single = want == 2;
    int k = 1;
    for (int m = 0; m < QF_CALIB_METHOD_COUNT; m++) {
        if (!(t->methods & (1u << m))) continue;
        char *val = field[k++];
        if (!single) {
            char *key = val;
            char *eq = strchr(val, '=');
            if (!eq) return bad_line(r, "tensor %s: expected %s=VALUE, found '%s'", e->name, qf_calib_method_name(m), val);
            *eq = '\0';
            val = eq + 1;
            if (strcmp(key, qf_calib_method_name(m)))
                return bad_line(r, "tensor %s: expected %s=VALUE, found '%s=...' (values follow the method line's order)",
                           e->name, qf_calib_method_name(m), key);
        }
        if (!parse_amax(val, &e->amax[m]))
            return bad_line(r, "tensor %s: bad %s threshold '%s' (a finite number >= 0)", e->name, qf_calib_method_name(m), val);
    }
    if (min) {
        const size_t k = strlen(MIN_KEY "=");
        if (strncmp(min, MIN_KEY "=", k) || !parse_float(min + k, &e->min))
            return bad_line(r, "tensor %s: expected %s=VALUE (a finite number) after the thresholds, found '%s'",
                            e->name, MIN_KEY, min);
        e->has_min = true;
    }
    return QF_OK;
}

/* Reads a whole file of at most `max` bytes. */
static qf_status read_file(const char *path, size_t max, char **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return qf_error(QF_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return qf_error(QF_ERR_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)sb.st_size > max) {
        fclose(f);
        return qf_error(QF_ERR_FORMAT, "%s: %lld bytes, more than a calibration table may have (%zu)",
                        path, (long long)sb.st_size, max);
    }
    size_t size = (size_t)sb.st_size;
    char *b = malloc(size + 1);
    if (!b) {
        fclose(f);
        return qf_error(QF_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t got = fread(b, 1, size, f);
    bool err = ferror(f) || got != size || fgetc(f) != EOF;  // changed under us
    fclose(f);
    if (err) {
        free(b);
        return qf_error(QF_ERR_IO, "%s: read error (or the file changed while being read)", path);
    }
    b[size] = '\0';
    *buf = b;
    *len = size;
    return QF_OK;
}

qf_status qf_calib_table_read(const char *path, qf_calib_table **out)
{
    *out = NULL;
    reader r = {.path = path};
    QF_CHECK(read_file(path, TABLE_MAX_BYTES, &r.buf, &r.len));
    if (memchr(r.buf, '\0', r.len)) {
        // Name the line: count the newlines before the first NUL.
        const char *z = memchr(r.buf, '\0', r.len);
        for (const char *p = r.buf; p < z; p++) r.line += *p == '\n';
        r.line++;
        qf_status st = bad_line(&r, "NUL byte (a binary file?)");
        free(r.buf);
        return st;
    }
    qf_calib_table *t = qfi_calloc(1, sizeof *t);
    name_set ns = {0};
    qf_status st = t ? QF_OK : QF_ERR_NOMEM;
    int64_t n = 0;
    if (st == QF_OK) st = parse_header(&r, t, &n);
    if (st == QF_OK) {
        size_t cap = 16;
        while (cap < 2 * (size_t)n) cap *= 2;
        ns.mask = cap - 1;
        ns.slot = qfi_calloc(cap, sizeof *ns.slot);
        t->entries = qfi_calloc((size_t)n, sizeof *t->entries);
        if (!ns.slot || !t->entries) st = QF_ERR_NOMEM;
    }
    for (int64_t i = 0; st == QF_OK && i < n; i++) {
        char *line;
        qf_status got = QF_OK;
        int k = next_line(&r, &line, &got);
        if (k < 0) {
            st = got;
        } else if (k == 0) {
            r.line++;
            st = bad_line(&r, "truncated: %lld tensor lines announced, the file ends after %lld",
                     (long long)n, (long long)i);
        } else {
            st = parse_entry(&r, line, t, &t->entries[i]);
            if (st == QF_OK) t->n++;
            else if (t->entries[i].name) free(t->entries[i].name), t->entries[i].name = NULL;
            if (st == QF_OK && !name_set_add(&ns, t->entries[i].name))
                st = bad_line(&r, "tensor %s listed twice", t->entries[i].name);
        }
    }
    if (st == QF_OK) {
        char *line;
        int k = next_line(&r, &line, &st);
        if (k > 0) st = bad_line(&r, "unexpected line after the %lld tensors announced", (long long)n);
        else if (k == 0) st = QF_OK;
    }
    free(ns.slot);
    free(r.buf);
    if (st != QF_OK) {
        qf_calib_table_free(t);
        return st;
    }
    *out = t;
    return QF_OK;
}
