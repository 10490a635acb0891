/* Model loading and image-folder options shared by calib, eval and run: one
 * place that turns command-line words into a prepared graph, a dataset with
 * labels and preprocessing that fits the model. */
#include "config.h"
#include "cli.h"
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

qf_status cli_load_model(const char *path, int batch, qf_graph **out, qf_qfm_meta *meta)
{
    if (meta) qf_qfm_meta_init(meta);
    /* a .qfm is known by its magic, whatever its name; anything else is read as ONNX */
    if (qf_qfm_probe(path)) return qf_qfm_read(path, batch, out, meta);
    qf_load_opts lo = {.batch = batch};
    QF_CHECK_CLI(qf_model_load(path, &lo, out));
    if (!qf_graph_has_qdq(*out)) return QF_OK;
    /* quantized elsewhere: qforge's INT8 graph with the model's scales */
    qf_quant_summary sum;
    qf_status st = qf_quantize(*out, NULL, NULL, &sum);
    if (st != QF_OK) {
        qf_graph_free(*out);
        *out = NULL;
        return st;
    }
    qf_log(QF_LOG_INFO, "%s: quantized elsewhere; run as INT8 with the model's own scales: %d INT8 nodes, %d FP32 "
           "(%d between its QuantizeLinear/DequantizeLinear, their rounding kept)",
           path, sum.nodes[QF_PREC_INT8], sum.nodes[QF_PREC_FP32], sum.float_between_qdq);
    if (meta) snprintf(meta->scale_source, sizeof meta->scale_source, "model");
    return QF_OK;
}

int image_opts_decode_threads(const image_opts *o, qf_device_kind engine)
{
    return o->threads > 0 ? o->threads : qf_loader_default_threads(engine == QF_DEVICE_CPU);
}

qf_status image_opts_use_stored(image_opts *o, const qf_qfm_meta *meta)
{
    if (o->pp_given || !meta->preprocess[0]) return QF_OK;
    qf_status st = qf_preprocess_parse(&o->pp, meta->preprocess);
    if (st != QF_OK) return qf_error_prefix(st, "stored preprocessing '%s'", meta->preprocess);
    return QF_OK;
}

qf_status cli_device_opts(const char *device, qf_engine_opts *eo, bool *given)
{
    *given = device != NULL;
    if (device) return qf_device_parse(device, &eo->device, &eo->device_index);
#ifdef QF_HAVE_CUDA
    eo->device = QF_DEVICE_CUDA; /* qforge-eval(1), qforge-calib(1): cuda when a GPU is usable, else cpu */
#else
    eo->device = QF_DEVICE_CPU;
#endif
    eo->device_index = 0;
    return QF_OK;
}

qf_status cli_engine_create(const qf_graph *g, qf_engine_opts *eo, bool device_given, qf_engine **out)
{
    return device_given ? qf_engine_create(g, eo, out) : qf_engine_create_or_cpu(g, eo, out);
}

qf_status cli_batch_hint(qf_status st, const char *path, int batch, const qf_engine_opts *eo)
{
    if (st != QF_ERR_NOMEM || batch <= 1) return st;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", qf_error_message());
    qf_graph *g = NULL;
    int fit = batch;
    qf_engine_opts cpu = {.device = QF_DEVICE_CPU};
    if (cli_load_model(path, 1, &g, NULL) != QF_OK) g = NULL;
    /* no usable GPU: where cli_engine_create would fall back, the CPU's memory counts */
    if (g && qf_engine_max_batch(g, eo, batch, &fit) != QF_OK && qf_engine_max_batch(g, &cpu, batch, &fit) != QF_OK)
        fit = batch;
    qf_graph_free(g);
    /* the estimate says the batch fits: the failure was something else, and no hint helps */
    if (fit >= batch) return qf_error(st, "%s", msg);
    if (fit < 1) return qf_error(st, "%.900s; not even batch 1 fits", msg);
    return qf_error(st, "%.900s; batch %d would fit (--batch %d)", msg, fit, fit);
}

const char *cli_device_name(const qf_engine_opts *eo, char *buf, size_t size)
{
    if (eo->device == QF_DEVICE_CPU) return "cpu";
    snprintf(buf, size, eo->device_index ? "cuda:%d" : "cuda", eo->device_index);
    return buf;
}

void cli_default_output(const char *model, const char *ext, char *out, size_t size)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", model);
    char *base = basename(tmp);
    char *dot = strrchr(base, '.');
    if (dot && dot != base) *dot = 0;
    snprintf(out, size, "%s%s", base, ext);
}

qf_status cli_equalize(qf_graph *g, bool quiet)
{
    qf_equalize_info info;
    QF_CHECK_CLI(qf_graph_equalize(g, &info));
    if (quiet || cli_quiet) return QF_OK;
    fprintf(stderr, "qforge: equalized %d of %d conv pairs (%d through a Clip such as ReLU6): %lld of %lld channels "
            "rescaled in %d sweep%s; weight-range imbalance (mean |log2 r1/r2|) %.2f -> %.2f\n", info.pairs_moved,
            info.pairs, info.pairs_clipped, (long long)info.channels_moved, (long long)info.channels, info.sweeps,
            info.sweeps == 1 ? "" : "s", info.imbalance_before, info.imbalance_after);
    return QF_OK;
}

bool cli_zero_points(const char *mode, qf_quant_opts *qo, qf_calibrate_opts *co)
{
    static const char *const modes[] = {"all", "two-sided", "unpadded", "none"};
    const int n = (int)(sizeof modes / sizeof *modes);
    int m = 0;
    while (mode && m < n && strcmp(mode, modes[m])) m++;
    if (m == n) return false;
    qf_quant_opts q;
    qf_quant_opts_init(&q);
    if (mode) {
        q.asymmetric = strcmp(mode, "none") != 0;
        q.asymmetric_unpadded = !strcmp(mode, "unpadded");
        q.asymmetric_two_sided = !strcmp(mode, "two-sided");
    }
    if (qo) {
        qo->asymmetric = q.asymmetric;
        qo->asymmetric_unpadded = q.asymmetric_unpadded;
        qo->asymmetric_two_sided = q.asymmetric_two_sided;
    }
    /* unpadded is judged as all: the few tensors it leaves symmetric get thresholds judged with a zero point */
    if (co) {
        co->auto_zero_points = q.asymmetric;
        co->auto_two_sided = q.asymmetric_two_sided;
    }
    return true;
}

qf_status cli_preprocess_for_model(const qf_graph *g, qf_preprocess *pp)
{
    if (g->n_inputs != 1)
        return qf_error(QF_ERR_UNSUPPORTED, "%s: image commands need a model with one input (it has %d)", g->source,
                        g->n_inputs);
    const qf_value *in = &g->values[g->inputs[0]];
    if (in->ndim != 4 || in->dtype != QF_F32)
        return qf_error(QF_ERR_UNSUPPORTED, "%s: input %s must be a float (N,C,H,W) image tensor", g->source, in->name);
    qf_status st = qf_preprocess_fit(pp, in->ndim, in->dims);
    if (st != QF_OK) return qf_error_prefix(st, "%s: input %s", g->source, in->name);
    return QF_OK;
}

void image_opts_init(image_opts *o)
{
    memset(o, 0, sizeof *o);
    qf_preprocess_init(&o->pp);
}

int image_opts_parse(image_opts *o, const char *cmd, int argc, char **argv, int *i)
{
    const char *a = argv[*i], *next = *i + 1 < argc ? argv[*i + 1] : NULL;
    const char *const *slot = NULL;
    const char **target = NULL;
    if (!strcmp(a, "--images")) target = &o->images;
    else if (!strcmp(a, "--classes")) target = &o->classes;
    else if (!strcmp(a, "--synsets")) target = &o->synsets;
    else if (!strcmp(a, "--labels")) target = &o->labels;
    (void)slot;
    if (target) {
        if (!next) {
            cli_usage_error(cmd, "%s needs a value", a);
            return -1;
        }
        *target = next;
        *i += 2;
        return 1;
    }
    if (!strcmp(a, "-n") || !strcmp(a, "--threads")) {
        int v;
        if (!cli_parse_int(cmd, a, next, a[1] == 'n' ? 1 : 0, 1 << 30, &v)) return -1;
        if (a[1] == 'n') o->count = v;
        else o->threads = v;
        *i += 2;
        return 1;
    }
    if (!strcmp(a, "--strict")) {
        o->strict = true;
        *i += 1;
        return 1;
    }
    int used = 0;
    qf_status st = qf_preprocess_option(&o->pp, a, next, &used);
    if (st != QF_OK) {
        fprintf(stderr, "qforge %s: %s\n", cmd, qf_error_message());
        return -1;
    }
    if (used) {
        o->pp_given = true;
        *i += used;
        return 1;
    }
    return 0;
}

/* Class folders are the label source only when every image sits in one. */
static bool all_in_subfolders(const qf_dataset *ds)
{
    for (int64_t i = 0; i < qf_dataset_count(ds); i++)
        if (!strchr(qf_dataset_path(ds, i), '/')) return false;
    return true;
}

qf_status image_opts_dataset(const image_opts *o, qf_dataset **out)
{
    qf_dataset *ds;
    QF_CHECK_CLI(qf_dataset_open(o->images, &ds));
    qf_status st = QF_OK;
    if (o->synsets) st = qf_dataset_label_synsets(ds, o->synsets);
    else if (o->labels) st = qf_dataset_label_list(ds, o->labels);
    else if (o->classes || (o->want_folder_labels && all_in_subfolders(ds)))
        st = qf_dataset_label_folders(ds, o->classes);
    if (st != QF_OK) {
        qf_dataset_free(ds);
        return st;
    }
    qf_dataset_subset(ds, o->count);
    *out = ds;
    return QF_OK;
}
