/* Identity and Dropout (inference-mode: also the identity). The graph passes
 * remove both; these definitions serve graphs that keep them. The CPU kernel
 * is runtime/cpu/copy.c. */
#include "ops/nn.h"
#include "ops/ops.h"

static qf_status identity_parse(qf_graph *g, qf_node *n)
{
    if (n->op == QF_OP_IDENTITY) {
        if (n->n_in != 1 || n->n_out != 1) return qf_error(QF_ERR_INVALID, "needs 1 input and 1 output");
        return QF_OK;
    }
    if (n->n_in < 1 || n->n_in > 3 || n->n_out < 1 || n->n_out > 2)
        return qf_error(QF_ERR_INVALID, "needs 1-3 inputs and 1-2 outputs, has %d and %d", n->n_in, n->n_out);
    return QF_OK;
}

/* Dropout in training mode (opset 12's training_mode input) drops at random:
 * qforge only runs it when the ratio is 0, where it is still the identity. */
static qf_status check_inference_mode(qf_graph *g, qf_node *n)
{
    const qf_value *t = qfi_in(g, n, 2);
    if (!t) return QF_OK;
    if (!(t->flags & QF_VALUE_CONST) || qf_value_numel(t) != 1)
        return qf_error(QF_ERR_UNSUPPORTED, "training_mode %s is not a constant scalar", t->name);
    if (t->dtype != QF_BOOL) return qf_error(QF_ERR_INVALID, "training_mode must be bool");
    if (*(const uint8_t *)t->data == 0) return QF_OK;
    float ratio = 0.5f; /* the spec's default */
    const qf_value *r = qfi_in(g, n, 1);
    if (r && qfi_value_scalar_f32(r, &ratio) != QF_OK)
        return qf_error(QF_ERR_UNSUPPORTED, "training mode with a non-constant ratio");
    if (ratio != 0.0f) return qf_error(QF_ERR_UNSUPPORTED, "training mode (random drop, ratio %g)", (double)ratio);
    return QF_OK;
}

static qf_status identity_infer(qf_graph *g, qf_node *n)
{
    const qf_value *x = qfi_in(g, n, 0);
    if (!x) return qf_error(QF_ERR_INVALID, "missing input");
    qfi_value_set_shape(qfi_out(g, n, 0), x->dtype, x->ndim, x->dims);
    if (n->op == QF_OP_DROPOUT) {
        QF_CHECK(check_inference_mode(g, n));
        if (n->n_out > 1 && n->out[1] >= 0) {
            /* the mask became bool in opset 10; before, it had the input's type */
            qf_dtype mt = g->opset >= 10 ? QF_BOOL : x->dtype;
            if (mt != QF_BOOL && mt != QF_F32)
                return qf_error(QF_ERR_UNSUPPORTED, "mask of dtype %s", qf_dtype_info(mt)->name);
            qfi_value_set_shape(qfi_out(g, n, 1), mt, x->ndim, x->dims);
        }
    }
    return QF_OK;
}

qf_status qfi_opset6_inference_only(qf_graph *g, qf_node *n)
{
    /* is_test=0 (the default) is training mode: batch statistics, random drops */
    if (qfi_attr_int(n, "is_test", 0) == 0)
        return qf_error(QF_ERR_UNSUPPORTED, "training mode (opset 6 is_test=0) is not supported");
    qfi_attr_drop(n, "is_test");
    return QF_OK;
}

const qfi_op_desc qfi_op_identity = {.parse = identity_parse, .infer = identity_infer};
const qfi_op_desc qfi_op_dropout = {
    .parse = identity_parse,
    .infer = identity_infer,
    .from_opset6 = qfi_opset6_inference_only,
};
