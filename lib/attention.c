/* Finding attention chains (attention.h) in a graph, and the bias table
 * both engines' fused kernels read. */
#include "attention.h"
#include "ops/nn.h"
#include "ops/tensor_ops.h"

/* The one reader of value v, or NULL (several, none, or v is a graph output). */
static const qf_node *only_reader(const qf_graph *g, int v)
{
    if (g->values[v].flags & QF_VALUE_OUTPUT) return NULL;
    const qf_node *found = NULL;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] == v) {
                if (found) return NULL;
                found = &g->nodes[i];
            }
    return found;
}

static bool is_half(const qf_value *v) { return v->dtype == QF_F16; }
/* int8 with a per-tensor scale: what an FP16 node reads dequantized (timm's
 * DeiT: the scalar Muls read the int8 Q and K that its Split made) */
static bool is_i8q(const qf_value *v) { return v->dtype == QF_I8 && v->scale > 0.0f; }

/* The matrices' batch dims: all but the last two, the same for a and b. */
static bool same_batch(const qf_value *a, const qf_value *b)
{
    if (a->ndim != b->ndim || a->ndim < 3) return false;
    for (int d = 0; d < a->ndim - 2; d++)
        if (a->dims[d] != b->dims[d]) return false;
    return true;
}

/* n runs at precision prec and the engine's rules take it */
static bool node_ok_at(const qf_graph *g, const qfi_attention_rules *r, const qf_node *n, qf_precision prec)
{
    return n->precision == prec && (!r || !r->node || r->node(r->user, g, (int)(n - g->nodes)));
}
static bool node_ok(const qf_graph *g, const qfi_attention_rules *r, const qf_node *n)
{
    return node_ok_at(g, r, n, QF_PREC_FP16);
}

/* Whether the fused kernel at node `first` can read v. */
static bool operand_ok(const qf_graph *g, const qfi_attention_rules *r, int v, int first)
{
    if (r && r->operand) return r->operand(r->user, g, v, first);
    const qf_value *val = &g->values[v];
    return (val->flags & (QF_VALUE_CONST | QF_VALUE_INPUT)) || (val->producer >= 0 && val->producer < first);
}

/* An Add of `cur` (the scores, dims of x) and a bias operand, as ch's next bias. */
static bool take_bias(const qf_graph *g, const qfi_attention_rules *r, const qf_node *m, int cur, int first,
                      qfi_attention_chain *ch)
{
    const int other = m->in[0] == cur ? m->in[1] : m->in[0];
    const qf_value *x = &g->values[cur], *y = qfi_out(g, m, 0), *o = &g->values[other];
    if (m->in[0] == m->in[1] || ch->n_bias == QFI_ATTN_MAX_BIAS || y->ndim > QFI_ATTN_MAX_DIMS ||
        y->dims[y->ndim - 1] != ch->N || o->ndim > y->ndim ||
        (!is_half(o) && !(o->dtype == QF_F32 && (o->flags & QF_VALUE_CONST))) || !operand_ok(g, r, other, first))
        return false;
    if (x->ndim != y->ndim || memcmp(x->dims, y->dims, (size_t)x->ndim * sizeof(int64_t)))
        return false; /* the scores themselves are not broadcast */
    for (int d = 0; d < o->ndim; d++) {
        const int64_t od = o->dims[d], yd = y->dims[y->ndim - o->ndim + d];
        if (od != 1 && od != yd) return false;
    }
    qfi_attention_bias *b = &ch->bias[ch->n_bias++];
    int64_t st[QFI_ATTN_MAX_DIMS];
    qfi_broadcast_strides(o->ndim, o->dims, y->ndim, y->dims, st);
    b->value = other;
    b->nd = y->ndim - 1;
    for (int d = 0; d < b->nd; d++) b->dims[d] = y->dims[d], b->strides[d] = st[d];
    b->col_stride = st[y->ndim - 1];
    return true;
}

/* The value read through a scalar Mul: when v's only reader is node
 * `reader` and v is an FP16 Mul of a half (or dequantized int8) value by a
 * one-element constant, that value, with the constant multiplied into
 * *scale and the Mul added to ch's pre-nodes; else v. */
static int through_scale(const qf_graph *g, const qfi_attention_rules *r, int v, const qf_node *reader, float *scale,
                         qfi_attention_chain *ch, bool i8)
{
    const int p = g->values[v].producer;
    if (p < 0 || only_reader(g, v) != reader || ch->n_pre == QFI_ATTN_MAX_PRE) return v;
    const qf_node *m = &g->nodes[p];
    if (m->op != QF_OP_MUL || m->n_in != 2 || m->n_out != 1 || m->in[0] < 0 || m->in[1] < 0 || !node_ok(g, r, m) ||
        !is_half(&g->values[v]))
        return v;
    for (int k = 0; k < 2; k++) {
        const qf_value *c = qfi_in(g, m, k), *x = qfi_in(g, m, 1 - k);
        if (!(c->flags & QF_VALUE_CONST) || !c->data || qf_value_numel(c) != 1 || !(is_half(x) || (i8 && is_i8q(x))) ||
            qf_value_numel(x) != qf_value_numel(&g->values[v]))
            continue;
        float f;
        if (c->dtype == QF_F16) f = qf_f16_to_f32(*(const uint16_t *)c->data);
        else if (c->dtype == QF_F32) f = *(const float *)c->data;
        else continue;
        *scale *= f;
        ch->pre[ch->n_pre++] = p;
        return m->in[1 - k];
    }
    return v;
}

/* K when v (K^T, r dims) is its only reader's Transpose of the last two
 * dims of a half (or int8) value; the Transpose is added to ch's pre-nodes.
 * Else -1. */
static int through_transpose(const qf_graph *g, const qfi_attention_rules *r, int v, const qf_node *reader,
                             qfi_attention_chain *ch, bool i8)
{
    const int p = g->values[v].producer;
    if (p < 0 || only_reader(g, v) != reader || ch->n_pre == QFI_ATTN_MAX_PRE) return -1;
    const qf_node *t = &g->nodes[p];
    if (t->op != QF_OP_TRANSPOSE || t->n_in != 1 || t->in[0] < 0 || t->n_out != 1) return -1;
    const qf_value *x = qfi_in(g, t, 0);
    /* an int8 K's Transpose is an INT8 node (it moves levels) */
    if (!(node_ok(g, r, t) || (i8 && is_i8q(x) && node_ok_at(g, r, t, QF_PREC_INT8)))) return -1;
    const qfi_transpose_params *tp = (const qfi_transpose_params *)t->params;
    const int rank = g->values[v].ndim;
    if (!(is_half(x) || (i8 && is_i8q(x))) || x->ndim != rank || rank < 2 || !tp ||
        (tp->n_perm != rank && !(tp->n_perm == 0 && rank == 2)))
        return -1;
    for (int d = 0; d < tp->n_perm; d++)
        if (tp->perm[d] != (d < rank - 2 ? d : d == rank - 2 ? rank - 1 : rank - 2)) return -1;
    ch->pre[ch->n_pre++] = p;
    return t->in[0];
}

/* ---- operands read through views ---------------------------------------------------------- */

/* A value's elements as a walk of its root: offset plus, for each atom in
 * order, its index times its stride; value dim k is atoms first[k] ..
 * first[k + 1] - 1 (row-major: the last atom moves fastest). */
enum { MAX_ATOMS = 16 };
typedef struct vview {
    int64_t offset;
    int n_atoms, ndim;
    int64_t size[MAX_ATOMS], stride[MAX_ATOMS];
    int first[QF_MAX_DIMS + 1];
} vview;

static void view_init(vview *w, const qf_value *v)
{
    memset(w, 0, sizeof *w);
    w->ndim = v->ndim;
    int64_t st = 1;
    for (int k = v->ndim - 1; k >= 0; k--) w->stride[k] = st, st *= v->dims[k];
    for (int k = 0; k < v->ndim; k++) w->size[k] = v->dims[k], w->first[k] = k;
    w->n_atoms = w->first[v->ndim] = v->ndim;
}

/* The same elements as dims[0 .. nd) in row-major order: atoms regrouped,
 * one split where a new dim ends inside it. False where that cannot be. */
static bool view_reshape(vview *w, int nd, const int64_t *dims)
{
    vview r;
    memset(&r, 0, sizeof r);
    r.offset = w->offset;
    r.ndim = nd;
    int a = 0;
    int64_t left = w->n_atoms ? w->size[0] : 1; /* of atom a, not yet taken */
    for (int k = 0; k < nd; k++) {
        r.first[k] = r.n_atoms;
        for (int64_t need = dims[k]; need > 1;) {
            while (a < w->n_atoms && left == 1) left = ++a < w->n_atoms ? w->size[a] : 1;
            if (a == w->n_atoms || r.n_atoms == MAX_ATOMS) return false;
            const int64_t take = need < left ? need : left;
            if (left % take || need % take) return false;
            left /= take;
            r.size[r.n_atoms] = take;
            r.stride[r.n_atoms++] = w->stride[a] * left;
            need /= take;
        }
    }
    r.first[nd] = r.n_atoms;
    while (a < w->n_atoms && left == 1) left = ++a < w->n_atoms ? w->size[a] : 1;
    if (a != w->n_atoms) return false;
    *w = r;
    return true;
}

static void view_transpose(vview *w, const qfi_transpose_params *tp)
{
    vview r = *w;
    r.n_atoms = 0;
    for (int k = 0; k < w->ndim; k++) {
        const int from = tp->n_perm ? (int)tp->perm[k] : w->ndim - 1 - k;
        r.first[k] = r.n_atoms;
        for (int a = w->first[from]; a < w->first[from + 1]; a++)
            r.size[r.n_atoms] = w->size[a], r.stride[r.n_atoms++] = w->stride[a];
    }
    r.first[w->ndim] = r.n_atoms;
    *w = r;
}

/* Gather of index `at` along `axis`: that dim's atoms become an offset;
 * keep: the dim stays, of one element (a one-element index tensor). */
static void view_pick(vview *w, int axis, int64_t at, bool keep)
{
    for (int a = w->first[axis + 1] - 1; a >= w->first[axis]; a--) {
        w->offset += at % w->size[a] * w->stride[a];
        at /= w->size[a];
    }
    const int drop = w->first[axis + 1] - w->first[axis];
    for (int a = w->first[axis]; a + drop < w->n_atoms; a++)
        w->size[a] = w->size[a + drop], w->stride[a] = w->stride[a + drop];
    w->n_atoms -= drop;
    for (int k = axis + 1; k <= w->ndim; k++) w->first[k] -= drop;
    if (!keep) {
        for (int k = axis; k < w->ndim; k++) w->first[k] = w->first[k + 1];
        w->ndim--;
    }
}

/* Elements [start, start + len) along `axis` (a Split's output): the dim's
 * outermost atom sliced, where the atoms inside it hold whole steps. */
static bool view_slice(vview *w, int axis, int64_t start, int64_t len)
{
    const int a0 = w->first[axis], a1 = w->first[axis + 1];
    if (a0 == a1) return start == 0 && len == 1; /* a dim of one element */
    int64_t inner = 1;
    for (int a = a0 + 1; a < a1; a++) inner *= w->size[a];
    if (start % inner || len % inner) return false;
    w->offset += start / inner * w->stride[a0];
    w->size[a0] = len / inner;
    return true;
}

/* Atoms a .. b - 1 merged where one continues the next; how many remain,
 * into size/stride. */
static int view_merge(const vview *w, int a, int b, int64_t *size, int64_t *stride, int max)
{
    int n = 0;
    for (int k = a; k < b; k++) {
        if (w->size[k] == 1) continue;
        if (n && stride[n - 1] == w->stride[k] * w->size[k]) {
            size[n - 1] *= w->size[k];
            stride[n - 1] = w->stride[k];
        } else {
            if (n == max) return max + 1;
            size[n] = w->size[k], stride[n++] = w->stride[k];
        }
    }
    return n;
}

/* The operand's view (dims [lead..., R, D]) from w: rows of consecutive
 * elements, one stride between rows, at most QFI_ATTN_MAX_LEAD batch atoms. */
static bool view_of_operand(const vview *w, qfi_attention_view *out)
{
    const int r = w->ndim;
    int64_t sz[QFI_ATTN_MAX_LEAD + 1], st[QFI_ATTN_MAX_LEAD + 1];
    if (view_merge(w, w->first[r - 1], w->first[r], sz, st, 1) != 1 || st[0] != 1) return false;
    const int rows = view_merge(w, w->first[r - 2], w->first[r - 1], sz, st, 1);
    if (rows > 1) return false;
    out->row_stride = rows ? st[0] : 0;
    const int lead = view_merge(w, 0, w->first[r - 2], sz, st, QFI_ATTN_MAX_LEAD);
    if (lead > QFI_ATTN_MAX_LEAD) return false;
    out->offset = w->offset;
    out->n_lead = lead;
    for (int k = 0; k < lead; k++) out->lead_dims[k] = sz[k], out->lead_strides[k] = st[k];
    return true;
}

/* An int8 operand (what the scalar Muls read) read dequantized by its own
 * scale and zero point; other operands as they are. */
static void view_dequantized(qfi_attention_view *w, const qf_value *v)
{
    if (is_i8q(v)) w->int8 = true, w->scale = v->scale, w->zero_point = v->zero_point;
}

/* A node that only moves elements (or, once, dequantizes them per tensor
 * into halves), its data input 0, that a view can take in; y: the output
 * the walk came through (one of a Split's). */
static bool view_node(const qf_graph *g, const qfi_attention_rules *r, const qf_node *n, const qf_value *y, bool *dq)
{
    *dq = false;
    if ((n->n_out != 1 && n->op != QF_OP_SPLIT) || n->n_in < 1 || n->in[0] < 0 ||
        (r && r->node && !r->node(r->user, g, (int)(n - g->nodes))))
        return false;
    const qf_value *x = qfi_in(g, n, 0);
    switch (n->op) {
    case QF_OP_SPLIT:
    case QF_OP_RESHAPE:
    case QF_OP_FLATTEN:
    case QF_OP_SQUEEZE:
    case QF_OP_UNSQUEEZE:
    case QF_OP_TRANSPOSE: return x->dtype == y->dtype && (x->dtype == QF_F16 || x->dtype == QF_I8);
    case QF_OP_GATHER: {
        const qf_value *ix = qfi_in(g, n, 1);
        return x->dtype == y->dtype && (x->dtype == QF_F16 || x->dtype == QF_I8) && ix && (ix->flags & QF_VALUE_CONST) &&
               ix->data && qf_value_numel(ix) == 1 && ix->ndim <= 1 && (ix->dtype == QF_I64 || ix->dtype == QF_I32);
    }
    case QF_OP_DEQUANTIZE_LINEAR: {
        const qf_value *sc = qfi_in(g, n, 1);
        *dq = true;
        return x->dtype == QF_I8 && y->dtype == QF_F16 && (!sc || qf_value_numel(sc) == 1);
    }
    default: return false;
    }
}

/* The view of path[n - 1] .. path[0] applied to the root (path[n - 1]'s
 * input); outv[k]: the value node path[k] makes on the way. An int8
 * operand without a DequantizeLinear on its walk is read dequantized by
 * its own scale and zero point (the pass nodes keep the root's). */
static bool view_along(const qf_graph *g, const int *path, const int *outv, int n, qfi_attention_view *out)
{
    vview w;
    view_init(&w, qfi_in(g, &g->nodes[path[n - 1]], 0));
    out->int8 = false;
    for (int k = n - 1; k >= 0; k--) {
        const qf_node *m = &g->nodes[path[k]];
        const qf_value *y = &g->values[outv[k]];
        if (m->op == QF_OP_SPLIT) {
            const qfi_split_params *sp = (const qfi_split_params *)m->params;
            int64_t start = 0;
            int j = 0;
            while (j < m->n_out && m->out[j] != outv[k]) start += qfi_out(g, m, j++)->dims[sp->norm];
            if (j == m->n_out || !view_slice(&w, sp->norm, start, y->dims[sp->norm])) return false;
        } else if (m->op == QF_OP_TRANSPOSE) {
            view_transpose(&w, (const qfi_transpose_params *)m->params);
        } else if (m->op == QF_OP_GATHER) {
            const qf_value *x = qfi_in(g, m, 0), *ix = qfi_in(g, m, 1);
            int64_t axis = qfi_attr_int(m, "axis", 0), at = ix->dtype == QF_I64 ? *(const int64_t *)ix->data : *(const int32_t *)ix->data;
            if (axis < 0) axis += x->ndim;
            if (at < 0) at += x->dims[axis];
            if (axis < 0 || axis >= x->ndim || at < 0 || at >= x->dims[axis]) return false;
            view_pick(&w, (int)axis, at, ix->ndim == 1);
        } else if (m->op == QF_OP_DEQUANTIZE_LINEAR) {
            qfi_qdq_geom geo;
            if (qfi_qdq_geometry(g, m, &geo) != QF_OK || geo.channels != 1) return false;
            out->int8 = true, out->scale = geo.s1, out->zero_point = geo.z1;
        } else if (!view_reshape(&w, y->ndim, y->dims)) {
            return false;
        }
        if (w.ndim != y->ndim) return false;
    }
    if (!out->int8) view_dequantized(out, &g->values[outv[0]]);
    return view_of_operand(&w, out);
}

/* Whether every reader of `node`'s outputs is a node the chain takes (a graph output: no). */
static bool readers_taken(const qf_graph *g, int node, const char *taken)
{
    for (int o = 0; o < g->nodes[node].n_out; o++) {
        const int v = g->nodes[node].out[o];
        if (v < 0) continue;
        if (g->values[v].flags & QF_VALUE_OUTPUT) return false;
        for (int i = 0; i < g->n_nodes; i++)
            for (int k = 0; k < g->nodes[i].n_in; k++)
                if (g->nodes[i].in[k] == v && !taken[i]) return false;
    }
    return true;
}

/* Takes the views of Q, K (K^T only where the chain reads K's rows) and V
 * into ch: for each, the longest walk back through view_node nodes whose
 * outputs only the chain reads (a node the operands share, such as the
 * in-projection's split, only where all three take it), with a view the
 * kernels can read. Where none is, the operand stays as it is. */
static void take_views(const qf_graph *g, const qfi_attention_rules *r, qfi_attention_chain *ch)
{
    enum { MAXP = 12 };
    int path[3][MAXP], outv[3][MAXP], len[3] = {0, 0, 0};
    int *const value[3] = {&ch->q, &ch->kt, &ch->v};
    for (int o = 0; o < 3; o++) {
        if (o == QFI_ATTN_K && !ch->k_rows) continue;
        int v = *value[o];
        bool dq_seen = false, dq;
        while (len[o] < MAXP && g->values[v].producer >= 0) {
            const qf_node *n = &g->nodes[g->values[v].producer];
            if (!view_node(g, r, n, &g->values[v], &dq) || (dq && dq_seen)) break;
            dq_seen |= dq;
            outv[o][len[o]] = v;
            path[o][len[o]++] = (int)(n - g->nodes);
            v = n->in[0];
        }
    }
    char *taken = qfi_calloc((size_t)g->n_nodes + 1, 1);
    if (!taken) return; /* no views: the chain as it was */
    for (bool changed = true; changed;) {
        changed = false;
        memset(taken, 0, (size_t)g->n_nodes);
        taken[ch->first] = 1;
        for (int k = 0; k < ch->n_nodes; k++) taken[ch->nodes[k]] = 1;
        for (int k = 0; k < ch->n_pre; k++) taken[ch->pre[k]] = 1;
        for (int o = 0; o < 3; o++)
            for (int k = 0; k < len[o]; k++) taken[path[o][k]] = 1;
        for (int o = 0; o < 3; o++) {
            for (int k = 0; k < len[o]; k++)
                if (!readers_taken(g, path[o][k], taken)) {
                    len[o] = k; /* path[o][k] runs: its output is the root */
                    changed = true;
                    break;
                }
            qfi_attention_view w;
            if (len[o] && (!view_along(g, path[o], outv[o], len[o], &w) ||
                           !operand_ok(g, r, g->nodes[path[o][len[o] - 1]].in[0], ch->first)))
                len[o] = 0, changed = true;
        }
    }
    free(taken);
    int n_new = 0;
    for (int o = 0; o < 3; o++) n_new += len[o];
    if (ch->n_pre + n_new > QFI_ATTN_MAX_PRE) return;
    for (int o = 0; o < 3; o++) {
        if (!len[o]) continue;
        view_along(g, path[o], outv[o], len[o], &ch->view[o]);
        *value[o] = g->nodes[path[o][len[o] - 1]].in[0];
        for (int k = 0; k < len[o]; k++) {
            bool dup = false;
            for (int j = 0; j < ch->n_pre; j++) dup |= ch->pre[j] == path[o][k];
            if (!dup) ch->pre[ch->n_pre++] = path[o][k];
        }
    }
}

/* The plain view of an operand: nb matrices of `rows` rows of D, one after another. */
static void plain_view(qfi_attention_view *w, int64_t nb, int64_t rows, int64_t D)
{
    memset(w, 0, sizeof *w);
    w->n_lead = 1;
    w->lead_dims[0] = nb, w->lead_strides[0] = rows * D;
    w->row_stride = D;
}

int64_t qfi_attention_view_row(const qfi_attention_view *w, int64_t b, int64_t i)
{
    int64_t off = w->offset + i * w->row_stride;
    for (int k = w->n_lead - 1; k >= 0; k--) {
        const int64_t q = b / w->lead_dims[k];
        off += (b - q * w->lead_dims[k]) * w->lead_strides[k];
        b = q;
    }
    return off;
}

/* i8: the scalar Muls and K's Transpose may read int8 Q and K (then the
 * chain must read all three from int8 roots) */
static bool match(const qf_graph *g, int first, const qfi_attention_rules *rules, qfi_attention_chain *ch, bool i8)
{
    const qf_node *n = &g->nodes[first];
    memset(ch, 0, sizeof *ch);
    if (n->op != QF_OP_MATMUL || n->n_in != 2 || n->in[0] < 0 || n->in[1] < 0 || !node_ok(g, rules, n)) return false;
    ch->first = first;
    ch->scale = 1.0f;
    /* Q and K^T, or what the exporter's scalar Muls and K's Transpose read */
    ch->q = through_scale(g, rules, n->in[0], n, &ch->scale, ch, i8);
    ch->kt = through_scale(g, rules, n->in[1], n, &ch->scale, ch, i8);
    const int k_in = through_transpose(g, rules, ch->kt, ch->kt == n->in[1] ? n : &g->nodes[ch->pre[ch->n_pre - 1]], ch, i8);
    if (k_in >= 0) ch->kt = k_in, ch->k_rows = true;
    const qf_value *q = &g->values[ch->q], *kt = &g->values[ch->kt], *s = qfi_out(g, n, 0);
    if (!(is_half(q) || is_i8q(q)) || !(is_half(kt) || is_i8q(kt)) || !is_half(s) || !same_batch(q, kt) ||
        q->ndim > QFI_ATTN_MAX_DIMS)
        return false;
    const int r = q->ndim;
    ch->M = q->dims[r - 2], ch->D = q->dims[r - 1], ch->N = kt->dims[ch->k_rows ? r - 2 : r - 1];
    ch->nb = qfi_numel(r - 2, q->dims);
    if (kt->dims[ch->k_rows ? r - 1 : r - 2] != ch->D || (ch->D != 32 && ch->D != 64 && ch->D != 128) || ch->M < 1 || ch->N < 1 ||
        ch->nb > INT32_MAX / ch->M || !operand_ok(g, rules, ch->q, first) ||
        !operand_ok(g, rules, ch->kt, first))
        return false;
    /* the scores' flat order is (batch, query, key) whatever Reshapes view
     * them as, so each Add's operand is found from a row index and a key */
    int cur = n->out[0];
    bool softmax = false;
    for (;;) {
        const qf_node *m = only_reader(g, cur);
        if (!m || ch->n_nodes == QFI_ATTN_MAX_NODES || m->n_out != 1 || !node_ok(g, rules, m)) return false;
        const qf_value *x = &g->values[cur], *y = qfi_out(g, m, 0);
        if (!is_half(y)) return false;
        if (m->op == QF_OP_RESHAPE) {
            if (y->ndim < 1 || y->dims[y->ndim - 1] != ch->N || qf_value_numel(y) != qf_value_numel(x)) return false;
        } else if (m->op == QF_OP_ADD && !softmax) {
            if (!take_bias(g, rules, m, cur, first, ch)) return false;
        } else if (m->op == QF_OP_SOFTMAX && !softmax) {
            const qfi_softmax_params *p = (const qfi_softmax_params *)m->params;
            const int64_t axis = p->axis < 0 ? p->axis + x->ndim : p->axis;
            if (axis != x->ndim - 1 || x->dims[x->ndim - 1] != ch->N) return false;
            softmax = true;
        } else if (m->op == QF_OP_MATMUL && softmax && m->n_in == 2 && m->in[0] == cur && m->in[1] >= 0) {
            const qf_value *v = qfi_in(g, m, 1);
            if (!is_half(v) || !same_batch(x, v) || x->ndim != r || x->dims[r - 2] != ch->M || v->dims[r - 2] != ch->N ||
                v->dims[r - 1] != ch->D || qfi_numel(r - 2, x->dims) != ch->nb || !operand_ok(g, rules, m->in[1], first))
                return false;
            ch->v = m->in[1];
            ch->out = m->out[0];
            ch->nodes[ch->n_nodes++] = (int)(m - g->nodes);
            plain_view(&ch->view[QFI_ATTN_Q], ch->nb, ch->M, ch->D);
            plain_view(&ch->view[QFI_ATTN_K], ch->nb, ch->N, ch->D);
            plain_view(&ch->view[QFI_ATTN_V], ch->nb, ch->N, ch->D);
            const int operand[3] = {ch->q, ch->kt, ch->v};
            for (int o = 0; o < 3; o++) view_dequantized(&ch->view[o], &g->values[operand[o]]);
            if (!rules || rules->views) {
                const qfi_attention_chain plain = *ch;
                take_views(g, rules, ch);
                if (rules && rules->views_ok && !rules->views_ok(rules->user, ch)) *ch = plain;
            }
            /* int8 Q or K: taken only where all three operands are read
             * from int8 roots (one kind of root, as the CUDA kernel takes
             * them); else the chain starts at the Muls' half outputs */
            const bool all_i8 = ch->view[QFI_ATTN_Q].int8 && ch->view[QFI_ATTN_K].int8 && ch->view[QFI_ATTN_V].int8;
            return all_i8 || (is_half(q) && is_half(kt));
        } else {
            return false;
        }
        ch->nodes[ch->n_nodes++] = (int)(m - g->nodes);
        cur = m->out[0];
    }
}

bool qfi_attention_match(const qf_graph *g, int first, const qfi_attention_rules *rules, qfi_attention_chain *ch)
{
    return match(g, first, rules, ch, true) || match(g, first, rules, ch, false);
}

void qfi_attention_log(const qf_graph *g, const qfi_attention_chain *ch)
{
    qf_log(QF_LOG_DEBUG,
           "%s: attention fused from node %s to %s (%lld x %lld queries, %lld keys, heads of %lld; %d nodes before it "
           "taken in: scores times %g%s)",
           g->source, g->nodes[ch->first].name, g->nodes[ch->nodes[ch->n_nodes - 1]].name, (long long)ch->nb,
           (long long)ch->M, (long long)ch->N, (long long)ch->D, ch->n_pre, (double)ch->scale,
           ch->k_rows ? ", K read by rows" : "");
}

int64_t qfi_attention_bias_row(const qfi_attention_bias *b, int64_t r)
{
    int64_t off = 0;
    for (int d = b->nd - 1; d >= 0; d--) {
        const int64_t q = r / b->dims[d];
        off += (r - q * b->dims[d]) * b->strides[d];
        r = q;
    }
    return off;
}

static int64_t gcd64(int64_t a, int64_t b) { return b ? gcd64(b, a % b) : a; }

qf_status qfi_attention_bias_table(const qf_graph *g, const qfi_attention_chain *ch, uint16_t **table, int64_t *period)
{
    *table = NULL;
    *period = 0;
    if (ch->n_bias < 2) return QF_OK;
    const int64_t max_elems = (int64_t)1 << 24;
    int64_t per = 1;
    for (int k = 0; k < ch->n_bias; k++) {
        const qfi_attention_bias *b = &ch->bias[k];
        const qf_value *bv = &g->values[b->value];
        if (!(bv->flags & QF_VALUE_CONST) || !bv->data) return QF_OK;
        int64_t pk = 1, span = 1;
        for (int d = b->nd - 1; d >= 0; d--) { /* span saturates past 2^24 (dims are below 2^31) */
            span = span * b->dims[d] > max_elems ? max_elems + 1 : span * b->dims[d];
            if (b->strides[d]) pk = span;
        }
        if (pk > max_elems) return QF_OK; /* (and per and pk below 2^24: their lcm fits) */
        per = per / gcd64(per, pk) * pk;
        if (per * ch->N > max_elems) return QF_OK;
    }
    uint16_t *t = qfi_calloc((size_t)(per * ch->N) + 1, sizeof *t);
    if (!t) return QF_ERR_NOMEM;
    for (int64_t r = 0; r < per; r++) {
        int64_t at[QFI_ATTN_MAX_BIAS];
        for (int k = 0; k < ch->n_bias; k++) at[k] = qfi_attention_bias_row(&ch->bias[k], r);
        for (int64_t j = 0; j < ch->N; j++) {
            float sum = 0.0f;
            for (int k = 0; k < ch->n_bias; k++) {
                const qf_value *bv = &g->values[ch->bias[k].value];
                const int64_t e = at[k] + j * ch->bias[k].col_stride;
                sum += qf_f16_to_f32(bv->dtype == QF_F16 ? ((const uint16_t *)bv->data)[e]
                                                         : qf_f32_to_f16(((const float *)bv->data)[e]));
            }
            t[r * ch->N + j] = qf_f32_to_f16(sum);
        }
    }
    *table = t;
    *period = per;
    return QF_OK;
}

/* qfi_attention_hoist_operands' matcher: operands anywhere. */
static bool operand_anywhere(void *user, const qf_graph *g, int v, int first)
{
    (void)user, (void)g, (void)v, (void)first;
    return true;
}

/* Whether every input of node n exists before node index `at`. */
static bool inputs_before(const qf_graph *g, const qf_node *n, int at)
{
    for (int k = 0; k < n->n_in; k++)
        if (n->in[k] >= 0 && g->values[n->in[k]].producer >= at) return false;
    return true;
}

qf_status qfi_attention_hoist_operands(qf_graph *g)
{
    const qfi_attention_rules anywhere = {NULL, operand_anywhere, NULL};
    int moved = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        qfi_attention_chain ch;
        if (!qfi_attention_match(g, i, &anywhere, &ch)) continue;
        int operands[1 + QFI_ATTN_MAX_BIAS], n = 0;
        operands[n++] = ch.v;
        for (int k = 0; k < ch.n_bias; k++) operands[n++] = ch.bias[k].value;
        for (int k = 0; k < n; k++) {
            const int p = g->values[operands[k]].producer;
            if (p < i) continue; /* a constant, an input, or made in time */
            const qf_op op = g->nodes[p].op;
            if ((op != QF_OP_DEQUANTIZE_LINEAR && op != QF_OP_QUANTIZE_LINEAR && op != QF_OP_CAST) ||
                !inputs_before(g, &g->nodes[p], i))
                break;
            /* nodes i..p-1 cannot read what p writes (the order is topological) */
            const qf_node conv = g->nodes[p];
            memmove(&g->nodes[i + 1], &g->nodes[i], (size_t)(p - i) * sizeof *g->nodes);
            g->nodes[i] = conv;
            for (int j = i; j <= p; j++)
                for (int o = 0; o < g->nodes[j].n_out; o++)
                    if (g->nodes[j].out[o] >= 0) g->values[g->nodes[j].out[o]].producer = j;
            i++, moved++; /* the chain's first MatMul is one further on */
        }
    }
    if (moved) qf_log(QF_LOG_DEBUG, "%s: %d conversions moved before the attention chains that read them", g->source, moved);
    return QF_OK;
}
