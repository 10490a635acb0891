/* PENDING: placeholder until the op is implemented (replace this whole file). */
#include "ops/ops.h"

qf_status qfi_reduce_mean_parse(qf_graph *g, qf_node *n) { return qf_error(QF_ERR_UNSUPPORTED, "%s: op %s not implemented yet", n->name, qf_op_name(n->op)); }
qf_status qfi_reduce_mean_infer(qf_graph *g, qf_node *n) { return qf_error(QF_ERR_UNSUPPORTED, "%s: op %s not implemented yet", n->name, qf_op_name(n->op)); }
