/* Applies a quantization plan (quant/assign.c) to the graph: nodes re-emitted
 * in order with their precision, fused chains replaced by one INT8 node with
 * quantized weights and bias, values relabelled with their storage dtype and
 * scale, and QuantizeLinear / DequantizeLinear / Cast nodes inserted where a
 * reader needs another dtype than the writer stores. Graph inputs and outputs
 * keep their names and f32. */
#include <math.h>
#include "quant_internal.h"
#include "ops/nn.h"

enum { SLOT_F32, SLOT_F16, SLOT_I8, SLOT_COUNT };

static int slot_of(qf_dtype dt) { return dt == QF_F16 ? SLOT_F16 : dt == QF_I8 ? SLOT_I8 : SLOT_F32; }

typedef struct rw {
    qfi_qplan *p;
    qf_graph *g;
    int *stored;            /* per planned value: the value its writer writes */
    int *as[SLOT_COUNT];    /* per planned value: its f32 / f16 / i8 version, -1 until made */
} rw;

static int add_value_like(qf_graph *g, int v, const char *suffix, qf_dtype dt)
{
    char name[1024];
    snprintf(name, sizeof name, "%s/%s", g->values[v].name, suffix);
    int64_t dims[QF_MAX_DIMS];
    int nd = g->values[v].ndim;
    memcpy(dims, g->values[v].dims, sizeof dims);
    return qf_graph_add_value(g, name, dt, nd, dims);
}

int qfi_quant_add_const(qf_graph *g, const char *name, qf_dtype dt, int like, int64_t n, void *data)
{
    /* copied first: adding a value may move g->values */
    int64_t dims[QF_MAX_DIMS] = {n};
    int nd = 1;
    if (like >= 0) {
        nd = g->values[like].ndim;
        memcpy(dims, g->values[like].dims, sizeof dims);
    }
    return qfi_graph_add_const(g, name, dt, nd, dims, data);
}

/* Appends a node; returns its index or -1. */
static int add_node(rw *r, const char *name, qf_op op, int n_in, const int *in, int out, qf_precision prec)
{
    int i = qf_graph_add_node(r->g, name, op, n_in, in, 1, &out);
    if (i < 0) return -1;
    r->g->nodes[i].precision = prec;
    return i;
}

/* Emits the conversion of value `src` (stored as sdt) into the new value `dst`. */
static qf_status convert(rw *r, int src, qf_dtype sdt, int dst, qf_dtype ddt)
{
    qf_graph *g = r->g;
    char name[1024];
    int i;
    if (sdt == QF_I8) {
        snprintf(name, sizeof name, "%s/dequantize", g->values[src].name);
        i = add_node(r, name, QF_OP_DEQUANTIZE_LINEAR, 1, &src, dst, ddt == QF_F16 ? QF_PREC_FP16 : QF_PREC_FP32);
    } else if (ddt == QF_I8) {
        snprintf(name, sizeof name, "%s/quantize", g->values[src].name);
        i = add_node(r, name, QF_OP_QUANTIZE_LINEAR, 1, &src, dst, QF_PREC_INT8);
    } else {
        snprintf(name, sizeof name, "%s/cast", g->values[src].name);
        i = add_node(r, name, QF_OP_CAST, 1, &src, dst, QF_PREC_FP32);
        if (i >= 0) {
            qf_node *n = &g->nodes[i];
            n->attrs = qfi_calloc(1, sizeof *n->attrs);
            if (!n->attrs) return QF_ERR_NOMEM;
            n->n_attr = 1;
            n->attrs[0] = (qf_attr){.name = qfi_strdup("to"), .type = QF_ATTR_INT, .i = qf_dtype_info(ddt)->onnx_type};
            if (!n->attrs[0].name) return QF_ERR_NOMEM;
        }
    }
    if (i < 0) return QF_ERR_NOMEM;
    r->p->sum.conversions++;
    qf_node *n = &g->nodes[i];
    qf_status st = qfi_ops[n->op]->parse(g, n);
    if (st == QF_OK) st = qfi_ops[n->op]->infer(g, n);
    return st == QF_OK ? st : qfi_error_node(st, g, n);
}

/* The version of planned value v in dtype dt, converting on first use. */
static qf_status get_as(rw *r, int v, qf_dtype dt, int *out)
{
    int s = slot_of(dt);
    if (r->as[s][v] >= 0) {
        *out = r->as[s][v];
        return QF_OK;
    }
    qf_graph *g = r->g;
    const qfi_qvalue *qv = &r->p->values[v];
    int nv = add_value_like(g, v, qf_dtype_info(dt)->name, dt);
    if (nv < 0) return QF_ERR_NOMEM;
    if (dt == QF_I8) {
        g->values[nv].scale = qv->scale;
        g->values[nv].zero_point = qv->zero_point;
    }
    if (g->values[v].flags & QF_VALUE_CONST) {
        /* FP16 weights: rounded once, here */
        QF_ASSERT(dt == QF_F16 && qv->dtype == QF_F32);
        int64_t cnt = qf_value_numel(&g->values[v]);
        uint16_t *h = qfi_calloc((size_t)(cnt ? cnt : 1), sizeof *h);
        if (!h) return QF_ERR_NOMEM;
        const float *f = g->values[v].data;
        for (int64_t i = 0; i < cnt; i++) h[i] = qf_f32_to_f16(f[i]);
        g->values[nv].data = h;
        g->values[nv].flags |= QF_VALUE_CONST;
    } else {
        QF_CHECK(convert(r, r->stored[v], qv->store, nv, dt));
    }
    r->as[s][v] = nv;
    *out = nv;
    return QF_OK;
}

/* FP16 nodes read float constants as half, except inputs that are parameters
 * rather than data (the descriptor's params: Resize's roi and scales). */
static bool const_is_data(qf_op op, int k) { return k >= 32 || !(qfi_ops[op]->params & (1u << k)); }

int qfi_quant_move_node(qf_graph *g, qf_node *n, int n_in, const int *in, int n_out, const int *out, qf_precision prec,
                        qf_status *st)
{
    int i = qf_graph_add_node(g, n->name, n->op, n_in, in, n_out, out);
    if (i < 0) {
        *st = QF_ERR_NOMEM;
        return -1;
    }
    qf_node *nn = &g->nodes[i];
    nn->attrs = n->attrs;
    nn->n_attr = n->n_attr;
    nn->params = n->params;
    nn->precision = prec;
    n->attrs = NULL;
    n->n_attr = 0;
    n->params = NULL;
    qfi_node_clear(n);
    *st = QF_OK;
    return i;
}

static void set_attr_float(qf_node *n, const char *name, float f)
{
    for (int a = 0; a < n->n_attr; a++)
        if (strcmp(n->attrs[a].name, name) == 0 && n->attrs[a].type == QF_ATTR_FLOAT) n->attrs[a].f = f;
}

/* Emits anchor a (Conv/Gemm/MatMul) as an INT8 node with its fused epilogue. */
static qf_status emit_anchor(rw *r, qf_node *n, int a)
{
    qf_graph *g = r->g;
    const qfi_qnode *qn = &r->p->nodes[a];
    int x, res = -1;
    QF_CHECK(get_as(r, n->in[0], QF_I8, &x));
    if (qn->residual >= 0) QF_CHECK(get_as(r, qn->residual, QF_I8, &res));
    const float s_in = g->values[x].scale;
    const int wv = n->in[1];
    const qf_value *W = &g->values[wv];
    qfi_anchor_f af;
    QF_CHECK(qfi_anchor_f_make(g, n, qn->bias_add, &r->p->o, &af));
    const int64_t ch = af.ch;
    int8_t *wq = qfi_calloc((size_t)qf_value_numel(W) + 1, 1);
    float *sc = qfi_calloc((size_t)ch, sizeof *sc);
    int32_t *bq = qfi_calloc((size_t)ch, sizeof *bq);
    if (!wq || !sc || !bq) {
        qfi_anchor_f_free(&af);
        free(wq), free(sc), free(bq);
        return QF_ERR_NOMEM;
    }
    int64_t bad = -1;
    /* the plan's scales and biases: qfi_quant_check_biases kept in float an anchor these fail for */
    QF_ASSERT(qfi_quant_anchor_scales(&af, s_in, g->values[x].zero_point, !r->p->o.per_tensor_weights, sc, &bad) >= 0);
    qfi_anchor_weights_at(&af, sc, wq);
    QF_ASSERT(qfi_quant_anchor_biases(&af, s_in, sc, g->values[x].zero_point, wq, bq) < 0);
    qfi_anchor_f_free(&af);
    char name[1024];
    snprintf(name, sizeof name, "%s/i8", W->name);
    int wqv = qfi_quant_add_const(g, name, QF_I8, wv, 0, wq);
    snprintf(name, sizeof name, "%s/weight_scale", n->name);
    int scv = wqv < 0 ? -1 : qfi_quant_add_const(g, name, QF_F32, -1, ch, sc);
    snprintf(name, sizeof name, "%s/bias_i32", n->name);
    int bqv = scv < 0 ? -1 : qfi_quant_add_const(g, name, QF_I32, -1, ch, bq);
    if (bqv < 0) {
        if (wqv < 0) free(sc);
        if (scv < 0) free(bq);
        return QF_ERR_NOMEM;
    }
    return qfi_quant_int8_node(g, n, x, wqv, bqv, scv, res, r->stored[qn->out], qn->act, qn->act_lo, qn->act_hi);
}

qf_status qfi_quant_int8_node(qf_graph *g, qf_node *n, int x, int w, int bias, int scales, int res, int out, qf_act act,
                              float act_lo, float act_hi)
{
    int in[5] = {x, w, bias, scales, res};
    qf_status st;
    int i = qfi_quant_move_node(g, n, res >= 0 ? 5 : 4, in, 1, &out, QF_PREC_INT8, &st);
    if (i < 0) return st;
    qf_node *nn = &g->nodes[i];
    nn->act = act;
    nn->act_lo = act_lo;
    nn->act_hi = act_hi;
    if (nn->op == QF_OP_GEMM) {
        /* alpha and beta now live in the weights and the bias */
        qfi_gemm_params *gp = nn->params;
        gp->alpha = gp->beta = 1.0f;
        set_attr_float(nn, "alpha", 1.0f);
        set_attr_float(nn, "beta", 1.0f);
    }
    /* checks the INT8 operands and the output shape */
    st = qfi_ops[nn->op]->infer(g, nn);
    return st == QF_OK ? st : qfi_error_node(st, g, nn);
}

/* An FP16 elementwise node of one varying input (an activation, a
 * BatchNormalization): the engines' kernels read an int8 input as
 * (q - zp) * scale themselves, so it takes an int8 value as stored, with no
 * DequantizeLinear pass and half tensor before it (DenseNet's BatchNorm and
 * Relu after each int8 Concat: 2.2 of 30 ms at batch 256 in such passes). */
static bool reads_int8_itself(const qfi_qplan *p, const qf_node *n, const qfi_qnode *qn)
{
    if (qn->role != QFI_QROLE_FLOAT || qn->prec != QF_PREC_FP16 || !(qfi_ops[n->op]->traits & QFI_OP_ELEMENTWISE))
        return false;
    int varying = 0;
    for (int k = 0; k < n->n_in; k++) varying += qfi_qfloat(p, n->in[k]) && !qfi_qconst(p, n->in[k]);
    return varying == 1;
}

/* Emits node i of the old graph (not an anchor) at its precision. */
static qf_status emit_plain(rw *r, qf_node *n, int i)
{
    const qfi_qnode *qn = &r->p->nodes[i];
    int in[64], out[64];
    if (n->n_in > 64 || n->n_out > 64)
        return qfi_error_node(qf_error(QF_ERR_UNSUPPORTED, "too many inputs or outputs to quantize"), r->g, n);
    qf_dtype want = qn->role != QFI_QROLE_FLOAT ? QF_I8 : qn->prec == QF_PREC_FP16 ? QF_F16 : QF_F32;
    const bool int8_itself = reads_int8_itself(r->p, n, qn);
    for (int k = 0; k < n->n_in; k++) {
        int v = n->in[k];
        in[k] = v;
        if (!qfi_qfloat(r->p, v)) continue;
        if (qfi_qconst(r->p, v)) {
            /* constants stay f32 except as data of an FP16 op */
            if (want == QF_F16 && const_is_data(n->op, k)) QF_CHECK(get_as(r, v, QF_F16, &in[k]));
            continue;
        }
        QF_CHECK(get_as(r, v, int8_itself && r->p->values[v].store == QF_I8 ? QF_I8 : want, &in[k]));
    }
    for (int k = 0; k < n->n_out; k++) out[k] = n->out[k] >= 0 ? r->stored[n->out[k]] : -1;
    qf_status st;
    qfi_quant_move_node(r->g, n, n->n_in, in, n->n_out, out, qn->prec, &st);
    return st;
}

/* After a writer: a graph output stored in another dtype is converted back to
 * f32 under its own name. */
static qf_status restore_output(rw *r, int v)
{
    if (v < 0 || r->stored[v] == v) return QF_OK;
    return convert(r, r->stored[v], r->p->values[v].store, v, QF_F32);
}

qf_status qfi_quant_rewrite(qfi_qplan *p)
{
    qf_graph *g = p->g;
    const int nv0 = p->n_values, nn0 = p->n_nodes;
    rw r = {.p = p, .g = g};
    r.stored = qfi_calloc((size_t)nv0 + 1, sizeof *r.stored);
    for (int s = 0; s < SLOT_COUNT; s++) r.as[s] = qfi_calloc((size_t)nv0 + 1, sizeof *r.as[s]);
    qf_status st = QF_OK;
    if (!r.stored || !r.as[0] || !r.as[1] || !r.as[2]) {
        st = QF_ERR_NOMEM;
        goto out;
    }
    for (int v = 0; v < nv0; v++) {
        r.stored[v] = v;
        for (int s = 0; s < SLOT_COUNT; s++) r.as[s][v] = -1;
        const qfi_qvalue *qv = &p->values[v];
        if (!qfi_qfloat(p, v) || qfi_qconst(p, v) || qv->store == QF_F32) {
            r.as[slot_of(g->values[v].dtype)][v] = v;
            continue;
        }
        if (g->values[v].flags & QF_VALUE_OUTPUT) {
            /* the writer stores a renamed copy; the output itself stays f32 */
            int c = add_value_like(g, v, qf_dtype_info(qv->store)->name, qv->store);
            if (c < 0) {
                st = QF_ERR_NOMEM;
                goto out;
            }
            r.stored[v] = c;
            r.as[SLOT_F32][v] = v;
        } else {
            g->values[v].dtype = qv->store;
        }
        g->values[r.stored[v]].scale = qv->store == QF_I8 ? qv->scale : 0.0f;
        g->values[r.stored[v]].zero_point = qv->store == QF_I8 ? qv->zero_point : 0;
        r.as[slot_of(qv->store)][v] = r.stored[v];
    }
    for (int v = 0; v < g->n_values; v++) g->values[v].producer = -1;

    /* re-emit: a fused chain takes the place of its last node */
    qf_node *old = g->nodes;
    g->nodes = NULL;
    g->n_nodes = g->cap_nodes = 0;
    for (int i = 0; i < nn0 && st == QF_OK; i++) {
        const qfi_qnode *qn = &p->nodes[i];
        int emit = i;
        if (qn->absorbed_by >= 0) {
            emit = p->nodes[qn->absorbed_by].emit_at == i ? qn->absorbed_by : -1;
            qfi_node_clear(&old[i]);
        } else if (qn->role == QFI_QROLE_ANCHOR && qn->emit_at != i) {
            emit = -1;
        }
        if (emit < 0) continue;
        if (p->nodes[emit].role == QFI_QROLE_ANCHOR) {
            st = emit_anchor(&r, &old[emit], emit);
            if (st == QF_OK) st = restore_output(&r, p->nodes[emit].out);
        } else {
            int outs[64], n_out = old[emit].n_out < 64 ? old[emit].n_out : 64;
            memcpy(outs, old[emit].out, (size_t)n_out * sizeof *outs);
            st = emit_plain(&r, &old[emit], emit);
            for (int k = 0; k < n_out && st == QF_OK; k++) st = restore_output(&r, outs[k]);
        }
    }
    for (int i = 0; i < nn0; i++) qfi_node_clear(&old[i]);
    free(old);
    if (st == QF_OK) qfi_drop_unused_constants(g);
out:
    free(r.stored);
    for (int s = 0; s < SLOT_COUNT; s++) free(r.as[s]);
    return st;
}
