/* lib/float_math.h, the exp and Sigmoid both engines compute, against
 * double-precision libm: e^x within 2 ulp over a million arguments spread
 * across its whole range (subnormal results within one subnormal step), the
 * special values, Sigmoid within 3 ulp, and erf and tanh (GELU's) within 3 ulp
 * over every 97th float of their non-constant range; the lane forms of erf,
 * tanh and GELU, computed in a loop that vectorizes, give their bits. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include "float_math.h"
#include "internal.h" /* QFI_SIMD_CLONES */
#include "testutil.h"

/* |y - ref| in units of ref's last place (a float's spacing at ref). */
static double ulps(float y, double ref)
{
    int e;
    frexp(ref, &e); /* ref = m * 2^e, 0.5 <= m < 1 */
    double ulp = ldexp(1.0, (e - 1 < -126 ? -126 : e - 1) - 23);
    return fabs((double)y - ref) / ulp;
}

START_TEST(exp_within_2_ulp)
{
    /* every 1999th float in [-103.97, 88.72]: the negatives from -0 down, then the positives */
    double worst = 0.0;
    float worst_x = 0.0f;
    long n = 0;
    for (int sign = 0; sign < 2; sign++) {
        const float limit = sign ? -103.97208404541016f : 88.72283935546875f;
        for (uint32_t b = 0;; b += 1999) {
            float x = qfi_bits_f32(b | (sign ? 0x80000000u : 0u));
            if (sign ? x < limit : x > limit) break;
            double e = ulps(qfi_exp(x), exp((double)x));
            if (e > worst) worst = e, worst_x = x;
            n++;
        }
    }
    printf("qfi_exp: %ld arguments, worst %.3f ulp at x = %.9g\n", n, worst, (double)worst_x);
    ck_assert_msg(n > 1000000, "%ld arguments", n);
    ck_assert_msg(worst <= 2.0, "%.3f ulp at x = %.9g: e^x %.9g, libm %.17g", worst, (double)worst_x,
                  (double)qfi_exp(worst_x), exp((double)worst_x));
}
END_TEST

START_TEST(exp_special_values)
{
    ck_assert(qfi_exp(0.0f) == 1.0f);
    ck_assert(qfi_exp(-0.0f) == 1.0f);
    ck_assert(isinf(qfi_exp(INFINITY)) && qfi_exp(INFINITY) > 0);
    ck_assert(qfi_exp(89.0f) == INFINITY);
    ck_assert(qfi_exp(-INFINITY) == 0.0f);
    ck_assert(qfi_exp(-104.0f) == 0.0f);
    ck_assert(isnan(qfi_exp(NAN)));
    /* the smallest results are subnormal, and positive */
    ck_assert(qfi_exp(-103.0f) > 0.0f && qfi_exp(-103.0f) < FLT_MIN);
    ck_assert(qfi_exp(1.0f) == (float)M_E || ulps(qfi_exp(1.0f), M_E) <= 1.0);
}
END_TEST

START_TEST(sigmoid_within_3_ulp)
{
    double worst = 0.0;
    float worst_x = 0.0f;
    for (int i = -220000; i <= 220000; i++) {
        float x = (float)i * 0.0005f; /* [-110, 110] */
        double ref = 1.0 / (1.0 + exp(-(double)x));
        if (ref == 0.0) continue;
        double e = ulps(qfi_sigmoid(x), ref);
        if (e > worst) worst = e, worst_x = x;
    }
    printf("qfi_sigmoid: worst %.3f ulp at x = %.9g\n", worst, (double)worst_x);
    ck_assert_msg(worst <= 3.0, "%.3f ulp at x = %.9g", worst, (double)worst_x);
    ck_assert(qfi_sigmoid(0.0f) == 0.5f);
    ck_assert(qfi_sigmoid(200.0f) == 1.0f && qfi_sigmoid(-200.0f) == 0.0f);
    ck_assert(isnan(qfi_sigmoid(NAN)));
}
END_TEST

/* Every 97th float from +-0 up to |x| = hi, both signs; worst ulp of f against ref. */
static double worst_ulps(float (*f)(float), double (*ref)(double), float hi, float *worst_x, long *n)
{
    double worst = 0.0;
    *n = 0;
    for (int sign = 0; sign < 2; sign++)
        for (uint32_t b = 0;; b += 97) {
            float x = qfi_bits_f32(b | (sign ? 0x80000000u : 0u));
            if (fabsf(x) > hi) break;
            double r = ref((double)x);
            double e = r == 0.0 ? fabs((double)f(x)) / 1e-45 : ulps(f(x), r);
            if (e > worst) worst = e, *worst_x = x;
            (*n)++;
        }
    return worst;
}

START_TEST(erf_within_3_ulp)
{
    float wx = 0.0f;
    long n;
    double worst = worst_ulps(qfi_erf, erf, 4.5f, &wx, &n);
    printf("qfi_erf: %ld arguments, worst %.3f ulp at x = %.9g\n", n, worst, (double)wx);
    ck_assert_msg(n > 1000000, "%ld arguments", n);
    ck_assert_msg(worst <= 3.0, "%.3f ulp at x = %.9g: %.9g, libm %.17g", worst, (double)wx, (double)qfi_erf(wx),
                  erf((double)wx));
    ck_assert(qfi_erf(0.0f) == 0.0f && qfi_erf(10.0f) == 1.0f && qfi_erf(-INFINITY) == -1.0f);
    ck_assert(isnan(qfi_erf(NAN)));
}
END_TEST

START_TEST(tanh_within_3_ulp)
{
    float wx = 0.0f;
    long n;
    double worst = worst_ulps(qfi_tanh, tanh, 9.5f, &wx, &n);
    printf("qfi_tanh: %ld arguments, worst %.3f ulp at x = %.9g\n", n, worst, (double)wx);
    ck_assert_msg(worst <= 3.0, "%.3f ulp at x = %.9g: %.9g, libm %.17g", worst, (double)wx, (double)qfi_tanh(wx),
                  tanh((double)wx));
    ck_assert(qfi_tanh(0.0f) == 0.0f && qfi_tanh(20.0f) == 1.0f && qfi_tanh(-INFINITY) == -1.0f);
    ck_assert(isnan(qfi_tanh(NAN)));
}
END_TEST

/* GELU against its double-precision definition, relative to max(|y|, 1):
 * for x far below 0, 1 + erf (or 1 + tanh) cancels, as in the ONNX chain, so
 * small results are only good to a few ulp of 1. */
START_TEST(gelu_matches_its_definition)
{
    for (int approx = 0; approx < 2; approx++) {
        double worst = 0.0;
        for (int i = -80000; i <= 80000; i++) {
            double x = i * 1e-4;
            double ref = approx ? 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)))
                                : 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
            double e = fabs(qfi_gelu((float)x, approx) - ref) / fmax(fabs(ref), 1.0);
            if (e > worst) worst = e;
        }
        printf("qfi_gelu%s: worst relative error %.3g\n", approx ? " (tanh)" : "", worst);
        ck_assert_msg(worst < 4e-7, "gelu approx=%d: %.3g", approx, worst);
    }
}
END_TEST

/* ---- the lane forms: the same bits as the branches --------------------------------------- */

enum { LANE_FNS = 4 };
static const char *const lane_names[LANE_FNS] = {"erf", "tanh", "gelu", "gelu (tanh)"};

/* Compiled per ISA, as the CPU kernels that use the lane forms (unary.c). */
QFI_SIMD_CLONES static void lanes_of(int fn, const float *x, float *y, int n)
{
    switch (fn) {
    case 0: for (int i = 0; i < n; i++) y[i] = qfi_erf_lanes(x[i]); break;
    case 1: for (int i = 0; i < n; i++) y[i] = qfi_tanh_lanes(x[i]); break;
    case 2: for (int i = 0; i < n; i++) y[i] = qfi_gelu_lanes(x[i], false); break;
    default: for (int i = 0; i < n; i++) y[i] = qfi_gelu_lanes(x[i], true); break;
    }
}
static float branches_of(int fn, float x)
{
    switch (fn) {
    case 0: return qfi_erf(x);
    case 1: return qfi_tanh(x);
    case 2: return qfi_gelu(x, false);
    default: return qfi_gelu(x, true);
    }
}

/* Every 251st bit pattern (17 million floats: both signs, subnormals,
 * infinities and NaNs among them); NaN in, NaN out, payload aside. */
START_TEST(lane_forms_give_the_same_bits)
{
    enum { BATCH = 4096, STEP = 251 };
    static float x[BATCH], y[BATCH];
    for (int fn = 0; fn < LANE_FNS; fn++) {
        long n = 0;
        for (uint64_t b0 = 0; b0 < (1ull << 32); b0 += (uint64_t)BATCH * STEP) {
            int m = 0;
            for (; m < BATCH && b0 + (uint64_t)m * STEP < (1ull << 32); m++)
                x[m] = qfi_bits_f32((uint32_t)(b0 + (uint64_t)m * STEP));
            lanes_of(fn, x, y, m);
            for (int i = 0; i < m; i++) {
                const float want = branches_of(fn, x[i]);
                ck_assert_msg(qfi_f32_bits(y[i]) == qfi_f32_bits(want) || (isnan(y[i]) && isnan(want)),
                              "%s lanes(%.9g) = %.9g, branches %.9g", lane_names[fn], (double)x[i], (double)y[i],
                              (double)want);
            }
            n += m;
        }
        ck_assert_msg(n > 17000000, "%ld arguments", n);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("float_math");
    TCase *tc = tcase_create("float_math");
    tcase_add_test(tc, exp_within_2_ulp);
    tcase_add_test(tc, exp_special_values);
    tcase_add_test(tc, sigmoid_within_3_ulp);
    tcase_add_test(tc, erf_within_3_ulp);
    tcase_add_test(tc, tanh_within_3_ulp);
    tcase_add_test(tc, gelu_matches_its_definition);
    tcase_add_test(tc, lane_forms_give_the_same_bits);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
