/* The CUDA engine backend: device selection, one liveness-planned device
 * arena, NHWC layout assignment, per-node layers dispatched through a table
 * indexed by qf_op (one file per op family beside this one), pinned host
 * input/output buffers, uploads on a copy stream, and the whole forward pass
 * captured once in a CUDA graph and replayed. With an observer the pass runs
 * node by node and each produced value is copied back for it. */
#include "cuda_internal.h"

#include "qforge/calib.h"
#include <stdarg.h>

/* QFORGE_CUDA_NOFUSE: unset, every fusion; a comma-separated list of kinds
 * (shuffle, layers, input, bn, attention, se, layernorm), all but those; any other
 * value, none. kind "all" asks whether none. */
static bool fusion_off(const char *kind)
{
    const char *v = getenv("QFORGE_CUDA_NOFUSE");
    if (!v) return false;
    static const char *const kinds[] = {"shuffle", "layers", "input", "bn", "attention", "se", "layernorm"};
    bool listed = false, named = false;
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        const size_t len = strlen(kinds[k]);
        for (const char *t = v; (t = strstr(t, kinds[k])) != NULL; t += len)
            if ((t == v || t[-1] == ',') && (t[len] == ',' || t[len] == '\0')) {
                listed = true;
                named |= !strcmp(kind, kinds[k]);
                break;
            }
    }
    return listed ? named : strcmp(kind, "all") == 0;
}

/* ---- errors ------------------------------------------------------------------------ */

qf_status cu_fail(cudaError_t e, const char *expr, const char *file, int line)
{
    (void)cudaGetLastError(); /* clear a sticky launch error so the next call can report its own */
    qf_status st = e == cudaErrorMemoryAllocation ? QF_ERR_NOMEM : QF_ERR_DEVICE;
    const char *base = strrchr(file, '/');
    return qf_error(st, "CUDA error %s (%s) in %s at %s:%d", cudaGetErrorName(e), cudaGetErrorString(e), expr,
                    base ? base + 1 : file, line);
}

static const char *lt_status_name(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "internal error";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported";
    default: return "error";
    }
}

qf_status lt_fail(cublasStatus_t s, const char *expr, const char *file, int line)
{
    const char *base = strrchr(file, '/');
    return qf_error(s == CUBLAS_STATUS_ALLOC_FAILED ? QF_ERR_NOMEM : QF_ERR_DEVICE, "cuBLASLt %s (status %d) in %s at %s:%d",
                    lt_status_name(s), (int)s, expr, base ? base + 1 : file, line);
}

/* ---- the kernel table ----------------------------------------------------------------- */

/* Every op's family, in ops.def order (the order of qf_op). */
static const cu_op *const op_table[QF_OP_COUNT] = {
#define QF_OP(id, onnx_name, desc, family) &cu_op_##family,
#include "qforge/ops.def"
#undef QF_OP
};

const cu_op *cu_op_of(qf_op op) { return op_table[op]; }

qf_status cu_check_kernel(const qf_graph *g, const qf_node *n)
{
    const cu_op *op = cu_op_of(n->op);
    if (!op->prepare) return qf_error(QF_ERR_UNSUPPORTED, "the CUDA engine has no kernel for %s", qf_op_name(n->op));
    if (!(op->precisions & QFI_PREC_BIT(n->precision)))
        return qf_error(QF_ERR_UNSUPPORTED, "the CUDA engine has no %s kernel for %s", qf_precision_name(n->precision),
                        qf_op_name(n->op));
    return op->check ? op->check(g, n) : QF_OK;
}

/* qf_engine_supports(): whether a device kernel runs node n (a node
 * without one still runs, on the host: host.cu). */
static qf_status check_node(const qf_graph *g, const qf_node *n)
{
    qf_status st = cu_check_kernel(g, n);
    return st == QF_OK ? QF_OK : qfi_error_node(st, g, n);
}

static unsigned cu_op_precisions(qf_op op)
{
    return cu_op_of(op)->prepare ? cu_op_of(op)->precisions & qf_op_precisions(op) : 0;
}

/* ---- services for the op files ---------------------------------------------------------- */

qf_status cu_alloc(cu_engine *c, size_t bytes, void **out)
{
    *out = NULL;
    if (c->n_allocs == c->cap_allocs) {
        int cap = c->cap_allocs ? 2 * c->cap_allocs : 64;
        void **a = (void **)realloc(c->allocs, (size_t)cap * sizeof *a);
        if (!a) return qf_error(QF_ERR_NOMEM, "out of host memory");
        c->allocs = a;
        c->cap_allocs = cap;
    }
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 256);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        return qf_error(e == cudaErrorMemoryAllocation ? QF_ERR_NOMEM : QF_ERR_DEVICE,
                        "%s: batch %d: cuda:%d: cannot allocate %.1f MiB of device memory (%.1f MiB free of %.1f MiB): %s",
                        c->g->source, c->g->batch, c->device, bytes / 1048576.0, free_b / 1048576.0,
                        total_b / 1048576.0, cudaGetErrorString(e));
    }
    c->allocs[c->n_allocs++] = p;
    *out = p;
    return QF_OK;
}

qf_status cu_upload(cu_engine *c, const void *host, size_t bytes, void **out)
{
    QF_CHECK(cu_alloc(c, bytes, out));
    if (bytes) CU_CHECK(cudaMemcpy(*out, host, bytes, cudaMemcpyHostToDevice));
    return QF_OK;
}

qf_status cu_value_ptr(cu_engine *c, int v, void **out)
{
    const qf_value *val = &c->g->values[v];
    if (!c->vals[v].ptr && (val->flags & QF_VALUE_CONST)) {
        if (!val->data)
            return qfi_error_file(qf_error(QF_ERR_INVALID, "constant %s has no data", val->name), c->g->source);
        QF_CHECK(cu_upload(c, val->data, qf_value_bytes(val), &c->vals[v].ptr));
    }
    if (!c->vals[v].ptr)
        return qfi_error_file(qf_error(QF_ERR_INVALID, "value %s has no device buffer", val->name), c->g->source);
    *out = c->vals[v].ptr;
    return QF_OK;
}

const qf_graph *cu_geo_graph(const cu_engine *c, const qf_node *n)
{
    return qfi_node_f32_view(n) ? &c->view : c->g;
}

void cu_need_scratch(cu_engine *c, int slot, size_t bytes)
{
    bytes = (bytes + 255) / 256 * 256;
    if (bytes > c->scratch_bytes[slot]) c->scratch_bytes[slot] = bytes;
}

bool cu_is_nhwc(const cu_engine *c, int v)
{
    const qf_value *val = &c->g->values[v];
    return c->vals[v].layout == CU_NHWC && val->ndim == 4 && val->dims[1] > 1 && val->dims[2] * val->dims[3] > 1;
}

void cu_strides(const cu_engine *c, int v, int64_t *st)
{
    const qf_value *val = &c->g->values[v];
    if (c->vals[v].layout == CU_NHWC && val->ndim == 4) {
        const int64_t C = val->dims[1], H = val->dims[2], W = val->dims[3];
        st[0] = H * W * C;
        st[1] = 1;
        st[2] = W * C;
        st[3] = C;
        return;
    }
    int64_t s = 1;
    for (int d = val->ndim - 1; d >= 0; d--) {
        st[d] = s;
        s *= val->dims[d];
    }
}

bool cu_float_like(const qf_graph *g, const qf_node *n, const qf_value *v)
{
    if (v->dtype == QF_F32 || v->dtype == QF_F16) return true;
    return v->dtype == QF_I8 && n->precision != QF_PREC_FP32 && v->scale > 0.0f;
}

cu_elem cu_elem_of(const cu_engine *c, const qf_node *n, int v)
{
    const qf_value *val = &c->g->values[v];
    cu_elem e;
    e.dt = val->dtype;
    const bool quantized = val->dtype == QF_I8 && (!n || n->precision != QF_PREC_FP32);
    e.scale = quantized ? val->scale : 0.0f;
    e.zp = quantized ? val->zero_point : 0;
    return e;
}

int cu_out_value(const cu_layer *L, int k) { return k == 0 && L->out_override >= 0 ? L->out_override : L->n->out[k]; }

static bool layout_differs(const cu_engine *c, int v, cu_layout want)
{
    const qf_value *val = &c->g->values[v];
    if (val->ndim != 4 || val->dims[1] == 1 || val->dims[2] * val->dims[3] == 1) return false;
    return (c->vals[v].layout == CU_NHWC) != (want == CU_NHWC);
}

void cu_need_input_as(cu_engine *c, cu_layer *L, int k, cu_layout want)
{
    int v = L->n->in[k];
    QF_ASSERT(k < 3);
    if (v >= 0 && layout_differs(c, v, want)) cu_need_scratch(c, CU_SCR_IN0 + k, qf_value_bytes(&c->g->values[v]));
}

qf_status cu_input_as(cu_engine *c, cu_layer *L, int k, cu_layout want, cudaStream_t s, const void **out)
{
    int v = L->n->in[k];
    void *p = NULL;
    QF_CHECK(cu_value_ptr(c, v, &p));
    if (!layout_differs(c, v, want)) {
        *out = p;
        return QF_OK;
    }
    const qf_value *val = &c->g->values[v];
    int64_t ss[4], ds[4];
    cu_strides(c, v, ss);
    const int64_t C = val->dims[1], H = val->dims[2], W = val->dims[3];
    if (want == CU_NHWC) {
        ds[0] = H * W * C, ds[1] = 1, ds[2] = W * C, ds[3] = C;
    } else {
        ds[0] = C * H * W, ds[1] = H * W, ds[2] = W, ds[3] = 1;
    }
    cu_elem el = {val->dtype, 0.0f};
    void *dst = c->scratch[CU_SCR_IN0 + k];
    QF_ASSERT(dst);
    QF_CHECK(cu_strided_copy(s, dst, el, ds, 0, p, el, ss, 0, 4, val->dims));
    *out = dst;
    return QF_OK;
}

qf_status cu_copy_logical(cu_engine *c, int v, void *dst, cudaStream_t s)
{
    const qf_value *val = &c->g->values[v];
    void *src;
    QF_CHECK(cu_value_ptr(c, v, &src));
    int64_t ss[QF_MAX_DIMS], ds[QF_MAX_DIMS];
    cu_strides(c, v, ss);
    qfi_contiguous_strides(val->ndim, val->dims, ds);
    cu_elem el = {val->dtype, 0.0f};
    return cu_strided_copy(s, dst, el, ds, 0, src, el, ss, 0, val->ndim, val->dims);
}

/* ---- building the engine --------------------------------------------------------------- */

static void free_reasons(char **why, int n)
{
    if (!why) return;
    for (int i = 0; i < n; i++) free(why[i]);
    free(why);
}

static void cu_destroy(qf_engine *e)
{
    cu_engine *c = (cu_engine *)e->impl;
    if (!c) return;
    cudaSetDevice(c->device);
    if (c->stream) cudaStreamSynchronize(c->stream);
    if (c->graph) cudaGraphExecDestroy(c->graph);
    cu_host_teardown(c);
    for (int i = 0; i < c->n_layers; i++) {
        cu_layer *L = &c->layers[i];
        if (L->state) {
            if (L->free_state) L->free_state(L->state);
            else free(L->state);
        }
    }
    free(c->layers);
    for (int i = 0; i < c->n_allocs; i++) cudaFree(c->allocs[i]);
    free(c->allocs);
    if (c->h_in)
        for (int i = 0; i < c->g->n_inputs; i++) cudaFreeHost(c->h_in[i]);
    if (c->h_out)
        for (int i = 0; i < c->g->n_outputs; i++) cudaFreeHost(c->h_out[i]);
    if (c->obs_host) cudaFreeHost(c->obs_host);
    if (c->hist_host) cudaFreeHost(c->hist_host);
    free(c->hist_out);
    free(c->h_in);
    free(c->h_out);
    free(c->d_in);
    free(c->in_written);
    free(c->d_out);
    cu_dnn_destroy(c);
    if (c->lt) cublasLtDestroy(c->lt);
    if (c->uploaded) cudaEventDestroy(c->uploaded);
    if (c->stream) cudaStreamDestroy(c->stream);
    if (c->copy) cudaStreamDestroy(c->copy);
    qfi_tactic_cache_free(c->tactics);
    free(c->vals);
    free(c->view_values);
    free(c->on_host);
    free_reasons(c->refused, c->g->n_nodes);
    free(c);
    e->impl = NULL;
}

/* cuBLASLt's workspace, one per engine */
#define CU_LT_WORKSPACE ((size_t)32 << 20)

/* What an engine for g can have for activations on cuda:N now: the device's
 * free memory less the weights (uploaded once) and the cuBLASLt workspace. */
static qf_status cu_free_memory(const qf_graph *g, const qf_engine_opts *o, uint64_t *bytes)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || o->device_index >= count) {
        (void)cudaGetLastError();
        return qf_error(QF_ERR_DEVICE, "cuda:%d: no such usable CUDA device", o->device_index);
    }
    size_t free_b = 0, total_b = 0;
    CU_CHECK(cudaSetDevice(o->device_index));
    CU_CHECK(cudaMemGetInfo(&free_b, &total_b));
    uint64_t fixed = CU_LT_WORKSPACE;
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].flags & QF_VALUE_CONST) fixed += qf_value_bytes(&g->values[v]);
    *bytes = free_b > fixed ? free_b - fixed : 0;
    return QF_OK;
}

/* Picks and checks the device; the messages say what to do about it. */
static qf_status select_device(cu_engine *c, int index)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err == cudaErrorInsufficientDriver) {
        (void)cudaGetLastError();
        int drv = 0, rt = 0;
        cudaDriverGetVersion(&drv);
        cudaRuntimeGetVersion(&rt);
        if (drv == 0) return qf_error(QF_ERR_DEVICE, "no usable CUDA device: no NVIDIA driver found");
        return qf_error(QF_ERR_DEVICE,
                        "the NVIDIA driver supports CUDA %d.%d but qforge was built with CUDA %d.%d: update the driver",
                        drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
    }
    if (err != cudaSuccess || count == 0) {
        (void)cudaGetLastError();
        return qf_error(QF_ERR_DEVICE, "no usable CUDA device (%s)",
                        err != cudaSuccess ? cudaGetErrorString(err) : "none found");
    }
    if (index >= count)
        return qf_error(QF_ERR_DEVICE, "cuda:%d requested but only %d device(s) present", index, count);
    c->device = index;
    CU_CHECK(cudaSetDevice(index));
    CU_CHECK(cudaGetDeviceProperties(&c->prop, index));
    if (c->prop.major < 8)
        return qf_error(QF_ERR_UNSUPPORTED, "cuda:%d (%s) has compute capability %d.%d; qforge needs 8.0 or newer",
                        index, c->prop.name, c->prop.major, c->prop.minor);
    return QF_OK;
}

/* The f32 view the geometry helpers read for nodes of FP32 arithmetic. */
static qf_status build_view(cu_engine *c)
{
    c->view_values = (qf_value *)qfi_calloc((size_t)c->g->n_values + 1, sizeof(qf_value));
    if (!c->view_values) return QF_ERR_NOMEM;
    qfi_f32_view_init(c->g, &c->view, c->view_values);
    return QF_OK;
}

/* Whether Transpose L reads its input x in the order y is stored in: the
 * input's strides, permuted, are y's (dims of one element aside). ConvNeXt's
 * permutes around each block's LayerNorm and Linear layers are such: NHWC
 * conv output to logical [N, H, W, C], and that back to [N, C, H, W], which
 * is then stored NHWC (assign_layouts). */
static bool transpose_keeps_order(const cu_engine *c, const cu_layer *L)
{
    const qf_graph *g = c->g;
    const int x = L->n->in[0], y = cu_out_value(L, 0);
    if (x < 0 || y < 0) return false;
    const qf_value *yv = &g->values[y];
    const qfi_transpose_params *p = (const qfi_transpose_params *)L->n->params;
    int64_t xs[QF_MAX_DIMS], ys[QF_MAX_DIMS];
    cu_strides(c, x, xs);
    cu_strides(c, y, ys);
    for (int i = 0; i < yv->ndim; i++)
        if (yv->dims[i] > 1 && xs[p->n_perm ? p->perm[i] : yv->ndim - 1 - i] != ys[i]) return false;
    return true;
}

/* NHWC where the ops allow it: graph inputs that feed an NHWC op, outputs of
 * NHWC ops, elementwise results of NHWC operands, the outputs of Pad,
 * Resize, Slice and Split of NHWC inputs, and 4-D Transposes whose input is
 * already in the NHWC order of their output (then a view: find_views). Layers fused before this (channel
 * shuffles) count as their fused op writing their out_override. */
static void assign_layouts(cu_engine *c)
{
    const qf_graph *g = c->g;
    for (int v = 0; v < g->n_values; v++) c->vals[v].layout = CU_LOGICAL;
    for (int i = 0; i < g->n_inputs; i++) {
        int v = g->inputs[i];
        if (g->values[v].ndim != 4) continue;
        for (int j = 0; j < g->n_nodes; j++) {
            const qf_node *n = &g->nodes[j];
            if (n->n_in > 0 && n->in[0] == v && c->layers[j].op->rule == CU_RULE_NHWC) c->vals[v].layout = CU_NHWC;
        }
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const qf_node *n = &g->nodes[i];
        const cu_layer *L = &c->layers[i];
        const cu_op *op = L->op;
        if (L->skip) continue; /* fused: the values it wrote are another layer's or none */
        for (int k = 0; k < n->n_out; k++) {
            int v = cu_out_value(L, k);
            if (v < 0 || g->values[v].ndim != 4) continue;
            const qf_value *val = &g->values[v];
            cu_layout lay = CU_LOGICAL;
            if (op->rule == CU_RULE_NHWC && k == 0) {
                lay = CU_NHWC;
            } else if (op->rule == CU_RULE_LIKE_INPUT) {
                const int u = n->in[0];
                if (u >= 0 && g->values[u].ndim == 4) lay = c->vals[u].layout;
            } else if (op->rule == CU_RULE_FOLLOW || op->rule == CU_RULE_ANY_NHWC) {
                for (int j = 0; j < n->n_in; j++) {
                    int u = n->in[j];
                    if (u < 0 || (g->values[u].flags & QF_VALUE_CONST) || c->vals[u].layout != CU_NHWC) continue;
                    bool same = g->values[u].ndim == 4 && !memcmp(g->values[u].dims, val->dims, 4 * sizeof(int64_t));
                    if (same || op->rule == CU_RULE_ANY_NHWC) {
                        lay = CU_NHWC;
                        break;
                    }
                    if (op != &cu_op_binary) break; /* unary ops walk input 0's bytes: only its layout will do */
                }
            }
            c->vals[v].layout = lay;
            if (op == &cu_op_transpose && k == 0) {
                c->vals[v].layout = CU_NHWC;
                if (!transpose_keeps_order(c, L)) c->vals[v].layout = CU_LOGICAL;
            }
        }
    }
}

/* Whether L's output holds its input's bytes as they are: Reshape, Flatten,
 * Squeeze and Unsqueeze of a logical-layout value, a Transpose that keeps
 * its input's order (transpose_keeps_order), and a Pad that adds nothing
 * (Swin's pads to whole windows where the size is one already). */
static bool moves_nothing(const cu_engine *c, const cu_layer *L, int x, int y)
{
    const qf_value *xv = &c->g->values[x], *yv = &c->g->values[y];
    if (xv->dtype != yv->dtype || qf_value_bytes(xv) != qf_value_bytes(yv)) return false;
    if (L->op == &cu_op_reshape) return !cu_is_nhwc(c, x) && !cu_is_nhwc(c, y);
    if (L->op == &cu_op_transpose) return transpose_keeps_order(c, L);
    if (L->op != &cu_op_pad || xv->ndim != yv->ndim || cu_is_nhwc(c, x) != cu_is_nhwc(c, y) ||
        !cu_elems_alike(cu_elem_of(c, L->n, y), cu_elem_of(c, L->n, x)))
        return false;
    const qfi_pad_params *p = (const qfi_pad_params *)L->n->params;
    for (int k = 0; k < xv->ndim; k++)
        if (p->begin[k] != 0 || xv->dims[k] != yv->dims[k]) return false;
    return true;
}

/* Nodes that move no bytes (moves_nothing) make their output a view of the
 * input's buffer (their launch then copies nothing). Values the host reads
 * or writes (graph inputs and outputs) keep buffers of their own. view_of as
 * qfi_plan_memory_views takes it. */
static void find_views(const cu_engine *c, const qf_value *plan_values, int *view_of)
{
    const qf_graph *g = c->g;
    for (int v = 0; v < g->n_values; v++) view_of[v] = -1;
    const int io = QF_VALUE_INPUT | QF_VALUE_OUTPUT | QF_VALUE_CONST;
    for (int i = 0; i < c->n_layers; i++) {
        const cu_layer *L = &c->layers[i];
        if (L->skip || L->out_override >= 0 || (L->op != &cu_op_reshape && L->op != &cu_op_pad && L->op != &cu_op_transpose))
            continue;
        const int x = L->n->in[0], y = L->n->out[0];
        if (x < 0 || y < 0 || plan_values[y].producer != i) continue;
        const int root = view_of[x] >= 0 ? view_of[x] : x;
        if ((g->values[root].flags & io) || (g->values[y].flags & io) || plan_values[root].producer < 0) continue;
        if (moves_nothing(c, L, x, y)) view_of[y] = root;
    }
}

/* Values that layers read though their nodes do not list them: a conv that
 * took its input's QuantizeLinear (cu_fuse_input_quantize) reads the graph's
 * float input, whose last listed reader is that skipped QuantizeLinear. Left
 * to the nodes, the plan let the conv's output share the input's bytes, and
 * the RGB stem kernel, which reads the input as it writes, read outputs
 * already written over images' pixels (MobileNetV3's stem: a few images of
 * each batch of 50 off the CPU engine's). An attention chain that took the
 * exporter's scalar Muls and K's Transpose in reads Q and K likewise.
 * read_at as qfi_plan_memory_views takes it. */
static void find_late_reads(const cu_engine *c, int *read_at)
{
    for (int v = 0; v < c->g->n_values; v++) read_at[v] = -1;
    for (int i = 0; i < c->n_layers; i++) {
        const cu_layer *L = &c->layers[i];
        const int late[4] = {L->quant_in, L->late_in[0], L->late_in[1], L->late_in[2]};
        for (int k = 0; k < 4; k++)
            if (!L->skip && late[k] >= 0 && read_at[late[k]] < i) read_at[late[k]] = i;
    }
}

static qf_status plan_arena(cu_engine *c, const qf_value *plan_values)
{
    const qf_graph *g = c->g;
    qf_graph pg = *g;
    pg.values = (qf_value *)plan_values;
    size_t *off = (size_t *)qfi_calloc((size_t)g->n_values + 1, sizeof *off);
    int *view_of = (int *)qfi_calloc((size_t)g->n_values + 1, sizeof *view_of);
    int *read_at = (int *)qfi_calloc((size_t)g->n_values + 1, sizeof *read_at);
    if (!off || !view_of || !read_at) {
        free(off);
        free(view_of);
        free(read_at);
        return QF_ERR_NOMEM;
    }
    size_t total = 0;
    find_views(c, plan_values, view_of);
    find_late_reads(c, read_at);
    qf_status st = qfi_plan_memory_views(&pg, view_of, read_at, 256, off, &total);
    free(view_of);
    free(read_at);
    /* before anything large is allocated: a batch that cannot fit says so, with its bytes */
    uint64_t avail = 0;
    qf_engine_opts o = {};
    o.device = QF_DEVICE_CUDA;
    o.device_index = c->device;
    char where[32];
    snprintf(where, sizeof where, "cuda:%d memory", c->device);
    if (st == QF_OK) st = cu_free_memory(g, &o, &avail);
    if (st == QF_OK) st = qfi_engine_fits(g, where, total, avail);
    if (st == QF_OK) st = cu_alloc(c, total, (void **)&c->arena);
    if (st == QF_OK) {
        c->arena_bytes = total;
        for (int v = 0; v < g->n_values; v++)
            if (off[v] != SIZE_MAX) c->vals[v].ptr = c->arena + off[v];
    }
    free(off);
    return st;
}

/* Pseudo-random bytes: algorithm timing on zeros would flatter some kernels. */
__global__ void fill_pattern_kernel(uint32_t *p, int64_t n, uint32_t seed)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t x = (uint32_t)i * 2654435761u ^ seed;
        x ^= x >> 15;
        x *= 2246822519u;
        x ^= x >> 13;
        /* keep floats finite and moderate: clear the top exponent bits */
        p[i] = (x & 0x3dffffffu) | 0x30000000u;
    }
}

static qf_status fill_pattern(cu_engine *c, void *p, size_t bytes)
{
    if (!p || bytes < 4) return QF_OK;
    fill_pattern_kernel<<<1024, 256, 0, c->stream>>>((uint32_t *)p, (int64_t)(bytes / 4), 0x9e3779b9u);
    CU_LAUNCHED();
    return QF_OK;
}

/* ---- the forward pass ------------------------------------------------------------------- */

static qf_status stage_inputs(cu_engine *c, cudaStream_t s)
{
    const qf_graph *g = c->g;
    for (int i = 0; i < g->n_inputs; i++) {
        int v = g->inputs[i];
        if (!c->d_in[i]) continue;
        const qf_value *val = &g->values[v];
        int64_t ss[4] = {val->dims[1] * val->dims[2] * val->dims[3], val->dims[2] * val->dims[3], val->dims[3], 1}, ds[4];
        cu_strides(c, v, ds);
        cu_elem el = {val->dtype, 0.0f};
        QF_CHECK(cu_strided_copy(s, c->vals[v].ptr, el, ds, 0, c->d_in[i], el, ss, 0, 4, val->dims));
    }
    return QF_OK;
}

/* Output i on the device in its logical layout: the value itself, or the
 * staging buffer its layout conversion fills. */
static qf_status output_on_device(cu_engine *c, int i, const void **src)
{
    if (c->d_out[i]) {
        *src = c->d_out[i];
        return QF_OK;
    }
    return cu_value_ptr(c, c->g->outputs[i], (void **)src);
}

/* The outputs' layout conversions: the last step of the pass on the device. */
static qf_status finish_outputs(cu_engine *c, cudaStream_t s)
{
    for (int i = 0; i < c->g->n_outputs; i++)
        if (c->d_out[i]) QF_CHECK(cu_copy_logical(c, c->g->outputs[i], c->d_out[i], s));
    return QF_OK;
}

/* The outputs into their pinned host copies, after the pass. */
static qf_status download_outputs(cu_engine *c, cudaStream_t s)
{
    const qf_graph *g = c->g;
    for (int i = 0; i < g->n_outputs; i++) {
        const void *src;
        QF_CHECK(output_on_device(c, i, &src));
        size_t bytes = qf_value_bytes(&g->values[g->outputs[i]]);
        if (bytes) CU_CHECK(cudaMemcpyAsync(c->h_out[i], src, bytes, cudaMemcpyDeviceToHost, s));
    }
    return QF_OK;
}

/* Copies value v to the host in logical layout and hands it to the observer;
 * an f32 value goes as its histogram where a hist_observer takes it (the
 * histogram ignores layout, and a padded batch's real images lead in NHWC too). */
static qf_status observe(cu_engine *c, int v)
{
    const qf_graph *g = c->g;
    const qf_value *val = &g->values[v];
    const qf_engine_opts &o = c->e->opts;
    if (c->hist_dev && val->dtype == QF_F32 && c->vals[v].ptr) {
        const int64_t numel = qf_value_numel(val);
        int64_t n = o.hist_count ? o.hist_count(o.observer_user, g, v) : numel;
        if (n > numel) n = numel;
        if (n < 0) n = 0;
        QF_CHECK(cu_histogram(c->stream, (const float *)c->vals[v].ptr, n, c->hist_dev, c->hist_host, c->hist_out));
        o.hist_observer(o.observer_user, g, v, c->hist_out);
        return QF_OK;
    }
    size_t bytes = qf_value_bytes(val);
    if (!bytes) {
        c->e->opts.observer(c->e->opts.observer_user, g, v, c->obs_host);
        return QF_OK;
    }
    const void *src = c->vals[v].ptr;
    if (!src) return QF_OK;
    if (cu_is_nhwc(c, v)) {
        QF_CHECK(cu_copy_logical(c, v, c->obs_dev, c->stream));
        src = c->obs_dev;
    }
    CU_CHECK(cudaMemcpyAsync(c->obs_host, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    CU_CHECK(cudaStreamSynchronize(c->stream));
    c->e->opts.observer(c->e->opts.observer_user, g, v, c->obs_host);
    return QF_OK;
}

static qf_status run_layer(cu_engine *c, cu_layer *L, cudaStream_t s)
{
    qf_status st = L->op->launch(c, L, s);
    return st == QF_OK ? st : qfi_error_node(st, c->g, L->n);
}

/* Enqueues the pass on the compute stream: input layout conversions, every
 * layer, output conversions; the downloads are the caller's
 * (download_outputs), so that the captured graph, which `qforge bench`
 * replays, is the pass on the device alone. */
static qf_status forward(cu_engine *c, bool observed)
{
    cudaStream_t s = c->stream;
    QF_CHECK(stage_inputs(c, s));
    for (int i = 0; i < c->n_layers; i++) {
        cu_layer *L = &c->layers[i];
        if (L->skip) continue;
        QF_CHECK(run_layer(c, L, s));
        if (observed)
            for (int k = 0; k < L->n->n_out; k++)
                if (L->n->out[k] >= 0) QF_CHECK(observe(c, L->n->out[k]));
    }
    return finish_outputs(c, s);
}

/* Where input i's bytes go on the device: the staging buffer of a layout
 * conversion, or the value itself. */
static void *input_on_device(cu_engine *c, int i)
{
    return c->d_in[i] ? c->d_in[i] : c->vals[c->g->inputs[i]].ptr;
}

/* The first `items` items of each input batch: padding behind them is not
 * sent; nor is an input that qf_engine_write_input filled on the device. */
static qf_status upload_inputs(cu_engine *c, int items)
{
    const qf_graph *g = c->g;
    for (int i = 0; i < g->n_inputs; i++) {
        if (c->in_written[i]) {
            c->in_written[i] = false;
            continue;
        }
        const qf_value *val = &g->values[g->inputs[i]];
        size_t bytes = qf_value_bytes(val);
        if (val->ndim > 0 && val->dims[0] == g->batch && items < g->batch) bytes = bytes / (size_t)g->batch * (size_t)items;
        if (bytes) CU_CHECK(cudaMemcpyAsync(input_on_device(c, i), c->h_in[i], bytes, cudaMemcpyHostToDevice, c->copy));
    }
    CU_CHECK(cudaEventRecord(c->uploaded, c->copy));
    CU_CHECK(cudaStreamWaitEvent(c->stream, c->uploaded, 0));
    return QF_OK;
}

/* The tactic cache of this GPU, driver, CUDA, cuBLASLt and cuDNN and this
 * qforge: any of them changing can change which tactic is fastest (or
 * valid). Opened before the layers are prepared (a cached cuDNN choice
 * builds only its own plan); cuDNN is loaded here only for a graph with an
 * FP16 or INT8 Conv on the device, its users, so that their cached cuDNN
 * ranks are keyed by its version. Off while QFORGE_CUDA_CONV_TACTIC /
 * QFORGE_CUDA_IGEMM_VARIANT pin tactics. */
static void open_tactics(cu_engine *c)
{
    bool dnn_conv = false;
    for (int i = 0; i < c->g->n_nodes && !dnn_conv; i++) {
        const qf_node *n = &c->g->nodes[i];
        dnn_conv = n->op == QF_OP_CONV && (n->precision == QF_PREC_FP16 || n->precision == QF_PREC_INT8) && !c->on_host[i];
    }
    if (dnn_conv) qfi_cudnn_load();
    if (getenv("QFORGE_CUDA_CONV_TACTIC") || getenv("QFORGE_CUDA_IGEMM_VARIANT")) return;
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    char key[512];
    snprintf(key, sizeof key, "%s sm_%d%d %dSM driver %d cuda %d cublasLt %zu cudnn %zu qforge %s", c->prop.name,
             c->prop.major, c->prop.minor, c->prop.multiProcessorCount, drv, rt, (size_t)cublasLtGetVersion(),
             qfi_cudnn_version(), PACKAGE_VERSION);
    c->tactics = qfi_tactic_cache_open(key);
    if (c->tactics) qf_log(QF_LOG_DEBUG, "tactic cache %s", qfi_tactic_cache_path(c->tactics));
}

static qf_status capture(cu_engine *c)
{
    cudaGraph_t graph = NULL;
    CU_CHECK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    qf_status st = forward(c, false);
    cudaError_t e = cudaStreamEndCapture(c->stream, &graph);
    if (st != QF_OK) {
        if (graph) cudaGraphDestroy(graph);
        return st;
    }
    if (e != cudaSuccess) return cu_fail(e, "cudaStreamEndCapture", __FILE__, __LINE__);
    e = cudaGraphInstantiate(&c->graph, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        c->graph = NULL;
        return cu_fail(e, "cudaGraphInstantiate", __FILE__, __LINE__);
    }
    return QF_OK;
}

static qf_status create_impl(qf_engine *e, cu_engine *c)
{
    const qf_graph *g = e->g;
    QF_CHECK(select_device(c, e->opts.device_index));
    QF_CHECK(build_view(c));
    c->vals = (cu_value *)qfi_calloc((size_t)g->n_values + 1, sizeof(cu_value));
    c->layers = (cu_layer *)qfi_calloc((size_t)g->n_nodes + 1, sizeof(cu_layer));
    c->h_in = (void **)qfi_calloc((size_t)g->n_inputs + 1, sizeof(void *));
    c->d_in = (void **)qfi_calloc((size_t)g->n_inputs + 1, sizeof(void *));
    c->in_written = (bool *)qfi_calloc((size_t)g->n_inputs + 1, sizeof(bool));
    c->h_out = (void **)qfi_calloc((size_t)g->n_outputs + 1, sizeof(void *));
    c->d_out = (void **)qfi_calloc((size_t)g->n_outputs + 1, sizeof(void *));
    qf_value *plan_values = (qf_value *)qfi_calloc((size_t)g->n_values + 1, sizeof(qf_value));
    if (!c->vals || !c->layers || !c->h_in || !c->d_in || !c->in_written || !c->h_out || !c->d_out || !plan_values) {
        free(plan_values);
        return QF_ERR_NOMEM;
    }
    c->n_layers = g->n_nodes;
    for (int i = 0; i < g->n_nodes; i++) {
        c->layers[i].n = &g->nodes[i];
        c->layers[i].index = i;
        c->layers[i].out_override = -1;
        c->layers[i].residual = -1;
        c->layers[i].quant_in = c->layers[i].late_in[0] = c->layers[i].late_in[1] = c->layers[i].late_in[2] = -1;
        c->layers[i].op = c->on_host[i] ? &cu_op_host : cu_op_of(g->nodes[i].op);
    }
    QF_CHECK(cu_host_setup(c));
    CU_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    CU_CHECK(cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking));
    CU_CHECK(cudaEventCreateWithFlags(&c->uploaded, cudaEventDisableTiming));
    QF_CHECK(qfi_cublaslt_load());
    LT_CHECK(cublasLtCreate(&c->lt));

    memcpy(plan_values, g->values, (size_t)g->n_values * sizeof(qf_value));
    c->fuse = !e->opts.observer && !fusion_off("all");
    qf_status st = c->fuse && !fusion_off("shuffle") ? cu_fuse_channel_shuffles(c, plan_values) : QF_OK;
    assign_layouts(c);
    if (st == QF_OK && c->fuse && !fusion_off("shuffle")) st = cu_fuse_shuffle_slices(c, plan_values);
    if (st == QF_OK && c->fuse && !fusion_off("layers")) st = cu_fuse_layers(c, plan_values);
    if (st == QF_OK && c->fuse && !fusion_off("input")) cu_fuse_input_quantize(c, plan_values);
    if (st == QF_OK && c->fuse && !fusion_off("bn")) cu_fuse_batchnorm_act(c, plan_values);
    if (st == QF_OK && c->fuse && !fusion_off("attention")) st = cu_fuse_attention(c, plan_values);
    if (st == QF_OK && c->fuse && !fusion_off("se")) st = cu_fuse_se_gates(c, plan_values);
    if (st == QF_OK && c->fuse && !fusion_off("layernorm")) st = cu_fuse_layer_norm_qdq(c, plan_values);
    if (st == QF_OK) st = plan_arena(c, plan_values);
    free(plan_values);
    QF_CHECK(st);
    e->arena_bytes = c->arena_bytes;

    /* pinned host buffers; device staging where the layout changes */
    for (int i = 0; i < g->n_inputs; i++) {
        int v = g->inputs[i];
        size_t bytes = qf_value_bytes(&g->values[v]);
        CU_CHECK(cudaMallocHost(&c->h_in[i], bytes ? bytes : 64));
        memset(c->h_in[i], 0, bytes);
        if (!c->vals[v].ptr) QF_CHECK(cu_alloc(c, bytes, &c->vals[v].ptr)); /* an input nothing reads */
        if (cu_is_nhwc(c, v)) {
            QF_CHECK(cu_alloc(c, bytes, &c->d_in[i]));
            CU_CHECK(cudaMemset(c->d_in[i], 0, bytes)); /* the build's eager pass reads it before any upload */
        }
        e->inputs[i] = c->h_in[i];
    }
    for (int i = 0; i < g->n_outputs; i++) {
        int v = g->outputs[i];
        size_t bytes = qf_value_bytes(&g->values[v]);
        CU_CHECK(cudaMallocHost(&c->h_out[i], bytes ? bytes : 64));
        memset(c->h_out[i], 0, bytes);
        if (cu_is_nhwc(c, v)) QF_CHECK(cu_alloc(c, bytes, &c->d_out[i]));
        e->outputs[i] = c->h_out[i];
    }

    /* a node whose prepare refuses the device (an attribute or dtype its
     * kernel lacks) goes to the host: the others are prepared to collect every
     * refusal, then cu_create builds again with those nodes on the host */
    open_tactics(c);
    int refused = 0;
    for (int i = 0; i < c->n_layers; i++) {
        cu_layer *L = &c->layers[i];
        if (L->skip) continue;
        st = L->op->prepare(c, L);
        if (st == QF_ERR_UNSUPPORTED && !cu_on_host(L)) {
            c->refused[i] = strdup(qf_error_message());
            if (!c->refused[i]) return QF_ERR_NOMEM;
            refused++;
            continue;
        }
        if (st != QF_OK) return qfi_error_node(st, c->g, L->n);
    }
    if (refused) return qf_error(QF_ERR_UNSUPPORTED, "%d node(s) refused by their CUDA kernels", refused);
    for (int s = 0; s < CU_SCR_COUNT; s++)
        if (c->scratch_bytes[s]) QF_CHECK(cu_alloc(c, c->scratch_bytes[s], &c->scratch[s]));
    c->lt_ws_bytes = CU_LT_WORKSPACE;
    QF_CHECK(cu_alloc(c, c->lt_ws_bytes, &c->lt_ws));
    if (e->opts.observer) {
        size_t mx = 64;
        for (int v = 0; v < g->n_values; v++)
            if (qf_value_bytes(&g->values[v]) > mx) mx = qf_value_bytes(&g->values[v]);
        c->obs_bytes = mx;
        QF_CHECK(cu_alloc(c, mx, &c->obs_dev));
        CU_CHECK(cudaMallocHost(&c->obs_host, mx));
        if (e->opts.hist_observer) {
            if (!(c->hist_out = (qf_histogram *)malloc(sizeof *c->hist_out))) return QF_ERR_NOMEM;
            QF_CHECK(cu_alloc(c, cu_hist_bytes(), (void **)&c->hist_dev));
            CU_CHECK(cudaMallocHost((void **)&c->hist_host, cu_hist_bytes()));
        }
    }

    /* time GEMM algorithms on the real buffers, filled with non-zero data */
    QF_CHECK(fill_pattern(c, c->arena, c->arena_bytes));
    for (int s = 0; s < CU_SCR_COUNT; s++) QF_CHECK(fill_pattern(c, c->scratch[s], c->scratch_bytes[s]));
    CU_CHECK(cudaStreamSynchronize(c->stream));
    for (int i = 0; i < c->n_layers; i++) {
        cu_layer *L = &c->layers[i];
        const cu_op *op = L->op;
        if (L->skip || !op->tune) continue;
        st = op->tune(c, L);
        if (st != QF_OK) return qfi_error_node(st, c->g, L->n);
    }
    qfi_tactic_cache_save(c->tactics);
    /* one eager pass loads every kernel and surfaces errors before capture */
    QF_CHECK(forward(c, false));
    CU_CHECK(cudaStreamSynchronize(c->stream));
    /* host kernels saw the arena's fill pattern, not inputs: what they said
     * of it (a Gather index out of range) is no error of the build */
    if (cu_host_status(c) != QF_OK) qf_log(QF_LOG_DEBUG, "%s: host node on the fill pattern: %s", g->source, qf_error_message());
    if (!e->opts.observer && !getenv("QFORGE_CUDA_NOGRAPH")) QF_CHECK(capture(c));
    return QF_OK;
}

/* Says once per op, as the engine is built, which ops run on the host: how
 * many nodes, the first one and why. */
static void log_host_nodes(const cu_engine *c)
{
    const qf_graph *g = c->g;
    for (int i = 0; i < g->n_nodes; i++) {
        const qf_node *n = &g->nodes[i];
        if (!c->on_host[i] || c->layers[i].skip) continue;
        bool said = false;
        int count = 0;
        for (int j = 0; j < g->n_nodes; j++) {
            if (!c->on_host[j] || c->layers[j].skip || g->nodes[j].op != n->op) continue;
            said |= j < i;
            count++;
        }
        if (!said)
            qf_log(QF_LOG_WARN, "%s: %s runs on the host (%d node%s, first %s): %s", g->source, qf_op_name(n->op),
                   count, count == 1 ? "" : "s", n->name, c->refused[i] ? c->refused[i] : "no reason recorded");
    }
}

/* Builds the engine; a build whose prepares refused nodes starts over with
 * them on the host (layouts, fusions and the memory plan then know it).
 * Each round moves at least one node to the host, so it ends. */
static qf_status cu_create(qf_engine *e)
{
    const qf_graph *g = e->g;
    bool *on_host = (bool *)qfi_calloc((size_t)g->n_nodes + 1, sizeof *on_host);
    char **why = (char **)qfi_calloc((size_t)g->n_nodes + 1, sizeof *why);
    qf_status st = on_host && why ? cu_host_plan(g, on_host, why) : QF_ERR_NOMEM;
    for (int round = 0; st == QF_OK; round++) {
        cu_engine *c = (cu_engine *)qfi_calloc(1, sizeof *c);
        if (!c) {
            st = QF_ERR_NOMEM;
            break;
        }
        c->e = e;
        c->g = g;
        c->on_host = on_host;
        c->refused = why;
        e->impl = c;
        st = create_impl(e, c);
        if (st == QF_OK) {
            log_host_nodes(c);
            free_reasons(why, g->n_nodes);
            c->refused = NULL;
            return QF_OK;
        }
        /* keep the message: teardown calls may overwrite it */
        qfi_error_saved err;
        qfi_error_save(&err);
        bool again = false;
        for (int i = 0; i < g->n_nodes; i++)
            if (why[i] && !on_host[i]) on_host[i] = again = true;
        c->on_host = NULL; /* the plan outlives this attempt */
        c->refused = NULL;
        cu_destroy(e);
        if (again && st == QF_ERR_UNSUPPORTED) {
            qf_log(QF_LOG_DEBUG, "%s: CUDA engine build %d: %s; building again", g->source, round + 1, err.msg);
            st = QF_OK;
            continue;
        }
        st = qfi_error_restore(st, &err);
    }
    free(on_host);
    free_reasons(why, g->n_nodes);
    return st;
}

static qf_status cu_run(qf_engine *e, int items)
{
    cu_engine *c = (cu_engine *)e->impl;
    CU_CHECK(cudaSetDevice(c->device));
    const qf_graph *g = c->g;
    if (e->opts.observer)
        for (int i = 0; i < g->n_inputs; i++) e->opts.observer(e->opts.observer_user, g, g->inputs[i], c->h_in[i]);
    QF_CHECK(upload_inputs(c, items));
    if (c->graph) {
        CU_CHECK(cudaGraphLaunch(c->graph, c->stream));
    } else {
        qf_status st = forward(c, e->opts.observer != NULL);
        if (st == QF_OK) st = download_outputs(c, c->stream);
        if (st != QF_OK) {
            qfi_error_saved err;
            qfi_error_save(&err);
            cudaStreamSynchronize(c->stream);
            (void)cu_host_status(c); /* the run failed before: that is the error to report */
            return qfi_error_restore(st, &err);
        }
    }
    if (c->graph) QF_CHECK(download_outputs(c, c->stream));
    CU_CHECK(cudaStreamSynchronize(c->stream));
    return cu_host_status(c);
}

/* A copy on the upload stream, from host memory or this GPU's (a server's
 * request already on the device skips the host); the run waits for it. */
static qf_status cu_write_input(qf_engine *e, int i, size_t offset, const void *src, size_t bytes)
{
    cu_engine *c = (cu_engine *)e->impl;
    CU_CHECK(cudaSetDevice(c->device));
    CU_CHECK(cudaMemcpyAsync((char *)input_on_device(c, i) + offset, src, bytes, cudaMemcpyDefault, c->copy));
    c->in_written[i] = true;
    return QF_OK;
}

/* Into host memory from the run's pinned host copy of the output; into this
 * GPU's memory (a server's response buffer in CUDA shared memory) from the
 * output on the device, on the copy stream: no trip through the host, and no
 * synchronous cudaMemcpy on the legacy stream between a server's instances. */
static qf_status cu_read_output(const qf_engine *e, int i, size_t offset, void *dst, size_t bytes)
{
    cu_engine *c = (cu_engine *)e->impl;
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, dst) != cudaSuccess || a.type != cudaMemoryTypeDevice) {
        (void)cudaGetLastError(); /* a plain host pointer */
        memcpy(dst, (const char *)c->h_out[i] + offset, bytes);
        return QF_OK;
    }
    CU_CHECK(cudaSetDevice(c->device));
    const void *src;
    QF_CHECK(output_on_device(c, i, &src));
    CU_CHECK(cudaMemcpyAsync(dst, (const char *)src + offset, bytes, cudaMemcpyDeviceToDevice, c->copy));
    CU_CHECK(cudaStreamSynchronize(c->copy));
    return QF_OK;
}

/* Replays the pass back to back on the resident inputs, an event between
 * replays, the outputs left on the device: each interval is one run as a
 * pipelined deployment sees it (uploads and downloads overlap compute on
 * the copy engines; a server answering in CUDA shared memory makes no
 * download at all), and as PyTorch's timing (bench/peers) and trtexec's GPU
 * compute time measure. YOLOv8n's 722 MB of FP32 outputs at batch 256 took
 * 12.7 of its 40 ms per batch through PCIe. */
static qf_status cu_bench(qf_engine *e, int iterations, double *ms)
{
    cu_engine *c = (cu_engine *)e->impl;
    CU_CHECK(cudaSetDevice(c->device));
    if (iterations <= 0) return QF_OK;
    cudaEvent_t *ev = (cudaEvent_t *)qfi_calloc((size_t)iterations + 1, sizeof *ev);
    if (!ev) return QF_ERR_NOMEM;
    qf_status st = QF_OK;
    int made = 0;
    for (; made <= iterations && st == QF_OK; made++) {
        cudaError_t err = cudaEventCreate(&ev[made]);
        if (err != cudaSuccess) st = cu_fail(err, "cudaEventCreate", __FILE__, __LINE__);
    }
    if (st == QF_OK) {
        cudaEventRecord(ev[0], c->stream);
        for (int i = 0; i < iterations && st == QF_OK; i++) {
            if (c->graph) {
                cudaError_t err = cudaGraphLaunch(c->graph, c->stream);
                if (err != cudaSuccess) st = cu_fail(err, "cudaGraphLaunch", __FILE__, __LINE__);
            } else {
                st = forward(c, false);
            }
            cudaEventRecord(ev[i + 1], c->stream);
        }
        cudaError_t err = cudaStreamSynchronize(c->stream);
        if (st == QF_OK && err != cudaSuccess) st = cu_fail(err, "cudaStreamSynchronize", __FILE__, __LINE__);
        if (st == QF_OK) st = cu_host_status(c);
        for (int i = 0; i < iterations && st == QF_OK; i++) {
            float t = 0.0f;
            cudaEventElapsedTime(&t, ev[i], ev[i + 1]);
            ms[i] = t;
        }
    }
    for (int i = 0; i < made; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    free(ev);
    return st;
}

/* One eager pass with an event pair around every layer (the second of two
 * passes, so nothing is timed cold). */
static qf_status cu_profile(qf_engine *e, double *node_ms)
{
    cu_engine *c = (cu_engine *)e->impl;
    CU_CHECK(cudaSetDevice(c->device));
    const int n = c->n_layers;
    cudaEvent_t *ev = (cudaEvent_t *)qfi_calloc(2 * (size_t)n + 1, sizeof *ev);
    if (!ev) return QF_ERR_NOMEM;
    qf_status st = QF_OK;
    for (int i = 0; i < 2 * n && st == QF_OK; i++) {
        cudaError_t err = cudaEventCreate(&ev[i]);
        if (err != cudaSuccess) st = cu_fail(err, "cudaEventCreate", __FILE__, __LINE__);
    }
    for (int pass = 0; pass < 2 && st == QF_OK; pass++) {
        st = stage_inputs(c, c->stream);
        for (int i = 0; i < n && st == QF_OK; i++) {
            node_ms[i] = 0.0;
            if (c->layers[i].skip) continue;
            cudaEventRecord(ev[2 * i], c->stream);
            st = run_layer(c, &c->layers[i], c->stream);
            cudaEventRecord(ev[2 * i + 1], c->stream);
        }
        if (st == QF_OK) st = finish_outputs(c, c->stream);
        if (st == QF_OK) st = download_outputs(c, c->stream);
        cudaError_t err = cudaStreamSynchronize(c->stream);
        if (st == QF_OK && err != cudaSuccess) st = cu_fail(err, "cudaStreamSynchronize", __FILE__, __LINE__);
        if (st == QF_OK) st = cu_host_status(c);
    }
    for (int i = 0; i < n && st == QF_OK; i++) {
        if (c->layers[i].skip) continue;
        float t = 0.0f;
        cudaEventElapsedTime(&t, ev[2 * i], ev[2 * i + 1]);
        node_ms[i] = t;
    }
    for (int i = 0; i < 2 * n; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    free(ev);
    return st;
}

static qf_device_kind cu_node_device(const qf_engine *e, int node)
{
    const cu_engine *c = (const cu_engine *)e->impl;
    return c->on_host[node] ? QF_DEVICE_CPU : QF_DEVICE_CUDA;
}

/* Devices, driver, and the libraries the engine loads at run time (loaded
 * here as a build would), or why each is missing. */
static void cu_describe(char *buf, size_t len)
{
    int count = 0, drv = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    size_t n = 0;
    auto put = [&](const char *fmt, auto... a) {
        if (n < len) n += (size_t)snprintf(buf + n, len - n, fmt, a...);
    };
    if (e != cudaSuccess || count == 0) put("no usable device (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    else {
        cudaDriverGetVersion(&drv);
        cudaDeviceProp prop;
        put("%d device(s)", count);
        if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) put(", cuda:0 %s sm_%d%d", prop.name, prop.major, prop.minor);
        put(", driver %d.%d", drv / 1000, drv % 1000 / 10);
    }
    /* both libraries number versions major * 10000 + minor * 100 + patch */
    auto ver = [](size_t v, char *s, size_t l) {
        snprintf(s, l, "%zu.%zu.%zu", v / 10000, v / 100 % 100, v % 100);
        return s;
    };
    char v[32];
    if (qfi_cublaslt_load() == QF_OK) put("; cuBLASLt %s", ver((size_t)cublasLtGetVersion(), v, sizeof v));
    else put("; no cuBLASLt: %s", qf_error_message());
    if (qfi_cudnn_load()) put("; cuDNN %s (FP16 and INT8 conv tactics)", ver(qfi_cudnn_version(), v, sizeof v));
    else put("; no cuDNN tactics: %s", qfi_cudnn_why());
}

extern "C" const qfi_backend qfi_cuda_backend = {
    "cuda", cu_create, cu_run, cu_destroy, cu_bench, cu_profile, cu_write_input, cu_read_output, cu_op_precisions,
    check_node, cu_free_memory, cu_node_device, cu_describe,
};
