/* The .qfm model file (qforge-model(5)): the writer, and a reader that treats
 * every file as hostile -- bounds, counts, overflow, CRC-32 per section --
 * before it rebuilds the graph, reparses every node and re-checks its shapes.
 * The man page is the specification; the constants below are its numbers. */
#include "internal.h"
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* ---- the layout (qforge-model(5)) ------------------------------------------------------ */
static const uint8_t MAGIC[4] = {'Q', 'F', 'M', 0};
#define HEADER_BYTES 32
#define ENTRY_BYTES 32
#define MAX_SECTIONS 64
#define WEIGHT_ALIGN 64
enum { SEC_META = 1, SEC_GRAPH = 2, SEC_WEIGHTS = 3, SEC_KNOWN_END };
static const char *const sec_names[SEC_KNOWN_END] = {NULL, "META", "GRAPH", "WEIGHTS"};

/* Hard bounds of format version 1 (beyond QF_MAX_NODES, QF_MAX_VALUES,
 * QF_MAX_DIMS and QF_MAX_TENSOR_BYTES of graph.h). */
#define MAX_NAME 4096          /* value and node names, bytes */
#define MAX_ATTR_NAME 256
#define MAX_STRING 65536       /* string attributes and META values */
#define MAX_META_KEYS 256
#define MAX_META_KEY 64
#define MAX_NODE_IO 4096       /* inputs or outputs of one node */
#define MAX_ATTRS 1024         /* attributes of one node */
#define MAX_ATTR_ELEMS (1 << 24)
#define MAX_BATCH (1 << 20)
#define MAX_OPSET 1000
#define VALUE_FLAGS (QF_VALUE_INPUT | QF_VALUE_OUTPUT | QF_VALUE_CONST)
/* Fewest bytes a record can take: counts are checked against them before anything is allocated. */
#define MIN_VALUE_BYTES 13     /* name length + 1-byte name + dtype, ndim, flags, scale */
#define MIN_NODE_BYTES 32      /* name length, op, precision/act, act_lo/hi, three counts, one output */
#define MIN_ATTR_BYTES 9       /* name length + 1-byte name + type and padding */
#define MIN_META_BYTES 9       /* two lengths + 1-byte key */

void qf_qfm_meta_init(qf_qfm_meta *m)
{
    memset(m, 0, sizeof *m);
    m->precision = QF_PREC_INT8;
}

/* ---- little-endian encoding ---------------------------------------------------------- */
static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }

/* zlib's crc32 takes a 32-bit length: large sections go in pieces. */
static uint32_t crc_update(uint32_t crc, const uint8_t *p, uint64_t n)
{
    while (n > 0) {
        uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = (uint32_t)crc32(crc, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return crc;
}
static uint32_t crc_of(const uint8_t *p, uint64_t n) { return crc_update((uint32_t)crc32(0, NULL, 0), p, n); }

static uint64_t align_up(uint64_t x) { return (x + WEIGHT_ALIGN - 1) / WEIGHT_ALIGN * WEIGHT_ALIGN; }

/* Bytes of a tensor of this dtype and shape; false if a dim is negative or
 * the total exceeds QF_MAX_TENSOR_BYTES (checked without overflow). */
static bool tensor_bytes(qf_dtype dt, int ndim, const int64_t *dims, uint64_t *out)
{
    uint64_t b = qf_dtype_info(dt)->size;
    for (int d = 0; d < ndim; d++)
        if (dims[d] < 0 || dims[d] > QF_MAX_TENSOR_BYTES || __builtin_mul_overflow(b, (uint64_t)dims[d], &b))
            return false;
    *out = b;
    return b <= (uint64_t)QF_MAX_TENSOR_BYTES;
}

/* ---- writing ------------------------------------------------------------------------ */

typedef struct wbuf {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} wbuf;

static void wb_put(wbuf *b, const void *src, size_t n)
{
    if (b->oom || n == 0) return;
    if (b->cap - b->n < n) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap - b->n < n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void wb_u8(wbuf *b, uint8_t v) { wb_put(b, &v, 1); }
static void wb_u16(wbuf *b, uint16_t v) { wb_put(b, (uint8_t[2]){(uint8_t)v, (uint8_t)(v >> 8)}, 2); }
static void wb_u32(wbuf *b, uint32_t v)
{
    uint8_t t[4];
    put32(t, v);
    wb_put(b, t, 4);
}
static void wb_u64(wbuf *b, uint64_t v)
{
    uint8_t t[8];
    put64(t, v);
    wb_put(b, t, 8);
}
static void wb_f32(wbuf *b, float f) { wb_u32(b, qfi_f32_bits(f)); }
static void wb_str(wbuf *b, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    wb_u32(b, (uint32_t)n);
    wb_put(b, s, n);
}

/* Strings in a .qfm are one line of text: no NUL, no control characters
 * (they end up in one-line error messages). */
static bool has_control(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] < 0x20 || p[i] == 0x7f) return true;
    return false;
}

/* What the writer checks so that it never writes a file the reader refuses. */
static qf_status check_name(const char *path, const char *what, const char *s, size_t lo, size_t hi)
{
    size_t n = s ? strlen(s) : 0;
    if (n < lo || n > hi)
        return qf_error(QF_ERR_INVALID, "%s: %s '%.64s' has %zu bytes; the format allows %zu to %zu", path, what,
                        s ? s : "", n, lo, hi);
    if (has_control((const uint8_t *)s, n))
        return qf_error(QF_ERR_INVALID, "%s: %s has a control character, which the format does not allow", path, what);
    return QF_OK;
}

static int cmp_str_ptr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The first name that appears twice, or NULL. Sorts `names`. */
static const char *duplicate_name(char **names, size_t n)
{
    qsort(names, n, sizeof *names, cmp_str_ptr);
    for (size_t i = 1; i < n; i++)
        if (strcmp(names[i - 1], names[i]) == 0) return names[i];
    return NULL;
}

static bool is_method_name(const char *s)
{
    for (int m = 0; m < QF_CALIB_METHOD_COUNT; m++)
        if (strcmp(s, qf_calib_method_name((qf_calib_method)m)) == 0) return true;
    return false;
}

static void write_meta(wbuf *b, const qf_qfm_meta *m)
{
    char images[32];
    snprintf(images, sizeof images, "%lld", (long long)m->calib_images);
    const char *kv[][2] = {
        {"tool_version", qf_version()},
        {"precision", qf_precision_name(m->precision)},
        {"calib_method", m->calib_method},
        {"calib_images", images},
        {"source_sha256", m->source_sha256},
        {"preprocess", m->preprocess},
    };
    wb_u32(b, (uint32_t)QF_ARRAY_LEN(kv));
    for (size_t i = 0; i < QF_ARRAY_LEN(kv); i++) {
        wb_str(b, kv[i][0]);
        wb_str(b, kv[i][1]);
    }
}

static qf_status check_meta(const char *path, const qf_qfm_meta *m)
{
    if (memchr(m->preprocess, 0, sizeof m->preprocess) == NULL || memchr(m->calib_method, 0, sizeof m->calib_method) == NULL ||
        memchr(m->source_sha256, 0, sizeof m->source_sha256) == NULL)
        return qf_error(QF_ERR_USAGE, "%s: a metadata string is not NUL-terminated", path);
    if ((unsigned)m->precision >= QF_PRECISION_COUNT)
        return qf_error(QF_ERR_USAGE, "%s: precision %d is not one of fp32, fp16, int8", path, (int)m->precision);
    if (m->calib_method[0] && !is_method_name(m->calib_method))
        return qf_error(QF_ERR_USAGE, "%s: unknown calibration method '%s'", path, m->calib_method);
    if (m->source_sha256[0] && !qfi_is_sha256_hex(m->source_sha256))
        return qf_error(QF_ERR_USAGE, "%s: source SHA-256 '%s' is not 64 lowercase hex digits", path, m->source_sha256);
    qf_preprocess pp;
    qf_preprocess_init(&pp);
    if (has_control((const uint8_t *)m->preprocess, strlen(m->preprocess)))
        return qf_error(QF_ERR_USAGE, "%s: the preprocessing text has a control character", path);
    if (qf_preprocess_parse(&pp, m->preprocess) != QF_OK)
        return qf_error_prefix(QF_ERR_USAGE, "%s: the preprocessing text is not qforge options", path);
    if (m->calib_images < 0)
        return qf_error(QF_ERR_USAGE, "%s: calibration image count %lld is negative", path, (long long)m->calib_images);
    return QF_OK;
}

static void write_dims(wbuf *b, int ndim, const int64_t *dims)
{
    for (int d = 0; d < ndim; d++) wb_u64(b, (uint64_t)dims[d]);
}

static qf_status write_attr(wbuf *b, const char *path, const qf_node *n, const qf_attr *a)
{
    QF_CHECK(check_name(path, "attribute name", a->name, 1, MAX_ATTR_NAME));
    if ((unsigned)a->type >= QF_ATTR_TYPE_COUNT)
        return qf_error(QF_ERR_INVALID, "%s: node %s: attribute %s has type %d", path, n->name, a->name, (int)a->type);
    wb_str(b, a->name);
    wb_u8(b, (uint8_t)a->type);
    wb_put(b, (uint8_t[3]){0, 0, 0}, 3);
    switch (a->type) {
    case QF_ATTR_INT: wb_u64(b, (uint64_t)a->i); break;
    case QF_ATTR_FLOAT: wb_f32(b, a->f); break;
    case QF_ATTR_STRING:
        QF_CHECK(check_name(path, "string attribute", a->s, 0, MAX_STRING));
        wb_str(b, a->s);
        break;
    case QF_ATTR_INTS:
    case QF_ATTR_FLOATS:
        if (a->n < 0 || a->n > MAX_ATTR_ELEMS)
            return qf_error(QF_ERR_INVALID, "%s: node %s: attribute %s has %d elements", path, n->name, a->name, a->n);
        wb_u32(b, (uint32_t)a->n);
        for (int i = 0; i < a->n; i++) {
            if (a->type == QF_ATTR_INTS) wb_u64(b, (uint64_t)a->ints[i]);
            else wb_f32(b, a->floats[i]);
        }
        break;
    case QF_ATTR_TENSOR: {
        const qf_value *t = a->t;
        uint64_t bytes;
        if (!t || !t->data || (unsigned)t->dtype >= QF_DTYPE_COUNT || t->ndim < 0 || t->ndim > QF_MAX_DIMS ||
            !tensor_bytes(t->dtype, t->ndim, t->dims, &bytes))
            return qf_error(QF_ERR_INVALID, "%s: node %s: tensor attribute %s is malformed", path, n->name, a->name);
        QF_CHECK(check_name(path, "tensor attribute name", t->name, 0, MAX_NAME));
        wb_str(b, t->name);
        wb_u8(b, (uint8_t)t->dtype);
        wb_u8(b, (uint8_t)t->ndim);
        wb_u16(b, 0);
        write_dims(b, t->ndim, t->dims);
        wb_u64(b, bytes);
        wb_put(b, t->data, (size_t)bytes);
        break;
    }
    default: break;
    }
    return QF_OK;
}

/* Serializes the graph; `map` numbers the values that are written (-1: left
 * out), `woff` gives each constant's offset in WEIGHTS. */
static qf_status write_graph(wbuf *b, const char *path, const qf_graph *g, const int *map, int nv,
                             const uint64_t *woff)
{
    wb_u32(b, (uint32_t)nv);
    wb_u32(b, (uint32_t)g->n_nodes);
    wb_u32(b, (uint32_t)g->n_inputs);
    wb_u32(b, (uint32_t)g->n_outputs);
    wb_u64(b, (uint64_t)g->opset);
    wb_u32(b, (uint32_t)g->batch);
    wb_u32(b, 0);
    for (int v = 0; v < g->n_values; v++) {
        if (map[v] < 0) continue;
        const qf_value *x = &g->values[v];
        uint64_t bytes;
        QF_CHECK(check_name(path, "tensor name", x->name, 1, MAX_NAME));
        if ((unsigned)x->dtype >= QF_DTYPE_COUNT || x->ndim < 0 || x->ndim > QF_MAX_DIMS ||
            !tensor_bytes(x->dtype, x->ndim, x->dims, &bytes))
            return qf_error(QF_ERR_INVALID, "%s: tensor %s has no valid dtype and shape (is the graph prepared?)", path,
                            x->name);
        if ((x->flags & ~(unsigned)VALUE_FLAGS) || ((x->flags & QF_VALUE_CONST) && !x->data))
            return qf_error(QF_ERR_INVALID, "%s: tensor %s: flags 0x%x", path, x->name, x->flags);
        if (!isfinite(x->scale) || x->scale < 0 || (x->dtype == QF_I8 && !(x->flags & QF_VALUE_CONST) && !(x->scale > 0)))
            return qf_error(QF_ERR_INVALID, "%s: tensor %s has scale %g", path, x->name, (double)x->scale);
        wb_str(b, x->name);
        wb_u8(b, (uint8_t)x->dtype);
        wb_u8(b, (uint8_t)x->ndim);
        wb_u16(b, (uint16_t)x->flags);
        wb_f32(b, x->scale);
        write_dims(b, x->ndim, x->dims);
        if (x->flags & QF_VALUE_CONST) {
            wb_u64(b, woff[v]);
            wb_u64(b, bytes);
        }
    }
    for (int i = 0; i < g->n_inputs; i++) wb_u32(b, (uint32_t)map[g->inputs[i]]);
    for (int i = 0; i < g->n_outputs; i++) wb_u32(b, (uint32_t)map[g->outputs[i]]);
    for (int i = 0; i < g->n_nodes; i++) {
        const qf_node *n = &g->nodes[i];
        QF_CHECK(check_name(path, "node name", n->name, 0, MAX_NAME));
        if ((unsigned)n->op >= QF_OP_COUNT || (unsigned)n->precision >= QF_PRECISION_COUNT ||
            (unsigned)n->act >= QF_ACT_COUNT || !isfinite(n->act_lo) || !isfinite(n->act_hi) || n->n_in < 0 ||
            n->n_in > MAX_NODE_IO || n->n_out < 1 || n->n_out > MAX_NODE_IO || n->n_attr < 0 || n->n_attr > MAX_ATTRS)
            return qf_error(QF_ERR_INVALID, "%s: node %s cannot be stored (op, precision, activation or counts out of range)",
                            path, n->name);
        wb_str(b, n->name);
        wb_u32(b, (uint32_t)n->op);
        wb_u8(b, (uint8_t)n->precision);
        wb_u8(b, (uint8_t)n->act);
        wb_u16(b, 0);
        wb_f32(b, n->act_lo);
        wb_f32(b, n->act_hi);
        wb_u32(b, (uint32_t)n->n_in);
        wb_u32(b, (uint32_t)n->n_out);
        wb_u32(b, (uint32_t)n->n_attr);
        for (int k = 0; k < n->n_in; k++) wb_u32(b, (uint32_t)(n->in[k] >= 0 ? map[n->in[k]] : -1));
        for (int k = 0; k < n->n_out; k++) wb_u32(b, (uint32_t)(n->out[k] >= 0 ? map[n->out[k]] : -1));
        for (int a = 0; a < n->n_attr; a++) QF_CHECK(write_attr(b, path, n, &n->attrs[a]));
    }
    return b->oom ? qf_error(QF_ERR_NOMEM, "%s: out of memory serializing the graph", path) : QF_OK;
}

static bool wr(FILE *f, const void *p, size_t n) { return n == 0 || fwrite(p, 1, n, f) == n; }

static bool wr_zeros(FILE *f, uint64_t n)
{
    static const uint8_t zero[WEIGHT_ALIGN];
    for (; n > 0; n -= n > WEIGHT_ALIGN ? WEIGHT_ALIGN : n)
        if (!wr(f, zero, n > WEIGHT_ALIGN ? WEIGHT_ALIGN : (size_t)n)) return false;
    return true;
}

qf_status qf_qfm_write(const qf_graph *g, const qf_qfm_meta *meta, const char *path)
{
    if (!g || !path) return qf_error(QF_ERR_USAGE, "qf_qfm_write: no graph or no path");
    if (g->batch < 1 || g->batch > MAX_BATCH)
        return qf_error(QF_ERR_USAGE, "%s: the graph must be prepared (batch %d) before it is written", path, g->batch);
    if (g->opset < 1 || g->opset > MAX_OPSET)
        return qf_error(QF_ERR_INVALID, "%s: opset %lld cannot be stored", path, (long long)g->opset);
    qf_qfm_meta m;
    if (meta) m = *meta;
    else qf_qfm_meta_init(&m);
    QF_CHECK(check_meta(path, &m));

    /* values no node, input or output refers to (dropped weights) are left out */
    int *map = qfi_calloc((size_t)g->n_values + 1, sizeof *map);
    uint64_t *woff = qfi_calloc((size_t)g->n_values + 1, sizeof *woff);
    char **names = qfi_calloc((size_t)g->n_values + 1, sizeof *names);
    wbuf mb = {0}, gb = {0};
    qf_status st = QF_OK;
    qfi_atomic_file af = {0};
    if (!map || !woff || !names) {
        st = QF_ERR_NOMEM;
        goto out;
    }
    for (int v = 0; v < g->n_values; v++) map[v] = -1;
    for (int i = 0; i < g->n_inputs; i++) map[g->inputs[i]] = 0;
    for (int i = 0; i < g->n_outputs; i++) map[g->outputs[i]] = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const qf_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] >= 0) map[n->in[k]] = 0;
        for (int k = 0; k < n->n_out; k++)
            if (n->out[k] >= 0) map[n->out[k]] = 0;
    }
    int nv = 0;
    uint64_t wsize = 0;
    for (int v = 0; v < g->n_values; v++) {
        if (map[v] < 0) continue;
        names[nv] = g->values[v].name;
        map[v] = nv++;
        const qf_value *x = &g->values[v];
        uint64_t bytes;
        if ((x->flags & QF_VALUE_CONST) && x->data && (unsigned)x->dtype < QF_DTYPE_COUNT &&
            tensor_bytes(x->dtype, x->ndim, x->dims, &bytes)) {
            woff[v] = align_up(wsize);
            wsize = woff[v] + bytes;
        }
    }
    const char *dup = duplicate_name(names, (size_t)nv);
    if (dup) {
        st = qf_error(QF_ERR_INVALID, "%s: two tensors are named %s", path, dup);
        goto out;
    }
    write_meta(&mb, &m);
    if (mb.oom) {
        st = qf_error(QF_ERR_NOMEM, "%s: out of memory", path);
        goto out;
    }
    st = write_graph(&gb, path, g, map, nv, woff);
    if (st != QF_OK) goto out;

    /* header, table, META, GRAPH, zeros up to a multiple of 64, WEIGHTS */
    const uint64_t table_end = HEADER_BYTES + 3 * ENTRY_BYTES;
    const uint64_t meta_off = table_end, graph_off = meta_off + mb.n, wts_off = align_up(graph_off + gb.n);
    const uint64_t file_size = wts_off + wsize;
    uint32_t wcrc = (uint32_t)crc32(0, NULL, 0);
    {
        static const uint8_t zero[WEIGHT_ALIGN];
        uint64_t at = 0;
        for (int v = 0; v < g->n_values; v++) {
            if (map[v] < 0 || !(g->values[v].flags & QF_VALUE_CONST)) continue;
            wcrc = crc_update(wcrc, zero, woff[v] - at);
            uint64_t bytes = qf_value_bytes(&g->values[v]);
            wcrc = crc_update(wcrc, g->values[v].data, bytes);
            at = woff[v] + bytes;
        }
    }
    uint8_t head[HEADER_BYTES + 3 * ENTRY_BYTES] = {0};
    memcpy(head, MAGIC, 4);
    put32(head + 4, (uint32_t)QF_QFM_VERSION_MAJOR << 16 | QF_QFM_VERSION_MINOR);
    put64(head + 8, file_size);
    put32(head + 16, 3);
    const struct {
        uint32_t type;
        uint64_t off, size;
        uint32_t crc;
    } sec[3] = {
        {SEC_META, meta_off, mb.n, crc_of(mb.p, mb.n)},
        {SEC_GRAPH, graph_off, gb.n, crc_of(gb.p, gb.n)},
        {SEC_WEIGHTS, wts_off, wsize, wcrc},
    };
    for (int i = 0; i < 3; i++) {
        uint8_t *e = head + HEADER_BYTES + i * ENTRY_BYTES;
        put32(e, sec[i].type);
        put64(e + 8, sec[i].off);
        put64(e + 16, sec[i].size);
        put32(e + 24, sec[i].crc);
    }
    put32(head + 24, crc_of(head + HEADER_BYTES, 3 * ENTRY_BYTES));
    put32(head + 28, crc_of(head, 28));

    st = qfi_atomic_open(&af, path);
    if (st != QF_OK) goto out;
    bool ok = wr(af.f, head, sizeof head) && wr(af.f, mb.p, mb.n) && wr(af.f, gb.p, gb.n) &&
              wr_zeros(af.f, wts_off - (graph_off + gb.n));
    uint64_t at = 0;
    for (int v = 0; v < g->n_values && ok; v++) {
        if (map[v] < 0 || !(g->values[v].flags & QF_VALUE_CONST)) continue;
        uint64_t bytes = qf_value_bytes(&g->values[v]);
        ok = wr_zeros(af.f, woff[v] - at) && wr(af.f, g->values[v].data, (size_t)bytes);
        at = woff[v] + bytes;
    }
    if (!ok) {
        int err = errno;
        qfi_atomic_abort(&af);
        st = qf_error(QF_ERR_IO, "%s: write failed: %s", path, strerror(err ? err : EIO));
        goto out;
    }
    st = qfi_atomic_commit(&af);
out:
    free(map);
    free(woff);
    free(names);
    free(mb.p);
    free(gb.p);
    return st;
}

/* ---- reading ------------------------------------------------------------------------ */

/* A cursor over one section. The first failure is recorded (message set, `bad`
 * true); every later read returns zeros, so a parser checks `bad` before it
 * uses a count to allocate. */
typedef struct rd {
    const uint8_t *p;
    uint64_t left;
    const char *path;
    const char *sec;
    char ctx[160];   /* the record being read, for messages */
    bool bad;
    qf_status st;    /* QF_ERR_FORMAT, or QF_ERR_NOMEM when an allocation failed */
} rd;

/* Records an allocation failure (message already set by qfi_calloc or here). */
static bool rd_nomem(rd *r)
{
    if (!r->bad) qf_error(QF_ERR_NOMEM, "%s: out of memory reading section %s", r->path, r->sec);
    r->bad = true;
    r->st = QF_ERR_NOMEM;
    return false;
}

static bool rd_fail(rd *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool rd_fail(rd *r, const char *fmt, ...)
{
    if (r->bad) return false;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    qf_error(QF_ERR_FORMAT, "%s: section %s: %s%s%s", r->path, r->sec, r->ctx, r->ctx[0] ? ": " : "", msg);
    r->bad = true;
    r->st = QF_ERR_FORMAT;
    return false;
}

static bool rd_need(rd *r, uint64_t n)
{
    if (r->bad) return false;
    if (n > r->left)
        return rd_fail(r, "needs %llu bytes but the section has only %llu left (truncated or corrupt)",
                       (unsigned long long)n, (unsigned long long)r->left);
    return true;
}

static const uint8_t *rd_take(rd *r, uint64_t n)
{
    if (!rd_need(r, n)) return NULL;
    const uint8_t *p = r->p;
    r->p += n;
    r->left -= n;
    return p;
}
static uint8_t rd_u8(rd *r)
{
    const uint8_t *p = rd_take(r, 1);
    return p ? *p : 0;
}
static uint16_t rd_u16(rd *r)
{
    const uint8_t *p = rd_take(r, 2);
    return p ? (uint16_t)(p[0] | p[1] << 8) : 0;
}
static uint32_t rd_u32(rd *r)
{
    const uint8_t *p = rd_take(r, 4);
    return p ? get32(p) : 0;
}
static uint64_t rd_u64(rd *r)
{
    const uint8_t *p = rd_take(r, 8);
    return p ? get64(p) : 0;
}
static float rd_f32(rd *r) { return qfi_bits_f32(rd_u32(r)); }

/* A string of lo..hi bytes without NUL into buf (hi + 1 bytes). */
static bool rd_str(rd *r, const char *what, uint32_t lo, uint32_t hi, char *buf)
{
    uint32_t n = rd_u32(r);
    if (r->bad) return false;
    if (n < lo || n > hi) return rd_fail(r, "%s of %u bytes (the format allows %u to %u)", what, n, lo, hi);
    const uint8_t *p = rd_take(r, n);
    if (!p) return false;
    if (has_control(p, n)) return rd_fail(r, "%s contains a control character", what);
    memcpy(buf, p, n);
    buf[n] = '\0';
    return true;
}

/* Like rd_str, allocating: the length is checked against the bytes left first. */
static char *rd_str_dup(rd *r, const char *what, uint32_t lo, uint32_t hi)
{
    uint32_t n = rd_u32(r);
    if (r->bad) return NULL;
    if (n < lo || n > hi) {
        rd_fail(r, "%s of %u bytes (the format allows %u to %u)", what, n, lo, hi);
        return NULL;
    }
    const uint8_t *p = rd_take(r, n);
    if (!p) return NULL;
    if (has_control(p, n)) {
        rd_fail(r, "%s contains a control character", what);
        return NULL;
    }
    char *s = malloc((size_t)n + 1);
    if (!s) {
        rd_nomem(r);
        return NULL;
    }
    memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

/* dtype, ndim and flags of a tensor record. */
static bool rd_shape(rd *r, qf_dtype *dt, int *ndim, uint16_t *flags)
{
    uint8_t t = rd_u8(r), nd = rd_u8(r);
    *flags = rd_u16(r);
    if (r->bad) return false;
    if (t >= QF_DTYPE_COUNT) return rd_fail(r, "dtype %u is not one qforge knows (0 to %d)", t, QF_DTYPE_COUNT - 1);
    if (nd > QF_MAX_DIMS) return rd_fail(r, "%u dims (at most %d)", nd, QF_MAX_DIMS);
    *dt = (qf_dtype)t;
    *ndim = nd;
    return true;
}

static bool rd_dims(rd *r, qf_dtype dt, int ndim, int64_t *dims, uint64_t *bytes)
{
    for (int d = 0; d < ndim; d++) dims[d] = (int64_t)rd_u64(r);
    if (r->bad) return false;
    if (!tensor_bytes(dt, ndim, dims, bytes))
        return rd_fail(r, "shape [%lld%s] is negative or larger than %lld bytes", (long long)dims[0],
                       ndim > 1 ? ",..." : "", (long long)QF_MAX_TENSOR_BYTES);
    return true;
}

/* Room for a tensor that is freed with free() and 64-byte aligned, like a mapped one. */
static void *tensor_alloc(rd *r, uint64_t bytes)
{
    void *p = aligned_alloc(WEIGHT_ALIGN, align_up(bytes ? bytes : 1));
    if (!p) rd_nomem(r);
    return p;
}

/* ---- META ---- */

enum { META_TOOL, META_PRECISION, META_METHOD, META_IMAGES, META_SHA, META_PREPROCESS, META_KEY_COUNT };
static const char *const meta_keys[META_KEY_COUNT] = {"tool_version",  "precision",     "calib_method",
                                                       "calib_images", "source_sha256", "preprocess"};

static qf_status read_meta(rd *r, qf_qfm_meta *m)
{
    uint32_t count = rd_u32(r);
    if (r->bad) return r->st;
    if (count > MAX_META_KEYS || (uint64_t)count * MIN_META_BYTES > r->left)
        return rd_fail(r, "%u entries do not fit (at most %d, and the section has %llu bytes left)", count,
                       MAX_META_KEYS, (unsigned long long)r->left),
               QF_ERR_FORMAT;
    unsigned seen = 0;
    char key[MAX_META_KEY + 1];
    char *val = malloc(MAX_STRING + 1);
    if (!val) return rd_nomem(r), QF_ERR_NOMEM;
    for (uint32_t i = 0; i < count && !r->bad; i++) {
        snprintf(r->ctx, sizeof r->ctx, "entry %u", i);
        if (!rd_str(r, "key", 1, MAX_META_KEY, key) || !rd_str(r, "value", 0, MAX_STRING, val)) break;
        snprintf(r->ctx, sizeof r->ctx, "%s", key);
        int k = 0;
        while (k < META_KEY_COUNT && strcmp(key, meta_keys[k]) != 0) k++;
        if (k == META_KEY_COUNT) continue; /* a later minor version's key */
        if (seen & (1u << k)) {
            rd_fail(r, "appears twice");
            break;
        }
        seen |= 1u << k;
        size_t n = strlen(val);
        switch (k) {
        case META_TOOL:
            if (n >= sizeof m->tool_version) rd_fail(r, "%zu bytes is too long", n);
            else memcpy(m->tool_version, val, n + 1);
            break;
        case META_PRECISION: {
            int p = 0;
            while (p < QF_PRECISION_COUNT && strcmp(val, qf_precision_name((qf_precision)p)) != 0) p++;
            if (p == QF_PRECISION_COUNT) rd_fail(r, "'%.32s' is not fp32, fp16 or int8", val);
            else m->precision = (qf_precision)p;
            break;
        }
        case META_METHOD:
            if (n && !is_method_name(val)) rd_fail(r, "'%.32s' is not a calibration method", val);
            else memcpy(m->calib_method, val, n + 1);
            break;
        case META_IMAGES: {
            int64_t x = 0;
            bool ok = n > 0 && n <= 18;
            for (size_t j = 0; j < n && ok; j++) {
                ok = val[j] >= '0' && val[j] <= '9';
                x = x * 10 + (val[j] - '0');
            }
            if (!ok) rd_fail(r, "'%.32s' is not a count", val);
            else m->calib_images = x;
            break;
        }
        case META_SHA:
            if (n && !qfi_is_sha256_hex(val)) rd_fail(r, "'%.70s' is not 64 lowercase hex digits", val);
            else memcpy(m->source_sha256, val, n + 1);
            break;
        case META_PREPROCESS: {
            qf_preprocess pp;
            qf_preprocess_init(&pp);
            if (n >= sizeof m->preprocess) rd_fail(r, "%zu bytes is too long", n);
            else if (qf_preprocess_parse(&pp, val) != QF_OK) rd_fail(r, "%s", qf_error_message());
            else memcpy(m->preprocess, val, n + 1);
            break;
        }
        }
    }
    free(val);
    r->ctx[0] = '\0';
    if (!r->bad && r->left) rd_fail(r, "%llu bytes after the last entry", (unsigned long long)r->left);
    return r->bad ? r->st : QF_OK;
}

/* ---- GRAPH ---- */

typedef struct gread {
    rd r;
    qf_graph *g;
    const uint8_t *w;   /* WEIGHTS */
    uint64_t wsize, wend; /* wend: end of the last tensor read (they come in increasing order) */
    uint8_t *state;     /* per value: 1 available to readers (input, constant or written), 2 listed */
} gread;

static bool read_value(gread *R, uint32_t i)
{
    rd *r = &R->r;
    char name[MAX_NAME + 1];
    snprintf(r->ctx, sizeof r->ctx, "tensor %u", i);
    if (!rd_str(r, "name", 1, MAX_NAME, name)) return false;
    snprintf(r->ctx, sizeof r->ctx, "tensor %.100s", name);
    qf_dtype dt;
    int nd;
    int64_t dims[QF_MAX_DIMS] = {0};
    uint64_t bytes;
    uint16_t flags;
    if (!rd_shape(r, &dt, &nd, &flags)) return false;
    float scale = rd_f32(r);
    if (!rd_dims(r, dt, nd, dims, &bytes)) return false;
    if (flags & ~(unsigned)VALUE_FLAGS) return rd_fail(r, "unknown flags 0x%x", flags);
    if ((flags & QF_VALUE_CONST) && (flags & QF_VALUE_INPUT)) return rd_fail(r, "is both an input and a constant");
    if (!isfinite(scale) || scale < 0) return rd_fail(r, "scale %g", (double)scale);
    if (dt == QF_I8 && !(flags & QF_VALUE_CONST) && !(scale > 0))
        return rd_fail(r, "an int8 activation needs a positive scale, not %g", (double)scale);
    void *data = NULL;
    if (flags & QF_VALUE_CONST) {
        uint64_t off = rd_u64(r), size = rd_u64(r);
        if (r->bad) return false;
        if (size != bytes)
            return rd_fail(r, "data of %llu bytes for a shape of %llu", (unsigned long long)size,
                           (unsigned long long)bytes);
        if (off % WEIGHT_ALIGN) return rd_fail(r, "data offset %llu is not a multiple of 64", (unsigned long long)off);
        if (off > R->wsize || size > R->wsize - off)
            return rd_fail(r, "data [%llu, +%llu) lies outside WEIGHTS (%llu bytes)", (unsigned long long)off,
                           (unsigned long long)size, (unsigned long long)R->wsize);
        if (off < R->wend) return rd_fail(r, "data at %llu overlaps the tensor before it", (unsigned long long)off);
        R->wend = off + size;
        data = tensor_alloc(r, size);
        if (!data) return false;
        memcpy(data, R->w + off, (size_t)size);
    }
    int v = qf_graph_add_value(R->g, name, dt, nd, dims);
    if (v < 0) {
        free(data);
        return rd_nomem(r);
    }
    qf_value *x = &R->g->values[v];
    x->flags = flags;
    x->scale = scale;
    x->data = data;
    if (flags & (QF_VALUE_INPUT | QF_VALUE_CONST)) R->state[v] = 1;
    return true;
}

/* The input or output index list; `flag` is what the listed values must carry. */
static bool read_io_list(gread *R, uint32_t count, unsigned flag, int **list, int *n)
{
    rd *r = &R->r;
    qf_graph *g = R->g;
    snprintf(r->ctx, sizeof r->ctx, "graph %s", flag == QF_VALUE_INPUT ? "inputs" : "outputs");
    *list = qfi_calloc((size_t)count + 1, sizeof **list);
    if (!*list) return rd_nomem(r);
    for (uint32_t i = 0; i < count; i++) {
        uint32_t v = rd_u32(r);
        if (r->bad) return false;
        if (v >= (uint32_t)g->n_values) return rd_fail(r, "tensor index %u (there are %d)", v, g->n_values);
        if (!(g->values[v].flags & flag) || (R->state[v] & 2))
            return rd_fail(r, "tensor %s is listed twice or lacks the flag", g->values[v].name);
        R->state[v] |= 2;
        (*list)[(*n)++] = (int)v;
        if (flag == QF_VALUE_INPUT && g->values[v].ndim > 0 && g->values[v].dims[0] != g->batch)
            return rd_fail(r, "input %s has dim 0 %lld but the graph's batch is %d", g->values[v].name,
                           (long long)g->values[v].dims[0], g->batch);
    }
    int flagged = 0;
    for (int v = 0; v < g->n_values; v++) {
        flagged += (g->values[v].flags & flag) != 0;
        R->state[v] &= 1;
    }
    if (flagged != *n) return rd_fail(r, "%d tensors are flagged but %d are listed", flagged, *n);
    return true;
}

static bool read_attr(gread *R, qf_attr *a)
{
    rd *r = &R->r;
    a->name = rd_str_dup(r, "attribute name", 1, MAX_ATTR_NAME);
    uint8_t t = rd_u8(r);
    const uint8_t *pad = rd_take(r, 3);
    if (r->bad) return false;
    if (t >= QF_ATTR_TYPE_COUNT) return rd_fail(r, "attribute %s has type %u (0 to %d)", a->name, t, QF_ATTR_TYPE_COUNT - 1);
    if (pad[0] | pad[1] | pad[2]) return rd_fail(r, "attribute %s: reserved bytes are not zero", a->name);
    a->type = (qf_attr_type)t;
    switch (a->type) {
    case QF_ATTR_INT: a->i = (int64_t)rd_u64(r); break;
    case QF_ATTR_FLOAT: a->f = rd_f32(r); break;
    case QF_ATTR_STRING: a->s = rd_str_dup(r, "string attribute", 0, MAX_STRING); break;
    case QF_ATTR_INTS:
    case QF_ATTR_FLOATS: {
        uint32_t n = rd_u32(r);
        size_t es = a->type == QF_ATTR_INTS ? 8 : 4;
        if (r->bad) return false;
        if (n > MAX_ATTR_ELEMS || !rd_need(r, (uint64_t)n * es))
            return rd_fail(r, "attribute %s has %u elements", a->name, n);
        a->n = (int)n;
        if (a->type == QF_ATTR_INTS) {
            a->ints = qfi_calloc((size_t)n + 1, sizeof *a->ints);
            if (!a->ints) return rd_nomem(r);
            for (uint32_t i = 0; i < n; i++) a->ints[i] = (int64_t)rd_u64(r);
        } else {
            a->floats = qfi_calloc((size_t)n + 1, sizeof *a->floats);
            if (!a->floats) return rd_nomem(r);
            for (uint32_t i = 0; i < n; i++) a->floats[i] = rd_f32(r);
        }
        break;
    }
    case QF_ATTR_TENSOR: {
        qf_value *t = a->t = qfi_calloc(1, sizeof *a->t);
        if (!t) return rd_nomem(r);
        t->producer = -1;
        t->name = rd_str_dup(r, "tensor attribute name", 0, MAX_NAME);
        uint64_t bytes;
        uint16_t reserved;
        if (!rd_shape(r, &t->dtype, &t->ndim, &reserved) || !rd_dims(r, t->dtype, t->ndim, t->dims, &bytes))
            return false;
        if (reserved) return rd_fail(r, "attribute %s: reserved bytes are not zero", a->name);
        uint64_t size = rd_u64(r);
        if (r->bad) return false;
        if (size != bytes)
            return rd_fail(r, "attribute %s: %llu bytes for a shape of %llu", a->name, (unsigned long long)size,
                           (unsigned long long)bytes);
        const uint8_t *p = rd_take(r, size);
        if (!p) return false;
        t->data = tensor_alloc(r, size);
        if (!t->data) return false;
        memcpy(t->data, p, (size_t)size);
        t->flags = QF_VALUE_CONST;
        break;
    }
    default: break;
    }
    return !r->bad;
}

static bool read_node(gread *R, uint32_t i, int *io)
{
    rd *r = &R->r;
    qf_graph *g = R->g;
    char name[MAX_NAME + 1];
    snprintf(r->ctx, sizeof r->ctx, "node %u", i);
    if (!rd_str(r, "name", 0, MAX_NAME, name)) return false;
    snprintf(r->ctx, sizeof r->ctx, "node %u (%.100s)", i, name);
    uint32_t op = rd_u32(r);
    uint8_t prec = rd_u8(r), act = rd_u8(r);
    uint16_t reserved = rd_u16(r);
    float lo = rd_f32(r), hi = rd_f32(r);
    uint32_t n_in = rd_u32(r), n_out = rd_u32(r), n_attr = rd_u32(r);
    if (r->bad) return false;
    if (op >= QF_OP_COUNT) return rd_fail(r, "op %u is not one qforge knows (0 to %d)", op, QF_OP_COUNT - 1);
    if (prec >= QF_PRECISION_COUNT) return rd_fail(r, "precision %u (0 to %d)", prec, QF_PRECISION_COUNT - 1);
    if (act >= QF_ACT_COUNT) return rd_fail(r, "fused activation %u (0 to %d)", act, QF_ACT_COUNT - 1);
    if (reserved) return rd_fail(r, "reserved bytes are not zero");
    if (!isfinite(lo) || !isfinite(hi) || (act == QF_ACT_CLIP && lo > hi))
        return rd_fail(r, "activation bounds [%g, %g]", (double)lo, (double)hi);
    if (act != QF_ACT_NONE && op != QF_OP_CONV && op != QF_OP_GEMM && op != QF_OP_MATMUL)
        return rd_fail(r, "a fused activation on %s, which has no epilogue", qf_op_name((qf_op)op));
    if (n_in > MAX_NODE_IO || n_out < 1 || n_out > MAX_NODE_IO || n_attr > MAX_ATTRS)
        return rd_fail(r, "%u inputs, %u outputs, %u attributes (at most %d, 1 to %d, %d)", n_in, n_out, n_attr,
                       MAX_NODE_IO, MAX_NODE_IO, MAX_ATTRS);
    if (!rd_need(r, 4 * ((uint64_t)n_in + n_out) + (uint64_t)n_attr * MIN_ATTR_BYTES)) return false;
    for (uint32_t k = 0; k < n_in + n_out; k++) {
        int32_t v = (int32_t)rd_u32(r);
        if (v < -1 || v >= g->n_values) return rd_fail(r, "tensor index %d (there are %d)", v, g->n_values);
        io[k] = v;
        if (v < 0) continue;
        if (k < n_in && !(R->state[v] & 1))
            return rd_fail(r, "reads %s before any node writes it", g->values[v].name);
        if (k >= n_in) {
            if (R->state[v] & 1) return rd_fail(r, "writes %s, which is an input, a constant or written before",
                                                 g->values[v].name);
            R->state[v] |= 1;
        }
    }
    int idx = qf_graph_add_node(g, name, (qf_op)op, (int)n_in, io, (int)n_out, io + n_in);
    if (idx < 0) return rd_nomem(r);
    qf_node *n = &g->nodes[idx];
    n->precision = (qf_precision)prec;
    n->act = (qf_act)act;
    n->act_lo = lo;
    n->act_hi = hi;
    if (n_attr) {
        n->attrs = qfi_calloc(n_attr, sizeof *n->attrs);
        if (!n->attrs) return rd_nomem(r);
    }
    for (uint32_t a = 0; a < n_attr; a++) {
        n->n_attr = (int)a + 1; /* freed with the node even when half read */
        if (!read_attr(R, &n->attrs[a])) return false;
    }
    return true;
}

static qf_status read_graph(gread *R)
{
    rd *r = &R->r;
    uint32_t nv = rd_u32(r), nn = rd_u32(r), ni = rd_u32(r), no = rd_u32(r);
    int64_t opset = (int64_t)rd_u64(r);
    uint32_t batch = rd_u32(r), reserved = rd_u32(r);
    if (r->bad) return r->st;
    if (nv > QF_MAX_VALUES || nn > QF_MAX_NODES || ni > nv || no > nv)
        return rd_fail(r, "%u tensors, %u nodes, %u inputs, %u outputs (at most %d tensors and %d nodes)", nv, nn, ni,
                       no, QF_MAX_VALUES, QF_MAX_NODES),
               QF_ERR_FORMAT;
    uint64_t least = (uint64_t)nv * MIN_VALUE_BYTES + (uint64_t)nn * MIN_NODE_BYTES + 4 * ((uint64_t)ni + no);
    if (least > r->left)
        return rd_fail(r, "%u tensors and %u nodes need at least %llu bytes; the section has %llu", nv, nn,
                       (unsigned long long)least, (unsigned long long)r->left),
               QF_ERR_FORMAT;
    if (opset < 1 || opset > MAX_OPSET) return rd_fail(r, "opset %lld", (long long)opset), QF_ERR_FORMAT;
    if (batch < 1 || batch > MAX_BATCH) return rd_fail(r, "batch %u (1 to %d)", batch, MAX_BATCH), QF_ERR_FORMAT;
    if (reserved) return rd_fail(r, "reserved bytes are not zero"), QF_ERR_FORMAT;
    qf_graph *g = R->g;
    g->opset = opset;
    g->batch = (int)batch;
    /* sized once: the counts are bounded by the section's bytes */
    g->values = qfi_calloc((size_t)nv + 1, sizeof *g->values);
    g->nodes = qfi_calloc((size_t)nn + 1, sizeof *g->nodes);
    R->state = qfi_calloc((size_t)nv + 1, 1);
    int *io = qfi_calloc(2 * MAX_NODE_IO, sizeof *io);
    if (!g->values || !g->nodes || !R->state || !io) {
        free(io);
        return rd_nomem(r), QF_ERR_NOMEM;
    }
    g->cap_values = (int)nv + 1;
    g->cap_nodes = (int)nn + 1;
    bool ok = false;
    for (uint32_t i = 0; i < nv; i++)
        if (!read_value(R, i)) goto out;
    if (!read_io_list(R, ni, QF_VALUE_INPUT, &g->inputs, &g->n_inputs) ||
        !read_io_list(R, no, QF_VALUE_OUTPUT, &g->outputs, &g->n_outputs))
        goto out;
    for (uint32_t i = 0; i < nn; i++)
        if (!read_node(R, i, io)) goto out;
    r->ctx[0] = '\0';
    for (int i = 0; i < g->n_outputs; i++)
        if (!(R->state[g->outputs[i]] & 1)) {
            rd_fail(r, "graph output %s is never written", g->values[g->outputs[i]].name);
            goto out;
        }
    if (r->left) {
        rd_fail(r, "%llu bytes after the last node", (unsigned long long)r->left);
        goto out;
    }
    ok = true;
out:
    free(io);
    QF_ASSERT(ok != r->bad);
    return ok ? QF_OK : r->st;
}

/* Messages of op parsers and shape inference name the node; this makes sure they name the file too. */
static qf_status with_path(const char *path, qf_status st)
{
    if (st != QF_OK && strncmp(qf_error_message(), path, strlen(path)) != 0) qf_error_prefix(st, "%s", path);
    return st;
}

static void format_shape(char *buf, size_t n, int ndim, const int64_t *dims)
{
    size_t at = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && at < n; d++) at += (size_t)snprintf(buf + at, n - at, "%s%lld", d ? "," : "", (long long)dims[d]);
    if (at < n) snprintf(buf + at, n - at, "]");
}

/* The INT8 kernels keep accumulator + bias inside int32 by bounding the
 * reduction length and relying on the quantizer's bias clamp
 * (quant/weights.c: |bias| <= 2^30); a file must keep to that clamp too. */
static qf_status check_int8_biases(const qf_graph *g, const char *path)
{
    const int32_t lim = QFI_INT8_BIAS_LIMIT;
    for (int i = 0; i < g->n_nodes; i++) {
        const qf_node *n = &g->nodes[i];
        if (n->precision != QF_PREC_INT8 || (n->op != QF_OP_CONV && n->op != QF_OP_GEMM && n->op != QF_OP_MATMUL) ||
            n->n_in < 3 || n->in[2] < 0)
            continue;
        const qf_value *b = &g->values[n->in[2]];
        if (b->dtype != QF_I32 || !b->data) continue; /* the op's own checks refuse it */
        const int32_t *bd = b->data;
        for (int64_t c = 0; c < qf_value_numel(b); c++)
            if (bd[c] < -lim || bd[c] > lim)
                return qf_error(QF_ERR_FORMAT, "%s: section WEIGHTS: INT8 bias %s[%lld] = %d is outside +-2^30", path,
                                b->name, (long long)c, bd[c]);
    }
    return QF_OK;
}

/* Rebuilds params and checks that every stored shape is what the ops infer. */
static qf_status verify_graph(qf_graph *g, const char *path)
{
    for (int i = 0; i < g->n_nodes; i++) {
        qf_node *n = &g->nodes[i];
        qf_status st = qfi_ops[n->op].parse(g, n);
        if (st != QF_OK) return with_path(path, st);
    }
    qf_value *stored = qfi_calloc((size_t)g->n_values + 1, sizeof *stored);
    if (!stored) return QF_ERR_NOMEM;
    memcpy(stored, g->values, (size_t)g->n_values * sizeof *stored);
    qf_status st = with_path(path, qfi_graph_rebatch(g, g->batch));
    for (int v = 0; v < g->n_values && st == QF_OK; v++) {
        const qf_value *a = &stored[v], *b = &g->values[v];
        if (a->ndim != b->ndim || memcmp(a->dims, b->dims, (size_t)a->ndim * sizeof *a->dims) != 0) {
            char sa[160], sb[160];
            format_shape(sa, sizeof sa, a->ndim, a->dims);
            format_shape(sb, sizeof sb, b->ndim, b->dims);
            st = qf_error(QF_ERR_FORMAT, "%s: section GRAPH: tensor %s is stored as %s but its node gives %s", path,
                          a->name, sa, sb);
        }
    }
    free(stored);
    return st;
}

/* Tensors are found by name (calibration tables, engines' callers): one name, one tensor. */
static qf_status unique_names(const qf_graph *g, const char *path)
{
    char **names = qfi_calloc((size_t)g->n_values + 1, sizeof *names);
    if (!names) return QF_ERR_NOMEM;
    for (int v = 0; v < g->n_values; v++) names[v] = g->values[v].name;
    const char *dup = duplicate_name(names, (size_t)g->n_values);
    qf_status st = dup ? qf_error(QF_ERR_FORMAT, "%s: section GRAPH: two tensors are named %s", path, dup) : QF_OK;
    free(names);
    return st;
}

/* ---- the file ---------------------------------------------------------------------- */

typedef struct section {
    uint32_t type, crc;
    uint64_t off, size;
} section;

static const char *sec_name(uint32_t type, char *buf, size_t n)
{
    if (type > 0 && type < SEC_KNOWN_END) return sec_names[type];
    snprintf(buf, n, "of type %u", type);
    return buf;
}

static int cmp_section(const void *a, const void *b)
{
    const section *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

static bool all_zero(const uint8_t *p, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if (p[i]) return false;
    return true;
}

/* Checks header, table and sections; fills the known sections' places. */
static qf_status check_layout(const char *path, const uint8_t *f, uint64_t size, section known[SEC_KNOWN_END])
{
    if (size == 0) return qf_error(QF_ERR_FORMAT, "%s: empty file, not a qforge model", path);
    if (memcmp(f, MAGIC, size < 4 ? (size_t)size : 4) != 0)
        return qf_error(QF_ERR_FORMAT, "%s: not a qforge model file (bad magic; a .qfm starts with \"QFM\\0\")", path);
    if (size < 8) return qf_error(QF_ERR_FORMAT, "%s: truncated: %llu bytes", path, (unsigned long long)size);
    uint32_t version = get32(f + 4), major = version >> 16, minor = version & 0xffff;
    if (major > QF_QFM_VERSION_MAJOR)
        return qf_error(QF_ERR_UNSUPPORTED, "%s: format version %u is newer than this qforge reads (%d)", path, major,
                        QF_QFM_VERSION_MAJOR);
    if (major < QF_QFM_VERSION_MAJOR)
        return qf_error(QF_ERR_FORMAT, "%s: format version %u.%u does not exist (this qforge reads %d)", path, major,
                        minor, QF_QFM_VERSION_MAJOR);
    if (size < HEADER_BYTES)
        return qf_error(QF_ERR_FORMAT, "%s: truncated: %llu bytes, shorter than the %d-byte header", path,
                        (unsigned long long)size, HEADER_BYTES);
    if (crc_of(f, 28) != get32(f + 28)) return qf_error(QF_ERR_FORMAT, "%s: header CRC mismatch: the file is corrupt", path);
    uint64_t recorded = get64(f + 8);
    if (recorded != size)
        return qf_error(QF_ERR_FORMAT, "%s: %s: the header records %llu bytes, the file has %llu", path,
                        size < recorded ? "truncated" : "bytes appended", (unsigned long long)recorded,
                        (unsigned long long)size);
    uint32_t count = get32(f + 16), flags = get32(f + 20);
    if (flags) return qf_error(QF_ERR_FORMAT, "%s: header: reserved flags 0x%x are not zero", path, flags);
    if (count < 1 || count > MAX_SECTIONS)
        return qf_error(QF_ERR_FORMAT, "%s: header: %u sections (1 to %d)", path, count, MAX_SECTIONS);
    const uint64_t table_end = HEADER_BYTES + (uint64_t)count * ENTRY_BYTES;
    if (table_end > size)
        return qf_error(QF_ERR_FORMAT, "%s: the section table (%u entries) runs past the end of the file", path, count);
    if (crc_of(f + HEADER_BYTES, table_end - HEADER_BYTES) != get32(f + 24))
        return qf_error(QF_ERR_FORMAT, "%s: section table CRC mismatch: the file is corrupt", path);
    section sec[MAX_SECTIONS];
    char nb[32];
    memset(known, 0, SEC_KNOWN_END * sizeof *known);
    for (uint32_t i = 0; i < count; i++) {
        const uint8_t *e = f + HEADER_BYTES + i * ENTRY_BYTES;
        section *s = &sec[i];
        s->type = get32(e);
        s->off = get64(e + 8);
        s->size = get64(e + 16);
        s->crc = get32(e + 24);
        const char *nm = sec_name(s->type, nb, sizeof nb);
        if (s->type == 0) return qf_error(QF_ERR_FORMAT, "%s: section table entry %u has type 0", path, i);
        if (get32(e + 4) || get32(e + 28))
            return qf_error(QF_ERR_FORMAT, "%s: section %s: reserved fields are not zero", path, nm);
        if (s->off < table_end || s->off > size || s->size > size - s->off)
            return qf_error(QF_ERR_FORMAT, "%s: section %s [%llu, +%llu) lies outside the file's %llu bytes after the table",
                            path, nm, (unsigned long long)s->off, (unsigned long long)s->size, (unsigned long long)size);
        if (s->type < SEC_KNOWN_END) {
            if (known[s->type].type)
                return qf_error(QF_ERR_FORMAT, "%s: two %s sections", path, nm);
            known[s->type] = *s;
        }
    }
    for (int t = 1; t < SEC_KNOWN_END; t++)
        if (!known[t].type) return qf_error(QF_ERR_FORMAT, "%s: no %s section", path, sec_names[t]);
    if (known[SEC_WEIGHTS].off % WEIGHT_ALIGN)
        return qf_error(QF_ERR_FORMAT, "%s: section WEIGHTS at offset %llu is not 64-byte aligned", path,
                        (unsigned long long)known[SEC_WEIGHTS].off);
    /* sections in file order: no overlap, and nothing but zeros between them */
    qsort(sec, count, sizeof *sec, cmp_section);
    uint64_t at = table_end;
    for (uint32_t i = 0; i <= count; i++) {
        uint64_t next = i < count ? sec[i].off : size;
        if (next < at) {
            char nb2[32];
            return qf_error(QF_ERR_FORMAT, "%s: sections %s and %s overlap", path, sec_name(sec[i - 1].type, nb, sizeof nb),
                            sec_name(sec[i].type, nb2, sizeof nb2));
        }
        if (!all_zero(f + at, next - at))
            return qf_error(QF_ERR_FORMAT, "%s: nonzero bytes in [%llu, %llu), outside every section: the file is corrupt",
                            path, (unsigned long long)at, (unsigned long long)next);
        if (i < count) at = sec[i].off + sec[i].size;
    }
    for (uint32_t i = 0; i < count; i++) {
        uint32_t c = crc_of(f + sec[i].off, sec[i].size);
        if (c != sec[i].crc)
            return qf_error(QF_ERR_FORMAT, "%s: section %s: CRC mismatch (stored %08x, computed %08x): the file is corrupt",
                            path, sec_name(sec[i].type, nb, sizeof nb), sec[i].crc, c);
    }
    return QF_OK;
}

static qf_status parse_file(const char *path, const uint8_t *f, uint64_t size, int batch, qf_graph **out,
                            qf_qfm_meta *meta)
{
    section known[SEC_KNOWN_END];
    QF_CHECK(check_layout(path, f, size, known));
    qf_qfm_meta m;
    qf_qfm_meta_init(&m);
    rd mr = {.p = f + known[SEC_META].off, .left = known[SEC_META].size, .path = path, .sec = "META"};
    QF_CHECK(read_meta(&mr, &m));
    qf_graph *g = qf_graph_new(path);
    if (!g) return QF_ERR_NOMEM;
    gread R = {.r = {.p = f + known[SEC_GRAPH].off, .left = known[SEC_GRAPH].size, .path = path, .sec = "GRAPH"},
               .g = g,
               .w = f + known[SEC_WEIGHTS].off,
               .wsize = known[SEC_WEIGHTS].size};
    qf_status st = read_graph(&R);
    free(R.state);
    if (st == QF_OK) st = unique_names(g, path);
    if (st == QF_OK) st = verify_graph(g, path);
    if (st == QF_OK) st = check_int8_biases(g, path);
    if (st == QF_OK && batch > 0 && batch != g->batch) {
        st = qfi_graph_rebatch(g, batch);
        if (st != QF_OK) st = qf_error_prefix(with_path(path, st), "at batch %d", batch);
    }
    if (st != QF_OK) {
        qf_graph_free(g);
        return st;
    }
    m.batch = (int)get32(f + known[SEC_GRAPH].off + 24);
    if (meta) *meta = m;
    *out = g;
    return QF_OK;
}

qf_status qf_qfm_read(const char *path, int batch, qf_graph **out, qf_qfm_meta *meta)
{
    if (!out || !path) return qf_error(QF_ERR_USAGE, "qf_qfm_read: no path or no result pointer");
    *out = NULL;
    if (batch < 0 || batch > MAX_BATCH)
        return qf_error(QF_ERR_USAGE, "%s: batch size %d (0 keeps the stored one; at most %d)", path, batch, MAX_BATCH);
    {
        const uint16_t probe = 1;
        if (*(const uint8_t *)&probe != 1)
            return qf_error(QF_ERR_UNSUPPORTED, "%s: .qfm weights are little-endian; this host is not", path);
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return qf_error(QF_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return qf_error(QF_ERR_IO, "%s: not a regular file", path);
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size < HEADER_BYTES) {
        /* too short to map usefully: read what there is for the magic and version messages */
        uint8_t head[HEADER_BYTES];
        ssize_t got = read(fd, head, sizeof head);
        close(fd);
        if (got < 0) return qf_error(QF_ERR_IO, "%s: %s", path, strerror(errno));
        qf_status st = check_layout(path, head, (uint64_t)got, NULL);
        QF_ASSERT(st != QF_OK);
        return st;
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd);
    if (map == MAP_FAILED) return qf_error(QF_ERR_IO, "%s: cannot map the file: %s", path, strerror(err));
    qf_status st = parse_file(path, map, size, batch, out, meta);
    munmap(map, (size_t)size);
    return st;
}

bool qf_qfm_probe(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    uint8_t head[4];
    bool yes = fread(head, 1, 4, f) == 4 && memcmp(head, MAGIC, 4) == 0;
    fclose(f);
    return yes;
}
