/* Quantized ONNX at import: QuantizeLinear/DequantizeLinear with uint8
 * parameters become int8 ones (q - 128 and zero point - 128, which is exact),
 * QOperator ops (QLinearConv, QLinearMatMul, QGemm and com.microsoft's
 * QLinearAdd, QLinearMul, QLinearGlobalAveragePool, QLinearAveragePool,
 * QLinearConcat, QLinearSigmoid, QLinearLeakyRelu) become DequantizeLinear ->
 * the float op -> QuantizeLinear, and the ops that only move quantized
 * tensors (MaxPool, Reshape, ...) are wrapped the same way with their input's
 * parameters. What comes out is a Q/DQ graph of qforge's ops, which
 * quant/qdq_import.c turns into qforge's own INT8 nodes. */
#include "onnx_internal.h"
#include <limits.h>

struct qfi_qop_state {
    int cap;
    /* per value: */
    int *scale;   /* a quantized activation's scale (a constant), -1 if it is not one */
    int *zp;      /* its zero point, an int8 constant */
    bool *u8;     /* stored as uint8 in the file */
    int *i8_of;   /* a uint8 constant's int8 copy, -1 until made */
    int zero_i8, zero_u8; /* the zero points meaning "none given" for int8 (0) and uint8 (-128 after the shift) */
};

qfi_qop_state *qfi_qop_state_new(void)
{
    qfi_qop_state *S = qfi_calloc(1, sizeof *S);
    if (S) S->zero_i8 = S->zero_u8 = -1;
    return S;
}

void qfi_qop_state_free(qfi_qop_state *S)
{
    if (!S) return;
    free(S->scale);
    free(S->zp);
    free(S->u8);
    free(S->i8_of);
    free(S);
}

/* Room for every value of the graph. */
static qf_status ensure(qfi_qop_state *S, const qf_graph *g)
{
    if (g->n_values <= S->cap) return QF_OK;
    int cap = g->n_values * 2 + 16;
    int *sc = realloc(S->scale, (size_t)cap * sizeof *sc);
    if (sc) S->scale = sc;
    int *zp = realloc(S->zp, (size_t)cap * sizeof *zp);
    if (zp) S->zp = zp;
    bool *u8 = realloc(S->u8, (size_t)cap * sizeof *u8);
    if (u8) S->u8 = u8;
    int *i8 = realloc(S->i8_of, (size_t)cap * sizeof *i8);
    if (i8) S->i8_of = i8;
    if (!sc || !zp || !u8 || !i8) return qf_error(QF_ERR_NOMEM, "out of memory importing a quantized model");
    for (int v = S->cap; v < cap; v++) {
        S->scale[v] = S->zp[v] = S->i8_of[v] = -1;
        S->u8[v] = false;
    }
    S->cap = cap;
    return QF_OK;
}

/* ---- the ops ------------------------------------------------------------------------------ */

typedef enum qop_kind {
    QOP_CONV,        /* QLinearConv: x xs xz w ws wz ys yz [B] */
    QOP_MATMUL,      /* QLinearMatMul: a as az b bs bz ys yz */
    QOP_GEMM,        /* QGemm: a as az b bs bz [C] [ys yz] */
    QOP_BINARY,      /* QLinearAdd, QLinearMul: a as az b bs bz cs cz */
    QOP_UNARY,       /* QLinearGlobalAveragePool, QLinearAveragePool, QLinearSigmoid, QLinearLeakyRelu: x xs xz ys yz */
    QOP_CONCAT,      /* QLinearConcat: ys yz (x xs xz)... */
} qop_kind;

typedef struct qop_desc {
    const char *domain, *name;
    qop_kind kind;
    qf_op op;        /* the float op it computes */
} qop_desc;

static const qop_desc qops[] = {
    {"", "QLinearConv", QOP_CONV, QF_OP_CONV},
    {"", "QLinearMatMul", QOP_MATMUL, QF_OP_MATMUL},
    {"com.microsoft", "QGemm", QOP_GEMM, QF_OP_GEMM},
    {"com.microsoft", "QLinearAdd", QOP_BINARY, QF_OP_ADD},
    {"com.microsoft", "QLinearMul", QOP_BINARY, QF_OP_MUL},
    {"com.microsoft", "QLinearGlobalAveragePool", QOP_UNARY, QF_OP_GLOBAL_AVERAGE_POOL},
    {"com.microsoft", "QLinearAveragePool", QOP_UNARY, QF_OP_AVERAGE_POOL},
    {"com.microsoft", "QLinearSigmoid", QOP_UNARY, QF_OP_SIGMOID},
    {"com.microsoft", "QLinearLeakyRelu", QOP_UNARY, QF_OP_LEAKY_RELU},
    {"com.microsoft", "QLinearConcat", QOP_CONCAT, QF_OP_CONCAT},
};

static bool default_domain(const char *d) { return !d || !d[0] || strcmp(d, "ai.onnx") == 0; }

static const qop_desc *qop_find(const char *domain, const char *op_type)
{
    for (size_t i = 0; i < QF_ARRAY_LEN(qops); i++)
        if (strcmp(op_type, qops[i].name) == 0 &&
            (default_domain(qops[i].domain) ? default_domain(domain) : domain && strcmp(domain, qops[i].domain) == 0))
            return &qops[i];
    return NULL;
}

bool qfi_qop_known(const char *domain, const char *op_type) { return qop_find(domain, op_type) != NULL; }

/* Ops that only move or select values: exact on quantized tensors between a
 * DequantizeLinear and a QuantizeLinear with the same parameters. */
static bool moves_values(qf_op op)
{
    switch (op) {
    case QF_OP_MAX_POOL:
    case QF_OP_GLOBAL_MAX_POOL:
    case QF_OP_RESHAPE:
    case QF_OP_FLATTEN:
    case QF_OP_TRANSPOSE:
    case QF_OP_SQUEEZE:
    case QF_OP_UNSQUEEZE:
    case QF_OP_IDENTITY:
    case QF_OP_DROPOUT:
    case QF_OP_CONCAT:
    case QF_OP_SLICE:
    case QF_OP_SPLIT:
    case QF_OP_GATHER:
    case QF_OP_SHAPE: return true;
    default: return false;
    }
}

/* ---- parameters ------------------------------------------------------------------------ */

typedef struct qctx {
    qfi_onnx_loader *L;
    qfi_qop_state *S;
    qf_graph *g;
    const char *name; /* the ONNX node's */
} qctx;

/* The detail only: the loader names the file and the node (lib/onnx_import.c). */
static qf_status fail(qf_status st, const char *fmt, const char *what)
{
    return qf_error(st, "%s%s", fmt, what ? what : "");
}

static bool is_const(const qf_graph *g, int v) { return v >= 0 && (g->values[v].flags & QF_VALUE_CONST) && g->values[v].data; }

/* The shared scalar zero point of an unparameterized int8 (0) or uint8 (0 - 128) tensor. */
static int zero_const(qctx *c, bool u8)
{
    int *slot = u8 ? &c->S->zero_u8 : &c->S->zero_i8;
    if (*slot >= 0) return *slot;
    int8_t *d = qfi_calloc(1, 1);
    if (!d) return -1;
    d[0] = u8 ? -128 : 0;
    *slot = qfi_onnx_new_const(c->L, u8 ? "uint8" : "int8", "zero_point", QF_I8, 0, NULL, d);
    return *slot;
}

/* The int8 form of a uint8 constant: every element minus 128 (made once). */
static int shifted_const(qctx *c, int v)
{
    qf_status st = ensure(c->S, c->g);
    if (st != QF_OK) return -1;
    if (c->S->i8_of[v] >= 0) return c->S->i8_of[v];
    const qf_value *x = &c->g->values[v];
    int64_t n = qf_value_numel(x), dims[QF_MAX_DIMS];
    int8_t *d = qfi_calloc((size_t)n + 1, 1);
    if (!d) return -1;
    const uint8_t *u = x->data;
    for (int64_t i = 0; i < n; i++) d[i] = (int8_t)((int)u[i] - 128);
    int nd = x->ndim;
    memcpy(dims, x->dims, sizeof dims);
    char base[1024];
    snprintf(base, sizeof base, "%s", x->name); /* adding a value may move g->values */
    int nv = qfi_onnx_new_const(c->L, base, "int8", QF_I8, nd, dims, d);
    if (nv < 0 || ensure(c->S, c->g) != QF_OK) return -1;
    c->S->i8_of[v] = nv;
    return nv;
}

/* Whether quantized tensor x is uint8: a constant of that type, or an
 * activation a uint8 QuantizeLinear or QOperator op wrote. */
static bool is_u8(const qctx *c, int x)
{
    if (x < 0) return false;
    if (c->g->values[x].flags & QF_VALUE_CONST) return c->g->values[x].dtype == QF_U8;
    return x < c->S->cap && c->S->u8[x];
}

/* The int8 zero point for zero-point input z of a tensor of the given
 * signedness (z < 0: not given, the type's 0). */
static qf_status norm_zp(qctx *c, int z, bool u8, int *out)
{
    if (z < 0) {
        *out = zero_const(c, u8);
        return *out < 0 ? QF_ERR_NOMEM : QF_OK;
    }
    const qf_value *zv = &c->g->values[z];
    if (!is_const(c->g, z)) return fail(QF_ERR_UNSUPPORTED, "zero point is not a constant: ", zv->name);
    if (zv->dtype == QF_I8 || zv->dtype == QF_I32) {
        *out = z;
        return QF_OK;
    }
    if (zv->dtype != QF_U8)
        return fail(QF_ERR_UNSUPPORTED, "only 8-bit quantization is supported; zero point has another type: ",
                    zv->name);
    *out = shifted_const(c, z);
    return *out < 0 ? QF_ERR_NOMEM : QF_OK;
}

static bool quantized(const qctx *c, int v) { return v >= 0 && v < c->S->cap && c->S->scale[v] >= 0; }

/* The input a DequantizeLinear reads for quantized tensor x: a uint8
 * constant's int8 copy, else x itself. */
static qf_status norm_x(qctx *c, int x, int *out)
{
    const qf_value *xv = &c->g->values[x];
    const bool constant = xv->flags & QF_VALUE_CONST;
    /* (a value's declared type is the file's; shape inference types activations) */
    if (xv->dtype == QF_U8 && !constant && !quantized(c, x))
        return fail(QF_ERR_UNSUPPORTED, "a uint8 tensor that no QuantizeLinear made: ", xv->name);
    *out = xv->dtype == QF_U8 && constant ? shifted_const(c, x) : x;
    return *out < 0 ? QF_ERR_NOMEM : QF_OK;
}

static qf_status remember(qctx *c, int y, int scale, int zp, bool u8)
{
    QF_CHECK(ensure(c->S, c->g));
    c->S->scale[y] = scale;
    c->S->zp[y] = zp;
    c->S->u8[y] = u8;
    return QF_OK;
}


/* Sets an int attribute on the graph's last node. */
static qf_status last_node_attr_int(qctx *c, const char *name, int64_t value)
{
    qf_node *n = &c->g->nodes[c->g->n_nodes - 1];
    qf_attr *a = realloc(n->attrs, (size_t)(n->n_attr + 1) * sizeof *a);
    if (!a) return QF_ERR_NOMEM;
    n->attrs = a;
    a[n->n_attr] = (qf_attr){.name = qfi_strdup(name), .type = QF_ATTR_INT, .i = value};
    if (!a[n->n_attr].name) return QF_ERR_NOMEM;
    n->n_attr++;
    return QF_OK;
}

/* DequantizeLinear(x, s, z) into a new float value "<node>/<role>"; axis >= 0
 * for a per-axis one. */
static qf_status dq_to_float(qctx *c, const char *role, int x, int s, int z, bool u8, int axis, int *out)
{
    int xi = x, zi = z;
    if (c->g->values[x].dtype != QF_I32) { /* an int32 bias keeps its zero point, 0 or none */
        QF_CHECK(norm_x(c, x, &xi));
        QF_CHECK(norm_zp(c, z, u8, &zi));
    }
    int y = qfi_onnx_new_value(c->L, c->name, role);
    if (y < 0) return QF_ERR_NOMEM;
    char nm[1024];
    snprintf(nm, sizeof nm, "%s/%s_dequantize", c->name, role);
    const int in[3] = {xi, s, zi};
    QF_CHECK(qfi_onnx_emit_node(c->L, nm, QF_OP_DEQUANTIZE_LINEAR, zi >= 0 ? 3 : 2, in, 1, &y, NULL, NULL));
    if (axis >= 0) QF_CHECK(last_node_attr_int(c, "axis", axis));
    *out = y;
    return QF_OK;
}

/* DequantizeLinear of a quantized activation with the parameters it was made with. */
static qf_status dq_own(qctx *c, const char *role, int x, int *out)
{
    return dq_to_float(c, role, x, c->S->scale[x], c->S->zp[x], false, -1, out);
}

/* QuantizeLinear(src, s, z) writing the ONNX output y. */
static qf_status q_from_float(qctx *c, int src, int s, int z, bool u8, int y)
{
    int zi = -1;
    QF_CHECK(norm_zp(c, z, u8, &zi));
    char nm[1024];
    snprintf(nm, sizeof nm, "%s/quantize", c->name);
    const int in[3] = {src, s, zi};
    QF_CHECK(qfi_onnx_emit_node(c->L, nm, QF_OP_QUANTIZE_LINEAR, 3, in, 1, &y, NULL, NULL));
    return remember(c, y, s, zi, u8);
}

/* Whether quantized tensor x with zero-point input z is uint8: the zero
 * point's type, or without one x's own. */
static bool param_u8(const qctx *c, int x, int z) { return z >= 0 ? c->g->values[z].dtype == QF_U8 : is_u8(c, x); }

/* fl(xs * ws[c]) for every channel: the scale of QLinearConv's and QGemm's int32 bias. */
static qf_status bias_scale(qctx *c, int xs, int ws, int *out)
{
    if (!is_const(c->g, xs) || !is_const(c->g, ws) || c->g->values[ws].dtype != QF_F32)
        return fail(QF_ERR_UNSUPPORTED, "the scales of a quantized op with a bias must be f32 constants", NULL);
    float sx;
    QF_CHECK(qfi_value_scalar_f32(&c->g->values[xs], &sx));
    int64_t n = qf_value_numel(&c->g->values[ws]);
    float *b = qfi_calloc((size_t)n + 1, sizeof *b);
    if (!b) return QF_ERR_NOMEM;
    const float *w = c->g->values[ws].data;
    for (int64_t k = 0; k < n; k++) b[k] = sx * w[k];
    int64_t dims[1] = {n};
    *out = qfi_onnx_new_const(c->L, c->name, "bias_scale", QF_F32, 1, dims, b);
    return *out < 0 ? QF_ERR_NOMEM : QF_OK;
}

static int64_t numel_of(const qctx *c, int v) { return v >= 0 ? qf_value_numel(&c->g->values[v]) : 0; }

/* ---- node handlers ----------------------------------------------------------------------- */

/* Inputs k with bit k of `required` set must be given. */
static qf_status need(const qctx *c, int n_in, const int *in, unsigned required, const char *op)
{
    for (int k = 0; k < 16; k++)
        if ((required >> k & 1) && (k >= n_in || in[k] < 0))
            return fail(QF_ERR_INVALID, "missing a required input of ", op);
    return QF_OK;
}

static qf_status expand(qctx *c, const qop_desc *d, const Onnx__NodeProto *np, int n_in, const int *in, int n_out,
                        const int *out)
{
    if (n_out != 1) return fail(QF_ERR_INVALID, "expected one output of ", d->name);
    int a, b, bias = -1, y = out[0];
    static const char *const no_layout[] = {"channels_last", NULL};
    switch (d->kind) {
    case QOP_CONV: {
        QF_CHECK(need(c, n_in, in, 0x5b, d->name)); /* x xs w ws ys */
        QF_CHECK(dq_to_float(c, "x", in[0], in[1], in[2], param_u8(c, in[0], in[2]), -1, &a));
        /* per-output-channel weights: axis 0 of (M, C/group, k...) */
        QF_CHECK(dq_to_float(c, "w", in[3], in[4], in[5], param_u8(c, in[3], in[5]), numel_of(c, in[4]) > 1 ? 0 : -1,
                             &b));
        if (n_in > 8 && in[8] >= 0) {
            int bs;
            QF_CHECK(bias_scale(c, in[1], in[4], &bs));
            QF_CHECK(dq_to_float(c, "bias", in[8], bs, -1, false, numel_of(c, bs) > 1 ? 0 : -1, &bias));
        }
        break;
    }
    case QOP_MATMUL:
        QF_CHECK(need(c, n_in, in, 0x5b, d->name)); /* a as b bs ys */
        if (numel_of(c, in[1]) != 1) return fail(QF_ERR_UNSUPPORTED, "per-row scales of input A", NULL);
        QF_CHECK(dq_to_float(c, "a", in[0], in[1], in[2], param_u8(c, in[0], in[2]), -1, &a));
        /* B (K, N): per-column scales run along its last axis */
        QF_CHECK(dq_to_float(c, "b", in[3], in[4], in[5], param_u8(c, in[3], in[5]),
                             numel_of(c, in[4]) > 1 ? c->g->values[in[3]].ndim - 1 : -1, &b));
        break;
    case QOP_GEMM: {
        QF_CHECK(need(c, n_in, in, 0x1b, d->name)); /* a as b bs */
        QF_CHECK(dq_to_float(c, "a", in[0], in[1], in[2], param_u8(c, in[0], in[2]), -1, &a));
        bool tb = false;
        for (size_t k = 0; k < np->n_attribute; k++)
            if (np->attribute[k]->name && strcmp(np->attribute[k]->name, "transB") == 0) tb = np->attribute[k]->i != 0;
        QF_CHECK(dq_to_float(c, "b", in[3], in[4], in[5], param_u8(c, in[3], in[5]),
                             numel_of(c, in[4]) > 1 ? (tb ? 0 : 1) : -1, &b));
        if (n_in > 6 && in[6] >= 0) {
            int bs;
            QF_CHECK(bias_scale(c, in[1], in[4], &bs));
            QF_CHECK(dq_to_float(c, "bias", in[6], bs, -1, false, numel_of(c, bs) > 1 ? 0 : -1, &bias));
        }
        break;
    }
    case QOP_BINARY:
        QF_CHECK(need(c, n_in, in, 0x5b, d->name)); /* a as b bs cs */
        QF_CHECK(dq_to_float(c, "a", in[0], in[1], in[2], param_u8(c, in[0], in[2]), -1, &a));
        QF_CHECK(dq_to_float(c, "b", in[3], in[4], in[5], param_u8(c, in[3], in[5]), -1, &b));
        break;
    case QOP_UNARY:
        QF_CHECK(need(c, n_in, in, 0xb, d->name)); /* x xs ys */
        for (size_t k = 0; k < np->n_attribute; k++)
            if (np->attribute[k]->name && strcmp(np->attribute[k]->name, "channels_last") == 0 && np->attribute[k]->i)
                return fail(QF_ERR_UNSUPPORTED, "channels_last layout of ", d->name);
        QF_CHECK(dq_to_float(c, "x", in[0], in[1], in[2], param_u8(c, in[0], in[2]), -1, &a));
        break;
    case QOP_CONCAT: {
        QF_CHECK(need(c, n_in, in, 0x1, d->name)); /* ys */
        if (n_in < 5 || (n_in - 2) % 3)
            return fail(QF_ERR_INVALID, "expected (x, scale, zero point) triples after the output's parameters", NULL);
        int parts = (n_in - 2) / 3;
        int *fl = qfi_calloc((size_t)parts + 1, sizeof *fl);
        if (!fl) return QF_ERR_NOMEM;
        qf_status st = QF_OK;
        for (int k = 0; k < parts && st == QF_OK; k++) {
            char role[32];
            snprintf(role, sizeof role, "x%d", k);
            const int *t = in + 2 + 3 * k;
            st = t[0] < 0 || t[1] < 0 ? fail(QF_ERR_INVALID, "missing an input of ", d->name)
                                      : dq_to_float(c, role, t[0], t[1], t[2], param_u8(c, t[0], t[2]), -1, &fl[k]);
        }
        int yf = st == QF_OK ? qfi_onnx_new_value(c->L, c->name, "y") : -1;
        if (st == QF_OK && yf < 0) st = QF_ERR_NOMEM;
        if (st == QF_OK) st = qfi_onnx_emit_node(c->L, c->name, QF_OP_CONCAT, parts, fl, 1, &yf, np, NULL);
        free(fl);
        QF_CHECK(st);
        return q_from_float(c, yf, in[0], n_in > 1 ? in[1] : -1, param_u8(c, in[2], n_in > 1 ? in[1] : -1), y);
    }
    }
    /* the float op and the output's QuantizeLinear (QGemm without y_scale stays float) */
    int ys = -1, yz = -1;
    switch (d->kind) {
    case QOP_CONV:
    case QOP_MATMUL: ys = in[6], yz = in[7]; break;
    case QOP_GEMM:
        ys = n_in > 7 ? in[7] : -1;
        yz = n_in > 8 ? in[8] : -1;
        break;
    case QOP_BINARY:
        ys = in[6];
        yz = n_in > 7 ? in[7] : -1;
        break;
    default:
        ys = in[3];
        yz = n_in > 4 ? in[4] : -1;
    }
    int yf = ys >= 0 ? qfi_onnx_new_value(c->L, c->name, "y") : y;
    if (yf < 0) return QF_ERR_NOMEM;
    int fin[3] = {a, b, bias};
    int nf = d->kind == QOP_UNARY ? 1 : bias >= 0 ? 3 : 2;
    QF_CHECK(qfi_onnx_emit_node(c->L, c->name, d->op, nf, fin, 1, &yf, np, no_layout));
    /* no output zero point: the input's type */
    return ys >= 0 ? q_from_float(c, yf, ys, yz, param_u8(c, in[0], yz), y) : QF_OK;
}

/* QuantizeLinear / DequantizeLinear of the file: uint8 parameters shifted. */
static qf_status q_or_dq(qctx *c, qf_op op, const Onnx__NodeProto *np, int n_in, const int *in, int n_out,
                         const int *out)
{
    static const char *const drop[] = {"output_dtype", NULL};
    if (n_in < 2 || in[0] < 0 || in[1] < 0 || n_out != 1) return QF_OK; /* the op's parser says what is wrong */
    int z = n_in > 2 ? in[2] : -1, x = in[0], zi = -1, xi = x;
    if (op == QF_OP_QUANTIZE_LINEAR) {
        /* no zero point: uint8 unless opset 21's output_dtype says int8 */
        bool u8 = z >= 0 ? c->g->values[z].dtype == QF_U8 : true;
        for (size_t k = 0; k < np->n_attribute; k++)
            if (z < 0 && np->attribute[k]->name && strcmp(np->attribute[k]->name, "output_dtype") == 0)
                u8 = np->attribute[k]->i == ONNX__TENSOR_PROTO__DATA_TYPE__UINT8;
        QF_CHECK(norm_zp(c, z, u8, &zi));
        const int qin[3] = {x, in[1], zi};
        QF_CHECK(qfi_onnx_emit_node(c->L, c->name, op, 3, qin, 1, out, np, drop));
        /* a per-axis QuantizeLinear (of weights) makes a constant, not an activation */
        if (numel_of(c, in[1]) == 1) QF_CHECK(remember(c, out[0], in[1], zi, u8));
        return QF_OK;
    }
    bool u8 = param_u8(c, x, z);
    if (c->g->values[x].dtype == QF_I32 && (c->g->values[x].flags & QF_VALUE_CONST)) {
        zi = z; /* an int32 bias: its zero point is 0 or absent */
    } else {
        QF_CHECK(norm_x(c, x, &xi));
        QF_CHECK(norm_zp(c, z, u8, &zi));
    }
    const int din[3] = {xi, in[1], zi};
    return qfi_onnx_emit_node(c->L, c->name, op, zi >= 0 ? 3 : 2, din, 1, out, np, NULL);
}

/* An op that moves quantized tensors: DequantizeLinear -> op -> QuantizeLinear
 * with the parameters of its (first) quantized input. */
static qf_status wrap_mover(qctx *c, qf_op op, const Onnx__NodeProto *np, int n_in, const int *in, int n_out,
                            const int *out)
{
    int first = -1;
    for (int k = 0; k < n_in; k++)
        if (quantized(c, in[k])) {
            if (first < 0) first = in[k];
            else if (c->S->scale[in[k]] != c->S->scale[first] || c->S->zp[in[k]] != c->S->zp[first])
                return fail(QF_ERR_UNSUPPORTED, "joins quantized tensors of different scales or zero points: ",
                            c->g->values[in[k]].name);
        }
    if (op == QF_OP_CONCAT)
        for (int k = 0; k < n_in; k++)
            if (in[k] >= 0 && !quantized(c, in[k]))
                return fail(QF_ERR_UNSUPPORTED, "joins a quantized tensor and a float one: ", c->g->values[in[k]].name);
    int *io = qfi_calloc((size_t)(n_in + n_out) + 1, sizeof *io);
    if (!io) return QF_ERR_NOMEM;
    int *fin = io, *fout = io + n_in;
    qf_status st = QF_OK;
    for (int k = 0; k < n_in && st == QF_OK; k++) {
        fin[k] = in[k];
        if (quantized(c, in[k])) {
            char role[32];
            snprintf(role, sizeof role, "in%d", k);
            st = dq_own(c, role, in[k], &fin[k]);
        }
    }
    /* Shape's output is the shape, not data */
    for (int k = 0; k < n_out && st == QF_OK; k++) {
        char role[32];
        snprintf(role, sizeof role, "out%d", k);
        fout[k] = out[k] < 0 || op == QF_OP_SHAPE ? out[k] : qfi_onnx_new_value(c->L, c->name, role);
        if (out[k] >= 0 && fout[k] < 0) st = QF_ERR_NOMEM;
    }
    if (st == QF_OK) st = qfi_onnx_emit_node(c->L, c->name, op, n_in, fin, n_out, fout, np, NULL);
    for (int k = 0; k < n_out && st == QF_OK && op != QF_OP_SHAPE; k++)
        if (out[k] >= 0) st = q_from_float(c, fout[k], c->S->scale[first], c->S->zp[first], c->S->u8[first], out[k]);
    free(io);
    return st;
}

qf_status qfi_qop_node(qfi_onnx_loader *L, qfi_qop_state *S, const Onnx__NodeProto *np, const char *name, int n_in,
                       const int *in, int n_out, const int *out, bool *done)
{
    qctx c = {.L = L, .S = S, .g = qfi_onnx_graph(L), .name = name};
    *done = false;
    QF_CHECK(ensure(S, c.g));
    const qop_desc *d = qop_find(np->domain, np->op_type);
    if (d) {
        *done = true;
        return expand(&c, d, np, n_in, in, n_out, out);
    }
    qf_op op;
    if (!qf_op_lookup(np->op_type, &op)) return QF_OK;
    if (op == QF_OP_QUANTIZE_LINEAR || op == QF_OP_DEQUANTIZE_LINEAR) {
        *done = true;
        return q_or_dq(&c, op, np, n_in, in, n_out, out);
    }
    bool reads_quantized = false;
    for (int k = 0; k < n_in; k++) reads_quantized |= quantized(&c, in[k]);
    if (!reads_quantized) return QF_OK;
    if (!moves_values(op))
        return fail(QF_ERR_UNSUPPORTED, "computes on quantized integers directly (only QLinear ops, "
                    "DequantizeLinear and ops that move values may read them): op ", np->op_type);
    *done = true;
    return wrap_mover(&c, op, np, n_in, in, n_out, out);
}
