/* Benchmark helper for bench/peers/check_export.py: quantizes an ONNX model
 * with a calibration table, writes its Q/DQ ONNX export (qf_export_onnx) and
 * prints the top-1 class the CPU engine gives each image of a folder, one
 * "relative/path class" line per image, so another runtime's predictions on
 * the exported model can be compared image by image.
 * Usage: quant_predict MODEL.onnx TABLE.calib IMAGES_DIR [--method M]
 *                      [--precision int8|fp16|fp32] [--batch B] [--export FILE.onnx]
 * Preprocessing is the one the table was calibrated with. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "qforge/qforge.h"

static int fail(const char *what)
{
    fprintf(stderr, "quant_predict: %s%s%s\n", what ? what : "", what ? ": " : "", qf_error_message());
    return 1;
}

int main(int argc, char **argv)
{
    const char *pos[3] = {0}, *export_path = NULL, *method = NULL, *precision = "int8";
    int npos = 0, batch = 100;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--export") && next) export_path = argv[++i];
        else if (!strcmp(a, "--method") && next) method = argv[++i];
        else if (!strcmp(a, "--precision") && next) precision = argv[++i];
        else if (!strcmp(a, "--batch") && next) batch = atoi(argv[++i]);
        else if (a[0] != '-' && npos < 3) pos[npos++] = a;
        else {
            fprintf(stderr, "quant_predict: unexpected argument %s\n", a);
            return 2;
        }
    }
    if (npos != 3 || batch < 1) {
        fprintf(stderr, "usage: quant_predict MODEL.onnx TABLE.calib IMAGES_DIR [--method M] [--precision P] "
                        "[--batch B] [--export FILE.onnx]\n");
        return 2;
    }
    qf_calib_table *t;
    if (qf_calib_table_read(pos[1], &t) != QF_OK) return fail(NULL);
    qf_quant_opts o;
    qf_quant_opts_init(&o);
    if (qf_precision_parse(precision, &o.precision) != QF_OK) return fail(NULL);
    if (method) {
        unsigned mask;
        double pct;
        if (qf_calib_method_parse(method, &mask, &pct) != QF_OK || (mask & (mask - 1)))
            return fail("--method names one method");
        for (int m = 0; m < QF_CALIB_METHOD_COUNT; m++)
            if (mask == 1u << m) o.method = (qf_calib_method)m;
    }
    qf_load_opts lo = {.batch = batch};
    qf_graph *g;
    if (qf_model_load(pos[0], &lo, &g) != QF_OK) return fail(NULL);
    if (qf_quantize(g, t, &o, NULL) != QF_OK) return fail(NULL);
    if (export_path && qf_export_onnx(g, export_path) != QF_OK) return fail(NULL);

    qf_preprocess pp;
    qf_preprocess_init(&pp);
    if (t->preprocess && t->preprocess[0] && qf_preprocess_parse(&pp, t->preprocess) != QF_OK) return fail(pos[1]);
    const qf_value *in = &g->values[g->inputs[0]], *out = &g->values[g->outputs[0]];
    if (in->ndim != 4 || out->ndim < 2) {
        fprintf(stderr, "quant_predict: expects an (N,C,H,W) input and an (N,classes) output\n");
        return 1;
    }
    pp.channels = (int)in->dims[1];
    pp.height = (int)in->dims[2];
    pp.width = (int)in->dims[3];
    qf_dataset *ds;
    qf_engine *e;
    qf_loader *l;
    qf_engine_opts eo = {.device = QF_DEVICE_CPU};
    qf_loader_options lopt = {.batch = batch, .threads = 2, .strict = true};
    if (qf_dataset_open(pos[2], &ds) != QF_OK || qf_engine_create(g, &eo, &e) != QF_OK ||
        qf_loader_create(ds, &pp, &lopt, &l) != QF_OK)
        return fail(NULL);
    const int64_t nc = qf_value_numel(out) / out->dims[0];
    for (;;) {
        int cnt;
        if (qf_loader_next(l, qf_engine_input(e, 0), NULL, &cnt) != QF_OK) return fail(NULL);
        if (!cnt) break;
        if (qf_engine_run(e) != QF_OK) return fail(NULL);
        const float *y = qf_engine_output(e, 0);
        const int64_t *idx = qf_loader_indices(l);
        for (int i = 0; i < cnt; i++) {
            int64_t best = 0;
            for (int64_t c = 1; c < nc; c++)
                if (y[i * nc + c] > y[i * nc + best]) best = c;
            printf("%s %lld\n", qf_dataset_path(ds, idx[i]), (long long)best);
        }
    }
    qf_loader_free(l);
    qf_engine_free(e);
    qf_dataset_free(ds);
    qf_graph_free(g);
    qf_calib_table_free(t);
    return 0;
}
