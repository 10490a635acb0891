/* Streaming |x| histograms with a power-of-two range that widens by merging pairs
 * of bins. Exactness argument: at range 2^e the bin of a is floor(a * 2^(11-e));
 * at 2^(e+s) it is floor(a * 2^(11-e-s)) = floor(a * 2^(11-e)) >> s, so widening
 * commutes with adding and any order or split of the data gives the same counts. */
#include "internal.h"
#include "qforge/calib.h"
#include <float.h>
#include <math.h>
#include <stdbool.h>

void qf_histogram_init(qf_histogram *h)
{
    memset(h, 0, sizeof *h);
    h->exp = QF_HIST_EXP_EMPTY;
}

void qf_histogram_widen(qf_histogram *h, int exp)
{
    if (exp <= h->exp) return;
    int s = exp - h->exp;
    h->exp = exp;
    // Every index < 2048 shifted by 11 or more is 0: clamp to keep the shift defined.
    if (s > 11) s = 11;
    // Ascending i: the target i >> s <= i was already emptied, so in-place is safe.
    for (int i = 1; i < QF_HIST_BINS; i++) {
        uint64_t v = h->bins[i];
        h->bins[i] = 0;
        h->bins[i >> s] += v;
    }
}

/* Smallest e with a < 2^e, for finite a > 0. */
static int range_exp(float a)
{
    int e;
    frexpf(a, &e);  // a = m * 2^e, m in [0.5, 1)
    return e;
}

/* Reference path, one value at a time: handles NaN/Inf and ranges whose bin
 * scale is not a normal float. */
static void add_slow(qf_histogram *h, const float *x, size_t n)
{
    // lim = 2^exp and scale = 2^(11-exp) are exact in double for every reachable
    // exp (-149..128 for floats), so a * scale is exact and truncation is floor.
    double lim = ldexp(1.0, h->exp), scale = ldexp(1.0, 11 - h->exp);
    float absmax = h->absmax;
    uint64_t zeros = 0, nonfinite = 0;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (!(a <= FLT_MAX)) {  // NaN compares false, Inf is above FLT_MAX
            nonfinite++;
            continue;
        }
        if (a == 0.0f) {
            zeros++;
            continue;
        }
        if (a >= lim) {
            qf_histogram_widen(h, range_exp(a));
            lim = ldexp(1.0, h->exp);
            scale = ldexp(1.0, 11 - h->exp);
        }
        if (a > absmax) absmax = a;
        h->bins[(int)((double)a * scale)]++;
    }
    h->absmax = absmax;
    h->zeros += zeros;
    h->nonfinite += nonfinite;
}

/* Fast path per block: one vectorizable pass for the block's max (which also
 * detects NaN/Inf), one widen, then a branch-free binning pass in float. The
 * float product a * 2^(11-exp) is exact (a power-of-two scale of a normal
 * result), so the bins equal the reference path's. Four interleaved sets of
 * 32-bit counters break the store-to-load chains of runs of equal bins (a
 * ReLU's zeros all land in bin 0); zeros are moved from bin 0 to `zeros`. */
_Static_assert(65536 / 4 <= UINT16_MAX, "sub-histogram counters overflow");
void qf_histogram_add(qf_histogram *h, const float *x, size_t n)
{
    /* per way at most BLOCK/WAYS = 16384 counts: 16-bit counters suffice */
    enum { BLOCK = 65536, WAYS = 4 };
    uint16_t sub[WAYS][QF_HIST_BINS];
    for (size_t off = 0; off < n; off += BLOCK) {
        size_t m = n - off < BLOCK ? n - off : BLOCK;
        const float *b = x + off;
        /* |x| as bits: for non-negative floats integer order is float order,
         * and NaN/Inf are exactly the patterns >= 0x7f800000; an integer max
         * reduction vectorizes where a float one with NaN checks does not */
        uint32_t top = 0;
        for (size_t i = 0; i < m; i++) {
            uint32_t u;
            memcpy(&u, &b[i], 4);
            u &= 0x7fffffffu;
            top = u > top ? u : top;
        }
        if (top >= 0x7f800000u) {
            add_slow(h, b, m);
            continue;
        }
        float mx;
        memcpy(&mx, &top, 4);
        if (mx == 0.0f) {
            h->zeros += m;
            continue;
        }
        if (mx >= ldexpf(1.0f, h->exp)) qf_histogram_widen(h, range_exp(mx));
        if (h->exp < -116) { /* 2^(11-exp) would not be a normal float */
            add_slow(h, b, m);
            continue;
        }
        if (mx > h->absmax) h->absmax = mx;
        float scale = ldexpf(1.0f, 11 - h->exp);
        memset(sub, 0, sizeof sub);
        uint64_t zeros = 0;
        size_t i = 0;
        for (; i + WAYS <= m; i += WAYS) {
            for (int w = 0; w < WAYS; w++) {
                float a = fabsf(b[i + w]);
                zeros += a == 0.0f;
                sub[w][(int)(a * scale)]++;
            }
        }
        for (; i < m; i++) {
            float a = fabsf(b[i]);
            zeros += a == 0.0f;
            sub[i % WAYS][(int)(a * scale)]++;
        }
        for (int k = 0; k < QF_HIST_BINS; k++)
            h->bins[k] += (uint64_t)sub[0][k] + sub[1][k] + sub[2][k] + sub[3][k];
        h->bins[0] -= zeros;
        h->zeros += zeros;
    }
}

void qf_histogram_merge(qf_histogram *dst, const qf_histogram *src)
{
    qf_histogram_widen(dst, src->exp);
    int s = dst->exp - src->exp;
    if (s > 11) s = 11;
    for (int i = 0; i < QF_HIST_BINS; i++) dst->bins[i >> s] += src->bins[i];
    dst->zeros += src->zeros;
    dst->nonfinite += src->nonfinite;
    if (src->absmax > dst->absmax) dst->absmax = src->absmax;
}

double qf_histogram_bin_width(const qf_histogram *h)
{
    return ldexp(1.0, h->exp - 11);
}

uint64_t qf_histogram_count(const qf_histogram *h)
{
    uint64_t n = h->zeros;
    for (int i = 0; i < QF_HIST_BINS; i++) n += h->bins[i];
    return n;
}
