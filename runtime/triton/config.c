/* A model's configuration against its .qfm: completing a minimal config.pbtxt
 * from the file (inputs, outputs, max_batch_size, dynamic batching), checking
 * a given one against it, and choosing the batch sizes engines are built for. */
#include "backend.h"
#include "json.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MSG_SIZE 1024

static TRITONSERVER_Error *read_config(TRITONBACKEND_Model *tm, qfi_json **out)
{
    TRITONSERVER_Message *msg;
    TRITONSERVER_Error *err = TRITONBACKEND_ModelConfig(tm, 1, &msg);
    if (err) return err;
    const char *text;
    size_t len;
    err = TRITONSERVER_MessageSerializeToJson(msg, &text, &len);
    if (!err) {
        char why[256];
        *out = qfi_json_parse(text, len, why, sizeof why);
        if (!*out) {
            err = qfi_triton_error(TRITONSERVER_ERROR_INTERNAL, "model configuration: %s", why);
        } else if ((*out)->type != QFI_JSON_OBJECT) {
            // everything below reads members; a bare value has none to read or set
            qfi_json_free(*out);
            *out = NULL;
            err = qfi_triton_error(TRITONSERVER_ERROR_INVALID_ARG, "model configuration is not a JSON object");
        }
    }
    TRITONSERVER_MessageDelete(msg);
    return err;
}

static int64_t get_int(const qfi_json *obj, const char *key, int64_t dflt)
{
    int64_t v;
    return qfi_json_int(qfi_json_get(obj, key), &v) ? v : dflt;
}

/* parameters { key: "NAME" value { string_value: "..." } }, or NULL. */
static const char *get_parameter(const qfi_json *root, const char *name)
{
    return qfi_json_str(qfi_json_get(qfi_json_get(qfi_json_get(root, "parameters"), name), "string_value"));
}

static const char *dtype_config_name(TRITONSERVER_DataType t, char *buf, size_t size)
{
    snprintf(buf, size, "TYPE_%s", TRITONSERVER_DataTypeString(t));
    return buf;
}

/* "[-1, 3, 224, 224]" */
static const char *dims_text(const int64_t *dims, int ndim, char *buf, size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && n < size; i++) n += (size_t)snprintf(buf + n, size - n, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (n < size) snprintf(buf + n, size - n, "]");
    return buf;
}

/* The batch dimension leads every input and output (qforge re-infers shapes
 * at any batch; this tells whether the file's tensors carry it). */
static bool has_batch_dim(const qf_graph *g)
{
    for (int i = 0; i < g->n_inputs + g->n_outputs; i++) {
        const qf_value *v = &g->values[i < g->n_inputs ? g->inputs[i] : g->outputs[i - g->n_inputs]];
        if (v->ndim < 1 || v->dims[0] != g->batch) return false;
    }
    return true;
}

/* {name, data_type, dims} of a graph value as Triton sees it. */
static qfi_json *tensor_entry(const qf_value *v, bool batching)
{
    char buf[32];
    qfi_json *t = qfi_json_new(QFI_JSON_OBJECT), *dims = qfi_json_new(QFI_JSON_ARRAY);
    bool ok = t && dims && qfi_json_add(t, "name", qfi_json_new_string(v->name)) &&
              qfi_json_add(t, "data_type", qfi_json_new_string(dtype_config_name(qfi_triton_dtype(v->dtype), buf, sizeof buf)));
    for (int d = batching; ok && d < v->ndim; d++) ok = qfi_json_add(dims, NULL, qfi_json_new_int(v->dims[d]));
    if (ok) return qfi_json_add(t, "dims", dims) ? t : (qfi_json_free(t), NULL);
    qfi_json_free(dims);
    qfi_json_free(t);
    return NULL;
}

static bool set_tensors(qfi_json *root, const char *key, const qf_graph *g, const int *values, int n, bool batching)
{
    qfi_json *list = qfi_json_new(QFI_JSON_ARRAY);
    bool ok = list != NULL;
    for (int i = 0; ok && i < n; i++) ok = qfi_json_add(list, NULL, tensor_entry(&g->values[values[i]], batching));
    if (!ok) {
        qfi_json_free(list);
        return false;
    }
    return qfi_json_set(root, key, list);
}

static bool is_empty_list(const qfi_json *j) { return !j || j->type != QFI_JSON_ARRAY || j->n == 0; }

/* Fills what a minimal config.pbtxt leaves out, as Triton's own backends do:
 * a batching model configured with neither inputs nor outputs nor
 * max_batch_size gets default_max_batch and dynamic batching (unless another
 * scheduler is set); missing inputs or outputs come from the .qfm. */
static TRITONSERVER_Error *complete_config(tq_model *m, TRITONBACKEND_Model *tm, qfi_json *root, const qf_graph *g,
                                           int default_max_batch, bool *changed)
{
    *changed = false;
    bool no_inputs = is_empty_list(qfi_json_get(root, "input"));
    bool no_outputs = is_empty_list(qfi_json_get(root, "output"));
    int64_t max_batch = get_int(root, "max_batch_size", 0);
    bool ok = true;
    if (max_batch == 0 && no_inputs && no_outputs && has_batch_dim(g) && default_max_batch > 0) {
        max_batch = default_max_batch;
        ok = qfi_json_set(root, "max_batch_size", qfi_json_new_int(max_batch));
        if (ok && !qfi_json_get(root, "dynamic_batching") && !qfi_json_get(root, "sequence_batching") &&
            !qfi_json_get(root, "ensemble_scheduling"))
            ok = qfi_json_set(root, "dynamic_batching", qfi_json_new(QFI_JSON_OBJECT));
        TQ_LOG(TRITONSERVER_LOG_INFO,
               "model '%s': max_batch_size set to %lld with dynamic batching (give max_batch_size in config.pbtxt "
               "for another)", m->name, (long long)max_batch);
        *changed = true;
    }
    if (ok && no_inputs) ok = set_tensors(root, "input", g, g->inputs, g->n_inputs, max_batch > 0);
    if (ok && no_outputs) ok = set_tensors(root, "output", g, g->outputs, g->n_outputs, max_batch > 0);
    *changed |= no_inputs || no_outputs;
    if (!ok) return qfi_triton_error(TRITONSERVER_ERROR_INTERNAL, "model '%s': out of memory", m->name);
    if (!*changed) return NULL;
    char *text = qfi_json_write(root);
    if (!text) return qfi_triton_error(TRITONSERVER_ERROR_INTERNAL, "model '%s': out of memory", m->name);
    TRITONSERVER_Message *msg;
    TRITONSERVER_Error *err = TRITONSERVER_MessageNewFromSerializedJson(&msg, text, strlen(text));
    free(text);
    if (err) return err;
    err = TRITONBACKEND_ModelSetConfig(tm, 1, msg);
    TRITONSERVER_MessageDelete(msg);
    return err;
}

/* The graph value named `name` among `values`, or -1. */
static int find_io(const qf_graph *g, const int *values, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(g->values[values[i]].name, name) == 0) return i;
    return -1;
}

static void io_names(const qf_graph *g, const int *values, int n, char *buf, size_t size)
{
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < n && k < size; i++) k += (size_t)snprintf(buf + k, size - k, "%s'%s'", i ? ", " : "", g->values[values[i]].name);
}

static bool parse_dtype(const qfi_json *entry, TRITONSERVER_DataType *out)
{
    const char *s = qfi_json_str(qfi_json_get(entry, "data_type"));
    if (!s || strncmp(s, "TYPE_", 5) != 0) return false;
    *out = TRITONSERVER_StringToDataType(s + 5);
    return *out != TRITONSERVER_TYPE_INVALID;
}

static bool parse_dims(const qfi_json *entry, int64_t *dims, int *ndim)
{
    const qfi_json *d = qfi_json_get(entry, "dims");
    if (!d || d->type != QFI_JSON_ARRAY || d->n > QF_MAX_DIMS) return false;
    for (int i = 0; i < d->n; i++)
        if (!qfi_json_int(d->items[i], &dims[i])) return false;
    *ndim = d->n;
    return true;
}

/* The preprocessing of a raw-image input: the config's "preprocess" parameter,
 * else what the .qfm recorded, fitted to the model's input. */
static TRITONSERVER_Error *image_preprocess(tq_model *m, const qfi_json *root, const qf_qfm_meta *meta,
                                            const qf_value *v, qf_preprocess *pp)
{
    qf_preprocess_init(pp);
    const char *given = get_parameter(root, "preprocess");
    const char *text = given ? given : meta->preprocess;
    if (!text[0])
        return qfi_triton_error(TRITONSERVER_ERROR_INVALID_ARG,
                                "model '%s': input '%s' takes raw images but %s records no preprocessing; give it as "
                                "parameters { key: \"preprocess\" value { string_value: \"--resize 256 --crop 224 ...\" } }",
                                m->name, v->name, m->path);
    qf_status st = qf_preprocess_parse(pp, text);
    if (st == QF_OK) st = qf_preprocess_fit(pp, v->ndim, v->dims);
    if (st == QF_OK) return NULL;
    char what[1024];
    snprintf(what, sizeof what, "model '%s': input '%s': preprocessing '%.400s'", m->name, v->name, text);
    return qfi_triton_qf_error(st, what);
}

/* One configured input or output against the graph's value. */
static TRITONSERVER_Error *parse_tensor(tq_model *m, const qfi_json *root, const qfi_json *entry, const qf_graph *g,
                                        const qf_qfm_meta *meta, bool input, tq_tensor *t)
{
    const char *kind = input ? "input" : "output";
    const int *values = input ? g->inputs : g->outputs;
    int n = input ? g->n_inputs : g->n_outputs;
    const char *name = qfi_json_str(qfi_json_get(entry, "name"));
    char a[256], b[256];
    if (!name || strlen(name) >= sizeof t->name)
        return qfi_triton_error(TRITONSERVER_ERROR_INVALID_ARG, "model '%s': an %s has no name", m->name, kind);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->index = find_io(g, values, n, name);
    if (t->index < 0) {
        char names[1024];
        io_names(g, values, n, names, sizeof names);
        return qfi_triton_error(TRITONSERVER_ERROR_INVALID_ARG, "model '%s': config %s '%s' is not an %s of %s (it has %s)",
                                m->name, kind, name, kind, m->path, names);
    }
    const qf_value *v = &g->values[values[t->index]];
    int lead = m->max_batch > 0; /* the batch dimension is not part of a configured shape */
    t->dtype = v->dtype;
    if (!parse_dtype(entry, &t->wire) || !parse_dims(entry, t->dims, &t->ndim))
        return qfi_triton_error(TRITONSERVER_ERROR_INVALID_ARG, "model '%s': %s '%s': bad data_type or dims", m->name,
                                kind, name);
    t->item_bytes = qf_dtype_info(v->dtype)->size;
    for (int d = lead; d < v->ndim; d++) t->item_bytes *= (size_t)v->dims[d];
    bool same_shape = t->ndim == v->ndim - lead;
    for (int d = 0; same_shape && d < t->ndim; d++) same_shape = t->dims[d] == v->dims[d + lead];
    if (t->wire == qfi_triton_dtype(v->dtype) && same_shape) return NULL;

    // TYPE_UINT8 (H, W, C) in front of a float image input: raw pixels
    if (input && t->wire == TRITONSERVER_TYPE_UINT8 && v->dtype == QF_F32 && t->ndim == 3) {
        if (!lead)
            return qfi_triton_error(TRITONSERVER_ERROR_INVALID_ARG,
                                    "model '%s': raw-image input '%s' needs max_batch_size > 0", m->name, name);
        bool dims_ok = (t->dims[2] == -1 || t->dims[2] == 1 || t->dims[2] == 3) && t->dims[0] != 0 && t->dims[1] != 0 &&
                       t->dims[0] >= -1 && t->dims[1] >= -1;
        if (!dims_ok)
            return qfi_triton_error(TRITONSERVER_ERROR_INVALID_ARG,
                                    "model '%s': raw-image input '%s' has dims %s; it takes [H, W, C] with C 1 or 3 "
                                    "(-1 for any)", m->name, name, dims_text(t->dims, t->ndim, a, sizeof a));
        t->image = true;
        return image_preprocess(m, root, meta, v, &t->pp);
    }
    char want[32], got[32];
    dtype_config_name(qfi_triton_dtype(v->dtype), want, sizeof want);
    dtype_config_name(t->wire, got, sizeof got);
    return qfi_triton_error(TRITONSERVER_ERROR_INVALID_ARG,
                            "model '%s': %s '%s' is configured as %s %s but %s has %s %s%s", m->name, kind, name, got,
                            dims_text(t->dims, t->ndim, a, sizeof a), m->path, want,
                            dims_text(v->dims + lead, v->ndim - lead, b, sizeof b),
                            input ? " (TYPE_UINT8 with dims [H, W, C] takes raw images)" : "");
}

static TRITONSERVER_Error *parse_tensors(tq_model *m, const qfi_json *root, const qf_graph *g, const qf_qfm_meta *meta,
                                         bool input)
{
    const qfi_json *list = qfi_json_get(root, input ? "input" : "output");
    int n = list && list->type == QFI_JSON_ARRAY ? list->n : 0;
    if (n > TQ_MAX_TENSORS)
        return qfi_triton_error(TRITONSERVER_ERROR_INVALID_ARG, "model '%s': more than %d %ss", m->name, TQ_MAX_TENSORS,
                                input ? "input" : "output");
    tq_tensor *ts = input ? m->inputs : m->outputs;
    for (int i = 0; i < n; i++) {
        TRITONSERVER_Error *err = parse_tensor(m, root, list->items[i], g, meta, input, &ts[i]);
        if (err) return err;
    }
    *(input ? &m->n_inputs : &m->n_outputs) = n;
    // every graph input must be fed; outputs may be a subset
    for (int i = 0; input && i < g->n_inputs; i++) {
        bool fed = false;
        for (int k = 0; k < n; k++) fed |= ts[k].index == i;
        if (!fed)
            return qfi_triton_error(TRITONSERVER_ERROR_INVALID_ARG, "model '%s': input '%s' of %s is missing from the config",
                                    m->name, g->values[g->inputs[i]].name, m->path);
    }
    if (!input && n == 0)
        return qfi_triton_error(TRITONSERVER_ERROR_INVALID_ARG, "model '%s': the config has no output", m->name);
    return NULL;
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

static bool add_size(tq_model *m, int64_t s)
{
    for (int i = 0; i < m->n_sizes; i++)
        if (m->sizes[i] == s) return true;
    if (m->n_sizes == TQ_MAX_SIZES) return false;
    m->sizes[m->n_sizes++] = (int)s;
    return true;
}

/* The batch sizes engines are built for: a batch of n requests' items runs on
 * the smallest that holds it, zero-padded. Default: powers of two and the
 * dynamic batcher's preferred sizes, up to max_batch_size; the "batch_sizes"
 * parameter ("1,8,64,256") replaces both. max_batch_size is always one. */
static TRITONSERVER_Error *choose_sizes(tq_model *m, const qfi_json *root)
{
    m->n_sizes = 0;
    if (m->max_batch == 0) {
        add_size(m, 1);
        return NULL;
    }
    const char *given = get_parameter(root, "batch_sizes");
    bool ok = true;
    if (given) {
        for (const char *s = given; *s && ok;) {
            char *end;
            long v = strtol(s, &end, 10);
            if (end == s || v < 1 || v > m->max_batch || (*end && *end != ',')) {
                return qfi_triton_error(TRITONSERVER_ERROR_INVALID_ARG,
                                        "model '%s': parameter batch_sizes '%s': expected sizes from 1 to %d separated "
                                        "by commas", m->name, given, m->max_batch);
            }
            ok = add_size(m, v);
            s = *end ? end + 1 : end;
        }
    } else {
        for (int64_t s = 1; s < m->max_batch && ok; s *= 2) ok = add_size(m, s);
        const qfi_json *pref = qfi_json_get(qfi_json_get(root, "dynamic_batching"), "preferred_batch_size");
        for (int i = 0; pref && pref->type == QFI_JSON_ARRAY && i < pref->n && ok; i++) {
            int64_t v;
            if (qfi_json_int(pref->items[i], &v) && v >= 1 && v <= m->max_batch) ok = add_size(m, v);
        }
    }
    if (ok) ok = add_size(m, m->max_batch);
    if (!ok)
        return qfi_triton_error(TRITONSERVER_ERROR_INVALID_ARG, "model '%s': more than %d engine batch sizes", m->name,
                                TQ_MAX_SIZES);
    qsort(m->sizes, (size_t)m->n_sizes, sizeof m->sizes[0], cmp_int);
    return NULL;
}

/* The graph at every engine size; g0 (the file's own batch) is used where it fits. */
static TRITONSERVER_Error *read_graphs(tq_model *m, qf_graph **g0)
{
    for (int k = 0; k < m->n_sizes; k++) {
        qf_graph *g = NULL;
        if (m->max_batch == 0 || (*g0 && (*g0)->batch == m->sizes[k])) {
            g = *g0;
            *g0 = NULL;
        } else {
            qf_status st = qf_qfm_read(m->path, m->sizes[k], &g, NULL);
            if (st != QF_OK) {
                char what[512];
                snprintf(what, sizeof what, "model '%s' at batch %d", m->name, m->sizes[k]);
                return qfi_triton_qf_error(st, what);
            }
        }
        m->graphs[k] = g;
        if (m->max_batch > 0 && !has_batch_dim(g))
            return qfi_triton_error(TRITONSERVER_ERROR_INVALID_ARG,
                                    "model '%s': %s does not scale every input and output with the batch; set "
                                    "max_batch_size: 0", m->name, m->path);
    }
    return NULL;
}

static TRITONSERVER_Error *model_path(tq_model *m, TRITONBACKEND_Model *tm, const qfi_json *root)
{
    TRITONBACKEND_ArtifactType type;
    const char *dir;
    uint64_t version;
    TRITONSERVER_Error *err = TRITONBACKEND_ModelRepository(tm, &type, &dir);
    if (!err) err = TRITONBACKEND_ModelVersion(tm, &version);
    if (err) return err;
    if (type != TRITONBACKEND_ARTIFACT_FILESYSTEM)
        return qfi_triton_error(TRITONSERVER_ERROR_UNSUPPORTED, "model '%s': only file-system model repositories are supported", m->name);
    const char *file = qfi_json_str(qfi_json_get(root, "default_model_filename"));
    if (!file || !file[0]) file = "model.qfm";
    int n = snprintf(m->path, sizeof m->path, "%s/%llu/%s", dir, (unsigned long long)version, file);
    if (n < 0 || (size_t)n >= sizeof m->path)
        return qfi_triton_error(TRITONSERVER_ERROR_INVALID_ARG, "model '%s': path too long", m->name);
    return NULL;
}

static TRITONSERVER_Error *parse_threads(tq_model *m, const qfi_json *root)
{
    const char *s = get_parameter(root, "threads");
    m->threads = 0;
    if (!s) return NULL;
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < 0 || v > 4096)
        return qfi_triton_error(TRITONSERVER_ERROR_INVALID_ARG, "model '%s': parameter threads '%s' is not a count from 0 to 4096",
                                m->name, s);
    m->threads = (int)v;
    return NULL;
}

TRITONSERVER_Error *qfi_triton_model_load(tq_model *m, TRITONBACKEND_Model *tm, int default_max_batch)
{
    const char *name;
    TRITONSERVER_Error *err = TRITONBACKEND_ModelName(tm, &name);
    if (err) return err;
    snprintf(m->name, sizeof m->name, "%s", name);
    qfi_json *root = NULL;
    qf_graph *g0 = NULL;
    qf_qfm_meta meta;
    if ((err = read_config(tm, &root)) || (err = model_path(m, tm, root))) goto out;

    qf_status st = qf_qfm_read(m->path, 0, &g0, &meta);
    if (st != QF_OK) {
        char what[300];
        snprintf(what, sizeof what, "model '%s'", m->name);
        err = qfi_triton_qf_error(st, what);
        goto out;
    }
    bool auto_complete = false, changed = false;
    if ((err = TRITONBACKEND_ModelAutoCompleteConfig(tm, &auto_complete))) goto out;
    if (auto_complete && (err = complete_config(m, tm, root, g0, default_max_batch, &changed))) goto out;
    if (changed) {
        qfi_json_free(root);
        root = NULL;
        if ((err = read_config(tm, &root))) goto out;
    }
    int64_t max_batch = get_int(root, "max_batch_size", 0);
    if (max_batch < 0 || max_batch > 65536) {
        err = qfi_triton_error(TRITONSERVER_ERROR_INVALID_ARG, "model '%s': max_batch_size %lld", m->name, (long long)max_batch);
        goto out;
    }
    m->max_batch = (int)max_batch;
    if (m->max_batch > 0 && !has_batch_dim(g0)) {
        err = qfi_triton_error(TRITONSERVER_ERROR_INVALID_ARG,
                               "model '%s': the inputs and outputs of %s do not lead with the batch (%d); set "
                               "max_batch_size: 0", m->name, m->path, g0->batch);
        goto out;
    }
    if ((err = parse_tensors(m, root, g0, &meta, true)) || (err = parse_tensors(m, root, g0, &meta, false)) ||
        (err = parse_threads(m, root)) || (err = choose_sizes(m, root)) || (err = read_graphs(m, &g0)))
        goto out;
    char sizes[256];
    size_t k = 0;
    for (int i = 0; i < m->n_sizes && k < sizeof sizes; i++) k += (size_t)snprintf(sizes + k, sizeof sizes - k, "%s%d", i ? "," : "", m->sizes[i]);
    TQ_LOG(TRITONSERVER_LOG_INFO, "model '%s': %s (written by qforge %s, served by %s), max_batch_size %d, engines at "
           "batch %s", m->name, m->path, meta.tool_version[0] ? meta.tool_version : "?", qf_version(), m->max_batch, sizes);
out:
    qf_graph_free(g0);
    qfi_json_free(root);
    return err;
}

void qfi_triton_model_free(tq_model *m)
{
    for (int k = 0; k < m->n_sizes; k++) qf_graph_free(m->graphs[k]);
    m->n_sizes = 0;
}
