/* The CUDA engine's fusions, planned at engine build: which layer absorbs
 * which reader (a residual Add, a Relu, a Clip, an input QuantizeLinear) and
 * what the memory plan must see as a result. No kernels here. */
#include "cuda_internal.h"

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

/* Peephole fusions that need no graph rewrite, for FP32/FP16 (INT8 graphs
 * arrive with theirs made by the quantizer):
 *  - a residual Add of an ungrouped Conv's output and a value that exists
 *    before that Conv runs becomes the GEMM's C term (beta 1), and a Relu
 *    reading only the sum becomes its ReLU epilogue;
 *  - a Conv or Gemm whose only reader is a Relu takes the ReLU epilogue;
 *  - a grouped Conv whose only reader is a Clip (MobileNet's ReLU6) clips.
 * The fused layer writes the last value of the chain; plan_values makes the
 * memory plan see that value born at the fused layer (and the skipped
 * intermediates never written). */
static bool same_shape(const qf_value *a, const qf_value *b)
{
    return a->ndim == b->ndim && !memcmp(a->dims, b->dims, (size_t)a->ndim * sizeof(int64_t)) && a->dtype == b->dtype;
}

/* The node of type `op` at precision prec that alone reads value v, with an
 * output of v's shape and layout; NULL if there is none. */
static const qf_node *sole_reader(const cu_engine *c, int v, qf_op op, qf_precision prec)
{
    const qf_graph *g = c->g;
    int cnt;
    const qf_node *r = find_consumer(g, v, &cnt);
    if (!r || cnt != 1 || r->op != op || r->precision != prec) return NULL;
    const int rv = r->out[0];
    if (!same_shape(&g->values[rv], &g->values[v]) || c->vals[rv].layout != c->vals[v].layout) return NULL;
    return r;
}

/* Layer li writes reader r's output in place of v, and r's layer is skipped. */
static void absorb(cu_engine *c, qf_value *plan_values, int li, int v, const qf_node *r)
{
    const int rv = r->out[0];
    c->layers[li].out_override = rv;
    c->layers[r - c->g->nodes].skip = true;
    plan_values[rv].producer = li;
    plan_values[v].producer = -1;
}

/* Folds the Relu that alone reads value v (written by layer li) into it. */
static void fuse_relu(cu_engine *c, qf_value *plan_values, int li, int v, qf_precision prec)
{
    const qf_node *r = sole_reader(c, v, QF_OP_RELU, prec);
    if (!r) return;
    absorb(c, plan_values, li, v, r);
    c->layers[li].relu = true;
}

/* Folds the Clip that alone reads value v (written by the float grouped
 * conv li) into it, where its bounds are constants exact in v's dtype (then
 * clipping before the output's rounding gives what clipping after does). */
static void fuse_clip(cu_engine *c, qf_value *plan_values, int li, int v, qf_precision prec)
{
    const qf_node *r = sole_reader(c, v, QF_OP_CLIP, prec);
    float lo, hi;
    if (!r || cu_clip_bounds(c->g, r, &lo, &hi) != QF_OK) return; /* a bad bound: the Clip's own layer reports it */
    if (c->g->values[v].dtype == QF_F16)
        for (float b : {lo, hi})
            if (!isinf(b) && qf_f16_to_f32(qf_f32_to_f16(b)) != b) return;
    absorb(c, plan_values, li, v, r);
    c->layers[li].clip = true;
    c->layers[li].clip_lo = lo, c->layers[li].clip_hi = hi;
}

void cu_fuse_layers(cu_engine *c, qf_value *plan_values)
{
    const qf_graph *g = c->g;
    for (int ai = 0; ai < g->n_nodes; ai++) {
        const qf_node *ad = &g->nodes[ai];
        if (ad->op != QF_OP_ADD || ad->precision == QF_PREC_INT8 || ad->n_in != 2 || c->layers[ai].skip) continue;
        const int yv = ad->out[0];
        const qf_value *y = &g->values[yv];
        if (y->ndim != 4 || c->vals[yv].layout != CU_NHWC) continue;
        int best = -1, other = -1;
        for (int k = 0; k < 2; k++) {
            const int v = ad->in[k], o = ad->in[1 - k], pi = plan_values[v].producer;
            if (v < 0 || o < 0 || pi < 0 || (g->values[o].flags & QF_VALUE_CONST)) continue;
            const qf_node *cv = &g->nodes[pi];
            if (cv->op != QF_OP_CONV || cv->precision != ad->precision || cv->out[0] != v) continue;
            if (((const qfi_conv_params *)cv->params)->group != 1 || c->layers[pi].out_override >= 0) continue;
            int cnt;
            find_consumer(g, v, &cnt);
            if (cnt != 1 || !same_shape(&g->values[v], y) || !same_shape(&g->values[o], y)) continue;
            if (c->vals[v].layout != CU_NHWC || c->vals[o].layout != CU_NHWC) continue;
            if (plan_values[o].producer >= pi) continue; /* the residual must exist when the Conv runs */
            if (pi > best) best = pi, other = o;
        }
        if (best < 0) continue;
        const int cv_out = g->nodes[best].out[0];
        c->layers[best].out_override = yv;
        c->layers[best].residual = other;
        c->layers[ai].skip = true;
        plan_values[yv].producer = best;
        plan_values[cv_out].producer = -1;
        fuse_relu(c, plan_values, best, yv, ad->precision);
    }
    for (int i = 0; i + 1 < g->n_nodes; i++) {
        const qf_node *n = &g->nodes[i];
        if ((n->op != QF_OP_CONV && n->op != QF_OP_GEMM) || n->precision == QF_PREC_INT8) continue;
        if (c->layers[i].out_override >= 0 || c->layers[i].skip || n->out[0] < 0) continue;
        fuse_relu(c, plan_values, i, n->out[0], n->precision);
    }
    /* cuBLASLt's epilogue has no clip: only the direct (grouped) kernels take one, after any fused Relu */
    for (int i = 0; i + 1 < g->n_nodes; i++) {
        const qf_node *n = &g->nodes[i];
        if (n->op != QF_OP_CONV || n->precision == QF_PREC_INT8 || c->layers[i].skip || n->out[0] < 0) continue;
        if (((const qfi_conv_params *)n->params)->group == 1 || c->layers[i].residual >= 0) continue;
        fuse_clip(c, plan_values, i, c->layers[i].out_override >= 0 ? c->layers[i].out_override : n->out[0], n->precision);
    }
}

/* A QuantizeLinear of a graph input read only by an INT8 Conv of fewer than
 * 4 input channels (an RGB first layer) folds into the Conv: the
 * implicit-GEMM kernel rearranges such an input anyway (conv_igemm.cu) and
 * quantizes while it does, so the int8 image is never written (ResNet-50 at
 * batch 256: a 0.18 ms pass and an NCHW -> NHWC copy). Graph inputs only: they
 * live through the whole run, so the Conv can read them later. */
void cu_fuse_input_quantize(cu_engine *c, qf_value *plan_values)
{
    const qf_graph *g = c->g;
    for (int qi = 0; qi < g->n_nodes; qi++) {
        const qf_node *q = &g->nodes[qi];
        if (q->op != QF_OP_QUANTIZE_LINEAR || c->layers[qi].skip) continue;
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
        if (qfi_qdq_scale(g, q, &scale) != QF_OK) continue; /* the QuantizeLinear layer will say why */
        const int ci = (int)(cv - g->nodes);
        c->layers[qi].skip = true;
        c->layers[ci].quant_in = x;
        c->layers[ci].quant_scale = scale;
        plan_values[v].producer = -1;
    }
}
