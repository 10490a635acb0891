/* Building an ONNX model with protobuf-c and writing it (lib/onnx_write.c):
 * a builder owns every allocation the protobuf points to until the file is
 * written. The Q/DQ export (quant/export_onnx.c) decides what to write. */
#ifndef QFORGE_ONNX_WRITE_H
#define QFORGE_ONNX_WRITE_H

#include "internal.h"
#include "onnx/onnx.pb-c.h"

typedef struct qfi_onnx_nameset {
    char **slot; /* open addressing; NULL = empty */
    size_t cap, n;
} qfi_onnx_nameset;

/* Zero-initialized before use; qfi_onnx_builder_free releases everything. */
typedef struct qfi_onnx_builder {
    void **allocs; /* every allocation, freed together */
    size_t n_allocs, cap_allocs;
    Onnx__NodeProto **nodes;
    size_t n_nodes, cap_nodes;
    Onnx__TensorProto **inits;
    size_t n_inits, cap_inits;
    qfi_onnx_nameset tensors, node_names; /* ONNX wants every tensor written once under one name */
} qfi_onnx_builder;

/* Zeroed memory (or printf output) that lives as long as the builder; NULL when out of memory. */
void *qfi_onnx_alloc(qfi_onnx_builder *ob, size_t n);
char *qfi_onnx_printf(qfi_onnx_builder *ob, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A tensor name not used yet: `base`, else base_1, base_2, ... (NULL when base
 * is: an allocation before failed). */
char *qfi_onnx_tensor_name(qfi_onnx_builder *ob, const char *base);
bool qfi_onnx_tensor_name_used(const qfi_onnx_builder *ob, const char *name);

/* A tensor of dtype dt with raw data (not copied: it must outlive the write). */
Onnx__TensorProto *qfi_onnx_tensor(qfi_onnx_builder *ob, const char *name, qf_dtype dt, int ndim, const int64_t *dims,
                                   const void *data);
bool qfi_onnx_add_initializer(qfi_onnx_builder *ob, Onnx__TensorProto *t);
/* An initializer under `name` (returned; NULL on failure). */
const char *qfi_onnx_add_init(qfi_onnx_builder *ob, const char *name, qf_dtype dt, int ndim, const int64_t *dims,
                              const void *data);
/* A float scalar (ndim 0) or vector initializer under a fresh name from `base`. */
const char *qfi_onnx_add_floats(qfi_onnx_builder *ob, const char *base, int ndim, int64_t n, const float *v);
/* An int8 zero point shaped like a scalar (ndim 0) or a vector of n, every
 * element z (0: symmetric). */
const char *qfi_onnx_add_zero_point(qfi_onnx_builder *ob, const char *base, int ndim, int64_t n, int8_t z);
const char *qfi_onnx_add_ints(qfi_onnx_builder *ob, const char *base, int64_t n, const int64_t *v);

/* Appends a node op_type(in...) -> out...; names may be "" for omitted optional inputs. */
Onnx__NodeProto *qfi_onnx_add_node(qfi_onnx_builder *ob, const char *op_type, const char *name, int n_in,
                                   const char *const *in, int n_out, const char *const *out);
Onnx__AttributeProto *qfi_onnx_add_attr(qfi_onnx_builder *ob, Onnx__NodeProto *np, const char *name,
                                        Onnx__AttributeProto__AttributeType t);
bool qfi_onnx_attr_int(qfi_onnx_builder *ob, Onnx__NodeProto *np, const char *name, int64_t v);
/* Removes attribute `name` of np, returning it (NULL when absent). */
Onnx__AttributeProto *qfi_onnx_take_attr(Onnx__NodeProto *np, const char *name);
/* Sets input k of np, padding with "" (omitted) inputs before it. */
bool qfi_onnx_set_input(qfi_onnx_builder *ob, Onnx__NodeProto *np, size_t k, const char *name);

/* A graph input or output: its type, dim 0 symbolic ("batch"). */
Onnx__ValueInfoProto *qfi_onnx_value_info(qfi_onnx_builder *ob, const char *name, qf_dtype dt, int ndim,
                                          const int64_t *dims);
/* Hands the builder's nodes and initializers to gp (whose inputs and outputs
 * the caller set) and fills m: one opset import, its IR version, producer, doc. */
qf_status qfi_onnx_model_finish(qfi_onnx_builder *ob, Onnx__ModelProto *m, Onnx__GraphProto *gp, int64_t opset,
                                const char *doc);
/* Serializes m to path atomically (no partial file on failure). */
qf_status qfi_onnx_model_write(const Onnx__ModelProto *m, const char *path);
void qfi_onnx_builder_free(qfi_onnx_builder *ob);

#endif
