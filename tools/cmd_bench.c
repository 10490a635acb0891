/* qforge bench MODEL: throughput and latency of a model on an engine, in the
 * spirit of trtexec: per batch size a warm-up, then timed runs back to back
 * (qf_engine_bench: device events around each replay of the captured pass),
 * images/s and latency percentiles; --profile adds the time of every node. */
#include "config.h"
#include "cli.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char bench_help[] =
    "usage: qforge bench MODEL [--precision P] [--calib TABLE.calib] [--batch 1,32,256] [--device D]\n"
    "                    [--iterations N] [--duration S] [--json] [--profile] [--quiet]\n"
    "  MODEL is an ONNX file (FP32, or --precision fp16; int8 with --calib; a Q/DQ or\n"
    "  QOperator model runs INT8 with its own scales) or a .qfm.\n"
    "  Reports images/s and latency p50/p90/p99 per batch size. See qforge-bench(1).\n";

#define MAX_BATCHES 16

#define TRY(expr)                                                                                                     \
    do {                                                                                                              \
        qf_status st_ = (expr);                                                                                       \
        if (st_ != QF_OK) return st_;                                                                                 \
    } while (0)

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static bool parse_batches(const char *s, int *out, int *n)
{
    *n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 65536 || *n == MAX_BATCHES) return false;
        out[(*n)++] = (int)v;
        s = end;
        if (*s == ',') s++;
        else if (*s) return false;
    }
    return *n > 0;
}

/* Loads MODEL at `batch` and brings it to `precision` (an ONNX model; a .qfm
 * keeps its own). *label names what runs. */
static qf_status load(const char *path, int batch, const char *precision, const qf_calib_table *t, qf_graph **g,
                      const char **label)
{
    if (qf_qfm_probe(path)) {
        qf_qfm_meta meta;
        TRY(qf_qfm_read(path, batch, g, &meta));
        *label = qf_precision_name(meta.precision);
        return QF_OK;
    }
    qf_qfm_meta meta;
    TRY(cli_load_model(path, batch, g, &meta));
    qf_precision p = QF_PREC_FP32;
    if (precision) TRY(qf_precision_parse(precision, &p));
    if (meta.scale_source[0]) {
        /* quantized elsewhere: INT8 with the model's own scales, whatever was asked */
        *label = qf_precision_name(QF_PREC_INT8);
        if (!precision || p == QF_PREC_INT8) return QF_OK;
        return qf_error(QF_ERR_USAGE, "%s carries its own scales and runs INT8; --precision %s does not apply", path,
                        precision);
    }
    *label = qf_precision_name(p);
    if (p == QF_PREC_FP32) return QF_OK;
    if (p == QF_PREC_INT8 && !t)
        return qf_error(QF_ERR_USAGE, "%s: --precision int8 needs --calib TABLE (or a .qfm from qforge quant)", path);
    qf_quant_opts qo;
    qf_quant_opts_init(&qo);
    qo.precision = p;
    return qf_quantize(*g, t, &qo, NULL);
}

typedef struct prof_row {
    int node;
    double ms;
} prof_row;

static int cmp_prof(const void *a, const void *b)
{
    double x = ((const prof_row *)a)->ms, y = ((const prof_row *)b)->ms;
    return x > y ? -1 : x < y;
}

/* A node a device engine runs on the host (it has no kernel for it). */
static bool on_host(const qf_engine *e, qf_device_kind device, int node)
{
    return device != QF_DEVICE_CPU && qf_engine_node_device(e, node) == QF_DEVICE_CPU;
}

/* "16x96x112x112", or "-" for no value. */
static void print_dims(const qf_value *v)
{
    if (!v) {
        printf("-");
        return;
    }
    for (int d = 0; d < v->ndim; d++) printf("%s%lld", d ? "x" : "", (long long)v->dims[d]);
}

/* Prints the nodes by time (text) or appends a "profile" array (json). */
static qf_status profile(qf_engine *e, qf_device_kind device, const qf_graph *g, bool json)
{
    double *ms = calloc((size_t)g->n_nodes + 1, sizeof *ms);
    prof_row *rows = calloc((size_t)g->n_nodes + 1, sizeof *rows);
    if (!ms || !rows) {
        free(ms);
        free(rows);
        return qf_error(QF_ERR_NOMEM, "out of memory");
    }
    qf_status st = qf_engine_profile(e, ms);
    if (st == QF_OK) {
        double total = 0.0;
        for (int i = 0; i < g->n_nodes; i++) {
            rows[i] = (prof_row){i, ms[i]};
            total += ms[i];
        }
        qsort(rows, (size_t)g->n_nodes, sizeof *rows, cmp_prof);
        if (json) {
            printf(", \"profile\": [");
            for (int i = 0; i < g->n_nodes; i++) {
                const qf_node *n = &g->nodes[rows[i].node];
                printf("%s{\"node\": ", i ? ", " : "");
                json_string(stdout, n->name);
                printf(", \"op\": \"%s\", \"precision\": \"%s\", \"host\": %s, \"ms\": %.5f}", qf_op_name(n->op),
                       qf_precision_name(n->precision), on_host(e, device, rows[i].node) ? "true" : "false", rows[i].ms);
            }
            printf("]");
        } else {
            printf("  per node (%.3f ms in nodes):\n", total);
            for (int i = 0; i < g->n_nodes && rows[i].ms > 0.0; i++) {
                const qf_node *n = &g->nodes[rows[i].node];
                printf("    %8.4f ms %5.1f%%  %-18s %-5s %s  ", rows[i].ms, 100.0 * rows[i].ms / (total > 0 ? total : 1),
                       qf_op_name(n->op), qf_precision_name(n->precision), n->name);
                print_dims(n->n_in > 0 && n->in[0] >= 0 ? &g->values[n->in[0]] : NULL);
                printf(" -> ");
                print_dims(&g->values[n->out[0]]);
                printf("%s\n", on_host(e, device, rows[i].node) ? "  (on the host)" : "");
            }
        }
    }
    free(ms);
    free(rows);
    return st;
}

/* One batch size: build, warm up, time. */
static qf_status bench_one(const char *model, int batch, const char *precision, const qf_calib_table *t,
                           qf_engine_opts *eo, bool device_given, int iterations, double duration, bool prof, bool json,
                           speed_result *r, const char **label)
{
    qf_graph *g = NULL;
    qf_engine *e = NULL;
    memset(r, 0, sizeof *r);
    r->batch = batch;
    double t0 = now_s();
    qf_status st = load(model, batch, precision, t, &g, label);
    if (st == QF_OK) {
        st = qf_engine_create(g, eo, &e);
        if (st == QF_ERR_DEVICE && !device_given && eo->device == QF_DEVICE_CUDA) {
            qf_log(QF_LOG_WARN, "%s; benchmarking on the CPU instead", qf_error_message());
            eo->device = QF_DEVICE_CPU;
            st = qf_engine_create(g, eo, &e);
        }
    }
    double build_s = now_s() - t0;
    if (st != QF_OK) goto out;
    st = speed_measure(e, g, eo->device, iterations, duration, 20, r);
    r->build_s = build_s;
    if (st != QF_OK) goto out;
    if (!json)
        printf("batch %5d  %10.1f images/s  latency p50 %.3f ms  p90 %.3f  p99 %.3f  (end to end %.3f ms; %d runs; built "
               "in %.1f s)\n",
               batch, r->ips, r->p50, r->p90, r->p99, r->e2e_p50, r->iterations, r->build_s);
    if (prof) {
        if (json) printf("{\"batch\": %d", batch);
        st = profile(e, eo->device, g, json);
        if (json) printf("}");
        if (st == QF_ERR_UNSUPPORTED) {
            qf_log(QF_LOG_WARN, "%s", qf_error_message());
            st = QF_OK;
        }
    }
out:
    qf_engine_free(e);
    qf_graph_free(g);
    return st;
}

int cmd_bench(int argc, char **argv)
{
    const char *model = NULL, *precision = NULL, *device = NULL, *calib = NULL, *batches_arg = "1,32,256";
    bool json = false, prof = false;
    int iterations = 0;
    double duration = 2.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        const char **target = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(bench_help, stdout);
            return EXIT_OK;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--profile")) {
            prof = true;
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            cli_quiet = true;
        } else if (!strcmp(a, "--precision")) {
            target = &precision;
        } else if (!strcmp(a, "--device")) {
            target = &device;
        } else if (!strcmp(a, "--calib")) {
            target = &calib;
        } else if (!strcmp(a, "--batch")) {
            target = &batches_arg;
        } else if (!strcmp(a, "--iterations")) {
            if (!cli_parse_int("bench", a, next, 1, 1000000, &iterations)) return EXIT_USAGE;
            i++;
        } else if (!strcmp(a, "--duration")) {
            char *end;
            duration = next ? strtod(next, &end) : 0.0;
            if (!next || end == next || *end || !(duration > 0.0) || duration > 3600.0)
                return cli_usage_error("bench", "--duration expects seconds in (0, 3600], got '%s'", next ? next : "");
            i++;
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error("bench", "unknown option %s", a);
        } else if (!model) {
            model = a;
        } else {
            return cli_usage_error("bench", "unexpected argument %s", a);
        }
        if (target) {
            if (!next) return cli_usage_error("bench", "%s needs a value", a);
            *target = next;
            i++;
        }
    }
    if (!model) return cli_usage_error("bench", "missing MODEL");
    int batches[MAX_BATCHES], nb;
    if (!parse_batches(batches_arg, batches, &nb))
        return cli_usage_error("bench", "--batch expects sizes like 1,32,256, got '%s'", batches_arg);
    qf_engine_opts eo = {.device = QF_DEVICE_CUDA};
    if (device && qf_device_parse(device, &eo.device, &eo.device_index) != QF_OK) return cli_fail(QF_ERR_USAGE);
#ifndef QF_HAVE_CUDA
    if (!device) eo.device = QF_DEVICE_CPU;
#endif
    qf_calib_table *t = NULL;
    if (calib) QF_CHECK_CLI(qf_calib_table_read(calib, &t));
    speed_result res[MAX_BATCHES];
    const char *label = "fp32";
    if (json) {
        printf("{\"model\": ");
        json_string(stdout, model);
        if (prof) printf(", \"profiles\": [");
    } else {
        printf("model %s\n", model);
    }
    qf_status st = QF_OK;
    for (int b = 0; b < nb && st == QF_OK; b++) {
        if (json && prof && b) printf(", ");
        st = bench_one(model, batches[b], precision, t, &eo, device != NULL, iterations, duration, prof, json, &res[b],
                       &label);
    }
    qf_calib_table_free(t);
    if (st != QF_OK) {
        if (json) printf("%s}\n", prof ? "]" : "");
        fflush(stdout);
        return cli_fail(st);
    }
    const char *dev = eo.device == QF_DEVICE_CPU ? "cpu" : "cuda";
    if (json) {
        printf("%s, \"precision\": \"%s\", \"device\": \"%s\", \"results\": [", prof ? "]" : "", label, dev);
        for (int b = 0; b < nb; b++)
            printf("%s{\"batch\": %d, \"images_per_second\": %.1f, \"latency_ms\": {\"p50\": %.4f, \"p90\": %.4f, "
                   "\"p99\": %.4f, \"mean\": %.4f}, \"end_to_end_ms\": {\"p50\": %.4f}, \"iterations\": %d}",
                   b ? ", " : "", res[b].batch, res[b].ips, res[b].p50, res[b].p90, res[b].p99, res[b].mean,
                   res[b].e2e_p50, res[b].iterations);
        printf("]}\n");
    } else {
        printf("precision %s, device %s\n", label, dev);
    }
    return EXIT_OK;
}
