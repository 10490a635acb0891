/* The INT8 layers' inputs as calibration images bring them, for the passes
 * that learn from images before quantizing (bias correction, quant/bias.c;
 * learned rounding, quant/adaround.c): the plan qf_quantize would make names
 * the layers and their inputs' INT8 form, and a batch of the FP32 graph hands
 * each layer its exact input beside that input as INT8 holds it. */
#include "quant_internal.h"
#include "quant_math.h"

void qfi_layer_feed_free(qfi_layer_feed *f)
{
    free(f->layers);
    free(f->xq);
    memset(f, 0, sizeof *f);
}

qf_status qfi_layer_feed_init(qfi_layer_feed *f, const qf_graph *g, const qf_calib_table *t, const qf_quant_opts *o,
                              int threads, const char *what)
{
    memset(f, 0, sizeof *f);
    f->g = g;
    f->threads = threads;
    f->what = what;
    qf_quant_opts po = *o;
    po.precision = QF_PREC_INT8;
    qfi_qplan p;
    /* (the plan only reads the graph) */
    QF_CHECK(qfi_quant_plan((qf_graph *)g, t, &po, &p));
    f->layers = qfi_calloc((size_t)g->n_nodes + 1, sizeof *f->layers);
    size_t largest = 1;
    for (int i = 0; f->layers && i < g->n_nodes; i++) {
        const qfi_qnode *qn = &p.nodes[i];
        if (qn->role != QFI_QROLE_ANCHOR) continue;
        const int x = g->nodes[i].in[0];
        const qfi_qvalue *qx = &p.values[x];
        f->layers[f->n++] = (qfi_feed_layer){.node = i, .bias_add = qn->bias_add, .residual = qn->residual,
                                             .act = qn->act, .act_lo = qn->act_lo, .act_hi = qn->act_hi,
                                             .scale = qx->scale, .zero_point = qx->zero_point,
                                             .no_range = qx->no_range};
        size_t n = (size_t)qf_value_numel(&g->values[x]);
        if (n > largest) largest = n;
    }
    qfi_quant_plan_free(&p);
    f->xq = f->layers ? qfi_calloc(largest, sizeof *f->xq) : NULL;
    if (!f->xq) {
        qfi_layer_feed_free(f);
        return qf_error(QF_ERR_NOMEM, "%s: out of memory", what);
    }
    return QF_OK;
}

static void observe(void *user, const qf_graph *g, int v, const void *data)
{
    qfi_layer_feed *f = user;
    if (f->st != QF_OK) return;
    const size_t n = (size_t)qf_value_numel(&g->values[v]);
    bool quantized = false;
    for (int k = 0; k < f->n; k++) {
        const qfi_feed_layer *l = &f->layers[k];
        if (g->nodes[l->node].in[0] != v) continue;
        if (!quantized) { /* layers reading one value share its INT8 form */
            if (l->no_range)
                memset(f->xq, 0, n * sizeof *f->xq);
            else
                qfi_fake_quantize_zp(f->xq, data, n, l->scale, l->zero_point);
            quantized = true;
        }
        qf_status st = f->fn(f->user, k, data, f->xq, n, f->images);
        if (st != QF_OK) {
            f->st = st;
            snprintf(f->msg, sizeof f->msg, "%s", qf_error_message());
            return;
        }
    }
}

qf_status qfi_layer_feed_run(qfi_layer_feed *f, const float *input, int images, qfi_feed_fn fn, void *user)
{
    f->images = images > 0 && images < f->g->batch ? images : f->g->batch;
    f->fn = fn;
    f->user = user;
    f->st = QF_OK;
    qf_status st = qfi_run_observed(f->g, f->threads, input, observe, f);
    if (st == QF_OK && f->st != QF_OK) st = qf_error(f->st, "%s: %s", f->what, f->msg);
    return st;
}
