/* Reads a .qfm model file (qforge-model(5)), treating every file as hostile
 * -- bounds, counts, overflow, CRC-32 per section -- before it rebuilds the
 * graph, reparses every node and re-checks its shapes. */
#include "qfm_internal.h"
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const sec_names[SEC_KNOWN_END] = {NULL, "META", "GRAPH", "WEIGHTS"};

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
    if (qfi_qfm_has_control(p, n)) return rd_fail(r, "%s contains a control character", what);
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
    if (qfi_qfm_has_control(p, n)) {
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
    if (!qfi_tensor_bytes(dt, ndim, dims, bytes))
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

enum { META_TOOL, META_PRECISION, META_METHOD, META_IMAGES, META_SHA, META_PREPROCESS, META_SCALES, META_EQUALIZED,
       META_KEY_COUNT };
static const char *const meta_keys[META_KEY_COUNT] = {"tool_version",  "precision",     "calib_method",
                                                       "calib_images", "source_sha256", "preprocess",
                                                       "scale_source", "equalized"};

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
            if (n && !qfi_qfm_is_method_name(val)) rd_fail(r, "'%.32s' is not a calibration method", val);
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
        case META_SCALES:
            if (n && !qfi_qfm_is_scale_source(val)) rd_fail(r, "'%.32s' is not calibration or model", val);
            else memcpy(m->scale_source, val, n + 1);
            break;
        case META_SHA:
            if (n && !qfi_is_sha256_hex(val)) rd_fail(r, "'%.70s' is not 64 lowercase hex digits", val);
            else memcpy(m->source_sha256, val, n + 1);
            break;
        case META_EQUALIZED:
            if (n && !qfi_is_sha256_hex(val)) rd_fail(r, "'%.70s' is not 64 lowercase hex digits", val);
            else memcpy(m->equalized, val, n + 1);
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
    int32_t zero_point = flags & FILE_VALUE_ZERO_POINT ? (int32_t)rd_u32(r) : 0;
    flags &= ~FILE_VALUE_ZERO_POINT;
    if (!rd_dims(r, dt, nd, dims, &bytes)) return false;
    if (flags & ~(unsigned)VALUE_FLAGS) return rd_fail(r, "unknown flags 0x%x", flags);
    if ((flags & QF_VALUE_CONST) && (flags & QF_VALUE_INPUT)) return rd_fail(r, "is both an input and a constant");
    if (!isfinite(scale) || scale < 0) return rd_fail(r, "scale %g", (double)scale);
    const bool i8_activation = dt == QF_I8 && !(flags & QF_VALUE_CONST);
    if (i8_activation && !(scale > 0))
        return rd_fail(r, "an int8 activation needs a positive scale, not %g", (double)scale);
    if (zero_point && (!i8_activation || zero_point < -128 || zero_point > 127))
        return rd_fail(r, "zero point %d (only int8 activations have one, in [-128, 127])", (int)zero_point);
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
    x->zero_point = zero_point;
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
    if (act != QF_ACT_NONE && !qf_op_has_epilogue((qf_op)op))
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
        if (n->precision != QF_PREC_INT8 || qfi_ops[n->op]->int8 != QFI_INT8_COMPUTE || n->n_in < 3 || n->in[2] < 0)
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
        qf_status st = qfi_ops[n->op]->parse(g, n);
        if (st != QF_OK) return qfi_error_file(qfi_error_node(st, g, n), path);
    }
    qf_value *stored = qfi_calloc((size_t)g->n_values + 1, sizeof *stored);
    if (!stored) return QF_ERR_NOMEM;
    memcpy(stored, g->values, (size_t)g->n_values * sizeof *stored);
    qf_status st = qfi_graph_rebatch(g, g->batch);
    if (st != QF_OK) qfi_error_file(st, path);
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
    const char *dup = qfi_qfm_duplicate_name(names, (size_t)g->n_values);
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
    if (memcmp(f, QFM_MAGIC, size < 4 ? (size_t)size : 4) != 0)
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
    if (qfi_qfm_crc(f, 28) != get32(f + 28)) return qf_error(QF_ERR_FORMAT, "%s: header CRC mismatch: the file is corrupt", path);
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
    if (qfi_qfm_crc(f + HEADER_BYTES, table_end - HEADER_BYTES) != get32(f + 24))
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
        uint32_t c = qfi_qfm_crc(f + sec[i].off, sec[i].size);
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
        if (st != QF_OK) st = qf_error_prefix(qfi_error_file(st, path), "at batch %d", batch);
    }
    if (st != QF_OK) {
        qf_graph_free(g);
        return st;
    }
    m.batch = (int)get32(f + known[SEC_GRAPH].off + 24);
    memcpy(g->equalized, m.equalized, sizeof g->equalized);
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
    bool yes = fread(head, 1, 4, f) == 4 && memcmp(head, QFM_MAGIC, 4) == 0;
    fclose(f);
    return yes;
}
