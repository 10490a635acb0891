/* Helpers shared by the check programs in tests/ (see testutil.h): the random
 * generator, graph building, CPU runs and calibration, and running a suite.
 * They assert (ck_assert_*) instead of returning errors: test code only. */
#include "testutil.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

/* ---- deterministic random numbers ---------------------------------------------------- */

uint64_t rng = 1;
bool rng_xorshift = false;

void rng_use_xorshift(uint64_t seed)
{
    rng_xorshift = true;
    rng = seed;
}

float frand(float lo, float hi)
{
    uint64_t r;
    if (rng_xorshift) {
        rng ^= rng >> 12;
        rng ^= rng << 25;
        rng ^= rng >> 27;
        r = rng * 0x2545f4914f6cdd1dull;
    } else {
        rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
        r = rng;
    }
    /* (hi - lo) * k / 2^24 rounds as (hi - lo) * (k / 2^24): scaling by 2^-24 is exact */
    return lo + (hi - lo) * (float)((r >> 40) & 0xffffff) / 16777216.0f;
}

/* ---- building graphs by hand ------------------------------------------------------------ */

void list_add(int **arr, int *n, int v)
{
    *arr = realloc(*arr, (size_t)(*n + 1) * sizeof **arr);
    (*arr)[(*n)++] = v;
}

int input(qf_graph *g, const char *name, int nd, const int64_t *d)
{
    int v = qf_graph_add_value(g, name, QF_F32, nd, d);
    g->values[v].flags |= QF_VALUE_INPUT;
    list_add(&g->inputs, &g->n_inputs, v);
    return v;
}

void output(qf_graph *g, int v)
{
    g->values[v].flags |= QF_VALUE_OUTPUT;
    list_add(&g->outputs, &g->n_outputs, v);
}

int weight(qf_graph *g, const char *name, int nd, const int64_t *d, float lo, float hi)
{
    int v = qf_graph_add_value(g, name, QF_F32, nd, d);
    int64_t n = qfi_numel(nd, d);
    float *x = malloc((size_t)(n ? n : 1) * sizeof *x); /* malloc(0) may be NULL, which reads as "no data" */
    for (int64_t i = 0; i < n; i++) x[i] = frand(lo, hi);
    g->values[v].data = x;
    g->values[v].flags |= QF_VALUE_CONST;
    return v;
}

int value(qf_graph *g, const char *name) { return qf_graph_add_value(g, name, QF_F32, 0, NULL); }

qf_node *op(qf_graph *g, const char *name, qf_op o, int n_in, const int *in, int out)
{
    int i = qf_graph_add_node(g, name, o, n_in, in, 1, &out);
    ck_assert_int_ge(i, 0);
    return &g->nodes[i];
}

qf_attr *attr(qf_node *n, const char *name, qf_attr_type t)
{
    n->attrs = realloc(n->attrs, (size_t)(n->n_attr + 1) * sizeof *n->attrs);
    qf_attr *a = &n->attrs[n->n_attr++];
    memset(a, 0, sizeof *a);
    a->name = strdup(name);
    a->type = t;
    return a;
}

void set_int(qf_node *n, const char *name, int64_t v) { attr(n, name, QF_ATTR_INT)->i = v; }
void set_float(qf_node *n, const char *name, float v) { attr(n, name, QF_ATTR_FLOAT)->f = v; }

void set_ints(qf_node *n, const char *name, int cnt, const int64_t *v)
{
    qf_attr *a = attr(n, name, QF_ATTR_INTS);
    a->n = cnt;
    a->ints = malloc((size_t)(cnt ? cnt : 1) * sizeof *a->ints);
    memcpy(a->ints, v, (size_t)cnt * sizeof *v);
}

qf_node *conv_node(qf_graph *g, const char *name, int x, int w, int b, int out, int pad, int group)
{
    int in[3] = {x, w, b};
    qf_node *n = op(g, name, QF_OP_CONV, b >= 0 ? 3 : 2, in, out);
    int64_t pads[4] = {pad, pad, pad, pad};
    set_ints(n, "pads", 4, pads);
    if (group > 1) set_int(n, "group", group);
    return n;
}

void prepare_graph(qf_graph *g, int batch)
{
    for (int i = 0; i < g->n_nodes; i++) OK(qfi_ops[g->nodes[i].op]->parse(g, &g->nodes[i]));
    OK(qf_graph_prepare(g, batch));
}

int node_index(const qf_graph *g, const char *name)
{
    for (int i = 0; i < g->n_nodes; i++)
        if (strcmp(g->nodes[i].name, name) == 0) return i;
    return -1;
}

const qf_node *node_named(const qf_graph *g, const char *name)
{
    int i = node_index(g, name);
    return i >= 0 ? &g->nodes[i] : NULL;
}

/* ---- running and calibrating ----------------------------------------------------------------- */

double sqnr_db(const float *ref, const float *y, int64_t n)
{
    double s = 0, e = 0;
    for (int64_t i = 0; i < n; i++) {
        s += (double)ref[i] * ref[i];
        e += ((double)y[i] - ref[i]) * ((double)y[i] - ref[i]);
    }
    return e > 0 ? 10 * log10(s / e) : INFINITY;
}

float *random_input(const qf_graph *g, uint64_t seed, float lo, float hi)
{
    rng = seed;
    int64_t n = qf_value_numel(&g->values[g->inputs[0]]);
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++) x[i] = frand(lo, hi);
    return x;
}

float *run(const qf_graph *g, const float *x, qf_observer_fn obs, void *user)
{
    qf_engine_opts o = {.device = QF_DEVICE_CPU, .threads = 2, .observer = obs, .observer_user = user};
    qf_engine *e;
    OK(qf_engine_create(g, &o, &e));
    memcpy(qf_engine_input(e, 0), x, qf_value_bytes(&g->values[g->inputs[0]]));
    OK(qf_engine_run(e));
    const qf_value *yv = &g->values[g->outputs[0]];
    ck_assert_int_eq(yv->dtype, QF_F32);
    float *y = malloc(qf_value_bytes(yv));
    memcpy(y, qf_engine_output(e, 0), qf_value_bytes(yv));
    qf_engine_free(e);
    return y;
}

double assert_same_function(const qf_graph *g0, const qf_graph *g1, const float *x)
{
    float *y0 = run(g0, x, NULL, NULL), *y1 = run(g1, x, NULL, NULL);
    const int64_t n = qf_value_numel(&g0->values[g0->outputs[0]]);
    ck_assert_int_eq(n, qf_value_numel(&g1->values[g1->outputs[0]]));
    double worst = 0.0, scale = 0.0;
    for (int64_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)y0[i] - y1[i]));
        scale = fmax(scale, fabs((double)y0[i]));
    }
    ck_assert_double_gt(scale, 0.0);
    ck_assert_msg(worst <= 1e-5 * scale, "outputs differ by up to %g of %g", worst, scale);
    ck_assert_msg(!memcmp(y0, y1, (size_t)n * sizeof *y0), "outputs differ by up to %g of %g", worst, scale);
    free(y0);
    free(y1);
    return worst;
}

/* The model hash the tables record: a placeholder, these graphs come from no file. */
static void zero_sha(char sha[65])
{
    memset(sha, '0', 64);
    sha[64] = 0;
}

qf_calib_table *calibrate_minmax(const qf_graph *g, const float *x)
{
    qf_calib *c;
    OK(qf_calib_create(g, NULL, &c));
    free(run(g, x, qf_calib_observe, c));
    char sha[65];
    zero_sha(sha);
    qf_calib_meta meta = {.images = g->batch, .model_sha256 = sha};
    qf_calib_table *t;
    OK(qf_calib_finalize(c, 1u << QF_CALIB_MINMAX, QF_CALIB_PERCENTILE_DEFAULT, &meta, &t));
    qf_calib_free(c);
    return t;
}

qf_calib_table *calibrate_folder(qf_graph *g, const char *dir, int64_t n, const qf_preprocess *pp,
                                 qf_device_kind dev, int threads)
{
    qf_dataset *ds;
    OK(qf_dataset_open(dir, &ds));
    qf_dataset_subset(ds, n);
    qf_calibrate_opts o;
    qf_calibrate_opts_init(&o);
    o.device = dev;
    o.decode_threads = threads;
    OK(qf_calib_method_parse("all", &o.methods, &o.percentile));
    qf_calib_table *t;
    qf_calibrate_info info;
    OK(qf_calibrate(g, ds, pp, &o, &t, NULL, &info));
    ck_assert_int_eq(info.device, dev);
    ck_assert_int_eq(t->images, qf_dataset_count(ds));
    qf_dataset_free(ds);
    return t;
}

int run_suite(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
