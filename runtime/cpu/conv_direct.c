/* Direct FP32 Conv of group-1 windows on 1-D and 2-D images, the bulk of a
 * ResNet's FLOPs: no im2col matrix and no BLAS packing, which at 16-64
 * channels cost as much as the arithmetic. */
#include "kernels.h"
#include "ops/nn.h"

/* The trick: each image is copied once into zero-padded planes, so every
 * kernel tap reads at a fixed offset from its output position. With stride 1
 * a channel is one plane of Hp rows, Wq floats apart; output (oh, ow) is flat
 * position p = oh*Wq + ow of an Ho x Wq grid, and tap (kh, kw) reads p +
 * kh*dh*Wq + kw*dw. With strides (sh, sw) each channel is split into sh*sw
 * phase planes (Hq, Wq) = (ceil(Hp/sh), ceil(Wp/sw)), phase (a, b) holding
 * padded rows a, a+sh, ... and columns b, b+sw, ...; input (oh*sh + i, ow*sw +
 * j) is then row oh + i/sh, column ow + j/sw of phase (i%sh, j%sw), and the
 * grid is Ho x Wq with the same fixed-offset reads. VEC consecutive outputs
 * are one unaligned vector load per tap, with no bounds tests. The grid's
 * columns ow >= Wo are computed and dropped; reads past a plane only ever feed
 * those, or land on zeros (below).
 *
 * With sw = 1 a row is stored W + max(pl, pr) floats wide rather than Wp: the
 * right padding of row q is then read from the left padding of row q + 1
 * (or of the next plane, or the zeros after the last one), which are zeros
 * just the same. A valid output reads the same numbers in the same order, and
 * the dropped columns shrink from Wp - Wo to Wq - Wo (3x3, pad 1: 1 per row,
 * not 2; 11% less work at 8x8, 3% at 32x32). */

/* Register blocks are MB output channels x NV vectors of consecutive grid
 * positions; the widest block spans CHUNK_MAX floats, NV_MAX vectors. */
#define MB_MAX 8
#define NV_MAX 3
#define CHUNK_MAX 48

/* The 2-D window (H,W) of a 1-D or 2-D conv: index 0 of qfi_window is 1 then. */
bool qfi_cpu_direct_window_ok(const qfi_window *w)
{
    if (w->in[0] != 1 || w->k[0] != 1 || w->out[0] != 1) return false;
    if (w->k[1] * w->k[2] > QFI_DIRECT_MAX_TAPS || w->k[1] < 1 || w->k[2] < 1) return false;
    for (int s = 1; s < 3; s++) {
        if (w->stride[s] < 1 || w->dil[s] < 1 || w->pad[s] < 0 || w->pad_end[s] < 0) return false;
        /* every window of the output lies inside the padded input (true of every
         * Conv; checked because the phase-plane indexing depends on it) */
        int64_t span = w->in[s] + w->pad[s] + w->pad_end[s] - w->dil[s] * (w->k[s] - 1);
        if (span < 1 || w->out[s] != (span - 1) / w->stride[s] + 1) return false;
    }
    return true;
}

bool qfi_cpu_conv_direct_supports(const qfi_conv_geom *geo)
{
    return geo->group == 1 && qfi_cpu_direct_window_ok(&geo->w);
}

void qfi_cpu_direct_plan(const qfi_conv_geom *geo, bool share_rows, int64_t chunk, qfi_direct_plan *p)
{
    const qfi_window *w = &geo->w;
    p->C = geo->C, p->M = geo->M;
    p->H = w->in[1], p->W = w->in[2];
    p->pt = w->pad[1], p->pl = w->pad[2];
    p->Hp = p->H + w->pad[1] + w->pad_end[1];
    p->Wp = p->W + w->pad[2] + w->pad_end[2];
    p->Ho = w->out[1], p->Wo = w->out[2];
    p->sh = w->stride[1], p->sw = w->stride[2];
    p->Hq = (p->Hp + p->sh - 1) / p->sh, p->Wq = (p->Wp + p->sw - 1) / p->sw;
    if (share_rows && p->sw == 1) { /* rows share their padding (see the top); every output column still fits a row */
        int64_t shared = p->W + (w->pad[2] > w->pad_end[2] ? w->pad[2] : w->pad_end[2]);
        p->Wq = shared > p->Wo ? shared : p->Wo;
    }
    p->plane = p->sh * p->sw * p->Hq * p->Wq;
    p->grid = p->Ho * p->Wq;
    p->taps = w->k[1] * w->k[2];
    int64_t t = 0;
    for (int64_t kh = 0; kh < w->k[1]; kh++)
        for (int64_t kw = 0; kw < w->k[2]; kw++) {
            int64_t i = kh * w->dil[1], j = kw * w->dil[2];
            int64_t phase = (i % p->sh) * p->sw + j % p->sw;
            p->off[t++] = phase * p->Hq * p->Wq + i / p->sh * p->Wq + j / p->sw;
        }
    /* A chunk reads at most chunk - 1 past its grid position plus its tap's
     * offset; for positions below the grid that stays inside the channel's
     * planes but for the last row's columns: (kw-1)*dw/sw, which also covers
     * the shared right padding of the last row (Wp - Wq <= Wp - Wo). */
    p->slack = chunk + (w->k[2] - 1) * w->dil[2] / p->sw;
}

/* Copies image x (C, H, W) into the zero-padded phase planes xp (C, sh*sw,
 * Hq, Wq) + slack zeros. Without `borders` only the input's own floats are
 * written: xp already holds an image of this plan, whose zeros stay. */
QFI_SIMD_CLONES QFI_NO_LIBCALL_LOOPS
static void pad_image(const qfi_direct_plan *p, const float *restrict x, float *restrict xp, bool borders)
{
    const int64_t Hq = p->Hq, Wq = p->Wq;
    for (int64_t c = 0; c < p->C; c++) {
        const float *xc = x + c * p->H * p->W; /* (H, W) */
        for (int64_t a = 0; a < p->sh; a++) {
            /* phase rows [qlo, qhi) hold input rows q*sh + a - pt, the others are padding */
            int64_t qlo, qhi;
            qfi_window_run(Hq, p->H, p->sh, a - p->pt, &qlo, &qhi);
            for (int64_t b = 0; b < p->sw; b++) {
                float *r = xp + c * p->plane + (a * p->sw + b) * Hq * Wq; /* (Hq, Wq) */
                /* phase columns [lo, hi) hold input columns col*sw + b - pl */
                int64_t lo, hi;
                qfi_window_run(Wq, p->W, p->sw, b - p->pl, &lo, &hi);
                if (borders) {
                    qfi_zero_floats(r, qlo * Wq);
                    qfi_zero_floats(r + qhi * Wq, (Hq - qhi) * Wq);
                    for (int64_t q = qlo; q < qhi; q++) {
                        qfi_zero_floats(r + q * Wq, lo);
                        qfi_zero_floats(r + q * Wq + hi, Wq - hi);
                    }
                }
                for (int64_t q = qlo; q < qhi; q++) {
                    float *rq = r + q * Wq;
                    const float *xr = xc + (q * p->sh + a - p->pt) * p->W + b - p->pl; /* xr[col*sw] is column col */
                    /* stride 2 gets its own loop: with a constant stride gcc
                     * vectorizes the gather (two loads and a permute) */
                    if (p->sw == 1) qfi_copy_floats(rq + lo, xr + lo, hi - lo);
                    else if (p->sw == 2)
                        for (int64_t col = lo; col < hi; col++) rq[col] = xr[col * 2];
                    else
                        for (int64_t col = lo; col < hi; col++) rq[col] = xr[col * p->sw];
                }
            }
        }
    }
    if (borders) qfi_zero_floats(xp + p->C * p->plane, p->slack);
}

/* What a register block reads: C input rows `stride` floats apart, each read
 * at `taps` offsets. */
typedef struct block_geom {
    int64_t C, stride, taps;
    const int64_t *off;
} block_geom;

/* Defines kernel NAME, compiled for TARGET with GNU vector type VT of VW
 * floats (VTU: its unaligned, aliasing twin): out (MB, NV*VW) = bias[m] + sum
 * over c and taps of wrow[m][c*taps + tap] * xp[c*stride + off[tap] + i], for
 * MB channels whose weight rows (C, taps) start at wrow[m]. MB and NV are
 * constants, so the MB*NV accumulators stay in registers: per tap NV vector
 * loads and MB broadcasts feed MB*NV FMAs. TAPS > 0 fixes the window size at
 * compile time and unrolls the tap loop whole, so weight indices become
 * constants (3x3: 14 cycles per tap instead of 16 at 8x3 on AVX-512); TAPS 0
 * takes any window. One body, one instance per vector width: a 16-float
 * vector shared through target_clones went through the stack in the AVX2
 * build (10x slower). A macro because C has no templates. */
#define DEFINE_BLOCK(NAME, TARGET, VT, VTU, VW, MB, NV, TAPS)                                                         \
    TARGET QFI_FMA_CONTRACT static void NAME(const block_geom *p, const float *xp, const float *const *wrow,              \
                                         const float *bias, float *out)                                               \
    {                                                                                                                 \
        VT acc[MB][NV];                                                                                               \
        for (int m = 0; m < MB; m++) {                                                                                \
            const float bm = bias[m];                                                                                 \
            for (int v = 0; v < NV; v++) acc[m][v] = bm - (VT){0}; /* broadcast; x - 0 is exactly x */                \
        }                                                                                                             \
        const int64_t taps = TAPS > 0 ? TAPS : p->taps;                                                               \
        for (int64_t c = 0; c < p->C; c++) {                                                                          \
            const float *xc = xp + c * p->stride;                                                                     \
            const int64_t wc = c * taps;                                                                              \
            QFI_UNROLL(TAPS) for (int64_t t = 0; t < taps; t++) {                                                         \
                const float *xt = xc + p->off[t];                                                                     \
                VT in[NV];                                                                                            \
                for (int v = 0; v < NV; v++) in[v] = *(const VTU *)(xt + v * VW);                                     \
                for (int m = 0; m < MB; m++) {                                                                        \
                    const VT wv = wrow[m][wc + t] - (VT){0};                                                          \
                    for (int v = 0; v < NV; v++) acc[m][v] += wv * in[v];                                             \
                }                                                                                                     \
            }                                                                                                         \
        }                                                                                                             \
        for (int m = 0; m < MB; m++)                                                                                  \
            for (int v = 0; v < NV; v++) *(VTU *)(out + (m * NV + v) * VW) = acc[m][v];                               \
    }

#define NOTARGET
#ifdef QFI_X86_FLOAT_KERNELS
/* 8x3 keeps 24 of AVX-512's 32 registers accumulating (11 loads per 24 FMAs):
 * measured 137-140 GFLOP/s on ResNet-20's 3x3 layers against 8x2's 119-126
 * and OpenBLAS im2col+sgemm's 61-71 on a 1-core AVX-512 Xeon. 4x3 is the most
 * that AVX2's 16 registers hold (12 + 3 inputs + 1 broadcast). */
/* The narrower instances (fewer vectors, same MB) take the grid's last chunk
 * when it is shorter: ResNet-20's 8x8 grid of 72 positions is then 48 + 32
 * computed, not 48 + 48. The _9t ones are for 9-tap windows (3x3). Every
 * output is still bias + the same products added in the same order, so which
 * instance computes it does not change a bit. */
#define DEFINE_BLOCKS_1_TO_3(PREFIX, TARGET, VT, VTU, VW, MB, TAPS)                                                  \
    DEFINE_BLOCK(PREFIX##_1, TARGET, VT, VTU, VW, MB, 1, TAPS)                                                        \
    DEFINE_BLOCK(PREFIX##_2, TARGET, VT, VTU, VW, MB, 2, TAPS)                                                        \
    DEFINE_BLOCK(PREFIX##_3, TARGET, VT, VTU, VW, MB, 3, TAPS)
DEFINE_BLOCKS_1_TO_3(block_avx512, __attribute__((target("avx512f,fma"))), vf16, vf16u, 16, 8, 0)
DEFINE_BLOCKS_1_TO_3(block_avx512_9t, __attribute__((target("avx512f,fma"))), vf16, vf16u, 16, 8, 9)
DEFINE_BLOCKS_1_TO_3(block_avx2, __attribute__((target("avx2,fma"))), vf8, vf8u, 8, 4, 0)
DEFINE_BLOCKS_1_TO_3(block_avx2_9t, __attribute__((target("avx2,fma"))), vf8, vf8u, 8, 4, 9)
#endif
/* 16 SSE/NEON registers: 8 accumulators, 2 inputs, 1 broadcast. */
DEFINE_BLOCK(block_portable_2, NOTARGET, vf4, vf4u, 4, 4, 2, 0)
DEFINE_BLOCK(block_portable_1, NOTARGET, vf4, vf4u, 4, 4, 1, 0)

typedef void (*block_fn)(const block_geom *p, const float *xp, const float *const *wrow, const float *bias,
                         float *out);
typedef struct block_shape {
    block_fn fn[NV_MAX]; /* fn[k]: blocks of k+1 vectors (NULL past nv) */
    int mb, nv, vw;      /* output channels x vectors x floats per vector of the widest block */
} block_shape;

static block_shape kernel_shape(qfi_direct_isa isa, int64_t taps)
{
    switch (isa) {
#ifdef QFI_X86_FLOAT_KERNELS
    case QFI_DIRECT_AVX512:
        if (taps == 9) return (block_shape){{block_avx512_9t_1, block_avx512_9t_2, block_avx512_9t_3}, 8, 3, 16};
        return (block_shape){{block_avx512_1, block_avx512_2, block_avx512_3}, 8, 3, 16};
    case QFI_DIRECT_AVX2:
        if (taps == 9) return (block_shape){{block_avx2_9t_1, block_avx2_9t_2, block_avx2_9t_3}, 4, 3, 8};
        return (block_shape){{block_avx2_1, block_avx2_2, block_avx2_3}, 4, 3, 8};
#endif
    default: return (block_shape){{block_portable_1, block_portable_2, NULL}, 4, 2, 4};
    }
}

qfi_direct_isa qfi_cpu_direct_isa(void)
{
#ifdef QFI_X86_FLOAT_KERNELS
    if (__builtin_cpu_supports("avx512f")) return QFI_DIRECT_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return QFI_DIRECT_AVX2;
#endif
    return QFI_DIRECT_PORTABLE;
}

typedef struct direct_job {
    const qfi_direct_plan *p;        /* padded phase-plane layout of one image */
    const float *x, *w, *b;
    float *y;
    float *scratch;              /* the slots, slot_floats apart */
    int64_t slot_floats;
    block_shape bs;
    int64_t parts;  /* each image's output channels are split into this many items */
    int64_t items;  /* N * parts */
    int64_t slots;
} direct_job;

/* Writes the block's valid outputs: out (mb, chunk) holds flat positions
 * [p0, p0+len), len <= chunk, of channels y[m] (each (Ho, Wo)); the grid's
 * columns >= Wo are dropped. */
QFI_NO_LIBCALL_LOOPS static void store_block(const qfi_direct_plan *p, const float *out, int64_t chunk, int mb,
                                             int64_t p0, int64_t len, float *y)
{
    int64_t oh = p0 / p->Wq, ow = p0 % p->Wq;
    for (int64_t i = 0; i < len;) {
        /* the run of this grid row inside [p0, p0+len) */
        int64_t run = p->Wq - ow < len - i ? p->Wq - ow : len - i;
        int64_t valid = ow < p->Wo ? (p->Wo - ow < run ? p->Wo - ow : run) : 0;
        for (int m = 0; m < mb; m++) {
            const float *o = out + m * chunk + i;
            float *yr = y + m * p->Ho * p->Wo + oh * p->Wo + ow;
            qfi_copy_floats(yr, o, valid);
        }
        i += run;
        ow = 0;
        oh++;
    }
}

/* Output channels [m0, m1) of image n, chunk by chunk: a chunk's slice of the
 * padded input (C x a few rows) stays in L1 while all its channel blocks read it. */
QFI_NO_LIBCALL_LOOPS static void direct_range(const direct_job *j, const float *xp, int64_t n, int64_t m0, int64_t m1)
{
    const qfi_direct_plan *p = j->p;
    const int mbmax = j->bs.mb;
    const int64_t widest = j->bs.nv * j->bs.vw;
    const float *wrow[MB_MAX];
    float bias[MB_MAX];
    float out[MB_MAX * CHUNK_MAX];
    const block_geom bg = {p->C, p->plane, p->taps, p->off};
    for (int64_t p0 = 0; p0 < p->grid; p0 += widest) {
        int64_t len = p->grid - p0 < widest ? p->grid - p0 : widest;
        int64_t nv = (len + j->bs.vw - 1) / j->bs.vw; /* the last chunk may take a narrower block */
        const block_fn fn = j->bs.fn[nv - 1];
        for (int64_t m = m0; m < m1; m += mbmax) {
            int mb = m1 - m < mbmax ? (int)(m1 - m) : mbmax;
            /* a short last block repeats its last channel rather than needing a
             * kernel of every height; the repeats are not stored */
            for (int k = 0; k < mbmax; k++) {
                int64_t mk = m + (k < mb ? k : mb - 1);
                wrow[k] = j->w + mk * p->C * p->taps;
                bias[k] = j->b ? j->b[mk] : 0.0f;
            }
            fn(&bg, xp + p0, wrow, bias, out);
            store_block(p, out, nv * j->bs.vw, mb, p0, len, j->y + (n * p->M + m) * p->Ho * p->Wo);
        }
    }
}

/* Slot t runs a contiguous range of items, so consecutive items of one image
 * reuse its padded copy. */
static void direct_slot(void *arg, int64_t t)
{
    const direct_job *j = arg;
    const qfi_direct_plan *p = j->p;
    float *xp = j->scratch + t * j->slot_floats;
    int64_t lo = j->items * t / j->slots, hi = j->items * (t + 1) / j->slots, padded = -1;
    const int64_t blocks = (p->M + j->bs.mb - 1) / j->bs.mb;
    for (int64_t item = lo; item < hi; item++) {
        int64_t n = item / j->parts, part = item % j->parts;
        if (n != padded) { /* the zeros are written once per call: no other image uses the slot meanwhile */
            pad_image(p, j->x + n * p->C * p->H * p->W, xp, padded < 0);
            padded = n;
        }
        /* whole blocks per part, so only the last channel block can be short */
        int64_t b0 = blocks * part / j->parts, b1 = blocks * (part + 1) / j->parts;
        int64_t m0 = b0 * j->bs.mb, m1 = b1 * j->bs.mb < p->M ? b1 * j->bs.mb : p->M;
        if (m0 < m1) direct_range(j, xp, n, m0, m1);
    }
}

int64_t qfi_cpu_conv_direct_slots(const qfi_conv_geom *geo, int threads)
{
    /* more slots than items would only idle; at most N images x M channels */
    const int64_t s = qfi_cpu_slots(geo->N * geo->M, threads);
    return s > 0 ? s : 1;
}

/* A slot's floats: the padded image, rounded to whole cache lines. */
static int64_t slot_size(const qfi_direct_plan *p) { return (p->C * p->plane + p->slack + 15) / 16 * 16; }

size_t qfi_cpu_conv_direct_scratch(const qfi_conv_geom *geo, int64_t slots)
{
    qfi_direct_plan p;
    qfi_cpu_direct_plan(geo, true, CHUNK_MAX, &p);
    return (size_t)(slots * slot_size(&p)) * sizeof(float);
}

void qfi_cpu_conv_direct(const qfi_conv_geom *geo, const float *x, const float *w, const float *b, float *y,
                         void *scratch, int threads, qfi_direct_isa isa)
{
    qfi_direct_plan p;
    qfi_cpu_direct_plan(geo, true, CHUNK_MAX, &p);
    direct_job j = {.p = &p, .x = x, .w = w, .b = b, .y = y, .scratch = scratch, .slot_floats = slot_size(&p),
                    .bs = kernel_shape(isa, p.taps)};
    j.slots = qfi_cpu_conv_direct_slots(geo, threads);
    /* fewer images than slots: split each image's channels so every slot works */
    j.parts = (j.slots + geo->N - 1) / geo->N;
    j.items = geo->N * j.parts;
    qfi_parallel_for((int)j.slots, j.slots, direct_slot, &j);
}
