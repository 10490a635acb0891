/* CPU kernel of Split: for every index of the dims before the axis, each
 * output takes its block of the input row. Any dtype. */
#include "kernels.h"
#include "ops/tensor_ops.h"

static qf_status split_run(const qfi_kernel_args *a)
{
    const qf_node *n = a->n;
    const qfi_split_params *p = n->params;
    const qf_value *x = qfi_in(a->g, n, 0);
    size_t es = qf_dtype_info(x->dtype)->size;
    int64_t outer = qfi_numel(p->norm, x->dims);
    /* x is (outer, dims[axis] * inner) */
    size_t inner = (size_t)qfi_numel(x->ndim - p->norm - 1, x->dims + p->norm + 1) * es;
    size_t row = (size_t)x->dims[p->norm] * inner;
    const char *src = a->in[0];
    size_t at = 0;
    for (int k = 0; k < n->n_out; k++) {
        size_t blk = (size_t)qfi_out(a->g, n, k)->dims[p->norm] * inner;
        char *dst = a->out[k];
        if (blk)
            for (int64_t o = 0; o < outer; o++) memcpy(dst + (size_t)o * blk, src + (size_t)o * row + at, blk);
        at += blk;
    }
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_split = {.run = split_run};
