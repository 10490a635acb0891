/* Cross-layer equalization (quant/equalize.c) on hand-built conv chains: the
 * FP32 function stays the same (bit for bit, so well within the 1e-5 asked),
 * the weight ranges of each pair meet within a factor 2, a Clip's upper bound
 * pins the channels that can reach it, shared weights are copied, and tables
 * made on a graph equalized otherwise are refused. Real models: test_quant_models. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <unistd.h>
#include "internal.h"
#include "testutil.h"
#include "qforge/quant.h"

/* A weight (m, cpg, k, k) whose output channel o is scaled by 4^((o % 5) - 2)
 * and input position j by 2^((j % 3) - 1) * 1.37, so that pairs start far
 * from balanced. */
static int skewed_weight(qf_graph *g, const char *name, int64_t m, int64_t cpg, int64_t k)
{
    const int64_t d[4] = {m, cpg, k, k};
    const int v = weight(g, name, 4, d, -1.0f, 1.0f);
    float *w = g->values[v].data;
    for (int64_t o = 0; o < m; o++)
        for (int64_t j = 0; j < cpg; j++)
            for (int64_t t = 0; t < k * k; t++)
                w[(o * cpg + j) * k * k + t] *= ldexpf(1.37f, 2 * (int)(o % 5) - 4 + (int)(j % 3) - 1);
    return v;
}

static int bias(qf_graph *g, const char *name, int64_t m)
{
    return weight(g, name, 1, (int64_t[]){m}, -0.5f, 0.5f);
}

/* x (2,4,10,10) -> A 3x3 (8) -> Relu -> B depthwise 3x3 -> C 1x1 (6) -> y:
 * pairs (A, B) through the Relu and (B, C) directly, joined by B. */
static qf_graph *relu_chain(void)
{
    rng = 11;
    qf_graph *g = qf_graph_new("relu_chain");
    int x = input(g, "x", 4, (int64_t[]){2, 4, 10, 10});
    int a = value(g, "a"), r = value(g, "r"), b = value(g, "b"), y = value(g, "y");
    conv_node(g, "A", x, skewed_weight(g, "wA", 8, 4, 3), bias(g, "bA", 8), a, 1, 1);
    op(g, "relu", QF_OP_RELU, 1, (int[]){a}, r);
    conv_node(g, "B", r, skewed_weight(g, "wB", 8, 1, 3), bias(g, "bB", 8), b, 1, 8);
    conv_node(g, "C", b, skewed_weight(g, "wC", 6, 8, 1), -1, y, 0, 1);
    output(g, y);
    prepare_graph(g, 2);
    return g;
}

/* max over channels of |log2(r1 / r2)|, r1 the largest |w| of Conv na's output
 * channel c and r2 of the weights of Conv nb that read its input channel c
 * (nb grouped by g_b), computed here without the library's help. */
static double worst_imbalance(const qf_graph *g, const char *na, const char *nb)
{
    const qf_value *wa = &g->values[node_named(g, na)->in[1]], *wb = &g->values[node_named(g, nb)->in[1]];
    const int64_t m = wa->dims[0], pa = qf_value_numel(wa) / m;
    const int64_t mb = wb->dims[0], cpg = wb->dims[1], kb = qf_value_numel(wb) / mb / cpg, grp = m / cpg;
    const float *a = wa->data, *b = wb->data;
    double worst = 0.0;
    for (int64_t c = 0; c < m; c++) {
        float r1 = 0.0f, r2 = 0.0f;
        for (int64_t j = 0; j < pa; j++) r1 = fmaxf(r1, fabsf(a[c * pa + j]));
        const int64_t gi = c / cpg, mpg = mb / grp;
        for (int64_t o = gi * mpg; o < (gi + 1) * mpg; o++)
            for (int64_t t = 0; t < kb; t++) r2 = fmaxf(r2, fabsf(b[(o * cpg + c % cpg) * kb + t]));
        worst = fmax(worst, fabs(log2((double)r1 / r2)));
    }
    return worst;
}

START_TEST(relu_chain_same_function_ranges_met)
{
    qf_graph *g0 = relu_chain(), *g1 = relu_chain();
    const double ab0 = worst_imbalance(g1, "A", "B"), bc0 = worst_imbalance(g1, "B", "C");
    qf_equalize_info info;
    OK(qf_graph_equalize(g1, &info));
    ck_assert_int_eq(info.pairs, 2);
    ck_assert_int_eq(info.pairs_clipped, 0);
    ck_assert_int_eq(info.pairs_moved, 2);
    ck_assert_int_eq(info.channels, 16);
    ck_assert_int_gt(info.channels_moved, 8);
    ck_assert_int_ge(info.sweeps, 2); /* B sits in both pairs: the second sweep rebalances (A, B) */
    ck_assert_double_lt(info.imbalance_after, info.imbalance_before / 3);
    /* balanced within a factor 2 at the fixed point, from far apart */
    ck_assert_double_gt(ab0, 2.0);
    ck_assert_double_gt(bc0, 2.0);
    ck_assert_double_le(worst_imbalance(g1, "A", "B"), 1.0);
    ck_assert_double_le(worst_imbalance(g1, "B", "C"), 1.0);
    ck_assert_int_eq((int)strlen(g1->equalized), 64);
    float *x = random_input(g0, 5, -2.0f, 2.0f);
    assert_same_function(g0, g1, x);
    /* the same graph equalizes to the same digest; a second pass is refused */
    qf_graph *g2 = relu_chain();
    OK(qf_graph_equalize(g2, NULL));
    ck_assert_str_eq(g1->equalized, g2->equalized);
    ck_assert_int_eq(qf_graph_equalize(g2, NULL), QF_ERR_USAGE);
    free(x);
    qf_graph_free(g0);
    qf_graph_free(g1);
    qf_graph_free(g2);
}
END_TEST

/* x -> Clip(0, 6) -> A depthwise 3x3 (8 channels) -> Clip(0, 6) -> B 1x1 (4):
 * A's channels 0-3 have small weights (their outputs provably stay below 6),
 * channels 4-7 large ones (they reach 6 on this input). */
static qf_graph *relu6_chain(void)
{
    rng = 23;
    qf_graph *g = qf_graph_new("relu6_chain");
    int x = input(g, "x", 4, (int64_t[]){2, 8, 9, 9});
    int x6 = value(g, "x6"), a = value(g, "a"), a6 = value(g, "a6"), y = value(g, "y");
    int c0 = weight(g, "zero", 0, NULL, 0.0f, 0.0f), c6 = weight(g, "six", 0, NULL, 6.0f, 6.0f);
    op(g, "clip_in", QF_OP_CLIP, 3, (int[]){x, c0, c6}, x6);
    const int wa = weight(g, "wA", 4, (int64_t[]){8, 1, 3, 3}, -1.0f, 1.0f);
    float *w = g->values[wa].data;
    for (int c = 0; c < 8; c++)
        for (int t = 0; t < 9; t++) w[c * 9 + t] *= c < 4 ? 0.02f * (float)(c + 1) : 2.0f;
    conv_node(g, "A", x6, wa, bias(g, "bA", 8), a, 1, 8);
    op(g, "relu6", QF_OP_CLIP, 3, (int[]){a, c0, c6}, a6);
    const int wb = weight(g, "wB", 4, (int64_t[]){4, 8, 1, 1}, -1.0f, 1.0f);
    w = g->values[wb].data;
    for (int o = 0; o < 4; o++)
        for (int c = 0; c < 8; c++) w[o * 8 + c] *= c % 2 ? 3.0f : 0.1f;
    conv_node(g, "B", a6, wb, -1, y, 0, 1);
    output(g, y);
    prepare_graph(g, 2);
    return g;
}

typedef struct chan_max {
    int value;
    float max[8];
} chan_max;

/* Observer: the largest value of each channel of one (2, 8, H, W) tensor. */
static void track_max(void *user, const qf_graph *g, int v, const void *data)
{
    chan_max *cm = user;
    if (v != cm->value) return;
    const int64_t hw = qf_value_numel(&g->values[v]) / 16;
    for (int64_t i = 0; i < 16 * hw; i++) {
        const int c = (int)(i / hw % 8);
        cm->max[c] = fmaxf(cm->max[c], ((const float *)data)[i]);
    }
}

START_TEST(relu6_moves_only_channels_below_its_bound)
{
    qf_graph *g0 = relu6_chain(), *g1 = relu6_chain();
    qf_equalize_info info;
    OK(qf_graph_equalize(g1, &info));
    ck_assert_int_eq(info.pairs, 1);
    ck_assert_int_eq(info.pairs_clipped, 1);
    /* channels 0-3 move (B's weights there are small too: r1/r2 far from 1 only
     * for some), channels 4-7 can reach 6 and stay */
    const float *w0 = g0->values[node_named(g0, "A")->in[1]].data, *w1 = g1->values[node_named(g1, "A")->in[1]].data;
    int moved_low = 0;
    for (int c = 0; c < 8; c++) {
        const bool same = !memcmp(w0 + c * 9, w1 + c * 9, 9 * sizeof *w0);
        if (c >= 4) ck_assert_msg(same, "channel %d reaches the Clip's bound but moved", c);
        else moved_low += !same;
    }
    ck_assert_int_ge(moved_low, 1);
    ck_assert_int_eq(info.channels_moved, moved_low);
    /* the input makes channels 4-7 clip (the test would see a wrong move) and
     * keeps the moved ones below 6 */
    float *x = random_input(g0, 9, -1.0f, 8.0f);
    chan_max cm = {.value = node_named(g1, "A")->out[0]};
    free(run(g1, x, track_max, &cm));
    for (int c = 4; c < 8; c++) ck_assert_float_gt(cm.max[c], 6.0f);
    for (int c = 0; c < 4; c++) ck_assert_float_le(cm.max[c], 6.0f);
    assert_same_function(g0, g1, x);
    free(x);
    qf_graph_free(g0);
    qf_graph_free(g1);
}
END_TEST

START_TEST(pairs_only_where_the_function_allows)
{
    rng = 31;
    /* A -> Sigmoid -> B: Sigmoid does not commute with scaling; C's output is
     * read twice (D and a residual Add): neither is a pair; E -> Clip(-1, 1)
     * -> F: a lower bound other than 0 is no pair either; B -> C (nothing
     * between) and F -> Relu -> G are */
    qf_graph *g = qf_graph_new("no_pairs");
    int x = input(g, "x", 4, (int64_t[]){1, 4, 6, 6});
    int a = value(g, "a"), s = value(g, "s"), b = value(g, "b"), c = value(g, "c"), d = value(g, "d");
    int r = value(g, "r"), e = value(g, "e"), ec = value(g, "ec"), f = value(g, "f"), fr = value(g, "fr");
    int y = value(g, "y");
    conv_node(g, "A", x, skewed_weight(g, "wA", 4, 4, 1), -1, a, 0, 1);
    op(g, "sig", QF_OP_SIGMOID, 1, (int[]){a}, s);
    conv_node(g, "B", s, skewed_weight(g, "wB", 4, 4, 1), -1, b, 0, 1);
    conv_node(g, "C", b, skewed_weight(g, "wC", 4, 4, 1), -1, c, 0, 1);
    conv_node(g, "D", c, skewed_weight(g, "wD", 4, 4, 1), -1, d, 0, 1);
    op(g, "res", QF_OP_ADD, 2, (int[]){c, d}, r);
    conv_node(g, "E", r, skewed_weight(g, "wE", 4, 4, 1), -1, e, 0, 1);
    int lo = weight(g, "m1", 0, NULL, -1.0f, -1.0f), hi = weight(g, "p1", 0, NULL, 1.0f, 1.0f);
    op(g, "clip", QF_OP_CLIP, 3, (int[]){e, lo, hi}, ec);
    conv_node(g, "F", ec, skewed_weight(g, "wF", 4, 4, 1), -1, f, 0, 1);
    op(g, "relu", QF_OP_RELU, 1, (int[]){f}, fr);
    conv_node(g, "G", fr, skewed_weight(g, "wG", 4, 4, 1), -1, y, 0, 1);
    output(g, y);
    prepare_graph(g, 1);
    qf_equalize_info info;
    OK(qf_graph_equalize(g, &info));
    ck_assert_int_eq(info.pairs, 2); /* B -> C, F -> Relu -> G */
    ck_assert_int_eq(info.pairs_moved, 2);
    ck_assert_double_le(worst_imbalance(g, "B", "C"), 1.0);
    ck_assert_double_le(worst_imbalance(g, "F", "G"), 1.0);
    ck_assert_double_gt(worst_imbalance(g, "C", "D"), 1.0);
    qf_graph_free(g);
}
END_TEST

/* x -> A -> Relu -> B -> Relu -> C -> y, beside x -> A2 and x -> B2, which
 * share A's and B's weights; B sits in two pairs. */
static qf_graph *shared_chain(void)
{
    rng = 41;
    qf_graph *g = qf_graph_new("shared");
    int x = input(g, "x", 4, (int64_t[]){1, 4, 5, 5});
    int a = value(g, "a"), ar = value(g, "ar"), b = value(g, "b"), br = value(g, "br"), y = value(g, "y");
    int z = value(g, "z"), w = value(g, "w"), s1 = value(g, "s1"), s2 = value(g, "s2");
    const int wa = skewed_weight(g, "wA", 4, 4, 3), wb = skewed_weight(g, "wB", 4, 4, 3);
    conv_node(g, "A", x, wa, -1, a, 1, 1);
    op(g, "relu_a", QF_OP_RELU, 1, (int[]){a}, ar);
    conv_node(g, "B", ar, wb, -1, b, 1, 1);
    op(g, "relu_b", QF_OP_RELU, 1, (int[]){b}, br);
    conv_node(g, "C", br, skewed_weight(g, "wC", 4, 4, 3), -1, y, 1, 1);
    conv_node(g, "A2", x, wa, -1, z, 1, 1);
    conv_node(g, "B2", x, wb, -1, w, 1, 1);
    op(g, "sum1", QF_OP_ADD, 2, (int[]){y, z}, s1);
    op(g, "sum2", QF_OP_ADD, 2, (int[]){s1, w}, s2);
    output(g, s2);
    prepare_graph(g, 1);
    return g;
}

START_TEST(shared_weights_are_copied)
{
    qf_graph *g0 = shared_chain(), *g1 = shared_chain();
    qf_equalize_info info;
    OK(qf_graph_equalize(g1, &info));
    ck_assert_int_eq(info.pairs_moved, 2);
    for (int k = 0; k < 2; k++) {
        const char *own = k ? "B" : "A", *other = k ? "B2" : "A2";
        ck_assert_int_ne(node_named(g1, own)->in[1], node_named(g1, other)->in[1]);
        ck_assert(!memcmp(g1->values[node_named(g1, other)->in[1]].data,
                          g0->values[node_named(g0, other)->in[1]].data, 4 * 4 * 9 * sizeof(float)));
    }
    float *x = random_input(g0, 3, -1.0f, 1.0f);
    assert_same_function(g0, g1, x);
    free(x);
    qf_graph_free(g0);
    qf_graph_free(g1);
}
END_TEST

START_TEST(tables_follow_the_equalization)
{
    qf_graph *plain = relu_chain(), *eq = relu_chain();
    OK(qf_graph_equalize(eq, NULL));
    float *x = random_input(plain, 5, -2.0f, 2.0f);
    qf_calib_table *tp = calibrate_minmax(plain, x), *te = calibrate_minmax(eq, x);
    ck_assert_str_eq(tp->equalized, "");
    ck_assert_str_eq(te->equalized, eq->equalized);
    /* the tensors between the pairs were scaled per channel: their ranges differ */
    const int i = qf_calib_table_find(tp, "r");
    ck_assert_int_ge(i, 0);
    ck_assert_float_ne(tp->entries[i].amax[QF_CALIB_MINMAX], te->entries[i].amax[QF_CALIB_MINMAX]);
    /* a table is used only on a graph equalized as it was made */
    qf_quant_opts o;
    qf_quant_opts_init(&o);
    ck_assert_int_eq(qf_quantize(eq, tp, &o, NULL), QF_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), "calibrate with --equalize"));
    ck_assert_int_eq(qf_quantize(plain, te, &o, NULL), QF_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), "equalize it too"));
    qf_bias_fix *bf = NULL;
    ck_assert_int_eq(qf_bias_fix_create(plain, te, &o, 1, &bf), QF_ERR_USAGE);
    /* the record survives the file (version 3, which has the tensors' minimums
     * too), TensorRT gets no cache of it */
    char path[] = "/tmp/qf_equalize_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    OK(qf_calib_table_write(te, path));
    qf_calib_table *back;
    OK(qf_calib_table_read(path, &back));
    ck_assert_int_eq(back->version, 3);
    ck_assert_str_eq(back->equalized, eq->equalized);
    ck_assert_int_eq(qf_calib_table_write_trt(te, QF_CALIB_MINMAX, path), QF_ERR_USAGE);
    OK(qf_calib_table_write(tp, path));
    qf_calib_table_free(back);
    OK(qf_calib_table_read(path, &back));
    ck_assert_int_eq(back->version, 3);
    ck_assert_str_eq(back->equalized, "");
    /* matched, both quantize; the .qfm carries the record back to the graph */
    OK(qf_quantize(eq, te, &o, NULL));
    OK(qf_qfm_write(eq, NULL, path));
    qf_graph *rd;
    qf_qfm_meta meta;
    OK(qf_qfm_read(path, 0, &rd, &meta));
    ck_assert_str_eq(meta.equalized, te->equalized);
    ck_assert_str_eq(rd->equalized, te->equalized);
    /* and a quantized graph is not equalized (again) */
    ck_assert_int_eq(qf_graph_equalize(rd, NULL), QF_ERR_USAGE);
    OK(qf_quantize(plain, tp, &o, NULL));
    unlink(path);
    free(x);
    qf_graph_free(rd);
    qf_calib_table_free(back);
    qf_calib_table_free(tp);
    qf_calib_table_free(te);
    qf_graph_free(plain);
    qf_graph_free(eq);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("equalize");
    TCase *tc = tcase_create("equalize");
    tcase_add_test(tc, relu_chain_same_function_ranges_met);
    tcase_add_test(tc, relu6_moves_only_channels_below_its_bound);
    tcase_add_test(tc, pairs_only_where_the_function_allows);
    tcase_add_test(tc, shared_weights_are_copied);
    tcase_add_test(tc, tables_follow_the_equalization);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
