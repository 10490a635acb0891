/* LayerNormalization on the device: 4 to 32 lanes a row of up to 1024
 * elements (the row held in registers; 8 elements a load where the row
 * allows), else one block of 256 threads per row, the
 * row read three times (sum, squared deviations, output), both sums in double
 * as runtime/cpu/layer_norm.c takes them, then the CPU kernel's per-element
 * arithmetic with one IEEE rounding per operation. Inputs f32, f16 or int8
 * (q * scale); scale and bias are f32 constants. A layer that took in the
 * DequantizeLinear before it or the QuantizeLinear after it (fusion.cu,
 * cu_fuse_layer_norm_qdq) reads or writes int8 and rounds through half as
 * those nodes' half values did. */
#include "cuda_internal.h"

#define LN_THREADS 256

typedef struct ln_state {
    int64_t outer, len;
    float eps;
    float *sb;                  /* device: scale[len or 1] then bias[len or 1] */
    bool scalar_scale, scalar_bias, has_bias;
    int64_t bias_at;            /* offset of the bias in sb */
    bool dq_half, q_half;       /* a fused DequantizeLinear's / QuantizeLinear's half between */
    cu_elem in_q, out_q;        /* their int8 sides */
} ln_state;

/* v through a half, as a fused DequantizeLinear's or QuantizeLinear's half value was, when through */
__device__ __forceinline__ float ln_via_half(float v, bool through) { return through ? __half2float(__float2half_rn(v)) : v; }
/* An input element as the LayerNorm node sees it: through a fused
 * DequantizeLinear's half output where it took one in. */
__device__ __forceinline__ float ln_load(const void *x, cu_elem xe, bool dq_half, int64_t i)
{
    return ln_via_half(cu_load(x, xe, i), dq_half);
}
/* A result, rounded to the node's half output first where a QuantizeLinear after it was taken in. */
__device__ __forceinline__ void ln_store(void *y, cu_elem ye, bool q_half, int64_t i, float v)
{
    cu_store(y, ye, i, ln_via_half(v, q_half));
}

/* The three kernels' shared arithmetic, runtime/cpu/layer_norm.c's: the
 * mean and 1 / sqrt(variance + eps) from the row's two double sums, then per
 * element (v - mean) * inv * scale (+ bias) with one IEEE rounding an
 * operation. */
__device__ __forceinline__ float ln_mean(double sum, int64_t len) { return (float)(sum / (double)len); }
__device__ __forceinline__ float ln_inv_std(double squares, int64_t len, float eps)
{
    return (float)(1.0 / sqrt(squares / (double)len + eps));
}
__device__ __forceinline__ float ln_apply(float v, float mean, float inv, float scale, bool has_bias, float bias)
{
    const float o = __fmul_rn(__fmul_rn(__fsub_rn(v, mean), inv), scale);
    return has_bias ? __fadd_rn(o, bias) : o;
}

__device__ double ln_block_sum(double v, double *shared)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    double t = 0.0;
    if (threadIdx.x == 0) {
        for (int w = 0; w < LN_THREADS / 32; w++) t += shared[w];
        shared[LN_THREADS / 32] = t;
    }
    __syncthreads();
    t = shared[LN_THREADS / 32];
    __syncthreads();
    return t;
}

__global__ void layer_norm_kernel(void *y, cu_elem ye, const void *x, cu_elem xe, const float *sb, ln_state p)
{
    __shared__ double shared[LN_THREADS / 32 + 1];
    for (int64_t r = blockIdx.x; r < p.outer; r += gridDim.x) {
        const int64_t base = r * p.len;
        double s = 0.0;
        for (int64_t i = threadIdx.x; i < p.len; i += LN_THREADS) s += ln_load(x, xe, p.dq_half, base + i);
        const float mean = ln_mean(ln_block_sum(s, shared), p.len);
        double ss = 0.0;
        for (int64_t i = threadIdx.x; i < p.len; i += LN_THREADS) {
            double d = (double)ln_load(x, xe, p.dq_half, base + i) - mean;
            ss += d * d;
        }
        const float inv = ln_inv_std(ln_block_sum(ss, shared), p.len, p.eps);
        for (int64_t i = threadIdx.x; i < p.len; i += LN_THREADS) {
            const float bias = p.has_bias ? sb[p.bias_at + (p.scalar_bias ? 0 : i)] : 0.0f;
            ln_store(y, ye, p.q_half, base + i,
                     ln_apply(ln_load(x, xe, p.dq_half, base + i), mean, inv, sb[p.scalar_scale ? 0 : i], p.has_bias, bias));
        }
    }
}

/* v summed over the LANES lanes of this lane's group (aligned groups of a warp) */
template <int LANES> __device__ __forceinline__ double ln_group_sum(double v)
{
#pragma unroll
    for (int o = LANES / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Rows of at most LANES * PER elements (ConvNeXt's, ViT's and Swin's 96 to
 * 768 channels): a group of LANES lanes a row, 32 / LANES rows a warp, the
 * row read once into registers, the same sums and per-element arithmetic as
 * layer_norm_kernel. A block per row left most of its 256 threads idle on
 * such rows; a warp per row still spent more instructions on each row's
 * reductions, division and square root (double) than on its 96 elements,
 * which groups of 8 lanes share four to an instruction. */
template <int LANES, int PER>
__global__ void layer_norm_rows_kernel(void *y, cu_elem ye, const void *x, cu_elem xe, const float *sb, ln_state p)
{
    constexpr int G = 32 / LANES; /* rows a warp */
    const int lane = threadIdx.x & 31, sub = lane % LANES;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t r0 = (blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32) * G; r0 < p.outer; r0 += warps * G) {
        const int64_t r = r0 + lane / LANES; /* every lane takes part in the sums, a row past the end reads nothing */
        const bool row = r < p.outer;
        const int64_t base = r * p.len;
        float v[PER];
        double s = 0.0;
#pragma unroll
        for (int k = 0; k < PER; k++) {
            const int64_t i = sub + LANES * k;
            v[k] = row && i < p.len ? ln_load(x, xe, p.dq_half, base + i) : 0.0f;
            s += v[k];
        }
        const float mean = ln_mean(ln_group_sum<LANES>(s), p.len);
        double ss = 0.0;
#pragma unroll
        for (int k = 0; k < PER; k++)
            if (sub + LANES * k < p.len) {
                const double d = (double)v[k] - mean;
                ss += d * d;
            }
        const float inv = ln_inv_std(ln_group_sum<LANES>(ss), p.len, p.eps);
        if (!row) continue;
#pragma unroll
        for (int k = 0; k < PER; k++) {
            const int64_t i = sub + LANES * k;
            if (i >= p.len) continue;
            const float bias = p.has_bias ? sb[p.bias_at + (p.scalar_bias ? 0 : i)] : 0.0f;
            ln_store(y, ye, p.q_half, base + i, ln_apply(v[k], mean, inv, sb[p.scalar_scale ? 0 : i], p.has_bias, bias));
        }
    }
}

/* Rows of a multiple of 8 elements (at most LANES * 32) of f16 or int8 into
 * f16 or int8, with a scale and bias a channel: layer_norm_rows_kernel's
 * sums and per-element arithmetic, but each lane takes 8 consecutive
 * elements at a time, one 16- or 8-byte load and store and two float4 loads
 * of scale and bias, where the scalar kernel issued one load an element
 * (and the generic loader's dtype switch) for each. */
template <typename TX, typename TY, int LANES>
__global__ void layer_norm_vec_kernel(TY *y, cu_elem ye, const TX *x, cu_elem xe, const float *sb, ln_state p)
{
    constexpr int G = 32 / LANES, NV = 4; /* rows a warp; groups of 8 a lane, at most */
    const int lane = threadIdx.x & 31, sub = lane % LANES;
    const int nvec = (int)(p.len / 8);
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t r0 = (blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32) * G; r0 < p.outer; r0 += warps * G) {
        const int64_t r = r0 + lane / LANES;
        const bool row = r < p.outer;
        float v[NV][8];
        double s = 0.0;
#pragma unroll
        for (int k = 0; k < NV; k++) {
            const int j = sub + LANES * k;
            cu_vec<TX, 8> q;
            q.raw = {};
            if (row && j < nvec) q.load(x + r * p.len, j);
#pragma unroll
            for (int e = 0; e < 8; e++) {
                v[k][e] = ln_via_half(cu_lane_in(q.e[e], xe), p.dq_half);
                if (j < nvec) s += v[k][e];
            }
        }
        const float mean = ln_mean(ln_group_sum<LANES>(s), p.len);
        double ss = 0.0;
#pragma unroll
        for (int k = 0; k < NV; k++)
            if (sub + LANES * k < nvec) {
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    const double d = (double)v[k][e] - mean;
                    ss += d * d;
                }
            }
        const float inv = ln_inv_std(ln_group_sum<LANES>(ss), p.len, p.eps);
        if (!row) continue;
#pragma unroll
        for (int k = 0; k < NV; k++) {
            const int j = sub + LANES * k;
            if (j >= nvec) continue;
            const float4 *sc = (const float4 *)sb + 2 * j, *bi = (const float4 *)(sb + p.bias_at) + 2 * j;
            const float4 s0 = sc[0], s1 = sc[1];
            const float scale[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
            float bias[8] = {};
            if (p.has_bias) {
                const float4 b0 = bi[0], b1 = bi[1];
                bias[0] = b0.x, bias[1] = b0.y, bias[2] = b0.z, bias[3] = b0.w;
                bias[4] = b1.x, bias[5] = b1.y, bias[6] = b1.z, bias[7] = b1.w;
            }
            cu_vec<TY, 8> o;
#pragma unroll
            for (int e = 0; e < 8; e++)
                o.e[e] = cu_lane_out<TY>(ln_via_half(ln_apply(v[k][e], mean, inv, scale[e], p.has_bias, bias[e]), p.q_half), ye);
            o.store(y + r * p.len, j);
        }
    }
}

/* Whether layer_norm_vec_kernel takes this layer: 16-byte aligned rows of
 * 8 to 1024 halves or int8, a scale and (if any) a bias per channel. */
static bool vec_fits(const ln_state *p, const void *y, cu_elem ye, const void *x, cu_elem xe)
{
    const bool types = (xe.dt == QF_F16 || xe.dt == QF_I8) && (ye.dt == QF_F16 || ye.dt == QF_I8);
    return types && p->len % 8 == 0 && p->len <= 32 * 32 && !p->scalar_scale && (!p->has_bias || !p->scalar_bias) &&
           (uintptr_t)x % 16 == 0 && (uintptr_t)y % 16 == 0 && p->bias_at % 8 == 0;
}

template <typename TX, typename TY, int LANES>
static void launch_vec(cudaStream_t s, void *y, cu_elem ye, const void *x, cu_elem xe, const ln_state *p)
{
    const int64_t rows_a_block = 8 * (32 / LANES), nb = (p->outer + rows_a_block - 1) / rows_a_block;
    const unsigned b = nb > 65536 ? 65536u : (unsigned)nb;
    layer_norm_vec_kernel<TX, TY, LANES><<<b, 256, 0, s>>>((TY *)y, ye, (const TX *)x, xe, p->sb, *p);
}
/* the fewest lanes a row (4 to 32) whose four groups of 8 each cover it */
template <typename TX, typename TY>
static void launch_vec_lanes(cudaStream_t s, void *y, cu_elem ye, const void *x, cu_elem xe, const ln_state *p)
{
    const int64_t nvec = p->len / 8;
    if (nvec <= 16) launch_vec<TX, TY, 4>(s, y, ye, x, xe, p);
    else if (nvec <= 32) launch_vec<TX, TY, 8>(s, y, ye, x, xe, p);
    else if (nvec <= 64) launch_vec<TX, TY, 16>(s, y, ye, x, xe, p);
    else launch_vec<TX, TY, 32>(s, y, ye, x, xe, p);
}

/* layer_norm_rows_kernel<LANES, PER> over all rows: 8 warps a block */
template <int LANES, int PER>
static void launch_rows(cudaStream_t s, void *y, cu_elem ye, const void *x, cu_elem xe, const ln_state *p)
{
    const int64_t rows_a_block = 8 * (32 / LANES), nb = (p->outer + rows_a_block - 1) / rows_a_block;
    const unsigned b = nb > 65536 ? 65536u : (unsigned)nb;
    layer_norm_rows_kernel<LANES, PER><<<b, 256, 0, s>>>(y, ye, x, xe, p->sb, *p);
}

/* Float-like data; scale and bias constants of f32 or f16. */
static qf_status layer_norm_check(const qf_graph *g, const qf_node *n)
{
    const qf_value *x = qfi_in(g, n, 0), *y = qfi_out(g, n, 0);
    if (!cu_float_like(g, n, x) || !cu_float_like(g, n, y))
        return qf_error(QF_ERR_UNSUPPORTED, "input %s of dtype %s", x->name, qf_dtype_info(x->dtype)->name);
    for (int k = 1; k < n->n_in; k++) {
        const qf_value *v = qfi_in(g, n, k);
        if (v && (!(v->flags & QF_VALUE_CONST) || (v->dtype != QF_F32 && v->dtype != QF_F16)))
            return qf_error(QF_ERR_UNSUPPORTED, "%s %s must be a float constant", k == 1 ? "scale" : "bias", v->name);
    }
    return QF_OK;
}

static float const_f(const qf_value *v, int64_t i)
{
    return v->dtype == QF_F16 ? qf_f16_to_f32(((const uint16_t *)v->data)[i]) : ((const float *)v->data)[i];
}

static qf_status layer_norm_prepare(cu_engine *c, cu_layer *L)
{
    const qf_node *n = L->n;
    ln_state *st = (ln_state *)qfi_calloc(1, sizeof *st);
    if (!st) return QF_ERR_NOMEM;
    L->state = st;
    QF_CHECK(qfi_layer_norm_geometry(cu_geo_graph(c, n), n, &st->outer, &st->len));
    st->eps = ((const qfi_layer_norm_params *)n->params)->epsilon;
    const qf_value *sv = qfi_in(c->g, n, 1), *bv = qfi_in(c->g, n, 2);
    const int64_t ns = qf_value_numel(sv), nb = bv ? qf_value_numel(bv) : 0;
    st->scalar_scale = ns == 1;
    st->scalar_bias = nb == 1;
    st->has_bias = bv != NULL;
    st->bias_at = ns;
    float *h = (float *)qfi_calloc((size_t)(ns + nb + 1), sizeof(float));
    if (!h) return QF_ERR_NOMEM;
    for (int64_t i = 0; i < ns; i++) h[i] = const_f(sv, i);
    for (int64_t i = 0; i < nb; i++) h[ns + i] = const_f(bv, i);
    qf_status s = cu_upload(c, h, (size_t)(ns + nb) * sizeof(float), (void **)&st->sb);
    free(h);
    QF_CHECK(s);
    const qf_graph *g = c->g;
    if (L->late_in[0] >= 0) { /* the DequantizeLinear that made the input, taken in */
        qfi_qdq_geom geo;
        QF_CHECK(qfi_qdq_geometry(g, &g->nodes[g->values[n->in[0]].producer], &geo));
        st->dq_half = true;
        st->in_q = cu_elem{QF_I8, geo.s1, geo.z1};
    } else {
        cu_need_input_as(c, L, 0, CU_LOGICAL);
    }
    if (L->out_override >= 0) { /* the QuantizeLinear that read the output, taken in */
        int32_t z;
        QF_CHECK(qfi_qdq_params(g, &g->nodes[g->values[L->out_override].producer], &st->out_q.scale, &z));
        st->q_half = true;
        st->out_q.dt = QF_I8;
        st->out_q.zp = z;
    }
    void *ptr;
    return cu_value_ptr(c, st->dq_half ? L->late_in[0] : n->in[0], &ptr);
}

static qf_status layer_norm_launch(cu_engine *c, cu_layer *L, cudaStream_t s)
{
    const ln_state *p = (const ln_state *)L->state;
    int yv = cu_out_value(L, 0);
    const void *x;
    void *y;
    if (p->dq_half) QF_CHECK(cu_value_ptr(c, L->late_in[0], (void **)&x));
    else QF_CHECK(cu_input_as(c, L, 0, CU_LOGICAL, s, &x));
    QF_CHECK(cu_value_ptr(c, yv, &y));
    if (!p->outer || !p->len) return QF_OK;
    const cu_elem ye = p->q_half ? p->out_q : cu_elem_of(c, L->n, yv),
                  xe = p->dq_half ? p->in_q : cu_elem_of(c, L->n, L->n->in[0]);
    if (vec_fits(p, y, ye, x, xe)) {
        if (xe.dt == QF_F16 && ye.dt == QF_F16) launch_vec_lanes<__half, __half>(s, y, ye, x, xe, p);
        else if (xe.dt == QF_F16) launch_vec_lanes<__half, int8_t>(s, y, ye, x, xe, p);
        else if (ye.dt == QF_F16) launch_vec_lanes<int8_t, __half>(s, y, ye, x, xe, p);
        else launch_vec_lanes<int8_t, int8_t>(s, y, ye, x, xe, p);
        CU_LAUNCHED();
        return QF_OK;
    }
    if (p->len <= 32 * 32) {
        /* 8 lanes a row up to 128 elements, 16 up to 256, a warp beyond; the
         * fewest elements a lane (4, 8, 12, 16, 24 or 32) that cover the row */
        const int64_t n = p->len;
        if (n <= 32) launch_rows<8, 4>(s, y, ye, x, xe, p);
        else if (n <= 64) launch_rows<8, 8>(s, y, ye, x, xe, p);
        else if (n <= 96) launch_rows<8, 12>(s, y, ye, x, xe, p);
        else if (n <= 128) launch_rows<8, 16>(s, y, ye, x, xe, p);
        else if (n <= 192) launch_rows<16, 12>(s, y, ye, x, xe, p);
        else if (n <= 256) launch_rows<16, 16>(s, y, ye, x, xe, p);
        else if (n <= 384) launch_rows<32, 12>(s, y, ye, x, xe, p);
        else if (n <= 512) launch_rows<32, 16>(s, y, ye, x, xe, p);
        else if (n <= 768) launch_rows<32, 24>(s, y, ye, x, xe, p);
        else launch_rows<32, 32>(s, y, ye, x, xe, p);
        CU_LAUNCHED();
        return QF_OK;
    }
    unsigned blocks = p->outer > 65536 ? 65536 : (unsigned)p->outer;
    layer_norm_kernel<<<blocks, LN_THREADS, 0, s>>>(y, ye, x, xe, p->sb, *p);
    CU_LAUNCHED();
    return QF_OK;
}

const cu_op cu_op_layer_norm = {layer_norm_prepare, NULL, layer_norm_launch, CU_RULE_LOGICAL, CU_ALL_PRECISIONS,
                                layer_norm_check};
