/* Unit tests for lib/ basics: status messages, dtype traits and half/bfloat16
 * conversion, graph building, topological sort, cycle detection, memory plan. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include "internal.h"
#include "../runtime/engine_impl.h"
#include "testutil.h"

START_TEST(status_messages)
{
    ck_assert_int_eq(qf_error(QF_ERR_FORMAT, "%s: node %s: bad", "m.onnx", "conv1"), QF_ERR_FORMAT);
    ck_assert_str_eq(qf_error_message(), "m.onnx: node conv1: bad");
    qf_error_prefix(QF_ERR_FORMAT, "outer");
    ck_assert_str_eq(qf_error_message(), "outer: m.onnx: node conv1: bad");
    ck_assert_str_eq(qf_status_name(QF_ERR_UNSUPPORTED), "unsupported");
    /* a name with a line break (tests/bad/newline_in_name.onnx, from tests/fuzz) still makes one line */
    qf_error(QF_ERR_FORMAT, "%s: input %s", "m.onnx", "a\nb\tc\x7f");
    ck_assert_str_eq(qf_error_message(), "m.onnx: input a?b?c?");
    qf_error_prefix(QF_ERR_FORMAT, "%s", "dir\r");
    ck_assert_str_eq(qf_error_message(), "dir?: m.onnx: input a?b?c?");
}
END_TEST

/* The context rule: a dispatcher adds "file: node NAME (Op): " once, however
 * many dispatchers a failure passes through, and the node after a file named
 * already. */
START_TEST(error_context_added_once)
{
    qf_graph g = {.source = "m.onnx"};
    qf_node n = {.name = "conv1", .op = QF_OP_CONV};
    ck_assert_int_eq(qfi_error_node(qf_error(QF_ERR_INVALID, "group is 0"), &g, &n), QF_ERR_INVALID);
    ck_assert_str_eq(qf_error_message(), "m.onnx: node conv1 (Conv): group is 0");
    qfi_error_node(QF_ERR_INVALID, &g, &n);
    qfi_error_file(QF_ERR_INVALID, "m.onnx");
    ck_assert_str_eq(qf_error_message(), "m.onnx: node conv1 (Conv): group is 0");
    /* detail-level context stays inside; outer context outside the file */
    qf_error(QF_ERR_INVALID, "index 7 out of range");
    qf_error_prefix(QF_ERR_INVALID, "constant folding");
    qfi_error_node(QF_ERR_INVALID, &g, &n);
    qf_error_prefix(QF_ERR_INVALID, "at batch %d", 8);
    qfi_error_file(QF_ERR_INVALID, "other.qfm");
    ck_assert_str_eq(qf_error_message(),
                     "at batch 8: m.onnx: node conv1 (Conv): constant folding: index 7 out of range");
    /* a file first: the node goes after it */
    qf_error(QF_ERR_IO, "short read");
    qfi_error_file(QF_ERR_IO, "m.qfm");
    qfi_error_node(QF_ERR_IO, &g, &n);
    ck_assert_str_eq(qf_error_message(), "m.qfm: node conv1 (Conv): short read");
    /* a new message starts without context */
    qf_error(QF_ERR_IO, "again");
    qfi_error_file(QF_ERR_IO, "m.qfm");
    ck_assert_str_eq(qf_error_message(), "m.qfm: again");
}
END_TEST

/* qfi_tensor_bytes, the bound every inferred shape must pass (an overflow found by tests/fuzz) */
START_TEST(tensor_bytes_bounds)
{
    uint64_t b;
    ck_assert(qfi_tensor_bytes(QF_F32, 2, (const int64_t[]){3, 5}, &b) && b == 60);
    ck_assert(qfi_tensor_bytes(QF_I8, 1, (const int64_t[]){QF_MAX_TENSOR_BYTES}, &b));
    ck_assert(!qfi_tensor_bytes(QF_F16, 1, (const int64_t[]){QF_MAX_TENSOR_BYTES}, &b));
    ck_assert_uint_eq(b, 2 * (uint64_t)QF_MAX_TENSOR_BYTES);
    /* 2^40 * 2^40 overflows 64 bits: reported as UINT64_MAX, not wrapped */
    ck_assert(!qfi_tensor_bytes(QF_F32, 2, (const int64_t[]){(int64_t)1 << 40, (int64_t)1 << 40}, &b));
    ck_assert_uint_eq(b, UINT64_MAX);
    /* a zero dim does not excuse an absurd one, nor is a negative one a size */
    ck_assert(!qfi_tensor_bytes(QF_F32, 2, (const int64_t[]){0, (int64_t)1 << 62}, &b));
    ck_assert(!qfi_tensor_bytes(QF_F32, 2, (const int64_t[]){-1, 2}, &b));
    ck_assert(qfi_tensor_bytes(QF_F32, 0, NULL, &b) && b == 4);
}
END_TEST

START_TEST(dtype_traits)
{
    ck_assert_uint_eq(qf_dtype_info(QF_F32)->size, 4);
    ck_assert_uint_eq(qf_dtype_info(QF_I64)->size, 8);
    ck_assert_uint_eq(qf_dtype_info(QF_F16)->size, 2);
    qf_dtype t;
    ck_assert(qf_dtype_from_onnx(7, &t) && t == QF_I64);
    ck_assert(qf_dtype_from_onnx(10, &t) && t == QF_F16);
    ck_assert(!qf_dtype_from_onnx(11, &t)); /* double */
}
END_TEST

START_TEST(half_conversion)
{
    /* exact values, rounding to nearest even, overflow, subnormals */
    ck_assert_uint_eq(qf_f32_to_f16(1.0f), 0x3c00);
    ck_assert_uint_eq(qf_f32_to_f16(-2.0f), 0xc000);
    ck_assert_uint_eq(qf_f32_to_f16(65504.0f), 0x7bff);
    ck_assert_uint_eq(qf_f32_to_f16(65520.0f), 0x7c00);           /* rounds up to Inf */
    ck_assert_uint_eq(qf_f32_to_f16(1.0f + 1.0f / 2048), 0x3c00); /* tie -> even */
    ck_assert_uint_eq(qf_f32_to_f16(1.0f + 3.0f / 2048), 0x3c02); /* tie -> even (up) */
    ck_assert_uint_eq(qf_f32_to_f16(5.9604645e-8f), 0x0001);      /* smallest subnormal */
    ck_assert_float_eq(qf_f16_to_f32(0x0001), 5.9604645e-8f);
    ck_assert(isnan(qf_f16_to_f32(qf_f32_to_f16(NAN))));
    /* every half survives a round trip */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue; /* NaN payloads */
        ck_assert_uint_eq(qf_f32_to_f16(qf_f16_to_f32((uint16_t)h)), h);
    }
    ck_assert_uint_eq(qf_f32_to_bf16(1.0f), 0x3f80);
    ck_assert_float_eq(qf_bf16_to_f32(0x3f80), 1.0f);
    ck_assert_uint_eq(qf_f32_to_bf16(1.0f + 1.0f / 256), 0x3f80); /* tie -> even */
}
END_TEST

/* a -> Relu -> b -> Relu -> c, nodes added in reverse order */
static qf_graph *chain(void)
{
    qf_graph *g = qf_graph_new("chain");
    int64_t d[2] = {1, 4};
    int a = qf_graph_add_value(g, "a", QF_F32, 2, d);
    int b = qf_graph_add_value(g, "b", QF_F32, 2, NULL);
    int c = qf_graph_add_value(g, "c", QF_F32, 2, NULL);
    g->values[a].flags |= QF_VALUE_INPUT;
    g->values[c].flags |= QF_VALUE_OUTPUT;
    g->inputs = calloc(1, sizeof(int));
    g->outputs = calloc(1, sizeof(int));
    g->inputs[0] = a;
    g->outputs[0] = c;
    g->n_inputs = g->n_outputs = 1;
    qf_graph_add_node(g, "second", QF_OP_RELU, 1, &b, 1, &c);
    qf_graph_add_node(g, "first", QF_OP_RELU, 1, &a, 1, &b);
    return g;
}

START_TEST(graph_find_and_sort)
{
    qf_graph *g = chain();
    ck_assert_int_eq(qf_graph_find_value(g, "b"), 1);
    ck_assert_int_eq(qf_graph_find_value(g, "zz"), -1);
    qf_status st = qf_graph_prepare(g, 3);
    if (st == QF_ERR_UNSUPPORTED) { /* Relu not implemented in this build */
        qf_graph_free(g);
        return;
    }
    ck_assert_msg(st == QF_OK, "%s", qf_error_message());
    ck_assert_str_eq(g->nodes[0].name, "first");
    ck_assert_str_eq(g->nodes[1].name, "second");
    ck_assert_int_eq(g->values[2].dims[0], 3); /* batch applied */
    qf_graph_free(g);
}
END_TEST

START_TEST(graph_cycle_rejected)
{
    qf_graph *g = qf_graph_new("cyc.onnx");
    int64_t d[1] = {4};
    int a = qf_graph_add_value(g, "a", QF_F32, 1, d);
    int b = qf_graph_add_value(g, "b", QF_F32, 1, d);
    qf_graph_add_node(g, "n1", QF_OP_RELU, 1, &a, 1, &b);
    qf_graph_add_node(g, "n2", QF_OP_RELU, 1, &b, 1, &a);
    ck_assert_int_eq(qf_graph_prepare(g, 1), QF_ERR_INVALID);
    ck_assert_msg(strstr(qf_error_message(), "cyc.onnx") && strstr(qf_error_message(), "cycle"), "%s",
                  qf_error_message());
    qf_graph_free(g);
}
END_TEST

START_TEST(memory_plan_reuses_dead_buffers)
{
    /* a -> n0 -> b -> n1 -> c -> n2 -> d: a and c may share, b and d may share */
    qf_graph *g = qf_graph_new("plan");
    int64_t dims[1] = {256};
    int v[4];
    for (int i = 0; i < 4; i++) {
        char nm[2] = {(char)('a' + i), 0};
        v[i] = qf_graph_add_value(g, nm, QF_F32, 1, dims);
    }
    g->values[v[0]].flags |= QF_VALUE_INPUT;
    g->values[v[3]].flags |= QF_VALUE_OUTPUT;
    for (int i = 0; i < 3; i++) qf_graph_add_node(g, "n", QF_OP_RELU, 1, &v[i], 1, &v[i + 1]);
    size_t off[4], total;
    ck_assert_int_eq(qfi_plan_memory(g, 64, off, &total), QF_OK);
    ck_assert_uint_eq(total, 2 * 1024);
    ck_assert_uint_ne(off[0], off[1]);
    ck_assert_uint_ne(off[1], off[2]);
    ck_assert_uint_ne(off[2], off[3]);
    qf_graph_free(g);
}
END_TEST

/* read_at: a read no node lists keeps the value alive to it. An input x read
 * by n0 only would share its bytes with y, born at n1; read at n1 as well
 * (the CUDA engine's stem conv reading the graph's float input in place of
 * its skipped QuantizeLinear n0), x and y must not overlap. */
START_TEST(memory_plan_late_reads)
{
    qf_graph *g = qf_graph_new("late");
    int64_t dims[1] = {256};
    int x = qf_graph_add_value(g, "x", QF_F32, 1, dims), q = qf_graph_add_value(g, "q", QF_F32, 1, dims);
    int y = qf_graph_add_value(g, "y", QF_F32, 1, dims);
    g->values[x].flags |= QF_VALUE_INPUT;
    g->values[y].flags |= QF_VALUE_OUTPUT;
    qf_graph_add_node(g, "n0", QF_OP_RELU, 1, &x, 1, &q);
    qf_graph_add_node(g, "n1", QF_OP_RELU, 1, &q, 1, &y);
    size_t off[3], total;
    ck_assert_int_eq(qfi_plan_memory_views(g, NULL, NULL, 64, off, &total), QF_OK);
    ck_assert_uint_eq(off[x], off[y]); /* x's life ends at n0 */
    const int read_at[3] = {1, -1, -1};
    ck_assert_int_eq(qfi_plan_memory_views(g, NULL, read_at, 64, off, &total), QF_OK);
    ck_assert_uint_eq(total, 3 * 1024);
    ck_assert(off[x] + 1024 <= off[y] || off[y] + 1024 <= off[x]);
    ck_assert(off[x] + 1024 <= off[q] || off[q] + 1024 <= off[x]);
    qf_graph_free(g);
}
END_TEST

/* How large a batch fits: the check engines make before they allocate, and the
 * estimate eval and calib turn into a hint (the memory is given: no device needed) */
START_TEST(batch_that_fits)
{
    /* x (B, 1000) -> Relu -> a -> Relu -> y: two 4000-byte buffers live per image */
    qf_graph *g = qf_graph_new("fit.onnx");
    int x = input(g, "x", 2, (const int64_t[]){1, 1000});
    int a = value(g, "a"), y = value(g, "y");
    op(g, "r1", QF_OP_RELU, 1, &x, a);
    op(g, "r2", QF_OP_RELU, 1, &a, y);
    output(g, y);
    OK(qf_graph_prepare(g, 4));
    /* planned at batch 4: x and a, then a and y, 2 x 16000 bytes: 8000 an image */
    ck_assert_int_eq(qfi_max_batch(g, 80000, 1000), 10);
    ck_assert_int_eq(qfi_max_batch(g, 80000, 6), 6);
    ck_assert_int_eq(qfi_max_batch(g, 7999, 1000), 0);
    /* with memory to spare, a tensor's 4 GiB bound: 4000 bytes an image */
    ck_assert_int_eq(qfi_max_batch(g, UINT64_MAX, 1 << 30), (int)(QF_MAX_TENSOR_BYTES / 4000));
    ck_assert_int_eq(qfi_engine_fits(g, "memory", 32000, 32000), QF_OK);
    ck_assert_int_eq(qfi_engine_fits(g, "memory", 32000, 31999), QF_ERR_NOMEM);
    ck_assert_str_eq(qf_error_message(), "fit.onnx: batch 4 needs 32000 bytes (0.00 GiB) of memory for activations, "
                                         "but 31999 bytes (0.00 GiB) are free");
    /* the CPU backend asks the host, which has 64 KB to spare anywhere this runs */
    int fit = 0;
    qf_engine_opts cpu = {.device = QF_DEVICE_CPU};
    OK(qf_engine_max_batch(g, &cpu, 8, &fit));
    ck_assert_int_eq(fit, 8);
    qf_graph_free(g);
}
END_TEST

/* qf_engine_run_items: the leading items of a padded batch; 1 to the batch */
START_TEST(run_items_bounds)
{
    qf_graph *g = qf_graph_new("items.onnx");
    int x = input(g, "x", 2, (const int64_t[]){1, 3});
    int y = value(g, "y");
    op(g, "r", QF_OP_RELU, 1, &x, y);
    output(g, y);
    OK(qf_graph_prepare(g, 4));
    qf_engine *e;
    qf_engine_opts cpu = {.device = QF_DEVICE_CPU};
    OK(qf_engine_create(g, &cpu, &e));
    float *in = qf_engine_input(e, 0);
    for (int k = 0; k < 12; k++) in[k] = (float)(k - 6);
    OK(qf_engine_run_items(e, 3));
    const float *out = qf_engine_output(e, 0);
    for (int k = 0; k < 9; k++) ck_assert_float_eq(out[k], k < 6 ? 0.0f : (float)(k - 6));
    ck_assert_int_eq(qf_engine_run_items(e, 0), QF_ERR_USAGE);
    ck_assert_int_eq(qf_engine_run_items(e, 5), QF_ERR_USAGE);
    ck_assert_str_eq(qf_error_message(), "qf_engine_run_items: 5 items for an engine at batch 4");
    /* qf_engine_write_input: into the host buffer on the CPU engine, within the input */
    const float two[2] = {7.0f, -7.0f};
    OK(qf_engine_write_input(e, 0, 10 * sizeof(float), two, sizeof two));
    ck_assert_float_eq(in[10], 7.0f);
    ck_assert_float_eq(in[11], -7.0f);
    ck_assert_int_eq(qf_engine_write_input(e, 0, 11 * sizeof(float), two, sizeof two), QF_ERR_USAGE);
    ck_assert_str_eq(qf_error_message(), "qf_engine_write_input: 8 bytes at 44 of input x, which has 48");
    ck_assert_int_eq(qf_engine_write_input(e, 1, 0, two, sizeof two), QF_ERR_USAGE);
    /* qf_engine_read_output: out of the last run's output, within it */
    float got[3];
    OK(qf_engine_read_output(e, 0, 6 * sizeof(float), got, sizeof got));
    for (int k = 0; k < 3; k++) ck_assert_float_eq(got[k], out[6 + k]);
    ck_assert_int_eq(qf_engine_read_output(e, 0, 40, got, sizeof got), QF_ERR_USAGE);
    qf_engine_free(e);
    qf_graph_free(g);
}
END_TEST

START_TEST(broadcast_shapes)
{
    int64_t a[3] = {2, 1, 4}, b[2] = {3, 1}, out[QF_MAX_DIMS];
    int n;
    ck_assert_int_eq(qfi_broadcast_shape(3, a, 2, b, &n, out), QF_OK);
    ck_assert_int_eq(n, 3);
    ck_assert(out[0] == 2 && out[1] == 3 && out[2] == 4);
    int64_t s[3];
    qfi_broadcast_strides(2, b, 3, out, s);
    ck_assert(s[0] == 0 && s[1] == 1 && s[2] == 0);
    int64_t c[1] = {5};
    ck_assert_int_eq(qfi_broadcast_shape(3, a, 1, c, &n, out), QF_ERR_INVALID);
}
END_TEST

START_TEST(device_parse)
{
    qf_device_kind k;
    int idx;
    ck_assert_int_eq(qf_device_parse("cpu", &k, &idx), QF_OK);
    ck_assert_int_eq(k, QF_DEVICE_CPU);
    ck_assert_int_eq(qf_device_parse("cuda:3", &k, &idx), QF_OK);
    ck_assert(k == QF_DEVICE_CUDA && idx == 3);
    ck_assert_int_eq(qf_device_parse("cuda:x", &k, &idx), QF_ERR_USAGE);
    ck_assert_int_eq(qf_device_parse("tpu", &k, &idx), QF_ERR_USAGE);
}
END_TEST

/* ---- qfi_parallel_for: every index once, whichever threads run it -------------------- */

typedef struct {
    _Atomic int *hits;
    int threads;
} parallel_job;

static void count_hit(void *arg, int64_t i)
{
    parallel_job *j = arg;
    j->hits[i]++;
}

/* Each item runs a parallel-for of its own over a slice of hits: the pool is
 * taken by the outer call, so the inner ones start their own threads. */
static void nested_item(void *arg, int64_t i)
{
    parallel_job *j = arg;
    parallel_job inner = {j->hits + i * 64, j->threads};
    qfi_parallel_for(j->threads, 64, count_hit, &inner);
}

static void *caller_thread(void *arg)
{
    parallel_job *j = arg;
    for (int rep = 0; rep < 50; rep++) qfi_parallel_for(j->threads, 1000, count_hit, j);
    return NULL;
}

START_TEST(parallel_for_runs_each_index_once)
{
    enum { N = 1000 };
    static _Atomic int hits[4][N * 64];
    memset(hits, 0, sizeof hits);
    /* more threads than items, odd splits, many calls that reuse the pool */
    for (int threads = 1; threads <= 9; threads++) {
        parallel_job j = {hits[0], threads};
        for (int n = 0; n <= 13; n++) qfi_parallel_for(threads, n, count_hit, &j);
    }
    for (int i = 0; i < 13; i++) ck_assert_int_eq(hits[0][i], 9 * (13 - i));
    /* nested calls */
    parallel_job outer = {hits[1], 3};
    qfi_parallel_for(3, N, nested_item, &outer);
    for (int i = 0; i < N * 64; i++) ck_assert_int_eq(hits[1][i], 1);
    /* callers on two threads at once: one gets the pool, the other its own threads */
    pthread_t t[2];
    parallel_job cj[2] = {{hits[2], 4}, {hits[3], 3}};
    for (int k = 0; k < 2; k++) ck_assert_int_eq(pthread_create(&t[k], NULL, caller_thread, &cj[k]), 0);
    for (int k = 0; k < 2; k++) pthread_join(t[k], NULL);
    for (int k = 2; k < 4; k++)
        for (int i = 0; i < 1000; i++) ck_assert_int_eq(hits[k][i], 50);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("core");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, status_messages);
    tcase_add_test(tc, error_context_added_once);
    tcase_add_test(tc, tensor_bytes_bounds);
    tcase_add_test(tc, dtype_traits);
    tcase_add_test(tc, half_conversion);
    tcase_add_test(tc, graph_find_and_sort);
    tcase_add_test(tc, graph_cycle_rejected);
    tcase_add_test(tc, memory_plan_reuses_dead_buffers);
    tcase_add_test(tc, memory_plan_late_reads);
    tcase_add_test(tc, batch_that_fits);
    tcase_add_test(tc, run_items_bounds);
    tcase_add_test(tc, broadcast_shapes);
    tcase_add_test(tc, device_parse);
    tcase_add_test(tc, parallel_for_runs_each_index_once);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
