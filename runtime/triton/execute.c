/* Execution: the requests Triton gathered are checked one by one (a bad one is
 * answered with INVALID_ARG and left out), packed into as few engine runs as
 * fit, each on the smallest engine that holds its items (zero-padded), and
 * every request gets its own slice of the outputs. */
#include "backend.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static const char *shape_text(const int64_t *dims, uint32_t ndim, char *buf, size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "[");
    for (uint32_t i = 0; i < ndim && n < size; i++) n += (size_t)snprintf(buf + n, size - n, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (n < size) snprintf(buf + n, size - n, "]");
    return buf;
}

/* The shape a request must carry: the configured dims behind a batch of -1. */
static const char *expected_shape(const tq_model *m, const tq_tensor *t, char *buf, size_t size)
{
    int64_t dims[QF_MAX_DIMS + 1];
    int lead = m->max_batch > 0;
    dims[0] = -1;
    memcpy(dims + lead, t->dims, (size_t)t->ndim * sizeof dims[0]);
    return shape_text(dims, (uint32_t)(t->ndim + lead), buf, size);
}

static bool host_memory(TRITONSERVER_MemoryType type)
{
    return type == TRITONSERVER_MEMORY_CPU || type == TRITONSERVER_MEMORY_CPU_PINNED;
}

/* Buffer b of a request's input, which must lie in host memory. */
static TRITONSERVER_Error *host_buffer(const tq_model *m, TRITONBACKEND_Input *input, const char *name, uint32_t b,
                                       const void **p, uint64_t *size)
{
    TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
    int64_t id = 0;
    TRITONSERVER_Error *err = TRITONBACKEND_InputBuffer(input, b, p, size, &mt, &id);
    if (err) return err;
    if (!host_memory(mt))
        return qfi_triton_error(TRITONSERVER_ERROR_UNSUPPORTED,
                                "model '%s': input '%s' is in GPU memory; raw images and KIND_CPU instances take "
                                "host memory (system shared memory works)", m->name, name);
    return NULL;
}

/* The error of a failed qforge call on instance `in` (its engine's message). */
static TRITONSERVER_Error *instance_error(const tq_instance *in, qf_status st)
{
    char what[300];
    snprintf(what, sizeof what, "instance '%s'", in->name);
    return qfi_triton_qf_error(st, what);
}

/* Whether any buffer of the request's input t lies in GPU memory. */
static bool input_on_gpu(TRITONBACKEND_Request *request, const tq_tensor *t)
{
    TRITONBACKEND_Input *input;
    uint32_t nbuf = 0;
    TRITONSERVER_Error *err = TRITONBACKEND_RequestInput(request, t->name, &input);
    if (!err) err = TRITONBACKEND_InputProperties(input, NULL, NULL, NULL, NULL, NULL, &nbuf);
    if (err) { /* checked before: the host path will report it */
        TRITONSERVER_ErrorDelete(err);
        return false;
    }
    for (uint32_t b = 0; b < nbuf; b++) {
        const void *p;
        uint64_t size;
        TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
        int64_t id = 0;
        if ((err = TRITONBACKEND_InputBuffer(input, b, &p, &size, &mt, &id))) {
            TRITONSERVER_ErrorDelete(err);
            return false;
        }
        if (!host_memory(mt)) return true;
    }
    return false;
}

/* Input t of a job written straight into the engine's device input, buffer by
 * buffer, wherever each lies (the GPU path: a client's CUDA shared memory
 * costs no trip through the host). */
static TRITONSERVER_Error *write_device_input(tq_instance *in, qf_engine *e, const tq_tensor *t, const tq_job *job)
{
    TRITONBACKEND_Input *input;
    uint32_t nbuf;
    TRITONSERVER_Error *err = TRITONBACKEND_RequestInput(job->request, t->name, &input);
    if (!err) err = TRITONBACKEND_InputProperties(input, NULL, NULL, NULL, NULL, NULL, &nbuf);
    size_t off = (size_t)job->first * t->item_bytes, end = off + t->item_bytes * (size_t)job->items;
    for (uint32_t b = 0; !err && b < nbuf; b++) {
        const void *p;
        uint64_t size;
        TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
        int64_t id = 0;
        if ((err = TRITONBACKEND_InputBuffer(input, b, &p, &size, &mt, &id))) break;
        if (size > end - off)
            return qfi_triton_error(TRITONSERVER_ERROR_INTERNAL, "model '%s': input '%s' has more data than its size",
                                    in->m->name, t->name);
        qf_status st = qf_engine_write_input(e, t->index, off, p, size);
        if (st != QF_OK) return instance_error(in, st);
        off += size;
    }
    return err;
}

/* Checks one input of a request against the model; *items is its batch. */
static TRITONSERVER_Error *check_input(const tq_model *m, const tq_tensor *t, TRITONBACKEND_Request *request, int *items)
{
    TRITONBACKEND_Input *input;
    TRITONSERVER_Error *err = TRITONBACKEND_RequestInput(request, t->name, &input);
    if (err) {
        TRITONSERVER_ErrorDelete(err);
        return qfi_triton_error(TRITONSERVER_ERROR_INVALID_ARG, "model '%s': the request has no input '%s'", m->name, t->name);
    }
    TRITONSERVER_DataType type;
    const int64_t *shape;
    uint32_t ndim, nbuf;
    uint64_t bytes;
    if ((err = TRITONBACKEND_InputProperties(input, NULL, &type, &shape, &ndim, &bytes, &nbuf))) return err;
    if (type != t->wire)
        return qfi_triton_error(TRITONSERVER_ERROR_INVALID_ARG, "model '%s': input '%s' is %s; the model takes %s", m->name,
                                t->name, TRITONSERVER_DataTypeString(type), TRITONSERVER_DataTypeString(t->wire));
    char got[256], want[256], most[48] = "";
    int lead = m->max_batch > 0;
    bool ok = ndim == (uint32_t)(t->ndim + lead) && (!lead || (shape[0] >= 1 && shape[0] <= m->max_batch));
    for (int d = 0; ok && d < t->ndim; d++) {
        int64_t s = shape[d + lead];
        ok = t->dims[d] >= 0 ? s == t->dims[d] : s >= 1 && s <= QF_IMAGE_MAX_SIDE;
    }
    if (ok && t->image) ok = (shape[3] == 1 || shape[3] == 3) && shape[1] * shape[2] <= QF_IMAGE_MAX_PIXELS;
    if (!ok) {
        if (lead) snprintf(most, sizeof most, " with a batch of at most %d", m->max_batch);
        if (t->image) snprintf(most + strlen(most), sizeof most - strlen(most), ", C 1 or 3");
        return qfi_triton_error(TRITONSERVER_ERROR_INVALID_ARG, "model '%s': input '%s' has shape %s; the model takes %s%s",
                                m->name, t->name, shape_text(shape, ndim, got, sizeof got),
                                expected_shape(m, t, want, sizeof want), most);
    }
    *items = lead ? (int)shape[0] : 1;
    // bytes of one item as sent: pixels for a raw image, the model's tensor otherwise
    uint64_t item = t->image ? (uint64_t)(shape[1] * shape[2] * shape[3]) : t->item_bytes;
    if (bytes != item * (uint64_t)*items)
        return qfi_triton_error(TRITONSERVER_ERROR_INVALID_ARG,
                                "model '%s': input '%s' has %llu bytes of data; shape %s of %s takes %llu", m->name, t->name,
                                (unsigned long long)bytes, shape_text(shape, ndim, got, sizeof got),
                                TRITONSERVER_DataTypeString(type), (unsigned long long)(item * (uint64_t)*items));
    // raw images are preprocessed on the host; a model's tensors may lie in GPU memory (KIND_GPU, run_batch)
    for (uint32_t b = 0; t->image && b < nbuf; b++) {
        const void *p;
        uint64_t size;
        if ((err = host_buffer(m, input, t->name, b, &p, &size))) return err;
    }
    return NULL;
}

static TRITONSERVER_Error *check_request(const tq_model *m, TRITONBACKEND_Request *request, int *items)
{
    *items = 0;
    for (int i = 0; i < m->n_inputs; i++) {
        int n;
        TRITONSERVER_Error *err = check_input(m, &m->inputs[i], request, &n);
        if (err) return err;
        if (i > 0 && n != *items)
            return qfi_triton_error(TRITONSERVER_ERROR_INVALID_ARG, "model '%s': inputs '%s' and '%s' have batch %d and %d",
                                    m->name, m->inputs[0].name, m->inputs[i].name, *items, n);
        *items = n;
    }
    return NULL;
}

/* The request's data of input t, contiguous: its one buffer, or the instance's scratch. */
static TRITONSERVER_Error *input_data(tq_instance *in, const tq_tensor *t, TRITONBACKEND_Request *request,
                                      const uint8_t **data, const int64_t **shape)
{
    TRITONBACKEND_Input *input;
    TRITONSERVER_DataType type;
    uint32_t ndim, nbuf;
    uint64_t bytes;
    TRITONSERVER_Error *err = TRITONBACKEND_RequestInput(request, t->name, &input);
    if (!err) err = TRITONBACKEND_InputProperties(input, NULL, &type, shape, &ndim, &bytes, &nbuf);
    if (err) return err;
    if (nbuf > 1 && in->scratch_cap < bytes) {
        uint8_t *p = realloc(in->scratch, bytes);
        if (!p) return qfi_triton_error(TRITONSERVER_ERROR_INTERNAL, "instance '%s': out of memory", in->name);
        in->scratch = p;
        in->scratch_cap = bytes;
    }
    uint64_t off = 0;
    for (uint32_t b = 0; b < nbuf; b++) {
        const void *p;
        uint64_t size;
        if ((err = host_buffer(in->m, input, t->name, b, &p, &size))) return err;
        if (off + size > bytes)
            return qfi_triton_error(TRITONSERVER_ERROR_INTERNAL, "model '%s': input '%s' has more data than its size",
                                    in->m->name, t->name);
        if (nbuf == 1) *data = p;
        else memcpy(in->scratch + off, p, size);
        off += size;
    }
    if (nbuf > 1) *data = in->scratch;
    if (nbuf == 0) *data = NULL;
    return NULL;
}

/* One contiguous part of a batch's input: bytes copied as they are, or one
 * image's raw pixels preprocessed. A batch's pieces are filled from several
 * threads: a 256-image FP32 batch is 154 MB to copy before the engine runs. */
typedef struct tq_piece {
    const uint8_t *src;
    uint8_t *dst;
    size_t bytes;    /* a copy; 0: an image */
    int h, w, c;     /* the image's */
    int item;        /* its index in the request */
    uint32_t job;
    qf_status status;
} tq_piece;

#define COPY_PIECE ((size_t)1 << 20)       /* bytes one copy piece holds at most */
#define BYTES_PER_THREAD ((size_t)4 << 20) /* a thread is worth starting for this much */

typedef struct fill_work {
    const tq_tensor *t;
    tq_piece *pieces;
} fill_work;

static void fill_piece(void *user, int64_t i)
{
    const fill_work *f = user;
    tq_piece *p = &f->pieces[i];
    if (p->bytes) {
        memcpy(p->dst, p->src, p->bytes);
        p->status = QF_OK;
        return;
    }
    // qf_image only reads px; the cast drops const for its plain struct
    qf_image img = {.w = p->w, .h = p->h, .c = p->c, .px = (uint8_t *)p->src};
    p->status = qf_preprocess_image(&f->t->pp, &img, "image", (float *)p->dst);
}

static TRITONSERVER_Error *add_piece(tq_instance *in, size_t *n, tq_piece p)
{
    if (*n == in->pieces_cap) {
        size_t cap = in->pieces_cap ? 2 * in->pieces_cap : 256;
        tq_piece *q = realloc(in->pieces, cap * sizeof *q);
        if (!q) return qfi_triton_error(TRITONSERVER_ERROR_INTERNAL, "instance '%s': out of memory", in->name);
        in->pieces = q;
        in->pieces_cap = cap;
    }
    in->pieces[(*n)++] = p;
    return NULL;
}

/* The error of an image piece that failed: preprocessed again on this thread,
 * where qforge's message is kept, under the name it has in the request. */
static TRITONSERVER_Error *image_error(tq_instance *in, const tq_tensor *t, const tq_piece *p)
{
    qf_image img = {.w = p->w, .h = p->h, .c = p->c, .px = (uint8_t *)p->src};
    char name[300], what[300];
    snprintf(name, sizeof name, "input '%s' image %d", t->name, p->item);
    qf_status st = qf_preprocess_image(&t->pp, &img, name, (float *)p->dst);
    snprintf(what, sizeof what, "model '%s'", in->m->name);
    return qfi_triton_qf_error(st != QF_OK ? st : p->status, what);
}

/* Adds the pieces that write job j's items of input t at dst to in->pieces[*n..].
 * An input gathered into the instance's scratch (several buffers) is filled at
 * once: the next request's gathering reuses the scratch. */
static TRITONSERVER_Error *plan_input(tq_instance *in, const tq_tensor *t, uint32_t j, const tq_job *job, uint8_t *dst,
                                      size_t *n)
{
    const uint8_t *src = NULL;
    const int64_t *shape = NULL;
    TRITONSERVER_Error *err = input_data(in, t, job->request, &src, &shape);
    if (err || !src) return err;
    size_t from = *n;
    if (!t->image) {
        size_t bytes = t->item_bytes * (size_t)job->items;
        for (size_t off = 0; off < bytes && !err; off += COPY_PIECE)
            err = add_piece(in, n, (tq_piece){.src = src + off, .dst = dst + off,
                                              .bytes = bytes - off < COPY_PIECE ? bytes - off : COPY_PIECE, .job = j});
    } else {
        int h = (int)shape[1], w = (int)shape[2], c = (int)shape[3];
        for (int i = 0; i < job->items && !err; i++)
            err = add_piece(in, n, (tq_piece){.src = src + (size_t)i * h * w * c, .dst = dst + (size_t)i * t->item_bytes,
                                              .h = h, .w = w, .c = c, .item = i, .job = j});
    }
    if (!err && src == in->scratch) {
        fill_work f = {t, in->pieces};
        for (size_t k = from; k < *n && !err; k++) {
            fill_piece(&f, (int64_t)k);
            if (in->pieces[k].status != QF_OK) err = image_error(in, t, &in->pieces[k]);
        }
        *n = from; /* done: not to be filled again from a scratch the next request reuses */
    }
    return err;
}

/* Fills in->pieces[0..n), from as many threads as the bytes are worth. */
static void fill_pieces(tq_instance *in, const tq_tensor *t, size_t n)
{
    size_t bytes = 0;
    for (size_t k = 0; k < n; k++) bytes += in->pieces[k].bytes ? in->pieces[k].bytes : t->item_bytes;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    size_t threads = bytes / BYTES_PER_THREAD + 1;
    if (cores > 0 && threads > (size_t)cores) threads = (size_t)cores;
    fill_work f = {t, in->pieces};
    qf_parallel_for((int)threads, (int64_t)n, fill_piece, &f);
}


static const tq_tensor *find_output(const tq_model *m, const char *name)
{
    for (int i = 0; i < m->n_outputs; i++)
        if (strcmp(m->outputs[i].name, name) == 0) return &m->outputs[i];
    return NULL;
}

/* Puts the outputs a request asked for in its response: items [first, first + items) of the engine's. */
static TRITONSERVER_Error *fill_outputs(tq_instance *in, qf_engine *e, tq_job *job, int first)
{
    const tq_model *m = in->m;
    uint32_t count;
    TRITONSERVER_Error *err = TRITONBACKEND_RequestOutputCount(job->request, &count);
    for (uint32_t o = 0; !err && o < count; o++) {
        const char *name;
        if ((err = TRITONBACKEND_RequestOutputName(job->request, o, &name))) break;
        const tq_tensor *t = find_output(m, name);
        if (!t) {
            err = qfi_triton_error(TRITONSERVER_ERROR_INVALID_ARG, "model '%s': no output '%s'", m->name, name);
            break;
        }
        int64_t shape[QF_MAX_DIMS + 1];
        int lead = m->max_batch > 0;
        shape[0] = job->items;
        memcpy(shape + lead, t->dims, (size_t)t->ndim * sizeof shape[0]);
        TRITONBACKEND_Output *out;
        void *buf;
        size_t bytes = t->item_bytes * (size_t)job->items;
        TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
        int64_t id = 0;
        if ((err = TRITONBACKEND_ResponseOutput(job->response, &out, name, t->wire, shape, (uint32_t)(t->ndim + lead))) ||
            (err = TRITONBACKEND_OutputBuffer(out, &buf, bytes, &mt, &id)))
            break;
        size_t at = t->item_bytes * (size_t)first;
        if (host_memory(mt)) {
            memcpy(buf, (const uint8_t *)qf_engine_output(e, t->index) + at, bytes);
        } else if (!in->gpu) {
            err = qfi_triton_error(TRITONSERVER_ERROR_UNSUPPORTED,
                                   "model '%s': output '%s' was asked for in GPU memory; a KIND_CPU instance writes "
                                   "host memory (system shared memory works)", m->name, name);
            break;
        } else {
            qf_status st = qf_engine_read_output(e, t->index, at, buf, bytes); /* a client's CUDA shared memory */
            if (st != QF_OK) {
                err = instance_error(in, st);
                break;
            }
        }
    }
    return err;
}

/* Runs jobs[0..n) (those without an error) as one batch. */
static void run_batch(tq_instance *in, tq_job *jobs, uint32_t n, uint64_t exec_start)
{
    const tq_model *m = in->m;
    int total = 0;
    for (uint32_t j = 0; j < n; j++)
        if (!jobs[j].error) total += jobs[j].items;
    if (total == 0) return;
    int k = 0;
    while (m->sizes[k] < total) k++;
    qf_engine *e = in->engines[k];
    // every good request's place in the batch, the same for each input
    int at = 0;
    for (uint32_t j = 0; j < n; j++) {
        jobs[j].first = jobs[j].error ? -1 : at;
        if (!jobs[j].error) at += jobs[j].items;
    }
    for (int i = 0; i < m->n_inputs; i++) {
        const tq_tensor *t = &m->inputs[i];
        // an input that any request sends in GPU memory goes to the device
        // directly for the whole batch (the padding is not written)
        bool on_gpu = false;
        for (uint32_t j = 0; j < n && !on_gpu; j++) on_gpu = !jobs[j].error && !t->image && input_on_gpu(jobs[j].request, t);
        if (on_gpu) {
            for (uint32_t j = 0; j < n; j++)
                if (!jobs[j].error)
                    jobs[j].error = in->gpu ? write_device_input(in, e, t, &jobs[j])
                                            : qfi_triton_error(TRITONSERVER_ERROR_UNSUPPORTED,
                                                               "model '%s': input '%s' is in GPU memory; a KIND_CPU "
                                                               "instance takes host memory", m->name, t->name);
            continue;
        }
        uint8_t *dst = qf_engine_input(e, t->index);
        size_t pieces = 0;
        for (uint32_t j = 0; j < n; j++)
            if (!jobs[j].error) jobs[j].error = plan_input(in, t, j, &jobs[j], dst + jobs[j].first * t->item_bytes, &pieces);
        fill_pieces(in, t, pieces);
        for (size_t p = 0; p < pieces; p++)
            if (in->pieces[p].status != QF_OK && !jobs[in->pieces[p].job].error)
                jobs[in->pieces[p].job].error = image_error(in, t, &in->pieces[p]);
        // a failed request's slot holds zeros; the padding behind the batch is
        // left as an earlier batch wrote it (zeros at first): items do not mix,
        // its outputs are dropped, and clearing it cost as much as the fill
        // (up to 77 MB on one thread per batch at ResNet-50's 602 KB an image)
        for (uint32_t j = 0; j < n; j++)
            if (jobs[j].error && jobs[j].first >= 0)
                memset(dst + jobs[j].first * t->item_bytes, 0, t->item_bytes * (size_t)jobs[j].items);
    }
    uint64_t compute_start = now_ns();
    qf_status st = qf_engine_run_items(e, total); /* the padding is not uploaded */
    uint64_t compute_end = now_ns();
    for (uint32_t j = 0; j < n; j++) {
        if (jobs[j].error) continue;
        if (st != QF_OK) {
            jobs[j].error = instance_error(in, st);
        } else {
            jobs[j].error = fill_outputs(in, e, &jobs[j], jobs[j].first);
        }
    }
    // statistics before the responses go out, so a client that has its answer sees them
    uint64_t exec_end = now_ns();
    for (uint32_t j = 0; j < n; j++) {
        if (jobs[j].error) continue;
        TRITONSERVER_Error *err = TRITONBACKEND_ModelInstanceReportStatistics(in->ti, jobs[j].request, true, exec_start,
                                                                              compute_start, compute_end, exec_end);
        if (err) TRITONSERVER_ErrorDelete(err);
    }
    TRITONSERVER_Error *err = TRITONBACKEND_ModelInstanceReportBatchStatistics(in->ti, (uint64_t)total, exec_start,
                                                                               compute_start, compute_end, exec_end);
    if (err) TRITONSERVER_ErrorDelete(err);
    for (uint32_t j = 0; j < n; j++) {
        if (jobs[j].error) continue;
        err = TRITONBACKEND_ResponseSend(jobs[j].response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, NULL);
        jobs[j].response = NULL; /* Triton's now, sent or not */
        if (err) {
            TQ_LOG(TRITONSERVER_LOG_ERROR, "instance '%s': sending a response: %s", in->name, TRITONSERVER_ErrorMessage(err));
            TRITONSERVER_ErrorDelete(err);
        }
    }
}

/* Answers a failed job with its error and releases its request. */
static void finish(tq_instance *in, tq_job *job, uint64_t exec_start)
{
    if (job->error) {
        if (job->response) {
            TRITONSERVER_Error *err = TRITONBACKEND_ResponseSend(job->response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, job->error);
            if (err) TRITONSERVER_ErrorDelete(err);
        }
        uint64_t t = now_ns();
        TRITONSERVER_Error *err = TRITONBACKEND_ModelInstanceReportStatistics(in->ti, job->request, false, exec_start, t, t, t);
        if (err) TRITONSERVER_ErrorDelete(err);
        TRITONSERVER_ErrorDelete(job->error);
    }
    TRITONSERVER_Error *err = TRITONBACKEND_RequestRelease(job->request, TRITONSERVER_REQUEST_RELEASE_ALL);
    if (err) {
        TQ_LOG(TRITONSERVER_LOG_ERROR, "instance '%s': releasing a request: %s", in->name, TRITONSERVER_ErrorMessage(err));
        TRITONSERVER_ErrorDelete(err);
    }
}

TRITONSERVER_Error *TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance *instance,
                                                       TRITONBACKEND_Request **requests, const uint32_t count)
{
    uint64_t exec_start = now_ns();
    void *state;
    TRITONSERVER_Error *err = TRITONBACKEND_ModelInstanceState(instance, &state);
    if (err) return err;
    tq_instance *in = state;
    const tq_model *m = in->m;
    if (count > in->jobs_cap) {
        tq_job *jobs = realloc(in->jobs, count * sizeof *jobs);
        // returning an error leaves the requests with Triton, which fails them
        if (!jobs) return qfi_triton_error(TRITONSERVER_ERROR_INTERNAL, "instance '%s': out of memory", in->name);
        in->jobs = jobs;
        in->jobs_cap = count;
    }
    tq_job *jobs = in->jobs;
    for (uint32_t r = 0; r < count; r++) {
        tq_job *job = &jobs[r];
        *job = (tq_job){.request = requests[r]};
        job->error = TRITONBACKEND_ResponseNew(&job->response, job->request);
        if (!job->error) job->error = check_request(m, job->request, &job->items);
    }
    // consecutive good requests while their items fit the largest engine (a
    // checked request alone always fits: its batch is at most max_batch_size)
    int cap = m->sizes[m->n_sizes - 1];
    for (uint32_t first = 0; first < count;) {
        uint32_t last = first;
        int items = 0;
        while (last < count && (jobs[last].error || items + jobs[last].items <= cap)) {
            if (!jobs[last].error) items += jobs[last].items;
            last++;
        }
        run_batch(in, jobs + first, last - first, exec_start);
        first = last;
    }
    for (uint32_t r = 0; r < count; r++) finish(in, &jobs[r], exec_start);
    return NULL;
}
