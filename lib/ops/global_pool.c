/* GlobalAveragePool and GlobalMaxPool: (N,C,spatial...) -> (N,C,1,...,1).
 * No attributes; shape inference only. */
#include "ops/nn.h"
#include "ops/ops.h"

static qf_status global_pool_parse(qf_graph *g, qf_node *n)
{
    return qfi_check_arity(g, n, 1, 1);
}

static qf_status global_pool_infer(qf_graph *g, qf_node *n)
{
    const qf_value *x = qfi_in(g, n, 0);
    QF_CHECK(qfi_require_f32(g, n, x, "input"));
    if (x->ndim < 3)
        return qf_error(QF_ERR_INVALID, "input %s has %d dims; expected (N,C,spatial...)", x->name, x->ndim);
    int64_t dims[QF_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) dims[i] = i < 2 ? x->dims[i] : 1;
    qfi_value_set_shape(qfi_out(g, n, 0), QF_F32, x->ndim, dims);
    return QF_OK;
}

/* The mean needs its own output scale; the maximum is one of its inputs. */
const qfi_op_desc qfi_op_global_average_pool = {
    .parse = global_pool_parse,
    .infer = global_pool_infer,
    .int8 = QFI_INT8_REQUANT,
};
const qfi_op_desc qfi_op_global_max_pool = {
    .parse = global_pool_parse,
    .infer = global_pool_infer,
    .int8 = QFI_INT8_PASS,
};
