/* CPU kernel of LayerNormalization: rows spread over threads; mean and
 * variance summed in double over the row (two passes), so the CUDA kernel,
 * which sums in double too, differs only in the order of exact-ish sums. */
#include <math.h>
#include "kernels.h"
#include "ops/nn.h"

typedef struct ln_job {
    const float *x, *scale, *bias; /* bias may be NULL */
    float *y;
    int64_t len;
    bool scalar_scale, scalar_bias;
    float eps;
} ln_job;

static void ln_row(void *arg, int64_t r)
{
    const ln_job *j = arg;
    const float *x = j->x + r * j->len;
    float *y = j->y + r * j->len;
    double sum = 0.0;
    for (int64_t i = 0; i < j->len; i++) sum += x[i];
    const float mean = (float)(sum / (double)j->len);
    double ss = 0.0;
    for (int64_t i = 0; i < j->len; i++) {
        double d = (double)x[i] - mean;
        ss += d * d;
    }
    const float inv = (float)(1.0 / sqrt(ss / (double)j->len + j->eps));
    for (int64_t i = 0; i < j->len; i++) {
        float v = (x[i] - mean) * inv * j->scale[j->scalar_scale ? 0 : i];
        y[i] = j->bias ? v + j->bias[j->scalar_bias ? 0 : i] : v;
    }
}

static qf_status layer_norm_run(const qfi_kernel_args *a)
{
    int64_t outer, len;
    QF_CHECK(qfi_layer_norm_geometry(a->g, a->n, &outer, &len));
    const qfi_layer_norm_params *p = a->n->params;
    const qf_value *b = qfi_in(a->g, a->n, 2);
    ln_job j = {.x = a->in[0], .scale = a->in[1], .bias = b ? a->in[2] : NULL, .y = a->out[0], .len = len,
                .scalar_scale = qf_value_numel(qfi_in(a->g, a->n, 1)) == 1,
                .scalar_bias = b && qf_value_numel(b) == 1, .eps = p->epsilon};
    if (outer == 0 || len == 0) return QF_OK;
    qfi_parallel_for(a->threads, outer, ln_row, &j);
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_layer_norm = {.run = layer_norm_run};
