/* ReduceMean: axes from the attribute (opset < 18) or from a constant second
 * input (opset >= 18), keepdims, noop_with_empty_axes; shape inference and the
 * axis resolution the kernels share. */
#include "ops/nn.h"
#include "ops/ops.h"

static qf_status reduce_mean_parse(qf_graph *g, qf_node *n)
{
    QF_CHECK(qfi_check_arity(g, n, 1, 2));
    qfi_reduce_params *p = qfi_calloc(1, sizeof *p);
    if (!p) return QF_ERR_NOMEM;
    p->keepdims = qfi_attr_int(n, "keepdims", 1) != 0;
    p->noop_with_empty_axes = qfi_attr_int(n, "noop_with_empty_axes", 0) != 0;
    int cnt = 0;
    const int64_t *axes = qfi_attr_ints(n, "axes", &cnt);
    if (cnt > QF_MAX_DIMS) {
        free(p);
        return qf_error(QF_ERR_INVALID, "axes has %d values", cnt);
    }
    for (int i = 0; i < cnt; i++) p->axes[i] = axes[i];
    p->n_axes = cnt;
    return qfi_node_set_params(n, p, QF_OK);
}

qf_status qfi_reduce_mean_axes(const qf_graph *g, const qf_node *n, const void *axes_data, bool reduced[QF_MAX_DIMS],
                               bool *noop)
{
    const qfi_reduce_params *p = n->params;
    QF_ASSERT(p);
    const qf_value *x = qfi_in(g, n, 0), *av = qfi_in(g, n, 1);
    int r = x->ndim;
    int64_t axes[QF_MAX_DIMS];
    int cnt = p->n_axes;
    memcpy(axes, p->axes, sizeof axes);
    if (av) {
        if (axes_data) {
            /* at run time the engine hands us the data, constant or not */
            int64_t m = qf_value_numel(av);
            if (m > QF_MAX_DIMS || (av->dtype != QF_I64 && av->dtype != QF_I32))
                return qf_error(QF_ERR_INVALID, "axes %s must be int64 with at most %d values", av->name, QF_MAX_DIMS);
            for (int64_t i = 0; i < m; i++)
                axes[i] = av->dtype == QF_I64 ? ((const int64_t *)axes_data)[i] : ((const int32_t *)axes_data)[i];
            cnt = (int)m;
        } else {
            qf_status st = qfi_value_ints(av, axes, QF_MAX_DIMS, &cnt);
            if (st != QF_OK) return qf_error_prefix(st, "axes");
        }
    }
    *noop = cnt == 0 && p->noop_with_empty_axes;
    for (int d = 0; d < QF_MAX_DIMS; d++) reduced[d] = cnt == 0 && !*noop && d < r;
    for (int i = 0; i < cnt; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + r : axes[i];
        if (a < 0 || a >= r)
            return qf_error(QF_ERR_INVALID, "axis %lld is out of range for input %s of %d dims", (long long)axes[i],
                            x->name, r);
        if (reduced[a]) return qf_error(QF_ERR_INVALID, "axis %lld is repeated", (long long)axes[i]);
        reduced[a] = true;
    }
    return QF_OK;
}

static qf_status reduce_mean_infer(qf_graph *g, qf_node *n)
{
    const qfi_reduce_params *p = n->params;
    const qf_value *x = qfi_in(g, n, 0);
    QF_CHECK(qfi_require_f32(g, n, x, "input"));
    bool reduced[QF_MAX_DIMS], noop;
    QF_CHECK(qfi_reduce_mean_axes(g, n, NULL, reduced, &noop));
    int64_t dims[QF_MAX_DIMS];
    int nd = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (!reduced[d]) dims[nd++] = x->dims[d];
        else if (p->keepdims) dims[nd++] = 1;
    }
    qfi_value_set_shape(qfi_out(g, n, 0), QF_F32, nd, dims);
    return QF_OK;
}

const qfi_op_desc qfi_op_reduce_mean = {.parse = reduce_mean_parse, .infer = reduce_mean_infer};
