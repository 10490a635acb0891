/* The .qfm model file: write/read round trips that must run bit for bit like
 * the in-memory quantized graph, loading at another batch, and a corpus of
 * corrupt files made here from a good one (truncations, a flipped bit
 * anywhere, sections outside the file or overlapping, absurd counts, a newer
 * version, a bad magic) that must each fail with a one-line message naming
 * the file. A few of them are kept in $top_builddir/tests/bad/qfm/ and fed to
 * `qforge info`. ResNet-20 and MobileNetV2 run where ../shared/data exists. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>
#include "internal.h"
#include "testutil.h"

static char out_dir[1024];  /* tests/bad/qfm in the build tree */
static char tmp_dir[1024];  /* scratch for the bulk corpus */
static char data_dir[1024]; /* ../shared/data */

/* ---- a small graph with every kind of node the quantizer makes --------------------- */

/* x (B,3,8,8) -> conv1 3x3 -> relu -> r1 -> maxpool -> conv2 1x1 -> sigmoid -> resize x2 (nearest)
 * -> concat with r1 -> global average pool -> reshape to the constant [B,12] -> gemm -> y (B,10).
 * The reshape target hard-codes the batch the graph is prepared at. */
static qf_graph *net(int batch)
{
    rng = 7;
    qf_graph *g = qf_graph_new("net");
    int x = input(g, "x", 4, (int64_t[]){batch, 3, 8, 8});
    int w1 = weight(g, "w1", 4, (int64_t[]){8, 3, 3, 3}, -0.5f, 0.5f);
    int b1 = weight(g, "b1", 1, (int64_t[]){8}, -0.2f, 0.2f);
    int w2 = weight(g, "w2", 4, (int64_t[]){4, 8, 1, 1}, -0.5f, 0.5f);
    int sc = weight(g, "up_scales", 1, (int64_t[]){4}, 1, 1);
    float *scd = g->values[sc].data;
    scd[2] = scd[3] = 2.0f;
    int shp = qf_graph_add_value(g, "flat_shape", QF_I64, 1, (int64_t[]){2});
    int64_t *sd = malloc(2 * sizeof *sd);
    sd[0] = batch;
    sd[1] = 12;
    g->values[shp].data = sd;
    g->values[shp].flags |= QF_VALUE_CONST;
    int wg = weight(g, "wg", 2, (int64_t[]){10, 12}, -0.5f, 0.5f);
    int bg = weight(g, "bg", 1, (int64_t[]){10}, -0.5f, 0.5f);
    int c1 = value(g, "c1"), r1 = value(g, "r1"), p1 = value(g, "p1"), c2 = value(g, "c2"), s2 = value(g, "s2"),
        u = value(g, "u"), cc = value(g, "cc"), gp = value(g, "gp"), fl = value(g, "fl"), y = value(g, "y");
    qf_node *n = op(g, "conv1", QF_OP_CONV, 3, (int[]){x, w1, b1}, c1);
    set_ints(n, "pads", 4, (int64_t[]){1, 1, 1, 1});
    set_ints(n, "kernel_shape", 2, (int64_t[]){3, 3});
    op(g, "relu1", QF_OP_RELU, 1, (int[]){c1}, r1);
    n = op(g, "pool1", QF_OP_MAX_POOL, 1, (int[]){r1}, p1);
    set_ints(n, "kernel_shape", 2, (int64_t[]){2, 2});
    set_ints(n, "strides", 2, (int64_t[]){2, 2});
    op(g, "conv2", QF_OP_CONV, 2, (int[]){p1, w2}, c2);
    op(g, "sigmoid2", QF_OP_SIGMOID, 1, (int[]){c2}, s2);
    n = op(g, "up", QF_OP_RESIZE, 3, (int[]){s2, -1, sc}, u);
    attr(n, "mode", QF_ATTR_STRING)->s = strdup("nearest");
    attr(n, "coordinate_transformation_mode", QF_ATTR_STRING)->s = strdup("asymmetric");
    attr(n, "nearest_mode", QF_ATTR_STRING)->s = strdup("floor");
    n = op(g, "cat", QF_OP_CONCAT, 2, (int[]){r1, u}, cc);
    set_int(n, "axis", 1);
    op(g, "gap", QF_OP_GLOBAL_AVERAGE_POOL, 1, (int[]){cc}, gp);
    op(g, "flatten", QF_OP_RESHAPE, 2, (int[]){gp, shp}, fl);
    n = op(g, "fc", QF_OP_GEMM, 3, (int[]){fl, wg, bg}, y);
    set_float(n, "alpha", 0.5f);
    set_int(n, "transB", 1);
    output(g, y);
    for (int i = 0; i < g->n_nodes; i++) OK(qfi_ops[g->nodes[i].op]->parse(g, &g->nodes[i]));
    OK(qf_graph_prepare(g, batch));
    return g;
}

/* The synthetic net prepared at `batch` and quantized to `prec`. */
static qf_graph *quantized_net(int batch, qf_precision prec)
{
    qf_graph *g = net(batch);
    float *x = random_input(g, 11, -1, 1);
    qf_calib_table *t = calibrate_minmax(g, x);
    qf_quant_opts o;
    qf_quant_opts_init(&o);
    o.precision = prec;
    OK(qf_quantize(g, t, &o, NULL));
    qf_calib_table_free(t);
    free(x);
    return g;
}

static void sample_meta(qf_qfm_meta *m, qf_precision prec)
{
    qf_qfm_meta_init(m);
    snprintf(m->preprocess, sizeof m->preprocess, "--size 8x8 --mean 0.5,0.25,0.125 --std 0.5,0.5,0.5");
    memset(m->source_sha256, 'c', 64);
    snprintf(m->calib_method, sizeof m->calib_method, "minmax");
    m->calib_images = 1234;
    m->precision = prec;
}

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)len + 1);
    ck_assert_int_eq(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return b;
}

static void spill(const char *path, const uint8_t *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    ck_assert_int_eq(fwrite(b, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

/* Same nodes, precisions, activations; same tensors by name with the same dtype, shape, scale and data. */
static void assert_same_graph(const qf_graph *a, const qf_graph *b)
{
    ck_assert_int_eq(a->n_nodes, b->n_nodes);
    ck_assert_int_eq(a->batch, b->batch);
    ck_assert_int_eq(a->opset, b->opset);
    for (int i = 0; i < a->n_nodes; i++) {
        const qf_node *x = &a->nodes[i], *y = &b->nodes[i];
        ck_assert_str_eq(x->name, y->name);
        ck_assert_int_eq(x->op, y->op);
        ck_assert_int_eq(x->precision, y->precision);
        ck_assert_int_eq(x->act, y->act);
        ck_assert(x->act_lo == y->act_lo && x->act_hi == y->act_hi);
        ck_assert_int_eq(x->n_in, y->n_in);
        ck_assert_int_eq(x->n_attr, y->n_attr);
        for (int k = 0; k < x->n_in; k++) {
            if (x->in[k] < 0) {
                ck_assert_int_lt(y->in[k], 0);
                continue;
            }
            const qf_value *u = &a->values[x->in[k]], *v = &b->values[y->in[k]];
            ck_assert_str_eq(u->name, v->name);
            ck_assert_int_eq(u->dtype, v->dtype);
            ck_assert_int_eq(u->ndim, v->ndim);
            ck_assert_int_eq(u->flags, v->flags);
            ck_assert(memcmp(&u->scale, &v->scale, sizeof u->scale) == 0);
            for (int d = 0; d < u->ndim; d++) ck_assert_int_eq(u->dims[d], v->dims[d]);
            if (u->data) ck_assert(memcmp(u->data, v->data, qf_value_bytes(u)) == 0);
        }
    }
}

/* ---- round trips ---------------------------------------------------------------------- */

static void roundtrip(qf_precision prec)
{
    qf_graph *g = prec == QF_PREC_FP32 ? net(2) : quantized_net(2, prec);
    char path[1100], path2[1100];
    snprintf(path, sizeof path, "%s/net-%s.qfm", tmp_dir, qf_precision_name(prec));
    snprintf(path2, sizeof path2, "%s/net-%s-again.qfm", tmp_dir, qf_precision_name(prec));
    qf_qfm_meta m, m2;
    sample_meta(&m, prec);
    OK(qf_qfm_write(g, &m, path));
    ck_assert(qf_qfm_probe(path));
    qf_graph *r;
    OK(qf_qfm_read(path, 0, &r, &m2));
    ck_assert_str_eq(r->source, path);
    ck_assert_str_eq(m2.preprocess, m.preprocess);
    ck_assert_str_eq(m2.source_sha256, m.source_sha256);
    ck_assert_str_eq(m2.calib_method, "minmax");
    ck_assert_int_eq(m2.calib_images, 1234);
    ck_assert_int_eq(m2.precision, prec);
    ck_assert_str_eq(m2.tool_version, qf_version());
    ck_assert_int_eq(m2.batch, 2);
    assert_same_graph(g, r);
    /* weights come back 64-byte aligned */
    for (int v = 0; v < r->n_values; v++)
        if (r->values[v].flags & QF_VALUE_CONST) ck_assert_int_eq((uintptr_t)r->values[v].data % 64, 0);
    /* identical outputs, bit for bit */
    float *x = random_input(g, 99, -1, 1);
    float *y0 = run(g, x, NULL, NULL), *y1 = run(r, x, NULL, NULL);
    ck_assert(memcmp(y0, y1, qf_value_bytes(&g->values[g->outputs[0]])) == 0);
    /* reading loses nothing: writing what was read gives the same bytes */
    OK(qf_qfm_write(r, &m2, path2));
    size_t n1, n2;
    uint8_t *b1 = slurp(path, &n1), *b2 = slurp(path2, &n2);
    ck_assert_int_eq(n1, n2);
    ck_assert(memcmp(b1, b2, n1) == 0);
    free(b1), free(b2), free(x), free(y0), free(y1);
    qf_graph_free(g);
    qf_graph_free(r);
}

START_TEST(roundtrip_int8) { roundtrip(QF_PREC_INT8); }
END_TEST
START_TEST(roundtrip_fp16) { roundtrip(QF_PREC_FP16); }
END_TEST
START_TEST(roundtrip_fp32) { roundtrip(QF_PREC_FP32); }
END_TEST

/* A graph stored at batch 2, read at batch 5 (and 1), gives each image what batch 2 gave it. */
static void rebatch(qf_precision prec)
{
    qf_graph *g = prec == QF_PREC_FP32 ? net(2) : quantized_net(2, prec);
    char path[1100];
    snprintf(path, sizeof path, "%s/rebatch-%s.qfm", tmp_dir, qf_precision_name(prec));
    OK(qf_qfm_write(g, NULL, path));
    const int B = 6;
    qf_graph *r;
    qf_qfm_meta m;
    OK(qf_qfm_read(path, B, &r, &m));
    ck_assert_int_eq(m.batch, 2);
    ck_assert_int_eq(r->batch, B);
    ck_assert_int_eq(r->values[r->inputs[0]].dims[0], B);
    ck_assert_int_eq(r->values[r->outputs[0]].dims[0], B);
    float *x = random_input(r, 5, -1, 1);
    float *yb = run(r, x, NULL, NULL);
    const size_t in2 = qf_value_bytes(&g->values[g->inputs[0]]), out2 = qf_value_bytes(&g->values[g->outputs[0]]);
    for (int i = 0; i < B; i += 2) {
        float *y = run(g, x + i * (in2 / sizeof(float) / 2), NULL, NULL);
        ck_assert_msg(memcmp(y, yb + i * (out2 / sizeof(float) / 2), out2) == 0, "%s: images %d-%d differ at batch %d",
                      qf_precision_name(prec), i, i + 1, B);
        free(y);
    }
    free(x), free(yb);
    qf_graph_free(r);
    OK(qf_qfm_read(path, 1, &r, NULL));
    ck_assert_int_eq(r->values[r->outputs[0]].dims[0], 1);
    qf_graph_free(r);
    qf_graph_free(g);
}

START_TEST(rebatch_int8) { rebatch(QF_PREC_INT8); }
END_TEST
START_TEST(rebatch_fp16) { rebatch(QF_PREC_FP16); }
END_TEST
START_TEST(rebatch_fp32) { rebatch(QF_PREC_FP32); }
END_TEST

/* A node with more inputs than the common case (Concat of 70): stored, read back, re-batched. */
START_TEST(wide_node)
{
    qf_graph *g = qf_graph_new("wide");
    int x = input(g, "x", 2, (int64_t[]){2, 3});
    int in[70], y = value(g, "y");
    for (int k = 0; k < 70; k++) in[k] = x;
    set_int(op(g, "cat", QF_OP_CONCAT, 70, in, y), "axis", 1);
    output(g, y);
    OK(qfi_ops[QF_OP_CONCAT]->parse(g, &g->nodes[0]));
    OK(qf_graph_prepare(g, 2));
    char path[1100];
    snprintf(path, sizeof path, "%s/wide.qfm", tmp_dir);
    OK(qf_qfm_write(g, NULL, path));
    qf_graph *r;
    OK(qf_qfm_read(path, 5, &r, NULL));
    const qf_value *ry = &r->values[r->outputs[0]];
    ck_assert_int_eq(ry->ndim, 2);
    ck_assert_int_eq(ry->dims[0], 5);
    ck_assert_int_eq(ry->dims[1], 210);
    qf_graph_free(r);
    qf_graph_free(g);
}
END_TEST

START_TEST(write_errors)
{
    qf_graph *g = quantized_net(2, QF_PREC_INT8);
    ck_assert_int_eq(qf_qfm_write(g, NULL, "/nonexistent-dir-qforge/x.qfm"), QF_ERR_IO);
    ck_assert_str_eq(qf_error_message(),
                     "/nonexistent-dir-qforge/x.qfm: cannot create a temporary file beside it: No such file or directory");
    qf_qfm_meta m;
    sample_meta(&m, QF_PREC_INT8);
    snprintf(m.calib_method, sizeof m.calib_method, "magic");
    char path[1100], want[1200];
    snprintf(path, sizeof path, "%s/never.qfm", tmp_dir);
    ck_assert_int_eq(qf_qfm_write(g, &m, path), QF_ERR_USAGE);
    snprintf(want, sizeof want, "%s: unknown calibration method 'magic'", path);
    ck_assert_str_eq(qf_error_message(), want);
    /* a node the format cannot hold: the file, then the node, once each */
    qf_precision prec = g->nodes[0].precision;
    g->nodes[0].precision = QF_PRECISION_COUNT;
    ck_assert_int_eq(qf_qfm_write(g, NULL, path), QF_ERR_INVALID);
    snprintf(want, sizeof want, "%s: node %s (%s): cannot be stored (op, precision, activation or counts out of range)",
             path, g->nodes[0].name, qf_op_name(g->nodes[0].op));
    ck_assert_str_eq(qf_error_message(), want);
    g->nodes[0].precision = prec;
    ck_assert_int_ne(access(path, F_OK), 0);
    qf_graph *r;
    ck_assert_int_eq(qf_qfm_read(path, 0, &r, NULL), QF_ERR_IO);
    ck_assert_ptr_null(r);
    ck_assert_int_eq(qf_qfm_read(path, -1, &r, NULL), QF_ERR_USAGE);
    qf_graph_free(g);
}
END_TEST

/* ---- the corruption corpus -------------------------------------------------------------- */

/* What the test knows of the layout (qforge-model(5)), to aim its damage. */
typedef struct layout {
    uint64_t off[4], size[4]; /* by section type: 1 META, 2 GRAPH, 3 WEIGHTS */
    int entry[4];             /* index of the type's section table entry */
    uint32_t count;
} layout;

static uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t le64(const uint8_t *p) { return le32(p) | (uint64_t)le32(p + 4) << 32; }
static void set32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> 8 * i);
}
static void set64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> 8 * i);
}

static layout read_layout(const uint8_t *b)
{
    layout L = {.count = le32(b + 16)};
    for (uint32_t i = 0; i < L.count; i++) {
        const uint8_t *e = b + 32 + 32 * i;
        uint32_t t = le32(e);
        ck_assert(t >= 1 && t <= 3);
        L.off[t] = le64(e + 8);
        L.size[t] = le64(e + 16);
        L.entry[t] = (int)i;
    }
    return L;
}

/* After a deliberate edit: every CRC made valid again, so the reader's other checks are what must catch it. */
static void fix_crcs(uint8_t *b, size_t n)
{
    uint32_t count = le32(b + 16);
    if (32 + 32 * (uint64_t)count > n) count = 0; /* a damaged count: only the header CRC */
    for (uint32_t i = 0; i < count; i++) {
        uint8_t *e = b + 32 + 32 * i;
        uint64_t off = le64(e + 8), size = le64(e + 16);
        if (off <= n && size <= n - off) set32(e + 24, (uint32_t)crc32(0, b + off, (uInt)size));
    }
    set32(b + 24, (uint32_t)crc32(0, b + 32, 32 * count));
    set32(b + 28, (uint32_t)crc32(0, b, 28));
}

/* Reads bytes b[0..n) from a file `name`; the read must fail with `want` (or
 * any error for QF_OK) and a one-line message naming the file and containing
 * `needle`. */
static void expect_bad(const char *dir, const char *name, const uint8_t *b, size_t n, qf_status want, const char *needle)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    spill(path, b, n);
    qf_graph *g = (qf_graph *)1;
    qf_qfm_meta m;
    qf_status st = qf_qfm_read(path, 0, &g, &m);
    const char *msg = qf_error_message();
    ck_assert_msg(st != QF_OK, "%s: read succeeded", name);
    ck_assert_ptr_null(g);
    if (want != QF_OK) ck_assert_msg(st == want, "%s: status %s, expected %s: %s", name, qf_status_name(st), qf_status_name(want), msg);
    ck_assert_msg(strncmp(msg, path, strlen(path)) == 0, "%s: message does not start with the file: %s", name, msg);
    ck_assert_msg(strchr(msg, '\n') == NULL, "%s: message has several lines: %s", name, msg);
    if (needle) ck_assert_msg(strstr(msg, needle) != NULL, "%s: message lacks '%s': %s", name, needle, msg);
}

static uint8_t *good_file(size_t *n, layout *L)
{
    qf_graph *g = quantized_net(2, QF_PREC_INT8);
    char path[1100];
    snprintf(path, sizeof path, "%s/good.qfm", out_dir);
    qf_qfm_meta m;
    sample_meta(&m, QF_PREC_INT8);
    OK(qf_qfm_write(g, &m, path));
    qf_graph_free(g);
    uint8_t *b = slurp(path, n);
    *L = read_layout(b);
    return b;
}

START_TEST(truncated_anywhere)
{
    size_t n;
    layout L;
    uint8_t *good = good_file(&n, &L);
    expect_bad(out_dir, "truncated.qfm", good, n - 1, QF_ERR_FORMAT, "truncated");
    expect_bad(tmp_dir, "empty.qfm", good, 0, QF_ERR_FORMAT, "empty");
    for (size_t len = 1; len < n; len += len < 300 ? 1 : 97) {
        char name[64];
        snprintf(name, sizeof name, "trunc-%zu.qfm", len);
        expect_bad(tmp_dir, name, good, len, QF_ERR_FORMAT, "truncated");
    }
    /* and one byte too many */
    uint8_t *more = calloc(n + 1, 1);
    memcpy(more, good, n);
    expect_bad(tmp_dir, "appended.qfm", more, n + 1, QF_ERR_FORMAT, "appended");
    free(more);
    free(good);
}
END_TEST

/* Which part of the file byte i lies in, as the reader's message names it. */
static const char *part_of(const layout *L, size_t i)
{
    static const char *const names[4] = {NULL, "section META", "section GRAPH", "section WEIGHTS"};
    if (i < 4) return "bad magic";
    if (i < 32) return NULL; /* version or header CRC: checked by the caller */
    if (i < 32 + 32 * (size_t)L->count) return "section table CRC";
    for (int t = 1; t <= 3; t++)
        if (i >= L->off[t] && i < L->off[t] + L->size[t]) return names[t];
    return "outside every section";
}

START_TEST(bit_flip_anywhere)
{
    size_t n;
    layout L;
    uint8_t *good = good_file(&n, &L);
    uint8_t *b = malloc(n);
    int flips = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(b, good, n);
        b[i] ^= (uint8_t)(1u << (i % 8));
        char name[64];
        snprintf(name, sizeof name, "flip-%zu.qfm", i);
        const char *part = part_of(&L, i);
        if (i >= 6 && i < 8) {
            /* the major version: newer is refused as such, 0 does not exist */
            bool newer = (le32(b + 4) >> 16) > 1;
            expect_bad(tmp_dir, name, b, n, newer ? QF_ERR_UNSUPPORTED : QF_ERR_FORMAT, "format version");
        } else if (i >= 4 && i < 32) {
            expect_bad(tmp_dir, name, b, n, QF_ERR_FORMAT, "header CRC");
        } else {
            expect_bad(tmp_dir, name, b, n, QF_ERR_FORMAT, part);
            if (strncmp(part, "section ", 8) == 0) ck_assert_ptr_nonnull(strstr(qf_error_message(), "CRC mismatch"));
        }
        flips++;
    }
    ck_assert_int_eq(flips, (int)n);
    /* one of each, kept for the CLI test and for people */
    static const struct {
        int type;
        const char *file;
    } keep[] = {{1, "bitflip_meta.qfm"}, {2, "bitflip_graph.qfm"}, {3, "bitflip_weights.qfm"}};
    for (size_t k = 0; k < sizeof keep / sizeof *keep; k++) {
        memcpy(b, good, n);
        b[L.off[keep[k].type] + L.size[keep[k].type] / 2] ^= 0x10;
        expect_bad(out_dir, keep[k].file, b, n, QF_ERR_FORMAT, "CRC mismatch");
    }
    free(b);
    free(good);
}
END_TEST

/* Damage with valid CRCs: each bit of the header, the table, META and GRAPH
 * (and one bit of each WEIGHTS byte) flipped and the CRCs recomputed, so the
 * structural checks alone stand between the file and the engine. Each read
 * must fail cleanly or give a graph that runs. */
START_TEST(structural_fuzz)
{
    size_t n;
    layout L;
    uint8_t *good = good_file(&n, &L);
    uint8_t *b = malloc(n);
    int failed = 0, loaded = 0;
    char path[1200];
    snprintf(path, sizeof path, "%s/fuzz.qfm", tmp_dir);
    float *x = calloc(2 * 3 * 8 * 8, sizeof *x);
    const uint64_t from[4] = {8, L.off[1], L.off[2], L.off[3]};
    const uint64_t to[4] = {32 + 32 * (uint64_t)L.count, L.off[1] + L.size[1], L.off[2] + L.size[2], L.off[3] + L.size[3]};
    for (int t = 0; t <= 3; t++)
        for (uint64_t i = from[t]; i < to[t]; i++)
            for (int bit = t == 3 ? (int)(i % 8) : 0; bit < (t == 3 ? (int)(i % 8) + 1 : 8); bit++) {
                if (i >= 20 && i < 32) continue; /* the CRCs themselves (and reserved flags) */
                memcpy(b, good, n);
                b[i] ^= (uint8_t)(1u << bit);
                fix_crcs(b, n);
                spill(path, b, n);
                qf_graph *g;
                qf_status st = qf_qfm_read(path, 0, &g, NULL);
                if (st != QF_OK) {
                    const char *msg = qf_error_message();
                    ck_assert_msg(strncmp(msg, path, strlen(path)) == 0 && !strchr(msg, '\n'), "byte %llu bit %d: %s",
                                  (unsigned long long)i, bit, msg);
                    failed++;
                    continue;
                }
                /* a legitimately different model (another name, scale, attribute value): it must run */
                qf_engine_opts o = {.device = QF_DEVICE_CPU, .threads = 1};
                qf_engine *e;
                if (g->n_inputs == 1 && qf_value_bytes(&g->values[g->inputs[0]]) <= 2 * 3 * 8 * 8 * sizeof(float) &&
                    qf_engine_create(g, &o, &e) == QF_OK) {
                    memcpy(qf_engine_input(e, 0), x, qf_value_bytes(&g->values[g->inputs[0]]));
                    (void)qf_engine_run(e);
                    qf_engine_free(e);
                }
                qf_graph_free(g);
                loaded++;
            }
    printf("structural fuzz: %d damaged files refused, %d still valid models\n", failed, loaded);
    ck_assert_int_gt(failed, 0);
    free(x);
    free(b);
    free(good);
}
END_TEST

/* Offset in GRAPH of the record that starts with this name (u32 length + bytes). */
static uint64_t find_record(const uint8_t *b, const layout *L, const char *name)
{
    size_t len = strlen(name);
    for (uint64_t i = L->off[2]; i + 4 + len <= L->off[2] + L->size[2]; i++)
        if (le32(b + i) == len && memcmp(b + i + 4, name, len) == 0) return i + 4 + len;
    ck_abort_msg("no record %s", name);
    return 0;
}

START_TEST(hostile_layouts)
{
    size_t n;
    layout L;
    uint8_t *good = good_file(&n, &L);
    uint8_t *b = malloc(n + 64);
#define DAMAGE(file, want, needle, ...)                                                                               \
    do {                                                                                                              \
        memcpy(b, good, n);                                                                                           \
        __VA_ARGS__;                                                                                                  \
        fix_crcs(b, n);                                                                                               \
        expect_bad(out_dir, file, b, n, want, needle);                                                                \
    } while (0)
    uint8_t *ge = b + 32 + 32 * L.entry[2], *me = b + 32 + 32 * L.entry[1], *we = b + 32 + 32 * L.entry[3];
    /* a section pointing outside the file, by size and by an offset that would overflow */
    DAMAGE("outside.qfm", QF_ERR_FORMAT, "outside the file", set64(ge + 16, n));
    DAMAGE("outside_overflow.qfm", QF_ERR_FORMAT, "outside the file", set64(ge + 8, UINT64_MAX - 8));
    DAMAGE("in_header.qfm", QF_ERR_FORMAT, "outside the file", set64(me + 8, 40));
    /* overlapping sections */
    DAMAGE("overlap.qfm", QF_ERR_FORMAT, "overlap", set64(me + 16, le64(me + 16) + 8));
    DAMAGE("twice.qfm", QF_ERR_FORMAT, "two META sections", set32(we, 1));
    DAMAGE("misaligned.qfm", QF_ERR_FORMAT, "aligned", set64(we + 8, le64(we + 8) - 8); set64(we + 16, le64(we + 16) + 8));
    DAMAGE("no_sections.qfm", QF_ERR_FORMAT, "sections", set32(b + 16, 0));
    DAMAGE("many_sections.qfm", QF_ERR_FORMAT, "sections", set32(b + 16, 0x7fffffff));
    /* absurd counts */
    uint8_t *G = b + L.off[2];
    DAMAGE("absurd_count.qfm", QF_ERR_FORMAT, "tensors", set32(G, 0xffffffffu));
    DAMAGE("count_vs_bytes.qfm", QF_ERR_FORMAT, "need at least", set32(G, 399999));
    DAMAGE("absurd_nodes.qfm", QF_ERR_FORMAT, "nodes", set32(G + 4, 99999));
    DAMAGE("absurd_meta.qfm", QF_ERR_FORMAT, "section META", set32(b + L.off[1], 0xfffffff0u));
    DAMAGE("batch_zero.qfm", QF_ERR_FORMAT, "batch", set32(G + 24, 0));
    /* the first tensor "x": dtype, rank, dims, name length */
    uint64_t xv = find_record(good, &L, "x");
    DAMAGE("bad_dtype.qfm", QF_ERR_FORMAT, "dtype", b[xv] = 200);
    DAMAGE("bad_rank.qfm", QF_ERR_FORMAT, "dims", b[xv + 1] = 9);
    DAMAGE("negative_dim.qfm", QF_ERR_FORMAT, "shape", set64(b + xv + 8, (uint64_t)-5));
    DAMAGE("huge_dim.qfm", QF_ERR_FORMAT, "shape", set64(b + xv + 16, (uint64_t)1 << 40));
    DAMAGE("huge_name.qfm", QF_ERR_FORMAT, "name of", set32(b + xv - 5, 0xfffffff0u));
    DAMAGE("bad_flags.qfm", QF_ERR_FORMAT, "flags", b[xv + 2] = 0x80);
    DAMAGE("input_batch.qfm", QF_ERR_FORMAT, "batch", set64(b + xv + 8, 3));
    /* the output "y" renamed "x" */
    uint64_t yv = find_record(good, &L, "y");
    DAMAGE("duplicate_name.qfm", QF_ERR_FORMAT, "two tensors are named x", b[yv - 1] = 'x');
    /* the node conv1: op, precision, counts, an input index */
    uint64_t cn = find_record(good, &L, "conv1");
    DAMAGE("bad_op.qfm", QF_ERR_FORMAT, "op 9999", set32(b + cn, 9999));
    DAMAGE("bad_precision.qfm", QF_ERR_FORMAT, "precision", b[cn + 4] = 7);
    DAMAGE("bad_act.qfm", QF_ERR_FORMAT, "activation", b[cn + 5] = 9);
    DAMAGE("absurd_inputs.qfm", QF_ERR_FORMAT, "inputs", set32(b + cn + 16, 0xffffffffu));
    DAMAGE("absurd_attrs.qfm", QF_ERR_FORMAT, "attributes", set32(b + cn + 24, 0x10000000u));
    DAMAGE("bad_index.qfm", QF_ERR_FORMAT, "tensor index", set32(b + cn + 28, 123456));
    /* its first input made its own output */
    uint64_t out0 = cn + 28 + 4 * (uint64_t)le32(good + cn + 16);
    DAMAGE("read_before_write.qfm", QF_ERR_FORMAT, "before any node writes it", set32(b + cn + 28, le32(good + out0)));
    /* an INT8 bias beyond the quantizer's clamp, which the kernels rely on */
    uint64_t bias = find_record(good, &L, "conv1/bias_i32");
    uint64_t bias_at = L.off[3] + le64(good + bias + 16);
    DAMAGE("bias_overflow.qfm", QF_ERR_FORMAT, "outside +-2^30", set32(b + bias_at, 0x7fffffff));
    /* a newer format version; a bad magic; an ONNX file */
    DAMAGE("newer_version.qfm", QF_ERR_UNSUPPORTED, "format version 2 is newer than this qforge reads (1)",
           set32(b + 4, 2u << 16));
    memcpy(b, good, n);
    set32(b + 4, 1u << 16 | 7);
    fix_crcs(b, n);
    char path[1200];
    snprintf(path, sizeof path, "%s/newer_minor.qfm", tmp_dir);
    spill(path, b, n);
    qf_graph *g;
    OK(qf_qfm_read(path, 0, &g, NULL)); /* a newer minor version reads */
    qf_graph_free(g);
    DAMAGE("bad_magic.qfm", QF_ERR_FORMAT, "bad magic", memcpy(b, "ONNX", 4));
    char onnx[1200];
    snprintf(onnx, sizeof onnx, "%s/tests/bad/seed.onnx", getenv("top_srcdir") ? getenv("top_srcdir") : QF_SRCDIR);
    ck_assert_int_eq(qf_qfm_read(onnx, 0, &g, NULL), QF_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), "bad magic"));
    ck_assert(!qf_qfm_probe(onnx));
#undef DAMAGE
    free(b);
    free(good);
}
END_TEST

/* `qforge info` on the kept files: 0 and a precision summary for the good one,
 * 1 and one line on stderr naming the file for each bad one. */
START_TEST(cli_info)
{
    const char *qforge = getenv("QFORGE");
    if (!qforge || access(qforge, X_OK) != 0) {
        printf("no QFORGE: cli_info skipped\n");
        return;
    }
    size_t n;
    layout L;
    free(good_file(&n, &L));
    static const char *const files[] = {"good.qfm", "truncated.qfm", "bitflip_graph.qfm", "outside.qfm",
                                        "absurd_count.qfm", "newer_version.qfm", "bad_magic.qfm", "overlap.qfm"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char path[1200], out[1300], err[1300], cmd[4000];
        snprintf(path, sizeof path, "%s/%s", out_dir, files[i]);
        if (access(path, R_OK) != 0) continue; /* made by a test that runs in another process */
        snprintf(out, sizeof out, "%s/info.out", tmp_dir);
        snprintf(err, sizeof err, "%s/info.err", tmp_dir);
        snprintf(cmd, sizeof cmd, "'%s' info --nodes '%s' >'%s' 2>'%s'", qforge, path, out, err);
        int rc = system(cmd);
        ck_assert(WIFEXITED(rc));
        size_t on, en;
        uint8_t *o = slurp(out, &on), *e = slurp(err, &en);
        o[on] = e[en] = 0;
        if (i == 0) {
            ck_assert_msg(WEXITSTATUS(rc) == 0, "%s", (char *)e);
            ck_assert_ptr_nonnull(strstr((char *)o, "int8"));
            ck_assert_ptr_nonnull(strstr((char *)o, "--size 8x8"));
            ck_assert_ptr_nonnull(strstr((char *)o, "minmax"));
        } else {
            ck_assert_msg(WEXITSTATUS(rc) == 1, "%s: exit %d", files[i], WEXITSTATUS(rc));
            ck_assert_msg(en > 0 && strchr((char *)e, '\n') == (char *)e + en - 1, "%s: stderr is not one line: %s",
                          files[i], (char *)e);
            ck_assert_msg(strstr((char *)e, path) != NULL, "%s: stderr does not name the file: %s", files[i], (char *)e);
        }
        free(o), free(e);
    }
}
END_TEST

/* ---- real models (../shared/data) --------------------------------------------------------- */

static bool have(const char *rel)
{
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", data_dir, rel);
    return access(p, R_OK) == 0;
}

/* Quantizes `model` at batch 1 (calibrated on `calib`), writes it, reads it at
 * batch 0 and 32, and checks both against the in-memory batch-1 graph image by
 * image on 32 images of `test`, bit for bit. */
static void real_model(const char *model_rel, const char *calib_rel, const char *test_rel, const char *preset, int wh,
                       int n_calib, qf_precision prec)
{
    char model[1200], calib[1200], test[1200], path[1200];
    snprintf(model, sizeof model, "%s/%s", data_dir, model_rel);
    snprintf(calib, sizeof calib, "%s/%s", data_dir, calib_rel);
    snprintf(test, sizeof test, "%s/%s", data_dir, test_rel);
    snprintf(path, sizeof path, "%s/real-%s.qfm", tmp_dir, qf_precision_name(prec));
    qf_preprocess pp;
    qf_preprocess_init(&pp);
    OK(qf_preprocess_preset(&pp, preset));
    if (wh) pp.width = pp.height = wh;
    const int B = 32;
    /* calibration at batch B, quantization at batch 1 */
    qf_load_opts lo = {.batch = B};
    qf_graph *g;
    OK(qf_model_load(model, &lo, &g));
    qf_dataset *ds;
    OK(qf_dataset_open(calib, &ds));
    qf_dataset_subset(ds, n_calib);
    qf_calib *c;
    OK(qf_calib_create(g, NULL, &c));
    qf_engine_opts eo = {.device = QF_DEVICE_CPU, .observer = qf_calib_observe, .observer_user = c};
    qf_engine *e;
    OK(qf_engine_create(g, &eo, &e));
    qf_loader_options lopt = {.batch = B, .threads = 2};
    qf_loader *l;
    OK(qf_loader_create(ds, &pp, &lopt, &l));
    int cnt;
    int64_t seen = 0;
    for (;;) {
        OK(qf_loader_next(l, qf_engine_input(e, 0), NULL, &cnt));
        if (!cnt) break;
        qf_calib_set_batch_valid(c, cnt);
        OK(qf_engine_run(e));
        seen += cnt;
    }
    qf_loader_free(l);
    qf_engine_free(e);
    qf_dataset_free(ds);
    qf_qfm_meta m;
    qf_qfm_meta_init(&m);
    OK(qf_sha256_file(model, m.source_sha256));
    qf_calib_meta cm = {.images = seen, .model_sha256 = m.source_sha256};
    qf_calib_table *t;
    OK(qf_calib_finalize(c, 1u << QF_CALIB_ENTROPY, QF_CALIB_PERCENTILE_DEFAULT, &cm, &t));
    qf_calib_free(c);
    qf_graph_free(g);
    lo.batch = 1;
    OK(qf_model_load(model, &lo, &g));
    qf_quant_opts qo;
    qf_quant_opts_init(&qo);
    qo.precision = prec;
    OK(qf_quantize(g, t, &qo, NULL));
    qf_calib_table_free(t);
    qf_preprocess_format(&pp, m.preprocess, sizeof m.preprocess);
    snprintf(m.calib_method, sizeof m.calib_method, "entropy");
    m.calib_images = seen;
    m.precision = prec;
    OK(qf_qfm_write(g, &m, path));
    qf_graph *r1, *rb;
    qf_qfm_meta m2;
    OK(qf_qfm_read(path, 0, &r1, &m2));
    OK(qf_qfm_read(path, B, &rb, NULL));
    ck_assert_str_eq(m2.preprocess, m.preprocess);
    ck_assert_int_eq(m2.batch, 1);
    ck_assert_int_eq(rb->batch, B);

    /* B test images, once through the batch-B graph and one by one through the others */
    OK(qf_dataset_open(test, &ds));
    qf_dataset_subset(ds, B);
    lopt.batch = B;
    OK(qf_loader_create(ds, &pp, &lopt, &l));
    const size_t img = qf_value_bytes(&g->values[g->inputs[0]]) / sizeof(float);
    const size_t ncls = (size_t)qf_value_numel(&g->values[g->outputs[0]]);
    float *x = malloc((size_t)B * img * sizeof *x);
    OK(qf_loader_next(l, x, NULL, &cnt));
    ck_assert_int_eq(cnt, B);
    qf_loader_free(l);
    qf_dataset_free(ds);
    float *yb = run(rb, x, NULL, NULL);
    qf_engine_opts o1 = {.device = QF_DEVICE_CPU, .threads = 2};
    qf_engine *e0, *e1;
    OK(qf_engine_create(g, &o1, &e0));
    OK(qf_engine_create(r1, &o1, &e1));
    /* A float Conv/Gemm/MatMul (the classifier that reads MobileNetV2's
     * global pool stays FP16) sums through OpenBLAS, whose kernel depends on
     * the matrix shape (its small-matrix kernels on AVX-512): at another batch
     * its sums may round differently. Integer sums may not. */
    int float_sums = 0;
    for (int k = 0; k < g->n_nodes; k++) {
        const qf_node *n = &g->nodes[k];
        float_sums += (n->op == QF_OP_CONV || n->op == QF_OP_GEMM || n->op == QF_OP_MATMUL) &&
                      n->precision != QF_PREC_INT8;
    }
    int same_file = 0, same_batch = 0, same_top1 = 0;
    double max_rel = 0.0;
    for (int i = 0; i < B; i++) {
        memcpy(qf_engine_input(e0, 0), x + i * img, img * sizeof(float));
        memcpy(qf_engine_input(e1, 0), x + i * img, img * sizeof(float));
        OK(qf_engine_run(e0));
        OK(qf_engine_run(e1));
        const float *y0 = qf_engine_output(e0, 0), *y1 = qf_engine_output(e1, 0);
        same_file += memcmp(y0, y1, ncls * sizeof(float)) == 0;
        same_batch += memcmp(y0, yb + i * ncls, ncls * sizeof(float)) == 0;
        size_t a0 = 0, ab = 0;
        double peak = 0.0, diff = 0.0;
        for (size_t k = 0; k < ncls; k++) {
            const float b = yb[i * ncls + k];
            if (y0[k] > y0[a0]) a0 = k;
            if (b > yb[i * ncls + ab]) ab = k;
            if (fabs(y0[k]) > peak) peak = fabs(y0[k]);
            if (fabs(y0[k] - b) > diff) diff = fabs(y0[k] - b);
        }
        same_top1 += a0 == ab;
        if (peak > 0 && diff / peak > max_rel) max_rel = diff / peak;
    }
    printf("%s %s: %d of %d images bit-identical from the file at batch 1, %d of %d at batch %d (max |diff| / max |y| "
           "%.2g, top-1 the same on %d; %d float Conv/Gemm/MatMul)\n",
           model_rel, qf_precision_name(prec), same_file, B, same_batch, B, B, max_rel, same_top1, float_sums);
    ck_assert_int_eq(same_file, B);
    if (float_sums == 0) ck_assert_int_eq(same_batch, B);
    /* FP16 rounding of the float sums: about one half-precision step */
    ck_assert_msg(max_rel < 2e-3, "batch %d differs from batch 1 by %g of the logits' range", B, max_rel);
    ck_assert_int_eq(same_top1, B);
    qf_engine_free(e0);
    qf_engine_free(e1);
    free(x), free(yb);
    qf_graph_free(g);
    qf_graph_free(r1);
    qf_graph_free(rb);
}

START_TEST(resnet20_int8)
{
    if (!have("cifar10/resnet20.onnx")) return;
    real_model("cifar10/resnet20.onnx", "cifar10/calib", "cifar10/test", "cifar10", 32, 200, QF_PREC_INT8);
}
END_TEST

START_TEST(resnet20_fp16)
{
    if (!have("cifar10/resnet20.onnx")) return;
    real_model("cifar10/resnet20.onnx", "cifar10/calib", "cifar10/test", "cifar10", 32, 64, QF_PREC_FP16);
}
END_TEST

START_TEST(mobilenetv2_int8)
{
    if (!have("imagenet/mobilenetv2-fp32.onnx")) return;
    real_model("imagenet/mobilenetv2-fp32.onnx", "imagenet/images/calib", "imagenet/images/val", "imagenet", 0, 32,
               QF_PREC_INT8);
}
END_TEST

int main(void)
{
    const char *top = getenv("top_srcdir"), *build = getenv("top_builddir");
    snprintf(data_dir, sizeof data_dir, "%s/../shared/data", top ? top : QF_SRCDIR);
    snprintf(out_dir, sizeof out_dir, "%s/tests/bad/qfm", build ? build : ".");
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", out_dir);
    if (system(cmd) != 0) return 99;
    snprintf(tmp_dir, sizeof tmp_dir, "%s/qforge-test-qfm-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmp_dir)) return 99;

    Suite *s = suite_create("qfm");
    TCase *tc = tcase_create("file");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, roundtrip_int8);
    tcase_add_test(tc, roundtrip_fp16);
    tcase_add_test(tc, roundtrip_fp32);
    tcase_add_test(tc, rebatch_int8);
    tcase_add_test(tc, rebatch_fp16);
    tcase_add_test(tc, rebatch_fp32);
    tcase_add_test(tc, wide_node);
    tcase_add_test(tc, write_errors);
    tcase_add_test(tc, truncated_anywhere);
    tcase_add_test(tc, bit_flip_anywhere);
    tcase_add_test(tc, structural_fuzz);
    tcase_add_test(tc, hostile_layouts);
    tcase_add_test(tc, cli_info);
    suite_add_tcase(s, tc);
    TCase *real = tcase_create("real models");
    tcase_set_timeout(real, 600);
    tcase_add_test(real, resnet20_int8);
    tcase_add_test(real, resnet20_fp16);
    tcase_add_test(real, mobilenetv2_int8);
    suite_add_tcase(s, real);
    SRunner *sr = srunner_create(s);
    /* one process: cli_info reads the files the corpus tests kept */
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    if (system(cmd) != 0) return 99;
    return failed ? 1 : 0;
}
