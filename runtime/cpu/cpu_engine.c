/* The CPU reference engine: one arena planned at build time, nodes run in
 * topological order through the kernel table (each op's kernel family, as
 * include/qforge/ops.def names it), the observer called after each node.
 * FP16 attention chains (lib/attention.h) run as one kernel, as on the CUDA
 * engine, and an FP32 Conv applies the Relu, Clip, Sigmoid, SiLU or
 * HardSwish that alone reads its output (lib/fusion.h's planner), except
 * under an observer (which sees every value) or with QFORGE_CPU_NOFUSE set.
 * A batch of at least two images per thread whose nodes all keep images
 * apart (image_parallel.c) runs instead as one slice of images per thread,
 * each slice an engine of its own on one thread through the whole graph: no
 * barrier after every node, each thread's working set its own. */
#include "../engine_impl.h"
#include "attention.h"
#include "fusion.h"
#include "image_parallel.h"
#include "ops/tensor_ops.h"
#include <cblas.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include "kernels.h"

static const qfi_cpu_kernel *const kernels[QF_OP_COUNT] = {
#define QF_OP(id, onnx_name, desc, family) [QF_OP_##id] = &qfi_cpu_##family,
#include "qforge/ops.def"
#undef QF_OP
};

const qfi_cpu_kernel *qfi_cpu_kernel_of(qf_op op) { return kernels[op]; }

typedef struct cpu_engine {
    char *arena;
    void **data;        /* per value: where its elements live (arena or constant) */
    void *scratch;      /* largest per-node scratch, shared: nodes run one at a time */
    const void **in;    /* argument staging, sized for the widest node */
    void **out;
    void **state;       /* per node: what its kernel's prepare built, or NULL */
    qfi_cpu_lowp *lowp; /* FP16/INT8 nodes run through FP32 kernels; NULL if none */
    qfi_cpu_attention **attn; /* per node: the fused chain it starts, or NULL */
    bool *own;          /* per node: runs its own kernel (false inside a fused chain) */
    qfi_cpu_epilogue *epilogue; /* per node: the activations an FP32 Conv applies (where fused_out[i] >= 0) */
    int *fused_out;     /* per node: the last fused activation's output, which the Conv writes, or -1 */
    /* image-parallel: `slices` engines, each on its images of the batch and
     * one thread (the fields above then stay unused), and the whole batch's
     * input and output buffers, which the slices read and write in place */
    int slices;
    qf_engine **slice;
    qf_graph *slice_graph; /* each slice's view of the graph */
    void **io;             /* the graph's inputs, then its outputs */
    qf_status *slice_st;   /* per slice: its last pass's status, and its message */
    qfi_error_saved *slice_err;
    bool subnormals; /* QFORGE_CPU_SUBNORMALS: run without flushing them (run_env) */
} cpu_engine;

static void cpu_destroy(qf_engine *e)
{
    cpu_engine *c = e->impl;
    if (!c) return;
    free(c->arena);
    free(c->data);
    free(c->scratch);
    free(c->in);
    free(c->out);
    if (c->state)
        for (int i = 0; i < e->g->n_nodes; i++) qfi_cpu_node_release(&e->g->nodes[i], c->state[i]);
    free(c->state);
    if (c->attn)
        for (int i = 0; i < e->g->n_nodes; i++) qfi_cpu_attention_free(c->attn[i]);
    free(c->attn);
    free(c->own);
    free(c->epilogue);
    free(c->fused_out);
    qfi_cpu_lowp_free(c->lowp);
    for (int t = 0; t < c->slices; t++) {
        if (c->slice) qf_engine_free(c->slice[t]);
        if (c->slice_graph) free(c->slice_graph[t].values);
    }
    free(c->slice);
    free(c->slice_graph);
    free(c->slice_st);
    free(c->slice_err);
    if (c->io)
        for (int i = 0; i < e->g->n_inputs + e->g->n_outputs; i++) free(c->io[i]);
    free(c->io);
    free(c);
}

/* A "Key:  N kB" line of /proc/meminfo, in bytes; false if absent. */
static bool meminfo(const char *key, uint64_t *bytes)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return false;
    char line[256];
    unsigned long long kb;
    bool found = false;
    size_t n = strlen(key);
    while (!found && fgets(line, sizeof line, f))
        found = !strncmp(line, key, n) && line[n] == ':' && sscanf(line + n + 1, "%llu", &kb) == 1;
    fclose(f);
    if (found) *bytes = (uint64_t)kb * 1024;
    return found;
}

/* A number in a cgroup v2 file of this process's group ("max" is no limit). */
static bool cgroup_value(const char *file, uint64_t *out)
{
    char path[256];
    snprintf(path, sizeof path, "/sys/fs/cgroup/%s", file);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    unsigned long long v;
    bool ok = fscanf(f, "%llu", &v) == 1;
    fclose(f);
    if (ok) *out = v;
    return ok;
}

/* Memory the host can give without swapping: MemAvailable, lowered to what
 * the cgroup limit leaves (containers); UINT64_MAX (no check) if unknown. The
 * weights are in memory already: everything else grows with the batch. */
static qf_status cpu_free_memory(const qf_graph *g, const qf_engine_opts *opts, uint64_t *bytes)
{
    uint64_t avail = UINT64_MAX, limit, used;
    if (!meminfo("MemAvailable", &avail)) {
        long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
        if (pages > 0 && size > 0) avail = (uint64_t)pages * (uint64_t)size;
    }
    if (cgroup_value("memory.max", &limit) && cgroup_value("memory.current", &used))
        if (limit - (used < limit ? used : limit) < avail) avail = limit - (used < limit ? used : limit);
    *bytes = avail;
    return QF_OK;
}

/* Finds the attention chains and marks them in c (attn at the first MatMul,
 * none of their nodes `own`); plan_values (a copy of g's values) then has
 * the chains' intermediates unwritten and each chain's output written where
 * its first MatMul runs, and read_at the step where the chain reads Q, K
 * and V (or the roots of their views: later than the nodes it took in,
 * which read them in the graph), for the memory plan. */
static qf_status fuse_attention(const qf_graph *g, cpu_engine *c, qf_value *plan_values, int *read_at, bool views)
{
    const qfi_attention_rules rules = {NULL, NULL, NULL, views};
    for (int i = 0; i < g->n_nodes; i++) {
        qfi_attention_chain ch;
        if (!c->own[i] || !qfi_attention_match(g, i, &rules, &ch)) continue;
        QF_CHECK(qfi_cpu_attention_create(g, &ch, &c->attn[i]));
        c->own[i] = false;
        plan_values[g->nodes[i].out[0]].producer = -1;
        for (int k = 0; k < ch.n_nodes; k++) {
            c->own[ch.nodes[k]] = false;
            plan_values[g->nodes[ch.nodes[k]].out[0]].producer = -1;
        }
        for (int k = 0; k < ch.n_pre; k++) {
            c->own[ch.pre[k]] = false;
            plan_values[g->nodes[ch.pre[k]].out[0]].producer = -1;
        }
        read_at[ch.q] = read_at[ch.kt] = read_at[ch.v] = i;
        plan_values[ch.out].producer = i;
        qfi_attention_log(g, &ch);
    }
    return QF_OK;
}

/* A node that computes FP32 in its own kernel (not through lowp.c's f32 view). */
static bool fp32_node(const qf_graph *g, const qf_node *n)
{
    return n->precision == QF_PREC_FP32 && !qfi_node_f32_view(n) && qfi_out(g, n, 0)->dtype == QF_F32;
}

/* An FP32 Conv anchors... */
static bool epilogue_anchor(void *user, const qf_graph *g, int i)
{
    const cpu_engine *c = user;
    return c->own[i] && g->nodes[i].op == QF_OP_CONV && fp32_node(g, &g->nodes[i]);
}

/* ... one Relu or Clip, then one Sigmoid, SiLU or HardSwish, of FP32 values
 * (not GELU: its Erf chain rounds where the fused function does not). */
static bool epilogue_accept(void *user, const qf_graph *g, const qfi_fusion *f, const qfi_fuse_candidate *cand)
{
    const bool clamp = cand->link == QFI_FUSE_RELU || cand->link == QFI_FUSE_CLIP;
    const bool act = cand->link == QFI_FUSE_ACT &&
                     (cand->act == QF_ACT_SIGMOID || cand->act == QF_ACT_SILU || cand->act == QF_ACT_HARD_SWISH);
    if (clamp && (f->node[QFI_FUSE_RELU] >= 0 || f->node[QFI_FUSE_CLIP] >= 0 || f->node[QFI_FUSE_ACT] >= 0)) return false;
    return (clamp || act) && fp32_node(g, cand->node) && (!cand->gate || fp32_node(g, cand->gate));
}

/* Fuses each FP32 Conv's activations into it: the Conv writes the last
 * one's output (plan_values: the Conv's and the others' outputs unwritten),
 * the activation nodes run nothing. MobileNetV2's ReLU6 passes were 14 % of
 * its FP32 time. */
static qf_status fuse_epilogues(const qf_graph *g, cpu_engine *c, qf_value *plan_values)
{
    qfi_fusion_rules rules = {.anchor = epilogue_anchor, .accept = epilogue_accept, .user = c};
    qfi_fusion *f;
    int n_f, fused = 0;
    QF_CHECK(qfi_fusion_plan(g, &rules, &f, &n_f));
    for (int k = 0; k < n_f; k++) {
        if (f[k].last == f[k].anchor) continue;
        const int i = f[k].anchor, relu = f[k].node[QFI_FUSE_RELU], clip = f[k].node[QFI_FUSE_CLIP];
        const int act = f[k].node[QFI_FUSE_ACT], gate = f[k].node[QFI_FUSE_GATE];
        qfi_cpu_epilogue *e = &c->epilogue[i];
        *e = (qfi_cpu_epilogue){.relu = relu >= 0, .clip = clip >= 0, .lo = f[k].clip_lo, .hi = f[k].clip_hi};
        if (act >= 0) {
            /* HardSwish's HardSigmoid: the node's own, or the gate's of Mul(x, HardSigmoid(x)) */
            const qfi_unary_params *p = g->nodes[gate >= 0 ? gate : act].params;
            e->act = f[k].act;
            if (e->act == QF_ACT_HARD_SWISH) e->alpha = p->alpha, e->beta = p->beta;
        }
        const int links[] = {relu, clip, act, gate};
        for (size_t l = 0; l < QF_ARRAY_LEN(links); l++)
            if (links[l] >= 0) {
                c->own[links[l]] = false;
                plan_values[g->nodes[links[l]].out[0]].producer = -1;
                fused++;
            }
        plan_values[g->nodes[i].out[0]].producer = -1;
        c->fused_out[i] = f[k].out;
        plan_values[f[k].out].producer = i;
    }
    free(f);
    if (fused) qf_log(QF_LOG_DEBUG, "%s: CPU engine: %d activation nodes fused into their FP32 Convs", g->source, fused);
    return QF_OK;
}

/* Slices of images to run the batch as: the threads, when every thread gets
 * at least two images and no node mixes images; else 0 (layer by layer).
 * Each slice packs its own weights (and widens FP16 ones), so slices are
 * for machines of up to MAX_SLICE_THREADS threads, where they were measured
 * (2); larger ones keep layer by layer, which has work enough per thread. */
enum { MAX_SLICE_THREADS = 16 };
static int image_slices(const qf_engine *e)
{
    const qf_graph *g = e->g;
    const int threads = e->opts.threads > 0 ? e->opts.threads : qfi_cpu_count();
    if (e->opts.observer || threads < 2 || threads > MAX_SLICE_THREADS || g->batch < 2 * threads ||
        getenv("QFORGE_CPU_LAYERWISE"))
        return 0;
    const char *why;
    if (!qfi_cpu_images_independent(g, &why)) {
        qf_log(QF_LOG_DEBUG, "%s: CPU engine: layer by layer: %s", g->source, why);
        return 0;
    }
    return threads;
}

static size_t align64(size_t b) { return (b + 63) / 64 * 64; }

/* The image-parallel engine: the batch's buffers, then per slice a view of
 * the graph at its images and an engine on one thread whose inputs and
 * outputs are its images of those buffers. */
static qf_status create_slices(qf_engine *e, cpu_engine *c, int slices)
{
    const qf_graph *g = e->g;
    const int io = g->n_inputs + g->n_outputs;
    c->slices = slices;
    c->slice = qfi_calloc((size_t)slices, sizeof *c->slice);
    c->slice_graph = qfi_calloc((size_t)slices, sizeof *c->slice_graph);
    c->io = qfi_calloc((size_t)io + 1, sizeof *c->io);
    c->slice_st = qfi_calloc((size_t)slices, sizeof *c->slice_st);
    c->slice_err = qfi_calloc((size_t)slices, sizeof *c->slice_err);
    if (!c->slice || !c->slice_graph || !c->io || !c->slice_st || !c->slice_err) return QF_ERR_NOMEM;
    size_t bytes = 0;
    for (int i = 0; i < io; i++) {
        const size_t b = align64(qf_value_bytes(&g->values[i < g->n_inputs ? g->inputs[i] : g->outputs[i - g->n_inputs]]));
        c->io[i] = aligned_alloc(64, b ? b : 64);
        if (!c->io[i]) return qf_error(QF_ERR_NOMEM, "out of memory for the batch's inputs and outputs");
        memset(c->io[i], 0, b);
        bytes += b;
    }
    qf_engine_opts o = e->opts;
    o.threads = 1;
    for (int t = 0; t < slices; t++) {
        const int lo = g->batch * t / slices, hi = g->batch * (t + 1) / slices;
        QF_CHECK(qfi_cpu_batch_view(g, hi - lo, &c->slice_graph[t]));
        QF_CHECK(qf_engine_create(&c->slice_graph[t], &o, &c->slice[t]));
        qf_engine *s = c->slice[t];
        cpu_engine *sc = s->impl;
        for (int i = 0; i < io; i++) {
            const bool is_in = i < g->n_inputs;
            const int v = is_in ? g->inputs[i] : g->outputs[i - g->n_inputs];
            char *at = (char *)c->io[i] + qf_value_bytes(&g->values[v]) / (size_t)g->batch * (size_t)lo;
            sc->data[v] = at;
            if (is_in) s->inputs[i] = at;
            else s->outputs[i - g->n_inputs] = at;
        }
        bytes += s->arena_bytes;
    }
    for (int i = 0; i < g->n_inputs; i++) e->inputs[i] = c->io[i];
    for (int i = 0; i < g->n_outputs; i++) e->outputs[i] = c->io[g->n_inputs + i];
    e->arena_bytes = bytes;
    qf_log(QF_LOG_DEBUG, "%s: CPU engine: a batch of %d as %d slices of images, one thread each", g->source, g->batch,
           slices);
    return QF_OK;
}

/* e's engine state, empty but for what the environment asks (NULL: out of memory). */
static cpu_engine *new_cpu_engine(qf_engine *e)
{
    cpu_engine *c = qfi_calloc(1, sizeof *c);
    if (c) c->subnormals = getenv("QFORGE_CPU_SUBNORMALS") != NULL;
    e->impl = c;
    return c;
}

static qf_status cpu_create(qf_engine *e)
{
    const qf_graph *g = e->g;
    const int slices = image_slices(e);
    if (slices > 1) {
        cpu_engine *c = new_cpu_engine(e);
        if (!c) return QF_ERR_NOMEM;
        qf_status st = create_slices(e, c, slices);
        if (st == QF_OK) return QF_OK;
        qfi_error_saved err;
        qfi_error_save(&err);
        cpu_destroy(e);
        e->impl = NULL;
        if (st != QF_ERR_NOMEM) return qfi_error_restore(st, &err);
        /* the slices' copies of the weights did not fit: layer by layer needs one */
        qf_log(QF_LOG_DEBUG, "%s: CPU engine: layer by layer: %s", g->source, err.msg);
    }
    /* The engine spreads (image, group) work over its own threads; OpenBLAS's
     * threads on top of those only spin and contend (measured: 4.2 s of system
     * time per 2000 ResNet-20 images with them, 0.2 s without). */
    openblas_set_num_threads(1);
    cpu_engine *c = new_cpu_engine(e);
    if (!c) return QF_ERR_NOMEM;
    size_t *off = qfi_calloc((size_t)g->n_values + 1, sizeof *off);
    c->data = qfi_calloc((size_t)g->n_values + 1, sizeof *c->data);
    c->attn = qfi_calloc((size_t)g->n_nodes + 1, sizeof *c->attn);
    c->own = qfi_calloc((size_t)g->n_nodes + 1, sizeof *c->own);
    c->epilogue = qfi_calloc((size_t)g->n_nodes + 1, sizeof *c->epilogue);
    c->fused_out = qfi_calloc((size_t)g->n_nodes + 1, sizeof *c->fused_out);
    qf_value *plan_values = qfi_calloc((size_t)g->n_values + 1, sizeof *plan_values);
    int *read_at = qfi_calloc((size_t)g->n_values + 1, sizeof *read_at);
    if (!off || !c->data || !c->attn || !c->own || !c->epilogue || !c->fused_out || !plan_values || !read_at) {
        free(plan_values);
        free(read_at);
        goto nomem;
    }
    for (int v = 0; v < g->n_values; v++) read_at[v] = -1;
    for (int i = 0; i < g->n_nodes; i++) {
        c->own[i] = true;
        c->fused_out[i] = -1;
    }
    memcpy(plan_values, g->values, (size_t)g->n_values * sizeof *plan_values);
    /* QFORGE_CPU_NOFUSE=views: attention chains fused, their operands read as they are (tests) */
    const char *nofuse = getenv("QFORGE_CPU_NOFUSE");
    const bool views_off = nofuse && !strcmp(nofuse, "views");
    const bool fuse = !e->opts.observer && (!nofuse || views_off);
    qf_status st = fuse ? fuse_attention(g, c, plan_values, read_at, !views_off) : QF_OK;
    if (st == QF_OK && fuse) st = fuse_epilogues(g, c, plan_values);
    size_t total = 0;
    qf_graph pg = *g;
    pg.values = plan_values;
    if (st == QF_OK) st = qfi_plan_memory_views(&pg, NULL, read_at, 64, off, &total);
    free(plan_values);
    free(read_at);
    /* staging only for the nodes that run their own kernels: a fused chain's
     * scores would have taken the largest buffers */
    if (st == QF_OK) st = qfi_cpu_lowp_create(g, c->own, &c->lowp);
    if (st != QF_OK) {
        free(off);
        cpu_destroy(e);
        return st;
    }
    size_t scratch = 0;
    int width = 1;
    c->state = qfi_calloc((size_t)g->n_nodes + 1, sizeof *c->state);
    if (!c->state) goto nomem;
    for (int i = 0; i < g->n_nodes && st == QF_OK; i++) {
        const qf_node *n = &g->nodes[i];
        if (!c->own[i]) continue;
        st = qfi_cpu_node_prepare(g, n, &c->state[i]);
        size_t s = qfi_cpu_node_scratch(c->lowp, g, n, e->opts.threads);
        if (s > scratch) scratch = s;
        if (n->n_in > width) width = n->n_in;
        if (n->n_out > width) width = n->n_out;
    }
    /* the arena is zeroed below, so every byte of it is really taken: check first */
    uint64_t avail;
    if (st == QF_OK) st = cpu_free_memory(g, &e->opts, &avail);
    if (st == QF_OK) st = qfi_engine_fits(g, "memory", (uint64_t)total + scratch, avail);
    if (st != QF_OK) {
        free(off);
        cpu_destroy(e);
        return st;
    }
    c->arena = aligned_alloc(64, total ? total : 64);
    if (!c->arena) goto nomem;
    memset(c->arena, 0, total);
    e->arena_bytes = total;
    for (int v = 0; v < g->n_values; v++)
        c->data[v] = g->values[v].flags & QF_VALUE_CONST ? g->values[v].data
                     : off[v] != SIZE_MAX                 ? c->arena + off[v]
                                                          : NULL;
    free(off);
    off = NULL;
    c->scratch = scratch ? malloc(scratch) : NULL;
    c->in = qfi_calloc((size_t)width, sizeof *c->in);
    c->out = qfi_calloc((size_t)width, sizeof *c->out);
    if ((scratch && !c->scratch) || !c->in || !c->out) goto nomem;
    for (int i = 0; i < g->n_inputs; i++) e->inputs[i] = c->data[g->inputs[i]];
    for (int i = 0; i < g->n_outputs; i++) e->outputs[i] = c->data[g->outputs[i]];
    return QF_OK;
nomem:
    free(off);
    cpu_destroy(e);
    return qfi_error_file(qf_error(QF_ERR_NOMEM, "out of memory planning the CPU engine"), g->source);
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static qf_status forward(qf_engine *e, double *node_ms);

typedef struct slices_job {
    cpu_engine *c;
    double *node_ms; /* per slice, n_nodes each; NULL when not timing */
    int nodes;
} slices_job;

static void run_slice(void *arg, int64_t t)
{
    const slices_job *j = arg;
    cpu_engine *c = j->c;
    c->slice_st[t] = forward(c->slice[t], j->node_ms ? j->node_ms + t * j->nodes : NULL);
    if (c->slice_st[t] != QF_OK) qfi_error_save(&c->slice_err[t]);
}

/* Every slice's pass at once, a thread each (allocating nothing, as a run
 * must not); with node_ms, each node's mean time over the slices is added
 * (what the node costs the batch's wall time). */
static qf_status forward_slices(cpu_engine *c, int nodes, double *node_ms)
{
    double *t = node_ms ? qfi_calloc((size_t)c->slices * nodes + 1, sizeof *t) : NULL;
    if (node_ms && !t) return qf_error(QF_ERR_NOMEM, "out of memory timing the CPU engine's nodes");
    slices_job j = {.c = c, .node_ms = t, .nodes = nodes};
    qfi_parallel_for(c->slices, c->slices, run_slice, &j);
    qf_status r = QF_OK;
    for (int s = 0; s < c->slices && r == QF_OK; s++)
        if (c->slice_st[s] != QF_OK) r = qfi_error_restore(c->slice_st[s], &c->slice_err[s]);
    for (int i = 0; t && i < nodes; i++) {
        double sum = 0.0;
        for (int s = 0; s < c->slices; s++) sum += t[(size_t)s * nodes + i];
        node_ms[i] += sum / c->slices;
    }
    free(t);
    return r;
}

/* One forward pass; with node_ms, each node's time is added to node_ms[i]
 * (a fused attention chain's to its first node, a node fused into a Conv
 * gets none). */
static qf_status forward(qf_engine *e, double *node_ms)
{
    const qf_graph *g = e->g;
    cpu_engine *c = e->impl;
    if (c->slices) return forward_slices(c, g->n_nodes, node_ms);
    int threads = e->opts.threads > 0 ? e->opts.threads : qfi_cpu_count();
    if (e->opts.observer)
        for (int i = 0; i < g->n_inputs; i++) e->opts.observer(e->opts.observer_user, g, g->inputs[i], c->data[g->inputs[i]]);
    for (int i = 0; i < g->n_nodes; i++) {
        const qf_node *n = &g->nodes[i];
        const double t0 = node_ms ? now_ms() : 0.0;
        if (c->attn[i]) { /* no observer: none is called for a fused chain */
            qf_status st = qfi_cpu_attention_run(c->attn[i], c->data, threads);
            if (st != QF_OK) return qfi_error_node(st, g, n);
            if (node_ms) node_ms[i] += now_ms() - t0;
            continue;
        }
        if (!c->own[i]) continue;
        for (int k = 0; k < n->n_in; k++) c->in[k] = n->in[k] >= 0 ? c->data[n->in[k]] : NULL;
        for (int k = 0; k < n->n_out; k++) c->out[k] = n->out[k] >= 0 ? c->data[n->out[k]] : NULL;
        const bool fused = c->fused_out[i] >= 0;
        if (fused) c->out[0] = c->data[c->fused_out[i]];
        qfi_kernel_args a = {.g = g, .n = n, .in = c->in, .out = c->out, .scratch = c->scratch, .state = c->state[i],
                             .threads = threads, .epilogue = fused ? &c->epilogue[i] : NULL};
        qf_status st = qfi_cpu_node_run(c->lowp, &a);
        if (st != QF_OK) return qfi_error_node(st, g, n);
        if (node_ms) node_ms[i] += now_ms() - t0;
        if (e->opts.observer)
            for (int k = 0; k < n->n_out; k++)
                if (n->out[k] >= 0) e->opts.observer(e->opts.observer_user, g, n->out[k], c->out[k]);
    }
    return QF_OK;
}

/* A pass runs with subnormal inputs and results flushed to zero (x86's FTZ
 * and DAZ; the pool's threads take the caller's setting), as TensorFlow's
 * CPU threads do: arithmetic that meets subnormals goes through microcode
 * assists. The zoo's EfficientNet-B0 export (random weights: SE gates of
 * e^-90 and below, so whole channels of subnormal products) ran FP32 b16 on
 * 2 threads at 26 images/s in image slices with them, 69 without (layer by
 * layer ran 70 either way; why the slices' kernels meet more assists was
 * not established). Values that small are 0 at INT8 and FP16 anyway.
 * QFORGE_CPU_SUBNORMALS keeps IEEE subnormals. Returns the caller's
 * environment, for after. */
static unsigned run_env(const cpu_engine *c)
{
    const unsigned env = qfi_fp_env_get();
    if (!c->subnormals) qfi_fp_env_set(qfi_fp_env_flushing(env));
    return env;
}

static qf_status cpu_run(qf_engine *e, int items)
{
    (void)items; /* the inputs are read in place: nothing to leave out */
    const unsigned env = run_env(e->impl);
    const qf_status st = forward(e, NULL);
    qfi_fp_env_set(env);
    return st;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Each node's median over PROFILE_RUNS passes: one pass of a small layer
 * is a few microseconds, where a preemption or a page fault would decide
 * the figure. */
enum { PROFILE_RUNS = 5 };
static qf_status cpu_profile(qf_engine *e, double *node_ms)
{
    const int nodes = e->g->n_nodes;
    double *runs = qfi_calloc((size_t)nodes * PROFILE_RUNS + 1, sizeof *runs);
    if (!runs) return qf_error(QF_ERR_NOMEM, "out of memory profiling the CPU engine");
    qf_status st = QF_OK;
    const unsigned env = run_env(e->impl);
    for (int r = 0; r < PROFILE_RUNS && st == QF_OK; r++) {
        double *t = runs + (size_t)r * nodes;
        st = forward(e, t);
    }
    qfi_fp_env_set(env);
    for (int i = 0; i < nodes && st == QF_OK; i++) {
        double v[PROFILE_RUNS];
        for (int r = 0; r < PROFILE_RUNS; r++) v[r] = runs[(size_t)r * nodes + i];
        qsort(v, PROFILE_RUNS, sizeof *v, cmp_double);
        node_ms[i] = v[PROFILE_RUNS / 2];
    }
    free(runs);
    return st;
}

/* Every op has a CPU kernel, and every precision runs (FP16 and INT8 through
 * the FP32 kernels where the op computes in FP32: lowp.c). */
static unsigned cpu_op_precisions(qf_op op) { return qf_op_precisions(op); }

static qf_status cpu_check(const qf_graph *g, const qf_node *n) { return QF_OK; }

qf_status qfi_cpu_node_run(qfi_cpu_lowp *lp, const qfi_kernel_args *a)
{
    return lp && qfi_cpu_lowp_wraps(a->g, a->n) ? qfi_cpu_lowp_run(lp, a) : kernels[a->n->op]->run(a);
}

qf_status qfi_cpu_node_prepare(const qf_graph *g, const qf_node *n, void **state)
{
    *state = NULL;
    if (!kernels[n->op]->prepare || qfi_cpu_lowp_wraps(g, n)) return QF_OK;
    qf_status st = kernels[n->op]->prepare(g, n, state);
    return st == QF_OK ? st : qfi_error_node(st, g, n);
}

void qfi_cpu_node_release(const qf_node *n, void *state)
{
    if (state) kernels[n->op]->release(state);
}

size_t qfi_cpu_node_scratch(const qfi_cpu_lowp *lp, const qf_graph *g, const qf_node *n, int threads)
{
    return kernels[n->op]->scratch ? kernels[n->op]->scratch(qfi_cpu_lowp_graph(lp, g, n), n, threads) : 0;
}

/* "INT8 kernels vnni512, FP32 GEMM OpenBLAS 0.3.21 ..., 16 cores" */
static void cpu_describe(char *buf, size_t len)
{
    const char *cfg = openblas_get_config();
    snprintf(buf, len, "INT8 kernels %s, FP32 GEMM %s, %ld cores", qfi_cpu_i8_isa_name(qfi_cpu_i8_isa()),
             cfg ? cfg : "BLAS", sysconf(_SC_NPROCESSORS_ONLN));
}

const qfi_backend qfi_cpu_backend = {
    .name = "cpu",
    .create = cpu_create,
    .run = cpu_run,
    .profile = cpu_profile,
    .destroy = cpu_destroy,
    .op_precisions = cpu_op_precisions,
    .check = cpu_check,
    .free_memory = cpu_free_memory,
    .describe = cpu_describe,
};

qf_status qfi_cpu_run_node(const qf_graph *g, const qf_node *n, const void *const *in, void *const *out)
{
    void *state;
    QF_CHECK(qfi_cpu_node_prepare(g, n, &state));
    size_t scratch = kernels[n->op]->scratch ? kernels[n->op]->scratch(g, n, 1) : 0;
    void *buf = scratch ? malloc(scratch) : NULL;
    qf_status st = scratch && !buf ? qf_error(QF_ERR_NOMEM, "out of memory for scratch") : QF_OK;
    if (st == QF_OK) {
        qfi_kernel_args a = {.g = g, .n = n, .in = in, .out = out, .scratch = buf, .state = state, .threads = 1};
        st = kernels[n->op]->run(&a);
    }
    free(buf);
    qfi_cpu_node_release(n, state);
    return st == QF_OK ? st : qfi_error_node(st, g, n);
}
