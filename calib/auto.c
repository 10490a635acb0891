/* --method auto: for every tensor, the candidate threshold (calibrators.c) whose
 * INT8 error costs least where it lands. The FP32 graph runs a batch; the
 * observer takes each tensor as it is written, quantizes it at every
 * candidate and runs the Conv/Gemm/MatMul layers that read it alone on that
 * input (one-node graphs, lib/passes.c's helper), against their output from
 * the exact tensor, which the graph's own run of the layer provides. The
 * engines run where qf_auto_chooser_set_device says (the CPU by default);
 * quantizing and summing run on the host, image by image. */
#include <math.h>
#include "calib_internal.h"
#include "quant_math.h"

#define K QF_CALIB_AUTO_CANDIDATES

/* Host loops over fewer elements than this stay on one thread (starting
 * threads costs more than they save). */
#define PARALLEL_MIN_ELEMENTS ((size_t)1 << 16)

/* One place a tensor's error is measured: a layer's output, or the tensor. */
typedef struct auto_term {
    int tensor;
    int node;               /* the reading layer; -1: the tensor itself */
    double noise[K];        /* sum of squared errors, per candidate */
    double signal;          /* sum of squares of the exact result */
    qfi_one_node *one;      /* the layer alone, reading `rows` rows of its input */
    qf_engine *e;           /* its engine (kept across batches where it runs on a device) */
    int rows;
    float *held;            /* those rows of the input, from its observation until the layer's output's */
} auto_term;

typedef struct auto_tensor {
    int entry;              /* in the table */
    float cand[K];
    float lo;               /* the graph's lower bound of the tensor (lib/value_ranges.c); -inf: none */
    float data_min;         /* the smallest value calibration saw (the table's); NAN: none */
    /* the grid each candidate puts the tensor on (qf_auto_chooser_set_zero_points) */
    float scale[K];
    int32_t zero_point[K];
    bool seen;
} auto_tensor;

struct qf_auto_chooser {
    const qf_graph *g;
    qf_engine_opts eo;      /* where the graph and the layers run; threads also of the host loops */
    qf_engine *graph;       /* the FP32 graph with the observer, built at the first batch */
    bool keep;              /* layer engines are kept across batches (on a device, while memory lasts) */
    int images;             /* real images of the batch being run */
    int *tensor_of_value;   /* -1: not judged */
    int *term_of_output;    /* the layer term whose layer writes each value; -1: none */
    int n_tensors, n_terms;
    auto_tensor *tensors;
    auto_term *terms;
    float *exact;           /* a layer's output from the exact tensor, where the graph's was not seen */
    size_t largest_out;     /* elements of the largest layer output */
    double *part;           /* per image sums, g->batch of them */
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

static void free_engine(auto_term *term)
{
    qf_engine_free(term->e);
    term->e = NULL;
}

void qf_auto_chooser_free(qf_auto_chooser *a)
{
    if (!a) return;
    for (int i = 0; i < a->n_terms; i++) {
        free_engine(&a->terms[i]);
        free(a->terms[i].one);
        free(a->terms[i].held);
    }
    qf_engine_free(a->graph);
    free(a->tensor_of_value);
    free(a->term_of_output);
    free(a->tensors);
    free(a->terms);
    free(a->exact);
    free(a->part);
    free(a);
}

qf_status qf_auto_chooser_create(const qf_calib *c, const qf_calib_table *t, int threads, qf_auto_chooser **out)
{
    *out = NULL;
    const qf_graph *g = qfi_calib_graph(c);
    qf_auto_chooser *a = qfi_calloc(1, sizeof *a);
    if (!a) return QF_ERR_NOMEM;
    a->g = g;
    a->eo = (qf_engine_opts){.device = QF_DEVICE_CPU, .threads = threads};
    a->tensor_of_value = qfi_calloc((size_t)g->n_values + 1, sizeof *a->tensor_of_value);
    a->term_of_output = qfi_calloc((size_t)g->n_values + 1, sizeof *a->term_of_output);
    a->tensors = qfi_calloc((size_t)g->n_values + 1, sizeof *a->tensors);
    /* at most one term per tensor for itself and one per node (a layer reads one tensor as data) */
    a->terms = qfi_calloc((size_t)g->n_values + (size_t)g->n_nodes + 1, sizeof *a->terms);
    a->part = qfi_calloc((size_t)g->batch + 1, sizeof *a->part);
    qfi_range *range = NULL;
    if (!a->tensor_of_value || !a->term_of_output || !a->tensors || !a->terms || !a->part ||
        qfi_value_ranges(g, &range) != QF_OK)
        goto nomem;
    for (int v = 0; v < g->n_values; v++) a->term_of_output[v] = -1;
    for (int v = 0; v < g->n_values; v++) {
        a->tensor_of_value[v] = -1;
        const qf_histogram *h = qfi_calib_value_hist(c, v);
        int e = h ? qf_calib_table_find(t, g->values[v].name) : -1;
        if (e < 0) continue;
        int ti = a->n_tensors++;
        a->tensor_of_value[v] = ti;
        a->tensors[ti].entry = e;
        auto_tensor *at = &a->tensors[ti];
        qf_calib_auto_candidates(h, at->cand);
        at->lo = range[v].lo;
        at->data_min = qf_calib_table_min(t, e);
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
            a->term_of_output[n->out[0]] = a->n_terms;
            a->terms[a->n_terms++] = (auto_term){.tensor = ti, .node = i};
            size_t on = (size_t)qf_value_numel(&g->values[n->out[0]]);
            if (on > a->largest_out) a->largest_out = on;
        }
        if (itself || !read) a->terms[a->n_terms++] = (auto_term){.tensor = ti, .node = -1};
    }
    free(range);
    qf_auto_chooser_set_zero_points(a, true, false);
    *out = a;
    return QF_OK;
nomem:
    free(range);
    qf_auto_chooser_free(a);
    return qf_error(QF_ERR_NOMEM, "calibration (auto): out of memory");
}

/* Each candidate's grid as qforge quant makes it (qfi_quant_act_lo, then
 * qfi_quant_act_params): with zero points, [min(lo, 0), amax] on 256 levels
 * where the graph bounds the tensor from below, or with two_sided its
 * calibrated minimum does, above -amax (so a candidate is judged with the
 * negative side the data has, as quant will give it); else [-amax, amax].
 * Judged on the symmetric grid, a ReLU output's candidates are rounded twice
 * as coarsely as quant's default rounds them, which favours clipping. */
void qf_auto_chooser_set_zero_points(qf_auto_chooser *a, bool zero_points, bool two_sided)
{
    for (int ti = 0; ti < a->n_tensors; ti++) {
        auto_tensor *t = &a->tensors[ti];
        const float data_min = two_sided ? t->data_min : NAN;
        for (int k = 0; k < K; k++)
            qfi_quant_act_params(t->cand[k], qfi_quant_act_lo(t->lo, data_min, t->cand[k]), zero_points, &t->scale[k],
                                 &t->zero_point[k]);
    }
}

qf_status qf_auto_chooser_set_device(qf_auto_chooser *a, qf_device_kind device, int index)
{
    if (a->graph) return qf_error(QF_ERR_USAGE, "calibration (auto): the device is set before the first batch");
    a->eo.device = device;
    a->eo.device_index = index;
    a->keep = device != QF_DEVICE_CPU;
    return QF_OK;
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

/* The threads for a host loop over n elements. */
static int host_threads(const qf_auto_chooser *a, size_t n)
{
    return n < PARALLEL_MIN_ELEMENTS ? 1 : a->eo.threads;
}

/* y = x on tensor t's grid of candidate k. */
static void candidate_quantize(const auto_tensor *t, int k, float *y, const float *x, size_t n)
{
    if (t->zero_point[k])
        qfi_fake_quantize_zp(y, x, n, t->scale[k], t->zero_point[k]);
    else
        qfi_fake_quantize(y, x, n, t->cand[k]);
}

/* Sums over the counted images, each image's its own: part[m] = the sum over
 * image m of (y - r)^2; r^2 with y NULL; with `t`, y is r on t's grid of
 * candidate k (made a block at a time, never stored whole). Images run on any
 * thread and their sums add up in image order, so a total does not depend on
 * the threads or the batch. */
typedef struct sq_job {
    const float *y, *r;
    size_t per;
    const auto_tensor *t;   /* non-NULL: y is r quantized at t's candidate k */
    int k;
    double *part;
} sq_job;

/* The sum of (y - r)^2 (r^2 with y NULL) over n elements in double, element i
 * into accumulator i % LANES, the lanes added pairwise at the end: a fixed
 * order, the same on every machine and clone, that vectorizes (one running sum
 * waits on each addition). */
enum { LANES = 16 };
QFI_SIMD_CLONES static double sq_run(const float *y, const float *r, size_t n)
{
    double acc[LANES] = {0};
    size_t i = 0;
    if (y)
        for (; i + LANES <= n; i += LANES)
            for (int l = 0; l < LANES; l++) {
                double d = (double)y[i + l] - (double)r[i + l];
                acc[l] += d * d;
            }
    else
        for (; i + LANES <= n; i += LANES)
            for (int l = 0; l < LANES; l++) acc[l] += (double)r[i + l] * (double)r[i + l];
    for (int l = 0; i < n; i++, l++) {
        double d = y ? (double)y[i] - (double)r[i] : (double)r[i];
        acc[l] += d * d;
    }
    for (int w = LANES / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++) acc[l] += acc[l + w];
    return acc[0];
}

static void sq_image(void *arg, int64_t m)
{
    const sq_job *j = arg;
    const float *r = j->r + (size_t)m * j->per;
    if (!j->t) {
        j->part[m] = sq_run(j->y ? j->y + (size_t)m * j->per : NULL, r, j->per);
        return;
    }
    enum { BLOCK = 1024 }; /* the image's sum: its blocks' sums, in order */
    float q[BLOCK];
    double s = 0.0;
    for (size_t at = 0; at < j->per; at += BLOCK) {
        size_t len = j->per - at < BLOCK ? j->per - at : BLOCK;
        candidate_quantize(j->t, j->k, q, r + at, len);
        s += sq_run(q, r + at, len);
    }
    j->part[m] = s;
}

static double sq_sum(const qf_auto_chooser *a, sq_job j, int images)
{
    j.part = a->part;
    qfi_parallel_for(host_threads(a, j.per * (size_t)images), images, sq_image, &j);
    double total = 0.0;
    for (int m = 0; m < images; m++) total += a->part[m];
    return total;
}

/* y = x quantized at candidate k, `units` equal pieces over the threads. */
typedef struct fq_job {
    float *y;
    const float *x;
    size_t per;
    const auto_tensor *t;
    int k;
} fq_job;

static void fq_piece(void *arg, int64_t m)
{
    const fq_job *j = arg;
    candidate_quantize(j->t, j->k, j->y + (size_t)m * j->per, j->x + (size_t)m * j->per, j->per);
}

static void fake_quantize(const qf_auto_chooser *a, float *y, const float *x, size_t per, int units,
                          const auto_tensor *t, int k)
{
    fq_job j = {y, x, per, t, k};
    qfi_parallel_for(host_threads(a, per * (size_t)units), units, fq_piece, &j);
}

/* The first candidate equal to candidate k (its errors are the same). */
static int same_as(const auto_tensor *t, int k)
{
    int j = 0;
    while (t->cand[j] != t->cand[k]) j++;
    return j;
}

/* The rows of its input a layer term reads: dim 0 of a Conv, Gemm or MatMul
 * input indexes rows computed independently, so where it is the batch the
 * layer runs on the real images only (a short batch's padding is never
 * computed). */
static int layer_rows(const qf_auto_chooser *a, const auto_term *term, bool *by_image)
{
    const qf_value *x = &a->g->values[a->g->nodes[term->node].in[0]];
    *by_image = x->ndim >= 1 && x->dims[0] == a->g->batch;
    return *by_image ? a->images : a->g->batch;
}

/* The engine of layer term `term` reading `rows` rows. A device engine is
 * kept across batches (building one sets up the device and times kernels)
 * until the device's memory runs short; a CPU engine is built for each use,
 * so that one layer's activations are held at a time. */
static qf_status layer_engine(qf_auto_chooser *a, auto_term *term, int rows)
{
    if (term->e && term->rows == rows) return QF_OK;
    free_engine(term);
    const qf_graph *g = a->g;
    const qf_node *nd = &g->nodes[term->node];
    if (!term->one && !(term->one = qfi_calloc(1, sizeof *term->one))) return QF_ERR_NOMEM;
    qfi_one_node *one = term->one;
    if (!qfi_one_node_init(one, g, nd))
        return qf_error(QF_ERR_UNSUPPORTED, "%s: node %s: too many inputs to run alone", g->source, nd->name);
    if (rows != g->batch) {
        one->vals[one->ins[0]].dims[0] = rows;
        one->g.batch = rows;
        qf_status st = qfi_ops[nd->op]->infer(&one->g, &one->node);
        if (st != QF_OK) return qfi_error_node(st, g, nd);
    }
    term->rows = rows;
    qf_engine_opts eo = {.device = a->eo.device, .device_index = a->eo.device_index, .threads = a->eo.threads};
    qf_status st = qf_engine_create(&one->g, &eo, &term->e);
    if (st == QF_ERR_NOMEM && a->keep) { /* the kept engines give their memory back, and keeping stops */
        for (int i = 0; i < a->n_terms; i++) free_engine(&a->terms[i]);
        a->keep = false;
        st = qf_engine_create(&one->g, &eo, &term->e);
    }
    return st;
}

/* Keeps the rows of input x a layer term reads until the graph has run the
 * layer on them (its output is the exact result the candidates are compared
 * with: running the layer alone on x once more would give the same). */
static qf_status hold_input(qf_auto_chooser *a, auto_term *term, const float *x)
{
    bool by_image;
    int rows = layer_rows(a, term, &by_image);
    const qf_value *xv = &a->g->values[a->g->nodes[term->node].in[0]];
    size_t n = (size_t)qf_value_numel(xv) / (size_t)a->g->batch * (size_t)rows;
    if (!by_image) n = (size_t)qf_value_numel(xv);
    free(term->held);
    if (!(term->held = malloc(n * sizeof *term->held))) return qf_error(QF_ERR_NOMEM, "calibration (auto): out of memory");
    memcpy(term->held, x, n * sizeof *x);
    return QF_OK;
}

/* Measures one layer term on its held input: the layer's output from the
 * exact input is `exact` (as the graph wrote it; NULL: the layer runs alone on
 * the input for it), then the layer runs alone on each candidate's. */
static qf_status judge_layer(qf_auto_chooser *a, auto_term *term, const float *exact)
{
    const qf_graph *g = a->g;
    const auto_tensor *t = &a->tensors[term->tensor];
    bool by_image;
    qf_status st = layer_engine(a, term, layer_rows(a, term, &by_image));
    const float *x = term->held;
    if (st == QF_OK) {
        const qf_value *in_v = &term->one->vals[term->one->ins[0]], *out_v = &term->one->vals[term->one->outs[0]];
        size_t in_n = (size_t)qf_value_numel(in_v), out_n = (size_t)qf_value_numel(out_v);
        int units = by_image ? term->rows : 1;
        size_t out_per = out_n / (size_t)units;
        /* the output's counted images: the engine's rows, or image_split's reading of the full output */
        int counted = units;
        if (!by_image) image_split(a, &g->values[g->nodes[term->node].out[0]], &out_per, &counted);
        float *in = qf_engine_input(term->e, 0);
        if (!exact && !a->exact && !(a->exact = malloc(a->largest_out * sizeof *a->exact)))
            st = qf_error(QF_ERR_NOMEM, "calibration (auto): out of memory");
        if (!exact && st == QF_OK) {
            memcpy(in, x, in_n * sizeof *in);
            if ((st = qf_engine_run(term->e)) == QF_OK) memcpy(a->exact, qf_engine_output(term->e, 0), out_n * sizeof *a->exact);
            exact = a->exact;
        }
        if (st == QF_OK) term->signal += sq_sum(a, (sq_job){.r = exact, .per = out_per}, counted);
        for (int k = 0; k < K && st == QF_OK; k++) {
            if (same_as(t, k) != k) continue;
            fake_quantize(a, in, x, in_n / (size_t)units, units, t, k);
            if ((st = qf_engine_run(term->e)) == QF_OK)
                term->noise[k] += sq_sum(a, (sq_job){.y = qf_engine_output(term->e, 0), .r = exact, .per = out_per}, counted);
        }
    }
    free(term->held);
    term->held = NULL;
    if (!a->keep) free_engine(term);
    return st;
}

/* Measures the tensor's own term. */
static void judge_itself(qf_auto_chooser *a, auto_term *term, const qf_value *v, const float *x)
{
    const auto_tensor *t = &a->tensors[term->tensor];
    size_t per;
    int images;
    image_split(a, v, &per, &images);
    term->signal += sq_sum(a, (sq_job){.r = x, .per = per}, images);
    for (int k = 0; k < K; k++)
        if (same_as(t, k) == k)
            term->noise[k] += sq_sum(a, (sq_job){.r = x, .per = per, .t = t, .k = k}, images);
}

/* The first failure inside the observer, kept for qf_auto_chooser_run to return. */
static void record_failure(qf_auto_chooser *a, qf_status st)
{
    if (st == QF_OK || a->st != QF_OK) return;
    a->st = st;
    snprintf(a->msg, sizeof a->msg, "%s", qf_error_message());
}

static void observe(void *user, const qf_graph *g, int v, const void *data)
{
    qf_auto_chooser *a = user;
    if (a->st != QF_OK) return;
    qf_status st = QF_OK;
    int ti = a->tensor_of_value[v];
    if (ti >= 0) a->tensors[ti].seen = true;
    for (int i = 0; i < a->n_terms && ti >= 0 && st == QF_OK; i++) {
        auto_term *term = &a->terms[i];
        if (term->tensor != ti) continue;
        if (term->node < 0)
            judge_itself(a, term, &g->values[v], data);
        else
            st = hold_input(a, term, data);
    }
    int li = a->term_of_output[v];
    if (st == QF_OK && li >= 0 && a->terms[li].held) st = judge_layer(a, &a->terms[li], data);
    record_failure(a, st);
}

qf_status qf_auto_chooser_run(qf_auto_chooser *a, const float *input, int images)
{
    const qf_graph *g = a->g;
    a->images = images > 0 && images < g->batch ? images : g->batch;
    if (!a->graph) {
        qf_engine_opts eo = a->eo;
        eo.observer = observe;
        eo.observer_user = a;
        QF_CHECK(qf_engine_create(g, &eo, &a->graph));
    }
    memcpy(qf_engine_input(a->graph, 0), input, (size_t)qf_value_numel(&g->values[g->inputs[0]]) * sizeof *input);
    qf_status st = qf_engine_run(a->graph);
    /* a layer whose output the engine did not show (none on the CPU) is run alone for it */
    for (int i = 0; i < a->n_terms && st == QF_OK && a->st == QF_OK; i++)
        if (a->terms[i].held) record_failure(a, judge_layer(a, &a->terms[i], NULL));
    if (st == QF_OK && a->st != QF_OK) st = qf_error(a->st, "calibration (auto): %s", a->msg);
    return st;
}

/* Each candidate's score: the sum over the tensor's terms of the relative squared error. */
static void tensor_scores(const qf_auto_chooser *a, int ti, double score[K])
{
    const auto_tensor *at = &a->tensors[ti];
    for (int k = 0; k < K; k++) score[k] = 0.0;
    for (int i = 0; i < a->n_terms; i++) {
        const auto_term *term = &a->terms[i];
        if (term->tensor != ti) continue;
        for (int k = 0; k < K; k++) {
            double noise = term->noise[same_as(at, k)];
            score[k] += term->signal > 0.0 ? noise / term->signal : noise;
        }
    }
}

bool qfi_auto_chooser_scores(const qf_auto_chooser *a, int value, double score[K])
{
    int ti = value >= 0 && value < a->g->n_values ? a->tensor_of_value[value] : -1;
    if (ti < 0 || !a->tensors[ti].seen) return false;
    tensor_scores(a, ti, score);
    return true;
}

void qf_auto_chooser_apply(const qf_auto_chooser *a, qf_calib_table *t, int64_t chosen[K])
{
    for (int ti = 0; ti < a->n_tensors; ti++) {
        const auto_tensor *at = &a->tensors[ti];
        if (!at->seen) continue;
        double score[K];
        tensor_scores(a, ti, score);
        int best = 0;
        for (int k = 1; k < K; k++)
            if (score[k] < score[best]) best = k;
        t->entries[at->entry].amax[QF_CALIB_AUTO] = at->cand[best];
        if (chosen) chosen[best]++;
    }
}
