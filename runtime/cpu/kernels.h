/* The CPU engine's kernels, one file per kernel family in runtime/cpu/; each
 * file registers its family as qfi_cpu_<family> (the kernels column of
 * include/qforge/ops.def). Activations are NCHW. */
#ifndef QFORGE_CPU_KERNELS_H
#define QFORGE_CPU_KERNELS_H

#include "internal.h"

typedef struct qfi_kernel_args {
    const qf_graph *g;       /* the f32 view for nodes qfi_node_f32_view names (lowp.c) */
    const qf_node *n;
    const void *const *in;   /* n->n_in pointers; NULL for an omitted input */
    void *const *out;        /* n->n_out pointers */
    void *scratch;           /* scratch(g, n) bytes, or NULL */
    const void *state;       /* what prepare(g, n) built, or NULL */
    int threads;
} qfi_kernel_args;

/* A kernel family. run() computes FP32 nodes and nodes of the op's typed
 * precisions (qfi_op_desc.typed: INT8 Conv, the conversions) in their own
 * dtypes; every other FP16 or INT8 node runs it on the f32 view through
 * lowp.c. */
typedef struct qfi_cpu_kernel {
    qf_status (*run)(const qfi_kernel_args *a);
    /* Bytes of scratch run() needs (im2col), or NULL for none. */
    size_t (*scratch)(const qf_graph *g, const qf_node *n);
    /* Per-node state built once with the engine (INT8 weights packed for the
     * kernel), freed by release(); NULL for none. *state may stay NULL. */
    qf_status (*prepare)(const qf_graph *g, const qf_node *n, void **state);
    void (*release)(void *state);
} qfi_cpu_kernel;

#define QF_OP(id, onnx_name, desc, kernels) extern const qfi_cpu_kernel qfi_cpu_##kernels;
#include "qforge/ops.def"
#undef QF_OP

/* The kernel of op (runtime/cpu/cpu_engine.c's table, built from ops.def). */
const qfi_cpu_kernel *qfi_cpu_kernel_of(qf_op op);
/* Runs node a->n as the CPU engine does: through lp (NULL where no node
 * needs it) when the node sees the f32 view, else its kernel. a->g is the
 * real graph; a->scratch holds qfi_cpu_node_scratch() bytes. */
typedef struct qfi_cpu_lowp qfi_cpu_lowp; /* lowp.c, below */
qf_status qfi_cpu_node_run(qfi_cpu_lowp *lp, const qfi_kernel_args *a);
size_t qfi_cpu_node_scratch(const qfi_cpu_lowp *lp, const qf_graph *g, const qf_node *n);
/* What n's kernel builds once before its runs (INT8 weights packed), for
 * a->state; *state stays NULL for kernels without. Release frees it. */
qf_status qfi_cpu_node_prepare(const qf_graph *g, const qf_node *n, void **state);
void qfi_cpu_node_release(const qf_node *n, void *state);
/* Runs node n of g (FP32, or a typed precision) once on one thread with
 * freshly allocated scratch (tests). */
qf_status qfi_cpu_run_node(const qf_graph *g, const qf_node *n, const void *const *in, void *const *out);

/* Copies the view of `src` with these dims and element strides (negative
 * strides walk backwards) into contiguous `dst`; `es` bytes per element.
 * Transpose and Slice are this copy. Defined in runtime/cpu/transpose.c. */
void qfi_cpu_strided_copy(void *dst, const void *src, int nd, const int64_t *dims, const int64_t *strides, size_t es);

/* r[0..n) = 0 and r[0..n) = x[0..n) for short rows (ResNet-style rows are
 * 8-32 floats, where a libc call per row cost more than the copy: memset +
 * memmove were 15% of a ResNet-20 run through im2col). Blocks of 8 with a
 * fixed inner count vectorize; gcc would still turn the loops back into
 * library calls, which QFI_NO_LIBCALL_LOOPS on the function they are inlined
 * into forbids. (__restrict: this header is also read by nvcc as C++.) */
#if defined(__GNUC__) && !defined(__clang__)
#define QFI_NO_LIBCALL_LOOPS __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define QFI_NO_LIBCALL_LOOPS
#endif
static inline void qfi_zero_floats(float *__restrict r, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int u = 0; u < 8; u++) r[i + u] = 0.0f;
    for (; i < n; i++) r[i] = 0.0f;
}
static inline void qfi_copy_floats(float *__restrict r, const float *__restrict x, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int u = 0; u < 8; u++) r[i + u] = x[i + u];
    for (; i < n; i++) r[i] = x[i];
}

size_t qfi_cpu_conv_scratch(const qf_graph *g, const qf_node *n);
size_t qfi_cpu_conv_transpose_scratch(const qf_graph *g, const qf_node *n);
/* Unfolds one group of one image for Conv: x is (Cg, D,H,W), col is
 * (Cg*Kd*Kh*Kw, Do*Ho*Wo), 0 where a tap falls in the padding. runtime/cpu/conv.c. */
struct qfi_window;
void qfi_cpu_im2col(const float *x, int64_t cg, const struct qfi_window *w, float *col);
/* Direct FP32 Conv of group-1 windows on 1-D/2-D images, without im2col or
 * BLAS; runtime/cpu/conv_direct.c. _supports says whether it can run geo
 * (whether it should is conv.c's choose_conv_path). Scratch: one padded image
 * per slot; _slots is how many slots `threads` (<= 0: all cores) use.
 * x (N,C,H,W), w (M,C,kh,kw), b (M) or NULL, y (N,M,Ho,Wo). The kernel comes
 * in vector widths; qfi_cpu_direct_isa() is the widest this CPU runs, and
 * tests run every narrower one too. */
typedef enum qfi_direct_isa { QFI_DIRECT_PORTABLE, QFI_DIRECT_AVX2, QFI_DIRECT_AVX512 } qfi_direct_isa;
qfi_direct_isa qfi_cpu_direct_isa(void);
struct qfi_conv_geom;
bool qfi_cpu_conv_direct_supports(const struct qfi_conv_geom *geo);
int64_t qfi_cpu_conv_direct_slots(const struct qfi_conv_geom *geo, int threads);
size_t qfi_cpu_conv_direct_scratch(const struct qfi_conv_geom *geo, int64_t slots);
void qfi_cpu_conv_direct(const struct qfi_conv_geom *geo, const float *x, const float *w, const float *b, float *y,
                         void *scratch, int threads, qfi_direct_isa isa);

/* ---- INT8 (exact integer arithmetic, lib/quant_math.h's requantize epilogue) ---- */
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
 * Nodes of FP32 arithmetic at FP16 or INT8 precision (qfi_node_f32_view) run
 * the FP32 kernel on the f32 view of the graph: f16 and int8 inputs are
 * widened into staging buffers (f16 exactly, int8 as q*scale) and outputs
 * rounded back to half, or quantized with the output's scale. That is FP16
 * storage with FP32 arithmetic, and exact for the INT8 ops that only move or
 * select values (max-pool, concat, reshape, ...). */
/* *out stays NULL when no node needs the wrapper. FP16 constants are widened
 * once, here. `only` (NULL: every node) limits it to the nodes it marks
 * true: the CUDA engine's host nodes (runtime/cuda/host.cu). */
qf_status qfi_cpu_lowp_create(const qf_graph *g, const bool *only, qfi_cpu_lowp **out);
void qfi_cpu_lowp_free(qfi_cpu_lowp *lp);
/* The graph node n's kernel must be given: the f32 view if n is wrapped, else g. */
const qf_graph *qfi_cpu_lowp_graph(const qfi_cpu_lowp *lp, const qf_graph *g, const qf_node *n);
/* Runs a wrapped node; `a` carries the real graph and the engine's pointers. */
qf_status qfi_cpu_lowp_run(qfi_cpu_lowp *lp, const qfi_kernel_args *a);

#endif
