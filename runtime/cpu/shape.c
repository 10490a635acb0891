/* CPU kernel of Shape: writes the input's (concrete) dims as int64. */
#include "kernels.h"
#include "ops/tensor_ops.h"

static qf_status shape_run(const qfi_kernel_args *a)
{
    const qfi_shape_params *p = a->n->params;
    const qf_value *x = qfi_in(a->g, a->n, 0), *y = qfi_out(a->g, a->n, 0);
    int64_t *out = a->out[0];
    for (int64_t i = 0; i < y->dims[0]; i++) out[i] = x->dims[p->first + i];
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_shape = {.run = shape_run};
