/* GlobalAveragePool and GlobalMaxPool: (N,C,spatial...) -> (N,C,1,...,1).
 * No attributes; shape inference only. */
#include "ops/nn.h"
#include "ops/ops.h"

qf_status qfi_global_pool_parse(qf_graph *g, qf_node *n)
{
    return qfi_check_arity(g, n, 1, 1);
}

qf_status qfi_global_pool_infer(qf_graph *g, qf_node *n)
{
    const qf_value *x = qfi_in(g, n, 0);
    QF_CHECK(qfi_require_f32(g, n, x, "input"));
    if (x->ndim < 3)
        return qf_error(QF_ERR_INVALID, QFI_NODE_FMT "input %s has %d dims; expected (N,C,spatial...)",
                        QFI_NODE_ARGS(g, n), x->name, x->ndim);
    int64_t dims[QF_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) dims[i] = i < 2 ? x->dims[i] : 1;
    qfi_value_set_shape(qfi_out(g, n, 0), QF_F32, x->ndim, dims);
    return QF_OK;
}
