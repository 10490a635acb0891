/* The CPU engine's FP32 logits on real models against ONNX Runtime's
 * (tests/ref/NAME.logits, written by tests/ref/make_ref.py) on a deterministic
 * pseudo-random input: max |qforge - ort| / max |ort| <= 1e-4 per image.
 * ResNet-20 runs at batch 4 although its graph hard-codes batch 1, which also
 * checks the Reshape-to-batch rewrite. Models under ../shared/data are skipped
 * when absent; the bundled example always runs. */
#include <check.h>
#include <math.h>
#include "internal.h"
#include "testutil.h"

static const char *srcdir(void)
{
    const char *s = getenv("top_srcdir");
    return s ? s : QF_SRCDIR;
}

/* The generator make_ref.py mirrors: x = (1103515245 x + 12345) mod 2^31. */
static void lcg_fill(float *x, int64_t n)
{
    uint64_t s = 12345;
    for (int64_t i = 0; i < n; i++) {
        s = (1103515245u * s + 12345u) % 2147483648u;
        x[i] = (float)((double)s / 2147483648.0 * 4.0 - 2.0);
    }
}

/* Returns 0 if checked, 77 if the model is absent. */
static int check_model(const char *model_rel, const char *ref_rel)
{
    char model[4096], ref[4096];
    snprintf(model, sizeof model, "%s/%s", srcdir(), model_rel);
    snprintf(ref, sizeof ref, "%s/%s", srcdir(), ref_rel);
    FILE *f = fopen(model, "rb");
    if (!f) return 77;
    fclose(f);
    f = fopen(ref, "r");
    ck_assert_msg(f != NULL, "missing %s", ref);
    char line[512];
    ck_assert(fgets(line, sizeof line, f)); /* comment */
    int batch, classes;
    ck_assert_int_eq(fscanf(f, "%d %d", &batch, &classes), 2);
    float *want = calloc((size_t)batch * classes, sizeof *want);
    for (int i = 0; i < batch * classes; i++) ck_assert_int_eq(fscanf(f, "%f", &want[i]), 1);
    fclose(f);

    qf_graph *g;
    qf_load_opts lo = {.batch = batch};
    ck_assert_msg(qf_model_load(model, &lo, &g) == QF_OK, "%s", qf_error_message());
    qf_engine *e;
    qf_engine_opts eo = {.device = QF_DEVICE_CPU, .threads = 2};
    ck_assert_msg(qf_engine_create(g, &eo, &e) == QF_OK, "%s", qf_error_message());
    lcg_fill(qf_engine_input(e, 0), qf_value_numel(&g->values[g->inputs[0]]));
    ck_assert_msg(qf_engine_run(e) == QF_OK, "%s", qf_error_message());
    ck_assert_int_eq(qf_value_numel(&g->values[g->outputs[0]]), (int64_t)batch * classes);
    const float *got = qf_engine_output(e, 0);
    for (int b = 0; b < batch; b++) {
        double err = 0, mag = 0;
        for (int k = 0; k < classes; k++) {
            double w = want[b * classes + k], d = fabs(got[b * classes + k] - w);
            err = d > err ? d : err;
            mag = fabs(w) > mag ? fabs(w) : mag;
        }
        printf("%s image %d: max |diff| %.3g, relative %.3g\n", model_rel, b, err, err / mag);
        ck_assert_msg(err <= 1e-4 * mag, "%s image %d: relative error %g > 1e-4", model_rel, b, err / mag);
    }
    qf_engine_free(e);
    qf_graph_free(g);
    free(want);
    return 0;
}

START_TEST(bundled_example)
{
    ck_assert_int_eq(check_model("examples/fashion-mnist/model.onnx", "tests/ref/fashion-mnist.logits"), 0);
}
END_TEST

START_TEST(resnet20)
{
    check_model("../shared/data/cifar10/resnet20.onnx", "tests/ref/resnet20.logits");
}
END_TEST

START_TEST(mobilenetv2)
{
    check_model("../shared/data/imagenet/mobilenetv2-fp32.onnx", "tests/ref/mobilenetv2.logits");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("models_ref");
    TCase *tc = tcase_create("models");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, bundled_example);
    tcase_add_test(tc, resnet20);
    tcase_add_test(tc, mobilenetv2);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
