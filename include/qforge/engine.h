/* Engines execute a prepared graph on a device. Memory is planned once when
 * the engine is built; qf_engine_run() allocates nothing. */
#ifndef QFORGE_ENGINE_H
#define QFORGE_ENGINE_H

#include "qforge/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qf_engine qf_engine;

/* Called for every graph input and every node output as it is produced, in
 * execution order, with the value's data on the host in its dtype (f32 for
 * activations). Calibration hangs its histograms here. */
typedef void (*qf_observer_fn)(void *user, const qf_graph *g, int value, const void *data);

/* Calibration's fast path on a device: an engine that can (CUDA) hands over
 * each f32 node output as its |x| histogram (qf_histogram, calib.h), built
 * where the data is, instead of copying the tensor to the host for the
 * observer. The count function gives how many leading elements of the value
 * to include (the real images of a padded batch). */
struct qf_histogram;
typedef void (*qf_histogram_observer_fn)(void *user, const qf_graph *g, int value, const struct qf_histogram *h);
typedef int64_t (*qf_observer_count_fn)(void *user, const qf_graph *g, int value);

typedef enum qf_device_kind { QF_DEVICE_CPU, QF_DEVICE_CUDA, QF_DEVICE_KIND_COUNT } qf_device_kind;

typedef struct qf_engine_opts {
    qf_device_kind device;
    int device_index;       /* cuda:N */
    int threads;            /* CPU worker threads; 0 = all cores */
    qf_observer_fn observer;
    void *observer_user;
    /* optional, with observer (same user): where the engine can, f32 node
     * outputs go here instead; graph inputs and other values still go to observer */
    qf_histogram_observer_fn hist_observer;
    qf_observer_count_fn hist_count;
} qf_engine_opts;

/* One line per engine kind this build has, "kind: what it finds here"
 * (the CPU's INT8 instruction set and BLAS; CUDA devices, driver, cuBLASLt
 * and the optional cuDNN, or why each is missing), each ending in a newline:
 * what `qforge --version` prints after the version. Loads the GPU libraries
 * as an engine would; never fails (a truncated buffer ends in "..."). */
void qf_engine_describe_backends(char *buf, size_t len);

/* Parses "cpu", "cuda" or "cuda:N". */
qf_status qf_device_parse(const char *s, qf_device_kind *kind, int *index);

/* What an engine kind's kernels cover, answered without a device (per-node
 * placement, `qforge info --ops`). qf_engine_supports: whether an engine of
 * this kind has a kernel that runs node n of g at n's precision (where the
 * CUDA engine has none, it runs the node on the host); when not,
 * qf_error_message() says why. qf_engine_op_precisions: the precisions
 * (bit 1u << qf_precision) at which it has a kernel for op; fails with
 * QF_ERR_UNSUPPORTED for a kind this qforge was built without. */
bool qf_engine_supports(qf_device_kind kind, const qf_graph *g, const qf_node *n);
qf_status qf_engine_op_precisions(qf_device_kind kind, qf_op op, unsigned *precisions);

/* Builds an engine for a prepared graph. The graph must outlive the engine.
 * Before it allocates, it checks the activations at g's batch against the
 * memory its device has free: a batch that does not fit fails with
 * QF_ERR_NOMEM and a message naming the batch and the bytes. */
qf_status qf_engine_create(const qf_graph *g, const qf_engine_opts *opts, qf_engine **out);
/* The same, but where a device engine cannot be built (QF_ERR_DEVICE: no
 * usable GPU; QF_ERR_UNSUPPORTED: a GPU too old, or a build without CUDA)
 * the CPU engine is built instead: the reason goes to qf_log (QF_LOG_INFO)
 * and opts->device becomes QF_DEVICE_CPU. (A node the CUDA engine has no
 * kernel for does not fail it: that node runs on the host, see
 * qf_engine_node_device.) */
qf_status qf_engine_create_or_cpu(const qf_graph *g, qf_engine_opts *opts, qf_engine **out);

/* The largest batch, at most `limit`, that the model of g (prepared at any
 * batch) can run at on opts' device now: every tensor within
 * QF_MAX_TENSOR_BYTES, and the activations, as the engine's memory plan lays
 * them out, within the memory the device has free. An estimate (every
 * activation is taken to grow with the batch; a device engine adds scratch
 * buffers); 0 when not even batch 1 fits. */
qf_status qf_engine_max_batch(const qf_graph *g, const qf_engine_opts *opts, int limit, int *batch);
void qf_engine_free(qf_engine *e);

/* Host buffer of graph input i (shape and dtype of g->values[g->inputs[i]]),
 * to be filled before qf_engine_run(). */
void *qf_engine_input(qf_engine *e, int i);
qf_status qf_engine_run(qf_engine *e);
/* A run of which only the first `items` items of the batch matter (1 to the
 * batch): a server's batch padded to the engine's size. A device engine
 * uploads only those items' inputs; the other items' outputs are
 * unspecified (computed from whatever the buffers held: items never mix). */
qf_status qf_engine_run_items(qf_engine *e, int items);
/* Copies `bytes` from src into graph input i at byte `offset` of its batch.
 * The CPU engine takes host memory (a copy into qf_engine_input's buffer).
 * A CUDA engine takes host memory or memory of its GPU (CUDA's unified
 * addressing tells which) and copies straight to the device: the next run
 * then takes input i from what this wrote, not from the host buffer, so a
 * caller writes every item it wants computed. src must stay valid until the
 * next run returns. */
qf_status qf_engine_write_input(qf_engine *e, int i, size_t offset, const void *src, size_t bytes);
/* Copies `bytes` of graph output i at byte `offset` of its batch, after a run,
 * into dst: host memory, or on a CUDA engine also memory of its GPU. */
qf_status qf_engine_read_output(const qf_engine *e, int i, size_t offset, void *dst, size_t bytes);
/* Host buffer of graph output i after a run. */
const void *qf_engine_output(const qf_engine *e, int i);
/* Bytes of working memory the plan reserved for activations. */
size_t qf_engine_arena_bytes(const qf_engine *e);

/* For `qforge bench`: runs the forward pass `iterations` times back to back
 * on the inputs of the last qf_engine_run() and stores each run's time in
 * ms[i]. A device engine neither re-uploads the inputs nor downloads the
 * outputs (a pipeline overlaps both with compute) nor waits between runs,
 * and times each run with device events; the CPU engine times
 * qf_engine_run() with the host clock. */
qf_status qf_engine_bench(qf_engine *e, int iterations, double *ms);
/* Where node i of the graph runs: the engine's device, or QF_DEVICE_CPU for
 * a node a device engine runs on the host because it has no kernel for it
 * (the CUDA engine logs each such node once, as it is built). */
qf_device_kind qf_engine_node_device(const qf_engine *e, int node);
/* Time of every node over one run of the current inputs, node_ms[i] for
 * g->nodes[i] in ms (0 for a node fused into another). QF_ERR_UNSUPPORTED
 * where the engine cannot time nodes. */
qf_status qf_engine_profile(qf_engine *e, double *node_ms);

#ifdef __cplusplus
}
#endif
#endif
