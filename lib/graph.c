/* The graph IR: growable arrays of values and nodes, lookup by name, and
 * freeing. Passes that rewrite the graph live in lib/passes.c. */
#include "internal.h"

qf_graph *qf_graph_new(const char *source)
{
    qf_graph *g = qfi_calloc(1, sizeof *g);
    if (!g) return NULL;
    g->source = qfi_strdup(source ? source : "<memory>");
    g->opset = 13;
    if (!g->source) {
        free(g);
        return NULL;
    }
    return g;
}

static void value_free(qf_value *v)
{
    free(v->name);
    free(v->data);
}

void qfi_attr_free(qf_attr *a)
{
    free(a->name);
    free(a->s);
    free(a->ints);
    free(a->floats);
    if (a->t) {
        value_free(a->t);
        free(a->t);
    }
}

void qfi_node_clear(qf_node *n)
{
    free(n->name);
    free(n->in);
    free(n->out);
    for (int i = 0; i < n->n_attr; i++) qfi_attr_free(&n->attrs[i]);
    free(n->attrs);
    free(n->params);
    memset(n, 0, sizeof *n);
}

void qf_graph_free(qf_graph *g)
{
    if (!g) return;
    for (int i = 0; i < g->n_values; i++) value_free(&g->values[i]);
    for (int i = 0; i < g->n_nodes; i++) qfi_node_clear(&g->nodes[i]);
    free(g->values);
    free(g->nodes);
    free(g->inputs);
    free(g->outputs);
    free(g->source);
    free(g);
}

/* Grows *arr (of *cap elements of `size` bytes) to hold at least `need`. */
static bool grow(void **arr, int *cap, int need, size_t size)
{
    if (need <= *cap) return true;
    int ncap = *cap ? *cap * 2 : 16;
    while (ncap < need) ncap *= 2;
    void *p = realloc(*arr, (size_t)ncap * size);
    if (!p) {
        qf_error(QF_ERR_NOMEM, "out of memory growing the graph");
        return false;
    }
    memset((char *)p + (size_t)*cap * size, 0, (size_t)(ncap - *cap) * size);
    *arr = p;
    *cap = ncap;
    return true;
}

int qf_graph_add_value(qf_graph *g, const char *name, qf_dtype dtype, int ndim, const int64_t *dims)
{
    if (g->n_values >= QF_MAX_VALUES) {
        qfi_error_file(qf_error(QF_ERR_NOMEM, "more than %d tensors", QF_MAX_VALUES), g->source);
        return -1;
    }
    if (ndim < 0 || ndim > QF_MAX_DIMS) {
        qfi_error_file(qf_error(QF_ERR_UNSUPPORTED, "tensor %s has %d dims (at most %d)", name, ndim, QF_MAX_DIMS),
                       g->source);
        return -1;
    }
    if (!grow((void **)&g->values, &g->cap_values, g->n_values + 1, sizeof *g->values)) return -1;
    qf_value *v = &g->values[g->n_values];
    memset(v, 0, sizeof *v);
    v->name = qfi_strdup(name);
    if (!v->name) return -1;
    v->dtype = dtype;
    v->ndim = ndim;
    for (int i = 0; i < ndim; i++) v->dims[i] = dims ? dims[i] : -1;
    v->producer = -1;
    return g->n_values++;
}

int qfi_graph_add_const(qf_graph *g, const char *name, qf_dtype dt, int ndim, const int64_t *dims, void *data)
{
    const int v = qf_graph_add_value(g, name, dt, ndim, dims);
    if (v < 0) {
        free(data);
        return -1;
    }
    g->values[v].data = data;
    g->values[v].flags |= QF_VALUE_CONST;
    return v;
}

int qf_graph_find_value(const qf_graph *g, const char *name)
{
    for (int i = 0; i < g->n_values; i++)
        if (strcmp(g->values[i].name, name) == 0) return i;
    return -1;
}

int qf_graph_add_node(qf_graph *g, const char *name, qf_op op, int n_in, const int *in, int n_out, const int *out)
{
    if (g->n_nodes >= QF_MAX_NODES) {
        qfi_error_file(qf_error(QF_ERR_NOMEM, "more than %d nodes", QF_MAX_NODES), g->source);
        return -1;
    }
    if (!grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *g->nodes)) return -1;
    qf_node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->name = qfi_strdup(name);
    n->in = qfi_calloc((size_t)n_in + 1, sizeof *n->in);
    n->out = qfi_calloc((size_t)n_out + 1, sizeof *n->out);
    if (!n->name || !n->in || !n->out) {
        qfi_node_clear(n);
        return -1;
    }
    n->n_in = n_in;
    n->n_out = n_out;
    if (n_in) memcpy(n->in, in, (size_t)n_in * sizeof *in);
    if (n_out) memcpy(n->out, out, (size_t)n_out * sizeof *out);
    for (int k = 0; k < n_out; k++)
        if (out[k] >= 0) g->values[out[k]].producer = g->n_nodes;
    return g->n_nodes++;
}

int64_t qfi_numel(int ndim, const int64_t *dims)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= dims[i];
    return n;
}

bool qfi_tensor_bytes(qf_dtype dt, int ndim, const int64_t *dims, uint64_t *out)
{
    uint64_t b = qf_dtype_info(dt)->size;
    bool ok = true;
    for (int d = 0; d < ndim; d++) {
        // a dim beyond the byte bound is absurd even when another is 0
        if (dims[d] < 0 || dims[d] > QF_MAX_TENSOR_BYTES) ok = false;
        if (dims[d] >= 0 && __builtin_mul_overflow(b, (uint64_t)dims[d], &b)) b = UINT64_MAX;
    }
    *out = b;
    return ok && b <= (uint64_t)QF_MAX_TENSOR_BYTES;
}

int64_t qf_value_numel(const qf_value *v) { return qfi_numel(v->ndim, v->dims); }

size_t qf_value_bytes(const qf_value *v)
{
    return (size_t)qf_value_numel(v) * qf_dtype_info(v->dtype)->size;
}

int64_t qfi_value_valid_numel(const qf_graph *g, const qf_value *v, int valid)
{
    int64_t n = qf_value_numel(v);
    if (valid > 0 && g->batch > 0 && valid < g->batch && v->ndim >= 1 && v->dims[0] == g->batch)
        n = n / g->batch * valid;
    return n;
}

void qfi_value_set_shape(qf_value *v, qf_dtype dt, int ndim, const int64_t *dims)
{
    QF_ASSERT(ndim >= 0 && ndim <= QF_MAX_DIMS);
    v->dtype = dt;
    v->ndim = ndim;
    for (int i = 0; i < ndim; i++) v->dims[i] = dims[i];
}

qf_status qfi_value_ints(const qf_value *v, int64_t *out, int max, int *count)
{
    if (!(v->flags & QF_VALUE_CONST) || !v->data)
        return qf_error(QF_ERR_UNSUPPORTED, "tensor %s must be constant (dynamic shape input)", v->name);
    int64_t n = qf_value_numel(v);
    if (n > max)
        return qf_error(QF_ERR_INVALID, "tensor %s has %lld elements (at most %d)", v->name, (long long)n, max);
    for (int64_t i = 0; i < n; i++) {
        switch (v->dtype) {
        case QF_I64: out[i] = ((const int64_t *)v->data)[i]; break;
        case QF_I32: out[i] = ((const int32_t *)v->data)[i]; break;
        default:
            return qf_error(QF_ERR_INVALID, "tensor %s must be int32 or int64, not %s", v->name,
                            qf_dtype_info(v->dtype)->name);
        }
    }
    *count = (int)n;
    return QF_OK;
}

qf_status qfi_value_scalar_f32(const qf_value *v, float *out)
{
    if (!(v->flags & QF_VALUE_CONST) || !v->data || qf_value_numel(v) != 1)
        return qf_error(QF_ERR_UNSUPPORTED, "tensor %s must be a constant scalar", v->name);
    switch (v->dtype) {
    case QF_F32: *out = *(const float *)v->data; break;
    case QF_F16: *out = qf_f16_to_f32(*(const uint16_t *)v->data); break;
    case QF_I32: *out = (float)*(const int32_t *)v->data; break;
    case QF_I64: *out = (float)*(const int64_t *)v->data; break;
    default: return qf_error(QF_ERR_UNSUPPORTED, "tensor %s: scalar of dtype %s", v->name, qf_dtype_info(v->dtype)->name);
    }
    return QF_OK;
}

qf_status qfi_graph_uses(const qf_graph *g, int **use_start, int **use_node)
{
    int *start = qfi_calloc((size_t)g->n_values + 2, sizeof *start);
    int edges = 0;
    for (int i = 0; i < g->n_nodes; i++) edges += g->nodes[i].n_in;
    int *node = qfi_calloc((size_t)edges + 1, sizeof *node);
    int *fill = qfi_calloc((size_t)g->n_values + 1, sizeof *fill);
    if (!start || !node || !fill) {
        free(start), free(node), free(fill);
        return QF_ERR_NOMEM;
    }
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] >= 0) start[g->nodes[i].in[k] + 1]++;
    for (int v = 0; v < g->n_values; v++) start[v + 1] += start[v];
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++) {
            int v = g->nodes[i].in[k];
            if (v >= 0) node[start[v] + fill[v]++] = i;
        }
    free(fill);
    *use_start = start;
    *use_node = node;
    return QF_OK;
}
