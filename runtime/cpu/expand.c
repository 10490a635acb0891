/* CPU kernel of Expand: the strided copy Transpose uses, with stride 0 along
 * the broadcast dims. */
#include "kernels.h"

static qf_status expand_run(const qfi_kernel_args *a)
{
    const qf_value *x = qfi_in(a->g, a->n, 0), *y = qfi_out(a->g, a->n, 0);
    int64_t strides[QF_MAX_DIMS];
    qfi_broadcast_strides(x->ndim, x->dims, y->ndim, y->dims, strides);
    qfi_cpu_strided_copy(a->out[0], a->in[0], y->ndim, y->dims, strides, qf_dtype_info(y->dtype)->size);
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_expand = {.run = expand_run};
