/* INT8 at any scale. Quantization is scale-invariant in exact arithmetic, and
 * random-init MobileNetV3, EfficientNet and GoogLeNet shrink their activations
 * to 1e-9..1e-14: pattern graphs of those models (SE block with HardSwish,
 * HardSigmoid and SiLU; a classifier whose bias dwarfs its input) calibrated,
 * quantized and run on the CPU engine at tiny scales, each against FP32. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <unistd.h>
#include "internal.h"
#include "testutil.h"
#include "qforge/quant.h"

/* Multiplies the constant called name by s. */
static void scale_const(qf_graph *g, const char *name, float s)
{
    qf_value *v = &g->values[qf_graph_find_value(g, name)];
    float *d = v->data;
    for (int64_t i = 0; i < qf_value_numel(v); i++) d[i] *= s;
}

/* Warnings captured while a test runs. */
static char warned[4096];
static void capture(void *user, qf_log_level level, const char *msg)
{
    size_t n = strlen(warned);
    snprintf(warned + n, sizeof warned - n, "%s\n", msg);
}

/* ---- scale invariance, bit for bit --------------------------------------------------- */

/* x (2,4,8,8) -> Conv 3x3 +b -> Relu -> Conv 3x3 +b, + the Relu's output -> Relu
 * -> MaxPool 2x2 -> GlobalAveragePool -> Flatten -> Gemm +b -> y: every op INT8
 * and positively homogeneous once the biases scale with the input. */
static qf_graph *homogeneous_net(float s)
{
    rng = 5;
    qf_graph *g = qf_graph_new("homogeneous");
    int x = input(g, "x", 4, (int64_t[]){2, 4, 8, 8});
    int w1 = weight(g, "w1", 4, (int64_t[]){8, 4, 3, 3}, -0.5f, 0.5f);
    int b1 = weight(g, "b1", 1, (int64_t[]){8}, -0.3f, 0.3f);
    int w2 = weight(g, "w2", 4, (int64_t[]){8, 8, 3, 3}, -0.3f, 0.3f);
    int b2 = weight(g, "b2", 1, (int64_t[]){8}, -0.3f, 0.3f);
    int wf = weight(g, "wf", 2, (int64_t[]){5, 8}, -0.5f, 0.5f);
    int bf = weight(g, "bf", 1, (int64_t[]){5}, -0.1f, 0.1f);
    int c1 = value(g, "c1"), r1 = value(g, "r1"), c2 = value(g, "c2"), a2 = value(g, "a2"), r2 = value(g, "r2");
    int p2 = value(g, "p2"), gp = value(g, "gp"), fl = value(g, "fl"), y = value(g, "y");
    conv_node(g, "conv1", x, w1, b1, c1, 1, 1);
    op(g, "relu1", QF_OP_RELU, 1, (int[]){c1}, r1);
    conv_node(g, "conv2", r1, w2, b2, c2, 1, 1);
    op(g, "add", QF_OP_ADD, 2, (int[]){c2, r1}, a2);
    op(g, "relu2", QF_OP_RELU, 1, (int[]){a2}, r2);
    qf_node *mp = op(g, "pool", QF_OP_MAX_POOL, 1, (int[]){r2}, p2);
    set_ints(mp, "kernel_shape", 2, (int64_t[]){2, 2});
    set_ints(mp, "strides", 2, (int64_t[]){2, 2});
    op(g, "gap", QF_OP_GLOBAL_AVERAGE_POOL, 1, (int[]){p2}, gp);
    op(g, "flatten", QF_OP_FLATTEN, 1, (int[]){gp}, fl);
    qf_node *fc = op(g, "fc", QF_OP_GEMM, 3, (int[]){fl, wf, bf}, y);
    set_int(fc, "transB", 1);
    output(g, y);
    prepare_graph(g, 2);
    scale_const(g, "b1", s);
    scale_const(g, "b2", s);
    scale_const(g, "bf", s);
    return g;
}

/* Calibrates g on x with the engine's observer (every method), through the table
 * file and back, as `qforge calib` and `qforge quant` do. */
static qf_calib_table *calibrate_through_file(const qf_graph *g, const float *x)
{
    qf_calib *c;
    OK(qf_calib_create(g, NULL, &c));
    float *y = run(g, x, qf_calib_observe, c);
    free(y);
    qf_calib_table *t;
    qf_calib_meta meta = {.images = g->batch, .model_sha256 = "0000000000000000000000000000000000000000000000000000000000000000"};
    OK(qf_calib_finalize(c, QF_CALIB_ALL, QF_CALIB_PERCENTILE_DEFAULT, &meta, &t));
    qf_calib_free(c);
    char path[] = "/tmp/qforge-scale-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    OK(qf_calib_table_write(t, path));
    qf_calib_table_free(t);
    OK(qf_calib_table_read(path, &t));
    unlink(path);
    return t;
}

/* Scaling the input and the biases by 2^-k scales every tensor by exactly 2^-k
 * (down to 2^-100, where products of scales are still normal floats): the
 * histograms, thresholds, scales, INT32 biases and multipliers of every method
 * scale with it, so the INT8 output is the scale-1 output times 2^-k, bit for bit. */
START_TEST(int8_is_scale_invariant)
{
    float *y0[QF_CALIB_METHOD_COUNT] = {0}, *x = NULL;
    for (int k = 0; k <= 100; k += 20) {
        const float s = ldexpf(1.0f, -k);
        qf_graph *ref = homogeneous_net(s);
        if (!x) x = random_input(ref, 6, -1, 1);
        float *xs = malloc(2 * 4 * 64 * sizeof *xs);
        for (int i = 0; i < 2 * 4 * 64; i++) xs[i] = x[i] * s;
        qf_calib_table *t = calibrate_through_file(ref, xs);
        float *y32 = run(ref, xs, NULL, NULL);
        for (int m = 0; m < QF_CALIB_METHOD_COUNT; m++) {
            qf_graph *g = homogeneous_net(s);
            qf_quant_opts o;
            qf_quant_opts_init(&o);
            o.method = (qf_calib_method)m;
            o.int8_pooled = true; /* the classifier after the pool in INT8 too */
            OK(qf_quantize(g, t, &o, NULL));
            ck_assert_int_eq(node_named(g, "fc")->precision, QF_PREC_INT8);
            float *y8 = run(g, xs, NULL, NULL);
            if (k == 0) {
                double db = sqnr_db(y32, y8, 10);
                /* (entropy is left out: its KL search on the 16 pooled values clips them) */
                if (m != QF_CALIB_ENTROPY)
                    ck_assert_msg(db > 40.0, "%s: SQNR %.1f dB at scale 1", qf_calib_method_name(m), db);
                y0[m] = y8;
            } else {
                for (int i = 0; i < 10; i++)
                    ck_assert_msg(ldexpf(y8[i], k) == y0[m][i], "%s, scale 2^-%d: y[%d] = %a * 2^-%d, at scale 1 %a",
                                  qf_calib_method_name(m), k, i, ldexpf(y8[i], k), k, y0[m][i]);
                free(y8);
            }
            qf_graph_free(g);
        }
        free(y32), free(xs);
        qf_calib_table_free(t);
        qf_graph_free(ref);
    }
    for (int m = 0; m < QF_CALIB_METHOD_COUNT; m++) free(y0[m]);
    free(x);
}
END_TEST

/* ---- float ops between INT8 ops at tiny scales ------------------------------------------ */

/* An SE block as MobileNetV3 and EfficientNet build it, with zero biases as
 * torchvision initialises them:
 *   x (2,8,8,8) -> Conv 1x1 (16) -> SiLU (x * Sigmoid x) -> Conv 3x3 depthwise
 *   -> HardSwish = h -> GlobalAveragePool -> Conv 1x1 (4) -> Relu -> Conv 1x1 (16)
 *   -> HardSigmoid -> Mul with h -> Conv 1x1 (8) -> y
 * The input scale s sets every activation's range (HardSwish and SiLU halve
 * small values; the SE gate tends to 0.5). */
static qf_graph *se_net(void)
{
    rng = 13;
    qf_graph *g = qf_graph_new("se");
    int x = input(g, "x", 4, (int64_t[]){2, 8, 8, 8});
    int w1 = weight(g, "w1", 4, (int64_t[]){16, 8, 1, 1}, -0.6f, 0.6f);
    int wd = weight(g, "wd", 4, (int64_t[]){16, 1, 3, 3}, -0.6f, 0.6f);
    int wa = weight(g, "wa", 4, (int64_t[]){4, 16, 1, 1}, -0.8f, 0.8f);
    int wb = weight(g, "wb", 4, (int64_t[]){16, 4, 1, 1}, -0.8f, 0.8f);
    int wp = weight(g, "wp", 4, (int64_t[]){8, 16, 1, 1}, -0.5f, 0.5f);
    int c1 = value(g, "c1"), sg = value(g, "sg"), si = value(g, "si"), cd = value(g, "cd"), h = value(g, "h");
    int gp = value(g, "gp"), fa = value(g, "fa"), ra = value(g, "ra"), fb = value(g, "fb"), gate = value(g, "gate");
    int sc = value(g, "sc"), y = value(g, "y");
    conv_node(g, "expand", x, w1, -1, c1, 0, 1);
    op(g, "sigmoid", QF_OP_SIGMOID, 1, (int[]){c1}, sg);
    op(g, "silu", QF_OP_MUL, 2, (int[]){c1, sg}, si);
    conv_node(g, "depthwise", si, wd, -1, cd, 1, 16);
    op(g, "hardswish", QF_OP_HARD_SWISH, 1, (int[]){cd}, h);
    op(g, "squeeze", QF_OP_GLOBAL_AVERAGE_POOL, 1, (int[]){h}, gp);
    conv_node(g, "fc1", gp, wa, -1, fa, 0, 1);
    op(g, "fc1_relu", QF_OP_RELU, 1, (int[]){fa}, ra);
    conv_node(g, "fc2", ra, wb, -1, fb, 0, 1);
    op(g, "gate", QF_OP_HARD_SIGMOID, 1, (int[]){fb}, gate);
    op(g, "excite", QF_OP_MUL, 2, (int[]){h, gate}, sc);
    conv_node(g, "project", sc, wp, -1, y, 0, 1);
    output(g, y);
    prepare_graph(g, 2);
    return g;
}

/* FP16 holds only 2^-24 and above, and its normals start at 2^-14: float ops
 * on activations near 1e-9 (random-init MobileNetV3's last blocks) stored as
 * FP16 flushed them to zero and INT8 MobileNetV3 / EfficientNet gave 0 dB.
 * Below FP16's normal range they stay FP32. */
START_TEST(tiny_activations_stay_out_of_fp16)
{
    const int ks[] = {0, 20, 30, 60};
    for (size_t j = 0; j < QF_ARRAY_LEN(ks); j++) {
        const float s = ldexpf(1.0f, -ks[j]);
        qf_graph *ref = se_net(), *g = se_net();
        float *x = random_input(g, 14, -1, 1);
        for (int i = 0; i < 2 * 8 * 64; i++) x[i] *= s;
        qf_calib_table *t = calibrate_minmax(g, x);
        warned[0] = '\0';
        qf_log_set(capture, NULL, QF_LOG_INFO);
        const qf_status st = qf_quantize(g, t, NULL, NULL);
        qf_log_set(NULL, NULL, QF_LOG_WARN);
        OK(st);
        /* quant says which nodes its FP32 ones are and why */
        const char *why = strstr(warned, "nodes stay FP32 for a value wholly below FP16's normal range");
        ck_assert_msg(ks[j] == 0 ? !why : why != NULL, "scale 2^-%d: %s", ks[j], warned);
        ck_assert_msg(!strstr(warned, "stay FP32 for a value beyond"), "scale 2^-%d: %s", ks[j], warned);
        float *y32 = run(ref, x, NULL, NULL), *y8 = run(g, x, NULL, NULL);
        double db = sqnr_db(y32, y8, 2 * 8 * 64);
        ck_assert_msg(db > 30.0, "scale 2^-%d: SQNR %.1f dB", ks[j], db);
        /* SiLU lives in the expand conv's epilogue with an int8 output (the
         * depthwise conv reads it); HardSwish in the depthwise conv's, whose
         * output the squeeze and the excitation read as floats: half at
         * scale 1 (|h| near 1), FP32 once h is below 2^-14, like the
         * excitation's own precision */
        const char *fused[] = {"sigmoid", "silu", "hardswish"};
        for (size_t f = 0; f < QF_ARRAY_LEN(fused); f++)
            ck_assert_msg(node_named(g, fused[f]) == NULL, "scale 2^-%d: %s was not fused", ks[j], fused[f]);
        ck_assert_int_eq(node_named(g, "expand")->act, QF_ACT_SILU);
        ck_assert_int_eq(qfi_out(g, node_named(g, "expand"), 0)->dtype, QF_I8);
        const qf_node *dw = node_named(g, "depthwise");
        ck_assert_int_eq(dw->act, QF_ACT_HARD_SWISH);
        qf_precision want = ks[j] == 0 ? QF_PREC_FP16 : QF_PREC_FP32;
        ck_assert_msg(qfi_out(g, dw, 0)->dtype == (want == QF_PREC_FP16 ? QF_F16 : QF_F32), "scale 2^-%d: h is %s",
                      ks[j], qf_dtype_info(qfi_out(g, dw, 0)->dtype)->name);
        ck_assert_msg(node_named(g, "excite")->precision == want, "scale 2^-%d: excite is %s", ks[j],
                      qf_precision_name(node_named(g, "excite")->precision));
        free(x), free(y32), free(y8);
        qf_calib_table_free(t);
        qf_graph_free(ref);
        qf_graph_free(g);
    }
}
END_TEST

/* A BatchNorm folded with re-estimated statistics leaves biases near 1e-5
 * (MobileNetV2's expand convs): below FP16's normals, but added to outputs
 * near 1, so FP16 loses nothing there and the conv stays FP16 (it went FP32
 * and MobileNetV2 FP16 ran at 0.56x). Weights that small stay FP32: their
 * products would sit among the subnormals. */
START_TEST(tiny_bias_stays_fp16)
{
    for (int tiny_weights = 0; tiny_weights < 2; tiny_weights++) {
        qf_graph *ref = homogeneous_net(1.0f), *g = homogeneous_net(1.0f);
        for (int k = 0; k < 2; k++) {
            qf_graph *h = k ? g : ref;
            scale_const(h, "b1", ldexpf(1.0f, -20));
            if (tiny_weights) scale_const(h, "w1", ldexpf(1.0f, -20));
        }
        float *x = random_input(g, 31, -1, 1);
        qf_quant_opts o;
        qf_quant_opts_init(&o);
        o.precision = QF_PREC_FP16;
        OK(qf_quantize(g, NULL, &o, NULL));
        const qf_node *c1 = node_named(g, "conv1");
        ck_assert_msg(c1->precision == (tiny_weights ? QF_PREC_FP32 : QF_PREC_FP16), "tiny weights %d: conv1 is %s",
                      tiny_weights, qf_precision_name(c1->precision));
        ck_assert_int_eq(node_named(g, "conv2")->precision, QF_PREC_FP16);
        float *y32 = run(ref, x, NULL, NULL), *y16 = run(g, x, NULL, NULL);
        double db = sqnr_db(y32, y16, 10);
        ck_assert_msg(db > 50.0, "tiny weights %d: FP16 SQNR %.1f dB", tiny_weights, db);
        free(x), free(y32), free(y16);
        qf_graph_free(ref);
        qf_graph_free(g);
    }
}
END_TEST

/* A ConvNeXt block's end as torchvision initialises it (layer scale 1e-6):
 *   x (2,8,6,6) -> Conv 3x3 -> c; Mul(c, gamma (8,1,1) near 1e-6) -> m;
 *   Add(m, x) -> a (an output) -> Conv 1x1 -> y
 * m is a small addend of a: FP16, with its 1e-6 values among the subnormal
 * halves, moves a by less than a's own rounding. With m also read by a
 * Conv (other) it must stay FP32. */
static qf_graph *layer_scale_net(bool other)
{
    rng = 17;
    qf_graph *g = qf_graph_new("layer_scale");
    int x = input(g, "x", 4, (int64_t[]){2, 8, 6, 6});
    int w1 = weight(g, "w1", 4, (int64_t[]){8, 8, 3, 3}, -0.4f, 0.4f);
    int gamma = weight(g, "gamma", 3, (int64_t[]){8, 1, 1}, 0.5e-6f, 1.5e-6f);
    int w2 = weight(g, "w2", 4, (int64_t[]){8, 8, 1, 1}, -0.5f, 0.5f);
    int c = value(g, "c"), m = value(g, "m"), a = value(g, "a"), y = value(g, "y");
    conv_node(g, "conv", x, w1, -1, c, 1, 1);
    op(g, "layer_scale", QF_OP_MUL, 2, (int[]){c, gamma}, m);
    op(g, "residual", QF_OP_ADD, 2, (int[]){m, x}, a);
    conv_node(g, "pw", a, w2, -1, y, 0, 1);
    output(g, a);
    output(g, y);
    if (other) {
        int w3 = weight(g, "w3", 4, (int64_t[]){4, 8, 1, 1}, -0.5f, 0.5f), z = value(g, "z");
        conv_node(g, "other", m, w3, -1, z, 0, 1);
        output(g, z);
    }
    prepare_graph(g, 2);
    return g;
}

START_TEST(small_addend_stays_fp16)
{
    for (int other = 0; other < 2; other++)
        for (int prec = QF_PREC_FP16; prec <= QF_PREC_INT8; prec++) {
            qf_graph *ref = layer_scale_net(other), *g = layer_scale_net(other);
            float *x = random_input(g, 18, -1, 1);
            qf_calib_table *t = calibrate_minmax(g, x);
            qf_quant_opts o;
            qf_quant_opts_init(&o);
            o.precision = (qf_precision)prec;
            OK(qf_quantize(g, t, &o, NULL));
            const qf_precision mul = node_named(g, "layer_scale")->precision, add = node_named(g, "residual")->precision;
            ck_assert_msg(other ? mul != QF_PREC_FP16 : mul == QF_PREC_FP16, "other %d, %s: the Mul is %s", other,
                          qf_precision_name(prec), qf_precision_name(mul));
            if (!other)
                ck_assert_msg(add == QF_PREC_FP16, "%s: the Add is %s", qf_precision_name(prec), qf_precision_name(add));
            float *ya = run(ref, x, NULL, NULL), *yb = run(g, x, NULL, NULL);
            /* output a: x plus 1e-6 of the conv, as FP16 holds x */
            double db = sqnr_db(ya, yb, 2 * 8 * 36);
            ck_assert_msg(db > 60.0, "other %d, %s: SQNR of a %.1f dB", other, qf_precision_name(prec), db);
            free(x), free(ya), free(yb);
            qf_calib_table_free(t);
            qf_graph_free(ref);
            qf_graph_free(g);
        }
}
END_TEST

/* ---- a bias beyond the accumulator's range ------------------------------------------ */

/* GoogLeNet's head: x (2,8,4,4) -> Conv 1x1 -> Relu -> GlobalAveragePool ->
 * Flatten -> Gemm (10, bias in +-0.03 as torchvision leaves it) -> y. */
static qf_graph *head_net(void)
{
    rng = 21;
    qf_graph *g = qf_graph_new("head");
    int x = input(g, "x", 4, (int64_t[]){2, 8, 4, 4});
    int w = weight(g, "w", 4, (int64_t[]){16, 8, 1, 1}, -0.5f, 0.5f);
    int wf = weight(g, "wf", 2, (int64_t[]){10, 16}, -0.02f, 0.02f);
    int bf = weight(g, "bf", 1, (int64_t[]){10}, -0.03f, 0.03f);
    int c = value(g, "c"), r = value(g, "r"), gp = value(g, "gp"), fl = value(g, "fl"), y = value(g, "y");
    conv_node(g, "conv", x, w, -1, c, 0, 1);
    op(g, "relu", QF_OP_RELU, 1, (int[]){c}, r);
    op(g, "gap", QF_OP_GLOBAL_AVERAGE_POOL, 1, (int[]){r}, gp);
    op(g, "flatten", QF_OP_FLATTEN, 1, (int[]){gp}, fl);
    qf_node *fc = op(g, "fc", QF_OP_GEMM, 3, (int[]){fl, wf, bf}, y);
    set_int(fc, "transB", 1);
    output(g, y);
    prepare_graph(g, 2);
    return g;
}

/* With inputs near 1e-11 the classifier's bias is 2^50 steps of its INT8
 * accumulator at its weights' own scale; clamped to the 2^30 that int32
 * allows, it replaced the bias and random-init GoogLeNet gave 0 dB. The
 * channels' weight scales are raised until the bias fits (per tensor: the one
 * scale), so the classifier stays INT8 and its output is the bias it is in
 * FP32; at scale 1 nothing is raised. A bias no scale fits (3e38 beside those
 * inputs) keeps the classifier in float, with a warning naming it. */
START_TEST(bias_beyond_accumulator_raises_weight_scales)
{
    const struct {
        int k;
        bool per_tensor, huge_bias;
    } cases[] = {{0, false, false}, {36, false, false}, {36, true, false}, {36, false, true}};
    for (size_t j = 0; j < QF_ARRAY_LEN(cases); j++) {
        qf_graph *ref = head_net(), *g = head_net();
        if (cases[j].huge_bias) {
            ((float *)ref->values[qf_graph_find_value(ref, "bf")].data)[4] = 3e38f;
            ((float *)g->values[qf_graph_find_value(g, "bf")].data)[4] = 3e38f;
        }
        float *x = random_input(g, 22, -1, 1);
        for (int i = 0; i < 2 * 8 * 16; i++) x[i] = ldexpf(x[i], -cases[j].k);
        qf_calib_table *t = calibrate_minmax(g, x);
        qf_quant_opts o;
        qf_quant_opts_init(&o);
        o.per_tensor_weights = cases[j].per_tensor;
        o.int8_pooled = true; /* the classifier after the pool is an INT8 candidate */
        qf_quant_summary sum;
        warned[0] = '\0';
        /* with a huge bias, the info lines too: the float-node summary names the reason */
        qf_log_set(capture, NULL, cases[j].huge_bias ? QF_LOG_INFO : QF_LOG_WARN);
        qf_status st = qf_quantize(g, t, &o, &sum);
        qf_log_set(NULL, NULL, QF_LOG_WARN);
        OK(st);
        float *y32 = run(ref, x, NULL, NULL), *y8 = run(g, x, NULL, NULL);
        double db = sqnr_db(y32, y8, 20);
        ck_assert_msg(db > 30.0, "case %zu: SQNR %.1f dB", j, db);
        const qf_node *fc = node_named(g, "fc");
        ck_assert_int_eq(node_named(g, "conv")->precision, QF_PREC_INT8);
        if (cases[j].huge_bias) {
            ck_assert_int_eq(fc->precision, QF_PREC_FP32);
            ck_assert_msg(strstr(warned, "node fc computes in float: its bias 3e+38 (channel 4) fits its INT8 "
                                         "accumulator"), "warnings: %s", warned);
            ck_assert_msg(strstr(warned, "Gemm                 bias beyond the INT8 accumulator (warned above)"),
                          "summary: %s", warned);
            ck_assert_int_eq(sum.rescaled_layers, 0);
        } else {
            ck_assert_int_eq(fc->precision, QF_PREC_INT8);
            ck_assert_str_eq(warned, "");
            /* at 2^-36 each of the ten biases needs more than 2^30 steps (per tensor: the one scale, all ten) */
            ck_assert_int_eq(sum.rescaled_layers, cases[j].k ? 1 : 0);
            ck_assert_int_eq(sum.rescaled_channels, cases[j].k ? 10 : 0);
        }
        free(x), free(y32), free(y8);
        qf_calib_table_free(t);
        qf_graph_free(ref);
        qf_graph_free(g);
    }
}
END_TEST

/* x (2,4,8,8) -> Conv 3x3 pad 1 (8 channels) -> y, where channel 3 is dead as
 * BatchNorm folding leaves EfficientNet-Lite1's: weights near 1e-7 beside a
 * bias of 1. At its own weight scale that bias is 1.6e11 accumulator steps,
 * beyond int32 (the whole convolution computed in float before).
 * With `relu`, x -> Relu -> r -> the Conv, whose dead channel's weights lie in
 * [0.5e-5, 1e-5]: r gets a zero point (-128, the default), which adds 128
 * times each channel's int8 weight sum to its bias. */
static qf_graph *dead_channel_net(bool relu)
{
    rng = 31;
    qf_graph *g = qf_graph_new("dead_channel");
    int x = input(g, "x", 4, (int64_t[]){2, 4, 8, 8});
    int w = weight(g, "w", 4, (int64_t[]){8, 4, 3, 3}, -0.5f, 0.5f);
    int b = weight(g, "b", 1, (int64_t[]){8}, -0.2f, 0.2f);
    int y = value(g, "y"), in = x;
    if (relu) op(g, "relu", QF_OP_RELU, 1, (int[]){x}, in = value(g, "r"));
    conv_node(g, "conv", in, w, b, y, 1, 1);
    output(g, y);
    prepare_graph(g, 2);
    float *wd = g->values[w].data, *bd = g->values[b].data;
    for (int i = 0; i < 4 * 9; i++) wd[3 * 4 * 9 + i] = relu ? frand(0.5e-5f, 1e-5f) : frand(-1e-7f, 1e-7f);
    bd[3] = 1.0f;
    return g;
}

/* The convolution stays INT8 with one channel's weight scale raised, and its
 * output matches FP32: the dead channel (written in FP32 by the epilogue, as a
 * graph output) is within 1e-5 of FP32, the rounding of its tiny weights on
 * 36 inputs in [-1, 1] (a clamp to 2^30 steps made it about 2e-3); the whole
 * output above min_db. */
static void check_dead_channel(bool relu, double min_db)
{
    qf_graph *ref = dead_channel_net(relu), *g = dead_channel_net(relu);
    float *x = random_input(g, 32, -1, 1);
    qf_calib_table *t = calibrate_minmax(g, x);
    qf_quant_summary sum;
    warned[0] = '\0';
    qf_log_set(capture, NULL, QF_LOG_WARN);
    qf_status st = qf_quantize(g, t, NULL, &sum);
    qf_log_set(NULL, NULL, QF_LOG_WARN);
    OK(st);
    ck_assert_msg(!warned[0], "%s", warned);
    ck_assert_int_eq(node_named(g, "conv")->precision, QF_PREC_INT8);
    ck_assert_int_eq(sum.rescaled_channels, 1);
    ck_assert_int_eq(sum.rescaled_layers, 1);
    float *y32 = run(ref, x, NULL, NULL), *y8 = run(g, x, NULL, NULL);
    double worst = 0.0;
    for (int n = 0; n < 2; n++)
        for (int i = 0; i < 64; i++) {
            const int at = (n * 8 + 3) * 64 + i;
            worst = fmax(worst, fabs((double)y8[at] - (double)y32[at]));
        }
    ck_assert_msg(worst <= 1e-5, "dead channel: |INT8 - FP32| up to %g", worst);
    double db = sqnr_db(y32, y8, 2 * 8 * 64);
    ck_assert_msg(db > min_db, "SQNR %.1f dB", db);
    free(x), free(y32), free(y8);
    qf_calib_table_free(t);
    qf_graph_free(ref);
    qf_graph_free(g);
}

/* An INT8 convolution's SQNR (45.8 dB when written). */
START_TEST(dead_channel_stays_int8)
{
    check_dead_channel(false, 40.0);
}
END_TEST

/* The dead channel's raised scale must leave room for the zero point's share:
 * raised only until the bias fits (2^30 steps), its 36 weights rounded to
 * about 40 steps each and the share pushed the bias past the accumulator, so
 * the conv computed in float (EfficientNet-Lite1: 8 depthwise convs, and its
 * CPU INT8 then ran at 40 images/s against FP32's 64). */
START_TEST(dead_channel_with_input_zero_point_stays_int8)
{
    check_dead_channel(true, 35.0);
}
END_TEST

/* ---- degenerate ranges -------------------------------------------------------------- */

/* A table whose thresholds leave a tensor no INT8 range (0, or so small that
 * amax/127 is no normal float: that one was an error, "no valid scale (0)")
 * quantizes with that tensor held as zeros and one warning line naming it;
 * tensors with a usable range, however small, are not named. */
START_TEST(degenerate_ranges_warn_in_quant)
{
    qf_graph *g = homogeneous_net(1.0f);
    float *x = random_input(g, 6, -1, 1);
    qf_calib_table *t = calibrate_minmax(g, x);
    const char *set[] = {"r1", "gp", "r2"};
    const float to[] = {0.0f, 1e-44f, 1e-30f};
    for (int k = 0; k < 3; k++) t->entries[qf_calib_table_find(t, set[k])].amax[QF_CALIB_MINMAX] = to[k];
    warned[0] = '\0';
    qf_log_set(capture, NULL, QF_LOG_WARN);
    qf_status st = qf_quantize(g, t, NULL, NULL);
    qf_log_set(NULL, NULL, QF_LOG_WARN);
    OK(st);
    ck_assert_msg(strstr(warned, "tensor r1: its calibrated range is degenerate (minmax threshold 0:"), "%s", warned);
    ck_assert_msg(strstr(warned, "tensor gp: its calibrated range is degenerate"), "%s", warned);
    ck_assert_msg(!strstr(warned, "tensor r2"), "%s", warned);
    int lines = 0;
    for (const char *p = warned; (p = strchr(p, '\n')); p++) lines++;
    ck_assert_msg(lines == 2, "%s", warned);
    float *y = run(g, x, NULL, NULL);
    for (int i = 0; i < 10; i++) ck_assert(isfinite(y[i]));
    free(x), free(y);
    qf_calib_table_free(t);
    qf_graph_free(g);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("quant_scale");
    TCase *tc = tcase_create("scale");
    tcase_add_test(tc, int8_is_scale_invariant);
    tcase_add_test(tc, tiny_activations_stay_out_of_fp16);
    tcase_add_test(tc, tiny_bias_stays_fp16);
    tcase_add_test(tc, small_addend_stays_fp16);
    tcase_add_test(tc, bias_beyond_accumulator_raises_weight_scales);
    tcase_add_test(tc, dead_channel_stays_int8);
    tcase_add_test(tc, dead_channel_with_input_zero_point_stays_int8);
    tcase_add_test(tc, degenerate_ranges_warn_in_quant);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
