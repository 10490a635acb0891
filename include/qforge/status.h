/* qforge status codes, error messages and the log callback.
 * Every fallible library call returns a qf_status; on failure the message that
 * names the file, node or tensor involved is available from qf_error_message(). */
#ifndef QFORGE_STATUS_H
#define QFORGE_STATUS_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qf_status {
    QF_OK = 0,
    QF_ERR_IO,          /* a file could not be opened, read or written */
    QF_ERR_FORMAT,      /* a file is malformed: truncated, corrupt, out of bounds */
    QF_ERR_INVALID,     /* the input is well formed but makes no sense (bad shapes, a cycle) */
    QF_ERR_UNSUPPORTED, /* a valid construct qforge does not handle (an op, a dtype) */
    QF_ERR_NOMEM,       /* an allocation failed or would exceed a sanity bound */
    QF_ERR_DEVICE,      /* a CUDA, cuBLAS or driver call failed */
    QF_ERR_USAGE,       /* a caller passed bad arguments */
    QF_STATUS_COUNT
} qf_status;

/* Short name of a status code ("io", "format", ...). */
const char *qf_status_name(qf_status s);

/* Message of the last failure on this thread ("" if none). */
const char *qf_error_message(void);

/* Records a failure message for this thread and returns `s`, so a caller can
 * write `return qf_error(QF_ERR_FORMAT, "%s: node %s: ...", path, name);`. */
qf_status qf_error(qf_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prefixes the current thread's message with more context ("file.onnx: ...");
 * returns `s` unchanged. */
qf_status qf_error_prefix(qf_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

typedef enum qf_log_level {
    QF_LOG_DEBUG,
    QF_LOG_INFO,
    QF_LOG_WARN,
    QF_LOG_ERROR,
    QF_LOG_LEVEL_COUNT
} qf_log_level;

typedef void (*qf_log_fn)(void *user, qf_log_level level, const char *msg);

/* The library never prints: it hands messages to this callback (default: none).
 * Messages below `min_level` are dropped. */
void qf_log_set(qf_log_fn fn, void *user, qf_log_level min_level);
void qf_log(qf_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif
#endif
