/* qforge eval MODEL --images DIR: accuracy of a model on a folder of images,
 * and its agreement with a reference model (top-1 match, output SQNR). */
#include "config.h"
#include "cli.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char eval_help[] =
    "usage: qforge eval MODEL --images DIR [--reference MODEL.onnx] [--precision P] [-n COUNT]\n"
    "                   [LABELS] [PREPROCESS] [--device D] [--batch B] [--threads T] [--json]\n"
    "                   [--strict] [--quiet]\n"
    "  LABELS:     class sub-folders of DIR (default), --classes FILE, --synsets FILE, --labels FILE\n"
    "  PREPROCESS: --preset imagenet|cifar10|none, --resize N, --crop N, --size WxH,\n"
    "              --mean a,b,c, --std a,b,c, --bgr, --gray\n"
    "  See qforge-eval(1).\n";

/* One model being evaluated: its graph, engine and running tallies. */
typedef struct scored {
    qf_graph *g;
    qf_engine *e;
    int64_t top1, top5;
    int classes;
} scored;

/* Loads a model for evaluation at `precision`: an ONNX model is FP32 or, with
 * fp16, rewritten to FP16 here (INT8 needs calibration: use qforge quant); a
 * .qfm runs at the precisions stored in it. */
static qf_status scored_open(scored *s, const char *path, int batch, const char *precision, qf_engine_opts *eo,
                             bool device_given, qf_qfm_meta *meta)
{
    memset(s, 0, sizeof *s);
    qf_precision p = QF_PREC_FP32;
    bool qfm = qf_qfm_probe(path);
    if (precision && !qfm) {
        QF_CHECK_CLI(qf_precision_parse(precision, &p));
        if (p == QF_PREC_INT8)
            return qf_error(QF_ERR_USAGE, "%s: --precision int8 needs a calibrated model: run qforge calib and "
                            "qforge quant, then evaluate the .qfm", path);
    }
    QF_CHECK_CLI(cli_load_model(path, batch, &s->g, meta));
    if (p != QF_PREC_FP32) {
        qf_quant_opts qo;
        qf_quant_opts_init(&qo);
        qo.precision = p;
        QF_CHECK_CLI(qf_quantize(s->g, NULL, &qo, NULL));
    }
    if (s->g->n_outputs < 1) return qf_error(QF_ERR_INVALID, "%s: model has no output", path);
    const qf_value *out = &s->g->values[s->g->outputs[0]];
    if (out->dtype != QF_F32 || out->ndim < 1 || out->dims[0] != batch)
        return qf_error(QF_ERR_UNSUPPORTED, "%s: output %s must be float scores (N, classes)", path, out->name);
    s->classes = (int)(qf_value_numel(out) / batch);
    return cli_engine_create(s->g, eo, device_given, &s->e);
}

static void scored_close(scored *s)
{
    qf_engine_free(s->e);
    qf_graph_free(s->g);
}

/* Rank of class `label` among n scores (0 = top), ties counted against it. */
static int rank_of(const float *x, int n, int label)
{
    int r = 0;
    for (int i = 0; i < n; i++)
        if (i != label && x[i] >= x[label]) r++;
    return r;
}

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

static void tally(scored *s, const float *scores, int label)
{
    if (label < 0 || label >= s->classes) return;
    int r = rank_of(scores, s->classes, label);
    s->top1 += r < 1;
    s->top5 += r < 5;
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
    const char *model = NULL, *reference = NULL, *precision = NULL, *device = NULL;
    int batch = 32;
    bool json = false;
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
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            cli_quiet = true;
        } else if (!strcmp(a, "--reference") || !strcmp(a, "--precision") || !strcmp(a, "--device")) {
            if (!next) return cli_usage_error("eval", "%s needs a value", a);
            if (a[2] == 'r') reference = next;
            else if (a[2] == 'p') precision = next;
            else device = next;
            i++;
        } else if (!strcmp(a, "--batch")) {
            if (!cli_parse_int("eval", a, next, 1, 4096, &batch)) return EXIT_USAGE;
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
    qf_engine_opts eo = {0};
    bool device_given;
    if (cli_device_opts(device, &eo, &device_given) != QF_OK) return cli_fail(QF_ERR_USAGE);

    scored m, ref = {0};
    qf_dataset *ds = NULL;
    qf_loader *ld = NULL;
    float *in = NULL;
    int *labels = NULL;
    int rc = EXIT_FAIL;
    qf_qfm_meta meta;
    qf_status st = scored_open(&m, model, batch, precision, &eo, device_given, &meta);
    if (st == QF_OK) st = image_opts_use_stored(&io, &meta);
    if (st == QF_OK && reference) st = scored_open(&ref, reference, batch, NULL, &eo, device_given, NULL);
    if (st == QF_OK && reference && ref.classes != m.classes)
        st = qf_error(QF_ERR_INVALID, "%s has %d outputs per image but %s has %d", model, m.classes, reference,
                      ref.classes);
    if (st == QF_OK) st = cli_preprocess_for_model(m.g, &io.pp);
    if (st == QF_OK) st = image_opts_dataset(&io, &ds);
    qf_loader_options lo = {.batch = batch, .threads = image_opts_decode_threads(&io, eo.device), .strict = io.strict};
    if (st == QF_OK) st = qf_loader_create(ds, &io.pp, &lo, &ld);
    if (st != QF_OK) {
        rc = cli_fail(st);
        goto out;
    }
    const qf_value *inv = &m.g->values[m.g->inputs[0]];
    size_t per_image = (size_t)(qf_value_numel(inv) / batch);
    in = calloc((size_t)batch * per_image, sizeof *in);
    labels = calloc((size_t)batch, sizeof *labels);
    if (!in || !labels) {
        rc = cli_fail(qf_error(QF_ERR_NOMEM, "out of memory"));
        goto out;
    }
    bool labeled = qf_dataset_has_labels(ds);
    int64_t images = 0, agree = 0;
    double sig = 0, noise = 0;
    progress pr;
    progress_start(&pr, "eval", qf_dataset_count(ds));
    for (;;) {
        int count = 0;
        st = qf_loader_next(ld, in, labels, &count);
        if (st != QF_OK || count == 0) break;
        /* the engine runs full batches: a short last batch is zero-padded */
        if (count < batch) memset(in + (size_t)count * per_image, 0, (size_t)(batch - count) * per_image * sizeof *in);
        memcpy(qf_engine_input(m.e, 0), in, (size_t)batch * per_image * sizeof *in);
        if ((st = qf_engine_run(m.e)) != QF_OK) break;
        const float *out = qf_engine_output(m.e, 0);
        const float *rout = NULL;
        if (reference) {
            memcpy(qf_engine_input(ref.e, 0), in, (size_t)batch * per_image * sizeof *in);
            if ((st = qf_engine_run(ref.e)) != QF_OK) break;
            rout = qf_engine_output(ref.e, 0);
        }
        for (int b = 0; b < count; b++) {
            const float *o = out + (size_t)b * m.classes;
            tally(&m, o, labels[b]);
            if (rout) {
                const float *r = rout + (size_t)b * m.classes;
                tally(&ref, r, labels[b]);
                agree += argmax_index(o, m.classes) == argmax_index(r, m.classes);
                for (int k = 0; k < m.classes; k++) {
                    sig += (double)r[k] * r[k];
                    noise += (double)(o[k] - r[k]) * (o[k] - r[k]);
                }
            }
        }
        images += count;
        progress_update(&pr, images);
    }
    double secs = progress_end(&pr);
    if (st != QF_OK) {
        rc = cli_fail(st);
        goto out;
    }
    int64_t skipped = qf_loader_skipped(ld);
    if (skipped) qf_log(QF_LOG_WARN, "%lld file(s) could not be decoded and were skipped", (long long)skipped);
    /* identical outputs have unbounded SQNR: report a large finite number */
    double sqnr = noise > 0 ? 10 * log10(sig / noise) : 300.0;
    if (sqnr > 300.0) sqnr = 300.0;
    double ips = secs > 0 ? images / secs : 0;
    const char *precision_label = model_precision(m.g);
    char devbuf[32];
    const char *device_label = cli_device_name(&eo, devbuf, sizeof devbuf);
    if (json) {
        printf("{\"model\": ");
        json_string(stdout, model);
        printf(", \"precision\": \"%s\", \"device\": \"%s\", \"images\": %lld, ", precision_label, device_label, (long long)images);
        json_frac("top1", m.top1, images, labeled, true);
        json_frac("top5", m.top5, images, labeled, true);
        if (reference) {
            printf("\"reference\": {");
            json_frac("top1", ref.top1, images, labeled, true);
            json_frac("top5", ref.top5, images, labeled, true);
            printf("\"agreement\": %.6f, \"sqnr_db\": %.3f}, ", images ? (double)agree / images : 0.0, sqnr);
        } else {
            printf("\"reference\": null, ");
        }
        printf("\"skipped\": %lld, \"images_per_second\": %.1f}\n", (long long)skipped, ips);
    } else {
        printf("model      %s (%s, %s)\nimages     %lld", model, precision_label, device_label, (long long)images);
        if (skipped) printf(" (%lld skipped)", (long long)skipped);
        printf("\n");
        if (labeled)
            printf("top1       %.4f\ntop5       %.4f\n", (double)m.top1 / images, (double)m.top5 / images);
        if (reference) {
            if (labeled)
                printf("reference  top1 %.4f  top5 %.4f\n", (double)ref.top1 / images, (double)ref.top5 / images);
            printf("agreement  %.4f\nsqnr       %.2f dB\n", (double)agree / images, sqnr);
        }
        printf("speed      %.1f images/s\n", ips);
    }
    rc = EXIT_OK;
out:
    free(in);
    free(labels);
    qf_loader_free(ld);
    qf_dataset_free(ds);
    scored_close(&m);
    if (reference) scored_close(&ref);
    return rc;
}
