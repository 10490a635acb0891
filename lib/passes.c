/* Graph passes run once after import: topological sort, Identity/Dropout
 * removal, shape inference at a chosen batch size with constant folding,
 * BatchNorm folding into Conv, the LayerNorm and GELU chains of transformer
 * exports fused into one op each, and dead-node removal. */
#include "internal.h"
#include "ops/nn.h"
#include "ops/tensor_ops.h"
#include <math.h>

/* ---- topological sort -------------------------------------------------------- */

/* Reorders g->nodes so every node comes after the producers of its inputs.
 * A cycle is an error naming one node on it. */
static qf_status toposort(qf_graph *g)
{
    int nn = g->n_nodes;
    if (nn == 0) return QF_OK;
    int *indeg = qfi_calloc((size_t)nn, sizeof *indeg);
    int *order = qfi_calloc((size_t)nn, sizeof *order);
    int *newpos = qfi_calloc((size_t)nn, sizeof *newpos);
    /* consumers as CSR: for each value, the nodes reading it */
    int *cons_start = qfi_calloc((size_t)g->n_values + 1, sizeof *cons_start);
    int nedges = 0;
    for (int i = 0; i < nn; i++) nedges += g->nodes[i].n_in;
    int *cons = qfi_calloc((size_t)nedges + 1, sizeof *cons);
    qf_node *sorted = qfi_calloc((size_t)nn, sizeof *sorted);
    qf_status st = QF_OK;
    if (!indeg || !order || !newpos || !cons_start || !cons || !sorted) {
        st = QF_ERR_NOMEM;
        goto out;
    }
    /* a value's producer as recorded by qf_graph_add_node */
    for (int i = 0; i < nn; i++) {
        const qf_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in; k++) {
            int v = n->in[k];
            if (v < 0) continue;
            cons_start[v + 1]++;
            if (g->values[v].producer >= 0) indeg[i]++;
        }
    }
    for (int v = 0; v < g->n_values; v++) cons_start[v + 1] += cons_start[v];
    int *fill = qfi_calloc((size_t)g->n_values + 1, sizeof *fill);
    if (!fill) {
        st = QF_ERR_NOMEM;
        goto out;
    }
    for (int i = 0; i < nn; i++) {
        const qf_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in; k++) {
            int v = n->in[k];
            if (v >= 0) cons[cons_start[v] + fill[v]++] = i;
        }
    }
    free(fill);
    /* Kahn's algorithm; a queue in original order keeps the result stable */
    int head = 0, tail = 0;
    for (int i = 0; i < nn; i++)
        if (indeg[i] == 0) order[tail++] = i;
    while (head < tail) {
        const qf_node *n = &g->nodes[order[head++]];
        for (int k = 0; k < n->n_out; k++) {
            int v = n->out[k];
            if (v < 0) continue;
            for (int c = cons_start[v]; c < cons_start[v + 1]; c++)
                if (--indeg[cons[c]] == 0) order[tail++] = cons[c];
        }
    }
    if (tail < nn) {
        for (int i = 0; i < nn; i++) {
            if (indeg[i] > 0) {
                st = qfi_error_node(qf_error(QF_ERR_INVALID, "part of a cycle"), g, &g->nodes[i]);
                goto out;
            }
        }
    }
    for (int i = 0; i < nn; i++) {
        sorted[i] = g->nodes[order[i]];
        newpos[order[i]] = i;
    }
    memcpy(g->nodes, sorted, (size_t)nn * sizeof *sorted);
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].producer >= 0) g->values[v].producer = newpos[g->values[v].producer];
out:
    free(indeg);
    free(order);
    free(newpos);
    free(cons_start);
    free(cons);
    free(sorted);
    return st;
}

/* ---- helpers -------------------------------------------------------------------- */

static bool is_graph_output(const qf_graph *g, int v) { return g->values[v].flags & QF_VALUE_OUTPUT; }

static int count_uses(const qf_graph *g, int v)
{
    int uses = 0;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++) uses += g->nodes[i].in[k] == v;
    return uses;
}

static void replace_uses(qf_graph *g, int from, int to)
{
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] == from) g->nodes[i].in[k] = to;
}

/* Marks a node dead; compact() drops it. */
static void kill_node(qf_node *n) { n->op = QF_OP_COUNT; }

/* Drops dead nodes and renumbers producers. */
static void compact(qf_graph *g)
{
    int j = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].op == QF_OP_COUNT) {
            qfi_node_clear(&g->nodes[i]);
            continue;
        }
        g->nodes[j++] = g->nodes[i];
    }
    g->n_nodes = j;
    for (int v = 0; v < g->n_values; v++) g->values[v].producer = -1;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_out; k++)
            if (g->nodes[i].out[k] >= 0) g->values[g->nodes[i].out[k]].producer = i;
}

/* ---- Identity / Dropout removal ----------------------------------------------------- */

/* An Identity (or inference Dropout whose mask nobody reads) forwards its input:
 * consumers read the input directly. When the output is a graph output we keep
 * its name by making the input's producer write the output instead. */
static void remove_identities(qf_graph *g)
{
    for (int i = 0; i < g->n_nodes; i++) {
        qf_node *n = &g->nodes[i];
        if (n->op != QF_OP_IDENTITY && n->op != QF_OP_DROPOUT) continue;
        if (n->n_in < 1 || n->in[0] < 0) continue;
        /* a Dropout with a training_mode input is left to its op, which refuses training */
        if (n->op == QF_OP_DROPOUT && n->n_in > 2 && n->in[2] >= 0) continue;
        if (n->op == QF_OP_DROPOUT && n->n_out > 1 && n->out[1] >= 0 &&
            (count_uses(g, n->out[1]) > 0 || is_graph_output(g, n->out[1])))
            continue;
        int src = n->in[0], dst = n->out[0];
        if (!is_graph_output(g, dst)) {
            replace_uses(g, dst, src);
            kill_node(n);
            continue;
        }
        /* dst is a graph output: rename src's producer output to dst */
        qf_value *s = &g->values[src];
        if (s->producer < 0 || is_graph_output(g, src) || (s->flags & (QF_VALUE_INPUT | QF_VALUE_CONST))) continue;
        qf_node *p = &g->nodes[s->producer];
        for (int k = 0; k < p->n_out; k++)
            if (p->out[k] == src) p->out[k] = dst;
        kill_node(n);
        replace_uses(g, src, dst);
        g->values[dst].producer = s->producer;
        s->producer = -1;
    }
    compact(g);
}

/* ---- shape inference and constant folding -------------------------------------------- */

/* A Reshape whose constant target hard-codes a batch `fixed` (the one the
 * model was exported or stored with, e.g. [1, 64] before a Gemm) while its
 * input is batched is rewritten to copy dim 0 from its input (ONNX's 0), so
 * the model runs at any batch. At the batch the target was made for, the
 * output shape is the same either way. */
static qf_status fix_reshape_batch(qf_graph *g, qf_node *n, int64_t fixed)
{
    if (n->op != QF_OP_RESHAPE || n->n_in < 2 || n->in[0] < 0 || n->in[1] < 0) return QF_OK;
    qf_value *x = &g->values[n->in[0]], *sv = &g->values[n->in[1]];
    if (!(sv->flags & QF_VALUE_CONST) || sv->dtype != QF_I64 || sv->ndim != 1 || sv->dims[0] < 1) return QF_OK;
    int64_t *s = sv->data;
    if (x->ndim < 1 || x->dims[0] != g->batch || s[0] != fixed) return QF_OK;
    /* with allowzero a 0 is a zero-sized dim, not a copy */
    if (qfi_attr_int(n, "allowzero", 0) != 0) return QF_OK;
    /* per-sample sizes must agree, else this is not a batch-preserving reshape */
    int64_t per_in = x->dims[0] ? qf_value_numel(x) / x->dims[0] : 0, per_out = 1;
    bool has_infer = false;
    for (int i = 1; i < sv->dims[0]; i++) {
        if (s[i] == -1) has_infer = true;
        else if (s[i] == 0 && i < x->ndim) per_out *= x->dims[i];
        else per_out *= s[i];
    }
    if (!has_infer && per_out != per_in) return QF_OK;
    /* the shape tensor may be shared: give this node its own copy */
    int64_t dims[1] = {sv->dims[0]};
    char name[512];
    snprintf(name, sizeof name, "%s/batch_free_shape", n->name);
    int nv = qf_graph_add_value(g, name, QF_I64, 1, dims);
    if (nv < 0) return QF_ERR_NOMEM;
    sv = &g->values[n->in[1]];
    int64_t *copy = qfi_calloc((size_t)dims[0], sizeof *copy);
    if (!copy) return QF_ERR_NOMEM;
    memcpy(copy, sv->data, (size_t)dims[0] * sizeof *copy);
    copy[0] = 0;
    g->values[nv].data = copy;
    g->values[nv].flags |= QF_VALUE_CONST;
    n->in[1] = nv;
    qf_log(QF_LOG_DEBUG, "%s: reshape %s keeps the batch dimension", g->source, n->name);
    return QF_OK;
}

/* A live Expand of a batch-free tensor to the batch (ViT's class token: its
 * constant (1,1,C) expanded to (batch,1,C), kept live by infer_shapes)
 * follows the batch the same way: when the batch changes from `old`, a shape
 * whose element 0 is `old` where the output's dim 0 is `old` gets the new
 * batch there. */
static qf_status fix_expand_batch(qf_graph *g, qf_node *n, int64_t old)
{
    if (n->op != QF_OP_EXPAND || n->in[1] < 0 || n->out[0] < 0) return QF_OK;
    const qf_value *sv = &g->values[n->in[1]], *y = &g->values[n->out[0]];
    if (!(sv->flags & QF_VALUE_CONST) || sv->dtype != QF_I64 || sv->ndim != 1 || sv->dims[0] != y->ndim ||
        y->ndim < 1 || y->dims[0] != old || ((const int64_t *)sv->data)[0] != old)
        return QF_OK;
    const int nd = y->ndim;
    char name[512];
    snprintf(name, sizeof name, "%s/batch_shape", n->name);
    int64_t dims[1] = {nd};
    int nv = qf_graph_add_value(g, name, QF_I64, 1, dims);
    int64_t *copy = nv < 0 ? NULL : qfi_calloc((size_t)nd, sizeof *copy);
    if (!copy) return QF_ERR_NOMEM;
    memcpy(copy, g->values[n->in[1]].data, (size_t)nd * sizeof *copy);
    copy[0] = g->batch;
    g->values[nv].data = copy;
    g->values[nv].flags |= QF_VALUE_CONST;
    n->in[1] = nv;
    return QF_OK;
}

/* ---- values folded from the batch size ------------------------------------------------ */

/* Folding runs at one batch size, so a constant computed from a Shape that
 * reads an activation's dim 0 holds that batch (dynamic-batch flattens: Shape
 * -> Gather -> Concat -> Reshape; the dynamo exporter's view as a Gather of
 * Range * stride). infer_shapes marks such values in `dep` (values added later
 * are never marked) and, once everything foldable is folded, makes the live
 * nodes that read one batch-free or names them. A mark is a mask of the
 * elements that hold the batch, kept exact through the shape vector's Gather,
 * Concat and rank changes, so that ShuffleNet's channel split (Shape -> Gather
 * of dim 1 -> Div -> Slice) is not taken for batch arithmetic; any other op
 * marks all of its output. */
typedef struct batch_deps {
    uint64_t *mask; /* per value index: bit i set where element i holds the batch */
    int n;
    bool exact;     /* masks from the second pass (infer_shapes), not from folds_batch's rules */
} batch_deps;

#define ALL_ELEMENTS (~(uint64_t)0)

static uint64_t dep_mask(const batch_deps *d, int v) { return v >= 0 && v < d->n ? d->mask[v] : 0; }
static bool is_dep(const batch_deps *d, int v) { return dep_mask(d, v) != 0; }

/* Element j of a Gather of a shape vector by constant indices. */
static uint64_t gather_mask(const qf_graph *g, const qf_node *n, uint64_t in)
{
    const qf_value *x = &g->values[n->in[0]], *iv = &g->values[n->in[1]];
    int64_t cnt = qf_value_numel(iv);
    if (x->ndim != 1 || iv->ndim > 1 || cnt > 64 || !iv->data || (iv->dtype != QF_I64 && iv->dtype != QF_I32))
        return ALL_ELEMENTS;
    uint64_t m = 0;
    for (int64_t j = 0; j < cnt; j++) {
        int64_t i = iv->dtype == QF_I64 ? ((const int64_t *)iv->data)[j] : ((const int32_t *)iv->data)[j];
        if (i < 0) i += x->dims[0];
        if (i < 0 || i >= 64) return ALL_ELEMENTS;
        if (in >> i & 1) m |= (uint64_t)1 << j;
    }
    return m;
}

/* Which elements of folded node n's outputs (already inferred) hold the batch. */
static uint64_t folds_batch(const qf_graph *g, const qf_node *n, const batch_deps *d)
{
    if (n->op == QF_OP_SHAPE) {
        const qf_value *x = &g->values[n->in[0]];
        const qfi_shape_params *p = n->params;
        return !(x->flags & QF_VALUE_CONST) && p->first == 0 && g->values[n->out[0]].dims[0] > 0 ? 1 : 0;
    }
    uint64_t m0 = dep_mask(d, n->in[0]);
    bool others = false;
    for (int k = 1; k < n->n_in; k++) others |= is_dep(d, n->in[k]);
    const qf_value *y = &g->values[n->out[0]];
    if (y->ndim > 1 || qf_value_numel(y) > 64) return m0 || others ? ALL_ELEMENTS : 0;
    switch (n->op) {
    case QF_OP_GATHER:
        return others ? ALL_ELEMENTS : m0 ? gather_mask(g, n, m0) : 0;
    case QF_OP_SQUEEZE: case QF_OP_UNSQUEEZE: case QF_OP_CAST: case QF_OP_IDENTITY:
        return others ? ALL_ELEMENTS : m0; /* the same elements, in order */
    case QF_OP_CONCAT: {
        uint64_t m = 0;
        int at = 0;
        for (int k = 0; k < n->n_in; k++) {
            if (n->in[k] < 0) continue;
            if (at >= 64) return ALL_ELEMENTS;
            const int64_t cnt = qf_value_numel(&g->values[n->in[k]]);
            const uint64_t own = cnt >= 64 ? ALL_ELEMENTS : ((uint64_t)1 << cnt) - 1;
            m |= (dep_mask(d, n->in[k]) & own) << at;
            at += (int)cnt;
        }
        return m;
    }
    default:
        return m0 || others ? ALL_ELEMENTS : 0;
    }
}

/* A new int64 constant [cnt] holding s; its index, or -1 (out of memory). */
static int add_shape_const(qf_graph *g, const qf_node *n, const char *what, const int64_t *s, int cnt)
{
    char name[512];
    snprintf(name, sizeof name, "%s/%s", n->name, what);
    int64_t dims[1] = {cnt};
    int v = qf_graph_add_value(g, name, QF_I64, 1, dims);
    int64_t *data = v < 0 ? NULL : qfi_calloc((size_t)cnt + 1, sizeof *data);
    if (!data) return -1;
    memcpy(data, s, (size_t)cnt * sizeof *data);
    g->values[v].data = data;
    g->values[v].flags |= QF_VALUE_CONST;
    return v;
}

/* Whether element `at` of the folded target of Reshape node i equals its
 * input's dim `at` both here and in the graph `sg` folded at another batch
 * (NULL: not known), so that ONNX's 0 (copy the input's dim) is that element
 * at every batch. */
static bool target_copies_dim(const qf_graph *g, const qf_graph *sg, int i, int at)
{
    const qf_node *n = &g->nodes[i], *sn = sg ? &sg->nodes[i] : NULL;
    if (!sn || sn->n_in < 2 || sn->in[0] < 0 || sn->in[1] < 0 || qfi_attr_int(n, "allowzero", 0) != 0) return false;
    const qf_value *x = &g->values[n->in[0]], *sx = &sg->values[sn->in[0]], *ss = &sg->values[sn->in[1]];
    return at < x->ndim && sx->ndim == x->ndim && (ss->flags & QF_VALUE_CONST) && ss->data && ss->dtype == QF_I64 &&
           ss->ndim == 1 && ss->dims[0] > at && ((const int64_t *)g->values[n->in[1]].data)[at] == x->dims[at] &&
           ((const int64_t *)ss->data)[at] == sx->dims[at];
}

/* Reshape node i, whose target was folded from the batch: the one element
 * that depends on it (`mask`, from the second pass at another batch, whose
 * folded graph is `sg`: MHA's (seq, batch * heads, dim), Swin's (batch *
 * windows, 49, C)) becomes -1, which the input's size then fixes at any batch,
 * when the target has no other -1 or 0; where it has (a flatten of the
 * trailing dims, timm's and Ultralytics' (batch, C, -1)), 0 when that element
 * is the input's dim at both batches. Without that pass (mask 0) a leading
 * batch of an input whose dim 0 is not the batch (fix_reshape_batch handles
 * those) does. */
static qf_status free_reshape_target(qf_graph *g, int i, uint64_t mask, const qf_graph *sg)
{
    qf_node *n = &g->nodes[i];
    const qf_value *x = &g->values[n->in[0]], *sv = &g->values[n->in[1]];
    if (sv->dtype != QF_I64 || sv->ndim != 1 || sv->dims[0] < 1 || sv->dims[0] > QF_MAX_DIMS) return QF_ERR_UNSUPPORTED;
    int64_t s[QF_MAX_DIMS];
    int cnt = (int)sv->dims[0], at = 0;
    memcpy(s, sv->data, (size_t)cnt * sizeof *s);
    if (mask && !(mask & (mask - 1)) && mask < ((uint64_t)1 << cnt)) {
        while (!(mask >> at & 1)) at++;
    } else {
        if (x->ndim >= 1 && x->dims[0] == g->batch) return QF_OK; /* fix_reshape_batch's case */
        if (s[0] != g->batch) return QF_ERR_UNSUPPORTED;
    }
    bool inferred = false;
    for (int k = 0; k < cnt; k++)
        inferred |= k != at && (s[k] == -1 || (s[k] == 0 && qfi_attr_int(n, "allowzero", 0) == 0));
    if (!inferred) s[at] = -1;
    else if (mask && target_copies_dim(g, sg, i, at)) s[at] = 0;
    else return QF_ERR_UNSUPPORTED;
    int v = add_shape_const(g, n, "batch_free_shape", s, cnt);
    if (v < 0) return QF_ERR_NOMEM;
    n->in[1] = v;
    return QF_OK;
}

/* A Gather whose folded indices are 0, 1, ..., n-1 over the whole of its axis
 * (how the dynamo exporter writes a view) is a Reshape to its output's shape,
 * with a leading batch as -1. */
static qf_status gather_iota_to_reshape(qf_graph *g, qf_node *n)
{
    const qf_value *x = &g->values[n->in[0]], *iv = &g->values[n->in[1]], *y = &g->values[n->out[0]];
    const qfi_axis_params *p = n->params;
    int64_t cnt = qf_value_numel(iv);
    if (cnt != x->dims[p->norm] || y->ndim > QF_MAX_DIMS || y->ndim < 1) return QF_ERR_UNSUPPORTED;
    for (int64_t j = 0; j < cnt; j++) {
        int64_t i = iv->dtype == QF_I64 ? ((const int64_t *)iv->data)[j] : ((const int32_t *)iv->data)[j];
        if (i != j) return QF_ERR_UNSUPPORTED;
    }
    int64_t s[QF_MAX_DIMS];
    memcpy(s, y->dims, (size_t)y->ndim * sizeof *s);
    if (s[0] == g->batch) s[0] = -1;
    int v = add_shape_const(g, n, "view_shape", s, y->ndim);
    if (v < 0) return QF_ERR_NOMEM;
    free(n->params);
    n->params = NULL;
    n->op = QF_OP_RESHAPE;
    n->in[1] = v;
    QF_CHECK(qfi_ops[QF_OP_RESHAPE]->parse(g, n));
    qf_log(QF_LOG_DEBUG, "%s: gather %s of an iota is a reshape", g->source, n->name);
    return QF_OK;
}

/* Each live node that reads a value folded from the batch is made batch-free
 * or named in a warning: the graph is right only at this batch. sg: the graph
 * the marks were found with, folded at another batch (NULL without). */
static qf_status free_batch_deps(qf_graph *g, const batch_deps *d, const qf_graph *sg)
{
    for (int i = 0; i < g->n_nodes; i++) {
        qf_node *n = &g->nodes[i];
        if (n->op == QF_OP_COUNT) continue;
        int k = 0;
        while (k < n->n_in && !is_dep(d, n->in[k])) k++;
        if (k == n->n_in) continue;
        qf_status st = QF_ERR_UNSUPPORTED;
        if (n->op == QF_OP_RESHAPE && k == 1) st = free_reshape_target(g, i, d->exact ? dep_mask(d, n->in[1]) : 0, sg);
        else if (n->op == QF_OP_EXPAND && k == 1 && d->exact && dep_mask(d, n->in[1]) == 1) st = QF_OK; /* fix_expand_batch */
        else if (n->op == QF_OP_GATHER && k == 1) st = gather_iota_to_reshape(g, n);
        if (st == QF_ERR_UNSUPPORTED)
            qf_log(QF_LOG_WARN, "%s: node %s (%s) reads %s, computed from the batch size %d at load time: "
                   "results at other batch sizes are not to be trusted", g->source, n->name, qf_op_name(n->op),
                   g->values[n->in[k]].name, g->batch);
        else if (st != QF_OK)
            return st;
    }
    return QF_OK;
}

static bool node_foldable(const qf_graph *g, const qf_node *n)
{
    if (n->op == QF_OP_SHAPE) return true; /* needs only the (now known) input shape */
    /* int8 weights and their scales are what importing a Q/DQ model keeps (quant/qdq_import.c) */
    if (n->op == QF_OP_DEQUANTIZE_LINEAR && n->in[0] >= 0 && g->values[n->in[0]].dtype == QF_I8) return false;
    for (int k = 0; k < n->n_in; k++)
        if (n->in[k] >= 0 && !(g->values[n->in[k]].flags & QF_VALUE_CONST)) return false;
    return true;
}

bool qfi_one_node_init(qfi_one_node *o, const qf_graph *g, const qf_node *n)
{
    if (n->n_in > QFI_ONE_NODE_MAX_IO || n->n_out > QFI_ONE_NODE_MAX_IO) return false;
    int nv = 0, n_ins = 0, n_outs = 0;
    for (int k = 0; k < n->n_in; k++) {
        o->in[k] = -1;
        if (n->in[k] < 0) continue;
        qf_value *v = &o->vals[nv];
        *v = g->values[n->in[k]];
        v->producer = -1;
        v->flags &= QF_VALUE_CONST;
        if (!(v->flags & QF_VALUE_CONST)) {
            v->flags |= QF_VALUE_INPUT;
            o->ins[n_ins++] = nv;
        }
        o->in[k] = nv++;
    }
    for (int k = 0; k < n->n_out; k++) {
        o->out[k] = -1;
        if (n->out[k] < 0) continue;
        o->vals[nv] = g->values[n->out[k]];
        o->vals[nv].producer = 0;
        o->vals[nv].flags = QF_VALUE_OUTPUT;
        o->outs[n_outs++] = nv;
        o->out[k] = nv++;
    }
    o->node = *n;
    o->node.in = o->in;
    o->node.out = o->out;
    o->g = (qf_graph){.source = g->source, .opset = g->opset, .batch = g->batch, .n_values = nv, .values = o->vals,
                      .n_nodes = 1, .nodes = &o->node, .n_inputs = n_ins, .inputs = o->ins, .n_outputs = n_outs,
                      .outputs = o->outs};
    return true;
}

qf_status qfi_run_observed(const qf_graph *g, int threads, const float *input, qf_observer_fn observer, void *user)
{
    qf_engine_opts eo = {.device = QF_DEVICE_CPU, .threads = threads, .observer = observer, .observer_user = user};
    qf_engine *e;
    QF_CHECK(qf_engine_create(g, &eo, &e));
    memcpy(qf_engine_input(e, 0), input, (size_t)qf_value_numel(&g->values[g->inputs[0]]) * sizeof *input);
    qf_status st = qf_engine_run(e);
    qf_engine_free(e);
    return st;
}

/* The node runs on the CPU engine through the public engine interface, as a
 * one-node graph borrowing n and its inputs' data: lib/ depends on the
 * engines only through include/qforge/engine.h. (Shape's input is not
 * constant: only its dims are read.) */
qf_status qfi_fold_node(qf_graph *g, qf_node *n)
{
    for (int k = 0; k < n->n_out; k++) {
        const qf_value *v = n->out[k] >= 0 ? &g->values[n->out[k]] : NULL;
        if (v && qf_value_bytes(v) > (size_t)QF_MAX_TENSOR_BYTES)
            return qf_error(QF_ERR_NOMEM, "folded tensor %s too large", v->name);
    }
    qfi_one_node *one = qfi_calloc(1, sizeof *one);
    if (!one) return QF_ERR_NOMEM;
    if (!qfi_one_node_init(one, g, n)) {
        free(one);
        return QF_OK;
    }
    qf_engine_opts eo = {.device = QF_DEVICE_CPU, .threads = 1};
    qf_engine *e;
    qf_status st = qf_engine_create(&one->g, &eo, &e);
    if (st != QF_OK) {
        free(one);
        return st;
    }
    st = qf_engine_run(e);
    for (int k = 0, o = 0; k < n->n_out && st == QF_OK; k++) {
        if (n->out[k] < 0) continue;
        qf_value *v = &g->values[n->out[k]];
        size_t bytes = qf_value_bytes(v);
        void *data = qfi_calloc(bytes ? bytes : 1, 1);
        if (!data) {
            st = QF_ERR_NOMEM;
            break;
        }
        if (bytes) memcpy(data, qf_engine_output(e, o), bytes);
        o++;
        v->data = data;
        v->flags |= QF_VALUE_CONST;
    }
    qf_engine_free(e);
    free(one);
    return st;
}

/* Runs node n's shape inference; the op's message gets the file and node. */
static qf_status infer_node(qf_graph *g, qf_node *n)
{
    qf_status st = qfi_ops[n->op]->infer(g, n);
    return st == QF_OK ? st : qfi_error_node(st, g, n);
}

/* The detail for a tensor beyond the bounds of qfi_tensor_bytes; `what` is
 * "tensor" or "input" (the caller adds the node or file). */
static qf_status too_large(const qf_graph *g, const char *what, const qf_value *v)
{
    uint64_t bytes;
    qfi_tensor_bytes(v->dtype, v->ndim, v->dims, &bytes);
    char need[48] = "more than 2^64", dims[QF_MAX_DIMS * 21 + 2] = "[";
    if (bytes != UINT64_MAX) snprintf(need, sizeof need, "%llu", (unsigned long long)bytes);
    for (int d = 0; d < v->ndim; d++)
        snprintf(dims + strlen(dims), sizeof dims - strlen(dims), "%s%lld", d ? "," : "", (long long)v->dims[d]);
    strcat(dims, "]");
    return qf_error(QF_ERR_NOMEM, "at batch %d, %s %s %s would need %s bytes (a tensor may hold %lld, "
                    "and no dimension more elements)", g->batch, what, v->name, dims, need,
                    (long long)QF_MAX_TENSOR_BYTES);
}

/* After inference: every output has a concrete shape of a sane size. */
static qf_status check_outputs(const qf_graph *g, const qf_node *n)
{
    for (int k = 0; k < n->n_out; k++) {
        if (n->out[k] < 0) continue;
        const qf_value *v = &g->values[n->out[k]];
        for (int d = 0; d < v->ndim; d++)
            if (v->dims[d] < 0)
                return qfi_error_node(qf_error(QF_ERR_INVALID, "could not infer dim %d of %s", d, v->name), g, n);
        uint64_t bytes;
        if (!qfi_tensor_bytes(v->dtype, v->ndim, v->dims, &bytes)) return qfi_error_node(too_large(g, "tensor", v), g, n);
    }
    return QF_OK;
}

/* ---- the second pass at another batch --------------------------------------------------- */

/* Which folded values depend on the batch is found exactly by inferring and
 * folding the graph a second time at another batch (a shadow: values and
 * nodes copied, constants' data and attributes borrowed) and comparing the
 * folded values element by element. Only a graph with a Shape node can fold
 * anything from the batch. */
typedef struct shadow {
    qf_graph g;
    int n_values, n_nodes;  /* the original's counts: what is borrowed below them */
    void **borrowed;        /* the original's data pointers */
} shadow;

static void shadow_free(shadow *sh)
{
    if (!sh) return;
    for (int i = 0; i < sh->g.n_values; i++) {
        qf_value *v = &sh->g.values[i];
        if (i >= sh->n_values) free(v->name);
        if (i >= sh->n_values || v->data != sh->borrowed[i]) free(v->data);
    }
    for (int i = 0; i < sh->g.n_nodes; i++) {
        qf_node *n = &sh->g.nodes[i];
        if (i >= sh->n_nodes) {
            qfi_node_clear(n);
            continue;
        }
        free(n->in);
        free(n->out);
        free(n->params);
    }
    free(sh->g.values);
    free(sh->g.nodes);
    free(sh->borrowed);
    free(sh);
}

static shadow *shadow_new(const qf_graph *g, int batch)
{
    bool has_shape = false;
    for (int i = 0; i < g->n_nodes; i++) has_shape |= g->nodes[i].op == QF_OP_SHAPE;
    if (!has_shape) return NULL;
    shadow *sh = qfi_calloc(1, sizeof *sh);
    if (!sh) return NULL;
    sh->n_values = g->n_values;
    sh->n_nodes = g->n_nodes;
    sh->g = *g;
    sh->g.batch = batch;
    sh->g.cap_values = g->n_values;
    sh->g.cap_nodes = g->n_nodes;
    sh->g.n_nodes = 0;
    sh->g.values = qfi_calloc((size_t)g->n_values + 1, sizeof *sh->g.values);
    sh->g.nodes = qfi_calloc((size_t)g->n_nodes + 1, sizeof *sh->g.nodes);
    sh->borrowed = qfi_calloc((size_t)g->n_values + 1, sizeof *sh->borrowed);
    if (!sh->g.values || !sh->g.nodes || !sh->borrowed) {
        shadow_free(sh);
        return NULL;
    }
    memcpy(sh->g.values, g->values, (size_t)g->n_values * sizeof *g->values);
    for (int i = 0; i < g->n_values; i++) sh->borrowed[i] = g->values[i].data;
    for (int i = 0; i < g->n_inputs; i++) {
        qf_value *v = &sh->g.values[g->inputs[i]];
        if (v->ndim > 0) v->dims[0] = batch;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const qf_node *o = &g->nodes[i];
        qf_node *n = &sh->g.nodes[i];
        *n = *o;
        n->params = NULL;
        n->in = qfi_calloc((size_t)o->n_in + 1, sizeof *n->in);
        n->out = qfi_calloc((size_t)o->n_out + 1, sizeof *n->out);
        sh->g.n_nodes = i + 1;
        if (n->in && n->out) {
            memcpy(n->in, o->in, (size_t)o->n_in * sizeof *n->in);
            memcpy(n->out, o->out, (size_t)o->n_out * sizeof *n->out);
        }
        if (!n->in || !n->out || (o->op < QF_OP_COUNT && qfi_ops[o->op]->parse(&sh->g, n) != QF_OK)) {
            shadow_free(sh);
            return NULL;
        }
    }
    return sh;
}

/* Bit i set where element i of folded value v differs in the shadow; all of
 * them where the shapes differ or the shadow did not fold it. */
static uint64_t shadow_diff(const qf_graph *g, const shadow *sh, int v)
{
    const qf_value *a = &g->values[v], *b = &sh->g.values[v];
    if (!(b->flags & QF_VALUE_CONST) || !b->data || a->dtype != b->dtype || a->ndim != b->ndim ||
        memcmp(a->dims, b->dims, (size_t)a->ndim * sizeof *a->dims) != 0)
        return ALL_ELEMENTS;
    const int64_t cnt = qf_value_numel(a);
    const size_t es = qf_dtype_info(a->dtype)->size;
    uint64_t m = 0;
    for (int64_t i = 0; i < cnt; i++)
        if (memcmp((const char *)a->data + (size_t)i * es, (const char *)b->data + (size_t)i * es, es) != 0) {
            if (i >= 64 || a->ndim > 1) return ALL_ELEMENTS;
            m |= (uint64_t)1 << i;
        }
    return m;
}

/* An Expand of a constant to a shape whose element 0 alone is the batch
 * (ViT's class token) stays a node: folded, it would be a constant of the
 * load-time batch. fix_expand_batch then follows the batch. */
static bool expand_to_batch(const qf_graph *g, const qf_node *n, const batch_deps *d)
{
    if (n->op != QF_OP_EXPAND || !d->exact || dep_mask(d, n->in[1]) != 1) return false;
    const qf_value *sv = &g->values[n->in[1]], *y = &g->values[n->out[0]];
    return sv->dtype == QF_I64 && sv->ndim == 1 && sv->dims[0] == y->ndim && ((const int64_t *)sv->data)[0] == g->batch;
}

/* Infers and folds node by node; with a shadow (already inferred and folded
 * at another batch) the batch marks come from comparing the two. */
static qf_status infer_loop(qf_graph *g, int64_t declared_batch, batch_deps *dep, const shadow *sh)
{
    qf_status st = QF_OK;
    for (int i = 0; i < g->n_nodes && st == QF_OK; i++) {
        qf_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in; k++) {
            if (n->in[k] < 0) continue;
            const qf_value *v = &g->values[n->in[k]];
            for (int d = 0; d < v->ndim && st == QF_OK; d++)
                if (v->dims[d] < 0)
                    st = qfi_error_node(qf_error(QF_ERR_INVALID, "input %s has unknown dim %d", v->name, d), g, n);
        }
        if (st == QF_OK && declared_batch != g->batch) st = fix_reshape_batch(g, n, declared_batch);
        if (st == QF_OK) st = infer_node(g, n);
        if (st == QF_OK) st = check_outputs(g, n);
        if (st == QF_OK && node_foldable(g, n) && !expand_to_batch(g, n, dep)) {
            uint64_t from_batch = sh ? 0 : folds_batch(g, n, dep);
            st = qfi_fold_node(g, n);
            if (st != QF_OK) qfi_error_node(st, g, n);
            for (int k = 0; k < n->n_out && st == QF_OK; k++)
                if (n->out[k] >= 0 && n->out[k] < dep->n)
                    dep->mask[n->out[k]] = sh ? shadow_diff(g, sh, n->out[k]) : from_batch;
            kill_node(n);
        }
    }
    return st;
}

static qf_status infer_shapes(qf_graph *g, int64_t declared_batch)
{
    batch_deps dep = {qfi_calloc((size_t)g->n_values + 1, sizeof *dep.mask), g->n_values, false};
    if (!dep.mask) return QF_ERR_NOMEM;
    /* the shadow's pass; where it fails (a model that runs at one batch only) the rules decide */
    shadow *sh = shadow_new(g, g->batch + 2);
    if (sh) {
        batch_deps sdep = {qfi_calloc((size_t)g->n_values + 1, sizeof *sdep.mask), g->n_values, false};
        qf_status sst = sdep.mask ? infer_loop(&sh->g, declared_batch, &sdep, NULL) : QF_ERR_NOMEM;
        free(sdep.mask);
        if (sst != QF_OK) {
            shadow_free(sh);
            sh = NULL;
        }
    }
    dep.exact = sh != NULL;
    qf_status st = infer_loop(g, declared_batch, &dep, sh);
    if (st == QF_OK) st = free_batch_deps(g, &dep, sh ? &sh->g : NULL);
    shadow_free(sh);
    free(dep.mask);
    compact(g);
    return st;
}

/* ---- shapes of stored graphs at another batch ------------------------------------------- */

/* Infers node n of a stored graph; its outputs keep the dtypes and scales they
 * were stored with, which must agree with what the op infers. */
static qf_status infer_stored(qf_graph *g, qf_node *n)
{
    /* what is saved and restored: input dtypes, output dtypes, scales and zero points */
    enum { SMALL = 64 };
    qf_dtype small_dt[2 * SMALL];
    float small_scale[SMALL];
    int32_t small_zp[SMALL];
    const bool small = n->n_in <= SMALL && n->n_out <= SMALL;
    qf_dtype *in_dt = small ? small_dt : qfi_calloc((size_t)n->n_in + (size_t)n->n_out + 1, sizeof *in_dt);
    float *out_scale = small ? small_scale : qfi_calloc((size_t)n->n_out + 1, sizeof *out_scale);
    int32_t *out_zp = small ? small_zp : qfi_calloc((size_t)n->n_out + 1, sizeof *out_zp);
    if (!in_dt || !out_scale || !out_zp) {
        if (!small) free(in_dt), free(out_scale), free(out_zp);
        return QF_ERR_NOMEM;
    }
    qf_dtype *out_dt = in_dt + (small ? SMALL : n->n_in);
    const bool f32_view = qfi_node_f32_view(n);
    for (int k = 0; k < n->n_out; k++) {
        if (n->out[k] < 0) continue;
        out_dt[k] = g->values[n->out[k]].dtype;
        out_scale[k] = g->values[n->out[k]].scale;
        out_zp[k] = g->values[n->out[k]].zero_point;
    }
    if (f32_view)
        for (int k = 0; k < n->n_in; k++) {
            if (n->in[k] < 0) continue;
            qf_value *v = &g->values[n->in[k]];
            in_dt[k] = v->dtype;
            v->dtype = qfi_f32_view_dtype(v);
        }
    qf_status st = infer_node(g, n);
    if (f32_view) /* backwards, so an input read twice gets its own dtype back last */
        for (int k = n->n_in - 1; k >= 0; k--)
            if (n->in[k] >= 0) g->values[n->in[k]].dtype = in_dt[k];
    for (int k = 0; k < n->n_out && st == QF_OK; k++) {
        if (n->out[k] < 0) continue;
        qf_value *v = &g->values[n->out[k]];
        qf_value stored = {.dtype = out_dt[k], .flags = v->flags};
        qf_dtype expect = f32_view ? qfi_f32_view_dtype(&stored) : out_dt[k];
        if (v->dtype != expect)
            st = qfi_error_node(qf_error(QF_ERR_INVALID, "output %s is stored as %s but the op gives %s", v->name,
                                         qf_dtype_info(out_dt[k])->name, qf_dtype_info(v->dtype)->name),
                                g, n);
        v->dtype = out_dt[k];
        v->scale = out_scale[k];
        v->zero_point = out_zp[k];
    }
    if (!small) free(in_dt), free(out_scale), free(out_zp);
    return st;
}

qf_status qfi_graph_rebatch(qf_graph *g, int batch)
{
    if (batch < 1) return qfi_error_file(qf_error(QF_ERR_USAGE, "batch size %d must be positive", batch), g->source);
    const int64_t old = g->batch;
    g->batch = batch;
    for (int i = 0; i < g->n_inputs; i++) {
        qf_value *v = &g->values[g->inputs[i]];
        if (v->ndim > 0) v->dims[0] = batch;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        qf_node *n = &g->nodes[i];
        if (old != batch) {
            QF_CHECK(fix_reshape_batch(g, n, old));
            QF_CHECK(fix_expand_batch(g, n, old));
        }
        QF_CHECK(infer_stored(g, n));
        QF_CHECK(check_outputs(g, n));
    }
    return QF_OK;
}

qf_status qfi_graph_free_batch(qf_graph *g)
{
    for (int i = 0; i < g->n_nodes; i++) QF_CHECK(fix_reshape_batch(g, &g->nodes[i], g->batch));
    /* the hard-coded targets may now be unused */
    qfi_drop_unused_constants(g);
    return QF_OK;
}

/* ---- BatchNormalization folding --------------------------------------------------- */

/* Conv -> BatchNormalization with constant parameters becomes one Conv:
 * W' = W * gamma/sqrt(var+eps) per output channel, b' = (b - mean)*gamma/sqrt(var+eps) + beta. */
static qf_status fold_batchnorm(qf_graph *g)
{
    for (int i = 0; i < g->n_nodes; i++) {
        qf_node *bn = &g->nodes[i];
        if (bn->op != QF_OP_BATCH_NORM || bn->n_in < 5 || bn->n_out != 1) continue;
        int x = bn->in[0];
        if (x < 0 || g->values[x].producer < 0 || is_graph_output(g, x) || count_uses(g, x) != 1) continue;
        qf_node *conv = &g->nodes[g->values[x].producer];
        if (conv->op != QF_OP_CONV || !qfi_is_const(g, conv->in[1]) || g->values[conv->in[1]].dtype != QF_F32) continue;
        if (conv->n_in > 2 && conv->in[2] >= 0 && !qfi_is_const(g, conv->in[2])) continue;
        bool params_const = true;
        for (int k = 1; k < 5; k++)
            params_const &= qfi_is_const(g, bn->in[k]) && g->values[bn->in[k]].dtype == QF_F32;
        if (!params_const) continue;
        qf_value *w = &g->values[conv->in[1]];
        int64_t cout = w->dims[0], per = qf_value_numel(w) / (cout ? cout : 1);
        for (int k = 1; k < 5; k++)
            if (qf_value_numel(&g->values[bn->in[k]]) != cout) return QF_OK;
        const float *gamma = g->values[bn->in[1]].data, *beta = g->values[bn->in[2]].data;
        const float *mean = g->values[bn->in[3]].data, *var = g->values[bn->in[4]].data;
        float eps = qfi_attr_float(bn, "epsilon", 1e-5f);
        /* weights may be shared with another conv: write a new tensor */
        char name[512];
        snprintf(name, sizeof name, "%s/bn_folded_w", conv->name);
        int nw = qf_graph_add_value(g, name, QF_F32, w->ndim, w->dims);
        snprintf(name, sizeof name, "%s/bn_folded_b", conv->name);
        int64_t bdims[1] = {cout};
        int nb = nw < 0 ? -1 : qf_graph_add_value(g, name, QF_F32, 1, bdims);
        if (nb < 0) return QF_ERR_NOMEM;
        /* g->values may have moved */
        w = &g->values[conv->in[1]];
        const float *b0 = conv->n_in > 2 && conv->in[2] >= 0 ? g->values[conv->in[2]].data : NULL;
        float *wd = qfi_calloc((size_t)qf_value_numel(w), sizeof(float));
        float *bd = qfi_calloc((size_t)cout, sizeof(float));
        if (!wd || !bd) {
            free(wd);
            free(bd);
            return QF_ERR_NOMEM;
        }
        const float *ws = w->data;
        for (int64_t c = 0; c < cout; c++) {
            double s = gamma[c] / sqrt((double)var[c] + eps);
            for (int64_t j = 0; j < per; j++) wd[c * per + j] = (float)(ws[c * per + j] * s);
            bd[c] = (float)(((b0 ? b0[c] : 0.0) - mean[c]) * s + beta[c]);
        }
        g->values[nw].data = wd;
        g->values[nw].flags |= QF_VALUE_CONST;
        g->values[nb].data = bd;
        g->values[nb].flags |= QF_VALUE_CONST;
        if (conv->n_in < 3) {
            int *nin = realloc(conv->in, 3 * sizeof *nin);
            if (!nin) return qf_error(QF_ERR_NOMEM, "out of memory");
            conv->in = nin;
            conv->n_in = 3;
        }
        conv->in[1] = nw;
        conv->in[2] = nb;
        /* the conv now writes the BN's output */
        conv->out[0] = bn->out[0];
        g->values[bn->out[0]].producer = g->values[x].producer;
        g->values[x].producer = -1;
        kill_node(bn);
    }
    compact(g);
    return QF_OK;
}

/* ---- Pad into Conv, ReduceMean as a pool ------------------------------------------------- */

/* The node reading value v, when exactly one does and v is no graph output; else NULL. */
static qf_node *sole_reader(qf_graph *g, int v)
{
    if (is_graph_output(g, v) || count_uses(g, v) != 1) return NULL;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] == v) return &g->nodes[i];
    return NULL;
}

/* Whether Pad n adds zeros (constant mode, value 0) on its spatial dims only. */
static bool pads_spatial_zeros(const qf_graph *g, const qf_node *n, const qf_value *x, const qf_value *y)
{
    const qfi_pad_params *p = n->params;
    if (p->mode != QFI_PADMODE_CONSTANT || x->dtype != QF_F32 || x->ndim < 3) return false;
    if (p->n_attr_pads >= 0 ? p->value != 0.0f
                            : n->n_in > 2 && n->in[2] >= 0 &&
                                  !(qfi_is_const(g, n->in[2]) && qf_value_numel(&g->values[n->in[2]]) <= 1 &&
                                    (qf_value_numel(&g->values[n->in[2]]) == 0 ||
                                     *(const float *)g->values[n->in[2]].data == 0.0f)))
        return false;
    for (int d = 0; d < x->ndim; d++) {
        int64_t after = y->dims[d] - x->dims[d] - p->begin[d];
        if (p->begin[d] < 0 || after < 0 || (d < 2 && (p->begin[d] || after))) return false;
    }
    return true;
}

/* A zero Pad of the spatial dims read only by a Conv (TF "same" padding,
 * EfficientNet-Lite's 22 of them) becomes part of the Conv's own pads: one
 * pass over the data fewer, and one op fewer that an engine must have. */
static qf_status fuse_pad_into_conv(qf_graph *g)
{
    for (int i = 0; i < g->n_nodes; i++) {
        qf_node *pad = &g->nodes[i];
        if (pad->op != QF_OP_PAD || pad->n_out != 1) continue;
        qf_node *conv = sole_reader(g, pad->out[0]);
        if (!conv || conv->op != QF_OP_CONV || conv->in[0] != pad->out[0]) continue;
        const qf_value *x = &g->values[pad->in[0]], *y = &g->values[pad->out[0]];
        if (!pads_spatial_zeros(g, pad, x, y) || strcmp(qfi_attr_string(conv, "auto_pad", "NOTSET"), "NOTSET") != 0)
            continue;
        const qfi_pad_params *pp = pad->params;
        const int nsp = x->ndim - 2;
        int cnt = 0;
        const int64_t *old = qfi_attr_ints(conv, "pads", &cnt);
        int64_t pads[2 * QF_MAX_DIMS];
        for (int s2 = 0; s2 < nsp; s2++) {
            int d = s2 + 2;
            pads[s2] = (cnt ? old[s2] : 0) + pp->begin[d];
            pads[nsp + s2] = (cnt ? old[nsp + s2] : 0) + y->dims[d] - x->dims[d] - pp->begin[d];
        }
        qf_attr *a = (qf_attr *)qfi_attr_find(conv, "pads");
        if (!a) {
            qf_attr *attrs = realloc(conv->attrs, (size_t)(conv->n_attr + 1) * sizeof *attrs);
            if (!attrs) return qf_error(QF_ERR_NOMEM, "out of memory");
            conv->attrs = attrs;
            a = &attrs[conv->n_attr++];
            memset(a, 0, sizeof *a);
            a->name = qfi_strdup("pads");
            a->type = QF_ATTR_INTS;
            if (!a->name) return QF_ERR_NOMEM;
        }
        int64_t *ints = realloc(a->ints, (size_t)(2 * nsp) * sizeof *ints);
        if (!ints) return qf_error(QF_ERR_NOMEM, "out of memory");
        memcpy(ints, pads, (size_t)(2 * nsp) * sizeof *ints);
        a->ints = ints;
        a->n = 2 * nsp;
        conv->in[0] = pad->in[0];
        QF_CHECK(qfi_ops[QF_OP_CONV]->parse(g, conv));
        QF_CHECK(qfi_ops[QF_OP_CONV]->infer(g, conv));
        kill_node(pad);
        qf_log(QF_LOG_DEBUG, "%s: pad %s folded into conv %s", g->source, pad->name, conv->name);
    }
    compact(g);
    return QF_OK;
}

/* A ReduceMean over all spatial dims of an (N, C, spatial...) tensor is a
 * GlobalAveragePool (PyTorch's x.mean([2, 3]) and the dynamo exporter's
 * adaptive pooling); without keepdims a Flatten follows it. Pools have
 * kernels on every engine and a faster one on the GPU. */
static qf_status reduce_mean_as_pool(qf_graph *g)
{
    bool added = false;
    for (int i = 0; i < g->n_nodes; i++) {
        qf_node *n = &g->nodes[i];
        if (n->op != QF_OP_REDUCE_MEAN) continue;
        const qf_value *x = &g->values[n->in[0]];
        bool reduced[QF_MAX_DIMS], noop, spatial = x->ndim >= 3;
        if (!spatial || qfi_reduce_mean_axes(g, n, NULL, reduced, &noop) != QF_OK || noop) continue;
        for (int d = 0; d < x->ndim; d++) spatial &= reduced[d] == (d >= 2);
        if (!spatial) continue;
        const bool keep = ((const qfi_reduce_params *)n->params)->keepdims;
        int y = n->out[0], pooled = y;
        if (!keep) {
            char name[512];
            snprintf(name, sizeof name, "%s/pooled", n->name);
            int64_t dims[QF_MAX_DIMS] = {x->dims[0], x->dims[1]};
            for (int d = 2; d < x->ndim; d++) dims[d] = 1;
            pooled = qf_graph_add_value(g, name, QF_F32, x->ndim, dims);
            if (pooled < 0) return QF_ERR_NOMEM;
            snprintf(name, sizeof name, "%s/flatten", g->nodes[i].name);
            int fi = qf_graph_add_node(g, name, QF_OP_FLATTEN, 1, &pooled, 1, &y);
            if (fi < 0) return QF_ERR_NOMEM;
            qf_node *f = &g->nodes[fi];
            QF_CHECK(qfi_ops[QF_OP_FLATTEN]->parse(g, f)); /* axis 1 by default */
            added = true;
        }
        n = &g->nodes[i]; /* g->nodes may have moved */
        n->op = QF_OP_GLOBAL_AVERAGE_POOL;
        n->n_in = 1;
        n->out[0] = pooled;
        g->values[pooled].producer = i;
        free(n->params);
        n->params = NULL;
        QF_CHECK(qfi_ops[QF_OP_GLOBAL_AVERAGE_POOL]->parse(g, n));
        qf_log(QF_LOG_DEBUG, "%s: reduce-mean %s is a global average pool", g->source, n->name);
    }
    if (!added) return QF_OK;
    QF_CHECK(toposort(g));
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == QF_OP_FLATTEN) QF_CHECK(qfi_ops[QF_OP_FLATTEN]->infer(g, &g->nodes[i]));
    return QF_OK;
}

/* ---- transformer blocks written out in elementary ops ----------------------------------- */

/* Value v's sole reader if it is op `op`, else NULL. */
static qf_node *sole_reader_op(qf_graph *g, int v, qf_op op)
{
    qf_node *n = v >= 0 ? sole_reader(g, v) : NULL;
    return n && n->op == op ? n : NULL;
}

/* Whether v is a constant f32 scalar (one element) within tol of want. */
static bool const_near(const qf_graph *g, int v, float want, float tol)
{
    float f;
    return qfi_is_const(g, v) && qf_value_numel(&g->values[v]) == 1 && g->values[v].dtype == QF_F32 &&
           qfi_value_scalar_f32(&g->values[v], &f) == QF_OK && fabsf(f - want) <= tol;
}

/* Binary node n's operand other than v, or -1 when v is not one of them. */
static int other_operand(const qf_node *n, int v)
{
    return n->n_in != 2 ? -1 : n->in[0] == v ? n->in[1] : n->in[1] == v ? n->in[0] : -1;
}

/* The constant v if it holds the `len` f32 values of a row of the trailing
 * `rank` dims (a LayerNorm's scale or bias), else -1. */
static int row_const(const qf_graph *g, int v, int64_t len, int rank)
{
    const qf_value *c = v >= 0 ? &g->values[v] : NULL;
    return c && qfi_is_const(g, v) && c->dtype == QF_F32 && qf_value_numel(c) == len && c->ndim <= rank ? v : -1;
}

/* Turns node n into op with these inputs and attributes, parsed and inferred;
 * n keeps its name and output. */
static qf_status become(qf_graph *g, qf_node *n, qf_op op, int n_in, const int *in, int n_attr, const qf_attr *attrs)
{
    int *nin = qfi_calloc((size_t)n_in + 1, sizeof *nin);
    qf_attr *na = qfi_calloc((size_t)n_attr + 1, sizeof *na);
    bool ok = nin && na;
    for (int i = 0; ok && i < n_attr; i++) {
        na[i] = attrs[i];
        ok = (na[i].name = qfi_strdup(attrs[i].name)) != NULL;
    }
    if (!ok) {
        for (int i = 0; na && i < n_attr; i++) free(na[i].name);
        free(nin), free(na);
        return QF_ERR_NOMEM;
    }
    for (int i = 0; i < n->n_attr; i++) qfi_attr_free(&n->attrs[i]);
    free(n->attrs);
    free(n->in);
    free(n->params);
    n->params = NULL;
    memcpy(nin, in, (size_t)n_in * sizeof *nin);
    n->in = nin;
    n->n_in = n_in;
    n->attrs = na;
    n->n_attr = n_attr;
    n->op = op;
    qf_status st = qfi_ops[op]->parse(g, n);
    if (st == QF_OK) st = qfi_ops[op]->infer(g, n);
    return st == QF_OK ? QF_OK : qfi_error_node(st, g, n);
}

/* The first of the trailing dims a ReduceMean with keepdims averages over,
 * or -1 when it averages over others. */
static int trailing_reduction(const qf_graph *g, const qf_node *n)
{
    const qf_value *x = &g->values[n->in[0]];
    bool reduced[QF_MAX_DIMS], noop;
    if (!((const qfi_reduce_params *)n->params)->keepdims || qfi_reduce_mean_axes(g, n, NULL, reduced, &noop) != QF_OK ||
        noop)
        return -1;
    int first = x->ndim;
    while (first > 0 && reduced[first - 1]) first--;
    for (int d = 0; d < first; d++)
        if (reduced[d]) return -1;
    return first < x->ndim ? first : -1;
}

/* A constant of len f32 ones named after node n: the scale of a LayerNorm without one. */
static int ones_const(qf_graph *g, const char *node_name, int64_t len)
{
    char name[512];
    snprintf(name, sizeof name, "%s/ones", node_name);
    int v = qf_graph_add_value(g, name, QF_F32, 1, &len);
    float *d = v < 0 ? NULL : qfi_calloc((size_t)len + 1, sizeof *d);
    if (!d) return -1;
    for (int64_t i = 0; i < len; i++) d[i] = 1.0f;
    g->values[v].data = d;
    g->values[v].flags |= QF_VALUE_CONST;
    return v;
}

/* LayerNorm written out (PyTorch's TorchScript export before opset 17):
 * m = ReduceMean(x), d = x - m, y = d / Sqrt(ReduceMean(d ^ 2) + eps), then
 * optionally * gamma + beta, both means over the same trailing dims, becomes
 * one LayerNormalization (axis: the first of them). Every intermediate is
 * read only inside the chain. */
static qf_status fuse_layer_norm(qf_graph *g)
{
    int fused = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        qf_node *m1 = &g->nodes[i];
        if (m1->op != QF_OP_REDUCE_MEAN) continue;
        const int x = m1->in[0], axis = trailing_reduction(g, m1);
        qf_node *sub = axis < 0 ? NULL : sole_reader_op(g, m1->out[0], QF_OP_SUB);
        if (!sub || sub->in[0] != x || sub->in[1] != m1->out[0]) continue;
        const int d = sub->out[0];
        if (is_graph_output(g, d) || count_uses(g, d) != 2) continue;
        qf_node *pow = NULL, *div = NULL;
        for (int j = 0; j < g->n_nodes; j++) {
            qf_node *r = &g->nodes[j];
            if (r->op == QF_OP_POW && r->in[0] == d) pow = r;
            if (r->op == QF_OP_DIV && r->in[0] == d) div = r;
        }
        if (!pow || !div || !const_near(g, pow->in[1], 2.0f, 0.0f)) continue;
        qf_node *m2 = sole_reader_op(g, pow->out[0], QF_OP_REDUCE_MEAN);
        if (!m2 || trailing_reduction(g, m2) != axis) continue;
        qf_node *add = sole_reader_op(g, m2->out[0], QF_OP_ADD);
        const int eps = add ? other_operand(add, m2->out[0]) : -1;
        float epsilon;
        if (!add || !qfi_is_const(g, eps) || qf_value_numel(&g->values[eps]) != 1 ||
            qfi_value_scalar_f32(&g->values[eps], &epsilon) != QF_OK || !(epsilon >= 0.0f))
            continue;
        qf_node *sq = sole_reader_op(g, add->out[0], QF_OP_SQRT);
        if (!sq || sole_reader(g, sq->out[0]) != div || div->in[1] != sq->out[0]) continue;
        /* the affine part */
        const qf_value *xv = &g->values[x];
        const int64_t len = qfi_numel(xv->ndim - axis, xv->dims + axis);
        const int rank = xv->ndim - axis;
        qf_node *last = div, *mul = sole_reader_op(g, div->out[0], QF_OP_MUL);
        int gamma = mul ? row_const(g, other_operand(mul, div->out[0]), len, rank) : -1, beta = -1;
        if (gamma >= 0) {
            last = mul;
            qf_node *bias_add = sole_reader_op(g, mul->out[0], QF_OP_ADD);
            beta = bias_add ? row_const(g, other_operand(bias_add, mul->out[0]), len, rank) : -1;
            if (beta >= 0) last = bias_add;
        }
        qf_node *chain[] = {m1, sub, pow, m2, add, sq, div, mul};
        for (size_t c = 0; c < sizeof chain / sizeof *chain; c++)
            if (chain[c] && chain[c] != last && (chain[c] != mul || gamma >= 0)) kill_node(chain[c]);
        if (gamma < 0 && (gamma = ones_const(g, last->name, len)) < 0) return QF_ERR_NOMEM;
        const qf_attr attrs[2] = {{.name = "axis", .type = QF_ATTR_INT, .i = axis},
                                  {.name = "epsilon", .type = QF_ATTR_FLOAT, .f = epsilon}};
        const int ins[3] = {x, gamma, beta};
        QF_CHECK(become(g, last, QF_OP_LAYER_NORM, beta >= 0 ? 3 : 2, ins, 2, attrs));
        fused++;
    }
    if (fused) qf_log(QF_LOG_DEBUG, "%s: %d LayerNorm chains fused", g->source, fused);
    compact(g);
    return QF_OK;
}

/* GELU written out (PyTorch's TorchScript export of nn.GELU): Erf(x / sqrt 2)
 * (or of x * (1 / sqrt 2)), + 1, then the products with x and with 0.5 in
 * either order, becomes one Gelu. */
static qf_status fuse_gelu(qf_graph *g)
{
    int fused = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        qf_node *erf = &g->nodes[i];
        if (erf->op != QF_OP_ERF) continue;
        const int t = erf->in[0];
        qf_node *scale = g->values[t].producer >= 0 ? &g->nodes[g->values[t].producer] : NULL;
        if (!scale || sole_reader(g, t) != erf || scale->n_in != 2) continue;
        int x = scale->in[0];
        bool ok = scale->op == QF_OP_DIV && const_near(g, scale->in[1], 1.41421356f, 2e-6f);
        if (scale->op == QF_OP_MUL) {
            if (const_near(g, scale->in[0], 0.70710678f, 1e-6f)) x = scale->in[1];
            ok = const_near(g, other_operand(scale, x), 0.70710678f, 1e-6f);
        }
        if (!ok) continue;
        qf_node *add = sole_reader_op(g, erf->out[0], QF_OP_ADD);
        if (!add || !const_near(g, other_operand(add, erf->out[0]), 1.0f, 0.0f)) continue;
        qf_node *m = sole_reader_op(g, add->out[0], QF_OP_MUL), *last, *half = NULL;
        if (!m) continue;
        const int other = other_operand(m, add->out[0]);
        if (other == x) { /* (x * (1 + erf)) * 0.5 */
            last = sole_reader_op(g, m->out[0], QF_OP_MUL);
            if (!last || !const_near(g, other_operand(last, m->out[0]), 0.5f, 0.0f)) continue;
        } else { /* (x * 0.5) * (1 + erf) */
            half = other >= 0 && g->values[other].producer >= 0 ? &g->nodes[g->values[other].producer] : NULL;
            if (!half || half->op != QF_OP_MUL || !const_near(g, other_operand(half, x), 0.5f, 0.0f) ||
                sole_reader(g, other) != m)
                continue;
            last = m;
        }
        qf_node *chain[] = {scale, erf, add, m, half};
        for (size_t c = 0; c < sizeof chain / sizeof *chain; c++)
            if (chain[c] && chain[c] != last) kill_node(chain[c]);
        QF_CHECK(become(g, last, QF_OP_GELU, 1, &x, 0, NULL));
        fused++;
    }
    if (fused) qf_log(QF_LOG_DEBUG, "%s: %d GELU chains fused", g->source, fused);
    compact(g);
    return QF_OK;
}

/* ---- a constant per-channel scale into the layer before it ------------------------------ */

/* v's producer, where exactly one node reads v and v is no graph output. */
static qf_node *sole_producer(qf_graph *g, int v)
{
    if (v < 0 || g->values[v].producer < 0 || is_graph_output(g, v) || count_uses(g, v) != 1) return NULL;
    return &g->nodes[g->values[v].producer];
}

/* A float constant with new data, named after node n. */
static int add_scaled_const(qf_graph *g, const qf_node *n, const char *what, int ndim, const int64_t *dims, float *data)
{
    char name[512];
    snprintf(name, sizeof name, "%s/%s", n->name, what);
    return qfi_graph_add_const(g, name, QF_F32, ndim, dims, data);
}

/* Marks value v's name as holding scaled data: a calibration table made
 * before the fold has no entry for it (the one-line error), not a wrong one. */
static qf_status rename_scaled(qf_graph *g, int v)
{
    char name[600];
    snprintf(name, sizeof name, "%s/channel_scaled", g->values[v].name);
    char *dup = qfi_strdup(name);
    if (!dup) return QF_ERR_NOMEM;
    free(g->values[v].name);
    g->values[v].name = dup;
    return QF_OK;
}

/* Mul(y, gamma), gamma constant and broadcast along y's channel axis only
 * (ConvNeXt's and CaiT's layer scale, a BatchNorm exported as a Mul), where
 * y comes from a Conv or a MatMul with constant weights (and a constant bias
 * Add), through at most one Transpose, each value read only by the next:
 * the factors go into the weights and the bias, W' = W gamma, b' = b gamma
 * (new tensors, each element rounded once from double), and the Mul is gone.
 * One pass over the activations fewer. Not where a weight FP16 holds as a
 * normal half would leave that range: torchvision ConvNeXt's layer scale at
 * random init (1e-6) would push its fc2 weights below it, and an FP16 plan
 * would then run those GEMMs in FP32 (measured: FP16 b256 6,785 -> 4,390
 * images/s on the H200, while INT8, whose per-channel weight scales absorb
 * any factor, went 6,849 -> 7,271). The FP32 outputs change by the weights'
 * rounding (1e-7 relative). */
static qf_status fold_channel_scale(qf_graph *g)
{
    int folded = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        qf_node *mul = &g->nodes[i];
        if (mul->op != QF_OP_MUL || mul->n_in != 2 || mul->n_out != 1) continue;
        const int gv = qfi_is_const(g, mul->in[1]) ? mul->in[1] : qfi_is_const(g, mul->in[0]) ? mul->in[0] : -1;
        const int y = gv < 0 ? -1 : other_operand(mul, gv);
        if (y < 0 || qfi_is_const(g, y) || g->values[gv].dtype != QF_F32 || g->values[y].dtype != QF_F32) continue;
        /* back from y: [Transpose] <- [Add(bias)] <- MatMul | Conv */
        qf_node *tr = NULL, *badd = NULL, *p = sole_producer(g, y);
        int t = y, bias = -1;
        if (p && p->op == QF_OP_TRANSPOSE) {
            tr = p;
            t = p->in[0];
            p = sole_producer(g, t);
        }
        if (p && p->op == QF_OP_ADD && p->n_in == 2 && (qfi_is_const(g, p->in[0]) || qfi_is_const(g, p->in[1]))) {
            badd = p;
            bias = qfi_is_const(g, p->in[1]) ? p->in[1] : p->in[0];
            t = other_operand(p, bias);
            p = sole_producer(g, t);
        }
        if (!p || p->n_out != 1 || p->out[0] != t || p->n_in < 2 || !qfi_is_const(g, p->in[1]) ||
            g->values[p->in[1]].dtype != QF_F32 || (bias >= 0 && g->values[bias].dtype != QF_F32))
            continue;
        const qf_value *w = &g->values[p->in[1]], *tv = &g->values[t], *yv = &g->values[y], *gm = &g->values[gv];
        int axis; /* of t: the output channels */
        int64_t C;
        if (p->op == QF_OP_MATMUL && w->ndim == 2 && tv->ndim >= 2 && !qfi_is_const(g, p->in[0])) {
            axis = tv->ndim - 1, C = w->dims[1];
        } else if (p->op == QF_OP_CONV && !badd && w->ndim >= 3 && tv->ndim >= 3 &&
                   (p->n_in < 3 || p->in[2] < 0 || (qfi_is_const(g, p->in[2]) && g->values[p->in[2]].dtype == QF_F32))) {
            axis = 1, C = w->dims[0];
            bias = p->n_in > 2 ? p->in[2] : -1;
        } else {
            continue;
        }
        if (tv->dims[axis] != C || yv->ndim != tv->ndim || gm->ndim > yv->ndim) continue;
        /* the channel axis of y */
        int ya = axis;
        if (tr) {
            const qfi_transpose_params *tp = tr->params;
            ya = -1;
            for (int a = 0; a < yv->ndim; a++)
                if ((tp->n_perm ? tp->perm[a] : yv->ndim - 1 - a) == axis) ya = a;
            if (ya < 0) continue;
        }
        /* gamma: 1 along every other axis, C or 1 along that one */
        bool per_channel = false, fits = true;
        for (int a = 0; a < yv->ndim; a++) {
            const int ga = a - (yv->ndim - gm->ndim);
            const int64_t d = ga >= 0 ? gm->dims[ga] : 1;
            if (d == 1) continue;
            if (a == ya && d == C) per_channel = true;
            else fits = false;
        }
        const qf_value *bv = bias >= 0 ? &g->values[bias] : NULL;
        if (!fits || (bv && qf_value_numel(bv) != C && qf_value_numel(bv) != 1)) continue;
        if (bv && badd) { /* the bias broadcasts along t's last axis only */
            bool last_only = bv->ndim <= tv->ndim;
            for (int a = 0; last_only && a < bv->ndim - 1; a++) last_only = bv->dims[a] == 1;
            if (!last_only) continue;
        }
        const float *gd = gm->data, *wd = w->data;
        const int64_t nw = qf_value_numel(w);
        float *nwd = qfi_calloc((size_t)nw + 1, sizeof *nwd), *nbd = bv ? qfi_calloc((size_t)C + 1, sizeof *nbd) : NULL;
        if (!nwd || (bv && !nbd)) {
            free(nwd);
            free(nbd);
            return QF_ERR_NOMEM;
        }
        const int64_t per = nw / C; /* Conv: the elements of one output channel */
        bool half_ok = true;
        for (int64_t e = 0; e < nw; e++) {
            const int64_t c = p->op == QF_OP_MATMUL ? e % C : e / per;
            nwd[e] = (float)((double)wd[e] * gd[per_channel ? c : 0]);
            /* a weight FP16 holds as a normal half stays one */
            const float a = fabsf(wd[e]), b = fabsf(nwd[e]);
            half_ok &= !(a >= QFI_FP16_MIN_NORMAL && a <= QFI_FP16_MAX) || (b >= QFI_FP16_MIN_NORMAL && b <= QFI_FP16_MAX);
        }
        if (!half_ok) { /* random-init ConvNeXt's 1e-6: an FP16 plan would have to run the layer in FP32 */
            free(nwd);
            free(nbd);
            continue;
        }
        for (int64_t c = 0; bv && c < C; c++)
            nbd[c] = (float)((double)((const float *)bv->data)[qf_value_numel(bv) == C ? c : 0] * gd[per_channel ? c : 0]);
        const int wdim = w->ndim;
        int64_t wdims[QF_MAX_DIMS], bdims[1] = {C};
        memcpy(wdims, w->dims, sizeof wdims);
        const int pi = (int)(p - g->nodes), ti = tr ? (int)(tr - g->nodes) : -1, ai = badd ? (int)(badd - g->nodes) : -1;
        const int nwv = add_scaled_const(g, p, "channel_scaled_w", wdim, wdims, nwd);
        const int nbv = nwv >= 0 && nbd ? add_scaled_const(g, p, "channel_scaled_b", 1, bdims, nbd) : -1;
        if (nwv < 0 || (nbd && nbv < 0)) return QF_ERR_NOMEM;
        /* the values array may have moved: the nodes are found again by index */
        p = &g->nodes[pi];
        p->in[1] = nwv;
        if (nbv >= 0) {
            if (ai >= 0) {
                qf_node *a = &g->nodes[ai];
                a->in[a->in[0] == bias ? 0 : 1] = nbv;
            } else {
                p->in[2] = nbv;
            }
        }
        /* the chain's last node writes the Mul's output; the values in between hold scaled data */
        qf_node *last = &g->nodes[ti >= 0 ? ti : ai >= 0 ? ai : pi];
        QF_CHECK(rename_scaled(g, p->out[0]));
        if (ai >= 0 && ti >= 0) QF_CHECK(rename_scaled(g, g->nodes[ai].out[0]));
        mul = &g->nodes[i];
        g->values[y].producer = -1;
        last->out[0] = mul->out[0];
        g->values[mul->out[0]].producer = (int)(last - g->nodes);
        kill_node(mul);
        folded++;
    }
    if (folded) qf_log(QF_LOG_DEBUG, "%s: %d constant channel scales folded into the layers before them", g->source, folded);
    compact(g);
    return QF_OK;
}

/* Frees data of constants no node or output reads any more (unfolded BN
 * parameters, the inputs of folded shape arithmetic). */
void qfi_drop_unused_constants(qf_graph *g)
{
    char *used = calloc((size_t)g->n_values + 1, 1);
    if (!used) return;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] >= 0) used[g->nodes[i].in[k]] = 1;
    for (int i = 0; i < g->n_outputs; i++) used[g->outputs[i]] = 1;
    for (int v = 0; v < g->n_values; v++) {
        if (!used[v] && (g->values[v].flags & QF_VALUE_CONST) && !(g->values[v].flags & QF_VALUE_INPUT)) {
            free(g->values[v].data);
            g->values[v].data = NULL;
            g->values[v].flags &= ~(unsigned)QF_VALUE_CONST;
            g->values[v].ndim = 0; /* marks the value as gone */
        }
    }
    free(used);
}

qf_status qf_graph_prepare(qf_graph *g, int batch)
{
    if (batch < 0) return qf_error(QF_ERR_USAGE, "batch size %d is negative", batch);
    QF_CHECK(toposort(g));
    remove_identities(g);
    /* the batch the model was exported with: the first graph input's dim 0 */
    int64_t declared = 1;
    for (int i = 0; i < g->n_inputs; i++) {
        qf_value *v = &g->values[g->inputs[i]];
        if (v->ndim > 0 && v->dims[0] > 0) {
            declared = v->dims[0];
            break;
        }
    }
    if (batch == 0 && declared > INT32_MAX)
        return qfi_error_file(qf_error(QF_ERR_INVALID, "the inputs declare batch %lld", (long long)declared), g->source);
    g->batch = batch > 0 ? batch : (int)declared;
    for (int i = 0; i < g->n_inputs; i++) {
        qf_value *v = &g->values[g->inputs[i]];
        if (v->ndim > 0 && (batch > 0 || v->dims[0] < 0)) v->dims[0] = g->batch;
        for (int d = 1; d < v->ndim; d++)
            if (v->dims[d] < 0)
                return qfi_error_file(qf_error(QF_ERR_UNSUPPORTED,
                                               "input %s has a symbolic dim %d; only the batch may be symbolic",
                                               v->name, d),
                                      g->source);
        uint64_t bytes;
        if (!qfi_tensor_bytes(v->dtype, v->ndim, v->dims, &bytes))
            return qfi_error_file(too_large(g, "input", v), g->source);
    }
    QF_CHECK(infer_shapes(g, declared));
    QF_CHECK(fold_batchnorm(g));
    QF_CHECK(fuse_pad_into_conv(g));
    QF_CHECK(fuse_layer_norm(g)); /* before its trailing ReduceMeans could become pools */
    QF_CHECK(fuse_gelu(g));
    QF_CHECK(fold_channel_scale(g));
    QF_CHECK(reduce_mean_as_pool(g));
    /* every prepared graph is batch-free: engines, .qfm files and ONNX exports
     * built from it run at any batch */
    return qfi_graph_free_batch(g);
}

qf_status qf_model_load(const char *path, const qf_load_opts *opts, qf_graph **out)
{
    *out = NULL;
    qf_graph *g = NULL;
    QF_CHECK(qf_onnx_load(path, &g));
    qf_status st = qf_graph_prepare(g, opts ? opts->batch : 0);
    if (st != QF_OK) {
        qf_graph_free(g);
        return st;
    }
    *out = g;
    return QF_OK;
}
