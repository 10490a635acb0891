/* ConvTranspose on the device, 2-D, FP32 and FP16 (FP32 arithmetic): a
 * gather per output element (NHWC, channels fastest, so weight reads
 * coalesce and an input pixel is one broadcast). Output position o takes
 * input position i under tap k where i*stride - pad + k*dil = o; like
 * runtime/cpu/conv_transpose.c it starts from the bias and adds one dot
 * product over the group's input channels per tap, taps in (kh, kw) order. */
#include "cuda_internal.h"

typedef struct convt_geo {
    int64_t N, C, H, W, M, Ho, Wo;
    int64_t cg, mg;             /* channels per group: input, output */
    int kh, kw, sh, sw, ph, pw, dh, dw;
} convt_geo;

typedef struct convt_state {
    convt_geo p;
    float *w;                   /* device: [kh][kw][C][M/group], FP32 (f16 weights widened exactly) */
    float *bias;                /* device [M], or NULL */
} convt_state;

__global__ void conv_transpose_kernel(void *y, cu_elem ye, const void *x, cu_elem xe, const float *w,
                                      const float *bias, convt_geo p, int64_t total)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        /* y is (N, Ho, Wo, M) */
        const int64_t m = i % p.M;
        int64_t r = i / p.M;
        const int64_t ow = r % p.Wo;
        r /= p.Wo;
        const int64_t oh = r % p.Ho, n = r / p.Ho;
        const int64_t gi = m / p.mg, mm = m % p.mg;
        float acc = bias ? bias[m] : 0.0f;
        for (int kh = 0; kh < p.kh; kh++) {
            const int64_t th = oh + p.ph - (int64_t)kh * p.dh;
            if (th < 0 || th % p.sh) continue;
            const int64_t ih = th / p.sh;
            if (ih >= p.H) continue;
            for (int kw = 0; kw < p.kw; kw++) {
                const int64_t tw = ow + p.pw - (int64_t)kw * p.dw;
                if (tw < 0 || tw % p.sw) continue;
                const int64_t iw = tw / p.sw;
                if (iw >= p.W) continue;
                const int64_t xb = ((n * p.H + ih) * p.W + iw) * p.C + gi * p.cg;
                const float *wr = w + (((int64_t)kh * p.kw + kw) * p.C + gi * p.cg) * p.mg + mm;
                float dot = 0.0f;
                for (int64_t c = 0; c < p.cg; c++) dot = fmaf(cu_load(x, xe, xb + c), wr[c * p.mg], dot);
                acc = qfi_add(acc, dot);
            }
        }
        cu_store(y, ye, i, acc);
    }
}

static float const_f(const qf_value *v, int64_t i)
{
    return v->dtype == QF_F16 ? qf_f16_to_f32(((const uint16_t *)v->data)[i]) : ((const float *)v->data)[i];
}

static bool float_const(const qf_value *v)
{
    return (v->flags & QF_VALUE_CONST) && v->data && (v->dtype == QF_F32 || v->dtype == QF_F16);
}

static qf_status conv_transpose_check(const qf_graph *g, const qf_node *n)
{
    const qf_value *x = qfi_in(g, n, 0), *w = qfi_in(g, n, 1), *b = qfi_in(g, n, 2);
    if (x->ndim != 4)
        return qf_error(QF_ERR_UNSUPPORTED, "the CUDA engine runs 2-D transposed convolutions only; input %s has %d dims",
                        x->name, x->ndim);
    if (!float_const(w) || (b && !float_const(b)))
        return qf_error(QF_ERR_UNSUPPORTED, "weight %s and bias must be float constants", w->name);
    if (!cu_float_like(g, n, x) || !cu_float_like(g, n, qfi_out(g, n, 0)))
        return qf_error(QF_ERR_UNSUPPORTED, "input %s of dtype %s", x->name, qf_dtype_info(x->dtype)->name);
    return QF_OK;
}

static qf_status conv_transpose_prepare(cu_engine *c, cu_layer *L)
{
    const qf_graph *g = c->g;
    const qf_node *n = L->n;
    const qf_value *w = qfi_in(g, n, 1), *b = qfi_in(g, n, 2);
    qfi_conv_geom geo;
    QF_CHECK(qfi_conv_transpose_geometry(cu_geo_graph(c, n), n, &geo));
    convt_state *st = (convt_state *)qfi_calloc(1, sizeof *st);
    if (!st) return QF_ERR_NOMEM;
    L->state = st;
    convt_geo &p = st->p;
    p.N = geo.N, p.C = geo.C, p.M = geo.M, p.cg = geo.C / geo.group, p.mg = geo.M / geo.group;
    p.H = geo.w.in[1], p.W = geo.w.in[2], p.Ho = geo.w.out[1], p.Wo = geo.w.out[2];
    p.kh = (int)geo.w.k[1], p.kw = (int)geo.w.k[2], p.sh = (int)geo.w.stride[1], p.sw = (int)geo.w.stride[2];
    p.ph = (int)geo.w.pad[1], p.pw = (int)geo.w.pad[2], p.dh = (int)geo.w.dil[1], p.dw = (int)geo.w.dil[2];
    /* W (C, M/group, kh, kw) -> [kh][kw][C][M/group] */
    const int64_t taps = (int64_t)p.kh * p.kw, wn = taps * p.C * p.mg;
    float *hw = (float *)malloc((size_t)(wn ? wn : 1) * sizeof *hw);
    if (!hw) return qf_error(QF_ERR_NOMEM, "out of memory reordering weight %s", w->name);
    for (int64_t ci = 0; ci < p.C; ci++)
        for (int64_t mm = 0; mm < p.mg; mm++)
            for (int64_t t = 0; t < taps; t++) hw[(t * p.C + ci) * p.mg + mm] = const_f(w, (ci * p.mg + mm) * taps + t);
    qf_status s = cu_upload(c, hw, (size_t)wn * sizeof *hw, (void **)&st->w);
    free(hw);
    QF_CHECK(s);
    if (b) {
        float *hb = (float *)malloc((size_t)(p.M ? p.M : 1) * sizeof *hb);
        if (!hb) return QF_ERR_NOMEM;
        for (int64_t m = 0; m < p.M; m++) hb[m] = const_f(b, m);
        s = cu_upload(c, hb, (size_t)p.M * sizeof *hb, (void **)&st->bias);
        free(hb);
        QF_CHECK(s);
    }
    cu_need_input_as(c, L, 0, CU_NHWC);
    void *ptr;
    return cu_value_ptr(c, n->in[0], &ptr);
}

static qf_status conv_transpose_launch(cu_engine *c, cu_layer *L, cudaStream_t s)
{
    const convt_state *st = (const convt_state *)L->state;
    const convt_geo &p = st->p;
    const int yv = cu_out_value(L, 0);
    const void *x;
    void *y;
    QF_CHECK(cu_input_as(c, L, 0, CU_NHWC, s, &x));
    QF_CHECK(cu_value_ptr(c, yv, &y));
    const int64_t total = p.N * p.Ho * p.Wo * p.M;
    if (!total) return QF_OK;
    unsigned blocks = cu_blocks(total, 256);
    conv_transpose_kernel<<<blocks > 65536 ? 65536 : blocks, 256, 0, s>>>(
        y, cu_elem_of(c, L->n, yv), x, cu_elem_of(c, L->n, L->n->in[0]), st->w, st->bias, p, total);
    CU_LAUNCHED();
    return QF_OK;
}

const cu_op cu_op_conv_transpose = {conv_transpose_prepare, NULL, conv_transpose_launch, CU_RULE_NHWC,
                                     CU_ALL_PRECISIONS, conv_transpose_check};
