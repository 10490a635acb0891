/* Every float v through lib/quant_math.h's fast level of a smooth
 * activation (qfi_smooth_level_fast_try) against the exact form
 * (qfi_act_value) on the device: where the fast form calls its level sure,
 * the two must clamp and round to the same integer; the same for the half
 * outputs' fast form (SiLU and Sigmoid) and the exact form's half. test_cuda's
 * smooth_levels_sweep runs it for SiLU, Sigmoid and GELU at several output
 * scales and bounds; it checks the margins by enumeration, not only by
 * lib/quant_math.h's error analysis. */
#include <cuda_runtime.h>
#include "quant_math.h"
#include "smooth_sweep.h"

namespace {

constexpr uint32_t ONE_BITS = 0x3F800000u;   /* 1.0f */
constexpr uint32_t LEVEL_BITS = 0x45000000u; /* 2048.0f */
constexpr uint32_t SIXTEENTH_BITS = 0x3D800000u; /* 0.0625f */
constexpr uint32_t SIXTEEN_BITS = 0x41800000u;   /* 16.0f */

/* HALF: the half outputs' fast form (qfi_sigmoid_f16_fast, SiLU and
 * Sigmoid; APPROX: qfi_sigmoid_f16_approx) against the exact form's half,
 * instead of the int8 levels */
template <bool HALF, bool APPROX>
__global__ void sweep_kernel(qf_act act, float s, float lo, float hi, unsigned long long *counts)
{
    unsigned long long wrong = 0, unsure = 0;
    const uint64_t n = 1ull << 32;
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x) {
        const uint32_t bits = (uint32_t)i;
        const float v = __uint_as_float(bits);
        float y;
        uint16_t h;
        const bool sure = APPROX ? qfi_sigmoid_f16_approx(act == QF_ACT_SILU, v, s, lo, hi, &h)
                          : HALF ? qfi_sigmoid_f16_fast(act == QF_ACT_SILU, v, s, lo, hi, &h)
                                 : qfi_smooth_level_fast_try(act, v, s, lo, hi, true, &y);
        if (!sure) {
            /* counted where the values are: an int8 output's levels, 1 <= |v| <= 2048;
             * a half output's pre-activations (real units), 1/16 <= |v| <= 16 */
            const uint32_t mag = bits & 0x7FFFFFFFu;
            unsure += HALF ? mag >= SIXTEENTH_BITS && mag <= SIXTEEN_BITS : mag >= ONE_BITS && mag <= LEVEL_BITS;
            continue;
        }
        const float exact = fminf(fmaxf(qfi_act_value(act, v, s), lo), hi);
        wrong += HALF ? h != qfi_f16_bits(exact) : qfi_magic_round(y) != qfi_magic_round(exact);
    }
    atomicAdd(&counts[0], wrong);
    atomicAdd(&counts[1], unsure);
}

} // namespace

extern "C" int qft_smooth_sweep(qf_act act, int form, float s, float lo, float hi, unsigned long long *wrong,
                                unsigned long long *unsure, unsigned long long *total, unsigned long long *total_big)
{
    unsigned long long *d = NULL, h[2] = {0, 0};
    if (cudaMalloc(&d, sizeof h) != cudaSuccess) return -1;
    cudaError_t e = cudaMemset(d, 0, sizeof h);
    if (e == cudaSuccess) {
        if (form == QFT_SWEEP_HALF_APPROX) sweep_kernel<true, true><<<8192, 256>>>(act, s, lo, hi, d);
        else if (form == QFT_SWEEP_HALF) sweep_kernel<true, false><<<8192, 256>>>(act, s, lo, hi, d);
        else sweep_kernel<false, false><<<8192, 256>>>(act, s, lo, hi, d);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    cudaFree(d);
    *wrong = h[0], *unsure = h[1], *total = 1ull << 32;
    *total_big = form != QFT_SWEEP_INT8 ? 2ull * (SIXTEEN_BITS - SIXTEENTH_BITS + 1) : 2ull * (LEVEL_BITS - ONE_BITS + 1);
    return e == cudaSuccess ? 0 : -1;
}
