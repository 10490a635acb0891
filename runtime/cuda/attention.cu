/* FP16 attention in one kernel: softmax(Q K^T + biases) V for the chains
 * fusion.cu finds (cu_fuse_attention), flash-attention style. A block takes
 * 64 queries of one (batch, head) matrix, 16 a warp, and walks the keys 64 at
 * a time: the scores of a tile are mma.sync products in FP32 registers, the
 * Adds' operands are added there, the row max and sum are kept online, and
 * the probabilities, rounded to half as the unfused Softmax's output is,
 * multiply the V tile into FP32 accumulators. Neither the scores nor the
 * probabilities reach memory: ViT-B/16's QK^T, Softmax and AV nodes wrote and
 * read 24 MB of them per image.
 *
 * Numerics against the unfused nodes (and the CPU engine, which runs them):
 * the scores and their sums with the biases stay in FP32 instead of being
 * rounded to half after each node, and the normalization comes after the AV
 * product; every difference is below half precision's rounding of the
 * unfused results (test_cuda's `sdpa` graphs). */
#include "cuda_internal.h"

namespace {

constexpr int BQ = 64, BKEYS = 64, THREADS = 128;

struct attn_bias {
    const void *p;
    bool f16;
    int nd;
    int dims[CU_ATTN_MAX_DIMS];
    int64_t strides[CU_ATTN_MAX_DIMS];
    int64_t col_stride;
};

struct attn_params {
    const __half *q, *kt, *v;
    __half *o;
    int nb, M, N, q_tiles;
    int n_bias;
    attn_bias bias[CU_ATTN_MAX_BIAS];
};

__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t *r)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t addr, uint32_t *r)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
/* c (16x8 FP32) += a (16x16 half, row) x b (16x8 half, col) */
__device__ __forceinline__ void mma_f16(float *c, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi)
{
    __half2 h = __floats2half2_rn(lo, hi);
    return *(uint32_t *)&h;
}

/* Where row r of the scores (r = batch * M + query) starts in a bias operand. */
__device__ __forceinline__ int64_t bias_row(const attn_bias &b, int64_t r)
{
    int64_t off = 0;
    for (int d = b.nd - 1; d >= 0; d--) {
        const int64_t q = r / b.dims[d];
        off += (r - q * b.dims[d]) * b.strides[d];
        r = q;
    }
    return off;
}

/* Queries q0.. of matrix b; D: the head size (Q, K and V rows). Lanes hold
 * mma.sync fragments: row g = lane / 4 (and g + 8) of the warp's 16, columns
 * 2 (lane % 4) and the next of each 8-column piece. */
template <int D>
__global__ void __launch_bounds__(THREADS) attention_kernel(attn_params p)
{
    constexpr int LDQ = D + 8, LDK = BKEYS + 8, LDV = D + 8; /* halves; 16-byte padding spreads ldmatrix rows over banks */
    extern __shared__ __align__(16) __half smem[];
    __half *Qs = smem, *Ks = Qs + BQ * LDQ, *Vs = Ks + D * LDK;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t4 = lane & 3;
    const int b = blockIdx.x / p.q_tiles, q0 = (blockIdx.x % p.q_tiles) * BQ;
    const __half *qb = p.q + (size_t)b * p.M * D, *kb = p.kt + (size_t)b * D * p.N, *vb = p.v + (size_t)b * p.N * D;

    for (int e = tid; e < BQ * D / 8; e += THREADS) {
        const int r = e / (D / 8), col = e % (D / 8) * 8;
        int4 val = make_int4(0, 0, 0, 0);
        if (q0 + r < p.M) val = *(const int4 *)(qb + (size_t)(q0 + r) * D + col);
        *(int4 *)(Qs + r * LDQ + col) = val;
    }
    __syncthreads();
    uint32_t qf[D / 16][4];
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++)
        ldmatrix_x4(smem_addr(Qs + (warp * 16 + (lane & 15)) * LDQ + ks * 16 + (lane >> 4) * 8), qf[ks]);

    /* this thread's two rows: their start in each bias operand */
    const int row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
    int64_t boff[2][CU_ATTN_MAX_BIAS];
#pragma unroll
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < p.n_bias; k++) boff[h][k] = bias_row(p.bias[k], (int64_t)b * p.M + (row[h] < p.M ? row[h] : 0));

    float o[D / 8][4];
#pragma unroll
    for (int dn = 0; dn < D / 8; dn++) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};
    const float LOG2E = 1.44269504088896341f;

    for (int k0 = 0; k0 < p.N; k0 += BKEYS) {
        __syncthreads(); /* the last tile's K and V are read */
        for (int e = tid; e < D * BKEYS; e += THREADS) { /* K^T rows: keys contiguous, any N (2-byte reads) */
            const int d = e / BKEYS, j = e % BKEYS;
            Ks[d * LDK + j] = k0 + j < p.N ? kb[(size_t)d * p.N + k0 + j] : __float2half(0.0f);
        }
        for (int e = tid; e < BKEYS * D / 8; e += THREADS) { /* V rows past N are zeros: 0 x garbage could be NaN */
            const int r = e / (D / 8), col = e % (D / 8) * 8;
            int4 val = make_int4(0, 0, 0, 0);
            if (k0 + r < p.N) val = *(const int4 *)(vb + (size_t)(k0 + r) * D + col);
            *(int4 *)(Vs + r * LDV + col) = val;
        }
        __syncthreads();

        float s[BKEYS / 8][4];
#pragma unroll
        for (int nt = 0; nt < BKEYS / 8; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < D / 16; ks++)
#pragma unroll
            for (int np = 0; np < BKEYS / 16; np++) {
                uint32_t bf[4];
                ldmatrix_x4_trans(smem_addr(Ks + (ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LDK + np * 16 + (lane >> 4) * 8), bf);
                mma_f16(s[2 * np], qf[ks], bf[0], bf[1]);
                mma_f16(s[2 * np + 1], qf[ks], bf[2], bf[3]);
            }

        /* biases, keys past N, then the online softmax of each row */
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float mx = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < BKEYS / 8; nt++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int j = k0 + nt * 8 + t4 * 2 + e;
                    float v = s[nt][2 * h + e];
                    if (j < p.N) {
                        for (int k = 0; k < p.n_bias; k++) {
                            const attn_bias &bs = p.bias[k];
                            const int64_t at = boff[h][k] + j * bs.col_stride;
                            v += bs.f16 ? __half2float(((const __half *)bs.p)[at]) : ((const float *)bs.p)[at];
                        }
                    } else {
                        v = -INFINITY;
                    }
                    s[nt][2 * h + e] = v;
                    mx = fmaxf(mx, v);
                }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_new = fmaxf(mrow[h], mx);
            const float base = m_new == -INFINITY ? 0.0f : m_new; /* a row masked so far: no inf - inf */
            const float corr = exp2f((mrow[h] - base) * LOG2E);
            mrow[h] = m_new;
            lrow[h] *= corr;
#pragma unroll
            for (int dn = 0; dn < D / 8; dn++) o[dn][2 * h] *= corr, o[dn][2 * h + 1] *= corr;
#pragma unroll
            for (int nt = 0; nt < BKEYS / 8; nt++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const float pe = exp2f((s[nt][2 * h + e] - base) * LOG2E);
                    s[nt][2 * h + e] = pe;
                    lrow[h] += pe;
                }
        }

        /* O += P V: two 8-key pieces of P's accumulators make one 16-key A fragment */
#pragma unroll
        for (int kk = 0; kk < BKEYS / 16; kk++) {
            const uint32_t a[4] = {pack_half2(s[2 * kk][0], s[2 * kk][1]), pack_half2(s[2 * kk][2], s[2 * kk][3]),
                                   pack_half2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                   pack_half2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int dp = 0; dp < D / 16; dp++) {
                uint32_t bf[4];
                ldmatrix_x4_trans(smem_addr(Vs + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LDV + dp * 16 + (lane >> 4) * 8), bf);
                mma_f16(o[2 * dp], a, bf[0], bf[1]);
                mma_f16(o[2 * dp + 1], a, bf[2], bf[3]);
            }
        }
    }

#pragma unroll
    for (int h = 0; h < 2; h++) {
        float l = lrow[h];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        if (row[h] >= p.M) continue;
        const float inv = 1.0f / l;
        __half *orow = p.o + ((size_t)b * p.M + row[h]) * D + t4 * 2;
#pragma unroll
        for (int dn = 0; dn < D / 8; dn++)
            *(__half2 *)(orow + dn * 8) = __floats2half2_rn(o[dn][2 * h] * inv, o[dn][2 * h + 1] * inv);
    }
}

template <int D> constexpr size_t smem_bytes() { return sizeof(__half) * ((size_t)BQ * (D + 8) + (size_t)D * (BKEYS + 8) + (size_t)BKEYS * (D + 8)); }

struct attn_state {
    cu_attention_chain ch;
    attn_params p;
};

} // namespace

bool cu_attention_head_fits(int64_t d) { return d == 32 || d == 64 || d == 128; }

static qf_status attn_prepare(cu_engine *c, cu_layer *L)
{
    /* the chain cu_fuse_attention left as the state */
    const cu_attention_chain ch = *(const cu_attention_chain *)L->state;
    L->free_state(L->state);
    attn_state *st = (attn_state *)qfi_calloc(1, sizeof *st);
    L->state = st;
    L->free_state = free;
    if (!st) return QF_ERR_NOMEM;
    st->ch = ch;
    attn_params &p = st->p;
    if (ch.nb > INT32_MAX || ch.M > INT32_MAX / 2 || ch.N > INT32_MAX / 2 || ch.n_bias > CU_ATTN_MAX_BIAS)
        return qf_error(QF_ERR_UNSUPPORTED, "attention of %lld x %lld queries and %lld keys", (long long)ch.nb,
                        (long long)ch.M, (long long)ch.N);
    p.nb = (int)ch.nb, p.M = (int)ch.M, p.N = (int)ch.N;
    p.q_tiles = (p.M + BQ - 1) / BQ;
    if ((int64_t)p.q_tiles * p.nb > INT32_MAX) return qf_error(QF_ERR_UNSUPPORTED, "attention grid of %lld blocks", (long long)p.q_tiles * p.nb);
    void *ptr;
    QF_CHECK(cu_value_ptr(c, ch.q, &ptr));
    p.q = (const __half *)ptr;
    QF_CHECK(cu_value_ptr(c, ch.kt, &ptr));
    p.kt = (const __half *)ptr;
    QF_CHECK(cu_value_ptr(c, ch.v, &ptr));
    p.v = (const __half *)ptr;
    QF_CHECK(cu_value_ptr(c, ch.out, &ptr));
    p.o = (__half *)ptr;
    p.n_bias = ch.n_bias;
    for (int k = 0; k < ch.n_bias; k++) {
        const cu_attention_bias &cb = ch.bias[k];
        attn_bias &b = p.bias[k];
        QF_CHECK(cu_value_ptr(c, cb.value, &ptr));
        b.p = ptr;
        b.f16 = c->g->values[cb.value].dtype == QF_F16;
        b.nd = cb.nd;
        for (int d = 0; d < cb.nd; d++) {
            if (cb.dims[d] > INT32_MAX) return qf_error(QF_ERR_UNSUPPORTED, "attention bias dim of %lld", (long long)cb.dims[d]);
            b.dims[d] = (int)cb.dims[d], b.strides[d] = cb.strides[d];
        }
        b.col_stride = cb.col_stride;
    }
    size_t smem = ch.D == 32 ? smem_bytes<32>() : ch.D == 64 ? smem_bytes<64>() : smem_bytes<128>();
    if (ch.D == 128) CU_CHECK(cudaFuncSetAttribute(attention_kernel<128>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    return QF_OK;
}

static qf_status attn_launch(cu_engine *c, cu_layer *L, cudaStream_t s)
{
    (void)c;
    const attn_state *st = (const attn_state *)L->state;
    const unsigned blocks = (unsigned)(st->p.q_tiles * st->p.nb);
    if (!blocks) return QF_OK;
    switch (st->ch.D) {
    case 32: attention_kernel<32><<<blocks, THREADS, smem_bytes<32>(), s>>>(st->p); break;
    case 64: attention_kernel<64><<<blocks, THREADS, smem_bytes<64>(), s>>>(st->p); break;
    default: attention_kernel<128><<<blocks, THREADS, smem_bytes<128>(), s>>>(st->p); break;
    }
    CU_LAUNCHED();
    return QF_OK;
}

/* Only cu_fuse_attention gives a layer this op (no ops.def entry, no check). */
const cu_op cu_op_attention = {attn_prepare, NULL, attn_launch, CU_RULE_LOGICAL, QFI_PREC_BIT(QF_PREC_FP16), NULL};
