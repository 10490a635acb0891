/* CPU kernel of Constant: copies the attribute's data. */
#include "kernels.h"
#include "ops/tensor_ops.h"

static qf_status constant_run(const qfi_kernel_args *a)
{
    const qfi_constant_params *p = a->n->params;
    const qf_attr *at = &a->n->attrs[p->attr];
    size_t bytes = qf_value_bytes(qfi_out(a->g, a->n, 0));
    const void *src = NULL;
    switch (p->kind) {
    case QFI_CONST_TENSOR: src = at->t->data; break;
    case QFI_CONST_FLOAT: src = &at->f; break;
    case QFI_CONST_FLOATS: src = at->floats; break;
    case QFI_CONST_INT: src = &at->i; break;
    case QFI_CONST_INTS: src = at->ints; break;
    }
    if (bytes) memcpy(a->out[0], src, bytes);
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_constant = {.run = constant_run};
