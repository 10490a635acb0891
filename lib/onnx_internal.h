/* ONNX import internals shared by lib/onnx_import.c and the tests: decoding
 * one TensorProto (initializers, Constant values, the backend-test
 * input_*.pb / output_*.pb files) into a qf_value. */
#ifndef QFORGE_ONNX_INTERNAL_H
#define QFORGE_ONNX_INTERNAL_H

#include "internal.h"
#include "onnx/onnx.pb-c.h"

/* Decodes `t` into *out: name, dtype, dims and freshly allocated data (the
 * caller frees out->name and out->data), flags QF_VALUE_CONST. External data
 * is read from `model_dir` (NULL refuses external data). Sizes are checked
 * against the bytes present and QF_MAX_TENSOR_BYTES before any allocation.
 * Errors name the tensor but not the model file (the caller prefixes it). */
qf_status qfi_onnx_tensor_decode(const Onnx__TensorProto *t, const char *model_dir, qf_value *out);

/* Reads a whole untrusted file of at most `max_bytes` bytes into a malloc'd
 * buffer (*data is non-NULL on success, even for an empty file). */
qf_status qfi_read_file(const char *path, size_t max_bytes, uint8_t **data, size_t *size);

#endif
