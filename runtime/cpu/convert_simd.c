/* The CPU engine's bulk dtype conversions between its f32 kernels and stored
 * f16 and int8 values (lowp.c's staging, QuantizeLinear, DequantizeLinear):
 * eight at a time with F16C and AVX2 where the CPU has them, else one by one,
 * always the bits of lib/dtype.c's qf_f16_to_f32 / qf_f32_to_f16 and
 * lib/quant_math.h's qfi_quantize_f32_zp / qfi_dequantize_i8_zp. */
#include "kernels.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define HAVE_F16C_KERNELS 1
#include <cpuid.h>
#include <immintrin.h>
#include <stdatomic.h>
#define TF16C __attribute__((target("avx2,f16c")))

/* Inf and NaN halves (exponent 31) go through the scalar code: vcvtph2ps
 * quiets a signaling NaN that qf_f16_to_f32 keeps as it is. */
TF16C static void f16_to_f32_v(const uint16_t *h, float *f, int64_t n)
{
    const __m128i exp = _mm_set1_epi16(0x7c00);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i v = _mm_loadu_si128((const __m128i *)(h + i));
        if (_mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(v, exp), exp))) {
            for (int k = 0; k < 8; k++) f[i + k] = qf_f16_to_f32(h[i + k]);
            continue;
        }
        _mm256_storeu_ps(f + i, _mm256_cvtph_ps(v));
    }
    for (; i < n; i++) f[i] = qf_f16_to_f32(h[i]);
}

/* Round to nearest even, as qf_f32_to_f16; Inf and NaN lanes (exponent 255)
 * take the scalar code. */
TF16C static void f32_to_f16_v(const float *f, uint16_t *h, int64_t n)
{
    const __m256i exp = _mm256_set1_epi32(0x7f800000);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(f + i);
        const __m256i e = _mm256_and_si256(_mm256_castps_si256(v), exp);
        if (_mm256_movemask_epi8(_mm256_cmpeq_epi32(e, exp))) {
            for (int k = 0; k < 8; k++) h[i + k] = qf_f32_to_f16(f[i + k]);
            continue;
        }
        _mm_storeu_si128((__m128i *)(h + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    for (; i < n; i++) h[i] = qf_f32_to_f16(f[i]);
}

/* x / s rounded to nearest, NaN to 0, clamped to [-128 - z, 127 - z], rint
 * (cvtps2dq in the default rounding mode: ties to even), plus z: as
 * qfi_quantize_f32_zp. */
TF16C static inline __m256i quantize8(__m256 x, __m256 s, __m256 lo, __m256 hi, __m256i z)
{
    __m256 v = _mm256_div_ps(x, s);
    v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
    v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
    return _mm256_add_epi32(_mm256_cvtps_epi32(v), z);
}
/* eight int32 in [-128, 127] stored as eight bytes */
TF16C static inline void store_i8x8(int8_t *q, __m256i v)
{
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    _mm_storel_epi64((__m128i *)q, _mm_packs_epi16(w, w));
}

/* f32 or f16 x; the f16 ones are widened eight at a time first */
TF16C static void quantize_v(const void *x, qf_dtype dt, int8_t *q, int64_t n, float s, int32_t z)
{
    const __m256 vs = _mm256_set1_ps(s), lo = _mm256_set1_ps((float)(-128 - z)), hi = _mm256_set1_ps((float)(127 - z));
    const __m256i vz = _mm256_set1_epi32(z);
    float f[8];
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        if (dt == QF_F16) f16_to_f32_v((const uint16_t *)x + i, f, 8);
        const float *xi = dt == QF_F16 ? f : (const float *)x + i;
        store_i8x8(q + i, quantize8(_mm256_loadu_ps(xi), vs, lo, hi, vz));
    }
    for (; i < n; i++)
        q[i] = qfi_quantize_f32_zp(dt == QF_F16 ? qf_f16_to_f32(((const uint16_t *)x)[i]) : ((const float *)x)[i], s, z);
}

/* (q - z) exactly, then one product, as qfi_dequantize_i8_zp */
TF16C static void dequantize_i8_v(const int8_t *q, float *f, int64_t n, float s, int32_t z)
{
    const __m256 vs = _mm256_set1_ps(s);
    const __m256i vz = _mm256_set1_epi32(z);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i v = _mm256_sub_epi32(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q + i))), vz);
        _mm256_storeu_ps(f + i, _mm256_mul_ps(_mm256_cvtepi32_ps(v), vs));
    }
    for (; i < n; i++) f[i] = qfi_dequantize_i8_zp(q[i], s, z);
}

/* AVX2 and F16C. F16C is CPUID.1:ECX bit 29, asked directly: Debian 12's
 * clang 14 rejects __builtin_cpu_supports("f16c") at compile time (as
 * int8_simd.c's avxvnni). Asked once: these conversions run on rows of a few
 * hundred elements, and under a hypervisor cpuid traps (it was 12 % of
 * DeiT-tiny's INT8 time on the CPU engine, in the Q/DQ nodes' per-row calls). */
bool qfi_cpu_has_avx2_f16c(void)
{
    static _Atomic int known = -1; /* -1: not asked yet */
    int v = atomic_load_explicit(&known, memory_order_relaxed);
    if (v < 0) {
        unsigned a, b, c, d;
        v = __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
        atomic_store_explicit(&known, v, memory_order_relaxed);
    }
    return v;
}
#else
bool qfi_cpu_has_avx2_f16c(void) { return false; }
#endif

void qfi_cpu_f16_to_f32(const uint16_t *h, float *f, int64_t n)
{
#ifdef HAVE_F16C_KERNELS
    if (qfi_cpu_has_avx2_f16c()) {
        f16_to_f32_v(h, f, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) f[i] = qf_f16_to_f32(h[i]);
}

void qfi_cpu_f32_to_f16(const float *f, uint16_t *h, int64_t n)
{
#ifdef HAVE_F16C_KERNELS
    if (qfi_cpu_has_avx2_f16c()) {
        f32_to_f16_v(f, h, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) h[i] = qf_f32_to_f16(f[i]);
}

void qfi_cpu_quantize(const void *x, qf_dtype dt, int8_t *q, int64_t n, float s, int32_t z)
{
#ifdef HAVE_F16C_KERNELS
    if (qfi_cpu_has_avx2_f16c()) {
        quantize_v(x, dt, q, n, s, z);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++)
        q[i] = qfi_quantize_f32_zp(dt == QF_F16 ? qf_f16_to_f32(((const uint16_t *)x)[i]) : ((const float *)x)[i], s, z);
}

void qfi_cpu_dequantize(const int8_t *q, float *f, int64_t n, float s, int32_t z)
{
#ifdef HAVE_F16C_KERNELS
    if (qfi_cpu_has_avx2_f16c()) {
        dequantize_i8_v(q, f, n, s, z);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) f[i] = qfi_dequantize_i8_zp(q[i], s, z);
}

void qfi_cpu_widen(const qfi_cpu_stored *v, const void *src, float *f, int64_t n)
{
    if (v->dt == QF_F16) qfi_cpu_f16_to_f32(src, f, n);
    else if (v->dt == QF_I8) qfi_cpu_dequantize(src, f, n, v->scale, v->zero_point);
    else memcpy(f, src, (size_t)n * sizeof *f);
}

void qfi_cpu_narrow(const qfi_cpu_stored *v, const float *f, void *dst, int64_t n)
{
    if (v->dt == QF_F16) qfi_cpu_f32_to_f16(f, dst, n);
    else if (v->dt == QF_I8) qfi_cpu_quantize(f, QF_F32, dst, n, v->scale, v->zero_point);
    else memcpy(dst, f, (size_t)n * sizeof *f);
}

/* Conversions run in chunks over the engine's threads: single-threaded they
 * would leave BLAS's workers spinning for most of an FP16 run. */
#define CONVERT_CHUNK 16384

typedef struct convert_job {
    qfi_cpu_stored v;
    const void *src;
    void *dst;
    int64_t cnt;
    bool widen;
} convert_job;

static void convert_chunk(void *arg, int64_t c)
{
    const convert_job *j = arg;
    const size_t es = qf_dtype_info(j->v.dt)->size;
    const int64_t lo = c * CONVERT_CHUNK, n = j->cnt - lo < CONVERT_CHUNK ? j->cnt - lo : CONVERT_CHUNK;
    if (j->widen) qfi_cpu_widen(&j->v, (const char *)j->src + (size_t)lo * es, (float *)j->dst + lo, n);
    else qfi_cpu_narrow(&j->v, (const float *)j->src + lo, (char *)j->dst + (size_t)lo * es, n);
}

void qfi_cpu_convert(const qfi_cpu_stored *v, const void *src, void *dst, int64_t cnt, bool widen, int threads)
{
    convert_job j = {.v = *v, .src = src, .dst = dst, .cnt = cnt, .widen = widen};
    qfi_parallel_for(threads, (cnt + CONVERT_CHUNK - 1) / CONVERT_CHUNK, convert_chunk, &j);
}
