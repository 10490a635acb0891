/* The dtype traits table and IEEE half / bfloat16 conversions. */
#include "internal.h"

static const qf_dtype_traits traits[QF_DTYPE_COUNT] = {
    /* onnx_type: TensorProto.DataType numbers */
    [QF_F32]  = {.name = "f32",  .size = 4, .onnx_type = 1,  .is_float = true},
    [QF_F16]  = {.name = "f16",  .size = 2, .onnx_type = 10, .is_float = true},
    [QF_BF16] = {.name = "bf16", .size = 2, .onnx_type = 16, .is_float = true},
    [QF_I8]   = {.name = "i8",   .size = 1, .onnx_type = 3},
    [QF_U8]   = {.name = "u8",   .size = 1, .onnx_type = 2},
    [QF_I32]  = {.name = "i32",  .size = 4, .onnx_type = 6},
    [QF_I64]  = {.name = "i64",  .size = 8, .onnx_type = 7},
    [QF_BOOL] = {.name = "bool", .size = 1, .onnx_type = 9},
};

const qf_dtype_traits *qf_dtype_info(qf_dtype t)
{
    QF_ASSERT((unsigned)t < QF_DTYPE_COUNT);
    return &traits[t];
}

bool qf_dtype_from_onnx(int onnx_type, qf_dtype *out)
{
    for (int i = 0; i < QF_DTYPE_COUNT; i++) {
        if (traits[i].onnx_type == onnx_type) {
            *out = (qf_dtype)i;
            return true;
        }
    }
    return false;
}


uint16_t qf_f32_to_f16(float x)
{
    uint32_t u = qfi_f32_bits(x);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t exp = (u >> 23) & 0xffu;
    uint32_t mant = u & 0x7fffffu;
    if (exp == 0xff) /* Inf or NaN (keep NaN quiet and non-zero) */
        return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0));
    int e = (int)exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00u); /* overflow to Inf */
    if (e <= 0) {
        /* subnormal half: shift the implicit-1 mantissa, round half to even */
        if (e < -10) return (uint16_t)sign;
        mant |= 0x800000u;
        int shift = 14 - e;
        uint32_t half = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)e << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) half++; /* may carry into exponent: correct */
    return (uint16_t)half;
}

float qf_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) return qfi_bits_f32(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
        if (mant == 0) return qfi_bits_f32(sign);
        float v = (float)mant * (1.0f / 16777216.0f); /* mant * 2^-24 */
        return sign ? -v : v;
    }
    return qfi_bits_f32(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

uint16_t qf_f32_to_bf16(float x)
{
    uint32_t u = qfi_f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    uint32_t rounding = 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)((u + rounding) >> 16);
}

float qf_bf16_to_f32(uint16_t h) { return qfi_bits_f32((uint32_t)h << 16); }
