/* Gemm on the CPU: Y (M,N) = beta * C broadcast into Y, then sgemm_rows.c
 * adds alpha * op(A) * op(B) so that a row's result does not depend on the
 * batch. */
#include "kernels.h"
#include "ops/nn.h"

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
    const int64_t lda = qfi_in(g, n, 0)->dims[1], ldb = qfi_in(g, n, 1)->dims[1];
    return qfi_cpu_sgemm_rows(p->trans_a, p->trans_b, M, N, K, p->alpha, A, lda, B, ldb, beta, Y, a->scratch,
                              a->threads, qfi_cpu_direct_isa());
}

/* INT8: gemm_int8.c's; FP32 (and FP16 on the f32 view): the row blocks' padding. */
static size_t gemm_scratch(const qf_graph *g, const qf_node *n, int threads)
{
    if (n->precision == QF_PREC_INT8) return qfi_cpu_gemm_scratch(g, n);
    const qfi_gemm_params *p = n->params;
    qfi_gemm_geom geo;
    if (!p || qfi_gemm_geometry(g, n, &geo) != QF_OK) return 0;
    return qfi_cpu_sgemm_rows_scratch(geo.M, geo.N, geo.K, p->trans_a, threads, qfi_cpu_direct_isa());
}

const qfi_cpu_kernel qfi_cpu_gemm = {
    .run = gemm_run, .scratch = gemm_scratch, .prepare = qfi_cpu_gemm_prepare, .release = qfi_cpu_int8_release};
