/* qforge info MODEL: what a model is -- inputs and outputs with shapes, op
 * counts, parameter count and FLOPs per image. */
#include "config.h"
#include "cli.h"
#include <getopt.h>
#include <stdio.h>
#include <string.h>

static const char info_help[] =
    "usage: qforge info MODEL [--nodes]\n"
    "  Prints the model's inputs and outputs with shapes (at batch 1), op counts,\n"
    "  parameter count and FLOPs per image.\n"
    "  --nodes   also list every node with its op and output shape\n";

static void print_shape(const qf_value *v)
{
    printf("[");
    for (int d = 0; d < v->ndim; d++) printf("%s%lld", d ? "," : "", (long long)v->dims[d]);
    printf("]");
}

static void print_value(const char *role, const qf_value *v)
{
    printf("%-8s %-24s %-5s ", role, v->name, qf_dtype_info(v->dtype)->name);
    print_shape(v);
    printf("\n");
}

static void print_count(const char *label, double x)
{
    const char *unit = "";
    double s = x;
    if (x >= 1e9) s = x / 1e9, unit = "G";
    else if (x >= 1e6) s = x / 1e6, unit = "M";
    else if (x >= 1e3) s = x / 1e3, unit = "K";
    printf("%-18s %.0f (%.3g%s)\n", label, x, s, unit);
}

int cmd_info(int argc, char **argv)
{
    static const struct option opts[] = {{"nodes", no_argument, 0, 'n'}, {"help", no_argument, 0, 'h'}, {0}};
    bool nodes = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'n': nodes = true; break;
        case 'h': fputs(info_help, stdout); return EXIT_OK;
        default: return cli_usage_error("info", "bad option");
        }
    }
    if (optind != argc - 1) return cli_usage_error("info", "expects exactly one MODEL");
    const char *path = argv[optind];
    qf_graph *g;
    qf_load_opts lo = {.batch = 1};
    qf_status st = qf_model_load(path, &lo, &g);
    if (st != QF_OK) return cli_fail(st);

    qf_graph_stats s;
    qf_graph_stats_compute(g, &s);
    printf("model    %s (opset %lld)\n", path, (long long)g->opset);
    for (int i = 0; i < g->n_inputs; i++) print_value("input", &g->values[g->inputs[i]]);
    for (int i = 0; i < g->n_outputs; i++) print_value("output", &g->values[g->outputs[i]]);
    printf("nodes    %d\n", g->n_nodes);
    for (int op = 0; op < QF_OP_COUNT; op++)
        if (s.op_count[op]) printf("  %-20s %d\n", qf_op_name((qf_op)op), s.op_count[op]);
    print_count("parameters", (double)s.params);
    print_count("FLOPs per image", (double)s.flops);
    if (nodes) {
        for (int i = 0; i < g->n_nodes; i++) {
            const qf_node *n = &g->nodes[i];
            printf("%4d %-20s %-32s -> ", i, qf_op_name(n->op), n->name);
            print_shape(&g->values[n->out[0]]);
            printf("\n");
        }
    }
    qf_graph_free(g);
    return EXIT_OK;
}
