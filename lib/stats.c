/* Graph summary for `qforge info`: op counts, parameter count, FLOPs per image. */
#include "internal.h"

void qf_graph_stats_compute(const qf_graph *g, qf_graph_stats *st)
{
    memset(st, 0, sizeof *st);
    for (int i = 0; i < g->n_nodes; i++) {
        const qf_node *n = &g->nodes[i];
        st->op_count[n->op]++;
        if (qfi_ops[n->op]->flops) st->flops += qfi_ops[n->op]->flops(g, n);
        /* parameters: constant inputs of compute nodes (weights, biases) */
        for (int k = 1; k < n->n_in; k++) {
            int v = n->in[k];
            if (v >= 0 && (g->values[v].flags & QF_VALUE_CONST) && g->values[v].dtype != QF_I64 &&
                g->values[v].dtype != QF_I32)
                st->params += qf_value_numel(&g->values[v]);
        }
    }
}
