/* qforge quant MODEL.onnx --calib TABLE.calib: rewrite an FP32 model to
 * INT8/FP16 with the table's thresholds and write the deployable .qfm
 * (optionally also standard ONNX with QuantizeLinear/DequantizeLinear). */
#include "config.h"
#include "cli.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char quant_help[] =
    "usage: qforge quant MODEL.onnx [--calib TABLE.calib] [--precision P] [--method M]\n"
    "                    [--per-tensor-weights] [-o MODEL.qfm] [--export-onnx FILE.onnx]\n"
    "                    [--force] [--quiet]\n"
    "  --precision fp32 | fp16 | int8 (default; needs --calib)\n"
    "  --method    which threshold of a `calib --method all` table to use\n"
    "  See qforge-quant(1) and qforge-model(5).\n";

int cmd_quant(int argc, char **argv)
{
    const char *model = NULL, *calib = NULL, *precision = "int8", *method = NULL, *out_path = NULL, *onnx_out = NULL;
    bool per_tensor = false, force = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        const char **target = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(quant_help, stdout);
            return EXIT_OK;
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) cli_quiet = true;
        else if (!strcmp(a, "--per-tensor-weights")) per_tensor = true;
        else if (!strcmp(a, "--force")) force = true;
        else if (!strcmp(a, "--calib")) target = &calib;
        else if (!strcmp(a, "--precision")) target = &precision;
        else if (!strcmp(a, "--method")) target = &method;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) target = &out_path;
        else if (!strcmp(a, "--export-onnx")) target = &onnx_out;
        else if (!strcmp(a, "--max-drop") || !strcmp(a, "--images"))
            return cli_usage_error("quant", "%s (precision best) is not implemented yet", a);
        else if (a[0] == '-' && a[1]) return cli_usage_error("quant", "unknown option %s", a);
        else if (!model) model = a;
        else return cli_usage_error("quant", "unexpected argument %s", a);
        if (target) {
            if (!next) return cli_usage_error("quant", "%s needs a value", a);
            *target = next;
            i++;
        }
    }
    if (!model) return cli_usage_error("quant", "missing MODEL.onnx");
    qf_quant_opts qo;
    qf_quant_opts_init(&qo);
    qo.per_tensor_weights = per_tensor;
    if (qf_precision_parse(precision, &qo.precision) != QF_OK) return cli_fail(QF_ERR_USAGE);
    if (qo.precision == QF_PREC_INT8 && !calib)
        return cli_usage_error("quant", "--precision int8 needs --calib TABLE.calib (made by qforge calib)");
    if (method) {
        unsigned mask;
        double pct;
        if (qf_calib_method_parse(method, &mask, &pct) != QF_OK) return cli_fail(QF_ERR_USAGE);
        if (mask == QF_CALIB_ALL || (mask & (mask - 1)))
            return cli_usage_error("quant", "--method picks one method, not '%s'", method);
        for (int m = 0; m < QF_CALIB_METHOD_COUNT; m++)
            if (mask == 1u << m) qo.method = (qf_calib_method)m;
    }
    char default_out[4096];
    if (!out_path) {
        cli_default_output(model, ".qfm", default_out, sizeof default_out);
        out_path = default_out;
    }

    qf_graph *g = NULL;
    qf_calib_table *table = NULL;
    qf_qfm_meta meta;
    qf_qfm_meta_init(&meta);
    meta.precision = qo.precision;
    int rc = EXIT_FAIL;
    qf_status st = qf_sha256_file(model, meta.source_sha256);
    if (st == QF_OK && calib) st = qf_calib_table_read(calib, &table);
    if (st == QF_OK && table) st = qf_calib_table_check_model(table, calib, meta.source_sha256, force);
    if (st == QF_OK && table && method && !(table->methods & (1u << qo.method)))
        st = qf_error(QF_ERR_INVALID, "%s: the table has no %s thresholds (calibrate with --method %s or all)", calib,
                      method, method);
    if (st == QF_OK) st = cli_load_model(model, 1, &g, NULL);
    qf_quant_summary sum;
    if (st == QF_OK) st = qf_quantize(g, table, &qo, &sum);
    if (st == QF_OK && table) {
        qf_calib_method used = qo.method == QF_CALIB_METHOD_COUNT ? qf_calib_table_default_method(table) : qo.method;
        snprintf(meta.calib_method, sizeof meta.calib_method, "%s", qf_calib_method_name(used));
        meta.calib_images = table->images;
        snprintf(meta.preprocess, sizeof meta.preprocess, "%s", table->preprocess ? table->preprocess : "");
    }
    if (st == QF_OK) st = qf_qfm_write(g, &meta, out_path);
    if (st == QF_OK && onnx_out) st = qf_export_onnx(g, onnx_out);
    if (st != QF_OK) {
        rc = cli_fail(st);
        goto out;
    }
    if (!cli_quiet)
        fprintf(stderr, "qforge: wrote %s%s%s: %d INT8, %d FP16, %d FP32 nodes, %d fused, %d conversions\n", out_path,
                onnx_out ? " and " : "", onnx_out ? onnx_out : "", sum.nodes[QF_PREC_INT8], sum.nodes[QF_PREC_FP16],
                sum.nodes[QF_PREC_FP32], sum.fused, sum.conversions);
    rc = EXIT_OK;
out:
    qf_calib_table_free(table);
    qf_graph_free(g);
    return rc;
}
