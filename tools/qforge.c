/* qforge: the command-line front end. Dispatches subcommands (like git) and
 * turns library errors into one-line messages and exit codes. */
#include "config.h"
#include "cli.h"
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool cli_quiet;

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"info", cmd_info, "graph summary: inputs/outputs, op counts, parameters, FLOPs per image"},
    {"calib", cmd_calib, "histogram activations on images, choose INT8 thresholds (table.calib)"},
    {"quant", cmd_quant, "rewrite a model to INT8/FP16 with a calibration table, write a .qfm"},
    {"eval", cmd_eval, "accuracy on a folder of images, agreement with a reference model"},
    {"run", cmd_run, "classify images, print the top K classes"},
    {"bench", cmd_bench, "throughput and latency per batch size (images/s, p50/p90/p99), per-node profile"},
};

int cli_fail(qf_status st)
{
    fprintf(stderr, "qforge: %s\n", qf_error_message()[0] ? qf_error_message() : qf_status_name(st));
    return st == QF_ERR_USAGE ? EXIT_USAGE : EXIT_FAIL;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "qforge %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see 'qforge help %s')\n", cmd);
    return EXIT_USAGE;
}

bool cli_parse_int(const char *cmd, const char *opt, const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || end == s || *end || errno || v < lo || v > hi) {
        cli_usage_error(cmd, "%s expects an integer in [%d, %d], got '%s'", opt, lo, hi, s ? s : "");
        return false;
    }
    *out = (int)v;
    return true;
}

void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

int argmax_index(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Whether this warning was printed before: commands that load a model many
 * times (quant --precision best, eval --per-layer) would repeat the load's
 * warnings once per load. Remembers the first 256 distinct ones by hash. */
static bool warned_before(const char *msg)
{
    static uint64_t seen[256];
    static int n_seen;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++) h = (h ^ *p) * 1099511628211ull;
    for (int i = 0; i < n_seen; i++)
        if (seen[i] == h) return true;
    if (n_seen < 256) seen[n_seen++] = h;
    return false;
}

static void log_to_stderr(void *user, qf_log_level level, const char *msg)
{
    (void)user;
    if (cli_quiet && level < QF_LOG_ERROR) return;
    if (level == QF_LOG_WARN && warned_before(msg)) return;
    static const char *const tag[] = {"debug", "info", "warning", "error"};
    fprintf(stderr, "qforge: %s: %s\n", tag[level], msg);
}

void cli_log_level(qf_log_level min_level)
{
    qf_log_set(log_to_stderr, NULL, getenv("QFORGE_DEBUG") ? QF_LOG_DEBUG : min_level);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: qforge <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-6s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n'qforge help CMD' or 'man qforge-CMD' describes each command.\n");
}

int main(int argc, char **argv)
{
    cli_log_level(QF_LOG_INFO);
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *name = argv[1];
    if (!strcmp(name, "--version") || !strcmp(name, "version")) {
        /* the first line is the version alone (scripts read it); then what each engine finds here */
        char engines[2048];
        qf_engine_describe_backends(engines, sizeof engines);
        printf("qforge %s\n%s", qf_version(), engines);
        return EXIT_OK;
    }
    if (!strcmp(name, "--help") || !strcmp(name, "-h")) {
        usage(stdout);
        return EXIT_OK;
    }
    if (!strcmp(name, "help")) {
        if (argc < 3) {
            usage(stdout);
            return EXIT_OK;
        }
        char *args[] = {argv[2], "--help", NULL};
        for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
            if (!strcmp(commands[i].name, argv[2])) return commands[i].run(2, args);
        fprintf(stderr, "qforge: unknown command '%s'\n", argv[2]);
        return EXIT_USAGE;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(commands[i].name, name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "qforge: unknown command '%s' (see 'qforge --help')\n", name);
    return EXIT_USAGE;
}
