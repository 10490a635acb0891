/* The INT8 inner loops of the CPU engine, one instance per instruction set
 * (kernels.h's qfi_i8_isa): the integer GEMM's register blocks, the depthwise
 * rows and the row expansion that feeds them, and the requantizing epilogue.
 * Integer sums are exact in any order and the epilogue performs
 * lib/quant_math.h's IEEE operations one at a time, so every instance gives
 * the same bits; tests run each instance the CPU has against the others. */
#include "kernels.h"

#if (defined(__x86_64__) || defined(__i386__)) && \
    ((defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11) || (defined(__clang__) && __clang_major__ >= 12))
#define HAVE_X86_INT8_KERNELS 1
#include <cpuid.h>
#include <immintrin.h>
#endif

/* ---- plain C ------------------------------------------------------------------ */

/* The epilogue of one element: a = acc + addend in int32 (wrapping: the sum is
 * exact whenever the true accumulator plus bias fits, which the quantizer and
 * the .qfm reader guarantee), then lib/quant_math.h's float steps. */
static inline int32_t add_wrap(int32_t a, int32_t b) { return (int32_t)((uint32_t)a + (uint32_t)b); }

static void requant_run_c(const qfi_requant *rq, const int32_t *acc, int64_t n, int32_t add, float m,
                          const int8_t *res, void *y, int64_t at)
{
    const qfi_requant q = *rq; /* a local copy: the stores to y cannot alias it */
    for (int64_t i = 0; i < n; i++) {
        float r = res ? (float)((int32_t)res[at + i] - q.z_r) : 0.0f;
        float v = qfi_requant_value(&q, qfi_i2f(add_wrap(acc[i], add)), m, res != NULL, r);
        qfi_requant_store(&q, y, at + i, v);
    }
}

static void requant_cols_c(const qfi_requant *rq, const int32_t *acc, int64_t n, int32_t add0, const int32_t *add,
                           const float *m, const int8_t *res, void *y, int64_t at)
{
    const qfi_requant q = *rq;
    for (int64_t i = 0; i < n; i++) {
        float r = res ? (float)((int32_t)res[at + i] - q.z_r) : 0.0f;
        int32_t a = add_wrap(acc[i], add ? add_wrap(add0, add[i]) : add0);
        qfi_requant_store(&q, y, at + i, qfi_requant_value(&q, qfi_i2f(a), m[i], res != NULL, r));
    }
}

/* The smooth activations (SiLU, Sigmoid, HardSwish, both GELUs) in loops
 * that vectorize, for the vector epilogues below: v[i], the clamped value of
 * output i before its rounding or conversion. linear_loop performs
 * qfi_requant_linear (one multiplier m1, or m_col[i] per output), act_loop
 * qfi_act_value_kinds with float_math.h's lane forms and flat selects, and
 * the clamp as glibc's fmaxf/fminf behave: so the same bits as the C loop,
 * which ran these one element at a time (YOLOv8n's INT8 convs, all SiLU, took
 * 3x their FP32 time on the CPU). `has` (which of add, m_col and res are
 * given: bits 1, 2, 4) and `act` are constants in each instance, so that no
 * test is left in a loop to stop gcc. */
static inline __attribute__((always_inline)) void linear_loop(const qfi_requant *rq, const int32_t *restrict acc,
                                                               int64_t n, int32_t add0, const int32_t *restrict add,
                                                               const float *restrict m_col, float m1,
                                                               const int8_t *restrict res, float *restrict v, int has)
{
    const float m_r = rq->m_r;
    const int32_t z_r = rq->z_r;
    for (int64_t i = 0; i < n; i++) {
        const int32_t a = add_wrap(acc[i], has & 1 ? add_wrap(add0, add[i]) : add0);
        const float lin = qfi_mul(qfi_i2f(a), has & 2 ? m_col[i] : m1);
        v[i] = has & 4 ? qfi_add(lin, qfi_mul((float)((int32_t)res[i] - z_r), m_r)) : lin;
    }
}
static inline __attribute__((always_inline)) void act_loop(const qfi_requant *rq, float *restrict v, int64_t n,
                                                            qf_act act)
{
    const float s = rq->act_s, lo = rq->lo, hi = rq->hi;
    for (int64_t i = 0; i < n; i++) {
        const float x = qfi_mul(v[i], s);
        float g;
        if (act == QF_ACT_GELU || act == QF_ACT_GELU_TANH) {
            g = qfi_div(qfi_gelu_lanes(x, act == QF_ACT_GELU_TANH), s);
        } else if (act == QF_ACT_HARD_SWISH) { /* qfi_hard_sigmoid's nested select, flat */
            float h = qfi_add(qfi_mul(1.0f / 6.0f, x), 0.5f);
            h = h > 1.0f ? 1.0f : h;
            h = h < 0.0f ? 0.0f : h;
            g = qfi_mul(v[i], h);
        } else {
            float d;
            const float nu = qfi_sigmoid_parts(x, &d);
            g = act == QF_ACT_SIGMOID ? qfi_div(nu, qfi_mul(d, s)) : qfi_mul(v[i], qfi_div(nu, d));
        }
        g = g >= lo ? g : lo;
        v[i] = g <= hi ? g : hi;
    }
}
QFI_SIMD_CLONES static void smooth_values(const qfi_requant *rq, const int32_t *restrict acc, int64_t n, int32_t add0,
                                          const int32_t *restrict add, const float *restrict m_col, float m1,
                                          const int8_t *restrict res, float *restrict v)
{
    switch ((add != NULL) | (m_col != NULL) << 1 | (res != NULL) << 2) {
    case 0: linear_loop(rq, acc, n, add0, add, m_col, m1, res, v, 0); break;
    case 1: linear_loop(rq, acc, n, add0, add, m_col, m1, res, v, 1); break;
    case 2: linear_loop(rq, acc, n, add0, add, m_col, m1, res, v, 2); break;
    case 3: linear_loop(rq, acc, n, add0, add, m_col, m1, res, v, 3); break;
    case 4: linear_loop(rq, acc, n, add0, add, m_col, m1, res, v, 4); break;
    case 5: linear_loop(rq, acc, n, add0, add, m_col, m1, res, v, 5); break;
    case 6: linear_loop(rq, acc, n, add0, add, m_col, m1, res, v, 6); break;
    default: linear_loop(rq, acc, n, add0, add, m_col, m1, res, v, 7); break;
    }
    switch (rq->act) {
    case QF_ACT_SILU: act_loop(rq, v, n, QF_ACT_SILU); break;
    case QF_ACT_SIGMOID: act_loop(rq, v, n, QF_ACT_SIGMOID); break;
    case QF_ACT_HARD_SWISH: act_loop(rq, v, n, QF_ACT_HARD_SWISH); break;
    case QF_ACT_GELU_TANH: act_loop(rq, v, n, QF_ACT_GELU_TANH); break;
    default: act_loop(rq, v, n, QF_ACT_GELU); break;
    }
}
enum { SMOOTH_CHUNK = 64 }; /* values a smooth_values call, on the stack */

static void dw_expand_row_c(const uint8_t *row, int64_t s, int64_t d, int64_t n, uint8_t *e)
{
    for (int64_t i = 0; i < n; i++)
        for (int j = 0; j < 4; j++) e[4 * i + j] = row[s * i + d * j];
}
static void dw_expand_c(const uint8_t *src, int64_t src_stride, int64_t nr, int64_t s, int64_t d, int64_t n,
                        uint8_t *e)
{
    for (int64_t r = 0; r < nr; r++) dw_expand_row_c(src + r * src_stride, s, d, n, e + r * n * 4);
}

static void interleave4_c(const uint8_t *x, int64_t plane, int64_t n, uint32_t *r)
{
    for (int64_t i = 0; i < n; i++) {
        uint8_t *o = (uint8_t *)(r + i);
        for (int c = 0; c < 4; c++) o[c] = (uint8_t)(x[c * plane + i] ^ 0x80);
    }
}

static void dw_pad_c(const int8_t *x, int64_t h, int64_t w, int64_t pt, int64_t pl, int64_t hp, int64_t prow,
                     uint8_t fill, uint8_t *out)
{
    for (int64_t r = 0; r < hp; r++, out += prow) {
        const int64_t i = r - pt;
        if (i < 0 || i >= h) {
            memset(out, fill, (size_t)prow);
            continue;
        }
        memset(out, fill, (size_t)pl);
        for (int64_t j = 0; j < w; j++) out[pl + j] = (uint8_t)(x[i * w + j] ^ 0x80);
        memset(out + pl + w, fill, (size_t)(prow - pl - w));
    }
}

static void requant_rows_c(const qfi_requant *rq, const int32_t *acc, int64_t acc_stride, int64_t rows, int64_t n,
                           const int32_t *add, const float *m, const int8_t *res, void *y, int64_t at,
                           int64_t y_stride)
{
    for (int64_t r = 0; r < rows; r++) requant_run_c(rq, acc + r * acc_stride, n, add[r], m[r], res, y, at + r * y_stride);
}

/* The dot product of a u8 quad and an s8 quad. */
static inline int32_t dot4(const uint8_t *u, const int8_t *s)
{
    return u[0] * s[0] + u[1] * s[1] + u[2] * s[2] + u[3] * s[3];
}

static void dw_plane_c(const uint8_t *e, int64_t step, const int64_t *off, int kh, int nd, int64_t kstep,
                       const int32_t *w, int64_t ho, int64_t wo, int32_t *acc)
{
    for (int64_t oh = 0; oh < ho; oh++)
        for (int64_t i = 0; i < wo; i++) {
            int32_t s = 0;
            for (int r = 0; r < kh; r++)
                for (int k = 0; k < nd; k++)
                    s += dot4(e + 4 * (oh * step + off[r] + i + k * kstep), (const int8_t *)&w[r * nd + k]);
            acc[oh * wo + i] = s;
        }
}

/* Plain C blocks: 4 rows x nv vectors of 4 positions. */
#define C_MB 4
#define C_VW 4
static inline void block_c(const qfi_i8_geom *g, const uint8_t *x, const int32_t *w, int32_t *out, int len)
{
    int32_t acc[C_MB][2 * C_VW] = {{0}};
    for (int64_t q = 0; q < g->quads; q++) {
        const uint8_t *xq = x + q * g->stride;
        const int32_t *wq = w + q * g->taps * C_MB;
        for (int64_t t = 0; t < g->taps; t++) {
            const uint8_t *xt = xq + g->off[t];
            for (int m = 0; m < C_MB; m++) {
                const int8_t *wb = (const int8_t *)&wq[t * C_MB + m];
                for (int i = 0; i < len; i++) acc[m][i] += dot4(xt + 4 * i, wb);
            }
        }
    }
    for (int m = 0; m < C_MB; m++)
        for (int i = 0; i < len; i++) out[m * len + i] = acc[m][i];
}
static void block_c_1(const qfi_i8_geom *g, const uint8_t *x, const int32_t *w, int32_t *out)
{
    block_c(g, x, w, out, C_VW);
}
static void block_c_2(const qfi_i8_geom *g, const uint8_t *x, const int32_t *w, int32_t *out)
{
    block_c(g, x, w, out, 2 * C_VW);
}

static const qfi_i8_kernels kernels_c = {
    .isa = QFI_I8_PORTABLE,
    .mb = C_MB, .nv = 2, .vw = C_VW, .wq = 1,
    .block = {block_c_1, block_c_2, NULL},
    .block_1t = {block_c_1, block_c_2, NULL},
    .block_9t = {block_c_1, block_c_2, NULL},
    .requant_run = requant_run_c,
    .requant_rows = requant_rows_c,
    .requant_cols = requant_cols_c,
    .dw_expand = dw_expand_c,
    .interleave4 = interleave4_c,
    .dw_pad = dw_pad_c,
    .dw_plane = dw_plane_c,
};

#ifdef HAVE_X86_INT8_KERNELS
/* ---- VNNI register blocks --------------------------------------------------------
 * Defines NAME for TARGET: out (MB, NV*VW) int32 = the reduction of kernels.h's
 * qfi_i8_block_fn, MB*NV accumulators in registers; per quad and tap NV vector
 * loads and MB weight broadcasts feed MB*NV vpdpbusd. TAPS > 0 fixes the
 * number of taps at compile time (unrolled). One body for every width: VT is
 * the accumulators' vector type, LOAD/BCAST/DPBUSD/STORE its operations
 * (LOAD and BCAST may return other types, which DPBUSD takes). */
#define DEFINE_I8_BLOCK(NAME, TARGET, VT, LOAD, BCAST, DPBUSD, STORE, ZERO, VW, MB, NV, TAPS, WQ)                      \
    TARGET static void NAME(const qfi_i8_geom *g, const uint8_t *x, const int32_t *w, int32_t *out)                    \
    {                                                                                                                  \
        VT acc[MB][NV];                                                                                                \
        for (int m = 0; m < MB; m++)                                                                                   \
            for (int v = 0; v < NV; v++) acc[m][v] = ZERO();                                                           \
        const int64_t taps = TAPS > 0 ? TAPS : g->taps;                                                                \
        for (int64_t q = 0; q < g->quads; q++) {                                                                       \
            const uint8_t *xq = x + q * g->stride;                                                                     \
            const int32_t *wq = w + q * taps * MB * WQ;                                                                \
            QFI_UNROLL(TAPS) for (int64_t t = 0; t < taps; t++) {                                                          \
                const uint8_t *xt = xq + g->off[t];                                                                    \
                __typeof__(LOAD(xt)) in[NV];                                                                           \
                for (int v = 0; v < NV; v++) in[v] = LOAD((const void *)(xt + v * VW * 4));                            \
                for (int m = 0; m < MB; m++) {                                                                         \
                    const __typeof__(BCAST(wq)) wv = BCAST(wq + (t * MB + m) * WQ);                                    \
                    for (int v = 0; v < NV; v++) acc[m][v] = DPBUSD(acc[m][v], in[v], wv);                             \
                }                                                                                                      \
            }                                                                                                          \
        }                                                                                                              \
        for (int m = 0; m < MB; m++)                                                                                   \
            for (int v = 0; v < NV; v++) STORE((void *)(out + (m * NV + v) * VW), acc[m][v]);                         \
    }
#define DEFINE_I8_BLOCKS(PREFIX, TARGET, VT, LOAD, BCAST, DPBUSD, STORE, ZERO, VW, MB, TAPS)                           \
    DEFINE_I8_BLOCK(PREFIX##_1, TARGET, VT, LOAD, BCAST, DPBUSD, STORE, ZERO, VW, MB, 1, TAPS, 1)                      \
    DEFINE_I8_BLOCK(PREFIX##_2, TARGET, VT, LOAD, BCAST, DPBUSD, STORE, ZERO, VW, MB, 2, TAPS, 1)                      \
    DEFINE_I8_BLOCK(PREFIX##_3, TARGET, VT, LOAD, BCAST, DPBUSD, STORE, ZERO, VW, MB, 3, TAPS, 1)

/* 512 bits: 8 rows x 3 vectors is 24 of the 32 registers accumulating, 3
 * inputs, broadcasts from memory; 11 loads per 24 vpdpbusd. */
#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi")))
#define LOAD512(p) _mm512_loadu_si512(p)
#define BCAST512(p) _mm512_set1_epi32(*(p))
#define STORE512(p, v) _mm512_storeu_si512(p, v)
DEFINE_I8_BLOCKS(block512, T512, __m512i, LOAD512, BCAST512, _mm512_dpbusd_epi32, STORE512, _mm512_setzero_si512, 16, 8,
                 0)
DEFINE_I8_BLOCKS(block512_1t, T512, __m512i, LOAD512, BCAST512, _mm512_dpbusd_epi32, STORE512, _mm512_setzero_si512,
                 16, 8, 1)
DEFINE_I8_BLOCKS(block512_9t, T512, __m512i, LOAD512, BCAST512, _mm512_dpbusd_epi32, STORE512, _mm512_setzero_si512,
                 16, 8, 9)

/* 256 bits, 16 registers: 4 rows x 3 vectors, 3 inputs and a broadcast. The
 * same source compiles twice: VEX-encoded for AVX-VNNI CPUs, EVEX-encoded for
 * AVX512-VNNI ones (the tests run the latter on AVX-512 machines). */
#define TVEX __attribute__((target("avx2,avxvnni,f16c")))
#define TEVEX __attribute__((target("avx2,f16c,avx512f,avx512vl,avx512vnni")))
#define LOAD256(p) _mm256_loadu_si256((const __m256i *)(p))
#define BCAST256(p) _mm256_set1_epi32(*(p))
#define STORE256(p, v) _mm256_storeu_si256((__m256i *)(p), v)
#define DPVEX(a, b, c) _mm256_dpbusd_avx_epi32(a, b, c)
DEFINE_I8_BLOCKS(block_vex, TVEX, __m256i, LOAD256, BCAST256, DPVEX, STORE256, _mm256_setzero_si256, 8, 4, 0)
DEFINE_I8_BLOCKS(block_vex_1t, TVEX, __m256i, LOAD256, BCAST256, DPVEX, STORE256, _mm256_setzero_si256, 8, 4, 1)
DEFINE_I8_BLOCKS(block_vex_9t, TVEX, __m256i, LOAD256, BCAST256, DPVEX, STORE256, _mm256_setzero_si256, 8, 4, 9)
DEFINE_I8_BLOCKS(block_evex, TEVEX, __m256i, LOAD256, BCAST256, _mm256_dpbusd_epi32, STORE256, _mm256_setzero_si256, 8,
                 4, 0)
DEFINE_I8_BLOCKS(block_evex_1t, TEVEX, __m256i, LOAD256, BCAST256, _mm256_dpbusd_epi32, STORE256,
                 _mm256_setzero_si256, 8, 4, 1)
DEFINE_I8_BLOCKS(block_evex_9t, TEVEX, __m256i, LOAD256, BCAST256, _mm256_dpbusd_epi32, STORE256,
                 _mm256_setzero_si256, 8, 4, 9)

/* AVX2 without VNNI: vpdpbusd's sum of four u8 x s8 products, exactly. The
 * bytes widen to 16-bit words, the even bytes of each quad apart from the odd
 * ones (u zero-extended, s sign-extended), and vpmaddwd sums each pair of
 * products into an int32 lane: |u*s| <= 255*128, so neither the words nor
 * their pair sums can overflow (vpmaddubsw's saturating pairs could). */
#define TAVX2 __attribute__((target("avx2,fma,f16c")))
#define INLINE_AVX2 TAVX2 static inline __attribute__((always_inline))
INLINE_AVX2 __m256i even_u8(__m256i u) { return _mm256_and_si256(u, _mm256_set1_epi16(0xff)); }
INLINE_AVX2 __m256i odd_u8(__m256i u) { return _mm256_srli_epi16(u, 8); }
INLINE_AVX2 __m256i even_s8(__m256i s) { return _mm256_srai_epi16(_mm256_slli_epi16(s, 8), 8); }
INLINE_AVX2 __m256i odd_s8(__m256i s) { return _mm256_srai_epi16(s, 8); }
/* The block's operands as those halves: each input vector widened once per
 * quad and tap, each weight stored widened (wq 2); 4 rows x at most 2 vectors
 * keep the accumulators and operands in the 16 registers. */
typedef struct halves {
    __m256i even, odd;
} halves;
INLINE_AVX2 halves load_halves(const void *p)
{
    const __m256i u = LOAD256(p);
    return (halves){even_u8(u), odd_u8(u)};
}
INLINE_AVX2 halves bcast_halves(const int32_t *w) /* a quad packed as its even and odd words (qfi_i8_put_quad) */
{
    return (halves){_mm256_set1_epi32(w[0]), _mm256_set1_epi32(w[1])};
}
INLINE_AVX2 __m256i dot_halves(__m256i acc, halves u, halves s)
{
    return _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_madd_epi16(u.even, s.even), _mm256_madd_epi16(u.odd, s.odd)));
}
INLINE_AVX2 __m256i dpbusd_avx2(__m256i acc, __m256i u, __m256i s)
{
    return dot_halves(acc, (halves){even_u8(u), odd_u8(u)}, (halves){even_s8(s), odd_s8(s)});
}
#define DEFINE_AVX2_BLOCKS(PREFIX, TAPS)                                                                               \
    DEFINE_I8_BLOCK(PREFIX##_1, TAVX2, __m256i, load_halves, bcast_halves, dot_halves, STORE256, _mm256_setzero_si256, \
                    8, 4, 1, TAPS, 2)                                                                                  \
    DEFINE_I8_BLOCK(PREFIX##_2, TAVX2, __m256i, load_halves, bcast_halves, dot_halves, STORE256, _mm256_setzero_si256, \
                    8, 4, 2, TAPS, 2)
DEFINE_AVX2_BLOCKS(block_avx2, 0)
DEFINE_AVX2_BLOCKS(block_avx2_1t, 1)
/* Nine taps unrolled spilled: gcc kept every tap's widened operands live, a
 * 4 KB frame, and ResNet-20 ran at half the speed of the loop over taps. */
#define block_avx2_9t_1 block_avx2_1
#define block_avx2_9t_2 block_avx2_2

/* ---- depthwise planes ---------------------------------------------------------------- */
#define DEFINE_DW_PLANE(NAME, TARGET, VT, LOAD, BCAST, DPBUSD, STORE, ZERO, VW)                                       \
    TARGET static void NAME(const uint8_t *e, int64_t step, const int64_t *off, int kh, int nd, int64_t kstep,        \
                            const int32_t *w, int64_t ho, int64_t wo, int32_t *acc)                                   \
    {                                                                                                                  \
        const uint8_t *rows[QFI_DIRECT_MAX_TAPS];                                                                      \
        for (int64_t oh = 0; oh < ho; oh++, acc += wo) {                                                               \
            for (int r = 0; r < kh; r++) rows[r] = e + 4 * (oh * step + off[r]);                                       \
            int64_t i = 0;                                                                                             \
            for (; i + 2 * VW <= wo; i += 2 * VW) { /* two vectors: twice the work per weight broadcast */           \
                VT a0 = ZERO(), a1 = ZERO();                                                                           \
                for (int r = 0; r < kh; r++)                                                                           \
                    for (int k = 0; k < nd; k++) {                                                                     \
                        const uint8_t *p = rows[r] + 4 * (i + k * kstep);                                              \
                        const VT wv = BCAST(w + r * nd + k);                                                           \
                        a0 = DPBUSD(a0, LOAD((const void *)p), wv);                                                    \
                        a1 = DPBUSD(a1, LOAD((const void *)(p + 4 * VW)), wv);                                         \
                    }                                                                                                  \
                STORE((void *)(acc + i), a0);                                                                          \
                STORE((void *)(acc + i + VW), a1);                                                                     \
            }                                                                                                          \
            /* the tail's full vector runs into the next row, which overwrites it */                                   \
            for (; i < wo; i += VW) {                                                                                  \
                VT a0 = ZERO();                                                                                        \
                for (int r = 0; r < kh; r++)                                                                           \
                    for (int k = 0; k < nd; k++)                                                                       \
                        a0 = DPBUSD(a0, LOAD((const void *)(rows[r] + 4 * (i + k * kstep))), BCAST(w + r * nd + k)); \
                STORE((void *)(acc + i), a0);                                                                          \
            }                                                                                                          \
        }                                                                                                              \
    }
DEFINE_DW_PLANE(dw_plane512, T512, __m512i, LOAD512, BCAST512, _mm512_dpbusd_epi32, STORE512, _mm512_setzero_si512, 16)
DEFINE_DW_PLANE(dw_plane_vex, TVEX, __m256i, LOAD256, BCAST256, DPVEX, STORE256, _mm256_setzero_si256, 8)
DEFINE_DW_PLANE(dw_plane_evex, TEVEX, __m256i, LOAD256, BCAST256, _mm256_dpbusd_epi32, STORE256, _mm256_setzero_si256,
                8)
DEFINE_DW_PLANE(dw_plane_avx2, TAVX2, __m256i, LOAD256, BCAST256, dpbusd_avx2, STORE256, _mm256_setzero_si256, 8)

/* The vpermb indices that make 16 quads of taps from 64 bytes of a row:
 * byte j of quad i is row byte s*i + d*j (the 16 quads must span at most 64
 * bytes: 15s + 3d < 64). */
T512 static __m512i expand_perm512(int64_t s, int64_t d)
{
    uint8_t idx[64];
    for (int k = 0; k < 64; k++) idx[k] = (uint8_t)(s * (k / 4) + d * (k % 4));
    return _mm512_loadu_si512(idx);
}

/* Byte j of quad i is row[s*i + d*j]: one vpermb per 16 quads when the 16
 * quads span at most 64 bytes. */
T512 static void dw_expand512(const uint8_t *src, int64_t src_stride, int64_t nr, int64_t s, int64_t d, int64_t n,
                              uint8_t *e)
{
    if (15 * s + 3 * d >= 64) {
        dw_expand_c(src, src_stride, nr, s, d, n, e);
        return;
    }
    const __m512i perm = expand_perm512(s, d);
    for (int64_t r = 0; r < nr; r++, src += src_stride, e += 4 * n) {
        int64_t i = 0;
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_si512(e + 4 * i, _mm512_permutexvar_epi8(perm, _mm512_loadu_si512(src + s * i)));
        if (i < n) /* the row has 64 bytes to spare for the load */
            _mm512_mask_storeu_epi8(e + 4 * i, ~0ull >> (64 - 4 * (n - i)),
                                    _mm512_permutexvar_epi8(perm, _mm512_loadu_si512(src + s * i)));
    }
}

/* 64 positions at a time: byte then word unpacks interleave the four rows
 * within each 128-bit lane (lane L of u0..u3: positions 16L.. 16L+15, four
 * at a time), then a 4 x 4 transpose of lanes puts them in order. */
T512 static void interleave4_512(const uint8_t *x, int64_t plane, int64_t n, uint32_t *r)
{
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        const __m512i a = _mm512_loadu_si512(x + i), b = _mm512_loadu_si512(x + plane + i),
                      c = _mm512_loadu_si512(x + 2 * plane + i), d = _mm512_loadu_si512(x + 3 * plane + i);
        const __m512i ab0 = _mm512_unpacklo_epi8(a, b), ab1 = _mm512_unpackhi_epi8(a, b);
        const __m512i cd0 = _mm512_unpacklo_epi8(c, d), cd1 = _mm512_unpackhi_epi8(c, d);
        const __m512i u0 = _mm512_unpacklo_epi16(ab0, cd0), u1 = _mm512_unpackhi_epi16(ab0, cd0);
        const __m512i u2 = _mm512_unpacklo_epi16(ab1, cd1), u3 = _mm512_unpackhi_epi16(ab1, cd1);
        const __m512i t0 = _mm512_shuffle_i64x2(u0, u1, 0x44), t1 = _mm512_shuffle_i64x2(u0, u1, 0xee);
        const __m512i t2 = _mm512_shuffle_i64x2(u2, u3, 0x44), t3 = _mm512_shuffle_i64x2(u2, u3, 0xee);
        _mm512_storeu_si512(r + i, _mm512_xor_si512(_mm512_shuffle_i64x2(t0, t2, 0x88), flip));
        _mm512_storeu_si512(r + i + 16, _mm512_xor_si512(_mm512_shuffle_i64x2(t0, t2, 0xdd), flip));
        _mm512_storeu_si512(r + i + 32, _mm512_xor_si512(_mm512_shuffle_i64x2(t1, t3, 0x88), flip));
        _mm512_storeu_si512(r + i + 48, _mm512_xor_si512(_mm512_shuffle_i64x2(t1, t3, 0xdd), flip));
    }
    interleave4_c(x + i, plane, n - i, r + i);
}

/* 64 bytes a step: the row's bytes by a masked load (lanes outside the row
 * neither read nor fault), flipped, over the fill. */
T512 static void dw_pad512(const int8_t *x, int64_t h, int64_t w, int64_t pt, int64_t pl, int64_t hp, int64_t prow,
                           uint8_t fill, uint8_t *out)
{
    const __m512i vfill = _mm512_set1_epi8((char)fill), flip = _mm512_set1_epi8((char)0x80);
    for (int64_t r = 0; r < hp; r++, out += prow) {
        const int64_t i = r - pt;
        for (int64_t c0 = 0; c0 < prow; c0 += 64) {
            const int64_t room = prow - c0 < 64 ? prow - c0 : 64;
            __m512i v = vfill;
            if (i >= 0 && i < h) {
                int64_t lo = pl - c0, hi = pl + w - c0; /* lanes [lo, hi) hold x's row */
                lo = lo < 0 ? 0 : lo;
                hi = hi > room ? room : hi;
                if (hi > lo) {
                    const __mmask64 k = (~0ull >> (64 - (hi - lo))) << lo;
                    v = _mm512_mask_mov_epi8(vfill, k,
                                             _mm512_xor_si512(_mm512_maskz_loadu_epi8(k, x + i * w + c0 - pl), flip));
                }
            }
            _mm512_mask_storeu_epi8(out + c0, ~0ull >> (64 - room), v);
        }
    }
}

/* dw_pad and dw_expand512 in one pass: a group of 16 quads is one masked
 * load of the input row, read where it lies in the padded row (lanes in the
 * padding hold `fill`; masked-off lanes neither read nor fault), flipped,
 * and one vpermb; rows of the vertical padding are `fill` throughout. The
 * padded plane was most of the depthwise time of a small plane (each row a
 * loop of masked 64-byte chunks) and, on a large one, one more pass over
 * the plane. */
T512 static bool dw_pad_expand512(const int8_t *x, int64_t h, int64_t w, int64_t pt, int64_t pl, int64_t hp, int64_t s,
                                  int64_t d, int64_t n, int64_t phases, uint8_t fill, uint8_t *e)
{
    enum { MAX_GROUPS = 64 };
    const int64_t groups = (n + 15) / 16;
    if (15 * s + 3 * d >= 64 || groups > MAX_GROUPS) return false;
    const __m512i perm = expand_perm512(s, d), vfill = _mm512_set1_epi8((char)fill),
                  flip = _mm512_set1_epi8((char)0x80);
    /* per group: the lanes that hold input columns (the same on every row) */
    __mmask64 in_row[MAX_GROUPS];
    for (int64_t g = 0; g < groups; g++) {
        const int64_t c0 = s * 16 * g - pl; /* the input column of lane 0 */
        const int64_t lo = c0 < 0 ? -c0 : 0, hi = w - c0 < 64 ? w - c0 : 64;
        in_row[g] = hi > lo ? (~0ull >> (64 - (hi - lo))) << lo : 0;
    }
    const __mmask64 tail = n % 16 ? ~0ull >> (64 - 4 * (n % 16)) : ~0ull;
    const int64_t per_phase = (hp + phases - 1) / phases;
    for (int64_t r = 0; r < hp; r++) {
        const int64_t i = r - pt;
        uint8_t *er = e + 4 * n * (r % phases * per_phase + r / phases);
        for (int64_t g = 0; g < groups; g++) {
            __m512i v = vfill;
            if (i >= 0 && i < h && in_row[g]) {
                const int8_t *at = x + i * w + (s * 16 * g - pl); /* lane 0's column; only in_row lanes are read */
                v = _mm512_permutexvar_epi8(
                    perm, _mm512_mask_mov_epi8(vfill, in_row[g],
                                               _mm512_xor_si512(_mm512_maskz_loadu_epi8(in_row[g], at), flip)));
            }
            _mm512_mask_storeu_epi8(er + 64 * g, g + 1 < groups ? ~0ull : tail, v);
        }
    }
    return true;
}

/* 256 bits without byte permutes across lanes: each 128-bit lane makes 4
 * quads from its own 16-byte load (pshufb), when 4 quads span 16 bytes. */
#define DEFINE_DW_EXPAND256(NAME, TARGET)                                                                              \
    TARGET static void NAME(const uint8_t *src, int64_t src_stride, int64_t nr, int64_t s, int64_t d, int64_t n,      \
                            uint8_t *e)                                                                                \
    {                                                                                                                  \
        if (3 * s + 3 * d >= 16) {                                                                                     \
            dw_expand_c(src, src_stride, nr, s, d, n, e);                                                              \
            return;                                                                                                    \
        }                                                                                                              \
        uint8_t idx[32];                                                                                               \
        for (int k = 0; k < 32; k++) idx[k] = (uint8_t)(s * (k % 16 / 4) + d * (k % 4));                               \
        const __m256i perm = _mm256_loadu_si256((const __m256i *)idx);                                                \
        for (int64_t r = 0; r < nr; r++, src += src_stride, e += 4 * n) {                                              \
            int64_t i = 0;                                                                                             \
            for (; i + 8 <= n; i += 8) {                                                                               \
                __m256i v = _mm256_loadu2_m128i((const __m128i *)(src + s * (i + 4)), (const __m128i *)(src + s * i)); \
                _mm256_storeu_si256((__m256i *)(e + 4 * i), _mm256_shuffle_epi8(v, perm));                           \
            }                                                                                                          \
            if (i < n) dw_expand_row_c(src + s * i, s, d, n - i, e + 4 * i);                                           \
        }                                                                                                              \
    }
DEFINE_DW_EXPAND256(dw_expand_vex, TVEX)
DEFINE_DW_EXPAND256(dw_expand_evex, TEVEX)
DEFINE_DW_EXPAND256(dw_expand_avx2, TAVX2)

/* ---- the requantizing epilogue ------------------------------------------------------
 * lib/quant_math.h's steps on a vector: (float)a rounded to nearest (cvtdq2ps),
 * one product, the residual's product and sum, then glibc's fmaxf(v, lo) and
 * fminf(v, hi) -- v if v >= lo (resp. <= hi), else the bound, so a NaN gives
 * the bound and a zero keeps its sign (a float output stores it) -- then
 * for int8 rint (cvtps2dq, ties to even, like rintf in the same rounding
 * mode) plus the zero point, for half the rounding to nearest even of
 * qf_f32_to_f16 (vcvtps2ph). The smooth activations take their values from
 * smooth_values. */
#define INLINE512 T512 static inline __attribute__((always_inline))
/* (out: the output dtype, a constant where each loop below is instanced) */
INLINE512 __m512 requant16(qf_dtype out, __m512i a, __m512 m, __m512 r, __m512 m_r, bool has_res, __m512 lo, __m512 hi)
{
    __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(a), m);
    if (has_res) v = _mm512_add_ps(v, _mm512_mul_ps(r, m_r));
    if (out == QF_I8) /* vmaxps / vminps: the bound for a NaN too; a zero's sign the conversion drops (4 % of ResNet-20) */
        return _mm512_min_ps(_mm512_max_ps(v, lo), hi);
    v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, lo, _CMP_GE_OQ), lo, v);
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, hi, _CMP_LE_OQ), hi, v);
}
/* Outputs at .. at + 15 (mask k) of y in dtype out. */
INLINE512 void store16(qf_dtype out, void *y, int64_t at, __mmask16 k, __m512 v, __m512i vzo)
{
    switch (out) {
    case QF_I8:
        _mm_mask_storeu_epi8((int8_t *)y + at, k, _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(v), vzo)));
        break;
    case QF_F16:
        _mm256_mask_storeu_epi16((uint16_t *)y + at, k, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        break;
    default: _mm512_mask_storeu_ps((float *)y + at, k, v);
    }
}

/* A smooth activation's epilogue: values by smooth_values, stored 16 at a time. */
T512 static void smooth_store512(const qfi_requant *rq, const int32_t *acc, int64_t n, int32_t add0, const int32_t *add,
                               const float *m_col, float m1, const int8_t *res, void *y, int64_t at)
{
    const __m512i vzo = _mm512_set1_epi32(rq->z_out);
    float v[SMOOTH_CHUNK];
    for (int64_t i = 0; i < n; i += SMOOTH_CHUNK) {
        const int64_t c = n - i < SMOOTH_CHUNK ? n - i : SMOOTH_CHUNK;
        smooth_values(rq, acc + i, c, add0, add ? add + i : NULL, m_col ? m_col + i : NULL, m1, res ? res + at + i : NULL, v);
        for (int64_t j = 0; j < c; j += 16) {
            const __mmask16 k = c - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (c - j)) - 1);
            store16(rq->out, y, at + i + j, k, _mm512_maskz_loadu_ps(k, v + j), vzo);
        }
    }
}

/* The epilogues without a smooth activation, one loop per output dtype. */
INLINE512 void run512_as(qf_dtype out, const qfi_requant *rq, const int32_t *acc, int64_t n, int32_t add, float m,
                         const int8_t *res, void *y, int64_t at)
{
    const __m512i va = _mm512_set1_epi32(add), vzr = _mm512_set1_epi32(rq->z_r), vzo = _mm512_set1_epi32(rq->z_out);
    const __m512 vm = _mm512_set1_ps(m), vmr = _mm512_set1_ps(rq->m_r), lo = _mm512_set1_ps(rq->lo),
                 hi = _mm512_set1_ps(rq->hi);
    const int8_t *ro = res ? res + at : NULL;
    int64_t i = 0;
    if (out == QF_I8) /* 32 at a time without masks, their bytes in one store */
        for (; i + 32 <= n; i += 32) {
            const __m512i a0 = _mm512_add_epi32(_mm512_loadu_si512(acc + i), va),
                          a1 = _mm512_add_epi32(_mm512_loadu_si512(acc + i + 16), va);
            __m512 r0 = _mm512_setzero_ps(), r1 = r0;
            if (ro) {
                const __m256i rb = _mm256_loadu_si256((const __m256i *)(ro + i));
                r0 = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(rb)), vzr));
                r1 = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(rb, 1)), vzr));
            }
            const __m128i b0 = _mm512_cvtepi32_epi8(
                              _mm512_add_epi32(_mm512_cvtps_epi32(requant16(out, a0, vm, r0, vmr, ro != NULL, lo, hi)), vzo)),
                          b1 = _mm512_cvtepi32_epi8(
                              _mm512_add_epi32(_mm512_cvtps_epi32(requant16(out, a1, vm, r1, vmr, ro != NULL, lo, hi)), vzo));
            _mm256_storeu_si256((__m256i *)((int8_t *)y + at + i), _mm256_inserti128_si256(_mm256_castsi128_si256(b0), b1, 1));
        }
    for (; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512i a = _mm512_add_epi32(_mm512_maskz_loadu_epi32(k, acc + i), va);
        __m512 r = _mm512_setzero_ps();
        if (ro) r = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(k, ro + i)), vzr));
        store16(out, y, at + i, k, requant16(out, a, vm, r, vmr, ro != NULL, lo, hi), vzo);
    }
}
INLINE512 void cols512_as(qf_dtype out, const qfi_requant *rq, const int32_t *acc, int64_t n, int32_t add0,
                          const int32_t *add, const float *m, const int8_t *res, void *y, int64_t at)
{
    const __m512i va0 = _mm512_set1_epi32(add0), vzr = _mm512_set1_epi32(rq->z_r), vzo = _mm512_set1_epi32(rq->z_out);
    const __m512 vmr = _mm512_set1_ps(rq->m_r), lo = _mm512_set1_ps(rq->lo), hi = _mm512_set1_ps(rq->hi);
    const int8_t *ro = res ? res + at : NULL;
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512i a = _mm512_add_epi32(_mm512_maskz_loadu_epi32(k, acc + i), va0);
        if (add) a = _mm512_add_epi32(a, _mm512_maskz_loadu_epi32(k, add + i));
        __m512 r = _mm512_setzero_ps();
        if (ro) r = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(k, ro + i)), vzr));
        store16(out, y, at + i, k, requant16(out, a, _mm512_maskz_loadu_ps(k, m + i), r, vmr, ro != NULL, lo, hi), vzo);
    }
}

T512 static void requant_run512(const qfi_requant *rq, const int32_t *acc, int64_t n, int32_t add, float m,
                                const int8_t *res, void *y, int64_t at)
{
    if (qfi_act_smooth(rq->act)) smooth_store512(rq, acc, n, add, NULL, NULL, m, res, y, at);
    else if (rq->out == QF_I8) run512_as(QF_I8, rq, acc, n, add, m, res, y, at);
    else if (rq->out == QF_F16) run512_as(QF_F16, rq, acc, n, add, m, res, y, at);
    else run512_as(QF_F32, rq, acc, n, add, m, res, y, at);
}

/* One call for a register block's rows: the loop-invariant vectors are set once. */
T512 static void requant_rows512(const qfi_requant *rq, const int32_t *acc, int64_t acc_stride, int64_t rows,
                                 int64_t n, const int32_t *add, const float *m, const int8_t *res, void *y, int64_t at,
                                 int64_t y_stride)
{
    if (rq->act != QF_ACT_NONE || rq->out != QF_I8) {
        for (int64_t r = 0; r < rows; r++)
            requant_run512(rq, acc + r * acc_stride, n, add[r], m[r], res, y, at + r * y_stride);
        return;
    }
    for (int64_t r = 0; r < rows; r++) run512_as(QF_I8, rq, acc + r * acc_stride, n, add[r], m[r], res, y, at + r * y_stride);
}

T512 static void requant_cols512(const qfi_requant *rq, const int32_t *acc, int64_t n, int32_t add0, const int32_t *add,
                                 const float *m, const int8_t *res, void *y, int64_t at)
{
    if (qfi_act_smooth(rq->act)) smooth_store512(rq, acc, n, add0, add, m, 0.0f, res, y, at);
    else if (rq->out == QF_I8) cols512_as(QF_I8, rq, acc, n, add0, add, m, res, y, at);
    else if (rq->out == QF_F16) cols512_as(QF_F16, rq, acc, n, add0, add, m, res, y, at);
    else cols512_as(QF_F32, rq, acc, n, add0, add, m, res, y, at);
}

/* 256 bits: AVX2 has no masked stores of bytes or halves, so 8 at a time and
 * a tail of fewer than 8 as one more vector on copies (the 3x3 convs' rows of
 * 8 to 32 outputs end mid-vector; the C loop for them was 12 % of ResNet-20);
 * the smooth activations' values from smooth_values, their tail stored one
 * by one. */
static void tail_out(const qfi_requant *rq, const unsigned char *y8, int64_t n, void *y, int64_t at)
{
    const size_t esz = qf_dtype_info(rq->out)->size;
    memcpy((char *)y + (size_t)at * esz, y8, (size_t)n * esz);
}
#define DEFINE_REQUANT256(SUFFIX, TARGET)                                                                              \
    TARGET static inline __m256 requant8##SUFFIX(__m256i a, __m256 m, __m256 r, __m256 m_r, bool has_res, __m256 lo,   \
                                                 __m256 hi)                                                            \
    {                                                                                                                  \
        __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(a), m);                                                            \
        if (has_res) v = _mm256_add_ps(v, _mm256_mul_ps(r, m_r));                                                      \
        v = _mm256_blendv_ps(lo, v, _mm256_cmp_ps(v, lo, _CMP_GE_OQ));                                                 \
        return _mm256_blendv_ps(hi, v, _mm256_cmp_ps(v, hi, _CMP_LE_OQ));                                              \
    }                                                                                                                  \
    /* outputs at .. at + 7 of y in rq->out's dtype (int8: rint plus the zero point, packed) */                        \
    TARGET static inline void store8##SUFFIX(const qfi_requant *rq, void *y, int64_t at, __m256 v, __m256i vzo)        \
    {                                                                                                                  \
        if (rq->out == QF_I8) {                                                                                        \
            const __m256i q = _mm256_add_epi32(_mm256_cvtps_epi32(v), vzo);                                            \
            __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));                    \
            _mm_storel_epi64((__m128i *)((int8_t *)y + at), _mm_packs_epi16(w, w));                                    \
        } else if (rq->out == QF_F16) {                                                                                \
            _mm_storeu_si128((__m128i *)((uint16_t *)y + at), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); \
        } else {                                                                                                       \
            _mm256_storeu_ps((float *)y + at, v);                                                                      \
        }                                                                                                              \
    }                                                                                                                  \
    TARGET static inline __m256 res8##SUFFIX(const int8_t *r, __m256i z)                                               \
    {                                                                                                                  \
        return _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)r)), z));     \
    }                                                                                                                  \
    /* a smooth activation's epilogue: values by smooth_values, stored 8 at a time, the tail one by one */                            \
    TARGET static void smooth_store##SUFFIX(const qfi_requant *rq, const int32_t *acc, int64_t n, int32_t add0,          \
                                          const int32_t *add, const float *m_col, float m1, const int8_t *res,         \
                                          void *y, int64_t at)                                                         \
    {                                                                                                                  \
        const __m256i vzo = _mm256_set1_epi32(rq->z_out);                                                              \
        float v[SMOOTH_CHUNK];                                                                                           \
        for (int64_t i = 0; i < n; i += SMOOTH_CHUNK) {                                                                  \
            const int64_t c = n - i < SMOOTH_CHUNK ? n - i : SMOOTH_CHUNK;                                                 \
            smooth_values(rq, acc + i, c, add0, add ? add + i : NULL, m_col ? m_col + i : NULL, m1,                      \
                        res ? res + at + i : NULL, v);                                                                 \
            int64_t j = 0;                                                                                             \
            for (; j + 8 <= c; j += 8) store8##SUFFIX(rq, y, at + i + j, _mm256_loadu_ps(v + j), vzo);                 \
            for (; j < c; j++) qfi_requant_store(rq, y, at + i + j, v[j]);                                             \
        }                                                                                                              \
    }                                                                                                                  \
    TARGET static void requant_run##SUFFIX(const qfi_requant *rq, const int32_t *acc, int64_t n, int32_t add, float m, \
                                           const int8_t *res, void *y, int64_t at)                                     \
    {                                                                                                                  \
        if (qfi_act_smooth(rq->act)) {                                                                                 \
            smooth_store##SUFFIX(rq, acc, n, add, NULL, NULL, m, res, y, at);                                            \
            return;                                                                                                    \
        }                                                                                                              \
        int64_t i = 0;                                                                                                 \
        if (rq->act == QF_ACT_NONE) {                                                                                  \
            const __m256i va = _mm256_set1_epi32(add),                                                                 \
                          vzr = _mm256_set1_epi32(rq->z_r), vzo = _mm256_set1_epi32(rq->z_out);                        \
            const __m256 vm = _mm256_set1_ps(m), vmr = _mm256_set1_ps(rq->m_r), lo = _mm256_set1_ps(rq->lo),           \
                         hi = _mm256_set1_ps(rq->hi);                                                                  \
            for (; i + 8 <= n; i += 8) {                                                                               \
                __m256i a = _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(acc + i)), va);                      \
                __m256 r = res ? res8##SUFFIX(res + at + i, vzr) : _mm256_setzero_ps();                                \
                store8##SUFFIX(rq, y, at + i, requant8##SUFFIX(a, vm, r, vmr, res != NULL, lo, hi), vzo);              \
            }                                                                                                          \
        }                                                                                                              \
        if (i < n && rq->act == QF_ACT_NONE) { /* the tail: one more vector, through 8-lane copies */                  \
            int32_t a8[8] = {0};                                                                                       \
            int8_t r8[8] = {0};                                                                                        \
            unsigned char y8[32];                                                                                      \
            memcpy(a8, acc + i, (size_t)(n - i) * sizeof *acc);                                                        \
            if (res) memcpy(r8, res + at + i, (size_t)(n - i));                                                        \
            requant_run##SUFFIX(rq, a8, 8, add, m, res ? r8 : NULL, y8, 0);                                            \
            tail_out(rq, y8, n - i, y, at + i);                                                                        \
            return;                                                                                                    \
        }                                                                                                              \
        requant_run_c(rq, acc + i, n - i, add, m, res, y, at + i);                                                     \
    }                                                                                                                  \
    TARGET static void requant_cols##SUFFIX(const qfi_requant *rq, const int32_t *acc, int64_t n, int32_t add0,        \
                                            const int32_t *add, const float *m, const int8_t *res, void *y,            \
                                            int64_t at)                                                                \
    {                                                                                                                  \
        if (qfi_act_smooth(rq->act)) {                                                                                 \
            smooth_store##SUFFIX(rq, acc, n, add0, add, m, 0.0f, res, y, at);                                            \
            return;                                                                                                    \
        }                                                                                                              \
        int64_t i = 0;                                                                                                 \
        if (rq->act == QF_ACT_NONE) {                                                                                  \
            const __m256i va0 = _mm256_set1_epi32(add0),                                                               \
                          vzr = _mm256_set1_epi32(rq->z_r), vzo = _mm256_set1_epi32(rq->z_out);                        \
            const __m256 vmr = _mm256_set1_ps(rq->m_r), lo = _mm256_set1_ps(rq->lo), hi = _mm256_set1_ps(rq->hi);      \
            for (; i + 8 <= n; i += 8) {                                                                               \
                __m256i a = _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(acc + i)), va0);                     \
                if (add) a = _mm256_add_epi32(a, _mm256_loadu_si256((const __m256i *)(add + i)));                      \
                __m256 r = res ? res8##SUFFIX(res + at + i, vzr) : _mm256_setzero_ps();                                \
                store8##SUFFIX(rq, y, at + i, requant8##SUFFIX(a, _mm256_loadu_ps(m + i), r, vmr, res != NULL, lo, hi), \
                               vzo);                                                                                   \
            }                                                                                                          \
        }                                                                                                              \
        if (i < n && rq->act == QF_ACT_NONE) {                                                                         \
            int32_t a8[8] = {0}, add8[8] = {0};                                                                        \
            float m8[8] = {0};                                                                                         \
            int8_t r8[8] = {0};                                                                                        \
            unsigned char y8[32];                                                                                      \
            memcpy(a8, acc + i, (size_t)(n - i) * sizeof *acc);                                                        \
            if (add) memcpy(add8, add + i, (size_t)(n - i) * sizeof *add);                                             \
            memcpy(m8, m + i, (size_t)(n - i) * sizeof *m);                                                            \
            if (res) memcpy(r8, res + at + i, (size_t)(n - i));                                                        \
            requant_cols##SUFFIX(rq, a8, 8, add0, add ? add8 : NULL, m8, res ? r8 : NULL, y8, 0);                      \
            tail_out(rq, y8, n - i, y, at + i);                                                                        \
            return;                                                                                                    \
        }                                                                                                              \
        requant_cols_c(rq, acc + i, n - i, add0, add ? add + i : NULL, m + i, res, y, at + i);                         \
    }
#define DEFINE_REQUANT_ROWS256(SUFFIX, TARGET)                                                                         \
    TARGET static void requant_rows##SUFFIX(const qfi_requant *rq, const int32_t *acc, int64_t acc_stride,             \
                                            int64_t rows, int64_t n, const int32_t *add, const float *m,               \
                                            const int8_t *res, void *y, int64_t at, int64_t y_stride)                  \
    {                                                                                                                  \
        for (int64_t r = 0; r < rows; r++)                                                                             \
            requant_run##SUFFIX(rq, acc + r * acc_stride, n, add[r], m[r], res, y, at + r * y_stride);                 \
    }
DEFINE_REQUANT256(_vex, TVEX)
DEFINE_REQUANT256(_evex, TEVEX)
DEFINE_REQUANT_ROWS256(_vex, TVEX)
DEFINE_REQUANT_ROWS256(_evex, TEVEX)
DEFINE_REQUANT256(_avx2, TAVX2)
DEFINE_REQUANT_ROWS256(_avx2, TAVX2)

/* What the 512-bit and AMX sets share: everything but the blocks. */
#define VECTOR512_MEMBERS                                                                                              \
    .requant_run = requant_run512, .requant_rows = requant_rows512, .requant_cols = requant_cols512,                   \
    .interleave4 = interleave4_512, .dw_pad = dw_pad512, .dw_expand = dw_expand512,                                   \
    .dw_pad_expand = dw_pad_expand512, .dw_plane = dw_plane512,
static const qfi_i8_kernels kernels512 = {
    .isa = QFI_I8_VNNI512,
    .mb = 8, .nv = 3, .vw = 16, .wq = 1,
    .block = {block512_1, block512_2, block512_3},
    .block_1t = {block512_1t_1, block512_1t_2, block512_1t_3},
    .block_9t = {block512_9t_1, block512_9t_2, block512_9t_3},
    VECTOR512_MEMBERS
};
/* The 512-bit set with AMX tile blocks (narrow reductions keep the vector
 * blocks: qfi_cpu_i8_reduction). */
static const qfi_i8_kernels kernels_amx = {
    .isa = QFI_I8_AMX,
    .mb = 32, .nv = 2, .vw = 16, .wq = 1, .tiles = true,
    .block = {qfi_cpu_amx_block_1, qfi_cpu_amx_block_2, NULL},
    .block_1t = {qfi_cpu_amx_block_1, qfi_cpu_amx_block_2, NULL},
    .block_9t = {qfi_cpu_amx_block_1, qfi_cpu_amx_block_2, NULL},
    VECTOR512_MEMBERS
};
/* The 256-bit sets: 4 rows x NV vectors of 8 positions, C for the interleave
 * and the padded plane. THIRD(block) keeps the 3-vector blocks or drops them. */
#define KEEP_BLOCK(b) b
#define NO_BLOCK(b) NULL
#define KERNELS256(ISA, SUFFIX, NV, WQ, THIRD)                                                                         \
    {                                                                                                                  \
        .isa = ISA, .mb = 4, .nv = NV, .vw = 8, .wq = WQ,                                                              \
        .block = {block##SUFFIX##_1, block##SUFFIX##_2, THIRD(block##SUFFIX##_3)},                                     \
        .block_1t = {block##SUFFIX##_1t_1, block##SUFFIX##_1t_2, THIRD(block##SUFFIX##_1t_3)},                         \
        .block_9t = {block##SUFFIX##_9t_1, block##SUFFIX##_9t_2, THIRD(block##SUFFIX##_9t_3)},                         \
        .requant_run = requant_run##SUFFIX, .requant_rows = requant_rows##SUFFIX,                                      \
        .requant_cols = requant_cols##SUFFIX, .interleave4 = interleave4_c, .dw_pad = dw_pad_c,                        \
        .dw_expand = dw_expand##SUFFIX, .dw_plane = dw_plane##SUFFIX,                                                  \
    }
static const qfi_i8_kernels kernels_vex = KERNELS256(QFI_I8_VNNI256, _vex, 3, 1, KEEP_BLOCK);
static const qfi_i8_kernels kernels_evex = KERNELS256(QFI_I8_VNNI256, _evex, 3, 1, KEEP_BLOCK);
/* The vnni256 sets' vector code without vpdpbusd; 3-vector blocks would need
 * more than the 16 registers. */
static const qfi_i8_kernels kernels_avx2 = KERNELS256(QFI_I8_AVX2, _avx2, 2, 2, NO_BLOCK);

static bool has_avx2(void) { return __builtin_cpu_supports("fma") && qfi_cpu_has_avx2_f16c(); }
static bool has_vnni512(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
           __builtin_cpu_supports("avx512vbmi");
}
/* AVX-VNNI is CPUID.(EAX=7,ECX=1):EAX bit 4, asked directly: Debian 12's
 * clang 14 rejects __builtin_cpu_supports("avxvnni") at compile time, which
 * broke `make fuzz` */
static bool has_avxvnni(void)
{
    unsigned a, b, c, d;
    return __builtin_cpu_supports("avx2") && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 4 & 1);
}
static bool has_evex256(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}
#endif /* HAVE_X86_INT8_KERNELS */

bool qfi_cpu_i8_isa_runs(qfi_i8_isa isa)
{
    switch (isa) {
    case QFI_I8_PORTABLE: return true;
#ifdef HAVE_X86_INT8_KERNELS
    case QFI_I8_AVX2: return has_avx2();
    case QFI_I8_VNNI256: return has_avxvnni() || has_evex256();
    case QFI_I8_VNNI512: return has_vnni512();
    case QFI_I8_AMX: return has_vnni512() && qfi_cpu_amx_usable();
#endif
    default: return false;
    }
}

const qfi_i8_kernels *qfi_cpu_i8_kernels(qfi_i8_isa isa)
{
#ifdef HAVE_X86_INT8_KERNELS
    if (isa == QFI_I8_AMX && has_vnni512() && qfi_cpu_amx_usable()) return &kernels_amx;
    if ((isa == QFI_I8_VNNI512 || isa == QFI_I8_AMX) && has_vnni512()) return &kernels512;
    if (isa == QFI_I8_VNNI256 && has_avxvnni()) return &kernels_vex;
    if (isa == QFI_I8_VNNI256 && has_evex256()) return &kernels_evex;
    if (isa == QFI_I8_AVX2 && has_avx2()) return &kernels_avx2;
#endif
    (void)isa;
    return &kernels_c;
}

const qfi_i8_kernels *qfi_cpu_i8_reduction(int64_t k, int64_t *quads, int64_t *kq)
{
    const int64_t q0 = (k + 3) / 4;
    const qfi_i8_kernels *ks = qfi_cpu_i8_kernels(qfi_cpu_i8_isa());
    if (ks->tiles && q0 < QFI_I8_TILE_MIN_QUADS) ks = qfi_cpu_i8_kernels(QFI_I8_VNNI512);
    *kq = ks->tiles ? qfi_cpu_i8_tile_kq(q0) : 0;
    *quads = ks->tiles ? (q0 + *kq - 1) / *kq * *kq : q0;
    return ks;
}

static int chosen = -1; /* qfi_cpu_i8_set_isa's choice; -1: none */

/* QFORGE_CPU_INT8_ISA names an instruction set this CPU runs, or -1. */
static int isa_from_env(void)
{
    const char *e = getenv("QFORGE_CPU_INT8_ISA");
    for (int isa = 0; e && isa < QFI_I8_ISAS; isa++)
        if (!strcmp(e, qfi_cpu_i8_isa_name((qfi_i8_isa)isa)) && qfi_cpu_i8_isa_runs((qfi_i8_isa)isa)) return isa;
    return -1;
}

qfi_i8_isa qfi_cpu_i8_isa(void)
{
    if (chosen >= 0) return (qfi_i8_isa)chosen;
    const int env = isa_from_env();
    if (env >= 0) return (qfi_i8_isa)env;
    for (int isa = QFI_I8_ISAS - 1; isa > QFI_I8_PORTABLE; isa--)
        if (qfi_cpu_i8_isa_runs((qfi_i8_isa)isa)) return (qfi_i8_isa)isa;
    return QFI_I8_PORTABLE;
}

void qfi_cpu_i8_set_isa(qfi_i8_isa isa) { chosen = qfi_cpu_i8_isa_runs(isa) ? (int)isa : -1; }

const char *qfi_cpu_i8_isa_name(qfi_i8_isa isa)
{
    static const char *const names[QFI_I8_ISAS] = {"portable", "avx2", "vnni256", "vnni512", "amx"};
    return isa < QFI_I8_ISAS ? names[isa] : "?";
}
