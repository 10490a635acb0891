/* qforge eval MODEL --images DIR: accuracy of a model on a folder of images,
 * and its agreement with a reference model (top-1 match, output SQNR; with
 * --per-layer, the SQNR of every tensor the two share, worst first). */
#include "config.h"
#include "cli.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char eval_help[] =
    "usage: qforge eval MODEL --images DIR [--reference MODEL.onnx] [--precision P] [-n COUNT]\n"
    "                   [LABELS] [PREPROCESS] [--device D] [--batch B] [--threads T] [--json]\n"
    "                   [--per-layer [--report FILE.html]] [--strict] [--quiet]\n"
    "  LABELS:     class sub-folders of DIR (default), --classes FILE, --synsets FILE, --labels FILE\n"
    "  PREPROCESS: --preset imagenet|cifar10|none, --resize N, --crop N, --size WxH,\n"
    "              --mean a,b,c, --std a,b,c, --bgr, --gray\n"
    "  See qforge-eval(1).\n";

/* "fp32", "fp16", "int8" or "mixed": what the loaded graph computes in. */
static const char *model_precision(const qf_graph *g)
{
    int seen[QF_PRECISION_COUNT] = {0}, kinds = 0;
    qf_precision last = QF_PREC_FP32;
    for (int i = 0; i < g->n_nodes; i++) {
        qf_op op = g->nodes[i].op;
        if (qf_op_is_conversion(op)) continue;
        qf_precision p = g->nodes[i].precision;
        if (!seen[p]++) kinds++;
        last = p;
    }
    /* an INT8 model keeps a few FP16/FP32 nodes: name it by its lowest precision */
    if (seen[QF_PREC_INT8]) return "int8";
    return kinds <= 1 ? qf_precision_name(last) : seen[QF_PREC_FP16] ? "fp16" : "fp32";
}

/* --per-layer: loads MODEL and the reference, sets up the comparison of their
 * tensors, and builds both engines with its observers (the quantized one runs
 * first on each batch: eval_run's order). */
static qf_status open_compared(eval_model *m, eval_model *ref, const char *model, const char *reference, int batch,
                               const char *precision, qf_engine_opts *eo, bool device_given, qf_qfm_meta *meta,
                               qf_layer_cmp **layers)
{
    qf_graph *qg = NULL, *rg = NULL;
    qf_status st = eval_model_load(model, batch, precision, eo, meta, &qg);
    if (st == QF_OK) st = eval_model_load(reference, batch, NULL, eo, NULL, &rg);
    /* a model quantized from the equalized graph holds its tensors scaled per
     * channel: compare them with the reference's equalized alike */
    if (st == QF_OK && qg->equalized[0]) st = cli_equalize(rg, true);
    if (st == QF_OK && strcmp(qg->equalized, rg->equalized))
        st = qf_error(QF_ERR_INVALID, "%s was quantized from an equalized graph that %s does not equalize to (another "
                      "source model or qforge version?)", model, reference);
    if (st == QF_OK) st = qf_layer_cmp_create(qg, rg, layers);
    if (st != QF_OK) {
        qf_graph_free(qg);
        qf_graph_free(rg);
        return st;
    }
    eo->observer = qf_layer_cmp_observe_quantized;
    eo->observer_user = *layers;
    st = cli_batch_hint(eval_model_adopt(m, qg, eo, device_given), model, batch, eo);
    qf_engine_opts reo = *eo; /* where the quantized engine fell back to the CPU, so does this one */
    reo.observer = qf_layer_cmp_observe_reference;
    if (st == QF_OK) st = cli_batch_hint(eval_model_adopt(ref, rg, &reo, device_given), reference, batch, &reo);
    else qf_graph_free(rg);
    return st;
}

static void print_layers_text(const qf_layer_sqnr *rows, int n)
{
    printf("per-layer  SQNR against the reference, worst first (%d tensors)\n", n);
    for (int i = 0; i < n; i++)
        printf("%9.2f dB  %s  (%s %s, %s)\n", rows[i].sqnr_db, rows[i].tensor, qf_op_name(rows[i].op),
               qf_precision_name(rows[i].precision), rows[i].node);
}

static void print_layers_json(const qf_layer_sqnr *rows, int n)
{
    printf("\"layers\": [");
    for (int i = 0; i < n; i++) {
        printf("%s{\"tensor\": ", i ? ", " : "");
        json_string(stdout, rows[i].tensor);
        printf(", \"node\": ");
        json_string(stdout, rows[i].node);
        printf(", \"op\": \"%s\", \"precision\": \"%s\", \"dtype\": \"%s\", \"elements\": %lld, \"sqnr_db\": %.3f}",
               qf_op_name(rows[i].op), qf_precision_name(rows[i].precision), qf_dtype_info(rows[i].dtype)->name,
               (long long)rows[i].elements, rows[i].sqnr_db);
    }
    printf("], ");
}

static void json_frac(const char *key, int64_t num, int64_t den, bool labeled, bool comma)
{
    if (labeled && den > 0) printf("\"%s\": %.6f", key, (double)num / den);
    else printf("\"%s\": null", key);
    if (comma) printf(", ");
}

int cmd_eval(int argc, char **argv)
{
    image_opts io;
    image_opts_init(&io);
    io.want_folder_labels = true;
    const char *model = NULL, *reference = NULL, *precision = NULL, *device = NULL, *report = NULL;
    int batch = 32;
    bool json = false, per_layer = false;
    for (int i = 1; i < argc;) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        int r = image_opts_parse(&io, "eval", argc, argv, &i);
        if (r < 0) return EXIT_USAGE;
        if (r > 0) continue;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(eval_help, stdout);
            return EXIT_OK;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--per-layer")) {
            per_layer = true;
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            cli_quiet = true;
        } else if (!strcmp(a, "--reference") || !strcmp(a, "--precision") || !strcmp(a, "--device") ||
                   !strcmp(a, "--report")) {
            if (!next) return cli_usage_error("eval", "%s needs a value", a);
            if (!strcmp(a, "--report")) report = next;
            else if (a[2] == 'r') reference = next;
            else if (a[2] == 'p') precision = next;
            else device = next;
            i++;
        } else if (!strcmp(a, "--batch")) {
            if (!cli_parse_int("eval", a, next, 1, CLI_MAX_BATCH, &batch)) return EXIT_USAGE;
            i++;
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error("eval", "unknown option %s", a);
        } else if (!model) {
            model = a;
        } else {
            return cli_usage_error("eval", "unexpected argument %s", a);
        }
        i++;
    }
    if (!model) return cli_usage_error("eval", "missing MODEL");
    if (!io.images) return cli_usage_error("eval", "missing --images DIR");
    if (per_layer && !reference) return cli_usage_error("eval", "--per-layer needs --reference FP32.onnx");
    if (report && !per_layer) return cli_usage_error("eval", "--report needs --per-layer");
    qf_engine_opts eo = {0};
    bool device_given;
    if (cli_device_opts(device, &eo, &device_given) != QF_OK) return cli_fail(QF_ERR_USAGE);

    eval_model m, ref = {0};
    qf_dataset *ds = NULL;
    eval_scores sc;
    int rc = EXIT_FAIL;
    qf_qfm_meta meta;
    qf_layer_cmp *layers = NULL;
    qf_layer_sqnr *rows = NULL;
    int n_rows = 0;
    qf_status st = per_layer ? open_compared(&m, &ref, model, reference, batch, precision, &eo, device_given, &meta, &layers)
                             : eval_model_open(&m, model, batch, precision, &eo, device_given, &meta);
    if (st == QF_OK) st = image_opts_use_stored(&io, &meta);
    if (st == QF_OK && reference && !per_layer) st = eval_model_open(&ref, reference, batch, NULL, &eo, device_given, NULL);
    if (st == QF_OK) st = cli_preprocess_for_model(m.g, &io.pp);
    if (st == QF_OK) st = image_opts_dataset(&io, &ds);
    eval_ref er = {.model = &ref, .layers = layers};
    if (st == QF_OK)
        st = eval_run(&m, reference ? &er : NULL, ds, &io.pp, image_opts_decode_threads(&io, eo.device), io.strict,
                      "eval", &sc);
    if (st == QF_OK && layers) st = qf_layer_cmp_results(layers, &rows, &n_rows);
    if (st == QF_OK && report) st = qf_layer_report_write(report, model, reference, sc.images, rows, n_rows);
    if (st != QF_OK) {
        rc = cli_fail(st);
        goto out;
    }
    int64_t images = sc.images, skipped = sc.skipped;
    bool labeled = sc.labeled;
    if (skipped) qf_log(QF_LOG_WARN, "%lld file(s) could not be decoded and were skipped", (long long)skipped);
    double sqnr = eval_sqnr(&sc);
    double ips = sc.seconds > 0 ? images / sc.seconds : 0;
    const char *precision_label = model_precision(m.g);
    char devbuf[32];
    const char *device_label = cli_device_name(&eo, devbuf, sizeof devbuf);
    if (json) {
        printf("{\"model\": ");
        json_string(stdout, model);
        printf(", \"precision\": \"%s\", \"device\": \"%s\", \"images\": %lld, ", precision_label, device_label, (long long)images);
        json_frac("top1", sc.top1, images, labeled, true);
        json_frac("top5", sc.top5, images, labeled, true);
        if (reference) {
            printf("\"reference\": {");
            json_frac("top1", sc.ref_top1, images, labeled, true);
            json_frac("top5", sc.ref_top5, images, labeled, true);
            printf("\"agreement\": %.6f, \"sqnr_db\": %.3f, \"outputs\": [", eval_agreement(&sc), sqnr);
            for (int k = 0; k < sc.n_outputs; k++) {
                printf("%s{\"name\": ", k ? ", " : "");
                json_string(stdout, m.g->values[m.g->outputs[k]].name);
                printf(", \"sqnr_db\": %.3f}", eval_output_sqnr(&sc, k));
            }
            printf("]}, ");
        } else {
            printf("\"reference\": null, ");
        }
        if (layers) print_layers_json(rows, n_rows);
        printf("\"skipped\": %lld, \"images_per_second\": %.1f}\n", (long long)skipped, ips);
    } else {
        printf("model      %s (%s, %s)\nimages     %lld", model, precision_label, device_label, (long long)images);
        if (skipped) printf(" (%lld skipped)", (long long)skipped);
        printf("\n");
        if (labeled)
            printf("top1       %.4f\ntop5       %.4f\n", (double)sc.top1 / images, (double)sc.top5 / images);
        if (reference) {
            if (labeled)
                printf("reference  top1 %.4f  top5 %.4f\n", (double)sc.ref_top1 / images, (double)sc.ref_top5 / images);
            printf("agreement  %.4f\nsqnr       %.2f dB\n", eval_agreement(&sc), sqnr);
            for (int k = 0; sc.n_outputs > 1 && k < sc.n_outputs; k++)
                printf("  output   %.2f dB  %s\n", eval_output_sqnr(&sc, k), m.g->values[m.g->outputs[k]].name);
        }
        printf("speed      %.1f images/s\n", ips);
        if (layers) print_layers_text(rows, n_rows);
    }
    rc = EXIT_OK;
out:
    free(rows);
    qf_layer_cmp_free(layers);
    qf_dataset_free(ds);
    eval_model_close(&m);
    eval_model_close(&ref);
    return rc;
}
