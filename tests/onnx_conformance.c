/* ONNX backend conformance: runs the official ONNX backend tests (Debian's
 * libonnx-testdata) through qf_onnx_load -> qf_graph_prepare -> the CPU engine
 * and compares every output with ONNX's tolerance (|a-b| <= atol + rtol*|b|).
 * A test is skipped only for QF_ERR_UNSUPPORTED, whose message says why.
 * Usage: onnx_conformance [-v] [-n] [SUBSTRING...]
 *   -v  one line per test;  -n  run tests in-process (no fork; for debuggers)
 *   SUBSTRING  run only tests whose "suite/name" contains one of them. */
#include "onnx_internal.h"
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEFAULT_ROOT "/usr/share/libonnx-testdata/data"
#define RTOL 1e-3
#define ATOL 1e-7
#define TEST_TIMEOUT_S 120

static const char *const suites[] = {"node", "pytorch-converted", "pytorch-operator", "simple"};

typedef enum { T_PASS, T_FAIL, T_SKIP } outcome;

typedef struct result {
    outcome what;
    char why[1024];
} result;

static outcome set(result *r, outcome what, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static outcome set(result *r, outcome what, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, sizeof r->why, fmt, ap);
    va_end(ap);
    r->what = what;
    return what;
}

/* A library failure: QF_ERR_UNSUPPORTED names something qforge lacks (skip);
 * anything else is a failure. */
static outcome from_status(result *r, qf_status st, const char *stage)
{
    if (st == QF_ERR_UNSUPPORTED) return set(r, T_SKIP, "%s", qf_error_message());
    return set(r, T_FAIL, "%s: %s: %s", stage, qf_status_name(st), qf_error_message());
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Sorted names in `dir` that start with `prefix`; returns the count (or -1). */
static int list_dir(const char *dir, const char *prefix, char ***names)
{
    *names = NULL;
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, prefix, strlen(prefix)) != 0) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **p = realloc(*names, (size_t)cap * sizeof *p);
            if (!p) abort();
            *names = p;
        }
        (*names)[n++] = strdup(de->d_name);
    }
    closedir(d);
    if (n) qsort(*names, (size_t)n, sizeof **names, cmp_str);
    return n;
}

static void free_list(char **names, int n)
{
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

static void value_clear(qf_value *v)
{
    free(v->name);
    free(v->data);
    memset(v, 0, sizeof *v);
}

static bool same_shape(const qf_value *a, const qf_value *b)
{
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i]) return false;
    return true;
}

static void shape_str(const qf_value *v, char *buf, size_t len)
{
    int o = snprintf(buf, len, "(");
    for (int i = 0; i < v->ndim && o < (int)len; i++) o += snprintf(buf + o, len - (size_t)o, i ? ",%lld" : "%lld", (long long)v->dims[i]);
    if (o < (int)len) snprintf(buf + o, len - (size_t)o, ")");
}

static double element(const void *data, qf_dtype dt, int64_t i)
{
    switch (dt) {
    case QF_F32: return ((const float *)data)[i];
    case QF_F16: return qf_f16_to_f32(((const uint16_t *)data)[i]);
    case QF_BF16: return qf_bf16_to_f32(((const uint16_t *)data)[i]);
    case QF_I8: return ((const int8_t *)data)[i];
    case QF_U8: return ((const uint8_t *)data)[i];
    case QF_I32: return ((const int32_t *)data)[i];
    case QF_I64: return (double)((const int64_t *)data)[i];
    case QF_BOOL: return ((const uint8_t *)data)[i] != 0;
    default: abort();
    }
}

/* Compares output `k` (qforge's data, described by graph value `gv`) with the
 * expected tensor. Floats within ONNX's tolerance, NaN equal to NaN;
 * integers exactly (int64 compared as integers, not through double).
 * `as_bits`: the expected file held uint16 bit patterns (bfloat16). ONNX's
 * runner compares those as integers with rtol 1e-3, which lets a bfloat16 be
 * off by 16 units in the last place; we allow one, the gap between ONNX
 * 1.12's truncating reference casts and qforge's round-to-nearest-even. */
static outcome compare(result *r, int k, const qf_value *gv, const void *got, const qf_value *want, bool as_bits)
{
    char s1[128], s2[128];
    if (gv->dtype != want->dtype)
        return set(r, T_FAIL, "output %d (%s): dtype %s, expected %s", k, gv->name, qf_dtype_info(gv->dtype)->name,
                   qf_dtype_info(want->dtype)->name);
    if (!same_shape(gv, want)) {
        shape_str(gv, s1, sizeof s1);
        shape_str(want, s2, sizeof s2);
        return set(r, T_FAIL, "output %d (%s): shape %s, expected %s", k, gv->name, s1, s2);
    }
    int64_t n = qf_value_numel(want), first_bad = -1, nbad = 0;
    double max_err = 0;
    bool is_float = qf_dtype_info(want->dtype)->is_float;
    for (int64_t i = 0; i < n; i++) {
        bool ok;
        double a = element(got, want->dtype, i), b = element(want->data, want->dtype, i), err = 0;
        if (as_bits) {
            int ia = ((const uint16_t *)got)[i], ib = ((const uint16_t *)want->data)[i];
            err = fabs(a - b);
            ok = abs(ia - ib) <= 1;
        } else if (want->dtype == QF_I64) {
            int64_t ia = ((const int64_t *)got)[i], ib = ((const int64_t *)want->data)[i];
            ok = ia == ib;
            err = ok ? 0 : fabs(a - b);
        } else if (is_float) {
            if (isnan(a) || isnan(b)) {
                ok = isnan(a) && isnan(b);
                err = ok ? 0 : INFINITY;
            } else if (isinf(a) || isinf(b)) {
                ok = a == b;
                err = ok ? 0 : INFINITY;
            } else {
                err = fabs(a - b);
                ok = err <= ATOL + RTOL * fabs(b);
            }
        } else {
            ok = a == b;
            err = fabs(a - b);
        }
        if (err > max_err) max_err = err;
        if (!ok) {
            nbad++;
            if (first_bad < 0) first_bad = i;
        }
    }
    if (nbad == 0) return T_PASS;
    return set(r, T_FAIL, "output %d (%s): %lld of %lld elements differ, max error %.6g, first at index %lld (got %.9g, want %.9g)",
               k, gv->name, (long long)nbad, (long long)n, max_err, (long long)first_bad,
               element(got, want->dtype, first_bad), element(want->data, want->dtype, first_bad));
}

/* Reads an input_K.pb or output_K.pb of a test data set: one serialized TensorProto. */
static qf_status read_pb(const char *path, Onnx__TensorProto **out)
{
    uint8_t *buf;
    size_t len;
    *out = NULL;
    QF_CHECK(qfi_read_file(path, (size_t)INT32_MAX, &buf, &len));
    *out = onnx__tensor_proto__unpack(NULL, len, buf);
    free(buf);
    if (!*out) return qf_error(QF_ERR_FORMAT, "%s: not a serialized TensorProto", path);
    return QF_OK;
}

/* Decodes a test tensor meant for graph value `gv`. The backend tests store
 * bfloat16 data as uint16 (numpy has no bfloat16): such a file is read as the
 * graph's 16-bit float type, bit for bit, and *as_bits says so. */
static qf_status decode_pb(const char *path, Onnx__TensorProto *t, const qf_value *gv, qf_value *out, bool *as_bits)
{
    *as_bits = false;
    if (t->has_data_type && t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__UINT16 &&
        (gv->dtype == QF_BF16 || gv->dtype == QF_F16)) {
        t->data_type = qf_dtype_info(gv->dtype)->onnx_type;
        *as_bits = true;
    }
    qf_status st = qfi_onnx_tensor_decode(t, NULL, out);
    return st == QF_OK ? st : qf_error_prefix(st, "%s", path);
}

/* Whether any node reads value v (the backend tests feed some inputs that
 * their expanded graphs no longer use, with shapes that disagree with the
 * declared ones: test_castlike_*_expanded). */
static bool value_read(const qf_graph *g, int v)
{
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] == v) return true;
    return (g->values[v].flags & QF_VALUE_OUTPUT) != 0;
}

/* The graph inputs as the model declares them, before binding (below). */
typedef struct test_inputs {
    int n;
    int *value;      /* value index of declared input i */
    bool *bound;     /* bound as a constant from the first data set */
    qf_value *first; /* the first data set's tensors */
} test_inputs;

/* Reads a data set's input_K.pb files into vals[i], i the declared graph
 * input the tensor names (unnamed tensors go by position). */
static outcome load_inputs(result *r, const qf_graph *g, const test_inputs *ti, const char *dir, qf_value *vals)
{
    char **files;
    int nf = list_dir(dir, "input_", &files);
    if (nf < 0) return set(r, T_FAIL, "%s: cannot read the folder", dir);
    outcome res = T_PASS;
    if (nf != ti->n) res = set(r, T_FAIL, "%s: %d input files but the graph has %d inputs", dir, nf, ti->n);
    char path[4400];
    for (int i = 0; i < nf && res == T_PASS; i++) {
        /* input_K.pb, K in numeric order (input_10 after input_9) */
        snprintf(path, sizeof path, "%s/input_%d.pb", dir, i);
        Onnx__TensorProto *t;
        qf_status st = read_pb(path, &t);
        if (st != QF_OK) {
            res = from_status(r, st, "input");
            break;
        }
        int slot = i;
        for (int j = 0; t->name && t->name[0] && j < ti->n; j++)
            if (strcmp(g->values[ti->value[j]].name, t->name) == 0) slot = j;
        bool as_bits;
        if (vals[slot].data) {
            res = set(r, T_FAIL, "%s: two files for input %s", dir, g->values[ti->value[slot]].name);
        } else {
            st = decode_pb(path, t, &g->values[ti->value[slot]], &vals[slot], &as_bits);
            if (st != QF_OK) res = from_status(r, st, "input");
        }
        onnx__tensor_proto__free_unpacked(t, NULL);
    }
    free_list(files, nf > 0 ? nf : 0);
    return res;
}

/* Whether graph input v only parameterizes its consumers (Reshape's shape,
 * Slice's starts, Resize's scales, Dropout's ratio, ...). */
static bool is_parameter_input(const qf_graph *g, int v)
{
    bool read = false;
    for (int i = 0; i < g->n_nodes; i++) {
        const qf_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in; k++) {
            if (n->in[k] != v) continue;
            read = true;
            if (k == 0) return false;
            switch (n->op) {
            case QF_OP_RESHAPE: case QF_OP_SLICE: case QF_OP_SQUEEZE: case QF_OP_UNSQUEEZE: case QF_OP_SPLIT:
            case QF_OP_PAD: case QF_OP_RESIZE: case QF_OP_UPSAMPLE: case QF_OP_REDUCE_MEAN: case QF_OP_DROPOUT:
                break;
            default: return false;
            }
        }
    }
    return read;
}

/* qforge compiles static shapes: the inputs that parameterize an op must be
 * constants, as they are in real models. The backend tests feed them through
 * input files, so they are bound here from the first data set before
 * qf_graph_prepare, as any static-shape runtime would. */
static outcome bind_parameters(result *r, qf_graph *g, test_inputs *ti)
{
    int kept = 0;
    for (int i = 0; i < ti->n; i++) {
        int v = ti->value[i];
        qf_value *gv = &g->values[v];
        const qf_value *src = &ti->first[i];
        if (!is_parameter_input(g, v)) {
            g->inputs[kept++] = v;
            continue;
        }
        bool fits = src->dtype == gv->dtype && src->ndim == gv->ndim;
        for (int d = 0; fits && d < gv->ndim; d++) fits = gv->dims[d] < 0 || gv->dims[d] == src->dims[d];
        if (!fits) return set(r, T_FAIL, "input %s: the data set's tensor does not match the declared type", gv->name);
        size_t bytes = qf_value_bytes(src);
        gv->data = malloc(bytes ? bytes : 1);
        if (!gv->data) abort();
        memcpy(gv->data, src->data, bytes);
        memcpy(gv->dims, src->dims, sizeof gv->dims);
        gv->flags = (gv->flags & ~(unsigned)QF_VALUE_INPUT) | QF_VALUE_CONST;
        ti->bound[i] = true;
    }
    g->n_inputs = kept;
    return T_PASS;
}

/* Feeds one test_data_set_* folder and checks its outputs. */
static outcome run_data_set(result *r, const qf_graph *g, qf_engine *e, const test_inputs *ti, const char *dir)
{
    qf_value *vals = calloc((size_t)ti->n + 1, sizeof *vals);
    if (!vals) abort();
    outcome res = load_inputs(r, g, ti, dir, vals);
    for (int i = 0; i < ti->n && res == T_PASS; i++) {
        const qf_value *in = &vals[i];
        const qf_value *gv = &g->values[ti->value[i]];
        if (ti->bound[i]) {
            if (in->dtype != ti->first[i].dtype || !same_shape(in, &ti->first[i]) ||
                memcmp(in->data, ti->first[i].data, qf_value_bytes(in)) != 0)
                res = set(r, T_FAIL, "input %s: bound as a constant, but this data set changes it", gv->name);
            continue;
        }
        int slot = 0;
        while (slot < g->n_inputs && g->inputs[slot] != ti->value[i]) slot++;
        QF_ASSERT(slot < g->n_inputs);
        char s1[128], s2[128];
        if (!value_read(g, ti->value[i])) {
            /* nothing to feed */
        } else if (gv->dtype != in->dtype) {
            res = set(r, T_FAIL, "input %s: dtype %s, graph expects %s", gv->name, qf_dtype_info(in->dtype)->name,
                      qf_dtype_info(gv->dtype)->name);
        } else if (!same_shape(gv, in)) {
            shape_str(in, s1, sizeof s1);
            shape_str(gv, s2, sizeof s2);
            res = set(r, T_FAIL, "input %s: shape %s, graph prepared for %s", gv->name, s1, s2);
        } else {
            memcpy(qf_engine_input(e, slot), in->data, qf_value_bytes(in));
        }
    }
    for (int i = 0; i < ti->n; i++) value_clear(&vals[i]);
    free(vals);
    if (res != T_PASS) return res;

    qf_status st = qf_engine_run(e);
    if (st != QF_OK) return from_status(r, st, "run");
    char **files;
    int nf = list_dir(dir, "output_", &files);
    if (nf != g->n_outputs) res = set(r, T_FAIL, "%s: %d output files but the graph has %d outputs", dir, nf, g->n_outputs);
    char path[4400];
    for (int k = 0; k < nf && res == T_PASS; k++) {
        snprintf(path, sizeof path, "%s/output_%d.pb", dir, k);
        const qf_value *gv = &g->values[g->outputs[k]];
        Onnx__TensorProto *t;
        qf_value want;
        bool as_bits = false;
        st = read_pb(path, &t);
        if (st == QF_OK) {
            st = decode_pb(path, t, gv, &want, &as_bits);
            onnx__tensor_proto__free_unpacked(t, NULL);
        }
        if (st != QF_OK) {
            res = from_status(r, st, "expected output");
            break;
        }
        res = compare(r, k, gv, qf_engine_output(e, k), &want, as_bits);
        value_clear(&want);
    }
    free_list(files, nf > 0 ? nf : 0);
    return res;
}

static outcome run_test(result *r, const char *dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    qf_graph *g = NULL;
    qf_engine *e = NULL;
    char **sets = NULL;
    int ns = 0;
    test_inputs ti = {0};
    qf_status st = qf_onnx_load(path, &g);
    if (st != QF_OK) return from_status(r, st, "load");
    outcome res = T_PASS;
    ns = list_dir(dir, "test_data_set_", &sets);
    if (ns <= 0) {
        res = set(r, T_FAIL, "%s: no test_data_set_* folders", dir);
        goto out;
    }
    ti.n = g->n_inputs;
    ti.value = calloc((size_t)ti.n + 1, sizeof *ti.value);
    ti.bound = calloc((size_t)ti.n + 1, sizeof *ti.bound);
    ti.first = calloc((size_t)ti.n + 1, sizeof *ti.first);
    if (!ti.value || !ti.bound || !ti.first) abort();
    if (ti.n) memcpy(ti.value, g->inputs, (size_t)ti.n * sizeof *ti.value);
    snprintf(path, sizeof path, "%s/%s", dir, sets[0]);
    res = load_inputs(r, g, &ti, path, ti.first);
    if (res == T_PASS) res = bind_parameters(r, g, &ti);
    if (res != T_PASS) goto out;
    st = qf_graph_prepare(g, 0);
    if (st != QF_OK) {
        res = from_status(r, st, "prepare");
        goto out;
    }
    qf_engine_opts opts = {.device = QF_DEVICE_CPU};
    st = qf_engine_create(g, &opts, &e);
    if (st != QF_OK) {
        res = from_status(r, st, "engine");
        goto out;
    }
    for (int i = 0; i < ns && res == T_PASS; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, sets[i]);
        res = run_data_set(r, g, e, &ti, path);
    }
out:
    for (int i = 0; i < ti.n; i++) value_clear(&ti.first[i]);
    free(ti.value);
    free(ti.bound);
    free(ti.first);
    free_list(sets, ns > 0 ? ns : 0);
    qf_engine_free(e);
    qf_graph_free(g);
    return res;
}

/* Runs a test in a child process so a crash or hang in one op is a failure
 * of that test, not of the whole run. */
static void run_isolated(result *r, const char *dir, bool fork_tests)
{
    if (!fork_tests) {
        run_test(r, dir);
        return;
    }
    int fds[2];
    if (pipe(fds) != 0) {
        set(r, T_FAIL, "pipe failed");
        return;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        set(r, T_FAIL, "fork failed");
        return;
    }
    if (pid == 0) {
        close(fds[0]);
        alarm(TEST_TIMEOUT_S);
        result cr = {0};
        run_test(&cr, dir);
        ssize_t w = write(fds[1], &cr, sizeof cr);
        _exit(w == (ssize_t)sizeof cr ? 0 : 3);
    }
    close(fds[1]);
    size_t got = 0;
    while (got < sizeof *r) {
        ssize_t n = read(fds[0], (char *)r + got, sizeof *r - got);
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status))
        set(r, T_FAIL, "crashed with signal %d (%s)%s", WTERMSIG(status), strsignal(WTERMSIG(status)),
            WTERMSIG(status) == SIGALRM ? " after the time limit" : "");
    else if (got != sizeof *r)
        set(r, T_FAIL, "the test process exited with status %d before reporting", WEXITSTATUS(status));
}

/* ---- skip reasons ------------------------------------------------------------------ */

/* A skip message without the file and tensor/node names, so that skips for the
 * same reason group together: "x/model.onnx: node n: unsupported op Foo" ->
 * "unsupported op Foo". */
static void reason_key(const char *msg, char *key, size_t len)
{
    static const char *const labels[] = {"node ", "tensor ", "input ", "output ", "initializer ", "value "};
    key[0] = 0;
    size_t o = 0;
    char *copy = strdup(msg);
    for (char *seg = copy, *next; seg && *seg; seg = next) {
        next = strstr(seg, ": ");
        if (next) {
            *next = 0;
            next += 2;
        }
        size_t sl = strlen(seg);
        bool drop = (sl > 5 && strcmp(seg + sl - 5, ".onnx") == 0) || (sl > 3 && strcmp(seg + sl - 3, ".pb") == 0);
        char buf[1024];
        for (size_t i = 0; !drop && i < QF_ARRAY_LEN(labels); i++) {
            size_t l = strlen(labels[i]);
            if (strncmp(seg, labels[i], l) != 0) continue;
            char *sp = strchr(seg + l, ' ');
            if (!sp) {
                drop = true; /* "node NAME" */
            } else if (sp[1] == '(' && seg[sl - 1] == ')' && !strchr(sp + 1, ' ')) {
                seg = sp + 2; /* "node NAME (Op)": keep the op */
                seg[strlen(seg) - 1] = 0;
            } else {
                snprintf(buf, sizeof buf, "%s%s", labels[i], sp + 1); /* "input NAME is ..." */
                seg = buf;
            }
            break;
        }
        if (drop) continue;
        o += (size_t)snprintf(key + o, o < len ? len - o : 0, "%s%s", o ? ": " : "", seg);
        if (o >= len) break;
    }
    free(copy);
}

typedef struct reason_count {
    char key[256];
    int count;
} reason_count;

static int cmp_reason(const void *a, const void *b)
{
    const reason_count *x = a, *y = b;
    if (x->count != y->count) return y->count - x->count;
    return strcmp(x->key, y->key);
}

int main(int argc, char **argv)
{
    bool verbose = false, fork_tests = true;
    int nfilters = 0;
    char **filters = calloc((size_t)argc + 1, sizeof *filters);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-v") == 0) verbose = true;
        else if (strcmp(argv[i], "-n") == 0) fork_tests = false;
        else filters[nfilters++] = argv[i];
    }
    const char *root = getenv("QF_ONNX_TESTDATA") ? getenv("QF_ONNX_TESTDATA") : DEFAULT_ROOT;
    struct stat st;
    if (stat(root, &st) != 0 || !S_ISDIR(st.st_mode)) {
        printf("onnx-conformance: %s not found (Debian package libonnx-testdata); skipping\n", root);
        return 77;
    }
    int passed = 0, failed = 0, skipped = 0, nreasons = 0, cap_reasons = 0;
    reason_count *reasons = NULL;
    for (size_t s = 0; s < QF_ARRAY_LEN(suites); s++) {
        char sdir[2048];
        snprintf(sdir, sizeof sdir, "%s/%s", root, suites[s]);
        char **tests;
        int nt = list_dir(sdir, "test_", &tests);
        for (int t = 0; t < nt; t++) {
            char label[512], dir[4096], model[4200];
            snprintf(label, sizeof label, "%s/%s", suites[s], tests[t]);
            bool wanted = nfilters == 0;
            for (int f = 0; f < nfilters; f++) wanted |= strstr(label, filters[f]) != NULL;
            snprintf(dir, sizeof dir, "%s/%s", sdir, tests[t]);
            snprintf(model, sizeof model, "%s/model.onnx", dir);
            if (!wanted || access(model, R_OK) != 0) continue;
            result r = {.what = T_PASS};
            run_isolated(&r, dir, fork_tests);
            if (r.what == T_PASS) {
                passed++;
                if (verbose) printf("PASS %s\n", label);
            } else if (r.what == T_FAIL) {
                failed++;
                printf("FAIL %s: %s\n", label, r.why);
            } else {
                skipped++;
                if (verbose) printf("SKIP %s: %s\n", label, r.why);
                char key[256];
                reason_key(r.why, key, sizeof key);
                int i = 0;
                while (i < nreasons && strcmp(reasons[i].key, key) != 0) i++;
                if (i == nreasons) {
                    if (nreasons == cap_reasons) {
                        cap_reasons = cap_reasons ? cap_reasons * 2 : 64;
                        reasons = realloc(reasons, (size_t)cap_reasons * sizeof *reasons);
                        if (!reasons) abort();
                    }
                    snprintf(reasons[nreasons].key, sizeof reasons[nreasons].key, "%s", key);
                    reasons[nreasons++].count = 0;
                }
                reasons[i].count++;
            }
            fflush(stdout);
        }
        if (nt > 0) free_list(tests, nt);
    }
    printf("onnx-conformance: %d passed, %d failed, %d skipped\n", passed, failed, skipped);
    if (nreasons) {
        qsort(reasons, (size_t)nreasons, sizeof *reasons, cmp_reason);
        printf("skip reasons:\n");
        for (int i = 0; i < nreasons; i++) printf("  %4d  %s\n", reasons[i].count, reasons[i].key);
    }
    free(reasons);
    free(filters);
    return failed > 0 ? 1 : 0;
}
