/* INT8 Gemm and MatMul on the CPU, and the exact int8 x int8 -> int32 matrix
 * product every INT8 kernel uses: int8 operands widened to float, OpenBLAS
 * sgemm on K-chunks short enough that float arithmetic is exact, chunks summed
 * in int32, then lib/quant_math.h's requantize epilogue per output row. */
#include "kernels.h"
#include "ops/nn.h"
#include <cblas.h>
#include <limits.h>

void qfi_cpu_igemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                   bool trans_b, float *tmp, int32_t *C)
{
    if (K == 0) {
        memset(C, 0, (size_t)(M * N) * sizeof *C);
        return;
    }
    for (int64_t k0 = 0; k0 < K; k0 += QFI_IGEMM_KCHUNK) {
        int64_t kc = K - k0 < QFI_IGEMM_KCHUNK ? K - k0 : QFI_IGEMM_KCHUNK;
        /* A (M, kc) at column k0; B (kc, N) at row k0, or stored (N, kc) at column k0 */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)kc, 1.0f,
                    A + k0, (int)lda, trans_b ? B + k0 : B + k0 * ldb, (int)ldb, 0.0f, tmp, (int)N);
        /* every element is an exact integer of magnitude <= 2^24 */
        if (k0 == 0)
            for (int64_t i = 0; i < M * N; i++) C[i] = (int32_t)tmp[i];
        else
            for (int64_t i = 0; i < M * N; i++) C[i] += (int32_t)tmp[i];
    }
}

/* The INT8 product of a Gemm or MatMul node: Y (rows, N) = X (rows, K) x op(W).
 * Gemm: W is (K,N), or (N,K) with transB; alpha and beta were folded into W and
 * the bias when the node was quantized. MatMul: X (..., M, K) is one tall
 * matrix of rows = numel/K and W is 2-D (K,N). */
typedef struct igemm_shape {
    int64_t rows, N, K, ldb;
    bool trans_b;
} igemm_shape;

static qf_status int8_shape(const qf_graph *g, const qf_node *n, igemm_shape *s)
{
    const qf_value *x = qfi_in(g, n, 0), *w = qfi_in(g, n, 1);
    if (n->op == QF_OP_GEMM) {
        const qfi_gemm_params *p = n->params;
        qfi_gemm_geom geo;
        QF_CHECK(qfi_gemm_geometry(g, n, &geo));
        if (p->trans_a) return qf_error(QF_ERR_UNSUPPORTED, "INT8 Gemm with transA");
        *s = (igemm_shape){.rows = geo.M, .N = geo.N, .K = geo.K, .ldb = w->dims[1], .trans_b = p->trans_b};
    } else {
        qfi_matmul_geom geo;
        QF_CHECK(qfi_matmul_geometry(g, n, &geo));
        if (w->ndim != 2 || x->ndim < 2)
            return qf_error(QF_ERR_UNSUPPORTED, "INT8 MatMul needs a 2-D weight and an input of 2 or more dims");
        *s = (igemm_shape){.rows = geo.K ? qf_value_numel(x) / geo.K : 0, .N = geo.N, .K = geo.K, .ldb = geo.N};
    }
    QF_CHECK(qfi_int8_operands(g, n, s->N));
    return QF_OK;
}

static size_t align64(size_t b) { return (b + 63) / 64 * 64; }

/* Scratch: m (N) | X as float (rows*K) | W as float (K*N) | tmp (rows*N) | acc (rows*N int32) */
size_t qfi_cpu_gemm_scratch(const qf_graph *g, const qf_node *n)
{
    igemm_shape s = {0};
    if (n->precision != QF_PREC_INT8 || int8_shape(g, n, &s) != QF_OK) return 0;
    return align64((size_t)s.N * 4) + align64((size_t)(s.rows * s.K) * 4) + align64((size_t)(s.K * s.N) * 4) +
           2 * align64((size_t)(s.rows * s.N) * 4);
}

qf_status qfi_cpu_gemm_int8(const qfi_kernel_args *a)
{
    const qf_graph *g = a->g;
    const qf_node *n = a->n;
    igemm_shape s = {0};
    QF_CHECK(int8_shape(g, n, &s));
    if (s.rows > INT_MAX || s.N > INT_MAX || s.K > INT_MAX)
        return qf_error(QF_ERR_UNSUPPORTED, "GEMM dimensions exceed the BLAS int range");
    /* |sum| <= K * 128 * 127 plus a bias within QFI_INT8_BIAS_LIMIT must stay inside int32 */
    if (s.K > QFI_INT8_MAX_REDUCTION)
        return qf_error(QF_ERR_UNSUPPORTED, "INT8 reduction of %lld terms could overflow int32", (long long)s.K);
    if (!a->scratch) return qf_error(QF_ERR_USAGE, "no INT8 scratch was provided");
    const qf_value *xv = qfi_in(g, n, 0), *rv = qfi_in(g, n, 4), *yv = qfi_out(g, n, 0);
    if (rv && qf_value_numel(rv) != s.rows * s.N)
        return qf_error(QF_ERR_INVALID, "residual %s does not match the output", rv->name);
    char *p = a->scratch;
    float *m = (float *)p;
    p += align64((size_t)s.N * 4);
    float *xf = (float *)p;
    p += align64((size_t)(s.rows * s.K) * 4);
    float *wf = (float *)p;
    p += align64((size_t)(s.K * s.N) * 4);
    float *tmp = (float *)p;
    p += align64((size_t)(s.rows * s.N) * 4);
    int32_t *acc = (int32_t *)p;

    const int8_t *x = a->in[0], *w = a->in[1], *res = rv ? a->in[4] : NULL;
    for (int64_t i = 0; i < s.rows * s.K; i++) xf[i] = x[i];
    for (int64_t i = 0; i < s.K * s.N; i++) wf[i] = w[i];
    qfi_requant rq;
    qfi_requant_init(&rq, m, s.N, xv->scale, a->in[3], a->in[2], rv ? rv->scale : 0.0f, yv->dtype, yv->scale, n->act,
                     n->act_lo, n->act_hi);
    qfi_cpu_igemm(s.rows, s.N, s.K, xf, s.K, wf, s.ldb, s.trans_b, tmp, acc);
    /* y is (rows, N): the channel is the column */
    const size_t es = qf_dtype_info(yv->dtype)->size;
    for (int64_t r = 0; r < s.rows; r++)
        qfi_requantize(&rq, acc + r * s.N, res ? res + r * s.N : NULL, s.N, 0, 1, (char *)a->out[0] + (size_t)(r * s.N) * es);
    return QF_OK;
}
