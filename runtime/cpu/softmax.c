/* Softmax on the CPU over x viewed as (outer, len, inner), normalized along
 * len; the row max is subtracted first so exp never overflows. The sum is in
 * double, in the CUDA engine's order (runtime/cuda/softmax.cu), so both give
 * the same bits: along the last axis with len >= 32 as one warp adds it (32
 * lanes, lane j taking elements j, j + 32, ..., then halves added 16, 8, 4,
 * 2, 1 apart), otherwise element by element. Rows are spread over threads. */
#include "kernels.h"
#include "ops/nn.h"
#include <math.h>
#include "float_math.h" /* e^x as the CUDA engine computes it */

enum { WARP = 32 };

typedef struct softmax_job {
    const float *x;
    float *y;
    int64_t outer, len, inner;
} softmax_job;

/* One row of the last axis, as softmax_rows_kernel: the max, e^(x - max)
 * into y, the warp's sum, then y times 1 / sum. Compiled per ISA: the loops
 * vectorize (qfi_exp has no branch). */
QFI_SIMD_CLONES static void softmax_row_warp(const float *x, float *y, int64_t len)
{
    float lane_max[WARP];
    for (int j = 0; j < WARP; j++) lane_max[j] = -INFINITY;
    int64_t l = 0;
    for (; l + WARP <= len; l += WARP)
        for (int j = 0; j < WARP; j++) lane_max[j] = x[l + j] > lane_max[j] ? x[l + j] : lane_max[j];
    for (int j = 0; l + j < len; j++) lane_max[j] = x[l + j] > lane_max[j] ? x[l + j] : lane_max[j];
    float mx = -INFINITY; /* the order of a max changes nothing (NaN is skipped, as fmaxf does) */
    for (int j = 0; j < WARP; j++) mx = lane_max[j] > mx ? lane_max[j] : mx;
    for (int64_t i = 0; i < len; i++) y[i] = qfi_exp(x[i] - mx);
    double sum[WARP] = {0};
    for (l = 0; l + WARP <= len; l += WARP)
        for (int j = 0; j < WARP; j++) sum[j] += y[l + j];
    for (int j = 0; l + j < len; j++) sum[j] += y[l + j];
    for (int o = WARP / 2; o > 0; o /= 2) /* the shuffle tree: lane j adds lane j ^ o */
        for (int j = 0; j < o; j++) sum[j] += sum[j + o];
    const float inv = (float)(1.0 / sum[0]);
    for (int64_t i = 0; i < len; i++) y[i] *= inv;
}

/* One row of `len` elements `inner` apart, element by element (softmax_kernel). */
static void softmax_row_serial(const float *x, float *y, int64_t len, int64_t inner)
{
    float mx = -INFINITY;
    for (int64_t l = 0; l < len; l++)
        if (x[l * inner] > mx) mx = x[l * inner];
    double sum = 0.0;
    for (int64_t l = 0; l < len; l++) {
        const float e = qfi_exp(x[l * inner] - mx);
        y[l * inner] = e;
        sum += e;
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t l = 0; l < len; l++) y[l * inner] *= inv;
}

/* Row r of the (outer, inner) rows. */
static void softmax_row(void *arg, int64_t r)
{
    const softmax_job *j = arg;
    const int64_t o = r / j->inner, i = r % j->inner, base = o * j->len * j->inner + i;
    if (j->inner == 1 && j->len >= WARP)
        softmax_row_warp(j->x + base, j->y + base, j->len);
    else
        softmax_row_serial(j->x + base, j->y + base, j->len, j->inner);
}

/* Elements below which a Softmax stays on the calling thread: waking the
 * pool's threads would cost more than they save. */
#define SOFTMAX_SPREAD (1 << 15)

static qf_status softmax_run(const qfi_kernel_args *a)
{
    softmax_job j = {.x = a->in[0], .y = a->out[0]};
    QF_CHECK(qfi_softmax_geometry(a->g, a->n, &j.outer, &j.len, &j.inner));
    const int64_t rows = j.outer * j.inner;
    if (rows == 0 || j.len == 0) return QF_OK;
    qfi_parallel_for(rows * j.len < SOFTMAX_SPREAD ? 1 : a->threads, rows, softmax_row, &j);
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_softmax = {.run = softmax_run};
