/* Expand: x broadcast numpy-style with a constant shape (the output has the
 * broadcast of both shapes: a 1 in `shape` keeps x's dim). ViT's class token
 * (expanded to the batch) and Swin's mask arithmetic. The CPU kernel is
 * runtime/cpu/expand.c; on CUDA it is a strided copy (runtime/cuda/copy.cu). */
#include "ops/nn.h"
#include "ops/ops.h"

static qf_status expand_parse(qf_graph *g, qf_node *n) { return qfi_check_arity(g, n, 2, 2); }

static qf_status expand_infer(qf_graph *g, qf_node *n)
{
    const qf_value *x = qfi_in(g, n, 0);
    if (!x || !qfi_in(g, n, 1)) return qf_error(QF_ERR_INVALID, "missing input");
    if (qf_dtype_info(x->dtype)->size == 0) return qf_error(QF_ERR_UNSUPPORTED, "dtype %s", qf_dtype_info(x->dtype)->name);
    int64_t shape[QF_MAX_DIMS], dims[QF_MAX_DIMS];
    int cnt, nd;
    QF_CHECK(qfi_const_ints(g, n, 1, shape, QF_MAX_DIMS, &cnt));
    if (x->ndim > QF_MAX_DIMS) return qf_error(QF_ERR_UNSUPPORTED, "rank above %d", QF_MAX_DIMS);
    for (int i = 0; i < cnt; i++)
        if (shape[i] < 0) return qf_error(QF_ERR_INVALID, "shape[%d] = %lld", i, (long long)shape[i]);
    qf_status st = qfi_broadcast_shape(x->ndim, x->dims, cnt, shape, &nd, dims);
    if (st != QF_OK) return qf_error_prefix(st, "input %s and the shape", x->name);
    qfi_value_set_shape(qfi_out(g, n, 0), x->dtype, nd, dims);
    return QF_OK;
}

/* moves values only: INT8 passes through at the input's scale */
const qfi_op_desc qfi_op_expand = {.parse = expand_parse, .infer = expand_infer, .int8 = QFI_INT8_PASS,
                                   .params = 1u << 1};
