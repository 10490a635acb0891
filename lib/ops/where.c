/* Where: y = cond ? x : y' elementwise, numpy broadcasting of all three
 * (exporters' masks and shape arithmetic; Swin's and ViT's fold at load time).
 * The CPU kernel is runtime/cpu/where.c. */
#include "ops/nn.h"
#include "ops/ops.h"

static qf_status where_parse(qf_graph *g, qf_node *n) { return qfi_check_arity(g, n, 3, 3); }

static qf_status where_infer(qf_graph *g, qf_node *n)
{
    const qf_value *c = qfi_in(g, n, 0), *x = qfi_in(g, n, 1), *y = qfi_in(g, n, 2);
    if (!c || !x || !y) return qf_error(QF_ERR_INVALID, "missing input");
    if (c->dtype != QF_BOOL)
        return qf_error(QF_ERR_INVALID, "condition %s has dtype %s, not bool", c->name, qf_dtype_info(c->dtype)->name);
    if (x->dtype != y->dtype)
        return qf_error(QF_ERR_INVALID, "inputs %s and %s have dtypes %s and %s", x->name, y->name,
                        qf_dtype_info(x->dtype)->name, qf_dtype_info(y->dtype)->name);
    if (qf_dtype_info(x->dtype)->size == 0)
        return qf_error(QF_ERR_UNSUPPORTED, "dtype %s", qf_dtype_info(x->dtype)->name);
    if (c->ndim > QF_MAX_DIMS || x->ndim > QF_MAX_DIMS || y->ndim > QF_MAX_DIMS)
        return qf_error(QF_ERR_UNSUPPORTED, "rank above %d", QF_MAX_DIMS);
    int nd, nd2;
    int64_t dims[QF_MAX_DIMS], dims2[QF_MAX_DIMS];
    qf_status st = qfi_broadcast_shape(x->ndim, x->dims, y->ndim, y->dims, &nd, dims);
    if (st == QF_OK) st = qfi_broadcast_shape(c->ndim, c->dims, nd, dims, &nd2, dims2);
    if (st != QF_OK) return qf_error_prefix(st, "%s, %s and %s", c->name, x->name, y->name);
    qfi_value_set_shape(qfi_out(g, n, 0), x->dtype, nd2, dims2);
    return QF_OK;
}

/* input 0 (the condition) is a parameter: it stays bool at any precision */
const qfi_op_desc qfi_op_where = {.parse = where_parse, .infer = where_infer, .params = 1u << 0};
