/* FP32 GEMMs whose rows grow with the batch (Gemm; MatMul of a tall A by one
 * matrix), computed so that a row gets the same bits whatever else is in the
 * batch. One cblas_sgemm over all rows does not: OpenBLAS sums a row in an
 * order that depends on where the row falls among the call's rows. On its
 * Haswell kernels (which 0.3.21 also runs on Zen 4), rows 6-11 of every 12,
 * and the rows of a 1- or 2-row tail, come out other than rows 0-5, so
 * test_qfm's images 0-1 differed between batch 2 and batch 6.
 *
 * Here every call has SGEMM_ROWS rows, the last block zero-padded in scratch.
 * At 8 rows every position in the block gives a row the same bits on 0.3.21's
 * Haswell, Zen, SkylakeX, Cooperlake, SapphireRapids, Sandybridge, Nehalem
 * and Prescott kernels (OPENBLAS_CORETYPE; N 1-3072, K 3-4096); 1, 2 and 4
 * rows do too, 3, 6, 12 and 16 do not everywhere. 8 is the fastest of those
 * (Zen 4, one thread, against one call over all rows: 1280 -> 1000 at 32 rows
 * 1.28 ms vs 0.85, 4 rows 1.87, 1 row 8.5; at 1 row 0.32 vs 0.28; 6304 rows
 * of 768 -> 768 118 ms vs 72), as OpenBLAS packs B again for every call;
 * large GEMMs spread their blocks over threads, which wins that back (2
 * threads: 0.86 ms, 60 ms). tests/test_ops_compute.c checks the invariance
 * on the machine it runs on. */
#include "kernels.h"
#include <cblas.h>
#include <limits.h>

#define SGEMM_ROWS 8

/* Multiply-adds below which a GEMM stays on one thread: threads are started
 * per call (runtime/parallel.c). */
#define SGEMM_SPREAD_MACS (1 << 22)

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
    if ((double)rows * (double)N * (double)K < SGEMM_SPREAD_MACS) return 1;
    const int64_t blocks = (rows + SGEMM_ROWS - 1) / SGEMM_ROWS;
    const int64_t slots = threads > 0 ? threads : qfi_cpu_count(); /* a sysconf: not for small GEMMs */
    return slots < blocks ? slots : blocks;
}

size_t qfi_cpu_sgemm_rows_scratch(int64_t rows, int64_t N, int64_t K, bool trans_a, int threads)
{
    if (rows <= 0 || N <= 0 || K <= 0) return 0;
    if (!trans_a && rows % SGEMM_ROWS == 0) return 0;
    const int64_t blocks = trans_a ? rows_slots(rows, N, K, threads) : 1;
    return (size_t)(blocks * block_floats(N, K)) * sizeof(float);
}

qf_status qfi_cpu_sgemm_rows(bool trans_a, bool trans_b, int64_t rows, int64_t N, int64_t K, float alpha,
                             const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *Y,
                             void *scratch, int threads)
{
    if (rows <= 0 || N <= 0 || K <= 0) return QF_OK;
    if (N > INT_MAX || K > INT_MAX || (!trans_a && lda > INT_MAX) || ldb > INT_MAX)
        return qf_error(QF_ERR_UNSUPPORTED, "GEMM dimensions exceed the BLAS int range");
    if (!scratch && qfi_cpu_sgemm_rows_scratch(rows, N, K, trans_a, threads) > 0)
        return qf_error(QF_ERR_USAGE, "no GEMM row-block scratch was provided");
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
