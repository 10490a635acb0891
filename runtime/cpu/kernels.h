/* Reference CPU kernels, one file per op family in runtime/cpu/. Referenced by
 * lib/op_table.c. Activations are FP32 NCHW. */
#ifndef QFORGE_CPU_KERNELS_H
#define QFORGE_CPU_KERNELS_H

#include "internal.h"

#define QFI_DECLARE_CPU(stem) qf_status qfi_cpu_##stem(const qfi_kernel_args *a);

QFI_DECLARE_CPU(conv)
QFI_DECLARE_CPU(conv_transpose)
QFI_DECLARE_CPU(gemm)
QFI_DECLARE_CPU(matmul)
QFI_DECLARE_CPU(binary)
QFI_DECLARE_CPU(unary)
QFI_DECLARE_CPU(softmax)
QFI_DECLARE_CPU(pool)
QFI_DECLARE_CPU(global_pool)
QFI_DECLARE_CPU(batchnorm)
QFI_DECLARE_CPU(concat)
QFI_DECLARE_CPU(copy)         /* Reshape Flatten Squeeze Unsqueeze Identity Dropout */
QFI_DECLARE_CPU(transpose)
QFI_DECLARE_CPU(pad)
QFI_DECLARE_CPU(resize)
QFI_DECLARE_CPU(slice)
QFI_DECLARE_CPU(split)
QFI_DECLARE_CPU(reduce_mean)
QFI_DECLARE_CPU(shape)
QFI_DECLARE_CPU(gather)
QFI_DECLARE_CPU(cast)
QFI_DECLARE_CPU(constant)

size_t qfi_cpu_conv_scratch(const qf_graph *g, const qf_node *n);
size_t qfi_cpu_conv_transpose_scratch(const qf_graph *g, const qf_node *n);

#endif
