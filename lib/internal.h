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
#include "quant_math.h" /* INT8 numerics and float bit patterns, shared with CUDA */
/* FP16's largest finite value: values beyond it must stay FP32. */
#define QFI_FP16_MAX 65504.0f
/* FP16's smallest normal value, 2^-14: a tensor whose values all lie below it
 * keeps only FP16's subnormal steps, so it stays FP32 (quant/assign.c). */
#define QFI_FP16_MIN_NORMAL 6.103515625e-05f

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
 * 16 or 8 floats wide where the machine can. Only for loops gcc vectorizes
 * itself: a GNU vector type wider than a clone's registers goes through the
 * stack in that clone (explicit vector code takes one instance per width,
 * as runtime/cpu/conv_direct.c and conv_depthwise.c do). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__) && \
    !defined(QFI_NO_SIMD_CLONES)
#define QFI_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define QFI_SIMD_CLONES
#endif

/* ---- error context ------------------------------------------------------------
 * One rule: whoever dispatches work on a node -- the ONNX importer, the graph
 * passes, the engines -- puts "FILE: node NAME (Op): " in front of a failure's
 * message; ops, kernels and parsers write only the detail. These add only
 * the parts the message lacks, so a dispatcher nested in another (constant
 * folding runs an engine) does not repeat them, and the node goes after a
 * file named already. Both return s. */
qf_status qfi_error_node(qf_status s, const qf_graph *g, const qf_node *n);
/* "PATH: " unless the message names its file already (qfi_error_node or
 * qfi_error_file put it there). */
qf_status qfi_error_file(qf_status s, const char *path);
/* Both of the above in one: "PATH: node NODE (OP): ", each part only where
 * the message lacks it; NULL leaves a part out (OP for a node whose op is not
 * known, as the importer's unknown op). For callers that have no qf_node yet. */
qf_status qfi_error_context(qf_status s, const char *path, const char *node, const char *op);
/* A message with the context it carries, kept across calls that may write
 * another (teardown) or handed to another thread (messages are per thread). */
typedef struct qfi_error_saved {
    char msg[1024];
    size_t file_end;
    bool has_node;
} qfi_error_saved;
void qfi_error_save(qfi_error_saved *e);
/* Makes the saved message the current one again; returns s. */
qf_status qfi_error_restore(qf_status s, const qfi_error_saved *e);

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
/* Removes attribute `name` from a node, if present (opset upgrades). */
void qfi_attr_drop(qf_node *n, const char *name);
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
/* Whether value index v (-1: an omitted input) is a constant. */
static inline bool qfi_is_const(const qf_graph *g, int v) { return v >= 0 && (g->values[v].flags & QF_VALUE_CONST); }
/* The readers of every value: node indices use_node[use_start[v] ..
 * use_start[v+1]) in node order, a node reading v twice listed twice. Both
 * arrays are the caller's (free()). */
qf_status qfi_graph_uses(const qf_graph *g, int **use_start, int **use_node);
/* Adds a constant of these dims holding `data` (malloc'd; the graph owns it
 * from here, and frees it when the value cannot be added): its index or -1. */
int qfi_graph_add_const(qf_graph *g, const char *name, qf_dtype dt, int ndim, const int64_t *dims, void *data);
/* Sets a value's dtype and shape (used by shape inference). */
void qfi_value_set_shape(qf_value *v, qf_dtype dt, int ndim, const int64_t *dims);
/* Elements of v that belong to the leading `valid` images of g's batch (a
 * zero-padded final batch); all of them when valid is 0 or v is not batched. */
int64_t qfi_value_valid_numel(const qf_graph *g, const qf_value *v, int valid);
/* Reads a constant integer tensor (i64 or i32) as int64 values; *count set.
 * Fails if the value is not constant. */
qf_status qfi_value_ints(const qf_value *v, int64_t *out, int max, int *count);
/* Reads a constant float/int scalar-or-1-element tensor as float. */
qf_status qfi_value_scalar_f32(const qf_value *v, float *out);

/* ---- shapes and broadcasting ---------------------------------------------------- */
/* Multidirectional (numpy) broadcast of two shapes; fails with a message if incompatible. */
qf_status qfi_broadcast_shape(int na, const int64_t *a, int nb, const int64_t *b, int *nout, int64_t *out);
/* Element strides of a shape of `n` dims right-aligned into `nout` dims, 0 where broadcast. */
void qfi_broadcast_strides(int n, const int64_t *dims, int nout, const int64_t *out_dims, int64_t *strides);
int64_t qfi_numel(int ndim, const int64_t *dims);
/* A tensor that broadcasts over the channels of a (rows, channels) result as
 * one value per channel: a scalar, (channels) or (1, channels). */
bool qfi_is_channel_vector(const qf_value *c, int64_t channels);
/* Bytes of a tensor of this dtype and shape into *out (UINT64_MAX if the
 * product overflows); false if a dim is negative, a dim or the bytes exceed
 * QF_MAX_TENSOR_BYTES. For shapes not yet checked: qf_value_bytes trusts them.
 * Every shape that passes keeps sums and products of two dims far from
 * int64 overflow. */
bool qfi_tensor_bytes(qf_dtype dt, int ndim, const int64_t *dims, uint64_t *out);
/* Element strides of a dense row-major tensor of this shape. */
void qfi_contiguous_strides(int ndim, const int64_t *dims, int64_t *strides);

/* ---- op descriptors (lib/op_table.c, lib/ops/) --------------------------------------
 * Everything the library knows about an op, in one struct that the op's file
 * in lib/ops/ defines and include/qforge/ops.def lists: parsing, shape
 * inference, FLOPs and the traits graph passes, the quantizer and the file
 * formats read. Kernels belong to the engines (runtime/cpu/, runtime/cuda/).
 * ARCHITECTURE.md walks through adding an op. */

/* What an op does in an INT8 graph (quant/assign.c). */
typedef enum qfi_int8_role {
    QFI_INT8_NONE,     /* never INT8: FP16 or FP32 between the INT8 regions */
    QFI_INT8_COMPUTE,  /* int8 x int8 -> int32 with the requantizing epilogue: input 0 is data,
                        * input 1 a constant weight quantized per output channel, input 2 an
                        * optional constant bias folded into the int32 bias */
    QFI_INT8_PASS,     /* moves or selects values: int8 in and out, the output at the input's scale */
    QFI_INT8_REQUANT,  /* FP32 arithmetic on the dequantized input, quantized at its own output scale */
} qfi_int8_role;

/* qfi_op_desc.traits */
enum {
    QFI_OP_EPILOGUE = 1u << 0,   /* an INT8 node carries a fused activation and residual (qf_op_has_epilogue) */
    QFI_OP_CONVERSION = 1u << 1, /* only changes dtypes (qf_op_is_conversion) */
    QFI_OP_KEEP_FP32 = 1u << 2,  /* stays FP32 in an FP16 graph (conversions, Constant, Shape) */
    /* each output element from the same elements of the inputs, computed
     * by the engines' elementwise kernels: an FP16 node of the op can store
     * its output quantized itself (quant/assign.c) */
    QFI_OP_ELEMENTWISE = 1u << 3,
};

#define QFI_PREC_BIT(p) (1u << (p))

/* A node that INT8 computes as a layer: an op of the compute role reading a
 * varying input 0 and nothing else that varies (lib/op_table.c). */
bool qfi_int8_layer(const qf_graph *g, const qf_node *n);

/* An interval that holds every element of a tensor (lo may be -INFINITY, hi
 * INFINITY): what the quantizer knows of a value's range from the graph alone. */
typedef struct qfi_range {
    float lo, hi;
} qfi_range;

typedef struct qfi_op_desc {
    /* Validates arity and attributes, fills n->params. */
    qf_status (*parse)(qf_graph *g, qf_node *n);
    /* Sets output dtypes and shapes from the inputs (and constant inputs' data). */
    qf_status (*infer)(qf_graph *g, qf_node *n);
    /* Multiply-adds x2 per image (for `qforge info`), or NULL if negligible. */
    int64_t (*flops)(const qf_graph *g, const qf_node *n);
    unsigned traits;                 /* QFI_OP_* */
    qfi_int8_role int8;
    /* Optional: whether this node can take its INT8 role (an INT8 compute op's
     * weight shapes, a MaxPool without Indices); NULL: every node can. */
    bool (*int8_ok)(const qf_graph *g, const qf_node *n);
    /* QFI_INT8_COMPUTE: the weight (input 1) viewed as (outer, channels,
     * inner), channels being the output channels it is quantized along. */
    void (*weight_layout)(const qf_graph *g, const qf_node *n, int64_t *outer, int64_t *channels, int64_t *inner);
    /* Bit k: input k is a parameter, not data (Resize's roi, scales and
     * sizes): it stays f32 in FP16 and INT8 nodes. */
    unsigned params;
    /* Precisions besides FP32 (QFI_PREC_BIT) at which the op's nodes keep
     * their stored dtypes: infer checks them and every engine's kernel
     * computes in them (INT8 for compute ops, FP16 and INT8 for conversions).
     * At any other FP16 or INT8 precision the node sees the f32 view
     * (qfi_node_f32_view). */
    unsigned typed;
    /* Optional: rewrites an opset 6 node into its opset 7 form, or refuses it
     * (lib/onnx_import.c). */
    qf_status (*from_opset6)(qf_graph *g, qf_node *n);
    /* Optional: an interval holding output 0, given intervals holding each
     * input (in[k]); quant/range.c gives INT8 one-sided activations (after
     * Relu, HardSwish, SiLU, ...) their zero points from it. NULL: unbounded,
     * except for ops whose INT8 role moves or averages values (PASS,
     * REQUANT), whose output lies within their inputs'. */
    qfi_range (*range)(const qf_graph *g, const qf_node *n, const qfi_range *in);
} qfi_op_desc;

/* The descriptor of every op of ops.def, indexed by qf_op. */
extern const qfi_op_desc *const qfi_ops[QF_OP_COUNT];

/* ---- lib/value_ranges.c ------------------------------------------------------------ */
/* The most inputs a node's range is computed from (more: unbounded). */
#define QFI_RANGE_MAX_INPUTS 64
/* *out (n_values entries, the caller frees): an interval holding each value of
 * the prepared FP32 graph g, from its constants and its ops' ranges
 * (qfi_op_desc.range); graph inputs are unbounded. */
qf_status qfi_value_ranges(const qf_graph *g, qfi_range **out);

/* ---- the f32 view ----------------------------------------------------------------
 * An FP16 or INT8 node whose op does not keep its dtypes at that precision
 * (qfi_op_desc.typed) is computed in FP32 arithmetic: its infer and its
 * kernels see the f32 view, in which every f16 value and every non-constant
 * int8 value (an activation with its scale) is labelled f32; the engines
 * widen such inputs (f16 exactly, int8 as (q - zero_point) * scale) and round or quantize
 * the outputs back. One rule for shape inference (lib/passes.c) and every
 * engine. */
bool qfi_node_f32_view(const qf_node *n);
/* The dtype value v has in the f32 view. */
static inline qf_dtype qfi_f32_view_dtype(const qf_value *v)
{
    return v->dtype == QF_F16 || (v->dtype == QF_I8 && !(v->flags & QF_VALUE_CONST)) ? QF_F32 : v->dtype;
}
/* Fills values[] (g->n_values entries) with g's values relabelled as the f32
 * view shows them (shallow copies: data pointers are g's) and *view with g
 * pointing at them. */
void qfi_f32_view_init(const qf_graph *g, qf_graph *view, qf_value *values);

/* Computes node n, whose inputs are all constants, and makes its outputs
 * constants (the node itself stays; the caller drops it). */
qf_status qfi_fold_node(qf_graph *g, qf_node *n);

/* Frees the data of constants that no node or output reads any more
 * (lib/passes.c; the quantizer calls it after replacing weights). */
void qfi_drop_unused_constants(qf_graph *g);

/* A graph of one node of g, to run it alone on an engine (lib/passes.c:
 * constant folding; calib/auto.c: a layer fed a quantized input). It borrows
 * the node, its attributes and its constant inputs' data from g, which must
 * outlive it; the node's non-constant inputs are its inputs, in order, and its
 * outputs its outputs. Nothing to free; the struct must not move once built.
 * False (nothing built) for a node of more than QFI_ONE_NODE_MAX_IO inputs or
 * outputs. */
#define QFI_ONE_NODE_MAX_IO 64
typedef struct qfi_one_node {
    qf_value vals[2 * QFI_ONE_NODE_MAX_IO];
    int in[QFI_ONE_NODE_MAX_IO], out[QFI_ONE_NODE_MAX_IO], ins[QFI_ONE_NODE_MAX_IO], outs[QFI_ONE_NODE_MAX_IO];
    qf_node node;
    qf_graph g;
} qfi_one_node;
bool qfi_one_node_init(qfi_one_node *o, const qf_graph *g, const qf_node *n);
/* Runs the prepared graph g once on the CPU engine (`threads`, 0 = all cores)
 * on `input` (its one input, at its batch), with `observer` called on every
 * value as it is written (lib/passes.c; the calibration passes that look at
 * each layer's input use it). */
qf_status qfi_run_observed(const qf_graph *g, int threads, const float *input, qf_observer_fn observer, void *user);

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
 * old batch copy dim 0 instead, and runs each node's infer in order (on the
 * f32 view where qfi_node_f32_view says so); every output keeps its stored
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
/* The calling thread's floating-point environment (x86: MXCSR; 0 and no-ops
 * elsewhere), which qfi_parallel_for's threads take on for its call; and
 * that environment with subnormal inputs and results flushed to zero. */
unsigned qfi_fp_env_get(void);
void qfi_fp_env_set(unsigned env);
unsigned qfi_fp_env_flushing(unsigned env);

#endif
