/* Per-tensor comparison of a quantized graph with its FP32 original (qforge
 * eval --per-layer): both engines run the same batch, the quantized one first;
 * its observer keeps each compared tensor as stored (int8, half or float), the
 * reference's observer then accumulates signal and noise energy per tensor. */
#include <math.h>
#include "quant_internal.h"

typedef struct cmp_tensor {
    int qv, rv;          /* value in the quantized graph, in the reference */
    int writer;          /* node of the quantized graph that writes qv */
    void *held;          /* the quantized engine's data of the current batch */
    int64_t held_n;      /* elements held (the real images of the batch) */
    double signal, noise;
    int64_t count;
} cmp_tensor;

struct qf_layer_cmp {
    const qf_graph *q, *r;
    int valid;           /* images of each batch to count; 0 = all */
    int n;
    cmp_tensor *t;
    int *of_q, *of_r;    /* value -> tensor index, -1 when not compared */
};

/* The node before `before` that writes value v (`before` itself if none does). */
static int writer_of(const qf_graph *g, int v, int before)
{
    for (int i = before - 1; i >= 0; i--)
        for (int k = 0; k < g->nodes[i].n_out; k++)
            if (g->nodes[i].out[k] == v) return i;
    return before;
}

static float elem_f32(const qf_value *v, const void *data, int64_t i)
{
    switch (v->dtype) {
    case QF_I8: return qfi_dequantize_i8_zp(((const int8_t *)data)[i], v->scale, v->zero_point);
    case QF_F16: return qf_f16_to_f32(((const uint16_t *)data)[i]);
    default: return ((const float *)data)[i];
    }
}

qf_status qf_layer_cmp_create(const qf_graph *quantized, const qf_graph *reference, qf_layer_cmp **out)
{
    *out = NULL;
    if (quantized->batch != reference->batch || quantized->batch <= 0)
        return qf_error(QF_ERR_USAGE, "per-layer comparison: %s and %s must be prepared at the same batch size",
                        quantized->source, reference->source);
    qf_layer_cmp *c = qfi_calloc(1, sizeof *c);
    if (!c) return QF_ERR_NOMEM;
    c->q = quantized;
    c->r = reference;
    c->t = qfi_calloc((size_t)quantized->n_values + 1, sizeof *c->t);
    c->of_q = qfi_calloc((size_t)quantized->n_values + 1, sizeof *c->of_q);
    c->of_r = qfi_calloc((size_t)reference->n_values + 1, sizeof *c->of_r);
    if (!c->t || !c->of_q || !c->of_r) goto nomem;
    for (int v = 0; v < quantized->n_values; v++) c->of_q[v] = -1;
    for (int v = 0; v < reference->n_values; v++) c->of_r[v] = -1;
    /* every value a node of the quantized graph writes that the reference
     * holds by the same name, in the same size, as float; a conversion writes
     * one only where a graph output stays f32 beside its stored copy, and the
     * node named is then the one that wrote the copy */
    for (int i = 0; i < quantized->n_nodes; i++) {
        const qf_node *n = &quantized->nodes[i];
        for (int k = 0; k < n->n_out; k++) {
            int qv = n->out[k];
            if (qv < 0 || c->of_q[qv] >= 0) continue;
            const qf_value *val = &quantized->values[qv];
            if (val->dtype != QF_I8 && val->dtype != QF_F16 && val->dtype != QF_F32) continue;
            int rv = qf_graph_find_value(reference, val->name);
            if (rv < 0 || reference->values[rv].dtype != QF_F32 ||
                qf_value_numel(&reference->values[rv]) != qf_value_numel(val))
                continue;
            cmp_tensor *t = &c->t[c->n];
            t->qv = qv;
            t->rv = rv;
            t->writer = qf_op_is_conversion(n->op) && n->n_in > 0 ? writer_of(quantized, n->in[0], i) : i;
            t->held = qfi_calloc((size_t)qf_value_bytes(val) + 1, 1);
            if (!t->held) goto nomem;
            c->of_q[qv] = c->n;
            c->of_r[rv] = c->n;
            c->n++;
        }
    }
    *out = c;
    return QF_OK;
nomem:
    qf_layer_cmp_free(c);
    return qf_error(QF_ERR_NOMEM, "%s: out of memory for the per-layer comparison", quantized->source);
}

void qf_layer_cmp_free(qf_layer_cmp *c)
{
    if (!c) return;
    for (int i = 0; c->t && i < c->n; i++) free(c->t[i].held);
    free(c->t);
    free(c->of_q);
    free(c->of_r);
    free(c);
}

void qf_layer_cmp_set_batch_valid(qf_layer_cmp *c, int images)
{
    c->valid = images > 0 ? images : 0;
}

void qf_layer_cmp_observe_quantized(void *user, const qf_graph *g, int value, const void *data)
{
    qf_layer_cmp *c = user;
    QF_ASSERT(g == c->q);
    int k = c->of_q[value];
    if (k < 0 || !data) return;
    cmp_tensor *t = &c->t[k];
    const qf_value *v = &g->values[value];
    t->held_n = qfi_value_valid_numel(g, v, c->valid);
    memcpy(t->held, data, (size_t)t->held_n * qf_dtype_info(v->dtype)->size);
}

void qf_layer_cmp_observe_reference(void *user, const qf_graph *g, int value, const void *data)
{
    qf_layer_cmp *c = user;
    QF_ASSERT(g == c->r);
    int k = c->of_r[value];
    if (k < 0 || !data) return;
    cmp_tensor *t = &c->t[k];
    const qf_value *qv = &c->q->values[t->qv];
    const float *ref = data;
    double sig = 0, noise = 0;
    for (int64_t i = 0; i < t->held_n; i++) {
        double r = ref[i], d = (double)elem_f32(qv, t->held, i) - r;
        sig += r * r;
        noise += d * d;
    }
    t->signal += sig;
    t->noise += noise;
    t->count += t->held_n;
    t->held_n = 0;
}

static int by_sqnr(const void *a, const void *b)
{
    const qf_layer_sqnr *x = a, *y = b;
    if (x->sqnr_db != y->sqnr_db) return x->sqnr_db < y->sqnr_db ? -1 : 1;
    return x->order - y->order;
}

qf_status qf_layer_cmp_results(const qf_layer_cmp *c, qf_layer_sqnr **out, int *n)
{
    *out = NULL;
    *n = 0;
    qf_layer_sqnr *r = qfi_calloc((size_t)c->n + 1, sizeof *r);
    if (!r) return QF_ERR_NOMEM;
    for (int i = 0; i < c->n; i++) {
        const cmp_tensor *t = &c->t[i];
        if (!t->count) continue;
        const qf_node *w = &c->q->nodes[t->writer];
        qf_layer_sqnr *o = &r[(*n)++];
        o->tensor = c->q->values[t->qv].name;
        o->node = w->name;
        o->op = w->op;
        o->precision = w->precision;
        o->dtype = c->q->values[t->qv].dtype;
        o->order = i;
        o->elements = t->count;
        o->signal = t->signal;
        o->noise = t->noise;
        /* identical tensors: a large finite number, as eval reports the output */
        o->sqnr_db = t->noise > 0 ? 10.0 * log10(t->signal / t->noise) : QF_SQNR_EXACT_DB;
        if (!(o->sqnr_db < QF_SQNR_EXACT_DB)) o->sqnr_db = QF_SQNR_EXACT_DB;
        if (!(o->sqnr_db > -QF_SQNR_EXACT_DB)) o->sqnr_db = -QF_SQNR_EXACT_DB; /* all-zero reference */
    }
    qsort(r, (size_t)*n, sizeof *r, by_sqnr);
    *out = r;
    return QF_OK;
}
