/* GlobalAveragePool and GlobalMaxPool on the CPU: one mean or max per
 * (image, channel) plane, each plane's sum in double in position order (the
 * CUDA kernel's order too). A plane's sum is a chain of dependent adds, so
 * LANES planes are summed side by side (independent chains, each in its own
 * order: the same bits) and groups of planes spread over the threads: one
 * plane at a time on one thread, MobileNetV2's 16 x 1280 planes of 49 took
 * 1.5 ms a batch, 3 % of its INT8 time. */
#include "kernels.h"
#include "ops/nn.h"

enum { LANES = 8, PLANES_PER_ITEM = 256 };

typedef struct gpool_job {
    const float *x; /* (planes, S) */
    float *y;       /* (planes) */
    int64_t planes, S;
    bool is_max;
} gpool_job;

/* Planes [p0, p0 + LANES), all of them present. */
static void pool_lanes(const gpool_job *j, int64_t p0)
{
    const int64_t S = j->S;
    const float *x = j->x + p0 * S;
    if (j->is_max) {
        float m[LANES];
        for (int l = 0; l < LANES; l++) m[l] = x[l * S];
        for (int64_t s = 1; s < S; s++)
            for (int l = 0; l < LANES; l++)
                if (x[l * S + s] > m[l]) m[l] = x[l * S + s];
        for (int l = 0; l < LANES; l++) j->y[p0 + l] = m[l];
        return;
    }
    double sum[LANES] = {0.0};
    for (int64_t s = 0; s < S; s++)
        for (int l = 0; l < LANES; l++) sum[l] += x[l * S + s];
    for (int l = 0; l < LANES; l++) j->y[p0 + l] = (float)(sum[l] / (double)S);
}

static void pool_one(const gpool_job *j, int64_t p)
{
    const float *xp = j->x + p * j->S;
    const int64_t S = j->S;
    if (j->is_max) {
        float m = xp[0];
        for (int64_t s = 1; s < S; s++)
            if (xp[s] > m) m = xp[s];
        j->y[p] = m;
        return;
    }
    double sum = 0.0;
    for (int64_t s = 0; s < S; s++) sum += xp[s];
    j->y[p] = (float)(sum / (double)S);
}

static void pool_item(void *arg, int64_t item)
{
    const gpool_job *j = arg;
    const int64_t lo = item * PLANES_PER_ITEM, hi = lo + PLANES_PER_ITEM < j->planes ? lo + PLANES_PER_ITEM : j->planes;
    int64_t p = lo;
    for (; p + LANES <= hi; p += LANES) pool_lanes(j, p);
    for (; p < hi; p++) pool_one(j, p);
}

bool qfi_cpu_global_pool_takes_stored(const qf_graph *g, const qf_node *n)
{
    if (n->op != QF_OP_GLOBAL_AVERAGE_POOL || n->in[0] < 0 || n->out[0] < 0) return false;
    const qf_dtype y = g->values[n->out[0]].dtype;
    return g->values[n->in[0]].dtype == QF_F16 && (y == QF_F16 || y == QF_F32);
}

/* An FP16 GlobalAveragePool on its half input (qfi_cpu_global_pool_takes_stored):
 * LANES planes' pieces widened onto the stack, then pool_lanes' sums in
 * the same order, the mean rounded to half as lowp.c's wrapper would (the
 * same bits, one pass over the halves where the wrapper widened the whole
 * tensor first: EfficientNet-B0's squeeze-excitation pools). */
typedef struct gpool_half_job {
    const uint16_t *x;
    void *y;
    bool half_out;
    int64_t planes, S;
} gpool_half_job;

static void pool_half_item(void *arg, int64_t item)
{
    enum { PIECE = 512 };
    const gpool_half_job *j = arg;
    const int64_t lo = item * PLANES_PER_ITEM, hi = lo + PLANES_PER_ITEM < j->planes ? lo + PLANES_PER_ITEM : j->planes;
    float buf[LANES][PIECE];
    for (int64_t p0 = lo; p0 < hi; p0 += LANES) {
        const int lanes = hi - p0 < LANES ? (int)(hi - p0) : LANES;
        double sum[LANES] = {0.0};
        for (int64_t s0 = 0; s0 < j->S; s0 += PIECE) {
            const int64_t m = j->S - s0 < PIECE ? j->S - s0 : PIECE;
            for (int l = 0; l < lanes; l++) qfi_cpu_f16_to_f32(j->x + (p0 + l) * j->S + s0, buf[l], m);
            for (int64_t s = 0; s < m; s++)
                for (int l = 0; l < lanes; l++) sum[l] += buf[l][s];
        }
        for (int l = 0; l < lanes; l++) {
            const float mean = (float)(sum[l] / (double)j->S);
            if (j->half_out) ((uint16_t *)j->y)[p0 + l] = qf_f32_to_f16(mean);
            else ((float *)j->y)[p0 + l] = mean;
        }
    }
}

static qf_status global_pool_run(const qfi_kernel_args *a)
{
    const qf_value *xv = qfi_in(a->g, a->n, 0), *yv = qfi_out(a->g, a->n, 0);
    /* an FP16 node the wrapper left to this kernel (through the wrapper its input reads f32) */
    const bool stored = qfi_node_f32_view(a->n) && qfi_cpu_global_pool_takes_stored(a->g, a->n);
    if (!stored) QF_CHECK(qfi_require_f32(a->g, a->n, xv, "input"));
    const int64_t planes = xv->dims[0] * xv->dims[1];
    const int64_t S = planes ? qf_value_numel(xv) / planes : 0;
    if (S == 0) { /* an empty plane's mean or max: 0, in f32 or half */
        memset(a->out[0], 0, (size_t)planes * qf_dtype_info(yv->dtype)->size);
        return QF_OK;
    }
    if (stored) {
        gpool_half_job j = {.x = a->in[0], .y = a->out[0], .half_out = yv->dtype == QF_F16, .planes = planes, .S = S};
        qfi_parallel_for(a->threads, (planes + PLANES_PER_ITEM - 1) / PLANES_PER_ITEM, pool_half_item, &j);
        return QF_OK;
    }
    gpool_job j = {.x = a->in[0], .y = a->out[0], .planes = planes, .S = S,
                   .is_max = a->n->op == QF_OP_GLOBAL_MAX_POOL};
    qfi_parallel_for(a->threads, (planes + PLANES_PER_ITEM - 1) / PLANES_PER_ITEM, pool_item, &j);
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_global_pool = {.run = global_pool_run};
