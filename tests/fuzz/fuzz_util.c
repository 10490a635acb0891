/* Helpers of the libFuzzer harnesses (see fuzz_util.h). Environment failures
 * (a temporary folder that cannot be written) abort: they are not findings,
 * but a harness that silently tests nothing would be worse. */
#define _XOPEN_SOURCE 700
#include "fuzz_util.h"
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Engines are built and run only below these: a fuzzer wants thousands of runs a second. */
#define SMALL_BYTES ((size_t)8 << 20)
#define SMALL_FLOPS ((int64_t)20 << 20)

static char dir[512];

static int remove_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    return remove(path);
}

static void remove_dir(void)
{
    if (dir[0]) nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *fz_dir(void)
{
    if (dir[0]) return dir;
    const char *base = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/qforge-fuzz-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(dir)) {
        perror(dir);
        abort();
    }
    atexit(remove_dir);
    return dir;
}

const char *fz_path(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/%s", fz_dir(), name);
    return buf;
}

void fz_write(const char *path, const void *data, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        perror(path);
        abort();
    }
    const char *p = data;
    while (size > 0) {
        ssize_t n = write(fd, p, size);
        if (n <= 0) {
            perror(path);
            abort();
        }
        p += n;
        size -= (size_t)n;
    }
    close(fd);
}

/* Whether msg names culprit as messages show names: control characters as '?'
 * (lib/status.c keeps messages one line), a long name possibly cut short. */
static bool names_culprit(const char *msg, const char *culprit)
{
    char shown[101];
    size_t n = 0;
    for (; culprit[n] && n < sizeof shown - 1; n++) {
        const unsigned char c = (unsigned char)culprit[n];
        shown[n] = c < 0x20 || c == 0x7f ? '?' : (char)c;
    }
    shown[n] = 0;
    return strstr(msg, shown) != NULL;
}

void fz_check_error(qf_status st, const char *culprit)
{
    if (st == QF_OK) return;
    const char *msg = qf_error_message();
    const char *why = NULL;
    if (st < 0 || st >= QF_STATUS_COUNT) why = "an unknown status";
    else if (!msg[0]) why = "no message";
    else if (strchr(msg, '\n')) why = "a message of more than one line";
    else if (culprit && !names_culprit(msg, culprit)) why = "a message that does not name the culprit";
    if (!why) return;
    fprintf(stderr, "fuzz: status %d with %s: \"%s\"\n", (int)st, why, msg);
    abort();
}

bool fz_graph_is_small(const qf_graph *g)
{
    size_t bytes = 0;
    for (int v = 0; v < g->n_values; v++) {
        size_t b = qf_value_bytes(&g->values[v]);
        if (b > SMALL_BYTES) return false;
        bytes += b;
        if (bytes > SMALL_BYTES) return false;
    }
    qf_graph_stats st;
    qf_graph_stats_compute(g, &st);
    return st.flops >= 0 && st.flops <= SMALL_FLOPS / (g->batch > 0 ? g->batch : 1);
}

void fz_run_cpu(const qf_graph *g, const char *culprit)
{
    qf_engine_opts opts = {.device = QF_DEVICE_CPU, .threads = 1};
    qf_engine *e = NULL;
    qf_status st = qf_engine_create(g, &opts, &e);
    fz_check_error(st, culprit);
    if (st != QF_OK) return;
    for (int i = 0; i < g->n_inputs; i++) memset(qf_engine_input(e, i), 0, qf_value_bytes(&g->values[g->inputs[i]]));
    fz_check_error(qf_engine_run(e), culprit);
    qf_engine_free(e);
}
