/* FP16 attention in one kernel: softmax(Q K^T + biases) V for the chains
 * fusion.cu finds (cu_fuse_attention), flash-attention style. A block takes
 * 64 queries of one (batch, head) matrix, 16 a warp, and walks the keys 64 at
 * a time: the scores of a tile are mma.sync products in FP32 registers, the
 * Adds' operands are added there, the row max and sum are kept online, and
 * the probabilities, rounded to half as the unfused Softmax's output is,
 * multiply the V tile into FP32 accumulators. Neither the scores nor the
 * probabilities reach memory: ViT-B/16's QK^T and Softmax nodes wrote 22 MB
 * of them per image, and Softmax and AV read them back. Where the chain
 * took the exporter's scalar Muls and K's Transpose in, the scores are
 * scaled in FP32 and K is read by rows (the KROWS kernels). Q, K and V are
 * read through the chain's views (the I8 kernels: from the int8 output the
 * heads were split from, each element rounded to half on load).
 *
 * Numerics: lib/attention.h's, which the CPU engine's fused chain
 * (runtime/cpu/attention.c) computes step for step: the scores and their
 * sums with the biases stay in FP32 instead of being rounded to half after
 * each node (a float constant bias is read as half; constant biases as
 * qfi_attention_bias_table's one table), and the normalization comes after
 * the AV product. Against the unfused nodes the differences are of half
 * precision's rounding of their results (test_cuda's `sdpa` graphs before
 * the CPU engine fused them too: 0.00098 at most, of outputs up to 1). */
#include "cuda_internal.h"
#include <type_traits>

namespace {

constexpr int BQ = 64, BKEYS = QFI_ATTN_KEY_TILE, THREADS = 128; /* key tiles: lib/attention.h's semantics */

struct attn_bias {
    const __half *p;
    int nd;
    int dims[QFI_ATTN_MAX_DIMS];
    int64_t strides[QFI_ATTN_MAX_DIMS];
    int64_t col_stride;
};

/* Where an operand's rows are (lib/attention.h's qfi_attention_view): row i
 * of matrix b at offset + i row_stride + b's digits times lead_strides, in
 * elements of the root (half, or int8 dequantized by scale and zp). */
struct attn_view {
    int64_t offset, row_stride;
    int n_lead;
    int lead_dims[QFI_ATTN_MAX_LEAD];
    int64_t lead_strides[QFI_ATTN_MAX_LEAD];
    float scale;
    int zp;
};

struct attn_params {
    const void *q, *kt, *v; /* the views' roots; kt: K [nb][N][D] for the KROWS kernels */
    attn_view vq, vk, vv;
    __half *o;
    float scale; /* each score's factor (lib/attention.h) */
    int nb, M, N, q_tiles;
    int n_bias;
    attn_bias bias[QFI_ATTN_MAX_BIAS];
};

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

/* Where matrix b's row 0 is in an operand's root; b < 2^31 */
__device__ __forceinline__ int64_t view_base(const attn_view &w, unsigned b)
{
    int64_t off = w.offset;
    for (int d = w.n_lead - 1; d >= 0; d--) {
        const unsigned q = b / (unsigned)w.lead_dims[d];
        off += (int64_t)(b - q * (unsigned)w.lead_dims[d]) * w.lead_strides[d];
        b = q;
    }
    return off;
}

/* Eight consecutive elements of a row: as they are in memory (raw8: 16
 * bytes of halves, or 8 int8 bytes), and as halves (to_half8: the int8
 * dequantized and rounded to half as the DequantizeLinear the chain took in
 * rounded them; the view's offsets and strides are multiples of 8). Every
 * query block converts all of K and V again, so the int8 bytes become
 * floats through QFI_MAGIC's bits (one byte permute and one FP32 subtract:
 * the same value (r - z) as the integer conversion, which runs at an eighth
 * of the FP32 rate). */
template <typename T> struct raw8_of { typedef int4 type; };
template <> struct raw8_of<int8_t> { typedef uint2 type; };
__device__ __forceinline__ int4 load_raw8(const __half *p) { return __ldg((const int4 *)p); }
__device__ __forceinline__ uint2 load_raw8(const int8_t *p) { return __ldg((const uint2 *)p); }
/* a row past the matrix: what converts to +0 halves (for int8 the zero
 * point's bytes, r - z = +0 exactly) */
__device__ __forceinline__ void raw8_zero(int4 &r, const attn_view &) { r = make_int4(0, 0, 0, 0); }
__device__ __forceinline__ void raw8_zero(uint2 &r, const attn_view &w)
{
    const uint32_t z = 0x01010101u * (uint32_t)(uint8_t)(int8_t)w.zp;
    r = make_uint2(z, z);
}
__device__ __forceinline__ int4 to_half8(int4 raw, const attn_view &) { return raw; }
__device__ __forceinline__ int4 to_half8(uint2 raw, const attn_view &w)
{
    int4 r;
    uint32_t *h = (uint32_t *)&r;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const uint32_t biased = (k < 2 ? raw.x : raw.y) ^ 0x80808080u;
        const int b = (k & 1) * 2;
        h[k] = pack_half2(qfi_mul(qfi_magic_byte_to_f32_zp(biased, b, w.zp), w.scale),
                          qfi_mul(qfi_magic_byte_to_f32_zp(biased, b + 1, w.zp), w.scale));
    }
    return r;
}
template <typename T> __device__ __forceinline__ int4 load8(const T *p, const attn_view &w) { return to_half8(load_raw8(p), w); }

/* Where row r of the scores (r = batch * M + query) starts in a bias operand;
 * r < 2^31 (cu_fuse_attention), so 32-bit divisions do. */
__device__ __forceinline__ int64_t bias_row(const attn_bias &b, unsigned r)
{
    int64_t off = 0;
    for (int d = b.nd - 1; d >= 0; d--) {
        const unsigned q = r / (unsigned)b.dims[d];
        off += (int64_t)(r - q * (unsigned)b.dims[d]) * b.strides[d];
        r = q;
    }
    return off;
}

/* One tile of keys on its way to shared memory: K^T's 64 columns (two
 * 2-byte reads a pair of keys: any N), or with KROWS K's 64 rows, and V's 64
 * rows (16-byte reads), a thread's part of each in registers, so that every
 * load of a tile is in flight at once. They stay as loaded (int8 bytes for
 * the I8 kernels) until store converts them: a conversion at load time
 * would wait there for the loads, and the prefetch of the next tile would
 * hold its warp up before this tile's products. A thread's key pair and V
 * column are the same in every row it loads: one address and one offset
 * step each. */
template <int D, bool KROWS, typename T> struct kv_regs {
    typedef typename raw8_of<T>::type raw8;
    static constexpr int K_ROWS = THREADS / (BKEYS / 2);       /* K^T rows (head dims) loaded per step */
    static constexpr int V_ROWS = THREADS / (D / 8), V_PER = BKEYS / V_ROWS, K_PER = KROWS ? V_PER : D / K_ROWS;
    typename std::conditional<KROWS, raw8, __half2>::type k[K_PER];
    raw8 v[V_PER];
    /* kb, vb: the matrix's row 0 in K's (K^T's) and V's roots */
    __device__ __forceinline__ void load(const T *kb, const T *vb, const attn_params &p, int k0, int tid)
    {
        const int N = p.N;
        if constexpr (KROWS) { /* K's rows as V's */
            const int r = k0 + tid / (D / 8);
            const T *kp = kb + (int64_t)r * p.vk.row_stride + tid % (D / 8) * 8;
#pragma unroll
            for (int i = 0; i < K_PER; i++) {
                if (r + i * V_ROWS < N) k[i] = load_raw8(kp + (int64_t)i * V_ROWS * p.vk.row_stride);
                else raw8_zero(k[i], p.vk);
            }
        } else { /* K^T as it is (no view, half) */
            const int j = k0 + tid % (BKEYS / 2) * 2, kstep = K_ROWS * N;
            const __half *kp = (const __half *)kb + (size_t)(tid / (BKEYS / 2)) * N + j;
            const __half zero = __float2half(0.0f);
#pragma unroll
            for (int i = 0; i < K_PER; i++)
                k[i] = __halves2half2(j < N ? __ldg(kp + i * kstep) : zero, j + 1 < N ? __ldg(kp + i * kstep + 1) : zero);
        }
        const int r = k0 + tid / (D / 8);
        const T *vp = vb + (int64_t)r * p.vv.row_stride + tid % (D / 8) * 8;
#pragma unroll
        for (int i = 0; i < V_PER; i++) { /* rows past N are zeros: 0 x garbage could be NaN */
            if (r + i * V_ROWS < N) v[i] = load_raw8(vp + (int64_t)i * V_ROWS * p.vv.row_stride);
            else raw8_zero(v[i], p.vv);
        }
    }
    __device__ __forceinline__ void store(__half *Ks, int ldk, __half *Vs, int ldv, const attn_params &p, int tid) const
    {
        if constexpr (KROWS) {
            int4 *kd = (int4 *)(Ks + tid / (D / 8) * ldk + tid % (D / 8) * 8);
#pragma unroll
            for (int i = 0; i < K_PER; i++) kd[i * V_ROWS * ldk / 8] = to_half8(k[i], p.vk);
        } else {
            __half2 *kd = (__half2 *)(Ks + tid / (BKEYS / 2) * ldk + tid % (BKEYS / 2) * 2);
#pragma unroll
            for (int i = 0; i < K_PER; i++) kd[i * K_ROWS * ldk / 2] = k[i];
        }
        int4 *vd = (int4 *)(Vs + tid / (D / 8) * ldv + tid % (D / 8) * 8);
#pragma unroll
        for (int i = 0; i < V_PER; i++) vd[i * V_ROWS * ldv / 8] = to_half8(v[i], p.vv);
    }
};

/* Queries q0.. of matrix b; D: the head size (Q, K and V rows); NB: the
 * bias operands; KROWS: K given as rows (shared memory then holds the tile
 * as [key][d], read by ldmatrix without the transpose). Lanes hold mma.sync fragments: row g = lane / 4 (and
 * g + 8) of the warp's 16, columns 2 (lane % 4) and the next of each
 * 8-column piece. The next tile's loads are issued before this tile's
 * products (for D <= 64; D = 128 has no registers to spare for them). */
template <int D, int NB, bool KROWS, bool I8>
__global__ void __launch_bounds__(THREADS, D <= 64 ? 3 : 2) attention_kernel(attn_params p)
{
    typedef typename std::conditional<I8, int8_t, __half>::type T; /* the roots' elements */
    constexpr int LDQ = D + 8, LDK = KROWS ? D + 8 : BKEYS + 8, LDV = D + 8; /* halves; 16-byte padding spreads ldmatrix rows over banks */
    constexpr bool PREFETCH = D <= 64;
    extern __shared__ __align__(16) __half smem[];
    __half *Qs = smem, *Ks = Qs + BQ * LDQ, *Vs = Ks + (KROWS ? BKEYS : D) * LDK;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t4 = lane & 3;
    const int b = blockIdx.x / p.q_tiles, q0 = (blockIdx.x % p.q_tiles) * BQ;
    const T *qb = (const T *)p.q + view_base(p.vq, b), *kb = (const T *)p.kt + view_base(p.vk, b),
            *vb = (const T *)p.v + view_base(p.vv, b);

    kv_regs<D, KROWS, T> kv;
    kv.load(kb, vb, p, 0, tid);
    {
        constexpr int Q_PER = BQ * D / 8 / THREADS;
        int4 qv[Q_PER];
#pragma unroll
        for (int i = 0; i < Q_PER; i++) {
            const int e = tid + i * THREADS, r = e / (D / 8), col = e % (D / 8) * 8;
            qv[i] = q0 + r < p.M ? load8(qb + (int64_t)(q0 + r) * p.vq.row_stride + col, p.vq) : make_int4(0, 0, 0, 0);
        }
#pragma unroll
        for (int i = 0; i < Q_PER; i++) {
            const int e = tid + i * THREADS;
            *(int4 *)(Qs + e / (D / 8) * LDQ + e % (D / 8) * 8) = qv[i];
        }
    }
    __syncthreads();
    uint32_t qf[D / 16][4];
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++)
        ldmatrix_x4(smem_addr(Qs + (warp * 16 + (lane & 15)) * LDQ + ks * 16 + (lane >> 4) * 8), qf[ks]);

    /* this thread's two rows: their start in each bias operand */
    const int row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
    int64_t boff[2][NB > 0 ? NB : 1];
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int k = 0; k < NB; k++) boff[h][k] = bias_row(p.bias[k], (unsigned)(b * p.M + (row[h] < p.M ? row[h] : 0)));

    float o[D / 8][4];
#pragma unroll
    for (int dn = 0; dn < D / 8; dn++) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};
    const float LOG2E = 1.44269504088896341f;

    for (int k0 = 0; k0 < p.N; k0 += BKEYS) {
        __syncthreads(); /* the last tile's K and V are read */
        kv.store(Ks, LDK, Vs, LDV, p, tid);
        __syncthreads();
        const bool more = k0 + BKEYS < p.N;
        if (PREFETCH && more) kv.load(kb, vb, p, k0 + BKEYS, tid);

        float s[BKEYS / 8][4];
#pragma unroll
        for (int nt = 0; nt < BKEYS / 8; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < D / 16; ks++)
#pragma unroll
            for (int np = 0; np < BKEYS / 16; np++) {
                uint32_t bf[4]; /* keys np*16.. by head dims ks*16..: (keys 0-7, dims 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15) */
                if constexpr (KROWS)
                    ldmatrix_x4(smem_addr(Ks + (np * 16 + (lane >> 4) * 8 + (lane & 7)) * LDK + ks * 16 + ((lane >> 3) & 1) * 8), bf);
                else
                    ldmatrix_x4_trans(smem_addr(Ks + (ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LDK + np * 16 + (lane >> 4) * 8), bf);
                mma_f16(s[2 * np], qf[ks], bf[0], bf[1]);
                mma_f16(s[2 * np + 1], qf[ks], bf[2], bf[3]);
            }

        /* biases, keys past N, then the online softmax of each row */
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int64_t bat[NB > 0 ? NB : 1]; /* this row's element of the tile's first key in each bias */
#pragma unroll
            for (int k = 0; k < NB; k++) bat[k] = boff[h][k] + (int64_t)(k0 + t4 * 2) * p.bias[k].col_stride;
            float mx = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < BKEYS / 8; nt++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int j = k0 + nt * 8 + t4 * 2 + e;
                    float v = s[nt][2 * h + e] * p.scale;
                    if (j < p.N) {
#pragma unroll
                        for (int k = 0; k < NB; k++) {
                            const attn_bias &bs = p.bias[k];
                            const int64_t at = bat[k] + (nt * 8 + e) * bs.col_stride;
                            v += __half2float(__ldg(bs.p + at));
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
        if (!PREFETCH && more) kv.load(kb, vb, p, k0 + BKEYS, tid);
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

/* Q, K (either layout: the larger) and V tiles */
template <int D> constexpr size_t smem_bytes()
{
    return sizeof(__half) * ((size_t)BQ * (D + 8) + (D * (BKEYS + 8) > BKEYS * (D + 8) ? (size_t)D * (BKEYS + 8) : (size_t)BKEYS * (D + 8)) +
                             (size_t)BKEYS * (D + 8));
}

struct attn_state {
    qfi_attention_chain ch;
    attn_params p;
};

} // namespace

static qf_status attn_prepare(cu_engine *c, cu_layer *L)
{
    /* the chain cu_fuse_attention left as the state */
    const qfi_attention_chain ch = *(const qfi_attention_chain *)L->state;
    L->free_state(L->state);
    attn_state *st = (attn_state *)qfi_calloc(1, sizeof *st);
    L->state = st;
    L->free_state = free;
    if (!st) return QF_ERR_NOMEM;
    st->ch = ch;
    attn_params &p = st->p;
    if (ch.nb > INT32_MAX || ch.M > INT32_MAX / 2 || ch.N > INT32_MAX / 2 || ch.n_bias > QFI_ATTN_MAX_BIAS)
        return qf_error(QF_ERR_UNSUPPORTED, "attention of %lld x %lld queries and %lld keys", (long long)ch.nb,
                        (long long)ch.M, (long long)ch.N);
    p.nb = (int)ch.nb, p.M = (int)ch.M, p.N = (int)ch.N;
    p.scale = ch.scale;
    p.q_tiles = (p.M + BQ - 1) / BQ;
    if ((int64_t)p.q_tiles * p.nb > INT32_MAX) return qf_error(QF_ERR_UNSUPPORTED, "attention grid of %lld blocks", (long long)p.q_tiles * p.nb);
    void *ptr;
    QF_CHECK(cu_value_ptr(c, ch.q, &ptr));
    p.q = ptr;
    QF_CHECK(cu_value_ptr(c, ch.kt, &ptr));
    p.kt = ptr;
    QF_CHECK(cu_value_ptr(c, ch.v, &ptr));
    p.v = ptr;
    attn_view *const views[3] = {&p.vq, &p.vk, &p.vv};
    for (int o = 0; o < 3; o++) { /* (cu_attention_views_ok took only views of these bounds) */
        const qfi_attention_view &w = ch.view[o];
        attn_view &a = *views[o];
        a.offset = w.offset, a.row_stride = w.row_stride, a.n_lead = w.n_lead;
        for (int d = 0; d < w.n_lead; d++) a.lead_dims[d] = (int)w.lead_dims[d], a.lead_strides[d] = w.lead_strides[d];
        a.scale = w.scale, a.zp = w.zero_point;
    }
    QF_CHECK(cu_value_ptr(c, ch.out, &ptr));
    p.o = (__half *)ptr;
    uint16_t *table;
    int64_t period;
    QF_CHECK(qfi_attention_bias_table(c->g, &ch, &table, &period));
    if (table) {
        qf_status us = cu_upload(c, table, (size_t)(period * ch.N) * sizeof *table, &ptr);
        free(table);
        QF_CHECK(us);
        attn_bias &b = p.bias[0];
        p.n_bias = 1;
        b.p = (const __half *)ptr;
        b.nd = 1, b.dims[0] = (int)period, b.strides[0] = ch.N, b.col_stride = 1;
        qf_log(QF_LOG_DEBUG, "%s: attention %s: %d constant biases summed into one table of %lld rows",
               c->g->source, L->n->name, ch.n_bias, (long long)period);
    } else {
        p.n_bias = ch.n_bias;
    }
    for (int k = 0; k < (table ? 0 : ch.n_bias); k++) {
        const qfi_attention_bias &cb = ch.bias[k];
        attn_bias &b = p.bias[k];
        const qf_value *bv = &c->g->values[cb.value];
        if (bv->dtype == QF_F16) {
            QF_CHECK(cu_value_ptr(c, cb.value, &ptr));
        } else { /* a float constant (the matcher takes no other): its half copy */
            const size_t n = (size_t)qf_value_numel(bv);
            uint16_t *h = (uint16_t *)qfi_calloc(n + 1, sizeof *h);
            if (!h) return QF_ERR_NOMEM;
            for (size_t i = 0; i < n; i++) h[i] = qf_f32_to_f16(((const float *)bv->data)[i]);
            qf_status us = cu_upload(c, h, n * sizeof *h, &ptr);
            free(h);
            QF_CHECK(us);
        }
        b.p = (const __half *)ptr;
        b.nd = cb.nd;
        for (int d = 0; d < cb.nd; d++) {
            if (cb.dims[d] > INT32_MAX) return qf_error(QF_ERR_UNSUPPORTED, "attention bias dim of %lld", (long long)cb.dims[d]);
            b.dims[d] = (int)cb.dims[d], b.strides[d] = cb.strides[d];
        }
        b.col_stride = cb.col_stride;
    }
    size_t smem = ch.D == 32 ? smem_bytes<32>() : ch.D == 64 ? smem_bytes<64>() : smem_bytes<128>();
    if (ch.D == 128)
        for (auto k : {attention_kernel<128, 0, false, false>, attention_kernel<128, 1, false, false>,
                       attention_kernel<128, 2, false, false>, attention_kernel<128, 0, true, false>,
                       attention_kernel<128, 1, true, false>, attention_kernel<128, 2, true, false>,
                       attention_kernel<128, 0, true, true>, attention_kernel<128, 1, true, true>,
                       attention_kernel<128, 2, true, true>})
            CU_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    return QF_OK;
}

template <int D, int NB, bool KROWS> static void launch_for(const attn_params &p, bool i8, unsigned blocks, cudaStream_t s)
{
    if constexpr (KROWS)
        if (i8) {
            attention_kernel<D, NB, true, true><<<blocks, THREADS, smem_bytes<D>(), s>>>(p);
            return;
        }
    attention_kernel<D, NB, KROWS, false><<<blocks, THREADS, smem_bytes<D>(), s>>>(p);
}
/* i8: the views' roots are int8 (all three: cu_attention_views_ok) */
template <int D, bool KROWS> static void launch_d(const attn_params &p, bool i8, unsigned blocks, cudaStream_t s)
{
    if (p.n_bias == 0) launch_for<D, 0, KROWS>(p, i8, blocks, s);
    else if (p.n_bias == 1) launch_for<D, 1, KROWS>(p, i8, blocks, s);
    else launch_for<D, 2, KROWS>(p, i8, blocks, s);
}

static qf_status attn_launch(cu_engine *c, cu_layer *L, cudaStream_t s)
{
    (void)c;
    const attn_state *st = (const attn_state *)L->state;
    const unsigned blocks = (unsigned)(st->p.q_tiles * st->p.nb);
    if (!blocks) return QF_OK;
    const bool rows = st->ch.k_rows, i8 = st->ch.view[QFI_ATTN_Q].int8;
    switch (st->ch.D) {
    case 32: rows ? launch_d<32, true>(st->p, i8, blocks, s) : launch_d<32, false>(st->p, i8, blocks, s); break;
    case 64: rows ? launch_d<64, true>(st->p, i8, blocks, s) : launch_d<64, false>(st->p, i8, blocks, s); break;
    default: rows ? launch_d<128, true>(st->p, i8, blocks, s) : launch_d<128, false>(st->p, i8, blocks, s); break;
    }
    CU_LAUNCHED();
    return QF_OK;
}

bool cu_attention_views_ok(void *user, const qfi_attention_chain *ch)
{
    (void)user;
    const bool i8 = ch->view[QFI_ATTN_Q].int8;
    for (int o = 0; o < 3; o++) {
        const qfi_attention_view &w = ch->view[o];
        /* one kind of root for all three (K^T, read as it is, is half); rows of whole 8-element vectors */
        if (w.int8 != i8 || (o == QFI_ATTN_K && !ch->k_rows && i8) || w.offset % 8 || w.row_stride % 8) return false;
        for (int d = 0; d < w.n_lead; d++)
            if (w.lead_strides[d] % 8 || w.lead_dims[d] > INT32_MAX) return false;
    }
    return true;
}

/* Only cu_fuse_attention gives a layer this op (no ops.def entry, no check). */
const cu_op cu_op_attention = {attn_prepare, NULL, attn_launch, CU_RULE_LOGICAL, QFI_PREC_BIT(QF_PREC_FP16), NULL};
