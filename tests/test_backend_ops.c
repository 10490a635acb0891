/* Every op of include/qforge/ops.def on every engine present, at every
 * precision the op can have and the engine has a kernel for: a one-node graph
 * per case, run on random inputs and compared with the CPU engine's FP32
 * result on the same (widened) inputs by normalized MSE, and at INT8 with the
 * CPU engine's INT8 result (bit for bit where the op is exact: compute and
 * pass-through ops, conversions). An op without a case fails. Prints the
 * support matrix (op x engine x precision); `qforge info --ops` prints what
 * the engines claim in the same layout. The CUDA column runs where a GPU is
 * usable; QFORGE_TEST_CUDA_ON_CPU=1 fills it with CPU runs of what the CUDA
 * engine claims and accepts (its graph-only checks run here too), to check
 * this harness on a machine without a GPU. Where the CUDA engine has no
 * kernel for a case it still runs it, on the host (runtime/cuda/host.cu),
 * and must give the CPU engine's results ("host" in the matrix). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "internal.h"
#include "testutil.h"
#include "../quant/quant_internal.h"
#include "ops/nn.h"

#define DIMS(...) ((const int64_t[]){__VA_ARGS__})
#define IN(...) ((const int[]){__VA_ARGS__})

/* ---- the cases: an FP32 graph of one node per op --------------------------------------
 * Graph inputs share dim 0 (the batch) and are drawn from [lo, hi]; constants
 * are the node's weights and parameters. Conversions build their node at each
 * precision themselves (their form changes with it). */

typedef struct op_case {
    qf_op op;
    const char *label;
    void (*build)(qf_graph *g, qf_op op, qf_precision p);
    float lo, hi;
} op_case;

static int ints_const(qf_graph *g, const char *name, int n, const int64_t *vals)
{
    int v = qf_graph_add_value(g, name, QF_I64, 1, DIMS(n));
    int64_t *d = malloc((size_t)(n ? n : 1) * sizeof *d);
    memcpy(d, vals, (size_t)n * sizeof *d);
    g->values[v].data = d;
    g->values[v].flags |= QF_VALUE_CONST;
    return v;
}

static int float_const(qf_graph *g, const char *name, float f) { return weight(g, name, 0, NULL, f, f); }

/* One node reading `in` and writing a new output that is the graph's output. */
static qf_node *node(qf_graph *g, qf_op o, int n_in, const int *in)
{
    int y = value(g, "y");
    qf_node *n = op(g, "node", o, n_in, in, y);
    output(g, y);
    return n;
}

static void b_conv(qf_graph *g, qf_op o, qf_precision p)
{
    int x = input(g, "x", 4, DIMS(2, 4, 7, 7));
    int w = weight(g, "w", 4, DIMS(8, 4, 3, 3), -0.3f, 0.3f), b = weight(g, "b", 1, DIMS(8), -0.2f, 0.2f);
    qf_node *n = node(g, o, 3, IN(x, w, b));
    set_ints(n, "kernel_shape", 2, DIMS(3, 3));
    set_ints(n, "pads", 4, DIMS(1, 1, 1, 1));
    set_ints(n, "strides", 2, DIMS(2, 1));
}

/* ViT's patch embedding: an RGB input, 16x16 kernel, stride 16 (at INT8 the
 * CUDA engine quantizes the input on its own: the implicit GEMM, which folds
 * an RGB input's quantization in, takes fewer taps) */
static void b_conv_patch(qf_graph *g, qf_op o, qf_precision p)
{
    int x = input(g, "x", 4, DIMS(2, 3, 32, 32));
    int w = weight(g, "w", 4, DIMS(16, 3, 16, 16), -0.05f, 0.05f), b = weight(g, "b", 1, DIMS(16), -0.2f, 0.2f);
    qf_node *n = node(g, o, 3, IN(x, w, b));
    set_ints(n, "kernel_shape", 2, DIMS(16, 16));
    set_ints(n, "strides", 2, DIMS(16, 16));
}

static void b_conv_transpose(qf_graph *g, qf_op o, qf_precision p)
{
    int x = input(g, "x", 4, DIMS(1, 3, 4, 4));
    int w = weight(g, "w", 4, DIMS(3, 2, 3, 3), -0.3f, 0.3f);
    qf_node *n = node(g, o, 2, IN(x, w));
    set_ints(n, "kernel_shape", 2, DIMS(3, 3));
    set_ints(n, "strides", 2, DIMS(2, 2));
}

static void b_gemm(qf_graph *g, qf_op o, qf_precision p)
{
    int x = input(g, "x", 2, DIMS(3, 16));
    int w = weight(g, "w", 2, DIMS(8, 16), -0.3f, 0.3f), b = weight(g, "b", 1, DIMS(8), -0.2f, 0.2f);
    set_int(node(g, o, 3, IN(x, w, b)), "transB", 1);
}

static void b_matmul(qf_graph *g, qf_op o, qf_precision p)
{
    int x = input(g, "x", 3, DIMS(2, 3, 16));
    node(g, o, 2, IN(x, weight(g, "w", 2, DIMS(16, 8), -0.3f, 0.3f)));
}

/* attention's activation x activation products: QK^T as (2,3,4,8) x (2,3,8,4), and a
 * batch broadcast (2,3,4,8) x (3,8,5) */
static void b_matmul_4d(qf_graph *g, qf_op o, qf_precision p)
{
    node(g, o, 2, IN(input(g, "q", 4, DIMS(2, 3, 4, 8)), input(g, "k", 4, DIMS(2, 3, 8, 4))));
}
static void b_matmul_broadcast(qf_graph *g, qf_op o, qf_precision p)
{
    node(g, o, 2, IN(input(g, "a", 4, DIMS(2, 3, 4, 8)), weight(g, "b", 3, DIMS(3, 8, 5), -0.5f, 0.5f)));
}
/* multi-query attention's AV: one head of V broadcast over three, (2,3,4,8) x (2,1,8,5) */
static void b_matmul_heads_broadcast(qf_graph *g, qf_op o, qf_precision p)
{
    node(g, o, 2, IN(input(g, "p", 4, DIMS(2, 3, 4, 8)), input(g, "v", 4, DIMS(2, 1, 8, 5))));
}
/* A broadcast over the outer batch dim: (1,3,4,8) x (2,3,8,4) (the CUDA engine
 * runs two strided batches of three, the second reading A's first matrices again) */
static void b_matmul_broadcast_a(qf_graph *g, qf_op o, qf_precision p)
{
    int b = input(g, "b", 4, DIMS(2, 3, 8, 4)); /* the first input sets the graph's batch */
    node(g, o, 2, IN(weight(g, "a", 4, DIMS(1, 3, 4, 8), -0.5f, 0.5f), b));
}

/* x (2,3,4,5) op a per-channel constant */
static void b_binary(qf_graph *g, qf_op o, qf_precision p)
{
    int x = input(g, "x", 4, DIMS(2, 3, 4, 5));
    node(g, o, 2, IN(x, weight(g, "c", 3, DIMS(3, 1, 1), 0.5f, 1.5f)));
}

/* Pow by the exponents ConvNeXt and Swin exports use (2 and 0.5) and by a broadcast array */
static void b_pow2(qf_graph *g, qf_op o, qf_precision p)
{
    node(g, o, 2, IN(input(g, "x", 4, DIMS(2, 3, 4, 5)), float_const(g, "two", 2.0f)));
}
static void b_pow_half(qf_graph *g, qf_op o, qf_precision p)
{
    node(g, o, 2, IN(input(g, "x", 3, DIMS(2, 6, 5)), float_const(g, "half", 0.5f)));
}
static void b_pow_array(qf_graph *g, qf_op o, qf_precision p)
{
    node(g, o, 2, IN(input(g, "x", 3, DIMS(2, 4, 5)), weight(g, "e", 1, DIMS(5), -1.5f, 2.5f)));
}


static void b_unary(qf_graph *g, qf_op o, qf_precision p)
{
    qf_node *n = node(g, o, 1, IN(input(g, "x", 4, DIMS(2, 3, 4, 5))));
    if (o == QF_OP_LEAKY_RELU) set_float(n, "alpha", 0.1f);
}

static void b_clip(qf_graph *g, qf_op o, qf_precision p)
{
    node(g, o, 3, IN(input(g, "x", 4, DIMS(2, 3, 4, 5)), float_const(g, "lo", -0.5f), float_const(g, "hi", 0.75f)));
}

static void b_softmax(qf_graph *g, qf_op o, qf_precision p) { node(g, o, 1, IN(input(g, "x", 3, DIMS(2, 3, 10)))); }
/* rows of ViT-B/16's attention scores (197 tokens): the CUDA engine's warp-per-row kernel */
static void b_softmax_rows(qf_graph *g, qf_op o, qf_precision p) { node(g, o, 1, IN(input(g, "x", 3, DIMS(2, 12, 197)))); }

/* Swin's 7x7 windows (rows of 49) and rows longer than the CUDA engine keeps in registers */
static void b_softmax_49(qf_graph *g, qf_op o, qf_precision p) { node(g, o, 1, IN(input(g, "x", 3, DIMS(2, 6, 49)))); }
static void b_softmax_long(qf_graph *g, qf_op o, qf_precision p) { node(g, o, 1, IN(input(g, "x", 3, DIMS(2, 2, 600)))); }

static void b_pool(qf_graph *g, qf_op o, qf_precision p)
{
    qf_node *n = node(g, o, 1, IN(input(g, "x", 4, DIMS(2, 3, 9, 9))));
    set_ints(n, "kernel_shape", 2, DIMS(3, 3));
    set_ints(n, "strides", 2, DIMS(2, 2));
    set_ints(n, "pads", 4, DIMS(1, 1, 1, 1));
}

static void b_global_pool(qf_graph *g, qf_op o, qf_precision p) { node(g, o, 1, IN(input(g, "x", 4, DIMS(2, 3, 5, 6)))); }

static void b_batchnorm(qf_graph *g, qf_op o, qf_precision p)
{
    int x = input(g, "x", 4, DIMS(2, 3, 4, 4));
    int s = weight(g, "s", 1, DIMS(3), 0.5f, 1.5f), b = weight(g, "b", 1, DIMS(3), -0.5f, 0.5f);
    int m = weight(g, "m", 1, DIMS(3), -0.2f, 0.2f), v = weight(g, "v", 1, DIMS(3), 0.5f, 2.0f);
    node(g, o, 5, IN(x, s, b, m, v));
}

static void b_concat(qf_graph *g, qf_op o, qf_precision p)
{
    int a = input(g, "a", 4, DIMS(2, 2, 3, 3)), b = input(g, "b", 4, DIMS(2, 3, 3, 3));
    set_int(node(g, o, 2, IN(a, b)), "axis", 1);
}

static void b_reshape(qf_graph *g, qf_op o, qf_precision p)
{
    node(g, o, 2, IN(input(g, "x", 3, DIMS(2, 3, 4)), ints_const(g, "shape", 2, DIMS(2, 12))));
}

static void b_flatten(qf_graph *g, qf_op o, qf_precision p)
{
    set_int(node(g, o, 1, IN(input(g, "x", 4, DIMS(2, 3, 2, 2)))), "axis", 1);
}

static void b_squeeze(qf_graph *g, qf_op o, qf_precision p)
{
    node(g, o, 2, IN(input(g, "x", 3, DIMS(2, 1, 3)), ints_const(g, "axes", 1, DIMS(1))));
}

static void b_unsqueeze(qf_graph *g, qf_op o, qf_precision p)
{
    node(g, o, 2, IN(input(g, "x", 2, DIMS(2, 3)), ints_const(g, "axes", 1, DIMS(1))));
}

static void b_transpose(qf_graph *g, qf_op o, qf_precision p)
{
    set_ints(node(g, o, 1, IN(input(g, "x", 3, DIMS(2, 3, 4)))), "perm", 3, DIMS(0, 2, 1));
}

/* the CUDA engine's tiled transpose (both inner dims >= 8, tails of 32-wide tiles) */
static void b_transpose_tiled(qf_graph *g, qf_op o, qf_precision p)
{
    set_ints(node(g, o, 1, IN(input(g, "x", 3, DIMS(2, 40, 36)))), "perm", 3, DIMS(0, 2, 1));
}
/* attention's head split: rows of 8 contiguous on both sides (moved as vectors) */
static void b_transpose_heads(qf_graph *g, qf_op o, qf_precision p)
{
    set_ints(node(g, o, 1, IN(input(g, "x", 4, DIMS(2, 5, 3, 8)))), "perm", 4, DIMS(0, 2, 1, 3));
}

static void b_pad(qf_graph *g, qf_op o, qf_precision p)
{
    int x = input(g, "x", 4, DIMS(2, 2, 3, 3));
    node(g, o, 2, IN(x, ints_const(g, "pads", 8, DIMS(0, 0, 1, 2, 0, 0, 2, 1))));
}

static void b_resize(qf_graph *g, qf_op o, qf_precision p)
{
    int x = input(g, "x", 4, DIMS(2, 2, 3, 3));
    int s = qf_graph_add_value(g, "scales", QF_F32, 1, DIMS(4));
    float *sd = malloc(4 * sizeof *sd);
    sd[0] = sd[1] = 1.0f, sd[2] = sd[3] = 2.0f;
    g->values[s].data = sd;
    g->values[s].flags |= QF_VALUE_CONST;
    if (o == QF_OP_UPSAMPLE) {
        g->opset = 9;
        node(g, o, 2, IN(x, s));
        return;
    }
    qf_node *n = node(g, o, 3, IN(x, -1, s));
    attr(n, "mode", QF_ATTR_STRING)->s = strdup("linear");
}

static void b_slice(qf_graph *g, qf_op o, qf_precision p)
{
    int x = input(g, "x", 2, DIMS(2, 7));
    node(g, o, 4, IN(x, ints_const(g, "st", 1, DIMS(1)), ints_const(g, "en", 1, DIMS(6)), ints_const(g, "ax", 1, DIMS(1))));
}

static void b_split(qf_graph *g, qf_op o, qf_precision p)
{
    int x = input(g, "x", 2, DIMS(2, 6));
    int y0 = value(g, "y0"), y1 = value(g, "y1");
    int i = qf_graph_add_node(g, "node", o, 2, IN(x, ints_const(g, "parts", 2, DIMS(2, 4))), 2, IN(y0, y1));
    set_int(&g->nodes[i], "axis", 1);
    output(g, y0);
    output(g, y1);
}

static void b_reduce_mean(qf_graph *g, qf_op o, qf_precision p)
{
    set_ints(node(g, o, 1, IN(input(g, "x", 3, DIMS(2, 3, 4)))), "axes", 1, DIMS(1));
}

static void b_shape(qf_graph *g, qf_op o, qf_precision p) { node(g, o, 1, IN(input(g, "x", 3, DIMS(2, 3, 4)))); }

static void b_gather(qf_graph *g, qf_op o, qf_precision p)
{
    int x = input(g, "x", 3, DIMS(2, 5, 3));
    set_int(node(g, o, 2, IN(x, ints_const(g, "idx", 3, DIMS(4, 0, 2)))), "axis", 1);
}

/* one scalar index (ViT's q, k, v taken from one tensor): a strided copy on the CUDA engine */
static void b_gather_scalar(qf_graph *g, qf_op o, qf_precision p)
{
    int x = input(g, "x", 4, DIMS(2, 3, 4, 8));
    int idx = qf_graph_add_value(g, "idx", QF_I64, 0, NULL);
    int64_t *d = malloc(sizeof *d);
    *d = -2;
    g->values[idx].data = d;
    g->values[idx].flags |= QF_VALUE_CONST;
    set_int(node(g, o, 2, IN(x, idx)), "axis", 1);
}

static void b_identity(qf_graph *g, qf_op o, qf_precision p) { node(g, o, 1, IN(input(g, "x", 3, DIMS(2, 3, 4)))); }

static void b_constant(qf_graph *g, qf_op o, qf_precision p)
{
    qf_node *n = node(g, o, 0, NULL);
    qf_attr *a = attr(n, "value_floats", QF_ATTR_FLOATS);
    a->n = 5;
    a->floats = malloc(5 * sizeof *a->floats);
    for (int i = 0; i < 5; i++) a->floats[i] = 0.25f * (float)i - 0.5f;
}

static void b_range(qf_graph *g, qf_op o, qf_precision p)
{
    node(g, o, 3, IN(float_const(g, "start", -1.5f), float_const(g, "limit", 2.0f), float_const(g, "delta", 0.5f)));
}

static void b_constant_of_shape(qf_graph *g, qf_op o, qf_precision p)
{
    qf_node *n = node(g, o, 1, IN(ints_const(g, "shape", 2, DIMS(3, 4))));
    qf_attr *a = attr(n, "value", QF_ATTR_TENSOR);
    a->t = calloc(1, sizeof *a->t);
    a->t->dtype = QF_F32;
    a->t->ndim = 1;
    a->t->dims[0] = 1;
    a->t->data = malloc(sizeof(float));
    *(float *)a->t->data = 0.75f;
    a->t->flags = QF_VALUE_CONST;
}


/* LayerNormalization over the last dim (ViT's, Swin's) and over the last two */
static void b_layer_norm(qf_graph *g, qf_op o, qf_precision p)
{
    int x = input(g, "x", 3, DIMS(2, 5, 24));
    int s = weight(g, "scale", 1, DIMS(24), 0.5f, 1.5f), b = weight(g, "bias", 1, DIMS(24), -0.5f, 0.5f);
    set_float(node(g, o, 3, IN(x, s, b)), "epsilon", 1e-6f);
}
/* rows of 96 (ConvNeXt's and Swin's first stage: a warp a row on the CUDA
 * engine) and of 1100 (a block a row) */
static void b_layer_norm_96(qf_graph *g, qf_op o, qf_precision p)
{
    int x = input(g, "x", 3, DIMS(2, 7, 96));
    int s = weight(g, "scale", 1, DIMS(96), 0.5f, 1.5f), b = weight(g, "bias", 1, DIMS(96), -0.5f, 0.5f);
    set_float(node(g, o, 3, IN(x, s, b)), "epsilon", 1e-6f);
}
static void b_layer_norm_long(qf_graph *g, qf_op o, qf_precision p)
{
    int x = input(g, "x", 3, DIMS(2, 3, 1100));
    int s = weight(g, "scale", 1, DIMS(1100), 0.5f, 1.5f), b = weight(g, "bias", 1, DIMS(1100), -0.5f, 0.5f);
    set_float(node(g, o, 3, IN(x, s, b)), "epsilon", 1e-5f);
}
static void b_layer_norm_2d(qf_graph *g, qf_op o, qf_precision p)
{
    int x = input(g, "x", 3, DIMS(2, 4, 6));
    set_int(node(g, o, 2, IN(x, weight(g, "scale", 2, DIMS(4, 6), 0.5f, 1.5f))), "axis", 1);
}

static void b_gelu_tanh(qf_graph *g, qf_op o, qf_precision p)
{
    qf_node *n = node(g, o, 1, IN(input(g, "x", 4, DIMS(2, 3, 4, 5))));
    attr(n, "approximate", QF_ATTR_STRING)->s = strdup("tanh");
}

/* a bool constant of n elements, alternating from `first` */
static int bool_const(qf_graph *g, const char *name, int nd, const int64_t *dims, int first)
{
    int v = qf_graph_add_value(g, name, QF_BOOL, nd, dims);
    int64_t cnt = qfi_numel(nd, dims);
    uint8_t *d = malloc((size_t)cnt + 1);
    for (int64_t i = 0; i < cnt; i++) d[i] = (uint8_t)((i + first) % 2);
    g->values[v].data = d;
    g->values[v].flags |= QF_VALUE_CONST;
    return v;
}

static void b_not(qf_graph *g, qf_op o, qf_precision p) { node(g, o, 1, IN(bool_const(g, "b", 2, DIMS(3, 5), 1))); }

/* int64 shape arithmetic (the exporters' -1 tests): a (2,3) matrix == a broadcast row */
static void b_equal(qf_graph *g, qf_op o, qf_precision p)
{
    int a = ints_const(g, "a", 6, DIMS(-1, 4, 7, 3, -1, 7));
    g->values[a].ndim = 2;
    g->values[a].dims[0] = 2, g->values[a].dims[1] = 3;
    node(g, o, 2, IN(a, ints_const(g, "row", 3, DIMS(-1, 4, 7))));
}

/* float Mod (fmod 1) by a per-channel divisor (integer Mod's sign rules: the ONNX conformance tests) */
static void b_mod_float(qf_graph *g, qf_op o, qf_precision p)
{
    int x = input(g, "x", 4, DIMS(2, 3, 4, 5));
    set_int(node(g, o, 2, IN(x, weight(g, "d", 3, DIMS(3, 1, 1), 0.5f, 1.5f))), "fmod", 1);
}
static void b_where(qf_graph *g, qf_op o, qf_precision p)
{
    int x = input(g, "x", 3, DIMS(2, 3, 5));
    node(g, o, 3, IN(bool_const(g, "cond", 2, DIMS(3, 1), 0), x, weight(g, "y", 1, DIMS(5), -1.0f, 1.0f)));
}

/* ViT's class token: (1, 1, C) expanded to (batch, 1, C); and a middle dim */
static void b_expand(qf_graph *g, qf_op o, qf_precision p)
{
    node(g, o, 2, IN(input(g, "x", 3, DIMS(2, 1, 6)), ints_const(g, "shape", 4, DIMS(3, 1, 4, 1))));
}

static void b_scatter_nd(qf_graph *g, qf_op o, qf_precision p)
{
    int x = input(g, "x", 3, DIMS(2, 4, 3));
    int idx = qf_graph_add_value(g, "idx", QF_I64, 2, DIMS(2, 2));
    int64_t *id = malloc(4 * sizeof *id);
    id[0] = 1, id[1] = 2, id[2] = 0, id[3] = -1; /* rows (1,2) and (0,3) */
    g->values[idx].data = id;
    g->values[idx].flags |= QF_VALUE_CONST;
    node(g, o, 3, IN(x, idx, weight(g, "upd", 2, DIMS(2, 3), -1.0f, 1.0f)));
}

/* Conversions: the ONNX form at FP32 (scale and zero point as inputs), qforge's
 * own at FP16 and INT8 (one input, the int8 value carries its scale). */
static const float qdq_scale = 0.02f;

static void b_quantize(qf_graph *g, qf_op o, qf_precision p)
{
    int x = input(g, "x", 3, DIMS(2, 3, 4));
    if (p == QF_PREC_FP32) {
        int zp = qf_graph_add_value(g, "zp", QF_I8, 0, NULL);
        g->values[zp].data = calloc(1, 1);
        g->values[zp].flags |= QF_VALUE_CONST;
        node(g, o, 3, IN(x, float_const(g, "scale", qdq_scale), zp));
        return;
    }
    if (p == QF_PREC_FP16) g->values[x].dtype = QF_F16;
    qf_node *n = node(g, o, 1, IN(x));
    n->precision = p;
    g->values[n->out[0]].dtype = QF_I8;
    g->values[n->out[0]].scale = qdq_scale;
}

static void b_dequantize(qf_graph *g, qf_op o, qf_precision p)
{
    int x = input(g, "x", 3, DIMS(2, 3, 4));
    g->values[x].dtype = QF_I8;
    g->values[x].scale = qdq_scale;
    qf_node *n = node(g, o, p == QF_PREC_FP32 ? 2 : 1, IN(x, float_const(g, "scale", qdq_scale)));
    n->precision = p;
}

static void b_cast(qf_graph *g, qf_op o, qf_precision p)
{
    int x = input(g, "x", 3, DIMS(2, 3, 4));
    if (p == QF_PREC_FP16) g->values[x].dtype = QF_F16;
    qf_node *n = node(g, o, 1, IN(x));
    set_int(n, "to", qf_dtype_info(p == QF_PREC_FP16 ? QF_F32 : QF_F16)->onnx_type);
    n->precision = p;
}

static const op_case cases[] = {
    {QF_OP_CONV, "3x3 s(2,1) pad 1", b_conv, -1.0f, 1.0f},
    {QF_OP_CONV, "16x16 s16 patches of RGB", b_conv_patch, -1.0f, 1.0f},
    {QF_OP_CONV_TRANSPOSE, "3x3 s2", b_conv_transpose, -1.0f, 1.0f},
    {QF_OP_GEMM, "transB bias", b_gemm, -1.0f, 1.0f},
    {QF_OP_MATMUL, "3-D x 2-D", b_matmul, -1.0f, 1.0f},
    {QF_OP_MATMUL, "4-D x 4-D (attention)", b_matmul_4d, -1.0f, 1.0f},
    {QF_OP_MATMUL, "4-D x 3-D broadcast", b_matmul_broadcast, -1.0f, 1.0f},
    {QF_OP_MATMUL, "4-D x 4-D, A broadcast", b_matmul_broadcast_a, -1.0f, 1.0f},
    {QF_OP_MATMUL, "4-D x 4-D, heads broadcast", b_matmul_heads_broadcast, -1.0f, 1.0f},
    {QF_OP_ADD, "per-channel", b_binary, -1.0f, 1.0f},
    {QF_OP_SUB, "per-channel", b_binary, -1.0f, 1.0f},
    {QF_OP_MUL, "per-channel", b_binary, -1.0f, 1.0f},
    {QF_OP_DIV, "per-channel", b_binary, -1.0f, 1.0f},
    {QF_OP_PRELU, "per-channel", b_binary, -1.0f, 1.0f},
    {QF_OP_POW, "x^2", b_pow2, -2.0f, 2.0f},
    {QF_OP_POW, "x^0.5", b_pow_half, 0.0f, 3.0f},
    {QF_OP_POW, "broadcast", b_pow_array, 0.1f, 2.0f},
    {QF_OP_RELU, "", b_unary, -1.0f, 1.0f},
    {QF_OP_LEAKY_RELU, "alpha 0.1", b_unary, -1.0f, 1.0f},
    {QF_OP_CLIP, "[-0.5, 0.75]", b_clip, -1.0f, 1.0f},
    {QF_OP_SIGMOID, "", b_unary, -4.0f, 4.0f},
    {QF_OP_HARD_SIGMOID, "", b_unary, -4.0f, 4.0f},
    {QF_OP_HARD_SWISH, "", b_unary, -4.0f, 4.0f},
    {QF_OP_TANH, "", b_unary, -2.0f, 2.0f},
    {QF_OP_SOFTMAX, "last axis", b_softmax, -3.0f, 3.0f},
    {QF_OP_SOFTMAX, "last axis, rows of 197", b_softmax_rows, -8.0f, 8.0f},
    {QF_OP_SOFTMAX, "last axis, rows of 49", b_softmax_49, -8.0f, 8.0f},
    {QF_OP_SOFTMAX, "last axis, rows of 600", b_softmax_long, -8.0f, 8.0f},
    {QF_OP_MAX_POOL, "3x3 s2 pad 1", b_pool, -1.0f, 1.0f},
    {QF_OP_AVERAGE_POOL, "3x3 s2 pad 1", b_pool, -1.0f, 1.0f},
    {QF_OP_GLOBAL_AVERAGE_POOL, "", b_global_pool, -1.0f, 1.0f},
    {QF_OP_GLOBAL_MAX_POOL, "", b_global_pool, -1.0f, 1.0f},
    {QF_OP_BATCH_NORM, "", b_batchnorm, -1.0f, 1.0f},
    {QF_OP_CONCAT, "channels", b_concat, -1.0f, 1.0f},
    {QF_OP_RESHAPE, "", b_reshape, -1.0f, 1.0f},
    {QF_OP_FLATTEN, "", b_flatten, -1.0f, 1.0f},
    {QF_OP_TRANSPOSE, "", b_transpose, -1.0f, 1.0f},
    {QF_OP_TRANSPOSE, "inner dims swapped, 40x36", b_transpose_tiled, -1.0f, 1.0f},
    {QF_OP_TRANSPOSE, "heads (0,2,1,3)", b_transpose_heads, -1.0f, 1.0f},
    {QF_OP_SQUEEZE, "", b_squeeze, -1.0f, 1.0f},
    {QF_OP_UNSQUEEZE, "", b_unsqueeze, -1.0f, 1.0f},
    {QF_OP_PAD, "constant", b_pad, -1.0f, 1.0f},
    {QF_OP_RESIZE, "linear x2", b_resize, -1.0f, 1.0f},
    {QF_OP_UPSAMPLE, "nearest x2", b_resize, -1.0f, 1.0f},
    {QF_OP_SLICE, "", b_slice, -1.0f, 1.0f},
    {QF_OP_SPLIT, "", b_split, -1.0f, 1.0f},
    {QF_OP_REDUCE_MEAN, "", b_reduce_mean, -1.0f, 1.0f},
    {QF_OP_SHAPE, "", b_shape, -1.0f, 1.0f},
    {QF_OP_GATHER, "", b_gather, -1.0f, 1.0f},
    {QF_OP_GATHER, "scalar index", b_gather_scalar, -1.0f, 1.0f},
    {QF_OP_CAST, "f32/f16", b_cast, -1.0f, 1.0f},
    {QF_OP_IDENTITY, "", b_identity, -1.0f, 1.0f},
    {QF_OP_DROPOUT, "inference", b_identity, -1.0f, 1.0f},
    {QF_OP_CONSTANT, "floats", b_constant, -1.0f, 1.0f},
    {QF_OP_QUANTIZE_LINEAR, "", b_quantize, -3.0f, 3.0f},
    {QF_OP_DEQUANTIZE_LINEAR, "", b_dequantize, -1.0f, 1.0f},
    {QF_OP_RANGE, "float", b_range, -1.0f, 1.0f},
    {QF_OP_CONSTANT_OF_SHAPE, "value 0.75", b_constant_of_shape, -1.0f, 1.0f},
    {QF_OP_LAYER_NORM, "last axis", b_layer_norm, -2.0f, 3.0f},
    {QF_OP_LAYER_NORM, "rows of 96", b_layer_norm_96, -2.0f, 3.0f},
    {QF_OP_LAYER_NORM, "rows of 1100", b_layer_norm_long, -2.0f, 3.0f},
    {QF_OP_LAYER_NORM, "axis 1, no bias", b_layer_norm_2d, -2.0f, 3.0f},
    {QF_OP_ERF, "", b_unary, -3.0f, 3.0f},
    {QF_OP_GELU, "erf", b_unary, -4.0f, 4.0f},
    {QF_OP_GELU, "tanh", b_gelu_tanh, -4.0f, 4.0f},
    {QF_OP_SQRT, "", b_unary, 0.0f, 4.0f},
    {QF_OP_NOT, "bool", b_not, -1.0f, 1.0f},
    {QF_OP_EQUAL, "int64 broadcast row", b_equal, -1.0f, 1.0f},
    {QF_OP_MOD, "float fmod", b_mod_float, -3.0f, 3.0f},
    {QF_OP_WHERE, "broadcast", b_where, -1.0f, 1.0f},
    {QF_OP_EXPAND, "", b_expand, -1.0f, 1.0f},
    {QF_OP_SCATTER_ND, "rows", b_scatter_nd, -1.0f, 1.0f},
};

/* ---- building a case at a precision ------------------------------------------------------ */

/* Parses and infers every node (no folding: a Shape or Constant node stays a node). */
static void infer_all(qf_graph *g)
{
    for (int i = 0; i < g->n_nodes; i++) {
        qf_node *n = &g->nodes[i];
        OK(qfi_ops[n->op]->parse(g, n));
        OK(qfi_ops[n->op]->infer(g, n));
    }
    g->batch = g->n_inputs ? (int)g->values[g->inputs[0]].dims[0] : 1;
}

static qf_graph *build(const op_case *c, qf_precision p, uint64_t seed)
{
    qf_graph *g = qf_graph_new(qf_op_name(c->op));
    g->opset = 13;
    rng = seed;
    c->build(g, c->op, p);
    infer_all(g);
    return g;
}

/* The symmetric int8 scale of values in [lo, hi]. */
static float range_scale(float lo, float hi) { return fmaxf(fabsf(lo), fabsf(hi)) / 127.0f; }

static int const_like(qf_graph *g, int v, const char *suffix, qf_dtype dt, void *data)
{
    char name[128];
    snprintf(name, sizeof name, "%s/%s", g->values[v].name, suffix);
    qf_value like = g->values[v];
    int nv = qf_graph_add_value(g, name, dt, like.ndim, like.dims);
    g->values[nv].data = data;
    g->values[nv].flags |= QF_VALUE_CONST;
    return nv;
}

/* FP16: data values and data constants in half; parameters stay f32. */
static void lower_fp16(qf_graph *g, qf_node *n)
{
    for (int k = 0; k < n->n_in; k++) {
        qf_value *v = n->in[k] >= 0 ? &g->values[n->in[k]] : NULL;
        if (!v || v->dtype != QF_F32 || (qfi_ops[n->op]->params & (1u << k))) continue;
        if (!(v->flags & QF_VALUE_CONST)) {
            v->dtype = QF_F16;
            continue;
        }
        int64_t cnt = qf_value_numel(v);
        uint16_t *h = malloc((size_t)(cnt ? cnt : 1) * sizeof *h);
        for (int64_t i = 0; i < cnt; i++) h[i] = qf_f32_to_f16(((const float *)v->data)[i]);
        n->in[k] = const_like(g, n->in[k], "f16", QF_F16, h);
    }
    for (int k = 0; k < n->n_out; k++)
        if (g->values[n->out[k]].dtype == QF_F32) g->values[n->out[k]].dtype = QF_F16;
}

/* INT8 compute op: x int8, W int8 per output channel, the bias int32, the
 * weight scales, output int8 at s_out (quant/rewrite.c's operands). */
static void lower_compute(qf_graph *g, qf_node *n, float s_in, float s_out)
{
    int64_t outer, ch, inner;
    qfi_ops[n->op]->weight_layout(g, n, &outer, &ch, &inner);
    const qf_value *W = qfi_in(g, n, 1), *B = qfi_in(g, n, 2);
    int8_t *wq = malloc((size_t)qf_value_numel(W));
    float *sc = malloc((size_t)ch * sizeof *sc);
    int32_t *bq = malloc((size_t)ch * sizeof *bq);
    qfi_quant_weights(W->data, outer, ch, inner, true, wq, sc);
    for (int64_t c = 0; c < ch; c++) {
        float b = B ? ((const float *)B->data)[qf_value_numel(B) == 1 ? 0 : c] : 0.0f;
        bq[c] = qfi_quant_bias(b, s_in, sc[c]);
    }
    int x = n->in[0], w = n->in[1];
    int wv = const_like(g, w, "i8", QF_I8, wq);
    int bv = qf_graph_add_value(g, "bias_i32", QF_I32, 1, &ch);
    int sv = qf_graph_add_value(g, "weight_scale", QF_F32, 1, &ch);
    g->values[bv].data = bq;
    g->values[sv].data = sc;
    g->values[bv].flags |= QF_VALUE_CONST;
    g->values[sv].flags |= QF_VALUE_CONST;
    n = &g->nodes[0];
    n->in = realloc(n->in, 4 * sizeof *n->in);
    n->n_in = 4;
    n->in[0] = x, n->in[1] = wv, n->in[2] = bv, n->in[3] = sv;
    g->values[x].dtype = QF_I8;
    g->values[x].scale = s_in;
    g->values[n->out[0]].dtype = QF_I8;
    g->values[n->out[0]].scale = s_out;
}

/* INT8 pass-through and requantizing ops: int8 data in and out; constants stay f32. */
static void lower_int8(qf_graph *g, qf_node *n, float s_in, float s_out)
{
    for (int k = 0; k < n->n_in; k++) {
        qf_value *v = n->in[k] >= 0 ? &g->values[n->in[k]] : NULL;
        if (!v || v->dtype != QF_F32 || (v->flags & QF_VALUE_CONST)) continue;
        v->dtype = QF_I8;
        v->scale = s_in;
    }
    for (int k = 0; k < n->n_out; k++) {
        qf_value *v = &g->values[n->out[k]];
        if (v->dtype != QF_F32) continue;
        v->dtype = QF_I8;
        v->scale = s_out;
    }
}

/* The case's graph at precision p; s_out: an INT8 output's scale (a pass-through op's is its input's). */
static qf_graph *lower(const op_case *c, qf_precision p, uint64_t seed, float s_out)
{
    qf_graph *g = build(c, p, seed);
    const qfi_op_desc *d = qfi_ops[c->op];
    if (p == QF_PREC_FP32 || (d->traits & QFI_OP_CONVERSION)) return g; /* built in its form for p */
    qf_node *n = &g->nodes[0];
    const float s_in = range_scale(c->lo, c->hi);
    if (p == QF_PREC_FP16) lower_fp16(g, n);
    else if (d->int8 == QFI_INT8_COMPUTE && (qfi_in(g, n, 1)->flags & QF_VALUE_CONST)) lower_compute(g, n, s_in, s_out);
    /* (a MatMul of two activations: the INT8 product, both inputs and the output int8, quant --int8-attention) */
    else lower_int8(g, n, s_in, d->int8 == QFI_INT8_PASS ? s_in : s_out);
    n = &g->nodes[0];
    n->precision = p;
    OK(qfi_ops[n->op]->parse(g, n)); /* arity may depend on the precision */
    OK(qfi_graph_rebatch(g, g->batch));
    return g;
}

/* ---- running -------------------------------------------------------------------------------- */

typedef struct result {
    int n;
    qf_value vals[8];  /* the outputs' dtypes, shapes and scales */
    void *data[8];
    int host_nodes;    /* nodes of the op under test a device engine left to the host */
} result;

static void result_free(result *r)
{
    for (int i = 0; i < r->n; i++) free(r->data[i]);
    memset(r, 0, sizeof *r);
}

/* Element i of a value as a double: f16 widened, int8 dequantized where it has a scale. */
static double elem(const qf_value *v, const void *data, int64_t i)
{
    switch (v->dtype) {
    case QF_F32: return ((const float *)data)[i];
    case QF_F16: return qf_f16_to_f32(((const uint16_t *)data)[i]);
    case QF_I8: return ((const int8_t *)data)[i] * (v->scale > 0.0f ? (double)v->scale : 1.0);
    case QF_I32: return ((const int32_t *)data)[i];
    case QF_I64: return (double)((const int64_t *)data)[i];
    case QF_U8: case QF_BOOL: return ((const uint8_t *)data)[i];
    default: ck_abort_msg("output dtype %s", qf_dtype_info(v->dtype)->name); return 0.0;
    }
}

/* Fills input i of g (dtype of the value) from floats in [lo, hi], and the
 * f32 copy the FP32 reference reads: the same numbers as g sees them. */
static void make_input(const qf_value *v, float lo, float hi, void *data, float *wide)
{
    int64_t n = qf_value_numel(v);
    for (int64_t i = 0; i < n; i++) {
        float f = frand(lo, hi);
        if (v->dtype == QF_F16) {
            ((uint16_t *)data)[i] = qf_f32_to_f16(f);
        } else if (v->dtype == QF_I8) {
            ((int8_t *)data)[i] = qfi_quantize_f32(f, v->scale > 0.0f ? v->scale : 1.0f);
        } else {
            ck_assert_int_eq(v->dtype, QF_F32);
            ((float *)data)[i] = f;
        }
        wide[i] = (float)elem(v, data, i);
    }
}

/* Runs g on an engine of this kind; false (with the message) when it cannot be built. */
static bool run_on(qf_device_kind kind, qf_op op, const qf_graph *g, void *const *inputs, result *r)
{
    qf_engine_opts o = {.device = kind, .threads = 1};
    qf_engine *e;
    qf_status st = qf_engine_create(g, &o, &e);
    if (st != QF_OK) return false;
    for (int i = 0; kind != QF_DEVICE_CPU && i < g->n_nodes; i++)
        r->host_nodes += g->nodes[i].op == op && qf_engine_node_device(e, i) == QF_DEVICE_CPU;
    for (int i = 0; i < g->n_inputs; i++) memcpy(qf_engine_input(e, i), inputs[i], qf_value_bytes(&g->values[g->inputs[i]]));
    OK(qf_engine_run(e));
    ck_assert_int_le(g->n_outputs, 8);
    r->n = g->n_outputs;
    for (int o = 0; o < g->n_outputs; o++) {
        r->vals[o] = g->values[g->outputs[o]];
        size_t bytes = qf_value_bytes(&r->vals[o]);
        r->data[o] = malloc(bytes ? bytes : 1);
        memcpy(r->data[o], qf_engine_output(e, o), bytes);
    }
    qf_engine_free(e);
    return true;
}

/* Normalized MSE of got against ref over every output: sum (got - ref)^2 / sum ref^2. */
static double nmse(const result *got, const result *ref)
{
    double err = 0.0, sig = 0.0;
    ck_assert_int_eq(got->n, ref->n);
    for (int o = 0; o < ref->n; o++) {
        int64_t n = qf_value_numel(&ref->vals[o]);
        ck_assert_int_eq(qf_value_numel(&got->vals[o]), n);
        for (int64_t i = 0; i < n; i++) {
            double a = elem(&got->vals[o], got->data[o], i), b = elem(&ref->vals[o], ref->data[o], i);
            err += isnan(a) || isnan(b) ? (isnan(a) != isnan(b) ? INFINITY : 0.0) : (a - b) * (a - b);
            sig += isnan(b) ? 0.0 : b * b;
        }
    }
    return err / (sig > 1e-30 ? sig : 1e-30);
}

/* Largest difference, in units of the last place of an int8 output, between two INT8 results. */
static int int8_units(const result *a, const result *b)
{
    int worst = 0;
    for (int o = 0; o < a->n; o++) {
        if (a->vals[o].dtype != QF_I8) {
            ck_assert_int_eq(memcmp(a->data[o], b->data[o], qf_value_bytes(&a->vals[o])), 0);
            continue;
        }
        for (int64_t i = 0; i < qf_value_numel(&a->vals[o]); i++) {
            int d = abs(((const int8_t *)a->data[o])[i] - ((const int8_t *)b->data[o])[i]);
            if (d > worst) worst = d;
        }
    }
    return worst;
}

/* ---- the test ---------------------------------------------------------------------------- */

static const char *const prec_names[QF_PRECISION_COUNT] = {"fp32", "fp16", "int8"};
/* NMSE bounds against the FP32 reference: FP32 differs by summation order,
 * FP16 by half rounding of inputs, weights and outputs, INT8 by quantization
 * to 127 levels of every operand. */
static const double nmse_bound[QF_PRECISION_COUNT] = {1e-10, 1e-5, 2e-3};

enum { N_ENGINES = 2 };
static const qf_device_kind engines[N_ENGINES] = {QF_DEVICE_CPU, QF_DEVICE_CUDA};
static const char *const engine_names[N_ENGINES] = {"cpu", "cuda"};

/* The engine that runs engine column e's graphs. */
static qf_device_kind run_kind(int e)
{
    const char *on_cpu = getenv("QFORGE_TEST_CUDA_ON_CPU");
    return engines[e] == QF_DEVICE_CUDA && on_cpu && *on_cpu == '1' ? QF_DEVICE_CPU : engines[e];
}

/* Whether engine column e can run here (CUDA: built in and a usable GPU). */
static bool engine_present(int e)
{
    static const op_case relu = {QF_OP_RELU, "", b_unary, -1.0f, 1.0f};
    unsigned p;
    if (qf_engine_op_precisions(engines[e], QF_OP_RELU, &p) != QF_OK) return false;
    qf_device_kind kind = run_kind(e);
    qf_graph *g = build(&relu, QF_PREC_FP32, 1);
    qf_engine_opts o = {.device = kind};
    qf_engine *eng;
    bool ok = qf_engine_create(g, &o, &eng) == QF_OK;
    if (ok) qf_engine_free(eng);
    qf_graph_free(g);
    return ok;
}

/* What the matrix shows per op, engine and precision. */
enum { CELL_NA, CELL_NONE, CELL_OK, CELL_HOST, CELL_FAIL };
static const char *const cell_text[] = {".", "-", "ok", "host", "FAIL"};

/* Runs case c at precision p on every present engine; returns the failures. */
static int run_case(const op_case *c, qf_precision p, const bool *present, int cell[][N_ENGINES][QF_PRECISION_COUNT])
{
    const qfi_op_desc *d = qfi_ops[c->op];
    const uint64_t seed = 0x5eed0000u + (uint64_t)c->op * 16 + p;
    int failures = 0;
    /* inputs in the dtypes of the graph at p; the FP32 reference reads their values */
    qf_graph *g = lower(c, p, seed, 1.0f);
    qf_graph *ref_g = build(c, QF_PREC_FP32, seed);
    void *inputs[8] = {NULL}, *wide[8] = {NULL};
    ck_assert_int_le(g->n_inputs, 8);
    ck_assert_int_eq(g->n_inputs, ref_g->n_inputs);
    rng = seed ^ 0xabcdefu;
    for (int i = 0; i < g->n_inputs; i++) {
        const qf_value *v = &g->values[g->inputs[i]];
        inputs[i] = malloc(qf_value_bytes(v) + 1);
        wide[i] = malloc((size_t)qf_value_numel(v) * sizeof(float) + 1);
        make_input(v, c->lo, c->hi, inputs[i], wide[i]);
        if (ref_g->values[ref_g->inputs[i]].dtype != QF_F32) memcpy(wide[i], inputs[i], qf_value_bytes(v));
    }
    result ref = {0};
    ck_assert_msg(run_on(QF_DEVICE_CPU, c->op, ref_g, wide, &ref), "%s: %s", qf_op_name(c->op), qf_error_message());
    if (p == QF_PREC_INT8 && d->int8 != QFI_INT8_PASS && !(d->traits & QFI_OP_CONVERSION)) {
        /* an output scale of its own: from the reference's range */
        double amax = 0.0;
        for (int i = 0; i < qf_value_numel(&ref.vals[0]); i++) amax = fmax(amax, fabs(elem(&ref.vals[0], ref.data[0], i)));
        qf_graph_free(g);
        g = lower(c, p, seed, qf_calib_scale((float)amax));
    }
    result cpu_int8 = {0};
    for (int e = 0; e < N_ENGINES; e++) {
        unsigned claimed = 0;
        if (!present[e] || qf_engine_op_precisions(engines[e], c->op, &claimed) != QF_OK) {
            if (cell[c->op][e][p] == CELL_NA) cell[c->op][e][p] = CELL_NONE;
            continue;
        }
        /* no kernel: the CUDA engine runs the node on the host */
        const bool host = engines[e] == QF_DEVICE_CUDA && !(claimed & QFI_PREC_BIT(p));
        char what[160];
        snprintf(what, sizeof what, "%s (%s) on %s%s at %s", qf_op_name(c->op), c->label, engine_names[e],
                 host ? " (host)" : "", prec_names[p]);
        bool ok = host || qf_engine_supports(engines[e], g, &g->nodes[0]);
        result got = {0};
        if (ok) ok = run_on(run_kind(e), c->op, g, inputs, &got);
        if (ok && !host && got.host_nodes) { /* claimed, yet the engine's plan left it to the host */
            qf_error(QF_ERR_UNSUPPORTED, "%d node(s) ran on the host", got.host_nodes);
            result_free(&got);
            ok = false;
        }
        if (!ok) {
            printf("FAIL %s: %s: %s\n", what, host ? "failed" : "claimed but refused", qf_error_message());
            failures++;
            cell[c->op][e][p] = CELL_FAIL;
            continue;
        }
        double err = nmse(&got, &ref);
        bool pass = err <= nmse_bound[p];
        int units = 0;
        if (p == QF_PREC_INT8 && e == 0) {
            cpu_int8 = got;
            got = (result){0};
        } else if (p == QF_PREC_INT8 && cpu_int8.n) {
            /* INT8 against the CPU's INT8: exact, but for a requantizing op's rounding of an FP32 mean */
            units = int8_units(&got, &cpu_int8);
            pass &= units <= (d->int8 == QFI_INT8_REQUANT ? 1 : 0);
        }
        printf("%-4s %-52s nmse %.3g (bound %.0e)%s\n", pass ? "ok" : "FAIL", what, err, nmse_bound[p],
               p == QF_PREC_INT8 && e > 0 ? (units ? ", int8 within 1 unit of the CPU" : ", int8 = CPU bit for bit") : "");
        if (!pass) failures++;
        if (cell[c->op][e][p] != CELL_FAIL) cell[c->op][e][p] = !pass ? CELL_FAIL : host ? CELL_HOST : CELL_OK;
        result_free(&got);
    }
    result_free(&cpu_int8);
    result_free(&ref);
    for (int i = 0; i < g->n_inputs; i++) free(inputs[i]), free(wide[i]);
    qf_graph_free(g);
    qf_graph_free(ref_g);
    return failures;
}

static void print_matrix(int cell[][N_ENGINES][QF_PRECISION_COUNT], const bool *present)
{
    printf("\nsupport matrix (ok: tested within bounds; host: no kernel, run on the host within bounds; -: no kernel "
           "on that engine; .: the op has no node at that precision)\n%-20s",
           "op");
    for (int e = 0; e < N_ENGINES; e++)
        if (present[e]) printf(" %-15s", engine_names[e]);
    printf("\n%-20s", "");
    for (int e = 0; e < N_ENGINES; e++)
        if (present[e]) printf(" fp32 fp16 int8 ");
    printf("\n");
    for (int op = 0; op < QF_OP_COUNT; op++) {
        printf("%-20s", qf_op_name((qf_op)op));
        for (int e = 0; e < N_ENGINES; e++) {
            if (!present[e]) continue;
            printf(" ");
            for (int p = 0; p < QF_PRECISION_COUNT; p++) printf("%-5s", cell_text[cell[op][e][p]]);
        }
        printf("\n");
    }
}

/* Whether case c's node has the INT8 form of its op: a compute op's node
 * only where its descriptor takes it (constant weights of the right shape),
 * or a MatMul of two activations the INT8 product takes (attention's, under
 * quant --int8-attention). */
static bool int8_applies(const op_case *c)
{
    const qfi_op_desc *d = qfi_ops[c->op];
    if (d->int8 != QFI_INT8_COMPUTE) return true;
    qf_graph *g = build(c, QF_PREC_FP32, 1);
    const qf_node *n = &g->nodes[0];
    const bool varying[2] = {n->n_in >= 2 && !(qfi_in(g, n, 0)->flags & QF_VALUE_CONST),
                             n->n_in >= 2 && !(qfi_in(g, n, 1)->flags & QF_VALUE_CONST)};
    bool ok = n->n_in >= 2 && (((qfi_in(g, n, 1)->flags & QF_VALUE_CONST) && (!d->int8_ok || d->int8_ok(g, n))) ||
                               (c->op == QF_OP_MATMUL && n->n_in == 2 && varying[0] && varying[1] &&
                                qfi_matmul_product_fits(g, n)));
    qf_graph_free(g);
    return ok;
}

START_TEST(every_op_on_every_engine)
{
    static int cell[QF_OP_COUNT][N_ENGINES][QF_PRECISION_COUNT];
    bool present[N_ENGINES];
    for (int e = 0; e < N_ENGINES; e++) present[e] = engine_present(e);
    ck_assert_msg(present[0], "the CPU engine must run: %s", qf_error_message());
    int failures = 0;
    for (int op = 0; op < QF_OP_COUNT; op++) {
        bool has_case = false;
        for (size_t i = 0; i < QF_ARRAY_LEN(cases); i++) has_case |= cases[i].op == (qf_op)op;
        if (!has_case) {
            printf("FAIL %s has no test case in tests/test_backend_ops.c\n", qf_op_name((qf_op)op));
            failures++;
        }
        /* the CPU engine, the reference, runs every precision an op can have */
        unsigned cpu;
        OK(qf_engine_op_precisions(QF_DEVICE_CPU, (qf_op)op, &cpu));
        if (cpu != qf_op_precisions((qf_op)op)) {
            printf("FAIL %s: the CPU engine covers precisions %#x of %#x\n", qf_op_name((qf_op)op), cpu,
                   qf_op_precisions((qf_op)op));
            failures++;
        }
    }
    for (size_t i = 0; i < QF_ARRAY_LEN(cases); i++)
        for (int p = 0; p < QF_PRECISION_COUNT; p++)
            if ((qf_op_precisions(cases[i].op) & QFI_PREC_BIT(p)) && (p != QF_PREC_INT8 || int8_applies(&cases[i])))
                failures += run_case(&cases[i], (qf_precision)p, present, cell);
    print_matrix(cell, present);
    ck_assert_msg(failures == 0, "%d failures (see above)", failures);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("backend_ops");
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, every_op_on_every_engine);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
