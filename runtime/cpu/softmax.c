/* Softmax on the CPU over x viewed as (outer, len, inner), normalized along
 * len; the row max is subtracted first so exp never overflows. */
#include "kernels.h"
#include "ops/nn.h"
#include <math.h>
#include "float_math.h" /* e^x as the CUDA engine computes it */

static qf_status softmax_run(const qfi_kernel_args *a)
{
    int64_t outer, len, inner;
    QF_CHECK(qfi_softmax_geometry(a->g, a->n, &outer, &len, &inner));
    const float *x = a->in[0];
    float *y = a->out[0];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const float *xr = x + o * len * inner + i; /* len elements, `inner` apart */
            float *yr = y + o * len * inner + i;
            float mx = -INFINITY;
            for (int64_t l = 0; l < len; l++)
                if (xr[l * inner] > mx) mx = xr[l * inner];
            double sum = 0.0;
            for (int64_t l = 0; l < len; l++) {
                float e = qfi_exp(xr[l * inner] - mx);
                yr[l * inner] = e;
                sum += e;
            }
            float inv = (float)(1.0 / sum);
            for (int64_t l = 0; l < len; l++) yr[l * inner] *= inv;
        }
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_softmax = {.run = softmax_run};
