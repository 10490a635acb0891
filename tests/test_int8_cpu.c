/* The CPU engine's INT8 Conv, Gemm and MatMul kernels on every instruction
 * set this CPU runs (portable C, and VNNI at 256 and 512 bits where present),
 * on one thread and two, against a plain int64 reference through
 * lib/quant_math.c's epilogue: the bytes must be equal. Shapes cover odd
 * channel counts and K, padding, strides, dilations, groups, depthwise
 * windows, batches above 1, residuals, activations and float outputs, and
 * zero points on the input (the padding's value), residual and output, as a
 * model quantized elsewhere with uint8 activations has them. Also the bulk
 * f16 / int8 conversions against the element functions. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "testutil.h"
#include "ops/nn.h"
#include "quant_math.h"
#include "../runtime/cpu/kernels.h"

/* ---- operands ------------------------------------------------------------------------- */

/* Bytes with extremes (-128, 127) among uniform values: the exactness edges. */
static int8_t *random_i8(int64_t n)
{
    int8_t *v = malloc((size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) {
        const int r = (int)frand(0, 8);
        v[i] = r == 0 ? -128 : r == 1 ? 127 : (int8_t)(int)frand(-128, 128);
    }
    return v;
}

static int const_value(qf_graph *g, const char *name, qf_dtype dt, int nd, const int64_t *d, void *data)
{
    int v = qf_graph_add_value(g, name, dt, nd, d);
    g->values[v].data = data;
    g->values[v].flags |= QF_VALUE_CONST;
    return v;
}

/* What an INT8 compute node reads and writes besides its geometry. */
typedef struct epilogue {
    bool bias, residual;
    qf_act act;
    qf_dtype out;
    bool zp; /* zero points: ZX on the input, ZR on the residual, ZY on an int8 output */
} epilogue;
enum { ZX = 37, ZR = -9, ZY = -100 };

/* Weight scales, biases and the scales of x, residual and y for ch channels;
 * builds the INT8 operands 1-4 of node inputs `in`. */
static void add_operands(qf_graph *g, int64_t ch, const epilogue *ep, int *in, float *s_out)
{
    float *sw = malloc((size_t)ch * sizeof *sw);
    int32_t *b = malloc((size_t)ch * sizeof *b);
    for (int64_t c = 0; c < ch; c++) {
        sw[c] = frand(0.5f, 2.0f) * 1e-3f;
        b[c] = (int32_t)frand(-300000, 300000);
    }
    in[2] = ep->bias ? const_value(g, "b", QF_I32, 1, &ch, b) : -1;
    if (!ep->bias) free(b);
    in[3] = const_value(g, "sw", QF_F32, 1, &ch, sw);
    *s_out = 0.37f;
}

static void set_epilogue(qf_graph *g, qf_node *n, const epilogue *ep, float s_out)
{
    n->precision = QF_PREC_INT8;
    n->act = ep->act;
    n->act_lo = ep->act == QF_ACT_CLIP ? -1.5f : 0.0f;
    n->act_hi = ep->act == QF_ACT_CLIP ? 6.0f : 0.0f;
    qf_value *y = &g->values[n->out[0]];
    y->dtype = ep->out;
    y->scale = ep->out == QF_I8 ? s_out : 0.0f;
    y->zero_point = ep->zp && ep->out == QF_I8 ? ZY : 0;
    g->values[n->in[0]].zero_point = ep->zp ? ZX : 0;
}

/* ---- running ---------------------------------------------------------------------------- */

/* Runs node 0 of g with the kernels of isa on `threads` threads; y gets the
 * output bytes. */
static void run_isa(const qf_graph *g, qfi_i8_isa isa, int threads, const void *const *in, void *y)
{
    const qf_node *n = &g->nodes[0];
    qfi_cpu_i8_set_isa(isa);
    void *state;
    OK(qfi_cpu_node_prepare(g, n, &state));
    qfi_cpu_i8_set_isa(QFI_I8_ISAS); /* back to the default */
    const size_t bytes = qfi_cpu_node_scratch(NULL, g, n, threads);
    void *scratch = bytes ? malloc(bytes) : NULL;
    void *out[1] = {y};
    qfi_kernel_args a = {.g = g, .n = n, .in = in, .out = out, .scratch = scratch, .state = state, .threads = threads};
    OK(qfi_cpu_kernel_of(n->op)->run(&a));
    free(scratch);
    qfi_cpu_node_release(n, state);
}

/* Every isa the CPU runs, at 1 and 2 threads, must write ref's bytes. */
static void check_all_isas(const qf_graph *g, const void *const *in, const void *ref, const char *what)
{
    const qf_value *yv = &g->values[g->nodes[0].out[0]];
    const size_t bytes = qf_value_bytes(yv);
    void *y = malloc(bytes);
    for (int isa = 0; isa < QFI_I8_ISAS; isa++) {
        if (!qfi_cpu_i8_isa_runs((qfi_i8_isa)isa)) continue;
        for (int threads = 1; threads <= 2; threads++) {
            memset(y, 0x5a, bytes);
            run_isa(g, (qfi_i8_isa)isa, threads, in, y);
            size_t i = 0;
            while (i < bytes && ((const char *)y)[i] == ((const char *)ref)[i]) i++;
            ck_assert_msg(i == bytes, "%s: %s on %d threads differs from the reference at byte %zu of %zu", what,
                          qfi_cpu_i8_isa_name((qfi_i8_isa)isa), threads, i, bytes);
        }
    }
    free(y);
}

/* ---- Conv -------------------------------------------------------------------------------- */

typedef struct conv_case {
    int nd;                 /* spatial dims: 1, 2 or 3 */
    int64_t N, C, M, group;
    int64_t in[3], k[3];    /* spatial sizes, outermost first; unused dims 1 */
    int64_t stride[3], dil[3], pad0[3], pad1[3];
    epilogue ep;
} conv_case;

/* The reference: int64 sums (int32 once complete) and qfi_requantize per plane. */
static void conv_reference(const qf_graph *g, const conv_case *c, const int8_t *x, const int8_t *w,
                           const int8_t *res, void *y)
{
    const qf_node *n = &g->nodes[0];
    const qf_value *xv = qfi_in(g, n, 0), *yv = qfi_out(g, n, 0), *rv = qfi_in(g, n, 4);
    int64_t out[3] = {1, 1, 1}, in[3] = {1, 1, 1}, k[3] = {1, 1, 1}, st[3] = {1, 1, 1}, dl[3] = {1, 1, 1},
            p0[3] = {0, 0, 0};
    for (int d = 0; d < c->nd; d++) {
        const int s = 3 - c->nd + d;
        out[s] = yv->dims[2 + d], in[s] = c->in[d], k[s] = c->k[d];
        st[s] = c->stride[d], dl[s] = c->dil[d], p0[s] = c->pad0[d];
    }
    const int64_t cg = c->C / c->group, mg = c->M / c->group, plane = out[0] * out[1] * out[2];
    const int64_t ksz = k[0] * k[1] * k[2], isz = in[0] * in[1] * in[2];
    float *m = malloc((size_t)c->M * sizeof *m);
    qfi_requant rq;
    qfi_requant_init(&rq, m, c->M, xv->scale, qfi_in(g, n, 3)->data, qfi_in(g, n, 2) ? qfi_in(g, n, 2)->data : NULL,
                     rv ? rv->scale : 0.0f, rv ? rv->zero_point : 0, yv->dtype, yv->scale, yv->zero_point, n->act,
                     n->act_lo, n->act_hi);
    int32_t *acc = malloc((size_t)plane * sizeof *acc);
    const size_t esz = qf_dtype_info(yv->dtype)->size;
    for (int64_t b = 0; b < c->N; b++)
        for (int64_t mo = 0; mo < c->M; mo++) {
            const int64_t c0 = mo / mg * cg;
            int32_t *a = acc;
            for (int64_t o0 = 0; o0 < out[0]; o0++)
                for (int64_t o1 = 0; o1 < out[1]; o1++)
                    for (int64_t o2 = 0; o2 < out[2]; o2++) {
                        int64_t s = 0;
                        for (int64_t ci = 0; ci < cg; ci++)
                            for (int64_t t = 0; t < ksz; t++) {
                                const int64_t t0 = t / (k[1] * k[2]), t1 = t / k[2] % k[1], t2 = t % k[2];
                                const int64_t i0 = o0 * st[0] - p0[0] + t0 * dl[0];
                                const int64_t i1 = o1 * st[1] - p0[1] + t1 * dl[1];
                                const int64_t i2 = o2 * st[2] - p0[2] + t2 * dl[2];
                                /* a tap in the padding reads the input's zero point */
                                const bool pad = i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1] || i2 < 0 || i2 >= in[2];
                                const int64_t xi = (b * c->C + c0 + ci) * isz + (i0 * in[1] + i1) * in[2] + i2;
                                s += (int64_t)w[(mo * cg + ci) * ksz + t] * (pad ? xv->zero_point : x[xi]);
                            }
                        *a++ = (int32_t)s;
                    }
            const int64_t at = (b * c->M + mo) * plane;
            qfi_requantize(&rq, acc, res ? res + at : NULL, plane, mo, 0, (char *)y + (size_t)at * esz);
        }
    free(acc);
    free(m);
}

static void check_conv(const conv_case *c, uint64_t seed, const char *what)
{
    rng = seed;
    qf_graph *g = qf_graph_new("int8_conv");
    g->opset = 13;
    const int64_t cg = c->C / c->group;
    int64_t xd[5] = {c->N, c->C}, wd[5] = {c->M, cg};
    int64_t xn = c->N * c->C, wn = c->M * cg;
    for (int d = 0; d < c->nd; d++) {
        xd[2 + d] = c->in[d], wd[2 + d] = c->k[d];
        xn *= c->in[d], wn *= c->k[d];
    }
    int8_t *x = random_i8(xn), *w = random_i8(wn);
    int in[5];
    in[0] = qf_graph_add_value(g, "x", QF_I8, 2 + c->nd, xd);
    g->values[in[0]].scale = 0.02f;
    in[1] = const_value(g, "w", QF_I8, 2 + c->nd, wd, w);
    float s_out;
    add_operands(g, c->M, &c->ep, in, &s_out);
    int y = value(g, "y");
    qf_node *n = op(g, "conv", QF_OP_CONV, 4, in, y);
    int64_t st[3], dl[3], pads[6];
    for (int d = 0; d < c->nd; d++) {
        st[d] = c->stride[d], dl[d] = c->dil[d];
        pads[d] = c->pad0[d], pads[c->nd + d] = c->pad1[d];
    }
    set_ints(n, "strides", c->nd, st);
    set_ints(n, "dilations", c->nd, dl);
    set_ints(n, "pads", 2 * c->nd, pads);
    if (c->group > 1) set_int(n, "group", c->group);
    set_epilogue(g, n, &c->ep, s_out);
    OK(qfi_ops[n->op]->parse(g, n));
    OK(qfi_ops[n->op]->infer(g, n));
    int8_t *res = NULL;
    const qf_value *yv = &g->values[y];
    if (c->ep.residual) {
        int r = qf_graph_add_value(g, "r", QF_I8, yv->ndim, yv->dims);
        g->values[r].scale = 0.05f;
        g->values[r].zero_point = c->ep.zp ? ZR : 0;
        res = random_i8(qf_value_numel(&g->values[r]));
        n = &g->nodes[0];
        n->in = realloc(n->in, 5 * sizeof *n->in);
        n->in[4] = r;
        n->n_in = 5;
        OK(qfi_ops[n->op]->parse(g, n));
    }
    void *ref = malloc(qf_value_bytes(&g->values[y]));
    conv_reference(g, c, x, w, res, ref);
    const void *ins[5] = {x, w, qfi_in(g, n, 2) ? qfi_in(g, n, 2)->data : NULL, qfi_in(g, n, 3)->data, res};
    check_all_isas(g, ins, ref, what);
    free(ref);
    free(x);
    free(res);
    qf_graph_free(g);
}

/* 2-D cases: N C M group H W kh kw stride dil pads (top left bottom right) epilogue */
#define CONV2(n, c, m, g, h, w, kh, kw, s, d, pt, pl, pb, pr, e)                                                      \
    {.nd = 2, .N = n, .C = c, .M = m, .group = g, .in = {h, w}, .k = {kh, kw}, .stride = {s, s}, .dil = {d, d},      \
     .pad0 = {pt, pl}, .pad1 = {pb, pr}, .ep = e}

#define plain {.bias = true, .act = QF_ACT_NONE, .out = QF_I8}
#define relu_res {.bias = true, .residual = true, .act = QF_ACT_RELU, .out = QF_I8}
#define clip_nobias {.bias = false, .act = QF_ACT_CLIP, .out = QF_I8}
#define float_out {.bias = true, .residual = true, .act = QF_ACT_NONE, .out = QF_F32}
#define half_out {.bias = true, .act = QF_ACT_RELU, .out = QF_F16}
#define zp_relu_res {.bias = true, .residual = true, .act = QF_ACT_RELU, .out = QF_I8, .zp = true}
#define zp_clip {.bias = true, .act = QF_ACT_CLIP, .out = QF_I8, .zp = true}
#define zp_float {.bias = true, .residual = true, .act = QF_ACT_NONE, .out = QF_F32, .zp = true}
#define gelu_i8 {.bias = true, .act = QF_ACT_GELU, .out = QF_I8}
#define gelu_half_res {.bias = true, .residual = true, .act = QF_ACT_GELU, .out = QF_F16}
#define gelu_zp {.bias = true, .act = QF_ACT_GELU, .out = QF_I8, .zp = true}
#define silu_i8 {.bias = true, .act = QF_ACT_SILU, .out = QF_I8}
#define silu_half {.bias = true, .act = QF_ACT_SILU, .out = QF_F16}
#define silu_res_zp {.bias = true, .residual = true, .act = QF_ACT_SILU, .out = QF_I8, .zp = true}
#define sigmoid_i8 {.bias = true, .act = QF_ACT_SIGMOID, .out = QF_I8}
#define sigmoid_float {.bias = false, .act = QF_ACT_SIGMOID, .out = QF_F32}
#define hswish_i8 {.bias = true, .act = QF_ACT_HARD_SWISH, .out = QF_I8}
#define hswish_half_zp {.bias = true, .act = QF_ACT_HARD_SWISH, .out = QF_F16, .zp = true}
#define gelu_tanh_i8 {.bias = true, .act = QF_ACT_GELU_TANH, .out = QF_I8}

static const conv_case conv_cases[] = {
    /* direct path: pointwise, odd channels (not a multiple of 4) */
    CONV2(2, 5, 11, 1, 7, 9, 1, 1, 1, 1, 0, 0, 0, 0, plain),
    CONV2(1, 16, 24, 1, 13, 13, 1, 1, 2, 1, 0, 0, 0, 0, relu_res),
    CONV2(3, 3, 8, 1, 11, 10, 3, 3, 1, 1, 1, 1, 1, 1, clip_nobias),
    CONV2(2, 7, 9, 1, 12, 15, 3, 3, 2, 1, 0, 0, 1, 1, relu_res),       /* stride 2, padding at the end only */
    CONV2(1, 9, 17, 1, 9, 61, 3, 3, 1, 1, 1, 1, 1, 1, float_out),      /* rows wider than a register block */
    CONV2(2, 6, 10, 1, 16, 16, 5, 5, 2, 1, 2, 2, 2, 2, half_out),
    CONV2(1, 4, 4, 1, 14, 14, 3, 3, 1, 2, 2, 2, 2, 2, plain),          /* dilation 2 */
    CONV2(1, 5, 6, 1, 9, 11, 2, 3, 3, 1, 1, 0, 0, 2, plain),           /* stride 3, uneven window and pads */
    CONV2(1, 300, 3, 1, 5, 5, 3, 3, 1, 1, 1, 1, 1, 1, plain),          /* K = 2700: sums far from small */
    /* AMX tiles: 17 quads in groups of 9 (the last padded), 40 channels = a block of 32 and 8 */
    CONV2(1, 68, 40, 1, 9, 13, 1, 1, 1, 1, 0, 0, 0, 0, relu_res),
    CONV2(2, 96, 36, 1, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1, zp_clip),       /* 24 quads: two groups of 12, 9 taps */
    CONV2(1, 32, 32, 2, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1, plain),         /* a tile reduction per group */
    /* groups */
    CONV2(2, 8, 12, 4, 9, 9, 3, 3, 1, 1, 1, 1, 1, 1, relu_res),
    CONV2(1, 12, 6, 3, 10, 7, 3, 3, 2, 1, 1, 1, 1, 1, plain),
    /* depthwise, one and two quads per row, multiplier 2 */
    CONV2(2, 13, 13, 13, 12, 19, 3, 3, 1, 1, 1, 1, 1, 1, relu_res),
    CONV2(1, 10, 10, 10, 15, 40, 3, 3, 2, 1, 1, 1, 1, 1, clip_nobias),
    CONV2(2, 7, 7, 7, 17, 21, 5, 5, 2, 1, 2, 2, 2, 2, float_out),
    CONV2(1, 6, 6, 6, 11, 11, 7, 7, 1, 1, 3, 3, 3, 3, plain),
    CONV2(1, 5, 10, 5, 8, 9, 3, 3, 1, 1, 1, 1, 1, 1, half_out),
    CONV2(1, 4, 4, 4, 13, 13, 5, 5, 3, 1, 2, 2, 2, 2, plain),          /* the plain loop: 4*dil not a multiple of 3 */
    CONV2(1, 3, 3, 3, 10, 10, 3, 3, 1, 2, 2, 2, 2, 2, relu_res),       /* depthwise, dilation 2 */
    /* depthwise strided, one quad a row: the expanded rows in phase planes, one run of outputs */
    CONV2(2, 9, 9, 9, 14, 14, 3, 3, 2, 1, 1, 1, 1, 1, relu_res),      /* 14x14 -> 7x7 */
    CONV2(1, 4, 8, 4, 13, 11, 3, 3, 2, 2, 2, 1, 2, 3, zp_clip),       /* dilation 2: every window row in phase 0 */
    CONV2(1, 5, 5, 5, 16, 12, 4, 2, 3, 1, 1, 0, 2, 1, half_out),      /* stride 3, four window rows */
    /* 1-D and 3-D */
    {.nd = 1, .N = 2, .C = 6, .M = 5, .group = 1, .in = {23}, .k = {3}, .stride = {2}, .dil = {1}, .pad0 = {1},
     .pad1 = {1}, .ep = relu_res},
    {.nd = 1, .N = 1, .C = 6, .M = 6, .group = 6, .in = {30}, .k = {5}, .stride = {1}, .dil = {1}, .pad0 = {2},
     .pad1 = {2}, .ep = plain},
    {.nd = 3, .N = 1, .C = 3, .M = 4, .group = 1, .in = {4, 5, 6}, .k = {2, 3, 3}, .stride = {1, 2, 1},
     .dil = {1, 1, 1}, .pad0 = {0, 1, 1}, .pad1 = {1, 1, 1}, .ep = relu_res},
    /* zero points (a model quantized elsewhere): padding on every side of every path */
    CONV2(2, 7, 9, 1, 12, 15, 3, 3, 2, 1, 1, 1, 1, 1, zp_relu_res),
    CONV2(1, 9, 17, 1, 9, 61, 3, 3, 1, 1, 1, 1, 1, 1, zp_clip),
    CONV2(2, 13, 13, 13, 12, 19, 3, 3, 1, 1, 1, 1, 1, 1, zp_relu_res),
    CONV2(1, 4, 4, 4, 13, 13, 5, 5, 3, 1, 2, 2, 2, 2, zp_float),        /* the plain loop */
    {.nd = 3, .N = 1, .C = 3, .M = 4, .group = 1, .in = {4, 5, 6}, .k = {2, 3, 3}, .stride = {1, 2, 1},
     .dil = {1, 1, 1}, .pad0 = {0, 1, 1}, .pad1 = {1, 1, 1}, .ep = zp_relu_res},
    /* smooth activations in the vector epilogues (smooth_values): pointwise,
     * dense 3x3, depthwise and strided depthwise rows, every output dtype */
    CONV2(2, 16, 24, 1, 13, 13, 1, 1, 1, 1, 0, 0, 0, 0, silu_i8),
    CONV2(1, 9, 17, 1, 9, 61, 3, 3, 1, 1, 1, 1, 1, 1, silu_half),
    CONV2(2, 13, 13, 13, 12, 19, 3, 3, 1, 1, 1, 1, 1, 1, silu_res_zp),
    CONV2(2, 9, 9, 9, 14, 14, 3, 3, 2, 1, 1, 1, 1, 1, sigmoid_i8),
    CONV2(1, 68, 40, 1, 9, 13, 1, 1, 1, 1, 0, 0, 0, 0, sigmoid_float),
    CONV2(2, 7, 7, 7, 17, 21, 5, 5, 2, 1, 2, 2, 2, 2, hswish_i8),
    CONV2(1, 16, 24, 1, 13, 13, 1, 1, 2, 1, 0, 0, 0, 0, hswish_half_zp),
    CONV2(1, 10, 10, 10, 15, 40, 3, 3, 2, 1, 1, 1, 1, 1, gelu_tanh_i8),
};

START_TEST(conv_int8_every_isa)
{
    char what[64];
    snprintf(what, sizeof what, "conv case %d", _i);
    check_conv(&conv_cases[_i], 100 + (uint64_t)_i, what);
}
END_TEST

/* ---- Gemm and MatMul ------------------------------------------------------------------ */

typedef struct gemm_case {
    bool matmul, trans_b;
    int64_t batch, rows, K, N; /* MatMul: X (batch, rows, K); Gemm: X (rows, K) */
    epilogue ep;
} gemm_case;

static const gemm_case gemm_cases[] = {
    {.rows = 1, .K = 1, .N = 1, .ep = plain},
    {.rows = 3, .K = 5, .N = 10, .trans_b = true, .ep = relu_res},
    {.rows = 17, .K = 67, .N = 33, .ep = clip_nobias},
    {.rows = 9, .K = 1280, .N = 100, .trans_b = true, .ep = float_out},
    {.rows = 2, .K = 64, .N = 49, .ep = half_out},
    {.matmul = true, .batch = 2, .rows = 3, .K = 7, .N = 19, .ep = relu_res},
    {.matmul = true, .batch = 3, .rows = 5, .K = 130, .N = 8, .ep = plain},
    {.rows = 17, .K = 67, .N = 33, .trans_b = true, .ep = zp_relu_res},
    {.matmul = true, .batch = 2, .rows = 3, .K = 7, .N = 19, .ep = zp_clip},
    /* smooth activations vectorized (smooth_values): chunks of 64, vectors of 16 and 8, tails */
    {.rows = 9, .K = 200, .N = 150, .trans_b = true, .ep = gelu_i8},
    {.rows = 5, .K = 64, .N = 37, .ep = gelu_half_res},
    {.matmul = true, .batch = 2, .rows = 3, .K = 40, .N = 70, .ep = gelu_zp},
    {.rows = 9, .K = 200, .N = 150, .trans_b = true, .ep = silu_res_zp},
    {.rows = 5, .K = 64, .N = 37, .ep = hswish_half_zp},
    {.matmul = true, .batch = 2, .rows = 3, .K = 40, .N = 70, .ep = sigmoid_float},
    {.rows = 4, .K = 96, .N = 83, .trans_b = true, .ep = gelu_tanh_i8},
};

START_TEST(gemm_int8_every_isa)
{
    const gemm_case *c = &gemm_cases[_i];
    rng = 500 + (uint64_t)_i;
    qf_graph *g = qf_graph_new("int8_gemm");
    g->opset = 13;
    const int64_t rows = c->matmul ? c->batch * c->rows : c->rows;
    int64_t xd[3] = {c->batch, c->rows, c->K}, wd[2] = {c->trans_b ? c->N : c->K, c->trans_b ? c->K : c->N};
    int8_t *x = random_i8(rows * c->K), *w = random_i8(c->K * c->N);
    int in[5];
    in[0] = c->matmul ? qf_graph_add_value(g, "x", QF_I8, 3, xd) : qf_graph_add_value(g, "x", QF_I8, 2, xd + 1);
    g->values[in[0]].scale = 0.02f;
    in[1] = const_value(g, "w", QF_I8, 2, wd, w);
    float s_out;
    add_operands(g, c->N, &c->ep, in, &s_out);
    int y = value(g, "y");
    qf_node *n = op(g, "gemm", c->matmul ? QF_OP_MATMUL : QF_OP_GEMM, 4, in, y);
    if (c->trans_b) set_int(n, "transB", 1);
    set_epilogue(g, n, &c->ep, s_out);
    OK(qfi_ops[n->op]->parse(g, n));
    OK(qfi_ops[n->op]->infer(g, n));
    int8_t *res = NULL;
    if (c->ep.residual) {
        const qf_value *yv = &g->values[y];
        int r = qf_graph_add_value(g, "r", QF_I8, yv->ndim, yv->dims);
        g->values[r].scale = 0.05f;
        g->values[r].zero_point = c->ep.zp ? ZR : 0;
        res = random_i8(rows * c->N);
        n = &g->nodes[0];
        n->in = realloc(n->in, 5 * sizeof *n->in);
        n->in[4] = r;
        n->n_in = 5;
        OK(qfi_ops[n->op]->parse(g, n));
    }
    /* the reference: int64 sums, then the epilogue row by row */
    const qf_value *yv = &g->values[y];
    const size_t esz = qf_dtype_info(yv->dtype)->size;
    float *m = malloc((size_t)c->N * sizeof *m);
    qfi_requant rq;
    qfi_requant_init(&rq, m, c->N, 0.02f, qfi_in(g, n, 3)->data, qfi_in(g, n, 2) ? qfi_in(g, n, 2)->data : NULL,
                     res ? 0.05f : 0.0f, res && c->ep.zp ? ZR : 0, yv->dtype, yv->scale, yv->zero_point, n->act,
                     n->act_lo, n->act_hi);
    int32_t *acc = malloc((size_t)c->N * sizeof *acc);
    void *ref = malloc(qf_value_bytes(yv));
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t j = 0; j < c->N; j++) {
            int64_t s = 0;
            for (int64_t k = 0; k < c->K; k++)
                s += (int64_t)x[r * c->K + k] * w[c->trans_b ? j * c->K + k : k * c->N + j];
            acc[j] = (int32_t)s;
        }
        qfi_requantize(&rq, acc, res ? res + r * c->N : NULL, c->N, 0, 1, (char *)ref + (size_t)(r * c->N) * esz);
    }
    const void *ins[5] = {x, w, qfi_in(g, n, 2) ? qfi_in(g, n, 2)->data : NULL, qfi_in(g, n, 3)->data, res};
    char what[64];
    snprintf(what, sizeof what, "gemm case %d", _i);
    check_all_isas(g, ins, ref, what);
    free(ref);
    free(acc);
    free(m);
    free(x);
    free(res);
    qf_graph_free(g);
}
END_TEST

/* ---- bulk conversions (convert_simd.c) ------------------------------------------------- */

/* Every half, and floats around every half's rounding boundary plus the
 * specials, through the bulk functions and the element ones: the same bits. */
START_TEST(conversions_match_the_element_functions)
{
    enum { NH = 65536, NF = 4 * NH + 16 };
    uint16_t *h = malloc(NH * sizeof *h), *h2 = malloc(NF * sizeof *h2);
    float *f = malloc(NF * sizeof *f), *f2 = malloc(NF * sizeof *f2);
    int8_t *q = malloc(NF), *q2 = malloc(NF);
    for (int i = 0; i < NH; i++) h[i] = (uint16_t)i; /* signaling and quiet NaNs, Inf, subnormals */
    qfi_cpu_f16_to_f32(h, f, NH);
    for (int i = 0; i < NH; i++) ck_assert_uint_eq(qfi_f32_bits(f[i]), qfi_f32_bits(qf_f16_to_f32(h[i])));
    const float s = 0.0173f;
    for (int z = 0; z <= ZX; z += ZX) {
        qfi_cpu_quantize(h, QF_F16, q, NH, s, z);
        for (int i = 0; i < NH; i++) ck_assert_int_eq(q[i], qfi_quantize_f32_zp(qf_f16_to_f32(h[i]), s, z));
    }
    /* each half's value, the ties just beside it, and specials */
    for (int i = 0; i < NH; i++) {
        const uint32_t b = qfi_f32_bits(qf_f16_to_f32(h[i]));
        f[4 * i] = qfi_bits_f32(b), f[4 * i + 1] = qfi_bits_f32(b + 0x1000u);
        f[4 * i + 2] = qfi_bits_f32(b + 0xfffu), f[4 * i + 3] = qfi_bits_f32(b - 0x1000u);
    }
    const float specials[16] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1e-45f, -1e-45f, 65504.0f, 65520.0f,
                                -65520.0f, 2.98e-8f, 5.96e-8f, 127.5f * s, -128.5f * s, 1e30f};
    memcpy(f + 4 * NH, specials, sizeof specials);
    qfi_cpu_f32_to_f16(f, h2, NF);
    for (int i = 0; i < NF; i++) ck_assert_uint_eq(h2[i], qf_f32_to_f16(f[i]));
    for (int i = 0; i < 256; i++) q2[i] = (int8_t)(i - 128);
    for (int z = ZY; z <= ZX; z += ZX - ZY) {
        qfi_cpu_quantize(f, QF_F32, q, NF, s, z);
        for (int i = 0; i < NF; i++) ck_assert_int_eq(q[i], qfi_quantize_f32_zp(f[i], s, z));
        qfi_cpu_dequantize(q2, f2, 256, s, z);
        for (int i = 0; i < 256; i++)
            ck_assert_uint_eq(qfi_f32_bits(f2[i]), qfi_f32_bits(qfi_dequantize_i8_zp(q2[i], s, z)));
    }
    free(h), free(h2), free(f), free(f2), free(q), free(q2);
}
END_TEST

/* The quantization by a product with 1/s (the CUDA binary kernel's, issue
 * 14) gives qfi_quantize_f32_zp's level: random values over the int8 range
 * and beyond, the floats beside every half-integer level boundary (where
 * x r and x / s can round apart), zero points, specials and scales of
 * every size, including one whose reciprocal is no normal float. */
START_TEST(quantize_by_reciprocal_matches_division)
{
    const float scales[] = {0.0173f, 1.0f, 0.1f, 3.0f, 1e-4f, 37.7f, 6.1e-5f, 0.33333334f, 1e38f};
    const int32_t zps[] = {0, -128, 17, 127, -3};
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-45f, 3e38f, -3e38f};
    long slow = 0, total = 0;
    for (size_t k = 0; k < QF_ARRAY_LEN(scales); k++) {
        const float s = scales[k], r = 1.0f / s, rn = isnormal(r) ? r : 0.0f;
        for (size_t j = 0; j < QF_ARRAY_LEN(zps); j++) {
            const int32_t z = zps[j];
            for (size_t i = 0; i < QF_ARRAY_LEN(specials); i++)
                ck_assert_int_eq(qfi_quantize_f32_zp_fast(specials[i], s, rn, z), qfi_quantize_f32_zp(specials[i], s, z));
            for (int i = 0; i < 20000; i++) {
                const float x = frand(-300.0f, 300.0f) * s;
                ck_assert_msg(qfi_quantize_f32_zp_fast(x, s, rn, z) == qfi_quantize_f32_zp(x, s, z), "x %a s %a z %d",
                              (double)x, (double)s, z);
            }
            /* 64 floats either side of (level + 0.5) * s for every level */
            for (int level = -300; level <= 300; level++) {
                const float b = ((float)level + 0.5f) * s;
                const uint32_t bits = qfi_f32_bits(b);
                for (int d = -64; d <= 64; d++) {
                    const float x = qfi_bits_f32(bits + (uint32_t)d);
                    const float p = x * rn;
                    slow += rn == 0.0f || !(fabsf(p - rintf(p)) < 0.5f - fabsf(p) * 2.5e-7f);
                    total++;
                    ck_assert_msg(qfi_quantize_f32_zp_fast(x, s, rn, z) == qfi_quantize_f32_zp(x, s, z),
                                  "x %a s %a z %d", (double)x, (double)s, z);
                }
            }
        }
    }
    printf("quantize by 1/s: %ld of %ld boundary values took the division\n", slow, total);
}
END_TEST

/* QFORGE_CPU_INT8_ISA picks the kernels; a name the CPU cannot run leaves the widest. */
START_TEST(isa_from_environment)
{
    qfi_i8_isa widest = qfi_cpu_i8_isa();
    setenv("QFORGE_CPU_INT8_ISA", "portable", 1);
    ck_assert_int_eq(qfi_cpu_i8_isa(), QFI_I8_PORTABLE);
    setenv("QFORGE_CPU_INT8_ISA", "no-such-isa", 1);
    ck_assert_int_eq(qfi_cpu_i8_isa(), widest);
    unsetenv("QFORGE_CPU_INT8_ISA");
    printf("INT8 kernels on this CPU: %s\n", qfi_cpu_i8_isa_name(widest));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("int8_cpu");
    TCase *tc = tcase_create("kernels");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, conv_int8_every_isa, 0, (int)(sizeof conv_cases / sizeof conv_cases[0]));
    tcase_add_loop_test(tc, gemm_int8_every_isa, 0, (int)(sizeof gemm_cases / sizeof gemm_cases[0]));
    tcase_add_test(tc, conversions_match_the_element_functions);
    tcase_add_test(tc, quantize_by_reciprocal_matches_division);
    tcase_add_test(tc, isa_from_environment);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
