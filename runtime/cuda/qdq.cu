/* Precision conversions on the device: QuantizeLinear (f32/f16 -> int8, x/s
 * rounded half to even, plus the zero point, saturated: lib/quant_math.h's
 * qfi_quantize_f32_zp), DequantizeLinear (int8 -> f32/f16, (q - z)*s; per
 * tensor, or per axis with constant scale and zero-point vectors as exported
 * Q/DQ weights carry) and Cast between f32 and f16. Outputs keep their
 * input's layout. */
#include "cuda_internal.h"

typedef struct qdq_state {
    cu_elem q;              /* the int8 side: i8, scale, zero point (per tensor) */
    const float *scales;    /* per-axis DequantizeLinear: device, `channels` scales */
    const int8_t *zps;      /* and their zero points (device; zeros where the model gives none) */
    int64_t channels, inner;
} qdq_state;

/* A float side of dtype dt, as cu_load and cu_store read and write it. */
static cu_elem float_elem(qf_dtype dt) { return cu_elem{dt, 1.0f, 0}; }

static unsigned grid_for(int64_t n)
{
    unsigned b = cu_blocks(n, 256);
    return b > 32768 ? 32768 : b;
}

/* y = x quantized as q says; dequantized: x = y read as q says (cu_load and
 * cu_store hold lib/quant_math.h's conversions). */
__global__ void convert_kernel(void *y, cu_elem ye, const void *x, cu_elem xe, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        cu_store(y, ye, i, cu_load(x, xe, i));
}

/* cu_load's and cu_store's conversions, by element type */
__device__ __forceinline__ float elem_in(int8_t q, cu_elem e) { return qfi_dequantize_i8_zp(q, e.scale, e.zp); }
__device__ __forceinline__ float elem_in(__half h, cu_elem) { return __half2float(h); }
__device__ __forceinline__ float elem_in(float f, cu_elem) { return f; }
__device__ __forceinline__ void elem_out(int8_t &o, float v, cu_elem e) { o = qfi_quantize_f32_zp(v, e.scale, e.zp); }
__device__ __forceinline__ void elem_out(__half &o, float v, cu_elem) { o = __float2half_rn(v); }
__device__ __forceinline__ void elem_out(float &o, float v, cu_elem) { o = v; }

/* convert_kernel's work, V elements a thread (16 bytes of the wider side, read and
 * written as vectors; TI and TO are int8_t, __half or float), each converted
 * as cu_load and cu_store do: the passes between INT8 and FP16 layers are
 * bound by memory, and one element a thread left most of it unused (7.3 ms of
 * ViT-B/16's 57 a batch went to its QuantizeLinear and DequantizeLinear nodes). */
template <typename TI, typename TO, int V>
__global__ void convert_vec_kernel(TO *y, cu_elem ye, const TI *x, cu_elem xe, int64_t nvec)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nvec; i += (int64_t)gridDim.x * blockDim.x) {
        cu_vec<TI, V> a;
        cu_vec<TO, V> b;
        a.load(x + i * V);
#pragma unroll
        for (int k = 0; k < V; k++) elem_out(b.e[k], elem_in(a.e[k], xe), ye);
        b.store(y + i * V);
    }
}

/* Launches convert_vec_kernel over the n / V whole vectors; returns the elements done. */
template <typename TI, typename TO>
static int64_t launch_vec(cudaStream_t s, void *y, cu_elem ye, const void *x, cu_elem xe, int64_t n)
{
    constexpr int V = 16 / (sizeof(TI) > sizeof(TO) ? sizeof(TI) : sizeof(TO));
    if ((uintptr_t)x % (V * sizeof(TI)) || (uintptr_t)y % (V * sizeof(TO)) || n < V) return 0;
    convert_vec_kernel<TI, TO, V><<<grid_for(n / V), 256, 0, s>>>((TO *)y, ye, (const TI *)x, xe, n / V);
    return n / V * V;
}

template <typename TI> static int64_t launch_vec_to(cudaStream_t s, void *y, cu_elem ye, const void *x, cu_elem xe, int64_t n)
{
    switch (qf_dtype_info(ye.dt)->size) {
    case 1: return launch_vec<TI, int8_t>(s, y, ye, x, xe, n);
    case 2: return launch_vec<TI, __half>(s, y, ye, x, xe, n);
    default: return launch_vec<TI, float>(s, y, ye, x, xe, n);
    }
}

/* n elements of x (f32, f16 or int8 as xe says) converted into y: whole
 * vectors where both addresses allow, the rest one a thread. */
static qf_status convert(cudaStream_t s, void *y, cu_elem ye, const void *x, cu_elem xe, int64_t n)
{
    const size_t ei = qf_dtype_info(xe.dt)->size, eo = qf_dtype_info(ye.dt)->size;
    int64_t done;
    switch (ei) {
    case 1: done = launch_vec_to<int8_t>(s, y, ye, x, xe, n); break;
    case 2: done = launch_vec_to<__half>(s, y, ye, x, xe, n); break;
    default: done = launch_vec_to<float>(s, y, ye, x, xe, n); break;
    }
    if (done) CU_LAUNCHED();
    if (done < n) {
        convert_kernel<<<grid_for(n - done), 256, 0, s>>>((char *)y + done * (int64_t)eo, ye, (const char *)x + done * (int64_t)ei,
                                                          xe, n - done);
        CU_LAUNCHED();
    }
    return QF_OK;
}

/* Per axis: element i of x viewed as (outer, channels, inner) uses channel (i / inner) % channels. */
__global__ void dequantize_axis_kernel(void *y, cu_elem ye, const int8_t *q, const float *s, const int8_t *z,
                                       int64_t channels, int64_t inner, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = (i / inner) % channels;
        cu_store(y, ye, i, qfi_dequantize_i8_zp(q[i], s[c], z[c]));
    }
}

/* Float to int8 or int8 to float. */
static qf_status qdq_check(const qf_graph *g, const qf_node *n)
{
    const qf_value *x = qfi_in(g, n, 0), *y = qfi_out(g, n, 0);
    if (n->op == QF_OP_QUANTIZE_LINEAR) {
        if ((x->dtype != QF_F32 && x->dtype != QF_F16) || y->dtype != QF_I8)
            return qf_error(QF_ERR_UNSUPPORTED, "quantizing %s to %s", qf_dtype_info(x->dtype)->name,
                            qf_dtype_info(y->dtype)->name);
    } else if (x->dtype != QF_I8 || (y->dtype != QF_F32 && y->dtype != QF_F16)) {
        return qf_error(QF_ERR_UNSUPPORTED, "dequantizing %s to %s", qf_dtype_info(x->dtype)->name,
                        qf_dtype_info(y->dtype)->name);
    }
    return QF_OK;
}

static qf_status qdq_prepare(cu_engine *c, cu_layer *L)
{
    const qf_graph *g = c->g;
    const qf_node *n = L->n;
    qdq_state *st = (qdq_state *)qfi_calloc(1, sizeof *st);
    if (!st) return QF_ERR_NOMEM;
    L->state = st;
    if (n->op == QF_OP_DEQUANTIZE_LINEAR) {
        qfi_qdq_geom geo;
        QF_CHECK(qfi_qdq_geometry(g, n, &geo));
        st->q = cu_elem{QF_I8, geo.s1, geo.z1};
        st->channels = geo.channels;
        st->inner = geo.inner;
        if (geo.channels > 1) {
            if (cu_is_nhwc(c, n->in[0]))
                return qf_error(QF_ERR_UNSUPPORTED, "per-axis DequantizeLinear of an NHWC activation");
            QF_CHECK(cu_upload(c, geo.s, (size_t)geo.channels * sizeof(float), (void **)&st->scales));
            int8_t *hz = (int8_t *)qfi_calloc((size_t)geo.channels, 1);
            if (!hz) return QF_ERR_NOMEM;
            if (geo.z) memcpy(hz, geo.z, (size_t)geo.channels);
            qf_status s = cu_upload(c, hz, (size_t)geo.channels, (void **)&st->zps);
            free(hz);
            QF_CHECK(s);
        }
    } else {
        int32_t z;
        QF_CHECK(qfi_qdq_params(g, n, &st->q.scale, &z));
        st->q.dt = QF_I8;
        st->q.zp = z;
    }
    void *p;
    return cu_value_ptr(c, n->in[0], &p);
}

static qf_status qdq_launch(cu_engine *c, cu_layer *L, cudaStream_t s)
{
    const qf_graph *g = c->g;
    const qf_node *n = L->n;
    const qdq_state *st = (const qdq_state *)L->state;
    const qf_value *x = qfi_in(g, n, 0), *y = qfi_out(g, n, 0);
    void *xp, *yp;
    QF_CHECK(cu_value_ptr(c, n->in[0], &xp));
    QF_CHECK(cu_value_ptr(c, cu_out_value(L, 0), &yp));
    int64_t cnt = qf_value_numel(x);
    if (!cnt) return QF_OK;
    if (n->op == QF_OP_QUANTIZE_LINEAR) return convert(s, yp, st->q, xp, float_elem(x->dtype), cnt);
    if (!st->scales) return convert(s, yp, float_elem(y->dtype), xp, st->q, cnt);
    dequantize_axis_kernel<<<grid_for(cnt), 256, 0, s>>>(yp, float_elem(y->dtype), (const int8_t *)xp, st->scales, st->zps,
                                                         st->channels, st->inner, cnt);
    CU_LAUNCHED();
    return QF_OK;
}

const cu_op cu_op_qdq = {qdq_prepare, NULL, qdq_launch, CU_RULE_FOLLOW, CU_ALL_PRECISIONS, qdq_check};

/* ---- Cast (f32 <-> f16; same-type copies) ------------------------------------------------------ */

/* Between f32 and f16, or to the same dtype. */
static qf_status cast_check(const qf_graph *g, const qf_node *n)
{
    const qf_value *x = qfi_in(g, n, 0), *y = qfi_out(g, n, 0);
    bool ok = x->dtype == y->dtype || ((x->dtype == QF_F32 || x->dtype == QF_F16) && (y->dtype == QF_F32 || y->dtype == QF_F16));
    if (!ok)
        return qf_error(QF_ERR_UNSUPPORTED, "Cast from %s to %s has no CUDA kernel", qf_dtype_info(x->dtype)->name,
                        qf_dtype_info(y->dtype)->name);
    return QF_OK;
}

static qf_status cast_prepare(cu_engine *c, cu_layer *L)
{
    void *p;
    return cu_value_ptr(c, L->n->in[0], &p);
}

static qf_status cast_launch(cu_engine *c, cu_layer *L, cudaStream_t s)
{
    const qf_graph *g = c->g;
    const qf_value *x = qfi_in(g, L->n, 0), *y = qfi_out(g, L->n, 0);
    void *xp, *yp;
    QF_CHECK(cu_value_ptr(c, L->n->in[0], &xp));
    QF_CHECK(cu_value_ptr(c, cu_out_value(L, 0), &yp));
    int64_t cnt = qf_value_numel(x);
    if (!cnt) return QF_OK;
    if (x->dtype == y->dtype) {
        CU_CHECK(cudaMemcpyAsync(yp, xp, qf_value_bytes(x), cudaMemcpyDeviceToDevice, s));
        return QF_OK;
    }
    return convert(s, yp, float_elem(y->dtype), xp, float_elem(x->dtype), cnt);
}

const cu_op cu_op_cast = {cast_prepare, NULL, cast_launch, CU_RULE_FOLLOW, CU_ALL_PRECISIONS, cast_check};
