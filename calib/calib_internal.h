/* Declarations shared by the files of calib/ (not installed): the observer's
 * layout for the report and all-or-nothing file writing. */
#ifndef QFORGE_CALIB_INTERNAL_H
#define QFORGE_CALIB_INTERNAL_H

#include "internal.h"
#include "qforge/calib.h"

/* Slots (tracked values) that have been observed, in graph value order; *n set.
 * Returns a malloc'd array the caller frees, or NULL with *n = 0 (also on OOM,
 * with the message set: check *n against qf_calib_tensor_count()). */
int *qfi_calib_seen_slots(const qf_calib *c, int *n);
const char *qfi_calib_slot_name(const qf_calib *c, int slot);
const qf_histogram *qfi_calib_slot_hist(const qf_calib *c, int slot);

/* 64 lowercase hex digits (a SHA-256 as tables store it). */
bool qfi_is_sha256_hex(const char *s);

/* Writing a file all or nothing: the data goes to a temporary file beside `path`
 * (same folder, so rename() is atomic), which replaces `path` only once every
 * write, flush and sync succeeded; on failure it is removed. */
typedef struct qfi_atomic_file {
    FILE *f;
    char *tmp;
    const char *path;
} qfi_atomic_file;

qf_status qfi_atomic_open(qfi_atomic_file *af, const char *path);
/* Closes and renames; on any error removes the temporary and fails naming `path`. */
qf_status qfi_atomic_commit(qfi_atomic_file *af);
/* Closes and removes the temporary (after an error of the caller's). */
void qfi_atomic_abort(qfi_atomic_file *af);

#endif
