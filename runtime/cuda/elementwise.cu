/* Elementwise ops on the device: the activations and functions (Relu,
 * LeakyRelu, Clip, Sigmoid, HardSigmoid, HardSwish, Tanh, Erf, Gelu, Sqrt),
 * the broadcasting binary ops (Add, Sub, Mul, Div, PRelu, Pow, float Mod) and
 * inference BatchNormalization. Every element
 * is read as float (f16 exactly, int8 as q*scale) and written back rounded to
 * half or quantized, as the CPU engine's lowp.c does; the arithmetic is the
 * CPU kernels' (runtime/cpu/unary.c, binary.c, batchnorm.c), one IEEE
 * rounding per operation (no contraction into FMA where the CPU has none),
 * except that CUDA's powf may differ from the C library's in the last bits. */
#include "cuda_internal.h"
#include "float_math.h" /* Sigmoid, Tanh, Erf, Gelu: as the CPU engine computes them */
#include <float.h>
#include <type_traits>

/* ---- activations ------------------------------------------------------------------------ */

__global__ void unary_kernel(void *y, cu_elem ye, const void *x, cu_elem xe, int64_t n, cu_unary_params p)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        cu_store(y, ye, i, cu_unary_value(p, cu_load(x, xe, i)));
}

/* The same for float or half in and out, 16 bytes a thread (the n / V whole
 * vectors; unary_kernel takes the tail): these passes are bound by memory,
 * and two-byte accesses reached a sixth of its bandwidth (MobileNetV2's
 * FP16 ReLU6 passes, 4.0 of 8.8 ms a batch). Same arithmetic per element. */
template <typename T>
__global__ void unary_vec_kernel(T *y, const T *x, int64_t nvec, cu_unary_params p)
{
    constexpr int V = 16 / sizeof(T);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nvec; i += (int64_t)gridDim.x * blockDim.x) {
        union {
            uint4 raw;
            T e[V];
        } u;
        u.raw = ((const uint4 *)x)[i];
#pragma unroll
        for (int k = 0; k < V; k++) u.e[k] = (T)cu_unary_value(p, (float)u.e[k]);
        ((uint4 *)y)[i] = u.raw;
    }
}

static unsigned grid_for(int64_t n)
{
    unsigned b = cu_blocks(n, 256);
    return b > 32768 ? 32768 : b;
}

/* Whole 16-byte vectors of x -> y through the vector kernel; the elements
 * past them (and all of an unaligned or mixed-dtype pass) through
 * unary_kernel. */
static qf_status unary_run(cudaStream_t s, void *y, cu_elem ye, const void *x, cu_elem xe, int64_t cnt, const cu_unary_params &p)
{
    int64_t done = 0;
    if (xe.dt == ye.dt && (xe.dt == QF_F16 || xe.dt == QF_F32) && ((uintptr_t)x | (uintptr_t)y) % 16 == 0) {
        const int64_t per = 16 / (int64_t)qf_dtype_info(xe.dt)->size, nvec = cnt / per;
        if (nvec) {
            if (xe.dt == QF_F16) unary_vec_kernel<__half><<<grid_for(nvec), 256, 0, s>>>((__half *)y, (const __half *)x, nvec, p);
            else unary_vec_kernel<float><<<grid_for(nvec), 256, 0, s>>>((float *)y, (const float *)x, nvec, p);
            CU_LAUNCHED();
        }
        done = nvec * per;
    }
    if (done < cnt) {
        const size_t xs = qf_dtype_info(xe.dt)->size, ys = qf_dtype_info(ye.dt)->size;
        unary_kernel<<<grid_for(cnt - done), 256, 0, s>>>((char *)y + done * ys, ye, (const char *)x + done * xs, xe,
                                                         cnt - done, p);
        CU_LAUNCHED();
    }
    return QF_OK;
}

qf_status cu_act_inplace(cudaStream_t s, void *y, qf_dtype dt, int64_t n, qf_act act, bool gated)
{
    cu_unary_params p;
    QF_CHECK(cu_act_params(act, gated, dt, &p));
    if (n == 0) return QF_OK;
    const cu_elem e = {dt, 0.0f};
    return unary_run(s, y, e, y, e, n, p);
}

qf_status cu_act_params(qf_act act, bool gated, qf_dtype dt, cu_unary_params *p)
{
    memset(p, 0, sizeof *p);
    switch (act) {
    case QF_ACT_SIGMOID: p->op = QF_OP_SIGMOID; break;
    case QF_ACT_SILU: p->op = QF_OP_SIGMOID, p->times_x = true; break;
    case QF_ACT_HARD_SWISH:
        /* one HardSwish node, or x times a HardSigmoid node */
        p->op = gated ? QF_OP_HARD_SIGMOID : QF_OP_HARD_SWISH, p->times_x = gated, p->alpha = 1.0f / 6.0f, p->beta = 0.5f;
        break;
    default: return qf_error(QF_ERR_INVALID, "no fused activation kind %d", (int)act);
    }
    /* the gate node's half output, then the Mul's product: the two nodes' roundings */
    p->gate_half = p->times_x && dt == QF_F16;
    return QF_OK;
}

/* Float-like operands (cu_float_like) and, for Clip, constant bounds. */
static qf_status unary_check(const qf_graph *g, const qf_node *n)
{
    const qf_value *x = qfi_in(g, n, 0), *y = qfi_out(g, n, 0);
    if (!cu_float_like(g, n, x) || !cu_float_like(g, n, y))
        return qf_error(QF_ERR_UNSUPPORTED, "no CUDA kernel for dtype %s at precision %d", qf_dtype_info(x->dtype)->name,
                        (int)n->precision);
    float lo, hi;
    return n->op == QF_OP_CLIP ? qfi_clip_bounds(g, n, &lo, &hi) : QF_OK;
}

static qf_status unary_prepare(cu_engine *c, cu_layer *L)
{
    cu_unary_params *p = (cu_unary_params *)qfi_calloc(1, sizeof *p);
    if (!p) return QF_ERR_NOMEM;
    L->state = p;
    QF_CHECK(cu_unary_params_of(c->g, L->n, p));
    void *ptr;
    return cu_value_ptr(c, L->n->in[0], &ptr);
}

qf_status cu_unary_params_of(const qf_graph *g, const qf_node *n, cu_unary_params *p)
{
    const qfi_unary_params *up = (const qfi_unary_params *)n->params;
    memset(p, 0, sizeof *p);
    p->op = n->op;
    p->alpha = up->alpha;
    p->beta = up->beta;
    p->lo = up->lo;
    p->hi = up->hi;
    p->tanh_approx = up->tanh_approx;
    return n->op == QF_OP_CLIP ? qfi_clip_bounds(g, n, &p->lo, &p->hi) : QF_OK;
}

static qf_status unary_launch(cu_engine *c, cu_layer *L, cudaStream_t s)
{
    const qf_graph *g = c->g;
    const qf_node *n = L->n;
    int xv = n->in[0], yv = cu_out_value(L, 0);
    void *x, *y;
    QF_CHECK(cu_value_ptr(c, xv, &x));
    QF_CHECK(cu_value_ptr(c, yv, &y));
    int64_t cnt = qf_value_numel(&g->values[xv]);
    if (!cnt) return QF_OK;
    const cu_elem xe = cu_elem_of(c, n, xv), ye = cu_elem_of(c, n, yv);
    return unary_run(s, y, ye, x, xe, cnt, *(const cu_unary_params *)L->state);
}

const cu_op cu_op_unary = {unary_prepare, NULL, unary_launch, CU_RULE_FOLLOW, CU_ALL_PRECISIONS, unary_check};

/* ---- binary ops with numpy broadcasting ------------------------------------------------------ */

/* The output is walked contiguously in its device layout; each operand steps
 * by its own strides along those dims (0 where broadcast). */
typedef struct bin_desc {
    int nd;
    int64_t dims[QF_MAX_DIMS];
    int64_t sa[QF_MAX_DIMS], sb[QF_MAX_DIMS];
} bin_desc;

typedef struct bin_state {
    bin_desc d;
    int64_t total;
    bool flat;              /* both operands walk with the output */
    /* The vector path: operand `full` walks with the output, the other one
     * (`part`) reads element (i / (mid * inner)) * so + i % inner * si, i.e.
     * per image and channel in NHWC (the squeeze-excitation gate), per
     * channel (a bias), or the whole of it; vectors of V along inner. */
    bool vec, swapped;      /* swapped: a is the partial operand (Add, Mul only) */
    int64_t mid, inner, so, si;
} bin_state;

__device__ __forceinline__ float binary_apply(int op, float x, float y)
{
    switch (op) {
    case QF_OP_ADD: return __fadd_rn(x, y);
    case QF_OP_SUB: return __fsub_rn(x, y);
    case QF_OP_MUL: return __fmul_rn(x, y);
    case QF_OP_DIV: return __fdiv_rn(x, y);
    case QF_OP_POW: return powf(x, y);
    case QF_OP_MOD: return fmodf(x, y); /* exact, as the C library's (float Mod has fmod = 1) */
    default: return x < 0.0f ? __fmul_rn(x, y) : x; /* PRelu */
    }
}

__global__ void binary_flat_kernel(void *z, cu_elem ze, const void *a, cu_elem ae, const void *b, cu_elem be,
                                   int64_t n, int op)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        cu_store(z, ze, i, binary_apply(op, cu_load(a, ae, i), cu_load(b, be, i)));
}

/* I: the index type, 32 bits where every offset fits (cu_index_fits): the
 * divisions per element cost several times less than 64-bit ones (Swin-T's
 * attention-mask and bias adds, 0.8-1.2 ms each at batch 256 with 64 bits). */
template <typename I>
__global__ void binary_kernel(void *z, cu_elem ze, const void *a, cu_elem ae, const void *b, cu_elem be, bin_desc d,
                              int64_t n, int op)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        I r = (I)i, oa = 0, ob = 0;
        for (int k = d.nd - 1; k >= 0; k--) {
            I q = r / (I)d.dims[k], idx = r - q * (I)d.dims[k];
            oa += idx * (I)d.sa[k];
            ob += idx * (I)d.sb[k];
            r = q;
        }
        cu_store(z, ze, i, binary_apply(op, cu_load(a, ae, (int64_t)oa), cu_load(b, be, (int64_t)ob)));
    }
}

/* The vector path's element index e split into its outer step (e / (mid *
 * inner)) and its place along inner (e % inner): by multiply-high with 32-bit
 * indices (e < 2^31), two integer divisions a vector cost as much as its
 * arithmetic; by division with 64-bit ones. */
template <typename I> struct bin_index {
    I mid_inner, inner;
    cu_fast_div d_mid_inner, d_inner;
    __device__ __forceinline__ I outer(I e) const
    {
        if constexpr (sizeof(I) == 4) return (I)cu_div_by((int)e, d_mid_inner);
        else return e / mid_inner;
    }
    __device__ __forceinline__ I in_inner(I e) const
    {
        if constexpr (sizeof(I) == 4) return e - (I)cu_div_by((int)e, d_inner) * inner;
        else return e % inner;
    }
};
template <typename I> static bin_index<I> make_bin_index(int64_t mid, int64_t inner)
{
    bin_index<I> ix;
    ix.mid_inner = (I)(mid * inner), ix.inner = (I)inner;
    ix.d_mid_inner = cu_make_fast_div(sizeof(I) == 4 ? (uint32_t)(mid * inner) : 1);
    ix.d_inner = cu_make_fast_div(sizeof(I) == 4 ? (uint32_t)inner : 1);
    return ix;
}

/* Half, float or int8 operands of one type T (int8 read as cu_load reads
 * it, with each operand's own scale and zero point: fe for `full`, pe for
 * `part`), output T or int8 (quantized with
 * ze's scale and zero point, the levels cu_store gives, by the product with
 * z_r = 1/scale where that is safe: qfi_quantize_f32_zp_fast): V
 * consecutive outputs a thread, the same arithmetic as binary_kernel. I:
 * the index type, 32-bit wherever the output allows (a 64-bit division and
 * remainder per vector held EfficientNet's SE gate Mul to 1.7 TB/s). */
template <typename T, typename O, int V, typename I>
__global__ void binary_vec_kernel(O *z, cu_elem ze, float z_r, const T *full, cu_elem fe, const T *part, cu_elem pe,
                                  bool swapped, I nvec, bin_index<I> ix, I so, I si, int op)
{
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < nvec; i += (I)gridDim.x * blockDim.x) {
        const I e = i * V, o = ix.outer(e), c = ix.in_inner(e);
        cu_vec<T, V> a, b;
        a.load(full + e);
        if (si) b.load(part + o * so + c);
#pragma unroll
        for (int v = 0; v < V; v++)
            if (!si) b.e[v] = part[o * so];
        cu_vec<O, V> out;
#pragma unroll
        for (int v = 0; v < V; v++) {
            float x, y;
            if constexpr (sizeof(T) == 1) x = cu_lane_in(a.e[v], fe), y = cu_lane_in(b.e[v], pe);
            else x = to_f32(a.e[v]), y = to_f32(b.e[v]);
            const float r = swapped ? binary_apply(op, y, x) : binary_apply(op, x, y);
            if constexpr (std::is_same<O, int8_t>::value) out.e[v] = qfi_quantize_f32_zp_fast(r, ze.scale, z_r, ze.zp);
            else out.e[v] = (O)r;
        }
        out.store(z + e);
    }
}

/* Strides of operand v along each of the output's logical dims (right-aligned, 0 where broadcast). */
static void operand_strides(const cu_engine *c, int v, const qf_value *z, int64_t *out)
{
    const qf_value *x = &c->g->values[v];
    int64_t st[QF_MAX_DIMS];
    cu_strides(c, v, st);
    for (int d = 0; d < z->ndim; d++) {
        int od = d - (z->ndim - x->ndim);
        out[d] = od < 0 || x->dims[od] == 1 ? 0 : st[od];
    }
}

/* Float-like operands (cu_float_like). */
static qf_status binary_check(const qf_graph *g, const qf_node *n)
{
    for (int k = 0; k < 2; k++)
        if (!cu_float_like(g, n, qfi_in(g, n, k)))
            return qf_error(QF_ERR_UNSUPPORTED, "no CUDA kernel for dtype %s at precision %d",
                            qf_dtype_info(qfi_in(g, n, k)->dtype)->name, (int)n->precision);
    const qf_value *z = qfi_out(g, n, 0);
    if (!cu_float_like(g, n, z))
        return qf_error(QF_ERR_UNSUPPORTED, "no CUDA kernel for output dtype %s", qf_dtype_info(z->dtype)->name);
    return QF_OK;
}

/* Elements a vector of binary_vec_kernel takes for operands of dtype dt
 * (16 bytes of them), 0 if none. int8 operands: YOLOv8n's INT8 bottleneck
 * Adds (quant/assign.c), whose 275 M elements at batch 256 went a byte a
 * thread through binary_flat_kernel. */
static int vector_of(qf_dtype dt) { return dt == QF_F16 ? 8 : dt == QF_F32 ? 4 : dt == QF_I8 ? 16 : 0; }

/* Whether the collapsed walk d is [outer, mid, inner] with operand `full`
 * contiguous and the other one reading per outer step (stride so) and along
 * inner (stride si, 1 or 0), whole vectors along inner: then the vector path. */
static void plan_vector(const cu_engine *c, const cu_layer *L, bin_state *st)
{
    const qf_node *n = L->n;
    const bin_desc *d = &st->d;
    const qf_dtype at = c->g->values[n->in[0]].dtype, bt = c->g->values[n->in[1]].dtype,
                   zt = c->g->values[cu_out_value(L, 0)].dtype;
    const int V = vector_of(at);
    if (!V || at != bt || (zt != at && zt != QF_I8) || d->nd > 3) return;
    int64_t dims[3] = {1, 1, 1}, sa[3] = {0, 0, 0}, sb[3] = {0, 0, 0};
    for (int k = 0; k < d->nd; k++) { /* right-aligned into [outer, mid, inner] */
        int j = 3 - d->nd + k;
        dims[j] = d->dims[k], sa[j] = d->sa[k], sb[j] = d->sb[k];
    }
    const bool commutes = n->op == QF_OP_ADD || n->op == QF_OP_MUL;
    for (int swap = 0; swap < (commutes ? 2 : 1); swap++) {
        const int64_t *f = swap ? sb : sa, *q = swap ? sa : sb;
        const bool full = f[2] == 1 && (dims[1] == 1 || f[1] == dims[2]) && (dims[0] == 1 || f[0] == dims[1] * dims[2]);
        const bool part = (dims[1] == 1 || q[1] == 0) && (q[2] == 1 || q[2] == 0) && (dims[0] > 1 || q[0] == 0);
        if (full && part && dims[2] % V == 0 && (q[2] == 0 || q[0] % V == 0)) {
            st->vec = true;
            st->swapped = swap;
            st->mid = dims[1], st->inner = dims[2], st->so = q[0], st->si = q[2];
            return;
        }
    }
}

static qf_status binary_prepare(cu_engine *c, cu_layer *L)
{
    const qf_graph *g = c->g;
    const qf_node *n = L->n;
    int av = n->in[0], bv = n->in[1], zv = cu_out_value(L, 0);
    const qf_value *z = &g->values[zv];
    bin_state *st = (bin_state *)qfi_calloc(1, sizeof *st);
    if (!st) return QF_ERR_NOMEM;
    L->state = st;
    void *p;
    QF_CHECK(cu_value_ptr(c, av, &p));
    QF_CHECK(cu_value_ptr(c, bv, &p));
    st->total = qf_value_numel(z);
    /* the output's dims in its storage order */
    int order[QF_MAX_DIMS];
    for (int d = 0; d < z->ndim; d++) order[d] = d;
    if (cu_is_nhwc(c, zv) || (c->vals[zv].layout == CU_NHWC && z->ndim == 4)) {
        order[0] = 0, order[1] = 2, order[2] = 3, order[3] = 1;
    }
    int64_t sa[QF_MAX_DIMS], sb[QF_MAX_DIMS];
    operand_strides(c, av, z, sa);
    operand_strides(c, bv, z, sb);
    bin_desc *d = &st->d;
    d->nd = 0;
    for (int j = 0; j < z->ndim; j++) {
        int k = order[j];
        if (z->dims[k] == 1) continue;
        if (d->nd > 0 && d->sa[d->nd - 1] == sa[k] * z->dims[k] && d->sb[d->nd - 1] == sb[k] * z->dims[k]) {
            d->dims[d->nd - 1] *= z->dims[k];
            d->sa[d->nd - 1] = sa[k];
            d->sb[d->nd - 1] = sb[k];
            continue;
        }
        d->dims[d->nd] = z->dims[k];
        d->sa[d->nd] = sa[k];
        d->sb[d->nd] = sb[k];
        d->nd++;
    }
    if (d->nd == 0) {
        d->nd = 1;
        d->dims[0] = 1;
        d->sa[0] = d->sb[0] = 0;
    }
    st->flat = d->nd == 1 && d->sa[0] == 1 && d->sb[0] == 1;
    plan_vector(c, L, st);
    return QF_OK;
}

template <typename T, typename O, int V>
static void launch_binary_vec(cudaStream_t s, unsigned grid, O *z, cu_elem ze, const T *full, cu_elem fe, const T *part,
                              cu_elem pe, const bin_state *st, int64_t nvec, int op)
{
    /* an int8 output quantizes by 1/scale where that is a normal float (qfi_quantize_f32_zp_fast) */
    const float r = ze.dt == QF_I8 ? 1.0f / ze.scale : 0.0f, z_r = isnormal(r) ? r : 0.0f;
    if (st->total < INT32_MAX) /* the broadcast operand is no larger than the output */
        binary_vec_kernel<T, O, V, uint32_t><<<grid, 256, 0, s>>>(z, ze, z_r, full, fe, part, pe, st->swapped, (uint32_t)nvec,
            make_bin_index<uint32_t>(st->mid, st->inner), (uint32_t)st->so, (uint32_t)st->si, op);
    else
        binary_vec_kernel<T, O, V, int64_t><<<grid, 256, 0, s>>>(z, ze, z_r, full, fe, part, pe, st->swapped, nvec,
            make_bin_index<int64_t>(st->mid, st->inner), st->so, st->si, op);
}

static qf_status binary_launch(cu_engine *c, cu_layer *L, cudaStream_t s)
{
    const qf_node *n = L->n;
    const bin_state *st = (const bin_state *)L->state;
    int av = n->in[0], bv = n->in[1], zv = cu_out_value(L, 0);
    void *a, *b, *z;
    QF_CHECK(cu_value_ptr(c, av, &a));
    QF_CHECK(cu_value_ptr(c, bv, &b));
    QF_CHECK(cu_value_ptr(c, zv, &z));
    if (!st->total) return QF_OK;
    cu_elem ae = cu_elem_of(c, n, av), be = cu_elem_of(c, n, bv), ze = cu_elem_of(c, n, zv);
    const bool aligned = ((uintptr_t)a | (uintptr_t)b | (uintptr_t)z) % 16 == 0;
    if (st->vec && aligned && (ze.dt != QF_I8 || ze.scale > 0.0f)) {
        const void *full = st->swapped ? b : a, *part = st->swapped ? a : b;
        const cu_elem fe = st->swapped ? be : ae, pe = st->swapped ? ae : be;
        const int V = vector_of(ae.dt);
        const int64_t nvec = st->total / V;
        const unsigned grid = grid_for(nvec);
        if (ae.dt == QF_I8) /* int8 out too (plan_vector) */
            launch_binary_vec<int8_t, int8_t, 16>(s, grid, (int8_t *)z, ze, (const int8_t *)full, fe, (const int8_t *)part, pe, st, nvec, n->op);
        else if (ae.dt == QF_F16 && ze.dt == QF_I8)
            launch_binary_vec<__half, int8_t, 8>(s, grid, (int8_t *)z, ze, (const __half *)full, fe, (const __half *)part, pe, st, nvec, n->op);
        else if (ae.dt == QF_F16)
            launch_binary_vec<__half, __half, 8>(s, grid, (__half *)z, ze, (const __half *)full, fe, (const __half *)part, pe, st, nvec, n->op);
        else if (ze.dt == QF_I8)
            launch_binary_vec<float, int8_t, 4>(s, grid, (int8_t *)z, ze, (const float *)full, fe, (const float *)part, pe, st, nvec, n->op);
        else
            launch_binary_vec<float, float, 4>(s, grid, (float *)z, ze, (const float *)full, fe, (const float *)part, pe, st, nvec, n->op);
    } else if (st->flat)
        binary_flat_kernel<<<grid_for(st->total), 256, 0, s>>>(z, ze, a, ae, b, be, st->total, n->op);
    else if (cu_index_fits(st->d.nd, st->d.dims, st->d.sa, st->d.sb))
        binary_kernel<uint32_t><<<grid_for(st->total), 256, 0, s>>>(z, ze, a, ae, b, be, st->d, st->total, n->op);
    else
        binary_kernel<int64_t><<<grid_for(st->total), 256, 0, s>>>(z, ze, a, ae, b, be, st->d, st->total, n->op);
    CU_LAUNCHED();
    return QF_OK;
}

const cu_op cu_op_binary = {binary_prepare, NULL, binary_launch, CU_RULE_FOLLOW, CU_ALL_PRECISIONS, binary_check};

/* ---- BatchNormalization (inference, per channel) ----------------------------------------------- */

typedef struct bn_state {
    float *ab;              /* device: a[C] then b[C] */
    int64_t C, inner;       /* channel of element i: (i / inner) % C */
    uint8_t *table;         /* int8 in and out: the output level of each input level, [C][256] (NULL otherwise) */
} bn_state;

/* A fused Relu or Clip after the BN (fusion.cu's cu_fuse_batchnorm_act):
 * the BN's value rounded to the dtype it would have been stored in (mid),
 * then the activation, as the two nodes compute it. */
typedef struct bn_act {
    bool on;
    cu_elem mid;
    cu_unary_params p;
} bn_act;

__device__ __forceinline__ float bn_value(float x, float a, float b, const bn_act &e)
{
    float v = __fadd_rn(__fmul_rn(x, a), b);
    if (!e.on) return v;
    switch (e.mid.dt) {
    case QF_F16: v = __half2float(__float2half_rn(v)); break;
    case QF_I8: v = qfi_dequantize_i8_zp(qfi_quantize_f32_zp(v, e.mid.scale, e.mid.zp), e.mid.scale, e.mid.zp); break;
    default: break;
    }
    return cu_unary_apply(e.p, v);
}

__global__ void batchnorm_kernel(void *y, cu_elem ye, const void *x, cu_elem xe, const float *ab, int64_t C,
                                 int64_t inner, int64_t n, bn_act e)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t ch = (i / inner) % C;
        cu_store(y, ye, i, bn_value(cu_load(x, xe, i), ab[ch], ab[C + ch], e));
    }
}

/* Channels last (inner 1) with C a multiple of 8, int8 or half in and out:
 * 8 channels a thread in one load and one store (the per-element kernel's
 * divisions and one-byte accesses ran DenseNet's BN passes at a third of
 * the memory's bandwidth). Same arithmetic. */
template <typename TX, typename TY>
__global__ void batchnorm_vec_kernel(TY *y, cu_elem ye, const TX *x, cu_elem xe, const float *ab, int64_t C, int64_t nvec,
                                     bn_act e)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nvec; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c0 = (i * 8) % C;
        cu_vec<TX, 8> in;
        in.load(x, i);
        cu_vec<TY, 8> out;
#pragma unroll
        for (int k = 0; k < 8; k++)
            out.e[k] = cu_lane_out<TY>(bn_value(cu_lane_in(in.e[k], xe), __ldg(ab + c0 + k), __ldg(ab + C + c0 + k), e), ye);
        out.store(y, i);
    }
}

/* int8 in and out, channels last (DenseNet's BN + ReLU between a Concat
 * and a conv): the output is a function of the input level and the channel,
 * so a build-time table of 256 levels a channel, filled by bn_value itself
 * (the vector kernel's and so the CPU engine's levels), turns each element
 * into one shared-memory lookup: no division, no conversion (the arithmetic
 * held those passes to a sixth of the memory's bandwidth). */
__global__ void batchnorm_table_kernel(uint8_t *t, cu_elem xe, cu_elem ye, const float *ab, int64_t C, bn_act e)
{
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= C * 256) return;
    const int64_t ch = i / 256;
    const float x = qfi_dequantize_i8_zp((int8_t)(uint8_t)(i % 256), xe.scale, xe.zp);
    t[i] = (uint8_t)cu_lane_out<int8_t>(bn_value(x, ab[ch], ab[C + ch], e), ye);
}

/* A block holds the tables of S channels (S * 256 bytes of shared memory)
 * and maps those channels of many pixels, 16 a thread. */
template <int S>
__global__ void batchnorm_lookup_kernel(uint8_t *y, const uint8_t *x, const uint8_t *table, int64_t C, int64_t pixels)
{
    __shared__ uint4 t4[S * 256 / 16];
    const uint8_t *t = (const uint8_t *)t4;
    const int64_t c0 = (int64_t)blockIdx.y * S;
    for (int k = threadIdx.x; k < S * 16; k += blockDim.x) t4[k] = ((const uint4 *)(table + c0 * 256))[k];
    __syncthreads();
    constexpr int VP = S / 16; /* vectors of a pixel in the slab */
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < pixels * VP; i += (int64_t)gridDim.x * blockDim.x) {
        const int v = (int)(i % VP);
        const int64_t at = (i / VP) * C + c0 + v * 16;
        cu_vec<uint8_t, 16> in, out;
        in.load(x + at);
#pragma unroll
        for (int k = 0; k < 16; k++) out.e[k] = t[(v * 16 + k) * 256 + in.e[k]];
        out.store(y + at);
    }
}

/* The slab of channels a lookup block holds: 64 (16 KiB of tables) where C allows. */
static int lookup_slab(int64_t C) { return C % 64 == 0 ? 64 : C % 32 == 0 ? 32 : C % 16 == 0 ? 16 : 0; }

static float const_f(const qf_value *v, int64_t i)
{
    return v->dtype == QF_F16 ? qf_f16_to_f32(((const uint16_t *)v->data)[i]) : ((const float *)v->data)[i];
}

/* Per-channel (spatial) statistics given as float constants, float-like data. */
static qf_status batchnorm_check(const qf_graph *g, const qf_node *n)
{
    const qfi_batchnorm_params *p = (const qfi_batchnorm_params *)n->params;
    const qf_value *x = qfi_in(g, n, 0), *y = qfi_out(g, n, 0);
    if (!p->spatial) return qf_error(QF_ERR_UNSUPPORTED, "per-activation BatchNormalization (spatial=0)");
    if (!cu_float_like(g, n, x) || !cu_float_like(g, n, y) || x->ndim < 2)
        return qf_error(QF_ERR_UNSUPPORTED, "input %s of dtype %s", x->name, qf_dtype_info(x->dtype)->name);
    const int64_t C = x->dims[1];
    for (int k = 1; k < 5; k++) {
        const qf_value *pv = qfi_in(g, n, k);
        if (!pv || !(pv->flags & QF_VALUE_CONST) || qf_value_numel(pv) != C || (pv->dtype != QF_F32 && pv->dtype != QF_F16))
            return qf_error(QF_ERR_UNSUPPORTED, "BatchNormalization parameters must be float constants of %lld elements",
                            (long long)C);
    }
    return QF_OK;
}

/* The fused activation of L (cu_fuse_batchnorm_act), as bn_value reads it. */
static bn_act batchnorm_act(const cu_engine *c, const cu_layer *L)
{
    bn_act e = {};
    e.on = L->relu || L->clip;
    if (e.on) {
        e.mid = cu_elem_of(c, L->n, L->n->out[0]);
        e.p.op = L->relu ? QF_OP_RELU : QF_OP_CLIP;
        e.p.lo = L->clip_lo, e.p.hi = L->clip_hi;
    }
    return e;
}

static qf_status batchnorm_prepare(cu_engine *c, cu_layer *L)
{
    const qf_graph *g = c->g;
    const qf_node *n = L->n;
    const qfi_batchnorm_params *p = (const qfi_batchnorm_params *)n->params;
    const qf_value *x = qfi_in(g, n, 0), *y = qfi_out(g, n, 0);
    const int64_t C = x->dims[1];
    const qf_value *pv[4];
    for (int k = 0; k < 4; k++) pv[k] = qfi_in(g, n, k + 1);
    bn_state *st = (bn_state *)qfi_calloc(1, sizeof *st);
    float *ab = (float *)qfi_calloc((size_t)(2 * C + 1), sizeof(float));
    if (!st || !ab) {
        free(st);
        free(ab);
        return QF_ERR_NOMEM;
    }
    L->state = st;
    /* the CPU kernel's per-channel arithmetic, in double, then rounded once */
    for (int64_t ch = 0; ch < C; ch++) {
        double k = const_f(pv[0], ch) / sqrt((double)const_f(pv[3], ch) + p->epsilon);
        ab[ch] = (float)k;
        ab[C + ch] = (float)(const_f(pv[1], ch) - const_f(pv[2], ch) * k);
    }
    qf_status s = cu_upload(c, ab, (size_t)(2 * C) * sizeof(float), (void **)&st->ab);
    free(ab);
    QF_CHECK(s);
    st->C = C;
    int yv = cu_out_value(L, 0);
    bool nhwc = c->vals[yv].layout == CU_NHWC && y->ndim == 4;
    st->inner = nhwc ? 1 : (C ? qf_value_numel(x) / (x->dims[0] * C > 0 ? x->dims[0] * C : 1) : 1);
    if (st->inner < 1) st->inner = 1;
    if (x->ndim == 4) cu_need_input_as(c, L, 0, nhwc ? CU_NHWC : CU_LOGICAL);
    const cu_elem xe = cu_elem_of(c, n, n->in[0]), ye = cu_elem_of(c, n, yv);
    if (st->inner == 1 && x->ndim == 4 && xe.dt == QF_I8 && ye.dt == QF_I8 && lookup_slab(C)) {
        QF_CHECK(cu_alloc(c, (size_t)C * 256, (void **)&st->table));
        batchnorm_table_kernel<<<cu_blocks(C * 256, 256), 256, 0, c->stream>>>(st->table, xe, ye, st->ab, C, batchnorm_act(c, L));
        CU_LAUNCHED();
        CU_CHECK(cudaStreamSynchronize(c->stream));
    }
    void *ptr;
    return cu_value_ptr(c, n->in[0], &ptr);
}

static qf_status batchnorm_launch(cu_engine *c, cu_layer *L, cudaStream_t s)
{
    const qf_graph *g = c->g;
    const qf_node *n = L->n;
    const bn_state *st = (const bn_state *)L->state;
    int yv = cu_out_value(L, 0);
    const qf_value *x = qfi_in(g, n, 0);
    const void *xp;
    void *y;
    if (x->ndim == 4) QF_CHECK(cu_input_as(c, L, 0, c->vals[yv].layout, s, &xp));
    else QF_CHECK(cu_value_ptr(c, n->in[0], (void **)&xp));
    QF_CHECK(cu_value_ptr(c, yv, &y));
    int64_t cnt = qf_value_numel(x);
    if (!cnt) return QF_OK;
    if (st->table && ((uintptr_t)xp | (uintptr_t)y) % 16 == 0) {
        const int slab = lookup_slab(st->C);
        const int64_t pixels = cnt / st->C;
        /* about 16 vectors a thread: each block loads its tables once */
        const int64_t want = pixels * (slab / 16) / (256 * 16) + 1;
        const dim3 grid((unsigned)(want < 65535 ? want : 65535), (unsigned)(st->C / slab));
        switch (slab) {
        case 64: batchnorm_lookup_kernel<64><<<grid, 256, 0, s>>>((uint8_t *)y, (const uint8_t *)xp, st->table, st->C, pixels); break;
        case 32: batchnorm_lookup_kernel<32><<<grid, 256, 0, s>>>((uint8_t *)y, (const uint8_t *)xp, st->table, st->C, pixels); break;
        default: batchnorm_lookup_kernel<16><<<grid, 256, 0, s>>>((uint8_t *)y, (const uint8_t *)xp, st->table, st->C, pixels);
        }
        CU_LAUNCHED();
        return QF_OK;
    }
    const bn_act e = batchnorm_act(c, L);
    const cu_elem xe = cu_elem_of(c, n, n->in[0]), ye = cu_elem_of(c, n, yv);
    const bool vec_types = (xe.dt == QF_I8 || xe.dt == QF_F16) && (ye.dt == QF_I8 || ye.dt == QF_F16);
    if (st->inner == 1 && st->C % 8 == 0 && vec_types && ((uintptr_t)xp | (uintptr_t)y) % 16 == 0) {
        const int64_t nvec = cnt / 8;
        const unsigned grid = grid_for(nvec);
        if (xe.dt == QF_I8 && ye.dt == QF_I8)
            batchnorm_vec_kernel<int8_t, int8_t><<<grid, 256, 0, s>>>((int8_t *)y, ye, (const int8_t *)xp, xe, st->ab, st->C, nvec, e);
        else if (xe.dt == QF_I8)
            batchnorm_vec_kernel<int8_t, __half><<<grid, 256, 0, s>>>((__half *)y, ye, (const int8_t *)xp, xe, st->ab, st->C, nvec, e);
        else if (ye.dt == QF_I8)
            batchnorm_vec_kernel<__half, int8_t><<<grid, 256, 0, s>>>((int8_t *)y, ye, (const __half *)xp, xe, st->ab, st->C, nvec, e);
        else
            batchnorm_vec_kernel<__half, __half><<<grid, 256, 0, s>>>((__half *)y, ye, (const __half *)xp, xe, st->ab, st->C, nvec, e);
    } else {
        batchnorm_kernel<<<grid_for(cnt), 256, 0, s>>>(y, ye, xp, xe, st->ab, st->C, st->inner, cnt, e);
    }
    CU_LAUNCHED();
    return QF_OK;
}

const cu_op cu_op_batchnorm = {batchnorm_prepare, NULL, batchnorm_launch, CU_RULE_NHWC, CU_ALL_PRECISIONS,
                                batchnorm_check};
