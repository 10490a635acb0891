/* Whether the CPU engine may run a batch as slices of images, one slice per
 * thread through the whole graph (cpu_engine.c), instead of layer by layer
 * with every layer split over the threads; and the graph each slice runs.
 *
 * That is allowed when no node mixes images: every activation holds the
 * batch's images along dim 0, and each image's part of an output depends on
 * that image's part of the inputs alone. The check below is a whitelist of
 * ops and the arguments under which they keep images apart (a Softmax not
 * over dim 0, a Concat not along it, a MatMul by constant weights or of two
 * activations image by image, ...); any other node means layer by layer.
 * The kernels read shapes from the values (never from the constants that
 * made them), so a slice runs on a view of the graph that shares its nodes
 * and constants and has its own values with dim 0 of each batched one set to
 * the slice's images. Results are the same bits: every kernel computes an
 * image the same way whatever else is in its batch (sgemm_rows.c). */
#include "image_parallel.h"
#include "ops/nn.h"
#include "ops/tensor_ops.h"

/* Axis `a` of an ndim-dim tensor made non-negative. */
static int64_t norm_axis(int64_t a, int ndim) { return a < 0 ? a + ndim : a; }

/* An operand of an elementwise node with output rank `rank`: an activation
 * with the images along dim 0 at that rank, or a constant that broadcasts
 * along dim 0 (lower rank, or dim 0 of 1). */
static bool elementwise_operand(const qf_graph *g, const bool *batched, int v, int rank)
{
    if (v < 0) return true;
    const qf_value *x = &g->values[v];
    if (qfi_is_const(g, v)) return x->ndim < rank || x->dims[0] == 1;
    return batched[v] && x->ndim == rank;
}

/* Whether node n keeps images apart, given which of its inputs hold the
 * images along dim 0; *why names what does not. */
static bool node_keeps_images(const qf_graph *g, const qf_node *n, const bool *batched, const char **why)
{
    const qf_value *y = &g->values[n->out[0]];
    const int rank = y->ndim;
    /* every activation read holds the images (each op below says which inputs may be constant) */
    for (int k = 0; k < n->n_in; k++)
        if (n->in[k] >= 0 && !qfi_is_const(g, n->in[k]) && !batched[n->in[k]]) {
            *why = "reads a tensor without the images along dim 0";
            return false;
        }
    const bool x_batched = n->n_in > 0 && n->in[0] >= 0 && batched[n->in[0]];
    switch (n->op) {
    case QF_OP_CONV:
    case QF_OP_CONV_TRANSPOSE:
    case QF_OP_MAX_POOL:
    case QF_OP_AVERAGE_POOL:
    case QF_OP_GLOBAL_AVERAGE_POOL:
    case QF_OP_GLOBAL_MAX_POOL:
    case QF_OP_BATCH_NORM:
    case QF_OP_RESIZE:
    case QF_OP_UPSAMPLE:
    case QF_OP_RESHAPE:
    case QF_OP_FLATTEN:
    case QF_OP_SQUEEZE:
    case QF_OP_UNSQUEEZE:
    case QF_OP_RELU:
    case QF_OP_LEAKY_RELU:
    case QF_OP_CLIP:
    case QF_OP_SIGMOID:
    case QF_OP_HARD_SIGMOID:
    case QF_OP_HARD_SWISH:
    case QF_OP_TANH:
    case QF_OP_ERF:
    case QF_OP_GELU:
    case QF_OP_SQRT:
    case QF_OP_NOT:
    case QF_OP_CAST:
    case QF_OP_IDENTITY:
    case QF_OP_DROPOUT:
        /* per image by construction; a reshape that keeps dim 0 keeps each image's elements together */
        if (!x_batched) *why = "computes from constants only";
        return x_batched;
    case QF_OP_EXPAND: /* a constant (ViT's class token) or an activation broadcast to the batch */
        return true;
    case QF_OP_ADD:
    case QF_OP_SUB:
    case QF_OP_MUL:
    case QF_OP_DIV:
    case QF_OP_POW:
    case QF_OP_MOD:
    case QF_OP_PRELU:
    case QF_OP_EQUAL:
    case QF_OP_WHERE:
        for (int k = 0; k < n->n_in; k++)
            if (!elementwise_operand(g, batched, n->in[k], rank)) {
                *why = "broadcasts along the batch";
                return false;
            }
        return true;
    case QF_OP_QUANTIZE_LINEAR:
    case QF_OP_DEQUANTIZE_LINEAR: {
        qfi_qdq_geom geo;
        if (qfi_qdq_geometry(g, n, &geo) != QF_OK || (geo.channels > 1 && geo.axis == 0)) {
            *why = "has a scale per image";
            return false;
        }
        return x_batched;
    }
    case QF_OP_GEMM: {
        const qfi_gemm_params *p = n->params;
        if (p->trans_a || !x_batched || !qfi_is_const(g, n->in[1]) || (n->n_in > 2 && n->in[2] >= 0 && !qfi_is_const(g, n->in[2]))) {
            *why = "is not images x constant weights";
            return false;
        }
        return true;
    }
    case QF_OP_MATMUL: {
        const qf_value *a = &g->values[n->in[0]], *b = &g->values[n->in[1]];
        if (x_batched && qfi_is_const(g, n->in[1]) && (b->ndim <= 2 || (b->ndim == a->ndim && b->dims[0] == 1)))
            return true; /* rows of the images by constant weights */
        if (x_batched && batched[n->in[1]] && a->ndim >= 3 && a->ndim == b->ndim)
            return true; /* image by image (attention's products) */
        *why = "multiplies across the batch";
        return false;
    }
    case QF_OP_SOFTMAX: {
        const qfi_softmax_params *p = n->params;
        if (norm_axis(p->axis, rank) < 1) *why = "normalizes along the batch";
        return norm_axis(p->axis, rank) >= 1;
    }
    case QF_OP_LAYER_NORM: {
        const qfi_layer_norm_params *p = n->params;
        if (norm_axis(p->axis, rank) < 1) *why = "normalizes along the batch";
        return norm_axis(p->axis, rank) >= 1;
    }
    case QF_OP_REDUCE_MEAN: {
        bool reduced[QF_MAX_DIMS] = {false}, noop = false;
        if (qfi_reduce_mean_axes(g, n, NULL, reduced, &noop) != QF_OK || (!noop && reduced[0])) {
            *why = "reduces along the batch";
            return false;
        }
        return true;
    }
    case QF_OP_CONCAT: {
        const qfi_axis_params *p = n->params;
        for (int k = 0; k < n->n_in; k++)
            if (qfi_is_const(g, n->in[k])) {
                *why = "joins a constant to the images";
                return false;
            }
        if (p->norm == 0) *why = "joins along the batch";
        return p->norm != 0;
    }
    case QF_OP_SPLIT: {
        const qfi_split_params *p = n->params;
        if (p->norm == 0) *why = "splits along the batch";
        return p->norm != 0 && x_batched;
    }
    case QF_OP_GATHER: {
        const qfi_axis_params *p = n->params;
        if (p->norm == 0 || !qfi_is_const(g, n->in[1])) *why = "gathers along the batch or by computed indices";
        return p->norm != 0 && qfi_is_const(g, n->in[1]) && x_batched;
    }
    case QF_OP_TRANSPOSE: {
        const qfi_transpose_params *p = n->params;
        const int first = p->n_perm > 0 ? p->perm[0] : rank - 1;
        if (first != 0) *why = "moves the batch";
        return first == 0 && x_batched;
    }
    case QF_OP_PAD: {
        const qfi_pad_params *p = n->params;
        if (p->begin[0] != 0) *why = "pads the batch";
        return p->begin[0] == 0 && x_batched;
    }
    case QF_OP_SLICE: {
        const qfi_slice_params *p = n->params;
        if (p->start[0] != 0 || p->step[0] != 1) *why = "slices the batch";
        return p->start[0] == 0 && p->step[0] == 1 && x_batched;
    }
    default: *why = "is not known to keep images apart"; return false;
    }
}

bool qfi_cpu_images_independent(const qf_graph *g, const char **why)
{
    static const char *const none = "";
    *why = none;
    const int64_t N = g->batch;
    if (N < 2) {
        *why = "a batch of one";
        return false;
    }
    bool *batched = qfi_calloc((size_t)g->n_values + 1, sizeof *batched);
    if (!batched) {
        *why = "out of memory";
        return false;
    }
    bool ok = true;
    for (int i = 0; i < g->n_inputs && ok; i++) {
        const qf_value *x = &g->values[g->inputs[i]];
        batched[g->inputs[i]] = x->ndim >= 1 && x->dims[0] == N;
        if (!batched[g->inputs[i]]) *why = "an input without the batch along dim 0", ok = false;
    }
    for (int i = 0; i < g->n_nodes && ok; i++) {
        const qf_node *n = &g->nodes[i];
        if (n->n_out < 1 || n->out[0] < 0) continue;
        const char *reason = NULL;
        ok = node_keeps_images(g, n, batched, &reason);
        for (int k = 0; k < n->n_out && ok; k++) {
            const qf_value *y = n->out[k] >= 0 ? &g->values[n->out[k]] : NULL;
            if (y && (y->ndim < 1 || y->dims[0] != N)) ok = false, reason = "changes dim 0";
            if (y) batched[n->out[k]] = true;
        }
        if (!ok) {
            static _Thread_local char buf[256];
            snprintf(buf, sizeof buf, "%s %s %s", qf_op_name(n->op), n->name, reason ? reason : "mixes images");
            *why = buf;
        }
    }
    for (int i = 0; i < g->n_outputs && ok; i++) {
        if (!batched[g->outputs[i]] || g->values[g->outputs[i]].producer < 0)
            *why = "an output that no node computes from the images", ok = false;
        for (int k = 0; k < i && ok; k++) /* each output is its own buffer of the batch */
            if (g->outputs[k] == g->outputs[i]) *why = "an output listed twice", ok = false;
    }
    free(batched);
    return ok;
}

qf_status qfi_cpu_batch_view(const qf_graph *g, int images, qf_graph *view)
{
    *view = *g;
    view->values = qfi_calloc((size_t)g->n_values + 1, sizeof *view->values);
    if (!view->values) return qf_error(QF_ERR_NOMEM, "out of memory slicing the batch");
    memcpy(view->values, g->values, (size_t)g->n_values * sizeof *view->values);
    view->cap_values = g->n_values;
    view->batch = images;
    /* qfi_cpu_images_independent: every activation holds the batch along dim 0 */
    for (int v = 0; v < g->n_values; v++)
        if (!(g->values[v].flags & QF_VALUE_CONST) && g->values[v].ndim >= 1 && g->values[v].dims[0] == g->batch)
            view->values[v].dims[0] = images;
    return QF_OK;
}
