/* Pad on the device: constant, reflect, edge and wrap, negative pads
 * cropping, any rank; a 4-D output keeps its input's layout (NHWC after a
 * Conv). One thread per output element, in storage order; each dim maps its
 * index to an input index as runtime/cpu/pad.c does (qfi_pad_source). INT8
 * is a pass-through: the stored bytes move unchanged. */
#include "cuda_internal.h"

typedef struct pad_desc {
    cu_walk y;                      /* the output in storage order */
    int nd;
    int64_t xdims[QF_MAX_DIMS];     /* logical */
    int64_t xs[QF_MAX_DIMS];        /* the input's element strides per logical dim */
    int64_t begin[QF_MAX_DIMS];
    qfi_pad_mode mode;
} pad_desc;

template <typename M> __global__ void pad_kernel(M m, pad_desc d, int64_t total)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t o[QF_MAX_DIMS], off = 0;
        cu_walk_coords(d.y, i, o);
        bool outside = false;
        for (int k = 0; k < d.nd && !outside; k++) {
            int64_t j = qfi_pad_source(o[k], d.begin[k], d.xdims[k], d.mode);
            outside = j < 0;
            off += j * d.xs[k];
        }
        if (outside) m.set(i);
        else m.copy(i, off);
    }
}

typedef struct pad_state {
    pad_desc d;
    float fill;                 /* the constant, as the f32 view sees it */
    unsigned char fill_raw[8];  /* ... and as stored, for dtypes that are not float-like */
} pad_state;

static qf_status pad_check(const qf_graph *g, const qf_node *n)
{
    const qf_value *cv = qfi_in(g, n, 2);
    if (cv && !(cv->flags & QF_VALUE_CONST) && qf_value_numel(cv) > 0)
        return qf_error(QF_ERR_UNSUPPORTED, "constant_value %s is computed at run time", cv->name);
    return QF_OK;
}

static qf_status pad_prepare(cu_engine *c, cu_layer *L)
{
    const qf_graph *g = c->g;
    const qf_node *n = L->n;
    const qfi_pad_params *p = (const qfi_pad_params *)n->params;
    const qf_value *x = qfi_in(g, n, 0), *cv = qfi_in(g, n, 2);
    const int yv = cu_out_value(L, 0);
    if (!cu_can_move(cu_elem_of(c, n, yv), cu_elem_of(c, n, n->in[0])))
        return qf_error(QF_ERR_UNSUPPORTED, "no device copy from %s to %s", qf_dtype_info(x->dtype)->name,
                        qf_dtype_info(g->values[yv].dtype)->name);
    pad_state *st = (pad_state *)qfi_calloc(1, sizeof *st);
    if (!st) return QF_ERR_NOMEM;
    L->state = st;
    /* the CPU kernel's value: the constant_value input, else the opset < 11 attribute (f32 only) */
    if (cv && qf_value_numel(cv) == 1 && cv->data) {
        memcpy(st->fill_raw, cv->data, qf_dtype_info(cv->dtype)->size);
        if (cv->dtype == QF_F32) st->fill = ((const float *)cv->data)[0];
        else if (cv->dtype == QF_F16) st->fill = qf_f16_to_f32(((const uint16_t *)cv->data)[0]);
        else if (cv->dtype == QF_I8 && cv->scale > 0.0f)
            st->fill = qfi_dequantize_i8_zp(((const int8_t *)cv->data)[0], cv->scale, cv->zero_point);
    } else if (qfi_f32_view_dtype(x) == QF_F32) {
        st->fill = p->value;
    }
    pad_desc &d = st->d;
    cu_walk_init(c, yv, &d.y);
    d.nd = x->ndim;
    d.mode = p->mode;
    cu_strides(c, n->in[0], d.xs);
    for (int k = 0; k < x->ndim; k++) {
        d.xdims[k] = x->dims[k];
        d.begin[k] = p->begin[k];
    }
    void *ptr;
    return cu_value_ptr(c, n->in[0], &ptr);
}

static qf_status pad_launch(cu_engine *c, cu_layer *L, cudaStream_t s)
{
    const pad_state *st = (const pad_state *)L->state;
    void *x, *y;
    QF_CHECK(cu_value_ptr(c, L->n->in[0], &x));
    QF_CHECK(cu_value_ptr(c, cu_out_value(L, 0), &y));
    if (x == y) return QF_OK; /* a pad that adds nothing, a view of its input (cuda_engine.cu, find_views) */
    return cu_move_node(c, L, st->fill, st->fill_raw, [&](auto m, unsigned blocks, int64_t total) {
        pad_kernel<<<blocks, 256, 0, s>>>(m, st->d, total);
        CU_LAUNCHED();
        return QF_OK;
    });
}

const cu_op cu_op_pad = {pad_prepare, NULL, pad_launch, CU_RULE_LIKE_INPUT, CU_ALL_PRECISIONS, pad_check};

/* ---- a conv's int8 NHWC input padded with its zero point (conv.cu) ----
 * One block per output row (n, hp); its threads walk the row's Wp * C bytes
 * in words V of whole channels' bytes, copying or filling. */
template <typename V>
__global__ void pad_nhwc_rows(const V *x, V *y, V fill, int H, int W, int Hp, int Wp, int Cv, int top, int left)
{
    const int row = blockIdx.x, n = row / Hp, h = row - n * Hp - top;
    const bool inside = h >= 0 && h < H;
    V *yr = y + (int64_t)row * Wp * Cv;
    const V *xr = x + ((int64_t)n * H + (inside ? h : 0)) * W * Cv;
    for (int j = threadIdx.x; j < Wp * Cv; j += blockDim.x) {
        const int w = j / Cv - left;
        yr[j] = inside && w >= 0 && w < W ? xr[(int64_t)w * Cv + j % Cv] : fill;
    }
}

qf_status cu_pad_nhwc_i8(cudaStream_t s, const int8_t *x, int8_t *y, int8_t fill, int64_t N, int64_t H, int64_t W,
                         int64_t C, int64_t Hp, int64_t Wp, int top, int left)
{
    if (N * Hp > INT32_MAX || Wp * C > INT32_MAX) return qf_error(QF_ERR_UNSUPPORTED, "padded input too large");
    const uint32_t word = 0x01010101u * (uint8_t)fill;
    const int threads = 256;
    const unsigned blocks = (unsigned)(N * Hp);
    /* the widest word that holds whole pixels and keeps both tensors aligned (cudaMalloc: 256 bytes) */
    if (C % 16 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)y % 16 == 0) {
        const uint4 f = {word, word, word, word};
        pad_nhwc_rows<<<blocks, threads, 0, s>>>((const uint4 *)x, (uint4 *)y, f, (int)H, (int)W, (int)Hp, (int)Wp,
                                                 (int)(C / 16), top, left);
    } else if (C % 4 == 0 && (uintptr_t)x % 4 == 0 && (uintptr_t)y % 4 == 0) {
        pad_nhwc_rows<<<blocks, threads, 0, s>>>((const uint32_t *)x, (uint32_t *)y, word, (int)H, (int)W, (int)Hp,
                                                 (int)Wp, (int)(C / 4), top, left);
    } else {
        pad_nhwc_rows<<<blocks, threads, 0, s>>>(x, y, fill, (int)H, (int)W, (int)Hp, (int)Wp, (int)C, top, left);
    }
    CU_LAUNCHED();
    return QF_OK;
}
