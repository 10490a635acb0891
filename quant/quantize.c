/* qf_quantize: checks the request, plans (quant/assign.c), then rewrites the
 * graph (quant/rewrite.c); and the precision names the CLI uses. */
#include "quant_internal.h"
#include "attention.h"

static const char *const prec_names[QF_PRECISION_COUNT] = {
    [QF_PREC_FP32] = "fp32",
    [QF_PREC_FP16] = "fp16",
    [QF_PREC_INT8] = "int8",
};

const char *qf_precision_name(qf_precision p) { return (unsigned)p < QF_PRECISION_COUNT ? prec_names[p] : "?"; }

qf_status qf_precision_parse(const char *s, qf_precision *out)
{
    for (int p = 0; p < QF_PRECISION_COUNT; p++)
        if (strcmp(s, prec_names[p]) == 0) {
            *out = (qf_precision)p;
            return QF_OK;
        }
    return qf_error(QF_ERR_USAGE, "unknown precision '%s' (expected fp32, fp16 or int8)", s);
}

void qf_quant_opts_init(qf_quant_opts *o)
{
    memset(o, 0, sizeof *o);
    o->precision = QF_PREC_INT8;
    o->method = QF_CALIB_METHOD_COUNT;
    /* ahead of symmetric INT8 on every real model measured, and of every ONNX
     * Runtime method there (bench/accuracy.md); on the GPU it costs ResNets
     * 6-12 % at b256 (bench/zoo/NOTES.md, session 22) */
    o->asymmetric = true;
}

qf_status qfi_quant_plan(qf_graph *g, const qf_calib_table *t, const qf_quant_opts *o, qfi_qplan *p)
{
    memset(p, 0, sizeof *p);
    if (t) QF_CHECK(qfi_equalize_check_table(g, t));
    qf_calib_method method = t && o->method == QF_CALIB_METHOD_COUNT ? qf_calib_table_default_method(t) : o->method;
    if (t && ((unsigned)method >= QF_CALIB_METHOD_COUNT || !(t->methods & (1u << method))))
        return qf_error(QF_ERR_USAGE, "%s: the calibration table has no %s thresholds (calibrate with --method %s or all)",
                        g->source, (unsigned)method < QF_CALIB_METHOD_COUNT ? qf_calib_method_name(method) : "?",
                        (unsigned)method < QF_CALIB_METHOD_COUNT ? qf_calib_method_name(method) : "?");
    unsigned char *float_anchor = qfi_calloc((size_t)g->n_nodes + 1, 1);
    if (!float_anchor) return QF_ERR_NOMEM;
    /* planned again while anchors turn out to need float: each round marks at
     * least one more, so this ends */
    qf_status st;
    for (;;) {
        *p = (qfi_qplan){.g = g, .t = t, .o = *o, .method = method, .float_anchor = float_anchor};
        st = qfi_quant_assign(p);
        int marked = 0;
        if (st == QF_OK && o->precision == QF_PREC_INT8) st = qfi_quant_check_biases(p, float_anchor, &marked);
        if (st != QF_OK || !marked) break;
        p->float_anchor = NULL; /* kept for the next round */
        qfi_quant_plan_free(p);
    }
    /* the plan keeps the marks: its float-node summary names why each anchor stayed float */
    if (st != QF_OK) qfi_quant_plan_free(p);
    return st;
}

qf_status qf_quantize(qf_graph *g, const qf_calib_table *t, const qf_quant_opts *o, qf_quant_summary *summary)
{
    qf_quant_opts def;
    if (!o) {
        qf_quant_opts_init(&def);
        o = &def;
    }
    if (summary) memset(summary, 0, sizeof *summary);
    if ((unsigned)o->precision >= QF_PRECISION_COUNT)
        return qf_error(QF_ERR_USAGE, "qf_quantize: precision %d is not one of fp32, fp16, int8", (int)o->precision);
    if (g->batch <= 0) return qf_error(QF_ERR_USAGE, "%s: the graph must be prepared before it is quantized", g->source);
    if (qf_graph_has_qdq(g)) {
        if (t)
            return qf_error(QF_ERR_USAGE, "%s: the model carries its own scales (QuantizeLinear/DequantizeLinear); "
                            "quantize it without a calibration table", g->source);
        if (o->precision != QF_PREC_INT8)
            return qf_error(QF_ERR_USAGE, "%s: the model is quantized already (QuantizeLinear/DequantizeLinear); only "
                            "--precision int8 applies", g->source);
        qf_quant_summary s = {.from_model = true};
        QF_CHECK(qfi_qdq_import(g, &s));
        QF_CHECK(qfi_attention_hoist_operands(g));
        if (summary) *summary = s;
        return QF_OK;
    }
    if (o->precision == QF_PREC_INT8 && !t)
        return qf_error(QF_ERR_USAGE, "%s: INT8 quantization needs a calibration table", g->source);
    qfi_qplan p;
    qf_status st = qfi_quant_plan(g, t, o, &p);
    if (st == QF_OK && o->precision == QF_PREC_INT8) qfi_quant_report_float(&p);
    if (st == QF_OK) qfi_quant_report_fp32(&p);
    if (st == QF_OK) qfi_quant_warn_ranges(&p);
    if (st == QF_OK && o->precision != QF_PREC_FP32) st = qfi_quant_rewrite(&p);
    if (st == QF_OK) st = qfi_attention_hoist_operands(g); /* both engines can then fuse the chains */
    /* (qf_graph_prepare already made every Reshape target batch-free) */
    if (st == QF_OK) {
        qf_log(QF_LOG_INFO, "%s: %d INT8, %d FP16, %d FP32 nodes; %d ops fused into INT8 epilogues; %d conversions",
               g->source, p.sum.nodes[QF_PREC_INT8], p.sum.nodes[QF_PREC_FP16], p.sum.nodes[QF_PREC_FP32], p.sum.fused,
               p.sum.conversions);
        if (p.sum.int8_activations && o->asymmetric)
            qf_log(QF_LOG_INFO, "%s: %d of %d int8 activations have a zero point (%d from the graph's lower bound, %d "
                   "two-sided from their calibrated minimum; --zero-points none: all symmetric)", g->source,
                   p.sum.zero_point_activations, p.sum.int8_activations,
                   p.sum.zero_point_activations - p.sum.zero_point_two_sided, p.sum.zero_point_two_sided);
        if (summary) *summary = p.sum;
    }
    qfi_quant_plan_free(&p);
    return st;
}
