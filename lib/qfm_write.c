/* Writes a prepared graph as a .qfm model file (qforge-model(5)): META,
 * GRAPH and 64-byte aligned WEIGHTS, each with its CRC-32, through an atomic
 * rename. It checks everything the reader would refuse before it writes. */
#include "qfm_internal.h"
#include <errno.h>
#include <math.h>
#include <zlib.h>

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

/* What the writer checks so that it never writes a file the reader refuses. */
static qf_status check_name(const char *what, const char *s, size_t lo, size_t hi)
{
    size_t n = s ? strlen(s) : 0;
    if (n < lo || n > hi)
        return qf_error(QF_ERR_INVALID, "%s '%.64s' has %zu bytes; the format allows %zu to %zu", what, s ? s : "", n,
                        lo, hi);
    if (qfi_qfm_has_control((const uint8_t *)s, n))
        return qf_error(QF_ERR_INVALID, "%s has a control character, which the format does not allow", what);
    return QF_OK;
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
        {"scale_source", m->scale_source},
        {"equalized", m->equalized}, /* last: left out when empty, as files before 1.2 are */
    };
    const size_t n = QF_ARRAY_LEN(kv) - !m->equalized[0];
    wb_u32(b, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        wb_str(b, kv[i][0]);
        wb_str(b, kv[i][1]);
    }
}

static qf_status check_meta(const qf_qfm_meta *m)
{
    if (memchr(m->preprocess, 0, sizeof m->preprocess) == NULL || memchr(m->calib_method, 0, sizeof m->calib_method) == NULL ||
        memchr(m->source_sha256, 0, sizeof m->source_sha256) == NULL ||
        memchr(m->scale_source, 0, sizeof m->scale_source) == NULL ||
        memchr(m->equalized, 0, sizeof m->equalized) == NULL)
        return qf_error(QF_ERR_USAGE, "a metadata string is not NUL-terminated");
    if (m->scale_source[0] && !qfi_qfm_is_scale_source(m->scale_source))
        return qf_error(QF_ERR_USAGE, "unknown scale source '%s'", m->scale_source);
    if ((unsigned)m->precision >= QF_PRECISION_COUNT)
        return qf_error(QF_ERR_USAGE, "precision %d is not one of fp32, fp16, int8", (int)m->precision);
    if (m->calib_method[0] && !qfi_qfm_is_method_name(m->calib_method))
        return qf_error(QF_ERR_USAGE, "unknown calibration method '%s'", m->calib_method);
    if (m->source_sha256[0] && !qfi_is_sha256_hex(m->source_sha256))
        return qf_error(QF_ERR_USAGE, "source SHA-256 '%s' is not 64 lowercase hex digits", m->source_sha256);
    if (m->equalized[0] && !qfi_is_sha256_hex(m->equalized))
        return qf_error(QF_ERR_USAGE, "the graph's equalization digest '%s' is not 64 lowercase hex digits", m->equalized);
    qf_preprocess pp;
    qf_preprocess_init(&pp);
    if (qfi_qfm_has_control((const uint8_t *)m->preprocess, strlen(m->preprocess)))
        return qf_error(QF_ERR_USAGE, "the preprocessing text has a control character");
    if (qf_preprocess_parse(&pp, m->preprocess) != QF_OK)
        return qf_error_prefix(QF_ERR_USAGE, "the preprocessing text is not qforge options");
    if (m->calib_images < 0)
        return qf_error(QF_ERR_USAGE, "calibration image count %lld is negative", (long long)m->calib_images);
    return QF_OK;
}

static void write_dims(wbuf *b, int ndim, const int64_t *dims)
{
    for (int d = 0; d < ndim; d++) wb_u64(b, (uint64_t)dims[d]);
}

static qf_status write_attr(wbuf *b, const qf_attr *a)
{
    QF_CHECK(check_name("attribute name", a->name, 1, MAX_ATTR_NAME));
    if ((unsigned)a->type >= QF_ATTR_TYPE_COUNT)
        return qf_error(QF_ERR_INVALID, "attribute %s has type %d", a->name, (int)a->type);
    wb_str(b, a->name);
    wb_u8(b, (uint8_t)a->type);
    wb_put(b, (uint8_t[3]){0, 0, 0}, 3);
    switch (a->type) {
    case QF_ATTR_INT: wb_u64(b, (uint64_t)a->i); break;
    case QF_ATTR_FLOAT: wb_f32(b, a->f); break;
    case QF_ATTR_STRING:
        QF_CHECK(check_name("string attribute", a->s, 0, MAX_STRING));
        wb_str(b, a->s);
        break;
    case QF_ATTR_INTS:
    case QF_ATTR_FLOATS:
        if (a->n < 0 || a->n > MAX_ATTR_ELEMS)
            return qf_error(QF_ERR_INVALID, "attribute %s has %d elements", a->name, a->n);
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
            !qfi_tensor_bytes(t->dtype, t->ndim, t->dims, &bytes))
            return qf_error(QF_ERR_INVALID, "tensor attribute %s is malformed", a->name);
        QF_CHECK(check_name("tensor attribute name", t->name, 0, MAX_NAME));
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

/* Serializes node n; messages give the detail, write_graph names the node. */
static qf_status write_node(wbuf *b, const qf_node *n, const int *map)
{
    QF_CHECK(check_name("node name", n->name, 0, MAX_NAME));
    if ((unsigned)n->op >= QF_OP_COUNT || (unsigned)n->precision >= QF_PRECISION_COUNT ||
        (unsigned)n->act >= QF_ACT_COUNT || !isfinite(n->act_lo) || !isfinite(n->act_hi) || n->n_in < 0 ||
        n->n_in > MAX_NODE_IO || n->n_out < 1 || n->n_out > MAX_NODE_IO || n->n_attr < 0 || n->n_attr > MAX_ATTRS)
        return qf_error(QF_ERR_INVALID, "cannot be stored (op, precision, activation or counts out of range)");
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
    for (int a = 0; a < n->n_attr; a++) QF_CHECK(write_attr(b, &n->attrs[a]));
    return QF_OK;
}

/* Serializes the graph; `map` numbers the values that are written (-1: left
 * out), `woff` gives each constant's offset in WEIGHTS. */
static qf_status write_graph(wbuf *b, const qf_graph *g, const int *map, int nv, const uint64_t *woff)
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
        QF_CHECK(check_name("tensor name", x->name, 1, MAX_NAME));
        if ((unsigned)x->dtype >= QF_DTYPE_COUNT || x->ndim < 0 || x->ndim > QF_MAX_DIMS ||
            !qfi_tensor_bytes(x->dtype, x->ndim, x->dims, &bytes))
            return qf_error(QF_ERR_INVALID, "tensor %s has no valid dtype and shape (is the graph prepared?)", x->name);
        if ((x->flags & ~(unsigned)VALUE_FLAGS) || ((x->flags & QF_VALUE_CONST) && !x->data))
            return qf_error(QF_ERR_INVALID, "tensor %s: flags 0x%x", x->name, x->flags);
        const bool i8_activation = x->dtype == QF_I8 && !(x->flags & QF_VALUE_CONST);
        if (!isfinite(x->scale) || x->scale < 0 || (i8_activation && !(x->scale > 0)))
            return qf_error(QF_ERR_INVALID, "tensor %s has scale %g", x->name, (double)x->scale);
        if (x->zero_point && (!i8_activation || x->zero_point < -128 || x->zero_point > 127))
            return qf_error(QF_ERR_INVALID, "tensor %s has zero point %d", x->name, (int)x->zero_point);
        wb_str(b, x->name);
        wb_u8(b, (uint8_t)x->dtype);
        wb_u8(b, (uint8_t)x->ndim);
        wb_u16(b, (uint16_t)(x->flags | (x->zero_point ? FILE_VALUE_ZERO_POINT : 0)));
        wb_f32(b, x->scale);
        if (x->zero_point) wb_u32(b, (uint32_t)x->zero_point);
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
        qf_status st = write_node(b, n, map);
        /* the node, not g->source: the file to name is the one written */
        if (st != QF_OK) return qfi_error_context(st, NULL, n->name, qf_op_name(n->op));
    }
    return b->oom ? qf_error(QF_ERR_NOMEM, "out of memory serializing the graph") : QF_OK;
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
        return qfi_error_file(
            qf_error(QF_ERR_USAGE, "the graph must be prepared (batch %d) before it is written", g->batch), path);
    if (g->opset < 1 || g->opset > MAX_OPSET)
        return qfi_error_file(qf_error(QF_ERR_INVALID, "opset %lld cannot be stored", (long long)g->opset), path);
    qf_qfm_meta m;
    if (meta) m = *meta;
    else qf_qfm_meta_init(&m);
    memcpy(m.equalized, g->equalized, sizeof m.equalized);
    qf_status st = check_meta(&m);
    if (st != QF_OK) return qfi_error_file(st, path);

    /* values no node, input or output refers to (dropped weights) are left out */
    int *map = qfi_calloc((size_t)g->n_values + 1, sizeof *map);
    uint64_t *woff = qfi_calloc((size_t)g->n_values + 1, sizeof *woff);
    char **names = qfi_calloc((size_t)g->n_values + 1, sizeof *names);
    wbuf mb = {0}, gb = {0};
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
            qfi_tensor_bytes(x->dtype, x->ndim, x->dims, &bytes)) {
            woff[v] = align_up(wsize);
            wsize = woff[v] + bytes;
        }
    }
    const char *dup = qfi_qfm_duplicate_name(names, (size_t)nv);
    if (dup) {
        st = qf_error(QF_ERR_INVALID, "two tensors are named %s", dup);
        goto out;
    }
    write_meta(&mb, &m);
    if (mb.oom) {
        st = qf_error(QF_ERR_NOMEM, "out of memory");
        goto out;
    }
    st = write_graph(&gb, g, map, nv, woff);
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
            wcrc = qfi_qfm_crc_update(wcrc, zero, woff[v] - at);
            uint64_t bytes = qf_value_bytes(&g->values[v]);
            wcrc = qfi_qfm_crc_update(wcrc, g->values[v].data, bytes);
            at = woff[v] + bytes;
        }
    }
    uint8_t head[HEADER_BYTES + 3 * ENTRY_BYTES] = {0};
    memcpy(head, QFM_MAGIC, 4);
    put32(head + 4, (uint32_t)QF_QFM_VERSION_MAJOR << 16 | QF_QFM_VERSION_MINOR);
    put64(head + 8, file_size);
    put32(head + 16, 3);
    const struct {
        uint32_t type;
        uint64_t off, size;
        uint32_t crc;
    } sec[3] = {
        {SEC_META, meta_off, mb.n, qfi_qfm_crc(mb.p, mb.n)},
        {SEC_GRAPH, graph_off, gb.n, qfi_qfm_crc(gb.p, gb.n)},
        {SEC_WEIGHTS, wts_off, wsize, wcrc},
    };
    for (int i = 0; i < 3; i++) {
        uint8_t *e = head + HEADER_BYTES + i * ENTRY_BYTES;
        put32(e, sec[i].type);
        put64(e + 8, sec[i].off);
        put64(e + 16, sec[i].size);
        put32(e + 24, sec[i].crc);
    }
    put32(head + 24, qfi_qfm_crc(head + HEADER_BYTES, 3 * ENTRY_BYTES));
    put32(head + 28, qfi_qfm_crc(head, 28));

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
        st = qf_error(QF_ERR_IO, "write failed: %s", strerror(err ? err : EIO));
        goto out;
    }
    st = qfi_atomic_commit(&af);
out:
    free(map);
    free(woff);
    free(names);
    free(mb.p);
    free(gb.p);
    return st == QF_OK ? st : qfi_error_file(st, path); /* the one place the writer names its file */
}
