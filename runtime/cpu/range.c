/* CPU kernel of Range (lib/ops/range.c): each element is the previous one plus
 * delta, as ONNX defines it (a float accumulates its rounding). */
#include "kernels.h"

static qf_status range_run(const qfi_kernel_args *a)
{
    const qf_value *y = qfi_out(a->g, a->n, 0);
    const int64_t len = y->dims[0];
    switch (y->dtype) {
    case QF_F32: {
        float x = *(const float *)a->in[0], d = *(const float *)a->in[2], *o = a->out[0];
        for (int64_t i = 0; i < len; i++, x += d) o[i] = x;
        break;
    }
    case QF_I32: {
        int32_t x = *(const int32_t *)a->in[0], d = *(const int32_t *)a->in[2], *o = a->out[0];
        for (int64_t i = 0; i < len; i++, x += d) o[i] = x;
        break;
    }
    default: {
        int64_t x = *(const int64_t *)a->in[0], d = *(const int64_t *)a->in[2], *o = a->out[0];
        for (int64_t i = 0; i < len; i++, x += d) o[i] = x;
        break;
    }
    }
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_range = {.run = range_run};
