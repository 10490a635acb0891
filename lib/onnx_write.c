/* Building an ONNX model in memory with the protobuf-c code generated from
 * onnx.proto, and writing it: unique tensor and node names, initializers,
 * nodes, attributes, graph inputs/outputs, the model's header fields. */
#include <stdarg.h>
#include "onnx_write.h"

/* protobuf cannot serialize a message of 2 GiB or more */
#define ONNX_MAX_BYTES ((size_t)INT32_MAX)

/* ---- memory: everything the protobuf points to lives until the file is written ---- */

void *qfi_onnx_alloc(qfi_onnx_builder *ob, size_t n)
{
    if (ob->n_allocs == ob->cap_allocs) {
        size_t cap = ob->cap_allocs ? 2 * ob->cap_allocs : 256;
        void **a = realloc(ob->allocs, cap * sizeof *a);
        if (!a) {
            qf_error(QF_ERR_NOMEM, "out of memory");
            return NULL;
        }
        ob->allocs = a;
        ob->cap_allocs = cap;
    }
    void *p = qfi_calloc(n ? n : 1, 1);
    if (p) ob->allocs[ob->n_allocs++] = p;
    return p;
}

char *qfi_onnx_printf(qfi_onnx_builder *ob, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = len < 0 ? NULL : qfi_onnx_alloc(ob, (size_t)len + 1);
    if (!s) return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)len + 1, fmt, ap);
    va_end(ap);
    return s;
}

/* Appends p to a growable pointer array. */
static bool push(void ***arr, size_t *n, size_t *cap, void *p)
{
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 64;
        void **a = realloc(*arr, c * sizeof *a);
        if (!a) {
            qf_error(QF_ERR_NOMEM, "out of memory");
            return false;
        }
        *arr = a;
        *cap = c;
    }
    (*arr)[(*n)++] = p;
    return true;
}

/* ---- names: ONNX wants every tensor written once under one name ------------------- */

static size_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (size_t)h;
}

static bool ns_has(const qfi_onnx_nameset *s, const char *name)
{
    if (!s->cap) return false;
    for (size_t i = hash_str(name) & (s->cap - 1); s->slot[i]; i = (i + 1) & (s->cap - 1))
        if (strcmp(s->slot[i], name) == 0) return true;
    return false;
}

static bool ns_add(qfi_onnx_nameset *s, char *name)
{
    if (2 * (s->n + 1) > s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 1024;
        char **slot = calloc(cap, sizeof *slot);
        if (!slot) {
            qf_error(QF_ERR_NOMEM, "out of memory");
            return false;
        }
        for (size_t i = 0; i < s->cap; i++) {
            if (!s->slot[i]) continue;
            size_t j = hash_str(s->slot[i]) & (cap - 1);
            while (slot[j]) j = (j + 1) & (cap - 1);
            slot[j] = s->slot[i];
        }
        free(s->slot);
        s->slot = slot;
        s->cap = cap;
    }
    size_t j = hash_str(name) & (s->cap - 1);
    while (s->slot[j]) j = (j + 1) & (s->cap - 1);
    s->slot[j] = name;
    s->n++;
    return true;
}

/* A name of set s not used yet: `base`, else base_1, base_2, ... (NULL when
 * base is: an allocation before failed). */
static char *unique(qfi_onnx_builder *ob, qfi_onnx_nameset *s, const char *base)
{
    if (!base) return NULL;
    char *name = qfi_onnx_printf(ob, "%s", base);
    for (int k = 1; name && ns_has(s, name); k++) name = qfi_onnx_printf(ob, "%s_%d", base, k);
    if (name && !ns_add(s, name)) return NULL;
    return name;
}

char *qfi_onnx_tensor_name(qfi_onnx_builder *ob, const char *base) { return unique(ob, &ob->tensors, base); }

bool qfi_onnx_tensor_name_used(const qfi_onnx_builder *ob, const char *name) { return ns_has(&ob->tensors, name); }

/* ---- protobuf building blocks --------------------------------------------------------- */

/* ONNX stores raw tensor data little-endian; a big-endian host writes a swapped copy. */
static const void *little_endian(qfi_onnx_builder *ob, const void *data, size_t nbytes, size_t esize)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    uint8_t *c = qfi_onnx_alloc(ob, nbytes);
    if (!c) return NULL;
    memcpy(c, data, nbytes);
    for (size_t i = 0; esize > 1 && i + esize <= nbytes; i += esize)
        for (size_t a = i, b = i + esize - 1; a < b; a++, b--) {
            uint8_t t = c[a];
            c[a] = c[b];
            c[b] = t;
        }
    return c;
#else
    (void)ob;
    (void)nbytes;
    (void)esize;
    return data;
#endif
}

/* A tensor of dtype dt: raw data (not copied: it must outlive the write). */
Onnx__TensorProto *qfi_onnx_tensor(qfi_onnx_builder *ob, const char *name, qf_dtype dt, int ndim, const int64_t *dims,
                                   const void *data)
{
    Onnx__TensorProto *t = qfi_onnx_alloc(ob, sizeof *t);
    int64_t *d = qfi_onnx_alloc(ob, (size_t)(ndim + 1) * sizeof *d);
    if (!t || !d) return NULL;
    onnx__tensor_proto__init(t);
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        d[i] = dims[i];
        n *= (size_t)dims[i];
    }
    const size_t es = qf_dtype_info(dt)->size;
    t->name = (char *)name;
    t->n_dims = (size_t)ndim;
    t->dims = d;
    t->has_data_type = 1;
    t->data_type = qf_dtype_info(dt)->onnx_type;
    t->has_raw_data = 1;
    t->raw_data.len = n * es;
    t->raw_data.data = (uint8_t *)little_endian(ob, data, n * es, es);
    return t->raw_data.data || n == 0 ? t : NULL;
}

bool qfi_onnx_add_initializer(qfi_onnx_builder *ob, Onnx__TensorProto *t)
{
    return push((void ***)&ob->inits, &ob->n_inits, &ob->cap_inits, t);
}

const char *qfi_onnx_add_init(qfi_onnx_builder *ob, const char *name, qf_dtype dt, int ndim, const int64_t *dims,
                              const void *data)
{
    Onnx__TensorProto *t = name ? qfi_onnx_tensor(ob, name, dt, ndim, dims, data) : NULL;
    if (!t || !qfi_onnx_add_initializer(ob, t)) return NULL;
    return name;
}

/* A float scalar (ndim 0) or vector initializer under a fresh name from `base`. */
const char *qfi_onnx_add_floats(qfi_onnx_builder *ob, const char *base, int ndim, int64_t n, const float *v)
{
    float *c = qfi_onnx_alloc(ob, (size_t)n * sizeof *c);
    if (!c) return NULL;
    memcpy(c, v, (size_t)n * sizeof *c);
    return qfi_onnx_add_init(ob, qfi_onnx_tensor_name(ob, base), QF_F32, ndim, &n, c);
}

/* An all-zero int8 zero point shaped like a scalar (ndim 0) or a vector of n. */
const char *qfi_onnx_add_zero_point(qfi_onnx_builder *ob, const char *base, int ndim, int64_t n, int8_t z)
{
    int8_t *d = qfi_onnx_alloc(ob, (size_t)n);
    if (d) memset(d, z, (size_t)n);
    return d ? qfi_onnx_add_init(ob, qfi_onnx_tensor_name(ob, base), QF_I8, ndim, &n, d) : NULL;
}

const char *qfi_onnx_add_ints(qfi_onnx_builder *ob, const char *base, int64_t n, const int64_t *v)
{
    int64_t *c = qfi_onnx_alloc(ob, (size_t)n * sizeof *c);
    if (!c) return NULL;
    memcpy(c, v, (size_t)n * sizeof *c);
    return qfi_onnx_add_init(ob, qfi_onnx_tensor_name(ob, base), QF_I64, 1, &n, c);
}

/* Appends a node op_type(in...) -> out...; names may be "" for omitted optional inputs. */
Onnx__NodeProto *qfi_onnx_add_node(qfi_onnx_builder *ob, const char *op_type, const char *name, int n_in,
                                   const char *const *in, int n_out, const char *const *out)
{
    Onnx__NodeProto *np = qfi_onnx_alloc(ob, sizeof *np);
    char **i = qfi_onnx_alloc(ob, (size_t)(n_in + 1) * sizeof *i),
         **o = qfi_onnx_alloc(ob, (size_t)(n_out + 1) * sizeof *o);
    char *nn = name ? unique(ob, &ob->node_names, name) : NULL;
    if (!np || !i || !o || !nn) return NULL;
    onnx__node_proto__init(np);
    for (int k = 0; k < n_in; k++) {
        if (!in[k]) return NULL; /* a failed allocation upstream */
        i[k] = (char *)in[k];
    }
    for (int k = 0; k < n_out; k++) {
        if (!out[k]) return NULL;
        o[k] = (char *)out[k];
    }
    np->op_type = (char *)op_type;
    np->name = nn;
    np->n_input = (size_t)n_in;
    np->input = i;
    np->n_output = (size_t)n_out;
    np->output = o;
    return push((void ***)&ob->nodes, &ob->n_nodes, &ob->cap_nodes, np) ? np : NULL;
}

Onnx__AttributeProto *qfi_onnx_add_attr(qfi_onnx_builder *ob, Onnx__NodeProto *np, const char *name,
                                        Onnx__AttributeProto__AttributeType t)
{
    Onnx__AttributeProto *a = qfi_onnx_alloc(ob, sizeof *a);
    Onnx__AttributeProto **arr = qfi_onnx_alloc(ob, (np->n_attribute + 1) * sizeof *arr);
    if (!a || !arr) return NULL;
    onnx__attribute_proto__init(a);
    a->name = (char *)name;
    a->has_type = 1;
    a->type = t;
    if (np->n_attribute) memcpy(arr, np->attribute, np->n_attribute * sizeof *arr);
    arr[np->n_attribute++] = a;
    np->attribute = arr;
    return a;
}

bool qfi_onnx_attr_int(qfi_onnx_builder *ob, Onnx__NodeProto *np, const char *name, int64_t v)
{
    Onnx__AttributeProto *a = qfi_onnx_add_attr(ob, np, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    if (a) a->has_i = 1, a->i = v;
    return a != NULL;
}

/* Removes attribute `name` of np, returning it (NULL when absent). */
Onnx__AttributeProto *qfi_onnx_take_attr(Onnx__NodeProto *np, const char *name)
{
    for (size_t i = 0; i < np->n_attribute; i++) {
        Onnx__AttributeProto *a = np->attribute[i];
        if (strcmp(a->name, name) != 0) continue;
        memmove(&np->attribute[i], &np->attribute[i + 1], (np->n_attribute - i - 1) * sizeof *np->attribute);
        np->n_attribute--;
        return a;
    }
    return NULL;
}

/* Sets input k of np, padding with "" (omitted) inputs before it. */
bool qfi_onnx_set_input(qfi_onnx_builder *ob, Onnx__NodeProto *np, size_t k, const char *name)
{
    if (!name) return false;
    if (k >= np->n_input) {
        char **in = qfi_onnx_alloc(ob, (k + 1) * sizeof *in);
        if (!in) return false;
        memcpy(in, np->input, np->n_input * sizeof *in);
        for (size_t i = np->n_input; i < k; i++) in[i] = "";
        np->input = in;
        np->n_input = k + 1;
    }
    np->input[k] = (char *)name;
    return true;
}

/* ---- the model -------------------------------------------------------------------------- */

Onnx__ValueInfoProto *qfi_onnx_value_info(qfi_onnx_builder *ob, const char *name, qf_dtype dt, int ndim,
                                          const int64_t *dims)
{
    Onnx__ValueInfoProto *vi = qfi_onnx_alloc(ob, sizeof *vi);
    Onnx__TypeProto *tp = qfi_onnx_alloc(ob, sizeof *tp);
    Onnx__TypeProto__Tensor *tt = qfi_onnx_alloc(ob, sizeof *tt);
    Onnx__TensorShapeProto *sp = qfi_onnx_alloc(ob, sizeof *sp);
    Onnx__TensorShapeProto__Dimension **dl = qfi_onnx_alloc(ob, (size_t)(ndim + 1) * sizeof *dl);
    if (!vi || !tp || !tt || !sp || !dl) return NULL;
    onnx__value_info_proto__init(vi);
    onnx__type_proto__init(tp);
    onnx__type_proto__tensor__init(tt);
    onnx__tensor_shape_proto__init(sp);
    for (int d = 0; d < ndim; d++) {
        dl[d] = qfi_onnx_alloc(ob, sizeof *dl[d]);
        if (!dl[d]) return NULL;
        onnx__tensor_shape_proto__dimension__init(dl[d]);
        if (d == 0) {
            dl[d]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            dl[d]->dim_param = "batch";
        } else {
            dl[d]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            dl[d]->dim_value = dims[d];
        }
    }
    sp->n_dim = (size_t)ndim;
    sp->dim = dl;
    tt->has_elem_type = 1;
    tt->elem_type = qf_dtype_info(dt)->onnx_type;
    tt->shape = sp;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    vi->name = (char *)name;
    vi->type = tp;
    return vi;
}

/* IR version of the ONNX release that introduced each opset (onnx/helper.py's table). */
static int64_t ir_version_for(int64_t opset)
{
    return opset <= 14 ? 7 : opset <= 18 ? 8 : opset <= 20 ? 9 : 10;
}

qf_status qfi_onnx_model_finish(qfi_onnx_builder *ob, Onnx__ModelProto *m, Onnx__GraphProto *gp, int64_t opset,
                                const char *doc)
{
    gp->name = "qforge";
    gp->n_node = ob->n_nodes;
    gp->node = ob->nodes;
    gp->n_initializer = ob->n_inits;
    gp->initializer = ob->inits;

    Onnx__OperatorSetIdProto *os = qfi_onnx_alloc(ob, sizeof *os);
    Onnx__OperatorSetIdProto **osl = qfi_onnx_alloc(ob, sizeof *osl);
    if (!os || !osl || !doc) return QF_ERR_NOMEM;
    onnx__operator_set_id_proto__init(os);
    os->domain = "";
    os->has_version = 1;
    os->version = opset;
    osl[0] = os;
    m->has_ir_version = 1;
    m->ir_version = ir_version_for(opset);
    m->n_opset_import = 1;
    m->opset_import = osl;
    m->producer_name = "qforge";
    m->producer_version = PACKAGE_VERSION;
    m->doc_string = (char *)doc;
    m->graph = gp;
    return QF_OK;
}

qf_status qfi_onnx_model_write(const Onnx__ModelProto *m, const char *path)
{
    size_t size = onnx__model_proto__get_packed_size(m);
    if (size >= ONNX_MAX_BYTES)
        return qf_error(QF_ERR_UNSUPPORTED, "%s: the model would take %zu bytes, more than one ONNX file can hold",
                        path, size);
    uint8_t *buf = qfi_calloc(size + 1, 1);
    if (!buf) return QF_ERR_NOMEM;
    size_t packed = onnx__model_proto__pack(m, buf);
    QF_ASSERT(packed == size);
    qfi_atomic_file af;
    qf_status st = qfi_atomic_open(&af, path);
    if (st == QF_OK) {
        if (fwrite(buf, 1, size, af.f) != size) {
            qfi_atomic_abort(&af);
            st = qf_error(QF_ERR_IO, "%s: write failed", path);
        } else {
            st = qfi_atomic_commit(&af);
        }
    }
    free(buf);
    return st;
}

void qfi_onnx_builder_free(qfi_onnx_builder *ob)
{
    for (size_t i = 0; i < ob->n_allocs; i++) free(ob->allocs[i]);
    free(ob->allocs);
    free(ob->nodes);
    free(ob->inits);
    free(ob->tensors.slot);
    free(ob->node_names.slot);
    memset(ob, 0, sizeof *ob);
}
