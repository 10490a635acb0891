/* Gather: picks slices of data along an axis by int32/int64 indices (negative
 * ones count from the back). Any data dtype. The CPU kernel is
 * runtime/cpu/gather.c. */
#include "ops/ops.h"
#include "ops/tensor_ops.h"

static qf_status gather_parse(qf_graph *g, qf_node *n)
{
    if (n->n_in != 2 || n->n_out != 1) return qf_error(QF_ERR_INVALID, "needs 2 inputs and 1 output");
    qfi_axis_params *p = qfi_calloc(1, sizeof *p);
    if (!p) return QF_ERR_NOMEM;
    p->axis = qfi_attr_int(n, "axis", 0);
    return qfi_node_set_params(n, p, QF_OK);
}

static qf_status gather_infer(qf_graph *g, qf_node *n)
{
    qfi_axis_params *p = n->params;
    const qf_value *x = qfi_in(g, n, 0), *idx = qfi_in(g, n, 1);
    if (!x || !idx) return qf_error(QF_ERR_INVALID, "missing input");
    if (idx->dtype != QF_I32 && idx->dtype != QF_I64)
        return qf_error(QF_ERR_INVALID, "indices %s are %s, not int32/int64", idx->name,
                        qf_dtype_info(idx->dtype)->name);
    QF_CHECK(qfi_axis_norm(g, n, p->axis, x->ndim, &p->norm));
    int rank = x->ndim - 1 + idx->ndim;
    if (rank > QF_MAX_DIMS) return qf_error(QF_ERR_UNSUPPORTED, "output rank %d (at most %d)", rank, QF_MAX_DIMS);
    /* y is data.dims[:axis] + indices.dims + data.dims[axis+1:] */
    int64_t dims[QF_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < p->norm; i++) dims[nd++] = x->dims[i];
    for (int i = 0; i < idx->ndim; i++) dims[nd++] = idx->dims[i];
    for (int i = p->norm + 1; i < x->ndim; i++) dims[nd++] = x->dims[i];
    qfi_value_set_shape(qfi_out(g, n, 0), x->dtype, nd, dims);
    return QF_OK;
}

const qfi_op_desc qfi_op_gather = {.parse = gather_parse, .infer = gather_infer};
