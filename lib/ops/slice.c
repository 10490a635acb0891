/* Slice: starts/ends/axes/steps (attributes before opset 10, constant inputs
 * since), with the spec's clamping and negative steps. infer() resolves them to
 * a first index and a step per dim for the CPU kernel, runtime/cpu/slice.c. */
#include "ops/ops.h"
#include "ops/tensor_ops.h"

static qf_status copy_attr(qf_graph *g, qf_node *n, const char *name, int64_t *dst, int *cnt, bool required)
{
    const int64_t *v = qfi_attr_ints(n, name, cnt);
    if (!v) {
        *cnt = -1;
        return required ? qf_error(QF_ERR_INVALID, "no %s attribute", name) : QF_OK;
    }
    if (*cnt > QF_MAX_DIMS) return qf_error(QF_ERR_UNSUPPORTED, "%d %s (at most %d)", *cnt, name, QF_MAX_DIMS);
    memcpy(dst, v, (size_t)*cnt * sizeof *v);
    return QF_OK;
}

static qf_status slice_parse(qf_graph *g, qf_node *n)
{
    bool legacy = g->opset < 10; /* starts/ends/axes were attributes */
    if ((legacy ? n->n_in != 1 : n->n_in < 3 || n->n_in > 5) || n->n_out != 1)
        return qf_error(QF_ERR_INVALID, "%d inputs and %d outputs at opset %lld", n->n_in, n->n_out,
                        (long long)g->opset);
    qfi_slice_params *p = qfi_calloc(1, sizeof *p);
    if (!p) return QF_ERR_NOMEM;
    p->n_attr = -1;
    p->n_attr_axes = -1;
    if (legacy) {
        int ne;
        qf_status st = copy_attr(g, n, "starts", p->attr_starts, &p->n_attr, true);
        if (st == QF_OK) st = copy_attr(g, n, "ends", p->attr_ends, &ne, true);
        if (st == QF_OK) st = copy_attr(g, n, "axes", p->attr_axes, &p->n_attr_axes, false);
        if (st == QF_OK && (ne != p->n_attr || (p->n_attr_axes >= 0 && p->n_attr_axes != p->n_attr)))
            st = qf_error(QF_ERR_INVALID, "starts, ends and axes differ in length");
        if (st != QF_OK) {
            free(p);
            return st;
        }
    }
    return qfi_node_set_params(n, p, QF_OK);
}

static qf_status slice_infer(qf_graph *g, qf_node *n)
{
    qfi_slice_params *p = n->params;
    const qf_value *x = qfi_in(g, n, 0);
    if (!x) return qf_error(QF_ERR_INVALID, "missing input");
    int64_t starts[QF_MAX_DIMS], ends[QF_MAX_DIMS], axes[QF_MAX_DIMS], steps[QF_MAX_DIMS];
    int ns, ne, na = -1, nst = -1;
    if (p->n_attr >= 0) {
        ns = ne = p->n_attr;
        memcpy(starts, p->attr_starts, sizeof starts);
        memcpy(ends, p->attr_ends, sizeof ends);
        if (p->n_attr_axes >= 0) {
            na = p->n_attr_axes;
            memcpy(axes, p->attr_axes, sizeof axes);
        }
    } else {
        QF_CHECK(qfi_const_ints(g, n, 1, starts, QF_MAX_DIMS, &ns));
        QF_CHECK(qfi_const_ints(g, n, 2, ends, QF_MAX_DIMS, &ne));
        if (qfi_in(g, n, 3)) QF_CHECK(qfi_const_ints(g, n, 3, axes, QF_MAX_DIMS, &na));
        if (qfi_in(g, n, 4)) QF_CHECK(qfi_const_ints(g, n, 4, steps, QF_MAX_DIMS, &nst));
    }
    if (na < 0) {
        na = ns;
        for (int i = 0; i < na; i++) axes[i] = i;
    }
    if (nst < 0) {
        nst = ns;
        for (int i = 0; i < nst; i++) steps[i] = 1;
    }
    if (ne != ns || na != ns || nst != ns)
        return qf_error(QF_ERR_INVALID, "starts, ends, axes, steps have %d, %d, %d, %d entries", ns, ne, na, nst);
    int64_t dims[QF_MAX_DIMS];
    bool seen[QF_MAX_DIMS] = {false};
    for (int d = 0; d < x->ndim; d++) {
        p->start[d] = 0;
        p->step[d] = 1;
        dims[d] = x->dims[d];
    }
    for (int i = 0; i < ns; i++) {
        int d;
        QF_CHECK(qfi_axis_norm(g, n, axes[i], x->ndim, &d));
        if (seen[d]) return qf_error(QF_ERR_INVALID, "axis %d repeated", d);
        seen[d] = true;
        int64_t dim = x->dims[d], step = steps[i], s = starts[i], e = ends[i];
        if (step == 0) return qf_error(QF_ERR_INVALID, "step 0");
        if (s < 0) s += dim;
        if (e < 0) e += dim;
        int64_t cnt;
        if (step > 0) {
            s = s < 0 ? 0 : s > dim ? dim : s;
            e = e < 0 ? 0 : e > dim ? dim : e;
            cnt = e > s ? (e - s - 1) / step + 1 : 0;
        } else {
            /* walking down: start in [0, dim-1], end in [-1, dim-1] (-1: through index 0) */
            s = s < 0 ? 0 : s > dim - 1 ? dim - 1 : s;
            e = e < -1 ? -1 : e > dim - 1 ? dim - 1 : e;
            int64_t astep = step == INT64_MIN ? INT64_MAX : -step;
            cnt = s > e ? (s - e - 1) / astep + 1 : 0;
        }
        if (dim == 0) cnt = 0;
        p->start[d] = cnt ? s : 0;
        p->step[d] = cnt > 1 ? step : 1; /* a huge step taken once must not overflow the kernel's strides */
        dims[d] = cnt;
    }
    qfi_value_set_shape(qfi_out(g, n, 0), x->dtype, x->ndim, dims);
    return QF_OK;
}

const qfi_op_desc qfi_op_slice = {.parse = slice_parse, .infer = slice_infer, .int8 = QFI_INT8_PASS};
