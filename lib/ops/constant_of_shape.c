/* ConstantOfShape: a tensor of the constant shape given by its input, every
 * element the one-element `value` attribute (default float 0). With a constant
 * shape it is always folded (EfficientNet-Lite's TF "same" padding chains). The
 * CPU kernel is runtime/cpu/constant_of_shape.c. */
#include "ops/ops.h"
#include "ops/tensor_ops.h"

static qf_status constant_of_shape_parse(qf_graph *g, qf_node *n)
{
    if (n->n_in != 1 || n->n_out != 1)
        return qf_error(QF_ERR_INVALID, "needs 1 input and 1 output");
    const qf_attr *at = qfi_attr_find(n, "value");
    if (at && (at->type != QF_ATTR_TENSOR || !at->t || qf_value_numel(at->t) != 1 || !at->t->data))
        return qf_error(QF_ERR_INVALID, "value must be a one-element tensor");
    if (at && qf_dtype_info(at->t->dtype)->size == 0)
        return qf_error(QF_ERR_UNSUPPORTED, "value of dtype %s",
                        qf_dtype_info(at->t->dtype)->name);
    return QF_OK;
}

static qf_status constant_of_shape_infer(qf_graph *g, qf_node *n)
{
    if (!qfi_in(g, n, 0))
        return qf_error(QF_ERR_INVALID, "missing input");
    int64_t dims[QF_MAX_DIMS];
    int nd;
    QF_CHECK(qfi_const_ints(g, n, 0, dims, QF_MAX_DIMS, &nd));
    for (int i = 0; i < nd; i++)
        if (dims[i] < 0)
            return qf_error(QF_ERR_INVALID, "dim %d is %lld", i,
                            (long long)dims[i]);
    const qf_attr *at = qfi_attr_find(n, "value");
    qfi_value_set_shape(qfi_out(g, n, 0), at ? at->t->dtype : QF_F32, nd, dims);
    return QF_OK;
}

const qfi_op_desc qfi_op_constant_of_shape = {
    .parse = constant_of_shape_parse, .infer = constant_of_shape_infer, .traits = QFI_OP_KEEP_FP32};
