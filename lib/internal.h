/* Library-internal declarations shared across lib/, runtime/, calib/, quant/.
 * Symbols here are prefixed qfi_ and are not exported from libqforge. */
#ifndef QFORGE_INTERNAL_H
#define QFORGE_INTERNAL_H

#include "config.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <assert.h>
#include "qforge/qforge.h"

/* Broken internal invariant (never bad input): abort loudly. */
#define QF_ASSERT(cond)                                                        \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "qforge: internal error %s:%d: %s\n", __FILE__,   \
                    __LINE__, #cond);                                          \
            abort();                                                           \
        }                                                                      \
    } while (0)

#define QF_CHECK(expr)                                                         \
    do {                                                                       \
        qf_status st_ = (expr);                                                \
        if (st_ != QF_OK) return st_;                                          \
    } while (0)

#define QF_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Hot loops are compiled for AVX-512 and AVX2+FMA besides the baseline and the
 * loader picks one by CPU (ifunc): a portable -O3 build then still vectorizes
 * 16 or 8 floats wide where the machine can. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__) && \
    !defined(QFI_NO_SIMD_CLONES)
#define QFI_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define QFI_SIMD_CLONES
#endif

/* ---- INT8 accumulator bounds -------------------------------------------------
 * An INT8 dot product of K terms is at most K*128*127 in magnitude; with K <=
 * 65536 that is below 2^30, and a bias clamped to +-2^30 keeps accumulator +
 * bias inside int32. The quantizer clamps, kernels refuse longer reductions,
 * and the .qfm reader refuses files that break either rule. */
#define QFI_INT8_BIAS_LIMIT ((int32_t)1 << 30)
#define QFI_INT8_MAX_REDUCTION 65536

/* ---- float bit patterns (IEEE binary32) ---------------------------------------- */
static inline uint32_t qfi_f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
static inline float qfi_bits_f32(uint32_t u)
{
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* ---- memory ---------------------------------------------------------------- */
/* calloc that sets the error message on failure. */
void *qfi_calloc(size_t n, size_t size);
char *qfi_strdup(const char *s);
/* n*size with overflow check; false on overflow. */
static inline bool qfi_mul_ok(size_t a, size_t b, size_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

/* ---- attributes (ONNX node attributes, read by op parsers) --------------- */
const qf_attr *qfi_attr_find(const qf_node *n, const char *name);
int64_t qfi_attr_int(const qf_node *n, const char *name, int64_t dflt);
float qfi_attr_float(const qf_node *n, const char *name, float dflt);
const char *qfi_attr_string(const qf_node *n, const char *name, const char *dflt);
/* Returns the ints of an INTS attribute and their count, or NULL/0 if absent. */
const int64_t *qfi_attr_ints(const qf_node *n, const char *name, int *count);
void qfi_attr_free(qf_attr *a);
/* Ends an op parser: on success installs p as n->params (freeing the old
 * params), on failure frees p; returns st. */
qf_status qfi_node_set_params(qf_node *n, void *p, qf_status st);
/* Frees everything a node owns and zeroes it. */
void qfi_node_clear(qf_node *n);

/* ---- values ---------------------------------------------------------------- */
static inline qf_value *qfi_in(const qf_graph *g, const qf_node *n, int k)
{
    return (k < n->n_in && n->in[k] >= 0) ? &g->values[n->in[k]] : NULL;
}
static inline qf_value *qfi_out(const qf_graph *g, const qf_node *n, int k)
{
    return &g->values[n->out[k]];
}
/* Sets a value's dtype and shape (used by shape inference). */
void qfi_value_set_shape(qf_value *v, qf_dtype dt, int ndim, const int64_t *dims);
/* Reads a constant integer tensor (i64 or i32) as int64 values; *count set.
 * Fails if the value is not constant. */
qf_status qfi_value_ints(const qf_graph *g, const qf_value *v, int64_t *out, int max, int *count);
/* Reads a constant float/int scalar-or-1-element tensor as float. */
qf_status qfi_value_scalar_f32(const qf_value *v, float *out);

/* ---- shapes and broadcasting ---------------------------------------------------- */
/* Multidirectional (numpy) broadcast of two shapes; fails with a message if incompatible. */
qf_status qfi_broadcast_shape(int na, const int64_t *a, int nb, const int64_t *b, int *nout, int64_t *out);
/* Element strides of a shape of `n` dims right-aligned into `nout` dims, 0 where broadcast. */
void qfi_broadcast_strides(int n, const int64_t *dims, int nout, const int64_t *out_dims, int64_t *strides);
int64_t qfi_numel(int ndim, const int64_t *dims);
/* Element strides of a dense row-major tensor of this shape. */
void qfi_contiguous_strides(int ndim, const int64_t *dims, int64_t *strides);

/* ---- the op table ---------------------------------------------------------------- */
typedef struct qfi_kernel_args {
    const qf_graph *g;
    const qf_node *n;
    const void *const *in;   /* n->n_in pointers; NULL for an omitted input */
    void *const *out;        /* n->n_out pointers */
    void *scratch;           /* cpu_scratch(g, n) bytes, or NULL */
    int threads;
} qfi_kernel_args;

typedef struct qfi_op_def {
    /* Validates arity and attributes, fills n->params. */
    qf_status (*parse)(qf_graph *g, qf_node *n);
    /* Sets output dtypes and shapes from the inputs (and constant inputs' data). */
    qf_status (*infer)(qf_graph *g, qf_node *n);
    /* Reference CPU kernel, FP32 activations. */
    qf_status (*cpu)(const qfi_kernel_args *a);
    /* Bytes of scratch the CPU kernel needs (im2col), or NULL for none. */
    size_t (*cpu_scratch)(const qf_graph *g, const qf_node *n);
    /* Multiply-adds x2 per image (for `qforge info`), or NULL if negligible. */
    int64_t (*flops)(const qf_graph *g, const qf_node *n);
    /* Bit mask of (1u << qf_precision) other than FP32 that the CPU kernel
     * handles itself (INT8 Conv, the conversions). Nodes of any other FP16 or
     * INT8 precision run the FP32 kernel through runtime/cpu/lowp.c, which
     * converts their inputs to f32 and rounds their outputs back. */
    unsigned cpu_native;
} qfi_op_def;

extern const qfi_op_def qfi_ops[QF_OP_COUNT];

/* Frees the data of constants that no node or output reads any more
 * (lib/passes.c; the quantizer calls it after replacing weights). */
void qfi_drop_unused_constants(qf_graph *g);

/* Runs a node's CPU kernel once with freshly allocated scratch (constant folding). */
qf_status qfi_cpu_run_node(const qf_graph *g, const qf_node *n, const void *const *in, void *const *out);

/* ---- INT8 arithmetic (lib/quant_math.c) -------------------------------------------
 * The numerics every engine must reproduce: the CUDA engine computes the same
 * FP32 expressions, so CPU and GPU INT8 results agree to within one unit. */

/* Activation quantization (ONNX QuantizeLinear, zero point 0): x / s in FP32,
 * rounded half to even, saturated to [-128, 127]; NaN gives 0. */
static inline int8_t qfi_quantize_f32(float x, float s)
{
    float v = x / s;
    if (v != v) return 0;
    v = v < -128.0f ? -128.0f : v > 127.0f ? 127.0f : v;
    return (int8_t)__builtin_rintf(v); /* the default rounding mode: to nearest, ties to even */
}
static inline float qfi_dequantize_i8(int8_t q, float s) { return (float)q * s; }

/* The epilogue of an INT8 compute op (Conv, Gemm, MatMul). For an int32
 * accumulator acc of output channel c and an optional residual r:
 *     v = (float)(acc + bias[c]) * m[c]            (one FP32 product, rounded)
 *     v = v + (float)r * m_r                       (residual: product, then sum)
 *     v = min(max(v, lo), hi)                      (activation and saturation)
 *     y = int8: rint(v) (ties to even); f32: v; f16: v rounded to half
 * with m[c] = s_in * s_w[c] / s_out and m_r = s_r / s_out in FP32 (s_out = 1
 * when the output is float). Each operation is one IEEE rounding: no fused
 * multiply-add, so a GPU epilogue computing __fmul_rn/__fadd_rn matches. */
typedef struct qfi_requant {
    const int32_t *bias;   /* [channels] or NULL */
    const float *m;        /* [channels] */
    float m_r;             /* 0 without a residual */
    float lo, hi;          /* output units: integers in [-128, 127] for int8 */
    qf_dtype out;          /* QF_I8, QF_F16 or QF_F32 */
} qfi_requant;

/* Fills rq and m[channels] for a node: input scale s_in, per-channel weight
 * scales s_w, residual scale s_r (0: none), output dtype and scale (s_out is
 * ignored for a float output), and the fused activation. The one place m,
 * m_r and the clamp bounds are computed. */
void qfi_requant_init(qfi_requant *rq, float *m, int64_t channels, float s_in, const float *s_w,
                      const int32_t *bias, float s_r, qf_dtype out, float s_out, qf_act act, float act_lo,
                      float act_hi);
/* Applies the epilogue to n accumulators; element i belongs to output channel
 * ch + i * ch_step (0 along an NCHW plane, 1 along a Gemm row). `res` (int8,
 * n elements) may be NULL; y has rq->out's dtype. */
void qfi_requantize(const qfi_requant *rq, const int32_t *acc, const int8_t *res, int64_t n, int64_t ch,
                    int64_t ch_step, void *y);

/* ---- files ------------------------------------------------------------------------ */
/* Writing a file all or nothing (lib/atomic_file.c): the data goes to a
 * temporary file beside `path` (same folder, so rename() is atomic), which
 * replaces `path` only once every write, flush and sync succeeded; on failure
 * it is removed. */
typedef struct qfi_atomic_file {
    FILE *f;
    char *tmp;
    const char *path;
} qfi_atomic_file;

qf_status qfi_atomic_open(qfi_atomic_file *af, const char *path);
/* Closes and renames; on any error removes the temporary and fails naming `path`. */
qf_status qfi_atomic_commit(qfi_atomic_file *af);
/* Closes and removes the temporary (after an error of the caller's). */
void qfi_atomic_abort(qfi_atomic_file *af);

/* 64 lowercase hex digits (a SHA-256 as tables and .qfm files store it; lib/sha256.c). */
bool qfi_is_sha256_hex(const char *s);

/* ---- graph passes for stored graphs (lib/passes.c) ----------------------------------- */
/* Re-infers every shape of a prepared (possibly quantized) graph at `batch`:
 * sets the inputs' dim 0, lets Reshapes whose constant target hard-codes the
 * old batch copy dim 0 instead, and runs each node's infer in order. FP16 and
 * INT8 nodes whose infer only knows f32 see their f16/i8 data as f32 (as
 * runtime/cpu/lowp.c shows it to their kernels); every output keeps its stored
 * dtype and scale, and an infer that disagrees with the stored dtype is an
 * error. On failure the graph is unusable. */
qf_status qfi_graph_rebatch(qf_graph *g, int batch);
/* Rewrites every Reshape whose constant target hard-codes the graph's batch
 * (shape[0] == g->batch on a batched input) to copy dim 0 instead (ONNX's 0),
 * so a stored graph runs at any batch. Shapes do not change. */
qf_status qfi_graph_free_batch(qf_graph *g);

/* ---- threads ---------------------------------------------------------------------- */
/* Calls fn(arg, i) for i in [0, n) on up to `threads` threads (0 = all cores). */
void qfi_parallel_for(int threads, int64_t n, void (*fn)(void *arg, int64_t i), void *arg);
int qfi_cpu_count(void);

#endif
