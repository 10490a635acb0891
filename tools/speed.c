/* Timing an engine, shared by bench and quant: end-to-end runs, a warm-up
 * that sizes the timed run, then runs back to back (qf_engine_bench: device
 * events around each replay on a GPU, the host clock on the CPU), reduced to
 * images/s and latency percentiles. */
#include "config.h"
#include "cli.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted v[n]. */
static double percentile(const double *v, int n, double p)
{
    int k = (int)ceil(p / 100.0 * n) - 1;
    return v[k < 0 ? 0 : k >= n ? n - 1 : k];
}

/* Deterministic inputs in [-2, 2): timing must not depend on the data. */
static void fill_inputs(qf_engine *e, const qf_graph *g)
{
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < g->n_inputs; i++) {
        const qf_value *v = &g->values[g->inputs[i]];
        if (v->dtype != QF_F32) continue;
        float *x = qf_engine_input(e, i);
        for (int64_t k = 0; k < qf_value_numel(v); k++) {
            s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
            x[k] = (float)((s * 0x2545f4914f6cdd1dull) >> 40) / (float)(1 << 24) * 4.0f - 2.0f;
        }
    }
}

qf_status speed_measure(qf_engine *e, const qf_graph *g, qf_device_kind device, int iterations, double duration,
                        int min_iterations, speed_result *r)
{
    memset(r, 0, sizeof *r);
    r->batch = g->batch;
    fill_inputs(e, g);
    /* end to end (upload, run, download), as one synchronous call sees it */
    double e2e[20];
    int n_e2e = device == QF_DEVICE_CPU ? 3 : 20;
    for (int i = 0; i < n_e2e; i++) {
        double a = now_s();
        QF_CHECK_CLI(qf_engine_run(e));
        e2e[i] = (now_s() - a) * 1e3;
    }
    qsort(e2e, (size_t)n_e2e, sizeof *e2e, cmp_double);
    r->e2e_p50 = percentile(e2e, n_e2e, 50);
    /* warm-up, which also sizes the timed run */
    double warm[10];
    int n_warm = device == QF_DEVICE_CPU ? 2 : 10;
    QF_CHECK_CLI(qf_engine_bench(e, n_warm, warm));
    double per = 0.0;
    for (int i = 0; i < n_warm; i++) per += warm[i] / n_warm;
    int n = iterations;
    if (n <= 0) {
        n = per > 0.0 ? (int)(duration * 1e3 / per) : 100;
        n = n < min_iterations ? min_iterations : n > 20000 ? 20000 : n;
    }
    double *ms = malloc((size_t)n * sizeof *ms);
    if (!ms) return qf_error(QF_ERR_NOMEM, "out of memory");
    qf_status st = qf_engine_bench(e, n, ms);
    if (st == QF_OK) {
        double sum = 0.0;
        for (int i = 0; i < n; i++) sum += ms[i];
        qsort(ms, (size_t)n, sizeof *ms, cmp_double);
        r->iterations = n;
        r->mean = sum / n;
        r->ips = sum > 0.0 ? g->batch * n / (sum * 1e-3) : 0.0;
        r->p50 = percentile(ms, n, 50);
        r->p90 = percentile(ms, n, 90);
        r->p99 = percentile(ms, n, 99);
    }
    free(ms);
    return st;
}
