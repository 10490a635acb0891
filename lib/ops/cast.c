/* Cast between the dtypes qforge has (f32, f16, bf16, i8, u8, i32, i64,
 * bool); casts to string or double are refused. The CPU kernel is
 * runtime/cpu/cast.c. */
#include "ops/ops.h"

typedef struct cast_params {
    qf_dtype to;
} cast_params;

static qf_status cast_parse(qf_graph *g, qf_node *n)
{
    if (n->n_in != 1 || n->n_out != 1) return qf_error(QF_ERR_INVALID, "needs 1 input and 1 output");
    const qf_attr *to = qfi_attr_find(n, "to");
    if (!to || to->type != QF_ATTR_INT) return qf_error(QF_ERR_INVALID, "no integer 'to' attribute");
    qf_dtype dt;
    if (to->i < INT32_MIN || to->i > INT32_MAX || !qf_dtype_from_onnx((int)to->i, &dt)) {
        static const char *const names[] = {[8] = "string", [11] = "double", [12] = "uint32", [13] = "uint64",
                                            [4] = "uint16", [5] = "int16", [14] = "complex64", [15] = "complex128"};
        const char *nm = to->i >= 0 && to->i < (int64_t)QF_ARRAY_LEN(names) && names[to->i] ? names[to->i] : "?";
        return qf_error(QF_ERR_UNSUPPORTED, "cast to %s (ONNX type %lld)", nm, (long long)to->i);
    }
    cast_params *p = qfi_calloc(1, sizeof *p);
    if (!p) return QF_ERR_NOMEM;
    p->to = dt;
    return qfi_node_set_params(n, p, QF_OK);
}

static qf_status cast_infer(qf_graph *g, qf_node *n)
{
    const cast_params *p = n->params;
    const qf_value *x = qfi_in(g, n, 0);
    if (!x) return qf_error(QF_ERR_INVALID, "missing input");
    qfi_value_set_shape(qfi_out(g, n, 0), p->to, x->ndim, x->dims);
    return QF_OK;
}

const qfi_op_desc qfi_op_cast = {
    .parse = cast_parse,
    .infer = cast_infer,
    .traits = QFI_OP_CONVERSION | QFI_OP_KEEP_FP32,
    .typed = QFI_PREC_BIT(QF_PREC_FP16) | QFI_PREC_BIT(QF_PREC_INT8),
};
