/* Scoring a model on a folder of images, shared by eval and quant: opening a
 * model for evaluation, running the images through it beside a reference
 * (FP32) model, and the tallies: top-1/top-5 against labels, and top-1
 * agreement and output SQNR against the reference. */
#include "config.h"
#include "cli.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

qf_status eval_model_open(eval_model *m, const char *path, int batch, const char *precision, qf_engine_opts *eo,
                          bool device_given, qf_qfm_meta *meta)
{
    memset(m, 0, sizeof *m);
    qf_graph *g;
    QF_CHECK_CLI(eval_model_load(path, batch, precision, eo, meta, &g));
    return cli_batch_hint(eval_model_adopt(m, g, eo, device_given), path, batch, eo);
}

qf_status eval_model_load(const char *path, int batch, const char *precision, const qf_engine_opts *eo,
                          qf_qfm_meta *meta, qf_graph **out)
{
    *out = NULL;
    qf_qfm_meta own;
    if (!meta) meta = &own;
    qf_precision p = QF_PREC_FP32;
    const bool onnx = !qf_qfm_probe(path);
    if (precision && onnx) QF_CHECK_CLI(qf_precision_parse(precision, &p));
    qf_graph *g;
    qf_status st = cli_load_model(path, batch, &g, meta);
    if (st != QF_OK) return cli_batch_hint(st, path, batch, eo);
    if (onnx && meta->scale_source[0]) {
        /* quantized elsewhere: it runs INT8 with its own scales */
        if (!precision || p == QF_PREC_INT8) {
            *out = g;
            return QF_OK;
        }
        st = qf_error(QF_ERR_USAGE, "%s carries its own scales and runs INT8; --precision %s does not apply", path,
                      precision);
    } else if (p == QF_PREC_INT8) {
        st = qf_error(QF_ERR_USAGE, "%s: --precision int8 needs a calibrated model: quantize it with qforge quant, "
                      "then evaluate the .qfm", path);
    }
    if (st != QF_OK) {
        qf_graph_free(g);
        return st;
    }
    if (p != QF_PREC_FP32) {
        qf_quant_opts qo;
        qf_quant_opts_init(&qo);
        qo.precision = p;
        st = qf_quantize(g, NULL, &qo, NULL);
        if (st != QF_OK) {
            qf_graph_free(g);
            return st;
        }
    }
    *out = g;
    return QF_OK;
}

qf_status eval_model_adopt(eval_model *m, qf_graph *g, qf_engine_opts *eo, bool device_given)
{
    memset(m, 0, sizeof *m);
    m->g = g;
    if (g->n_outputs < 1) return qf_error(QF_ERR_INVALID, "%s: model has no output", g->source);
    const qf_value *out = &g->values[g->outputs[0]];
    if (out->dtype != QF_F32 || out->ndim < 1 || out->dims[0] != g->batch)
        return qf_error(QF_ERR_UNSUPPORTED, "%s: output %s must be float scores (N, classes)", g->source, out->name);
    m->classes = (int)(qf_value_numel(out) / g->batch);
    return cli_engine_create(g, eo, device_given, &m->e);
}

void eval_model_close(eval_model *m)
{
    qf_engine_free(m->e);
    qf_graph_free(m->g);
    memset(m, 0, sizeof *m);
}

/* Rank of class `label` among n scores (0 = top), ties counted against it. */
static int rank_of(const float *x, int n, int label)
{
    int r = 0;
    for (int i = 0; i < n; i++)
        if (i != label && x[i] >= x[label]) r++;
    return r;
}

static void tally_label(int64_t *top1, int64_t *top5, const float *scores, int classes, int label)
{
    if (label < 0 || label >= classes) return;
    int r = rank_of(scores, classes, label);
    *top1 += r < 1;
    *top5 += r < 5;
}

static double sqnr_db(double sig, double noise)
{
    /* identical outputs have unbounded SQNR: report a large finite number */
    double db = noise > 0 ? 10 * log10(sig / noise) : QF_SQNR_EXACT_DB;
    return db > QF_SQNR_EXACT_DB ? QF_SQNR_EXACT_DB : db;
}

double eval_sqnr(const eval_scores *s) { return sqnr_db(s->sig, s->noise); }

double eval_output_sqnr(const eval_scores *s, int k) { return sqnr_db(s->out_sig[k], s->out_noise[k]); }

/* How many leading outputs of m and the reference model are alike: float32
 * and the same number of values per image (output 0 is checked on opening). */
static int outputs_alike(const eval_model *m, const eval_model *r)
{
    int n = 1;
    while (n < m->g->n_outputs && n < r->g->n_outputs && n < EVAL_MAX_OUTPUTS) {
        const qf_value *a = &m->g->values[m->g->outputs[n]], *b = &r->g->values[r->g->outputs[n]];
        if (a->dtype != QF_F32 || b->dtype != QF_F32 || qf_value_numel(a) / m->g->batch != qf_value_numel(b) / r->g->batch)
            break;
        n++;
    }
    return n;
}

/* Adds output k's (out - ref)^2 and ref^2 of the first `count` images. */
static void tally_output(eval_scores *s, int k, const float *out, const float *ref, size_t per_image, int count)
{
    for (size_t i = 0; i < (size_t)count * per_image; i++) {
        s->out_sig[k] += (double)ref[i] * ref[i];
        s->out_noise[k] += (double)(out[i] - ref[i]) * (out[i] - ref[i]);
    }
}

double eval_agreement(const eval_scores *s) { return s->images ? (double)s->agree / s->images : 0.0; }

/* The reference's outputs for `count` images starting at image `first`:
 * from the kept pass, or from running its model on the same inputs. */
static qf_status reference_outputs(eval_ref *ref, const float *in, size_t in_floats, int64_t first, int count,
                                   int classes, const float **out)
{
    if (ref->have_saved) {
        *out = ref->saved + (size_t)first * classes;
        return QF_OK;
    }
    memcpy(qf_engine_input(ref->model->e, 0), in, in_floats * sizeof *in);
    QF_CHECK_CLI(qf_engine_run(ref->model->e));
    *out = qf_engine_output(ref->model->e, 0);
    if (ref->saved) memcpy(ref->saved + (size_t)first * classes, *out, (size_t)count * classes * sizeof **out);
    return QF_OK;
}

qf_status eval_run(eval_model *m, eval_ref *ref, const qf_dataset *ds, const qf_preprocess *pp, int decode_threads,
                   bool strict, const char *label, eval_scores *s)
{
    memset(s, 0, sizeof *s);
    if (ref && !ref->model && !ref->have_saved) ref = NULL;
    if (ref && ref->model && ref->model->classes != m->classes)
        return qf_error(QF_ERR_INVALID, "%s has %d outputs per image but %s has %d", m->g->source, m->classes,
                        ref->model->g->source, ref->model->classes);
    const int batch = m->g->batch;
    const size_t per_image = (size_t)(qf_value_numel(&m->g->values[m->g->inputs[0]]) / batch);
    qf_loader *ld = NULL;
    qf_loader_options lo = {.batch = batch, .threads = decode_threads, .strict = strict};
    QF_CHECK_CLI(qf_loader_create(ds, pp, &lo, &ld));
    float *in = calloc((size_t)batch * per_image, sizeof *in);
    int *labels = calloc((size_t)batch, sizeof *labels);
    if (!in || !labels) {
        free(in);
        free(labels);
        qf_loader_free(ld);
        return qf_error(QF_ERR_NOMEM, "out of memory");
    }
    s->labeled = qf_dataset_has_labels(ds);
    s->referenced = ref != NULL;
    /* the outputs after the first only beside a reference model that runs */
    s->n_outputs = !ref ? 0 : ref->saved ? 1 : outputs_alike(m, ref->model);
    const qf_classes *named = qf_dataset_classes(ds);
    if (s->labeled && named && qf_classes_count(named) != m->classes)
        qf_log(QF_LOG_WARN, "the labels name %d classes but %s scores %d: top-1 compares unrelated indices "
               "(ImageNet-style folders need --synsets FILE)", qf_classes_count(named), m->g->source, m->classes);
    qf_status st;
    progress pr;
    progress_start(&pr, label, qf_dataset_count(ds));
    for (;;) {
        int count = 0;
        st = qf_loader_next(ld, in, labels, &count);
        if (st != QF_OK || count == 0) break;
        /* the engine runs full batches: a short last batch is zero-padded */
        if (count < batch) memset(in + (size_t)count * per_image, 0, (size_t)(batch - count) * per_image * sizeof *in);
        if (ref && ref->layers) qf_layer_cmp_set_batch_valid(ref->layers, count);
        memcpy(qf_engine_input(m->e, 0), in, (size_t)batch * per_image * sizeof *in);
        if ((st = qf_engine_run(m->e)) != QF_OK) break;
        const float *out = qf_engine_output(m->e, 0), *rout = NULL;
        if (ref && (st = reference_outputs(ref, in, (size_t)batch * per_image, s->images, count, m->classes, &rout)) !=
                       QF_OK)
            break;
        for (int b = 0; b < count; b++) {
            const float *o = out + (size_t)b * m->classes;
            tally_label(&s->top1, &s->top5, o, m->classes, labels[b]);
            if (!rout) continue;
            const float *r = rout + (size_t)b * m->classes;
            tally_label(&s->ref_top1, &s->ref_top5, r, m->classes, labels[b]);
            s->agree += argmax_index(o, m->classes) == argmax_index(r, m->classes);
            for (int k = 0; k < m->classes; k++) {
                s->sig += (double)r[k] * r[k];
                s->noise += (double)(o[k] - r[k]) * (o[k] - r[k]);
            }
        }
        for (int k = 1; k < s->n_outputs; k++) {
            const qf_value *v = &m->g->values[m->g->outputs[k]];
            tally_output(s, k, qf_engine_output(m->e, k), qf_engine_output(ref->model->e, k),
                         (size_t)(qf_value_numel(v) / batch), count);
        }
        s->images += count;
        progress_update(&pr, s->images);
    }
    if (s->n_outputs) {
        s->out_sig[0] = s->sig;
        s->out_noise[0] = s->noise;
    }
    s->seconds = progress_end(&pr);
    s->skipped = qf_loader_skipped(ld);
    if (st == QF_OK && ref && ref->saved && !ref->have_saved) ref->have_saved = true;
    free(in);
    free(labels);
    qf_loader_free(ld);
    return st;
}
