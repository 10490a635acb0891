/* Grouped and depthwise convolutions on the device, NHWC, computed directly
 * (no GEMM: a depthwise tap is one multiply per channel). Weights come as
 * [kh][kw][C/group][M] (conv.cu reorders them at build time). Float sums run
 * in the CPU kernel's order -- bias, then the taps in (kh, kw, c) order, one
 * multiply and one add each -- and INT8 sums are exact int32 with
 * lib/quant_math.h's epilogue, bit for bit with the CPU engine.
 *
 * Depthwise (group == C == M, C a multiple of the vector) gives each thread
 * a vector of consecutive channels of one output pixel: vector loads of
 * input and weights per tap, index arithmetic once per vector; INT8 3x3,
 * 5x5 and 7x7 layers over words of 4 channels (MobileNet's, EfficientNet's,
 * MnasNet's, ConvNeXt's) a row of pixels by dp4a over 4 taps at once, and
 * 3x3 ones of an only even C (ShuffleNetV2's) a row of pixels with a
 * sliding window. The general
 * grouped case gives each thread a vector of consecutive outputs of one
 * group (INT8: dp4a over the group's channels, 4 at a time, where they come
 * in whole words); other shapes keep one thread per output element.
 *
 * The vectorized INT8 kernels take ACT: whether the epilogue's smooth
 * activation (Sigmoid, SiLU, HardSwish: an e^x per output) is compiled in;
 * the launchers pick by q.act, so layers without one run the code they ran
 * before. The general kernel checks q.act as it goes.
 *
 * INT8 taps in the padding read the input's zero point zx, as the CPU
 * engine's do; with zx = 0 (symmetric, and every float kernel) they are
 * skipped, as they always were. */
#include "cuda_internal.h"
#include <type_traits>

namespace {

__device__ __forceinline__ int32_t to_i32(int8_t v) { return v; }

/* A float output's fused activations: Relu (NaN -> 0, as Relu computes it),
 * then Clip's max-then-min (NaN stays NaN; infinite bounds change nothing).
 * Clipping before the output's rounding equals clipping after it when the
 * bounds are exact in the output's dtype (conv fusion checks that). */
__device__ __forceinline__ float float_activation(float v, bool relu, float lo, float hi)
{
    if (relu && !(v > 0.0f)) v = 0.0f;
    v = v < lo ? lo : v;
    return v > hi ? hi : v;
}

/* The INT8 input's zero point zx in each byte of a word: what four channels of a padding tap hold. */
__device__ __forceinline__ uint32_t zp_word(int32_t zx) { return (uint32_t)(uint8_t)zx * 0x01010101u; }

/* ---- general grouped convolution: one thread per output element ---------------------------------- */

/* Acc is int32_t for int8 (requantized by q, residual res), else float
 * (bias, then ReLU). */
template <typename T, typename Acc>
__global__ void grouped_conv_kernel(void *y, const T *x, const T *w, const T *bias, cu_conv_geo p, bool relu, float lo,
                                    float hi, qfi_requant q, int32_t zx, const int8_t *res, int64_t total)
{
    constexpr bool I8 = std::is_same<Acc, int32_t>::value;
    const int64_t Cg = p.C / p.group, Mg = p.M / p.group;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t m = i % p.M, r = i / p.M;
        int64_t ow = r % p.Wo;
        r /= p.Wo;
        int64_t oh = r % p.Ho, n = r / p.Ho;
        int64_t c0 = m / Mg * Cg;
        Acc acc = 0;
        if constexpr (!I8) acc = bias ? to_f32(bias[m]) : 0.0f;
        for (int kh = 0; kh < p.kh; kh++) {
            int64_t ih = oh * p.sh - p.ph + (int64_t)kh * p.dh;
            const bool vh = ih >= 0 && ih < p.H;
            if (!vh && zx == 0) continue;
            for (int kw = 0; kw < p.kw; kw++) {
                int64_t iw = ow * p.sw - p.pw + (int64_t)kw * p.dw;
                const bool in = vh && iw >= 0 && iw < p.W;
                if (!in && zx == 0) continue;
                const T *xp = x + (in ? ((n * p.H + ih) * p.W + iw) * p.C + c0 : 0);
                const T *wp = w + ((int64_t)(kh * p.kw + kw) * Cg) * p.M + m;
                for (int64_t c = 0; c < Cg; c++) {
                    if constexpr (I8) acc += to_i32(wp[c * p.M]) * (in ? to_i32(xp[c]) : zx);
                    else acc = __fadd_rn(acc, __fmul_rn(to_f32(wp[c * p.M]), to_f32(xp[c])));
                }
            }
        }
        if constexpr (I8) qfi_requant_elem(&q, y, i, acc, m, res);
        else ((T *)y)[i] = (T)float_activation(acc, relu, lo, hi);
    }
}

/* ---- grouped with several channels a group: V outputs of one group a thread ---------------------- */

/* INT8, a group's input channels in whole 32-bit words (Cg % 4 == 0): one
 * dp4a per 4 channels and output. Weights are words [kh][kw][Cg/4][M] (the
 * word of output m holds its 4 channels): a thread's V outputs are one
 * vector load, and a warp's consecutive V-blocks one contiguous run, where
 * [M][Cg] words had each thread read V words Cg bytes apart (3.3 ms a
 * ResNeXt layer3 conv at b256, 5x its FP16). Consecutive threads take
 * consecutive V-blocks of one pixel, so a warp reads whole pixels. */
template <int V, bool ACT>
__global__ void grouped_i8_words_kernel(void *y, const int8_t *x, const int8_t *w, cu_conv_geo p, qfi_requant q, int32_t zx,
                                        const int8_t *res, int total)
{
    const int zw = (int)zp_word(zx);
    const int C = (int)p.C, M = (int)p.M, H = (int)p.H, W = (int)p.W, Ho = (int)p.Ho, Wo = (int)p.Wo;
    const int Cg = C / (int)p.group, Mg = M / (int)p.group, CW = Cg / 4, MV = M / V;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int mv = i % MV, pix = i / MV, ow = pix % Wo, t = pix / Wo, oh = t % Ho, n = t / Ho;
        const int m0 = mv * V, c0 = m0 / Mg * Cg;
        int32_t acc[V];
#pragma unroll
        for (int v = 0; v < V; v++) acc[v] = 0;
        for (int kh = 0; kh < p.kh; kh++) {
            const int ih = oh * p.sh - p.ph + kh * p.dh;
            const bool vh = (unsigned)ih < (unsigned)H;
            if (!vh && zx == 0) continue;
            for (int kw = 0; kw < p.kw; kw++) {
                const int iw = ow * p.sw - p.pw + kw * p.dw;
                const bool in = vh && (unsigned)iw < (unsigned)W;
                if (!in && zx == 0) continue;
                const int *xp = (const int *)(x + (in ? ((size_t)(n * H + ih) * W + iw) * C + c0 : 0));
                const int *wp = (const int *)w + (size_t)(kh * p.kw + kw) * CW * M + m0;
                for (int cw = 0; cw < CW; cw++) {
                    const int xv = in ? xp[cw] : zw;
                    /* the V outputs' words of channels 4cw..4cw+3, 16 bytes a load */
#pragma unroll
                    for (int h = 0; h < V; h += 4) {
                        cu_vec<int, 4> wv;
                        wv.load(wp + (size_t)cw * M + h);
#pragma unroll
                        for (int v = 0; v < 4; v++) acc[h + v] = __dp4a(xv, wv.e[v], acc[h + v]);
                    }
                }
            }
        }
        const size_t o = (size_t)pix * M + m0;
        if (q.out == QF_I8 && !res) {
            cu_vec<int8_t, V> out;
#pragma unroll
            for (int v = 0; v < V; v++)
                out.e[v] = ACT ? qfi_requant_acc_level_fast(&q, acc[v], m0 + v, false, 0.0f)
                               : qfi_requant_level(&q, qfi_requant_acc_at(&q, acc[v], m0 + v, false, 0.0f, false));
            out.store((int8_t *)y + o);
        } else {
#pragma unroll
            for (int v = 0; v < V; v++) qfi_requant_elem_at(&q, y, (int64_t)(o + v), acc[v], m0 + v, res, ACT);
        }
    }
}

/* INT8 3x3 grouped convs of 4, 8 or 16 channels a group (CW = 1, 2, 4
 * words: ResNeXt's and RegNet's), no smooth activation: V outputs of one
 * group for a strip of TW output pixels a thread. Row by row, the strip's
 * input columns are loaded once (TW * SW + 2 of them instead of 3 a pixel)
 * and each tap's weight vectors once for the TW pixels (grouped_i8_words
 * loaded both per pixel and tap, and its per-thread index arithmetic for
 * one pixel: ResNeXt-50's first-stage 3x3 took 0.97 ms at b256, 3.1x its
 * FP16 cuDNN conv). Same exact int32 sums and epilogue. */
template <int V, int CW, int SW>
__global__ void grouped3x3_i8_strip_kernel(void *y, const int8_t *x, const int8_t *w, cu_conv_geo p, qfi_requant q,
                                           int32_t zx, const int8_t *res, int total)
{
    constexpr int TW = 4, NC = TW * SW + 2;
    const int zw = (int)zp_word(zx);
    const int C = (int)p.C, M = (int)p.M, H = (int)p.H, W = (int)p.W, Ho = (int)p.Ho, Wo = (int)p.Wo;
    const int Cg = CW * 4, Mg = M / (int)p.group, MV = M / V, strips = (Wo + TW - 1) / TW;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int mv = i % MV, r0 = i / MV, strip = r0 % strips, r1 = r0 / strips, oh = r1 % Ho, n = r1 / Ho;
        const int m0 = mv * V, c0 = m0 / Mg * Cg, ow0 = strip * TW, iw0 = ow0 * SW - p.pw;
        int32_t acc[TW][V];
#pragma unroll
        for (int j = 0; j < TW; j++)
#pragma unroll
            for (int v = 0; v < V; v++) acc[j][v] = 0;
#pragma unroll
        for (int kh = 0; kh < 3; kh++) {
            const int ih = oh * p.sh - p.ph + kh;
            if ((unsigned)ih >= (unsigned)H && zx == 0) continue;
            const bool vh = (unsigned)ih < (unsigned)H;
            const int *row = (const int *)(x + ((size_t)(n * H + (vh ? ih : 0)) * W) * C + c0);
            int xs[NC][CW];
#pragma unroll
            for (int k = 0; k < NC; k++) {
                const int iw = iw0 + k;
                const bool in = vh && (unsigned)iw < (unsigned)W;
#pragma unroll
                for (int cw = 0; cw < CW; cw++) xs[k][cw] = in ? __ldg(row + (size_t)iw * (C / 4) + cw) : zw;
            }
#pragma unroll
            for (int kw = 0; kw < 3; kw++) {
                const int *wp = (const int *)w + (size_t)(kh * 3 + kw) * CW * M + m0;
#pragma unroll
                for (int cw = 0; cw < CW; cw++)
#pragma unroll
                    for (int h = 0; h < V; h += 4) {
                        cu_vec<int, 4> wv;
                        wv.load(wp + (size_t)cw * M + h);
#pragma unroll
                        for (int j = 0; j < TW; j++)
#pragma unroll
                            for (int v = 0; v < 4; v++) acc[j][h + v] = __dp4a(xs[j * SW + kw][cw], wv.e[v], acc[j][h + v]);
                    }
            }
        }
#pragma unroll
        for (int j = 0; j < TW; j++) {
            if (ow0 + j >= Wo) break;
            const size_t o = ((size_t)(n * Ho + oh) * Wo + ow0 + j) * M + m0;
            if (q.out == QF_I8 && !res) {
                cu_vec<int8_t, V> out;
#pragma unroll
                for (int v = 0; v < V; v++)
                    out.e[v] = qfi_requant_level(&q, qfi_requant_acc_at(&q, acc[j][v], m0 + v, false, 0.0f, false));
                out.store((int8_t *)y + o);
            } else {
#pragma unroll
                for (int v = 0; v < V; v++) qfi_requant_elem_at(&q, y, (int64_t)(o + v), acc[j][v], m0 + v, res, false);
            }
        }
    }
}

template <int V, int CW, int SW>
void launch_grouped3x3_i8_strip(cudaStream_t s, const cu_conv_geo &g, const void *x, const void *w, const cu_requant *rq,
                                const int8_t *res, void *y)
{
    const int total = (int)(g.N * g.Ho * ((g.Wo + 3) / 4) * (g.M / V));
    unsigned b = cu_blocks(total, 128);
    if (b > 262144) b = 262144;
    grouped3x3_i8_strip_kernel<V, CW, SW><<<b, 128, 0, s>>>(y, (const int8_t *)x, (const int8_t *)w, g, *rq, rq->z_in,
                                                            res, total);
}

/* The strip kernel's shapes: 3x3, dilation 1, stride 1 or 2, 4 to 16 channels a group. */
template <int V>
bool grouped3x3_i8_strip(cudaStream_t s, const cu_conv_geo &g, const void *x, const void *w, const cu_requant *rq,
                         const int8_t *res, void *y)
{
    static const bool no_strip = getenv("QFORGE_CUDA_NO_STRIP") != NULL; /* benchmarks */
    const int64_t Cg = g.C / g.group;
    if (g.kh != 3 || g.kw != 3 || g.dh != 1 || g.dw != 1 || (g.sw != 1 && g.sw != 2) || rq->act != QF_ACT_NONE ||
        (Cg != 4 && Cg != 8 && Cg != 16) || no_strip)
        return false;
    const int key = (int)(Cg / 4) * 2 + (int)g.sw;
    switch (key) {
    case 3: launch_grouped3x3_i8_strip<V, 1, 1>(s, g, x, w, rq, res, y); break;
    case 4: launch_grouped3x3_i8_strip<V, 1, 2>(s, g, x, w, rq, res, y); break;
    case 5: launch_grouped3x3_i8_strip<V, 2, 1>(s, g, x, w, rq, res, y); break;
    case 6: launch_grouped3x3_i8_strip<V, 2, 2>(s, g, x, w, rq, res, y); break;
    case 9: launch_grouped3x3_i8_strip<V, 4, 1>(s, g, x, w, rq, res, y); break;
    default: launch_grouped3x3_i8_strip<V, 4, 2>(s, g, x, w, rq, res, y); break;
    }
    return true;
}

/* INT8 3x3 grouped convs of 16 channels a group in and out (RegNetY's) on
 * the Tensor Cores: a group's 16 outputs are the 16 rows of mma.m16n8k32,
 * K its 9 taps times 16 channels (two taps a k32 step, the tenth zero), N
 * the positions, 8 an MMA. A warp takes 32 positions of one group: its A
 * fragments straight from the words layout (word [tap][cw][m] holds
 * channels 4cw..4cw+3 of output m: fragment a0 of lane (gid, tig) is word
 * [tap][tig][gid], a1 the row 8 below, a2/a3 the next tap), its B
 * fragments one input word a position and tap (channels 4tig..4tig+3 of
 * the group), the padding the zero point's word. The int32 sums are exact,
 * so the levels are the other kernels' (bit for bit with the CPU engine);
 * a warp's 32 x 16 int8 outputs go through shared memory to 16-byte rows.
 * The dp4a strip kernel held RegNetY-800MF's grouped convs to twice their
 * FP16 time (0.100 against 0.049 ms in its last stage at batch 256). */
constexpr int G16_WARPS = 4, G16_NT = 4, G16_POS = 8 * G16_NT;

__device__ __forceinline__ void mma_s8_g16(int32_t *c, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <bool ACT>
__global__ void __launch_bounds__(32 * G16_WARPS) grouped16_mma_kernel(void *y, const int8_t *x, const uint32_t *w,
                                                                        cu_conv_geo p, qfi_requant q, int32_t zx,
                                                                        const int8_t *res, int groups, int total,
                                                                        cu_fast_div by_wo, cu_fast_div by_howo)
{
    __shared__ __align__(16) uint8_t stage[G16_WARPS][G16_POS][16];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gid = lane >> 2, tig = lane & 3;
    const int C = (int)p.C, M = (int)p.M, H = (int)p.H, W = (int)p.W, Wo = (int)p.Wo;
    const int P = (int)(p.N * p.Ho * p.Wo);
    const uint32_t zw = zp_word(zx);
    for (int t = blockIdx.x * G16_WARPS + warp; t < total; t += gridDim.x * G16_WARPS) {
        /* the groups of one tile of positions next to each other: they read the same pixels */
        const int pt = t / groups, g = t - pt * groups, m0 = g * 16, p0 = pt * G16_POS;
        uint32_t a[5][4];
#pragma unroll
        for (int ks = 0; ks < 5; ks++) {
            const uint32_t *wa = w + (size_t)(2 * ks * 4 + tig) * M + m0 + gid;
            a[ks][0] = __ldg(wa), a[ks][1] = __ldg(wa + 8);
            const bool second = 2 * ks + 1 < 9;
            a[ks][2] = second ? __ldg(wa + 4 * M) : 0u, a[ks][3] = second ? __ldg(wa + 4 * M + 8) : 0u;
        }
        /* this lane's B column (position gid) of each 8-position MMA: its window's corner */
        const int8_t *base[G16_NT];
        int ih0[G16_NT], iw0[G16_NT];
#pragma unroll
        for (int j = 0; j < G16_NT; j++) {
            const int pos = p0 + j * 8 + gid, pc = pos < P ? pos : 0;
            const int n = cu_div_by(pc, by_howo), r = pc - n * (int)(p.Ho * p.Wo), oh = cu_div_by(r, by_wo), ow = r - oh * Wo;
            ih0[j] = pos < P ? oh * p.sh - p.ph : -(1 << 20); /* past P: every tap reads padding */
            iw0[j] = ow * p.sw - p.pw;
            base[j] = x + (size_t)n * H * W * C + m0 + tig * 4;
        }
        int32_t acc[G16_NT][4] = {};
#pragma unroll
        for (int ks = 0; ks < 5; ks++) {
            uint32_t b[G16_NT][2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int tap = 2 * ks + h, kh = tap / 3, kw = tap % 3;
#pragma unroll
                for (int j = 0; j < G16_NT; j++) {
                    const int ih = ih0[j] + kh * p.dh, iw = iw0[j] + kw * p.dw;
                    const bool in = tap < 9 && (unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W;
                    b[j][h] = in ? __ldg((const uint32_t *)(base[j] + ((size_t)ih * W + iw) * C)) : tap < 9 ? zw : 0u;
                }
            }
#pragma unroll
            for (int j = 0; j < G16_NT; j++) mma_s8_g16(acc[j], a[ks], b[j][0], b[j][1]);
        }
        /* acc[j][e]: output m0 + gid + 8 (e / 2), position p0 + 8 j + 2 tig + e % 2 */
        if (q.out == QF_I8 && !res) {
#pragma unroll
            for (int j = 0; j < G16_NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int m = m0 + gid + 8 * (e / 2);
                    stage[warp][j * 8 + 2 * tig + e % 2][gid + 8 * (e / 2)] =
                        (uint8_t)(ACT ? qfi_requant_acc_level_fast(&q, acc[j][e], m, false, 0.0f)
                                      : qfi_requant_level(&q, qfi_requant_acc_at(&q, acc[j][e], m, false, 0.0f, false)));
                }
            __syncwarp();
            if (p0 + lane < P) *(uint4 *)((int8_t *)y + (size_t)(p0 + lane) * M + m0) = *(const uint4 *)stage[warp][lane];
            __syncwarp(); /* the stage is this warp's next tile's */
        } else {
#pragma unroll
            for (int j = 0; j < G16_NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int pos = p0 + j * 8 + 2 * tig + e % 2, m = m0 + gid + 8 * (e / 2);
                    if (pos < P) qfi_requant_elem_at(&q, y, (int64_t)pos * M + m, acc[j][e], m, res, ACT);
                }
        }
    }
}

/* The mma kernel's shapes: 3x3, 16 channels a group in and out, 32-bit indices. */
bool grouped16_mma(cudaStream_t s, const cu_conv_geo &g, const void *x, const void *w, const cu_requant *rq,
                   const int8_t *res, void *y)
{
    static const bool off = getenv("QFORGE_CUDA_NO_GROUPED_MMA") != NULL; /* benchmarks */
    if (off || g.kh != 3 || g.kw != 3 || g.group < 2 || g.C != 16 * g.group || g.M != 16 * g.group) return false;
    const int groups = (int)g.group, ptiles = (int)((g.N * g.Ho * g.Wo + G16_POS - 1) / G16_POS);
    if ((int64_t)groups * ptiles >= INT32_MAX) return false;
    const int total = groups * ptiles;
    unsigned b = (unsigned)((total + G16_WARPS - 1) / G16_WARPS);
    if (b > 262144) b = 262144;
    const cu_fast_div by_wo = cu_make_fast_div((uint32_t)g.Wo), by_howo = cu_make_fast_div((uint32_t)(g.Ho * g.Wo));
    if (rq->act != QF_ACT_NONE)
        grouped16_mma_kernel<true><<<b, 32 * G16_WARPS, 0, s>>>(y, (const int8_t *)x, (const uint32_t *)w, g, *rq,
                                                                rq->z_in, res, groups, total, by_wo, by_howo);
    else
        grouped16_mma_kernel<false><<<b, 32 * G16_WARPS, 0, s>>>(y, (const int8_t *)x, (const uint32_t *)w, g, *rq,
                                                                 rq->z_in, res, groups, total, by_wo, by_howo);
    return true;
}

/* Float (f32, f16): V consecutive outputs of one group a thread, weights
 * [kh][kw][Cg][M] read as vectors; each output's sum in the CPU kernel's
 * order (bias, then taps in (kh, kw, c) order), f32 with a rounding after
 * each multiply as the CPU's, f16 by fused multiply-adds: its output
 * rounds to half anyway, and the separate roundings halved its speed
 * (RegNetX-1.6GF's 24-channel groups: 2.0 ms a layer at batch 256, cuDNN's
 * grouped engines 3.4). */
template <typename T, int V>
__global__ void grouped_vec_kernel(T *y, const T *x, const T *w, const T *bias, cu_conv_geo p, bool relu, float lo,
                                   float hi, int total)
{
    const int C = (int)p.C, M = (int)p.M, H = (int)p.H, W = (int)p.W, Ho = (int)p.Ho, Wo = (int)p.Wo;
    const int Cg = C / (int)p.group, Mg = M / (int)p.group, MV = M / V;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int mv = i % MV, pix = i / MV, ow = pix % Wo, t = pix / Wo, oh = t % Ho, n = t / Ho;
        const int m0 = mv * V, c0 = m0 / Mg * Cg;
        float acc[V];
        cu_vec<T, V> wv;
        if (bias) wv.load(bias + m0);
#pragma unroll
        for (int v = 0; v < V; v++) acc[v] = bias ? to_f32(wv.e[v]) : 0.0f;
        for (int kh = 0; kh < p.kh; kh++) {
            const int ih = oh * p.sh - p.ph + kh * p.dh;
            if ((unsigned)ih >= (unsigned)H) continue;
            for (int kw = 0; kw < p.kw; kw++) {
                const int iw = ow * p.sw - p.pw + kw * p.dw;
                if ((unsigned)iw >= (unsigned)W) continue;
                const T *xp = x + ((size_t)(n * H + ih) * W + iw) * C + c0;
                const T *wp = w + (size_t)(kh * p.kw + kw) * Cg * M + m0;
                for (int c = 0; c < Cg; c++) {
                    const float xv = to_f32(xp[c]);
                    wv.load(wp + (size_t)c * M);
#pragma unroll
                    for (int v = 0; v < V; v++)
                        acc[v] = std::is_same<T, float>::value ? __fadd_rn(acc[v], __fmul_rn(to_f32(wv.e[v]), xv))
                                                               : __fmaf_rn(to_f32(wv.e[v]), xv, acc[v]);
                }
            }
        }
        cu_vec<T, V> out;
#pragma unroll
        for (int v = 0; v < V; v++) out.e[v] = (T)float_activation(acc[v], relu, lo, hi);
        out.store(y + (size_t)pix * M + m0);
    }
}

/* ---- depthwise: V consecutive channels a thread ---------------------------------------------------- */

/* Acc is int32_t for int8 (requantized by q), else float (bias, then ReLU).
 * Indices in 32 bits: the host checks that the tensors stay below 2^31
 * elements. */
template <typename T, typename Acc, int V, bool ACT>
__global__ void depthwise_kernel(void *y, const T *x, const T *w, const T *bias, cu_conv_geo p, bool relu, float lo, float hi,
                                 qfi_requant q, int32_t zx, const int8_t *res, int total)
{
    const int C = (int)p.C, G = C / V, H = (int)p.H, W = (int)p.W, Ho = (int)p.Ho, Wo = (int)p.Wo;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int cg = i % G, pix = i / G, ow = pix % Wo, t = pix / Wo, oh = t % Ho, n = t / Ho, c0 = cg * V;
        Acc acc[V];
#pragma unroll
        for (int v = 0; v < V; v++) acc[v] = 0;
        if constexpr (!std::is_same<Acc, int32_t>::value) {
            if (bias) {
                cu_vec<T, V> b;
                b.load(bias + c0);
#pragma unroll
                for (int v = 0; v < V; v++) acc[v] = to_f32(b.e[v]);
            }
        }
        for (int kh = 0; kh < p.kh; kh++) {
            const int ih = oh * p.sh - p.ph + kh * p.dh;
            const bool vh = (unsigned)ih < (unsigned)H;
            if (!vh && zx == 0) continue;
            for (int kw = 0; kw < p.kw; kw++) {
                const int iw = ow * p.sw - p.pw + kw * p.dw;
                const bool in = vh && (unsigned)iw < (unsigned)W;
                if (!in && zx == 0) continue;
                cu_vec<T, V> xv, wv;
                if (in) {
                    xv.load(x + ((size_t)(n * H + ih) * W + iw) * C + c0);
                } else if constexpr (std::is_same<Acc, int32_t>::value) { /* (floats pass zx = 0: never here) */
#pragma unroll
                    for (int v = 0; v < V; v++) xv.e[v] = (T)zx;
                }
                wv.load(w + (size_t)(kh * p.kw + kw) * C + c0);
#pragma unroll
                for (int v = 0; v < V; v++) {
                    if constexpr (std::is_same<Acc, int32_t>::value) acc[v] += to_i32(wv.e[v]) * to_i32(xv.e[v]);
                    else acc[v] = __fadd_rn(acc[v], __fmul_rn(to_f32(wv.e[v]), to_f32(xv.e[v])));
                }
            }
        }
        const size_t o = (size_t)pix * C + c0;
        if constexpr (std::is_same<Acc, int32_t>::value) {
            if (q.out == QF_I8 && !res) {
                /* the common case in one vector store */
                cu_vec<int8_t, V> out;
#pragma unroll
                for (int v = 0; v < V; v++)
                    out.e[v] = ACT ? qfi_requant_acc_level_fast(&q, acc[v], c0 + v, false, 0.0f)
                                   : qfi_requant_level(&q, qfi_requant_acc_at(&q, acc[v], c0 + v, false, 0.0f, false));
                out.store((int8_t *)y + o);
            } else if (q.out == QF_F16 && !res) { /* a float_out layer's halves, one vector store */
                cu_vec<__half, V> out;
#pragma unroll
                for (int v = 0; v < V; v++)
                    out.e[v] = __ushort_as_half(ACT ? qfi_requant_acc_f16_bits(&q, acc[v], c0 + v, false, 0.0f)
                                                    : qfi_f16_bits(qfi_requant_acc_at(&q, acc[v], c0 + v, false, 0.0f, false)));
                out.store((__half *)y + o);
            } else {
#pragma unroll
                for (int v = 0; v < V; v++) qfi_requant_elem_at(&q, y, (int64_t)(o + v), acc[v], c0 + v, res, ACT);
            }
        } else {
            cu_vec<T, V> out;
#pragma unroll
            for (int v = 0; v < V; v++) out.e[v] = (T)float_activation(acc[v], relu, lo, hi);
            out.store((T *)y + o);
        }
    }
}

/* INT8 K x K depthwise (K 3 or 5, dilation 1, stride SW along W) to int8
 * or half (TY): a thread takes CV channels (3x3: 4, one 32-bit word, or 2
 * where C is only even, ShuffleNetV2's 58 and 116; 5x5: 2, so that its
 * widened window stays in registers) of TW consecutive output pixels of a
 * row, with its K * K * CV weights widened once into registers and a
 * sliding window of input columns, so each input word is loaded and widened
 * once per thread instead of once per tap. */
template <int CV> struct dw_word;
template <> struct dw_word<4> { typedef uint32_t type; };
template <> struct dw_word<2> { typedef uint16_t type; };

/* The epilogue of the row kernels: CV channels' int32 sums (bias included)
 * at element o, requantized (with the residual word there, if any) and
 * stored as one word of levels or CV halves. */
template <int CV, bool ACT, typename TY>
__device__ __forceinline__ void store_dw_levels(TY *y, size_t o, const int32_t (&acc)[CV], const float (&m)[CV],
                                                const qfi_requant &q, const int8_t *res)
{
    typedef typename dw_word<CV>::type word_t;
    uint32_t packed[CV / 2] = {}; /* CV levels in [0], or CV halves */
    const uint32_t rw = res ? *(const word_t *)(res + o) : 0u;
#pragma unroll
    for (int v = 0; v < CV; v++) {
        const float a = qfi_i2f(acc[v]), r = qfi_requant_residual(&q, (int8_t)(rw >> (8 * v)));
        if constexpr (std::is_same<TY, int8_t>::value) {
            const float f = ACT ? qfi_requant_smooth_i8_value(&q, a, m[v], res, r)
                                : qfi_requant_value_at(&q, a, m[v], res, r, false);
            packed[0] |= (uint32_t)(uint8_t)qfi_requant_level(&q, f) << (8 * v);
        } else {
            const uint32_t h = ACT ? qfi_requant_smooth_f16_bits(&q, a, m[v], res, r)
                                   : qfi_f16_bits(qfi_requant_value_at(&q, a, m[v], res, r, false));
            packed[v / 2] |= h << (16 * (v % 2));
        }
    }
    if constexpr (std::is_same<TY, int8_t>::value) *(word_t *)(y + o) = (word_t)packed[0];
    else if constexpr (CV == 4) *(uint2 *)(y + o) = make_uint2(packed[0], packed[1]);
    else *(uint32_t *)(y + o) = packed[0];
}

template <int K, int SW, int TW, int CV, bool ACT, typename TY>
__global__ void depthwise_window_i8_kernel(TY *y, const int8_t *x, const int8_t *w, cu_conv_geo p, qfi_requant q,
                                           int32_t zx, const int8_t *res, int total)
{
    typedef typename dw_word<CV>::type word_t;
    const int C = (int)p.C, G = C / CV, H = (int)p.H, W = (int)p.W, Ho = (int)p.Ho, Wo = (int)p.Wo;
    const uint32_t zw = zp_word(zx);
    const int strips = (Wo + TW - 1) / TW;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int cg = i % G, r0 = i / G, strip = r0 % strips, r1 = r0 / strips, oh = r1 % Ho, n = r1 / Ho;
        const int c0 = cg * CV, ow0 = strip * TW, iw0 = ow0 * SW - p.pw;
        int32_t wr[K * K][CV];
#pragma unroll
        for (int t = 0; t < K * K; t++) {
            const uint32_t word = *(const word_t *)(w + t * C + c0);
#pragma unroll
            for (int v = 0; v < CV; v++) wr[t][v] = (int8_t)(word >> (8 * v));
        }
        int32_t bias[CV];
        float m[CV];
#pragma unroll
        for (int v = 0; v < CV; v++) {
            bias[v] = q.bias ? q.bias[c0 + v] : 0;
            m[v] = q.m[c0 + v];
        }
        const int8_t *rows[K];
        bool row_ok[K];
#pragma unroll
        for (int r = 0; r < K; r++) {
            const int ih = oh * p.sh - p.ph + r;
            row_ok[r] = (unsigned)ih < (unsigned)H;
            rows[r] = x + ((size_t)(n * H + (row_ok[r] ? ih : 0)) * W) * C + c0;
        }
        /* input column iw of the window, widened: col[r][v] */
        auto load_col = [&](int iw, int32_t (&col)[K][CV]) {
            const bool in = (unsigned)iw < (unsigned)W;
#pragma unroll
            for (int r = 0; r < K; r++) {
                const uint32_t word = in && row_ok[r] ? *(const word_t *)(rows[r] + (size_t)iw * C) : zw;
#pragma unroll
                for (int v = 0; v < CV; v++) col[r][v] = (int8_t)(word >> (8 * v));
            }
        };
        /* the window's columns; the first K - SW are the previous pixel's last */
        int32_t cols[K][K][CV];
#pragma unroll
        for (int k = 0; k < K - SW; k++) load_col(iw0 + k, cols[k]);
#pragma unroll
        for (int j = 0; j < TW; j++) {
            if (ow0 + j >= Wo) break;
            const int base = iw0 + j * SW;
#pragma unroll
            for (int k = K - SW; k < K; k++) load_col(base + k, cols[k]);
            int32_t acc[CV];
#pragma unroll
            for (int v = 0; v < CV; v++) {
                /* a sum a row, then theirs: K short chains instead of one of
                 * K * K multiply-adds (exact in int32, in any order) */
                int32_t row_sum[K];
                acc[v] = bias[v];
#pragma unroll
                for (int r = 0; r < K; r++) {
                    row_sum[r] = 0;
#pragma unroll
                    for (int k = 0; k < K; k++) row_sum[r] += wr[r * K + k][v] * cols[k][r][v];
                }
#pragma unroll
                for (int r = 0; r < K; r++) acc[v] += row_sum[r];
            }
            store_dw_levels<CV, ACT>(y, ((size_t)(n * Ho + oh) * Wo + ow0 + j) * C + c0, acc, m, q, res);
            /* slide: the next pixel's first K - SW columns are this one's last */
#pragma unroll
            for (int k = 0; k < K - SW; k++)
#pragma unroll
                for (int r = 0; r < K; r++)
#pragma unroll
                    for (int v = 0; v < CV; v++) cols[k][r][v] = cols[k + SW][r][v];
        }
    }
}

template <int K, int SW, int CV, typename TY>
void launch_depthwise_window_i8(cudaStream_t s, const cu_conv_geo &g, const void *x, const void *w, const cu_requant *rq,
                                const int8_t *res, void *y)
{
    constexpr int TW = 8;
    const int total = (int)(g.N * g.Ho * ((g.Wo + TW - 1) / TW) * (g.C / CV));
    unsigned b = cu_blocks(total, 128);
    if (b > 262144) b = 262144;
    if (rq->act != QF_ACT_NONE)
        depthwise_window_i8_kernel<K, SW, TW, CV, true, TY><<<b, 128, 0, s>>>((TY *)y, (const int8_t *)x,
                                                                             (const int8_t *)w, g, *rq, rq->z_in, res, total);
    else
        depthwise_window_i8_kernel<K, SW, TW, CV, false, TY><<<b, 128, 0, s>>>((TY *)y, (const int8_t *)x,
                                                                              (const int8_t *)w, g, *rq, rq->z_in, res, total);
}

/* INT8 K x K depthwise (K 3, 5 or 7; stride SW 1 or 2 along W; dilation 1)
 * by dp4a: a thread takes 4 channels (one word) of TW = 8 consecutive output
 * pixels of a row. Row by row it loads the (TW - 1) SW + K input words it
 * needs, turns each 4 columns x 4 channels block around (8 byte permutes)
 * into words of 4 columns of one channel, and the row's K weights likewise
 * into KW words a channel (taps past K zero); each output's row sum is then
 * KW dp4a of column words funnel-shifted to its first tap. The vector
 * kernel spent a widening and a multiply-add per tap and channel
 * (ConvNeXt-T's 7x7 layers 9.3 ms of 40 at batch 256, 4.1 this way); the
 * sliding window a multiply-add per tap and channel. Exact int32 sums: the
 * same levels. */
__device__ __forceinline__ void transpose_bytes4(const uint32_t (&c)[4], uint32_t (&t)[4])
{
    /* c[k] byte v -> t[v] byte k */
    const uint32_t a0 = __byte_perm(c[0], c[1], 0x5140), a1 = __byte_perm(c[0], c[1], 0x7362);
    const uint32_t a2 = __byte_perm(c[2], c[3], 0x5140), a3 = __byte_perm(c[2], c[3], 0x7362);
    t[0] = __byte_perm(a0, a2, 0x5410), t[1] = __byte_perm(a0, a2, 0x7632);
    t[2] = __byte_perm(a1, a3, 0x5410), t[3] = __byte_perm(a1, a3, 0x7632);
}

constexpr int DW_DP4A_TW = 8;

/* The half outputs of a SiLU or Sigmoid layer (the ones an SE block reads)
 * whose fast form (qfi_sigmoid_f16_approx) is not sure: each lane queues its
 * own in its warp's shared memory, and after each strip of outputs the warp
 * finishes the queue by the exact form, a value a lane. The exact form's
 * branch taken per value made the whole warp run it wherever one lane
 * needed it: a quarter of EfficientNet-B0's depthwise epilogue steps, about
 * 20 of 103 instructions an output (bench/cuda_notes.md, session 42). A
 * step queues at most 32 lanes x 4 channels: the queue holds two. */
constexpr int DW_QUEUE = 256;
struct dw_exact_queue {
    float v[DW_QUEUE];   /* the linear value (qfi_requant_linear), the activation's argument */
    size_t at[DW_QUEUE]; /* its output element */
};
constexpr int DW_DP4A_THREADS = 128;

/* Finishes the warp's queue: the exact form's half of each value. The fast
 * form's store of the word each one is in came first (__syncwarp orders the
 * lanes' stores). */
__device__ __forceinline__ void dw_queue_finish(__half *y, dw_exact_queue &qu, int &count, const qfi_requant &q)
{
    __syncwarp();
    for (int k = (int)(threadIdx.x % 32); k < count; k += 32)
        y[qu.at[k]] = __ushort_as_half(qfi_requant_exact_f16_bits(&q, qu.v[k]));
    __syncwarp();
    count = 0;
}

/* store_dw_levels for 4 half outputs of a smooth activation, valid or not
 * (every lane of the warp calls it: the ballots), the unsure ones queued
 * (their stored half is a placeholder until dw_queue_finish). count is the
 * warp's queue length, the same in every lane. */
__device__ __forceinline__ void store_dw_halves_queued(__half *y, size_t o, bool valid, const int32_t (&acc)[4],
                                                       const float (&m)[4], const qfi_requant &q, const int8_t *res,
                                                       dw_exact_queue &qu, int &count)
{
    const uint32_t rw = valid && res ? *(const uint32_t *)(res + o) : 0u;
    const bool sigmoid_kind = q.act == QF_ACT_SILU || q.act == QF_ACT_SIGMOID;
    uint32_t packed[2] = {};
    float lin[4];
    unsigned unsure = 0;
#pragma unroll
    for (int v = 0; v < 4; v++) {
        const float r = qfi_requant_residual(&q, (int8_t)(rw >> (8 * v)));
        lin[v] = qfi_requant_linear(&q, qfi_i2f(acc[v]), m[v], res, r);
        uint16_t h;
        bool sure = true;
        if (sigmoid_kind) sure = qfi_sigmoid_f16_approx(q.act == QF_ACT_SILU, lin[v], q.act_s, q.lo, q.hi, &h);
        else h = qfi_requant_exact_f16_bits(&q, lin[v]);
        unsure |= (unsigned)(valid && !sure) << v;
        packed[v / 2] |= (uint32_t)h << (16 * (v % 2));
    }
    if (valid) *(uint2 *)(y + o) = make_uint2(packed[0], packed[1]);
    if (!__any_sync(0xFFFFFFFFu, unsure != 0)) return;
    if (count > DW_QUEUE - 32 * 4) dw_queue_finish(y, qu, count, q);
    const unsigned below = (1u << (threadIdx.x % 32)) - 1u;
#pragma unroll
    for (int v = 0; v < 4; v++) {
        const bool mine = unsure >> v & 1u;
        const unsigned b = __ballot_sync(0xFFFFFFFFu, mine);
        if (mine) {
            const int at = count + __popc(b & below);
            qu.v[at] = lin[v];
            qu.at[at] = o + v;
        }
        count += __popc(b);
    }
}

/* Whether an instance queues: half outputs of an activation. */
template <bool ACT, typename TY> constexpr bool dw_queued = ACT && std::is_same<TY, __half>::value;

template <int K, int SW, bool ACT, typename TY>
__device__ __forceinline__ void depthwise_dp4a_body(TY *y, const int8_t *x, const int8_t *w, cu_conv_geo p, qfi_requant q,
                                                    int32_t zx, const int8_t *res, int total)
{
    constexpr int TW = DW_DP4A_TW, KW = (K + 3) / 4, NG = (TW - 1) * SW / 4 + KW + 1, USED = (TW - 1) * SW + K;
    /* half outputs of an activation: the unsure ones queued (dw_exact_queue) */
    constexpr bool QUEUE = dw_queued<ACT, TY>;
    __shared__ dw_exact_queue queues[QUEUE ? DW_DP4A_THREADS / 32 : 1];
    dw_exact_queue &qu = queues[QUEUE ? threadIdx.x / 32 : 0];
    int count = 0;
    const int C = (int)p.C, G = C / 4, H = (int)p.H, W = (int)p.W, Ho = (int)p.Ho, Wo = (int)p.Wo;
    const uint32_t zw = zp_word(zx);
    const int strips = (Wo + TW - 1) / TW;
    /* a warp's lanes loop together (the queue's ballots): past total, a lane
     * recomputes the last unit and stores nothing */
    for (int i0 = blockIdx.x * blockDim.x + (int)(threadIdx.x & ~31u); i0 < total; i0 += gridDim.x * blockDim.x) {
        const bool live = i0 + (int)(threadIdx.x % 32) < total;
        const int i = live ? i0 + (int)(threadIdx.x % 32) : total - 1;
        const int cg = i % G, r0 = i / G, strip = r0 % strips, r1 = r0 / strips, oh = r1 % Ho, n = r1 / Ho;
        const int c0 = cg * 4, ow0 = strip * TW, iw0 = ow0 * SW - p.pw;
        int32_t acc[TW][4];
        float m[4];
#pragma unroll
        for (int v = 0; v < 4; v++) {
            m[v] = q.m[c0 + v];
            const int32_t b = q.bias ? q.bias[c0 + v] : 0;
#pragma unroll
            for (int j = 0; j < TW; j++) acc[j][v] = b;
        }
#pragma unroll 1
        for (int r = 0; r < K; r++) {
            const int ih = oh * p.sh - p.ph + r;
            const bool row_ok = (unsigned)ih < (unsigned)H;
            const int8_t *row = x + (size_t)(n * H + (row_ok ? ih : 0)) * W * C + c0;
            /* the row's weights: wt[g][v] = taps 4g..4g+3 of channel v */
            uint32_t wt[KW][4];
#pragma unroll
            for (int g = 0; g < KW; g++) {
                uint32_t c[4];
#pragma unroll
                for (int k = 0; k < 4; k++) c[k] = 4 * g + k < K ? *(const uint32_t *)(w + (r * K + 4 * g + k) * C + c0) : 0u;
                transpose_bytes4(c, wt[g]);
            }
            /* the row's input: col[g][v] = columns 4g..4g+3 of the strip's window, channel v */
            uint32_t col[NG][4];
#pragma unroll
            for (int g = 0; g < NG; g++) {
                uint32_t c[4];
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const int iw = iw0 + 4 * g + k;
                    c[k] = row_ok && 4 * g + k < USED && (unsigned)iw < (unsigned)W ? *(const uint32_t *)(row + (size_t)iw * C) : zw;
                }
                transpose_bytes4(c, col[g]);
            }
#pragma unroll
            for (int j = 0; j < TW; j++)
#pragma unroll
                for (int v = 0; v < 4; v++)
#pragma unroll
                    for (int g = 0; g < KW; g++) {
                        const int at = j * SW; /* the output's first column in the window */
                        const uint32_t lo = col[at / 4 + g][v], hi = col[at / 4 + g + 1][v];
                        const uint32_t xs = at % 4 ? __funnelshift_r(lo, hi, 8 * (at % 4)) : lo;
                        acc[j][v] = __dp4a((int)xs, (int)wt[g][v], acc[j][v]);
                    }
        }
#pragma unroll
        for (int j = 0; j < TW; j++) {
            const size_t o = ((size_t)(n * Ho + oh) * Wo + ow0 + j) * C + c0;
            if constexpr (QUEUE) store_dw_halves_queued(y, o, live && ow0 + j < Wo, acc[j], m, q, res, qu, count);
            else if (live && ow0 + j < Wo) store_dw_levels<4, ACT>(y, o, acc[j], m, q, res);
        }
        if constexpr (QUEUE)
            if (count) dw_queue_finish(y, qu, count, q);
    }
}

template <int K, int SW, bool ACT, typename TY>
__global__ void __launch_bounds__(DW_DP4A_THREADS)
    depthwise_dp4a_kernel(TY *y, const int8_t *x, const int8_t *w, cu_conv_geo p, qfi_requant q, int32_t zx,
                          const int8_t *res, int total)
{
    depthwise_dp4a_body<K, SW, ACT, TY>(y, x, w, p, q, zx, res, total);
}
/* The queueing instances held to 80 registers, 6 blocks an SM: the values
 * held for the queue's ballots took them to 92-96 (5 blocks), which 3x3
 * and 5x5 do not need (no spills; 7x7 would spill, so it is not held). */
template <int K, int SW, typename TY>
__global__ void __launch_bounds__(DW_DP4A_THREADS, 6)
    depthwise_dp4a_queued_kernel(TY *y, const int8_t *x, const int8_t *w, cu_conv_geo p, qfi_requant q, int32_t zx,
                                 const int8_t *res, int total)
{
    depthwise_dp4a_body<K, SW, true, TY>(y, x, w, p, q, zx, res, total);
}

template <int K, int SW, typename TY>
void launch_depthwise_dp4a(cudaStream_t s, const cu_conv_geo &g, const void *x, const void *w, const cu_requant *rq,
                           const int8_t *res, void *y)
{
    const int total = (int)(g.N * g.Ho * ((g.Wo + DW_DP4A_TW - 1) / DW_DP4A_TW) * (g.C / 4));
    unsigned b = cu_blocks(total, DW_DP4A_THREADS);
    if (b > 262144) b = 262144;
    if constexpr (dw_queued<true, TY> && K <= 5) {
        if (rq->act != QF_ACT_NONE) {
            depthwise_dp4a_queued_kernel<K, SW, TY><<<b, DW_DP4A_THREADS, 0, s>>>((TY *)y, (const int8_t *)x, (const int8_t *)w, g, *rq, rq->z_in, res, total);
            return;
        }
    }
    if (rq->act != QF_ACT_NONE)
        depthwise_dp4a_kernel<K, SW, true, TY><<<b, DW_DP4A_THREADS, 0, s>>>((TY *)y, (const int8_t *)x, (const int8_t *)w, g, *rq, rq->z_in, res, total);
    else
        depthwise_dp4a_kernel<K, SW, false, TY><<<b, DW_DP4A_THREADS, 0, s>>>((TY *)y, (const int8_t *)x, (const int8_t *)w, g, *rq, rq->z_in, res, total);
}

/* By kernel size and stride */
template <int K, typename TY>
void launch_depthwise_dp4a_by_stride(cudaStream_t s, const cu_conv_geo &g, const void *x, const void *w,
                                     const cu_requant *rq, const int8_t *res, void *y)
{
    if (g.sw == 1) launch_depthwise_dp4a<K, 1, TY>(s, g, x, w, rq, res, y);
    else launch_depthwise_dp4a<K, 2, TY>(s, g, x, w, rq, res, y);
}
template <typename TY>
void launch_depthwise_dp4a_by_geo(cudaStream_t s, const cu_conv_geo &g, const void *x, const void *w,
                                  const cu_requant *rq, const int8_t *res, void *y)
{
    if (g.kh == 3) launch_depthwise_dp4a_by_stride<3, TY>(s, g, x, w, rq, res, y);
    else if (g.kh == 5) launch_depthwise_dp4a_by_stride<5, TY>(s, g, x, w, rq, res, y);
    else launch_depthwise_dp4a_by_stride<7, TY>(s, g, x, w, rq, res, y);
}

/* By kernel size, stride and channels a thread (3x3: 4 where C allows, else 2) */
template <typename TY>
void launch_depthwise_window_i8_by_geo(cudaStream_t s, const cu_conv_geo &g, const void *x, const void *w,
                                       const cu_requant *rq, const int8_t *res, void *y)
{
    const bool words = g.C % 4 == 0;
    if (g.kh == 5) {
        if (g.sw == 1) launch_depthwise_window_i8<5, 1, 2, TY>(s, g, x, w, rq, res, y);
        else launch_depthwise_window_i8<5, 2, 2, TY>(s, g, x, w, rq, res, y);
    } else if (g.sw == 1) {
        words ? launch_depthwise_window_i8<3, 1, 4, TY>(s, g, x, w, rq, res, y)
              : launch_depthwise_window_i8<3, 1, 2, TY>(s, g, x, w, rq, res, y);
    } else {
        words ? launch_depthwise_window_i8<3, 2, 4, TY>(s, g, x, w, rq, res, y)
              : launch_depthwise_window_i8<3, 2, 2, TY>(s, g, x, w, rq, res, y);
    }
}

template <typename T, typename Acc, int V>
void launch_depthwise(cudaStream_t s, const cu_conv_geo &g, const void *x, const void *w, const void *bias, bool relu,
                      float lo, float hi, const cu_requant *rq, const int8_t *res, void *y)
{
    const int total = (int)(g.N * g.Ho * g.Wo * (g.C / V));
    unsigned b = cu_blocks(total, 256);
    if (b > 262144) b = 262144;
    qfi_requant q = {};
    if (rq) q = *rq;
    const int32_t zx = rq ? rq->z_in : 0;
    if constexpr (std::is_same<Acc, int32_t>::value) {
        if (q.act != QF_ACT_NONE) {
            depthwise_kernel<T, Acc, V, true><<<b, 256, 0, s>>>(y, (const T *)x, (const T *)w, (const T *)bias, g, relu, lo, hi,
                                                                q, zx, res, total);
            return;
        }
    }
    depthwise_kernel<T, Acc, V, false><<<b, 256, 0, s>>>(y, (const T *)x, (const T *)w, (const T *)bias, g, relu, lo, hi, q,
                                                         zx, res, total);
}

template <typename T, int V>
void launch_grouped_vec(cudaStream_t s, const cu_conv_geo &g, const void *x, const void *w, const void *bias, bool relu,
                        float lo, float hi, void *y)
{
    const int total = (int)(g.N * g.Ho * g.Wo * (g.M / V));
    unsigned b = cu_blocks(total, 256);
    if (b > 262144) b = 262144;
    grouped_vec_kernel<T, V><<<b, 256, 0, s>>>((T *)y, (const T *)x, (const T *)w, (const T *)bias, g, relu, lo, hi, total);
}

/* Tensors small enough for the vectorized kernels' 32-bit indices. */
bool fits_i32(const cu_conv_geo *g)
{
    return g->N * g->H * g->W * g->C < INT32_MAX && g->N * g->Ho * g->Wo * g->M < INT32_MAX;
}

/* Outputs a thread of the grouped kernels takes: the widest vector that a
 * group's outputs divide into (at most 16 bytes of float output); 1: the
 * general kernel. */
int grouped_vector(const cu_conv_geo *g, qf_dtype dt)
{
    const int64_t Cg = g->C / g->group, Mg = g->M / g->group;
    if (g->group == 1 || Cg == 1 || !fits_i32(g)) return 1;
    /* INT8 by dp4a over whole words of a group's channels. The words were
     * [M][Cg] until a warp's loads Cg bytes apart made 16- and 32-channel
     * groups slower than the general kernel (bench/zoo/NOTES.md);
     * QFORGE_CUDA_GROUPED_MAXCG (benchmarks) caps the group size it takes. */
    static const long maxcg = getenv("QFORGE_CUDA_GROUPED_MAXCG") ? atol(getenv("QFORGE_CUDA_GROUPED_MAXCG")) : 1L << 30;
    if (dt == QF_I8) return Cg % 4 || Cg > maxcg ? 1 : Mg % 8 == 0 ? 8 : Mg % 4 == 0 ? 4 : 1;
    const int maxv = dt == QF_F16 ? 8 : 4;
    for (int v = maxv; v > 1; v /= 2)
        if (Mg % v == 0) return v;
    return 1;
}

} // namespace

bool cu_direct_conv_words(const cu_conv_geo *g, bool int8)
{
    return int8 && grouped_vector(g, QF_I8) > 1;
}

qf_status cu_direct_conv_run(cudaStream_t s, const cu_conv_geo *g, qf_dtype dt, const void *x, const void *w,
                             const void *bias, bool relu, float lo, float hi, const cu_requant *rq, const int8_t *res,
                             void *y)
{
    const int64_t total = g->N * g->Ho * g->Wo * g->M;
    if (total == 0) return QF_OK;
    /* depthwise with whole vectors and 32-bit indices: the vectorized kernel */
    const bool dw = g->group == g->C && g->M == g->C && fits_i32(g);
    /* what dp4a (below) leaves, C only even (ShuffleNetV2's 58 and 116):
     * 3x3 by the sliding window, and 5x5 without a smooth activation: 5x5's
     * widened window (130 registers) leaves 3 blocks an SM, which hides the
     * taps' latency (MnasNet b256 +3.8 %) but not a SiLU epilogue's
     * (EfficientNet-B0 -9 %; the vector kernel keeps 5 blocks). For A/B,
     * QFORGE_CUDA_DW_WINDOW=3 leaves every 5x5 conv to the vector kernel and
     * =5 takes them all. */
    static const long window_k = getenv("QFORGE_CUDA_DW_WINDOW") ? atol(getenv("QFORGE_CUDA_DW_WINDOW")) : 0;
    const bool k5 = g->kh == 5 && (window_k == 5 || (window_k == 0 && rq && rq->act == QF_ACT_NONE));
    /* the row kernels' common ground: INT8 in, int8 or half out, square, undilated */
    const bool rows = dw && rq && (rq->out == QF_I8 || rq->out == QF_F16) && g->kh == g->kw && g->dh == 1 && g->dw == 1;
    const bool window = rows && g->C % 2 == 0 && (g->kh == 3 || k5) && (g->sw == 1 || g->sw == 2);
    const bool half_out = rq && rq->out == QF_F16;
    /* 3x3, 5x5 and 7x7 over 4-channel words by dp4a, stride 1 and 2 (H100,
     * INT8 b256 against the window and vector kernels: MnasNet +26 %,
     * ConvNeXt-T +16 %, MobileNetV2 +11 %; stride 2 alone +0.3 to 1.3 %).
     * For A/B, QFORGE_CUDA_DW_DP4A=1 keeps stride 2 and =0 every layer on
     * the kernels before it. */
    static const long dp4a_mode = getenv("QFORGE_CUDA_DW_DP4A") ? atol(getenv("QFORGE_CUDA_DW_DP4A")) : 2;
    const bool dp4a = rows && g->C % 4 == 0 && (g->kh == 3 || g->kh == 5 || g->kh == 7) &&
                      (g->sw == 1 ? dp4a_mode >= 1 : g->sw == 2 && dp4a_mode >= 2);
    if (dp4a) {
        if (half_out) launch_depthwise_dp4a_by_geo<__half>(s, *g, x, w, rq, res, y);
        else launch_depthwise_dp4a_by_geo<int8_t>(s, *g, x, w, rq, res, y);
    } else if (window) {
        if (half_out) launch_depthwise_window_i8_by_geo<__half>(s, *g, x, w, rq, res, y);
        else launch_depthwise_window_i8_by_geo<int8_t>(s, *g, x, w, rq, res, y);
    } else if (dw && (rq || dt == QF_F16 || dt == QF_F32)) {
        /* the widest vector of channels C divides into, 16 bytes at most:
         * ShuffleNetV2's 58-channel layers take 2 (the general kernel, one
         * thread an element with 64-bit index arithmetic, took 0.48 ms a layer) */
        const int es = rq ? 1 : dt == QF_F16 ? 2 : 4;
        int V = 16 / es;
        while (g->C % V) V /= 2;
        if (rq) {
            switch (V) {
            case 16: case 8: launch_depthwise<int8_t, int32_t, 8>(s, *g, x, w, NULL, false, 0.0f, 0.0f, rq, res, y); break;
            case 4: launch_depthwise<int8_t, int32_t, 4>(s, *g, x, w, NULL, false, 0.0f, 0.0f, rq, res, y); break;
            case 2: launch_depthwise<int8_t, int32_t, 2>(s, *g, x, w, NULL, false, 0.0f, 0.0f, rq, res, y); break;
            default: launch_depthwise<int8_t, int32_t, 1>(s, *g, x, w, NULL, false, 0.0f, 0.0f, rq, res, y); break;
            }
        } else if (dt == QF_F16) {
            switch (V) {
            case 8: launch_depthwise<__half, float, 8>(s, *g, x, w, bias, relu, lo, hi, NULL, NULL, y); break;
            case 4: launch_depthwise<__half, float, 4>(s, *g, x, w, bias, relu, lo, hi, NULL, NULL, y); break;
            case 2: launch_depthwise<__half, float, 2>(s, *g, x, w, bias, relu, lo, hi, NULL, NULL, y); break;
            default: launch_depthwise<__half, float, 1>(s, *g, x, w, bias, relu, lo, hi, NULL, NULL, y); break;
            }
        } else {
            switch (V) {
            case 4: launch_depthwise<float, float, 4>(s, *g, x, w, bias, relu, lo, hi, NULL, NULL, y); break;
            case 2: launch_depthwise<float, float, 2>(s, *g, x, w, bias, relu, lo, hi, NULL, NULL, y); break;
            default: launch_depthwise<float, float, 1>(s, *g, x, w, bias, relu, lo, hi, NULL, NULL, y); break;
            }
        }
    } else if (rq && fits_i32(g) && grouped16_mma(s, *g, x, w, rq, res, y)) {
    } else if (rq && grouped_vector(g, QF_I8) == 8 && grouped3x3_i8_strip<8>(s, *g, x, w, rq, res, y)) {
    } else if (rq && grouped_vector(g, QF_I8) == 4 && grouped3x3_i8_strip<4>(s, *g, x, w, rq, res, y)) {
    } else if (rq && grouped_vector(g, QF_I8) > 1) {
        const int V = grouped_vector(g, QF_I8), t = (int)(total / V);
        unsigned b = cu_blocks(t, 256);
        if (b > 262144) b = 262144;
        const bool act = rq->act != QF_ACT_NONE;
        if (V == 8 && act)
            grouped_i8_words_kernel<8, true><<<b, 256, 0, s>>>(y, (const int8_t *)x, (const int8_t *)w, *g, *rq, rq->z_in, res, t);
        else if (V == 8)
            grouped_i8_words_kernel<8, false><<<b, 256, 0, s>>>(y, (const int8_t *)x, (const int8_t *)w, *g, *rq, rq->z_in, res, t);
        else if (act)
            grouped_i8_words_kernel<4, true><<<b, 256, 0, s>>>(y, (const int8_t *)x, (const int8_t *)w, *g, *rq, rq->z_in, res, t);
        else
            grouped_i8_words_kernel<4, false><<<b, 256, 0, s>>>(y, (const int8_t *)x, (const int8_t *)w, *g, *rq, rq->z_in, res, t);
    } else if (!rq && (dt == QF_F16 || dt == QF_F32) && grouped_vector(g, dt) > 1) {
        switch (dt == QF_F16 ? grouped_vector(g, dt) : -grouped_vector(g, dt)) {
        case 8: launch_grouped_vec<__half, 8>(s, *g, x, w, bias, relu, lo, hi, y); break;
        case 4: launch_grouped_vec<__half, 4>(s, *g, x, w, bias, relu, lo, hi, y); break;
        case 2: launch_grouped_vec<__half, 2>(s, *g, x, w, bias, relu, lo, hi, y); break;
        case -4: launch_grouped_vec<float, 4>(s, *g, x, w, bias, relu, lo, hi, y); break;
        default: launch_grouped_vec<float, 2>(s, *g, x, w, bias, relu, lo, hi, y); break;
        }
    } else {
        unsigned b = cu_blocks(total, 256);
        if (b > 262144) b = 262144;
        qfi_requant q = {};
        if (rq) q = *rq;
        if (rq)
            grouped_conv_kernel<int8_t, int32_t><<<b, 256, 0, s>>>(y, (const int8_t *)x, (const int8_t *)w, NULL, *g, false,
                                                                  0.0f, 0.0f, q, rq->z_in, res, total);
        else if (dt == QF_F16)
            grouped_conv_kernel<__half, float><<<b, 256, 0, s>>>(y, (const __half *)x, (const __half *)w,
                                                                (const __half *)bias, *g, relu, lo, hi, q, 0, NULL, total);
        else
            grouped_conv_kernel<float, float><<<b, 256, 0, s>>>(y, (const float *)x, (const float *)w, (const float *)bias,
                                                               *g, relu, lo, hi, q, 0, NULL, total);
    }
    CU_LAUNCHED();
    return QF_OK;
}
