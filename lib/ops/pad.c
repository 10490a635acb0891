/* Pad: constant, reflect, edge and wrap padding; negative pads crop. Pads and
 * value were attributes before opset 11, inputs since; opset 18 adds axes. The
 * CPU kernel is runtime/cpu/pad.c. */
#include "ops/ops.h"
#include "ops/tensor_ops.h"

static qf_status pad_parse(qf_graph *g, qf_node *n)
{
    bool legacy = g->opset < 11;
    if ((legacy ? n->n_in != 1 : n->n_in < 2 || n->n_in > 4) || n->n_out != 1)
        return qf_error(QF_ERR_INVALID, "%d inputs and %d outputs at opset %lld", n->n_in, n->n_out,
                        (long long)g->opset);
    const char *mode = qfi_attr_string(n, "mode", "constant");
    static const char *const modes[] = {
        [QFI_PADMODE_CONSTANT] = "constant", [QFI_PADMODE_REFLECT] = "reflect", [QFI_PADMODE_EDGE] = "edge", [QFI_PADMODE_WRAP] = "wrap"};
    int m = -1;
    for (int i = 0; i < (int)QF_ARRAY_LEN(modes); i++)
        if (strcmp(mode, modes[i]) == 0) m = i;
    if (m < 0) return qf_error(QF_ERR_INVALID, "unknown mode '%s'", mode);
    qfi_pad_params *p = qfi_calloc(1, sizeof *p);
    if (!p) return QF_ERR_NOMEM;
    p->mode = (qfi_pad_mode)m;
    p->n_attr_pads = -1;
    if (legacy) {
        int cnt;
        const int64_t *pads = qfi_attr_ints(n, "pads", &cnt);
        if (!pads || cnt > 2 * QF_MAX_DIMS) {
            free(p);
            return qf_error(QF_ERR_INVALID, "missing or oversized pads attribute");
        }
        p->n_attr_pads = cnt;
        memcpy(p->attr_pads, pads, (size_t)cnt * sizeof *pads);
        p->value = qfi_attr_float(n, "value", 0.0f);
    }
    return qfi_node_set_params(n, p, QF_OK);
}

static qf_status pad_infer(qf_graph *g, qf_node *n)
{
    qfi_pad_params *p = n->params;
    const qf_value *x = qfi_in(g, n, 0);
    if (!x) return qf_error(QF_ERR_INVALID, "missing input");
    int64_t pads[2 * QF_MAX_DIMS], axes[QF_MAX_DIMS];
    int np, na = 0;
    if (p->n_attr_pads >= 0) {
        np = p->n_attr_pads;
        memcpy(pads, p->attr_pads, sizeof pads);
    } else {
        if (!qfi_in(g, n, 1)) return qf_error(QF_ERR_INVALID, "no pads");
        QF_CHECK(qfi_const_ints(g, n, 1, pads, 2 * QF_MAX_DIMS, &np));
        QF_CHECK(qfi_const_ints(g, n, 3, axes, QF_MAX_DIMS, &na));
    }
    if (na == 0) { /* no axes: pads cover every dim */
        na = x->ndim;
        for (int i = 0; i < na; i++) axes[i] = i;
    }
    if (np != 2 * na) return qf_error(QF_ERR_INVALID, "%d pads for %d axes", np, na);
    int64_t end[QF_MAX_DIMS] = {0};
    for (int d = 0; d < x->ndim; d++) p->begin[d] = 0;
    for (int i = 0; i < na; i++) {
        int d;
        QF_CHECK(qfi_axis_norm(g, n, axes[i], x->ndim, &d));
        /* beyond any tensor's size, and sums with them could overflow */
        if (pads[i] < -QF_MAX_TENSOR_BYTES || pads[i] > QF_MAX_TENSOR_BYTES || pads[na + i] < -QF_MAX_TENSOR_BYTES ||
            pads[na + i] > QF_MAX_TENSOR_BYTES)
            return qf_error(QF_ERR_INVALID, "pads %lld, %lld of dim %d are out of range", (long long)pads[i],
                            (long long)pads[na + i], d);
        p->begin[d] = pads[i];
        end[d] = pads[na + i];
    }
    int64_t dims[QF_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) {
        dims[d] = x->dims[d] + p->begin[d] + end[d];
        if (dims[d] < 0) return qf_error(QF_ERR_INVALID, "pads crop dim %d of %s below zero", d, x->name);
        if (p->mode != QFI_PADMODE_CONSTANT && x->dims[d] == 0 && dims[d] > 0)
            return qf_error(QF_ERR_INVALID, "cannot %s-pad the empty dim %d",
                            p->mode == QFI_PADMODE_EDGE   ? "edge"
                            : p->mode == QFI_PADMODE_WRAP ? "wrap"
                                                          : "reflect",
                            d);
    }
    const qf_value *v = qfi_in(g, n, 2);
    if (v && (v->dtype != x->dtype || qf_value_numel(v) > 1))
        return qf_error(QF_ERR_INVALID, "constant_value %s must be a scalar of dtype %s", v->name,
                        qf_dtype_info(x->dtype)->name);
    if (p->n_attr_pads >= 0 && x->dtype != QF_F32 && p->value != 0.0f)
        return qf_error(QF_ERR_UNSUPPORTED, "value attribute on a %s tensor", qf_dtype_info(x->dtype)->name);
    qfi_value_set_shape(qfi_out(g, n, 0), x->dtype, x->ndim, dims);
    return QF_OK;
}

const qfi_op_desc qfi_op_pad = {.parse = pad_parse, .infer = pad_infer, .int8 = QFI_INT8_PASS};
