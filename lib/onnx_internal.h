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

/* ---- quantized ONNX (lib/onnx_qop.c) ----------------------------------------------
 * The loader (lib/onnx_import.c) hands every node to qfi_qop_node first: Q/DQ
 * nodes get their uint8 parameters shifted to int8 (q - 128, zero point -
 * 128: exact), QOperator ops (QLinearConv, QLinearAdd, ...) become
 * DequantizeLinear -> the float op -> QuantizeLinear, and ops that move
 * quantized tensors (MaxPool, Reshape, ...) get the same wrapping with their
 * input's parameters. quant/qdq_import.c then makes qforge's INT8 graph of it. */
typedef struct qfi_onnx_loader qfi_onnx_loader;
typedef struct qfi_qop_state qfi_qop_state;

qfi_qop_state *qfi_qop_state_new(void);
void qfi_qop_state_free(qfi_qop_state *S);
/* A QOperator op this import expands (QLinearConv of the default domain,
 * QLinearAdd of com.microsoft, ...). */
bool qfi_qop_known(const char *domain, const char *op_type);
/* Handles ONNX node np (inputs and outputs resolved to value indices) when it
 * is quantized ONNX: sets *done and emits its nodes; else leaves *done false. */
qf_status qfi_qop_node(qfi_onnx_loader *L, qfi_qop_state *S, const Onnx__NodeProto *np, const char *name, int n_in,
                       const int *in, int n_out, const int *out, bool *done);

/* What the loader offers lib/onnx_qop.c. */
qf_graph *qfi_onnx_graph(qfi_onnx_loader *L);
/* A new value named "<base>/<suffix>" (a number appended if that is taken); -1 out of memory. */
int qfi_onnx_new_value(qfi_onnx_loader *L, const char *base, const char *suffix);
/* The same as a constant of this dtype and shape owning `data` (freed on failure). */
int qfi_onnx_new_const(qfi_onnx_loader *L, const char *base, const char *suffix, qf_dtype dt, int ndim,
                       const int64_t *dims, void *data);
/* Adds a node with np's attributes (np may be NULL; attributes named in the
 * NULL-terminated `skip` are left out). */
qf_status qfi_onnx_emit_node(qfi_onnx_loader *L, const char *name, qf_op op, int n_in, const int *in, int n_out,
                             const int *out, const Onnx__NodeProto *np, const char *const *skip);

#endif
