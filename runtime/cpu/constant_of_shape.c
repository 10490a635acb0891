/* CPU kernel of ConstantOfShape (lib/ops/constant_of_shape.c): the value's
 * bytes repeated over the output (float zeros without the attribute). */
#include "kernels.h"

static qf_status constant_of_shape_run(const qfi_kernel_args *a)
{
    const qf_value *y = qfi_out(a->g, a->n, 0);
    const qf_attr *at = qfi_attr_find(a->n, "value");
    const size_t es = qf_dtype_info(y->dtype)->size;
    const int64_t cnt = qf_value_numel(y);
    char *o = a->out[0];
    if (!at) {
        memset(o, 0, (size_t)cnt * es);
        return QF_OK;
    }
    for (int64_t i = 0; i < cnt; i++) memcpy(o + (size_t)i * es, at->t->data, es);
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_constant_of_shape = {.run = constant_of_shape_run};
