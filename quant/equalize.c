/* Cross-layer equalization (Nagel et al. 2019, "Data-Free Quantization
 * Through Weight Equalization and Bias Correction", sec. 4.1) of a prepared
 * FP32 graph, before calibration: where Conv A alone feeds Conv B (directly,
 * through a Relu, or through a Clip(0, hi) such as ReLU6), A's output channel c
 * is divided by s_c and B's input channel c multiplied by it, so that the two
 * channels' weight ranges meet; sweeps repeat until no pair moves (a depthwise
 * layer sits in two pairs). The FP32 function is unchanged bit for bit: see
 * balance_exponent and clip_allows. */
#include <float.h>
#include <math.h>
#include "quant_internal.h"
#include "ops/nn.h"
#include "ops/tensor_ops.h"

/* Sweeps over the pairs before giving up on a fixed point (chains of depthwise
 * layers settle in a few; rounded steps could in principle cycle). */
#define MAX_SWEEPS 64
/* A Clip's upper bound counts as inactive on a channel only where the channel's
 * proven bound lies this far below it: room for float summation, whose order
 * the proof does not follow. */
#define CLIP_MARGIN (1.0 + 0x1p-16)

typedef struct eq_pair {
    int a, b;          /* node indices of Conv A and Conv B */
    float hi;          /* the upper bound of the Clip between them; +INFINITY without one */
    int64_t ch;        /* channels from A to B */
    int32_t *k;        /* per channel: A's output divided and B's input multiplied by 2^k, summed over sweeps */
    double *ub;        /* Clip pairs, per channel: a proven upper bound of A's current output (+inf: none) */
} eq_pair;

/* A Conv's weight as (M, C/group, kernel...): m output channels of `per`
 * weights each, `group` groups. */
typedef struct conv_w {
    float *w, *b;      /* b: NULL without a bias */
    int64_t m, cpg, ksize, per, group;
} conv_w;

static void conv_w_get(const qf_graph *g, const qf_node *n, conv_w *cw)
{
    const qf_value *w = &g->values[n->in[1]];
    cw->w = w->data;
    cw->b = n->n_in > 2 && n->in[2] >= 0 ? g->values[n->in[2]].data : NULL;
    cw->m = w->dims[0];
    cw->cpg = w->dims[1];
    cw->per = qf_value_numel(w) / cw->m;
    cw->ksize = cw->per / cw->cpg;
    cw->group = ((const qfi_conv_params *)n->params)->group;
}

static bool const_f32(const qf_value *v)
{
    return (v->flags & QF_VALUE_CONST) && v->data && v->dtype == QF_F32;
}

/* A Conv with constant f32 weights (and bias, if any) of the usual layout. */
static bool plain_conv(const qf_graph *g, const qf_node *n)
{
    if (n->op != QF_OP_CONV || n->n_in < 2 || !n->params || n->in[0] < 0 || n->in[1] < 0) return false;
    const qf_value *w = &g->values[n->in[1]];
    if (!const_f32(w) || w->ndim < 3 || w->dims[0] <= 0 || w->dims[1] <= 0) return false;
    const int64_t group = ((const qfi_conv_params *)n->params)->group;
    if (group <= 0 || w->dims[0] % group) return false;
    if (n->n_in > 2 && n->in[2] >= 0) {
        const qf_value *b = &g->values[n->in[2]];
        if (!const_f32(b) || qf_value_numel(b) != w->dims[0]) return false;
    }
    return true;
}

/* The node that alone reads v (which is no graph output), or -1. */
static int sole_reader(const qf_graph *g, const int *use_start, const int *use_node, int v)
{
    if (g->values[v].flags & QF_VALUE_OUTPUT || use_start[v + 1] - use_start[v] != 1) return -1;
    return use_node[use_start[v]];
}

/* Whether activation node n commutes with dividing its input by any s > 0 on
 * the side of 0 (Relu; a Clip whose lower bound is 0 or absent); *hi: a Clip's
 * upper bound, which does not (clip_allows), or +INFINITY. */
static bool scalable_activation(const qf_graph *g, const qf_node *n, float *hi)
{
    *hi = INFINITY;
    if (n->op == QF_OP_RELU) return true;
    float lo;
    if (n->op != QF_OP_CLIP || qfi_clip_bounds(g, n, &lo, hi) != QF_OK) return false;
    if (*hi >= FLT_MAX) *hi = INFINITY;
    return (lo == 0.0f || lo <= -FLT_MAX) && *hi > 0.0f;
}

/* The pairs of g, each A and B in graph order. */
static qf_status find_pairs(const qf_graph *g, eq_pair **out, int *n_out)
{
    *out = NULL;
    *n_out = 0;
    int *use_start, *use_node;
    QF_CHECK(qfi_graph_uses(g, &use_start, &use_node));
    eq_pair *p = qfi_calloc((size_t)g->n_nodes + 1, sizeof *p);
    qf_status st = p ? QF_OK : QF_ERR_NOMEM;
    int n = 0;
    for (int i = 0; i < g->n_nodes && st == QF_OK; i++) {
        const qf_node *a = &g->nodes[i];
        if (!plain_conv(g, a)) continue;
        int r = sole_reader(g, use_start, use_node, a->out[0]), z = a->out[0];
        float hi = INFINITY;
        if (r >= 0 && g->nodes[r].op != QF_OP_CONV) {
            if (!scalable_activation(g, &g->nodes[r], &hi)) continue;
            z = g->nodes[r].out[0];
            r = sole_reader(g, use_start, use_node, z);
        }
        if (r < 0 || !plain_conv(g, &g->nodes[r]) || g->nodes[r].in[0] != z) continue;
        conv_w wa, wb;
        conv_w_get(g, a, &wa);
        conv_w_get(g, &g->nodes[r], &wb);
        if (wb.cpg * wb.group != wa.m) continue;
        p[n] = (eq_pair){.a = i, .b = r, .hi = hi, .ch = wa.m};
        p[n].k = qfi_calloc((size_t)wa.m, sizeof *p[n].k);
        p[n].ub = qfi_calloc((size_t)wa.m, sizeof *p[n].ub);
        if (!p[n].k || !p[n].ub) st = QF_ERR_NOMEM;
        for (int64_t c = 0; p[n].ub && c < wa.m; c++) p[n].ub[c] = INFINITY;
        n++;
    }
    free(use_start);
    free(use_node);
    *out = p;
    *n_out = n;
    return st;
}

static void pairs_free(eq_pair *p, int n)
{
    for (int i = 0; p && i < n; i++) {
        free(p[i].k);
        free(p[i].ub);
    }
    free(p);
}

/* ---- ranges ---------------------------------------------------------------------- */

/* max |w| of A's output channel c. */
static float out_range(const conv_w *a, int64_t c)
{
    float r = 0.0f;
    for (int64_t j = 0; j < a->per; j++) r = fmaxf(r, fabsf(a->w[c * a->per + j]));
    return r;
}

/* max |w| over the weights of B that read its input channel c. */
static float in_range(const conv_w *b, int64_t c)
{
    const int64_t grp = c / b->cpg, j = c % b->cpg, mpg = b->m / b->group;
    float r = 0.0f;
    for (int64_t o = grp * mpg; o < (grp + 1) * mpg; o++)
        for (int64_t t = 0; t < b->ksize; t++) r = fmaxf(r, fabsf(b->w[o * b->per + j * b->ksize + t]));
    return r;
}

/* An upper bound of A's output channel c for inputs in x (widened to hold
 * the zeros of padding): sum of w * (x.hi or x.lo, whichever is larger) + b. */
static double upper_bound(const conv_w *a, int64_t c, qfi_range x)
{
    const double lo = fmin(x.lo, 0.0), hi = fmax(x.hi, 0.0);
    double u = a->b ? a->b[c] : 0.0;
    for (int64_t j = 0; j < a->per; j++) {
        const double w = a->w[c * a->per + j];
        if (w > 0) u += w * hi;
        else if (w < 0) u += w * lo;
    }
    return u != u ? INFINITY : u;
}

/* ---- one channel's move ----------------------------------------------------------- */

/* The k that brings r1 / 2^k and r2 * 2^k within a factor 2 of each other:
 * floor((n + 1) / 2) for n = floor(log2(r1 / r2)), computed from the
 * exponents alone, so no rounding of the ratio can tip it. A ratio within
 * [1/2, 2) gives 0, so a balanced pair stays where it is. Powers of two are
 * what keeps the FP32 function bit for bit: every scaled weight and bias is
 * exact, so A's output is exactly the old one over 2^k (each product and sum
 * scales exactly), Relu commutes with it, and B's products are the old ones.
 * (Against exact equalization it leaves the ranges up to sqrt(2) apart.) */
static int balance_exponent(float r1, float r2)
{
    int e1, e2;
    const float m1 = frexpf(r1, &e1), m2 = frexpf(r2, &e2);
    const int t = e1 - e2 - (m1 < m2) + 1;
    return t >= 0 ? t / 2 : -((1 - t) / 2);
}

/* The smallest k with 2^k >= q (q > 0), exactly. */
static int ceil_log2(double q)
{
    int e;
    const double m = frexp(q, &e);
    return m == 0.5 ? e - 1 : e;
}

/* Whether a Clip(0, hi) after A lets channel c move by 2^-k, and the k it
 * allows instead (*k raised) when a smaller one would cross hi. Dividing by
 * s commutes with the Clip only where the channel never reaches hi, before
 * the move and after it. The first move of a channel needs a proof that its
 * values lie below hi; the bound `ub` then moves with the channel (exactly, by
 * 2^-k), and is tightened by the bound of the current weights. */
static bool clip_allows(const eq_pair *p, int64_t c, double ub, int *k)
{
    if (ub <= 0.0) return true; /* never positive: the Clip outputs 0 whatever the scale */
    const double need = ub * CLIP_MARGIN;
    if (!(need <= p->hi)) return false;
    const int kmin = ceil_log2(need / p->hi); /* <= 0 */
    if (*k < kmin) *k = kmin;
    return true;
}

/* Whether every nonzero x[i * stride], i < n, stays a normal float times 2^k. */
static bool scales_exactly(const float *x, int64_t n, int64_t stride, int k)
{
    for (int64_t i = 0; i < n; i++) {
        const float v = fabsf(x[i * stride]);
        if (v == 0.0f) continue;
        const float s = ldexpf(v, k);
        if (!(v >= FLT_MIN) || !(s >= FLT_MIN) || !(s <= FLT_MAX / 2)) return false;
    }
    return true;
}

/* Moves channel c of pair p by 2^k, if every weight it touches scales exactly. */
static bool move_channel(const conv_w *a, const conv_w *b, int64_t c, int k)
{
    const int64_t grp = c / b->cpg, j = c % b->cpg, mpg = b->m / b->group;
    if (!scales_exactly(a->w + c * a->per, a->per, 1, -k) || (a->b && !scales_exactly(a->b + c, 1, 1, -k)))
        return false;
    for (int64_t o = grp * mpg; o < (grp + 1) * mpg; o++)
        if (!scales_exactly(b->w + o * b->per + j * b->ksize, b->ksize, 1, k)) return false;
    for (int64_t t = 0; t < a->per; t++) a->w[c * a->per + t] = ldexpf(a->w[c * a->per + t], -k);
    if (a->b) a->b[c] = ldexpf(a->b[c], -k);
    for (int64_t o = grp * mpg; o < (grp + 1) * mpg; o++)
        for (int64_t t = 0; t < b->ksize; t++) {
            float *w = &b->w[o * b->per + j * b->ksize + t];
            *w = ldexpf(*w, k);
        }
    return true;
}

/* Gives node n its own copy of constant input `slot` where another reader
 * (or the graph's outputs) shares it, so that scaling it touches nothing else.
 * readers: per value of the graph as it was (n_readers values; the copies
 * made since are read by their node alone). */
static qf_status own_constant(qf_graph *g, int n, int slot, const int *readers, int n_readers)
{
    const int v = g->nodes[n].in[slot];
    if (v >= n_readers || (readers[v] <= 1 && !(g->values[v].flags & (QF_VALUE_OUTPUT | QF_VALUE_INPUT))))
        return QF_OK;
    char name[512];
    snprintf(name, sizeof name, "%s/equalized_%d", g->nodes[n].name, slot);
    const int nv = qf_graph_add_value(g, name, QF_F32, g->values[v].ndim, g->values[v].dims);
    if (nv < 0) return QF_ERR_NOMEM;
    const size_t bytes = qf_value_bytes(&g->values[v]);
    void *d = malloc(bytes ? bytes : 1);
    if (!d) return qf_error(QF_ERR_NOMEM, "out of memory");
    memcpy(d, g->values[v].data, bytes);
    g->values[nv].data = d;
    g->values[nv].flags |= QF_VALUE_CONST;
    g->nodes[n].in[slot] = nv;
    return QF_OK;
}

/* mean over the pairs' channels of |log2(r1 / r2)| (0 where a range is 0). */
static double imbalance(const qf_graph *g, const eq_pair *p, int n)
{
    double sum = 0.0;
    int64_t cnt = 0;
    for (int i = 0; i < n; i++) {
        conv_w a, b;
        conv_w_get(g, &g->nodes[p[i].a], &a);
        conv_w_get(g, &g->nodes[p[i].b], &b);
        for (int64_t c = 0; c < p[i].ch; c++, cnt++) {
            const float r1 = out_range(&a, c), r2 = in_range(&b, c);
            if (r1 > 0.0f && r2 > 0.0f) sum += fabs(log2((double)r1 / r2));
        }
    }
    return cnt ? sum / (double)cnt : 0.0;
}

/* One sweep over every pair; *moved counts the channels that moved. */
static qf_status sweep(qf_graph *g, eq_pair *p, int n, const qfi_range *range, const int *readers, int n_readers,
                       int64_t *moved)
{
    *moved = 0;
    for (int i = 0; i < n; i++) {
        conv_w a, b;
        conv_w_get(g, &g->nodes[p[i].a], &a);
        conv_w_get(g, &g->nodes[p[i].b], &b);
        const qfi_range x = range[g->nodes[p[i].a].in[0]];
        bool owned = false;
        for (int64_t c = 0; c < p[i].ch; c++) {
            const float r1 = out_range(&a, c), r2 = in_range(&b, c);
            if (!(r1 > 0.0f && r2 > 0.0f)) continue; /* a dead channel stays where it is */
            int k = balance_exponent(r1, r2);
            if (isfinite(p[i].hi)) {
                p[i].ub[c] = fmin(p[i].ub[c], upper_bound(&a, c, x));
                if (!clip_allows(&p[i], c, p[i].ub[c], &k)) continue;
            }
            if (k == 0) continue;
            if (!owned) {
                QF_CHECK(own_constant(g, p[i].a, 1, readers, n_readers));
                if (a.b) QF_CHECK(own_constant(g, p[i].a, 2, readers, n_readers));
                QF_CHECK(own_constant(g, p[i].b, 1, readers, n_readers));
                conv_w_get(g, &g->nodes[p[i].a], &a);
                conv_w_get(g, &g->nodes[p[i].b], &b);
                owned = true;
            }
            if (!move_channel(&a, &b, c, k)) continue;
            p[i].k[c] += k;
            p[i].ub[c] = ldexp(p[i].ub[c], -k);
            (*moved)++;
        }
    }
    return QF_OK;
}

/* SHA-256 over every pair that moved: A's and B's names and each channel's k. */
static void digest(const qf_graph *g, const eq_pair *p, int n, char hex[65])
{
    qf_sha256_ctx ctx;
    qf_sha256_init(&ctx);
    bool any = false;
    for (int i = 0; i < n; i++) {
        bool moved = false;
        for (int64_t c = 0; c < p[i].ch; c++) moved |= p[i].k[c] != 0;
        if (!moved) continue;
        any = true;
        const char *na = g->nodes[p[i].a].name, *nb = g->nodes[p[i].b].name;
        qf_sha256_update(&ctx, na, strlen(na) + 1);
        qf_sha256_update(&ctx, nb, strlen(nb) + 1);
        for (int64_t c = 0; c < p[i].ch; c++) {
            const uint32_t u = (uint32_t)p[i].k[c];
            const uint8_t le[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24)};
            qf_sha256_update(&ctx, le, sizeof le);
        }
    }
    uint8_t d[32];
    qf_sha256_final(&ctx, d);
    if (any) qf_sha256_hex(d, hex);
    else hex[0] = '\0';
}

qf_status qf_graph_equalize(qf_graph *g, qf_equalize_info *info)
{
    qf_equalize_info own;
    if (!info) info = &own;
    memset(info, 0, sizeof *info);
    if (g->batch <= 0) return qf_error(QF_ERR_USAGE, "%s: the graph must be prepared before it is equalized", g->source);
    if (g->equalized[0]) return qf_error(QF_ERR_USAGE, "%s: the graph is equalized already", g->source);
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].precision != QF_PREC_FP32 || qf_op_is_conversion(g->nodes[i].op))
            return qf_error(QF_ERR_USAGE, "%s: only an FP32 graph is equalized (node %s is %s); equalize before "
                            "quantizing", g->source, g->nodes[i].name,
                            qf_op_is_conversion(g->nodes[i].op) ? qf_op_name(g->nodes[i].op)
                                                                : qf_precision_name(g->nodes[i].precision));
    eq_pair *p;
    int n;
    qfi_range *range = NULL;
    int *readers = NULL;
    const int n_readers = g->n_values;
    qf_status st = find_pairs(g, &p, &n);
    if (st == QF_OK) st = qfi_value_ranges(g, &range);
    if (st == QF_OK) {
        readers = qfi_calloc((size_t)g->n_values + 1, sizeof *readers);
        if (!readers) st = QF_ERR_NOMEM;
        for (int i = 0; readers && i < g->n_nodes; i++)
            for (int k = 0; k < g->nodes[i].n_in; k++)
                if (g->nodes[i].in[k] >= 0) readers[g->nodes[i].in[k]]++;
    }
    if (st == QF_OK) {
        info->pairs = n;
        for (int i = 0; i < n; i++) {
            info->pairs_clipped += isfinite(p[i].hi);
            info->channels += p[i].ch;
        }
        info->imbalance_before = imbalance(g, p, n);
    }
    for (int64_t moved = 1; st == QF_OK && moved && info->sweeps < MAX_SWEEPS;) {
        st = sweep(g, p, n, range, readers, n_readers, &moved);
        info->sweeps += moved > 0;
    }
    if (st == QF_OK) {
        for (int i = 0; i < n; i++) {
            int64_t m = 0;
            for (int64_t c = 0; c < p[i].ch; c++) m += p[i].k[c] != 0;
            info->channels_moved += m;
            info->pairs_moved += m > 0;
        }
        info->imbalance_after = imbalance(g, p, n);
        digest(g, p, n, g->equalized);
        qfi_drop_unused_constants(g);
    }
    pairs_free(p, n);
    free(range);
    free(readers);
    return st;
}

qf_status qfi_equalize_check_table(const qf_graph *g, const qf_calib_table *t)
{
    if (!strcmp(g->equalized, t->equalized)) return QF_OK;
    if (!g->equalized[0])
        return qf_error(QF_ERR_USAGE, "%s: the calibration table was made on the cross-layer equalized graph: "
                        "equalize it too (quant --equalize)", g->source);
    if (!t->equalized[0])
        return qf_error(QF_ERR_USAGE, "%s: the graph is cross-layer equalized, but the calibration table was made "
                        "without equalization: calibrate with --equalize", g->source);
    return qf_error(QF_ERR_INVALID, "%s: the calibration table was made on a graph equalized otherwise (equalization "
                    "%.16s..., here %.16s...; another qforge version?): calibrate again", g->source, t->equalized,
                    g->equalized);
}
