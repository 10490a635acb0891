/* The op table: every op of include/qforge/ops.def with its ONNX name and its
 * descriptor (defined in the op's file in lib/ops/), plus the questions asked
 * of ops as a whole: names, traits, precisions, the f32 view. */
#include "internal.h"
#include "ops/ops.h"

const qfi_op_desc *const qfi_ops[QF_OP_COUNT] = {
#define QF_OP(id, onnx_name, desc, kernels) [QF_OP_##id] = &qfi_op_##desc,
#include "qforge/ops.def"
#undef QF_OP
};

static const char *const op_names[] = {
#define QF_OP(id, onnx_name, desc, kernels) [QF_OP_##id] = onnx_name,
#include "qforge/ops.def"
#undef QF_OP
};
_Static_assert(QF_ARRAY_LEN(op_names) == QF_OP_COUNT, "ops.def and qf_op disagree");

const char *qf_op_name(qf_op op)
{
    return (unsigned)op < QF_OP_COUNT ? op_names[op] : "?";
}

bool qf_op_lookup(const char *onnx_name, qf_op *out)
{
    for (int i = 0; i < QF_OP_COUNT; i++) {
        if (strcmp(op_names[i], onnx_name) == 0) {
            *out = (qf_op)i;
            return true;
        }
    }
    return false;
}

bool qf_op_is_conversion(qf_op op)
{
    return (unsigned)op < QF_OP_COUNT && (qfi_ops[op]->traits & QFI_OP_CONVERSION);
}

bool qf_op_has_epilogue(qf_op op)
{
    return (unsigned)op < QF_OP_COUNT && (qfi_ops[op]->traits & QFI_OP_EPILOGUE);
}

unsigned qf_op_precisions(qf_op op)
{
    if ((unsigned)op >= QF_OP_COUNT) return 0;
    const qfi_op_desc *d = qfi_ops[op];
    unsigned p = QFI_PREC_BIT(QF_PREC_FP32) | d->typed;
    if (!(d->traits & QFI_OP_KEEP_FP32)) p |= QFI_PREC_BIT(QF_PREC_FP16);
    if (d->int8 != QFI_INT8_NONE) p |= QFI_PREC_BIT(QF_PREC_INT8);
    return p;
}

bool qfi_node_f32_view(const qf_node *n)
{
    if (n->precision == QF_PREC_FP32 || (unsigned)n->precision >= QF_PRECISION_COUNT) return false;
    return !(qfi_ops[n->op]->typed & QFI_PREC_BIT(n->precision));
}

void qfi_f32_view_init(const qf_graph *g, qf_graph *view, qf_value *values)
{
    *view = *g;
    memcpy(values, g->values, (size_t)g->n_values * sizeof *values);
    for (int v = 0; v < g->n_values; v++) values[v].dtype = qfi_f32_view_dtype(&g->values[v]);
    view->values = values;
}

bool qfi_int8_layer(const qf_graph *g, const qf_node *n)
{
    const qfi_op_desc *d = qfi_ops[n->op];
    if (d->int8 != QFI_INT8_COMPUTE || n->n_in < 2 || n->n_out != 1 || n->out[0] < 0 || n->in[0] < 0) return false;
    if (g->values[n->in[0]].flags & QF_VALUE_CONST) return false;
    for (int k = 1; k < n->n_in; k++)
        if (n->in[k] >= 0 && (!(g->values[n->in[k]].flags & QF_VALUE_CONST) || n->in[k] == n->in[0])) return false;
    return !d->int8_ok || d->int8_ok(g, n);
}
