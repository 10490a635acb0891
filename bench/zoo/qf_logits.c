/* Zoo helper (bench/zoo/zoo.py): runs a model (.onnx at FP32, or a .qfm at its
 * stored precisions) on a raw float32 input file of N whole (C,H,W) samples
 * and writes its outputs as raw float32, one after another, each (N, K_i)
 * (a classifier's one output: its logits (N, K)), so they can be compared
 * with onnxruntime's, or one engine's with another's (a detector's boxes and
 * scores each on their own).
 * Usage: qf_logits MODEL IN.f32 OUT.f32 [--device cpu|cuda[:N]] [--batch B] [--threads T] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "qforge/qforge.h"

static int fail(const char *what)
{
    fprintf(stderr, "qf_logits: %s%s%s\n", what ? what : "", what ? ": " : "", qf_error_message());
    return 1;
}

/* The whole of a file; its size in *bytes. */
static float *read_all(const char *path, long *bytes)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    float *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (*bytes = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)*bytes)) && fread(buf, 1, (size_t)*bytes, f) != (size_t)*bytes) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

int main(int argc, char **argv)
{
    const char *pos[3] = {0}, *device = "cpu";
    int npos = 0, batch = 16, threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--device") && next) device = argv[++i];
        else if (!strcmp(a, "--batch") && next) batch = atoi(argv[++i]);
        else if (!strcmp(a, "--threads") && next) threads = atoi(argv[++i]);
        else if (a[0] != '-' && npos < 3) pos[npos++] = a;
        else {
            fprintf(stderr, "qf_logits: unexpected argument %s\n", a);
            return 2;
        }
    }
    if (npos != 3 || batch < 1 || threads < 0) {
        fprintf(stderr, "usage: qf_logits MODEL IN.f32 OUT.f32 [--device D] [--batch B] [--threads T]\n");
        return 2;
    }
    qf_engine_opts eo = {.threads = threads};
    if (qf_device_parse(device, &eo.device, &eo.device_index) != QF_OK) return fail("--device");
    qf_graph *g;
    qf_qfm_meta meta;
    qf_qfm_meta_init(&meta);
    qf_load_opts lo = {.batch = batch};
    if ((qf_qfm_probe(pos[0]) ? qf_qfm_read(pos[0], batch, &g, &meta) : qf_model_load(pos[0], &lo, &g)) != QF_OK)
        return fail(NULL);
    const qf_value *in = &g->values[g->inputs[0]];
    bool ok = g->n_inputs == 1 && in->dtype == QF_F32 && in->ndim >= 1 && g->n_outputs >= 1;
    for (int k = 0; ok && k < g->n_outputs; k++) {
        const qf_value *out = &g->values[g->outputs[k]];
        ok = out->dtype == QF_F32 && out->ndim >= 1 && out->dims[0] == in->dims[0];
    }
    if (!ok) {
        fprintf(stderr, "qf_logits: %s: expects one float32 input and float32 outputs, batch first\n", pos[0]);
        return 1;
    }
    /* per-sample element counts; the batch is dim 0 of all; per_out of all outputs together */
    const size_t per_in = (size_t)(qf_value_numel(in) / in->dims[0]);
    size_t per_out = 0;
    for (int k = 0; k < g->n_outputs; k++) per_out += (size_t)(qf_value_numel(&g->values[g->outputs[k]]) / in->dims[0]);
    long bytes = 0;
    float *x = read_all(pos[1], &bytes);
    if (!x) {
        fprintf(stderr, "qf_logits: cannot read %s\n", pos[1]);
        return 1;
    }
    if (bytes % (long)(per_in * sizeof(float))) {
        fprintf(stderr, "qf_logits: %s: not a whole number of %zu-float samples\n", pos[1], per_in);
        return 1;
    }
    const long n = bytes / (long)(per_in * sizeof(float));
    float *y = calloc((size_t)n * per_out, sizeof *y);
    qf_engine *e;
    if (!y) return fail("out of memory");
    if (qf_engine_create(g, &eo, &e) != QF_OK) return fail(pos[0]);
    float *ein = qf_engine_input(e, 0);
    for (long s = 0; s < n; s += batch) {
        long cnt = n - s < batch ? n - s : batch;
        /* a short last batch is padded with zeros; their outputs are dropped */
        memset(ein, 0, (size_t)batch * per_in * sizeof(float));
        memcpy(ein, x + s * per_in, (size_t)cnt * per_in * sizeof(float));
        if (qf_engine_run(e) != QF_OK) return fail(pos[0]);
        /* output k's rows s .. s+cnt go after the n rows of the outputs before it */
        float *dst = y;
        for (int k = 0; k < g->n_outputs; k++) {
            const size_t per = (size_t)(qf_value_numel(&g->values[g->outputs[k]]) / in->dims[0]);
            memcpy(dst + s * per, qf_engine_output(e, k), (size_t)cnt * per * sizeof(float));
            dst += (size_t)n * per;
        }
    }
    FILE *f = fopen(pos[2], "wb");
    if (!f || fwrite(y, sizeof *y, (size_t)n * per_out, f) != (size_t)n * per_out || fclose(f) != 0) {
        fprintf(stderr, "qf_logits: cannot write %s\n", pos[2]);
        return 1;
    }
    qf_engine_free(e);
    qf_graph_free(g);
    free(x);
    free(y);
    return 0;
}
