/* What every engine backend implements, and the engine object they share. */
#ifndef QFORGE_ENGINE_IMPL_H
#define QFORGE_ENGINE_IMPL_H

#include "internal.h"

typedef struct qfi_backend {
    const char *name;
    qf_status (*create)(qf_engine *e);
    qf_status (*run)(qf_engine *e);
    void (*destroy)(qf_engine *e);
    /* optional (NULL: qf_engine_bench times run() on the host; profile unsupported) */
    qf_status (*bench)(qf_engine *e, int iterations, double *ms);
    qf_status (*profile)(qf_engine *e, double *node_ms);
    /* What the engine's kernel table covers, answered from the graph alone
     * (no device): the precisions (QFI_PREC_BIT) at which it has a kernel for
     * op, and whether it runs node n of g at n's precision (QF_OK, or
     * QF_ERR_UNSUPPORTED with a message naming the node and saying why). */
    unsigned (*op_precisions)(qf_op op);
    qf_status (*check)(const qf_graph *g, const qf_node *n);
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

#endif
