/* Float functions that the CPU and CUDA engines compute bit for bit alike:
 * built from lib/quant_math.h's single IEEE operations (nothing fused), where
 * libm's expf and CUDA's differ by an ulp or two, and an INT8 model fragile
 * enough turns that ulp into a different class (EfficientNet's SiLU and SE
 * gates). Under nvcc the functions are __host__ __device__. */
#ifndef QFORGE_FLOAT_MATH_H
#define QFORGE_FLOAT_MATH_H

#include "quant_math.h"

/* 2^k for k in [-126, 127]: a normal float made from its exponent bits. */
static QFI_HD float qfi_pow2i(int k) { return qfi_bits_f32((uint32_t)(k + 127) << 23); }

/* e^x within 2 ulp (tests/test_float_math.c), subnormal results included. */
static QFI_HD float qfi_exp(float x)
{
    if (!(x == x)) return x;
    if (x > 88.72283935546875f) return INFINITY;
    if (x < -103.97208404541016f) return 0.0f;
    /* x = k ln2 + r with |r| <= ln2/2; adding 1.5 * 2^23 rounds x / ln2 to an integer */
    const float shifter = 12582912.0f;
    const float k = qfi_sub(qfi_add(qfi_mul(x, 1.44269502f), shifter), shifter);
    /* Cody and Waite: ln2's leading 16 bits times |k| <= 150 is exact */
    const float r = qfi_sub(qfi_sub(x, qfi_mul(k, 0.693145751953125f)), qfi_mul(k, 1.42860677e-6f));
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
    return qfi_mul(qfi_mul(p, qfi_pow2i(k1)), qfi_pow2i(ki - k1));
}

/* 1 / (1 + e^-x), with e of a non-positive argument only, so that large |x|
 * neither overflows nor loses the tail. */
static QFI_HD float qfi_sigmoid(float x)
{
    if (x >= 0.0f) return qfi_div(1.0f, qfi_add(1.0f, qfi_exp(-x)));
    const float e = qfi_exp(x);
    return qfi_div(e, qfi_add(1.0f, e));
}

#endif
