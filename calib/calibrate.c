/* qf_calibrate: the calibration loop `qforge calib` and the tests run. Images
 * come from a qf_loader; on the CPU, whole batches go to one single-threaded
 * engine and qf_calib per worker, merged at the end; a CUDA engine alone hands
 * over device-built histograms. */
#include <pthread.h>
#include <time.h>
#include "calib_internal.h"

/* A forward pass forked and joined over the cores at every node spends much of
 * a small model's time handing off; whole batches per core do not (ResNet-20,
 * 1000 images, 2 cores: 0.6 s against 0.9 s). The extra workers' activation
 * arenas are capped at this many bytes in all; past it, fewer workers run, each
 * engine with a share of the threads. */
#define PARALLEL_ARENA_BYTES ((size_t)1 << 30)

typedef struct calib_shared {
    pthread_mutex_t load_mu; /* the loader hands out one batch at a time */
    pthread_mutex_t mu;      /* the fields below */
    qf_loader *ld;
    const qf_graph *g;
    const qf_calibrate_opts *o;
    int64_t images, total;
    qf_status st;            /* the first failure stops every worker */
    qfi_error_saved err;     /* its message (error messages are per thread) */
} calib_shared;

typedef struct calib_worker {
    calib_shared *sh;
    qf_engine *e;
    qf_calib *cal;
    pthread_t tid;
    bool started;
} calib_worker;

/* The engine's observers: the worker's calibrator, which exists only after
 * the engine (its slicing threads depend on where the engine runs). */
static void worker_observe(void *user, const qf_graph *g, int value, const void *data)
{
    qf_calib_observe(((calib_worker *)user)->cal, g, value, data);
}

static void worker_observe_histogram(void *user, const qf_graph *g, int value, const qf_histogram *h)
{
    qf_calib_observe_histogram(((calib_worker *)user)->cal, g, value, h);
}

static int64_t worker_count(void *user, const qf_graph *g, int value)
{
    return qf_calib_observe_count(((calib_worker *)user)->cal, g, value);
}

static void record_failure(calib_shared *sh, qf_status st)
{
    pthread_mutex_lock(&sh->mu);
    if (sh->st == QF_OK) {
        sh->st = st;
        qfi_error_save(&sh->err);
    }
    pthread_mutex_unlock(&sh->mu);
}

static void *worker_run(void *arg)
{
    calib_worker *w = arg;
    calib_shared *sh = w->sh;
    const qf_graph *g = sh->g;
    int batch = g->batch;
    float *in = qf_engine_input(w->e, 0); /* (batch, one image) */
    size_t per = (size_t)(qf_value_numel(&g->values[g->inputs[0]]) / batch);
    for (;;) {
        int count = 0;
        pthread_mutex_lock(&sh->load_mu);
        pthread_mutex_lock(&sh->mu);
        qf_status st = sh->st;
        pthread_mutex_unlock(&sh->mu);
        if (st == QF_OK && (st = qf_loader_next(sh->ld, in, NULL, &count)) != QF_OK) record_failure(sh, st);
        pthread_mutex_unlock(&sh->load_mu);
        if (st != QF_OK || count == 0) break;
        if (count < batch) /* a short last batch: pad, and keep the padding out of the histograms */
            memset(in + (size_t)count * per, 0, (size_t)(batch - count) * per * sizeof *in);
        qf_calib_set_batch_valid(w->cal, count);
        if ((st = qf_engine_run(w->e)) != QF_OK) {
            record_failure(sh, st);
            break;
        }
        pthread_mutex_lock(&sh->mu);
        sh->images += count;
        if (sh->o->progress) sh->o->progress(sh->o->progress_user, sh->images, sh->total);
        pthread_mutex_unlock(&sh->mu);
    }
    return NULL;
}

void qf_calibrate_opts_init(qf_calibrate_opts *o)
{
    memset(o, 0, sizeof *o);
    o->device = QF_DEVICE_CPU;
    o->methods = 1u << QF_CALIB_METHOD_DEFAULT;
    o->percentile = QF_CALIB_PERCENTILE_DEFAULT;
    o->auto_zero_points = true;
}

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Builds the workers' engines and calibrators: worker 0's engine tells where
 * calibration runs (a device engine is the only one); on the CPU, up to one
 * worker per thread while their arenas fit. Sets *nw to the workers built. */
static qf_status build_workers(const qf_graph *g, const qf_calibrate_opts *o, calib_worker *w, int max_workers,
                               qf_engine_opts *eo, int *nw)
{
    int threads = o->threads > 0 ? o->threads : qfi_cpu_count();
    eo->device = o->device;
    eo->device_index = o->device_index;
    eo->observer = worker_observe;
    eo->hist_observer = worker_observe_histogram;
    eo->hist_count = worker_count;
    eo->observer_user = &w[0];
    eo->threads = max_workers > 1 ? 1 : o->threads;
    *nw = 1;
    QF_CHECK(o->cpu_fallback ? qf_engine_create_or_cpu(g, eo, &w[0].e) : qf_engine_create(g, eo, &w[0].e));
    int engine_threads = o->threads; /* of every engine; 0 = all cores */
    if (eo->device == QF_DEVICE_CPU && max_workers > 1) {
        size_t arena = qf_engine_arena_bytes(w[0].e);
        size_t fit = arena ? PARALLEL_ARENA_BYTES / arena + 1 : (size_t)max_workers;
        *nw = fit < (size_t)max_workers ? (int)fit : max_workers;
        engine_threads = *nw > 1 ? threads / *nw : o->threads;
        if (engine_threads != eo->threads) { /* fewer workers than cores: rebuild with their share */
            qf_engine_free(w[0].e);
            w[0].e = NULL;
            eo->threads = engine_threads;
            QF_CHECK(qf_engine_create(g, eo, &w[0].e));
        }
    }
    /* large tensors are histogrammed on every thread the worker's engine may use */
    qf_calib_opts co = {.threads = engine_threads};
    for (int k = 0; k < *nw; k++) {
        QF_CHECK(qf_calib_create(g, &co, &w[k].cal));
        if (k > 0) {
            qf_engine_opts wo = *eo;
            wo.observer_user = &w[k];
            QF_CHECK(qf_engine_create(g, &wo, &w[k].e));
        }
    }
    return QF_OK;
}

qf_status qf_calib_sample_batches(const qf_graph *g, const qf_dataset *ds, const qf_preprocess *pp, int64_t count,
                                  int decode_threads, bool strict, qf_batch_fn fn, void *user, int64_t *images)
{
    int64_t total = qf_dataset_count(ds), n = total < count ? total : count;
    if (images) *images = 0;
    if (n <= 0) return QF_OK;
    size_t per_batch = (size_t)qf_value_numel(&g->values[g->inputs[0]]);
    const char **paths = qfi_calloc((size_t)n, sizeof *paths);
    float *in = qfi_calloc(per_batch, sizeof *in);
    qf_dataset *sub = NULL;
    qf_loader *ld = NULL;
    qf_status st = paths && in ? QF_OK : qf_error(QF_ERR_NOMEM, "out of memory for %lld sample images", (long long)n);
    for (int64_t i = 0; i < n && st == QF_OK; i++) paths[i] = qf_dataset_full_path(ds, i * total / n);
    if (st == QF_OK) st = qf_dataset_from_files(paths, (int)n, &sub);
    qf_loader_options lo = {.batch = g->batch, .threads = decode_threads, .strict = strict};
    if (st == QF_OK) st = qf_loader_create(sub, pp, &lo, &ld);
    size_t per = per_batch / (size_t)g->batch;
    for (int got = 1; st == QF_OK && got > 0;) {
        if ((st = qf_loader_next(ld, in, NULL, &got)) != QF_OK || got == 0) break;
        if (got < g->batch) memset(in + (size_t)got * per, 0, (size_t)(g->batch - got) * per * sizeof *in);
        if ((st = fn(user, in, got)) == QF_OK && images) *images += got;
    }
    qf_loader_free(ld);
    qf_dataset_free(sub);
    free(in);
    free(paths);
    return st;
}

static qf_status chooser_batch(void *user, const float *input, int images)
{
    return qf_auto_chooser_run(user, input, images);
}

/* auto's pass: QF_CALIB_AUTO_IMAGES images through a qf_auto_chooser over the
 * histograms of `cal`, on the device the histograms were built on. */
static qf_status choose_auto(const qf_graph *g, const qf_dataset *ds, const qf_preprocess *pp,
                             const qf_calibrate_opts *o, qf_device_kind device, int decode, const qf_calib *cal,
                             qf_calib_table *t, qf_calibrate_info *info)
{
    double t0 = seconds_now();
    qf_auto_chooser *a = NULL;
    int64_t images = 0;
    qf_status st = qf_auto_chooser_create(cal, t, o->threads, &a);
    if (st == QF_OK) qf_auto_chooser_set_zero_points(a, o->auto_zero_points, o->auto_two_sided);
    if (st == QF_OK && device != QF_DEVICE_CPU) st = qf_auto_chooser_set_device(a, device, o->device_index);
    if (st == QF_OK)
        st = qf_calib_sample_batches(g, ds, pp, QF_CALIB_AUTO_IMAGES, decode, o->strict, chooser_batch, a, &images);
    if (st == QF_OK) qf_auto_chooser_apply(a, t, info ? info->auto_chosen : NULL);
    if (info) {
        info->auto_images = images;
        info->auto_seconds = seconds_now() - t0;
    }
    qf_auto_chooser_free(a);
    return st;
}

qf_status qf_calibrate(const qf_graph *g, const qf_dataset *ds, const qf_preprocess *pp,
                       const qf_calibrate_opts *o, qf_calib_table **table, qf_calib **hists,
                       qf_calibrate_info *info)
{
    *table = NULL;
    if (hists) *hists = NULL;
    if (info) memset(info, 0, sizeof *info);
    if (g->batch <= 0 || g->n_inputs != 1 || g->values[g->inputs[0]].dtype != QF_F32)
        return qf_error(QF_ERR_USAGE, "%s: calibration needs a prepared graph with one float input", g->source);
    int c, h, w;
    QF_CHECK(qf_preprocess_shape(pp, &c, &h, &w));
    int64_t per = qf_value_numel(&g->values[g->inputs[0]]) / g->batch;
    if ((int64_t)c * h * w != per)
        return qf_error(QF_ERR_USAGE, "%s: preprocessing makes %dx%dx%d images but input %s takes %lld values per image",
                        g->source, c, h, w, g->values[g->inputs[0]].name, (long long)per);
    qf_calibrate_opts defaults;
    if (!o) {
        qf_calibrate_opts_init(&defaults);
        o = &defaults;
    }
    char zeros[65];
    memset(zeros, '0', 64);
    zeros[64] = 0;
    int threads = o->threads > 0 ? o->threads : qfi_cpu_count();
    int64_t batches = (qf_dataset_count(ds) + g->batch - 1) / g->batch;
    int max_workers = batches < threads ? (int)(batches > 1 ? batches : 1) : threads;
    calib_worker *wk = qfi_calloc((size_t)max_workers, sizeof *wk);
    if (!wk) return qf_error(QF_ERR_NOMEM, "out of memory for %d calibration workers", max_workers);
    calib_shared sh = {.g = g, .o = o, .total = qf_dataset_count(ds), .st = QF_OK};
    pthread_mutex_init(&sh.load_mu, NULL);
    pthread_mutex_init(&sh.mu, NULL);
    qf_engine_opts eo = {0};
    int nw = 1;
    qf_status st = build_workers(g, o, wk, max_workers, &eo, &nw);
    for (int k = 0; k < nw; k++) wk[k].sh = &sh;
    int decode = o->decode_threads > 0 ? o->decode_threads : qf_loader_default_threads(eo.device == QF_DEVICE_CPU);
    qf_loader_options lo = {.batch = g->batch, .threads = decode, .strict = o->strict};
    if (st == QF_OK) st = qf_loader_create(ds, pp, &lo, &sh.ld);
    double t0 = seconds_now();
    if (st == QF_OK) {
        if (o->progress) o->progress(o->progress_user, 0, sh.total);
        t0 = seconds_now();
        for (int k = 1; k < nw; k++) /* if a thread cannot start, the others take its batches */
            wk[k].started = pthread_create(&wk[k].tid, NULL, worker_run, &wk[k]) == 0;
        worker_run(&wk[0]);
        for (int k = 1; k < nw; k++)
            if (wk[k].started) pthread_join(wk[k].tid, NULL);
        st = sh.st != QF_OK ? qfi_error_restore(sh.st, &sh.err) : QF_OK;
    }
    double secs = seconds_now() - t0;
    for (int k = 1; k < nw && st == QF_OK; k++) st = qf_calib_merge(wk[0].cal, wk[k].cal);
    if (st == QF_OK) {
        char pp_text[1024];
        qf_preprocess_format(pp, pp_text, sizeof pp_text);
        qf_calib_meta meta = {.images = sh.images,
                              .model_sha256 = o->model_sha256 ? o->model_sha256 : zeros,
                              .preprocess = pp_text};
        st = qf_calib_finalize(wk[0].cal, o->methods, o->percentile, &meta, table);
    }
    if (st == QF_OK && info) *info = (qf_calibrate_info){.device = eo.device, .images = sh.images,
                                                         .skipped = qf_loader_skipped(sh.ld), .seconds = secs};
    if (st == QF_OK && (o->methods & (1u << QF_CALIB_AUTO)))
        st = choose_auto(g, ds, pp, o, eo.device, decode, wk[0].cal, *table, info);
    if (st != QF_OK) {
        qf_calib_table_free(*table);
        *table = NULL;
    }
    if (st == QF_OK && hists) {
        *hists = wk[0].cal;
        wk[0].cal = NULL;
    }
    qf_loader_free(sh.ld);
    for (int k = 0; k < max_workers; k++) {
        qf_engine_free(wk[k].e);
        qf_calib_free(wk[k].cal);
    }
    free(wk);
    pthread_mutex_destroy(&sh.load_mu);
    pthread_mutex_destroy(&sh.mu);
    return st;
}
