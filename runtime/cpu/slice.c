/* CPU kernel of Slice: a strided copy from the first selected element, each
 * dim stepping by its (possibly negative) step. Any dtype. */
#include "kernels.h"
#include "ops/tensor_ops.h"

static qf_status slice_run(const qfi_kernel_args *a)
{
    const qf_value *x = qfi_in(a->g, a->n, 0), *y = qfi_out(a->g, a->n, 0);
    const qfi_slice_params *p = a->n->params;
    if (qf_value_numel(y) == 0) return QF_OK;
    size_t es = qf_dtype_info(x->dtype)->size;
    int64_t strides[QF_MAX_DIMS], s = 1, first = 0;
    for (int d = x->ndim - 1; d >= 0; d--) {
        first += p->start[d] * s;
        strides[d] = p->step[d] * s;
        s *= x->dims[d];
    }
    qfi_cpu_strided_copy(a->out[0], (const char *)a->in[0] + first * (int64_t)es, y->ndim, y->dims, strides, es);
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_slice = {.run = slice_run};
