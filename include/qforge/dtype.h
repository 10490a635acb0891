/* Element types and their traits. The enum is append-only: its values are
 * stored in .qfm files. */
#ifndef QFORGE_DTYPE_H
#define QFORGE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qf_dtype {
    QF_F32 = 0,
    QF_F16,
    QF_BF16,
    QF_I8,
    QF_U8,
    QF_I32,
    QF_I64,
    QF_BOOL,
    QF_DTYPE_COUNT
} qf_dtype;

typedef struct qf_dtype_traits {
    const char *name;   /* "f32", "i8", ... */
    size_t size;        /* bytes per element */
    int onnx_type;      /* TensorProto.DataType */
    bool is_float;
} qf_dtype_traits;

const qf_dtype_traits *qf_dtype_info(qf_dtype t);
/* Maps an ONNX TensorProto.DataType to a qf_dtype; false if qforge has none. */
bool qf_dtype_from_onnx(int onnx_type, qf_dtype *out);

/* IEEE half and bfloat16 conversions, round to nearest even. */
uint16_t qf_f32_to_f16(float x);
float qf_f16_to_f32(uint16_t h);
uint16_t qf_f32_to_bf16(float x);
float qf_bf16_to_f32(uint16_t h);

#ifdef __cplusplus
}
#endif
#endif
