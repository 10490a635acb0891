/* Writing a file all or nothing (table.calib, reports, .qfm): a temporary file
 * beside the target, renamed over it only once every byte is written and
 * synced, so a failure or a crash never leaves a half-written file. */
#include "internal.h"
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

qf_status qfi_atomic_open(qfi_atomic_file *af, const char *path)
{
    memset(af, 0, sizeof *af);
    af->path = path;
    size_t len = strlen(path) + 48;
    af->tmp = malloc(len);
    if (!af->tmp) return qfi_error_file(qf_error(QF_ERR_NOMEM, "out of memory"), path);
    // open(O_EXCL) on a fresh name rather than mkstemp(): the file gets the
    // permissions umask gives a normal new file, not mkstemp's 0600.
    static _Atomic unsigned counter;
    int fd = -1;
    for (int tries = 0; tries < 100 && fd < 0; tries++) {
        snprintf(af->tmp, len, "%s.tmp.%ld.%u", path, (long)getpid(), counter++);
        fd = open(af->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        qf_status st = qfi_error_file(
            qf_error(QF_ERR_IO, "cannot create a temporary file beside it: %s", strerror(errno)), path);
        free(af->tmp);
        af->tmp = NULL;
        return st;
    }
    af->f = fdopen(fd, "w");
    if (!af->f) {
        qf_status st = qfi_error_file(qf_error(QF_ERR_IO, "%s", strerror(errno)), path);
        close(fd);
        unlink(af->tmp);
        free(af->tmp);
        af->tmp = NULL;
        return st;
    }
    return QF_OK;
}

void qfi_atomic_abort(qfi_atomic_file *af)
{
    if (af->f) fclose(af->f);
    if (af->tmp) {
        unlink(af->tmp);
        free(af->tmp);
    }
    af->f = NULL;
    af->tmp = NULL;
}

qf_status qfi_atomic_commit(qfi_atomic_file *af)
{
    int err = 0;
    errno = 0;
    if (fflush(af->f) != 0 || ferror(af->f)) err = errno ? errno : EIO;
    if (!err && fsync(fileno(af->f)) != 0) err = errno;
    if (fclose(af->f) != 0 && !err) err = errno ? errno : EIO;
    af->f = NULL;
    if (!err && rename(af->tmp, af->path) != 0) err = errno;
    if (err) {
        qfi_atomic_abort(af);
        return qfi_error_file(qf_error(QF_ERR_IO, "write failed: %s", strerror(err)), af->path);
    }
    free(af->tmp);
    af->tmp = NULL;
    return QF_OK;
}
