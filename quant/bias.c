/* Bias correction (qf_bias_fix): the FP32 graph runs a batch on the CPU; as
 * each layer's input is written, the layer runs alone twice, on the exact
 * input with its FP32 weight and on the input as INT8 holds it with the
 * weight as INT8 holds it, and the difference of the two outputs is summed
 * per output channel. qfi_anchor_f_make adds the means to the bias. */
#include <math.h>
#include "quant_internal.h"
#include "quant_math.h"
#include "ops/nn.h"

typedef struct fix_layer {
    int node;          /* in the graph measured */
    char *name;
    int64_t ch;
    float *w_q;        /* the weight as INT8 holds it, dequantized, in the weight's layout */
    double *sum;       /* per channel: sum of y(x, W) - y(q(x), q(W)) */
    int64_t count;     /* values summed per channel */
} fix_layer;

struct qf_bias_fix {
    const qf_graph *g;
    const qf_calib_table *t;
    qf_calib_method method;
    bool asymmetric;   /* the plan gives one-sided inputs zero points (range: their bounds) */
    qfi_range *range;
    int threads;
    int images;        /* real images of the batch being run */
    int n;
    fix_layer *layers;
    float *x_q;        /* one input quantized */
    float *exact;      /* one layer's exact output */
    qf_status st;      /* the first failure inside the observer, and its message */
    char msg[1024];
};

void qf_bias_fix_free(qf_bias_fix *b)
{
    if (!b) return;
    for (int i = 0; i < b->n; i++) {
        free(b->layers[i].name);
        free(b->layers[i].w_q);
        free(b->layers[i].sum);
    }
    free(b->layers);
    free(b->range);
    free(b->x_q);
    free(b->exact);
    free(b);
}

int qf_bias_fix_layers(const qf_bias_fix *b)
{
    return b ? b->n : 0;
}

/* The weight of layer node n as INT8 holds it (qfi_quant_weights), back in float.
 * (A dead channel's raised scale, qfi_quant_anchor_scales, is not applied: that
 * needs the plan's input scale, and its weights are near zero either way.) */
static qf_status dequantized_weight(const qf_graph *g, const qf_node *n, bool per_channel, fix_layer *l)
{
    qfi_anchor_f af;
    QF_CHECK(qfi_anchor_f_make(g, n, -1, NULL, &af));
    const int64_t cnt = af.outer * af.ch * af.inner;
    int8_t *q = qfi_calloc((size_t)cnt + 1, 1);
    float *s = qfi_calloc((size_t)af.ch + 1, sizeof *s);
    l->w_q = qfi_calloc((size_t)cnt + 1, sizeof *l->w_q);
    l->sum = qfi_calloc((size_t)af.ch + 1, sizeof *l->sum);
    qf_status st = q && s && l->w_q && l->sum ? QF_OK : QF_ERR_NOMEM;
    if (st == QF_OK) {
        /* Gemm's alpha is folded into af.w; the node multiplies by it again */
        float alpha = n->op == QF_OP_GEMM ? ((const qfi_gemm_params *)n->params)->alpha : 1.0f;
        qfi_quant_weights(af.w, af.outer, af.ch, af.inner, per_channel, q, s);
        for (int64_t o = 0; o < af.outer; o++)
            for (int64_t c = 0; c < af.ch; c++)
                for (int64_t i = 0; i < af.inner; i++) {
                    int64_t at = (o * af.ch + c) * af.inner + i;
                    l->w_q[at] = qfi_dequantize_i8(q[at], s[c]) / alpha;
                }
        l->ch = af.ch;
    }
    free(q);
    free(s);
    qfi_anchor_f_free(&af);
    return st;
}

qf_status qf_bias_fix_create(const qf_graph *g, const qf_calib_table *t, const qf_quant_opts *o, int threads,
                             qf_bias_fix **out)
{
    *out = NULL;
    qf_bias_fix *b = qfi_calloc(1, sizeof *b);
    if (!b) return QF_ERR_NOMEM;
    b->g = g;
    b->t = t;
    b->threads = threads;
    b->method = o->method == QF_CALIB_METHOD_COUNT ? qf_calib_table_default_method(t) : o->method;
    b->asymmetric = o->asymmetric;
    b->layers = qfi_calloc((size_t)g->n_nodes + 1, sizeof *b->layers);
    qf_status st = b->layers ? QF_OK : QF_ERR_NOMEM;
    if (st == QF_OK && b->asymmetric) st = qfi_value_ranges(g, &b->range);
    size_t largest_in = 1, largest_out = 1;
    for (int i = 0; i < g->n_nodes && st == QF_OK; i++) {
        const qf_node *n = &g->nodes[i];
        if (!qfi_int8_layer(g, n) || qf_calib_table_find(t, g->values[n->in[0]].name) < 0) continue;
        fix_layer *l = &b->layers[b->n++];
        l->node = i;
        l->name = qfi_strdup(n->name);
        if (!l->name) st = QF_ERR_NOMEM;
        if (st == QF_OK) st = dequantized_weight(g, n, !o->per_tensor_weights, l);
        size_t in_n = (size_t)qf_value_numel(&g->values[n->in[0]]), out_n = (size_t)qf_value_numel(&g->values[n->out[0]]);
        if (in_n > largest_in) largest_in = in_n;
        if (out_n > largest_out) largest_out = out_n;
    }
    if (st == QF_OK) {
        b->x_q = qfi_calloc(largest_in, sizeof *b->x_q);
        b->exact = qfi_calloc(largest_out, sizeof *b->exact);
        if (!b->x_q || !b->exact) st = QF_ERR_NOMEM;
    }
    if (st != QF_OK) {
        qf_bias_fix_free(b);
        return st == QF_ERR_NOMEM ? qf_error(st, "bias correction: out of memory") : st;
    }
    *out = b;
    return QF_OK;
}

/* Output element i's channel and whether it belongs to a counted image: Conv
 * outputs hold channels in dim 1 (N, C, ...), Gemm and MatMul in the last. */
static void output_layout(const qf_bias_fix *b, const qf_node *n, int64_t *outer, int64_t *inner, int64_t *counted)
{
    const qf_value *y = &b->g->values[n->out[0]];
    int axis = n->op == QF_OP_CONV ? 1 : y->ndim - 1;
    *outer = 1;
    *inner = 1;
    for (int d = 0; d < axis; d++) *outer *= y->dims[d];
    for (int d = axis + 1; d < y->ndim; d++) *inner *= y->dims[d];
    bool batched = b->g->batch > 0 && y->ndim >= 2 && y->dims[0] == b->g->batch && axis > 0;
    *counted = batched ? *outer / b->g->batch * b->images : *outer; /* leading outer rows of real images */
}

/* Runs layer l alone (weights `w`, NULL: its own) on input x; *y is the engine's output. */
static qf_status run_alone(qf_bias_fix *b, const fix_layer *l, const float *w, const float *x, size_t n,
                           qf_engine **e, qfi_one_node *one, const float **y)
{
    const qf_node *nd = &b->g->nodes[l->node];
    if (!qfi_one_node_init(one, b->g, nd) || one->g.n_inputs != 1)
        return qf_error(QF_ERR_UNSUPPORTED, "%s: node %s cannot run alone", b->g->source, nd->name);
    if (w) one->vals[one->in[1]].data = (void *)w;
    qf_engine_opts eo = {.device = QF_DEVICE_CPU, .threads = b->threads};
    QF_CHECK(qf_engine_create(&one->g, &eo, e));
    memcpy(qf_engine_input(*e, 0), x, n * sizeof *x);
    QF_CHECK(qf_engine_run(*e));
    *y = qf_engine_output(*e, 0);
    return QF_OK;
}

static qf_status measure(qf_bias_fix *b, fix_layer *l, const float *x, size_t n, float amax, float lo)
{
    const qf_node *nd = &b->g->nodes[l->node];
    int64_t outer, inner, counted;
    output_layout(b, nd, &outer, &inner, &counted);
    if (outer * l->ch * inner != qf_value_numel(&b->g->values[nd->out[0]])) return QF_OK; /* not per channel */
    qfi_one_node *one = qfi_calloc(2, sizeof *one);
    if (!one) return QF_ERR_NOMEM;
    qf_engine *e0 = NULL, *e1 = NULL;
    const float *y;
    qf_status st = run_alone(b, l, NULL, x, n, &e0, &one[0], &y);
    if (st == QF_OK) {
        memcpy(b->exact, y, (size_t)(outer * l->ch * inner) * sizeof *y);
        float scale;
        int32_t zero_point;
        qfi_quant_act_params(amax, lo, b->asymmetric, &scale, &zero_point);
        if (amax >= QF_CALIB_AMAX_MIN)
            qfi_fake_quantize_zp(b->x_q, x, n, scale, zero_point);
        else
            qfi_fake_quantize(b->x_q, x, n, amax); /* zeros, as the plan holds it */
        st = run_alone(b, l, l->w_q, b->x_q, n, &e1, &one[1], &y);
    }
    for (int64_t o = 0; o < counted && st == QF_OK; o++)
        for (int64_t c = 0; c < l->ch; c++) {
            const int64_t at = (o * l->ch + c) * inner;
            double s = 0.0;
            for (int64_t i = 0; i < inner; i++) s += (double)b->exact[at + i] - (double)y[at + i];
            l->sum[c] += s;
        }
    if (st == QF_OK) l->count += counted * inner;
    qf_engine_free(e0);
    qf_engine_free(e1);
    free(one);
    return st;
}

static void observe(void *user, const qf_graph *g, int v, const void *data)
{
    qf_bias_fix *b = user;
    if (b->st != QF_OK) return;
    for (int i = 0; i < b->n; i++) {
        fix_layer *l = &b->layers[i];
        if (g->nodes[l->node].in[0] != v) continue;
        float amax;
        int e = qf_calib_table_find(b->t, g->values[v].name);
        qf_status st = qf_calib_table_amax(b->t, e, b->method, &amax);
        if (st == QF_OK)
            st = measure(b, l, data, (size_t)qf_value_numel(&g->values[v]), amax, b->range ? b->range[v].lo : -INFINITY);
        if (st != QF_OK) {
            b->st = st;
            snprintf(b->msg, sizeof b->msg, "%s", qf_error_message());
            return;
        }
    }
}

qf_status qf_bias_fix_run(qf_bias_fix *b, const float *input, int images)
{
    const qf_graph *g = b->g;
    b->images = images > 0 && images < g->batch ? images : g->batch;
    qf_status st = qfi_run_observed(g, b->threads, input, observe, b);
    if (st == QF_OK && b->st != QF_OK) st = qf_error(b->st, "bias correction: %s", b->msg);
    return st;
}

void qfi_bias_fix_add(const qf_bias_fix *fix, const char *name, float *bias, int64_t ch)
{
    for (int i = 0; i < fix->n; i++) {
        const fix_layer *l = &fix->layers[i];
        if (l->count == 0 || l->ch != ch || strcmp(l->name, name)) continue;
        for (int64_t c = 0; c < ch; c++) bias[c] += (float)(l->sum[c] / (double)l->count);
        return;
    }
}
