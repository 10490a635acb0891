/* Unit tests of quantization: the requantize epilogue (rounding, saturation,
 * per-channel scales, zero channels, ReLU/Clip, residual), activation and
 * weight quantization, the exact int8 GEMM, and whole graphs quantized to
 * INT8 and FP16 and run on the CPU engine — bit-exact against an independent
 * integer reference, within a derived bound of FP32, with scales shared
 * through pass-through ops and fused epilogues. */
#include <check.h>
#include <math.h>
#include <float.h>
#include <unistd.h>
#include "internal.h"
#include "testutil.h"
#include "qforge/quant.h"
#include "ops/nn.h"
#include "../runtime/cpu/kernels.h"
#include "../quant/quant_internal.h"
#include "fusion.h"

/* ---- the requantize epilogue ------------------------------------------------------- */

/* One element through qfi_requantize into int8. */
static int q1(float s_in, float s_w, float s_out, int32_t acc, int32_t bias, qf_act act, float lo, float hi)
{
    qfi_requant rq;
    float m;
    qfi_requant_init(&rq, &m, 1, s_in, &s_w, &bias, 0.0f, 0, QF_I8, s_out, 0, act, lo, hi);
    int8_t y;
    qfi_requantize(&rq, &acc, NULL, 1, 0, 0, &y);
    return y;
}

START_TEST(requant_rounding_ties_to_even)
{
    /* m = 0.5 exactly: acc/2 lands on .5 for odd acc */
    ck_assert_int_eq(q1(1, 0.5f, 1, 1, 0, QF_ACT_NONE, 0, 0), 0);
    ck_assert_int_eq(q1(1, 0.5f, 1, 3, 0, QF_ACT_NONE, 0, 0), 2);
    ck_assert_int_eq(q1(1, 0.5f, 1, 5, 0, QF_ACT_NONE, 0, 0), 2);
    ck_assert_int_eq(q1(1, 0.5f, 1, 7, 0, QF_ACT_NONE, 0, 0), 4);
    ck_assert_int_eq(q1(1, 0.5f, 1, -1, 0, QF_ACT_NONE, 0, 0), 0);
    ck_assert_int_eq(q1(1, 0.5f, 1, -3, 0, QF_ACT_NONE, 0, 0), -2);
    ck_assert_int_eq(q1(1, 0.5f, 1, -5, 0, QF_ACT_NONE, 0, 0), -2);
    /* not a tie: nearest */
    ck_assert_int_eq(q1(1, 0.25f, 1, 3, 0, QF_ACT_NONE, 0, 0), 1);  /* 0.75 */
    ck_assert_int_eq(q1(1, 0.25f, 1, -3, 0, QF_ACT_NONE, 0, 0), -1); /* -0.75 */
    /* the bias is added in int32 before the multiply: (3 + 2) * 0.5 = 2.5 -> 2 */
    ck_assert_int_eq(q1(1, 0.5f, 1, 3, 2, QF_ACT_NONE, 0, 0), 2);
    /* m = (s_in * s_w) / s_out in FP32, in that order: for 0.013 * 0.3 / 0.02 the
     * other order, 0.013 * (0.3 / 0.02), differs in the last bit */
    float m;
    qfi_requant rq;
    float sw = 0.3f;
    qfi_requant_init(&rq, &m, 1, 0.013f, &sw, NULL, 0.0f, 0, QF_I8, 0.02f, 0, QF_ACT_NONE, 0, 0);
    volatile float prod = 0.013f * 0.3f, ratio = 0.3f / 0.02f;
    ck_assert(m == prod / 0.02f);
    ck_assert(m != 0.013f * ratio);
}
END_TEST

START_TEST(requant_saturation)
{
    ck_assert_int_eq(q1(1, 0.5f, 1, 1000, 0, QF_ACT_NONE, 0, 0), 127);
    ck_assert_int_eq(q1(1, 0.5f, 1, -1000, 0, QF_ACT_NONE, 0, 0), -128);
    ck_assert_int_eq(q1(1, 0.5f, 1, 254, 0, QF_ACT_NONE, 0, 0), 127);
    ck_assert_int_eq(q1(1, 0.5f, 1, 255, 0, QF_ACT_NONE, 0, 0), 127);   /* 127.5 saturates, never wraps */
    ck_assert_int_eq(q1(1, 0.5f, 1, -256, 0, QF_ACT_NONE, 0, 0), -128);
    ck_assert_int_eq(q1(1, 0.5f, 1, -257, 0, QF_ACT_NONE, 0, 0), -128); /* -128.5 */
    ck_assert_int_eq(q1(1, 1.0f, 1, INT32_MAX, 0, QF_ACT_NONE, 0, 0), 127);
    ck_assert_int_eq(q1(1, 1.0f, 1, INT32_MIN + 1, 0, QF_ACT_NONE, 0, 0), -128);
}
END_TEST

START_TEST(requant_activations)
{
    /* ReLU clamps at 0 */
    ck_assert_int_eq(q1(1, 0.5f, 1, -9, 0, QF_ACT_RELU, 0, 0), 0);
    ck_assert_int_eq(q1(1, 0.5f, 1, 9, 0, QF_ACT_RELU, 0, 0), 4);
    /* Clip(0, 6) at s_out = 0.1: upper level rint(6 / 0.1) = 60 */
    ck_assert_int_eq(q1(1, 1.0f, 0.1f, 100, 0, QF_ACT_CLIP, 0.0f, 6.0f), 60);
    ck_assert_int_eq(q1(1, 1.0f, 0.1f, 5, 0, QF_ACT_CLIP, 0.0f, 6.0f), 50);
    ck_assert_int_eq(q1(1, 1.0f, 0.1f, -5, 0, QF_ACT_CLIP, 0.0f, 6.0f), 0);
    /* Clip wider than the int8 range saturates at the range */
    ck_assert_int_eq(q1(1, 1.0f, 0.01f, 100, 0, QF_ACT_CLIP, -100.0f, 100.0f), 127);
    ck_assert_int_eq(q1(1, 1.0f, 0.01f, -100, 0, QF_ACT_CLIP, -100.0f, 100.0f), -128);
    /* Clip(-1, 1) at s_out = 0.5: levels -2..2 */
    ck_assert_int_eq(q1(1, 1.0f, 0.5f, 7, 0, QF_ACT_CLIP, -1.0f, 1.0f), 2);
    ck_assert_int_eq(q1(1, 1.0f, 0.5f, -7, 0, QF_ACT_CLIP, -1.0f, 1.0f), -2);
}
END_TEST

/* The smooth activations (Sigmoid, SiLU, HardSwish, GELU) against the same
 * functions in double, within one output level; exact where the function is
 * flat; float outputs exactly as the unfused ops compute them. */
static double smooth_ref(qf_act act, double x)
{
    const double s = 1.0 / (1.0 + exp(-x));
    if (act == QF_ACT_GELU) return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    if (act == QF_ACT_GELU_TANH) return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    if (act == QF_ACT_SIGMOID) return s;
    if (act == QF_ACT_SILU) return x * s;
    return x * fmin(1.0, fmax(0.0, x / 6.0 + 0.5));
}

START_TEST(requant_smooth_activations)
{
    const qf_act acts[5] = {QF_ACT_SIGMOID, QF_ACT_SILU, QF_ACT_HARD_SWISH, QF_ACT_GELU, QF_ACT_GELU_TANH};
    const float s_in = 0.02f, s_w = 0.03f, s_out[2] = {0.04f, 0.0078125f};
    for (int a = 0; a < 5; a++)
        for (int so = 0; so < 2; so++) {
            int off = 0;
            for (int32_t acc = -20000; acc <= 20000; acc += 7) {
                const double z = (double)acc * s_in * s_w, want = fmin(127.0, fmax(-128.0, rint(smooth_ref(acts[a], z) / s_out[so])));
                const int got = q1(s_in, s_w, s_out[so], acc, 0, acts[a], 0, 0);
                ck_assert_msg(fabs(got - want) <= 1.0, "act %d acc %d: %d, want %g", acts[a], acc, got, want);
                off += got != want;
            }
            ck_assert_int_le(off, 40); /* of 5715: only near the rounding ties */
        }
    /* flat parts: sigmoid's ends, HardSwish below -3 and above 3, SiLU's zero */
    ck_assert_int_eq(q1(1, 1, 0.01f, 0, 0, QF_ACT_SIGMOID, 0, 0), 50);
    ck_assert_int_eq(q1(1, 1, 0.01f, 100, 0, QF_ACT_SIGMOID, 0, 0), 100);
    ck_assert_int_eq(q1(1, 1, 0.01f, -100, 0, QF_ACT_SIGMOID, 0, 0), 0);
    ck_assert_int_eq(q1(1, 1, 0.05f, -4, 0, QF_ACT_HARD_SWISH, 0, 0), 0);
    ck_assert_int_eq(q1(1, 1, 0.05f, 4, 0, QF_ACT_HARD_SWISH, 0, 0), 80);
    ck_assert_int_eq(q1(1, 1, 0.05f, 0, 0, QF_ACT_SILU, 0, 0), 0);
    ck_assert_int_eq(q1(1, 1, 0.05f, 1000, 0, QF_ACT_SILU, 0, 0), 127); /* saturates after the activation */
    /* Relu and Clip stay clamps; the smooth kinds keep the saturation bounds */
    qfi_requant rq;
    float m, sw = 1.0f;
    qfi_requant_init(&rq, &m, 1, 1.0f, &sw, NULL, 0.0f, 0, QF_I8, 0.1f, 0, QF_ACT_RELU, 0, 0);
    ck_assert_int_eq(rq.act, QF_ACT_NONE);
    qfi_requant_init(&rq, &m, 1, 1.0f, &sw, NULL, 0.0f, 0, QF_I8, 0.1f, 0, QF_ACT_SILU, 0, 0);
    ck_assert(rq.act == QF_ACT_SILU && rq.act_s == 0.1f && rq.lo == -128.0f && rq.hi == 127.0f);
    /* a float output: the unfused ops' arithmetic, bit for bit */
    for (int a = 0; a < 5; a++) {
        qfi_requant_init(&rq, &m, 1, 0.5f, &sw, NULL, 0.0f, 0, QF_F32, 0.0f, 0, acts[a], 0, 0);
        for (int32_t acc = -50; acc <= 50; acc++) {
            const float v = (float)acc * 0.5f, g = qfi_sigmoid(v), h = qfi_hard_sigmoid(v, 1.0f / 6.0f, 0.5f);
            const float want = acts[a] == QF_ACT_SIGMOID ? g : acts[a] == QF_ACT_SILU ? v * g
                               : acts[a] == QF_ACT_HARD_SWISH ? v * h : qfi_gelu(v, acts[a] == QF_ACT_GELU_TANH);
            float y;
            qfi_requantize(&rq, &acc, NULL, 1, 0, 0, &y);
            ck_assert_msg(y == want, "act %d acc %d: %.9g, want %.9g", acts[a], acc, y, want);
        }
    }
}
END_TEST

START_TEST(requant_per_channel_and_residual)
{
    /* channels along a row (ch_step 1): m = {0.5, 2, 1/3} */
    float sw[3] = {0.5f, 2.0f, 1.0f / 3.0f}, m[3];
    int32_t bias[3] = {1, -1, 0};
    int32_t acc[3] = {4, 3, 9};
    int8_t y[4];
    qfi_requant rq;
    qfi_requant_init(&rq, m, 3, 1.0f, sw, bias, 0.0f, 0, QF_I8, 1.0f, 0, QF_ACT_NONE, 0, 0);
    qfi_requantize(&rq, acc, NULL, 3, 0, 1, y);
    ck_assert_int_eq(y[0], 2); /* 5 * 0.5 = 2.5 -> 2 */
    ck_assert_int_eq(y[1], 4); /* 2 * 2 */
    ck_assert_int_eq(y[2], 3); /* 9 / 3 */
    /* a plane of one channel (ch_step 0) uses channel 1 throughout */
    qfi_requantize(&rq, acc, NULL, 3, 1, 0, y);
    ck_assert_int_eq(y[0], 6);
    ck_assert_int_eq(y[1], 4);
    ck_assert_int_eq(y[2], 16);
    /* residual: v = acc * m + r * (s_r / s_out); s_r = 0.25, s_out = 1 */
    float one = 1.0f, m1;
    int32_t a2[4] = {1, 3, 2, -4};
    int8_t r2[4] = {2, 3, 4, 1};
    qfi_requant_init(&rq, &m1, 1, 1.0f, (float[]){0.5f}, NULL, 0.25f, 0, QF_I8, one, 0, QF_ACT_RELU, 0, 0);
    qfi_requantize(&rq, a2, r2, 4, 0, 0, y);
    ck_assert_int_eq(y[0], 1); /* 0.5 + 0.5 */
    ck_assert_int_eq(y[1], 2); /* 1.5 + 0.75 = 2.25 */
    ck_assert_int_eq(y[2], 2); /* 1 + 1 */
    ck_assert_int_eq(y[3], 0); /* -2 + 0.25, then ReLU */
    /* float outputs: the epilogue without rounding to int8 (s_out ignored) */
    float yf[3];
    qfi_requant_init(&rq, m, 3, 0.5f, sw, bias, 0.0f, 0, QF_F32, 123.0f, 0, QF_ACT_NONE, 0, 0);
    qfi_requantize(&rq, acc, NULL, 3, 0, 1, yf);
    ck_assert(yf[0] == 5 * (0.5f * 0.5f) && yf[1] == 2 * (0.5f * 2.0f));
    uint16_t yh[3];
    qfi_requant_init(&rq, m, 3, 0.1f, sw, NULL, 0.0f, 0, QF_F16, 0.0f, 0, QF_ACT_NONE, 0, 0);
    qfi_requantize(&rq, acc, NULL, 3, 0, 1, yh);
    for (int i = 0; i < 3; i++) ck_assert_uint_eq(yh[i], qf_f32_to_f16((float)acc[i] * (0.1f * sw[i])));
}
END_TEST

START_TEST(activation_quantize)
{
    ck_assert_int_eq(qfi_quantize_f32(0.5f, 1.0f), 0);
    ck_assert_int_eq(qfi_quantize_f32(1.5f, 1.0f), 2);
    ck_assert_int_eq(qfi_quantize_f32(2.5f, 1.0f), 2);
    ck_assert_int_eq(qfi_quantize_f32(-2.5f, 1.0f), -2);
    ck_assert_int_eq(qfi_quantize_f32(-3.5f, 1.0f), -4);
    ck_assert_int_eq(qfi_quantize_f32(0.3f, 0.1f), 3);
    ck_assert_int_eq(qfi_quantize_f32(127.5f, 1.0f), 127);
    ck_assert_int_eq(qfi_quantize_f32(1e30f, 1.0f), 127);
    ck_assert_int_eq(qfi_quantize_f32(-128.4f, 1.0f), -128);
    ck_assert_int_eq(qfi_quantize_f32(-1e30f, 1.0f), -128);
    ck_assert_int_eq(qfi_quantize_f32(INFINITY, 1.0f), 127);
    ck_assert_int_eq(qfi_quantize_f32(NAN, 1.0f), 0);
    ck_assert(qfi_dequantize_i8(-128, 0.5f) == -64.0f);
    // the vectorized array form, element by element the same (special values in every lane)
    const float special[] = {0.5f, 1.5f, 2.5f, -2.5f, -3.5f, 0.3f, 127.5f, 1e30f, -128.4f, -1e30f, INFINITY, -INFINITY,
                             NAN, -0.0f, 126.49f, -127.51f, 3.0f};
    enum { N = 101 };
    float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = special[i % QF_ARRAY_LEN(special)] * (i < 50 ? 1.0f : 0.1f);
    qfi_fake_quantize(y, x, N, 127.0f);
    for (int i = 0; i < N; i++) {
        float want = qfi_dequantize_i8(qfi_quantize_f32(x[i], 1.0f), 1.0f);
        ck_assert_msg(memcmp(&y[i], &want, sizeof want) == 0, "x %g: %g, want %g", x[i], y[i], want);
    }
    qfi_fake_quantize_zp(y, x, N, 0.5f, -100); // an asymmetric range: NaN goes to the zero point's level, 0
    for (int i = 0; i < N; i++) {
        float want = qfi_dequantize_i8_zp(qfi_quantize_f32_zp(x[i], 0.5f, -100), 0.5f, -100);
        ck_assert_msg(memcmp(&y[i], &want, sizeof want) == 0, "x %g, zero point -100: %g, want %g", x[i], y[i], want);
    }
}
END_TEST

/* lib/quant_math.h's 1.5*2^23 conversions (conv_igemm.cu's fast epilogue)
 * against the plain ones, on the host where the same inline functions compile. */
START_TEST(magic_conversions_are_exact)
{
    for (int32_t a = -(int32_t)QFI_MAGIC_LIMIT + 1; a < (int32_t)QFI_MAGIC_LIMIT; a++)
        if (qfi_magic_to_f32(QFI_MAGIC_BITS + a) != (float)a) ck_abort_msg("accumulator %d", a);
    for (int r = -128; r <= 127; r++) {
        ck_assert(qfi_magic_u8_to_f32((uint32_t)QFI_MAGIC_BITS | ((uint8_t)r ^ 0x80u)) == (float)r);
        for (int z = -128; z <= 127; z++) /* a residual's zero point, and an output's on the rounded level */
            if (qfi_magic_u8_to_f32_zp((uint32_t)QFI_MAGIC_BITS | ((uint8_t)r ^ 0x80u), z) != (float)(r - z) ||
                (int8_t)qfi_magic_round_zp((float)(r - z) + 0.25f, z) != (int8_t)r)
                ck_abort_msg("residual %d, zero point %d", r, z);
    }
    /* rounding: a fine grid over the int8 range, every tie and its neighbours */
    for (int32_t k = -128 * 4096; k <= 127 * 4096; k++) {
        const float v = (float)k / 4096.0f;
        ck_assert_int_eq((int8_t)qfi_magic_round(v), (int8_t)rintf(v));
        ck_assert_int_eq(qfi_round_i8(v), (int8_t)rintf(v));
    }
    for (int k = -128; k < 127; k++) {
        const float t = (float)k + 0.5f, v[3] = {nextafterf(t, -INFINITY), t, nextafterf(t, INFINITY)};
        for (int j = 0; j < 3; j++) ck_assert_int_eq((int8_t)qfi_magic_round(v[j]), (int8_t)rintf(v[j]));
    }
    ck_assert_int_eq((int8_t)qfi_magic_round(-0.0f), 0);
    ck_assert_int_eq((int8_t)qfi_magic_round(1e-30f), 0);
}
END_TEST

/* conv_igemm.cu's epilogue as the GPU computes it -- accumulators started at
 * QFI_MAGIC_BITS + bias, the residual byte through the magic, the result's
 * low byte -- equals qfi_requantize bit for bit, with and without the zero
 * points of the residual and the output (quant --asymmetric). */
START_TEST(magic_epilogue_matches_requantize)
{
    uint32_t seed = 12345;
    for (int t = 0; t < 20000; t++) {
        seed = seed * 1664525u + 1013904223u;
        const int32_t acc = (int32_t)(seed >> 11) - (1 << 20), bias = (int32_t)(seed % 4001) - 2000;
        const int8_t r = (int8_t)(seed >> 3);
        const float s_w = 1e-3f * (float)(1 + seed % 97), s_out = 0.05f + 1e-3f * (float)(seed % 13);
        const bool zp = t % 4 >= 2;
        const int32_t z_r = zp ? (int8_t)(seed >> 17) : 0, z_out = zp ? (int8_t)(seed >> 24) : 0;
        float m;
        qfi_requant rq;
        qfi_requant_init(&rq, &m, 1, 0.02f, &s_w, &bias, t % 2 ? 0.07f : 0.0f, z_r, QF_I8, s_out, z_out,
                         t % 3 == 0 ? QF_ACT_RELU : t % 3 == 1 ? QF_ACT_CLIP : QF_ACT_NONE, 0.0f, 6.0f);
        int8_t want;
        const bool res = t % 2;
        qfi_requantize(&rq, &acc, res ? &r : NULL, 1, 0, 0, &want);
        const float rf = qfi_magic_u8_to_f32_zp((uint32_t)QFI_MAGIC_BITS | ((uint8_t)r ^ 0x80u), rq.z_r);
        const float v = qfi_requant_value(&rq, qfi_magic_to_f32(QFI_MAGIC_BITS + bias + acc), m, res, rf);
        ck_assert_int_eq((int8_t)qfi_magic_round_zp(v, rq.z_out), want);
        /* and the plain helpers every other GPU epilogue stores with */
        ck_assert_int_eq(qfi_requant_level(&rq, qfi_requant_value(&rq, qfi_i2f(acc + bias), m, res,
                                                                  qfi_requant_residual(&rq, r))), want);
    }
}
END_TEST

/* ---- weights -------------------------------------------------------------------- */

START_TEST(weights_per_channel_and_per_tensor)
{
    /* (channels=3, inner=3): a wide channel, a zero channel, a narrow channel */
    const float w[9] = {127.0f, -50.0f, 3.4f, 0.0f, 0.0f, 0.0f, 12.7f, -2.0f, 1.0f};
    int8_t q[9];
    float s[3];
    qfi_quant_weights(w, 1, 3, 3, true, q, s);
    ck_assert(s[0] == 1.0f);
    ck_assert(s[1] == 1.0f); /* a zero channel gets scale 1 */
    ck_assert(s[2] == 12.7f / 127.0f);
    const int8_t want[9] = {127, -50, 3, 0, 0, 0, 127, -20, 10};
    for (int i = 0; i < 9; i++) ck_assert_int_eq(q[i], want[i]);
    qfi_quant_weights(w, 1, 3, 3, false, q, s);
    for (int c = 0; c < 3; c++) ck_assert(s[c] == 1.0f);
    ck_assert_int_eq(q[6], 13);
    ck_assert_int_eq(q[7], -2);
    ck_assert_int_eq(q[8], 1);
    /* (outer=2, channels=2): channels are columns of a (K,N) matrix */
    const float m[4] = {1.0f, 10.0f, -2.0f, 5.0f};
    int8_t qm[4];
    float sm[2];
    qfi_quant_weights(m, 2, 2, 1, true, qm, sm);
    ck_assert(sm[0] == 2.0f / 127.0f && sm[1] == 10.0f / 127.0f);
    ck_assert_int_eq(qm[2], -127);
    ck_assert_int_eq(qm[1], 127);
    ck_assert_int_eq(qm[3], 64); /* 63.5 up to even */
    /* every weight is within half a step of its quantized value */
    float big[64], sb[4];
    int8_t qb[64];
    for (int i = 0; i < 64; i++) big[i] = frand(-3, 3) * (float)(i / 16 + 1);
    qfi_quant_weights(big, 1, 4, 16, true, qb, sb);
    for (int i = 0; i < 64; i++) ck_assert(fabsf(qb[i] * sb[i / 16] - big[i]) <= sb[i / 16] * 0.5f * 1.0001f);
}
END_TEST

START_TEST(bias_quantization)
{
    ck_assert_int_eq(qfi_quant_bias(1.0f, 0.5f, 0.25f), 8);
    ck_assert_int_eq(qfi_quant_bias(0.3125f, 0.5f, 0.25f), 2);  /* 2.5 -> 2 */
    ck_assert_int_eq(qfi_quant_bias(0.4375f, 0.5f, 0.25f), 4);  /* 3.5 -> 4 */
    ck_assert_int_eq(qfi_quant_bias(-0.3125f, 0.5f, 0.25f), -2);
    ck_assert_int_eq(qfi_quant_bias(1e30f, 1e-3f, 1e-3f), 1 << 30);
    ck_assert_int_eq(qfi_quant_bias(-1e30f, 1e-3f, 1e-3f), -(1 << 30));
}
END_TEST

/* ---- graphs ----------------------------------------------------------------------- */

/* x (2,3,8,8) -> Conv 3x3 (8 ch, one all zero) -> Relu -> MaxPool 2x2 -> Conv 3x3 (4 ch) -> y */
static qf_graph *chain_net(uint64_t seed)
{
    rng = seed;
    qf_graph *g = qf_graph_new("chain");
    int x = input(g, "x", 4, (int64_t[]){2, 3, 8, 8});
    int w1 = weight(g, "w1", 4, (int64_t[]){8, 3, 3, 3}, -0.5f, 0.5f);
    float *w1d = g->values[w1].data;
    for (int i = 2 * 27; i < 3 * 27; i++) w1d[i] = 0.0f; /* channel 2: zero weights */
    int b1 = weight(g, "b1", 1, (int64_t[]){8}, -0.2f, 0.2f);
    int w2 = weight(g, "w2", 4, (int64_t[]){4, 8, 3, 3}, -0.3f, 0.3f);
    int b2 = weight(g, "b2", 1, (int64_t[]){4}, -0.2f, 0.2f);
    int c1 = value(g, "c1"), r1 = value(g, "r1"), p1 = value(g, "p1"), y = value(g, "y");
    conv_node(g, "conv1", x, w1, b1, c1, 1, 1);
    op(g, "relu1", QF_OP_RELU, 1, (int[]){c1}, r1);
    qf_node *mp = op(g, "pool1", QF_OP_MAX_POOL, 1, (int[]){r1}, p1);
    set_ints(mp, "kernel_shape", 2, (int64_t[]){2, 2});
    set_ints(mp, "strides", 2, (int64_t[]){2, 2});
    conv_node(g, "conv2", p1, w2, b2, y, 1, 1);
    output(g, y);
    prepare_graph(g, 2);
    return g;
}

static float table_amax(const qf_calib_table *t, const char *name)
{
    int i = qf_calib_table_find(t, name);
    ck_assert_msg(i >= 0, "no table entry %s", name);
    return t->entries[i].amax[QF_CALIB_MINMAX];
}

static int find_node(const qf_graph *g, qf_op o, int nth)
{
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == o && nth-- == 0) return i;
    return -1;
}

/* ---- an independent INT8 reference (plain loops, written from the spec) -------- */

/* acc (N,M,H,W) = conv of x (N,C,H,W) int8 with w (M,C,3,3) int8, pad 1, stride 1, plus bias. */
static void ref_conv3x3(const int8_t *x, int N, int C, int H, int W, const int8_t *w, int M, const int32_t *b,
                        int32_t *acc)
{
    for (int n = 0; n < N; n++)
        for (int m = 0; m < M; m++)
            for (int i = 0; i < H; i++)
                for (int j = 0; j < W; j++) {
                    int32_t s = b[m];
                    for (int c = 0; c < C; c++)
                        for (int ki = 0; ki < 3; ki++)
                            for (int kj = 0; kj < 3; kj++) {
                                int ii = i + ki - 1, jj = j + kj - 1;
                                if (ii < 0 || ii >= H || jj < 0 || jj >= W) continue;
                                s += w[((m * C + c) * 3 + ki) * 3 + kj] * x[((n * C + c) * H + ii) * W + jj];
                            }
                    acc[((n * M + m) * H + i) * W + j] = s;
                }
}

/* x (8,2,8,8) -> 1x1 Conv to 3 channels, bias 0.1 -> y: a layer whose input a
 * low threshold clips, so INT8 shifts each channel's mean. */
static qf_graph *clipped_conv(void)
{
    qf_graph *g = qf_graph_new("clipped.onnx");
    int x = input(g, "x", 4, (int64_t[]){8, 2, 8, 8});
    rng = 5;
    int w = weight(g, "w", 4, (int64_t[]){3, 2, 1, 1}, 0.2f, 1.0f);
    int b = weight(g, "b", 1, (int64_t[]){3}, 0.1f, 0.1f);
    int y = value(g, "y");
    conv_node(g, "conv", x, w, b, y, 0, 1);
    output(g, y);
    prepare_graph(g, 8);
    return g;
}

/* Per channel of y (8,3,8,8): the mean of a - r. */
static void channel_mean_error(const float *a, const float *r, double mean[3])
{
    for (int c = 0; c < 3; c++) {
        double s = 0.0;
        for (int n = 0; n < 8; n++)
            for (int i = 0; i < 64; i++) s += (double)a[(n * 3 + c) * 64 + i] - (double)r[(n * 3 + c) * 64 + i];
        mean[c] = s / (8 * 64);
    }
}

START_TEST(bias_correction_removes_the_mean_error)
{
    qf_graph *ref = clipped_conv();
    float *x = random_input(ref, 3, 0.0f, 2.0f);
    float *y32 = run(ref, x, NULL, NULL);
    qf_calib_table *t = calibrate_minmax(ref, x);
    t->entries[qf_calib_table_find(t, "x")].amax[QF_CALIB_MINMAX] = 1.0f; /* clips x above 1 */
    qf_quant_opts o;
    qf_quant_opts_init(&o);
    qf_bias_fix *fix;
    OK(qf_bias_fix_create(ref, t, &o, 1, &fix));
    ck_assert_int_eq(qf_bias_fix_layers(fix), 1);
    OK(qf_bias_fix_run(fix, x, 8));
    double before[3], after[3];
    for (int k = 0; k < 2; k++) {
        qf_graph *g = clipped_conv();
        o.bias_fix = k ? fix : NULL;
        OK(qf_quantize(g, t, &o, NULL));
        float *y8 = run(g, x, NULL, NULL);
        channel_mean_error(y8, y32, k ? after : before);
        free(y8);
        qf_graph_free(g);
    }
    for (int c = 0; c < 3; c++) {
        // clipping x (uniform on [0, 2]) at 1 takes 0.25 * (w0 + w1) >= 0.1 off every channel's mean...
        ck_assert_double_lt(before[c], -0.09);
        // ...which the correction puts back, to the rounding of the int32 bias and the output
        ck_assert_double_lt(fabs(after[c]), 0.01);
    }
    qf_bias_fix_free(fix);
    qf_calib_table_free(t);
    free(x);
    free(y32);
    qf_graph_free(ref);
}
END_TEST

/* x (16,8,8,8) -> Conv 3x3 in 2 groups to 8 channels -> Relu -> y, with every
 * input value on x's INT8 grid (k / 127, the table's threshold 1): INT8 holds
 * the input exactly, and the layer's error is its weights' rounding alone. */
static qf_graph *grid_conv(void)
{
    qf_graph *g = qf_graph_new("grid.onnx");
    int x = input(g, "x", 4, (int64_t[]){16, 8, 8, 8});
    rng = 9;
    int w = weight(g, "w", 4, (int64_t[]){8, 4, 3, 3}, -1.0f, 1.0f);
    int b = weight(g, "b", 1, (int64_t[]){8}, -0.5f, 0.5f);
    int c = value(g, "c"), y = value(g, "y");
    conv_node(g, "conv", x, w, b, c, 1, 2);
    op(g, "relu", QF_OP_RELU, 1, (int[]){c}, y);
    output(g, y);
    prepare_graph(g, 16);
    return g;
}

/* Images whose channels and neighbouring pixels are correlated, as real
 * activations are (with independent values round to nearest is the best
 * rounding on average: nothing is left to learn), on the INT8 grid of [-1, 1]. */
static float *grid_input(const qf_graph *g, uint64_t seed)
{
    float *x = random_input(g, seed, -1.0f, 1.0f); /* the noise */
    for (int n = 0; n < 16; n++) {
        const float a = frand(0.0f, 6.3f), b = frand(0.0f, 6.3f);
        for (int c = 0; c < 8; c++) {
            const float gain = frand(0.3f, 0.8f);
            for (int i = 0; i < 64; i++) {
                float *v = &x[(n * 8 + c) * 64 + i];
                *v = gain * sinf(0.7f * (float)(i / 8) + a) * cosf(0.5f * (float)(i % 8) + b) + 0.2f * *v;
                *v = rintf(*v * 127.0f) / 127.0f;
            }
        }
    }
    return x;
}

static double mse(const float *a, const float *r, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += ((double)a[i] - r[i]) * ((double)a[i] - r[i]);
    return s / (double)n;
}

static void keep_layer(void *user, int index, int total, const qf_adaround_layer *l)
{
    *(qf_adaround_layer *)user = *l;
    ck_assert_int_eq(total, 1);
    ck_assert_int_eq(index, 0);
}

START_TEST(learned_rounding_beats_nearest)
{
    qf_graph *ref = grid_conv();
    float *x = grid_input(ref, 21), *fresh = grid_input(ref, 22);
    float *y32 = run(ref, fresh, NULL, NULL);
    const int64_t n = qf_value_numel(&ref->values[ref->outputs[0]]);
    qf_calib_table *t = calibrate_minmax(ref, x);
    t->entries[qf_calib_table_find(t, "x")].amax[QF_CALIB_MINMAX] = 1.0f;
    qf_quant_opts o;
    qf_quant_opts_init(&o);
    qf_adaround *r;
    OK(qf_adaround_create(ref, t, &o, &(qf_adaround_opts){.iterations = 300, .images = 16, .threads = 2}, &r));
    ck_assert_int_eq(qf_adaround_layers(r), 1);
    OK(qf_adaround_run(r, x, 16));
    qf_adaround_layer info = {0};
    OK(qf_adaround_learn(r, keep_layer, &info));
    ck_assert_str_eq(info.node, "conv");
    ck_assert_int_eq(info.weights, 8 * 4 * 9);
    ck_assert_int_eq(info.channels, 8);
    ck_assert_int_eq(info.positions, 16 * 64); // every position of every image (the sample's cap is larger)
    ck_assert_int_gt(info.learned, 0);
    ck_assert_double_lt(info.error, 0.8 * info.nearest_error);
    double err[2];
    for (int k = 0; k < 2; k++) {
        qf_graph *g = grid_conv();
        o.adaround = k ? r : NULL;
        OK(qf_quantize(g, t, &o, NULL));
        const qf_node *conv = node_named(g, "conv");
        ck_assert(conv && conv->precision == QF_PREC_INT8);
        const int8_t *wq = g->values[conv->in[1]].data;
        const float *s = g->values[conv->in[3]].data, *w = ref->values[node_named(ref, "conv")->in[1]].data;
        int moved = 0;
        for (int i = 0; i < 8 * 36; i++) {
            // rounding only: each weight at the floor or the ceiling of w / s
            const float v = w[i] / s[i / 36];
            ck_assert_msg(wq[i] == floorf(v) || wq[i] == ceilf(v), "weight %d: %d for %g", i, wq[i], v);
            moved += wq[i] != qfi_quantize_f32(w[i], s[i / 36]);
        }
        ck_assert_int_eq(moved > 0, k); // round to nearest without the learned rounding
        float *y8 = run(g, fresh, NULL, NULL);
        err[k] = mse(y8, y32, n);
        if (k) { // the .qfm keeps the learned weights: loaded again, it computes the same
            char path[] = "/tmp/qforge-test-adaround-XXXXXX";
            int fd = mkstemp(path);
            ck_assert_int_ge(fd, 0);
            close(fd);
            OK(qf_qfm_write(g, NULL, path));
            qf_graph *back;
            OK(qf_qfm_read(path, 16, &back, NULL));
            unlink(path);
            float *yb = run(back, fresh, NULL, NULL);
            ck_assert(memcmp(yb, y8, (size_t)n * sizeof *yb) == 0);
            free(yb);
            qf_graph_free(back);
        }
        free(y8);
        qf_graph_free(g);
    }
    // on images it never saw, the output is closer to FP32's than round to nearest brings it
    ck_assert_msg(err[1] < 0.8 * err[0], "MSE %g learned, %g nearest", err[1], err[0]);
    qf_adaround_free(r);
    qf_calib_table_free(t);
    free(x);
    free(fresh);
    free(y32);
    qf_graph_free(ref);
}
END_TEST

START_TEST(int8_chain_exact_and_close_to_fp32)
{
    qf_graph *ref = chain_net(7), *g = chain_net(7);
    float *x = random_input(g, 99, -1, 1);
    qf_calib_table *t = calibrate_minmax(g, x);
    float *y32 = run(ref, x, NULL, NULL);
    qf_quant_opts o;
    qf_quant_opts_init(&o);
    o.asymmetric = false; /* the symmetric rule: scale = amax / 127 */
    qf_quant_summary sum;
    qf_status st = qf_quantize(g, t, &o, &sum);
    ck_assert_msg(st == QF_OK, "%s", qf_error_message());

    /* structure: Quantize(x), conv1+relu (INT8), pool (INT8), conv2 (INT8, f32 out) */
    ck_assert_int_eq(g->n_nodes, 4);
    ck_assert_int_eq(sum.nodes[QF_PREC_INT8], 3);
    ck_assert_int_eq(sum.fused, 1);
    ck_assert_int_eq(sum.conversions, 1);
    const qf_node *q = &g->nodes[0], *c1 = &g->nodes[1], *pool = &g->nodes[2], *c2 = &g->nodes[3];
    ck_assert_int_eq(q->op, QF_OP_QUANTIZE_LINEAR);
    ck_assert_int_eq(c1->op, QF_OP_CONV);
    ck_assert_int_eq(c1->precision, QF_PREC_INT8);
    ck_assert_int_eq(c1->act, QF_ACT_RELU);
    ck_assert_int_eq(pool->precision, QF_PREC_INT8);
    ck_assert_int_eq(c2->precision, QF_PREC_INT8);
    const qf_value *xq = &g->values[c1->in[0]], *r1 = &g->values[c1->out[0]], *p1 = &g->values[pool->out[0]];
    ck_assert_str_eq(r1->name, "r1"); /* conv1 writes the Relu's output */
    ck_assert_int_eq(r1->dtype, QF_I8);
    ck_assert_int_eq(p1->dtype, QF_I8);
    ck_assert(xq->scale == qf_calib_scale(table_amax(t, "x")));
    ck_assert(r1->scale == qf_calib_scale(table_amax(t, "r1")));
    ck_assert(p1->scale == r1->scale); /* max-pool passes the scale through */
    ck_assert_int_eq(g->values[c2->out[0]].dtype, QF_F32);
    ck_assert_str_eq(g->values[c2->out[0]].name, "y");
    const float *s1 = g->values[c1->in[3]].data;
    ck_assert(s1[2] == 1.0f); /* the zero channel */
    ck_assert_int_eq(((const int32_t *)g->values[c1->in[2]].data)[2],
                     qfi_quant_bias(((const float *)ref->values[qf_graph_find_value(ref, "b1")].data)[2], xq->scale, 1.0f));

    float *y8 = run(g, x, NULL, NULL);

    /* bit-exact against the reference */
    enum { N = 2, C = 3, H = 8, M1 = 8, M2 = 4, HP = 4 };
    int8_t xi[N * C * H * H], a1[N * M1 * H * H], a2[N * M1 * HP * HP];
    int32_t acc1[N * M1 * H * H], acc2[N * M2 * HP * HP];
    for (int i = 0; i < N * C * H * H; i++) {
        float v = rintf(x[i] / xq->scale);
        xi[i] = (int8_t)(v > 127 ? 127 : v < -128 ? -128 : v);
    }
    ref_conv3x3(xi, N, C, H, H, g->values[c1->in[1]].data, M1, g->values[c1->in[2]].data, acc1);
    for (int i = 0; i < N * M1 * H * H; i++) {
        int c = i / (H * H) % M1;
        float m = xq->scale * s1[c] / r1->scale;
        float v = (float)acc1[i] * m;
        v = rintf(v);
        a1[i] = (int8_t)(v < 0 ? 0 : v > 127 ? 127 : v);
    }
    for (int nc = 0; nc < N * M1; nc++)
        for (int i = 0; i < HP; i++)
            for (int j = 0; j < HP; j++) {
                int8_t mx = -128;
                for (int di = 0; di < 2; di++)
                    for (int dj = 0; dj < 2; dj++) {
                        int8_t v = a1[(nc * H + 2 * i + di) * H + 2 * j + dj];
                        if (v > mx) mx = v;
                    }
                a2[(nc * HP + i) * HP + j] = mx;
            }
    ref_conv3x3(a2, N, M1, HP, HP, g->values[c2->in[1]].data, M2, g->values[c2->in[2]].data, acc2);
    const float *s2 = g->values[c2->in[3]].data;
    for (int i = 0; i < N * M2 * HP * HP; i++) {
        int c = i / (HP * HP) % M2;
        float want = (float)acc2[i] * (p1->scale * s2[c]);
        ck_assert_msg(y8[i] == want, "element %d: engine %.9g, reference %.9g", i, y8[i], want);
    }

    /* against FP32: a bound derived from the quantization steps. Per stage the
     * error of a dot product is at most ||w||_1 * (input error) + ||w_q*s_w - w||_1
     * * max|input| (weight rounding) + |b_q*s_in*s_w - b| (bias rounding); a
     * requantized output adds s_out/2; ReLU and max-pool do not increase it
     * (1-Lipschitz); minmax calibration on these very images means no clipping. */
    const float *w1f = ref->values[qf_graph_find_value(ref, "w1")].data;
    const float *w2f = ref->values[qf_graph_find_value(ref, "w2")].data;
    const float *b1f = ref->values[qf_graph_find_value(ref, "b1")].data;
    const float *b2f = ref->values[qf_graph_find_value(ref, "b2")].data;
    const int8_t *w1q = g->values[c1->in[1]].data, *w2q = g->values[c2->in[1]].data;
    const int32_t *b1q = g->values[c1->in[2]].data, *b2q = g->values[c2->in[2]].data;
    float xmax = table_amax(t, "x"), amax1 = table_amax(t, "r1");
    double e_x = xq->scale / 2, e1 = 0;
    for (int m = 0; m < M1; m++) {
        double l1 = 0, dw = 0;
        for (int k = 0; k < 27; k++) {
            l1 += fabs(w1f[m * 27 + k]);
            dw += fabs(w1q[m * 27 + k] * s1[m] - w1f[m * 27 + k]);
        }
        double e = l1 * e_x + dw * (xmax + e_x) + fabs(b1q[m] * (double)xq->scale * s1[m] - b1f[m]);
        if (e > e1) e1 = e;
    }
    e1 += r1->scale / 2;
    double worst = 0, bound_worst = 0;
    for (int i = 0; i < N * M2 * HP * HP; i++) {
        int c = i / (HP * HP) % M2;
        double l1 = 0, dw = 0;
        for (int k = 0; k < 72; k++) {
            l1 += fabs(w2f[c * 72 + k]);
            dw += fabs(w2q[c * 72 + k] * s2[c] - w2f[c * 72 + k]);
        }
        double bound = l1 * e1 + dw * (amax1 + e1) + fabs(b2q[c] * (double)p1->scale * s2[c] - b2f[c]);
        bound = bound * 1.001 + 1e-5; /* FP32 rounding of the sums */
        double err = fabs(y8[i] - y32[i]);
        ck_assert_msg(err <= bound, "element %d: |%.6g - %.6g| exceeds %.6g", i, y8[i], y32[i], bound);
        if (err > worst) worst = err;
        if (bound > bound_worst) bound_worst = bound;
    }
    /* it did run in INT8: the result is not the FP32 one */
    ck_assert(worst > 1e-4 && worst < bound_worst);
    /* and the typical error is far below the worst case: 8-bit steps give ~40 dB per stage */
    double db = sqnr_db(y32, y8, N * M2 * HP * HP);
    ck_assert_msg(db > 30.0, "SQNR %.1f dB", db);
    free(x), free(y8), free(y32);
    qf_calib_table_free(t);
    qf_graph_free(g);
    qf_graph_free(ref);
}
END_TEST

/* x -> Conv 1x1 with bias -> y, as FP16 and through FP32 on half-rounded data */
/* Per-layer SQNR of chain_net quantized with the threshold of r1 (conv1+relu's
 * output) multiplied by `spoil`, on x, with zero points where `asymmetric`;
 * the comparison counts the first `valid` images of the batch. Returns the
 * rows (worst first) and the quantized output. */
static qf_layer_sqnr *per_layer_of(const float *x, float spoil, int valid, bool asymmetric, int *n, float **y8)
{
    qf_graph *ref = chain_net(7), *g = chain_net(7);
    qf_calib_table *t = calibrate_minmax(ref, x);
    t->entries[qf_calib_table_find(t, "r1")].amax[QF_CALIB_MINMAX] *= spoil;
    qf_quant_opts o;
    qf_quant_opts_init(&o);
    o.asymmetric = asymmetric;
    OK(qf_quantize(g, t, &o, NULL));
    if (asymmetric) ck_assert_int_ne(g->values[qf_graph_find_value(g, "r1")].zero_point, 0);
    qf_layer_cmp *c;
    OK(qf_layer_cmp_create(g, ref, &c));
    qf_layer_cmp_set_batch_valid(c, valid);
    *y8 = run(g, x, qf_layer_cmp_observe_quantized, c); /* the quantized graph first */
    free(run(ref, x, qf_layer_cmp_observe_reference, c));
    qf_layer_sqnr *rows;
    OK(qf_layer_cmp_results(c, &rows, n));
    for (int i = 1; i < *n; i++) ck_assert(rows[i - 1].sqnr_db <= rows[i].sqnr_db);
    /* names and nodes come from the quantized graph, which must outlive them: copy */
    for (int i = 0; i < *n; i++) {
        rows[i].tensor = strdup(rows[i].tensor);
        rows[i].node = strdup(rows[i].node);
    }
    qf_layer_cmp_free(c);
    qf_calib_table_free(t);
    qf_graph_free(g);
    qf_graph_free(ref);
    return rows;
}

static qf_layer_sqnr *per_layer(const float *x, float spoil, int valid, int *n, float **y8)
{
    return per_layer_of(x, spoil, valid, false, n, y8);
}

static const qf_layer_sqnr *row_named(const qf_layer_sqnr *rows, int n, const char *tensor)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(rows[i].tensor, tensor)) return &rows[i];
    ck_abort_msg("no per-layer row for %s", tensor);
    return NULL;
}

static void rows_free(qf_layer_sqnr *rows, int n)
{
    for (int i = 0; i < n; i++) {
        free((char *)rows[i].tensor);
        free((char *)rows[i].node);
    }
    free(rows);
}

START_TEST(per_layer_sqnr_finds_the_bad_layer)
{
    qf_graph *ref = chain_net(7);
    float *x = random_input(ref, 99, -1, 1);
    float *y32 = run(ref, x, NULL, NULL);
    const int64_t y_per_image = qf_value_numel(&ref->values[ref->outputs[0]]) / 2;
    int n_good, n_bad, n_one;
    float *y_good, *y_bad, *y_one;
    qf_layer_sqnr *good = per_layer(x, 1.0f, 0, &n_good, &y_good);
    qf_layer_sqnr *bad = per_layer(x, 16.0f, 0, &n_bad, &y_bad);
    qf_layer_sqnr *one = per_layer(x, 16.0f, 1, &n_one, &y_one);
    /* the INT8 values conv1+relu, the pool and conv2 write (x's INT8 copy is renamed) */
    ck_assert_int_eq(n_good, 3);
    ck_assert_int_eq(n_bad, 3);
    const qf_layer_sqnr *r1 = row_named(good, n_good, "r1");
    ck_assert_str_eq(r1->node, "conv1");
    ck_assert_int_eq(r1->op, QF_OP_CONV);
    ck_assert_int_eq(r1->dtype, QF_I8);
    ck_assert_int_eq(r1->elements, 2 * 8 * 8 * 8);
    for (int i = 0; i < n_good; i++) ck_assert_double_gt(good[i].sqnr_db, 30.0);
    // a 16x threshold costs r1 about 22 dB (40.6 -> 18.2) and makes it the worst tensor
    ck_assert_str_eq(bad[0].tensor, "r1");
    ck_assert_double_lt(bad[0].sqnr_db, r1->sqnr_db - 18.0);
    // the output's row is the SQNR of the output itself, over the whole batch or the first image
    ck_assert_double_eq_tol(row_named(good, n_good, "y")->sqnr_db, sqnr_db(y32, y_good, 2 * y_per_image), 1e-9);
    ck_assert_double_eq_tol(row_named(bad, n_bad, "y")->sqnr_db, sqnr_db(y32, y_bad, 2 * y_per_image), 1e-9);
    ck_assert_int_eq(row_named(one, n_one, "y")->elements, y_per_image);
    ck_assert_double_eq_tol(row_named(one, n_one, "y")->sqnr_db, sqnr_db(y32, y_one, y_per_image), 1e-9);
    rows_free(good, n_good);
    rows_free(bad, n_bad);
    rows_free(one, n_one);
    free(y_good);
    free(y_bad);
    free(y_one);
    free(y32);
    free(x);
    qf_graph_free(ref);
}
END_TEST

/* An INT8 tensor with a zero point is compared as (q - z) * s: a ReLU output
 * at zero point -128 is as close to FP32 as the symmetric one, or closer. */
START_TEST(per_layer_sqnr_counts_zero_points)
{
    qf_graph *ref = chain_net(7);
    float *x = random_input(ref, 99, -1, 1);
    int n_sym, n_asym;
    float *y_sym, *y_asym;
    qf_layer_sqnr *sym = per_layer(x, 1.0f, 0, &n_sym, &y_sym);
    qf_layer_sqnr *asym = per_layer_of(x, 1.0f, 0, true, &n_asym, &y_asym);
    ck_assert_int_eq(n_asym, n_sym);
    const double r1_sym = row_named(sym, n_sym, "r1")->sqnr_db, r1_asym = row_named(asym, n_asym, "r1")->sqnr_db;
    ck_assert_msg(r1_asym > 30.0 && r1_asym > r1_sym - 1.0, "r1: %.1f dB with a zero point, %.1f without", r1_asym,
                  r1_sym);
    rows_free(sym, n_sym);
    rows_free(asym, n_asym);
    free(y_sym);
    free(y_asym);
    free(x);
    qf_graph_free(ref);
}
END_TEST

/* Four Relu outputs, each read by one conv: a dense 3x3 with padding (r1), a
 * depthwise 3x3 with padding (r2), a 1x1 (r3) and a dense 3x3 without
 * padding (r4). */
static qf_graph *zp_readers_net(void)
{
    rng = 11;
    qf_graph *g = qf_graph_new("zp_readers");
    int x = input(g, "x", 4, (int64_t[]){2, 3, 8, 8});
    static const struct { const char *r, *y; int64_t m, cg, k; int pad, group; } rd[] = {
        {"r1", "y1", 4, 8, 3, 1, 1}, {"r2", "y2", 8, 1, 3, 1, 8}, {"r3", "y3", 4, 8, 1, 0, 1}, {"r4", "y4", 4, 8, 3, 0, 1}};
    for (int i = 0; i < 4; i++) {
        char name[16];
        snprintf(name, sizeof name, "c%d", i);
        int c = value(g, name), r = value(g, rd[i].r);
        char wname[24];
        snprintf(wname, sizeof wname, "w%s", name);
        int w = weight(g, wname, 4, (int64_t[]){8, 3, 3, 3}, -0.5f, 0.5f);
        conv_node(g, name, x, w, -1, c, 1, 1);
        snprintf(name, sizeof name, "relu%d", i);
        op(g, name, QF_OP_RELU, 1, (int[]){c}, r);
        snprintf(name, sizeof name, "w%s", rd[i].y);
        int w2 = weight(g, name, 4, (int64_t[]){rd[i].m, rd[i].cg, rd[i].k, rd[i].k}, -0.3f, 0.3f), y = value(g, rd[i].y);
        conv_node(g, rd[i].y, r, w2, -1, y, rd[i].pad, rd[i].group);
        output(g, y);
    }
    prepare_graph(g, 2);
    return g;
}

/* --zero-points unpadded: every Relu output gets its zero point but the one a
 * dense conv reads with padding; `all` gives each one, `none` none. */
START_TEST(zero_points_unpadded)
{
    qf_graph *ref = zp_readers_net();
    float *x = random_input(ref, 5, -1, 1);
    qf_calib_table *t = calibrate_minmax(ref, x);
    static const char *const r[] = {"r1", "r2", "r3", "r4"};
    for (int mode = 0; mode < 3; mode++) { /* none, all, unpadded */
        qf_graph *g = zp_readers_net();
        qf_quant_opts o;
        qf_quant_opts_init(&o);
        o.method = QF_CALIB_MINMAX;
        o.asymmetric = mode > 0;
        o.asymmetric_unpadded = mode == 2;
        OK(qf_quantize(g, t, &o, NULL));
        for (int i = 0; i < 4; i++) {
            const qf_value *v = &g->values[qf_graph_find_value(g, r[i])];
            ck_assert_int_eq(v->dtype, QF_I8);
            const bool want = mode == 1 || (mode == 2 && i > 0);
            ck_assert_msg((v->zero_point != 0) == want, "mode %d: %s has zero point %d", mode, r[i], (int)v->zero_point);
        }
        qf_graph_free(g);
    }
    qf_calib_table_free(t);
    free(x);
    qf_graph_free(ref);
}
END_TEST

START_TEST(fp16_matches_rounding)
{
    rng = 3;
    qf_graph *g = qf_graph_new("fp16");
    int x = input(g, "x", 4, (int64_t[]){2, 5, 6, 6});
    int w = weight(g, "w", 4, (int64_t[]){7, 5, 3, 3}, -1, 1);
    int b = weight(g, "b", 1, (int64_t[]){7}, -1, 1);
    int y = value(g, "y");
    conv_node(g, "conv", x, w, b, y, 1, 1);
    output(g, y);
    prepare_graph(g, 2);
    /* the reference graph holds the half-rounded weights in f32 */
    rng = 3;
    qf_graph *r = qf_graph_new("fp16ref");
    x = input(r, "x", 4, (int64_t[]){2, 5, 6, 6});
    w = weight(r, "w", 4, (int64_t[]){7, 5, 3, 3}, -1, 1);
    b = weight(r, "b", 1, (int64_t[]){7}, -1, 1);
    for (int v = w; v <= b; v++) {
        float *d = r->values[v].data;
        for (int64_t i = 0; i < qf_value_numel(&r->values[v]); i++) d[i] = qf_f16_to_f32(qf_f32_to_f16(d[i]));
    }
    y = value(r, "y");
    conv_node(r, "conv", x, w, b, y, 1, 1);
    output(r, y);
    prepare_graph(r, 2);

    float *xin = random_input(g, 5, -3, 3), *xh = malloc(2 * 5 * 36 * sizeof(float));
    for (int i = 0; i < 2 * 5 * 36; i++) xh[i] = qf_f16_to_f32(qf_f32_to_f16(xin[i]));
    qf_quant_opts o;
    qf_quant_opts_init(&o);
    o.precision = QF_PREC_FP16;
    qf_quant_summary sum;
    ck_assert_int_eq(qf_quantize(g, NULL, &o, &sum), QF_OK);
    /* Cast(x) -> Conv FP16 -> Cast(y) */
    ck_assert_int_eq(g->n_nodes, 3);
    ck_assert_int_eq(sum.conversions, 2);
    ck_assert_int_eq(sum.nodes[QF_PREC_FP16], 1);
    const qf_node *cv = &g->nodes[1];
    ck_assert_int_eq(cv->precision, QF_PREC_FP16);
    ck_assert_int_eq(g->values[cv->in[1]].dtype, QF_F16);
    ck_assert_int_eq(g->values[cv->out[0]].dtype, QF_F16);
    ck_assert_int_eq(g->values[g->outputs[0]].dtype, QF_F32);
    float *y16 = run(g, xin, NULL, NULL), *yr = run(r, xh, NULL, NULL);
    for (int i = 0; i < 2 * 7 * 36; i++) {
        float want = qf_f16_to_f32(qf_f32_to_f16(yr[i]));
        ck_assert_msg(y16[i] == want, "element %d: %.9g vs %.9g", i, y16[i], want);
    }
    free(xin), free(xh), free(y16), free(yr);
    qf_graph_free(g);
    qf_graph_free(r);
}
END_TEST

START_TEST(fp16_chain_close_to_fp32)
{
    qf_graph *ref = chain_net(11), *g = chain_net(11);
    float *x = random_input(g, 12, -1, 1);
    qf_quant_opts o;
    qf_quant_opts_init(&o);
    o.precision = QF_PREC_FP16;
    ck_assert_int_eq(qf_quantize(g, NULL, &o, NULL), QF_OK);
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op != QF_OP_CAST) ck_assert_int_eq(g->nodes[i].precision, QF_PREC_FP16);
    float *y32 = run(ref, x, NULL, NULL), *y16 = run(g, x, NULL, NULL);
    /* half storage: relative steps of 2^-11 at each of ~4 roundings */
    double db = sqnr_db(y32, y16, 2 * 4 * 16);
    ck_assert_msg(db > 55.0, "SQNR %.1f dB", db);
    free(x), free(y32), free(y16);
    qf_graph_free(g);
    qf_graph_free(ref);
}
END_TEST

/* x -> ConvA -> Relu -> ra ; x -> ConvB -> cb ; Concat(ra, cb) -> MaxPool -> Flatten
 * -> Gemm (alpha 0.5, beta 2, transB) -> out */
static qf_graph *concat_net(uint64_t seed)
{
    rng = seed;
    qf_graph *g = qf_graph_new("concat");
    int x = input(g, "x", 4, (int64_t[]){3, 4, 8, 8});
    int wa = weight(g, "wa", 4, (int64_t[]){4, 4, 3, 3}, -0.4f, 0.4f);
    int wb = weight(g, "wb", 4, (int64_t[]){4, 4, 1, 1}, -2.0f, 2.0f);
    int bb = weight(g, "bb", 1, (int64_t[]){4}, -0.5f, 0.5f);
    int wg = weight(g, "wg", 2, (int64_t[]){10, 128}, -0.2f, 0.2f);
    int bg = weight(g, "bg", 1, (int64_t[]){10}, -0.5f, 0.5f);
    int ca = value(g, "ca"), ra = value(g, "ra"), cb = value(g, "cb"), cc = value(g, "cc"), mp = value(g, "mp"),
        fl = value(g, "fl"), out = value(g, "out");
    conv_node(g, "convA", x, wa, -1, ca, 1, 1);
    op(g, "reluA", QF_OP_RELU, 1, (int[]){ca}, ra);
    conv_node(g, "convB", x, wb, bb, cb, 0, 1);
    qf_node *cat = op(g, "cat", QF_OP_CONCAT, 2, (int[]){ra, cb}, cc);
    set_int(cat, "axis", 1);
    qf_node *p = op(g, "pool", QF_OP_MAX_POOL, 1, (int[]){cc}, mp);
    set_ints(p, "kernel_shape", 2, (int64_t[]){2, 2});
    set_ints(p, "strides", 2, (int64_t[]){2, 2});
    op(g, "flat", QF_OP_FLATTEN, 1, (int[]){mp}, fl);
    qf_node *gm = op(g, "fc", QF_OP_GEMM, 3, (int[]){fl, wg, bg}, out);
    set_float(gm, "alpha", 0.5f);
    set_float(gm, "beta", 2.0f);
    set_int(gm, "transB", 1);
    output(g, out);
    prepare_graph(g, 3);
    return g;
}

/* concat_net's minmax table from random input (seed 22), which *x receives. */
static qf_calib_table *concat_table(float **x)
{
    qf_graph *g = concat_net(21);
    *x = random_input(g, 22, -1, 1);
    qf_calib_table *t = calibrate_minmax(g, *x);
    qf_graph_free(g);
    return t;
}

START_TEST(scales_shared_through_concat_pool_flatten)
{
    qf_graph *ref = concat_net(21), *g = concat_net(21);
    float *x;
    qf_calib_table *t = concat_table(&x);
    float *y32 = run(ref, x, NULL, NULL);
    qf_quant_summary sum;
    ck_assert_int_eq(qf_quantize(g, t, NULL, &sum), QF_OK);
    ck_assert_int_eq(sum.conversions, 1); /* one Quantize of x, shared by both convs */
    ck_assert_int_eq(sum.nodes[QF_PREC_INT8], 6);
    ck_assert_int_eq(sum.nodes[QF_PREC_FP16] + sum.nodes[QF_PREC_FP32], 0);
    float amax = fmaxf(table_amax(t, "ra"), table_amax(t, "cb"));
    const char *shared[] = {"ra", "cb", "cc", "mp", "fl"};
    for (int i = 0; i < 5; i++) {
        const qf_value *v = &g->values[qf_graph_find_value(g, shared[i])];
        ck_assert_int_eq(v->dtype, QF_I8);
        ck_assert_msg(v->scale == qf_calib_scale(amax), "%s has scale %g", shared[i], v->scale);
    }
    int fc = find_node(g, QF_OP_GEMM, 0);
    ck_assert_int_ge(fc, 0);
    ck_assert_int_eq(g->nodes[fc].precision, QF_PREC_INT8);
    ck_assert(((const qfi_gemm_params *)g->nodes[fc].params)->alpha == 1.0f);
    float *y8 = run(g, x, NULL, NULL);
    double db = sqnr_db(y32, y8, 3 * 10);
    ck_assert_msg(db > 25.0, "SQNR %.1f dB", db);
    /* per-tensor weights are coarser, but still work */
    qf_graph *g2 = concat_net(21);
    qf_quant_opts o;
    qf_quant_opts_init(&o);
    o.per_tensor_weights = true;
    ck_assert_int_eq(qf_quantize(g2, t, &o, NULL), QF_OK);
    const qf_node *cb = &g2->nodes[find_node(g2, QF_OP_CONV, 1)];
    const float *sc = g2->values[cb->in[3]].data;
    for (int c = 1; c < 4; c++) ck_assert(sc[c] == sc[0]);
    float *yt = run(g2, x, NULL, NULL);
    ck_assert_msg(sqnr_db(y32, yt, 30) > 15.0, "per-tensor SQNR %.1f dB", sqnr_db(y32, yt, 30));
    free(x), free(y8), free(y32), free(yt);
    qf_calib_table_free(t);
    qf_graph_free(g);
    qf_graph_free(g2);
    qf_graph_free(ref);
}
END_TEST

START_TEST(missing_table_entry_is_an_error)
{
    qf_graph *g = concat_net(21);
    float *x;
    qf_calib_table *t = concat_table(&x);
    int i = qf_calib_table_find(t, "cb");
    ck_assert_int_ge(i, 0);
    free(t->entries[i].name);
    t->entries[i].name = strdup("renamed");
    int nodes = g->n_nodes;
    qf_status st = qf_quantize(g, t, NULL, NULL);
    ck_assert_int_eq(st, QF_ERR_INVALID);
    ck_assert_msg(strstr(qf_error_message(), "'cb'") != NULL, "%s", qf_error_message());
    ck_assert_ptr_null(strchr(qf_error_message(), '\n'));
    ck_assert_int_eq(g->n_nodes, nodes); /* untouched */
    for (int k = 0; k < g->n_nodes; k++) ck_assert_int_eq(g->nodes[k].precision, QF_PREC_FP32);
    /* and a method the table did not record */
    qf_quant_opts o;
    qf_quant_opts_init(&o);
    o.method = QF_CALIB_ENTROPY;
    ck_assert_int_eq(qf_quantize(g, t, &o, NULL), QF_ERR_USAGE);
    ck_assert_int_eq(qf_quantize(g, NULL, NULL, NULL), QF_ERR_USAGE);
    free(x);
    qf_calib_table_free(t);
    qf_graph_free(g);
}
END_TEST

/* x -> Conv -> Relu -> r ; depthwise Conv(r) -> Add(., r) -> Relu -> out ;
 * and a MatMul + bias Add branch: flat(r) -> MatMul -> Add b -> out2 */
static qf_graph *residual_net(uint64_t seed)
{
    rng = seed;
    qf_graph *g = qf_graph_new("residual");
    int x = input(g, "x", 4, (int64_t[]){2, 4, 6, 6});
    int w1 = weight(g, "w1", 4, (int64_t[]){4, 4, 3, 3}, -0.4f, 0.4f);
    int w2 = weight(g, "w2", 4, (int64_t[]){4, 1, 3, 3}, -0.6f, 0.6f);
    int b2 = weight(g, "b2", 1, (int64_t[]){4}, -0.3f, 0.3f);
    int c1 = value(g, "c1"), r = value(g, "r"), c2 = value(g, "c2"), s = value(g, "s"), out = value(g, "out");
    conv_node(g, "conv1", x, w1, -1, c1, 1, 1);
    op(g, "relu1", QF_OP_RELU, 1, (int[]){c1}, r);
    conv_node(g, "dw", r, w2, b2, c2, 1, 4);
    op(g, "add", QF_OP_ADD, 2, (int[]){c2, r}, s);
    op(g, "relu2", QF_OP_RELU, 1, (int[]){s}, out);
    output(g, out);
    int fl = value(g, "fl"), mm = value(g, "mm"), out2 = value(g, "out2");
    int wm = weight(g, "wm", 2, (int64_t[]){144, 5}, -0.1f, 0.1f);
    int bm = weight(g, "bm", 1, (int64_t[]){5}, -1, 1);
    op(g, "flat", QF_OP_FLATTEN, 1, (int[]){r}, fl);
    op(g, "mm", QF_OP_MATMUL, 2, (int[]){fl, wm}, mm);
    op(g, "bias", QF_OP_ADD, 2, (int[]){mm, bm}, out2);
    output(g, out2);
    prepare_graph(g, 2);
    return g;
}

START_TEST(residual_and_bias_fusion)
{
    qf_graph *ref = residual_net(31), *g = residual_net(31);
    float *x = random_input(g, 32, -1, 1);
    qf_calib_table *t = calibrate_minmax(g, x);
    qf_quant_summary sum;
    ck_assert_int_eq(qf_quantize(g, t, NULL, &sum), QF_OK);
    ck_assert_int_eq(sum.fused, 4); /* relu1; add + relu2; bias add */
    int dw = find_node(g, QF_OP_CONV, 1);
    const qf_node *n = &g->nodes[dw];
    ck_assert_int_eq(n->n_in, 5);
    ck_assert_int_eq(n->act, QF_ACT_RELU);
    ck_assert_str_eq(g->values[n->in[4]].name, "r");
    ck_assert_str_eq(g->values[n->out[0]].name, "out");
    ck_assert_int_eq(g->values[n->out[0]].dtype, QF_F32); /* a graph output: float straight from the epilogue */
    int mm = find_node(g, QF_OP_MATMUL, 0);
    ck_assert_int_eq(g->nodes[mm].precision, QF_PREC_INT8);
    ck_assert_str_eq(g->values[g->nodes[mm].out[0]].name, "out2");
    ck_assert_int_eq(find_node(g, QF_OP_ADD, 0), -1);
    ck_assert_int_eq(find_node(g, QF_OP_RELU, 0), -1);
    /* run both outputs against FP32 */
    qf_engine_opts eo = {.device = QF_DEVICE_CPU, .threads = 2};
    qf_engine *e8, *e32;
    ck_assert_int_eq(qf_engine_create(g, &eo, &e8), QF_OK);
    ck_assert_int_eq(qf_engine_create(ref, &eo, &e32), QF_OK);
    memcpy(qf_engine_input(e8, 0), x, 2 * 4 * 36 * sizeof(float));
    memcpy(qf_engine_input(e32, 0), x, 2 * 4 * 36 * sizeof(float));
    ck_assert_int_eq(qf_engine_run(e8), QF_OK);
    ck_assert_int_eq(qf_engine_run(e32), QF_OK);
    double db1 = sqnr_db(qf_engine_output(e32, 0), qf_engine_output(e8, 0), 2 * 4 * 36);
    double db2 = sqnr_db(qf_engine_output(e32, 1), qf_engine_output(e8, 1), 2 * 5);
    ck_assert_msg(db1 > 30.0 && db2 > 30.0, "SQNR %.1f / %.1f dB", db1, db2);
    qf_engine_free(e8);
    qf_engine_free(e32);
    free(x);
    qf_calib_table_free(t);
    qf_graph_free(g);
    qf_graph_free(ref);
}
END_TEST

/* A pre-norm transformer block, x (2, 5, 8) tokens: h = MatMul(LayerNorm(x), W) + b,
 * s = x + h, out = LayerNorm(s). With `ln_reads_stream` the residual stream x and s are
 * read by LayerNorms and the Add stays out of the MatMul's INT8 epilogue;
 * without (the last LayerNorm replaced by a Relu and x read by a Relu) it is fused. */
static qf_graph *prenorm_block(bool ln_reads_stream)
{
    rng = 77;
    qf_graph *g = qf_graph_new("prenorm");
    int x = input(g, "x", 3, (int64_t[]){2, 5, 8});
    int gam = weight(g, "gamma", 1, (int64_t[]){8}, 0.5f, 1.5f), bet = weight(g, "beta", 1, (int64_t[]){8}, -0.2f, 0.2f);
    int w = weight(g, "w", 2, (int64_t[]){8, 8}, -0.4f, 0.4f), b = weight(g, "b", 1, (int64_t[]){8}, -0.1f, 0.1f);
    int ln = value(g, "ln"), mm = value(g, "mm"), h = value(g, "h"), s = value(g, "s"), out = value(g, "out");
    if (ln_reads_stream)
        op(g, "ln1", QF_OP_LAYER_NORM, 3, (int[]){x, gam, bet}, ln);
    else
        op(g, "relu1", QF_OP_RELU, 1, (int[]){x}, ln);
    op(g, "fc", QF_OP_MATMUL, 2, (int[]){ln, w}, mm);
    op(g, "bias", QF_OP_ADD, 2, (int[]){mm, b}, h);
    op(g, "residual", QF_OP_ADD, 2, (int[]){x, h}, s);
    if (ln_reads_stream)
        op(g, "ln2", QF_OP_LAYER_NORM, 3, (int[]){s, gam, bet}, out);
    else
        op(g, "relu2", QF_OP_RELU, 1, (int[]){s}, out);
    output(g, out);
    prepare_graph(g, 2);
    return g;
}

/* SQNR of output 0 of quantized g against ref (FP32) on the CPU engine, both
 * fed x (n_in floats); output 0 has n_out elements. */
static double cpu_output_sqnr(const qf_graph *g, const qf_graph *ref, const float *x, int64_t n_in, int64_t n_out)
{
    qf_engine_opts eo = {.device = QF_DEVICE_CPU, .threads = 1};
    qf_engine *e8, *e32;
    ck_assert_int_eq(qf_engine_create(g, &eo, &e8), QF_OK);
    ck_assert_int_eq(qf_engine_create(ref, &eo, &e32), QF_OK);
    memcpy(qf_engine_input(e8, 0), x, (size_t)n_in * sizeof(float));
    memcpy(qf_engine_input(e32, 0), x, (size_t)n_in * sizeof(float));
    ck_assert_int_eq(qf_engine_run(e8), QF_OK);
    ck_assert_int_eq(qf_engine_run(e32), QF_OK);
    const double db = sqnr_db(qf_engine_output(e32, 0), qf_engine_output(e8, 0), n_out);
    qf_engine_free(e8);
    qf_engine_free(e32);
    return db;
}

/* Two branches x -> MatMul + bias -> Relu, added: no epilogue takes a
 * residual after its activation, so the Add stands alone with two int8
 * operands. It is INT8 (the requantizing role: YOLOv8's bottleneck Adds),
 * unless a LayerNorm reads the sum (`ln_reads_sum`), as on a transformer's
 * residual stream. */
static qf_graph *two_branch_add(bool ln_reads_sum)
{
    rng = 91;
    qf_graph *g = qf_graph_new("two_branch_add");
    int x = input(g, "x", 3, (int64_t[]){2, 5, 8});
    int s = value(g, "s"), out = value(g, "out");
    int y[2];
    for (int k = 0; k < 2; k++) {
        char n[4][16];
        snprintf(n[0], 16, "w%d", k), snprintf(n[1], 16, "b%d", k), snprintf(n[2], 16, "fc%d", k), snprintf(n[3], 16, "h%d", k);
        int w = weight(g, n[0], 2, (int64_t[]){8, 8}, -0.4f, 0.4f), b = weight(g, n[1], 1, (int64_t[]){8}, -0.1f, 0.1f);
        int mm = value(g, n[2]), h = value(g, n[3]);
        op(g, n[2], QF_OP_MATMUL, 2, (int[]){x, w}, mm);
        op(g, n[3], QF_OP_ADD, 2, (int[]){mm, b}, h);
        y[k] = value(g, k ? "r1" : "r0");
        op(g, k ? "r1" : "r0", QF_OP_RELU, 1, (int[]){h}, y[k]);
    }
    op(g, "sum", QF_OP_ADD, 2, (int[]){y[0], y[1]}, s);
    if (ln_reads_sum) {
        int gam = weight(g, "gamma", 1, (int64_t[]){8}, 0.5f, 1.5f), bet = weight(g, "beta", 1, (int64_t[]){8}, -0.2f, 0.2f);
        op(g, "ln", QF_OP_LAYER_NORM, 3, (int[]){s, gam, bet}, out);
    } else {
        int w = weight(g, "w2", 2, (int64_t[]){8, 8}, -0.4f, 0.4f);
        op(g, "fc2", QF_OP_MATMUL, 2, (int[]){s, w}, out);
    }
    output(g, out);
    prepare_graph(g, 2);
    return g;
}

START_TEST(add_of_two_activations_is_int8)
{
    for (int ln = 0; ln < 2; ln++) {
        qf_graph *ref = two_branch_add(ln), *g = two_branch_add(ln);
        float *x = random_input(g, 80, -1, 1);
        qf_calib_table *t = calibrate_minmax(g, x);
        ck_assert_int_eq(qf_quantize(g, t, NULL, NULL), QF_OK);
        int add = -1;
        for (int i = 0; i < g->n_nodes; i++)
            if (g->nodes[i].op == QF_OP_ADD && !strcmp(g->nodes[i].name, "sum")) add = i;
        ck_assert_int_ge(add, 0);
        ck_assert_int_eq(g->nodes[add].precision, ln ? QF_PREC_FP16 : QF_PREC_INT8);
        const double db = cpu_output_sqnr(g, ref, x, 80, 80);
        ck_assert_msg(db > 30.0, "two-branch Add, LayerNorm %d: SQNR %.1f dB", ln, db);
        free(x);
        qf_calib_table_free(t);
        qf_graph_free(g);
        qf_graph_free(ref);
    }
}
END_TEST

START_TEST(residual_stream_of_layer_norms_stays_float)
{
    for (int ln = 0; ln < 2; ln++) {
        qf_graph *ref = prenorm_block(ln), *g = prenorm_block(ln);
        float *x = random_input(g, 80, -1, 1);
        qf_calib_table *t = calibrate_minmax(g, x);
        ck_assert_int_eq(qf_quantize(g, t, NULL, NULL), QF_OK);
        const int mm = find_node(g, QF_OP_MATMUL, 0), add = find_node(g, QF_OP_ADD, 0);
        ck_assert_int_eq(g->nodes[mm].precision, QF_PREC_INT8);
        if (ln) { /* the residual Add is its own float node; the MatMul has no residual input */
            ck_assert_int_ge(add, 0);
            ck_assert_int_ne(g->nodes[add].precision, QF_PREC_INT8);
            ck_assert_int_lt(g->nodes[mm].n_in, 5);
        } else {
            ck_assert_int_eq(add, -1);
        }
        const double db = cpu_output_sqnr(g, ref, x, 80, 80);
        ck_assert_msg(db > 30.0, "LayerNorm stream %d: SQNR %.1f dB", ln, db);
        free(x);
        qf_calib_table_free(t);
        qf_graph_free(g);
        qf_graph_free(ref);
    }
}
END_TEST

/* ---- attention's MatMuls of two activations (quant's int8_attention) ----------------- */

static int i64s(qf_graph *g, const char *name, int n, const int64_t *v)
{
    int c = qf_graph_add_value(g, name, QF_I64, 1, (int64_t[]){n});
    int64_t *d = malloc((size_t)n * sizeof *d);
    memcpy(d, v, (size_t)n * sizeof *d);
    g->values[c].data = d;
    g->values[c].flags |= QF_VALUE_CONST;
    return c;
}

/* Linear layer: MatMul(x, W (k, n)) + b. */
static int linear(qf_graph *g, const char *name, int x, int64_t k, int64_t n)
{
    char wn[64], bn[64], mn[64], yn[64];
    snprintf(wn, sizeof wn, "%s.w", name), snprintf(bn, sizeof bn, "%s.b", name);
    snprintf(mn, sizeof mn, "%s.mm", name), snprintf(yn, sizeof yn, "%s.y", name);
    int w = weight(g, wn, 2, (int64_t[]){k, n}, -0.5f, 0.5f), b = weight(g, bn, 1, (int64_t[]){n}, -0.1f, 0.1f);
    int m = value(g, mn), y = value(g, yn);
    op(g, mn, QF_OP_MATMUL, 2, (int[]){x, w}, m);
    op(g, yn, QF_OP_ADD, 2, (int[]){m, b}, y);
    return y;
}

static int transpose(qf_graph *g, const char *name, int x, const int64_t perm[4])
{
    int y = value(g, name);
    set_ints(op(g, name, QF_OP_TRANSPOSE, 1, (int[]){x}, y), "perm", 4, perm);
    return y;
}

static int reshape(qf_graph *g, const char *name, int x, int nd, const int64_t *shape)
{
    char sn[64];
    snprintf(sn, sizeof sn, "%s.shape", name);
    int y = value(g, name);
    op(g, name, QF_OP_RESHAPE, 2, (int[]){x, i64s(g, sn, nd, shape)}, y);
    return y;
}

/* An attention block on x (2 images, 6 tokens, 16 features), 2 heads of 8:
 * Q, K from Linear layers split into heads (2, 2, 6, 8), scores "qk" =
 * Q x K^T (4-D batched), scaled, Softmax, "av" = P x V, V one head shared by
 * both (multi-query: V (2, 1, 6, 8) broadcast over the heads), heads merged,
 * output projection. */
static qf_graph *attention_block(void)
{
    rng = 131;
    qf_graph *g = qf_graph_new("attention");
    g->opset = 13;
    int x = input(g, "x", 3, (int64_t[]){2, 6, 16});
    static const int64_t heads[4] = {0, 6, 2, 8}, to_bhtd[4] = {0, 2, 1, 3}, to_bhdt[4] = {0, 2, 3, 1};
    int q = transpose(g, "q.t", reshape(g, "q.r", linear(g, "q", x, 16, 16), 4, heads), to_bhtd);
    int kt = transpose(g, "k.t", reshape(g, "k.r", linear(g, "k", x, 16, 16), 4, heads), to_bhdt);
    int v = reshape(g, "v.r", linear(g, "v", x, 16, 8), 4, (int64_t[]){0, 1, 6, 8});
    int qk = value(g, "qk"), sc = value(g, "scaled"), p = value(g, "p"), av = value(g, "av");
    op(g, "qk", QF_OP_MATMUL, 2, (int[]){q, kt}, qk);
    op(g, "scale", QF_OP_MUL, 2, (int[]){qk, weight(g, "rsqrt_d", 0, NULL, 0.35355339f, 0.35355339f)}, sc);
    set_int(op(g, "softmax", QF_OP_SOFTMAX, 1, (int[]){sc}, p), "axis", -1);
    op(g, "av", QF_OP_MATMUL, 2, (int[]){p, v}, av);
    int merged = reshape(g, "merge", transpose(g, "av.t", av, to_bhtd), 3, (int64_t[]){0, 6, 16});
    output(g, linear(g, "proj", merged, 16, 16));
    prepare_graph(g, 2);
    return g;
}

/* ---- smooth activations in the epilogue --------------------------------------------- */

/* x (2,8,6,6) -> A 3x3 -> Mul(Sigmoid(a), a) = ya -> B depthwise 3x3 -> Mul(b,
 * Sigmoid(b)) = yb -> C 1x1 -> HardSwish = yc -> D 1x1 -> Mul(d, HardSigmoid(d))
 * (HardSwish's constants) = yd -> E 3x3 -> Sigmoid = ye -> F 1x1 -> Mul(f,
 * Sigmoid(f)) = out, where Sigmoid(f) is also a graph output (not fusable).
 * ya..ye are graph outputs too, so that each layer's int8 output can be read. */
static qf_graph *smooth_net(uint64_t seed)
{
    rng = seed;
    qf_graph *g = qf_graph_new("smooth");
    int x = input(g, "x", 4, (int64_t[]){2, 8, 6, 6});
    int wa = weight(g, "wa", 4, (int64_t[]){8, 8, 3, 3}, -0.3f, 0.3f), ba = weight(g, "ba", 1, (int64_t[]){8}, -0.5f, 0.5f);
    int wb = weight(g, "wb", 4, (int64_t[]){8, 1, 3, 3}, -0.8f, 0.8f), bb = weight(g, "bb", 1, (int64_t[]){8}, -0.5f, 0.5f);
    int wc = weight(g, "wc", 4, (int64_t[]){8, 8, 1, 1}, -0.9f, 0.9f);
    int wd = weight(g, "wd", 4, (int64_t[]){8, 8, 1, 1}, -0.9f, 0.9f), bd = weight(g, "bd", 1, (int64_t[]){8}, -1, 1);
    int we = weight(g, "we", 4, (int64_t[]){8, 8, 3, 3}, -0.3f, 0.3f);
    int wf = weight(g, "wf", 4, (int64_t[]){4, 8, 1, 1}, -0.9f, 0.9f);
    int a = value(g, "a"), sa = value(g, "sa"), ya = value(g, "ya"), b = value(g, "b"), sb = value(g, "sb");
    int yb = value(g, "yb"), c = value(g, "c"), yc = value(g, "yc"), d = value(g, "d"), hd = value(g, "hd");
    int yd = value(g, "yd"), e = value(g, "e"), ye = value(g, "ye"), f = value(g, "f"), sf = value(g, "sf");
    int out = value(g, "out");
    conv_node(g, "A", x, wa, ba, a, 1, 1);
    op(g, "sig_a", QF_OP_SIGMOID, 1, (int[]){a}, sa);
    op(g, "mul_a", QF_OP_MUL, 2, (int[]){sa, a}, ya);
    conv_node(g, "B", ya, wb, bb, b, 1, 8);
    op(g, "sig_b", QF_OP_SIGMOID, 1, (int[]){b}, sb);
    op(g, "mul_b", QF_OP_MUL, 2, (int[]){b, sb}, yb);
    conv_node(g, "C", yb, wc, -1, c, 0, 1);
    op(g, "hswish_c", QF_OP_HARD_SWISH, 1, (int[]){c}, yc);
    conv_node(g, "D", yc, wd, bd, d, 0, 1);
    qf_node *hs = op(g, "hsig_d", QF_OP_HARD_SIGMOID, 1, (int[]){d}, hd);
    set_float(hs, "alpha", 1.0f / 6.0f);
    set_float(hs, "beta", 0.5f);
    op(g, "mul_d", QF_OP_MUL, 2, (int[]){d, hd}, yd);
    conv_node(g, "E", yd, we, -1, e, 1, 1);
    op(g, "sig_e", QF_OP_SIGMOID, 1, (int[]){e}, ye);
    conv_node(g, "F", ye, wf, -1, f, 0, 1);
    op(g, "sig_f", QF_OP_SIGMOID, 1, (int[]){f}, sf);
    op(g, "mul_f", QF_OP_MUL, 2, (int[]){f, sf}, out);
    const int outs[7] = {ya, yb, yc, yd, ye, out, sf};
    for (int k = 0; k < 7; k++) output(g, outs[k]);
    prepare_graph(g, 2);
    return g;
}

typedef struct product_seen {
    const qf_node *n;
    void *a, *b, *y;
} product_seen;

static void keep_product(void *user, const qf_graph *g, int v, const void *data)
{
    product_seen *ps = user;
    const int vals[3] = {ps->n->in[0], ps->n->in[1], ps->n->out[0]};
    void **dst[3] = {&ps->a, &ps->b, &ps->y};
    for (int k = 0; k < 3; k++)
        if (v == vals[k]) {
            size_t bytes = qf_value_bytes(&g->values[v]);
            *dst[k] = malloc(bytes);
            memcpy(*dst[k], data, bytes);
        }
}

static int float_list_mentions;
static void count_attention_lines(void *user, qf_log_level level, const char *msg)
{
    if (strstr(msg, "activation x activation")) float_list_mentions++;
}

START_TEST(int8_attention_products)
{
    qf_graph *ref = attention_block();
    float *x = random_input(ref, 7, -1.0f, 1.0f);
    const int64_t ny = 2 * 6 * 16;
    qf_calib_table *t = calibrate_minmax(ref, x);
    float *y32 = run(ref, x, NULL, NULL);
    for (int on = 0; on < 3; on++) { /* off, on, on with zero points (--asymmetric: Softmax's output) */
        qf_graph *g = attention_block();
        qf_quant_opts o;
        qf_quant_opts_init(&o);
        o.int8_attention = on > 0;
        o.asymmetric = on == 2;
        qf_quant_summary sum;
        float_list_mentions = 0;
        qf_log_set(count_attention_lines, NULL, QF_LOG_INFO);
        OK(qf_quantize(g, t, &o, &sum));
        qf_log_set(NULL, NULL, QF_LOG_WARN);
        /* without the option the two MatMuls stay float and quant lists them; with it they do not */
        ck_assert_int_eq(float_list_mentions, on ? 0 : 1);
        const qf_node *qk = node_named(g, "qk"), *av = node_named(g, "av");
        ck_assert_ptr_nonnull(qk);
        ck_assert_ptr_nonnull(av);
        ck_assert_int_eq(qk->precision, on ? QF_PREC_INT8 : QF_PREC_FP16);
        ck_assert_int_eq(av->precision, on ? QF_PREC_INT8 : QF_PREC_FP16);
        ck_assert_int_eq(node_named(g, "q.mm")->precision, QF_PREC_INT8);
        float *y8 = run(g, x, NULL, NULL);
        /* Per-tensor INT8 of x, the Linear outputs, the probabilities and the
         * heads, each near 45 dB on these small uniform tensors, compounds to
         * about 40 dB at the output, with or without the option (measured:
         * 40.1, 39.1, 40.3 with zero points); 30 dB leaves room for other roundings
         * and still fails a wrong multiplier, scale or zero point (those
         * leave single digits). */
        double db = sqnr_db(y32, y8, ny);
        ck_assert_msg(db > 30.0, "int8_attention %d: SQNR %.1f dB", on, db);
        if (on) {
            ck_assert_int_eq(qk->n_in, 2);
            ck_assert_int_eq(g->values[qk->in[0]].dtype, QF_I8);
            ck_assert_int_eq(g->values[qk->in[1]].dtype, QF_I8);
            /* with --asymmetric the probabilities (Softmax: [0, 1]) carry a zero point */
            ck_assert_int_eq(g->values[av->in[0]].zero_point != 0, on == 2);
            /* av's readers (Transpose, Reshape) are INT8 pass-through ops into the projection: int8 */
            ck_assert_int_eq(g->values[av->out[0]].dtype, QF_I8);
            /* qk's reader (the scaling Mul) is float: FP16 straight from the epilogue */
            ck_assert_int_eq(g->values[qk->out[0]].dtype, QF_F16);
            /* both products bit for bit against an int64 reference and the shared epilogue */
            const qf_node *prods[2] = {qk, av};
            for (int k = 0; k < 2; k++) {
                product_seen ps = {.n = prods[k]};
                float *yy = run(g, x, keep_product, &ps);
                free(yy);
                ck_assert_ptr_nonnull(ps.a);
                ck_assert_ptr_nonnull(ps.b);
                ck_assert_ptr_nonnull(ps.y);
                qfi_matmul_geom geo;
                OK(qfi_matmul_geometry(g, prods[k], &geo));
                const qf_value *A = &g->values[prods[k]->in[0]], *B = &g->values[prods[k]->in[1]],
                               *Y = &g->values[prods[k]->out[0]];
                float m;
                qfi_requant rq;
                qfi_requant_init(&rq, &m, 1, A->scale, &B->scale, NULL, 0.0f, 0, Y->dtype, Y->scale, Y->zero_point,
                                 QF_ACT_NONE, 0.0f, 0.0f);
                ck_assert_float_eq(m, A->scale * B->scale / (Y->dtype == QF_I8 ? Y->scale : 1.0f));
                const int64_t nb = qfi_numel(geo.nbatch, geo.batch);
                const size_t es = qf_dtype_info(Y->dtype)->size;
                unsigned char want[16];
                for (int64_t i = 0, mism = 0; i < nb; i++) {
                    int64_t ia = 0, ib = 0, rest = i;
                    for (int d = geo.nbatch - 1; d >= 0; d--) {
                        ia += rest % geo.batch[d] * geo.a_stride[d];
                        ib += rest % geo.batch[d] * geo.b_stride[d];
                        rest /= geo.batch[d];
                    }
                    for (int64_t r = 0; r < geo.M; r++)
                        for (int64_t c = 0; c < geo.N; c++) {
                            int64_t acc = 0;
                            for (int64_t kk = 0; kk < geo.K; kk++)
                                acc += (int64_t)(((int8_t *)ps.a)[(ia * geo.M + r) * geo.K + kk] - A->zero_point) *
                                       (((int8_t *)ps.b)[(ib * geo.K + kk) * geo.N + c] - B->zero_point);
                            qfi_requant_elem(&rq, want, 0, (int32_t)acc, 0, NULL);
                            const int64_t e = (i * geo.M + r) * geo.N + c;
                            mism += memcmp(want, (char *)ps.y + (size_t)e * es, es) != 0;
                        }
                    ck_assert_msg(mism == 0, "%s: %lld elements differ from the integer reference", prods[k]->name,
                                  (long long)mism);
                }
                free(ps.a), free(ps.b), free(ps.y);
            }
            /* the .qfm keeps them: the same nodes, the same bits */
            char path[] = "/tmp/qforge-test-attention-XXXXXX";
            int fd = mkstemp(path);
            ck_assert_int_ge(fd, 0);
            close(fd);
            OK(qf_qfm_write(g, NULL, path));
            qf_graph *back;
            OK(qf_qfm_read(path, 0, &back, NULL));
            unlink(path);
            ck_assert_int_eq(node_named(back, "qk")->precision, QF_PREC_INT8);
            ck_assert_int_eq(node_named(back, "av")->n_in, 2);
            float *yb = run(back, x, NULL, NULL);
            ck_assert_int_eq(memcmp(yb, y8, (size_t)ny * sizeof *yb), 0);
            free(yb);
            qf_graph_free(back);
            /* Q/DQ ONNX: each product a float MatMul between DequantizeLinear and
             * QuantizeLinear, which qforge reads back and runs */
            char onnx[] = "/tmp/qforge-test-attention-onnx-XXXXXX";
            fd = mkstemp(onnx);
            ck_assert_int_ge(fd, 0);
            close(fd);
            OK(qf_export_onnx(g, onnx));
            qf_load_opts lo = {.batch = 2};
            OK(qf_model_load(onnx, &lo, &back));
            unlink(onnx);
            OK(qf_quantize(back, NULL, NULL, NULL));
            yb = run(back, x, NULL, NULL);
            double dbx = sqnr_db(y32, yb, ny);
            ck_assert_msg(dbx > 30.0, "exported Q/DQ model: SQNR %.1f dB", dbx);
            free(yb);
            qf_graph_free(back);
        }
        printf("  attention block, int8_attention %d: SQNR %.2f dB vs FP32, %d INT8 nodes\n", on, db,
               sum.nodes[QF_PREC_INT8]);
        free(y8);
        qf_graph_free(g);
    }
    free(y32);
    free(x);
    qf_calib_table_free(t);
    qf_graph_free(ref);
}
END_TEST

/* Output element i of anchor n (NCHW, stride 1, kernel k, pad k / 2, any
 * group) over the int8 input levels xq: the exact int32 accumulator plus bias. */
static int64_t ref_acc(const qf_graph *g, const qf_node *n, const int8_t *xq, int64_t i)
{
    const qf_value *X = &g->values[n->in[0]], *W = &g->values[n->in[1]], *Y = &g->values[n->out[0]];
    const int64_t C = X->dims[1], H = X->dims[2], Wd = X->dims[3], M = W->dims[0], Cg = W->dims[1], K = W->dims[2];
    const int64_t j = i % Wd, h = i / Wd % H, m = i / (Wd * H) % M, b = i / (Wd * H * M), grp = m / (M / (C / Cg));
    ck_assert_int_eq(Y->dims[1], M);
    const int8_t *w = W->data;
    int64_t s = n->in[2] >= 0 ? ((const int32_t *)g->values[n->in[2]].data)[m] : 0;
    for (int64_t c = 0; c < Cg; c++)
        for (int64_t ki = 0; ki < K; ki++)
            for (int64_t kj = 0; kj < K; kj++) {
                const int64_t ii = h + ki - K / 2, jj = j + kj - K / 2;
                if (ii < 0 || ii >= H || jj < 0 || jj >= Wd) continue;
                s += w[((m * Cg + c) * K + ki) * K + kj] * xq[((b * C + grp * Cg + c) * H + ii) * Wd + jj];
            }
    return s;
}

START_TEST(smooth_activations_fuse)
{
    qf_graph *ref = smooth_net(61), *g = smooth_net(61);
    float *x = random_input(g, 62, -2, 2);
    qf_calib_table *t = calibrate_minmax(g, x);
    qf_quant_summary sum;
    qf_quant_opts o;
    qf_quant_opts_init(&o);
    o.asymmetric = false; /* symmetric outputs: y = level * scale */
    ck_assert_int_eq(qf_quantize(g, t, &o, &sum), QF_OK);
    /* A..E absorb 2 + 2 + 1 + 2 + 1 nodes; F's Sigmoid has a second reader */
    ck_assert_int_eq(sum.fused, 8);
    const qf_act want[6] = {QF_ACT_SILU, QF_ACT_SILU, QF_ACT_HARD_SWISH, QF_ACT_HARD_SWISH, QF_ACT_SIGMOID, QF_ACT_NONE};
    for (int k = 0; k < 6; k++) {
        const int i = find_node(g, QF_OP_CONV, k);
        ck_assert_int_ge(i, 0);
        ck_assert_int_eq(g->nodes[i].precision, QF_PREC_INT8);
        ck_assert_msg(g->nodes[i].act == want[k], "conv %d: act %d, want %d", k, g->nodes[i].act, want[k]);
    }
    ck_assert_int_eq(find_node(g, QF_OP_HARD_SWISH, 0), -1);
    ck_assert_int_eq(find_node(g, QF_OP_HARD_SIGMOID, 0), -1);
    ck_assert_int_ge(find_node(g, QF_OP_SIGMOID, 0), 0); /* F's, unfused */
    ck_assert_int_eq(find_node(g, QF_OP_SIGMOID, 1), -1);
    ck_assert_int_eq(find_node(g, QF_OP_MUL, 1), -1);

    /* each layer over its own int8 input: bit for bit the epilogue, and within
     * one level of the unfused activations in double */
    qf_engine_opts eo = {.device = QF_DEVICE_CPU, .threads = 2};
    qf_engine *e8;
    ck_assert_int_eq(qf_engine_create(g, &eo, &e8), QF_OK);
    memcpy(qf_engine_input(e8, 0), x, qf_value_bytes(&g->values[g->inputs[0]]));
    ck_assert_int_eq(qf_engine_run(e8), QF_OK);
    const qf_node *A = &g->nodes[find_node(g, QF_OP_CONV, 0)];
    const int64_t numel = 2 * 8 * 36;
    int8_t *xq = malloc(numel), *yq = malloc(numel);
    const float s_x = g->values[A->in[0]].scale;
    for (int64_t i = 0; i < numel; i++) xq[i] = qfi_quantize_f32(x[i], s_x);
    int off = 0;
    for (int k = 0; k < 5; k++) {
        const qf_node *n = &g->nodes[find_node(g, QF_OP_CONV, k)];
        const qf_value *X = &g->values[n->in[0]], *Y = &g->values[n->out[0]];
        const float *sw = g->values[n->in[3]].data, *yf = qf_engine_output(e8, k);
        const int64_t ch = g->values[n->in[3]].dims[0];
        float *mm = malloc(ch * sizeof *mm);
        qfi_requant rq;
        qfi_requant_init(&rq, mm, ch, X->scale, sw, NULL, 0.0f, 0, Y->dtype, Y->scale, 0, n->act, 0, 0);
        ck_assert_int_eq(Y->dtype, QF_I8);
        for (int64_t i = 0; i < numel; i++) {
            const int64_t c = i / 36 % 8, acc = ref_acc(g, n, xq, i);
            yq[i] = (int8_t)rintf(yf[i] / Y->scale);
            ck_assert(yf[i] == (float)yq[i] * Y->scale);
            ck_assert_int_eq(yq[i], qfi_round_i8(qfi_requant_acc(&rq, (int32_t)acc, c, false, 0.0f)));
            const double z = (double)acc * X->scale * sw[c];
            const double lvl = fmin(127, fmax(-128, rint(smooth_ref(n->act, z) / Y->scale)));
            ck_assert_msg(fabs(yq[i] - lvl) <= 1.0, "conv %d element %lld: %d, unfused %g", k, (long long)i, yq[i], lvl);
            off += yq[i] != lvl;
        }
        free(mm);
        memcpy(xq, yq, numel);
    }
    ck_assert_int_le(off, numel * 5 / 100);

    /* the .qfm keeps the activations, and the same outputs */
    char path[] = "/tmp/qforge_smooth_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    OK(qf_qfm_write(g, NULL, path));
    qf_graph *back;
    OK(qf_qfm_read(path, 2, &back, NULL));
    unlink(path);
    for (int k = 0; k < 6; k++) ck_assert_int_eq(back->nodes[find_node(back, QF_OP_CONV, k)].act, want[k]);
    qf_engine *eb;
    ck_assert_int_eq(qf_engine_create(back, &eo, &eb), QF_OK);
    memcpy(qf_engine_input(eb, 0), x, qf_value_bytes(&g->values[g->inputs[0]]));
    ck_assert_int_eq(qf_engine_run(eb), QF_OK);
    for (int k = 0; k < 7; k++)
        ck_assert(!memcmp(qf_engine_output(eb, k), qf_engine_output(e8, k), qf_value_bytes(&g->values[g->outputs[k]])));
    /* and the whole net stays close to FP32 */
    float *y32 = run(ref, x, NULL, NULL);
    double db = sqnr_db(y32, qf_engine_output(e8, 0), numel);
    ck_assert_msg(db > 30.0, "SQNR %.1f dB", db);
    qf_engine_free(eb);
    qf_engine_free(e8);
    qf_graph_free(back);
    free(y32), free(xq), free(yq), free(x);
    qf_calib_table_free(t);
    qf_graph_free(g);
    qf_graph_free(ref);
}
END_TEST

/* ---- the fusion planner (lib/fusion.c) with rules of the test's own ------------------ */

typedef struct test_rules {
    int no_residual_for; /* an anchor whose rules refuse residuals, or -1 */
    int offers[QFI_FUSE_LINK_COUNT];
} test_rules;

static bool any_anchor(void *user, const qf_graph *g, int i) { return true; }

static bool test_accept(void *user, const qf_graph *g, const qfi_fusion *f, const qfi_fuse_candidate *c)
{
    test_rules *r = user;
    r->offers[c->link]++;
    return !(c->link == QFI_FUSE_RESIDUAL && f->anchor == r->no_residual_for);
}

/* x -> A (3x3) and B (1x1); Add(B, A) -> Relu -> r; r -> C -> Clip [0, 6] -> out;
 * r -> D -> d (a graph output) -> Relu -> out2; r -> E -> Add(e, e) -> out3 */
static qf_graph *planner_net(void)
{
    rng = 5;
    qf_graph *g = qf_graph_new("planner");
    int x = input(g, "x", 4, (int64_t[]){1, 4, 5, 5});
    int w3[3], w1[2];
    for (int k = 0; k < 3; k++) w3[k] = weight(g, k == 0 ? "wa" : k == 1 ? "wc" : "we", 4, (int64_t[]){4, 4, 3, 3}, -1, 1);
    for (int k = 0; k < 2; k++) w1[k] = weight(g, k == 0 ? "wb" : "wd", 4, (int64_t[]){4, 4, 1, 1}, -1, 1);
    int a = value(g, "a"), b = value(g, "b"), s = value(g, "s"), r = value(g, "r"), c = value(g, "c");
    int out = value(g, "out"), d = value(g, "d"), out2 = value(g, "out2"), e = value(g, "e"), out3 = value(g, "out3");
    int lo = weight(g, "lo", 0, NULL, 0, 0), hi = weight(g, "hi", 0, NULL, 6, 6);
    conv_node(g, "A", x, w3[0], -1, a, 1, 1);
    conv_node(g, "B", x, w1[0], -1, b, 0, 1);
    op(g, "add", QF_OP_ADD, 2, (int[]){b, a}, s);
    op(g, "relu", QF_OP_RELU, 1, (int[]){s}, r);
    conv_node(g, "C", r, w3[1], -1, c, 1, 1);
    op(g, "clip", QF_OP_CLIP, 3, (int[]){c, lo, hi}, out);
    conv_node(g, "D", r, w1[1], -1, d, 0, 1);
    op(g, "relu2", QF_OP_RELU, 1, (int[]){d}, out2);
    conv_node(g, "E", r, w3[2], -1, e, 1, 1);
    op(g, "twice", QF_OP_ADD, 2, (int[]){e, e}, out3);
    output(g, out);
    output(g, d);
    output(g, out2);
    output(g, out3);
    g->opset = 13;
    prepare_graph(g, 1);
    return g;
}

START_TEST(fusion_planner_links_and_rules)
{
    qf_graph *g = planner_net();
    for (int refuse = 0; refuse < 2; refuse++) {
        test_rules tr = {.no_residual_for = refuse ? node_index(g, "A") : -1};
        const qfi_fusion_rules rules = {any_anchor, test_accept, &tr};
        qfi_fusion *fs;
        int n;
        ck_assert_int_eq(qfi_fusion_plan(g, &rules, &fs, &n), QF_OK);
        ck_assert_int_eq(n, 5);
        /* the Add goes to the earlier anchor A unless its rules refuse it; B then takes it */
        const qfi_fusion *takes = &fs[refuse ? 1 : 0], *other = &fs[refuse ? 0 : 1];
        ck_assert_int_eq(takes->anchor, node_index(g, refuse ? "B" : "A"));
        ck_assert_int_eq(takes->node[QFI_FUSE_RESIDUAL], node_index(g, "add"));
        ck_assert_str_eq(g->values[takes->residual].name, refuse ? "a" : "b");
        ck_assert_int_eq(takes->node[QFI_FUSE_RELU], node_index(g, "relu"));
        ck_assert_str_eq(g->values[takes->out].name, "r");
        ck_assert_int_eq(takes->last, node_index(g, "relu"));
        ck_assert_int_eq(other->last, other->anchor);
        ck_assert_int_eq(tr.offers[QFI_FUSE_RESIDUAL], 1 + refuse);
        /* C: the Clip with its constant bounds */
        const qfi_fusion *fc = &fs[2];
        ck_assert_int_eq(fc->node[QFI_FUSE_CLIP], node_index(g, "clip"));
        ck_assert(fc->clip_lo == 0.0f && fc->clip_hi == 6.0f);
        ck_assert_str_eq(g->values[fc->out].name, "out");
        /* D's output is a graph output, E's is read twice: nothing joins them */
        for (int k = 3; k < 5; k++) ck_assert_int_eq(fs[k].last, fs[k].anchor);
        ck_assert_int_eq(tr.offers[QFI_FUSE_BIAS], 0);
        free(fs);
    }
    qf_graph_free(g);
}
END_TEST

/* x -> Conv1 -> Tanh -> Conv2 -> MaxPool -> out: an FP16 island between INT8
 * ops, and an int8 graph output */
START_TEST(int8_fp16_boundaries)
{
    qf_graph *gs[2];
    for (int k = 0; k < 2; k++) {
        rng = 41;
        qf_graph *g = gs[k] = qf_graph_new("mixed");
        int x = input(g, "x", 4, (int64_t[]){2, 3, 8, 8});
        int w1 = weight(g, "w1", 4, (int64_t[]){6, 3, 3, 3}, -0.5f, 0.5f);
        int w2 = weight(g, "w2", 4, (int64_t[]){4, 6, 3, 3}, -0.5f, 0.5f);
        int c1 = value(g, "c1"), sg = value(g, "sg"), c2 = value(g, "c2"), out = value(g, "out");
        conv_node(g, "conv1", x, w1, -1, c1, 1, 1);
        op(g, "tanh", QF_OP_TANH, 1, (int[]){c1}, sg); /* no INT8 form (a Sigmoid would fuse into conv1) */
        conv_node(g, "conv2", sg, w2, -1, c2, 1, 1);
        qf_node *p = op(g, "pool", QF_OP_MAX_POOL, 1, (int[]){c2}, out);
        set_ints(p, "kernel_shape", 2, (int64_t[]){2, 2});
        set_ints(p, "strides", 2, (int64_t[]){2, 2});
        output(g, out);
        prepare_graph(g, 2);
    }
    qf_graph *g = gs[1];
    float *x = random_input(g, 42, -1, 1);
    qf_calib_table *t = calibrate_minmax(g, x);
    qf_quant_summary sum;
    ck_assert_int_eq(qf_quantize(g, t, NULL, &sum), QF_OK);
    /* Quantize(x), conv1 (writes f16 for its only reader), tanh FP16
     * storing int8 for conv2, its only reader (no Quantize between), conv2,
     * pool (int8), Dequantize to the f32 output */
    ck_assert_int_eq(sum.conversions, 2);
    ck_assert_int_eq(sum.nodes[QF_PREC_FP16], 1);
    ck_assert_int_eq(g->values[qf_graph_find_value(g, "c1")].dtype, QF_F16);
    const qf_value *sgv = &g->values[qf_graph_find_value(g, "sg")];
    ck_assert_int_eq(sgv->dtype, QF_I8);
    ck_assert(sgv->scale == qf_calib_scale(table_amax(t, "sg")));
    ck_assert_int_eq(g->nodes[find_node(g, QF_OP_TANH, 0)].precision, QF_PREC_FP16);
    ck_assert_int_eq(g->nodes[g->n_nodes - 1].op, QF_OP_DEQUANTIZE_LINEAR);
    ck_assert_str_eq(g->values[g->nodes[g->n_nodes - 1].out[0]].name, "out");
    const qf_value *pooled = &g->values[g->nodes[g->n_nodes - 1].in[0]];
    ck_assert_int_eq(pooled->dtype, QF_I8);
    ck_assert(pooled->scale == qf_calib_scale(table_amax(t, "c2")));
    float *y32 = run(gs[0], x, NULL, NULL), *y8 = run(g, x, NULL, NULL);
    double db = sqnr_db(y32, y8, 2 * 4 * 16);
    ck_assert_msg(db > 30.0, "SQNR %.1f dB", db);
    free(x), free(y32), free(y8);
    qf_calib_table_free(t);
    qf_graph_free(gs[0]);
    qf_graph_free(gs[1]);
}
END_TEST

/* FP16 keeps FP32 where a calibrated value would overflow half:
 * x -> Conv (large weights) -> Relu -> Conv (tiny weights) -> Relu -> out */
START_TEST(fp16_overflow_stays_fp32)
{
    qf_graph *gs[2];
    for (int k = 0; k < 2; k++) {
        rng = 51;
        qf_graph *g = gs[k] = qf_graph_new("overflow");
        int x = input(g, "x", 4, (int64_t[]){1, 2, 4, 4});
        int w1 = weight(g, "w1", 4, (int64_t[]){3, 2, 3, 3}, 5000.0f, 20000.0f);
        int w2 = weight(g, "w2", 4, (int64_t[]){2, 3, 3, 3}, 1e-5f, 1e-4f);
        int c1 = value(g, "c1"), r1 = value(g, "r1"), c2 = value(g, "c2"), out = value(g, "out");
        conv_node(g, "conv1", x, w1, -1, c1, 1, 1);
        op(g, "relu1", QF_OP_RELU, 1, (int[]){c1}, r1);
        conv_node(g, "conv2", r1, w2, -1, c2, 1, 1);
        op(g, "relu2", QF_OP_RELU, 1, (int[]){c2}, out);
        output(g, out);
        prepare_graph(g, 1);
    }
    qf_graph *g = gs[1];
    float *x = random_input(g, 52, 0.5f, 1);
    qf_calib_table *t = calibrate_minmax(g, x);
    ck_assert(table_amax(t, "r1") > 65504.0f);
    qf_quant_opts o;
    qf_quant_opts_init(&o);
    o.precision = QF_PREC_FP16;
    ck_assert_int_eq(qf_quantize(g, t, &o, NULL), QF_OK);
    const char *fp32[] = {"conv1", "relu1", "conv2"};
    for (int i = 0; i < g->n_nodes; i++) {
        const qf_node *n = &g->nodes[i];
        if (n->op == QF_OP_CAST) continue;
        bool want32 = false;
        for (int k = 0; k < 3; k++) want32 |= strcmp(n->name, fp32[k]) == 0;
        ck_assert_msg(n->precision == (want32 ? QF_PREC_FP32 : QF_PREC_FP16), "node %s is %s", n->name,
                      qf_precision_name(n->precision));
    }
    float *y32 = run(gs[0], x, NULL, NULL), *y16 = run(g, x, NULL, NULL);
    for (int i = 0; i < 2 * 16; i++) ck_assert(isfinite(y16[i]));
    ck_assert_msg(sqnr_db(y32, y16, 2 * 16) > 50.0, "SQNR %.1f dB", sqnr_db(y32, y16, 2 * 16));
    /* without a table nothing is known to overflow: all FP16, and the result is Inf */
    qf_graph *blind = gs[0];
    ck_assert_int_eq(qf_quantize(blind, NULL, &o, NULL), QF_OK);
    float *yb = run(blind, x, NULL, NULL);
    bool any_inf = false;
    for (int i = 0; i < 2 * 16; i++) any_inf |= !isfinite(yb[i]);
    ck_assert(any_inf);
    free(x), free(y32), free(y16), free(yb);
    qf_calib_table_free(t);
    qf_graph_free(gs[0]);
    qf_graph_free(gs[1]);
}
END_TEST

START_TEST(qdq_nodes_roundtrip)
{
    /* an imported-style QuantizeLinear with a scale input and a zero point of 0 */
    qf_graph *g = qf_graph_new("qdq");
    int x = input(g, "x", 1, (int64_t[]){6});
    int s = qf_graph_add_value(g, "s", QF_F32, 0, NULL);
    g->values[s].data = malloc(sizeof(float));
    *(float *)g->values[s].data = 0.5f;
    g->values[s].flags |= QF_VALUE_CONST;
    int z = qf_graph_add_value(g, "z", QF_I8, 0, NULL);
    g->values[z].data = calloc(1, 1);
    g->values[z].flags |= QF_VALUE_CONST;
    int q = value(g, "q"), y = value(g, "y");
    op(g, "q", QF_OP_QUANTIZE_LINEAR, 3, (int[]){x, s, z}, q);
    op(g, "dq", QF_OP_DEQUANTIZE_LINEAR, 2, (int[]){q, s}, y);
    output(g, y);
    prepare_graph(g, 0);
    ck_assert_int_eq(g->values[q].dtype, QF_I8);
    ck_assert(g->values[q].scale == 0.5f);
    float xin[6] = {0.25f, 0.75f, -0.25f, 100.0f, -100.0f, 1.2f};
    float *yo = run(g, xin, NULL, NULL);
    const float want[6] = {0.0f, 1.0f, -0.0f, 63.5f, -64.0f, 1.0f};
    for (int i = 0; i < 6; i++) ck_assert_msg(yo[i] == want[i], "%d: %g", i, yo[i]);
    free(yo);
    /* a zero point of another type is refused, naming it */
    g->values[z].dtype = QF_I64;
    ck_assert_int_eq(qfi_ops[QF_OP_QUANTIZE_LINEAR]->infer(g, &g->nodes[0]), QF_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), "zero point z"));
    qf_graph_free(g);

    /* a zero point of 3 on both sides: q = sat(rint(x/s) + 3), y = (q - 3) * s */
    g = qf_graph_new("qdq-zp");
    x = input(g, "x", 1, (int64_t[]){6});
    s = qf_graph_add_value(g, "s", QF_F32, 0, NULL);
    g->values[s].data = malloc(sizeof(float));
    *(float *)g->values[s].data = 0.5f;
    g->values[s].flags |= QF_VALUE_CONST;
    z = qf_graph_add_value(g, "z", QF_I8, 0, NULL);
    g->values[z].data = malloc(1);
    *(int8_t *)g->values[z].data = 3;
    g->values[z].flags |= QF_VALUE_CONST;
    q = value(g, "q"), y = value(g, "y");
    op(g, "q", QF_OP_QUANTIZE_LINEAR, 3, (int[]){x, s, z}, q);
    op(g, "dq", QF_OP_DEQUANTIZE_LINEAR, 3, (int[]){q, s, z}, y);
    output(g, y);
    prepare_graph(g, 0);
    ck_assert_int_eq(g->values[q].zero_point, 3);
    yo = run(g, xin, NULL, NULL);
    /* saturation is relative to the zero point: 200 + 3 -> 127, -200 + 3 -> -128 */
    const float want_zp[6] = {0.0f, 1.0f, 0.0f, 62.0f, -65.5f, 1.0f};
    for (int i = 0; i < 6; i++) ck_assert_msg(yo[i] == want_zp[i], "%d: %g", i, yo[i]);
    free(yo);
    qf_graph_free(g);
}
END_TEST

/* ---- zero points of one-sided activations (qf_quant_opts.asymmetric) ---------------- */

START_TEST(value_ranges_follow_the_graph)
{
    rng = 3;
    qf_graph *g = qf_graph_new("ranges");
    int x = input(g, "x", 4, (int64_t[]){1, 4, 4, 4});
    int w = weight(g, "w", 4, (int64_t[]){4, 4, 1, 1}, -1, 1);
    int lo = weight(g, "lo", 0, NULL, 0, 0), hi = weight(g, "hi", 0, NULL, 6, 6);
    int c = value(g, "c"), r = value(g, "r"), k = value(g, "k"), hs = value(g, "hs"), sg = value(g, "sg");
    int si = value(g, "si"), gp = value(g, "gp"), se = value(g, "se"), mp = value(g, "mp"), cat = value(g, "cat");
    int ad = value(g, "ad"), th = value(g, "th"), neg = value(g, "neg");
    conv_node(g, "conv", x, w, -1, c, 0, 1);
    op(g, "relu", QF_OP_RELU, 1, (int[]){c}, r);
    op(g, "clip", QF_OP_CLIP, 3, (int[]){c, lo, hi}, k);
    op(g, "hswish", QF_OP_HARD_SWISH, 1, (int[]){c}, hs);
    op(g, "sigmoid", QF_OP_SIGMOID, 1, (int[]){c}, sg);
    op(g, "silu", QF_OP_MUL, 2, (int[]){sg, c}, si); /* x * Sigmoid(x), either order */
    op(g, "gap", QF_OP_GLOBAL_AVERAGE_POOL, 1, (int[]){si}, gp);
    op(g, "se", QF_OP_MUL, 2, (int[]){si, sg}, se); /* a gate in [0, 1] on a SiLU output */
    qf_node *pool = op(g, "pool", QF_OP_MAX_POOL, 1, (int[]){r}, mp);
    set_ints(pool, "kernel_shape", 2, (int64_t[]){2, 2});
    qf_node *cc = op(g, "cat", QF_OP_CONCAT, 2, (int[]){r, hs}, cat);
    set_int(cc, "axis", 1);
    op(g, "add", QF_OP_ADD, 2, (int[]){r, k}, ad);
    op(g, "tanh", QF_OP_TANH, 1, (int[]){c}, th);
    op(g, "neg", QF_OP_MUL, 2, (int[]){k, hi}, neg); /* [0, 6] x 6 */
    const int outs[] = {r, gp, se, mp, cat, ad, th, neg};
    for (size_t i = 0; i < sizeof outs / sizeof *outs; i++) output(g, outs[i]);
    prepare_graph(g, 1);
    qfi_range *rg;
    OK(qfi_value_ranges(g, &rg));
    ck_assert(rg[x].lo == -INFINITY && rg[x].hi == INFINITY);
    ck_assert(rg[c].lo == -INFINITY); /* a convolution's output is unbounded */
    ck_assert(rg[r].lo == 0.0f && rg[r].hi == INFINITY);
    ck_assert(rg[k].lo == 0.0f && rg[k].hi == 6.0f);
    ck_assert(rg[hs].lo == -0.375f);
    ck_assert(rg[sg].lo == 0.0f && rg[sg].hi == 1.0f);
    ck_assert_float_eq_tol(rg[si].lo, -0.278465f, 2e-5f);
    ck_assert(rg[si].lo <= -0.2784645f); /* below SiLU's true minimum */
    ck_assert(rg[gp].lo == rg[si].lo && rg[gp].hi == INFINITY);
    ck_assert(rg[se].lo == rg[si].lo);
    ck_assert(rg[mp].lo == 0.0f);
    ck_assert(rg[cat].lo == -0.375f);
    ck_assert(rg[ad].lo == 0.0f);
    ck_assert(rg[th].lo == -1.0f && rg[th].hi == 1.0f);
    ck_assert(rg[neg].lo == 0.0f && rg[neg].hi == 36.0f);
    ck_assert(rg[w].lo >= -1.0f && rg[w].hi <= 1.0f && rg[w].lo < rg[w].hi); /* a constant's extremes */
    free(rg);
    qf_graph_free(g);
}
END_TEST

START_TEST(activation_zero_points)
{
    float s;
    int32_t z;
    /* symmetric unless asked, or unless the bound leaves no side to gain */
    qfi_quant_act_params(6.0f, 0.0f, false, &s, &z);
    ck_assert(s == qf_calib_scale(6.0f) && z == 0);
    qfi_quant_act_params(6.0f, -INFINITY, true, &s, &z);
    ck_assert(s == qf_calib_scale(6.0f) && z == 0);
    qfi_quant_act_params(6.0f, -6.0f, true, &s, &z);
    ck_assert(s == qf_calib_scale(6.0f) && z == 0);
    /* a Relu output: [0, 6] on all 256 levels, 0 stored as -128 */
    qfi_quant_act_params(6.0f, 0.0f, true, &s, &z);
    ck_assert(s == 6.0f / 255.0f && z == -128);
    qfi_quant_act_params(6.0f, 0.5f, true, &s, &z); /* a bound above 0 still keeps 0 exact */
    ck_assert(s == 6.0f / 255.0f && z == -128);
    /* HardSwish: [-0.375, 6]: -0.375 is 15 steps below 0 */
    qfi_quant_act_params(6.0f, -0.375f, true, &s, &z);
    ck_assert(s == 6.375f / 255.0f && z == -113);
    ck_assert_int_eq(qfi_quantize_f32_zp(-0.375f, s, z), -128);
    ck_assert_int_eq(qfi_quantize_f32_zp(6.0f, s, z), 127);
    ck_assert_int_eq(qfi_quantize_f32_zp(0.0f, s, z), z);
    /* no range: held as zeros, symmetric */
    qfi_quant_act_params(0.0f, 0.0f, true, &s, &z);
    ck_assert(s == 1.0f && z == 0);
}
END_TEST

/* chain_net quantized symmetric and with zero points: the Relu output r1 and
 * the max-pool after it (one class) take zero point -128 at half symmetric
 * INT8's scale; the engine matches an integer reference bit for bit; the
 * finer steps bring the output closer to FP32. */
START_TEST(zero_points_for_one_sided_activations)
{
    qf_graph *ref = chain_net(7);
    float *x = random_input(ref, 99, -1, 1);
    float *y32 = run(ref, x, NULL, NULL);
    qf_calib_table *t = calibrate_minmax(ref, x);
    double db[2];
    for (int asym = 0; asym < 2; asym++) {
        qf_graph *g = chain_net(7);
        qf_quant_opts o;
        qf_quant_opts_init(&o);
        o.asymmetric = asym;
        OK(qf_quantize(g, t, &o, NULL));
        const qf_node *c1 = &g->nodes[find_node(g, QF_OP_CONV, 0)], *c2 = &g->nodes[find_node(g, QF_OP_CONV, 1)];
        const qf_node *pool = &g->nodes[find_node(g, QF_OP_MAX_POOL, 0)];
        const qf_value *xq = &g->values[c1->in[0]], *r1 = &g->values[c1->out[0]], *p1 = &g->values[pool->out[0]];
        ck_assert_int_eq(xq->zero_point, 0); /* the graph input is unbounded */
        ck_assert_int_eq(r1->zero_point, asym ? -128 : 0);
        ck_assert(r1->scale == (asym ? table_amax(t, "r1") / 255.0f : qf_calib_scale(table_amax(t, "r1"))));
        ck_assert(p1->scale == r1->scale && p1->zero_point == r1->zero_point);
        float *y8 = run(g, x, NULL, NULL);
        db[asym] = sqnr_db(y32, y8, qf_value_numel(&g->values[g->outputs[0]]));
        if (asym) {
            /* conv2's bias holds -z * (sum of each channel's weights), and the engine
             * is exact against integer loops that read the padding as z */
            enum { N = 2, C = 3, H = 8, M1 = 8, M2 = 4, HP = 4 };
            const int8_t *w1 = g->values[c1->in[1]].data, *w2 = g->values[c2->in[1]].data;
            const int32_t *b1 = g->values[c1->in[2]].data, *b2 = g->values[c2->in[2]].data;
            const float *s1 = g->values[c1->in[3]].data, *s2 = g->values[c2->in[3]].data;
            const float *b2f = ref->values[qf_graph_find_value(ref, "b2")].data;
            for (int m = 0; m < M2; m++)
                ck_assert_int_eq(b2[m], qfi_quant_bias(b2f[m], p1->scale, s2[m]) +
                                            128 * (int32_t)qfi_int8_weight_sum(w2, 1, M2, 72, m));
            int8_t xi[N * C * H * H], a1[N * M1 * H * H], a2[N * M1 * HP * HP];
            int32_t acc1[N * M1 * H * H];
            for (int i = 0; i < N * C * H * H; i++) xi[i] = qfi_quantize_f32(x[i], xq->scale);
            ref_conv3x3(xi, N, C, H, H, w1, M1, b1, acc1);
            for (int i = 0; i < N * M1 * H * H; i++) {
                float v = rintf((float)acc1[i] * (xq->scale * s1[i / (H * H) % M1] / r1->scale));
                v = v < 0 ? 0 : v > 255 ? 255 : v; /* Relu at the zero point, saturation above */
                a1[i] = (int8_t)(v - 128);
            }
            for (int nc = 0; nc < N * M1; nc++)
                for (int i = 0; i < HP; i++)
                    for (int j = 0; j < HP; j++) {
                        int8_t mx = -128;
                        for (int d = 0; d < 4; d++) {
                            int8_t v = a1[(nc * H + 2 * i + d / 2) * H + 2 * j + d % 2];
                            if (v > mx) mx = v;
                        }
                        a2[(nc * HP + i) * HP + j] = mx;
                    }
            for (int n = 0; n < N; n++)
                for (int m = 0; m < M2; m++)
                    for (int i = 0; i < HP * HP; i++) {
                        int32_t acc = b2[m];
                        for (int c = 0; c < M1; c++)
                            for (int k = 0; k < 9; k++) {
                                int ii = i / HP + k / 3 - 1, jj = i % HP + k % 3 - 1;
                                bool in = ii >= 0 && ii < HP && jj >= 0 && jj < HP;
                                acc += w2[(m * M1 + c) * 9 + k] * (in ? a2[((n * M1 + c) * HP + ii) * HP + jj] : -128);
                            }
                        const int at = (n * M2 + m) * HP * HP + i;
                        float want = (float)acc * (p1->scale * s2[m]);
                        ck_assert_msg(y8[at] == want, "element %d: engine %.9g, reference %.9g", at, y8[at], want);
                    }
        }
        free(y8);
        qf_graph_free(g);
    }
    /* r1's steps halve; the input's do not: a gain of a few dB at the output */
    ck_assert_msg(db[1] > db[0] + 1.5, "SQNR symmetric %.2f dB, with zero points %.2f dB", db[0], db[1]);
    qf_calib_table_free(t);
    free(x);
    free(y32);
    qf_graph_free(ref);
}
END_TEST

/* ---- zero points of two-sided activations (qf_quant_opts.asymmetric_two_sided) ----- */

START_TEST(activation_lo_rule)
{
    /* the graph's bound where it is above -amax */
    ck_assert(qfi_quant_act_lo(0.0f, -1.0f, 4.0f) == 0.0f);
    ck_assert(qfi_quant_act_lo(-0.375f, -0.25f, 4.0f) == -0.375f);
    /* else the calibrated minimum where that is */
    ck_assert(qfi_quant_act_lo(-INFINITY, -1.0f, 4.0f) == -1.0f);
    ck_assert(qfi_quant_act_lo(-6.0f, -1.0f, 4.0f) == -1.0f);
    ck_assert(qfi_quant_act_lo(-INFINITY, 0.5f, 4.0f) == 0.5f); /* qfi_quant_act_params keeps 0 exact */
    /* else the graph's (symmetric then) */
    ck_assert(qfi_quant_act_lo(-INFINITY, -4.0f, 4.0f) == -INFINITY);
    ck_assert(qfi_quant_act_lo(-INFINITY, -5.0f, 4.0f) == -INFINITY);
    ck_assert(qfi_quant_act_lo(-INFINITY, NAN, 4.0f) == -INFINITY);
}
END_TEST

/* chain_net's input x, which the graph leaves unbounded, calibrated on data in
 * [-0.25, 1): with two-sided zero points (--zero-points two-sided) its
 * QuantizeLinear spans [min, amax] on 256 levels, min the table's (-0.25 amax
 * here: zero point -77); symmetric with the graph's zero points only (the
 * default) or none, with a minimum at or below -amax, from a table without
 * minimums (before version 3), and where a padded dense conv reads it (conv1,
 * --zero-points unpadded). The finer steps bring the output closer to FP32. */
START_TEST(zero_points_for_two_sided_activations)
{
    qf_graph *ref = chain_net(7);
    float *x = random_input(ref, 99, -0.25f, 1.0f);
    qf_calib_table *t = calibrate_minmax(ref, x);
    qf_calib_entry *e = &t->entries[qf_calib_table_find(t, "x")];
    const float amax = table_amax(t, "x");
    ck_assert(e->has_min && e->min >= -0.25f && e->min < -0.24f && amax > 0.99f);
    float *y[2] = {NULL, NULL};
    for (int mode = 0; mode < 6; mode++) { /* two-sided, all, none, min below -amax, no min, unpadded */
        e->min = mode == 3 ? -1.5f * amax : -0.25f * amax;
        e->has_min = mode != 4;
        qf_quant_opts o;
        qf_quant_opts_init(&o);
        o.method = QF_CALIB_MINMAX;
        o.asymmetric_two_sided = mode != 1;
        o.asymmetric = mode != 2;
        o.asymmetric_unpadded = mode == 5;
        qf_graph *g = chain_net(7);
        qf_quant_summary sum;
        OK(qf_quantize(g, t, &o, &sum));
        ck_assert_int_eq(sum.zero_point_two_sided, 0); /* x is quantized, not stored by an INT8 node */
        const qf_value *xq = &g->values[g->nodes[find_node(g, QF_OP_CONV, 0)].in[0]];
        const float lo = -0.25f * amax, s = mode ? qf_calib_scale(amax) : (amax - lo) / 255.0f;
        ck_assert_msg(xq->scale == s && xq->zero_point == (mode ? 0 : -77), "mode %d: scale %.9g (want %.9g), "
                      "zero point %d", mode, xq->scale, s, (int)xq->zero_point);
        if (!mode) { /* lo is the lowest level */
            ck_assert_int_eq(qfi_quantize_f32_zp(lo, xq->scale, xq->zero_point), -128);
            ck_assert_int_eq(qfi_quantize_f32_zp(amax, xq->scale, xq->zero_point), 127);
        }
        if (mode < 2) y[mode] = run(g, x, NULL, NULL);
        qf_graph_free(g);
    }
    float *y32 = run(ref, x, NULL, NULL);
    const int64_t n = qf_value_numel(&ref->values[ref->outputs[0]]);
    ck_assert_msg(sqnr_db(y32, y[0], n) > sqnr_db(y32, y[1], n), "SQNR with x's zero point %.2f dB, without %.2f dB",
                  sqnr_db(y32, y[0], n), sqnr_db(y32, y[1], n));
    qf_calib_table_free(t);
    free(x), free(y32), free(y[0]), free(y[1]);
    qf_graph_free(ref);
}
END_TEST

/* concat_net's class ra, cb, cc, mp, fl (joined by Concat, MaxPool, Flatten)
 * shares one zero point: its lo is the lowest of its members' (ra, a Relu
 * output, 0; the rest two-sided, their calibrated minimums), at the class's
 * threshold; one member whose minimum is at or below -amax leaves the class
 * symmetric. */
START_TEST(two_sided_zero_points_per_class)
{
    float *x;
    qf_calib_table *t = concat_table(&x);
    const float a = fmaxf(table_amax(t, "ra"), table_amax(t, "cb"));
    const char *members[] = {"ra", "cb", "cc", "mp", "fl"};
    const float mins[] = {0.0f, -0.25f, -0.2f, -0.15f, -0.15f}; /* of a */
    for (int spoil = 0; spoil < 2; spoil++) {
        for (int i = 0; i < 5; i++) {
            qf_calib_entry *e = &t->entries[qf_calib_table_find(t, members[i])];
            e->has_min = true;
            e->min = (spoil && i == 3 ? -1.0f : mins[i]) * a;
        }
        qf_graph *g = concat_net(21);
        qf_quant_opts o;
        qf_quant_opts_init(&o);
        o.method = QF_CALIB_MINMAX;
        o.asymmetric_two_sided = true;
        qf_quant_summary sum;
        OK(qf_quantize(g, t, &o, &sum));
        const float s = spoil ? qf_calib_scale(a) : (a + 0.25f * a) / 255.0f;
        for (int i = 0; i < 5; i++) {
            const qf_value *v = &g->values[qf_graph_find_value(g, members[i])];
            ck_assert_int_eq(v->dtype, QF_I8);
            ck_assert_msg(v->scale == s && v->zero_point == (spoil ? 0 : -77), "spoil %d: %s has scale %g, zero point %d",
                          spoil, members[i], v->scale, (int)v->zero_point);
        }
        ck_assert_int_eq(sum.zero_point_two_sided, spoil ? 0 : 5);
        qf_graph_free(g);
    }
    qf_calib_table_free(t);
    free(x);
}
END_TEST


/* x -> conv -> Relu -> [SE: GlobalAveragePool -> fc1 -> Relu -> fc2 -> Sigmoid
 * -> Mul] -> proj -> GlobalAveragePool -> Flatten -> Gemm (the classifier),
 * and beside it Flatten(x) -> Gemm (a VGG-style head on positions): the
 * layers that read a globally pooled tensor stay FP16, the others INT8; with
 * fp16_se also the conv whose output the SE block reads and the one that
 * reads its gated output. */
static qf_graph *se_head_net(void)
{
    rng = 11;
    qf_graph *g = qf_graph_new("se");
    int x = input(g, "x", 4, (int64_t[]){2, 3, 6, 6});
    int wc = weight(g, "wc", 4, (int64_t[]){8, 3, 3, 3}, -0.5f, 0.5f), w1 = weight(g, "w1", 4, (int64_t[]){2, 8, 1, 1}, -1, 1);
    int w2 = weight(g, "w2", 4, (int64_t[]){8, 2, 1, 1}, -1, 1), wp = weight(g, "wp", 4, (int64_t[]){4, 8, 1, 1}, -1, 1);
    int wf = weight(g, "wf", 2, (int64_t[]){5, 4}, -1, 1), wv = weight(g, "wv", 2, (int64_t[]){5, 108}, -0.1f, 0.1f);
    int c = value(g, "c"), r = value(g, "r"), gp = value(g, "gp"), f1 = value(g, "f1"), a1 = value(g, "a1");
    int f2 = value(g, "f2"), gate = value(g, "gate"), se = value(g, "se"), pj = value(g, "pj"), gp2 = value(g, "gp2");
    int fl = value(g, "fl"), y = value(g, "y"), flv = value(g, "flv"), yv = value(g, "yv");
    conv_node(g, "conv", x, wc, -1, c, 1, 1);
    op(g, "relu", QF_OP_RELU, 1, (int[]){c}, r);
    op(g, "squeeze", QF_OP_GLOBAL_AVERAGE_POOL, 1, (int[]){r}, gp);
    conv_node(g, "fc1", gp, w1, -1, f1, 0, 1);
    op(g, "act", QF_OP_RELU, 1, (int[]){f1}, a1);
    conv_node(g, "fc2", a1, w2, -1, f2, 0, 1);
    op(g, "sigmoid", QF_OP_SIGMOID, 1, (int[]){f2}, gate);
    op(g, "excite", QF_OP_MUL, 2, (int[]){r, gate}, se);
    conv_node(g, "proj", se, wp, -1, pj, 0, 1);
    op(g, "pool", QF_OP_GLOBAL_AVERAGE_POOL, 1, (int[]){pj}, gp2);
    op(g, "flatten", QF_OP_FLATTEN, 1, (int[]){gp2}, fl);
    set_int(op(g, "classifier", QF_OP_GEMM, 2, (int[]){fl, wf}, y), "transB", 1);
    op(g, "flatten_positions", QF_OP_FLATTEN, 1, (int[]){x}, flv); /* not c: only the SE block reads the conv */
    set_int(op(g, "vgg_head", QF_OP_GEMM, 2, (int[]){flv, wv}, yv), "transB", 1);
    output(g, y);
    output(g, yv);
    prepare_graph(g, 2);
    return g;
}

START_TEST(pooled_and_se_layers_stay_fp16)
{
    qf_graph *g = se_head_net();
    float *xin = random_input(g, 5, -1, 1);
    qf_calib_table *t = calibrate_minmax(g, xin);
    qf_graph_free(g);
    for (int rules = 0; rules < 4; rules++) {
        const bool pooled = rules & 1, fp16_se = rules & 2;
        g = se_head_net();
        qf_quant_opts o;
        qf_quant_opts_init(&o);
        o.int8_pooled = pooled, o.fp16_se = fp16_se; /* INT8 for the pooled convs; FP16 for the convs around the block */
        OK(qf_quantize(g, t, &o, NULL));
        ck_assert_int_eq(node_named(g, "vgg_head")->precision, QF_PREC_INT8);
        const char *fp16[] = {"fc1", "fc2", "classifier"};
        for (int k = 0; k < 3; k++)
            ck_assert_msg(node_named(g, fp16[k])->precision == (pooled ? QF_PREC_INT8 : QF_PREC_FP16), "%s", fp16[k]);
        ck_assert_int_eq(node_named(g, "proj")->precision, (fp16_se ? QF_PREC_FP16 : QF_PREC_INT8));
        ck_assert_int_eq(node_named(g, "conv")->precision, (fp16_se ? QF_PREC_FP16 : QF_PREC_INT8));
        qf_graph_free(g);
    }
    free(xin);
    qf_calib_table_free(t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("quant");
    TCase *tc = tcase_create("numerics");
    tcase_add_test(tc, requant_rounding_ties_to_even);
    tcase_add_test(tc, requant_saturation);
    tcase_add_test(tc, requant_activations);
    tcase_add_test(tc, requant_smooth_activations);
    tcase_add_test(tc, requant_per_channel_and_residual);
    tcase_add_test(tc, activation_quantize);
    tcase_add_test(tc, magic_conversions_are_exact);
    tcase_add_test(tc, magic_epilogue_matches_requantize);
    tcase_add_test(tc, weights_per_channel_and_per_tensor);
    tcase_add_test(tc, bias_quantization);
    tcase_add_test(tc, activation_zero_points);
    suite_add_tcase(s, tc);
    TCase *tg = tcase_create("graphs");
    tcase_add_test(tg, int8_chain_exact_and_close_to_fp32);
    tcase_add_test(tg, fp16_matches_rounding);
    tcase_add_test(tg, fp16_chain_close_to_fp32);
    tcase_add_test(tg, scales_shared_through_concat_pool_flatten);
    tcase_add_test(tg, missing_table_entry_is_an_error);
    tcase_add_test(tg, residual_and_bias_fusion);
    tcase_add_test(tg, residual_stream_of_layer_norms_stays_float);
    tcase_add_test(tg, add_of_two_activations_is_int8);
    tcase_add_test(tg, int8_attention_products);
    tcase_add_test(tg, fusion_planner_links_and_rules);
    tcase_add_test(tg, smooth_activations_fuse);
    tcase_add_test(tg, int8_fp16_boundaries);
    tcase_add_test(tg, fp16_overflow_stays_fp32);
    tcase_add_test(tg, qdq_nodes_roundtrip);
    tcase_add_test(tg, bias_correction_removes_the_mean_error);
    tcase_add_test(tg, learned_rounding_beats_nearest);
    tcase_add_test(tg, per_layer_sqnr_finds_the_bad_layer);
    tcase_add_test(tg, per_layer_sqnr_counts_zero_points);
    tcase_add_test(tg, zero_points_unpadded);
    tcase_add_test(tg, value_ranges_follow_the_graph);
    tcase_add_test(tg, zero_points_for_one_sided_activations);
    tcase_add_test(tg, activation_lo_rule);
    tcase_add_test(tg, zero_points_for_two_sided_activations);
    tcase_add_test(tg, two_sided_zero_points_per_class);
    tcase_add_test(tg, pooled_and_se_layers_stay_fp16);
    suite_add_tcase(s, tg);
    return run_suite(s);
}
