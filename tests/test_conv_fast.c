/* Tests of the direct FP32 convolution (runtime/cpu/conv_direct.c): every
 * vector width this CPU runs, on fixed and random shapes, against a naive
 * convolution in double, with guards on the declared scratch and the output. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../runtime/cpu/kernels.h"
#include "internal.h"
#include "ops/nn.h"
#include "ops/ops.h"
#include "testutil.h"

/* A group-1 2-D convolution: x (N,C,H,W), w (M,C,kh,kw). */
typedef struct fcase {
    int64_t N, C, M, H, W, kh, kw, dh, dw;
    int64_t pt, pb, pl, pr; /* padding top, bottom, left, right */
    bool bias;
    int64_t sh, sw; /* strides; 0 (left out) means 1 */
} fcase;

static int64_t stride_h(const fcase *f) { return f->sh > 0 ? f->sh : 1; }
static int64_t stride_w(const fcase *f) { return f->sw > 0 ? f->sw : 1; }
/* ONNX's output size: windows that fit in the padded input, every stride-th. */
static int64_t out_h(const fcase *f) { return (f->H + f->pt + f->pb - f->dh * (f->kh - 1) - 1) / stride_h(f) + 1; }
static int64_t out_w(const fcase *f) { return (f->W + f->pl + f->pr - f->dw * (f->kw - 1) - 1) / stride_w(f) + 1; }
/* The padded input holds at least one window along each axis. */
static bool has_output(const fcase *f)
{
    return f->H + f->pt + f->pb - f->dh * (f->kh - 1) >= 1 && f->W + f->pl + f->pr - f->dw * (f->kw - 1) >= 1;
}

/* The geometry qfi_conv_geometry would give a 2-D Conv (nsp 2: index 0 is the unit depth). */
static qfi_conv_geom make_geom(const fcase *f)
{
    qfi_conv_geom g = {.N = f->N, .C = f->C, .M = f->M, .group = 1, .has_bias = f->bias};
    qfi_window *w = &g.w;
    w->nsp = 2;
    int64_t in[3] = {1, f->H, f->W}, k[3] = {1, f->kh, f->kw}, d[3] = {1, f->dh, f->dw};
    int64_t st[3] = {1, stride_h(f), stride_w(f)};
    int64_t pb[3] = {0, f->pt, f->pl}, pe[3] = {0, f->pb, f->pr}, out[3] = {1, out_h(f), out_w(f)};
    for (int s = 0; s < 3; s++) {
        w->in[s] = in[s], w->k[s] = k[s], w->dil[s] = d[s], w->stride[s] = st[s];
        w->pad[s] = pb[s], w->pad_end[s] = pe[s], w->out[s] = out[s];
    }
    return g;
}

/* y[n,m,oh,ow] = b[m] + sum over c, kh, kw of x[n,c,oh*sh-pt+kh*dh,ow*sw-pl+kw*dw] * w[m,c,kh,kw], in double. */
static double *naive(const fcase *f, const float *x, const float *w, const float *b)
{
    const int64_t Ho = out_h(f), Wo = out_w(f);
    double *y = malloc((size_t)(f->N * f->M * Ho * Wo) * sizeof *y);
    for (int64_t n = 0; n < f->N; n++)
        for (int64_t m = 0; m < f->M; m++)
            for (int64_t oh = 0; oh < Ho; oh++)
                for (int64_t ow = 0; ow < Wo; ow++) {
                    double acc = b ? b[m] : 0.0;
                    for (int64_t c = 0; c < f->C; c++)
                        for (int64_t i = 0; i < f->kh; i++)
                            for (int64_t j = 0; j < f->kw; j++) {
                                int64_t ih = oh * stride_h(f) - f->pt + i * f->dh;
                                int64_t iw = ow * stride_w(f) - f->pl + j * f->dw;
                                if (ih < 0 || ih >= f->H || iw < 0 || iw >= f->W) continue;
                                acc += (double)x[((n * f->C + c) * f->H + ih) * f->W + iw] *
                                       (double)w[((m * f->C + c) * f->kh + i) * f->kw + j];
                            }
                    y[((n * f->M + m) * Ho + oh) * Wo + ow] = acc;
                }
    return y;
}

static float *rand_floats(int64_t n)
{
    float *p = malloc((size_t)(n ? n : 1) * sizeof *p);
    for (int64_t i = 0; i < n; i++) p[i] = frand(-1.0f, 1.0f);
    return p;
}

#define GUARD 64                 /* floats checked past the end of the scratch and of y */
static const float SENTINEL = -1234.5f;

/* "N2 C3 M8 11x9 k3x2 d2x3 s1x1 pads 2,2,1,0 bias 1" for failure messages. */
static void describe(const fcase *f, char *buf, size_t size)
{
    snprintf(buf, size, "N%lld C%lld M%lld %lldx%lld k%lldx%lld d%lldx%lld s%lldx%lld pads %lld,%lld,%lld,%lld bias %d",
             (long long)f->N, (long long)f->C, (long long)f->M, (long long)f->H, (long long)f->W, (long long)f->kh,
             (long long)f->kw, (long long)f->dh, (long long)f->dw, (long long)stride_h(f), (long long)stride_w(f),
             (long long)f->pt, (long long)f->pb, (long long)f->pl, (long long)f->pr, f->bias);
}

/* Every error must be within 1e-5 of the output's scale (its largest |value|):
 * float rounding over a few hundred terms is ~1e-7 of it, while any wrong tap,
 * offset or channel is of the order of the scale itself. y must hold GUARD
 * sentinels after its n values. */
static void check_against(const fcase *f, const float *y, const double *ref, const char *what)
{
    const int64_t n = f->N * f->M * out_h(f) * out_w(f);
    char shape[160];
    describe(f, shape, sizeof shape);
    double scale = 0.0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(ref[i]));
    if (scale == 0.0) scale = 1.0;
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(fabs(y[i] - ref[i]) <= 1e-5 * scale, "%s: %s: y[%lld] = %.9g, want %.9g (scale %g)", what, shape,
                      (long long)i, y[i], ref[i], scale);
    for (int64_t i = n; i < n + GUARD; i++)
        ck_assert_msg(y[i] == SENTINEL, "%s: %s: wrote y[%lld] past the end", what, shape, (long long)i);
}

/* Runs the direct kernel of every width this CPU has, on 1 and 2 threads. */
static void run_case(const fcase *f)
{
    qfi_conv_geom geo = make_geom(f);
    ck_assert(qfi_cpu_conv_direct_supports(&geo));
    const int64_t ysz = f->N * f->M * out_h(f) * out_w(f);
    float *x = rand_floats(f->N * f->C * f->H * f->W), *w = rand_floats(f->M * f->C * f->kh * f->kw);
    float *b = f->bias ? rand_floats(f->M) : NULL;
    double *ref = naive(f, x, w, b);
    float *y = malloc((size_t)(ysz + GUARD) * sizeof *y);
    for (int isa = QFI_DIRECT_PORTABLE; isa <= (int)qfi_cpu_direct_isa(); isa++)
        for (int threads = 1; threads <= 2; threads++) {
            size_t bytes = qfi_cpu_conv_direct_scratch(&geo, qfi_cpu_conv_direct_slots(&geo, threads));
            size_t nf = bytes / sizeof(float);
            float *scratch = malloc(bytes + GUARD * sizeof(float));
            for (size_t i = 0; i < nf + GUARD; i++) scratch[i] = SENTINEL;
            for (int64_t i = 0; i < ysz + GUARD; i++) y[i] = SENTINEL;
            qfi_cpu_conv_direct(&geo, x, w, b, y, scratch, threads, (qfi_direct_isa)isa);
            char what[64];
            snprintf(what, sizeof what, "direct isa %d, %d thread(s)", isa, threads);
            check_against(f, y, ref, what);
            for (size_t i = nf; i < nf + GUARD; i++)
                ck_assert_msg(scratch[i] == SENTINEL, "%s: used scratch float %zu of %zu declared", what, i, nf);
            free(scratch);
        }
    free(x);
    free(w);
    free(b);
    free(ref);
    free(y);
}

static const fcase fixed_cases[] = {
    /* ResNet-20's layers (batch 2): 3x3 pad 1 at 16/32/64 channels, and the first conv */
    {2, 16, 16, 32, 32, 3, 3, 1, 1, 1, 1, 1, 1, true},
    {2, 32, 32, 16, 16, 3, 3, 1, 1, 1, 1, 1, 1, true},
    {2, 64, 64, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1, true},
    {2, 3, 16, 32, 32, 3, 3, 1, 1, 1, 1, 1, 1, false},
    /* 1x1 images, with and without padding */
    {3, 5, 7, 1, 1, 3, 3, 1, 1, 1, 1, 1, 1, true},
    {2, 4, 9, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, false},
    /* channel counts that leave short register blocks; M = 1 */
    {1, 17, 9, 7, 5, 3, 3, 1, 1, 1, 1, 1, 1, true},
    {3, 2, 1, 6, 11, 3, 3, 1, 1, 1, 1, 1, 1, true},
    {2, 1, 13, 9, 9, 5, 5, 1, 1, 2, 2, 2, 2, false},
    /* no padding, asymmetric padding, padding wider than the kernel reaches */
    {2, 3, 4, 7, 6, 3, 3, 1, 1, 0, 0, 0, 0, true},
    {2, 3, 5, 9, 8, 3, 2, 1, 1, 1, 2, 0, 1, false},
    {1, 2, 3, 4, 5, 3, 3, 1, 1, 3, 3, 2, 4, true},
    /* dilation, and a kernel as wide as the image */
    {2, 3, 8, 11, 9, 3, 2, 2, 3, 2, 2, 1, 0, true},
    {2, 4, 6, 5, 7, 5, 7, 1, 1, 0, 0, 0, 0, true},
    /* 1-D as 2-D with one row */
    {2, 6, 10, 1, 37, 1, 5, 1, 2, 0, 0, 4, 4, true},
    /* a grid longer than many register blocks, odd width */
    {1, 8, 24, 45, 33, 3, 3, 1, 1, 1, 1, 1, 1, true},
    /* strided: ResNet-20's downsampling 3x3 and 1x1, odd sizes, strides (3,2)
     * with dilation, a stride larger than the kernel, 1-D stride 2 */
    {2, 16, 32, 32, 32, 3, 3, 1, 1, 1, 1, 1, 1, true, 2, 2},
    {2, 16, 32, 32, 32, 1, 1, 1, 1, 0, 0, 0, 0, true, 2, 2},
    {2, 5, 7, 9, 8, 3, 3, 1, 1, 1, 0, 2, 1, false, 2, 2},
    {1, 3, 9, 13, 11, 3, 2, 2, 3, 2, 1, 1, 2, true, 3, 2},
    {2, 4, 6, 10, 10, 2, 2, 1, 1, 0, 0, 0, 0, true, 3, 3},
    {2, 6, 5, 1, 21, 1, 3, 1, 1, 0, 0, 1, 1, true, 1, 2},
    {1, 3, 4, 1, 1, 3, 3, 1, 1, 1, 1, 1, 1, true, 2, 2},
};

START_TEST(fixed_shapes_match_naive)
{
    rng = 1000 + (uint64_t)_i;
    run_case(&fixed_cases[_i]);
}
END_TEST

static int64_t irand(int64_t lo, int64_t hi) { return lo + (int64_t)frand(0.0f, (float)(hi - lo + 1) - 0.01f); }

/* Random shapes, each run through every kernel width and thread count. */
START_TEST(random_shapes_match_naive)
{
    rng = 77 + (uint64_t)_i;
    fcase f;
    do {
        f = (fcase){.N = irand(1, 3), .C = irand(1, 20), .M = irand(1, 20), .H = irand(1, 13), .W = irand(1, 13),
                    .kh = irand(1, 5), .kw = irand(1, 5), .dh = irand(1, 2), .dw = irand(1, 2), .bias = irand(0, 1),
                    .sh = irand(1, 3), .sw = irand(1, 3)};
        f.pt = irand(0, f.kh), f.pb = irand(0, f.kh), f.pl = irand(0, f.kw), f.pr = irand(0, f.kw);
    } while (!has_output(&f));
    run_case(&f);
}
END_TEST

/* Random 3x3 stride-1 shapes, the common case: odd and even sizes, 1-row
 * images, padding up to the whole kernel on each side. */
START_TEST(random_3x3_shapes_match_naive)
{
    rng = 555 + (uint64_t)_i;
    fcase f;
    do {
        f = (fcase){.N = irand(1, 3), .C = irand(1, 24), .M = irand(1, 24), .H = irand(1, 19), .W = irand(1, 19),
                    .kh = 3, .kw = 3, .dh = 1, .dw = 1, .bias = irand(0, 1)};
        f.pt = irand(0, 3), f.pb = irand(0, 3), f.pl = irand(0, 3), f.pr = irand(0, 3);
    } while (!has_output(&f));
    run_case(&f);
}
END_TEST

/* The direct kernel claims only what it computes: group 1, 1-D/2-D. */
START_TEST(supports_only_its_windows)
{
    fcase f = {2, 4, 4, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1, true};
    qfi_conv_geom g = make_geom(&f);
    ck_assert(qfi_cpu_conv_direct_supports(&g));
    qfi_conv_geom s2 = g; /* stride 2 with its output size, and with a wrong one */
    s2.w.stride[2] = 2;
    s2.w.out[2] = 4;
    ck_assert(qfi_cpu_conv_direct_supports(&s2));
    s2.w.out[2] = 5;
    ck_assert(!qfi_cpu_conv_direct_supports(&s2));
    qfi_conv_geom grouped = g;
    grouped.group = 2;
    ck_assert(!qfi_cpu_conv_direct_supports(&grouped));
    qfi_conv_geom deep = g; /* 3-D: depth 3, kernel depth 3, padded */
    deep.w.in[0] = 3, deep.w.k[0] = 3, deep.w.pad[0] = deep.w.pad_end[0] = 1, deep.w.out[0] = 3;
    ck_assert(!qfi_cpu_conv_direct_supports(&deep));
    qfi_conv_geom odd = g; /* an output size that is not the stride-1 one */
    odd.w.out[1] = 7;
    ck_assert(!qfi_cpu_conv_direct_supports(&odd));
}
END_TEST

/* Padding along any one axis counts, and an end padding only where a tap
 * reaches it. A 1x7 conv padded along W alone read as unpadded once (only the
 * first nsp of the three right-aligned dims were looked at): the CUDA engine
 * then gave Inception-v3's 1x7 convs with an input zero point to cuDNN, which
 * pads with zeros, and GPU agreed with CPU on 0.14 of the images. */
START_TEST(reads_padding_on_every_axis)
{
    const fcase none = {1, 4, 4, 8, 8, 3, 3, 1, 1, 0, 0, 0, 0, true};
    const fcase w_only = {1, 4, 4, 8, 8, 1, 7, 1, 1, 0, 0, 3, 3, true};
    const fcase h_only = {1, 4, 4, 8, 8, 7, 1, 1, 1, 3, 3, 0, 0, true};
    const fcase right_only = {1, 4, 4, 8, 8, 1, 2, 1, 1, 0, 0, 0, 1, true};
    /* stride 2, W 8, k 2, pad right 1: the last window is 6..7, the pad unread */
    const fcase right_unread = {1, 4, 4, 8, 8, 1, 2, 1, 1, 0, 0, 0, 1, true, 1, 2};
    qfi_conv_geom g = make_geom(&none);
    ck_assert(!qfi_window_reads_padding(&g.w));
    g = make_geom(&w_only);
    ck_assert(qfi_window_reads_padding(&g.w));
    g = make_geom(&h_only);
    ck_assert(qfi_window_reads_padding(&g.w));
    g = make_geom(&right_only);
    ck_assert(qfi_window_reads_padding(&g.w));
    g = make_geom(&right_unread);
    ck_assert_int_eq(g.w.out[2], 4);
    ck_assert(!qfi_window_reads_padding(&g.w));
}
END_TEST

/* One Conv node (x (3,16,10,9), pads 1,0,2,1, bias) through the CPU engine on
 * 2 threads: the scratch the engine plans from qfi_cpu_conv_scratch must
 * carry whichever path conv.c picks. */
START_TEST(engine_conv_matches_naive)
{
    rng = 4242;
    fcase f = {3, 16, 24, 10, 9, 3, 3, 1, 1, 1, 2, 0, 1, true};
    qf_graph *g = qf_graph_new("conv_fast");
    int x = input(g, "x", 4, (int64_t[]){f.N, f.C, f.H, f.W});
    int w = weight(g, "w", 4, (int64_t[]){f.M, f.C, f.kh, f.kw}, -1.0f, 1.0f);
    int b = weight(g, "b", 1, (int64_t[]){f.M}, -1.0f, 1.0f);
    int y = value(g, "y");
    qf_node *n = op(g, "conv", QF_OP_CONV, 3, (int[]){x, w, b}, y);
    set_ints(n, "pads", 4, (int64_t[]){f.pt, f.pl, f.pb, f.pr});
    output(g, y);
    for (int i = 0; i < g->n_nodes; i++) ck_assert_int_eq(qfi_ops[g->nodes[i].op]->parse(g, &g->nodes[i]), QF_OK);
    OK(qf_graph_prepare(g, (int)f.N));
    float *xin = random_input(g, 99, -1.0f, 1.0f);
    float *out = run(g, xin, NULL, NULL);
    double *ref = naive(&f, xin, g->values[w].data, g->values[b].data);
    const int64_t ysz = f.N * f.M * out_h(&f) * out_w(&f);
    float *padded = malloc((size_t)(ysz + GUARD) * sizeof *padded); /* check_against also reads the guard */
    memcpy(padded, out, (size_t)ysz * sizeof *out);
    for (int64_t i = ysz; i < ysz + GUARD; i++) padded[i] = SENTINEL;
    check_against(&f, padded, ref, "engine");
    free(padded);
    free(ref);
    free(out);
    free(xin);
    qf_graph_free(g);
}
END_TEST

#define RANDOM_CASES 60

static Suite *suite(void)
{
    Suite *s = suite_create("conv_fast");
    TCase *tc = tcase_create("direct");
    tcase_add_loop_test(tc, fixed_shapes_match_naive, 0, (int)QF_ARRAY_LEN(fixed_cases));
    tcase_add_loop_test(tc, random_shapes_match_naive, 0, RANDOM_CASES);
    tcase_add_loop_test(tc, random_3x3_shapes_match_naive, 0, RANDOM_CASES / 2);
    tcase_add_test(tc, supports_only_its_windows);
    tcase_add_test(tc, reads_padding_on_every_axis);
    tcase_add_test(tc, engine_conv_matches_naive);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return run_suite(suite()); }
