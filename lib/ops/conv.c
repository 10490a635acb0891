/* Conv: attribute parsing, shape inference and FLOP count; also the
 * sliding-window attributes (kernel_shape, strides, dilations, pads, auto_pad)
 * and the small checks shared with ConvTranspose, the pools and the other
 * compute ops of lib/ops/nn.h. */
#include "ops/nn.h"
#include "ops/ops.h"

/* Attribute values beyond this are hostile, not a model: the bound keeps
 * (k-1)*dilation+1 and friends far from int64 overflow. */
#define WINDOW_ATTR_MAX ((int64_t)1 << 24)

qf_status qfi_require_f32(const qf_graph *g, const qf_node *n, const qf_value *v, const char *role)
{
    if (v->dtype == QF_F32) return QF_OK;
    return qf_error(QF_ERR_UNSUPPORTED, "%s %s has dtype %s; only f32 is supported", role, v->name,
                    qf_dtype_info(v->dtype)->name);
}

qf_status qfi_check_arity(const qf_graph *g, const qf_node *n, int min_in, int max_in)
{
    int given = n->n_in;
    /* trailing omitted optional inputs do not count */
    while (given > 0 && n->in[given - 1] < 0) given--;
    if (given < min_in || given > max_in)
        return qf_error(QF_ERR_INVALID, "has %d inputs; expected %d to %d", given, min_in, max_in);
    for (int k = 0; k < min_in; k++)
        if (n->in[k] < 0) return qf_error(QF_ERR_INVALID, "required input %d is missing", k);
    if (n->n_out < 1 || n->out[0] < 0) return qf_error(QF_ERR_INVALID, "has no output");
    for (int k = 1; k < n->n_out; k++)
        if (n->out[k] >= 0) return qf_error(QF_ERR_INVALID, "has %d outputs; expected 1", n->n_out);
    return QF_OK;
}

/* Reads an optional INTS attribute of at most `max` values, each in [lo, WINDOW_ATTR_MAX]. */
static qf_status read_ints(const qf_graph *g, const qf_node *n, const char *name, int max, int64_t lo, int64_t *out,
                           int *count)
{
    int cnt = 0;
    const int64_t *v = qfi_attr_ints(n, name, &cnt);
    *count = 0;
    if (!v || cnt == 0) return QF_OK;
    if (cnt > max)
        return qf_error(QF_ERR_UNSUPPORTED, "%s has %d values; at most %d spatial dims are supported", name, cnt,
                        QFI_MAX_SPATIAL);
    for (int i = 0; i < cnt; i++) {
        if (v[i] < lo || v[i] > WINDOW_ATTR_MAX)
            return qf_error(QF_ERR_INVALID, "%s[%d] = %lld is out of range", name, i, (long long)v[i]);
        out[i] = v[i];
    }
    *count = cnt;
    return QF_OK;
}

qf_status qfi_window_parse(const qf_graph *g, const qf_node *n, qfi_window_attrs *a)
{
    memset(a, 0, sizeof *a);
    const char *ap = qfi_attr_string(n, "auto_pad", "NOTSET");
    if (strcmp(ap, "NOTSET") == 0 || ap[0] == '\0') a->auto_pad = QFI_PAD_NOTSET;
    else if (strcmp(ap, "SAME_UPPER") == 0) a->auto_pad = QFI_PAD_SAME_UPPER;
    else if (strcmp(ap, "SAME_LOWER") == 0) a->auto_pad = QFI_PAD_SAME_LOWER;
    else if (strcmp(ap, "VALID") == 0) a->auto_pad = QFI_PAD_VALID;
    else return qf_error(QF_ERR_INVALID, "unknown auto_pad \"%s\"", ap);
    QF_CHECK(read_ints(g, n, "kernel_shape", QFI_MAX_SPATIAL, 1, a->kernel, &a->n_kernel));
    QF_CHECK(read_ints(g, n, "strides", QFI_MAX_SPATIAL, 1, a->strides, &a->n_strides));
    QF_CHECK(read_ints(g, n, "dilations", QFI_MAX_SPATIAL, 1, a->dilations, &a->n_dilations));
    QF_CHECK(read_ints(g, n, "pads", 2 * QFI_MAX_SPATIAL, 0, a->pads, &a->n_pads));
    if (a->n_pads % 2) return qf_error(QF_ERR_INVALID, "pads has an odd count %d", a->n_pads);
    return QF_OK;
}

static qf_status check_count(const qf_graph *g, const qf_node *n, const char *name, int count, int want)
{
    if (count == 0 || count == want) return QF_OK;
    return qf_error(QF_ERR_INVALID, "%s has %d values for %d spatial dims", name, count,
                    want / (strcmp(name, "pads") == 0 ? 2 : 1));
}

qf_status qfi_window_setup(const qf_graph *g, const qf_node *n, const qfi_window_attrs *a, int nsp,
                           const int64_t *in, const int64_t *k, qfi_window *w)
{
    if (nsp < 1 || nsp > QFI_MAX_SPATIAL)
        return qf_error(QF_ERR_UNSUPPORTED, "%d spatial dims; 1 to %d are supported", nsp, QFI_MAX_SPATIAL);
    QF_CHECK(check_count(g, n, "kernel_shape", a->n_kernel, nsp));
    QF_CHECK(check_count(g, n, "strides", a->n_strides, nsp));
    QF_CHECK(check_count(g, n, "dilations", a->n_dilations, nsp));
    QF_CHECK(check_count(g, n, "pads", a->n_pads, 2 * nsp));
    int lead = QFI_MAX_SPATIAL - nsp;
    for (int s = 0; s < QFI_MAX_SPATIAL; s++) {
        w->in[s] = w->k[s] = w->stride[s] = w->dil[s] = w->out[s] = 1;
        w->pad[s] = w->pad_end[s] = 0;
    }
    w->nsp = nsp;
    for (int i = 0; i < nsp; i++) {
        int s = lead + i;
        w->in[s] = in[i];
        w->k[s] = k[i];
        if (k[i] < 1 || k[i] > WINDOW_ATTR_MAX)
            return qf_error(QF_ERR_INVALID, "kernel dim %d is %lld", i, (long long)k[i]);
        if (a->n_kernel && a->kernel[i] != k[i])
            return qf_error(QF_ERR_INVALID, "kernel_shape[%d] = %lld but the weights say %lld", i,
                            (long long)a->kernel[i], (long long)k[i]);
        if (a->n_strides) w->stride[s] = a->strides[i];
        if (a->n_dilations) w->dil[s] = a->dilations[i];
        if (a->n_pads) {
            w->pad[s] = a->pads[i];
            w->pad_end[s] = a->pads[nsp + i];
        }
    }
    return QF_OK;
}

qf_status qfi_window_resolve(const qf_graph *g, const qf_node *n, const qfi_window_attrs *a, int nsp,
                             const int64_t *in, const int64_t *k, bool ceil_mode, qfi_window *w)
{
    QF_CHECK(qfi_window_setup(g, n, a, nsp, in, k, w));
    for (int s = QFI_MAX_SPATIAL - nsp; s < QFI_MAX_SPATIAL; s++) {
        int64_t ek = (w->k[s] - 1) * w->dil[s] + 1; /* extent of the dilated kernel */
        if (a->auto_pad == QFI_PAD_SAME_UPPER || a->auto_pad == QFI_PAD_SAME_LOWER) {
            /* output = ceil(in / stride); the extra pad goes to the end (UPPER) or the start (LOWER) */
            w->out[s] = (w->in[s] + w->stride[s] - 1) / w->stride[s];
            int64_t total = (w->out[s] - 1) * w->stride[s] + ek - w->in[s];
            if (total < 0) total = 0;
            w->pad[s] = a->auto_pad == QFI_PAD_SAME_UPPER ? total / 2 : total - total / 2;
            w->pad_end[s] = total - w->pad[s];
            continue;
        }
        if (a->auto_pad == QFI_PAD_VALID) w->pad[s] = w->pad_end[s] = 0;
        int64_t span = w->in[s] + w->pad[s] + w->pad_end[s] - ek;
        if (span < 0)
            return qf_error(QF_ERR_INVALID, "window of %lld does not fit the padded input dim of %lld", (long long)ek,
                            (long long)(w->in[s] + w->pad[s] + w->pad_end[s]));
        w->out[s] = (ceil_mode ? (span + w->stride[s] - 1) / w->stride[s] : span / w->stride[s]) + 1;
        /* a window that would start in the end padding is dropped (as ORT and PyTorch do) */
        if (ceil_mode && w->out[s] > 1 && (w->out[s] - 1) * w->stride[s] >= w->in[s] + w->pad[s]) w->out[s]--;
    }
    return QF_OK;
}

/* ---- Conv ------------------------------------------------------------------------- */

static qf_status conv_parse(qf_graph *g, qf_node *n)
{
    /* INT8: x, W, bias, weight scales, residual (lib/ops/qdq.c) */
    QF_CHECK(qfi_check_arity(g, n, 2, n->precision == QF_PREC_INT8 ? 5 : 3));
    qfi_conv_params *p = qfi_calloc(1, sizeof *p);
    if (!p) return QF_ERR_NOMEM;
    qf_status st = qfi_window_parse(g, n, &p->win);
    p->group = qfi_attr_int(n, "group", 1);
    if (st == QF_OK && p->group < 1) st = qf_error(QF_ERR_INVALID, "group is %lld", (long long)p->group);
    return qfi_node_set_params(n, p, st);
}

qf_status qfi_conv_geometry(const qf_graph *g, const qf_node *n, qfi_conv_geom *geo)
{
    const qfi_conv_params *p = n->params;
    QF_ASSERT(p);
    const qf_value *x = qfi_in(g, n, 0), *w = qfi_in(g, n, 1), *b = qfi_in(g, n, 2);
    QF_ASSERT(x && w);
    if (n->precision == QF_PREC_INT8) {
        QF_CHECK(qfi_int8_operands(g, n, w->ndim ? w->dims[0] : 0));
    } else {
        QF_CHECK(qfi_require_f32(g, n, x, "input"));
        QF_CHECK(qfi_require_f32(g, n, w, "weight"));
        if (b) QF_CHECK(qfi_require_f32(g, n, b, "bias"));
    }
    if (x->ndim < 3 || x->ndim > 2 + QFI_MAX_SPATIAL)
        return qf_error(QF_ERR_UNSUPPORTED, "input %s has %d dims; 3 to %d are supported", x->name, x->ndim,
                        2 + QFI_MAX_SPATIAL);
    if (w->ndim != x->ndim)
        return qf_error(QF_ERR_INVALID, "weight %s has %d dims but the input has %d", w->name, w->ndim, x->ndim);
    geo->N = x->dims[0];
    geo->C = x->dims[1];
    geo->M = w->dims[0];
    geo->group = p->group;
    if (geo->C % geo->group || geo->M % geo->group || w->dims[1] != geo->C / geo->group)
        return qf_error(QF_ERR_INVALID, "input has %lld channels, weight %s is (%lld,%lld,...) and group is %lld",
                        (long long)geo->C, w->name, (long long)w->dims[0], (long long)w->dims[1],
                        (long long)geo->group);
    geo->has_bias = b != NULL;
    if (b && (b->ndim != 1 || b->dims[0] != geo->M))
        return qf_error(QF_ERR_INVALID, "bias %s must have %lld elements", b->name, (long long)geo->M);
    return qfi_window_resolve(g, n, &p->win, x->ndim - 2, x->dims + 2, w->dims + 2, false, &geo->w);
}

static qf_status conv_infer(qf_graph *g, qf_node *n)
{
    qfi_conv_geom geo;
    QF_CHECK(qfi_conv_geometry(g, n, &geo));
    int64_t dims[2 + QFI_MAX_SPATIAL] = {geo.N, geo.M};
    for (int i = 0; i < geo.w.nsp; i++) dims[2 + i] = geo.w.out[QFI_MAX_SPATIAL - geo.w.nsp + i];
    /* an INT8 node's output dtype (i8, f16 or f32) was chosen when it was quantized */
    qf_dtype dt = n->precision == QF_PREC_INT8 ? qfi_out(g, n, 0)->dtype : QF_F32;
    qfi_value_set_shape(qfi_out(g, n, 0), dt, 2 + geo.w.nsp, dims);
    return QF_OK;
}

static int64_t conv_flops(const qf_graph *g, const qf_node *n)
{
    qfi_conv_geom geo;
    if (!n->params || qfi_conv_geometry(g, n, &geo) != QF_OK) return 0;
    /* per image: every output element is a dot product of (C/group)*K terms */
    return 2 * geo.M * qfi_window_out_size(&geo.w) * (geo.C / geo.group) * qfi_window_k_size(&geo.w);
}

/* INT8: the weight (M, C/group, k...) is quantized along M. */
static bool conv_int8_ok(const qf_graph *g, const qf_node *n)
{
    const qf_value *w = qfi_in(g, n, 1);
    return w->ndim >= 3 && w->dims[0] > 0;
}

static void conv_weight_layout(const qf_graph *g, const qf_node *n, int64_t *outer, int64_t *channels, int64_t *inner)
{
    const qf_value *w = qfi_in(g, n, 1);
    *outer = 1;
    *channels = w->dims[0];
    *inner = qf_value_numel(w) / w->dims[0];
}

const qfi_op_desc qfi_op_conv = {
    .parse = conv_parse,
    .infer = conv_infer,
    .flops = conv_flops,
    .traits = QFI_OP_EPILOGUE,
    .int8 = QFI_INT8_COMPUTE,
    .int8_ok = conv_int8_ok,
    .weight_layout = conv_weight_layout,
    .typed = QFI_PREC_BIT(QF_PREC_INT8),
};
