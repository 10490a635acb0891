/* The engine interface: picks a backend, forwards calls to it; and how large
 * a batch fits, the check every backend makes before it allocates. */
#include "engine_impl.h"
#include <time.h>

qf_status qf_device_parse(const char *s, qf_device_kind *kind, int *index)
{
    *index = 0;
    if (strcmp(s, "cpu") == 0) {
        *kind = QF_DEVICE_CPU;
        return QF_OK;
    }
    if (strncmp(s, "cuda", 4) == 0) {
        *kind = QF_DEVICE_CUDA;
        if (s[4] == 0) return QF_OK;
        char *end;
        long i = s[4] == ':' ? strtol(s + 5, &end, 10) : -1;
        if (s[4] == ':' && end != s + 5 && *end == 0 && i >= 0 && i < 64) {
            *index = (int)i;
            return QF_OK;
        }
    }
    return qf_error(QF_ERR_USAGE, "unknown device '%s' (expected cpu, cuda or cuda:N)", s);
}

/* The backend of an engine kind, or NULL with the reason as the error message. */
static const qfi_backend *backend_of(qf_device_kind kind)
{
    switch (kind) {
    case QF_DEVICE_CPU: return &qfi_cpu_backend;
    case QF_DEVICE_CUDA:
#ifdef QF_HAVE_CUDA
        return &qfi_cuda_backend;
#else
        qf_error(QF_ERR_UNSUPPORTED, "this qforge was built without CUDA");
        return NULL;
#endif
    default: qf_error(QF_ERR_USAGE, "unknown device kind %d", (int)kind); return NULL;
    }
}

qf_status qf_engine_create(const qf_graph *g, const qf_engine_opts *opts, qf_engine **out)
{
    *out = NULL;
    if (g->batch <= 0)
        return qfi_error_file(qf_error(QF_ERR_USAGE, "graph must be prepared before building an engine"), g->source);
    qf_device_kind kind = opts ? opts->device : QF_DEVICE_CPU;
    const qfi_backend *be = backend_of(kind);
    if (!be) return kind == QF_DEVICE_CUDA ? QF_ERR_UNSUPPORTED : QF_ERR_USAGE;
    qf_engine *e = qfi_calloc(1, sizeof *e);
    if (!e) return QF_ERR_NOMEM;
    e->g = g;
    if (opts) e->opts = *opts;
    e->be = be;
    e->inputs = qfi_calloc((size_t)g->n_inputs + 1, sizeof *e->inputs);
    e->outputs = qfi_calloc((size_t)g->n_outputs + 1, sizeof *e->outputs);
    qf_status st = e->inputs && e->outputs ? e->be->create(e) : QF_ERR_NOMEM;
    if (st != QF_OK) {
        free(e->inputs);
        free(e->outputs);
        free(e);
        return st;
    }
    *out = e;
    return QF_OK;
}

qf_status qf_engine_create_or_cpu(const qf_graph *g, qf_engine_opts *opts, qf_engine **out)
{
    qf_status st = qf_engine_create(g, opts, out);
    if (st == QF_OK || opts->device == QF_DEVICE_CPU || (st != QF_ERR_DEVICE && st != QF_ERR_UNSUPPORTED)) return st;
    qf_log(QF_LOG_INFO, "running on the CPU: %s", qf_error_message());
    opts->device = QF_DEVICE_CPU;
    return qf_engine_create(g, opts, out);
}

void qf_engine_free(qf_engine *e)
{
    if (!e) return;
    e->be->destroy(e);
    free(e->inputs);
    free(e->outputs);
    free(e);
}

void *qf_engine_input(qf_engine *e, int i)
{
    return i >= 0 && i < e->g->n_inputs ? e->inputs[i] : NULL;
}

const void *qf_engine_output(const qf_engine *e, int i)
{
    return i >= 0 && i < e->g->n_outputs ? e->outputs[i] : NULL;
}

/* Whether `bytes` at `offset` lie within graph input (or output) i; `fn` names the caller. */
static qf_status check_span(const qf_engine *e, const char *fn, bool output, int i, size_t offset, size_t bytes)
{
    const char *kind = output ? "output" : "input";
    int count = output ? e->g->n_outputs : e->g->n_inputs;
    if (i < 0 || i >= count) return qf_error(QF_ERR_USAGE, "%s: no %s %d", fn, kind, i);
    const qf_value *v = &e->g->values[output ? e->g->outputs[i] : e->g->inputs[i]];
    size_t size = qf_value_bytes(v);
    if (offset > size || bytes > size - offset)
        return qf_error(QF_ERR_USAGE, "%s: %zu bytes at %zu of %s %s, which has %zu", fn, bytes, offset, kind, v->name, size);
    return QF_OK;
}

qf_status qf_engine_write_input(qf_engine *e, int i, size_t offset, const void *src, size_t bytes)
{
    QF_CHECK(check_span(e, "qf_engine_write_input", false, i, offset, bytes));
    if (!bytes) return QF_OK;
    if (e->be->write_input) return e->be->write_input(e, i, offset, src, bytes);
    memcpy((char *)e->inputs[i] + offset, src, bytes);
    return QF_OK;
}

qf_status qf_engine_read_output(const qf_engine *e, int i, size_t offset, void *dst, size_t bytes)
{
    QF_CHECK(check_span(e, "qf_engine_read_output", true, i, offset, bytes));
    if (!bytes) return QF_OK;
    if (e->be->read_output) return e->be->read_output(e, i, offset, dst, bytes);
    memcpy(dst, (const char *)e->outputs[i] + offset, bytes);
    return QF_OK;
}

/* The batch the engine's graph was prepared at. */
static int engine_batch(const qf_engine *e) { return e->g->batch > 0 ? e->g->batch : 1; }

qf_status qf_engine_run(qf_engine *e) { return e->be->run(e, engine_batch(e)); }

qf_status qf_engine_run_items(qf_engine *e, int items)
{
    int batch = engine_batch(e);
    if (items < 1 || items > batch)
        return qf_error(QF_ERR_USAGE, "qf_engine_run_items: %d items for an engine at batch %d", items, batch);
    return e->be->run(e, items);
}

size_t qf_engine_arena_bytes(const qf_engine *e) { return e->arena_bytes; }

qf_status qf_engine_bench(qf_engine *e, int iterations, double *ms)
{
    if (iterations < 0) return qf_error(QF_ERR_USAGE, "qf_engine_bench: %d iterations", iterations);
    if (e->be->bench) return e->be->bench(e, iterations, ms);
    for (int i = 0; i < iterations; i++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        QF_CHECK(qf_engine_run(e));
        clock_gettime(CLOCK_MONOTONIC, &t1);
        ms[i] = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
    }
    return QF_OK;
}

/* ---- how large a batch fits ---------------------------------------------------------- */

static double gib(uint64_t bytes) { return (double)bytes / (double)(1u << 30); }

qf_status qfi_engine_fits(const qf_graph *g, const char *where, uint64_t need, uint64_t avail)
{
    if (need <= avail) return QF_OK;
    return qf_error(QF_ERR_NOMEM, "%s: batch %d needs %llu bytes (%.2f GiB) of %s for activations, but %llu bytes "
                    "(%.2f GiB) are free", g->source, g->batch, (unsigned long long)need, gib(need), where,
                    (unsigned long long)avail, gib(avail));
}

int qfi_max_batch(const qf_graph *g, uint64_t avail, int limit)
{
    const uint64_t batch = g->batch > 0 ? (uint64_t)g->batch : 1;
    uint64_t most = (uint64_t)limit;
    for (int v = 0; v < g->n_values; v++) {
        const qf_value *val = &g->values[v];
        if (val->flags & QF_VALUE_CONST) continue;
        uint64_t per = (qf_value_bytes(val) + batch - 1) / batch;
        if (per && (uint64_t)QF_MAX_TENSOR_BYTES / per < most) most = (uint64_t)QF_MAX_TENSOR_BYTES / per;
    }
    size_t *off = qfi_calloc((size_t)g->n_values + 1, sizeof *off);
    size_t total = 0;
    if (!off || qfi_plan_memory(g, 64, off, &total) != QF_OK) total = SIZE_MAX; /* no plan: assume nothing fits */
    free(off);
    uint64_t per = ((uint64_t)total + batch - 1) / batch;
    if (per && avail / per < most) most = avail / per;
    return (int)most;
}

qf_status qf_engine_max_batch(const qf_graph *g, const qf_engine_opts *opts, int limit, int *batch)
{
    *batch = 0;
    if (limit < 1) return qf_error(QF_ERR_USAGE, "qf_engine_max_batch: limit %d", limit);
    qf_engine_opts o = {0};
    if (opts) o = *opts;
    const qfi_backend *be = backend_of(o.device);
    if (!be) return o.device == QF_DEVICE_CUDA ? QF_ERR_UNSUPPORTED : QF_ERR_USAGE;
    uint64_t avail;
    QF_CHECK(be->free_memory(g, &o, &avail));
    *batch = qfi_max_batch(g, avail, limit);
    return QF_OK;
}

qf_device_kind qf_engine_node_device(const qf_engine *e, int node)
{
    return e->be->node_device && node >= 0 && node < e->g->n_nodes ? e->be->node_device(e, node) : e->opts.device;
}

qf_status qf_engine_profile(qf_engine *e, double *node_ms)
{
    if (!e->be->profile)
        return qf_error(QF_ERR_UNSUPPORTED, "the %s engine does not time individual nodes", e->be->name);
    return e->be->profile(e, node_ms);
}

void qf_engine_describe_backends(char *buf, size_t len)
{
    if (!len) return;
    buf[0] = 0;
    for (int k = 0; k < QF_DEVICE_KIND_COUNT; k++) {
        size_t used = strlen(buf);
        const qfi_backend *be = backend_of((qf_device_kind)k);
        char line[512] = "";
        if (!be) snprintf(line, sizeof line, "%s", qf_error_message()); /* built without it */
        else if (be->describe) be->describe(line, sizeof line);
        else snprintf(line, sizeof line, "available");
        int n = snprintf(buf + used, len - used, "%s: %s\n", k == QF_DEVICE_CPU ? "cpu" : "cuda", line);
        if (n < 0 || (size_t)n >= len - used) {
            if (len > 4) memcpy(buf + len - 4, "...", 4);
            return;
        }
    }
}

bool qf_engine_supports(qf_device_kind kind, const qf_graph *g, const qf_node *n)
{
    const qfi_backend *be = backend_of(kind);
    return be && be->check(g, n) == QF_OK;
}

qf_status qf_engine_op_precisions(qf_device_kind kind, qf_op op, unsigned *precisions)
{
    *precisions = 0;
    const qfi_backend *be = backend_of(kind);
    if (!be) return kind == QF_DEVICE_CUDA ? QF_ERR_UNSUPPORTED : QF_ERR_USAGE;
    if ((unsigned)op >= QF_OP_COUNT) return qf_error(QF_ERR_USAGE, "unknown op %d", (int)op);
    *precisions = be->op_precisions(op);
    return QF_OK;
}
