/* The epilogue fusion planner (lib/fusion.h): walks each anchor's chain of
 * sole readers -- bias Add, residual Add, Relu, Clip, a smooth activation --
 * and asks the caller's rules about every link. What a link needs of the
 * graph (one reader, or SiLU's two; the Add's other operand, Clip's bounds)
 * is worked out here, once. */
#include "fusion.h"
#include "ops/tensor_ops.h"

typedef struct planner {
    const qf_graph *g;
    const qfi_fusion_rules *r;
    qfi_fusion *f;
    int n;
    int *readers;  /* per value: input edges that read it, +1 for a graph output */
    int *reader;   /* per value: the last node that reads it */
    int *first;    /* per value: the first node that reads it, or -1 */
    int *chain;    /* per value: the chain it ends, or -1 */
    int *born;     /* per value: the node that writes it once the planned fusions are applied */
    int *absorbed; /* per node: the chain it joined, or -1 */
} planner;

/* The node that alone reads v and joined no chain yet, or -1. */
static int sole_reader(const planner *P, int v)
{
    if (v < 0 || P->readers[v] != 1 || (P->g->values[v].flags & QF_VALUE_OUTPUT)) return -1;
    int j = P->reader[v];
    return P->absorbed[j] < 0 ? j : -1;
}

/* Offers chain fi the link c; on acceptance the chain grows by c->node. */
static bool offer(planner *P, int fi, qfi_fuse_candidate *c)
{
    qfi_fusion *f = &P->f[fi];
    if (!P->r->accept(P->r->user, P->g, f, c)) return false;
    const int j = (int)(c->node - P->g->nodes), y = c->node->out[0];
    f->node[c->link] = j;
    if (c->link == QFI_FUSE_BIAS) f->bias = c->other;
    if (c->link == QFI_FUSE_RESIDUAL) f->residual = c->other;
    if (c->link == QFI_FUSE_CLIP) f->clip_lo = c->lo, f->clip_hi = c->hi;
    if (c->link == QFI_FUSE_ACT) f->act = c->act;
    if (c->gate) {
        const int k = (int)(c->gate - P->g->nodes);
        f->node[QFI_FUSE_GATE] = k;
        P->absorbed[k] = fi;
    }
    P->chain[f->out] = -1;
    P->chain[y] = fi;
    P->born[y] = f->anchor;
    P->absorbed[j] = fi;
    f->out = y;
    f->last = j;
    return true;
}

/* The other input of a two-input Add that reads v, or -1. */
static int add_other(const qf_node *n, int v)
{
    if (n->op != QF_OP_ADD || n->n_in != 2) return -1;
    return n->in[0] == v ? n->in[1] : n->in[0];
}

static void try_bias(planner *P, int fi)
{
    const int j = sole_reader(P, P->f[fi].out);
    if (j < 0) return;
    const qf_node *n = &P->g->nodes[j];
    const int o = add_other(n, P->f[fi].out);
    if (o < 0 || !(P->g->values[o].flags & QF_VALUE_CONST)) return;
    qfi_fuse_candidate c = {.link = QFI_FUSE_BIAS, .node = n, .other = o};
    offer(P, fi, &c);
}

/* x * HardSigmoid(x) is HardSwish only at HardSwish's own constants. */
static bool hard_swish_gate(const qf_node *n)
{
    const qfi_unary_params *p = n->params;
    return p && p->alpha == 1.0f / 6.0f && p->beta == 0.5f;
}

/* The smooth activation of the chain's end v: its sole reader Sigmoid,
 * HardSwish or Gelu, or Mul(v, g) (either order) with g = Sigmoid(v) or HardSigmoid(v),
 * the two nodes v's only readers and the Mul g's only one (PyTorch's SiLU and
 * older HardSwish exports). */
static void try_smooth(planner *P, int fi)
{
    const qf_graph *g = P->g;
    const int v = P->f[fi].out;
    qfi_fuse_candidate c = {.link = QFI_FUSE_ACT};
    const int j = sole_reader(P, v);
    if (j >= 0) {
        c.node = &g->nodes[j];
        if (c.node->op == QF_OP_SIGMOID) c.act = QF_ACT_SIGMOID;
        else if (c.node->op == QF_OP_HARD_SWISH) c.act = QF_ACT_HARD_SWISH;
        else if (c.node->op == QF_OP_GELU) /* the transformers' MLP: Linear, GELU, Linear */
            c.act = ((const qfi_unary_params *)c.node->params)->tanh_approx ? QF_ACT_GELU_TANH : QF_ACT_GELU;
        else return;
        offer(P, fi, &c);
        return;
    }
    if (P->readers[v] != 2 || (g->values[v].flags & QF_VALUE_OUTPUT)) return;
    int s = P->first[v], m = P->reader[v];
    if (s == m || P->absorbed[s] >= 0 || P->absorbed[m] >= 0) return; /* Mul(v, v) reads v twice */
    if (g->nodes[s].op == QF_OP_MUL) {
        const int t = s;
        s = m;
        m = t;
    }
    const qf_node *gate = &g->nodes[s], *mul = &g->nodes[m];
    if (mul->op != QF_OP_MUL || mul->n_in != 2 || gate->n_in != 1 || gate->n_out < 1) return;
    const int gv = gate->out[0];
    if (gv < 0 || sole_reader(P, gv) != m || !((mul->in[0] == v && mul->in[1] == gv) || (mul->in[0] == gv && mul->in[1] == v)))
        return;
    if (gate->op == QF_OP_SIGMOID) c.act = QF_ACT_SILU;
    else if (gate->op == QF_OP_HARD_SIGMOID && hard_swish_gate(gate)) c.act = QF_ACT_HARD_SWISH;
    else return;
    c.node = mul;
    c.gate = gate;
    offer(P, fi, &c);
}

/* Relu, then Clip, then a smooth activation, after the chain's end. */
static void try_activations(planner *P, int fi)
{
    int j = sole_reader(P, P->f[fi].out);
    if (j >= 0 && P->g->nodes[j].op == QF_OP_RELU) {
        qfi_fuse_candidate c = {.link = QFI_FUSE_RELU, .node = &P->g->nodes[j]};
        offer(P, fi, &c);
    }
    j = sole_reader(P, P->f[fi].out);
    if (j >= 0 && P->g->nodes[j].op == QF_OP_CLIP) {
        qfi_fuse_candidate c = {.link = QFI_FUSE_CLIP, .node = &P->g->nodes[j]};
        /* bounds it cannot give: the Clip's own kernel reports them */
        if (qfi_clip_bounds(P->g, c.node, &c.lo, &c.hi) == QF_OK) offer(P, fi, &c);
    }
    try_smooth(P, fi);
}

/* Add a: the chains that end at one of its inputs are offered it as their
 * residual, the earlier anchor first; the first that accepts it wins. */
static void try_residual(planner *P, int a)
{
    const qf_node *n = &P->g->nodes[a];
    if (n->op != QF_OP_ADD || n->n_in != 2 || P->absorbed[a] >= 0) return;
    int cand[2], nc = 0;
    for (int k = 0; k < 2; k++) {
        const int v = n->in[k], o = n->in[1 - k];
        if (v < 0 || o < 0 || P->chain[v] < 0 || sole_reader(P, v) != a) continue;
        if (P->f[P->chain[v]].node[QFI_FUSE_RESIDUAL] >= 0 || (P->g->values[o].flags & QF_VALUE_CONST)) continue;
        cand[nc++] = P->chain[v];
    }
    if (nc == 2 && P->f[cand[0]].anchor > P->f[cand[1]].anchor) {
        int t = cand[0];
        cand[0] = cand[1];
        cand[1] = t;
    }
    for (int k = 0; k < nc; k++) {
        const int fi = cand[k], o = add_other(n, P->f[fi].out);
        qfi_fuse_candidate c = {.link = QFI_FUSE_RESIDUAL, .node = n, .other = o, .other_born = P->born[o]};
        if (offer(P, fi, &c)) {
            try_activations(P, fi);
            return;
        }
    }
}

qf_status qfi_fusion_plan(const qf_graph *g, const qfi_fusion_rules *rules, qfi_fusion **out, int *n_out)
{
    *out = NULL;
    *n_out = 0;
    planner P = {.g = g, .r = rules};
    const size_t nv = (size_t)g->n_values + 1, nn = (size_t)g->n_nodes + 1;
    P.f = qfi_calloc(nn, sizeof *P.f);
    P.readers = qfi_calloc(nv, sizeof *P.readers);
    P.reader = qfi_calloc(nv, sizeof *P.reader);
    P.first = qfi_calloc(nv, sizeof *P.first);
    P.chain = qfi_calloc(nv, sizeof *P.chain);
    P.born = qfi_calloc(nv, sizeof *P.born);
    P.absorbed = qfi_calloc(nn, sizeof *P.absorbed);
    qf_status st = QF_OK;
    if (!P.f || !P.readers || !P.reader || !P.first || !P.chain || !P.born || !P.absorbed) {
        st = QF_ERR_NOMEM;
        goto out;
    }
    for (int v = 0; v < g->n_values; v++) {
        P.chain[v] = P.first[v] = -1;
        P.born[v] = g->values[v].producer;
        P.readers[v] = (g->values[v].flags & QF_VALUE_OUTPUT) != 0;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        P.absorbed[i] = -1;
        for (int k = 0; k < g->nodes[i].n_in; k++) {
            const int v = g->nodes[i].in[k];
            if (v < 0) continue;
            P.readers[v]++;
            P.reader[v] = i;
            if (P.first[v] < 0) P.first[v] = i;
        }
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const qf_node *n = &g->nodes[i];
        if ((n->op != QF_OP_CONV && n->op != QF_OP_GEMM && n->op != QF_OP_MATMUL) || n->n_out < 1 || n->out[0] < 0 ||
            !rules->anchor(rules->user, g, i))
            continue;
        qfi_fusion *f = &P.f[P.n];
        f->anchor = f->last = i;
        for (int l = 0; l < QFI_FUSE_LINK_COUNT; l++) f->node[l] = -1;
        f->bias = f->residual = -1;
        f->out = n->out[0];
        P.chain[f->out] = P.n++;
        try_bias(&P, P.n - 1);
    }
    for (int a = 0; a < g->n_nodes; a++) try_residual(&P, a);
    for (int fi = 0; fi < P.n; fi++)
        if (P.f[fi].node[QFI_FUSE_RESIDUAL] < 0) try_activations(&P, fi);
    *out = P.f;
    *n_out = P.n;
    P.f = NULL;
out:
    free(P.f);
    free(P.readers);
    free(P.reader);
    free(P.first);
    free(P.chain);
    free(P.born);
    free(P.absorbed);
    return st;
}
