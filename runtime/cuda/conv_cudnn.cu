/* cuDNN as a conv tactic (issue 14): a conv and its fused epilogue as one
 * operation graph of cuDNN's Graph API, NHWC by strides. FP16: FP32
 * accumulation and FP32 intermediates (bias, residual Add, ReLU, a clip).
 * INT8: int8 operands summed in int32, then lib/quant_math.h's requantize
 * in FP32 pointwise operations, (acc + bias) * m[c], clamped, and
 * an int8 (or float) output: qforge's kernels' value bit for bit (an
 * output zero point z is added as qforge adds it, to the rounded level:
 * v + QFI_MAGIC rounds v to an integer exactly as rint does, and adding
 * z - QFI_MAGIC to that is exact, so the int8 cast sees rint(v) + z; adding
 * z to v itself would round some v within 2^-18 of a tie the other way). conv.cu
 * keeps INT8 convs with a fused residual or a SiLU/Sigmoid off this graph.
 * cuDNN's heuristics propose
 * engines; each one cuDNN can build for the graph becomes a plan that conv.cu
 * times beside qforge's own path on the layer's real buffers, keeping the
 * winner in the tactic cache. Where cuDNN is missing (cudnn_dl.cu) or builds
 * no plan, there is simply no such tactic. */
#include "cuda_internal.h"

#if QF_HAVE_CUDNN_H
#include <math.h>

/* heuristic ranks tried per layer: cuDNN's first guesses are usually its best */
#define DNN_TRY 4
/* tensor ids of the variant pack */
enum { UID_X = 1, UID_W, UID_B, UID_S, UID_R, UID_Y, UID_MAGIC, UID_ZP, UID_V0 = 100 };

/* Whether the INT8 graph adds an output zero point after the clip (UID_MAGIC, UID_ZP). */
static bool dnn_adds_zero_point(const cu_dnn_epilogue *ep)
{
    return ep->in == QF_I8 && ep->out == QF_I8 && ep->z_out != 0;
}

/* the plans of one graph, or of an INT8 layer's two (int8 operands, and
 * the same levels as halves), each plan knowing its graph */
struct cu_dnn_conv {
    cudnnBackendDescriptor_t plan[2 * DNN_TRY];
    int rank[2 * DNN_TRY];          /* the heuristic rank of each plan in its graph */
    int64_t engine[2 * DNN_TRY];    /* cuDNN's global engine index, for logs */
    bool f16_operands[2 * DNN_TRY]; /* the plan's graph takes the int8 levels as halves */
    int n;
    size_t workspace;               /* the largest plan's */
    cu_dnn_epilogue ep;             /* the layer's, f16_operands false: that is per plan */
};

/* Descriptor building with the first failure kept: every call after it is a no-op. */
typedef struct dnn_build {
    cudnnStatus_t st;
    const char *what;
    cudnnBackendDescriptor_t made[40]; /* destroyed with the builder */
    int n_made;
} dnn_build;

static cudnnBackendDescriptor_t dnn_new(dnn_build *b, cudnnBackendDescriptorType_t type)
{
    cudnnBackendDescriptor_t d = NULL;
    if (b->st != CUDNN_STATUS_SUCCESS) return NULL;
    if (b->n_made == (int)(sizeof b->made / sizeof b->made[0])) {
        b->st = CUDNN_STATUS_INTERNAL_ERROR, b->what = "too many descriptors";
        return NULL;
    }
    if ((b->st = cudnnBackendCreateDescriptor(type, &d)) != CUDNN_STATUS_SUCCESS) {
        b->what = "cudnnBackendCreateDescriptor";
        return NULL;
    }
    b->made[b->n_made++] = d;
    return d;
}

static void dnn_set(dnn_build *b, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                    cudnnBackendAttributeType_t type, int64_t count, const void *v, const char *what)
{
    if (b->st != CUDNN_STATUS_SUCCESS) return;
    if ((b->st = cudnnBackendSetAttribute(d, name, type, count, v)) != CUDNN_STATUS_SUCCESS) b->what = what;
}

static void dnn_finalize(dnn_build *b, cudnnBackendDescriptor_t d, const char *what)
{
    if (b->st != CUDNN_STATUS_SUCCESS) return;
    if ((b->st = cudnnBackendFinalize(d)) != CUDNN_STATUS_SUCCESS) b->what = what;
}

static void dnn_build_free(dnn_build *b)
{
    for (int i = b->n_made - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(b->made[i]);
    b->n_made = 0;
}

/* A 4-D tensor (N, C, H, W dims; strides as stored). */
static cudnnBackendDescriptor_t dnn_tensor(dnn_build *b, int64_t uid, cudnnDataType_t dt, const int64_t *dims,
                                           const int64_t *strides, bool virt)
{
    cudnnBackendDescriptor_t t = dnn_new(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t align = 16;
    dnn_set(b, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, "tensor data type");
    dnn_set(b, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, "tensor dims");
    dnn_set(b, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides, "tensor strides");
    dnn_set(b, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor id");
    dnn_set(b, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
    dnn_set(b, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, "tensor virtual");
    dnn_finalize(b, t, "tensor");
    return t;
}

/* out = mode(x [, b]) in FP32 math; a RELU_FWD clips to [lo, hi]. */
static cudnnBackendDescriptor_t dnn_pointwise(dnn_build *b, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                                              cudnnBackendDescriptor_t bt, cudnnBackendDescriptor_t y, double lo, double hi)
{
    cudnnBackendDescriptor_t pw = dnn_new(b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    dnn_set(b, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
    dnn_set(b, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "pointwise precision");
    if (mode == CUDNN_POINTWISE_SWISH_FWD) {
        const double beta = 1.0; /* SiLU */
        dnn_set(b, pw, CUDNN_ATTR_POINTWISE_SWISH_BETA, CUDNN_TYPE_DOUBLE, 1, &beta, "swish beta");
    }
    if (mode == CUDNN_POINTWISE_RELU_FWD) {
        dnn_set(b, pw, CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, CUDNN_TYPE_DOUBLE, 1, &lo, "relu lower clip");
        if (isfinite(hi)) dnn_set(b, pw, CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP, CUDNN_TYPE_DOUBLE, 1, &hi, "relu upper clip");
    }
    dnn_finalize(b, pw, "pointwise");
    cudnnBackendDescriptor_t op = dnn_new(b, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    dnn_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw, "pointwise op");
    dnn_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "pointwise x");
    if (bt) dnn_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &bt, "pointwise b");
    dnn_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "pointwise y");
    dnn_finalize(b, op, "pointwise operation");
    return op;
}

/* Whether an engine's numerics are qforge's: FP32 accumulation (no
 * reduced-precision reduction), no FFT; for INT8 graphs also no Winograd
 * transform, whose sums are not the exact integer ones (an order of
 * summation, deterministic or not, changes no exact integer sum). */
static bool dnn_engine_ok(cudnnBackendDescriptor_t cfg, bool exact, int64_t *global_index)
{
    dnn_build b = {};
    cudnnBackendDescriptor_t eng = dnn_new(&b, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    int64_t cnt = 0;
    bool ok = false;
    *global_index = -1;
    if (b.st == CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cnt, &eng) ==
            CUDNN_STATUS_SUCCESS) {
        cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
        int64_t nn = 0;
        ok = cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                      CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &nn, notes) == CUDNN_STATUS_SUCCESS;
        for (int64_t i = 0; ok && i < nn; i++) {
            const cudnnBackendNumericalNote_t n = notes[i];
            if (n == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION || n == CUDNN_NUMERICAL_NOTE_FFT) ok = false;
            if (exact && (n == CUDNN_NUMERICAL_NOTE_WINOGRAD || n == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4 ||
                          n == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6 || n == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13))
                ok = false;
        }
        cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &cnt, global_index);
    }
    dnn_build_free(&b);
    return ok;
}

static cudnnHandle_t dnn_handle(cu_engine *c)
{
    if (!c->dnn && !c->dnn_failed) {
        cudnnHandle_t h;
        cudnnStatus_t s = cudnnCreate(&h);
        if (s == CUDNN_STATUS_SUCCESS) c->dnn = h;
        else {
            c->dnn_failed = true;
            qf_log(QF_LOG_DEBUG, "no cuDNN tactics: cudnnCreate: %s", cudnnGetErrorString(s));
        }
    }
    return (cudnnHandle_t)c->dnn;
}

void cu_dnn_conv_free(cu_dnn_conv *d)
{
    if (!d) return;
    for (int i = 0; i < d->n; i++) cudnnBackendDestroyDescriptor(d->plan[i]);
    free(d);
}

static cudnnDataType_t dnn_type(qf_dtype t)
{
    return t == QF_I8 ? CUDNN_DATA_INT8 : t == QF_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

qf_status cu_dnn_conv_create(cu_engine *c, const cu_conv_geo *g, const int64_t *w_strides, const cu_dnn_epilogue *ep,
                             int only_rank, cu_dnn_conv **out)
{
    const bool i8 = ep->in == QF_I8;
    const bool smooth = ep->act == QF_ACT_SILU || ep->act == QF_ACT_SIGMOID;
    if ((ep->in != QF_F16 && !i8) || (!i8 && ep->out != QF_F16) || (ep->act != QF_ACT_NONE && (!smooth || i8)) ||
        (i8 && ep->residual) || !qfi_cudnn_load())
        return QF_OK;
    cudnnHandle_t h = dnn_handle(c);
    if (!h) return QF_OK;
    const bool f16_ops = i8 && ep->f16_operands;
    const cudnnDataType_t rt = dnn_type(ep->in), yt = dnn_type(ep->out), f32 = CUDNN_DATA_FLOAT;
    const cudnnDataType_t xt = f16_ops ? CUDNN_DATA_HALF : rt;
    /* INT8: exact int32 sums (or FP32 ones of FP16 operands); the bias and scales are FP32 tensors */
    const cudnnDataType_t acc = i8 && !f16_ops ? CUDNN_DATA_INT32 : f32, bt = i8 ? f32 : xt;
    const int64_t xd[4] = {g->N, g->C, g->H, g->W}, xs[4] = {g->H * g->W * g->C, 1, g->W * g->C, g->C};
    const int64_t wd[4] = {g->M, g->C / g->group, g->kh, g->kw};
    const int64_t yd[4] = {g->N, g->M, g->Ho, g->Wo}, ys[4] = {g->Ho * g->Wo * g->M, 1, g->Wo * g->M, g->M};
    const int64_t bd[4] = {1, g->M, 1, 1}, bs[4] = {g->M, 1, g->M, g->M};
    const int64_t sd1[4] = {1, 1, 1, 1}; /* a scalar, broadcast */
    dnn_build b = {};
    cudnnBackendDescriptor_t ops[12];
    int n_ops = 0;
    /* the operations on the conv's output chain: conv, then each epilogue step; the last writes y */
    const bool zp = dnn_adds_zero_point(ep);
    if (zp && !ep->clip) return QF_OK; /* an int8 output is always clipped (conv.cu); the zero point follows the clip */
    const int steps = 1 + ep->bias + (i8 && ep->scale) + ep->residual + smooth + ep->clip + 2 * zp;
    int64_t vid = UID_V0;
    int left = steps;
    auto next = [&]() {
        return --left == 0 ? dnn_tensor(&b, UID_Y, yt, yd, ys, false) : dnn_tensor(&b, vid++, f32, yd, ys, true);
    };
    cudnnBackendDescriptor_t x = dnn_tensor(&b, UID_X, xt, xd, xs, false);
    cudnnBackendDescriptor_t w = dnn_tensor(&b, UID_W, xt, wd, w_strides, false);
    cudnnBackendDescriptor_t cur = next();
    cudnnBackendDescriptor_t conv = dnn_new(&b, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    {
        const int64_t sd = 2, dil[2] = {g->dh, g->dw}, str[2] = {g->sh, g->sw}, pre[2] = {g->ph, g->pw};
        /* the end padding that makes Ho x Wo come out, as the geometry has it */
        const int64_t post[2] = {(g->Ho - 1) * g->sh + (g->kh - 1) * g->dh + 1 - g->H - g->ph,
                                 (g->Wo - 1) * g->sw + (g->kw - 1) * g->dw + 1 - g->W - g->pw};
        const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
        if (post[0] < 0 || post[1] < 0) {
            dnn_build_free(&b);
            return QF_OK; /* a cropped end: cuDNN's paddings cannot say it */
        }
        dnn_set(&b, conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &acc, "conv compute type");
        dnn_set(&b, conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode, "conv mode");
        dnn_set(&b, conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &sd, "conv dims");
        dnn_set(&b, conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil, "conv dilations");
        dnn_set(&b, conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str, "conv strides");
        dnn_set(&b, conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pre, "conv pre-paddings");
        dnn_set(&b, conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, post, "conv post-paddings");
        dnn_finalize(&b, conv, "convolution");
    }
    {
        cudnnBackendDescriptor_t op = dnn_new(&b, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
        const float one = 1.0f, zero = 0.0f;
        dnn_set(&b, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "conv x");
        dnn_set(&b, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w, "conv w");
        dnn_set(&b, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cur, "conv y");
        dnn_set(&b, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv,
                "conv descriptor");
        dnn_set(&b, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &one, "conv alpha");
        dnn_set(&b, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &zero, "conv beta");
        dnn_finalize(&b, op, "convolution operation");
        ops[n_ops++] = op;
    }
    /* the epilogue in qforge's order: + bias, * scale (INT8), + residual (INT8: times its scale), then the clip */
    if (ep->bias) {
        cudnnBackendDescriptor_t t = dnn_tensor(&b, UID_B, bt, bd, bs, false), o = next();
        ops[n_ops++] = dnn_pointwise(&b, CUDNN_POINTWISE_ADD, cur, t, o, 0, 0);
        cur = o;
    }
    if (i8 && ep->scale) {
        cudnnBackendDescriptor_t t = dnn_tensor(&b, UID_S, f32, bd, bs, false), o = next();
        ops[n_ops++] = dnn_pointwise(&b, CUDNN_POINTWISE_MUL, cur, t, o, 0, 0);
        cur = o;
    }
    if (ep->residual) { /* FP16 only (cuda_internal.h) */
        cudnnBackendDescriptor_t r = dnn_tensor(&b, UID_R, xt, yd, ys, false), o = next();
        ops[n_ops++] = dnn_pointwise(&b, CUDNN_POINTWISE_ADD, cur, r, o, 0, 0);
        cur = o;
    }
    if (smooth) { /* FP16 only */
        const cudnnPointwiseMode_t m = ep->act == QF_ACT_SILU ? CUDNN_POINTWISE_SWISH_FWD : CUDNN_POINTWISE_SIGMOID_FWD;
        cudnnBackendDescriptor_t o = next();
        ops[n_ops++] = dnn_pointwise(&b, m, cur, NULL, o, 0, 0);
        cur = o;
    }
    if (ep->clip) {
        cudnnBackendDescriptor_t o = next();
        ops[n_ops++] = dnn_pointwise(&b, CUDNN_POINTWISE_RELU_FWD, cur, NULL, o, ep->lo, ep->hi);
        cur = o;
    }
    if (zp) { /* (v + QFI_MAGIC) + (z - QFI_MAGIC): rint(v) + z, exactly */
        for (int64_t uid = UID_MAGIC; uid <= UID_ZP; uid++) {
            cudnnBackendDescriptor_t t = dnn_tensor(&b, uid, f32, sd1, sd1, false), o = next();
            ops[n_ops++] = dnn_pointwise(&b, CUDNN_POINTWISE_ADD, cur, t, o, 0, 0);
            cur = o;
        }
    }
    cudnnBackendDescriptor_t graph = dnn_new(&b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    dnn_set(&b, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n_ops, ops, "graph ops");
    dnn_set(&b, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "graph handle");
    dnn_finalize(&b, graph, "operation graph");
    cudnnBackendDescriptor_t heur = dnn_new(&b, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    const cudnnBackendHeurMode_t hm = CUDNN_HEUR_MODE_A;
    dnn_set(&b, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph, "heuristics graph");
    dnn_set(&b, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &hm, "heuristics mode");
    dnn_finalize(&b, heur, "heuristics");
    cudnnBackendDescriptor_t cfgs[DNN_TRY];
    int64_t n_cfg = 0;
    for (int i = 0; i < DNN_TRY; i++) cfgs[i] = dnn_new(&b, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    if (b.st == CUDNN_STATUS_SUCCESS &&
        (b.st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, DNN_TRY,
                                         &n_cfg, cfgs)) != CUDNN_STATUS_SUCCESS)
        b.what = "heuristics results";
    if (b.st != CUDNN_STATUS_SUCCESS) {
        qf_log(QF_LOG_DEBUG, "cuDNN: no graph for this conv (%s: %s)", b.what, cudnnGetErrorString(b.st));
        dnn_build_free(&b);
        return QF_OK;
    }
    cu_dnn_conv *d = *out ? *out : (cu_dnn_conv *)qfi_calloc(1, sizeof *d);
    if (!d) {
        dnn_build_free(&b);
        return QF_ERR_NOMEM;
    }
    d->ep = *ep;
    d->ep.f16_operands = false;
    for (int r = 0; r < n_cfg && r < DNN_TRY && d->n < 2 * DNN_TRY; r++) {
        if (only_rank >= 0 && r != only_rank) continue;
        int64_t gi;
        if (!dnn_engine_ok(cfgs[r], i8, &gi)) continue;
        cudnnBackendDescriptor_t plan;
        if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) != CUDNN_STATUS_SUCCESS) continue;
        int64_t ws = 0, cnt = 0;
        if (cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) ||
            cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                     &cfgs[r]) ||
            cudnnBackendFinalize(plan) ||
            cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &cnt, &ws) ||
            ws < 0 || (size_t)ws > ((size_t)1 << 30)) {
            cudnnBackendDestroyDescriptor(plan);
            continue;
        }
        d->plan[d->n] = plan, d->rank[d->n] = r, d->engine[d->n] = gi, d->f16_operands[d->n] = f16_ops;
        d->n++;
        if ((size_t)ws > d->workspace) d->workspace = (size_t)ws;
    }
    dnn_build_free(&b);
    if (d->n == 0) {
        free(d);
        return QF_OK;
    }
    *out = d;
    return QF_OK;
}

int cu_dnn_conv_plans(const cu_dnn_conv *d) { return d ? d->n : 0; }
int cu_dnn_conv_rank(const cu_dnn_conv *d, int plan) { return d->rank[plan]; }
bool cu_dnn_conv_f16_operands(const cu_dnn_conv *d, int plan) { return d->f16_operands[plan]; }
size_t cu_dnn_conv_workspace(const cu_dnn_conv *d) { return d ? d->workspace : 0; }

const char *cu_dnn_conv_describe(const cu_dnn_conv *d, int plan, char *buf, size_t len)
{
    snprintf(buf, len, "cuDNN %s engine %lld (heuristic rank %d)",
             d->ep.in != QF_I8 ? "FP16" : d->f16_operands[plan] ? "INT8 (FP16 operands)" : "INT8", (long long)d->engine[plan],
             d->rank[plan]);
    return buf;
}

qf_status cu_dnn_conv_run(cu_engine *c, const cu_dnn_conv *d, int plan, cudaStream_t s, const cu_dnn_args *a)
{
    cudnnHandle_t h = (cudnnHandle_t)c->dnn;
    const bool i8 = d->ep.in == QF_I8;
    int64_t uids[10];
    void *ptrs[10];
    int n = 0;
    void *ws = a->workspace;
    uids[n] = UID_X, ptrs[n++] = (void *)a->x;
    uids[n] = UID_W, ptrs[n++] = (void *)a->w;
    if (d->ep.bias) uids[n] = UID_B, ptrs[n++] = (void *)a->bias;
    if (i8 && d->ep.scale) uids[n] = UID_S, ptrs[n++] = (void *)a->scale;
    if (d->ep.residual) uids[n] = UID_R, ptrs[n++] = (void *)a->res;
    if (dnn_adds_zero_point(&d->ep)) {
        uids[n] = UID_MAGIC, ptrs[n++] = (void *)a->zp;
        uids[n] = UID_ZP, ptrs[n++] = (void *)(a->zp + 4);
    }
    uids[n] = UID_Y, ptrs[n++] = a->y;
    cudnnBackendDescriptor_t pack;
    cudnnStatus_t st = cudnnSetStream(h, s);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
    if (st != CUDNN_STATUS_SUCCESS) return qf_error(QF_ERR_DEVICE, "cuDNN variant pack: %s", cudnnGetErrorString(st));
    st = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    if (!st) st = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
    if (!st) st = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    if (!st) st = cudnnBackendFinalize(pack);
    if (!st) st = cudnnBackendExecute(h, d->plan[plan], pack);
    cudnnBackendDestroyDescriptor(pack);
    if (st != CUDNN_STATUS_SUCCESS) return qf_error(QF_ERR_DEVICE, "cudnnBackendExecute: %s", cudnnGetErrorString(st));
    return QF_OK;
}

void cu_dnn_destroy(cu_engine *c)
{
    if (c->dnn) cudnnDestroy((cudnnHandle_t)c->dnn);
    c->dnn = NULL;
}

#else /* built without cuDNN's headers: no such tactic */

struct cu_dnn_conv {
    int unused;
};
qf_status cu_dnn_conv_create(cu_engine *, const cu_conv_geo *, const int64_t *, const cu_dnn_epilogue *, int,
                             cu_dnn_conv **)
{
    return QF_OK;
}
void cu_dnn_conv_free(cu_dnn_conv *) {}
int cu_dnn_conv_plans(const cu_dnn_conv *) { return 0; }
int cu_dnn_conv_rank(const cu_dnn_conv *, int) { return -1; }
bool cu_dnn_conv_f16_operands(const cu_dnn_conv *, int) { return false; }
size_t cu_dnn_conv_workspace(const cu_dnn_conv *) { return 0; }
const char *cu_dnn_conv_describe(const cu_dnn_conv *, int, char *buf, size_t len)
{
    snprintf(buf, len, "cuDNN");
    return buf;
}
qf_status cu_dnn_conv_run(cu_engine *, const cu_dnn_conv *, int, cudaStream_t, const cu_dnn_args *)
{
    return qf_error(QF_ERR_DEVICE, "built without cuDNN");
}
void cu_dnn_destroy(cu_engine *) {}
#endif
