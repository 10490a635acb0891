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

static _Thread_local char last_error[sizeof ((qfi_error_saved *)0)->msg];
/* The context the message carries already: "FILE: " ends at file_end (0:
 * none, so node context goes first); node: it names its node. Reset by
 * qf_error, so a new message starts without context. */
static _Thread_local size_t file_end;
static _Thread_local bool has_node;

/* Messages are one line whatever a file puts in the names they quote (a tensor
 * name or a file name with a line break): control characters become '?'. */
static void one_line(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) *s = '?';
}

const char *qf_error_message(void) { return last_error; }

qf_status qf_error(qf_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    file_end = 0;
    has_node = false;
    one_line(last_error);
    return s;
}

/* Inserts "text: " at byte `at` of the message; returns the bytes added. */
static size_t insert_context(size_t at, const char *text)
{
    char old[sizeof last_error];
    memcpy(old, last_error, sizeof old);
    const size_t len = strlen(old);
    if (at > len) at = len;
    int n = snprintf(last_error, sizeof last_error, "%.*s%.500s: %s", (int)at, old, text, old + at);
    one_line(last_error);
    return n > 0 ? strlen(last_error) - len : 0;
}

qf_status qf_error_prefix(qf_status s, const char *fmt, ...)
{
    char prefix[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    const size_t added = insert_context(0, prefix);
    if (file_end) file_end += added; /* outside the file's context, which stays where it was */
    return s;
}

qf_status qfi_error_context(qf_status s, const char *path, const char *node, const char *op)
{
    if (node && !has_node) {
        char ctx[320];
        if (op) snprintf(ctx, sizeof ctx, "node %.200s (%.64s)", node, op);
        else snprintf(ctx, sizeof ctx, "node %.200s", node);
        insert_context(file_end, ctx);
        has_node = true;
    }
    if (path && *path && !file_end) file_end = insert_context(0, path);
    return s;
}

qf_status qfi_error_node(qf_status s, const qf_graph *g, const qf_node *n)
{
    return qfi_error_context(s, g->source, n->name ? n->name : "?", qf_op_name(n->op));
}

qf_status qfi_error_file(qf_status s, const char *path) { return qfi_error_context(s, path, NULL, NULL); }

void qfi_error_save(qfi_error_saved *e)
{
    memcpy(e->msg, last_error, sizeof e->msg);
    e->file_end = file_end;
    e->has_node = has_node;
}

qf_status qfi_error_restore(qf_status s, const qfi_error_saved *e)
{
    memcpy(last_error, e->msg, sizeof last_error);
    file_end = e->file_end;
    has_node = e->has_node;
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
    one_line(msg);
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
