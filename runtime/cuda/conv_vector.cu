/* Convs of one input position to one output position over all channels (a
 * squeeze-excitation block's FCs after its global pool): each output summed
 * in double in channel order from the bias, then rounded to float and to
 * the output's dtype, as runtime/cpu/conv.c's vector_image computes it.
 * Every product of two floats (or halves) is exact in double, so both
 * engines give the same bits whatever BLAS or cuDNN would have done: the
 * gates these convs make scale whole int8 tensors, and one half-ulp of
 * difference moved INT8 levels downstream. A fused Relu or Clip applies
 * before the rounding (the same as after it: the bounds are exact); a smooth
 * activation follows in place (cu_act_inplace).
 *
 * The channel order makes each sum one dependent chain, so the kernel hides
 * the memory instead: a block stages a slice of channels of its images'
 * inputs and of the weights in shared memory (16 loads a thread in flight),
 * and each thread carries NB images' chains for one output, so consecutive
 * adds are independent. One thread a chain that read each term from global
 * memory ran EfficientNet-B0's SE FCs at memory latency (2 ms of a batch of
 * 256); staging loads one at a time, 1.4 ms (bench/zoo/NOTES.md). */
#include "cuda_internal.h"

namespace {

constexpr int CT = 64; /* channels staged per step */

/* Block: TPB threads over outputs m0 .. m0 + TPB - 1 (blockIdx.x) of images
 * n0 .. n0 + NB - 1 (blockIdx.y); wt is [C][M], so a warp's weight loads are
 * consecutive. Shared memory: xs [NB][CT] and ws [CT][TPB], as floats. */
template <typename T, int NB>
__global__ void vector_conv_kernel(T *y, const T *x, const T *wt, const T *bias, int N, int C, int M, bool relu, float lo,
                                   float hi)
{
    extern __shared__ float sm[];
    const int tpb = blockDim.x, tid = threadIdx.x;
    float *xs = sm, *ws = sm + NB * CT;
    const int m0 = blockIdx.x * tpb, n0 = blockIdx.y * NB, m = m0 + tid;
    const bool m_ok = m < M;
    double acc[NB];
    const double b = bias && m_ok ? (double)to_f32(bias[m]) : 0.0;
#pragma unroll
    for (int j = 0; j < NB; j++) acc[j] = b;
    /* this thread's weight column, clamped into the tensor so that the
     * staging loads need no branch (a branch per load kept one in flight) */
    const T *wcol = wt + (m_ok ? m : M - 1);
    for (int c0 = 0; c0 < C; c0 += CT) {
        const int cn = C - c0 < CT ? C - c0 : CT;
        for (int i = tid; i < NB * CT; i += tpb) {
            const int j = i / CT, c = i % CT;
            xs[i] = c < cn && n0 + j < N ? to_f32(x[(int64_t)(n0 + j) * C + c0 + c]) : 0.0f;
        }
        for (int cb = 0; cb < cn; cb += 16) {
            T r[16];
#pragma unroll
            for (int u = 0; u < 16; u++) r[u] = wcol[(int64_t)(c0 + min(cb + u, cn - 1)) * M];
#pragma unroll
            for (int u = 0; u < 16; u++)
                if (cb + u < cn) ws[(cb + u) * tpb + tid] = to_f32(r[u]);
        }
        __syncthreads();
#pragma unroll 8
        for (int c = 0; c < cn; c++) {
            const double w = ws[c * tpb + tid];
#pragma unroll
            for (int j = 0; j < NB; j++) acc[j] = __dadd_rn(acc[j], __dmul_rn(w, (double)xs[j * CT + c]));
        }
        __syncthreads();
    }
    if (!m_ok) return; /* (its column was a neighbour's, clamped) */
#pragma unroll
    for (int j = 0; j < NB; j++) {
        if (n0 + j >= N) break;
        float v = (float)acc[j];
        if (relu) v = v > 0.0f ? v : 0.0f;
        v = v < lo ? lo : v;
        v = v > hi ? hi : v;
        y[(int64_t)(n0 + j) * M + m] = (T)v;
    }
}

template <typename T, int NB>
void launch(cudaStream_t s, int tpb, const cu_conv_geo *g, T *y, const T *x, const T *w, const T *bias, bool relu, float lo,
            float hi)
{
    const dim3 grid((unsigned)((g->M + tpb - 1) / tpb), (unsigned)((g->N + NB - 1) / NB));
    const size_t smem = (size_t)(NB * CT + CT * tpb) * sizeof(float);
    vector_conv_kernel<T, NB><<<grid, tpb, smem, s>>>(y, x, w, bias, (int)g->N, (int)g->C, (int)g->M, relu, lo, hi);
}

template <typename T>
void launch_any(cudaStream_t s, const cu_conv_geo *g, int sms, T *y, const T *x, const T *w, const T *bias, bool relu,
                float lo, float hi)
{
    /* a warp per 32 outputs, up to 128 a block; as many images a thread as
     * still leave two blocks for each of the device's SMs */
    const int tpb = g->M >= 128 ? 128 : (int)((g->M + 31) / 32 * 32);
    const int64_t m_blocks = (g->M + tpb - 1) / tpb, want = 2 * (int64_t)sms;
    if ((g->N + 3) / 4 * m_blocks >= want) launch<T, 4>(s, tpb, g, y, x, w, bias, relu, lo, hi);
    else if ((g->N + 1) / 2 * m_blocks >= want) launch<T, 2>(s, tpb, g, y, x, w, bias, relu, lo, hi);
    else launch<T, 1>(s, tpb, g, y, x, w, bias, relu, lo, hi);
}

} // namespace

bool cu_vector_conv_fits(const cu_conv_geo *g)
{
    return g->group == 1 && g->H == 1 && g->W == 1 && g->kh == 1 && g->kw == 1 && g->ph == 0 && g->pw == 0 &&
           g->Ho == 1 && g->Wo == 1 && g->N < 65535 * 4LL && g->C < INT32_MAX && g->M < INT32_MAX;
}

qf_status cu_vector_conv_run(cudaStream_t s, const cu_conv_geo *g, int sms, qf_dtype dt, const void *x, const void *w,
                             const void *bias, bool relu, float lo, float hi, void *y)
{
    if (!g->N || !g->M) return QF_OK;
    if (dt == QF_F16)
        launch_any<__half>(s, g, sms, (__half *)y, (const __half *)x, (const __half *)w, (const __half *)bias, relu, lo, hi);
    else
        launch_any<float>(s, g, sms, (float *)y, (const float *)x, (const float *)w, (const float *)bias, relu, lo, hi);
    CU_LAUNCHED();
    return QF_OK;
}
