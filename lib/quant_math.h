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
#include "float_math.h" /* QFI_HD, the single IEEE operations, sigmoid */

#ifdef __CUDACC__
#include <cuda_fp16.h>
#endif

/* ---- INT8 accumulator bounds -------------------------------------------------
 * An INT8 dot product of K terms is at most K*128*127 in magnitude; with K <=
 * 65536 that is below 2^30, and a bias clamped to +-2^30 keeps accumulator +
 * bias inside int32. The quantizer clamps, kernels refuse longer reductions,
 * and the .qfm reader refuses files that break either rule. */
#define QFI_INT8_BIAS_LIMIT ((int32_t)1 << 30)
#define QFI_INT8_MAX_REDUCTION 65536

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
/* The same for v in [-255, 255] (levels relative to a zero point) */
static QFI_HD int32_t qfi_round_i32(float v)
{
#ifdef __CUDA_ARCH__
    return __float2int_rn(v);
#else
    return (int32_t)__builtin_rintf(v);
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

/* ---- quantization (ONNX QuantizeLinear / DequantizeLinear) -----------------------
 * Into int8 with zero point z in [-128, 127]: x / s in FP32, rounded half to
 * even, plus z, saturated to [-128, 127]; NaN gives z (the level of 0).
 * uint8 models are stored shifted by -128 (q - 128, z - 128), which this
 * computes exactly. */
static QFI_HD int8_t qfi_quantize_f32_zp(float x, float s, int32_t z)
{
    float v = qfi_div(x, s);
    v = v == v ? v : 0.0f; /* NaN: the level of 0 (a select, not a branch: loops of it vectorize) */
    /* the saturation bounds, relative to z, are whole levels: clamping before
     * rounding is the same as after; one clamp (v is not NaN here), written as
     * each compiler makes min/max instructions of it */
    const float lo = (float)(-128 - z), hi = (float)(127 - z);
#ifdef __CUDA_ARCH__
    v = fminf(fmaxf(v, lo), hi);
#else
    v = v < lo ? lo : v > hi ? hi : v;
#endif
    return (int8_t)(qfi_round_i32(v) + z);
}
/* Zero point 0: symmetric INT8. */
static QFI_HD int8_t qfi_quantize_f32(float x, float s) { return qfi_quantize_f32_zp(x, s, 0); }
/* The same level from a product by r = 1/s (rounded to float) where that
 * is safe: x r lies within 3 x 2^-24 |q| of fl(x / s) (r's rounding and the
 * product's, q = x / s exactly, against the quotient's one), so both round
 * to the same integer unless x r is that close to a half-integer; then the
 * division decides (a few elements in 10^6). An IEEE division is most of a
 * memory-bound quantizing pass's instructions (the SE gate's Mul). r = 0
 * (1/s not a normal float) takes the division. test_int8_cpu compares the
 * two. */
static QFI_HD int8_t qfi_quantize_f32_zp_fast(float x, float s, float r, int32_t z)
{
    const float p = qfi_mul(x, r);
#ifdef __CUDA_ARCH__
    const float frac = fabsf(p - rintf(p)), ap = fabsf(p);
#else
    const float frac = __builtin_fabsf(p - __builtin_rintf(p)), ap = __builtin_fabsf(p);
#endif
    if (r == 0.0f || !(frac < 0.5f - ap * 2.5e-7f)) return qfi_quantize_f32_zp(x, s, z);
    /* p is finite here: no NaN to map */
    const float lo = (float)(-128 - z), hi = (float)(127 - z);
    const float v = p < lo ? lo : p > hi ? hi : p;
    return (int8_t)(qfi_round_i32(v) + z);
}
/* (q - z) exactly, then one FP32 product. */
static QFI_HD float qfi_dequantize_i8_zp(int8_t q, float s, int32_t z) { return qfi_mul((float)((int32_t)q - z), s); }
static QFI_HD float qfi_dequantize_i8(int8_t q, float s) { return qfi_dequantize_i8_zp(q, s, 0); }

/* ---- the requantizing epilogue ---------------------------------------------------
 * The epilogue of an INT8 compute op (Conv, Gemm, MatMul). For an int32
 * accumulator acc of output channel c and an optional residual r:
 *     v = (float)(acc + bias[c]) * m[c]            (one FP32 product, rounded)
 *     v = v + (float)(r - z_r) * m_r               (residual: product, then sum)
 *     v = act(v)                                   (Sigmoid, SiLU, HardSwish: qfi_act_value)
 *     v = min(max(v, lo), hi)                      (Relu, Clip and saturation)
 *     y = int8: rint(v) (ties to even) + z_out; f32: v; f16: v rounded to half
 * with m[c] = s_in * s_w[c] / s_out and m_r = s_r / s_out in FP32 (s_out = 1
 * when the output is float), computed once by qfi_requant_init
 * (lib/quant_math.c). z_r and z_out are the zero points of the residual and
 * of an int8 output: 0, except in models imported with asymmetric (uint8)
 * activations; lo and hi are relative to z_out. The accumulator counts the
 * input as stored, so an input zero point z_in lives in the bias (bias[c]
 * already holds -z_in times the sum of channel c's weights) and in the
 * padding, which holds z_in. The pointers are host or device memory,
 * whichever engine runs the op. */
typedef struct qfi_requant {
    const int32_t *bias;   /* [channels] or NULL */
    const float *m;        /* [channels] */
    float m_r;             /* 0 without a residual */
    float lo, hi;          /* output units relative to z_out: integers in [-128 - z_out, 127 - z_out] for int8 */
    qf_dtype out;          /* QF_I8, QF_F16 or QF_F32 */
    int32_t z_r, z_out;    /* zero points of the residual and of an int8 output */
    /* QF_ACT_SIGMOID, SILU or HARD_SWISH: applied before the clamp, at the
     * real value v * act_s (act_s: the int8 output's scale, else 1);
     * QF_ACT_NONE otherwise (Relu and Clip are lo and hi) */
    qf_act act;
    float act_s;
} qfi_requant;

#ifdef __cplusplus
extern "C" {
#endif
/* Fills rq and m[channels] for a node: input scale s_in, per-channel weight
 * scales s_w, residual scale and zero point s_r, z_r (s_r 0: none), output
 * dtype, scale and zero point (s_out and z_out are ignored for a float
 * output), and the fused activation. The one place m, m_r and the clamp
 * bounds are computed (host code; the CUDA engine uploads m). */
void qfi_requant_init(qfi_requant *rq, float *m, int64_t channels, float s_in, const float *s_w,
                      const int32_t *bias, float s_r, int32_t z_r, qf_dtype out, float s_out, int32_t z_out,
                      qf_act act, float act_lo, float act_hi);
/* y = what INT8 makes of x at the clipping threshold amax (scale
 * qf_calib_scale(amax)): quantized and dequantized; a threshold without a
 * usable scale (below QF_CALIB_AMAX_MIN) holds zeros, as the quantizer does. */
void qfi_fake_quantize(float *y, const float *x, size_t n, float amax);
/* The same at a scale and zero point (an asymmetric activation's). */
void qfi_fake_quantize_zp(float *y, const float *x, size_t n, float scale, int32_t zero_point);
/* The INT8 scale and zero point of an activation with threshold amax whose
 * values lie at or above lo (lib/value_ranges.c). Symmetric, amax / 127 and 0
 * (qf_calib_scale), unless `asymmetric` and lo > -amax: then [min(lo, 0), amax]
 * spans all 256 levels, scale (amax - lo) / 255 and zero point
 * -128 - round(lo / scale), in [-128, 0]: a Relu output gets twice symmetric
 * INT8's resolution. */
void qfi_quant_act_params(float amax, float lo, bool asymmetric, float *scale, int32_t *zero_point);
/* The lo that qfi_quant_act_params is given for an activation with threshold
 * amax: the graph's bound graph_lo where it is above -amax; else, where the
 * graph leaves the tensor two-sided, the smallest value calibration saw
 * (data_min; NAN: none known) if that is above -amax; else graph_lo. */
float qfi_quant_act_lo(float graph_lo, float data_min, float amax);

/* Applies the epilogue to n accumulators on the host; element i belongs to
 * output channel ch + i * ch_step (0 along an NCHW plane, 1 along a Gemm
 * row). `res` (int8, n elements) may be NULL; y has rq->out's dtype. */
void qfi_requantize(const qfi_requant *rq, const int32_t *acc, const int8_t *res, int64_t n, int64_t ch,
                    int64_t ch_step, void *y);
#ifdef __cplusplus
}
#endif

/* Whether act is a smooth activation (applied by qfi_act_value), not a clamp. */
static QFI_HD bool qfi_act_smooth(qf_act act)
{
    return act == QF_ACT_SIGMOID || act == QF_ACT_SILU || act == QF_ACT_HARD_SWISH || act == QF_ACT_GELU ||
           act == QF_ACT_GELU_TANH;
}

/* A smooth fused activation of v in output units (real value x = v s):
 * Sigmoid n / (d s) with sigmoid(x) = n / d (qfi_sigmoid_parts), SiLU
 * v sigmoid(x), HardSwish v HardSigmoid(x), GELU gelu(x) / s (the Gelu op's
 * arithmetic, lib/float_math.h); with s = 1 (a float output) exactly what
 * the unfused ops compute. One e^x and one division at most: GPU kernels
 * unroll their epilogues over many elements. Other kinds leave v as it is. */
/* gelu: whether GELU's code is compiled in; a kernel passes a compile-time
 * false only where its host side made sure act is no GELU (the implicit
 * GEMM: its smooth instances serve SiLU and HardSwish layers, which GELU's
 * code slowed by 8-19 %). */
static QFI_HD float qfi_act_value_kinds(qf_act act, float v, float s, bool gelu)
{
    if (!qfi_act_smooth(act)) return v;
    const float x = qfi_mul(v, s);
    if (gelu && (act == QF_ACT_GELU || act == QF_ACT_GELU_TANH)) return qfi_div(qfi_gelu(x, act == QF_ACT_GELU_TANH), s);
    if (act == QF_ACT_HARD_SWISH) return qfi_mul(v, qfi_hard_sigmoid(x, 1.0f / 6.0f, 0.5f));
    float d;
    const float n = qfi_sigmoid_parts(x, &d);
    return act == QF_ACT_SIGMOID ? qfi_div(n, qfi_mul(d, s)) : qfi_mul(v, qfi_div(n, d));
}
static QFI_HD float qfi_act_value(qf_act act, float v, float s) { return qfi_act_value_kinds(act, v, s, true); }

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
/* The same plus a zero point z, as integers (adding z to v before rounding
 * would move ties to even for odd z): the low byte is rint(v) + z, the
 * stored level of an epilogue result v relative to z (qfi_requant_level). */
static QFI_HD uint32_t qfi_magic_round_zp(float v, int32_t z) { return qfi_magic_round(v) + (uint32_t)z; }
/* An int8 r given as u = r ^ 0x80 (that is r + 128) in the low byte of
 * QFI_MAGIC_BITS, as the float r - z (exactly: the subtrahend
 * QFI_MAGIC + 128 + z is an integer of QFI_MAGIC's binade). */
static QFI_HD float qfi_magic_u8_to_f32_zp(uint32_t bits, int32_t z)
{
    return qfi_sub(qfi_bits_f32(bits), QFI_MAGIC + (float)(128 + z));
}
static QFI_HD float qfi_magic_u8_to_f32(uint32_t bits) { return qfi_magic_u8_to_f32_zp(bits, 0); }
#ifdef __CUDACC__
/* Byte b (0-3) of a word of int8 levels r stored biased (r ^ 0x80, that is
 * r + 128), as the float r - z: the byte under QFI_MAGIC_BITS' upper bytes
 * (one byte permute), then qfi_magic_u8_to_f32_zp. What an integer
 * conversion gives, at the FP32 rate: the GEMM epilogues' residual bytes,
 * attention's int8 operands. */
static __device__ __forceinline__ float qfi_magic_byte_to_f32_zp(uint32_t biased, int b, int32_t z)
{
    return qfi_magic_u8_to_f32_zp(__byte_perm(biased, (uint32_t)QFI_MAGIC_BITS, 0x7650 + b), z);
}
#endif

#ifdef __CUDACC__
/* A smooth fused activation whose result only goes to rint (an int8
 * output), computed with the GPU's approximate instructions in place of
 * lib/float_math.h's exact forms (their e^x, erf and IEEE divisions, each
 * operation rounded on its own, cost several times as many instructions,
 * and the epilogues of wide SiLU or GELU layers are bound by them). The
 * level stays the exact one's: the fast y comes with a margin, twice the
 * two forms' worst difference, and where a value within the margin of y
 * could clamp and round to another level the exact form decides
 * (qfi_level_sure; rare: 0.002-0.1 % of the values |v| >= 1). The
 * differences:
 * - GELU: the erf form's at qfi_gelu_level_fast, margin 2.4e-6 |v| +
 *   2^-12; the tanh form computes its argument with the exact form's
 *   operations, so only tanh differs (tanhf 2 ulp + qfi_tanh's, with a few
 *   roundings of |y| <= |v|: below 6e-7 |v|, margin 1.2e-6 |v| + 2^-12).
 * - SiLU and Sigmoid, from the same x = v s and the same split into
 *   e = e^-|x| and sigmoid = 1 / (1 + e) or e / (1 + e): __expf (ex2.approx)
 *   is within 2 + 1.173 |x| ulp of e^-|x| (CUDA's documented bound: the
 *   rounding of |x| log2 e), rcp.approx within 1 ulp, then 1 + e and the
 *   products 0.5 ulp each; the exact form (qfi_exp 2 ulp and its
 *   roundings) within 6 ulp. An error in e moves sigmoid by that relative
 *   error only where x < 0 (for x >= 0 by e / (1 + e) of it, under 2.4e-7
 *   relative), so the margin is |y| (2.4e-6 + 3e-7 |x|) for x < 0 and
 *   2.4e-6 |y| for x >= 0, plus 2^-16 for values near zero. Where e^-|x|
 *   is below the normal range (x < -87) both forms give |y| < 1.2e-38 |v|,
 *   level 0 unless |v| >= 1e30, which the exact form then decides.
 * tests/smooth_sweep.cu checks every float v at several scales against the
 * exact form. HardSwish's exact form is already a few operations: it is
 * used as is. The *_level_fast functions store the clamped fast value in
 * *out and return whether it rounds to the exact form's level; they have
 * no branch, so that kernels can unroll them over many elements and leave
 * the exact form to a second pass. */
static __device__ __noinline__ float qfi_act_exact_out_of_line(qf_act act, float v, float s)
{
    return qfi_act_value(act, v, s); /* rare: one copy per file, not one per epilogue instance */
}
/* Whether act has such a fast form (the requantize kernel's launch picks by it). */
static QFI_HD bool qfi_act_has_fast_level(qf_act act)
{
    return qfi_act_smooth(act) && act != QF_ACT_HARD_SWISH;
}
static __device__ __forceinline__ float qfi_rcp_approx(float d)
{
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));
    return r;
}
/* y clamped to [lo, hi] into *out; whether every value within margin of y
 * clamps and rounds to the same level. c = clamp(y) and its level r
 * (QFI_MAGIC: lo and hi are int8 bounds) differ by |c - r| <= 1/2, exactly;
 * every value within margin of c lies strictly inside r's rounding interval
 * when |c - r| + margin < 1/2, and one within margin of a y clamped at hi
 * (lo) clamps to hi (lo) or rounds to it. 0.49999 leaves room for the rounding of
 * that sum (2^-25). A NaN y clamps to lo, as the exact form's NaN does, but
 * its NaN margin leaves it to the exact form. The caller's rint of *out
 * shares the first addition. */
static __device__ __forceinline__ bool qfi_level_sure(float y, float margin, float lo, float hi, float *out)
{
    const float c = fminf(fmaxf(y, lo), hi), r = qfi_sub(qfi_add(c, QFI_MAGIC), QFI_MAGIC);
    *out = c;
    return qfi_add(fabsf(qfi_sub(c, r)), margin) < 0.49999f;
}
/* SiLU (silu) or Sigmoid of v at scale s */
static __device__ __forceinline__ bool qfi_sigmoid_level_fast(bool silu, float v, float s, float lo, float hi, float *out)
{
    const float x = qfi_mul(v, s), ax = fabsf(x), e = __expf(-ax), r = qfi_rcp_approx(1.0f + e);
    const bool neg = x < 0.0f;
    const float sig = neg ? e * r : r;
    /* s is the kernel's: its reciprocal is computed once, outside the loops */
    const float y = sig * (silu ? v : __frcp_rn(s));
    const float margin = fmaf(fabsf(y), neg ? fmaf(ax, 3e-7f, 2.4e-6f) : 2.4e-6f, 1.52587890625e-5f);
    return qfi_level_sure(y, margin, lo, hi, out) & (!(x < -87.0f) || fabsf(v) < 1e30f);
}
/* y clamped to [lo, hi] and rounded to a half: *h the half bits of y -
 * margin; whether y + margin gives the same half (then so does every value
 * between: rounding is monotonic). Both ends in one paired conversion
 * (F2FP), not two single ones at the conversion units' eighth rate; the
 * same rounding to nearest even. */
static __device__ __forceinline__ bool qfi_f16_sure(float y, float margin, float lo, float hi, uint16_t *h)
{
    const __half2 ends = __floats2half2_rn(fminf(fmaxf(y - margin, lo), hi), fminf(fmaxf(y + margin, lo), hi));
    uint32_t bits;
    memcpy(&bits, &ends, sizeof bits);
    *h = (uint16_t)bits;
    return (bits & 0xFFFFu) == bits >> 16;
}
/* The same into a half (a float_out layer's output), where |v s| <= 64:
 * with CUDA's accurate expf and the IEEE reciprocal, whose margin is
 * 2.4e-6 |y| whatever x (the approximate instructions' grows with |x| for
 * x < 0, and a half's step is finer than a level: EfficientNet-B0's
 * depthwise epilogues left more values to the exact form, whose branch
 * the warp takes for any lane, and ran 2.5 % slower). *h the half bits of
 * y - margin clamped; whether y + margin clamps and rounds to the same half
 * (then so does every value between, the exact form's among them: rounding
 * is monotonic). tests/smooth_sweep.cu checks every float. */
static __device__ __forceinline__ bool qfi_sigmoid_f16_fast(bool silu, float v, float s, float lo, float hi, uint16_t *h)
{
    const float x = qfi_mul(v, s), e = expf(-fabsf(x)), rc = __frcp_rn(1.0f + e);
    const float sig = x >= 0.0f ? rc : e * rc;
    const float y = silu ? v * sig : sig / s, margin = fabsf(y) * 2.4e-6f;
    return qfi_f16_sure(y, margin, lo, hi, h) & (fabsf(x) <= 64.0f);
}
/* The same from qfi_sigmoid_level_fast's approximate instructions and
 * margin, relative only (near zero a half's step is finer than any absolute
 * term), for kernels that finish the unsure values apart, a warp's queue of
 * them at a time (conv_grouped.cu, dw_exact_queue): about twice as many
 * values are left to the exact form, each at a small share of what the
 * exact form's branch costs a warp. tests/smooth_sweep.cu checks every float. */
static __device__ __forceinline__ bool qfi_sigmoid_f16_approx(bool silu, float v, float s, float lo, float hi, uint16_t *h)
{
    const float x = qfi_mul(v, s), ax = fabsf(x), e = __expf(-ax), r = qfi_rcp_approx(1.0f + e);
    const bool neg = x < 0.0f;
    const float sig = neg ? e * r : r;
    const float y = sig * (silu ? v : __frcp_rn(s)), margin = fabsf(y) * (neg ? fmaf(ax, 3e-7f, 2.4e-6f) : 2.4e-6f);
    return qfi_f16_sure(y, margin, lo, hi, h) & (ax <= 64.0f);
}
/* GELU (the tanh form where tanh_form) of v at scale s. The erf form as
 * 1 + erf(x / sqrt 2) = 2 - erfc(a) for x >= 0 (erfc(a) for x < 0), a =
 * |x| / sqrt 2, erfc by Abramowitz and Stegun's 7.1.26 (t = 1 / (1 + p a),
 * erfc(a) = t (a1 + t (a2 + ...)) e^-a^2, within 1.5e-7) through rcp.approx
 * and ex2.approx: about four fifths of erff's instructions. Its error: the
 * formula's, t's 1.5 ulp through the polynomial's slope (3.44 at t = 1),
 * the Horner steps' and the products' roundings, under 1.4e-6; with
 * qfi_erf's 3 ulp and the roundings of y, |y - exact| < 1.2e-6 |v|, twice
 * that the margin. */
static __device__ __forceinline__ bool qfi_gelu_level_fast(bool tanh_form, float v, float s, float lo, float hi, float *out)
{
    const float x = qfi_mul(v, s);
    float onep, rel; /* 1 + erf or 1 + tanh; the margin's share of |v| */
    if (tanh_form) {
        const float x3 = qfi_mul(qfi_mul(x, x), x);
        onep = 1.0f + tanhf(qfi_mul(0.797884583f, qfi_add(x, qfi_mul(0.044715f, x3))));
        rel = 1.2e-6f;
    } else {
        const float a = fabsf(x) * 0.707106781f, t = qfi_rcp_approx(fmaf(0.3275911f, a, 1.0f));
        float p = fmaf(1.061405429f, t, -1.453152027f);
        p = fmaf(p, t, 1.421413741f);
        p = fmaf(p, t, -0.284496736f);
        p = fmaf(p, t, 0.254829592f);
        const float c = p * t * __expf(-(a * a));
        onep = x < 0.0f ? c : 2.0f - c;
        rel = 2.4e-6f;
    }
    const float y = 0.5f * v * onep;
    return qfi_level_sure(y, fmaf(fabsf(v), rel, 2.44140625e-4f), lo, hi, out);
}
/* Any smooth act (HardSwish: its exact form); gelu as at qfi_act_value_kinds
 * (false: act is no GELU, whose code is left out) */
static __device__ __forceinline__ bool qfi_smooth_level_fast_try(qf_act act, float v, float s, float lo, float hi, bool gelu,
                                                                float *out)
{
    if (act == QF_ACT_SILU || act == QF_ACT_SIGMOID) return qfi_sigmoid_level_fast(act == QF_ACT_SILU, v, s, lo, hi, out);
    if (gelu && (act == QF_ACT_GELU || act == QF_ACT_GELU_TANH))
        return qfi_gelu_level_fast(act == QF_ACT_GELU_TANH, v, s, lo, hi, out);
    *out = fminf(fmaxf(qfi_act_value_kinds(act, v, s, gelu), lo), hi);
    return true;
}
/* The clamped level value of act: the fast one where sure, else the exact form's */
static __device__ __forceinline__ float qfi_smooth_level_fast_kinds(qf_act act, float v, float s, float lo, float hi, bool gelu)
{
    float y;
    return qfi_smooth_level_fast_try(act, v, s, lo, hi, gelu, &y)
               ? y
               : fminf(fmaxf(qfi_act_exact_out_of_line(act, v, s), lo), hi);
}
#endif

/* The epilogue from a = acc + bias[c] already converted to float (exactly:
 * qfi_i2f, or a GPU kernel's own exact conversion below) and the channel's
 * multiplier m; r is the residual as a float, read only when has_res.
 * `smooth`: whether rq->act may be a smooth activation; a kernel passes a
 * compile-time false only where its host side made sure rq->act is none,
 * and so leaves e^x out of its code; `gelu`: as at qfi_act_value_kinds. */
static QFI_HD float qfi_requant_linear(const qfi_requant *rq, float a, float m, bool has_res, float r)
{
    const float v = qfi_mul(a, m);
    return has_res ? qfi_add(v, qfi_mul(r, rq->m_r)) : v;
}
static QFI_HD float qfi_requant_value_kinds(const qfi_requant *rq, float a, float m, bool has_res, float r, bool smooth,
                                            bool gelu)
{
    float v = qfi_requant_linear(rq, a, m, has_res, r);
    if (smooth && rq->act != QF_ACT_NONE) v = qfi_act_value_kinds(rq->act, v, rq->act_s, gelu);
    return fminf(fmaxf(v, rq->lo), rq->hi);
}
static QFI_HD float qfi_requant_value_at(const qfi_requant *rq, float a, float m, bool has_res, float r, bool smooth)
{
    return qfi_requant_value_kinds(rq, a, m, has_res, r, smooth, true);
}
#ifdef __CUDACC__
/* The same for an int8 output, whose value only goes to rint:
 * qfi_smooth_level_fast_kinds's value of rq->act, same level. The requantize
 * kernel after cuBLASLt's int32 GEMM (gemm.cu), the depthwise and grouped
 * kernels' int8 stores (conv_grouped.cu) and the implicit GEMM's exact pass
 * take it; the implicit GEMM, which serves no GELU, without GELU's code
 * (gelu false): a fast GELU there cost its Sigmoid, SiLU and HardSwish
 * instances 10-19 % (MobileNetV3-Large INT8 b256 46,807 -> 37,944 img/s,
 * measured), and its exact SiLU held EfficientNet-B0's widest expand convs
 * to 3x their FP16 time. */
static __device__ __forceinline__ float qfi_requant_smooth_i8_value_kinds(const qfi_requant *rq, float a, float m,
                                                                          bool has_res, float r, bool gelu)
{
    return qfi_smooth_level_fast_kinds(rq->act, qfi_requant_linear(rq, a, m, has_res, r), rq->act_s, rq->lo, rq->hi, gelu);
}
static __device__ __forceinline__ float qfi_requant_smooth_i8_value(const qfi_requant *rq, float a, float m, bool has_res,
                                                                    float r)
{
    return qfi_requant_smooth_i8_value_kinds(rq, a, m, has_res, r, true);
}
#endif
static QFI_HD float qfi_requant_value(const qfi_requant *rq, float a, float m, bool has_res, float r)
{
    return qfi_requant_value_at(rq, a, m, has_res, r, true);
}
/* The same from the int32 accumulator of channel c. */
static QFI_HD float qfi_requant_acc_at(const qfi_requant *rq, int32_t acc, int64_t c, bool has_res, float r, bool smooth)
{
    const int32_t a = rq->bias ? acc + rq->bias[c] : acc;
    return qfi_requant_value_at(rq, qfi_i2f(a), rq->m[c], has_res, r, smooth);
}
static QFI_HD float qfi_requant_acc(const qfi_requant *rq, int32_t acc, int64_t c, bool has_res, float r)
{
    return qfi_requant_acc_at(rq, acc, c, has_res, r, true);
}
/* An int8 output's stored level for an epilogue result v (clamped, relative
 * to z_out): rint(v) + z_out. Every kernel that stores int8 goes through it.
 * On the device through QFI_MAGIC (|v| <= 255 after the clamp), not the
 * float-to-integer conversion, which runs at an eighth of the FP32 rate. */
static QFI_HD int8_t qfi_requant_level(const qfi_requant *rq, float v)
{
#ifdef __CUDA_ARCH__
    return (int8_t)qfi_magic_round_zp(v, rq->z_out);
#else
    return (int8_t)(qfi_round_i32(v) + rq->z_out);
#endif
}
#ifdef __CUDACC__
/* The int8 level of channel c's accumulator (and residual r, read only
 * when has_res) by qfi_requant_smooth_i8_value. */
static __device__ __forceinline__ int8_t qfi_requant_acc_level_fast(const qfi_requant *rq, int32_t acc, int64_t c,
                                                                   bool has_res, float r)
{
    const int32_t a = rq->bias ? acc + rq->bias[c] : acc;
    return qfi_requant_level(rq, qfi_requant_smooth_i8_value(rq, qfi_i2f(a), rq->m[c], has_res, r));
}
#endif
#ifdef __CUDACC__
/* The exact form's half of rq->act at the linear value v, clamped (what
 * the fast half forms must agree with; kernels that defer the unsure values
 * finish them with it). */
static __device__ __forceinline__ uint16_t qfi_requant_exact_f16_bits(const qfi_requant *rq, float v)
{
    return qfi_f16_bits(fminf(fmaxf(qfi_act_exact_out_of_line(rq->act, v, rq->act_s), rq->lo), rq->hi));
}
/* The same epilogue into a half output (a smooth activation fused into an
 * INT8 conv whose readers are float ops: quant/assign.c's float_out), as
 * half bits. SiLU and Sigmoid by qfi_sigmoid_f16_fast where it is sure
 * (about 99 % of values: a half's step is 2^-11 of it), the exact form
 * elsewhere; other activations take the exact form. */
static __device__ __forceinline__ uint16_t qfi_requant_smooth_f16_bits(const qfi_requant *rq, float a, float m,
                                                                      bool has_res, float r)
{
    const float v = qfi_requant_linear(rq, a, m, has_res, r);
    uint16_t h;
    if ((rq->act == QF_ACT_SILU || rq->act == QF_ACT_SIGMOID) &&
        qfi_sigmoid_f16_fast(rq->act == QF_ACT_SILU, v, rq->act_s, rq->lo, rq->hi, &h))
        return h;
    return qfi_requant_exact_f16_bits(rq, v);
}
/* The half bits of channel c's accumulator (and residual r, read only when
 * has_res) by qfi_requant_smooth_f16_bits. */
static __device__ __forceinline__ uint16_t qfi_requant_acc_f16_bits(const qfi_requant *rq, int32_t acc, int64_t c,
                                                                   bool has_res, float r)
{
    const int32_t a = rq->bias ? acc + rq->bias[c] : acc;
    return qfi_requant_smooth_f16_bits(rq, qfi_i2f(a), rq->m[c], has_res, r);
}
#endif
/* A residual's stored level r as the epilogue's operand: r - z_r, exactly. */
static QFI_HD float qfi_requant_residual(const qfi_requant *rq, int8_t r)
{
#ifdef __CUDA_ARCH__
    return qfi_magic_to_f32(QFI_MAGIC_BITS + ((int32_t)r - rq->z_r)); /* |r - z_r| <= 255: no conversion instruction */
#else
    return (float)((int32_t)r - rq->z_r);
#endif
}
/* Stores an epilogue result as element i of y in the output dtype. */
static QFI_HD void qfi_requant_store(const qfi_requant *rq, void *y, int64_t i, float v)
{
    switch (rq->out) {
    case QF_I8: ((int8_t *)y)[i] = qfi_requant_level(rq, v); break;
    case QF_F16: ((uint16_t *)y)[i] = qfi_f16_bits(v); break;
    default: ((float *)y)[i] = v;
    }
}
/* The whole epilogue of output element i: its int32 accumulator of channel c
 * and residual res[i] (res may be NULL), stored into y in rq->out's dtype. */
static QFI_HD void qfi_requant_elem_at(const qfi_requant *rq, void *y, int64_t i, int32_t acc, int64_t c,
                                       const int8_t *res, bool smooth)
{
    const float r = res ? qfi_requant_residual(rq, res[i]) : 0.0f;
    qfi_requant_store(rq, y, i, qfi_requant_acc_at(rq, acc, c, res != NULL, r, smooth));
}
static QFI_HD void qfi_requant_elem(const qfi_requant *rq, void *y, int64_t i, int32_t acc, int64_t c, const int8_t *res)
{
    qfi_requant_elem_at(rq, y, i, acc, c, res, true);
}


#endif
