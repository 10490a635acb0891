/* Zoo-lite: one small graph per block type and exporter pattern of the zoo's
 * CNNs (bench/zoo): SE block, HardSwish, SiLU, TF "same" padding, dynamic-batch
 * flattens, grouped and depthwise convs, dense concat, inception pooling, and
 * the transformer exports' patterns: LayerNorm and GELU written out, ConvNeXt's
 * layer scale (folded into the Linear before it), the head
 * split's batch * heads reshape, ViT's class token expanded to the batch; and
 * YOLOv8's (bench/zoo/yolo.py): C2f's channel split, SPPF's chained max pools,
 * the neck's nearest 2x upsampling beside a skip, the head's DFL decoding
 * (a (batch, 4, 16, -1) view, softmax over the bins, a fixed 1x1 conv with
 * weights 0..15, a (batch, 4, -1) view). Each
 * is built with a symbolic batch; the FP32 CPU result must match a naive
 * reference written here (independent of the engines' kernels), the graph
 * prepared at batch 1 must give the same after a .qfm round trip at batch 3
 * (folded shape arithmetic stays batch-free), and INT8 (minmax calibration)
 * must stay within a SQNR bound. Where a CUDA device is usable, the GPU runs
 * FP32 and INT8 too (INT8 within one unit of the CPU's output scale). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "internal.h"
#include "testutil.h"

#define BATCH 3
static char tmp_dir[1024];

/* ---- a graph value with its reference data ------------------------------------------------- */

/* v: the graph value; d: the reference activation (n,c,h,w), batch BATCH. */
typedef struct zt {
    int v;
    int n, c, h, w;
    float *d;
} zt;

typedef struct zb {
    qf_graph *g;
    int count;        /* for value and node names */
    float *refs[256]; /* reference buffers, freed with the builder */
    int n_refs;
} zb;

static int64_t zt_numel(zt t) { return (int64_t)t.n * t.c * t.h * t.w; }

static zt zt_new(zb *b, int c, int h, int w)
{
    char name[32];
    snprintf(name, sizeof name, "v%d", b->count++);
    zt t = {.v = value(b->g, name), .n = BATCH, .c = c, .h = h, .w = w};
    t.d = calloc((size_t)zt_numel(t), sizeof *t.d);
    ck_assert_int_lt(b->n_refs, 256);
    b->refs[b->n_refs++] = t.d;
    return t;
}

static float *at(zt t, int n, int c, int y, int x) { return &t.d[(((int64_t)n * t.c + c) * t.h + y) * t.w + x]; }

static qf_node *node(zb *b, qf_op o, int n_in, const int *in, int out)
{
    char name[32];
    snprintf(name, sizeof name, "n%d", b->count++);
    return op(b->g, name, o, n_in, in, out);
}

/* A constant of dims d, frand(lo, hi); its data through *data. */
static int param(zb *b, int nd, const int64_t *d, float lo, float hi, const float **data)
{
    char name[32];
    snprintf(name, sizeof name, "w%d", b->count++);
    int v = weight(b->g, name, nd, d, lo, hi);
    *data = b->g->values[v].data;
    return v;
}

static int int64_const(zb *b, int cnt, const int64_t *vals)
{
    char name[32];
    snprintf(name, sizeof name, "k%d", b->count++);
    int v = qf_graph_add_value(b->g, name, QF_I64, 1, (int64_t[]){cnt});
    int64_t *d = malloc((size_t)(cnt ? cnt : 1) * sizeof *d);
    memcpy(d, vals, (size_t)cnt * sizeof *d);
    b->g->values[v].data = d;
    b->g->values[v].flags |= QF_VALUE_CONST;
    return v;
}

/* ---- blocks: each adds its nodes and computes its reference ------------------------------------ */

/* Conv k x k, stride s, pads (top, left, bottom, right), `groups`, with a bias. */
static zt conv(zb *b, zt x, int m, int k, int s, const int pad[4], int groups)
{
    const int cg = x.c / groups, mg = m / groups;
    const float *w, *bias;
    int wv = param(b, 4, (int64_t[]){m, cg, k, k}, -1.0f / sqrtf((float)(cg * k * k)),
                   1.0f / sqrtf((float)(cg * k * k)), &w);
    int bv = param(b, 1, (int64_t[]){m}, -0.1f, 0.1f, &bias);
    const int ho = (x.h + pad[0] + pad[2] - k) / s + 1, wo = (x.w + pad[1] + pad[3] - k) / s + 1;
    zt y = zt_new(b, m, ho, wo);
    qf_node *n = node(b, QF_OP_CONV, 3, (int[]){x.v, wv, bv}, y.v);
    set_ints(n, "kernel_shape", 2, (int64_t[]){k, k});
    set_ints(n, "strides", 2, (int64_t[]){s, s});
    set_ints(n, "pads", 4, (int64_t[]){pad[0], pad[1], pad[2], pad[3]});
    set_int(n, "group", groups);
    for (int i = 0; i < y.n; i++)
        for (int o = 0; o < m; o++)
            for (int oy = 0; oy < ho; oy++)
                for (int ox = 0; ox < wo; ox++) {
                    double acc = bias[o];
                    const int gi = o / mg;
                    for (int c = 0; c < cg; c++)
                        for (int ky = 0; ky < k; ky++)
                            for (int kx = 0; kx < k; kx++) {
                                int iy = oy * s - pad[0] + ky, ix = ox * s - pad[1] + kx;
                                if (iy < 0 || iy >= x.h || ix < 0 || ix >= x.w) continue;
                                acc += (double)w[((o * cg + c) * k + ky) * k + kx] * *at(x, i, gi * cg + c, iy, ix);
                            }
                    *at(y, i, o, oy, ox) = (float)acc;
                }
    return y;
}

static const int P0[4] = {0, 0, 0, 0}, P1[4] = {1, 1, 1, 1};

typedef enum { RELU, HARD_SIGMOID, HARD_SWISH, SIGMOID } act_kind;

static float act_ref(act_kind a, float v)
{
    switch (a) {
    case RELU: return v > 0 ? v : 0;
    case HARD_SIGMOID: return fminf(1.0f, fmaxf(0.0f, v / 6.0f + 0.5f));
    case HARD_SWISH: return v * fminf(1.0f, fmaxf(0.0f, v / 6.0f + 0.5f));
    default: return 1.0f / (1.0f + expf(-v));
    }
}

static zt act(zb *b, zt x, act_kind a)
{
    static const qf_op ops[] = {QF_OP_RELU, QF_OP_HARD_SIGMOID, QF_OP_HARD_SWISH, QF_OP_SIGMOID};
    zt y = zt_new(b, x.c, x.h, x.w);
    qf_node *n = node(b, ops[a], 1, (int[]){x.v}, y.v);
    if (a == HARD_SIGMOID) set_float(n, "alpha", 1.0f / 6.0f); /* PyTorch's; ONNX's default is 0.2 */
    for (int64_t i = 0; i < zt_numel(x); i++) y.d[i] = act_ref(a, x.d[i]);
    return y;
}

/* x * s with s (n,c,1,1) broadcast over h, w (an SE block's scaling), or s of x's shape (SiLU). */
static zt mul(zb *b, zt x, zt s)
{
    zt y = zt_new(b, x.c, x.h, x.w);
    node(b, QF_OP_MUL, 2, (int[]){x.v, s.v}, y.v);
    for (int i = 0; i < x.n; i++)
        for (int c = 0; c < x.c; c++)
            for (int p = 0; p < x.h; p++)
                for (int q = 0; q < x.w; q++)
                    *at(y, i, c, p, q) = *at(x, i, c, p, q) * *at(s, i, c, s.h == 1 ? 0 : p, s.w == 1 ? 0 : q);
    return y;
}

static zt add(zb *b, zt x, zt r)
{
    zt y = zt_new(b, x.c, x.h, x.w);
    node(b, QF_OP_ADD, 2, (int[]){x.v, r.v}, y.v);
    for (int64_t i = 0; i < zt_numel(x); i++) y.d[i] = x.d[i] + r.d[i];
    return y;
}

static zt global_avg(zb *b, zt x)
{
    zt y = zt_new(b, x.c, 1, 1);
    node(b, QF_OP_GLOBAL_AVERAGE_POOL, 1, (int[]){x.v}, y.v);
    for (int i = 0; i < x.n; i++)
        for (int c = 0; c < x.c; c++) {
            double s = 0;
            for (int p = 0; p < x.h * x.w; p++) s += at(x, i, c, 0, 0)[p];
            *at(y, i, c, 0, 0) = (float)(s / (x.h * x.w));
        }
    return y;
}

/* MaxPool or AveragePool k x k, stride s, pads p on every side; ceil_mode and count_include_pad as ONNX. */
static zt pool(zb *b, zt x, bool max, int k, int s, int p, bool ceil_mode, bool count_pad)
{
    int span_h = x.h + 2 * p - k, span_w = x.w + 2 * p - k;
    int ho = (ceil_mode ? (span_h + s - 1) / s : span_h / s) + 1, wo = (ceil_mode ? (span_w + s - 1) / s : span_w / s) + 1;
    /* ceil mode drops a last window that starts in the right padding */
    if (ceil_mode && (ho - 1) * s >= x.h + p) ho--;
    if (ceil_mode && (wo - 1) * s >= x.w + p) wo--;
    zt y = zt_new(b, x.c, ho, wo);
    qf_node *n = node(b, max ? QF_OP_MAX_POOL : QF_OP_AVERAGE_POOL, 1, (int[]){x.v}, y.v);
    set_ints(n, "kernel_shape", 2, (int64_t[]){k, k});
    set_ints(n, "strides", 2, (int64_t[]){s, s});
    set_ints(n, "pads", 4, (int64_t[]){p, p, p, p});
    if (ceil_mode) set_int(n, "ceil_mode", 1);
    if (!max) set_int(n, "count_include_pad", count_pad);
    for (int i = 0; i < x.n; i++)
        for (int c = 0; c < x.c; c++)
            for (int oy = 0; oy < ho; oy++)
                for (int ox = 0; ox < wo; ox++) {
                    double acc = max ? -INFINITY : 0;
                    int cnt = 0, padded = 0;
                    for (int ky = 0; ky < k; ky++)
                        for (int kx = 0; kx < k; kx++) {
                            int iy = oy * s - p + ky, ix = ox * s - p + kx;
                            /* count_include_pad counts the pads, not the ceil-mode overhang */
                            if (iy < x.h + p && ix < x.w + p) padded++;
                            if (iy < 0 || iy >= x.h || ix < 0 || ix >= x.w) continue;
                            float v = *at(x, i, c, iy, ix);
                            acc = max ? fmax(acc, v) : acc + v;
                            cnt++;
                        }
                    *at(y, i, c, oy, ox) = (float)(max ? acc : acc / (count_pad ? padded : cnt));
                }
    return y;
}

static zt concat(zb *b, int n_in, const zt *xs)
{
    int c = 0, in[8];
    for (int k = 0; k < n_in; k++) c += xs[k].c, in[k] = xs[k].v;
    zt y = zt_new(b, c, xs[0].h, xs[0].w);
    set_int(node(b, QF_OP_CONCAT, n_in, in, y.v), "axis", 1);
    for (int i = 0; i < y.n; i++) {
        float *dst = at(y, i, 0, 0, 0);
        for (int k = 0; k < n_in; k++) {
            size_t len = (size_t)xs[k].c * xs[k].h * xs[k].w;
            memcpy(dst, at(xs[k], i, 0, 0, 0), len * sizeof *dst);
            dst += len;
        }
    }
    return y;
}

/* y = x with zeros around it, pads (top, left, bottom, right); y is zeroed. */
static void pad_ref(zt x, zt y, const int p[4])
{
    for (int i = 0; i < x.n; i++)
        for (int c = 0; c < x.c; c++)
            for (int q = 0; q < x.h; q++)
                memcpy(at(y, i, c, q + p[0], p[1]), at(x, i, c, q, 0), (size_t)x.w * sizeof(float));
}

/* Pad with zeros, pads (top, left, bottom, right) as constants (TF "same" padding once folded). */
static zt pad(zb *b, zt x, const int p[4])
{
    zt y = zt_new(b, x.c, x.h + p[0] + p[2], x.w + p[1] + p[3]);
    int pv = int64_const(b, 8, (int64_t[]){0, 0, p[0], p[1], 0, 0, p[2], p[3]});
    node(b, QF_OP_PAD, 2, (int[]){x.v, pv}, y.v);
    pad_ref(x, y, p);
    return y;
}

/* The same padding as the TorchScript exporter writes F.pad / ZeroPad2d with
 * PyTorch's (left, right, top, bottom) list: ConstantOfShape zeros for the
 * leading dims -> Concat -> Reshape [-1, 2] -> Slice(step -1) -> Transpose ->
 * Reshape [-1] -> Cast -> Pad: all constant, folded at load time. */
static zt pad_chain(zb *b, zt x, const int p[4])
{
    qf_graph *g = b->g;
    int zeros = value(g, "zeros"), cat = value(g, "cat"), pairs = value(g, "pairs"), rev = value(g, "rev"),
        tr = value(g, "tr"), flat = value(g, "flat"), pads = value(g, "pads");
    qf_node *n = node(b, QF_OP_CONSTANT_OF_SHAPE, 1, (int[]){int64_const(b, 1, (int64_t[]){4})}, zeros);
    qf_attr *va = attr(n, "value", QF_ATTR_TENSOR);
    va->t = calloc(1, sizeof *va->t);
    va->t->dtype = QF_I64;
    va->t->ndim = 1;
    va->t->dims[0] = 1;
    va->t->data = calloc(1, sizeof(int64_t));
    va->t->flags = QF_VALUE_CONST;
    int torch_pads = int64_const(b, 4, (int64_t[]){p[1], p[3], p[0], p[2]});
    set_int(node(b, QF_OP_CONCAT, 2, (int[]){torch_pads, zeros}, cat), "axis", 0);
    node(b, QF_OP_RESHAPE, 2, (int[]){cat, int64_const(b, 2, (int64_t[]){-1, 2})}, pairs);
    node(b, QF_OP_SLICE, 5,
         (int[]){pairs, int64_const(b, 1, (int64_t[]){-1}), int64_const(b, 1, (int64_t[]){-INT64_MAX}),
                 int64_const(b, 1, (int64_t[]){0}), int64_const(b, 1, (int64_t[]){-1})},
         rev);
    set_ints(node(b, QF_OP_TRANSPOSE, 1, (int[]){rev}, tr), "perm", 2, (int64_t[]){1, 0});
    node(b, QF_OP_RESHAPE, 2, (int[]){tr, int64_const(b, 1, (int64_t[]){-1})}, flat);
    set_int(node(b, QF_OP_CAST, 1, (int[]){flat}, pads), "to", 7);
    zt y = zt_new(b, x.c, x.h + p[0] + p[2], x.w + p[1] + p[3]);
    node(b, QF_OP_PAD, 2, (int[]){x.v, pads}, y.v);
    pad_ref(x, y, p);
    return y;
}

/* The dynamo exporter's x.view(B, C) of a (B, C, 1, 1) tensor: a 1-D reshape,
 * then a Gather of Range(0, B, 1) * C + arange(C), then a Reshape [-1, C]. */
static zt dynamo_view(zb *b, zt x)
{
    qf_graph *g = b->g;
    int sh = value(g, "bshape"), bs = value(g, "bs"), r = value(g, "r"), rm = value(g, "rm"), ru = value(g, "ru"),
        idx = value(g, "idx"), flat = value(g, "flat"), strided = value(g, "strided");
    set_int(node(b, QF_OP_SHAPE, 1, (int[]){x.v}, sh), "end", 1);
    node(b, QF_OP_SQUEEZE, 1, (int[]){sh}, bs);
    int zero = int64_const(b, 1, (int64_t[]){0}), one = int64_const(b, 1, (int64_t[]){1});
    g->values[zero].ndim = g->values[one].ndim = 0;
    node(b, QF_OP_RANGE, 3, (int[]){zero, bs, one}, r);
    int stride = int64_const(b, 1, (int64_t[]){x.c});
    g->values[stride].ndim = 0;
    node(b, QF_OP_MUL, 2, (int[]){r, stride}, rm);
    node(b, QF_OP_UNSQUEEZE, 2, (int[]){rm, int64_const(b, 3, (int64_t[]){1, 2, 3})}, ru);
    int64_t iota[64];
    for (int c = 0; c < x.c; c++) iota[c] = c;
    int ch = int64_const(b, x.c, iota);
    g->values[ch].ndim = 4;
    memcpy(g->values[ch].dims, (int64_t[]){1, x.c, 1, 1}, 4 * sizeof(int64_t));
    node(b, QF_OP_ADD, 2, (int[]){ru, ch}, idx);
    node(b, QF_OP_RESHAPE, 2, (int[]){x.v, int64_const(b, 1, (int64_t[]){-1})}, flat);
    set_int(node(b, QF_OP_GATHER, 2, (int[]){flat, idx}, strided), "axis", 0);
    zt y = zt_new(b, x.c, 1, 1);
    qf_node *n = node(b, QF_OP_RESHAPE, 2, (int[]){strided, int64_const(b, 2, (int64_t[]){-1, x.c})}, y.v);
    set_int(n, "allowzero", 1);
    memcpy(y.d, x.d, (size_t)zt_numel(x) * sizeof *y.d);
    return y;
}

/* Flatten to (n, c*h*w) the way exporters write a dynamic-batch `x.view(x.size(0), -1)`:
 * Shape -> Gather(0) -> Unsqueeze -> Concat with [-1] -> Reshape (TorchScript). With
 * via_1d, first to 1-D and then to [batch, c*h*w] (a batch-carrying target on an
 * input whose dim 0 is not the batch). */
static zt flatten(zb *b, zt x, bool via_1d)
{
    qf_graph *g = b->g;
    int sh = value(g, "shape"), b0 = value(g, "b0"), b1 = value(g, "b1"), tgt = value(g, "target");
    char name[32];
    snprintf(name, sizeof name, "shape%d", b->count);
    op(g, name, QF_OP_SHAPE, 1, (int[]){x.v}, sh);
    int first = int64_const(b, 1, (int64_t[]){0});
    g->values[first].ndim = 0; /* a scalar index: Gather gives a scalar, as exported */
    set_int(node(b, QF_OP_GATHER, 2, (int[]){sh, first}, b0), "axis", 0);
    node(b, QF_OP_UNSQUEEZE, 2, (int[]){b0, int64_const(b, 1, (int64_t[]){0})}, b1);
    int rest = int64_const(b, 1, (int64_t[]){via_1d ? (int64_t)x.c * x.h * x.w : -1});
    set_int(node(b, QF_OP_CONCAT, 2, (int[]){b1, rest}, tgt), "axis", 0);
    int src = x.v;
    if (via_1d) {
        src = value(g, "flat1d");
        node(b, QF_OP_RESHAPE, 2, (int[]){x.v, int64_const(b, 1, (int64_t[]){-1})}, src);
    }
    zt y = zt_new(b, x.c * x.h * x.w, 1, 1);
    node(b, QF_OP_RESHAPE, 2, (int[]){src, tgt}, y.v);
    memcpy(y.d, x.d, (size_t)zt_numel(x) * sizeof *y.d);
    return y;
}

static zt gemm(zb *b, zt x, int m)
{
    const float *w, *bias;
    int wv = param(b, 2, (int64_t[]){m, x.c}, -1.0f / sqrtf((float)x.c), 1.0f / sqrtf((float)x.c), &w);
    int bv = param(b, 1, (int64_t[]){m}, -0.1f, 0.1f, &bias);
    zt y = zt_new(b, m, 1, 1);
    set_int(node(b, QF_OP_GEMM, 3, (int[]){x.v, wv, bv}, y.v), "transB", 1);
    for (int i = 0; i < x.n; i++)
        for (int o = 0; o < m; o++) {
            double acc = bias[o];
            for (int c = 0; c < x.c; c++) acc += (double)w[o * x.c + c] * x.d[(int64_t)i * x.c + c];
            y.d[(int64_t)i * m + o] = (float)acc;
        }
    return y;
}

/* ---- the cases ------------------------------------------------------------------------------ */

/* MobileNetV3 / EfficientNet: expand, depthwise, squeeze-excite, project, residual. */
static zt se_block(zb *b, zt x)
{
    zt e = act(b, conv(b, x, 16, 1, 1, P0, 1), HARD_SWISH);
    zt d = act(b, conv(b, e, 16, 3, 1, P1, 16), HARD_SWISH);
    zt s = act(b, conv(b, act(b, conv(b, global_avg(b, d), 4, 1, 1, P0, 1), RELU), 16, 1, 1, P0, 1), HARD_SIGMOID);
    return add(b, conv(b, mul(b, d, s), x.c, 1, 1, P0, 1), x);
}

/* EfficientNet's SiLU (exported as Sigmoid and Mul) in an MBConv with a sigmoid-gated SE. */
static zt silu(zb *b, zt x)
{
    zt c = conv(b, x, 12, 3, 1, P1, 1);
    zt a = mul(b, c, act(b, c, SIGMOID));
    zt s = act(b, conv(b, global_avg(b, a), 12, 1, 1, P0, 1), SIGMOID);
    return mul(b, a, s);
}

/* EfficientNet-Lite's TF "same" padding of a stride-2 conv (0 before, 1 after)
 * as a plain Pad, then a 3x3 stride-1 one (1 each side) as the exporter's chain. */
static zt same_pad(zb *b, zt x)
{
    static const int tf_same[4] = {0, 0, 1, 1};
    zt c = act(b, conv(b, pad(b, x, tf_same), 8, 3, 2, P0, 1), RELU);
    return conv(b, pad_chain(b, c, P1), 8, 3, 1, P0, 8);
}

static zt grouped(zb *b, zt x)
{
    zt c = act(b, conv(b, x, 8, 3, 1, P1, 2), RELU); /* ResNeXt-style groups */
    return conv(b, c, 8, 3, 2, P1, 8);                /* depthwise, strided */
}

/* DenseNet: each layer's output is concatenated to everything before it. */
static zt dense(zb *b, zt x)
{
    zt l1 = conv(b, act(b, x, RELU), 4, 3, 1, P1, 1);
    zt c1 = concat(b, 2, (zt[]){x, l1});
    zt l2 = conv(b, act(b, c1, RELU), 4, 3, 1, P1, 1);
    return pool(b, concat(b, 3, (zt[]){x, l1, l2}), false, 2, 2, 0, false, false);
}

/* Inception: branches of 1x1, 3x3 and average-pooled 1x1 side by side; GoogLeNet's
 * ceil-mode max-pool; average pools with and without the padding counted. */
static zt inception(zb *b, zt x)
{
    zt p = pool(b, x, true, 3, 2, 0, true, false);
    zt b1 = conv(b, p, 4, 1, 1, P0, 1);
    zt b2 = conv(b, p, 4, 3, 1, P1, 1);
    zt b3 = conv(b, pool(b, p, false, 3, 1, 1, false, true), 4, 1, 1, P0, 1);
    zt b4 = conv(b, pool(b, p, false, 3, 1, 1, false, false), 4, 1, 1, P0, 1);
    return act(b, concat(b, 4, (zt[]){b1, b2, b3, b4}), RELU);
}

/* ReduceMean over H and W (PyTorch's x.mean([2, 3]), keepdims 0, as MnasNet and
 * ShuffleNet export it; keepdims 1 as the dynamo exporter writes adaptive pooling). */
static zt mean_hw(zb *b, zt x, bool keepdims)
{
    zt y = zt_new(b, x.c, 1, 1);
    qf_node *n = node(b, QF_OP_REDUCE_MEAN, 1, (int[]){x.v}, y.v);
    set_ints(n, "axes", 2, (int64_t[]){2, 3});
    set_int(n, "keepdims", keepdims);
    for (int i = 0; i < x.n; i++)
        for (int c = 0; c < x.c; c++) {
            double s = 0;
            for (int p = 0; p < x.h * x.w; p++) s += at(x, i, c, 0, 0)[p];
            *at(y, i, c, 0, 0) = (float)(s / (x.h * x.w));
        }
    return y;
}

static zt mean_head(zb *b, zt x) { return gemm(b, mean_hw(b, act(b, conv(b, x, 8, 3, 1, P1, 1), RELU), false), 10); }

/* Classifier heads through both dynamic-batch flattens. */
static zt head(zb *b, zt x) { return gemm(b, flatten(b, global_avg(b, conv(b, x, 8, 1, 1, P0, 1)), false), 10); }
static zt head_1d(zb *b, zt x) { return gemm(b, flatten(b, conv(b, x, 4, 3, 2, P1, 1), true), 10); }
static zt head_dynamo(zb *b, zt x) { return gemm(b, dynamo_view(b, mean_hw(b, conv(b, x, 8, 1, 1, P0, 1), true)), 10); }

/* ---- transformer patterns: (n, c, h, w) read as n * c * h rows of w features ------------- */

/* A scalar f32 constant. */
static int scalar(zb *b, float f)
{
    const float *unused;
    return param(b, 0, NULL, f, f, &unused);
}

/* LayerNorm over w as the TorchScript exporter writes it before opset 17:
 * ReduceMean, Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul gamma, Add beta
 * (fused into one LayerNormalization, so no ReduceMean is left). */
static zt layer_norm_chain(zb *b, zt x)
{
    const float *gamma, *beta;
    qf_graph *g = b->g;
    int m = value(g, "m"), d = value(g, "d"), d2 = value(g, "d2"), v = value(g, "v"), ve = value(g, "ve"),
        sd = value(g, "sd"), nrm = value(g, "nrm"), sc = value(g, "sc");
    set_ints(node(b, QF_OP_REDUCE_MEAN, 1, (int[]){x.v}, m), "axes", 1, (int64_t[]){-1});
    node(b, QF_OP_SUB, 2, (int[]){x.v, m}, d);
    node(b, QF_OP_POW, 2, (int[]){d, scalar(b, 2.0f)}, d2);
    set_ints(node(b, QF_OP_REDUCE_MEAN, 1, (int[]){d2}, v), "axes", 1, (int64_t[]){-1});
    node(b, QF_OP_ADD, 2, (int[]){v, scalar(b, 1e-5f)}, ve);
    node(b, QF_OP_SQRT, 1, (int[]){ve}, sd);
    node(b, QF_OP_DIV, 2, (int[]){d, sd}, nrm);
    node(b, QF_OP_MUL, 2, (int[]){nrm, param(b, 1, (int64_t[]){x.w}, 0.5f, 1.5f, &gamma)}, sc);
    zt y = zt_new(b, x.c, x.h, x.w);
    node(b, QF_OP_ADD, 2, (int[]){sc, param(b, 1, (int64_t[]){x.w}, -0.5f, 0.5f, &beta)}, y.v);
    for (int64_t r = 0; r < zt_numel(x) / x.w; r++) {
        const float *xr = x.d + r * x.w;
        double mean = 0, var = 0;
        for (int i = 0; i < x.w; i++) mean += xr[i];
        mean /= x.w;
        for (int i = 0; i < x.w; i++) var += (xr[i] - mean) * (xr[i] - mean);
        var /= x.w;
        for (int i = 0; i < x.w; i++) y.d[r * x.w + i] = (float)((xr[i] - mean) / sqrt(var + 1e-5) * gamma[i] + beta[i]);
    }
    return y;
}

/* nn.GELU as exported: x * 0.5 * (1 + Erf(x / sqrt 2)) (fused into one Gelu, so no Erf is left) */
static zt gelu_chain(zb *b, zt x)
{
    qf_graph *g = b->g;
    int t = value(g, "t"), e = value(g, "e"), e1 = value(g, "e1"), xe = value(g, "xe");
    node(b, QF_OP_DIV, 2, (int[]){x.v, scalar(b, 1.41421354f)}, t);
    node(b, QF_OP_ERF, 1, (int[]){t}, e);
    node(b, QF_OP_ADD, 2, (int[]){e, scalar(b, 1.0f)}, e1);
    node(b, QF_OP_MUL, 2, (int[]){x.v, e1}, xe);
    zt y = zt_new(b, x.c, x.h, x.w);
    node(b, QF_OP_MUL, 2, (int[]){xe, scalar(b, 0.5f)}, y.v);
    for (int64_t i = 0; i < zt_numel(x); i++) y.d[i] = (float)(0.5 * x.d[i] * (1.0 + erf(x.d[i] / sqrt(2.0))));
    return y;
}

/* ConvNeXt's block tail: Linear on channels-last tokens (Transpose, MatMul,
 * bias Add), back to NCHW, times the layer scale gamma [c, 1, 1] (the
 * constant first, as torchvision writes it), plus the block's input; then a
 * 1x1 conv whose output a [1, c, 1, 1] constant scales (a BatchNorm written
 * as a Mul). Both Muls fold into the weights before them. */
static zt layer_scale(zb *b, zt x)
{
    qf_graph *g = b->g;
    const int C = x.c;
    const float *w, *bias, *gamma, *gamma2;
    int wv = param(b, 2, (int64_t[]){C, C}, -0.5f, 0.5f, &w);
    int bv = param(b, 1, (int64_t[]){C}, -0.1f, 0.1f, &bias);
    int gv = param(b, 3, (int64_t[]){C, 1, 1}, 0.5f, 1.5f, &gamma);
    int nhwc = value(g, "nhwc"), z = value(g, "z"), t = value(g, "t"), back = value(g, "back");
    set_ints(node(b, QF_OP_TRANSPOSE, 1, (int[]){x.v}, nhwc), "perm", 4, (int64_t[]){0, 2, 3, 1});
    node(b, QF_OP_MATMUL, 2, (int[]){nhwc, wv}, z);
    node(b, QF_OP_ADD, 2, (int[]){z, bv}, t);
    set_ints(node(b, QF_OP_TRANSPOSE, 1, (int[]){t}, back), "perm", 4, (int64_t[]){0, 3, 1, 2});
    zt s = zt_new(b, C, x.h, x.w);
    node(b, QF_OP_MUL, 2, (int[]){gv, back}, s.v);
    for (int n = 0; n < x.n; n++)
        for (int c = 0; c < C; c++)
            for (int i = 0; i < x.h; i++)
                for (int j = 0; j < x.w; j++) {
                    double acc = bias[c];
                    for (int k = 0; k < C; k++) acc += (double)*at(x, n, k, i, j) * w[k * C + c];
                    *at(s, n, c, i, j) = (float)(gamma[c] * acc);
                }
    zt cv = conv(b, add(b, s, x), C, 1, 1, P0, 1);
    int g2 = param(b, 4, (int64_t[]){1, C, 1, 1}, 0.5f, 1.5f, &gamma2);
    zt y = zt_new(b, C, x.h, x.w);
    node(b, QF_OP_MUL, 2, (int[]){cv.v, g2}, y.v);
    for (int n = 0; n < x.n; n++)
        for (int c = 0; c < C; c++)
            for (int i = 0; i < x.h; i++)
                for (int j = 0; j < x.w; j++) *at(y, n, c, i, j) = *at(cv, n, c, i, j) * gamma2[c];
    return y;
}

/* The batch's dim of x's shape as a 1-element int64 value (Shape -> Gather(0) -> Unsqueeze) */
static int batch_of(zb *b, zt x)
{
    qf_graph *g = b->g;
    int sh = value(g, "sh"), b0 = value(g, "b0"), b1 = value(g, "b1");
    node(b, QF_OP_SHAPE, 1, (int[]){x.v}, sh);
    int first = int64_const(b, 1, (int64_t[]){0});
    g->values[first].ndim = 0;
    set_int(node(b, QF_OP_GATHER, 2, (int[]){sh, first}, b0), "axis", 0);
    node(b, QF_OP_UNSQUEEZE, 2, (int[]){b0, int64_const(b, 1, (int64_t[]){0})}, b1);
    return b1;
}

/* nn.MultiheadAttention's head split: x viewed as (batch * c, h, w) with the
 * target's middle element computed from the batch (Shape -> Gather -> Mul),
 * Softmax over w, and back to (batch, c, h, w) by a target holding the batch. */
static zt heads_reshape(zb *b, zt x)
{
    qf_graph *g = b->g;
    int bc = value(g, "bc"), tgt = value(g, "tgt"), hv = value(g, "hv"), sm = value(g, "sm"), back = value(g, "back");
    node(b, QF_OP_MUL, 2, (int[]){batch_of(b, x), int64_const(b, 1, (int64_t[]){x.c})}, bc);
    set_int(node(b, QF_OP_CONCAT, 2, (int[]){bc, int64_const(b, 2, (int64_t[]){x.h, x.w})}, tgt), "axis", 0);
    node(b, QF_OP_RESHAPE, 2, (int[]){x.v, tgt}, hv);
    set_int(node(b, QF_OP_SOFTMAX, 1, (int[]){hv}, sm), "axis", -1);
    set_int(node(b, QF_OP_CONCAT, 2, (int[]){batch_of(b, x), int64_const(b, 3, (int64_t[]){x.c, x.h, x.w})}, back),
            "axis", 0);
    zt y = zt_new(b, x.c, x.h, x.w);
    node(b, QF_OP_RESHAPE, 2, (int[]){sm, back}, y.v);
    for (int64_t r = 0; r < zt_numel(x) / x.w; r++) {
        double mx = -INFINITY, s = 0;
        for (int i = 0; i < x.w; i++) mx = fmax(mx, x.d[r * x.w + i]);
        for (int i = 0; i < x.w; i++) s += exp(x.d[r * x.w + i] - mx);
        for (int i = 0; i < x.w; i++) y.d[r * x.w + i] = (float)(exp(x.d[r * x.w + i] - mx) / s);
    }
    return y;
}

/* ViT's class token: a (1, c, 1, w) parameter expanded to the batch (Expand
 * by a shape holding it) and concatenated before the h rows. */
static zt class_token(zb *b, zt x)
{
    qf_graph *g = b->g;
    const float *cls;
    int tgt = value(g, "tgt"), ex = value(g, "ex");
    int cv = param(b, 4, (int64_t[]){1, x.c, 1, x.w}, -1.0f, 1.0f, &cls);
    set_int(node(b, QF_OP_CONCAT, 2, (int[]){batch_of(b, x), int64_const(b, 3, (int64_t[]){x.c, 1, x.w})}, tgt),
            "axis", 0);
    node(b, QF_OP_EXPAND, 2, (int[]){cv, tgt}, ex);
    zt y = zt_new(b, x.c, x.h + 1, x.w);
    set_int(node(b, QF_OP_CONCAT, 2, (int[]){ex, x.v}, y.v), "axis", 2);
    for (int i = 0; i < x.n; i++)
        for (int c = 0; c < x.c; c++)
            for (int q = 0; q < x.w; q++) {
                *at(y, i, c, 0, q) = cls[c * x.w + q];
                for (int p = 0; p < x.h; p++) *at(y, i, c, p + 1, q) = *at(x, i, c, p, q);
            }
    return y;
}

/* ---- YOLOv8's patterns ------------------------------------------------------------------------ */

/* Split of x's channels into two halves (C2f's chunk(2, 1)), by a split input as at opset 13. */
static void split_halves(zb *b, zt x, zt *lo, zt *hi)
{
    *lo = zt_new(b, x.c / 2, x.h, x.w);
    *hi = zt_new(b, x.c - x.c / 2, x.h, x.w);
    char name[32];
    snprintf(name, sizeof name, "n%d", b->count++);
    int outs[2] = {lo->v, hi->v};
    int i = qf_graph_add_node(b->g, name, QF_OP_SPLIT, 2,
                              (int[]){x.v, int64_const(b, 2, (int64_t[]){lo->c, hi->c})}, 2, outs);
    ck_assert_int_ge(i, 0);
    set_int(&b->g->nodes[i], "axis", 1);
    const size_t plane = (size_t)x.h * x.w;
    for (int n = 0; n < x.n; n++) {
        memcpy(at(*lo, n, 0, 0, 0), at(x, n, 0, 0, 0), lo->c * plane * sizeof(float));
        memcpy(at(*hi, n, 0, 0, 0), at(x, n, lo->c, 0, 0), hi->c * plane * sizeof(float));
    }
}

/* Conv + SiLU (x * Sigmoid(x)), Ultralytics' Conv block with BatchNorm folded. */
static zt conv_silu(zb *b, zt x, int m, int k, int s)
{
    const int p = k / 2, pads[4] = {p, p, p, p};
    zt c = conv(b, x, m, k, s, pads, 1);
    return mul(b, c, act(b, c, SIGMOID));
}

/* A C2f block (1x1 conv, split, a residual bottleneck on the second half, concat,
 * 1x1 conv), then SPPF: 1x1 conv, three 5x5 stride-1 max pools in a row, concat, 1x1 conv. */
static zt c2f_sppf(zb *b, zt x)
{
    zt lo, hi;
    split_halves(b, conv_silu(b, x, 8, 1, 1), &lo, &hi);
    zt m = add(b, hi, conv_silu(b, conv_silu(b, hi, 4, 3, 1), 4, 3, 1));
    zt c = conv_silu(b, concat(b, 3, (zt[]){lo, hi, m}), 8, 1, 1);
    zt s0 = conv_silu(b, c, 4, 1, 1);
    zt s1 = pool(b, s0, true, 5, 1, 2, false, false);
    zt s2 = pool(b, s1, true, 5, 1, 2, false, false);
    zt s3 = pool(b, s2, true, 5, 1, 2, false, false);
    return conv_silu(b, concat(b, 4, (zt[]){s0, s1, s2, s3}), 8, 1, 1);
}

/* nn.Upsample(scale_factor=2, mode="nearest") as the TorchScript exporter
 * writes it at opset 11+: Resize with scales (1, 1, 2, 2), asymmetric, floor. */
static zt upsample2(zb *b, zt x)
{
    const float *unused;
    const float sc[4] = {1, 1, 2, 2};
    int scales = param(b, 1, (int64_t[]){4}, 0, 0, &unused);
    memcpy(b->g->values[scales].data, sc, sizeof sc);
    zt y = zt_new(b, x.c, 2 * x.h, 2 * x.w);
    qf_node *n = node(b, QF_OP_RESIZE, 3, (int[]){x.v, -1, scales}, y.v); /* no roi ("") */
    attr(n, "mode", QF_ATTR_STRING)->s = strdup("nearest");
    attr(n, "coordinate_transformation_mode", QF_ATTR_STRING)->s = strdup("asymmetric");
    attr(n, "nearest_mode", QF_ATTR_STRING)->s = strdup("floor");
    for (int i = 0; i < x.n; i++)
        for (int c = 0; c < x.c; c++)
            for (int p = 0; p < y.h; p++)
                for (int q = 0; q < y.w; q++) *at(y, i, c, p, q) = *at(x, i, c, p / 2, q / 2);
    return y;
}

/* The PAN neck's top-down step: the coarser level upsampled 2x, concatenated
 * with the finer one, a 3x3 conv over both. */
static zt pan_upsample(zb *b, zt x)
{
    zt fine = conv_silu(b, x, 6, 3, 1);
    zt coarse = conv_silu(b, fine, 8, 3, 2);
    return conv_silu(b, concat(b, 2, (zt[]){upsample2(b, coarse), fine}), 6, 3, 1);
}

/* Value x (batch first) viewed as (batch, dims...) by a target written as
 * exporters write one: the batch from Shape -> Gather(0) -> Unsqueeze,
 * concatenated with constant dims that hold a -1 (a flatten of the trailing
 * dims: Ultralytics' view(n, c, -1), timm's flatten(2)), into value y. */
static void view_batch(zb *b, int x, int cnt, const int64_t *dims, int y)
{
    int tgt = value(b->g, "vtgt");
    set_int(node(b, QF_OP_CONCAT, 2, (int[]){batch_of(b, (zt){.v = x}), int64_const(b, cnt, dims)}, tgt), "axis", 0);
    node(b, QF_OP_RESHAPE, 2, (int[]){x, tgt}, y);
}

/* Detect's box branch at one level and its DFL decoding: a 1x1 conv to
 * 4 * 16 bin logits viewed (batch, 4, 16, h * w), transposed to (batch, 16,
 * 4, h * w), softmax over the bins, the expectation as a 1x1 conv with
 * weights 0..15 and no bias, viewed (batch, 4, h * w). */
static zt dfl(zb *b, zt x)
{
    enum { BINS = 16 };
    qf_graph *g = b->g;
    zt logits = conv(b, conv_silu(b, x, 8, 3, 1), 4 * BINS, 1, 1, P0, 1);
    const int a = x.h * x.w;
    int v = value(g, "bins"), tr = value(g, "tr"), sm = value(g, "sm"), ex = value(g, "ex");
    view_batch(b, logits.v, 3, (int64_t[]){4, BINS, -1}, v);
    set_ints(node(b, QF_OP_TRANSPOSE, 1, (int[]){v}, tr), "perm", 4, (int64_t[]){0, 2, 1, 3});
    set_int(node(b, QF_OP_SOFTMAX, 1, (int[]){tr}, sm), "axis", 1);
    const float *unused;
    int w = param(b, 4, (int64_t[]){1, BINS, 1, 1}, 0, 0, &unused);
    for (int k = 0; k < BINS; k++) ((float *)g->values[w].data)[k] = (float)k;
    qf_node *n = node(b, QF_OP_CONV, 2, (int[]){sm, w}, ex);
    set_ints(n, "kernel_shape", 2, (int64_t[]){1, 1});
    zt y = zt_new(b, 4, 1, a);
    view_batch(b, ex, 2, (int64_t[]){4, -1}, y.v);
    for (int i = 0; i < x.n; i++)
        for (int side = 0; side < 4; side++)
            for (int p = 0; p < a; p++) {
                double mx = -INFINITY, sum = 0, exp_k = 0;
                for (int k = 0; k < BINS; k++) mx = fmax(mx, logits.d[((int64_t)i * 4 * BINS + side * BINS + k) * a + p]);
                for (int k = 0; k < BINS; k++) {
                    double e_k = exp(logits.d[((int64_t)i * 4 * BINS + side * BINS + k) * a + p] - mx);
                    sum += e_k;
                    exp_k += k * e_k;
                }
                y.d[((int64_t)i * 4 + side) * a + p] = (float)(exp_k / sum);
            }
    return y;
}

typedef struct zcase {
    const char *name;
    zt (*block)(zb *b, zt x);
    int c, h, w;
    double int8_sqnr_min; /* dB */
    qf_op gone;           /* an op the passes must have removed (QF_OP_COUNT: none) */
    int max_conversions;  /* the INT8 plan's QuantizeLinear/DequantizeLinear/Cast nodes at most (-1: any) */
} zcase;

static const zcase cases[] = {
    {"se_block", se_block, 8, 10, 10, 35, QF_OP_COUNT, -1},
    {"silu", silu, 3, 9, 9, 35, QF_OP_COUNT, -1},
    {"same_pad", same_pad, 3, 11, 11, 35, QF_OP_PAD, -1},
    {"grouped", grouped, 4, 10, 10, 35, QF_OP_COUNT, -1},
    {"dense", dense, 4, 8, 8, 35, QF_OP_COUNT, -1},
    {"inception", inception, 6, 12, 12, 35, QF_OP_COUNT, -1},
    {"flatten", head, 5, 6, 6, 35, QF_OP_COUNT, -1},
    {"flatten_1d", head_1d, 3, 7, 7, 35, QF_OP_COUNT, -1},
    {"dynamo_view", head_dynamo, 4, 5, 5, 35, QF_OP_REDUCE_MEAN, -1},
    {"mean_head", mean_head, 3, 6, 6, 35, QF_OP_REDUCE_MEAN, -1},
    {"layer_norm_chain", layer_norm_chain, 3, 4, 16, 35, QF_OP_REDUCE_MEAN, -1},
    {"gelu_chain", gelu_chain, 3, 4, 8, 35, QF_OP_ERF, -1},
    {"layer_scale", layer_scale, 8, 4, 5, 35, QF_OP_MUL, -1},
    {"heads_reshape", heads_reshape, 4, 3, 5, 35, QF_OP_SHAPE, -1},
    {"class_token", class_token, 3, 4, 6, 35, QF_OP_SHAPE, -1},
    {"c2f_sppf", c2f_sppf, 3, 10, 10, 35, QF_OP_COUNT, 2},
    {"pan_upsample", pan_upsample, 3, 8, 8, 35, QF_OP_COUNT, 2},
    {"dfl", dfl, 3, 4, 5, 30, QF_OP_SHAPE, -1},
};

/* The case's graph with input dims (batch, c, h, w) and its reference output on x (BATCH images). */
static qf_graph *build(const zcase *k, int64_t batch, const float *x, zb *b, zt *y)
{
    rng = 1234;
    b->g = qf_graph_new(k->name);
    b->count = b->n_refs = 0;
    zt in = {.v = input(b->g, "x", 4, (int64_t[]){batch, k->c, k->h, k->w}), .n = BATCH, .c = k->c, .h = k->h,
             .w = k->w, .d = (float *)x};
    *y = k->block(b, in);
    output(b->g, y->v);
    for (int i = 0; i < b->g->n_nodes; i++) OK(qfi_ops[b->g->nodes[i].op]->parse(b->g, &b->g->nodes[i]));
    return b->g;
}

static void free_refs(zb *b)
{
    for (int i = 0; i < b->n_refs; i++) free(b->refs[i]);
    b->n_refs = 0;
}

static double max_rel(const float *a, const float *ref, int64_t n)
{
    double md = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        md = fmax(md, fabs((double)a[i] - ref[i]));
        mr = fmax(mr, fabs((double)ref[i]));
    }
    return mr > 0 ? md / mr : md;
}

/* Output 0 of g on x on device dev; NULL when the device (or a kernel on it) is missing. */
static float *run_on(const qf_graph *g, const float *x, qf_device_kind dev, char *why, size_t why_len)
{
    qf_engine_opts o = {.device = dev, .threads = 2};
    qf_engine *e;
    qf_status st = qf_engine_create(g, &o, &e);
    if (st != QF_OK) {
        snprintf(why, why_len, "%s", qf_error_message());
        return NULL;
    }
    memcpy(qf_engine_input(e, 0), x, qf_value_bytes(&g->values[g->inputs[0]]));
    OK(qf_engine_run(e));
    const qf_value *yv = &g->values[g->outputs[0]];
    float *y = malloc(qf_value_bytes(yv));
    memcpy(y, qf_engine_output(e, 0), qf_value_bytes(yv));
    qf_engine_free(e);
    return y;
}

START_TEST(zoo_block)
{
    const zcase *k = &cases[_i];
    rng = 99;
    const int64_t n_in = (int64_t)BATCH * k->c * k->h * k->w;
    float *x = malloc((size_t)n_in * sizeof *x);
    for (int64_t i = 0; i < n_in; i++) x[i] = frand(-1, 1);
    zb b = {0};
    zt y;

    /* FP32 at batch BATCH from a symbolic batch */
    qf_graph *g = build(k, -1, x, &b, &y);
    OK(qf_graph_prepare(g, BATCH));
    const int64_t n_out = zt_numel(y);
    ck_assert_int_eq(qf_value_numel(&g->values[g->outputs[0]]), n_out);
    for (int i = 0; i < g->n_nodes; i++)
        ck_assert_msg(g->nodes[i].op != k->gone, "%s: node %s (%s) is still there", k->name, g->nodes[i].name,
                      qf_op_name(k->gone));
    float *out = run(g, x, NULL, NULL);
    double rel = max_rel(out, y.d, n_out);
    ck_assert_msg(rel <= 1e-5, "%s: FP32 max rel err %.3g against the reference", k->name, rel);
    free(out);

    /* prepared at batch 1, stored, read at BATCH: folding left nothing batch-bound */
    zb b1 = {0};
    zt y1;
    qf_graph *g1 = build(k, -1, x, &b1, &y1);
    OK(qf_graph_prepare(g1, 1));
    char path[1100];
    snprintf(path, sizeof path, "%s/%s.qfm", tmp_dir, k->name);
    OK(qf_qfm_write(g1, NULL, path));
    qf_graph *r;
    OK(qf_qfm_read(path, BATCH, &r, NULL));
    out = run(r, x, NULL, NULL);
    rel = max_rel(out, y.d, n_out);
    ck_assert_msg(rel <= 1e-5, "%s: prepared at batch 1, run at %d: max rel err %.3g", k->name, BATCH, rel);
    free(out);
    qf_graph_free(r);
    qf_graph_free(g1);
    free_refs(&b1);

    char why[512];
    float *gpu = run_on(g, x, QF_DEVICE_CUDA, why, sizeof why);
    if (gpu) {
        rel = max_rel(gpu, y.d, n_out);
        ck_assert_msg(rel <= 1e-4, "%s: GPU FP32 max rel err %.3g", k->name, rel);
        free(gpu);
    }

    /* INT8 with a minmax table of these images */
    qf_calib_table *t = calibrate_minmax(g, x);
    qf_quant_opts qo;
    qf_quant_opts_init(&qo);
    qf_quant_summary sum;
    OK(qf_quantize(g, t, &qo, &sum));
    /* YOLO's C2f split, bottleneck Add and Concat, SPPF's max-pools and the
     * neck's nearest upsampling stay int8 between SiLU convs */
    ck_assert_msg(k->max_conversions < 0 || sum.conversions <= k->max_conversions,
                  "%s: %d conversions in the INT8 plan (at most %d)", k->name, sum.conversions, k->max_conversions);
    float *q = run(g, x, NULL, NULL);
    double db = sqnr_db(y.d, q, n_out);
    ck_assert_msg(db >= k->int8_sqnr_min, "%s: INT8 SQNR %.1f dB < %.0f", k->name, db, k->int8_sqnr_min);
    gpu = run_on(g, x, QF_DEVICE_CUDA, why, sizeof why);
    if (gpu) {
        double agree = sqnr_db(q, gpu, n_out);
        ck_assert_msg(agree >= 40, "%s: GPU INT8 against CPU INT8: SQNR %.1f dB", k->name, agree);
        free(gpu);
    } else {
        printf("%s: GPU not run: %s\n", k->name, why);
    }
    printf("%s: FP32 ok, INT8 SQNR %.1f dB\n", k->name, db);
    free(q);
    qf_calib_table_free(t);
    qf_graph_free(g);
    free_refs(&b);
    free(x);
}
END_TEST

static char warned[512];

static void keep_warning(void *user, qf_log_level level, const char *msg)
{
    (void)user;
    if (level == QF_LOG_WARN) snprintf(warned, sizeof warned, "%s", msg);
}

/* A node that reads a folded value computed from the batch, and is neither a
 * Reshape target nor a Gather of an iota, is named in a warning (loop 0);
 * the same arithmetic on another dim of the shape, as ShuffleNet's channel
 * split does, is not (loop 1). */
START_TEST(batch_bound_value_warns)
{
    const int64_t dim = _i;
    zb b = {.g = qf_graph_new("bound")};
    qf_graph *g = b.g;
    int x = input(g, "x", 2, (int64_t[]){-1, 4});
    int sh = value(g, "sh"), n0 = value(g, "n0"), nf = value(g, "nf"), y = value(g, "y");
    op(g, "shape", QF_OP_SHAPE, 1, (int[]){x}, sh);
    int which = int64_const(&b, 1, (int64_t[]){dim});
    op(g, "first", QF_OP_GATHER, 2, (int[]){sh, which}, n0);
    set_int(op(g, "to_float", QF_OP_CAST, 1, (int[]){n0}, nf), "to", 1);
    op(g, "add_batch", QF_OP_ADD, 2, (int[]){x, nf}, y);
    output(g, y);
    for (int i = 0; i < g->n_nodes; i++) OK(qfi_ops[g->nodes[i].op]->parse(g, &g->nodes[i]));
    warned[0] = 0;
    qf_log_set(keep_warning, NULL, QF_LOG_WARN);
    OK(qf_graph_prepare(g, 2));
    qf_log_set(NULL, NULL, QF_LOG_WARN);
    if (dim == 0)
        ck_assert_msg(strstr(warned, "add_batch") && strstr(warned, "batch size 2"), "warning: '%s'", warned);
    else
        ck_assert_msg(warned[0] == 0, "a value of dim %d taken for the batch: '%s'", (int)dim, warned);
    qf_graph_free(g);
}
END_TEST

/* The layer-scale fold stays away from a scale that would push FP16-normal
 * weights out of FP16's range (random-init ConvNeXt's 1e-6: an FP16 plan
 * would run the layer in FP32, 35 % slower on the H200) and takes one that
 * keeps them there. */
START_TEST(layer_scale_fold_keeps_fp16_weights)
{
    const float scales[2] = {1e-6f, 0.25f};
    for (int k = 0; k < 2; k++) {
        qf_graph *g = qf_graph_new("layer_scale_fold");
        int x = input(g, "x", 3, (int64_t[]){-1, 5, 8});
        int w = weight(g, "w", 2, (int64_t[]){8, 8}, 0.01f, 0.5f);
        int gamma = weight(g, "gamma", 1, (int64_t[]){8}, scales[k], scales[k]);
        int z = value(g, "z"), y = value(g, "y");
        op(g, "fc", QF_OP_MATMUL, 2, (int[]){x, w}, z);
        op(g, "scale", QF_OP_MUL, 2, (int[]){z, gamma}, y);
        output(g, y);
        for (int i = 0; i < g->n_nodes; i++) OK(qfi_ops[g->nodes[i].op]->parse(g, &g->nodes[i]));
        OK(qf_graph_prepare(g, 2));
        int muls = 0;
        for (int i = 0; i < g->n_nodes; i++) muls += g->nodes[i].op == QF_OP_MUL;
        ck_assert_msg(muls == (k == 0 ? 1 : 0), "scale %g: %d Muls left", (double)scales[k], muls);
        qf_graph_free(g);
    }
}
END_TEST

int main(void)
{
    snprintf(tmp_dir, sizeof tmp_dir, "%s/qforge-test-zoo-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmp_dir)) return 99;
    Suite *s = suite_create("zoo-lite");
    TCase *tc = tcase_create("blocks");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, zoo_block, 0, (int)QF_ARRAY_LEN(cases));
    tcase_add_loop_test(tc, batch_bound_value_warns, 0, 2);
    tcase_add_test(tc, layer_scale_fold_keeps_fp16_weights);
    suite_add_tcase(s, tc);
    int rc = run_suite(s);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    if (system(cmd) != 0) rc = 1;
    return rc;
}
