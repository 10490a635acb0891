/* Host nodes: a node the CUDA engine has no kernel for (or whose kernel
 * refuses its attributes or dtypes) runs the CPU engine's kernel on the host,
 * from the stream: its device inputs are copied (NHWC ones first made
 * logical) into pinned buffers, a cudaLaunchHostFunc runs the kernel, its
 * outputs are copied back. All three are stream work, so the CUDA graph
 * captures them and the rest of the pass stays one graph; the stream waits on
 * the host meanwhile, which costs time (bench --profile shows it) but never
 * aborts a run. Also here: the op families that have no device kernel. */
#include "cuda_internal.h"
extern "C" {
#include "../cpu/kernels.h"
}

/* The families without a device kernel: shape and mask arithmetic, always
 * constant once shapes are known (graph folding removes these nodes at load,
 * so one reaching the engine is rare). */
const cu_op cu_op_shape = {}, cu_op_constant = {}, cu_op_range = {}, cu_op_constant_of_shape = {}, cu_op_where = {},
            cu_op_scatter_nd = {}, cu_op_logic = {};

/* Whether `list` (comma-separated ONNX op names, or "all") names op. */
static bool names_op(const char *list, qf_op op)
{
    const char *name = qf_op_name(op);
    const size_t len = strlen(name);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if ((n == len && !strncmp(p, name, n)) || (n == 3 && !strncmp(p, "all", 3))) return true;
        p += n + (end ? 1 : 0);
    }
    return false;
}

qf_status cu_host_plan(const qf_graph *g, bool *on_host, char **why)
{
    const char *forced = getenv("QFORGE_CUDA_HOST_OPS");
    for (int i = 0; i < g->n_nodes; i++) {
        const qf_op op = g->nodes[i].op;
        char msg[512];
        if (cu_check_kernel(g, &g->nodes[i]) != QF_OK)
            snprintf(msg, sizeof msg, "%s", qf_error_message());
        else if (forced && names_op(forced, op))
            snprintf(msg, sizeof msg, "QFORGE_CUDA_HOST_OPS names %s", qf_op_name(op));
        else
            continue;
        on_host[i] = true;
        if (!(why[i] = strdup(msg))) return QF_ERR_NOMEM;
    }
    return QF_OK;
}

qf_status cu_host_setup(cu_engine *c)
{
    return qfi_cpu_lowp_create(c->g, c->on_host, &c->host_lowp);
}

void cu_host_teardown(cu_engine *c)
{
    qfi_cpu_lowp_free(c->host_lowp);
    c->host_lowp = NULL;
}

typedef struct host_state {
    cu_engine *c;
    const qf_node *n;
    const void **in;      /* the CPU kernel's inputs: pinned copies, or constants' host data */
    void **out;           /* its outputs: pinned */
    void **pinned;        /* n_in + n_out pinned buffers (NULL where none) */
    void *scratch;
    void *kstate;         /* what the CPU kernel's prepare built (INT8 weights packed) */
    /* written by host_run on the callback thread (messages are per thread),
     * read after the stream is synchronized */
    qf_status st;
    qfi_error_saved err;
} host_state;

static void host_free(void *p)
{
    host_state *h = (host_state *)p;
    if (h->pinned)
        for (int k = 0; k < h->n->n_in + h->n->n_out; k++)
            if (h->pinned[k]) cudaFreeHost(h->pinned[k]);
    free(h->pinned);
    free(h->in);
    free(h->out);
    free(h->scratch);
    qfi_cpu_node_release(h->n, h->kstate);
    free(h);
}

static qf_status host_prepare(cu_engine *c, cu_layer *L)
{
    const qf_graph *g = c->g;
    const qf_node *n = L->n;
    host_state *h = (host_state *)qfi_calloc(1, sizeof *h);
    if (!h) return QF_ERR_NOMEM;
    L->state = h;
    L->free_state = host_free;
    h->c = c;
    h->n = n;
    h->in = (const void **)qfi_calloc((size_t)n->n_in + 1, sizeof *h->in);
    h->out = (void **)qfi_calloc((size_t)n->n_out + 1, sizeof *h->out);
    h->pinned = (void **)qfi_calloc((size_t)(n->n_in + n->n_out) + 1, sizeof *h->pinned);
    if (!h->in || !h->out || !h->pinned) return QF_ERR_NOMEM;
    for (int k = 0; k < n->n_in + n->n_out; k++) {
        const bool is_in = k < n->n_in;
        const int v = is_in ? n->in[k] : n->out[k - n->n_in];
        if (v < 0) continue;
        const qf_value *val = &g->values[v];
        if (is_in && (val->flags & QF_VALUE_CONST)) {
            if (!val->data) return qf_error(QF_ERR_INVALID, "constant %s has no data", val->name);
            h->in[k] = val->data;
            continue;
        }
        const size_t bytes = qf_value_bytes(val);
        CU_CHECK(cudaMallocHost(&h->pinned[k], bytes ? bytes : 64));
        void *d;
        QF_CHECK(cu_value_ptr(c, v, &d));
        if (is_in) {
            h->in[k] = h->pinned[k];
            if (cu_is_nhwc(c, v)) cu_need_scratch(c, CU_SCR_HOST, bytes);
        } else {
            h->out[k - n->n_in] = h->pinned[k];
            QF_ASSERT(!cu_is_nhwc(c, v)); /* cu_op_host's outputs are logical */
        }
    }
    const size_t scratch = qfi_cpu_node_scratch(c->host_lowp, g, n, c->e->opts.threads);
    if (scratch && !(h->scratch = malloc(scratch))) return QF_ERR_NOMEM;
    return qfi_cpu_node_prepare(g, n, &h->kstate);
}

/* On CUDA's callback thread: no CUDA calls here. */
static void CUDART_CB host_run(void *arg)
{
    host_state *h = (host_state *)arg;
    const qf_graph *g = h->c->g;
    const qf_node *n = h->n;
    qfi_kernel_args a;
    a.g = g;
    a.n = n;
    a.in = h->in;
    a.out = h->out;
    a.scratch = h->scratch;
    a.state = h->kstate;
    a.threads = h->c->e->opts.threads;
    qf_status st = qfi_cpu_node_run(h->c->host_lowp, &a);
    if (st != QF_OK && h->st == QF_OK) {
        qfi_error_save(&h->err);
        h->st = st;
    }
}

static qf_status host_launch(cu_engine *c, cu_layer *L, cudaStream_t s)
{
    const qf_graph *g = c->g;
    const qf_node *n = L->n;
    host_state *h = (host_state *)L->state;
    for (int k = 0; k < n->n_in; k++) {
        const int v = n->in[k];
        const size_t bytes = v >= 0 ? qf_value_bytes(&g->values[v]) : 0;
        if (!h->pinned[k] || !bytes) continue;
        void *src;
        QF_CHECK(cu_value_ptr(c, v, &src));
        if (cu_is_nhwc(c, v)) {
            QF_CHECK(cu_copy_logical(c, v, c->scratch[CU_SCR_HOST], s));
            src = c->scratch[CU_SCR_HOST];
        }
        CU_CHECK(cudaMemcpyAsync(h->pinned[k], src, bytes, cudaMemcpyDeviceToHost, s));
    }
    CU_CHECK(cudaLaunchHostFunc(s, host_run, h));
    for (int k = 0; k < n->n_out; k++) {
        const int v = n->out[k];
        const size_t bytes = v >= 0 ? qf_value_bytes(&g->values[v]) : 0;
        if (!bytes) continue;
        void *dst;
        QF_CHECK(cu_value_ptr(c, v, &dst));
        CU_CHECK(cudaMemcpyAsync(dst, h->pinned[n->n_in + k], bytes, cudaMemcpyHostToDevice, s));
    }
    return QF_OK;
}

const cu_op cu_op_host = {host_prepare, NULL, host_launch, CU_RULE_LOGICAL, CU_ALL_PRECISIONS, NULL};

qf_status cu_host_status(cu_engine *c)
{
    const host_state *first = NULL;
    qf_status st = QF_OK;
    for (int i = 0; i < c->n_layers; i++) {
        host_state *h = cu_on_host(&c->layers[i]) ? (host_state *)c->layers[i].state : NULL;
        if (!h || h->st == QF_OK) continue;
        if (!first) first = h, st = h->st;
        h->st = QF_OK;
    }
    return first ? qfi_error_node(qfi_error_restore(st, &first->err), c->g, first->n) : QF_OK;
}
