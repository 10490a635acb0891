/* Pow: y = x ^ e elementwise, with numpy (multidirectional) broadcasting of
 * the exponent; float base and exponent (ConvNeXt and Swin exports raise to
 * constant 2 and 0.5). Computed in FP32, as powf, in FP16 graphs too. The
 * kernels are in the binary families: runtime/cpu/binary.c,
 * runtime/cuda/elementwise.cu. */
#include "ops/nn.h"
#include "ops/ops.h"

static qf_status pow_parse(qf_graph *g, qf_node *n) { return qfi_check_arity(g, n, 2, 2); }

static qf_status pow_infer(qf_graph *g, qf_node *n)
{
    const qf_value *x = qfi_in(g, n, 0), *e = qfi_in(g, n, 1);
    if (!x || !e) return qf_error(QF_ERR_INVALID, "missing input");
    QF_CHECK(qfi_require_f32(g, n, x, "base"));
    QF_CHECK(qfi_require_f32(g, n, e, "exponent"));
    int nd;
    int64_t dims[QF_MAX_DIMS];
    if (x->ndim > QF_MAX_DIMS || e->ndim > QF_MAX_DIMS)
        return qf_error(QF_ERR_UNSUPPORTED, "rank above %d", QF_MAX_DIMS);
    qf_status st = qfi_broadcast_shape(x->ndim, x->dims, e->ndim, e->dims, &nd, dims);
    if (st != QF_OK) return qf_error_prefix(st, "%s and %s", x->name, e->name);
    qfi_value_set_shape(qfi_out(g, n, 0), QF_F32, nd, dims);
    return QF_OK;
}

const qfi_op_desc qfi_op_pow = {.parse = pow_parse, .infer = pow_infer};
