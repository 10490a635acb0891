/* qforge info MODEL: what a model is -- inputs and outputs with shapes, op
 * counts, parameter count and FLOPs per image; for a quantized .qfm also its
 * provenance, preprocessing, precision per node and quantization parameters.
 * qforge info --ops: which op each engine runs at which precision. */
#include "config.h"
#include "cli.h"
#include <getopt.h>
#include <stdio.h>
#include <string.h>

static const char info_help[] =
    "usage: qforge info MODEL [--nodes]\n"
    "       qforge info --ops\n"
    "  Prints the model's inputs and outputs with shapes (at batch 1), op counts,\n"
    "  parameter count and FLOPs per image. MODEL is ONNX or a quantized .qfm; for\n"
    "  a .qfm also where it came from (calibrated, or the source model's own\n"
    "  scales), its preprocessing and nodes per precision. A Q/DQ or QOperator\n"
    "  ONNX model is shown as qforge runs it: INT8 with the model's scales.\n"
    "  --nodes   also list every node with its op and output shape (.qfm: its\n"
    "            precision, fused activation, output scale and weight scale range)\n"
    "  --ops     print the operators qforge implements and, per engine this qforge\n"
    "            was built with, the precisions it has kernels for\n";

static void print_shape(const qf_value *v)
{
    printf("[");
    for (int d = 0; d < v->ndim; d++) printf("%s%lld", d ? "," : "", (long long)v->dims[d]);
    printf("]");
}

static void print_value(const char *role, const qf_value *v)
{
    printf("%-8s %-24s %-5s ", role, v->name, qf_dtype_info(v->dtype)->name);
    print_shape(v);
    printf("\n");
}

/* .qfm provenance and preprocessing. */
static void print_meta(const qf_qfm_meta *m)
{
    printf("format   qforge .qfm written by qforge %s: --precision %s, stored at batch %d\n",
           m->tool_version[0] ? m->tool_version : "?", qf_precision_name(m->precision), m->batch);
    printf("source   sha256 %s\n", m->source_sha256[0] ? m->source_sha256 : "(unknown)");
    if (!strcmp(m->scale_source, "model"))
        printf("scales   the source model's own (its QuantizeLinear/DequantizeLinear or QLinear ops); not calibrated\n");
    else if (m->calib_method[0]) printf("calibrated %s on %lld images\n", m->calib_method, (long long)m->calib_images);
    else printf("calibrated (no table)\n");
    printf("preprocess %s\n", m->preprocess[0] ? m->preprocess : "(none recorded)");
    if (m->equalized[0]) printf("equalized cross-layer before calibration (digest %.16s...)\n", m->equalized);
}

static void print_precisions(const qf_graph *g)
{
    int count[QF_PRECISION_COUNT] = {0}, conversions = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        if (qf_op_is_conversion(g->nodes[i].op)) conversions++;
        else if ((unsigned)g->nodes[i].precision < QF_PRECISION_COUNT) count[g->nodes[i].precision]++;
    }
    printf("precision");
    for (int p = QF_PRECISION_COUNT - 1; p >= 0; p--)
        printf(" %s %d%s", qf_precision_name((qf_precision)p), count[p], p ? "," : ";");
    printf(" conversions %d\n", conversions);
}

/* The quantization columns of a .qfm node line: precision, fused activation,
 * output dtype and scale, per-channel weight scale range of INT8 compute ops. */
static void print_quant_columns(const qf_graph *g, const qf_node *n)
{
    const qf_value *y = &g->values[n->out[0]];
    char shape[96];
    int at = snprintf(shape, sizeof shape, "[");
    for (int d = 0; d < y->ndim && at < (int)sizeof shape; d++)
        at += snprintf(shape + at, sizeof shape - (size_t)at, "%s%lld", d ? "," : "", (long long)y->dims[d]);
    if (at < (int)sizeof shape) snprintf(shape + at, sizeof shape - (size_t)at, "]");
    printf("%-14s %-4s %-3s", shape, qf_precision_name(n->precision), qf_dtype_info(y->dtype)->name);
    if (y->dtype == QF_I8) printf(" scale %.6g", (double)y->scale);
    if (y->dtype == QF_I8 && y->zero_point) printf(" zp %d", (int)y->zero_point);
    switch (n->act) {
    case QF_ACT_RELU: printf(" +relu"); break;
    case QF_ACT_CLIP: printf(" +clip[%g,%g]", (double)n->act_lo, (double)n->act_hi); break;
    case QF_ACT_SIGMOID: printf(" +sigmoid"); break;
    case QF_ACT_SILU: printf(" +silu"); break;
    case QF_ACT_HARD_SWISH: printf(" +hardswish"); break;
    case QF_ACT_GELU: printf(" +gelu"); break;
    case QF_ACT_GELU_TANH: printf(" +gelu(tanh)"); break;
    default: break;
    }
    /* INT8 Conv/Gemm/MatMul: inputs x, w, bias, per-channel weight scales (, residual) */
    if (qf_op_has_epilogue(n->op) && n->precision == QF_PREC_INT8 && n->n_in > 3 && n->in[3] >= 0) {
        const qf_value *s = &g->values[n->in[3]];
        const float *sd = s->data;
        int64_t cnt = qf_value_numel(s);
        if (sd && s->dtype == QF_F32 && cnt > 0) {
            float lo = sd[0], hi = sd[0];
            for (int64_t c = 1; c < cnt; c++) {
                lo = sd[c] < lo ? sd[c] : lo;
                hi = sd[c] > hi ? sd[c] : hi;
            }
            printf(" w-scale[%lld] %.4g..%.4g", (long long)cnt, (double)lo, (double)hi);
        }
        if (n->n_in > 4 && n->in[4] >= 0) printf(" +residual");
    }
}

/* The support matrix: op x engine x precision (tests/test_backend_ops prints
 * the same layout with what it ran). */
static int print_ops(void)
{
    static const qf_device_kind kinds[] = {QF_DEVICE_CPU, QF_DEVICE_CUDA};
    static const char *const names[] = {"cpu", "cuda"};
    bool built[2];
    unsigned prec;
    for (int e = 0; e < 2; e++) built[e] = qf_engine_op_precisions(kinds[e], QF_OP_CONV, &prec) == QF_OK;
    printf("%-20s", "op");
    for (int e = 0; e < 2; e++)
        if (built[e]) printf(" %-15s", names[e]);
    printf("\n%-20s", "");
    for (int e = 0; e < 2; e++)
        if (built[e]) printf(" fp32 fp16 int8 ");
    printf("\n");
    for (int op = 0; op < QF_OP_COUNT; op++) {
        printf("%-20s", qf_op_name((qf_op)op));
        const unsigned can = qf_op_precisions((qf_op)op);
        for (int e = 0; e < 2; e++) {
            if (!built[e] || qf_engine_op_precisions(kinds[e], (qf_op)op, &prec) != QF_OK) continue;
            printf(" ");
            for (int p = 0; p < QF_PRECISION_COUNT; p++)
                printf("%-5s", !(can & (1u << p)) ? "." : prec & (1u << p) ? "yes" : "-");
        }
        printf("\n");
    }
    printf("yes: the engine has a kernel; -: it has none (the CUDA engine runs such nodes on the host, with the\n"
           "CPU's kernel); .: the op has no node at that precision\n");
    return EXIT_OK;
}

/* The nodes an imported Q/DQ model computes in float between its
 * DequantizeLinear and QuantizeLinear nodes (no INT8 form), named. */
static void print_between_qdq(const qf_graph *g)
{
    int count = 0;
    for (int i = 0; i < g->n_nodes; i++) count += qf_node_between_qdq(g, i);
    if (!count) return;
    printf("fp32 between Q/DQ %d (no INT8 form; the model's rounding kept):", count);
    for (int i = 0, shown = 0; i < g->n_nodes; i++) {
        if (!qf_node_between_qdq(g, i)) continue;
        if (shown++ == 8) {
            printf(" ...");
            break;
        }
        printf(" %s (%s)", g->nodes[i].name, qf_op_name(g->nodes[i].op));
    }
    printf("\n");
}

static void print_count(const char *label, double x)
{
    const char *unit = "";
    double s = x;
    if (x >= 1e9) s = x / 1e9, unit = "G";
    else if (x >= 1e6) s = x / 1e6, unit = "M";
    else if (x >= 1e3) s = x / 1e3, unit = "K";
    printf("%-18s %.0f (%.3g%s)\n", label, x, s, unit);
}

int cmd_info(int argc, char **argv)
{
    static const struct option opts[] = {
        {"nodes", no_argument, 0, 'n'}, {"ops", no_argument, 0, 'o'}, {"help", no_argument, 0, 'h'}, {0}};
    bool nodes = false, ops = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'n': nodes = true; break;
        case 'o': ops = true; break;
        case 'h': fputs(info_help, stdout); return EXIT_OK;
        default: return cli_usage_error("info", "bad option");
        }
    }
    if (ops) return optind == argc && !nodes ? print_ops() : cli_usage_error("info", "--ops takes no MODEL");
    if (optind != argc - 1) return cli_usage_error("info", "expects exactly one MODEL");
    const char *path = argv[optind];
    qf_graph *g;
    qf_qfm_meta meta;
    const bool qfm = qf_qfm_probe(path);
    /* an ONNX model quantized elsewhere is shown as qforge runs it: INT8 with its own scales */
    qf_status st = cli_load_model(path, 1, &g, &meta);
    if (st != QF_OK) return cli_fail(st);
    const bool quantized = qfm || !strcmp(meta.scale_source, "model");
    /* only a model with its own scales has Q/DQ pairs of its own; in a plan
     * qforge made, a float node after a conversion is a layer kept out of INT8 */
    const bool own_qdq = !strcmp(meta.scale_source, "model");

    qf_graph_stats s;
    qf_graph_stats_compute(g, &s);
    printf("model    %s (opset %lld)\n", path, (long long)g->opset);
    if (qfm) print_meta(&meta);
    else if (quantized)
        printf("scales   the model's own (QuantizeLinear/DequantizeLinear or QLinear ops): `qforge quant` needs "
               "no table\n");
    for (int i = 0; i < g->n_inputs; i++) print_value("input", &g->values[g->inputs[i]]);
    for (int i = 0; i < g->n_outputs; i++) print_value("output", &g->values[g->outputs[i]]);
    printf("nodes    %d\n", g->n_nodes);
    for (int op = 0; op < QF_OP_COUNT; op++)
        if (s.op_count[op]) printf("  %-20s %d\n", qf_op_name((qf_op)op), s.op_count[op]);
    if (quantized) print_precisions(g);
    if (own_qdq) print_between_qdq(g);
    print_count("parameters", (double)s.params);
    print_count("FLOPs per image", (double)s.flops);
    if (nodes) {
        for (int i = 0; i < g->n_nodes; i++) {
            const qf_node *n = &g->nodes[i];
            printf("%4d %-20s %-32s -> ", i, qf_op_name(n->op), n->name);
            if (quantized) print_quant_columns(g, n);
            else print_shape(&g->values[n->out[0]]);
            if (own_qdq && qf_node_between_qdq(g, i)) printf(" (between Q/DQ)");
            printf("\n");
        }
    }
    qf_graph_free(g);
    return EXIT_OK;
}
