/* Reshape, Flatten, Squeeze and Unsqueeze: ops that change only the shape (the
 * CPU kernel is a copy, runtime/cpu/copy.c). Also the axis and constant-input
 * helpers the other tensor-manipulation ops share (declared in ops/ops.h). */
#include "ops/ops.h"

qf_status qfi_axis_norm(const qf_graph *g, const qf_node *n, int64_t axis, int rank, int *out)
{
    if (axis < -(int64_t)rank || axis >= rank)
        return qf_error(QF_ERR_INVALID, "axis %lld out of range for rank %d", (long long)axis, rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return QF_OK;
}

qf_status qfi_const_ints(const qf_graph *g, const qf_node *n, int k, int64_t *out, int max, int *count)
{
    const qf_value *v = qfi_in(g, n, k);
    *count = 0;
    if (!v || qf_value_numel(v) == 0) return QF_OK; /* an empty tensor stands for "absent" */
    if (!(v->flags & QF_VALUE_CONST))
        return qf_error(QF_ERR_UNSUPPORTED, "input %s is not constant (dynamic shape input)", v->name);
    return qfi_value_ints(v, out, max, count);
}

/* ---- Reshape --------------------------------------------------------------- */
typedef struct reshape_params {
    int allowzero; /* opset 14: a 0 in `shape` means a zero dim, not "copy the input's" */
} reshape_params;

static qf_status reshape_parse(qf_graph *g, qf_node *n)
{
    if (n->n_in != 2 || n->n_out != 1)
        return qf_error(QF_ERR_INVALID, "needs 2 inputs and 1 output, has %d and %d", n->n_in, n->n_out);
    reshape_params *p = qfi_calloc(1, sizeof *p);
    if (!p) return QF_ERR_NOMEM;
    p->allowzero = qfi_attr_int(n, "allowzero", 0) != 0;
    return qfi_node_set_params(n, p, QF_OK);
}

static qf_status reshape_infer(qf_graph *g, qf_node *n)
{
    const reshape_params *p = n->params;
    const qf_value *x = qfi_in(g, n, 0);
    if (!x || !qfi_in(g, n, 1)) return qf_error(QF_ERR_INVALID, "missing input");
    int64_t shape[QF_MAX_DIMS];
    int cnt;
    QF_CHECK(qfi_const_ints(g, n, 1, shape, QF_MAX_DIMS, &cnt));
    int64_t dims[QF_MAX_DIMS];
    int infer_at = -1;
    int64_t known = 1;
    for (int i = 0; i < cnt; i++) {
        int64_t d = shape[i];
        if (d == 0 && !p->allowzero) {
            if (i >= x->ndim) return qf_error(QF_ERR_INVALID, "shape[%d] = 0 but the input has rank %d", i, x->ndim);
            d = x->dims[i];
        }
        if (d == -1) {
            if (infer_at >= 0) return qf_error(QF_ERR_INVALID, "more than one -1 in shape");
            infer_at = i;
            continue;
        }
        if (d < 0) return qf_error(QF_ERR_INVALID, "shape[%d] = %lld", i, (long long)d);
        dims[i] = d;
        if (__builtin_mul_overflow(known, d, &known)) return qf_error(QF_ERR_INVALID, "shape too large");
    }
    int64_t total = qf_value_numel(x);
    if (infer_at >= 0) {
        if (known == 0 || total % known != 0)
            return qf_error(QF_ERR_INVALID, "cannot infer -1 reshaping %lld elements", (long long)total);
        dims[infer_at] = total / known;
    } else if (known != total) {
        return qf_error(QF_ERR_INVALID, "%lld elements cannot take a shape of %lld", (long long)total,
                        (long long)known);
    }
    qfi_value_set_shape(qfi_out(g, n, 0), x->dtype, cnt, dims);
    return QF_OK;
}

/* ---- Flatten ------------------------------------------------------------------ */
typedef struct flatten_params {
    int64_t axis; /* as written; normalized against the rank at inference */
} flatten_params;

static qf_status flatten_parse(qf_graph *g, qf_node *n)
{
    if (n->n_in != 1 || n->n_out != 1) return qf_error(QF_ERR_INVALID, "needs 1 input and 1 output");
    flatten_params *p = qfi_calloc(1, sizeof *p);
    if (!p) return QF_ERR_NOMEM;
    p->axis = qfi_attr_int(n, "axis", 1);
    return qfi_node_set_params(n, p, QF_OK);
}

static qf_status flatten_infer(qf_graph *g, qf_node *n)
{
    const flatten_params *p = n->params;
    const qf_value *x = qfi_in(g, n, 0);
    if (!x) return qf_error(QF_ERR_INVALID, "missing input");
    /* axis is in [-rank, rank]; rank itself gives (numel, 1) */
    int64_t axis = p->axis < 0 ? p->axis + x->ndim : p->axis;
    if (axis < 0 || axis > x->ndim)
        return qf_error(QF_ERR_INVALID, "axis %lld out of range for rank %d", (long long)p->axis, x->ndim);
    int64_t dims[2] = {qfi_numel((int)axis, x->dims), qfi_numel(x->ndim - (int)axis, x->dims + axis)};
    qfi_value_set_shape(qfi_out(g, n, 0), x->dtype, 2, dims);
    return QF_OK;
}

/* ---- Squeeze / Unsqueeze -------------------------------------------------------- */
typedef struct squeeze_params {
    int n_axes;            /* from the attribute (opset < 13); -1 when absent */
    int64_t axes[QF_MAX_DIMS];
} squeeze_params;

static qf_status squeeze_parse(qf_graph *g, qf_node *n)
{
    if (n->n_in < 1 || n->n_in > 2 || n->n_out != 1)
        return qf_error(QF_ERR_INVALID, "needs 1 or 2 inputs and 1 output");
    squeeze_params *p = qfi_calloc(1, sizeof *p);
    if (!p) return QF_ERR_NOMEM;
    int cnt;
    const int64_t *axes = qfi_attr_ints(n, "axes", &cnt);
    p->n_axes = -1;
    if (axes) {
        if (cnt > QF_MAX_DIMS) {
            free(p);
            return qf_error(QF_ERR_UNSUPPORTED, "%d axes (at most %d)", cnt, QF_MAX_DIMS);
        }
        p->n_axes = cnt;
        memcpy(p->axes, axes, (size_t)cnt * sizeof *axes);
    }
    return qfi_node_set_params(n, p, QF_OK);
}

static qf_status squeeze_infer(qf_graph *g, qf_node *n)
{
    const squeeze_params *p = n->params;
    const qf_value *x = qfi_in(g, n, 0);
    if (!x) return qf_error(QF_ERR_INVALID, "missing input");
    int64_t axes[QF_MAX_DIMS];
    int cnt = 0;
    bool have_axes = false;
    if (qfi_in(g, n, 1)) { /* opset 13: axes became an input; an empty one counts as absent */
        QF_CHECK(qfi_const_ints(g, n, 1, axes, QF_MAX_DIMS, &cnt));
        have_axes = cnt > 0;
    } else if (p->n_axes >= 0) {
        cnt = p->n_axes;
        memcpy(axes, p->axes, (size_t)cnt * sizeof *axes);
        have_axes = true;
    }
    bool mark[QF_MAX_DIMS + QF_MAX_DIMS] = {false};
    int64_t dims[QF_MAX_DIMS];
    int nd = 0;
    if (n->op == QF_OP_SQUEEZE) {
        for (int i = 0; i < cnt; i++) {
            int a;
            QF_CHECK(qfi_axis_norm(g, n, axes[i], x->ndim, &a));
            if (x->dims[a] != 1)
                return qf_error(QF_ERR_INVALID, "dim %d of %s is %lld, not 1", a, x->name, (long long)x->dims[a]);
            mark[a] = true;
        }
        for (int i = 0; i < x->ndim; i++) {
            bool drop = have_axes ? mark[i] : x->dims[i] == 1;
            if (!drop) dims[nd++] = x->dims[i];
        }
    } else {
        if (!have_axes || cnt == 0) return qf_error(QF_ERR_INVALID, "no axes");
        int rank = x->ndim + cnt;
        if (rank > QF_MAX_DIMS) return qf_error(QF_ERR_UNSUPPORTED, "output rank %d (at most %d)", rank, QF_MAX_DIMS);
        for (int i = 0; i < cnt; i++) {
            int a;
            QF_CHECK(qfi_axis_norm(g, n, axes[i], rank, &a));
            if (mark[a]) return qf_error(QF_ERR_INVALID, "axis %d repeated", a);
            mark[a] = true;
        }
        for (int i = 0, k = 0; i < rank; i++) dims[nd++] = mark[i] ? 1 : x->dims[k++];
    }
    qfi_value_set_shape(qfi_out(g, n, 0), x->dtype, nd, dims);
    return QF_OK;
}

const qfi_op_desc qfi_op_reshape = {.parse = reshape_parse, .infer = reshape_infer, .int8 = QFI_INT8_PASS};
const qfi_op_desc qfi_op_flatten = {.parse = flatten_parse, .infer = flatten_infer, .int8 = QFI_INT8_PASS};
const qfi_op_desc qfi_op_squeeze = {.parse = squeeze_parse, .infer = squeeze_infer, .int8 = QFI_INT8_PASS};
const qfi_op_desc qfi_op_unsqueeze = {.parse = squeeze_parse, .infer = squeeze_infer, .int8 = QFI_INT8_PASS};
