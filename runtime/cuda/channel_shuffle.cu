/* A channel shuffle on the device (fusion.cu, cu_fuse_channel_shuffles):
 * the Concat along channels (if folded in), Reshape [N,C,H,W] ->
 * [N,g,C/g,H,W], Transpose(0,2,1,3,4) and Reshape back, as one gather into
 * NHWC outputs: the shuffled value, or the Slices along channels that split
 * it (cu_fuse_shuffle_slices). Output channel c = i*g + j holds channel
 * j*(C/g) + i of the concatenation; tables made at prepare name, for each
 * output channel, the input and its channel there, and the output and its
 * channel there. Inputs are read through their own strides, or as NHWC rows
 * where they are NHWC. Elements move as they are: the chain converts nothing
 * (fusion.cu folds a Concat only when its inputs' elements match its
 * output's). */
#include "cuda_internal.h"

namespace {

struct shuffle_params {
    const void *src[CU_SHUFFLE_MAX_IN];
    /* each input's element strides along n, c, h, w, and its channels (an NHWC input's pixel stride) */
    int32_t sn[CU_SHUFFLE_MAX_IN], sc[CU_SHUFFLE_MAX_IN], sh[CU_SHUFFLE_MAX_IN], sw[CU_SHUFFLE_MAX_IN];
    int32_t cin[CU_SHUFFLE_MAX_IN];
    void *dst[CU_SHUFFLE_MAX_OUT];
    int32_t dc[CU_SHUFFLE_MAX_OUT]; /* each output's channels */
    const int32_t *tab;  /* output channel -> input << 24 | its channel there */
    const int32_t *otab; /* output channel -> output << 24 | its channel there */
    int n_in, n_out, C, H, W, units, total; /* units: C / E a pixel; total: units of all pixels */
    cu_fast_div by_units, by_w, by_h;
};

/* E consecutive output channels of one pixel a thread (E divides every
 * output's channels, so they land in one output, one vector store); each
 * element gathered by the table. NHWC: every input NHWC, read at its
 * channel count times the pixel (no n, h, w arithmetic). The pointers and
 * strides are copied to shared memory: indexed by a table entry, from the
 * parameters they would go through local memory. */
template <typename T, int E, bool NHWC>
__global__ void __launch_bounds__(256) channel_shuffle_kernel(shuffle_params p)
{
    __shared__ const T *src[CU_SHUFFLE_MAX_IN];
    __shared__ T *dst[CU_SHUFFLE_MAX_OUT];
    __shared__ int32_t sn[CU_SHUFFLE_MAX_IN], sc[CU_SHUFFLE_MAX_IN], sh[CU_SHUFFLE_MAX_IN], sw[CU_SHUFFLE_MAX_IN],
        cin[CU_SHUFFLE_MAX_IN], dc[CU_SHUFFLE_MAX_OUT];
    if (threadIdx.x < CU_SHUFFLE_MAX_IN) {
        const int k = threadIdx.x;
        src[k] = (const T *)p.src[k], sn[k] = p.sn[k], sc[k] = p.sc[k], sh[k] = p.sh[k], sw[k] = p.sw[k];
        cin[k] = p.cin[k];
    } else if (threadIdx.x < CU_SHUFFLE_MAX_IN + CU_SHUFFLE_MAX_OUT) {
        const int k = threadIdx.x - CU_SHUFFLE_MAX_IN;
        dst[k] = (T *)p.dst[k], dc[k] = p.dc[k];
    }
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < p.total; i += gridDim.x * blockDim.x) {
        const int pix = cu_div_by(i, p.by_units), c0 = (i - pix * p.units) * E;
        int n = 0, h = 0, w = 0;
        if (!NHWC) {
            const int row = cu_div_by(pix, p.by_w);
            w = pix - row * p.W, n = cu_div_by(row, p.by_h), h = row - n * p.H;
        }
        cu_vec<T, E> v;
#pragma unroll
        for (int e = 0; e < E; e++) {
            const int t = __ldg(p.tab + c0 + e), k = t >> 24, ch = t & 0xffffff;
            v.e[e] = NHWC ? src[k][(int64_t)pix * cin[k] + ch]
                          : src[k][(int64_t)n * sn[k] + (int64_t)ch * sc[k] + h * sh[k] + w * sw[k]];
        }
        const int o = __ldg(p.otab + c0), j = o >> 24;
        v.store(dst[j] + (int64_t)pix * dc[j] + (o & 0xffffff));
    }
}

struct shuffle_state {
    cu_shuffle_chain ch;
    shuffle_params p;
    size_t es;
    int E;
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
    p.n_in = ch.n_in, p.n_out = ch.n_out;
    p.C = (int)y->dims[1], p.H = (int)y->dims[2], p.W = (int)y->dims[3];
    st->es = qf_dtype_info(y->dtype)->size;
    /* the widest E up to 4 that every output's channels and first channel divide into */
    st->E = 4;
    for (int k = 0; k < ch.n_out; k++)
        while (st->E > 1 && (g->values[ch.outs[k]].dims[1] % st->E || ch.out_first[k] % st->E)) st->E /= 2;
    p.units = p.C / st->E;
    p.total = (int)(qf_value_numel(y) / st->E); /* below 2^31: fusion.cu checks */
    p.by_units = cu_make_fast_div((uint32_t)p.units), p.by_w = cu_make_fast_div((uint32_t)p.W);
    p.by_h = cu_make_fast_div((uint32_t)p.H);
    int32_t *tab = (int32_t *)qfi_calloc(2 * (size_t)p.C + 1, sizeof *tab), *otab = tab + p.C;
    int64_t *first = (int64_t *)qfi_calloc((size_t)ch.n_in + 1, sizeof *first);
    if (!tab || !first) {
        free(tab);
        free(first);
        return QF_ERR_NOMEM;
    }
    for (int k = 1; k <= ch.n_in; k++) first[k] = first[k - 1] + g->values[ch.in[k - 1]].dims[1];
    const int64_t per = p.C / ch.groups;
    for (int64_t o = 0, k = 0, j = 0; o < p.C; o++) {
        const int64_t s = o % ch.groups * per + o / ch.groups; /* its channel of the concatenation */
        for (k = 0; s >= first[k + 1]; k++) {}
        tab[o] = (int32_t)(k << 24 | (s - first[k]));
        for (j = ch.n_out - 1; ch.out_first[j] > o; j--) {}
        otab[o] = (int32_t)(j << 24 | (o - ch.out_first[j]));
    }
    free(first);
    qf_status s = cu_upload(c, tab, 2 * (size_t)p.C * sizeof *tab, (void **)&p.tab);
    free(tab);
    QF_CHECK(s);
    p.otab = p.tab + p.C;
    for (int k = 0; k < ch.n_out; k++) p.dc[k] = (int32_t)g->values[ch.outs[k]].dims[1];
    for (int k = 0; k < ch.n_in; k++) p.cin[k] = (int32_t)g->values[ch.in[k]].dims[1];
    for (int k = 0; k < ch.n_in; k++) {
        void *ptr;
        QF_CHECK(cu_value_ptr(c, ch.in[k], &ptr));
    }
    return QF_OK;
}

template <typename T, int E>
void launch(cudaStream_t s, const shuffle_params &p, bool nhwc)
{
    const unsigned b = cu_blocks(p.total, 256) > 65536 ? 65536 : cu_blocks(p.total, 256);
    if (nhwc) channel_shuffle_kernel<T, E, true><<<b, 256, 0, s>>>(p);
    else channel_shuffle_kernel<T, E, false><<<b, 256, 0, s>>>(p);
}

template <typename T>
void launch_e(cudaStream_t s, const shuffle_params &p, int E, bool nhwc)
{
    if (E == 4) launch<T, 4>(s, p, nhwc);
    else if (E == 2) launch<T, 2>(s, p, nhwc);
    else launch<T, 1>(s, p, nhwc);
}

qf_status shuffle_launch(cu_engine *c, cu_layer *L, cudaStream_t s)
{
    const shuffle_state *st = (const shuffle_state *)L->state;
    shuffle_params p = st->p;
    bool nhwc = true;
    for (int k = 0; k < st->ch.n_in; k++) {
        const int v = st->ch.in[k];
        void *ptr;
        int64_t xs[4];
        QF_CHECK(cu_value_ptr(c, v, &ptr));
        cu_strides(c, v, xs);
        p.src[k] = ptr;
        p.sn[k] = (int32_t)xs[0], p.sc[k] = (int32_t)xs[1], p.sh[k] = (int32_t)xs[2], p.sw[k] = (int32_t)xs[3];
        nhwc = nhwc && xs[1] == 1 && xs[3] == p.cin[k] && xs[2] == p.W * xs[3];
    }
    for (int k = 0; k < st->ch.n_out; k++) QF_CHECK(cu_value_ptr(c, st->ch.outs[k], &p.dst[k]));
    if (!p.total) return QF_OK;
    switch (st->es) {
    case 1: launch_e<uint8_t>(s, p, st->E, nhwc); break;
    case 2: launch_e<uint16_t>(s, p, st->E, nhwc); break;
    case 4: launch_e<uint32_t>(s, p, st->E, nhwc); break;
    default: return qf_error(QF_ERR_UNSUPPORTED, "no channel shuffle for %zu-byte elements", st->es);
    }
    CU_LAUNCHED();
    return QF_OK;
}

} // namespace

const cu_op cu_op_channel_shuffle = {shuffle_prepare, NULL, shuffle_launch, CU_RULE_NHWC, CU_ALL_PRECISIONS, NULL};
