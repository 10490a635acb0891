/* Weight and bias quantization: an anchor's float weights and per-channel bias
 * as quantization reads them, symmetric INT8 weights per output channel (or per
 * tensor), INT32 biases in the accumulator's units. */
#include <float.h>
#include <math.h>
#include "quant_internal.h"
#include "ops/nn.h"

void qfi_anchor_f_free(qfi_anchor_f *a)
{
    free(a->w);
    free(a->bias);
    memset(a, 0, sizeof *a);
}

qf_status qfi_anchor_f_make(const qf_graph *g, const qf_node *n, int bias_add, const qf_quant_opts *o,
                            qfi_anchor_f *a)
{
    memset(a, 0, sizeof *a);
    const qf_value *W = qfi_in(g, n, 1);
    qfi_ops[n->op]->weight_layout(g, n, &a->outer, &a->ch, &a->inner);
    float alpha = 1.0f, beta = 1.0f;
    if (n->op == QF_OP_GEMM) {
        alpha = ((const qfi_gemm_params *)n->params)->alpha;
        beta = ((const qfi_gemm_params *)n->params)->beta;
    }
    const int64_t cnt = qf_value_numel(W);
    a->w = qfi_calloc((size_t)cnt + 1, sizeof *a->w);
    a->bias = qfi_calloc((size_t)a->ch + 1, sizeof *a->bias);
    if (!a->w || !a->bias) {
        qfi_anchor_f_free(a);
        return QF_ERR_NOMEM;
    }
    const float *wf = W->data;
    for (int64_t i = 0; i < cnt; i++) {
        a->w[i] = alpha * wf[i]; /* Gemm's alpha folds into the weights */
        if (!isfinite(a->w[i])) {
            qfi_anchor_f_free(a);
            return qfi_error_node(qf_error(QF_ERR_INVALID, "weight %s holds NaN or Inf", W->name), g, n);
        }
    }
    int bv = n->n_in > 2 ? n->in[2] : -1;
    for (int k = 0; k < 2; k++) {
        int v = k == 0 ? bv : bias_add;
        if (v < 0) continue;
        const float *b = g->values[v].data;
        bool one = qf_value_numel(&g->values[v]) == 1;
        float f = k == 0 && n->op == QF_OP_GEMM ? beta : 1.0f;
        for (int64_t c = 0; c < a->ch; c++) a->bias[c] += f * b[one ? 0 : c];
    }
    if (o && o->bias_fix) qfi_bias_fix_add(o->bias_fix, n->name, a->bias, a->ch);
    if (o && o->adaround) qfi_adaround_find(o->adaround, n->name, cnt, a->ch, &a->learned, &a->learned_s);
    return QF_OK;
}

void qfi_anchor_weights_at(const qfi_anchor_f *a, const float *s, int8_t *q)
{
    qfi_quant_weights_at(a->w, a->outer, a->ch, a->inner, s, q);
    if (!a->learned) return;
    for (int64_t c = 0; c < a->ch; c++) {
        if (a->learned_s[c] != s[c]) continue; /* a scale raised for the bias: rounded to nearest at it */
        for (int64_t o = 0; o < a->outer; o++) {
            const int64_t at = (o * a->ch + c) * a->inner;
            memcpy(q + at, a->learned + at, (size_t)a->inner);
        }
    }
}

void qfi_quant_weight_scales(const float *w, int64_t outer, int64_t channels, int64_t inner, bool per_channel,
                             float *s)
{
    /* w is (outer, channels, inner) */
    for (int64_t c = 0; c < channels; c++) s[c] = 0.0f;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t c = 0; c < channels; c++) {
            const float *wc = w + (o * channels + c) * inner;
            for (int64_t i = 0; i < inner; i++)
                if (fabsf(wc[i]) > s[c]) s[c] = fabsf(wc[i]);
        }
    if (!per_channel) {
        float amax = 0.0f;
        for (int64_t c = 0; c < channels; c++)
            if (s[c] > amax) amax = s[c];
        for (int64_t c = 0; c < channels; c++) s[c] = amax;
    }
    for (int64_t c = 0; c < channels; c++) s[c] = qf_calib_scale(s[c]);
}

void qfi_quant_weights_at(const float *w, int64_t outer, int64_t channels, int64_t inner, const float *s, int8_t *q)
{
    for (int64_t o = 0; o < outer; o++)
        for (int64_t c = 0; c < channels; c++) {
            int64_t at = (o * channels + c) * inner;
            for (int64_t i = 0; i < inner; i++) q[at + i] = qfi_quantize_f32(w[at + i], s[c]);
        }
}

void qfi_quant_weights(const float *w, int64_t outer, int64_t channels, int64_t inner, bool per_channel, int8_t *q,
                       float *s)
{
    qfi_quant_weight_scales(w, outer, channels, inner, per_channel, s);
    qfi_quant_weights_at(w, outer, channels, inner, s, q);
}

/* bias / (s_in * s_w) rounded half to even; NaN for 0 / 0. */
static double bias_steps(float bias, float s_in, float s_w)
{
    float s = s_in * s_w;
    return rint((double)bias / (double)s);
}

int32_t qfi_quant_bias(float bias, float s_in, float s_w)
{
    const double lim = QFI_INT8_BIAS_LIMIT;
    double v = bias_steps(bias, s_in, s_w);
    if (!(v == v)) return 0;
    return (int32_t)(v < -lim ? -lim : v > lim ? lim : v);
}

/* Whether `bias` is at most `limit` steps of s_in * s_w. */
static bool bias_within(float bias, float s_in, float s_w, double limit)
{
    return !(fabs(bias_steps(bias, s_in, s_w)) > limit);
}

bool qfi_quant_bias_fits(float bias, float s_in, float s_w)
{
    return bias_within(bias, s_in, s_w, QFI_INT8_BIAS_LIMIT);
}

/* The smallest FP32 scale >= s_w at which `bias` is at most `limit` steps of
 * s_in * scale, or 0 where none is (a NaN or infinite bias, or one that would
 * need a scale beyond FP32). The estimate |bias| / (s_in limit) is stepped up
 * an ulp at a time past the rounding of the product. */
static float bias_fitting_scale(float bias, float s_in, float s_w, double limit)
{
    if (bias_within(bias, s_in, s_w, limit)) return s_w;
    const double want = fabs((double)bias) / ((double)s_in * limit);
    if (!(want < FLT_MAX)) return 0.0f;
    float s = fmaxf((float)want, s_w);
    for (int k = 0; k < 64 && isfinite(s); k++, s = nextafterf(s, INFINITY))
        if (bias_within(bias, s_in, s, limit)) return s;
    return 0.0f;
}

int64_t qfi_quant_anchor_scales(const qfi_anchor_f *a, float s_in, int32_t z_in, bool per_channel, float *s,
                                int64_t *bad)
{
    qfi_quant_weight_scales(a->w, a->outer, a->ch, a->inner, per_channel, s);
    /* an input zero point adds -z_in times the channel's int8 weight sum to the
     * bias: a raised scale leaves room for the largest such sum */
    const double limit = QFI_INT8_BIAS_LIMIT - fabs((double)z_in) * 127.0 * (double)(a->outer * a->inner);
    int64_t raised = 0;
    float shared = a->ch > 0 ? s[0] : 0.0f; /* per tensor: one scale for every channel, raised for the largest need */
    for (int64_t c = 0; c < a->ch; c++) {
        const float f = bias_fitting_scale(a->bias[c], s_in, per_channel ? s[c] : shared, limit);
        if (f == 0.0f) {
            *bad = c;
            return -1;
        }
        if (!per_channel) shared = f;
        else if (f != s[c]) {
            s[c] = f;
            raised++;
        }
    }
    if (!per_channel && a->ch > 0 && shared != s[0]) {
        for (int64_t c = 0; c < a->ch; c++) s[c] = shared;
        raised = a->ch;
    }
    return raised;
}

bool qfi_quant_bias_zp(float bias, float s_in, float s_w, int32_t z_in, int64_t wsum, int32_t *out)
{
    const int64_t lim = QFI_INT8_BIAS_LIMIT;
    const int64_t q = (int64_t)qfi_quant_bias(bias, s_in, s_w) - (int64_t)z_in * wsum;
    *out = (int32_t)(q < -lim ? -lim : q > lim ? lim : q);
    return qfi_quant_bias_fits(bias, s_in, s_w) && q >= -lim && q <= lim;
}

int64_t qfi_quant_anchor_biases(const qfi_anchor_f *a, float s_in, const float *s, int32_t z_in, const int8_t *wq,
                                int32_t *bq)
{
    int64_t bad = -1;
    for (int64_t c = 0; c < a->ch; c++) {
        const int64_t wsum = z_in ? qfi_int8_weight_sum(wq, a->outer, a->ch, a->inner, c) : 0;
        if (!qfi_quant_bias_zp(a->bias[c], s_in, s[c], z_in, wsum, &bq[c]) && bad < 0) bad = c;
    }
    return bad;
}

int64_t qfi_int8_weight_sum(const int8_t *w, int64_t outer, int64_t channels, int64_t inner, int64_t c)
{
    int64_t sum = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t k = 0; k < inner; k++) sum += w[(o * channels + c) * inner + k];
    return sum;
}
