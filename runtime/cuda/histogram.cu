/* Calibration histograms built on the device: the |x| histogram of an f32
 * tensor in calib/histogram.c's bins, so only 16 KiB per value crosses to
 * the host instead of the tensor. Two passes: the largest finite |x| (with
 * the counts of zeros and of NaN/Inf, and the smallest finite x, found as the
 * CPU finds it, by lib/float_math.h's order keys), then each nonzero finite value into bin
 * floor(|x| * 2^(11 - exp)) at the smallest range 2^exp above that maximum.
 * Counts are integers and the scaling by a power of two is exact, so the
 * result is the histogram the CPU makes of the same numbers; calib merges it
 * into the value's running histogram exactly (qf_histogram_merge). */
#include "cuda_internal.h"
#include "qforge/calib.h"
#include "float_math.h" /* qfi_f32_order_key */
#include <float.h>

struct cu_hist {
    unsigned int absmax_bits; /* bits of the largest finite |x|: ordered as integers for floats >= 0 */
    unsigned int min_key_inv; /* ~ the order key of the smallest finite x: atomicMax finds the minimum,
                                 and the memset's 0 (~ a key no finite value has) means none */
    unsigned long long zeros, nonfinite;
    unsigned long long bins[QF_HIST_BINS];
};

namespace {

__global__ void hist_stats_kernel(const float *x, int64_t n, cu_hist *h)
{
    unsigned int mx = 0, low = 0xffffffffu; /* low: the smallest order key seen */
    unsigned long long zeros = 0, nonfinite = 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float a = fabsf(x[i]);
        if (!(a <= FLT_MAX)) {
            nonfinite++;
            continue;
        }
        low = min(low, qfi_f32_order_key(__float_as_uint(x[i])));
        if (a == 0.0f) zeros++;
        else mx = max(mx, __float_as_uint(a));
    }
    for (int o = 16; o > 0; o >>= 1) {
        mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        low = min(low, __shfl_xor_sync(0xffffffffu, low, o));
        zeros += __shfl_xor_sync(0xffffffffu, zeros, o);
        nonfinite += __shfl_xor_sync(0xffffffffu, nonfinite, o);
    }
    if ((threadIdx.x & 31) == 0) {
        if (mx) atomicMax(&h->absmax_bits, mx);
        if (~low) atomicMax(&h->min_key_inv, ~low);
        if (zeros) atomicAdd(&h->zeros, zeros);
        if (nonfinite) atomicAdd(&h->nonfinite, nonfinite);
    }
}

__global__ void hist_bins_kernel(const float *x, int64_t n, cu_hist *h)
{
    __shared__ unsigned int bins[QF_HIST_BINS]; /* a block sees far fewer than 2^32 values */
    for (int b = threadIdx.x; b < QF_HIST_BINS; b += blockDim.x) bins[b] = 0;
    __syncthreads();
    const float absmax = __uint_as_float(h->absmax_bits);
    if (absmax > 0.0f) {
        int exp;
        frexpf(absmax, &exp); /* absmax < 2^exp, the smallest such power */
        for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
            const float a = fabsf(x[i]);
            if (a <= FLT_MAX && a != 0.0f) atomicAdd(&bins[(int)scalbnf(a, 11 - exp)], 1u); /* < 2048: a < 2^exp */
        }
    }
    __syncthreads();
    for (int b = threadIdx.x; b < QF_HIST_BINS; b += blockDim.x)
        if (bins[b]) atomicAdd(&h->bins[b], (unsigned long long)bins[b]);
}

} // namespace

size_t cu_hist_bytes(void) { return sizeof(cu_hist); }

qf_status cu_histogram(cudaStream_t s, const float *x, int64_t n, cu_hist *dev, cu_hist *host, qf_histogram *out)
{
    CU_CHECK(cudaMemsetAsync(dev, 0, sizeof *dev, s));
    if (n > 0) {
        unsigned b = cu_blocks(n, 256);
        if (b > 1024) b = 1024;
        hist_stats_kernel<<<b, 256, 0, s>>>(x, n, dev);
        CU_LAUNCHED();
        hist_bins_kernel<<<b, 256, 0, s>>>(x, n, dev);
        CU_LAUNCHED();
    }
    CU_CHECK(cudaMemcpyAsync(host, dev, sizeof *host, cudaMemcpyDeviceToHost, s));
    CU_CHECK(cudaStreamSynchronize(s));
    qf_histogram_init(out);
    memcpy(out->bins, host->bins, sizeof out->bins);
    out->zeros = host->zeros;
    out->nonfinite = host->nonfinite;
    uint32_t bits = host->absmax_bits;
    memcpy(&out->absmax, &bits, sizeof out->absmax);
    if (out->absmax > 0.0f) frexpf(out->absmax, &out->exp);
    if (host->min_key_inv) out->min = qfi_bits_f32(qfi_f32_from_order_key(~host->min_key_inv));
    return QF_OK;
}
