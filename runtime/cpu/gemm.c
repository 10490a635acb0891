/* Gemm on the CPU: Y (M,N) = beta * C broadcast into Y, then one cblas_sgemm
 * adds alpha * op(A) * op(B). */
#include "kernels.h"
#include "ops/nn.h"
#include <cblas.h>
#include <limits.h>

static qf_status gemm_run(const qfi_kernel_args *a)
{
    if (a->n->precision == QF_PREC_INT8) return qfi_cpu_gemm_int8(a);
    const qf_graph *g = a->g;
    const qf_node *n = a->n;
    const qfi_gemm_params *p = n->params;
    qfi_gemm_geom geo;
    QF_CHECK(qfi_gemm_geometry(g, n, &geo));
    const float *A = a->in[0], *B = a->in[1], *C = geo.has_c ? a->in[2] : NULL;
    float *Y = a->out[0];
    const int64_t M = geo.M, N = geo.N, K = geo.K;
    if (M == 0 || N == 0) return QF_OK;
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX)
        return qf_error(QF_ERR_UNSUPPORTED, "GEMM dimensions exceed the BLAS int range");
    float beta = 0.0f;
    /* beta == 0 ignores C entirely (as ONNX Runtime does), even if C holds inf/NaN */
    if (C && p->beta != 0.0f) {
        const qf_value *cv = qfi_in(g, n, 2);
        int64_t ydims[2] = {M, N}, st[2];
        qfi_broadcast_strides(cv->ndim, cv->dims, 2, ydims, st);
        for (int64_t i = 0; i < M; i++)          /* Y is (M,N) */
            for (int64_t j = 0; j < N; j++) Y[i * N + j] = p->beta * C[i * st[0] + j * st[1]];
        beta = 1.0f;
    }
    if (K == 0) {
        if (beta == 0.0f) memset(Y, 0, (size_t)(M * N) * sizeof *Y);
        return QF_OK;
    }
    /* A is stored (M,K) or, transposed, (K,M); B (K,N) or (N,K): ld is the stored row length */
    const int lda = (int)qfi_in(g, n, 0)->dims[1], ldb = (int)qfi_in(g, n, 1)->dims[1];
    cblas_sgemm(CblasRowMajor, p->trans_a ? CblasTrans : CblasNoTrans, p->trans_b ? CblasTrans : CblasNoTrans, (int)M,
                (int)N, (int)K, p->alpha, A, lda, B, ldb, beta, Y, (int)N);
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_gemm = {
    .run = gemm_run, .scratch = qfi_cpu_gemm_scratch, .prepare = qfi_cpu_gemm_prepare, .release = qfi_cpu_int8_release};
