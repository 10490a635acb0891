/* Convs of one input position to one output position over all channels (a
 * squeeze-excitation block's FCs after its global pool): one thread per
 * output, the sum in double in channel order from the bias, then rounded to
 * float and to the output's dtype, as runtime/cpu/conv.c's vector_image
 * computes it. Every product of two floats (or halves) is exact in double,
 * so both engines give the same bits whatever BLAS or cuDNN would have done:
 * the gates these convs make scale whole int8 tensors, and one half-ulp of
 * difference moved INT8 levels downstream. A fused Relu or Clip applies
 * before the rounding (the same as after it: the bounds are exact); a smooth
 * activation follows in place (cu_act_inplace). */
#include "cuda_internal.h"

/* wt is [C][M]: a warp's threads (consecutive m) read one row of it at a
 * time, and all of them the same x[n][c]. */
template <typename T>
__global__ void vector_conv_kernel(T *y, const T *x, const T *wt, const T *bias, int64_t N, int64_t C, int64_t M,
                                   bool relu, float lo, float hi)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N * M; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t n = i / M, m = i % M;
        const T *xr = x + n * C;
        double acc = bias ? (double)(float)bias[m] : 0.0;
        for (int64_t c = 0; c < C; c++)
            acc = __dadd_rn(acc, __dmul_rn((double)(float)wt[c * M + m], (double)(float)xr[c]));
        float v = (float)acc;
        if (relu) v = v > 0.0f ? v : 0.0f;
        v = v < lo ? lo : v;
        v = v > hi ? hi : v;
        y[i] = (T)v;
    }
}

bool cu_vector_conv_fits(const cu_conv_geo *g)
{
    return g->group == 1 && g->H == 1 && g->W == 1 && g->kh == 1 && g->kw == 1 && g->ph == 0 && g->pw == 0 &&
           g->Ho == 1 && g->Wo == 1;
}

qf_status cu_vector_conv_run(cudaStream_t s, const cu_conv_geo *g, qf_dtype dt, const void *x, const void *w,
                             const void *bias, bool relu, float lo, float hi, void *y)
{
    const int64_t total = g->N * g->M;
    if (!total) return QF_OK;
    unsigned b = cu_blocks(total, 128);
    if (b > 65536) b = 65536;
    if (dt == QF_F16)
        vector_conv_kernel<__half><<<b, 128, 0, s>>>((__half *)y, (const __half *)x, (const __half *)w,
                                                     (const __half *)bias, g->N, g->C, g->M, relu, lo, hi);
    else
        vector_conv_kernel<float><<<b, 128, 0, s>>>((float *)y, (const float *)x, (const float *)w, (const float *)bias,
                                                    g->N, g->C, g->M, relu, lo, hi);
    CU_LAUNCHED();
    return QF_OK;
}
