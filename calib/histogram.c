/* Streaming |x| histograms with a power-of-two range that widens by merging pairs
 * of bins. Exactness argument: at range 2^e the bin of a is floor(a * 2^(11-e));
 * at 2^(e+s) it is floor(a * 2^(11-e-s)) = floor(a * 2^(11-e)) >> s, so widening
 * commutes with adding and any order or split of the data gives the same counts.
 * The signed minimum beside them is a minimum over finite values, with -0 taken
 * as +0: the same bits in any order too. */
#include "internal.h"
#include "qforge/calib.h"
#include "float_math.h"
#include <float.h>
#include <math.h>
#include <stdbool.h>

void qf_histogram_init(qf_histogram *h)
{
    memset(h, 0, sizeof *h);
    h->min = INFINITY;
    h->exp = QF_HIST_EXP_EMPTY;
}

/* h->min takes the value whose order key (qfi_f32_order_key) is `key`, if smaller. */
static void note_min(qf_histogram *h, uint32_t key)
{
    float v = qfi_bits_f32(qfi_f32_from_order_key(key));
    if (v < h->min) h->min = v;
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
        note_min(h, qfi_f32_order_key(qfi_f32_bits(x[i])));
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

/* Largest |x| as bits. For non-negative floats integer order is float order, and
 * NaN/Inf are exactly the patterns >= 0x7f800000: an integer max reduction
 * vectorizes where a float one with NaN checks does not. */
QFI_SIMD_CLONES
static uint32_t max_abs_bits(const float *x, size_t n)
{
    uint32_t top = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        u &= 0x7fffffffu;
        top = u > top ? u : top;
    }
    return top;
}

/* What one pass over a chunk found besides the bins. */
typedef struct chunk_stats {
    uint32_t top;      /* the largest |x| as bits (see max_abs_bits) */
    uint32_t low;      /* the smallest x as its order key (qfi_f32_order_key); valid when top is finite */
    uint32_t zeros;    /* exact zeros */
    uint32_t positive; /* with relu: x > 0 */
    uint32_t top_pos;  /* with relu: the largest of those as bits */
} chunk_stats;

/* One vectorized pass over a chunk: idx[i] = floor(|x[i]| * scale) and the
 * chunk's stats, whose top tells the caller whether the indices are valid
 * (every |x| below the range) before it counts them. Products of 2048 or more
 * (values beyond the range, NaN, Inf) get index 0 so the conversion stays
 * defined; they are never counted. With `relu`, positive x[i] get index 2048 +
 * bin instead (the Relu's half, see qfi_histogram_add_relu), counted in
 * st->positive. (A loop-invariant flag: gcc compiles the loop twice.) */
QFI_SIMD_CLONES
static void bin_indices(const float *x, size_t n, float scale, bool relu, uint16_t *idx, chunk_stats *st)
{
    uint32_t top = 0, low = UINT32_MAX, z = 0, npos = 0, tpos = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &x[i], 4);
        uint32_t u = bits & 0x7fffffffu;
        top = u > top ? u : top;
        uint32_t key = qfi_f32_order_key(bits);
        low = key < low ? key : low;
        z += u == 0;
        float a;
        memcpy(&a, &u, 4);
        float t = a * scale;
        uint32_t b = (uint32_t)(int32_t)(t < 2048.0f ? t : 0.0f);
        if (relu) {
            uint32_t pos = (int32_t)bits > 0; /* sign clear and not +0 (NaN is caught by top) */
            uint32_t upos = u & (0u - pos);     /* |x| if x > 0, else 0: a max that vectorizes */
            npos += pos;
            tpos = upos > tpos ? upos : tpos;
            b += pos * QF_HIST_BINS;
        }
        idx[i] = (uint16_t)b;
    }
    *st = (chunk_stats){.top = top, .low = low, .zeros = z, .positive = npos, .top_pos = tpos};
}

enum {
    WAYS = 4,       /* interleaved sub-histograms */
    CHUNK = 1024,   /* values binned per vectorized pass (idx is 2 KiB of stack) */
    BLOCK = 65536,  /* values counted between folds: per way at most BLOCK/WAYS + WAYS - 1 */
    SMALL = 2048,   /* calls with fewer values count straight into the histogram */
};
_Static_assert(BLOCK / WAYS + WAYS - 1 <= UINT16_MAX, "sub-histogram counters overflow");

/* Counts not yet folded into the histogram, all at its current range. With a
 * Relu histogram (qfi_histogram_add_relu, same range) the values x > 0 count in
 * the upper half of each way, which folds into both histograms. */
typedef struct pending {
    uint16_t sub[WAYS][2 * QF_HIST_BINS]; /* bins of |x| (with relu: of x <= 0), then of x > 0 */
    qf_histogram *relu; /* the Relu's histogram, or NULL: the upper halves are unused */
    int cleared;        /* bins [0, cleared) of every half in use are counts; the rest is garbage */
    size_t count;       /* values counted since the last fold */
    uint64_t zeros;     /* exact zeros among them, counted in bin 0 */
    uint64_t nonpos;    /* with relu: x <= 0 among them, which the Relu makes 0 */
} pending;

/* bins[k] += the WAYS sub-histograms' counts of bin base + k, for k < nbins. */
QFI_SIMD_CLONES
static void fold_ways(uint64_t *bins, uint16_t (*sub)[2 * QF_HIST_BINS], int base, int nbins)
{
    for (int k = 0; k < nbins; k++) {
        uint32_t s = 0;
        for (int w = 0; w < WAYS; w++) s += sub[w][base + k];
        bins[k] += s;
    }
}

/* Nothing counted yet; relu: the Relu's histogram, or NULL. */
static void pending_start(pending *p, qf_histogram *relu)
{
    p->relu = relu;
    p->cleared = 0;
    p->count = 0;
    p->zeros = 0;
    p->nonpos = 0;
}

/* Must run before either range widens. */
static void fold(qf_histogram *h, pending *p)
{
    fold_ways(h->bins, p->sub, 0, p->cleared);
    if (p->relu) {
        fold_ways(h->bins, p->sub, QF_HIST_BINS, p->cleared);
        fold_ways(p->relu->bins, p->sub, QF_HIST_BINS, p->cleared);
        p->relu->zeros += p->nonpos;
    }
    h->bins[0] -= p->zeros;
    h->zeros += p->zeros;
    p->cleared = 0;
    p->count = 0;
    p->zeros = 0;
    p->nonpos = 0;
}

/* Counts a chunk whose bins are in idx (below 2048, or 4096 with p->relu) and
 * whose values are finite. */
static void count_chunk(qf_histogram *h, pending *p, bool direct, const uint16_t *idx, size_t m,
                        const chunk_stats *st, float scale)
{
    const uint32_t zeros = st->zeros;
    float mx;
    memcpy(&mx, &st->top, 4);
    if (mx > h->absmax) h->absmax = mx;
    note_min(h, st->low);
    if (direct) {
        for (size_t i = 0; i < m; i++) h->bins[idx[i]]++;
        h->bins[0] -= zeros;
        h->zeros += zeros;
        return;
    }
    if (p->count + m > BLOCK) fold(h, p);
    // Only bins up to this chunk's largest can be hit: clear lazily up to there.
    int nbins = (int)(mx * scale) + 1;
    if (nbins > p->cleared) {
        for (int w = 0; w < WAYS; w++) {
            memset(p->sub[w] + p->cleared, 0, (size_t)(nbins - p->cleared) * 2);
            if (p->relu) memset(p->sub[w] + QF_HIST_BINS + p->cleared, 0, (size_t)(nbins - p->cleared) * 2);
        }
        p->cleared = nbins;
    }
    // Interleaved ways break the store-to-load chains of runs of equal bins
    // (a ReLU's zeros all land in bin 0).
    size_t i = 0;
    for (; i + WAYS <= m; i += WAYS)
        for (int w = 0; w < WAYS; w++) p->sub[w][idx[i + w]]++;
    for (; i < m; i++) p->sub[0][idx[i]]++;
    p->count += m;
    p->zeros += zeros;
}

/* Fast path per chunk: one vectorized pass computes the bins at the current
 * range and the chunk's max, then a scalar pass counts them; only when the max
 * reaches past the range (rare once the range settles), or is NaN/Inf, does the
 * chunk take the careful way: widen, or the reference path. The float product
 * a * 2^(11-exp) is exact (a power-of-two scale of a normal result), so the bins
 * equal the reference path's. Large calls count into 16-bit sub-histograms that
 * are folded into the 64-bit bins every BLOCK values and before a widening; small
 * calls count straight into the bins, where clearing and folding would cost more
 * than they save. */
void qf_histogram_add(qf_histogram *h, const float *x, size_t n)
{
    pending p;
    pending_start(&p, NULL);
    const bool direct = n < SMALL;
    uint16_t idx[CHUNK];
    for (size_t off = 0; off < n; off += CHUNK) {
        size_t m = n - off < CHUNK ? n - off : CHUNK;
        const float *b = x + off;
        chunk_stats st;
        uint32_t top;
        // 2^(11-exp) is a normal float for exp >= -116; exp is at most 128
        if (h->exp >= -116) {
            float scale = ldexpf(1.0f, 11 - h->exp);
            uint32_t lim = h->exp >= 128 ? 0x7f800000u : (uint32_t)(h->exp + 127) << 23; /* 2^exp as bits */
            bin_indices(b, m, scale, false, idx, &st);
            top = st.top;
            if (top < lim) {
                count_chunk(h, &p, direct, idx, m, &st, scale);
                continue;
            }
        } else {
            top = max_abs_bits(b, m);
        }
        if (top >= 0x7f800000u) {
            fold(h, &p);
            add_slow(h, b, m);
            continue;
        }
        float mx;
        memcpy(&mx, &top, 4);
        if (mx == 0.0f) {
            h->zeros += m;
            note_min(h, qfi_f32_order_key(0));
            continue;
        }
        if (mx >= ldexpf(1.0f, h->exp)) {
            fold(h, &p);
            qf_histogram_widen(h, range_exp(mx));
        }
        if (h->exp < -116) { /* 2^(11-exp) would not be a normal float */
            add_slow(h, b, m);
            continue;
        }
        float scale = ldexpf(1.0f, 11 - h->exp);
        bin_indices(b, m, scale, false, idx, &st);
        count_chunk(h, &p, direct, idx, m, &st, scale);
    }
    fold(h, &p);
}

/* The chunk loop of qf_histogram_add for both histograms at once while their
 * ranges agree: each value is binned and counted once, in the lower half of a
 * way if x <= 0 and the upper one if x > 0, and folding adds both halves to h
 * and the upper one to hr, whose zeros gain the x <= 0. Those are exactly the
 * bins of |x| and of max(x, 0) at the common range. Any other chunk (ranges
 * apart, a value past the range, NaN or Inf, a small call) is counted the
 * plain way into each, the Relu's copy built in a buffer; all ways count the
 * same (see the top). */
void qfi_histogram_add_relu(qf_histogram *h, qf_histogram *hr, const float *x, size_t n)
{
    pending p;
    pending_start(&p, hr);
    uint16_t idx[CHUNK];
    float r[CHUNK];
    for (size_t off = 0; off < n; off += CHUNK) {
        size_t m = n - off < CHUNK ? n - off : CHUNK;
        const float *b = x + off;
        if (n >= SMALL && h->exp == hr->exp && h->exp >= -116) {
            float scale = ldexpf(1.0f, 11 - h->exp);
            uint32_t lim = h->exp >= 128 ? 0x7f800000u : (uint32_t)(h->exp + 127) << 23; /* 2^exp as bits */
            chunk_stats st;
            bin_indices(b, m, scale, true, idx, &st);
            if (st.top < lim) {
                count_chunk(h, &p, false, idx, m, &st, scale);
                p.nonpos += m - st.positive;
                float mx;
                memcpy(&mx, &st.top_pos, 4);
                if (mx > hr->absmax) hr->absmax = mx;
                /* the Relu's smallest: a zero where any x <= 0, else the chunk's smallest */
                note_min(hr, st.positive < m ? qfi_f32_order_key(0) : st.low);
                continue;
            }
        }
        fold(h, &p);
        qf_histogram_add(h, b, m);
        for (size_t i = 0; i < m; i++) r[i] = b[i] > 0.0f || b[i] != b[i] ? b[i] : 0.0f;
        qf_histogram_add(hr, r, m);
    }
    fold(h, &p);
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
    if (src->min < dst->min) dst->min = src->min;
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
