/* The CUDA engine against the CPU engine, its specification: every op the
 * CUDA engine implements, in small graphs on random inputs, at FP32 (1e-4
 * relative, no TF32), FP16 (half-precision tolerance) and INT8 (within one
 * unit of the output's scale; bit for bit where both compute alike); the
 * observer hook; graph replay with fresh inputs; qf_calibrate on the device;
 * nodes run on the host (refused by a device kernel, or forced by
 * QFORGE_CUDA_HOST_OPS): results, log lines, errors; absent devices; and ResNet-20 and MobileNetV2 from the shared data (QFORGE_DATA, default ../shared/data) at
 * all three precisions, with top-1 agreement between GPU and CPU >= 0.999.
 * Exits 77 (skipped) where no CUDA device is usable, as on CI. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "internal.h"
#include "qforge/calib.h"
#include "../calib/calib_internal.h"
#include "testutil.h"
#include "smooth_sweep.h"

/* ---- graph building ---------------------------------------------------------------- */

static int ints(qf_graph *g, const char *name, int n, const int64_t *vals)
{
    int64_t d[1] = {n};
    int v = qf_graph_add_value(g, name, QF_I64, 1, d);
    int64_t *x = malloc((size_t)(n ? n : 1) * sizeof *x);
    memcpy(x, vals, (size_t)n * sizeof *x);
    g->values[v].data = x;
    g->values[v].flags |= QF_VALUE_CONST;
    return v;
}

#define DIMS(...) ((const int64_t[]){__VA_ARGS__})
#define IN(...) ((const int[]){__VA_ARGS__})

/* A kh x kw conv with random weights (and bias when `bias`); pads as top,
 * left, bottom, right. conv: a k x k one. */
static int conv_rect(qf_graph *g, const char *name, int x, int64_t cin, int64_t m, int kh, int kw, int stride,
                     const int64_t pads[4], int64_t group, int dil, bool bias)
{
    char wn[64], bn[64], yn[64];
    snprintf(wn, sizeof wn, "%s.w", name);
    snprintf(bn, sizeof bn, "%s.b", name);
    snprintf(yn, sizeof yn, "%s.y", name);
    float r = 1.5f / sqrtf((float)(cin / group * kh * kw));
    int w = weight(g, wn, 4, DIMS(m, cin / group, kh, kw), -r, r);
    int b = bias ? weight(g, bn, 1, DIMS(m), -0.2f, 0.2f) : -1;
    int y = value(g, yn);
    qf_node *n = op(g, name, QF_OP_CONV, bias ? 3 : 2, IN(x, w, b), y);
    set_ints(n, "kernel_shape", 2, DIMS(kh, kw));
    set_ints(n, "strides", 2, DIMS(stride, stride));
    set_ints(n, "pads", 4, DIMS(pads[0], pads[1], pads[2], pads[3]));
    if (dil > 1) set_ints(n, "dilations", 2, DIMS(dil, dil));
    if (group > 1) set_int(n, "group", group);
    return y;
}

static int conv(qf_graph *g, const char *name, int x, int64_t cin, int64_t m, int k, int stride, const int64_t pads[4],
                int64_t group, int dil, bool bias)
{
    return conv_rect(g, name, x, cin, m, k, k, stride, pads, group, dil, bias);
}

static const int64_t P0[4] = {0, 0, 0, 0}, P1[4] = {1, 1, 1, 1}, P2[4] = {2, 2, 2, 2};

static int unary(qf_graph *g, const char *name, qf_op o, int x)
{
    int y = value(g, name);
    op(g, name, o, 1, IN(x), y);
    return y;
}

static int binary(qf_graph *g, const char *name, qf_op o, int a, int b)
{
    int y = value(g, name);
    op(g, name, o, 2, IN(a, b), y);
    return y;
}

static qf_graph *new_graph(const char *name)
{
    qf_graph *g = qf_graph_new(name);
    g->opset = 13;
    return g;
}

static void prepare(qf_graph *g, int batch)
{
    for (int i = 0; i < g->n_nodes; i++) {
        qf_status st = qfi_ops[g->nodes[i].op]->parse(g, &g->nodes[i]);
        ck_assert_msg(st == QF_OK, "%s", qf_error_message());
    }
    qf_status st = qf_graph_prepare(g, batch);
    ck_assert_msg(st == QF_OK, "%s", qf_error_message());
}

/* ---- the op graphs (each deterministic for a seed) ---------------------------------- */

typedef qf_graph *(*build_fn)(void);

static qf_graph *b_conv3x3(void)
{
    qf_graph *g = new_graph("conv3x3");
    int x = input(g, "x", 4, DIMS(2, 16, 12, 12));
    output(g, conv(g, "c", x, 16, 32, 3, 1, P1, 1, 1, true));
    return g;
}
/* Several tiles of the implicit-GEMM INT8 kernel in each GEMM dimension: 338
 * positions (three blocks of 128, the last partial), 160 channels (a partial
 * second block of 128), K = 576 (nine 64-byte stages), stride 2 and a 1x1. */
static qf_graph *b_conv_tiles(void)
{
    qf_graph *g = new_graph("conv_tiles");
    int x = input(g, "x", 4, DIMS(2, 64, 13, 13));
    int y = conv(g, "c", x, 64, 160, 3, 1, P1, 1, 1, true);
    int z = conv(g, "s2", y, 160, 48, 3, 2, P1, 1, 1, true);
    output(g, conv(g, "pw", z, 48, 136, 1, 1, P0, 1, 1, false));
    return g;
}
static qf_graph *b_conv_rgb_s2(void)
{
    qf_graph *g = new_graph("conv_rgb_s2");
    int x = input(g, "x", 4, DIMS(2, 3, 17, 17));
    output(g, conv(g, "c", x, 3, 8, 3, 2, P1, 1, 1, true));
    return g;
}
/* RGB stems the INT8 stem kernel takes (3x3 over 3 channels): stride 1 with
 * a SiLU on the graph's input (its QuantizeLinear folded into the conv),
 * and stride 2 on an int8 value of 3 channels. */
static qf_graph *b_rgb_stems(void)
{
    qf_graph *g = new_graph("rgb_stems");
    int x = input(g, "x", 4, DIMS(2, 3, 15, 15));
    int s1 = conv(g, "s1", x, 3, 20, 3, 1, P1, 1, 1, true);
    int si = binary(g, "silu", QF_OP_MUL, s1, unary(g, "sig", QF_OP_SIGMOID, s1));
    output(g, si);
    int c3 = conv(g, "c3", si, 20, 3, 1, 1, P0, 1, 1, true);
    output(g, conv(g, "rgb2", c3, 3, 12, 3, 2, P1, 1, 1, true));
    return g;
}
/* MobileNetV3's stem at the zoo's batch of 50 and 224x224: the input's
 * QuantizeLinear folded into the INT8 conv, which then reads the graph's
 * float input after the node that lists it has run. The memory plan must
 * keep that input alive to the conv. Left to the nodes, the plan lays out
 * by size: the input (30 MB) from 0, the 1x1 conv's float output (12.5 MB,
 * born after the input's last listed read) from 0 too, and the stem's int8
 * output above that, inside the input's bytes; the stem kernel, reading the
 * input pixel by pixel as it writes, then reads its own outputs as pixels
 * (the zoo's MobileNetV3s agreed with the CPU engine on 0.95 of images). */
static qf_graph *b_rgb_stem_batch50(void)
{
    qf_graph *g = new_graph("rgb_stem_batch50");
    int x = input(g, "x", 4, DIMS(50, 3, 224, 224));
    int stem = unary(g, "stem_hs", QF_OP_HARD_SWISH, conv(g, "stem", x, 3, 16, 3, 2, P1, 1, 1, true));
    output(g, conv(g, "pw", stem, 16, 5, 1, 1, P0, 1, 1, true));
    return g;
}
static qf_graph *b_conv_1x1(void)
{
    qf_graph *g = new_graph("conv_1x1");
    int x = input(g, "x", 4, DIMS(2, 32, 7, 7));
    int y = conv(g, "c1", x, 32, 64, 1, 1, P0, 1, 1, true);
    output(g, conv(g, "c2", y, 64, 20, 1, 1, P0, 1, 1, false)); /* 20 outputs: not a multiple of 8 */
    return g;
}
static qf_graph *b_conv_depthwise(void)
{
    qf_graph *g = new_graph("conv_depthwise");
    int x = input(g, "x", 4, DIMS(2, 16, 10, 10));
    int y = conv(g, "dw1", x, 16, 16, 3, 1, P1, 16, 1, true);
    output(g, conv(g, "dw2", y, 16, 32, 3, 2, P1, 16, 1, true)); /* channel multiplier 2, stride 2 */
    return g;
}
/* Depthwise through the 4-channel vectors (12 channels), strided and
 * dilated, with a ReLU and a 5x5 depthwise conv of 8-channel vectors after
 * it (INT8: the sliding window, 2 channels a thread); and 3x3 ones of the
 * INT8 sliding-window kernel: stride 2 with uneven pads
 * and a row of 11 pixels (one 8-pixel strip and a short one), stride 1 with
 * a residual Add. */
static qf_graph *b_depthwise_vectors(void)
{
    qf_graph *g = new_graph("depthwise_vectors");
    int x = input(g, "x", 4, DIMS(2, 12, 11, 21));
    int y = unary(g, "relu", QF_OP_RELU, conv(g, "dw12", x, 12, 12, 3, 2, DIMS(2, 1, 0, 2), 12, 2, true));
    int z = conv(g, "pw", y, 12, 24, 1, 1, P0, 1, 1, false);
    output(g, conv(g, "dw24", z, 24, 24, 5, 1, DIMS(2, 2, 2, 2), 24, 1, true));
    output(g, conv(g, "dws2", x, 12, 12, 3, 2, DIMS(1, 0, 0, 1), 12, 1, true));
    output(g, binary(g, "dw_res", QF_OP_ADD, conv(g, "dws1", y, 12, 12, 3, 1, P1, 12, 1, true), y));
    /* ReLU6-style Clips a float depthwise conv takes in (bounds exact in
     * half), and one it cannot take in FP16 (0.1 is not a half) */
    int c0 = weight(g, "c0", 0, NULL, 0.0f, 0.0f), c6 = weight(g, "c6", 0, NULL, 0.5f, 0.5f);
    int c01 = weight(g, "c01", 0, NULL, 0.1f, 0.1f), z6 = value(g, "relu6"), z01 = value(g, "clip01");
    op(g, "relu6", QF_OP_CLIP, 3, IN(conv(g, "dwc", z, 24, 24, 3, 1, P1, 24, 1, true), c0, c6), z6);
    op(g, "clip01", QF_OP_CLIP, 3, IN(conv(g, "dwd", z6, 24, 24, 3, 2, P1, 24, 1, true), c0, c01), z01);
    output(g, z01);
    return g;
}
/* 7x7 depthwise convs (ConvNeXt's; the dp4a kernel): 20 channels (five
 * 4-channel groups) over rows of 13 (an 8-pixel strip and a short one),
 * padding 3, on an input with a zero point (a Sigmoid's), with a residual
 * Add, one read by a Softmax (an INT8 layer writing halves), and one of
 * stride 2. INT8 is
 * checked bit for bit (depthwise_7x7_exact): integer sums are exact. */
static qf_graph *b_depthwise_7x7(void)
{
    qf_graph *g = new_graph("depthwise_7x7");
    int x = unary(g, "sig_in", QF_OP_SIGMOID, input(g, "x", 4, DIMS(2, 20, 9, 13)));
    const int64_t P3[4] = {3, 3, 3, 3};
    int y = conv(g, "dw7a", x, 20, 20, 7, 1, P3, 20, 1, true);
    output(g, y);
    int r = binary(g, "dw7_res", QF_OP_ADD, conv(g, "dw7b", y, 20, 20, 7, 1, P3, 20, 1, true), y);
    output(g, conv(g, "pw", r, 20, 8, 1, 1, P0, 1, 1, true));
    output(g, unary(g, "dw7_softmax", QF_OP_SOFTMAX, conv(g, "dw7c", y, 20, 20, 7, 1, P3, 20, 1, false)));
    /* stride 2 (5x7 outputs), int8 out */
    output(g, conv(g, "pw2", conv(g, "dw7s2", y, 20, 20, 7, 2, P3, 20, 1, true), 20, 8, 1, 1, P0, 1, 1, true));
    return g;
}
static qf_graph *b_conv_grouped_dilated(void)
{
    qf_graph *g = new_graph("conv_grouped_dilated");
    int x = input(g, "x", 4, DIMS(2, 8, 11, 11));
    int y = conv(g, "grp", x, 8, 12, 3, 1, P1, 2, 1, true);
    output(g, conv(g, "dil", y, 12, 8, 5, 1, DIMS(1, 2, 3, 0), 1, 2, true));
    return g;
}
/* Grouped convs with several channels a group (the vectorized kernels; INT8
 * by dp4a, 3x3 ones of 4 to 16 channels a group in strips of pixels): 4 a
 * group as ResNeXt's, 16 with a residual Add, 24 at stride 2 as RegNet's,
 * Cg != Mg, 6 outputs a group (no whole INT8 vector), 8 and 16 at stride 2. */
static qf_graph *b_conv_grouped_vectors(void)
{
    qf_graph *g = new_graph("conv_grouped_vectors");
    int x = input(g, "x", 4, DIMS(2, 32, 9, 9));
    int a = unary(g, "ra", QF_OP_RELU, conv(g, "g4", x, 32, 32, 3, 1, P1, 8, 1, true));
    int r = unary(g, "rr", QF_OP_RELU, binary(g, "res", QF_OP_ADD, conv(g, "g16", a, 32, 32, 3, 1, P1, 2, 1, true), a));
    int b = unary(g, "rb", QF_OP_RELU, conv(g, "pw", r, 32, 48, 1, 1, P0, 1, 1, true));
    int c = unary(g, "rc", QF_OP_RELU, conv(g, "g24s2", b, 48, 48, 3, 2, P1, 2, 1, true));
    int d = unary(g, "rd", QF_OP_RELU, conv(g, "g8to4", c, 48, 24, 3, 1, P1, 6, 1, false));
    output(g, conv(g, "g4to6", d, 24, 36, 3, 1, P1, 6, 1, true));
    /* stride 2 with 8 and 16 channels a group (INT8: the strip kernel's SW = 2, a strip's tail) */
    output(g, conv(g, "g8s2", d, 24, 24, 3, 2, P1, 3, 1, true));
    output(g, conv(g, "g16s2", a, 32, 32, 3, 2, P1, 2, 1, true));
    /* 16 channels a group, dilated (INT8: the mma kernel; g16 and g16s2 too) */
    output(g, conv(g, "g16d2", a, 32, 32, 3, 1, P2, 2, 2, true));
    return g;
}
static qf_graph *b_conv_relu_pool(void)
{
    qf_graph *g = new_graph("conv_relu_pool");
    int x = input(g, "x", 4, DIMS(2, 8, 15, 15));
    int r = unary(g, "relu", QF_OP_RELU, conv(g, "c", x, 8, 16, 3, 1, P1, 1, 1, true));
    int y = value(g, "pool");
    qf_node *n = op(g, "pool", QF_OP_MAX_POOL, 1, IN(r), y);
    set_ints(n, "kernel_shape", 2, DIMS(3, 3));
    set_ints(n, "strides", 2, DIMS(2, 2));
    set_ints(n, "pads", 4, DIMS(1, 1, 1, 1));
    output(g, y);
    return g;
}
/* SiLU (Sigmoid and Mul) after a 3x3 conv, Sigmoid after a 1x1 conv: INT8
 * fuses both into the convs' epilogues. */
static qf_graph *b_conv_smooth(void)
{
    qf_graph *g = new_graph("conv_smooth");
    int x = input(g, "x", 4, DIMS(2, 16, 12, 12));
    int y = conv(g, "c", x, 16, 32, 3, 1, P1, 1, 1, true);
    int s = binary(g, "silu", QF_OP_MUL, y, unary(g, "silu_gate", QF_OP_SIGMOID, y));
    output(g, unary(g, "sigmoid", QF_OP_SIGMOID, conv(g, "c2", s, 32, 16, 1, 1, P0, 1, 1, true)));
    return g;
}
/* A residual block of C channels on HxH: conv-relu-conv, add the block's input, relu. */
static qf_graph *residual_block(const char *name, int64_t C, int64_t H)
{
    qf_graph *g = new_graph(name);
    int x = input(g, "x", 4, DIMS(2, C, H, H));
    int a = unary(g, "r1", QF_OP_RELU, conv(g, "ca", x, C, C, 3, 1, P1, 1, 1, true));
    int b = conv(g, "cb", a, C, C, 3, 1, P1, 1, 1, true);
    output(g, unary(g, "r2", QF_OP_RELU, binary(g, "add", QF_OP_ADD, b, x)));
    return g;
}
static qf_graph *b_residual(void) { return residual_block("residual", 16, 8); }
/* 72 channels: the residual through 8-byte epilogue vectors (72 % 16 != 0),
 * and K = 648 taps of random weights, past the implicit GEMM's exact
 * small-accumulator bound (its other conversion path). */
static qf_graph *b_residual_wide(void) { return residual_block("residual_wide", 72, 10); }
static qf_graph *b_pools(void)
{
    qf_graph *g = new_graph("pools");
    int x = input(g, "x", 4, DIMS(2, 8, 13, 13));
    int c = conv(g, "c", x, 8, 8, 3, 1, P1, 1, 1, true);
    int a = value(g, "avg"), b = value(g, "avg_ceil"), m = value(g, "gmax");
    qf_node *n = op(g, "avg", QF_OP_AVERAGE_POOL, 1, IN(c), a);
    set_ints(n, "kernel_shape", 2, DIMS(3, 3));
    set_ints(n, "strides", 2, DIMS(2, 2));
    set_ints(n, "pads", 4, DIMS(1, 1, 1, 1));
    set_int(n, "count_include_pad", 1);
    n = op(g, "avg_ceil", QF_OP_AVERAGE_POOL, 1, IN(c), b);
    set_ints(n, "kernel_shape", 2, DIMS(2, 2));
    set_ints(n, "strides", 2, DIMS(2, 2));
    set_int(n, "ceil_mode", 1);
    op(g, "gmax", QF_OP_GLOBAL_MAX_POOL, 1, IN(c), m);
    output(g, a);
    output(g, b);
    output(g, m);
    output(g, unary(g, "gavg", QF_OP_GLOBAL_AVERAGE_POOL, c));
    return g;
}
static qf_graph *b_gemm_bias(void)
{
    qf_graph *g = new_graph("gemm_bias");
    int x = input(g, "x", 2, DIMS(4, 24));
    int w = weight(g, "w", 2, DIMS(10, 24), -0.3f, 0.3f), b = weight(g, "b", 1, DIMS(10), -0.2f, 0.2f);
    int y = value(g, "y");
    qf_node *n = op(g, "fc", QF_OP_GEMM, 3, IN(x, w, b), y);
    set_int(n, "transB", 1);
    output(g, y);
    return g;
}
static qf_graph *b_gemm_general(void)
{
    qf_graph *g = new_graph("gemm_general");
    int a = input(g, "a", 2, DIMS(20, 6));
    int w = weight(g, "w", 2, DIMS(20, 12), -0.3f, 0.3f), cm = weight(g, "cm", 2, DIMS(6, 12), -1.0f, 1.0f);
    int y = value(g, "y");
    qf_node *n = op(g, "gemm", QF_OP_GEMM, 3, IN(a, w, cm), y);
    set_int(n, "transA", 1);
    set_float(n, "alpha", 0.5f);
    set_float(n, "beta", 2.0f);
    output(g, y);
    return g;
}
static qf_graph *b_matmul(void)
{
    qf_graph *g = new_graph("matmul");
    int x = input(g, "x", 3, DIMS(2, 5, 16));
    int w = weight(g, "w", 2, DIMS(16, 12), -0.3f, 0.3f);
    output(g, binary(g, "mm", QF_OP_MATMUL, x, w));
    int a = input(g, "a", 4, DIMS(2, 3, 4, 8)), b = input(g, "b", 4, DIMS(2, 1, 8, 5));
    output(g, binary(g, "bmm", QF_OP_MATMUL, a, b));
    return g;
}
/* Linear layer: MatMul(x, W (k, n)) + b. */
static int linear(qf_graph *g, const char *name, int x, int64_t k, int64_t n)
{
    char wn[64], bn[64], mn[64];
    snprintf(wn, sizeof wn, "%s.w", name);
    snprintf(bn, sizeof bn, "%s.b", name);
    snprintf(mn, sizeof mn, "%s.mm", name);
    float r = 1.5f / sqrtf((float)k);
    int w = weight(g, wn, 2, DIMS(k, n), -r, r), b = weight(g, bn, 1, DIMS(n), -0.1f, 0.1f);
    return binary(g, name, QF_OP_ADD, binary(g, mn, QF_OP_MATMUL, x, w), b);
}
static int reshape_to(qf_graph *g, const char *name, int x, int nd, const int64_t *shape)
{
    char sn[64];
    snprintf(sn, sizeof sn, "%s.shape", name);
    return binary(g, name, QF_OP_RESHAPE, x, ints(g, sn, nd, shape));
}
static int transpose4(qf_graph *g, const char *name, int x, const int64_t *perm)
{
    int y = unary(g, name, QF_OP_TRANSPOSE, x);
    set_ints(&g->nodes[g->n_nodes - 1], "perm", 4, perm);
    return y;
}
/* Linear `name` of x (batch, tokens, in features) split into heads of dim:
 * (batch, heads, tokens, dim), or with keys_t (batch, heads, dim, tokens), the
 * K^T attention multiplies by; nodes `name`, `name`.r, `name`.t. */
static int split_heads(qf_graph *g, const char *name, int x, int64_t in, int64_t tokens, int64_t heads, int64_t dim,
                       bool keys_t)
{
    char rn[48], tn[48];
    snprintf(rn, sizeof rn, "%s.r", name);
    snprintf(tn, sizeof tn, "%s.t", name);
    int r = reshape_to(g, rn, linear(g, name, x, in, heads * dim), 4, DIMS(0, tokens, heads, dim));
    return transpose4(g, tn, r, keys_t ? DIMS(0, 2, 3, 1) : DIMS(0, 2, 1, 3));
}
/* Attention's output av (batch, heads, tokens, dim) back to (batch, tokens,
 * width) and through the Linear "proj". */
static int merge_heads(qf_graph *g, int av, int64_t tokens, int64_t width)
{
    return linear(g, "proj", reshape_to(g, "merge", transpose4(g, "av.t", av, DIMS(0, 2, 1, 3)), 3, DIMS(0, tokens, width)),
                  width, width);
}
/* Attention's MatMuls of two activations on Q, K, V from Linear layers:
 * x (2 images, 10 tokens, 32 features), 4 heads of 8; "qk" = Q x K^T (4-D
 * batched, K = 8: cuBLASLt's int8 GEMM, N = 10 padded to 12 accumulator
 * columns); "av" = P x V with V one head broadcast over the heads
 * (multi-query; a loop of GEMMs) and K = 10 tokens, not a multiple of 4 (the
 * fallback kernel). P is Relu(qk) rather than Softmax: with
 * --int8-attention every op here is exact on both engines, so the outputs
 * compare bit for bit (a Softmax's float rounding may differ by an ulp). */
static qf_graph *b_attention(void)
{
    qf_graph *g = new_graph("attention");
    int x = input(g, "x", 3, DIMS(2, 10, 32));
    int q = split_heads(g, "q", x, 32, 10, 4, 8, false), kt = split_heads(g, "k", x, 32, 10, 4, 8, true);
    int v = reshape_to(g, "v.r", linear(g, "v", x, 32, 8), 4, DIMS(0, 1, 10, 8));
    int qk = binary(g, "qk", QF_OP_MATMUL, q, kt);
    output(g, qk);
    int av = binary(g, "av", QF_OP_MATMUL, unary(g, "p", QF_OP_RELU, qk), v);
    output(g, av);
    output(g, merge_heads(g, av, 10, 32));
    return g;
}
/* Attention as the exporters write it, for the fused FP16 kernel
 * (runtime/cuda/attention.cu): ViT's form, MatMul -> Softmax -> MatMul on 2
 * images of 80 tokens, 2 heads of 64 (two query and two key tiles, the last
 * ones partial); V is made before the scores, as exporters order it. */
static qf_graph *b_sdpa_vit(void)
{
    qf_graph *g = new_graph("sdpa_vit");
    int x = input(g, "x", 3, DIMS(2, 80, 128));
    int v = split_heads(g, "v", x, 128, 80, 2, 64, false), q = split_heads(g, "q", x, 128, 80, 2, 64, false);
    int kt = split_heads(g, "k", x, 128, 80, 2, 64, true);
    int p = unary(g, "softmax", QF_OP_SOFTMAX, binary(g, "qk", QF_OP_MATMUL, q, kt));
    set_int(&g->nodes[g->n_nodes - 1], "axis", -1);
    int av = binary(g, "av", QF_OP_MATMUL, p, v);
    output(g, merge_heads(g, av, 80, 128));
    return g;
}
/* torch.onnx's scaled_dot_product_attention of heads q, k, v (2, 2, 80,
 * 64): softmax(Q K^T / 8) written as MatMul(Mul(Q, s), Mul(Transpose(K),
 * s)), s = 64^-1/4, then merged back to (2, 80, 128) as g's output. */
static qf_graph *scaled_sdpa_output(qf_graph *g, int q, int k, int v)
{
    int kt = value(g, "k.t"), c = weight(g, "s", 0, NULL, 0.35355339f, 0.35355339f);
    set_ints(op(g, "k.t", QF_OP_TRANSPOSE, 1, IN(k), kt), "perm", 4, DIMS(0, 1, 3, 2));
    int s = binary(g, "qk", QF_OP_MATMUL, binary(g, "q.s", QF_OP_MUL, q, c), binary(g, "kt.s", QF_OP_MUL, kt, c));
    int p = unary(g, "softmax", QF_OP_SOFTMAX, s);
    set_int(&g->nodes[g->n_nodes - 1], "axis", -1);
    int av = binary(g, "av", QF_OP_MATMUL, p, v);
    output(g, merge_heads(g, av, 80, 128));
    return g;
}
/* The scaled form on ViT's heads, which the chain takes in (K read by rows,
 * each score scaled in FP32). */
static qf_graph *b_sdpa_scaled(void)
{
    qf_graph *g = new_graph("sdpa_scaled");
    int x = input(g, "x", 3, DIMS(2, 80, 128));
    int v = split_heads(g, "v", x, 128, 80, 2, 64, false), q = split_heads(g, "q", x, 128, 80, 2, 64, false);
    int k = split_heads(g, "k", x, 128, 80, 2, 64, false);
    return scaled_sdpa_output(g, q, k, v);
}
/* timm's Attention (DeiT) on b_sdpa_scaled's sizes: one qkv Linear (128 ->
 * 384), Reshape (2, 80, 3, 2, 64), Transpose(2, 0, 3, 1, 4), a Split in
 * three along axis 0 and a Squeeze each as Q, K and V, then the scaled
 * form. At INT8 the scalar Muls read the int8 Q and K the Split made: the
 * chain takes them, K's Transpose and the split in, and reads all three
 * from the qkv output's int8 rows. */
static qf_graph *b_sdpa_timm(void)
{
    qf_graph *g = new_graph("sdpa_timm");
    int x = input(g, "x", 3, DIMS(2, 80, 128));
    int r = reshape_to(g, "qkv.r", linear(g, "qkv", x, 128, 384), 5, DIMS(0, 80, 3, 2, 64));
    int t = unary(g, "qkv.t", QF_OP_TRANSPOSE, r);
    set_ints(&g->nodes[g->n_nodes - 1], "perm", 5, DIMS(2, 0, 3, 1, 4));
    int part[3] = {value(g, "q.p"), value(g, "k.p"), value(g, "v.p")}, h[3];
    ck_assert_int_ge(qf_graph_add_node(g, "qkv.split", QF_OP_SPLIT, 1, IN(t), 3, part), 0);
    set_int(&g->nodes[g->n_nodes - 1], "axis", 0);
    for (int i = 0; i < 3; i++) {
        char n[8], ax[12];
        snprintf(n, sizeof n, "%c", "qkv"[i]), snprintf(ax, sizeof ax, "%c.axes", "qkv"[i]);
        h[i] = binary(g, n, QF_OP_SQUEEZE, part[i], ints(g, ax, 1, DIMS(0)));
    }
    return scaled_sdpa_output(g, h[0], h[1], h[2]);
}
/* Swin's form: 4 windows of 49 tokens (2 images of 2 windows), 2 heads of
 * 32; the scores get a relative-position bias [1, 2, 49, 49], are viewed as
 * [2, 2, 2, 49, 49] for the shifted windows' mask [1, 2, 1, 49, 49] (0 or
 * -100), and viewed back before the Softmax. */
static qf_graph *b_sdpa_swin(void)
{
    qf_graph *g = new_graph("sdpa_swin");
    int x = input(g, "x", 3, DIMS(4, 49, 64));
    int v = split_heads(g, "v", x, 64, 49, 2, 32, false), q = split_heads(g, "q", x, 64, 49, 2, 32, false);
    int kt = split_heads(g, "k", x, 64, 49, 2, 32, true);
    int bias = weight(g, "rel_bias", 4, DIMS(1, 2, 49, 49), -2.0f, 2.0f);
    int mask = weight(g, "mask", 5, DIMS(1, 2, 1, 49, 49), 0.0f, 1.0f);
    float *mk = (float *)g->values[mask].data;
    for (int i = 0; i < 2 * 49 * 49; i++) mk[i] = mk[i] < 0.3f ? -100.0f : 0.0f;
    int s = binary(g, "bias_add", QF_OP_ADD, binary(g, "qk", QF_OP_MATMUL, q, kt), bias);
    s = binary(g, "mask_add", QF_OP_ADD, reshape_to(g, "s.r", s, 5, DIMS(2, 2, 2, 49, 49)), mask);
    int p = unary(g, "softmax", QF_OP_SOFTMAX, reshape_to(g, "s.back", s, 4, DIMS(4, 2, 49, 49)));
    set_int(&g->nodes[g->n_nodes - 1], "axis", 3);
    int av = binary(g, "av", QF_OP_MATMUL, p, v);
    output(g, merge_heads(g, av, 49, 64));
    return g;
}
/* A transformer MLP, Linear layers on (2 images, 10 tokens): GELU (erf) and
 * GELU (tanh) in INT8 epilogues, then a Relu one, each with an int8 output
 * (the implicit GEMM is timed for them), then a float output (cuBLASLt). */
static qf_graph *b_mlp(void)
{
    qf_graph *g = new_graph("mlp");
    int x = input(g, "x", 3, DIMS(2, 10, 32));
    int h = unary(g, "gelu1", QF_OP_GELU, linear(g, "fc1", x, 32, 64));
    h = unary(g, "gelu2", QF_OP_GELU, linear(g, "fc2", h, 64, 64));
    attr(&g->nodes[g->n_nodes - 1], "approximate", QF_ATTR_STRING)->s = strdup("tanh");
    h = unary(g, "relu3", QF_OP_RELU, linear(g, "fc3", h, 64, 32));
    output(g, linear(g, "fc4", h, 32, 16));
    return g;
}
/* ConvNeXt's block: a 7x7 depthwise conv (NHWC), permuted to [N, H, W, C]
 * for LayerNorm and two Linear layers (GELU between), permuted back, times
 * the layer scale ([C, 1, 1]) and added to the block's input, then a 1x1
 * conv. The CUDA engine keeps both permutes as views of the bytes before
 * them (assign_layouts stores the second one's output NHWC). */
static qf_graph *b_convnext_block(void)
{
    qf_graph *g = new_graph("convnext_block");
    g->opset = 17; /* LayerNormalization */
    int x = conv(g, "stem", input(g, "x", 4, DIMS(2, 3, 9, 11)), 3, 16, 1, 1, P0, 1, 1, true);
    const int64_t P3[4] = {3, 3, 3, 3};
    int t = transpose4(g, "to_nhwc", conv(g, "dw", x, 16, 16, 7, 1, P3, 16, 1, true), DIMS(0, 2, 3, 1));
    int ln = value(g, "ln");
    op(g, "ln", QF_OP_LAYER_NORM, 3,
       IN(t, weight(g, "ln.s", 1, DIMS(16), 0.5f, 1.5f), weight(g, "ln.b", 1, DIMS(16), -0.1f, 0.1f)), ln);
    int h = linear(g, "pw2", unary(g, "gelu", QF_OP_GELU, linear(g, "pw1", ln, 16, 64)), 64, 16);
    int back = transpose4(g, "to_nchw", h, DIMS(0, 3, 1, 2));
    int scaled = binary(g, "layer_scale", QF_OP_MUL, back, weight(g, "gamma", 3, DIMS(16, 1, 1), 0.2f, 0.6f));
    int y = binary(g, "residual", QF_OP_ADD, scaled, x);
    output(g, conv(g, "head", y, 16, 8, 1, 1, P0, 1, 1, true));
    output(g, y);
    return g;
}
/* Four MLPs on 4 x 256 tokens with GELU (erf), GELU (tanh), SiLU and
 * Sigmoid in the INT8 epilogue of a 512-channel Linear: 2^19 int8 levels
 * each, which the requantize kernel after cuBLASLt computes with CUDA's
 * erff / tanhf / expf and the exact form only near a rounding boundary
 * (lib/quant_math.h, qfi_smooth_level_fast). */
static qf_graph *b_smooth_levels(void)
{
    qf_graph *g = new_graph("smooth_levels");
    int x = input(g, "x", 3, DIMS(4, 256, 32));
    output(g, linear(g, "fc2", unary(g, "gelu", QF_OP_GELU, linear(g, "fc1", x, 32, 512)), 512, 16));
    int t = unary(g, "gelu_t", QF_OP_GELU, linear(g, "fc1t", x, 32, 512));
    attr(&g->nodes[g->n_nodes - 1], "approximate", QF_ATTR_STRING)->s = strdup("tanh");
    output(g, linear(g, "fc2t", t, 512, 16));
    int y = linear(g, "fc1s", x, 32, 512);
    output(g, linear(g, "fc2s", binary(g, "silu", QF_OP_MUL, y, unary(g, "silu_gate", QF_OP_SIGMOID, y)), 512, 16));
    output(g, linear(g, "fc2g", unary(g, "sigmoid", QF_OP_SIGMOID, linear(g, "fc1g", x, 32, 512)), 512, 16));
    return g;
}
/* INT8 convs whose readers are float ops write halves (quant/assign.c's
 * float_out): EfficientNet-V2's FusedMBConv and YOLOv8's bottleneck (a 3x3
 * conv and its SiLU, then the residual Add in float), a 3x3 conv without an
 * activation before a Sigmoid (its own node), and a 1x1 conv with a Relu
 * before a Mul. 15x13 positions of 2 images leave partial tiles. */
static qf_graph *b_half_outputs(void)
{
    qf_graph *g = new_graph("half_outputs");
    int x = input(g, "x", 4, DIMS(2, 24, 15, 13));
    int c = conv(g, "fused", x, 24, 24, 3, 1, P1, 1, 1, true);
    int a = binary(g, "residual", QF_OP_ADD, binary(g, "silu", QF_OP_MUL, c, unary(g, "silu_gate", QF_OP_SIGMOID, c)), x);
    output(g, a);
    int p = conv(g, "plain", a, 24, 32, 3, 1, P1, 1, 1, true);
    output(g, unary(g, "after", QF_OP_SIGMOID, p));
    int r = unary(g, "relu", QF_OP_RELU, conv(g, "pw", a, 24, 16, 1, 1, P0, 1, 1, true));
    output(g, binary(g, "square", QF_OP_MUL, r, r));
    return g;
}
/* Linear layers of the TMA kernel's kind (rows of a multiple of 16 bytes,
 * more than 64 channels): GELU (erf), none, a residual Add and GELU (tanh)
 * in the INT8 epilogues; 300 rows and 800, 144 and 272 channels leave
 * partial tiles; K of 720 and 800 bytes are more 128-byte stages than the
 * ring holds (6 and 7: a ping-pong warpgroup's first stage is then a
 * whole turn of the ring ahead), 144 two. */
static qf_graph *b_tma_linears(void)
{
    qf_graph *g = new_graph("tma_linears");
    int x = input(g, "x", 3, DIMS(2, 150, 720));
    int h = linear(g, "fc2", unary(g, "gelu1", QF_OP_GELU, linear(g, "fc1", x, 720, 800)), 800, 144);
    h = binary(g, "residual", QF_OP_ADD, linear(g, "fc3", h, 144, 144), h);
    int t = unary(g, "gelu4", QF_OP_GELU, linear(g, "fc4", h, 144, 272));
    attr(&g->nodes[g->n_nodes - 1], "approximate", QF_ATTR_STRING)->s = strdup("tanh");
    output(g, linear(g, "fc5", t, 272, 16));
    return g;
}
/* 1x1 convs of the TMA kernel's kind with smooth activations in the INT8
 * epilogue (EfficientNet's and YOLOv8's expand convs): SiLU, HardSwish,
 * Sigmoid, and a residual Add before a SiLU; 2 x 15 x 13 positions and 144
 * and 272 channels leave partial tiles, K of 48, 144 and 272 bytes one to
 * three 128-byte stages. The last conv (16 channels) is not the TMA kernel's. */
static qf_graph *b_tma_smooth_convs(void)
{
    qf_graph *g = new_graph("tma_smooth_convs");
    int x = input(g, "x", 4, DIMS(2, 48, 15, 13));
    int c = conv(g, "c1", x, 48, 144, 1, 1, P0, 1, 1, true);
    int a = binary(g, "silu1", QF_OP_MUL, c, unary(g, "sig1", QF_OP_SIGMOID, c));
    int b = unary(g, "hswish2", QF_OP_HARD_SWISH, conv(g, "c2", a, 144, 272, 1, 1, P0, 1, 1, true));
    int d = unary(g, "sig3", QF_OP_SIGMOID, conv(g, "c3", b, 272, 144, 1, 1, P0, 1, 1, true));
    int r = binary(g, "residual", QF_OP_ADD, conv(g, "c4", d, 144, 144, 1, 1, P0, 1, 1, true), a);
    int e = binary(g, "silu4", QF_OP_MUL, r, unary(g, "sig4", QF_OP_SIGMOID, r));
    output(g, conv(g, "c5", e, 144, 16, 1, 1, P0, 1, 1, true));
    return g;
}
static qf_graph *b_binary(void)
{
    qf_graph *g = new_graph("binary");
    int x = input(g, "x", 4, DIMS(2, 8, 6, 7));
    int x2 = input(g, "x2", 4, DIMS(2, 1, 1, 7));
    int k3 = weight(g, "k3", 3, DIMS(8, 1, 7), -1.0f, 1.0f);
    int c = conv(g, "c", x, 8, 8, 3, 1, P1, 1, 1, true); /* NHWC on the device */
    int pc = weight(g, "pc", 3, DIMS(8, 1, 1), -1.0f, 1.0f);
    int dv = weight(g, "dv", 1, DIMS(7), 0.5f, 1.5f);
    int s = weight(g, "s", 0, NULL, 0.5f, 0.7f);
    output(g, binary(g, "add_pc", QF_OP_ADD, c, pc));
    output(g, binary(g, "sub_x", QF_OP_SUB, c, x));
    output(g, binary(g, "mul_bc", QF_OP_MUL, x, x2));
    output(g, binary(g, "div_w", QF_OP_DIV, c, dv));
    output(g, binary(g, "prelu", QF_OP_PRELU, c, pc));
    output(g, binary(g, "mul_s", QF_OP_MUL, s, x));
    output(g, binary(g, "add_k3", QF_OP_ADD, c, k3));
    return g;
}
static qf_graph *b_unary(void)
{
    qf_graph *g = new_graph("unary");
    int x = input(g, "x", 4, DIMS(2, 8, 5, 6));
    int c = conv(g, "c", x, 8, 8, 1, 1, P0, 1, 1, true);
    const qf_op ops[] = {QF_OP_RELU, QF_OP_LEAKY_RELU, QF_OP_SIGMOID, QF_OP_HARD_SIGMOID, QF_OP_HARD_SWISH, QF_OP_TANH};
    for (size_t i = 0; i < QF_ARRAY_LEN(ops); i++) {
        char name[32];
        snprintf(name, sizeof name, "%s_x", qf_op_name(ops[i]));
        output(g, unary(g, name, ops[i], x));
        snprintf(name, sizeof name, "%s_c", qf_op_name(ops[i]));
        int y = unary(g, name, ops[i], c);
        output(g, y);
        if (ops[i] == QF_OP_LEAKY_RELU) set_float(&g->nodes[g->n_nodes - 1], "alpha", 0.1f);
    }
    int lo = weight(g, "lo", 0, NULL, -0.3f, -0.3f), hi = weight(g, "hi", 0, NULL, 0.5f, 0.5f);
    int y = value(g, "clip");
    op(g, "clip", QF_OP_CLIP, 3, IN(c, lo, hi), y);
    output(g, y);
    /* 105 elements: 16-byte vectors and a tail of the vector kernel's */
    int t = input(g, "t", 4, DIMS(1, 3, 5, 7)), yt = value(g, "clip_t");
    op(g, "clip_t", QF_OP_CLIP, 3, IN(unary(g, "sig_t", QF_OP_SIGMOID, t), lo, hi), yt);
    output(g, yt);
    return g;
}
static qf_graph *b_batchnorm_softmax(void)
{
    qf_graph *g = new_graph("batchnorm_softmax");
    int x = input(g, "x", 4, DIMS(2, 6, 5, 5));
    int s = weight(g, "s", 1, DIMS(6), 0.5f, 1.5f), b = weight(g, "b", 1, DIMS(6), -0.5f, 0.5f);
    int m = weight(g, "m", 1, DIMS(6), -0.2f, 0.2f), v = weight(g, "v", 1, DIMS(6), 0.5f, 2.0f);
    int y = value(g, "bn");
    op(g, "bn", QF_OP_BATCH_NORM, 5, IN(x, s, b, m, v), y);
    output(g, y);
    int l = input(g, "l", 2, DIMS(4, 10));
    int sm = value(g, "sm");
    op(g, "sm", QF_OP_SOFTMAX, 1, IN(l), sm);
    output(g, sm);
    int c = conv(g, "c", x, 6, 6, 3, 1, P1, 1, 1, true);
    int sm4 = value(g, "sm4");
    set_int(op(g, "sm4", QF_OP_SOFTMAX, 1, IN(c), sm4), "axis", 1);
    output(g, sm4);
    return g;
}
/* DenseNet's layers: convs concatenated along channels, each read through a
 * BatchNormalization and a Relu (or a ReLU6 Clip), which the CUDA engine
 * fuses into one pass, int8 in and out at INT8: 24 channels take the
 * vector kernel, 36 the per-element one, 64 the lookup tables; then a
 * transition's average pool. */
static qf_graph *b_dense_block(void)
{
    qf_graph *g = new_graph("dense_block");
    int x0 = input(g, "x0", 4, DIMS(2, 3, 6, 6));
    int parts[4];
    parts[0] = conv(g, "c0", x0, 3, 16, 3, 1, P1, 1, 1, true);
    parts[1] = conv(g, "ca", parts[0], 16, 8, 3, 1, P1, 1, 1, true);
    const int64_t width[3] = {24, 36, 64}, grow[3] = {12, 28, 0};
    int cur = -1;
    for (int k = 0; k < 3; k++) {
        const int64_t C = width[k];
        char nm[16], ws[4][8];
        snprintf(nm, sizeof nm, "cat%d", k);
        int in = value(g, nm);
        set_int(op(g, nm, QF_OP_CONCAT, k + 2, parts, in), "axis", 1);
        for (int j = 0; j < 4; j++) snprintf(ws[j], sizeof ws[j], "%c%d", "sbmv"[j], k);
        int s = weight(g, ws[0], 1, DIMS(C), 0.5f, 1.5f), b = weight(g, ws[1], 1, DIMS(C), -0.5f, 0.5f);
        int m = weight(g, ws[2], 1, DIMS(C), -0.2f, 0.2f), v = weight(g, ws[3], 1, DIMS(C), 0.5f, 2.0f);
        snprintf(nm, sizeof nm, "bn%d", k);
        int y = value(g, nm);
        op(g, nm, QF_OP_BATCH_NORM, 5, IN(in, s, b, m, v), y);
        snprintf(nm, sizeof nm, "act%d", k);
        cur = value(g, nm);
        if (k != 1) op(g, nm, QF_OP_RELU, 1, IN(y), cur);
        else op(g, nm, QF_OP_CLIP, 3, IN(y, weight(g, "lo", 0, NULL, 0.0f, 0.0f), weight(g, "hi", 0, NULL, 6.0f, 6.0f)), cur);
        snprintf(nm, sizeof nm, "cg%d", k);
        if (grow[k]) parts[k + 2] = conv(g, nm, cur, C, grow[k], 1, 1, P0, 1, 1, true);
    }
    /* a transition: 1x1 conv, 2x2 average pool (8 channels a thread), conv */
    int t = conv(g, "ct", cur, 64, 16, 1, 1, P0, 1, 1, true), tp = value(g, "tpool");
    qf_node *n = op(g, "tpool", QF_OP_AVERAGE_POOL, 1, IN(t), tp);
    set_ints(n, "kernel_shape", 2, DIMS(2, 2));
    set_ints(n, "strides", 2, DIMS(2, 2));
    output(g, conv(g, "cc", tp, 16, 8, 3, 1, P1, 1, 1, false));
    return g;
}
/* Concat of two convs along channels, then tensor movement on the result. */
static qf_graph *b_concat_copy(void)
{
    qf_graph *g = new_graph("concat_copy");
    int x = input(g, "x", 4, DIMS(2, 8, 6, 6));
    int a = conv(g, "ca", x, 8, 8, 3, 1, P1, 1, 1, true), b = conv(g, "cb", x, 8, 4, 1, 1, P0, 1, 1, true);
    int cat = value(g, "cat");
    set_int(op(g, "cat", QF_OP_CONCAT, 3, IN(a, b, x), cat), "axis", 1);
    int mp = value(g, "mp");
    qf_node *n = op(g, "mp", QF_OP_MAX_POOL, 1, IN(cat), mp);
    set_ints(n, "kernel_shape", 2, DIMS(2, 2));
    set_ints(n, "strides", 2, DIMS(2, 2));
    int fl = value(g, "flat");
    set_int(op(g, "flat", QF_OP_FLATTEN, 1, IN(mp), fl), "axis", 1);
    int w = weight(g, "fw", 2, DIMS(5, 20 * 9), -0.2f, 0.2f), bb = weight(g, "fb", 1, DIMS(5), -0.1f, 0.1f);
    int fc = value(g, "fc");
    set_int(op(g, "fc", QF_OP_GEMM, 3, IN(fl, w, bb), fc), "transB", 1);
    output(g, fc);
    int tr = value(g, "tr");
    set_ints(op(g, "tr", QF_OP_TRANSPOSE, 1, IN(a), tr), "perm", 4, DIMS(0, 2, 3, 1));
    output(g, tr);
    int rs = value(g, "rs");
    op(g, "rs", QF_OP_RESHAPE, 2, IN(b, ints(g, "shape", 3, DIMS(2, 4, 36))), rs);
    output(g, rs);
    int sl = value(g, "sl");
    op(g, "sl", QF_OP_SLICE, 5,
       IN(cat, ints(g, "st", 2, DIMS(1, 5)), ints(g, "en", 2, DIMS(19, 0)), ints(g, "ax", 2, DIMS(1, 3)),
          ints(g, "sp", 2, DIMS(3, -2))),
       sl);
    output(g, sl);
    int s1 = value(g, "s1"), s2 = value(g, "s2");
    int sp = qf_graph_add_node(g, "split", QF_OP_SPLIT, 2, IN(a, ints(g, "parts", 2, DIMS(3, 5))), 2, IN(s1, s2));
    set_int(&g->nodes[sp], "axis", 1);
    output(g, s1);
    output(g, s2);
    int gp = unary(g, "gap", QF_OP_GLOBAL_AVERAGE_POOL, b);
    int sq = value(g, "sq");
    op(g, "sq", QF_OP_SQUEEZE, 2, IN(gp, ints(g, "sqax", 2, DIMS(2, 3))), sq);
    int us = value(g, "us");
    op(g, "us", QF_OP_UNSQUEEZE, 2, IN(sq, ints(g, "usax", 1, DIMS(1))), us);
    output(g, us);
    int id = value(g, "id");
    op(g, "id", QF_OP_IDENTITY, 1, IN(a), id);
    output(g, unary(g, "id_relu", QF_OP_RELU, id));
    return g;
}

/* Pad of every mode; constant ones with and without a value, cropping; on
 * an NHWC Conv output (the output stays NHWC and feeds a Conv) and on the
 * logical input. Pad outputs are graph outputs, so none folds into a Conv. */
static int pad(qf_graph *g, const char *name, int x, const char *mode, const int64_t pads[8], int cval)
{
    char pn[64];
    snprintf(pn, sizeof pn, "%s.pads", name);
    int y = value(g, name);
    qf_node *n = op(g, name, QF_OP_PAD, cval >= 0 ? 3 : 2, IN(x, ints(g, pn, 8, pads), cval), y);
    if (mode) attr(n, "mode", QF_ATTR_STRING)->s = strdup(mode);
    return y;
}
static qf_graph *b_pad(void)
{
    qf_graph *g = new_graph("pad");
    int x = input(g, "x", 4, DIMS(2, 8, 6, 7));
    int c = conv(g, "c", x, 8, 8, 3, 1, P1, 1, 1, true);
    const int64_t hw[8] = {0, 0, 1, 2, 0, 0, 2, 1};
    int v = weight(g, "v", 0, NULL, 0.375f, 0.375f);
    int pc = pad(g, "pad_const", c, NULL, hw, v);
    output(g, pc);
    output(g, conv(g, "c2", pc, 8, 4, 3, 1, P0, 1, 1, true));
    output(g, pad(g, "pad_reflect", c, "reflect", DIMS(0, 0, 2, 3, 0, 0, 3, 2), -1));
    output(g, pad(g, "pad_edge", c, "edge", DIMS(0, 1, 1, 0, 0, 2, 0, 3), -1));
    output(g, pad(g, "pad_wrap", c, "wrap", DIMS(0, 0, 4, 1, 0, 0, 1, 5), -1));
    output(g, pad(g, "pad_crop", c, NULL, DIMS(0, -1, 1, -2, 0, 2, -1, 1), -1));
    output(g, pad(g, "pad_x", x, "reflect", DIMS(1, 0, 1, 1, 0, 2, 1, 1), -1));
    return g;
}
/* Resize: nearest x2 and linear to odd sizes of an NHWC Conv output (the
 * linear one feeding a Conv), linear along C too (three interpolating dims),
 * align_corners shrinking, and Upsample-style asymmetric nearest. */
static int resize(qf_graph *g, const char *name, int x, const char *mode, const char *coord, int scales, int sizes)
{
    int y = value(g, name);
    qf_node *n = op(g, name, QF_OP_RESIZE, 4, IN(x, -1, scales, sizes), y);
    attr(n, "mode", QF_ATTR_STRING)->s = strdup(mode);
    if (coord) attr(n, "coordinate_transformation_mode", QF_ATTR_STRING)->s = strdup(coord);
    return y;
}
static int floats(qf_graph *g, const char *name, int n, const float *vals)
{
    int64_t d[1] = {n};
    int v = qf_graph_add_value(g, name, QF_F32, 1, d);
    float *x = malloc((size_t)(n ? n : 1) * sizeof *x);
    memcpy(x, vals, (size_t)n * sizeof *x);
    g->values[v].data = x;
    g->values[v].flags |= QF_VALUE_CONST;
    return v;
}
static qf_graph *b_resize(void)
{
    qf_graph *g = new_graph("resize");
    int x = input(g, "x", 4, DIMS(2, 6, 5, 6));
    int c = conv(g, "c", x, 6, 8, 3, 1, P1, 1, 1, true);
    output(g, resize(g, "nearest2", c, "nearest", NULL, floats(g, "s2", 4, (const float[]){1, 1, 2, 2}), -1));
    int lin = resize(g, "linear", c, "linear", NULL, -1, ints(g, "sz", 4, DIMS(2, 8, 9, 13)));
    output(g, lin);
    output(g, conv(g, "c2", lin, 8, 4, 3, 1, P1, 1, 1, true));
    output(g, resize(g, "linear_c", c, "linear", "pytorch_half_pixel", -1, ints(g, "szc", 4, DIMS(2, 5, 7, 4))));
    output(g, resize(g, "corners", x, "linear", "align_corners", -1, ints(g, "szs", 4, DIMS(2, 6, 3, 4))));
    output(g, resize(g, "asym", x, "nearest", "asymmetric", floats(g, "s3", 4, (const float[]){1, 1, 3, 1.5f}), -1));
    /* nearest between NHWC convs: the row path (rows of 8 channels) */
    int up = resize(g, "nearest_rows", c, "nearest", "asymmetric", floats(g, "s4", 4, (const float[]){1, 1, 2, 1.5f}), -1);
    output(g, conv(g, "c3", up, 8, 4, 3, 1, P1, 1, 1, true));
    return g;
}
/* ReduceMean over axes no pass turns into a pool: channels of an NHWC
 * tensor (kept and dropped), H and C, batch and W, everything; a 3-D input. */
static int reduce_mean(qf_graph *g, const char *name, int x, int n_axes, const int64_t *axes, int keepdims)
{
    int y = value(g, name);
    qf_node *n = op(g, name, QF_OP_REDUCE_MEAN, 1, IN(x), y);
    if (n_axes) set_ints(n, "axes", n_axes, axes);
    set_int(n, "keepdims", keepdims);
    return y;
}
static qf_graph *b_reduce_mean(void)
{
    qf_graph *g = new_graph("reduce_mean");
    int x = input(g, "x", 4, DIMS(2, 8, 5, 6));
    int c = conv(g, "c", x, 8, 12, 3, 1, P1, 1, 1, true);
    output(g, reduce_mean(g, "mean_c", c, 1, DIMS(1), 1));
    output(g, reduce_mean(g, "mean_c_drop", c, 1, DIMS(-3), 0));
    output(g, reduce_mean(g, "mean_hc", c, 2, DIMS(2, 1), 1));
    output(g, reduce_mean(g, "mean_nw", c, 2, DIMS(0, 3), 0));
    output(g, reduce_mean(g, "mean_all", c, 0, NULL, 0));
    int t = input(g, "t", 3, DIMS(2, 7, 9));
    output(g, reduce_mean(g, "mean_t", t, 1, DIMS(-1), 1));
    return g;
}
/* Gather of channels (negative indices) from an NHWC tensor, of rows by a
 * 2-D index table, and a scalar index that drops a dim. */
static int gather(qf_graph *g, const char *name, int x, int axis, int idx)
{
    int y = value(g, name);
    set_int(op(g, name, QF_OP_GATHER, 2, IN(x, idx), y), "axis", axis);
    return y;
}
static qf_graph *b_gather(void)
{
    qf_graph *g = new_graph("gather");
    int x = input(g, "x", 4, DIMS(2, 8, 5, 6));
    int c = conv(g, "c", x, 8, 10, 3, 1, P1, 1, 1, true);
    output(g, gather(g, "channels", c, 1, ints(g, "ci", 5, DIMS(3, -1, 0, 3, 7))));
    int64_t d2[2] = {2, 3};
    int i2 = qf_graph_add_value(g, "rows", QF_I64, 2, d2);
    int64_t *r = malloc(6 * sizeof *r);
    memcpy(r, DIMS(4, 0, -2, 1, 1, 3), 6 * sizeof *r);
    g->values[i2].data = r;
    g->values[i2].flags |= QF_VALUE_CONST;
    output(g, gather(g, "table", c, 2, i2));
    int64_t d0[1] = {0};
    int i0 = qf_graph_add_value(g, "col", QF_I64, 0, d0);
    int64_t *col = malloc(sizeof *col);
    *col = -2;
    g->values[i0].data = col;
    g->values[i0].flags |= QF_VALUE_CONST;
    output(g, gather(g, "scalar", x, 3, i0));
    return g;
}
/* ConvTranspose: stride 2 with output_padding and a bias after a Conv, then
 * a Conv after it; grouped and dilated on the input. */
static int conv_transpose(qf_graph *g, const char *name, int x, int64_t cin, int64_t m, int k, int stride, int pad,
                          int opad, int64_t group, int dil)
{
    char wn[64], bn[64];
    snprintf(wn, sizeof wn, "%s.w", name);
    snprintf(bn, sizeof bn, "%s.b", name);
    float r = 1.5f / sqrtf((float)(cin / group * k * k));
    int w = weight(g, wn, 4, DIMS(cin, m / group, k, k), -r, r), b = weight(g, bn, 1, DIMS(m), -0.2f, 0.2f);
    int y = value(g, name);
    qf_node *n = op(g, name, QF_OP_CONV_TRANSPOSE, 3, IN(x, w, b), y);
    set_ints(n, "kernel_shape", 2, DIMS(k, k));
    set_ints(n, "strides", 2, DIMS(stride, stride));
    set_ints(n, "pads", 4, DIMS(pad, pad, pad, pad));
    if (opad) set_ints(n, "output_padding", 2, DIMS(opad, opad));
    if (group > 1) set_int(n, "group", group);
    if (dil > 1) set_ints(n, "dilations", 2, DIMS(dil, dil));
    return y;
}
static qf_graph *b_conv_transpose(void)
{
    qf_graph *g = new_graph("conv_transpose");
    int x = input(g, "x", 4, DIMS(2, 8, 5, 6));
    int c = conv(g, "c", x, 8, 12, 3, 1, P1, 1, 1, true);
    int up = conv_transpose(g, "up", c, 12, 6, 3, 2, 1, 1, 1, 1);
    output(g, up);
    output(g, conv(g, "c2", up, 6, 4, 3, 1, P1, 1, 1, true));
    output(g, conv_transpose(g, "grouped", x, 8, 4, 3, 1, 0, 0, 2, 2));
    return g;
}
/* The blocks of MobileNetV3, EfficientNet and MnasNet: SiLU (Sigmoid * x),
 * HardSwish, and a squeeze-excitation whose channel weights multiply the
 * NHWC feature map by broadcasting; an average pool with ceil_mode and
 * count_include_pad and a max pool with ceil_mode. */
/* Convs of one input position (a squeeze-excitation block's FCs): the CUDA
 * engine sums them in double in channel order as the CPU engine does, so
 * FP32 and FP16 come out bit for bit; with a Relu, a Sigmoid, SiLU as
 * Mul(y, Sigmoid(y)) and HardSwish as Mul(y, HardSigmoid(y)) fused after
 * them (each gate rounded to the output's dtype, as its node stores it). */
static qf_graph *b_vector_convs(void)
{
    qf_graph *g = new_graph("vector_convs");
    int x = input(g, "x", 4, DIMS(3, 40, 1, 1));
    int a = unary(g, "se_relu", QF_OP_RELU, conv(g, "se1", x, 40, 10, 1, 1, P0, 1, 1, true));
    output(g, unary(g, "se_gate", QF_OP_SIGMOID, conv(g, "se2", a, 10, 40, 1, 1, P0, 1, 1, true)));
    int sv = conv(g, "sc", x, 40, 24, 1, 1, P0, 1, 1, true);
    output(g, binary(g, "silu", QF_OP_MUL, sv, unary(g, "silu_gate", QF_OP_SIGMOID, sv)));
    int h = conv(g, "hc", x, 40, 16, 1, 1, P0, 1, 1, false), hg = value(g, "hsig");
    qf_node *n = op(g, "hsig", QF_OP_HARD_SIGMOID, 1, IN(h), hg);
    set_float(n, "alpha", 1.0f / 6.0f);
    output(g, binary(g, "hswish", QF_OP_MUL, h, hg));
    return g;
}
/* A squeeze-excitation block after EfficientNet's depthwise conv (k x k,
 * stride s) and SiLU, which INT8 fuses with a half output (the pool and
 * gate read it in FP16): the pool (one block per 32 channels of an image on
 * the device), the gate Mul broadcast per image and channel (the vector
 * path; int8 out where only INT8 nodes read it), pools after it. */
static qf_graph *se_block(const char *name, int64_t C, int64_t H, int k, int s, bool effnet)
{
    qf_graph *g = new_graph(name);
    int x = input(g, "x", 4, DIMS(2, C, H, H));
    int c = conv(g, "c", x, C, C, k, s, k == 5 ? P2 : P1, C, 1, true);
    int silu = binary(g, "silu", QF_OP_MUL, c, unary(g, "sig", QF_OP_SIGMOID, c));
    int m = reduce_mean(g, "squeeze", silu, 2, DIMS(2, 3), 1); /* becomes a GlobalAveragePool */
    /* MobileNetV3's gate (Relu, HardSigmoid) or EfficientNet's (SiLU, Sigmoid) */
    int s1 = conv(g, "se1", m, C, C / 4, 1, 1, P0, 1, 1, true);
    int e = effnet ? binary(g, "se_silu", QF_OP_MUL, s1, unary(g, "se_sig", QF_OP_SIGMOID, s1))
                   : unary(g, "se_relu", QF_OP_RELU, s1);
    int gate = unary(g, "se_gate", effnet ? QF_OP_SIGMOID : QF_OP_HARD_SIGMOID,
                     conv(g, "se2", e, C / 4, C, 1, 1, P0, 1, 1, true));
    int scaled = binary(g, "excite", QF_OP_MUL, silu, gate);
    int hs = unary(g, "hswish", QF_OP_HARD_SWISH, conv(g, "c3", scaled, C, C, 1, 1, P0, 1, 1, true));
    output(g, hs);
    int a = value(g, "avg_ceil");
    qf_node *n = op(g, "avg_ceil", QF_OP_AVERAGE_POOL, 1, IN(hs), a);
    set_ints(n, "kernel_shape", 2, DIMS(3, 3));
    set_ints(n, "strides", 2, DIMS(2, 2));
    set_ints(n, "pads", 4, DIMS(1, 1, 1, 1));
    set_int(n, "ceil_mode", 1);
    set_int(n, "count_include_pad", 1);
    output(g, a);
    int mp = value(g, "max_ceil");
    n = op(g, "max_ceil", QF_OP_MAX_POOL, 1, IN(scaled), mp);
    set_ints(n, "kernel_shape", 2, DIMS(3, 3));
    set_ints(n, "strides", 2, DIMS(2, 2));
    set_int(n, "ceil_mode", 1);
    output(g, mp);
    return g;
}
static qf_graph *b_se_block(void) { return se_block("se_block", 16, 7, 3, 1, false); }
/* 40 channels: a block's last 8 lanes idle; 400 positions, 50 a warp */
static qf_graph *b_se_block_wide(void) { return se_block("se_block_wide", 40, 20, 3, 1, false); }
/* into halves: the sliding-window kernel at stride 2, and 5x5 SiLU convs
 * at stride 1 and 2 (EfficientNet's; 15 columns, one strip of 8 and a short
 * one): the vector kernel, or the sliding window in run.sh's pinned run
 * with QFORGE_CUDA_DW_WINDOW=5 */
static qf_graph *b_se_block_s2(void) { return se_block("se_block_s2", 40, 20, 3, 2, false); }
static qf_graph *b_se_block_k5(void) { return se_block("se_block_k5", 48, 14, 5, 1, true); }
static qf_graph *b_se_block_k5_s2(void) { return se_block("se_block_k5_s2", 40, 29, 5, 2, true); }
/* 36 channels (no 8-channel lanes in the fused gate's pool), squeezed to 9 */
static qf_graph *b_se_block_odd(void) { return se_block("se_block_odd", 36, 9, 3, 1, true); }
/* ShuffleNetV2's units: the channel halves by Slice (stride-1 units) or
 * Split, a branch of 1x1 -> depthwise 3x3 -> 1x1 convs over 10 channels (the
 * depthwise conv in 2-channel vectors), Concat, and the channel shuffle
 * (Reshape to 5-D, Transpose(0,2,1,3,4), Reshape back), which the device
 * fuses into one gather with the Concat, and with the Slices after it
 * where only they read it; a shuffle of 4 groups straight after a conv, and
 * one whose Concat is also an output (not folded); a depthwise conv of 7
 * channels (one-channel vectors); max pools of 20 and 24 channels. */
static int shuffle(qf_graph *g, const char *name, int x, int64_t C, int64_t groups, int64_t H)
{
    char rn[48], tn[48];
    snprintf(rn, sizeof rn, "%s.split", name);
    snprintf(tn, sizeof tn, "%s.t", name);
    int r = reshape_to(g, rn, x, 5, DIMS(0, groups, C / groups, H, H));
    int t = unary(g, tn, QF_OP_TRANSPOSE, r);
    set_ints(&g->nodes[g->n_nodes - 1], "perm", 5, DIMS(0, 2, 1, 3, 4));
    return reshape_to(g, name, t, 4, DIMS(0, C, H, H));
}
static int shuffle_branch(qf_graph *g, const char *name, int x, int64_t C)
{
    char a[48], b[48], c[48], ra[48], rc[48];
    snprintf(a, sizeof a, "%s.pw1", name), snprintf(b, sizeof b, "%s.dw", name), snprintf(c, sizeof c, "%s.pw2", name);
    snprintf(ra, sizeof ra, "%s.r1", name), snprintf(rc, sizeof rc, "%s.r2", name);
    int y = unary(g, ra, QF_OP_RELU, conv(g, a, x, C, C, 1, 1, P0, 1, 1, true));
    y = conv(g, b, y, C, C, 3, 1, P1, C, 1, true);
    return unary(g, rc, QF_OP_RELU, conv(g, c, y, C, C, 1, 1, P0, 1, 1, true));
}
/* Slice of x's channels [start, end). */
static int slice_channels(qf_graph *g, const char *name, int x, int64_t start, int64_t end)
{
    char st[48], en[48], ax[48];
    snprintf(st, sizeof st, "%s.starts", name), snprintf(en, sizeof en, "%s.ends", name);
    snprintf(ax, sizeof ax, "%s.axes", name);
    int y = value(g, name);
    op(g, name, QF_OP_SLICE, 4, IN(x, ints(g, st, 1, DIMS(start)), ints(g, en, 1, DIMS(end)), ints(g, ax, 1, DIMS(1))), y);
    return y;
}
static int concat2(qf_graph *g, const char *name, int a, int b)
{
    int y = value(g, name);
    set_int(op(g, name, QF_OP_CONCAT, 2, IN(a, b), y), "axis", 1);
    return y;
}
/* YOLOv8's pieces between SiLU convs (x * Sigmoid(x), fused into INT8
 * epilogues): C2f's 1x1 conv split in halves (Slice), a bottleneck of two
 * 3x3 convs added to its input (an Add of two activations: no epilogue takes
 * a residual after the activation), the three pieces concatenated, a 1x1
 * conv; SPPF's 5x5 stride-1 max-pool; the neck's nearest 2x upsampling; a
 * 3x3 conv. INT8 keeps every one of them int8 (quant/assign.c). */
static int conv_silu(qf_graph *g, const char *name, int x, int64_t cin, int64_t m, int k)
{
    char gate[48], prod[48];
    snprintf(gate, sizeof gate, "%s.gate", name), snprintf(prod, sizeof prod, "%s.silu", name);
    int c = conv(g, name, x, cin, m, k, 1, k == 3 ? P1 : P0, 1, 1, true);
    return binary(g, prod, QF_OP_MUL, c, unary(g, gate, QF_OP_SIGMOID, c));
}
static qf_graph *b_c2f(void)
{
    qf_graph *g = new_graph("c2f");
    int x = input(g, "x", 4, DIMS(2, 16, 12, 12));
    int c1 = conv_silu(g, "cv1", x, 16, 32, 1);
    int lo = slice_channels(g, "lo", c1, 0, 16), hi = slice_channels(g, "hi", c1, 16, 32);
    int r = binary(g, "add", QF_OP_ADD, hi, conv_silu(g, "m.cv2", conv_silu(g, "m.cv1", hi, 16, 16, 3), 16, 16, 3));
    int cat = value(g, "cat");
    set_int(op(g, "cat", QF_OP_CONCAT, 3, IN(lo, hi, r), cat), "axis", 1);
    int c2 = conv_silu(g, "cv2", cat, 48, 32, 1);
    int mp = value(g, "sppf.pool");
    qf_node *n = op(g, "sppf.pool", QF_OP_MAX_POOL, 1, IN(c2), mp);
    set_ints(n, "kernel_shape", 2, DIMS(5, 5));
    set_ints(n, "pads", 4, DIMS(2, 2, 2, 2));
    int up = resize(g, "up", mp, "nearest", "asymmetric", floats(g, "s2", 4, (const float[]){1, 1, 2, 2}), -1);
    attr(&g->nodes[g->n_nodes - 1], "nearest_mode", QF_ATTR_STRING)->s = strdup("floor");
    output(g, conv_silu(g, "cv3", up, 32, 16, 3));
    return g;
}
static qf_graph *b_shuffle_units(void)
{
    qf_graph *g = new_graph("shuffle_units");
    int x = input(g, "x", 4, DIMS(2, 20, 9, 9));
    int c0 = unary(g, "r0", QF_OP_RELU, conv(g, "c0", x, 20, 20, 3, 1, P1, 1, 1, true));
    int x1 = slice_channels(g, "x1", c0, 0, 10), x2 = slice_channels(g, "x2", c0, 10, 20);
    int s1 = shuffle(g, "shuffle1", concat2(g, "cat1", x1, shuffle_branch(g, "u1", x2, 10)), 20, 2, 9);
    int h1 = slice_channels(g, "h1", s1, 0, 10), h2 = slice_channels(g, "h2", s1, 10, 20);
    int s2 = shuffle(g, "shuffle2", concat2(g, "cat2", h1, shuffle_branch(g, "u2", h2, 10)), 20, 2, 9);
    int h3 = value(g, "h3"), h4 = value(g, "h4");
    int sp = qf_graph_add_node(g, "halves", QF_OP_SPLIT, 2, IN(s2, ints(g, "parts", 2, DIMS(10, 10))), 2, IN(h3, h4));
    set_int(&g->nodes[sp], "axis", 1);
    int s5 = shuffle(g, "shuffle5", concat2(g, "cat5", h3, shuffle_branch(g, "u3", h4, 10)), 20, 2, 9);
    output(g, conv(g, "head", s5, 20, 12, 1, 1, P0, 1, 1, true));
    output(g, conv(g, "g4", shuffle(g, "shuffle4", conv(g, "c4", s2, 20, 16, 3, 1, P1, 1, 1, true), 16, 4, 9), 16, 8,
                   1, 1, P0, 1, 1, true));
    int cat3 = concat2(g, "cat3", s2, s5);
    output(g, cat3);
    output(g, shuffle(g, "shuffle3", cat3, 40, 2, 9));
    output(g, conv(g, "dw_s2", x2, 10, 10, 3, 2, P1, 10, 1, true)); /* 2-channel words, stride 2 */
    /* the stem's max pool over 20 and 24 channels: 4- and 8-byte int8 vectors */
    for (int k = 0; k < 2; k++) {
        int mp = value(g, k ? "mp24" : "mp20");
        qf_node *n = op(g, k ? "mp24" : "mp20", QF_OP_MAX_POOL, 1,
                        IN(k ? conv(g, "c24", c0, 20, 24, 1, 1, P0, 1, 1, true) : c0), mp);
        set_ints(n, "kernel_shape", 2, DIMS(3, 3));
        set_ints(n, "strides", 2, DIMS(2, 2));
        set_ints(n, "pads", 4, DIMS(1, 1, 1, 1));
        output(g, mp);
    }
    int c7 = conv(g, "c7", x, 20, 7, 1, 1, P0, 1, 1, true);
    output(g, conv(g, "dw7", c7, 7, 7, 3, 1, P1, 7, 1, true));
    return g;
}
/* RegNetY's block: a grouped 3x3 conv of 16 channels a group with a ReLU,
 * then a squeeze-excitation (ReLU, Sigmoid) whose pool and gate Mul read
 * the conv's output: INT8 writes it in halves (quant/assign.c,
 * feeds_squeeze_excitation), so the pool is FP16 and the gate fuses. */
static qf_graph *b_se_block_relu(void)
{
    qf_graph *g = new_graph("se_block_relu");
    int x = input(g, "x", 4, DIMS(2, 32, 9, 9));
    int b = unary(g, "rb", QF_OP_RELU, conv(g, "b", x, 32, 32, 3, 1, P1, 2, 1, true));
    int m = unary(g, "squeeze", QF_OP_GLOBAL_AVERAGE_POOL, b);
    int e = unary(g, "se_relu", QF_OP_RELU, conv(g, "se1", m, 32, 8, 1, 1, P0, 1, 1, true));
    int gate = unary(g, "se_gate", QF_OP_SIGMOID, conv(g, "se2", e, 8, 32, 1, 1, P0, 1, 1, true));
    output(g, conv(g, "c", binary(g, "excite", QF_OP_MUL, b, gate), 32, 24, 1, 1, P0, 1, 1, true));
    return g;
}
/* EfficientNet's and MobileNetV3's activations fused into INT8 epilogues:
 * SiLU (Mul(y, Sigmoid(y)), either order) after a 3x3 conv, a depthwise 3x3
 * (the sliding-window kernel), a depthwise 3x3 with a residual, a 1x1 conv
 * and a 3x3 conv with a residual; HardSwish after a strided depthwise conv
 * (the vector kernel) and as x * HardSigmoid(x) after a 1x1 conv; Sigmoid
 * after a grouped conv (the general kernel). */
static qf_graph *b_smooth_epilogues(void)
{
    qf_graph *g = new_graph("smooth_epilogues");
    int x = input(g, "x", 4, DIMS(2, 16, 9, 9));
    int c = conv(g, "c3", x, 16, 32, 3, 1, P1, 1, 1, true);
    int a = binary(g, "silu3", QF_OP_MUL, c, unary(g, "sig3", QF_OP_SIGMOID, c));
    output(g, a);
    int d = conv(g, "dw", a, 32, 32, 3, 1, P1, 32, 1, true);
    int b = binary(g, "silu_dw", QF_OP_MUL, unary(g, "sig_dw", QF_OP_SIGMOID, d), d);
    int r = binary(g, "dw_res", QF_OP_ADD, conv(g, "dwr", b, 32, 32, 3, 1, P1, 32, 1, true), b);
    int e = binary(g, "silu_res", QF_OP_MUL, r, unary(g, "sig_res", QF_OP_SIGMOID, r));
    int f = unary(g, "hswish_dw", QF_OP_HARD_SWISH, conv(g, "dw2", e, 32, 32, 3, 2, P1, 32, 1, true));
    int gs = unary(g, "sig_grp", QF_OP_SIGMOID, conv(g, "grp", f, 32, 32, 3, 1, P1, 4, 1, true));
    output(g, gs);
    int p = conv(g, "pw", gs, 32, 32, 1, 1, P0, 1, 1, true);
    int q = binary(g, "silu_pw", QF_OP_MUL, p, unary(g, "sig_pw", QF_OP_SIGMOID, p));
    int h = conv(g, "pw2", q, 32, 24, 1, 1, P0, 1, 1, false), hg = value(g, "hsig");
    qf_node *n = op(g, "hsig", QF_OP_HARD_SIGMOID, 1, IN(h), hg);
    set_float(n, "alpha", 1.0f / 6.0f);
    set_float(n, "beta", 0.5f);
    int hs = binary(g, "hswish_pw", QF_OP_MUL, h, hg);
    int k = binary(g, "res3", QF_OP_ADD, conv(g, "c3r", hs, 24, 24, 3, 1, P1, 1, 1, true), hs);
    output(g, binary(g, "silu_c3r", QF_OP_MUL, unary(g, "sig_c3r", QF_OP_SIGMOID, k), k));
    return g;
}

/* Only kernels that compute as the CPU does, operation for operation (no
 * GEMM): a max pool (NHWC), then Pad, Resize, Gather, ReduceMean and
 * Transposes of it.
 * Checked bit for bit at every precision. */
static qf_graph *b_moves_exact(void)
{
    qf_graph *g = new_graph("moves_exact");
    int x = input(g, "x", 4, DIMS(2, 6, 7, 8));
    int mp = value(g, "mp");
    qf_node *n = op(g, "mp", QF_OP_MAX_POOL, 1, IN(x), mp);
    set_ints(n, "kernel_shape", 2, DIMS(2, 2));
    output(g, pad(g, "pad_reflect", mp, "reflect", DIMS(0, 0, 2, 1, 0, 0, 1, 3), -1));
    output(g, pad(g, "pad_value", mp, NULL, DIMS(0, 1, 1, 0, 0, 1, 0, 2), weight(g, "v", 0, NULL, -0.5f, -0.5f)));
    output(g, resize(g, "linear", mp, "linear", NULL, -1, ints(g, "sz", 4, DIMS(2, 9, 11, 5))));
    output(g, resize(g, "nearest", mp, "nearest", NULL, floats(g, "s2", 4, (const float[]){1, 1, 2, 2}), -1));
    output(g, gather(g, "channels", mp, 1, ints(g, "ci", 3, DIMS(5, 0, -3))));
    output(g, reduce_mean(g, "mean_c", mp, 1, DIMS(1), 1));
    output(g, reduce_mean(g, "mean_hw_c", mp, 2, DIMS(1, 3), 0));
    /* permuted to [N, H, W, C] and back: views of mp's NHWC bytes on the device */
    int nhwc = transpose4(g, "to_nhwc", mp, DIMS(0, 2, 3, 1));
    output(g, unary(g, "relu_nhwc", QF_OP_RELU, nhwc));
    int pool2 = value(g, "mp2");
    n = op(g, "mp2", QF_OP_MAX_POOL, 1, IN(transpose4(g, "to_nchw", nhwc, DIMS(0, 3, 1, 2))), pool2);
    set_ints(n, "kernel_shape", 2, DIMS(2, 2));
    output(g, pool2);
    return g;
}

/* MobileNetV3's blocks at the zoo's batch (50), where the CUDA engine and
 * the CPU engine parted (GPU = CPU top-1 0.94-0.96 on MobileNetV3-Small
 * and -Large at 30fe644 and later, 1.00 with QFORGE_CUDA_NOFUSE): an RGB
 * stem with HardSwish, squeeze-excitation blocks with a Relu and a
 * HardSigmoid(alpha 1/6) gate multiplying as torchvision does (gate
 * first) after a 3x3 stride-2 and a 5x5 stride-2 Relu depthwise conv and
 * a 5x5 HardSwish one, a residual, and the classifier's Gemm with HardSwish. */
/* A classifier: global average pool, Flatten, Gemm to `hidden`, act, Gemm
 * to `classes` (weights in +-0.2 and +-0.3, biases in +-0.1). */
static int classifier(qf_graph *g, int x, int64_t C, int64_t hidden, int64_t classes, qf_op act)
{
    int fl = value(g, "flat");
    set_int(op(g, "flat", QF_OP_FLATTEN, 1, IN(unary(g, "gap", QF_OP_GLOBAL_AVERAGE_POOL, x)), fl), "axis", 1);
    int w1 = weight(g, "f1w", 2, DIMS(hidden, C), -0.2f, 0.2f), b1 = weight(g, "f1b", 1, DIMS(hidden), -0.1f, 0.1f);
    int f1 = value(g, "fc1");
    set_int(op(g, "fc1", QF_OP_GEMM, 3, IN(fl, w1, b1), f1), "transB", 1);
    int w2 = weight(g, "f2w", 2, DIMS(classes, hidden), -0.3f, 0.3f), b2 = weight(g, "f2b", 1, DIMS(classes), -0.1f, 0.1f);
    int f2 = value(g, "fc2");
    set_int(op(g, "fc2", QF_OP_GEMM, 3, IN(unary(g, "rfc1", act, f1), w2, b2), f2), "transB", 1);
    return f2;
}
static int hard_sigmoid6(qf_graph *g, const char *name, int x)
{
    int y = value(g, name);
    set_float(op(g, name, QF_OP_HARD_SIGMOID, 1, IN(x), y), "alpha", 1.0f / 6.0f);
    return y;
}
static int mbv3_se(qf_graph *g, const char *name, int x, int64_t C, int64_t M1)
{
    static const char *const part[6] = {"pool", "fc1", "relu", "fc2", "gate", "mul"};
    char n[6][64];
    for (int k = 0; k < 6; k++) snprintf(n[k], sizeof n[k], "%s.%s", name, part[k]);
    int p = unary(g, n[0], QF_OP_GLOBAL_AVERAGE_POOL, x);
    int f1 = unary(g, n[2], QF_OP_RELU, conv(g, n[1], p, C, M1, 1, 1, P0, 1, 1, true));
    int gate = hard_sigmoid6(g, n[4], conv(g, n[3], f1, M1, C, 1, 1, P0, 1, 1, true));
    return binary(g, n[5], QF_OP_MUL, gate, x);
}
static qf_graph *b_mbv3_blocks(void)
{
    qf_graph *g = new_graph("mbv3_blocks");
    int x = input(g, "x", 4, DIMS(50, 3, 32, 32));
    int stem = unary(g, "stem_hs", QF_OP_HARD_SWISH, conv(g, "stem", x, 3, 16, 3, 2, P1, 1, 1, true));
    int d1 = unary(g, "dw1_relu", QF_OP_RELU, conv(g, "dw1", stem, 16, 16, 3, 2, P1, 16, 1, true));
    int b1 = conv(g, "proj1", mbv3_se(g, "se1", d1, 16, 8), 16, 16, 1, 1, P0, 1, 1, true);
    int e2 = unary(g, "exp2_relu", QF_OP_RELU, conv(g, "exp2", b1, 16, 72, 1, 1, P0, 1, 1, true));
    int d2 = unary(g, "dw2_relu", QF_OP_RELU, conv(g, "dw2", e2, 72, 72, 5, 2, P2, 72, 1, true));
    int b2 = conv(g, "proj2", mbv3_se(g, "se2", d2, 72, 24), 72, 40, 1, 1, P0, 1, 1, true);
    int e3 = unary(g, "exp3_hs", QF_OP_HARD_SWISH, conv(g, "exp3", b2, 40, 120, 1, 1, P0, 1, 1, true));
    int d3 = unary(g, "dw3_hs", QF_OP_HARD_SWISH, conv(g, "dw3", e3, 120, 120, 5, 1, P2, 120, 1, true));
    int b3 = binary(g, "res3", QF_OP_ADD, conv(g, "proj3", mbv3_se(g, "se3", d3, 120, 32), 120, 40, 1, 1, P0, 1, 1, true), b2);
    int head = unary(g, "head_hs", QF_OP_HARD_SWISH, conv(g, "head", b3, 40, 96, 1, 1, P0, 1, 1, true));
    output(g, classifier(g, head, 96, 64, 10, QF_OP_HARD_SWISH));
    return g;
}

/* quant --asymmetric: activations after Relu, ReLU6, SiLU and Sigmoid (and
 * what pools, moves or concatenates them) carry zero points, so nearly every
 * INT8 path reads or writes one. Convs on an input with a zero point: 3x3
 * stride 1 and 2 with padding, an RGB-like 3-channel layer (the implicit
 * GEMM's space-to-depth and widened inputs, padded with the zero point),
 * depthwise 3x3 stride 1 and 2 and 5x5 (the sliding-window kernel) and 3x3 of 6 channels (the general kernel), grouped of 4 channels
 * a group (dp4a) and 16 (general), 1x1; residual Adds fused into the
 * epilogue with an output zero point (after a Relu) and without (linear);
 * SiLU and a squeeze-excitation gate; average pools with and without
 * count_include_pad, global average and max pools, a max pool with padding,
 * Concat (its inputs share its scale and zero point), Pad with its value,
 * Gemm after a global pool. */
static qf_graph *b_asymmetric(void)
{
    qf_graph *g = new_graph("asymmetric");
    int x = input(g, "x", 4, DIMS(2, 16, 9, 9));
    int c0 = unary(g, "r0", QF_OP_RELU, conv(g, "c0", x, 16, 32, 3, 1, P1, 1, 1, true));
    int c1 = unary(g, "r1", QF_OP_RELU, conv(g, "c1", c0, 32, 32, 3, 1, P1, 1, 1, true));
    int c2 = unary(g, "r2", QF_OP_RELU, conv(g, "c2", c1, 32, 48, 3, 2, P1, 1, 1, true)); /* 5x5 */
    int dw = unary(g, "rdw", QF_OP_RELU, conv(g, "dw", c2, 48, 48, 3, 1, P1, 48, 1, true));
    int dws2 = unary(g, "rdws2", QF_OP_RELU, conv(g, "dws2", dw, 48, 48, 3, 2, P1, 48, 1, true)); /* 3x3 */
    int c0v = weight(g, "c0v", 0, NULL, 0.0f, 0.0f), c6v = weight(g, "c6v", 0, NULL, 6.0f, 6.0f), dw5 = value(g, "relu6");
    op(g, "relu6", QF_OP_CLIP, 3, IN(conv(g, "dw5", dws2, 48, 48, 5, 1, DIMS(2, 2, 2, 2), 48, 1, true), c0v, c6v), dw5);
    output(g, dw5);
    int g4 = unary(g, "rg4", QF_OP_RELU, conv(g, "g4", c2, 48, 48, 3, 1, P1, 12, 1, true));
    int g16 = unary(g, "rg16", QF_OP_RELU, conv(g, "g16", g4, 48, 48, 3, 1, P1, 3, 1, true));
    /* residuals with a zero point, into an output with one (Relu) and one without (linear) */
    int res1 = unary(g, "rres1", QF_OP_RELU, binary(g, "add1", QF_OP_ADD, conv(g, "cr1", g16, 48, 48, 3, 1, P1, 1, 1, true), g16));
    int res2 = binary(g, "add2", QF_OP_ADD, conv(g, "cr2", res1, 48, 48, 1, 1, P0, 1, 1, true), res1);
    output(g, res2);
    int cs = conv(g, "cs", res1, 48, 32, 3, 1, P1, 1, 1, true);
    int silu = binary(g, "silu", QF_OP_MUL, cs, unary(g, "sig", QF_OP_SIGMOID, cs));
    int sq = unary(g, "squeeze", QF_OP_GLOBAL_AVERAGE_POOL, silu);
    int e = unary(g, "se_relu", QF_OP_RELU, conv(g, "se1", sq, 32, 8, 1, 1, P0, 1, 1, true));
    int gate = unary(g, "se_gate", QF_OP_SIGMOID, conv(g, "se2", e, 8, 32, 1, 1, P0, 1, 1, true));
    int excite = binary(g, "excite", QF_OP_MUL, silu, gate);
    output(g, conv(g, "proj", excite, 32, 24, 1, 1, P0, 1, 1, true));
    /* SiLU in an epilogue whose int8 output has a zero point (a conv alone reads it) */
    int cz = conv(g, "cz", res1, 48, 32, 3, 1, P1, 1, 1, true);
    output(g, conv(g, "cz2", binary(g, "siluz", QF_OP_MUL, cz, unary(g, "sigz", QF_OP_SIGMOID, cz)), 32, 16, 3, 1, P1, 1, 1,
                   true));
    /* odd channel counts: the general depthwise kernel and a 1x1 of 20 outputs (no implicit GEMM) */
    int c6 = unary(g, "r6", QF_OP_RELU, conv(g, "c6", c1, 32, 6, 1, 1, P0, 1, 1, true));
    output(g, conv(g, "dw6", c6, 6, 6, 3, 1, P1, 6, 1, true));
    output(g, conv(g, "pw20", c1, 32, 20, 1, 1, P0, 1, 1, true));
    /* Inception's padded shapes on an input with a zero point: 1x7, 7x1, 5x5 */
    output(g, conv_rect(g, "c17", c1, 32, 16, 1, 7, 1, DIMS(0, 3, 0, 3), 1, 1, true));
    output(g, conv_rect(g, "c71", c1, 32, 16, 7, 1, 1, DIMS(3, 0, 3, 0), 1, 1, true));
    output(g, conv(g, "c55", c1, 32, 16, 5, 1, P2, 1, 1, true));
    /* a 3-channel input with a zero point (a Sigmoid of the image) */
    int x3 = input(g, "x3", 4, DIMS(2, 3, 11, 11));
    int sx = unary(g, "sig_in", QF_OP_SIGMOID, x3);
    output(g, unary(g, "rrgb2", QF_OP_RELU, conv(g, "rgb2", sx, 3, 16, 3, 2, P1, 1, 1, true)));
    output(g, conv(g, "rgb1", sx, 3, 8, 3, 1, P1, 1, 1, true));
    /* pools */
    int a = value(g, "avg_pad"), b = value(g, "avg"), m = value(g, "maxp");
    qf_node *n = op(g, "avg_pad", QF_OP_AVERAGE_POOL, 1, IN(res1), a);
    set_ints(n, "kernel_shape", 2, DIMS(3, 3));
    set_ints(n, "pads", 4, DIMS(1, 1, 1, 1));
    set_int(n, "count_include_pad", 1);
    n = op(g, "avg", QF_OP_AVERAGE_POOL, 1, IN(c1), b);
    set_ints(n, "kernel_shape", 2, DIMS(3, 3));
    set_ints(n, "strides", 2, DIMS(2, 2));
    set_ints(n, "pads", 4, DIMS(1, 1, 1, 1));
    n = op(g, "maxp", QF_OP_MAX_POOL, 1, IN(c1), m);
    set_ints(n, "kernel_shape", 2, DIMS(3, 3));
    set_ints(n, "strides", 2, DIMS(2, 2));
    set_ints(n, "pads", 4, DIMS(1, 1, 1, 1));
    output(g, a);
    output(g, conv(g, "cav", b, 32, 16, 1, 1, P0, 1, 1, true)); /* the average pool's int8 output */
    output(g, m);
    /* Concat of Relu outputs */
    int cat = value(g, "cat"), ca = unary(g, "rca", QF_OP_RELU, conv(g, "ca", c2, 48, 48, 1, 1, P0, 1, 1, true));
    int cb = unary(g, "rcb", QF_OP_RELU, conv(g, "cb", c2, 48, 56, 3, 1, P1, 1, 1, true));
    set_int(op(g, "cat", QF_OP_CONCAT, 2, IN(ca, cb), cat), "axis", 1);
    output(g, unary(g, "gmax", QF_OP_GLOBAL_MAX_POOL, cat));
    output(g, pad(g, "pad_value", g4, NULL, DIMS(0, 0, 1, 2, 0, 0, 2, 0), weight(g, "pv", 0, NULL, 0.25f, 0.25f)));
    /* fully connected after a global pool, into a Relu and linear */
    output(g, classifier(g, cat, 104, 40, 10, QF_OP_RELU));
    return g;
}

/* ---- running and comparing -------------------------------------------------------------- */

static qf_calib_table *calibrate_random(qf_graph *g)
{
    qf_calib *c;
    OK(qf_calib_create(g, NULL, &c));
    qf_engine_opts eo = {.device = QF_DEVICE_CPU, .observer = qf_calib_observe, .observer_user = c};
    qf_engine *e;
    OK(qf_engine_create(g, &eo, &e));
    for (int b = 0; b < 3; b++) {
        for (int i = 0; i < g->n_inputs; i++) {
            float *x = qf_engine_input(e, i);
            for (int64_t k = 0; k < qf_value_numel(&g->values[g->inputs[i]]); k++) x[k] = frand(-1.0f, 1.0f);
        }
        qf_calib_set_batch_valid(c, g->batch);
        OK(qf_engine_run(e));
    }
    qf_engine_free(e);
    unsigned methods;
    double pct;
    OK(qf_calib_method_parse("minmax", &methods, &pct));
    char sha[65];
    memset(sha, '0', 64);
    sha[64] = 0;
    qf_calib_meta meta = {.images = 3, .model_sha256 = sha};
    qf_calib_table *t;
    OK(qf_calib_finalize(c, methods, pct, &meta, &t));
    qf_calib_free(c);
    return t;
}

/* The scale of the int8 value dequantized into output v, or 0. */
static float output_unit(const qf_graph *g, int v)
{
    int p = g->values[v].producer;
    if (p < 0) return 0.0f;
    const qf_node *n = &g->nodes[p];
    if (n->op == QF_OP_DEQUANTIZE_LINEAR) return g->values[n->in[0]].scale;
    if (n->precision == QF_PREC_INT8) return 1e-30f; /* an INT8 epilogue writing float: exact */
    return 0.0f;
}

/* index QF_PRECISION_COUNT: INT8 with per-tensor weight scales, which the
 * CUDA engine requantizes in cuBLASLt's own int8 epilogue (conv.cu) */
static const char *prec_name[] = {"fp32", "fp16", "int8", "int8pt"};

/* The engine under test; QFORGE_TEST_CUDA_ON_CPU=1 puts the CPU engine there
 * to check this harness itself on a machine without a GPU. */
static qf_device_kind dut = QF_DEVICE_CUDA;

/* Set where an INT8 graph keeps FP16 GEMMs between its INT8 layers (the
 * attention's QK^T and AV): cuBLASLt sums those in an order of its chosen
 * algorithm, so a product can round to another half than the CPU's and move
 * an INT8 level downstream; such outputs get FP16's tolerance, not INT8's. */
static bool int8_reads_fp16_gemms;

/* Runs g on both engines `runs` times with fresh random inputs; every output
 * must agree within the precision's tolerance, or exactly. (One thread for
 * the kernels of host nodes too, so all-host runs are the CPU's bit for bit.) */
static void compare(qf_graph *g, qf_precision prec, int runs, const char *label, bool exact)
{
    qf_engine *cpu, *gpu;
    qf_engine_opts co = {.device = QF_DEVICE_CPU, .threads = 1}, go = {.device = dut, .threads = 1};
    OK(qf_engine_create(g, &co, &cpu));
    OK(qf_engine_create(g, &go, &gpu));
    for (int r = 0; r < runs; r++) {
        /* the last of several runs leaves the batch's last item out
         * (qf_engine_run_items, as the Triton backend pads a batch): the
         * device engine gets other inputs there, which must not reach the
         * items before it */
        bool padded = runs > 1 && r == runs - 1 && g->batch > 1;
        /* qf_engine_write_input's sources stay valid until the run returns
         * (engine.h). Freed before it, and with the device source's upload
         * not yet landed, the second half of the inputs was garbage whenever
         * the GPU was busy with other processes (every "flaky" failure of
         * session 18 and 19 was in an output's second half) */
        void *written[8][2] = {{NULL}};
        ck_assert_int_le(g->n_inputs, 8);
        for (int i = 0; i < g->n_inputs; i++) {
            float *a = qf_engine_input(cpu, i), *b = qf_engine_input(gpu, i);
            const qf_value *iv = &g->values[g->inputs[i]];
            int64_t n = qf_value_numel(iv), lead = iv->dims[0] == g->batch ? n / g->batch * (g->batch - 1) : n;
            for (int64_t k = 0; k < n; k++) a[k] = b[k] = frand(-1.0f, 1.0f);
            if (padded)
                for (int64_t k = lead; k < n; k++) b[k] = 100.0f;
            if (runs > 1 && r == 0) {
                /* the first of several runs passes the inputs through
                 * qf_engine_write_input (on a CUDA engine a copy straight to
                 * the device, as the Triton backend does for a request in GPU
                 * memory); the host buffer then holds other values, unread */
                size_t bytes = (size_t)n * sizeof(float), half = bytes / 2 / sizeof(float) * sizeof(float);
                float *src = malloc(bytes);
                void *dsrc;
                ck_assert_ptr_nonnull(src);
                memcpy(src, b, bytes);
                for (int64_t k = 0; k < n; k++) b[k] = 50.0f;
                /* the first half from host memory, the rest from device
                 * memory (host memory again when the CPU engine is under test) */
                if (dut == QF_DEVICE_CUDA) {
                    ck_assert_int_eq(cudaMalloc(&dsrc, bytes), cudaSuccess);
                    ck_assert_int_eq(cudaMemcpy(dsrc, src, bytes, cudaMemcpyHostToDevice), cudaSuccess);
                    /* from pageable memory cudaMemcpy may return before its DMA lands, and the
                     * engine's copy stream does not wait for the legacy stream */
                    ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
                } else {
                    dsrc = src;
                }
                OK(qf_engine_write_input(gpu, i, 0, src, half));
                OK(qf_engine_write_input(gpu, i, half, (char *)dsrc + half, bytes - half));
                written[i][0] = src, written[i][1] = dsrc != src ? dsrc : NULL;
            }
        }
        OK(qf_engine_run(cpu));
        OK(padded ? qf_engine_run_items(gpu, g->batch - 1) : qf_engine_run(gpu));
        for (int i = 0; i < g->n_inputs; i++) {
            if (written[i][1]) cudaFree(written[i][1]);
            free(written[i][0]);
        }
        for (int o = 0; o < g->n_outputs; o++) {
            const qf_value *ov = &g->values[g->outputs[o]];
            ck_assert_int_eq(ov->dtype, QF_F32);
            const float *ref = qf_engine_output(cpu, o), *got = qf_engine_output(gpu, o);
            int64_t n = qf_value_numel(ov);
            if (runs > 1 && r == 0) { /* qf_engine_read_output gives the same bytes */
                size_t bytes = (size_t)n * sizeof(float);
                float *copy = malloc(bytes);
                ck_assert_ptr_nonnull(copy);
                OK(qf_engine_read_output(gpu, o, 0, copy, bytes));
                ck_assert_int_eq(memcmp(copy, got, bytes), 0);
                /* and into device memory (a server's CUDA shared memory), at an offset */
                if (dut == QF_DEVICE_CUDA) {
                    void *dst;
                    const size_t off = bytes / 2 / sizeof(float) * sizeof(float);
                    ck_assert_int_eq(cudaMalloc(&dst, bytes), cudaSuccess);
                    OK(qf_engine_read_output(gpu, o, off, dst, bytes - off));
                    memset(copy, 0, bytes);
                    ck_assert_int_eq(cudaMemcpy(copy, dst, bytes - off, cudaMemcpyDeviceToHost), cudaSuccess);
                    ck_assert_int_eq(memcmp(copy, (const char *)got + off, bytes - off), 0);
                    cudaFree(dst);
                }
                free(copy);
            }
            if (padded) {
                if (ov->dims[0] != g->batch) continue;
                n = n / g->batch * (g->batch - 1);
            }
            double mx = 0.0, err = 0.0;
            int64_t worst = 0, same = 0;
            for (int64_t k = 0; k < n; k++) mx = fmax(mx, fabs(ref[k]));
            float unit = prec == QF_PREC_INT8 ? output_unit(g, g->outputs[o]) : 0.0f;
            double tol = prec == QF_PREC_FP32 ? 1e-4 * mx : prec == QF_PREC_FP16 ? 4e-3 * mx : 4e-3 * mx;
            if (unit > 0.0f) tol = 1.001 * unit + 1e-6 * mx;
            if (prec == QF_PREC_INT8 && int8_reads_fp16_gemms) tol = fmax(tol, 4e-3 * mx);
            if (tol == 0.0) tol = 1e-30;
            if (exact) tol = 0.0;
            for (int64_t k = 0; k < n; k++) {
                double d = isnan(got[k]) != isnan(ref[k]) ? INFINITY : isnan(ref[k]) ? 0.0 : fabs((double)got[k] - ref[k]);
                same += d == 0.0;
                if (d > err) err = d, worst = k;
            }
            ck_assert_msg(err <= tol, "%s %s output %s: max error %g at %lld (gpu %g, cpu %g), tolerance %g (max |ref| %g)",
                          g->source, label, ov->name, err, (long long)worst, got[worst], ref[worst], tol, mx);
            if (r == 0)
                printf("  %-22s %s %-12s %6lld elements, max |err| %.3g (tol %.3g), %5.1f%% bit-exact\n", g->source,
                       label, ov->name, (long long)n, err, tol, 100.0 * same / (n ? n : 1));
        }
    }
    qf_engine_free(cpu);
    qf_engine_free(gpu);
}

/* build()'s graph prepared at `batch` (0: its input's own), quantized with o
 * (NULL: left FP32) on a table calibrated on random inputs of a twin built
 * from the same random state. */
static qf_graph *build_quantized(build_fn build, int batch, const qf_quant_opts *o)
{
    uint64_t seed = rng;
    qf_graph *g = build();
    prepare(g, batch > 0 ? batch : (int)g->values[g->inputs[0]].dims[0]);
    if (!o) return g;
    rng = seed;
    qf_graph *ref = build();
    prepare(ref, batch > 0 ? batch : (int)ref->values[ref->inputs[0]].dims[0]);
    qf_calib_table *t = calibrate_random(ref);
    qf_graph_free(ref);
    OK(qf_quantize(g, t, o, NULL));
    qf_calib_table_free(t);
    return g;
}

/* build_quantized at precision p with MinMax thresholds (per-tensor weight
 * scales where asked), or left FP32. */
static qf_graph *build_minmax(build_fn build, int p, bool per_tensor)
{
    qf_quant_opts o;
    qf_quant_opts_init(&o);
    o.precision = (qf_precision)p;
    o.method = QF_CALIB_MINMAX;
    o.per_tensor_weights = per_tensor;
    return build_quantized(build, 0, p != QF_PREC_FP32 ? &o : NULL);
}

/* Every output of build()'s graph on both engines at FP32, FP16, INT8 and
 * INT8 with per-tensor weight scales: within tolerance, or (exact) bit for bit. */
static void check_graph(build_fn build, bool exact)
{
    for (int v = 0; v <= QF_PRECISION_COUNT; v++) {
        const bool per_tensor = v == QF_PRECISION_COUNT;
        const int p = per_tensor ? QF_PREC_INT8 : v;
        qf_graph *g = build_minmax(build, p, per_tensor);
        compare(g, (qf_precision)p, 2, prec_name[v], exact);
        qf_graph_free(g);
    }
}

#define OP_TEST(name)                                                                                                 \
    START_TEST(t_##name) { check_graph(b_##name, false); }                                                            \
    END_TEST

OP_TEST(conv3x3)
OP_TEST(conv_tiles)
OP_TEST(conv_rgb_s2)
OP_TEST(rgb_stems)
OP_TEST(rgb_stem_batch50)
OP_TEST(conv_1x1)
OP_TEST(conv_depthwise)
OP_TEST(depthwise_vectors)
OP_TEST(depthwise_7x7)
OP_TEST(conv_grouped_dilated)
OP_TEST(conv_grouped_vectors)
OP_TEST(conv_relu_pool)
OP_TEST(conv_smooth)
OP_TEST(residual)
OP_TEST(residual_wide)
OP_TEST(pools)
OP_TEST(gemm_bias)
OP_TEST(gemm_general)
OP_TEST(matmul)
OP_TEST(binary)
OP_TEST(unary)
OP_TEST(batchnorm_softmax)
OP_TEST(concat_copy)
OP_TEST(dense_block)
OP_TEST(pad)
OP_TEST(resize)
OP_TEST(reduce_mean)
OP_TEST(gather)
OP_TEST(conv_transpose)
OP_TEST(se_block)
OP_TEST(se_block_wide)
OP_TEST(se_block_s2)
OP_TEST(se_block_k5)
OP_TEST(se_block_k5_s2)
OP_TEST(se_block_odd)
OP_TEST(shuffle_units)
OP_TEST(se_block_relu)
OP_TEST(mbv3_blocks)
OP_TEST(mlp)
OP_TEST(convnext_block)
OP_TEST(c2f)

START_TEST(t_moves_exact) { check_graph(b_moves_exact, true); }
END_TEST

/* b_c2f at INT8: every node int8 (no conversion but the input's and the
 * output's) and bit for bit with the CPU engine, tuned and with the
 * convs pinned to the implicit GEMM */
START_TEST(c2f_int8_exact)
{
    const char *tactics[2] = {NULL, "igemm"};
    for (int tc = 0; tc < 2; tc++) {
        qf_graph *g = build_minmax(b_c2f, QF_PREC_INT8, false);
        int float_nodes = 0, conversions = 0;
        for (int i = 0; i < g->n_nodes; i++) {
            const qf_node *n = &g->nodes[i];
            if (qf_op_is_conversion(n->op)) conversions++;
            else float_nodes += n->precision != QF_PREC_INT8;
        }
        ck_assert_int_eq(float_nodes, 0);
        ck_assert_int_le(conversions, 2);
        if (tactics[tc]) setenv("QFORGE_CUDA_CONV_TACTIC", tactics[tc], 1);
        compare(g, QF_PREC_INT8, 2, tactics[tc] ? tactics[tc] : "tuned", true);
        unsetenv("QFORGE_CUDA_CONV_TACTIC");
        qf_graph_free(g);
    }
}
END_TEST

/* quant --int8-attention: QK^T and AV as INT8 products on the device
 * (cuBLASLt, and without it the fallback kernel) bit for bit against the
 * CPU engine; every precision without the option as the other op graphs. */
START_TEST(t_int8_attention)
{
    check_graph(b_attention, false);
    for (int nolt = 0; nolt < 2; nolt++) {
        uint64_t seed = rng;
        qf_graph *ref = b_attention(), *g;
        prepare(ref, 2);
        qf_calib_table *t = calibrate_random(ref);
        qf_graph_free(ref);
        rng = seed;
        g = b_attention();
        prepare(g, 2);
        qf_quant_opts o;
        qf_quant_opts_init(&o);
        o.method = QF_CALIB_MINMAX;
        o.int8_attention = true;
        OK(qf_quantize(g, t, &o, NULL));
        qf_calib_table_free(t);
        const int qk = node_index(g, "qk"), av = node_index(g, "av");
        ck_assert_int_eq(g->nodes[qk].precision, QF_PREC_INT8);
        ck_assert_int_eq(g->nodes[av].precision, QF_PREC_INT8);
        if (nolt) setenv("QFORGE_CUDA_NOLT", "1", 1);
        qf_engine_opts go = {.device = dut};
        qf_engine *e;
        OK(qf_engine_create(g, &go, &e));
        ck_assert_int_eq(qf_engine_node_device(e, qk), dut);
        ck_assert_int_eq(qf_engine_node_device(e, av), dut);
        qf_engine_free(e);
        compare(g, QF_PREC_INT8, 2, nolt ? "int8attn-nolt" : "int8attn", true);
        unsetenv("QFORGE_CUDA_NOLT");
        qf_graph_free(g);
    }
}
END_TEST

static void log_stderr(void *user, qf_log_level level, const char *msg);
/* g built on the engine under test (with QFORGE_CUDA_NOFUSE and
 * QFORGE_CPU_NOFUSE when nofuse), its debug lines going to log (the fusion
 * tests count theirs). */
static qf_engine *create_logged(qf_graph *g, bool nofuse, qf_log_fn log, void *user)
{
    if (nofuse) setenv("QFORGE_CUDA_NOFUSE", "1", 1), setenv("QFORGE_CPU_NOFUSE", "1", 1);
    qf_log_set(log, user, QF_LOG_DEBUG);
    qf_engine_opts go = {.device = dut};
    qf_engine *e = NULL;
    qf_status st = qf_engine_create(g, &go, &e);
    qf_log_set(getenv("QFORGE_DEBUG") ? log_stderr : NULL, NULL, QF_LOG_DEBUG);
    unsetenv("QFORGE_CUDA_NOFUSE");
    unsetenv("QFORGE_CPU_NOFUSE");
    ck_assert_msg(st == QF_OK, "%s", qf_error_message());
    return e;
}
/* How many debug lines `count` counts (adding one to an int each) while an
 * engine of g is built, fused or, with nofuse, not */
static int logged_count(qf_graph *g, bool nofuse, qf_log_fn count)
{
    int n = 0;
    qf_engine_free(create_logged(g, nofuse, count, &n));
    return n;
}
static void count_attention(void *user, qf_log_level level, const char *msg)
{
    (void)level;
    int *counts = (int *)user;
    if (strstr(msg, "attention fused")) counts[0]++;
    if (strstr(msg, "biases summed into one table")) counts[1]++;
    const char *at = strstr(msg, "heads of ");
    if (at) sscanf(at, "heads of %*d; %d", &counts[2]); /* the nodes before the chain it took in */
}

/* The attention graphs on both engines at every precision (fused on both
 * at FP16 and INT8, where the attention stays FP16; timm's split form too),
 * and the fusion itself
 * on the engine under test: one chain each at FP16, none with its NOFUSE
 * variable; on the device, Swin's two constant biases read as one summed
 * table; the scaled form's two Muls and K's Transpose taken in, and each
 * operand's Reshape and Transpose (K^T, read as it is, keeps its own): Q, K
 * and V read through views of the Linear layers' outputs on both engines. */
START_TEST(attention_fused)
{
    const build_fn builds[4] = {b_sdpa_vit, b_sdpa_swin, b_sdpa_scaled, b_sdpa_timm};
    for (int k = 0; k < 4; k++) {
        int8_reads_fp16_gemms = true;
        check_graph(builds[k], false);
        int8_reads_fp16_gemms = false;
        for (int nofuse = 0; nofuse < 2; nofuse++) {
            qf_graph *g = builds[k]();
            prepare(g, (int)g->values[g->inputs[0]].dims[0]);
            qf_quant_opts o;
            qf_quant_opts_init(&o);
            o.precision = QF_PREC_FP16;
            OK(qf_quantize(g, NULL, &o, NULL));
            int counts[3] = {0, 0, 0};
            qf_engine *e = create_logged(g, nofuse, count_attention, counts);
            ck_assert_msg(counts[0] == (nofuse ? 0 : 1), "%s: %d attention chains fused", g->source, counts[0]);
            ck_assert_msg(counts[2] == (nofuse ? 0 : k < 2 ? 4 : 9), "%s: %d nodes before the chain taken in",
                          g->source, counts[2]);
            if (dut == QF_DEVICE_CUDA) /* (the CPU engine does not log its table) */
                ck_assert_msg(counts[1] == (nofuse || k != 1 ? 0 : 1), "%s: %d bias tables", g->source, counts[1]);
            qf_engine_free(e);
            qf_graph_free(g);
        }
    }
    /* timm's form at INT8: the chain takes the split in (9 nodes, and V's
     * DequantizeLinear where the quantizer made one), not only V's walk */
    qf_graph *g = build_minmax(b_sdpa_timm, QF_PREC_INT8, false);
    int counts[3] = {0, 0, 0};
    qf_engine_free(create_logged(g, false, count_attention, counts));
    ck_assert_msg(counts[0] == 1 && counts[2] >= 9, "%s INT8: %d chains, %d nodes before taken in", g->source, counts[0],
                  counts[2]);
    qf_graph_free(g);
}
END_TEST

static void count_layer_norms(void *user, qf_log_level level, const char *msg)
{
    (void)level;
    if (strstr(msg, "LayerNorm takes in its input's DequantizeLinear its output's QuantizeLinear")) ++*(int *)user;
}

/* convnext_block's LayerNorm, between INT8 layers, reads their int8 and
 * writes int8 itself on the device (t_convnext_block checks its values
 * against the CPU engine), not with QFORGE_CUDA_NOFUSE. */
START_TEST(layer_norm_qdq_fused)
{
    if (dut != QF_DEVICE_CUDA) {
        printf("  layer_norm_qdq_fused: the CPU engine under test: no fusion to check\n");
        return;
    }
    for (int nofuse = 0; nofuse < 2; nofuse++) {
        qf_graph *g = build_minmax(b_convnext_block, QF_PREC_INT8, false);
        const int count = logged_count(g, nofuse, count_layer_norms);
        ck_assert_msg(count == !nofuse, "%d LayerNorms took their QuantizeLinear and DequantizeLinear in", count);
        qf_graph_free(g);
    }
}
END_TEST

static void count_se_gates(void *user, qf_log_level level, const char *msg)
{
    (void)level;
    if (strstr(msg, "squeeze-excitation gate fused")) ++*(int *)user;
}

/* The SE blocks' gates run as one layer on the device at FP16 and INT8
 * (the t_se_block tests check their bits against the CPU engine), none
 * with QFORGE_CUDA_NOFUSE. */
START_TEST(se_gates_fused)
{
    if (dut != QF_DEVICE_CUDA) {
        printf("  se_gates_fused: the CPU engine under test: no fusion to check\n");
        return;
    }
    const build_fn builds[] = {b_se_block, b_se_block_k5, b_se_block_odd, b_se_block_relu};
    for (size_t k = 0; k < QF_ARRAY_LEN(builds); k++)
        for (int p = QF_PREC_FP16; p <= QF_PREC_INT8; p++)
            for (int nofuse = 0; nofuse < 2; nofuse++) {
                qf_graph *g = build_minmax(builds[k], p, false);
                const int count = logged_count(g, nofuse, count_se_gates);
                ck_assert_msg(count == !nofuse, "%s at %s: %d gates fused", g->source, prec_name[p], count);
                qf_graph_free(g);
            }
}
END_TEST

static void count_shuffles(void *user, qf_log_level level, const char *msg)
{
    (void)level;
    int *counts = (int *)user;
    if (strstr(msg, "channel shuffle of")) counts[strstr(msg, "(1 input)") ? 0 : 1]++;
    if (strstr(msg, "Slices that read it")) counts[2]++;
}

/* shuffle_units' five shuffles fuse at every precision, three of them with
 * their Concat (the fourth Concat is an output too), one with the Slices
 * after it; none with QFORGE_CUDA_NOFUSE. t_shuffle_units checks the results. */
START_TEST(channel_shuffles_fused)
{
    if (dut != QF_DEVICE_CUDA) {
        printf("  channel_shuffles_fused: the CPU engine under test: no fusion to check\n");
        return;
    }
    for (int p = QF_PREC_FP32; p <= QF_PREC_INT8; p++)
        for (int nofuse = 0; nofuse < 2; nofuse++) {
            qf_graph *g = build_minmax(b_shuffle_units, p, false);
            int counts[3] = {0, 0, 0};
            qf_engine *e = create_logged(g, nofuse, count_shuffles, counts);
            ck_assert_msg(counts[0] == (nofuse ? 0 : 2) && counts[1] == (nofuse ? 0 : 3) && counts[2] == !nofuse,
                          "%s at %s: %d shuffles alone, %d with their Concat, %d with Slices", g->source, prec_name[p],
                          counts[0], counts[1], counts[2]);
            qf_engine_free(e);
            qf_graph_free(g);
        }
}
END_TEST

START_TEST(depthwise_7x7_exact)
{
    qf_graph *g = build_minmax(b_depthwise_7x7, QF_PREC_INT8, false);
    const qf_node *c = node_named(g, "dw7c");
    ck_assert_msg(c && c->precision == QF_PREC_INT8 && qfi_out(g, c, 0)->dtype == QF_F16, "dw7c is not an INT8 layer writing halves");
    compare(g, QF_PREC_INT8, 2, "int8", true);
    qf_graph_free(g);
}
END_TEST

/* The levels above bit for bit with the CPU engine's exact forms, with
 * each INT8 GEMM tactic (the implicit GEMM's epilogue for SiLU and Sigmoid;
 * cuBLASLt + the requantize kernel for all four: the implicit GEMM is built
 * without GELU); the second Linears' float outputs show every level. */
START_TEST(vector_convs_exact) { check_graph(b_vector_convs, true); }
END_TEST

START_TEST(smooth_levels_exact)
{
    const char *tactics[3] = {NULL, "igemm", "lt"}; /* NULL: timed among qforge's tactics (compare leaves cuDNN out) */
    for (int tc = 0; tc < 3; tc++) {
        qf_quant_opts o;
        qf_quant_opts_init(&o);
        o.method = QF_CALIB_MINMAX;
        qf_graph *g = build_quantized(b_smooth_levels, 4, &o);
        int fused = 0;
        for (int i = 0; i < g->n_nodes; i++) {
            const qf_node *nd = &g->nodes[i];
            ck_assert_msg(nd->op != QF_OP_GELU && nd->op != QF_OP_SIGMOID && nd->op != QF_OP_MUL,
                          "node %s was not fused", nd->name);
            if (!qfi_act_smooth(nd->act)) continue;
            fused++;
            ck_assert_int_eq(qfi_out(g, nd, 0)->dtype, QF_I8);
        }
        ck_assert_int_eq(fused, 4);
        if (tactics[tc]) setenv("QFORGE_CUDA_CONV_TACTIC", tactics[tc], 1);
        compare(g, QF_PREC_INT8, 1, tactics[tc] ? tactics[tc] : "tuned", true);
        unsetenv("QFORGE_CUDA_CONV_TACTIC");
        qf_graph_free(g);
    }
}
END_TEST

/* half_outputs bit for bit with the CPU engine, tuned and with every INT8
 * conv pinned to the implicit GEMM (its half epilogue; 2 blocks: several
 * tiles a block) and to cuBLASLt + the requantize pass; its convs do write
 * halves. */
START_TEST(half_outputs_exact)
{
    const char *tactics[3] = {NULL, "igemm", "lt"};
    for (int tc = 0; tc < 3; tc++) {
        qf_graph *g = build_minmax(b_half_outputs, QF_PREC_INT8, false);
        int halves = 0;
        for (int i = 0; i < g->n_nodes; i++)
            halves += g->nodes[i].op == QF_OP_CONV && g->nodes[i].precision == QF_PREC_INT8 &&
                      qfi_out(g, &g->nodes[i], 0)->dtype == QF_F16;
        ck_assert_int_ge(halves, 2);
        if (tactics[tc]) setenv("QFORGE_CUDA_CONV_TACTIC", tactics[tc], 1);
        if (tc == 1) setenv("QFORGE_CUDA_IGEMM_BLOCKS", "2", 1);
        compare(g, QF_PREC_INT8, 1, tactics[tc] ? tactics[tc] : "tuned", true);
        unsetenv("QFORGE_CUDA_CONV_TACTIC");
        unsetenv("QFORGE_CUDA_IGEMM_BLOCKS");
        qf_graph_free(g);
    }
}
END_TEST

static void count_tma(void *user, qf_log_level level, const char *msg)
{
    (void)level;
    if (strstr(msg, "TMA wgmma")) ++*(int *)user;
}

/* The graph of `build` bit for bit with the CPU engine, the TMA kernel's
 * ping-pong form offered (QFORGE_CUDA_TMA_PINGPONG), with the implicit
 * GEMM's variants 0 to 4 pinned (a layer takes the pin modulo its variant
 * count) on a grid of 2 blocks (each walks several tiles: the ping-pong
 * form's warpgroups take turns, the ring of stages wraps), on_tma[v] of its
 * layers on the TMA kernel with pin v, and tuned on the full grid.
 * The TMA kernel's variants come first where they fit: 128x128, 128x256
 * and two-blocks-an-SM 128x128 (the cooperative form), then the ping-pong
 * form's 64x128 and 64x256 (a GELU layer: 128x128 and 64x128 only). */
enum { TMA_PINS = 5 };
static void check_tma_pinned(qf_graph *(*build)(void), const char *name, const int on_tma[TMA_PINS])
{
    for (int pin = 0; pin <= TMA_PINS; pin++) {
        setenv("QFORGE_CUDA_TMA_PINGPONG", "1", 1); /* the ping-pong form is offered only so */
        qf_graph *g = build_minmax(build, QF_PREC_INT8, false);
        char label[32];
        snprintf(label, sizeof label, pin < TMA_PINS ? "int8 variant %d" : "int8 tuned", pin);
        if (pin < TMA_PINS) {
            char v[2] = {(char)('0' + pin), '\0'};
            setenv("QFORGE_CUDA_IGEMM_VARIANT", v, 1);
            setenv("QFORGE_CUDA_CONV_TACTIC", "igemm", 1);
            setenv("QFORGE_CUDA_IGEMM_BLOCKS", "2", 1);
            if (dut == QF_DEVICE_CUDA) {
                const int n = logged_count(g, false, count_tma);
                printf("  %s: %s: %d layers on the TMA kernel\n", name, label, n);
                ck_assert_msg(n == on_tma[pin], "%s: %d layers on the TMA kernel", label, n);
            }
        }
        compare(g, QF_PREC_INT8, 2, label, true);
        unsetenv("QFORGE_CUDA_IGEMM_VARIANT");
        unsetenv("QFORGE_CUDA_CONV_TACTIC");
        unsetenv("QFORGE_CUDA_IGEMM_BLOCKS");
        unsetenv("QFORGE_CUDA_TMA_PINGPONG");
        qf_graph_free(g);
    }
}

/* tma_linears: fc1 to fc4 on the TMA kernel with pins 0 to 3; pin 2 puts
 * fc2 (K of 7 stages) on the ping-pong 64x128 tiles, pin 3 the GELU layers
 * fc1 (6 stages) and fc4 and fc3's residual on those and fc2 on 64x256;
 * pin 4 leaves fc2 (no two-blocks-an-SM variant) to the implicit GEMM. */
START_TEST(tma_linears_exact) { check_tma_pinned(b_tma_linears, "tma_linears", (const int[TMA_PINS]){4, 4, 4, 4, 3}); }
END_TEST

/* tma_smooth_convs: c1 to c4 on the TMA kernel's tiles; c3 (K of three
 * stages) has no two-blocks-an-SM variant, so its pins 2 and 3 take the
 * ping-pong tiles and pin 4 the implicit GEMM. */
START_TEST(tma_smooth_convs_exact)
{
    check_tma_pinned(b_tma_smooth_convs, "tma_smooth_convs", (const int[TMA_PINS]){4, 4, 4, 4, 3});
}
END_TEST

/* The fast levels themselves, all 2^32 floats v at each output scale
 * below, clamped to int8's bounds and to wide ones (+-2^21: the margins
 * over the whole range of y): none the fast form calls sure may differ
 * from the exact form's level, and of the v with 1 <= |v| <= 2048 (where
 * an int8 output's levels are) it may leave at most 1 % to the exact form
 * (the share it defers is the epilogues' cost). The same for the half
 * outputs' fast forms of SiLU and Sigmoid (qfi_sigmoid_f16_fast, and the
 * approximate one of the queued depthwise epilogue) at the scale quant
 * gives them (1: real units), unbounded and clamped: none wrong, and of the v with
 * 1/16 <= |v| <= 16 at most 5 % left to the exact form (a half's step is
 * finer than a level). */
START_TEST(smooth_levels_sweep)
{
    if (dut != QF_DEVICE_CUDA) {
        printf("  smooth_levels_sweep: the CPU engine under test: no device levels to sweep\n");
        return;
    }
    const qf_act acts[4] = {QF_ACT_SILU, QF_ACT_SIGMOID, QF_ACT_GELU, QF_ACT_GELU_TANH};
    const float scales[4] = {0.00371f, 0.0241f, 0.0973f, 0.613f};
    for (int form = QFT_SWEEP_INT8; form <= QFT_SWEEP_HALF_APPROX; form++)
        for (int a = 0; a < (form != QFT_SWEEP_INT8 ? 2 : 4); a++)
            for (int k = 0; k < (form != QFT_SWEEP_INT8 ? 2 : 4); k++) {
                const bool half = form != QFT_SWEEP_INT8;
                /* int8 bounds with a zero point of 3, or wide ones; halves unbounded, or a Clip's */
                const float wide = half ? INFINITY : 2097152.0f;
                const float lo = k % 2 ? -131.0f : -wide, hi = k % 2 ? 124.0f : wide, s = half ? 1.0f : scales[k];
                const char *name = form == QFT_SWEEP_HALF_APPROX ? "half approx" : half ? "half" : "int8";
                unsigned long long wrong, unsure, total, big;
                ck_assert_int_eq(qft_smooth_sweep(acts[a], form, s, lo, hi, &wrong, &unsure, &total, &big), 0);
                printf("smooth_levels_sweep: %s act %d scale %g bounds [%g, %g]: %llu of %llu wrong; %llu of the %llu "
                       "with %s (%.4f %%) left to the exact form\n",
                       name, (int)acts[a], s, lo, hi, wrong, total, unsure, big,
                       half ? "1/16 <= |v| <= 16" : "1 <= |v| <= 2048", 100.0 * (double)unsure / (double)big);
                ck_assert_msg(wrong == 0, "%s act %d scale %g: %llu fast results differ from the exact form's", name,
                              (int)acts[a], s, wrong);
                ck_assert_msg(unsure * (half ? 20 : 100) <= big, "%s act %d scale %g: %llu of %llu left to the exact form",
                              name, (int)acts[a], s, unsure, big);
            }
}
END_TEST

/* INT8 with the activations above in every conv's epilogue: the CUDA engine
 * bit for bit with the CPU engine, with per-channel and per-tensor weight
 * scales (a smooth activation keeps a layer out of cuBLASLt's int8 epilogue)
 * and through each conv tactic (the implicit GEMM, and im2col + int32 GEMM +
 * qforge's requantize kernel). */
START_TEST(smooth_epilogues_exact)
{
    const char *tactics[3] = {NULL, "igemm", "lt"}; /* NULL: timed among qforge's tactics (compare leaves cuDNN out) */
    for (int v = 0; v < 2; v++)
        for (int tc = 0; tc < 3; tc++) {
            qf_quant_opts o;
            qf_quant_opts_init(&o);
            o.method = QF_CALIB_MINMAX;
            o.per_tensor_weights = v == 1;
            qf_graph *g = build_quantized(b_smooth_epilogues, 2, &o);
            int convs = 0;
            for (int i = 0; i < g->n_nodes; i++) {
                const qf_node *nd = &g->nodes[i];
                ck_assert_msg(nd->op != QF_OP_SIGMOID && nd->op != QF_OP_MUL && nd->op != QF_OP_HARD_SWISH &&
                                  nd->op != QF_OP_HARD_SIGMOID && nd->op != QF_OP_ADD,
                              "node %s (%s) was not fused", nd->name, qf_op_name(nd->op));
                if (nd->op != QF_OP_CONV) continue;
                convs++;
                ck_assert_int_eq(nd->precision, QF_PREC_INT8);
                ck_assert_msg(nd->act >= QF_ACT_SIGMOID, "conv %s: act %d", nd->name, nd->act);
            }
            ck_assert_int_eq(convs, 8);
            if (tactics[tc]) setenv("QFORGE_CUDA_CONV_TACTIC", tactics[tc], 1);
            char label[32];
            snprintf(label, sizeof label, "%s/%s", v ? "int8pt" : "int8", tactics[tc] ? tactics[tc] : "tuned");
            compare(g, QF_PREC_INT8, 2, label, true);
            unsetenv("QFORGE_CUDA_CONV_TACTIC");
            qf_graph_free(g);
        }
}
END_TEST

/* Debug lines of a build that name its cuDNN tactics. */
typedef struct dnn_capture {
    int pinned;      /* convs that ran on a cuDNN plan */
    int padded;      /* ... of them on an input padded with its zero point */
    char missing[256]; /* why there are no cuDNN tactics, if so */
    int split_k;     /* implicit-GEMM builds on a split-K variant */
} dnn_capture;

static void capture_dnn(void *user, qf_log_level level, const char *msg)
{
    dnn_capture *lc = user;
    (void)level;
    if (strstr(msg, "cuDNN ") && strstr(msg, " engine ") && strstr(msg, "(pinned)")) {
        lc->pinned++;
        if (strstr(msg, "input padded with its zero point")) lc->padded++;
    }
    if (strstr(msg, "implicit-GEMM") && strstr(msg, ", split-K ")) lc->split_k++;
    if (strstr(msg, "no cuDNN tactics") && !lc->missing[0]) snprintf(lc->missing, sizeof lc->missing, "%s", msg);
}

/* quant --asymmetric (b_asymmetric): the CUDA engine bit for bit with the
 * CPU engine through each INT8 conv tactic the engine has -- tuned; cuBLASLt
 * after im2col, whole and in chunks; the fallback GEMM kernel (NOLT); the
 * implicit GEMM in each of its first variants, on a small persistent grid
 * too -- with every node on the device. */
START_TEST(asymmetric_exact)
{
    static const struct {
        const char *label, *tactic, *variant, *chunk, *blocks;
        bool nolt;
    } runs[] = {
        {"tuned", NULL, NULL, NULL, NULL, false},
        {"lt", "lt", NULL, NULL, NULL, false},
        {"lt-chunked", "lt", NULL, "32", NULL, false},
        {"lt-nolt", "lt", NULL, NULL, NULL, true},
        {"igemm", "igemm", NULL, NULL, NULL, false},
        {"igemm-v0", "igemm", "0", NULL, NULL, false},
        {"igemm-v1", "igemm", "1", NULL, NULL, false},
        {"igemm-v2", "igemm", "2", NULL, NULL, false},
        {"igemm-v3", "igemm", "3", NULL, NULL, false},
        {"igemm-v4-persistent", "igemm", "4", NULL, "2", false},
        {"igemm-v5-persistent", "igemm", "5", NULL, "2", false},
        /* split-K where a layer's tiles leave most SMs idle (c17, c71: 4 stages; the Gemms) */
        {"igemm-splitk", "igemm", "splitk", NULL, NULL, false},
        /* cuDNN's graph with the output zero point after the clip (c0, c6),
         * 1x1 convs on an input with one (no padding: the bias holds it), and
         * padded convs on a copy of their input padded with it (c1, c2, ...) */
        {"cudnn", "cudnn", NULL, NULL, NULL, false},
    };
    /* inputs that must carry a zero point for the test to mean something */
    static const char *zp_in[] = {"c1", "c2", "dw", "dws2", "dw5", "g4", "g16", "cr1", "cr2", "cs", "cav", "dw6", "c6",
                                  "pw20", "c17", "c71", "c55", "rgb2", "rgb1", "avg", "avg_pad", "maxp", "fc1", "fc2", "gmax"};
    uint64_t seed = rng;
    qf_graph *ref = b_asymmetric();
    prepare(ref, 2);
    qf_calib_table *t = calibrate_random(ref);
    qf_graph_free(ref);
    for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
        rng = seed;
        qf_graph *g = b_asymmetric();
        prepare(g, 2);
        qf_quant_opts o;
        qf_quant_opts_init(&o);
        o.method = QF_CALIB_MINMAX;
        o.asymmetric = true;
        o.int8_pooled = true; /* the SE convs and the classifier INT8 too */
        OK(qf_quantize(g, t, &o, NULL));
        if (r == 0 && getenv("QFORGE_DEBUG"))
            for (int i = 0; i < g->n_nodes; i++) {
                const qf_node *n = &g->nodes[i];
                const qf_value *x = &g->values[n->in[0]], *y = &g->values[n->out[0]];
                printf("  %-10s %-20s %s in %s z %4d, out %s z %4d\n", n->name, qf_op_name(n->op),
                       qf_precision_name(n->precision), qf_dtype_info(x->dtype)->name, (int)x->zero_point,
                       qf_dtype_info(y->dtype)->name, (int)y->zero_point);
            }
        int missing = 0;
        for (size_t k = 0; k < sizeof zp_in / sizeof *zp_in; k++) {
            const qf_node *n = &g->nodes[node_index(g, zp_in[k])];
            if (g->values[n->in[0]].zero_point == 0)
                printf("node %s reads %s without a zero point\n", n->name, g->values[n->in[0]].name), missing++;
        }
        ck_assert_int_eq(missing, 0);
        /* the residual Adds are in the conv epilogues, their residuals with zero points */
        for (int k = 0; k < 2; k++) {
            const qf_node *n = &g->nodes[node_index(g, k ? "cr2" : "cr1")];
            ck_assert_int_eq(n->precision, QF_PREC_INT8);
            ck_assert_msg(n->n_in > 4 && n->in[4] >= 0 && g->values[n->in[4]].zero_point != 0, "%s: no residual", n->name);
            ck_assert_int_eq(g->values[n->out[0]].zero_point == 0, k == 1); /* cr2: a linear output */
        }
        if (runs[r].tactic) setenv("QFORGE_CUDA_CONV_TACTIC", runs[r].tactic, 1);
        if (runs[r].variant) setenv("QFORGE_CUDA_IGEMM_VARIANT", runs[r].variant, 1);
        if (runs[r].chunk) setenv("QFORGE_CUDA_CHUNK_ROWS", runs[r].chunk, 1);
        if (runs[r].blocks) setenv("QFORGE_CUDA_IGEMM_BLOCKS", runs[r].blocks, 1);
        if (runs[r].nolt) setenv("QFORGE_CUDA_NOLT", "1", 1);
        /* every node on the device: nothing with a zero point falls back to the host */
        qf_engine_opts go = {.device = dut};
        qf_engine *e;
        OK(qf_engine_create(g, &go, &e));
        for (int i = 0; i < g->n_nodes; i++)
            ck_assert_msg(qf_engine_node_device(e, i) == dut, "%s: node %s (%s) runs on the host", runs[r].label,
                          g->nodes[i].name, qf_op_name(g->nodes[i].op));
        qf_engine_free(e);
        char label[48];
        snprintf(label, sizeof label, "asym/%s", runs[r].label);
        dnn_capture lc = {0};
        const bool dnn = !strcmp(runs[r].label, "cudnn"), split = !strcmp(runs[r].label, "igemm-splitk");
        if (dnn || split) qf_log_set(capture_dnn, &lc, QF_LOG_DEBUG);
        compare(g, QF_PREC_INT8, 2, label, true);
        if (split) {
            qf_log_set(getenv("QFORGE_DEBUG") ? log_stderr : NULL, NULL, QF_LOG_DEBUG);
            printf("  asym/igemm-splitk: %d layer build(s) split K\n", lc.split_k);
            if (dut == QF_DEVICE_CUDA) ck_assert_msg(lc.split_k >= 2, "asym/igemm-splitk: %d split-K builds", lc.split_k);
        }
        if (dnn) {
            qf_log_set(getenv("QFORGE_DEBUG") ? log_stderr : NULL, NULL, QF_LOG_DEBUG);
            printf("  asym/cudnn: %d conv layer build(s) on cuDNN, %d on a zero-point-padded input%s%s\n", lc.pinned,
                   lc.padded, lc.missing[0] ? "; " : "", lc.missing);
            /* c0, c6, pw20, se1, se2, proj and the Gemms' convs at least, and
             * the padded c1, c2, cr1, cs, cz, cz2, c17, c71, c55, unless the machine has no cuDNN */
            if (dut == QF_DEVICE_CUDA && !lc.missing[0]) {
                ck_assert_msg(lc.pinned >= 4, "asym/cudnn: %d conv builds on cuDNN", lc.pinned);
                ck_assert_msg(lc.padded >= 4, "asym/cudnn: %d padded conv builds on cuDNN", lc.padded);
            }
        }
        unsetenv("QFORGE_CUDA_CONV_TACTIC");
        unsetenv("QFORGE_CUDA_IGEMM_VARIANT");
        unsetenv("QFORGE_CUDA_CHUNK_ROWS");
        unsetenv("QFORGE_CUDA_IGEMM_BLOCKS");
        unsetenv("QFORGE_CUDA_NOLT");
        qf_graph_free(g);
    }
    qf_calib_table_free(t);
}
END_TEST

/* ---- engine behaviour ----------------------------------------------------------------------- */

typedef struct seen {
    int count;
    int values[256];
    double sums[256];
} seen;

static void observer(void *user, const qf_graph *g, int v, const void *data)
{
    seen *s = user;
    ck_assert_int_lt(s->count, 256);
    double sum = 0.0;
    if (g->values[v].dtype == QF_F32) {
        const float *f = data;
        for (int64_t k = 0; k < qf_value_numel(&g->values[v]); k++) sum += f[k] * (1.0 + 1e-3 * (double)(k % 7));
    }
    s->values[s->count] = v;
    s->sums[s->count++] = sum;
}

/* The observer sees the same values, in the same order, with the same data;
 * also from nodes run on the host (QFORGE_CUDA_HOST_OPS). */
START_TEST(observer_matches_cpu)
{
    for (int host = 0; host < 2; host++) {
        if (host) setenv("QFORGE_CUDA_HOST_OPS", "Relu,Add", 1);
        qf_graph *g = b_residual();
        prepare(g, 2);
        seen s[2] = {{0}};
        qf_engine *e[2];
        for (int k = 0; k < 2; k++) {
            qf_engine_opts o = {.device = k ? dut : QF_DEVICE_CPU, .observer = observer, .observer_user = &s[k]};
            OK(qf_engine_create(g, &o, &e[k]));
        }
        unsetenv("QFORGE_CUDA_HOST_OPS");
        float *a = qf_engine_input(e[0], 0), *b = qf_engine_input(e[1], 0);
        for (int64_t k = 0; k < qf_value_numel(&g->values[g->inputs[0]]); k++) a[k] = b[k] = frand(-1, 1);
        for (int k = 0; k < 2; k++) OK(qf_engine_run(e[k]));
        ck_assert_int_eq(s[0].count, s[1].count);
        ck_assert_int_eq(s[0].count, 1 + g->n_nodes);
        for (int i = 0; i < s[0].count; i++) {
            ck_assert_int_eq(s[0].values[i], s[1].values[i]);
            ck_assert_msg(fabs(s[0].sums[i] - s[1].sums[i]) <= 1e-4 * (1.0 + fabs(s[0].sums[i])), "value %s: %g vs %g",
                          g->values[s[0].values[i]].name, s[0].sums[i], s[1].sums[i]);
        }
        for (int k = 0; k < 2; k++) qf_engine_free(e[k]);
        qf_graph_free(g);
    }
}
END_TEST

/* A graph of deterministic kernels (no GEMM, whose algorithm two engines
 * could tune differently): NHWC pool outputs, a Relu of a node output and one
 * of the input, an Add. */
static qf_graph *b_observed(void)
{
    qf_graph *g = new_graph("observed");
    int x = input(g, "x", 4, DIMS(4, 8, 7, 6));
    int m = value(g, "pool");
    qf_node *n = op(g, "pool", QF_OP_MAX_POOL, 1, IN(x), m);
    set_ints(n, "kernel_shape", 2, DIMS(3, 3));
    set_ints(n, "pads", 4, DIMS(1, 1, 1, 1));
    int r = unary(g, "relu_pool", QF_OP_RELU, m), rx = unary(g, "relu_x", QF_OP_RELU, x);
    output(g, binary(g, "sum", QF_OP_ADD, r, unary(g, "sig", QF_OP_SIGMOID, rx)));
    return g;
}

/* Histograms built on the device (hist_observer) are the host's histograms
 * of the same device data (observer), bin for bin: zeros, NaN and Inf
 * included, and a padded last batch counting only its real images; their
 * signed minimums are the same bits (-0 among the data). */
static void histograms_match(const char *host_ops)
{
    qf_graph *g = b_observed();
    prepare(g, 4);
    qf_calib *cal[2];
    qf_engine *e[2];
    if (host_ops) setenv("QFORGE_CUDA_HOST_OPS", host_ops, 1);
    for (int k = 0; k < 2; k++) {
        OK(qf_calib_create(g, NULL, &cal[k]));
        qf_engine_opts o = {.device = dut, .observer = qf_calib_observe, .observer_user = cal[k]};
        if (k) o.hist_observer = qf_calib_observe_histogram, o.hist_count = qf_calib_observe_count;
        OK(qf_engine_create(g, &o, &e[k]));
    }
    unsetenv("QFORGE_CUDA_HOST_OPS");
    const int64_t n = qf_value_numel(&g->values[g->inputs[0]]);
    for (int run = 0; run < 3; run++) {
        float *a = qf_engine_input(e[0], 0), *b = qf_engine_input(e[1], 0);
        for (int64_t i = 0; i < n; i++) a[i] = b[i] = frand(-3.0f, 3.0f) * (run + 1);
        a[5] = b[5] = 0.0f, a[6] = b[6] = -0.0f;
        if (run == 1) a[7] = b[7] = INFINITY, a[n - 1] = b[n - 1] = NAN; /* n - 1: in the image the next run drops */
        for (int k = 0; k < 2; k++) {
            qf_calib_set_batch_valid(cal[k], run == 2 ? 3 : 0);
            OK(qf_engine_run(e[k]));
        }
    }
    ck_assert_int_eq(qf_calib_tensor_count(cal[0]), qf_calib_tensor_count(cal[1]));
    ck_assert_int_eq(qf_calib_tensor_count(cal[0]), 6);
    for (int i = 0; i < qf_calib_tensor_count(cal[0]); i++) {
        const qf_histogram *h = qf_calib_tensor_hist(cal[0], i), *d = qf_calib_tensor_hist(cal[1], i);
        const char *name = qf_calib_tensor_name(cal[0], i);
        ck_assert_str_eq(name, qf_calib_tensor_name(cal[1], i));
        ck_assert_msg(h->exp == d->exp && h->absmax == d->absmax && h->zeros == d->zeros && h->nonfinite == d->nonfinite,
                      "%s: host exp %d absmax %g zeros %llu nonfinite %llu, device %d %g %llu %llu", name, h->exp,
                      h->absmax, (unsigned long long)h->zeros, (unsigned long long)h->nonfinite, d->exp, d->absmax,
                      (unsigned long long)d->zeros, (unsigned long long)d->nonfinite);
        ck_assert_msg(!memcmp(&h->min, &d->min, sizeof h->min) && isfinite(h->min), "%s: min host %a, device %a",
                      name, h->min, d->min);
        for (int b = 0; b < QF_HIST_BINS; b++)
            ck_assert_msg(h->bins[b] == d->bins[b], "%s bin %d: host %llu, device %llu", name, b,
                          (unsigned long long)h->bins[b], (unsigned long long)d->bins[b]);
    }
    for (int k = 0; k < 2; k++) {
        qf_engine_free(e[k]);
        qf_calib_free(cal[k]);
    }
    qf_graph_free(g);
}

/* ... also of the outputs of nodes run on the host */
START_TEST(device_histograms_match_host)
{
    histograms_match(NULL);
    histograms_match("MaxPool,Sigmoid");
}
END_TEST

/* qf_calibrate, the loop `qforge calib` runs, on the device (its histograms
 * built there) against the CPU: 7 PPM images at batch 4, so the last batch is
 * padded; the minmax thresholds of every tensor agree and count 7 images. */
START_TEST(calibrate_on_device)
{
    /* its own data: the tests share one process (no fork), so the generator's
     * state here would depend on which tests ran before on this machine (on
     * an H200, session 31, it made every output of the conv negative) */
    rng = 1788;
    char dir[] = "/tmp/qf_calibrate_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    for (int k = 0; k < 7; k++) {
        char name[64];
        snprintf(name, sizeof name, "%s/%d.ppm", dir, k);
        FILE *f = fopen(name, "wb");
        ck_assert_ptr_nonnull(f);
        fprintf(f, "P6\n8 8\n255\n");
        for (int i = 0; i < 8 * 8 * 3; i++) fputc((int)frand(0.0f, 256.0f), f);
        fclose(f);
    }
    qf_graph *g = new_graph("calibrated");
    int x = input(g, "x", 4, DIMS(4, 3, 8, 8));
    int m = value(g, "pool");
    qf_node *n = op(g, "pool", QF_OP_MAX_POOL, 1, IN(x), m);
    set_ints(n, "kernel_shape", 2, DIMS(3, 3));
    set_ints(n, "pads", 4, DIMS(1, 1, 1, 1));
    int c = conv(g, "conv", unary(g, "relu_pool", QF_OP_RELU, m), 3, 3, 3, 1, P1, 1, 1, true);
    output(g, binary(g, "sum", QF_OP_ADD, unary(g, "relu_conv", QF_OP_RELU, c), unary(g, "sig", QF_OP_SIGMOID, x)));
    prepare(g, 4);
    qf_preprocess pp;
    qf_preprocess_init(&pp);
    pp.width = pp.height = 8;
    OK(qf_preprocess_option(&pp, "--mean", "0.5,0.4,0.3", &(int){0}));
    qf_calib_table *t[2];
    for (int k = 0; k < 2; k++) {
        qf_dataset *ds;
        OK(qf_dataset_open(dir, &ds));
        qf_calibrate_opts o;
        qf_calibrate_opts_init(&o);
        o.device = k ? dut : QF_DEVICE_CPU;
        o.methods = QF_CALIB_ALL;
        qf_calibrate_info info;
        OK(qf_calibrate(g, ds, &pp, &o, &t[k], NULL, &info));
        ck_assert_int_eq(info.device, o.device);
        ck_assert_int_eq(info.images, 7);
        ck_assert_int_eq(t[k]->images, 7);
        qf_dataset_free(ds);
    }
    ck_assert_int_eq(t[0]->n, t[1]->n);
    ck_assert_int_eq(t[0]->n, 7); /* x, pool, relu_pool, conv, relu_conv, sig, sum */
    for (int i = 0; i < t[0]->n; i++) {
        ck_assert_str_eq(t[0]->entries[i].name, t[1]->entries[i].name);
        double a = t[0]->entries[i].amax[QF_CALIB_MINMAX], b = t[1]->entries[i].amax[QF_CALIB_MINMAX];
        ck_assert_msg(a > 0 && fabs(a - b) <= 1e-5 * a, "%s: minmax %g on the CPU, %g on the device",
                      t[0]->entries[i].name, a, b);
    }
    for (int k = 0; k < 2; k++) qf_calib_table_free(t[k]);
    qf_graph_free(g);
    for (int k = 0; k < 7; k++) {
        char name[64];
        snprintf(name, sizeof name, "%s/%d.ppm", dir, k);
        remove(name);
    }
    remove(dir);
}
END_TEST

/* qf_calibrate's auto pass on the device (qf_auto_chooser_set_device) against
 * the CPU's, on a residual block with a classifier, two batches, the second
 * short: each candidate's score agrees within 1e-3 (FP32 in another order),
 * and where the CPU's best candidate leads by more than 1 % the device
 * chooses it too. */
START_TEST(auto_chooser_on_device)
{
    rng_use_xorshift(31);
    qf_graph *g = new_graph("auto_device");
    int x = input(g, "x", 4, DIMS(4, 8, 12, 12));
    int r1 = unary(g, "r1", QF_OP_RELU, conv(g, "c1", x, 8, 16, 3, 1, P1, 1, 1, true));
    int sum = binary(g, "sum", QF_OP_ADD, r1, conv(g, "c2", r1, 16, 16, 1, 1, P0, 1, 1, true));
    int f = unary(g, "flat", QF_OP_FLATTEN, unary(g, "gap", QF_OP_GLOBAL_AVERAGE_POOL, sum));
    int wg = weight(g, "fc.w", 2, DIMS(16, 10), -0.5f, 0.5f), bg = weight(g, "fc.b", 1, DIMS(10), -0.1f, 0.1f);
    int y = value(g, "fc");
    op(g, "fc", QF_OP_GEMM, 3, IN(f, wg, bg), y);
    output(g, y);
    prepare(g, 4);
    const int real[2] = {4, 3};
    const size_t n = (size_t)qf_value_numel(&g->values[x]);
    float *in[2];
    for (int b = 0; b < 2; b++) {
        in[b] = malloc(n * sizeof *in[b]);
        for (size_t i = 0; i < n; i++) in[b][i] = frand(-1.0f, 1.0f) * frand(0.0f, 1.0f);
        in[b][5] = 4.0f;
    }
    qf_calib *c;
    OK(qf_calib_create(g, NULL, &c));
    for (int b = 0; b < 2; b++) {
        qf_calib_set_batch_valid(c, real[b]);
        free(run(g, in[b], qf_calib_observe, c));
    }
    qf_calib_meta meta = {.images = 7, .model_sha256 = "0000000000000000000000000000000000000000000000000000000000000000"};
    qf_calib_table *t[2];
    qf_auto_chooser *a[2];
    for (int k = 0; k < 2; k++) {
        OK(qf_calib_finalize(c, 1u << QF_CALIB_AUTO, QF_CALIB_PERCENTILE_DEFAULT, &meta, &t[k]));
        OK(qf_auto_chooser_create(c, t[k], 2, &a[k]));
        if (k) OK(qf_auto_chooser_set_device(a[k], dut, 0));
        for (int b = 0; b < 2; b++) OK(qf_auto_chooser_run(a[k], in[b], real[b]));
        qf_auto_chooser_apply(a[k], t[k], NULL);
    }
    int judged = 0;
    for (int v = 0; v < g->n_values; v++) {
        double s[2][QF_CALIB_AUTO_CANDIDATES];
        if (!qfi_auto_chooser_scores(a[0], v, s[0])) continue;
        ck_assert(qfi_auto_chooser_scores(a[1], v, s[1]));
        judged++;
        int best = 0;
        for (int k = 0; k < QF_CALIB_AUTO_CANDIDATES; k++) {
            ck_assert_msg(fabs(s[0][k] - s[1][k]) <= 1e-3 * s[0][k], "%s, candidate %d: %.9g on the CPU, %.9g on the device",
                          g->values[v].name, k, s[0][k], s[1][k]);
            if (s[0][k] < s[0][best]) best = k;
        }
        bool clear = true;
        for (int k = 0; k < QF_CALIB_AUTO_CANDIDATES; k++) clear &= k == best || s[0][k] == s[0][best] || s[0][k] > 1.01 * s[0][best];
        int e = qf_calib_table_find(t[0], g->values[v].name);
        if (clear) ck_assert_float_eq(t[0]->entries[e].amax[QF_CALIB_AUTO], t[1]->entries[e].amax[QF_CALIB_AUTO]);
    }
    ck_assert_int_ge(judged, 6); // x, c1's and c2's outputs, r1, sum, gap, flat, fc (Flatten may fold)
    for (int k = 0; k < 2; k++) {
        qf_auto_chooser_free(a[k]);
        qf_calib_table_free(t[k]);
        free(in[k]);
    }
    qf_calib_free(c);
    qf_graph_free(g);
}
END_TEST

/* ---- host nodes ----------------------------------------------------------------------------- */

/* Nodes the device kernels refuse, so the CUDA engine runs them on the host
 * between device nodes: a 1-D Conv and a 1-D MaxPool of an NHWC Conv output
 * made 3-D, and a Clip whose bound is a graph input; a Conv reads the Clip's
 * (logical) output as NHWC. */
static const char *const host_refused[] = {"conv1d", "pool1d", "clip_rt"};
static qf_graph *b_host_refusals(void)
{
    qf_graph *g = new_graph("host_refusals");
    int x = input(g, "x", 4, DIMS(2, 8, 6, 7));
    int lo = input(g, "lo", 0, NULL);
    int c = conv(g, "c", x, 8, 8, 3, 1, P1, 1, 1, true);
    int flat = value(g, "flat3d");
    op(g, "flat3d", QF_OP_RESHAPE, 2, IN(c, ints(g, "shape3", 3, DIMS(2, 8, 42))), flat);
    int w1 = weight(g, "conv1d.w", 3, DIMS(6, 8, 3), -0.3f, 0.3f), b1 = weight(g, "conv1d.b", 1, DIMS(6), -0.1f, 0.1f);
    int c1 = value(g, "conv1d");
    qf_node *n = op(g, "conv1d", QF_OP_CONV, 3, IN(flat, w1, b1), c1);
    set_ints(n, "kernel_shape", 1, DIMS(3));
    set_ints(n, "pads", 2, DIMS(1, 1));
    output(g, c1);
    int p1 = value(g, "pool1d");
    n = op(g, "pool1d", QF_OP_MAX_POOL, 1, IN(flat), p1);
    set_ints(n, "kernel_shape", 1, DIMS(3));
    set_ints(n, "strides", 1, DIMS(2));
    output(g, p1);
    int hi = weight(g, "hi", 0, NULL, 0.5f, 0.5f), cl = value(g, "clip_rt");
    op(g, "clip_rt", QF_OP_CLIP, 3, IN(c, lo, hi), cl);
    output(g, conv(g, "c2", cl, 8, 4, 3, 1, P1, 1, 1, true));
    return g;
}
OP_TEST(host_refusals)

static void log_stderr(void *user, qf_log_level level, const char *msg);

/* The log lines of one engine build. */
typedef struct log_capture {
    int host_lines;
    char text[4096];
} log_capture;

static void capture_log(void *user, qf_log_level level, const char *msg)
{
    log_capture *lc = user;
    if (level < QF_LOG_WARN || !strstr(msg, "runs on the host")) return;
    lc->host_lines++;
    size_t len = strlen(lc->text);
    snprintf(lc->text + len, sizeof lc->text - len, "%s\n", msg);
}

/* QFORGE_CUDA_CONV_TACTIC=cudnn: every conv on cuDNN's first plan, the conv
 * and its fused epilogue in one cuDNN graph: FP16 (bias, residual Add, ReLU
 * and ReLU6 clip) within FP16's tolerance of the CPU engine, INT8 (int32
 * sums, then the requantize and clamp) bit for bit. Each graph's build must
 * have put convs on cuDNN, unless the machine has no cuDNN (then it says so),
 * but for INT8 convs with a fused residual or SiLU/Sigmoid, which must stay
 * on qforge's kernels (cuDNN rounds those its own way). `halves`: INT8 convs on the graph of FP16
 * operands only (QFORGE_CUDNN_INT8_HALVES=only), which grouped ones must get. */
static void check_cudnn_convs(qf_precision prec, const char *label, bool halves)
{
    const build_fn builds[] = {b_conv3x3,         b_conv_rgb_s2, b_conv_1x1,        b_depthwise_vectors,
                               b_conv_grouped_vectors, b_residual, b_residual_wide, b_conv_relu_pool,
                               b_conv_smooth};
    setenv("QFORGE_CUDA_CONV_TACTIC", "cudnn", 1);
    if (halves) setenv("QFORGE_CUDNN_INT8_HALVES", "only", 1);
    for (size_t b = 0; b < QF_ARRAY_LEN(builds); b++) {
        qf_quant_opts o;
        qf_quant_opts_init(&o);
        o.precision = prec;
        o.method = QF_CALIB_MINMAX;
        qf_graph *g = build_quantized(builds[b], 0, &o);
        dnn_capture lc = {0};
        qf_log_set(capture_dnn, &lc, QF_LOG_DEBUG);
        compare(g, prec, 2, label, prec == QF_PREC_INT8);
        qf_log_set(getenv("QFORGE_DEBUG") ? log_stderr : NULL, NULL, QF_LOG_DEBUG);
        if (dut != QF_DEVICE_CUDA) printf("  %s: the CPU engine under test: no cuDNN to check\n", g->source);
        else if (lc.missing[0]) printf("  %s: %s\n", g->source, lc.missing);
        /* an RGB conv (3 channels) may have no NHWC engine in cuDNN, nor may
         * INT8 grouped ones in int8; those are only reported, as are the
         * plain convs of the FP16-operand graph (K over its exact limit) */
        else {
            const bool grouped = builds[b] == b_depthwise_vectors || builds[b] == b_conv_grouped_vectors;
            if (prec == QF_PREC_INT8 && builds[b] == b_conv_smooth)
                ck_assert_msg(lc.pinned == 0, "%s: %d INT8 SiLU/Sigmoid conv(s) ran on cuDNN", g->source, lc.pinned);
            else
                ck_assert_msg(lc.pinned > 0 || builds[b] == b_conv_rgb_s2 ||
                                  (prec == QF_PREC_INT8 && (halves ? !grouped : grouped)),
                              "%s: no conv ran on cuDNN", g->source);
        }
        printf("  %-22s %d %s conv layer build(s) on cuDNN\n", g->source, lc.pinned, label);
        qf_graph_free(g);
    }
    unsetenv("QFORGE_CUDA_CONV_TACTIC");
    unsetenv("QFORGE_CUDNN_INT8_HALVES");
}

START_TEST(cudnn_conv_fp16) { check_cudnn_convs(QF_PREC_FP16, "fp16 (cuDNN)", false); }
END_TEST

START_TEST(cudnn_conv_int8) { check_cudnn_convs(QF_PREC_INT8, "int8 (cuDNN)", false); }
END_TEST

START_TEST(cudnn_conv_int8_halves) { check_cudnn_convs(QF_PREC_INT8, "int8 (cuDNN, FP16 operands)", true); }
END_TEST

/* Each refused node is on the host, said once at build naming op and node;
 * every other node is on the device; a profile times the host nodes too. */
START_TEST(host_nodes_are_named)
{
    qf_graph *g = b_host_refusals();
    prepare(g, 2);
    log_capture lc = {0};
    qf_log_set(capture_log, &lc, QF_LOG_DEBUG);
    qf_engine_opts o = {.device = QF_DEVICE_CUDA};
    qf_engine *e = NULL;
    qf_status st = qf_engine_create(g, &o, &e);
    qf_log_set(getenv("QFORGE_DEBUG") ? log_stderr : NULL, NULL, QF_LOG_DEBUG);
    ck_assert_msg(st == QF_OK, "%s", qf_error_message());
    ck_assert_int_eq(lc.host_lines, (int)QF_ARRAY_LEN(host_refused));
    for (int i = 0; i < g->n_nodes; i++) {
        const qf_node *n = &g->nodes[i];
        bool refused = false;
        for (size_t k = 0; k < QF_ARRAY_LEN(host_refused); k++) refused |= !strcmp(n->name, host_refused[k]);
        ck_assert_msg(qf_engine_node_device(e, i) == (refused ? QF_DEVICE_CPU : QF_DEVICE_CUDA), "node %s", n->name);
        if (!refused) continue;
        char want[128];
        snprintf(want, sizeof want, "%s runs on the host (1 node, first %s)", qf_op_name(n->op), n->name);
        ck_assert_msg(strstr(lc.text, want), "no line \"%s\" in:\n%s", want, lc.text);
    }
    for (int i = 0; i < g->n_inputs; i++) {
        float *x = qf_engine_input(e, i);
        for (int64_t k = 0; k < qf_value_numel(&g->values[g->inputs[i]]); k++) x[k] = frand(-1.0f, 1.0f);
    }
    OK(qf_engine_run(e));
    double ms[64] = {0};
    ck_assert_int_le(g->n_nodes, 64);
    OK(qf_engine_profile(e, ms));
    for (size_t k = 0; k < QF_ARRAY_LEN(host_refused); k++)
        ck_assert_msg(ms[node_index(g, host_refused[k])] > 0.0, "%s: %g ms", host_refused[k],
                      ms[node_index(g, host_refused[k])]);
    double bench[3];
    OK(qf_engine_bench(e, 3, bench));
    qf_engine_free(e);
    /* an absent device is still an error */
    o.device_index = 63;
    ck_assert_int_eq(qf_engine_create(g, &o, &e), QF_ERR_DEVICE);
    ck_assert_msg(strstr(qf_error_message(), "cuda:63"), "%s", qf_error_message());
    qf_graph_free(g);
}
END_TEST

/* QFORGE_CUDA_HOST_OPS=all: every node on the host, the CPU's kernels on
 * the same inputs, so every precision agrees bit for bit. */
static void all_on_host(build_fn build)
{
    setenv("QFORGE_CUDA_HOST_OPS", "all", 1);
    check_graph(build, true);
    unsetenv("QFORGE_CUDA_HOST_OPS");
}
START_TEST(host_all_exact)
{
    all_on_host(b_residual);
    all_on_host(b_concat_copy);
    all_on_host(b_pad);
    all_on_host(b_se_block);
}
END_TEST

/* Some ops on the host between device nodes: NHWC values downloaded as
 * logical, logical results uploaded for NHWC consumers, fusions that would
 * have absorbed a host node left out. */
START_TEST(host_mixed)
{
    setenv("QFORGE_CUDA_HOST_OPS", "Relu,Add,Concat,GlobalAveragePool,Pad,Sigmoid,QuantizeLinear", 1);
    check_graph(b_residual, false);
    check_graph(b_concat_copy, false);
    check_graph(b_pad, false);
    check_graph(b_se_block, false);
    unsetenv("QFORGE_CUDA_HOST_OPS");
}
END_TEST

/* A Gather of run-time indices runs on the host, where the CPU kernel checks
 * them: an index out of range fails that run, naming the node; the next
 * run, with good indices, succeeds. Graph replays and a profile include it. */
START_TEST(host_errors_reach_the_caller)
{
    qf_graph *g = new_graph("gather_rt");
    int x = input(g, "x", 3, DIMS(2, 5, 3));
    /* every graph input's dim 0 is the batch: the indices are 2 at batch 2 */
    int64_t d[1] = {2};
    int idx = qf_graph_add_value(g, "idx", QF_I64, 1, d);
    g->values[idx].flags |= QF_VALUE_INPUT;
    list_add(&g->inputs, &g->n_inputs, idx);
    output(g, gather(g, "gather_rt", x, 1, idx));
    prepare(g, 2);
    qf_engine *e[2];
    for (int k = 0; k < 2; k++) {
        qf_engine_opts o = {.device = k ? QF_DEVICE_CUDA : QF_DEVICE_CPU};
        OK(qf_engine_create(g, &o, &e[k]));
    }
    ck_assert_int_eq(qf_engine_node_device(e[1], 0), QF_DEVICE_CPU);
    const qf_value *y = &g->values[g->outputs[0]];
    ck_assert_int_eq(y->ndim, 3);
    ck_assert(y->dims[0] == 2 && y->dims[1] == 2 && y->dims[2] == 3);
    const int64_t good[2] = {4, -5}, bad[2] = {1, 5};
    for (int run = 0; run < 3; run++) {
        for (int k = 0; k < 2; k++) {
            float *xv = qf_engine_input(e[k], 0);
            for (int i = 0; i < 30; i++) xv[i] = (float)(i * 7 % 11) - 3.0f;
            memcpy(qf_engine_input(e[k], 1), run == 1 ? bad : good, sizeof good);
        }
        if (run == 1) {
            ck_assert_int_eq(qf_engine_run(e[1]), QF_ERR_INVALID);
            ck_assert_msg(strstr(qf_error_message(), "gather_rt") && strstr(qf_error_message(), "out of range"), "%s",
                          qf_error_message());
            continue;
        }
        OK(qf_engine_run(e[0]));
        OK(qf_engine_run(e[1]));
        const float *cpu = qf_engine_output(e[0], 0), *gpu = qf_engine_output(e[1], 0);
        for (int i = 0; i < 2 * 2 * 3; i++)
            ck_assert_msg(!memcmp(&cpu[i], &gpu[i], sizeof *cpu), "run %d: output[%d] %g on the CPU, %g on CUDA", run, i,
                          (double)cpu[i], (double)gpu[i]);
    }
    double ms[1] = {0}, bench[2];
    OK(qf_engine_profile(e[1], ms));
    ck_assert(ms[0] > 0.0);
    OK(qf_engine_bench(e[1], 2, bench));
    for (int k = 0; k < 2; k++) qf_engine_free(e[k]);
    qf_graph_free(g);
}
END_TEST

/* ---- real models ------------------------------------------------------------------------------- */

static char data_dir[1024];
static char src_dir[1024]; /* the source tree: $top_srcdir where the tests run away from the build (bench/device) */

static void path(char *buf, size_t n, const char *rel) { snprintf(buf, n, "%s/%s", data_dir, rel); }

static bool exists(const char *rel)
{
    char p[1100];
    path(p, sizeof p, rel);
    FILE *f = fopen(p, "rb");
    if (f) fclose(f);
    return f != NULL;
}

static int argmax(const float *y, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (y[i] > y[b]) b = i;
    return b;
}

/* One model: calibration on the GPU must match the CPU's; then FP32, FP16
 * and INT8 graphs on both engines over the same images. */
static void model_agreement(const char *name, const char *model_rel, const char *calib_rel, const char *test_rel,
                            const char *synsets_rel, const char *preset, int batch, int64_t n_calib, int64_t n_test)
{
    char model[1100], calib_dir[1100], test_dir[1100];
    path(model, sizeof model, model_rel);
    path(calib_dir, sizeof calib_dir, calib_rel);
    path(test_dir, sizeof test_dir, test_rel);
    qf_preprocess pp;
    qf_preprocess_init(&pp);
    OK(qf_preprocess_preset(&pp, preset));
    if (!strcmp(preset, "cifar10")) pp.width = pp.height = 32;
    qf_load_opts lo = {.batch = batch};
    qf_graph *g;
    OK(qf_model_load(model, &lo, &g));
    qf_calib_table *t = calibrate_folder(g, calib_dir, n_calib, &pp, QF_DEVICE_CPU, 4);
    qf_calib_table *tg = calibrate_folder(g, calib_dir, n_calib, &pp, dut, 4);
    ck_assert_int_eq(t->n, tg->n);
    double worst = 0.0;
    for (int i = 0; i < t->n; i++) {
        ck_assert_str_eq(t->entries[i].name, tg->entries[i].name);
        double a = t->entries[i].amax[QF_CALIB_MINMAX], b = tg->entries[i].amax[QF_CALIB_MINMAX];
        double rel = fabs(a - b) / fmax(fabs(a), 1e-12);
        if (rel > worst) worst = rel;
    }
    printf("%s: calibration on the GPU: %d tensors, minmax thresholds within %.2g of the CPU's\n", name, t->n, worst);
    ck_assert_msg(worst < 1e-3, "GPU calibration differs by %g", worst);
    qf_calib_table_free(tg);
    qf_graph_free(g);

    qf_dataset *ds;
    OK(qf_dataset_open(test_dir, &ds));
    qf_dataset_subset(ds, n_test);
    if (synsets_rel) {
        char syn[1100];
        path(syn, sizeof syn, synsets_rel);
        OK(qf_dataset_label_synsets(ds, syn));
    } else {
        OK(qf_dataset_label_folders(ds, NULL));
    }
    char failed[256] = "";
    /* the last pass: INT8 with per-tensor weight scales (conv.cu's cuBLASLt
     * int8 epilogue, residual C term included) */
    for (int v = 0; v <= QF_PRECISION_COUNT; v++) {
        const bool per_tensor = v == QF_PRECISION_COUNT;
        const int p = per_tensor ? QF_PREC_INT8 : v;
        OK(qf_model_load(model, &lo, &g));
        if (p != QF_PREC_FP32) {
            qf_quant_opts o;
            qf_quant_opts_init(&o);
            o.precision = (qf_precision)p;
            o.per_tensor_weights = per_tensor;
            OK(qf_quantize(g, t, &o, NULL));
        }
        qf_engine *cpu, *gpu;
        qf_engine_opts co = {.device = QF_DEVICE_CPU}, go = {.device = dut};
        OK(qf_engine_create(g, &co, &cpu));
        OK(qf_engine_create(g, &go, &gpu));
        qf_loader_options lopt = {.batch = batch, .threads = 4};
        qf_loader *l;
        OK(qf_loader_create(ds, &pp, &lopt, &l));
        const int nc = (int)g->values[g->outputs[0]].dims[1];
        const size_t in_bytes = qf_value_bytes(&g->values[g->inputs[0]]);
        int *labels = malloc((size_t)batch * sizeof *labels), cnt, images = 0, agree = 0, ties = 0, top1[2] = {0, 0};
        double max_diff = 0.0;
        for (;;) {
            OK(qf_loader_next(l, qf_engine_input(cpu, 0), labels, &cnt));
            if (!cnt) break;
            memcpy(qf_engine_input(gpu, 0), qf_engine_input(cpu, 0), in_bytes);
            OK(qf_engine_run(cpu));
            OK(qf_engine_run(gpu));
            const float *yc = qf_engine_output(cpu, 0), *yg = qf_engine_output(gpu, 0);
            for (int i = 0; i < cnt; i++) {
                int a = argmax(yc + i * nc, nc), b = argmax(yg + i * nc, nc);
                agree += a == b;
                /* FP16: the CPU's scores of both classes within two half-precision steps
                 * of each other are a tie at that precision, which either engine may break */
                if (a != b && p == QF_PREC_FP16) {
                    float top = fabsf(yc[i * nc + a]);
                    double ulp = top > 0.0f ? ldexp(1.0, ilogbf(top) - 10) : ldexp(1.0, -24);
                    ties += fabs((double)yc[i * nc + a] - yc[i * nc + b]) <= 2.0 * ulp;
                }
                top1[0] += a == labels[i];
                top1[1] += b == labels[i];
                for (int k = 0; k < nc; k++) max_diff = fmax(max_diff, fabs(yc[i * nc + k] - yg[i * nc + k]));
            }
            images += cnt;
        }
        printf("%s %s on %d images: top-1 cpu %.4f gpu %.4f, agreement %.4f (%d of the %d differences are FP16 ties), "
               "max |logit diff| %.3g\n",
               name, prec_name[v], images, (double)top1[0] / images, (double)top1[1] / images, (double)agree / images,
               ties, images - agree, max_diff);
        /* every precision runs before a failure is reported. The per-tensor
         * variant rides in cuBLASLt's own INT8 epilogue, which rounds
         * alpha*acc + beta*C + bias in its own order: each layer may differ from
         * the CPU rule by one unit (checked per op above), and over a whole
         * network that moves a few top-1 decisions (measured on the H200:
         * ResNet-20 498/500, MobileNetV2 197/200), so that variant is held to
         * 0.98. The per-channel INT8 default is bit-exact on qforge's kernels,
         * but a layer the tuner puts on cuDNN rounds a boundary its own way
         * too (conv_cudnn.cu): held to 0.99, as issue 14 asks of such tactics. */
        double bar = v == 3 ? 0.98 : v == 2 ? 0.99 : 0.999, raw_bar = v == 3 ? 0.98 : 0.99;
        if (images != n_test || agree + ties < bar * images || agree < raw_bar * images)
            if (!failed[0])
                snprintf(failed, sizeof failed, "%s %s: GPU and CPU agree on %d of %d images (%d ties)", name,
                         prec_name[v], agree, images, ties);
        free(labels);
        qf_loader_free(l);
        qf_engine_free(cpu);
        qf_engine_free(gpu);
        qf_graph_free(g);
    }
    qf_dataset_free(ds);
    qf_calib_table_free(t);
    ck_assert_msg(!failed[0], "%s", failed);
}

/* Models quantized elsewhere (lib/onnx_qop.c, quant/qdq_import.c): the Q/DQ
 * seed of tests/bad (uint8 activations with zero points) and, where
 * ../shared/data has it, the zoo's QOperator MobileNetV2 give the CPU
 * engine's outputs bit for bit. Nodes touching a nonzero zero point run on
 * the device like the rest, wherever the engine says it has a kernel for
 * them (it refuses only INT8 products of activations with zero points). */
static void quantized_elsewhere(const char *path, int batch)
{
    qf_load_opts lo = {.batch = batch};
    qf_graph *g;
    OK(qf_model_load(path, &lo, &g));
    ck_assert(qf_graph_has_qdq(g));
    OK(qf_quantize(g, NULL, NULL, NULL));
    compare(g, QF_PREC_INT8, 2, "int8", true);
    qf_engine *e;
    qf_engine_opts o = {.device = dut};
    OK(qf_engine_create(g, &o, &e));
    int host = 0, zp = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const qf_node *n = &g->nodes[i];
        bool any = false;
        for (int k = 0; k < n->n_in + n->n_out; k++) {
            int v = k < n->n_in ? n->in[k] : n->out[k - n->n_in];
            any |= v >= 0 && g->values[v].zero_point != 0;
        }
        zp += any;
        host += qf_engine_node_device(e, i) == QF_DEVICE_CPU;
        if (any && qf_engine_supports(dut, g, n))
            ck_assert_msg(qf_engine_node_device(e, i) == dut, "%s: node %s runs on the host", path, n->name);
    }
    printf("  %s: %d nodes, %d with a zero point, %d on the host\n", path, g->n_nodes, zp, host);
    qf_engine_free(e);
    qf_graph_free(g);
}

START_TEST(quantized_elsewhere_exact)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/tests/bad/qdq_seed.onnx", src_dir);
    quantized_elsewhere(path, 2);
    snprintf(path, sizeof path, "%s/imagenet/mobilenetv2-12-int8.onnx", data_dir);
    if (exists("imagenet/mobilenetv2-12-int8.onnx")) quantized_elsewhere(path, 2);
}
END_TEST

START_TEST(resnet20_cifar10)
{
    model_agreement("ResNet-20", "cifar10/resnet20.onnx", "cifar10/calib", "cifar10/test", NULL, "cifar10", 50, 200, 500);
}
END_TEST

START_TEST(mobilenetv2_imagenet)
{
    model_agreement("MobileNetV2", "imagenet/mobilenetv2-fp32.onnx", "imagenet/images/calib", "imagenet/images", "imagenet/synsets.txt",
                    "imagenet", 25, 100, 200);
}
END_TEST

/* The switches tests set, as the run began (bench/device/run.sh pins some
 * from outside): each test starts from them, since a failed assertion
 * leaves a test without its own unsetenv (no fork: the CUDA runtime). */
static const char *const test_switches[] = {"QFORGE_CUDA_CHUNK_ROWS",     "QFORGE_CUDA_CONV_TACTIC", "QFORGE_CUDA_HOST_OPS",
                                            "QFORGE_CUDA_IGEMM_BLOCKS",   "QFORGE_CUDA_IGEMM_VARIANT",
                                            "QFORGE_CUDA_NOFUSE",         "QFORGE_CUDA_NOLT",       "QFORGE_CUDNN_INT8_HALVES",
                                            "QFORGE_CUDA_TMA_PINGPONG"};
static char *initial_switches[QF_ARRAY_LEN(test_switches)];

static void save_switches(void)
{
    for (size_t i = 0; i < QF_ARRAY_LEN(test_switches); i++) {
        const char *v = getenv(test_switches[i]);
        initial_switches[i] = v ? strdup(v) : NULL;
    }
}

static void restore_switches(void)
{
    for (size_t i = 0; i < QF_ARRAY_LEN(test_switches); i++) {
        if (initial_switches[i]) setenv(test_switches[i], initial_switches[i], 1);
        else unsetenv(test_switches[i]);
    }
}

static void log_stderr(void *user, qf_log_level level, const char *msg)
{
    (void)user;
    fprintf(stderr, "qforge[%d]: %s\n", (int)level, msg);
}

int main(void)
{
    save_switches();
    if (getenv("QFORGE_DEBUG")) qf_log_set(log_stderr, NULL, QF_LOG_DEBUG);
    rng_use_xorshift(0x243f6a8885a308d3ull);
    int count = 0;
    if (getenv("QFORGE_TEST_CUDA_ON_CPU")) dut = QF_DEVICE_CPU;
    else if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    const char *data = getenv("QFORGE_DATA");
    const char *top = getenv("top_srcdir");
    if (data) snprintf(data_dir, sizeof data_dir, "%s", data);
    else snprintf(data_dir, sizeof data_dir, "%s/../shared/data", top ? top : QF_SRCDIR);
    snprintf(src_dir, sizeof src_dir, "%s", top ? top : QF_SRCDIR);
    /* run from a copy of the checkout (the device machine) without top_srcdir: the working directory */
    if (!top) {
        char probe[1100];
        snprintf(probe, sizeof probe, "%s/tests/bad/qdq_seed.onnx", src_dir);
        FILE *f = fopen(probe, "rb");
        if (!f && (f = fopen("tests/bad/qdq_seed.onnx", "rb")) != NULL) snprintf(src_dir, sizeof src_dir, ".");
        if (f) fclose(f);
    }

    Suite *s = suite_create("cuda");
    TCase *ops = tcase_create("ops");
    tcase_add_checked_fixture(ops, restore_switches, NULL);
    tcase_set_timeout(ops, 600);
    tcase_add_test(ops, t_conv3x3);
    tcase_add_test(ops, cudnn_conv_fp16);
    tcase_add_test(ops, cudnn_conv_int8);
    tcase_add_test(ops, cudnn_conv_int8_halves);
    tcase_add_test(ops, smooth_epilogues_exact);
    tcase_add_test(ops, smooth_levels_exact);
    tcase_add_test(ops, half_outputs_exact);
    tcase_add_test(ops, vector_convs_exact);
    tcase_add_test(ops, t_conv_tiles);
    tcase_add_test(ops, t_conv_rgb_s2);
    tcase_add_test(ops, t_rgb_stems);
    tcase_add_test(ops, t_conv_1x1);
    tcase_add_test(ops, t_conv_depthwise);
    tcase_add_test(ops, t_depthwise_vectors);
    tcase_add_test(ops, t_depthwise_7x7);
    tcase_add_test(ops, depthwise_7x7_exact);
    tcase_add_test(ops, t_conv_grouped_dilated);
    tcase_add_test(ops, t_conv_grouped_vectors);
    tcase_add_test(ops, t_conv_relu_pool);
    tcase_add_test(ops, t_conv_smooth);
    tcase_add_test(ops, t_residual);
    tcase_add_test(ops, t_residual_wide);
    tcase_add_test(ops, t_pools);
    tcase_add_test(ops, t_gemm_bias);
    tcase_add_test(ops, t_gemm_general);
    tcase_add_test(ops, t_matmul);
    tcase_add_test(ops, t_binary);
    tcase_add_test(ops, t_unary);
    tcase_add_test(ops, t_batchnorm_softmax);
    tcase_add_test(ops, t_concat_copy);
    tcase_add_test(ops, t_dense_block);
    tcase_add_test(ops, t_pad);
    tcase_add_test(ops, t_resize);
    tcase_add_test(ops, t_c2f);
    tcase_add_test(ops, c2f_int8_exact);
    tcase_add_test(ops, t_reduce_mean);
    tcase_add_test(ops, t_gather);
    tcase_add_test(ops, t_conv_transpose);
    tcase_add_test(ops, t_se_block);
    tcase_add_test(ops, t_se_block_wide);
    tcase_add_test(ops, t_se_block_s2);
    tcase_add_test(ops, t_se_block_k5);
    tcase_add_test(ops, t_se_block_k5_s2);
    tcase_add_test(ops, t_se_block_odd);
    tcase_add_test(ops, se_gates_fused);
    tcase_add_test(ops, layer_norm_qdq_fused);
    tcase_add_test(ops, t_shuffle_units);
    tcase_add_test(ops, t_se_block_relu);
    tcase_add_test(ops, t_mbv3_blocks);
    tcase_add_test(ops, t_rgb_stem_batch50);
    tcase_add_test(ops, channel_shuffles_fused);
    tcase_add_test(ops, t_mlp);
    tcase_add_test(ops, t_convnext_block);
    tcase_add_test(ops, t_moves_exact);
    tcase_add_test(ops, observer_matches_cpu);
    tcase_add_test(ops, device_histograms_match_host);
    tcase_add_test(ops, calibrate_on_device);
    tcase_add_test(ops, auto_chooser_on_device);
    tcase_add_test(ops, t_host_refusals);
    tcase_add_test(ops, host_all_exact);
    tcase_add_test(ops, host_mixed);
    tcase_add_test(ops, quantized_elsewhere_exact);
    if (dut == QF_DEVICE_CUDA) {
        tcase_add_test(ops, host_nodes_are_named);
        tcase_add_test(ops, host_errors_reach_the_caller);
    }
    suite_add_tcase(s, ops);
    /* what a transformer's layers run on: the TMA GEMM's variants, the fast
     * smooth levels (GELU's among them), the fused attention
     * (CK_RUN_CASE=transformer runs them alone) */
    TCase *tf = tcase_create("transformer");
    tcase_add_checked_fixture(tf, restore_switches, NULL);
    tcase_set_timeout(tf, 600);
    tcase_add_test(tf, tma_linears_exact);
    tcase_add_test(tf, tma_smooth_convs_exact);
    tcase_add_test(tf, smooth_levels_sweep);
    tcase_add_test(tf, attention_fused);
    tcase_add_test(tf, t_int8_attention);
    suite_add_tcase(s, tf);
    TCase *asym = tcase_create("asymmetric"); /* CK_RUN_CASE=asymmetric runs it alone */
    tcase_add_checked_fixture(asym, restore_switches, NULL);
    tcase_set_timeout(asym, 600);
    tcase_add_test(asym, asymmetric_exact);
    suite_add_tcase(s, asym);
    TCase *models = tcase_create("models");
    tcase_add_checked_fixture(models, restore_switches, NULL);
    tcase_set_timeout(models, 900);
    if (exists("cifar10/resnet20.onnx")) tcase_add_test(models, resnet20_cifar10);
    else printf("no %s/cifar10/resnet20.onnx: ResNet-20 skipped\n", data_dir);
    if (exists("imagenet/mobilenetv2-fp32.onnx")) tcase_add_test(models, mobilenetv2_imagenet);
    else printf("no %s/imagenet/mobilenetv2-fp32.onnx: MobileNetV2 skipped\n", data_dir);
    suite_add_tcase(s, models);
    SRunner *sr = srunner_create(s);
    /* the CUDA runtime is initialized above; a forked child could not use it */
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_VERBOSE);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
