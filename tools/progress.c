/* A one-line progress bar on stderr (images/s and ETA), shown only when stderr
 * is a terminal and --quiet was not given. */
#include "cli.h"
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void progress_start(progress *p, const char *label, int64_t total)
{
    progress_start_units(p, label, total, "img");
}

void progress_start_units(progress *p, const char *label, int64_t total, const char *unit)
{
    p->label = label;
    p->unit = unit;
    p->total = total;
    p->done = 0;
    p->t0 = now();
    p->last = 0;
    p->enabled = !cli_quiet && isatty(STDERR_FILENO);
}

void progress_update(progress *p, int64_t done)
{
    p->done = done;
    if (!p->enabled) return;
    double t = now();
    if (t - p->last < 0.1 && done < p->total) return;
    p->last = t;
    double rate = done / (t - p->t0 + 1e-9);
    double eta = rate > 0 ? (p->total - done) / rate : 0;
    int width = 30, fill = p->total ? (int)(width * done / p->total) : width;
    fprintf(stderr, "\r%s [%.*s%*s] %lld/%lld  %.*f %s/s  ETA %02d:%02d ", p->label, fill,
            "##############################", width - fill, "", (long long)done, (long long)p->total, rate < 10 ? 1 : 0,
            rate, p->unit, (int)eta / 60, (int)eta % 60);
    fflush(stderr);
}

double progress_end(progress *p)
{
    double elapsed = now() - p->t0;
    if (p->enabled) fprintf(stderr, "\r\033[K");
    return elapsed;
}
