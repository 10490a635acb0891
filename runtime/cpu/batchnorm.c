/* BatchNormalization (inference) on the CPU: y = x * a + b with
 * a = scale / sqrt(var + eps) and b = B - mean * a, computed in double per
 * channel (or per activation when spatial=0). */
#include "kernels.h"
#include "ops/nn.h"
#include <math.h>

static qf_status batchnorm_run(const qfi_kernel_args *a)
{
    const qfi_batchnorm_params *p = a->n->params;
    const qf_value *xv = qfi_in(a->g, a->n, 0);
    QF_CHECK(qfi_require_f32(a->g, a->n, xv, "input"));
    const float *x = a->in[0], *scale = a->in[1], *bias = a->in[2], *mean = a->in[3], *var = a->in[4];
    float *y = a->out[0];
    const int64_t N = xv->dims[0], C = xv->dims[1];
    const int64_t S = N * C != 0 ? qf_value_numel(xv) / (N * C) : 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++) {
            const float *xp = x + (n * C + c) * S; /* (S) */
            float *yp = y + (n * C + c) * S;
            if (p->spatial) {
                double k = scale[c] / sqrt((double)var[c] + p->epsilon);
                float fa = (float)k, fb = (float)(bias[c] - mean[c] * k);
                for (int64_t s = 0; s < S; s++) yp[s] = xp[s] * fa + fb;
            } else {
                /* per-activation parameters are (C, spatial...) */
                for (int64_t s = 0; s < S; s++) {
                    int64_t i = c * S + s;
                    double k = scale[i] / sqrt((double)var[i] + p->epsilon);
                    yp[s] = (float)((xp[s] - mean[i]) * k + bias[i]);
                }
            }
        }
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_batchnorm = {.run = batchnorm_run};
