/* Decode + preprocess throughput of datasets/ (images/s) with 1 and 2 decode
 * threads, ImageNet preset, on ../shared/data/imagenet/images by default.
 * Validates first (image count, shape, value range, same tensors with 1 and 2
 * threads), then times whole passes and prints medians.
 * Usage: bench/bench_decode [FOLDER] [PASSES] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "qforge/qforge.h"

#define BATCH 32

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static double now(void) { return clock_s(CLOCK_MONOTONIC); }
// CPU seconds of all threads: the cost per image, which other load on a
// shared machine does not inflate the way it inflates wall time.
static double cpu(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One pass over the dataset; returns images read, sets *sum to a checksum of
// the tensors (or leaves it alone when NULL), -1 on error.
static long pass(const qf_dataset *ds, const qf_preprocess *pp, int threads, float *buf, double *sum,
                 long *skipped)
{
    qf_loader_options opt = {.batch = BATCH, .threads = threads};
    qf_loader *l;
    if (qf_loader_create(ds, pp, &opt, &l) != QF_OK) return -1;
    int c, h, w, count;
    qf_loader_shape(l, &c, &h, &w);
    size_t img = (size_t)c * h * w;
    long total = 0;
    qf_status st;
    while ((st = qf_loader_next(l, buf, NULL, &count)) == QF_OK && count > 0) {
        if (sum)
            for (size_t i = 0; i < (size_t)count * img; i++) *sum += buf[i] * (double)((i % 7) + 1);
        total += count;
    }
    if (skipped) *skipped = (long)qf_loader_skipped(l);
    qf_loader_free(l);
    return st == QF_OK ? total : -1;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : QF_SRCDIR "/../shared/data/imagenet/images";
    int passes = argc > 2 ? atoi(argv[2]) : 5;
    if (passes < 1) passes = 1;
    qf_dataset *ds;
    if (qf_dataset_open(dir, &ds) != QF_OK) {
        fprintf(stderr, "bench_decode: %s\n", qf_error_message());
        return 77;
    }
    long n = (long)qf_dataset_count(ds);
    qf_preprocess pp;
    qf_preprocess_init(&pp);
    qf_preprocess_preset(&pp, "imagenet");
    float *buf = malloc(sizeof(float) * BATCH * 3 * 224 * 224);

    // ---- validate -----------------------------------------------------------------
    double sum1 = 0, sum2 = 0;
    long skipped = 0;
    long got1 = pass(ds, &pp, 1, buf, &sum1, &skipped);
    long got2 = pass(ds, &pp, 2, buf, &sum2, NULL);
    if (got1 < 0 || got2 < 0) {
        fprintf(stderr, "bench_decode: %s\n", qf_error_message());
        return 1;
    }
    int c, h, w;
    qf_preprocess_shape(&pp, &c, &h, &w);
    printf("validate: %s: %ld files, %ld tensors of %dx%dx%d, %ld skipped, checksum 1 thread %.6e, 2 threads %.6e\n",
           dir, n, got1, c, h, w, skipped, sum1, sum2);
    if (got1 + skipped != n || got1 != got2 || c != 3 || h != 224 || w != 224 || sum1 != sum2 || !isfinite(sum1)) {
        fprintf(stderr, "bench_decode: validation failed\n");
        return 1;
    }

    // ---- time -------------------------------------------------------------------------
    // Decode alone (1 thread), to show what part of the time is JPEG decoding.
    double t_dec[64], ms_dec[64];
    if (passes > 64) passes = 64;
    for (int p = 0; p < passes; p++) {
        double t0 = now(), c0 = cpu();
        for (long i = 0; i < n; i++) {
            qf_image img;
            if (qf_image_read(qf_dataset_full_path(ds, i), &img) == QF_OK) qf_image_free(&img);
        }
        t_dec[p] = n / (now() - t0);
        ms_dec[p] = (cpu() - c0) * 1e3 / n;
    }
    printf("decode only,          1 thread : %8.1f images/s (median of %d passes), %.2f CPU ms/image\n",
           median(t_dec, passes), passes, median(ms_dec, passes));
    double rate[2];
    for (int threads = 1; threads <= 2; threads++) {
        double r[64], ms[64];
        for (int p = 0; p < passes; p++) {
            double t0 = now(), c0 = cpu();
            long got = pass(ds, &pp, threads, buf, NULL, NULL);
            r[p] = got / (now() - t0);
            ms[p] = (cpu() - c0) * 1e3 / got;
        }
        rate[threads - 1] = median(r, passes);
        printf("decode + preprocess,  %d thread%s: %8.1f images/s (median of %d passes, min %.1f, max %.1f), "
               "%.2f CPU ms/image\n", threads, threads > 1 ? "s" : " ", rate[threads - 1], passes, r[0],
               r[passes - 1], median(ms, passes));
    }
    printf("2 threads / 1 thread: %.2fx\n", rate[1] / rate[0]);
    free(buf);
    qf_dataset_free(ds);
    return 0;
}
