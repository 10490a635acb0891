/* Concat: joins any number of tensors of one dtype along an axis. The CPU
 * kernel is runtime/cpu/concat.c. */
#include "ops/ops.h"
#include "ops/tensor_ops.h"

static qf_status concat_parse(qf_graph *g, qf_node *n)
{
    if (n->n_in < 1 || n->n_out != 1) return qf_error(QF_ERR_INVALID, "needs inputs and 1 output");
    const qf_attr *ax = qfi_attr_find(n, "axis");
    if (!ax || ax->type != QF_ATTR_INT) return qf_error(QF_ERR_INVALID, "no integer axis attribute");
    qfi_axis_params *p = qfi_calloc(1, sizeof *p);
    if (!p) return QF_ERR_NOMEM;
    p->axis = ax->i;
    return qfi_node_set_params(n, p, QF_OK);
}

static qf_status concat_infer(qf_graph *g, qf_node *n)
{
    qfi_axis_params *p = n->params;
    const qf_value *x0 = qfi_in(g, n, 0);
    if (!x0) return qf_error(QF_ERR_INVALID, "missing input 0");
    QF_CHECK(qfi_axis_norm(g, n, p->axis, x0->ndim, &p->norm));
    int64_t dims[QF_MAX_DIMS];
    memcpy(dims, x0->dims, sizeof dims);
    dims[p->norm] = 0;
    for (int k = 0; k < n->n_in; k++) {
        const qf_value *x = qfi_in(g, n, k);
        if (!x) return qf_error(QF_ERR_INVALID, "missing input %d", k);
        if (x->dtype != x0->dtype || x->ndim != x0->ndim)
            return qf_error(QF_ERR_INVALID, "input %s differs from %s in dtype or rank", x->name, x0->name);
        for (int d = 0; d < x->ndim; d++)
            if (d != p->norm && x->dims[d] != x0->dims[d])
                return qf_error(QF_ERR_INVALID, "dim %d of %s is %lld, of %s %lld", d, x->name, (long long)x->dims[d],
                                x0->name, (long long)x0->dims[d]);
        dims[p->norm] += x->dims[p->norm];
    }
    qfi_value_set_shape(qfi_out(g, n, 0), x0->dtype, x0->ndim, dims);
    return QF_OK;
}

const qfi_op_desc qfi_op_concat = {.parse = concat_parse, .infer = concat_infer, .int8 = QFI_INT8_PASS};
