/* Data movement on the device: one strided-copy kernel (with dtype and int8
 * scale and zero-point conversion where source and destination differ) that serves layout
 * conversion (NCHW <-> NHWC) and the ops that only move elements: Reshape,
 * Flatten, Squeeze, Unsqueeze, Identity, Dropout, Transpose, Slice, Concat
 * (each input written at its offset along the axis of the output, NHWC
 * channel offsets included), Split and Expand (stride 0 along broadcast dims). */
#include "cuda_internal.h"

typedef struct copy_desc {
    int nd;
    int64_t dims[QF_MAX_DIMS];
    int64_t ss[QF_MAX_DIMS];
    int64_t ds[QF_MAX_DIMS];
} copy_desc;

/* Element i of the iteration space -> source and destination offsets, in
 * index type I (32 bits where they fit: cu_index_fits). */
template <typename I = int64_t>
__device__ __forceinline__ void copy_offsets(const copy_desc &d, int64_t i64, int64_t &so, int64_t &dof)
{
    I i = (I)i64, s = 0, t = 0;
    for (int k = d.nd - 1; k >= 0; k--) {
        I q = i / (I)d.dims[k], r = i - q * (I)d.dims[k];
        s += r * (I)d.ss[k];
        t += r * (I)d.ds[k];
        i = q;
    }
    so = (int64_t)s, dof = (int64_t)t;
}

template <typename T, typename I>
__global__ void copy_raw_kernel(T *dst, const T *src, copy_desc d, int64_t total)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t so, dof;
        copy_offsets<I>(d, i, so, dof);
        dst[dof] = src[so];
    }
}

/* A transpose by 32 x 32 tiles through shared memory: the innermost dim i is
 * contiguous in the destination, dim j in the source, so that the reads
 * (along j) and the writes (along i) both coalesce; the other dims are
 * batches (`batch`, iterated like copy_desc). Blocks of 32 x 8 threads. */
typedef struct tile_desc {
    copy_desc batch;
    int64_t ni, nj;     /* the two dims' sizes */
    int64_t si, dj;     /* i's source stride and j's destination stride (the other two are 1) */
    int64_t ti, tj, nb; /* tiles along i and j, batches */
} tile_desc;

template <typename T>
__global__ void __launch_bounds__(256) copy_tiled_kernel(T *dst, const T *src, tile_desc t)
{
    __shared__ T tile[32][33];
    const int64_t per = t.ti * t.tj, n = t.nb * per;
    for (int64_t b = blockIdx.x; b < n; b += gridDim.x) {
        int64_t so, dof;
        copy_offsets(t.batch, b / per, so, dof);
        const int64_t r = b % per, i0 = r / t.tj * 32, j0 = r % t.tj * 32;
        for (int k = threadIdx.y; k < 32; k += 8) {
            const int64_t i = i0 + k, j = j0 + threadIdx.x;
            if (i < t.ni && j < t.nj) tile[k][threadIdx.x] = src[so + i * t.si + j];
        }
        __syncthreads();
        for (int k = threadIdx.y; k < 32; k += 8) {
            const int64_t j = j0 + k, i = i0 + threadIdx.x;
            if (i < t.ni && j < t.nj) dst[dof + j * t.dj + i] = tile[threadIdx.x][k];
        }
        __syncthreads();
    }
}

__global__ void copy_convert_kernel(void *dst, cu_elem de, const void *src, cu_elem se, copy_desc d, int64_t total)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t so, dof;
        copy_offsets(d, i, so, dof);
        cu_store(dst, de, dof, cu_load(src, se, so));
    }
}

static bool float_like_dt(qf_dtype t) { return t == QF_F32 || t == QF_F16 || t == QF_I8; }

template <typename T> static void launch_raw(cudaStream_t s, void *dst, const void *src, const copy_desc &d, int64_t total)
{
    unsigned blocks = cu_blocks(total, 256);
    if (blocks > 65536) blocks = 65536;
    if (cu_index_fits(d.nd, d.dims, d.ss, d.ds)) copy_raw_kernel<T, uint32_t><<<blocks, 256, 0, s>>>((T *)dst, (const T *)src, d, total);
    else copy_raw_kernel<T, int64_t><<<blocks, 256, 0, s>>>((T *)dst, (const T *)src, d, total);
}

template <typename T> static void launch_tiled(cudaStream_t s, void *dst, const void *src, const tile_desc &t)
{
    const int64_t n = t.nb * t.ti * t.tj;
    copy_tiled_kernel<<<n > 65536 ? 65536 : (unsigned)n, dim3(32, 8), 0, s>>>((T *)dst, (const T *)src, t);
}

/* A copy of es-byte elements without conversion, d's dims merged and in the
 * destination's order: one memcpy where both sides are contiguous; a row
 * contiguous in both moves in the widest vectors (up to 16 bytes) that its
 * length, the other strides and both addresses allow; a transpose (the
 * destination's innermost dim strided in the source, another dim
 * contiguous there) goes through shared-memory tiles; else one element a
 * thread. */
static qf_status copy_raw(cudaStream_t s, void *dst, const void *src, size_t es, copy_desc d, int64_t total)
{
    if (es != 1 && es != 2 && es != 4 && es != 8)
        return qf_error(QF_ERR_UNSUPPORTED, "no device copy for %zu-byte elements", es);
    const int in = d.nd - 1;
    if (d.nd == 1 && d.ss[0] == 1 && d.ds[0] == 1) {
        CU_CHECK(cudaMemcpyAsync(dst, src, (size_t)total * es, cudaMemcpyDeviceToDevice, s));
        return QF_OK;
    }
    if (d.ss[in] == 1 && d.ds[in] == 1) {
        uint64_t a = (uint64_t)(d.dims[in] * (int64_t)es) | (uintptr_t)dst | (uintptr_t)src;
        for (int k = 0; k < in; k++) a |= (uint64_t)(d.ss[k] * (int64_t)es) | (uint64_t)(d.ds[k] * (int64_t)es);
        const size_t v = cu_word_bytes(a);
        if (v > es) { /* the same copy of v-byte elements */
            const int64_t f = (int64_t)(v / es);
            d.dims[in] /= f;
            for (int k = 0; k < in; k++) d.ss[k] /= f, d.ds[k] /= f;
            total /= f;
            es = v;
        }
    } else if (d.ds[in] == 1 && d.dims[in] >= 8) {
        int j = -1;
        for (int k = 0; k < in; k++)
            if (d.ss[k] == 1 && d.dims[k] >= 8) j = k;
        if (j >= 0) {
            tile_desc t;
            t.ni = d.dims[in], t.nj = d.dims[j], t.si = d.ss[in], t.dj = d.ds[j];
            t.ti = (t.ni + 31) / 32, t.tj = (t.nj + 31) / 32;
            t.batch.nd = 0;
            t.nb = 1;
            for (int k = 0; k < in; k++)
                if (k != j) {
                    t.batch.dims[t.batch.nd] = d.dims[k], t.batch.ss[t.batch.nd] = d.ss[k], t.batch.ds[t.batch.nd] = d.ds[k];
                    t.batch.nd++;
                    t.nb *= d.dims[k];
                }
            cu_with_word(es, [&](auto *word) { launch_tiled<std::remove_pointer_t<decltype(word)>>(s, dst, src, t); });
            CU_LAUNCHED();
            return QF_OK;
        }
    }
    cu_with_word(es, [&](auto *word) { launch_raw<std::remove_pointer_t<decltype(word)>>(s, dst, src, d, total); });
    CU_LAUNCHED();
    return QF_OK;
}

qf_status cu_strided_copy(cudaStream_t s, void *dst, cu_elem de, const int64_t *ds, int64_t do_, const void *src,
                          cu_elem se, const int64_t *ss, int64_t so, int nd, const int64_t *dims)
{
    const bool convert = !cu_elems_alike(de, se);
    if (convert && !(float_like_dt(de.dt) && float_like_dt(se.dt)))
        return qf_error(QF_ERR_UNSUPPORTED, "no device conversion from %s to %s", qf_dtype_info(se.dt)->name,
                        qf_dtype_info(de.dt)->name);
    /* iterate in the destination's order (writes coalesce): sort dims by
     * destination stride, drop unit dims, merge dims contiguous in both */
    int order[QF_MAX_DIMS], m = 0;
    int64_t total = 1;
    for (int k = 0; k < nd; k++) {
        total *= dims[k];
        if (dims[k] != 1) order[m++] = k;
    }
    if (total == 0) return QF_OK;
    for (int a = 1; a < m; a++)
        for (int b = a; b > 0 && ds[order[b - 1]] < ds[order[b]]; b--) {
            int t = order[b];
            order[b] = order[b - 1];
            order[b - 1] = t;
        }
    copy_desc d;
    d.nd = 0;
    for (int a = 0; a < m; a++) {
        int k = order[a];
        if (d.nd > 0 && d.ss[d.nd - 1] == ss[k] * dims[k] && d.ds[d.nd - 1] == ds[k] * dims[k]) {
            d.dims[d.nd - 1] *= dims[k];
            d.ss[d.nd - 1] = ss[k];
            d.ds[d.nd - 1] = ds[k];
            continue;
        }
        d.dims[d.nd] = dims[k];
        d.ss[d.nd] = ss[k];
        d.ds[d.nd] = ds[k];
        d.nd++;
    }
    if (d.nd == 0) { /* one element */
        d.nd = 1;
        d.dims[0] = 1;
        d.ss[0] = d.ds[0] = 1;
    }
    const size_t es = qf_dtype_info(de.dt)->size;
    if (convert) {
        const size_t ses = qf_dtype_info(se.dt)->size;
        unsigned blocks = cu_blocks(total, 256);
        copy_convert_kernel<<<blocks > 65536 ? 65536 : blocks, 256, 0, s>>>((char *)dst + do_ * (int64_t)es, de,
                                                                           (const char *)src + so * (int64_t)ses, se, d, total);
        CU_LAUNCHED();
        return QF_OK;
    }
    return copy_raw(s, (char *)dst + do_ * (int64_t)es, (const char *)src + so * (int64_t)es, es, d, total);
}

void cu_elem_bytes(cu_elem e, float v, void *out)
{
    memset(out, 0, 8);
    if (e.dt == QF_F16) {
        uint16_t h = qf_f32_to_f16(v);
        memcpy(out, &h, 2);
    } else if (e.dt == QF_I8) {
        int8_t q = qfi_quantize_f32_zp(v, e.scale, e.zp);
        memcpy(out, &q, 1);
    } else if (e.dt == QF_F32) {
        memcpy(out, &v, 4);
    }
}

void cu_walk_init(const cu_engine *c, int v, cu_walk *w)
{
    const qf_value *val = &c->g->values[v];
    w->nd = val->ndim;
    for (int d = 0; d < val->ndim; d++) w->dim_of[d] = d;
    if (val->ndim == 4 && c->vals[v].layout == CU_NHWC) w->dim_of[1] = 2, w->dim_of[2] = 3, w->dim_of[3] = 1;
    for (int k = 0; k < val->ndim; k++) w->dims[k] = val->dims[w->dim_of[k]];
}

/* Row-major strides of dims. */
static void logical_strides(int nd, const int64_t *dims, int64_t *st)
{
    int64_t s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        st[d] = s;
        s *= dims[d];
    }
}

/* ---- Reshape, Flatten, Squeeze, Unsqueeze: the input in logical order ------------------ */

static qf_status reshape_prepare(cu_engine *c, cu_layer *L)
{
    const qf_graph *g = c->g;
    const qf_value *x = qfi_in(g, L->n, 0), *y = qfi_out(g, L->n, 0);
    if (x->dtype != y->dtype || qf_value_numel(x) != qf_value_numel(y))
        return qf_error(QF_ERR_INVALID, "output %s does not hold the input's elements", y->name);
    void *p;
    return cu_value_ptr(c, L->n->in[0], &p);
}

static qf_status reshape_launch(cu_engine *c, cu_layer *L, cudaStream_t s)
{
    const qf_graph *g = c->g;
    int xv = L->n->in[0], yv = cu_out_value(L, 0);
    const qf_value *x = &g->values[xv];
    void *src, *dst;
    QF_CHECK(cu_value_ptr(c, xv, &src));
    QF_CHECK(cu_value_ptr(c, yv, &dst));
    if (src == dst) return QF_OK; /* a view of its input (cuda_engine.cu, find_views) */
    int64_t ss[QF_MAX_DIMS], ds[QF_MAX_DIMS];
    cu_strides(c, xv, ss);
    logical_strides(x->ndim, x->dims, ds);
    cu_elem el = {x->dtype, 0.0f};
    return cu_strided_copy(s, dst, el, ds, 0, src, el, ss, 0, x->ndim, x->dims);
}

const cu_op cu_op_reshape = {reshape_prepare, NULL, reshape_launch, CU_RULE_LOGICAL, CU_ALL_PRECISIONS, NULL};

/* ---- Identity, Dropout: the same bytes, the same layout ------------------------------------ */

__global__ void fill_f32_kernel(float *p, int64_t n, float v)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) p[i] = v;
}

/* Dropout's mask: bool, or f32 (opset < 10). */
static qf_status identity_check(const qf_graph *g, const qf_node *n)
{
    if (n->n_out > 1 && n->out[1] >= 0) {
        const qf_value *m = qfi_out(g, n, 1);
        if (m->dtype != QF_BOOL && m->dtype != QF_F32)
            return qf_error(QF_ERR_UNSUPPORTED, "Dropout mask of dtype %s", qf_dtype_info(m->dtype)->name);
    }
    return QF_OK;
}

static qf_status identity_prepare(cu_engine *c, cu_layer *L)
{
    void *p;
    return cu_value_ptr(c, L->n->in[0], &p);
}

static qf_status identity_launch(cu_engine *c, cu_layer *L, cudaStream_t s)
{
    const qf_graph *g = c->g;
    void *src, *dst;
    QF_CHECK(cu_value_ptr(c, L->n->in[0], &src));
    QF_CHECK(cu_value_ptr(c, cu_out_value(L, 0), &dst));
    const qf_value *x = qfi_in(g, L->n, 0);
    int64_t ss[QF_MAX_DIMS], ds[QF_MAX_DIMS];
    /* the output follows the input's layout; a constant input is logical */
    cu_strides(c, L->n->in[0], ss);
    cu_strides(c, cu_out_value(L, 0), ds);
    cu_elem el = {x->dtype, 0.0f};
    QF_CHECK(cu_strided_copy(s, dst, el, ds, 0, src, el, ss, 0, x->ndim, x->dims));
    if (L->n->n_out > 1 && L->n->out[1] >= 0) {
        /* inference-mode Dropout keeps every element: the mask is all true */
        const qf_value *m = qfi_out(g, L->n, 1);
        void *mp;
        QF_CHECK(cu_value_ptr(c, L->n->out[1], &mp));
        int64_t cnt = qf_value_numel(m);
        if (m->dtype == QF_BOOL) {
            CU_CHECK(cudaMemsetAsync(mp, 1, (size_t)cnt, s));
        } else if (cnt) {
            fill_f32_kernel<<<cu_blocks(cnt, 256) > 4096 ? 4096 : cu_blocks(cnt, 256), 256, 0, s>>>((float *)mp, cnt, 1.0f);
            CU_LAUNCHED();
        }
    }
    return QF_OK;
}

const cu_op cu_op_identity = {identity_prepare, NULL, identity_launch, CU_RULE_FOLLOW,
                              CU_ALL_PRECISIONS, identity_check};

/* ---- Transpose ---------------------------------------------------------------------------- */

static qf_status transpose_launch(cu_engine *c, cu_layer *L, cudaStream_t s)
{
    const qf_graph *g = c->g;
    const qfi_transpose_params *p = (const qfi_transpose_params *)L->n->params;
    int xv = L->n->in[0], yv = cu_out_value(L, 0);
    const qf_value *y = &g->values[yv];
    void *src, *dst;
    QF_CHECK(cu_value_ptr(c, xv, &src));
    QF_CHECK(cu_value_ptr(c, yv, &dst));
    if (src == dst) return QF_OK; /* a view of its input (cuda_engine.cu, find_views) */
    int64_t xs[QF_MAX_DIMS], ss[QF_MAX_DIMS], ds[QF_MAX_DIMS];
    cu_strides(c, xv, xs);
    for (int i = 0; i < y->ndim; i++) ss[i] = xs[p->n_perm ? p->perm[i] : y->ndim - 1 - i];
    cu_strides(c, yv, ds); /* NHWC where the permutation makes that the input's own order (assign_layouts) */
    cu_elem el = {y->dtype, 0.0f};
    return cu_strided_copy(s, dst, el, ds, 0, src, el, ss, 0, y->ndim, y->dims);
}

const cu_op cu_op_transpose = {reshape_prepare, NULL, transpose_launch, CU_RULE_LOGICAL, CU_ALL_PRECISIONS, NULL};

/* ---- Slice ---------------------------------------------------------------------------------- */

static qf_status slice_prepare(cu_engine *c, cu_layer *L)
{
    void *p;
    return cu_value_ptr(c, L->n->in[0], &p);
}

static qf_status slice_launch(cu_engine *c, cu_layer *L, cudaStream_t s)
{
    const qf_graph *g = c->g;
    const qfi_slice_params *p = (const qfi_slice_params *)L->n->params;
    int xv = L->n->in[0], yv = cu_out_value(L, 0);
    const qf_value *x = &g->values[xv], *y = &g->values[yv];
    void *src, *dst;
    QF_CHECK(cu_value_ptr(c, xv, &src));
    QF_CHECK(cu_value_ptr(c, yv, &dst));
    int64_t xs[QF_MAX_DIMS], ss[QF_MAX_DIMS], ds[QF_MAX_DIMS], first = 0;
    cu_strides(c, xv, xs);
    for (int d = 0; d < x->ndim; d++) {
        first += p->start[d] * xs[d];
        ss[d] = p->step[d] * xs[d];
    }
    cu_strides(c, yv, ds);
    cu_elem el = {y->dtype, 0.0f};
    return cu_strided_copy(s, dst, el, ds, 0, src, el, ss, first, y->ndim, y->dims);
}

/* An NHWC input's slices stay NHWC (ShuffleNet's and YOLO's channel halves
 * feed Convs and Concats, which would convert them back) */
const cu_op cu_op_slice = {slice_prepare, NULL, slice_launch, CU_RULE_LIKE_INPUT, CU_ALL_PRECISIONS, NULL};

/* ---- Expand: the input read with stride 0 along the dims it is broadcast in ----------------- */

static qf_status expand_launch(cu_engine *c, cu_layer *L, cudaStream_t s)
{
    const qf_graph *g = c->g;
    int xv = L->n->in[0], yv = cu_out_value(L, 0);
    const qf_value *x = &g->values[xv], *y = &g->values[yv];
    void *src, *dst;
    QF_CHECK(cu_value_ptr(c, xv, &src));
    QF_CHECK(cu_value_ptr(c, yv, &dst));
    int64_t xs[QF_MAX_DIMS], ss[QF_MAX_DIMS], ds[QF_MAX_DIMS];
    cu_strides(c, xv, xs);
    for (int d = 0; d < y->ndim; d++) {
        int xd = d - (y->ndim - x->ndim);
        ss[d] = xd < 0 || x->dims[xd] == 1 ? 0 : xs[xd];
    }
    logical_strides(y->ndim, y->dims, ds);
    cu_elem el = {y->dtype, 0.0f};
    return cu_strided_copy(s, dst, el, ds, 0, src, el, ss, 0, y->ndim, y->dims);
}

const cu_op cu_op_expand = {slice_prepare, NULL, expand_launch, CU_RULE_LOGICAL, CU_ALL_PRECISIONS, NULL};

/* ---- Concat: every input at its offset along the axis of the output ------------------------ */

/* Inputs of the output's dtype, or float-like ones converted on the way. */
static qf_status concat_check(const qf_graph *g, const qf_node *n)
{
    const qf_value *y = qfi_out(g, n, 0);
    for (int k = 0; k < n->n_in; k++) {
        const qf_value *x = qfi_in(g, n, k);
        if (x->dtype != y->dtype && !(cu_float_like(g, n, x) && cu_float_like(g, n, y)))
            return qf_error(QF_ERR_UNSUPPORTED, "input %s of dtype %s into %s", x->name, qf_dtype_info(x->dtype)->name,
                            qf_dtype_info(y->dtype)->name);
    }
    return QF_OK;
}

static qf_status concat_prepare(cu_engine *c, cu_layer *L)
{
    for (int k = 0; k < L->n->n_in; k++) {
        void *p;
        QF_CHECK(cu_value_ptr(c, L->n->in[k], &p));
    }
    return QF_OK;
}

/* Concat as rows: every value laid out [outer][axis][inner] alike, each
 * input's row (its axis extent times inner) a run of bytes at its offset in
 * the output's row. One launch for all the inputs, V bytes a thread:
 * DenseNet's Concats take up to 25 inputs of 32 channels each, which as one
 * strided copy apiece were 535 small launches and 3.9 of 30 ms at batch 256. */
enum { CONCAT_ROWS_MAX = 64 };
typedef struct concat_rows {
    const char *src[CONCAT_ROWS_MAX];
    int64_t at[CONCAT_ROWS_MAX + 1]; /* byte offset of input k in an output row; at[n] = the row */
    int n;
} concat_rows;

template <typename T>
__global__ void concat_rows_kernel(T *dst, concat_rows r, int64_t total)
{
    const int64_t row = r.at[r.n] / (int64_t)sizeof(T);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t o = i / row, b = (i - o * row) * (int64_t)sizeof(T);
        int k = 0;
        while (b >= r.at[k + 1]) k++;
        const int64_t len = r.at[k + 1] - r.at[k];
        dst[i] = *(const T *)(r.src[k] + o * len + (b - r.at[k]));
    }
}

/* The row plan where it applies: elements alike, one layout, at most CONCAT_ROWS_MAX inputs. */
static bool concat_as_rows(cu_engine *c, const cu_layer *L, int yv, concat_rows *r)
{
    const qf_graph *g = c->g;
    const qf_node *n = L->n;
    const int a = ((const qfi_axis_params *)n->params)->norm;
    const qf_value *y = &g->values[yv];
    const bool nhwc = c->vals[yv].layout == CU_NHWC && y->ndim == 4;
    if (n->n_in > CONCAT_ROWS_MAX) return false;
    int64_t ds[QF_MAX_DIMS];
    cu_strides(c, yv, ds);
    const int64_t es = (int64_t)qf_dtype_info(y->dtype)->size, inner = ds[a];
    const cu_elem de = cu_elem_of(c, n, yv);
    r->n = n->n_in;
    r->at[0] = 0;
    for (int k = 0; k < n->n_in; k++) {
        const int xv = n->in[k];
        const qf_value *x = &g->values[xv];
        int64_t ss[QF_MAX_DIMS];
        cu_strides(c, xv, ss);
        if ((c->vals[xv].layout == CU_NHWC && x->ndim == 4) != nhwc || ss[a] != inner ||
            !cu_elems_alike(de, cu_elem_of(c, n, xv)))
            return false;
        void *p;
        if (cu_value_ptr(c, xv, &p) != QF_OK) return false;
        r->src[k] = (const char *)p;
        r->at[k + 1] = r->at[k] + x->dims[a] * inner * es;
    }
    return r->at[r->n] > 0;
}

static qf_status concat_launch(cu_engine *c, cu_layer *L, cudaStream_t s)
{
    const qf_graph *g = c->g;
    const qfi_axis_params *p = (const qfi_axis_params *)L->n->params;
    int yv = cu_out_value(L, 0);
    void *dst;
    QF_CHECK(cu_value_ptr(c, yv, &dst));
    concat_rows r;
    if (concat_as_rows(c, L, yv, &r)) {
        const int64_t bytes = qf_value_bytes(&g->values[yv]);
        uint64_t a = (uintptr_t)dst; /* the widest word every row and pointer allows */
        for (int k = 0; k < r.n; k++) a |= (uint64_t)(r.at[k + 1] - r.at[k]) | (uintptr_t)r.src[k];
        const size_t v = cu_word_bytes(a);
        const int64_t total = bytes / (int64_t)v;
        if (total == 0) return QF_OK;
        const unsigned blocks = cu_blocks(total, 256) > 65536 ? 65536 : cu_blocks(total, 256);
        cu_with_word(v, [&](auto *word) {
            typedef std::remove_pointer_t<decltype(word)> V;
            concat_rows_kernel<V><<<blocks, 256, 0, s>>>((V *)dst, r, total);
        });
        CU_LAUNCHED();
        return QF_OK;
    }
    int64_t ds[QF_MAX_DIMS], ss[QF_MAX_DIMS];
    cu_strides(c, yv, ds);
    cu_elem de = cu_elem_of(c, L->n, yv);
    int64_t at = 0;
    for (int k = 0; k < L->n->n_in; k++) {
        int xv = L->n->in[k];
        const qf_value *x = &g->values[xv];
        void *src;
        QF_CHECK(cu_value_ptr(c, xv, &src));
        cu_strides(c, xv, ss);
        QF_CHECK(cu_strided_copy(s, dst, de, ds, at * ds[p->norm], src, cu_elem_of(c, L->n, xv), ss, 0, x->ndim, x->dims));
        at += x->dims[p->norm];
    }
    return QF_OK;
}

const cu_op cu_op_concat = {concat_prepare, NULL, concat_launch, CU_RULE_ANY_NHWC, CU_ALL_PRECISIONS, concat_check};

/* ---- Split: every output from its offset along the axis of the input ----------------------- */

static qf_status split_launch(cu_engine *c, cu_layer *L, cudaStream_t s)
{
    const qf_graph *g = c->g;
    const qfi_split_params *p = (const qfi_split_params *)L->n->params;
    int xv = L->n->in[0];
    void *src;
    QF_CHECK(cu_value_ptr(c, xv, &src));
    int64_t ss[QF_MAX_DIMS], ds[QF_MAX_DIMS];
    cu_strides(c, xv, ss);
    cu_elem el = {g->values[xv].dtype, 0.0f};
    int64_t at = 0;
    for (int k = 0; k < L->n->n_out; k++) {
        int yv = L->n->out[k];
        const qf_value *y = qfi_out(g, L->n, k);
        if (yv >= 0) {
            void *dst;
            QF_CHECK(cu_value_ptr(c, yv, &dst));
            cu_strides(c, yv, ds);
            QF_CHECK(cu_strided_copy(s, dst, el, ds, 0, src, el, ss, at * ss[p->norm], y->ndim, y->dims));
        }
        at += y->dims[p->norm];
    }
    return QF_OK;
}

const cu_op cu_op_split = {slice_prepare, NULL, split_launch, CU_RULE_LIKE_INPUT, CU_ALL_PRECISIONS, NULL};
