/* ONNX import: reads a ModelProto through protobuf-c (gen/onnx/onnx.pb-c.h)
 * into a raw qf_graph -- values, nodes, attributes, initializers -- treating
 * the file as hostile: every count and size is checked before it is trusted.
 * Sorting, shape inference and folding are lib/passes.c's job. */
#include "onnx_internal.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

/* Opset 6 is read as opset 7 where the two agree (see upgrade_opset6); the op
 * parsers then see opset 7..21. */
#define ONNX_MIN_OPSET 6
#define ONNX_MAX_OPSET 21
/* protobuf cannot serialize a message above 2 GiB; larger weights go to external data */
#define ONNX_MAX_MODEL_BYTES ((size_t)INT32_MAX)

/* ---- files ------------------------------------------------------------------------- */

/* Reads exactly n bytes at `off`; a short read means the file changed or lied. */
static qf_status read_at(int fd, const char *path, uint64_t off, uint8_t *buf, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, buf + done, n - done, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR) continue;
            return qf_error(QF_ERR_IO, "%s: read failed: %s", path, strerror(errno));
        }
        if (r == 0) return qf_error(QF_ERR_FORMAT, "%s: file ended after %llu of %zu bytes", path,
                                    (unsigned long long)done, n);
        done += (size_t)r;
    }
    return QF_OK;
}

/* Opens a regular file for reading and returns its size. O_NONBLOCK keeps a
 * FIFO planted where a model should be from blocking the open; it changes
 * nothing for regular files. */
static qf_status open_regular(const char *path, int *fd_out, uint64_t *size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return qf_error(QF_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return qf_error(QF_ERR_IO, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode) || st.st_size < 0) {
        close(fd);
        return qf_error(QF_ERR_IO, "%s: not a regular file", path);
    }
    *fd_out = fd;
    *size = (uint64_t)st.st_size;
    return QF_OK;
}

qf_status qfi_read_file(const char *path, size_t max_bytes, uint8_t **data, size_t *size)
{
    *data = NULL;
    *size = 0;
    int fd = -1;
    uint64_t fsize = 0;
    QF_CHECK(open_regular(path, &fd, &fsize));
    if (fsize > max_bytes) {
        close(fd);
        return qf_error(QF_ERR_FORMAT, "%s: %llu bytes is more than the %zu this kind of file may hold", path,
                        (unsigned long long)fsize, max_bytes);
    }
    uint8_t *buf = qfi_calloc((size_t)fsize + 1, 1);
    if (!buf) {
        close(fd);
        return QF_ERR_NOMEM;
    }
    qf_status st = read_at(fd, path, 0, buf, (size_t)fsize);
    close(fd);
    if (st != QF_OK) {
        free(buf);
        return st;
    }
    *data = buf;
    *size = (size_t)fsize;
    return QF_OK;
}

/* ---- tensors ------------------------------------------------------------------------ */

static const char *const onnx_type_names[] = {
    [0] = "undefined", [1] = "float",    [2] = "uint8",    [3] = "int8",        [4] = "uint16",
    [5] = "int16",     [6] = "int32",    [7] = "int64",    [8] = "string",      [9] = "bool",
    [10] = "float16",  [11] = "double",  [12] = "uint32",  [13] = "uint64",     [14] = "complex64",
    [15] = "complex128", [16] = "bfloat16", [17] = "float8e4m3fn", [18] = "float8e4m3fnuz",
    [19] = "float8e5m2", [20] = "float8e5m2fnuz", [21] = "uint4", [22] = "int4", [23] = "float4e2m1",
};

static const char *onnx_type_name(int t)
{
    return t >= 0 && (size_t)t < QF_ARRAY_LEN(onnx_type_names) && onnx_type_names[t] ? onnx_type_names[t] : "unknown";
}

static const char *tensor_label(const Onnx__TensorProto *t)
{
    return t->name && t->name[0] ? t->name : "(unnamed)";
}

/* raw_data is little-endian; a big-endian host swaps each element in place. */
static void from_little_endian(uint8_t *p, size_t nbytes, size_t esize)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    for (size_t i = 0; esize > 1 && i + esize <= nbytes; i += esize)
        for (size_t a = i, b = i + esize - 1; a < b; a++, b--) {
            uint8_t tmp = p[a];
            p[a] = p[b];
            p[b] = tmp;
        }
#else
    (void)p;
    (void)nbytes;
    (void)esize;
#endif
}

/* A non-negative decimal integer below 2^63, nothing else. */
static bool parse_u63(const char *s, uint64_t *out)
{
    if (!s || !*s) return false;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return false;
        unsigned d = (unsigned)(*s - '0');
        if (v > ((uint64_t)INT64_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

/* External locations are relative to the model's folder and may not leave it. */
static bool location_is_safe(const char *loc)
{
    if (!loc[0] || loc[0] == '/') return false;
    for (const char *p = loc; *p;) {
        size_t len = strcspn(p, "/\\");
        if (len == 2 && p[0] == '.' && p[1] == '.') return false;
        p += len;
        if (*p) p++;
    }
    return true;
}

/* Where a tensor's external bytes are: an open file, an offset and a length
 * already checked against the file's size. */
typedef struct ext_source {
    int fd;
    char *path;
    uint64_t offset, length;
} ext_source;

static void ext_close(ext_source *x)
{
    if (x->fd >= 0) close(x->fd);
    free(x->path);
    x->fd = -1;
    x->path = NULL;
}

static qf_status ext_open(const Onnx__TensorProto *t, const char *model_dir, ext_source *x)
{
    const char *name = tensor_label(t);
    const char *loc = NULL, *off_s = NULL, *len_s = NULL;
    x->fd = -1;
    x->path = NULL;
    for (size_t i = 0; i < t->n_external_data; i++) {
        const Onnx__StringStringEntryProto *kv = t->external_data[i];
        if (!kv->key) continue;
        if (strcmp(kv->key, "location") == 0) loc = kv->value;
        else if (strcmp(kv->key, "offset") == 0) off_s = kv->value;
        else if (strcmp(kv->key, "length") == 0) len_s = kv->value;
    }
    if (!loc || !loc[0]) return qf_error(QF_ERR_FORMAT, "tensor %s: external data without a location", name);
    if (!location_is_safe(loc))
        return qf_error(QF_ERR_INVALID, "tensor %s: external data location '%s' is absolute or leaves the model's folder",
                        name, loc);
    if (!model_dir)
        return qf_error(QF_ERR_INVALID, "tensor %s: external data '%s' but no model folder to read it from", name, loc);
    uint64_t offset = 0, length = 0;
    if (off_s && !parse_u63(off_s, &offset))
        return qf_error(QF_ERR_FORMAT, "tensor %s: external data offset '%s' is not a byte count", name, off_s);
    if (len_s && !parse_u63(len_s, &length))
        return qf_error(QF_ERR_FORMAT, "tensor %s: external data length '%s' is not a byte count", name, len_s);
    size_t plen = strlen(model_dir) + 1 + strlen(loc) + 1;
    x->path = qfi_calloc(plen, 1);
    if (!x->path) return QF_ERR_NOMEM;
    snprintf(x->path, plen, "%s/%s", model_dir, loc);
    uint64_t fsize = 0;
    qf_status st = open_regular(x->path, &x->fd, &fsize);
    if (st != QF_OK) {
        ext_close(x);
        return qf_error_prefix(st, "tensor %s: external data", name);
    }
    if (offset > fsize) {
        st = qf_error(QF_ERR_FORMAT, "tensor %s: external data offset %llu is past the end of %s (%llu bytes)", name,
                      (unsigned long long)offset, x->path, (unsigned long long)fsize);
        ext_close(x);
        return st;
    }
    if (!len_s) length = fsize - offset;
    if (length > fsize - offset) {
        st = qf_error(QF_ERR_FORMAT, "tensor %s: external data [%llu, +%llu) runs past the end of %s (%llu bytes)",
                      name, (unsigned long long)offset, (unsigned long long)length, x->path,
                      (unsigned long long)fsize);
        ext_close(x);
        return st;
    }
    x->offset = offset;
    x->length = length;
    return QF_OK;
}

/* Copies the typed repeated field that holds this dtype (int32_data carries
 * every type narrower than 32 bits, one element per entry). */
static qf_status decode_typed(const Onnx__TensorProto *t, qf_dtype dt, int64_t numel, void *dst)
{
    const char *name = tensor_label(t);
    for (int64_t i = 0; i < numel; i++) {
        int32_t v;
        switch (dt) {
        case QF_F32: ((float *)dst)[i] = t->float_data[i]; continue;
        case QF_I64: ((int64_t *)dst)[i] = t->int64_data[i]; continue;
        case QF_I32: ((int32_t *)dst)[i] = t->int32_data[i]; continue;
        default: v = t->int32_data[i]; break;
        }
        bool ok;
        switch (dt) {
        case QF_F16:
        case QF_BF16:
            ok = v >= 0 && v <= 0xffff;
            ((uint16_t *)dst)[i] = (uint16_t)v;
            break;
        case QF_I8:
            ok = v >= INT8_MIN && v <= INT8_MAX;
            ((int8_t *)dst)[i] = (int8_t)v;
            break;
        case QF_U8:
            ok = v >= 0 && v <= UINT8_MAX;
            ((uint8_t *)dst)[i] = (uint8_t)v;
            break;
        case QF_BOOL:
            ok = v == 0 || v == 1;
            ((uint8_t *)dst)[i] = (uint8_t)(v != 0);
            break;
        default: QF_ASSERT(!"dtype without a typed field");
        }
        if (!ok)
            return qf_error(QF_ERR_FORMAT, "tensor %s: element %lld (%d) is out of range for %s", name, (long long)i,
                            (int)v, qf_dtype_info(dt)->name);
    }
    return QF_OK;
}

/* How many elements the typed field for `dt` holds. */
static size_t typed_count(const Onnx__TensorProto *t, qf_dtype dt, const char **field)
{
    switch (dt) {
    case QF_F32: *field = "float_data"; return t->n_float_data;
    case QF_I64: *field = "int64_data"; return t->n_int64_data;
    default: *field = "int32_data"; return t->n_int32_data;
    }
}

qf_status qfi_onnx_tensor_decode(const Onnx__TensorProto *t, const char *model_dir, qf_value *out)
{
    memset(out, 0, sizeof *out);
    out->producer = -1;
    const char *name = tensor_label(t);
    int onnx_type = t->has_data_type ? t->data_type : 0;
    qf_dtype dt;
    if (!qf_dtype_from_onnx(onnx_type, &dt)) {
        if (onnx_type == ONNX__TENSOR_PROTO__DATA_TYPE__UNDEFINED)
            return qf_error(QF_ERR_FORMAT, "tensor %s has no data type", name);
        return qf_error(QF_ERR_UNSUPPORTED, "tensor %s: dtype %s is not supported", name, onnx_type_name(onnx_type));
    }
    if (t->segment) return qf_error(QF_ERR_UNSUPPORTED, "tensor %s: segmented tensors are not supported", name);
    if (t->n_dims > QF_MAX_DIMS)
        return qf_error(QF_ERR_UNSUPPORTED, "tensor %s has %zu dims (at most %d)", name, t->n_dims, QF_MAX_DIMS);
    int64_t numel = 1, nbytes;
    for (size_t i = 0; i < t->n_dims; i++) {
        if (t->dims[i] < 0)
            return qf_error(QF_ERR_FORMAT, "tensor %s: dim %zu is negative (%lld)", name, i, (long long)t->dims[i]);
        if (__builtin_mul_overflow(numel, t->dims[i], &numel))
            return qf_error(QF_ERR_FORMAT, "tensor %s: the element count of its dims overflows", name);
    }
    size_t esize = qf_dtype_info(dt)->size;
    if (__builtin_mul_overflow(numel, (int64_t)esize, &nbytes))
        return qf_error(QF_ERR_FORMAT, "tensor %s: the byte size of its dims overflows", name);

    /* how many bytes the file actually provides, checked before we allocate */
    bool external = t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    ext_source ext = {.fd = -1};
    const char *field = "raw_data";
    if (external) {
        QF_CHECK(ext_open(t, model_dir, &ext));
        if (ext.length != (uint64_t)nbytes) {
            qf_status st = qf_error(QF_ERR_FORMAT, "tensor %s: dims need %lld bytes but external data holds %llu",
                                    name, (long long)nbytes, (unsigned long long)ext.length);
            ext_close(&ext);
            return st;
        }
    } else if (t->has_raw_data) {
        if (t->raw_data.len != (size_t)nbytes)
            return qf_error(QF_ERR_FORMAT, "tensor %s: dims need %lld bytes but raw_data holds %zu", name,
                            (long long)nbytes, t->raw_data.len);
    } else {
        size_t have = typed_count(t, dt, &field);
        if (have != (uint64_t)numel)
            return qf_error(QF_ERR_FORMAT, "tensor %s: dims need %lld elements but %s holds %zu", name,
                            (long long)numel, field, have);
    }
    if (nbytes > QF_MAX_TENSOR_BYTES) {
        ext_close(&ext);
        return qf_error(QF_ERR_NOMEM, "tensor %s: %lld bytes exceed the %lld-byte bound", name, (long long)nbytes,
                        (long long)QF_MAX_TENSOR_BYTES);
    }

    uint8_t *data = qfi_calloc((size_t)nbytes ? (size_t)nbytes : 1, 1);
    out->name = qfi_strdup(t->name);
    qf_status st = data && out->name ? QF_OK : QF_ERR_NOMEM;
    if (st == QF_OK) {
        if (external) {
            st = read_at(ext.fd, ext.path, ext.offset, data, (size_t)nbytes);
            if (st != QF_OK) qf_error_prefix(st, "tensor %s: external data", name);
            from_little_endian(data, (size_t)nbytes, esize);
        } else if (t->has_raw_data) {
            if (nbytes) memcpy(data, t->raw_data.data, (size_t)nbytes);
            from_little_endian(data, (size_t)nbytes, esize);
        } else {
            st = decode_typed(t, dt, numel, data);
        }
    }
    ext_close(&ext);
    if (st != QF_OK) {
        free(data);
        free(out->name);
        out->name = NULL;
        return st;
    }
    out->data = data;
    out->dtype = dt;
    out->ndim = (int)t->n_dims;
    for (size_t i = 0; i < t->n_dims; i++) out->dims[i] = t->dims[i];
    out->flags = QF_VALUE_CONST;
    return QF_OK;
}

/* ---- the model ------------------------------------------------------------------------ */

/* Import state: the protobuf, the graph under construction and a name -> value
 * index table (ONNX names every tensor; graph.c's lookup is a linear scan). */
typedef struct qfi_onnx_loader {
    const char *path;
    char *dir;
    const Onnx__GraphProto *gp;
    qf_graph *g;
    char **node_names; /* given or generated, per ONNX node */
    size_t n_node_names;
    int *slots;        /* open addressing, -1 = empty */
    size_t nslots;     /* a power of two, at least twice the names in it */
    size_t nnames;
    qfi_qop_state *qop; /* quantized ONNX (lib/onnx_qop.c) */
} loader;

static size_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (size_t)h;
}

static int name_find(const loader *L, const char *name)
{
    for (size_t i = hash_name(name) & (L->nslots - 1);; i = (i + 1) & (L->nslots - 1)) {
        int v = L->slots[i];
        if (v < 0) return -1;
        if (strcmp(L->g->values[v].name, name) == 0) return v;
    }
}

/* Adds a value and registers its name; the caller has checked the name is new. */
static void slot_insert(loader *L, int v)
{
    size_t i = hash_name(L->g->values[v].name) & (L->nslots - 1);
    while (L->slots[i] >= 0) i = (i + 1) & (L->nslots - 1);
    L->slots[i] = v;
}

static int add_named_value(loader *L, const char *name, qf_dtype dt, int ndim, const int64_t *dims)
{
    if (2 * (L->nnames + 1) > L->nslots) {
        /* values the quantized-ONNX import adds outgrow the table made for the file's names */
        int *old = L->slots;
        size_t n = L->nslots;
        L->slots = malloc(2 * n * sizeof *L->slots);
        if (!L->slots) {
            L->slots = old;
            qf_error(QF_ERR_NOMEM, "%s: out of memory", L->path);
            return -1;
        }
        L->nslots = 2 * n;
        memset(L->slots, 0xff, L->nslots * sizeof *L->slots);
        for (size_t i = 0; i < n; i++)
            if (old[i] >= 0) slot_insert(L, old[i]);
        free(old);
    }
    int v = qf_graph_add_value(L->g, name, dt, ndim, dims);
    if (v < 0) return -1;
    slot_insert(L, v);
    L->nnames++;
    return v;
}

/* ---- the interface lib/onnx_qop.c builds with --------------------------------------- */

qf_graph *qfi_onnx_graph(qfi_onnx_loader *L) { return L->g; }

int qfi_onnx_new_value(qfi_onnx_loader *L, const char *base, const char *suffix)
{
    char name[1024];
    snprintf(name, sizeof name, "%s/%s", base, suffix);
    for (int k = 1; name_find(L, name) >= 0; k++) snprintf(name, sizeof name, "%s/%s_%d", base, suffix, k);
    return add_named_value(L, name, QF_F32, 0, NULL);
}

int qfi_onnx_new_const(qfi_onnx_loader *L, const char *base, const char *suffix, qf_dtype dt, int ndim,
                       const int64_t *dims, void *data)
{
    int v = qfi_onnx_new_value(L, base, suffix);
    if (v < 0) {
        free(data);
        return -1;
    }
    qfi_value_set_shape(&L->g->values[v], dt, ndim, dims);
    L->g->values[v].data = data;
    L->g->values[v].flags |= QF_VALUE_CONST;
    return v;
}

/* What a ValueInfoProto declares about a tensor. */
typedef struct declared_type {
    bool has_type, has_shape;
    qf_dtype dtype;
    int ndim;
    int64_t dims[QF_MAX_DIMS]; /* -1 for symbolic or missing dims */
} declared_type;

static qf_status read_value_info(const loader *L, const Onnx__ValueInfoProto *vi, const char *what,
                                 declared_type *d)
{
    memset(d, 0, sizeof *d);
    const Onnx__TypeProto *tp = vi->type;
    if (!tp || tp->value_case == ONNX__TYPE_PROTO__VALUE__NOT_SET) return QF_OK;
    if (tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
        return qf_error(QF_ERR_UNSUPPORTED, "%s %s is not a tensor (sequence, map, optional or sparse)", what,
                        vi->name);
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    int et = tt->has_elem_type ? tt->elem_type : 0;
    if (et != ONNX__TENSOR_PROTO__DATA_TYPE__UNDEFINED) {
        if (!qf_dtype_from_onnx(et, &d->dtype))
            return qf_error(QF_ERR_UNSUPPORTED, "%s %s: dtype %s is not supported", what, vi->name, onnx_type_name(et));
        d->has_type = true;
    }
    if (!tt->shape) return QF_OK;
    if (tt->shape->n_dim > QF_MAX_DIMS)
        return qf_error(QF_ERR_UNSUPPORTED, "%s %s has %zu dims (at most %d)", what, vi->name, tt->shape->n_dim,
                        QF_MAX_DIMS);
    d->has_shape = true;
    d->ndim = (int)tt->shape->n_dim;
    for (int i = 0; i < d->ndim; i++) {
        const Onnx__TensorShapeProto__Dimension *dim = tt->shape->dim[i];
        d->dims[i] = -1;
        if (dim->value_case != ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) continue;
        if (dim->dim_value < 0)
            return qf_error(QF_ERR_FORMAT, "%s %s: dim %d is negative (%lld)", what, vi->name, i,
                            (long long)dim->dim_value);
        d->dims[i] = dim->dim_value;
    }
    return QF_OK;
}

/* Applies a declaration to a value computed by a node (its shape is a hint
 * until shape inference). */
static void apply_declared(qf_value *v, const declared_type *d)
{
    if (d->has_type) v->dtype = d->dtype;
    if (d->has_shape) {
        v->ndim = d->ndim;
        memcpy(v->dims, d->dims, sizeof v->dims);
    }
}

/* The checks that need only the protobuf: counts, node domains and ops, and
 * the default-domain opset. */
static qf_status check_model(loader *L, const Onnx__ModelProto *m)
{
    const Onnx__GraphProto *gp = L->gp;
    if (gp->n_node > QF_MAX_NODES)
        return qf_error(QF_ERR_NOMEM, "%zu nodes (at most %d)", gp->n_node, QF_MAX_NODES);
    if (gp->n_sparse_initializer > 0)
        return qf_error(QF_ERR_UNSUPPORTED, "sparse initializer %s is not supported",
                        gp->sparse_initializer[0]->values && gp->sparse_initializer[0]->values->name
                            ? gp->sparse_initializer[0]->values->name
                            : "(unnamed)");
    /* every value is an initializer, an input or a node output: bound them before allocating */
    size_t nvals = gp->n_initializer + gp->n_input;
    for (size_t i = 0; i < gp->n_node; i++) {
        nvals += gp->node[i]->n_output;
        if (nvals > QF_MAX_VALUES) break;
    }
    if (nvals > QF_MAX_VALUES)
        return qf_error(QF_ERR_NOMEM, "more than %d tensors", QF_MAX_VALUES);
    L->nslots = 16;
    while (L->nslots < 2 * nvals) L->nslots *= 2;
    L->slots = malloc(L->nslots * sizeof *L->slots);
    L->node_names = qfi_calloc(gp->n_node + 1, sizeof *L->node_names);
    if (!L->slots || !L->node_names) return qf_error(QF_ERR_NOMEM, "out of memory");
    L->n_node_names = gp->n_node;
    memset(L->slots, 0xff, L->nslots * sizeof *L->slots);

    /* names, domains and ops first: an unknown op is the most useful error */
    for (size_t i = 0; i < gp->n_node; i++) {
        const Onnx__NodeProto *np = gp->node[i];
        const char *type = np->op_type ? np->op_type : "";
        if (np->name && np->name[0]) {
            L->node_names[i] = qfi_strdup(np->name);
        } else {
            size_t len = strlen(type) + 24;
            L->node_names[i] = qfi_calloc(len, 1);
            if (L->node_names[i]) snprintf(L->node_names[i], len, "%s_%zu", type[0] ? type : "node", i);
        }
        if (!L->node_names[i]) return qf_error(QF_ERR_NOMEM, "out of memory");
        const char *name = L->node_names[i];
        if (!type[0]) return qfi_error_context(qf_error(QF_ERR_FORMAT, "no op_type"), NULL, name, NULL);
        const char *dom = np->domain ? np->domain : "";
        if (qfi_qop_known(dom, type)) continue;
        if (strcmp(dom, "") != 0 && strcmp(dom, "ai.onnx") != 0)
            return qfi_error_context(
                qf_error(QF_ERR_UNSUPPORTED, "op %s of domain %s is not supported", type, dom), NULL, name, NULL);
        qf_op op;
        if (!qf_op_lookup(type, &op))
            return qfi_error_context(qf_error(QF_ERR_UNSUPPORTED, "unsupported op %s", type), NULL, name, NULL);
    }

    int64_t opset = -1;
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = m->opset_import[i];
        const char *dom = o->domain ? o->domain : "";
        if ((strcmp(dom, "") == 0 || strcmp(dom, "ai.onnx") == 0) && o->version > opset) opset = o->version;
    }
    if (opset < 0)
        return qf_error(QF_ERR_UNSUPPORTED, "the model imports no ai.onnx opset (qforge reads opsets %d to %d)",
                        ONNX_MIN_OPSET, ONNX_MAX_OPSET);
    if (opset < ONNX_MIN_OPSET || opset > ONNX_MAX_OPSET)
        return qf_error(QF_ERR_UNSUPPORTED, "opset %lld is not supported (qforge reads opsets %d to %d)",
                        (long long)opset, ONNX_MIN_OPSET, ONNX_MAX_OPSET);
    L->g->opset = opset;
    return QF_OK;
}

static qf_status load_initializers(loader *L)
{
    for (size_t i = 0; i < L->gp->n_initializer; i++) {
        const Onnx__TensorProto *t = L->gp->initializer[i];
        if (!t->name || !t->name[0]) return qf_error(QF_ERR_FORMAT, "initializer %zu has no name", i);
        if (name_find(L, t->name) >= 0)
            return qf_error(QF_ERR_INVALID, "initializer %s is defined twice", t->name);
        qf_value tmp;
        qf_status st = qfi_onnx_tensor_decode(t, L->dir, &tmp);
        if (st != QF_OK) return st;
        int v = add_named_value(L, t->name, tmp.dtype, tmp.ndim, tmp.dims);
        free(tmp.name);
        if (v < 0) {
            free(tmp.data);
            return QF_ERR_NOMEM; /* graph.c's message names the file */
        }
        L->g->values[v].data = tmp.data;
        L->g->values[v].flags |= QF_VALUE_CONST;
    }
    return QF_OK;
}

/* Graph inputs that are not initializers are fed by the caller. Before IR 4
 * every initializer was listed as an input too; those stay constants. */
static qf_status load_inputs(loader *L)
{
    qf_graph *g = L->g;
    g->inputs = qfi_calloc(L->gp->n_input + 1, sizeof *g->inputs);
    if (!g->inputs) return QF_ERR_NOMEM;
    for (size_t i = 0; i < L->gp->n_input; i++) {
        const Onnx__ValueInfoProto *vi = L->gp->input[i];
        if (!vi->name || !vi->name[0]) return qf_error(QF_ERR_FORMAT, "graph input %zu has no name", i);
        int v = name_find(L, vi->name);
        if (v >= 0) {
            if (g->values[v].flags & QF_VALUE_INPUT)
                return qf_error(QF_ERR_INVALID, "graph input %s is listed twice", vi->name);
            continue; /* an initializer */
        }
        declared_type d;
        QF_CHECK(read_value_info(L, vi, "input", &d));
        if (!d.has_type) return qf_error(QF_ERR_FORMAT, "input %s declares no element type", vi->name);
        if (!d.has_shape)
            return qf_error(QF_ERR_UNSUPPORTED, "input %s declares no shape (unknown rank)", vi->name);
        v = add_named_value(L, vi->name, d.dtype, d.ndim, d.dims);
        if (v < 0) return QF_ERR_NOMEM;
        g->values[v].flags |= QF_VALUE_INPUT;
        g->inputs[g->n_inputs++] = v;
    }
    return QF_OK;
}

/* Creates every node's output values before any input is resolved: ONNX
 * files are meant to be sorted, but qf_graph_prepare sorts (and finds cycles)
 * so a node may read a value defined further down. */
static qf_status create_node_outputs(loader *L)
{
    for (size_t i = 0; i < L->gp->n_node; i++) {
        const Onnx__NodeProto *np = L->gp->node[i];
        for (size_t k = 0; k < np->n_output; k++) {
            const char *o = np->output[k];
            if (!o || !o[0]) continue; /* an omitted optional output */
            if (name_find(L, o) >= 0)
                return qfi_error_context(qf_error(QF_ERR_INVALID, "output %s is already defined elsewhere", o), NULL,
                                         L->node_names[i], np->op_type);
            if (add_named_value(L, o, QF_F32, 0, NULL) < 0) return QF_ERR_NOMEM;
        }
    }
    /* value_info declares intermediate types; shape inference has the last word */
    for (size_t i = 0; i < L->gp->n_value_info; i++) {
        const Onnx__ValueInfoProto *vi = L->gp->value_info[i];
        int v = vi->name ? name_find(L, vi->name) : -1;
        if (v < 0 || (L->g->values[v].flags & (QF_VALUE_INPUT | QF_VALUE_CONST))) continue;
        declared_type d;
        QF_CHECK(read_value_info(L, vi, "value", &d));
        apply_declared(&L->g->values[v], &d);
    }
    return QF_OK;
}

static qf_status convert_attr(loader *L, const Onnx__AttributeProto *ap, qf_attr *a)
{
    const char *an = ap->name ? ap->name : "";
    if (!an[0]) return qf_error(QF_ERR_FORMAT, "attribute without a name");
    if (ap->ref_attr_name && ap->ref_attr_name[0])
        return qf_error(QF_ERR_INVALID, "attribute %s refers to a function attribute outside a function", an);
    a->name = qfi_strdup(an);
    if (!a->name) return QF_ERR_NOMEM;
    int type = ap->has_type ? (int)ap->type : 0;
    if (type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED) {
        /* IR version 1 left the type out; the field in use tells it */
        if (ap->t) type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
        else if (ap->n_ints) type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
        else if (ap->n_floats) type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS;
        else if (ap->has_s) type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
        else if (ap->has_f) type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
        else if (ap->has_i) type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    }
    switch (type) {
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT:
        a->type = QF_ATTR_INT;
        a->i = ap->i;
        return QF_OK;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT:
        a->type = QF_ATTR_FLOAT;
        a->f = ap->f;
        return QF_OK;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING:
        a->type = QF_ATTR_STRING;
        a->s = qfi_calloc(ap->s.len + 1, 1);
        if (!a->s) return QF_ERR_NOMEM;
        if (ap->s.len) memcpy(a->s, ap->s.data, ap->s.len);
        return QF_OK;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS:
        if (ap->n_ints > INT_MAX) return qf_error(QF_ERR_FORMAT, "attribute %s has too many ints", an);
        a->type = QF_ATTR_INTS;
        /* non-NULL even when empty: a present empty list differs from an absent one */
        a->ints = qfi_calloc(ap->n_ints + 1, sizeof *a->ints);
        if (!a->ints) return QF_ERR_NOMEM;
        if (ap->n_ints) memcpy(a->ints, ap->ints, ap->n_ints * sizeof *a->ints);
        a->n = (int)ap->n_ints;
        return QF_OK;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS:
        if (ap->n_floats > INT_MAX) return qf_error(QF_ERR_FORMAT, "attribute %s has too many floats", an);
        a->type = QF_ATTR_FLOATS;
        a->floats = qfi_calloc(ap->n_floats + 1, sizeof *a->floats);
        if (!a->floats) return QF_ERR_NOMEM;
        if (ap->n_floats) memcpy(a->floats, ap->floats, ap->n_floats * sizeof *a->floats);
        a->n = (int)ap->n_floats;
        return QF_OK;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR: {
        if (!ap->t) return qf_error(QF_ERR_FORMAT, "tensor attribute %s holds no tensor", an);
        a->type = QF_ATTR_TENSOR;
        a->t = qfi_calloc(1, sizeof *a->t);
        if (!a->t) return QF_ERR_NOMEM;
        qf_status st = qfi_onnx_tensor_decode(ap->t, L->dir, a->t);
        if (st != QF_OK) return qf_error_prefix(st, "attribute %s", an);
        return QF_OK;
    }
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH:
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS:
        return qf_error(QF_ERR_UNSUPPORTED, "attribute %s holds a subgraph (control flow is not supported)", an);
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSOR:
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSORS:
        return qf_error(QF_ERR_UNSUPPORTED, "attribute %s holds a sparse tensor (not supported)", an);
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS:
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSORS:
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTO:
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTOS:
        return qf_error(QF_ERR_UNSUPPORTED, "attribute %s has a list/type kind qforge does not read", an);
    default:
        return qf_error(QF_ERR_FORMAT, "attribute %s has unknown type %d", an, type);
    }
}

qf_status qfi_onnx_emit_node(qfi_onnx_loader *L, const char *name, qf_op op, int n_in, const int *in, int n_out,
                             const int *out, const Onnx__NodeProto *np, const char *const *skip)
{
    qf_graph *g = L->g;
    int ni = qf_graph_add_node(g, name, op, n_in, in, n_out, out);
    if (ni < 0) return QF_ERR_NOMEM;
    if (!np || np->n_attribute == 0) return QF_OK;
    if (np->n_attribute > INT_MAX) return qf_error(QF_ERR_FORMAT, "too many attributes");
    g->nodes[ni].attrs = qfi_calloc(np->n_attribute, sizeof(qf_attr));
    if (!g->nodes[ni].attrs) return QF_ERR_NOMEM;
    for (size_t k = 0; k < np->n_attribute; k++) {
        bool skipped = false;
        for (int s = 0; skip && skip[s]; s++)
            skipped |= np->attribute[k]->name && strcmp(np->attribute[k]->name, skip[s]) == 0;
        if (skipped) continue;
        /* counted before converting so a half-built attribute is freed with the graph */
        qf_attr *a = &g->nodes[ni].attrs[g->nodes[ni].n_attr++];
        QF_CHECK(convert_attr(L, np->attribute[k], a));
    }
    return QF_OK;
}

/* Adds node i with its inputs, outputs and attributes; messages give only the
 * detail (load_nodes names the node). Quantized ONNX (QOperator ops, Q/DQ
 * parameters, ops on quantized tensors) becomes Q/DQ nodes around float ops
 * (lib/onnx_qop.c); everything else is one node. */
static qf_status load_node(loader *L, size_t i)
{
    const Onnx__NodeProto *np = L->gp->node[i];
    /* trailing omitted outputs are dropped; inner ones become -1 */
    size_t n_out = np->n_output;
    while (n_out > 0 && (!np->output[n_out - 1] || !np->output[n_out - 1][0])) n_out--;
    if (np->n_input > INT_MAX / 2 || n_out > INT_MAX / 2)
        return qf_error(QF_ERR_FORMAT, "too many inputs or outputs");
    int *io = qfi_calloc(np->n_input + n_out + 1, sizeof *io);
    if (!io) return QF_ERR_NOMEM;
    int *in = io, *out = io + np->n_input;
    for (size_t k = 0; k < np->n_input; k++) {
        const char *x = np->input[k];
        in[k] = -1;
        if (!x || !x[0]) continue;
        in[k] = name_find(L, x);
        if (in[k] < 0) {
            free(io);
            return qf_error(QF_ERR_INVALID, "input %s is not produced by any node (missing initializer?)", x);
        }
    }
    /* ONNX's QuantizeLinear and DequantizeLinear need their scale; qforge's
     * own conversions, which take the value's, are never read from ONNX (one
     * left without a scale made a node read a value nothing computed) */
    if ((!strcmp(np->op_type, "QuantizeLinear") || !strcmp(np->op_type, "DequantizeLinear")) &&
        (np->n_input < 2 || in[1] < 0)) {
        free(io);
        return qf_error(QF_ERR_INVALID, "%s without its scale (input 1 is required)", np->op_type);
    }
    for (size_t k = 0; k < n_out; k++) out[k] = np->output[k] && np->output[k][0] ? name_find(L, np->output[k]) : -1;
    const char *name = L->node_names[i];
    bool done = false;
    qf_status st = qfi_qop_node(L, L->qop, np, name, (int)np->n_input, in, (int)n_out, out, &done);
    if (st == QF_OK && !done) {
        qf_op op;
        QF_ASSERT(qf_op_lookup(np->op_type, &op)); /* checked by check_model */
        st = qfi_onnx_emit_node(L, name, op, (int)np->n_input, in, (int)n_out, out, np, NULL);
    }
    free(io);
    return st;
}

static qf_status load_nodes(loader *L)
{
    for (size_t i = 0; i < L->gp->n_node; i++) {
        qf_status st = load_node(L, i);
        if (st != QF_OK) return qfi_error_context(st, NULL, L->node_names[i], L->gp->node[i]->op_type);
    }
    return QF_OK;
}

static qf_status load_outputs(loader *L)
{
    qf_graph *g = L->g;
    g->outputs = qfi_calloc(L->gp->n_output + 1, sizeof *g->outputs);
    if (!g->outputs) return QF_ERR_NOMEM;
    if (L->gp->n_output == 0) return qf_error(QF_ERR_INVALID, "the graph has no outputs");
    for (size_t i = 0; i < L->gp->n_output; i++) {
        const Onnx__ValueInfoProto *vi = L->gp->output[i];
        const char *name = vi->name ? vi->name : "";
        int v = name[0] ? name_find(L, name) : -1;
        if (v < 0)
            return qf_error(QF_ERR_INVALID, "graph output %s is not produced by any node",
                            name[0] ? name : "(unnamed)");
        declared_type d;
        QF_CHECK(read_value_info(L, vi, "output", &d));
        qf_value *val = &g->values[v];
        if (!(val->flags & (QF_VALUE_INPUT | QF_VALUE_CONST))) apply_declared(val, &d);
        val->flags |= QF_VALUE_OUTPUT;
        g->outputs[g->n_outputs++] = v;
    }
    return QF_OK;
}

/* Opset 7 changed, among qforge's ops, only Add/Sub/Mul/Div, Gemm, PRelu,
 * BatchNormalization, Dropout, AveragePool and Upsample. An opset 6 graph
 * becomes an opset 7 graph here when its nodes mean the same under both:
 * each op that changed says how in its descriptor (from_opset6), refusing
 * the nodes whose meaning differs. Legacy broadcast/axis attributes of
 * Add..Div are left for their parser, which refuses them. AveragePool-7 only
 * added count_include_pad, whose default is the old behaviour. */
static qf_status upgrade_opset6(loader *L)
{
    qf_graph *g = L->g;
    for (int i = 0; i < g->n_nodes; i++) {
        qf_node *n = &g->nodes[i];
        qf_status st = qfi_ops[n->op]->from_opset6 ? qfi_ops[n->op]->from_opset6(g, n) : QF_OK;
        if (st != QF_OK) return qfi_error_node(st, g, n);
    }
    g->opset = 7;
    return QF_OK;
}

/* Runs every op's attribute parser so bad attributes surface at load. */
static qf_status parse_nodes(loader *L)
{
    qf_graph *g = L->g;
    for (int i = 0; i < g->n_nodes; i++) {
        qf_node *n = &g->nodes[i];
        qf_status st = qfi_ops[n->op]->parse(g, n);
        if (st != QF_OK) return qfi_error_node(st, g, n);
    }
    return QF_OK;
}

static qf_status load_graph(loader *L, const Onnx__ModelProto *m)
{
    L->gp = m->graph;
    if (!L->gp) return qf_error(QF_ERR_FORMAT, "not an ONNX model (no graph)");
    L->g = qf_graph_new(L->path);
    L->qop = qfi_qop_state_new();
    if (!L->g || !L->qop) return QF_ERR_NOMEM;
    QF_CHECK(check_model(L, m));
    QF_CHECK(load_initializers(L));
    QF_CHECK(load_inputs(L));
    QF_CHECK(create_node_outputs(L));
    QF_CHECK(load_nodes(L));
    QF_CHECK(load_outputs(L));
    if (L->g->opset == 6) QF_CHECK(upgrade_opset6(L));
    return parse_nodes(L);
}

qf_status qf_onnx_load(const char *path, qf_graph **out)
{
    if (!out) return qf_error(QF_ERR_USAGE, "qf_onnx_load: out is NULL");
    *out = NULL;
    if (!path) return qf_error(QF_ERR_USAGE, "qf_onnx_load: path is NULL");
    uint8_t *buf;
    size_t len;
    QF_CHECK(qfi_read_file(path, ONNX_MAX_MODEL_BYTES, &buf, &len));
    if (len == 0) {
        free(buf);
        return qfi_error_file(qf_error(QF_ERR_FORMAT, "empty file"), path);
    }
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, len, buf);
    free(buf);
    if (!m)
        return qfi_error_file(
            qf_error(QF_ERR_FORMAT, "not an ONNX model (protobuf parse failed: truncated or corrupt)"), path);

    loader L = {.path = path};
    qf_status st = QF_OK;
    const char *slash = strrchr(path, '/');
    L.dir = slash ? strndup(path, (size_t)(slash - path) + (slash == path)) : strdup(".");
    if (!L.dir) st = qf_error(QF_ERR_NOMEM, "out of memory");
    if (st == QF_OK) st = load_graph(&L, m);
    onnx__model_proto__free_unpacked(m, NULL);
    qfi_qop_state_free(L.qop);
    for (size_t i = 0; i < L.n_node_names; i++) free(L.node_names[i]);
    free(L.node_names);
    free(L.slots);
    free(L.dir);
    if (st != QF_OK) {
        qf_graph_free(L.g);
        return qfi_error_file(st, path); /* the one place the importer names its file */
    }
    *out = L.g;
    return QF_OK;
}
