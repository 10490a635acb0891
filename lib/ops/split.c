/* Split: cuts a tensor along an axis into parts given by `split` (attribute
 * before opset 13, constant input since), by num_outputs (opset 18), or into
 * equal parts. The CPU kernel is runtime/cpu/split.c. */
#include "ops/ops.h"
#include "ops/tensor_ops.h"

static qf_status split_parse(qf_graph *g, qf_node *n)
{
    if (n->n_in < 1 || n->n_in > 2 || n->n_out < 1)
        return qf_error(QF_ERR_INVALID, "needs 1-2 inputs and outputs, has %d and %d", n->n_in, n->n_out);
    for (int k = 0; k < n->n_out; k++)
        if (n->out[k] < 0) return qf_error(QF_ERR_UNSUPPORTED, "output %d is unnamed", k);
    int cnt;
    const int64_t *split = qfi_attr_ints(n, "split", &cnt);
    if (split && cnt != n->n_out) return qf_error(QF_ERR_INVALID, "split has %d entries for %d outputs", cnt, n->n_out);
    qfi_split_params *p = qfi_calloc(1, sizeof *p + (size_t)(split ? cnt : 0) * sizeof(int64_t));
    if (!p) return QF_ERR_NOMEM;
    p->axis = qfi_attr_int(n, "axis", 0);
    p->num_outputs = qfi_attr_int(n, "num_outputs", 0);
    p->n_attr_split = split ? cnt : -1;
    if (split) memcpy(p->attr_split, split, (size_t)cnt * sizeof *split);
    free(n->params);
    n->params = p;
    if (p->num_outputs && p->num_outputs != n->n_out)
        return qf_error(QF_ERR_INVALID, "num_outputs %lld but %d outputs", (long long)p->num_outputs, n->n_out);
    return QF_OK;
}

static qf_status split_infer(qf_graph *g, qf_node *n)
{
    qfi_split_params *p = n->params;
    const qf_value *x = qfi_in(g, n, 0);
    if (!x) return qf_error(QF_ERR_INVALID, "missing input");
    QF_CHECK(qfi_axis_norm(g, n, p->axis, x->ndim, &p->norm));
    int64_t dim = x->dims[p->norm];
    int64_t *sizes = qfi_calloc((size_t)n->n_out, sizeof *sizes);
    if (!sizes) return QF_ERR_NOMEM;
    qf_status st = QF_OK;
    int cnt = -1;
    if (qfi_in(g, n, 1)) {
        st = qfi_const_ints(g, n, 1, sizes, n->n_out, &cnt);
        if (st == QF_OK && cnt == 0) cnt = -1; /* an empty split input means "not given" */
    } else if (p->n_attr_split >= 0) {
        cnt = p->n_attr_split;
        memcpy(sizes, p->attr_split, (size_t)cnt * sizeof *sizes);
    }
    if (st == QF_OK && cnt >= 0) {
        int64_t sum = 0;
        /* each part within the dim keeps the sum far from overflow */
        for (int k = 0; k < cnt && st == QF_OK; k++) {
            if (sizes[k] < 0 || sizes[k] > dim)
                st = qf_error(QF_ERR_INVALID, "split[%d] = %lld is not within dim %lld", k, (long long)sizes[k],
                              (long long)dim);
            sum += sizes[k];
        }
        if (st == QF_OK && (cnt != n->n_out || sum != dim))
            st = qf_error(QF_ERR_INVALID,
                          "split of %d parts summing to %lld for %d outputs and "
                          "dim %lld",
                          cnt, (long long)sum, n->n_out, (long long)dim);
    } else if (st == QF_OK) {
        /* num_outputs (opset 18) lets the last part be smaller; before, parts must be equal */
        int64_t part = p->num_outputs ? (dim + n->n_out - 1) / n->n_out : dim / n->n_out;
        int64_t last = dim - part * (n->n_out - 1);
        if (last < 0 || (!p->num_outputs && last != part) || last > part)
            st = qf_error(QF_ERR_INVALID, "dim %lld does not split into %d parts", (long long)dim, n->n_out);
        for (int k = 0; k < n->n_out; k++) sizes[k] = k == n->n_out - 1 ? last : part;
    }
    for (int k = 0; st == QF_OK && k < n->n_out; k++) {
        int64_t dims[QF_MAX_DIMS];
        memcpy(dims, x->dims, sizeof dims);
        dims[p->norm] = sizes[k];
        qfi_value_set_shape(qfi_out(g, n, k), x->dtype, x->ndim, dims);
    }
    free(sizes);
    return st;
}

const qfi_op_desc qfi_op_split = {.parse = split_parse, .infer = split_infer, .int8 = QFI_INT8_PASS};
