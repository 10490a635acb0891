/* Float functions that the CPU and CUDA engines compute bit for bit alike:
 * built from single IEEE operations (below; nothing fused), where
 * libm's expf and CUDA's differ by an ulp or two, and an INT8 model fragile
 * enough turns that ulp into a different class (EfficientNet's SiLU and SE
 * gates). Under nvcc the functions are __host__ __device__. */
#ifndef QFORGE_FLOAT_MATH_H
#define QFORGE_FLOAT_MATH_H

#include <stdint.h>
#include <stdbool.h>
#include <string.h>
#include <math.h>

#ifdef __CUDACC__
#define QFI_HD __host__ __device__ __forceinline__
#else
#define QFI_HD inline
#endif

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

/* A float's bits as a key whose unsigned order is the float order (-inf to
 * +inf; NaN falls outside), so that an integer min or max reduction, which
 * vectorizes and has device atomics, finds a signed extreme. Both zeros take
 * +0's key: a minimum must not depend on which zero came first. */
static QFI_HD uint32_t qfi_f32_order_key(uint32_t bits)
{
    const uint32_t flip = (uint32_t)((int32_t)bits >> 31) | 0x80000000u; /* negatives: every bit */
    return bits & 0x7fffffffu ? bits ^ flip : 0x80000000u;
}
static QFI_HD uint32_t qfi_f32_from_order_key(uint32_t key)
{
    return key & 0x80000000u ? key ^ 0x80000000u : ~key;
}

/* 2^k for k in [-126, 127]: a normal float made from its exponent bits. */
static QFI_HD float qfi_pow2i(int k) { return qfi_bits_f32((uint32_t)(k + 127) << 23); }

/* e^x within 2 ulp (tests/test_float_math.c), subnormal results included.
 * No branch: the ends and NaN are selected after the computation on the
 * clamped argument, so that CPU loops over it vectorize (the device computes
 * the same path either way). The clamp maps NaN to an end too: k's
 * conversion to int is undefined for NaN (fuzz_qfm found it:
 * tests/bad/qfm/exp_of_nan). */
static QFI_HD float qfi_exp(float x)
{
    const float hi = 88.72283935546875f, lo = -103.97208404541016f;
    const float xc = x > hi ? hi : x >= lo ? x : lo; /* keeps k's conversion in range, NaN too */
    /* x = k ln2 + r with |r| <= ln2/2; adding 1.5 * 2^23 rounds x / ln2 to an integer */
    const float shifter = 12582912.0f;
    const float k = qfi_sub(qfi_add(qfi_mul(xc, 1.44269502f), shifter), shifter);
    /* Cody and Waite: ln2's leading 16 bits times |k| <= 150 is exact */
    const float r = qfi_sub(qfi_sub(xc, qfi_mul(k, 0.693145751953125f)), qfi_mul(k, 1.42860677e-6f));
    /* Taylor to r^7, whose remainder is below 1e-8 relative at |r| = ln2/2 */
    float p = 1.98412698e-4f;
    p = qfi_add(qfi_mul(p, r), 1.38888889e-3f);
    p = qfi_add(qfi_mul(p, r), 8.33333333e-3f);
    p = qfi_add(qfi_mul(p, r), 4.16666667e-2f);
    p = qfi_add(qfi_mul(p, r), 1.66666667e-1f);
    p = qfi_add(qfi_mul(p, r), 0.5f);
    p = qfi_add(qfi_mul(p, r), 1.0f);
    p = qfi_add(qfi_mul(p, r), 1.0f);
    /* times 2^k, k in [-150, 128], as two normal powers: one rounding where
     * the result is subnormal */
    const int ki = (int)k, k1 = ki / 2;
    const float v = qfi_mul(qfi_mul(p, qfi_pow2i(k1)), qfi_pow2i(ki - k1));
    return x > hi ? INFINITY : x < lo ? 0.0f : x == x ? v : x;
}

/* sigmoid(x) = 1 / (1 + e^-x) as n / d, with e = e^-|x| (a non-positive
 * argument only, so that large |x| neither overflows nor loses the tail):
 * d = 1 + e, and n = 1 for x >= 0, else e. One e^x and no branch. */
static QFI_HD float qfi_sigmoid_parts(float x, float *d)
{
    const float e = qfi_exp(-fabsf(x));
    *d = qfi_add(1.0f, e);
    return x >= 0.0f ? 1.0f : e;
}
static QFI_HD float qfi_sigmoid(float x)
{
    float d;
    const float n = qfi_sigmoid_parts(x, &d);
    return qfi_div(n, d);
}

/* ONNX HardSigmoid, max(0, min(1, alpha x + beta)): the product, then the sum
 * (HardSwish is x times it with alpha 1/6, beta 1/2). NaN stays NaN. */
static QFI_HD float qfi_hard_sigmoid(float x, float alpha, float beta)
{
    const float h = qfi_add(qfi_mul(alpha, x), beta);
    return h < 0.0f ? 0.0f : h > 1.0f ? 1.0f : h;
}

/* One Horner step, p t + c, rounded twice (never fused). */
#define QFI_HORNER(p, t, c) qfi_add(qfi_mul(p, t), c)

/* erf(x) / x as a polynomial in t = x^2, for |x| < 1 */
static QFI_HD float qfi_erf_small(float t)
{
    float p = 7.93349391e-05f;
    p = QFI_HORNER(p, t, -0.00080348464f);
    p = QFI_HORNER(p, t, 0.00519121857f);
    p = QFI_HORNER(p, t, -0.0268553998f);
    p = QFI_HORNER(p, t, 0.112836257f);
    p = QFI_HORNER(p, t, -0.376126289f);
    p = QFI_HORNER(p, t, 1.12837923f);
    return p;
}

/* erf(1 + t) for t in [0, 1) */
static QFI_HD float qfi_erf_1to2(float t)
{
    float p = -3.94514864e-05f;
    p = QFI_HORNER(p, t, 0.00173766899f);
    p = QFI_HORNER(p, t, -0.00975295436f);
    p = QFI_HORNER(p, t, 0.0192634054f);
    p = QFI_HORNER(p, t, 0.00244907546f);
    p = QFI_HORNER(p, t, -0.0684537292f);
    p = QFI_HORNER(p, t, 0.0690304711f);
    p = QFI_HORNER(p, t, 0.138388157f);
    p = QFI_HORNER(p, t, -0.415108711f);
    p = QFI_HORNER(p, t, 0.415107518f);
    p = QFI_HORNER(p, t, 0.842700779f);
    return p;
}

/* erf(2 + t) for t in [0, 1) */
static QFI_HD float qfi_erf_2to3(float t)
{
    float p = 6.83292019e-05f;
    p = QFI_HORNER(p, t, -0.000587040966f);
    p = QFI_HORNER(p, t, 0.00213658693f);
    p = QFI_HORNER(p, t, -0.00374684017f);
    p = QFI_HORNER(p, t, 0.000626070716f);
    p = QFI_HORNER(p, t, 0.013038944f);
    p = QFI_HORNER(p, t, -0.0344353542f);
    p = QFI_HORNER(p, t, 0.0482218675f);
    p = QFI_HORNER(p, t, -0.0413339064f);
    p = QFI_HORNER(p, t, 0.020666983f);
    p = QFI_HORNER(p, t, 0.995322287f);
    return p;
}

/* erf(3 + t) for t in [0, 0.93) */
static QFI_HD float qfi_erf_3up(float t)
{
    float p = 1.70370349e-05f;
    p = QFI_HORNER(p, t, -0.000113107541f);
    p = QFI_HORNER(p, t, 0.000356621051f);
    p = QFI_HORNER(p, t, -0.000712680398f);
    p = QFI_HORNER(p, t, 0.00100557366f);
    p = QFI_HORNER(p, t, -0.0010415822f);
    p = QFI_HORNER(p, t, 0.000788690813f);
    p = QFI_HORNER(p, t, -0.000417729054f);
    p = QFI_HORNER(p, t, 0.000139252195f);
    p = QFI_HORNER(p, t, 0.999977887f);
    return p;
}

/* (tanh(x) - x) / x^3 as a polynomial in t = x^2, for |x| < 0.625 */
static QFI_HD float qfi_tanh_small(float t)
{
    float p = -0.000864869100f;
    p = QFI_HORNER(p, t, 0.00330928992f);
    p = QFI_HORNER(p, t, -0.00879229233f);
    p = QFI_HORNER(p, t, 0.0218601376f);
    p = QFI_HORNER(p, t, -0.0539676584f);
    p = QFI_HORNER(p, t, 0.133333325f);
    p = QFI_HORNER(p, t, -0.333333343f);
    return p;
}

/* erf(x) within 3 ulp (tests/test_float_math.c): x * P(x^2) below 1, then
 * polynomials in |x| - a on [1,2), [2,3), [3,3.93), and +-1 beyond, where
 * 1 - erf is below half an ulp of 1. The coefficients (above) are
 * least-squares fits on Chebyshev nodes of each piece (numpy polyfit, degrees
 * 6, 10, 10 and 9), rounded to float; the error is Horner's rounding. */
static QFI_HD float qfi_erf(float x)
{
    if (!(x == x)) return x;
    const float ax = x < 0.0f ? -x : x;
    float r;
    if (ax < 1.0f) r = qfi_mul(ax, qfi_erf_small(qfi_mul(ax, ax)));
    else if (ax < 2.0f) r = qfi_erf_1to2(qfi_sub(ax, 1.0f));
    else if (ax < 3.0f) r = qfi_erf_2to3(qfi_sub(ax, 2.0f));
    else if (ax < 3.93f) r = qfi_erf_3up(qfi_sub(ax, 3.0f));
    else r = 1.0f;
    return x < 0.0f ? -r : r;
}

/* The lane forms: the same bits as qfi_erf, qfi_tanh and qfi_gelu
 * (tests/test_float_math.c compares them), with every piece computed and the
 * one the branches take selected, one flat select after another: gcc
 * vectorizes a CPU loop over these (not over nested selects, nor branches).
 * The device keeps the branches, which skip the pieces a warp does not take. */
static QFI_HD float qfi_erf_lanes(float x)
{
    const float ax = x < 0.0f ? -x : x;
    const float r0 = qfi_mul(ax, qfi_erf_small(qfi_mul(ax, ax))), r1 = qfi_erf_1to2(qfi_sub(ax, 1.0f)),
                r2 = qfi_erf_2to3(qfi_sub(ax, 2.0f)), r3 = qfi_erf_3up(qfi_sub(ax, 3.0f));
    float r = 1.0f;
    r = ax < 3.93f ? r3 : r;
    r = ax < 3.0f ? r2 : r;
    r = ax < 2.0f ? r1 : r;
    r = ax < 1.0f ? r0 : r;
    r = x < 0.0f ? -r : r;
    return x == x ? r : x;
}

/* tanh(x) within 3 ulp: x + x^3 P(x^2) below 0.625 (fitted as erf's pieces,
 * degree 6), else 1 - 2 / (e^2|x| + 1), which is 1 in float from 9.1 on. */
static QFI_HD float qfi_tanh(float x)
{
    if (!(x == x)) return x;
    const float ax = x < 0.0f ? -x : x;
    float r;
    if (ax < 0.625f) {
        const float t = qfi_mul(ax, ax);
        r = qfi_add(ax, qfi_mul(qfi_mul(ax, t), qfi_tanh_small(t)));
    } else if (ax < 9.1f) {
        r = qfi_sub(1.0f, qfi_div(2.0f, qfi_add(qfi_exp(qfi_mul(2.0f, ax)), 1.0f)));
    } else {
        r = 1.0f;
    }
    return x < 0.0f ? -r : r;
}
static QFI_HD float qfi_tanh_lanes(float x)
{
    const float ax = x < 0.0f ? -x : x, t = qfi_mul(ax, ax);
    const float r0 = qfi_add(ax, qfi_mul(qfi_mul(ax, t), qfi_tanh_small(t)));
    const float r1 = qfi_sub(1.0f, qfi_div(2.0f, qfi_add(qfi_exp(qfi_mul(2.0f, ax)), 1.0f)));
    float r = 1.0f;
    r = ax < 9.1f ? r1 : r;
    r = ax < 0.625f ? r0 : r;
    r = x < 0.0f ? -r : r;
    return x == x ? r : x;
}

/* GELU: x/2 (1 + erf(x / sqrt 2)), or with approximate = "tanh"
 * x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the operations in the order
 * the exporters' decompositions write them. */
static QFI_HD float qfi_gelu_erf_arg(float x) { return qfi_div(x, 1.41421354f); }
static QFI_HD float qfi_gelu_tanh_arg(float x)
{
    const float x3 = qfi_mul(qfi_mul(x, x), x);
    return qfi_mul(0.797884583f, qfi_add(x, qfi_mul(0.044715f, x3)));
}
static QFI_HD float qfi_gelu_from(float x, float inner) { return qfi_mul(qfi_mul(x, 0.5f), qfi_add(1.0f, inner)); }
static QFI_HD float qfi_gelu(float x, bool tanh_approx)
{
    return qfi_gelu_from(x, tanh_approx ? qfi_tanh(qfi_gelu_tanh_arg(x)) : qfi_erf(qfi_gelu_erf_arg(x)));
}
static QFI_HD float qfi_gelu_lanes(float x, bool tanh_approx)
{
    return qfi_gelu_from(x, tanh_approx ? qfi_tanh_lanes(qfi_gelu_tanh_arg(x)) : qfi_erf_lanes(qfi_gelu_erf_arg(x)));
}

#endif
