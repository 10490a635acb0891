/* Accuracy of quantized real models on real images (../shared/data; the test
 * skips with 77 when it is absent): ResNet-20 on CIFAR-10 and MobileNetV2 on
 * ImageNet samples, calibrated on their calibration folders, evaluated on
 * images never used for calibration, INT8 and FP16 against FP32. Subsets keep
 * it fast; the full runs are in the notes. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "qforge/qforge.h"
#include "testutil.h"

static char data_dir[1024];

static void path(char *buf, size_t n, const char *rel) { snprintf(buf, n, "%s/%s", data_dir, rel); }

typedef struct result {
    int images, top1[3], agree[3];
} result;

static int argmax(const float *y, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (y[i] > y[b]) b = i;
    return b;
}

/* Runs FP32, FP16 and INT8 graphs on the same batches of labelled images. */
static result evaluate(qf_graph *const gs[3], qf_dataset *ds, const qf_preprocess *pp)
{
    result r = {0};
    qf_engine *e[3];
    qf_engine_opts eo = {.device = QF_DEVICE_CPU};
    for (int k = 0; k < 3; k++) OK(qf_engine_create(gs[k], &eo, &e[k]));
    qf_loader_options lo = {.batch = gs[0]->batch, .threads = 2};
    qf_loader *l;
    OK(qf_loader_create(ds, pp, &lo, &l));
    const int nc = (int)gs[0]->values[gs[0]->outputs[0]].dims[1];
    const size_t in_bytes = qf_value_bytes(&gs[0]->values[gs[0]->inputs[0]]);
    int *labels = malloc((size_t)gs[0]->batch * sizeof *labels), cnt;
    for (;;) {
        OK(qf_loader_next(l, qf_engine_input(e[0], 0), labels, &cnt));
        if (!cnt) break;
        for (int k = 1; k < 3; k++) memcpy(qf_engine_input(e[k], 0), qf_engine_input(e[0], 0), in_bytes);
        for (int k = 0; k < 3; k++) OK(qf_engine_run(e[k]));
        const float *y32 = qf_engine_output(e[0], 0);
        for (int i = 0; i < cnt; i++) {
            int ref = argmax(y32 + i * nc, nc);
            for (int k = 0; k < 3; k++) {
                int p = argmax((const float *)qf_engine_output(e[k], 0) + i * nc, nc);
                r.top1[k] += p == labels[i];
                r.agree[k] += p == ref;
            }
        }
        r.images += cnt;
    }
    free(labels);
    qf_loader_free(l);
    for (int k = 0; k < 3; k++) qf_engine_free(e[k]);
    return r;
}

/* Loads the model three times and quantizes two copies: FP32, FP16, INT8. */
static void load_three(const char *model, int batch, const qf_calib_table *t, qf_graph *gs[3])
{
    qf_load_opts lo = {.batch = batch};
    for (int k = 0; k < 3; k++) OK(qf_model_load(model, &lo, &gs[k]));
    qf_quant_opts o;
    qf_quant_opts_init(&o);
    o.precision = QF_PREC_FP16;
    OK(qf_quantize(gs[1], t, &o, NULL));
    o.precision = QF_PREC_INT8;
    qf_quant_summary s;
    OK(qf_quantize(gs[2], t, &o, &s));
    ck_assert_int_gt(s.nodes[QF_PREC_INT8], 0);
}

static void report(const char *name, const result *r)
{
    printf("%s on %d images: top-1 fp32 %.4f fp16 %.4f int8 %.4f; agreement with fp32: fp16 %.4f int8 %.4f\n", name,
           r->images, (double)r->top1[0] / r->images, (double)r->top1[1] / r->images, (double)r->top1[2] / r->images,
           (double)r->agree[1] / r->images, (double)r->agree[2] / r->images);
}

START_TEST(resnet20_cifar10)
{
    char model[1100], calib[1100], test[1100];
    path(model, sizeof model, "cifar10/resnet20.onnx");
    path(calib, sizeof calib, "cifar10/calib");
    path(test, sizeof test, "cifar10/test");
    qf_preprocess pp;
    qf_preprocess_init(&pp);
    OK(qf_preprocess_preset(&pp, "cifar10"));
    pp.width = pp.height = 32;
    qf_load_opts lo = {.batch = 50};
    qf_graph *g;
    OK(qf_model_load(model, &lo, &g));
    qf_calib_table *t = calibrate_folder(g, calib, 500, &pp, QF_DEVICE_CPU, 2);
    qf_graph_free(g);
    qf_graph *gs[3];
    load_three(model, 50, t, gs);
    qf_dataset *ds;
    OK(qf_dataset_open(test, &ds));
    qf_dataset_subset(ds, 1000);
    OK(qf_dataset_label_folders(ds, NULL));
    result r = evaluate(gs, ds, &pp);
    report("ResNet-20", &r);
    ck_assert_int_eq(r.images, 1000);
    /* the bars (on all 10,000: INT8 >= FP32 - 0.005, FP16 within 0.001),
     * with room for the sampling noise of 1,000 images */
    ck_assert_int_ge(r.top1[2], r.top1[0] - 15);
    ck_assert_int_le(abs(r.top1[1] - r.top1[0]), 3);
    ck_assert_int_ge(r.agree[2], 960);
    ck_assert_int_ge(r.agree[1], 995);
    for (int k = 0; k < 3; k++) qf_graph_free(gs[k]);
    qf_dataset_free(ds);
    qf_calib_table_free(t);
}
END_TEST

START_TEST(mobilenetv2_imagenet)
{
    char model[1100], calib[1100], val[1100], syn[1100];
    path(model, sizeof model, "imagenet/mobilenetv2-fp32.onnx");
    path(calib, sizeof calib, "imagenet/images/calib");
    path(val, sizeof val, "imagenet/images/val");
    path(syn, sizeof syn, "imagenet/synsets.txt");
    qf_preprocess pp;
    qf_preprocess_init(&pp);
    OK(qf_preprocess_preset(&pp, "imagenet"));
    qf_load_opts lo = {.batch = 20};
    qf_graph *g;
    OK(qf_model_load(model, &lo, &g));
    qf_calib_table *t = calibrate_folder(g, calib, 100, &pp, QF_DEVICE_CPU, 2);
    qf_graph_free(g);
    qf_graph *gs[3];
    load_three(model, 20, t, gs);
    qf_dataset *ds;
    OK(qf_dataset_open(val, &ds));
    OK(qf_dataset_label_synsets(ds, syn));
    result r = evaluate(gs, ds, &pp);
    report("MobileNetV2", &r);
    ck_assert_int_eq(r.images, 100);
    /* the bars: INT8 agreement >= 0.95, FP16 >= 0.99 */
    ck_assert_int_ge(r.agree[2], 95);
    ck_assert_int_ge(r.agree[1], 99);
    for (int k = 0; k < 3; k++) qf_graph_free(gs[k]);
    qf_dataset_free(ds);
    qf_calib_table_free(t);
}
END_TEST

/* Cross-layer equalization keeps the FP32 function of a real model: the same
 * outputs (relative error <= 1e-5 asked; the moves are powers of two, so they
 * are the same bits) on 8 of its images, and the pairs' weight ranges nearer. */
static void equalized_same_outputs(const char *rel, const char *images, const char *preset, int min_moved)
{
    char model[1100], dir[1100];
    path(model, sizeof model, rel);
    path(dir, sizeof dir, images);
    qf_preprocess pp;
    qf_preprocess_init(&pp);
    OK(qf_preprocess_preset(&pp, preset));
    qf_load_opts lo = {.batch = 8};
    qf_graph *g0, *g1;
    OK(qf_model_load(model, &lo, &g0));
    OK(qf_model_load(model, &lo, &g1));
    const qf_value *in = &g0->values[g0->inputs[0]];
    OK(qf_preprocess_fit(&pp, in->ndim, in->dims));
    qf_equalize_info info;
    OK(qf_graph_equalize(g1, &info));
    printf("%s: %d of %d pairs (%d through a Clip) moved, %lld of %lld channels, %d sweeps, imbalance %.2f -> %.2f\n",
           rel, info.pairs_moved, info.pairs, info.pairs_clipped, (long long)info.channels_moved,
           (long long)info.channels, info.sweeps, info.imbalance_before, info.imbalance_after);
    ck_assert_int_ge(info.channels_moved, min_moved);
    ck_assert_double_lt(info.imbalance_after, info.imbalance_before);
    qf_dataset *ds;
    OK(qf_dataset_open(dir, &ds));
    qf_dataset_subset(ds, 8);
    qf_loader_options lopt = {.batch = 8, .threads = 2};
    qf_loader *l;
    OK(qf_loader_create(ds, &pp, &lopt, &l));
    float *x = malloc(qf_value_bytes(&g0->values[g0->inputs[0]]));
    int cnt;
    OK(qf_loader_next(l, x, NULL, &cnt));
    ck_assert_int_eq(cnt, 8);
    const double worst = assert_same_function(g0, g1, x);
    printf("%s: FP32 outputs after equalization: largest difference %g\n", rel, worst);
    free(x);
    qf_loader_free(l);
    qf_dataset_free(ds);
    qf_graph_free(g0);
    qf_graph_free(g1);
}

START_TEST(resnet20_equalized_same_outputs)
{
    /* 9 conv -> Relu -> conv pairs, one in each residual block */
    equalized_same_outputs("cifar10/resnet20.onnx", "cifar10/test", "cifar10", 200);
}
END_TEST

START_TEST(mobilenetv2_equalized_same_outputs)
{
    /* through ReLU6 only the depthwise channels proven below 6 move */
    equalized_same_outputs("imagenet/mobilenetv2-fp32.onnx", "imagenet/images/val", "imagenet", 500);
}
END_TEST

int main(void)
{
    const char *top = getenv("top_srcdir");
    snprintf(data_dir, sizeof data_dir, "%s/../shared/data", top ? top : QF_SRCDIR);
    char probe[1100];
    path(probe, sizeof probe, "cifar10/resnet20.onnx");
    FILE *f = fopen(probe, "rb");
    if (!f) {
        printf("no %s: skipped\n", probe);
        return 77;
    }
    fclose(f);
    Suite *s = suite_create("quant_models");
    TCase *tc = tcase_create("accuracy");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, resnet20_cifar10);
    tcase_add_test(tc, resnet20_equalized_same_outputs);
    path(probe, sizeof probe, "imagenet/mobilenetv2-fp32.onnx");
    if ((f = fopen(probe, "rb"))) {
        fclose(f);
        tcase_add_test(tc, mobilenetv2_imagenet);
        tcase_add_test(tc, mobilenetv2_equalized_same_outputs);
    }
    suite_add_tcase(s, tc);
    return run_suite(s);
}
