/* Transpose: permutes the dims (perm attribute, default reversed). The CPU
 * kernel is runtime/cpu/transpose.c. */
#include "ops/ops.h"
#include "ops/tensor_ops.h"

static qf_status transpose_parse(qf_graph *g, qf_node *n)
{
    if (n->n_in != 1 || n->n_out != 1) return qf_error(QF_ERR_INVALID, "needs 1 input and 1 output");
    int cnt;
    const int64_t *perm = qfi_attr_ints(n, "perm", &cnt);
    if (cnt > QF_MAX_DIMS) return qf_error(QF_ERR_UNSUPPORTED, "%d dims (at most %d)", cnt, QF_MAX_DIMS);
    qfi_transpose_params *p = qfi_calloc(1, sizeof *p);
    if (!p) return QF_ERR_NOMEM;
    p->n_perm = perm ? cnt : 0;
    for (int i = 0; i < p->n_perm; i++) {
        if (perm[i] < 0 || perm[i] >= cnt) {
            free(p);
            return qf_error(QF_ERR_INVALID, "perm[%d] = %lld", i, (long long)perm[i]);
        }
        p->perm[i] = (int)perm[i];
    }
    return qfi_node_set_params(n, p, QF_OK);
}

static qf_status transpose_infer(qf_graph *g, qf_node *n)
{
    qfi_transpose_params *p = n->params;
    const qf_value *x = qfi_in(g, n, 0);
    if (!x) return qf_error(QF_ERR_INVALID, "missing input");
    int perm[QF_MAX_DIMS];
    if (p->n_perm == 0) {
        for (int i = 0; i < x->ndim; i++) perm[i] = x->ndim - 1 - i;
    } else {
        if (p->n_perm != x->ndim)
            return qf_error(QF_ERR_INVALID, "perm has %d entries for rank %d", p->n_perm, x->ndim);
        bool seen[QF_MAX_DIMS] = {false};
        for (int i = 0; i < x->ndim; i++) {
            if (seen[p->perm[i]]) return qf_error(QF_ERR_INVALID, "perm repeats %d", p->perm[i]);
            seen[p->perm[i]] = true;
            perm[i] = p->perm[i];
        }
    }
    int64_t dims[QF_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) dims[i] = x->dims[perm[i]];
    qfi_value_set_shape(qfi_out(g, n, 0), x->dtype, x->ndim, dims);
    return QF_OK;
}

const qfi_op_desc qfi_op_transpose = {.parse = transpose_parse, .infer = transpose_infer, .int8 = QFI_INT8_PASS};
