/* Shape: the input's dims as an int64 vector, optionally a [start, end) range
 * of them (opset 15). The CPU kernel is runtime/cpu/shape.c. */
#include "ops/ops.h"
#include "ops/tensor_ops.h"

static qf_status shape_parse(qf_graph *g, qf_node *n)
{
    if (n->n_in != 1 || n->n_out != 1) return qf_error(QF_ERR_INVALID, "needs 1 input and 1 output");
    qfi_shape_params *p = qfi_calloc(1, sizeof *p);
    if (!p) return QF_ERR_NOMEM;
    p->start = qfi_attr_int(n, "start", 0);
    p->end = qfi_attr_int(n, "end", INT64_MAX);
    return qfi_node_set_params(n, p, QF_OK);
}

/* The spec's clamping: negative counts from the back, then into [0, rank]. */
static int64_t clamp_dim(int64_t i, int rank)
{
    if (i < 0) i += rank;
    return i < 0 ? 0 : i > rank ? rank : i;
}

static qf_status shape_infer(qf_graph *g, qf_node *n)
{
    qfi_shape_params *p = n->params;
    const qf_value *x = qfi_in(g, n, 0);
    if (!x) return qf_error(QF_ERR_INVALID, "missing input");
    int64_t s = clamp_dim(p->start, x->ndim), e = clamp_dim(p->end, x->ndim);
    int64_t len = e > s ? e - s : 0;
    p->first = (int)s;
    qfi_value_set_shape(qfi_out(g, n, 0), QF_I64, 1, &len);
    return QF_OK;
}

/* Shape reads only its input's dims: graph passes fold it to a constant. */
const qfi_op_desc qfi_op_shape = {.parse = shape_parse, .infer = shape_infer, .traits = QFI_OP_KEEP_FP32};
