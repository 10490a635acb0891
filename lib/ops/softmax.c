/* Softmax: before opset 13 the input is coerced to 2-D at `axis` (default 1)
 * and normalized over the flattened trailing dims; from opset 13 it is
 * normalized along the single dim `axis` (default -1). */
#include "ops/nn.h"
#include "ops/ops.h"

static qf_status softmax_parse(qf_graph *g, qf_node *n)
{
    QF_CHECK(qfi_check_arity(g, n, 1, 1));
    qfi_softmax_params *p = qfi_calloc(1, sizeof *p);
    if (!p) return QF_ERR_NOMEM;
    p->coerce_2d = g->opset < 13;
    p->axis = qfi_attr_int(n, "axis", p->coerce_2d ? 1 : -1);
    return qfi_node_set_params(n, p, QF_OK);
}

qf_status qfi_softmax_geometry(const qf_graph *g, const qf_node *n, int64_t *outer, int64_t *len, int64_t *inner)
{
    const qfi_softmax_params *p = n->params;
    QF_ASSERT(p);
    const qf_value *x = qfi_in(g, n, 0);
    QF_CHECK(qfi_require_f32(g, n, x, "input"));
    int r = x->ndim;
    int64_t axis = p->axis < 0 ? p->axis + r : p->axis;
    /* the 2-D coercion also accepts axis == rank (a single column) */
    if (r < 1 || axis < 0 || axis > r || (!p->coerce_2d && axis == r))
        return qf_error(QF_ERR_INVALID, "axis %lld is out of range for input %s of %d dims", (long long)p->axis,
                        x->name, r);
    *outer = qfi_numel((int)axis, x->dims);
    if (p->coerce_2d) {
        *len = qfi_numel(r - (int)axis, x->dims + axis);
        *inner = 1;
    } else {
        *len = x->dims[axis];
        *inner = qfi_numel(r - (int)axis - 1, x->dims + axis + 1);
    }
    return QF_OK;
}

static qf_status softmax_infer(qf_graph *g, qf_node *n)
{
    int64_t outer, len, inner;
    QF_CHECK(qfi_softmax_geometry(g, n, &outer, &len, &inner));
    const qf_value *x = qfi_in(g, n, 0);
    qfi_value_set_shape(qfi_out(g, n, 0), QF_F32, x->ndim, x->dims);
    return QF_OK;
}

static qfi_range softmax_range(const qf_graph *g, const qf_node *n, const qfi_range *in)
{
    (void)g, (void)n, (void)in;
    return (qfi_range){0.0f, 1.0f};
}

const qfi_op_desc qfi_op_softmax = {.parse = softmax_parse, .infer = softmax_infer, .range = softmax_range};
