/* Range: start, start + delta, ... below limit (above it for a negative
 * delta), from three constant scalars of one dtype (float, int32, int64). The
 * length depends on the values, so shape inference needs them constant, and
 * the node is always folded (the dynamo exporter's views: Range * stride). The
 * CPU kernel is runtime/cpu/range.c. */
#include "ops/ops.h"
#include "ops/tensor_ops.h"
#include <math.h>

static qf_status range_parse(qf_graph *g, qf_node *n)
{
    if (n->n_in != 3 || n->n_out != 1)
        return qf_error(QF_ERR_INVALID, "needs 3 inputs and 1 output");
    return QF_OK;
}

/* Input k as a double; its dtype is checked by the caller. */
static double scalar_at(const qf_value *v)
{
    switch (v->dtype) {
    case QF_F32: return *(const float *)v->data;
    case QF_I32: return *(const int32_t *)v->data;
    default: return (double)*(const int64_t *)v->data;
    }
}

static qf_status range_infer(qf_graph *g, qf_node *n)
{
    const qf_value *v[3];
    for (int k = 0; k < 3; k++) {
        v[k] = qfi_in(g, n, k);
        if (!v[k]) return qf_error(QF_ERR_INVALID, "missing input %d", k);
        if (v[k]->dtype != v[0]->dtype || qf_value_numel(v[k]) != 1)
            return qf_error(QF_ERR_INVALID, "inputs must be scalars of one dtype");
        if (!(v[k]->flags & QF_VALUE_CONST))
            return qf_error(QF_ERR_UNSUPPORTED, "input %s is not constant (dynamic shape input)", v[k]->name);
    }
    if (v[0]->dtype != QF_F32 && v[0]->dtype != QF_I32 && v[0]->dtype != QF_I64)
        return qf_error(QF_ERR_UNSUPPORTED, "dtype %s",
                        qf_dtype_info(v[0]->dtype)->name);
    double start = scalar_at(v[0]), limit = scalar_at(v[1]), delta = scalar_at(v[2]);
    if (delta == 0 || !isfinite(start) || !isfinite(limit) || !isfinite(delta))
        return qf_error(QF_ERR_INVALID, "start %g, limit %g, delta %g", start,
                        limit, delta);
    double count = ceil((limit - start) / delta);
    if (count > (double)(QF_MAX_TENSOR_BYTES / 4))
        return qf_error(QF_ERR_INVALID, "%g elements", count);
    int64_t len = count > 0 ? (int64_t)count : 0;
    qfi_value_set_shape(qfi_out(g, n, 0), v[0]->dtype, 1, &len);
    return QF_OK;
}

/* Shape arithmetic: stays FP32, and is folded before any precision is chosen. */
const qfi_op_desc qfi_op_range = {.parse = range_parse, .infer = range_infer, .traits = QFI_OP_KEEP_FP32};
