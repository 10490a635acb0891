/* Unit tests for the compute ops of the CPU engine (Conv, ConvTranspose, Gemm,
 * MatMul, MaxPool/AveragePool, global pools, BatchNormalization, Softmax,
 * ReduceMean): every kernel against a naive double-precision loop written
 * here, on random inputs over shapes and attribute combinations; the rows of
 * Gemm and tall MatMuls the same bits at any row count; inferred shapes, FLOP
 * counts, the errors of unsupported forms, and one small network through
 * qf_graph_prepare and the CPU engine. */
#include <cblas.h>
#include <check.h>
#include <float.h>
#include <math.h>
#include "internal.h"
#include "attention.h"
#include "ops/ops.h"
#include "../runtime/cpu/kernels.h"
#include "testutil.h"

/* ---- a one-node graph under test -------------------------------------------------- */

#define MAX_IO 6

typedef struct one {
    qf_graph *g;
    int n_in, n_out;
    int in[MAX_IO], out[MAX_IO];
    float *x[MAX_IO]; /* input data, NULL for an omitted input */
    float *y[MAX_IO]; /* outputs after one_run() */
} one;

static one *one_new(int64_t opset)
{
    one *t = calloc(1, sizeof *t);
    t->g = qf_graph_new("test.onnx");
    t->g->opset = opset;
    return t;
}

static void one_free(one *t)
{
    for (int k = 0; k < MAX_IO; k++) {
        free(t->x[k]);
        free(t->y[k]);
    }
    qf_graph_free(t->g);
    free(t);
}

/* Adds an f32 input filled with uniform values in [lo, hi); returns its data. */
static float *one_input_range(one *t, int ndim, const int64_t *dims, float lo, float hi)
{
    char name[16];
    snprintf(name, sizeof name, "in%d", t->n_in);
    int v = qf_graph_add_value(t->g, name, QF_F32, ndim, dims);
    ck_assert_int_ge(v, 0);
    int64_t n = qfi_numel(ndim, dims);
    float *d = malloc((size_t)(n ? n : 1) * sizeof *d);
    for (int64_t i = 0; i < n; i++) d[i] = frand(lo, hi);
    t->in[t->n_in] = v;
    t->x[t->n_in++] = d;
    return d;
}

static float *one_input(one *t, int ndim, const int64_t *dims) { return one_input_range(t, ndim, dims, -1.0f, 1.0f); }

static void one_skip_input(one *t) { t->in[t->n_in++] = -1; }

/* Adds the node with `n_out` outputs (shapes left for inference). */
static qf_node *one_node(one *t, qf_op op, int n_out)
{
    for (int k = 0; k < n_out; k++) {
        char name[16];
        snprintf(name, sizeof name, "out%d", k);
        t->out[k] = qf_graph_add_value(t->g, name, QF_F32, 0, NULL);
    }
    t->n_out = n_out;
    ck_assert_int_eq(qf_graph_add_node(t->g, "node0", op, t->n_in, t->in, n_out, t->out), 0);
    return &t->g->nodes[0];
}

static void set_str(qf_node *n, const char *name, const char *s) { attr(n, name, QF_ATTR_STRING)->s = strdup(s); }

/* Parses, infers and runs the node: through qfi_cpu_run_node (one thread) when
 * threads == 1, else with explicit kernel arguments so the threaded paths run. */
static qf_status one_run(one *t, int threads)
{
    qf_graph *g = t->g;
    qf_node *n = &g->nodes[0];
    /* the harness dispatches the node, so it adds the context as the importer does */
    qf_status st = qfi_ops[n->op]->parse(g, n);
    if (st == QF_OK) st = qfi_ops[n->op]->infer(g, n);
    if (st != QF_OK) return qfi_error_node(st, g, n);
    const void *in[MAX_IO];
    void *out[MAX_IO];
    for (int k = 0; k < t->n_in; k++) in[k] = t->in[k] >= 0 ? (t->x[k] ? (void *)t->x[k] : g->values[t->in[k]].data) : NULL;
    for (int k = 0; k < t->n_out; k++) {
        size_t bytes = qf_value_bytes(&g->values[t->out[k]]);
        free(t->y[k]);
        t->y[k] = malloc(bytes ? bytes : 1);
        for (size_t i = 0; i < bytes / sizeof(float); i++) t->y[k][i] = NAN; /* every element must be written */
        out[k] = t->y[k];
    }
    if (threads == 1) return qfi_cpu_run_node(g, n, in, out);
    size_t sb = qfi_cpu_kernel_of(n->op)->scratch ? qfi_cpu_kernel_of(n->op)->scratch(g, n, threads) : 0;
    void *scratch = sb ? malloc(sb) : NULL;
    qfi_kernel_args a = {.g = g, .n = n, .in = in, .out = out, .scratch = scratch, .threads = threads};
    st = qfi_cpu_kernel_of(n->op)->run(&a);
    free(scratch);
    return st == QF_OK ? st : qfi_error_node(st, g, n);
}

static const qf_value *one_y(const one *t, int k) { return &t->g->values[t->out[k]]; }

static void check_shape(const one *t, int ndim, const int64_t *dims)
{
    const qf_value *v = one_y(t, 0);
    ck_assert_int_eq(v->dtype, QF_F32);
    ck_assert_int_eq(v->ndim, ndim);
    for (int i = 0; i < ndim; i++) ck_assert_msg(v->dims[i] == dims[i], "dim %d: got %lld, want %lld", i,
                                                 (long long)v->dims[i], (long long)dims[i]);
}

/* Max error relative to the reference's scale; fails on the first element off. */
static void check_close(const float *got, const double *want, int64_t n, double tol, const char *what)
{
    for (int64_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - want[i]);
        ck_assert_msg(err <= tol * (1.0 + fabs(want[i])), "%s: element %lld is %.7g, want %.7g", what, (long long)i,
                      (double)got[i], want[i]);
    }
}

/* ---- reference window geometry (ONNX spec formulas, written out independently) ---- */

typedef struct win {
    int nsp;
    int64_t in[3], k[3], s[3], d[3], pb[3], pe[3];
    const char *auto_pad; /* NULL = NOTSET */
    bool ceil;
    int64_t out[3]; /* filled by ref_window */
} win;

static void ref_window(win *w)
{
    for (int i = 0; i < w->nsp; i++) {
        int64_t s = w->s[i] ? w->s[i] : 1, d = w->d[i] ? w->d[i] : 1;
        w->s[i] = s;
        w->d[i] = d;
        int64_t ek = (w->k[i] - 1) * d + 1;
        if (w->auto_pad && strncmp(w->auto_pad, "SAME", 4) == 0) {
            w->out[i] = (w->in[i] + s - 1) / s;
            int64_t total = (w->out[i] - 1) * s + ek - w->in[i];
            if (total < 0) total = 0;
            bool upper = strcmp(w->auto_pad, "SAME_UPPER") == 0;
            w->pb[i] = upper ? total / 2 : (total + 1) / 2;
            w->pe[i] = total - w->pb[i];
            continue;
        }
        if (w->auto_pad && strcmp(w->auto_pad, "VALID") == 0) w->pb[i] = w->pe[i] = 0;
        double span = (double)(w->in[i] + w->pb[i] + w->pe[i] - ek) / (double)s;
        w->out[i] = (int64_t)(w->ceil ? ceil(span) : floor(span)) + 1;
        if (w->ceil && (w->out[i] - 1) * s >= w->in[i] + w->pb[i]) w->out[i]--;
    }
}

/* Right-aligns the first nsp values of v into 3 (leading `fill`). */
static void to3(int nsp, const int64_t *v, int64_t fill, int64_t *o)
{
    for (int i = 0; i < 3; i++) o[i] = i < 3 - nsp ? fill : v[i - (3 - nsp)];
}

static void set_window_attrs(qf_node *n, const win *w, bool give_kernel)
{
    int nsp = w->nsp;
    if (give_kernel) set_ints(n, "kernel_shape", nsp, w->k);
    set_ints(n, "strides", nsp, w->s);
    set_ints(n, "dilations", nsp, w->d);
    if (w->auto_pad) {
        set_str(n, "auto_pad", w->auto_pad);
    } else {
        int64_t pads[6];
        for (int i = 0; i < nsp; i++) {
            pads[i] = w->pb[i];
            pads[nsp + i] = w->pe[i];
        }
        set_ints(n, "pads", 2 * nsp, pads);
    }
}

/* ---- Conv ---------------------------------------------------------------------------- */

typedef struct conv_case {
    int64_t N, C, M, group;
    win w;
    bool bias;
} conv_case;

/* y[n,m,o] = b[m] + sum over c in m's group, k in the window of x[n,c,o*s-p+k*d] * W[m,c,k] */
static double *conv_ref(const conv_case *cc, const float *x, const float *wt, const float *b)
{
    const win *w = &cc->w;
    int64_t in[3], k[3], s[3], d[3], pb[3], out[3];
    to3(w->nsp, w->in, 1, in);
    to3(w->nsp, w->k, 1, k);
    to3(w->nsp, w->s, 1, s);
    to3(w->nsp, w->d, 1, d);
    to3(w->nsp, w->pb, 0, pb);
    to3(w->nsp, w->out, 1, out);
    int64_t cg = cc->C / cc->group, mg = cc->M / cc->group;
    int64_t isz = in[0] * in[1] * in[2], osz = out[0] * out[1] * out[2], ksz = k[0] * k[1] * k[2];
    double *y = calloc((size_t)(cc->N * cc->M * osz), sizeof *y);
    for (int64_t n = 0; n < cc->N; n++)
        for (int64_t m = 0; m < cc->M; m++)
            for (int64_t o0 = 0; o0 < out[0]; o0++)
                for (int64_t o1 = 0; o1 < out[1]; o1++)
                    for (int64_t o2 = 0; o2 < out[2]; o2++) {
                        double acc = b ? b[m] : 0.0;
                        for (int64_t c = 0; c < cg; c++)
                            for (int64_t k0 = 0; k0 < k[0]; k0++)
                                for (int64_t k1 = 0; k1 < k[1]; k1++)
                                    for (int64_t k2 = 0; k2 < k[2]; k2++) {
                                        int64_t i0 = o0 * s[0] - pb[0] + k0 * d[0];
                                        int64_t i1 = o1 * s[1] - pb[1] + k1 * d[1];
                                        int64_t i2 = o2 * s[2] - pb[2] + k2 * d[2];
                                        if (i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1] || i2 < 0 || i2 >= in[2])
                                            continue;
                                        int64_t ci = m / mg * cg + c;
                                        double xv = x[(n * cc->C + ci) * isz + (i0 * in[1] + i1) * in[2] + i2];
                                        double wv = wt[(m * cg + c) * ksz + (k0 * k[1] + k1) * k[2] + k2];
                                        acc += xv * wv;
                                    }
                        y[((n * cc->M + m) * out[0] + o0) * out[1] * out[2] + o1 * out[2] + o2] = acc;
                    }
    return y;
}

static void run_conv_case(conv_case cc, int threads)
{
    win *w = &cc.w;
    ref_window(w);
    one *t = one_new(13);
    int64_t xd[5] = {cc.N, cc.C}, wd[5] = {cc.M, cc.C / cc.group}, bd[1] = {cc.M}, yd[5] = {cc.N, cc.M};
    for (int i = 0; i < w->nsp; i++) {
        xd[2 + i] = w->in[i];
        wd[2 + i] = w->k[i];
        yd[2 + i] = w->out[i];
    }
    const float *x = one_input(t, 2 + w->nsp, xd), *wt = one_input(t, 2 + w->nsp, wd);
    const float *b = cc.bias ? one_input(t, 1, bd) : NULL;
    qf_node *n = one_node(t, QF_OP_CONV, 1);
    set_window_attrs(n, w, threads != 1); /* kernel_shape is optional: inferred from W */
    if (cc.group != 1) set_int(n, "group", cc.group);
    qf_status st = one_run(t, threads);
    ck_assert_msg(st == QF_OK, "%s", qf_error_message());
    check_shape(t, 2 + w->nsp, yd);
    double *ref = conv_ref(&cc, x, wt, b);
    check_close(t->y[0], ref, qf_value_numel(one_y(t, 0)), 1e-4, "conv");
    free(ref);
    one_free(t);
}

static const conv_case conv_cases[] = {
    /* plain 3x3 pad 1 with bias */
    {2, 3, 4, 1, {.nsp = 2, .in = {7, 6}, .k = {3, 3}, .pb = {1, 1}, .pe = {1, 1}}, true},
    /* stride 2, asymmetric pads */
    {2, 3, 5, 1, {.nsp = 2, .in = {9, 8}, .k = {3, 3}, .s = {2, 2}, .pb = {1, 0}, .pe = {2, 1}}, false},
    /* dilation 2, strides (2,1) */
    {1, 2, 3, 1, {.nsp = 2, .in = {11, 9}, .k = {3, 2}, .s = {2, 1}, .d = {2, 3}, .pb = {2, 1}, .pe = {2, 0}}, true},
    /* groups */
    {2, 4, 6, 2, {.nsp = 2, .in = {6, 6}, .k = {3, 3}, .pb = {1, 1}, .pe = {1, 1}}, true},
    {5, 6, 9, 3, {.nsp = 2, .in = {5, 4}, .k = {2, 3}, .s = {1, 2}, .pb = {0, 1}, .pe = {1, 1}}, true},
    /* depthwise, and depthwise with a channel multiplier of 2 */
    {2, 6, 6, 6, {.nsp = 2, .in = {9, 7}, .k = {3, 3}, .s = {2, 2}, .pb = {1, 1}, .pe = {1, 1}}, true},
    {2, 3, 6, 3, {.nsp = 2, .in = {8, 8}, .k = {3, 3}, .d = {2, 1}, .pb = {2, 1}, .pe = {1, 1}}, false},
    /* depthwise rows of two 16-output vectors and a partial one (stride 1, 5x5; stride 2;
     * stride 3 with dilation 2), so every path of the row kernel runs */
    {2, 4, 4, 4, {.nsp = 2, .in = {6, 75}, .k = {5, 5}, .pb = {2, 2}, .pe = {2, 2}}, true},
    {1, 3, 3, 3, {.nsp = 2, .in = {5, 99}, .k = {3, 3}, .s = {2, 2}, .pb = {1, 1}, .pe = {1, 1}}, true},
    {1, 2, 4, 2, {.nsp = 2, .in = {7, 120}, .k = {3, 3}, .s = {1, 3}, .d = {1, 2}, .pb = {1, 0}, .pe = {0, 2}}, false},
    /* pointwise 1x1 (GEMM on the image directly), and 1x1 with stride 2 (im2col) */
    {3, 8, 5, 1, {.nsp = 2, .in = {5, 6}, .k = {1, 1}}, true},
    {2, 8, 5, 1, {.nsp = 2, .in = {7, 6}, .k = {1, 1}, .s = {2, 2}}, true},
    /* auto_pad with an odd total padding */
    {2, 3, 4, 1, {.nsp = 2, .in = {6, 5}, .k = {4, 2}, .s = {1, 2}, .auto_pad = "SAME_UPPER"}, true},
    {2, 3, 4, 1, {.nsp = 2, .in = {6, 5}, .k = {4, 2}, .s = {1, 2}, .auto_pad = "SAME_LOWER"}, true},
    {1, 2, 3, 1, {.nsp = 2, .in = {7, 7}, .k = {3, 3}, .s = {2, 2}, .d = {2, 1}, .auto_pad = "SAME_LOWER"}, false},
    {2, 3, 4, 1, {.nsp = 2, .in = {6, 5}, .k = {3, 2}, .s = {2, 1}, .auto_pad = "VALID"}, true},
    /* 1-D and 3-D */
    {2, 3, 2, 1, {.nsp = 1, .in = {11}, .k = {3}, .s = {2}, .d = {2}, .pb = {1}, .pe = {2}}, true},
    {2, 4, 4, 4, {.nsp = 1, .in = {10}, .k = {5}, .pb = {2}, .pe = {2}}, true},
    {1, 2, 3, 1, {.nsp = 3, .in = {4, 5, 3}, .k = {2, 3, 2}, .s = {1, 2, 1}, .pb = {0, 1, 1}, .pe = {1, 1, 0}}, true},
    {2, 4, 4, 2, {.nsp = 3, .in = {3, 4, 5}, .k = {3, 1, 3}, .d = {1, 1, 2}, .pb = {1, 0, 2}, .pe = {1, 0, 2}}, false},
    {1, 3, 3, 3, {.nsp = 3, .in = {4, 4, 4}, .k = {3, 3, 3}, .s = {2, 2, 2}, .pb = {1, 1, 1}, .pe = {1, 1, 1}}, true},
    /* one input channel without groups (a grayscale first layer) */
    {2, 1, 4, 1, {.nsp = 2, .in = {9, 9}, .k = {5, 5}, .pb = {2, 2}, .pe = {2, 2}}, true},
    /* pads wider than the kernel reaches: whole output rows are bias only */
    {1, 2, 3, 1, {.nsp = 2, .in = {4, 5}, .k = {3, 3}, .s = {2, 1}, .pb = {3, 2}, .pe = {3, 4}}, true},
    {2, 3, 3, 3, {.nsp = 2, .in = {4, 5}, .k = {2, 3}, .s = {3, 2}, .pb = {3, 2}, .pe = {3, 4}}, true},
    /* a ResNet-20 sized layer */
    {4, 16, 32, 1, {.nsp = 2, .in = {16, 16}, .k = {3, 3}, .s = {2, 2}, .pb = {1, 1}, .pe = {1, 1}}, true},
};

START_TEST(conv_matches_naive)
{
    int threads = _i % 2 ? 3 : 1;
    run_conv_case(conv_cases[_i / 2], threads);
}
END_TEST

/* ---- ConvTranspose -------------------------------------------------------------------- */

typedef struct convt_case {
    int64_t N, C, M, group;
    int nsp;
    int64_t in[3], k[3], s[3], d[3], pb[3], pe[3], opad[3], oshape[3];
    const char *auto_pad;
    bool bias;
} convt_case;

/* Output size and begin padding from the spec's formulas. */
static void convt_ref_geom(const convt_case *c, int64_t *out, int64_t *pb)
{
    for (int i = 0; i < c->nsp; i++) {
        int64_t s = c->s[i] ? c->s[i] : 1, d = c->d[i] ? c->d[i] : 1;
        int64_t full = s * (c->in[i] - 1) + c->opad[i] + (c->k[i] - 1) * d + 1;
        bool same = c->auto_pad && strncmp(c->auto_pad, "SAME", 4) == 0;
        if (c->oshape[i] || same) {
            out[i] = c->oshape[i] ? c->oshape[i] : c->in[i] * s;
            int64_t total = full - out[i] > 0 ? full - out[i] : 0;
            pb[i] = c->auto_pad && strcmp(c->auto_pad, "SAME_UPPER") == 0 ? total / 2 : total - total / 2;
        } else {
            out[i] = full - c->pb[i] - c->pe[i];
            pb[i] = c->pb[i];
        }
    }
}

/* y = b; every x[n,c,i] adds x * W[c,m,k] at output position i*s - pb + k*d. */
static double *convt_ref(const convt_case *c, const float *x, const float *wt, const float *b, const int64_t *out_,
                         const int64_t *pb_)
{
    int64_t in[3], k[3], s[3], d[3], pb[3], out[3], sv[3], dv[3];
    for (int i = 0; i < 3; i++) {
        sv[i] = c->s[i] ? c->s[i] : 1;
        dv[i] = c->d[i] ? c->d[i] : 1;
    }
    to3(c->nsp, c->in, 1, in);
    to3(c->nsp, c->k, 1, k);
    to3(c->nsp, sv, 1, s);
    to3(c->nsp, dv, 1, d);
    to3(c->nsp, pb_, 0, pb);
    to3(c->nsp, out_, 1, out);
    int64_t cg = c->C / c->group, mg = c->M / c->group;
    int64_t isz = in[0] * in[1] * in[2], osz = out[0] * out[1] * out[2], ksz = k[0] * k[1] * k[2];
    double *y = calloc((size_t)(c->N * c->M * osz), sizeof *y);
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t m = 0; m < c->M; m++)
            for (int64_t o = 0; o < osz; o++) y[(n * c->M + m) * osz + o] = b ? b[m] : 0.0;
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t ci = 0; ci < c->C; ci++)
            for (int64_t i0 = 0; i0 < in[0]; i0++)
                for (int64_t i1 = 0; i1 < in[1]; i1++)
                    for (int64_t i2 = 0; i2 < in[2]; i2++) {
                        double xv = x[(n * c->C + ci) * isz + (i0 * in[1] + i1) * in[2] + i2];
                        for (int64_t mo = 0; mo < mg; mo++)
                            for (int64_t k0 = 0; k0 < k[0]; k0++)
                                for (int64_t k1 = 0; k1 < k[1]; k1++)
                                    for (int64_t k2 = 0; k2 < k[2]; k2++) {
                                        int64_t o0 = i0 * s[0] - pb[0] + k0 * d[0];
                                        int64_t o1 = i1 * s[1] - pb[1] + k1 * d[1];
                                        int64_t o2 = i2 * s[2] - pb[2] + k2 * d[2];
                                        if (o0 < 0 || o0 >= out[0] || o1 < 0 || o1 >= out[1] || o2 < 0 ||
                                            o2 >= out[2])
                                            continue;
                                        int64_t m = ci / cg * mg + mo;
                                        double wv = wt[(ci * mg + mo) * ksz + (k0 * k[1] + k1) * k[2] + k2];
                                        y[(n * c->M + m) * osz + (o0 * out[1] + o1) * out[2] + o2] += xv * wv;
                                    }
                    }
    return y;
}

static const convt_case convt_cases[] = {
    {1, 1, 2, 1, 2, .in = {3, 3}, .k = {3, 3}, .bias = false},
    {2, 3, 2, 1, 2, .in = {3, 4}, .k = {3, 3}, .s = {3, 2}, .opad = {1, 1}, .bias = true},
    {2, 2, 3, 1, 2, .in = {3, 3}, .k = {3, 3}, .s = {3, 2}, .oshape = {10, 8}, .bias = true},
    {1, 2, 2, 1, 2, .in = {3, 3}, .k = {3, 3}, .s = {3, 2}, .pb = {1, 2}, .pe = {1, 2}, .bias = false},
    {1, 1, 1, 1, 2, .in = {3, 3}, .k = {2, 2}, .d = {2, 2}, .bias = false},
    {3, 4, 6, 2, 2, .in = {4, 5}, .k = {3, 2}, .s = {2, 2}, .pb = {1, 0}, .pe = {1, 1}, .bias = true},
    {2, 4, 4, 4, 2, .in = {5, 5}, .k = {4, 4}, .s = {2, 2}, .pb = {1, 1}, .pe = {1, 1}, .bias = true},
    {1, 2, 3, 1, 2, .in = {3, 4}, .k = {3, 3}, .s = {2, 2}, .auto_pad = "SAME_UPPER", .bias = true},
    {1, 2, 3, 1, 2, .in = {3, 4}, .k = {3, 3}, .s = {2, 2}, .auto_pad = "SAME_LOWER", .bias = true},
    /* output_shape smaller than the full result: the rest is padding */
    {2, 2, 2, 1, 2, .in = {3, 3}, .k = {3, 3}, .s = {2, 2}, .oshape = {6, 5}, .bias = true},
    {2, 3, 2, 1, 1, .in = {5}, .k = {3}, .s = {2}, .d = {2}, .pb = {1}, .pe = {0}, .bias = true},
    {1, 2, 2, 1, 3, .in = {2, 3, 4}, .k = {2, 3, 3}, .s = {1, 2, 1}, .pb = {0, 1, 1}, .pe = {1, 0, 1}, .bias = true},
};

START_TEST(conv_transpose_matches_naive)
{
    const convt_case *c = &convt_cases[_i / 2];
    int threads = _i % 2 ? 2 : 1;
    one *t = one_new(13);
    int64_t xd[5] = {c->N, c->C}, wd[5] = {c->C, c->M / c->group}, bd[1] = {c->M}, out[3], pb[3], yd[5] = {c->N, c->M};
    convt_ref_geom(c, out, pb);
    for (int i = 0; i < c->nsp; i++) {
        xd[2 + i] = c->in[i];
        wd[2 + i] = c->k[i];
        yd[2 + i] = out[i];
    }
    const float *x = one_input(t, 2 + c->nsp, xd), *wt = one_input(t, 2 + c->nsp, wd);
    const float *b = c->bias ? one_input(t, 1, bd) : NULL;
    qf_node *n = one_node(t, QF_OP_CONV_TRANSPOSE, 1);
    if (c->group != 1) set_int(n, "group", c->group);
    if (c->s[0]) set_ints(n, "strides", c->nsp, c->s);
    if (c->d[0]) set_ints(n, "dilations", c->nsp, c->d);
    if (c->opad[0]) set_ints(n, "output_padding", c->nsp, c->opad);
    if (c->oshape[0]) set_ints(n, "output_shape", c->nsp, c->oshape);
    if (c->auto_pad) set_str(n, "auto_pad", c->auto_pad);
    if (c->pb[0] || c->pe[0] || c->pb[1] || c->pe[1]) {
        int64_t pads[6];
        for (int i = 0; i < c->nsp; i++) {
            pads[i] = c->pb[i];
            pads[c->nsp + i] = c->pe[i];
        }
        set_ints(n, "pads", 2 * c->nsp, pads);
    }
    qf_status st = one_run(t, threads);
    ck_assert_msg(st == QF_OK, "%s", qf_error_message());
    check_shape(t, 2 + c->nsp, yd);
    double *ref = convt_ref(c, x, wt, b, out, pb);
    check_close(t->y[0], ref, qf_value_numel(one_y(t, 0)), 1e-4, "convtranspose");
    free(ref);
    one_free(t);
}
END_TEST

/* ONNX's own test_convtranspose_autopad_same: x = 0..8, W all ones, SAME_UPPER
 * stride 2 -> 6x6 with the odd padding at the end. */
START_TEST(conv_transpose_same_upper_known_answer)
{
    static const double want[36] = {0, 0, 1,  1,  3,  2,  0, 0, 1,  1,  3,  2,  3, 3, 8,  5,  12, 7,
                                    3, 3, 7, 4, 9, 5, 9, 9, 20, 11, 24, 13, 6, 6, 13, 7,  15, 8};
    one *t = one_new(11);
    int64_t xd[4] = {1, 1, 3, 3}, wd[4] = {1, 2, 3, 3}, s[2] = {2, 2};
    float *x = one_input(t, 4, xd), *w = one_input(t, 4, wd);
    for (int i = 0; i < 9; i++) x[i] = (float)i;
    for (int i = 0; i < 18; i++) w[i] = 1.0f;
    qf_node *n = one_node(t, QF_OP_CONV_TRANSPOSE, 1);
    set_str(n, "auto_pad", "SAME_UPPER");
    set_ints(n, "strides", 2, s);
    ck_assert_int_eq(one_run(t, 1), QF_OK);
    int64_t yd[4] = {1, 2, 6, 6};
    check_shape(t, 4, yd);
    check_close(t->y[0], want, 36, 0, "channel 0");
    check_close(t->y[0] + 36, want, 36, 0, "channel 1");
    one_free(t);
}
END_TEST

/* ---- Gemm ------------------------------------------------------------------------------ */

typedef struct gemm_case {
    int64_t M, N, K;
    bool ta, tb;
    float alpha, beta;
    int c_ndim; /* -1: no C */
    int64_t c_dims[2];
} gemm_case;

static const gemm_case gemm_cases[] = {
    {3, 4, 5, false, false, 1.0f, 1.0f, -1, {0}},
    {3, 4, 5, true, false, 1.0f, 1.0f, 2, {1, 4}},
    {3, 4, 5, false, true, 0.5f, 1.0f, 1, {4}},
    {3, 4, 5, true, true, 0.25f, 0.35f, 2, {3, 4}},
    {6, 2, 7, false, false, 1.0f, 0.5f, 0, {0}},
    {6, 2, 7, false, true, 1.0f, -2.0f, 1, {1}},
    {6, 5, 3, true, false, 2.0f, 1.0f, 2, {6, 1}},
    {6, 5, 3, false, false, 1.0f, 1.0f, 2, {1, 1}},
    {1, 10, 64, false, true, 1.0f, 1.0f, 1, {10}}, /* a classifier row */
    {33, 17, 29, true, true, -1.5f, 0.0f, 2, {33, 17}},
};

START_TEST(gemm_matches_naive)
{
    const gemm_case *c = &gemm_cases[_i];
    one *t = one_new(13);
    int64_t ad[2] = {c->ta ? c->K : c->M, c->ta ? c->M : c->K}, bd[2] = {c->tb ? c->N : c->K, c->tb ? c->K : c->N};
    const float *A = one_input(t, 2, ad), *B = one_input(t, 2, bd);
    float *C = c->c_ndim >= 0 ? one_input(t, c->c_ndim, c->c_dims) : NULL;
    if (C && c->beta == 0.0f) C[0] = NAN; /* beta = 0 must ignore C */
    qf_node *n = one_node(t, QF_OP_GEMM, 1);
    if (c->ta) set_int(n, "transA", 1);
    if (c->tb) set_int(n, "transB", 1);
    if (c->alpha != 1.0f) set_float(n, "alpha", c->alpha);
    if (c->beta != 1.0f) set_float(n, "beta", c->beta);
    ck_assert_msg(one_run(t, 1) == QF_OK, "%s", qf_error_message());
    int64_t yd[2] = {c->M, c->N};
    check_shape(t, 2, yd);
    double *ref = calloc((size_t)(c->M * c->N), sizeof *ref);
    for (int64_t i = 0; i < c->M; i++)
        for (int64_t j = 0; j < c->N; j++) {
            double acc = 0;
            for (int64_t k = 0; k < c->K; k++) {
                double a = c->ta ? A[k * c->M + i] : A[i * c->K + k];
                double b = c->tb ? B[j * c->K + k] : B[k * c->N + j];
                acc += a * b;
            }
            double cv = 0;
            if (C && c->beta != 0.0f) {
                /* right-aligned broadcast of C into (M,N) */
                int64_t ci = c->c_ndim == 2 ? (c->c_dims[0] == 1 ? 0 : i) : 0;
                int64_t cj = c->c_ndim == 0 ? 0 : c->c_dims[c->c_ndim - 1] == 1 ? 0 : j;
                cv = C[ci * (c->c_ndim == 2 ? c->c_dims[1] : 0) + cj];
            }
            ref[i * c->N + j] = c->alpha * acc + c->beta * cv;
        }
    check_close(t->y[0], ref, c->M * c->N, 1e-5, "gemm");
    free(ref);
    one_free(t);
}
END_TEST

/* ---- MatMul ------------------------------------------------------------------------------ */

typedef struct matmul_case {
    int na, nb;
    int64_t a[4], b[4];
    int ny;
    int64_t y[4];
} matmul_case;

static const matmul_case matmul_cases[] = {
    {2, 2, {3, 4}, {4, 5}, 2, {3, 5}},
    {3, 3, {2, 3, 4}, {2, 4, 5}, 3, {2, 3, 5}},
    {4, 3, {2, 1, 3, 4}, {5, 4, 6}, 4, {2, 5, 3, 6}},
    {1, 2, {4}, {4, 5}, 1, {5}},
    {2, 1, {3, 4}, {4}, 1, {3}},
    {1, 1, {4}, {4}, 0, {0}},
    {3, 1, {2, 3, 4}, {4}, 2, {2, 3}},
    {1, 3, {4}, {2, 4, 5}, 2, {2, 5}},
    {3, 2, {6, 3, 4}, {4, 5}, 3, {6, 3, 5}},  /* B shared: one tall GEMM */
    {2, 3, {3, 4}, {2, 4, 5}, 3, {2, 3, 5}},  /* A broadcast */
    {4, 4, {1, 2, 3, 4}, {3, 1, 4, 2}, 4, {3, 2, 3, 2}},
};

START_TEST(matmul_matches_naive)
{
    const matmul_case *c = &matmul_cases[_i];
    one *t = one_new(13);
    const float *A = one_input(t, c->na, c->a), *B = one_input(t, c->nb, c->b);
    one_node(t, QF_OP_MATMUL, 1);
    ck_assert_msg(one_run(t, _i % 2 ? 2 : 1) == QF_OK, "%s", qf_error_message());
    check_shape(t, c->ny, c->y);
    /* promote to 4-D (batch0, batch1, M, K) x (batch0, batch1, K, N) with explicit broadcasting */
    int64_t a4[4] = {1, 1, 1, 1}, b4[4] = {1, 1, 1, 1};
    if (c->na == 1) a4[3] = c->a[0];
    else for (int i = 0; i < c->na; i++) a4[4 - c->na + i] = c->a[i];
    if (c->nb == 1) b4[2] = c->b[0];
    else for (int i = 0; i < c->nb; i++) b4[4 - c->nb + i] = c->b[i];
    int64_t M = a4[2], K = a4[3], N = b4[3];
    int64_t B0 = a4[0] > b4[0] ? a4[0] : b4[0], B1 = a4[1] > b4[1] ? a4[1] : b4[1];
    double *ref = calloc((size_t)(B0 * B1 * M * N), sizeof *ref);
    for (int64_t p = 0; p < B0; p++)
        for (int64_t q = 0; q < B1; q++)
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    double acc = 0;
                    int64_t pa = a4[0] == 1 ? 0 : p, qa = a4[1] == 1 ? 0 : q;
                    int64_t pb = b4[0] == 1 ? 0 : p, qb = b4[1] == 1 ? 0 : q;
                    for (int64_t k = 0; k < K; k++)
                        acc += (double)A[((pa * a4[1] + qa) * M + i) * K + k] * B[((pb * b4[1] + qb) * K + k) * N + j];
                    ref[((p * B1 + q) * M + i) * N + j] = acc;
                }
    check_close(t->y[0], ref, B0 * B1 * M * N, 1e-5, "matmul");
    free(ref);
    one_free(t);
}
END_TEST

/* ---- batch invariance of the row GEMMs (runtime/cpu/sgemm_rows.c) ----------------------
 * A row of Gemm, or of a MatMul of a tall A by one matrix, gets the same bits
 * alone as among 37 rows (blocks, a padded tail, threads): OpenBLAS's kernels
 * differ by a row's position in the call, which the fixed row blocks avoid. */

typedef struct rows_case {
    qf_op op;
    bool ta, tb;
    float alpha, beta;
    bool c;     /* Gemm: a C of (1, N) */
    int64_t mk; /* MatMul: A is (rows, mk, K), 0: (rows, K) */
} rows_case;

static const rows_case rows_cases[] = {
    {QF_OP_GEMM, false, true, 0.5f, 1.0f, true, 0}, /* test_qfm's classifier */
    {QF_OP_GEMM, false, false, 1.0f, 1.0f, false, 0},
    {QF_OP_GEMM, true, false, 1.0f, 0.35f, true, 0},
    {QF_OP_GEMM, true, true, -1.5f, 0.0f, true, 0},
    {QF_OP_GEMM, false, true, -0.75f, 0.0f, false, 0},
    {QF_OP_MATMUL, false, false, 1.0f, 1.0f, false, 0},
    {QF_OP_MATMUL, false, false, 1.0f, 1.0f, false, 3},
};

/* Runs the case at `rows` rows on `threads` threads, its inputs rows r0.. of
 * src (A of src_rows rows, B, C); returns the output (caller frees). */
static float *rows_run(const rows_case *c, int64_t rows, int64_t N, int64_t K, float *const *src, int64_t src_rows,
                       int64_t r0, int threads)
{
    one *t = one_new(13);
    const int64_t per = c->mk ? c->mk : 1; /* rows of A (and Y) per row of the case */
    int64_t ad[3] = {rows, K, 0}, bd[2] = {c->tb ? N : K, c->tb ? K : N}, cd[2] = {1, N};
    int na = 2;
    if (c->mk) ad[1] = c->mk, ad[2] = K, na = 3;
    if (c->ta) ad[0] = K, ad[1] = rows;
    float *A = one_input(t, na, ad), *B = one_input(t, 2, bd), *C = c->c ? one_input(t, 2, cd) : NULL;
    if (c->ta) /* A is (K, rows): columns r0.. of the source's */
        for (int64_t k = 0; k < K; k++) memcpy(A + k * rows, src[0] + k * src_rows + r0, (size_t)rows * sizeof *A);
    else
        memcpy(A, src[0] + r0 * per * K, (size_t)(rows * per * K) * sizeof *A);
    memcpy(B, src[1], (size_t)(N * K) * sizeof *B);
    if (C) memcpy(C, src[2], (size_t)N * sizeof *C);
    qf_node *n = one_node(t, c->op, 1);
    if (c->ta) set_int(n, "transA", 1);
    if (c->tb) set_int(n, "transB", 1);
    if (c->alpha != 1.0f) set_float(n, "alpha", c->alpha);
    if (c->beta != 1.0f) set_float(n, "beta", c->beta);
    ck_assert_msg(one_run(t, threads) == QF_OK, "%s", qf_error_message());
    const size_t bytes = qf_value_bytes(one_y(t, 0));
    float *y = malloc(bytes);
    memcpy(y, t->y[0], bytes);
    one_free(t);
    return y;
}

START_TEST(row_gemms_are_batch_invariant)
{
    const rows_case *c = &rows_cases[_i];
    const int64_t R = 37, N = 300, K = 400; /* 4.4M multiply-adds: spread over threads */
    const int64_t per = c->mk ? c->mk : 1;
    openblas_set_num_threads(1); /* as the CPU engine runs OpenBLAS (cpu_engine.c) */
    float *src[3] = {NULL, NULL, NULL};
    src[0] = malloc((size_t)(R * per * K) * sizeof(float));
    src[1] = malloc((size_t)(N * K) * sizeof(float));
    src[2] = malloc((size_t)N * sizeof(float));
    for (int64_t i = 0; i < R * per * K; i++) src[0][i] = frand(-1, 1);
    for (int64_t i = 0; i < N * K; i++) src[1][i] = frand(-1, 1);
    for (int64_t i = 0; i < N; i++) src[2][i] = frand(-1, 1);
    float *all = rows_run(c, R, N, K, src, R, 0, 2), *one_thread = rows_run(c, R, N, K, src, R, 0, 1);
    ck_assert_msg(memcmp(all, one_thread, (size_t)(R * per * N) * sizeof *all) == 0, "case %d: threads differ", _i);
    /* the values: a double-precision product, within float rounding of the sum of |terms| */
    for (int64_t r = 0; r < R * per; r++)
        for (int64_t n = 0; n < N; n++) {
            double sum = 0.0, mag = 0.0;
            for (int64_t k = 0; k < K; k++) {
                const double a = c->ta ? src[0][k * R + r] : src[0][r * K + k];
                const double b = c->tb ? src[1][n * K + k] : src[1][k * N + n];
                sum += a * b, mag += fabs(a * b);
            }
            double want = c->alpha * sum;
            if (c->op == QF_OP_GEMM && c->c) want += c->beta * src[2][n];
            ck_assert_msg(fabs(all[r * N + n] - want) <= 1e-5 * fabs(c->alpha) * mag + 1e-6,
                          "case %d: y[%lld][%lld] = %g, want %g", _i, (long long)r, (long long)n, all[r * N + n], want);
        }
    /* every row alone, and runs of 2, 6 and 13 rows at odd offsets */
    const int64_t runs[][2] = {{2, 0}, {6, 2}, {13, 5}, {13, 24}};
    for (int64_t r = 0; r < R; r++) {
        float *y = rows_run(c, 1, N, K, src, R, r, 1);
        ck_assert_msg(memcmp(y, all + r * per * N, (size_t)(per * N) * sizeof *y) == 0, "case %d: row %lld differs alone",
                      _i, (long long)r);
        free(y);
    }
    for (size_t k = 0; k < QF_ARRAY_LEN(runs); k++) {
        float *y = rows_run(c, runs[k][0], N, K, src, R, runs[k][1], 1);
        ck_assert_msg(memcmp(y, all + runs[k][1] * per * N, (size_t)(runs[k][0] * per * N) * sizeof *y) == 0,
                      "case %d: rows %lld-%lld differ at %lld rows", _i, (long long)runs[k][1],
                      (long long)(runs[k][1] + runs[k][0] - 1), (long long)runs[k][0]);
        free(y);
    }
    free(all), free(one_thread);
    for (int k = 0; k < 3; k++) free(src[k]);
}
END_TEST

/* Every instruction set up to this CPU's on the row GEMM itself: AVX2 and
 * AVX-512 (the own kernel) the same bits, OpenBLAS's row blocks (portable)
 * within float rounding of a double product, at row counts that take every
 * register block and tail (12, 6, 4, 2, 1 rows), with B as stored and
 * transposed, one and two threads. */
START_TEST(row_gemm_isas_agree)
{
    const int64_t N = 300, K = 200, rows_max = 37;
    const bool tb = _i & 1;
    const float alpha = tb ? 0.5f : 1.0f, beta = tb ? 1.0f : 0.0f;
    rng_use_xorshift(77 + (uint64_t)_i);
    float *A = malloc(sizeof(float) * rows_max * K), *B = malloc(sizeof(float) * N * K);
    float *y0 = malloc(sizeof(float) * rows_max * N);
    for (int64_t i = 0; i < rows_max * K; i++) A[i] = frand(-1, 1);
    for (int64_t i = 0; i < N * K; i++) B[i] = frand(-1, 1);
    for (int64_t i = 0; i < rows_max * N; i++) y0[i] = frand(-1, 1);
    const int64_t row_counts[] = {1, 2, 5, 13, 37};
    for (size_t rc = 0; rc < QF_ARRAY_LEN(row_counts); rc++) {
        const int64_t rows = row_counts[rc];
        float *own = NULL;
        for (int isa = QFI_DIRECT_PORTABLE; isa <= (int)qfi_cpu_direct_isa(); isa++)
            for (int threads = 1; threads <= 2; threads++) {
                float *y = malloc(sizeof(float) * rows * N);
                memcpy(y, y0, sizeof(float) * rows * N);
                const size_t sb = qfi_cpu_sgemm_rows_scratch(rows, N, K, false, threads, (qfi_direct_isa)isa);
                void *scratch = sb ? malloc(sb) : NULL;
                ck_assert_int_eq(qfi_cpu_sgemm_rows(false, tb, rows, N, K, alpha, A, K, B, tb ? K : N, beta, y,
                                                    scratch, threads, (qfi_direct_isa)isa),
                                 QF_OK);
                free(scratch);
                for (int64_t r = 0; r < rows; r++)
                    for (int64_t n = 0; n < N; n++) {
                        double sum = 0.0, mag = 0.0;
                        for (int64_t k = 0; k < K; k++) {
                            const double t = (double)A[r * K + k] * (tb ? B[n * K + k] : B[k * N + n]);
                            sum += t, mag += fabs(t);
                        }
                        const double want = alpha * sum + beta * y0[r * N + n];
                        ck_assert_msg(fabs(y[r * N + n] - want) <= 1e-5 * mag + 1e-6, "isa %d, %lld rows: y[%lld][%lld] = %g, want %g",
                                      isa, (long long)rows, (long long)r, (long long)n, y[r * N + n], want);
                    }
                if (isa == QFI_DIRECT_PORTABLE) {
                    free(y);
                } else if (!own) {
                    own = y;
                } else {
                    ck_assert_msg(memcmp(own, y, sizeof(float) * rows * N) == 0,
                                  "isa %d, %d threads, %lld rows: other bits than the first own-kernel run", isa,
                                  threads, (long long)rows);
                    free(y);
                }
            }
        free(own);
    }
    free(A), free(B), free(y0);
}
END_TEST

/* ---- MaxPool / AveragePool ---------------------------------------------------------------- */

typedef struct pool_case {
    bool is_max, count_include_pad;
    int64_t N, C;
    win w;
} pool_case;

static const pool_case pool_cases[] = {
    {true, false, 1, 3, {.nsp = 2, .in = {8, 8}, .k = {2, 2}}},
    {false, false, 1, 3, {.nsp = 2, .in = {8, 8}, .k = {2, 2}}},
    {true, false, 2, 2, {.nsp = 2, .in = {4, 4}, .k = {3, 3}, .s = {2, 2}, .ceil = true}},
    {false, false, 2, 2, {.nsp = 2, .in = {4, 4}, .k = {3, 3}, .s = {2, 2}, .ceil = true}},
    /* ceil_mode where the last window would start in the end padding and is dropped */
    {true, false, 1, 2, {.nsp = 2, .in = {5, 6}, .k = {2, 3}, .s = {2, 2}, .pb = {1, 1}, .pe = {1, 1}, .ceil = true}},
    {false, true, 1, 2, {.nsp = 2, .in = {5, 6}, .k = {2, 3}, .s = {2, 2}, .pb = {1, 1}, .pe = {1, 1}, .ceil = true}},
    {false, false, 1, 2, {.nsp = 2, .in = {5, 6}, .k = {2, 3}, .s = {2, 2}, .pb = {1, 1}, .pe = {1, 1}, .ceil = true}},
    /* padding with and without count_include_pad */
    {false, false, 2, 3, {.nsp = 2, .in = {7, 6}, .k = {3, 3}, .pb = {2, 1}, .pe = {2, 0}}},
    {false, true, 2, 3, {.nsp = 2, .in = {7, 6}, .k = {3, 3}, .pb = {2, 1}, .pe = {2, 0}}},
    {true, false, 2, 3, {.nsp = 2, .in = {7, 6}, .k = {3, 3}, .s = {2, 1}, .pb = {1, 1}, .pe = {1, 1}}},
    /* auto_pad with odd totals */
    {true, false, 1, 2, {.nsp = 2, .in = {6, 5}, .k = {4, 2}, .s = {1, 2}, .auto_pad = "SAME_UPPER"}},
    {false, false, 1, 2, {.nsp = 2, .in = {6, 5}, .k = {4, 2}, .s = {1, 2}, .auto_pad = "SAME_LOWER"}},
    {false, true, 1, 2, {.nsp = 2, .in = {6, 5}, .k = {4, 2}, .s = {1, 2}, .auto_pad = "SAME_UPPER"}},
    {true, false, 1, 2, {.nsp = 2, .in = {6, 5}, .k = {3, 2}, .s = {2, 2}, .auto_pad = "VALID"}},
    /* dilations */
    {true, false, 1, 1, {.nsp = 2, .in = {4, 4}, .k = {2, 2}, .d = {2, 2}}},
    {false, false, 2, 2, {.nsp = 2, .in = {9, 8}, .k = {3, 2}, .s = {2, 1}, .d = {2, 3}, .pb = {1, 1}, .pe = {2, 1}}},
    /* max pools in two passes (runtime/cpu/pool.c): YOLOv8n's SPPF 5x5, ResNet's 3x3/2 stem, ceil_mode */
    {true, false, 2, 3, {.nsp = 2, .in = {20, 20}, .k = {5, 5}, .pb = {2, 2}, .pe = {2, 2}}},
    {true, false, 1, 4, {.nsp = 2, .in = {15, 16}, .k = {3, 3}, .s = {2, 2}, .pb = {1, 1}, .pe = {1, 1}}},
    {true, false, 1, 2, {.nsp = 2, .in = {13, 14}, .k = {3, 2}, .s = {2, 3}, .ceil = true}},
    /* 1-D and 3-D */
    {true, false, 2, 3, {.nsp = 1, .in = {13}, .k = {3}, .s = {2}, .pb = {1}, .pe = {1}}},
    {false, true, 2, 3, {.nsp = 1, .in = {13}, .k = {4}, .s = {3}, .pb = {2}, .pe = {2}, .ceil = true}},
    {true, false, 1, 2, {.nsp = 3, .in = {4, 5, 6}, .k = {2, 2, 3}, .s = {2, 1, 2}, .pb = {0, 1, 1}, .pe = {1, 0, 1}}},
    {false, false, 1, 2, {.nsp = 3, .in = {4, 5, 6}, .k = {2, 3, 2}, .s = {1, 2, 2}, .pb = {1, 1, 0}, .pe = {0, 1, 1}}},
};

START_TEST(pool_matches_naive)
{
    pool_case pc = pool_cases[_i];
    win *w = &pc.w;
    ref_window(w);
    one *t = one_new(19);
    int64_t xd[5] = {pc.N, pc.C}, yd[5] = {pc.N, pc.C};
    for (int i = 0; i < w->nsp; i++) {
        xd[2 + i] = w->in[i];
        yd[2 + i] = w->out[i];
    }
    const float *x = one_input(t, 2 + w->nsp, xd);
    qf_node *n = one_node(t, pc.is_max ? QF_OP_MAX_POOL : QF_OP_AVERAGE_POOL, 1);
    set_window_attrs(n, w, true);
    if (w->ceil) set_int(n, "ceil_mode", 1);
    if (pc.count_include_pad) set_int(n, "count_include_pad", 1);
    ck_assert_msg(one_run(t, _i % 2 ? 2 : 1) == QF_OK, "%s", qf_error_message());
    check_shape(t, 2 + w->nsp, yd);
    int64_t in[3], k[3], s[3], d[3], pb[3], pe[3], out[3];
    to3(w->nsp, w->in, 1, in);
    to3(w->nsp, w->k, 1, k);
    to3(w->nsp, w->s, 1, s);
    to3(w->nsp, w->d, 1, d);
    to3(w->nsp, w->pb, 0, pb);
    to3(w->nsp, w->pe, 0, pe);
    to3(w->nsp, w->out, 1, out);
    int64_t osz = out[0] * out[1] * out[2], isz = in[0] * in[1] * in[2];
    double *ref = calloc((size_t)(pc.N * pc.C * osz), sizeof *ref);
    for (int64_t p = 0; p < pc.N * pc.C; p++)
        for (int64_t o = 0; o < osz; o++) {
            int64_t oi[3] = {o / (out[1] * out[2]), o / out[2] % out[1], o % out[2]};
            double mx = -INFINITY, sum = 0;
            int64_t n_valid = 0, n_padded = 0;
            for (int64_t kk = 0; kk < k[0] * k[1] * k[2]; kk++) {
                int64_t ki[3] = {kk / (k[1] * k[2]), kk / k[2] % k[1], kk % k[2]}, ii[3];
                bool valid = true, padded = true;
                for (int a = 0; a < 3; a++) {
                    ii[a] = oi[a] * s[a] - pb[a] + ki[a] * d[a];
                    valid &= ii[a] >= 0 && ii[a] < in[a];
                    padded &= ii[a] >= -pb[a] && ii[a] < in[a] + pe[a];
                }
                n_padded += padded;
                if (!valid) continue;
                double v = x[p * isz + (ii[0] * in[1] + ii[1]) * in[2] + ii[2]];
                n_valid++;
                sum += v;
                if (v > mx) mx = v;
            }
            ck_assert_int_gt(n_valid, 0); /* the cases never have an all-padding window */
            ref[p * osz + o] = pc.is_max ? mx : sum / (double)(pc.count_include_pad ? n_padded : n_valid);
        }
    check_close(t->y[0], ref, pc.N * pc.C * osz, 1e-6, pc.is_max ? "maxpool" : "averagepool");
    free(ref);
    one_free(t);
}
END_TEST

START_TEST(global_pool_matches_naive)
{
    /* the last: 300 planes, two threads' pieces of 256 planes summed 8 side by side, and tails */
    static const int64_t shapes[4][5] = {{2, 3, 5, 4}, {1, 2, 7}, {2, 2, 2, 3, 4}, {3, 100, 7, 7}};
    static const int ranks[4] = {4, 3, 5, 4};
    for (int s = 0; s < 4; s++)
        for (int is_max = 0; is_max < 2; is_max++) {
            one *t = one_new(13);
            const float *x = one_input(t, ranks[s], shapes[s]);
            one_node(t, is_max ? QF_OP_GLOBAL_MAX_POOL : QF_OP_GLOBAL_AVERAGE_POOL, 1);
            ck_assert_int_eq(one_run(t, 2), QF_OK);
            int64_t yd[5] = {shapes[s][0], shapes[s][1], 1, 1, 1};
            check_shape(t, ranks[s], yd);
            int64_t planes = shapes[s][0] * shapes[s][1], S = qfi_numel(ranks[s], shapes[s]) / planes;
            double ref[300];
            for (int64_t p = 0; p < planes; p++) {
                double sum = 0, mx = -INFINITY;
                for (int64_t i = 0; i < S; i++) {
                    sum += x[p * S + i];
                    mx = fmax(mx, x[p * S + i]);
                }
                ref[p] = is_max ? mx : sum / (double)S;
                /* the kernel's bits: each plane summed in double in position order */
                ck_assert_msg(t->y[0][p] == (float)ref[p], "global pool plane %lld of %lld: %.9g, not %.9g",
                              (long long)p, (long long)planes, t->y[0][p], (float)ref[p]);
            }
            check_close(t->y[0], ref, planes, 1e-6, "global pool");
            one_free(t);
        }
}
END_TEST

/* ---- BatchNormalization ------------------------------------------------------------------ */

static void run_batchnorm(int64_t opset, int ndim, const int64_t *xd, bool spatial)
{
    one *t = one_new(opset);
    const float *x = one_input(t, ndim, xd);
    int64_t per = spatial ? xd[1] : qfi_numel(ndim - 1, xd + 1);
    int64_t pd[1] = {per};
    const float *sc = one_input(t, 1, pd), *bi = one_input(t, 1, pd), *mean = one_input(t, 1, pd);
    const float *var = one_input_range(t, 1, pd, 0.1f, 2.0f);
    qf_node *n = one_node(t, QF_OP_BATCH_NORM, 1);
    set_float(n, "epsilon", 1e-3f);
    if (!spatial) set_int(n, "spatial", 0);
    ck_assert_msg(one_run(t, 1) == QF_OK, "%s", qf_error_message());
    check_shape(t, ndim, xd);
    int64_t N = xd[0], C = xd[1], S = qfi_numel(ndim, xd) / (N * C);
    double *ref = calloc((size_t)(N * C * S), sizeof *ref);
    for (int64_t i = 0; i < N * C * S; i++) {
        int64_t c = i / S % C, p = spatial ? c : i % (C * S);
        ref[i] = sc[p] * (x[i] - mean[p]) / sqrt(var[p] + 1e-3) + bi[p];
    }
    check_close(t->y[0], ref, N * C * S, 1e-5, "batchnorm");
    free(ref);
    one_free(t);
}

START_TEST(batchnorm_matches_naive)
{
    int64_t x4[4] = {2, 3, 4, 5}, x2[2] = {4, 6}, x3[3] = {2, 3, 4};
    run_batchnorm(15, 4, x4, true);
    run_batchnorm(9, 2, x2, true);
    run_batchnorm(7, 3, x3, true);
    run_batchnorm(7, 3, x3, false); /* opset < 9: per-activation parameters */
}
END_TEST

/* ---- Softmax -------------------------------------------------------------------------------- */

/* Reference: normalize over the dims [a0, a1) of x, with everything before as outer and after as inner. */
static void softmax_case(int64_t opset, int ndim, const int64_t *xd, bool give_axis, int64_t axis, int a0, int a1,
                         float scale)
{
    one *t = one_new(opset);
    const float *x = one_input_range(t, ndim, xd, -scale, scale);
    qf_node *n = one_node(t, QF_OP_SOFTMAX, 1);
    if (give_axis) set_int(n, "axis", axis);
    ck_assert_msg(one_run(t, 1) == QF_OK, "%s", qf_error_message());
    check_shape(t, ndim, xd);
    int64_t outer = qfi_numel(a0, xd), len = qfi_numel(a1 - a0, xd + a0), inner = qfi_numel(ndim - a1, xd + a1);
    double *ref = calloc((size_t)(outer * len * inner), sizeof *ref);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double mx = -INFINITY, sum = 0;
            for (int64_t l = 0; l < len; l++) mx = fmax(mx, x[(o * len + l) * inner + i]);
            for (int64_t l = 0; l < len; l++) sum += exp(x[(o * len + l) * inner + i] - mx);
            for (int64_t l = 0; l < len; l++)
                ref[(o * len + l) * inner + i] = exp(x[(o * len + l) * inner + i] - mx) / sum;
        }
    check_close(t->y[0], ref, outer * len * inner, 1e-5, "softmax");
    free(ref);
    one_free(t);
}

START_TEST(softmax_matches_naive)
{
    int64_t x3[3] = {2, 3, 4}, x4[4] = {2, 3, 2, 5}, x2[2] = {3, 7};
    /* opset 13: one axis; default -1 */
    softmax_case(13, 3, x3, false, 0, 2, 3, 3.0f);
    softmax_case(13, 3, x3, true, 1, 1, 2, 3.0f);
    softmax_case(13, 3, x3, true, 0, 0, 1, 3.0f);
    softmax_case(13, 4, x4, true, -2, 2, 3, 3.0f);
    /* opset < 13: flattened to 2-D at axis; default 1 */
    softmax_case(11, 3, x3, false, 0, 1, 3, 3.0f);
    softmax_case(11, 4, x4, true, 2, 2, 4, 3.0f);
    softmax_case(11, 4, x4, true, -3, 1, 4, 3.0f);
    softmax_case(7, 3, x3, true, 0, 0, 3, 3.0f);
    /* large logits must not overflow */
    softmax_case(13, 2, x2, false, 0, 1, 2, 2000.0f);
    softmax_case(11, 2, x2, false, 0, 1, 2, 2000.0f);
}
END_TEST

/* ---- ReduceMean ------------------------------------------------------------------------------ */

/* axes < 0 in `mask` sense: mask bit d set = dim d reduced; axes_input: pass axes as a constant input (opset 18). */
static void reduce_case(int64_t opset, int ndim, const int64_t *xd, int n_axes, const int64_t *axes, bool axes_input,
                        int keepdims, bool noop_empty)
{
    one *t = one_new(opset);
    const float *x = one_input(t, ndim, xd);
    if (axes_input) {
        int64_t ad[1] = {n_axes};
        int v = qf_graph_add_value(t->g, "axes", QF_I64, 1, ad);
        int64_t *data = malloc((size_t)(n_axes ? n_axes : 1) * sizeof *data);
        if (n_axes) memcpy(data, axes, (size_t)n_axes * sizeof *data);
        t->g->values[v].data = data;
        t->g->values[v].flags |= QF_VALUE_CONST;
        t->in[t->n_in++] = v;
    }
    qf_node *n = one_node(t, QF_OP_REDUCE_MEAN, 1);
    if (!axes_input && n_axes) set_ints(n, "axes", n_axes, axes);
    if (keepdims >= 0) set_int(n, "keepdims", keepdims);
    if (noop_empty) set_int(n, "noop_with_empty_axes", 1);
    ck_assert_msg(one_run(t, 1) == QF_OK, "%s", qf_error_message());
    bool red[QF_MAX_DIMS] = {false};
    for (int i = 0; i < n_axes; i++) red[axes[i] < 0 ? axes[i] + ndim : axes[i]] = true;
    bool noop = n_axes == 0 && noop_empty;
    if (n_axes == 0 && !noop)
        for (int d = 0; d < ndim; d++) red[d] = true;
    int64_t yd[QF_MAX_DIMS], ny = 0, rest = 1;
    for (int d = 0; d < ndim; d++) {
        if (!red[d]) yd[ny++] = xd[d];
        else if (keepdims != 0) yd[ny++] = 1;
        if (red[d]) rest *= xd[d];
    }
    check_shape(t, (int)ny, yd);
    /* reference: accumulate every input element into its output slot */
    int64_t nx = qfi_numel(ndim, xd), nout = nx / rest;
    double *ref = calloc((size_t)nout, sizeof *ref);
    for (int64_t i = 0; i < nx; i++) {
        int64_t rem = i, o = 0, mul = 1;
        for (int d = ndim - 1; d >= 0; d--) {
            int64_t idx = rem % xd[d];
            rem /= xd[d];
            if (!red[d]) {
                o += idx * mul;
                mul *= xd[d];
            }
        }
        ref[o] += x[i] / (double)rest;
    }
    check_close(t->y[0], ref, nout, 1e-5, "reducemean");
    free(ref);
    one_free(t);
}

START_TEST(reduce_mean_matches_naive)
{
    int64_t x3[3] = {3, 2, 2}, x4[4] = {2, 3, 4, 5};
    int64_t a1[1] = {1}, am2[1] = {-2}, a02[2] = {0, 2}, a23[2] = {2, 3}, a13[2] = {3, 1};
    reduce_case(13, 3, x3, 1, a1, false, 0, false);
    reduce_case(13, 3, x3, 1, a1, false, 1, false);
    reduce_case(13, 3, x3, 1, am2, false, -1, false);
    reduce_case(13, 3, x3, 0, NULL, false, 1, false); /* all axes */
    reduce_case(13, 4, x4, 2, a23, false, 0, false);  /* global average pool */
    reduce_case(11, 4, x4, 2, a13, false, 1, false);
    reduce_case(18, 4, x4, 2, a02, true, 0, false);
    reduce_case(18, 4, x4, 2, a23, true, 1, false);
    reduce_case(18, 3, x3, 0, NULL, false, 0, false); /* no axes input: all */
    reduce_case(18, 4, x4, 0, NULL, true, 1, true);   /* empty axes + noop: identity */
}
END_TEST

/* ---- FLOPs ------------------------------------------------------------------------------------ */

START_TEST(flop_counts)
{
    /* Conv: per image 2 * M * OUT * (C/group) * K = 2 * 6 * 64 * 2 * 9 */
    one *t = one_new(13);
    int64_t xd[4] = {2, 4, 8, 8}, wd[4] = {6, 2, 3, 3}, pads[4] = {1, 1, 1, 1};
    one_input(t, 4, xd);
    one_input(t, 4, wd);
    qf_node *n = one_node(t, QF_OP_CONV, 1);
    set_int(n, "group", 2);
    set_ints(n, "pads", 4, pads);
    t->g->batch = 2;
    ck_assert_int_eq(one_run(t, 1), QF_OK);
    ck_assert_int_eq(qfi_ops[QF_OP_CONV]->flops(t->g, &t->g->nodes[0]), 2 * 6 * 64 * 2 * 9);
    one_free(t);

    /* ConvTranspose: per image 2 * C * IN * (M/group) * K */
    t = one_new(13);
    int64_t xt[4] = {3, 1, 3, 3}, wt[4] = {1, 2, 3, 3};
    one_input(t, 4, xt);
    one_input(t, 4, wt);
    one_node(t, QF_OP_CONV_TRANSPOSE, 1);
    t->g->batch = 3;
    ck_assert_int_eq(one_run(t, 1), QF_OK);
    ck_assert_int_eq(qfi_ops[QF_OP_CONV_TRANSPOSE]->flops(t->g, &t->g->nodes[0]), 2 * 1 * 9 * 2 * 9);
    one_free(t);

    /* Gemm over a batch of 4 rows: per image 2 * N * K */
    t = one_new(13);
    int64_t ad[2] = {4, 10}, bd[2] = {10, 3};
    one_input(t, 2, ad);
    one_input(t, 2, bd);
    one_node(t, QF_OP_GEMM, 1);
    t->g->batch = 4;
    ck_assert_int_eq(one_run(t, 1), QF_OK);
    ck_assert_int_eq(qfi_ops[QF_OP_GEMM]->flops(t->g, &t->g->nodes[0]), 2 * 3 * 10);
    one_free(t);

    /* MatMul (4,5,6) x (6,7) with batch 4: per image 2 * 5 * 7 * 6 */
    t = one_new(13);
    int64_t ma[3] = {4, 5, 6}, mb[2] = {6, 7};
    one_input(t, 3, ma);
    one_input(t, 2, mb);
    one_node(t, QF_OP_MATMUL, 1);
    t->g->batch = 4;
    ck_assert_int_eq(one_run(t, 1), QF_OK);
    ck_assert_int_eq(qfi_ops[QF_OP_MATMUL]->flops(t->g, &t->g->nodes[0]), 2 * 5 * 7 * 6);
    one_free(t);
}
END_TEST

/* ---- errors ------------------------------------------------------------------------------------ */

/* Runs the node and expects `want`, with `needle` in the message. */
static void expect_error(one *t, qf_status want, const char *needle)
{
    qf_status st = one_run(t, 1);
    ck_assert_msg(st == want, "got %s (%s), want %s", qf_status_name(st), qf_error_message(), qf_status_name(want));
    ck_assert_msg(strstr(qf_error_message(), needle), "message \"%s\" lacks \"%s\"", qf_error_message(), needle);
    /* "file: node NAME (Op): detail", the file and the node named once */
    const char *msg = qf_error_message(), *front = "test.onnx: node node0 (";
    ck_assert_msg(strncmp(msg, front, strlen(front)) == 0 && !strstr(msg + 1, "test.onnx") &&
                      !strstr(msg + strlen(front), "node0") && !strstr(msg, ": :"),
                  "message \"%s\" does not name the file and node exactly once", msg);
    one_free(t);
}

START_TEST(unsupported_and_invalid)
{
    int64_t xd[4] = {1, 4, 5, 5}, wd[4] = {2, 4, 3, 3}, wbad[4] = {3, 2, 3, 3};

    /* a non-f32 activation is unsupported and the message names the dtype */
    one *t = one_new(13);
    one_input(t, 4, xd);
    one_input(t, 4, wd);
    one_node(t, QF_OP_CONV, 1);
    t->g->values[t->in[0]].dtype = QF_F16;
    expect_error(t, QF_ERR_UNSUPPORTED, "f16");

    /* group does not divide the output channels */
    t = one_new(13);
    one_input(t, 4, xd);
    one_input(t, 4, wbad);
    set_int(one_node(t, QF_OP_CONV, 1), "group", 2);
    expect_error(t, QF_ERR_INVALID, "group");

    t = one_new(13);
    one_input(t, 4, xd);
    one_input(t, 4, wd);
    set_str(one_node(t, QF_OP_CONV, 1), "auto_pad", "SAME_MIDDLE");
    expect_error(t, QF_ERR_INVALID, "auto_pad");

    /* kernel bigger than the padded input */
    t = one_new(13);
    int64_t small[4] = {1, 4, 2, 2};
    one_input(t, 4, small);
    one_input(t, 4, wd);
    one_node(t, QF_OP_CONV, 1);
    expect_error(t, QF_ERR_INVALID, "does not fit");

    /* MaxPool's Indices output */
    t = one_new(12);
    one_input(t, 4, xd);
    int64_t k2[2] = {2, 2};
    set_ints(one_node(t, QF_OP_MAX_POOL, 2), "kernel_shape", 2, k2);
    expect_error(t, QF_ERR_UNSUPPORTED, "Indices");

    t = one_new(12);
    one_input(t, 4, xd);
    one_node(t, QF_OP_AVERAGE_POOL, 1);
    expect_error(t, QF_ERR_INVALID, "kernel_shape");

    /* BatchNormalization in training mode, by attribute or by its extra outputs */
    int64_t cd[1] = {4};
    t = one_new(15);
    one_input(t, 4, xd);
    for (int k = 0; k < 4; k++) one_input(t, 1, cd);
    set_int(one_node(t, QF_OP_BATCH_NORM, 1), "training_mode", 1);
    expect_error(t, QF_ERR_UNSUPPORTED, "training mode");
    t = one_new(9);
    one_input(t, 4, xd);
    for (int k = 0; k < 4; k++) one_input(t, 1, cd);
    one_node(t, QF_OP_BATCH_NORM, 3);
    expect_error(t, QF_ERR_UNSUPPORTED, "training mode");

    /* Gemm: C that would have to grow Y */
    t = one_new(13);
    int64_t ad[2] = {3, 4}, bd[2] = {4, 5}, cbad[2] = {2, 5};
    one_input(t, 2, ad);
    one_input(t, 2, bd);
    one_input(t, 2, cbad);
    one_node(t, QF_OP_GEMM, 1);
    expect_error(t, QF_ERR_INVALID, "broadcast");

    /* MatMul inner dims */
    t = one_new(13);
    one_input(t, 2, ad);
    one_input(t, 2, ad);
    one_node(t, QF_OP_MATMUL, 1);
    expect_error(t, QF_ERR_INVALID, "inner dims");

    t = one_new(13);
    one_input(t, 2, ad);
    set_int(one_node(t, QF_OP_SOFTMAX, 1), "axis", 2);
    expect_error(t, QF_ERR_INVALID, "axis");

    int64_t bad_axis[1] = {3};
    t = one_new(13);
    one_input(t, 2, ad);
    set_ints(one_node(t, QF_OP_REDUCE_MEAN, 1), "axes", 1, bad_axis);
    expect_error(t, QF_ERR_INVALID, "axis");

    /* ReduceMean-18 with axes that are not constant */
    t = one_new(18);
    one_input(t, 2, ad);
    int64_t one_d[1] = {1};
    int v = qf_graph_add_value(t->g, "axes", QF_I64, 1, one_d);
    t->in[t->n_in++] = v;
    one_node(t, QF_OP_REDUCE_MEAN, 1);
    expect_error(t, QF_ERR_UNSUPPORTED, "constant");

    /* missing required input (the weights omitted, the bias given) */
    t = one_new(13);
    one_input(t, 4, xd);
    one_skip_input(t);
    one_input(t, 1, cd);
    one_node(t, QF_OP_CONV, 1);
    expect_error(t, QF_ERR_INVALID, "missing");
}
END_TEST

/* ---- a small network through qf_graph_prepare and the CPU engine ------------------------------ */

/* x (2,3,8,8) -> Conv 3x3 pad 1 (4 ch) -> MaxPool 2x2 s2 -> ReduceMean [2,3] -> Gemm (4->5) -> Softmax */
START_TEST(engine_runs_a_small_network)
{
    qf_graph *g = qf_graph_new("net.onnx");
    g->opset = 13;
    int64_t xd[4] = {2, 3, 8, 8}, wd[4] = {4, 3, 3, 3}, bd[1] = {4}, gwd[2] = {4, 5}, gbd[1] = {5};
    int x = qf_graph_add_value(g, "x", QF_F32, 4, xd);
    int w = qf_graph_add_value(g, "w", QF_F32, 4, wd), b = qf_graph_add_value(g, "b", QF_F32, 1, bd);
    int gw = qf_graph_add_value(g, "gw", QF_F32, 2, gwd), gb = qf_graph_add_value(g, "gb", QF_F32, 1, gbd);
    int c = qf_graph_add_value(g, "c", QF_F32, 0, NULL), p = qf_graph_add_value(g, "p", QF_F32, 0, NULL);
    int r = qf_graph_add_value(g, "r", QF_F32, 0, NULL), f = qf_graph_add_value(g, "f", QF_F32, 0, NULL);
    int y = qf_graph_add_value(g, "y", QF_F32, 0, NULL);
    int consts[4] = {w, b, gw, gb};
    for (int i = 0; i < 4; i++) {
        qf_value *v = &g->values[consts[i]];
        int64_t nel = qf_value_numel(v);
        float *d = malloc((size_t)nel * sizeof *d);
        for (int64_t j = 0; j < nel; j++) d[j] = frand(-1, 1);
        v->data = d;
        v->flags |= QF_VALUE_CONST;
    }
    g->values[x].flags |= QF_VALUE_INPUT;
    g->values[y].flags |= QF_VALUE_OUTPUT;
    g->inputs = calloc(1, sizeof(int));
    g->outputs = calloc(1, sizeof(int));
    g->inputs[0] = x;
    g->outputs[0] = y;
    g->n_inputs = g->n_outputs = 1;
    int in_conv[3] = {x, w, b}, in_gemm[3] = {r, gw, gb};
    int64_t pads[4] = {1, 1, 1, 1}, k2[2] = {2, 2}, axes[2] = {2, 3};
    qf_graph_add_node(g, "conv", QF_OP_CONV, 3, in_conv, 1, &c);
    qf_graph_add_node(g, "pool", QF_OP_MAX_POOL, 1, &c, 1, &p);
    qf_graph_add_node(g, "mean", QF_OP_REDUCE_MEAN, 1, &p, 1, &r);
    qf_graph_add_node(g, "fc", QF_OP_GEMM, 3, in_gemm, 1, &f);
    qf_graph_add_node(g, "prob", QF_OP_SOFTMAX, 1, &f, 1, &y);
    set_ints(&g->nodes[0], "pads", 4, pads);
    set_ints(&g->nodes[1], "kernel_shape", 2, k2);
    set_ints(&g->nodes[1], "strides", 2, k2);
    set_ints(&g->nodes[2], "axes", 2, axes);
    set_int(&g->nodes[2], "keepdims", 0);
    for (int i = 0; i < g->n_nodes; i++) ck_assert_int_eq(qfi_ops[g->nodes[i].op]->parse(g, &g->nodes[i]), QF_OK);
    ck_assert_msg(qf_graph_prepare(g, 2) == QF_OK, "%s", qf_error_message());
    qf_engine_opts opts = {.device = QF_DEVICE_CPU, .threads = 2};
    qf_engine *e = NULL;
    ck_assert_msg(qf_engine_create(g, &opts, &e) == QF_OK, "%s", qf_error_message());
    /* keep our own copy: the plan may reuse the input's bytes once the conv has read them */
    float *xin = qf_engine_input(e, 0), xcopy[2 * 3 * 64];
    for (int i = 0; i < 2 * 3 * 64; i++) xin[i] = xcopy[i] = frand(-1, 1);
    ck_assert_msg(qf_engine_run(e) == QF_OK, "%s", qf_error_message());
    const float *out = qf_engine_output(e, 0);

    /* the same network, naively */
    const float *W = g->values[w].data, *B = g->values[b].data, *GW = g->values[gw].data, *GB = g->values[gb].data;
    conv_case cc = {2, 3, 4, 1, {.nsp = 2, .in = {8, 8}, .k = {3, 3}, .pb = {1, 1}, .pe = {1, 1}}, true};
    ref_window(&cc.w);
    double *cv = conv_ref(&cc, xcopy, W, B);
    double want[10];
    for (int n = 0; n < 2; n++) {
        double feat[4], logit[5], mx = -INFINITY, sum = 0;
        for (int m = 0; m < 4; m++) {
            const double *pl = cv + (n * 4 + m) * 64; /* (8,8) */
            double acc = 0;
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++)
                    acc += fmax(fmax(pl[2 * i * 8 + 2 * j], pl[2 * i * 8 + 2 * j + 1]),
                                fmax(pl[(2 * i + 1) * 8 + 2 * j], pl[(2 * i + 1) * 8 + 2 * j + 1]));
            feat[m] = acc / 16;
        }
        for (int o = 0; o < 5; o++) {
            logit[o] = GB[o];
            for (int m = 0; m < 4; m++) logit[o] += feat[m] * GW[m * 5 + o];
            mx = fmax(mx, logit[o]);
        }
        for (int o = 0; o < 5; o++) sum += exp(logit[o] - mx);
        for (int o = 0; o < 5; o++) want[n * 5 + o] = exp(logit[o] - mx) / sum;
    }
    check_close(out, want, 10, 1e-5, "network");
    free(cv);
    qf_engine_free(e);
    qf_graph_free(g);
}
END_TEST

/* ---- fused FP16 attention (lib/attention.h, runtime/cpu/attention.c) ----------------------- */

/* q (2,3,M,D) x kt (2,3,D,N) -> [+ bias (1,3,M,N), viewed as (1,2,3,M,N) + mask
 * (1,2,1,M,N) of 0 / -100, viewed back: Swin's form] -> Softmax -> x v
 * (2,3,N,D), as exporters write attention; the scores also a graph output
 * when scores_out (then nothing may fuse). Quantized to FP16: V's Cast to
 * half made where the AV MatMul reads it, unless the Swin form's Transpose
 * reads V first (qfi_attention_hoist_operands moves the Cast before the
 * scores so that the chain can run there). */
enum { ATT_M = 70, ATT_N = 80, ATT_D = 32 }; /* two key tiles, the second partial */
enum { ATT_OUT = 2 * 3 * ATT_M * ATT_D };     /* elements of the output (and of Q) */
static const int64_t att_in_elems[3] = {ATT_OUT, 2 * 3 * ATT_D * ATT_N, 2 * 3 * ATT_N * ATT_D}; /* Q, K^T, V */
static float att_bias[3 * ATT_M * ATT_N], att_mask[2 * ATT_M * ATT_N]; /* the constants, before quantization */
/* g prepared for batch 2 and quantized to FP16 (no table: every float op FP16) */
static qf_graph *fp16_graph(qf_graph *g)
{
    prepare_graph(g, 2);
    qf_quant_opts o;
    qf_quant_opts_init(&o);
    o.precision = QF_PREC_FP16;
    ck_assert_msg(qf_quantize(g, NULL, &o, NULL) == QF_OK, "%s", qf_error_message());
    return g;
}

static qf_graph *attention_graph(bool biased, bool scores_out)
{
    qf_graph *g = qf_graph_new(biased ? "swin_attention" : "vit_attention");
    g->opset = 17;
    int q = input(g, "q", 4, (int64_t[]){2, 3, ATT_M, ATT_D}), kt = input(g, "kt", 4, (int64_t[]){2, 3, ATT_D, ATT_N});
    int v = input(g, "v", 4, (int64_t[]){2, 3, ATT_N, ATT_D});
    if (biased) { /* V made before the scores, as exporters order it */
        int vt = value(g, "v.t");
        set_ints(op(g, "v.t", QF_OP_TRANSPOSE, 1, &v, vt), "perm", 4, (int64_t[]){0, 1, 2, 3});
        v = vt;
    } /* else the quantizer's Cast of V comes after the scores, and is moved before them */
    int s = value(g, "qk");
    op(g, "qk", QF_OP_MATMUL, 2, (int[]){q, kt}, s);
    if (scores_out) output(g, s);
    if (biased) {
        int bias = weight(g, "rel_bias", 4, (int64_t[]){1, 3, ATT_M, ATT_N}, -2.0f, 2.0f);
        int mask = weight(g, "mask", 5, (int64_t[]){1, 2, 1, ATT_M, ATT_N}, 0.0f, 1.0f);
        float *mk = g->values[mask].data;
        for (int i = 0; i < 2 * ATT_M * ATT_N; i++) mk[i] = mk[i] < 0.3f ? -100.0f : 0.0f;
        memcpy(att_bias, g->values[bias].data, sizeof att_bias);
        memcpy(att_mask, mk, sizeof att_mask);
        int shape5 = qfi_graph_add_const(g, "shape5", QF_I64, 1, (int64_t[]){5}, memcpy(malloc(5 * sizeof(int64_t)),
                                          (int64_t[]){1, 2, 3, ATT_M, ATT_N}, 5 * sizeof(int64_t)));
        int shape4 = qfi_graph_add_const(g, "shape4", QF_I64, 1, (int64_t[]){4}, memcpy(malloc(4 * sizeof(int64_t)),
                                          (int64_t[]){2, 3, ATT_M, ATT_N}, 4 * sizeof(int64_t)));
        int b = value(g, "biased"), r = value(g, "s5"), m = value(g, "masked"), back = value(g, "s4");
        op(g, "bias_add", QF_OP_ADD, 2, (int[]){s, bias}, b);
        op(g, "view5", QF_OP_RESHAPE, 2, (int[]){b, shape5}, r);
        op(g, "mask_add", QF_OP_ADD, 2, (int[]){r, mask}, m);
        op(g, "view4", QF_OP_RESHAPE, 2, (int[]){m, shape4}, back);
        s = back;
    }
    int p = value(g, "p"), y = value(g, "av");
    set_int(op(g, "softmax", QF_OP_SOFTMAX, 1, &s, p), "axis", -1);
    op(g, "av", QF_OP_MATMUL, 2, (int[]){p, v}, y);
    output(g, y);
    return fp16_graph(g);
}

static void count_fused(void *user, qf_log_level level, const char *msg)
{
    (void)level;
    if (strstr(msg, "attention fused")) ++*(int *)user;
}

/* g's CPU engine (QFORGE_CPU_NOFUSE when nofuse) on `threads` threads; the
 * debug lines of its build go to count(counted), which starts at 0. */
/* A CPU engine for g on `threads` threads, built with environment variable
 * env set (NULL: none) and the debug log going to note(user). */
static qf_engine *cpu_engine_noting(const qf_graph *g, const char *env, int threads, qf_log_fn note, void *user)
{
    if (env) setenv(env, "1", 1);
    qf_log_set(note, user, QF_LOG_DEBUG);
    qf_engine_opts opts = {.device = QF_DEVICE_CPU, .threads = threads};
    qf_engine *e = NULL;
    qf_status st = qf_engine_create(g, &opts, &e);
    qf_log_set(NULL, NULL, QF_LOG_DEBUG);
    if (env) unsetenv(env);
    ck_assert_msg(st == QF_OK, "%s", qf_error_message());
    return e;
}

/* Runs g on the CPU engine (QFORGE_CPU_NOFUSE when nofuse) on inputs x[3];
 * returns a copy of the attention output and the chains fused in *fused. */
static float *run_attention(const qf_graph *g, float *const *x, bool nofuse, int *fused)
{
    *fused = 0;
    qf_engine *e = cpu_engine_noting(g, nofuse ? "QFORGE_CPU_NOFUSE" : NULL, 2, count_fused, fused);
    for (int k = 0; k < 3; k++) memcpy(qf_engine_input(e, k), x[k], (size_t)att_in_elems[k] * sizeof(float));
    ck_assert_msg(qf_engine_run(e) == QF_OK, "%s", qf_error_message());
    const int out = g->n_outputs - 1;
    float *y = malloc(sizeof(float) * ATT_OUT);
    memcpy(y, qf_engine_output(e, out), sizeof(float) * ATT_OUT);
    qf_engine_free(e);
    return y;
}

/* The chain in double on the inputs as the FP16 graph holds them (rounded to
 * half); the biases exact. */
static double *attention_ref(float *const *x, bool biased, double scale)
{
    const float *bias = att_bias, *mask = att_mask;
    double *y = calloc(ATT_OUT, sizeof *y), s[ATT_N];
    for (int b = 0; b < 6; b++)
        for (int i = 0; i < ATT_M; i++) {
            double mx = -INFINITY, sum = 0.0;
            for (int j = 0; j < ATT_N; j++) {
                double acc = 0.0;
                for (int d = 0; d < ATT_D; d++)
                    acc += (double)qf_f16_to_f32(qf_f32_to_f16(x[0][(b * ATT_M + i) * ATT_D + d])) *
                           qf_f16_to_f32(qf_f32_to_f16(x[1][(b * ATT_D + d) * ATT_N + j]));
                acc *= scale;
                if (biased) acc += (double)bias[((b % 3) * ATT_M + i) * ATT_N + j] + mask[((b / 3) * ATT_M + i) * ATT_N + j];
                s[j] = acc;
                mx = fmax(mx, acc);
            }
            for (int j = 0; j < ATT_N; j++) sum += s[j] = exp(s[j] - mx);
            for (int d = 0; d < ATT_D; d++) {
                double o = 0.0;
                for (int j = 0; j < ATT_N; j++) o += s[j] / sum * qf_f16_to_f32(qf_f32_to_f16(x[2][(b * ATT_N + j) * ATT_D + d]));
                y[(b * ATT_M + i) * ATT_D + d] = o;
            }
        }
    return y;
}

/* The fused chain's output yf closer to the exact chain ref than the
 * unfused nodes' yu (by 1 dB at least), and within half's rounding of it. */
static void assert_closer_to_exact(const float *yf, const float *yu, const double *ref, const char *what)
{
    double ef = 0, eu = 0, sig = 0, worst = 0, big = 0;
    for (int64_t i = 0; i < ATT_OUT; i++) {
        ef += (yf[i] - ref[i]) * (yf[i] - ref[i]);
        eu += (yu[i] - ref[i]) * (yu[i] - ref[i]);
        sig += ref[i] * ref[i];
        worst = fmax(worst, fabs(yf[i] - ref[i]));
        big = fmax(big, fabs(ref[i]));
    }
    const double sqnr_f = 10 * log10(sig / ef), sqnr_u = 10 * log10(sig / eu);
    ck_assert_msg(sqnr_f > sqnr_u + 1.0, "%s: fused %.2f dB, unfused %.2f dB against the exact chain", what, sqnr_f,
                  sqnr_u);
    ck_assert_msg(worst <= 1e-3 * big, "%s: fused output off by %.3g (outputs up to %.3g)", what, worst, big);
    printf("  %s: fused %.1f dB, unfused %.1f dB against the exact chain\n", what, sqnr_f, sqnr_u);
}

/* The CPU engine runs FP16 attention chains as one kernel (what the CUDA
 * engine's fused kernel computes): one chain found in each form, none with
 * QFORGE_CPU_NOFUSE or where the scores are a graph output (then the bits
 * are the unfused nodes'). Keeping the scores and probabilities in FP32 must
 * bring the output closer to the exact chain than the unfused FP16 nodes,
 * and within half precision's rounding of it. */
START_TEST(attention_chain_fused)
{
    for (int biased = 0; biased < 2; biased++) {
        rng_use_xorshift(77 + (uint64_t)biased);
        qf_graph *g = attention_graph(biased, false);
        float *x[3];
        for (int k = 0; k < 3; k++) {
            x[k] = malloc((size_t)att_in_elems[k] * sizeof(float));
            for (int64_t i = 0; i < att_in_elems[k]; i++) x[k][i] = frand(-1.5f, 1.5f);
        }
        int fused, unfused_count;
        float *yf = run_attention(g, x, false, &fused), *yu = run_attention(g, x, true, &unfused_count);
        ck_assert_int_eq(fused, 1);
        ck_assert_int_eq(unfused_count, 0);
        double *ref = attention_ref(x, biased, 1.0);
        assert_closer_to_exact(yf, yu, ref, g->source);
        free(ref);
        free(yf);
        free(yu);
        qf_graph_free(g);

        /* the scores read outside the chain: nothing fuses, the unfused bits */
        g = attention_graph(biased, true);
        yf = run_attention(g, x, false, &fused);
        yu = run_attention(g, x, true, &unfused_count);
        ck_assert_int_eq(fused, 0);
        ck_assert_int_eq(memcmp(yf, yu, sizeof(float) * ATT_OUT), 0);
        free(yf);
        free(yu);
        qf_graph_free(g);
        for (int k = 0; k < 3; k++) free(x[k]);
    }
}
END_TEST

/* torch.onnx's scaled_dot_product_attention: q (2,3,M,D), k (2,3,N,D), v;
 * MatMul(Mul(q, s), Mul(Transpose(k), s)) -> Softmax -> x v, s = D^-1/4,
 * quantized to FP16. */
static qf_graph *sdpa_graph(float s, int64_t M)
{
    qf_graph *g = qf_graph_new("sdpa_attention");
    g->opset = 17;
    int q = input(g, "q", 4, (int64_t[]){2, 3, M, ATT_D}), k = input(g, "k", 4, (int64_t[]){2, 3, ATT_N, ATT_D});
    int v = input(g, "v", 4, (int64_t[]){2, 3, ATT_N, ATT_D});
    int c = weight(g, "s", 0, NULL, s, s);
    int qs = value(g, "q.s"), kt = value(g, "k.t"), kts = value(g, "kt.s"), sc = value(g, "qk"), p = value(g, "p"),
        y = value(g, "av");
    op(g, "q_scale", QF_OP_MUL, 2, (int[]){q, c}, qs);
    set_ints(op(g, "k_t", QF_OP_TRANSPOSE, 1, &k, kt), "perm", 4, (int64_t[]){0, 1, 3, 2});
    op(g, "k_scale", QF_OP_MUL, 2, (int[]){kt, c}, kts);
    op(g, "qk", QF_OP_MATMUL, 2, (int[]){qs, kts}, sc);
    set_int(op(g, "softmax", QF_OP_SOFTMAX, 1, &sc, p), "axis", -1);
    op(g, "av", QF_OP_MATMUL, 2, (int[]){p, v}, y);
    output(g, y);
    return fp16_graph(g);
}

/* The chain takes the exporter's two scalar Muls and K's Transpose in: Q
 * and K read as they are, each FP32 score times s^2 (where the unfused
 * Muls round the scaled Q and K to half), K^T widened from K's rows. Closer
 * to the exact chain than the unfused nodes, within half's rounding of it. */
START_TEST(attention_chain_takes_sdpa_scale)
{
    const float s = 1.0f / sqrtf(sqrtf((float)ATT_D));
    const double sh = qf_f16_to_f32(qf_f32_to_f16(s)); /* the FP16 graph's constant */
    rng_use_xorshift(91);
    qf_graph *g = sdpa_graph(s, ATT_M);
    float *x[3];
    for (int k = 0; k < 3; k++) {
        x[k] = malloc((size_t)att_in_elems[k] * sizeof(float));
        for (int64_t i = 0; i < att_in_elems[k]; i++) x[k][i] = frand(-3.0f, 3.0f);
    }
    int first = -1;
    for (int i = 0; i < g->n_nodes; i++)
        if (!strcmp(g->nodes[i].name, "qk")) first = i;
    qfi_attention_chain ch;
    ck_assert(first >= 0 && qfi_attention_match(g, first, NULL, &ch));
    ck_assert_msg(ch.n_pre == 3 && ch.k_rows && ch.scale == (float)sh * (float)sh, "took %d nodes, K rows %d, scale %g",
                  ch.n_pre, ch.k_rows, (double)ch.scale);
    int fused, unfused_count;
    float *yf = run_attention(g, x, false, &fused), *yu = run_attention(g, x, true, &unfused_count);
    ck_assert_int_eq(fused, 1);
    ck_assert_int_eq(unfused_count, 0);
    float *kt = malloc((size_t)att_in_elems[1] * sizeof(float));
    for (int b = 0; b < 6; b++)
        for (int j = 0; j < ATT_N; j++)
            for (int d = 0; d < ATT_D; d++) kt[(b * ATT_D + d) * ATT_N + j] = x[1][(b * ATT_N + j) * ATT_D + d];
    float *xr[3] = {x[0], kt, x[2]};
    double *ref = attention_ref(xr, false, sh * sh);
    assert_closer_to_exact(yf, yu, ref, g->source);
    free(ref), free(kt), free(yf), free(yu);
    for (int k = 0; k < 3; k++) free(x[k]);
    qf_graph_free(g);
}
END_TEST

/* An I64 constant of n elements (0-D where n is 0: one element). */
static int i64_const(qf_graph *g, const char *name, int n, const int64_t *vals)
{
    const int cnt = n ? n : 1;
    int64_t *d = malloc((size_t)cnt * sizeof *d);
    memcpy(d, vals, (size_t)cnt * sizeof *d);
    return qfi_graph_add_const(g, name, QF_I64, n ? 1 : 0, (int64_t[]){n}, d);
}

/* torch.onnx's scaled dot product on the heads h (Q, K, V: (2, H, S, D)):
 * MatMul(Mul(Q, s), Mul(Transpose(K), s)), Softmax, MatMul by V as the
 * graph's output; g prepared at batch 2 and returned. */
static qf_graph *scaled_sdpa_output(qf_graph *g, const int h[3], float s)
{
    int c = weight(g, "s", 0, NULL, s, s);
    int qsv = value(g, "q.s"), kt = value(g, "k.t"), kts = value(g, "kt.s"), sc = value(g, "qk"), p = value(g, "p"),
        y = value(g, "av");
    op(g, "q_scale", QF_OP_MUL, 2, (int[]){h[0], c}, qsv);
    set_ints(op(g, "k_t", QF_OP_TRANSPOSE, 1, &h[1], kt), "perm", 4, (int64_t[]){0, 1, 3, 2});
    op(g, "k_scale", QF_OP_MUL, 2, (int[]){kt, c}, kts);
    op(g, "qk", QF_OP_MATMUL, 2, (int[]){qsv, kts}, sc);
    set_int(op(g, "softmax", QF_OP_SOFTMAX, 1, &sc, p), "axis", -1);
    op(g, "av", QF_OP_MATMUL, 2, (int[]){p, h[2]}, y);
    output(g, y);
    prepare_graph(g, 2);
    return g;
}

/* torch.onnx's nn.MultiheadAttention (batch_first) after its in-projection:
 * x (2, S, 3 E) -> Transpose(1, 0, 2) -> [MatMul by (E, 3 E) and a bias
 * Add, where inproj: then x is (2, S, E)] -> Reshape (S, 2, 3, E) ->
 * Unsqueeze(0) -> Transpose(3, 1, 2, 0, 4) -> Squeeze(3) -> Gather(0, i) ->
 * Reshape (S, 2 H, D) -> Transpose(1, 0, 2) -> Reshape (2, H, S, D) as Q, K
 * and V of sdpa_graph's form (H = 3, D = ATT_D, S = ATT_N, E = H D); FP32. */
enum { PK_S = ATT_N, PK_E = 3 * ATT_D };
static qf_graph *packed_attention_graph(float s, bool inproj)
{
    qf_graph *g = qf_graph_new(inproj ? "packed_attention_inproj" : "packed_attention");
    g->opset = 17;
    int x = value(g, "x.t");
    set_ints(op(g, "x.t", QF_OP_TRANSPOSE, 1, (int[]){input(g, "x", 3, (int64_t[]){2, PK_S, (inproj ? 1 : 3) * PK_E})}, x),
             "perm", 3, (int64_t[]){1, 0, 2});
    if (inproj) {
        int w = weight(g, "in_proj.w", 2, (int64_t[]){PK_E, 3 * PK_E}, -0.2f, 0.2f);
        int bias = weight(g, "in_proj.b", 1, (int64_t[]){3 * PK_E}, -0.1f, 0.1f), mm = value(g, "in_proj.mm");
        op(g, "in_proj.mm", QF_OP_MATMUL, 2, (int[]){x, w}, mm);
        x = value(g, "in_proj");
        op(g, "in_proj", QF_OP_ADD, 2, (int[]){mm, bias}, x);
    }
    int r1 = value(g, "r1"), u = value(g, "u"), t1 = value(g, "t1"), sq = value(g, "sq");
    op(g, "r1", QF_OP_RESHAPE, 2, (int[]){x, i64_const(g, "r1.shape", 4, (int64_t[]){PK_S, 2, 3, PK_E})}, r1);
    op(g, "u", QF_OP_UNSQUEEZE, 2, (int[]){r1, i64_const(g, "u.axes", 1, (int64_t[]){0})}, u);
    set_ints(op(g, "t1", QF_OP_TRANSPOSE, 1, &u, t1), "perm", 5, (int64_t[]){3, 1, 2, 0, 4});
    op(g, "sq", QF_OP_SQUEEZE, 2, (int[]){t1, i64_const(g, "sq.axes", 1, (int64_t[]){3})}, sq);
    int h[3];
    for (int i = 0; i < 3; i++) {
        char n[4][16], in[16];
        for (int k = 0; k < 4; k++) snprintf(n[k], sizeof n[k], "%c%d", "grth"[k], i);
        int gi = value(g, n[0]), ri = value(g, n[1]), ti = value(g, n[2]);
        h[i] = value(g, n[3]);
        snprintf(in, sizeof in, "idx%d", i);
        set_int(op(g, n[0], QF_OP_GATHER, 2, (int[]){sq, i64_const(g, in, 0, (int64_t[]){i})}, gi), "axis", 0);
        snprintf(in, sizeof in, "rs%d", i);
        op(g, n[1], QF_OP_RESHAPE, 2, (int[]){gi, i64_const(g, in, 3, (int64_t[]){PK_S, 2 * 3, ATT_D})}, ri);
        set_ints(op(g, n[2], QF_OP_TRANSPOSE, 1, &ri, ti), "perm", 3, (int64_t[]){1, 0, 2});
        snprintf(in, sizeof in, "hs%d", i);
        op(g, n[3], QF_OP_RESHAPE, 2, (int[]){ti, i64_const(g, in, 4, (int64_t[]){2, 3, PK_S, ATT_D})}, h[i]);
    }
    return scaled_sdpa_output(g, h, s);
}

/* timm's Attention (DeiT) after its qkv Linear: x (2, S, E) -> MatMul by
 * (E, 3 E) and a bias Add -> Reshape (2, S, 3, H, D) -> Transpose(2, 0, 3,
 * 1, 4) -> Split (axis 0, three parts) -> Squeeze(0) each as Q, K and V,
 * then torch.onnx's scaled dot product as in packed_attention_graph; FP32. */
static qf_graph *timm_attention_graph(float s)
{
    qf_graph *g = qf_graph_new("timm_attention");
    g->opset = 17;
    int x = input(g, "x", 3, (int64_t[]){2, PK_S, PK_E});
    int w = weight(g, "qkv.w", 2, (int64_t[]){PK_E, 3 * PK_E}, -0.2f, 0.2f);
    int bias = weight(g, "qkv.b", 1, (int64_t[]){3 * PK_E}, -0.1f, 0.1f), mm = value(g, "qkv.mm"), qkv = value(g, "qkv");
    op(g, "qkv.mm", QF_OP_MATMUL, 2, (int[]){x, w}, mm);
    op(g, "qkv", QF_OP_ADD, 2, (int[]){mm, bias}, qkv);
    int r = value(g, "r"), t = value(g, "t"), part[3], h[3];
    op(g, "r", QF_OP_RESHAPE, 2, (int[]){qkv, i64_const(g, "r.shape", 5, (int64_t[]){2, PK_S, 3, 3, ATT_D})}, r);
    set_ints(op(g, "t", QF_OP_TRANSPOSE, 1, &r, t), "perm", 5, (int64_t[]){2, 0, 3, 1, 4});
    for (int i = 0; i < 3; i++) {
        char n[2][8];
        snprintf(n[0], sizeof n[0], "part%d", i), snprintf(n[1], sizeof n[1], "h%d", i);
        part[i] = value(g, n[0]), h[i] = value(g, n[1]);
    }
    const int sp = qf_graph_add_node(g, "split", QF_OP_SPLIT, 1, &t, 3, part);
    ck_assert_int_ge(sp, 0);
    set_int(&g->nodes[sp], "axis", 0);
    for (int i = 0; i < 3; i++) {
        char n[8], ax[8];
        snprintf(n, sizeof n, "h%d", i), snprintf(ax, sizeof ax, "sq%d", i);
        op(g, n, QF_OP_SQUEEZE, 2, (int[]){part[i], i64_const(g, ax, 1, (int64_t[]){0})}, h[i]);
    }
    return scaled_sdpa_output(g, h, s);
}

/* The nodes before the chain that the engine's debug line says it took in */
static void note_pre(void *user, qf_log_level level, const char *msg)
{
    (void)level;
    const char *at = strstr(msg, "heads of ");
    if (at) sscanf(at, "heads of %*d; %d", (int *)user);
}

/* g's output on x on the CPU engine, QFORGE_CPU_NOFUSE set to env (NULL:
 * unset); the nodes its chain took in *pre */
static float *run_packed(const qf_graph *g, const float *x, const char *env, int *pre)
{
    if (env) setenv("QFORGE_CPU_NOFUSE", env, 1);
    *pre = -1;
    qf_engine *e = cpu_engine_noting(g, NULL, 2, note_pre, pre);
    if (env) unsetenv("QFORGE_CPU_NOFUSE");
    memcpy(qf_engine_input(e, 0), x, (size_t)qf_value_numel(&g->values[g->inputs[0]]) * sizeof *x);
    ck_assert_msg(qf_engine_run(e) == QF_OK, "%s", qf_error_message());
    const size_t n = (size_t)qf_value_numel(&g->values[g->outputs[0]]);
    float *y = malloc(n * sizeof *y);
    memcpy(y, qf_engine_output(e, 0), n * sizeof *y);
    qf_engine_free(e);
    return y;
}

/* The packed graph's chain reads Q, K and V where the value before the
 * heads' split holds them: every node between is the chain's (17 from the
 * entry Transpose; 20 with the two scale Muls and K's Transpose), and the
 * outputs are the bits of the same chain fed Q, K and V as inputs
 * (sdpa_graph): the views change where elements are read, not what is
 * computed. Quantized to INT8 with an in-projection first, the chain reads
 * that layer's int8 output through the DequantizeLinear the quantizer put
 * before the split, as the exported ViT-B/16 has it, and gives the bits it
 * gives without views (QFORGE_CPU_NOFUSE=views). */
START_TEST(attention_chain_reads_views)
{
    const float s = 1.0f / sqrtf(sqrtf((float)ATT_D));
    rng_use_xorshift(93);
    qf_graph *g = fp16_graph(packed_attention_graph(s, false));
    int first = node_index(g, "qk");
    qfi_attention_chain ch;
    ck_assert(first >= 0 && qfi_attention_match(g, first, NULL, &ch));
    ck_assert_msg(ch.n_pre == 20 && !ch.view[QFI_ATTN_Q].int8, "%s: %d nodes taken in", g->source, ch.n_pre);
    const int64_t n = 2 * PK_S * 3 * PK_E;
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++) x[i] = frand(-2.5f, 2.5f);
    int pre;
    float *y = run_packed(g, x, NULL, &pre);
    ck_assert_int_eq(pre, 20);
    /* Q, K, V as the unfused nodes make them: the half of x[b][t][i E + h D + d] */
    float *qkv[3];
    for (int i = 0; i < 3; i++) {
        qkv[i] = malloc((size_t)att_in_elems[2] * sizeof(float));
        for (int b = 0; b < 2; b++)
            for (int hh = 0; hh < 3; hh++)
                for (int t = 0; t < PK_S; t++)
                    for (int d = 0; d < ATT_D; d++)
                        qkv[i][((b * 3 + hh) * PK_S + t) * ATT_D + d] =
                            qf_f16_to_f32(qf_f32_to_f16(x[((int64_t)b * PK_S + t) * 3 * PK_E + i * PK_E + hh * ATT_D + d]));
    }
    qf_graph *ref = sdpa_graph(s, PK_S);
    qf_engine *er = cpu_engine_noting(ref, NULL, 2, NULL, NULL);
    for (int k = 0; k < 3; k++) memcpy(qf_engine_input(er, k), qkv[k], (size_t)att_in_elems[2] * sizeof(float));
    ck_assert_msg(qf_engine_run(er) == QF_OK, "%s", qf_error_message());
    ck_assert_int_eq(memcmp(y, qf_engine_output(er, 0), (size_t)2 * 3 * PK_S * ATT_D * sizeof(float)), 0);
    qf_engine_free(er);
    qf_graph_free(ref);
    qf_graph_free(g);
    free(y);
    for (int i = 0; i < 3; i++) free(qkv[i]);
    free(x);

    /* INT8 with the in-projection */
    g = packed_attention_graph(s, true);
    const int64_t nx = 2 * PK_S * PK_E;
    x = malloc((size_t)nx * sizeof *x);
    for (int64_t i = 0; i < nx; i++) x[i] = frand(-2.0f, 2.0f);
    qf_calib_table *t = calibrate_minmax(g, x);
    qf_quant_opts o;
    qf_quant_opts_init(&o);
    o.precision = QF_PREC_INT8;
    ck_assert_msg(qf_quantize(g, t, &o, NULL) == QF_OK, "%s", qf_error_message());
    qf_calib_table_free(t);
    first = node_index(g, "qk");
    ck_assert(first >= 0 && qfi_attention_match(g, first, NULL, &ch));
    ck_assert_msg(ch.view[QFI_ATTN_Q].int8 && ch.view[QFI_ATTN_K].int8 && ch.view[QFI_ATTN_V].int8,
                  "%s: %d nodes taken in, Q from an int8 root: %d", g->source, ch.n_pre, ch.view[QFI_ATTN_Q].int8);
    int pre_views, pre_plain;
    float *yv = run_packed(g, x, NULL, &pre_views), *yn = run_packed(g, x, "views", &pre_plain);
    ck_assert_msg(pre_views == ch.n_pre && pre_plain == 3, "%d and %d nodes taken in", pre_views, pre_plain);
    ck_assert_int_eq(memcmp(yv, yn, (size_t)2 * 3 * PK_S * ATT_D * sizeof(float)), 0);
    printf("  %s: %d nodes taken in, Q, K and V read from the in-projection's int8 output\n", g->source, ch.n_pre);
    free(yv), free(yn), free(x);
    qf_graph_free(g);
}
END_TEST

/* timm's DeiT at INT8: its scalar Muls (FP16 nodes) read the int8 Q and K
 * that the qkv Linear's Split made, so the chain takes the Muls, K's INT8
 * Transpose, the Squeezes, the Split, the Transpose and the Reshape in, and
 * reads Q, K and V from the qkv output's int8 rows (offsets 0, E and 2 E);
 * its output is the unfused nodes' within half precision's rounding. With
 * the views off, the chain starts at the Muls' half outputs, as before. */
START_TEST(attention_chain_reads_timm_split)
{
    const float s = 1.0f / sqrtf(sqrtf((float)ATT_D));
    rng_use_xorshift(94);
    qf_graph *g = timm_attention_graph(s);
    const int64_t nx = 2 * PK_S * PK_E;
    float *x = malloc((size_t)nx * sizeof *x);
    for (int64_t i = 0; i < nx; i++) x[i] = frand(-2.0f, 2.0f);
    qf_calib_table *t = calibrate_minmax(g, x);
    qf_quant_opts o;
    qf_quant_opts_init(&o);
    o.precision = QF_PREC_INT8;
    ck_assert_msg(qf_quantize(g, t, &o, NULL) == QF_OK, "%s", qf_error_message());
    qf_calib_table_free(t);
    const int first = node_index(g, "qk");
    qfi_attention_chain ch;
    ck_assert(first >= 0 && qfi_attention_match(g, first, NULL, &ch));
    bool took_split = false;
    for (int k = 0; k < ch.n_pre; k++) took_split |= g->nodes[ch.pre[k]].op == QF_OP_SPLIT;
    ck_assert_msg(took_split && ch.k_rows && fabsf(ch.scale - s * s) <= 1e-3f * s * s /* s as the FP16 Muls hold it */, "%s: %d nodes taken in, scale %g",
                  g->source, ch.n_pre, (double)ch.scale);
    for (int k = 0; k < 3; k++)
        ck_assert_msg(ch.view[k].int8 && ch.view[k].offset == k * PK_E && ch.view[k].row_stride == 3 * PK_E,
                      "operand %d: int8 %d, offset %lld, row stride %lld", k, ch.view[k].int8, (long long)ch.view[k].offset,
                      (long long)ch.view[k].row_stride);
    int pre_views, pre_plain, pre_none;
    float *yv = run_packed(g, x, NULL, &pre_views), *yp = run_packed(g, x, "views", &pre_plain),
          *yn = run_packed(g, x, "1", &pre_none);
    ck_assert_msg(pre_views == ch.n_pre && pre_plain >= 0 && pre_plain < pre_views && pre_none == -1,
                  "%d, %d and %d nodes taken in", pre_views, pre_plain, pre_none);
    const int64_t ny = 2 * 3 * PK_S * ATT_D;
    const double db = sqnr_db(yn, yv, ny), db_plain = sqnr_db(yn, yp, ny);
    printf("  %s: %d nodes taken in; against the unfused nodes %.1f dB (views off: %.1f dB)\n", g->source, ch.n_pre, db,
           db_plain);
    ck_assert_msg(db >= 50.0, "%.1f dB", db);
    free(yv), free(yp), free(yn), free(x);
    qf_graph_free(g);
}
END_TEST

static void count_epilogues(void *user, qf_log_level level, const char *msg)
{
    (void)level;
    int n;
    const char *at = strstr(msg, "CPU engine: ");
    if (at && sscanf(at, "CPU engine: %d activation nodes fused", &n) == 1) *(int *)user += n;
}

/* Runs the conv_epilogues graph on the CPU engine (QFORGE_CPU_NOFUSE when
 * nofuse); its outputs concatenated, the fused activations in *fused. */
static float *run_epilogues(const qf_graph *g, const float *x, int64_t nx, int64_t *ny, bool nofuse, int *fused)
{
    *fused = 0;
    qf_engine *e = cpu_engine_noting(g, nofuse ? "QFORGE_CPU_NOFUSE" : NULL, 3, count_epilogues, fused);
    memcpy(qf_engine_input(e, 0), x, (size_t)nx * sizeof(float));
    ck_assert_msg(qf_engine_run(e) == QF_OK, "%s", qf_error_message());
    *ny = 0;
    for (int k = 0; k < g->n_outputs; k++) *ny += qf_value_numel(&g->values[g->outputs[k]]);
    float *y = malloc((size_t)*ny * sizeof(float)), *p = y;
    for (int k = 0; k < g->n_outputs; k++) {
        int64_t n = qf_value_numel(&g->values[g->outputs[k]]);
        memcpy(p, qf_engine_output(e, k), (size_t)n * sizeof(float));
        p += n;
    }
    qf_engine_free(e);
    return y;
}

/* The activation(s) `kind` names after the value c: "relu", "clip", "clip0"
 * (a lower bound only), "silu" (Mul(x, Sigmoid(x))), "hswish" (the node),
 * "hswish_mul" (Mul(HardSigmoid(x), x)), "relu_sigmoid"; their output. */
static int add_activation(qf_graph *g, const char *name, const char *kind, int c, int lo, int hi)
{
    char nm[64];
    snprintf(nm, sizeof nm, "%s.act", name);
    int y = value(g, nm);
    if (!strcmp(kind, "relu")) op(g, nm, QF_OP_RELU, 1, &c, y);
    else if (!strcmp(kind, "clip")) op(g, nm, QF_OP_CLIP, 3, (int[]){c, lo, hi}, y);
    else if (!strcmp(kind, "clip0")) op(g, nm, QF_OP_CLIP, 2, (int[]){c, lo}, y);
    else if (!strcmp(kind, "hswish")) op(g, nm, QF_OP_HARD_SWISH, 1, &c, y);
    else {
        char gn[64];
        snprintf(gn, sizeof gn, "%s.gate", name);
        int gate = value(g, gn), in = c;
        if (!strcmp(kind, "relu_sigmoid")) {
            snprintf(gn, sizeof gn, "%s.relu", name);
            in = value(g, gn);
            op(g, gn, QF_OP_RELU, 1, &c, in);
            op(g, nm, QF_OP_SIGMOID, 1, &in, y);
            return y;
        }
        if (!strcmp(kind, "silu")) op(g, gn, QF_OP_SIGMOID, 1, &in, gate);
        else {
            qf_node *h = op(g, gn, QF_OP_HARD_SIGMOID, 1, &in, gate);
            set_float(h, "alpha", 1.0f / 6.0f);
            set_float(h, "beta", 0.5f);
        }
        op(g, nm, QF_OP_MUL, 2, !strcmp(kind, "silu") ? (int[]){in, gate} : (int[]){gate, in}, y);
    }
    return y;
}

/* The CPU engine fuses an FP32 Conv's activations (a sole-reader Relu or
 * Clip, then a Sigmoid, SiLU or HardSwish) into the Conv, on each conv path
 * (pointwise GEMM, depthwise, direct, the vector path of one position), with
 * the unfused nodes' bits; not where the Conv's output has another reader. */
START_TEST(conv_epilogues_fused)
{
    rng_use_xorshift(91);
    qf_graph *g = qf_graph_new("conv_epilogues");
    g->opset = 17;
    int x = input(g, "x", 4, (int64_t[]){2, 8, 9, 40});
    int zero = qfi_graph_add_const(g, "zero", QF_F32, 0, NULL, memcpy(malloc(sizeof(float)), &(float){0.0f}, sizeof(float)));
    int half = qfi_graph_add_const(g, "half", QF_F32, 0, NULL, memcpy(malloc(sizeof(float)), &(float){0.5f}, sizeof(float)));
    /* conv, its activations, the nodes they count, and whether the conv's output is also a graph output */
    struct { const char *name; int64_t m, group, k, stride; const char *act; int nodes; bool shared; } layers[] = {
        {"pointwise", 8, 1, 1, 1, "relu", 1, false},      {"depthwise", 8, 8, 3, 2, "clip", 1, false},
        {"dense", 6, 1, 3, 1, "clip0", 1, false},         {"shared", 8, 1, 1, 1, "relu", 0, true},
        {"pw_silu", 8, 1, 1, 1, "silu", 2, false},        {"dw_hswish", 8, 8, 5, 1, "hswish", 1, false},
        {"dense_hswish", 4, 1, 3, 2, "hswish_mul", 2, false}, {"dw_relu_sig", 8, 8, 3, 1, "relu_sigmoid", 2, false},
    };
    int want = 0;
    for (size_t l = 0; l < QF_ARRAY_LEN(layers); l++) {
        char nm[64];
        snprintf(nm, sizeof nm, "%s.w", layers[l].name);
        int w = weight(g, nm, 4, (int64_t[]){layers[l].m, 8 / layers[l].group, layers[l].k, layers[l].k}, -0.5f, 0.5f);
        snprintf(nm, sizeof nm, "%s.b", layers[l].name);
        int b = weight(g, nm, 1, (int64_t[]){layers[l].m}, -0.3f, 0.3f);
        int c = value(g, layers[l].name);
        qf_node *n = op(g, layers[l].name, QF_OP_CONV, 3, (int[]){x, w, b}, c);
        set_int(n, "group", layers[l].group);
        int64_t p = layers[l].k / 2;
        set_ints(n, "pads", 4, (int64_t[]){p, p, p, p});
        set_ints(n, "strides", 2, (int64_t[]){layers[l].stride, layers[l].stride});
        output(g, add_activation(g, layers[l].name, layers[l].act, c, layers[l].group > 1 ? zero : half, half));
        if (layers[l].shared) output(g, c);
        want += layers[l].nodes;
    }
    /* a squeeze-excitation FC (one position in, one out) and its sigmoid gate */
    int pooled = value(g, "pooled"), fc = value(g, "fc"), fc_act = value(g, "fc.act");
    op(g, "pool", QF_OP_GLOBAL_AVERAGE_POOL, 1, &x, pooled);
    int fw = weight(g, "fc.w", 4, (int64_t[]){5, 8, 1, 1}, -0.5f, 0.5f);
    op(g, "fc", QF_OP_CONV, 2, (int[]){pooled, fw}, fc);
    op(g, "fc.act", QF_OP_SIGMOID, 1, &fc, fc_act);
    output(g, fc_act);
    want++;
    prepare_graph(g, 2);
    float *in = malloc(2 * 8 * 9 * 40 * sizeof(float));
    for (int i = 0; i < 2 * 8 * 9 * 40; i++) in[i] = frand(-1.0f, 1.0f);
    int fused, unfused;
    int64_t nf, nu;
    float *yf = run_epilogues(g, in, 2 * 8 * 9 * 40, &nf, false, &fused), *yu = run_epilogues(g, in, 2 * 8 * 9 * 40, &nu, true, &unfused);
    ck_assert_int_eq(fused, want);
    ck_assert_int_eq(unfused, 0);
    ck_assert_int_eq(nf, nu);
    int clamped = 0;
    for (int64_t i = 0; i < nf; i++) clamped += yu[i] == 0.0f || yu[i] == 0.5f;
    ck_assert_msg(clamped > nf / 8, "the activations clamp only %d of %lld outputs", clamped, (long long)nf);
    ck_assert_int_eq(memcmp(yf, yu, (size_t)nf * sizeof(float)), 0);
    free(yf);
    free(yu);
    free(in);
    qf_graph_free(g);
}
END_TEST

/* ---- image-parallel runs ----------------------------------------------------------------- */

/* What the engine said it does with the batch: slices (their count), 0 for
 * layer by layer (the reason kept), -1 for neither. */
typedef struct batch_plan {
    int slices;
    char why[256];
} batch_plan;

static void note_batch_plan(void *user, qf_log_level level, const char *msg)
{
    (void)level;
    batch_plan *p = user;
    const char *at;
    int batch, n;
    if ((at = strstr(msg, "CPU engine: a batch of ")) && sscanf(at, "CPU engine: a batch of %d as %d slices", &batch, &n) == 2)
        p->slices = n;
    else if ((at = strstr(msg, "CPU engine: layer by layer: "))) {
        p->slices = 0;
        snprintf(p->why, sizeof p->why, "%s", at + strlen("CPU engine: layer by layer: "));
    }
}

/* Every output of g run on x with `threads` threads, concatenated
 * (QFORGE_CPU_LAYERWISE when layerwise); what the engine did in *plan. */
static float *run_batch(const qf_graph *g, const float *x, int threads, bool layerwise, batch_plan *plan, int64_t *ny)
{
    *plan = (batch_plan){.slices = -1};
    qf_engine *e = cpu_engine_noting(g, layerwise ? "QFORGE_CPU_LAYERWISE" : NULL, threads, note_batch_plan, plan);
    memcpy(qf_engine_input(e, 0), x, qf_value_bytes(&g->values[g->inputs[0]]));
    ck_assert_msg(qf_engine_run(e) == QF_OK, "%s", qf_error_message());
    *ny = 0;
    for (int k = 0; k < g->n_outputs; k++) *ny += qf_value_numel(&g->values[g->outputs[k]]);
    float *y = malloc((size_t)*ny * sizeof(float)), *p = y;
    for (int k = 0; k < g->n_outputs; k++) {
        const int64_t n = qf_value_numel(&g->values[g->outputs[k]]);
        memcpy(p, qf_engine_output(e, k), (size_t)n * sizeof(float));
        p += n;
    }
    qf_engine_free(e);
    return y;
}

/* A batch of 7 images through convs, pools, a classifier, a batched MatMul
 * of two activations, a Transpose and a Concat along channels; `mixer`
 * adds a node that mixes images (1-4) or lists an output twice (5); 0: neither. */
static qf_graph *slices_graph(int mixer)
{
    qf_graph *g = qf_graph_new("slices");
    g->opset = 17;
    int x = input(g, "x", 4, (int64_t[]){7, 4, 9, 9});
    int c1 = value(g, "c1"), r1 = value(g, "r1"), mp = value(g, "mp"), gp = value(g, "gp"), fl = value(g, "fl");
    int fc = value(g, "fc"), sm = value(g, "sm"), rs = value(g, "rs"), tr = value(g, "tr"), mm = value(g, "mm");
    int cat = value(g, "cat"), nhwc = value(g, "nhwc");
    conv_node(g, "c1", x, weight(g, "c1.w", 4, (int64_t[]){6, 4, 3, 3}, -0.5f, 0.5f),
              weight(g, "c1.b", 1, (int64_t[]){6}, -0.2f, 0.2f), c1, 1, 1);
    op(g, "r1", QF_OP_RELU, 1, &c1, r1);
    qf_node *n = op(g, "mp", QF_OP_MAX_POOL, 1, &r1, mp);
    set_ints(n, "kernel_shape", 2, (int64_t[]){2, 2});
    set_ints(n, "strides", 2, (int64_t[]){2, 2});
    op(g, "gp", QF_OP_GLOBAL_AVERAGE_POOL, 1, &mp, gp);
    op(g, "fl", QF_OP_FLATTEN, 1, &gp, fl);
    op(g, "fc", QF_OP_GEMM, 3,
       (int[]){fl, weight(g, "fc.w", 2, (int64_t[]){6, 5}, -1.0f, 1.0f), weight(g, "fc.b", 1, (int64_t[]){5}, -0.1f, 0.1f)},
       fc);
    set_int(op(g, "sm", QF_OP_SOFTMAX, 1, &fc, sm), "axis", 1);
    output(g, sm);
    /* (7, 6, 16) times its transpose (7, 16, 6): image by image */
    int shape = qfi_graph_add_const(g, "rs.shape", QF_I64, 1, (int64_t[]){3},
                                    memcpy(malloc(3 * sizeof(int64_t)), (int64_t[]){7, 6, 16}, 3 * sizeof(int64_t)));
    op(g, "rs", QF_OP_RESHAPE, 2, (int[]){mp, shape}, rs);
    set_ints(op(g, "tr", QF_OP_TRANSPOSE, 1, &rs, tr), "perm", 3, (int64_t[]){0, 2, 1});
    op(g, "mm", QF_OP_MATMUL, 2, (int[]){rs, tr}, mm);
    output(g, mm);
    set_int(op(g, "cat", QF_OP_CONCAT, 2, (int[]){c1, r1}, cat), "axis", 1);
    set_ints(op(g, "nhwc", QF_OP_TRANSPOSE, 1, &cat, nhwc), "perm", 4, (int64_t[]){0, 2, 3, 1});
    output(g, nhwc);
    int mix = value(g, "mix");
    if (mixer == 1) set_int(op(g, "mix", QF_OP_SOFTMAX, 1, &fc, mix), "axis", 0);
    if (mixer == 2) {
        n = op(g, "mix", QF_OP_REDUCE_MEAN, 1, &gp, mix);
        set_ints(n, "axes", 1, (int64_t[]){0});
    }
    if (mixer == 3) set_int(op(g, "mix", QF_OP_CONCAT, 2, (int[]){fc, fc}, mix), "axis", 0);
    if (mixer == 4) set_ints(op(g, "mix", QF_OP_TRANSPOSE, 1, &fc, mix), "perm", 2, (int64_t[]){1, 0});
    if (mixer >= 1 && mixer <= 4) output(g, mix);
    if (mixer == 5) output(g, sm); /* the same value twice: one buffer of the batch each */
    prepare_graph(g, 7);
    return g;
}

/* A batch that fits every thread two images runs as a slice per thread,
 * the bits of layer by layer (slices of 3 + 4, and 2 + 2 + 3); a node that
 * mixes images keeps it layer by layer, named in the debug log. */
START_TEST(images_in_slices)
{
    rng_use_xorshift(123);
    const int64_t nx = 7 * 4 * 9 * 9;
    float *x = malloc(nx * sizeof(float));
    for (int64_t i = 0; i < nx; i++) x[i] = frand(-1.0f, 1.0f);
    static const char *const mixers[] = {NULL, "Softmax mix normalizes along the batch", "ReduceMean mix reduces along the batch",
                                         "Concat mix joins along the batch", "Transpose mix moves the batch",
                                         "an output listed twice"};
    for (int mixer = 0; mixer < 6; mixer++) {
        qf_graph *g = slices_graph(mixer);
        batch_plan plan;
        int64_t n_ref, n;
        float *ref = run_batch(g, x, 2, true, &plan, &n_ref);
        ck_assert_int_eq(plan.slices, -1);
        for (int threads = 2; threads <= 4; threads++) {
            float *y = run_batch(g, x, threads, false, &plan, &n);
            if (threads == 4) { /* 7 images: not two a thread, not asked */
                ck_assert_int_eq(plan.slices, -1);
            } else if (mixer) {
                ck_assert_int_eq(plan.slices, 0);
                ck_assert_msg(strstr(plan.why, mixers[mixer]), "layer by layer because \"%s\"", plan.why);
            } else {
                ck_assert_int_eq(plan.slices, threads);
            }
            ck_assert_int_eq(n, n_ref);
            ck_assert_msg(memcmp(y, ref, (size_t)n * sizeof(float)) == 0, "mixer %d, %d threads: other bits", mixer, threads);
            free(y);
        }
        free(ref);
        qf_graph_free(g);
    }
    free(x);
}
END_TEST

/* The engine computes with subnormals flushed to zero (x86: FTZ and DAZ,
 * for each pass, on the pool's threads too), and with IEEE subnormals under
 * QFORGE_CPU_SUBNORMALS; the caller's floating-point environment is left as
 * it was. A batch of 8 on 2 threads runs as image slices, and layer by layer. */
START_TEST(subnormals_flushed)
{
#if defined(__x86_64__) || defined(__i386__)
    const float tiny = 5.877472e-39f /* subnormal: reads as 0 */, small = 2.0e-38f /* normal; half of it is not */;
    enum { B = 8, C = 64 };
    qf_graph *g = qf_graph_new("subnormals");
    g->opset = 17;
    int x = input(g, "x", 2, (int64_t[]){B, C}), y = value(g, "y");
    float *half = malloc(sizeof(float));
    *half = 0.5f;
    op(g, "mul", QF_OP_MUL, 2, (int[]){x, qfi_graph_add_const(g, "half", QF_F32, 0, NULL, half)}, y);
    output(g, y);
    prepare_graph(g, B);
    const unsigned modes = ~0x3fu; /* MXCSR less its sticky exception flags */
    const unsigned before = qfi_fp_env_get() & modes;
    for (int keep = 0; keep < 2; keep++)
        for (int layerwise = 0; layerwise < 2; layerwise++) {
            if (layerwise) setenv("QFORGE_CPU_LAYERWISE", "1", 1);
            qf_engine *e = cpu_engine_noting(g, keep ? "QFORGE_CPU_SUBNORMALS" : NULL, 2, NULL, NULL);
            unsetenv("QFORGE_CPU_LAYERWISE");
            float *in = qf_engine_input(e, 0);
            for (int i = 0; i < B * C; i++) in[i] = i % 3 == 0 ? 1.0f : i % 3 == 1 ? tiny : small;
            ck_assert_msg(qf_engine_run(e) == QF_OK, "%s", qf_error_message());
            ck_assert_uint_eq(qfi_fp_env_get() & modes, before);
            const float *out = qf_engine_output(e, 0);
            for (int i = 0; i < B * C; i++) {
                const float want = i % 3 == 0 ? 0.5f : !keep ? 0.0f : (i % 3 == 1 ? tiny : small) * 0.5f;
                ck_assert_msg(out[i] == want, "keep %d, layerwise %d: y[%d] = %g, want %g", keep, layerwise, i,
                              (double)out[i], (double)want);
            }
            qf_engine_free(e);
        }
    qf_graph_free(g);
#endif
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("ops_compute");
    TCase *tc = tcase_create("kernels");
    tcase_add_loop_test(tc, conv_matches_naive, 0, (int)(2 * QF_ARRAY_LEN(conv_cases)));
    tcase_add_test(tc, conv_epilogues_fused);
    tcase_add_loop_test(tc, conv_transpose_matches_naive, 0, (int)(2 * QF_ARRAY_LEN(convt_cases)));
    tcase_add_test(tc, conv_transpose_same_upper_known_answer);
    tcase_add_loop_test(tc, gemm_matches_naive, 0, (int)QF_ARRAY_LEN(gemm_cases));
    tcase_add_loop_test(tc, matmul_matches_naive, 0, (int)QF_ARRAY_LEN(matmul_cases));
    tcase_add_loop_test(tc, row_gemms_are_batch_invariant, 0, (int)QF_ARRAY_LEN(rows_cases));
    tcase_add_loop_test(tc, row_gemm_isas_agree, 0, 2);
    tcase_add_loop_test(tc, pool_matches_naive, 0, (int)QF_ARRAY_LEN(pool_cases));
    tcase_add_test(tc, global_pool_matches_naive);
    tcase_add_test(tc, images_in_slices);
    tcase_add_test(tc, subnormals_flushed);
    tcase_add_test(tc, batchnorm_matches_naive);
    tcase_add_test(tc, softmax_matches_naive);
    tcase_add_test(tc, reduce_mean_matches_naive);
    tcase_add_test(tc, flop_counts);
    tcase_add_test(tc, unsupported_and_invalid);
    tcase_add_test(tc, engine_runs_a_small_network);
    tcase_add_test(tc, attention_chain_fused);
    tcase_add_test(tc, attention_chain_takes_sdpa_scale);
    tcase_add_test(tc, attention_chain_reads_views);
    tcase_add_test(tc, attention_chain_reads_timm_split);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    rng_use_xorshift(0x9e3779b97f4a7c15ull);
    return run_suite(suite());
}
