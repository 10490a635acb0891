/* The deployable quantized model file (.qfm, qforge-model(5)): one
 * little-endian file holding the graph with every node's precision and
 * quantization parameters, the weights (64-byte aligned, mappable), the
 * preprocessing the model was calibrated with and its provenance. */
#ifndef QFORGE_MODEL_H
#define QFORGE_MODEL_H

#include <stdbool.h>
#include <stdint.h>
#include "qforge/status.h"
#include "qforge/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The format version this qforge writes: major.minor. A reader accepts every
 * minor of its major and refuses a newer major (QF_ERR_UNSUPPORTED). */
#define QF_QFM_VERSION_MAJOR 1
#define QF_QFM_VERSION_MINOR 3

/* What a .qfm says about where it came from. Strings are NUL-terminated; ""
 * means unknown. */
typedef struct qf_qfm_meta {
    char preprocess[1024];   /* qf_preprocess_format() text the model was calibrated with */
    char source_sha256[65];  /* lowercase hex SHA-256 of the FP32 source model file */
    char calib_method[32];   /* "entropy", "minmax", "percentile", "mse" */
    char scale_source[16];   /* where the INT8 scales came from: "calibration" (a table), "model" (the
                              * source model's own QuantizeLinear/DequantizeLinear or QLinear ops) */
    int64_t calib_images;    /* images calibrated on (0: none) */
    qf_precision precision;  /* the --precision that was asked for */
    char tool_version[64];   /* qf_version() of the qforge that wrote the file (set by the writer) */
    int batch;               /* batch size the graph is stored at (set from the graph by the writer) */
    char equalized[65];      /* qf_graph.equalized of the graph stored: "" unless it was cross-layer
                              * equalized before it was quantized (set from the graph by the writer,
                              * and given back to the graph by the reader) */
} qf_qfm_meta;

/* Empty strings, no images, INT8. */
void qf_qfm_meta_init(qf_qfm_meta *m);

/* Writes the prepared (and usually quantized) graph g with meta (may be NULL)
 * to path, all or nothing: a temporary file beside path is renamed over it
 * once complete. The graph is stored at g->batch; tool_version and batch of
 * meta are ignored (the writer fills them). */
qf_status qf_qfm_write(const qf_graph *g, const qf_qfm_meta *meta, const char *path);

/* Reads a .qfm. Every file is treated as hostile: a malformed, truncated or
 * corrupt file fails with a one-line message naming the file and what is
 * wrong (QF_ERR_FORMAT; QF_ERR_UNSUPPORTED for a newer format version; a
 * node its op rejects keeps the op's code). Every node's parameters are
 * rebuilt from its attributes and every stored shape is checked by inferring
 * it again. batch 0 keeps the stored batch; another batch re-infers every
 * shape at it (Reshapes that hard-code the stored batch copy dim 0 instead).
 * meta may be NULL. The weights are copied out of the file, 64-byte aligned. */
qf_status qf_qfm_read(const char *path, int batch, qf_graph **out, qf_qfm_meta *meta);

/* True if path starts with the .qfm magic (a cheap test to pick a reader). */
bool qf_qfm_probe(const char *path);

#ifdef __cplusplus
}
#endif
#endif
