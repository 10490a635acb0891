/* Gemm: Y = alpha * op(A) * op(B) + beta * C with C broadcast one way to
 * (M,N); attribute parsing, shape inference and FLOP count. */
#include "ops/nn.h"
#include "ops/ops.h"

static qf_status gemm_parse(qf_graph *g, qf_node *n)
{
    /* INT8: A, B, bias, weight scales, residual (lib/ops/qdq.c) */
    QF_CHECK(qfi_check_arity(g, n, 2, n->precision == QF_PREC_INT8 ? 5 : 3));
    qfi_gemm_params *p = qfi_calloc(1, sizeof *p);
    if (!p) return QF_ERR_NOMEM;
    p->alpha = qfi_attr_float(n, "alpha", 1.0f);
    p->beta = qfi_attr_float(n, "beta", 1.0f);
    p->trans_a = qfi_attr_int(n, "transA", 0) != 0;
    p->trans_b = qfi_attr_int(n, "transB", 0) != 0;
    return qfi_node_set_params(n, p, QF_OK);
}

qf_status qfi_gemm_geometry(const qf_graph *g, const qf_node *n, qfi_gemm_geom *geo)
{
    const qfi_gemm_params *p = n->params;
    QF_ASSERT(p);
    const qf_value *a = qfi_in(g, n, 0), *b = qfi_in(g, n, 1), *c = qfi_in(g, n, 2);
    QF_ASSERT(a && b);
    if (n->precision == QF_PREC_INT8) {
        QF_CHECK(qfi_int8_operands(g, n, b->ndim == 2 ? b->dims[p->trans_b ? 0 : 1] : 0));
    } else {
        QF_CHECK(qfi_require_f32(g, n, a, "input A"));
        QF_CHECK(qfi_require_f32(g, n, b, "input B"));
        if (c) QF_CHECK(qfi_require_f32(g, n, c, "input C"));
    }
    if (a->ndim != 2 || b->ndim != 2)
        return qf_error(QF_ERR_INVALID, "A %s and B %s must be 2-D (they have %d and %d dims)", a->name, b->name,
                        a->ndim, b->ndim);
    geo->M = p->trans_a ? a->dims[1] : a->dims[0];
    geo->K = p->trans_a ? a->dims[0] : a->dims[1];
    int64_t kb = p->trans_b ? b->dims[1] : b->dims[0];
    geo->N = p->trans_b ? b->dims[0] : b->dims[1];
    if (kb != geo->K)
        return qf_error(QF_ERR_INVALID, "inner dims disagree: op(A) is (%lld,%lld), op(B) is (%lld,%lld)",
                        (long long)geo->M, (long long)geo->K, (long long)kb, (long long)geo->N);
    geo->has_c = c != NULL;
    if (c) {
        /* unidirectional: C may only stretch to (M,N), never the other way */
        int64_t mn[2] = {geo->M, geo->N};
        bool ok = c->ndim <= 2;
        for (int i = 0; ok && i < c->ndim; i++) {
            int64_t want = mn[2 - c->ndim + i];
            ok = c->dims[i] == want || c->dims[i] == 1;
        }
        if (!ok)
            return qf_error(QF_ERR_INVALID, "C %s (%d dims) does not broadcast to (%lld,%lld)", c->name, c->ndim,
                            (long long)geo->M, (long long)geo->N);
    }
    return QF_OK;
}

static qf_status gemm_infer(qf_graph *g, qf_node *n)
{
    qfi_gemm_geom geo;
    QF_CHECK(qfi_gemm_geometry(g, n, &geo));
    int64_t dims[2] = {geo.M, geo.N};
    qf_dtype dt = n->precision == QF_PREC_INT8 ? qfi_out(g, n, 0)->dtype : QF_F32;
    qfi_value_set_shape(qfi_out(g, n, 0), dt, 2, dims);
    return QF_OK;
}

static int64_t gemm_flops(const qf_graph *g, const qf_node *n)
{
    qfi_gemm_geom geo;
    if (!n->params || qfi_gemm_geometry(g, n, &geo) != QF_OK) return 0;
    int64_t flops = 2 * geo.M * geo.N * geo.K;
    /* rows are images when A is an activation batch (the classifier Gemm) */
    const qf_value *a = qfi_in(g, n, 0);
    const qfi_gemm_params *p = n->params;
    if (g->batch > 0 && geo.M == g->batch && !(a->flags & QF_VALUE_CONST) && !p->trans_a) flops /= g->batch;
    return flops;
}

/* INT8: B is (K,N), or (N,K) with transB, and is quantized along N; C must
 * broadcast over the rows as a per-channel vector (it becomes the bias). */
static void gemm_weight_layout(const qf_graph *g, const qf_node *n, int64_t *outer, int64_t *channels, int64_t *inner)
{
    const qf_value *w = qfi_in(g, n, 1);
    const bool trans_b = ((const qfi_gemm_params *)n->params)->trans_b;
    *outer = trans_b ? 1 : w->dims[0];
    *channels = trans_b ? w->dims[0] : w->dims[1];
    *inner = trans_b ? w->dims[1] : 1;
}

static bool gemm_int8_ok(const qf_graph *g, const qf_node *n)
{
    const qfi_gemm_params *p = n->params;
    const qf_value *w = qfi_in(g, n, 1), *c = qfi_in(g, n, 2);
    if (p->trans_a || w->ndim != 2) return false;
    int64_t outer, channels, inner;
    gemm_weight_layout(g, n, &outer, &channels, &inner);
    return !c || qfi_is_channel_vector(c, channels);
}

/* Opset 6's broadcast=1 is opset 7's unidirectional broadcast of C;
 * broadcast=0 asked for C of the full shape, which opset 7 also accepts. */
static qf_status gemm_from_opset6(qf_graph *g, qf_node *n)
{
    qfi_attr_drop(n, "broadcast");
    return QF_OK;
}

const qfi_op_desc qfi_op_gemm = {
    .parse = gemm_parse,
    .infer = gemm_infer,
    .flops = gemm_flops,
    .traits = QFI_OP_EPILOGUE,
    .int8 = QFI_INT8_COMPUTE,
    .int8_ok = gemm_int8_ok,
    .weight_layout = gemm_weight_layout,
    .typed = QFI_PREC_BIT(QF_PREC_INT8),
    .from_opset6 = gemm_from_opset6,
};
