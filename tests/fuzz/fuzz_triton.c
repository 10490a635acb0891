/* libFuzzer harness: the Triton backend (runtime/triton/) without a server.
 * This file is the server: it implements the TRITONSERVER_ and TRITONBACKEND_
 * calls the backend makes, hands it the model configuration and the requests
 * an input describes, and checks what Triton relies on -- every request
 * released once, every response sent once, every error with a message.
 * Input: the configuration's JSON text, a NUL, a flags byte, then requests
 * (see read_request). The model repository holds the FP32 and an INT8 .qfm
 * of tests/bad/seed.onnx (x [N,3,8,8] -> y [N,10]), made at start. */
#include "backend.h"
#include "json.h"
#include "fuzz_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Batches above this make engines too large for a fuzzer's run (each size gets one). */
#define MAX_FUZZ_BATCH 64
#define MAX_REQUESTS 8
#define MAX_INPUTS 4

static void fail(const char *what)
{
    fprintf(stderr, "fuzz: %s\n", what);
    abort();
}

/* ---- the server's objects -------------------------------------------------------------- */

struct TRITONSERVER_Error {
    TRITONSERVER_Error_Code code;
    char *msg;
};
struct TRITONSERVER_Message {
    char *json;
    size_t len;
};
struct TRITONBACKEND_Backend {
    void *state;
};
struct TRITONBACKEND_Model {
    TRITONBACKEND_Backend *backend;
    TRITONSERVER_Message *config;
    bool auto_complete;
    void *state;
};
struct TRITONBACKEND_ModelInstance {
    TRITONBACKEND_Model *model;
    TRITONSERVER_InstanceGroupKind kind;
    void *state;
};
struct TRITONBACKEND_Input {
    const char *name;
    TRITONSERVER_DataType type;
    uint32_t ndim, nbuf;
    int64_t shape[8];
    const uint8_t *buf[4];
    uint64_t size[4], bytes;
    TRITONSERVER_MemoryType mem[4];
};
struct TRITONBACKEND_Request {
    int n_inputs, n_outputs;
    TRITONBACKEND_Input inputs[MAX_INPUTS];
    const char *outputs[4];
    int released;
};
struct TRITONBACKEND_Output {
    void *buf;
};
struct TRITONBACKEND_Response {
    TRITONBACKEND_Request *request;
    int n_outputs;
    TRITONBACKEND_Output outputs[8];
};

static TRITONBACKEND_Backend backend;
static TRITONSERVER_Message backend_config = {"{\"cmdline\":{\"default-max-batch-size\":\"4\"}}", 41};
static char repo[600];
static int live_responses;
static TRITONSERVER_MemoryType output_memory;

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (!d) fail("out of memory");
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

/* ---- TRITONSERVER_ ---------------------------------------------------------------------- */

TRITONSERVER_Error *TRITONSERVER_ErrorNew(TRITONSERVER_Error_Code code, const char *msg)
{
    TRITONSERVER_Error *e = malloc(sizeof *e);
    if (!e) fail("out of memory");
    e->code = code;
    e->msg = dup_n(msg, strlen(msg));
    return e;
}
void TRITONSERVER_ErrorDelete(TRITONSERVER_Error *e)
{
    if (!e) return;
    free(e->msg);
    free(e);
}
const char *TRITONSERVER_ErrorMessage(TRITONSERVER_Error *e) { return e->msg; }

TRITONSERVER_Error *TRITONSERVER_MessageNewFromSerializedJson(TRITONSERVER_Message **m, const char *base, size_t n)
{
    *m = malloc(sizeof **m);
    if (!*m) fail("out of memory");
    (*m)->json = dup_n(base, n);
    (*m)->len = n;
    return NULL;
}
TRITONSERVER_Error *TRITONSERVER_MessageDelete(TRITONSERVER_Message *m)
{
    if (m && m != &backend_config) {
        free(m->json);
        free(m);
    }
    return NULL;
}
TRITONSERVER_Error *TRITONSERVER_MessageSerializeToJson(TRITONSERVER_Message *m, const char **base, size_t *n)
{
    *base = m->json;
    *n = m->len;
    return NULL;
}

/* The log is on at every level, so the backend formats every message. */
bool TRITONSERVER_LogIsEnabled(TRITONSERVER_LogLevel level) { return true; }
TRITONSERVER_Error *TRITONSERVER_LogMessage(TRITONSERVER_LogLevel level, const char *file, const int line, const char *msg)
{
    if (!file || !msg) fail("a log message without file or text");
    return NULL;
}

static const char *const type_names[] = {"<invalid>", "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16",
                                         "INT32", "INT64", "FP16", "FP32", "FP64", "BYTES", "BF16"};
#define N_TYPES (int)(sizeof type_names / sizeof type_names[0])

const char *TRITONSERVER_DataTypeString(TRITONSERVER_DataType t)
{
    return (int)t >= 0 && (int)t < N_TYPES ? type_names[t] : "<invalid>";
}
TRITONSERVER_DataType TRITONSERVER_StringToDataType(const char *s)
{
    for (int t = 1; t < N_TYPES; t++)
        if (!strcmp(s, type_names[t])) return (TRITONSERVER_DataType)t;
    return TRITONSERVER_TYPE_INVALID;
}
const char *TRITONSERVER_InstanceGroupKindString(TRITONSERVER_InstanceGroupKind k)
{
    static const char *const names[] = {"KIND_AUTO", "KIND_CPU", "KIND_GPU", "KIND_MODEL"};
    return (unsigned)k < 4 ? names[k] : "<invalid>";
}

/* ---- TRITONBACKEND_: backend, model, instance ------------------------------------------- */

TRITONSERVER_Error *TRITONBACKEND_ApiVersion(uint32_t *major, uint32_t *minor)
{
    *major = TRITONBACKEND_API_VERSION_MAJOR;
    *minor = TRITONBACKEND_API_VERSION_MINOR;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_BackendConfig(TRITONBACKEND_Backend *b, TRITONSERVER_Message **m)
{
    *m = &backend_config;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_BackendSetState(TRITONBACKEND_Backend *b, void *s)
{
    b->state = s;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_BackendState(TRITONBACKEND_Backend *b, void **s)
{
    *s = b->state;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelBackend(TRITONBACKEND_Model *m, TRITONBACKEND_Backend **b)
{
    *b = m->backend;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelName(TRITONBACKEND_Model *m, const char **name)
{
    *name = "fuzzmodel";
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelVersion(TRITONBACKEND_Model *m, uint64_t *v)
{
    *v = 1;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelRepository(TRITONBACKEND_Model *m, TRITONBACKEND_ArtifactType *t, const char **loc)
{
    *t = TRITONBACKEND_ARTIFACT_FILESYSTEM;
    *loc = repo;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelConfig(TRITONBACKEND_Model *m, const uint32_t version, TRITONSERVER_Message **out)
{
    return TRITONSERVER_MessageNewFromSerializedJson(out, m->config->json, m->config->len);
}
TRITONSERVER_Error *TRITONBACKEND_ModelSetConfig(TRITONBACKEND_Model *m, const uint32_t version, TRITONSERVER_Message *config)
{
    if (!m->auto_complete) fail("the config was set without auto-completion");
    TRITONSERVER_MessageDelete(m->config);
    return TRITONSERVER_MessageNewFromSerializedJson(&m->config, config->json, config->len);
}
TRITONSERVER_Error *TRITONBACKEND_ModelAutoCompleteConfig(TRITONBACKEND_Model *m, bool *ac)
{
    *ac = m->auto_complete;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelSetState(TRITONBACKEND_Model *m, void *s)
{
    m->state = s;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelState(TRITONBACKEND_Model *m, void **s)
{
    *s = m->state;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceModel(TRITONBACKEND_ModelInstance *i, TRITONBACKEND_Model **m)
{
    *m = i->model;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceName(TRITONBACKEND_ModelInstance *i, const char **name)
{
    *name = "fuzzmodel_0";
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceKind(TRITONBACKEND_ModelInstance *i, TRITONSERVER_InstanceGroupKind *k)
{
    *k = i->kind;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceDeviceId(TRITONBACKEND_ModelInstance *i, int32_t *d)
{
    *d = 0;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceSetState(TRITONBACKEND_ModelInstance *i, void *s)
{
    i->state = s;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceState(TRITONBACKEND_ModelInstance *i, void **s)
{
    *s = i->state;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceReportStatistics(TRITONBACKEND_ModelInstance *i, TRITONBACKEND_Request *r,
                                                                const bool ok, const uint64_t a, const uint64_t b,
                                                                const uint64_t c, const uint64_t d)
{
    if (r->released) fail("statistics of a released request");
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceReportBatchStatistics(TRITONBACKEND_ModelInstance *i, const uint64_t n,
                                                                     const uint64_t a, const uint64_t b, const uint64_t c,
                                                                     const uint64_t d)
{
    return NULL;
}

/* ---- TRITONBACKEND_: requests and responses ----------------------------------------------- */

TRITONSERVER_Error *TRITONBACKEND_RequestInput(TRITONBACKEND_Request *r, const char *name, TRITONBACKEND_Input **in)
{
    if (r->released) fail("an input of a released request");
    for (int i = 0; i < r->n_inputs; i++)
        if (!strcmp(r->inputs[i].name, name)) {
            *in = &r->inputs[i];
            return NULL;
        }
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "no such input");
}
TRITONSERVER_Error *TRITONBACKEND_InputProperties(TRITONBACKEND_Input *in, const char **name, TRITONSERVER_DataType *type,
                                                  const int64_t **shape, uint32_t *ndim, uint64_t *bytes, uint32_t *nbuf)
{
    if (name) *name = in->name;
    if (type) *type = in->type;
    if (shape) *shape = in->shape;
    if (ndim) *ndim = in->ndim;
    if (bytes) *bytes = in->bytes;
    if (nbuf) *nbuf = in->nbuf;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_InputBuffer(TRITONBACKEND_Input *in, const uint32_t b, const void **p, uint64_t *size,
                                              TRITONSERVER_MemoryType *mt, int64_t *id)
{
    if (b >= in->nbuf) return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "no such buffer");
    *p = in->buf[b];
    *size = in->size[b];
    *mt = in->mem[b];
    *id = 0;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_RequestOutputCount(TRITONBACKEND_Request *r, uint32_t *n)
{
    *n = (uint32_t)r->n_outputs;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_RequestOutputName(TRITONBACKEND_Request *r, const uint32_t i, const char **name)
{
    if (i >= (uint32_t)r->n_outputs) return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "no such output");
    *name = r->outputs[i];
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_RequestRelease(TRITONBACKEND_Request *r, uint32_t flags)
{
    if (r->released++) fail("a request released twice");
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ResponseNew(TRITONBACKEND_Response **out, TRITONBACKEND_Request *r)
{
    TRITONBACKEND_Response *res = calloc(1, sizeof *res);
    if (!res) fail("out of memory");
    res->request = r;
    live_responses++;
    *out = res;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ResponseOutput(TRITONBACKEND_Response *res, TRITONBACKEND_Output **out, const char *name,
                                                 const TRITONSERVER_DataType type, const int64_t *shape, const uint32_t ndim)
{
    if (res->n_outputs == 8) return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "too many outputs");
    for (uint32_t d = 0; d < ndim; d++)
        if (shape[d] < 0) fail("an output with a negative dimension");
    *out = &res->outputs[res->n_outputs++];
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_OutputBuffer(TRITONBACKEND_Output *out, void **buf, const uint64_t bytes,
                                               TRITONSERVER_MemoryType *mt, int64_t *id)
{
    // exactly the bytes asked for, so that ASan sees a write past them
    out->buf = malloc(bytes ? bytes : 1);
    if (!out->buf) fail("out of memory");
    *buf = out->buf;
    *mt = output_memory;
    *id = 0;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ResponseSend(TRITONBACKEND_Response *res, const uint32_t flags, TRITONSERVER_Error *err)
{
    if (err && !err->msg[0]) fail("an error response without a message");
    for (int i = 0; i < res->n_outputs; i++) free(res->outputs[i].buf);
    free(res);
    live_responses--;
    return NULL;
}

/* ---- the model repository ---------------------------------------------------------------- */

static void die(const char *what)
{
    fprintf(stderr, "fuzz_triton: %s: %s\n", what, qf_error_message());
    exit(1);
}

/* FP32 and INT8 (minmax-calibrated on one image) .qfm files of the seed model. */
static void write_models(void)
{
    char dir[700], path[800];
    fz_path(repo, sizeof repo, "repo");
    snprintf(dir, sizeof dir, "%s/1", repo);
    if (mkdir(repo, 0700) || mkdir(dir, 0700)) die("cannot make the model repository");
    qf_load_opts lo = {.batch = 1};
    qf_graph *g = NULL;
    // top_srcdir: the checkout where the harness runs away from its build (bench/device/fuzz.sh)
    char seed[4096];
    snprintf(seed, sizeof seed, "%s/tests/bad/seed.onnx", getenv("top_srcdir") ? getenv("top_srcdir") : QF_SRCDIR);
    if (qf_model_load(seed, &lo, &g) != QF_OK) die("seed.onnx");
    qf_qfm_meta meta;
    qf_qfm_meta_init(&meta);
    snprintf(meta.preprocess, sizeof meta.preprocess, "--resize 8 --crop 8");
    meta.precision = QF_PREC_FP32;
    snprintf(path, sizeof path, "%s/model.qfm", dir);
    if (qf_qfm_write(g, &meta, path) != QF_OK) die(path);

    qf_calib *c = NULL;
    qf_engine *e = NULL;
    qf_calib_table *t = NULL;
    qf_engine_opts eo = {.device = QF_DEVICE_CPU, .threads = 1};
    if (qf_calib_create(g, NULL, &c) != QF_OK) die("calibration");
    eo.observer = qf_calib_observe;
    eo.observer_user = c;
    if (qf_engine_create(g, &eo, &e) != QF_OK) die("calibration engine");
    float *x = qf_engine_input(e, 0);
    for (int64_t i = 0; i < qf_value_numel(&g->values[g->inputs[0]]); i++) x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    if (qf_engine_run(e) != QF_OK) die("calibration run");
    qf_calib_meta cm = {.images = 1, .model_sha256 = "0000000000000000000000000000000000000000000000000000000000000000"};
    if (qf_calib_finalize(c, 1u << QF_CALIB_MINMAX, QF_CALIB_PERCENTILE_DEFAULT, &cm, &t) != QF_OK) die("calibration");
    qf_engine_free(e);
    qf_calib_free(c);
    qf_quant_opts qo;
    qf_quant_opts_init(&qo);
    if (qf_quantize(g, t, &qo, NULL) != QF_OK) die("quantization");
    meta.precision = QF_PREC_INT8;
    snprintf(path, sizeof path, "%s/int8.qfm", dir);
    if (qf_qfm_write(g, &meta, path) != QF_OK) die(path);
    qf_calib_table_free(t);
    qf_graph_free(g);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    write_models();
    TRITONSERVER_Error *err = TRITONBACKEND_Initialize(&backend);
    if (err) {
        fprintf(stderr, "fuzz_triton: %s\n", err->msg);
        exit(1);
    }
    return 0;
}

/* ---- requests from the input ---------------------------------------------------------------- */

typedef struct reader {
    const uint8_t *p;
    size_t n;
} reader;

static uint8_t u8(reader *r)
{
    if (!r->n) return 0;
    r->n--;
    return *r->p++;
}
static int16_t i16(reader *r) { return (int16_t)(u8(r) | u8(r) << 8); }

/* Names a request may use: the seed model's input and output, and others. */
static const char *const names[] = {"x", "y", "input", "x ", ""};
#define N_NAMES (int)(sizeof names / sizeof names[0])

/* Per request: inputs (name, type, dims, buffers of bytes taken from the input),
 * then the outputs asked for. As in Triton, an input's size is its buffers' sum. */
static void read_request(reader *r, TRITONBACKEND_Request *q)
{
    memset(q, 0, sizeof *q);
    q->n_inputs = u8(r) % (MAX_INPUTS + 1);
    for (int i = 0; i < q->n_inputs; i++) {
        TRITONBACKEND_Input *in = &q->inputs[i];
        in->name = names[u8(r) % N_NAMES];
        in->type = (TRITONSERVER_DataType)(u8(r) % N_TYPES);
        in->ndim = u8(r) % 7;
        for (uint32_t d = 0; d < in->ndim; d++) in->shape[d] = i16(r);
        in->nbuf = u8(r) % 4;
        for (uint32_t b = 0; b < in->nbuf; b++) {
            uint8_t m = u8(r);
            size_t want = (size_t)(uint16_t)i16(r);
            in->mem[b] = m % 8 == 7 ? TRITONSERVER_MEMORY_GPU : m % 2 ? TRITONSERVER_MEMORY_CPU_PINNED : TRITONSERVER_MEMORY_CPU;
            in->size[b] = want < r->n ? want : r->n;
            in->buf[b] = r->p;
            r->p += in->size[b];
            r->n -= in->size[b];
            in->bytes += in->size[b];
        }
    }
    q->n_outputs = u8(r) % 4;
    for (int i = 0; i < q->n_outputs; i++) q->outputs[i] = names[u8(r) % N_NAMES];
}

/* Whether the configuration asks for engines small enough to fuzz. */
static bool config_affordable(const char *json, size_t len)
{
    char why[64];
    qfi_json *j = qfi_json_parse(json, len, why, sizeof why);
    int64_t mb = 0;
    bool ok = !j || !qfi_json_int(qfi_json_get(j, "max_batch_size"), &mb) || mb <= MAX_FUZZ_BATCH;
    qfi_json_free(j);
    return ok;
}

static void check(TRITONSERVER_Error *err)
{
    if (!err) return;
    if (!err->msg[0]) fail("an error without a message");
    TRITONSERVER_ErrorDelete(err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t json_len = nul ? (size_t)(nul - data) : size;
    if (!config_affordable((const char *)data, json_len)) return 0;
    reader r = {nul ? nul + 1 : data + size, nul ? size - json_len - 1 : 0};
    uint8_t flags = u8(&r);

    TRITONBACKEND_Model model = {.backend = &backend, .auto_complete = flags & 1};
    TRITONSERVER_MessageNewFromSerializedJson(&model.config, (const char *)data, json_len);
    TRITONSERVER_Error *err = TRITONBACKEND_ModelInitialize(&model);
    if (err) {
        check(err);
    } else {
        static const TRITONSERVER_InstanceGroupKind kinds[4] = {TRITONSERVER_INSTANCEGROUPKIND_CPU, TRITONSERVER_INSTANCEGROUPKIND_CPU,
                                                                TRITONSERVER_INSTANCEGROUPKIND_GPU, TRITONSERVER_INSTANCEGROUPKIND_MODEL};
        TRITONBACKEND_ModelInstance inst = {.model = &model, .kind = kinds[(flags >> 1) & 3]};
        output_memory = flags & 8 ? TRITONSERVER_MEMORY_GPU : TRITONSERVER_MEMORY_CPU;
        err = TRITONBACKEND_ModelInstanceInitialize(&inst);
        if (err) {
            check(err);
        } else {
            TRITONBACKEND_Request reqs[MAX_REQUESTS], *ptrs[MAX_REQUESTS];
            uint32_t n = 0;
            while (r.n && n < MAX_REQUESTS) {
                read_request(&r, &reqs[n]);
                ptrs[n] = &reqs[n];
                n++;
            }
            err = TRITONBACKEND_ModelInstanceExecute(&inst, ptrs, n);
            if (err) fail("execute failed (only out of memory may fail it)");
            for (uint32_t i = 0; i < n; i++)
                if (!reqs[i].released) fail("a request never released");
            if (live_responses) fail("a response never sent");
            check(TRITONBACKEND_ModelInstanceFinalize(&inst));
        }
    }
    check(TRITONBACKEND_ModelFinalize(&model));
    TRITONSERVER_MessageDelete(model.config);
    return 0;
}
