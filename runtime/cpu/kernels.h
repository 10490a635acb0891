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
QFI_DECLARE_CPU(qdq)          /* QuantizeLinear DequantizeLinear */

/* Copies the view of `src` with these dims and element strides (negative
 * strides walk backwards) into contiguous `dst`; `es` bytes per element.
 * Transpose and Slice are this copy. Defined in runtime/cpu/transpose.c. */
void qfi_cpu_strided_copy(void *dst, const void *src, int nd, const int64_t *dims, const int64_t *strides, size_t es);

size_t qfi_cpu_conv_scratch(const qf_graph *g, const qf_node *n);
size_t qfi_cpu_conv_transpose_scratch(const qf_graph *g, const qf_node *n);
/* Unfolds one group of one image for Conv: x is (Cg, D,H,W), col is
 * (Cg*Kd*Kh*Kw, Do*Ho*Wo), 0 where a tap falls in the padding. runtime/cpu/conv.c. */
struct qfi_window;
void qfi_cpu_im2col(const float *x, int64_t cg, const struct qfi_window *w, float *col);

/* ---- INT8 (exact integer arithmetic, lib/internal.h's requantize epilogue) ---- */
/* Conv nodes of precision INT8; runtime/cpu/conv_int8.c. */
qf_status qfi_cpu_conv_int8(const qfi_kernel_args *a);
size_t qfi_cpu_conv_int8_scratch(const qf_graph *g, const qf_node *n);
/* Gemm and MatMul nodes of precision INT8; runtime/cpu/gemm_int8.c. */
qf_status qfi_cpu_gemm_int8(const qfi_kernel_args *a);
/* Scratch of a Gemm or MatMul node: 0 unless it is INT8. */
size_t qfi_cpu_gemm_scratch(const qf_graph *g, const qf_node *n);
/* C (M,N) int32 = A (M,K) x op(B), exactly, where A and B hold int8 values
 * stored as floats (row-major; B is (K,N), or (N,K) with trans_b). sgemm on
 * K-chunks of at most QFI_IGEMM_KCHUNK: every partial sum of 1024 products of
 * magnitude <= 2^14 is an integer below 2^24, so float arithmetic is exact in
 * any order; chunks are summed in int32. `tmp` holds M*N floats. */
#define QFI_IGEMM_KCHUNK 1024
void qfi_cpu_igemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                   bool trans_b, float *tmp, int32_t *C);

/* ---- FP16 and INT8 through FP32 kernels (runtime/cpu/lowp.c) ----------------------
 * Nodes whose precision the op's kernel does not handle natively (qfi_op_def's
 * cpu_native) run the FP32 kernel on an f32 view of the graph: f16 and int8
 * inputs are widened into staging buffers (f16 exactly, int8 as q*scale) and
 * outputs rounded back to half, or quantized with the output's scale. That is
 * FP16 storage with FP32 arithmetic, and exact for the INT8 ops that only move
 * or select values (max-pool, concat, reshape, ...). */
typedef struct qfi_cpu_lowp qfi_cpu_lowp;
/* *out stays NULL when no node needs the wrapper. FP16 constants are widened
 * once, here. */
qf_status qfi_cpu_lowp_create(const qf_graph *g, qfi_cpu_lowp **out);
void qfi_cpu_lowp_free(qfi_cpu_lowp *lp);
/* The graph node n's kernel must be given: the f32 view if n is wrapped, else g. */
const qf_graph *qfi_cpu_lowp_graph(const qfi_cpu_lowp *lp, const qf_graph *g, const qf_node *n);
bool qfi_cpu_lowp_wraps(const qf_graph *g, const qf_node *n);
/* Runs a wrapped node; `a` carries the real graph and the engine's pointers. */
qf_status qfi_cpu_lowp_run(qfi_cpu_lowp *lp, const qfi_kernel_args *a);

#endif
