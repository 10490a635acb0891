/* Precision assignment: which Conv/Gemm/MatMul become INT8 and which Add,
 * Relu, Clip, Sigmoid, SiLU and HardSwish fold into their epilogues; which
 * ops between them stay INT8; FP16 elsewhere and FP32 where FP16 would
 * overflow; then what dtype each value is stored in and the scale of every
 * INT8 value (shared through the ops that only move values). Reads the graph
 * and the table, writes only the plan. */
#include <math.h>
#include "quant_internal.h"
#include "fusion.h"
#include "ops/nn.h"

static bool is_output(const qf_graph *g, int v) { return v >= 0 && (g->values[v].flags & QF_VALUE_OUTPUT); }

static bool same_shape(const qf_value *a, const qf_value *b)
{
    if (a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->dims[d] != b->dims[d]) return false;
    return true;
}

/* ---- INT8 anchors and their fused epilogues ---------------------------------------- */

/* Output channels of an INT8 compute op's weight. */
static int64_t weight_channels(const qf_graph *g, const qf_node *n)
{
    int64_t outer, channels, inner;
    qfi_ops[n->op]->weight_layout(g, n, &outer, &channels, &inner);
    return channels;
}

/* Named in the options' float_nodes: kept out of INT8. */
static bool kept_float(const qfi_qplan *p, const qf_node *n)
{
    for (int k = 0; k < p->o.n_float_nodes; k++)
        if (p->o.float_nodes[k] && !strcmp(p->o.float_nodes[k], n->name)) return true;
    return false;
}

/* Elements per image of value v, and per image and channel (dim 1). */
static int64_t per_image(const qf_graph *g, int v)
{
    const qf_value *x = &g->values[v];
    return x->ndim >= 1 && x->dims[0] > 0 ? qf_value_numel(x) / x->dims[0] : 0;
}
static int64_t per_channel(const qf_graph *g, int v)
{
    const qf_value *x = &g->values[v];
    return x->ndim >= 2 && x->dims[1] > 0 ? per_image(g, v) / x->dims[1] : 0;
}

/* Whether value v holds one number per channel per image, made by reducing
 * a spatial tensor (a global pool) through ops that keep it so: the input of
 * an SE block's excitation convs and of the classifier after the global pool.
 * Such values cannot average an error out over positions, each image's
 * statistics land whole in one element, and an image beyond the calibration
 * range is clipped channel-wide (a sigmoid gate then scales the channel
 * wrongly everywhere); the layers reading them cost next to nothing, so they
 * stay FP16. */
static bool globally_pooled(const qf_graph *g, int v)
{
    for (int depth = 0; depth < 64 && v >= 0; depth++) {
        if (per_channel(g, v) != 1 || (g->values[v].flags & QF_VALUE_CONST)) return false;
        const int w = g->values[v].producer;
        if (w < 0 || g->nodes[w].n_in < 1 || g->nodes[w].in[0] < 0) return false;
        const int x = g->nodes[w].in[0];
        if (per_channel(g, x) > 1 && per_image(g, x) > per_image(g, v)) /* the reduction: a pool, not a layer */
            return qfi_ops[g->nodes[w].op]->int8 != QFI_INT8_COMPUTE;
        v = x;
    }
    return false;
}

/* Whether value v is a squeeze-excitation block's output: a Mul of a spatial
 * tensor by a globally pooled gate (one factor per channel per image). Each
 * image scales each channel by its own factor, so the channels' ranges move
 * from image to image and a per-tensor INT8 scale fits them badly: with
 * fp16_se the projection conv that reads it stays FP16 (bench/accuracy.md:
 * the zoo's random-weight SE models gain 3-5 dB of output SQNR from it). */
static bool se_gated(const qf_graph *g, int v)
{
    const int w = v >= 0 ? g->values[v].producer : -1;
    if (w < 0 || g->nodes[w].op != QF_OP_MUL || g->nodes[w].n_in != 2) return false;
    for (int k = 0; k < 2; k++) {
        const int a = g->nodes[w].in[k], b = g->nodes[w].in[1 - k];
        if (a >= 0 && b >= 0 && per_channel(g, a) > 1 && globally_pooled(g, b)) return true;
    }
    return false;
}

/* An op of the INT8 compute role (Conv, Gemm, MatMul) not kept float, reading
 * a float activation, a constant weight and an optional constant bias, in
 * shapes its descriptor accepts, and no globally pooled or SE-gated tensor. */
static bool anchor_candidate(const qfi_qplan *p, const qf_node *n)
{
    const qfi_op_desc *d = qfi_ops[n->op];
    if (d->int8 != QFI_INT8_COMPUTE || kept_float(p, n) || n->n_in < 2 || n->n_out != 1 || n->out[0] < 0) return false;
    int x = n->in[0], w = n->in[1], b = n->n_in > 2 ? n->in[2] : -1;
    if (!qfi_qfloat(p, x) || qfi_qconst(p, x) || !qfi_qfloat(p, w) || !qfi_qconst(p, w)) return false;
    if (!p->o.int8_pooled && globally_pooled(p->g, x)) return false;
    if (p->o.fp16_se && se_gated(p->g, x)) return false;
    if (b >= 0 && (!qfi_qfloat(p, b) || !qfi_qconst(p, b))) return false;
    return !d->int8_ok || d->int8_ok(p->g, n);
}

/* A MatMul of two float activations that int8_attention makes an INT8
 * product (QFI_QROLE_PRODUCT): attention's QK^T and AV. */
static bool product_candidate(const qfi_qplan *p, const qf_node *n)
{
    if (!p->o.int8_attention || n->op != QF_OP_MATMUL || kept_float(p, n) || n->n_in != 2 || n->n_out != 1 ||
        n->out[0] < 0 || !qfi_qfloat(p, n->out[0]))
        return false;
    for (int k = 0; k < 2; k++)
        if (!qfi_qfloat(p, n->in[k]) || qfi_qconst(p, n->in[k])) return false;
    return qfi_matmul_product_fits(p->g, n);
}

/* Whether value v is read by a LayerNormalization: v is then a transformer's
 * residual stream, which stays float (an INT8 residual would quantize the
 * stream every block adds to; ViT-B loses all accuracy that way). */
static bool feeds_layer_norm(const qfi_qplan *p, int v)
{
    for (int u = v >= 0 ? p->use_start[v] : 0; v >= 0 && u < p->use_start[v + 1]; u++)
        if (p->g->nodes[p->use_node[u]].op == QF_OP_LAYER_NORM) return true;
    return false;
}

/* Whether node n can take its op's INT8 role (of the roles other than compute). */
static bool int8_role(const qf_graph *g, const qf_node *n, qfi_int8_role role)
{
    const qfi_op_desc *d = qfi_ops[n->op];
    return d->int8 == role && (!d->int8_ok || d->int8_ok(g, n));
}

/* Whether every node that reads v is a Conv, Gemm, MatMul or Add, or an
 * op that only moves values (the pass role: Slice, Concat, MaxPool, a
 * nearest Resize): those read an int8 v as it is, the Add as an epilogue's
 * residual, a pass op at v's scale (a graph output is written in float
 * either way). A smooth activation in an epilogue makes its output int8 at
 * the activation's scale only then; where other ops read it (the pool and
 * gate Mul of the squeeze-excitation block after EfficientNet's depthwise
 * SiLU) the epilogue writes it in float (qfi_qnode.float_out) and those ops
 * stay float: quantized there and again after the gate, EfficientNet-B0's
 * INT8 output lost 5.5 dB (24.9 -> 19.4 dB, 16 images), and unfused the
 * activation read the conv's int8 output through two more passes over the
 * tensor. Pass readers quantize nothing again; leaving them float made
 * YOLOv8n's C2f splits and concatenations, SPPF's max-pools and the neck's
 * upsamplings FP16 islands with 30 conversions. */
static bool read_by_compute_ops(const qfi_qplan *p, int v)
{
    if (v < 0) return false;
    for (int u = p->use_start[v]; u < p->use_start[v + 1]; u++) {
        const qf_node *r = &p->g->nodes[p->use_node[u]];
        if (r->op != QF_OP_CONV && r->op != QF_OP_GEMM && r->op != QF_OP_MATMUL && r->op != QF_OP_ADD &&
            !int8_role(p->g, r, QFI_INT8_PASS))
            return false;
    }
    return true;
}

/* Whether v is the input of a squeeze-excitation block: read by a global
 * pool (or a ReduceMean) and by Mul nodes, nothing else. Those ops stay
 * float, so an INT8 epilogue writing v writes it in float (float_out)
 * whatever its activation: as int8 it would be converted back for both
 * (RegNetY's ReLU blocks: a DequantizeLinear pass before the gate Mul, and
 * an INT8 pool that keeps the device's fused gate kernel out, which wants
 * an FP16 pool). */
static bool feeds_squeeze_excitation(const qfi_qplan *p, int v)
{
    if (v < 0 || p->use_start[v + 1] == p->use_start[v]) return false;
    bool pool = false, mul = false;
    for (int u = p->use_start[v]; u < p->use_start[v + 1]; u++) {
        const qf_op op = p->g->nodes[p->use_node[u]].op;
        if (op == QF_OP_GLOBAL_AVERAGE_POOL || op == QF_OP_REDUCE_MEAN) pool = true;
        else if (op == QF_OP_MUL) mul = true;
        else return false;
    }
    return pool && mul;
}

/* Whether every reader of v reads it as int8 (an INT8 node, or an epilogue
 * that absorbed the reader) and v is not a graph output. */
static bool read_only_as_int8(const qfi_qplan *p, int v)
{
    if (is_output(p->g, v)) return false;
    for (int u = p->use_start[v]; u < p->use_start[v + 1]; u++) {
        int j = p->use_node[u];
        if (p->nodes[j].absorbed_by >= 0) j = p->nodes[j].absorbed_by;
        if (p->nodes[j].role == QFI_QROLE_FLOAT) return false;
    }
    return p->use_start[v + 1] > p->use_start[v];
}

/* The INT8 epilogue's rules for lib/fusion.c's chains: Conv/Gemm/MatMul ->
 * [Add constant bias (Gemm/MatMul)] -> [Add residual] -> [Relu | Clip |
 * Sigmoid | SiLU | HardSwish]. The fused node takes the place of its chain's
 * last node, where every input exists. */
static bool int8_anchor(void *user, const qf_graph *g, int i)
{
    const qfi_qplan *p = user;
    return !(p->float_anchor && p->float_anchor[i]) && anchor_candidate(p, &g->nodes[i]);
}

static bool int8_accept(void *user, const qf_graph *g, const qfi_fusion *f, const qfi_fuse_candidate *c)
{
    const qfi_qplan *p = user;
    const qf_node *a = &g->nodes[f->anchor];
    const qf_value *cur = &g->values[f->out], *y = &g->values[c->node->out[0]];
    switch (c->link) {
    case QFI_FUSE_BIAS:
        return (a->op == QF_OP_GEMM || a->op == QF_OP_MATMUL) && qfi_qfloat(p, c->other) &&
               qfi_is_channel_vector(&g->values[c->other], weight_channels(g, a)) && same_shape(y, cur);
    case QFI_FUSE_RESIDUAL:
        return qfi_qfloat(p, c->other) && same_shape(&g->values[c->other], cur) && same_shape(y, cur) &&
               !feeds_layer_norm(p, c->other) && !feeds_layer_norm(p, c->node->out[0]);
    case QFI_FUSE_RELU: return true;
    case QFI_FUSE_CLIP: return f->node[QFI_FUSE_RELU] < 0; /* one activation */
    case QFI_FUSE_ACT: return f->node[QFI_FUSE_RELU] < 0 && f->node[QFI_FUSE_CLIP] < 0 && same_shape(y, cur);
    default: return false;
    }
}

/* Marks the anchors and what their epilogues absorb in the plan. */
static qf_status plan_fusions(qfi_qplan *p)
{
    const qfi_fusion_rules rules = {int8_anchor, int8_accept, p};
    qfi_fusion *fs;
    int n;
    QF_CHECK(qfi_fusion_plan(p->g, &rules, &fs, &n));
    for (int k = 0; k < n; k++) {
        const qfi_fusion *f = &fs[k];
        qfi_qnode *qa = &p->nodes[f->anchor];
        if (p->o.fp16_se && feeds_squeeze_excitation(p, f->out)) {
            /* the block's pool averages this output per channel and the gate
             * scales the whole channel by a function of that mean, so an INT8
             * error with a mean over a channel moves every position of it:
             * the layer and its activation stay float */
            qa->writes_se_input = true;
            continue;
        }
        qa->role = QFI_QROLE_ANCHOR;
        for (int l = 0; l < QFI_FUSE_LINK_COUNT; l++)
            if (f->node[l] >= 0) {
                p->nodes[f->node[l]].absorbed_by = f->anchor;
                p->sum.fused++;
            }
        qa->emit_at = f->last;
        qa->out = f->out;
        qa->bias_add = f->bias;
        qa->residual = f->residual;
        if (f->node[QFI_FUSE_RELU] >= 0) qa->act = QF_ACT_RELU;
        if (f->node[QFI_FUSE_CLIP] >= 0) {
            qa->act = QF_ACT_CLIP;
            qa->act_lo = f->clip_lo;
            qa->act_hi = f->clip_hi;
        }
        if (f->node[QFI_FUSE_ACT] >= 0) {
            qa->act = f->act;
            qa->float_out = !read_by_compute_ops(p, f->out);
        }
        if (feeds_squeeze_excitation(p, f->out)) qa->float_out = true;
    }
    free(fs);
    return QF_OK;
}

/* ---- precision ------------------------------------------------------------------- */

/* An Add on a transformer's residual stream (a LayerNorm reads its sum or
 * an addend): it stays float, as feeds_layer_norm says why. */
static bool layer_norm_add(const qfi_qplan *p, const qf_node *n)
{
    return n->op == QF_OP_ADD && n->n_in == 2 && n->n_out == 1 &&
           (feeds_layer_norm(p, n->out[0]) || feeds_layer_norm(p, n->in[0]) || feeds_layer_norm(p, n->in[1]));
}

/* Every non-constant float input is written by an INT8 node (and there is one),
 * and every output is float. */
static bool int8_inputs(const qfi_qplan *p, const qf_node *n)
{
    int seen = 0;
    for (int k = 0; k < n->n_in; k++) {
        int v = n->in[k];
        if (!qfi_qfloat(p, v) || qfi_qconst(p, v)) continue;
        int w = p->values[v].writer;
        if (w < 0 || p->nodes[w].prec != QF_PREC_INT8 || p->nodes[w].float_out) return false;
        seen++;
    }
    for (int k = 0; k < n->n_out; k++)
        if (n->out[k] >= 0 && !qfi_qfloat(p, n->out[k])) return false;
    return seen > 0;
}

/* |x| bound of a value for the FP16 range rule: the table's minmax amax
 * when recorded, else its largest threshold; -1 when unknown. */
static float abs_bound(const qfi_qplan *p, int v)
{
    const qf_graph *g = p->g;
    const qf_value *val = &g->values[v];
    if (val->flags & QF_VALUE_CONST) {
        const float *d = val->data;
        float m = 0.0f;
        for (int64_t i = 0; d && i < qf_value_numel(val); i++)
            if (!(fabsf(d[i]) <= m)) m = fabsf(d[i]); /* NaN counts as out of range */
        return m;
    }
    if (!p->t) return -1.0f;
    int e = qf_calib_table_find(p->t, val->name);
    if (e < 0) return -1.0f;
    float best = -1.0f;
    for (int m = 0; m < QF_CALIB_METHOD_COUNT; m++) {
        float a;
        if (!(p->t->methods & (1u << m)) || qf_calib_table_amax(p->t, e, (qf_calib_method)m, &a) != QF_OK) continue;
        if (m == QF_CALIB_MINMAX) return a;
        if (a > best) best = a;
    }
    return best;
}

/* FP16 holds a value with this |x| bound (-1: unknown) as well as FP32 would
 * for INT8's purposes: no overflow past 65504, and a top of the range that is
 * a normal half, so that no value's absolute error (at worst 2^-25 among the
 * subnormals) exceeds the relative error at the top. Below 2^-14 FP16 would
 * flush the tensor's levels together: random-init MobileNetV3's activations
 * reach 1e-9, where every half is 0. */
static bool fp16_holds(float b)
{
    return b == -1.0f || b == 0.0f || (b >= QFI_FP16_MIN_NORMAL && b <= QFI_FP16_MAX);
}

/* Whether value v, bounded by b, reaches the results only as a small
 * addend: every reader an Add or Sub whose sum FP16 holds with a normal top,
 * b at most 2^-12 of that top. Whatever FP16 does to v, even flushing it to
 * zero, then moves a sum by less than half precision's rounding at the top
 * of the sum's range, the standard fp16_holds sets. torchvision's ConvNeXt
 * initialises its layer scales to 1e-6: those products, and the residual
 * stream they join, were FP32 (6.8 of ConvNeXt-T's 35 ms at b256, H100). */
static bool small_addend(const qfi_qplan *p, int v, float b)
{
    const qf_graph *g = p->g;
    if (!(b >= 0.0f) || (g->values[v].flags & QF_VALUE_OUTPUT) || p->use_start[v] == p->use_start[v + 1]) return false;
    for (int u = p->use_start[v]; u < p->use_start[v + 1]; u++) {
        const qf_node *r = &g->nodes[p->use_node[u]];
        if ((r->op != QF_OP_ADD && r->op != QF_OP_SUB) || r->n_out != 1 || r->out[0] < 0) return false;
        const float top = abs_bound(p, r->out[0]);
        if (!(top >= QFI_FP16_MIN_NORMAL && top <= QFI_FP16_MAX) || !(b <= ldexpf(top, -12))) return false;
    }
    return true;
}

/* Input k of n is a compute op's constant bias (QFI_INT8_COMPUTE's input 2). */
static bool is_bias(const qf_node *n, int k)
{
    return k == 2 && qfi_ops[n->op]->int8 == QFI_INT8_COMPUTE;
}

/* Why a float node runs in FP32 rather than FP16 (FP16_HOLDS: it need not) */
typedef enum fp32_cause {
    FP16_HOLDS,
    FP32_ASKED,      /* the plan is FP32 */
    FP32_NOT_FLOAT,  /* shape or type arithmetic, or no float output */
    FP32_OVERFLOW,   /* a value beyond 65504 (or not finite) */
    FP32_SUBNORMAL,  /* a value whose whole range lies below FP16's normals */
} fp32_cause;

/* The FP16 test of float_precision for value v bounded by b: the cause, with v and b kept in *culprit, *bound */
static fp32_cause range_cause(int v, float b, int *culprit, float *bound)
{
    *culprit = v;
    *bound = b;
    return b <= QFI_FP16_MAX ? FP32_SUBNORMAL : FP32_OVERFLOW;
}

/* Whether node n can run in FP16, and if not why; for the range causes the
 * value that decided and its bound go to *culprit and *bound. */
static fp32_cause fp16_verdict(const qfi_qplan *p, const qf_node *n, int *culprit, float *bound)
{
    if (p->o.precision == QF_PREC_FP32) return FP32_ASKED;
    /* conversions say their dtypes explicitly; shape ops were folded */
    if (qfi_ops[n->op]->traits & QFI_OP_KEEP_FP32) return FP32_NOT_FLOAT;
    bool any = false, addends = true;
    for (int k = 0; k < n->n_out; k++) {
        if (n->out[k] < 0) continue;
        if (!qfi_qfloat(p, n->out[k])) return FP32_NOT_FLOAT;
        any = true;
        const float b = abs_bound(p, n->out[k]);
        const bool small = b <= QFI_FP16_MAX && small_addend(p, n->out[k], b);
        if (!fp16_holds(b) && !small) return range_cause(n->out[k], b, culprit, bound);
        addends &= small;
    }
    /* a product that is only a small addend stays one whatever FP16 does to
     * its factors (a tiny one flushed gives 0) */
    const bool small_product = any && addends && n->op == QF_OP_MUL;
    for (int k = 0; k < n->n_in; k++) {
        if (!qfi_qfloat(p, n->in[k])) continue;
        float b = abs_bound(p, n->in[k]);
        if (fp16_holds(b)) continue;
        /* a compute op's bias is added to its output, whose bound is checked
         * above: a tiny bias loses at most 2^-25 to FP16's subnormals, which
         * no output near a normal half can see; only overflow matters. So
         * for a small addend, and for the factors of a small product. */
        const bool overflow_only = is_bias(n, k) || small_product || small_addend(p, n->in[k], b);
        if (!overflow_only || !(b <= QFI_FP16_MAX)) return range_cause(n->in[k], b, culprit, bound);
    }
    return any ? FP16_HOLDS : FP32_NOT_FLOAT;
}

static qf_precision float_precision(const qfi_qplan *p, const qf_node *n)
{
    int v;
    float b;
    return fp16_verdict(p, n, &v, &b) == FP16_HOLDS ? QF_PREC_FP16 : QF_PREC_FP32;
}

/* ---- scales ------------------------------------------------------------------------ */

static int find(qfi_qplan *p, int v)
{
    while (p->values[v].parent != v) {
        p->values[v].parent = p->values[p->values[v].parent].parent;
        v = p->values[v].parent;
    }
    return v;
}

static void unite(qfi_qplan *p, int a, int b)
{
    a = find(p, a);
    b = find(p, b);
    if (a != b) p->values[a].parent = b;
}

/* The table's threshold for value v, which node `who` needs; a missing entry is
 * the one-line error the CLI shows. */
static qf_status table_amax(qfi_qplan *p, int v, const qf_node *who, float *amax)
{
    const char *name = p->g->values[v].name;
    int e = qf_calib_table_find(p->t, name);
    if (e < 0)
        return qf_error(QF_ERR_INVALID,
                        "%s: the calibration table has no entry for tensor '%s' (node %s needs it for INT8); "
                        "calibrate this model again",
                        p->g->source, name, who->name);
    QF_CHECK(qf_calib_table_amax(p->t, e, p->method, amax));
    if (!(*amax >= 0.0f) || !isfinite(*amax))
        return qf_error(QF_ERR_INVALID, "%s: the calibration table gives tensor '%s' the threshold %g", p->g->source,
                        name, (double)*amax);
    return QF_OK;
}

/* Outputs of node i as the plan sees them: an anchor writes its chain's end. */
static int plan_out_count(const qfi_qplan *p, int i)
{
    return p->nodes[i].role == QFI_QROLE_ANCHOR ? 1 : p->g->nodes[i].n_out;
}
static int plan_out(const qfi_qplan *p, int i, int k)
{
    return p->nodes[i].role == QFI_QROLE_ANCHOR ? p->nodes[i].out : p->g->nodes[i].out[k];
}

/* Whether value v is the input of a dense convolution (one group, a kernel
 * over more than one element) that reads padding (qf_quant_opts.asymmetric_unpadded). */
static bool dense_conv_pads(const qfi_qplan *p, const qf_graph *g, int v)
{
    for (int u = p->use_start[v]; u < p->use_start[v + 1]; u++) {
        const qf_node *r = &g->nodes[p->use_node[u]];
        qfi_conv_geom geo;
        if (r->op == QF_OP_CONV && r->in[0] == v && qfi_conv_geometry(g, r, &geo) == QF_OK && geo.group == 1 &&
            qfi_window_k_size(&geo.w) > 1 && qfi_window_reads_padding(&geo.w))
            return true;
    }
    return false;
}

qf_status qfi_quant_assign(qfi_qplan *p)
{
    qf_graph *g = p->g;
    const bool int8 = p->o.precision == QF_PREC_INT8;
    p->n_nodes = g->n_nodes;
    p->n_values = g->n_values;
    p->nodes = qfi_calloc((size_t)g->n_nodes + 1, sizeof *p->nodes);
    p->values = qfi_calloc((size_t)g->n_values + 1, sizeof *p->values);
    if (!p->nodes || !p->values) return QF_ERR_NOMEM;
    QF_CHECK(qfi_graph_uses(g, &p->use_start, &p->use_node));
    for (int v = 0; v < g->n_values; v++) {
        qfi_qvalue *qv = &p->values[v];
        qv->dtype = qv->store = g->values[v].dtype;
        qv->writer = -1;
        qv->parent = v;
        qv->amax = -1.0f;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        qfi_qnode *qn = &p->nodes[i];
        qn->absorbed_by = qn->bias_add = qn->residual = -1;
        qn->emit_at = i;
        qn->role = QFI_QROLE_FLOAT;
        if (g->nodes[i].precision != QF_PREC_FP32 || g->nodes[i].act != QF_ACT_NONE)
            return qfi_error_node(qf_error(QF_ERR_USAGE, "already quantized"), g, &g->nodes[i]);
    }

    /* anchors and their epilogues */
    if (int8) QF_CHECK(plan_fusions(p));
    for (int i = 0; i < g->n_nodes; i++) {
        if (p->nodes[i].absorbed_by >= 0) continue;
        for (int k = 0; k < plan_out_count(p, i); k++)
            if (plan_out(p, i, k) >= 0) p->values[plan_out(p, i, k)].writer = i;
    }

    /* precision, in topological order: an op stays INT8 when its inputs are */
    for (int i = 0; i < g->n_nodes; i++) {
        qfi_qnode *qn = &p->nodes[i];
        const qf_node *n = &g->nodes[i];
        if (qn->absorbed_by >= 0 || qn->role == QFI_QROLE_ANCHOR) {
            qn->prec = QF_PREC_INT8;
            continue;
        }
        if (int8 && product_candidate(p, n)) {
            qn->role = QFI_QROLE_PRODUCT;
            qn->prec = QF_PREC_INT8;
        } else if (int8 && int8_role(g, n, QFI_INT8_REQUANT) && int8_inputs(p, n) && !layer_norm_add(p, n)) {
            qn->role = QFI_QROLE_REQUANT;
            qn->prec = QF_PREC_INT8;
        } else if (int8 && int8_role(g, n, QFI_INT8_PASS) && int8_inputs(p, n)) {
            qn->role = QFI_QROLE_PASS;
            qn->prec = QF_PREC_INT8;
        } else {
            qn->prec = float_precision(p, n);
        }
        p->sum.nodes[qn->prec]++;
    }
    for (int i = 0; i < g->n_nodes; i++)
        if (p->nodes[i].role == QFI_QROLE_ANCHOR) p->sum.nodes[QF_PREC_INT8]++;

    /* who reads what as int8 */
    for (int i = 0; i < g->n_nodes; i++) {
        const qfi_qnode *qn = &p->nodes[i];
        const qf_node *n = &g->nodes[i];
        if (qn->role == QFI_QROLE_ANCHOR) {
            p->values[n->in[0]].read_i8 = true;
            if (qn->residual >= 0) p->values[qn->residual].read_i8 = true;
        } else if (qn->role == QFI_QROLE_PASS || qn->role == QFI_QROLE_REQUANT || qn->role == QFI_QROLE_PRODUCT) {
            for (int k = 0; k < n->n_in; k++)
                if (qfi_qfloat(p, n->in[k]) && !qfi_qconst(p, n->in[k])) p->values[n->in[k]].read_i8 = true;
        }
    }

    /* storage: what each writer stores */
    for (int i = 0; i < g->n_nodes; i++) {
        const qfi_qnode *qn = &p->nodes[i];
        if (qn->absorbed_by >= 0) continue;
        for (int k = 0; k < plan_out_count(p, i); k++) {
            int v = plan_out(p, i, k);
            if (!qfi_qfloat(p, v)) continue;
            qfi_qvalue *qv = &p->values[v];
            switch (qn->role) {
            case QFI_QROLE_PASS: qv->store = QF_I8; break;
            case QFI_QROLE_FLOAT:
                /* an FP16 elementwise op read only by INT8 nodes (the squeeze-excitation gate Mul
                 * before the projection conv) stores int8 itself: no half tensor and QuantizeLinear
                 * between (FP32 nodes run the plain float kernels, which store float) */
                qv->store = qv->read_i8 && qn->prec == QF_PREC_FP16 && (qfi_ops[g->nodes[i].op]->traits & QFI_OP_ELEMENTWISE) &&
                                    read_only_as_int8(p, v)
                                ? QF_I8
                            : qn->prec == QF_PREC_FP16                                              ? QF_F16
                                                                                                    : QF_F32;
                break;
            default: {
                /* INT8 compute (and requantizing ops): int8 for INT8 readers, else float straight
                 * from the epilogue */
                bool half_reader = false;
                for (int u = p->use_start[v]; u < p->use_start[v + 1]; u++)
                    half_reader |= p->nodes[p->use_node[u]].prec == QF_PREC_FP16;
                qv->store = qv->read_i8 && !qn->float_out ? QF_I8 : half_reader && !is_output(g, v) ? QF_F16 : QF_F32;
            }
            }
        }
    }

    /* scales: one per class of values joined by pass-through ops; a class's
     * threshold is the largest of its INT8 writers' */
    if (!int8) return QF_OK;
    if (!p->t) return qf_error(QF_ERR_USAGE, "%s: INT8 quantization needs a calibration table", g->source);
    for (int i = 0; i < g->n_nodes; i++) {
        if (p->nodes[i].role != QFI_QROLE_PASS) continue;
        const qf_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in; k++) {
            if (!qfi_qfloat(p, n->in[k]) || qfi_qconst(p, n->in[k])) continue;
            for (int o = 0; o < n->n_out; o++)
                if (n->out[o] >= 0) unite(p, n->in[k], n->out[o]);
        }
    }
    float *class_amax = qfi_calloc((size_t)g->n_values + 1, sizeof *class_amax);
    float *class_lo = qfi_calloc((size_t)g->n_values + 1, sizeof *class_lo);
    float *class_graph_lo = qfi_calloc((size_t)g->n_values + 1, sizeof *class_graph_lo); /* for the summary */
    qfi_range *range = NULL;
    qf_status st = class_amax && class_lo && class_graph_lo ? QF_OK : QF_ERR_NOMEM;
    if (st == QF_OK && p->o.asymmetric) st = qfi_value_ranges(g, &range);
    for (int v = 0; v < g->n_values && st == QF_OK; v++) {
        qfi_qvalue *qv = &p->values[v];
        bool zero_point = range && !(p->o.asymmetric_unpadded && dense_conv_pads(p, g, v));
        qv->lo = zero_point ? range[v].lo : -INFINITY;
        qv->data_min = zero_point && p->o.asymmetric_two_sided && (qv->store == QF_I8 || qv->read_i8)
                           ? qf_calib_table_min(p->t, qf_calib_table_find(p->t, g->values[v].name))
                           : NAN;
    }
    for (int v = 0; v < g->n_values && st == QF_OK; v++) {
        qfi_qvalue *qv = &p->values[v];
        bool root = qv->store == QF_I8 && qv->writer >= 0 && p->nodes[qv->writer].role != QFI_QROLE_PASS;
        bool quantized = qv->read_i8 && qv->store != QF_I8; /* a QuantizeLinear will make it int8 */
        if (!root && !quantized) continue;
        int who = qv->writer;
        if (who < 0)
            for (int u = p->use_start[v]; u < p->use_start[v + 1] && who < 0; u++) who = p->use_node[u];
        const qf_node *wn = &g->nodes[who >= 0 ? who : 0];
        st = table_amax(p, v, wn, &qv->amax);
        if (st != QF_OK) break;
        if (quantized) {
            float lo = qfi_quant_act_lo(qv->lo, qv->data_min, qv->amax);
            qfi_quant_act_params(qv->amax, lo, p->o.asymmetric, &qv->scale, &qv->zero_point);
            qv->no_range = qv->amax < QF_CALIB_AMAX_MIN;
        }
        if (root) {
            int r = find(p, v);
            if (qv->amax > class_amax[r]) class_amax[r] = qv->amax;
        }
    }
    /* a class shares one zero point: the lowest bound of its values */
    for (int v = 0; v < g->n_values && st == QF_OK; v++) {
        const qfi_qvalue *qv = &p->values[v];
        if (qv->store != QF_I8 || !qfi_qfloat(p, v)) continue;
        int r = find(p, v);
        class_lo[r] = fminf(class_lo[r], qfi_quant_act_lo(qv->lo, qv->data_min, class_amax[r]));
        class_graph_lo[r] = fminf(class_graph_lo[r], qv->lo);
    }
    if (st == QF_OK)
        for (int v = 0; v < g->n_values; v++) {
            qfi_qvalue *qv = &p->values[v];
            if (qv->store != QF_I8 || !qfi_qfloat(p, v)) continue;
            int r = find(p, v);
            float a = class_amax[r];
            qfi_quant_act_params(a, class_lo[r], p->o.asymmetric, &qv->scale, &qv->zero_point);
            qv->no_range = qv->amax >= 0.0f && a < QF_CALIB_AMAX_MIN; /* said of the class's writers */
            p->sum.int8_activations++;
            if (qv->zero_point) p->sum.zero_point_activations++;
            if (qv->zero_point && !(class_graph_lo[r] > -a)) p->sum.zero_point_two_sided++;
        }
    free(class_amax);
    free(class_lo);
    free(class_graph_lo);
    free(range);
    return st;
}

/* Why float node n of an INT8 plan is not INT8, in a few words. */
static const char *float_reason(const qfi_qplan *p, int i)
{
    const qf_node *n = &p->g->nodes[i];
    const qfi_op_desc *d = qfi_ops[n->op];
    if (kept_float(p, n)) return "named by --fp16-layers or kept by --precision best";
    if (n->op == QF_OP_ADD && !int8_role(p->g, n, QFI_INT8_REQUANT))
        return "Add of a constant, or broadcast, outside an INT8 epilogue";
    if (layer_norm_add(p, n)) return "residual Add of a LayerNorm stream";
    switch (d->int8) {
    case QFI_INT8_COMPUTE:
        if (p->float_anchor && p->float_anchor[i]) return "bias beyond the INT8 accumulator (warned above)";
        if (!p->o.int8_pooled && n->n_in >= 1 && globally_pooled(p->g, n->in[0]))
            return "reads a globally pooled tensor (SE, classifier)";
        if (p->nodes[i].writes_se_input) return "writes an SE block's input (--fp16-se)";
        if (p->o.fp16_se && n->n_in >= 1 && se_gated(p->g, n->in[0]))
            return "reads an SE block's gated output (--fp16-se)";
        if (n->n_in >= 2 && !qfi_qconst(p, n->in[1]))
            return p->o.int8_attention ? "activation x activation in a shape the INT8 product does not take"
                                       : "activation x activation (attention's QK^T and AV; --int8-attention)";
        return "weights in a shape INT8 does not take";
    case QFI_INT8_NONE: return (d->traits & QFI_OP_KEEP_FP32) ? "shape or type arithmetic" : "no INT8 form";
    default: return "its inputs are float";
    }
}

void qfi_quant_report_float(const qfi_qplan *p)
{
    enum { MAX_GROUPS = 32 };
    struct float_group {
        qf_op op;
        const char *why;
        int count;
    } groups[MAX_GROUPS];
    int n_groups = 0, total = 0;
    for (int i = 0; i < p->g->n_nodes; i++) {
        if (p->nodes[i].prec == QF_PREC_INT8 || p->nodes[i].absorbed_by >= 0) continue;
        const qf_op op = p->g->nodes[i].op;
        const char *why = float_reason(p, i);
        total++;
        int k = 0;
        while (k < n_groups && (groups[k].op != op || groups[k].why != why)) k++;
        if (k == n_groups) {
            if (n_groups == MAX_GROUPS) continue;
            groups[n_groups++] = (struct float_group){op, why, 0};
        }
        groups[k].count++;
    }
    if (!total) return;
    qf_log(QF_LOG_INFO, "%s: %d nodes stay float (FP16 where its range allows, else FP32):", p->g->source, total);
    for (int k = 0; k < n_groups; k++)
        qf_log(QF_LOG_INFO, "  %4d %-20s %s", groups[k].count, qf_op_name(groups[k].op), groups[k].why);
}

/* The nodes an INT8 or FP16 plan keeps in FP32 for their values' ranges,
 * by cause, each with its first node and the tensor that decided: they run
 * at FP32's speed (random-init SE blocks, whose activations reach 1e-9,
 * are the usual case), and the plan's count alone does not say why. */
void qfi_quant_report_fp32(const qfi_qplan *p)
{
    struct {
        int count, node, value;
        float bound;
    } by[FP32_SUBNORMAL + 1] = {{0}};
    for (int i = 0; i < p->g->n_nodes; i++) {
        if (p->nodes[i].prec != QF_PREC_FP32 || p->nodes[i].absorbed_by >= 0) continue;
        int v;
        float b;
        const fp32_cause c = fp16_verdict(p, &p->g->nodes[i], &v, &b);
        if (c != FP32_OVERFLOW && c != FP32_SUBNORMAL) continue;
        if (!by[c].count++) by[c].node = i, by[c].value = v, by[c].bound = b;
    }
    static const char *what[FP32_SUBNORMAL + 1] = {
        [FP32_OVERFLOW] = "a value beyond FP16's 65504",
        [FP32_SUBNORMAL] = "a value wholly below FP16's normal range (6.1e-05)",
    };
    for (int c = FP32_OVERFLOW; c <= FP32_SUBNORMAL; c++)
        if (by[c].count)
            qf_log(QF_LOG_INFO, "%s: %d nodes stay FP32 for %s; the first is node %s (tensor %s, |x| up to %.3g)",
                   p->g->source, by[c].count, what[c], p->g->nodes[by[c].node].name, p->g->values[by[c].value].name,
                   (double)by[c].bound);
}

void qfi_quant_warn_ranges(const qfi_qplan *p)
{
    for (int v = 0; v < p->n_values; v++)
        if (p->values[v].no_range)
            qf_log(QF_LOG_WARN,
                   "%s: tensor %s: its calibrated range is degenerate (%s threshold %g: every calibration value 0, "
                   "NaN or Inf, or below %g); INT8 holds it as 0",
                   p->g->source, p->g->values[v].name, qf_calib_method_name(p->method), (double)p->values[v].amax,
                   (double)QF_CALIB_AMAX_MIN);
}

/* INT8 holds an anchor's bias as a count of accumulator steps s_in * s_w[c],
 * at most QFI_INT8_BIAS_LIMIT of them. qfi_quant_anchor_scales raises the
 * weight scale of a channel whose bias needs more (Lite1's dead channels:
 * weights near 1e-7 beside biases near 1; random-init GoogLeNet's classifier,
 * which reads values near 1e-11 beside biases near 0.03); an anchor with a
 * channel no scale fits (a NaN or infinite bias) computes in float. */
qf_status qfi_quant_check_biases(qfi_qplan *p, unsigned char *float_anchor, int *marked)
{
    const qf_graph *g = p->g;
    *marked = 0;
    p->sum.rescaled_channels = p->sum.rescaled_layers = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        if (p->nodes[i].role != QFI_QROLE_ANCHOR) continue;
        const qf_node *n = &g->nodes[i];
        const float s_in = p->values[n->in[0]].scale;
        qfi_anchor_f af;
        QF_CHECK(qfi_anchor_f_make(g, n, p->nodes[i].bias_add, &p->o, &af));
        float *s_w = qfi_calloc((size_t)af.ch + 1, sizeof *s_w);
        if (!s_w) {
            qfi_anchor_f_free(&af);
            return QF_ERR_NOMEM;
        }
        int64_t bad = -1;
        const int32_t z_in = p->values[n->in[0]].zero_point;
        int64_t raised = qfi_quant_anchor_scales(&af, s_in, z_in, !p->o.per_tensor_weights, s_w, &bad);
        bool zp_overflow = false;
        if (raised >= 0 && z_in != 0) { /* an input zero point adds -z_in * (weight sum) to the bias */
            int8_t *wq = qfi_calloc((size_t)(af.outer * af.ch * af.inner) + 1, 1);
            int32_t *bq = qfi_calloc((size_t)af.ch + 1, sizeof *bq);
            if (!wq || !bq) {
                free(wq), free(bq), free(s_w);
                qfi_anchor_f_free(&af);
                return QF_ERR_NOMEM;
            }
            qfi_anchor_weights_at(&af, s_w, wq);
            bad = qfi_quant_anchor_biases(&af, s_in, s_w, z_in, wq, bq);
            zp_overflow = bad >= 0;
            free(wq), free(bq);
        }
        if (zp_overflow) {
            qf_log(QF_LOG_WARN,
                   "%s: node %s computes in float: its bias %g (channel %lld) with its input's zero point %d does "
                   "not fit its INT8 accumulator (input scale %g)",
                   g->source, n->name, (double)af.bias[bad], (long long)bad, (int)z_in, (double)s_in);
            float_anchor[i] = 1;
            (*marked)++;
        } else if (raised < 0) {
            qf_log(QF_LOG_WARN,
                   "%s: node %s computes in float: its bias %g (channel %lld) fits its INT8 accumulator (at most "
                   "2^30 steps) at no weight scale (input scale %g)",
                   g->source, n->name, (double)af.bias[bad], (long long)bad, (double)s_in);
            float_anchor[i] = 1;
            (*marked)++;
        } else if (raised > 0) {
            p->sum.rescaled_channels += (int)raised;
            p->sum.rescaled_layers++;
        }
        free(s_w);
        qfi_anchor_f_free(&af);
    }
    return QF_OK;
}

void qfi_quant_plan_free(qfi_qplan *p)
{
    free(p->nodes);
    free(p->values);
    free(p->use_start);
    free(p->use_node);
    free(p->float_anchor);
    memset(p, 0, sizeof *p);
}
