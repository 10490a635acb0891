/* CPU kernel of Concat: for every index of the dims before the axis, the
 * inputs' blocks are copied one after another. Any dtype. */
#include "kernels.h"
#include "ops/tensor_ops.h"

static qf_status concat_run(const qfi_kernel_args *a)
{
    const qf_node *n = a->n;
    const qfi_axis_params *p = n->params;
    const qf_value *y = qfi_out(a->g, n, 0);
    size_t es = qf_dtype_info(y->dtype)->size;
    int64_t outer = qfi_numel(p->norm, y->dims);
    /* y is (outer, sum of the inputs' dims[axis] * inner) */
    size_t inner = (size_t)qfi_numel(y->ndim - p->norm - 1, y->dims + p->norm + 1) * es;
    size_t row = (size_t)y->dims[p->norm] * inner;
    char *dst = a->out[0];
    size_t at = 0; /* byte offset of the current input's block within a row */
    for (int k = 0; k < n->n_in; k++) {
        const qf_value *x = qfi_in(a->g, n, k);
        size_t blk = (size_t)x->dims[p->norm] * inner;
        const char *src = a->in[k];
        if (blk)
            for (int64_t o = 0; o < outer; o++) memcpy(dst + (size_t)o * row + at, src + (size_t)o * blk, blk);
        at += blk;
    }
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_concat = {.run = concat_run};
