/* --method auto: for every tensor, the candidate threshold (calibrators.c) whose
 * INT8 error costs least where it lands. The FP32 graph runs a batch on the CPU;
 * the observer takes each tensor as it is written, quantizes it at every
 * candidate and runs the Conv/Gemm/MatMul layers that read it alone on that
 * input (one-node graphs, lib/passes.c's helper), against their output from
 * the exact tensor. */
#include <math.h>
#include "calib_internal.h"
#include "quant_math.h"

#define K QF_CALIB_AUTO_CANDIDATES

/* One place a tensor's error is measured: a layer's output, or the tensor. */
typedef struct auto_term {
    int tensor;
    int node;               /* the reading layer; -1: the tensor itself */
    double noise[K];        /* sum of squared errors, per candidate */
    double signal;          /* sum of squares of the exact result */
} auto_term;

typedef struct auto_tensor {
    int entry;              /* in the table */
    float cand[K];
    bool seen;
} auto_tensor;

struct qf_auto_chooser {
    const qf_graph *g;
    int threads;
    int images;             /* real images of the batch being run */
    int *tensor_of_value;   /* -1: not judged */
    int n_tensors, n_terms;
    auto_tensor *tensors;
    auto_term *terms;
    float *x_q;             /* one tensor quantized */
    float *exact;           /* one layer's output from the exact tensor */
    qf_status st;           /* the first failure inside the observer, and its message */
    char msg[1024];
};

/* A layer whose output error a tensor's quantization is judged by: one INT8
 * computes, reading the tensor as its data. */
static bool judging_layer(const qf_graph *g, const qf_node *n, int v)
{
    return n->in[0] == v && qfi_int8_layer(g, n);
}

static bool is_graph_output(const qf_graph *g, int v)
{
    for (int i = 0; i < g->n_outputs; i++)
        if (g->outputs[i] == v) return true;
    return false;
}

void qf_auto_chooser_free(qf_auto_chooser *a)
{
    if (!a) return;
    free(a->tensor_of_value);
    free(a->tensors);
    free(a->terms);
    free(a->x_q);
    free(a->exact);
    free(a);
}

qf_status qf_auto_chooser_create(const qf_calib *c, const qf_calib_table *t, int threads, qf_auto_chooser **out)
{
    *out = NULL;
    const qf_graph *g = qfi_calib_graph(c);
    qf_auto_chooser *a = qfi_calloc(1, sizeof *a);
    if (!a) return QF_ERR_NOMEM;
    a->g = g;
    a->threads = threads;
    a->tensor_of_value = qfi_calloc((size_t)g->n_values + 1, sizeof *a->tensor_of_value);
    a->tensors = qfi_calloc((size_t)g->n_values + 1, sizeof *a->tensors);
    /* at most one term per tensor for itself and one per node (a layer reads one tensor as data) */
    a->terms = qfi_calloc((size_t)g->n_values + (size_t)g->n_nodes + 1, sizeof *a->terms);
    if (!a->tensor_of_value || !a->tensors || !a->terms) goto nomem;
    size_t largest = 1, largest_out = 1;
    for (int v = 0; v < g->n_values; v++) {
        a->tensor_of_value[v] = -1;
        const qf_histogram *h = qfi_calib_value_hist(c, v);
        int e = h ? qf_calib_table_find(t, g->values[v].name) : -1;
        if (e < 0) continue;
        int ti = a->n_tensors++;
        a->tensor_of_value[v] = ti;
        a->tensors[ti].entry = e;
        qf_calib_auto_candidates(h, a->tensors[ti].cand);
        if ((size_t)qf_value_numel(&g->values[v]) > largest) largest = (size_t)qf_value_numel(&g->values[v]);
        bool itself = is_graph_output(g, v), read = false;
        for (int i = 0; i < g->n_nodes; i++) {
            const qf_node *n = &g->nodes[i];
            bool reads = false;
            for (int k = 0; k < n->n_in; k++) reads |= n->in[k] == v;
            if (!reads) continue;
            read = true;
            if (!judging_layer(g, n, v)) {
                itself = true;
                continue;
            }
            a->terms[a->n_terms++] = (auto_term){.tensor = ti, .node = i};
            size_t on = (size_t)qf_value_numel(&g->values[n->out[0]]);
            if (on > largest_out) largest_out = on;
        }
        if (itself || !read) a->terms[a->n_terms++] = (auto_term){.tensor = ti, .node = -1};
    }
    a->x_q = qfi_calloc(largest, sizeof *a->x_q);
    a->exact = qfi_calloc(largest_out, sizeof *a->exact);
    if (!a->x_q || !a->exact) goto nomem;
    *out = a;
    return QF_OK;
nomem:
    qf_auto_chooser_free(a);
    return qf_error(QF_ERR_NOMEM, "calibration (auto): out of memory");
}

/* Elements of one image of value v, and how many images count (a value
 * without the batch dimension counts as one). */
static void image_split(const qf_auto_chooser *a, const qf_value *v, size_t *per, int *images)
{
    int64_t n = qf_value_numel(v);
    bool batched = a->g->batch > 0 && v->ndim >= 1 && v->dims[0] == a->g->batch;
    *per = (size_t)(batched ? n / a->g->batch : n);
    *images = batched ? a->images : 1;
}

/* sum (y - r)^2 over the counted images, image by image; with y NULL, sum r^2. */
static double sq_sum(const float *y, const float *r, size_t per, int images)
{
    double total = 0.0;
    for (int m = 0; m < images; m++) {
        double s = 0.0;
        for (size_t i = (size_t)m * per; i < (size_t)(m + 1) * per; i++) {
            double d = y ? (double)y[i] - (double)r[i] : (double)r[i];
            s += d * d;
        }
        total += s;
    }
    return total;
}

/* The first candidate equal to candidate k (its errors are the same). */
static int same_as(const auto_tensor *t, int k)
{
    int j = 0;
    while (t->cand[j] != t->cand[k]) j++;
    return j;
}

/* Measures one layer term: the node run alone on the exact tensor, then on each candidate's. */
static qf_status judge_layer(qf_auto_chooser *a, auto_term *term, const float *x, size_t n)
{
    const qf_graph *g = a->g;
    const auto_tensor *t = &a->tensors[term->tensor];
    const qf_node *nd = &g->nodes[term->node];
    qfi_one_node *one = qfi_calloc(1, sizeof *one);
    if (!one) return QF_ERR_NOMEM;
    if (!qfi_one_node_init(one, g, nd)) {
        free(one);
        return qf_error(QF_ERR_UNSUPPORTED, "%s: node %s: too many inputs to run alone", g->source, nd->name);
    }
    qf_engine_opts eo = {.device = QF_DEVICE_CPU, .threads = a->threads};
    qf_engine *e = NULL;
    qf_status st = qf_engine_create(&one->g, &eo, &e);
    size_t per;
    int images;
    image_split(a, &g->values[nd->out[0]], &per, &images);
    size_t out_n = (size_t)qf_value_numel(&g->values[nd->out[0]]);
    float *in = st == QF_OK ? qf_engine_input(e, 0) : NULL;
    if (st == QF_OK) {
        memcpy(in, x, n * sizeof *in);
        st = qf_engine_run(e);
    }
    if (st == QF_OK) {
        memcpy(a->exact, qf_engine_output(e, 0), out_n * sizeof *a->exact);
        term->signal += sq_sum(NULL, a->exact, per, images);
    }
    for (int k = 0; k < K && st == QF_OK; k++) {
        if (same_as(t, k) != k) continue;
        qfi_fake_quantize(in, x, n, t->cand[k]);
        if ((st = qf_engine_run(e)) == QF_OK) term->noise[k] += sq_sum(qf_engine_output(e, 0), a->exact, per, images);
    }
    qf_engine_free(e);
    free(one);
    return st;
}

static void observe(void *user, const qf_graph *g, int v, const void *data)
{
    qf_auto_chooser *a = user;
    int ti = a->tensor_of_value[v];
    if (ti < 0 || a->st != QF_OK) return;
    auto_tensor *t = &a->tensors[ti];
    t->seen = true;
    const float *x = data;
    size_t n = (size_t)qf_value_numel(&g->values[v]), per;
    int images;
    image_split(a, &g->values[v], &per, &images);
    for (int i = 0; i < a->n_terms; i++) {
        auto_term *term = &a->terms[i];
        if (term->tensor != ti) continue;
        if (term->node >= 0) {
            qf_status st = judge_layer(a, term, x, n);
            if (st != QF_OK) {
                a->st = st;
                snprintf(a->msg, sizeof a->msg, "%s", qf_error_message());
                return;
            }
            continue;
        }
        term->signal += sq_sum(NULL, x, per, images);
        for (int k = 0; k < K; k++) {
            if (same_as(t, k) != k) continue;
            qfi_fake_quantize(a->x_q, x, n, t->cand[k]);
            term->noise[k] += sq_sum(a->x_q, x, per, images);
        }
    }
}

qf_status qf_auto_chooser_run(qf_auto_chooser *a, const float *input, int images)
{
    const qf_graph *g = a->g;
    a->images = images > 0 && images < g->batch ? images : g->batch;
    qf_status st = qfi_run_observed(g, a->threads, input, observe, a);
    if (st == QF_OK && a->st != QF_OK) st = qf_error(a->st, "calibration (auto): %s", a->msg);
    return st;
}

void qf_auto_chooser_apply(const qf_auto_chooser *a, qf_calib_table *t, int64_t chosen[K])
{
    for (int ti = 0; ti < a->n_tensors; ti++) {
        const auto_tensor *at = &a->tensors[ti];
        if (!at->seen) continue;
        double score[K] = {0};
        for (int i = 0; i < a->n_terms; i++) {
            const auto_term *term = &a->terms[i];
            if (term->tensor != ti) continue;
            for (int k = 0; k < K; k++) {
                double noise = term->noise[same_as(at, k)];
                score[k] += term->signal > 0.0 ? noise / term->signal : noise;
            }
        }
        int best = 0;
        for (int k = 1; k < K; k++)
            if (score[k] < score[best]) best = k;
        t->entries[at->entry].amax[QF_CALIB_AUTO] = at->cand[best];
        if (chosen) chosen[best]++;
    }
}
