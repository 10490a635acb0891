/* GlobalAveragePool and GlobalMaxPool on the CPU: one mean or max per
 * (image, channel) plane. */
#include "kernels.h"
#include "ops/nn.h"

static qf_status global_pool_run(const qfi_kernel_args *a)
{
    const qf_value *xv = qfi_in(a->g, a->n, 0);
    QF_CHECK(qfi_require_f32(a->g, a->n, xv, "input"));
    const int64_t planes = xv->dims[0] * xv->dims[1];
    const int64_t S = planes ? qf_value_numel(xv) / planes : 0;
    const float *x = a->in[0]; /* (N*C, S) */
    float *y = a->out[0];      /* (N*C) */
    const bool is_max = a->n->op == QF_OP_GLOBAL_MAX_POOL;
    for (int64_t p = 0; p < planes; p++) {
        const float *xp = x + p * S;
        if (is_max) {
            float m = S ? xp[0] : 0.0f;
            for (int64_t s = 1; s < S; s++)
                if (xp[s] > m) m = xp[s];
            y[p] = m;
        } else {
            double sum = 0.0;
            for (int64_t s = 0; s < S; s++) sum += xp[s];
            y[p] = S ? (float)(sum / (double)S) : 0.0f;
        }
    }
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_global_pool = {.run = global_pool_run};
