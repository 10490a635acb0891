/* The CUDA engine's fusions, planned at engine build: the rules its float
 * kernels give lib/fusion.c's planner (residual Add, Relu, Clip), applied to
 * the layers and the memory plan, the input QuantizeLinear an INT8 first
 * Conv takes, the Relu or Clip after a BatchNormalization, attention
 * chains (attention.cu) and squeeze-excitation gates (se_gate.cu). No
 * kernels here. */
#include "cuda_internal.h"
extern "C" {
#include "fusion.h"
}

static const qf_node *find_consumer(const qf_graph *g, int v, int *count)
{
    const qf_node *first = NULL;
    *count = 0;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] == v) {
                if (!first) first = &g->nodes[i];
                ++*count;
            }
    if (g->values[v].flags & QF_VALUE_OUTPUT) ++*count;
    return first;
}

/* The rules of the float kernels for lib/fusion.c's chains, for FP32/FP16
 * (INT8 graphs arrive with theirs made by the quantizer):
 *  - an ungrouped Conv takes a residual Add as the GEMM's C term (beta 1),
 *    where the other operand exists before the Conv runs, and then a Relu;
 *  - a Conv or Gemm takes a Relu as its ReLU epilogue;
 *  - a grouped Conv takes a Clip (MobileNet's ReLU6), after any Relu, where
 *    the bounds are exact in the output's dtype (then clipping before the
 *    output's rounding gives what clipping after does); cuBLASLt's epilogue
 *    has no clip;
 *  - a Conv takes a SiLU, Sigmoid or HardSwish last: cuDNN's graph computes
 *    it in its epilogue; on qforge's own kernels it is one pass over the
 *    output in place (cu_act_inplace), where unfused SiLU made two.
 * Every value of a chain keeps the layout and shape (and dtype) it had, and
 * host nodes (host.cu) take part in none. */
static bool same_dims(const qf_value *a, const qf_value *b)
{
    return a->ndim == b->ndim && !memcmp(a->dims, b->dims, (size_t)a->ndim * sizeof(int64_t));
}

static bool same_shape(const qf_value *a, const qf_value *b) { return same_dims(a, b) && a->dtype == b->dtype; }

static bool float_anchor(void *user, const qf_graph *g, int i)
{
    const cu_engine *c = (const cu_engine *)user;
    const qf_node *n = &g->nodes[i];
    return (n->op == QF_OP_CONV || n->op == QF_OP_GEMM) && n->precision != QF_PREC_INT8 && !cu_on_host(&c->layers[i]);
}

static bool float_accept(void *user, const qf_graph *g, const qfi_fusion *f, const qfi_fuse_candidate *cand)
{
    const cu_engine *c = (const cu_engine *)user;
    const qf_node *a = &g->nodes[f->anchor], *r = cand->node;
    const int v = f->out, y = r->out[0];
    const bool conv = a->op == QF_OP_CONV;
    const int64_t group = conv ? ((const qfi_conv_params *)a->params)->group : 1;
    if (cu_on_host(&c->layers[r - g->nodes])) return false;
    if (r->precision != a->precision || !same_shape(&g->values[y], &g->values[v]) ||
        c->vals[y].layout != c->vals[v].layout)
        return false;
    switch (cand->link) {
    case QFI_FUSE_RESIDUAL: {
        const qf_value *o = &g->values[cand->other];
        return conv && group == 1 && g->values[y].ndim == 4 && c->vals[y].layout == CU_NHWC &&
               same_shape(o, &g->values[y]) && c->vals[cand->other].layout == CU_NHWC && cand->other_born < f->anchor;
    }
    case QFI_FUSE_RELU: return true;
    case QFI_FUSE_CLIP:
        if (!conv || group == 1) return false;
        if (g->values[v].dtype == QF_F16)
            for (float b : {cand->lo, cand->hi})
                if (!isinf(b) && qf_f16_to_f32(qf_f32_to_f16(b)) != b) return false;
        return true;
    case QFI_FUSE_ACT:
        return conv && (cand->act == QF_ACT_SILU || cand->act == QF_ACT_SIGMOID || cand->act == QF_ACT_HARD_SWISH) &&
               (!cand->gate || !cu_on_host(&c->layers[cand->gate - g->nodes]));
    default: return false;
    }
}

/* The fused layer writes the last value of its chain; plan_values makes the
 * memory plan see that value born at the fused layer (and the skipped
 * intermediates never written). */
qf_status cu_fuse_layers(cu_engine *c, qf_value *plan_values)
{
    const qfi_fusion_rules rules = {float_anchor, float_accept, c};
    qfi_fusion *fs;
    int n;
    QF_CHECK(qfi_fusion_plan(c->g, &rules, &fs, &n));
    for (int k = 0; k < n; k++) {
        const qfi_fusion *f = &fs[k];
        if (f->last == f->anchor) continue;
        cu_layer *L = &c->layers[f->anchor];
        plan_values[c->g->nodes[f->anchor].out[0]].producer = -1;
        for (int l = 0; l < QFI_FUSE_LINK_COUNT; l++) {
            const int j = f->node[l];
            if (j < 0) continue;
            c->layers[j].skip = true;
            plan_values[c->g->nodes[j].out[0]].producer = -1;
        }
        plan_values[f->out].producer = f->anchor;
        L->out_override = f->out;
        L->residual = f->residual;
        L->relu = f->node[QFI_FUSE_RELU] >= 0;
        L->clip = f->node[QFI_FUSE_CLIP] >= 0;
        if (L->clip) L->clip_lo = f->clip_lo, L->clip_hi = f->clip_hi;
        L->act = f->node[QFI_FUSE_ACT] >= 0 ? f->act : QF_ACT_NONE;
        L->act_gated = f->node[QFI_FUSE_GATE] >= 0;
    }
    free(fs);
    return QF_OK;
}

/* A QuantizeLinear of a graph input read only by an INT8 Conv of fewer than
 * 4 input channels (an RGB first layer) folds into the Conv: the
 * implicit-GEMM kernel rearranges such an input anyway (conv_igemm.cu) and
 * quantizes while it does, so the int8 image is never written (ResNet-50 at
 * batch 256: a 0.18 ms pass and an NCHW -> NHWC copy). Graph inputs only:
 * the host writes them before the run, so the Conv can read them later; the
 * memory plan keeps the input alive to the Conv (cuda_engine.cu's
 * find_late_reads), which no node lists as its reader. */
void cu_fuse_input_quantize(cu_engine *c, qf_value *plan_values)
{
    const qf_graph *g = c->g;
    for (int qi = 0; qi < g->n_nodes; qi++) {
        const qf_node *q = &g->nodes[qi];
        if (q->op != QF_OP_QUANTIZE_LINEAR || c->layers[qi].skip || cu_on_host(&c->layers[qi])) continue;
        const int x = q->in[0], v = q->out[0];
        if (x < 0 || v < 0 || !(g->values[x].flags & QF_VALUE_INPUT) || g->values[x].dtype != QF_F32 ||
            g->values[x].ndim != 4 || g->values[v].dims[1] >= 4)
            continue;
        int cnt;
        const qf_node *cv = find_consumer(g, v, &cnt);
        if (!cv || cnt != 1 || cv->op != QF_OP_CONV || cv->precision != QF_PREC_INT8 || cv->in[0] != v) continue;
        const qf_value *w = qfi_in(g, cv, 1), *y = qfi_out(g, cv, 0);
        if (((const qfi_conv_params *)cv->params)->group != 1 || w->ndim != 4 || w->dims[0] % 8 || y->dtype != QF_I8)
            continue;
        float scale;
        int32_t zp;
        if (qfi_qdq_params(g, q, &scale, &zp) != QF_OK) continue; /* the QuantizeLinear layer will say why */
        const int ci = (int)(cv - g->nodes);
        /* only the implicit GEMM quantizes as it reads (ViT's 16x16 patch conv
         * has more taps than it takes: the QuantizeLinear then runs on its own) */
        if (cu_on_host(&c->layers[ci]) || !cu_conv_igemm_fits(c, cv)) continue;
        c->layers[qi].skip = true;
        c->layers[ci].quant_in = x;
        c->layers[ci].quant_scale = scale;
        c->layers[ci].quant_zp = zp;
        plan_values[v].producer = -1;
    }
}

/* A BatchNormalization's output read only by a Relu or Clip of its
 * precision, same shape and layout: one layer, which rounds the BN's value
 * to the dtype it would have been stored in before the activation, so the
 * result is the unfused pair's, element for element. */
void cu_fuse_batchnorm_act(cu_engine *c, qf_value *plan_values)
{
    const qf_graph *g = c->g;
    for (int i = 0; i < g->n_nodes; i++) {
        const qf_node *n = &g->nodes[i];
        cu_layer *L = &c->layers[i];
        if (n->op != QF_OP_BATCH_NORM || n->precision == QF_PREC_INT8 || L->skip || cu_on_host(L) || n->out[0] < 0)
            continue;
        const int v = n->out[0];
        int cnt;
        const qf_node *r = find_consumer(g, v, &cnt);
        if (!r || cnt != 1 || (r->op != QF_OP_RELU && r->op != QF_OP_CLIP) || r->in[0] != v || r->out[0] < 0) continue;
        cu_layer *R = &c->layers[r - g->nodes];
        const int y = r->out[0];
        const qf_value *vv = &g->values[v], *yv = &g->values[y];
        /* dims only: the Relu may store another dtype (int8 for an INT8 conv after it) */
        if (R->skip || cu_on_host(R) || r->precision != n->precision || !same_dims(vv, yv) ||
            c->vals[v].layout != c->vals[y].layout)
            continue;
        float lo = 0.0f, hi = INFINITY;
        if (r->op == QF_OP_CLIP && qfi_clip_bounds(g, r, &lo, &hi) != QF_OK) continue;
        R->skip = true;
        plan_values[v].producer = -1;
        plan_values[y].producer = i;
        L->out_override = y;
        L->relu = r->op == QF_OP_RELU;
        L->clip = r->op == QF_OP_CLIP, L->clip_lo = lo, L->clip_hi = hi;
    }
}

/* ---- attention ---------------------------------------------------------------------------- */

/* v may be read by a layer at node index `at`: a constant, a graph input, or
 * written (as the memory plan sees it so far) by an earlier layer, in the
 * logical layout. */
static bool readable_at(const cu_engine *c, const qf_value *plan_values, int v, int at)
{
    const qf_value *val = &c->g->values[v];
    if (val->flags & (QF_VALUE_CONST | QF_VALUE_INPUT)) return true;
    const int p = plan_values[v].producer;
    return p >= 0 && p < at && (val->ndim != 4 || c->vals[v].layout == CU_LOGICAL);
}

static bool is_half(const qf_value *v) { return v->dtype == QF_F16; }

/* The one consumer of v at FP16 on the device, or NULL. */
static const qf_node *only_consumer(const cu_engine *c, int v)
{
    int count;
    const qf_node *n = find_consumer(c->g, v, &count);
    if (!n || count != 1) return NULL;
    const cu_layer *L = &c->layers[n - c->g->nodes];
    if (L->skip || cu_on_host(L) || n->precision != QF_PREC_FP16) return NULL;
    return n;
}

/* The CUDA engine's rules for lib/attention.h's chains: every node of the
 * chain is one of its own layers, not fused into another, not on the host;
 * the kernel reads its operands where readable_at says it can. */
struct attention_rules_user {
    const cu_engine *c;
    const qf_value *plan_values;
};
static bool attention_node(void *user, const qf_graph *g, int i)
{
    (void)g;
    const cu_layer *L = &((const attention_rules_user *)user)->c->layers[i];
    return !L->skip && !cu_on_host(L);
}
static bool attention_operand(void *user, const qf_graph *g, int v, int first)
{
    (void)g;
    const attention_rules_user *u = (const attention_rules_user *)user;
    return readable_at(u->c, u->plan_values, v, first);
}

/* ---- what every chain fusion does with its layers --------------------------------------------- */

/* A layer whose work a chain took: skipped, its output never made. */
static void skip_into_chain(cu_engine *c, qf_value *plan_values, int j)
{
    c->layers[j].skip = true;
    plan_values[cu_out_value(&c->layers[j], 0)].producer = -1;
}

/* Layer L runs op over the chain (a copy of its `bytes` becomes L's state,
 * which op's prepare takes) and writes the chain's output `out` instead of
 * its own node's, which is never made. After the chain's other layers are
 * skipped: `out` is one of theirs. */
static qf_status take_chain(qf_value *plan_values, cu_layer *L, const cu_op *op, const void *chain, size_t bytes, int out)
{
    void *keep = malloc(bytes);
    if (!keep) return QF_ERR_NOMEM;
    memcpy(keep, chain, bytes);
    L->state = keep;
    L->free_state = free;
    L->op = op;
    plan_values[L->n->out[0]].producer = -1;
    plan_values[out].producer = L->index;
    L->out_override = out;
    return QF_OK;
}

/* The chain's layer runs at its first MatMul, where Q, K^T, V and the Adds'
 * operands all exist (readable_at); its nodes after that, and the Muls and
 * Transpose before it that it took in, are skipped and their values never
 * written. The layer's state starts as the chain
 * (attention.cu's prepare takes it). */
qf_status cu_fuse_attention(cu_engine *c, qf_value *plan_values)
{
    attention_rules_user user = {c, plan_values};
    const qfi_attention_rules rules = {attention_node, attention_operand, &user, true, cu_attention_views_ok};
    for (int i = 0; i < c->g->n_nodes; i++) {
        qfi_attention_chain ch;
        if (!qfi_attention_match(c->g, i, &rules, &ch)) continue;
        cu_layer *L = &c->layers[i];
        for (int k = 0; k < ch.n_nodes; k++) skip_into_chain(c, plan_values, ch.nodes[k]);
        /* the scalar Muls, K's Transpose and the views' nodes it took in: Q, K and V (or their roots) are read here */
        for (int k = 0; k < ch.n_pre; k++) skip_into_chain(c, plan_values, ch.pre[k]);
        L->late_in[0] = ch.q, L->late_in[1] = ch.kt, L->late_in[2] = ch.v;
        QF_CHECK(take_chain(plan_values, L, &cu_op_attention, &ch, sizeof ch, ch.out));
        qfi_attention_log(c->g, &ch);
    }
    return QF_OK;
}

/* ---- LayerNorm between a DequantizeLinear and a QuantizeLinear -------------------------- */

/* The one node that reads v (not a graph output), or NULL. */
static const qf_node *sole_reader(const qf_graph *g, int v)
{
    int count;
    const qf_node *n = find_consumer(g, v, &count);
    return n && count == 1 ? n : NULL;
}

/* A QuantizeLinear or DequantizeLinear of one scale for the whole tensor
 * (the quantizer's take it from their int8 value: no scale input), on the device. */
static bool per_tensor_qdq(const cu_engine *c, const qf_node *n, qf_op o)
{
    if (!n || n->op != o || c->layers[n - c->g->nodes].skip || cu_on_host(&c->layers[n - c->g->nodes])) return false;
    const qf_value *s = qfi_in(c->g, n, 1);
    return !s || qf_value_numel(s) == 1;
}

/* The quantizer keeps LayerNorm in FP16 between INT8 layers (ConvNeXt's
 * blocks, a transformer's pre-norm): DequantizeLinear -> LayerNormalization
 * -> QuantizeLinear, three passes over the activation where one will do. The
 * LayerNorm layer takes either or both in: it reads the int8 input itself
 * (late_in[0]) and rounds each value to half as the DequantizeLinear did, and
 * rounds its results to half and quantizes them as the QuantizeLinear does
 * (layer_norm.cu), so the bytes are the unfused layers'. */
qf_status cu_fuse_layer_norm_qdq(cu_engine *c, qf_value *plan_values)
{
    const qf_graph *g = c->g;
    for (int i = 0; i < g->n_nodes; i++) {
        cu_layer *L = &c->layers[i];
        const qf_node *n = L->n;
        if (n->op != QF_OP_LAYER_NORM || L->skip || cu_on_host(L) || L->out_override >= 0) continue;
        const int x = n->in[0], y = n->out[0];
        if (g->values[x].dtype != QF_F16 || g->values[y].dtype != QF_F16) continue;
        const int dq = g->values[x].producer;
        const qf_node *d = dq >= 0 ? &g->nodes[dq] : NULL;
        const bool take_in = per_tensor_qdq(c, d, QF_OP_DEQUANTIZE_LINEAR) && sole_reader(g, x) == n &&
                             readable_at(c, plan_values, d->in[0], i);
        const qf_node *q = sole_reader(g, y);
        const bool take_out = per_tensor_qdq(c, q, QF_OP_QUANTIZE_LINEAR);
        if (take_in) {
            skip_into_chain(c, plan_values, dq);
            L->late_in[0] = d->in[0];
        }
        if (take_out) {
            skip_into_chain(c, plan_values, (int)(q - g->nodes));
            plan_values[y].producer = -1;
            plan_values[q->out[0]].producer = i;
            L->out_override = q->out[0];
        }
        if (take_in || take_out)
            qf_log(QF_LOG_DEBUG, "%s: node %s: LayerNorm takes in%s%s", g->source, n->name,
                   take_in ? " its input's DequantizeLinear" : "", take_out ? " its output's QuantizeLinear" : "");
    }
    return QF_OK;
}

/* ---- squeeze-excitation gates ------------------------------------------------------------- */

/* The layer of only_consumer(c, v) when it reads v as its first input, or NULL. */
static cu_layer *only_fp16_reader(cu_engine *c, int v)
{
    const qf_node *n = only_consumer(c, v);
    return n && n->n_in >= 1 && n->in[0] == v ? &c->layers[n - c->g->nodes] : NULL;
}

/* A vector Conv (cu_conv_runs_vector) of halves reading v alone. */
static cu_layer *se_conv(cu_engine *c, int v)
{
    cu_layer *L = only_fp16_reader(c, v);
    if (!L || L->n->op != QF_OP_CONV || !cu_conv_runs_vector(c, L)) return NULL;
    return is_half(qfi_in(c->g, L->n, 1)) && is_half(&c->g->values[cu_out_value(L, 0)]) ? L : NULL;
}

static bool se_match(cu_engine *c, int pool, cu_se_chain *ch)
{
    const qf_graph *g = c->g;
    const qf_node *n = &g->nodes[pool];
    const cu_layer *P = &c->layers[pool];
    if (n->op != QF_OP_GLOBAL_AVERAGE_POOL || n->precision != QF_PREC_FP16 || P->skip || cu_on_host(P) ||
        P->out_override >= 0 || n->out[0] < 0)
        return false;
    const qf_value *x = qfi_in(g, n, 0), *v = qfi_out(g, n, 0);
    /* int8 levels or halves: their sums in double are exact in any order */
    if (x->ndim != 4 || (x->dtype != QF_I8 && x->dtype != QF_F16) || !is_half(v) || x->dims[0] > INT32_MAX ||
        x->dims[1] * x->dims[2] * x->dims[3] >= INT32_MAX)
        return false;
    cu_layer *L1 = se_conv(c, n->out[0]);
    cu_layer *L2 = L1 ? se_conv(c, cu_out_value(L1, 0)) : NULL;
    if (!L2) return false;
    const int64_t C = x->dims[1], M1 = qfi_in(g, L1->n, 1)->dims[0];
    if (qfi_in(g, L1->n, 1)->dims[1] != C || qfi_in(g, L2->n, 1)->dims[1] != M1 || !cu_se_gate_fits(C, M1)) return false;
    ch->conv[0] = L1->index, ch->conv[1] = L2->index;
    ch->gate = -1;
    ch->out = cu_out_value(L2, 0);
    /* MobileNetV3's HardSigmoid (or a Sigmoid) as a node of its own */
    cu_layer *G = L2->act == QF_ACT_NONE ? only_fp16_reader(c, ch->out) : NULL;
    if (G && (G->n->op == QF_OP_HARD_SIGMOID || G->n->op == QF_OP_SIGMOID) && G->out_override < 0 && G->n->out[0] >= 0 &&
        is_half(qfi_out(g, G->n, 0)) && same_dims(qfi_out(g, G->n, 0), &g->values[ch->out]))
        ch->gate = G->index, ch->out = G->n->out[0];
    return true;
}

qf_status cu_fuse_se_gates(cu_engine *c, qf_value *plan_values)
{
    const qf_graph *g = c->g;
    for (int i = 0; i < g->n_nodes; i++) {
        cu_se_chain ch;
        if (!se_match(c, i, &ch)) continue;
        cu_layer *L = &c->layers[i];
        for (int k = 0; k < 3; k++) {
            const int j = k < 2 ? ch.conv[k] : ch.gate;
            if (j >= 0) skip_into_chain(c, plan_values, j);
        }
        QF_CHECK(take_chain(plan_values, L, &cu_op_se_gate, &ch, sizeof ch, ch.out));
        qf_log(QF_LOG_DEBUG, "%s: squeeze-excitation gate fused from node %s to %s", g->source, L->n->name,
               g->nodes[ch.gate >= 0 ? ch.gate : ch.conv[1]].name);
    }
    return QF_OK;
}

/* ---- channel shuffles ----------------------------------------------------------------------- */

/* Whether node n runs as a device layer that no fusion took yet. */
static bool free_layer(const cu_engine *c, const qf_node *n)
{
    const cu_layer *L = &c->layers[n - c->g->nodes];
    return !L->skip && !cu_on_host(L) && L->out_override < 0;
}

/* The node that writes value v, or NULL. */
static const qf_node *producer_of(const qf_graph *g, int v)
{
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_out; k++)
            if (g->nodes[i].out[k] == v) return &g->nodes[i];
    return NULL;
}

/* The one reader of v (not a graph output) when it is a free layer of op o, or NULL. */
static const qf_node *only_reader(const cu_engine *c, int v, qf_op o)
{
    int count;
    const qf_node *n = find_consumer(c->g, v, &count);
    return n && count == 1 && n->op == o && n->in[0] == v && free_layer(c, n) ? n : NULL;
}

static bool shuffle_match(const cu_engine *c, int i, cu_shuffle_chain *ch)
{
    const qf_graph *g = c->g;
    const qf_node *r1 = &g->nodes[i];
    memset(ch, 0, sizeof *ch);
    if (r1->op != QF_OP_RESHAPE || !free_layer(c, r1) || r1->n_out != 1 || r1->out[0] < 0) return false;
    const qf_value *x = qfi_in(g, r1, 0), *v5 = qfi_out(g, r1, 0);
    const size_t es = qf_dtype_info(x->dtype)->size;
    if (x->ndim != 4 || v5->ndim != 5 || v5->dims[0] != x->dims[0] || v5->dims[1] < 2 ||
        v5->dims[1] * v5->dims[2] != x->dims[1] || v5->dims[3] != x->dims[2] || v5->dims[4] != x->dims[3] ||
        qf_value_numel(x) >= INT32_MAX || x->dims[1] >= (1 << 24) || (es != 1 && es != 2 && es != 4))
        return false;
    const qf_node *t = only_reader(c, r1->out[0], QF_OP_TRANSPOSE);
    if (!t || t->out[0] < 0) return false;
    const qfi_transpose_params *tp = (const qfi_transpose_params *)t->params;
    static const int perm[5] = {0, 2, 1, 3, 4};
    if (tp->n_perm != 5 || memcmp(tp->perm, perm, sizeof perm)) return false;
    const qf_node *r2 = only_reader(c, t->out[0], QF_OP_RESHAPE);
    if (!r2 || r2->out[0] < 0 || !same_shape(qfi_out(g, r2, 0), x)) return false;
    ch->groups = v5->dims[1];
    ch->out = r2->out[0];
    ch->n_out = 1;
    ch->outs[0] = ch->out;
    ch->nodes[ch->n_nodes++] = i;
    ch->nodes[ch->n_nodes++] = (int)(t - g->nodes);
    ch->nodes[ch->n_nodes++] = (int)(r2 - g->nodes);
    ch->n_in = 1;
    ch->in[0] = r1->in[0];
    /* the Concat before it, when it is read here only and converts nothing */
    const qf_node *cat = producer_of(g, r1->in[0]);
    int count;
    find_consumer(g, r1->in[0], &count);
    if (!cat || cat->op != QF_OP_CONCAT || count != 1 || !free_layer(c, cat) || cat->n_in > CU_SHUFFLE_MAX_IN ||
        ((const qfi_axis_params *)cat->params)->norm != 1)
        return true;
    const cu_elem e = cu_elem_of(c, cat, r1->in[0]);
    for (int k = 0; k < cat->n_in; k++)
        if (cat->in[k] < 0 || g->values[cat->in[k]].ndim != 4 || !cu_elems_alike(cu_elem_of(c, cat, cat->in[k]), e))
            return true;
    memmove(ch->nodes + 1, ch->nodes, (size_t)ch->n_nodes * sizeof *ch->nodes);
    ch->nodes[0] = (int)(cat - g->nodes);
    ch->n_nodes++;
    ch->n_in = cat->n_in;
    memcpy(ch->in, cat->in, (size_t)cat->n_in * sizeof *ch->in);
    return true;
}

/* Runs before the layouts are assigned (cuda_engine.cu): the chain's first
 * node's layer writes the last Reshape's output, NHWC by its op's rule, and
 * the other layers are skipped. */
qf_status cu_fuse_channel_shuffles(cu_engine *c, qf_value *plan_values)
{
    const qf_graph *g = c->g;
    for (int i = 0; i < g->n_nodes; i++) {
        cu_shuffle_chain ch;
        if (!shuffle_match(c, i, &ch)) continue;
        cu_layer *L = &c->layers[ch.nodes[0]];
        for (int k = 1; k < ch.n_nodes; k++) skip_into_chain(c, plan_values, ch.nodes[k]);
        QF_CHECK(take_chain(plan_values, L, &cu_op_channel_shuffle, &ch, sizeof ch, ch.out));
        qf_log(QF_LOG_DEBUG, "%s: channel shuffle of %lld groups fused from node %s to %s (%d input%s)", g->source,
               (long long)ch.groups, L->n->name, g->nodes[ch.nodes[ch.n_nodes - 1]].name, ch.n_in, ch.n_in == 1 ? "" : "s");
    }
    return QF_OK;
}

/* Slice node n of value v along channels only, step 1, into an NHWC value
 * (the Slice's rule keeps v's NHWC layout): its first channel, or -1. */
static int64_t channel_slice_first(const cu_engine *c, const qf_node *n, int v)
{
    const qf_graph *g = c->g;
    if (n->op != QF_OP_SLICE || n->in[0] != v || n->n_out != 1 || n->out[0] < 0 || !free_layer(c, n)) return -1;
    const qfi_slice_params *p = (const qfi_slice_params *)n->params;
    const qf_value *x = &g->values[v], *y = &g->values[n->out[0]];
    if (y->ndim != 4 || y->dtype != x->dtype || c->vals[n->out[0]].layout != CU_NHWC ||
        (y->flags & QF_VALUE_OUTPUT))
        return -1;
    for (int d = 0; d < 4; d++)
        if (p->step[d] != 1 || (d != 1 && (p->start[d] != 0 || y->dims[d] != x->dims[d]))) return -1;
    return p->start[1];
}

qf_status cu_fuse_shuffle_slices(cu_engine *c, qf_value *plan_values)
{
    const qf_graph *g = c->g;
    for (int i = 0; i < g->n_nodes; i++) {
        cu_layer *L = &c->layers[i];
        if (L->op != &cu_op_channel_shuffle || L->skip) continue;
        cu_shuffle_chain *ch = (cu_shuffle_chain *)L->state;
        const int v = ch->out;
        if (c->vals[v].layout != CU_NHWC || (g->values[v].flags & QF_VALUE_OUTPUT)) continue;
        /* every reader a Slice of its own channels, together each channel once */
        cu_shuffle_chain t = *ch;
        int readers[CU_SHUFFLE_MAX_OUT];
        t.n_out = 0;
        bool ok = true;
        for (int j = 0; j < g->n_nodes && ok; j++)
            for (int k = 0; k < g->nodes[j].n_in && ok; k++) {
                if (g->nodes[j].in[k] != v) continue;
                const int64_t first = k == 0 ? channel_slice_first(c, &g->nodes[j], v) : -1;
                ok = first >= 0 && t.n_out < CU_SHUFFLE_MAX_OUT;
                if (!ok) break;
                int at = t.n_out++; /* kept in channel order */
                for (; at > 0 && t.out_first[at - 1] > first; at--) {
                    t.out_first[at] = t.out_first[at - 1], t.outs[at] = t.outs[at - 1], readers[at] = readers[at - 1];
                }
                t.out_first[at] = first, t.outs[at] = g->nodes[j].out[0], readers[at] = j;
            }
        int64_t next = 0;
        for (int k = 0; k < t.n_out && ok; k++) {
            ok = t.out_first[k] == next;
            next += g->values[t.outs[k]].dims[1];
        }
        if (!ok || t.n_out == 0 || next != g->values[v].dims[1]) continue;
        *ch = t;
        plan_values[v].producer = -1;
        for (int k = 0; k < t.n_out; k++) {
            c->layers[readers[k]].skip = true;
            plan_values[t.outs[k]].producer = i;
        }
        L->out_override = t.outs[0];
        qf_log(QF_LOG_DEBUG, "%s: channel shuffle at node %s writes the %d Slices that read it", g->source, L->n->name,
               t.n_out);
    }
    return QF_OK;
}
