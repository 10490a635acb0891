/* LayerNormalization (opset 17): y = (x - mean) / sqrt(var + epsilon) * scale
 * + bias over the dims from `axis` on, in FP32 (stash_type 1; others are
 * refused). The Mean and InvStdDev outputs (training) are not produced. The
 * opset 13 decomposition (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div,
 * Mul, Add) becomes this op in lib/passes.c. Kernels: runtime/cpu/layer_norm.c,
 * runtime/cuda/layer_norm.cu. */
#include "ops/nn.h"
#include "ops/ops.h"

static qf_status layer_norm_parse(qf_graph *g, qf_node *n)
{
    if (n->n_in < 2 || n->n_in > 3 || n->n_out < 1 || n->n_out > 3)
        return qf_error(QF_ERR_INVALID, "needs 2..3 inputs and 1..3 outputs, has %d and %d", n->n_in, n->n_out);
    for (int k = 1; k < n->n_out; k++)
        if (n->out[k] >= 0)
            return qf_error(QF_ERR_UNSUPPORTED, "output %d (%s, training only) is not produced", k,
                            k == 1 ? "Mean" : "InvStdDev");
    int64_t stash = qfi_attr_int(n, "stash_type", 1);
    if (stash != 1)
        return qf_error(QF_ERR_UNSUPPORTED, "stash_type = %lld (only 1, float32 statistics)", (long long)stash);
    qfi_layer_norm_params *p = qfi_calloc(1, sizeof *p);
    if (!p) return QF_ERR_NOMEM;
    p->axis = qfi_attr_int(n, "axis", -1);
    p->epsilon = qfi_attr_float(n, "epsilon", 1e-5f);
    if (!(p->epsilon >= 0.0f))
        return qfi_node_set_params(n, p, qf_error(QF_ERR_INVALID, "epsilon = %g", (double)p->epsilon));
    return qfi_node_set_params(n, p, QF_OK);
}

qf_status qfi_layer_norm_geometry(const qf_graph *g, const qf_node *n, int64_t *outer, int64_t *len)
{
    const qfi_layer_norm_params *p = n->params;
    QF_ASSERT(p);
    const qf_value *x = qfi_in(g, n, 0);
    if (!x || !qfi_in(g, n, 1)) return qf_error(QF_ERR_INVALID, "missing input");
    QF_CHECK(qfi_require_f32(g, n, x, "input"));
    int r = x->ndim;
    int64_t axis = p->axis < 0 ? p->axis + r : p->axis;
    if (r < 1 || axis < 0 || axis >= r)
        return qf_error(QF_ERR_INVALID, "axis %lld is out of range for input %s of %d dims", (long long)p->axis,
                        x->name, r);
    *outer = qfi_numel((int)axis, x->dims);
    *len = qfi_numel(r - (int)axis, x->dims + axis);
    for (int k = 1; k < 3; k++) {
        const qf_value *v = qfi_in(g, n, k);
        if (!v) continue;
        QF_CHECK(qfi_require_f32(g, n, v, k == 1 ? "scale" : "bias"));
        int64_t c = qf_value_numel(v);
        if (c != *len && c != 1)
            return qf_error(QF_ERR_UNSUPPORTED, "%s %s has %lld elements for rows of %lld", k == 1 ? "scale" : "bias",
                            v->name, (long long)c, (long long)*len);
    }
    return QF_OK;
}

static qf_status layer_norm_infer(qf_graph *g, qf_node *n)
{
    int64_t outer, len;
    QF_CHECK(qfi_layer_norm_geometry(g, n, &outer, &len));
    const qf_value *x = qfi_in(g, n, 0);
    qfi_value_set_shape(qfi_out(g, n, 0), QF_F32, x->ndim, x->dims);
    return QF_OK;
}

/* scale and bias are parameters: they stay f32 in FP16 nodes */
const qfi_op_desc qfi_op_layer_norm = {
    .parse = layer_norm_parse, .infer = layer_norm_infer, .params = (1u << 1) | (1u << 2)};
