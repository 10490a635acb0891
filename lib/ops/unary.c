/* Elementwise activations and functions: Relu, LeakyRelu, Clip, Sigmoid,
 * HardSigmoid, HardSwish, Tanh, Erf, Gelu (opset 20; approximate "none" or
 * "tanh"), Sqrt; f32 everywhere, Relu and Clip also on integer tensors; and
 * Not on bool (its CPU kernel is runtime/cpu/logic.c). The CPU kernel is
 * runtime/cpu/unary.c; Tanh, Erf and Gelu come
 * from lib/float_math.h, so both engines compute them alike. */
#include <string.h>
#include <float.h>
#include <math.h>
#include "ops/ops.h"
#include "ops/tensor_ops.h"

static qf_status unary_parse(qf_graph *g, qf_node *n)
{
    /* Clip's bounds became optional inputs in opset 11 */
    int max_in = n->op == QF_OP_CLIP && g->opset >= 11 ? 3 : 1;
    if (n->n_in < 1 || n->n_in > max_in || n->n_out != 1)
        return qf_error(QF_ERR_INVALID, "needs 1..%d inputs and 1 output, has %d and %d", max_in, n->n_in, n->n_out);
    qfi_unary_params *p = qfi_calloc(1, sizeof *p);
    if (!p) return QF_ERR_NOMEM;
    switch (n->op) {
    case QF_OP_LEAKY_RELU: p->alpha = qfi_attr_float(n, "alpha", 0.01f); break;
    case QF_OP_HARD_SIGMOID:
        p->alpha = qfi_attr_float(n, "alpha", 0.2f);
        p->beta = qfi_attr_float(n, "beta", 0.5f);
        break;
    case QF_OP_HARD_SWISH: /* HardSwish(x) = x * HardSigmoid(x) with alpha 1/6, beta 1/2 */
        p->alpha = 1.0f / 6.0f;
        p->beta = 0.5f;
        break;
    case QF_OP_CLIP:
        p->lo = qfi_attr_float(n, "min", -FLT_MAX);
        p->hi = qfi_attr_float(n, "max", FLT_MAX);
        break;
    case QF_OP_GELU: {
        const char *a = qfi_attr_string(n, "approximate", "none");
        p->tanh_approx = strcmp(a, "tanh") == 0;
        if (!p->tanh_approx && strcmp(a, "none") != 0)
            return qfi_node_set_params(n, p, qf_error(QF_ERR_UNSUPPORTED, "approximate = \"%s\" (none or tanh)", a));
        break;
    }
    default: break;
    }
    return qfi_node_set_params(n, p, QF_OK);
}

static qf_status unary_infer(qf_graph *g, qf_node *n)
{
    const qf_value *x = qfi_in(g, n, 0);
    if (!x) return qf_error(QF_ERR_INVALID, "missing input");
    bool ok = n->op == QF_OP_NOT ? x->dtype == QF_BOOL : x->dtype == QF_F32;
    if (n->op == QF_OP_RELU) ok = ok || x->dtype == QF_I8 || x->dtype == QF_I32 || x->dtype == QF_I64;
    if (n->op == QF_OP_CLIP && g->opset >= 11)
        ok = ok || x->dtype == QF_I8 || x->dtype == QF_U8 || x->dtype == QF_I32 || x->dtype == QF_I64;
    if (!ok) return qf_error(QF_ERR_UNSUPPORTED, "dtype %s", qf_dtype_info(x->dtype)->name);
    for (int k = 1; k < n->n_in; k++) {
        /* Clip's min/max: scalars of X's type, read by the kernel at run time */
        const qf_value *b = qfi_in(g, n, k);
        if (!b) continue;
        if (b->dtype != x->dtype || qf_value_numel(b) > 1)
            return qf_error(QF_ERR_INVALID, "bound %s must be a scalar of dtype %s", b->name,
                            qf_dtype_info(x->dtype)->name);
    }
    qfi_value_set_shape(qfi_out(g, n, 0), x->dtype, x->ndim, x->dims);
    return QF_OK;
}

const qf_value *qfi_clip_bound(const qf_graph *g, const qf_node *n, int k)
{
    const qf_value *b = k < 3 ? qfi_in(g, n, k) : NULL;
    return b && qf_value_numel(b) == 1 ? b : NULL;
}

qf_status qfi_clip_bounds(const qf_graph *g, const qf_node *n, float *lo, float *hi)
{
    const qfi_unary_params *up = n->params;
    *lo = up->lo, *hi = up->hi;
    for (int k = 1; k < 3; k++) {
        const qf_value *b = qfi_clip_bound(g, n, k);
        if (!b) continue;
        if (!(b->flags & QF_VALUE_CONST))
            return qf_error(QF_ERR_UNSUPPORTED, "Clip bound %s is computed at run time; a constant is needed", b->name);
        QF_CHECK(qfi_value_scalar_f32(b, k == 1 ? lo : hi));
    }
    return QF_OK;
}

/* ---- output ranges (qfi_op_desc.range) ---- */

static qfi_range relu_range(const qf_graph *g, const qf_node *n, const qfi_range *in)
{
    (void)g, (void)n;
    return (qfi_range){fmaxf(in[0].lo, 0.0f), fmaxf(in[0].hi, 0.0f)};
}

static qfi_range clip_range(const qf_graph *g, const qf_node *n, const qfi_range *in)
{
    float lo, hi;
    if (qfi_clip_bounds(g, n, &lo, &hi) != QF_OK) return (qfi_range){-INFINITY, INFINITY};
    return (qfi_range){fminf(fmaxf(in[0].lo, lo), hi), fmaxf(fminf(in[0].hi, hi), lo)};
}

/* Sigmoid and HardSigmoid lie in [0, 1]; Tanh in [-1, 1]. */
static qfi_range unit_range(const qf_graph *g, const qf_node *n, const qfi_range *in)
{
    (void)g, (void)in;
    return (qfi_range){n->op == QF_OP_TANH ? -1.0f : 0.0f, 1.0f};
}

/* x * HardSigmoid(x) = x * clip(a x + b, 0, 1) is smallest at x = -b / 2a:
 * -b^2 / 4a (HardSwish: -3/8). */
static qfi_range hard_swish_range(const qf_graph *g, const qf_node *n, const qfi_range *in)
{
    (void)g;
    const qfi_unary_params *p = n->params;
    return (qfi_range){-p->beta * p->beta / (4.0f * p->alpha), fmaxf(in[0].hi, 0.0f)};
}

/* GELU's minimum, x Phi(x) at x = -0.7518 (either approximation): -0.16997;
 * the bound is taken a little lower. */
static qfi_range gelu_range(const qf_graph *g, const qf_node *n, const qfi_range *in)
{
    (void)g, (void)n;
    return (qfi_range){-0.1700f, fmaxf(in[0].hi, 0.0f)};
}

/* Relu of an int8 value is exact at the input's scale. */
const qfi_op_desc qfi_op_relu = {.parse = unary_parse, .infer = unary_infer, .traits = QFI_OP_ELEMENTWISE, .int8 = QFI_INT8_PASS, .range = relu_range};
const qfi_op_desc qfi_op_leaky_relu = {.parse = unary_parse, .infer = unary_infer};
const qfi_op_desc qfi_op_clip = {.parse = unary_parse, .infer = unary_infer, .traits = QFI_OP_ELEMENTWISE, .range = clip_range};
const qfi_op_desc qfi_op_sigmoid = {.parse = unary_parse, .infer = unary_infer, .traits = QFI_OP_ELEMENTWISE, .range = unit_range};
const qfi_op_desc qfi_op_hard_sigmoid = {.parse = unary_parse, .infer = unary_infer, .traits = QFI_OP_ELEMENTWISE, .range = unit_range};
const qfi_op_desc qfi_op_hard_swish = {.parse = unary_parse, .infer = unary_infer, .traits = QFI_OP_ELEMENTWISE, .range = hard_swish_range};
const qfi_op_desc qfi_op_tanh = {.parse = unary_parse, .infer = unary_infer, .traits = QFI_OP_ELEMENTWISE, .range = unit_range};
const qfi_op_desc qfi_op_erf = {.parse = unary_parse, .infer = unary_infer};
const qfi_op_desc qfi_op_gelu = {.parse = unary_parse, .infer = unary_infer, .traits = QFI_OP_ELEMENTWISE, .range = gelu_range};
const qfi_op_desc qfi_op_sqrt = {.parse = unary_parse, .infer = unary_infer};
/* bool shape arithmetic (Swin's masks): folded at load time, never quantized */
const qfi_op_desc qfi_op_not = {.parse = unary_parse, .infer = unary_infer, .traits = QFI_OP_KEEP_FP32};
