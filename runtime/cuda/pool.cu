/* Pooling on the device: MaxPool and AveragePool over NHWC 2-D images (one
 * thread per output element or per 8 or 16 bytes of channels, channels
 * fastest so reads coalesce), and
 * GlobalAveragePool / GlobalMaxPool (one thread per (image, channel); in NHWC
 * the average takes a block per 32 channels of an image). The
 * arithmetic is runtime/cpu/pool.c's and global_pool.c's: sums in double,
 * padding never wins a max, the same divisor rules. */
#include "cuda_internal.h"
#include <type_traits>
#include <float.h>

typedef struct pool_geo {
    int64_t N, C, H, W, Ho, Wo;
    int kh, kw, sh, sw, ph, pw, dh, dw;
    int64_t pe_h, pe_w;     /* padding after the last element */
    bool is_max, count_include_pad;
} pool_geo;

__global__ void pool_kernel(void *y, cu_elem ye, const void *x, cu_elem xe, pool_geo p, int64_t total)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        /* y is (N, Ho, Wo, C) */
        int64_t c = i % p.C, r = i / p.C;
        int64_t ow = r % p.Wo;
        r /= p.Wo;
        int64_t oh = r % p.Ho, n = r / p.Ho;
        float mx = -FLT_MAX;
        double sum = 0.0;
        int64_t n_in = 0, n_padded = 0;
        for (int kh = 0; kh < p.kh; kh++) {
            int64_t ih = oh * p.sh - p.ph + (int64_t)kh * p.dh;
            bool inh = ih < p.H + p.pe_h, vh = ih >= 0 && ih < p.H;
            for (int kw = 0; kw < p.kw; kw++) {
                int64_t iw = ow * p.sw - p.pw + (int64_t)kw * p.dw;
                bool inw = iw < p.W + p.pe_w, vw = iw >= 0 && iw < p.W;
                n_padded += inh && inw;
                if (!(vh && vw)) continue;
                float v = cu_load(x, xe, ((n * p.H + ih) * p.W + iw) * p.C + c);
                n_in++;
                sum += v;
                if (v > mx) mx = v;
            }
        }
        int64_t div = p.count_include_pad ? n_padded : n_in;
        float out = p.is_max ? mx : div ? (float)(sum / (double)div) : 0.0f;
        cu_store(y, ye, i, out);
    }
}

/* MaxPool that keeps the dtype (and int8 scale and zero point): the max of
 * the stored values is the stored max, so no conversion; 32-bit indexing.
 * The start value is what the CPU's -FLT_MAX becomes in the dtype (-128
 * whatever the zero point). */
__device__ __forceinline__ bool greater(float a, float b) { return a > b; }
__device__ __forceinline__ bool greater(__half a, __half b) { return __half2float(a) > __half2float(b); }
__device__ __forceinline__ bool greater(int8_t a, int8_t b) { return a > b; }

/* Lane-wise max, comparisons as greater(). */
template <typename T, int V> __device__ __forceinline__ void max_into(cu_vec<T, V> &m, const cu_vec<T, V> &v)
{
#pragma unroll
    for (int j = 0; j < V; j++)
        if (greater(v.e[j], m.e[j])) m.e[j] = v.e[j];
}
/* one lane: as a select (the branch above stays a branch here) */
template <typename T> __device__ __forceinline__ void max_into(cu_vec<T, 1> &m, const cu_vec<T, 1> &v)
{
    m.e[0] = greater(v.e[0], m.e[0]) ? v.e[0] : m.e[0];
}
/* int8, 4 to 16 bytes: four signed byte maxima per instruction */
template <int V, typename std::enable_if<V % 4 == 0, int>::type = 0>
__device__ __forceinline__ void max_into(cu_vec<int8_t, V> &m, const cu_vec<int8_t, V> &v)
{
    uint32_t *mw = (uint32_t *)m.e;
    const uint32_t *vw = (const uint32_t *)v.e;
#pragma unroll
    for (int j = 0; j < V / 4; j++) mw[j] = __vmaxs4(mw[j], vw[j]);
}

/* V consecutive channels a thread: 1, or 4 to 16 bytes (one load per tap
 * instead of V, the same comparisons per lane) where C allows. */
template <typename T, int V>
__global__ void maxpool_kernel(T *y, const T *x, pool_geo p, int total, T lowest)
{
    const int Cv = (int)p.C / V, Wo = (int)p.Wo, Ho = (int)p.Ho, H = (int)p.H, W = (int)p.W;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        int cv = i % Cv, r = i / Cv;
        int ow = r % Wo;
        r /= Wo;
        int oh = r % Ho, n = r / Ho;
        cu_vec<T, V> mx;
#pragma unroll
        for (int j = 0; j < V; j++) mx.e[j] = lowest;
        for (int kh = 0; kh < p.kh; kh++) {
            int ih = oh * p.sh - p.ph + kh * p.dh;
            if (ih < 0 || ih >= H) continue;
            for (int kw = 0; kw < p.kw; kw++) {
                int iw = ow * p.sw - p.pw + kw * p.dw;
                if (iw < 0 || iw >= W) continue;
                cu_vec<T, V> v;
                v.load(x, ((n * H + ih) * W + iw) * Cv + cv);
                max_into(mx, v);
            }
        }
        mx.store(y, i);
    }
}

/* AveragePool of int8 levels or halves, 8 consecutive channels a thread
 * (one load per tap instead of 8; 32-bit indexing): pool_kernel's
 * arithmetic per lane, the sum in double, the same divisor. pool_kernel's
 * per-element index arithmetic held DenseNet's INT8 transition pools to a
 * twelfth of the memory's bandwidth. */
template <typename TX, typename TY>
__global__ void avgpool_vec_kernel(TY *y, cu_elem ye, const TX *x, cu_elem xe, pool_geo p, int total)
{
    const int Cv = (int)p.C / 8, Wo = (int)p.Wo, Ho = (int)p.Ho, H = (int)p.H, W = (int)p.W;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        int cv = i % Cv, r = i / Cv;
        int ow = r % Wo;
        r /= Wo;
        int oh = r % Ho, n = r / Ho;
        double sum[8] = {};
        int n_in = 0, n_padded = 0;
        for (int kh = 0; kh < p.kh; kh++) {
            int ih = oh * p.sh - p.ph + kh * p.dh;
            bool inh = ih < H + p.pe_h, vh = ih >= 0 && ih < H;
            for (int kw = 0; kw < p.kw; kw++) {
                int iw = ow * p.sw - p.pw + kw * p.dw;
                n_padded += inh && iw < W + p.pe_w;
                if (!vh || iw < 0 || iw >= W) continue;
                cu_vec<TX, 8> v;
                v.load(x, ((n * H + ih) * W + iw) * Cv + cv);
                n_in++;
#pragma unroll
                for (int j = 0; j < 8; j++) sum[j] += cu_lane_in(v.e[j], xe);
            }
        }
        const int div = p.count_include_pad ? n_padded : n_in;
        cu_vec<TY, 8> out;
#pragma unroll
        for (int j = 0; j < 8; j++) out.e[j] = cu_lane_out<TY>(div ? (float)(sum[j] / (double)div) : 0.0f, ye);
        out.store(y, i);
    }
}

static unsigned grid_for(int64_t n)
{
    unsigned b = cu_blocks(n, 256);
    return b > 65536 ? 65536 : b;
}

/* The dtype-keeping MaxPool, 16, 8 or 4 bytes of channels a thread where C
 * allows (ShuffleNetV2's stem pool of 24 int8 channels took 0.25 ms at batch
 * 256 a byte a thread). */
template <typename T, int V>
static void launch_maxpool_v(cudaStream_t s, void *y, const void *x, const pool_geo &p, int64_t total, T lowest)
{
    maxpool_kernel<T, V><<<grid_for(total / V), 256, 0, s>>>((T *)y, (const T *)x, p, (int)(total / V), lowest);
}
template <typename T>
static void launch_maxpool(cudaStream_t s, void *y, const void *x, const pool_geo &p, int64_t total, T lowest)
{
    constexpr int V16 = 16 / sizeof(T), V8 = 8 / sizeof(T), V4 = 4 / sizeof(T) > 0 ? 4 / sizeof(T) : 1;
    if (p.C % V16 == 0) launch_maxpool_v<T, V16>(s, y, x, p, total, lowest);
    else if (p.C % V8 == 0) launch_maxpool_v<T, V8>(s, y, x, p, total, lowest);
    else if (p.C % V4 == 0) launch_maxpool_v<T, V4>(s, y, x, p, total, lowest);
    else launch_maxpool_v<T, 1>(s, y, x, p, total, lowest);
}

/* 2-D images of float-like dtypes. */
static qf_status pool_check(const qf_graph *g, const qf_node *n)
{
    const qf_value *x = qfi_in(g, n, 0), *y = qfi_out(g, n, 0);
    if (x->ndim != 4)
        return qf_error(QF_ERR_UNSUPPORTED, "the CUDA engine pools 2-D images only; input %s has %d dims", x->name, x->ndim);
    if (!cu_float_like(g, n, x) || !cu_float_like(g, n, y))
        return qf_error(QF_ERR_UNSUPPORTED, "input %s of dtype %s", x->name, qf_dtype_info(x->dtype)->name);
    return QF_OK;
}

static qf_status pool_prepare(cu_engine *c, cu_layer *L)
{
    const qf_graph *g = c->g;
    const qf_node *n = L->n;
    const qf_value *x = qfi_in(g, n, 0);
    int64_t nc;
    qfi_window w;
    QF_CHECK(qfi_pool_geometry(cu_geo_graph(c, n), n, &nc, &w));
    const qfi_pool_params *pp = (const qfi_pool_params *)n->params;
    pool_geo *p = (pool_geo *)qfi_calloc(1, sizeof *p);
    if (!p) return QF_ERR_NOMEM;
    L->state = p;
    p->N = x->dims[0], p->C = x->dims[1], p->H = w.in[1], p->W = w.in[2], p->Ho = w.out[1], p->Wo = w.out[2];
    p->kh = (int)w.k[1], p->kw = (int)w.k[2], p->sh = (int)w.stride[1], p->sw = (int)w.stride[2];
    p->ph = (int)w.pad[1], p->pw = (int)w.pad[2], p->dh = (int)w.dil[1], p->dw = (int)w.dil[2];
    p->pe_h = w.pad_end[1], p->pe_w = w.pad_end[2];
    p->is_max = pp->is_max;
    p->count_include_pad = pp->count_include_pad;
    cu_need_input_as(c, L, 0, CU_NHWC);
    void *ptr;
    return cu_value_ptr(c, n->in[0], &ptr);
}

static qf_status pool_launch(cu_engine *c, cu_layer *L, cudaStream_t s)
{
    const pool_geo *p = (const pool_geo *)L->state;
    int yv = cu_out_value(L, 0);
    const void *x;
    void *y;
    QF_CHECK(cu_input_as(c, L, 0, CU_NHWC, s, &x));
    QF_CHECK(cu_value_ptr(c, yv, &y));
    int64_t total = p->N * p->Ho * p->Wo * p->C;
    if (!total) return QF_OK;
    const cu_elem xe = cu_elem_of(c, L->n, L->n->in[0]), ye = cu_elem_of(c, L->n, yv);
    const bool direct = p->is_max && cu_elems_alike(xe, ye) &&
                        p->N * p->H * p->W * p->C < INT32_MAX && total < INT32_MAX;
    if (direct) {
        switch (xe.dt) {
        case QF_F16: launch_maxpool(s, y, x, *p, total, __ushort_as_half((unsigned short)0xfc00u)); break;
        case QF_I8: launch_maxpool(s, y, x, *p, total, (int8_t)-128); break;
        default: launch_maxpool(s, y, x, *p, total, -FLT_MAX);
        }
        CU_LAUNCHED();
        return QF_OK;
    }
    const bool lanes = (xe.dt == QF_I8 || xe.dt == QF_F16) && (ye.dt == QF_I8 || ye.dt == QF_F16);
    if (!p->is_max && lanes && p->C % 8 == 0 && p->N * p->H * p->W * p->C < INT32_MAX && total < INT32_MAX) {
        const int nv = (int)(total / 8);
        if (xe.dt == QF_I8 && ye.dt == QF_I8)
            avgpool_vec_kernel<int8_t, int8_t><<<grid_for(nv), 256, 0, s>>>((int8_t *)y, ye, (const int8_t *)x, xe, *p, nv);
        else if (xe.dt == QF_I8)
            avgpool_vec_kernel<int8_t, __half><<<grid_for(nv), 256, 0, s>>>((__half *)y, ye, (const int8_t *)x, xe, *p, nv);
        else if (ye.dt == QF_I8)
            avgpool_vec_kernel<__half, int8_t><<<grid_for(nv), 256, 0, s>>>((int8_t *)y, ye, (const __half *)x, xe, *p, nv);
        else
            avgpool_vec_kernel<__half, __half><<<grid_for(nv), 256, 0, s>>>((__half *)y, ye, (const __half *)x, xe, *p, nv);
        CU_LAUNCHED();
        return QF_OK;
    }
    pool_kernel<<<grid_for(total), 256, 0, s>>>(y, ye, x, xe, *p, total);
    CU_LAUNCHED();
    return QF_OK;
}

const cu_op cu_op_pool = {pool_prepare, NULL, pool_launch, CU_RULE_NHWC, CU_ALL_PRECISIONS, pool_check};

/* ---- global pools --------------------------------------------------------------------------- */

typedef struct gpool_state {
    int64_t N, C, S;
    int64_t sn, sc, ss;     /* element strides of image, channel, spatial position in x */
    bool is_max;
} gpool_state;

__global__ void global_pool_kernel(void *y, cu_elem ye, const void *x, cu_elem xe, gpool_state p)
{
    int64_t total = p.N * p.C;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = i % p.C, n = i / p.C;
        int64_t base = n * p.sn + c * p.sc;
        float out;
        if (p.is_max) {
            float m = p.S ? cu_load(x, xe, base) : 0.0f;
            for (int64_t s = 1; s < p.S; s++) {
                float v = cu_load(x, xe, base + s * p.ss);
                if (v > m) m = v;
            }
            out = m;
        } else {
            double sum = 0.0;
            for (int64_t s = 0; s < p.S; s++) sum += cu_load(x, xe, base + s * p.ss);
            out = p.S ? (float)(sum / (double)p.S) : 0.0f;
        }
        /* y is (N, C) in either layout */
        cu_store(y, ye, i, out);
    }
}

/* GlobalAveragePool over channels-contiguous (NHWC) x: a block takes 32
 * channels of one image, each of its 8 warps every 8th position, and adds the
 * 8 partial sums in a fixed order. In double, sums of int8 or half values
 * are exact whatever their order (the CPU's one-thread-a-channel loop gets
 * the same), and a warp reads 32 neighbouring channels at a time. */
__global__ void global_avg_pool_nhwc_kernel(void *y, cu_elem ye, const void *x, cu_elem xe, gpool_state p,
                                            int64_t cblocks)
{
    __shared__ double part[8][32];
    const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
    const int64_t n = blockIdx.x / cblocks, c = blockIdx.x % cblocks * 32 + tx;
    double acc = 0.0;
    if (c < p.C)
        for (int64_t s = ty; s < p.S; s += 8) acc += cu_load(x, xe, n * p.sn + c + s * p.ss);
    part[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && c < p.C) {
        double sum = 0.0;
        for (int k = 0; k < 8; k++) sum += part[k][tx];
        cu_store(y, ye, n * p.C + c, p.S ? (float)(sum / (double)p.S) : 0.0f);
    }
}

/* Float-like (N, C, ...) tensors. */
static qf_status global_pool_check(const qf_graph *g, const qf_node *n)
{
    const qf_value *x = qfi_in(g, n, 0), *y = qfi_out(g, n, 0);
    if (!cu_float_like(g, n, x) || !cu_float_like(g, n, y) || x->ndim < 2)
        return qf_error(QF_ERR_UNSUPPORTED, "input %s of dtype %s", x->name, qf_dtype_info(x->dtype)->name);
    return QF_OK;
}

static qf_status global_pool_prepare(cu_engine *c, cu_layer *L)
{
    const qf_graph *g = c->g;
    const qf_node *n = L->n;
    const qf_value *x = qfi_in(g, n, 0);
    gpool_state *p = (gpool_state *)qfi_calloc(1, sizeof *p);
    if (!p) return QF_ERR_NOMEM;
    L->state = p;
    p->N = x->dims[0];
    p->C = x->dims[1];
    p->S = p->N * p->C != 0 ? qf_value_numel(x) / (p->N * p->C) : 0;
    p->is_max = n->op == QF_OP_GLOBAL_MAX_POOL;
    int64_t st[QF_MAX_DIMS];
    cu_strides(c, n->in[0], st);
    p->sn = st[0];
    p->sc = st[1];
    /* the spatial dims walk as one: stride of the last spatial dim in either layout */
    p->ss = x->ndim > 2 ? st[x->ndim - 1] : 1;
    void *ptr;
    return cu_value_ptr(c, n->in[0], &ptr);
}

static qf_status global_pool_launch(cu_engine *c, cu_layer *L, cudaStream_t s)
{
    const gpool_state *p = (const gpool_state *)L->state;
    int yv = cu_out_value(L, 0);
    void *x, *y;
    QF_CHECK(cu_value_ptr(c, L->n->in[0], &x));
    QF_CHECK(cu_value_ptr(c, yv, &y));
    if (!p->N || !p->C) return QF_OK;
    const cu_elem ye = cu_elem_of(c, L->n, yv), xe = cu_elem_of(c, L->n, L->n->in[0]);
    const int64_t cblocks = (p->C + 31) / 32;
    /* a block per 32 channels pays where a thread would walk many positions:
     * EfficientNet-B0's 112x112 pool took 1.2 ms one thread a channel
     * (b256), while ResNet-50's 7x7 one rose from 0.025 to 0.037 ms */
    if (!p->is_max && p->sc == 1 && p->ss == p->C && p->S >= 256 && p->N * cblocks <= INT32_MAX)
        global_avg_pool_nhwc_kernel<<<(unsigned)(p->N * cblocks), 256, 0, s>>>(y, ye, x, xe, *p, cblocks);
    else
        global_pool_kernel<<<grid_for(p->N * p->C), 256, 0, s>>>(y, ye, x, xe, *p);
    CU_LAUNCHED();
    return QF_OK;
}

const cu_op cu_op_global_pool = {global_pool_prepare, NULL, global_pool_launch, CU_RULE_NHWC, CU_ALL_PRECISIONS,
                                  global_pool_check};
