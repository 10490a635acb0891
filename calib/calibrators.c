/* Calibrators: from one |x| histogram to a clipping threshold amax (scale = amax/127).
 * entropy (TensorRT's KL search), minmax, percentile and MSE all read the same
 * qf_histogram; each is a pure function of it, so equal histograms give
 * bit-identical thresholds. */
#include "internal.h"
#include "qforge/calib.h"
#include <math.h>

static const char *const method_names[] = {
    [QF_CALIB_AUTO] = "auto",
    [QF_CALIB_ENTROPY] = "entropy",
    [QF_CALIB_MINMAX] = "minmax",
    [QF_CALIB_PERCENTILE] = "percentile",
    [QF_CALIB_MSE] = "mse",
};
_Static_assert(QF_ARRAY_LEN(method_names) == QF_CALIB_METHOD_COUNT, "method name table incomplete");

const char *qf_calib_method_name(qf_calib_method m)
{
    return (unsigned)m < QF_CALIB_METHOD_COUNT ? method_names[m] : "?";
}

qf_status qf_calib_method_parse(const char *s, unsigned *methods, double *percentile)
{
    *percentile = QF_CALIB_PERCENTILE_DEFAULT;
    if (!s) return qf_error(QF_ERR_USAGE, "--method: missing value");
    if (!strcmp(s, "all")) {
        *methods = QF_CALIB_ALL;
        return QF_OK;
    }
    for (int m = 0; m < QF_CALIB_METHOD_COUNT; m++) {
        if (!strcmp(s, method_names[m])) {
            *methods = 1u << m;
            return QF_OK;
        }
    }
    if (!strncmp(s, "percentile=", 11)) {
        char *end;
        double p = strtod(s + 11, &end);
        if (end == s + 11 || *end || !(p > 0.0 && p <= 100.0))
            return qf_error(QF_ERR_USAGE, "--method %s: the percentile must be a number in (0, 100]", s);
        *methods = 1u << QF_CALIB_PERCENTILE;
        *percentile = p;
        return QF_OK;
    }
    return qf_error(QF_ERR_USAGE, "--method %s: expected auto, entropy, minmax, percentile[=P], mse or all", s);
}

float qf_calib_scale(float amax)
{
    return amax >= QF_CALIB_AMAX_MIN ? amax / 127.0f : 1.0f;
}

/* One past the last nonzero bin; 0 for a histogram without nonzero values. */
static int used_bins(const qf_histogram *h)
{
    int n = QF_HIST_BINS;
    while (n > 0 && h->bins[n - 1] == 0) n--;
    return n;
}

/* A threshold never exceeds absmax: range above it would only waste levels. */
static float clamp_amax(const qf_histogram *h, double t)
{
    return t < (double)h->absmax ? (float)t : h->absmax;
}

float qf_calib_minmax(const qf_histogram *h)
{
    return h->absmax;
}

/* Percentile of |x| over all finite values, zeros included (the usual definition),
 * linear within the bin that holds it. */
float qf_calib_percentile(const qf_histogram *h, double percent)
{
    uint64_t total = qf_histogram_count(h);
    if (total == 0 || h->absmax == 0.0f) return 0.0f;
    if (percent >= 100.0) return h->absmax;
    double target = percent / 100.0 * (double)total;
    double cum = (double)h->zeros;
    if (target <= cum) return 0.0f;
    double w = qf_histogram_bin_width(h);
    for (int b = 0; b < QF_HIST_BINS; b++) {
        double c = (double)h->bins[b];
        if (c > 0 && cum + c >= target) return clamp_amax(h, (b + (target - cum) / c) * w);
        cum += c;
    }
    return h->absmax;  // rounding left target a hair above the total
}

/* Entropy calibration as TensorRT describes it (EntropyCalibration2), over the
 * nonzero values (zeros are exact at any scale and are left out):
 *   for every candidate i in [128, used bins]:
 *     P = bins[0..i-1], with the clipped outliers sum(bins[i..]) added to bin i-1;
 *     Q = bins[0..i-1] merged into 128 levels (groups of i/128 bins, the last group
 *         taking the remainder), each level's mass spread evenly over the bins of its
 *         group where P is nonzero;
 *     both normalized; KL(P||Q) = sum over P>0 of p log(p/q).
 *   Q is zero where P is not only when the whole last group is empty but outliers
 *   were folded into bin i-1; that bin then gets q = 1e-4 and the rest of Q is
 *   scaled by (1 - 1e-4) (the eps smoothing of MXNet/TVM), which keeps KL finite but
 *   heavily penalizes clipping a lone outlier mass.
 *   The first i with the smallest KL wins; the threshold is i * bin width, the upper
 *   edge of the last kept bin (TensorRT's slides say (i + 0.5) * width; the edge is
 *   the value that bin's contents actually reach), clamped to absmax.
 * Searching only up to the last used bin keeps the candidates those of TensorRT's
 * histogram, whose range ends at absmax; ours ends at the power of two above it.
 * Every sum comes from prefix sums, and a candidate costs O(1), not O(128): all
 * groups but the last hold m = i/128 bins whatever i is (one bin below 256), so
 *   sum over those groups of p log q = (G(m) - C(s) log kept) / T,
 * with G(m) = sum of S log(S/nz) over the groups (S their count, nz their nonzero
 * bins), C(s) the count below the last group and T the total. G(1) is the
 * prefix sum of c log c; G(m) for m >= 2 is computed once per m (at most 16). */
#define ENTROPY_LEVELS 128
#define ENTROPY_EPS 1e-4

/* G(m) of the first `groups` groups of m bins (see above). */
static double group_entropy_sum(const uint64_t *C, const int *NZ, int m, int groups)
{
    double g = 0.0;
    for (int k = 0; k < groups; k++) {
        uint64_t sum = C[(k + 1) * m] - C[k * m];
        if (sum) g += (double)sum * log((double)sum / (double)(NZ[(k + 1) * m] - NZ[k * m]));
    }
    return g;
}

float qf_calib_entropy(const qf_histogram *h)
{
    int n = used_bins(h);
    if (n == 0 || h->absmax == 0.0f) return 0.0f;
    // C[j] = sum bins[0..j-1]; NZ[j] = nonzero bins among them; L[j] = sum c*log(c).
    uint64_t C[QF_HIST_BINS + 1];
    int NZ[QF_HIST_BINS + 1];
    double L[QF_HIST_BINS + 1];
    C[0] = 0;
    NZ[0] = 0;
    L[0] = 0.0;
    for (int j = 0; j < n; j++) {
        uint64_t c = h->bins[j];
        C[j + 1] = C[j] + c;
        NZ[j + 1] = NZ[j] + (c != 0);
        L[j + 1] = L[j] + (c ? (double)c * log((double)c) : 0.0);
    }
    const double T = (double)C[n], logT = log(T);
    int first = n < ENTROPY_LEVELS ? n : ENTROPY_LEVELS;
    int best = n, g_m = 0;
    double best_kl = INFINITY, g_sum = 0.0;
    for (int i = first; i <= n; i++) {
        uint64_t kept = C[i], out = C[n] - C[i];
        if (kept == 0) continue;  // everything clipped: Q is empty, KL infinite
        // sum p log p: bins 0..i-2 from the prefix sums, bin i-1 with the outliers.
        double plogp = (L[i - 1] - (double)C[i - 1] * logT) / T;
        double p_last = (double)(h->bins[i - 1] + out) / T;
        if (p_last > 0) plogp += p_last * log(p_last);
        // sum p log q: q is constant over a group's P-nonzero bins, sum/(nz*kept).
        int levels = i < ENTROPY_LEVELS ? i : ENTROPY_LEVELS, m = i / levels, s = (levels - 1) * m;
        if (m > 1 && m != g_m) {
            g_sum = group_entropy_sum(C, NZ, m, levels - 1);
            g_m = m;
        }
        double plogq = ((m == 1 ? L[s] : g_sum) - (double)C[s] * log((double)kept)) / T;
        // The last group, bins s..i-1, also holds the outliers in P.
        uint64_t sum = C[i] - C[s];
        double pmass = (double)sum + (double)out, p_orphan = 0.0;
        int nz = NZ[i] - NZ[s] + (out > 0 && h->bins[i - 1] == 0);
        if (sum == 0)  // P has the outliers here, Q has nothing
            p_orphan = pmass / T;
        else
            plogq += pmass / T * log((double)sum / ((double)nz * (double)kept));
        if (p_orphan > 0) plogq += (1.0 - p_orphan) * log1p(-ENTROPY_EPS) + p_orphan * log(ENTROPY_EPS);
        double kl = plogp - plogq;
        if (kl < best_kl) {
            best_kl = kl;
            best = i;
        }
    }
    return clamp_amax(h, best * qf_histogram_bin_width(h));
}

/* Expected squared error of symmetric INT8 quantization with clipping at T, from
 * the histogram, each bin's values taken at its center c:
 *   c > T : clipped to T, error (c - T)^2;
 *   c <= T: rounded to a grid of step T/127, error step^2/12 (uniform rounding noise).
 * Zeros are exact and add nothing. Candidates: every bin edge j * width up to the
 * used range, and absmax itself; the first minimum wins.
 * Every candidate costs O(1), not O(bins): with k the first clipped bin and
 * d = c_k - T in (0, w], the clipped error is
 *   sum_{b>=k} n_b ((b-k) w + d)^2 = w^2 E[k] + 2 w d F[k] + d^2 N[k],
 * N, F, E being the suffix sums of n_b, n_b (b-k) and n_b (b-k)^2. They are built
 * from the top by adding non-negative terms only (F[k] = F[k+1] + N[k+1],
 * E[k] = E[k+1] + 2 F[k+1] + N[k+1]), so nothing cancels. */
typedef struct sq_error {
    double N[QF_HIST_BINS + 1], F[QF_HIST_BINS + 1], E[QF_HIST_BINS + 1];
    int n;               /* used bins */
    double w, total;     /* bin width, nonzero values */
} sq_error;

static void sq_error_init(sq_error *s, const qf_histogram *h, int n)
{
    s->n = n;
    s->N[n] = s->F[n] = s->E[n] = 0.0;
    for (int k = n - 1; k >= 0; k--) {
        s->E[k] = s->E[k + 1] + 2.0 * s->F[k + 1] + s->N[k + 1];
        s->F[k] = s->F[k + 1] + s->N[k + 1];
        s->N[k] = s->N[k + 1] + (double)h->bins[k];
    }
    s->w = qf_histogram_bin_width(h);
    s->total = s->N[0];
}

/* The expected squared error of clipping at t (t > 0, at most the used range). */
static double sq_error_at(const sq_error *s, double t)
{
    const double w = s->w;
    // first bin whose center (k + 0.5) w lies above t; t / w is exact at bin edges (w is a power of two)
    int k = (int)floor(t / w - 0.5) + 1;
    if (k > s->n) k = s->n;
    if (k < 0) k = 0;
    double d = (k + 0.5) * w - t, step = t / 127.0;
    return w * w * s->E[k] + 2.0 * w * d * s->F[k] + d * d * s->N[k] + (s->total - s->N[k]) * (step * step / 12.0);
}

float qf_calib_mse(const qf_histogram *h)
{
    int n = used_bins(h);
    if (n == 0 || h->absmax == 0.0f) return 0.0f;
    sq_error s;
    sq_error_init(&s, h, n);
    double best_t = h->absmax, best_err = INFINITY;
    for (int j = 1; j <= n; j++) {
        double t = j * s.w < h->absmax ? j * s.w : h->absmax;  // the last candidate is absmax
        double err = sq_error_at(&s, t);
        if (err < best_err) {
            best_err = err;
            best_t = t;
        }
        if (t == h->absmax) break;
    }
    return clamp_amax(h, best_t);
}

/* ---- auto's candidates ------------------------------------------------------------ */

static const char *const auto_names[QF_CALIB_AUTO_CANDIDATES] = {"entropy", "mse", "percentile=99.99",
                                                                 "percentile=99.999", "minmax"};

const char *qf_calib_auto_candidate_name(int k)
{
    return k >= 0 && k < QF_CALIB_AUTO_CANDIDATES ? auto_names[k] : "?";
}

void qf_calib_auto_candidates(const qf_histogram *h, float amax[QF_CALIB_AUTO_CANDIDATES])
{
    amax[0] = qf_calib_entropy(h);
    amax[1] = qf_calib_mse(h);
    amax[2] = qf_calib_percentile(h, 99.99);
    amax[3] = qf_calib_percentile(h, 99.999);
    amax[4] = qf_calib_minmax(h);
}

float qf_calib_auto(const qf_histogram *h)
{
    float cand[QF_CALIB_AUTO_CANDIDATES];
    qf_calib_auto_candidates(h, cand);
    int n = used_bins(h);
    if (n == 0 || h->absmax == 0.0f) return 0.0f;
    sq_error s;
    sq_error_init(&s, h, n);
    int best = 0;
    double best_err = INFINITY;
    for (int k = 0; k < QF_CALIB_AUTO_CANDIDATES; k++) {
        /* a threshold of 0 (a percentile among the zeros) holds nothing: every value clipped */
        double err = cand[k] > 0.0f ? sq_error_at(&s, cand[k]) : s.w * s.w * (s.E[0] + s.F[0]) + s.w * s.w * s.N[0] / 4.0;
        if (err < best_err) {
            best_err = err;
            best = k;
        }
    }
    return cand[best];
}

float qf_calib_threshold(const qf_histogram *h, qf_calib_method m, double percent)
{
    switch (m) {
    case QF_CALIB_AUTO: return qf_calib_auto(h);
    case QF_CALIB_ENTROPY: return qf_calib_entropy(h);
    case QF_CALIB_MINMAX: return qf_calib_minmax(h);
    case QF_CALIB_PERCENTILE: return qf_calib_percentile(h, percent);
    case QF_CALIB_MSE: return qf_calib_mse(h);
    default: QF_ASSERT(!"unknown calibration method");
    }
    return 0.0f;
}
