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

/* A 2-D MaxPool plane in two passes: each input row's maxima over the
 * window's columns (rows[H][Wo]), then each output the maximum of its
 * window rows' maxima. The comparisons keep pool_plane's outcome: a window's
 * first largest value in (kh, kw) order (NaN never wins, -FLT_MAX where no
 * tap is inside), so the same bits, in kh + kw comparisons an output where
 * pool_plane took kh * kw with a bounds test each (YOLOv8n's 5x5 SPPF pools:
 * 3.8 ms each a batch of 4). */
static void max_plane_2d(void *arg, int64_t plane)
{
    const pool_job *j = arg;
    const qfi_window *w = j->w;
    const int64_t H = w->in[1], W = w->in[2], Ho = w->out[1], Wo = w->out[2];
    const float *x = j->x + plane * H * W;
    float *y = j->y + plane * Ho * Wo;
    const int64_t cells = H * Wo;
    float *rows = malloc((size_t)(cells > 0 ? cells : 1) * sizeof *rows);
    if (!rows) { /* no memory for the rows: the window loop needs none */
        pool_plane(arg, plane);
        return;
    }
    for (int64_t ow = 0; ow < Wo; ow++) {
        /* the window's taps inside [0, W): kw in [k0, k1) */
        const int64_t first = ow * w->stride[2] - w->pad[2], d = w->dil[2];
        int64_t k0 = first >= 0 ? 0 : (-first + d - 1) / d, k1 = w->k[2];
        while (k1 > k0 && first + (k1 - 1) * d >= W) k1--;
        for (int64_t ih = 0; ih < H; ih++) {
            float m = -FLT_MAX;
            for (int64_t kw = k0; kw < k1; kw++) {
                const float v = x[ih * W + first + kw * d];
                m = v > m ? v : m;
            }
            rows[ih * Wo + ow] = m;
        }
    }
    for (int64_t oh = 0; oh < Ho; oh++) {
        const int64_t first = oh * w->stride[1] - w->pad[1], d = w->dil[1];
        float *yr = y + oh * Wo;
        for (int64_t ow = 0; ow < Wo; ow++) yr[ow] = -FLT_MAX;
        for (int64_t kh = 0; kh < w->k[1]; kh++) {
            const int64_t ih = first + kh * d;
            if (ih < 0 || ih >= H) continue;
            const float *r = rows + ih * Wo;
            for (int64_t ow = 0; ow < Wo; ow++) yr[ow] = r[ow] > yr[ow] ? r[ow] : yr[ow];
        }
    }
    free(rows);
}

static qf_status pool_run(const qfi_kernel_args *a)
{
    int64_t nc;
    qfi_window w;
    QF_CHECK(qfi_pool_geometry(a->g, a->n, &nc, &w));
    pool_job j = {.p = a->n->params, .w = &w, .x = a->in[0], .y = a->out[0]};
    const bool plane_2d = w.in[0] == 1 && w.k[0] == 1 && w.out[0] == 1;
    qfi_parallel_for(a->threads, nc, j.p->is_max && plane_2d ? max_plane_2d : pool_plane, &j);
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_pool = {.run = pool_run};
