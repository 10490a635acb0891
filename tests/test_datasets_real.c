/* datasets/ on the real images of ../shared/data (skipped, exit 77, where that
 * folder is absent): preprocessing against PIL's pixels recorded in
 * tests/images/pil_reference.txt (ImageNet: resize 256 bilinear + center crop
 * 224; CIFAR-10: x/255 then mean/std), and whole folders through the loader
 * with synset and class-folder labels. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "qforge/qforge.h"
#include "testutil.h"

#define DATA QF_SRCDIR "/../shared/data"
#define REFERENCE QF_SRCDIR "/tests/images/pil_reference.txt"

typedef struct ref_image {
    char path[256], preset[32];
    int h, w;
    double mean[3];
    int n;
    int y[256], x[256], c[256], v[256];
} ref_image;

// Reads the next "image" block of the reference file; false at the end.
static bool read_ref(FILE *f, ref_image *r)
{
    char line[512];
    r->n = 0;
    long pos = ftell(f);
    bool have = false;
    while (fgets(line, sizeof(line), f)) {
        if (line[0] == '#') continue;
        if (strncmp(line, "image ", 6) == 0) {
            if (have) {
                fseek(f, pos, SEEK_SET);
                return true;
            }
            ck_assert_int_eq(sscanf(line, "image %255s %31s %d %d", r->path, r->preset, &r->h, &r->w), 4);
            have = true;
        } else if (strncmp(line, "mean ", 5) == 0) {
            ck_assert_int_eq(sscanf(line, "mean %lf %lf %lf", &r->mean[0], &r->mean[1], &r->mean[2]), 3);
        } else if (strncmp(line, "px ", 3) == 0) {
            ck_assert_int_lt(r->n, 256);
            ck_assert_int_eq(sscanf(line, "px %d %d %d %d", &r->y[r->n], &r->x[r->n], &r->c[r->n], &r->v[r->n]), 4);
            r->n++;
        }
        pos = ftell(f);
    }
    return have;
}

START_TEST(matches_pil_reference)
{
    FILE *f = fopen(REFERENCE, "r");
    ck_assert_ptr_nonnull(f);
    ref_image *r = malloc(sizeof(*r));
    int images = 0;
    while (read_ref(f, r)) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", DATA, r->path);
        qf_image img;
        ck_assert_msg(qf_image_read(path, &img) == QF_OK, "%s", qf_error_message());
        bool imagenet = strcmp(r->preset, "imagenet") == 0;

        // Raw geometry (mean 0, std 1/255 gives back 0..255 values) to compare
        // with PIL's uint8 pixels.
        qf_preprocess pp;
        qf_preprocess_init(&pp);
        ck_assert_int_eq(qf_preprocess_preset(&pp, r->preset), QF_OK);
        for (int i = 0; i < 3; i++) pp.mean[i] = 0, pp.std[i] = 1.0f / 255;
        pp.width = r->w, pp.height = r->h;
        size_t hw = (size_t)r->h * r->w;
        float *out = malloc(sizeof(float) * 3 * hw);
        ck_assert_int_eq(qf_preprocess_image(&pp, &img, path, out), QF_OK);

        // out is (3,H,W). PIL rounds to uint8, we do not: its rounding is the
        // whole difference, about 0.25 on average, so the bound is 0.5/255 of
        // the [0,1] range (0.5 here), and no pixel may be off by 2 or more.
        double sum_abs = 0, max_abs = 0;
        for (int k = 0; k < r->n; k++) {
            double d = fabs(out[(size_t)r->c[k] * hw + (size_t)r->y[k] * r->w + r->x[k]] - r->v[k]);
            sum_abs += d;
            if (d > max_abs) max_abs = d;
        }
        for (int ch = 0; ch < 3; ch++) {
            double m = 0;
            for (size_t i = 0; i < hw; i++) m += out[ch * hw + i];
            ck_assert_msg(fabs(m / hw - r->mean[ch]) < 0.25, "%s: channel %d mean %.4f, PIL %.4f", r->path, ch,
                          m / hw, r->mean[ch]);
        }
        ck_assert_msg(sum_abs / r->n < 0.5, "%s: mean abs diff %.3f", r->path, sum_abs / r->n);
        ck_assert_msg(max_abs < (imagenet ? 2.0 : 1e-3), "%s: max abs diff %.3f", r->path, max_abs);
        if (!imagenet) {
            // CIFAR-10 with its preset: (x/255 - mean) / std exactly, no resize.
            qf_preprocess_init(&pp);
            ck_assert_int_eq(qf_preprocess_option(&pp, "--preset", "cifar10", &(int){0}), QF_OK);
            pp.width = pp.height = 32;
            ck_assert_int_eq(qf_preprocess_image(&pp, &img, path, out), QF_OK);
            const float mean[3] = {0.4914f, 0.4822f, 0.4465f}, std[3] = {0.2023f, 0.1994f, 0.2010f};
            for (int k = 0; k < r->n; k++) {
                float want = (r->v[k] / 255.0f - mean[r->c[k]]) / std[r->c[k]];
                ck_assert_float_eq_tol(out[(size_t)r->c[k] * hw + (size_t)r->y[k] * r->w + r->x[k]], want, 1e-5f);
            }
        }
        free(out);
        qf_image_free(&img);
        images++;
    }
    ck_assert_int_eq(images, 9);
    free(r);
    fclose(f);
}
END_TEST

START_TEST(imagenet_folder_with_synsets)
{
    qf_dataset *ds;
    ck_assert_int_eq(qf_dataset_open(DATA "/imagenet/images", &ds), QF_OK);
    ck_assert_int_eq(qf_dataset_count(ds), 200);
    ck_assert_int_eq(qf_dataset_label_synsets(ds, DATA "/imagenet/synsets.txt"), QF_OK);
    ck_assert_str_eq(qf_dataset_path(ds, 0), "calib/n01440764_tench.JPEG");
    ck_assert_int_eq(qf_dataset_label(ds, 0), 0);  // tench is line 0
    const qf_classes *cl = qf_dataset_classes(ds);
    ck_assert_int_eq(qf_classes_count(cl), 1000);
    ck_assert_ptr_nonnull(strstr(qf_classes_name(cl, 0), "tench"));

    qf_preprocess pp;
    qf_preprocess_init(&pp);
    ck_assert_int_eq(qf_preprocess_preset(&pp, "imagenet"), QF_OK);
    qf_loader_options opt = {.batch = 32, .threads = 2, .strict = true};
    qf_loader *l;
    ck_assert_int_eq(qf_loader_create(ds, &pp, &opt, &l), QF_OK);
    int c, h, w;
    qf_loader_shape(l, &c, &h, &w);
    ck_assert(c == 3 && h == 224 && w == 224);
    float *batch = malloc(sizeof(float) * 32 * 3 * 224 * 224);
    int labels[32], count, total = 0;
    bool seen[1000] = {0};
    double lo = 1e9, hi = -1e9;
    while (qf_loader_next(l, batch, labels, &count) == QF_OK && count > 0) {
        for (int k = 0; k < count; k++) {
            ck_assert(labels[k] >= 0 && labels[k] < 1000);
            ck_assert(!seen[labels[k]]);  // one image per class
            seen[labels[k]] = true;
        }
        for (size_t i = 0; i < (size_t)count * 3 * 224 * 224; i++) {
            if (batch[i] < lo) lo = batch[i];
            if (batch[i] > hi) hi = batch[i];
        }
        total += count;
    }
    ck_assert_int_eq(total, 200);
    ck_assert_int_eq(qf_loader_skipped(l), 0);
    // Normalized range: (0 - 0.485)/0.229 = -2.118 ... (1 - 0.406)/0.225 = 2.64.
    ck_assert(lo >= -2.12 && lo < -1.5);
    ck_assert(hi <= 2.65 && hi > 2.0);
    free(batch);
    qf_loader_free(l);
    qf_dataset_free(ds);
}
END_TEST

START_TEST(cifar_class_folders)
{
    static const char *const names[10] = {"airplane", "automobile", "bird", "cat", "deer",
                                          "dog", "frog", "horse", "ship", "truck"};
    qf_dataset *ds;
    ck_assert_int_eq(qf_dataset_open(DATA "/cifar10/calib-png", &ds), QF_OK);
    ck_assert_int_eq(qf_dataset_count(ds), 1000);
    ck_assert_int_eq(qf_dataset_label_folders(ds, NULL), QF_OK);
    const qf_classes *cl = qf_dataset_classes(ds);
    ck_assert_int_eq(qf_classes_count(cl), 10);
    for (int k = 0; k < 10; k++) ck_assert_str_eq(qf_classes_name(cl, k), names[k]);
    qf_dataset_subset(ds, 50);  // every 20th: 5 per class
    int per_class[10] = {0};
    for (int64_t i = 0; i < qf_dataset_count(ds); i++) per_class[qf_dataset_label(ds, i)]++;
    for (int k = 0; k < 10; k++) ck_assert_int_eq(per_class[k], 5);
    qf_dataset_free(ds);
}
END_TEST

int main(void)
{
    struct stat sb;
    if (stat(DATA "/imagenet/images", &sb) != 0 || stat(DATA "/cifar10/test", &sb) != 0) {
        printf("SKIP: %s is absent\n", DATA);
        return 77;
    }
    Suite *s = suite_create("datasets_real");
    TCase *tc = tcase_create("datasets_real");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, matches_pil_reference);
    tcase_add_test(tc, imagenet_folder_with_synsets);
    tcase_add_test(tc, cifar_class_folders);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
