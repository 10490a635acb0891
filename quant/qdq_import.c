/* A model quantized elsewhere becomes qforge's INT8 graph with the model's own
 * scales: the prepared graph of a Q/DQ ONNX model (or a QOperator one, which
 * lib/onnx_qop.c made Q/DQ) is read pattern by pattern.
 *  - DequantizeLinear(x) -> Conv/Gemm/MatMul(DequantizeLinear(int8 weights))
 *    [-> bias Add] [-> residual Add of DequantizeLinear(r)] [-> Relu | Clip]
 *    [-> QuantizeLinear] is one INT8 node reading x (and r) as int8, with
 *    the weights and scales as they are, the bias in accumulator steps, the
 *    input's zero point folded into it, and an int8 output at the
 *    QuantizeLinear's scale and zero point (else a float output);
 *  - DequantizeLinear -> an op that moves values (max-pool, reshape, concat,
 *    ...; the same scale on both sides) or a global average pool ->
 *    QuantizeLinear is that op at INT8;
 *  - anything else keeps its DequantizeLinear and QuantizeLinear nodes
 *    around an FP32 op: the model's rounding, computed in float.
 * Zero points come as the model has them (uint8 shifted to int8). */
#include <math.h>
#include "quant_internal.h"
#include "fusion.h"
#include "ops/nn.h"

/* What becomes of each node. */
enum { N_KEEP, N_ANCHOR, N_INT8, N_DROP };

/* An INT8 Conv/Gemm/MatMul and what it needs. */
typedef struct anchor {
    qfi_fusion f;
    int out, q;            /* the value it writes; the QuantizeLinear it takes the place of, or -1 */
    int x, res;            /* int8 input and residual (-1) */
    int w;                 /* the DequantizeLinear's int8 constant weights */
    int8_t *wq;            /* them less a nonzero zero point, or NULL */
    float *scale;          /* [ch] */
    int32_t *bias;         /* [ch] */
    int64_t ch;
} anchor;

typedef struct imp {
    qf_graph *g;
    qf_quant_summary *sum;
    int *use_start, *use_node;
    int *act_of;           /* per value: the int8 activation a DequantizeLinear with its own parameters reads, or -1 */
    int *wdq;              /* per value: the DequantizeLinear of int8 constant weights that writes it, or -1 */
    unsigned char *fate;   /* per node: N_* */
    unsigned char *floated;/* per node: an anchor candidate left in float (its bias does not fit) */
    anchor *anchors;
    int n_anchors;
    int *to_q;             /* per value: an INT8 pass/requant node's output -> the QuantizeLinear's it writes instead */
} imp;

static int reader_count(const imp *m, int v) { return m->use_start[v + 1] - m->use_start[v]; }

/* A per-tensor QuantizeLinear. */
static bool per_tensor_q(const qf_graph *g, const qf_node *n)
{
    float s;
    return n->op == QF_OP_QUANTIZE_LINEAR && n->precision == QF_PREC_FP32 && qfi_qdq_params(g, n, &s, NULL) == QF_OK;
}

/* The QuantizeLinear that alone reads v (not a graph output), or -1. */
static int sole_q_reader(const imp *m, int v)
{
    const qf_graph *g = m->g;
    if (g->values[v].flags & QF_VALUE_OUTPUT || reader_count(m, v) != 1) return -1;
    int r = m->use_node[m->use_start[v]];
    return per_tensor_q(g, &g->nodes[r]) && g->nodes[r].in[0] == v ? r : -1;
}

static bool same_params(const qf_value *a, const qf_value *b)
{
    return a->scale == b->scale && a->zero_point == b->zero_point;
}

static bool same_shape(const qf_value *a, const qf_value *b)
{
    if (a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->dims[d] != b->dims[d]) return false;
    return true;
}

/* ---- what the DequantizeLinear nodes read ---------------------------------------------- */

static void find_dequantized(imp *m)
{
    qf_graph *g = m->g;
    for (int i = 0; i < g->n_nodes; i++) {
        const qf_node *n = &g->nodes[i];
        if (n->op != QF_OP_DEQUANTIZE_LINEAR || n->in[0] < 0) continue;
        const qf_value *x = &g->values[n->in[0]];
        if (x->dtype != QF_I8) continue;
        float s;
        int32_t z;
        if (qfi_is_const(g, n->in[0])) {
            m->wdq[n->out[0]] = i;
        } else if (qfi_qdq_params(g, n, &s, &z) == QF_OK && s == x->scale && z == x->zero_point) {
            m->act_of[n->out[0]] = n->in[0];
        }
    }
}

/* ---- INT8 Conv / Gemm / MatMul ------------------------------------------------------------ */

/* Whether node i reads a dequantized activation and dequantized int8 weights
 * in a form an INT8 node takes. */
static bool anchor_candidate(const imp *m, int i)
{
    const qf_graph *g = m->g;
    const qf_node *n = &g->nodes[i];
    const qfi_op_desc *d = qfi_ops[n->op];
    if (d->int8 != QFI_INT8_COMPUTE || n->precision != QF_PREC_FP32 || n->n_in < 2 || n->n_out != 1) return false;
    if (m->floated[i] || m->act_of[n->in[0]] < 0 || m->wdq[n->in[1]] < 0) return false;
    int b = n->n_in > 2 ? n->in[2] : -1;
    if (b >= 0 && !(qfi_is_const(g, b) && g->values[b].dtype == QF_F32)) return false;
    if (n->op == QF_OP_GEMM && ((const qfi_gemm_params *)n->params)->alpha != 1.0f) return false;
    if (d->int8_ok && !d->int8_ok(g, n)) return false;
    int64_t outer, ch, inner;
    d->weight_layout(g, n, &outer, &ch, &inner);
    if (outer * inner > QFI_INT8_MAX_REDUCTION) return false;
    /* the weights' scales run along the output channels, or there is one */
    const qf_node *dq = &g->nodes[m->wdq[n->in[1]]];
    qfi_qdq_geom geo;
    if (qfi_qdq_geometry(g, dq, &geo) != QF_OK) return false;
    if (geo.channels != 1 && (geo.channels != ch || geo.axis != (outer == 1 ? 0 : 1))) return false;
    /* weights minus their zero point must stay int8 */
    if (geo.z) {
        const int8_t *w = g->values[dq->in[0]].data;
        for (int64_t o = 0; o < outer; o++)
            for (int64_t c = 0; c < ch; c++)
                for (int64_t k = 0; k < inner; k++) {
                    int v = w[(o * ch + c) * inner + k] - geo.z[geo.channels == 1 ? 0 : c];
                    if (v < -128 || v > 127) return false;
                }
    }
    return true;
}

static bool rule_anchor(void *user, const qf_graph *g, int i) { return anchor_candidate(user, i); }

static bool rule_accept(void *user, const qf_graph *g, const qfi_fusion *f, const qfi_fuse_candidate *c)
{
    const imp *m = user;
    const qf_node *a = &g->nodes[f->anchor];
    const qf_value *cur = &g->values[f->out], *y = &g->values[c->node->out[0]];
    if (c->node->precision != QF_PREC_FP32) return false;
    switch (c->link) {
    case QFI_FUSE_BIAS: {
        int64_t outer, ch, inner;
        qfi_ops[a->op]->weight_layout(g, a, &outer, &ch, &inner);
        return (a->op == QF_OP_GEMM || a->op == QF_OP_MATMUL) && g->values[c->other].dtype == QF_F32 &&
               qfi_is_channel_vector(&g->values[c->other], ch) && same_shape(y, cur);
    }
    case QFI_FUSE_RESIDUAL:
        return m->act_of[c->other] >= 0 && same_shape(&g->values[c->other], cur) && same_shape(y, cur);
    case QFI_FUSE_RELU: return true;
    case QFI_FUSE_CLIP: return f->node[QFI_FUSE_RELU] < 0;
    case QFI_FUSE_ACT: /* a Mul form's gate, too, is a float node of the model */
        return f->node[QFI_FUSE_RELU] < 0 && f->node[QFI_FUSE_CLIP] < 0 && same_shape(y, cur) &&
               (!c->gate || c->gate->precision == QF_PREC_FP32);
    default: return false;
    }
}

static void anchor_free(anchor *a)
{
    free(a->wq);
    free(a->scale);
    free(a->bias);
}

/* The weights, scales and int32 bias of anchor a: the model's int8 weights
 * (less their zero point) and scales as they are; the float bias in steps of
 * s_in * s_w[c], less the input's zero point times the channel's weights.
 * *fits is false when that bias is beyond the accumulator's (the node then
 * stays float). */
static qf_status anchor_make(imp *m, anchor *a, bool *fits)
{
    qf_graph *g = m->g;
    const qf_node *n = &g->nodes[a->f.anchor];
    const qf_node *dq = &g->nodes[m->wdq[n->in[1]]];
    const qf_value *x = &g->values[a->x], *W = &g->values[dq->in[0]];
    int64_t outer, inner;
    qfi_ops[n->op]->weight_layout(g, n, &outer, &a->ch, &inner);
    qfi_qdq_geom geo;
    QF_CHECK(qfi_qdq_geometry(g, dq, &geo));
    const int64_t ch = a->ch, cnt = qf_value_numel(W);
    a->scale = qfi_calloc((size_t)ch + 1, sizeof *a->scale);
    a->bias = qfi_calloc((size_t)ch + 1, sizeof *a->bias);
    float *bf = qfi_calloc((size_t)ch + 1, sizeof *bf);
    if (!a->scale || !a->bias || !bf) {
        free(bf);
        return QF_ERR_NOMEM;
    }
    const int8_t *w = W->data;
    a->w = dq->in[0];
    bool shift = false;
    for (int64_t c = 0; geo.z && c < geo.channels; c++) shift |= geo.z[c] != 0;
    if (shift) {
        a->wq = qfi_calloc((size_t)cnt + 1, 1);
        if (!a->wq) {
            free(bf);
            return QF_ERR_NOMEM;
        }
        for (int64_t i = 0; i < cnt; i++) {
            int64_t c = (i / inner) % ch;
            a->wq[i] = (int8_t)(w[i] - geo.z[geo.channels == 1 ? 0 : c]);
        }
        w = a->wq;
    }
    for (int64_t c = 0; c < ch; c++) a->scale[c] = geo.s[geo.channels == 1 ? 0 : c];
    /* the float bias: Conv's B, Gemm's beta * C, a fused bias Add */
    int b = n->n_in > 2 ? n->in[2] : -1;
    const float beta = n->op == QF_OP_GEMM ? ((const qfi_gemm_params *)n->params)->beta : 1.0f;
    for (int k = 0; k < 2; k++) {
        int v = k == 0 ? b : a->f.bias;
        if (v < 0) continue;
        const float *bd = g->values[v].data;
        bool one = qf_value_numel(&g->values[v]) == 1;
        for (int64_t c = 0; c < ch; c++) bf[c] += (k == 0 ? beta : 1.0f) * bd[one ? 0 : c];
    }
    *fits = true;
    for (int64_t c = 0; c < ch && *fits; c++) {
        const int64_t wsum = qfi_int8_weight_sum(w, outer, ch, inner, c);
        *fits = qfi_quant_bias_zp(bf[c], x->scale, a->scale[c], x->zero_point, wsum, &a->bias[c]);
    }
    if (!*fits)
        qf_log(QF_LOG_WARN,
               "%s: node %s computes in float: its bias is more than 2^30 steps of its INT8 accumulator (input "
               "scale %g)",
               g->source, n->name, (double)x->scale);
    free(bf);
    return QF_OK;
}

/* Plans the INT8 anchors: chains from lib/fusion.c under rule_*, then each
 * one's operands; an anchor whose bias does not fit is left in float and the
 * chains are planned again. */
static qf_status plan_anchors(imp *m)
{
    qf_graph *g = m->g;
    const qfi_fusion_rules rules = {rule_anchor, rule_accept, m};
    for (;;) {
        for (int k = 0; k < m->n_anchors; k++) anchor_free(&m->anchors[k]);
        free(m->anchors);
        m->anchors = NULL;
        m->n_anchors = 0;
        qfi_fusion *fs;
        int nf;
        QF_CHECK(qfi_fusion_plan(g, &rules, &fs, &nf));
        m->anchors = qfi_calloc((size_t)nf + 1, sizeof *m->anchors);
        if (!m->anchors) {
            free(fs);
            return QF_ERR_NOMEM;
        }
        bool again = false;
        qf_status st = QF_OK;
        for (int k = 0; k < nf && st == QF_OK; k++) {
            anchor *a = &m->anchors[m->n_anchors++];
            a->f = fs[k];
            const qf_node *n = &g->nodes[a->f.anchor];
            a->x = m->act_of[n->in[0]];
            a->res = a->f.residual >= 0 ? m->act_of[a->f.residual] : -1;
            a->q = sole_q_reader(m, a->f.out);
            a->out = a->q >= 0 ? g->nodes[a->q].out[0] : a->f.out;
            bool fits;
            st = anchor_make(m, a, &fits);
            if (st == QF_OK && !fits) m->floated[a->f.anchor] = 1, again = true;
        }
        free(fs);
        QF_CHECK(st);
        if (!again) return QF_OK;
    }
}

/* ---- INT8 ops between them ------------------------------------------------------------------ */

/* Node i (a pass-through or requantizing op) at INT8: every data input is a
 * dequantized activation and every output goes only to a QuantizeLinear (at
 * the input's scale and zero point for a pass-through op). Fills q[k]. */
static bool int8_between(const imp *m, int i, int *q)
{
    const qf_graph *g = m->g;
    const qf_node *n = &g->nodes[i];
    const qfi_op_desc *d = qfi_ops[n->op];
    if (m->fate[i] != N_KEEP || n->precision != QF_PREC_FP32) return false;
    if ((d->int8 != QFI_INT8_PASS && d->int8 != QFI_INT8_REQUANT) || (d->int8_ok && !d->int8_ok(g, n))) return false;
    int first = -1;
    for (int k = 0; k < n->n_in; k++) {
        int v = n->in[k];
        if (v < 0) continue;
        if (qfi_is_const(g, v)) {
            /* parameters only (shapes, axes, Resize's scales): a float constant as data would be read unquantized */
            if (g->values[v].dtype == QF_F32 && (k >= 32 || !(d->params & (1u << k)))) return false;
            continue;
        }
        int x = m->act_of[v];
        if (x < 0) return false;
        if (first < 0) first = x;
        else if (d->int8 == QFI_INT8_PASS && !same_params(&g->values[x], &g->values[first])) return false;
    }
    if (first < 0) return false;
    for (int k = 0; k < n->n_out; k++) {
        if (n->out[k] < 0) continue;
        q[k] = sole_q_reader(m, n->out[k]);
        if (q[k] < 0) return false;
        if (d->int8 == QFI_INT8_PASS && !same_params(&g->values[g->nodes[q[k]].out[0]], &g->values[first])) return false;
    }
    return true;
}

/* ---- the new node list --------------------------------------------------------------------- */

/* A QuantizeLinear or DequantizeLinear in qforge's form: one input, the
 * parameters those of its int8 value (when they are). */
static void conversion_form(qf_graph *g, qf_node *n)
{
    float s;
    int32_t z;
    const qf_value *q = n->op == QF_OP_QUANTIZE_LINEAR ? &g->values[n->out[0]] : &g->values[n->in[0]];
    if (n->n_in > 1 && qfi_qdq_params(g, n, &s, &z) == QF_OK && s == q->scale && z == q->zero_point &&
        !(g->values[n->in[0]].flags & QF_VALUE_CONST))
        n->n_in = 1;
    n->precision = n->op == QF_OP_QUANTIZE_LINEAR ? QF_PREC_INT8 : QF_PREC_FP32;
}

static qf_status emit_anchor(imp *m, qf_node *old, const anchor *a)
{
    qf_graph *g = m->g;
    const qf_node *n = &old[a->f.anchor];
    char name[1024];
    int w = a->w;
    if (a->wq) {
        const int64_t cnt = qf_value_numel(&g->values[a->w]);
        int8_t *wq = qfi_calloc((size_t)cnt + 1, 1);
        if (!wq) return QF_ERR_NOMEM;
        memcpy(wq, a->wq, (size_t)cnt);
        snprintf(name, sizeof name, "%s/shifted", g->values[a->w].name);
        w = qfi_quant_add_const(g, name, QF_I8, a->w, 0, wq);
    }
    float *sc = qfi_calloc((size_t)a->ch + 1, sizeof *sc);
    int32_t *bq = qfi_calloc((size_t)a->ch + 1, sizeof *bq);
    if (w < 0 || !sc || !bq) {
        free(sc), free(bq);
        return QF_ERR_NOMEM;
    }
    memcpy(sc, a->scale, (size_t)a->ch * sizeof *sc);
    memcpy(bq, a->bias, (size_t)a->ch * sizeof *bq);
    snprintf(name, sizeof name, "%s/weight_scale", n->name);
    int scv = qfi_quant_add_const(g, name, QF_F32, -1, a->ch, sc);
    snprintf(name, sizeof name, "%s/bias_i32", n->name);
    int bqv = scv < 0 ? -1 : qfi_quant_add_const(g, name, QF_I32, -1, a->ch, bq);
    if (bqv < 0) {
        if (scv < 0) free(bq);
        return QF_ERR_NOMEM;
    }
    qf_act act = QF_ACT_NONE;
    float lo = 0.0f, hi = 0.0f;
    if (a->f.node[QFI_FUSE_RELU] >= 0) act = QF_ACT_RELU;
    if (a->f.node[QFI_FUSE_CLIP] >= 0) act = QF_ACT_CLIP, lo = a->f.clip_lo, hi = a->f.clip_hi;
    if (a->f.node[QFI_FUSE_ACT] >= 0) act = a->f.act;
    return qfi_quant_int8_node(g, &old[a->f.anchor], a->x, w, bqv, scv, a->res, a->out, act, lo, hi);
}

/* Re-emits the nodes: anchors at their chain's last node, INT8 ops reading
 * and writing int8, the rest as it was. */
static qf_status emit(imp *m)
{
    qf_graph *g = m->g;
    const int nn0 = g->n_nodes;
    for (int v = 0; v < g->n_values; v++) g->values[v].producer = -1;
    qf_node *old = g->nodes;
    g->nodes = NULL;
    g->n_nodes = g->cap_nodes = 0;
    qf_status st = QF_OK;
    /* where each chain lands */
    int *emit_here = qfi_calloc((size_t)nn0 + 1, sizeof *emit_here);
    if (!emit_here) st = QF_ERR_NOMEM;
    for (int i = 0; i < nn0 && st == QF_OK; i++) emit_here[i] = -1;
    for (int k = 0; k < m->n_anchors && st == QF_OK; k++) emit_here[m->anchors[k].f.last] = k;
    for (int i = 0; i < nn0 && st == QF_OK; i++) {
        qf_node *n = &old[i];
        if (emit_here[i] >= 0) {
            st = emit_anchor(m, old, &m->anchors[emit_here[i]]);
            continue;
        }
        if (m->fate[i] == N_DROP || m->fate[i] == N_ANCHOR) continue;
        int in[64], out[64];
        if (n->n_in > 64 || n->n_out > 64) {
            st = qfi_error_node(qf_error(QF_ERR_UNSUPPORTED, "more than 64 inputs or outputs"), g, n);
            break;
        }
        qf_precision prec = QF_PREC_FP32;
        for (int k = 0; k < n->n_in; k++) in[k] = n->in[k];
        for (int k = 0; k < n->n_out; k++) out[k] = n->out[k];
        if (m->fate[i] == N_INT8) {
            prec = QF_PREC_INT8;
            for (int k = 0; k < n->n_in; k++)
                if (in[k] >= 0 && m->act_of[in[k]] >= 0) in[k] = m->act_of[in[k]];
            for (int k = 0; k < n->n_out; k++)
                if (out[k] >= 0) out[k] = m->to_q[out[k]];
        }
        qfi_quant_move_node(g, n, n->n_in, in, n->n_out, out, prec, &st);
        if (st == QF_OK && qf_op_is_conversion(g->nodes[g->n_nodes - 1].op))
            conversion_form(g, &g->nodes[g->n_nodes - 1]);
    }
    for (int i = 0; i < nn0; i++) qfi_node_clear(&old[i]);
    free(old);
    free(emit_here);
    return st;
}

/* After the new list: DequantizeLinear nodes nobody reads go; those of
 * constant weights that float nodes still read become float constants. */
static qf_status tidy(imp *m)
{
    qf_graph *g = m->g;
    int *start, *node;
    QF_CHECK(qfi_graph_uses(g, &start, &node));
    qf_status st = QF_OK;
    int kept = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        qf_node *n = &g->nodes[i];
        bool drop = false;
        if (n->op == QF_OP_DEQUANTIZE_LINEAR && n->in[0] >= 0 && qfi_is_const(g, n->in[0])) {
            int y = n->out[0];
            if (start[y + 1] > start[y] || (g->values[y].flags & QF_VALUE_OUTPUT)) st = qfi_fold_node(g, n);
            drop = true;
        } else if (n->op == QF_OP_DEQUANTIZE_LINEAR) {
            int y = n->out[0];
            drop = start[y + 1] == start[y] && !(g->values[y].flags & QF_VALUE_OUTPUT);
        }
        if (st != QF_OK) break;
        if (drop) {
            qfi_node_clear(n);
            continue;
        }
        if (kept != i) {
            g->nodes[kept] = *n;
            memset(n, 0, sizeof *n);
        }
        kept++;
    }
    free(start);
    free(node);
    for (int i = kept; i < g->n_nodes; i++) qfi_node_clear(&g->nodes[i]);
    g->n_nodes = kept;
    for (int v = 0; v < g->n_values; v++) g->values[v].producer = -1;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_out; k++)
            if (g->nodes[i].out[k] >= 0) g->values[g->nodes[i].out[k]].producer = i;
    return st;
}

/* Counts for the summary and names what stays float between Q/DQ nodes. */
static void summarize(imp *m)
{
    const qf_graph *g = m->g;
    qf_quant_summary *s = m->sum;
    for (int i = 0; i < g->n_nodes; i++) {
        const qf_node *n = &g->nodes[i];
        if (qf_op_is_conversion(n->op)) {
            s->conversions++;
            continue;
        }
        s->nodes[n->precision]++;
        if (!qf_node_between_qdq(g, i)) continue;
        s->float_between_qdq++;
        qf_log(QF_LOG_DEBUG, "%s: node %s (%s) runs in FP32 between DequantizeLinear and QuantizeLinear", g->source,
               n->name, qf_op_name(n->op));
    }
}

bool qf_node_between_qdq(const qf_graph *g, int i)
{
    const qf_node *n = &g->nodes[i];
    if (qf_op_is_conversion(n->op) || n->precision == QF_PREC_INT8) return false;
    for (int k = 0; k < n->n_in; k++) {
        int p = n->in[k] >= 0 ? g->values[n->in[k]].producer : -1;
        if (p >= 0 && g->nodes[p].op == QF_OP_DEQUANTIZE_LINEAR) return true;
    }
    return false;
}

bool qf_graph_has_qdq(const qf_graph *g)
{
    for (int i = 0; i < g->n_nodes; i++) {
        const qf_node *n = &g->nodes[i];
        if ((n->op == QF_OP_QUANTIZE_LINEAR || n->op == QF_OP_DEQUANTIZE_LINEAR) && n->n_in > 1 && n->in[1] >= 0 &&
            n->precision == QF_PREC_FP32)
            return true;
    }
    return false;
}

qf_status qfi_qdq_import(qf_graph *g, qf_quant_summary *sum)
{
    imp m = {.g = g, .sum = sum};
    const size_t nv = (size_t)g->n_values + 1, nn = (size_t)g->n_nodes + 1;
    m.act_of = qfi_calloc(nv, sizeof *m.act_of);
    m.wdq = qfi_calloc(nv, sizeof *m.wdq);
    m.to_q = qfi_calloc(nv, sizeof *m.to_q);
    m.fate = qfi_calloc(nn, 1);
    m.floated = qfi_calloc(nn, 1);
    int *q = qfi_calloc((size_t)g->n_values + 1, sizeof *q); /* outputs of one node; a node has fewer outputs than values */
    qf_status st = QF_OK;
    if (!m.act_of || !m.wdq || !m.to_q || !m.fate || !m.floated || !q) st = QF_ERR_NOMEM;
    if (st == QF_OK) st = qfi_graph_uses(g, &m.use_start, &m.use_node);
    for (int v = 0; st == QF_OK && v < g->n_values; v++) m.act_of[v] = m.wdq[v] = m.to_q[v] = -1;
    if (st == QF_OK) {
        find_dequantized(&m);
        st = plan_anchors(&m);
    }
    for (int k = 0; st == QF_OK && k < m.n_anchors; k++) {
        const anchor *a = &m.anchors[k];
        m.fate[a->f.anchor] = N_ANCHOR;
        for (int l = 0; l < QFI_FUSE_LINK_COUNT; l++)
            if (a->f.node[l] >= 0) {
                m.fate[a->f.node[l]] = N_DROP;
                sum->fused++;
            }
        if (a->q >= 0) m.fate[a->q] = N_DROP;
    }
    for (int i = 0; st == QF_OK && i < g->n_nodes; i++) {
        const qf_node *n = &g->nodes[i];
        if (!int8_between(&m, i, q)) continue;
        m.fate[i] = N_INT8;
        for (int k = 0; k < n->n_out; k++)
            if (n->out[k] >= 0) {
                m.fate[q[k]] = N_DROP;
                m.to_q[n->out[k]] = g->nodes[q[k]].out[0];
            }
    }
    if (st == QF_OK) st = emit(&m);
    if (st == QF_OK) st = tidy(&m);
    if (st == QF_OK) {
        qfi_drop_unused_constants(g);
        /* every node's shapes and operands once more, INT8 ones on the f32 view */
        st = qfi_graph_rebatch(g, g->batch);
    }
    if (st == QF_OK) summarize(&m);
    for (int k = 0; k < m.n_anchors; k++) anchor_free(&m.anchors[k]);
    free(m.anchors);
    free(m.act_of), free(m.wdq), free(m.to_q), free(m.fate), free(m.floated), free(q);
    free(m.use_start), free(m.use_node);
    return st;
}
