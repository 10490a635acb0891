/* Test and benchmark helper: runs a model on input tensors given as raw
 * float32 (N images of the model's C*H*W, little-endian, as numpy's
 * tofile() writes them) and prints each image's top-1 class, one "index class"
 * line per image, so another runtime's predictions on the very same inputs
 * can be compared image by image. MODEL is ONNX (a Q/DQ or QOperator model is
 * made qforge's INT8 graph with its own scales, as the CLI does) or a .qfm.
 * --as-is runs a Q/DQ model's graph as the file has it instead (FP32 ops
 * between QuantizeLinear and DequantizeLinear nodes).
 * Usage: tensor_predict MODEL INPUTS.f32 [--batch B] [--device D] [--logits FILE] [--as-is] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "qforge/qforge.h"

static int fail(const char *what)
{
    fprintf(stderr, "tensor_predict: %s%s%s\n", what ? what : "", what ? ": " : "", qf_error_message());
    return 1;
}

static qf_status load(const char *path, int batch, bool as_is, qf_graph **g)
{
    if (qf_qfm_probe(path)) return qf_qfm_read(path, batch, g, NULL);
    qf_load_opts lo = {.batch = batch};
    qf_status st = qf_model_load(path, &lo, g);
    if (st == QF_OK && !as_is && qf_graph_has_qdq(*g)) st = qf_quantize(*g, NULL, NULL, NULL);
    return st;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *inputs = NULL, *device = "cpu", *logits = NULL;
    int batch = 50;
    bool as_is = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--batch") && next) batch = atoi(argv[++i]);
        else if (!strcmp(a, "--device") && next) device = argv[++i];
        else if (!strcmp(a, "--logits") && next) logits = argv[++i];
        else if (!strcmp(a, "--as-is")) as_is = true;
        else if (a[0] != '-' && !model) model = a;
        else if (a[0] != '-' && !inputs) inputs = a;
        else {
            fprintf(stderr, "tensor_predict: unexpected argument %s\n", a);
            return 2;
        }
    }
    if (!model || !inputs || batch < 1) {
        fprintf(stderr, "usage: tensor_predict MODEL INPUTS.f32 [--batch B] [--device D] [--logits FILE] [--as-is]\n");
        return 2;
    }
    qf_graph *g;
    if (load(model, batch, as_is, &g) != QF_OK) return fail(NULL);
    if (g->n_inputs != 1 || g->n_outputs < 1) return fail("expects one input");
    const qf_value *in = &g->values[g->inputs[0]], *out = &g->values[g->outputs[0]];
    if (in->dtype != QF_F32 || out->dtype != QF_F32 || in->ndim < 1 || out->ndim < 1) return fail("expects f32 input and output");
    const int64_t per_image = qf_value_numel(in) / batch, classes = qf_value_numel(out) / batch;
    qf_engine_opts eo = {0};
    qf_engine *e;
    if (qf_device_parse(device, &eo.device, &eo.device_index) != QF_OK || qf_engine_create(g, &eo, &e) != QF_OK)
        return fail(NULL);
    FILE *f = fopen(inputs, "rb"), *lf = logits ? fopen(logits, "wb") : NULL;
    if (!f || (logits && !lf)) {
        perror(!f ? inputs : logits);
        return 1;
    }
    float *x = qf_engine_input(e, 0);
    for (int64_t base = 0;; base += batch) {
        size_t got = fread(x, sizeof *x * (size_t)per_image, (size_t)batch, f);
        if (got == 0) break;
        /* a short last batch: the rest of the buffer keeps old images, whose results are not printed */
        if (qf_engine_run(e) != QF_OK) return fail(NULL);
        const float *y = qf_engine_output(e, 0);
        for (size_t b = 0; b < got; b++) {
            const float *row = y + b * (size_t)classes;
            int best = 0;
            for (int64_t c = 1; c < classes; c++)
                if (row[c] > row[best]) best = (int)c;
            printf("%lld %d\n", (long long)(base + (int64_t)b), best);
        }
        if (lf && fwrite(y, sizeof *y * (size_t)classes, got, lf) != got) return fail("writing logits");
        if (got < (size_t)batch) break;
    }
    fclose(f);
    if (lf) fclose(lf);
    qf_engine_free(e);
    qf_graph_free(g);
    return 0;
}
