/* The host side of the INT8 requantization epilogue (lib/quant_math.h): the
 * per-node constants every engine uses, and the loop every INT8 CPU kernel
 * runs over its accumulators. */
#include "internal.h"
#include <math.h>

void qfi_requant_init(qfi_requant *rq, float *m, int64_t channels, float s_in, const float *s_w,
                      const int32_t *bias, float s_r, int32_t z_r, qf_dtype out, float s_out, int32_t z_out,
                      qf_act act, float act_lo, float act_hi)
{
    QF_ASSERT(out == QF_I8 || out == QF_F16 || out == QF_F32);
    const bool q = out == QF_I8;
    if (!q) s_out = 1.0f, z_out = 0;
    QF_ASSERT(s_out > 0.0f && z_out >= -128 && z_out <= 127 && z_r >= -128 && z_r <= 127);
    /* FP32, in this order: the GPU computes the same two roundings */
    for (int64_t c = 0; c < channels; c++) m[c] = s_in * s_w[c] / s_out;
    rq->bias = bias;
    rq->m = m;
    rq->m_r = s_r > 0.0f ? s_r / s_out : 0.0f;
    rq->z_r = s_r > 0.0f ? z_r : 0;
    rq->z_out = z_out;
    rq->out = out;
    /* saturation, in output levels relative to the zero point */
    rq->lo = q ? (float)(-128 - z_out) : -INFINITY;
    rq->hi = q ? (float)(127 - z_out) : INFINITY;
    rq->act = QF_ACT_NONE;
    rq->act_s = s_out;
    if (qfi_act_smooth(act)) {
        rq->act = act;
    } else if (act == QF_ACT_RELU) {
        rq->lo = fmaxf(rq->lo, 0.0f);
    } else if (act == QF_ACT_CLIP) {
        /* the bounds in output units; for int8 a whole level, so clamping before
         * or after rounding gives the same result */
        float lo = q ? rintf(act_lo / s_out) : act_lo, hi = q ? rintf(act_hi / s_out) : act_hi;
        if (lo > rq->lo) rq->lo = lo;
        if (hi < rq->hi) rq->hi = hi;
    }
    if (rq->hi < rq->lo) rq->hi = rq->lo; /* an empty range clips everything to lo, as Clip does */
}

void qfi_requantize(const qfi_requant *rq, const int32_t *acc, const int8_t *res, int64_t n, int64_t ch,
                    int64_t ch_step, void *y)
{
    const qfi_requant q = *rq; /* a local copy: the stores to y cannot alias it, so the loop is unswitched */
    QF_ASSERT(q.out == QF_I8 || q.out == QF_F16 || q.out == QF_F32);
    for (int64_t i = 0; i < n; i++)
        qfi_requant_elem(&q, y, i, acc[i], ch + i * ch_step, res);
}

void qfi_fake_quantize(float *y, const float *x, size_t n, float amax)
{
    if (!(amax >= QF_CALIB_AMAX_MIN)) {
        memset(y, 0, n * sizeof *y);
        return;
    }
    qfi_fake_quantize_zp(y, x, n, qf_calib_scale(amax), 0);
}

/* The calibration passes quantize every activation at several thresholds:
 * vectorized (one IEEE division, rounding and product per element, as the scalar loop) */
QFI_SIMD_CLONES void qfi_fake_quantize_zp(float *y, const float *x, size_t n, float scale, int32_t zero_point)
{
    for (size_t i = 0; i < n; i++)
        y[i] = qfi_dequantize_i8_zp(qfi_quantize_f32_zp(x[i], scale, zero_point), scale, zero_point);
}
