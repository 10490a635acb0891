/* The INT8 numerics every engine computes, in one header for C and CUDA
 * (under nvcc the functions are __host__ __device__): quantization, the
 * requantizing epilogue of INT8 compute ops, rounding, and the exact
 * conversion tricks of fast GPU epilogues. Each operation is one IEEE
 * rounding and nothing is fused, so the CPU and GPU engines agree bit for bit. */
#ifndef QFORGE_QUANT_MATH_H
#define QFORGE_QUANT_MATH_H

#include <stdint.h>
#include <stdbool.h>
#include <string.h>
#include <math.h>
#include "qforge/graph.h" /* qf_dtype, qf_act */

#ifdef __CUDACC__
#include <cuda_fp16.h>
#define QFI_HD __host__ __device__ __forceinline__
#else
#define QFI_HD inline
#endif

/* ---- INT8 accumulator bounds -------------------------------------------------
 * An INT8 dot product of K terms is at most K*128*127 in magnitude; with K <=
 * 65536 that is below 2^30, and a bias clamped to +-2^30 keeps accumulator +
 * bias inside int32. The quantizer clamps, kernels refuse longer reductions,
 * and the .qfm reader refuses files that break either rule. */
#define QFI_INT8_BIAS_LIMIT ((int32_t)1 << 30)
#define QFI_INT8_MAX_REDUCTION 65536

/* ---- one IEEE operation each --------------------------------------------------
 * nvcc contracts a*b + c into a fused multiply-add unless told not to, and
 * the CPU engine computes the two roundings: device code says so explicitly.
 * (C is compiled with -std=c11, whose default is -ffp-contract=off.) */
static QFI_HD float qfi_mul(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
static QFI_HD float qfi_add(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
static QFI_HD float qfi_sub(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}
static QFI_HD float qfi_div(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}
/* int32 -> float, rounded to nearest (exact below 2^24 in magnitude) */
static QFI_HD float qfi_i2f(int32_t a)
{
#ifdef __CUDA_ARCH__
    return __int2float_rn(a);
#else
    return (float)a;
#endif
}
/* v (an integer range already clamped into [-128, 127]) rounded half to
 * even, as rintf in the default rounding mode */
static QFI_HD int8_t qfi_round_i8(float v)
{
#ifdef __CUDA_ARCH__
    return (int8_t)__float2int_rn(v);
#else
    return (int8_t)__builtin_rintf(v);
#endif
}
/* IEEE binary16 bits of v, rounded to nearest even */
static QFI_HD uint16_t qfi_f16_bits(float v)
{
#ifdef __CUDA_ARCH__
    return __half_as_ushort(__float2half_rn(v));
#else
    return qf_f32_to_f16(v);
#endif
}

/* ---- float bit patterns (IEEE binary32) ---------------------------------------- */
static QFI_HD uint32_t qfi_f32_bits(float x)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(x);
#else
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
#endif
}
static QFI_HD float qfi_bits_f32(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float x;
    memcpy(&x, &u, 4);
    return x;
#endif
}

/* ---- quantization (ONNX QuantizeLinear / DequantizeLinear, zero point 0) -------
 * x / s in FP32, rounded half to even, saturated to [-128, 127]; NaN gives 0. */
static QFI_HD int8_t qfi_quantize_f32(float x, float s)
{
    float v = qfi_div(x, s);
    if (v != v) return 0;
    /* one clamp (v is not NaN here), written as each compiler makes min/max instructions of it */
#ifdef __CUDA_ARCH__
    v = fminf(fmaxf(v, -128.0f), 127.0f);
#else
    v = v < -128.0f ? -128.0f : v > 127.0f ? 127.0f : v;
#endif
    return qfi_round_i8(v);
}
static QFI_HD float qfi_dequantize_i8(int8_t q, float s) { return qfi_mul((float)q, s); }

/* ---- the requantizing epilogue ---------------------------------------------------
 * The epilogue of an INT8 compute op (Conv, Gemm, MatMul). For an int32
 * accumulator acc of output channel c and an optional residual r:
 *     v = (float)(acc + bias[c]) * m[c]            (one FP32 product, rounded)
 *     v = v + (float)r * m_r                       (residual: product, then sum)
 *     v = min(max(v, lo), hi)                      (activation and saturation)
 *     y = int8: rint(v) (ties to even); f32: v; f16: v rounded to half
 * with m[c] = s_in * s_w[c] / s_out and m_r = s_r / s_out in FP32 (s_out = 1
 * when the output is float), computed once by qfi_requant_init
 * (lib/quant_math.c). The pointers are host or device memory, whichever
 * engine runs the op. */
typedef struct qfi_requant {
    const int32_t *bias;   /* [channels] or NULL */
    const float *m;        /* [channels] */
    float m_r;             /* 0 without a residual */
    float lo, hi;          /* output units: integers in [-128, 127] for int8 */
    qf_dtype out;          /* QF_I8, QF_F16 or QF_F32 */
} qfi_requant;

#ifdef __cplusplus
extern "C" {
#endif
/* Fills rq and m[channels] for a node: input scale s_in, per-channel weight
 * scales s_w, residual scale s_r (0: none), output dtype and scale (s_out is
 * ignored for a float output), and the fused activation. The one place m,
 * m_r and the clamp bounds are computed (host code; the CUDA engine uploads m). */
void qfi_requant_init(qfi_requant *rq, float *m, int64_t channels, float s_in, const float *s_w,
                      const int32_t *bias, float s_r, qf_dtype out, float s_out, qf_act act, float act_lo,
                      float act_hi);
/* y = what INT8 makes of x at the clipping threshold amax (scale
 * qf_calib_scale(amax)): quantized and dequantized; a threshold without a
 * usable scale (below QF_CALIB_AMAX_MIN) holds zeros, as the quantizer does. */
void qfi_fake_quantize(float *y, const float *x, size_t n, float amax);

/* Applies the epilogue to n accumulators on the host; element i belongs to
 * output channel ch + i * ch_step (0 along an NCHW plane, 1 along a Gemm
 * row). `res` (int8, n elements) may be NULL; y has rq->out's dtype. */
void qfi_requantize(const qfi_requant *rq, const int32_t *acc, const int8_t *res, int64_t n, int64_t ch,
                    int64_t ch_step, void *y);
#ifdef __cplusplus
}
#endif

/* The epilogue from a = acc + bias[c] already converted to float (exactly:
 * qfi_i2f, or a GPU kernel's own exact conversion below) and the channel's
 * multiplier m; r is the residual as a float, read only when has_res. */
static QFI_HD float qfi_requant_value(const qfi_requant *rq, float a, float m, bool has_res, float r)
{
    float v = qfi_mul(a, m);
    if (has_res) v = qfi_add(v, qfi_mul(r, rq->m_r));
    return fminf(fmaxf(v, rq->lo), rq->hi);
}
/* The same from the int32 accumulator of channel c. */
static QFI_HD float qfi_requant_acc(const qfi_requant *rq, int32_t acc, int64_t c, bool has_res, float r)
{
    const int32_t a = rq->bias ? acc + rq->bias[c] : acc;
    return qfi_requant_value(rq, qfi_i2f(a), rq->m[c], has_res, r);
}
/* Stores an epilogue result as element i of y in the output dtype. */
static QFI_HD void qfi_requant_store(void *y, qf_dtype out, int64_t i, float v)
{
    switch (out) {
    case QF_I8: ((int8_t *)y)[i] = qfi_round_i8(v); break;
    case QF_F16: ((uint16_t *)y)[i] = qfi_f16_bits(v); break;
    default: ((float *)y)[i] = v;
    }
}
/* The whole epilogue of output element i: its int32 accumulator of channel c
 * and residual res[i] (res may be NULL), stored into y in rq->out's dtype. */
static QFI_HD void qfi_requant_elem(const qfi_requant *rq, void *y, int64_t i, int32_t acc, int64_t c, const int8_t *res)
{
    qfi_requant_store(y, rq->out, i, qfi_requant_acc(rq, acc, c, res != NULL, res ? (float)res[i] : 0.0f));
}

/* ---- exact conversions through the float 1.5*2^23 ---------------------------------
 * Float <-> integer conversions run at an eighth of the FP32 rate on sm_90,
 * which bounds an epilogue that needs two or three per output; these are
 * exact full-rate replacements. QFI_MAGIC = 1.5*2^23 lies in the binade
 * [2^23, 2^24), whose unit is 1, so every integer of magnitude up to 2^22 is
 * QFI_MAGIC plus itself exactly, and adding QFI_MAGIC rounds to an integer
 * (to nearest, ties to even, as rintf does). */
#define QFI_MAGIC_BITS 0x4B400000
#define QFI_MAGIC 12582912.0f
#define QFI_MAGIC_LIMIT ((int64_t)1 << 22) /* |integer| below this: exact */

/* The integer a, |a| < 2^22, as a float from the bits QFI_MAGIC_BITS + a
 * (an accumulator that started at QFI_MAGIC_BITS). */
static QFI_HD float qfi_magic_to_f32(int32_t bits) { return qfi_sub(qfi_bits_f32((uint32_t)bits), QFI_MAGIC); }
/* v in [-2^22, 2^22] rounded to an integer: the low byte of the result is
 * rint(v) as an int8 when v is in [-128, 127]. */
static QFI_HD uint32_t qfi_magic_round(float v) { return qfi_f32_bits(qfi_add(v, QFI_MAGIC)); }
/* An int8 r given as u = r ^ 0x80 (that is r + 128) in the low byte of
 * QFI_MAGIC_BITS, as the float r. */
static QFI_HD float qfi_magic_u8_to_f32(uint32_t bits) { return qfi_sub(qfi_bits_f32(bits), QFI_MAGIC + 128.0f); }

#endif
