/* Conv on the CPU: a direct kernel (runtime/cpu/conv_direct.c) for the
 * group-1 2-D windows where it beats BLAS, im2col + cblas_sgemm per (image,
 * group) otherwise, runtime/cpu/conv_depthwise.c for depthwise-style
 * convolutions (one input channel per group), a plain sgemm for 1x1
 * stride-1 unpadded ones, and sums in double for those of one input position
 * (vector_image). A fused activation (qfi_kernel_args.epilogue) is applied
 * by each path to what it has just written.
 * Independent items are spread over threads; each thread owns one slot of the
 * scratch. */
#include "kernels.h"
#include "ops/nn.h"
#include <cblas.h>
#include <limits.h>

/* One input channel per group: no reduction over channels, so a GEMM would
 * be a matrix-vector product per channel and a direct loop is faster. */
static bool is_depthwise(const qfi_conv_geom *geo) { return geo->C == geo->group; }

/* A 1x1, stride-1, unpadded window: the image itself is the im2col matrix. */
static bool is_pointwise(const qfi_window *w)
{
    for (int s = 0; s < QFI_MAX_SPATIAL; s++)
        if (w->k[s] != 1 || w->stride[s] != 1 || w->pad[s] != 0 || w->pad_end[s] != 0) return false;
    return true;
}

/* One input position to one output position, all channels to all outputs:
 * the squeeze-excitation block's FCs after a global pool. */
static bool is_vector(const qfi_conv_geom *geo)
{
    return geo->group == 1 && qfi_window_in_size(&geo->w) == 1 && is_pointwise(&geo->w);
}

typedef enum conv_path { PATH_VECTOR, PATH_DEPTHWISE, PATH_POINTWISE, PATH_DIRECT, PATH_IM2COL } conv_path;

/* The one place that decides which kernel runs an FP32 Conv; the scratch
 * size and the run both follow it. The direct kernel is taken where it was
 * measured faster than im2col + OpenBLAS sgemm (batch 32, one thread, AVX-512
 * Xeon, GFLOP/s direct vs BLAS): ResNet-20's 3x3 layers 16-64 channels 126-140
 * vs 57-69 (AVX2 build 68-88), its stride-2 3x3 ones 80-87 vs 51-65, first
 * layer C=3 79 vs 58, 5x5/7x7 115-153 vs 27-50, 7x7 stride 2 on 224x224 95
 * vs 71, M <= 3 outputs 14-34 vs 5-18. Not taken:
 *  - windows narrower than their stride (1x1 stride 2: 25 vs 55): the direct
 *    kernel copies every input element and most go unread;
 *  - wide layers, where BLAS's packing pays off: C=M=256 14x14 128 vs 126,
 *    7x7 82 vs 94, C=64 M=1024 135 vs 157;
 *  - CPUs without AVX2: the portable (SSE2/NEON) build is slower than
 *    OpenBLAS.
 * Winograd F(2x2,3x3) on the same register blocks was tried and lost to the
 * direct kernel at these sizes (71 vs 124-129 at 16-32 channels, 18 vs 100 at
 * 8x8): its transforms and the tile grid's padding ate the 2.25x fewer
 * multiplies. */
static conv_path choose_conv_path(const qfi_conv_geom *geo)
{
    if (is_vector(geo)) return PATH_VECTOR;
    if (is_depthwise(geo)) return PATH_DEPTHWISE;
    if (is_pointwise(&geo->w)) return PATH_POINTWISE;
    const qfi_window *w = &geo->w;
    const int64_t kdim = geo->C / geo->group * qfi_window_k_size(w);
    bool covers = w->k[1] >= w->stride[1] && w->k[2] >= w->stride[2];
    if (qfi_cpu_conv_direct_supports(geo) && qfi_cpu_direct_isa() != QFI_DIRECT_PORTABLE && covers &&
        (geo->M < 256 || kdim < 512))
        return PATH_DIRECT;
    return PATH_IM2COL;
}

/* Elements of one im2col matrix: (C/group * K) rows of OUT columns. */
static int64_t col_elems(const qfi_conv_geom *geo)
{
    return geo->C / geo->group * qfi_window_k_size(&geo->w) * qfi_window_out_size(&geo->w);
}

size_t qfi_cpu_conv_scratch(const qf_graph *g, const qf_node *n, int threads)
{
    if (n->precision == QF_PREC_INT8) return qfi_cpu_conv_int8_scratch(g, n, threads);
    qfi_conv_geom geo;
    if (qfi_conv_geometry(g, n, &geo) != QF_OK) return 0;
    switch (choose_conv_path(&geo)) {
    case PATH_VECTOR:
    case PATH_POINTWISE: return 0;
    case PATH_DEPTHWISE: return qfi_cpu_conv_depthwise_scratch(&geo, threads);
    case PATH_DIRECT: return qfi_cpu_conv_direct_scratch(&geo, qfi_cpu_conv_direct_slots(&geo, threads));
    case PATH_IM2COL: break;
    }
    return (size_t)(qfi_cpu_slots(geo.N * geo.group, threads) * col_elems(&geo)) * sizeof(float);
}

/* Unfolds one group of one image. x is (Cg, D,H,W); col is (Cg*Kd*Kh*Kw, Do*Ho*Wo):
 * row (c,kd,kh,kw) holds, for every output position, the input element under
 * that kernel tap, or 0 where the tap falls in the padding. */
QFI_SIMD_CLONES QFI_NO_LIBCALL_LOOPS
void qfi_cpu_im2col(const float *x, int64_t cg, const qfi_window *w, float *col)
{
    const int64_t D = w->in[0], H = w->in[1], W = w->in[2];
    const int64_t Do = w->out[0], Ho = w->out[1], Wo = w->out[2], sw = w->stride[2];
    float *r = col;
    for (int64_t c = 0; c < cg; c++) {
        const float *xc = x + c * D * H * W;
        for (int64_t kd = 0; kd < w->k[0]; kd++)
            for (int64_t kh = 0; kh < w->k[1]; kh++)
                for (int64_t kw = 0; kw < w->k[2]; kw++) {
                    /* output columns [lo, hi) read inside the row; the rest is padding */
                    int64_t iw0 = kw * w->dil[2] - w->pad[2], lo, hi;
                    qfi_window_run(Wo, W, sw, iw0, &lo, &hi);
                    for (int64_t od = 0; od < Do; od++) {
                        int64_t id = od * w->stride[0] - w->pad[0] + kd * w->dil[0];
                        for (int64_t oh = 0; oh < Ho; oh++, r += Wo) {
                            int64_t ih = oh * w->stride[1] - w->pad[1] + kh * w->dil[1];
                            if (id < 0 || id >= D || ih < 0 || ih >= H) {
                                qfi_zero_floats(r, Wo);
                                continue;
                            }
                            const float *xr = xc + (id * H + ih) * W + iw0; /* xr[ow*sw] is under column ow */
                            qfi_zero_floats(r, lo);
                            if (sw == 1) qfi_copy_floats(r + lo, xr + lo, hi - lo);
                            else
                                for (int64_t ow = lo; ow < hi; ow++) r[ow] = xr[ow * sw];
                            qfi_zero_floats(r + hi, Wo - hi);
                        }
                    }
                }
    }
}

typedef struct conv_job {
    const qfi_conv_geom *geo;
    const float *x, *w, *b;
    float *y;
    float *scratch;      /* slots * col_elems floats, NULL for pointwise */
    const qfi_cpu_epilogue *epilogue; /* fused activations, or NULL */
    int64_t items, slots;
} conv_job;

/* y[0..n) = v, in blocks of 8 that gcc vectorizes at -O2 (bias rows are large planes). */
static void fill(float *y, float v, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int u = 0; u < 8; u++) y[i + u] = v;
    for (; i < n; i++) y[i] = v;
}

/* y (Mg, OUT) of image n, group gi = W_g (Mg, Cg*K) x col (Cg*K, OUT) [+ bias]. */
static void conv_item(const conv_job *j, int64_t item, float *col)
{
    const qfi_conv_geom *geo = j->geo;
    const int64_t n = item / geo->group, gi = item % geo->group;
    const int64_t cg = geo->C / geo->group, mg = geo->M / geo->group;
    const int64_t in_sz = qfi_window_in_size(&geo->w), out_sz = qfi_window_out_size(&geo->w);
    const int64_t kdim = cg * qfi_window_k_size(&geo->w);
    const float *xg = j->x + (n * geo->C + gi * cg) * in_sz;
    const float *wg = j->w + gi * mg * kdim;
    float *yg = j->y + (n * geo->M + gi * mg) * out_sz;
    float beta = 0.0f;
    if (j->b) {
        for (int64_t m = 0; m < mg; m++) fill(yg + m * out_sz, j->b[gi * mg + m], out_sz);
        beta = 1.0f;
    }
    const float *cols = xg;
    if (col) {
        qfi_cpu_im2col(xg, cg, &geo->w, col);
        cols = col;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)mg, (int)out_sz, (int)kdim, 1.0f, wg, (int)kdim, cols,
                (int)out_sz, beta, yg, (int)out_sz);
    if (j->epilogue) qfi_cpu_epilogue_floats(j->epilogue, yg, yg, mg * out_sz);
}

/* Slot t runs items t, t+slots, t+2*slots, ... with its own im2col buffer. */
static void conv_slot(void *arg, int64_t t)
{
    const conv_job *j = arg;
    float *col = j->scratch ? j->scratch + t * col_elems(j->geo) : NULL;
    for (int64_t item = t; item < j->items; item += j->slots) conv_item(j, item, col);
}

/* PATH_VECTOR, image n: y[m] = bias[m] + sum over c of w[m][c] x[c], in
 * double in channel order from the bias, then rounded to float. Each product
 * of two floats is exact in double, and the CUDA engine's kernel for these
 * convs (runtime/cuda/conv_vector.cu) sums in the same order: the same bits
 * on both engines. Squeeze-excitation gates scale whole int8 tensors, and a
 * gate one half-ulp off moved INT8 levels downstream (GPU = CPU top-1 0.96-0.97
 * on random-weight RegNetY and MobileNetV3 with BLAS-ordered float sums). */
static void vector_image(void *arg, int64_t n)
{
    const conv_job *j = arg;
    const int64_t C = j->geo->C, M = j->geo->M;
    const float *x = j->x + n * C;
    for (int64_t m = 0; m < M; m++) {
        const float *w = j->w + m * C;
        double acc = j->b ? (double)j->b[m] : 0.0;
        for (int64_t c = 0; c < C; c++) acc += (double)w[c] * (double)x[c];
        j->y[n * M + m] = (float)acc;
    }
    if (j->epilogue) qfi_cpu_epilogue_floats(j->epilogue, j->y + n * M, j->y + n * M, M);
}

/* The fused activations over image n's outputs, for the kernels that write whole tensors. */
static void epilogue_image(void *arg, int64_t n)
{
    const conv_job *j = arg;
    const int64_t per_image = j->geo->M * qfi_window_out_size(&j->geo->w);
    qfi_cpu_epilogue_floats(j->epilogue, j->y + n * per_image, j->y + n * per_image, per_image);
}

static qf_status conv_run(const qfi_kernel_args *a)
{
    if (a->n->precision == QF_PREC_INT8) return qfi_cpu_conv_int8(a);
    qfi_conv_geom geo;
    QF_CHECK(qfi_conv_geometry(a->g, a->n, &geo));
    conv_job j = {.geo = &geo, .x = a->in[0], .w = a->in[1], .b = geo.has_bias ? a->in[2] : NULL, .y = a->out[0],
                  .epilogue = a->epilogue};
    if (geo.N == 0 || geo.M == 0 || qfi_window_out_size(&geo.w) == 0) return QF_OK;
    int threads = a->threads > 0 ? a->threads : qfi_cpu_count();
    const conv_path path = choose_conv_path(&geo);
    if (path == PATH_VECTOR) {
        qfi_parallel_for(threads, geo.N, vector_image, &j);
        return QF_OK;
    }
    if (path == PATH_DEPTHWISE) return qfi_cpu_conv_depthwise(&geo, j.x, j.w, j.b, j.y, a->epilogue, a->scratch, threads);
    int64_t kdim = geo.C / geo.group * qfi_window_k_size(&geo.w);
    if (kdim == 0) {
        /* no input channels: only the bias remains (and BLAS rejects K = 0 leading dims) */
        int64_t out_sz = qfi_window_out_size(&geo.w);
        for (int64_t i = 0; i < geo.N * geo.M * out_sz; i++) j.y[i] = j.b ? j.b[i / out_sz % geo.M] : 0.0f;
        if (j.epilogue) qfi_parallel_for(threads, geo.N, epilogue_image, &j);
        return QF_OK;
    }
    if (path == PATH_DIRECT) {
        if (!a->scratch) return qf_error(QF_ERR_USAGE, "no padded-image scratch was provided");
        qfi_cpu_conv_direct(&geo, j.x, j.w, j.b, j.y, a->scratch, threads, qfi_cpu_direct_isa());
        if (j.epilogue) qfi_parallel_for(threads, geo.N, epilogue_image, &j);
        return QF_OK;
    }
    if (kdim > INT_MAX || qfi_window_out_size(&geo.w) > INT_MAX || geo.M > INT_MAX)
        return qf_error(QF_ERR_UNSUPPORTED, "GEMM dimensions exceed the BLAS int range");
    j.items = geo.N * geo.group;
    j.slots = qfi_cpu_slots(j.items, threads);
    if (path == PATH_IM2COL) {
        if (!a->scratch) return qf_error(QF_ERR_USAGE, "no im2col scratch was provided");
        j.scratch = a->scratch;
    }
    if (j.slots > threads) j.slots = threads;
    qfi_parallel_for((int)j.slots, j.slots, conv_slot, &j);
    return QF_OK;
}

/* INT8 convolutions pack their weights once (conv_int8.c); FP32 ones need nothing. */
static qf_status conv_prepare(const qf_graph *g, const qf_node *n, void **state)
{
    *state = NULL;
    return n->precision == QF_PREC_INT8 ? qfi_cpu_conv_int8_prepare(g, n, state) : QF_OK;
}

const qfi_cpu_kernel qfi_cpu_conv = {
    .run = conv_run, .scratch = qfi_cpu_conv_scratch, .prepare = conv_prepare, .release = qfi_cpu_int8_release};
