/* The kernel of the ops that only relabel a shape (Reshape, Flatten, Squeeze,
 * Unsqueeze, Identity, Dropout in inference mode): a copy of input 0. */
#include "kernels.h"

static qf_status copy_run(const qfi_kernel_args *a)
{
    const qf_node *n = a->n;
    const qf_value *y = qfi_out(a->g, n, 0);
    size_t bytes = qf_value_bytes(y);
    /* the planner may alias output and input of a reshape: nothing to move then */
    if (bytes && a->out[0] != a->in[0]) memmove(a->out[0], a->in[0], bytes);
    if (n->op == QF_OP_DROPOUT && n->n_out > 1 && n->out[1] >= 0 && a->out[1]) {
        /* inference-mode Dropout keeps every element: the mask is all true */
        const qf_value *m = qfi_out(a->g, n, 1);
        int64_t cnt = qf_value_numel(m);
        if (m->dtype == QF_BOOL) {
            memset(a->out[1], 1, (size_t)cnt);
        } else {
            QF_ASSERT(m->dtype == QF_F32); /* opset < 10 masks have the input's type; infer allows only these */
            float *mf = a->out[1];
            for (int64_t i = 0; i < cnt; i++) mf[i] = 1.0f;
        }
    }
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_reshape = {.run = copy_run};
const qfi_cpu_kernel qfi_cpu_identity = {.run = copy_run};
