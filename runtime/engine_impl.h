/* What every engine backend implements, and the engine object they share. */
#ifndef QFORGE_ENGINE_IMPL_H
#define QFORGE_ENGINE_IMPL_H

#include "internal.h"

typedef struct qfi_backend {
    const char *name;
    qf_status (*create)(qf_engine *e);
    /* items: the leading items of the batch whose results are wanted (the
     * graph's batch for a whole run); a device engine uploads only their
     * inputs and computes the rest on whatever its buffers held */
    qf_status (*run)(qf_engine *e, int items);
    void (*destroy)(qf_engine *e);
    /* optional (NULL: qf_engine_bench times run() on the host; profile unsupported) */
    qf_status (*bench)(qf_engine *e, int iterations, double *ms);
    qf_status (*profile)(qf_engine *e, double *node_ms);
    /* optional (NULL: a copy into the host buffer): bytes of input i at byte
     * offset from src, checked against the input's size by the caller */
    qf_status (*write_input)(qf_engine *e, int i, size_t offset, const void *src, size_t bytes);
    /* optional (NULL: a copy from the host buffer): the same for output i into dst */
    qf_status (*read_output)(const qf_engine *e, int i, size_t offset, void *dst, size_t bytes);
    /* What the engine's kernel table covers, answered from the graph alone
     * (no device): the precisions (QFI_PREC_BIT) at which it has a kernel for
     * op, and whether it runs node n of g at n's precision (QF_OK, or
     * QF_ERR_UNSUPPORTED with a message naming the node and saying why). */
    unsigned (*op_precisions)(qf_op op);
    qf_status (*check)(const qf_graph *g, const qf_node *n);
    /* Bytes the device can give an engine for g's activations now: its free
     * memory, less what the engine takes whatever the batch (weights uploaded,
     * workspaces). Required: engines check it before they allocate. */
    qf_status (*free_memory)(const qf_graph *g, const qf_engine_opts *opts, uint64_t *bytes);
    /* optional (NULL: every node runs on opts.device) */
    qf_device_kind (*node_device)(const qf_engine *e, int node);
    /* optional: one line (no newline) on what the backend finds on this
     * machine: devices, instruction sets, the libraries it loads */
    void (*describe)(char *buf, size_t len);
} qfi_backend;

struct qf_engine {
    const qf_graph *g;
    qf_engine_opts opts;
    const qfi_backend *be;
    void *impl;
    void **inputs;       /* host buffers per graph input */
    void **outputs;      /* host buffers per graph output */
    size_t arena_bytes;
};

extern const qfi_backend qfi_cpu_backend;
#ifdef QF_HAVE_CUDA
extern const qfi_backend qfi_cuda_backend;
#endif

/* Liveness-based memory plan: offsets (aligned to `align`) into one arena for
 * every non-constant value; constants get SIZE_MAX. Values live from the step
 * that produces them (inputs: before the first) to their last reader (outputs:
 * to the end), and two values share bytes only if their lives do not overlap. */
qf_status qfi_plan_memory(const qf_graph *g, size_t align, size_t *offsets, size_t *total);
/* The same where some values are views: view_of[v] >= 0 names the value
 * whose bytes v shares (a root, itself no view; neither an input nor an
 * output), -1 otherwise. A view gets its root's offset, and every reader of
 * a view keeps the root alive. read_at (or NULL) names reads that no
 * node lists: read_at[v] >= 0 is the last step at which a backend's fused
 * layer reads v (the CUDA engine's stem conv reading the graph's float input
 * in place of its skipped QuantizeLinear's output), -1 none; v lives to it. */
qf_status qfi_plan_memory_views(const qf_graph *g, const int *view_of, const int *read_at, size_t align, size_t *offsets,
                                size_t *total);

/* Checked by each backend before it allocates: an engine for g at its batch
 * needs `need` bytes of `where` ("memory", "cuda:0 memory") that grow with
 * the batch (activations, scratch), against `avail` from free_memory. Fails
 * with QF_ERR_NOMEM, a message naming the batch and the bytes. */
qf_status qfi_engine_fits(const qf_graph *g, const char *where, uint64_t need, uint64_t avail);
/* The arithmetic of qf_engine_max_batch: the largest batch, at most `limit`,
 * at which every tensor of g (any batch) stays within QF_MAX_TENSOR_BYTES and
 * its planned activations within `avail` bytes, taking every activation to
 * grow with the batch. 0: not even batch 1. */
int qfi_max_batch(const qf_graph *g, uint64_t avail, int limit);
#endif
