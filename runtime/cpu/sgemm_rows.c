/* FP32 GEMMs whose rows grow with the batch (Gemm; MatMul of a tall A by one
 * matrix), computed so that a row gets the same bits whatever else is in the
 * batch.
 *
 * On x86 with AVX2 or AVX-512 (gcc) the product is this file's own kernel:
 * B is copied a panel of PANEL_VECS vectors of columns at a time into the
 * slot's scratch (row k of the panel contiguous), and each output is one
 * FMA chain over k in order, started from zero, in a register block of rows.
 * Nothing of another row enters a row's chain, so blocks, tails and threads
 * change no bit, and the copy of B is made once per panel for all the rows.
 * Measured on one core of an AVX-512 Xeon against OpenBLAS 0.3 (below):
 * 1576 rows of 768 -> 768 12.1 ms (one sgemm call over all rows 11.3, the
 * 8-row calls 41-49), 16 rows of 1280 -> 1000 0.41 ms (0.51 and 0.82), one
 * row 0.18-0.20 ms (0.32 and 0.30).
 *
 * Elsewhere, and for a transposed A, OpenBLAS: one cblas_sgemm over all
 * rows does not keep rows apart (it sums a row in an order that depends on
 * where the row falls among the call's rows: on its Haswell kernels, which
 * 0.3.21 also runs on Zen 4, rows 6-11 of every 12, and the rows of a 1- or
 * 2-row tail, come out other than rows 0-5, so test_qfm's images 0-1
 * differed between batch 2 and batch 6). There every call has SGEMM_ROWS
 * rows, the last block zero-padded in scratch. At 8 rows every position in
 * the block gives a row the same bits on 0.3.21's Haswell, Zen, SkylakeX,
 * Cooperlake, SapphireRapids, Sandybridge, Nehalem and Prescott kernels
 * (OPENBLAS_CORETYPE; N 1-3072, K 3-4096); 1, 2 and 4 rows do too, 3, 6, 12
 * and 16 do not everywhere. 8 is the fastest of those (Zen 4, one thread,
 * against one call over all rows: 1280 -> 1000 at 32 rows 1.28 ms vs 0.85,
 * 4 rows 1.87, 1 row 8.5; at 1 row 0.32 vs 0.28; 6304 rows of 768 -> 768
 * 118 ms vs 72), as OpenBLAS packs B again for every call; large GEMMs
 * spread their blocks over threads, which wins that back (2 threads: 0.86
 * ms, 60 ms). tests/test_ops_compute.c checks the invariance on the machine
 * it runs on, and the values against a double-precision product. */
#include "kernels.h"
#include <cblas.h>
#include <limits.h>

#define SGEMM_ROWS 8

/* Multiply-adds below which a GEMM stays on one thread: threads are started
 * per call (runtime/parallel.c). */
#define SGEMM_SPREAD_MACS (1 << 22)
static bool one_thread(int64_t rows, int64_t N, int64_t K)
{
    return (double)rows * (double)N * (double)K < SGEMM_SPREAD_MACS;
}

/* ---- own kernel: panels of B, register blocks of rows ---------------------------------- */

#define PANEL_VECS 2 /* vectors of columns in a panel */
#define TILE_KINDS 4 /* register blocks per instruction set: the widest, then 4, 2 and 1 rows */

/* acc (rows, PANEL_VECS * vw) = the rows of a (lda apart) times b (K rows of
 * the panel's columns, ldb apart). */
typedef void (*tile_fn)(const float *a, int64_t lda, const float *b, int64_t ldb, int64_t K, float *acc);

/* Defines tile NAME for TARGET with GNU vector type VT of VW floats (VTU: its
 * unaligned twin): ROWS x PANEL_VECS accumulators in registers, per k
 * PANEL_VECS loads of b and ROWS broadcasts of a. Each output's chain starts
 * at zero and takes k in order: a row's bits do not depend on ROWS. */
#define DEFINE_TILE(NAME, TARGET, VT, VTU, VW, ROWS)                                                                  \
    TARGET QFI_FMA_CONTRACT static void NAME(const float *a, int64_t lda, const float *b, int64_t ldb, int64_t K,     \
                                             float *acc)                                                              \
    {                                                                                                                 \
        VT c[ROWS][PANEL_VECS];                                                                                       \
        QFI_UNROLL(ROWS) for (int i = 0; i < ROWS; i++) for (int v = 0; v < PANEL_VECS; v++) c[i][v] = (VT){0};    \
        for (int64_t k = 0; k < K; k++) {                                                                             \
            VT bk[PANEL_VECS];                                                                                        \
            for (int v = 0; v < PANEL_VECS; v++) bk[v] = *(const VTU *)(b + k * ldb + v * VW);                         \
            QFI_UNROLL(ROWS) for (int i = 0; i < ROWS; i++) {                                                         \
                const VT av = a[i * lda + k] - (VT){0}; /* broadcast; x - 0 is exactly x */                          \
                for (int v = 0; v < PANEL_VECS; v++) c[i][v] += av * bk[v];                                           \
            }                                                                                                         \
        }                                                                                                             \
        for (int i = 0; i < ROWS; i++)                                                                                \
            for (int v = 0; v < PANEL_VECS; v++) *(VTU *)(acc + (i * PANEL_VECS + v) * VW) = c[i][v];                 \
    }

typedef struct tile_set {
    tile_fn fn[TILE_KINDS];
    int rows[TILE_KINDS]; /* descending; the last is 1 */
    int64_t width;        /* a panel's columns */
} tile_set;

#ifdef QFI_X86_FLOAT_KERNELS
/* AVX-512: 12 x 2 keeps 24 of 32 registers accumulating (2 loads and 12
 * broadcasts per 24 FMAs): 1576 rows of 768 -> 768 in 12.1 ms against 8 x
 * 2's 14.6 on one core. AVX2: 6 x 2 is what its 16 registers hold. */
#define T512 __attribute__((target("avx512f,fma")))
#define T256 __attribute__((target("avx2,fma")))
DEFINE_TILE(tile512_12, T512, vf16, vf16u, 16, 12)
DEFINE_TILE(tile512_4, T512, vf16, vf16u, 16, 4)
DEFINE_TILE(tile512_2, T512, vf16, vf16u, 16, 2)
DEFINE_TILE(tile512_1, T512, vf16, vf16u, 16, 1)
DEFINE_TILE(tile256_6, T256, vf8, vf8u, 8, 6)
DEFINE_TILE(tile256_4, T256, vf8, vf8u, 8, 4)
DEFINE_TILE(tile256_2, T256, vf8, vf8u, 8, 2)
DEFINE_TILE(tile256_1, T256, vf8, vf8u, 8, 1)
static const tile_set tiles512 = {{tile512_12, tile512_4, tile512_2, tile512_1}, {12, 4, 2, 1}, PANEL_VECS * 16};
static const tile_set tiles256 = {{tile256_6, tile256_4, tile256_2, tile256_1}, {6, 4, 2, 1}, PANEL_VECS * 8};
#endif

/* The tiles of isa, or NULL: OpenBLAS in row blocks. */
static const tile_set *own_tiles(qfi_direct_isa isa)
{
#ifdef QFI_X86_FLOAT_KERNELS
    switch (isa) {
    case QFI_DIRECT_AVX512: return &tiles512;
    case QFI_DIRECT_AVX2: return &tiles256;
    default: break;
    }
#else
    (void)isa;
#endif
    return NULL;
}

/* A slot's scratch: one panel (K x width) and one tile's accumulators, in
 * whole cache lines. */
static int64_t slot_floats(const tile_set *ts, int64_t K)
{
    return (ts->width * K + ts->rows[0] * ts->width + 15) / 16 * 16;
}

static int64_t panel_slots(const tile_set *ts, int64_t rows, int64_t N, int64_t K, int threads)
{
    return one_thread(rows, N, K) ? 1 : qfi_cpu_slots((N + ts->width - 1) / ts->width, threads);
}

typedef struct panel_job {
    const tile_set *ts;
    bool trans_b;
    int64_t rows, N, K, lda, ldb;
    float alpha, beta;
    const float *A, *B;
    float *Y, *scratch;
    int64_t panels, slots;
} panel_job;

/* Columns [c0, c0 + w) of B into panel (K x width, zeros past w). */
static void pack_panel(const panel_job *j, int64_t c0, int64_t w, float *panel)
{
    const int64_t W = j->ts->width, K = j->K;
    if (w < W)
        for (int64_t k = 0; k < K; k++) qfi_zero_floats(panel + k * W + w, W - w);
    if (j->trans_b) /* B is stored (N, K): column c is row c */
        for (int64_t c = 0; c < w; c++) {
            const float *src = j->B + (c0 + c) * j->ldb;
            for (int64_t k = 0; k < K; k++) panel[k * W + c] = src[k];
        }
    else
        for (int64_t k = 0; k < K; k++) qfi_copy_floats(panel + k * W, j->B + k * j->ldb + c0, w);
}

/* Slot t: panels [t * panels / slots, (t + 1) * panels / slots), every row. */
static void panel_slot(void *arg, int64_t t)
{
    const panel_job *j = arg;
    const tile_set *ts = j->ts;
    const int64_t W = ts->width;
    float *panel = j->scratch + t * slot_floats(ts, j->K), *acc = panel + W * j->K;
    for (int64_t p = t * j->panels / j->slots; p < (t + 1) * j->panels / j->slots; p++) {
        const int64_t c0 = p * W, w = j->N - c0 < W ? j->N - c0 : W;
        const float *b = panel;
        int64_t ldb = W;
        if (!j->trans_b && w == W && j->rows <= ts->rows[0]) /* read once: no copy */
            b = j->B + c0, ldb = j->ldb;
        else
            pack_panel(j, c0, w, panel);
        for (int64_t r0 = 0; r0 < j->rows;) {
            int kind = 0;
            while (ts->rows[kind] > j->rows - r0) kind++;
            const int64_t tr = ts->rows[kind];
            ts->fn[kind](j->A + r0 * j->lda, j->lda, b, ldb, j->K, acc);
            for (int64_t i = 0; i < tr; i++) {
                float *y = j->Y + (r0 + i) * j->N + c0;
                const float *ai = acc + i * W;
                if (j->beta != 0.0f)
                    for (int64_t c = 0; c < w; c++) y[c] = j->alpha * ai[c] + j->beta * y[c];
                else
                    for (int64_t c = 0; c < w; c++) y[c] = j->alpha * ai[c];
            }
            r0 += tr;
        }
    }
}

/* ---- OpenBLAS in fixed row blocks -------------------------------------------------------- */

typedef struct rows_job {
    bool trans_a, trans_b;
    int64_t rows, N, K, lda, ldb;
    float alpha, beta;
    const float *A, *B;
    float *Y;
    float *scratch; /* one padded block per slot with trans_a, else one for the tail */
    int64_t blocks, slots;
} rows_job;

static int64_t block_floats(int64_t N, int64_t K) { return SGEMM_ROWS * (K + N); }

/* Block b: rows [r0, r0 + SGEMM_ROWS) of Y. A full block of an untransposed A
 * runs in place; the tail, and every block of a transposed A, is copied into
 * pa (SGEMM_ROWS x K, zero rows after the last) with its Y rows in py
 * (SGEMM_ROWS x N, for beta), and only the real rows are copied back. */
static void rows_block(const rows_job *j, int64_t b, float *buf)
{
    const int64_t r0 = b * SGEMM_ROWS, n = j->rows - r0 < SGEMM_ROWS ? j->rows - r0 : SGEMM_ROWS;
    const int64_t N = j->N, K = j->K;
    const CBLAS_TRANSPOSE tb = j->trans_b ? CblasTrans : CblasNoTrans;
    if (n == SGEMM_ROWS && !j->trans_a) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, tb, SGEMM_ROWS, (int)N, (int)K, j->alpha, j->A + r0 * j->lda,
                    (int)j->lda, j->B, (int)j->ldb, j->beta, j->Y + r0 * N, (int)N);
        return;
    }
    float *pa = buf, *py = buf + SGEMM_ROWS * K;
    if (j->trans_a) /* A is stored (K, rows): row r is column r0 + r */
        for (int64_t k = 0; k < K; k++)
            for (int64_t r = 0; r < n; r++) pa[r * K + k] = j->A[k * j->lda + r0 + r];
    for (int64_t r = 0; r < n; r++) {
        if (!j->trans_a) qfi_copy_floats(pa + r * K, j->A + (r0 + r) * j->lda, K);
        if (j->beta != 0.0f) qfi_copy_floats(py + r * N, j->Y + (r0 + r) * N, N);
    }
    qfi_zero_floats(pa + n * K, (SGEMM_ROWS - n) * K);
    if (j->beta != 0.0f) qfi_zero_floats(py + n * N, (SGEMM_ROWS - n) * N); /* read for beta only */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, tb, SGEMM_ROWS, (int)N, (int)K, j->alpha, pa, (int)K, j->B, (int)j->ldb,
                j->beta, py, (int)N);
    qfi_copy_floats(j->Y + r0 * N, py, n * N);
}

/* Slot t runs blocks t, t+slots, ... */
static void rows_slot(void *arg, int64_t t)
{
    const rows_job *j = arg;
    float *buf = j->scratch ? j->scratch + (j->trans_a ? t * block_floats(j->N, j->K) : 0) : NULL;
    for (int64_t b = t; b < j->blocks; b += j->slots) rows_block(j, b, buf);
}

/* How many slots a GEMM of these dims is spread over with `threads` (<= 0: all cores). */
static int64_t rows_slots(int64_t rows, int64_t N, int64_t K, int threads)
{
    if (one_thread(rows, N, K)) return 1;
    const int64_t blocks = (rows + SGEMM_ROWS - 1) / SGEMM_ROWS;
    const int64_t slots = threads > 0 ? threads : qfi_cpu_count(); /* a sysconf: not for small GEMMs */
    return slots < blocks ? slots : blocks;
}

size_t qfi_cpu_sgemm_rows_scratch(int64_t rows, int64_t N, int64_t K, bool trans_a, int threads, qfi_direct_isa isa)
{
    if (rows <= 0 || N <= 0 || K <= 0) return 0;
    const tile_set *ts = trans_a ? NULL : own_tiles(isa);
    if (ts) return (size_t)(panel_slots(ts, rows, N, K, threads) * slot_floats(ts, K)) * sizeof(float);
    if (!trans_a && rows % SGEMM_ROWS == 0) return 0;
    const int64_t blocks = trans_a ? rows_slots(rows, N, K, threads) : 1;
    return (size_t)(blocks * block_floats(N, K)) * sizeof(float);
}

qf_status qfi_cpu_sgemm_rows(bool trans_a, bool trans_b, int64_t rows, int64_t N, int64_t K, float alpha,
                             const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *Y,
                             void *scratch, int threads, qfi_direct_isa isa)
{
    if (rows <= 0 || N <= 0 || K <= 0) return QF_OK;
    if (N > INT_MAX || K > INT_MAX || (!trans_a && lda > INT_MAX) || ldb > INT_MAX)
        return qf_error(QF_ERR_UNSUPPORTED, "GEMM dimensions exceed the BLAS int range");
    if (!scratch && qfi_cpu_sgemm_rows_scratch(rows, N, K, trans_a, threads, isa) > 0)
        return qf_error(QF_ERR_USAGE, "no GEMM row-block scratch was provided");
    const tile_set *ts = trans_a ? NULL : own_tiles(isa);
    if (ts) {
        panel_job pj = {.ts = ts, .trans_b = trans_b, .rows = rows, .N = N, .K = K, .lda = lda, .ldb = ldb,
                        .alpha = alpha, .beta = beta, .A = A, .B = B, .Y = Y, .scratch = scratch,
                        .panels = (N + ts->width - 1) / ts->width, .slots = panel_slots(ts, rows, N, K, threads)};
        qfi_parallel_for((int)pj.slots, pj.slots, panel_slot, &pj);
        return QF_OK;
    }
    rows_job j = {.trans_a = trans_a, .trans_b = trans_b, .rows = rows, .N = N, .K = K, .lda = lda, .ldb = ldb,
                  .alpha = alpha, .beta = beta, .A = A, .B = B, .Y = Y, .scratch = scratch,
                  .blocks = (rows + SGEMM_ROWS - 1) / SGEMM_ROWS};
    j.slots = rows_slots(rows, N, K, threads);
    if (trans_a && j.slots > 1) { /* the scratch holds a block per slot of these threads, at most all cores' */
        const int64_t planned = rows_slots(rows, N, K, 0);
        if (j.slots > planned) j.slots = planned;
    }
    qfi_parallel_for((int)j.slots, j.slots, rows_slot, &j);
    return QF_OK;
}
