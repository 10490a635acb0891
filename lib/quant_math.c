/* The INT8 requantization epilogue shared by every INT8 CPU kernel (and
 * specified for the CUDA engine): per-channel multipliers, residual term,
 * fused activation, saturation and rounding, exactly as lib/internal.h states. */
#include "internal.h"
#include <math.h>

void qfi_requant_init(qfi_requant *rq, float *m, int64_t channels, float s_in, const float *s_w,
                      const int32_t *bias, float s_r, qf_dtype out, float s_out, qf_act act, float act_lo,
                      float act_hi)
{
    QF_ASSERT(out == QF_I8 || out == QF_F16 || out == QF_F32);
    const bool q = out == QF_I8;
    if (!q) s_out = 1.0f;
    QF_ASSERT(s_out > 0.0f);
    /* FP32, in this order: the GPU computes the same two roundings */
    for (int64_t c = 0; c < channels; c++) m[c] = s_in * s_w[c] / s_out;
    rq->bias = bias;
    rq->m = m;
    rq->m_r = s_r > 0.0f ? s_r / s_out : 0.0f;
    rq->out = out;
    rq->lo = q ? -128.0f : -INFINITY;
    rq->hi = q ? 127.0f : INFINITY;
    if (act == QF_ACT_RELU) {
        rq->lo = 0.0f;
    } else if (act == QF_ACT_CLIP) {
        /* the bounds in output units; for int8 a whole level, so clamping before
         * or after rounding gives the same result */
        float lo = q ? rintf(act_lo / s_out) : act_lo, hi = q ? rintf(act_hi / s_out) : act_hi;
        if (lo > rq->lo) rq->lo = lo;
        if (hi < rq->hi) rq->hi = hi;
        if (rq->hi < rq->lo) rq->hi = rq->lo; /* an empty range clips everything to lo, as Clip does */
    }
}

/* One element; see the formula in lib/internal.h. */
static inline float epilogue(const qfi_requant *rq, int32_t acc, int64_t c, const int8_t *res, int64_t i)
{
    int32_t a = rq->bias ? acc + rq->bias[c] : acc;
    float v = (float)a * rq->m[c];
    if (res) {
        float r = (float)res[i] * rq->m_r;
        v = v + r;
    }
    return fminf(fmaxf(v, rq->lo), rq->hi);
}

void qfi_requantize(const qfi_requant *rq, const int32_t *acc, const int8_t *res, int64_t n, int64_t ch,
                    int64_t ch_step, void *y)
{
    switch (rq->out) {
    case QF_I8: {
        int8_t *yq = y;
        for (int64_t i = 0; i < n; i++) yq[i] = (int8_t)rintf(epilogue(rq, acc[i], ch + i * ch_step, res, i));
        break;
    }
    case QF_F32: {
        float *yf = y;
        for (int64_t i = 0; i < n; i++) yf[i] = epilogue(rq, acc[i], ch + i * ch_step, res, i);
        break;
    }
    case QF_F16: {
        uint16_t *yh = y;
        for (int64_t i = 0; i < n; i++) yh[i] = qf_f32_to_f16(epilogue(rq, acc[i], ch + i * ch_step, res, i));
        break;
    }
    default: QF_ASSERT(!"requantize to a dtype other than i8, f16, f32");
    }
}
