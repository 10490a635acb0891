/* Status codes, per-thread error messages and the log callback. The library
 * never prints: messages go to whoever installed a callback. */
#include "internal.h"

static const char *const status_names[] = {
    [QF_OK] = "ok",
    [QF_ERR_IO] = "io",
    [QF_ERR_FORMAT] = "format",
    [QF_ERR_INVALID] = "invalid",
    [QF_ERR_UNSUPPORTED] = "unsupported",
    [QF_ERR_NOMEM] = "out of memory",
    [QF_ERR_DEVICE] = "device",
    [QF_ERR_USAGE] = "usage",
};
_Static_assert(QF_ARRAY_LEN(status_names) == QF_STATUS_COUNT, "status name table incomplete");

const char *qf_status_name(qf_status s)
{
    return (unsigned)s < QF_STATUS_COUNT ? status_names[s] : "?";
}

static _Thread_local char last_error[1024];

const char *qf_error_message(void) { return last_error; }

qf_status qf_error(qf_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return s;
}

qf_status qf_error_prefix(qf_status s, const char *fmt, ...)
{
    char prefix[512], old[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, last_error, sizeof old);
    snprintf(last_error, sizeof last_error, "%.500s: %.500s", prefix, old);
    return s;
}

static qf_log_fn log_fn;
static void *log_user;
static qf_log_level log_min = QF_LOG_INFO;

void qf_log_set(qf_log_fn fn, void *user, qf_log_level min_level)
{
    log_fn = fn;
    log_user = user;
    log_min = min_level;
}

void qf_log(qf_log_level level, const char *fmt, ...)
{
    if (!log_fn || level < log_min) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_fn(log_user, level, msg);
}

void *qfi_calloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) qf_error(QF_ERR_NOMEM, "out of memory allocating %zu x %zu bytes", n, size);
    return p;
}

char *qfi_strdup(const char *s)
{
    char *d = strdup(s ? s : "");
    if (!d) qf_error(QF_ERR_NOMEM, "out of memory");
    return d;
}

const char *qf_version(void) { return PACKAGE_VERSION; }
