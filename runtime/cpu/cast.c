/* CPU kernel of Cast. Floats reach integers by truncation toward zero,
 * saturated to the target's range (NaN gives 0), where C would be undefined;
 * integers reach narrower integers by two's-complement wrap, as numpy's
 * astype does; anything non-zero (NaN included) is true. */
#include <math.h>
#include "kernels.h"

static float read_float(const void *p, qf_dtype t, int64_t i)
{
    switch (t) {
    case QF_F32: return ((const float *)p)[i];
    case QF_F16: return qf_f16_to_f32(((const uint16_t *)p)[i]);
    case QF_BF16: return qf_bf16_to_f32(((const uint16_t *)p)[i]);
    default: QF_ASSERT(!"not a float dtype"); return 0.0f;
    }
}

static int64_t read_int(const void *p, qf_dtype t, int64_t i)
{
    switch (t) {
    case QF_I8: return ((const int8_t *)p)[i];
    case QF_U8: return ((const uint8_t *)p)[i];
    case QF_I32: return ((const int32_t *)p)[i];
    case QF_I64: return ((const int64_t *)p)[i];
    case QF_BOOL: return ((const uint8_t *)p)[i] != 0;
    default: QF_ASSERT(!"not an integer dtype"); return 0;
    }
}

/* Truncates toward zero into [lo, hi]; bounds are exact in double. */
static int64_t float_to_int(float x, double lo, double hi)
{
    if (isnan(x)) return 0;
    double t = trunc((double)x);
    if (t <= lo) return (int64_t)lo;
    if (t >= hi) return hi >= 9.2e18 ? INT64_MAX : (int64_t)hi;
    return (int64_t)t;
}

static void write_float(void *p, qf_dtype t, int64_t i, float x)
{
    switch (t) {
    case QF_F32: ((float *)p)[i] = x; break;
    case QF_F16: ((uint16_t *)p)[i] = qf_f32_to_f16(x); break;
    case QF_BF16: ((uint16_t *)p)[i] = qf_f32_to_bf16(x); break;
    case QF_I8: ((int8_t *)p)[i] = (int8_t)float_to_int(x, INT8_MIN, INT8_MAX); break;
    case QF_U8: ((uint8_t *)p)[i] = (uint8_t)float_to_int(x, 0, UINT8_MAX); break;
    case QF_I32: ((int32_t *)p)[i] = (int32_t)float_to_int(x, INT32_MIN, INT32_MAX); break;
    case QF_I64: ((int64_t *)p)[i] = float_to_int(x, -9223372036854775808.0, 9223372036854775808.0); break;
    case QF_BOOL: ((uint8_t *)p)[i] = x != 0.0f; break; /* NaN != 0 */
    default: QF_ASSERT(!"dtype rejected by qfi_cast_parse");
    }
}

static void write_int(void *p, qf_dtype t, int64_t i, int64_t v)
{
    switch (t) {
    case QF_F32: ((float *)p)[i] = (float)v; break;
    case QF_F16: ((uint16_t *)p)[i] = qf_f32_to_f16((float)v); break;
    case QF_BF16: ((uint16_t *)p)[i] = qf_f32_to_bf16((float)v); break;
    case QF_I8: ((int8_t *)p)[i] = (int8_t)(uint8_t)(uint64_t)v; break;
    case QF_U8: ((uint8_t *)p)[i] = (uint8_t)(uint64_t)v; break;
    case QF_I32: ((int32_t *)p)[i] = (int32_t)(uint32_t)(uint64_t)v; break;
    case QF_I64: ((int64_t *)p)[i] = v; break;
    case QF_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: QF_ASSERT(!"dtype rejected by qfi_cast_parse");
    }
}

static qf_status cast_run(const qfi_kernel_args *a)
{
    const qf_value *x = qfi_in(a->g, a->n, 0), *y = qfi_out(a->g, a->n, 0);
    int64_t cnt = qf_value_numel(x);
    if (x->dtype == y->dtype) {
        if (cnt) memcpy(a->out[0], a->in[0], qf_value_bytes(x));
        return QF_OK;
    }
    /* between f16 and f32 (an FP16 or INT8 plan's float inputs and outputs:
     * YOLOv8n's 4x80x8400 scores took 7 ms a batch of 4 one element at a
     * time): the vector conversions, over the threads */
    if ((x->dtype == QF_F16 && y->dtype == QF_F32) || (x->dtype == QF_F32 && y->dtype == QF_F16)) {
        const qfi_cpu_stored half = {QF_F16, 0.0f, 0};
        qfi_cpu_convert(&half, a->in[0], a->out[0], cnt, x->dtype == QF_F16, a->threads);
        return QF_OK;
    }
    if (qf_dtype_info(x->dtype)->is_float) {
        for (int64_t i = 0; i < cnt; i++) write_float(a->out[0], y->dtype, i, read_float(a->in[0], x->dtype, i));
    } else {
        for (int64_t i = 0; i < cnt; i++) write_int(a->out[0], y->dtype, i, read_int(a->in[0], x->dtype, i));
    }
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_cast = {.run = cast_run};
