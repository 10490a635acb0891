/* qforge calib MODEL.onnx --images DIR: run representative images through the
 * FP32 graph, histogram every activation, and write the per-tensor INT8
 * clipping thresholds (table.calib, optionally a TensorRT cache and an HTML
 * report). */
#include "config.h"
#include "cli.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char calib_help[] =
    "usage: qforge calib MODEL.onnx --images DIR [-n COUNT] [--method M] [PREPROCESS]\n"
    "                    [--device D] [--batch B] [--threads T] [-o TABLE.calib]\n"
    "                    [--trt-cache FILE] [--report FILE.html] [--strict] [--quiet]\n"
    "  --method entropy (default) | minmax | percentile[=P] | mse | all\n"
    "  See qforge-calib(1) and qforge-calib(5).\n";

int cmd_calib(int argc, char **argv)
{
    image_opts io;
    image_opts_init(&io);
    const char *model = NULL, *method = "entropy", *device = NULL, *out_path = NULL, *trt = NULL, *report = NULL;
    int batch = 32;
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
    qf_engine *e = NULL;
    qf_dataset *ds = NULL;
    qf_loader *ld = NULL;
    qf_calib *cal = NULL;
    qf_calib_table *table = NULL;
    int rc = EXIT_FAIL;
    char sha[65];
    qf_status st = qf_sha256_file(model, sha);
    if (st == QF_OK) st = cli_load_model(model, batch, &g, NULL);
    if (st == QF_OK) st = cli_preprocess_for_model(g, &io.pp);
    if (st == QF_OK) st = image_opts_dataset(&io, &ds);
    /* large tensors are histogrammed on every core the engine may use */
    qf_calib_opts co = {.threads = io.threads};
    if (st == QF_OK) st = qf_calib_create(g, &co, &cal);
    if (st == QF_OK) {
        eo.observer = qf_calib_observe;
        eo.observer_user = cal;
        eo.threads = io.threads;
        st = cli_engine_create(g, &eo, device_given, &e);
    }
    qf_loader_options lo = {.batch = batch, .threads = io.threads ? io.threads : 2, .strict = io.strict};
    if (st == QF_OK) st = qf_loader_create(ds, &io.pp, &lo, &ld);
    if (st != QF_OK) {
        rc = cli_fail(st);
        goto out;
    }
    int64_t images = 0;
    progress pr;
    progress_start(&pr, "calib", qf_dataset_count(ds));
    for (;;) {
        int count = 0;
        float *in = qf_engine_input(e, 0);
        st = qf_loader_next(ld, in, NULL, &count);
        if (st != QF_OK || count == 0) break;
        if (count < batch) {
            /* a short last batch: pad, and keep the padding out of the histograms */
            size_t per = (size_t)(qf_value_numel(&g->values[g->inputs[0]]) / batch);
            memset(in + (size_t)count * per, 0, (size_t)(batch - count) * per * sizeof *in);
        }
        qf_calib_set_batch_valid(cal, count);
        if ((st = qf_engine_run(e)) != QF_OK) break;
        images += count;
        progress_update(&pr, images);
    }
    double secs = progress_end(&pr);
    if (st != QF_OK) {
        rc = cli_fail(st);
        goto out;
    }
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
    qf_engine_free(e);
    qf_calib_free(cal);
    qf_dataset_free(ds);
    qf_graph_free(g);
    return rc;
}
