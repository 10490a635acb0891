/* QuantizeLinear and DequantizeLinear (int8 with a zero point; uint8 models
 * arrive shifted to int8 by lib/onnx_qop.c; per tensor, and per axis with
 * constant scale and zero-point vectors, as Q/DQ models carry their weights):
 * parsing and shape inference; also the operand rules of INT8 Conv, Gemm and
 * MatMul, which their geometry functions check. Kernels: runtime/cpu/qdq.c. */
#include <math.h>
#include "ops/ops.h"
#include "ops/nn.h"

static qf_status qdq_parse(qf_graph *g, qf_node *n)
{
    /* quantize.c's own graphs give only x (scale and zero point are the int8
     * value's); imported models give x, scale and an optional zero point */
    QF_CHECK(qfi_check_arity(g, n, 1, 3));
    if (qfi_attr_int(n, "block_size", 0) != 0)
        return qf_error(QF_ERR_UNSUPPORTED, "blocked quantization (block_size %lld) is not supported",
                        (long long)qfi_attr_int(n, "block_size", 0));
    int64_t odt = qfi_attr_int(n, "output_dtype", 0);
    if (n->op == QF_OP_QUANTIZE_LINEAR && odt != 0 && odt != qf_dtype_info(QF_I8)->onnx_type)
        return qf_error(QF_ERR_UNSUPPORTED, "output_dtype %lld: only 8-bit integers are supported",
                        (long long)odt);
    return QF_OK;
}

/* The quantized side of a Q/DQ node: Quantize's output, Dequantize's input. */
static const qf_value *q_side(const qf_graph *g, const qf_node *n)
{
    return n->op == QF_OP_QUANTIZE_LINEAR ? qfi_out(g, n, 0) : qfi_in(g, n, 0);
}

/* A scale: the input `name`, or (NULL) that of the quantized tensor `of`. */
static qf_status check_scale(const char *name, const char *of, float s)
{
    if (s > 0.0f && isfinite(s)) return QF_OK;
    return qf_error(QF_ERR_INVALID, "scale %s%s is %g; it must be positive and finite", name ? name : "of ",
                    name ? "" : of, (double)s);
}

/* The zero-point input, when given: a constant of the quantized side's integer
 * type (int8; int32 for a DequantizeLinear of int32, which must be 0). */
static qf_status zero_point_input(const qf_graph *g, const qf_node *n, const qf_value **out)
{
    const qf_value *zp = qfi_in(g, n, 2);
    *out = zp;
    if (!zp) return QF_OK;
    const qf_dtype want = q_side(g, n)->dtype == QF_I32 ? QF_I32 : QF_I8;
    if (zp->dtype != want)
        return qf_error(QF_ERR_UNSUPPORTED, "zero point %s has dtype %s; %s expected", zp->name,
                        qf_dtype_info(zp->dtype)->name, qf_dtype_info(want)->name);
    if (!(zp->flags & QF_VALUE_CONST) || !zp->data)
        return qf_error(QF_ERR_UNSUPPORTED, "zero point %s must be a constant", zp->name);
    if (want == QF_I32)
        for (int64_t i = 0; i < qf_value_numel(zp); i++)
            if (((const int32_t *)zp->data)[i] != 0)
                return qf_error(QF_ERR_UNSUPPORTED, "int32 zero point %s is not 0", zp->name);
    return QF_OK;
}

/* Zero point k of the input (int8 or int32 data), 0 without one. */
static int32_t zero_point_at(const qf_value *zp, int64_t k)
{
    if (!zp) return 0;
    return zp->dtype == QF_I32 ? ((const int32_t *)zp->data)[k] : ((const int8_t *)zp->data)[k];
}

qf_status qfi_qdq_params(const qf_graph *g, const qf_node *n, float *scale, int32_t *zero_point)
{
    const qf_value *sv = qfi_in(g, n, 1), *zp;
    float s;
    int32_t z;
    if (sv) {
        if (!(sv->flags & QF_VALUE_CONST) || !sv->data)
            return qf_error(QF_ERR_UNSUPPORTED, "scale %s must be a constant", sv->name);
        if (qf_value_numel(sv) != 1)
            return qf_error(QF_ERR_UNSUPPORTED,
                            "scale %s has %lld elements; per-axis quantization is supported only for constant weights",
                            sv->name, (long long)qf_value_numel(sv));
        if (!qf_dtype_info(sv->dtype)->is_float)
            return qf_error(QF_ERR_INVALID, "scale %s has dtype %s", sv->name,
                            qf_dtype_info(sv->dtype)->name);
        QF_CHECK(qfi_value_scalar_f32(sv, &s));
        QF_CHECK(zero_point_input(g, n, &zp));
        if (zp && qf_value_numel(zp) != 1)
            return qf_error(QF_ERR_INVALID, "zero point %s has %lld elements for one scale",
                            zp->name, (long long)qf_value_numel(zp));
        z = zero_point_at(zp, 0);
    } else {
        s = q_side(g, n)->scale;
        z = q_side(g, n)->zero_point;
    }
    QF_CHECK(check_scale(sv ? sv->name : NULL, q_side(g, n)->name, s));
    if (scale) *scale = s;
    if (zero_point) *zero_point = z;
    return QF_OK;
}

qf_status qfi_qdq_scale(const qf_graph *g, const qf_node *n, float *scale) { return qfi_qdq_params(g, n, scale, NULL); }

/* A node whose scale is a vector of other than one element: per axis (one
 * element is per tensor whatever the axis says). */
static bool per_axis(const qf_graph *g, const qf_node *n)
{
    const qf_value *sv = qfi_in(g, n, 1);
    return sv && sv->ndim == 1 && sv->dims[0] != 1;
}

qf_status qfi_qdq_geometry(const qf_graph *g, const qf_node *n, qfi_qdq_geom *geo)
{
    memset(geo, 0, sizeof *geo);
    geo->s = &geo->s1;
    geo->z = &geo->z1;
    geo->channels = geo->inner = 1;
    if (!per_axis(g, n)) {
        int32_t z;
        QF_CHECK(qfi_qdq_params(g, n, &geo->s1, &z));
        geo->z1 = (int8_t)z;
        return QF_OK;
    }
    const qf_value *x = qfi_in(g, n, 0), *sv = qfi_in(g, n, 1), *zp;
    if (!(sv->flags & QF_VALUE_CONST) || !sv->data)
        return qf_error(QF_ERR_UNSUPPORTED, "per-axis scale %s must be a constant", sv->name);
    if (sv->dtype != QF_F32)
        return qf_error(QF_ERR_UNSUPPORTED, "per-axis scale %s has dtype %s; f32 expected",
                        sv->name, qf_dtype_info(sv->dtype)->name);
    int64_t axis = qfi_attr_int(n, "axis", 1);
    if (axis < -x->ndim || axis >= x->ndim)
        return qf_error(QF_ERR_INVALID, "axis %lld is out of range for the %d-D input %s",
                        (long long)axis, x->ndim, x->name);
    if (axis < 0) axis += x->ndim;
    if (sv->dims[0] != x->dims[axis])
        return qf_error(QF_ERR_INVALID, "scale %s has %lld elements for dim %lld (%lld) of %s",
                        sv->name, (long long)sv->dims[0], (long long)axis,
                        (long long)x->dims[axis], x->name);
    QF_CHECK(zero_point_input(g, n, &zp));
    if (zp && qf_value_numel(zp) != sv->dims[0])
        return qf_error(QF_ERR_INVALID, "zero point %s has %lld elements for %lld scales",
                        zp->name, (long long)qf_value_numel(zp), (long long)sv->dims[0]);
    const float *s = sv->data;
    for (int64_t c = 0; c < sv->dims[0]; c++)
        if (!(s[c] > 0.0f) || !isfinite(s[c]))
            return qf_error(QF_ERR_INVALID, "scale %lld of %s is %g; it must be positive and finite",
                            (long long)c, sv->name, (double)s[c]);
    geo->s = s;
    geo->z = zp && zp->dtype == QF_I8 ? (const int8_t *)zp->data : NULL;
    geo->channels = sv->dims[0];
    geo->axis = (int)axis;
    for (int d = (int)axis + 1; d < x->ndim; d++) geo->inner *= x->dims[d];
    return QF_OK;
}

static qf_status qdq_infer(qf_graph *g, qf_node *n)
{
    const qf_value *x = qfi_in(g, n, 0);
    if (n->op == QF_OP_QUANTIZE_LINEAR) {
        if (x->dtype != QF_F32 && x->dtype != QF_F16)
            return qf_error(QF_ERR_UNSUPPORTED, "input %s has dtype %s; f32 or f16 expected",
                            x->name, qf_dtype_info(x->dtype)->name);
        qf_value *y = qfi_out(g, n, 0);
        qfi_value_set_shape(y, QF_I8, x->ndim, x->dims);
        qfi_qdq_geom geo;
        QF_CHECK(qfi_qdq_geometry(g, n, &geo));
        /* an imported model names its parameters as inputs: they become the value's */
        if (qfi_in(g, n, 1) && geo.channels == 1) {
            y->scale = geo.s1;
            y->zero_point = geo.z1;
        }
        return QF_OK;
    }
    if (x->dtype != QF_I8 && !(x->dtype == QF_I32 && (x->flags & QF_VALUE_CONST)))
        return qf_error(QF_ERR_UNSUPPORTED, "input %s has dtype %s; int8 expected", x->name,
                        qf_dtype_info(x->dtype)->name);
    qfi_qdq_geom geo;
    QF_CHECK(qfi_qdq_geometry(g, n, &geo));
    /* ONNX: the output has the scale's type; qforge's FP16 regions dequantize to half */
    const qf_value *sv = qfi_in(g, n, 1);
    if (x->dtype == QF_I32 && (!sv || sv->dtype != QF_F32))
        return qf_error(QF_ERR_UNSUPPORTED, "an int32 input %s needs an f32 scale", x->name);
    bool half = sv ? sv->dtype == QF_F16 : n->precision == QF_PREC_FP16;
    qfi_value_set_shape(qfi_out(g, n, 0), half ? QF_F16 : QF_F32, x->ndim, x->dims);
    return QF_OK;
}

/* ---- INT8 Conv / Gemm / MatMul operands -------------------------------------------- */

static qf_status want(const qf_graph *g, const qf_node *n, const qf_value *v, const char *role, qf_dtype dt,
                      bool constant)
{
    if (v->dtype != dt)
        return qf_error(QF_ERR_INVALID, "INT8 %s %s has dtype %s; %s expected", role, v->name,
                        qf_dtype_info(v->dtype)->name, qf_dtype_info(dt)->name);
    if (constant && (!(v->flags & QF_VALUE_CONST) || !v->data))
        return qf_error(QF_ERR_INVALID, "INT8 %s %s must be a constant", role, v->name);
    if (!constant && dt == QF_I8 && (!(v->scale > 0.0f) || !isfinite(v->scale)))
        return qf_error(QF_ERR_INVALID, "INT8 %s %s has no valid scale (%g)", role, v->name, (double)v->scale);
    return QF_OK;
}

qf_status qfi_int8_operands(const qf_graph *g, const qf_node *n, int64_t channels)
{
    const qf_value *x = qfi_in(g, n, 0), *w = qfi_in(g, n, 1), *b = qfi_in(g, n, 2), *s = qfi_in(g, n, 3),
                   *r = qfi_in(g, n, 4), *y = qfi_out(g, n, 0);
    if (!s) return qf_error(QF_ERR_INVALID, "INT8 node has no weight scales");
    QF_CHECK(want(g, n, x, "input", QF_I8, false));
    QF_CHECK(want(g, n, w, "weight", QF_I8, true));
    QF_CHECK(want(g, n, s, "weight scales", QF_F32, true));
    if (qf_value_numel(s) != channels)
        return qf_error(QF_ERR_INVALID, "weight scales %s have %lld elements for %lld channels", s->name,
                        (long long)qf_value_numel(s), (long long)channels);
    const float *sd = s->data;
    for (int64_t c = 0; c < channels; c++)
        if (!(sd[c] > 0.0f) || !isfinite(sd[c]))
            return qf_error(QF_ERR_INVALID, "weight scale %lld of %s is %g", (long long)c, s->name, (double)sd[c]);
    if (b) {
        QF_CHECK(want(g, n, b, "bias", QF_I32, true));
        if (qf_value_numel(b) != channels)
            return qf_error(QF_ERR_INVALID, "INT8 bias %s has %lld elements for %lld channels", b->name,
                            (long long)qf_value_numel(b), (long long)channels);
    }
    if (r) QF_CHECK(want(g, n, r, "residual", QF_I8, false));
    if (y->dtype == QF_I8) QF_CHECK(want(g, n, y, "output", QF_I8, false));
    else if (y->dtype != QF_F32 && y->dtype != QF_F16)
        return qf_error(QF_ERR_INVALID, "INT8 output %s has dtype %s", y->name, qf_dtype_info(y->dtype)->name);
    return QF_OK;
}

/* The conversions handle their dtypes themselves, whatever region they sit in. */
const qfi_op_desc qfi_op_quantize_linear = {
    .parse = qdq_parse,
    .infer = qdq_infer,
    .traits = QFI_OP_CONVERSION | QFI_OP_KEEP_FP32,
    .typed = QFI_PREC_BIT(QF_PREC_FP16) | QFI_PREC_BIT(QF_PREC_INT8),
};
const qfi_op_desc qfi_op_dequantize_linear = {
    .parse = qdq_parse,
    .infer = qdq_infer,
    .traits = QFI_OP_CONVERSION | QFI_OP_KEEP_FP32,
    .typed = QFI_PREC_BIT(QF_PREC_FP16) | QFI_PREC_BIT(QF_PREC_INT8),
};
