/* The CUDA engine backend. For now it only finds the device and reports what
 * is missing; kernels and cuBLASLt GEMMs arrive with the CUDA engine issue. */
extern "C" {
#include "../engine_impl.h"
}
#include <cuda_runtime.h>

static qf_status cuda_create(qf_engine *e)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0)
        return qf_error(QF_ERR_DEVICE, "no usable CUDA device (%s)",
                        err != cudaSuccess ? cudaGetErrorString(err) : "none found");
    if (e->opts.device_index >= count)
        return qf_error(QF_ERR_DEVICE, "cuda:%d requested but only %d device(s) present", e->opts.device_index, count);
    return qf_error(QF_ERR_UNSUPPORTED, "%s: the CUDA engine has no kernels yet; use --device cpu", e->g->source);
}

static qf_status cuda_run(qf_engine *e)
{
    return qf_error(QF_ERR_UNSUPPORTED, "%s: the CUDA engine has no kernels yet", e->g->source);
}

static void cuda_destroy(qf_engine *e) { (void)e; }

extern "C" const qfi_backend qfi_cuda_backend = {
    "cuda",
    cuda_create,
    cuda_run,
    cuda_destroy,
};
