/* Unit tests for the elementwise and tensor-manipulation ops (lib/ops/ and
 * runtime/cpu/): parse + shape inference + CPU kernel of one node at a time,
 * against hand-computed values (resize and pad values were produced by the
 * ONNX reference implementation) and against naive loops on random inputs. */
#include <check.h>
#include <float.h>
#include <math.h>
#include "internal.h"
#include "float_math.h"
#include "quant_math.h"
#include "../runtime/cpu/kernels.h"
#include "testutil.h"

#define DIMS(...) ((const int64_t[]){__VA_ARGS__})
#define MAX_IO 16

/* ---- building one-node graphs ------------------------------------------------------- */

static qf_graph *new_graph(int64_t opset)
{
    qf_graph *g = qf_graph_new("test");
    ck_assert_ptr_nonnull(g);
    g->opset = opset;
    return g;
}

static int add_value(qf_graph *g, qf_dtype dt, int nd, const int64_t *dims)
{
    char name[32];
    snprintf(name, sizeof name, "v%d", g->n_values);
    int v = qf_graph_add_value(g, name, dt, nd, dims);
    ck_assert_int_ge(v, 0);
    return v;
}

/* A value known at load time (an initializer). */
static int add_const(qf_graph *g, qf_dtype dt, int nd, const int64_t *dims, const void *data)
{
    int v = add_value(g, dt, nd, dims);
    size_t bytes = qf_value_bytes(&g->values[v]);
    g->values[v].data = malloc(bytes ? bytes : 1);
    if (bytes) memcpy(g->values[v].data, data, bytes);
    g->values[v].flags |= QF_VALUE_CONST;
    return v;
}

static int const_i64(qf_graph *g, int n, const int64_t *vals) { return add_const(g, QF_I64, 1, DIMS(n), vals); }

static int add_node(qf_graph *g, qf_op op, int nin, const int *in, int nout, int *out)
{
    for (int k = 0; k < nout; k++) out[k] = add_value(g, QF_F32, 0, NULL); /* infer fills them */
    int ni = qf_graph_add_node(g, "n", op, nin, in, nout, out);
    ck_assert_int_ge(ni, 0);
    return ni;
}

static void set_string(qf_graph *g, int ni, const char *name, const char *s)
{
    attr(&g->nodes[ni], name, QF_ATTR_STRING)->s = qfi_strdup(s);
}
static void set_floats(qf_graph *g, int ni, const char *name, int cnt, const float *v)
{
    qf_attr *a = attr(&g->nodes[ni], name, QF_ATTR_FLOATS);
    a->n = cnt;
    a->floats = malloc((size_t)cnt * sizeof *v + 1);
    memcpy(a->floats, v, (size_t)cnt * sizeof *v);
}

static qf_status prep(qf_graph *g, int ni)
{
    qf_node *n = &g->nodes[ni];
    qf_status st = qfi_ops[n->op]->parse(g, n);
    return st != QF_OK ? st : qfi_ops[n->op]->infer(g, n);
}

/* Runs the node's CPU kernel; feeds[k] is the data of a non-constant input k.
 * Outputs are allocated into out[] (free with free_outs). */
static qf_status exec(qf_graph *g, int ni, const void *const *feeds, void **out, int threads)
{
    const qf_node *n = &g->nodes[ni];
    const void *in[MAX_IO] = {NULL};
    for (int k = 0; k < n->n_in; k++) {
        const qf_value *v = qfi_in(g, n, k);
        in[k] = !v ? NULL : (v->flags & QF_VALUE_CONST) ? v->data : feeds[k];
    }
    for (int k = 0; k < n->n_out; k++) {
        size_t bytes = n->out[k] >= 0 ? qf_value_bytes(qfi_out(g, n, k)) : 0;
        out[k] = n->out[k] >= 0 ? calloc(bytes + 1, 1) : NULL;
    }
    qfi_kernel_args a = {.g = g, .n = n, .in = in, .out = out, .threads = threads};
    return qfi_cpu_kernel_of(n->op)->run(&a);
}

static void free_outs(void **out, int n)
{
    for (int k = 0; k < n; k++) free(out[k]);
}

#define CK_OK(expr)                                                                                    \
    do {                                                                                               \
        qf_status st_ = (expr);                                                                        \
        ck_assert_msg(st_ == QF_OK, "%s -> %s: %s", #expr, qf_status_name(st_), qf_error_message());   \
    } while (0)

#define CK_STATUS(expr, want)                                                                          \
    do {                                                                                               \
        qf_status st_ = (expr);                                                                        \
        ck_assert_msg(st_ == (want), "%s -> %s (%s), wanted %s", #expr, qf_status_name(st_),           \
                      qf_error_message(), qf_status_name(want));                                       \
    } while (0)

static void check_shape(const qf_value *v, int nd, const int64_t *dims)
{
    ck_assert_int_eq(v->ndim, nd);
    for (int i = 0; i < nd; i++) ck_assert_msg(v->dims[i] == dims[i], "dim %d: %lld, wanted %lld", i,
                                               (long long)v->dims[i], (long long)dims[i]);
}

static void check_f32(const float *got, const float *want, int64_t n, float tol)
{
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(fabsf(got[i] - want[i]) <= tol * (1.0f + fabsf(want[i])), "element %lld: %g, wanted %g",
                      (long long)i, (double)got[i], (double)want[i]);
}

/* Deterministic pseudo-random floats in [-4, 4) and ints. */
static uint32_t rng_state = 12345;
static uint32_t rnd(void)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return rng_state >> 8;
}
static void fill_rand(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) x[i] = (float)(rnd() % 8000) / 1000.0f - 4.0f;
}

/* Multi-index of flat index i in dims (row-major). */
static void unflatten(int64_t i, int nd, const int64_t *dims, int64_t *idx)
{
    for (int d = nd - 1; d >= 0; d--) {
        idx[d] = i % dims[d];
        i /= dims[d];
    }
}

/* Flat offset of the output multi-index in an operand broadcast onto it. */
static int64_t bcast_offset(const int64_t *oidx, int ond, int nd, const int64_t *dims)
{
    int64_t off = 0;
    for (int d = 0; d < nd; d++) {
        int64_t i = dims[d] == 1 ? 0 : oidx[ond - nd + d];
        off = off * dims[d] + i;
    }
    return off;
}

/* ---- binary ---------------------------------------------------------------------------- */

static float ref_binary(qf_op op, float a, float b)
{
    switch (op) {
    case QF_OP_ADD: return a + b;
    case QF_OP_SUB: return a - b;
    case QF_OP_MUL: return a * b;
    case QF_OP_DIV: return a / b;
    case QF_OP_PRELU: return a < 0 ? a * b : a;
    default: return NAN;
    }
}

/* Random f32 operands of the two shapes through op, against a naive loop. */
static void binary_random(qf_op op, int na, const int64_t *da, int nb, const int64_t *db, int nout,
                          const int64_t *dout, int threads)
{
    qf_graph *g = new_graph(17);
    int in[2] = {add_value(g, QF_F32, na, da), add_value(g, QF_F32, nb, db)}, out[1];
    int ni = add_node(g, op, 2, in, 1, out);
    CK_OK(prep(g, ni));
    check_shape(&g->values[out[0]], nout, dout);
    int64_t ca = qfi_numel(na, da), cb = qfi_numel(nb, db), co = qfi_numel(nout, dout);
    float *a = malloc((size_t)ca * 4), *b = malloc((size_t)cb * 4);
    fill_rand(a, ca);
    fill_rand(b, cb);
    for (int64_t i = 0; op == QF_OP_DIV && i < cb; i++)
        if (b[i] == 0.0f) b[i] = 0.5f;
    const void *feeds[2] = {a, b};
    void *y[1];
    CK_OK(exec(g, ni, feeds, y, threads));
    const float *yf = y[0];
    for (int64_t i = 0; i < co; i++) {
        int64_t idx[QF_MAX_DIMS];
        unflatten(i, nout, dout, idx);
        float want = ref_binary(op, a[bcast_offset(idx, nout, na, da)], b[bcast_offset(idx, nout, nb, db)]);
        ck_assert_msg(yf[i] == want, "%s element %lld: %g, wanted %g", qf_op_name(op), (long long)i, (double)yf[i],
                      (double)want);
    }
    free_outs(y, 1);
    free(a);
    free(b);
    qf_graph_free(g);
}

START_TEST(binary_broadcasting)
{
    const qf_op ops[] = {QF_OP_ADD, QF_OP_SUB, QF_OP_MUL, QF_OP_DIV};
    for (size_t k = 0; k < QF_ARRAY_LEN(ops); k++) {
        binary_random(ops[k], 4, DIMS(2, 3, 4, 5), 3, DIMS(3, 1, 5), 4, DIMS(2, 3, 4, 5), 1);
        binary_random(ops[k], 3, DIMS(4, 1, 6), 3, DIMS(1, 5, 1), 3, DIMS(4, 5, 6), 1);
        binary_random(ops[k], 1, DIMS(7), 0, NULL, 1, DIMS(7), 1);      /* scalar operand */
        binary_random(ops[k], 0, NULL, 2, DIMS(3, 2), 2, DIMS(3, 2), 1); /* scalar first */
        binary_random(ops[k], 0, NULL, 0, NULL, 0, NULL, 1);
        binary_random(ops[k], 2, DIMS(3, 2), 2, DIMS(3, 2), 2, DIMS(3, 2), 1);
        binary_random(ops[k], 2, DIMS(1, 1), 1, DIMS(1), 2, DIMS(1, 1), 1);
    }
    /* large enough for several chunks on two threads: per-channel scale, and a
     * row vector against a column vector */
    binary_random(QF_OP_MUL, 4, DIMS(2, 64, 32, 32), 4, DIMS(1, 64, 1, 1), 4, DIMS(2, 64, 32, 32), 2);
    binary_random(QF_OP_ADD, 2, DIMS(300, 1), 2, DIMS(1, 400), 2, DIMS(300, 400), 2);
    binary_random(QF_OP_SUB, 3, DIMS(2, 1, 40000), 1, DIMS(40000), 3, DIMS(2, 1, 40000), 2);
    /* PRelu: the slope broadcasts onto X */
    binary_random(QF_OP_PRELU, 4, DIMS(2, 3, 4, 5), 3, DIMS(3, 1, 1), 4, DIMS(2, 3, 4, 5), 1);
    binary_random(QF_OP_PRELU, 3, DIMS(3, 4, 5), 1, DIMS(5), 3, DIMS(3, 4, 5), 1);
}
END_TEST

START_TEST(binary_hand_values_and_errors)
{
    /* Div f32 with a broadcast row: [[1,2],[3,4]] / [2,-4] */
    qf_graph *g = new_graph(14);
    int in[2] = {add_value(g, QF_F32, 2, DIMS(2, 2)), add_const(g, QF_F32, 1, DIMS(2), (float[]){2, -4})}, out[1];
    int ni = add_node(g, QF_OP_DIV, 2, in, 1, out);
    CK_OK(prep(g, ni));
    void *y[1];
    CK_OK(exec(g, ni, (const void *[]){(float[]){1, 2, 3, 4}}, y, 1));
    check_f32(y[0], (float[]){0.5f, -0.5f, 1.5f, -1.0f}, 4, 0);
    free_outs(y, 1);
    qf_graph_free(g);

    /* incompatible shapes */
    g = new_graph(14);
    in[0] = add_value(g, QF_F32, 2, DIMS(2, 3));
    in[1] = add_value(g, QF_F32, 1, DIMS(2));
    ni = add_node(g, QF_OP_ADD, 2, in, 1, out);
    CK_STATUS(prep(g, ni), QF_ERR_INVALID);
    qf_graph_free(g);

    /* mixed dtypes */
    g = new_graph(14);
    in[0] = add_value(g, QF_F32, 1, DIMS(2));
    in[1] = add_value(g, QF_I64, 1, DIMS(2));
    ni = add_node(g, QF_OP_MUL, 2, in, 1, out);
    CK_STATUS(prep(g, ni), QF_ERR_INVALID);
    qf_graph_free(g);

    /* PRelu whose slope would grow X */
    g = new_graph(16);
    in[0] = add_value(g, QF_F32, 2, DIMS(1, 3));
    in[1] = add_value(g, QF_F32, 2, DIMS(2, 3));
    ni = add_node(g, QF_OP_PRELU, 2, in, 1, out);
    CK_STATUS(prep(g, ni), QF_ERR_INVALID);
    qf_graph_free(g);
}
END_TEST

START_TEST(binary_integers)
{
    /* int64 shape arithmetic: division truncates toward zero, x/0 gives 0, MIN/-1 wraps */
    const int64_t a64[] = {7, -7, 7, -7, 5, INT64_MIN, INT64_MAX, 0};
    const int64_t b64[] = {2, 2, -2, -2, 0, -1, 1, 3};
    const struct {
        qf_op op;
        int64_t want[8];
    } c64[] = {
        {QF_OP_ADD, {9, -5, 5, -9, 5, INT64_MAX, INT64_MIN, 3}},
        {QF_OP_SUB, {5, -9, 9, -5, 5, INT64_MIN + 1, INT64_MAX - 1, -3}},
        {QF_OP_MUL, {14, -14, -14, 14, 0, INT64_MIN, INT64_MAX, 0}},
        {QF_OP_DIV, {3, -3, -3, 3, 0, INT64_MIN, INT64_MAX, 0}},
    };
    for (size_t k = 0; k < QF_ARRAY_LEN(c64); k++) {
        qf_graph *g = new_graph(14);
        int in[2] = {add_value(g, QF_I64, 1, DIMS(8)), add_value(g, QF_I64, 1, DIMS(8))}, out[1];
        int ni = add_node(g, c64[k].op, 2, in, 1, out);
        CK_OK(prep(g, ni));
        ck_assert_int_eq(g->values[out[0]].dtype, QF_I64);
        void *y[1];
        CK_OK(exec(g, ni, (const void *[]){a64, b64}, y, 1));
        for (int i = 0; i < 8; i++)
            ck_assert_msg(((int64_t *)y[0])[i] == c64[k].want[i], "%s[%d]: %lld", qf_op_name(c64[k].op), i,
                          (long long)((int64_t *)y[0])[i]);
        free_outs(y, 1);
        qf_graph_free(g);
    }
    /* uint8 wraps like numpy; int32 broadcast against a scalar */
    qf_graph *g = new_graph(14);
    int in[2] = {add_value(g, QF_U8, 1, DIMS(4)), add_value(g, QF_U8, 1, DIMS(4))}, out[1];
    int ni = add_node(g, QF_OP_SUB, 2, in, 1, out);
    CK_OK(prep(g, ni));
    void *y[1];
    CK_OK(exec(g, ni, (const void *[]){(uint8_t[]){3, 200, 0, 255}, (uint8_t[]){5, 100, 1, 255}}, y, 1));
    const uint8_t want_u8[] = {254, 100, 255, 0};
    ck_assert_mem_eq(y[0], want_u8, 4);
    free_outs(y, 1);
    qf_graph_free(g);

    g = new_graph(14);
    in[0] = add_value(g, QF_I32, 2, DIMS(2, 2));
    in[1] = add_const(g, QF_I32, 0, NULL, (int32_t[]){-3});
    ni = add_node(g, QF_OP_MUL, 2, in, 1, out);
    CK_OK(prep(g, ni));
    CK_OK(exec(g, ni, (const void *[]){(int32_t[]){1, -2, 3, INT32_MAX}}, y, 1));
    const int32_t want_i32[] = {-3, 6, -9, (int32_t)(uint32_t)(0x7fffffffu * 0xfffffffdu)};
    ck_assert_mem_eq(y[0], want_i32, sizeof want_i32);
    free_outs(y, 1);
    qf_graph_free(g);
}
END_TEST

/* ---- unary ------------------------------------------------------------------------------------ */

static const float ux[] = {-100.0f, -6.5f, -3.0f, -1.0f, -0.25f, 0.0f, 0.3f, 1.0f, 2.5f, 3.0f, 7.0f, 100.0f};
#define NUX ((int)QF_ARRAY_LEN(ux))

/* Runs a unary node on ux; extra inputs (Clip's bounds) may follow. */
static void unary_run(qf_graph *g, qf_op op, int nin, const int *extra, void (*attrs)(qf_graph *, int), float *y)
{
    int in[3] = {add_value(g, QF_F32, 1, DIMS(NUX)), -1, -1}, out[1];
    for (int k = 1; k < nin; k++) in[k] = extra[k - 1];
    int ni = add_node(g, op, nin, in, 1, out);
    if (attrs) attrs(g, ni);
    CK_OK(prep(g, ni));
    check_shape(&g->values[out[0]], 1, DIMS(NUX));
    void *o[1];
    CK_OK(exec(g, ni, (const void *[]){ux, NULL, NULL}, o, 1));
    memcpy(y, o[0], sizeof ux);
    free_outs(o, 1);
}

static void leaky_attrs(qf_graph *g, int ni) { set_float(&g->nodes[ni], "alpha", 0.1f); }
static void hsig_attrs(qf_graph *g, int ni)
{
    set_float(&g->nodes[ni], "alpha", 0.5f);
    set_float(&g->nodes[ni], "beta", 0.6f);
}
static void clip6_attrs(qf_graph *g, int ni)
{
    set_float(&g->nodes[ni], "min", -1.0f);
    set_float(&g->nodes[ni], "max", 2.5f);
}

START_TEST(unary_ops)
{
    float y[NUX];
    qf_graph *g = new_graph(14);
    unary_run(g, QF_OP_RELU, 1, NULL, NULL, y);
    for (int i = 0; i < NUX; i++) ck_assert_float_eq(y[i], ux[i] > 0 ? ux[i] : 0.0f);
    qf_graph_free(g);

    g = new_graph(16);
    unary_run(g, QF_OP_LEAKY_RELU, 1, NULL, leaky_attrs, y);
    for (int i = 0; i < NUX; i++) ck_assert_float_eq(y[i], ux[i] >= 0 ? ux[i] : 0.1f * ux[i]);
    qf_graph_free(g);
    g = new_graph(16);
    unary_run(g, QF_OP_LEAKY_RELU, 1, NULL, NULL, y); /* default alpha 0.01 */
    ck_assert_float_eq_tol(y[1], -0.065f, 1e-7f);
    qf_graph_free(g);

    g = new_graph(13);
    unary_run(g, QF_OP_SIGMOID, 1, NULL, NULL, y);
    for (int i = 0; i < NUX; i++) {
        ck_assert(!isnan(y[i]));
        ck_assert_double_eq_tol(y[i], 1.0 / (1.0 + exp(-(double)ux[i])), 1e-6);
    }
    ck_assert_float_eq(y[5], 0.5f);
    qf_graph_free(g);

    g = new_graph(13);
    unary_run(g, QF_OP_TANH, 1, NULL, NULL, y);
    for (int i = 0; i < NUX; i++) ck_assert_double_eq_tol(y[i], tanh((double)ux[i]), 1e-6);
    qf_graph_free(g);

    g = new_graph(7);
    unary_run(g, QF_OP_HARD_SIGMOID, 1, NULL, hsig_attrs, y);
    /* max(0, min(1, 0.5x + 0.6)): -3 -> 0, -1 -> 0.1, 0.3 -> 0.75, 1 -> 1 */
    ck_assert_float_eq(y[2], 0.0f);
    ck_assert_float_eq_tol(y[3], 0.1f, 1e-6f);
    ck_assert_float_eq_tol(y[6], 0.75f, 1e-6f);
    ck_assert_float_eq(y[7], 1.0f);
    qf_graph_free(g);
    g = new_graph(7);
    unary_run(g, QF_OP_HARD_SIGMOID, 1, NULL, NULL, y); /* defaults 0.2, 0.5 */
    ck_assert_float_eq_tol(y[7], 0.7f, 1e-6f);
    qf_graph_free(g);

    g = new_graph(14);
    unary_run(g, QF_OP_HARD_SWISH, 1, NULL, NULL, y);
    for (int i = 0; i < NUX; i++) {
        double h = fmin(1.0, fmax(0.0, ux[i] / 6.0 + 0.5));
        ck_assert_double_eq_tol(y[i], ux[i] * h, 1e-5);
    }
    ck_assert_float_eq(y[2], 0.0f); /* x = -3 */
    ck_assert_float_eq(y[9], 3.0f); /* x = 3 */
    qf_graph_free(g);
}
END_TEST

START_TEST(clip_bounds)
{
    float y[NUX];
    /* opset 6: bounds are attributes */
    qf_graph *g = new_graph(6);
    unary_run(g, QF_OP_CLIP, 1, NULL, clip6_attrs, y);
    for (int i = 0; i < NUX; i++) ck_assert_float_eq(y[i], fminf(2.5f, fmaxf(-1.0f, ux[i])));
    qf_graph_free(g);
    /* opset 13: optional inputs; min only, max only (min omitted), both, min > max */
    g = new_graph(13);
    int lo = add_const(g, QF_F32, 0, NULL, (float[]){0.2f});
    unary_run(g, QF_OP_CLIP, 2, (int[]){lo}, NULL, y);
    for (int i = 0; i < NUX; i++) ck_assert_float_eq(y[i], fmaxf(0.2f, ux[i]));
    qf_graph_free(g);
    g = new_graph(13);
    int hi = add_value(g, QF_F32, 0, NULL); /* a runtime bound, read by the kernel */
    {
        int in[3] = {add_value(g, QF_F32, 1, DIMS(NUX)), -1, hi}, out[1];
        int ni = add_node(g, QF_OP_CLIP, 3, in, 1, out);
        CK_OK(prep(g, ni));
        void *o[1];
        CK_OK(exec(g, ni, (const void *[]){ux, NULL, (float[]){1.0f}}, o, 1));
        for (int i = 0; i < NUX; i++) ck_assert_float_eq(((float *)o[0])[i], fminf(1.0f, ux[i]));
        free_outs(o, 1);
    }
    qf_graph_free(g);
    g = new_graph(13);
    lo = add_const(g, QF_F32, 0, NULL, (float[]){3.0f});
    hi = add_const(g, QF_F32, 0, NULL, (float[]){1.0f});
    unary_run(g, QF_OP_CLIP, 3, (int[]){lo, hi}, NULL, y);
    for (int i = 0; i < NUX; i++) ck_assert_float_eq(y[i], 1.0f); /* min > max: everything is max */
    qf_graph_free(g);

    /* int8 Clip with the default (type) minimum */
    g = new_graph(13);
    int in[3] = {add_value(g, QF_I8, 1, DIMS(5)), -1, add_const(g, QF_I8, 0, NULL, (int8_t[]){10})}, out[1];
    int ni = add_node(g, QF_OP_CLIP, 3, in, 1, out);
    CK_OK(prep(g, ni));
    void *o[1];
    CK_OK(exec(g, ni, (const void *[]){(int8_t[]){-128, -5, 0, 10, 127}}, o, 1));
    const int8_t want[] = {-128, -5, 0, 10, 10};
    ck_assert_mem_eq(o[0], want, 5);
    free_outs(o, 1);
    qf_graph_free(g);
}
END_TEST

START_TEST(unary_threads_and_dtypes)
{
    /* 100000 elements: several chunks on 3 threads, against a serial loop */
    int64_t n = 100000;
    float *x = malloc((size_t)n * 4);
    fill_rand(x, n);
    qf_graph *g = new_graph(14);
    int in[1] = {add_value(g, QF_F32, 2, DIMS(4, n / 4))}, out[1];
    int ni = add_node(g, QF_OP_TANH, 1, in, 1, out);
    CK_OK(prep(g, ni));
    void *o[1];
    CK_OK(exec(g, ni, (const void *[]){x}, o, 3));
    for (int64_t i = 0; i < n; i++) ck_assert_float_eq(((float *)o[0])[i], qfi_tanh(x[i]));
    free_outs(o, 1);
    qf_graph_free(g);
    free(x);

    /* Sigmoid of an int tensor is refused by name */
    g = new_graph(13);
    in[0] = add_value(g, QF_I32, 1, DIMS(3));
    ni = add_node(g, QF_OP_SIGMOID, 1, in, 1, out);
    CK_STATUS(prep(g, ni), QF_ERR_UNSUPPORTED);
    qf_graph_free(g);
}
END_TEST

/* ---- concat ----------------------------------------------------------------------------------- */

START_TEST(concat_axes)
{
    const int64_t base[3] = {2, 3, 4};
    const int64_t extra[3] = {1, 2, 3}; /* per input, the size along the axis */
    for (int axis = -3; axis < 3; axis++) {
        int a = axis < 0 ? axis + 3 : axis;
        qf_graph *g = new_graph(13);
        int in[3], out[1];
        float *data[3];
        int64_t dims[3][3];
        for (int k = 0; k < 3; k++) {
            memcpy(dims[k], base, sizeof base);
            dims[k][a] = extra[k];
            in[k] = add_value(g, QF_F32, 3, dims[k]);
            data[k] = malloc((size_t)qfi_numel(3, dims[k]) * 4);
            fill_rand(data[k], qfi_numel(3, dims[k]));
        }
        int ni = add_node(g, QF_OP_CONCAT, 3, in, 1, out);
        set_int(&g->nodes[ni], "axis", axis);
        CK_OK(prep(g, ni));
        int64_t od[3];
        memcpy(od, base, sizeof base);
        od[a] = 6;
        check_shape(&g->values[out[0]], 3, od);
        void *o[1];
        CK_OK(exec(g, ni, (const void *[]){data[0], data[1], data[2]}, o, 1));
        for (int64_t i = 0; i < qfi_numel(3, od); i++) {
            int64_t idx[3];
            unflatten(i, 3, od, idx);
            int k = 0;
            while (idx[a] >= extra[k]) idx[a] -= extra[k++];
            int64_t off = (idx[0] * dims[k][1] + idx[1]) * dims[k][2] + idx[2];
            ck_assert_float_eq(((float *)o[0])[i], data[k][off]);
        }
        free_outs(o, 1);
        for (int k = 0; k < 3; k++) free(data[k]);
        qf_graph_free(g);
    }
    /* int64 with an empty input; then a dim mismatch */
    qf_graph *g = new_graph(13);
    int in[3] = {add_value(g, QF_I64, 1, DIMS(2)), add_value(g, QF_I64, 1, DIMS(0)), add_value(g, QF_I64, 1, DIMS(1))};
    int out[1];
    int ni = add_node(g, QF_OP_CONCAT, 3, in, 1, out);
    set_int(&g->nodes[ni], "axis", 0);
    CK_OK(prep(g, ni));
    check_shape(&g->values[out[0]], 1, DIMS(3));
    void *o[1];
    CK_OK(exec(g, ni, (const void *[]){(int64_t[]){5, -6}, (int64_t[]){0}, (int64_t[]){1LL << 40}}, o, 1));
    const int64_t want[] = {5, -6, 1LL << 40};
    ck_assert_mem_eq(o[0], want, sizeof want);
    free_outs(o, 1);
    qf_graph_free(g);

    g = new_graph(13);
    in[0] = add_value(g, QF_F32, 2, DIMS(2, 3));
    in[1] = add_value(g, QF_F32, 2, DIMS(3, 3));
    ni = add_node(g, QF_OP_CONCAT, 2, in, 1, out);
    set_int(&g->nodes[ni], "axis", 1);
    CK_STATUS(prep(g, ni), QF_ERR_INVALID);
    qf_graph_free(g);
    g = new_graph(13);
    in[0] = add_value(g, QF_F32, 2, DIMS(2, 3));
    ni = add_node(g, QF_OP_CONCAT, 1, in, 1, out);
    set_int(&g->nodes[ni], "axis", 2);
    CK_STATUS(prep(g, ni), QF_ERR_INVALID);
    qf_graph_free(g);
}
END_TEST

/* ---- Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout -------------------------------- */

/* A one-input node of `op` on an f32 input of `dims`; the caller adds attributes. */
static qf_graph *shape_case(qf_op op, int64_t opset, int nd, const int64_t *dims, int *ni, int *out)
{
    qf_graph *g = new_graph(opset);
    int in[1] = {add_value(g, QF_F32, nd, dims)};
    *ni = add_node(g, op, 1, in, 1, out);
    return g;
}

static void reshape_check(int nin, const int64_t *in_dims, int ns, const int64_t *shape, int allowzero, int nout,
                          const int64_t *want)
{
    qf_graph *g = new_graph(14);
    int in[2] = {add_value(g, QF_F32, nin, in_dims), const_i64(g, ns, shape)}, out[1];
    int ni = add_node(g, QF_OP_RESHAPE, 2, in, 1, out);
    if (allowzero) set_int(&g->nodes[ni], "allowzero", 1);
    if (!want) {
        CK_STATUS(prep(g, ni), QF_ERR_INVALID);
    } else {
        CK_OK(prep(g, ni));
        check_shape(&g->values[out[0]], nout, want);
        int64_t n = qfi_numel(nin, in_dims);
        float *x = malloc((size_t)n * 4 + 4);
        fill_rand(x, n);
        void *o[1];
        CK_OK(exec(g, ni, (const void *[]){x}, o, 1));
        if (n) ck_assert_mem_eq(o[0], x, (size_t)n * 4);
        free_outs(o, 1);
        free(x);
    }
    qf_graph_free(g);
}

START_TEST(reshape_family)
{
    reshape_check(3, DIMS(2, 3, 4), 4, DIMS(2, 0, 1, -1), 0, 4, DIMS(2, 3, 1, 4));
    reshape_check(3, DIMS(2, 3, 4), 4, DIMS(-1, 2, 3, 4), 0, 4, DIMS(1, 2, 3, 4));
    reshape_check(3, DIMS(2, 3, 4), 1, DIMS(24), 0, 1, DIMS(24));
    reshape_check(3, DIMS(0, 3, 4), 3, DIMS(3, 4, 0), 1, 3, DIMS(3, 4, 0)); /* allowzero */
    reshape_check(3, DIMS(2, 3, 4), 2, DIMS(5, -1), 0, 0, NULL);          /* 24 % 5 */
    reshape_check(3, DIMS(2, 3, 4), 2, DIMS(-1, -1), 0, 0, NULL);
    reshape_check(3, DIMS(2, 3, 4), 2, DIMS(4, 5), 0, 0, NULL);

    /* a shape computed at run time cannot be planned */
    qf_graph *g = new_graph(14);
    int in[2] = {add_value(g, QF_F32, 1, DIMS(6)), add_value(g, QF_I64, 1, DIMS(2))}, out[2];
    int ni = add_node(g, QF_OP_RESHAPE, 2, in, 1, out);
    CK_STATUS(prep(g, ni), QF_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), "dynamic shape input"));
    qf_graph_free(g);

    /* Flatten: axis 0, negative, and equal to the rank */
    const struct {
        int64_t axis;
        int64_t want[2];
    } fl[] = {{0, {1, 120}}, {1, {2, 60}}, {-1, {24, 5}}, {4, {120, 1}}, {-4, {1, 120}}};
    for (size_t k = 0; k < QF_ARRAY_LEN(fl); k++) {
        g = shape_case(QF_OP_FLATTEN, 13, 4, DIMS(2, 3, 4, 5), &ni, out);
        set_int(&g->nodes[ni], "axis", fl[k].axis);
        CK_OK(prep(g, ni));
        check_shape(&g->values[out[0]], 2, fl[k].want);
        qf_graph_free(g);
    }
    g = shape_case(QF_OP_FLATTEN, 13, 2, DIMS(2, 3), &ni, out);
    set_int(&g->nodes[ni], "axis", 3);
    CK_STATUS(prep(g, ni), QF_ERR_INVALID);
    qf_graph_free(g);

    /* Squeeze: opset 13 axes input (negative), opset 11 attribute, no axes, a non-1 dim */
    g = new_graph(13);
    in[0] = add_value(g, QF_F32, 4, DIMS(1, 3, 1, 5));
    in[1] = const_i64(g, 1, DIMS(-2));
    ni = add_node(g, QF_OP_SQUEEZE, 2, in, 1, out);
    CK_OK(prep(g, ni));
    check_shape(&g->values[out[0]], 3, DIMS(1, 3, 5));
    qf_graph_free(g);
    g = shape_case(QF_OP_SQUEEZE, 11, 4, DIMS(1, 3, 1, 5), &ni, out);
    set_ints(&g->nodes[ni], "axes", 2, DIMS(0, 2));
    CK_OK(prep(g, ni));
    check_shape(&g->values[out[0]], 2, DIMS(3, 5));
    qf_graph_free(g);
    g = shape_case(QF_OP_SQUEEZE, 13, 4, DIMS(1, 3, 1, 5), &ni, out);
    CK_OK(prep(g, ni));
    check_shape(&g->values[out[0]], 2, DIMS(3, 5));
    qf_graph_free(g);
    g = shape_case(QF_OP_SQUEEZE, 11, 2, DIMS(2, 3), &ni, out);
    set_ints(&g->nodes[ni], "axes", 1, DIMS(1));
    CK_STATUS(prep(g, ni), QF_ERR_INVALID);
    qf_graph_free(g);

    /* Unsqueeze: unsorted and negative axes index the output */
    g = new_graph(13);
    in[0] = add_value(g, QF_F32, 3, DIMS(3, 4, 5));
    in[1] = const_i64(g, 3, DIMS(5, 4, 2));
    ni = add_node(g, QF_OP_UNSQUEEZE, 2, in, 1, out);
    CK_OK(prep(g, ni));
    check_shape(&g->values[out[0]], 6, DIMS(3, 4, 1, 5, 1, 1));
    qf_graph_free(g);
    g = new_graph(13);
    in[0] = add_value(g, QF_F32, 4, DIMS(1, 3, 1, 5));
    in[1] = const_i64(g, 1, DIMS(-2));
    ni = add_node(g, QF_OP_UNSQUEEZE, 2, in, 1, out);
    CK_OK(prep(g, ni));
    check_shape(&g->values[out[0]], 5, DIMS(1, 3, 1, 1, 5));
    qf_graph_free(g);
    g = shape_case(QF_OP_UNSQUEEZE, 11, 1, DIMS(3), &ni, out);
    set_ints(&g->nodes[ni], "axes", 2, DIMS(0, -3));
    CK_STATUS(prep(g, ni), QF_ERR_INVALID); /* both name output dim 0 */
    qf_graph_free(g);

    /* Dropout: identity with an all-true mask; training mode with a ratio is refused */
    g = new_graph(13);
    in[0] = add_value(g, QF_F32, 1, DIMS(3));
    ni = add_node(g, QF_OP_DROPOUT, 1, in, 2, out);
    CK_OK(prep(g, ni));
    ck_assert_int_eq(g->values[out[1]].dtype, QF_BOOL);
    void *o[2];
    CK_OK(exec(g, ni, (const void *[]){(float[]){1, -2, 3}}, o, 1));
    check_f32(o[0], (float[]){1, -2, 3}, 3, 0);
    ck_assert_mem_eq(o[1], ((uint8_t[]){1, 1, 1}), 3);
    free_outs(o, 2);
    qf_graph_free(g);
    g = new_graph(13);
    int tin[3] = {add_value(g, QF_F32, 1, DIMS(3)), add_const(g, QF_F32, 0, NULL, (float[]){0.5f}),
                  add_const(g, QF_BOOL, 0, NULL, (uint8_t[]){1})};
    ni = add_node(g, QF_OP_DROPOUT, 3, tin, 1, out);
    CK_STATUS(prep(g, ni), QF_ERR_UNSUPPORTED);
    qf_graph_free(g);
    g = new_graph(13);
    tin[0] = add_value(g, QF_F32, 1, DIMS(3));
    tin[1] = add_const(g, QF_F32, 0, NULL, (float[]){0.0f});
    tin[2] = add_const(g, QF_BOOL, 0, NULL, (uint8_t[]){1});
    ni = add_node(g, QF_OP_DROPOUT, 3, tin, 1, out);
    CK_OK(prep(g, ni)); /* ratio 0 drops nothing */
    qf_graph_free(g);
    g = new_graph(16);
    in[0] = add_value(g, QF_U8, 2, DIMS(2, 2));
    ni = add_node(g, QF_OP_IDENTITY, 1, in, 1, out);
    CK_OK(prep(g, ni));
    CK_OK(exec(g, ni, (const void *[]){(uint8_t[]){9, 8, 7, 6}}, o, 1));
    ck_assert_mem_eq(o[0], ((uint8_t[]){9, 8, 7, 6}), 4);
    ck_assert_int_eq(g->values[out[0]].dtype, QF_U8);
    free_outs(o, 1);
    qf_graph_free(g);
}
END_TEST

/* ---- transpose ------------------------------------------------------------------------------- */

START_TEST(transpose_all_perms)
{
    const int64_t dims[4] = {2, 3, 4, 5};
    int64_t n = qfi_numel(4, dims);
    float x[120];
    fill_rand(x, n);
    int perm[4] = {0, 1, 2, 3}, count = 0;
    /* every permutation of 4 dims, in lexicographic order */
    for (;;) {
        qf_graph *g = new_graph(13);
        int in[1] = {add_value(g, QF_F32, 4, dims)}, out[1];
        int ni = add_node(g, QF_OP_TRANSPOSE, 1, in, 1, out);
        set_ints(&g->nodes[ni], "perm", 4, (int64_t[]){perm[0], perm[1], perm[2], perm[3]});
        CK_OK(prep(g, ni));
        int64_t od[4];
        for (int i = 0; i < 4; i++) od[i] = dims[perm[i]];
        check_shape(&g->values[out[0]], 4, od);
        void *o[1];
        CK_OK(exec(g, ni, (const void *[]){x}, o, 1));
        for (int64_t i = 0; i < n; i++) {
            int64_t oi[4], xi[4];
            unflatten(i, 4, od, oi);
            for (int d = 0; d < 4; d++) xi[perm[d]] = oi[d];
            ck_assert_float_eq(((float *)o[0])[i], x[((xi[0] * 3 + xi[1]) * 4 + xi[2]) * 5 + xi[3]]);
        }
        free_outs(o, 1);
        qf_graph_free(g);
        count++;
        int k = 2;
        while (k >= 0 && perm[k] > perm[k + 1]) k--;
        if (k < 0) break;
        int l = 3;
        while (perm[l] < perm[k]) l--;
        int t = perm[k];
        perm[k] = perm[l];
        perm[l] = t;
        for (int a = k + 1, b = 3; a < b; a++, b--) {
            t = perm[a];
            perm[a] = perm[b];
            perm[b] = t;
        }
    }
    ck_assert_int_eq(count, 24);

    /* default: reversed dims, on bytes */
    qf_graph *g = new_graph(13);
    int in[1] = {add_value(g, QF_U8, 2, DIMS(2, 3))}, out[1];
    int ni = add_node(g, QF_OP_TRANSPOSE, 1, in, 1, out);
    CK_OK(prep(g, ni));
    check_shape(&g->values[out[0]], 2, DIMS(3, 2));
    void *o[1];
    CK_OK(exec(g, ni, (const void *[]){(uint8_t[]){1, 2, 3, 4, 5, 6}}, o, 1));
    ck_assert_mem_eq(o[0], ((uint8_t[]){1, 4, 2, 5, 3, 6}), 6);
    free_outs(o, 1);
    qf_graph_free(g);

    g = new_graph(13);
    in[0] = add_value(g, QF_F32, 3, DIMS(2, 3, 4));
    ni = add_node(g, QF_OP_TRANSPOSE, 1, in, 1, out);
    set_ints(&g->nodes[ni], "perm", 3, DIMS(0, 1, 1));
    CK_STATUS(prep(g, ni), QF_ERR_INVALID);
    qf_graph_free(g);
}
END_TEST

/* ---- pad ----------------------------------------------------------------------------------------- */

static const float x23[] = {1, 2, 3, 4, 5, 6};

/* Pad of x23 (2,3) at opset `opset`; value < -1000 means no constant_value input. */
static void pad_check(int64_t opset, const char *mode, int np, const int64_t *pads, float value, int naxes,
                      const int64_t *axes, int nd, const int64_t *want_dims, const float *want)
{
    qf_graph *g = new_graph(opset);
    int in[4] = {add_value(g, QF_F32, 2, DIMS(2, 3)), const_i64(g, np, pads), -1, -1}, out[1];
    int nin = 2;
    if (value > -1000.0f) in[2] = add_const(g, QF_F32, 0, NULL, &value), nin = 3;
    if (naxes) in[3] = const_i64(g, naxes, axes), nin = 4;
    int ni = add_node(g, QF_OP_PAD, nin, in, 1, out);
    set_string(g, ni, "mode", mode);
    CK_OK(prep(g, ni));
    check_shape(&g->values[out[0]], nd, want_dims);
    void *o[1];
    CK_OK(exec(g, ni, (const void *[]){x23}, o, 1));
    check_f32(o[0], want, qfi_numel(nd, want_dims), 0);
    free_outs(o, 1);
    qf_graph_free(g);
}

START_TEST(pad_modes)
{
    static const float pad_constant[] = {9, 9, 9, 9, 9, 9, 9, 9, 1, 2, 3, 9, 9, 9, 4, 5, 6, 9};
    static const float pad_reflect[] = {6, 5, 4, 5, 6, 5, 4, 3, 2, 1, 2, 3, 2, 1,
                                        6, 5, 4, 5, 6, 5, 4, 3, 2, 1, 2, 3, 2, 1};
    static const float pad_edge[] = {1, 1, 1, 2, 3, 3, 3, 1, 1, 1, 2, 3, 3, 3,
                                     4, 4, 4, 5, 6, 6, 6, 4, 4, 4, 5, 6, 6, 6};
    static const float pad_wrap[] = {5, 6, 4, 5, 6, 4, 5, 2, 3, 1, 2, 3, 1, 2,
                                     5, 6, 4, 5, 6, 4, 5, 2, 3, 1, 2, 3, 1, 2};
    static const float pad_crop[] = {2, 3, 0, 5, 6, 0, 0, 0, 0};
    static const float pad_axes[] = {1, 1, 2, 3, 3, 4, 4, 5, 6, 6};
    pad_check(18, "constant", 4, DIMS(1, 2, 0, 1), 9.0f, 0, NULL, 2, DIMS(3, 6), pad_constant);
    pad_check(18, "reflect", 4, DIMS(1, 2, 1, 2), -2000, 0, NULL, 2, DIMS(4, 7), pad_reflect);
    pad_check(18, "edge", 4, DIMS(1, 2, 1, 2), -2000, 0, NULL, 2, DIMS(4, 7), pad_edge);
    pad_check(19, "wrap", 4, DIMS(1, 2, 1, 2), -2000, 0, NULL, 2, DIMS(4, 7), pad_wrap);
    pad_check(18, "constant", 4, DIMS(0, -1, 1, 1), -2000, 0, NULL, 2, DIMS(3, 3), pad_crop); /* crops */
    pad_check(18, "edge", 2, DIMS(1, 1), -2000, 1, DIMS(-1), 2, DIMS(2, 5), pad_axes);       /* opset 18 axes */

    /* opset 2..10: pads and value are attributes; int32 tensors pad too */
    qf_graph *g = new_graph(7);
    int in[1] = {add_value(g, QF_F32, 2, DIMS(2, 3))}, out[1];
    int ni = add_node(g, QF_OP_PAD, 1, in, 1, out);
    set_ints(&g->nodes[ni], "pads", 4, DIMS(1, 2, 0, 1));
    set_float(&g->nodes[ni], "value", 9.0f);
    CK_OK(prep(g, ni));
    void *o[1];
    CK_OK(exec(g, ni, (const void *[]){x23}, o, 1));
    check_f32(o[0], pad_constant, 18, 0);
    free_outs(o, 1);
    qf_graph_free(g);
    g = new_graph(13);
    int in2[2] = {add_value(g, QF_I32, 2, DIMS(1, 3)), const_i64(g, 4, DIMS(0, 4, 0, 4))};
    ni = add_node(g, QF_OP_PAD, 2, in2, 1, out);
    set_string(g, ni, "mode", "reflect"); /* pads longer than the dim keep mirroring */
    CK_OK(prep(g, ni));
    CK_OK(exec(g, ni, (const void *[]){(int32_t[]){1, 2, 3}}, o, 1));
    const int32_t want[] = {1, 2, 3, 2, 1, 2, 3, 2, 1, 2, 3};
    ck_assert_mem_eq(o[0], want, sizeof want);
    free_outs(o, 1);
    qf_graph_free(g);

    /* cropping past zero */
    g = new_graph(13);
    in2[0] = add_value(g, QF_F32, 2, DIMS(2, 3));
    in2[1] = const_i64(g, 4, DIMS(0, -2, 0, -2));
    ni = add_node(g, QF_OP_PAD, 2, in2, 1, out);
    CK_STATUS(prep(g, ni), QF_ERR_INVALID);
    qf_graph_free(g);
}
END_TEST

/* ---- resize ---------------------------------------------------------------------------------- */

static const float x2[] = {1, 2, 3, 4};
static const float x4[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
static const float x24[] = {1, 2, 3, 4, 5, 6, 7, 8};

typedef struct rs_case {
    int64_t opset;
    const char *mode, *coord, *nearest;
    int64_t in_h, in_w;
    const float *x;
    int n_scales;        /* scales of all 4 dims, or */
    float scales[4];
    int n_sizes;         /* sizes of all dims, or of `axes` */
    int64_t sizes[4];
    int n_roi;
    float roi[8];
    int64_t out_h, out_w;
    const float *want;
} rs_case;

static void resize_run(const rs_case *c, void (*attrs)(qf_graph *, int))
{
    qf_graph *g = new_graph(c->opset);
    int in[4] = {add_value(g, QF_F32, 4, DIMS(1, 1, c->in_h, c->in_w)), -1, -1, -1}, out[1];
    if (c->n_roi) in[1] = add_const(g, QF_F32, 1, DIMS(c->n_roi), c->roi);
    if (c->n_scales) in[2] = add_const(g, QF_F32, 1, DIMS(c->n_scales), c->scales);
    if (c->n_sizes) in[3] = const_i64(g, c->n_sizes, c->sizes);
    int nin = c->n_sizes ? 4 : 3;
    if (c->opset == 11 && !c->n_scales) in[2] = add_const(g, QF_F32, 1, DIMS(0), NULL); /* empty scales */
    if (c->opset == 11 && !c->n_roi) in[1] = add_const(g, QF_F32, 1, DIMS(0), NULL);
    int ni = add_node(g, QF_OP_RESIZE, nin, in, 1, out);
    set_string(g, ni, "mode", c->mode);
    if (c->coord) set_string(g, ni, "coordinate_transformation_mode", c->coord);
    if (c->nearest) set_string(g, ni, "nearest_mode", c->nearest);
    if (attrs) attrs(g, ni);
    CK_OK(prep(g, ni));
    check_shape(&g->values[out[0]], 4, DIMS(1, 1, c->out_h, c->out_w));
    void *o[1];
    CK_OK(exec(g, ni, (const void *[]){c->x}, o, 1));
    check_f32(o[0], c->want, c->out_h * c->out_w, 2e-5f);
    free_outs(o, 1);
    qf_graph_free(g);
}

static void crop_attrs(qf_graph *g, int ni) { set_float(&g->nodes[ni], "extrapolation_value", 10.0f); }
static void aspect_attrs(qf_graph *g, int ni)
{
    set_ints(&g->nodes[ni], "axes", 2, DIMS(2, 3));
    set_string(g, ni, "keep_aspect_ratio_policy", "not_larger");
}

START_TEST(resize_nearest_and_linear)
{
    static const float rs_nearest_scales[] = {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4};
    static const float rs_nearest_sizes[] = {1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1, 2, 2, 2, 2,
                                             1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 3, 3, 3, 3, 4, 4, 4, 4,
                                             3, 3, 3, 3, 4, 4, 4, 4};
    static const float rs_nearest_ceil_hp[] = {
        1,  2,  2,  3,  3,  4,  4,  4,  5,  6,  6,  7,  7,  8,  8,  8,  5,  6,  6,  7,  7,  8,
        8,  8,  9,  10, 10, 11, 11, 12, 12, 12, 9,  10, 10, 11, 11, 12, 12, 12, 13, 14, 14, 15,
        15, 16, 16, 16, 13, 14, 14, 15, 15, 16, 16, 16, 13, 14, 14, 15, 15, 16, 16, 16};
    static const float rs_nearest_floor_ac[] = {
        1, 1, 1, 2, 2, 3, 3, 4, 1, 1, 1, 2, 2, 3, 3, 4, 1, 1, 1, 2, 2, 3, 3, 4, 5, 5, 5, 6, 6, 7, 7, 8,
        5, 5, 5, 6, 6, 7, 7, 8, 9, 9, 9, 10, 10, 11, 11, 12, 9, 9, 9, 10, 10, 11, 11, 12, 13, 13, 13, 14, 14, 15, 15, 16};
    /* round_prefer_ceil + asymmetric happens to equal ceil + half_pixel on this input */
    static const float *const rs_nearest_rpc_asym = rs_nearest_ceil_hp;
    static const float rs_nearest_down[] = {1, 3, 5, 7, 13, 15};
    static const float rs_linear_up[] = {1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, 3.25, 3.75, 4};
    static const float rs_linear_ac[] = {1,       1.333333, 1.666667, 2,        1.666667, 2,        2.333333, 2.666667,
                                         2.333333, 2.666667, 3,        3.333333, 3,        3.333333, 3.666667, 4};
    static const float rs_linear_asym[] = {1, 1.5, 2, 2, 2, 2.5, 3, 3, 3, 3.5, 4, 4, 3, 3.5, 4, 4};
    static const float rs_linear_down[] = {2.666667f, 4.333333f};
    /* align_corners divides by scale*in - 1 (2.4 - 1 here), not by the integer width - 1 */
    static const float rs_linear_down_ac[] = {1, 3.142857f};
    static const float rs_linear_pt[] = {1.666667f, 7, 12.333333f};
    static const float rs_crop[] = {7.6f, 10, 10, 12.4f, 10, 10, 10, 10, 10};
    static const float rs_hps[] = {4.928571f, 6.357143f, 10.642857f, 12.071429f};
    static const float rs_not_larger[] = {1, 1, 1, 1, 2, 2, 2, 1, 1, 1, 1, 2, 2, 2, 1, 1, 1, 1, 2, 2, 2, 1, 1, 1, 1,
                                          2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 3, 3, 3, 3, 4, 4, 4, 3, 3, 3, 3, 4, 4, 4};
    static const float rs_tf_nn[] = {6, 8, 10, 12, 14, 16};
    const rs_case cases[] = {
        {13, "nearest", NULL, NULL, 2, 2, x2, 4, {1, 1, 2, 3}, 0, {0}, 0, {0}, 4, 6, rs_nearest_scales},
        {13, "nearest", NULL, NULL, 2, 2, x2, 0, {0}, 4, {1, 1, 7, 8}, 0, {0}, 7, 8, rs_nearest_sizes},
        {13, "nearest", "half_pixel", "ceil", 4, 4, x4, 0, {0}, 4, {1, 1, 8, 8}, 0, {0}, 8, 8, rs_nearest_ceil_hp},
        {13, "nearest", "align_corners", "floor", 4, 4, x4, 0, {0}, 4, {1, 1, 8, 8}, 0, {0}, 8, 8, rs_nearest_floor_ac},
        {13, "nearest", "asymmetric", "round_prefer_ceil", 4, 4, x4, 0, {0}, 4, {1, 1, 8, 8}, 0, {0}, 8, 8,
         rs_nearest_rpc_asym},
        {13, "nearest", NULL, NULL, 4, 4, x4, 0, {0}, 4, {1, 1, 3, 2}, 0, {0}, 3, 2, rs_nearest_down},
        {11, "nearest", "tf_half_pixel_for_nn", NULL, 4, 4, x4, 0, {0}, 4, {1, 1, 3, 2}, 0, {0}, 3, 2, rs_tf_nn},
        {13, "linear", NULL, NULL, 2, 2, x2, 4, {1, 1, 2, 2}, 0, {0}, 0, {0}, 4, 4, rs_linear_up},
        {13, "linear", "align_corners", NULL, 2, 2, x2, 4, {1, 1, 2, 2}, 0, {0}, 0, {0}, 4, 4, rs_linear_ac},
        {13, "linear", "asymmetric", NULL, 2, 2, x2, 4, {1, 1, 2, 2}, 0, {0}, 0, {0}, 4, 4, rs_linear_asym},
        {13, "linear", NULL, NULL, 2, 4, x24, 4, {1, 1, 0.6f, 0.6f}, 0, {0}, 0, {0}, 1, 2, rs_linear_down},
        {13, "linear", "align_corners", NULL, 2, 4, x24, 4, {1, 1, 0.6f, 0.6f}, 0, {0}, 0, {0}, 1, 2, rs_linear_down_ac},
        {13, "linear", "pytorch_half_pixel", NULL, 4, 4, x4, 0, {0}, 4, {1, 1, 3, 1}, 0, {0}, 3, 1, rs_linear_pt},
        {19, "linear", "half_pixel_symmetric", NULL, 4, 4, x4, 4, {1, 1, 0.7f, 0.7f}, 0, {0}, 0, {0}, 2, 2, rs_hps},
    };
    for (size_t k = 0; k < QF_ARRAY_LEN(cases); k++) resize_run(&cases[k], NULL);
    const rs_case crop = {13, "linear", "tf_crop_and_resize", NULL, 4, 4, x4, 0, {0}, 4, {1, 1, 3, 3},
                          8, {0, 0, 0.4f, 0.6f, 1, 1, 1.2f, 1.7f}, 3, 3, rs_crop};
    resize_run(&crop, crop_attrs);
    const rs_case aspect = {18, "nearest", NULL, NULL, 2, 2, x2, 0, {0}, 2, {7, 8}, 0, {0}, 7, 7, rs_not_larger};
    resize_run(&aspect, aspect_attrs);
}
END_TEST

/* Upsample-7 (scales attribute) and -9 (input), Resize-10, and the refusals. */
START_TEST(resize_legacy_and_unsupported)
{
    /* Upsample-9 nearest x(2,3) */
    static const float up_nearest[] = {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4};
    qf_graph *g = new_graph(9);
    int in[4] = {add_value(g, QF_F32, 4, DIMS(1, 1, 2, 2)), add_const(g, QF_F32, 1, DIMS(4), (float[]){1, 1, 2, 3})};
    int out[1];
    int ni = add_node(g, QF_OP_UPSAMPLE, 2, in, 1, out);
    CK_OK(prep(g, ni));
    check_shape(&g->values[out[0]], 4, DIMS(1, 1, 4, 6));
    void *o[1];
    CK_OK(exec(g, ni, (const void *[]){x2}, o, 1));
    check_f32(o[0], up_nearest, 24, 0);
    free_outs(o, 1);
    qf_graph_free(g);

    /* Upsample-7 linear (asymmetric): x2 doubled */
    static const float up_linear[] = {1, 1.5, 2, 2, 2, 2.5, 3, 3, 3, 3.5, 4, 4, 3, 3.5, 4, 4};
    g = new_graph(7);
    in[0] = add_value(g, QF_F32, 4, DIMS(1, 1, 2, 2));
    ni = add_node(g, QF_OP_UPSAMPLE, 1, in, 1, out);
    set_string(g, ni, "mode", "linear");
    set_floats(g, ni, "scales", 4, (float[]){1, 1, 2, 2});
    CK_OK(prep(g, ni));
    CK_OK(exec(g, ni, (const void *[]){x2}, o, 1));
    check_f32(o[0], up_linear, 16, 1e-6f);
    free_outs(o, 1);
    qf_graph_free(g);

    /* Resize-10 nearest shrinking by 2 rounds up (ONNX Runtime's rule): rows/cols 0 and 2;
     * on uint8 data */
    g = new_graph(10);
    in[0] = add_value(g, QF_U8, 4, DIMS(1, 1, 4, 4));
    in[1] = add_const(g, QF_F32, 1, DIMS(4), (float[]){1, 1, 0.5f, 0.5f});
    ni = add_node(g, QF_OP_RESIZE, 2, in, 1, out);
    CK_OK(prep(g, ni));
    check_shape(&g->values[out[0]], 4, DIMS(1, 1, 2, 2));
    uint8_t xu[16];
    for (int i = 0; i < 16; i++) xu[i] = (uint8_t)(i + 1);
    CK_OK(exec(g, ni, (const void *[]){xu}, o, 1));
    ck_assert_mem_eq(o[0], ((uint8_t[]){1, 3, 9, 11}), 4);
    free_outs(o, 1);
    qf_graph_free(g);

    /* cubic, antialias, linear on integers, scales given at run time */
    for (int k = 0; k < 4; k++) {
        g = new_graph(18);
        in[0] = add_value(g, k == 2 ? QF_U8 : QF_F32, 4, DIMS(1, 1, 2, 2));
        in[1] = -1;
        in[2] = k == 3 ? add_value(g, QF_F32, 1, DIMS(4)) : add_const(g, QF_F32, 1, DIMS(4), (float[]){1, 1, 2, 2});
        ni = add_node(g, QF_OP_RESIZE, 3, in, 1, out);
        set_string(g, ni, "mode", k == 0 ? "cubic" : "linear");
        if (k == 1) set_int(&g->nodes[ni], "antialias", 1);
        CK_STATUS(prep(g, ni), QF_ERR_UNSUPPORTED);
        qf_graph_free(g);
    }
    /* both scales and sizes */
    g = new_graph(13);
    in[0] = add_value(g, QF_F32, 4, DIMS(1, 1, 2, 2));
    in[1] = -1;
    in[2] = add_const(g, QF_F32, 1, DIMS(4), (float[]){1, 1, 2, 2});
    in[3] = const_i64(g, 4, DIMS(1, 1, 4, 4));
    ni = add_node(g, QF_OP_RESIZE, 4, in, 1, out);
    CK_STATUS(prep(g, ni), QF_ERR_INVALID);
    qf_graph_free(g);
}
END_TEST

/* ---- slice ------------------------------------------------------------------------------------- */

/* Slice x (20,10,5) = arange; checks shape and that y[i,j,k] = x[s0+i*t0, s1+j*t1, s2+k*t2]. */
static void slice_check(int64_t opset, int n, const int64_t *starts, const int64_t *ends, const int64_t *axes,
                        const int64_t *steps, const int64_t *want_dims, const int64_t *first, const int64_t *step)
{
    static float x[1000];
    for (int i = 0; i < 1000; i++) x[i] = (float)i;
    qf_graph *g = new_graph(opset);
    int in[5] = {add_value(g, QF_F32, 3, DIMS(20, 10, 5)), -1, -1, -1, -1}, out[1];
    int nin = 1;
    if (opset >= 10) {
        in[1] = const_i64(g, n, starts);
        in[2] = const_i64(g, n, ends);
        nin = 3;
        if (axes) in[3] = const_i64(g, n, axes), nin = 4;
        if (steps) in[4] = const_i64(g, n, steps), nin = 5;
    }
    int ni = add_node(g, QF_OP_SLICE, nin, in, 1, out);
    if (opset < 10) {
        set_ints(&g->nodes[ni], "starts", n, starts);
        set_ints(&g->nodes[ni], "ends", n, ends);
        if (axes) set_ints(&g->nodes[ni], "axes", n, axes);
    }
    CK_OK(prep(g, ni));
    check_shape(&g->values[out[0]], 3, want_dims);
    void *o[1];
    CK_OK(exec(g, ni, (const void *[]){x}, o, 1));
    for (int64_t i = 0; i < qfi_numel(3, want_dims); i++) {
        int64_t idx[3];
        unflatten(i, 3, want_dims, idx);
        int64_t xi = ((first[0] + idx[0] * step[0]) * 10 + first[1] + idx[1] * step[1]) * 5 + first[2] + idx[2] * step[2];
        ck_assert_float_eq(((float *)o[0])[i], x[xi]);
    }
    free_outs(o, 1);
    qf_graph_free(g);
}

START_TEST(slice_clamping_and_steps)
{
    /* negative steps with starts past the end: dim 0 from 19 down to 1, dim 1 9,6,3, dim 2 4,2 */
    slice_check(13, 3, DIMS(20, 10, 4), DIMS(0, 0, 1), DIMS(0, 1, 2), DIMS(-1, -3, -2), DIMS(19, 3, 2),
                DIMS(19, 9, 4), DIMS(-1, -3, -2));
    /* end past the dim, negative end, negative axes */
    slice_check(13, 1, DIMS(1), DIMS(1000), DIMS(1), DIMS(1), DIMS(20, 9, 5), DIMS(0, 1, 0), DIMS(1, 1, 1));
    slice_check(13, 1, DIMS(0), DIMS(-1), DIMS(1), NULL, DIMS(20, 9, 5), DIMS(0, 0, 0), DIMS(1, 1, 1));
    slice_check(13, 3, DIMS(0, 0, 3), DIMS(20, 10, 4), DIMS(0, -2, -1), NULL, DIMS(20, 10, 1), DIMS(0, 0, 3),
                DIMS(1, 1, 1));
    /* start past the dim: empty */
    slice_check(13, 1, DIMS(1000), DIMS(1000), DIMS(1), DIMS(1), DIMS(20, 0, 5), DIMS(0, 0, 0), DIMS(1, 1, 1));
    /* the int64 extremes exporters write for "to the end" / "reverse everything" */
    slice_check(13, 2, DIMS(-1, 2), DIMS(INT64_MIN, INT64_MAX), DIMS(2, 0), DIMS(-1, 7), DIMS(3, 10, 5),
                DIMS(2, 0, 4), DIMS(7, 1, -1));
    slice_check(13, 1, DIMS(-1), DIMS(INT64_MIN), DIMS(1), DIMS(INT64_MIN), DIMS(20, 1, 5), DIMS(0, 9, 0),
                DIMS(1, 1, 1));
    /* default axes; opset 9 attributes */
    slice_check(13, 3, DIMS(0, 0, 3), DIMS(20, 10, 4), NULL, NULL, DIMS(20, 10, 1), DIMS(0, 0, 3), DIMS(1, 1, 1));
    slice_check(9, 2, DIMS(2, -3), DIMS(5, 100), DIMS(0, 2), NULL, DIMS(3, 10, 3), DIMS(2, 0, 2), DIMS(1, 1, 1));

    /* step 0, repeated axes */
    for (int k = 0; k < 2; k++) {
        qf_graph *g = new_graph(13);
        int in[5] = {add_value(g, QF_F32, 2, DIMS(4, 4)), const_i64(g, 2, DIMS(0, 0)), const_i64(g, 2, DIMS(2, 2)),
                     const_i64(g, 2, k ? DIMS(1, 1) : DIMS(0, 1)), const_i64(g, 2, k ? DIMS(1, 1) : DIMS(0, 1))};
        int out[1];
        int ni = add_node(g, QF_OP_SLICE, 5, in, 1, out);
        CK_STATUS(prep(g, ni), QF_ERR_INVALID);
        qf_graph_free(g);
    }
}
END_TEST

/* ---- split ---------------------------------------------------------------------------------------- */

START_TEST(split_parts)
{
    const float x[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}; /* (2,6) */
    void *o[3];
    /* opset 13 split input along axis -1: [2, 4] */
    qf_graph *g = new_graph(13);
    int in[2] = {add_value(g, QF_F32, 2, DIMS(2, 6)), const_i64(g, 2, DIMS(2, 4))}, out[3];
    int ni = add_node(g, QF_OP_SPLIT, 2, in, 2, out);
    set_int(&g->nodes[ni], "axis", -1);
    CK_OK(prep(g, ni));
    check_shape(&g->values[out[0]], 2, DIMS(2, 2));
    check_shape(&g->values[out[1]], 2, DIMS(2, 4));
    CK_OK(exec(g, ni, (const void *[]){x}, o, 1));
    check_f32(o[0], (float[]){0, 1, 6, 7}, 4, 0);
    check_f32(o[1], (float[]){2, 3, 4, 5, 8, 9, 10, 11}, 8, 0);
    free_outs(o, 2);
    qf_graph_free(g);

    /* equal parts along axis 1; opset 11 split attribute along axis 0 */
    g = new_graph(13);
    in[0] = add_value(g, QF_F32, 2, DIMS(2, 6));
    ni = add_node(g, QF_OP_SPLIT, 1, in, 3, out);
    set_int(&g->nodes[ni], "axis", 1);
    CK_OK(prep(g, ni));
    CK_OK(exec(g, ni, (const void *[]){x}, o, 1));
    check_f32(o[0], (float[]){0, 1, 6, 7}, 4, 0);
    check_f32(o[1], (float[]){2, 3, 8, 9}, 4, 0);
    check_f32(o[2], (float[]){4, 5, 10, 11}, 4, 0);
    free_outs(o, 3);
    qf_graph_free(g);
    g = new_graph(11);
    in[0] = add_value(g, QF_F32, 2, DIMS(2, 6));
    ni = add_node(g, QF_OP_SPLIT, 1, in, 2, out);
    set_ints(&g->nodes[ni], "split", 2, DIMS(0, 2));
    CK_OK(prep(g, ni));
    check_shape(&g->values[out[0]], 2, DIMS(0, 6));
    CK_OK(exec(g, ni, (const void *[]){x}, o, 1));
    check_f32(o[1], x, 12, 0);
    free_outs(o, 2);
    qf_graph_free(g);

    /* opset 18 num_outputs: 7 into 3 is 3, 3, 1 */
    g = new_graph(18);
    in[0] = add_value(g, QF_I64, 1, DIMS(7));
    ni = add_node(g, QF_OP_SPLIT, 1, in, 3, out);
    set_int(&g->nodes[ni], "num_outputs", 3);
    CK_OK(prep(g, ni));
    check_shape(&g->values[out[2]], 1, DIMS(1));
    CK_OK(exec(g, ni, (const void *[]){(int64_t[]){1, 2, 3, 4, 5, 6, 7}}, o, 1));
    ck_assert_mem_eq(o[1], ((int64_t[]){4, 5, 6}), 24);
    ck_assert_mem_eq(o[2], ((int64_t[]){7}), 8);
    free_outs(o, 3);
    qf_graph_free(g);

    /* not divisible without num_outputs; a split that does not sum up */
    g = new_graph(13);
    in[0] = add_value(g, QF_F32, 1, DIMS(7));
    ni = add_node(g, QF_OP_SPLIT, 1, in, 3, out);
    CK_STATUS(prep(g, ni), QF_ERR_INVALID);
    qf_graph_free(g);
    g = new_graph(13);
    in[0] = add_value(g, QF_F32, 1, DIMS(7));
    in[1] = const_i64(g, 2, DIMS(3, 3));
    ni = add_node(g, QF_OP_SPLIT, 2, in, 2, out);
    CK_STATUS(prep(g, ni), QF_ERR_INVALID);
    qf_graph_free(g);
}
END_TEST

/* ---- Shape, Gather, Cast, Constant --------------------------------------------------------- */

START_TEST(shape_ranges)
{
    const struct {
        bool has_start, has_end;
        int64_t start, end;
        int len;
        int64_t want[3];
    } cs[] = {
        {false, false, 0, 0, 3, {3, 4, 5}}, {true, false, 1, 0, 2, {4, 5}},   {false, true, 0, -1, 2, {3, 4}},
        {true, true, 1, 2, 1, {4}},         {true, false, -10, 0, 3, {3, 4, 5}}, {false, true, 0, 10, 3, {3, 4, 5}},
        {true, true, 2, 1, 0, {0}},
    };
    for (size_t k = 0; k < QF_ARRAY_LEN(cs); k++) {
        qf_graph *g = new_graph(15);
        int in[1] = {add_value(g, QF_F32, 3, DIMS(3, 4, 5))}, out[1];
        int ni = add_node(g, QF_OP_SHAPE, 1, in, 1, out);
        if (cs[k].has_start) set_int(&g->nodes[ni], "start", cs[k].start);
        if (cs[k].has_end) set_int(&g->nodes[ni], "end", cs[k].end);
        CK_OK(prep(g, ni));
        ck_assert_int_eq(g->values[out[0]].dtype, QF_I64);
        check_shape(&g->values[out[0]], 1, DIMS(cs[k].len));
        void *o[1];
        CK_OK(exec(g, ni, (const void *[]){NULL}, o, 1));
        if (cs[k].len) ck_assert_mem_eq(o[0], cs[k].want, (size_t)cs[k].len * 8);
        free_outs(o, 1);
        qf_graph_free(g);
    }
}
END_TEST

/* Range: lengths from ceil((limit - start) / delta), empty when it is negative;
 * each dtype; a non-constant input is "dynamic" (unsupported), delta 0 invalid. */
START_TEST(range_lengths_and_dtypes)
{
    const struct {
        int64_t start, limit, delta;
        int len;
        int64_t want[4];
    } cs[] = {{0, 4, 1, 4, {0, 1, 2, 3}}, {1, 5, 2, 2, {1, 3}}, {10, 6, -3, 2, {10, 7}}, {3, 3, 1, 0, {0}},
              {5, 1, 2, 0, {0}},          {-2, 1, 1, 3, {-2, -1, 0}}};
    for (size_t k = 0; k < QF_ARRAY_LEN(cs); k++) {
        for (int dt = 0; dt < 3; dt++) {
            qf_dtype t = dt == 0 ? QF_I64 : dt == 1 ? QF_I32 : QF_F32;
            qf_graph *g = new_graph(13);
            int in[3], out[1];
            const int64_t v[3] = {cs[k].start, cs[k].limit, cs[k].delta};
            for (int j = 0; j < 3; j++) {
                int32_t i32 = (int32_t)v[j];
                float f = (float)v[j];
                in[j] = add_const(g, t, 0, NULL, t == QF_I64 ? (const void *)&v[j] : t == QF_I32 ? (const void *)&i32
                                                                                                  : (const void *)&f);
            }
            int ni = add_node(g, QF_OP_RANGE, 3, in, 1, out);
            CK_OK(prep(g, ni));
            ck_assert_int_eq(g->values[out[0]].dtype, t);
            check_shape(&g->values[out[0]], 1, DIMS(cs[k].len));
            void *o[1];
            CK_OK(exec(g, ni, (const void *[]){NULL, NULL, NULL}, o, 1));
            for (int i = 0; i < cs[k].len; i++) {
                double got = t == QF_I64 ? (double)((int64_t *)o[0])[i] : t == QF_I32 ? ((int32_t *)o[0])[i]
                                                                                        : ((float *)o[0])[i];
                ck_assert_msg(got == (double)cs[k].want[i], "case %zu dtype %d element %d: %g", k, dt, i, got);
            }
            free_outs(o, 1);
            qf_graph_free(g);
        }
    }
    /* a fractional float step: ceil(2.5 / 1) = 3 elements */
    qf_graph *g = new_graph(13);
    const float fs[3] = {0.5f, 3.0f, 1.0f};
    int in[3] = {add_const(g, QF_F32, 0, NULL, &fs[0]), add_const(g, QF_F32, 0, NULL, &fs[1]),
                 add_const(g, QF_F32, 0, NULL, &fs[2])}, out[1];
    int ni = add_node(g, QF_OP_RANGE, 3, in, 1, out);
    CK_OK(prep(g, ni));
    check_shape(&g->values[out[0]], 1, DIMS(3));
    void *o[1];
    CK_OK(exec(g, ni, (const void *[]){NULL, NULL, NULL}, o, 1));
    check_f32(o[0], (const float[]){0.5f, 1.5f, 2.5f}, 3, 0);
    free_outs(o, 1);
    qf_graph_free(g);
    /* a graph input as the limit; a zero delta */
    const int64_t zero = 0, one = 1;
    g = new_graph(13);
    in[0] = add_const(g, QF_I64, 0, NULL, &zero);
    in[1] = add_value(g, QF_I64, 0, NULL);
    in[2] = add_const(g, QF_I64, 0, NULL, &one);
    ni = add_node(g, QF_OP_RANGE, 3, in, 1, out);
    CK_STATUS(prep(g, ni), QF_ERR_UNSUPPORTED);
    qf_graph_free(g);
    g = new_graph(13);
    in[0] = add_const(g, QF_I64, 0, NULL, &one);
    in[1] = add_const(g, QF_I64, 0, NULL, &one);
    in[2] = add_const(g, QF_I64, 0, NULL, &zero);
    ni = add_node(g, QF_OP_RANGE, 3, in, 1, out);
    CK_STATUS(prep(g, ni), QF_ERR_INVALID);
    qf_graph_free(g);
}
END_TEST

/* ConstantOfShape: float zeros by default, the value attribute's dtype and
 * bytes otherwise, a scalar for an empty shape, zero-sized dims allowed. */
START_TEST(constant_of_shape_values)
{
    for (int k = 0; k < 4; k++) {
        qf_graph *g = new_graph(13);
        const int64_t shapes[4][3] = {{2, 3, 0}, {4, 0, 0}, {0, 0, 0}, {2, 0, 5}};
        const int nd[4] = {2, 1, 0, 3};
        int in[1] = {const_i64(g, nd[k], shapes[k])}, out[1];
        int ni = add_node(g, QF_OP_CONSTANT_OF_SHAPE, 1, in, 1, out);
        qf_value *t = NULL;
        if (k > 0) {
            t = calloc(1, sizeof *t);
            t->dtype = k == 1 ? QF_I64 : QF_F32;
            t->ndim = 1;
            t->dims[0] = 1;
            t->data = malloc(8);
            if (k == 1) *(int64_t *)t->data = -7;
            else *(float *)t->data = 2.5f;
            attr(&g->nodes[ni], "value", QF_ATTR_TENSOR)->t = t;
        }
        CK_OK(prep(g, ni));
        const qf_value *y = &g->values[out[0]];
        ck_assert_int_eq(y->dtype, k == 1 ? QF_I64 : QF_F32);
        check_shape(y, nd[k], shapes[k]);
        void *o[1];
        CK_OK(exec(g, ni, (const void *[]){NULL}, o, 1));
        for (int64_t i = 0; i < qf_value_numel(y); i++) {
            double got = k == 1 ? (double)((int64_t *)o[0])[i] : ((float *)o[0])[i];
            ck_assert_msg(got == (k == 0 ? 0.0 : k == 1 ? -7.0 : 2.5), "case %d element %lld: %g", k, (long long)i, got);
        }
        free_outs(o, 1);
        qf_graph_free(g);
    }
    /* a negative dim; a two-element value */
    qf_graph *g = new_graph(13);
    int in[1] = {const_i64(g, 2, DIMS(2, -1))}, out[1];
    int ni = add_node(g, QF_OP_CONSTANT_OF_SHAPE, 1, in, 1, out);
    CK_STATUS(prep(g, ni), QF_ERR_INVALID);
    qf_graph_free(g);
    g = new_graph(13);
    in[0] = const_i64(g, 1, DIMS(3));
    ni = add_node(g, QF_OP_CONSTANT_OF_SHAPE, 1, in, 1, out);
    qf_value *t = calloc(1, sizeof *t);
    t->dtype = QF_F32;
    t->ndim = 1;
    t->dims[0] = 2;
    t->data = calloc(2, sizeof(float));
    attr(&g->nodes[ni], "value", QF_ATTR_TENSOR)->t = t;
    CK_STATUS(prep(g, ni), QF_ERR_INVALID);
    qf_graph_free(g);
}
END_TEST

START_TEST(gather_axes_and_indices)
{
    /* data (3,4,5) random, axis 1, indices (2,3) with negatives, as int32 and int64 */
    float x[60];
    fill_rand(x, 60);
    const int64_t idx64[6] = {0, -1, 3, -4, 2, 2};
    const int32_t idx32[6] = {0, -1, 3, -4, 2, 2};
    for (int k = 0; k < 2; k++) {
        qf_graph *g = new_graph(13);
        int in[2] = {add_value(g, QF_F32, 3, DIMS(3, 4, 5)), add_value(g, k ? QF_I32 : QF_I64, 2, DIMS(2, 3))};
        int out[1];
        int ni = add_node(g, QF_OP_GATHER, 2, in, 1, out);
        set_int(&g->nodes[ni], "axis", -2);
        CK_OK(prep(g, ni));
        check_shape(&g->values[out[0]], 4, DIMS(3, 2, 3, 5));
        void *o[1];
        CK_OK(exec(g, ni, (const void *[]){x, k ? (const void *)idx32 : (const void *)idx64}, o, 1));
        for (int64_t i = 0; i < 90; i++) {
            int64_t id[4];
            unflatten(i, 4, DIMS(3, 2, 3, 5), id);
            int64_t j = idx64[id[1] * 3 + id[2]];
            if (j < 0) j += 4;
            ck_assert_float_eq(((float *)o[0])[i], x[(id[0] * 4 + j) * 5 + id[3]]);
        }
        free_outs(o, 1);
        qf_graph_free(g);
    }
    /* int64 data along axis 0 with a scalar index: the dim disappears */
    qf_graph *g = new_graph(13);
    int in[2] = {add_value(g, QF_I64, 2, DIMS(3, 2)), add_const(g, QF_I64, 0, NULL, (int64_t[]){-1})}, out[1];
    int ni = add_node(g, QF_OP_GATHER, 2, in, 1, out);
    CK_OK(prep(g, ni));
    check_shape(&g->values[out[0]], 1, DIMS(2));
    void *o[1];
    CK_OK(exec(g, ni, (const void *[]){(int64_t[]){1, 2, 3, 4, 5, 6}}, o, 1));
    ck_assert_mem_eq(o[0], ((int64_t[]){5, 6}), 16);
    free_outs(o, 1);
    qf_graph_free(g);
    /* an index out of range fails at run time */
    g = new_graph(13);
    in[0] = add_value(g, QF_F32, 1, DIMS(10));
    in[1] = add_value(g, QF_I64, 1, DIMS(2));
    ni = add_node(g, QF_OP_GATHER, 2, in, 1, out);
    CK_OK(prep(g, ni));
    float x10[10] = {0};
    CK_STATUS(exec(g, ni, (const void *[]){x10, (int64_t[]){0, -11}}, o, 1), QF_ERR_INVALID);
    free_outs(o, 1);
    /* through the engine: the kernel's detail behind the file and node, once each */
    g->values[in[0]].flags |= QF_VALUE_INPUT;
    g->values[in[1]].flags |= QF_VALUE_INPUT;
    g->values[out[0]].flags |= QF_VALUE_OUTPUT;
    g->inputs = malloc(2 * sizeof(int));
    g->outputs = malloc(sizeof(int));
    g->inputs[0] = in[0], g->inputs[1] = in[1], g->outputs[0] = out[0];
    g->n_inputs = 2, g->n_outputs = 1;
    CK_OK(qf_graph_prepare(g, 0));
    qf_engine_opts opts = {.device = QF_DEVICE_CPU, .threads = 1};
    qf_engine *e;
    CK_OK(qf_engine_create(g, &opts, &e));
    memcpy(qf_engine_input(e, 1), (int64_t[]){0, -11}, 2 * sizeof(int64_t));
    ck_assert_int_eq(qf_engine_run(e), QF_ERR_INVALID);
    ck_assert_str_eq(qf_error_message(), "test: node n (Gather): index -11 out of range for dim 10");
    qf_engine_free(e);
    qf_graph_free(g);
}
END_TEST

/* Casts n elements of dtype `from` to ONNX type `to`; returns the output (free it). */
static void *cast_run(qf_dtype from, int to, int n, const void *x, qf_dtype want_dt)
{
    qf_graph *g = new_graph(13);
    int in[1] = {add_value(g, from, 1, DIMS(n))}, out[1];
    int ni = add_node(g, QF_OP_CAST, 1, in, 1, out);
    set_int(&g->nodes[ni], "to", to);
    CK_OK(prep(g, ni));
    ck_assert_int_eq(g->values[out[0]].dtype, want_dt);
    void *o[1];
    CK_OK(exec(g, ni, (const void *[]){x}, o, 1));
    qf_graph_free(g);
    return o[0];
}

/* Long f32 <-> f16 casts and an int8 -> f16 DequantizeLinear (pieces over
 * two threads, eight lanes at a time, a tail): every bit pattern's result is
 * the scalar conversion's, Inf, NaN and subnormals included. */
START_TEST(half_conversions_match_scalar)
{
    enum { N = 2 * 32768 + 13 };
    uint32_t *xf = malloc(N * sizeof *xf);
    uint16_t *xh = malloc(N * sizeof *xh);
    uint32_t r = 12345;
    for (int i = 0; i < N; i++) {
        r = r * 1664525u + 1013904223u;
        /* every fourth a value in half's range, the rest any bits */
        xf[i] = i % 4 ? r : qfi_f32_bits((float)((int32_t)(r >> 8) - (1 << 23)) * 1e-3f);
        xh[i] = (uint16_t)(r >> 16);
    }
    uint16_t *h = cast_run(QF_F32, 10, N, xf, QF_F16);
    float *f = cast_run(QF_F16, 1, N, xh, QF_F32);
    for (int i = 0; i < N; i++) {
        ck_assert_msg(h[i] == qf_f32_to_f16(qfi_bits_f32(xf[i])), "f32 %08x -> f16 at %d", xf[i], i);
        ck_assert_msg(qfi_f32_bits(f[i]) == qfi_f32_bits(qf_f16_to_f32(xh[i])), "f16 %04x -> f32 at %d", xh[i], i);
    }
    free(h);
    free(f);

    qf_graph *g = new_graph(13);
    const uint16_t scale = qf_f32_to_f16(0.0371f);
    const int8_t zero = -7;
    int in[3] = {add_value(g, QF_I8, 1, DIMS(N)), add_const(g, QF_F16, 0, NULL, &scale),
                 add_const(g, QF_I8, 0, NULL, &zero)},
        out[1];
    int ni = add_node(g, QF_OP_DEQUANTIZE_LINEAR, 3, in, 1, out);
    CK_OK(prep(g, ni));
    ck_assert_int_eq(g->values[out[0]].dtype, QF_F16);
    void *o[1];
    CK_OK(exec(g, ni, (const void *[]){xh}, o, 2));
    const int8_t *q = (const int8_t *)xh;
    for (int i = 0; i < N; i++) {
        const uint16_t want = qf_f32_to_f16(qfi_dequantize_i8_zp(q[i], qf_f16_to_f32(scale), zero));
        ck_assert_msg(((uint16_t *)o[0])[i] == want, "DequantizeLinear of %d at %d", q[i], i);
    }
    free_outs(o, 1);
    qf_graph_free(g);
    free(xf);
    free(xh);
}
END_TEST

/* FP16 and INT8 nodes that only move elements of one stored dtype and scale
 * run their kernels on the stored values (lowp.c); others keep the f32 view. */
START_TEST(element_movers_skip_the_f32_view)
{
    qf_graph *g = new_graph(13);
    int in[2] = {add_value(g, QF_I8, 2, DIMS(2, 3)), add_value(g, QF_I8, 2, DIMS(2, 5))}, out[1];
    int ni = add_node(g, QF_OP_CONCAT, 2, in, 1, out);
    qf_node *n = &g->nodes[ni];
    set_int(n, "axis", 1);
    CK_OK(prep(g, ni));
    n->precision = QF_PREC_INT8;
    for (int v = 0; v < g->n_values; v++) g->values[v].dtype = QF_I8, g->values[v].scale = 0.25f, g->values[v].zero_point = -3;
    ck_assert(qfi_node_f32_view(n));
    ck_assert(!qfi_cpu_lowp_wraps(g, n));
    const int8_t a[6] = {1, 2, 3, 4, 5, 6}, b[10] = {-1, -2, -3, -4, -5, -6, -7, -8, -9, -10};
    void *o[1];
    CK_OK(exec(g, ni, (const void *[]){a, b}, o, 1));
    ck_assert_mem_eq(o[0], ((int8_t[]){1, 2, 3, -1, -2, -3, -4, -5, 4, 5, 6, -6, -7, -8, -9, -10}), 16);
    free_outs(o, 1);
    g->values[in[1]].scale = 0.5f; /* another scale: requantized through the view */
    ck_assert(qfi_cpu_lowp_wraps(g, n));
    g->values[in[1]].scale = 0.25f;
    g->values[in[1]].dtype = QF_F16; /* mixed dtypes: through the view */
    ck_assert(qfi_cpu_lowp_wraps(g, n));
    g->values[in[1]].dtype = QF_I8;
    n->op = QF_OP_MAX_POOL; /* compares values: through the view */
    ck_assert(qfi_cpu_lowp_wraps(g, n));
    n->op = QF_OP_CONCAT;
    qf_graph_free(g);
}
END_TEST

/* FP16 and INT8 binary ops and half average pools run their kernels on the
 * stored values, a piece at a time (binary.c, global_pool.c): each result is
 * what the f32 view gives, widened exactly, computed in f32, rounded to half
 * or quantized at the output's scale. */
START_TEST(stored_binary_and_pool_match_the_f32_view)
{
    enum { N = 2, C = 3, H = 23, W = 31, S = H * W };
    uint16_t *x = malloc(N * C * S * sizeof *x), gate[N * C];
    int8_t *q = malloc(N * C * S);
    uint32_t r = 777;
    for (int i = 0; i < N * C * S; i++) {
        r = r * 1664525u + 1013904223u;
        x[i] = qf_f32_to_f16(((float)(r >> 8) / 16777216.0f - 0.5f) * 40.0f);
        q[i] = (int8_t)(r >> 24);
    }
    for (int i = 0; i < N * C; i++) gate[i] = qf_f32_to_f16(0.1f + 0.3f * (float)i);
    for (int out_i8 = 0; out_i8 < 2; out_i8++) {
        /* the squeeze-excitation gate: x (N,C,H,W) half times gate (N,C,1,1) half */
        qf_graph *g = new_graph(13);
        int in[2] = {add_value(g, QF_F32, 4, DIMS(N, C, H, W)), add_value(g, QF_F32, 4, DIMS(N, C, 1, 1))}, out[1];
        int ni = add_node(g, QF_OP_MUL, 2, in, 1, out);
        CK_OK(prep(g, ni)); /* shapes in f32, as an FP16 node's f32 view infers them; then the stored dtypes */
        g->values[in[0]].dtype = g->values[in[1]].dtype = QF_F16;
        g->nodes[ni].precision = QF_PREC_FP16;
        qf_value *y = &g->values[out[0]];
        y->dtype = out_i8 ? QF_I8 : QF_F16, y->scale = out_i8 ? 0.07f : 0.0f, y->zero_point = out_i8 ? -5 : 0;
        ck_assert(!qfi_cpu_lowp_wraps(g, &g->nodes[ni]));
        void *o[1];
        CK_OK(exec(g, ni, (const void *[]){x, gate}, o, 2));
        for (int i = 0; i < N * C * S; i++) {
            const float v = qf_f16_to_f32(x[i]) * qf_f16_to_f32(gate[i / S]);
            if (out_i8) ck_assert_int_eq(((int8_t *)o[0])[i], qfi_quantize_f32_zp(v, 0.07f, -5));
            else ck_assert_uint_eq(((uint16_t *)o[0])[i], qf_f32_to_f16(v));
        }
        free_outs(o, 1);
        qf_graph_free(g);
    }
    {
        /* INT8 Add of an int8 activation and a half one, broadcast along W */
        qf_graph *g = new_graph(13);
        int in[2] = {add_value(g, QF_F32, 4, DIMS(N, C, H, W)), add_value(g, QF_F32, 4, DIMS(1, 1, 1, W))}, out[1];
        int ni = add_node(g, QF_OP_ADD, 2, in, 1, out);
        CK_OK(prep(g, ni));
        g->values[in[0]].dtype = QF_I8, g->values[in[0]].scale = 0.02f, g->values[in[0]].zero_point = 3;
        g->values[in[1]].dtype = QF_F16;
        g->nodes[ni].precision = QF_PREC_INT8;
        g->values[out[0]].dtype = QF_F16;
        void *o[1];
        CK_OK(exec(g, ni, (const void *[]){q, x}, o, 1));
        for (int i = 0; i < N * C * S; i++)
            ck_assert_uint_eq(((uint16_t *)o[0])[i], qf_f32_to_f16(qfi_dequantize_i8_zp(q[i], 0.02f, 3) + qf_f16_to_f32(x[i % W])));
        free_outs(o, 1);
        qf_graph_free(g);
    }
    {
        /* an int64 product in an FP16 node (shape arithmetic): its own rows, not f32's */
        qf_graph *g = new_graph(13);
        int in[2] = {add_value(g, QF_I64, 1, DIMS(3)), add_value(g, QF_I64, 1, DIMS(3))}, out[1];
        int ni = add_node(g, QF_OP_MUL, 2, in, 1, out);
        CK_OK(prep(g, ni));
        g->nodes[ni].precision = QF_PREC_FP16;
        void *o[1];
        CK_OK(exec(g, ni, (const void *[]){(int64_t[]){3, -4, 1LL << 40}, (int64_t[]){7, 5, 3}}, o, 1));
        ck_assert_mem_eq(o[0], ((int64_t[]){21, -20, 3LL << 40}), 24);
        free_outs(o, 1);
        qf_graph_free(g);
    }
    {
        /* a half GlobalAveragePool: each plane's sum in double in position order */
        qf_graph *g = new_graph(13);
        int in[1] = {add_value(g, QF_F32, 4, DIMS(N, C, H, W))}, out[1];
        int ni = add_node(g, QF_OP_GLOBAL_AVERAGE_POOL, 1, in, 1, out);
        CK_OK(prep(g, ni));
        g->values[in[0]].dtype = QF_F16;
        g->nodes[ni].precision = QF_PREC_FP16;
        g->values[out[0]].dtype = QF_F16;
        ck_assert(!qfi_cpu_lowp_wraps(g, &g->nodes[ni]));
        void *o[1];
        CK_OK(exec(g, ni, (const void *[]){x}, o, 2));
        for (int p = 0; p < N * C; p++) {
            double sum = 0.0;
            for (int k = 0; k < S; k++) sum += qf_f16_to_f32(x[p * S + k]);
            ck_assert_uint_eq(((uint16_t *)o[0])[p], qf_f32_to_f16((float)(sum / S)));
        }
        free_outs(o, 1);
        /* an INT8 pool (MobileNetV2's, int8 in) stays with the wrapper, which calls
         * the kernel on the f32 view: f32 values, the f32 path */
        g->nodes[ni].precision = QF_PREC_INT8;
        g->values[in[0]].dtype = QF_I8, g->values[in[0]].scale = 0.05f;
        g->values[out[0]].dtype = QF_I8, g->values[out[0]].scale = 0.01f;
        ck_assert(qfi_cpu_lowp_wraps(g, &g->nodes[ni]));
        g->values[in[0]].dtype = g->values[out[0]].dtype = QF_F32; /* the view's labels */
        float *xf = malloc(N * C * S * sizeof *xf);
        for (int i = 0; i < N * C * S; i++) xf[i] = qf_f16_to_f32(x[i]);
        CK_OK(exec(g, ni, (const void *[]){xf}, o, 2));
        for (int p = 0; p < N * C; p++) {
            double sum = 0.0;
            for (int k = 0; k < S; k++) sum += xf[p * S + k];
            ck_assert_float_eq(((float *)o[0])[p], (float)(sum / S));
        }
        free(xf);
        free_outs(o, 1);
        qf_graph_free(g);
    }
    free(x);
    free(q);
}
END_TEST

START_TEST(cast_round_trips)
{
    const float xf[] = {0.0f, 1.0f, -2.5f, 0.1f, 65504.0f, 1e-7f, 3.75f, -0.0f};
    /* f32 -> f16 -> f32 keeps exactly the half-representable values */
    uint16_t *h = cast_run(QF_F32, 10, 8, xf, QF_F16);
    for (int i = 0; i < 8; i++) ck_assert_uint_eq(h[i], qf_f32_to_f16(xf[i]));
    float *back = cast_run(QF_F16, 1, 8, h, QF_F32);
    check_f32(back, (float[]){0, 1, -2.5f, qf_f16_to_f32(qf_f32_to_f16(0.1f)), 65504, qf_f16_to_f32(h[5]), 3.75f, 0},
              8, 0);
    ck_assert_float_eq_tol(back[3], 0.1f, 1e-4f);
    free(h);
    free(back);
    uint16_t *b = cast_run(QF_F32, 16, 8, xf, QF_BF16);
    back = cast_run(QF_BF16, 1, 8, b, QF_F32);
    for (int i = 0; i < 8; i++) ck_assert_float_eq(back[i], qf_bf16_to_f32(qf_f32_to_bf16(xf[i])));
    ck_assert_float_eq(back[2], -2.5f);
    free(b);
    free(back);

    /* float -> int truncates toward zero and saturates; NaN -> 0 */
    const float big[] = {2.9f, -2.9f, 300.0f, -300.0f, NAN, 1e20f, -1e20f, 127.5f};
    int32_t *i32 = cast_run(QF_F32, 6, 8, big, QF_I32);
    ck_assert_mem_eq(i32, ((int32_t[]){2, -2, 300, -300, 0, INT32_MAX, INT32_MIN, 127}), 32);
    free(i32);
    int8_t *i8 = cast_run(QF_F32, 3, 8, big, QF_I8);
    ck_assert_mem_eq(i8, ((int8_t[]){2, -2, 127, -128, 0, 127, -128, 127}), 8);
    free(i8);
    uint8_t *u8 = cast_run(QF_F32, 2, 8, big, QF_U8);
    ck_assert_mem_eq(u8, ((uint8_t[]){2, 0, 255, 0, 0, 255, 0, 127}), 8);
    free(u8);
    int64_t *i64 = cast_run(QF_F32, 7, 8, big, QF_I64);
    ck_assert_mem_eq(i64, ((int64_t[]){2, -2, 300, -300, 0, INT64_MAX, INT64_MIN, 127}), 64);
    free(i64);

    /* int64 -> int32 -> int64 round trip of in-range values; narrowing wraps */
    const int64_t iv[] = {0, -1, 123456789, INT32_MIN, INT32_MAX, 300, 1LL << 40, -129};
    i32 = cast_run(QF_I64, 6, 8, iv, QF_I32);
    i64 = cast_run(QF_I32, 7, 8, i32, QF_I64);
    ck_assert_mem_eq(i64, ((int64_t[]){0, -1, 123456789, INT32_MIN, INT32_MAX, 300, 0, -129}), 64);
    free(i32);
    free(i64);
    i8 = cast_run(QF_I64, 3, 8, iv, QF_I8);
    ck_assert_mem_eq(i8, ((int8_t[]){0, -1, 21, 0, -1, 44, 0, 127}), 8);
    free(i8);
    float *f = cast_run(QF_I64, 1, 8, iv, QF_F32);
    ck_assert_float_eq(f[2], 123456789.0f);
    ck_assert_float_eq(f[7], -129.0f);
    free(f);

    /* bool: non-zero (NaN too) is true; true is 1 */
    uint8_t *bl = cast_run(QF_F32, 9, 8, big, QF_BOOL);
    ck_assert_mem_eq(bl, ((uint8_t[]){1, 1, 1, 1, 1, 1, 1, 1}), 8);
    free(bl);
    bl = cast_run(QF_F32, 9, 8, xf, QF_BOOL);
    ck_assert_mem_eq(bl, ((uint8_t[]){0, 1, 1, 1, 1, 1, 1, 0}), 8);
    f = cast_run(QF_BOOL, 1, 8, bl, QF_F32);
    check_f32(f, (float[]){0, 1, 1, 1, 1, 1, 1, 0}, 8, 0);
    free(bl);
    free(f);

    /* string and double are refused by name */
    for (int k = 0; k < 2; k++) {
        qf_graph *g = new_graph(13);
        int in[1] = {add_value(g, QF_F32, 1, DIMS(2))}, out[1];
        int ni = add_node(g, QF_OP_CAST, 1, in, 1, out);
        set_int(&g->nodes[ni], "to", k ? 11 : 8);
        CK_STATUS(prep(g, ni), QF_ERR_UNSUPPORTED);
        ck_assert_ptr_nonnull(strstr(qf_error_message(), k ? "double" : "string"));
        qf_graph_free(g);
    }
}
END_TEST

START_TEST(constant_attributes)
{
    /* value: a tensor attribute */
    qf_graph *g = new_graph(13);
    int out[1];
    int ni = add_node(g, QF_OP_CONSTANT, 0, NULL, 1, out);
    qf_attr *a = attr(&g->nodes[ni], "value", QF_ATTR_TENSOR);
    a->t = calloc(1, sizeof *a->t);
    a->t->name = qfi_strdup("t");
    a->t->dtype = QF_I32;
    a->t->ndim = 2;
    a->t->dims[0] = 2;
    a->t->dims[1] = 2;
    a->t->data = malloc(16);
    memcpy(a->t->data, (int32_t[]){1, -2, 3, -4}, 16);
    a->t->flags = QF_VALUE_CONST;
    CK_OK(prep(g, ni));
    check_shape(&g->values[out[0]], 2, DIMS(2, 2));
    ck_assert_int_eq(g->values[out[0]].dtype, QF_I32);
    void *o[1];
    CK_OK(exec(g, ni, NULL, o, 1));
    ck_assert_mem_eq(o[0], ((int32_t[]){1, -2, 3, -4}), 16);
    free_outs(o, 1);
    qf_graph_free(g);

    /* value_float, value_ints */
    g = new_graph(13);
    ni = add_node(g, QF_OP_CONSTANT, 0, NULL, 1, out);
    set_float(&g->nodes[ni], "value_float", 2.5f);
    CK_OK(prep(g, ni));
    ck_assert_int_eq(g->values[out[0]].ndim, 0);
    CK_OK(exec(g, ni, NULL, o, 1));
    ck_assert_float_eq(*(float *)o[0], 2.5f);
    free_outs(o, 1);
    qf_graph_free(g);
    g = new_graph(13);
    ni = add_node(g, QF_OP_CONSTANT, 0, NULL, 1, out);
    set_ints(&g->nodes[ni], "value_ints", 3, DIMS(7, -8, 9));
    CK_OK(prep(g, ni));
    check_shape(&g->values[out[0]], 1, DIMS(3));
    ck_assert_int_eq(g->values[out[0]].dtype, QF_I64);
    CK_OK(exec(g, ni, NULL, o, 1));
    ck_assert_mem_eq(o[0], ((int64_t[]){7, -8, 9}), 24);
    free_outs(o, 1);
    qf_graph_free(g);

    /* no value, or a string value */
    g = new_graph(13);
    ni = add_node(g, QF_OP_CONSTANT, 0, NULL, 1, out);
    CK_STATUS(prep(g, ni), QF_ERR_INVALID);
    qf_graph_free(g);
    g = new_graph(13);
    ni = add_node(g, QF_OP_CONSTANT, 0, NULL, 1, out);
    set_string(g, ni, "value_string", "x");
    CK_STATUS(prep(g, ni), QF_ERR_UNSUPPORTED);
    qf_graph_free(g);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ops_tensor");
    TCase *tc = tcase_create("ops");
    tcase_add_test(tc, binary_broadcasting);
    tcase_add_test(tc, binary_hand_values_and_errors);
    tcase_add_test(tc, binary_integers);
    tcase_add_test(tc, unary_ops);
    tcase_add_test(tc, clip_bounds);
    tcase_add_test(tc, unary_threads_and_dtypes);
    tcase_add_test(tc, concat_axes);
    tcase_add_test(tc, reshape_family);
    tcase_add_test(tc, transpose_all_perms);
    tcase_add_test(tc, pad_modes);
    tcase_add_test(tc, resize_nearest_and_linear);
    tcase_add_test(tc, resize_legacy_and_unsupported);
    tcase_add_test(tc, slice_clamping_and_steps);
    tcase_add_test(tc, split_parts);
    tcase_add_test(tc, shape_ranges);
    tcase_add_test(tc, range_lengths_and_dtypes);
    tcase_add_test(tc, constant_of_shape_values);
    tcase_add_test(tc, gather_axes_and_indices);
    tcase_add_test(tc, cast_round_trips);
    tcase_add_test(tc, half_conversions_match_scalar);
    tcase_add_test(tc, element_movers_skip_the_f32_view);
    tcase_add_test(tc, stored_binary_and_pool_match_the_f32_view);
    tcase_add_test(tc, constant_attributes);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
