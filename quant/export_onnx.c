/* qf_export_onnx: writes a quantized graph as standard ONNX in Q/DQ form
 * (QuantizeLinear/DequantizeLinear around FP32 ops, per-channel int8 weights
 * through DequantizeLinear with an axis) for ONNX Runtime and TensorRT; the
 * protobuf model is built and written by lib/onnx_write.c. */
#include <math.h>
#include "onnx_write.h"
#include "ops/nn.h"
#include "quant_internal.h"

/* The lowest opset with per-axis DequantizeLinear; older graphs are upgraded to it. */
#define EXPORT_MIN_OPSET 13

typedef struct ex {
    qfi_onnx_builder ob;    /* the protobuf being built, and everything it points to */
    const qf_graph *g;
    int64_t opset;          /* of the written model */
    /* per qforge value: */
    char **name;            /* its own tensor (int8 for i8 activations; constants once written) */
    bool *written;          /* constants: the initializer exists */
    char **dq;              /* i8 activations: the float tensor a DequantizeLinear made of it */
    char **qscale, **qzero; /* i8 activations: scale and zero-point initializers */
} ex;


/* FP16 is qforge's storage choice, not the model's: the export computes in FP32. */
static qf_dtype export_dtype(qf_dtype dt) { return dt == QF_F16 ? QF_F32 : dt; }

/* The data of constant v as written: f16 widened to f32, else as stored. */
static const void *const_data(ex *e, const qf_value *v)
{
    if (v->dtype != QF_F16) return v->data;
    int64_t n = qf_value_numel(v);
    float *f = qfi_onnx_alloc(&e->ob, (size_t)n * sizeof *f);
    if (!f) return NULL;
    const uint16_t *h = v->data;
    for (int64_t i = 0; i < n; i++) f[i] = qf_f16_to_f32(h[i]);
    return f;
}

static Onnx__TensorProto *tensor_of(ex *e, const char *name, const qf_value *v)
{
    const void *d = const_data(e, v);
    return d ? qfi_onnx_tensor(&e->ob, name, export_dtype(v->dtype), v->ndim, v->dims, d) : NULL;
}

/* Copies a qforge attribute onto np. */
static qf_status copy_attr(ex *e, Onnx__NodeProto *np, const qf_attr *qa)
{
    static const Onnx__AttributeProto__AttributeType types[QF_ATTR_TYPE_COUNT] = {
        [QF_ATTR_INT] = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT,
        [QF_ATTR_FLOAT] = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT,
        [QF_ATTR_STRING] = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING,
        [QF_ATTR_INTS] = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS,
        [QF_ATTR_FLOATS] = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS,
        [QF_ATTR_TENSOR] = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR,
    };
    QF_ASSERT((unsigned)qa->type < QF_ATTR_TYPE_COUNT);
    Onnx__AttributeProto *a = qfi_onnx_add_attr(&e->ob, np, qa->name, types[qa->type]);
    if (!a) return QF_ERR_NOMEM;
    switch (qa->type) {
    case QF_ATTR_INT: a->has_i = 1, a->i = qa->i; break;
    case QF_ATTR_FLOAT: a->has_f = 1, a->f = qa->f; break;
    case QF_ATTR_STRING:
        a->has_s = 1;
        a->s.len = qa->s ? strlen(qa->s) : 0;
        a->s.data = (uint8_t *)(qa->s ? qa->s : "");
        break;
    case QF_ATTR_INTS: a->n_ints = (size_t)qa->n, a->ints = qa->ints; break;
    case QF_ATTR_FLOATS: a->n_floats = (size_t)qa->n, a->floats = qa->floats; break;
    case QF_ATTR_TENSOR:
        a->t = tensor_of(e, qa->t->name ? qa->t->name : "", qa->t);
        if (!a->t) return QF_ERR_NOMEM;
        break;
    default: break;
    }
    return QF_OK;
}

/* ---- values --------------------------------------------------------------------------- */

static bool is_i8_activation(const qf_value *v) { return v->dtype == QF_I8 && !(v->flags & QF_VALUE_CONST); }

/* The tensor of value v as its writer wrote it; constants are written on first use. */
static qf_status own_name(ex *e, int v, const char **out)
{
    const qf_value *x = &e->g->values[v];
    if ((x->flags & QF_VALUE_CONST) && x->data && !e->written[v]) {
        /* a constant graph output already has its (reserved) name */
        char *nm = e->name[v] ? e->name[v] : qfi_onnx_tensor_name(&e->ob, x->name);
        Onnx__TensorProto *t = nm ? tensor_of(e, nm, x) : NULL;
        if (!t || !qfi_onnx_add_initializer(&e->ob, t)) return QF_ERR_NOMEM;
        e->name[v] = nm;
        e->written[v] = true;
    }
    if (!e->name[v])
        return qf_error(QF_ERR_INVALID, "tensor %s is read before any node writes it (graph not prepared?)", x->name);
    *out = e->name[v];
    return QF_OK;
}

/* The name a node writes value v under: graph outputs keep theirs (reserved up front). */
static const char *out_name(ex *e, int v)
{
    if (!e->name[v]) e->name[v] = qfi_onnx_tensor_name(&e->ob, e->g->values[v].name);
    return e->name[v];
}

/* Scale and zero-point initializers of int8 activation v, made once and shared
 * by its QuantizeLinear and DequantizeLinear (ORT's QDQ pairs compare them). */
static qf_status qparams(ex *e, int v, const char **scale, const char **zero)
{
    const qf_value *x = &e->g->values[v];
    if (!e->qscale[v]) {
        if (!(x->scale > 0.0f) || !isfinite(x->scale))
            return qf_error(QF_ERR_INVALID, "int8 tensor %s has no valid scale (%g)", x->name, (double)x->scale);
        const char *base = out_name(e, v);
        char *sb = base ? qfi_onnx_printf(&e->ob, "%s/scale", base) : NULL,
             *zb = base ? qfi_onnx_printf(&e->ob, "%s/zero_point", base) : NULL;
        e->qscale[v] = sb ? (char *)qfi_onnx_add_floats(&e->ob, sb, 0, 1, &x->scale) : NULL;
        e->qzero[v] = zb ? (char *)qfi_onnx_add_zero_point(&e->ob, zb, 0, 1, (int8_t)x->zero_point) : NULL;
        if (!e->qscale[v] || !e->qzero[v]) return QF_ERR_NOMEM;
    }
    *scale = e->qscale[v];
    *zero = e->qzero[v];
    return QF_OK;
}

/* The float tensor an FP32 op of the export reads for value v: an int8
 * activation goes through its DequantizeLinear (made on first use, right after
 * its writer in node order); anything else is its own tensor. */
static qf_status float_of(ex *e, int v, const char **out)
{
    const qf_value *x = &e->g->values[v];
    if (!is_i8_activation(x)) return own_name(e, v, out);
    if (!e->dq[v]) {
        const char *q = NULL, *s = NULL, *z = NULL;
        QF_CHECK(own_name(e, v, &q));
        QF_CHECK(qparams(e, v, &s, &z));
        const char *y = qfi_onnx_tensor_name(&e->ob, qfi_onnx_printf(&e->ob, "%s/dq", q));
        const char *in[3] = {q, s, z};
        if (!y || !qfi_onnx_add_node(&e->ob, "DequantizeLinear", qfi_onnx_printf(&e->ob, "%s/DequantizeLinear", q), 3,
                                     in, 1, &y))
            return QF_ERR_NOMEM;
        e->dq[v] = (char *)y;
    }
    *out = e->dq[v];
    return QF_OK;
}

/* QuantizeLinear(src) -> int8 activation v. */
static qf_status quantize_to(ex *e, const char *src, int v)
{
    const char *s = NULL, *z = NULL, *y = out_name(e, v);
    QF_CHECK(qparams(e, v, &s, &z));
    const char *in[3] = {src, s, z};
    if (!y ||
        !qfi_onnx_add_node(&e->ob, "QuantizeLinear", qfi_onnx_printf(&e->ob, "%s/QuantizeLinear", y), 3, in, 1, &y))
        return QF_ERR_NOMEM;
    return QF_OK;
}

/* ---- INT8 Conv / Gemm / MatMul: DQ(x), DQ(W), float bias, op, unfused epilogue, Q -------- */

static bool is_int8_anchor(const qf_graph *g, const qf_node *n)
{
    if (n->precision != QF_PREC_INT8 || qfi_ops[n->op]->int8 != QFI_INT8_COMPUTE) return false;
    const qf_value *w = qfi_in(g, n, 1);
    return n->n_in >= 4 && w && w->dtype == QF_I8;
}

/* The tensor the next op of an epilogue chain writes: the node's own output
 * when it is the last op and the output is float, else a temporary. */
static const char *chain_out(ex *e, int y, bool last, const char *suffix)
{
    if (last && !is_i8_activation(&e->g->values[y])) return out_name(e, y);
    return qfi_onnx_tensor_name(&e->ob, qfi_onnx_printf(&e->ob, "%s/%s", e->g->values[y].name, suffix));
}

/* One float node of an anchor's epilogue chain: op(a, b) (b NULL: unary),
 * its output the chain's next value (*left counts the nodes still to come). */
static qf_status chain_node(ex *e, const qf_node *n, int y, int *left, const char *op, const char *suffix,
                            const char *a, const char *b, const char **out)
{
    const char *in[2] = {a, b}, *o = chain_out(e, y, --*left == 0, suffix);
    if (!qfi_onnx_add_node(&e->ob, op, qfi_onnx_printf(&e->ob, "%s/%s", n->name, suffix), b ? 2 : 1, in, 1, &o))
        return QF_ERR_NOMEM;
    *out = o;
    return QF_OK;
}

static const char *chain_const(ex *e, const qf_node *n, const char *suffix, float v)
{
    return qfi_onnx_add_floats(&e->ob, qfi_onnx_printf(&e->ob, "%s/%s", n->name, suffix), 0, 1, &v);
}

/* A GELU epilogue as the ops lib/float_math.h's qfi_gelu performs, in its
 * order (PyTorch's decompositions; ONNX's Gelu op needs opset 20):
 * erf: x*0.5 * (1 + Erf(x / sqrt 2)), 5 nodes; tanh: x*0.5 * (1 + Tanh(c (x
 * + 0.044715 x^3))), 9 nodes. */
static qf_status chain_gelu(ex *e, const qf_node *n, int y, int *left, const char **cur)
{
    const char *x = *cur, *inner, *t;
    if (n->act == QF_ACT_GELU) {
        QF_CHECK(chain_node(e, n, y, left, "Div", "gelu_div", x, chain_const(e, n, "gelu_sqrt2", 1.41421354f), &t));
        QF_CHECK(chain_node(e, n, y, left, "Erf", "gelu_erf", t, NULL, &inner));
    } else {
        const char *x2, *x3, *cx3, *sum, *arg;
        QF_CHECK(chain_node(e, n, y, left, "Mul", "gelu_x2", x, x, &x2));
        QF_CHECK(chain_node(e, n, y, left, "Mul", "gelu_x3", x2, x, &x3));
        QF_CHECK(chain_node(e, n, y, left, "Mul", "gelu_cx3", chain_const(e, n, "gelu_c3", 0.044715f), x3, &cx3));
        QF_CHECK(chain_node(e, n, y, left, "Add", "gelu_sum", x, cx3, &sum));
        QF_CHECK(chain_node(e, n, y, left, "Mul", "gelu_arg", chain_const(e, n, "gelu_c1", 0.797884583f), sum, &arg));
        QF_CHECK(chain_node(e, n, y, left, "Tanh", "gelu_tanh", arg, NULL, &inner));
    }
    const char *half, *onep;
    QF_CHECK(chain_node(e, n, y, left, "Mul", "gelu_half", x, chain_const(e, n, "gelu_0.5", 0.5f), &half));
    QF_CHECK(chain_node(e, n, y, left, "Add", "gelu_1p", chain_const(e, n, "gelu_1", 1.0f), inner, &onep));
    return chain_node(e, n, y, left, "Mul", "gelu", half, onep, cur);
}

static qf_status emit_anchor(ex *e, const qf_node *n)
{
    const qf_graph *g = e->g;
    const qf_value *X = qfi_in(g, n, 0), *W = qfi_in(g, n, 1), *B = qfi_in(g, n, 2), *S = qfi_in(g, n, 3);
    const int y = n->out[0];
    /* the weight's output-channel axis: 0 when the channels lead (Conv (M, C/group, k...),
     * Gemm (N,K) with transB), else 1 (Gemm and MatMul (K,N)) */
    const qfi_op_desc *d = qfi_ops[n->op];
    if (d->int8_ok && !d->int8_ok(g, n))
        return qf_error(QF_ERR_UNSUPPORTED, "weight %s (%d dims) and attributes are not a form INT8 %s takes", W->name,
                        W->ndim, qf_op_name(n->op));
    int64_t outer, ch, inner;
    d->weight_layout(g, n, &outer, &ch, &inner);
    const int axis = outer == 1 ? 0 : 1;
    QF_CHECK(qfi_int8_operands(g, n, ch));

    const char *x, *wq;
    QF_CHECK(float_of(e, n->in[0], &x));
    QF_CHECK(own_name(e, n->in[1], &wq));
    /* weights: per channel along `axis`, or per tensor when every scale is the same */
    const float *s = S->data;
    bool per_tensor = true;
    for (int64_t c = 1; c < ch; c++) per_tensor &= s[c] == s[0];
    const int sdim = per_tensor ? 0 : 1;
    const int64_t sn = per_tensor ? 1 : ch;
    const char *ws = qfi_onnx_add_floats(&e->ob, qfi_onnx_printf(&e->ob, "%s/weight_scale", n->name), sdim, sn, s);
    const char *wz =
        qfi_onnx_add_zero_point(&e->ob, qfi_onnx_printf(&e->ob, "%s/weight_zero_point", n->name), sdim, sn, 0);
    const char *wd = qfi_onnx_tensor_name(&e->ob, qfi_onnx_printf(&e->ob, "%s/dq", wq));
    const char *dq_in[3] = {wq, ws, wz};
    Onnx__NodeProto *dqn = qfi_onnx_add_node(&e->ob, "DequantizeLinear",
                                             qfi_onnx_printf(&e->ob, "%s/DequantizeLinear", wq), 3, dq_in, 1, &wd);
    if (!dqn || (!per_tensor && !qfi_onnx_attr_int(&e->ob, dqn, "axis", axis))) return QF_ERR_NOMEM;

    /* the bias the INT8 epilogue adds, in float: bias_q * (s_in * s_w[c]), the
     * product in FP32 as the epilogue forms it, less the input zero point's
     * correction (the float op reads DequantizeLinear(x), zero point taken
     * out). A float bias rather than an int32 DequantizeLinear: TensorRT
     * accepts DequantizeLinear only of 8-bit (activation) types. */
    const char *bias = NULL;
    bool bias_nonzero = false;
    if (B) {
        float *bf = qfi_onnx_alloc(&e->ob, (size_t)ch * sizeof *bf);
        if (!bf) return QF_ERR_NOMEM;
        const int32_t *bq = B->data;
        for (int64_t c = 0; c < ch; c++) {
            const int64_t z_fix = X->zero_point ? X->zero_point * qfi_int8_weight_sum(W->data, outer, ch, inner, c) : 0;
            bf[c] = (float)(bq[c] + z_fix) * (X->scale * s[c]);
            bias_nonzero |= bq[c] + z_fix != 0;
        }
        bias = qfi_onnx_add_init(&e->ob, qfi_onnx_tensor_name(&e->ob, qfi_onnx_printf(&e->ob, "%s/bias", n->name)),
                                 QF_F32, 1, &ch, bf);
        if (!bias) return QF_ERR_NOMEM;
    }

    const bool mm_bias = n->op == QF_OP_MATMUL && bias_nonzero, res = qfi_in(g, n, 4) != NULL;
    /* float ops still to emit (SiLU and HardSwish: a gate and a Mul) */
    const bool gated = n->act == QF_ACT_SILU || n->act == QF_ACT_HARD_SWISH;
    const int gelu_nodes = n->act == QF_ACT_GELU ? 5 : n->act == QF_ACT_GELU_TANH ? 9 : 0;
    int left = 1 + mm_bias + res + (gelu_nodes ? gelu_nodes : (n->act != QF_ACT_NONE) + gated);
    const char *cur = chain_out(e, y, --left == 0, "op");
    const char *in[3] = {x, wd, bias};
    int n_in = n->op == QF_OP_MATMUL || !bias ? 2 : 3;
    Onnx__NodeProto *op = qfi_onnx_add_node(&e->ob, qf_op_name(n->op), n->name, n_in, in, 1, &cur);
    if (!op) return QF_ERR_NOMEM;
    for (int a = 0; a < n->n_attr; a++) QF_CHECK(copy_attr(e, op, &n->attrs[a]));
    if (mm_bias) {
        const char *o = chain_out(e, y, --left == 0, "bias");
        const char *ai[2] = {cur, bias};
        if (!qfi_onnx_add_node(&e->ob, "Add", qfi_onnx_printf(&e->ob, "%s/add_bias", n->name), 2, ai, 1, &o))
            return QF_ERR_NOMEM;
        cur = o;
    }
    if (res) {
        const char *r, *o = chain_out(e, y, --left == 0, "residual");
        QF_CHECK(float_of(e, n->in[4], &r));
        const char *ai[2] = {cur, r};
        if (!qfi_onnx_add_node(&e->ob, "Add", qfi_onnx_printf(&e->ob, "%s/add_residual", n->name), 2, ai, 1, &o))
            return QF_ERR_NOMEM;
        cur = o;
    }
    if (n->act == QF_ACT_RELU) {
        const char *o = chain_out(e, y, --left == 0, "relu");
        if (!qfi_onnx_add_node(&e->ob, "Relu", qfi_onnx_printf(&e->ob, "%s/relu", n->name), 1, &cur, 1, &o))
            return QF_ERR_NOMEM;
        cur = o;
    } else if (n->act == QF_ACT_CLIP) {
        /* clamping before QuantizeLinear equals the epilogue's clamp to whole
         * output levels: rounding is monotonic */
        const char *o = chain_out(e, y, --left == 0, "clip");
        const char *ci[3] = {
            cur, qfi_onnx_add_floats(&e->ob, qfi_onnx_printf(&e->ob, "%s/clip_min", n->name), 0, 1, &n->act_lo),
            qfi_onnx_add_floats(&e->ob, qfi_onnx_printf(&e->ob, "%s/clip_max", n->name), 0, 1, &n->act_hi)};
        if (!qfi_onnx_add_node(&e->ob, "Clip", qfi_onnx_printf(&e->ob, "%s/clip", n->name), 3, ci, 1, &o))
            return QF_ERR_NOMEM;
        cur = o;
    } else if (n->act == QF_ACT_SIGMOID) {
        const char *o = chain_out(e, y, --left == 0, "sigmoid");
        if (!qfi_onnx_add_node(&e->ob, "Sigmoid", qfi_onnx_printf(&e->ob, "%s/sigmoid", n->name), 1, &cur, 1, &o))
            return QF_ERR_NOMEM;
        cur = o;
    } else if (gelu_nodes) {
        QF_CHECK(chain_gelu(e, n, y, &left, &cur));
    } else if (gated) {
        /* x * Sigmoid(x) and x * HardSigmoid(x) (HardSwish's constants: any
         * opset, where the HardSwish op needs 14), as PyTorch exports them */
        const bool silu = n->act == QF_ACT_SILU;
        const char *s = chain_out(e, y, --left == 0, "gate"), *o = chain_out(e, y, --left == 0, "act");
        Onnx__NodeProto *gn = qfi_onnx_add_node(&e->ob, silu ? "Sigmoid" : "HardSigmoid",
                                                qfi_onnx_printf(&e->ob, "%s/gate", n->name), 1, &cur, 1, &s);
        if (!gn) return QF_ERR_NOMEM;
        if (!silu) {
            const float ab[2] = {1.0f / 6.0f, 0.5f};
            for (int k = 0; k < 2; k++) {
                Onnx__AttributeProto *a =
                    qfi_onnx_add_attr(&e->ob, gn, k ? "beta" : "alpha", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
                if (!a) return QF_ERR_NOMEM;
                a->has_f = 1, a->f = ab[k];
            }
        }
        const char *mi[2] = {cur, s};
        if (!qfi_onnx_add_node(&e->ob, "Mul", qfi_onnx_printf(&e->ob, "%s/act", n->name), 2, mi, 1, &o))
            return QF_ERR_NOMEM;
        cur = o;
    }
    QF_ASSERT(left == 0);
    return is_i8_activation(&g->values[y]) ? quantize_to(e, cur, y) : QF_OK;
}

/* ---- other nodes: their own op; INT8 ones between DequantizeLinear and QuantizeLinear ---- */

/* Moves an ints attribute (an opset < 13 form) to input k as an int64 initializer. */
static qf_status attr_to_ints_input(ex *e, const qf_node *n, Onnx__NodeProto *np, const char *attr, size_t k)
{
    Onnx__AttributeProto *a = qfi_onnx_take_attr(np, attr);
    if (!a) return QF_OK;
    const char *v =
        qfi_onnx_add_ints(&e->ob, qfi_onnx_printf(&e->ob, "%s/%s", n->name, attr), (int64_t)a->n_ints, a->ints);
    return qfi_onnx_set_input(&e->ob, np, k, v) ? QF_OK : QF_ERR_NOMEM;
}

static qf_status attr_to_float_input(ex *e, const qf_node *n, Onnx__NodeProto *np, const char *attr, size_t k)
{
    Onnx__AttributeProto *a = qfi_onnx_take_attr(np, attr);
    if (!a) return QF_OK;
    const char *v = qfi_onnx_add_floats(&e->ob, qfi_onnx_printf(&e->ob, "%s/%s", n->name, attr), 0, 1, &a->f);
    return qfi_onnx_set_input(&e->ob, np, k, v) ? QF_OK : QF_ERR_NOMEM;
}

/* Rewrites a node of an opset < 13 graph into its opset 13 form (the ONNX
 * changelog of qforge's ops: attributes that became inputs, Softmax's axis). */
static qf_status upgrade_to_13(ex *e, const qf_node *n, Onnx__NodeProto *np)
{
    const qf_graph *g = e->g;
    switch (n->op) {
    case QF_OP_CLIP:
        if (g->opset >= 11) return QF_OK;
        QF_CHECK(attr_to_float_input(e, n, np, "min", 1));
        return attr_to_float_input(e, n, np, "max", 2);
    case QF_OP_PAD:
        if (g->opset >= 11) return QF_OK;
        QF_CHECK(attr_to_ints_input(e, n, np, "pads", 1));
        return attr_to_float_input(e, n, np, "value", 2);
    case QF_OP_SLICE:
        if (g->opset >= 10) return QF_OK;
        QF_CHECK(attr_to_ints_input(e, n, np, "starts", 1));
        QF_CHECK(attr_to_ints_input(e, n, np, "ends", 2));
        return attr_to_ints_input(e, n, np, "axes", 3);
    case QF_OP_SPLIT: return attr_to_ints_input(e, n, np, "split", 1);
    case QF_OP_SQUEEZE:
    case QF_OP_UNSQUEEZE: return attr_to_ints_input(e, n, np, "axes", 1);
    case QF_OP_BATCH_NORM:
        /* spatial (opset < 9) is gone; spatial=0 has no opset 13 form */
        if (qfi_attr_int(n, "spatial", 1) == 0)
            return qf_error(QF_ERR_UNSUPPORTED, "BatchNormalization with spatial=0 has no opset 13 form");
        qfi_onnx_take_attr(np, "spatial");
        return QF_OK;
    case QF_OP_SOFTMAX: {
        /* before 13 the input was coerced to 2-D at axis; the same as opset 13
         * only when axis is the last dim */
        const int nd = g->values[n->in[0]].ndim;
        int64_t axis = qfi_attr_int(n, "axis", 1);
        if (axis < 0) axis += nd;
        if (axis != nd - 1)
            return qf_error(QF_ERR_UNSUPPORTED,
                            "Softmax over the flattened dims from axis %lld of a %d-D input (opset < 13) "
                            "cannot be exported",
                            (long long)axis, nd);
        qfi_onnx_take_attr(np, "axis");
        return qfi_onnx_attr_int(&e->ob, np, "axis", -1) ? QF_OK : QF_ERR_NOMEM;
    }
    case QF_OP_UPSAMPLE:
    case QF_OP_RESIZE:
        /* ONNX Runtime's legacy nearest rounding has no exact Resize-13 equivalent */
        return qf_error(QF_ERR_UNSUPPORTED, "%s of opset %lld cannot be exported at opset 13", qf_op_name(n->op),
                        (long long)g->opset);
    default: return QF_OK;
    }
}

/* Everything but INT8 anchors and qforge's own conversions. An INT8 node (a
 * max-pool, reshape, concat, global pool ... between INT8 convolutions) reads
 * its int8 inputs through DequantizeLinear and writes through QuantizeLinear
 * at its output's scale: exact for ops that only move values, and what the
 * engine computes for the others (an FP32 kernel between the two). */
static qf_status emit_plain(ex *e, const qf_node *n)
{
    enum { MAX_IO = 64 };
    const qf_graph *g = e->g;
    if (n->n_in > MAX_IO || n->n_out > MAX_IO)
        return qf_error(QF_ERR_UNSUPPORTED, "more than %d inputs or outputs", MAX_IO);
    const bool int8 = n->precision == QF_PREC_INT8;
    const char *in[MAX_IO], *out[MAX_IO];
    int n_in = n->n_in, n_out = n->n_out;
    const char *op_type = qf_op_name(n->op);
    if (n->op == QF_OP_DROPOUT || n->op == QF_OP_IDENTITY) { /* inference: a copy of the data */
        op_type = "Identity";
        n_in = n_out = 1;
    }
    for (int k = 0; k < n_in; k++) {
        int v = n->in[k];
        if (v < 0) {
            in[k] = "";
        } else if (int8) {
            QF_CHECK(float_of(e, v, &in[k]));
        } else {
            QF_CHECK(own_name(e, v, &in[k]));
        }
    }
    for (int k = 0; k < n_out; k++) {
        int v = n->out[k];
        if (v < 0) out[k] = "";
        else if (is_i8_activation(&g->values[v])) /* an INT8 node, or a float one that quantizes its output */
            out[k] = qfi_onnx_tensor_name(&e->ob, qfi_onnx_printf(&e->ob, "%s/float", g->values[v].name));
        else out[k] = out_name(e, v);
        if (!out[k]) return QF_ERR_NOMEM;
    }
    Onnx__NodeProto *np = qfi_onnx_add_node(&e->ob, op_type, n->name, n_in, in, n_out, out);
    if (!np) return QF_ERR_NOMEM;
    if (strcmp(op_type, "Identity") != 0)
        for (int a = 0; a < n->n_attr; a++) QF_CHECK(copy_attr(e, np, &n->attrs[a]));
    if (n->op == QF_OP_CAST)
        for (size_t a = 0; a < np->n_attribute; a++)
            if (strcmp(np->attribute[a]->name, "to") == 0 &&
                np->attribute[a]->i == qf_dtype_info(QF_F16)->onnx_type)
                np->attribute[a]->i = qf_dtype_info(QF_F32)->onnx_type;
    if (g->opset < EXPORT_MIN_OPSET) QF_CHECK(upgrade_to_13(e, n, np));
    for (int k = 0; k < n_out; k++)
        if (n->out[k] >= 0 && is_i8_activation(&g->values[n->out[k]]))
            QF_CHECK(quantize_to(e, out[k], n->out[k]));
    return QF_OK;
}

/* qforge's own conversions (one input: the scale is the int8 value's) and
 * f32 <-> f16 casts, which the FP32 export makes identities. */
static qf_status emit_conversion(ex *e, const qf_node *n)
{
    const qf_graph *g = e->g;
    const int x = n->in[0], y = n->out[0];
    if (n->op == QF_OP_QUANTIZE_LINEAR) {
        const char *src;
        QF_CHECK(own_name(e, x, &src));
        return quantize_to(e, src, y);
    }
    if (n->op == QF_OP_DEQUANTIZE_LINEAR) {
        const char *q = NULL, *s = NULL, *z = NULL, *o = out_name(e, y);
        QF_CHECK(own_name(e, x, &q));
        QF_CHECK(qparams(e, x, &s, &z));
        const char *in[3] = {q, s, z};
        if (!o || !qfi_onnx_add_node(&e->ob, "DequantizeLinear", n->name, 3, in, 1, &o)) return QF_ERR_NOMEM;
        if (!e->dq[x]) e->dq[x] = (char *)o; /* INT8 readers of x may share it */
        return QF_OK;
    }
    const char *src;
    QF_CHECK(own_name(e, x, &src));
    if (!(g->values[y].flags & QF_VALUE_OUTPUT)) {
        e->name[y] = (char *)src; /* the same float tensor */
        return QF_OK;
    }
    const char *o = out_name(e, y);
    return o && qfi_onnx_add_node(&e->ob, "Identity", n->name, 1, &src, 1, &o) ? QF_OK : QF_ERR_NOMEM;
}

static bool is_conversion(const qf_graph *g, const qf_node *n)
{
    if (!qf_op_is_conversion(n->op)) return false;
    if (n->op != QF_OP_CAST) return n->n_in == 1; /* QuantizeLinear, DequantizeLinear */
    if (n->n_in < 1 || n->in[0] < 0) return false;
    qf_dtype a = g->values[n->in[0]].dtype, b = g->values[n->out[0]].dtype;
    return (a == QF_F32 || a == QF_F16) && (b == QF_F32 || b == QF_F16);
}

/* ---- the model -------------------------------------------------------------------------- */

static qf_status build(ex *e, Onnx__ModelProto *m, Onnx__GraphProto *gp)
{
    const qf_graph *g = e->g;
    const size_t nv = (size_t)g->n_values + 1;
    e->name = qfi_onnx_alloc(&e->ob, nv * sizeof *e->name);
    e->dq = qfi_onnx_alloc(&e->ob, nv * sizeof *e->dq);
    e->qscale = qfi_onnx_alloc(&e->ob, nv * sizeof *e->qscale);
    e->qzero = qfi_onnx_alloc(&e->ob, nv * sizeof *e->qzero);
    e->written = qfi_onnx_alloc(&e->ob, nv * sizeof *e->written);
    if (!e->name || !e->dq || !e->qscale || !e->qzero || !e->written) return QF_ERR_NOMEM;
    /* graph inputs and outputs keep their names: reserve them first */
    Onnx__ValueInfoProto **ins = qfi_onnx_alloc(&e->ob, (size_t)(g->n_inputs + 1) * sizeof *ins);
    Onnx__ValueInfoProto **outs = qfi_onnx_alloc(&e->ob, (size_t)(g->n_outputs + 1) * sizeof *outs);
    if (!ins || !outs) return QF_ERR_NOMEM;
    for (int pass = 0; pass < 2; pass++) {
        const int cnt = pass ? g->n_outputs : g->n_inputs, *list = pass ? g->outputs : g->inputs;
        for (int i = 0; i < cnt; i++) {
            const int v = list[i];
            const qf_value *x = &g->values[v];
            if (!e->name[v]) {
                if (qfi_onnx_tensor_name_used(&e->ob, x->name))
                    return qf_error(QF_ERR_INVALID, "%s: two graph inputs/outputs are named %s", g->source, x->name);
                e->name[v] = qfi_onnx_tensor_name(&e->ob, x->name);
                if (!e->name[v]) return QF_ERR_NOMEM;
            }
            Onnx__ValueInfoProto *vi = qfi_onnx_value_info(&e->ob, x->name, export_dtype(x->dtype), x->ndim, x->dims);
            if (!vi) return QF_ERR_NOMEM;
            (pass ? outs : ins)[i] = vi;
        }
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const qf_node *n = &g->nodes[i];
        qf_status st = is_int8_anchor(g, n) ? emit_anchor(e, n) : is_conversion(g, n) ? emit_conversion(e, n)
                                                                                      : emit_plain(e, n);
        if (st != QF_OK) return qfi_error_node(st, g, n);
    }
    /* a constant output is an initializer under its own name */
    for (int i = 0; i < g->n_outputs; i++) {
        const char *nm;
        if (!(g->values[g->outputs[i]].flags & QF_VALUE_CONST)) continue;
        qf_status st = own_name(e, g->outputs[i], &nm);
        if (st != QF_OK) return qfi_error_file(st, g->source);
    }
    gp->n_input = (size_t)g->n_inputs;
    gp->input = ins;
    gp->n_output = (size_t)g->n_outputs;
    gp->output = outs;
    char *doc =
        qfi_onnx_printf(&e->ob,
                        "Quantized by qforge from %s: INT8 (zero point 0 unless the source was asymmetric) as "
                        "QuantizeLinear/DequantizeLinear "
                        "around FP32 ops, per-channel weights; nodes qforge runs in FP16 are written as FP32.",
                        g->source ? g->source : "(unknown)");
    return qfi_onnx_model_finish(&e->ob, m, gp, e->opset, doc);
}

qf_status qf_export_onnx(const qf_graph *g, const char *path)
{
    if (!g || !path) return qf_error(QF_ERR_USAGE, "qf_export_onnx: %s is NULL", !g ? "the graph" : "the path");
    if (g->batch <= 0) return qf_error(QF_ERR_USAGE, "%s: the graph must be prepared before it is exported", g->source);
    ex e = {.g = g, .opset = g->opset > EXPORT_MIN_OPSET ? g->opset : EXPORT_MIN_OPSET};
    Onnx__ModelProto m;
    Onnx__GraphProto gp;
    onnx__model_proto__init(&m);
    onnx__graph_proto__init(&gp);
    qf_status st = build(&e, &m, &gp);
    if (st == QF_OK) st = qfi_onnx_model_write(&m, path);
    else qf_error_prefix(st, "exporting %s", path);
    qfi_onnx_builder_free(&e.ob);
    if (st == QF_OK)
        qf_log(QF_LOG_INFO, "%s: wrote %zu nodes, %zu initializers (opset %lld)", path, gp.n_node, gp.n_initializer,
               (long long)e.opset);
    return st;
}
