/* Triton's entry points for the qforge backend, but for execution
 * (execute.c): the backend, its models (a .qfm each, config.c) and their
 * instances (an engine per batch size on the CPU or on one GPU). */
#include "backend.h"
#include "json.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Triton gives every backend a default max_batch_size for models it completes. */
typedef struct tq_backend {
    int default_max_batch;
} tq_backend;

TRITONSERVER_Error *qfi_triton_error(TRITONSERVER_Error_Code code, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return TRITONSERVER_ErrorNew(code, msg);
}

TRITONSERVER_Error *qfi_triton_qf_error(qf_status st, const char *what)
{
    TRITONSERVER_Error_Code code = TRITONSERVER_ERROR_INTERNAL;
    switch (st) {
    case QF_ERR_FORMAT:
    case QF_ERR_INVALID:
    case QF_ERR_USAGE: code = TRITONSERVER_ERROR_INVALID_ARG; break;
    case QF_ERR_UNSUPPORTED: code = TRITONSERVER_ERROR_UNSUPPORTED; break;
    case QF_ERR_IO: code = TRITONSERVER_ERROR_NOT_FOUND; break;
    default: break;
    }
    const char *msg = qf_error_message();
    return qfi_triton_error(code, "%s: %s", what, msg[0] ? msg : qf_status_name(st));
}

void qfi_triton_log(TRITONSERVER_LogLevel level, const char *file, int line, const char *fmt, ...)
{
    if (!TRITONSERVER_LogIsEnabled(level)) return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *base = strrchr(file, '/');
    TRITONSERVER_Error *err = TRITONSERVER_LogMessage(level, base ? base + 1 : file, line, msg);
    if (err) TRITONSERVER_ErrorDelete(err);
}

TRITONSERVER_DataType qfi_triton_dtype(qf_dtype t)
{
    switch (t) {
    case QF_F32: return TRITONSERVER_TYPE_FP32;
    case QF_F16: return TRITONSERVER_TYPE_FP16;
    case QF_BF16: return TRITONSERVER_TYPE_BF16;
    case QF_I8: return TRITONSERVER_TYPE_INT8;
    case QF_U8: return TRITONSERVER_TYPE_UINT8;
    case QF_I32: return TRITONSERVER_TYPE_INT32;
    case QF_I64: return TRITONSERVER_TYPE_INT64;
    case QF_BOOL: return TRITONSERVER_TYPE_BOOL;
    default: return TRITONSERVER_TYPE_INVALID;
    }
}

/* libqforge's log goes to Triton's, at the same levels. */
static void forward_qf_log(void *user, qf_log_level level, const char *msg)
{
    static const TRITONSERVER_LogLevel map[QF_LOG_LEVEL_COUNT] = {
        [QF_LOG_DEBUG] = TRITONSERVER_LOG_VERBOSE,
        [QF_LOG_INFO] = TRITONSERVER_LOG_INFO,
        [QF_LOG_WARN] = TRITONSERVER_LOG_WARN,
        [QF_LOG_ERROR] = TRITONSERVER_LOG_ERROR,
    };
    qfi_triton_log(map[level], "libqforge", 0, "%s", msg);
}

TRITONSERVER_Error *TRITONBACKEND_Initialize(TRITONBACKEND_Backend *backend)
{
    uint32_t major, minor;
    TRITONSERVER_Error *err = TRITONBACKEND_ApiVersion(&major, &minor);
    if (err) return err;
    if (major != TRITONBACKEND_API_VERSION_MAJOR || minor < TRITONBACKEND_API_VERSION_MINOR)
        return qfi_triton_error(TRITONSERVER_ERROR_UNSUPPORTED,
                                "the qforge backend needs Triton backend API %d.%d or a later minor; this server has %u.%u",
                                TRITONBACKEND_API_VERSION_MAJOR, TRITONBACKEND_API_VERSION_MINOR, major, minor);
    qf_log_set(forward_qf_log, NULL, TRITONSERVER_LogIsEnabled(TRITONSERVER_LOG_VERBOSE) ? QF_LOG_DEBUG : QF_LOG_INFO);

    tq_backend *b = calloc(1, sizeof *b);
    if (!b) return qfi_triton_error(TRITONSERVER_ERROR_INTERNAL, "qforge backend: out of memory");
    b->default_max_batch = 4; /* Triton's own default for --backend-config=default-max-batch-size */
    TRITONSERVER_Message *msg;
    if (!(err = TRITONBACKEND_BackendConfig(backend, &msg))) {
        const char *text;
        size_t len;
        char why[128];
        if (!(err = TRITONSERVER_MessageSerializeToJson(msg, &text, &len))) {
            qfi_json *cfg = qfi_json_parse(text, len, why, sizeof why);
            int64_t v;
            if (qfi_json_int(qfi_json_get(qfi_json_get(cfg, "cmdline"), "default-max-batch-size"), &v) && v >= 0 &&
                v <= 65536)
                b->default_max_batch = (int)v;
            qfi_json_free(cfg);
        }
        /* the message stays Triton's */
    }
    if (err) {
        free(b);
        return err;
    }
    if ((err = TRITONBACKEND_BackendSetState(backend, b))) {
        free(b);
        return err;
    }
    TQ_LOG(TRITONSERVER_LOG_INFO, "qforge backend %s (Triton backend API %u.%u), default max_batch_size %d", qf_version(),
           major, minor, b->default_max_batch);
    return NULL;
}

TRITONSERVER_Error *TRITONBACKEND_Finalize(TRITONBACKEND_Backend *backend)
{
    void *b;
    TRITONSERVER_Error *err = TRITONBACKEND_BackendState(backend, &b);
    if (err) return err;
    free(b);
    qf_log_set(NULL, NULL, QF_LOG_INFO);
    return NULL;
}

TRITONSERVER_Error *TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model *model)
{
    TRITONBACKEND_Backend *backend;
    void *b;
    TRITONSERVER_Error *err = TRITONBACKEND_ModelBackend(model, &backend);
    if (!err) err = TRITONBACKEND_BackendState(backend, &b);
    if (err) return err;
    tq_model *m = calloc(1, sizeof *m);
    if (!m) return qfi_triton_error(TRITONSERVER_ERROR_INTERNAL, "qforge backend: out of memory");
    err = qfi_triton_model_load(m, model, ((tq_backend *)b)->default_max_batch);
    if (!err) err = TRITONBACKEND_ModelSetState(model, m);
    if (err) {
        qfi_triton_model_free(m);
        free(m);
    }
    return err;
}

TRITONSERVER_Error *TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model *model)
{
    void *m;
    TRITONSERVER_Error *err = TRITONBACKEND_ModelState(model, &m);
    if (err) return err;
    /* Triton finalizes a model whose initialization failed too (no state then) */
    if (m) qfi_triton_model_free(m);
    free(m);
    return NULL;
}

static void instance_free(tq_instance *in)
{
    for (int k = 0; k < TQ_MAX_SIZES; k++) qf_engine_free(in->engines[k]);
    free(in->jobs);
    free(in->scratch);
    free(in->pieces);
    free(in);
}

TRITONSERVER_Error *TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance *instance)
{
    TRITONBACKEND_Model *model;
    void *m;
    const char *name;
    TRITONSERVER_InstanceGroupKind kind;
    int32_t device;
    TRITONSERVER_Error *err = TRITONBACKEND_ModelInstanceModel(instance, &model);
    if (!err) err = TRITONBACKEND_ModelState(model, &m);
    if (!err) err = TRITONBACKEND_ModelInstanceName(instance, &name);
    if (!err) err = TRITONBACKEND_ModelInstanceKind(instance, &kind);
    if (!err) err = TRITONBACKEND_ModelInstanceDeviceId(instance, &device);
    if (err) return err;
    if (kind != TRITONSERVER_INSTANCEGROUPKIND_CPU && kind != TRITONSERVER_INSTANCEGROUPKIND_GPU)
        return qfi_triton_error(TRITONSERVER_ERROR_UNSUPPORTED, "instance '%s': the qforge backend runs KIND_CPU and KIND_GPU "
                                "instances, not %s", name, TRITONSERVER_InstanceGroupKindString(kind));
    tq_instance *in = calloc(1, sizeof *in);
    if (!in) return qfi_triton_error(TRITONSERVER_ERROR_INTERNAL, "instance '%s': out of memory", name);
    in->m = m;
    in->ti = instance;
    snprintf(in->name, sizeof in->name, "%s", name);
    in->gpu = kind == TRITONSERVER_INSTANCEGROUPKIND_GPU;
    qf_engine_opts opts = {
        .device = kind == TRITONSERVER_INSTANCEGROUPKIND_GPU ? QF_DEVICE_CUDA : QF_DEVICE_CPU,
        .device_index = kind == TRITONSERVER_INSTANCEGROUPKIND_GPU ? device : 0,
        .threads = in->m->threads,
    };
    size_t arena = 0;
    for (int k = 0; k < in->m->n_sizes && !err; k++) {
        qf_status st = qf_engine_create(in->m->graphs[k], &opts, &in->engines[k]);
        if (st != QF_OK) {
            char what[512];
            snprintf(what, sizeof what, "instance '%s': engine at batch %d", name, in->m->sizes[k]);
            err = qfi_triton_qf_error(st, what);
        } else {
            arena += qf_engine_arena_bytes(in->engines[k]);
            // zeros once: a batch's padding is left as the last batch wrote it (execute.c)
            for (int i = 0; i < in->m->n_inputs; i++)
                memset(qf_engine_input(in->engines[k], in->m->inputs[i].index), 0,
                       in->m->inputs[i].item_bytes * (size_t)in->m->sizes[k]);
        }
    }
    if (!err) err = TRITONBACKEND_ModelInstanceSetState(instance, in);
    if (err) {
        instance_free(in);
        return err;
    }
    char where[32];
    if (opts.device == QF_DEVICE_CUDA) snprintf(where, sizeof where, "GPU %d", device);
    else if (opts.threads) snprintf(where, sizeof where, "CPU, %d threads", opts.threads);
    else snprintf(where, sizeof where, "CPU, all cores");
    TQ_LOG(TRITONSERVER_LOG_INFO, "instance '%s' (%s): %d engines, %.1f MiB of activations", name, where,
           in->m->n_sizes, (double)arena / (1 << 20));
    return NULL;
}

TRITONSERVER_Error *TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance *instance)
{
    void *in;
    TRITONSERVER_Error *err = TRITONBACKEND_ModelInstanceState(instance, &in);
    if (err) return err;
    if (in) instance_free(in);
    return NULL;
}
