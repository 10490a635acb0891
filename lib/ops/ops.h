/* The op descriptors (parsing, shape inference, FLOPs, traits), one file per
 * op or op family in lib/ops/, and helpers several of them share. */
#ifndef QFORGE_OPS_H
#define QFORGE_OPS_H

#include "internal.h"

/* The descriptors, one per op of ops.def (lib/op_table.c indexes them). */
#define QF_OP(id, onnx_name, desc, kernels) extern const qfi_op_desc qfi_op_##desc;
#include "qforge/ops.def"
#undef QF_OP

/* Helpers shared by the tensor-manipulation ops, defined in lib/ops/reshape.c. */
/* Normalizes an ONNX axis in [-rank, rank) to [0, rank); fails naming the node. */
qf_status qfi_axis_norm(const qf_graph *g, const qf_node *n, int64_t axis, int rank, int *out);
/* Reads constant int input k of n (absent or empty: *count = 0). A non-constant
 * input fails with QF_ERR_UNSUPPORTED "dynamic shape input". */
qf_status qfi_const_ints(const qf_graph *g, const qf_node *n, int k, int64_t *out, int max, int *count);

/* from_opset6 of BatchNormalization and Dropout (lib/ops/identity.c): opset 6
 * ran them in training mode unless is_test=1, which opset 7 dropped. */
qf_status qfi_opset6_inference_only(qf_graph *g, qf_node *n);

#endif
