/* INT8 convolution as an implicit GEMM on the Tensor Cores (s8 x s8 ->
 * s32): each block gathers its patches from the NHWC input straight into
 * shared memory (no im2col buffer) and applies lib/quant_math.h's
 * requantization -- int32 bias, per-channel multiplier, residual, ReLU/Clip
 * bounds, round half to even, saturation -- to the accumulators in
 * registers, so neither patches nor int32 sums travel through device
 * memory. cuBLASLt cannot apply a per-channel scale to an int8 output on
 * sm_90 (ARCHITECTURE.md); conv.cu picks this kernel per layer where it times
 * faster than cuBLASLt + the requantize kernel.
 *
 * GEMM view: Y [P][M] = X_patches [P][K] x W^T, P = N*Ho*Wo output
 * positions, K = kh*kw*Cp with k = (ikh*kw + ikw)*Cp + c. An input of
 * fewer than 4 channels is first rearranged (widened to 4 channels, or
 * space-to-depth for stride 2; see input_prep) and the weights to match. A
 * table gives each k's offset in the input and its tap; each tile knows
 * which of its windows' taps are inside the input. Tiles: BM positions x BN
 * channels x 64 bytes of K per stage, 4 stages of cp.async, 8 warps; the
 * MMAs by wgmma (Hopper, sm_90a: m64nNk32 from shared memory) or by
 * mma.sync m16n8k32 (any sm_80+), whichever the tuner times faster.
 * Taps in the padding read the input's zero point, as the CPU engine's do. */
#include "cuda_internal.h"
#include <cuda.h> /* CUtensorMap and its encoder's types (the encoder comes from the driver at run time) */
#include <type_traits>

namespace {

constexpr int BK = 64;      /* K bytes per pipeline stage: four 16-byte chunks a row */
constexpr int THREADS = 256;
constexpr int MAX_TAPS = 31; /* a window's taps as bits of one word; bit 31 is the past-K tap */
/* Padding taps read the zero point from a buffer this long, each thread its
 * own 16 bytes of it: with one 16-byte copy every block read the same L2
 * line (ResNet-18's layer3.1.conv2 at b256 on the H200: 0.158 ms with a zero
 * point, 0.100 spread out, 0.096 without one). */
constexpr int IGEMM_ZPAD_BYTES = 4096;

struct igemm_params {
    const int8_t *x;        /* (N, H, W, Cp) */
    const int8_t *w;        /* [M][K] */
    int8_t *y;              /* [P][M] */
    const int8_t *res;      /* [P][M] or NULL */
    qfi_requant rq;         /* the epilogue: multipliers, bias, residual scale, bounds (int8 output) */
    const int2 *taps;       /* per VEC bytes of K: (offset in the input from the window's corner, tap); tap 31 past K */
    const int8_t *zpad;     /* IGEMM_ZPAD_BYTES of the input's zero point, which padding taps read; NULL: zero (cp.async's fill) */
    int H, W, Cp, Ho, Wo, M, P, K;
    int sh, sw, ph, pw;
    int kh, kw, dh, dw;     /* taps and dilation: kh * kw <= MAX_TAPS */
    cu_fast_div div_HoWo, div_Wo;
    int n_tiles, p_tiles;   /* ceil(M / BN), ceil(P / BM) */
    /* split-K: each tile's K runs as k_splits units of kt_split stages each
     * (kt_split = all of K's stages when k_splits is 1); with k_splits > 1
     * the units add their bias-free sums into acc_out ([P][M], zeroed) and
     * cu_requant_launch applies the epilogue: integer sums do not care in
     * which order they are added, so the result stays bit-exact. For
     * batch-1 layers whose tiles leave most SMs idle. */
    int k_splits, kt_split;
    int32_t *acc_out;
    int small_acc;          /* every |acc + bias| < 2^22 (acc_bound): exact conversions without the conversion unit */
};

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t *r)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void mma_s8(int32_t *c, const uint32_t *a, const uint32_t *b)
{
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* Hopper's warpgroup MMA (sm_90a): a warpgroup of 4 warps multiplies a
 * 64-row A by an N-row B, both read from shared memory through descriptors,
 * at about twice mma.sync's rate and without the ldmatrix traffic. The
 * cp.async tiles above (64-byte rows, 16-byte chunks XOR-ed with bits 7-8 of
 * the offset) are the 64-byte swizzled K-major layout wgmma reads, a
 * stage's base on a 512-byte swizzle period; the TMA kernel's (128-byte
 * rows) the 128-byte swizzle. Descriptor: start address >> 4, leading
 * offset (unused for swizzled K-major) 1, stride between 8-row groups
 * (8 rows: 512 or 1024 bytes) >> 4, layout 2 = 64-byte swizzle, 1 = 128. */
template <int ROW_BYTES> __device__ __forceinline__ uint64_t wgmma_desc(uint32_t addr)
{
    static_assert(ROW_BYTES == 64 || ROW_BYTES == 128, "wgmma's K-major swizzles used here");
    return (uint64_t)((addr & 0x3FFFF) >> 4) | (uint64_t)1 << 16 | (uint64_t)(8 * ROW_BYTES >> 4) << 32 |
           (uint64_t)(ROW_BYTES == 64 ? 2 : 1) << 62;
}
__device__ __forceinline__ void wgmma_fence()
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit()
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
/* until at most N committed groups are still running */
template <int N> __device__ __forceinline__ void wgmma_wait()
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
/* cp.async's writes become visible to the async proxy wgmma reads through */
__device__ __forceinline__ void fence_proxy_async()
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
/* wgmma m64nNk32 s8 with the accumulators d[N / 2] (this thread's part,
 * laid out as mma.sync's C fragments of 8 columns each) += A x B. */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WGMMA_S8(n, d_regs, descs, ...)                                                                               \
    asm volatile("wgmma.mma_async.sync.aligned.m64n" n "k32.s32.s8.s8 {" d_regs "}, " descs ", 1;\n"               \
                 : __VA_ARGS__                                                                                      \
                 : "l"(da), "l"(db))
#else
#define WGMMA_S8(n, d_regs, descs, ...) __trap()
#endif
#define D8(i) "+r"(d[i]), "+r"(d[i + 1]), "+r"(d[i + 2]), "+r"(d[i + 3]), "+r"(d[i + 4]), "+r"(d[i + 5]), "+r"(d[i + 6]), "+r"(d[i + 7])
__device__ __forceinline__ void wgmma_n64(int32_t *d, uint64_t da, uint64_t db)
{
    WGMMA_S8("64",
             "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
             "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31",
             "%32, %33",
             D8(0), D8(8), D8(16), D8(24));
}
__device__ __forceinline__ void wgmma_n128(int32_t *d, uint64_t da, uint64_t db)
{
    WGMMA_S8("128",
             "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
             "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
             "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
             "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63",
             "%64, %65",
             D8(0), D8(8), D8(16), D8(24), D8(32), D8(40), D8(48), D8(56));
}
__device__ __forceinline__ void wgmma_n256(int32_t *d, uint64_t da, uint64_t db)
{
    WGMMA_S8("256",
             "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
             "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
             "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
             "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
             "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
             "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
             "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
             "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127",
             "%128, %129",
             D8(0), D8(8), D8(16), D8(24), D8(32), D8(40), D8(48), D8(56),
             D8(64), D8(72), D8(80), D8(88), D8(96), D8(104), D8(112), D8(120));
}
#undef D8
#undef WGMMA_S8

/* Byte offset of 16-byte chunk c (0..3) of tile row r. Rows are 64 bytes,
 * so rows 2j and 2j+1 share a 128-byte bank line; XOR-ing the chunk with
 * (r >> 1) & 3 puts the eight rows one ldmatrix phase reads into eight
 * different 16-byte bank groups. */
__device__ __forceinline__ int swz(int r, int c) { return r * BK + ((c ^ ((r >> 1) & 3)) << 4); }

/* The epilogue of each warp goes through its own slice of shared memory so
 * that global stores and residual loads are whole 16-byte (M % 16 == 0) or
 * 8-byte vectors along rows -- full 32-byte sectors for the warp's 32 or 64
 * channels. Storing channel pairs straight from the accumulator layout wrote
 * 2-byte pieces and ran at a fifth of the write bandwidth; staging the whole
 * block's tile cost two block barriers a tile (measured on ResNet-50's
 * 1x1 convs). Ew is the warp's tile [WTM][WTN + 16]: the padding puts the
 * eight rows of one fragment store in different banks and keeps rows
 * 16-byte aligned. */
template <int WTM, int WTN> struct warp_tile {
    static constexpr int EW = WTN + 16;
    /* The warp tile's vectors of VW bytes, lanes over consecutive ones:
     * (offset in Ew, offset in y, inside the output?, bytes). */
    template <int VW, typename F>
    __device__ __forceinline__ static void each_vector_of(const igemm_params &p, int pos0, int ch0, int lane, F f)
    {
        constexpr int per_row = WTN / VW; /* a power of two: shifts, not divisions */
#pragma unroll
        for (int v = lane; v < WTM * per_row; v += 32) {
            const int row = v / per_row, col = (v % per_row) * VW, pos = pos0 + row, ch = ch0 + col;
            f(row * EW + col, (size_t)pos * p.M + ch, pos < p.P && ch < p.M, VW);
        }
    }
    template <typename F>
    __device__ __forceinline__ static void each_vector(const igemm_params &p, int pos0, int ch0, int lane, F f)
    {
        if (p.M % 16 == 0) each_vector_of<16>(p, pos0, ch0, lane, f);
        else each_vector_of<8>(p, pos0, ch0, lane, f);
    }
    /* Starts copying the residual of the warp tile into Ew (cp.async, zeros
     * outside the output); the caller commits, waits and __syncwarp()s. */
    __device__ __forceinline__ static void load_residual(const igemm_params &p, int8_t *Ew, int pos0, int ch0, int lane)
    {
        each_vector(p, pos0, ch0, lane, [&](int at, size_t g, bool ok, int vw) {
            const uint32_t dst = smem_addr(Ew + at);
            if (vw == 16) cp_async<16>(dst, ok ? p.res + g : p.res, ok);
            else cp_async<8>(dst, ok ? p.res + g : p.res, ok);
        });
    }
    /* Ew -> y (rows past P and channels past M stay unwritten). */
    __device__ __forceinline__ static void store(const igemm_params &p, const int8_t *Ew, int pos0, int ch0, int lane)
    {
        each_vector(p, pos0, ch0, lane, [&](int at, size_t g, bool ok, int vw) {
            if (!ok) return;
            if (vw == 16) *(int4 *)(p.y + g) = *(const int4 *)(Ew + at);
            else *(int2 *)(p.y + g) = *(const int2 *)(Ew + at);
        });
    }
};

/* The epilogue avoids the slow float <-> integer conversions with
 * lib/quant_math.h's exact 1.5*2^23 tricks: when SMALL, the accumulators
 * start from QFI_MAGIC_BITS plus the bias, so after the MMAs their bits are
 * already the float 1.5*2^23 + acc + bias; an int8 residual byte r, xor 0x80,
 * goes into the low byte of QFI_MAGIC_BITS; and the clamped result plus
 * 1.5*2^23 holds rint(v) in its low byte (lib/quant_math.h clamps to integer
 * bounds before rounding too). */

/* The accumulators' starting values for the tile whose warp tile starts at
 * channel ch0: the bias (zero past M), on top of QFI_MAGIC_BITS when SMALL;
 * zero for a split-K unit (the epilogue kernel adds the bias). */
template <int MT, int NT>
__device__ __forceinline__ void init_acc(const igemm_params &p, int32_t (&acc)[MT][NT][4], int ch0, int lane)
{
    const int32_t base = p.small_acc ? QFI_MAGIC_BITS : 0;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const int ch = ch0 + nt * 8 + (lane & 3) * 2;
        const bool ok = p.rq.bias && ch < p.M && p.k_splits == 1;
        const int32_t b0 = base + (ok ? p.rq.bias[ch] : 0), b1 = base + (ok ? p.rq.bias[ch + 1] : 0);
#pragma unroll
        for (int mt = 0; mt < MT; mt++) acc[mt][nt][0] = acc[mt][nt][2] = b0, acc[mt][nt][1] = acc[mt][nt][3] = b1;
    }
}

/* The smooth activation an epilogue instance computes (the kernel picks
 * one per tile from p.rq.act, so that the unrolled loop has no branch on it) */
enum { ACT_NONE, ACT_SIGMOID_SILU, ACT_HARD_SWISH, ACT_GELU };

/* Requantizes a warp's accumulators (acc + bias, from init_acc; its residual
 * already in Ew) into Ew: c0,c1 are (row g, channels 2t, 2t+1), c2,c3 the
 * same channels of row g+8 of each 16x8 piece; the warp tile's first
 * channel is ch0. lib/quant_math.h's operations, in its order; SMALL: every
 * |acc + bias| < 2^22 (the host proves it from K and the bias); RES: p.res;
 * ACT: the kind of p.rq's smooth activation. */
template <int MT, int NT, int EW, bool SMALL, bool RES, int ACT>
__device__ __forceinline__ void requantize_warp(const igemm_params &p, const int32_t (&acc)[MT][NT][4], int8_t *Ew, int ch0,
                                                int lane)
{
    const int g = lane >> 2, t4 = lane & 3;
    /* ACT_SIGMOID_SILU: each element's fast level (lib/quant_math.h), and
     * bit (nt MT + mt) 2 + h for a channel pair whose level the exact form
     * must decide (rare): that pair keeps its residual in Ew for the second
     * pass below, and the unrolled loop has no branch an element, so that
     * the elements' chains of dependent operations overlap */
    static_assert(ACT != ACT_SIGMOID_SILU || MT * NT * 2 <= 64, "one bit a channel pair");
    const bool silu = p.rq.act == QF_ACT_SILU;
    uint64_t unsure = 0;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        /* channels past M are never stored: their requantization (a smooth
         * activation's e^x each) is skipped, 8 at a time, by the whole warp */
        if (ch0 + nt * 8 >= p.M) break;
        const int cl = nt * 8 + t4 * 2, ch = ch0 + cl;
        const bool ch_ok = ch < p.M;
        const float m0 = ch_ok ? p.rq.m[ch] : 0.0f, m1 = ch_ok ? p.rq.m[ch + 1] : 0.0f;
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                uint16_t *e = (uint16_t *)(Ew + (mt * 16 + g + h * 8) * EW + cl);
                const int a0 = acc[mt][nt][2 * h], a1 = acc[mt][nt][2 * h + 1];
                const uint32_t r = RES ? (uint32_t)*e ^ 0x8080u : 0u;
                const float f0 = SMALL ? qfi_magic_to_f32(a0) : qfi_i2f(a0), f1 = SMALL ? qfi_magic_to_f32(a1) : qfi_i2f(a1);
                float l0 = qfi_requant_linear(&p.rq, f0, m0, RES, qfi_magic_byte_to_f32_zp(r, 0, p.rq.z_r)),
                      l1 = qfi_requant_linear(&p.rq, f1, m1, RES, qfi_magic_byte_to_f32_zp(r, 1, p.rq.z_r));
                float v0, v1;
                bool sure = true;
                if constexpr (ACT == ACT_SIGMOID_SILU) {
                    sure = qfi_sigmoid_level_fast(silu, l0, p.rq.act_s, p.rq.lo, p.rq.hi, &v0) &
                           qfi_sigmoid_level_fast(silu, l1, p.rq.act_s, p.rq.lo, p.rq.hi, &v1);
                    unsure |= (uint64_t)!sure << ((nt * MT + mt) * 2 + h);
                } else {
                    if constexpr (ACT == ACT_HARD_SWISH) {
                        l0 = qfi_act_value_kinds(QF_ACT_HARD_SWISH, l0, p.rq.act_s, false);
                        l1 = qfi_act_value_kinds(QF_ACT_HARD_SWISH, l1, p.rq.act_s, false);
                    }
                    v0 = fminf(fmaxf(l0, p.rq.lo), p.rq.hi), v1 = fminf(fmaxf(l1, p.rq.lo), p.rq.hi);
                }
                const uint16_t levels =
                    (uint16_t)__byte_perm(qfi_magic_round_zp(v0, p.rq.z_out), qfi_magic_round_zp(v1, p.rq.z_out), 0x0040);
                if (sure) *e = levels;
            }
    }
    if constexpr (ACT == ACT_SIGMOID_SILU) {
        if (!__any_sync(0xffffffffu, unsure != 0)) return;
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            if (ch0 + nt * 8 >= p.M) break;
            const int cl = nt * 8 + t4 * 2, ch = ch0 + cl;
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    if (!(unsure >> ((nt * MT + mt) * 2 + h) & 1)) continue;
                    uint16_t *e = (uint16_t *)(Ew + (mt * 16 + g + h * 8) * EW + cl);
                    const uint32_t r = RES ? (uint32_t)*e ^ 0x8080u : 0u;
                    const int a0 = acc[mt][nt][2 * h], a1 = acc[mt][nt][2 * h + 1];
                    const float f0 = SMALL ? qfi_magic_to_f32(a0) : qfi_i2f(a0), f1 = SMALL ? qfi_magic_to_f32(a1) : qfi_i2f(a1);
                    const float r0 = qfi_magic_byte_to_f32_zp(r, 0, p.rq.z_r);
                    const float r1 = qfi_magic_byte_to_f32_zp(r, 1, p.rq.z_r);
                    const float v0 = qfi_requant_smooth_i8_value_kinds(&p.rq, f0, p.rq.m[ch], RES, r0, false);
                    const float v1 = qfi_requant_smooth_i8_value_kinds(&p.rq, f1, p.rq.m[ch + 1], RES, r1, false);
                    *e = (uint16_t)__byte_perm(qfi_magic_round_zp(v0, p.rq.z_out), qfi_magic_round_zp(v1, p.rq.z_out), 0x0040);
                }
        }
    }
}

/* requantize_warp's instance for an int8 tile, picked once a tile; SMOOTH:
 * the kernel was built with the smooth activations' code, and p.rq.act is
 * SiLU, Sigmoid or HardSwish. The SMALL form only for SiLU and Sigmoid
 * without a residual (the host's small_acc says so; HardSwish's exact form
 * needs no fast level): fewer instances of these large loops. */
template <int MT, int NT, int EW, bool SMOOTH>
__device__ __forceinline__ void requantize_tile(const igemm_params &p, const int32_t (&acc)[MT][NT][4], int8_t *Ew, int ch0,
                                                int lane, bool has_res)
{
    if constexpr (SMOOTH) {
        if (p.rq.act == QF_ACT_HARD_SWISH) {
            if (has_res) requantize_warp<MT, NT, EW, false, true, ACT_HARD_SWISH>(p, acc, Ew, ch0, lane);
            else requantize_warp<MT, NT, EW, false, false, ACT_HARD_SWISH>(p, acc, Ew, ch0, lane);
        } else if (has_res) {
            requantize_warp<MT, NT, EW, false, true, ACT_SIGMOID_SILU>(p, acc, Ew, ch0, lane);
        } else if (p.small_acc) {
            requantize_warp<MT, NT, EW, true, false, ACT_SIGMOID_SILU>(p, acc, Ew, ch0, lane);
        } else {
            requantize_warp<MT, NT, EW, false, false, ACT_SIGMOID_SILU>(p, acc, Ew, ch0, lane);
        }
    } else if (p.small_acc) {
        if (has_res) requantize_warp<MT, NT, EW, true, true, ACT_NONE>(p, acc, Ew, ch0, lane);
        else requantize_warp<MT, NT, EW, true, false, ACT_NONE>(p, acc, Ew, ch0, lane);
    } else {
        if (has_res) requantize_warp<MT, NT, EW, false, true, ACT_NONE>(p, acc, Ew, ch0, lane);
        else requantize_warp<MT, NT, EW, false, false, ACT_NONE>(p, acc, Ew, ch0, lane);
    }
}

/* requantize_warp for a half output (an INT8 layer whose readers are float
 * ops: quant/assign.c's float_out; EfficientNet-V2's and YOLOv8's convs
 * whose SiLU comes before the residual Add took the im2col + cuBLASLt path
 * without it, in tens of chunks): each channel pair's two halves stored
 * straight to y as one 4-byte word (no staging in Ew), rows past P and
 * channels past M left unwritten; a residual read from Ew as requantize_warp
 * reads it. The CPU engine's values: lib/quant_math.h's half epilogue
 * (qfi_requant_store's), the smooth activations through
 * qfi_requant_smooth_f16_bits. The host keeps p.small_acc off. */
template <int MT, int NT, int EW, bool ACT>
__device__ __forceinline__ void requantize_warp_half(const igemm_params &p, const int32_t (&acc)[MT][NT][4], const int8_t *Ew,
                                                     int pos0, int ch0, int lane, bool res)
{
    const int g = lane >> 2, t4 = lane & 3;
    uint16_t *const y = (uint16_t *)p.y;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        if (ch0 + nt * 8 >= p.M) break;
        const int cl = nt * 8 + t4 * 2, ch = ch0 + cl;
        if (ch >= p.M) continue;
        const float m0 = p.rq.m[ch], m1 = p.rq.m[ch + 1];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int row = mt * 16 + g + h * 8, pos = pos0 + row;
                if (pos >= p.P) continue;
                const uint32_t r = res ? (uint32_t) * (const uint16_t *)(Ew + row * EW + cl) ^ 0x8080u : 0u;
                const float f0 = qfi_i2f(acc[mt][nt][2 * h]), f1 = qfi_i2f(acc[mt][nt][2 * h + 1]);
                const float r0 = qfi_magic_byte_to_f32_zp(r, 0, p.rq.z_r), r1 = qfi_magic_byte_to_f32_zp(r, 1, p.rq.z_r);
                uint32_t h0, h1;
                if constexpr (ACT) {
                    h0 = qfi_requant_smooth_f16_bits(&p.rq, f0, m0, res, r0);
                    h1 = qfi_requant_smooth_f16_bits(&p.rq, f1, m1, res, r1);
                } else {
                    h0 = qfi_f16_bits(qfi_requant_value_at(&p.rq, f0, m0, res, r0, false));
                    h1 = qfi_f16_bits(qfi_requant_value_at(&p.rq, f1, m1, res, r1, false));
                }
                *(uint32_t *)(y + (size_t)pos * p.M + ch) = h0 | h1 << 16;
            }
    }
}

/* A split-K unit's sums into acc_out, in requantize_warp's element order. */
template <int MT, int NT>
__device__ __forceinline__ void add_partial_warp(const igemm_params &p, const int32_t (&acc)[MT][NT][4], int pos0, int ch0,
                                                 int lane)
{
    const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const int ch = ch0 + nt * 8 + t4 * 2; /* M % 8 == 0: a pair is inside M or past it */
        if (ch >= p.M) continue;
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int pos = pos0 + mt * 16 + g + h * 8;
                if (pos >= p.P) continue;
                int *dst = (int *)p.acc_out + (size_t)pos * p.M + ch;
                atomicAdd(dst, acc[mt][nt][2 * h]);
                atomicAdd(dst + 1, acc[mt][nt][2 * h + 1]);
            }
    }
}

/* wgmma: the output position (within the tile) that shared-memory row r
 * holds. Warpgroup wg's m64 block mw gives its warp w4 rows 16 w4 .. + 15
 * of the block; ordering the gathered rows so that those are positions
 * 16 MW (4 wg + w4) + 16 mw + 0..15 gives each warp MW x 16 consecutive
 * positions, the warp tile the epilogue stores. Identity when MW = 1. */
template <int MW> __device__ __forceinline__ int wgmma_row(int r)
{
    const int wg = r / (64 * MW), mw = r / 64 % MW, w4 = r / 16 % 4;
    return (4 * wg + w4) * 16 * MW + 16 * mw + r % 16;
}

/* A block computes BM output positions x BN channels with 8 warps,
 * WARPS_M x (8 / WARPS_M) (128x256: 64x64 warp tiles, one block an SM);
 * VEC bytes per gathered copy (16 when Cp % 16 == 0, else 8 or 4: a copy
 * never crosses a tap). 4 stages of cp.async. WG: the MMAs by wgmma, each
 * warpgroup taking BM / 2 rows as MW = BM / 128 blocks of 64 (WARPS_M = 8:
 * a warp's accumulators are MW x 16 rows x BN, laid out as mma.sync's). */
template <int BM, int BN, int WARPS_M, int VEC, bool WG, bool ACT>
__global__ void __launch_bounds__(THREADS, BM * BN > 128 * 128 ? 1 : 2) igemm_kernel(igemm_params p)
{
    constexpr int STAGES = 4;
    constexpr int WARPS_N = 8 / WARPS_M, WTM = BM / WARPS_M, WTN = BN / WARPS_N;
    constexpr int MT = WTM / 16, NT = WTN / 8;
    constexpr int SUB = 16 / VEC;                         /* copies per 16-byte chunk */
    constexpr int A_CHUNKS = BM * 4 / THREADS;
    constexpr int B_CHUNKS = (BN * 4 + THREADS - 1) / THREADS;
    typedef warp_tile<WTM, WTN> wt;
    static_assert(NT % 2 == 0 && MT >= 1 && A_CHUNKS >= 1, "warp tile");
    static_assert(!WG || ((BM == 128 || BM == 256) && WARPS_M == 8 && (BN == 64 || BN == 128 || BN == 256)), "wgmma tile");
    constexpr int MW = BM / 128;                          /* wgmma: 64-row blocks a warpgroup */

    extern __shared__ __align__(1024) int8_t smem[];
    int8_t *As = smem;                                    /* [STAGES][BM * BK] */
    int8_t *Bs = smem + STAGES * BM * BK;                 /* [STAGES][BN * BK] */

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int warp_m = warp % WARPS_M, warp_n = warp / WARPS_M;
    if (WG && (smem_addr(smem) & 511)) __trap(); /* wgmma's swizzle follows address bits: stages must sit on its period */
    int8_t *const Ew = Bs + STAGES * BN * BK + warp * WTM * wt::EW; /* this warp's epilogue tile */
    const int KT = p.kt_split; /* stages per unit: a tile, or one split-K part of it */
    /* Persistent blocks: block b takes tiles b, b + grid, ... (channel tile
     * fastest, so the blocks running at once share their input rows in L2),
     * and one cp.async pipeline runs through all of them: the next tile's
     * first stages load while this tile's last stages and epilogue run.
     * Counters advance by increments: a division per stage costs as much as
     * the stage's MMAs at these tile sizes. */
    const int tiles = p.n_tiles * p.p_tiles * p.k_splits; /* units */
    const int my_tiles = blockIdx.x < tiles ? (tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
    const int iters = my_tiles * KT;

    /* The A rows this thread fills (one chunk column for all), for the tile
     * being loaded: where each output position's window starts in the input
     * (an offset that may be negative at the edges: only in-bounds taps are
     * read) and which of its taps fall inside the input, one bit a tap. */
    const int a_chunk = tid & 3;
    int a_base[A_CHUNKS];
    uint32_t a_in[A_CHUNKS];
    int l_kt = 0, l_tile = blockIdx.x, l_stage = 0, l_k0 = 0; /* l_k0: the unit's first stage */
    const int8_t *b_src = p.w;            /* this thread's first B chunk of the stage being loaded */
    uint32_t b_ok = 0;                    /* bit i: B row (tid >> 2) + 64 i is a channel of the tile */
    const int HoWo = p.Ho * p.Wo;
    /* this thread's 16-byte chunks: A rows (tid >> 2) + 64 i, B row (tid >> 2) + 64 i, chunk tid & 3, at
     * fixed offsets from a stage's base (the swizzle repeats every 8 rows) */
    const uint32_t a_dst = swz(tid >> 2, a_chunk), b_dst = swz(tid >> 2, tid & 3);
    /* where a tap outside the input reads from: nothing (zeros), or the zero point's bytes */
    const bool pad_read = p.zpad != nullptr;
    const int8_t *const pad_src = pad_read ? p.zpad + ((blockIdx.x * THREADS + tid) % (IGEMM_ZPAD_BYTES / 16)) * 16 : p.x;
    /* undilated windows: a window's in-bounds taps in closed form, the
     * columns [b_lo, b_hi) as a run of bits repeated over the rows [a_lo,
     * a_hi) by one product with row_rep (bit a kw for every row a), in place
     * of two loops of runtime length a chunk and tile. EfficientNet-V2-S's
     * 3x3 SiLU convs 3-5 % faster, INT8 b256 +1.0 % (session 46, H100) */
    const bool undilated = p.dh == 1 && p.dw == 1;
    uint32_t row_rep = 0;
    for (int a = 0; a < p.kh; a++) row_rep |= 1u << (a * p.kw);

    auto load_next = [&]() {
        if (l_kt == 0) {
            const int tile = p.k_splits == 1 ? l_tile : l_tile / p.k_splits;
            l_k0 = (l_tile - tile * p.k_splits) * KT;
            const int p0 = (tile / p.n_tiles) * BM, n0 = (tile % p.n_tiles) * BN;
#pragma unroll
            for (int i = 0; i < A_CHUNKS; i++) {
                const int pos = p0 + (WG ? wgmma_row<MW>((tid >> 2) + i * (THREADS / 4)) : (tid >> 2) + i * (THREADS / 4));
                a_base[i] = 0, a_in[i] = 0;
                if (pos < p.P) {
                    const int n = cu_div_by(pos, p.div_HoWo), rem = pos - n * HoWo, oh = cu_div_by(rem, p.div_Wo),
                              ow = rem - oh * p.Wo;
                    const int ih0 = oh * p.sh - p.ph, iw0 = ow * p.sw - p.pw;
                    a_base[i] = ((n * p.H + ih0) * p.W + iw0) * p.Cp;
                    if (undilated) {
                        const int b_lo = max(0, -iw0), b_hi = min(p.kw, p.W - iw0);
                        const int a_lo = max(0, -ih0), a_hi = min(p.kh, p.H - ih0);
                        if (b_lo < b_hi && a_lo < a_hi) {
                            const uint32_t cols = (uint32_t)((1ull << b_hi) - (1ull << b_lo));
                            const uint32_t rows = (uint32_t)((1ull << (a_hi * p.kw)) - (1ull << (a_lo * p.kw)));
                            a_in[i] = cols * (row_rep & rows);
                        }
                    } else {
                        uint32_t cols = 0;
                        for (int b = 0; b < p.kw; b++) cols |= (uint32_t)((unsigned)(iw0 + b * p.dw) < (unsigned)p.W) << b;
                        for (int a = 0; a < p.kh; a++)
                            if ((unsigned)(ih0 + a * p.dh) < (unsigned)p.H) a_in[i] |= cols << (a * p.kw);
                    }
                }
            }
            b_ok = 0;
#pragma unroll
            for (int i = 0; i < B_CHUNKS; i++) {
                const int r = (tid >> 2) + i * (THREADS / 4);
                b_ok |= (uint32_t)(r < BN && n0 + r < p.M) << i;
            }
            b_src = p.w + (size_t)(n0 + (tid >> 2)) * p.K + (tid & 3) * 16 + l_k0 * BK;
        }
        const uint32_t as = smem_addr(As + l_stage * BM * BK) + a_dst, bs = smem_addr(Bs + l_stage * BN * BK) + b_dst;
#pragma unroll
        for (int sub = 0; sub < SUB; sub++) {
            /* this k's offset from the window's corner and its tap (a VEC-byte run stays inside one tap) */
            const int2 e = __ldg(p.taps + ((l_k0 + l_kt) * BK + a_chunk * 16 + sub * VEC) / VEC);
            const uint32_t bit = 1u << e.y;
#pragma unroll
            for (int i = 0; i < A_CHUNKS; i++) {
                const bool ok = (a_in[i] & bit) != 0;
                cp_async<VEC>(as + i * (THREADS / 4) * BK + sub * VEC, ok ? p.x + a_base[i] + e.x : pad_src, ok || pad_read);
            }
        }
        /* B: [BN][BK] of the weights, 16 bytes a thread (a second row set when BN > 64) */
        const bool k_ok = (l_k0 + l_kt) * BK + (tid & 3) * 16 < p.K;
#pragma unroll
        for (int i = 0; i < B_CHUNKS; i++) {
            if ((tid >> 2) + i * (THREADS / 4) < BN) {
                const bool ok = k_ok && (b_ok >> i & 1);
                cp_async<16>(bs + i * (THREADS / 4) * BK, ok ? b_src + (size_t)i * (THREADS / 4) * p.K : p.w, ok);
            }
        }
        b_src += BK;
        if (++l_kt == KT) l_kt = 0, l_tile += gridDim.x;
        if (++l_stage == STAGES) l_stage = 0;
    };

    /* where unit t's tile part of this warp starts */
    auto tile_of = [&](int t) { return p.k_splits == 1 ? t : t / p.k_splits; };
    auto tile_pos0 = [&](int t) { return (tile_of(t) / p.n_tiles) * BM + warp_m * WTM; };
    auto tile_ch0 = [&](int t) { return (tile_of(t) % p.n_tiles) * BN + warp_n * WTN; };

    int32_t acc[MT][NT][4];
    init_acc(p, acc, tile_ch0(blockIdx.x), lane);
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < iters) load_next();
        cp_async_commit();
    }
    /* A tile's residual is loaded into the warp's Ew as soon as the previous
     * tile has left it, in a cp.async group of its own committed after that
     * iteration's prefetch: a whole tile ahead of its use, instead of one
     * stage's MMAs ahead. r_ends bit i: such a group was committed at the end
     * of the iteration i + 1 back (the first tile's: at the start), so the
     * stage waits below know how many groups are newer than the one they need. */
    const bool has_res = p.res != nullptr;
    unsigned r_ends = 0;
    if (has_res) {
        if (my_tiles > 0) wt::load_residual(p, Ew, tile_pos0(blockIdx.x), tile_ch0(blockIdx.x), lane);
        cp_async_commit();
        r_ends = 1;
    }
    /* Each lane's ldmatrix rows at k step kk, as offsets from a 16-row block
     * (whose swizzle phase they share). A: lanes 0-15 rows 0-15, first 16
     * bytes, lanes 16-31 the next 16. B: matrices (n 0-7, k lo), (n 0-7, k
     * hi), (n 8-15, k lo), (n 8-15, k hi). */
    uint32_t a_lane[2], b_lane[2];
#pragma unroll
    for (int kk = 0; kk < 2; kk++) {
        a_lane[kk] = swz(lane & 15, kk * 2 + (lane >> 4));
        b_lane[kk] = swz((lane & 7) + ((lane >> 4) << 3), kk * 2 + ((lane >> 3) & 1));
    }
    int c_kt = 0, c_tile = blockIdx.x, c_stage = 0;
    for (int it = 0; it < iters; it++) {
        /* stage `it` was committed STAGES - 1 iterations back; newer than it:
         * STAGES - 2 stages and the residual groups of those iterations */
        switch (__popc(r_ends & 7)) {
        case 0: cp_async_wait<STAGES - 2>(); break;
        case 1: cp_async_wait<STAGES - 1>(); break;
        case 2: cp_async_wait<STAGES>(); break;
        default: cp_async_wait<STAGES + 1>(); break;
        }
        if constexpr (WG) fence_proxy_async();
        __syncthreads(); /* stage `it` landed for everyone; the stage computed last is free to refill */
        const bool last = c_kt == KT - 1;
        if (it + STAGES - 1 < iters) load_next();
        cp_async_commit();

        const uint32_t as = smem_addr(As + c_stage * BM * BK), bs = smem_addr(Bs + c_stage * BN * BK);
        if (++c_stage == STAGES) c_stage = 0;
        if constexpr (WG) {
            /* this warpgroup's MW blocks of 64 rows; two k32 steps 32 bytes apart inside the swizzled rows */
            wgmma_fence();
#pragma unroll
            for (int mw = 0; mw < MW; mw++) {
                const uint32_t a_rows = as + ((warp >> 2) * MW + mw) * 64 * BK;
#pragma unroll
                for (int kk = 0; kk < 2; kk++) {
                    const uint64_t da = wgmma_desc<64>(a_rows + kk * 32), db = wgmma_desc<64>(bs + kk * 32);
                    if constexpr (BN == 256) wgmma_n256(&acc[mw][0][0], da, db);
                    else if constexpr (BN == 128) wgmma_n128(&acc[mw][0][0], da, db);
                    else wgmma_n64(&acc[mw][0][0], da, db);
                }
            }
            wgmma_commit();
            wgmma_wait<0>(); /* the stage is refilled two iterations on */
        } else {
#pragma unroll
        for (int kk = 0; kk < 2; kk++) { /* two k32 steps per 64-byte stage */
            uint32_t af[MT][4], bf[NT][2];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) ldmatrix_x4(as + (warp_m * WTM + mt * 16) * BK + a_lane[kk], af[mt]);
#pragma unroll
            for (int np = 0; np < NT / 2; np++) {
                uint32_t t[4];
                ldmatrix_x4(bs + (warp_n * WTN + np * 16) * BK + b_lane[kk], t);
                bf[2 * np][0] = t[0], bf[2 * np][1] = t[1];
                bf[2 * np + 1][0] = t[2], bf[2 * np + 1][1] = t[3];
            }
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int nt = 0; nt < NT; nt++) mma_s8(acc[mt][nt], af[mt], bf[nt]);
        }
        }
        r_ends <<= 1;
        if (!last) {
            c_kt++;
            continue;
        }
        /* warp-local: the other warps go on with the next tile meanwhile */
        const int pos0 = tile_pos0(c_tile), ch0 = tile_ch0(c_tile);
        if (has_res) {
            /* this tile's residual group has KT prefetch groups after it; past
             * three it is older than this stage's, waited for above */
            switch (KT) {
            case 1: cp_async_wait<1>(); break;
            case 2: cp_async_wait<2>(); break;
            case 3: cp_async_wait<3>(); break;
            default: break;
            }
            __syncwarp(); /* every lane's residual vectors landed */
        }
        const bool half_out = p.rq.out == QF_F16;
        if (p.k_splits > 1) { /* no residual (the epilogue kernel reads it), no small_acc */
            add_partial_warp<MT, NT>(p, acc, pos0, ch0, lane);
        } else if (half_out) {
            requantize_warp_half<MT, NT, wt::EW, ACT>(p, acc, Ew, pos0, ch0, lane, has_res);
        } else {
            requantize_tile<MT, NT, wt::EW, ACT>(p, acc, Ew, ch0, lane, has_res);
        }
        __syncwarp();
        if (p.k_splits == 1 && !half_out) wt::store(p, Ew, pos0, ch0, lane);
        __syncwarp(); /* Ew is free: the next tile's residual may land in it */
        c_kt = 0, c_tile += gridDim.x;
        init_acc(p, acc, tile_ch0(c_tile), lane);
        if (has_res) {
            if (c_tile < tiles) wt::load_residual(p, Ew, tile_pos0(c_tile), tile_ch0(c_tile), lane);
            cp_async_commit();
            r_ends |= 1;
        }
    }
    cp_async_wait<0>();
}

/* ---- the plain GEMM by TMA and warp-specialised wgmma ------------------------------------- */

/* A 1x1 stride-1 unpadded layer over 16-byte rows (a Linear layer: ViT's,
 * ConvNeXt's) needs no gather, so its tiles can come by the Tensor Memory
 * Accelerator: one thread issues each stage's two bulk copies, the hardware
 * swizzles them into the 128-byte layout wgmma reads, and an mbarrier says
 * when they landed. Warp 8 does that (the producer), up to STAGES stages
 * ahead; warps 0-7, two warpgroups of 64 rows each, multiply with one
 * stage's wgmma group still in flight, free each stage through a second
 * mbarrier, and requantize their tile with requantize_warp (GELU included:
 * the cp.async kernel above leaves it out) while the producer already
 * loads the next tile's stages. 128 bytes of K a stage, so four k32 MMAs a
 * stage per warpgroup against igemm_kernel's two; blocks persistent. The
 * cp.async wgmma kernel reached about 470 TOPS on ViT-B/16's Linear layers,
 * cuBLASLt's int32 GEMM about 1,000 before its requantize pass
 * (bench/cuda_notes.md, session 38). Measured (session 39, H100): ViT-B/16's
 * in-projection 0.310 ms against cuBLASLt + requantize 0.398; the GELU
 * instances, erff unrolled over every accumulator, time slower than that
 * path on the fc1 layers, so the tuner leaves those there.
 *
 * BM = 64 is the ping-pong form: a tile of 64 rows a warpgroup, the two
 * warpgroups taking the block's tiles in turn, so that one requantizes
 * while the other multiplies (the cooperative form's Tensor Cores wait for
 * both warpgroups' epilogue, which on a GELU layer takes longer than the
 * tile's products). The producer loads the block's tiles in order; each
 * warpgroup walks the same ring of stages, skipping the other's. */
constexpr int TMA_BM = 128, TMA_PP_BM = 64, TMA_BK = 128, TMA_THREADS = 288;

struct tma_params {
    CUtensorMap a; /* x as [P][K] bytes, boxes of TMA_BM rows x TMA_BK */
    CUtensorMap b; /* w as [M][K] bytes, boxes of BN rows x TMA_BK */
    igemm_params p;
};

/* mbarrier and bulk-tensor PTX exists from sm_90 on: the helpers and the
 * kernel's body are compiled for sm_90a only (not for the portable PTX target) */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
/* until the phase of the given parity has completed */
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity)
{
    asm volatile("{\n"
                 ".reg .pred done;\n"
                 "WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WAIT;\n"
                 "}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}
/* box (c0 = byte along K, c1 = row) of the tensor map into shared memory at dst, counted on bar */
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap *map, int c0, int c1, uint32_t bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(dst), "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar)
                 : "memory");
}
#endif

/* A GELU tile's linear values, a warp's 16 rows of BN floats (+8: the eight
 * rows one accumulator store writes fall in two bank sets, not one) */
template <int BN> __host__ __device__ constexpr int tma_lw() { return BN + 8; }
/* PER_SM 2: two blocks an SM, two stages each, for layers of one or two
 * stages of K (1x1 expand convs, 64 to 256 channels in), whose tiles are
 * bound by their epilogue: twice the warps to hide its latency. */
template <int BM, int BN, int ACT, int PER_SM> __host__ __device__ constexpr int tma_stages()
{
    return PER_SM == 2 ? 2
         : BM == TMA_PP_BM ? (ACT == ACT_GELU ? 5 : BN == 256 ? 4 : 6)
         : ACT == ACT_GELU ? 4 : BN == 256 ? 3 : 5;
}
/* stages, the eight warps' epilogue tiles (and a GELU's linear values),
 * the barriers, and the slack that aligns the stages on 1024 bytes */
template <int BM, int BN, int ACT, int PER_SM> constexpr size_t tma_smem()
{
    return (size_t)tma_stages<BM, BN, ACT, PER_SM>() * (BM + BN) * TMA_BK + (size_t)8 * 16 * (BN + 16) +
           (ACT == ACT_GELU ? (size_t)8 * 16 * tma_lw<BN>() * 4 : 0) + (2 * tma_stages<BM, BN, ACT, PER_SM>() + 2) * 8 + 1024;
}

/* requantize_warp's levels for a GELU, in two passes: the linear values
 * (bias, multiplier, residual: short, unrolled over the accumulators) into
 * Lw, then a rolled loop over them for the GELU's fast level, the exact
 * form where it is not sure. Unrolled over all 64 or 128 accumulators, a
 * GELU's erff made the epilogue so long that it ran 3-5x the time of
 * cuBLASLt + the requantize kernel (ViT-B/16 fc1 2.67 ms against 0.81 on
 * an H100). Same operations, same levels. */
template <int NT, int EW, bool SMALL, bool RES>
__device__ __forceinline__ void requantize_gelu_warp(const igemm_params &p, const int32_t (&acc)[1][NT][4], int8_t *Ew,
                                                     float *Lw, int ch0, int lane)
{
    constexpr int BN = NT * 8, LW = tma_lw<BN>();
    const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const int cl = nt * 8 + t4 * 2, ch = ch0 + cl;
        const bool ch_ok = ch < p.M;
        const float m0 = ch_ok ? p.rq.m[ch] : 0.0f, m1 = ch_ok ? p.rq.m[ch + 1] : 0.0f;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = g + h * 8;
            const uint32_t r = RES ? (uint32_t) * (const uint16_t *)(Ew + row * EW + cl) ^ 0x8080u : 0u;
            const int a0 = acc[0][nt][2 * h], a1 = acc[0][nt][2 * h + 1];
            const float f0 = SMALL ? qfi_magic_to_f32(a0) : qfi_i2f(a0), f1 = SMALL ? qfi_magic_to_f32(a1) : qfi_i2f(a1);
            const float r0 = qfi_magic_byte_to_f32_zp(r, 0, p.rq.z_r), r1 = qfi_magic_byte_to_f32_zp(r, 1, p.rq.z_r);
            *(float2 *)(Lw + row * LW + cl) =
                make_float2(qfi_requant_linear(&p.rq, f0, m0, RES, r0), qfi_requant_linear(&p.rq, f1, m1, RES, r1));
        }
    }
    __syncwarp();
    const bool tanh_form = p.rq.act == QF_ACT_GELU_TANH;
#pragma unroll 1
    for (int i = lane; i < 16 * BN / 2; i += 32) {
        const int row = i / (BN / 2), cl = i % (BN / 2) * 2;
        if (ch0 + cl >= p.M) continue;
        const float2 l = *(const float2 *)(Lw + row * LW + cl);
        float v0, v1;
        if (!qfi_gelu_level_fast(tanh_form, l.x, p.rq.act_s, p.rq.lo, p.rq.hi, &v0))
            v0 = qfi_smooth_level_fast_kinds(p.rq.act, l.x, p.rq.act_s, p.rq.lo, p.rq.hi, true);
        if (!qfi_gelu_level_fast(tanh_form, l.y, p.rq.act_s, p.rq.lo, p.rq.hi, &v1))
            v1 = qfi_smooth_level_fast_kinds(p.rq.act, l.y, p.rq.act_s, p.rq.lo, p.rq.hi, true);
        *(uint16_t *)(Ew + row * EW + cl) =
            (uint16_t)__byte_perm(qfi_magic_round_zp(v0, p.rq.z_out), qfi_magic_round_zp(v1, p.rq.z_out), 0x0040);
    }
}

/* ACT: ACT_NONE, ACT_GELU (the Linear layers' kinds) or ACT_SIGMOID_SILU
 * (SiLU, Sigmoid or HardSwish: requantize_tile's smooth instances, for 1x1
 * expand convs). Timed by the tuner like the rest; on EfficientNet-V2-S's
 * 160 -> 960 SiLU expands they lose (0.35 ms two blocks an SM, 0.51 one,
 * against cuBLASLt + the requantize pass's 0.22 and FP16's 0.09: session
 * 45, H100), as the exact SiLU level, not the GEMM, bounds those layers. */
template <int BM, int BN, int ACT, int PER_SM>
__global__ void __launch_bounds__(TMA_THREADS, PER_SM) tma_gemm_kernel(const __grid_constant__ tma_params tp)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr bool PP = BM == TMA_PP_BM; /* ping-pong: a tile a warpgroup */
    constexpr int STAGES = tma_stages<BM, BN, ACT, PER_SM>(), NT = BN / 8;
    constexpr uint32_t A_BYTES = BM * TMA_BK, B_BYTES = BN * TMA_BK;
    typedef warp_tile<16, BN> wt;
    const igemm_params &p = tp.p;
    extern __shared__ int8_t smem_raw[];
    int8_t *const base = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    const uint32_t As = smem_addr(base), Bs = As + STAGES * A_BYTES;
    int8_t *const Ew0 = base + STAGES * (A_BYTES + B_BYTES);
    float *const Lw0 = (float *)(Ew0 + 8 * 16 * wt::EW); /* GELU only */
    const uint32_t full = smem_addr(Lw0 + (ACT == ACT_GELU ? 8 * 16 * tma_lw<BN>() : 0)), empty = full + STAGES * 8;
    /* ping-pong: turn + 8 w, warpgroup w's leave to start its next tile's products */
    const uint32_t turn = empty + STAGES * 8;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            mbar_init(full + 8 * s, 1); /* the producer's arrival, with the copies' bytes */
            mbar_init(empty + 8 * s, PP ? 4 : 8); /* one arrival a warp of the warpgroup(s) consuming it */
        }
        if (PP) mbar_init(turn, 4), mbar_init(turn + 8, 4); /* one arrival a warp of the other warpgroup */
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    const int tiles = p.n_tiles * p.p_tiles, KT = p.kt_split;
    if (warp == 8) { /* the producer */
        if (lane == 0) {
            int stage = 0;
            uint32_t phase = 0;
            for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
                const int m0 = (tile / p.n_tiles) * BM, n0 = (tile % p.n_tiles) * BN;
                for (int kt = 0; kt < KT; kt++) {
                    mbar_wait(empty + 8 * stage, phase ^ 1); /* a fresh barrier's previous phase counts as done */
                    mbar_arrive_expect_tx(full + 8 * stage, A_BYTES + B_BYTES);
                    tma_load(As + stage * A_BYTES, &tp.a, kt * TMA_BK, m0, full + 8 * stage);
                    tma_load(Bs + stage * B_BYTES, &tp.b, kt * TMA_BK, n0, full + 8 * stage);
                    if (++stage == STAGES) stage = 0, phase ^= 1;
                }
            }
        }
        return;
    }
    const int wg = warp >> 2;
    int8_t *const Ew = Ew0 + warp * 16 * wt::EW;
    const bool has_res = p.res != nullptr;
    int stage = 0;
    uint32_t phase = 0;
    /* ping-pong: past the KT stages of a tile the other warpgroup takes. A
     * warpgroup starts a tile's products only once the other has waited for
     * every stage of the tile before (`turn`): the two then consume the
     * ring in its order, and a stage's barrier is never a whole phase
     * behind the parity its consumer waits for (mbarrier parity tells
     * apart only the current phase and the one before). */
    auto skip_tile = [&] {
        const int t = stage + KT;
        phase ^= (uint32_t)(t / STAGES) & 1u;
        stage = t % STAGES;
    };
    if (PP && wg == 1) skip_tile();
    uint32_t turns = 0; /* the waits on turn + 8 wg so far */
    int32_t acc[1][NT][4];
    for (int tile = blockIdx.x + (PP ? wg : 0) * gridDim.x; tile < tiles; tile += (PP ? 2 : 1) * gridDim.x) {
        if (PP && (wg == 1 || tile != (int)blockIdx.x)) mbar_wait(turn + 8 * wg, turns++ & 1u);
        const int m0 = (tile / p.n_tiles) * BM, n0 = (tile % p.n_tiles) * BN;
        /* this warp's rows: 16 of its warpgroup's 64 (wgmma's accumulator layout) */
        const int pos0 = m0 + (PP ? 0 : wg * 64) + (warp & 3) * 16;
        init_acc(p, acc, n0, lane);
        int prev = -1;
        for (int kt = 0; kt < KT; kt++) {
            mbar_wait(full + 8 * stage, phase);
            wgmma_fence();
            const uint32_t a_rows = As + stage * A_BYTES + (PP ? 0 : wg * 64 * TMA_BK), b_rows = Bs + stage * B_BYTES;
#pragma unroll
            for (int kk = 0; kk < TMA_BK / 32; kk++) {
                const uint64_t da = wgmma_desc<128>(a_rows + kk * 32), db = wgmma_desc<128>(b_rows + kk * 32);
                if constexpr (BN == 256) wgmma_n256(&acc[0][0][0], da, db);
                else wgmma_n128(&acc[0][0][0], da, db);
            }
            wgmma_commit();
            wgmma_wait<1>(); /* the previous stage's group is done: its buffers are free */
            if (prev >= 0 && lane == 0) mbar_arrive(empty + 8 * prev);
            prev = stage;
            if (++stage == STAGES) stage = 0, phase ^= 1;
        }
        if (PP && lane == 0) mbar_arrive(turn + 8 * (wg ^ 1));
        wgmma_wait<0>();
        if (prev >= 0 && lane == 0) mbar_arrive(empty + 8 * prev);
        if (has_res) {
            wt::load_residual(p, Ew, pos0, n0, lane);
            cp_async_commit();
            cp_async_wait<0>();
            __syncwarp();
        }
        if constexpr (ACT == ACT_GELU) {
            float *const Lw = Lw0 + warp * 16 * tma_lw<BN>();
            if (has_res) requantize_gelu_warp<NT, wt::EW, false, true>(p, acc, Ew, Lw, n0, lane);
            else if (p.small_acc) requantize_gelu_warp<NT, wt::EW, true, false>(p, acc, Ew, Lw, n0, lane);
            else requantize_gelu_warp<NT, wt::EW, false, false>(p, acc, Ew, Lw, n0, lane);
        } else {
            requantize_tile<1, NT, wt::EW, ACT == ACT_SIGMOID_SILU>(p, acc, Ew, n0, lane, has_res);
        }
        __syncwarp();
        wt::store(p, Ew, pos0, n0, lane);
        __syncwarp(); /* Ew is free for the next tile's residual */
        if (PP) skip_tile();
    }
#else
    __trap(); /* built for a GPU without TMA and wgmma: the host offers this kernel on sm_90 only */
#endif
}

/* 1x1 stride-1 convs over at most 64 input channels (EfficientNet's and
 * MobileNet's narrow expand convs: 16 to 40 channels in, 96 to 240 out,
 * at the largest resolutions) without the Tensor Cores: at K <= 64 a tile
 * of the implicit GEMM is one pipeline stage and its epilogue (a SiLU's
 * e^x and reciprocal each) runs at the occupancy of its 64-channel
 * accumulators; here each thread keeps four channels' weights in
 * registers, takes the positions of its block's row in turn (dp4a over
 * the input row, which the block's threads read from L1), and stores the
 * four levels as one word, at a full SM's worth of warps. Same integer
 * sums (exact) and the same epilogue as requantize_warp. KW: 4-byte words
 * of K compiled (p.Cp / 4 of them used); ACT as requantize_warp's. */
template <int KW, bool SMALL, bool RES, int ACT>
__device__ __forceinline__ void pointwise_rows(const igemm_params &p, int c4, int pl, int per_block)
{
    const int ch = c4 * 4, cw = p.Cp / 4;
    uint32_t w[4][KW];
    int32_t base[4];
    float m[4];
#pragma unroll
    for (int c = 0; c < 4; c++) {
#pragma unroll
        for (int j = 0; j < KW; j++) w[c][j] = j < cw ? __ldg((const uint32_t *)(p.w + (size_t)(ch + c) * p.K) + j) : 0u;
        base[c] = (SMALL ? QFI_MAGIC_BITS : 0) + (p.rq.bias ? p.rq.bias[ch + c] : 0);
        m[c] = p.rq.m[ch + c];
    }
    const bool silu = p.rq.act == QF_ACT_SILU;
    for (int pos = blockIdx.x * per_block + pl; pos < p.P; pos += gridDim.x * per_block) {
        const uint32_t *xr = (const uint32_t *)(p.x + (size_t)pos * p.Cp);
        int32_t acc[4] = {base[0], base[1], base[2], base[3]};
#pragma unroll
        for (int j = 0; j < KW; j++)
            if (j < cw) {
                const int xv = (int)__ldg(xr + j);
#pragma unroll
                for (int c = 0; c < 4; c++) acc[c] = __dp4a(xv, (int)w[c][j], acc[c]);
            }
        const size_t at = (size_t)pos * p.M + ch;
        const uint32_t rw = RES ? *(const uint32_t *)(p.res + at) : 0u;
        float f[4], rf[4], v[4];
        bool sure = true;
#pragma unroll
        for (int c = 0; c < 4; c++) {
            f[c] = SMALL ? qfi_magic_to_f32(acc[c]) : qfi_i2f(acc[c]);
            rf[c] = RES ? qfi_requant_residual(&p.rq, (int8_t)(rw >> (8 * c))) : 0.0f;
            float l = qfi_requant_linear(&p.rq, f[c], m[c], RES, rf[c]);
            if constexpr (ACT == ACT_SIGMOID_SILU) {
                sure &= qfi_sigmoid_level_fast(silu, l, p.rq.act_s, p.rq.lo, p.rq.hi, &v[c]);
            } else {
                if constexpr (ACT == ACT_HARD_SWISH) l = qfi_act_value_kinds(QF_ACT_HARD_SWISH, l, p.rq.act_s, false);
                v[c] = fminf(fmaxf(l, p.rq.lo), p.rq.hi);
            }
        }
        if (ACT == ACT_SIGMOID_SILU && !sure) /* rare: the exact form where a level is not sure */
#pragma unroll
            for (int c = 0; c < 4; c++) v[c] = qfi_requant_smooth_i8_value_kinds(&p.rq, f[c], m[c], RES, rf[c], false);
        const uint32_t lo = __byte_perm(qfi_magic_round_zp(v[0], p.rq.z_out), qfi_magic_round_zp(v[1], p.rq.z_out), 0x0040),
                       hi = __byte_perm(qfi_magic_round_zp(v[2], p.rq.z_out), qfi_magic_round_zp(v[3], p.rq.z_out), 0x0040);
        *(uint32_t *)(p.y + at) = __byte_perm(lo, hi, 0x5410);
    }
}
/* The largest block of pointwise_kernel<KW>: at KW = 16 a thread holds
 * 64 weight words, and the 64 registers a thread that blocks of 1024 leave
 * made those instances spill 672 bytes a thread (ptxas, sm_90a). */
template <int KW> constexpr int pointwise_max_threads() { return KW > 8 ? 512 : 1024; }
/* Blocks of p.M / 4 threads (one a channel quad) times the rows a block
 * takes at once; the residual and exact-conversion forms picked once. */
template <int KW, int ACT> __global__ void __launch_bounds__(pointwise_max_threads<KW>()) pointwise_kernel(igemm_params p)
{
    const int m4 = p.M / 4, per_block = blockDim.x / m4, c4 = threadIdx.x % m4, pl = threadIdx.x / m4;
    if (p.res) {
        if (p.small_acc) pointwise_rows<KW, true, true, ACT>(p, c4, pl, per_block);
        else pointwise_rows<KW, false, true, ACT>(p, c4, pl, per_block);
    } else {
        if (p.small_acc) pointwise_rows<KW, true, false, ACT>(p, c4, pl, per_block);
        else pointwise_rows<KW, false, false, ACT>(p, c4, pl, per_block);
    }
}

/* An input of C < 4 channels rearranged for the gather, one thread per
 * output pixel: F = 1 widens each pixel to 4 channels; F = 2 is
 * space-to-depth, pixel (i, j) of the output holding the 2x2 block at
 * (2i, 2j) as phases (bh*2 + bw) of 4 channels each, the zero point `pad`
 * past the edge (padding taps read it). Channels past C (zero weights) get
 * zeros. src(n, c, ih, iw) reads one input element as int8. 32-bit indices
 * within an image (the caller checks H*W*C < 2^31). */
template <int F, typename Src>
__global__ void prep_input_kernel(int8_t *y, Src src, int H, int W, int C, int H2, int W2, int8_t pad, int64_t total)
{
    typedef typename std::conditional<F == 2, int4, int>::type out_t;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t n = i / ((int64_t)H2 * W2);
        const int rem = (int)(i - n * H2 * W2), i2 = rem / W2, j2 = rem - i2 * W2;
        union {
            out_t v;
            int8_t b[F * F * 4];
        } u;
#pragma unroll
        for (int ph = 0; ph < F * F; ph++) {
            const int ih = i2 * F + ph / F, iw = j2 * F + ph % F;
            const bool in = ih < H && iw < W;
#pragma unroll
            for (int c = 0; c < 4; c++) u.b[ph * 4 + c] = c >= C ? 0 : in ? src(n, c, ih, iw) : pad;
        }
        ((out_t *)y)[i] = u.v;
    }
}

/* The graph's int8 NHWC input. */
struct int8_nhwc {
    const int8_t *x;
    int H, W, C;
    __device__ __forceinline__ int8_t operator()(int64_t n, int c, int ih, int iw) const
    {
        return x[n * H * W * C + (ih * W + iw) * C + c];
    }
};
/* An f32 input (N,C,H,W) with element strides, quantized on the way
 * (QuantizeLinear's rounding, zero point and saturation). */
struct f32_quantized {
    const float *x;
    int64_t sn, sc, sh, sw;
    float scale;
    int32_t zp;
    __device__ __forceinline__ int8_t operator()(int64_t n, int c, int ih, int iw) const
    {
        return qfi_quantize_f32_zp(x[n * sn + c * sc + ih * sh + iw * sw], scale, zp);
    }
};

/* RGB stems (3x3 over 3 channels, 4 to 64 outputs: MobileNet's,
 * EfficientNet's, ShuffleNet's first conv) without the Tensor Cores: one
 * output pixel a thread, its 27 input bytes read straight from the graph's
 * input through src (quantized on the way where the layer fused the
 * QuantizeLinear) and packed into 7 words, dp4a against each output's 7
 * weight words in shared memory (every thread reads the same word at once),
 * the outputs stored a word of 4 channels at a time. The implicit GEMM ran
 * these as 64-channel tiles over a space-to-depth copy made first (0.34-0.59
 * ms at batch 256, against a memory bound near 0.06). Padding taps read the
 * input's zero point; int32 sums and the same epilogue: the CPU engine's
 * levels. */
constexpr int STEM_K = 27, STEM_WORDS = 7, STEM_MAX_M = 64, STEM_THREADS = 128;

template <typename Src, bool ACT>
__global__ void __launch_bounds__(STEM_THREADS) stem_kernel(int8_t *y, Src src, const int32_t *w, qfi_requant q, int8_t pad,
                                                            int M, int H, int W, int HoWo, int Wo, int sh, int sw, int ph,
                                                            int pw, int dh, int dw, int P, cu_fast_div by_howo,
                                                            cu_fast_div by_wo, const int8_t *res)
{
    __shared__ int32_t ws[STEM_MAX_M * STEM_WORDS];
    for (int i = threadIdx.x; i < M * STEM_WORDS; i += blockDim.x) ws[i] = w[i];
    __syncthreads();
    for (int pix = blockIdx.x * blockDim.x + threadIdx.x; pix < P; pix += gridDim.x * blockDim.x) {
        const int n = cu_div_by(pix, by_howo), r = pix - n * HoWo, oh = cu_div_by(r, by_wo), ow = r - oh * Wo;
        uint32_t xw[STEM_WORDS] = {};
#pragma unroll
        for (int k = 0; k < STEM_K; k++) { /* k = tap * 3 + channel, tap = kh * 3 + kw */
            const int tap = k / 3, ih = oh * sh - ph + tap / 3 * dh, iw = ow * sw - pw + tap % 3 * dw;
            const int8_t v = (unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W ? src((int64_t)n, k % 3, ih, iw) : pad;
            xw[k / 4] |= (uint32_t)(uint8_t)v << (8 * (k % 4));
        }
        for (int m0 = 0; m0 < M; m0 += 4) {
            int32_t acc[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int32_t a = 0;
#pragma unroll
                for (int j = 0; j < STEM_WORDS; j++) a = __dp4a((int)xw[j], ws[(m0 + e) * STEM_WORDS + j], a);
                acc[e] = a;
            }
            if (!res) {
                uint32_t word = 0;
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int8_t l = ACT ? qfi_requant_acc_level_fast(&q, acc[e], m0 + e, false, 0.0f)
                                         : qfi_requant_level(&q, qfi_requant_acc_at(&q, acc[e], m0 + e, false, 0.0f, false));
                    word |= (uint32_t)(uint8_t)l << (8 * e);
                }
                *(uint32_t *)(y + (size_t)pix * M + m0) = word;
            } else {
#pragma unroll
                for (int e = 0; e < 4; e++) qfi_requant_elem_at(&q, y, (int64_t)pix * M + m0 + e, acc[e], m0 + e, res, ACT);
            }
        }
    }
}

} // namespace

/* How the input reaches the gather. Space-to-depth turns a stride-2 RGB
 * layer (ResNet's 7x7 conv1) into a stride-1 conv over 16 channels, so its
 * patches move in 16-byte copies instead of 4-byte ones; the MMA work is the
 * same (7x7x3 -> 4x4x16 taps x channels, zero weights where a phase has no tap). */
typedef enum { PREP_NONE, PREP_WIDEN, PREP_S2D } input_prep;

/* One launchable form of the layer: tile shape, residual handling, grid. */
typedef void (*igemm_fn)(igemm_params);
typedef struct igemm_variant {
    igemm_fn fn;
    int bm, bn;
    bool wg;                /* wgmma (sm_90a) instead of mma.sync */
    bool persistent;        /* as many blocks as fit, each looping over tiles */
    int k_splits, kt_split; /* split-K units a tile and their stages (igemm_params') */
    int blocks, n_tiles, p_tiles;
    size_t smem;
    int threads;            /* a block's; 0: THREADS. The 1x1 kernel (pointwise_kernel) has bm 0 */
    bool stem;              /* the RGB stem kernel (stem_kernel, on the unprepared input; bm 0 too) */
    void (*tma)(tma_params);  /* tma_gemm_kernel (bm TMA_BM, or TMA_PP_BM: ping-pong): fn is NULL */
    int per_sm;             /* the TMA kernel's blocks an SM (its PER_SM) */
} igemm_variant;

struct cu_igemm {
    cu_conv_geo geo;        /* the layer as the graph has it */
    input_prep prep;
    int H2, W2;             /* prepared input's size */
    int32_t z_in;           /* the input's zero point: what the padding holds */
    int vec;                /* 16, 8 or 4 */
    igemm_params p;         /* the GEMM the kernel runs (prepared geometry); tiles set per variant */
    cu_requant rq;          /* the epilogue of split-K variants (cu_requant_launch) */
    size_t prep_bytes;      /* scratch: the prepared input, then split-K's int32 sums (acc_bytes) */
    size_t acc_bytes;
    igemm_variant v[CU_IGEMM_MAX_VARIANTS];
    int n_v;
    const int32_t *stem_w;  /* the stem kernel's weights: [M][7] words of k = (kh * 3 + kw) * 3 + c; NULL: no stem variant */
};

template <int VEC> static igemm_fn kernel_for(int bm, int bn, bool wg)
{
    if (wg) {
        if (bm == 256) return bn == 128 ? igemm_kernel<256, 128, 8, VEC, true, false> : igemm_kernel<256, 64, 8, VEC, true, false>;
        return bn == 256 ? igemm_kernel<128, 256, 8, VEC, true, false>
             : bn == 128 ? igemm_kernel<128, 128, 8, VEC, true, false> : igemm_kernel<128, 64, 8, VEC, true, false>;
    }
    if (bn == 256) return igemm_kernel<128, 256, 2, VEC, false, false>;
    if (bn == 128) return igemm_kernel<128, 128, 2, VEC, false, false>;
    return bm == 256 ? igemm_kernel<256, 64, 4, VEC, false, false> : igemm_kernel<128, 64, 4, VEC, false, false>;
}
/* With a smooth activation: an e^x in each of the epilogue's unrolled
 * elements makes these kernels large, so fewer shapes (one of each kind the
 * variant list needs for any M, and the wgmma 128x256 and 256x128 of wide
 * layers); NULL for the others. */
template <int VEC> static igemm_fn kernel_for_act(int bm, int bn, bool wg)
{
    if (wg) {
        if (bm == 256) return bn == 128 ? igemm_kernel<256, 128, 8, VEC, true, true> : NULL;
        return bn == 256 ? igemm_kernel<128, 256, 8, VEC, true, true>
             : bn == 128 ? igemm_kernel<128, 128, 8, VEC, true, true> : igemm_kernel<128, 64, 8, VEC, true, true>;
    }
    if (bm != 128 || bn == 256) return NULL;
    return bn == 128 ? igemm_kernel<128, 128, 2, VEC, false, true> : igemm_kernel<128, 64, 4, VEC, false, true>;
}
/* The 1x1 kernel of act (no GELU here) */
template <int KW> static igemm_fn pointwise_for(qf_act act)
{
    return act == QF_ACT_NONE ? pointwise_kernel<KW, ACT_NONE>
         : act == QF_ACT_HARD_SWISH ? pointwise_kernel<KW, ACT_HARD_SWISH> : pointwise_kernel<KW, ACT_SIGMOID_SILU>;
}
/* Tile shapes: 128x128 (warps 64x32), 128x256 for M > 128 (warps 64x64:
 * the gathered patches serve twice the channels), and for M <= 64 128x64
 * (warps 32x32) or 256x64 (warps 64x32: twice the MMAs per shared-memory
 * load); wgmma: BM 128 or 256 (warps BM / 8 x BN) by BN 64, 128 or 256. */
/* The TMA kernel of `shape` (0: 128x128, 1: 128x256, 2: 128x128 two blocks
 * an SM; ping-pong 3: 64x128, 4: 64x256) with its shared memory; a GELU
 * has 0 and 3 only. */
template <int ACT> static void tma_kernel_for(int shape, igemm_variant *tv)
{
    if (shape == 3) {
        tv->tma = tma_gemm_kernel<TMA_PP_BM, 128, ACT, 1>, tv->smem = tma_smem<TMA_PP_BM, 128, ACT, 1>();
    } else if (ACT == ACT_GELU || shape == 0) {
        tv->tma = tma_gemm_kernel<TMA_BM, 128, ACT, 1>, tv->smem = tma_smem<TMA_BM, 128, ACT, 1>();
    } else if constexpr (ACT != ACT_GELU) {
        if (shape == 1) tv->tma = tma_gemm_kernel<TMA_BM, 256, ACT, 1>, tv->smem = tma_smem<TMA_BM, 256, ACT, 1>();
        else if (shape == 4) tv->tma = tma_gemm_kernel<TMA_PP_BM, 256, ACT, 1>, tv->smem = tma_smem<TMA_PP_BM, 256, ACT, 1>();
        else tv->tma = tma_gemm_kernel<TMA_BM, 128, ACT, 2>, tv->smem = tma_smem<TMA_BM, 128, ACT, 2>();
    }
}

static igemm_fn pick_kernel(int bm, int bn, bool wg, int vec, bool act)
{
    if (act)
        return vec == 16 ? kernel_for_act<16>(bm, bn, wg) : vec == 8 ? kernel_for_act<8>(bm, bn, wg) : kernel_for_act<4>(bm, bn, wg);
    return vec == 16 ? kernel_for<16>(bm, bn, wg) : vec == 8 ? kernel_for<8>(bm, bn, wg) : kernel_for<4>(bm, bn, wg);
}

/* Stages per split-K part for a grid of `tiles` tiles of KT stages, or 0:
 * where the tiles fill at most half the SMs (ResNet-50's 3x3 convs at batch
 * 1: 4 to 8 tiles of 18-72 stages), the fewest parts of at least 2 stages
 * that fill the SMs (or as many as there can be); the last part may run
 * past K, over the tap table's padding and zero weights. The tuner times
 * it against the rest. */
static int split_k_stages(int64_t tiles, int64_t KT, int sms)
{
    if (tiles * 2 > sms || KT < 4) return 0;
    int64_t d = (sms + tiles - 1) / tiles;
    if (d > KT / 2) d = KT / 2;
    return (int)((KT + d - 1) / d);
}

static int floor_half(int a) { return a >= 0 ? a / 2 : -((1 - a) / 2); }

/* The GEMM-side geometry of g after its input preparation. */
typedef struct gemm_geo {
    input_prep prep;
    int H, W, Cp, kh, kw, sh, sw, ph, pw, dh, dw;
} gemm_geo;

static gemm_geo plan(const cu_conv_geo *g)
{
    gemm_geo q = {PREP_NONE, (int)g->H, (int)g->W, (int)g->C, g->kh, g->kw, g->sh, g->sw, g->ph, g->pw, g->dh, g->dw};
    if (g->C >= 4) return q;
    if (g->sh == 2 && g->sw == 2 && g->dh == 1 && g->dw == 1) {
        /* output row oh reads input row 2*oh - ph + kh = 2*(oh + a - ph2) + bh */
        q.prep = PREP_S2D;
        q.H = (int)(g->H + 1) / 2, q.W = (int)(g->W + 1) / 2, q.Cp = 16;
        q.ph = -floor_half(-g->ph), q.pw = -floor_half(-g->pw);
        q.kh = floor_half(g->kh - 1 - g->ph) + q.ph + 1, q.kw = floor_half(g->kw - 1 - g->pw) + q.pw + 1;
        q.sh = q.sw = 1;
    } else {
        q.prep = PREP_WIDEN;
        q.Cp = 4;
    }
    return q;
}

/* What every kernel here needs of the GEMM of P output pixels, M channels
 * and a reduction of K: channel pairs in whole 8-channel groups, exact int32
 * sums, 32-bit output offsets. */
static bool gemm_fits(int64_t P, int64_t M, int64_t K)
{
    return P > 0 && M % 8 == 0 && K <= QFI_INT8_MAX_REDUCTION && P * M < INT32_MAX;
}

bool cu_igemm_fits(const cu_conv_geo *g, qf_dtype out, qf_act act)
{
    /* its epilogue is compiled without GELU (qfi_requant_value_kinds) */
    if (act == QF_ACT_GELU || act == QF_ACT_GELU_TANH) return false;
    if (g->N <= 0 || g->C <= 0 || g->H <= 0 || g->W <= 0) return false;
    const gemm_geo q = plan(g);
    return (out == QF_I8 || out == QF_F16) && g->group == 1 && q.Cp % 4 == 0 && q.kh * q.kw <= MAX_TAPS &&
           gemm_fits(g->N * g->Ho * g->Wo, g->M, (int64_t)q.kh * q.kw * q.Cp) && g->N * q.H * q.W * q.Cp < INT32_MAX;
}

/* The TMA kernel's layers: a plain GEMM (1x1, stride 1, no padding) over
 * rows of a multiple of 16 bytes (the tensor map's row pitch), int8 out,
 * no activation, a GELU, SiLU, Sigmoid or HardSwish, on sm_90 where the
 * driver encodes tensor maps. */
typedef CUresult (*tensor_map_encoder)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                       const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                       CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static tensor_map_encoder load_encoder()
{
    void *f = NULL;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
        return NULL;
    return (tensor_map_encoder)f;
}
static tensor_map_encoder encoder()
{
    static const tensor_map_encoder fn = load_encoder(); /* once, thread-safe */
    return fn;
}

bool cu_igemm_tma_fits(const cu_engine *c, const cu_conv_geo *g, qf_dtype out, qf_act act)
{
    return c->prop.major == 9 && c->prop.minor == 0 && out == QF_I8 && g->group == 1 && g->kh == 1 && g->kw == 1 &&
           g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0 && g->C % 16 == 0 &&
           gemm_fits(g->N * g->H * g->W, g->M, g->C) &&
           (act == QF_ACT_NONE || qfi_act_smooth(act)) && encoder() != NULL;
}

/* The prepared input's bytes, rounded up so that split-K's sums after it stay aligned. */
static size_t prep_bytes(const cu_conv_geo *g)
{
    const gemm_geo q = plan(g);
    return q.prep == PREP_NONE ? 0 : ((size_t)(g->N * q.H * q.W * q.Cp) + 255) / 256 * 256;
}

size_t cu_igemm_scratch(const cu_igemm *ig)
{
    return ig->prep_bytes + ig->acc_bytes;
}

/* Weights [M][K16] in the gather's k order, k = (a*kw + b)*Cp + cc, from the
 * graph's (M, C, kh, kw); zeros where a prepared tap/channel has no source. */
static int8_t *gemm_weights(const cu_conv_geo *g, const gemm_geo &q, const int8_t *w, int64_t K16)
{
    int8_t *hw = (int8_t *)qfi_calloc((size_t)(g->M * K16) + 1, 1);
    if (!hw) return NULL;
    for (int64_t m = 0; m < g->M; m++)
        for (int a = 0; a < q.kh; a++)
            for (int b = 0; b < q.kw; b++)
                for (int cc = 0; cc < q.Cp; cc++) {
                    int kh = a, kw = b, ch = cc;
                    if (q.prep == PREP_S2D) {
                        const int phase = cc / 4, bh = phase / 2, bw = phase % 2;
                        ch = cc % 4;
                        kh = 2 * (a - q.ph) + bh + g->ph, kw = 2 * (b - q.pw) + bw + g->pw;
                    }
                    if (ch >= g->C || kh < 0 || kh >= g->kh || kw < 0 || kw >= g->kw) continue;
                    hw[m * K16 + (a * q.kw + b) * q.Cp + cc] = w[((m * g->C + ch) * g->kh + kh) * g->kw + kw];
                }
    return hw;
}

/* The largest |acc + bias| any output channel can reach, inputs in
 * [-128, 127]: 128 * sum |w| + |bias|, for the exact epilogue's 2^22 bound
 * (usually far below the K * 128 * 128 that int8 weights allow). */
static int64_t acc_bound(const cu_conv_geo *g, const int8_t *w, const int32_t *bias)
{
    const int64_t per_m = g->C * g->kh * g->kw;
    int64_t worst = 0;
    for (int64_t m = 0; m < g->M; m++) {
        int64_t sum = 0;
        for (int64_t k = 0; k < per_m; k++) sum += w[m * per_m + k] < 0 ? -w[m * per_m + k] : w[m * per_m + k];
        const int64_t b = bias ? bias[m] : 0, bound = 128 * sum + (b < 0 ? -b : b);
        if (bound > worst) worst = bound;
    }
    return worst;
}

qf_status cu_igemm_create(cu_engine *c, const cu_conv_geo *g, const int8_t *w, const int32_t *bias, const cu_requant *rq,
                          cu_igemm **out)
{
    *out = NULL;
    const bool tma = cu_igemm_tma_fits(c, g, rq->out, rq->act);
    /* a GELU only the TMA kernel's epilogue computes */
    const bool others = cu_igemm_fits(g, rq->out, rq->act);
    if (!tma && !others) return qf_error(QF_ERR_USAGE, "implicit-GEMM conv asked for a shape it does not run");
    const gemm_geo q = plan(g);
    const int vec = q.Cp % 16 == 0 ? 16 : q.Cp % 8 == 0 ? 8 : 4;
    const int64_t K = (int64_t)q.kh * q.kw * q.Cp, K16 = (K + 15) / 16 * 16, KT = (K16 + BK - 1) / BK;
    /* the tap table: one entry per `vec` bytes of every stage, and as many
     * again past K for the last split-K part (split_k_stages) */
    const int64_t n_taps = 2 * KT * BK / vec;
    int2 *ht = (int2 *)qfi_calloc((size_t)n_taps, sizeof *ht);
    int8_t *hw = gemm_weights(g, q, w, K16);
    cu_igemm *ig = (cu_igemm *)qfi_calloc(1, sizeof *ig);
    if (!ht || !hw || !ig) {
        free(ht), free(hw), free(ig);
        return QF_ERR_NOMEM;
    }
    for (int64_t i = 0; i < n_taps; i++) {
        const int64_t k = i * vec, tap = k / q.Cp;
        const int a = (int)(tap / q.kw), b = (int)(tap % q.kw);
        ht[i] = k < K ? make_int2((a * q.dh * q.W + b * q.dw) * q.Cp + (int)(k % q.Cp), (int)tap) : make_int2(0, MAX_TAPS);
    }
    void *dw = NULL, *dt = NULL, *dz = NULL;
    qf_status s = cu_upload(c, hw, (size_t)(g->M * K16), &dw);
    if (s == QF_OK) s = cu_upload(c, ht, (size_t)n_taps * sizeof *ht, &dt);
    if (s == QF_OK && rq->z_in != 0) {
        int8_t hz[IGEMM_ZPAD_BYTES];
        memset(hz, (int)rq->z_in, sizeof hz);
        s = cu_upload(c, hz, sizeof hz, &dz);
    }
    free(hw), free(ht);
    if (s != QF_OK) {
        free(ig);
        return s;
    }
    ig->geo = *g;
    ig->prep = q.prep;
    ig->z_in = rq->z_in;
    ig->H2 = q.H, ig->W2 = q.W;
    ig->vec = vec;
    igemm_params &p = ig->p;
    p.w = (const int8_t *)dw;
    p.taps = (const int2 *)dt;
    p.zpad = (const int8_t *)dz;
    p.rq = *rq;
    ig->rq = *rq;
    ig->prep_bytes = prep_bytes(g);
    const bool act = rq->act != QF_ACT_NONE; /* the kernels with the smooth activation's code */
    /* the smooth instances have the exact conversions for SiLU and Sigmoid
     * without a residual only (launch_gemm clears it where one is read) */
    p.small_acc = acc_bound(g, w, bias) < QFI_MAGIC_LIMIT && (!act || qfi_act_has_fast_level(rq->act)) && rq->out == QF_I8;
    p.H = q.H, p.W = q.W, p.Cp = q.Cp, p.Ho = (int)g->Ho, p.Wo = (int)g->Wo, p.M = (int)g->M;
    p.P = (int)(g->N * g->Ho * g->Wo);
    p.K = (int)K16; /* the weights' zero tail meets the gather's zero fill past K */
    p.k_splits = 1, p.kt_split = (int)KT;
    p.sh = q.sh, p.sw = q.sw, p.ph = q.ph, p.pw = q.pw;
    p.kh = q.kh, p.kw = q.kw, p.dh = q.dh, p.dw = q.dw;
    p.div_HoWo = cu_make_fast_div((uint32_t)(g->Ho * g->Wo));
    p.div_Wo = cu_make_fast_div((uint32_t)g->Wo);
    /* the variants the tuner times: tile shapes for M, residual handling, grid */
    const int64_t P = p.P;
    const char *cap = getenv("QFORGE_CUDA_IGEMM_BLOCKS"); /* tests: a small persistent grid, several tiles a block */
    if (tma) {
        /* 128 x 128 and, past 128 channels without a GELU, 128 x 256 tiles,
         * one block an SM; where K is one or two stages, 128 x 128 tiles two
         * blocks an SM (not for a GELU, whose linear values take the room);
         * the ping-pong form's 64 x 128 and 64 x 256 likewise, only where
         * QFORGE_CUDA_TMA_PINGPONG is set: with its turn barrier it is
         * correct on the GPU, but it won only a few layers without a GELU, by
         * 1-2 %, not worth their tuning time (bench/cuda_notes.md, session 49) */
        const bool pingpong = getenv("QFORGE_CUDA_TMA_PINGPONG") != NULL;
        const bool gelu = rq->act == QF_ACT_GELU || rq->act == QF_ACT_GELU_TANH, smooth = rq->act != QF_ACT_NONE && !gelu;
        const bool short_k = !gelu && (K + TMA_BK - 1) / TMA_BK <= 2;
        for (int shape = 0; shape < 5; shape++) {
            const int bm = shape >= 3 ? TMA_PP_BM : TMA_BM, bn = shape == 1 || shape == 4 ? 256 : 128, per_sm = shape == 2 ? 2 : 1;
            if ((bn == 256 && (gelu || g->M <= 128)) || g->M <= 64 || (per_sm == 2 && !short_k) || (bm == TMA_PP_BM && !pingpong))
                continue;
            igemm_variant tv;
            memset(&tv, 0, sizeof tv);
            if (gelu) tma_kernel_for<ACT_GELU>(shape, &tv);
            else if (smooth) tma_kernel_for<ACT_SIGMOID_SILU>(shape, &tv);
            else tma_kernel_for<ACT_NONE>(shape, &tv);
            tv.bm = bm, tv.bn = bn, tv.wg = true, tv.persistent = true, tv.threads = TMA_THREADS, tv.per_sm = per_sm;
            tv.k_splits = 1, tv.kt_split = (int)((K + TMA_BK - 1) / TMA_BK);
            tv.n_tiles = (int)((g->M + bn - 1) / bn);
            tv.p_tiles = (int)((P + bm - 1) / bm);
            const int64_t tiles = (int64_t)tv.n_tiles * tv.p_tiles;
            cudaError_t e = cudaFuncSetAttribute(tv.tma, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)tv.smem);
            if (e != cudaSuccess) {
                free(ig);
                return cu_fail(e, "setting up the TMA GEMM kernel", __FILE__, __LINE__);
            }
            int64_t resident = (int64_t)per_sm * c->prop.multiProcessorCount;
            if (cap && atoi(cap) > 0 && atoi(cap) < resident) resident = atoi(cap);
            tv.blocks = (int)(tiles < resident ? tiles : resident);
            ig->v[ig->n_v++] = tv;
        }
    }
    /* the kernels below compute no GELU */
    if (!others) {
        *out = ig;
        return QF_OK;
    }
    /* the 1x1 kernel over K <= 64 (int8 outputs; smooth activations other than GELU, which the host kept out) */
    if (rq->out == QF_I8 && q.prep == PREP_NONE && q.kh == 1 && q.kw == 1 && q.sh == 1 && q.sw == 1 && q.ph == 0 && q.pw == 0 && K16 <= 64 &&
        g->M / 4 <= (K16 <= 32 ? pointwise_max_threads<8>() : pointwise_max_threads<16>())) {
        igemm_variant pw;
        memset(&pw, 0, sizeof pw);
        const qf_act a = rq->act == QF_ACT_SIGMOID || rq->act == QF_ACT_SILU || rq->act == QF_ACT_HARD_SWISH ? rq->act : QF_ACT_NONE;
        pw.fn = K16 <= 32 ? pointwise_for<8>(a) : pointwise_for<16>(a);
        const int m4 = (int)(g->M / 4);
        pw.threads = m4 * (m4 < 256 ? 256 / m4 : 1);
        pw.k_splits = 1, pw.n_tiles = pw.p_tiles = 1;
        int per_sm = 0;
        cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, pw.fn, pw.threads, 0);
        if (e != cudaSuccess) {
            free(ig);
            return cu_fail(e, "setting up the 1x1 conv kernel", __FILE__, __LINE__);
        }
        /* as many blocks as are resident at once (each loads its weights once), fewer for few rows */
        const int64_t rows = (P + pw.threads / m4 - 1) / (pw.threads / m4), resident = (int64_t)per_sm * c->prop.multiProcessorCount;
        pw.blocks = (int)(rows < resident ? rows : resident);
        if (per_sm > 0) ig->v[ig->n_v++] = pw;
    }
    /* the RGB stem kernel: 3x3 over 3 channels, int8 out, M a multiple of 4 up to 64 */
    if (g->C == 3 && g->kh == 3 && g->kw == 3 && g->group == 1 && g->M % 4 == 0 && g->M <= STEM_MAX_M && rq->out == QF_I8) {
        int32_t *sw = (int32_t *)qfi_calloc((size_t)g->M * STEM_WORDS, sizeof *sw);
        if (!sw) {
            free(ig);
            return QF_ERR_NOMEM;
        }
        for (int64_t m = 0; m < g->M; m++)
            for (int k = 0; k < STEM_K; k++) {
                const int tap = k / 3, c = k % 3; /* ONNX weights [M][C][kh][kw] */
                const uint8_t b = (uint8_t)w[((m * 3 + c) * 3 + tap / 3) * 3 + tap % 3];
                sw[m * STEM_WORDS + k / 4] |= (int32_t)((uint32_t)b << (8 * (k % 4)));
            }
        void *dsw = NULL;
        qf_status su = cu_upload(c, sw, (size_t)g->M * STEM_WORDS * sizeof *sw, &dsw);
        free(sw);
        if (su != QF_OK) {
            free(ig);
            return su;
        }
        ig->stem_w = (const int32_t *)dsw;
        igemm_variant sv;
        memset(&sv, 0, sizeof sv);
        sv.stem = true;
        sv.threads = STEM_THREADS;
        sv.k_splits = 1, sv.n_tiles = sv.p_tiles = 1;
        const int64_t want = (P + STEM_THREADS - 1) / STEM_THREADS, most = (int64_t)c->prop.multiProcessorCount * 16;
        sv.blocks = (int)(want < most ? want : most);
        ig->v[ig->n_v++] = sv;
    }
    /* (BM, BN, wgmma): wgmma only where the sm_90a code runs (compute capability 9.0) */
    const struct { int bm, bn; bool wg; } shapes[] = {
        {128, 128, false}, {128, 256, false}, {128, 64, false}, {256, 64, false},
        {128, 128, true},  {256, 128, true},  {128, 256, true}, {128, 64, true}, {256, 64, true}};
    const bool sm90 = c->prop.major == 9 && c->prop.minor == 0;
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
        const int bm = shapes[sh].bm, bn = shapes[sh].bn;
        const bool wg = shapes[sh].wg;
        /* 64-channel tiles where they pad M less than 128-channel ones (M
         * <= 64, or 16 to 64 past a multiple of 128: EfficientNet's 144 and
         * 672 pad to 192 and 704 rather than 256 and 768), wider ones above 64 */
        const bool narrow = g->M <= 64 || (g->M % 128 != 0 && g->M % 128 <= 64);
        if ((bn == 64 && !narrow) || (bn != 64 && g->M <= 64) || (bn == 256 && g->M <= 128) || (wg && !sm90)) continue;
        {
            igemm_variant base;
            memset(&base, 0, sizeof base);
            base.fn = pick_kernel(bm, bn, wg, vec, act);
            if (!base.fn) continue;
            base.bm = bm, base.bn = bn, base.wg = wg, base.k_splits = 1;
            base.n_tiles = (int)((g->M + bn - 1) / bn);
            base.p_tiles = (int)((P + bm - 1) / bm);
            const int64_t tiles = (int64_t)base.n_tiles * base.p_tiles;
            /* 4 stages of A and B, and each warp's epilogue tile (8 warps of BM*BN/8 plus 16-byte row padding) */
            const int wtm = bm / (wg ? 8 : bn == 64 ? 4 : 2); /* warp tile rows: BM / WARPS_M */
            base.smem = (size_t)4 * (bm + bn) * BK + (size_t)bm * bn + (size_t)8 * wtm * 16;
            int per_sm = 0;
            cudaError_t e = cudaFuncSetAttribute(base.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)base.smem);
            if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, base.fn, THREADS, base.smem);
            if (e != cudaSuccess) {
                free(ig);
                return cu_fail(e, "setting up the implicit-GEMM conv kernel", __FILE__, __LINE__);
            }
            if (per_sm < 1 || tiles > INT32_MAX / 2 || ig->n_v + 2 > (int)(sizeof ig->v / sizeof ig->v[0])) continue;
            int64_t resident = (int64_t)per_sm * c->prop.multiProcessorCount;
            if (cap && atoi(cap) > 0 && atoi(cap) < resident) resident = atoi(cap);
            base.blocks = (int)tiles;
            ig->v[ig->n_v++] = base;
            if (resident < tiles) {
                base.persistent = true;
                base.blocks = (int)resident;
                ig->v[ig->n_v++] = base;
            } else if (const int kt = rq->out == QF_I8 ? split_k_stages(tiles, KT, c->prop.multiProcessorCount) : 0) {
                base.kt_split = kt;
                base.k_splits = (int)((KT + kt - 1) / kt);
                base.blocks = (int)tiles * base.k_splits;
                ig->v[ig->n_v++] = base;
                ig->acc_bytes = (size_t)P * (size_t)g->M * sizeof(int32_t);
            }
        }
    }
    if (ig->n_v == 0) {
        free(ig);
        return qf_error(QF_ERR_UNSUPPORTED, "implicit-GEMM conv: no kernel fits this GPU");
    }
    *out = ig;
    return QF_OK;
}

void cu_igemm_free(cu_igemm *ig) { free(ig); }

int cu_igemm_variants(const cu_igemm *ig)
{
    return ig->n_v;
}

int cu_igemm_split_k(const cu_igemm *ig, int variant)
{
    return ig->v[variant].k_splits;
}

uint32_t cu_igemm_signature(const cu_igemm *ig)
{
    /* FNV-1a over each variant's shape, kind, shared memory and grid: a
     * build whose kernels differ in these (a pipeline's stages) times its
     * layers again rather than take an older build's choices */
    uint32_t h = 2166136261u;
    for (int i = 0; i < ig->n_v; i++) {
        const igemm_variant &v = ig->v[i];
        const int f[] = {v.bm, v.bn, v.wg, v.persistent, v.k_splits, v.kt_split, v.threads, v.stem, (int)v.smem, v.blocks,
                         v.tma != NULL, v.per_sm};
        for (int x : f) h = (h ^ (uint32_t)x) * 16777619u;
    }
    return h;
}

/* The 2-D tensor map of rows x k bytes at base (pitch k), boxes of box_rows x TMA_BK, swizzled for wgmma;
 * rows and bytes past the ends read as zeros */
static qf_status encode_rows(CUtensorMap *map, const void *base, int64_t rows, int64_t k, int box_rows)
{
    const cuuint64_t dims[2] = {(cuuint64_t)k, (cuuint64_t)rows}, pitch[1] = {(cuuint64_t)k};
    const cuuint32_t box[2] = {TMA_BK, (cuuint32_t)box_rows}, step[2] = {1, 1};
    const CUresult r = encoder()(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, (void *)base, dims, pitch, box, step,
                                 CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return qf_error(QF_ERR_DEVICE, "cuTensorMapEncodeTiled: error %d for %lld rows of %lld bytes", (int)r,
                        (long long)rows, (long long)k);
    return QF_OK;
}

/* tma_gemm_kernel on x [P][K] and the weights [M][K] (p's own) */
static qf_status launch_tma(const igemm_variant &v, const igemm_params &p, cudaStream_t s)
{
    tma_params tp;
    memset(&tp, 0, sizeof tp);
    QF_CHECK(encode_rows(&tp.a, p.x, p.P, p.K, v.bm));
    QF_CHECK(encode_rows(&tp.b, p.w, p.M, p.K, v.bn));
    tp.p = p;
    tp.p.kt_split = v.kt_split;
    v.tma<<<v.blocks, TMA_THREADS, v.smem, s>>>(tp);
    CU_LAUNCHED();
    return QF_OK;
}

/* The GEMM kernel of `variant` on a prepared (or untouched) int8 input; a
 * split-K variant sums into scratch past the prepared input, then the
 * GEMM path's epilogue kernel requantizes (bias, residual, activation). */
static qf_status launch_gemm(const cu_igemm *ig, int variant, cudaStream_t s, const int8_t *x, const int8_t *res, int8_t *y,
                             void *scratch)
{
    const igemm_variant &v = ig->v[variant];
    igemm_params p = ig->p;
    p.x = x, p.res = res, p.y = y;
    if (res && p.rq.act != QF_ACT_NONE) p.small_acc = 0;
    p.n_tiles = v.n_tiles, p.p_tiles = v.p_tiles;
    if (v.k_splits > 1) {
        p.k_splits = v.k_splits, p.kt_split = v.kt_split;
        p.res = NULL, p.small_acc = 0;
        p.acc_out = (int32_t *)((char *)scratch + ig->prep_bytes);
        CU_CHECK(cudaMemsetAsync(p.acc_out, 0, ig->acc_bytes, s));
    }
    if (v.tma) return launch_tma(v, p, s);
    v.fn<<<v.blocks, v.threads ? v.threads : THREADS, v.smem, s>>>(p);
    CU_LAUNCHED();
    if (v.k_splits > 1) return cu_requant_launch(s, &ig->rq, p.acc_out, p.P, p.M, p.M, res, y);
    return QF_OK;
}

/* Rearranges the input read through src into scratch (prep != PREP_NONE),
 * then runs the GEMM on it. */
template <typename Src>
static qf_status prep_and_launch(const cu_igemm *ig, int variant, cudaStream_t s, Src src, const int8_t *res, int8_t *y,
                                 void *scratch)
{
    const cu_conv_geo &g = ig->geo;
    const int64_t total = g.N * ig->H2 * ig->W2;
    unsigned b = cu_blocks(total, 256);
    if (b > 262144) b = 262144;
    const int8_t pad = (int8_t)ig->z_in;
    if (ig->prep == PREP_S2D)
        prep_input_kernel<2><<<b, 256, 0, s>>>((int8_t *)scratch, src, (int)g.H, (int)g.W, (int)g.C, ig->H2, ig->W2, pad, total);
    else
        prep_input_kernel<1><<<b, 256, 0, s>>>((int8_t *)scratch, src, (int)g.H, (int)g.W, (int)g.C, ig->H2, ig->W2, pad, total);
    CU_LAUNCHED();
    return launch_gemm(ig, variant, s, (const int8_t *)scratch, res, y, scratch);
}

/* The stem kernel of `variant` on the input as src reads it. */
template <typename Src>
static qf_status launch_stem(const cu_igemm *ig, int variant, cudaStream_t s, Src src, const int8_t *res, int8_t *y)
{
    const igemm_variant &v = ig->v[variant];
    const cu_conv_geo &g = ig->geo;
    const int HoWo = (int)(g.Ho * g.Wo);
    const cu_fast_div by_howo = cu_make_fast_div((uint32_t)HoWo), by_wo = cu_make_fast_div((uint32_t)g.Wo);
    const int8_t pad = (int8_t)ig->z_in;
    if (ig->p.P == 0) return QF_OK;
    if (ig->p.rq.act != QF_ACT_NONE)
        stem_kernel<Src, true><<<v.blocks, STEM_THREADS, 0, s>>>(y, src, ig->stem_w, ig->p.rq, pad, (int)g.M, (int)g.H,
                                                                 (int)g.W, HoWo, (int)g.Wo, g.sh, g.sw, g.ph, g.pw, g.dh,
                                                                 g.dw, ig->p.P, by_howo, by_wo, res);
    else
        stem_kernel<Src, false><<<v.blocks, STEM_THREADS, 0, s>>>(y, src, ig->stem_w, ig->p.rq, pad, (int)g.M, (int)g.H,
                                                                  (int)g.W, HoWo, (int)g.Wo, g.sh, g.sw, g.ph, g.pw, g.dh,
                                                                  g.dw, ig->p.P, by_howo, by_wo, res);
    CU_LAUNCHED();
    return QF_OK;
}

qf_status cu_igemm_run(const cu_igemm *ig, int variant, cudaStream_t s, const int8_t *x, const int8_t *res, int8_t *y,
                       void *scratch)
{
    const cu_conv_geo &g = ig->geo;
    if (ig->v[variant].stem) return launch_stem(ig, variant, s, int8_nhwc{x, (int)g.H, (int)g.W, (int)g.C}, res, y);
    if (ig->prep == PREP_NONE) return launch_gemm(ig, variant, s, x, res, y, scratch);
    return prep_and_launch(ig, variant, s, int8_nhwc{x, (int)g.H, (int)g.W, (int)g.C}, res, y, scratch);
}

qf_status cu_igemm_run_quantizing(const cu_igemm *ig, int variant, cudaStream_t s, const float *x, const int64_t *xs,
                                  float scale, int32_t zp, const int8_t *res, int8_t *y, void *scratch)
{
    const f32_quantized src{x, xs[0], xs[1], xs[2], xs[3], scale, zp};
    if (ig->v[variant].stem) return launch_stem(ig, variant, s, src, res, y);
    if (ig->prep == PREP_NONE) return qf_error(QF_ERR_USAGE, "quantizing implicit-GEMM conv of %lld channels", (long long)ig->geo.C);
    return prep_and_launch(ig, variant, s, src, res, y, scratch);
}

const char *cu_igemm_describe(const cu_igemm *ig, int variant, char *buf, size_t len)
{
    const igemm_variant &v = ig->v[variant];
    if (v.stem) {
        snprintf(buf, len, "RGB stem dp4a kernel, a pixel a thread");
        return buf;
    }
    if (v.bm == 0) {
        snprintf(buf, len, "1x1 dp4a kernel, %d threads a block%s", v.threads, ig->p.small_acc ? "" : ", int32 conversions");
        return buf;
    }
    if (v.tma) {
        snprintf(buf, len, "TMA wgmma.s8 %dx%d, warp-specialised, persistent%s%s%s", v.bm, v.bn,
                 v.bm == TMA_PP_BM ? ", ping-pong" : "", v.per_sm == 2 ? ", 2 blocks an SM" : "",
                 ig->p.small_acc ? "" : ", int32 conversions");
        return buf;
    }
    char split[32] = "";
    if (v.k_splits > 1) snprintf(split, sizeof split, ", split-K %d", v.k_splits);
    snprintf(buf, len, "implicit-GEMM %s %dx%d, %d-byte gather%s%s%s%s", v.wg ? "wgmma.s8" : "mma.s8", v.bm, v.bn, ig->vec,
             ig->prep == PREP_S2D ? ", space-to-depth input" : ig->prep == PREP_WIDEN ? ", input widened to 4 channels" : "",
             v.persistent ? ", persistent" : "", split, ig->p.small_acc || v.k_splits > 1 ? "" : ", int32 conversions");
    return buf;
}
