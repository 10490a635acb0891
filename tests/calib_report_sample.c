/* Writes a calibration report for synthetic tensors of typical shapes (Gaussian,
 * Laplacian, ReLU output, uniform input, a far outlier, all zeros, NaN) to argv[1],
 * for tests/test_report_render.sh to render and for a person to look at. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "qforge/qforge.h"

static uint64_t state = 42;
static double uniform(void)  // (0, 1), splitmix64
{
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (((z ^ (z >> 31)) >> 11) + 0.5) * 0x1p-53;
}
static double gauss(void) { return sqrt(-2 * log(uniform())) * cos(2 * M_PI * uniform()); }

enum { N = 200000 };
static const char *const names[] = {
    "input.1", "/conv1/Conv_output_0", "/relu1/Relu_output_0", "/fc/Gemm_output_0 (laplace)",
    "/attn/Softmax_output_0 <outlier>", "/zeros/Mul_output_0", "/bad/Div_output_0",
};

static void fill(int k, float *x)
{
    for (int i = 0; i < N; i++) {
        double v;
        switch (k) {
        case 0: v = (floor(uniform() * 256) / 255 - 0.45) / 0.225; break;  // normalized pixels
        case 1: v = 2.5 * gauss(); break;
        case 2: v = fmax(0, 1.3 * gauss() + 0.2); break;
        case 3: v = (uniform() < 0.5 ? -1 : 1) * 0.7 * -log(uniform()); break;
        case 4: v = i == 777 ? 90.0 : 0.05 * gauss(); break;
        case 5: v = 0; break;
        default: v = i % 5000 == 0 ? NAN : gauss(); break;
        }
        x[i] = (float)v;
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s REPORT.html\n", argv[0]);
        return 2;
    }
    qf_graph *g = qf_graph_new("sample.onnx");
    int nv = (int)(sizeof names / sizeof *names);
    int64_t dims[2] = {1, N};
    for (int k = 0; k < nv; k++) qf_graph_add_value(g, names[k], QF_F32, 2, dims);
    g->batch = 1;
    qf_calib *c;
    if (qf_calib_create(g, NULL, &c) != QF_OK) goto fail;
    float *x = malloc(N * sizeof *x);
    for (int k = 0; k < nv; k++) {
        fill(k, x);
        qf_calib_observe(c, g, k, x);
    }
    free(x);
    qf_calib_table *t;
    qf_calib_meta meta = {.images = 1, .preprocess = "resize=256 crop=224 mean=0.485,0.456,0.406 std=0.229,0.224,0.225",
                          .model_sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"};
    if (qf_calib_finalize(c, QF_CALIB_ALL, 99.99, &meta, &t) != QF_OK) goto fail;
    if (qf_calib_report_write(argv[1], c, t) != QF_OK) goto fail;
    qf_calib_table_free(t);
    qf_calib_free(c);
    qf_graph_free(g);
    return 0;
fail:
    fprintf(stderr, "calib_report_sample: %s\n", qf_error_message());
    return 1;
}
