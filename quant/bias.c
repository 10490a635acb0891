/* Bias correction (qf_bias_fix): the FP32 graph runs a batch on the CPU; as
 * each INT8 layer's input is written (quant/layer_feed.c), the layer runs
 * alone twice, on the exact input with its FP32 weight and on the input as
 * INT8 holds it with the weight as INT8 holds it, and the difference of the
 * two outputs is summed per output channel. qfi_anchor_f_make adds the means
 * to the bias. */
#include <math.h>
#include "quant_internal.h"
#include "quant_math.h"
#include "ops/nn.h"

typedef struct fix_layer {
    char *name;
    int64_t ch;
    float *w_q;        /* the weight as INT8 holds it, dequantized, in the weight's layout */
    double *sum;       /* per channel: sum of y(x, W) - y(q(x), q(W)) */
    int64_t count;     /* values summed per channel */
} fix_layer;

struct qf_bias_fix {
    qfi_layer_feed feed;
    fix_layer *layers; /* one per layer of the feed */
    float *exact;      /* one layer's exact output */
};

void qf_bias_fix_free(qf_bias_fix *b)
{
    if (!b) return;
    for (int i = 0; b->layers && i < b->feed.n; i++) {
        free(b->layers[i].name);
        free(b->layers[i].w_q);
        free(b->layers[i].sum);
    }
    free(b->layers);
    free(b->exact);
    qfi_layer_feed_free(&b->feed);
    free(b);
}

int qf_bias_fix_layers(const qf_bias_fix *b)
{
    return b ? b->feed.n : 0;
}

/* The weight of layer node n as INT8 holds it (qfi_anchor_weights_at at
 * qfi_quant_weight_scales, with the options' learned rounding), back in float.
 * (A dead channel's raised scale, qfi_quant_anchor_scales, is not applied: that
 * needs the plan's input scale, and its weights are near zero either way.) */
static qf_status dequantized_weight(const qf_graph *g, const qf_node *n, const qf_quant_opts *o, fix_layer *l)
{
    qfi_anchor_f af;
    const qf_quant_opts wo = {.adaround = o->adaround};
    QF_CHECK(qfi_anchor_f_make(g, n, -1, &wo, &af));
    const int64_t cnt = af.outer * af.ch * af.inner;
    int8_t *q = qfi_calloc((size_t)cnt + 1, 1);
    float *s = qfi_calloc((size_t)af.ch + 1, sizeof *s);
    l->w_q = qfi_calloc((size_t)cnt + 1, sizeof *l->w_q);
    l->sum = qfi_calloc((size_t)af.ch + 1, sizeof *l->sum);
    qf_status st = q && s && l->w_q && l->sum ? QF_OK : QF_ERR_NOMEM;
    if (st == QF_OK) {
        /* Gemm's alpha is folded into af.w; the node multiplies by it again */
        float alpha = n->op == QF_OP_GEMM ? ((const qfi_gemm_params *)n->params)->alpha : 1.0f;
        qfi_quant_weight_scales(af.w, af.outer, af.ch, af.inner, !o->per_tensor_weights, s);
        qfi_anchor_weights_at(&af, s, q);
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
    QF_CHECK(qfi_equalize_check_table(g, t));
    qf_bias_fix *b = qfi_calloc(1, sizeof *b);
    if (!b) return QF_ERR_NOMEM;
    qf_quant_opts fo = *o;
    fo.bias_fix = NULL; /* measured without corrections */
    qf_status st = qfi_layer_feed_init(&b->feed, g, t, &fo, threads, "bias correction");
    if (st != QF_OK) {
        free(b);
        return st;
    }
    b->layers = qfi_calloc((size_t)b->feed.n + 1, sizeof *b->layers);
    st = b->layers ? QF_OK : QF_ERR_NOMEM;
    size_t largest_out = 1;
    for (int i = 0; i < b->feed.n && st == QF_OK; i++) {
        const qf_node *n = &g->nodes[b->feed.layers[i].node];
        fix_layer *l = &b->layers[i];
        l->name = qfi_strdup(n->name);
        if (!l->name) st = QF_ERR_NOMEM;
        if (st == QF_OK) st = dequantized_weight(g, n, o, l);
        size_t out_n = (size_t)qf_value_numel(&g->values[n->out[0]]);
        if (out_n > largest_out) largest_out = out_n;
    }
    if (st == QF_OK && !(b->exact = qfi_calloc(largest_out, sizeof *b->exact))) st = QF_ERR_NOMEM;
    if (st != QF_OK) {
        qf_bias_fix_free(b);
        return st == QF_ERR_NOMEM ? qf_error(st, "bias correction: out of memory") : st;
    }
    *out = b;
    return QF_OK;
}

/* Output element i's channel and whether it belongs to a counted image: Conv
 * outputs hold channels in dim 1 (N, C, ...), Gemm and MatMul in the last. */
static void output_layout(const qf_graph *g, const qf_node *n, int images, int64_t *outer, int64_t *inner,
                          int64_t *counted)
{
    const qf_value *y = &g->values[n->out[0]];
    int axis = n->op == QF_OP_CONV ? 1 : y->ndim - 1;
    *outer = 1;
    *inner = 1;
    for (int d = 0; d < axis; d++) *outer *= y->dims[d];
    for (int d = axis + 1; d < y->ndim; d++) *inner *= y->dims[d];
    bool batched = g->batch > 0 && y->ndim >= 2 && y->dims[0] == g->batch && axis > 0;
    *counted = batched ? *outer / g->batch * images : *outer; /* leading outer rows of real images */
}

/* Runs node nd alone (weights `w`, NULL: its own) on input x; *y is the engine's output. */
static qf_status run_alone(const qfi_layer_feed *f, const qf_node *nd, const float *w, const float *x, size_t n,
                           qf_engine **e, qfi_one_node *one, const float **y)
{
    if (!qfi_one_node_init(one, f->g, nd) || one->g.n_inputs != 1)
        return qf_error(QF_ERR_UNSUPPORTED, "%s: node %s cannot run alone", f->g->source, nd->name);
    if (w) one->vals[one->in[1]].data = (void *)w;
    qf_engine_opts eo = {.device = QF_DEVICE_CPU, .threads = f->threads};
    QF_CHECK(qf_engine_create(&one->g, &eo, e));
    memcpy(qf_engine_input(*e, 0), x, n * sizeof *x);
    QF_CHECK(qf_engine_run(*e));
    *y = qf_engine_output(*e, 0);
    return QF_OK;
}

/* The feed's function: layer k runs alone on x exactly and on x_q with its
 * INT8 weight, and the differences are summed per output channel. */
static qf_status measure(void *user, int k, const float *x, const float *x_q, size_t n, int images)
{
    qf_bias_fix *b = user;
    fix_layer *l = &b->layers[k];
    const qf_graph *g = b->feed.g;
    const qf_node *nd = &g->nodes[b->feed.layers[k].node];
    int64_t outer, inner, counted;
    output_layout(g, nd, images, &outer, &inner, &counted);
    if (outer * l->ch * inner != qf_value_numel(&g->values[nd->out[0]])) return QF_OK; /* not per channel */
    qfi_one_node *one = qfi_calloc(2, sizeof *one);
    if (!one) return QF_ERR_NOMEM;
    qf_engine *e0 = NULL, *e1 = NULL;
    const float *y;
    qf_status st = run_alone(&b->feed, nd, NULL, x, n, &e0, &one[0], &y);
    if (st == QF_OK) {
        memcpy(b->exact, y, (size_t)(outer * l->ch * inner) * sizeof *y);
        st = run_alone(&b->feed, nd, l->w_q, x_q, n, &e1, &one[1], &y);
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

qf_status qf_bias_fix_run(qf_bias_fix *b, const float *input, int images)
{
    return qfi_layer_feed_run(&b->feed, input, images, measure, b);
}

void qfi_bias_fix_add(const qf_bias_fix *fix, const char *name, float *bias, int64_t ch)
{
    for (int i = 0; i < fix->feed.n; i++) {
        const fix_layer *l = &fix->layers[i];
        if (l->count == 0 || l->ch != ch || strcmp(l->name, name)) continue;
        for (int64_t c = 0; c < ch; c++) bias[c] += (float)(l->sum[c] / (double)l->count);
        return;
    }
}
