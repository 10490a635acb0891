/* Constant: a tensor given by an attribute (value, value_float(s),
 * value_int(s)). Shape inference and constant folding turn it into a constant
 * value; the CPU kernel (runtime/cpu/constant.c) serves unfolded graphs. */
#include "ops/ops.h"
#include "ops/tensor_ops.h"

static qf_status constant_parse(qf_graph *g, qf_node *n)
{
    if (n->n_in != 0 || n->n_out != 1) return qf_error(QF_ERR_INVALID, "needs no inputs and 1 output");
    static const struct {
        const char *name;
        qf_attr_type type;
        qfi_constant_kind kind;
    } kinds[] = {
        {"value", QF_ATTR_TENSOR, QFI_CONST_TENSOR}, {"value_float", QF_ATTR_FLOAT, QFI_CONST_FLOAT},
        {"value_floats", QF_ATTR_FLOATS, QFI_CONST_FLOATS}, {"value_int", QF_ATTR_INT, QFI_CONST_INT},
        {"value_ints", QF_ATTR_INTS, QFI_CONST_INTS},
    };
    int found = -1;
    qfi_constant_kind kind = QFI_CONST_TENSOR;
    for (int i = 0; i < n->n_attr; i++) {
        const qf_attr *at = &n->attrs[i];
        if (strcmp(at->name, "sparse_value") == 0 || strncmp(at->name, "value_string", 12) == 0)
            return qf_error(QF_ERR_UNSUPPORTED, "attribute %s", at->name);
        for (size_t k = 0; k < QF_ARRAY_LEN(kinds); k++) {
            if (strcmp(at->name, kinds[k].name) != 0) continue;
            if (at->type != kinds[k].type || (at->type == QF_ATTR_TENSOR && !at->t))
                return qf_error(QF_ERR_INVALID, "attribute %s has the wrong type", at->name);
            if (found >= 0) return qf_error(QF_ERR_INVALID, "more than one value attribute");
            found = i;
            kind = kinds[k].kind;
        }
    }
    if (found < 0) return qf_error(QF_ERR_INVALID, "no value attribute");
    qfi_constant_params *p = qfi_calloc(1, sizeof *p);
    if (!p) return QF_ERR_NOMEM;
    p->kind = kind;
    p->attr = found;
    return qfi_node_set_params(n, p, QF_OK);
}

static qf_status constant_infer(qf_graph *g, qf_node *n)
{
    const qfi_constant_params *p = n->params;
    const qf_attr *at = &n->attrs[p->attr];
    qf_value *y = qfi_out(g, n, 0);
    int64_t len = at->n;
    switch (p->kind) {
    case QFI_CONST_TENSOR: qfi_value_set_shape(y, at->t->dtype, at->t->ndim, at->t->dims); break;
    case QFI_CONST_FLOAT: qfi_value_set_shape(y, QF_F32, 0, NULL); break;
    case QFI_CONST_FLOATS: qfi_value_set_shape(y, QF_F32, 1, &len); break;
    case QFI_CONST_INT: qfi_value_set_shape(y, QF_I64, 0, NULL); break;
    case QFI_CONST_INTS: qfi_value_set_shape(y, QF_I64, 1, &len); break;
    }
    return QF_OK;
}

const qfi_op_desc qfi_op_constant = {.parse = constant_parse, .infer = constant_infer, .traits = QFI_OP_KEEP_FP32};
