/* INT8 register blocks on Intel AMX tiles (AMX-INT8's TDPBSUD), for the
 * direct convolution path (kernels.h: qfi_i8_block_fn with a tile layout).
 * One TDPBSUD multiplies a 16 x 4kq s8 tile of weights (16 output channels,
 * kq quads of input channels) by a kq x 16 tile of u8 quads (16 positions)
 * into 16 x 16 int32: up to 16x the work of a 512-bit vpdpbusd. The packed
 * activations (conv_int8.c: per quad a plane of positions, 4 channels each)
 * are already the B operand's layout, one tile row per quad at the plane
 * stride, so only the weights are packed differently. Sums are exact int32,
 * so the blocks give the vector blocks' bits. */
#define _DEFAULT_SOURCE 1 /* syscall(), which -std=c11 hides */
#include "kernels.h"
#include <string.h>

#if defined(__linux__) && defined(__x86_64__) && \
    ((defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11) || (defined(__clang__) && __clang_major__ >= 12))
#define HAVE_AMX_KERNELS 1
#include <cpuid.h>
#include <immintrin.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

int64_t qfi_cpu_i8_tile_kq(int64_t quads)
{
    if (quads <= QFI_I8_TILE_KQ) return quads;
    /* the group size in [8, 16] that pads the reduction least (24 quads: 2 x 12) */
    int64_t best = QFI_I8_TILE_KQ;
    for (int64_t kq = QFI_I8_TILE_KQ; kq >= 8; kq--)
        if ((quads + kq - 1) / kq * kq < (quads + best - 1) / best * best) best = kq;
    return best;
}

#ifdef HAVE_AMX_KERNELS
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* CPUID.(7,0):EDX bit 24 AMX-TILE, bit 25 AMX-INT8; Linux lets a process use
 * the tiles' 8 KB of state only once it asked (arch_prctl), and that answer
 * is final, so it is asked once. */
bool qfi_cpu_amx_usable(void)
{
    static atomic_int known = -1;
    int v = atomic_load_explicit(&known, memory_order_relaxed);
    if (v < 0) {
        unsigned a, b, c, d;
        v = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 24 & 1) && (d >> 25 & 1) &&
            syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
        atomic_store_explicit(&known, v, memory_order_relaxed);
    }
    return v;
}

/* LDTILECFG's 64 bytes: palette 1; tiles 0-3 accumulate 16 x 16 int32, 4-5
 * hold weights (16 rows of 4kq bytes), 6-7 activations (kq rows of 16 quads). */
typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

#define TAMX __attribute__((target("amx-tile,amx-int8")))

/* A thread's tiles stay configured between calls (only these blocks use them),
 * so a layer reloads the configuration only when its kq differs. */
static _Thread_local int64_t configured_kq;

TAMX static void configure(int64_t kq)
{
    if (configured_kq == kq) return;
    tile_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 4; t++) c.rows[t] = 16, c.colsb[t] = 64;
    for (int t = 4; t < 6; t++) c.rows[t] = 16, c.colsb[t] = (uint16_t)(4 * kq);
    for (int t = 6; t < 8; t++) c.rows[t] = (uint8_t)kq, c.colsb[t] = 64;
    /* gcc 12 does not see that LDTILECFG reads the whole block and drops the
     * stores of rows and colsb: tell it the memory is read */
    __asm__ __volatile__("" : : "r"(&c) : "memory");
    _tile_loadconfig(&c);
    configured_kq = kq;
}

/* out (32, 16*NV) per qfi_i8_block_fn; w per tap and group of kq quads: two
 * tiles of 16 output channels, each 16 rows of 4kq bytes. */
TAMX static inline __attribute__((always_inline)) void amx_block(const qfi_i8_geom *g, const uint8_t *x,
                                                                  const int32_t *w, int32_t *out, int nv)
{
    const int64_t kq = g->kq, groups = g->quads / kq, wtile = 64 * kq;
    configure(kq);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    const int8_t *wp = (const int8_t *)w;
    for (int64_t t = 0; t < g->taps; t++)
        for (int64_t q = 0; q < groups; q++, wp += 2 * wtile) {
            const uint8_t *xb = x + q * kq * g->stride + g->off[t];
            _tile_loadd(4, wp, 4 * kq);
            _tile_loadd(5, wp + wtile, 4 * kq);
            _tile_loadd(6, xb, g->stride);
            _tile_dpbsud(0, 4, 6);
            _tile_dpbsud(2, 5, 6);
            if (nv == 2) {
                _tile_loadd(7, xb + 64, g->stride);
                _tile_dpbsud(1, 4, 7);
                _tile_dpbsud(3, 5, 7);
            }
        }
    const int64_t row = 16 * nv; /* out's row: one output channel's positions */
    _tile_stored(0, out, row * 4);
    _tile_stored(2, out + 16 * row, row * 4);
    if (nv == 2) {
        _tile_stored(1, out + 16, row * 4);
        _tile_stored(3, out + 16 * row + 16, row * 4);
    }
}

TAMX void qfi_cpu_amx_block_1(const qfi_i8_geom *g, const uint8_t *x, const int32_t *w, int32_t *out)
{
    amx_block(g, x, w, out, 1);
}
TAMX void qfi_cpu_amx_block_2(const qfi_i8_geom *g, const uint8_t *x, const int32_t *w, int32_t *out)
{
    amx_block(g, x, w, out, 2);
}
#else
bool qfi_cpu_amx_usable(void) { return false; }
#endif
