/* Reference outputs for tests/test_triton.sh: runs a .qfm on qforge's own CPU
 * engine one item at a time (batch 1) and writes every output of every item,
 * raw, so that the test can compare Triton's answers bit for bit.
 *   triton_ref MODEL.qfm N IN.f32 OUT.f32          float inputs as the model takes them
 *   triton_ref MODEL.qfm N IN.u8 OUT.f32 H W C     raw (H,W,C) images, preprocessed as
 *                                                  the .qfm records */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "qforge/qforge.h"

static int fail(const char *what)
{
    fprintf(stderr, "triton_ref: %s: %s\n", what, qf_error_message());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 5 && argc != 8) {
        fprintf(stderr, "usage: triton_ref MODEL.qfm N IN OUT [H W C]\n");
        return 2;
    }
    int n = atoi(argv[2]);
    bool image = argc == 8;
    int h = image ? atoi(argv[5]) : 0, w = image ? atoi(argv[6]) : 0, c = image ? atoi(argv[7]) : 0;
    qf_graph *g;
    qf_qfm_meta meta;
    if (qf_qfm_read(argv[1], 1, &g, &meta) != QF_OK) return fail(argv[1]);
    qf_engine *e;
    qf_engine_opts opts = {.device = QF_DEVICE_CPU};
    if (qf_engine_create(g, &opts, &e) != QF_OK) return fail("engine");
    const qf_value *in = &g->values[g->inputs[0]];
    qf_preprocess pp;
    qf_preprocess_init(&pp);
    if (image && (qf_preprocess_parse(&pp, meta.preprocess) != QF_OK || qf_preprocess_fit(&pp, in->ndim, in->dims) != QF_OK))
        return fail("preprocessing");
    size_t item = image ? (size_t)h * w * c : qf_value_bytes(in);
    FILE *fi = fopen(argv[3], "rb"), *fo = fopen(argv[4], "wb");
    if (!fi || !fo || g->n_inputs != 1) {
        fprintf(stderr, "triton_ref: cannot open %s or %s, or the model has several inputs\n", argv[3], argv[4]);
        return 1;
    }
    unsigned char *buf = malloc(item);
    for (int i = 0; i < n; i++) {
        if (!buf || fread(buf, 1, item, fi) != item) {
            fprintf(stderr, "triton_ref: %s: short read at item %d\n", argv[3], i);
            return 1;
        }
        if (image) {
            qf_image img = {.w = w, .h = h, .c = c, .px = buf};
            if (qf_preprocess_image(&pp, &img, argv[3], qf_engine_input(e, 0)) != QF_OK) return fail("image");
        } else {
            memcpy(qf_engine_input(e, 0), buf, item);
        }
        if (qf_engine_run(e) != QF_OK) return fail("run");
        for (int o = 0; o < g->n_outputs; o++)
            fwrite(qf_engine_output(e, o), 1, qf_value_bytes(&g->values[g->outputs[o]]), fo);
    }
    free(buf);
    fclose(fi);
    if (fclose(fo) != 0) return 1;
    qf_engine_free(e);
    qf_graph_free(g);
    return 0;
}
