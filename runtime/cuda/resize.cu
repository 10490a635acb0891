/* Resize and Upsample on the device, nearest and N-linear, from the tap
 * tables lib/ops/resize.c builds (uploaded once); a 4-D output keeps its
 * input's layout (NHWC after a Conv). One thread per output element, in
 * storage order. Linear sums its terms in runtime/cpu/resize.c's order with
 * the same roundings (the outer dims' weights multiplied in dim order, term k
 * taking the second tap of the j-th interpolating dim where bit j of k is
 * set), so FP32 results are the CPU's bit for bit. Nearest moves the stored
 * bytes; where input and output are NHWC of one element type and the
 * channels are not resized (YOLO's and U-Nets' 2x upsampling), it copies
 * each output pixel's row of channels from its source pixel in vectors of
 * up to 16 bytes (`resize_rows_kernel`): a thread an element, each finding
 * its 4-D coordinates by 64-bit divisions, took YOLOv8n's two Resizes 3.6
 * of its 38.5 ms at batch 256 on an H100, 14 times their memory traffic. */
#include "cuda_internal.h"

typedef struct resize_desc {
    cu_walk y;
    int nd;
    int64_t xs[QF_MAX_DIMS];        /* the input's element strides per logical dim */
    int64_t tap_at[QF_MAX_DIMS];
    const qfi_resize_tap *taps;     /* device */
    float extrapolation;
    /* the row path (resize_rows_fit): pixel rows of row_bytes; the output's H, W and the input's */
    bool rows;
    int row_bytes, ho, wo, h, w;
} resize_desc;

/* Output pixel p = (n Ho + oh) Wo + ow copies input pixel (tn H + th) W + tw,
 * t the taps of dims 0, 2 and 3, as vecs words of V each; i < 2^31 (host). */
template <typename V>
__global__ void resize_rows_kernel(V *y, const V *x, const qfi_resize_tap *taps, int64_t at_n, int64_t at_h, int64_t at_w,
                                   int h, int w, int ho, int wo, int vecs, cu_fast_div div_vecs, cu_fast_div div_wo,
                                   cu_fast_div div_ho, int total)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int pix = cu_div_by(i, div_vecs), v = i - pix * vecs;
        const int q = cu_div_by(pix, div_wo), ow = pix - q * wo;
        const int n = cu_div_by(q, div_ho), oh = q - n * ho;
        const int64_t src = ((int64_t)taps[at_n + n].i0 * h + taps[at_h + oh].i0) * w + taps[at_w + ow].i0;
        y[i] = x[src * vecs + v];
    }
}

/* Where output element i reads: *off (the outer dims' first taps), the
 * interpolating outer dims (nb of them: offsets of both taps, weight of the
 * second), the last dim's tap; false where it falls outside the input. */
__device__ __forceinline__ bool resize_terms(const resize_desc &d, int64_t i, int64_t &off, int &nb, int64_t *b0,
                                             int64_t *b1, float *bw, qfi_resize_tap &last)
{
    int64_t o[QF_MAX_DIMS];
    cu_walk_coords(d.y, i, o);
    off = 0;
    nb = 0;
    for (int k = 0; k < d.nd - 1; k++) {
        const qfi_resize_tap t = d.taps[d.tap_at[k] + o[k]];
        if (t.i0 < 0) return false;
        if (t.w1 == 0.0f || t.i1 == t.i0) {
            off += t.i0 * d.xs[k];
        } else {
            b0[nb] = t.i0 * d.xs[k];
            b1[nb] = t.i1 * d.xs[k];
            bw[nb++] = t.w1;
        }
    }
    last = d.taps[d.tap_at[d.nd - 1] + o[d.nd - 1]];
    return last.i0 >= 0;
}

template <typename M> __global__ void resize_nearest_kernel(M m, resize_desc d, int64_t total)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off, b0[QF_MAX_DIMS], b1[QF_MAX_DIMS];
        float bw[QF_MAX_DIMS];
        int nb;
        qfi_resize_tap t;
        if (d.nd == 0) m.copy(i, 0);
        else if (!resize_terms(d, i, off, nb, b0, b1, bw, t)) m.set(i);
        else m.copy(i, off + t.i0 * d.xs[d.nd - 1]); /* nearest taps never interpolate */
    }
}

__global__ void resize_linear_kernel(void *y, cu_elem ye, const void *x, cu_elem xe, resize_desc d, int64_t total)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off, b0[QF_MAX_DIMS], b1[QF_MAX_DIMS];
        float bw[QF_MAX_DIMS];
        int nb;
        qfi_resize_tap t;
        if (d.nd == 0 || !resize_terms(d, i, off, nb, b0, b1, bw, t)) {
            cu_store(y, ye, i, d.nd == 0 ? cu_load(x, xe, 0) : d.extrapolation);
            continue;
        }
        const int64_t s = d.xs[d.nd - 1], j0 = t.i0 * s, j1 = t.i1 * s;
        float acc = 0.0f;
        for (int k = 0; k < 1 << nb; k++) {
            float w = 1.0f;
            int64_t row = off;
            for (int j = 0; j < nb; j++) {
                const bool second = (k >> j) & 1;
                w = qfi_mul(w, second ? bw[j] : qfi_sub(1.0f, bw[j]));
                row += second ? b1[j] : b0[j];
            }
            const float v = qfi_resize_lerp(t.w1, cu_load(x, xe, row + j0), cu_load(x, xe, row + j1));
            acc = qfi_add(acc, qfi_mul(w, v));
        }
        cu_store(y, ye, i, acc);
    }
}

static qf_status resize_check(const qf_graph *g, const qf_node *n)
{
    const qfi_resize_params *p = (const qfi_resize_params *)n->params;
    const qf_value *x = qfi_in(g, n, 0);
    if (p->mode == QFI_RESIZE_LINEAR && (!cu_float_like(g, n, x) || !cu_float_like(g, n, qfi_out(g, n, 0))))
        return qf_error(QF_ERR_UNSUPPORTED, "linear mode on %s", qf_dtype_info(x->dtype)->name);
    return QF_OK;
}

/* Whether the row path serves n: nearest, 4-D input and output both NHWC
 * without gaps, one element type (int8 with one scale and zero point), the
 * channels' taps the identity, every other tap inside the input, and
 * fewer than 2^31 elements out. */
static bool resize_rows_fit(const cu_engine *c, const qf_node *n, int yv, const int64_t *xs)
{
    const qf_graph *g = c->g;
    const qfi_resize_params *p = (const qfi_resize_params *)n->params;
    const qf_value *x = qfi_in(g, n, 0), *y = &g->values[yv];
    if (p->mode == QFI_RESIZE_LINEAR || x->ndim != 4 || y->ndim != 4 || y->dims[1] != x->dims[1]) return false;
    int64_t ys[QF_MAX_DIMS];
    cu_strides(c, yv, ys);
    const int64_t C = x->dims[1];
    const bool nhwc = xs[1] == 1 && xs[3] == C && xs[2] == C * x->dims[3] && xs[0] == xs[2] * x->dims[2] && ys[1] == 1 &&
                      ys[3] == C && ys[2] == C * y->dims[3] && ys[0] == ys[2] * y->dims[2];
    const cu_elem xe = cu_elem_of(c, n, n->in[0]), ye = cu_elem_of(c, n, yv);
    if (!nhwc || xe.dt != ye.dt || xe.scale != ye.scale || xe.zp != ye.zp || qf_value_numel(y) >= INT32_MAX ||
        x->dims[2] >= INT32_MAX || x->dims[3] >= INT32_MAX)
        return false;
    for (int64_t k = 0; k < C; k++)
        if (p->taps[p->tap_at[1] + k].i0 != k) return false;
    for (int d = 0; d < 4; d++)
        for (int64_t k = 0; d != 1 && k < y->dims[d]; k++) {
            const int64_t i0 = p->taps[p->tap_at[d] + k].i0;
            if (i0 < 0 || i0 >= x->dims[d]) return false;
        }
    return true;
}

static qf_status resize_prepare(cu_engine *c, cu_layer *L)
{
    const qf_graph *g = c->g;
    const qf_node *n = L->n;
    const qfi_resize_params *p = (const qfi_resize_params *)n->params;
    const qf_value *x = qfi_in(g, n, 0);
    const int yv = cu_out_value(L, 0);
    if (!cu_can_move(cu_elem_of(c, n, yv), cu_elem_of(c, n, n->in[0])))
        return qf_error(QF_ERR_UNSUPPORTED, "no device copy from %s to %s", qf_dtype_info(x->dtype)->name,
                        qf_dtype_info(g->values[yv].dtype)->name);
    resize_desc *d = (resize_desc *)qfi_calloc(1, sizeof *d);
    if (!d) return QF_ERR_NOMEM;
    L->state = d;
    QF_CHECK(cu_upload(c, p->taps, (size_t)p->n_taps * sizeof(qfi_resize_tap), (void **)&d->taps));
    cu_walk_init(c, yv, &d->y);
    d->nd = x->ndim;
    d->extrapolation = p->extrapolation;
    cu_strides(c, n->in[0], d->xs);
    for (int k = 0; k < x->ndim; k++) d->tap_at[k] = p->tap_at[k];
    if ((d->rows = resize_rows_fit(c, n, yv, d->xs))) {
        const qf_value *y = &g->values[yv];
        d->row_bytes = (int)(x->dims[1] * (int64_t)qf_dtype_info(x->dtype)->size);
        d->ho = (int)y->dims[2], d->wo = (int)y->dims[3], d->h = (int)x->dims[2], d->w = (int)x->dims[3];
    }
    void *ptr;
    return cu_value_ptr(c, n->in[0], &ptr);
}

/* The row path in the widest words that the row size and both buffers' alignment allow */
template <typename V> static void launch_rows(const resize_desc &d, void *y, const void *x, int64_t pixels, cudaStream_t s)
{
    const int vecs = d.row_bytes / (int)sizeof(V), total = (int)(pixels * vecs);
    const unsigned blocks = cu_blocks(total, 256);
    resize_rows_kernel<V><<<blocks > 65536 ? 65536 : blocks, 256, 0, s>>>(
        (V *)y, (const V *)x, d.taps, d.tap_at[0], d.tap_at[2], d.tap_at[3], d.h, d.w, d.ho, d.wo, vecs,
        cu_make_fast_div((uint32_t)vecs), cu_make_fast_div((uint32_t)d.wo), cu_make_fast_div((uint32_t)d.ho), total);
}
static qf_status resize_rows_launch(cu_engine *c, cu_layer *L, const resize_desc &d, cudaStream_t s)
{
    const int yv = cu_out_value(L, 0);
    void *x, *y;
    QF_CHECK(cu_value_ptr(c, L->n->in[0], &x));
    QF_CHECK(cu_value_ptr(c, yv, &y));
    const qf_value *yval = &c->g->values[yv];
    const int64_t pixels = yval->dims[0] * yval->dims[2] * yval->dims[3];
    if (!pixels || !d.row_bytes) return QF_OK;
    cu_with_word(cu_word_bytes((uintptr_t)x | (uintptr_t)y | (uint64_t)d.row_bytes),
                 [&](auto *word) { launch_rows<std::remove_pointer_t<decltype(word)>>(d, y, x, pixels, s); });
    CU_LAUNCHED();
    return QF_OK;
}

static qf_status resize_launch(cu_engine *c, cu_layer *L, cudaStream_t s)
{
    const qfi_resize_params *p = (const qfi_resize_params *)L->n->params;
    const resize_desc *d = (const resize_desc *)L->state;
    if (d->rows) return resize_rows_launch(c, L, *d, s);
    if (p->mode != QFI_RESIZE_LINEAR)
        return cu_move_node(c, L, d->extrapolation, NULL, [&](auto m, unsigned blocks, int64_t total) {
            resize_nearest_kernel<<<blocks, 256, 0, s>>>(m, *d, total);
            CU_LAUNCHED();
            return QF_OK;
        });
    /* linear computes in float: through cu_load and cu_store, whatever the dtypes */
    const int xv = L->n->in[0], yv = cu_out_value(L, 0);
    void *x, *y;
    QF_CHECK(cu_value_ptr(c, xv, &x));
    QF_CHECK(cu_value_ptr(c, yv, &y));
    const int64_t total = qf_value_numel(&c->g->values[yv]);
    const unsigned blocks = cu_blocks(total, 256);
    if (!total) return QF_OK;
    resize_linear_kernel<<<blocks > 65536 ? 65536 : blocks, 256, 0, s>>>(y, cu_elem_of(c, L->n, yv), x,
                                                                         cu_elem_of(c, L->n, xv), *d, total);
    CU_LAUNCHED();
    return QF_OK;
}

const cu_op cu_op_resize = {resize_prepare, NULL, resize_launch, CU_RULE_LIKE_INPUT, CU_ALL_PRECISIONS, resize_check};
