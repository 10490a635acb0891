/* Elementwise binary ops: Add, Sub, Mul, Div, Mod and Equal (a bool result)
 * with numpy (multidirectional) broadcasting, and PRelu, whose slope
 * broadcasts one way onto X. The CPU kernel is runtime/cpu/binary.c, Equal's
 * runtime/cpu/logic.c. */
#include <math.h>
#include "ops/nn.h"
#include "ops/ops.h"
#include "ops/tensor_ops.h"

static qf_status binary_parse(qf_graph *g, qf_node *n)
{
    if (n->n_in != 2 || n->n_out != 1)
        return qf_error(QF_ERR_INVALID, "needs 2 inputs and 1 output, has %d and %d", n->n_in, n->n_out);
    /* opset < 7 spelled broadcasting with attributes; since 7 it is implicit */
    if (qfi_attr_find(n, "broadcast") || qfi_attr_find(n, "axis"))
        return qf_error(QF_ERR_UNSUPPORTED, "legacy broadcast/axis attributes (opset < 7)");
    return QF_OK;
}

static qf_status binary_infer(qf_graph *g, qf_node *n)
{
    const qf_value *a = qfi_in(g, n, 0), *b = qfi_in(g, n, 1);
    if (!a || !b) return qf_error(QF_ERR_INVALID, "missing input");
    if (a->dtype != b->dtype)
        return qf_error(QF_ERR_INVALID, "inputs %s and %s have dtypes %s and %s", a->name, b->name,
                        qf_dtype_info(a->dtype)->name, qf_dtype_info(b->dtype)->name);
    bool ok = a->dtype == QF_F32;
    if (n->op != QF_OP_PRELU)
        ok = ok || a->dtype == QF_I32 || a->dtype == QF_I64 || a->dtype == QF_I8 || a->dtype == QF_U8;
    if (n->op == QF_OP_EQUAL) ok = ok || a->dtype == QF_BOOL;
    if (!ok) return qf_error(QF_ERR_UNSUPPORTED, "dtype %s", qf_dtype_info(a->dtype)->name);
    if (n->op == QF_OP_MOD && a->dtype == QF_F32 && !((const qfi_mod_params *)n->params)->fmod)
        return qf_error(QF_ERR_INVALID, "float operands need fmod = 1");
    int nd;
    int64_t dims[QF_MAX_DIMS];
    if (a->ndim > QF_MAX_DIMS || b->ndim > QF_MAX_DIMS)
        return qf_error(QF_ERR_UNSUPPORTED, "rank above %d", QF_MAX_DIMS);
    qf_status st = qfi_broadcast_shape(a->ndim, a->dims, b->ndim, b->dims, &nd, dims);
    if (st != QF_OK) return qf_error_prefix(st, "%s and %s", a->name, b->name);
    if (n->op == QF_OP_PRELU) {
        /* unidirectional: the slope must broadcast to X without changing X's shape */
        bool same = nd == a->ndim;
        for (int i = 0; same && i < nd; i++) same = dims[i] == a->dims[i];
        if (!same) return qf_error(QF_ERR_INVALID, "slope %s does not broadcast onto %s", b->name, a->name);
    }
    qfi_value_set_shape(qfi_out(g, n, 0), n->op == QF_OP_EQUAL ? QF_BOOL : a->dtype, nd, dims);
    return QF_OK;
}

static qf_status mod_parse(qf_graph *g, qf_node *n)
{
    QF_CHECK(binary_parse(g, n));
    qfi_mod_params *p = qfi_calloc(1, sizeof *p);
    if (!p) return QF_ERR_NOMEM;
    int64_t f = qfi_attr_int(n, "fmod", 0);
    p->fmod = f == 1;
    return qfi_node_set_params(n, p, f == 0 || f == 1 ? QF_OK : qf_error(QF_ERR_INVALID, "fmod = %lld", (long long)f));
}

/* Opset 6 applied a slope of C values per channel, opset 7 broadcasts
 * numpy-style: they agree only for a single slope. */
static qf_status prelu_from_opset6(qf_graph *g, qf_node *n)
{
    const qf_value *slope = qfi_in(g, n, 1);
    if (!slope || !(slope->flags & QF_VALUE_CONST) || qf_value_numel(slope) != 1)
        return qf_error(QF_ERR_UNSUPPORTED, "opset 6's per-channel slope broadcast is not supported");
    return QF_OK;
}

/* ---- output ranges (qfi_op_desc.range) ---- */

static qfi_range add_range(const qf_graph *g, const qf_node *n, const qfi_range *in)
{
    (void)g, (void)n;
    return (qfi_range){in[0].lo + in[1].lo, in[0].hi + in[1].hi};
}

/* a * b with 0 * inf = 0 (a bound of 0 times an unbounded side adds nothing) */
static float bound_product(float a, float b) { return a == 0.0f || b == 0.0f ? 0.0f : a * b; }

/* Whether value x is Sigmoid(y). */
static bool is_sigmoid_of(const qf_graph *g, int x, int y)
{
    int p = x >= 0 ? g->values[x].producer : -1;
    return p >= 0 && g->nodes[p].op == QF_OP_SIGMOID && g->nodes[p].in[0] == y;
}

/* SiLU exported as x * Sigmoid(x) is smallest at x = -1.27846: -0.278465
 * (taken a little lower); otherwise the product of the two intervals. */
static qfi_range mul_range(const qf_graph *g, const qf_node *n, const qfi_range *in)
{
    if (is_sigmoid_of(g, n->in[1], n->in[0]) || is_sigmoid_of(g, n->in[0], n->in[1])) {
        int x = is_sigmoid_of(g, n->in[1], n->in[0]) ? 0 : 1;
        return (qfi_range){-0.27847f, fmaxf(in[x].hi, 0.0f)};
    }
    const float c[4] = {bound_product(in[0].lo, in[1].lo), bound_product(in[0].lo, in[1].hi),
                        bound_product(in[0].hi, in[1].lo), bound_product(in[0].hi, in[1].hi)};
    qfi_range r = {c[0], c[0]};
    for (int k = 1; k < 4; k++) r.lo = fminf(r.lo, c[k]), r.hi = fmaxf(r.hi, c[k]);
    return r;
}

/* INT8 (dequantized, added in FP32, quantized at the sum's own scale) only
 * as the sum of two activations of one shape: the residual Add that comes
 * after a smooth activation, where no epilogue can take it (YOLOv8n's C2f
 * bottlenecks: each Add and the Concat after it were FP16, with
 * conversions around them). A constant addend is a bias, for an epilogue. */
static bool add_int8_ok(const qf_graph *g, const qf_node *n)
{
    if (n->n_in != 2 || n->in[0] < 0 || n->in[1] < 0 || n->n_out != 1 || n->out[0] < 0) return false;
    const qf_value *a = &g->values[n->in[0]], *b = &g->values[n->in[1]];
    if ((a->flags | b->flags) & QF_VALUE_CONST || a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->dims[d] != b->dims[d]) return false;
    return true;
}

const qfi_op_desc qfi_op_add = {
    .parse = binary_parse,
    .infer = binary_infer,
    .traits = QFI_OP_ELEMENTWISE,
    .int8 = QFI_INT8_REQUANT,
    .int8_ok = add_int8_ok,
    .range = add_range,
};
const qfi_op_desc qfi_op_sub = {.parse = binary_parse, .infer = binary_infer, .traits = QFI_OP_ELEMENTWISE};
const qfi_op_desc qfi_op_mul = {.parse = binary_parse, .infer = binary_infer, .traits = QFI_OP_ELEMENTWISE, .range = mul_range};
const qfi_op_desc qfi_op_div = {.parse = binary_parse, .infer = binary_infer, .traits = QFI_OP_ELEMENTWISE};
/* shape arithmetic (exporters' index and mask computations): folded at load time */
const qfi_op_desc qfi_op_mod = {.parse = mod_parse, .infer = binary_infer};
const qfi_op_desc qfi_op_equal = {.parse = binary_parse, .infer = binary_infer, .traits = QFI_OP_KEEP_FP32};
const qfi_op_desc qfi_op_prelu = {.parse = binary_parse, .infer = binary_infer, .from_opset6 = prelu_from_opset6};
