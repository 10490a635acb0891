/* What bounds the INT8 requantize pass after cuBLASLt's int32 GEMM on a SiLU
 * layer, and would a table of level thresholds beat the fast form there
 * (bench/cuda_notes.md, session 46)? Times, on one layer's shape
 * (EfficientNet-V2-S features.5.x expand: 50176 x 960 int32 accumulators,
 * SiLU, int8 out; the sizes and the output scale can be given), kernels that
 * each change one thing:
 *
 *   copy       int32 in, one byte out, no arithmetic: the memory floor
 *   flat       gemm.cu's requantize kernel before session 46: one thread a
 *              channel quad of a flattened index (a division each),
 *              multipliers and biases loaded per element, SiLU by the fast
 *              form and the exact form where unsure
 *   rows       the same arithmetic, a thread's channel quad fixed (its
 *              multipliers and biases in registers) over a stride of rows:
 *              gemm.cu's form since session 46
 *   linear     rows without the activation (clamp only)
 *   table      rows with the level from a table of thresholds on the linear
 *              value, built on the host in double precision (two
 *              thresholds at most a cell: a compare each, no e^x); a level
 *              of its own definition, not the engines'
 *   bands      the same thresholds, each with a band of floats where the
 *              float exact form may part from the double one; there the
 *              exact form decides (the engines' levels)
 *
 * It checks the host's tables against the double and the float exact forms
 * and, on the GPU, every kernel's bytes against flat's. Medians of 30
 * launches by CUDA events. Session 46 (H100): copy 0.083 ms, flat 0.104,
 * rows 0.105, linear 0.084, table 0.101-0.140, bands 0.116-0.120: the pass
 * is within 25 % of its memory floor, and a table costs more than e^x.
 *
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Ilib -Iinclude -I$B \
 *       bench/requant_pass_study.cu -o requant_pass_study
 * ($B: a configured build, for config.h) */
#include "quant_math.h"
#include "float_order.h"
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>

#define CK(x)                                                                                                          \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));                              \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

/* ---- the threshold table -------------------------------------------------------------------- */
struct level_cell {
    float t1, t2;    /* thresholds in the cell, t1 <= t2 (INFINITY: none) */
    uint32_t levels; /* stored bytes: before t1, from t1, from t2 (zero point included) */
    uint32_t pad;
};
struct level_grid {
    float split;       /* v < split: the falling grid, else the rising one */
    float base_n, inv_n, base_p, inv_p;
    int n_n, n_p;      /* cells of each */
};

static double f_exact(double v, double s) { return v * s / (1.0 + exp(-v * s)) / s; } /* SiLU(x) / s in double */
static int level_of(double v, double s, double lo, double hi)
{
    double y = f_exact(v, s);
    y = y < lo ? lo : y > hi ? hi : y;
    return (int)nearbyint(y);
}
/* smallest float in [a, b] where pred holds (pred false at a, true at b, monotone between) */
template <class P> static float first_true(float a, float b, P pred)
{
    int32_t x = ordered(a), y = ordered(b);
    while ((int64_t)y - x > 1) {
        const int32_t mid = (int32_t)(((int64_t)x + y) / 2);
        if (pred(from_ordered(mid))) y = mid;
        else x = mid;
    }
    return from_ordered(y);
}
/* the cell of v: the formula both the host and the kernel use */
static __host__ __device__ __forceinline__ int cell_of(const level_grid &g, float v)
{
    const bool rising = v >= g.split;
    const float u = rising ? qfi_mul(qfi_sub(v, g.base_p), g.inv_p) : qfi_mul(qfi_sub(v, g.base_n), g.inv_n);
    const int n = rising ? g.n_p : g.n_n;
    const float c = fminf(fmaxf(u, 0.0f), (float)(n - 1));
    const int i = (int)(qfi_f32_bits(qfi_add(c, QFI_MAGIC)) - QFI_MAGIC_BITS);
    return rising ? g.n_n + i : i;
}

struct threshold {
    float t;
    int after; /* the level from t on */
};
static bool build_table(double s, double lo, double hi, int z, level_grid *g, std::vector<level_cell> *cells)
{
    const double xmin = -1.2784645427610738; /* SiLU's minimum */
    const float vs = (float)(xmin / s);
    const float far_lo = -1e30f, far_hi = 1e30f;
    std::vector<threshold> th;
    /* falling side: levels from level(-inf) down to level(vs) */
    const int l_inf = level_of(-1e6 / s, s, lo, hi), l_min = level_of(vs, s, lo, hi);
    for (int k = l_inf - 1; k >= l_min; k--)
        th.push_back({first_true(far_lo, vs, [&](float v) { return level_of(v, s, lo, hi) <= k; }), k});
    const size_t n_fall = th.size();
    const int l_top = level_of(far_hi, s, lo, hi);
    for (int k = l_min + 1; k <= l_top; k++)
        th.push_back({first_true(vs, far_hi, [&](float v) { return level_of(v, s, lo, hi) >= k; }), k});
    g->split = vs;
    g->base_n = n_fall ? th[0].t : vs;
    g->base_p = vs;
    /* widths: the largest power of two that leaves at most two thresholds a cell */
    for (int side = 0; side < 2; side++) {
        const size_t a = side ? n_fall : 0, b = side ? th.size() : n_fall;
        const float base = side ? g->base_p : g->base_n;
        const float last = b > a ? th[b - 1].t : base;
        float w = 256.0f;
        for (;; w *= 0.5f) {
            const int n = (int)ceil((last - base) / w) + 2;
            level_grid t = *g;
            if (side) t.inv_p = 1.0f / w, t.n_p = n, t.n_n = 0;
            else t.inv_n = 1.0f / w, t.n_n = n;
            std::vector<int> per(n, 0);
            bool ok = true;
            for (size_t i = a; i < b && ok; i++) ok = ++per[cell_of(t, th[i].t)] <= 2;
            if (ok || w < 1.0f / 64) {
                if (!ok) return false;
                if (side) g->inv_p = 1.0f / w, g->n_p = n;
                else g->inv_n = 1.0f / w, g->n_n = n;
                break;
            }
        }
    }
    cells->assign(g->n_n + g->n_p, level_cell{INFINITY, INFINITY, 0, 0});
    std::vector<int> level_at(cells->size());
    int level = l_inf;
    size_t k = 0;
    for (size_t c = 0; c < cells->size(); c++) {
        int ls[3] = {level, level, level};
        float ts[2] = {INFINITY, INFINITY};
        int n = 0;
        while (k < th.size() && cell_of(*g, th[k].t) == (int)c) {
            ts[n] = th[k].t, level = th[k].after, n++, k++;
            ls[n] = level;
            if (n == 2) ls[2] = level;
        }
        if (n < 2) ls[2] = ls[n];
        if (n == 0) ls[1] = ls[0];
        level_cell &e = (*cells)[c];
        e.t1 = ts[0], e.t2 = ts[1];
        e.levels = (uint32_t)(uint8_t)(ls[0] + z) | (uint32_t)(uint8_t)(ls[1] + z) << 8 | (uint32_t)(uint8_t)(ls[2] + z) << 16;
    }
    return k == th.size();
}

/* The same thresholds with a band each, [a, b): the floats whose double
 * value lies within the float exact form's error (taken as the fast form's
 * margin, 2.4e-6 |y| + 1.5e-5 levels, generous) of the boundary; there the
 * kernel asks the exact form. Level from b on. A cell lists the bands that
 * meet it (two at most). */
struct band_cell {
    float4 ab; /* a1, b1, a2, b2 (INFINITY: none) */
};
static bool build_bands(double s, double lo, double hi, int z, const level_grid &g, std::vector<band_cell> *bands,
                        std::vector<uint32_t> *levels)
{
    const double xmin = -1.2784645427610738;
    const float vs = (float)(xmin / s), far_lo = -1e30f, far_hi = 1e30f;
    struct band { float a, b; int after; };
    std::vector<band> bs;
    auto clampd = [&](double y) { return y < lo ? lo : y > hi ? hi : y; };
    const int l_inf = level_of(-1e6 / s, s, lo, hi), l_min = level_of(vs, s, lo, hi), l_top = level_of(far_hi, s, lo, hi);
    for (int k = l_inf - 1; k >= l_min; k--) { /* falling through k + 0.5 */
        const double bd = k + 0.5, d = 2.4e-6 * fabs(bd) + 1.5e-5;
        const float a = first_true(far_lo, vs, [&](float v) { return clampd(f_exact(v, s)) < bd + d; });
        const float b = first_true(far_lo, vs, [&](float v) { return clampd(f_exact(v, s)) < bd - d; });
        bs.push_back({a, b, k});
    }
    for (int k = l_min + 1; k <= l_top; k++) { /* rising through k - 0.5 */
        const double bd = k - 0.5, d = 2.4e-6 * fabs(bd) + 1.5e-5;
        const float a = first_true(vs, far_hi, [&](float v) { return clampd(f_exact(v, s)) > bd - d; });
        const float b = first_true(vs, far_hi, [&](float v) { return clampd(f_exact(v, s)) > bd + d; });
        bs.push_back({a, b, k});
    }
    const size_t n = (size_t)(g.n_n + g.n_p);
    bands->assign(n, band_cell{make_float4(INFINITY, INFINITY, INFINITY, INFINITY)});
    levels->assign(n, 0);
    int level = l_inf;
    size_t first = 0; /* bands wholly below the current cell */
    for (size_t c = 0; c < n; c++) {
        while (first < bs.size() && cell_of(g, bs[first].b) < (int)c && cell_of(g, bs[first].a) < (int)c) level = bs[first++].after;
        int ls[3] = {level, level, level}, m = 0;
        float ab[4] = {INFINITY, INFINITY, INFINITY, INFINITY};
        for (size_t j = first; j < bs.size() && cell_of(g, bs[j].a) <= (int)c; j++) {
            if (m == 2) return false;
            ab[2 * m] = bs[j].a, ab[2 * m + 1] = bs[j].b;
            ls[m + 1] = bs[j].after, m++;
        }
        if (m < 2) ls[2] = ls[m];
        if (m == 0) ls[1] = ls[0];
        (*bands)[c].ab = make_float4(ab[0], ab[1], ab[2], ab[3]);
        (*levels)[c] = (uint32_t)(uint8_t)(ls[0] + z) | (uint32_t)(uint8_t)(ls[1] + z) << 8 | (uint32_t)(uint8_t)(ls[2] + z) << 16;
    }
    return true;
}

/* ---- the kernels ------------------------------------------------------------------------------ */
__global__ void copy_kernel(const int4 *acc, int rows, int cols4, char4 *y)
{
    const int n = rows * cols4;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const int4 a = acc[i];
        y[i] = make_char4((char)a.x, (char)a.y, (char)a.z, (char)a.w);
    }
}

__global__ void flat_kernel(qfi_requant q, const int4 *acc, int rows, int cols4, char4 *y)
{
    const int n = rows * cols4;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const int r = i / cols4, c4 = i - r * cols4, ch = c4 * 4;
        const int4 a4 = acc[r * cols4 + c4];
        const int32_t a[4] = {a4.x, a4.y, a4.z, a4.w};
        float v[4];
        bool sure = true;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float lin = qfi_requant_linear(&q, qfi_i2f(a[k] + q.bias[ch + k]), q.m[ch + k], false, 0.0f);
            sure &= qfi_sigmoid_level_fast(true, lin, q.act_s, q.lo, q.hi, &v[k]);
        }
        if (!sure)
#pragma unroll
            for (int k = 0; k < 4; k++)
                v[k] = qfi_requant_smooth_i8_value(&q, qfi_i2f(a[k] + q.bias[ch + k]), q.m[ch + k], false, 0.0f);
        int8_t o[4];
#pragma unroll
        for (int k = 0; k < 4; k++) o[k] = qfi_requant_level(&q, v[k]);
        y[i] = make_char4(o[0], o[1], o[2], o[3]);
    }
}

/* MODE 0: SiLU as flat; 1: linear only; 2: the table; 3: the band table, the exact form inside a band */
template <int MODE>
__global__ void rows_kernel(qfi_requant q, const int4 *acc, int rows, int cols4, char4 *y, const level_cell *cells,
                            level_grid g, const band_cell *bands, const uint32_t *band_levels)
{
    const int c4 = blockIdx.x * blockDim.x + threadIdx.x;
    if (c4 >= cols4) return;
    const int ch = c4 * 4;
    float m[4];
    int32_t b[4];
#pragma unroll
    for (int k = 0; k < 4; k++) m[k] = q.m[ch + k], b[k] = q.bias[ch + k];
    for (int r = blockIdx.y * blockDim.y + threadIdx.y; r < rows; r += gridDim.y * blockDim.y) {
        const int4 a4 = acc[(size_t)r * cols4 + c4];
        const int32_t a[4] = {a4.x, a4.y, a4.z, a4.w};
        int8_t o[4];
        if constexpr (MODE == 3) {
            float lin[4];
            bool sure = true;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                lin[k] = qfi_requant_linear(&q, qfi_i2f(a[k] + b[k]), m[k], false, 0.0f);
                const int c = cell_of(g, lin[k]);
                const float4 e = bands[c].ab;
                const uint32_t lv = band_levels[c];
                sure &= !((lin[k] >= e.x) & (lin[k] < e.y)) & !((lin[k] >= e.z) & (lin[k] < e.w));
                o[k] = (int8_t)(lv >> (8 * ((lin[k] >= e.y) + (lin[k] >= e.w))));
            }
            if (!sure)
#pragma unroll
                for (int k = 0; k < 4; k++) o[k] = qfi_requant_level(&q, qfi_smooth_level_fast_kinds(q.act, lin[k], q.act_s, q.lo, q.hi, false));
        } else if constexpr (MODE == 2) {
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float lin = qfi_requant_linear(&q, qfi_i2f(a[k] + b[k]), m[k], false, 0.0f);
                const level_cell e = cells[cell_of(g, lin)];
                const int n = (lin >= e.t1) + (lin >= e.t2);
                o[k] = (int8_t)(e.levels >> (8 * n));
            }
        } else {
            float v[4];
            bool sure = true;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float lin = qfi_requant_linear(&q, qfi_i2f(a[k] + b[k]), m[k], false, 0.0f);
                if constexpr (MODE == 0) sure &= qfi_sigmoid_level_fast(true, lin, q.act_s, q.lo, q.hi, &v[k]);
                else v[k] = fminf(fmaxf(lin, q.lo), q.hi);
            }
            if (MODE == 0 && !sure)
#pragma unroll
                for (int k = 0; k < 4; k++) v[k] = qfi_requant_smooth_i8_value(&q, qfi_i2f(a[k] + b[k]), m[k], false, 0.0f);
#pragma unroll
            for (int k = 0; k < 4; k++) o[k] = qfi_requant_level(&q, v[k]);
        }
        y[(size_t)r * cols4 + c4] = make_char4(o[0], o[1], o[2], o[3]);
    }
}

static float median(std::vector<float> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}
template <class F> static float time_ms(F launch)
{
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; i++) launch();
    std::vector<float> t;
    for (int i = 0; i < 30; i++) {
        CK(cudaEventRecord(e0));
        launch();
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(ms);
    }
    CK(cudaGetLastError());
    return median(t);
}

int main(int argc, char **argv)
{
    const int rows = argc > 1 ? atoi(argv[1]) : 50176, cols = argc > 2 ? atoi(argv[2]) : 960;
    const float s_out = argc > 3 ? (float)atof(argv[3]) : 0.0246f;
    const int cols4 = cols / 4;
    /* output: SiLU over [-0.2785, 255 s - 0.2785], asymmetric as quant makes it */
    const int z = -128 - (int)lrintf(-0.2785f / s_out);
    /* accumulators: the linear value v = (acc + bias) m spread as a BN'd layer's, about N(-1/s, (2/s)^2)
     * in output units (x = v s ~ N(-1, 4)) */
    std::vector<int32_t> acc((size_t)rows * cols), bias(cols);
    std::vector<float> m(cols);
    srand(1);
    for (int c = 0; c < cols; c++) m[c] = 1e-3f * (0.5f + (float)rand() / RAND_MAX), bias[c] = rand() % 2001 - 1000;
    for (size_t i = 0; i < acc.size(); i++) {
        const int c = (int)(i % cols);
        double u1 = (rand() + 1.0) / (RAND_MAX + 2.0), u2 = (rand() + 1.0) / (RAND_MAX + 2.0);
        const double x = -1.0 + 2.0 * sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
        acc[i] = (int32_t)lrint(x / s_out / m[c]) - bias[c];
    }
    qfi_requant q;
    memset(&q, 0, sizeof q);
    q.out = QF_I8, q.act = QF_ACT_SILU, q.act_s = s_out, q.z_out = z, q.lo = (float)(-128 - z), q.hi = (float)(127 - z);
    level_grid g;
    std::vector<level_cell> cells;
    if (!build_table(s_out, q.lo, q.hi, z, &g, &cells)) {
        fprintf(stderr, "table: more than two thresholds in a cell\n");
        return 1;
    }
    printf("shape %d x %d, s %.4f z %d; table %zu cells (falling %d of width %g, rising %d of width %g)\n", rows, cols, s_out,
           z, cells.size(), g.n_n, 1.0 / g.inv_n, g.n_p, 1.0 / g.inv_p);
    { /* the table against the double form (its definition) and the float exact form, on the host */
        size_t vs_double = 0, vs_float = 0, n = 0;
        for (size_t i = 0; i < acc.size(); i += 7, n++) {
            const int c = (int)(i % cols);
            const float lin = qfi_mul(qfi_i2f(acc[i] + bias[c]), m[c]);
            const level_cell &e = cells[cell_of(g, lin)];
            const int8_t t = (int8_t)(e.levels >> (8 * ((lin >= e.t1) + (lin >= e.t2))));
            vs_double += t != (int8_t)(level_of(lin, s_out, q.lo, q.hi) + z);
            vs_float += t != (int8_t)(qfi_round_i32(fminf(fmaxf(qfi_act_value(QF_ACT_SILU, lin, s_out), q.lo), q.hi)) + z);
        }
        printf("host: table differs from the double form at %zu of %zu values, from the float exact form at %zu\n", vs_double,
               n, vs_float);
    }
    std::vector<band_cell> bands;
    std::vector<uint32_t> band_levels;
    if (!build_bands(s_out, q.lo, q.hi, z, g, &bands, &band_levels)) {
        fprintf(stderr, "bands: more than two in a cell\n");
        return 1;
    }
    {
        size_t in_band = 0, wrong = 0, n = 0;
        for (size_t i = 0; i < acc.size(); i += 7, n++) {
            const int c = (int)(i % cols);
            const float lin = qfi_mul(qfi_i2f(acc[i] + bias[c]), m[c]);
            const int ci = cell_of(g, lin);
            const float4 e = bands[ci].ab;
            const bool sure = !(lin >= e.x && lin < e.y) && !(lin >= e.z && lin < e.w);
            in_band += !sure;
            const int8_t t = (int8_t)(band_levels[ci] >> (8 * ((lin >= e.y) + (lin >= e.w))));
            wrong += sure && t != (int8_t)(qfi_round_i32(fminf(fmaxf(qfi_act_value(QF_ACT_SILU, lin, s_out), q.lo), q.hi)) + z);
        }
        printf("host: band table sure but not the float exact form's level at %zu of %zu values; in a band %zu\n", wrong, n,
               in_band);
    }
    band_cell *d_bands;
    uint32_t *d_band_levels;
    CK(cudaMalloc(&d_bands, bands.size() * sizeof(band_cell)));
    CK(cudaMalloc(&d_band_levels, band_levels.size() * 4));
    CK(cudaMemcpy(d_bands, bands.data(), bands.size() * sizeof(band_cell), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_band_levels, band_levels.data(), band_levels.size() * 4, cudaMemcpyHostToDevice));
    int32_t *d_acc, *d_bias;
    float *d_m;
    int8_t *d_y[6];
    level_cell *d_cells;
    CK(cudaMalloc(&d_acc, acc.size() * 4));
    CK(cudaMalloc(&d_bias, cols * 4));
    CK(cudaMalloc(&d_m, cols * 4));
    CK(cudaMalloc(&d_cells, cells.size() * sizeof(level_cell)));
    for (auto &p : d_y) CK(cudaMalloc(&p, acc.size()));
    CK(cudaMemcpy(d_acc, acc.data(), acc.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_bias, bias.data(), cols * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_m, m.data(), cols * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_cells, cells.data(), cells.size() * sizeof(level_cell), cudaMemcpyHostToDevice));
    q.bias = d_bias, q.m = d_m;
    const int n4 = rows * cols4;
    unsigned blocks = (unsigned)std::min((n4 + 255) / 256, 65536);
    const dim3 rb(32, 8), rg((cols4 + 31) / 32, (unsigned)std::min((rows + 7) / 8, 132 * 16 * 8 / (int)((cols4 + 31) / 32)));
    const int4 *a4 = (const int4 *)d_acc;
    const double bytes = (double)acc.size() * 5;
    struct {
        const char *name;
        float ms;
    } r[6];
    r[0] = {"copy", time_ms([&] { copy_kernel<<<blocks, 256>>>(a4, rows, cols4, (char4 *)d_y[0]); })};
    r[1] = {"flat", time_ms([&] { flat_kernel<<<blocks, 256>>>(q, a4, rows, cols4, (char4 *)d_y[1]); })};
    r[2] = {"rows", time_ms([&] { rows_kernel<0><<<rg, rb>>>(q, a4, rows, cols4, (char4 *)d_y[2], d_cells, g, d_bands, d_band_levels); })};
    r[3] = {"linear", time_ms([&] { rows_kernel<1><<<rg, rb>>>(q, a4, rows, cols4, (char4 *)d_y[3], d_cells, g, d_bands, d_band_levels); })};
    r[4] = {"table", time_ms([&] { rows_kernel<2><<<rg, rb>>>(q, a4, rows, cols4, (char4 *)d_y[4], d_cells, g, d_bands, d_band_levels); })};
    r[5] = {"bands", time_ms([&] { rows_kernel<3><<<rg, rb>>>(q, a4, rows, cols4, (char4 *)d_y[5], d_cells, g, d_bands, d_band_levels); })};
    for (auto &e : r) printf("%-8s %.4f ms  %.0f GB/s\n", e.name, e.ms, bytes / e.ms / 1e6);
    std::vector<int8_t> y1(acc.size()), y2(acc.size()), y4(acc.size()), y5(acc.size());
    CK(cudaMemcpy(y5.data(), d_y[5], acc.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(y1.data(), d_y[1], acc.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(y2.data(), d_y[2], acc.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(y4.data(), d_y[4], acc.size(), cudaMemcpyDeviceToHost));
    size_t d_rows = 0, d_table = 0, d_host = 0, d_band = 0;
    for (size_t i = 0; i < acc.size(); i++) {
        d_rows += y1[i] != y2[i];
        d_table += y1[i] != y4[i];
        d_band += y1[i] != y5[i];
        if (i % 997 == 0) { /* the host's exact form, on a sample */
            const int c = (int)(i % cols);
            const float lin = qfi_mul(qfi_i2f(acc[i] + bias[c]), m[c]);
            d_host += y1[i] != (int8_t)(qfi_round_i32(fminf(fmaxf(qfi_act_value(QF_ACT_SILU, lin, s_out), q.lo), q.hi)) + z);
        }
    }
    printf("rows differs from flat at %zu of %zu; table at %zu; bands at %zu; flat from the host's exact form at %zu of "
           "%zu sampled\n", d_rows, acc.size(), d_table, d_band, d_host, acc.size() / 997 + 1);
    return 0;
}
