/* Matrix products on the device. cu_gemm wraps cuBLASLt for row-major
 * Y = op(A) op(B): descriptors and layouts built once per layer, several
 * heuristic candidates timed on the layer's real buffers and the fastest
 * kept; a plain tiled kernel where cuBLASLt offers nothing for the shape. The
 * INT8 epilogue of lib/quant_math.h (per-channel multiplier, bias, residual,
 * ReLU/Clip, round half to even, saturate) runs as one kernel over the int32
 * accumulators: cuBLASLt cannot apply a per-channel scale in this layout
 * (ARCHITECTURE.md). Gemm and MatMul nodes are built on these. */
#include "cuda_internal.h"

/* heuristic candidates timed per layer: 16 rather than 8 lets the int8-output
 * GEMMs with a C term (residual) find faster kernels */
#define GEMM_MAX_ALGOS 16

struct cu_gemm {
    cu_gemm_shape sh;
    bool lt;                                  /* cuBLASLt, else the fallback kernel */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ly;        /* cuBLAS's A (our B), B (our A), C = D (our Y) */
    int n_heur;
    cublasLtMatmulHeuristicResult_t heur[GEMM_MAX_ALGOS];
    int chosen;
    float ms;
    char text[128];
};

static cudaDataType ab_type(cu_gemm_kind k) { return k == CU_GEMM_F32 ? CUDA_R_32F : k == CU_GEMM_F16 ? CUDA_R_16F : CUDA_R_8I; }
static cudaDataType y_type(cu_gemm_kind k)
{
    return k == CU_GEMM_F32 ? CUDA_R_32F : k == CU_GEMM_F16 ? CUDA_R_16F : k == CU_GEMM_I8Q ? CUDA_R_8I : CUDA_R_32I;
}
/* I8Q scales and biases in float (the only int8-output epilogue cuBLASLt takes, ARCHITECTURE.md) */
static cudaDataType bias_type(cu_gemm_kind k) { return k == CU_GEMM_I8Q ? CUDA_R_32F : y_type(k); }
static bool int_mma(cu_gemm_kind k) { return k == CU_GEMM_I8 || k == CU_GEMM_I8Q; }

void cu_gemm_free(cu_gemm *gm)
{
    if (!gm) return;
    if (gm->desc) cublasLtMatmulDescDestroy(gm->desc);
    if (gm->la) cublasLtMatrixLayoutDestroy(gm->la);
    if (gm->lb) cublasLtMatrixLayoutDestroy(gm->lb);
    if (gm->ly) cublasLtMatrixLayoutDestroy(gm->ly);
    free(gm);
}

/* Builds the cuBLASLt plan; false (no error) when cuBLASLt has no algorithm. */
static qf_status lt_plan(cu_engine *c, cu_gemm *gm, bool *ok)
{
    const cu_gemm_shape *s = &gm->sh;
    *ok = false;
    /* column-major view: Y^T (cols x rows) = op(B)^T (cols x K) * op(A)^T (K x rows) */
    cublasComputeType_t ct = int_mma(s->kind) ? CUBLAS_COMPUTE_32I : CUBLAS_COMPUTE_32F;
    cudaDataType st = s->kind == CU_GEMM_I8 ? CUDA_R_32I : CUDA_R_32F;
    LT_CHECK(cublasLtMatmulDescCreate(&gm->desc, ct, st));
    cublasOperation_t opa = s->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, opb = s->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_CHECK(cublasLtMatmulDescSetAttribute(gm->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    LT_CHECK(cublasLtMatmulDescSetAttribute(gm->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    if (s->bias) epi = s->relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    else if (s->relu) epi = CUBLASLT_EPILOGUE_RELU;
    LT_CHECK(cublasLtMatmulDescSetAttribute(gm->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (s->bias) {
        cudaDataType bt = bias_type(s->kind);
        LT_CHECK(cublasLtMatmulDescSetAttribute(gm->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &s->bias, sizeof s->bias));
        LT_CHECK(cublasLtMatmulDescSetAttribute(gm->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
    }
    cudaDataType at = ab_type(s->kind), yt = y_type(s->kind);
    if (s->trans_b) LT_CHECK(cublasLtMatrixLayoutCreate(&gm->la, at, (uint64_t)s->K, (uint64_t)s->cols, s->ldb));
    else LT_CHECK(cublasLtMatrixLayoutCreate(&gm->la, at, (uint64_t)s->cols, (uint64_t)s->K, s->ldb));
    if (s->trans_a) LT_CHECK(cublasLtMatrixLayoutCreate(&gm->lb, at, (uint64_t)s->rows, (uint64_t)s->K, s->lda));
    else LT_CHECK(cublasLtMatrixLayoutCreate(&gm->lb, at, (uint64_t)s->K, (uint64_t)s->rows, s->lda));
    LT_CHECK(cublasLtMatrixLayoutCreate(&gm->ly, yt, (uint64_t)s->cols, (uint64_t)s->rows, s->ldy));
    if (s->batch > 1) {
        int32_t count = (int32_t)s->batch;
        const cublasLtMatrixLayout_t layouts[3] = {gm->la, gm->lb, gm->ly};
        const int64_t strides[3] = {s->stride_b, s->stride_a, s->stride_y}; /* cuBLAS's A is our B */
        for (int k = 0; k < 3; k++) {
            LT_CHECK(cublasLtMatrixLayoutSetAttribute(layouts[k], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
            LT_CHECK(cublasLtMatrixLayoutSetAttribute(layouts[k], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[k],
                                                      sizeof strides[k]));
        }
    }

    cublasLtMatmulPreference_t pref;
    LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = c->lt_ws_bytes ? c->lt_ws_bytes : (size_t)32 << 20;
    cublasStatus_t r = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (r == CUBLAS_STATUS_SUCCESS && s->min_align) {
        uint32_t a = s->min_align;
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a, sizeof a);
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &a, sizeof a);
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &a, sizeof a);
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &a, sizeof a);
    }
    int n = 0;
    if (r == CUBLAS_STATUS_SUCCESS)
        r = cublasLtMatmulAlgoGetHeuristic(c->lt, gm->desc, gm->la, gm->lb, gm->ly, gm->ly, pref, GEMM_MAX_ALGOS,
                                           gm->heur, &n);
    cublasLtMatmulPreferenceDestroy(pref);
    if (r == CUBLAS_STATUS_NOT_SUPPORTED || (r == CUBLAS_STATUS_SUCCESS && n == 0)) return QF_OK;
    LT_CHECK(r);
    gm->n_heur = n;
    gm->chosen = 0;
    *ok = true;
    return QF_OK;
}

qf_status cu_gemm_create(cu_engine *c, const cu_gemm_shape *sh, cu_gemm **out)
{
    *out = NULL;
    cu_gemm *gm = (cu_gemm *)qfi_calloc(1, sizeof *gm);
    if (!gm) return QF_ERR_NOMEM;
    gm->sh = *sh;
    if (sh->kind == CU_GEMM_I8 && (sh->accumulate || sh->bias || sh->relu || sh->alpha != 1.0f)) {
        free(gm);
        return qf_error(QF_ERR_USAGE, "INT8 GEMMs take their epilogue from cu_requant");
    }
    bool ok = false;
    qf_status st = getenv("QFORGE_CUDA_NOLT") ? QF_OK : lt_plan(c, gm, &ok);
    if (st != QF_OK) {
        cu_gemm_free(gm);
        return st;
    }
    gm->lt = ok;
    char batch[40] = "";
    if (sh->batch > 1) snprintf(batch, sizeof batch, ", batch of %lld", (long long)sh->batch);
    snprintf(gm->text, sizeof gm->text, "%s %lldx%lldx%lld%s: %s",
             sh->kind == CU_GEMM_F32 ? "f32" : sh->kind == CU_GEMM_F16 ? "f16" : sh->kind == CU_GEMM_I8 ? "i8" : "i8->i8",
             (long long)sh->rows, (long long)sh->cols, (long long)sh->K, batch, ok ? "cublasLt" : "fallback kernel");
    *out = gm;
    return QF_OK;
}

const char *cu_gemm_describe(const cu_gemm *gm) { return gm->text; }
bool cu_gemm_uses_lt(const cu_gemm *gm) { return gm->lt; }

/* ---- the fallback kernel: 16x16 tiles through shared memory ------------------------------ */

__device__ __forceinline__ float to_acc(float v) { return v; }
__device__ __forceinline__ float to_acc(__half v) { return __half2float(v); }
__device__ __forceinline__ int32_t to_acc(int8_t v) { return v; }

/* Float epilogue: alpha, the old Y (accumulate), bias, ReLU. */
__device__ __forceinline__ void store_y(float *y, const float *cm, float acc, const cu_gemm_shape &s, int64_t col)
{
    float v = __fmul_rn(s.alpha, acc);
    if (s.accumulate) v = __fadd_rn(v, *cm);
    if (s.bias) v = __fadd_rn(v, ((const float *)s.bias)[col]);
    *y = s.relu && !(v > 0.0f) ? 0.0f : v;
}
__device__ __forceinline__ void store_y(__half *y, const __half *cm, float acc, const cu_gemm_shape &s, int64_t col)
{
    float v = __fmul_rn(s.alpha, acc);
    if (s.accumulate) v = __fadd_rn(v, __half2float(*cm));
    if (s.bias) v = __fadd_rn(v, __half2float(((const __half *)s.bias)[col]));
    *y = __float2half_rn(s.relu && !(v > 0.0f) ? 0.0f : v);
}
__device__ __forceinline__ void store_y(int32_t *y, const int32_t *, int32_t acc, const cu_gemm_shape &, int64_t) { *y = acc; }
/* I8Q, in cuBLASLt's order: alpha * acc, + beta * C, + bias, ReLU, round half to even, saturate */
__device__ __forceinline__ void store_y(int8_t *y, const int8_t *cm, int32_t acc, const cu_gemm_shape &s, int64_t col)
{
    float v = __fmul_rn(s.alpha, __int2float_rn(acc));
    if (s.accumulate) v = __fadd_rn(v, __fmul_rn(s.beta, (float)*cm));
    if (s.bias) v = __fadd_rn(v, ((const float *)s.bias)[col]);
    if (s.relu) v = fmaxf(v, 0.0f);
    *y = (int8_t)__float2int_rn(fminf(fmaxf(v, -128.0f), 127.0f));
}

#define TILE 16

template <typename TA, typename TACC, typename TY>
__global__ void gemm_tile_kernel(const TA *A, const TA *B, const TY *C, TY *Y, cu_gemm_shape s, int64_t z0)
{
    __shared__ TACC As[TILE][TILE + 1], Bs[TILE][TILE + 1];
    /* the batch's matrix z0 + blockIdx.z */
    const int64_t z = z0 + blockIdx.z;
    A += z * s.stride_a;
    B += z * s.stride_b;
    C += z * s.stride_y;
    Y += z * s.stride_y;
    const int64_t row = blockIdx.y * (int64_t)TILE + threadIdx.y, col = blockIdx.x * (int64_t)TILE + threadIdx.x;
    TACC acc = 0;
    for (int64_t k0 = 0; k0 < s.K; k0 += TILE) {
        /* As[r][k] = op(A)(row0 + r, k0 + k); Bs[k][c] = op(B)(k0 + k, col0 + c) */
        int64_t ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
        TACC a = 0, b = 0;
        if (row < s.rows && ka < s.K) a = to_acc(s.trans_a ? A[ka * s.lda + row] : A[row * s.lda + ka]);
        if (col < s.cols && kb < s.K) b = to_acc(s.trans_b ? B[col * s.ldb + kb] : B[kb * s.ldb + col]);
        As[threadIdx.y][threadIdx.x] = a;
        Bs[threadIdx.y][threadIdx.x] = b;
        __syncthreads();
        for (int k = 0; k < TILE; k++) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row >= s.rows || col >= s.cols) return;
    store_y(Y + row * s.ldy + col, C + row * s.ldy + col, acc, s, col);
}

static qf_status fallback_run(const cu_gemm *gm, const void *A, const void *B, const void *C, void *Y, cudaStream_t st)
{
    const cu_gemm_shape &s = gm->sh;
    if (s.rows == 0 || s.cols == 0) return QF_OK;
    if ((s.rows + TILE - 1) / TILE > 65535)
        return qf_error(QF_ERR_UNSUPPORTED, "%lld rows exceed the fallback GEMM's grid", (long long)s.rows);
    /* a batch beyond the grid's 65535 in z: launches of 65535 matrices */
    const int64_t batch = s.batch > 1 ? s.batch : 1;
    for (int64_t z0 = 0; z0 < batch; z0 += 65535) {
        dim3 grid((unsigned)((s.cols + TILE - 1) / TILE), (unsigned)((s.rows + TILE - 1) / TILE),
                  (unsigned)(batch - z0 < 65535 ? batch - z0 : 65535)),
            block(TILE, TILE);
        switch (s.kind) {
        case CU_GEMM_F32:
            gemm_tile_kernel<float, float, float><<<grid, block, 0, st>>>((const float *)A, (const float *)B,
                                                                          (const float *)C, (float *)Y, s, z0);
            break;
        case CU_GEMM_F16:
            gemm_tile_kernel<__half, float, __half><<<grid, block, 0, st>>>((const __half *)A, (const __half *)B,
                                                                            (const __half *)C, (__half *)Y, s, z0);
            break;
        case CU_GEMM_I8:
            gemm_tile_kernel<int8_t, int32_t, int32_t><<<grid, block, 0, st>>>((const int8_t *)A, (const int8_t *)B,
                                                                               (const int32_t *)C, (int32_t *)Y, s, z0);
            break;
        case CU_GEMM_I8Q:
            gemm_tile_kernel<int8_t, int32_t, int8_t><<<grid, block, 0, st>>>((const int8_t *)A, (const int8_t *)B,
                                                                              (const int8_t *)C, (int8_t *)Y, s, z0);
            break;
        }
        CU_LAUNCHED();
    }
    return QF_OK;
}

/* ---- running and tuning -------------------------------------------------------------------- */

static cublasStatus_t lt_run(cu_engine *c, const cu_gemm *gm, int algo, const void *A, const void *B, const void *C,
                             void *Y, cudaStream_t st)
{
    const cu_gemm_shape &s = gm->sh;
    float alpha = s.alpha, beta = s.accumulate ? (s.kind == CU_GEMM_I8Q ? s.beta : 1.0f) : 0.0f;
    int32_t ialpha = 1, ibeta = 0;
    const void *pa = s.kind == CU_GEMM_I8 ? (const void *)&ialpha : (const void *)&alpha;
    const void *pb = s.kind == CU_GEMM_I8 ? (const void *)&ibeta : (const void *)&beta;
    return cublasLtMatmul(c->lt, gm->desc, pa, B, gm->la, A, gm->lb, pb, C, gm->ly, Y, gm->ly, &gm->heur[algo].algo,
                          c->lt_ws, c->lt_ws_bytes, st);
}

qf_status cu_gemm_run(cu_engine *c, const cu_gemm *gm, const void *A, const void *B, const void *C, void *Y,
                      cudaStream_t st)
{
    if (gm->sh.rows == 0 || gm->sh.cols == 0) return QF_OK;
    if (!C) C = Y;
    if (!gm->lt || gm->sh.K == 0) {
        if (gm->sh.K == 0 && !gm->sh.accumulate && gm->sh.kind == CU_GEMM_I8) {
            CU_CHECK(cudaMemset2DAsync(Y, (size_t)gm->sh.ldy * 4, 0, (size_t)gm->sh.cols * 4, (size_t)gm->sh.rows, st));
            return QF_OK;
        }
        return fallback_run(gm, A, B, C, Y, st);
    }
    LT_CHECK(lt_run(c, gm, gm->chosen, A, B, C, Y, st));
    return QF_OK;
}

/* The tactic-cache key of a GEMM: everything that shapes its heuristic list. */
static void gemm_key(const cu_gemm *gm, char *key, size_t len)
{
    const cu_gemm_shape *s = &gm->sh;
    snprintf(key, len, "gemm:k%d:%lldx%lldx%lld:ld%lld,%lld,%lld:t%d%d:b%d:r%d:a%d:al%u:n%d:x%lld,%lld,%lld,%lld",
             (int)s->kind, (long long)s->rows, (long long)s->cols, (long long)s->K, (long long)s->lda, (long long)s->ldb,
             (long long)s->ldy, s->trans_a, s->trans_b, s->bias != NULL, s->relu, s->accumulate, s->min_align, gm->n_heur,
             (long long)s->batch, (long long)s->stride_a, (long long)s->stride_b, (long long)s->stride_y);
}

static bool candidate_usable(const cu_engine *c, const cu_gemm *gm, int a)
{
    return a >= 0 && a < gm->n_heur && gm->heur[a].state == CUBLAS_STATUS_SUCCESS &&
           gm->heur[a].workspaceSize <= c->lt_ws_bytes;
}

qf_status cu_gemm_tune(cu_engine *c, cu_gemm *gm, const void *A, const void *B, void *Y)
{
    if (!gm->lt || gm->n_heur == 0) return QF_OK;
    char key[256];
    gemm_key(gm, key, sizeof key);
    int cached;
    if (qfi_tactic_cache_get(c->tactics, key, &cached) && (cached == -1 || candidate_usable(c, gm, cached))) {
        size_t len = strlen(gm->text);
        if (cached < 0) {
            gm->lt = false;
            snprintf(gm->text + len, sizeof gm->text - len, " -> fallback kernel (cached)");
        } else {
            gm->chosen = cached;
            snprintf(gm->text + len, sizeof gm->text - len, " (candidate %d of %d, cached)", cached, gm->n_heur);
        }
        return QF_OK;
    }
    cudaEvent_t e0, e1;
    CU_CHECK(cudaEventCreate(&e0));
    CU_CHECK(cudaEventCreate(&e1));
    int best = -1;
    float best_ms = 0.0f;
    for (int a = 0; a < gm->n_heur; a++) {
        if (!candidate_usable(c, gm, a)) continue;
        /* a candidate that fails to run is skipped, not an error */
        if (lt_run(c, gm, a, A, B, Y, Y, c->stream) != CUBLAS_STATUS_SUCCESS) {
            (void)cudaGetLastError();
            continue;
        }
        const int reps = 5;
        cudaEventRecord(e0, c->stream);
        bool ok = true;
        for (int r = 0; r < reps && ok; r++) ok = lt_run(c, gm, a, A, B, Y, Y, c->stream) == CUBLAS_STATUS_SUCCESS;
        cudaEventRecord(e1, c->stream);
        cudaError_t err = cudaEventSynchronize(e1);
        if (err != cudaSuccess) {
            cudaEventDestroy(e0);
            cudaEventDestroy(e1);
            return cu_fail(err, "cudaEventSynchronize (GEMM tuning)", __FILE__, __LINE__);
        }
        float ms = 0.0f;
        cudaEventElapsedTime(&ms, e0, e1);
        ms /= reps;
        if (ok && (best < 0 || ms < best_ms)) {
            best = a;
            best_ms = ms;
        }
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    qfi_tactic_cache_put(c->tactics, key, best);
    if (best < 0) {
        gm->lt = false; /* nothing ran: the fallback kernel computes it */
        snprintf(gm->text + strlen(gm->text), sizeof gm->text - strlen(gm->text), " -> fallback kernel");
        return QF_OK;
    }
    gm->chosen = best;
    gm->ms = best_ms;
    size_t len = strlen(gm->text);
    snprintf(gm->text + len, sizeof gm->text - len, " (candidate %d of %d, %.3f ms)", best, gm->n_heur, best_ms);
    return QF_OK;
}

/* ---- the INT8 epilogue ------------------------------------------------------------------------ */

/* ACT: the smooth activation's code compiled in (cu_requant_launch picks by q.act). */
template <bool ACT>
__global__ void requant_kernel(qfi_requant q, const int32_t *acc, int64_t rows, int64_t cols, int64_t ld,
                               const int8_t *res, void *y)
{
    const int64_t n = rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / cols, ch = i - r * cols;
        qfi_requant_elem_at(&q, y, i, acc[r * ld + ch], ch, res, ACT);
    }
}

/* Four channels a thread: int4 accumulators in, char4 out (cols % 4 == 0,
 * ld % 4 == 0). A thread keeps one channel quad (blockIdx.x, threadIdx.x)
 * with its multipliers and biases in registers and walks a stride of rows
 * (blockIdx.y, threadIdx.y), so that an output costs no index division and
 * no load but its accumulator's; a warp's 32 quads are 512 contiguous bytes
 * of a row. INT8 b256 against the flat form (a division and eight
 * parameter loads a quad; session 46, H100, 2 rounds): EfficientNet-V2-S
 * +1.6 %, EfficientNet-B0 +1.2 %, ViT-B/16 +1.6 %. FAST: q.act is SiLU or
 * Sigmoid (FAST_SIGMOID_SILU) or a GELU (FAST_GELU), whose four levels are
 * found by lib/quant_math.h's fast forms without a branch, then by the
 * exact form where one of them is not sure (ViT's and ConvNeXt's fc1 and
 * EfficientNet's wide SiLU convs run here). */
enum { FAST_NONE, FAST_SIGMOID_SILU, FAST_GELU };
constexpr int REQUANT_ROWS = 8; /* threadIdx.y */
template <bool ACT, int FAST>
__global__ void __launch_bounds__(32 * REQUANT_ROWS)
    requant_i8x4_kernel(qfi_requant q, const int4 *acc, int64_t rows, int cols4, int64_t ld4, const char4 *res, char4 *y)
{
    const int c4 = blockIdx.x * 32 + threadIdx.x;
    if (c4 >= cols4) return;
    const int ch = c4 * 4;
    float m[4];
    int32_t b[4];
#pragma unroll
    for (int k = 0; k < 4; k++) m[k] = q.m[ch + k], b[k] = q.bias ? q.bias[ch + k] : 0;
    for (int64_t r = blockIdx.y * (int64_t)REQUANT_ROWS + threadIdx.y; r < rows; r += (int64_t)gridDim.y * REQUANT_ROWS) {
        const int4 a4 = acc[r * ld4 + c4];
        const char4 rv = res ? res[r * cols4 + c4] : make_char4(0, 0, 0, 0);
        const int32_t a[4] = {a4.x + b[0], a4.y + b[1], a4.z + b[2], a4.w + b[3]};
        const int8_t rr[4] = {rv.x, rv.y, rv.z, rv.w};
        int8_t out[4];
        if constexpr (FAST != FAST_NONE) {
            float v[4];
            bool sure = true;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float lin = qfi_requant_linear(&q, qfi_i2f(a[k]), m[k], res, qfi_requant_residual(&q, rr[k]));
                sure &= FAST == FAST_SIGMOID_SILU ? qfi_sigmoid_level_fast(q.act == QF_ACT_SILU, lin, q.act_s, q.lo, q.hi, &v[k])
                                                  : qfi_gelu_level_fast(q.act == QF_ACT_GELU_TANH, lin, q.act_s, q.lo, q.hi, &v[k]);
            }
            if (!sure) /* rare: the exact form where a level is not sure */
#pragma unroll
                for (int k = 0; k < 4; k++)
                    v[k] = qfi_requant_smooth_i8_value(&q, qfi_i2f(a[k]), m[k], res, qfi_requant_residual(&q, rr[k]));
#pragma unroll
            for (int k = 0; k < 4; k++) out[k] = qfi_requant_level(&q, v[k]);
        } else {
#pragma unroll
            for (int k = 0; k < 4; k++)
                out[k] = qfi_requant_level(&q, qfi_requant_value_at(&q, qfi_i2f(a[k]), m[k], res, qfi_requant_residual(&q, rr[k]), ACT));
        }
        y[r * cols4 + c4] = make_char4(out[0], out[1], out[2], out[3]);
    }
}

static void launch_requant_i8x4(cudaStream_t s, const cu_requant *rq, const int32_t *acc, int64_t rows, int64_t cols,
                                int64_t ld, const int8_t *res, void *y)
{
    const bool act = rq->act != QF_ACT_NONE;
    const bool sig = rq->act == QF_ACT_SILU || rq->act == QF_ACT_SIGMOID;
    const bool fast = qfi_act_has_fast_level(rq->act);
    const int c4 = (int)(cols / 4);
    const int64_t l4 = ld / 4;
    /* about eight blocks of 256 threads an SM, each with rows to walk */
    const unsigned bx = (unsigned)((c4 + 31) / 32);
    const int64_t blocks = 8 * (int64_t)cu_sm_count();
    int64_t by = (blocks + bx - 1) / bx, row_groups = (rows + REQUANT_ROWS - 1) / REQUANT_ROWS;
    if (by > row_groups) by = row_groups;
    if (by > 65535) by = 65535;
    const dim3 grid(bx, (unsigned)by), block(32, REQUANT_ROWS);
    const int4 *a = (const int4 *)acc;
    const char4 *r4 = (const char4 *)res;
    char4 *y4 = (char4 *)y;
    if (sig) requant_i8x4_kernel<true, FAST_SIGMOID_SILU><<<grid, block, 0, s>>>(*rq, a, rows, c4, l4, r4, y4);
    else if (fast) requant_i8x4_kernel<true, FAST_GELU><<<grid, block, 0, s>>>(*rq, a, rows, c4, l4, r4, y4);
    else if (act) requant_i8x4_kernel<true, FAST_NONE><<<grid, block, 0, s>>>(*rq, a, rows, c4, l4, r4, y4);
    else requant_i8x4_kernel<false, FAST_NONE><<<grid, block, 0, s>>>(*rq, a, rows, c4, l4, r4, y4);
}

qf_status cu_requant_launch(cudaStream_t s, const cu_requant *rq, const int32_t *acc, int64_t rows, int64_t cols,
                            int64_t ld, const int8_t *res, void *y)
{
    if (!rows || !cols) return QF_OK;
    const bool act = rq->act != QF_ACT_NONE;
    if (rq->out == QF_I8 && cols % 4 == 0 && ld % 4 == 0 && cols / 4 <= INT32_MAX) {
        launch_requant_i8x4(s, rq, acc, rows, cols, ld, res, y);
    } else {
        unsigned b = cu_blocks(rows * cols, 256);
        if (b > 65536) b = 65536;
        if (act) requant_kernel<true><<<b, 256, 0, s>>>(*rq, acc, rows, cols, ld, res, y);
        else requant_kernel<false><<<b, 256, 0, s>>>(*rq, acc, rows, cols, ld, res, y);
    }
    CU_LAUNCHED();
    return QF_OK;
}

qf_status cu_requant_setup(cu_engine *c, const qf_node *n, int64_t channels, cu_requant *rq)
{
    const qf_graph *g = c->g;
    QF_CHECK(qfi_int8_operands(g, n, channels));
    const qf_value *xv = qfi_in(g, n, 0), *bv = qfi_in(g, n, 2), *sv = qfi_in(g, n, 3), *rv = qfi_in(g, n, 4);
    const qf_value *yv = qfi_out(g, n, 0);
    float *m = (float *)qfi_calloc((size_t)channels + 1, sizeof *m);
    if (!m) return QF_ERR_NOMEM;
    /* the one place m, m_r and the bounds are computed: the CPU engine's */
    qfi_requant_init(rq, m, channels, xv->scale, (const float *)sv->data, bv ? (const int32_t *)bv->data : NULL,
                     rv ? rv->scale : 0.0f, rv ? rv->zero_point : 0, yv->dtype, yv->scale, yv->zero_point, n->act,
                     n->act_lo, n->act_hi);
    rq->m = NULL, rq->bias = NULL; /* the device copies, below */
    rq->z_in = xv->zero_point;
    rq->m0 = m[0];
    rq->uniform = channels > 0;
    for (int64_t k = 1; k < channels; k++) rq->uniform &= m[k] == m[0];
    qf_status st = cu_upload(c, m, (size_t)channels * sizeof *m, (void **)&rq->m);
    free(m);
    QF_CHECK(st);
    if (bv) QF_CHECK(cu_upload(c, bv->data, (size_t)channels * sizeof(int32_t), (void **)&rq->bias));
    return QF_OK;
}

/* ---- Gemm and MatMul nodes ------------------------------------------------------------------- */

typedef struct mm_state {
    cu_gemm *gm;
    bool int8;
    /* INT8: W as (N, K) int8, accumulators [rows][ldacc] in CU_SCR_ACC */
    void *w;
    int64_t ldacc, rows, N;
    cu_requant rq;
    /* float Gemm: Y = beta * C broadcast first (C not a plain bias row) */
    bool fill_c;
    float beta;
    int64_t c_st0, c_st1;
    bool relu_pass;             /* a fused Relu the GEMM epilogue could not take */
    /* float MatMul with batch dims: the batch matrices in `outer` strided
     * batches of gm's batch count each (one where every operand is whole) */
    qfi_matmul_geom geo;
    bool batched;
    int64_t nb, outer;
    /* INT8 product of two activations (qfi_matmul_is_product): B transposed
     * into CU_SCR_COL as nb_b matrices (ldacc, K), accumulators [nb*M][ldacc]
     * in CU_SCR_ACC, then the requantize kernel over all of them */
    bool product;
    int64_t nb_b;
    /* INT8 with a constant weight: the implicit-GEMM kernel as a 1x1 conv
     * over the rows (requantized in its epilogue, no int32 round trip
     * through memory), timed against cuBLASLt + requantize at tune time */
    cu_igemm *ig;
    int use_ig;         /* 0: cuBLASLt path; v + 1: ig's variant v */
} mm_state;

/* The most batch matrices, a trailing run of the batch dims, over which both
 * A and B step one whole matrix at a time, so that one strided-batched GEMM
 * computes them (broadcast dims break the run; the rest loop over it). */
static int64_t strided_run(const qfi_matmul_geom *geo)
{
    for (int d0 = 0; d0 < geo->nbatch; d0++) {
        int64_t inner = qfi_numel(geo->nbatch - d0, geo->batch + d0), a0, b0;
        qfi_matmul_batch_offsets(geo, 0, &a0, &b0);
        bool linear = true;
        for (int64_t i = 1; i < inner && linear; i++) {
            int64_t ia, ib;
            qfi_matmul_batch_offsets(geo, i, &ia, &ib);
            linear = ia == a0 + i && ib == b0 + i;
        }
        if (linear) return inner;
    }
    return 1;
}

static void mm_free(void *p)
{
    mm_state *st = (mm_state *)p;
    cu_gemm_free(st->gm);
    cu_igemm_free(st->ig);
    free(st);
}

static cu_gemm_kind kind_of(qf_dtype t) { return t == QF_F16 ? CU_GEMM_F16 : CU_GEMM_F32; }

/* INT8 Gemm/MatMul: X (rows, K) int8 x W^T with W reordered to (N, K). */
static qf_status mm_prepare_int8(cu_engine *c, cu_layer *L, mm_state *st)
{
    const qf_graph *g = c->g;
    const qf_node *n = L->n;
    const qf_value *x = qfi_in(g, n, 0), *w = qfi_in(g, n, 1);
    int64_t K, N;
    bool trans_b = false;
    if (n->op == QF_OP_GEMM) {
        const qfi_gemm_params *p = (const qfi_gemm_params *)n->params;
        qfi_gemm_geom geo;
        QF_CHECK(qfi_gemm_geometry(g, n, &geo));
        if (p->trans_a) return qf_error(QF_ERR_UNSUPPORTED, "INT8 Gemm with transA");
        K = geo.K, N = geo.N, trans_b = p->trans_b;
        st->rows = geo.M;
    } else {
        qfi_matmul_geom geo;
        QF_CHECK(qfi_matmul_geometry(g, n, &geo));
        if (w->ndim != 2 || x->ndim < 2)
            return qf_error(QF_ERR_UNSUPPORTED, "INT8 MatMul needs a 2-D weight and an input of 2 or more dims");
        K = geo.K, N = geo.N;
        st->rows = K ? qf_value_numel(x) / K : 0;
    }
    if (K > QFI_INT8_MAX_REDUCTION) return qf_error(QF_ERR_UNSUPPORTED, "INT8 reduction of %lld terms could overflow int32", (long long)K);
    QF_CHECK(cu_requant_setup(c, n, N, &st->rq));
    st->int8 = true;
    st->N = N;
    st->ldacc = (N + 3) / 4 * 4; /* IMMA wants 16-byte rows of int32 */
    int8_t *wt = (int8_t *)qfi_calloc((size_t)(st->ldacc * K) + 1, 1);
    if (!wt) return QF_ERR_NOMEM;
    const int8_t *wsrc = (const int8_t *)w->data;
    for (int64_t j = 0; j < N; j++)   /* wt is (ldacc, K): row j = output channel j, zero rows after N */
        for (int64_t k = 0; k < K; k++) wt[j * K + k] = trans_b ? wsrc[j * K + k] : wsrc[k * N + j];
    qf_status s = cu_upload(c, wt, (size_t)(st->ldacc * K), &st->w);
    /* the same product as a 1x1 conv of `rows` images of 1x1 pixels of K
     * channels: wt's first N rows are its (M, C, 1, 1) weights */
    cu_conv_geo cg = {st->rows, K, 1, 1, N, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1};
    if (s == QF_OK && st->rows > 0 &&
        (cu_igemm_fits(&cg, st->rq.out, st->rq.act) || cu_igemm_tma_fits(c, &cg, st->rq.out, st->rq.act)) &&
        !cu_tactic_forced("lt")) {
        const qf_value *bv = qfi_in(g, n, 2);
        s = cu_igemm_create(c, &cg, wt, bv ? (const int32_t *)bv->data : NULL, &st->rq, &st->ig);
        if (s == QF_OK) cu_need_scratch(c, CU_SCR_COL, cu_igemm_scratch(st->ig));
    }
    free(wt);
    QF_CHECK(s);
    cu_gemm_shape sh;
    memset(&sh, 0, sizeof sh);
    sh.kind = CU_GEMM_I8;
    sh.rows = st->rows, sh.cols = st->ldacc, sh.K = K;
    sh.lda = K, sh.ldb = K, sh.ldy = st->ldacc;
    sh.trans_b = true;
    sh.alpha = 1.0f;
    /* activations start on 256-byte boundaries; rows of K bytes keep 4-byte alignment at best */
    sh.min_align = K % 16 == 0 ? 16 : K % 4 == 0 ? 4 : 1;
    QF_CHECK(cu_gemm_create(c, &sh, &st->gm));
    cu_need_scratch(c, CU_SCR_ACC, (size_t)(st->rows * st->ldacc) * 4);
    if (x->ndim == 4) cu_need_input_as(c, L, 0, CU_LOGICAL);
    return QF_OK;
}

/* INT8 MatMul of two activations (attention's QK^T and AV under quant
 * --int8-attention): int8 x int8 -> int32 in one strided-batched GEMM per
 * run of whole matrices, as the float path batches. cuBLASLt's int8 (IMMA)
 * GEMMs take both operands K-major, the "TN" form the INT8 layers' weights
 * [N][K] and patches [P][K] have (ARCHITECTURE.md's measured facts), so B is
 * transposed into scratch as (N, K) matrices padded to ldacc rows of zeros;
 * where cuBLASLt still offers nothing (K not a multiple of 4, say) cu_gemm's
 * own kernel computes the same exact sums. The requantize kernel then applies lib/quant_math.h's epilogue
 * with the one multiplier s_a * s_b / s_out, as the CPU engine does. */
static qf_status mm_prepare_product(cu_engine *c, cu_layer *L, mm_state *st)
{
    const qf_graph *g = c->g;
    const qf_node *n = L->n;
    QF_CHECK(qfi_matmul_geometry(g, n, &st->geo));
    const qfi_matmul_geom *geo = &st->geo;
    const qf_value *a = qfi_in(g, n, 0), *b = qfi_in(g, n, 1), *y = qfi_out(g, n, 0);
    if (geo->K == 0 || geo->N > ((int64_t)1 << 30) || geo->M > (int64_t)65535 * 16) /* the fallback grid's rows */
        return qf_error(QF_ERR_UNSUPPORTED, "an INT8 product of M = %lld, N = %lld, K = %lld", (long long)geo->M,
                        (long long)geo->N, (long long)geo->K);
    st->int8 = st->product = st->batched = true;
    st->nb = qfi_numel(geo->nbatch, geo->batch);
    st->nb_b = geo->N ? qf_value_numel(b) / (geo->K * geo->N) : 0;
    st->rows = st->nb * geo->M;
    st->N = geo->N;
    st->ldacc = (geo->N + 3) / 4 * 4; /* IMMA wants 16-byte rows of int32 */
    /* the epilogue: one multiplier, repeated per column for the requantize kernel */
    float *sw = (float *)qfi_calloc((size_t)geo->N + 1, sizeof *sw), *m = (float *)qfi_calloc((size_t)geo->N + 1, sizeof *m);
    if (!sw || !m) {
        free(sw), free(m);
        return QF_ERR_NOMEM;
    }
    for (int64_t k = 0; k < geo->N; k++) sw[k] = b->scale;
    qfi_requant_init(&st->rq, m, geo->N, a->scale, sw, NULL, 0.0f, 0, y->dtype, y->scale, y->zero_point, QF_ACT_NONE,
                     0.0f, 0.0f);
    st->rq.m = NULL, st->rq.bias = NULL;
    st->rq.m0 = m[0];
    st->rq.uniform = true;
    qf_status s = cu_upload(c, m, (size_t)geo->N * sizeof *m, (void **)&st->rq.m);
    free(sw), free(m);
    QF_CHECK(s);
    if (st->nb * geo->M == 0 || geo->N == 0) return QF_OK;
    cu_gemm_shape sh;
    memset(&sh, 0, sizeof sh);
    sh.kind = CU_GEMM_I8;
    sh.rows = geo->M, sh.cols = st->ldacc, sh.K = geo->K;
    sh.lda = geo->K, sh.ldb = geo->K, sh.ldy = st->ldacc;
    sh.trans_b = true;
    sh.alpha = 1.0f;
    sh.batch = strided_run(geo);
    sh.stride_a = geo->M * geo->K, sh.stride_b = st->ldacc * geo->K, sh.stride_y = geo->M * st->ldacc;
    st->outer = st->nb / sh.batch;
    /* every matrix starts at a multiple of its size from a 256-byte boundary */
    uint32_t al = 16;
    while (al > 1 && (sh.stride_a % al || geo->K % al)) al /= 2;
    sh.min_align = al;
    cu_need_scratch(c, CU_SCR_COL, (size_t)(st->nb_b * st->ldacc * geo->K));
    cu_need_scratch(c, CU_SCR_ACC, (size_t)(st->rows * st->ldacc) * 4);
    if (a->ndim == 4) cu_need_input_as(c, L, 0, CU_LOGICAL);
    if (b->ndim == 4) cu_need_input_as(c, L, 1, CU_LOGICAL);
    return cu_gemm_create(c, &sh, &st->gm);
}

/* bt[j] (ld, K) = b[j] (K, N) transposed, rows N..ld zero, for the nb
 * matrices j: 32x32 tiles through shared memory, the grid's z striding over j. */
__global__ void transpose_b_kernel(const int8_t *b, int8_t *bt, int64_t nb, int64_t K, int64_t N, int64_t ld)
{
    __shared__ int8_t t[32][33];
    const int64_t k0 = blockIdx.y * 32, n0 = blockIdx.x * 32;
    for (int64_t j = blockIdx.z; j < nb; j += gridDim.z) {
        const int8_t *bj = b + j * K * N;
        int8_t *btj = bt + j * ld * K;
        for (int r = threadIdx.y; r < 32; r += blockDim.y) { /* read rows k of b, columns n */
            const int64_t k = k0 + r, col = n0 + threadIdx.x;
            t[r][threadIdx.x] = k < K && col < N ? bj[k * N + col] : 0;
        }
        __syncthreads();
        for (int r = threadIdx.y; r < 32; r += blockDim.y) { /* write rows n of bt, columns k */
            const int64_t col = n0 + r, k = k0 + threadIdx.x;
            if (col < ld && k < K) btj[col * K + k] = t[threadIdx.x][r];
        }
        __syncthreads();
    }
}

static qf_status transpose_b(cudaStream_t s, const mm_state *st, const void *B, void *Bt)
{
    const int64_t K = st->geo.K, ld = st->ldacc;
    /* (K and ld/32 are within the grid: K <= QFI_INT8_PRODUCT_MAX_K, and N by mm_prepare_product) */
    dim3 grid((unsigned)((ld + 31) / 32), (unsigned)((K + 31) / 32), (unsigned)(st->nb_b < 65535 ? st->nb_b : 65535)),
        block(32, 8);
    transpose_b_kernel<<<grid, block, 0, s>>>((const int8_t *)B, (int8_t *)Bt, st->nb_b, K, st->geo.N, ld);
    CU_LAUNCHED();
    return QF_OK;
}

/* Float operands of one dtype (INT8 ones are checked by the INT8 path). */
static qf_status mm_check(const qf_graph *g, const qf_node *n)
{
    if (qfi_matmul_is_product(n)) {
        /* the sums of (a - z_a)(b - z_b) would need A's row and B's column
         * sums beside the GEMM: such products run on the host */
        for (int k = 0; k < 2; k++) {
            const qf_value *v = qfi_in(g, n, k);
            if (v->zero_point != 0)
                return qf_error(QF_ERR_UNSUPPORTED, "INT8 product of an input with a zero point (%s: %d)", v->name,
                                (int)v->zero_point);
        }
    }
    if (n->precision == QF_PREC_INT8) return QF_OK;
    const qf_value *a = qfi_in(g, n, 0), *b = qfi_in(g, n, 1), *y = qfi_out(g, n, 0);
    if ((a->dtype != QF_F32 && a->dtype != QF_F16) || b->dtype != a->dtype || y->dtype != a->dtype)
        return qf_error(QF_ERR_UNSUPPORTED, "operands of dtypes %s x %s -> %s", qf_dtype_info(a->dtype)->name,
                        qf_dtype_info(b->dtype)->name, qf_dtype_info(y->dtype)->name);
    return QF_OK;
}

static qf_status mm_prepare(cu_engine *c, cu_layer *L)
{
    const qf_graph *g = c->g;
    const qf_node *n = L->n;
    mm_state *st = (mm_state *)qfi_calloc(1, sizeof *st);
    if (!st) return QF_ERR_NOMEM;
    L->state = st;
    L->free_state = mm_free;
    if (qfi_matmul_is_product(n)) return mm_prepare_product(c, L, st);
    if (n->precision == QF_PREC_INT8) return mm_prepare_int8(c, L, st);
    const qf_graph *gg = cu_geo_graph(c, n);
    const qf_value *a = qfi_in(g, n, 0), *b = qfi_in(g, n, 1);
    const qf_value *y = &g->values[cu_out_value(L, 0)];
    const size_t es = qf_dtype_info(a->dtype)->size;
    cu_gemm_shape sh;
    memset(&sh, 0, sizeof sh);
    sh.kind = kind_of(a->dtype);
    sh.alpha = 1.0f;
    sh.relu = L->relu;
    void *p;
    QF_CHECK(cu_value_ptr(c, n->in[0], &p));
    QF_CHECK(cu_value_ptr(c, n->in[1], &p));
    if (n->op == QF_OP_GEMM) {
        const qfi_gemm_params *gp = (const qfi_gemm_params *)n->params;
        qfi_gemm_geom geo;
        QF_CHECK(qfi_gemm_geometry(gg, n, &geo));
        sh.rows = geo.M, sh.cols = geo.N, sh.K = geo.K;
        sh.trans_a = gp->trans_a, sh.trans_b = gp->trans_b;
        sh.lda = a->dims[1], sh.ldb = b->dims[1], sh.ldy = geo.N;
        sh.alpha = gp->alpha;
        const qf_value *cv = geo.has_c ? qfi_in(g, n, 2) : NULL;
        if (cv && gp->beta != 0.0f) {
            if (cv->dtype != y->dtype)
                return qf_error(QF_ERR_UNSUPPORTED, "C of dtype %s", qf_dtype_info(cv->dtype)->name);
            void *cp;
            QF_CHECK(cu_value_ptr(c, n->in[2], &cp));
            bool row = qf_value_numel(cv) == geo.N && (cv->ndim == 1 || (cv->ndim == 2 && cv->dims[0] == 1));
            if (row && gp->beta == 1.0f && (cv->flags & QF_VALUE_CONST)) {
                sh.bias = cp;
            } else {
                int64_t ydims[2] = {geo.M, geo.N}, cs[2];
                qfi_broadcast_strides(cv->ndim, cv->dims, 2, ydims, cs);
                st->fill_c = true;
                st->beta = gp->beta;
                st->c_st0 = cs[0], st->c_st1 = cs[1];
                sh.accumulate = true;
                if (sh.relu) { /* cuBLASLt's ReLU epilogue is not trusted to follow the C term: separate pass */
                    sh.relu = false;
                    st->relu_pass = true;
                }
            }
        }
        sh.min_align = (uint32_t)((sh.lda * es) % 16 == 0 && (sh.ldb * es) % 16 == 0 && (sh.ldy * es) % 16 == 0 ? 16 : es);
    } else {
        QF_CHECK(qfi_matmul_geometry(gg, n, &st->geo));
        const qfi_matmul_geom *geo = &st->geo;
        st->nb = qfi_numel(geo->nbatch, geo->batch);
        bool b_shared = true, a_full = qf_value_numel(a) == st->nb * geo->M * geo->K;
        for (int d = 0; d < geo->nbatch; d++) b_shared &= geo->b_stride[d] == 0;
        sh.cols = geo->N, sh.K = geo->K;
        sh.lda = geo->K, sh.ldb = geo->N, sh.ldy = geo->N;
        if (b_shared && a_full) {
            sh.rows = st->nb * geo->M; /* one GEMM over A's stacked rows */
        } else {
            sh.rows = geo->M;
            st->batched = true;
            sh.batch = strided_run(geo);
            sh.stride_a = geo->M * geo->K, sh.stride_b = geo->K * geo->N, sh.stride_y = geo->M * geo->N;
            st->outer = st->nb / sh.batch;
        }
        /* batch matrices start at multiples of their sizes */
        size_t al = 256;
        size_t offs[3] = {(size_t)(geo->M * geo->K) * es, (size_t)(geo->K * geo->N) * es, (size_t)(geo->M * geo->N) * es};
        for (int k = 0; k < 3 && st->batched; k++)
            while (al > es && offs[k] % al) al /= 2;
        for (int k = 0; k < 3; k++) {
            size_t ld = (size_t)(k == 0 ? sh.lda : k == 1 ? sh.ldb : sh.ldy) * es;
            while (al > es && ld % al) al /= 2;
        }
        sh.min_align = (uint32_t)al;
        if (a->ndim == 4) cu_need_input_as(c, L, 0, CU_LOGICAL);
        if (b->ndim == 4) cu_need_input_as(c, L, 1, CU_LOGICAL);
    }
    if (sh.rows * sh.cols == 0) return QF_OK;
    return cu_gemm_create(c, &sh, &st->gm);
}

/* Y (M, N) = beta * C broadcast (strides cs0, cs1). */
template <typename T>
__global__ void fill_c_kernel(T *y, const T *cm, int64_t M, int64_t N, int64_t cs0, int64_t cs1, float beta)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < M * N; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / N, col = i - r * N;
        y[i] = (T)__fmul_rn(beta, to_acc(cm[r * cs0 + col * cs1]));
    }
}

__global__ void relu_inplace_kernel(void *y, cu_elem ye, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = cu_load(y, ye, i);
        cu_store(y, ye, i, v > 0.0f ? v : 0.0f);
    }
}

/* The buffers a Gemm/MatMul reads and writes (INT8: Y is the accumulator scratch). */
static qf_status mm_buffers(cu_engine *c, cu_layer *L, cudaStream_t s, const void **A, const void **B, void **Y)
{
    const mm_state *st = (const mm_state *)L->state;
    if (st->product) { /* B: its transpose, made by transpose_b */
        QF_CHECK(cu_input_as(c, L, 0, CU_LOGICAL, s, A));
        *B = c->scratch[CU_SCR_COL];
        *Y = c->scratch[CU_SCR_ACC];
        return QF_OK;
    }
    if (st->int8) {
        QF_CHECK(cu_input_as(c, L, 0, CU_LOGICAL, s, A));
        *B = st->w;
        *Y = c->scratch[CU_SCR_ACC];
        return QF_OK;
    }
    QF_CHECK(cu_input_as(c, L, 0, CU_LOGICAL, s, A));
    QF_CHECK(cu_input_as(c, L, 1, CU_LOGICAL, s, B));
    return cu_value_ptr(c, cu_out_value(L, 0), Y);
}

static qf_status mm_tune(cu_engine *c, cu_layer *L)
{
    mm_state *st = (mm_state *)L->state;
    if (!st->gm) return QF_OK;
    const void *A, *B;
    void *Y;
    QF_CHECK(mm_buffers(c, L, c->stream, &A, &B, &Y));
    if (st->product) { /* the candidates run on B's transpose */
        const void *b;
        QF_CHECK(cu_input_as(c, L, 1, CU_LOGICAL, c->stream, &b));
        QF_CHECK(transpose_b(c->stream, st, b, (void *)B));
    }
    QF_CHECK(cu_gemm_tune(c, st->gm, A, B, Y));
    char how[1024] = "";
    if (st->ig) {
        char key[160];
        snprintf(key, sizeof key, "mm:i8:%lld,%lld,%lld:r%d:l%d", (long long)st->rows, (long long)st->gm->sh.K,
                 (long long)st->N, L->n->n_in > 4 && L->n->in[4] >= 0, st->rq.lo == 0.0f);
        if (st->rq.out == QF_F16) snprintf(key + strlen(key), sizeof key - strlen(key), ":o16"); /* as conv.cu's */
        QF_CHECK(cu_igemm_choose(c, L, st->ig, key, st->rq.act, true, &st->use_ig, how, sizeof how));
    }
    /* where cuBLASLt's path won, its GEMM alone and then the whole layer's time against the implicit GEMM's */
    qf_log(QF_LOG_DEBUG, "%s: node %s: %s%s%s", c->g->source, L->n->name, st->use_ig ? "" : cu_gemm_describe(st->gm),
           st->ig && !st->use_ig ? ", layer" : "", st->ig ? how : "");
    return QF_OK;
}

static qf_status mm_launch(cu_engine *c, cu_layer *L, cudaStream_t s)
{
    const mm_state *st = (const mm_state *)L->state;
    const qf_graph *g = c->g;
    const qf_node *n = L->n;
    if (!st->gm) return QF_OK;
    const void *A, *B;
    void *Y;
    QF_CHECK(mm_buffers(c, L, s, &A, &B, &Y));
    if (st->product) {
        const void *b;
        QF_CHECK(cu_input_as(c, L, 1, CU_LOGICAL, s, &b));
        QF_CHECK(transpose_b(s, st, b, (void *)B));
        const qfi_matmul_geom *geo = &st->geo;
        const int64_t inner = st->nb / st->outer;
        for (int64_t o = 0; o < st->outer; o++) { /* broadcast outer dims: one batched GEMM each */
            int64_t i = o * inner, ia, ib;
            qfi_matmul_batch_offsets(geo, i, &ia, &ib);
            QF_CHECK(cu_gemm_run(c, st->gm, (const int8_t *)A + ia * geo->M * geo->K,
                                 (const int8_t *)B + ib * st->ldacc * geo->K, NULL,
                                 (int32_t *)Y + i * geo->M * st->ldacc, s));
        }
        void *out;
        QF_CHECK(cu_value_ptr(c, cu_out_value(L, 0), &out));
        return cu_requant_launch(s, &st->rq, (const int32_t *)Y, st->rows, st->N, st->ldacc, NULL, out);
    }
    if (st->int8) {
        const int8_t *res = NULL;
        if (n->n_in > 4 && n->in[4] >= 0) QF_CHECK(cu_value_ptr(c, n->in[4], (void **)&res));
        void *out;
        QF_CHECK(cu_value_ptr(c, cu_out_value(L, 0), &out));
        if (st->use_ig)
            return cu_igemm_run(st->ig, st->use_ig - 1, s, (const int8_t *)A, res, (int8_t *)out, c->scratch[CU_SCR_COL]);
        QF_CHECK(cu_gemm_run(c, st->gm, A, B, NULL, Y, s));
        return cu_requant_launch(s, &st->rq, (const int32_t *)Y, st->rows, st->N, st->ldacc, res, out);
    }
    const qf_value *yv = &g->values[cu_out_value(L, 0)];
    const int64_t ycnt = qf_value_numel(yv);
    if (st->fill_c) {
        const void *cm;
        QF_CHECK(cu_value_ptr(c, n->in[2], (void **)&cm));
        const cu_gemm_shape *sh = &st->gm->sh;
        unsigned b = cu_blocks(sh->rows * sh->cols, 256);
        if (b > 65536) b = 65536;
        if (yv->dtype == QF_F16)
            fill_c_kernel<__half><<<b, 256, 0, s>>>((__half *)Y, (const __half *)cm, sh->rows, sh->cols, st->c_st0,
                                                    st->c_st1, st->beta);
        else
            fill_c_kernel<float><<<b, 256, 0, s>>>((float *)Y, (const float *)cm, sh->rows, sh->cols, st->c_st0,
                                                   st->c_st1, st->beta);
        CU_LAUNCHED();
    }
    if (!st->batched) {
        QF_CHECK(cu_gemm_run(c, st->gm, A, B, NULL, Y, s));
    } else {
        const qfi_matmul_geom *geo = &st->geo;
        const size_t es = qf_dtype_info(yv->dtype)->size;
        const int64_t inner = st->nb / st->outer;
        for (int64_t o = 0; o < st->outer; o++) {
            int64_t i = o * inner, ia, ib;
            qfi_matmul_batch_offsets(geo, i, &ia, &ib);
            QF_CHECK(cu_gemm_run(c, st->gm, (const char *)A + (size_t)(ia * geo->M * geo->K) * es,
                                 (const char *)B + (size_t)(ib * geo->K * geo->N) * es, NULL,
                                 (char *)Y + (size_t)(i * geo->M * geo->N) * es, s));
        }
    }
    if (st->relu_pass && ycnt) {
        unsigned b = cu_blocks(ycnt, 256);
        relu_inplace_kernel<<<b > 65536 ? 65536 : b, 256, 0, s>>>(Y, cu_elem{yv->dtype, 1.0f, 0}, ycnt);
        CU_LAUNCHED();
    }
    return QF_OK;
}

const cu_op cu_op_gemm = {mm_prepare, mm_tune, mm_launch, CU_RULE_LOGICAL, CU_ALL_PRECISIONS, mm_check};
const cu_op cu_op_matmul = {mm_prepare, mm_tune, mm_launch, CU_RULE_LOGICAL, CU_ALL_PRECISIONS, mm_check};
