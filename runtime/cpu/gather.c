/* CPU kernel of Gather: copies, for every index of the dims before the axis,
 * the inner block each index selects. Indices are checked before any write. */
#include "kernels.h"
#include "ops/tensor_ops.h"

static int64_t index_at(const void *idx, qf_dtype dt, int64_t j)
{
    return dt == QF_I64 ? ((const int64_t *)idx)[j] : ((const int32_t *)idx)[j];
}

static qf_status gather_run(const qfi_kernel_args *a)
{
    const qf_node *n = a->n;
    const qfi_axis_params *p = n->params;
    const qf_value *x = qfi_in(a->g, n, 0), *iv = qfi_in(a->g, n, 1);
    size_t es = qf_dtype_info(x->dtype)->size;
    int64_t dim = x->dims[p->norm], nidx = qf_value_numel(iv);
    int64_t outer = qfi_numel(p->norm, x->dims);
    size_t inner = (size_t)qfi_numel(x->ndim - p->norm - 1, x->dims + p->norm + 1) * es;
    for (int64_t j = 0; j < nidx; j++) {
        int64_t i = index_at(a->in[1], iv->dtype, j);
        if (i < -dim || i >= dim)
            return qf_error(QF_ERR_INVALID, "index %lld out of range for dim %lld", (long long)i, (long long)dim);
    }
    if (inner == 0) return QF_OK;
    /* x is (outer, dim, inner), y is (outer, nidx, inner) */
    const char *src = a->in[0];
    char *dst = a->out[0];
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t j = 0; j < nidx; j++) {
            int64_t i = index_at(a->in[1], iv->dtype, j);
            if (i < 0) i += dim;
            memcpy(dst + (size_t)(o * nidx + j) * inner, src + (size_t)(o * dim + i) * inner, inner);
        }
    }
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_gather = {.run = gather_run};
