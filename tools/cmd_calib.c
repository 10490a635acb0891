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
    "                    [--trt-cache FILE] [--report FILE.html] [--equalize] [--zero-points Z]\n"
    "                    [--strict] [--quiet]\n"
    "  --method auto (default: per tensor, the threshold whose error costs its readers least)\n"
    "           | entropy | minmax | percentile[=P] | mse | all\n"
    "  --zero-points all (default) | two-sided | unpadded | none: the INT8 grid auto judges\n"
    "              thresholds on, as quant --zero-points will quantize (none: symmetric, as\n"
    "              TensorRT's INT8)\n"
    "  --equalize  cross-layer equalization of the FP32 graph first (the same function);\n"
    "              the table records it, and quant --calib equalizes alike\n"
    "  See qforge-calib(1) and qforge-calib(5).\n";

/* progress_update from qf_calibrate's callback; the bar starts with the first batch */
static void calib_progress(void *user, int64_t done, int64_t total)
{
    progress *pr = user;
    if (done == 0) progress_start(pr, "calib", total);
    else progress_update(pr, done);
}

void cli_auto_summary(const qf_calib_table *t, const qf_calibrate_info *info)
{
    if (cli_quiet || !(t->methods & (1u << QF_CALIB_AUTO))) return;
    fprintf(stderr, "qforge: auto thresholds (chosen on %lld images in %.1f s):", (long long)info->auto_images,
            info->auto_seconds);
    for (int k = 0; k < QF_CALIB_AUTO_CANDIDATES; k++)
        fprintf(stderr, "%s %s %lld", k ? "," : "", qf_calib_auto_candidate_name(k), (long long)info->auto_chosen[k]);
    fputs(" tensors\n", stderr);
}

int cmd_calib(int argc, char **argv)
{
    image_opts io;
    image_opts_init(&io);
    const char *model = NULL, *method = NULL, *device = NULL, *out_path = NULL, *trt = NULL, *report = NULL;
    const char *zero_points = NULL;
    /* 16: a CPU worker's activations then stay in its core's cache (ResNet-20,
     * 1000 images on 2 cores: 0.55 s against 0.64 s at 32); tables do not
     * depend on the batch */
    int batch = 16;
    bool equalize = false;
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
        } else if (!strcmp(a, "--equalize")) {
            equalize = true;
        } else if (!strcmp(a, "--batch")) {
            if (!cli_parse_int("calib", a, next, 1, CLI_MAX_BATCH, &batch)) return EXIT_USAGE;
            i++;
        } else if (!strcmp(a, "--method")) target = &method;
        else if (!strcmp(a, "--device")) target = &device;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) target = &out_path;
        else if (!strcmp(a, "--trt-cache")) target = &trt;
        else if (!strcmp(a, "--report")) target = &report;
        else if (!strcmp(a, "--zero-points")) {
            if (!next || !cli_zero_points(next, NULL, NULL))
                return cli_usage_error("calib", "--zero-points takes " CLI_ZERO_POINTS_MODES);
            target = &zero_points;
        } else if (a[0] == '-' && a[1]) return cli_usage_error("calib", "unknown option %s", a);
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
    if (equalize && trt)
        return cli_usage_error("calib", "--trt-cache with --equalize: TensorRT runs the ONNX model, whose tensors the "
                               "equalized graph's table does not describe");
    qf_calibrate_opts co;
    qf_calibrate_opts_init(&co);
    if (method && qf_calib_method_parse(method, &co.methods, &co.percentile) != QF_OK) return cli_fail(QF_ERR_USAGE);
    cli_zero_points(zero_points, NULL, &co);
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
    qf_calib_table *table = NULL;
    qf_calib *hists = NULL;
    progress pr = {0};
    char sha[65];
    co.device = eo.device;
    co.device_index = eo.device_index;
    co.cpu_fallback = !device_given;
    co.threads = co.decode_threads = io.threads;
    co.strict = io.strict;
    co.model_sha256 = sha;
    co.progress = calib_progress;
    co.progress_user = &pr;
    qf_calibrate_info info;
    qf_status st = qf_sha256_file(model, sha);
    if (st == QF_OK) st = cli_batch_hint(cli_load_model(model, batch, &g, NULL), model, batch, &eo);
    if (st == QF_OK && equalize) st = cli_equalize(g, false);
    if (st == QF_OK) st = cli_preprocess_for_model(g, &io.pp);
    if (st == QF_OK) st = image_opts_dataset(&io, &ds);
    if (st == QF_OK)
        st = cli_batch_hint(qf_calibrate(g, ds, &io.pp, &co, &table, report ? &hists : NULL, &info), model, batch, &eo);
    if (pr.label) progress_end(&pr);
    if (st == QF_OK) st = qf_calib_table_write(table, out_path);
    if (st == QF_OK && trt) st = qf_calib_table_write_trt(table, qf_calib_table_default_method(table), trt);
    if (st == QF_OK && report) st = qf_calib_report_write(report, hists, table);
    int rc = st == QF_OK ? EXIT_OK : cli_fail(st);
    if (st == QF_OK && !cli_quiet) {
        fprintf(stderr, "qforge: calibrated %d tensors on %lld images (%.1f images/s)%s; wrote %s%s%s%s%s\n",
                table->n, (long long)info.images, info.seconds > 0 ? info.images / info.seconds : 0.0,
                info.skipped ? " with skipped files" : "", out_path, trt ? ", " : "", trt ? trt : "",
                report ? ", " : "", report ? report : "");
        if (info.skipped)
            fprintf(stderr, "qforge: %lld file(s) could not be decoded and were skipped\n", (long long)info.skipped);
        if (trt && co.auto_zero_points && qf_calib_table_default_method(table) == QF_CALIB_AUTO)
            fprintf(stderr, "qforge: note: auto judged the thresholds for INT8 with zero points (qforge's default); "
                            "TensorRT's INT8 is symmetric: --zero-points none judges them for it\n");
        cli_auto_summary(table, &info);
    }
    qf_calib_table_free(table);
    qf_calib_free(hists);
    qf_dataset_free(ds);
    qf_graph_free(g);
    return rc;
}
