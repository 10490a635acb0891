/* A channel shuffle on the device (fusion.cu, cu_fuse_channel_shuffles):
 * the Concat along channels (if folded in), Reshape [N,C,H,W] ->
 * [N,g,C/g,H,W], Transpose(0,2,1,3,4) and Reshape back, as one gather into
 * an NHWC output. Output channel c = i*g + j holds channel j*(C/g) + i of
 * the concatenation; a table made at prepare names, for each output channel,
 * the input and its channel there, and the inputs are read through their
 * own strides (NHWC or logical alike). Elements move as they are: the chain
 * converts nothing (fusion.cu folds a Concat only when its inputs' elements
 * match its output's). */
#include "cuda_internal.h"

namespace {

struct shuffle_params {
    const void *src[CU_SHUFFLE_MAX_IN];
    int32_t sn[CU_SHUFFLE_MAX_IN], sc[CU_SHUFFLE_MAX_IN], sh[CU_SHUFFLE_MAX_IN], sw[CU_SHUFFLE_MAX_IN];
    const int32_t *tab; /* output channel -> input << 24 | its channel there */
    int C, H, W, total;
    cu_fast_div by_c, by_w, by_h;
};

/* One output element a thread, in NHWC order: the stores coalesce, and a
 * warp's loads fall within the few pixels it covers. */
template <typename T>
__global__ void channel_shuffle_kernel(T *y, shuffle_params p)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < p.total; i += gridDim.x * blockDim.x) {
        const int pix = cu_div_by(i, p.by_c), c = i - pix * p.C;
        const int row = cu_div_by(pix, p.by_w), w = pix - row * p.W;
        const int n = cu_div_by(row, p.by_h), h = row - n * p.H;
        const int e = __ldg(p.tab + c), k = e >> 24, ch = e & 0xffffff;
        y[i] = ((const T *)p.src[k])[(int64_t)n * p.sn[k] + (int64_t)ch * p.sc[k] + h * p.sh[k] + w * p.sw[k]];
    }
}

struct shuffle_state {
    cu_shuffle_chain ch;
    shuffle_params p;
    size_t es;
};

qf_status shuffle_prepare(cu_engine *c, cu_layer *L)
{
    const qf_graph *g = c->g;
    shuffle_state *st = (shuffle_state *)qfi_calloc(1, sizeof *st);
    if (!st) return QF_ERR_NOMEM;
    st->ch = *(const cu_shuffle_chain *)L->state;
    free(L->state); /* the chain: fusion.cu's */
    L->state = st;
    L->free_state = free;
    const cu_shuffle_chain &ch = st->ch;
    const qf_value *y = &g->values[ch.out];
    shuffle_params &p = st->p;
    p.C = (int)y->dims[1], p.H = (int)y->dims[2], p.W = (int)y->dims[3];
    p.total = (int)qf_value_numel(y); /* below 2^31: fusion.cu checks */
    p.by_c = cu_make_fast_div((uint32_t)p.C), p.by_w = cu_make_fast_div((uint32_t)p.W);
    p.by_h = cu_make_fast_div((uint32_t)p.H);
    st->es = qf_dtype_info(y->dtype)->size;
    int32_t *tab = (int32_t *)qfi_calloc((size_t)p.C + 1, sizeof *tab);
    int64_t *first = (int64_t *)qfi_calloc((size_t)ch.n_in + 1, sizeof *first);
    if (!tab || !first) {
        free(tab);
        free(first);
        return QF_ERR_NOMEM;
    }
    for (int k = 1; k <= ch.n_in; k++) first[k] = first[k - 1] + g->values[ch.in[k - 1]].dims[1];
    const int64_t per = p.C / ch.groups;
    for (int64_t o = 0, k = 0; o < p.C; o++) {
        const int64_t s = o % ch.groups * per + o / ch.groups; /* its channel of the concatenation */
        for (k = 0; s >= first[k + 1]; k++) {}
        tab[o] = (int32_t)(k << 24 | (s - first[k]));
    }
    free(first);
    qf_status s = cu_upload(c, tab, (size_t)p.C * sizeof *tab, (void **)&p.tab);
    free(tab);
    QF_CHECK(s);
    for (int k = 0; k < ch.n_in; k++) {
        void *ptr;
        QF_CHECK(cu_value_ptr(c, ch.in[k], &ptr));
    }
    return QF_OK;
}

qf_status shuffle_launch(cu_engine *c, cu_layer *L, cudaStream_t s)
{
    shuffle_state *st = (shuffle_state *)L->state;
    shuffle_params p = st->p;
    for (int k = 0; k < st->ch.n_in; k++) {
        void *ptr;
        int64_t xs[4];
        QF_CHECK(cu_value_ptr(c, st->ch.in[k], &ptr));
        cu_strides(c, st->ch.in[k], xs);
        p.src[k] = ptr;
        p.sn[k] = (int32_t)xs[0], p.sc[k] = (int32_t)xs[1], p.sh[k] = (int32_t)xs[2], p.sw[k] = (int32_t)xs[3];
    }
    void *y;
    QF_CHECK(cu_value_ptr(c, st->ch.out, &y));
    if (!p.total) return QF_OK;
    const unsigned b = cu_blocks(p.total, 256) > 65536 ? 65536 : cu_blocks(p.total, 256);
    switch (st->es) {
    case 1: channel_shuffle_kernel<uint8_t><<<b, 256, 0, s>>>((uint8_t *)y, p); break;
    case 2: channel_shuffle_kernel<uint16_t><<<b, 256, 0, s>>>((uint16_t *)y, p); break;
    case 4: channel_shuffle_kernel<uint32_t><<<b, 256, 0, s>>>((uint32_t *)y, p); break;
    default: return qf_error(QF_ERR_UNSUPPORTED, "no channel shuffle for %zu-byte elements", st->es);
    }
    CU_LAUNCHED();
    return QF_OK;
}

} // namespace

const cu_op cu_op_channel_shuffle = {shuffle_prepare, NULL, shuffle_launch, CU_RULE_NHWC, CU_ALL_PRECISIONS, NULL};
