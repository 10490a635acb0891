/* The decode pool: worker threads read, decode and preprocess images ahead of
 * the consumer into a ring of slots. Image i always lands in slot i % nslots
 * and the consumer takes images strictly in index order, so batches are the
 * same whatever the thread count, and memory is the ring, not the folder. */
#include <pthread.h>
#include "datasets_impl.h"

#define MAX_THREADS 256

enum { SLOT_FREE, SLOT_BUSY, SLOT_DONE };

typedef struct slot {
    int64_t index;   // dataset index held (valid unless FREE)
    int state;
    qf_status st;    // result of read + preprocess
    bool skippable;  // st is the file's fault (corrupt, truncated, absurd size), not the setup's
    char *msg;       // qf_error_message() of the thread that failed
    float *data;     // (c,h,w) or (h,w,c)
} slot;

struct qf_loader {
    const qf_dataset *ds;
    qf_preprocess pp;
    qf_loader_options opt;
    int c, h, w;
    size_t img_floats;
    int nslots;
    slot *slots;
    int64_t *indices;  // dataset indices of the last batch

    pthread_mutex_t mu;
    pthread_cond_t cv_work;  // a slot was freed, or stop
    pthread_cond_t cv_done;  // a slot was filled
    int64_t claim;           // next index a worker takes
    int64_t consume;         // next index the consumer takes
    bool stop;
    int nthreads;
    pthread_t *tids;

    int64_t skipped, produced;
    qf_status fatal;         // once set, every later call fails with it
    char *fatal_msg;
};

static void fill_slot(qf_loader *l, int64_t i, slot *s)
{
    const char *path = qf_dataset_full_path(l->ds, i);
    qf_image img;
    s->st = qf_image_read(path, &img);
    s->skippable = true;  // every read/decode failure is the file's
    if (s->st == QF_OK) {
        s->st = qf_preprocess_image(&l->pp, &img, path, s->data);
        // An absurd size after resizing is the file's fault; a size that does
        // not fit the model, or a bad option, is the setup's and stops the run.
        s->skippable = s->st == QF_ERR_FORMAT || s->st == QF_ERR_NOMEM;
        qf_image_free(&img);
    }
    free(s->msg);
    s->msg = s->st == QF_OK ? NULL : strdup(qf_error_message());
}

static void *worker(void *arg)
{
    qf_loader *l = arg;
    int64_t n = qf_dataset_count(l->ds);
    pthread_mutex_lock(&l->mu);
    for (;;) {
        // Image `claim` may start once its slot's previous image (claim - nslots) was consumed.
        while (!l->stop && l->claim < n && l->claim >= l->consume + l->nslots)
            pthread_cond_wait(&l->cv_work, &l->mu);
        if (l->stop || l->claim >= n) break;
        int64_t i = l->claim++;
        slot *s = &l->slots[i % l->nslots];
        s->index = i;
        s->state = SLOT_BUSY;
        pthread_mutex_unlock(&l->mu);
        fill_slot(l, i, s);
        pthread_mutex_lock(&l->mu);
        s->state = SLOT_DONE;
        pthread_cond_broadcast(&l->cv_done);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

void qf_loader_free(qf_loader *l)
{
    if (!l) return;
    if (l->nthreads > 0) {
        pthread_mutex_lock(&l->mu);
        l->stop = true;
        pthread_cond_broadcast(&l->cv_work);
        pthread_mutex_unlock(&l->mu);
        for (int t = 0; t < l->nthreads; t++) pthread_join(l->tids[t], NULL);
    }
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv_work);
    pthread_cond_destroy(&l->cv_done);
    for (int k = 0; l->slots && k < l->nslots; k++) {
        free(l->slots[k].data);
        free(l->slots[k].msg);
    }
    free(l->slots);
    free(l->tids);
    free(l->indices);
    free(l->fatal_msg);
    free(l);
}

int qf_loader_default_threads(bool engine_on_cpu)
{
    int cpus = qfi_cpu_count();
    return engine_on_cpu || cpus < 2 ? 2 : cpus;
}

qf_status qf_loader_create(const qf_dataset *ds, const qf_preprocess *pp, const qf_loader_options *opt,
                           qf_loader **out)
{
    *out = NULL;
    if (opt->batch < 1) return qf_error(QF_ERR_USAGE, "batch size %d: must be at least 1", opt->batch);
    if (opt->threads < 0 || opt->threads > MAX_THREADS)
        return qf_error(QF_ERR_USAGE, "%d decode threads: must be 0..%d", opt->threads, MAX_THREADS);
    int c, h, w;
    QF_CHECK(qf_preprocess_shape(pp, &c, &h, &w));

    qf_loader *l = qfi_calloc(1, sizeof(*l));
    if (!l) return QF_ERR_NOMEM;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv_work, NULL);
    pthread_cond_init(&l->cv_done, NULL);
    l->ds = ds;
    l->pp = *pp;
    l->opt = *opt;
    l->c = c, l->h = h, l->w = w;
    l->img_floats = (size_t)c * h * w;
    // Enough slots for workers to prepare a whole next batch while the
    // consumer runs the current one, plus two in flight per thread.
    int64_t nslots = opt->threads == 0 ? 1 : (int64_t)opt->batch + 2 * opt->threads;
    if (nslots > qf_dataset_count(ds)) nslots = qf_dataset_count(ds);
    l->nslots = (int)nslots;
    l->slots = qfi_calloc((size_t)l->nslots, sizeof(slot));
    l->indices = qfi_calloc((size_t)opt->batch, sizeof(int64_t));
    if (!l->slots || !l->indices) goto nomem;
    for (int k = 0; k < l->nslots; k++)
        if (!(l->slots[k].data = malloc(sizeof(float) * l->img_floats))) goto nomem;

    if (opt->threads > 0) {
        if (!(l->tids = qfi_calloc((size_t)opt->threads, sizeof(pthread_t)))) goto nomem;
        for (int t = 0; t < opt->threads; t++) {
            if (pthread_create(&l->tids[t], NULL, worker, l) != 0) {
                qf_loader_free(l);
                return qf_error(QF_ERR_NOMEM, "could not start decode thread %d of %d", t + 1, opt->threads);
            }
            l->nthreads++;
        }
    }
    *out = l;
    return QF_OK;
nomem:
    qf_loader_free(l);
    return qf_error(QF_ERR_NOMEM, "out of memory for the decode queue (%d images of %dx%dx%d)", (int)nslots,
                    c, h, w);
}

qf_status qf_loader_next(qf_loader *l, float *dst, int *labels, int *count)
{
    *count = 0;
    if (l->fatal != QF_OK) return qf_error(l->fatal, "%s", l->fatal_msg ? l->fatal_msg : "");
    int64_t n = qf_dataset_count(l->ds);
    int k = 0;
    while (k < l->opt.batch && l->consume < n) {
        int64_t i = l->consume;
        slot *s = &l->slots[i % l->nslots];
        if (l->nthreads == 0) {
            s->index = i;
            fill_slot(l, i, s);
        } else {
            pthread_mutex_lock(&l->mu);
            while (!(s->state == SLOT_DONE && s->index == i)) pthread_cond_wait(&l->cv_done, &l->mu);
            pthread_mutex_unlock(&l->mu);
        }
        qf_status st = s->st;
        if (st == QF_OK) {
            // dst is (batch, one image)
            memcpy(dst + (size_t)k * l->img_floats, s->data, sizeof(float) * l->img_floats);
            if (labels) labels[k] = qf_dataset_label(l->ds, i);
            l->indices[k++] = i;
            l->produced++;
        } else if (s->skippable && !l->opt.strict) {
            qf_log(QF_LOG_WARN, "%s (skipped)", s->msg ? s->msg : qf_dataset_full_path(l->ds, i));
            l->skipped++;
        } else {
            l->fatal = st;
            l->fatal_msg = s->msg;
            s->msg = NULL;
        }
        pthread_mutex_lock(&l->mu);
        s->state = SLOT_FREE;
        l->consume++;
        pthread_cond_broadcast(&l->cv_work);
        pthread_mutex_unlock(&l->mu);
        if (l->fatal != QF_OK) return qf_error(l->fatal, "%s", l->fatal_msg ? l->fatal_msg : "");
    }
    *count = k;
    if (k == 0 && l->produced == 0)
        return qf_error(QF_ERR_INVALID, "%s: none of the %lld images could be read",
                        l->ds->root ? l->ds->root : qf_dataset_full_path(l->ds, 0), (long long)n);
    return QF_OK;
}

const int64_t *qf_loader_indices(const qf_loader *l) { return l->indices; }
int64_t qf_loader_skipped(const qf_loader *l) { return l->skipped; }

void qf_loader_shape(const qf_loader *l, int *c, int *h, int *w)
{
    *c = l->c;
    *h = l->h;
    *w = l->w;
}
