/* Tests of qf_export_onnx: a small synthetic network (INT8 convolutions with
 * fused ReLU, residual Add and Clip, max-pool, global pool, a Reshape that
 * hard-codes the batch, Gemm with and without transB, MatMul with a bias, an
 * FP16 Softmax) is quantized, exported, checked structurally through
 * protobuf-c, read back with qf_model_load (the Q/DQ graph as it is) and run
 * against the quantized graph, at the export's batch and another one. Also
 * per-axis DequantizeLinear itself. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <unistd.h>
#include "internal.h"
#include "testutil.h"
#include "onnx/onnx.pb-c.h"
#include "qforge/quant.h"

/* ---- building graphs ----------------------------------------------------------- */

static int constant(qf_graph *g, const char *name, qf_dtype dt, int nd, const int64_t *d, const void *data)
{
    int v = qf_graph_add_value(g, name, dt, nd, d);
    size_t bytes = qf_value_bytes(&g->values[v]);
    g->values[v].data = malloc(bytes ? bytes : 1);
    memcpy(g->values[v].data, data, bytes);
    g->values[v].flags |= QF_VALUE_CONST;
    return v;
}

static void conv3x3(qf_graph *g, const char *name, int x, int w, int b, int out)
{
    qf_node *n = op(g, name, QF_OP_CONV, 3, (int[]){x, w, b}, out);
    set_ints(n, "pads", 4, (int64_t[]){1, 1, 1, 1});
    set_ints(n, "kernel_shape", 2, (int64_t[]){3, 3});
}

/* A graph built node by node here: every node's attributes parsed, shapes inferred at `batch`. */
static void parse_and_prepare(qf_graph *g, int batch)
{
    for (int i = 0; i < g->n_nodes; i++) OK(qfi_ops[g->nodes[i].op]->parse(g, &g->nodes[i]));
    OK(qf_graph_prepare(g, batch));
}

/* x (2,3,8,8) -> conv1+relu -> conv2 + r1 (residual) -> Clip(0,6) -> MaxPool 2x2
 * -> Reshape [2,128] -> Gemm (transB) + Relu -> Gemm (alpha 0.5) -> MatMul +
 * bias = logits -> Softmax = prob. (No global pool before the Gemm: layers
 * that read a globally pooled tensor stay FP16, and these must be INT8.) */
static qf_graph *net(int batch)
{
    rng = 11;
    qf_graph *g = qf_graph_new("export-net");
    int x = input(g, "x", 4, (int64_t[]){2, 3, 8, 8});
    int w1 = weight(g, "w1", 4, (int64_t[]){8, 3, 3, 3}, -0.5f, 0.5f);
    int b1 = weight(g, "b1", 1, (int64_t[]){8}, -0.2f, 0.2f);
    int w2 = weight(g, "w2", 4, (int64_t[]){8, 8, 3, 3}, -0.3f, 0.3f);
    int b2 = weight(g, "b2", 1, (int64_t[]){8}, -0.2f, 0.2f);
    int w3 = weight(g, "w3", 2, (int64_t[]){6, 128}, -0.3f, 0.3f);
    int b3 = weight(g, "b3", 1, (int64_t[]){6}, -0.3f, 0.3f);
    int w4 = weight(g, "w4", 2, (int64_t[]){6, 5}, -1.0f, 1.0f);
    int b4 = weight(g, "b4", 1, (int64_t[]){5}, -0.3f, 0.3f);
    int w5 = weight(g, "w5", 2, (int64_t[]){5, 4}, -1.0f, 1.0f);
    int b5 = weight(g, "b5", 1, (int64_t[]){4}, -0.3f, 0.3f);
    float lo = 0.0f, hi = 6.0f;
    int clo = constant(g, "clip_lo", QF_F32, 0, NULL, &lo), chi = constant(g, "clip_hi", QF_F32, 0, NULL, &hi);
    int shape = constant(g, "flat_shape", QF_I64, 1, (int64_t[]){2}, (int64_t[]){2, 128});
    int c1 = value(g, "c1"), r1 = value(g, "r1"), c2 = value(g, "c2"), a2 = value(g, "a2"), r2 = value(g, "r2");
    int p = value(g, "p"), f = value(g, "f"), h1 = value(g, "h1"), h1r = value(g, "h1r");
    int h2 = value(g, "h2"), m = value(g, "m"), logits = value(g, "logits"), prob = value(g, "prob");
    conv3x3(g, "conv1", x, w1, b1, c1);
    op(g, "relu1", QF_OP_RELU, 1, (int[]){c1}, r1);
    conv3x3(g, "conv2", r1, w2, b2, c2);
    op(g, "add2", QF_OP_ADD, 2, (int[]){c2, r1}, a2);
    op(g, "clip2", QF_OP_CLIP, 3, (int[]){a2, clo, chi}, r2);
    qf_node *mp = op(g, "pool", QF_OP_MAX_POOL, 1, (int[]){r2}, p);
    set_ints(mp, "kernel_shape", 2, (int64_t[]){2, 2});
    set_ints(mp, "strides", 2, (int64_t[]){2, 2});
    op(g, "flatten", QF_OP_RESHAPE, 2, (int[]){p, shape}, f);
    set_int(op(g, "fc1", QF_OP_GEMM, 3, (int[]){f, w3, b3}, h1), "transB", 1);
    op(g, "relu3", QF_OP_RELU, 1, (int[]){h1}, h1r);
    set_float(op(g, "fc2", QF_OP_GEMM, 3, (int[]){h1r, w4, b4}, h2), "alpha", 0.5f);
    op(g, "mm", QF_OP_MATMUL, 2, (int[]){h2, w5}, m);
    op(g, "add5", QF_OP_ADD, 2, (int[]){m, b5}, logits);
    set_int(op(g, "softmax", QF_OP_SOFTMAX, 1, (int[]){logits}, prob), "axis", 1);
    output(g, logits);
    output(g, prob);
    parse_and_prepare(g, batch);
    return g;
}

/* Runs g on x; returns copies of every output (f32). */
static void run_outputs(const qf_graph *g, const float *x, float **outs)
{
    qf_engine_opts o = {.device = QF_DEVICE_CPU, .threads = 2};
    qf_engine *e;
    OK(qf_engine_create(g, &o, &e));
    memcpy(qf_engine_input(e, 0), x, qf_value_bytes(&g->values[g->inputs[0]]));
    OK(qf_engine_run(e));
    for (int k = 0; k < g->n_outputs; k++) {
        const qf_value *v = &g->values[g->outputs[k]];
        ck_assert_int_eq(v->dtype, QF_F32);
        outs[k] = malloc(qf_value_bytes(v));
        memcpy(outs[k], qf_engine_output(e, k), qf_value_bytes(v));
    }
    qf_engine_free(e);
}

/* ---- reading the export back through protobuf-c ------------------------------------- */

static Onnx__ModelProto *read_model(const char *path)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)n);
    ck_assert_int_eq(fread(buf, 1, (size_t)n, f), n);
    fclose(f);
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, (size_t)n, buf);
    free(buf);
    ck_assert_ptr_nonnull(m);
    return m;
}

static const Onnx__NodeProto *producer(const Onnx__GraphProto *gp, const char *tensor)
{
    for (size_t i = 0; i < gp->n_node; i++)
        for (size_t k = 0; k < gp->node[i]->n_output; k++)
            if (strcmp(gp->node[i]->output[k], tensor) == 0) return gp->node[i];
    return NULL;
}

static const Onnx__TensorProto *initializer(const Onnx__GraphProto *gp, const char *name)
{
    for (size_t i = 0; i < gp->n_initializer; i++)
        if (strcmp(gp->initializer[i]->name, name) == 0) return gp->initializer[i];
    return NULL;
}

static const Onnx__NodeProto *node_of(const Onnx__GraphProto *gp, const char *op_type, int nth)
{
    for (size_t i = 0; i < gp->n_node; i++)
        if (strcmp(gp->node[i]->op_type, op_type) == 0 && nth-- == 0) return gp->node[i];
    return NULL;
}

static int count_op(const Onnx__GraphProto *gp, const char *op_type)
{
    int c = 0;
    for (size_t i = 0; i < gp->n_node; i++) c += strcmp(gp->node[i]->op_type, op_type) == 0;
    return c;
}

static const Onnx__AttributeProto *onnx_attr(const Onnx__NodeProto *n, const char *name)
{
    for (size_t i = 0; i < n->n_attribute; i++)
        if (strcmp(n->attribute[i]->name, name) == 0) return n->attribute[i];
    return NULL;
}

static const qf_node *qnode(const qf_graph *g, const char *name)
{
    for (int i = 0; i < g->n_nodes; i++)
        if (strcmp(g->nodes[i].name, name) == 0) return &g->nodes[i];
    ck_abort_msg("no node %s", name);
    return NULL;
}

/* Checks that compute node `name` reads its weight through a DequantizeLinear of
 * an int8 initializer with qforge's scales, per channel along `axis` (or per
 * tensor when axis < 0); returns the weight's DequantizeLinear. */
static int count_nodes(const qf_graph *g, qf_op o)
{
    int k = 0;
    for (int i = 0; i < g->n_nodes; i++) k += g->nodes[i].op == o;
    return k;
}

static const Onnx__NodeProto *check_weight(const Onnx__GraphProto *gp, const qf_graph *gq, const char *name, int axis)
{
    const Onnx__NodeProto *n = NULL;
    for (size_t i = 0; i < gp->n_node; i++)
        if (strcmp(gp->node[i]->name, name) == 0) n = gp->node[i];
    ck_assert_msg(n != NULL, "no exported node %s", name);
    /* the activation: DequantizeLinear of an int8 tensor */
    const Onnx__NodeProto *xdq = producer(gp, n->input[0]);
    ck_assert_ptr_nonnull(xdq);
    ck_assert_str_eq(xdq->op_type, "DequantizeLinear");
    const Onnx__NodeProto *wdq = producer(gp, n->input[1]);
    ck_assert_ptr_nonnull(wdq);
    ck_assert_str_eq(wdq->op_type, "DequantizeLinear");
    ck_assert_int_eq(wdq->n_input, 3);
    const Onnx__TensorProto *w = initializer(gp, wdq->input[0]), *s = initializer(gp, wdq->input[1]),
                            *z = initializer(gp, wdq->input[2]);
    ck_assert(w && s && z);
    ck_assert_int_eq(w->data_type, ONNX__TENSOR_PROTO__DATA_TYPE__INT8);
    ck_assert_int_eq(z->data_type, ONNX__TENSOR_PROTO__DATA_TYPE__INT8);
    ck_assert_int_eq(s->data_type, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
    const qf_node *q = qnode(gq, name);
    const qf_value *wq = &gq->values[q->in[1]], *sq = &gq->values[q->in[3]];
    ck_assert_int_eq(w->raw_data.len, qf_value_numel(wq));
    ck_assert(memcmp(w->raw_data.data, wq->data, w->raw_data.len) == 0);
    const Onnx__AttributeProto *ax = onnx_attr(wdq, "axis");
    if (axis < 0) {
        ck_assert_ptr_null(ax);
        ck_assert_int_eq(s->n_dims, 0);
        ck_assert(memcmp(s->raw_data.data, sq->data, 4) == 0);
    } else {
        ck_assert_ptr_nonnull(ax);
        ck_assert_int_eq(ax->i, axis);
        ck_assert_int_eq(s->n_dims, 1);
        ck_assert_int_eq(s->dims[0], wq->dims[axis]);
        ck_assert_int_eq(s->dims[0], qf_value_numel(sq));
        ck_assert(memcmp(s->raw_data.data, sq->data, s->raw_data.len) == 0);
        ck_assert_int_eq(z->n_dims, 1);
        ck_assert_int_eq(z->dims[0], s->dims[0]);
    }
    for (size_t i = 0; i < z->raw_data.len; i++) ck_assert_int_eq(z->raw_data.data[i], 0);
    return wdq;
}

static char tmpdir[256];

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/qforge-export-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

START_TEST(export_structure_and_rerun)
{
    make_tmpdir();
    qf_graph *g = net(2);
    float *x = random_input(g, 5, -1.5f, 1.5f);
    qf_calib_table *t = calibrate_minmax(g, x);
    qf_quant_opts o;
    qf_quant_opts_init(&o);
    o.asymmetric = false; /* the symmetric export: every zero point 0 */
    qf_quant_summary sum;
    OK(qf_quantize(g, t, &o, &sum));
    /* what the export has to write out: every compute op INT8, the Softmax FP16 */
    ck_assert_int_eq(qnode(g, "conv1")->precision, QF_PREC_INT8);
    ck_assert_int_eq(qnode(g, "conv2")->act, QF_ACT_CLIP);
    ck_assert_int_eq(qnode(g, "conv2")->n_in, 5); /* with the residual */
    ck_assert_int_eq(qnode(g, "mm")->precision, QF_PREC_INT8);
    ck_assert_int_eq(qnode(g, "softmax")->precision, QF_PREC_FP16);

    char path[512];
    snprintf(path, sizeof path, "%s/net.onnx", tmpdir);
    OK(qf_export_onnx(g, path));
    Onnx__ModelProto *m = read_model(path);
    ck_assert_int_eq(m->ir_version, 7);
    ck_assert_int_eq(m->n_opset_import, 1);
    ck_assert_int_eq(m->opset_import[0]->version, 13);
    ck_assert_str_eq(m->producer_name, "qforge");
    const Onnx__GraphProto *gp = m->graph;

    /* inputs and outputs: names and f32 kept, dim 0 symbolic */
    ck_assert_int_eq(gp->n_input, 1);
    ck_assert_int_eq(gp->n_output, 2);
    ck_assert_str_eq(gp->input[0]->name, "x");
    ck_assert_str_eq(gp->output[0]->name, "logits");
    ck_assert_str_eq(gp->output[1]->name, "prob");
    const Onnx__TypeProto__Tensor *tt = gp->input[0]->type->tensor_type;
    ck_assert_int_eq(tt->elem_type, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
    ck_assert_int_eq(tt->shape->n_dim, 4);
    ck_assert_int_eq(tt->shape->dim[0]->value_case, ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM);
    ck_assert_int_eq(tt->shape->dim[1]->dim_value, 3);
    for (int k = 0; k < 2; k++)
        ck_assert_int_eq(gp->output[k]->type->tensor_type->elem_type, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);

    /* ops: the FP32 ops themselves, no qforge-only operands, no FP16 */
    ck_assert_int_eq(count_op(gp, "Conv"), 2);
    ck_assert_int_eq(count_op(gp, "Gemm"), 2);
    ck_assert_int_eq(count_op(gp, "MatMul"), 1);
    ck_assert_int_eq(count_op(gp, "Softmax"), 1);
    ck_assert_int_eq(count_op(gp, "Cast"), 0);
    ck_assert_int_eq(count_op(gp, "Relu"), 2); /* conv1's and fc1's, unfused */
    ck_assert_int_eq(count_op(gp, "Clip"), 1);
    for (size_t i = 0; i < gp->n_initializer; i++)
        ck_assert_int_ne(gp->initializer[i]->data_type, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16);
    ck_assert_int_eq(node_of(gp, "Conv", 0)->n_input, 3);
    ck_assert_int_eq(node_of(gp, "Conv", 1)->n_input, 3);
    ck_assert_int_eq(node_of(gp, "MatMul", 0)->n_input, 2);

    /* weights per channel on the output-channel axis */
    check_weight(gp, g, "conv1", 0);
    check_weight(gp, g, "conv2", 0);
    check_weight(gp, g, "fc1", 0); /* transB: W is (N,K) */
    check_weight(gp, g, "fc2", 1); /* W is (K,N) */
    check_weight(gp, g, "mm", 1);

    /* fc2's alpha lives in its weights: written as 1 */
    const Onnx__NodeProto *fc2 = NULL;
    for (size_t i = 0; i < gp->n_node; i++)
        if (!strcmp(gp->node[i]->name, "fc2")) fc2 = gp->node[i];
    ck_assert_ptr_nonnull(fc2);
    ck_assert(onnx_attr(fc2, "alpha") && onnx_attr(fc2, "alpha")->f == 1.0f);

    /* conv1's bias: the int32 bias dequantized with s_in * s_w[c] */
    const qf_node *q1 = qnode(g, "conv1");
    const Onnx__TensorProto *b = initializer(gp, node_of(gp, "Conv", 0)->input[2]);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(b->data_type, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
    const float *bf = (const float *)b->raw_data.data, *s1 = g->values[q1->in[3]].data;
    const int32_t *bq = g->values[q1->in[2]].data;
    for (int c = 0; c < 8; c++) ck_assert(bf[c] == (float)bq[c] * (g->values[q1->in[0]].scale * s1[c]));

    /* conv2: Conv -> Add(residual, dequantized) -> Clip(0, 6) -> QuantizeLinear */
    const Onnx__NodeProto *clip = node_of(gp, "Clip", 0);
    const Onnx__NodeProto *add = producer(gp, clip->input[0]);
    ck_assert_str_eq(add->op_type, "Add");
    ck_assert_str_eq(producer(gp, add->input[0])->op_type, "Conv");
    ck_assert_str_eq(producer(gp, add->input[1])->op_type, "DequantizeLinear");
    ck_assert(*(const float *)initializer(gp, clip->input[1])->raw_data.data == 0.0f);
    ck_assert(*(const float *)initializer(gp, clip->input[2])->raw_data.data == 6.0f);

    /* every QuantizeLinear: int8 zero point 0, the tensor's scale */
    int nq = 0;
    for (size_t i = 0; i < gp->n_node; i++) {
        const Onnx__NodeProto *n = gp->node[i];
        if (strcmp(n->op_type, "QuantizeLinear") != 0) continue;
        nq++;
        ck_assert_int_eq(n->n_input, 3);
        const Onnx__TensorProto *s = initializer(gp, n->input[1]), *z = initializer(gp, n->input[2]);
        ck_assert(s && z && s->n_dims == 0 && z->n_dims == 0);
        ck_assert_int_eq(z->data_type, ONNX__TENSOR_PROTO__DATA_TYPE__INT8);
        ck_assert_int_eq(z->raw_data.data[0], 0);
        int v = qf_graph_find_value(g, n->output[0]);
        ck_assert_msg(v >= 0 && g->values[v].dtype == QF_I8, "QuantizeLinear writes %s", n->output[0]);
        ck_assert(*(const float *)s->raw_data.data == g->values[v].scale);
    }
    /* x, r1, r2, p (max-pool), f (reshape), h1r, h2 */
    ck_assert_int_eq(nq, 7);

    /* the Reshape copies dim 0 instead of the hard-coded batch (qf_quantize or the export freed it) */
    const Onnx__NodeProto *rs = node_of(gp, "Reshape", 0);
    const Onnx__TensorProto *shape = initializer(gp, rs->input[1]);
    ck_assert_int_eq(((const int64_t *)shape->raw_data.data)[0], 0);
    ck_assert_int_eq(((const int64_t *)shape->raw_data.data)[1], 128);
    onnx__model_proto__free_unpacked(m, NULL);

    /* read back as it is (Q/DQ around float ops): the result is the INT8 engine's to
     * within FP32 rounding (the export adds in float what the engine adds in int32) */
    float *yq[2], *ye[2];
    run_outputs(g, x, yq);
    qf_graph *re;
    qf_load_opts lo = {.batch = 2};
    OK(qf_model_load(path, &lo, &re));
    ck_assert_int_eq(re->n_outputs, 2);
    run_outputs(re, x, ye);
    double worst = 0, scale = 0;
    for (int i = 0; i < 2 * 4; i++) {
        worst = fmax(worst, fabs(ye[0][i] - yq[0][i]));
        scale = fmax(scale, fabs(yq[0][i]));
    }
    ck_assert(scale > 0.1);
    /* one output step of the last INT8 layer is s_in * s_w ~ 1e-4 of this range:
     * a tolerance of 1e-4 relative only admits float rounding */
    ck_assert_msg(worst <= 1e-4 * scale, "logits differ by %g (range %g)", worst, scale);
    for (int i = 0; i < 2 * 4; i++)
        ck_assert_msg(fabs(ye[1][i] - yq[1][i]) <= 2e-3, "prob %d: %g vs %g (FP16 softmax)", i, ye[1][i], yq[1][i]);

    /* another batch: the first two images give the same results */
    qf_graph *re3;
    lo.batch = 3;
    OK(qf_model_load(path, &lo, &re3));
    float *x3 = random_input(re3, 77, -1.5f, 1.5f), *y3[2];
    memcpy(x3, x, sizeof(float) * 2 * 3 * 8 * 8);
    run_outputs(re3, x3, y3);
    for (int i = 0; i < 2 * 4; i++) ck_assert(y3[0][i] == ye[0][i]);

    for (int k = 0; k < 2; k++) free(yq[k]), free(ye[k]), free(y3[k]);
    free(x3);
    free(x);
    qf_graph_free(re3);
    qf_graph_free(re);
    qf_graph_free(g);
    qf_calib_table_free(t);
    unlink(path);
    rmdir(tmpdir);
}
END_TEST

START_TEST(export_per_tensor_weights_and_fp32)
{
    make_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/pt.onnx", tmpdir);
    qf_graph *g = net(2);
    float *x = random_input(g, 5, -1.5f, 1.5f);
    qf_calib_table *t = calibrate_minmax(g, x);
    qf_quant_opts o;
    qf_quant_opts_init(&o);
    o.per_tensor_weights = true;
    OK(qf_quantize(g, t, &o, NULL));
    OK(qf_export_onnx(g, path));
    Onnx__ModelProto *m = read_model(path);
    check_weight(m->graph, g, "conv1", -1);
    check_weight(m->graph, g, "fc2", -1);
    onnx__model_proto__free_unpacked(m, NULL);
    qf_graph_free(g);

    /* an FP32 graph is written as a plain model: no Q/DQ, same results */
    g = net(2);
    OK(qf_export_onnx(g, path));
    m = read_model(path);
    ck_assert_int_eq(count_op(m->graph, "QuantizeLinear") + count_op(m->graph, "DequantizeLinear"), 0);
    ck_assert_int_eq(count_op(m->graph, "Add"), 2);
    /* qf_graph_prepare made the Reshape's [2, 8] batch-free ([0, 8]); the export keeps that */
    ck_assert_int_eq(((const int64_t *)g->values[qnode(g, "flatten")->in[1]].data)[0], 0);
    const Onnx__TensorProto *shape = initializer(m->graph, node_of(m->graph, "Reshape", 0)->input[1]);
    ck_assert_int_eq(((const int64_t *)shape->raw_data.data)[0], 0);
    onnx__model_proto__free_unpacked(m, NULL);
    float *y[2], *yr[2];
    run_outputs(g, x, y);
    qf_graph *re;
    qf_load_opts lo = {.batch = 2};
    OK(qf_model_load(path, &lo, &re));
    run_outputs(re, x, yr);
    for (int i = 0; i < 2 * 4; i++) ck_assert(y[0][i] == yr[0][i]);
    for (int k = 0; k < 2; k++) free(y[k]), free(yr[k]);
    qf_graph_free(re);
    lo.batch = 5; /* and it runs at another batch */
    OK(qf_model_load(path, &lo, &re));
    qf_graph_free(re);
    qf_graph_free(g);
    qf_calib_table_free(t);
    free(x);
    unlink(path);
    rmdir(tmpdir);
}
END_TEST

/* Two INT8 compute nodes are the same: op, epilogue, weights, weight scales,
 * int32 bias, and the scales and zero points they read and write. */
static void same_int8_node(const qf_graph *a, const qf_node *n, const qf_graph *b, const qf_node *m)
{
    ck_assert_msg(m->op == n->op && m->precision == QF_PREC_INT8, "%s: %s at %s", n->name, qf_op_name(m->op),
                  qf_precision_name(m->precision));
    ck_assert_msg(m->act == n->act && m->act_lo == n->act_lo && m->act_hi == n->act_hi, "%s: epilogue", n->name);
    ck_assert_int_eq(m->n_in, n->n_in);
    for (int k = 0; k < n->n_in; k++) {
        const qf_value *u = qfi_in(a, n, k), *v = qfi_in(b, m, k);
        if (!u) {
            ck_assert_ptr_null(v);
            continue;
        }
        ck_assert_msg(u->dtype == v->dtype && u->scale == v->scale && u->zero_point == v->zero_point,
                      "%s input %d: %s scale %g zp %d vs %s scale %g zp %d", n->name, k, qf_dtype_info(u->dtype)->name,
                      (double)u->scale, u->zero_point, qf_dtype_info(v->dtype)->name, (double)v->scale, v->zero_point);
        if (u->flags & QF_VALUE_CONST) {
            ck_assert_int_eq(qf_value_bytes(u), qf_value_bytes(v));
            ck_assert_msg(memcmp(u->data, v->data, qf_value_bytes(u)) == 0, "%s: constant input %d differs", n->name,
                          k);
        }
    }
    const qf_value *y = qfi_out(a, n, 0), *z = qfi_out(b, m, 0);
    ck_assert_msg(y->dtype == z->dtype && y->scale == z->scale && y->zero_point == z->zero_point, "%s: output",
                  n->name);
}

/* An export read back as a model quantized elsewhere (qf_quantize without a
 * table) gives the very INT8 nodes it was written from; also with zero points
 * on the activations (_i 1), as a graph imported from a uint8 model has. */
START_TEST(export_reimport_roundtrip)
{
    make_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/rt.onnx", tmpdir);
    qf_graph *g = net(2);
    float *x = random_input(g, 5, -1.5f, 1.5f);
    qf_calib_table *t = calibrate_minmax(g, x);
    qf_quant_opts o;
    qf_quant_opts_init(&o);
    OK(qf_quantize(g, t, &o, NULL));
    /* a zero point per scale: a pass-through op's input and output share both */
    for (int v = 0; _i && v < g->n_values; v++)
        if (g->values[v].dtype == QF_I8 && !(g->values[v].flags & QF_VALUE_CONST))
            g->values[v].zero_point = (int)(qfi_f32_bits(g->values[v].scale) % 9) - 4;
    OK(qf_export_onnx(g, path));
    qf_graph *re;
    qf_load_opts lo = {.batch = 2};
    OK(qf_model_load(path, &lo, &re));
    ck_assert(qf_graph_has_qdq(re));
    qf_quant_summary sum;
    OK(qf_quantize(re, NULL, &o, &sum));
    ck_assert(sum.from_model);
    int compared = 0, int8_nodes = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const qf_node *n = &g->nodes[i];
        if (n->precision != QF_PREC_INT8 || qf_op_is_conversion(n->op)) continue;
        int8_nodes++;
        const qf_node *m = qnode(re, n->name);
        if (qfi_ops[n->op]->int8 == QFI_INT8_COMPUTE) {
            same_int8_node(g, n, re, m);
            compared++;
        } else {
            ck_assert_msg(m->precision == QF_PREC_INT8, "%s came back %s", n->name, qf_precision_name(m->precision));
        }
    }
    ck_assert_int_eq(compared, 5); /* conv1, conv2, fc1, fc2, mm */
    ck_assert_int_eq(sum.nodes[QF_PREC_INT8], int8_nodes);
    float *yq[2], *ye[2];
    run_outputs(g, x, yq);
    run_outputs(re, x, ye);
    for (int i = 0; i < 2 * 4; i++) ck_assert_msg(yq[0][i] == ye[0][i], "logit %d: %g vs %g", i, yq[0][i], ye[0][i]);
    for (int k = 0; k < 2; k++) free(yq[k]), free(ye[k]);
    qf_graph_free(re);
    qf_graph_free(g);
    qf_calib_table_free(t);
    free(x);
    unlink(path);
    rmdir(tmpdir);
}
END_TEST

/* x (2,8,6,6) -> conv_a 3x3 -> Mul(a, Sigmoid(a)) -> conv_b 1x1 -> HardSwish ->
 * conv_c 3x3 -> Sigmoid = y: INT8 convs with SiLU, HardSwish and Sigmoid in
 * their epilogues, written back as float ops between Q/DQ pairs. */
static qf_graph *smooth_net(int batch)
{
    rng = 23;
    qf_graph *g = qf_graph_new("export-smooth");
    int x = input(g, "x", 4, (int64_t[]){2, 8, 6, 6});
    int wa = weight(g, "wa", 4, (int64_t[]){8, 8, 3, 3}, -0.3f, 0.3f), ba = weight(g, "ba", 1, (int64_t[]){8}, -0.3f, 0.3f);
    int wb = weight(g, "wb", 4, (int64_t[]){8, 8, 1, 1}, -0.8f, 0.8f), bb = weight(g, "bb", 1, (int64_t[]){8}, -1, 1);
    int wc = weight(g, "wc", 4, (int64_t[]){4, 8, 3, 3}, -0.3f, 0.3f), bc = weight(g, "bc", 1, (int64_t[]){4}, -0.3f, 0.3f);
    int a = value(g, "a"), sa = value(g, "sa"), ya = value(g, "ya"), b = value(g, "b"), yb = value(g, "yb");
    int c = value(g, "c"), y = value(g, "y");
    conv3x3(g, "conv_a", x, wa, ba, a);
    op(g, "sig_a", QF_OP_SIGMOID, 1, (int[]){a}, sa);
    op(g, "silu_a", QF_OP_MUL, 2, (int[]){a, sa}, ya);
    set_ints(op(g, "conv_b", QF_OP_CONV, 3, (int[]){ya, wb, bb}, b), "kernel_shape", 2, (int64_t[]){1, 1});
    op(g, "hswish_b", QF_OP_HARD_SWISH, 1, (int[]){b}, yb);
    conv3x3(g, "conv_c", yb, wc, bc, c);
    op(g, "sig_c", QF_OP_SIGMOID, 1, (int[]){c}, y);
    output(g, y);
    g->opset = 14;
    parse_and_prepare(g, batch);
    return g;
}

/* The smooth activations go out as Sigmoid, and Sigmoid or HardSigmoid (at
 * HardSwish's constants) times the conv's output; run as float ops the export
 * gives the INT8 engine's results but where a level's rounding falls the other
 * way, and read back as a Q/DQ model the same INT8 nodes. */
START_TEST(export_smooth_activations)
{
    make_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/smooth.onnx", tmpdir);
    qf_graph *g = smooth_net(2);
    float *x = random_input(g, 7, -1.5f, 1.5f);
    qf_calib_table *t = calibrate_minmax(g, x);
    qf_quant_opts o;
    qf_quant_opts_init(&o);
    OK(qf_quantize(g, t, &o, NULL));
    ck_assert_int_eq(qnode(g, "conv_a")->act, QF_ACT_SILU);
    ck_assert_int_eq(qnode(g, "conv_b")->act, QF_ACT_HARD_SWISH);
    ck_assert_int_eq(qnode(g, "conv_c")->act, QF_ACT_SIGMOID);
    OK(qf_export_onnx(g, path));
    Onnx__ModelProto *m = read_model(path);
    const Onnx__GraphProto *gp = m->graph;
    ck_assert_int_eq(count_op(gp, "Sigmoid"), 2);
    ck_assert_int_eq(count_op(gp, "HardSigmoid"), 1);
    ck_assert_int_eq(count_op(gp, "Mul"), 2);
    ck_assert_int_eq(count_op(gp, "HardSwish"), 0);
    const Onnx__NodeProto *hs = node_of(gp, "HardSigmoid", 0);
    ck_assert(onnx_attr(hs, "alpha")->f == 1.0f / 6.0f && onnx_attr(hs, "beta")->f == 0.5f);
    /* SiLU: Mul(conv, Sigmoid(conv)) -> QuantizeLinear */
    const Onnx__NodeProto *mul = node_of(gp, "Mul", 0);
    ck_assert_str_eq(producer(gp, mul->input[0])->op_type, "Conv");
    ck_assert_str_eq(producer(gp, mul->input[1])->op_type, "Sigmoid");
    ck_assert_str_eq(producer(gp, producer(gp, mul->input[1])->input[0])->op_type, "Conv");
    /* the last Sigmoid writes the float graph output */
    ck_assert_str_eq(producer(gp, "y")->op_type, "Sigmoid");
    onnx__model_proto__free_unpacked(m, NULL);

    float *yq[1], *ye[1];
    run_outputs(g, x, yq);
    qf_graph *re;
    qf_load_opts lo = {.batch = 2};
    OK(qf_model_load(path, &lo, &re));
    run_outputs(re, x, ye);
    const int n = 2 * 4 * 36;
    int same = 0;
    double worst = 0;
    for (int i = 0; i < n; i++) {
        worst = fmax(worst, fabs(ye[0][i] - yq[0][i]));
        same += fabs(ye[0][i] - yq[0][i]) <= 1e-6;
    }
    ck_assert_msg(worst < 0.02 && same >= n * 9 / 10, "float rerun: worst %g, %d of %d within 1e-6", worst, same, n);
    free(ye[0]);
    qf_graph_free(re);

    OK(qf_model_load(path, &lo, &re));
    OK(qf_quantize(re, NULL, &o, NULL));
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == QF_OP_CONV) same_int8_node(g, &g->nodes[i], re, qnode(re, g->nodes[i].name));
    ck_assert_int_eq(count_nodes(re, QF_OP_SIGMOID) + count_nodes(re, QF_OP_MUL) + count_nodes(re, QF_OP_HARD_SIGMOID), 0);
    run_outputs(re, x, ye);
    for (int i = 0; i < n; i++) ck_assert_msg(ye[0][i] == yq[0][i], "element %d: %g vs %g", i, ye[0][i], yq[0][i]);
    free(yq[0]), free(ye[0]);
    qf_graph_free(re);
    qf_graph_free(g);
    qf_calib_table_free(t);
    free(x);
    unlink(path);
    rmdir(tmpdir);
}
END_TEST

/* A transformer MLP: x (2,5,16) -> MatMul + bias -> Gelu (erf) -> MatMul +
 * bias -> Gelu (tanh) -> MatMul = y. The Gelus go into the INT8 MatMuls'
 * epilogues (their outputs feed MatMuls), and out again as the float chains
 * PyTorch writes; the erf chain reads back as the same INT8 node. */
static qf_graph *gelu_net(int batch)
{
    rng = 29;
    qf_graph *g = qf_graph_new("export-gelu");
    int x = input(g, "x", 3, (int64_t[]){2, 5, 16});
    int w1 = weight(g, "w1", 2, (int64_t[]){16, 24}, -0.5f, 0.5f), b1 = weight(g, "b1", 1, (int64_t[]){24}, -0.5f, 0.5f);
    int w2 = weight(g, "w2", 2, (int64_t[]){24, 24}, -0.4f, 0.4f), b2 = weight(g, "b2", 1, (int64_t[]){24}, -0.5f, 0.5f);
    int w3 = weight(g, "w3", 2, (int64_t[]){24, 8}, -0.4f, 0.4f);
    int m1 = value(g, "m1"), a1 = value(g, "a1"), g1 = value(g, "g1"), m2 = value(g, "m2"), a2 = value(g, "a2");
    int g2 = value(g, "g2"), y = value(g, "y");
    op(g, "fc1", QF_OP_MATMUL, 2, (int[]){x, w1}, m1);
    op(g, "fc1_bias", QF_OP_ADD, 2, (int[]){m1, b1}, a1);
    op(g, "gelu1", QF_OP_GELU, 1, (int[]){a1}, g1);
    op(g, "fc2", QF_OP_MATMUL, 2, (int[]){g1, w2}, m2);
    op(g, "fc2_bias", QF_OP_ADD, 2, (int[]){m2, b2}, a2);
    qf_node *gt = op(g, "gelu2", QF_OP_GELU, 1, (int[]){a2}, g2);
    attr(gt, "approximate", QF_ATTR_STRING)->s = strdup("tanh");
    op(g, "fc3", QF_OP_MATMUL, 2, (int[]){g2, w3}, y);
    output(g, y);
    g->opset = 20;
    parse_and_prepare(g, batch);
    return g;
}

START_TEST(export_gelu_epilogues)
{
    make_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/gelu.onnx", tmpdir);
    qf_graph *g = gelu_net(2);
    float *x = random_input(g, 11, -1.5f, 1.5f);
    qf_calib_table *t = calibrate_minmax(g, x);
    qf_quant_opts o;
    qf_quant_opts_init(&o);
    OK(qf_quantize(g, t, &o, NULL));
    ck_assert_int_eq(qnode(g, "fc1")->act, QF_ACT_GELU);
    ck_assert_int_eq(qnode(g, "fc2")->act, QF_ACT_GELU_TANH);
    ck_assert_int_eq(count_nodes(g, QF_OP_GELU), 0);
    OK(qf_export_onnx(g, path));
    Onnx__ModelProto *m = read_model(path);
    ck_assert_int_eq(count_op(m->graph, "Erf"), 1);
    ck_assert_int_eq(count_op(m->graph, "Tanh"), 1);
    ck_assert_int_eq(count_op(m->graph, "Gelu"), 0);
    onnx__model_proto__free_unpacked(m, NULL);

    /* run as float ops, the export gives the INT8 engine's results but where a level rounds the other way */
    float *yq[1], *ye[1];
    run_outputs(g, x, yq);
    qf_graph *re;
    qf_load_opts lo = {.batch = 2};
    OK(qf_model_load(path, &lo, &re));
    ck_assert_int_eq(count_nodes(re, QF_OP_GELU), 1); /* the erf chain, fused again at load */
    run_outputs(re, x, ye);
    const int n = 2 * 5 * 8;
    double worst = 0, ymax = 0;
    for (int i = 0; i < n; i++) worst = fmax(worst, fabs(ye[0][i] - yq[0][i])), ymax = fmax(ymax, fabs(yq[0][i]));
    ck_assert_msg(worst <= 0.05 * ymax, "float rerun: worst %g of %g", worst, ymax);
    free(ye[0]);
    qf_graph_free(re);

    /* read back as a Q/DQ model: fc1 is the same INT8 node, GELU in its epilogue */
    OK(qf_model_load(path, &lo, &re));
    OK(qf_quantize(re, NULL, &o, NULL));
    same_int8_node(g, qnode(g, "fc1"), re, qnode(re, "fc1"));
    ck_assert_int_eq(qnode(re, "fc1")->act, QF_ACT_GELU);
    free(yq[0]);
    qf_graph_free(re);
    qf_graph_free(g);
    qf_calib_table_free(t);
    free(x);
    unlink(path);
    rmdir(tmpdir);
}
END_TEST

START_TEST(export_failure_leaves_nothing)
{
    make_tmpdir();
    qf_graph *g = net(2);
    char path[512];
    snprintf(path, sizeof path, "%s/missing/net.onnx", tmpdir);
    ck_assert_int_eq(qf_export_onnx(g, path), QF_ERR_IO);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), path));
    /* an unprepared graph is refused before anything is written */
    qf_graph *raw = qf_graph_new("raw");
    snprintf(path, sizeof path, "%s/raw.onnx", tmpdir);
    ck_assert_int_eq(qf_export_onnx(raw, path), QF_ERR_USAGE);
    ck_assert_int_ne(access(path, F_OK), 0);
    qf_graph_free(raw);
    qf_graph_free(g);
    ck_assert_int_eq(rmdir(tmpdir), 0); /* empty: no temporary left behind */
}
END_TEST

/* ---- per-axis DequantizeLinear (read from exported models) --------------------------- */

START_TEST(dequantize_per_axis)
{
    /* q (2,3,2) int8 constant, scales along axis 1; and the same on an input */
    qf_graph *g = qf_graph_new("dq-axis");
    const int8_t qd[12] = {1, -2, 3, -4, 5, -6, 7, -8, 9, -10, 127, -128};
    const float sd[3] = {0.5f, 0.25f, 2.0f};
    int q = constant(g, "q", QF_I8, 3, (int64_t[]){2, 3, 2}, qd);
    int s = constant(g, "s", QF_F32, 1, (int64_t[]){3}, sd);
    int z = constant(g, "z", QF_I8, 1, (int64_t[]){3}, (int8_t[]){0, 0, 0});
    int xi = qf_graph_add_value(g, "xi", QF_I8, 3, (int64_t[]){2, 3, 2});
    g->values[xi].flags |= QF_VALUE_INPUT;
    list_add(&g->inputs, &g->n_inputs, xi);
    int w = value(g, "w"), y = value(g, "y"), sum = value(g, "sum");
    set_int(op(g, "dqw", QF_OP_DEQUANTIZE_LINEAR, 3, (int[]){q, s, z}, w), "axis", 1);
    set_int(op(g, "dqx", QF_OP_DEQUANTIZE_LINEAR, 2, (int[]){xi, s}, y), "axis", -2);
    op(g, "add", QF_OP_ADD, 2, (int[]){w, y}, sum);
    output(g, sum);
    parse_and_prepare(g, 2);
    /* the constant one stays a DequantizeLinear of int8 weights: importing a Q/DQ model reads them */
    ck_assert(!(g->values[qf_graph_find_value(g, "w")].flags & QF_VALUE_CONST));
    ck_assert_int_eq(g->n_nodes, 3);
    qf_engine_opts o = {.device = QF_DEVICE_CPU};
    qf_engine *e;
    OK(qf_engine_create(g, &o, &e));
    memcpy(qf_engine_input(e, 0), qd, 12);
    OK(qf_engine_run(e));
    const float *out = qf_engine_output(e, 0);
    for (int i = 0; i < 12; i++) {
        float want = 2.0f * qd[i] * sd[i / 2 % 3];
        ck_assert_msg(out[i] == want, "element %d: %g, want %g", i, out[i], want);
    }
    qf_engine_free(e);

    /* a scale vector that does not match the axis is an error naming it */
    qf_node *n = &g->nodes[0];
    for (int a = 0; a < n->n_attr; a++)
        if (!strcmp(n->attrs[a].name, "axis")) n->attrs[a].i = 2;
    ck_assert_int_eq(qfi_ops[n->op]->infer(g, n), QF_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), "scale s has 3 elements"));
    n->attrs[0].i = 3;
    ck_assert_int_eq(qfi_ops[n->op]->infer(g, n), QF_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), "axis 3 is out of range"));
    /* and a zero or negative per-channel scale */
    n->attrs[0].i = 1;
    ((float *)g->values[s].data)[1] = 0.0f;
    ck_assert_int_eq(qfi_ops[n->op]->infer(g, n), QF_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), "scale 1 of s"));
    qf_graph_free(g);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("export_onnx");
    TCase *tc = tcase_create("export");
    tcase_add_test(tc, export_structure_and_rerun);
    tcase_add_test(tc, export_per_tensor_weights_and_fp32);
    tcase_add_loop_test(tc, export_reimport_roundtrip, 0, 2);
    tcase_add_test(tc, export_smooth_activations);
    tcase_add_test(tc, export_gelu_epilogues);
    tcase_add_test(tc, export_failure_leaves_nothing);
    tcase_add_test(tc, dequantize_per_axis);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
