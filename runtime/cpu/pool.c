/* MaxPool and AveragePool on the CPU: a direct window loop per (image,
 * channel) plane, planes spread over threads. Padding never wins a max; an
 * average divides by the in-image taps, or with count_include_pad by the taps
 * inside the padded extent (a ceil_mode window hanging past it counts less). */
#include "kernels.h"
#include "ops/nn.h"
#include <float.h>

typedef struct pool_job {
    const qfi_pool_params *p;
    const qfi_window *w;
    const float *x;
    float *y;
} pool_job;

static void pool_plane(void *arg, int64_t plane)
{
    const pool_job *j = arg;
    const qfi_window *w = j->w;
    const int64_t D = w->in[0], H = w->in[1], W = w->in[2];
    const float *x = j->x + plane * qfi_window_in_size(w); /* (D,H,W) */
    float *y = j->y + plane * qfi_window_out_size(w);      /* (Do,Ho,Wo) */
    for (int64_t od = 0; od < w->out[0]; od++)
        for (int64_t oh = 0; oh < w->out[1]; oh++)
            for (int64_t ow = 0; ow < w->out[2]; ow++) {
                float mx = -FLT_MAX;
                double sum = 0.0;
                int64_t n_in = 0, n_padded = 0;
                for (int64_t kd = 0; kd < w->k[0]; kd++) {
                    int64_t id = od * w->stride[0] - w->pad[0] + kd * w->dil[0];
                    bool pd = id < D + w->pad_end[0], vd = id >= 0 && id < D;
                    for (int64_t kh = 0; kh < w->k[1]; kh++) {
                        int64_t ih = oh * w->stride[1] - w->pad[1] + kh * w->dil[1];
                        bool ph = ih < H + w->pad_end[1], vh = ih >= 0 && ih < H;
                        for (int64_t kw = 0; kw < w->k[2]; kw++) {
                            int64_t iw = ow * w->stride[2] - w->pad[2] + kw * w->dil[2];
                            bool pw = iw < W + w->pad_end[2], vw = iw >= 0 && iw < W;
                            /* taps start at or after -pad, so only the end can overhang */
                            n_padded += pd && ph && pw;
                            if (!(vd && vh && vw)) continue;
                            float v = x[(id * H + ih) * W + iw];
                            n_in++;
                            sum += v;
                            if (v > mx) mx = v;
                        }
                    }
                }
                int64_t div = j->p->count_include_pad ? n_padded : n_in;
                *y++ = j->p->is_max ? mx : div ? (float)(sum / (double)div) : 0.0f;
            }
}

static qf_status pool_run(const qfi_kernel_args *a)
{
    int64_t nc;
    qfi_window w;
    QF_CHECK(qfi_pool_geometry(a->g, a->n, &nc, &w));
    pool_job j = {.p = a->n->params, .w = &w, .x = a->in[0], .y = a->out[0]};
    qfi_parallel_for(a->threads, nc, pool_plane, &j);
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_pool = {.run = pool_run};
