/* Unit tests for calib/: exact streaming histograms and merges, the four
 * calibrators on histograms with known answers, the observer's independence from
 * batch size and threads, table.calib round trips and rejection of mangled tables,
 * the TensorRT cache, the report's self-containment, and SHA-256 test vectors. */
#include <check.h>
#include <dirent.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>
#include "internal.h"
#include "quant_math.h"
#include "qforge/calib.h"
#include "../calib/calib_internal.h"
#include "testutil.h"

/* ---- helpers ------------------------------------------------------------------------ */

static uint64_t rng_state;
static uint64_t rng_next(void)  // splitmix64: deterministic, so every run tests the same data
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double rng_uniform(void) { return ((rng_next() >> 11) + 0.5) * 0x1p-53; }  // (0, 1)
static double rng_gauss(void)
{
    return sqrt(-2.0 * log(rng_uniform())) * cos(2 * M_PI * rng_uniform());
}

static char tmpdir[64];
static void make_tmpdir(void)
{
    strcpy(tmpdir, "/tmp/qf-test-calib-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}
static void remove_tmpdir(void)
{
    DIR *d = opendir(tmpdir);
    if (!d) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name), unlink(p);
    closedir(d);
    rmdir(tmpdir);
}
static const char *tmp_path(const char *name)
{
    static char p[8][256];
    static int k;
    k = (k + 1) % 8;
    snprintf(p[k], sizeof p[k], "%s/%s", tmpdir, name);
    return p[k];
}
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    ck_assert_uint_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    b[n] = '\0';
    fclose(f);
    if (len) *len = (size_t)n;
    return b;
}
static void spit(const char *path, const char *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}
/* Files in tmpdir whose name contains `part`. */
static int count_files(const char *part)
{
    DIR *d = opendir(tmpdir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) n += strstr(e->d_name, part) != NULL;
    closedir(d);
    return n;
}
static bool hist_equal(const qf_histogram *a, const qf_histogram *b)
{
    return a->exp == b->exp && a->zeros == b->zeros && a->nonfinite == b->nonfinite &&
           !memcmp(&a->absmax, &b->absmax, sizeof a->absmax) && !memcmp(&a->min, &b->min, sizeof a->min) &&
           !memcmp(a->bins, b->bins, sizeof a->bins);
}
static uint32_t f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

/* Histogram straight from a density: counts[b] = round(N * mass of bin b). kind 0 is
 * |N(0,1)| (half-normal), kind 1 is |Laplace(0,1)| = Exp(1). absmax is just below the
 * upper edge of the last nonzero bin. No sampling noise: the answers are the math's. */
static void density_hist(qf_histogram *h, int range_exp, double N, int kind)
{
    qf_histogram_init(h);
    h->exp = range_exp;
    double w = qf_histogram_bin_width(h);
    int last = -1;
    for (int b = 0; b < QF_HIST_BINS; b++) {
        double lo = b * w, hi = (b + 1) * w;
        double p = kind == 0 ? erf(hi / M_SQRT2) - erf(lo / M_SQRT2) : exp(-lo) - exp(-hi);
        h->bins[b] = (uint64_t)floor(N * p + 0.5);
        if (h->bins[b]) last = b;
    }
    h->absmax = nextafterf((float)((last + 1) * w), 0.0f);
}

/* ---- SHA-256 ------------------------------------------------------------------------------ */

static void sha_hex(const void *data, size_t n, char hex[65])
{
    qf_sha256_ctx c;
    uint8_t d[32];
    qf_sha256_init(&c);
    qf_sha256_update(&c, data, n);
    qf_sha256_final(&c, d);
    qf_sha256_hex(d, hex);
}

START_TEST(sha256_vectors)
{
    char hex[65];
    // FIPS 180-4 / NIST examples
    sha_hex("", 0, hex);
    ck_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    sha_hex("abc", 3, hex);
    ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    sha_hex(two, strlen(two), hex);
    ck_assert_str_eq(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const char *four = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopq"
                       "klmnopqrlmnopqrsmnopqrstnopqrstu";
    sha_hex(four, strlen(four), hex);
    ck_assert_str_eq(hex, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
    // one million 'a', fed in uneven pieces to exercise the buffering
    char *a = malloc(1000000);
    memset(a, 'a', 1000000);
    qf_sha256_ctx c;
    uint8_t d[32];
    qf_sha256_init(&c);
    for (size_t off = 0, step = 1; off < 1000000; off += step, step = step * 3 % 1000 + 1)
        qf_sha256_update(&c, a + off, off + step > 1000000 ? 1000000 - off : step);
    qf_sha256_final(&c, d);
    qf_sha256_hex(d, hex);
    ck_assert_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    // every length around the 55/56/64-byte padding boundaries: pieces == whole
    for (size_t n = 50; n < 140; n++) {
        char whole[65], pieces[65];
        sha_hex(a, n, whole);
        qf_sha256_init(&c);
        for (size_t i = 0; i < n; i++) qf_sha256_update(&c, a + i, 1);
        qf_sha256_final(&c, d);
        qf_sha256_hex(d, pieces);
        ck_assert_str_eq(whole, pieces);
    }
    // files
    make_tmpdir();
    spit(tmp_path("abc"), "abc", 3);
    ck_assert_int_eq(qf_sha256_file(tmp_path("abc"), hex), QF_OK);
    ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    spit(tmp_path("mil"), a, 1000000);
    ck_assert_int_eq(qf_sha256_file(tmp_path("mil"), hex), QF_OK);
    ck_assert_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    ck_assert_int_eq(qf_sha256_file(tmp_path("missing"), hex), QF_ERR_IO);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), "missing"));
    free(a);
    remove_tmpdir();
}
END_TEST

/* ---- histograms --------------------------------------------------------------------------- */

/* Data spanning many octaves, with zeros, negatives and a few NaN/Inf. */
static float *wide_data(size_t n)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) {
        double g = rng_gauss() * exp2(rng_uniform() * 24 - 12);
        x[i] = (float)g;
        if (i % 97 == 5) x[i] = 0.0f;
        if (i % 1009 == 7) x[i] = i % 2 ? NAN : -INFINITY;
    }
    return x;
}

/* Ascending |x|, NaN last. */
static int cmp_abs(const void *a, const void *b)
{
    float u = fabsf(*(const float *)a), v = fabsf(*(const float *)b);
    return isnan(u) ? (isnan(v) ? 0 : 1) : isnan(v) ? -1 : (u > v) - (u < v);
}

START_TEST(histogram_exact)
{
    rng_state = 1;
    size_t n = 200000;
    float *x = wide_data(n);
    // Reference: the final range computed first, every bin by direct formula.
    qf_histogram ref;
    qf_histogram_init(&ref);
    float amax = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i]) && fabsf(x[i]) > amax) amax = fabsf(x[i]);
    int e;
    frexp(amax, &e);
    ref.exp = e;
    ref.absmax = amax;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) ref.nonfinite++;
        else if (x[i] == 0) ref.zeros++;
        else ref.bins[(int)floor(ldexp(fabs(x[i]), 11 - e))]++;
        if (isfinite(x[i]) && x[i] < ref.min) ref.min = x[i] + 0.0f; /* a zero as +0 */
    }
    ck_assert(ref.min < -1.0f);
    ck_assert(ldexp(1.0, e) > amax && ldexp(1.0, e - 1) <= amax);
    // Streaming, in ascending order of magnitude: the range widens many times.
    float *sorted = malloc(n * sizeof *sorted);
    memcpy(sorted, x, n * sizeof *x);
    qsort(sorted, n, sizeof *sorted, cmp_abs);
    qf_histogram h1, h2;
    qf_histogram_init(&h1);
    qf_histogram_add(&h1, sorted, n);
    ck_assert(hist_equal(&h1, &ref));
    // One value at a time, in the original order.
    qf_histogram_init(&h2);
    for (size_t i = 0; i < n; i++) qf_histogram_add(&h2, x + i, 1);
    ck_assert(hist_equal(&h2, &ref));
    ck_assert_uint_eq(qf_histogram_count(&ref) + ref.nonfinite, n);
    ck_assert_uint_gt(ref.nonfinite, 100);
    free(sorted);
    free(x);
}
END_TEST

START_TEST(histogram_merge_exact)
{
    rng_state = 2;
    size_t n = 100000;
    float *x = wide_data(n);
    qf_histogram whole, lo, hi, m;
    qf_histogram_init(&whole);
    qf_histogram_add(&whole, x, n);
    // Halves with very different ranges: small values in one, the rest in the other.
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    size_t na = 0, nb = 0;
    for (size_t i = 0; i < n; i++) {
        if (fabsf(x[i]) < 0.01f) a[na++] = x[i];
        else b[nb++] = x[i];
    }
    qf_histogram_init(&lo);
    qf_histogram_init(&hi);
    qf_histogram_add(&lo, a, na);
    qf_histogram_add(&hi, b, nb);
    ck_assert_int_lt(lo.exp, hi.exp - 5);
    m = lo;
    qf_histogram_merge(&m, &hi);  // the narrow one widens
    ck_assert(hist_equal(&m, &whole));
    m = hi;
    qf_histogram_merge(&m, &lo);  // the wide one absorbs
    ck_assert(hist_equal(&m, &whole));
    // Plain halves, and merging into an empty histogram.
    qf_histogram_init(&lo);
    qf_histogram_init(&hi);
    qf_histogram_add(&lo, x, n / 2);
    qf_histogram_add(&hi, x + n / 2, n - n / 2);
    qf_histogram_init(&m);
    qf_histogram_merge(&m, &lo);
    qf_histogram_merge(&m, &hi);
    ck_assert(hist_equal(&m, &whole));
    free(a);
    free(b);
    free(x);
}
END_TEST

START_TEST(histogram_batch_splits)
{
    rng_state = 3;
    size_t n = 60000;
    float *x = wide_data(n);
    qf_histogram ref;
    qf_histogram_init(&ref);
    qf_histogram_add(&ref, x, n);
    float thr_ref[QF_CALIB_METHOD_COUNT];
    for (int m = 0; m < QF_CALIB_METHOD_COUNT; m++) thr_ref[m] = qf_calib_threshold(&ref, m, 99.9);
    const size_t splits[] = {1, 7, 64, 1000, 33333};
    for (size_t s = 0; s < QF_ARRAY_LEN(splits); s++) {
        qf_histogram h;
        qf_histogram_init(&h);
        for (size_t off = 0; off < n; off += splits[s])
            qf_histogram_add(&h, x + off, off + splits[s] > n ? n - off : splits[s]);
        ck_assert(hist_equal(&h, &ref));
        for (int m = 0; m < QF_CALIB_METHOD_COUNT; m++)
            ck_assert_uint_eq(f32_bits(qf_calib_threshold(&h, m, 99.9)), f32_bits(thr_ref[m]));
    }
    free(x);
}
END_TEST

/* The signed minimum beside the |x| bins: the smallest finite value (a zero
 * as +0, never -0), +inf while there is none; the same bits whatever the
 * order, the split into calls or the merging, on the vectorized chunks and
 * the reference path (taken for chunks with NaN or Inf) alike, and a Relu
 * output's made in its input's pass. */
START_TEST(histogram_min)
{
    qf_histogram h, a, b, m;
    qf_histogram_init(&h);
    ck_assert(isinf(h.min) && h.min > 0);
    const float bad[3] = {NAN, -INFINITY, INFINITY};
    qf_histogram_add(&h, bad, 3);
    ck_assert(isinf(h.min) && h.min > 0); /* no finite value: still none */
    const float zeros[2] = {-0.0f, 0.0f}, zeros_rev[2] = {0.0f, -0.0f};
    qf_histogram_init(&a);
    qf_histogram_add(&a, zeros, 2);
    qf_histogram_init(&b);
    qf_histogram_add(&b, zeros_rev, 2);
    ck_assert_uint_eq(f32_bits(a.min), 0);
    ck_assert_uint_eq(f32_bits(b.min), 0);

    /* a two-sided tensor whose negative side is a quarter of its positive one */
    rng_state = 6;
    const size_t n = 30000;
    float *x = malloc(n * sizeof *x), *rev = malloc(n * sizeof *rev), *r = malloc(n * sizeof *r);
    for (size_t i = 0; i < n; i++) x[i] = (float)(rng_uniform() * 1.25 - 0.25) * 8.0f;
    x[n / 3] = -2.0f;  /* -0.25 of the largest */
    x[n / 2] = 8.0f;
    x[n / 4] = -0.0f;
    for (size_t i = 0; i < n; i++) rev[i] = x[n - 1 - i];
    for (int pass = 0; pass < 2; pass++) { /* pass 1: a NaN in every other call (the reference path) */
        qf_histogram_init(&h);
        qf_histogram_add(&h, x, n);
        ck_assert_uint_eq(f32_bits(h.min), f32_bits(-2.0f));
        qf_histogram_init(&a);
        qf_histogram_init(&b);
        for (size_t off = 0; off < n; off += 1000) {
            qf_histogram_add(&a, rev + off, 1000);
            qf_histogram_add(&b, x + off, 1000);
            if (pass) qf_histogram_add(&b, bad, 1);
        }
        ck_assert_uint_eq(f32_bits(a.min), f32_bits(-2.0f));
        ck_assert_uint_eq(f32_bits(b.min), f32_bits(-2.0f));
        qf_histogram_init(&a);
        qf_histogram_init(&b);
        qf_histogram_add(&a, x, n / 2);       /* holds the minimum */
        qf_histogram_add(&b, x + n / 2, n - n / 2);
        m = b;
        qf_histogram_merge(&m, &a);
        ck_assert_uint_eq(f32_bits(m.min), f32_bits(-2.0f));
        m = a;
        qf_histogram_merge(&m, &b);
        ck_assert_uint_eq(f32_bits(m.min), f32_bits(-2.0f));
        qf_histogram_init(&m);
        qf_histogram_merge(&m, &b); /* an empty histogram takes the other's */
        ck_assert_float_eq(m.min, b.min);
        ck_assert(b.min > -2.0f && b.min < 0.0f);
        x[n / 5] = NAN;
    }

    /* a Relu's histogram from its input: 0 where any x <= 0, else the smallest x */
    for (int positive = 0; positive < 2; positive++) {
        for (size_t i = 0; i < n; i++) r[i] = positive ? fabsf(rev[i]) + 0.5f : rev[i];
        qf_histogram_init(&h);
        qf_histogram_init(&a);
        qfi_histogram_add_relu(&h, &a, r, n);
        ck_assert_uint_eq(f32_bits(a.min), f32_bits(positive ? 0.5f : 0.0f));
        ck_assert_uint_eq(f32_bits(h.min), f32_bits(positive ? 0.5f : -2.0f));
    }
    free(x);
    free(rev);
    free(r);
}
END_TEST

/* A Relu output's histogram made in its input's pass (calib/observer.c) must
 * equal counting max(x, 0) itself: data with both signs, -0, outliers that
 * widen either range mid-call, with and without NaN/Inf, in chunks of any
 * size, into histograms that already hold counts at other ranges. */
START_TEST(histogram_relu_exact)
{
    rng_state = 4;
    const size_t n = 70000;
    float *x = wide_data(n), *clean = malloc(n * sizeof *clean), *r = malloc(n * sizeof *r);
    size_t nc = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i])) clean[nc++] = i % 311 == 3 ? -0.0f : x[i];
    clean[nc / 2] = 4096.0f;  /* a positive outlier: the Relu's range widens too */
    clean[nc / 3] = -8192.0f; /* a negative one: only the input's range widens */
    const float *data[2] = {clean, x};
    const size_t len[2] = {nc, n};
    const size_t chunks[] = {1, 5, 1000, 4096, 70000};
    for (int d = 0; d < 2; d++) {
        for (size_t i = 0; i < len[d]; i++) r[i] = data[d][i] > 0 || isnan(data[d][i]) ? data[d][i] : 0.0f;
        for (size_t k = 0; k < QF_ARRAY_LEN(chunks); k++) {
            qf_histogram h, hr, h_ref, hr_ref;
            qf_histogram_init(&h);
            qf_histogram_init(&hr);
            const float seed_in[3] = {0.3f, -2.0f, 0.0f}, seed_relu[2] = {0.01f, 0.0f};
            qf_histogram_add(&h, seed_in, 3);
            qf_histogram_add(&hr, seed_relu, 2);
            h_ref = h, hr_ref = hr;
            for (size_t off = 0; off < len[d]; off += chunks[k]) {
                size_t m = len[d] - off < chunks[k] ? len[d] - off : chunks[k];
                qfi_histogram_add_relu(&h, &hr, data[d] + off, m);
                qf_histogram_add(&h_ref, data[d] + off, m);
                qf_histogram_add(&hr_ref, r + off, m);
            }
            ck_assert_msg(hist_equal(&h, &h_ref), "input histogram, data %d, chunks of %zu", d, chunks[k]);
            ck_assert_msg(hist_equal(&hr, &hr_ref), "relu histogram, data %d, chunks of %zu", d, chunks[k]);
        }
    }
    free(x);
    free(clean);
    free(r);
}
END_TEST

/* ---- calibrators -------------------------------------------------------------------------- */

START_TEST(calib_uniform)
{
    // Constructed: every bin of [0, 1) holds the same count, absmax in the last bin.
    qf_histogram h;
    qf_histogram_init(&h);
    h.exp = 0;
    for (int b = 0; b < QF_HIST_BINS; b++) h.bins[b] = 1000;
    h.absmax = 0.99995f;
    ck_assert_float_eq(qf_calib_minmax(&h), 0.99995f);
    ck_assert_float_eq(qf_calib_entropy(&h), 0.99995f);  // no candidate below the full range is closer
    ck_assert_double_eq_tol(qf_calib_percentile(&h, 99.99), 0.9999, 1e-6);
    ck_assert_double_eq_tol(qf_calib_percentile(&h, 50), 0.5, 1e-6);
    ck_assert_float_eq(qf_calib_percentile(&h, 100), 0.99995f);
    // Clipping a uniform distribution costs more than its rounding saves: MSE keeps ~all.
    ck_assert_double_ge(qf_calib_mse(&h), 0.97);

    // Sampled: uniform on [0, 0.6), so the power-of-two range [0, 1) is mostly empty.
    rng_state = 4;
    size_t n = 1000000;
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = (float)(0.6 * rng_uniform()) * (i % 2 ? 1 : -1);
    qf_histogram_init(&h);
    qf_histogram_add(&h, x, n);
    ck_assert_int_eq(h.exp, 0);
    ck_assert_double_le(h.absmax, 0.6);
    ck_assert_double_ge(h.absmax, 0.5999);
    ck_assert_double_eq_tol(qf_calib_entropy(&h), h.absmax, 2 * qf_histogram_bin_width(&h));
    ck_assert_double_eq_tol(qf_calib_percentile(&h, 99.99), 0.6 * 0.9999, 1e-3);
    ck_assert_double_ge(qf_calib_mse(&h), 0.97 * 0.6);
    free(x);
}
END_TEST

START_TEST(calib_gaussian)
{
    qf_histogram h;
    for (int exp = 3; exp <= 5; exp++) {
        density_hist(&h, exp, 1e12, 0);
        ck_assert_double_ge(h.absmax, 6.5);  // N = 1e12 reaches past 6.5 sigma
        // P(|x| > 3.8906) = 1e-4 for a unit Gaussian.
        ck_assert_double_eq_tol(qf_calib_percentile(&h, 99.99), 3.8906, 0.005);
        // The MSE-optimal clipping of a Gaussian at 8 bits is 3.92 sigma (Banner et al.,
        // ACIQ); our grid is within a bin of that.
        ck_assert_double_eq_tol(qf_calib_mse(&h), 3.92, 0.04);
        // KL keeps more of the tail than MSE (clipping a mass spike is expensive in KL)
        // but still clips well inside absmax: 4..5.2 sigma here.
        float ent = qf_calib_entropy(&h);
        ck_assert_double_ge(ent, 4.0);
        ck_assert_double_le(ent, 5.2);
        ck_assert_float_eq(qf_calib_minmax(&h), h.absmax);
    }
}
END_TEST

START_TEST(calib_laplacian)
{
    qf_histogram h;
    for (int exp = 5; exp <= 6; exp++) {
        density_hist(&h, exp, 1e12, 1);  // |x| ~ Exp(1), absmax ~ 27
        ck_assert_double_ge(h.absmax, 24);
        ck_assert_double_eq_tol(qf_calib_percentile(&h, 99.99), -log(1e-4), 0.01);
        // ACIQ: MSE-optimal 8-bit clipping of a Laplacian is 9.89 b.
        ck_assert_double_eq_tol(qf_calib_mse(&h), 9.89, 0.1);
        float ent = qf_calib_entropy(&h);
        ck_assert_double_ge(ent, 9.5);
        ck_assert_double_le(ent, 12.5);
        ck_assert_double_lt(ent, 0.6 * h.absmax);
    }
    // Scale invariance: b = 0.25 is the same histogram shifted two octaves down.
    qf_histogram a, b;
    density_hist(&a, 5, 1e12, 1);
    b = a;
    b.exp -= 2;
    b.absmax = a.absmax / 4;
    ck_assert_float_eq(qf_calib_mse(&b), qf_calib_mse(&a) / 4);
    ck_assert_float_eq(qf_calib_entropy(&b), qf_calib_entropy(&a) / 4);
}
END_TEST

START_TEST(calib_outlier)
{
    rng_state = 5;
    size_t n = 1000000;
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = (float)rng_gauss();
    x[n / 2] = 200.0f;  // one far outlier
    qf_histogram h;
    qf_histogram_init(&h);
    qf_histogram_add(&h, x, n);
    ck_assert_float_eq(qf_calib_minmax(&h), 200.0f);
    ck_assert_double_lt(qf_calib_percentile(&h, 99.99), 4.5);
    ck_assert_double_gt(qf_calib_percentile(&h, 99.99), 3.5);
    // Entropy's smallest candidate is 128 bins = 1/16 of the range; it picks it or
    // near it, an order of magnitude below the outlier.
    float ent = qf_calib_entropy(&h);
    ck_assert_double_lt(ent, 20.0);
    ck_assert_double_gt(ent, 3.0);
    // MSE weighs the outlier's squared error (~4e4) against a million rounding errors
    // that grow with T: it clips the outlier, but less than percentile does.
    float mse = qf_calib_mse(&h);
    ck_assert_double_gt(mse, qf_calib_percentile(&h, 99.99));
    ck_assert_double_lt(mse, 0.25 * qf_calib_minmax(&h));
    free(x);
}
END_TEST

/* The TensorRT procedure spelled out bin by bin, to check the prefix-sum version. */
static double kl_reference(const qf_histogram *h, int i)
{
    int n = QF_HIST_BINS;
    double P[QF_HIST_BINS] = {0}, Q[QF_HIST_BINS] = {0}, total = 0, out = 0, kept = 0;
    for (int b = 0; b < n; b++) total += (double)h->bins[b];
    for (int b = 0; b < i; b++) P[b] = (double)h->bins[b], kept += P[b];
    for (int b = i; b < n; b++) out += (double)h->bins[b];
    P[i - 1] += out;
    int levels = i < 128 ? i : 128, m = i / levels;
    for (int g = 0; g < levels; g++) {
        int s = g * m, e = g == levels - 1 ? i : s + m, nz = 0;
        double sum = 0;
        for (int b = s; b < e; b++) sum += (double)h->bins[b], nz += P[b] > 0;
        for (int b = s; b < e; b++) Q[b] = P[b] > 0 ? sum / nz / kept : 0;
    }
    int orphans = 0;
    for (int b = 0; b < i; b++) orphans += P[b] > 0 && Q[b] == 0;
    double kl = 0;
    for (int b = 0; b < i; b++) {
        if (P[b] == 0) continue;
        double q = Q[b] == 0 ? 1e-4 : Q[b] * (1 - orphans * 1e-4);
        kl += P[b] / total * log(P[b] / total / q);
    }
    return kl;
}

START_TEST(calib_entropy_matches_reference)
{
    rng_state = 6;
    for (int trial = 0; trial < 6; trial++) {
        qf_histogram h;
        qf_histogram_init(&h);
        h.exp = 0;
        // Lumpy histograms with empty stretches, spikes and a sparse tail.
        int used = 1100 + (int)(rng_next() % 948);
        for (int b = 0; b < used; b++) {
            double r = rng_uniform();
            h.bins[b] = r < 0.2 ? 0 : (uint64_t)(1000 * exp(-b / (150.0 + 100 * trial)) * r + (r > 0.97 ? 5000 : 0));
        }
        h.bins[used - 1] = 1;
        h.absmax = nextafterf((float)(used * qf_histogram_bin_width(&h)), 0);
        float ent = qf_calib_entropy(&h);
        double w = qf_histogram_bin_width(&h);
        int chosen = ent == h.absmax ? used : (int)lround(ent / w);
        double best = INFINITY;
        for (int i = 128; i <= used; i++) {
            double kl = kl_reference(&h, i);
            if (kl < best) best = kl;
        }
        ck_assert_double_le(kl_reference(&h, chosen), best + 1e-12);
    }
}
END_TEST

START_TEST(calib_zero_and_nonfinite)
{
    float zeros[1000] = {0};
    float junk[4] = {NAN, INFINITY, -INFINITY, -NAN};
    qf_histogram h;
    qf_histogram_init(&h);
    for (int m = 0; m < QF_CALIB_METHOD_COUNT; m++) ck_assert_float_eq(qf_calib_threshold(&h, m, 99.99), 0.0f);
    qf_histogram_add(&h, zeros, 1000);
    qf_histogram_add(&h, junk, 4);
    ck_assert_uint_eq(h.zeros, 1000);
    ck_assert_uint_eq(h.nonfinite, 4);
    for (int m = 0; m < QF_CALIB_METHOD_COUNT; m++) {
        float t = qf_calib_threshold(&h, m, 99.99);
        ck_assert_float_eq(t, 0.0f);
        ck_assert_float_eq(qf_calib_scale(t), 1.0f);
    }
    // NaN/Inf never reach the statistics of finite values.
    float mixed[6] = {1.0f, NAN, -3.0f, INFINITY, 0.5f, 0.0f};
    qf_histogram_add(&h, mixed, 6);
    ck_assert_float_eq(h.absmax, 3.0f);
    ck_assert_uint_eq(h.nonfinite, 6);
    ck_assert_uint_eq(qf_histogram_count(&h), 1004);
    ck_assert(isfinite(qf_calib_entropy(&h)) && isfinite(qf_calib_mse(&h)));
    // Mostly zeros: percentile over all values is 0 (the usual definition).
    ck_assert_float_eq(qf_calib_percentile(&h, 99.0), 0.0f);
    ck_assert_float_eq(qf_calib_scale(127.0f), 1.0f);
    ck_assert_float_eq(qf_calib_scale(254.0f), 2.0f);
    // The smallest range with a normal-float scale, and below it none (was a subnormal or 0 scale).
    ck_assert_float_eq(qf_calib_scale(QF_CALIB_AMAX_MIN), 0x1p-126f);
    ck_assert_float_eq(qf_calib_scale(nextafterf(QF_CALIB_AMAX_MIN, 0.0f)), 1.0f);
    ck_assert_float_eq(qf_calib_scale(1e-44f), 1.0f);
}
END_TEST

START_TEST(method_parse)
{
    unsigned m;
    double p;
    ck_assert_int_eq(qf_calib_method_parse("entropy", &m, &p), QF_OK);
    ck_assert_uint_eq(m, 1u << QF_CALIB_ENTROPY);
    ck_assert_int_eq(qf_calib_method_parse("all", &m, &p), QF_OK);
    ck_assert_uint_eq(m, QF_CALIB_ALL);
    ck_assert_double_eq(p, 99.99);
    ck_assert_int_eq(qf_calib_method_parse("percentile=99.9", &m, &p), QF_OK);
    ck_assert_uint_eq(m, 1u << QF_CALIB_PERCENTILE);
    ck_assert_double_eq(p, 99.9);
    ck_assert_int_eq(qf_calib_method_parse("percentile", &m, &p), QF_OK);
    ck_assert_double_eq(p, 99.99);
    ck_assert_int_eq(qf_calib_method_parse("percentile=0", &m, &p), QF_ERR_USAGE);
    ck_assert_int_eq(qf_calib_method_parse("percentile=101", &m, &p), QF_ERR_USAGE);
    ck_assert_int_eq(qf_calib_method_parse("percentile=9x", &m, &p), QF_ERR_USAGE);
    ck_assert_int_eq(qf_calib_method_parse("kl", &m, &p), QF_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), "kl"));
}
END_TEST

/* ---- the observer ------------------------------------------------------------------------- */

enum { IMAGES = 10 };

/* input (B,3,8,8) -> "conv out" (B,16,64,64), plus a constant weight and an i64 shape
 * the observer must skip. */
static qf_graph *make_graph(int batch)
{
    qf_graph *g = qf_graph_new("test.onnx");
    int64_t din[4] = {batch, 3, 8, 8}, dw[4] = {16, 3, 3, 3}, dout[4] = {batch, 16, 64, 64}, ds[1] = {4};
    int x = qf_graph_add_value(g, "input", QF_F32, 4, din);
    int w = qf_graph_add_value(g, "weight", QF_F32, 4, dw);
    qf_graph_add_value(g, "conv out", QF_F32, 4, dout);
    int s = qf_graph_add_value(g, "shape", QF_I64, 1, ds);
    g->values[x].flags |= QF_VALUE_INPUT;
    g->values[w].flags |= QF_VALUE_CONST;
    g->values[w].data = calloc(16 * 27, sizeof(float));
    g->values[s].flags |= QF_VALUE_CONST;
    g->values[s].data = calloc(4, sizeof(int64_t));
    g->batch = batch;
    return g;
}

/* Image k's tensors: ranges grow with k in one tensor and shrink in the other, so
 * different batch splits widen the histograms at different moments. */
static void image_data(int k, float *in, float *out)
{
    uint64_t saved = rng_state;
    rng_state = 1000 + (uint64_t)k;
    for (int i = 0; i < 3 * 8 * 8; i++) in[i] = (float)(rng_gauss() * (k + 1));
    for (int i = 0; i < 16 * 64 * 64; i++) {
        double v = rng_gauss() / (k + 1);
        out[i] = v < 0 ? 0.0f : (float)v;  // ReLU-like: half zeros
    }
    if (k == 6) out[123] = NAN;
    rng_state = saved;
}

#define SHA_HEX "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
static const char *SHA = SHA_HEX;

/* Calibrates IMAGES images in batches of `batch` (the last one padded with garbage)
 * on `threads` threads; images [first, last) only. */
static qf_calib *run_calib(int batch, int threads, int first, int last, qf_graph **gout)
{
    qf_graph *g = make_graph(batch);
    qf_calib *c;
    qf_calib_opts o = {.threads = threads};
    ck_assert_int_eq(qf_calib_create(g, &o, &c), QF_OK);
    size_t nin = 3 * 8 * 8, nout = 16 * 64 * 64;
    float *in = malloc(batch * nin * sizeof *in), *out = malloc(batch * nout * sizeof *out);
    for (int k = first; k < last; k += batch) {
        int real = last - k < batch ? last - k : batch;
        for (int j = 0; j < batch; j++) {
            if (j < real) {
                image_data(k + j, in + j * nin, out + j * nout);
            } else {  // padding the observer must not count
                for (size_t i = 0; i < nin; i++) in[j * nin + i] = 1e30f;
                for (size_t i = 0; i < nout; i++) out[j * nout + i] = NAN;
            }
        }
        qf_calib_set_batch_valid(c, real);
        for (int v = 0; v < g->n_values; v++)
            qf_calib_observe(c, g, v, v == 0 ? (void *)in : v == 2 ? (void *)out : g->values[v].data);
    }
    free(in);
    free(out);
    *gout = g;
    return c;
}

static char *calib_table_text(qf_calib *c, const char *name)
{
    qf_calib_table *t;
    qf_calib_meta meta = {.images = IMAGES, .model_sha256 = SHA, .preprocess = "none"};
    ck_assert_int_eq(qf_calib_finalize(c, QF_CALIB_ALL, 99.99, &meta, &t), QF_OK);
    ck_assert_int_eq(qf_calib_table_write(t, tmp_path(name)), QF_OK);
    qf_calib_table_free(t);
    return slurp(tmp_path(name), NULL);
}

static char log_text[4096];
static void capture_log(void *user, qf_log_level level, const char *msg)
{
    if (level >= QF_LOG_WARN) strncat(log_text, msg, sizeof log_text - strlen(log_text) - 2), strcat(log_text, "\n");
}

START_TEST(observer_independent_of_batch_and_threads)
{
    make_tmpdir();
    qf_graph *g;
    qf_calib *c = run_calib(1, 1, 0, IMAGES, &g);
    ck_assert_int_eq(qf_calib_tensor_count(c), 2);  // the constant and the i64 value are skipped
    ck_assert_str_eq(qf_calib_tensor_name(c, 0), "input");
    ck_assert_str_eq(qf_calib_tensor_name(c, 1), "conv out");
    const qf_histogram *h = qf_calib_tensor_hist(c, 1);
    ck_assert_uint_eq(h->nonfinite, 1);  // the padding's NaNs were not counted
    ck_assert_uint_eq(h->nonfinite + qf_histogram_count(h), (uint64_t)IMAGES * 16 * 64 * 64);
    ck_assert_double_lt(qf_calib_tensor_hist(c, 0)->absmax, 1e29);  // nor its 1e30s
    log_text[0] = '\0';
    qf_log_set(capture_log, NULL, QF_LOG_WARN);
    char *ref = calib_table_text(c, "ref.calib");
    qf_log_set(NULL, NULL, QF_LOG_WARN);
    ck_assert_ptr_nonnull(strstr(log_text, "conv out"));  // the NaN is reported by tensor name
    ck_assert_ptr_nonnull(strstr(ref, "\nconv%20out auto="));
    qf_calib_free(c);
    qf_graph_free(g);

    const int cfg[][2] = {{3, 1}, {4, 2}, {8, 2}, {10, 3}, {2, 0}};
    for (size_t k = 0; k < QF_ARRAY_LEN(cfg); k++) {
        c = run_calib(cfg[k][0], cfg[k][1], 0, IMAGES, &g);
        char *txt = calib_table_text(c, "other.calib");
        ck_assert_str_eq(txt, ref);
        free(txt);
        qf_calib_free(c);
        qf_graph_free(g);
    }
    // Two "devices", each with half of the images, merged.
    qf_graph *g2;
    c = run_calib(4, 2, 0, 3, &g);
    qf_calib *c2 = run_calib(2, 1, 3, IMAGES, &g2);
    ck_assert_int_eq(qf_calib_merge(c, c2), QF_OK);
    char *txt = calib_table_text(c, "merged.calib");
    ck_assert_str_eq(txt, ref);
    free(txt);
    qf_calib_free(c);
    qf_calib_free(c2);
    qf_graph_free(g);
    qf_graph_free(g2);
    free(ref);
    remove_tmpdir();
}
END_TEST

/* ---- auto: chosen by the reader's error ------------------------------------------------------ */

enum { AUTO_B = 8, AUTO_HW = 64 };

/* x (8,2,64,64): channel 0 spread over (-1, 1), channel 1 zero but for a value of 8
 * in images 0 and 4 (2 of 65536 values: percentile 99.99 clips them, 99.999 and
 * minmax keep them). A 1x1 Conv reads x with the weight 1 on channel `keep` and 0
 * on the other, so its output is that channel alone. */
static qf_graph *auto_graph(int keep, float **xout)
{
    qf_graph *g = qf_graph_new("auto.onnx");
    int x = input(g, "x", 4, (int64_t[]){AUTO_B, 2, AUTO_HW, AUTO_HW});
    int w = weight(g, "w", 4, (int64_t[]){1, 2, 1, 1}, 0.0f, 0.0f);
    ((float *)g->values[w].data)[keep] = 1.0f;
    int y = value(g, "y");
    conv_node(g, "conv", x, w, -1, y, 0, 1);
    output(g, y);
    prepare_graph(g, AUTO_B);
    const size_t plane = AUTO_HW * AUTO_HW;
    float *d = calloc(AUTO_B * 2 * plane, sizeof *d);
    rng_state = 77;
    for (int b = 0; b < AUTO_B; b++) {
        for (size_t i = 0; i < plane; i++) d[(2 * b) * plane + i] = (float)(rng_gauss() * 0.3);
        for (size_t i = 0; i < plane; i++) d[(2 * b) * plane + i] = fmaxf(-1.0f, fminf(1.0f, d[(2 * b) * plane + i]));
        if (b % 4 == 0) d[(2 * b + 1) * plane + 100] = 8.0f;
    }
    *xout = d;
    return g;
}

/* The squared error INT8 at threshold amax leaves in channel `keep` (the conv's output). */
static double channel_error(const float *x, int keep, float amax)
{
    const size_t plane = AUTO_HW * AUTO_HW;
    float s = qf_calib_scale(amax);
    double e = 0.0;
    for (int b = 0; b < AUTO_B; b++)
        for (size_t i = 0; i < plane; i++) {
            float v = x[(2 * b + keep) * plane + i], q = qfi_dequantize_i8(qfi_quantize_f32(v, s), s);
            e += ((double)q - v) * ((double)q - v);
        }
    return e;
}

START_TEST(auto_judges_by_the_reader)
{
    float chosen[2];
    for (int keep = 0; keep < 2; keep++) {
        float *x;
        qf_graph *g = auto_graph(keep, &x);
        qf_calib *c;
        OK(qf_calib_create(g, NULL, &c));
        free(run(g, x, qf_calib_observe, c));
        qf_calib_meta meta = {.images = AUTO_B, .model_sha256 = SHA};
        qf_calib_table *t;
        OK(qf_calib_finalize(c, 1u << QF_CALIB_AUTO, QF_CALIB_PERCENTILE_DEFAULT, &meta, &t));
        qf_auto_chooser *a;
        OK(qf_auto_chooser_create(c, t, 1, &a));
        OK(qf_auto_chooser_run(a, x, AUTO_B));
        int64_t counts[QF_CALIB_AUTO_CANDIDATES] = {0};
        qf_auto_chooser_apply(a, t, counts);
        qf_auto_chooser_free(a);
        ck_assert_int_eq(counts[0] + counts[1] + counts[2] + counts[3] + counts[4], 2); // x and y

        const qf_histogram *h = qfi_calib_value_hist(c, g->inputs[0]);
        float cand[QF_CALIB_AUTO_CANDIDATES];
        qf_calib_auto_candidates(h, cand);
        int best = 0;
        for (int k = 1; k < QF_CALIB_AUTO_CANDIDATES; k++)
            if (channel_error(x, keep, cand[k]) < channel_error(x, keep, cand[best])) best = k;
        int e = qf_calib_table_find(t, "x");
        chosen[keep] = t->entries[e].amax[QF_CALIB_AUTO];
        ck_assert_float_eq(chosen[keep], cand[best]);
        // from the histogram alone (x's own error) the outliers are kept whichever channel is read
        ck_assert_float_gt(qf_calib_auto(h), 7.0f);
        qf_calib_table_free(t);
        qf_calib_free(c);
        qf_graph_free(g);
        free(x);
    }
    // read only where clipping costs nothing, x is clipped below the outliers; read only
    // where they are, it keeps them
    ck_assert_float_lt(chosen[0], 1.1f);
    ck_assert_float_eq(chosen[1], 8.0f);
}
END_TEST

/* The chooser's scores recomputed plainly: every image of every tensor kept,
 * each candidate quantized element by element, the layers computed in double.
 * x (4,4,96,96) is read by two 1x1 Convs; one's output goes through Relu,
 * GlobalAveragePool and Flatten into a Gemm, the other is a graph output. Two
 * batches on 2 threads, the second short (3 images) and padded with large
 * values that must not count: a chooser that reused an engine's rows, an
 * input or a sum wrongly across batches, candidates or threads would differ.
 * Three grids: with zero points (the default) r, p and f, which the Relu
 * bounds below by 0, are judged on [0, amax] in 256 levels (scale amax / 255,
 * zero point -128), the rest on [-amax, amax]; with two-sided ones too
 * (--zero-points two-sided) x, c1, c2 and y on [min, amax] where their
 * calibrated minimum is above -amax; without, every tensor on [-amax,
 * amax]. */
enum { SC_B = 4, SC_C = 4, SC_HW = 96 * 96, SC_M1 = 5, SC_M2 = 3, SC_N = 7 };

typedef struct sc_capture {
    float *v[64];  /* per graph value: its data in each batch, (2 batches) x its numel */
    int batch;
} sc_capture;

static void sc_observe(void *user, const qf_graph *g, int v, const void *data)
{
    sc_capture *cap = user;
    if (v >= 64 || g->values[v].dtype != QF_F32) return;
    size_t n = (size_t)qf_value_numel(&g->values[v]);
    if (!cap->v[v]) cap->v[v] = calloc(2 * n, sizeof(float));
    memcpy(cap->v[v] + (size_t)cap->batch * n, data, n * sizeof(float));
}

/* Layer node n (a 1x1 Conv or a Gemm) in double on one image `in`. */
static void sc_layer(const qf_graph *g, const qf_node *n, const float *in, double *out)
{
    const float *w = g->values[n->in[1]].data, *bias = n->n_in > 2 && n->in[2] >= 0 ? g->values[n->in[2]].data : NULL;
    if (n->op == QF_OP_CONV) {
        int64_t m = g->values[n->in[1]].dims[0];
        for (int64_t o = 0; o < m; o++)
            for (int p = 0; p < SC_HW; p++) {
                double s = bias ? bias[o] : 0.0;
                for (int c = 0; c < SC_C; c++) s += (double)w[o * SC_C + c] * in[c * SC_HW + p];
                out[o * SC_HW + p] = s;
            }
    } else {
        for (int j = 0; j < SC_N; j++) {
            double s = bias ? bias[j] : 0.0;
            for (int k = 0; k < SC_M1; k++) s += (double)in[k] * w[k * SC_N + j];
            out[j] = s;
        }
    }
}

START_TEST(auto_scores_match_a_plain_recomputation)
{
    rng = 5;
    qf_graph *g = qf_graph_new("scores.onnx");
    int x = input(g, "x", 4, (int64_t[]){SC_B, SC_C, 96, 96});
    int w1 = weight(g, "w1", 4, (int64_t[]){SC_M1, SC_C, 1, 1}, -1.0f, 1.0f);
    int b1 = weight(g, "b1", 1, (int64_t[]){SC_M1}, -0.2f, 0.2f);
    int w2 = weight(g, "w2", 4, (int64_t[]){SC_M2, SC_C, 1, 1}, -1.0f, 1.0f);
    int wg = weight(g, "wg", 2, (int64_t[]){SC_M1, SC_N}, -1.0f, 1.0f);
    int bg = weight(g, "bg", 1, (int64_t[]){SC_N}, -0.1f, 0.1f);
    int c1 = value(g, "c1"), c2 = value(g, "c2"), r = value(g, "r"), p = value(g, "p"), f = value(g, "f"),
        y = value(g, "y");
    conv_node(g, "conv1", x, w1, b1, c1, 0, 1);
    conv_node(g, "conv2", x, w2, -1, c2, 0, 1);
    op(g, "relu", QF_OP_RELU, 1, (int[]){c1}, r);
    op(g, "gap", QF_OP_GLOBAL_AVERAGE_POOL, 1, (int[]){r}, p);
    op(g, "flat", QF_OP_FLATTEN, 1, (int[]){p}, f);
    op(g, "gemm", QF_OP_GEMM, 3, (int[]){f, wg, bg}, y);
    output(g, y);
    output(g, c2);
    prepare_graph(g, SC_B);
    const size_t per = SC_C * SC_HW;
    const int real[2] = {SC_B, 3};
    float *in[2];
    for (int b = 0; b < 2; b++) {
        in[b] = malloc(SC_B * per * sizeof *in[b]);
        for (size_t i = 0; i < SC_B * per; i++) in[b][i] = frand(-1.0f, 1.0f) * frand(0.0f, 1.0f);
        in[b][7 * SC_HW + 11] = 6.0f; /* an outlier only the wider candidates keep */
        for (size_t i = (size_t)real[b] * per; i < SC_B * per; i++) in[b][i] *= 40.0f; /* padding */
    }
    // the histograms, and every value of both batches kept
    qf_calib *c;
    OK(qf_calib_create(g, NULL, &c));
    sc_capture cap = {0};
    for (int b = 0; b < 2; b++) {
        qf_calib_set_batch_valid(c, real[b]);
        free(run(g, in[b], qf_calib_observe, c));
        cap.batch = b;
        free(run(g, in[b], sc_observe, &cap));
    }
    qf_calib_meta meta = {.images = SC_B + 3, .model_sha256 = SHA};
    qf_calib_table *t;
    OK(qf_calib_finalize(c, 1u << QF_CALIB_AUTO, QF_CALIB_PERCENTILE_DEFAULT, &meta, &t));
    double *ly = malloc(SC_M1 * SC_HW * sizeof *ly), *lq = malloc(SC_M1 * SC_HW * sizeof *lq);
    float *xq = malloc(per * sizeof *xq);
    int two_sided_grids = 0;
    for (int zp = 2; zp >= 0; zp--) { /* 2: the two-sided ones too, 1: the graph's (the default), 0: none */
        qf_auto_chooser *a;
        OK(qf_auto_chooser_create(c, t, 2, &a));
        if (zp != 1) qf_auto_chooser_set_zero_points(a, zp > 0, zp == 2);
        for (int b = 0; b < 2; b++) OK(qf_auto_chooser_run(a, in[b], real[b]));
        int judged = 0;
        for (int v = 0; v < g->n_values; v++) {
            double got[QF_CALIB_AUTO_CANDIDATES];
            if (!qfi_auto_chooser_scores(a, v, got)) continue;
            judged++;
            const qf_value *val = &g->values[v];
            const size_t vper = (size_t)qf_value_numel(val) / SC_B;
            float cand[QF_CALIB_AUTO_CANDIDATES];
            qf_calib_auto_candidates(qfi_calib_value_hist(c, v), cand);
            const bool one_sided = zp && (!strcmp(val->name, "r") || !strcmp(val->name, "p") || !strcmp(val->name, "f"));
            const float data_min = qfi_calib_value_hist(c, v)->min;
            for (int k = 0; k < QF_CALIB_AUTO_CANDIDATES; k++) {
                const bool two_sided = zp == 2 && !one_sided && data_min > -cand[k];
                const float lo = one_sided ? 0.0f : fminf(data_min, 0.0f);
                const float s = one_sided || two_sided ? (cand[k] - lo) / 255.0f : qf_calib_scale(cand[k]);
                const int32_t z = one_sided || two_sided ? -128 - (int32_t)rintf(lo / s) : 0;
                two_sided_grids += two_sided && z != -128;
                double want = 0.0;
                bool itself = false; // a graph output, or read by an op other than a judging layer
                for (int j = 0; j < g->n_outputs; j++) itself |= g->outputs[j] == v;
                for (int i = 0; i < g->n_nodes; i++) {
                    const qf_node *n = &g->nodes[i];
                    if (!(n->in[0] == v && qfi_int8_layer(g, n))) {
                        for (int j = 0; j < n->n_in; j++) itself |= n->in[j] == v;
                        continue;
                    }
                    double noise = 0.0, signal = 0.0;
                    size_t on = (size_t)qf_value_numel(&g->values[n->out[0]]) / SC_B;
                    for (int b = 0; b < 2; b++)
                        for (int m = 0; m < real[b]; m++) {
                            const float *xv = cap.v[v] + ((size_t)b * SC_B + (size_t)m) * vper;
                            for (size_t e = 0; e < vper; e++) xq[e] = qfi_dequantize_i8_zp(qfi_quantize_f32_zp(xv[e], s, z), s, z);
                            sc_layer(g, n, xv, ly);
                            sc_layer(g, n, xq, lq);
                            for (size_t e = 0; e < on; e++) {
                                noise += (lq[e] - ly[e]) * (lq[e] - ly[e]);
                                signal += ly[e] * ly[e];
                            }
                        }
                    want += noise / signal;
                }
                if (itself) {
                    double noise = 0.0, signal = 0.0;
                    for (int b = 0; b < 2; b++)
                        for (size_t e = 0; e < (size_t)real[b] * vper; e++) {
                            float xv = cap.v[v][(size_t)b * SC_B * vper + e];
                            double d = (double)qfi_dequantize_i8_zp(qfi_quantize_f32_zp(xv, s, z), s, z) - xv;
                            noise += d * d;
                            signal += (double)xv * xv;
                        }
                    want += noise / signal;
                }
                ck_assert_msg(fabs(got[k] - want) <= 1e-4 * want,
                              "%s, zero points %d, candidate %d (%g): score %.9g, recomputed %.9g", val->name, zp, k,
                              cand[k], got[k], want);
            }
        }
        ck_assert_int_eq(judged, 7); // x, c1, c2, r, p, f, y
        qf_auto_chooser_free(a);
    }
    ck_assert_int_gt(two_sided_grids, 4); /* 9 of the 20 candidates of x, c1, c2 and y */
    free(ly);
    free(lq);
    free(xq);
    for (int v = 0; v < 64; v++) free(cap.v[v]);
    for (int b = 0; b < 2; b++) free(in[b]);
    qf_calib_table_free(t);
    qf_calib_free(c);
    qf_graph_free(g);
}
END_TEST

/* Every tensor whose range is degenerate is named in one warning line at
 * finalize: all zeros, NaN or Inf among its values, only NaN/Inf and zeros,
 * a largest |x| no INT8 scale can hold; a tensor with a usable range is not. */
START_TEST(finalize_warns_degenerate_ranges)
{
    const char *names[] = {"zeros", "some nan", "nan and zeros", "tiny", "fine", "small but fine"};
    const float fill[][4] = {{0, 0, 0, 0}, {1, NAN, -2, 0.5f}, {NAN, 0, INFINITY, 0}, {1e-37f, -2e-37f, 0, 0},
                             {1, -2, 3, 0}, {1e-30f, 0, -3e-30f, 0}};
    const char *want[] = {"all 4 values were 0: a degenerate range", "1 of 4 values were NaN or Inf and were ignored",
                          "2 of 4 values were NaN or Inf, the rest |x| <= 0: a degenerate range",
                          "its largest |x| is 2e-37, below", NULL, NULL};
    qf_graph *g = qf_graph_new("degenerate.onnx");
    for (int k = 0; k < 6; k++) {
        int v = qf_graph_add_value(g, names[k], QF_F32, 1, (int64_t[]){4});
        g->values[v].flags |= QF_VALUE_INPUT;
    }
    g->batch = 1;
    qf_calib *c;
    ck_assert_int_eq(qf_calib_create(g, NULL, &c), QF_OK);
    for (int k = 0; k < 6; k++) qf_calib_observe(c, g, k, fill[k]);
    log_text[0] = '\0';
    qf_log_set(capture_log, NULL, QF_LOG_WARN);
    qf_calib_table *t;
    qf_calib_meta meta = {.images = 1, .model_sha256 = SHA};
    qf_status st = qf_calib_finalize(c, QF_CALIB_ALL, 99.99, &meta, &t);
    qf_log_set(NULL, NULL, QF_LOG_WARN);
    ck_assert_int_eq(st, QF_OK);
    int lines = 0;
    for (const char *p = log_text; (p = strchr(p, '\n')); p++) lines++;
    ck_assert_msg(lines == 4, "%d warnings:\n%s", lines, log_text);
    for (int k = 0; k < 6; k++) {
        char tag[64];
        snprintf(tag, sizeof tag, "tensor %s:", names[k]);
        const char *line = strstr(log_text, tag);
        if (!want[k]) {
            ck_assert_msg(!line, "%s warned:\n%s", names[k], log_text);
            continue;
        }
        ck_assert_msg(line && strstr(line, want[k]) && strstr(line, want[k]) < strchr(line, '\n'), "%s:\n%s",
                      names[k], log_text);
    }
    qf_calib_table_free(t);
    qf_calib_free(c);
    qf_graph_free(g);
}
END_TEST

START_TEST(finalize_rejects_bad_meta)
{
    qf_graph *g = make_graph(1);
    qf_calib *c;
    qf_calib_table *t;
    ck_assert_int_eq(qf_calib_create(g, NULL, &c), QF_OK);
    qf_calib_meta meta = {.images = 1, .model_sha256 = "abc"};
    ck_assert_int_eq(qf_calib_finalize(c, QF_CALIB_ALL, 99.99, &meta, &t), QF_ERR_USAGE);
    meta.model_sha256 = SHA;
    ck_assert_int_eq(qf_calib_finalize(c, 0, 99.99, &meta, &t), QF_ERR_USAGE);
    ck_assert_int_eq(qf_calib_finalize(c, QF_CALIB_ALL, 0, &meta, &t), QF_ERR_USAGE);
    ck_assert_int_eq(qf_calib_finalize(c, 1u << QF_CALIB_MSE, 0, &meta, &t), QF_OK);  // percentile unused
    ck_assert_int_eq(t->n, 0);  // nothing observed yet
    qf_calib_table_free(t);
    qf_calib_free(c);
    qf_graph_free(g);
}
END_TEST

/* ---- tables ---------------------------------------------------------------------------------- */

static qf_calib_table *sample_table(unsigned methods, int n)
{
    qf_calib_table *t = calloc(1, sizeof *t);
    t->version = 1; /* what the writer writes for a table of no equalized graph */
    t->methods = methods;
    t->percentile = 99.99;
    t->images = 500;
    strcpy(t->model_sha256, SHA);
    t->preprocess = strdup("resize=256 crop=224 mean=0.485,0.456,0.406 std=0.229,0.224,0.225 100%");
    t->n = n;
    t->entries = calloc((size_t)n, sizeof *t->entries);
    static const float special[] = {0.0f, FLT_MAX, FLT_MIN, 1e-45f, 0.1f, 1.0f / 3, 16777217.0f, 3.4e-39f};
    rng_state = 7;
    for (int i = 0; i < n; i++) {
        char name[64];
        if (i == 0) strcpy(name, "input.1");
        else if (i == 1) strcpy(name, "/layer1/conv 2/Conv_output_0");
        else if (i == 2) strcpy(name, "r\xc3\xa9sum\xc3\xa9%41");  // UTF-8 and a literal %
        else if (i == 4) strcpy(name, "bad\xff\xc3utf8\ttab");       // not UTF-8, a control byte
        else snprintf(name, sizeof name, "onnx::Conv_%d", i);
        t->entries[i].name = strdup(name);
        for (int m = 0; m < QF_CALIB_METHOD_COUNT; m++) {
            uint32_t bits = (uint32_t)rng_next() & 0x7fffffff;  // any positive float bit pattern
            float v;
            memcpy(&v, &bits, 4);
            if (!isfinite(v)) v = 1.5f;
            // (entropy, the first method before auto, keeps special[i])
            size_t j = (size_t)(i + m + (int)QF_ARRAY_LEN(special) - QF_CALIB_ENTROPY) % QF_ARRAY_LEN(special);
            t->entries[i].amax[m] = i < (int)QF_ARRAY_LEN(special) ? special[j] : v;
        }
    }
    return t;
}

static void assert_tables_equal(const qf_calib_table *a, const qf_calib_table *b)
{
    ck_assert_int_eq(a->version, b->version);
    ck_assert_uint_eq(a->methods, b->methods);
    if (a->methods & (1u << QF_CALIB_PERCENTILE)) ck_assert_double_eq(a->percentile, b->percentile);
    ck_assert_int_eq(a->images, b->images);
    ck_assert_str_eq(a->model_sha256, b->model_sha256);
    ck_assert_str_eq(a->preprocess, b->preprocess);
    ck_assert_int_eq(a->n, b->n);
    // One assertion for the lot: check records every passing assertion, which is slow.
    int bad = -1;
    for (int i = 0; i < a->n && bad < 0; i++) {
        if (strcmp(a->entries[i].name, b->entries[i].name)) bad = i;
        for (int m = 0; m < QF_CALIB_METHOD_COUNT; m++)
            if ((a->methods & (1u << m)) && f32_bits(a->entries[i].amax[m]) != f32_bits(b->entries[i].amax[m])) bad = i;
        if (a->entries[i].has_min != b->entries[i].has_min ||
            (a->entries[i].has_min && f32_bits(a->entries[i].min) != f32_bits(b->entries[i].min)))
            bad = i;
    }
    ck_assert_msg(bad < 0, "entry %d differs: %s", bad, bad >= 0 ? a->entries[bad].name : "");
}

START_TEST(table_round_trip)
{
    make_tmpdir();
    const unsigned masks[] = {1u << QF_CALIB_ENTROPY, 1u << QF_CALIB_PERCENTILE, QF_CALIB_ALL,
                              (1u << QF_CALIB_MINMAX) | (1u << QF_CALIB_MSE)};
    for (size_t k = 0; k < QF_ARRAY_LEN(masks); k++) {
        qf_calib_table *t = sample_table(masks[k], 2000), *r;
        t->percentile = 99.9;
        ck_assert_int_eq(qf_calib_table_write(t, tmp_path("t.calib")), QF_OK);
        ck_assert_int_eq(qf_calib_table_read(tmp_path("t.calib"), &r), QF_OK);
        assert_tables_equal(t, r);
        // Writing what was read gives the same bytes.
        char *a = slurp(tmp_path("t.calib"), NULL);
        ck_assert_int_eq(qf_calib_table_write(r, tmp_path("u.calib")), QF_OK);
        char *b = slurp(tmp_path("u.calib"), NULL);
        ck_assert_str_eq(a, b);
        if (k == 0) {
            ck_assert(!strncmp(a, "qforge-calib 1\nmethod entropy\nimages 500\nmodel-sha256 ", 52));
            ck_assert_ptr_nonnull(strstr(a, "\npreprocess resize=256 crop=224 mean=0.485,0.456,0.406 std=0.229,0.224,0.225 100%25\n"));
            ck_assert_ptr_nonnull(strstr(a, "\ntensors 2000\ninput.1 0\n/layer1/conv%202/Conv_output_0 3.40282347e+38\n"));
            ck_assert_ptr_nonnull(strstr(a, "\nr\xc3\xa9sum\xc3\xa9%2541 "));
            ck_assert_ptr_nonnull(strstr(a, "\nbad%FF%C3utf8%09tab "));
        }
        if (k == 2) {
            ck_assert_ptr_nonnull(strstr(a, "\nmethod auto,entropy,minmax,percentile=99.9,mse\n"));
            ck_assert_ptr_nonnull(strstr(a, "\ninput.1 auto=3.39999989e-39 entropy=0 minmax=3.40282347e+38 percentile=1.17549435e-38 mse=1.40129846e-45\n"));
            float v;
            ck_assert_int_eq(qf_calib_table_amax(r, 1, QF_CALIB_MSE, &v), QF_OK);
            ck_assert_uint_eq(f32_bits(v), f32_bits(t->entries[1].amax[QF_CALIB_MSE]));
            ck_assert_int_eq(qf_calib_table_default_method(r), QF_CALIB_AUTO);
            ck_assert_int_eq(qf_calib_table_find(r, "/layer1/conv 2/Conv_output_0"), 1);
            ck_assert_int_eq(qf_calib_table_find(r, "nope"), -1);
        }
        if (k == 3) {
            float v;
            ck_assert_int_eq(qf_calib_table_default_method(r), QF_CALIB_MINMAX);
            ck_assert_int_eq(qf_calib_table_amax(r, 0, QF_CALIB_ENTROPY, &v), QF_ERR_INVALID);
            ck_assert_ptr_nonnull(strstr(qf_error_message(), "input.1"));
        }
        free(a);
        free(b);
        qf_calib_table_free(t);
        qf_calib_table_free(r);
    }
    ck_assert_int_eq(count_files(".tmp."), 0);
    remove_tmpdir();
}
END_TEST

/* Expects reading `text` to fail with a one-line message naming line `line`. */
static void expect_bad(const char *text, size_t len, int line, const char *what)
{
    const char *p = tmp_path("bad.calib");
    spit(p, text, len);
    qf_calib_table *t = NULL;
    qf_status st = qf_calib_table_read(p, &t);
    ck_assert_msg(st == QF_ERR_FORMAT, "accepted (%s)", what);
    ck_assert_ptr_null(t);
    const char *msg = qf_error_message();
    ck_assert_ptr_null(strchr(msg, '\n'));
    if (line > 0) {
        char want[300];
        snprintf(want, sizeof want, "%s:%d: ", p, line);
        ck_assert_msg(!strncmp(msg, want, strlen(want)), "%s: message '%s' lacks '%s'", what, msg, want);
    }
}

/* The valid text with line `line` (1-based) replaced by `repl` (NULL deletes it). */
static char *replace_line(const char *text, int line, const char *repl)
{
    size_t cap = strlen(text) + (repl ? strlen(repl) : 0) + 2;
    char *out = malloc(cap), *w = out;
    int ln = 1;
    for (const char *p = text; *p; ln++) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p + 1) : strlen(p);
        if (ln == line) {
            if (repl) w += sprintf(w, "%s\n", repl);
        } else {
            memcpy(w, p, n);
            w += n;
        }
        p += n;
    }
    *w = '\0';
    return out;
}

START_TEST(table_rejects_garbage)
{
    make_tmpdir();
    qf_calib_table *t = sample_table(QF_CALIB_ALL, 5);
    ck_assert_int_eq(qf_calib_table_write(t, tmp_path("good.calib")), QF_OK);
    size_t len;
    char *good = slurp(tmp_path("good.calib"), &len);
    // Lines: 1 magic, 2 method, 3 images, 4 sha, 5 preprocess, 6 tensors, 7..11 tensors.
    // Every proper prefix is rejected: no truncation reads as a shorter table.
    for (size_t cut = 0; cut < len; cut++) {
        qf_calib_table *r = NULL;
        spit(tmp_path("cut.calib"), good, cut);
        ck_assert_msg(qf_calib_table_read(tmp_path("cut.calib"), &r) == QF_ERR_FORMAT && !r,
                      "a table cut to %zu of %zu bytes was accepted", cut, len);
    }
    expect_bad(good, len - 1, 11, "no final newline");
    size_t cut = (size_t)(strstr(good, "\nonnx::Conv_3") - good) + 1;
    expect_bad(good, cut, 10, "lines missing");  // ends cleanly after line 9
    expect_bad("", 0, 1, "empty");

    // {line replaced, its text, line the error must name (0: the replaced one)}
    static const struct { int line; const char *repl; int at; } cases[] = {
        {1, "qforge-calib 4"},
        {1, "qforge-calib 0"},
        {1, "qforge-calib 2", 6}, /* version 2 has an 'equalized' line before 'tensors' */
        {1, "qforge-calib"},
        {1, "TRT-8601-EntropyCalibration2"},
        {2, "method entropy,entropy"},
        {2, "method minmax,entropy"},
        {2, "method kl"},
        {2, "method percentile"},
        {2, "method percentile=200"},
        {2, "method entropy,minmax,percentile=99.99,mse,"},
        {3, "images -1"},
        {3, "images 12x"},
        {3, "images 99999999999999999999"},
        {4, "model-sha256 0123"},
        {4, "model-sha256 0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef"},
        {5, "preprocess bad %zz escape"},
        {5, "preprocess "},
        {6, "tensors 6", 12},  // the file ends a line early
        {6, "tensors 4", 11},  // a line too many
        {6, "tensors 999999999"},
        {6, "tensors"},
        {8, "garbage"},
        {8, "#comment"},
        {8, ""},
        {8, "x entropy=1 minmax=2 percentile=3"},
        {8, "x entropy=1 minmax=2 percentile=3 mse=4 extra=5"},
        {8, "x entropy=1 minmax=2 mse=4 percentile=3"},
        {8, "x entropy=1 minmax=2 percentile=3 mse=nan"},
        {8, "x entropy=1 minmax=2 percentile=3 mse=inf"},
        {8, "x entropy=1 minmax=2 percentile=3 mse=-1"},
        {8, "x entropy=1 minmax=2 percentile=3 mse=1e39"},
        {8, "x entropy=1 minmax=2 percentile=3 mse=0x1p3"},
        {8, "x entropy=1 minmax=2 percentile=3 mse=1.5.2"},
        {8, "x entropy=1 minmax=2 percentile=3 mse="},
        {8, "x entropy=1  minmax=2 percentile=3 mse=4"},
        {8, "x entropy=1 minmax=2 percentile=3 mse=4 "},
        {8, "x%2 entropy=1 minmax=2 percentile=3 mse=4"},
        {8, "input.1 entropy=1 minmax=2 percentile=3 mse=4"},  // duplicate name
        {8, "x entropy=1 minmax=2 percentile=3 mse=4\r"},
        {8, "x\x01 entropy=1 minmax=2 percentile=3 mse=4"},
        {8, "x\xc3 entropy=1 minmax=2 percentile=3 mse=4"},   // cut UTF-8 sequence
        {8, "x\xc0\xaf entropy=1 minmax=2 percentile=3 mse=4"},  // overlong
    };
    for (size_t k = 0; k < QF_ARRAY_LEN(cases); k++) {
        char *txt = replace_line(good, cases[k].line, cases[k].repl);
        expect_bad(txt, strlen(txt), cases[k].at ? cases[k].at : cases[k].line, cases[k].repl);
        free(txt);
    }
    // A line too many at the end, and a NUL byte.
    char *more = malloc(len + 32);
    sprintf(more, "%sextra 1\n", good);
    expect_bad(more, strlen(more), 12, "extra line");
    memcpy(more, good, len);
    more[cut + 3] = '\0';
    expect_bad(more, len, 10, "NUL");
    free(more);
    // Control: the untouched text still reads, and a single-method line needs one value.
    qf_calib_table *r;
    spit(tmp_path("ok.calib"), good, len);
    ck_assert_int_eq(qf_calib_table_read(tmp_path("ok.calib"), &r), QF_OK);
    qf_calib_table_free(r);
    char *one = replace_line(good, 2, "method minmax");
    expect_bad(one, strlen(one), 7, "keyed values in a single-method table");
    free(one);
    ck_assert_int_eq(qf_calib_table_read(tmp_path("missing.calib"), &r), QF_ERR_IO);
    free(good);
    qf_calib_table_free(t);
    remove_tmpdir();
}
END_TEST

/* Version 3 adds each tensor's minimum, as the last field of its line
 * (min=VALUE, signed), where the entry has one; the 'equalized' line only for
 * an equalized graph's table. The same bits come back, and entries without a
 * minimum read back without one. */
START_TEST(table_min_round_trip)
{
    make_tmpdir();
    const float mins[] = {-0.25f, 0.0f, -FLT_MAX, -1e-45f, 3.5f, -16777217.0f};
    for (int k = 0; k < 3; k++) { /* one method, several, and an equalized graph's */
        qf_calib_table *t = sample_table(k == 1 ? QF_CALIB_ALL : 1u << QF_CALIB_ENTROPY, 40), *r;
        if (k == 2) memset(t->equalized, 'e', 64);
        for (int i = 0; i < t->n; i++) {
            t->entries[i].has_min = i % 7 != 5;
            t->entries[i].min = t->entries[i].has_min ? mins[i % QF_ARRAY_LEN(mins)] : NAN;
        }
        ck_assert_int_eq(qf_calib_table_write(t, tmp_path("m.calib")), QF_OK);
        ck_assert_int_eq(qf_calib_table_read(tmp_path("m.calib"), &r), QF_OK);
        t->version = 3;
        assert_tables_equal(t, r);
        ck_assert_str_eq(r->equalized, t->equalized);
        ck_assert_uint_eq(f32_bits(qf_calib_table_min(r, 0)), f32_bits(-0.25f));
        ck_assert(isnan(qf_calib_table_min(r, 5)) && !r->entries[5].has_min);
        ck_assert(isnan(qf_calib_table_min(r, 40)));
        char *a = slurp(tmp_path("m.calib"), NULL);
        ck_assert(!strncmp(a, "qforge-calib 3\n", 15));
        ck_assert(!strstr(a, "\nequalized ") == (k != 2));
        if (k == 0) ck_assert_ptr_nonnull(strstr(a, "\ninput.1 0 min=-0.25\n/layer1/conv%202/Conv_output_0 3.40282347e+38 min=0\n"));
        if (k == 1) ck_assert_ptr_nonnull(strstr(a, " mse=1.40129846e-45 min=-0.25\n"));
        free(a);
        qf_calib_table_free(t);
        qf_calib_table_free(r);
    }
    /* a mangled minimum fails naming its line (7: the first tensor's, of 2 methods) */
    qf_calib_table *t = sample_table((1u << QF_CALIB_ENTROPY) | (1u << QF_CALIB_MINMAX), 3);
    t->entries[1].has_min = true;
    t->entries[1].min = -1.0f;
    ck_assert_int_eq(qf_calib_table_write(t, tmp_path("m.calib")), QF_OK);
    char *good = slurp(tmp_path("m.calib"), NULL);
    static const char *const bad[] = {
        "x entropy=1 minmax=2 min=", "x entropy=1 minmax=2 min=nan", "x entropy=1 minmax=2 min=-inf",
        "x entropy=1 minmax=2 min=+1", "x entropy=1 minmax=2 min=1e39", "x entropy=1 minmax=2 min=--1",
        "x entropy=1 minmax=2 mn=-1", "x entropy=1 minmax=2 -1", "x entropy=1 minmax=2 min=-1 min=-2",
        "x entropy=1 min=-1 minmax=2", "x min=-1 entropy=1 minmax=2", "x entropy=1 minmax=2 min=-1 ",
    };
    for (size_t k = 0; k < QF_ARRAY_LEN(bad); k++) {
        char *txt = replace_line(good, 7, bad[k]);
        expect_bad(txt, strlen(txt), 7, bad[k]);
        free(txt);
    }
    char *ok = replace_line(good, 7, "x entropy=1 minmax=2 min=-1e-45");
    spit(tmp_path("ok.calib"), ok, strlen(ok));
    qf_calib_table *r;
    ck_assert_int_eq(qf_calib_table_read(tmp_path("ok.calib"), &r), QF_OK);
    ck_assert_float_eq(r->entries[0].min, -1e-45f);
    qf_calib_table_free(r);
    char *eq = replace_line(good, 6, "equalized 0123"); /* v3's optional line, malformed */
    expect_bad(eq, strlen(eq), 6, "a malformed 'equalized' line");
    free(eq);
    free(ok);
    free(good);
    qf_calib_table_free(t);
    remove_tmpdir();
}
END_TEST

/* Tables written before version 3 (by a qforge without minimums) read as they
 * did: no entry has a minimum, so quant gives their two-sided tensors no zero
 * point. */
START_TEST(table_reads_old_versions)
{
    make_tmpdir();
    static const char v1[] = "qforge-calib 1\nmethod auto,minmax\nimages 10\nmodel-sha256 " SHA_HEX "\npreprocess\n"
                             "tensors 2\nx auto=1.5 minmax=2\ny auto=0.25 minmax=0.5\n";
    static const char v2[] = "qforge-calib 2\nmethod minmax\nimages 10\nmodel-sha256 " SHA_HEX "\npreprocess --gray\n"
                             "equalized " SHA_HEX "\ntensors 1\nx 2\n";
    /* version 3 with neither minimums nor the 'equalized' line (fuzz_calib found it written back as 1) */
    static const char v3[] = "qforge-calib 3\nmethod minmax\nimages 10\nmodel-sha256 " SHA_HEX "\npreprocess\n"
                             "tensors 2\nx 2\ny 0.5\n";
    const char *texts[3] = {v1, v2, v3};
    for (int k = 0; k < 3; k++) {
        qf_calib_table *r;
        spit(tmp_path("old.calib"), texts[k], strlen(texts[k]));
        ck_assert_int_eq(qf_calib_table_read(tmp_path("old.calib"), &r), QF_OK);
        ck_assert_int_eq(r->version, k + 1);
        ck_assert_int_eq(r->n, k == 1 ? 1 : 2);
        for (int i = 0; i < r->n; i++) ck_assert(!r->entries[i].has_min && isnan(qf_calib_table_min(r, i)));
        ck_assert_str_eq(r->equalized, k == 1 ? SHA : "");
        /* written again as it was read: the same version and bytes */
        ck_assert_int_eq(qf_calib_table_write(r, tmp_path("again.calib")), QF_OK);
        char *again = slurp(tmp_path("again.calib"), NULL);
        ck_assert_str_eq(again, texts[k]);
        free(again);
        qf_calib_table_free(r);
    }
    /* a minimum is a version 3 field: in a version 1 or 2 line it is an extra field */
    static const char v1min[] = "qforge-calib 1\nmethod minmax\nimages 10\nmodel-sha256 " SHA_HEX "\npreprocess\n"
                                "tensors 1\nx 2 min=-1\n";
    expect_bad(v1min, strlen(v1min), 7, "a minimum in a version 1 table");
    remove_tmpdir();
}
END_TEST

/* A threshold the table lacks is named with its tensor, control bytes shown as
 * '?' (tests/bad/calib/control_char_name.calib: fuzz_calib looked for the raw name) */
START_TEST(table_lookup_names_tensor)
{
    qf_calib_table *t = sample_table(1u << QF_CALIB_ENTROPY, 5);
    float amax = -1;
    ck_assert_int_eq(qf_calib_table_amax(t, 4, QF_CALIB_MSE, &amax), QF_ERR_INVALID);
    ck_assert_float_eq(amax, -1);
    ck_assert_msg(strstr(qf_error_message(), "tensor bad\xff\xc3utf8?tab has no mse threshold (the table records entropy)"),
                  "%s", qf_error_message());
    ck_assert_int_eq(qf_calib_table_amax(t, 4, QF_CALIB_ENTROPY, &amax), QF_OK);
    ck_assert_float_eq(amax, t->entries[4].amax[QF_CALIB_ENTROPY]);
    qf_calib_table_free(t);
}
END_TEST

START_TEST(table_model_check)
{
    qf_calib_table *t = sample_table(1u << QF_CALIB_ENTROPY, 1);
    ck_assert_int_eq(qf_calib_table_check_model(t, "t.calib", SHA, false), QF_OK);
    const char *other = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
    ck_assert_int_eq(qf_calib_table_check_model(t, "t.calib", other, false), QF_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), "t.calib"));
    log_text[0] = '\0';
    qf_log_set(capture_log, NULL, QF_LOG_WARN);
    ck_assert_int_eq(qf_calib_table_check_model(t, "t.calib", other, true), QF_OK);
    qf_log_set(NULL, NULL, QF_LOG_WARN);
    ck_assert_ptr_nonnull(strstr(log_text, "t.calib"));
    qf_calib_table_free(t);
}
END_TEST

START_TEST(table_write_all_or_nothing)
{
    make_tmpdir();
    qf_calib_table *t = sample_table(QF_CALIB_ALL, 20000);
    const char *p = tmp_path("t.calib");
    spit(p, "old contents\n", 13);
    // A write that fails midway (the file size limit) leaves the old file and no temporary.
    struct rlimit old, lim = {.rlim_cur = 4096, .rlim_max = 0};
    getrlimit(RLIMIT_FSIZE, &old);
    lim.rlim_max = old.rlim_max;
    signal(SIGXFSZ, SIG_IGN);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    qf_status st = qf_calib_table_write(t, p);
    setrlimit(RLIMIT_FSIZE, &old);
    ck_assert_int_eq(st, QF_ERR_IO);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), p));
    char *now = slurp(p, NULL);
    ck_assert_str_eq(now, "old contents\n");
    free(now);
    ck_assert_int_eq(count_files(".tmp."), 0);
    // A table the writer refuses (a NaN threshold) does not touch the file either.
    t->entries[3].amax[QF_CALIB_MSE] = NAN;
    ck_assert_int_eq(qf_calib_table_write(t, p), QF_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), "onnx::Conv_3"));
    t->entries[3].amax[QF_CALIB_MSE] = 1;
    // A folder that does not exist.
    ck_assert_int_eq(qf_calib_table_write(t, tmp_path("no/such/dir.calib")), QF_ERR_IO);
    // Success replaces it.
    ck_assert_int_eq(qf_calib_table_write(t, p), QF_OK);
    qf_calib_table *r;
    ck_assert_int_eq(qf_calib_table_read(p, &r), QF_OK);
    assert_tables_equal(t, r);
    qf_calib_table_free(r);
    qf_calib_table_free(t);
    ck_assert_int_eq(count_files(".tmp."), 0);
    remove_tmpdir();
}
END_TEST

START_TEST(trt_cache_format)
{
    make_tmpdir();
    qf_calib_table *t = sample_table((1u << QF_CALIB_ENTROPY) | (1u << QF_CALIB_MINMAX), 4);
    const float ent[4] = {127.0f, 0.0f, 254.0f, 63.5f}, mm[4] = {12.7f, 1.27f, 0.0f, 508.0f};
    for (int i = 0; i < 4; i++) t->entries[i].amax[QF_CALIB_ENTROPY] = ent[i], t->entries[i].amax[QF_CALIB_MINMAX] = mm[i];
    ck_assert_int_eq(qf_calib_table_write_trt(t, QF_CALIB_ENTROPY, tmp_path("e.cache")), QF_OK);
    char *e = slurp(tmp_path("e.cache"), NULL);
    // scale = amax/127 as float32 bits, big-endian hex: 1.0 = 3f800000, 2.0 = 40000000,
    // 0.5 = 3f000000; amax 0 gets scale 1.
    ck_assert_str_eq(e, "TRT-8601-EntropyCalibration2\n"
                        "input.1: 3f800000\n"
                        "/layer1/conv 2/Conv_output_0: 3f800000\n"
                        "r\xc3\xa9sum\xc3\xa9%41: 40000000\n"
                        "onnx::Conv_3: 3f000000\n");
    ck_assert_int_eq(qf_calib_table_write_trt(t, QF_CALIB_MINMAX, tmp_path("m.cache")), QF_OK);
    char *m = slurp(tmp_path("m.cache"), NULL);
    // 12.7/127 = 0.1f = 3dcccccd; 1.27/127 = 0.01f = 3c23d70a; 508/127 = 4 = 40800000
    ck_assert_str_eq(m, "TRT-8601-MinMaxCalibration\n"
                        "input.1: 3dcccccd\n"
                        "/layer1/conv 2/Conv_output_0: 3c23d70a\n"
                        "r\xc3\xa9sum\xc3\xa9%41: 3f800000\n"
                        "onnx::Conv_3: 40800000\n");
    ck_assert_int_eq(qf_calib_table_write_trt(t, QF_CALIB_MSE, tmp_path("x.cache")), QF_ERR_USAGE);
    free(e);
    free(m);
    qf_calib_table_free(t);
    remove_tmpdir();
}
END_TEST

START_TEST(report_self_contained)
{
    make_tmpdir();
    qf_graph *g;
    qf_calib *c = run_calib(4, 1, 0, 4, &g);
    qf_calib_table *t;
    qf_calib_meta meta = {.images = 4, .model_sha256 = SHA, .preprocess = "<b>crop & resize</b>"};
    ck_assert_int_eq(qf_calib_finalize(c, 1u << QF_CALIB_PERCENTILE, 99.9, &meta, &t), QF_OK);
    ck_assert_int_eq(qf_calib_report_write(tmp_path("r.html"), c, t), QF_OK);
    char *html = slurp(tmp_path("r.html"), NULL);
    ck_assert(!strncmp(html, "<!DOCTYPE html>", 15));
    ck_assert_ptr_null(strstr(html, "http:"));
    ck_assert_ptr_null(strstr(html, "https:"));
    ck_assert_ptr_null(strstr(html, "src="));
    ck_assert_ptr_null(strstr(html, "<link"));
    ck_assert_ptr_null(strstr(html, "<b>crop"));  // escaped
    ck_assert_ptr_nonnull(strstr(html, "&lt;b&gt;crop &amp; resize"));
    ck_assert_ptr_nonnull(strstr(html, "conv out"));
    ck_assert_ptr_nonnull(strstr(html, "percentile (recorded)"));
    // One histogram per tensor.
    int svgs = 0;
    for (const char *p = html; (p = strstr(p, "<svg")); p++) svgs++;
    ck_assert_int_eq(svgs, 2);
    ck_assert_int_eq(count_files(".tmp."), 0);
    free(html);
    // Works without a table too.
    ck_assert_int_eq(qf_calib_report_write(tmp_path("r2.html"), c, NULL), QF_OK);
    qf_calib_table_free(t);
    qf_calib_free(c);
    qf_graph_free(g);
    remove_tmpdir();
}
END_TEST

static Suite *calib_suite(void)
{
    Suite *s = suite_create("calib");
    TCase *tc = tcase_create("calib");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, sha256_vectors);
    tcase_add_test(tc, histogram_exact);
    tcase_add_test(tc, histogram_merge_exact);
    tcase_add_test(tc, histogram_batch_splits);
    tcase_add_test(tc, histogram_relu_exact);
    tcase_add_test(tc, histogram_min);
    tcase_add_test(tc, calib_uniform);
    tcase_add_test(tc, calib_gaussian);
    tcase_add_test(tc, calib_laplacian);
    tcase_add_test(tc, calib_outlier);
    tcase_add_test(tc, calib_entropy_matches_reference);
    tcase_add_test(tc, calib_zero_and_nonfinite);
    tcase_add_test(tc, method_parse);
    tcase_add_test(tc, auto_judges_by_the_reader);
    tcase_add_test(tc, auto_scores_match_a_plain_recomputation);
    tcase_add_test(tc, observer_independent_of_batch_and_threads);
    tcase_add_test(tc, finalize_warns_degenerate_ranges);
    tcase_add_test(tc, finalize_rejects_bad_meta);
    tcase_add_test(tc, table_round_trip);
    tcase_add_test(tc, table_rejects_garbage);
    tcase_add_test(tc, table_min_round_trip);
    tcase_add_test(tc, table_reads_old_versions);
    tcase_add_test(tc, table_lookup_names_tensor);
    tcase_add_test(tc, table_model_check);
    tcase_add_test(tc, table_write_all_or_nothing);
    tcase_add_test(tc, trt_cache_format);
    tcase_add_test(tc, report_self_contained);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return run_suite(calib_suite());
}
