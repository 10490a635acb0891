/* MatMul with numpy semantics (1-D promotion, broadcast batch dims): shape
 * resolution shared with the kernels, shape inference and FLOP count. */
#include "ops/nn.h"
#include "ops/ops.h"

static qf_status matmul_parse(qf_graph *g, qf_node *n)
{
    /* no attributes: nothing to store */
    /* INT8: A, B, bias, weight scales, residual (lib/ops/qdq.c) */
    return qfi_check_arity(g, n, 2, n->precision == QF_PREC_INT8 ? 5 : 2);
}

/* The operands of an INT8 product (qfi_matmul_is_product). */
static qf_status product_operands(const qf_graph *g, const qf_node *n)
{
    const qf_value *y = qfi_out(g, n, 0);
    for (int k = 0; k < 2; k++) {
        const qf_value *v = qfi_in(g, n, k);
        if (v->dtype != QF_I8 || (v->flags & QF_VALUE_CONST) || !(v->scale > 0.0f) || !isfinite(v->scale))
            return qf_error(QF_ERR_INVALID, "INT8 MatMul of two activations: input %s must be an int8 activation "
                            "with a scale (it has dtype %s, scale %g%s)", v->name, qf_dtype_info(v->dtype)->name,
                            (double)v->scale, (v->flags & QF_VALUE_CONST) ? ", constant" : "");
    }
    if (n->act != QF_ACT_NONE) return qf_error(QF_ERR_INVALID, "INT8 MatMul of two activations with a fused activation");
    if (y->dtype == QF_I8 ? !(y->scale > 0.0f) || !isfinite(y->scale) : y->dtype != QF_F32 && y->dtype != QF_F16)
        return qf_error(QF_ERR_INVALID, "INT8 output %s has dtype %s, scale %g", y->name,
                        qf_dtype_info(y->dtype)->name, (double)y->scale);
    return QF_OK;
}

bool qfi_matmul_product_fits(const qf_graph *g, const qf_node *n)
{
    const qf_value *a = qfi_in(g, n, 0), *b = qfi_in(g, n, 1);
    return a && b && a->ndim >= 2 && b->ndim >= 2 && a->dims[a->ndim - 1] <= QFI_INT8_PRODUCT_MAX_K;
}

qf_status qfi_matmul_geometry(const qf_graph *g, const qf_node *n, qfi_matmul_geom *geo)
{
    const qf_value *a = qfi_in(g, n, 0), *b = qfi_in(g, n, 1);
    QF_ASSERT(a && b);
    if (qfi_matmul_is_product(n)) {
        QF_CHECK(product_operands(g, n));
    } else if (n->precision == QF_PREC_INT8) {
        QF_CHECK(qfi_int8_operands(g, n, b->ndim ? b->dims[b->ndim - 1] : 0));
    } else {
        QF_CHECK(qfi_require_f32(g, n, a, "input A"));
        QF_CHECK(qfi_require_f32(g, n, b, "input B"));
    }
    if (a->ndim < 1 || b->ndim < 1)
        return qf_error(QF_ERR_INVALID, "operands must have at least 1 dim (A %s has %d, B %s has %d)", a->name,
                        a->ndim, b->name, b->ndim);
    memset(geo, 0, sizeof *geo);
    bool a_vec = a->ndim == 1, b_vec = b->ndim == 1;
    geo->M = a_vec ? 1 : a->dims[a->ndim - 2];
    geo->K = a->dims[a->ndim - 1];
    int64_t kb = b_vec ? b->dims[0] : b->dims[b->ndim - 2];
    geo->N = b_vec ? 1 : b->dims[b->ndim - 1];
    if (kb != geo->K)
        return qf_error(QF_ERR_INVALID, "inner dims disagree: A %s has K=%lld, B %s has K=%lld", a->name,
                        (long long)geo->K, b->name, (long long)kb);
    if (qfi_matmul_is_product(n) && (a_vec || b_vec || geo->K > QFI_INT8_PRODUCT_MAX_K))
        return qf_error(QF_ERR_UNSUPPORTED, "an INT8 MatMul of two activations takes operands of 2 or more dims and "
                        "K up to %d (A %s has %d dims, B %s %d, K=%lld)", QFI_INT8_PRODUCT_MAX_K, a->name, a->ndim,
                        b->name, b->ndim, (long long)geo->K);
    int na = a_vec ? 0 : a->ndim - 2, nb = b_vec ? 0 : b->ndim - 2;
    qf_status st = qfi_broadcast_shape(na, a->dims, nb, b->dims, &geo->nbatch, geo->batch);
    if (st != QF_OK) return qf_error_prefix(st, "batch dims");
    qfi_broadcast_strides(na, a->dims, geo->nbatch, geo->batch, geo->a_stride);
    qfi_broadcast_strides(nb, b->dims, geo->nbatch, geo->batch, geo->b_stride);
    geo->y_ndim = geo->nbatch;
    memcpy(geo->y_dims, geo->batch, (size_t)geo->nbatch * sizeof *geo->batch);
    if (!a_vec) geo->y_dims[geo->y_ndim++] = geo->M;
    if (!b_vec) geo->y_dims[geo->y_ndim++] = geo->N;
    return QF_OK;
}

static qf_status matmul_infer(qf_graph *g, qf_node *n)
{
    qfi_matmul_geom geo;
    QF_CHECK(qfi_matmul_geometry(g, n, &geo));
    qf_dtype dt = n->precision == QF_PREC_INT8 ? qfi_out(g, n, 0)->dtype : QF_F32;
    qfi_value_set_shape(qfi_out(g, n, 0), dt, geo.y_ndim, geo.y_dims);
    return QF_OK;
}

static int64_t matmul_flops(const qf_graph *g, const qf_node *n)
{
    qfi_matmul_geom geo;
    if (qfi_matmul_geometry(g, n, &geo) != QF_OK) return 0;
    int64_t flops = 2 * qfi_numel(geo.nbatch, geo.batch) * geo.M * geo.N * geo.K;
    /* Y's first dim is the batch when A is an activation batch */
    const qf_value *a = qfi_in(g, n, 0);
    if (g->batch > 0 && geo.y_ndim >= 2 && geo.y_dims[0] == g->batch && !(a->flags & QF_VALUE_CONST))
        flops /= g->batch;
    return flops;
}

/* INT8: a constant 2-D B (K,N), quantized along N, under an input of 2 or more dims. */
static bool matmul_int8_ok(const qf_graph *g, const qf_node *n)
{
    return qfi_in(g, n, 1)->ndim == 2 && qfi_in(g, n, 0)->ndim >= 2;
}

static void matmul_weight_layout(const qf_graph *g, const qf_node *n, int64_t *outer, int64_t *channels, int64_t *inner)
{
    const qf_value *w = qfi_in(g, n, 1);
    *outer = w->dims[0];
    *channels = w->dims[1];
    *inner = 1;
}

const qfi_op_desc qfi_op_matmul = {
    .parse = matmul_parse,
    .infer = matmul_infer,
    .flops = matmul_flops,
    .traits = QFI_OP_EPILOGUE,
    .int8 = QFI_INT8_COMPUTE,
    .int8_ok = matmul_int8_ok,
    .weight_layout = matmul_weight_layout,
    .typed = QFI_PREC_BIT(QF_PREC_INT8),
};
