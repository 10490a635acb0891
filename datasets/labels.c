/* Class lists (synsets.txt, --classes files, class folders) and the three
 * label sources of a dataset: class folders, ImageNet wnid prefixes, and
 * `relative/path index` label lists. */
#include <ctype.h>
#include <errno.h>
#include <sys/stat.h>
#include "datasets_impl.h"

// Class lists and label lists larger than this are refused.
#define MAX_TEXT_BYTES (256u << 20)
#define MAX_LABEL 100000000

struct qf_classes {
    int n;
    char **key, **name;
    int *by_key;  // indices sorted by key, for qf_classes_find
};

qf_status qfi_read_text_file(const char *path, size_t max_bytes, char **out, size_t *len)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return qf_error(QF_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return qf_error(QF_ERR_IO, "%s: not a regular file", path);
    }
    if ((unsigned long long)sb.st_size > max_bytes) {
        fclose(f);
        return qf_error(QF_ERR_NOMEM, "%s: %lld bytes, larger than the %zu qforge reads", path,
                        (long long)sb.st_size, max_bytes);
    }
    char *buf = malloc((size_t)sb.st_size + 1);
    if (!buf) {
        fclose(f);
        return qf_error(QF_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t got = fread(buf, 1, (size_t)sb.st_size, f);
    bool err = ferror(f) != 0;
    fclose(f);
    if (err) {
        free(buf);
        return qf_error(QF_ERR_IO, "%s: read error", path);
    }
    buf[got] = 0;
    if (memchr(buf, 0, got)) {
        free(buf);
        return qf_error(QF_ERR_FORMAT, "%s: not a text file (contains NUL bytes)", path);
    }
    *out = buf;
    *len = got;
    return QF_OK;
}

// Cuts text into lines in place (handles \n and \r\n), trimming spaces at
// both ends; returns the number of lines, trailing empty lines dropped.
static int split_lines(char *text, char ***lines)
{
    int n = 0, cap = 0;
    char **v = NULL;
    for (char *p = text; *p;) {
        char *e = strchr(p, '\n');
        char *next = e ? e + 1 : p + strlen(p);
        if (e) *e = 0;
        while (isspace((unsigned char)*p)) p++;
        size_t l = strlen(p);
        while (l > 0 && isspace((unsigned char)p[l - 1])) p[--l] = 0;
        if (n == cap) {
            cap = cap ? cap * 2 : 1024;
            char **nv = realloc(v, sizeof(char *) * (size_t)cap);
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
        }
        v[n++] = p;
        p = next;
    }
    while (n > 0 && v[n - 1][0] == 0) n--;
    *lines = v;
    return n;
}

static int cmp_key(const void *a, const void *b, void *ctx)
{
    const qf_classes *c = ctx;
    return strcmp(c->key[*(const int *)a], c->key[*(const int *)b]);
}

// Builds the lookup index; fails on a duplicate key, naming `src`.
static qf_status index_keys(qf_classes *c, const char *src)
{
    c->by_key = malloc(sizeof(int) * (size_t)(c->n ? c->n : 1));
    if (!c->by_key) return qf_error(QF_ERR_NOMEM, "%s: out of memory", src);
    for (int i = 0; i < c->n; i++) c->by_key[i] = i;
    qsort_r(c->by_key, (size_t)c->n, sizeof(int), cmp_key, c);
    for (int i = 1; i < c->n; i++)
        if (strcmp(c->key[c->by_key[i - 1]], c->key[c->by_key[i]]) == 0)
            return qf_error(QF_ERR_FORMAT, "%s: class '%s' is listed twice (lines %d and %d)", src,
                            c->key[c->by_key[i]], c->by_key[i - 1] + 1, c->by_key[i] + 1);
    return QF_OK;
}

static qf_classes *classes_new(int n)
{
    qf_classes *c = qfi_calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->key = qfi_calloc((size_t)(n ? n : 1), sizeof(char *));
    c->name = qfi_calloc((size_t)(n ? n : 1), sizeof(char *));
    if (!c->key || !c->name) {
        qf_classes_free(c);
        return NULL;
    }
    return c;
}

void qf_classes_free(qf_classes *c)
{
    if (!c) return;
    for (int i = 0; i < c->n; i++) {
        if (c->name[i] != c->key[i]) free(c->name[i]);
        free(c->key[i]);
    }
    free(c->key);
    free(c->name);
    free(c->by_key);
    free(c);
}

// synsets: "wnid name..." per line; lines: the whole line is key and name.
static qf_status read_classes(const char *path, bool synsets, qf_classes **out)
{
    *out = NULL;
    char *text;
    size_t len;
    QF_CHECK(qfi_read_text_file(path, MAX_TEXT_BYTES, &text, &len));
    char **lines;
    int n = split_lines(text, &lines);
    qf_status st = QF_OK;
    qf_classes *c = n < 0 ? NULL : classes_new(n);
    if (!c) {
        st = qf_error(QF_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    if (n == 0) {
        st = qf_error(QF_ERR_FORMAT, "%s: no classes in this file", path);
        goto done;
    }
    for (int i = 0; i < n && st == QF_OK; i++, c->n++) {
        char *l = lines[i];
        // A blank line would shift every class after it by one: refuse it.
        if (!*l) {
            st = qf_error(QF_ERR_FORMAT, "%s:%d: empty line among the classes", path, i + 1);
            break;
        }
        char *rest = l + strlen(l);
        if (synsets) {
            rest = l;
            while (*rest && !isspace((unsigned char)*rest)) rest++;
            if (*rest) *rest++ = 0;
            while (isspace((unsigned char)*rest)) rest++;
        }
        c->key[i] = qfi_strdup(l);
        c->name[i] = *rest ? qfi_strdup(rest) : c->key[i];
        if (!c->key[i] || !c->name[i]) st = QF_ERR_NOMEM;
    }
    if (st == QF_OK) st = index_keys(c, path);
done:
    free(lines);
    free(text);
    if (st != QF_OK) {
        qf_classes_free(c);
        return st;
    }
    *out = c;
    return QF_OK;
}

qf_status qf_classes_read_synsets(const char *path, qf_classes **out) { return read_classes(path, true, out); }
qf_status qf_classes_read_lines(const char *path, qf_classes **out) { return read_classes(path, false, out); }

qf_status qfi_classes_from_names(char *const *names, int n, qf_classes **out)
{
    *out = NULL;
    qf_classes *c = classes_new(n);
    if (!c) return QF_ERR_NOMEM;
    for (; c->n < n; c->n++) {
        c->key[c->n] = c->name[c->n] = qfi_strdup(names[c->n]);
        if (!c->key[c->n]) {
            qf_classes_free(c);
            return QF_ERR_NOMEM;
        }
    }
    qf_status st = index_keys(c, "class folders");
    if (st != QF_OK) {
        qf_classes_free(c);
        return st;
    }
    *out = c;
    return QF_OK;
}

int qf_classes_count(const qf_classes *c) { return c->n; }

const char *qf_classes_key(const qf_classes *c, int k)
{
    QF_ASSERT(k >= 0 && k < c->n);
    return c->key[k];
}

const char *qf_classes_name(const qf_classes *c, int k)
{
    QF_ASSERT(k >= 0 && k < c->n);
    return c->name[k];
}

int qf_classes_find(const qf_classes *c, const char *key)
{
    int lo = 0, hi = c->n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        int r = strcmp(c->key[c->by_key[mid]], key);
        if (r == 0) return c->by_key[mid];
        if (r < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

// ---- dataset labels ---------------------------------------------------------------

// Looks up every file's key (a prefix of its path that `key_of` copies into
// buf) in `c` and, if all are found, gives the dataset labels and classes.
static qf_status label_by_key(qf_dataset *ds, qf_classes *c, const char *src, const char *what,
                              bool (*key_of)(const char *rel, char *buf, size_t size))
{
    int *labels = malloc(sizeof(int) * (size_t)(ds->n ? ds->n : 1));
    if (!labels) {
        qf_classes_free(c);
        return qf_error(QF_ERR_NOMEM, "out of memory for labels");
    }
    char key[1024];
    for (int64_t i = 0; i < ds->n; i++) {
        const char *rel = qf_dataset_path(ds, i);
        bool has_key = key_of(rel, key, sizeof(key));
        labels[i] = has_key ? qf_classes_find(c, key) : -1;
        if (labels[i] < 0) {
            qf_status st = has_key ? qf_error(QF_ERR_INVALID, "%s: no label: %s '%s' is not in %s",
                                              qf_dataset_full_path(ds, i), what, key, src)
                                   : qf_error(QF_ERR_INVALID, "%s: no label: the file has no %s",
                                              qf_dataset_full_path(ds, i), what);
            free(labels);
            qf_classes_free(c);
            return st;
        }
    }
    free(ds->labels);
    qf_classes_free(ds->classes);
    ds->labels = labels;
    ds->classes = c;
    return QF_OK;
}

static bool copy_prefix(const char *s, size_t n, char *buf, size_t size)
{
    if (n >= size) n = size - 1;
    memcpy(buf, s, n);
    buf[n] = 0;
    return n > 0;
}

// The first path component ("cat" of "cat/0001.jpg"); false at the top level.
static bool first_component(const char *rel, char *buf, size_t size)
{
    const char *slash = strchr(rel, '/');
    if (!slash) {
        copy_prefix(rel, strlen(rel), buf, size);
        return false;
    }
    return copy_prefix(rel, (size_t)(slash - rel), buf, size);
}

// The wnid of "…/n01440764_tench.JPEG": the file name up to its first '_'.
static bool wnid_prefix(const char *rel, char *buf, size_t size)
{
    const char *base = strrchr(rel, '/');
    base = base ? base + 1 : rel;
    const char *us = strchr(base, '_');
    return copy_prefix(base, us ? (size_t)(us - base) : strlen(base), buf, size) && us;
}

qf_status qf_dataset_label_folders(qf_dataset *ds, const char *classes_file)
{
    if (!ds->root) return qf_error(QF_ERR_USAGE, "labels from class folders need an image folder");
    qf_classes *c;
    if (classes_file) QF_CHECK(qf_classes_read_lines(classes_file, &c));
    else QF_CHECK(qfi_classes_from_names(ds->folders, ds->n_folders, &c));
    char src[1100];
    snprintf(src, sizeof(src), "%s", classes_file ? classes_file : ds->root);
    return label_by_key(ds, c, src, "class folder", first_component);
}

qf_status qf_dataset_label_synsets(qf_dataset *ds, const char *synsets_file)
{
    qf_classes *c;
    QF_CHECK(qf_classes_read_synsets(synsets_file, &c));
    return label_by_key(ds, c, synsets_file, "wnid (name prefix before '_')", wnid_prefix);
}

typedef struct path_index {
    const char *rel;
    int64_t i;
} path_index;

static int cmp_path_index(const void *a, const void *b)
{
    return strcmp(((const path_index *)a)->rel, ((const path_index *)b)->rel);
}

qf_status qf_dataset_label_list(qf_dataset *ds, const char *labels_file)
{
    char *text;
    size_t len;
    QF_CHECK(qfi_read_text_file(labels_file, MAX_TEXT_BYTES, &text, &len));
    char **lines = NULL;
    int nl = split_lines(text, &lines);
    int *labels = malloc(sizeof(int) * (size_t)(ds->n ? ds->n : 1));
    path_index *byp = malloc(sizeof(path_index) * (size_t)(ds->n ? ds->n : 1));
    qf_status st = QF_OK;
    if (nl < 0 || !labels || !byp) {
        st = qf_error(QF_ERR_NOMEM, "%s: out of memory", labels_file);
        goto done;
    }
    for (int64_t i = 0; i < ds->n; i++) {
        labels[i] = -1;
        byp[i] = (path_index){qf_dataset_path(ds, i), i};
    }
    qsort(byp, (size_t)ds->n, sizeof(*byp), cmp_path_index);

    for (int ln = 0; ln < nl; ln++) {
        char *l = lines[ln];
        if (!*l) continue;
        // The index is the last field, so a path may contain spaces.
        char *sp = l + strlen(l);
        while (sp > l && !isspace((unsigned char)sp[-1])) sp--;
        char *end;
        errno = 0;
        long v = strtol(sp, &end, 10);
        if (sp == l || errno || end == sp || *end || v < 0 || v > MAX_LABEL) {
            st = qf_error(QF_ERR_FORMAT, "%s:%d: expected 'relative/path index'", labels_file, ln + 1);
            goto done;
        }
        char *pe = sp;
        while (pe > l && isspace((unsigned char)pe[-1])) pe--;
        *pe = 0;
        while (strncmp(l, "./", 2) == 0) l += 2;
        path_index key = {l, 0}, *hit = bsearch(&key, byp, (size_t)ds->n, sizeof(*byp), cmp_path_index);
        if (!hit) continue;  // a list for a whole set labels a subset too
        if (labels[hit->i] >= 0 && labels[hit->i] != (int)v) {
            st = qf_error(QF_ERR_FORMAT, "%s:%d: %s is labelled twice (%d and %ld)", labels_file, ln + 1, l,
                          labels[hit->i], v);
            goto done;
        }
        labels[hit->i] = (int)v;
    }
    for (int64_t i = 0; i < ds->n; i++)
        if (labels[i] < 0) {
            st = qf_error(QF_ERR_INVALID, "%s: no label in %s (as '%s')", qf_dataset_full_path(ds, i),
                          labels_file, qf_dataset_path(ds, i));
            goto done;
        }
    free(ds->labels);
    qf_classes_free(ds->classes);
    ds->labels = labels;
    ds->classes = NULL;
    labels = NULL;
done:
    free(labels);
    free(byp);
    free(lines);
    free(text);
    return st;
}

bool qf_dataset_has_labels(const qf_dataset *ds) { return ds->labels != NULL; }

int qf_dataset_label(const qf_dataset *ds, int64_t i)
{
    QF_ASSERT(i >= 0 && i < ds->n);
    return ds->labels ? ds->labels[i] : -1;
}

const qf_classes *qf_dataset_classes(const qf_dataset *ds) { return ds->classes; }
