/* qforge run MODEL IMAGE...: classify individual images and print the top K
 * classes with their probabilities (softmax of the model's scores). */
#include "config.h"
#include "cli.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char run_help[] =
    "usage: qforge run MODEL IMAGE... [--top K] [--synsets FILE | --classes FILE] [PREPROCESS]\n"
    "                  [--device D] [--json]\n"
    "  Prints the K most likely classes of each image. See qforge-run(1).\n";

/* Indices of the k largest scores, best first. */
static void top_k(const float *x, int n, int k, int *idx)
{
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            bool taken = false;
            for (int t = 0; t < j; t++) taken |= idx[t] == i;
            if (!taken && (best < 0 || x[i] > x[best])) best = i;
        }
        idx[j] = best;
    }
}

int cmd_run(int argc, char **argv)
{
    image_opts io;
    image_opts_init(&io);
    const char *model = NULL, *device = NULL;
    const char **files = calloc((size_t)argc + 1, sizeof *files);
    int nfiles = 0, k = 5;
    bool json = false;
    if (!files) return EXIT_FAIL;
    for (int i = 1; i < argc;) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        int r = image_opts_parse(&io, "run", argc, argv, &i);
        if (r < 0) return EXIT_USAGE;
        if (r > 0) continue;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(run_help, stdout);
            return EXIT_OK;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--top")) {
            if (!cli_parse_int("run", a, next, 1, 1000, &k)) return EXIT_USAGE;
            i++;
        } else if (!strcmp(a, "--device")) {
            if (!next) return cli_usage_error("run", "--device needs a value");
            device = next;
            i++;
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error("run", "unknown option %s", a);
        } else if (!model) {
            model = a;
        } else {
            files[nfiles++] = a;
        }
        i++;
    }
    if (!model || nfiles == 0) return cli_usage_error("run", "expects MODEL and at least one IMAGE");
    qf_engine_opts eo = {0};
    bool device_given;
    if (cli_device_opts(device, &eo, &device_given) != QF_OK) return cli_fail(QF_ERR_USAGE);

    qf_graph *g = NULL;
    qf_engine *e = NULL;
    qf_dataset *ds = NULL;
    qf_classes *names = NULL;
    qf_loader *ld = NULL;
    int rc = EXIT_FAIL;
    qf_qfm_meta meta;
    qf_status st = cli_load_model(model, 1, &g, &meta);
    if (st == QF_OK) st = image_opts_use_stored(&io, &meta);
    if (st == QF_OK) st = cli_preprocess_for_model(g, &io.pp);
    if (st == QF_OK) st = cli_engine_create(g, &eo, device_given, &e);
    if (st == QF_OK) st = qf_dataset_from_files(files, nfiles, &ds);
    if (st == QF_OK && io.synsets) st = qf_classes_read_synsets(io.synsets, &names);
    if (st == QF_OK && io.classes) st = qf_classes_read_lines(io.classes, &names);
    qf_loader_options lo = {.batch = 1, .threads = 0, .strict = true};
    if (st == QF_OK) st = qf_loader_create(ds, &io.pp, &lo, &ld);
    if (st != QF_OK) {
        rc = cli_fail(st);
        goto out;
    }
    const qf_value *out = &g->values[g->outputs[0]];
    int classes = (int)qf_value_numel(out);
    if (k > classes) k = classes;
    int idx[1000];
    double *prob = calloc((size_t)classes, sizeof *prob);
    if (!prob) goto out;
    if (json) printf("[");
    for (int f = 0; f < nfiles; f++) {
        int count = 0, label;
        st = qf_loader_next(ld, qf_engine_input(e, 0), &label, &count);
        if (st == QF_OK && count == 1) st = qf_engine_run(e);
        if (st != QF_OK) {
            free(prob);
            rc = cli_fail(st);
            goto out;
        }
        const float *s = qf_engine_output(e, 0);
        /* softmax in double, shifted by the max for stability */
        double mx = s[argmax_index(s, classes)], sum = 0;
        for (int i = 0; i < classes; i++) sum += prob[i] = exp((double)s[i] - mx);
        for (int i = 0; i < classes; i++) prob[i] /= sum;
        top_k(s, classes, k, idx);
        if (json) {
            printf("%s{\"image\": ", f ? ", " : "");
            json_string(stdout, files[f]);
            printf(", \"top\": [");
            for (int j = 0; j < k; j++) {
                printf("%s{\"class\": %d, \"name\": ", j ? ", " : "", idx[j]);
                if (names && idx[j] < qf_classes_count(names)) json_string(stdout, qf_classes_name(names, idx[j]));
                else printf("null");
                printf(", \"probability\": %.6f}", prob[idx[j]]);
            }
            printf("]}");
        } else {
            printf("%s\n", files[f]);
            for (int j = 0; j < k; j++) {
                printf("  %2d. %5.1f%%  %4d", j + 1, 100 * prob[idx[j]], idx[j]);
                if (names && idx[j] < qf_classes_count(names)) printf("  %s", qf_classes_name(names, idx[j]));
                printf("\n");
            }
        }
    }
    if (json) printf("]\n");
    free(prob);
    rc = EXIT_OK;
out:
    qf_loader_free(ld);
    qf_classes_free(names);
    qf_dataset_free(ds);
    qf_engine_free(e);
    qf_graph_free(g);
    free(files);
    return rc;
}
