/* MaxPool and AveragePool: attribute parsing (window attributes, ceil_mode,
 * count_include_pad), shape inference. MaxPool's Indices output is not
 * supported. */
#include "ops/nn.h"
#include "ops/ops.h"

static qf_status pool_parse(qf_graph *g, qf_node *n)
{
    bool is_max = n->op == QF_OP_MAX_POOL;
    if (is_max && n->n_out > 1 && n->out[1] >= 0)
        return qf_error(QF_ERR_UNSUPPORTED, "the Indices output of MaxPool is not supported");
    QF_CHECK(qfi_check_arity(g, n, 1, 1));
    qfi_pool_params *p = qfi_calloc(1, sizeof *p);
    if (!p) return QF_ERR_NOMEM;
    qf_status st = qfi_window_parse(g, n, &p->win);
    p->is_max = is_max;
    p->ceil_mode = qfi_attr_int(n, "ceil_mode", 0) != 0;
    p->count_include_pad = !is_max && qfi_attr_int(n, "count_include_pad", 0) != 0;
    if (st == QF_OK && p->win.n_kernel == 0) st = qf_error(QF_ERR_INVALID, "kernel_shape is required");
    /* storage_order only changes how Indices are numbered, which is refused above */
    return qfi_node_set_params(n, p, st);
}

qf_status qfi_pool_geometry(const qf_graph *g, const qf_node *n, int64_t *nc, qfi_window *w)
{
    const qfi_pool_params *p = n->params;
    QF_ASSERT(p);
    const qf_value *x = qfi_in(g, n, 0);
    QF_ASSERT(x);
    QF_CHECK(qfi_require_f32(g, n, x, "input"));
    if (x->ndim < 3 || x->ndim > 2 + QFI_MAX_SPATIAL)
        return qf_error(QF_ERR_UNSUPPORTED, "input %s has %d dims; 3 to %d are supported", x->name, x->ndim,
                        2 + QFI_MAX_SPATIAL);
    int nsp = x->ndim - 2;
    if (p->win.n_kernel != nsp)
        return qf_error(QF_ERR_INVALID, "kernel_shape has %d values for %d spatial dims", p->win.n_kernel, nsp);
    *nc = x->dims[0] * x->dims[1];
    return qfi_window_resolve(g, n, &p->win, nsp, x->dims + 2, p->win.kernel, p->ceil_mode, w);
}

static qf_status pool_infer(qf_graph *g, qf_node *n)
{
    int64_t nc;
    qfi_window w;
    QF_CHECK(qfi_pool_geometry(g, n, &nc, &w));
    const qf_value *x = qfi_in(g, n, 0);
    int64_t dims[2 + QFI_MAX_SPATIAL] = {x->dims[0], x->dims[1]};
    for (int i = 0; i < w.nsp; i++) dims[2 + i] = w.out[QFI_MAX_SPATIAL - w.nsp + i];
    qfi_value_set_shape(qfi_out(g, n, 0), QF_F32, x->ndim, dims);
    return QF_OK;
}

/* INT8 only without the Indices output (which the parser refuses anyway). */
static bool max_pool_int8_ok(const qf_graph *g, const qf_node *n)
{
    return n->n_out == 1 || n->out[1] < 0;
}

const qfi_op_desc qfi_op_max_pool = {
    .parse = pool_parse,
    .infer = pool_infer,
    .int8 = QFI_INT8_PASS,
    .int8_ok = max_pool_int8_ok,
};
/* the mean needs its own output scale */
const qfi_op_desc qfi_op_average_pool = {.parse = pool_parse, .infer = pool_infer, .int8 = QFI_INT8_REQUANT};
