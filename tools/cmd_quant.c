/* qforge quant MODEL.onnx: rewrite an FP32 model to INT8/FP16 and write the
 * deployable .qfm (optionally also standard ONNX with QuantizeLinear/
 * DequantizeLinear). With --images DIR it is the whole job in one command:
 * calibrate on part of DIR, quantize, check the result against FP32 on the
 * rest of DIR (held out from calibration) and time it; --calib TABLE
 * quantizes with a table from qforge calib. A model quantized elsewhere (Q/DQ
 * or QOperator ONNX) needs neither: its own scales are kept. */
#include "config.h"
#include "cli.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char quant_help[] =
    "usage: qforge quant MODEL.onnx --images DIR [-o MODEL.qfm] [--precision int8|fp16|best|fast] [PREPROCESS]\n"
    "                    [-n COUNT] [--held-out COUNT] [--max-drop POINTS] [LABELS] [--method M]\n"
    "                    [--calib-out TABLE.calib] [--report FILE.html] [--device D] [--batch B]\n"
    "                    [--threads T] [--json] [--strict]\n"
    "       qforge quant MODEL.onnx --calib TABLE.calib [--precision P] [--method M] [-o MODEL.qfm]\n"
    "       qforge quant MODEL-QDQ.onnx [-o MODEL.qfm]   (a Q/DQ or QOperator model: its own scales)\n"
    "  both: [--per-tensor-weights] [--asymmetric | --zero-points all|two-sided|unpadded|none] [--int8-attention]\n"
    "        [--fp16-se] [--equalize] [--fp16-layers NAME,...]\n"
    "        [--export-onnx FILE.onnx] [--force] [--quiet]\n"
    "  --equalize  cross-layer equalization of the FP32 graph before calibrating and quantizing\n"
    "              (the same function; with --calib, the table says whether: calib --equalize)\n"
    "  --bias-correction  with --images: add to each INT8 layer's bias the mean error INT8\n"
    "              brings to its output channels, measured on 32 calibration images\n"
    "  --optimize-rounding  with --images: round each INT8 weight up or down, whichever\n"
    "              brings its layer's output on 64 calibration images closer to FP32\n"
    "              (AdaRound; minutes on the CPU, see qforge-quant(1))\n"
    "  --zero-points all (default; = --asymmetric) | two-sided | unpadded | none: zero points\n"
    "              for activations the graph bounds from below (after Relu, HardSwish, SiLU, ...),\n"
    "              all 256 levels on their range; two-sided: also where the graph does not but\n"
    "              the calibrated minimum lies above -threshold; unpadded: not on inputs of dense\n"
    "              convs that read padding; none: symmetric (GPU: ResNets 6-12 % faster)\n"
    "  --int8-attention  MatMuls of two activations (attention's QK^T and AV) in INT8 too\n"
    "              (per-tensor scales, exact int32 products); without it they stay FP16\n"
    "  --fp16-se   the convs around each squeeze-excitation block in FP16: the one whose\n"
    "              output the block reads and the one after its gate (more accurate on SE\n"
    "              models; GPU and CPU then differ by FP16's rounding; see qforge-quant(1))\n"
    "  --images:   calibrate on up to COUNT images of DIR (default 500), quantize, and check\n"
    "              the model against FP32 on up to --held-out others (default 500)\n"
    "  --precision int8 (default) | fp16 | fp32 | best (INT8, the layers that cost the most\n"
    "              agreement returned to FP16 until its loss is within --max-drop, default 0.5)\n"
    "              | fast (INT8, the layers that run faster in FP16 on --device returned to FP16,\n"
    "              timed at batch 256 on a GPU)\n"
    "  --fp16-layers  with --precision int8: these nodes (as `qforge info --nodes` names\n"
    "              them) stay FP16, the rest INT8 (what --precision best chose, say)\n"
    "  --method    with --images, how to calibrate (as qforge calib); with --calib, which\n"
    "              threshold of a `calib --method all` table to use\n"
    "  See qforge-quant(1) and qforge-model(5).\n";

/* Images each part of DIR takes at most, unless -n / --held-out say otherwise. */
#define DEFAULT_PART 500
/* The fewest held-out images a check is made on. */
#define MIN_HELD_OUT 10
/* --precision best ranks layers on at most this many calibration images. */
#define SENSITIVITY_IMAGES 100

typedef struct quant_args {
    const char *model, *calib, *precision, *method, *out_path, *onnx_out, *calib_out, *report, *device;
    bool per_tensor, force, json, best, fast; /* best, fast: --precision best / fast, searches */
    const char *zero_points; /* --zero-points MODE (--asymmetric: all); NULL: the library's default */
    bool int8_attention;   /* --int8-attention: MatMuls of two activations in INT8 */
    bool fp16_se;          /* --fp16-se: the convs around squeeze-excitation blocks in FP16 */
    bool equalize;         /* --equalize, or a table calibrated with it: every graph of MODEL is equalized */
    bool equalize_told;    /* its summary line was printed (the graph is loaded several times) */
    bool bias_correction;  /* --bias-correction: measured on the calibration part */
    qf_bias_fix *bias_fix; /* its corrections, once measured */
    bool optimize_rounding; /* --optimize-rounding: learned on the calibration part */
    qf_adaround *adaround;  /* the rounding, once learned */
    bool device_given;   /* --device: no fallback to the CPU */
    double max_drop;     /* agreement points */
    int held_out;        /* --held-out */
    int batch;           /* --batch, 0 = the commands' defaults */
    char *fp16_list;     /* --fp16-layers, split in place at its commas */
    const char **fp16_layers;
    int n_fp16_layers;
    image_opts io;
} quant_args;

/* MODEL as it is: a .qfm, or ONNX prepared but not made INT8 (a Q/DQ model
 * keeps its QuantizeLinear/DequantizeLinear for qf_quantize to read). */
static qf_status load_as_is(const char *path, int batch, qf_graph **g)
{
    if (qf_qfm_probe(path)) return cli_load_model(path, batch, g, NULL);
    qf_load_opts lo = {.batch = batch};
    return qf_model_load(path, &lo, g);
}

/* MODEL as the quantizer sees it: load_as_is, cross-layer equalized where
 * --equalize (or the table) asks, the same way on every load. */
static qf_status load_source(quant_args *a, int batch, qf_graph **g)
{
    QF_CHECK_CLI(load_as_is(a->model, batch, g));
    qf_status st = a->equalize ? cli_equalize(*g, a->equalize_told) : QF_OK;
    a->equalize_told |= a->equalize;
    if (st != QF_OK) {
        qf_graph_free(*g);
        *g = NULL;
    }
    return st;
}

/* *own: whether MODEL carries its own quantization (Q/DQ or QOperator ONNX),
 * so that it needs no table. A model that does not load fails here. */
static qf_status model_has_qdq(const char *path, bool *own)
{
    *own = false;
    if (qf_qfm_probe(path)) return QF_OK;
    qf_graph *g;
    QF_CHECK_CLI(load_as_is(path, 1, &g));
    *own = qf_graph_has_qdq(g);
    qf_graph_free(g);
    return QF_OK;
}

/* --fp16-layers A,B,C into a->fp16_layers (a copy of the list, cut at its
 * commas; empty names skipped). False when out of memory. */
static bool split_names(const char *list, quant_args *a)
{
    a->fp16_list = strdup(list);
    a->fp16_layers = calloc(strlen(list) + 1, sizeof *a->fp16_layers);
    if (!a->fp16_list || !a->fp16_layers) return false;
    for (char *p = a->fp16_list, *comma; p; p = comma ? comma + 1 : NULL) {
        comma = strchr(p, ',');
        if (comma) *comma = '\0';
        if (*p) a->fp16_layers[a->n_fp16_layers++] = p;
    }
    return true;
}

static void free_args(quant_args *a)
{
    free(a->fp16_list);
    free(a->fp16_layers);
}

/* Parses argv into *a; returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, quant_args *a, char *default_out, size_t out_size)
{
    memset(a, 0, sizeof *a);
    image_opts_init(&a->io);
    a->io.want_folder_labels = true;
    a->precision = "int8";
    a->max_drop = -1;
    a->held_out = DEFAULT_PART;
    for (int i = 1; i < argc;) {
        const char *arg = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        int r = image_opts_parse(&a->io, "quant", argc, argv, &i);
        if (r < 0) return EXIT_USAGE;
        if (r > 0) continue;
        const char **target = NULL;
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            fputs(quant_help, stdout);
            return EXIT_OK;
        } else if (!strcmp(arg, "--quiet") || !strcmp(arg, "-q")) cli_quiet = true;
        else if (!strcmp(arg, "--per-tensor-weights")) a->per_tensor = true;
        else if (!strcmp(arg, "--asymmetric")) a->zero_points = "all";
        else if (!strcmp(arg, "--int8-attention")) a->int8_attention = true;
        else if (!strcmp(arg, "--fp16-se")) a->fp16_se = true;
        else if (!strcmp(arg, "--equalize")) a->equalize = true;
        else if (!strcmp(arg, "--bias-correction")) a->bias_correction = true;
        else if (!strcmp(arg, "--optimize-rounding")) a->optimize_rounding = true;
        else if (!strcmp(arg, "--force")) a->force = true;
        else if (!strcmp(arg, "--json")) a->json = true;
        else if (!strcmp(arg, "--held-out") || !strcmp(arg, "--batch")) {
            bool held = arg[2] == 'h';
            if (!cli_parse_int("quant", arg, next, held ? MIN_HELD_OUT : 1, held ? 1 << 30 : 4096,
                               held ? &a->held_out : &a->batch))
                return EXIT_USAGE;
            i++;
        } else if (!strcmp(arg, "--max-drop")) {
            char *end;
            a->max_drop = next ? strtod(next, &end) : -1;
            if (!next || end == next || *end || !(a->max_drop >= 0 && a->max_drop <= 100))
                return cli_usage_error("quant", "--max-drop expects agreement points in [0, 100], got '%s'",
                                       next ? next : "");
            i++;
        } else if (!strcmp(arg, "--zero-points")) {
            if (!next || !cli_zero_points(next, NULL, NULL))
                return cli_usage_error("quant", "--zero-points takes " CLI_ZERO_POINTS_MODES);
            a->zero_points = next;
            i += 2;
            continue;
        } else if (!strcmp(arg, "--calib")) target = &a->calib;
        else if (!strcmp(arg, "--precision")) target = &a->precision;
        else if (!strcmp(arg, "--method")) target = &a->method;
        else if (!strcmp(arg, "-o") || !strcmp(arg, "--output")) target = &a->out_path;
        else if (!strcmp(arg, "--export-onnx")) target = &a->onnx_out;
        else if (!strcmp(arg, "--calib-out")) target = &a->calib_out;
        else if (!strcmp(arg, "--report")) target = &a->report;
        else if (!strcmp(arg, "--device")) target = &a->device;
        else if (!strcmp(arg, "--fp16-layers")) {
            if (!next || !*next) return cli_usage_error("quant", "--fp16-layers needs node names, comma-separated");
            if (a->fp16_list) return cli_usage_error("quant", "--fp16-layers given twice");
            if (!split_names(next, a)) return cli_fail(qf_error(QF_ERR_NOMEM, "out of memory"));
            i += 2;
            continue;
        } else if (arg[0] == '-' && arg[1]) return cli_usage_error("quant", "unknown option %s", arg);
        else if (!a->model) a->model = arg;
        else return cli_usage_error("quant", "unexpected argument %s", arg);
        if (target) {
            if (!next) return cli_usage_error("quant", "%s needs a value", arg);
            *target = next;
            i++;
        }
        i++;
    }
    if (!a->model) return cli_usage_error("quant", "missing MODEL.onnx");
    a->best = !strcmp(a->precision, "best");
    a->fast = !strcmp(a->precision, "fast");
    qf_precision p;
    if (!a->best && !a->fast && qf_precision_parse(a->precision, &p) != QF_OK)
        return cli_usage_error("quant", "unknown precision '%s' (expected int8, fp16, fp32, best or fast)", a->precision);
    unsigned mask;
    double pct;
    if (a->method && qf_calib_method_parse(a->method, &mask, &pct) != QF_OK) return cli_fail(QF_ERR_USAGE);
    bool images = a->io.images != NULL, own = false;
    if (!images && !a->calib && strcmp(a->precision, "fp16") && strcmp(a->precision, "fp32")) {
        qf_status st = model_has_qdq(a->model, &own);
        if (st != QF_OK) return cli_fail(st);
    }
    if (!images && !a->calib && strcmp(a->precision, "fp16") && strcmp(a->precision, "fp32") && (a->best || a->fast || !own))
        return cli_usage_error("quant", "--precision %s needs --images DIR (or --calib TABLE.calib from qforge calib)",
                               a->precision);
    if ((a->best || a->fast) && !images)
        return cli_usage_error("quant", "--precision %s needs --images DIR to measure on", a->precision);
    if (a->bias_correction && !images)
        return cli_usage_error("quant", "--bias-correction needs --images DIR to measure on");
    if (a->optimize_rounding && !images)
        return cli_usage_error("quant", "--optimize-rounding needs --images DIR to learn on");
    if (a->max_drop >= 0 && !a->best) return cli_usage_error("quant", "--max-drop goes with --precision best");
    if (a->fp16_list && strcmp(a->precision, "int8"))
        return cli_usage_error("quant", "--fp16-layers goes with --precision int8 (best and fast choose their own)");
    if (a->zero_points && strcmp(a->zero_points, "none") && (!strcmp(a->precision, "fp16") || !strcmp(a->precision, "fp32")))
        return cli_usage_error("quant", "--asymmetric / --zero-points %s: zero points go with --precision int8, best or fast",
                               a->zero_points);
    if (a->int8_attention && (!strcmp(a->precision, "fp16") || !strcmp(a->precision, "fp32")))
        return cli_usage_error("quant", "--int8-attention goes with --precision int8, best or fast");
    if (a->fp16_se && (!strcmp(a->precision, "fp16") || !strcmp(a->precision, "fp32")))
        return cli_usage_error("quant", "--fp16-se goes with --precision int8, best or fast");
    if ((a->optimize_rounding || a->bias_correction) && (!strcmp(a->precision, "fp16") || !strcmp(a->precision, "fp32")))
        return cli_usage_error("quant", "%s goes with --precision int8, best or fast",
                               a->optimize_rounding ? "--optimize-rounding" : "--bias-correction");
    if (a->equalize && (!strcmp(a->precision, "fp16") || !strcmp(a->precision, "fp32")))
        return cli_usage_error("quant", "--equalize goes with --precision int8, best or fast");
    if (a->equalize && own)
        return cli_usage_error("quant", "--equalize: %s carries its own scales (QuantizeLinear/DequantizeLinear), "
                               "made for its own weights", a->model);
    if (a->max_drop < 0) a->max_drop = 0.5;
    if (!images && (a->calib_out || a->report || a->json))
        return cli_usage_error("quant", "%s goes with --images DIR",
                               a->calib_out ? "--calib-out" : a->report ? "--report" : "--json");
    if (a->calib && (a->calib_out || a->report))
        return cli_usage_error("quant", "%s comes from calibrating: not with --calib",
                               a->calib_out ? "--calib-out" : "--report");
    if (!a->out_path) {
        cli_default_output(a->model, ".qfm", default_out, out_size);
        a->out_path = default_out;
    }
    return -1;
}

/* The quantizer's options: the precision (best quantizes to INT8 and keeps
 * `floats` out of it), the threshold method and the weight scales. */
static qf_status quant_options(const quant_args *a, const qf_calib_table *t, const char *const *floats, int n_floats,
                               qf_quant_opts *qo)
{
    qf_quant_opts_init(qo);
    qo->per_tensor_weights = a->per_tensor;
    cli_zero_points(a->zero_points, qo, NULL);
    qo->int8_attention = a->int8_attention;
    qo->fp16_se = a->fp16_se;
    qo->float_nodes = floats ? floats : a->fp16_layers;
    qo->n_float_nodes = floats ? n_floats : a->n_fp16_layers;
    qo->bias_fix = a->bias_fix;
    qo->adaround = a->adaround;
    if (!a->best && !a->fast) QF_CHECK_CLI(qf_precision_parse(a->precision, &qo->precision));
    /* with --images, --method said how to calibrate; the table's default is then that method */
    if (!a->method || !a->calib) return QF_OK;
    unsigned mask;
    double pct;
    QF_CHECK_CLI(qf_calib_method_parse(a->method, &mask, &pct));
    if (mask == QF_CALIB_ALL || (mask & (mask - 1)))
        return qf_error(QF_ERR_USAGE, "--method picks one method of the table, not '%s'", a->method);
    for (int m = 0; m < QF_CALIB_METHOD_COUNT; m++)
        if (mask == 1u << m) qo->method = (qf_calib_method)m;
    if (t && !(t->methods & (1u << qo->method)))
        return qf_error(QF_ERR_INVALID, "%s: the table has no %s thresholds (calibrate with --method %s or all)",
                        a->calib, a->method, a->method);
    return QF_OK;
}

/* Index of the node called `name`, or -1. */
static int node_named(const qf_graph *g, const char *name)
{
    for (int i = 0; i < g->n_nodes; i++)
        if (!strcmp(g->nodes[i].name, name)) return i;
    return -1;
}

/* Loads MODEL at `batch` and quantizes it as asked. */
static qf_status quantized_graph(quant_args *a, const qf_calib_table *t, const char *const *floats, int n_floats,
                                 int batch, qf_graph **g, qf_quant_summary *sum)
{
    qf_quant_opts qo;
    QF_CHECK_CLI(quant_options(a, t, floats, n_floats, &qo));
    QF_CHECK_CLI(load_source(a, batch, g));
    qf_status st = QF_OK;
    for (int k = 0; k < qo.n_float_nodes && st == QF_OK; k++)
        if (node_named(*g, qo.float_nodes[k]) < 0)
            st = qf_error(QF_ERR_USAGE, "--fp16-layers: %s has no node named '%s' (qforge info --nodes lists them)",
                          a->model, qo.float_nodes[k]);
    if (st == QF_OK) st = qf_quantize(*g, t, &qo, sum);
    if (st != QF_OK) {
        qf_graph_free(*g);
        *g = NULL;
    }
    return st;
}

/* Quantizes and writes the .qfm (and the Q/DQ ONNX file when asked), with the
 * table's method, image count and preprocessing as provenance. */
static qf_status write_model(quant_args *a, const qf_calib_table *t, const char *const *floats, int n_floats,
                             const char *sha, qf_quant_summary *sum)
{
    qf_qfm_meta meta;
    qf_qfm_meta_init(&meta);
    snprintf(meta.source_sha256, sizeof meta.source_sha256, "%s", sha);
    qf_quant_opts qo;
    QF_CHECK_CLI(quant_options(a, t, floats, n_floats, &qo));
    meta.precision = qo.precision;
    if (t) {
        qf_calib_method used = qo.method == QF_CALIB_METHOD_COUNT ? qf_calib_table_default_method(t) : qo.method;
        snprintf(meta.calib_method, sizeof meta.calib_method, "%s", qf_calib_method_name(used));
        meta.calib_images = t->images;
        snprintf(meta.preprocess, sizeof meta.preprocess, "%s", t->preprocess ? t->preprocess : "");
    }
    qf_graph *g;
    QF_CHECK_CLI(quantized_graph(a, t, floats, n_floats, 1, &g, sum));
    if (sum->from_model) snprintf(meta.scale_source, sizeof meta.scale_source, "model");
    else if (t) snprintf(meta.scale_source, sizeof meta.scale_source, "calibration");
    qf_status st = qf_qfm_write(g, &meta, a->out_path);
    if (st == QF_OK && a->onnx_out) st = qf_export_onnx(g, a->onnx_out);
    qf_graph_free(g);
    return st;
}

/* ---- the images: a calibration part and a held-out part ----------------------------- */

/* How a folder of `found` images is shared: the held-out part takes --held-out
 * images or half the folder, whichever is fewer; calibration takes -n (default
 * 500) of the rest; the held-out images come from what calibration left. */
static void split_counts(int64_t found, int64_t want_calib, int64_t want_held, int64_t *calib, int64_t *held)
{
    int64_t h = want_held < found / 2 ? want_held : found / 2;
    *calib = want_calib < found - h ? want_calib : found - h;
    *held = want_held < found - *calib ? want_held : found - *calib;
}

/* The two parts of DIR: calibration = the -n subset qforge calib would take
 * (evenly spaced), held out = evenly spaced among the files it left. */
static qf_status split_images(quant_args *a, qf_dataset **cal, qf_dataset **held, int64_t *found)
{
    int64_t want_calib = a->io.count > 0 ? a->io.count : DEFAULT_PART;
    a->io.count = 0; /* image_opts_dataset then keeps the whole folder */
    QF_CHECK_CLI(image_opts_dataset(&a->io, cal));
    *found = qf_dataset_count(*cal);
    int64_t c, h;
    split_counts(*found, want_calib, a->held_out, &c, &h);
    if (h < MIN_HELD_OUT)
        return qf_error(QF_ERR_INVALID, "%s: found %lld images; quant needs at least %d, to calibrate on some and "
                        "check the result on %d others", a->io.images, (long long)*found, 2 * MIN_HELD_OUT,
                        MIN_HELD_OUT);
    QF_CHECK_CLI(image_opts_dataset(&a->io, held));
    qf_dataset_subset(*cal, c);
    qf_dataset_subset_rest(*held, c);
    qf_dataset_subset(*held, h);
    return QF_OK;
}

/* progress_update from qf_calibrate's callback; the bar starts with the first batch */
static void calib_progress(void *user, int64_t done, int64_t total)
{
    progress *pr = user;
    if (done == 0) progress_start(pr, "calib", total);
    else progress_update(pr, done);
}

/* Calibrates on the calibration part (as qforge calib -n COUNT would) and keeps
 * the table and report when asked. */
static qf_status calibrate(quant_args *a, const qf_dataset *cal, const char *sha, qf_engine_opts *eo,
                           qf_calib_table **t)
{
    qf_calibrate_opts co;
    qf_calibrate_opts_init(&co);
    if (a->method) QF_CHECK_CLI(qf_calib_method_parse(a->method, &co.methods, &co.percentile));
    co.device = eo->device;
    co.device_index = eo->device_index;
    co.cpu_fallback = !a->device_given;
    co.threads = co.decode_threads = a->io.threads;
    co.strict = a->io.strict;
    co.model_sha256 = sha;
    cli_zero_points(a->zero_points, NULL, &co); /* auto judges on the grid quant will use */
    progress pr = {0};
    co.progress = calib_progress;
    co.progress_user = &pr;
    qf_graph *g;
    QF_CHECK_CLI(load_source(a, a->batch ? a->batch : 16, &g));
    qf_calib *hists = NULL;
    qf_calibrate_info info;
    qf_status st = qf_calibrate(g, cal, &a->io.pp, &co, t, a->report ? &hists : NULL, &info);
    if (pr.label) progress_end(&pr);
    if (st == QF_OK) cli_auto_summary(*t, &info);
    if (st == QF_OK) eo->device = info.device; /* after a fallback, every later engine runs there too */
    if (st == QF_OK && a->calib_out) st = qf_calib_table_write(*t, a->calib_out);
    if (st == QF_OK && a->report) st = qf_calib_report_write(a->report, hists, *t);
    qf_calib_free(hists);
    qf_graph_free(g);
    return st;
}

static qf_status bias_batch(void *user, const float *input, int images)
{
    return qf_bias_fix_run(user, input, images);
}

/* --bias-correction: measured on QF_CALIB_AUTO_IMAGES of the calibration part,
 * with the table's thresholds as the quantizer will use them. */
static qf_status measure_bias(quant_args *a, const qf_calib_table *t, const qf_dataset *cal)
{
    qf_quant_opts qo;
    QF_CHECK_CLI(quant_options(a, t, NULL, 0, &qo));
    qf_graph *g;
    QF_CHECK_CLI(load_source(a, a->batch ? a->batch : 16, &g));
    qf_status st = qf_bias_fix_create(g, t, &qo, a->io.threads, &a->bias_fix);
    int64_t images = 0;
    if (st == QF_OK)
        st = qf_calib_sample_batches(g, cal, &a->io.pp, QF_CALIB_AUTO_IMAGES, image_opts_decode_threads(&a->io, QF_DEVICE_CPU),
                                     a->io.strict, bias_batch, a->bias_fix, &images);
    if (st == QF_OK && !cli_quiet)
        fprintf(stderr, "qforge: bias correction of %d layers measured on %lld images\n",
                qf_bias_fix_layers(a->bias_fix), (long long)images);
    qf_graph_free(g);
    return st;
}

static qf_status rounding_batch(void *user, const float *input, int images)
{
    return qf_adaround_run(user, input, images);
}

/* The progress bar of the learning, a layer at a time, and the layers' error
 * ratios (learned against round-to-nearest, held-out positions). */
typedef struct rounding_progress {
    progress bar;
    double *ratio;
    int n;
} rounding_progress;

static void rounding_step(void *user, int index, int total, const qf_adaround_layer *l)
{
    rounding_progress *rp = user;
    (void)total;
    if (rp->ratio && l->nearest_error > 0.0) rp->ratio[rp->n++] = l->error / l->nearest_error;
    progress_update(&rp->bar, index + 1);
}

static int cmp_double(const void *x, const void *y)
{
    const double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* --optimize-rounding: sampled on QF_ADAROUND_IMAGES of the calibration part,
 * with the table's thresholds as the quantizer will use them, then learned
 * layer by layer; one line says what it cost and gained. */
static qf_status learn_rounding(quant_args *a, const qf_calib_table *t, const qf_dataset *cal)
{
    qf_quant_opts qo;
    QF_CHECK_CLI(quant_options(a, t, NULL, 0, &qo));
    qo.adaround = NULL;
    qo.bias_fix = NULL;
    qf_graph *g;
    QF_CHECK_CLI(load_source(a, a->batch ? a->batch : 16, &g));
    const int64_t have = qf_dataset_count(cal);
    qf_adaround_opts ao = {.images = have < QF_ADAROUND_IMAGES ? (int)have : QF_ADAROUND_IMAGES, .threads = a->io.threads};
    qf_status st = qf_adaround_create(g, t, &qo, &ao, &a->adaround);
    rounding_progress rp = {.ratio = calloc((size_t)qf_adaround_layers(a->adaround) + 1, sizeof *rp.ratio)};
    if (st == QF_OK && !rp.ratio) st = qf_error(QF_ERR_NOMEM, "out of memory");
    /* the bar (and the clock) start with the sampling, at 0 layers */
    progress_start_units(&rp.bar, "rounding", qf_adaround_layers(a->adaround), "layers");
    int64_t images = 0;
    if (st == QF_OK)
        st = qf_calib_sample_batches(g, cal, &a->io.pp, ao.images,
                                     image_opts_decode_threads(&a->io, QF_DEVICE_CPU), a->io.strict, rounding_batch,
                                     a->adaround, &images);
    if (st == QF_OK) st = qf_adaround_learn(a->adaround, rounding_step, &rp);
    const double seconds = progress_end(&rp.bar);
    if (st == QF_OK && !cli_quiet) {
        qsort(rp.ratio, (size_t)rp.n, sizeof *rp.ratio, cmp_double);
        if (rp.n)
            fprintf(stderr, "qforge: rounding learned for %d INT8 layers on %lld images in %.1f s: held-out output "
                    "error %.2fx round-to-nearest's (median layer; %.2fx to %.2fx)\n", qf_adaround_layers(a->adaround),
                    (long long)images, seconds, rp.ratio[rp.n / 2], rp.ratio[0], rp.ratio[rp.n - 1]);
        else
            fprintf(stderr, "qforge: rounding learned for no layer (%lld images, %.1f s)\n", (long long)images, seconds);
    }
    free(rp.ratio);
    qf_graph_free(g);
    return st;
}

/* ---- --precision best ----------------------------------------------------------------- */

/* Agreement lost against FP32, in points. */
static double loss_points(const eval_scores *s) { return 100.0 * (1.0 - eval_agreement(s)); }

/* Within --max-drop, allowing for the rounding of 100 * (1 - agree / images):
 * 1 of 200 images lost is 0.5000000000000004 points. */
static bool within_drop(const quant_args *a, const eval_scores *s) { return loss_points(s) <= a->max_drop + 1e-9; }

typedef struct ranked {
    const char *name;
    double sqnr;   /* best: output SQNR on the sensitivity images with this layer alone in FP16 */
    double ratio;  /* fast: its FP16 cost over its INT8 cost in the two profiles */
    int order;     /* graph order, to break ties */
} ranked;

static int cmp_ranked(const void *x, const void *y)
{
    const ranked *a = x, *b = y;
    if (a->sqnr != b->sqnr) return a->sqnr > b->sqnr ? -1 : 1;
    return a->order - b->order;
}

static int cmp_ratio(const void *x, const void *y)
{
    const ranked *a = x, *b = y;
    if (a->ratio != b->ratio) return a->ratio < b->ratio ? -1 : 1;
    return a->order - b->order;
}

/* Scores the model quantized with `floats` kept out of INT8 on ds against the
 * reference (whose outputs ref keeps after the first pass). */
static qf_status score_variant(quant_args *a, const qf_calib_table *t, const char *const *floats, int n_floats,
                               const qf_dataset *ds, qf_engine_opts *eo, eval_ref *ref, const char *label,
                               eval_scores *s)
{
    qf_graph *g;
    QF_CHECK_CLI(quantized_graph(a, t, floats, n_floats, ref->model->g->batch, &g, NULL));
    eval_model m;
    qf_status st = eval_model_adopt(&m, g, eo, a->device_given);
    if (st == QF_OK)
        st = eval_run(&m, ref, ds, &a->io.pp, image_opts_decode_threads(&a->io, eo->device), a->io.strict, label, s);
    eval_model_close(&m);
    return st;
}

/* The INT8 Conv/Gemm/MatMul layers of the fully INT8 model, in graph order. */
static qf_status int8_layers(quant_args *a, const qf_calib_table *t, ranked **out, int *n)
{
    qf_graph *g;
    QF_CHECK_CLI(quantized_graph(a, t, NULL, 0, 1, &g, NULL));
    *n = 0;
    *out = calloc((size_t)g->n_nodes + 1, sizeof **out);
    for (int i = 0; *out && i < g->n_nodes; i++) {
        const qf_node *nd = &g->nodes[i];
        if (nd->precision == QF_PREC_INT8 && (nd->op == QF_OP_CONV || nd->op == QF_OP_GEMM || nd->op == QF_OP_MATMUL))
            (*out)[(*n)++] = (ranked){.name = strdup(nd->name), .order = i};
    }
    qf_graph_free(g);
    for (int i = 0; *out && i < *n; i++)
        if (!(*out)[i].name) return qf_error(QF_ERR_NOMEM, "out of memory");
    return *out ? QF_OK : qf_error(QF_ERR_NOMEM, "out of memory");
}

/* --precision best: the INT8 layers are ranked by how much the output SQNR
 * against FP32 on (up to SENSITIVITY_IMAGES of) the calibration images rises
 * when each alone computes in FP16; the first m of that order return to FP16,
 * m found by bisection as the fewest whose agreement lost on the held-out
 * images is within --max-drop points (agreement rises with m all but
 * monotonically: bisection takes log2(layers) checks where a walk took up to
 * one per layer, the CPU's cost on deep models). *layers (n_layers) come out
 * in that order, the first n_floats returned; *s holds the held-out scores of
 * the model chosen. */
static qf_status best_search(quant_args *a, const qf_calib_table *t, const qf_dataset *sens,
                             const qf_dataset *held, qf_engine_opts *eo, eval_ref *ref_held, eval_model *ref,
                             ranked **layers, int *n_layers, int *n_floats, eval_scores *s)
{
    *n_floats = 0;
    QF_CHECK_CLI(int8_layers(a, t, layers, n_layers));
    QF_CHECK_CLI(score_variant(a, t, NULL, 0, held, eo, ref_held, "best", s));
    if (!cli_quiet)
        fprintf(stderr, "qforge: best: all %d INT8 layers: agreement %.4f (%.2f points lost, at most %.2f)\n",
                *n_layers, eval_agreement(s), loss_points(s), a->max_drop);
    if (within_drop(a, s) || *n_layers == 0) return QF_OK;
    float *saved = calloc((size_t)qf_dataset_count(sens) * ref->classes + 1, sizeof *saved);
    const char **names = calloc((size_t)*n_layers + 1, sizeof *names);
    qf_status st = saved && names ? QF_OK : qf_error(QF_ERR_NOMEM, "out of memory");
    eval_ref ref_sens = {.model = ref, .saved = saved};
    char label[64];
    for (int k = 0; k < *n_layers && st == QF_OK; k++) {
        eval_scores ss;
        snprintf(label, sizeof label, "rank %d/%d", k + 1, *n_layers);
        st = score_variant(a, t, &(*layers)[k].name, 1, sens, eo, &ref_sens, label, &ss);
        (*layers)[k].sqnr = eval_sqnr(&ss);
    }
    if (st == QF_OK) qsort(*layers, (size_t)*n_layers, sizeof **layers, cmp_ranked);
    for (int k = 0; names && k < *n_layers; k++) names[k] = (*layers)[k].name;
    /* lo fails (0 fails: checked above); hi passes, checked whenever it is
     * below n_layers, and every layer in FP16 is the answer if nothing fewer passes */
    int lo = 0, hi = *n_layers;
    eval_scores at_hi = {0};
    while (hi - lo > 1 && st == QF_OK) {
        const int mid = lo + (hi - lo) / 2;
        eval_scores sm;
        snprintf(label, sizeof label, "best %d FP16", mid);
        st = score_variant(a, t, names, mid, held, eo, ref_held, label, &sm);
        if (st != QF_OK) break;
        const bool pass = within_drop(a, &sm);
        if (!cli_quiet)
            fprintf(stderr, "qforge: best: %d layers to FP16 (the last %s): agreement %.4f (%.2f points lost)%s\n",
                    mid, names[mid - 1], eval_agreement(&sm), loss_points(&sm), pass ? "" : ", over --max-drop");
        if (pass) {
            hi = mid;
            at_hi = sm;
        } else {
            lo = mid;
        }
    }
    if (st == QF_OK && hi == *n_layers) st = score_variant(a, t, names, hi, held, eo, ref_held, "best", &at_hi);
    if (st == QF_OK) {
        *n_floats = hi;
        *s = at_hi;
    }
    free(names);
    free(saved);
    return st;
}

/* ---- --precision fast ----------------------------------------------------------------- */

/* The batch --precision fast times at: a GPU's throughput batch, the check's on the CPU. */
#define FAST_GPU_BATCH 256
/* A model with FP16 layers is kept only if it runs at least this much faster
 * than all-INT8: within timing noise, fewer FP16 layers win. */
#define FAST_MIN_GAIN 1.02

/* Node names of a graph, sorted, to ask whether the other model has a node. */
typedef struct name_set {
    const char **names;
    int n;
} name_set;

static int cmp_str(const void *x, const void *y) { return strcmp(*(const char *const *)x, *(const char *const *)y); }

static qf_status name_set_of(const qf_graph *g, name_set *s)
{
    s->n = g->n_nodes;
    s->names = calloc((size_t)g->n_nodes + 1, sizeof *s->names);
    if (!s->names) return qf_error(QF_ERR_NOMEM, "out of memory");
    for (int i = 0; i < g->n_nodes; i++) s->names[i] = g->nodes[i].name;
    qsort(s->names, (size_t)s->n, sizeof *s->names, cmp_str);
    return QF_OK;
}

static bool name_set_has(const name_set *s, const char *name)
{
    return bsearch(&name, s->names, (size_t)s->n, sizeof *s->names, cmp_str) != NULL;
}

static bool is_conversion(qf_op op)
{
    return op == QF_OP_QUANTIZE_LINEAR || op == QF_OP_DEQUANTIZE_LINEAR || op == QF_OP_CAST;
}

/* What layer `node` of g costs in the profile ms: its own time, plus the nodes
 * its precision brings that the other model (whose names are `other`) lacks:
 * downstream, the float activation and residual nodes the INT8 form fuses
 * away (and conversions out of it); upstream, the conversions feeding it.
 * `mark` (g->n_nodes, zeroed) is scratch, zeroed again on return. */
static double layer_ms(const qf_graph *g, const double *ms, int node, const name_set *other, int *queue, char *mark)
{
    int n = 0;
    queue[n++] = node;
    mark[node] = 1;
    for (int h = 0; h < n; h++) {
        const qf_node *x = &g->nodes[queue[h]];
        for (int j = 0; j < g->n_nodes; j++) {
            const qf_node *y = &g->nodes[j];
            if (mark[j] || name_set_has(other, y->name)) continue;
            bool linked = false;
            /* y reads x (downstream), or y is a conversion x reads (upstream) */
            for (int a = 0; a < y->n_in && !linked; a++)
                for (int b = 0; b < x->n_out && !linked; b++) linked = y->in[a] >= 0 && y->in[a] == x->out[b];
            for (int a = 0; a < x->n_in && !linked && is_conversion(y->op); a++)
                for (int b = 0; b < y->n_out && !linked; b++) linked = x->in[a] >= 0 && x->in[a] == y->out[b];
            if (linked) {
                mark[j] = 1;
                queue[n++] = j;
            }
        }
    }
    double sum = 0.0;
    for (int h = 0; h < n; h++) {
        sum += ms[queue[h]];
        mark[queue[h]] = 0;
    }
    return sum;
}

/* A quantized variant at the timing batch: built, timed (images/s) and, when
 * ms is given, profiled node by node. *g and *ms stay the caller's. */
static qf_status time_variant(quant_args *a, const qf_calib_table *t, const char *const *floats, int n_floats,
                              int batch, qf_engine_opts *eo, qf_graph **g, double **ms, double *ips)
{
    *g = NULL;
    if (ms) *ms = NULL;
    QF_CHECK_CLI(quantized_graph(a, t, floats, n_floats, batch, g, NULL));
    qf_engine *e = NULL;
    speed_result r;
    qf_status st = qf_engine_create(*g, eo, &e);
    if (st == QF_OK) st = speed_measure(e, *g, eo->device, 0, 0.5, 5, &r);
    if (st == QF_OK) *ips = r.ips;
    if (st == QF_OK && ms) {
        *ms = calloc((size_t)(*g)->n_nodes + 1, sizeof **ms);
        st = *ms ? qf_engine_profile(e, *ms) : qf_error(QF_ERR_NOMEM, "out of memory");
    }
    qf_engine_free(e);
    return st;
}

/* --precision fast: INT8, with the layers that run faster in FP16 on this
 * device returned to FP16, as TensorRT's INT8 + FP16 build picks a precision
 * per layer by speed. Both all-INT8 and every-layer-FP16 models are profiled
 * at the timing batch; a layer's cost in each is layer_ms. The layers whose
 * FP16 cost is below r times their INT8 cost, for r of 1.25, 1, 0.8 and 0.6, make
 * candidate models, each timed whole (conversions between precisions cost
 * what they cost), and the fastest model is kept: all-INT8 unless another is
 * FAST_MIN_GAIN faster. *layers (n_layers: every INT8 layer) come out with
 * the n_floats chosen first; *ips the kept model's images/s, *int8_ips the
 * all-INT8 model's. */
static qf_status fast_search(quant_args *a, const qf_calib_table *t, qf_engine_opts *eo, int batch, ranked **layers,
                             int *n_layers, int *n_floats, double *ips, double *int8_ips)
{
    *n_floats = 0;
    QF_CHECK_CLI(int8_layers(a, t, layers, n_layers));
    const int n = *n_layers;
    ranked *L = *layers;
    qf_graph *g8 = NULL, *g16 = NULL;
    double *ms8 = NULL, *ms16 = NULL, ips16 = 0.0;
    const char **names = calloc((size_t)n + 1, sizeof *names);
    name_set s8 = {0}, s16 = {0};
    int *queue = NULL;
    char *mark = NULL;
    qf_status st = names ? QF_OK : qf_error(QF_ERR_NOMEM, "out of memory");
    for (int k = 0; k < n && names; k++) names[k] = L[k].name;
    if (st == QF_OK) st = time_variant(a, t, NULL, 0, batch, eo, &g8, &ms8, int8_ips);
    if (st == QF_OK) st = time_variant(a, t, names, n, batch, eo, &g16, &ms16, &ips16);
    if (st == QF_OK) st = name_set_of(g8, &s8);
    if (st == QF_OK) st = name_set_of(g16, &s16);
    const int most = g8 && g16 ? (g8->n_nodes > g16->n_nodes ? g8->n_nodes : g16->n_nodes) : 0;
    queue = calloc((size_t)most + 1, sizeof *queue);
    mark = calloc((size_t)most + 1, 1);
    if (st == QF_OK && (!queue || !mark)) st = qf_error(QF_ERR_NOMEM, "out of memory");
    *ips = *int8_ips;
    if (st == QF_OK && !cli_quiet)
        fprintf(stderr, "qforge: fast: batch %d on %s: all %d layers INT8 %.1f images/s, all FP16 %.1f\n", batch,
                eo->device == QF_DEVICE_CPU ? "the CPU" : "the GPU", n, *int8_ips, ips16);
    for (int k = 0; k < n && st == QF_OK; k++) {
        const int i8 = node_named(g8, L[k].name), i16 = node_named(g16, L[k].name);
        const double c8 = i8 >= 0 ? layer_ms(g8, ms8, i8, &s16, queue, mark) : 0.0;
        const double c16 = i16 >= 0 ? layer_ms(g16, ms16, i16, &s8, queue, mark) : 0.0;
        L[k].ratio = c8 > 0.0 ? c16 / c8 : HUGE_VAL;
    }
    /* the candidates: the layers FP16 helps most first, cut at each ratio */
    qsort(L, (size_t)n, sizeof *L, cmp_ratio);
    for (int k = 0; k < n; k++) names[k] = L[k].name;
    static const double ratios[] = {1.25, 1.0, 0.8, 0.6};
    int best_m = 0, tried = -1;
    if (ips16 > *ips * FAST_MIN_GAIN) best_m = n, *ips = ips16;
    for (size_t r = 0; r < sizeof ratios / sizeof *ratios && st == QF_OK; r++) {
        int m = 0;
        while (m < n && L[m].ratio < ratios[r]) m++;
        if (m == 0 || m == n || m == tried) continue;
        tried = m;
        qf_graph *gm = NULL;
        double v = 0.0;
        st = time_variant(a, t, names, m, batch, eo, &gm, NULL, &v);
        qf_graph_free(gm);
        if (st == QF_OK && !cli_quiet)
            fprintf(stderr, "qforge: fast: %d layers FP16 (FP16 cost < %.1fx INT8's): %.1f images/s\n", m, ratios[r],
                    v);
        if (st == QF_OK && v > *ips && v > *int8_ips * FAST_MIN_GAIN) best_m = m, *ips = v;
    }
    if (st == QF_OK) *n_floats = best_m;
    free(queue);
    free(mark);
    free(s8.names);
    free(s16.names);
    free(names);
    free(ms8);
    free(ms16);
    qf_graph_free(g8);
    qf_graph_free(g16);
    return st;
}

/* ---- the summary ------------------------------------------------------------------------ */

typedef struct quant_report {
    qf_quant_summary sum;
    int64_t found, calib_images;
    eval_scores held;
    speed_result speed[2];
    int n_speed;
    const ranked *layers;      /* best, fast: the layers returned to FP16 first */
    int n_floats, n_layers;
    int fast_batch;            /* fast: the batch it timed at, */
    double fast_ips, int8_ips; /* the kept model's images/s there and all-INT8's */
    const char *device;
} quant_report;

/* The one line saying how many dead channels got a larger weight scale. */
static const char *rescaled_note(const qf_quant_summary *sum, char *buf, size_t size)
{
    snprintf(buf, size, "%d output channel%s of %d layer%s got a larger weight scale so that %s bias fits the int32 "
             "accumulator (weights near zero beside a bias)", sum->rescaled_channels,
             sum->rescaled_channels == 1 ? "" : "s", sum->rescaled_layers, sum->rescaled_layers == 1 ? "" : "s",
             sum->rescaled_channels == 1 ? "its" : "their");
    return buf;
}

static void print_text(const quant_args *a, const quant_report *r)
{
    const eval_scores *s = &r->held;
    const char *p = a->precision;
    printf("model      %s -> %s (%s, %s)\n", a->model, a->out_path, p, r->device);
    printf("nodes      %d INT8, %d FP16, %d FP32 (%d fused into INT8 epilogues, %d conversions)\n",
           r->sum.nodes[QF_PREC_INT8], r->sum.nodes[QF_PREC_FP16], r->sum.nodes[QF_PREC_FP32], r->sum.fused,
           r->sum.conversions);
    char buf[256];
    if (r->sum.rescaled_channels) printf("rescaled   %s\n", rescaled_note(&r->sum, buf, sizeof buf));
    if (a->calib)
        printf("images     %lld in %s: %lld held out beside the -n %lld part (table %s)\n", (long long)r->found,
               a->io.images, (long long)s->images, (long long)r->calib_images, a->calib);
    else
        printf("images     %lld in %s: %lld to calibrate on, %lld held out\n", (long long)r->found, a->io.images,
               (long long)r->calib_images, (long long)s->images);
    printf("held out   agreement with FP32 %.4f, SQNR %.2f dB\n", eval_agreement(s), eval_sqnr(s));
    if (s->labeled)
        printf("top1       %.4f (FP32 %.4f)\n", (double)s->top1 / s->images, (double)s->ref_top1 / s->images);
    if (a->best)
        printf("fp16       %d of %d INT8 layers returned to FP16 (--max-drop %.2f)", r->n_floats, r->n_layers, a->max_drop);
    if (a->fast)
        printf("fp16       %d of %d INT8 layers run FP16, faster so at batch %d: %.1f images/s, all INT8 %.1f",
               r->n_floats, r->n_layers, r->fast_batch, r->fast_ips, r->int8_ips);
    if (a->best || a->fast) {
        printf("%s", r->n_floats ? ":" : "");
        for (int k = 0; k < r->n_floats; k++) printf(" %s", r->layers[k].name);
        printf("\n");
    }
    printf("speed     ");
    for (int k = 0; k < r->n_speed; k++)
        printf(" %.1f images/s at batch %d%s", r->speed[k].ips, r->speed[k].batch, k + 1 < r->n_speed ? "," : "");
    printf(" (%s)\n", r->device);
}

static void print_json(const quant_args *a, const quant_report *r)
{
    const eval_scores *s = &r->held;
    printf("{\"model\": ");
    json_string(stdout, a->model);
    printf(", \"output\": ");
    json_string(stdout, a->out_path);
    printf(", \"precision\": \"%s\", \"device\": \"%s\", \"nodes\": {\"int8\": %d, \"fp16\": %d, \"fp32\": %d}, "
           "\"fused\": %d, \"conversions\": %d, \"rescaled_channels\": %d, \"rescaled_layers\": %d, "
           "\"int8_activations\": %d, \"zero_point_activations\": %d, \"zero_point_two_sided\": %d, "
           "\"images_found\": %lld, \"calibration_images\": %lld, ",
           a->precision, r->device, r->sum.nodes[QF_PREC_INT8], r->sum.nodes[QF_PREC_FP16],
           r->sum.nodes[QF_PREC_FP32], r->sum.fused, r->sum.conversions, r->sum.rescaled_channels,
           r->sum.rescaled_layers, r->sum.int8_activations, r->sum.zero_point_activations, r->sum.zero_point_two_sided, (long long)r->found,
           (long long)r->calib_images);
    printf("\"held_out\": {\"images\": %lld, \"agreement\": %.6f, \"sqnr_db\": %.3f, ", (long long)s->images,
           eval_agreement(s), eval_sqnr(s));
    if (s->labeled)
        printf("\"top1\": %.6f, \"reference_top1\": %.6f}", (double)s->top1 / s->images,
               (double)s->ref_top1 / s->images);
    else
        printf("\"top1\": null, \"reference_top1\": null}");
    printf(", \"fp16_layers\": [");
    for (int k = 0; k < r->n_floats; k++) {
        if (k) printf(", ");
        json_string(stdout, r->layers[k].name);
    }
    printf("]");
    if (a->fast)
        printf(", \"fast\": {\"batch\": %d, \"images_per_second\": %.1f, \"int8_images_per_second\": %.1f}",
               r->fast_batch, r->fast_ips, r->int8_ips);
    printf(", \"speed\": [");
    for (int k = 0; k < r->n_speed; k++)
        printf("%s{\"batch\": %d, \"images_per_second\": %.1f}", k ? ", " : "", r->speed[k].batch, r->speed[k].ips);
    printf("]}\n");
}

/* images/s of the written model at batch 1 and a large batch (256 on a GPU,
 * the check's batch on the CPU), short runs: a first figure, not a benchmark. */
static qf_status measure_speed(const quant_args *a, int check_batch, qf_engine_opts *eo, quant_report *r)
{
    int batches[2] = {1, eo->device == QF_DEVICE_CPU ? check_batch : 256};
    r->n_speed = 0;
    for (int k = 0; k < 2; k++) {
        qf_graph *g;
        qf_engine *e = NULL;
        QF_CHECK_CLI(cli_load_model(a->out_path, batches[k], &g, NULL));
        qf_status st = qf_engine_create(g, eo, &e);
        if (st == QF_OK) st = speed_measure(e, g, eo->device, 0, 0.5, 3, &r->speed[r->n_speed++]);
        qf_engine_free(e);
        qf_graph_free(g);
        QF_CHECK_CLI(st);
    }
    return QF_OK;
}

/* The one-command form: split DIR, calibrate (unless --calib gave the table),
 * quantize (best: search first), write, check on the held-out part, time. */
static int quant_images(quant_args *a, qf_calib_table *t, const char *sha)
{
    qf_engine_opts eo = {0};
    if (cli_device_opts(a->device, &eo, &a->device_given) != QF_OK) return cli_fail(QF_ERR_USAGE);
    const int check_batch = a->batch ? a->batch : 32;
    qf_dataset *cal = NULL, *held = NULL, *sens = NULL;
    eval_model ref = {0}, qm = {0};
    ranked *layers = NULL;
    float *saved = NULL;
    quant_report r;
    memset(&r, 0, sizeof r);
    const char **floats = NULL;
    qf_graph *probe = NULL;
    qf_status st = cli_load_model(a->model, 1, &probe, NULL);
    if (st == QF_OK && t && !a->io.pp_given && t->preprocess) st = qf_preprocess_parse(&a->io.pp, t->preprocess);
    if (st == QF_OK) st = cli_preprocess_for_model(probe, &a->io.pp);
    qf_graph_free(probe);
    if (st == QF_OK) st = split_images(a, &cal, &held, &r.found);
    if (st == QF_OK) r.calib_images = qf_dataset_count(cal);
    if (st == QF_OK && !t) st = calibrate(a, cal, sha, &eo, &t);
    if (st == QF_OK && a->optimize_rounding) st = learn_rounding(a, t, cal);
    if (st == QF_OK && a->bias_correction) st = measure_bias(a, t, cal);
    cli_log_level(QF_LOG_WARN); /* the summary tells what each quantization would say */
    if (st == QF_OK) st = eval_model_open(&ref, a->model, check_batch, NULL, &eo, a->device_given, NULL);
    eval_ref ref_held = {.model = &ref};
    if (st == QF_OK && a->best) {
        saved = calloc((size_t)qf_dataset_count(held) * ref.classes + 1, sizeof *saved);
        ref_held.saved = saved;
        st = saved ? image_opts_dataset(&a->io, &sens) : qf_error(QF_ERR_NOMEM, "out of memory");
        if (st == QF_OK) {
            qf_dataset_subset(sens, r.calib_images); /* the calibration part, */
            qf_dataset_subset(sens, SENSITIVITY_IMAGES); /* then evenly spaced within it */
            st = best_search(a, t, sens, held, &eo, &ref_held, &ref, &layers, &r.n_layers, &r.n_floats, &r.held);
        }
    }
    if (st == QF_OK && a->fast) {
        r.fast_batch = eo.device == QF_DEVICE_CPU ? check_batch : FAST_GPU_BATCH;
        st = fast_search(a, t, &eo, r.fast_batch, &layers, &r.n_layers, &r.n_floats, &r.fast_ips, &r.int8_ips);
    }
    if (st == QF_OK && (a->best || a->fast)) {
        floats = calloc((size_t)r.n_floats + 1, sizeof *floats);
        for (int k = 0; floats && k < r.n_floats; k++) floats[k] = layers[k].name;
        r.layers = layers;
    }
    if (st == QF_OK) st = write_model(a, t, floats, r.n_floats, sha, &r.sum);
    /* the check reads back the file just written, as qforge eval does */
    if (st == QF_OK) st = eval_model_open(&qm, a->out_path, check_batch, NULL, &eo, a->device_given, NULL);
    if (st == QF_OK)
        st = eval_run(&qm, &ref_held, held, &a->io.pp, image_opts_decode_threads(&a->io, eo.device), a->io.strict,
                      "check", &r.held);
    eval_model_close(&qm);
    eval_model_close(&ref);
    char devbuf[32];
    r.device = cli_device_name(&eo, devbuf, sizeof devbuf);
    if (st == QF_OK) st = measure_speed(a, check_batch, &eo, &r);
    if (st == QF_OK && r.held.skipped)
        qf_log(QF_LOG_WARN, "%lld held-out file(s) could not be decoded and were skipped", (long long)r.held.skipped);
    if (st == QF_OK && a->json) print_json(a, &r);
    else if (st == QF_OK) print_text(a, &r);
    int rc = st == QF_OK ? EXIT_OK : cli_fail(st);
    for (int k = 0; layers && k < r.n_layers; k++) free((char *)layers[k].name);
    free(layers);
    free(floats);
    free(saved);
    qf_dataset_free(sens);
    qf_dataset_free(cal);
    qf_dataset_free(held);
    qf_calib_table_free(t);
    qf_bias_fix_free(a->bias_fix);
    a->bias_fix = NULL;
    qf_adaround_free(a->adaround);
    a->adaround = NULL;
    return rc;
}

/* --calib: a table made on the equalized graph (calib --equalize) is used on
 * the graph equalized alike, asked or not; the quantizer refuses the other
 * mismatch (--equalize with a table made without it). */
static void follow_table(quant_args *a, const qf_calib_table *t)
{
    if (!t->equalized[0] || a->equalize) return;
    a->equalize = true;
    if (!cli_quiet) fprintf(stderr, "qforge: %s was calibrated on the equalized graph: equalizing alike\n", a->calib);
}

/* The command, its arguments parsed. */
static int quant_run(quant_args *a)
{
    char sha[65];
    qf_calib_table *t = NULL;
    qf_status st = qf_sha256_file(a->model, sha);
    if (st == QF_OK && a->calib) st = qf_calib_table_read(a->calib, &t);
    if (st == QF_OK && t) st = qf_calib_table_check_model(t, a->calib, sha, a->force);
    if (st == QF_OK && t) follow_table(a, t);
    bool own = false;
    if (st == QF_OK && a->io.images) st = model_has_qdq(a->model, &own);
    if (st == QF_OK && own)
        st = qf_error(QF_ERR_USAGE, "%s carries its own scales (QuantizeLinear/DequantizeLinear): quantize it without "
                      "--images (qforge eval measures it)", a->model);
    if (st == QF_OK && a->io.images) return quant_images(a, t, sha);
    qf_quant_summary sum;
    char buf[256];
    if (st == QF_OK) st = write_model(a, t, NULL, 0, sha, &sum);
    qf_calib_table_free(t);
    if (st != QF_OK) return cli_fail(st);
    if (!cli_quiet)
        fprintf(stderr, "qforge: wrote %s%s%s: %d INT8, %d FP16, %d FP32 nodes, %d fused, %d conversions%s\n",
                a->out_path, a->onnx_out ? " and " : "", a->onnx_out ? a->onnx_out : "", sum.nodes[QF_PREC_INT8],
                sum.nodes[QF_PREC_FP16], sum.nodes[QF_PREC_FP32], sum.fused, sum.conversions,
                sum.from_model ? "; scales from the model" : "");
    if (!cli_quiet && sum.rescaled_channels)
        fprintf(stderr, "qforge: %s\n", rescaled_note(&sum, buf, sizeof buf));
    if (!cli_quiet && sum.float_between_qdq)
        fprintf(stderr, "qforge: %d nodes have no INT8 form and compute in FP32 between the model's "
                        "QuantizeLinear/DequantizeLinear (qforge info --nodes names them)\n",
                sum.float_between_qdq);
    return EXIT_OK;
}

int cmd_quant(int argc, char **argv)
{
    quant_args a;
    char default_out[4096];
    int rc = parse_args(argc, argv, &a, default_out, sizeof default_out);
    if (rc < 0) rc = quant_run(&a);
    free_args(&a);
    return rc;
}
