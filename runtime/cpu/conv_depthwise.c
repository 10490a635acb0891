/* FP32 depthwise convolutions on the CPU: one input channel a group (any
 * channel multiplier), so each output plane reads one input plane and there
 * is no reduction over channels for a GEMM to do.
 *
 * A 1-D or 2-D plane is first copied into a zero-padded plane of the slot's
 * scratch, so that every tap of every output reads inside it; then each
 * output row is summed 32 outputs at a time, held in registers across all
 * the window's taps (2 AVX-512, 4 AVX2 or 8 SSE registers, one instance per
 * width: a 16-float vector shared by target clones went through the stack
 * in the AVX2 clone, MobileNetV2's 144-channel 56x56 layer 3.2 ms on 2
 * AVX2 EPYC cores where ONNX Runtime takes 0.29). Summing
 * a tap at a time over the whole plane (the 3-D loop below) loads, adds and
 * stores every output once per tap, and its stride-2 rows did not vectorize:
 * MobileNetV2 FP32 spent 39 % of its time there. Each output is still the
 * bias plus the taps' products in tap order, each product rounded before its
 * add (ISO C, no contraction), so both loops give the same bits; a padding
 * tap adds a zero the 3-D loop skips. */
#include "kernels.h"
#include "ops/nn.h"
#include <string.h>

/* GNU vector types wider than the target's registers are split through the
 * stack; the instances below use only native widths, so no vector crosses a
 * call and gcc's note on AVX-512 vector arguments does not apply. */
#pragma GCC diagnostic ignored "-Wpsabi"

enum { DW_LANES = 16 }; /* outputs a step of a row (padded_dims' rounding) */
/* Elements a fused-activation call takes at least (4 AVX-512 vectors of
 * qfi_cpu_epilogue_floats), so that short rows reach its vector loop */
enum { DW_EPILOGUE_MIN = 4 * DW_LANES };

typedef struct dw_job {
    const qfi_conv_geom *geo;
    const float *x, *w, *b;
    float *y;
    const qfi_cpu_epilogue *epilogue; /* fused activations, or NULL */
    float *scratch; /* slots padded planes (2-D), NULL for the 3-D loop */
    int64_t planes, slots;
    int64_t ph, pitch; /* the padded plane's rows, and floats a row */
    void (*row)(float *restrict y, const float *restrict p, int64_t pitch, const float *restrict wk, int64_t kh,
                int64_t kw, int64_t dh, int64_t dw, int64_t s, float bias, int64_t wo); /* dw_row_* */
} dw_job;

/* 3-D windows keep the tap-at-a-time loop: no zoo model has one. */
static bool flat_window(const qfi_window *w) { return w->k[0] == 1 && w->in[0] == 1 && w->out[0] == 1; }

/* The rows the windows reach, and a row's floats: the columns the last
 * whole step of an output row reads, past the window's reach where Wo is
 * not a multiple of DW_LANES (those lanes are summed over zeros and not
 * stored). */
static void padded_dims(const qfi_window *w, int64_t *ph, int64_t *pitch)
{
    const int64_t wo_vec = (w->out[2] + DW_LANES - 1) / DW_LANES * DW_LANES;
    *ph = (w->out[1] - 1) * w->stride[1] + (w->k[1] - 1) * w->dil[1] + 1;
    *pitch = w->stride[2] * wo_vec + (w->k[2] - 1) * w->dil[2];
}

size_t qfi_cpu_conv_depthwise_scratch(const qfi_conv_geom *geo, int threads)
{
    if (!flat_window(&geo->w)) return 0;
    int64_t ph, pitch;
    padded_dims(&geo->w, &ph, &pitch);
    return (size_t)(qfi_cpu_slots(geo->N * geo->M, threads) * ph * pitch) * sizeof(float);
}

/* p (ph, pitch) = x (H, W) shifted by the leading pads, zeros where x has no element. */
static inline void pad_plane(const float *x, const qfi_window *w, float *p, int64_t ph, int64_t pitch)
{
    const int64_t H = w->in[1], W = w->in[2], pt = w->pad[1], pl = w->pad[2];
    const int64_t c0 = pl < pitch ? pl : pitch, c1 = pl + W < pitch ? pl + W : pitch;
    for (int64_t r = 0; r < ph; r++) {
        float *pr = p + r * pitch;
        const int64_t ih = r - pt;
        if (ih < 0 || ih >= H || c1 <= c0) {
            qfi_zero_floats(pr, pitch);
            continue;
        }
        qfi_zero_floats(pr, c0);
        qfi_copy_floats(pr + c0, x + ih * W + (c0 - pl), c1 - c0);
        qfi_zero_floats(pr + c1, pitch - c1);
    }
}

/* Even lanes of two vectors (stride-2 loads), per width. */
#define DW_EVENS16 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30
#define DW_EVENS8 0, 2, 4, 6, 8, 10, 12, 14
#define DW_EVENS4 0, 2, 4, 6
#if defined(__clang__)
#define DW_SHUFFLE_EVENS(lo, hi, VI, ...) __builtin_shufflevector(lo, hi, __VA_ARGS__)
#else
#define DW_SHUFFLE_EVENS(lo, hi, VI, ...) __builtin_shuffle(lo, hi, (VI){__VA_ARGS__})
#endif
typedef int dw_vi16 __attribute__((vector_size(64)));
typedef int dw_vi8 __attribute__((vector_size(32)));
typedef int dw_vi4 __attribute__((vector_size(16)));

/* Defines NAME, a row function for dw_job, with GNU vector type VT of VW
 * floats (VTU its unaligned twin, VI the int vector of the shuffle, EVENS its
 * indices) compiled for TARGET: one output row y[0, wo) from the padded rows
 * at p, 2 * DW_LANES outputs at a time held in registers across all the
 * window's taps, each the bias then the taps' products in tap order. s (the
 * stride) is a constant in each inlined instance, so its loads are plain
 * vector loads, or two loads and a shuffle where s is 2. */
#define DEFINE_DW_ROW(NAME, TARGET, VT, VTU, VI, VW, EVENS)                                                           \
    TARGET static inline __attribute__((always_inline)) VT NAME##_load(const float *p, int64_t s)                      \
    {                                                                                                                  \
        if (s == 1) return *(const VTU *)p;                                                                            \
        if (s == 2) {                                                                                                  \
            const VT lo = *(const VTU *)p, hi = *(const VTU *)(p + VW);                                                \
            return DW_SHUFFLE_EVENS(lo, hi, VI, EVENS);                                                                \
        }                                                                                                              \
        VT e;                                                                                                          \
        for (int u = 0; u < VW; u++) e[u] = p[u * s];                                                                  \
        return e;                                                                                                      \
    }                                                                                                                  \
    /* V vectors of outputs: the bias, then the taps' products in tap order */                                        \
    TARGET static inline __attribute__((always_inline)) void NAME##_vectors(                                           \
        VT *acc, int V, const float *p, int64_t pitch, const float *wk, int64_t kh, int64_t kw, int64_t dh,            \
        int64_t dw, int64_t s, float bias)                                                                             \
    {                                                                                                                  \
        for (int v = 0; v < V; v++) acc[v] = (VT){0} + bias;                                                           \
        for (int64_t i = 0; i < kh; i++)                                                                               \
            for (int64_t j = 0; j < kw; j++) {                                                                         \
                const float wv = wk[i * kw + j];                                                                       \
                const float *xr = p + i * dh * pitch + j * dw;                                                         \
                for (int v = 0; v < V; v++) acc[v] += wv * NAME##_load(xr + v * VW * s, s);                            \
            }                                                                                                          \
    }                                                                                                                  \
    TARGET static inline __attribute__((always_inline)) void NAME##_as(                                                \
        float *restrict y, const float *restrict p, int64_t pitch, const float *restrict wk, int64_t kh, int64_t kw,   \
        int64_t dh, int64_t dw, int64_t s, float bias, int64_t wo)                                                     \
    {                                                                                                                  \
        enum { V = 2 * DW_LANES / VW };                                                                                \
        VT acc[V];                                                                                                     \
        int64_t o = 0;                                                                                                 \
        for (; o + 2 * DW_LANES <= wo; o += 2 * DW_LANES) {                                                            \
            NAME##_vectors(acc, V, p + o * s, pitch, wk, kh, kw, dh, dw, s, bias);                                     \
            memcpy(y + o, acc, sizeof acc);                                                                            \
        }                                                                                                              \
        for (; o < wo; o += DW_LANES) {                                                                                \
            NAME##_vectors(acc, V / 2, p + o * s, pitch, wk, kh, kw, dh, dw, s, bias);                                 \
            memcpy(y + o, acc, (size_t)(wo - o < DW_LANES ? wo - o : DW_LANES) * sizeof(float));                       \
        }                                                                                                              \
    }                                                                                                                  \
    TARGET static void NAME(float *restrict y, const float *restrict p, int64_t pitch, const float *restrict wk,       \
                            int64_t kh, int64_t kw, int64_t dh, int64_t dw, int64_t s, float bias, int64_t wo)         \
    {                                                                                                                  \
        if (s == 1) NAME##_as(y, p, pitch, wk, kh, kw, dh, dw, 1, bias, wo);                                          \
        else if (s == 2) NAME##_as(y, p, pitch, wk, kh, kw, dh, dw, 2, bias, wo);                                     \
        else NAME##_as(y, p, pitch, wk, kh, kw, dh, dw, s, bias, wo);                                                  \
    }

#define DW_NOTARGET
#ifdef QFI_X86_FLOAT_KERNELS
DEFINE_DW_ROW(dw_row_avx512, __attribute__((target("avx512f"))), vf16, vf16u, dw_vi16, 16, DW_EVENS16)
DEFINE_DW_ROW(dw_row_avx2, __attribute__((target("avx2"))), vf8, vf8u, dw_vi8, 8, DW_EVENS8)
#endif
DEFINE_DW_ROW(dw_row_portable, DW_NOTARGET, vf4, vf4u, dw_vi4, 4, DW_EVENS4)

/* Output plane `plane` (image n, channel m) from its padded input plane. */
static void dw_plane_2d(const dw_job *j, int64_t plane, float *p)
{
    const qfi_conv_geom *geo = j->geo;
    const qfi_window *w = &geo->w;
    const int64_t n = plane / geo->M, m = plane % geo->M, c = m / (geo->M / geo->group);
    const int64_t Ho = w->out[1], Wo = w->out[2], kh = w->k[1], kw = w->k[2];
    const int64_t sh = w->stride[1], sw = w->stride[2], dh = w->dil[1], dw = w->dil[2], pitch = j->pitch;
    pad_plane(j->x + (n * geo->C + c) * qfi_window_in_size(w), w, p, j->ph, pitch);
    const float *wk = j->w + m * kh * kw, bias = j->b ? j->b[m] : 0.0f;
    float *y = j->y + plane * Ho * Wo;
    int64_t done = 0; /* elements of the plane through the epilogue */
    for (int64_t oh = 0; oh < Ho; oh++) {
        j->row(y + oh * Wo, p + oh * sh * pitch, pitch, wk, kh, kw, dh, dw, sw, bias, Wo);
        /* the epilogue over rows still in L1, DW_EPILOGUE_MIN elements or
         * more a call: a row at a time, rows of 7-28 elements went through
         * its scalar tail (FP32 EfficientNet-B0's SiLU depthwise convs) */
        const int64_t end = (oh + 1) * Wo;
        if (j->epilogue && (end - done >= DW_EPILOGUE_MIN || oh == Ho - 1)) {
            qfi_cpu_epilogue_floats(j->epilogue, y + done, y + done, end - done);
            done = end;
        }
    }
}

/* Slot t runs planes t, t + slots, ... in its own padded plane. */
static void dw_slot(void *arg, int64_t t)
{
    const dw_job *j = arg;
    float *p = j->scratch + t * j->ph * j->pitch;
    for (int64_t plane = t; plane < j->planes; plane += j->slots) dw_plane_2d(j, plane, p);
}

/* y[lo..hi) += wv * x[o*stride] (x already offset to the tap): one kernel tap along an output row. */
static void row_axpy(float *restrict y, const float *restrict x, float wv, int64_t lo, int64_t hi, int64_t stride)
{
    int64_t o = lo;
    if (stride == 1) {
        /* blocks of 8 with a fixed inner count: gcc vectorizes these at -O2 */
        for (; o + 8 <= hi; o += 8)
            for (int u = 0; u < 8; u++) y[o + u] += wv * x[o + u];
        for (; o < hi; o++) y[o] += wv * x[o];
    } else {
        for (; o < hi; o++) y[o] += wv * x[o * stride];
    }
}

/* 3-D windows: the plane starts at the bias and takes one kernel tap at a
 * time, each over the rows and columns where that tap lands inside the image. */
static void dw_plane_3d(void *arg, int64_t plane)
{
    const dw_job *j = arg;
    const qfi_conv_geom *geo = j->geo;
    const qfi_window *w = &geo->w;
    const int64_t n = plane / geo->M, m = plane % geo->M, c = m / (geo->M / geo->group);
    const int64_t H = w->in[1], W = w->in[2], Ho = w->out[1], Wo = w->out[2];
    const float *xc = j->x + (n * geo->C + c) * qfi_window_in_size(w); /* (D,H,W) */
    const float *wm = j->w + m * qfi_window_k_size(w);                   /* (Kd,Kh,Kw) */
    float *y = j->y + plane * qfi_window_out_size(w);                    /* (Do,Ho,Wo) */
    const float bias = j->b ? j->b[m] : 0.0f;
    for (int64_t i = 0; i < qfi_window_out_size(w); i++) y[i] = bias;
    for (int64_t kd = 0; kd < w->k[0]; kd++)
        for (int64_t kh = 0; kh < w->k[1]; kh++)
            for (int64_t kw = 0; kw < w->k[2]; kw++) {
                const float wv = *wm++;
                int64_t off[3], lo[3], hi[3];
                for (int s = 0; s < 3; s++) {
                    int64_t k = s == 0 ? kd : s == 1 ? kh : kw;
                    off[s] = k * w->dil[s] - w->pad[s];
                    qfi_window_run(w->out[s], w->in[s], w->stride[s], off[s], &lo[s], &hi[s]);
                }
                for (int64_t od = lo[0]; od < hi[0]; od++)
                    for (int64_t oh = lo[1]; oh < hi[1]; oh++) {
                        int64_t id = od * w->stride[0] + off[0], ih = oh * w->stride[1] + off[1];
                        row_axpy(y + (od * Ho + oh) * Wo, xc + (id * H + ih) * W + off[2], wv, lo[2], hi[2],
                                 w->stride[2]);
                    }
            }
    if (j->epilogue) qfi_cpu_epilogue_floats(j->epilogue, y, y, qfi_window_out_size(w));
}

qf_status qfi_cpu_conv_depthwise(const qfi_conv_geom *geo, const float *x, const float *w, const float *b, float *y,
                                 const qfi_cpu_epilogue *epilogue, float *scratch, int threads)
{
    dw_job j = {.geo = geo, .x = x, .w = w, .b = b, .y = y, .epilogue = epilogue, .planes = geo->N * geo->M};
    if (!flat_window(&geo->w)) {
        qfi_parallel_for(threads, j.planes, dw_plane_3d, &j);
        return QF_OK;
    }
    if (!scratch) return qf_error(QF_ERR_USAGE, "no padded-plane scratch was provided");
    padded_dims(&geo->w, &j.ph, &j.pitch);
    switch (qfi_cpu_direct_isa()) {
#ifdef QFI_X86_FLOAT_KERNELS
    case QFI_DIRECT_AVX512: j.row = dw_row_avx512; break;
    case QFI_DIRECT_AVX2: j.row = dw_row_avx2; break;
#endif
    default: j.row = dw_row_portable; break;
    }
    j.scratch = scratch;
    j.slots = qfi_cpu_slots(j.planes, threads);
    qfi_parallel_for((int)j.slots, j.slots, dw_slot, &j);
    return QF_OK;
}
