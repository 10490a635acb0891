/* The graph IR: values (tensors) and nodes in topological order, built first
 * and computed later. Import (ONNX, .qfm) produces a qf_graph; passes rewrite it
 * in place; engines execute it. */
#ifndef QFORGE_GRAPH_H
#define QFORGE_GRAPH_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "qforge/status.h"
#include "qforge/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QF_MAX_DIMS 8
/* Hard bounds on what a model file may ask for; readers check them before they
 * allocate (a hostile file cannot make us allocate more). */
#define QF_MAX_NODES   100000
#define QF_MAX_VALUES  400000
#define QF_MAX_TENSOR_BYTES ((int64_t)4 << 30)

/* Operators: one list, include/qforge/ops.def; the op descriptors
 * (lib/op_table.c) and every engine's kernel table are built from it. */
typedef enum qf_op {
#define QF_OP(id, ...) QF_OP_##id,
#include "qforge/ops.def"
#undef QF_OP
    QF_OP_COUNT
} qf_op;

const char *qf_op_name(qf_op op);
/* Looks an op up by its ONNX op_type; false if qforge does not implement it. */
bool qf_op_lookup(const char *onnx_name, qf_op *out);
/* QuantizeLinear, DequantizeLinear and Cast: nodes that only change dtypes,
 * not counted as computation. */
bool qf_op_is_conversion(qf_op op);
/* Conv, Gemm, MatMul: an INT8 node of this op carries a fused epilogue
 * (activation qf_node.act, residual input) and operands x, W, bias, weight
 * scales (lib/ops/qdq.c's qfi_int8_operands). */
bool qf_op_has_epilogue(qf_op op);
/* The precisions (bit 1u << qf_precision) a node of op can have in a
 * quantized graph: FP32 always, FP16 unless the op stays FP32, INT8 where it
 * has an INT8 form. */
unsigned qf_op_precisions(qf_op op);

typedef enum qf_value_flags {
    QF_VALUE_INPUT  = 1 << 0, /* a graph input, fed by the caller */
    QF_VALUE_OUTPUT = 1 << 1, /* a graph output */
    QF_VALUE_CONST  = 1 << 2, /* data is known at load time (initializer or folded) */
} qf_value_flags;

/* A tensor of the graph. dims[i] < 0 means "not known yet" (symbolic). */
typedef struct qf_value {
    char *name;
    qf_dtype dtype;
    int ndim;
    int64_t dims[QF_MAX_DIMS];
    void *data;       /* owned; non-NULL exactly when QF_VALUE_CONST */
    int producer;     /* index of the node that writes it, -1 for inputs/constants */
    unsigned flags;
    float scale;      /* QF_I8 activations: real = scale * (q - zero_point); else 0 */
    int32_t zero_point; /* QF_I8 activations: in [-128, 127]; 0 (symmetric) unless imported
                         * from an asymmetric model (uint8 is stored shifted by -128); else 0 */
} qf_value;

/* Precision a node computes in (quantized graphs; FP32 after import). */
typedef enum qf_precision {
    QF_PREC_FP32 = 0,
    QF_PREC_FP16,
    QF_PREC_INT8,
    QF_PRECISION_COUNT
} qf_precision;

/* Activation fused into a node's epilogue (stored in .qfm files: append only). */
typedef enum qf_act {
    QF_ACT_NONE = 0,
    QF_ACT_RELU,
    QF_ACT_CLIP,       /* clamp to [act_lo, act_hi] (ReLU6 is CLIP 0..6) */
    QF_ACT_SIGMOID,    /* 1 / (1 + e^-x) */
    QF_ACT_SILU,       /* x * sigmoid(x) (Swish) */
    QF_ACT_HARD_SWISH, /* x * max(0, min(1, x / 6 + 1/2)) */
    QF_ACT_GELU,       /* x/2 (1 + erf(x / sqrt 2)) */
    QF_ACT_GELU_TANH,  /* x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    QF_ACT_COUNT
} qf_act;

typedef enum qf_attr_type {
    QF_ATTR_INT,
    QF_ATTR_FLOAT,
    QF_ATTR_STRING,
    QF_ATTR_INTS,
    QF_ATTR_FLOATS,
    QF_ATTR_TENSOR,
    QF_ATTR_TYPE_COUNT
} qf_attr_type;

typedef struct qf_attr {
    char *name;
    qf_attr_type type;
    int64_t i;
    float f;
    char *s;
    int n;            /* count of ints / floats */
    int64_t *ints;
    float *floats;
    qf_value *t;      /* owned tensor (Constant's value) */
} qf_attr;

typedef struct qf_node {
    char *name;
    qf_op op;
    int n_in, n_out;
    int *in;          /* value indices; -1 for an omitted optional input */
    int *out;
    int n_attr;
    qf_attr *attrs;
    void *params;     /* op-specific, filled by the op's parse(); freed with free() */
    qf_precision precision;
    qf_act act;       /* fused activation (quantized graphs) */
    float act_lo, act_hi;
} qf_node;

typedef struct qf_graph {
    char *source;         /* file it came from, for messages */
    int64_t opset;        /* default-domain opset */
    int batch;            /* batch size shapes were inferred at; 0 before */
    int n_values, cap_values;
    qf_value *values;
    int n_nodes, cap_nodes;
    qf_node *nodes;       /* topological order after qf_graph_prepare() */
    int n_inputs, n_outputs;
    int *inputs, *outputs;
    /* After qf_graph_equalize moved weights between layers: the SHA-256 (hex)
     * of what it did, which calibration tables and .qfm files record, so that
     * a table is only used on a graph equalized alike; "" otherwise. */
    char equalized[65];
} qf_graph;

qf_graph *qf_graph_new(const char *source);
void qf_graph_free(qf_graph *g);

/* Adds a value; returns its index or -1 (out of memory, message set). */
int qf_graph_add_value(qf_graph *g, const char *name, qf_dtype dtype, int ndim, const int64_t *dims);
/* Index of the value with this name, or -1. */
int qf_graph_find_value(const qf_graph *g, const char *name);
/* Adds a node; `in`/`out` are copied. Returns its index or -1. */
int qf_graph_add_node(qf_graph *g, const char *name, qf_op op, int n_in, const int *in, int n_out, const int *out);

int64_t qf_value_numel(const qf_value *v);
size_t qf_value_bytes(const qf_value *v);

typedef struct qf_load_opts {
    int batch;            /* batch size to infer shapes at; 0 means the model's own (1 if symbolic) */
} qf_load_opts;

/* Reads an ONNX model (opsets 7..21; opset 6 is read as 7 where the two
 * agree) into a raw graph: attributes parsed, initializers attached, shapes as
 * declared. Hostile input returns an error naming the file and the node or
 * tensor. */
qf_status qf_onnx_load(const char *path, qf_graph **out);

/* Runs the standard passes: topological sort (cycles rejected), Identity and
 * Dropout removal, shape inference at `batch` with constant folding, BatchNorm
 * folding into Conv, Reshape-to-batch fixing. After it every value has a
 * concrete shape. */
qf_status qf_graph_prepare(qf_graph *g, int batch);

/* Loads and prepares in one call. */
qf_status qf_model_load(const char *path, const qf_load_opts *opts, qf_graph **out);

/* Summary numbers for `qforge info`. */
typedef struct qf_graph_stats {
    int64_t params;              /* elements of constant weights used by compute ops */
    int64_t flops;               /* per image: multiply-adds count as 2 */
    int op_count[QF_OP_COUNT];
} qf_graph_stats;
void qf_graph_stats_compute(const qf_graph *g, qf_graph_stats *st);

#ifdef __cplusplus
}
#endif
#endif
