/* Tests of lib/onnx_import.c: the malformed-model corpus in tests/bad/ (made by
 * tests/bad/make_bad.py, or found by tests/fuzz) must fail, imported and
 * prepared, with the right status and a one-line message naming the file and
 * the node or tensor; seed.onnx must load and run; TensorProto decoding of
 * every encoding; and truncation / bit-flip fuzzing (no crash). */
#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>
#include "onnx_internal.h"
#include "testutil.h"

#define BAD_DIR QF_SRCDIR "/tests/bad"

static char tmpdir[256];

static void make_tmpdir(void)
{
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/qf_onnx_import_XXXXXX", base);
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void remove_tmp(const char *name)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    unlink(p);
}

static void write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

/* ---- the bad corpus ---------------------------------------------------------------- */

typedef struct bad_case {
    const char *file;
    qf_status status;
    const char *names[3]; /* must all appear in the message (the file name always must) */
} bad_case;

static const bad_case bad_cases[] = {
    {"empty.onnx", QF_ERR_FORMAT, {"empty"}},
    {"text.onnx", QF_ERR_FORMAT, {NULL}},
    {"truncated.onnx", QF_ERR_FORMAT, {NULL}},
    {"bitflip.onnx", QF_ERR_FORMAT, {NULL}},
    {"huge_raw_len.onnx", QF_ERR_FORMAT, {NULL}},
    {"huge_repeated.onnx", QF_ERR_FORMAT, {NULL}},
    {"absurd_dims.onnx", QF_ERR_FORMAT, {"conv1.weight", "overflows"}},
    {"too_many_dims.onnx", QF_ERR_UNSUPPORTED, {"conv1.bias", "9 dims"}},
    {"count_mismatch.onnx", QF_ERR_FORMAT, {"fc.bias", "1000000000"}},
    {"missing_init.onnx", QF_ERR_INVALID, {"node conv1", "conv1.weight", "not produced"}},
    {"unknown_op.onnx", QF_ERR_UNSUPPORTED, {"node mystery", "unsupported op FancyPool"}},
    {"other_domain.onnx", QF_ERR_UNSUPPORTED, {"node custom_relu", "com.example"}},
    {"dup_output.onnx", QF_ERR_INVALID, {"node second_writer", "r1"}},
    {"ext_missing.onnx", QF_ERR_IO, {"conv1.bias", "ext_missing_weights.bin"}},
    {"ext_offset.onnx", QF_ERR_FORMAT, {"conv1.bias", "offset 4096"}},
    {"ext_dotdot.onnx", QF_ERR_INVALID, {"conv1.bias", "../bad/ext_offset.bin"}},
    {"opset99.onnx", QF_ERR_UNSUPPORTED, {"opset 99"}},
    {"opset5.onnx", QF_ERR_UNSUPPORTED, {"opset 5"}},
    {"opset6_bn_training.onnx", QF_ERR_UNSUPPORTED, {"node bn_train", "is_test=0"}},
    {"opset6_prelu.onnx", QF_ERR_UNSUPPORTED, {"node legacy_prelu", "slope"}},
    {"f64_init.onnx", QF_ERR_UNSUPPORTED, {"fc.bias", "double"}},
    {"graph_attr.onnx", QF_ERR_UNSUPPORTED, {"node flatten", "attribute body"}},
    /* found by tests/fuzz/fuzz_onnx: pads of 2^55 overflowed the output's size before its bound was checked */
    {"pad_overflow.onnx", QF_ERR_INVALID, {"node Pad_1 (Pad)", "pads 1, 34339947158700032 of dim 2 are out of range"}},
    /* and split sizes of 2^62 overflowed their sum */
    {"split_overflow.onnx", QF_ERR_INVALID, {"node Split_3 (Split)", "split[0] = 7308626908926665473"}},
    /* and a graph input named by 20 line breaks: the message must stay one line */
    {"newline_in_name.onnx", QF_ERR_FORMAT, {"input ???????????????????? declares"}},
    /* and a Resize to 83,886,090 positions of few bytes each asked for a 2 GB tap table */
    {"resize_huge_taps.onnx", QF_ERR_INVALID, {"node Resize_0 (Resize)", "83886090 positions in all"}},
    /* and a Reshape whose data input is absent ("") read values[-1] while fixing its batch (ASan) */
    {"reshape_missing_data.onnx", QF_ERR_INVALID, {"node Reshape_12 (Reshape)", "missing input"}},
    /* and a DequantizeLinear with its scale omitted ("") left, once the Q/DQ pairs were folded, an Add
     * reading a value nothing computed (UBSan: a null pointer) */
    {"qdq_missing_scale.onnx", QF_ERR_INVALID, {"node DequantizeLinear_7 (DequantizeLinear)", "without its scale"}},
    /* models quantized elsewhere (qdq_seed.onnx broken one way each) */
    {"qdq_zero_scale.onnx", QF_ERR_INVALID, {"node x_q (QuantizeLinear)", "scale x_scale is 0"}},
    {"qdq_bias_zero_point.onnx", QF_ERR_UNSUPPORTED, {"node b_dq (DequantizeLinear)", "b_zero_point is not 0"}},
    {"qdq_zero_point_16bit.onnx", QF_ERR_UNSUPPORTED, {"y_zero_point", "uint16"}},
    {"qdq_float_dequantize.onnx", QF_ERR_UNSUPPORTED, {"node x_dq (DequantizeLinear)", "input x has dtype f32"}},
    {"qdq_axis_length.onnx", QF_ERR_INVALID, {"node w_dq (DequantizeLinear)", "w_scale has 3 elements"}},
    {"qop_unsupported.onnx", QF_ERR_UNSUPPORTED, {"node qsoftmax", "QLinearSoftmax of domain com.microsoft"}},
};

/* A failure's message starts with the model's path and names it, and a node,
 * once; no part of the context is empty. */
static void assert_context_once(const char *what, const char *msg, const char *path)
{
    ck_assert_msg(strncmp(msg, path, strlen(path)) == 0, "%s: message does not start with the path: %s", what, msg);
    const char *node = strstr(msg, ": node ");
    ck_assert_msg(!strstr(msg + 1, path) && !(node && strstr(node + 1, ": node ")) && !strstr(msg, ": :"),
                  "%s: context repeated: %s", what, msg);
}

START_TEST(bad_corpus)
{
    const bad_case *c = &bad_cases[_i];
    char path[512];
    snprintf(path, sizeof path, "%s/%s", BAD_DIR, c->file);
    qf_graph *g = (qf_graph *)&g; /* must be reset to NULL */
    qf_load_opts lo = {.batch = 1};
    qf_status st = qf_model_load(path, &lo, &g); /* import, then the passes */
    const char *msg = qf_error_message();
    ck_assert_msg(st == c->status, "%s: status %s, expected %s (%s)", c->file, qf_status_name(st),
                  qf_status_name(c->status), msg);
    ck_assert_ptr_null(g);
    assert_context_once(c->file, msg, path);
    for (int k = 0; k < 3 && c->names[k]; k++)
        ck_assert_msg(strstr(msg, c->names[k]), "%s: message lacks '%s': %s", c->file, c->names[k], msg);
    for (const char *p = msg; *p; p++) ck_assert_msg((unsigned char)*p >= 0x20, "%s: a control character in: %s", c->file, msg);
}
END_TEST

/* qdq_seed.onnx (uint8 activations with zero points 131 and 3, per-channel
 * int8 weights, an int32 bias): one INT8 Conv with the Relu fused, the
 * model's parameters kept (uint8 shifted by -128), the input's zero point in
 * the bias; its output is the Q/DQ graph's as qforge runs it as is, in float,
 * but for a rare tie the two sums round differently. */
START_TEST(qdq_seed_imports)
{
    qf_load_opts lo = {.batch = 2};
    qf_graph *g, *as_is;
    OK(qf_model_load(BAD_DIR "/qdq_seed.onnx", &lo, &g));
    OK(qf_model_load(BAD_DIR "/qdq_seed.onnx", &lo, &as_is));
    ck_assert(qf_graph_has_qdq(g));
    qf_quant_summary sum;
    OK(qf_quantize(g, NULL, NULL, &sum));
    ck_assert(sum.from_model);
    ck_assert_int_eq(sum.nodes[QF_PREC_INT8], 1);
    ck_assert_int_eq(sum.fused, 1);
    const qf_node *conv = NULL;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == QF_OP_CONV) conv = &g->nodes[i];
    ck_assert_ptr_nonnull(conv);
    ck_assert_int_eq(conv->precision, QF_PREC_INT8);
    ck_assert_int_eq(conv->act, QF_ACT_RELU);
    const qf_value *x = qfi_in(g, conv, 0), *w = qfi_in(g, conv, 1), *b = qfi_in(g, conv, 2), *y = qfi_out(g, conv, 0);
    ck_assert(x->scale == 0.02f && x->zero_point == 131 - 128);
    ck_assert(y->scale == 0.05f && y->zero_point == 3 - 128);
    /* bias: the model's int32 (its scale is x_scale * w_scale exactly) less 3 * each channel's weight sum */
    qf_graph *raw;
    OK(qf_onnx_load(BAD_DIR "/qdq_seed.onnx", &raw));
    const qf_value *bq = &raw->values[qf_graph_find_value(raw, "b_q")];
    ck_assert(bq->dtype == QF_I32 && bq->data);
    for (int c = 0; c < 4; c++) {
        int32_t wsum = 0;
        for (int k = 0; k < 27; k++) wsum += ((const int8_t *)w->data)[c * 27 + k];
        ck_assert_int_eq(((const int32_t *)b->data)[c], ((const int32_t *)bq->data)[c] - 3 * wsum);
    }
    float *xin = random_input(g, 3, -3.0f, 3.0f);
    float *yi = run(g, xin, NULL, NULL), *ya = run(as_is, xin, NULL, NULL);
    int same = 0, n = 2 * 4 * 8 * 8;
    for (int i = 0; i < n; i++) {
        same += yi[i] == ya[i];
        ck_assert_msg(fabsf(yi[i] - ya[i]) <= 0.05f * 1.0001f, "%d: %g vs %g", i, yi[i], ya[i]);
    }
    ck_assert_msg(same >= n - 2, "%d of %d outputs differ", n - same, n);
    free(xin), free(yi), free(ya);
    qf_graph_free(raw);
    qf_graph_free(as_is);
    qf_graph_free(g);
}
END_TEST

START_TEST(cycle_rejected_by_prepare)
{
    qf_graph *g;
    const char *path = BAD_DIR "/cycle.onnx";
    ck_assert_int_eq(qf_onnx_load(path, &g), QF_OK); /* the importer does not sort */
    ck_assert_int_eq(g->n_nodes, 2);
    qf_status st = qf_graph_prepare(g, 0);
    const char *msg = qf_error_message();
    ck_assert_msg(st == QF_ERR_INVALID, "status %s: %s", qf_status_name(st), msg);
    ck_assert_msg(strstr(msg, "cycle.onnx") && (strstr(msg, "cyc_a") || strstr(msg, "cyc_b")), "%s", msg);
    qf_graph_free(g);
}
END_TEST

/* ---- the good model ------------------------------------------------------------------ */

static double sum_f32(const qf_value *v)
{
    double s = 0;
    for (int64_t i = 0; i < qf_value_numel(v); i++) s += ((const float *)v->data)[i];
    return s;
}

START_TEST(seed_loads)
{
    qf_graph *g;
    ck_assert_int_eq(qf_onnx_load(BAD_DIR "/seed.onnx", &g), QF_OK);
    ck_assert_int_eq(g->opset, 13);
    ck_assert_int_eq(g->n_nodes, 6);
    ck_assert_int_eq(g->n_inputs, 1);
    ck_assert_int_eq(g->n_outputs, 1);

    /* the input keeps its declared shape, the symbolic batch as -1 */
    const qf_value *x = &g->values[g->inputs[0]];
    ck_assert_str_eq(x->name, "x");
    ck_assert_int_eq(x->dtype, QF_F32);
    ck_assert_int_eq(x->ndim, 4);
    ck_assert_int_eq(x->dims[0], -1);
    ck_assert_int_eq(x->dims[1], 3);
    ck_assert_int_eq(x->dims[3], 8);
    ck_assert_uint_eq(x->flags, QF_VALUE_INPUT);
    ck_assert_str_eq(g->values[g->outputs[0]].name, "y");
    ck_assert(g->values[g->outputs[0]].flags & QF_VALUE_OUTPUT);

    /* node names: given, or generated as OpType_<index> */
    ck_assert_str_eq(g->nodes[0].name, "conv1");
    ck_assert_str_eq(g->nodes[1].name, "Relu_1");
    ck_assert_int_eq(g->nodes[1].op, QF_OP_RELU);

    /* conv1: inputs wired to the input and the initializers, attributes converted */
    const qf_node *conv = node_named(g, "conv1");
    ck_assert_ptr_nonnull(conv);
    ck_assert_int_eq(conv->op, QF_OP_CONV);
    ck_assert_int_eq(conv->n_in, 3);
    ck_assert_int_eq(conv->in[0], g->inputs[0]);
    const qf_value *w = &g->values[conv->in[1]], *b = &g->values[conv->in[2]];
    ck_assert_str_eq(w->name, "conv1.weight");
    ck_assert(w->flags & QF_VALUE_CONST);
    ck_assert_int_eq(w->ndim, 4);
    ck_assert_int_eq(w->dims[0], 4);
    /* raw_data (little-endian) decoded: values and sums written by make_bad.py */
    ck_assert_float_eq_tol(((const float *)w->data)[0], 0.09762701f, 1e-7f);
    ck_assert_float_eq_tol(((const float *)w->data)[1], 0.43037874f, 1e-7f);
    ck_assert_double_eq_tol(sum_f32(w), -4.1724094, 1e-5);
    ck_assert_double_eq_tol(sum_f32(b), 0.9387294, 1e-6);
    int nk;
    const int64_t *ks = qfi_attr_ints(conv, "kernel_shape", &nk);
    ck_assert_int_eq(nk, 2);
    ck_assert_int_eq(ks[0], 3);
    const int64_t *pads = qfi_attr_ints(conv, "pads", &nk);
    ck_assert_int_eq(nk, 4);
    ck_assert_int_eq(pads[3], 1);
    ck_assert_int_eq(qfi_attr_int(node_named(g, "flatten"), "axis", -1), 1);
    ck_assert_int_eq(qfi_attr_int(node_named(g, "fc"), "transB", 0), 1);

    /* fc.weight came through float_data rather than raw_data */
    const qf_node *fc = node_named(g, "fc");
    const qf_value *fw = &g->values[fc->in[1]];
    ck_assert_str_eq(fw->name, "fc.weight");
    ck_assert_float_eq_tol(((const float *)fw->data)[0], 0.39895856f, 1e-7f);
    ck_assert_double_eq_tol(sum_f32(fw), 6.3531204, 1e-5);
    ck_assert_double_eq_tol(sum_f32(&g->values[fc->in[2]]), -0.4927557, 1e-6);
    qf_graph_free(g);
}
END_TEST

/* Prepares and runs a loaded seed model; the expected softmax is
 * onnxruntime's for x[i] = sin(0.37 i). */
static void check_seed_output(qf_graph *g)
{
    static const float want[10] = {0.0268622f, 0.2814448f, 0.0765029f, 0.0361628f, 0.0726246f,
                                   0.0317559f, 0.0651077f, 0.0463366f, 0.1834614f, 0.1797412f};
    ck_assert_msg(qf_graph_prepare(g, 0) == QF_OK, "%s", qf_error_message());
    qf_engine *e;
    qf_engine_opts opts = {.device = QF_DEVICE_CPU, .threads = 1};
    ck_assert_msg(qf_engine_create(g, &opts, &e) == QF_OK, "%s", qf_error_message());
    float *x = qf_engine_input(e, 0);
    for (int i = 0; i < 192; i++) x[i] = (float)sin(0.37 * i);
    ck_assert_msg(qf_engine_run(e) == QF_OK, "%s", qf_error_message());
    const float *y = qf_engine_output(e, 0);
    for (int i = 0; i < 10; i++) ck_assert_float_eq_tol(y[i], want[i], 2e-6f);
    qf_engine_free(e);
}

START_TEST(seed_runs)
{
    qf_graph *g;
    ck_assert_int_eq(qf_onnx_load(BAD_DIR "/seed.onnx", &g), QF_OK);
    check_seed_output(g);
    qf_graph_free(g);
}
END_TEST

/* The seed at opset 6, with Gemm-6's broadcast attribute: read as opset 7,
 * the attribute gone, the same numbers. */
START_TEST(opset6_read_as_7)
{
    qf_graph *g;
    ck_assert_msg(qf_onnx_load(BAD_DIR "/opset6_seed.onnx", &g) == QF_OK, "%s", qf_error_message());
    ck_assert_int_eq(g->opset, 7);
    const qf_node *fc = node_named(g, "fc");
    ck_assert_ptr_nonnull(fc);
    ck_assert_ptr_null(qfi_attr_find(fc, "broadcast"));
    ck_assert_int_eq(qfi_attr_int(fc, "transB", 0), 1);
    check_seed_output(g);
    qf_graph_free(g);
}
END_TEST

/* ---- the shape of an error line ------------------------------------------------------ */

/* Writes the seed with one node's attribute edited (its first value) to
 * tmpdir/name, whose path goes to `path`. */
static void write_seed_edited(const char *name, const char *node, const char *attr, int64_t value, char *path,
                              size_t pathlen)
{
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(qfi_read_file(BAD_DIR "/seed.onnx", 1 << 20, &buf, &len), QF_OK);
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, len, buf);
    ck_assert_ptr_nonnull(m);
    free(buf);
    Onnx__AttributeProto *found = NULL;
    for (size_t i = 0; i < m->graph->n_node; i++) {
        const Onnx__NodeProto *np = m->graph->node[i];
        if (!np->name || strcmp(np->name, node) != 0) continue;
        for (size_t k = 0; k < np->n_attribute; k++)
            if (strcmp(np->attribute[k]->name, attr) == 0) found = np->attribute[k];
    }
    ck_assert_msg(found, "seed has no attribute %s on node %s", attr, node);
    if (found->n_ints) {
        found->ints[0] = value;
    } else {
        found->has_i = 1;
        found->i = value;
    }
    len = onnx__model_proto__get_packed_size(m);
    buf = malloc(len);
    ck_assert_uint_eq(onnx__model_proto__pack(m, buf), len);
    onnx__model_proto__free_unpacked(m, NULL);
    snprintf(path, pathlen, "%s/%s", tmpdir, name);
    write_file(path, buf, len);
    free(buf);
}

/* Loads (and prepares) the seed with one attribute edited: the load, or
 * else the prepare, fails with status `want` and the message "PATH: line". */
static void expect_edit_fails(const char *node, const char *attr, int64_t value, bool at_load, qf_status want,
                              const char *line)
{
    char path[512], msg[768];
    write_seed_edited("edited.onnx", node, attr, value, path, sizeof path);
    qf_graph *g = NULL;
    qf_status st = qf_onnx_load(path, &g);
    if (!at_load) {
        ck_assert_msg(st == QF_OK, "%s", qf_error_message());
        st = qf_graph_prepare(g, 0);
    }
    ck_assert_msg(st == want, "status %s: %s", qf_status_name(st), qf_error_message());
    snprintf(msg, sizeof msg, "%s: %s", path, line);
    ck_assert_str_eq(qf_error_message(), msg);
    qf_graph_free(g);
    remove_tmp("edited.onnx");
}

/* One rule for the context: "FILE: node NAME (Op): detail", each part once,
 * whichever stage finds the fault (the importer, an op's parser at load, shape
 * inference at prepare). */
START_TEST(error_line_shape)
{
    make_tmpdir();
    expect_edit_fails("flatten", "axis", 9, false, QF_ERR_INVALID,
                      "node flatten (Flatten): axis 9 out of range for rank 4");
    expect_edit_fails("conv1", "kernel_shape", 5, false, QF_ERR_INVALID,
                      "node conv1 (Conv): kernel_shape[0] = 5 but the weights say 3");
    expect_edit_fails("conv1", "pads", -2, true, QF_ERR_INVALID, "node conv1 (Conv): pads[0] = -2 is out of range");
    rmdir(tmpdir);

    qf_graph *g = NULL;
    char want[768];

    /* the importer's own checks, before any op parser runs */
    const char *missing = BAD_DIR "/missing_init.onnx";
    ck_assert_int_eq(qf_onnx_load(missing, &g), QF_ERR_INVALID);
    snprintf(want, sizeof want,
             "%s: node conv1 (Conv): input conv1.weight is not produced by any node (missing initializer?)", missing);
    ck_assert_str_eq(qf_error_message(), want);
}
END_TEST

/* ---- TensorProto decoding -------------------------------------------------------------- */

static Onnx__TensorProto tensor(const char *name, int type, int ndim, int64_t *dims)
{
    Onnx__TensorProto t = ONNX__TENSOR_PROTO__INIT;
    t.name = (char *)name;
    t.has_data_type = 1;
    t.data_type = type;
    t.n_dims = (size_t)ndim;
    t.dims = dims;
    return t;
}

static void value_clear(qf_value *v)
{
    free(v->name);
    free(v->data);
}

START_TEST(decode_typed_fields)
{
    qf_value v;
    int64_t d2[] = {2}, d3[] = {3}, d23[] = {2, 3};

    /* float16 bits in int32_data */
    int32_t h[] = {0x3c00, 0xc000};
    Onnx__TensorProto t = tensor("h", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16, 1, d2);
    t.n_int32_data = 2;
    t.int32_data = h;
    ck_assert_int_eq(qfi_onnx_tensor_decode(&t, NULL, &v), QF_OK);
    ck_assert_int_eq(v.dtype, QF_F16);
    ck_assert_float_eq(qf_f16_to_f32(((uint16_t *)v.data)[1]), -2.0f);
    ck_assert_str_eq(v.name, "h");
    ck_assert_uint_eq(v.flags, QF_VALUE_CONST);
    value_clear(&v);

    /* int8, uint8, bool: one element per int32 */
    int32_t i8[] = {-5, 7, -128};
    t = tensor("i8", ONNX__TENSOR_PROTO__DATA_TYPE__INT8, 1, d3);
    t.n_int32_data = 3;
    t.int32_data = i8;
    ck_assert_int_eq(qfi_onnx_tensor_decode(&t, NULL, &v), QF_OK);
    ck_assert_int_eq(((int8_t *)v.data)[0], -5);
    ck_assert_int_eq(((int8_t *)v.data)[2], -128);
    value_clear(&v);
    i8[1] = 300; /* out of range for int8 */
    ck_assert_int_eq(qfi_onnx_tensor_decode(&t, NULL, &v), QF_ERR_FORMAT);
    ck_assert(strstr(qf_error_message(), "tensor i8"));

    int32_t bools[] = {0, 1, 1};
    t = tensor("mask", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 1, d3);
    t.n_int32_data = 3;
    t.int32_data = bools;
    ck_assert_int_eq(qfi_onnx_tensor_decode(&t, NULL, &v), QF_OK);
    ck_assert_int_eq(v.dtype, QF_BOOL);
    ck_assert_int_eq(((uint8_t *)v.data)[2], 1);
    value_clear(&v);

    /* int64_data and a 2-D shape */
    int64_t i64[] = {1, -2, 3, INT64_MAX, 5, INT64_MIN};
    t = tensor("shape", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 2, d23);
    t.n_int64_data = 6;
    t.int64_data = i64;
    ck_assert_int_eq(qfi_onnx_tensor_decode(&t, NULL, &v), QF_OK);
    ck_assert_int_eq(v.ndim, 2);
    ck_assert_int_eq(v.dims[1], 3);
    ck_assert(((int64_t *)v.data)[3] == INT64_MAX && ((int64_t *)v.data)[5] == INT64_MIN);
    value_clear(&v);

    /* raw_data is little-endian whatever the host */
    uint8_t raw[] = {0x01, 0x02, 0x03, 0x04, 0xff, 0xff, 0xff, 0xff};
    t = tensor("r", ONNX__TENSOR_PROTO__DATA_TYPE__INT32, 1, d2);
    t.has_raw_data = 1;
    t.raw_data.len = sizeof raw;
    t.raw_data.data = raw;
    ck_assert_int_eq(qfi_onnx_tensor_decode(&t, NULL, &v), QF_OK);
    ck_assert_int_eq(((int32_t *)v.data)[0], 0x04030201);
    ck_assert_int_eq(((int32_t *)v.data)[1], -1);
    value_clear(&v);
    t.raw_data.len = 7; /* one byte short */
    ck_assert_int_eq(qfi_onnx_tensor_decode(&t, NULL, &v), QF_ERR_FORMAT);

    /* a scalar (no dims) holds one element; a zero-size dim holds none */
    float one = 1.5f;
    t = tensor("s", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 0, NULL);
    t.n_float_data = 1;
    t.float_data = &one;
    ck_assert_int_eq(qfi_onnx_tensor_decode(&t, NULL, &v), QF_OK);
    ck_assert_int_eq(v.ndim, 0);
    ck_assert_float_eq(*(float *)v.data, 1.5f);
    value_clear(&v);
    int64_t d0[] = {0, 4};
    t = tensor("empty", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, d0);
    ck_assert_int_eq(qfi_onnx_tensor_decode(&t, NULL, &v), QF_OK);
    ck_assert_ptr_nonnull(v.data); /* constants always carry data */
    value_clear(&v);
}
END_TEST

START_TEST(decode_rejects)
{
    qf_value v;
    int64_t d2[] = {2}, neg[] = {2, -1};
    int32_t vals[] = {1, 2};
    Onnx__TensorProto t = tensor("u16", ONNX__TENSOR_PROTO__DATA_TYPE__UINT16, 1, d2);
    t.n_int32_data = 2;
    t.int32_data = vals;
    ck_assert_int_eq(qfi_onnx_tensor_decode(&t, NULL, &v), QF_ERR_UNSUPPORTED);
    ck_assert(strstr(qf_error_message(), "tensor u16") && strstr(qf_error_message(), "uint16"));
    t = tensor("dbl", ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE, 1, d2);
    ck_assert_int_eq(qfi_onnx_tensor_decode(&t, NULL, &v), QF_ERR_UNSUPPORTED);
    ck_assert(strstr(qf_error_message(), "tensor dbl") && strstr(qf_error_message(), "double"));
    t = tensor("untyped", 0, 1, d2);
    ck_assert_int_eq(qfi_onnx_tensor_decode(&t, NULL, &v), QF_ERR_FORMAT);
    t = tensor("neg", ONNX__TENSOR_PROTO__DATA_TYPE__INT32, 2, neg);
    ck_assert_int_eq(qfi_onnx_tensor_decode(&t, NULL, &v), QF_ERR_FORMAT);
    ck_assert(strstr(qf_error_message(), "tensor neg"));
    /* the right count in the wrong field */
    t = tensor("wrong_field", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, d2);
    t.n_int32_data = 2;
    t.int32_data = vals;
    ck_assert_int_eq(qfi_onnx_tensor_decode(&t, NULL, &v), QF_ERR_FORMAT);
    ck_assert(strstr(qf_error_message(), "float_data"));
}
END_TEST

static Onnx__TensorProto external_tensor(const char *name, int64_t *dims, Onnx__StringStringEntryProto *kv,
                                         Onnx__StringStringEntryProto **kvp, int nkv)
{
    Onnx__TensorProto t = tensor(name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, dims);
    t.has_data_location = 1;
    t.data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    for (int i = 0; i < nkv; i++) kvp[i] = &kv[i];
    t.n_external_data = (size_t)nkv;
    t.external_data = kvp;
    return t;
}

START_TEST(decode_external)
{
    make_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/weights.bin", tmpdir);
    float data[6] = {-1, -1, 1.0f, 2.0f, 3.0f, 4.0f}; /* the tensor is bytes 8..23 */
    write_file(path, data, sizeof data);

    qf_value v;
    int64_t d4[] = {4};
    Onnx__StringStringEntryProto kv[3] = {ONNX__STRING_STRING_ENTRY_PROTO__INIT, ONNX__STRING_STRING_ENTRY_PROTO__INIT,
                                          ONNX__STRING_STRING_ENTRY_PROTO__INIT};
    Onnx__StringStringEntryProto *kvp[3];
    kv[0].key = "location", kv[0].value = "weights.bin";
    kv[1].key = "offset", kv[1].value = "8";
    kv[2].key = "length", kv[2].value = "16";
    Onnx__TensorProto t = external_tensor("ext_w", d4, kv, kvp, 3);
    ck_assert_msg(qfi_onnx_tensor_decode(&t, tmpdir, &v) == QF_OK, "%s", qf_error_message());
    ck_assert_float_eq(((float *)v.data)[0], 1.0f);
    ck_assert_float_eq(((float *)v.data)[3], 4.0f);
    value_clear(&v);

    /* without a length the data runs to the end of the file */
    t = external_tensor("ext_w", d4, kv, kvp, 2);
    ck_assert_int_eq(qfi_onnx_tensor_decode(&t, tmpdir, &v), QF_OK);
    value_clear(&v);

    /* a length that disagrees with the dims, one past the file, a bad number */
    kv[2].value = "12";
    t = external_tensor("ext_w", d4, kv, kvp, 3);
    ck_assert_int_eq(qfi_onnx_tensor_decode(&t, tmpdir, &v), QF_ERR_FORMAT);
    kv[1].value = "12", kv[2].value = "16";
    ck_assert_int_eq(qfi_onnx_tensor_decode(&t, tmpdir, &v), QF_ERR_FORMAT);
    ck_assert(strstr(qf_error_message(), "tensor ext_w") && strstr(qf_error_message(), "past the end"));
    kv[1].value = "-8";
    ck_assert_int_eq(qfi_onnx_tensor_decode(&t, tmpdir, &v), QF_ERR_FORMAT);
    kv[1].value = "99999999999999999999";
    ck_assert_int_eq(qfi_onnx_tensor_decode(&t, tmpdir, &v), QF_ERR_FORMAT);
    kv[1].value = "8";

    /* locations that leave the folder, and no folder at all */
    const char *evil[] = {path, "../weights.bin", "sub/../../weights.bin", "..", ""};
    for (size_t i = 0; i < QF_ARRAY_LEN(evil); i++) {
        kv[0].value = (char *)evil[i];
        qf_status st = qfi_onnx_tensor_decode(&t, tmpdir, &v);
        ck_assert_msg(st == QF_ERR_INVALID || (evil[i][0] == 0 && st == QF_ERR_FORMAT), "location '%s': %s", evil[i],
                      qf_status_name(st));
    }
    kv[0].value = "weights.bin";
    ck_assert_int_eq(qfi_onnx_tensor_decode(&t, NULL, &v), QF_ERR_INVALID);

    /* a file of 5 GiB (sparse) holding a tensor above the 4 GiB bound: refused
     * before anything is allocated or read */
    char big[512];
    snprintf(big, sizeof big, "%s/big.bin", tmpdir);
    int fd = open(big, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    int64_t five_gib = (int64_t)5 << 30;
    if (ftruncate(fd, five_gib) == 0) {
        int64_t dbig[] = {five_gib / 4};
        kv[0].value = "big.bin";
        t = external_tensor("huge", dbig, kv, kvp, 1);
        ck_assert_int_eq(qfi_onnx_tensor_decode(&t, tmpdir, &v), QF_ERR_NOMEM);
        ck_assert(strstr(qf_error_message(), "tensor huge"));
    }
    close(fd);
    remove_tmp("big.bin");
    remove_tmp("weights.bin");
    rmdir(tmpdir);
}
END_TEST

/* ---- fuzzing ------------------------------------------------------------------------------ */

static uint8_t *read_seed(size_t *len)
{
    uint8_t *buf;
    ck_assert_int_eq(qfi_read_file(BAD_DIR "/seed.onnx", 1 << 20, &buf, len), QF_OK);
    ck_assert_uint_gt(*len, 500);
    return buf;
}

/* Loads the fuzz file and, when that works, prepares it too: any result is
 * fine, a crash (or a sanitizer report) is not, nor a message that does not
 * name the file, or names it or a node twice. Returns the status. */
static qf_status try_load(const char *path)
{
    qf_graph *g = NULL;
    qf_status st = qf_onnx_load(path, &g);
    if (st == QF_OK) {
        ck_assert_ptr_nonnull(g);
        if (qf_graph_prepare(g, 0) != QF_OK) assert_context_once("fuzz (prepare)", qf_error_message(), path);
        qf_graph_free(g);
    } else {
        ck_assert_ptr_null(g);
        assert_context_once("fuzz", qf_error_message(), path);
    }
    return st;
}

/* The fuzz file is edited in place (pwrite, shrinking ftruncate): re-creating
 * it thousands of times is slow on file systems that discard freed blocks. */
static int open_fuzz_file(char *path, size_t pathlen, const uint8_t *seed, size_t len)
{
    make_tmpdir();
    snprintf(path, pathlen, "%s/fuzz.onnx", tmpdir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pwrite(fd, seed, len, 0), (ssize_t)len);
    return fd;
}

static void close_fuzz_file(int fd)
{
    close(fd);
    remove_tmp("fuzz.onnx");
    rmdir(tmpdir);
}

START_TEST(fuzz_truncate)
{
    size_t len;
    uint8_t *seed = read_seed(&len);
    char path[512];
    int fd = open_fuzz_file(path, sizeof path, seed, len);
    ck_assert_int_eq(try_load(path), QF_OK); /* the whole file loads */
    int failures = 0;
    for (size_t n = len; n-- > 0;) {
        ck_assert_int_eq(ftruncate(fd, (off_t)n), 0);
        failures += try_load(path) != QF_OK;
    }
    /* almost every prefix is broken somewhere */
    ck_assert_int_gt(failures, (int)len / 2);
    close_fuzz_file(fd);
    free(seed);
}
END_TEST

START_TEST(fuzz_bitflip)
{
    size_t len;
    uint8_t *seed = read_seed(&len);
    char path[512];
    int fd = open_fuzz_file(path, sizeof path, seed, len);
    int failures = 0, tries = 0;
    /* every bit of every byte, one at a time */
    for (size_t i = 0; i < len; i++) {
        for (int bit = 0; bit < 8; bit++) {
            uint8_t b = seed[i] ^ (uint8_t)(1u << bit);
            ck_assert_int_eq(pwrite(fd, &b, 1, (off_t)i), 1);
            failures += try_load(path) != QF_OK;
            tries++;
        }
        ck_assert_int_eq(pwrite(fd, &seed[i], 1, (off_t)i), 1);
    }
    /* flips in weight bytes are harmless; flips in structure are not */
    ck_assert_int_gt(failures, tries / 20);
    ck_assert_int_lt(failures, tries);
    close_fuzz_file(fd);
    free(seed);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("onnx_import");
    TCase *tc = tcase_create("onnx_import");
    tcase_add_loop_test(tc, bad_corpus, 0, (int)QF_ARRAY_LEN(bad_cases));
    tcase_add_test(tc, cycle_rejected_by_prepare);
    tcase_add_test(tc, qdq_seed_imports);
    tcase_add_test(tc, seed_loads);
    tcase_add_test(tc, seed_runs);
    tcase_add_test(tc, opset6_read_as_7);
    tcase_add_test(tc, error_line_shape);
    tcase_add_test(tc, decode_typed_fields);
    tcase_add_test(tc, decode_rejects);
    tcase_add_test(tc, decode_external);
    tcase_add_test(tc, fuzz_truncate);
    tcase_add_test(tc, fuzz_bitflip);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
