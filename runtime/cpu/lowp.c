/* FP16 and INT8 nodes on the CPU through the FP32 kernels: the f32 view of the
 * graph (lib/op_table.c's qfi_f32_view_init), inputs widened into staging
 * buffers, outputs rounded back to half or quantized with the output's scale.
 * One wrapper instead of an f16 and an int8 variant of every kernel; the INT8
 * compute ops (Conv, Gemm, MatMul) and the conversions keep their dtypes. */
#include "kernels.h"
#include "ops/tensor_ops.h"

struct qfi_cpu_lowp {
    qf_graph view;        /* the f32 view; only `values` is its own */
    qf_value *values;     /* the view's values: g's, relabelled, f16 constants widened */
    float **wide;         /* per value: f32 copy of an f16 constant, else NULL */
    char *staging;
    const void **in;      /* argument staging for the widest node */
    void **out;
};

static size_t align64(size_t b) { return (b + 63) / 64 * 64; }

/* Activations the wrapper widens into staging. */
static bool staged(const qf_value *v)
{
    return !(v->flags & QF_VALUE_CONST) && (v->dtype == QF_F16 || v->dtype == QF_I8);
}

static size_t staged_bytes(const qf_value *v) { return align64((size_t)qf_value_numel(v) * sizeof(float)); }

void qfi_cpu_lowp_free(qfi_cpu_lowp *lp)
{
    if (!lp) return;
    if (lp->wide)
        for (int v = 0; v < lp->view.n_values; v++) free(lp->wide[v]);
    free(lp->wide);
    free(lp->values);
    free(lp->staging);
    free(lp->in);
    free(lp->out);
    free(lp);
}

/* Nodes whose CPU kernels move elements of any size, with no arithmetic
 * (a nearest Resize: YOLOv8n's INT8 upsamplings). */
static bool moves_elements(const qf_node *n)
{
    switch (n->op) {
    case QF_OP_RESIZE:
    case QF_OP_UPSAMPLE: return ((const qfi_resize_params *)n->params)->mode == QFI_RESIZE_NEAREST;
    case QF_OP_CONCAT:
    case QF_OP_SLICE:
    case QF_OP_SPLIT:
    case QF_OP_TRANSPOSE:
    case QF_OP_RESHAPE:
    case QF_OP_FLATTEN:
    case QF_OP_SQUEEZE:
    case QF_OP_UNSQUEEZE:
    case QF_OP_IDENTITY: return true;
    default: return false;
    }
}

bool qfi_cpu_lowp_wraps(const qf_graph *g, const qf_node *n)
{
    if (!qfi_node_f32_view(n)) return false;
    /* kernels that widen a piece at a time themselves */
    if (qfi_cpu_binary_takes_stored(g, n) || qfi_cpu_global_pool_takes_stored(g, n)) return false;
    if (!moves_elements(n)) return true;
    /* An op that only moves elements, whose f16 or int8 values (inputs and
     * outputs; its int64 parameters aside) share one stored dtype and, int8,
     * one scale and zero point, runs its kernel on the stored values:
     * widening them and rounding back gives the same bits, in three passes
     * over four-byte elements (YOLOv8n's C2f Slices and Concats, INT8 and
     * FP16 alike). */
    const qf_value *first = NULL;
    for (int k = 0; k < n->n_in + n->n_out; k++) {
        const int v = k < n->n_in ? n->in[k] : n->out[k - n->n_in];
        if (v < 0 || (k < n->n_in && k < 32 && (qfi_ops[n->op]->params >> k & 1))) continue; /* Resize's scales */
        const qf_value *x = &g->values[v];
        if (x->dtype == QF_I64 || x->dtype == QF_I32) continue;
        if (x->dtype != QF_F16 && x->dtype != QF_I8) return true;
        if (!first) first = x;
        else if (x->dtype != first->dtype || x->scale != first->scale || x->zero_point != first->zero_point)
            return true;
    }
    return false;
}

/* Whether the wrapper serves node i: one qfi_cpu_lowp_wraps names, and one of `only` when given. */
static bool served(const qf_graph *g, const bool *only, int i)
{
    return qfi_cpu_lowp_wraps(g, &g->nodes[i]) && (!only || only[i]);
}

/* Whether a served node reads value v (an FP16 constant to widen). */
static bool read_by_served(const qf_graph *g, const bool *only, int v)
{
    if (!only) return true;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] == v && served(g, only, i)) return true;
    return false;
}

qf_status qfi_cpu_lowp_create(const qf_graph *g, const bool *only, qfi_cpu_lowp **out)
{
    *out = NULL;
    size_t stage = 0;
    int width = 0;
    bool any = false;
    for (int i = 0; i < g->n_nodes; i++) {
        const qf_node *n = &g->nodes[i];
        if (!served(g, only, i)) continue;
        any = true;
        size_t need = 0;
        for (int k = 0; k < n->n_in + n->n_out; k++) {
            int v = k < n->n_in ? n->in[k] : n->out[k - n->n_in];
            if (v < 0 || !staged(&g->values[v])) continue;
            QF_ASSERT(g->values[v].dtype != QF_I8 || g->values[v].scale > 0.0f);
            need += staged_bytes(&g->values[v]);
        }
        if (need > stage) stage = need;
        if (n->n_in > width) width = n->n_in;
        if (n->n_out > width) width = n->n_out;
    }
    if (!any) return QF_OK;
    qfi_cpu_lowp *lp = qfi_calloc(1, sizeof *lp);
    if (!lp) return QF_ERR_NOMEM;
    lp->values = qfi_calloc((size_t)g->n_values + 1, sizeof *lp->values);
    lp->wide = qfi_calloc((size_t)g->n_values + 1, sizeof *lp->wide);
    lp->staging = stage ? aligned_alloc(64, stage) : NULL;
    lp->in = qfi_calloc((size_t)width + 1, sizeof *lp->in);
    lp->out = qfi_calloc((size_t)width + 1, sizeof *lp->out);
    if (!lp->values || !lp->wide || (stage && !lp->staging) || !lp->in || !lp->out) goto nomem;
    qfi_f32_view_init(g, &lp->view, lp->values);
    for (int v = 0; v < g->n_values; v++) {
        qf_value *vv = &lp->values[v];
        if (g->values[v].dtype == QF_F16 && (vv->flags & QF_VALUE_CONST) && vv->data && read_by_served(g, only, v)) {
            /* FP16 weights: widened once here, exactly */
            int64_t cnt = qf_value_numel(vv);
            float *w = malloc((size_t)(cnt ? cnt : 1) * sizeof *w);
            if (!w) goto nomem;
            qfi_cpu_f16_to_f32(vv->data, w, cnt);
            lp->wide[v] = w;
            vv->data = w;
        }
    }
    *out = lp;
    return QF_OK;
nomem:
    qfi_cpu_lowp_free(lp);
    return qfi_error_file(qf_error(QF_ERR_NOMEM, "out of memory planning the FP16/INT8 staging buffers"), g->source);
}

const qf_graph *qfi_cpu_lowp_graph(const qfi_cpu_lowp *lp, const qf_graph *g, const qf_node *n)
{
    return lp && qfi_cpu_lowp_wraps(g, n) ? &lp->view : g;
}

static void convert(const qf_value *v, const void *src, void *dst, bool widen, int threads)
{
    const qfi_cpu_stored sv = {v->dtype, v->scale, v->zero_point};
    qfi_cpu_convert(&sv, src, dst, qf_value_numel(v), widen, threads);
}

qf_status qfi_cpu_lowp_run(qfi_cpu_lowp *lp, const qfi_kernel_args *a)
{
    const qf_graph *g = a->g;
    const qf_node *n = a->n;
    char *stage = lp->staging;
    for (int k = 0; k < n->n_in; k++) {
        int v = n->in[k];
        lp->in[k] = a->in[k];
        if (v < 0) continue;
        if (lp->wide[v]) {
            lp->in[k] = lp->wide[v];
        } else if (staged(&g->values[v])) {
            convert(&g->values[v], a->in[k], stage, true, a->threads);
            lp->in[k] = stage;
            stage += staged_bytes(&g->values[v]);
        }
    }
    for (int k = 0; k < n->n_out; k++) {
        int v = n->out[k];
        lp->out[k] = a->out[k];
        if (v >= 0 && staged(&g->values[v])) {
            lp->out[k] = stage;
            stage += staged_bytes(&g->values[v]);
        }
    }
    qfi_kernel_args wa = *a;
    wa.g = &lp->view;
    wa.in = lp->in;
    wa.out = lp->out;
    QF_CHECK(qfi_cpu_kernel_of(n->op)->run(&wa));
    for (int k = 0; k < n->n_out; k++) {
        int v = n->out[k];
        if (v >= 0 && staged(&g->values[v])) convert(&g->values[v], lp->out[k], a->out[k], false, a->threads);
    }
    return QF_OK;
}
