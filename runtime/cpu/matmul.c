/* MatMul on the CPU: one cblas_sgemm per broadcast batch matrix, spread over
 * threads; when B has no batch dims the whole batch of A is one tall GEMM
 * (sgemm_rows.c), so that a row's result does not depend on the batch.
 * INT8 with a constant weight: gemm_int8.c; INT8 of two activations: below. */
#include "kernels.h"
#include "ops/nn.h"
#include <cblas.h>
#include <limits.h>

typedef struct matmul_job {
    const qfi_matmul_geom *geo;
    const float *A, *B;
    float *Y;
} matmul_job;

/* Y[i] (M,N) = A[ia] (M,K) x B[ib] (K,N), with ia/ib the broadcast batch offsets of i. */
static void matmul_item(void *arg, int64_t i)
{
    const matmul_job *j = arg;
    const qfi_matmul_geom *geo = j->geo;
    int64_t ia, ib;
    qfi_matmul_batch_offsets(geo, i, &ia, &ib);
    const int64_t M = geo->M, N = geo->N, K = geo->K;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)N, (int)K, 1.0f, j->A + ia * M * K, (int)K,
                j->B + ib * K * N, (int)N, 0.0f, j->Y + i * M * N, (int)N);
}

/* ---- INT8 product of two activations (qfi_matmul_is_product) ------------------------------
 * Portable C: attention's matrices are small (197x64 by 64x197 a head). The
 * int32 sums of (a - z_a)(b - z_b) are exact in any order, and the epilogue
 * is lib/quant_math.h's, so the CUDA engine's result is the same bits. */
typedef struct product_job {
    const qfi_matmul_geom *geo;
    const int8_t *A, *B;
    int32_t za, zb;
    const qfi_requant *rq;
    const qfi_i8_kernels *k; /* its vector epilogue (int8_simd.c: the same bits as qfi_requantize) */
    void *Y;
    int32_t *acc; /* scratch: N a batch matrix */
} product_job;

/* acc[0..N) = row a (K) times B (K, N), less the zero points: rows of B
 * scaled and added, which vectorizes (one clone per instruction set). */
QFI_SIMD_CLONES static void product_row(int32_t *restrict acc, const int8_t *restrict a, const int8_t *restrict B,
                                        int64_t K, int64_t N, int32_t za, int32_t zb)
{
    for (int64_t c = 0; c < N; c++) acc[c] = 0;
    for (int64_t k = 0; k < K; k++) {
        const int32_t av = (int32_t)a[k] - za;
        const int8_t *brow = B + k * N;
        for (int64_t c = 0; c < N; c++) acc[c] += av * ((int32_t)brow[c] - zb);
    }
}

static void product_item(void *arg, int64_t i)
{
    const product_job *j = arg;
    const qfi_matmul_geom *geo = j->geo;
    int64_t ia, ib;
    qfi_matmul_batch_offsets(geo, i, &ia, &ib);
    const int64_t M = geo->M, N = geo->N, K = geo->K;
    const int8_t *A = j->A + ia * M * K, *B = j->B + ib * K * N;
    int32_t *acc = j->acc + i * N; /* batch matrix i's row of accumulators */
    for (int64_t m = 0; m < M; m++) {
        product_row(acc, A + m * K, B, K, N, j->za, j->zb);
        /* one multiplier for every element */
        j->k->requant_run(j->rq, acc, N, 0, j->rq->m[0], NULL, j->Y, (i * M + m) * N);
    }
}

static qf_status matmul_product(const qfi_kernel_args *a)
{
    qfi_matmul_geom geo;
    QF_CHECK(qfi_matmul_geometry(a->g, a->n, &geo));
    const qf_value *av = qfi_in(a->g, a->n, 0), *bv = qfi_in(a->g, a->n, 1), *yv = qfi_out(a->g, a->n, 0);
    float m;
    qfi_requant rq;
    qfi_requant_init(&rq, &m, 1, av->scale, &bv->scale, NULL, 0.0f, 0, yv->dtype, yv->scale, yv->zero_point,
                     QF_ACT_NONE, 0.0f, 0.0f);
    product_job j = {.geo = &geo, .A = a->in[0], .B = a->in[1], .za = av->zero_point, .zb = bv->zero_point,
                     .rq = &rq, .k = qfi_cpu_i8_kernels(qfi_cpu_i8_isa()), .Y = a->out[0], .acc = a->scratch};
    const int64_t nb = qfi_numel(geo.nbatch, geo.batch);
    if (nb == 0 || geo.M == 0 || geo.N == 0) return QF_OK;
    if (!a->scratch) return qf_error(QF_ERR_USAGE, "no INT8 scratch was provided");
    qfi_parallel_for(a->threads, nb, product_item, &j);
    return QF_OK;
}

/* Rows of the tall GEMM: A's batch is contiguous and B is one matrix, Y
 * (nb*M, N) = A (nb*M, K) x B (K, N); 0 where each batch matrix is its own. */
static int64_t tall_rows(const qf_graph *g, const qf_node *n, const qfi_matmul_geom *geo)
{
    const int64_t nb = qfi_numel(geo->nbatch, geo->batch);
    const qf_value *av = qfi_in(g, n, 0), *bv = qfi_in(g, n, 1);
    return bv->ndim <= 2 && qf_value_numel(av) == nb * geo->M * geo->K ? nb * geo->M : 0;
}

static size_t matmul_scratch(const qf_graph *g, const qf_node *n, int threads)
{
    qfi_matmul_geom geo;
    if (qfi_matmul_geometry(g, n, &geo) != QF_OK) return 0;
    if (qfi_matmul_is_product(n)) return (size_t)(qfi_numel(geo.nbatch, geo.batch) * geo.N) * sizeof(int32_t);
    if (n->precision == QF_PREC_INT8) return qfi_cpu_gemm_scratch(g, n);
    return qfi_cpu_sgemm_rows_scratch(tall_rows(g, n, &geo), geo.N, geo.K, false, threads, qfi_cpu_direct_isa());
}

static qf_status matmul_run(const qfi_kernel_args *a)
{
    if (qfi_matmul_is_product(a->n)) return matmul_product(a);
    if (a->n->precision == QF_PREC_INT8) return qfi_cpu_gemm_int8(a);
    qfi_matmul_geom geo;
    QF_CHECK(qfi_matmul_geometry(a->g, a->n, &geo));
    matmul_job j = {.geo = &geo, .A = a->in[0], .B = a->in[1], .Y = a->out[0]};
    const int64_t nb = qfi_numel(geo.nbatch, geo.batch);
    if (nb == 0 || geo.M == 0 || geo.N == 0) return QF_OK;
    if (geo.K == 0) {
        memset(j.Y, 0, (size_t)(nb * geo.M * geo.N) * sizeof(float));
        return QF_OK;
    }
    const int64_t rows = tall_rows(a->g, a->n, &geo);
    if (rows > 0)
        return qfi_cpu_sgemm_rows(false, false, rows, geo.N, geo.K, 1.0f, j.A, geo.K, j.B, geo.N, 0.0f, j.Y,
                                  a->scratch, a->threads, qfi_cpu_direct_isa());
    if (geo.M > INT_MAX || geo.N > INT_MAX || geo.K > INT_MAX)
        return qf_error(QF_ERR_UNSUPPORTED, "GEMM dimensions exceed the BLAS int range");
    qfi_parallel_for(a->threads, nb, matmul_item, &j);
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_matmul = {.run = matmul_run,
                                       .scratch = matmul_scratch,
                                       .prepare = qfi_cpu_gemm_prepare,
                                       .release = qfi_cpu_int8_release};
