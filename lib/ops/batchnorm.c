/* BatchNormalization, inference form: y = scale * (x - mean) / sqrt(var + eps) + B
 * per channel (or per activation for opset < 9 with spatial=0). Training mode
 * is not supported. */
#include "ops/nn.h"
#include "ops/ops.h"

static qf_status batchnorm_parse(qf_graph *g, qf_node *n)
{
    bool extra_out = false;
    for (int k = 1; k < n->n_out; k++) extra_out |= n->out[k] >= 0;
    if (qfi_attr_int(n, "training_mode", 0) != 0 || extra_out)
        return qf_error(QF_ERR_UNSUPPORTED,
                        "training mode (training_mode=1 or running-statistics outputs) is not supported");
    QF_CHECK(qfi_check_arity(g, n, 5, 5));
    float eps = qfi_attr_float(n, "epsilon", 1e-5f);
    if (!(eps >= 0.0f)) return qf_error(QF_ERR_INVALID, "epsilon is %g", (double)eps);
    qfi_batchnorm_params *p = qfi_calloc(1, sizeof *p);
    if (!p) return QF_ERR_NOMEM;
    p->epsilon = eps;
    /* `spatial` exists up to opset 8; later opsets always normalize per channel */
    p->spatial = g->opset >= 9 || qfi_attr_int(n, "spatial", 1) != 0;
    return qfi_node_set_params(n, p, QF_OK);
}

static qf_status batchnorm_infer(qf_graph *g, qf_node *n)
{
    const qfi_batchnorm_params *p = n->params;
    QF_ASSERT(p);
    const qf_value *x = qfi_in(g, n, 0);
    QF_CHECK(qfi_require_f32(g, n, x, "input"));
    if (x->ndim < 2) return qf_error(QF_ERR_INVALID, "input %s has %d dims; expected (N,C,...)", x->name, x->ndim);
    /* per channel: C values; per activation: one per element of an image */
    int64_t want = p->spatial ? x->dims[1] : qf_value_numel(x) / (x->dims[0] ? x->dims[0] : 1);
    static const char *const roles[] = {"", "scale", "B", "mean", "var"};
    for (int k = 1; k < 5; k++) {
        const qf_value *v = qfi_in(g, n, k);
        QF_CHECK(qfi_require_f32(g, n, v, roles[k]));
        if (qf_value_numel(v) != want)
            return qf_error(QF_ERR_INVALID, "%s %s has %lld elements; expected %lld", roles[k], v->name,
                            (long long)qf_value_numel(v), (long long)want);
    }
    qfi_value_set_shape(qfi_out(g, n, 0), QF_F32, x->ndim, x->dims);
    return QF_OK;
}

const qfi_op_desc qfi_op_batch_norm = {
    .parse = batchnorm_parse,
    .infer = batchnorm_infer,
    .traits = QFI_OP_ELEMENTWISE, /* per channel, from constant statistics */
    .from_opset6 = qfi_opset6_inference_only,
};
