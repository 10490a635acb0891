/* Attribute parsers, shape inference and FLOP counts of every op, one file per
 * op family in lib/ops/. Referenced only by lib/op_table.c. */
#ifndef QFORGE_OPS_H
#define QFORGE_OPS_H

#include "internal.h"

#define QFI_DECLARE_OP(stem)                                  \
    qf_status qfi_##stem##_parse(qf_graph *g, qf_node *n);    \
    qf_status qfi_##stem##_infer(qf_graph *g, qf_node *n);

QFI_DECLARE_OP(conv)
QFI_DECLARE_OP(conv_transpose)
QFI_DECLARE_OP(gemm)
QFI_DECLARE_OP(matmul)
QFI_DECLARE_OP(binary)       /* Add Sub Mul Div PRelu */
QFI_DECLARE_OP(unary)        /* Relu LeakyRelu Clip Sigmoid HardSigmoid HardSwish Tanh */
QFI_DECLARE_OP(softmax)
QFI_DECLARE_OP(pool)         /* MaxPool AveragePool */
QFI_DECLARE_OP(global_pool)  /* GlobalAveragePool GlobalMaxPool */
QFI_DECLARE_OP(batchnorm)
QFI_DECLARE_OP(concat)
QFI_DECLARE_OP(reshape)
QFI_DECLARE_OP(flatten)
QFI_DECLARE_OP(squeeze)      /* Squeeze Unsqueeze */
QFI_DECLARE_OP(transpose)
QFI_DECLARE_OP(pad)
QFI_DECLARE_OP(resize)       /* Resize Upsample */
QFI_DECLARE_OP(slice)
QFI_DECLARE_OP(split)
QFI_DECLARE_OP(reduce_mean)
QFI_DECLARE_OP(shape)
QFI_DECLARE_OP(gather)
QFI_DECLARE_OP(cast)
QFI_DECLARE_OP(identity)     /* Identity Dropout */
QFI_DECLARE_OP(constant)
QFI_DECLARE_OP(qdq)          /* QuantizeLinear DequantizeLinear */

/* Helpers shared by the tensor-manipulation ops, defined in lib/ops/reshape.c. */
/* Normalizes an ONNX axis in [-rank, rank) to [0, rank); fails naming the node. */
qf_status qfi_axis_norm(const qf_graph *g, const qf_node *n, int64_t axis, int rank, int *out);
/* Reads constant int input k of n (absent or empty: *count = 0). A non-constant
 * input fails with QF_ERR_UNSUPPORTED "dynamic shape input". */
qf_status qfi_const_ints(const qf_graph *g, const qf_node *n, int k, int64_t *out, int max, int *count);

int64_t qfi_conv_flops(const qf_graph *g, const qf_node *n);
int64_t qfi_conv_transpose_flops(const qf_graph *g, const qf_node *n);
int64_t qfi_gemm_flops(const qf_graph *g, const qf_node *n);
int64_t qfi_matmul_flops(const qf_graph *g, const qf_node *n);

#endif
