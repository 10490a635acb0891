/* Conv on the device, NHWC. Ungrouped convolutions are GEMMs through
 * cuBLASLt (gemm.cu): Y [P][M] = X [P][K] x W^T with P = N*Ho*Wo output
 * positions, K = kh*kw*C; a 1x1 stride-1 unpadded conv reads the image
 * itself as X, others unfold it first (im2col into a reusable workspace, K
 * padded with zeros to the Tensor Cores' granule). Weights are reordered to
 * [M][kh][kw][C] once, at build time. FP32 and FP16 take bias, a fused
 * residual Add (the GEMM's C term) and a fused ReLU in cuBLASLt's epilogue;
 * INT8 accumulates in int32 and requantizes in one fused kernel, except where
 * every output channel shares one multiplier (per-tensor weight scales): then
 * cuBLASLt writes int8 itself (alpha = m, float bias = bias * m, beta * C for
 * the residual, ReLU), which differs from lib/quant_math.h's
 * (float)(acc + bias) * m + r * m_r only in float rounding, so by at most one
 * unit where the exact value sits at a rounding boundary. Where the
 * unfolded patches or the int32 accumulators of the whole batch would not fit
 * in L2, the output positions are processed in chunks that do, so those
 * intermediates never travel to device memory. Grouped and depthwise
 * convolutions run directly (conv_grouped.cu), taps in the CPU kernel's order.
 * INT8 padding taps read the input's zero point, as the CPU engine's do (the
 * quantizer's bias holds -z_in times the weights' sums; runtime/cpu/conv_int8.c). */
#include "cuda_internal.h"

typedef cu_conv_geo conv_geo;

typedef struct conv_state {
    conv_geo p;
    qf_precision prec;
    bool direct;          /* grouped / depthwise: direct kernel */
    bool vector;          /* float, one input position: conv_vector.cu */
    bool im2col;
    int64_t K, Kpad, P;
    int64_t chunk;        /* output positions per GEMM (P when not chunked) */
    void *w;              /* GEMM: [Mrows][Kpad]; direct: reorder_weights(); vector: [C][M] */
    void *bias;           /* float paths: M elements of the output's dtype, or NULL */
    cu_gemm *gm, *gm_tail; /* chunk rows, and the last chunk's when P % chunk != 0 */
    int64_t ldacc;        /* INT8: accumulator row length (M rounded up to 4) */
    cu_requant rq;
    bool q8;              /* INT8 -> INT8 in cuBLASLt's epilogue (rq.uniform) */
    bool relu;            /* a fused Relu (float paths) */
    cu_igemm *ig;         /* INT8: the implicit-GEMM kernel, where the shape fits */
    int use_ig;           /* the tactic chosen at tune time: 0 = im2col + cuBLASLt, else ig variant use_ig - 1 */
    cu_dnn_conv *dnn;     /* cuDNN's plans for the conv and its epilogue (conv_cudnn.cu), or NULL */
    void *w_dnn;          /* their packed filters, where st->w has another layout (grouped, or K padded) */
    void *w_dnn16;        /* INT8: the filters' levels as halves, for plans of FP16 operands */
    void *dnn_bias;       /* INT8: the int32 bias as floats, for cuDNN's epilogue */
    void *dnn_zp;         /* INT8 with an output zero point: cu_dnn_args.zp's two scalars */
    int use_dnn;          /* the tactic chosen at tune time: 0 = qforge's path, else dnn plan use_dnn - 1 */
    bool dnn_pad;         /* INT8: the plans are of dnn_p, unpadded, run on the input padded with its zero point */
    conv_geo dnn_p;
    char dnn_key[256];    /* the tactic cache's key of the choice */
} conv_state;

static void conv_free(void *p)
{
    conv_state *st = (conv_state *)p;
    cu_gemm_free(st->gm);
    cu_gemm_free(st->gm_tail);
    cu_igemm_free(st->ig);
    cu_dnn_conv_free(st->dnn);
    free(st);
}

/* ---- im2col: x (N,H,W,C) -> col [P][Kpad], k = (ikh*kw + ikw)*C + c -------------------------- */

/* Every kernel below writes `fill` where a patch has no input element: taps
 * in the padding, which INT8 reads as the input's zero point (zero for
 * float), and k past K, whose weights are zero. */
template <typename V> static V fill_of(uint8_t byte)
{
    V v;
    memset(&v, byte, sizeof v);
    return v;
}

/* Rows p0 .. p0+rows of the patch matrix. A warp walks one row along k (the
 * writes coalesce; reads run along C within a tap); V is one element, or four
 * channels at once when C % 4 == 0. Index arithmetic in 32 bits: one image
 * and one row are far below 2^31 elements. */
template <typename V>
__global__ void im2col_kernel(V *col, const V *x, conv_geo p, int Cv, int Kv, int Kpadv, int64_t p0, int64_t rows, V fill)
{
    const int HoWo = (int)(p.Ho * p.Wo);
    for (int64_t r = blockIdx.x * (int64_t)blockDim.y + threadIdx.y; r < rows; r += (int64_t)gridDim.x * blockDim.y) {
        const int64_t pos = p0 + r, n = pos / HoWo;
        const int rem = (int)(pos - n * HoWo), oh = rem / (int)p.Wo, ow = rem - oh * (int)p.Wo;
        const int ih0 = oh * p.sh - p.ph, iw0 = ow * p.sw - p.pw;
        const V *xn = x + n * p.H * p.W * Cv;
        V *out = col + r * Kpadv;
        for (int k = threadIdx.x; k < Kpadv; k += blockDim.x) {
            V v = fill;
            if (k < Kv) {
                const int t = k / Cv, c = k - t * Cv, ikh = t / p.kw, ikw = t - ikh * p.kw;
                const int ih = ih0 + ikh * p.dh, iw = iw0 + ikw * p.dw;
                if (ih >= 0 && ih < p.H && iw >= 0 && iw < p.W) v = xn[((int64_t)ih * p.W + iw) * Cv + c];
            }
            out[k] = v;
        }
    }
}

/* C * sizeof(T) % 16 == 0: one thread a 16-byte vector of one row (one tap's
 * channels), the threads of a warp on consecutive vectors, so every load and
 * store is 16 bytes and coalesced; 32-bit index arithmetic within a chunk. */
__global__ void im2col_c16_kernel(int4 *col, const int4 *x, conv_geo p, int Cv, int Kv, int Kpadv, int64_t p0, int rows,
                                  int4 fill)
{
    const int HoWo = (int)(p.Ho * p.Wo), total = rows * Kpadv;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int r = i / Kpadv, kv = i - r * Kpadv;
        const int64_t pos = p0 + r, n = pos / HoWo;
        int4 v = fill;
        if (kv < Kv) {
            const int rem = (int)(pos - n * HoWo), oh = rem / (int)p.Wo, ow = rem - oh * (int)p.Wo;
            const int t = kv / Cv, c = kv - t * Cv, ikh = t / p.kw, ikw = t - ikh * p.kw;
            const int ih = oh * p.sh - p.ph + ikh * p.dh, iw = ow * p.sw - p.pw + ikw * p.dw;
            if (ih >= 0 && ih < p.H && iw >= 0 && iw < p.W) v = x[(n * p.H * p.W + (int64_t)ih * p.W + iw) * Cv + c];
        }
        col[i] = v;
    }
}

/* C % 4 != 0 (an RGB first layer): each thread assembles 16 bytes of one row
 * (VW consecutive k) and writes them at once, so the writes are whole
 * vectors however C falls; the tap of k walks along with it instead of being
 * divided out per element. CC > 0 is C known at compile time (3: RGB), so the
 * walk costs no division. 32-bit indices within a chunk (the caller checks). */
template <typename T, int CC>
__global__ void im2col_v16_kernel(int4 *col, const T *x, conv_geo p, int K, int Kv16, int64_t p0, int rows, T fill)
{
    constexpr int VW = 16 / sizeof(T);
    const int HoWo = (int)(p.Ho * p.Wo), C = CC > 0 ? CC : (int)p.C, H = (int)p.H, W = (int)p.W, Wo = (int)p.Wo;
    const int total = rows * Kv16;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int r = i / Kv16;
        const int64_t pos = p0 + r, n = pos / HoWo;
        const int rem = (int)(pos - n * HoWo), oh = rem / Wo, ow = rem - oh * Wo;
        const int ih0 = oh * p.sh - p.ph, iw0 = ow * p.sw - p.pw;
        const T *xn = x + n * H * W * C;
        int k = (i - r * Kv16) * VW;
        int t = k / C, c = k - t * C, ikh = t / p.kw, ikw = t - ikh * p.kw;
        union {
            int4 v;
            T e[VW];
        } u;
#pragma unroll
        for (int j = 0; j < VW; j++, k++) {
            T v = fill;
            const int ih = ih0 + ikh * p.dh, iw = iw0 + ikw * p.dw;
            if (k < K && (unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W) v = xn[(ih * W + iw) * C + c];
            u.e[j] = v;
            if (++c == C) {
                c = 0;
                if (++ikw == p.kw) ikw = 0, ikh++;
            }
        }
        col[i] = u.v;
    }
}

static qf_status im2col(cudaStream_t s, const conv_state *st, qf_dtype dt, const void *x, void *col, int64_t p0,
                        int64_t rows)
{
    const conv_geo &p = st->p;
    const int64_t es = (int64_t)qf_dtype_info(dt)->size;
    const uint8_t fb = dt == QF_I8 ? (uint8_t)st->rq.z_in : 0; /* the fill's every byte */
    if ((p.C * es) % 16 == 0 && (st->Kpad * es) % 16 == 0 && rows * (st->Kpad * es / 16) < INT32_MAX) {
        const int vw = (int)(16 / es), Kpadv = (int)(st->Kpad / vw);
        int64_t nb = (rows * Kpadv + 255) / 256;
        unsigned g1 = (unsigned)(nb > 262144 ? 262144 : nb < 1 ? 1 : nb);
        im2col_c16_kernel<<<g1, 256, 0, s>>>((int4 *)col, (const int4 *)x, p, (int)(p.C / vw), (int)(st->K / vw), Kpadv,
                                             p0, (int)rows, fill_of<int4>(fb));
        CU_LAUNCHED();
        return QF_OK;
    }
    const bool vec = p.C % 4 == 0;
    const int div = vec ? 4 : 1;
    const int Cv = (int)(p.C / div), Kv = (int)(st->K / div), Kpadv = (int)(st->Kpad / div);
    dim3 block(32, 8);
    int64_t b = (rows + 7) / 8;
    unsigned grid = (unsigned)(b > 262144 ? 262144 : b < 1 ? 1 : b);
    if (vec) {
        switch (dt) {
        case QF_I8: im2col_kernel<char4><<<grid, block, 0, s>>>((char4 *)col, (const char4 *)x, p, Cv, Kv, Kpadv, p0, rows, fill_of<char4>(fb)); break;
        case QF_F16: im2col_kernel<uint2><<<grid, block, 0, s>>>((uint2 *)col, (const uint2 *)x, p, Cv, Kv, Kpadv, p0, rows, fill_of<uint2>(0)); break;
        default: im2col_kernel<float4><<<grid, block, 0, s>>>((float4 *)col, (const float4 *)x, p, Cv, Kv, Kpadv, p0, rows, fill_of<float4>(0));
        }
    } else if ((st->Kpad * es) % 16 == 0 && rows * (st->Kpad * es / 16) < INT32_MAX && p.H * p.W * p.C < INT32_MAX) {
        const int Kv16 = (int)(st->Kpad * es / 16), K = (int)st->K, R = (int)rows;
        int64_t nb = (rows * Kv16 + 255) / 256;
        unsigned g2 = (unsigned)(nb > 262144 ? 262144 : nb < 1 ? 1 : nb);
        const bool rgb = p.C == 3;
        switch (dt) {
        case QF_I8:
            if (rgb) im2col_v16_kernel<int8_t, 3><<<g2, 256, 0, s>>>((int4 *)col, (const int8_t *)x, p, K, Kv16, p0, R, (int8_t)fb);
            else im2col_v16_kernel<int8_t, 0><<<g2, 256, 0, s>>>((int4 *)col, (const int8_t *)x, p, K, Kv16, p0, R, (int8_t)fb);
            break;
        case QF_F16:
            if (rgb) im2col_v16_kernel<uint16_t, 3><<<g2, 256, 0, s>>>((int4 *)col, (const uint16_t *)x, p, K, Kv16, p0, R, 0);
            else im2col_v16_kernel<uint16_t, 0><<<g2, 256, 0, s>>>((int4 *)col, (const uint16_t *)x, p, K, Kv16, p0, R, 0);
            break;
        default:
            if (rgb) im2col_v16_kernel<float, 3><<<g2, 256, 0, s>>>((int4 *)col, (const float *)x, p, K, Kv16, p0, R, 0.0f);
            else im2col_v16_kernel<float, 0><<<g2, 256, 0, s>>>((int4 *)col, (const float *)x, p, K, Kv16, p0, R, 0.0f);
        }
    } else {
        switch (dt) {
        case QF_I8: im2col_kernel<int8_t><<<grid, block, 0, s>>>((int8_t *)col, (const int8_t *)x, p, Cv, Kv, Kpadv, p0, rows, (int8_t)fb); break;
        case QF_F16: im2col_kernel<uint16_t><<<grid, block, 0, s>>>((uint16_t *)col, (const uint16_t *)x, p, Cv, Kv, Kpadv, p0, rows, (uint16_t)0); break;
        default: im2col_kernel<float><<<grid, block, 0, s>>>((float *)col, (const float *)x, p, Cv, Kv, Kpadv, p0, rows, 0.0f);
        }
    }
    CU_LAUNCHED();
    return QF_OK;
}

/* ---- building ---------------------------------------------------------------------------------- */

/* Weight layouts: the GEMM's, the direct kernels' (cu_direct_conv_words), cuDNN's. */
enum weight_layout { W_GEMM, W_DIRECT, W_DIRECT_WORDS, W_KRSC };

/* Reorders W (M, Cg, kh, kw) of `es`-byte elements: GEMM layout [rows][Kpad]
 * (k = (ikh*kw + ikw)*C + c, zeros past K and past M), the direct
 * kernels' [kh][kw][Cg][M] or words [kh][kw][Cg/4][M] of 4 channels, or
 * [M][kh][kw][Cg] (cuDNN's NHWC filters). */
static void *reorder_weights(const void *w, size_t es, const conv_geo &p, weight_layout lay, int64_t rows, int64_t Kpad)
{
    const bool direct = lay != W_GEMM; /* sized kh*kw*Cg*M, as W_KRSC is */
    const int64_t Cg = p.C / p.group;
    size_t n = direct ? (size_t)(p.kh * p.kw * Cg * p.M) : (size_t)(rows * Kpad);
    char *out = (char *)calloc(n + 1, es);
    if (!out) return NULL;
    const char *src = (const char *)w;
    for (int64_t m = 0; m < p.M; m++)
        for (int64_t c = 0; c < Cg; c++)
            for (int kh = 0; kh < p.kh; kh++)
                for (int kw = 0; kw < p.kw; kw++) {
                    size_t from = (size_t)(((m * Cg + c) * p.kh + kh) * p.kw + kw);
                    const int64_t tap = kh * p.kw + kw;
                    size_t to = lay == W_DIRECT         ? (size_t)((tap * Cg + c) * p.M + m)
                                : lay == W_DIRECT_WORDS ? (size_t)(((tap * (Cg / 4) + c / 4) * p.M + m) * 4 + c % 4)
                                : lay == W_KRSC         ? (size_t)((m * p.kh * p.kw + tap) * Cg + c)
                                                        : (size_t)(m * Kpad + tap * p.C + c);
                    memcpy(out + to * es, src + from * es, es);
                }
    return out;
}

/* GEMM plan of an ungrouped conv (st->q8 decided): chunking, scratch,
 * weights reordered and uploaded, the cuBLASLt plan(s). */
static qf_status conv_plan_gemm(cu_engine *c, cu_layer *L, conv_state *st, const qf_value *w, qf_dtype dt)
{
    const qf_graph *g = c->g;
    const qf_node *n = L->n;
    const conv_geo &p = st->p;
    const bool i8 = st->prec == QF_PREC_INT8;
    const size_t es = qf_dtype_info(dt)->size;
    const int yv = cu_out_value(L, 0);
    st->ldacc = i8 && !st->q8 ? (p.M + 3) / 4 * 4 : p.M;
    /* im2col in chunks whose patches (and int32 accumulators) stay in a third
     * of L2. Measured on ResNet-50 at batch 256 (H200): the 3x3 layers gain;
     * chunking 1x1 layers only for their accumulators lost (0.55 -> 0.86 ms a
     * layer: the smaller GEMMs cost more than the L2 saves), so they run whole. */
    const int64_t row_bytes = st->Kpad * (int64_t)es + (i8 && !st->q8 ? st->ldacc * 4 : 0);
    st->chunk = st->P;
    if (st->im2col) {
        const char *forced = getenv("QFORGE_CUDA_CHUNK_ROWS"); /* tests: make small graphs take the chunked path */
        int64_t budget = c->prop.l2CacheSize > 0 ? c->prop.l2CacheSize / 3 : (8 << 20);
        int64_t rows = forced ? atoll(forced) : budget / row_bytes / 128 * 128;
        if (rows < 128 && !forced) rows = 128;
        if (rows >= 1 && rows < st->P) st->chunk = rows;
    }
    if (st->im2col) cu_need_scratch(c, CU_SCR_COL, (size_t)(st->chunk * st->Kpad) * es);
    if (i8 && !st->q8) cu_need_scratch(c, CU_SCR_ACC, (size_t)(st->chunk * st->ldacc) * 4);
    if (L->residual >= 0) {
        const qf_value *r = &g->values[L->residual];
        if (i8 || r->dtype != dt || c->vals[L->residual].layout != c->vals[yv].layout || qf_value_numel(r) != st->P * p.M)
            return qf_error(QF_ERR_INVALID, "fused residual %s does not match the output", r->name);
        void *rp;
        QF_CHECK(cu_value_ptr(c, L->residual, &rp));
    }
    const int64_t rows = i8 ? st->ldacc : p.M;
    void *hw = reorder_weights(w->data, es, p, W_GEMM, rows, st->Kpad);
    if (!hw) return QF_ERR_NOMEM;
    qf_status s = cu_upload(c, hw, (size_t)(rows * st->Kpad) * es, &st->w);
    free(hw);
    QF_CHECK(s);
    cu_gemm_shape sh;
    memset(&sh, 0, sizeof sh);
    sh.kind = st->q8 ? CU_GEMM_I8Q : i8 ? CU_GEMM_I8 : dt == QF_F16 ? CU_GEMM_F16 : CU_GEMM_F32;
    sh.rows = st->chunk, sh.cols = rows, sh.K = st->Kpad;
    sh.lda = st->im2col ? st->Kpad : p.C, sh.ldb = st->Kpad, sh.ldy = st->ldacc;
    sh.trans_b = true;
    sh.alpha = 1.0f;
    if (!i8) {
        sh.bias = st->bias;
        sh.relu = st->relu;
        sh.accumulate = L->residual >= 0;
    } else if (st->q8) {
        sh.alpha = st->rq.m0;
        sh.relu = st->rq.lo == 0.0f;
        sh.accumulate = n->n_in > 4 && n->in[4] >= 0;
        sh.beta = st->rq.m_r;
        if (st->rq.bias) {
            /* bias * m in float: the epilogue adds it after alpha * acc */
            const qf_value *bv = qfi_in(g, n, 2);
            float *hb = (float *)qfi_calloc((size_t)p.M + 1, sizeof *hb);
            if (!hb) return QF_ERR_NOMEM;
            for (int64_t m = 0; m < p.M; m++) hb[m] = (float)((const int32_t *)bv->data)[m] * st->rq.m0;
            qf_status s2 = cu_upload(c, hb, (size_t)p.M * sizeof *hb, &st->bias);
            free(hb);
            QF_CHECK(s2);
            sh.bias = st->bias;
        }
    }
    /* every row starts 16-byte aligned when K and M rows are (chunks start at multiples of 128 rows) */
    const size_t y_es = st->q8 ? 1 : i8 ? 4 : es;
    sh.min_align = (st->Kpad * es) % 16 == 0 && (st->ldacc * y_es) % 16 == 0 ? 16 : (uint32_t)(st->q8 ? 4 : es);
    if (st->P == 0) return QF_OK;
    QF_CHECK(cu_gemm_create(c, &sh, &st->gm));
    if (st->P % st->chunk) {
        sh.rows = st->P % st->chunk;
        QF_CHECK(cu_gemm_create(c, &sh, &st->gm_tail));
    }
    return QF_OK;
}

/* QFORGE_CUDA_CONV_TACTIC=lt|igemm pins INT8 convs (and INT8 Linear layers)
 * to cuBLASLt or to the implicit GEMM, =cudnn convs (FP16 and INT8) to
 * cuDNN's first plan where it has one (tests exercise each; the default times them all
 * per layer). */
bool cu_tactic_forced(const char *name)
{
    const char *t = getenv("QFORGE_CUDA_CONV_TACTIC");
    return t && strcmp(t, name) == 0;
}

/* 2-D, a constant weight, and float or INT8 operands (a fused consumer's output
 * has the node's own dtype). */
static qf_status conv_check(const qf_graph *g, const qf_node *n)
{
    const qf_value *x = qfi_in(g, n, 0), *w = qfi_in(g, n, 1), *y = qfi_out(g, n, 0);
    if (x->ndim != 4)
        return qf_error(QF_ERR_UNSUPPORTED, "the CUDA engine runs 2-D convolutions only; input %s has %d dims", x->name,
                        x->ndim);
    if (!(w->flags & QF_VALUE_CONST) || !w->data)
        return qf_error(QF_ERR_UNSUPPORTED, "weight %s is computed at run time; the CUDA engine needs a constant", w->name);
    const qf_dtype dt = x->dtype;
    if (n->precision == QF_PREC_INT8) {
        if (dt != QF_I8 || w->dtype != QF_I8)
            return qf_error(QF_ERR_INVALID, "INT8 conv with %s input and %s weight", qf_dtype_info(dt)->name,
                            qf_dtype_info(w->dtype)->name);
    } else if ((dt != QF_F32 && dt != QF_F16) || w->dtype != dt || y->dtype != dt) {
        return qf_error(QF_ERR_UNSUPPORTED, "conv of %s input, %s weight, %s output", qf_dtype_info(dt)->name,
                        qf_dtype_info(w->dtype)->name, qf_dtype_info(y->dtype)->name);
    }
    return QF_OK;
}

/* The device kernels' view of a Conv node's geometry. */
static qf_status conv_geo_of(const cu_engine *c, const qf_node *n, conv_geo *p)
{
    qfi_conv_geom geo;
    QF_CHECK(qfi_conv_geometry(cu_geo_graph(c, n), n, &geo));
    p->N = geo.N, p->C = geo.C, p->M = geo.M, p->group = geo.group;
    p->H = geo.w.in[1], p->W = geo.w.in[2], p->Ho = geo.w.out[1], p->Wo = geo.w.out[2];
    p->kh = (int)geo.w.k[1], p->kw = (int)geo.w.k[2], p->sh = (int)geo.w.stride[1], p->sw = (int)geo.w.stride[2];
    p->ph = (int)geo.w.pad[1], p->pw = (int)geo.w.pad[2], p->dh = (int)geo.w.dil[1], p->dw = (int)geo.w.dil[2];
    return QF_OK;
}

bool cu_conv_igemm_fits(const cu_engine *c, const qf_node *n)
{
    conv_geo p;
    return n->op == QF_OP_CONV && conv_geo_of(c, n, &p) == QF_OK && cu_igemm_fits(&p, qfi_out(c->g, n, 0)->dtype, n->act);
}

/* The tactic cache's value of a cuDNN choice: the heuristic rank + 1 of an
 * int8 (or FP16) graph, DNN_F16_BASE more for the graph of FP16 operands;
 * 0 where qforge's path won. */
#define DNN_F16_BASE 16
/* the largest K whose int8 sums FP32 holds exactly: 128 * 128 * K <= 2^24 */
#define DNN_F16_EXACT_K 1024

static int dnn_cache_value(const conv_state *st, int plan)
{
    return cu_dnn_conv_rank(st->dnn, plan) + 1 + (cu_dnn_conv_f16_operands(st->dnn, plan) ? DNN_F16_BASE : 0);
}

/* A float conv's fused SiLU or Sigmoid is applied after cuDNN's graph, by
 * qforge's own pass (lib/float_math.h's functions, as the CPU engine's),
 * where the output is one value per channel: squeeze-excitation gates,
 * which scale a whole int8 tensor each, so cuDNN's own exponential moved
 * INT8 levels downstream (RegNetY-800MF's INT8 logits agreed with the CPU
 * engine's on 23-30 of 100 images with cuDNN, 96 without); the pass costs
 * nothing at that size. */
static bool dnn_act_after(const cu_layer *L, const conv_geo &p)
{
    return L->n->precision != QF_PREC_INT8 && L->act != QF_ACT_NONE && p.Ho * p.Wo == 1;
}

/* The epilogue cuDNN would fuse for this layer; false where it cannot say
 * qforge's: a residual zero point, an input quantized in the gather, an INT8
 * residual or smooth activation, a HardSwish. *pad_input: the INT8 input has
 * a zero point that padding taps read (cuDNN pads with zeros; without padding
 * the bias holds it), so cuDNN's plans run on a copy padded with it. */
static bool conv_dnn_epilogue(const cu_engine *c, const cu_layer *L, const conv_state *st, cu_dnn_epilogue *ep,
                              bool *pad_input)
{
    const qf_node *n = L->n;
    memset(ep, 0, sizeof *ep);
    *pad_input = false;
    ep->in = qfi_in(c->g, n, 0)->dtype;
    if (st->P == 0 || L->quant_in >= 0) return false;
    if (st->prec == QF_PREC_INT8) {
        const cu_requant &rq = st->rq;
        if (ep->in != QF_I8 || rq.z_r) return false;
        if (rq.z_in) {
            qfi_conv_geom geo;
            if (qfi_conv_geometry(cu_geo_graph(c, n), n, &geo) != QF_OK) return false;
            *pad_input = qfi_window_reads_padding(&geo.w);
        }
        if (rq.z_in && rq.bias) {
            /* cuDNN adds the bias as a float: exact below 2^24, and an input
             * zero point's share (-z_in times the weights' sums) can pass it */
            const int32_t *b = (const int32_t *)qfi_in(c->g, n, 2)->data;
            for (int64_t m = 0; m < st->p.M; m++)
                if (b[m] >= (1 << 24) || b[m] <= -(1 << 24)) return false;
        }
        ep->z_out = rq.out == QF_I8 ? rq.z_out : 0;
        /* cuDNN's own exponential put SiLU/Sigmoid outputs one level off at
         * rounding boundaries (35 % of them): EfficientNet-B0's INT8 GPU
         * top-1 then agreed with the CPU engine's on 0.44 of the images */
        if (rq.act != QF_ACT_NONE) return false;
        ep->out = rq.out;
        ep->bias = rq.bias != NULL;
        ep->scale = true;
        /* a fused residual stays on qforge's kernels: cuDNN's chain rounded
         * r * m_r + v its own way (one level off on 11 % of the outputs, enough
         * to move per-tensor MobileNetV2's top-1 on 7 of 200 images) and
         * gave NaNs for a depthwise conv's; those convs gained 1-2 % from it */
        if (n->n_in > 4 && n->in[4] >= 0) return false;
        ep->clip = isfinite(rq.lo) || isfinite(rq.hi);
        ep->lo = rq.lo, ep->hi = rq.hi;
        if (rq.out != QF_I8 && rq.out != QF_F16 && rq.out != QF_F32) return false;
    } else {
        if (st->prec != QF_PREC_FP16 || ep->in != QF_F16) return false;
        ep->out = QF_F16;
        ep->bias = st->bias != NULL;
        ep->residual = L->residual >= 0;
        ep->clip = st->relu || L->clip; /* ReLU then clip: one clip to [max(0, lo), hi] */
        ep->lo = L->clip ? (st->relu ? fmax(0.0, L->clip_lo) : L->clip_lo) : 0.0;
        ep->hi = L->clip ? L->clip_hi : INFINITY;
        /* no HardSwish pointwise mode in cuDNN; its graph applies an activation before the clip, the chain after */
        if (L->act == QF_ACT_HARD_SWISH || (L->act != QF_ACT_NONE && ep->clip)) return false;
        ep->act = dnn_act_after(L, st->p) ? QF_ACT_NONE : L->act;
    }
    return !ep->clip || isfinite(ep->lo); /* cuDNN's clip has a lower bound */
}

/* cuDNN's plans for the conv and this layer's fused epilogue (FP16, or INT8
 * with qforge's requantize): a second tactic, timed against qforge's own path
 * at tune (conv_choose_dnn). A cached choice builds only its own plan, or
 * none where qforge's path won. */
static qf_status conv_plan_dnn(cu_engine *c, cu_layer *L, conv_state *st, const qf_value *w)
{
    cu_dnn_epilogue ep;
    bool pad_input;
    if (!conv_dnn_epilogue(c, L, st, &ep, &pad_input)) return QF_OK;
    st->dnn_pad = pad_input;
    /* the padded copy holds every row and column the taps reach, no more */
    st->dnn_p = st->p;
    if (st->dnn_pad) {
        conv_geo &q = st->dnn_p;
        q.H = (q.Ho - 1) * q.sh + (int64_t)(q.kh - 1) * q.dh + 1;
        q.W = (q.Wo - 1) * q.sw + (int64_t)(q.kw - 1) * q.dw + 1;
        q.ph = q.pw = 0;
        cu_need_scratch(c, CU_SCR_PAD, (size_t)(q.N * q.H * q.W * q.C));
    }
    const conv_geo &p = st->dnn_p;
    const bool i8 = ep.in == QF_I8;
    /* pins to qforge's own kernels leave cuDNN out: lt and igemm for INT8 layers, qforge for all */
    if (cu_tactic_forced("qforge") || (i8 && (cu_tactic_forced("lt") || cu_tactic_forced("igemm")))) return QF_OK;
    snprintf(st->dnn_key, sizeof st->dnn_key,
             "conv:%s:%lld,%lld,%lld,%lld,%lld,%lld,%lld:%dx%d:s%d,%d:p%d,%d:d%d,%d:g%lld:b%d:r%d:c%g,%g%s",
             i8 ? "i8" : "f16", (long long)p.N, (long long)p.C, (long long)p.H, (long long)p.W, (long long)p.M,
             (long long)p.Ho, (long long)p.Wo, p.kh, p.kw, p.sh, p.sw, p.ph, p.pw, p.dh, p.dw, (long long)p.group, ep.bias,
             ep.residual, ep.clip ? ep.lo : -1.0, ep.clip ? ep.hi : INFINITY,
             !i8 ? "" : ep.out == QF_I8 ? ":o8" : ep.out == QF_F16 ? ":o16" : ":o32");
    if (ep.z_out) snprintf(st->dnn_key + strlen(st->dnn_key), sizeof st->dnn_key - strlen(st->dnn_key), ":z%d", (int)ep.z_out);
    if (ep.act != QF_ACT_NONE) snprintf(st->dnn_key + strlen(st->dnn_key), sizeof st->dnn_key - strlen(st->dnn_key), ":a%d", (int)ep.act);
    /* timed with the padding copy: not the choice for a conv of that unpadded shape */
    if (st->dnn_pad) snprintf(st->dnn_key + strlen(st->dnn_key), sizeof st->dnn_key - strlen(st->dnn_key), ":zpad");
    int cached = -1;
    const bool has = !cu_tactic_forced("cudnn") && qfi_tactic_cache_get(c->tactics, st->dnn_key, &cached);
    if (has && (cached <= 0 || cached > 2 * DNN_F16_BASE)) return QF_OK;
    const int64_t Cg = p.C / p.group;
    const size_t es = i8 ? 1 : 2;
    const int only = has ? (cached - 1) % DNN_F16_BASE : -1;
    const bool cached_f16 = has && cached > DNN_F16_BASE;
    /* the GEMM's [M][Kpad] rows are cuDNN's [M][kh][kw][C] filters where no
     * padding follows K (cuDNN refuses a filter with gaps: BAD_PARAM); others
     * get a packed copy */
    const bool own_layout = !st->direct && st->Kpad == st->K;
    const int64_t ws[4] = {p.kh * p.kw * Cg, 1, p.kw * Cg, Cg};
    /* QFORGE_CUDNN_INT8_HALVES: 1 = the FP16-operand graph too, only = it alone (tests); off by default */
    const char *halves = getenv("QFORGE_CUDNN_INT8_HALVES");
    const bool try_halves = halves && !strcmp(halves, "1"), only_halves = halves && !strcmp(halves, "only");
    if (!cached_f16 && !(i8 && only_halves)) QF_CHECK(cu_dnn_conv_create(c, &p, ws, &ep, only, &st->dnn));
    const int native = cu_dnn_conv_plans(st->dnn);
    /* INT8 grouped convs (and any cuDNN has no int8 plan for) as the levels
     * in halves on FP16 Tensor Cores, exact while no partial sum can pass
     * 2^24 (K * 128 * 128 <= 2^24), whatever the order of summation. Off by
     * default: cuDNN 9.14 offers this graph one engine (8), slower than
     * qforge's grouped kernel on every ResNeXt-50 layer measured (1.48 ms
     * against 0.97, 2.17 against 0.36; its FP16 graph takes engines 10 and
     * 41, 0.31 ms), where it was to beat cuDNN's slow int8 grouped engines. */
    if (i8 && (try_halves || only_halves) && !st->dnn_pad && st->K <= DNN_F16_EXACT_K &&
        (has ? cached_f16 : p.group > 1 || !native || only_halves)) {
        ep.f16_operands = true;
        QF_CHECK(cu_dnn_conv_create(c, &p, ws, &ep, only, &st->dnn));
    }
    if (!st->dnn) return QF_OK;
    if (cu_dnn_conv_plans(st->dnn) > native) {
        int8_t *hw = (int8_t *)reorder_weights(w->data, 1, p, W_KRSC, 0, 0);
        if (!hw) return QF_ERR_NOMEM;
        const size_t nw = (size_t)(p.kh * p.kw * Cg * p.M);
        uint16_t *h16 = (uint16_t *)qfi_calloc(nw + 1, sizeof *h16);
        if (h16)
            for (size_t k = 0; k < nw; k++) h16[k] = qf_f32_to_f16((float)hw[k]);
        free(hw);
        if (!h16) return QF_ERR_NOMEM;
        qf_status s = cu_upload(c, h16, nw * sizeof *h16, &st->w_dnn16);
        free(h16);
        QF_CHECK(s);
        /* the input's halves share the accumulators' slot: this layer's tactics are not both run at once */
        cu_need_scratch(c, CU_SCR_ACC, (size_t)(p.N * p.H * p.W * p.C) * 2);
    }
    if (native && !own_layout) {
        void *hw = reorder_weights(w->data, es, p, W_KRSC, 0, 0);
        if (!hw) return QF_ERR_NOMEM;
        qf_status s = cu_upload(c, hw, (size_t)(p.kh * p.kw * Cg * p.M) * es, &st->w_dnn);
        free(hw);
        QF_CHECK(s);
    }
    if (i8) {
        /* qforge adds the bias in int32 and converts the sum; cuDNN adds it as
         * a float: the same value while |acc + bias| < 2^24, as conv sums are */
        if (ep.bias) {
            const int32_t *bias = (const int32_t *)qfi_in(c->g, L->n, 2)->data;
            float *hb = (float *)qfi_calloc((size_t)p.M + 1, sizeof *hb);
            if (!hb) return QF_ERR_NOMEM;
            for (int64_t m = 0; m < p.M; m++) hb[m] = (float)bias[m];
            qf_status s = cu_upload(c, hb, (size_t)p.M * sizeof *hb, &st->dnn_bias);
            free(hb);
            QF_CHECK(s);
        }
        if (ep.z_out) {
            const float zp[8] = {QFI_MAGIC, 0, 0, 0, (float)ep.z_out - QFI_MAGIC}; /* cu_dnn_args.zp */
            QF_CHECK(cu_upload(c, zp, sizeof zp, &st->dnn_zp));
        }
    }
    /* the workspace shares the im2col slot: a layer runs one tactic, layers run one at a time */
    cu_need_scratch(c, CU_SCR_COL, cu_dnn_conv_workspace(st->dnn));
    return QF_OK;
}

static qf_status conv_prepare(cu_engine *c, cu_layer *L)
{
    const qf_graph *g = c->g;
    const qf_node *n = L->n;
    const qf_value *x = qfi_in(g, n, 0), *w = qfi_in(g, n, 1);
    qfi_conv_geom geo;
    QF_CHECK(qfi_conv_geometry(cu_geo_graph(c, n), n, &geo));
    conv_state *st = (conv_state *)qfi_calloc(1, sizeof *st);
    if (!st) return QF_ERR_NOMEM;
    L->state = st;
    L->free_state = conv_free;
    conv_geo &p = st->p;
    QF_CHECK(conv_geo_of(c, n, &p));
    st->prec = n->precision;
    st->P = p.N * p.Ho * p.Wo;
    st->relu = L->relu;
    const bool i8 = n->precision == QF_PREC_INT8;
    const qf_dtype dt = x->dtype;
    if (i8) QF_CHECK(cu_requant_setup(c, n, p.M, &st->rq));
    const size_t es = qf_dtype_info(dt)->size;
    if (!i8 && geo.has_bias) QF_CHECK(cu_conv_float_bias(c, n, dt, &st->bias));
    if (L->quant_in < 0) cu_need_input_as(c, L, 0, CU_NHWC);
    if (i8 && n->n_in > 4 && n->in[4] >= 0) {
        const qf_value *r = qfi_in(g, n, 4);
        if (r->ndim != 4) return qf_error(QF_ERR_INVALID, "residual %s is not 4-D", r->name);
        if (c->vals[n->in[4]].layout != CU_NHWC) cu_need_scratch(c, CU_SCR_IN2, qf_value_bytes(r)); /* converted to NHWC */
    }
    st->K = p.C / p.group * p.kh * p.kw;
    if (cu_conv_runs_vector(c, L)) {
        /* the CPU engine's sums, bit for bit: no tactic to time */
        st->vector = true;
        return cu_vector_conv_weights(c, n, &st->w);
    }
    if (i8 && st->K > QFI_INT8_MAX_REDUCTION)
        return qf_error(QF_ERR_UNSUPPORTED, "INT8 reduction of %lld terms could overflow int32", (long long)st->K);
    if (p.group != 1) {
        st->direct = true;
        void *hw = reorder_weights(w->data, es, p, cu_direct_conv_words(&p, i8) ? W_DIRECT_WORDS : W_DIRECT, 0, 0);
        if (!hw) return QF_ERR_NOMEM;
        qf_status s = cu_upload(c, hw, (size_t)(p.kh * p.kw * (p.C / p.group) * p.M) * es, &st->w);
        free(hw);
        QF_CHECK(s);
        return conv_plan_dnn(c, L, st, w);
    }
    /* K padded to the Tensor Cores' granule: 16 bytes of operands per row */
    const int64_t gran = i8 ? 16 : dt == QF_F16 ? 8 : 4;
    st->Kpad = (st->K + gran - 1) / gran * gran;
    const bool pointwise = p.kh == 1 && p.kw == 1 && p.sh == 1 && p.sw == 1 && p.ph == 0 && p.pw == 0 &&
                           geo.w.pad_end[1] == 0 && geo.w.pad_end[2] == 0;
    st->im2col = !(pointwise && st->Kpad == p.C);
    /* per-tensor requantization without ReLU/Clip bounds other than ReLU's, no
     * smooth activation and no output or residual zero point (cuBLASLt's
     * epilogue has none of qforge's): cuBLASLt's int8 epilogue */
    st->q8 = i8 && st->rq.uniform && st->rq.out == QF_I8 && st->rq.hi == 127.0f &&
             (st->rq.lo == -128.0f || st->rq.lo == 0.0f) && st->rq.act == QF_ACT_NONE && st->rq.z_out == 0 &&
             st->rq.z_r == 0 && !getenv("QFORGE_CUDA_NO_I8EPI");
    QF_CHECK(conv_plan_gemm(c, L, st, w, dt));
    if (st->q8 && st->gm && !cu_gemm_uses_lt(st->gm)) {
        /* cuBLASLt offers no int8-output algorithm here: the int32 path's is far faster than the fallback kernel */
        qf_log(QF_LOG_DEBUG, "%s: node %s: no cuBLASLt int8-epilogue algorithm, int32 path", c->g->source, n->name);
        cu_gemm_free(st->gm);
        cu_gemm_free(st->gm_tail);
        st->gm = st->gm_tail = NULL;
        st->q8 = false;
        QF_CHECK(conv_plan_gemm(c, L, st, w, dt));
    }
    if (L->quant_in >= 0 && !cu_igemm_fits(&p, st->rq.out, st->rq.act))
        return qf_error(QF_ERR_UNSUPPORTED, "a fused input quantization needs the implicit-GEMM kernel");
    if (i8 && cu_igemm_fits(&p, st->rq.out, st->rq.act) && (!cu_tactic_forced("lt") || L->quant_in >= 0)) {
        /* a second tactic, timed against the GEMM path at tune time */
        const int32_t *bias = geo.has_bias ? (const int32_t *)qfi_in(g, n, 2)->data : NULL;
        QF_CHECK(cu_igemm_create(c, &p, (const int8_t *)w->data, bias, &st->rq, &st->ig));
        cu_need_scratch(c, CU_SCR_COL, cu_igemm_scratch(st->ig));
    }
    return conv_plan_dnn(c, L, st, w);
}

/* The GEMM operands of the chunk starting at output position p0. */
static qf_status conv_buffers(cu_engine *c, cu_layer *L, const void *x, int64_t p0, const void **A, const void **C,
                              void **Y)
{
    const conv_state *st = (const conv_state *)L->state;
    const qf_graph *g = c->g;
    const size_t es = qf_dtype_info(qfi_in(g, L->n, 0)->dtype)->size;
    *A = st->im2col ? c->scratch[CU_SCR_COL] : (const char *)x + (size_t)(p0 * st->p.C) * es;
    *C = NULL;
    if (st->prec == QF_PREC_INT8 && !st->q8) {
        *Y = c->scratch[CU_SCR_ACC];
        return QF_OK;
    }
    void *y;
    QF_CHECK(cu_value_ptr(c, cu_out_value(L, 0), &y));
    *Y = (char *)y + (size_t)(p0 * st->p.M) * es;
    if (L->residual >= 0 && !st->q8) {
        void *r;
        QF_CHECK(cu_value_ptr(c, L->residual, &r));
        *C = (const char *)r + (size_t)(p0 * st->p.M) * es;
    }
    return QF_OK;
}

/* Median time of the whole layer (gather, GEMM, epilogue) under the tactic set in its state. */
static qf_status time_layer(cu_engine *c, cu_layer *L, float *ms)
{
    enum { RUNS = 5 };
    float t[RUNS];
    cudaEvent_t a, b;
    CU_CHECK(cudaEventCreate(&a));
    qf_status st = QF_OK;
    cudaError_t e = cudaEventCreate(&b);
    if (e != cudaSuccess) {
        cudaEventDestroy(a);
        return cu_fail(e, "cudaEventCreate", __FILE__, __LINE__);
    }
    st = L->op->launch(c, L, c->stream); /* warm-up */
    for (int r = 0; r < RUNS && st == QF_OK; r++) {
        e = cudaEventRecord(a, c->stream);
        if (e == cudaSuccess && (st = L->op->launch(c, L, c->stream)) == QF_OK) e = cudaEventRecord(b, c->stream);
        if (e == cudaSuccess && st == QF_OK) e = cudaEventSynchronize(b);
        if (e == cudaSuccess && st == QF_OK) e = cudaEventElapsedTime(&t[r], a, b);
        if (e != cudaSuccess && st == QF_OK) st = cu_fail(e, "timing a conv tactic", __FILE__, __LINE__);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    if (st != QF_OK) return st;
    for (int i = 1; i < RUNS; i++)
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            float x = t[j];
            t[j] = t[j - 1], t[j - 1] = x;
        }
    *ms = t[RUNS / 2];
    return QF_OK;
}

qf_status cu_igemm_choose(cu_engine *c, cu_layer *L, const cu_igemm *ig, const char *key0, qf_act act, bool gemm_ok,
                          int *use, char *how, size_t how_len)
{
    /* TensorRT-style tactic choice: the whole layer timed every way on its real buffers */
    const int n = 1 + cu_igemm_variants(ig);
    float t[1 + CU_IGEMM_MAX_VARIANTS];
    /* tests: run one variant (index mod count), or "splitk": the split-K ones where the layer has any */
    const char *pin = getenv("QFORGE_CUDA_IGEMM_VARIANT");
    bool split_only = false;
    if (pin && !strcmp(pin, "splitk")) {
        for (int v = 0; v < n - 1; v++) split_only |= cu_igemm_split_k(ig, v) > 1;
        pin = NULL;
    }
    /* an implicit-GEMM variant (v > 0) a pin leaves untimed */
    auto pinned_out = [&](int v) {
        return v > 0 && ((pin && v != 1 + atoi(pin) % (n - 1)) || (split_only && cu_igemm_split_k(ig, v - 1) < 2));
    };
    gemm_ok = gemm_ok && !cu_tactic_forced("igemm") && !split_only;
    int best = -1;
    /* the choice of an earlier build of the same layer on this device */
    char key[320];
    snprintf(key, sizeof key, "%s:n%d:v%08x", key0, n, cu_igemm_signature(ig));
    /* a smooth activation changes the epilogue's cost: its own key (keys without one stay as they were) */
    if (act != QF_ACT_NONE) snprintf(key + strlen(key), sizeof key - strlen(key), ":a%d", (int)act);
    int cached;
    if (qfi_tactic_cache_get(c->tactics, key, &cached) && cached >= (gemm_ok ? 0 : 1) && cached < n) {
        *use = cached;
        char d[160];
        if (cached > 0) snprintf(how, how_len, "%s", cu_igemm_describe(ig, cached - 1, d, sizeof d));
        snprintf(how + strlen(how), how_len - strlen(how), " (cached)");
        return QF_OK;
    }
    for (int v = gemm_ok ? 0 : 1; v < n; v++) {
        if (pinned_out(v)) continue;
        *use = v;
        QF_CHECK(time_layer(c, L, &t[v]));
        if (best < 0 || t[v] < t[best]) best = v;
    }
    *use = best;
    qfi_tactic_cache_put(c->tactics, key, best);
    char d[160];
    if (best > 0) snprintf(how, how_len, "%s", cu_igemm_describe(ig, best - 1, d, sizeof d));
    size_t len = strlen(how);
    snprintf(how + len, how_len - len, " (%.3f ms", t[best]);
    for (int v = 0; v < n; v++) {
        len = strlen(how);
        if (v != best && (v == 0 ? gemm_ok : !pin && !pinned_out(v)))
            snprintf(how + len, how_len - len, "; %s %.3f", v == 0 ? "GEMM path" : cu_igemm_describe(ig, v - 1, d, sizeof d), t[v]);
    }
    len = strlen(how);
    snprintf(how + len, how_len - len, ")");
    return QF_OK;
}

/* A layer with cuDNN plans: qforge's own path (use_dnn 0) against each plan,
 * timed through the layer's launch on its real buffers; the cache keeps the
 * winner's heuristic rank + 1 (0: qforge's path, whose win frees the plans). */
static qf_status conv_choose_dnn(cu_engine *c, cu_layer *L, conv_state *st, char *how, size_t how_len)
{
    enum { MAX_PLANS = 16 };
    const int n = cu_dnn_conv_plans(st->dnn);
    char d[96];
    size_t len = strlen(how);
    int cached;
    if (cu_tactic_forced("cudnn") ||
        (n == 1 && qfi_tactic_cache_get(c->tactics, st->dnn_key, &cached) && cached == dnn_cache_value(st, 0))) {
        st->use_dnn = 1;
        snprintf(how + len, how_len - len, "%s%s (%s)", len ? "; " : "", cu_dnn_conv_describe(st->dnn, 0, d, sizeof d),
                 cu_tactic_forced("cudnn") ? "pinned" : "cached");
        return QF_OK;
    }
    float t[MAX_PLANS + 1];
    int best = 0;
    for (int k = 0; k <= n && k <= MAX_PLANS; k++) {
        st->use_dnn = k;
        qf_status ts = time_layer(c, L, &t[k]);
        if (ts != QF_OK && k == 0) return ts;
        if (ts != QF_OK) { /* a cuDNN plan that will not run here is no tactic, not a failed build */
            qf_log(QF_LOG_DEBUG, "%s: node %s: %s dropped: %s", c->g->source, L->n->name,
                   cu_dnn_conv_describe(st->dnn, k - 1, d, sizeof d), qf_error_message());
            t[k] = INFINITY;
            CU_CHECK(cudaGetLastError()); /* a sticky device error still ends the build */
            continue;
        }
        if (t[k] < t[best]) best = k;
    }
    st->use_dnn = best;
    qfi_tactic_cache_put(c->tactics, st->dnn_key, best ? dnn_cache_value(st, best - 1) : 0);
    snprintf(how + len, how_len - len, "%schose %s %.3f ms over", len ? "; " : "",
             best ? cu_dnn_conv_describe(st->dnn, best - 1, d, sizeof d) : "this path", t[best]);
    bool first = true;
    for (int k = 0; k <= n && k <= MAX_PLANS; k++) {
        if (k == best) continue;
        len = strlen(how);
        snprintf(how + len, how_len - len, "%s %s %.3f", first ? "" : ",",
                 k ? cu_dnn_conv_describe(st->dnn, k - 1, d, sizeof d) : "this path", t[k]);
        first = false;
    }
    if (!best) {
        cu_dnn_conv_free(st->dnn);
        st->dnn = NULL;
    }
    return QF_OK;
}

static qf_status conv_tune(cu_engine *c, cu_layer *L)
{
    conv_state *st = (conv_state *)L->state;
    if (!st->gm && !st->dnn) return QF_OK;
    char how[1024] = "";
    if (L->quant_in < 0 && st->gm) { /* with a fused input quantization the int8 input the GEMM path needs does not exist */
        void *x;
        QF_CHECK(cu_value_ptr(c, L->n->in[0], &x));
        const void *A, *C;
        void *Y;
        QF_CHECK(conv_buffers(c, L, x, 0, &A, &C, &Y));
        QF_CHECK(cu_gemm_tune(c, st->gm, A, st->w, Y));
        if (st->gm_tail) QF_CHECK(cu_gemm_tune(c, st->gm_tail, A, st->w, Y));
        snprintf(how, sizeof how, "%s%s, %lld chunk(s)", cu_gemm_describe(st->gm), st->im2col ? " after im2col" : "",
                 (long long)((st->P + st->chunk - 1) / st->chunk));
    }
    if (st->ig) {
        const conv_geo &p = st->p;
        char key[256];
        snprintf(key, sizeof key, "conv:i8:%lld,%lld,%lld,%lld,%lld:%dx%d:s%d,%d:p%d,%d:d%d,%d:r%d:q%d:l%d", (long long)p.N,
                 (long long)p.C, (long long)p.H, (long long)p.W, (long long)p.M, p.kh, p.kw, p.sh, p.sw, p.ph, p.pw, p.dh,
                 p.dw, L->n->n_in > 4 && L->n->in[4] >= 0, L->quant_in >= 0, st->rq.lo == 0.0f);
        /* a half output's epilogue has its own costs and no 1x1 or split-K variant: its own key */
        if (st->rq.out == QF_F16) snprintf(key + strlen(key), sizeof key - strlen(key), ":o16");
        /* with a fused input quantization the implicit GEMM alone can run */
        QF_CHECK(cu_igemm_choose(c, L, st->ig, key, st->rq.act, L->quant_in < 0, &st->use_ig, how, sizeof how));
    }
    if (st->dnn) QF_CHECK(conv_choose_dnn(c, L, st, how, sizeof how));
    qf_log(QF_LOG_DEBUG, "%s: node %s: %s%s%s%s", c->g->source, L->n->name, how,
           st->use_dnn && st->dnn_pad ? ", input padded with its zero point" : "",
           L->quant_in >= 0 ? ", input quantized in the gather" : "",
           L->residual >= 0 || (st->prec == QF_PREC_INT8 && L->n->n_in > 4 && L->n->in[4] >= 0) ? " + residual" : "");
    return QF_OK;
}

static qf_status conv_launch(cu_engine *c, cu_layer *L, cudaStream_t s)
{
    const conv_state *st = (const conv_state *)L->state;
    const qf_graph *g = c->g;
    const qf_node *n = L->n;
    const conv_geo &p = st->p;
    const qf_dtype dt = qfi_in(g, n, 0)->dtype;
    const void *x;
    void *y;
    if (L->quant_in >= 0) QF_CHECK(cu_value_ptr(c, L->quant_in, (void **)&x));
    else QF_CHECK(cu_input_as(c, L, 0, CU_NHWC, s, &x));
    QF_CHECK(cu_value_ptr(c, cu_out_value(L, 0), &y));
    const int8_t *res = NULL;
    if (st->prec == QF_PREC_INT8 && n->n_in > 4 && n->in[4] >= 0) {
        /* the residual is read like the output: NHWC */
        int rv = n->in[4];
        void *rp;
        QF_CHECK(cu_value_ptr(c, rv, &rp));
        res = (const int8_t *)rp;
        if (cu_is_nhwc(c, rv) != cu_is_nhwc(c, cu_out_value(L, 0)) && g->values[rv].ndim == 4) {
            const qf_value *r = &g->values[rv];
            int64_t ss[4], ds[4] = {r->dims[1] * r->dims[2] * r->dims[3], 1, r->dims[3] * r->dims[1], r->dims[1]};
            cu_strides(c, rv, ss);
            cu_elem el = {QF_I8, 0.0f};
            QF_CHECK(cu_strided_copy(s, c->scratch[CU_SCR_IN2], el, ds, 0, rp, el, ss, 0, 4, r->dims));
            res = (const int8_t *)c->scratch[CU_SCR_IN2];
        }
    }
    const int64_t total = st->P * p.M;
    if (total == 0) return QF_OK;
    if (st->use_dnn) {
        const int plan = st->use_dnn - 1;
        cu_dnn_args a = {x, st->w_dnn ? st->w_dnn : st->w, st->bias, NULL, NULL, y, c->scratch[CU_SCR_COL]};
        if (st->dnn_pad) {
            const conv_geo &q = st->dnn_p;
            QF_CHECK(cu_pad_nhwc_i8(s, (const int8_t *)x, (int8_t *)c->scratch[CU_SCR_PAD], (int8_t)st->rq.z_in, p.N, p.H,
                                    p.W, p.C, q.H, q.W, p.ph, p.pw));
            a.x = c->scratch[CU_SCR_PAD];
        }
        if (cu_dnn_conv_f16_operands(st->dnn, plan)) { /* the int8 levels as halves (scale 1: exact) */
            const int64_t nx = p.N * p.H * p.W * p.C, one = 1;
            const cu_elem level = {QF_I8, 1.0f, 0}, half = {QF_F16, 0.0f, 0};
            QF_CHECK(cu_strided_copy(s, c->scratch[CU_SCR_ACC], half, &one, 0, x, level, &one, 0, 1, &nx));
            a.x = c->scratch[CU_SCR_ACC], a.w = st->w_dnn16;
        }
        if (st->prec == QF_PREC_INT8)
            a.bias = st->dnn_bias, a.scale = st->rq.m, a.zp = (const float *)st->dnn_zp;
        else if (L->residual >= 0) QF_CHECK(cu_value_ptr(c, L->residual, (void **)&a.res));
        QF_CHECK(cu_dnn_conv_run(c, st->dnn, plan, s, &a));
        return dnn_act_after(L, p) ? cu_act_inplace(s, y, dt, total, L->act, L->act_gated) : QF_OK;
    }
    if (L->quant_in >= 0) {
        int64_t xs[4];
        cu_strides(c, L->quant_in, xs);
        return cu_igemm_run_quantizing(st->ig, st->use_ig - 1, s, (const float *)x, xs, L->quant_scale, L->quant_zp, res,
                                       (int8_t *)y, c->scratch[CU_SCR_COL]);
    }
    if (st->use_ig) return cu_igemm_run(st->ig, st->use_ig - 1, s, (const int8_t *)x, res, (int8_t *)y, c->scratch[CU_SCR_COL]);
    if (st->vector) {
        QF_CHECK(cu_vector_conv_run(s, &p, c->prop.multiProcessorCount, dt, x, st->w, st->bias, st->relu,
                                    L->clip ? L->clip_lo : -INFINITY, L->clip ? L->clip_hi : INFINITY, y));
        return L->act != QF_ACT_NONE ? cu_act_inplace(s, y, dt, total, L->act, L->act_gated) : QF_OK;
    }
    if (st->direct) {
        QF_CHECK(cu_direct_conv_run(s, &p, dt, x, st->w, st->bias, st->relu, L->clip ? L->clip_lo : -INFINITY,
                                    L->clip ? L->clip_hi : INFINITY, st->prec == QF_PREC_INT8 ? &st->rq : NULL, res, y));
        return L->act != QF_ACT_NONE ? cu_act_inplace(s, y, dt, total, L->act, L->act_gated) : QF_OK;
    }
    const size_t out_es = qf_dtype_info(g->values[cu_out_value(L, 0)].dtype)->size;
    for (int64_t p0 = 0; p0 < st->P; p0 += st->chunk) {
        const int64_t rows = st->P - p0 < st->chunk ? st->P - p0 : st->chunk;
        const cu_gemm *gm = rows == st->chunk ? st->gm : st->gm_tail;
        if (st->im2col) QF_CHECK(im2col(s, st, dt, x, c->scratch[CU_SCR_COL], p0, rows));
        const void *A, *C;
        void *Y;
        QF_CHECK(conv_buffers(c, L, x, p0, &A, &C, &Y));
        if (st->q8 && res) C = res + p0 * p.M; /* the residual in the GEMM's C term, scaled by beta = m_r */
        QF_CHECK(cu_gemm_run(c, gm, A, st->w, C, Y, s));
        if (st->prec == QF_PREC_INT8 && !st->q8)
            QF_CHECK(cu_requant_launch(s, &st->rq, (const int32_t *)Y, rows, p.M, st->ldacc, res ? res + p0 * p.M : NULL,
                                       (char *)y + (size_t)(p0 * p.M) * out_es));
    }
    return L->act != QF_ACT_NONE ? cu_act_inplace(s, y, dt, total, L->act, L->act_gated) : QF_OK;
}

/* ---- helpers the SE gate shares (se_gate.cu) ---------------------------------------------- */

bool cu_conv_runs_vector(const cu_engine *c, const cu_layer *L)
{
    conv_geo p;
    return L->n->op == QF_OP_CONV && L->n->precision != QF_PREC_INT8 && L->residual < 0 &&
           conv_geo_of(c, L->n, &p) == QF_OK && cu_vector_conv_fits(&p);
}

qf_status cu_conv_float_bias(cu_engine *c, const qf_node *n, qf_dtype dt, void **bias)
{
    /* the bias in the output's dtype, as cuBLASLt's epilogue reads it */
    const qf_value *b = qfi_in(c->g, n, 2), *w = qfi_in(c->g, n, 1);
    const int64_t M = w->dims[0];
    const size_t es = qf_dtype_info(dt)->size;
    if (!(b->flags & QF_VALUE_CONST) || !b->data || qf_value_numel(b) != M || (b->dtype != QF_F32 && b->dtype != QF_F16))
        return qf_error(QF_ERR_UNSUPPORTED, "bias %s must be a float constant of %lld elements", b->name, (long long)M);
    char *hb = (char *)calloc((size_t)M + 1, es);
    if (!hb) return QF_ERR_NOMEM;
    for (int64_t m = 0; m < M; m++) {
        float f = b->dtype == QF_F16 ? qf_f16_to_f32(((const uint16_t *)b->data)[m]) : ((const float *)b->data)[m];
        if (dt == QF_F16) ((uint16_t *)hb)[m] = qf_f32_to_f16(f);
        else ((float *)hb)[m] = f;
    }
    qf_status s = cu_upload(c, hb, (size_t)M * es, bias);
    free(hb);
    return s;
}

qf_status cu_vector_conv_weights(cu_engine *c, const qf_node *n, void **w)
{
    const qf_value *wv = qfi_in(c->g, n, 1);
    const int64_t M = wv->dims[0], C = qf_value_numel(wv) / (M ? M : 1);
    const size_t es = qf_dtype_info(wv->dtype)->size;
    char *wt = (char *)malloc((size_t)(M * C) * es + 1);
    if (!wt) return QF_ERR_NOMEM;
    for (int64_t m = 0; m < M; m++) /* [M][C] -> [C][M] */
        for (int64_t k = 0; k < C; k++) memcpy(wt + (k * M + m) * es, (const char *)wv->data + (m * C + k) * es, es);
    qf_status s = cu_upload(c, wt, (size_t)(M * C) * es, w);
    free(wt);
    return s;
}

const cu_op cu_op_conv = {conv_prepare, conv_tune, conv_launch, CU_RULE_NHWC, CU_ALL_PRECISIONS, conv_check};
