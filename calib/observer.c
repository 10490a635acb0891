/* The calibration observer: hangs on the engine's qf_observer_fn and streams every
 * non-constant FP32 value into its own qf_histogram (one pass, widening ranges), then
 * turns the histograms into a qf_calib_table. Memory: one histogram per tracked
 * value plus one per thread, whatever the number of images.
 *
 * A Relu's output is histogrammed from its input, in the input's own pass
 * (qfi_histogram_add_relu): the engine observes the input first, and the
 * output, max(x, 0) of the same numbers, is then skipped. Its histogram is the
 * same as counting it (the histograms hold |x|, and for finite x every Relu
 * gives x or a zero); an input holding NaN or Inf is left to the output's own
 * observation, as engines may differ there. In ResNets this saves the
 * histogram pass over 40% of the activations. */
#include "calib_internal.h"

/* Below this many elements a tensor is histogrammed by the calling thread alone:
 * a thread hand-off and a 16 KiB merge cost more than they save. */
#define SLICE_MIN 65536

struct qf_calib {
    const qf_graph *g;
    int threads;
    int valid;             /* images of each batch to count; 0 = all */
    int n_values;          /* g->n_values when created */
    int n_slots;
    int *slot_of_value;    /* n_values entries; -1 = not tracked */
    int *value_of_slot;    /* n_slots */
    unsigned char *seen;   /* n_slots: observed at least once */
    qf_histogram *hist;    /* n_slots */
    qf_histogram *scratch; /* threads, for slices of one large tensor */
    int *relu_of;          /* n_slots: slot of the Relu output computed from this slot's value, or -1 */
    unsigned char *derived; /* n_slots: this Relu output's current observation is already counted */
    qf_histogram *relu_tmp; /* one Relu output's counts from one observation of its input */
};

static bool tracked(const qf_value *v)
{
    return !(v->flags & QF_VALUE_CONST) && v->dtype == QF_F32;
}

qf_status qf_calib_create(const qf_graph *g, const qf_calib_opts *opts, qf_calib **out)
{
    *out = NULL;
    int threads = opts ? opts->threads : 1;
    if (threads <= 0) threads = qfi_cpu_count();
    if (threads < 1) threads = 1;
    qf_calib *c = qfi_calloc(1, sizeof *c);
    if (!c) return QF_ERR_NOMEM;
    c->g = g;
    c->threads = threads;
    c->n_values = g->n_values;
    c->slot_of_value = qfi_calloc((size_t)g->n_values, sizeof *c->slot_of_value);
    if (!c->slot_of_value) goto nomem;
    for (int i = 0; i < g->n_values; i++)
        c->slot_of_value[i] = tracked(&g->values[i]) ? c->n_slots++ : -1;
    c->value_of_slot = qfi_calloc((size_t)c->n_slots, sizeof *c->value_of_slot);
    c->seen = qfi_calloc((size_t)c->n_slots, 1);
    c->hist = qfi_calloc((size_t)c->n_slots, sizeof *c->hist);
    c->scratch = threads > 1 ? qfi_calloc((size_t)threads, sizeof *c->scratch) : NULL;
    c->relu_of = qfi_calloc((size_t)c->n_slots, sizeof *c->relu_of);
    c->derived = qfi_calloc((size_t)c->n_slots, 1);
    c->relu_tmp = qfi_calloc(1, sizeof *c->relu_tmp);
    if (!c->value_of_slot || !c->seen || !c->hist || (threads > 1 && !c->scratch) || !c->relu_of || !c->derived ||
        !c->relu_tmp)
        goto nomem;
    for (int i = 0; i < g->n_values; i++)
        if (c->slot_of_value[i] >= 0) c->value_of_slot[c->slot_of_value[i]] = i;
    for (int s = 0; s < c->n_slots; s++) qf_histogram_init(&c->hist[s]);
    for (int s = 0; s < c->n_slots; s++) c->relu_of[s] = -1;
    for (int i = 0; i < g->n_nodes; i++) { /* pair each tracked Relu output with its tracked input */
        const qf_node *n = &g->nodes[i];
        if (n->op != QF_OP_RELU || n->n_in < 1 || n->n_out < 1 || n->in[0] < 0 || n->out[0] < 0) continue;
        int su = c->slot_of_value[n->in[0]], sv = c->slot_of_value[n->out[0]];
        if (su >= 0 && sv >= 0 && c->relu_of[su] < 0 &&
            qf_value_numel(&g->values[n->in[0]]) == qf_value_numel(&g->values[n->out[0]]))
            c->relu_of[su] = sv;
    }
    *out = c;
    return QF_OK;
nomem:
    qf_calib_free(c);
    return qf_error(QF_ERR_NOMEM, "%s: out of memory for %d calibration histograms",
                    g->source ? g->source : "graph", g->n_values);
}

void qf_calib_free(qf_calib *c)
{
    if (!c) return;
    free(c->slot_of_value);
    free(c->value_of_slot);
    free(c->seen);
    free(c->hist);
    free(c->scratch);
    free(c->relu_of);
    free(c->derived);
    free(c->relu_tmp);
    free(c);
}

void qf_calib_set_batch_valid(qf_calib *c, int images)
{
    c->valid = images > 0 ? images : 0;
}

typedef struct slice_job {
    qf_histogram *scratch;
    const float *x;
    int64_t n;
    int nslices;
} slice_job;

static void slice_run(void *arg, int64_t i)
{
    const slice_job *j = arg;
    // x is (n,) split into nslices contiguous parts; the split is free to vary
    // because histograms merge exactly.
    int64_t lo = j->n * i / j->nslices, hi = j->n * (i + 1) / j->nslices;
    qf_histogram_add(&j->scratch[i], j->x + lo, (size_t)(hi - lo));
}

int64_t qf_calib_observe_count(void *user, const qf_graph *g, int value)
{
    const qf_calib *c = user;
    // A padded final batch: count only the leading `valid` images of batched values.
    return qfi_value_valid_numel(g, &g->values[value], c->valid);
}

/* The slot an observation of `value` goes to, or -1: untracked, without
 * data, or a Relu output already counted with its input's data (that
 * observation is then used up). */
static int observation_slot(qf_calib *c, const qf_graph *g, int value, bool has_data)
{
    QF_ASSERT(value >= 0 && value < c->n_values && g->n_values == c->n_values);
    int s = c->slot_of_value[value];
    if (s < 0 || !has_data) return -1;
    if (c->derived[s]) {
        c->derived[s] = 0;
        return -1;
    }
    return s;
}

void qf_calib_observe_histogram(void *user, const qf_graph *g, int value, const qf_histogram *h)
{
    qf_calib *c = user;
    int s = observation_slot(c, g, value, true);
    if (s < 0) return;
    qf_histogram_merge(&c->hist[s], h);
    c->seen[s] = 1;
}

void qf_calib_observe(void *user, const qf_graph *g, int value, const void *data)
{
    qf_calib *c = user;
    int s = observation_slot(c, g, value, data != NULL);
    if (s < 0) return;
    const int64_t n = qf_calib_observe_count(c, g, value);
    if (n <= 0) return;
    qf_histogram *h = &c->hist[s];
    int nslices = c->threads;
    if (nslices > n / SLICE_MIN) nslices = (int)(n / SLICE_MIN);
    const int r = c->relu_of[s];
    if (nslices <= 1 && r >= 0) {
        qf_histogram *t = c->relu_tmp;
        qf_histogram_init(t);
        t->exp = c->hist[r].exp; /* the Relu output's range so far: the same bins as counting it there */
        qfi_histogram_add_relu(h, t, data, (size_t)n);
        if (t->nonfinite == 0) {
            qf_histogram_merge(&c->hist[r], t);
            c->seen[r] = 1;
            c->derived[r] = 1;
        }
    } else if (nslices <= 1) {
        qf_histogram_add(h, data, (size_t)n);
    } else {
        for (int i = 0; i < nslices; i++) {
            qf_histogram_init(&c->scratch[i]);
            c->scratch[i].exp = h->exp;  // start at the known range: fewer widenings
        }
        slice_job job = {c->scratch, data, n, nslices};
        qfi_parallel_for(nslices, nslices, slice_run, &job);
        for (int i = 0; i < nslices; i++) qf_histogram_merge(h, &c->scratch[i]);
    }
    c->seen[s] = 1;
}

qf_status qf_calib_merge(qf_calib *dst, const qf_calib *src)
{
    for (int s = 0; s < src->n_slots; s++) {
        if (!src->seen[s]) continue;
        const char *name = src->g->values[src->value_of_slot[s]].name;
        int v = qf_graph_find_value(dst->g, name);
        int d = v >= 0 ? dst->slot_of_value[v] : -1;
        if (d < 0)
            return qf_error(QF_ERR_INVALID, "calibration merge: tensor %s is not an FP32 activation of %s",
                            name, dst->g->source ? dst->g->source : "the graph");
        qf_histogram_merge(&dst->hist[d], &src->hist[s]);
        dst->seen[d] = 1;
    }
    return QF_OK;
}

int *qfi_calib_seen_slots(const qf_calib *c, int *n)
{
    *n = 0;
    int *slots = qfi_calloc((size_t)c->n_slots, sizeof *slots);
    if (!slots) return NULL;
    for (int s = 0; s < c->n_slots; s++)
        if (c->seen[s]) slots[(*n)++] = s;
    return slots;
}

const char *qfi_calib_slot_name(const qf_calib *c, int slot)
{
    return c->g->values[c->value_of_slot[slot]].name;
}

const qf_histogram *qfi_calib_slot_hist(const qf_calib *c, int slot)
{
    return &c->hist[slot];
}

const qf_graph *qfi_calib_graph(const qf_calib *c)
{
    return c->g;
}

const qf_histogram *qfi_calib_value_hist(const qf_calib *c, int value)
{
    if (value < 0 || value >= c->n_values) return NULL;
    int s = c->slot_of_value[value];
    return s >= 0 && c->seen[s] ? &c->hist[s] : NULL;
}

/* Slot of the i-th observed tensor, or -1. */
static int nth_seen(const qf_calib *c, int i)
{
    for (int s = 0; s < c->n_slots; s++)
        if (c->seen[s] && i-- == 0) return s;
    return -1;
}

int qf_calib_tensor_count(const qf_calib *c)
{
    int n = 0;
    for (int s = 0; s < c->n_slots; s++) n += c->seen[s];
    return n;
}

const char *qf_calib_tensor_name(const qf_calib *c, int i)
{
    int s = nth_seen(c, i);
    return s >= 0 ? qfi_calib_slot_name(c, s) : NULL;
}

const qf_histogram *qf_calib_tensor_hist(const qf_calib *c, int i)
{
    int s = nth_seen(c, i);
    return s >= 0 ? &c->hist[s] : NULL;
}

/* One warning line for a tensor whose calibration range is degenerate: NaN or
 * Inf among its values (ignored), or no range an INT8 scale can hold (every
 * value 0, or below QF_CALIB_AMAX_MIN), which INT8 then holds as zeros. */
static void warn_range(const char *name, const qf_histogram *h)
{
    unsigned long long finite = qf_histogram_count(h), bad = h->nonfinite;
    const char *degenerate = "a degenerate range, INT8 holds it as 0";
    if (finite + bad == 0) return;
    if (h->absmax >= QF_CALIB_AMAX_MIN) {
        if (bad)
            qf_log(QF_LOG_WARN, "calibration: tensor %s: %llu of %llu values were NaN or Inf and were ignored", name, bad,
                   bad + finite);
    } else if (bad) {
        qf_log(QF_LOG_WARN, "calibration: tensor %s: %llu of %llu values were NaN or Inf, the rest |x| <= %g: %s", name,
               bad, bad + finite, (double)h->absmax, degenerate);
    } else if (h->absmax == 0.0f) {
        qf_log(QF_LOG_WARN, "calibration: tensor %s: all %llu values were 0: %s", name, finite, degenerate);
    } else {
        qf_log(QF_LOG_WARN, "calibration: tensor %s: its largest |x| is %g, below %g, the smallest range an INT8 scale "
               "holds: %s", name, (double)h->absmax, (double)QF_CALIB_AMAX_MIN, degenerate);
    }
}

qf_status qf_calib_finalize(const qf_calib *c, unsigned methods, double percentile,
                            const qf_calib_meta *meta, qf_calib_table **out)
{
    *out = NULL;
    if (!methods || (methods & ~QF_CALIB_ALL))
        return qf_error(QF_ERR_USAGE, "calibration: invalid method mask 0x%x", methods);
    if ((methods & (1u << QF_CALIB_PERCENTILE)) && !(percentile > 0.0 && percentile <= 100.0))
        return qf_error(QF_ERR_USAGE, "calibration: percentile %g is not in (0, 100]", percentile);
    if (!meta || !qfi_is_sha256_hex(meta->model_sha256) || meta->images < 0)
        return qf_error(QF_ERR_USAGE, "calibration: the table needs the image count and the model's SHA-256 (64 lowercase hex digits)");
    if (meta->preprocess && strchr(meta->preprocess, '\n'))
        return qf_error(QF_ERR_USAGE, "calibration: the preprocessing description must be one line");

    qf_calib_table *t = qfi_calloc(1, sizeof *t);
    if (!t) return QF_ERR_NOMEM;
    memcpy(t->equalized, c->g->equalized, sizeof t->equalized);
    t->methods = methods;
    t->percentile = (methods & (1u << QF_CALIB_PERCENTILE)) ? percentile : QF_CALIB_PERCENTILE_DEFAULT;
    t->images = meta->images;
    memcpy(t->model_sha256, meta->model_sha256, 65);
    t->preprocess = qfi_strdup(meta->preprocess ? meta->preprocess : "");
    int n = 0;
    int *slots = qfi_calib_seen_slots(c, &n);
    if (!t->preprocess || (!slots && c->n_slots)) goto nomem;
    t->entries = qfi_calloc((size_t)n, sizeof *t->entries);
    if (!t->entries) goto nomem;
    for (int k = 0; k < n; k++) {
        const qf_histogram *h = &c->hist[slots[k]];
        qf_calib_entry *e = &t->entries[t->n];
        e->name = qfi_strdup(qfi_calib_slot_name(c, slots[k]));
        if (!e->name) goto nomem;
        t->n++;
        for (int m = 0; m < QF_CALIB_METHOD_COUNT; m++)
            if (methods & (1u << m)) e->amax[m] = qf_calib_threshold(h, (qf_calib_method)m, percentile);
        e->has_min = isfinite(h->min);
        if (e->has_min) e->min = h->min;
        warn_range(e->name, h);
    }
    t->version = qfi_calib_table_version(t);
    free(slots);
    *out = t;
    return QF_OK;
nomem:
    free(slots);
    qf_calib_table_free(t);
    return qf_error(QF_ERR_NOMEM, "calibration: out of memory building the table");
}
