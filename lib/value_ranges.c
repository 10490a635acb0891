/* Static value ranges for INT8 zero points: an interval holding each value of
 * a prepared FP32 graph, from the graph alone (each op's qfi_op_desc.range),
 * so that a one-sided activation (after Relu, ReLU6, HardSwish, SiLU, a
 * sigmoid gate) can spend all 256 INT8 levels on the side it has; and the
 * rule that gives a two-sided one its calibrated minimum instead. Read by
 * quant/assign.c, which gives the zero points, and calib/auto.c, which judges
 * thresholds on the grid they make. */
#include <math.h>
#include "internal.h"
#include "qforge/calib.h"
#include "quant_math.h"

#define UNBOUNDED ((qfi_range){-INFINITY, INFINITY})

/* A float constant's extremes; anything else is unbounded. */
static qfi_range const_range(const qf_value *v)
{
    if (v->dtype != QF_F32 || !v->data || qf_value_numel(v) == 0) return UNBOUNDED;
    const float *d = v->data;
    qfi_range r = {d[0], d[0]};
    for (int64_t i = 1; i < qf_value_numel(v); i++) r.lo = fminf(r.lo, d[i]), r.hi = fmaxf(r.hi, d[i]);
    return r.lo == r.lo && r.hi == r.hi ? r : UNBOUNDED; /* NaN: unknown */
}

/* The range of node n's outputs from its inputs' (r, by value). */
static qfi_range node_range(const qf_graph *g, const qf_node *n, const qfi_range *r)
{
    const qfi_op_desc *d = qfi_ops[n->op];
    qfi_range in[QFI_RANGE_MAX_INPUTS];
    if (n->n_in > QFI_RANGE_MAX_INPUTS) return UNBOUNDED;
    for (int k = 0; k < n->n_in; k++) in[k] = n->in[k] >= 0 ? r[n->in[k]] : UNBOUNDED;
    if (d->range) return d->range(g, n, in);
    if (d->int8 != QFI_INT8_PASS && d->int8 != QFI_INT8_REQUANT) return UNBOUNDED;
    /* values moved, selected or averaged (pads and averages may add zeros) */
    qfi_range u = {0.0f, 0.0f};
    for (int k = 0; k < n->n_in; k++) {
        const qf_value *v = n->in[k] >= 0 ? &g->values[n->in[k]] : NULL;
        if (!v || v->dtype != QF_F32) continue; /* shapes, indices */
        u.lo = fminf(u.lo, in[k].lo), u.hi = fmaxf(u.hi, in[k].hi);
    }
    return u;
}

qf_status qfi_value_ranges(const qf_graph *g, qfi_range **out)
{
    qfi_range *r = qfi_calloc((size_t)g->n_values + 1, sizeof *r);
    *out = r;
    if (!r) return QF_ERR_NOMEM;
    for (int v = 0; v < g->n_values; v++)
        r[v] = g->values[v].flags & QF_VALUE_CONST ? const_range(&g->values[v]) : UNBOUNDED;
    for (int i = 0; i < g->n_nodes; i++) { /* topological order */
        const qf_node *n = &g->nodes[i];
        qfi_range y = node_range(g, n, r);
        if (!(y.lo <= y.hi)) y = UNBOUNDED; /* NaN from inf - inf */
        for (int k = 0; k < n->n_out; k++)
            if (n->out[k] >= 0 && !(g->values[n->out[k]].flags & QF_VALUE_CONST)) r[n->out[k]] = y;
    }
    return QF_OK;
}

void qfi_quant_act_params(float amax, float lo, bool asymmetric, float *scale, int32_t *zero_point)
{
    *scale = qf_calib_scale(amax);
    *zero_point = 0;
    if (!asymmetric || !(amax >= QF_CALIB_AMAX_MIN) || !(lo > -amax)) return;
    if (lo > 0.0f) lo = 0.0f; /* 0 stays exact: padding and Relu hold it */
    const float s = (amax - lo) / 255.0f;
    if (!(s >= 0x1p-126f)) return; /* no normal scale */
    *scale = s;
    *zero_point = -128 - (int32_t)rintf(lo / s); /* lo is stored as -128; in [-128, 0] */
}

float qfi_quant_act_lo(float graph_lo, float data_min, float amax)
{
    /* The graph's bound holds for any input, so it wins wherever it helps; a
     * data minimum at or below -amax would give the symmetric grid anyway. */
    return graph_lo > -amax || !(data_min > -amax) ? graph_lo : data_min;
}
