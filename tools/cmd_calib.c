/* qforge calib MODEL.onnx --images DIR: run representative images through the
 * FP32 graph, histogram every activation, and write the per-tensor INT8
 * clipping thresholds (table.calib, optionally a TensorRT cache and an HTML
 * report). */
#include "config.h"
#include "cli.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char calib_help[] =
    "usage: qforge calib MODEL.onnx --images DIR [-n COUNT] [--method M] [PREPROCESS]\n"
    "                    [--device D] [--batch B] [--threads T] [-o TABLE.calib]\n"
    "                    [--trt-cache FILE] [--report FILE.html] [--strict] [--quiet]\n"
    "  --method entropy (default) | minmax | percentile[=P] | mse | all\n"
    "  See qforge-calib(1) and qforge-calib(5).\n";

/* On the CPU, calibration runs data-parallel: one single-threaded engine and one
 * qf_calib per worker, each taking whole batches, merged at the end. A forward
 * pass forked and joined over the cores at every node spends much of a small
 * model's time handing off; whole batches per core do not (ResNet-20, 1000
 * images, 2 cores: 0.6 s against 0.9 s). Merges are exact, so
 * the table is the same for any worker count. The extra workers' activation
 * arenas are capped at this many bytes in all; past it, fewer workers run, each
 * engine with a share of the threads. */
#define PARALLEL_ARENA_BYTES ((size_t)1 << 30)

typedef struct calib_shared {
    pthread_mutex_t load_mu; /* the loader hands out one batch at a time */
    pthread_mutex_t mu;      /* the fields below */
    qf_loader *ld;
    const qf_graph *g;
    int batch;
    int64_t images;
    progress pr;
    qf_status st;            /* the first failure stops every worker */
    char msg[1024];          /* its message (error messages are per thread) */
} calib_shared;

typedef struct calib_worker {
    calib_shared *sh;
    qf_engine *e;
    qf_calib *cal;
    pthread_t tid;
    bool started;
} calib_worker;

/* The engine's observer: the worker's calibrator, which exists only after the
 * engine (its slicing threads depend on where the engine runs). */
static void worker_observe(void *user, const qf_graph *g, int value, const void *data)
{
    calib_worker *w = user;
    qf_calib_observe(w->cal, g, value, data);
}

/* a device engine's histograms, made where the activations are */
static void worker_observe_histogram(void *user, const qf_graph *g, int value, const qf_histogram *h)
{
    calib_worker *w = user;
    qf_calib_observe_histogram(w->cal, g, value, h);
}

static int64_t worker_count(void *user, const qf_graph *g, int value)
{
    calib_worker *w = user;
    return qf_calib_observe_count(w->cal, g, value);
}

static void record_failure(calib_shared *sh, qf_status st)
{
    pthread_mutex_lock(&sh->mu);
    if (sh->st == QF_OK) {
        sh->st = st;
        snprintf(sh->msg, sizeof sh->msg, "%s", qf_error_message());
    }
    pthread_mutex_unlock(&sh->mu);
}

static void *worker_run(void *arg)
{
    calib_worker *w = arg;
    calib_shared *sh = w->sh;
    const qf_graph *g = sh->g;
    float *in = qf_engine_input(w->e, 0); /* (batch, one image) */
    size_t per = (size_t)(qf_value_numel(&g->values[g->inputs[0]]) / sh->batch);
    for (;;) {
        int count = 0;
        pthread_mutex_lock(&sh->load_mu);
        pthread_mutex_lock(&sh->mu);
        qf_status st = sh->st;
        pthread_mutex_unlock(&sh->mu);
        if (st == QF_OK && (st = qf_loader_next(sh->ld, in, NULL, &count)) != QF_OK) record_failure(sh, st);
        pthread_mutex_unlock(&sh->load_mu);
        if (st != QF_OK || count == 0) break;
        if (count < sh->batch) /* a short last batch: pad, and keep the padding out of the histograms */
            memset(in + (size_t)count * per, 0, (size_t)(sh->batch - count) * per * sizeof *in);
        qf_calib_set_batch_valid(w->cal, count);
        if ((st = qf_engine_run(w->e)) != QF_OK) {
            record_failure(sh, st);
            break;
        }
        pthread_mutex_lock(&sh->mu);
        sh->images += count;
        progress_update(&sh->pr, sh->images);
        pthread_mutex_unlock(&sh->mu);
    }
    return NULL;
}

int cmd_calib(int argc, char **argv)
{
    image_opts io;
    image_opts_init(&io);
    const char *model = NULL, *method = "entropy", *device = NULL, *out_path = NULL, *trt = NULL, *report = NULL;
    /* 16: a CPU worker's activations then stay in its core's cache (ResNet-20,
     * 1000 images on 2 cores: 0.55 s against 0.64 s at 32); tables do not
     * depend on the batch */
    int batch = 16;
    for (int i = 1; i < argc;) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        int r = image_opts_parse(&io, "calib", argc, argv, &i);
        if (r < 0) return EXIT_USAGE;
        if (r > 0) continue;
        const char **target = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(calib_help, stdout);
            return EXIT_OK;
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            cli_quiet = true;
        } else if (!strcmp(a, "--batch")) {
            if (!cli_parse_int("calib", a, next, 1, 4096, &batch)) return EXIT_USAGE;
            i++;
        } else if (!strcmp(a, "--method")) target = &method;
        else if (!strcmp(a, "--device")) target = &device;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) target = &out_path;
        else if (!strcmp(a, "--trt-cache")) target = &trt;
        else if (!strcmp(a, "--report")) target = &report;
        else if (a[0] == '-' && a[1]) return cli_usage_error("calib", "unknown option %s", a);
        else if (!model) model = a;
        else return cli_usage_error("calib", "unexpected argument %s", a);
        if (target) {
            if (!next) return cli_usage_error("calib", "%s needs a value", a);
            *target = next;
            i++;
        }
        i++;
    }
    if (!model) return cli_usage_error("calib", "missing MODEL.onnx");
    if (!io.images) return cli_usage_error("calib", "missing --images DIR");
    unsigned methods;
    double percentile;
    if (qf_calib_method_parse(method, &methods, &percentile) != QF_OK) return cli_fail(QF_ERR_USAGE);
    qf_engine_opts eo = {0};
    bool device_given;
    if (cli_device_opts(device, &eo, &device_given) != QF_OK) return cli_fail(QF_ERR_USAGE);
    char default_out[4096];
    if (!out_path) {
        cli_default_output(model, ".calib", default_out, sizeof default_out);
        out_path = default_out;
    }

    qf_graph *g = NULL;
    qf_dataset *ds = NULL;
    qf_loader *ld = NULL;
    qf_calib_table *table = NULL;
    calib_worker *w = NULL;
    int nw = 1;
    calib_shared sh = {.st = QF_OK};
    pthread_mutex_init(&sh.load_mu, NULL);
    pthread_mutex_init(&sh.mu, NULL);
    int rc = EXIT_FAIL;
    char sha[65];
    qf_status st = qf_sha256_file(model, sha);
    if (st == QF_OK) st = cli_load_model(model, batch, &g, NULL);
    if (st == QF_OK) st = cli_preprocess_for_model(g, &io.pp);
    if (st == QF_OK) st = image_opts_dataset(&io, &ds);
    if (st != QF_OK) {
        rc = cli_fail(st);
        goto out;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = io.threads > 0 ? io.threads : cpus > 0 ? (int)cpus : 1;
    int64_t batches = (qf_dataset_count(ds) + batch - 1) / batch;
    int max_workers = batches < threads ? (int)(batches > 1 ? batches : 1) : threads;
    if (!(w = calloc((size_t)max_workers, sizeof *w))) {
        rc = cli_fail(qf_error(QF_ERR_NOMEM, "out of memory for %d calibration workers", max_workers));
        goto out;
    }
    /* Worker 0's engine tells where calibration runs; a device engine is the only one. */
    eo.observer = worker_observe;
    eo.hist_observer = worker_observe_histogram;
    eo.hist_count = worker_count;
    eo.observer_user = &w[0];
    eo.threads = max_workers > 1 ? 1 : io.threads;
    st = cli_engine_create(g, &eo, device_given, &w[0].e);
    int engine_threads = io.threads; /* of every engine; 0 = all cores */
    if (st == QF_OK && eo.device == QF_DEVICE_CPU && max_workers > 1) {
        size_t arena = qf_engine_arena_bytes(w[0].e);
        size_t fit = arena ? PARALLEL_ARENA_BYTES / arena + 1 : (size_t)max_workers;
        nw = fit < (size_t)max_workers ? (int)fit : max_workers;
        engine_threads = nw > 1 ? threads / nw : io.threads;
        if (engine_threads != eo.threads) { /* fewer workers than cores: rebuild with their share */
            qf_engine_free(w[0].e);
            w[0].e = NULL;
            eo.threads = engine_threads;
            st = qf_engine_create(g, &eo, &w[0].e);
        }
    }
    /* large tensors are histogrammed on every thread the worker's engine may use */
    qf_calib_opts co = {.threads = engine_threads};
    for (int k = 0; k < nw && st == QF_OK; k++) {
        w[k].sh = &sh;
        st = qf_calib_create(g, &co, &w[k].cal);
        if (st == QF_OK && k > 0) {
            qf_engine_opts wo = eo;
            wo.observer_user = &w[k];
            st = qf_engine_create(g, &wo, &w[k].e);
        }
    }
    qf_loader_options lo = {.batch = batch, .threads = image_opts_decode_threads(&io, eo.device), .strict = io.strict};
    if (st == QF_OK) st = qf_loader_create(ds, &io.pp, &lo, &ld);
    if (st != QF_OK) {
        rc = cli_fail(st);
        goto out;
    }
    sh.ld = ld;
    sh.g = g;
    sh.batch = batch;
    progress_start(&sh.pr, "calib", qf_dataset_count(ds));
    for (int k = 1; k < nw; k++) /* if a thread cannot start, the others take its batches */
        w[k].started = pthread_create(&w[k].tid, NULL, worker_run, &w[k]) == 0;
    worker_run(&w[0]);
    for (int k = 1; k < nw; k++)
        if (w[k].started) pthread_join(w[k].tid, NULL);
    double secs = progress_end(&sh.pr);
    int64_t images = sh.images;
    st = sh.st != QF_OK ? qf_error(sh.st, "%s", sh.msg) : QF_OK;
    for (int k = 1; k < nw && st == QF_OK; k++) st = qf_calib_merge(w[0].cal, w[k].cal);
    if (st != QF_OK) {
        rc = cli_fail(st);
        goto out;
    }
    qf_calib *cal = w[0].cal;
    char pp_text[1024];
    qf_preprocess_format(&io.pp, pp_text, sizeof pp_text);
    qf_calib_meta meta = {.images = images, .model_sha256 = sha, .preprocess = pp_text};
    st = qf_calib_finalize(cal, methods, percentile, &meta, &table);
    if (st == QF_OK) st = qf_calib_table_write(table, out_path);
    if (st == QF_OK && trt) st = qf_calib_table_write_trt(table, qf_calib_table_default_method(table), trt);
    if (st == QF_OK && report) st = qf_calib_report_write(report, cal, table);
    if (st != QF_OK) {
        rc = cli_fail(st);
        goto out;
    }
    int64_t skipped = qf_loader_skipped(ld);
    if (!cli_quiet) {
        fprintf(stderr, "qforge: calibrated %d tensors on %lld images (%.1f images/s)%s; wrote %s%s%s%s%s\n",
                table->n, (long long)images, secs > 0 ? images / secs : 0.0, skipped ? " with skipped files" : "",
                out_path, trt ? ", " : "", trt ? trt : "", report ? ", " : "", report ? report : "");
        if (skipped) fprintf(stderr, "qforge: %lld file(s) could not be decoded and were skipped\n", (long long)skipped);
    }
    rc = EXIT_OK;
out:
    qf_calib_table_free(table);
    qf_loader_free(ld);
    for (int k = 0; w && k < nw; k++) {
        qf_engine_free(w[k].e);
        qf_calib_free(w[k].cal);
    }
    free(w);
    pthread_mutex_destroy(&sh.load_mu);
    pthread_mutex_destroy(&sh.mu);
    qf_dataset_free(ds);
    qf_graph_free(g);
    return rc;
}
