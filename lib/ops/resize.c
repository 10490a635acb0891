/* Resize (opset 10..19) and Upsample (7..9): nearest and N-linear
 * interpolation with every coordinate transformation mode except cubic and
 * antialiasing. infer() turns the constant scales/sizes/roi into per-dim tap
 * tables; the CPU kernel (runtime/cpu/resize.c) only reads them. */
#include <math.h>
#include "ops/nn.h"
#include "ops/ops.h"
#include "ops/tensor_ops.h"

static int lookup(const char *s, const char *const *names, int count)
{
    for (int i = 0; i < count; i++)
        if (names[i] && strcmp(s, names[i]) == 0) return i;
    return -1;
}

static qf_status parse_resize_attrs(qf_graph *g, qf_node *n, qfi_resize_params *p)
{
    static const char *const coords[] = {
        [QFI_COORD_HALF_PIXEL] = "half_pixel",
        [QFI_COORD_HALF_PIXEL_SYMMETRIC] = "half_pixel_symmetric",
        [QFI_COORD_PYTORCH_HALF_PIXEL] = "pytorch_half_pixel",
        [QFI_COORD_ALIGN_CORNERS] = "align_corners",
        [QFI_COORD_ASYMMETRIC] = "asymmetric",
        [QFI_COORD_TF_HALF_PIXEL_FOR_NN] = "tf_half_pixel_for_nn",
        [QFI_COORD_TF_CROP_AND_RESIZE] = "tf_crop_and_resize",
    };
    static const char *const nearests[] = {
        [QFI_NEAREST_ROUND_PREFER_FLOOR] = "round_prefer_floor",
        [QFI_NEAREST_ROUND_PREFER_CEIL] = "round_prefer_ceil",
        [QFI_NEAREST_FLOOR] = "floor",
        [QFI_NEAREST_CEIL] = "ceil",
    };
    static const char *const aspects[] = {
        [QFI_ASPECT_STRETCH] = "stretch", [QFI_ASPECT_NOT_LARGER] = "not_larger", [QFI_ASPECT_NOT_SMALLER] = "not_smaller"};
    const char *c = qfi_attr_string(n, "coordinate_transformation_mode", "half_pixel");
    const char *nm = qfi_attr_string(n, "nearest_mode", "round_prefer_floor");
    const char *as = qfi_attr_string(n, "keep_aspect_ratio_policy", "stretch");
    int ci = lookup(c, coords, QF_ARRAY_LEN(coords));
    int ni = lookup(nm, nearests, QF_ARRAY_LEN(nearests));
    int ai = lookup(as, aspects, QF_ARRAY_LEN(aspects));
    if (ci < 0 || ni < 0 || ai < 0) return qf_error(QF_ERR_INVALID, "unknown mode '%s'", ci < 0 ? c : ni < 0 ? nm : as);
    p->coord = (qfi_resize_coord)ci;
    p->nearest = (qfi_resize_nearest)ni;
    p->aspect = (qfi_resize_aspect)ai;
    p->extrapolation = qfi_attr_float(n, "extrapolation_value", 0.0f);
    if (qfi_attr_int(n, "antialias", 0) != 0) return qf_error(QF_ERR_UNSUPPORTED, "antialias");
    int cnt;
    const int64_t *axes = qfi_attr_ints(n, "axes", &cnt);
    if (axes) {
        if (cnt > QF_MAX_DIMS) return qf_error(QF_ERR_INVALID, "%d axes", cnt);
        p->n_axes = cnt;
        memcpy(p->axes, axes, (size_t)cnt * sizeof *axes);
    }
    return QF_OK;
}

static qf_status resize_parse(qf_graph *g, qf_node *n)
{
    int lo, hi; /* allowed input counts */
    if (n->op == QF_OP_UPSAMPLE)
        lo = hi = g->opset < 9 ? 1 : 2; /* scales: an attribute, then an input */
    else if (g->opset < 11)
        lo = hi = 2; /* X, scales */
    else
        lo = 1, hi = 4; /* X, roi, scales, sizes */
    if (n->n_in < lo || n->n_in > hi || n->n_out != 1)
        return qf_error(QF_ERR_INVALID, "%d inputs and %d outputs at opset %lld", n->n_in, n->n_out,
                        (long long)g->opset);
    const char *mode = qfi_attr_string(n, "mode", "nearest");
    qfi_resize_mode m;
    if (strcmp(mode, "nearest") == 0)
        m = QFI_RESIZE_NEAREST;
    else if (strcmp(mode, "linear") == 0 || (n->op == QF_OP_UPSAMPLE && strcmp(mode, "bilinear") == 0))
        m = QFI_RESIZE_LINEAR;
    else if (strcmp(mode, "cubic") == 0) return qf_error(QF_ERR_UNSUPPORTED, "cubic interpolation");
    else return qf_error(QF_ERR_INVALID, "unknown mode '%s'", mode);

    qfi_resize_params *p = qfi_calloc(1, sizeof *p);
    if (!p) return QF_ERR_NOMEM;
    p->mode = m;
    p->n_axes = -1;
    p->n_attr_scales = -1;
    qf_status st = QF_OK;
    if (n->op == QF_OP_RESIZE && g->opset >= 11) {
        st = parse_resize_attrs(g, n, p);
    } else {
        /* Upsample and Resize-10: asymmetric coordinates, ONNX Runtime's legacy nearest rounding */
        p->coord = QFI_COORD_ASYMMETRIC;
        p->nearest = QFI_NEAREST_LEGACY;
        if (n->op == QF_OP_UPSAMPLE && g->opset < 9) {
            const qf_attr *sc = qfi_attr_find(n, "scales");
            if (!sc || sc->type != QF_ATTR_FLOATS || sc->n > QF_MAX_DIMS)
                st = qf_error(QF_ERR_INVALID, "missing or oversized scales attribute");
            else {
                p->n_attr_scales = sc->n;
                memcpy(p->attr_scales, sc->floats, (size_t)sc->n * sizeof(float));
            }
        }
    }
    return qfi_node_set_params(n, p, st);
}

/* Reads constant float input k (absent or empty: *count = 0). */
static qf_status const_floats(const qf_graph *g, const qf_node *n, int k, float *out, int max, int *count)
{
    const qf_value *v = qfi_in(g, n, k);
    *count = 0;
    if (!v || qf_value_numel(v) == 0) return QF_OK;
    if (!(v->flags & QF_VALUE_CONST))
        return qf_error(QF_ERR_UNSUPPORTED, "input %s is not constant (dynamic shape input)", v->name);
    if (v->dtype != QF_F32)
        return qf_error(QF_ERR_UNSUPPORTED, "%s is %s, not float", v->name, qf_dtype_info(v->dtype)->name);
    int64_t cnt = qf_value_numel(v);
    if (cnt > max) return qf_error(QF_ERR_INVALID, "%s has %lld elements (at most %d)", v->name, (long long)cnt, max);
    memcpy(out, v->data, (size_t)cnt * sizeof *out);
    *count = (int)cnt;
    return QF_OK;
}

/* Input coordinate that output index x of a dim maps to. As in the ONNX
 * reference, "the resized length" is scale * in, which is not the integer
 * output length `out` when a scale does not divide evenly. */
static double original_coord(const qfi_resize_params *p, int64_t x, int64_t in, int64_t out, double scale,
                             double roi0, double roi1)
{
    double len = scale * (double)in;
    switch (p->coord) {
    case QFI_COORD_HALF_PIXEL: return (x + 0.5) / scale - 0.5;
    case QFI_COORD_HALF_PIXEL_SYMMETRIC: {
        /* centers the sampled window when rounding made out != len */
        double offset = (double)in / 2.0 * (1.0 - (double)out / len);
        return offset + (x + 0.5) / scale - 0.5;
    }
    case QFI_COORD_PYTORCH_HALF_PIXEL: return len > 1.0 ? (x + 0.5) / scale - 0.5 : 0.0;
    case QFI_COORD_ALIGN_CORNERS: return len == 1.0 ? 0.0 : (double)x * (double)(in - 1) / (len - 1.0);
    case QFI_COORD_ASYMMETRIC: return (double)x / scale;
    case QFI_COORD_TF_HALF_PIXEL_FOR_NN: return (x + 0.5) / scale;
    case QFI_COORD_TF_CROP_AND_RESIZE:
        return len == 1.0 ? 0.5 * (roi0 + roi1) * (double)(in - 1)
                          : roi0 * (double)(in - 1) + (double)x * (roi1 - roi0) * (double)(in - 1) / (len - 1.0);
    }
    return 0.0;
}

static int64_t nearest_index(qfi_resize_nearest mode, double c, bool shrinking)
{
    double f = floor(c);
    switch (mode) {
    case QFI_NEAREST_ROUND_PREFER_FLOOR: return (int64_t)(c - f > 0.5 ? f + 1 : f);
    case QFI_NEAREST_ROUND_PREFER_CEIL: return (int64_t)(c - f >= 0.5 ? f + 1 : f);
    case QFI_NEAREST_FLOOR: return (int64_t)f;
    case QFI_NEAREST_CEIL: return (int64_t)ceil(c);
    case QFI_NEAREST_LEGACY: return (int64_t)(shrinking ? ceil(c) : f);
    }
    return 0;
}

/* Fills the taps of one dim. */
static void dim_taps(const qfi_resize_params *p, int64_t in, int64_t out, double scale, double roi0, double roi1,
                     qfi_resize_tap *t)
{
    for (int64_t o = 0; o < out; o++) {
        double c = original_coord(p, o, in, out, scale, roi0, roi1);
        /* coordinates far outside are clamped before the integer conversion */
        if (c < -1.0) c = -1.0;
        if (c > (double)in) c = (double)in;
        if (p->coord == QFI_COORD_TF_CROP_AND_RESIZE && (c < 0.0 || c > (double)(in - 1))) {
            t[o] = (qfi_resize_tap){.i0 = -1, .i1 = -1, .w1 = 0.0f};
            continue;
        }
        if (p->mode == QFI_RESIZE_NEAREST) {
            int64_t i = nearest_index(p->nearest, c, scale < 1.0);
            i = i < 0 ? 0 : i > in - 1 ? in - 1 : i;
            t[o] = (qfi_resize_tap){.i0 = i, .i1 = i, .w1 = 0.0f};
        } else {
            /* outside [0, in-1] the edge value repeats */
            if (c < 0.0) c = 0.0;
            if (c > (double)(in - 1)) c = (double)(in - 1);
            int64_t i0 = (int64_t)floor(c);
            int64_t i1 = i0 + 1 < in ? i0 + 1 : i0;
            t[o] = (qfi_resize_tap){.i0 = i0, .i1 = i1, .w1 = (float)(c - (double)i0)};
        }
    }
}

static qf_status resize_infer(qf_graph *g, qf_node *n)
{
    qfi_resize_params *p = n->params;
    const qf_value *x = qfi_in(g, n, 0);
    if (!x) return qf_error(QF_ERR_INVALID, "missing input");
    int r = x->ndim;
    if (p->mode == QFI_RESIZE_LINEAR && x->dtype != QF_F32)
        return qf_error(QF_ERR_UNSUPPORTED, "linear mode on %s", qf_dtype_info(x->dtype)->name);
    if (p->coord == QFI_COORD_TF_CROP_AND_RESIZE && x->dtype != QF_F32)
        return qf_error(QF_ERR_UNSUPPORTED, "tf_crop_and_resize on %s", qf_dtype_info(x->dtype)->name);

    int axes[QF_MAX_DIMS], na = r;
    for (int i = 0; i < r; i++) axes[i] = i;
    if (p->n_axes >= 0) {
        na = p->n_axes;
        bool seen[QF_MAX_DIMS] = {false};
        for (int i = 0; i < na; i++) {
            QF_CHECK(qfi_axis_norm(g, n, p->axes[i], r, &axes[i]));
            if (seen[axes[i]]) return qf_error(QF_ERR_INVALID, "axis %d repeated", axes[i]);
            seen[axes[i]] = true;
        }
    }

    float scales[QF_MAX_DIMS], roi[2 * QF_MAX_DIMS];
    int64_t sizes[QF_MAX_DIMS];
    int ns = 0, nz = 0, nr = 0;
    if (p->n_attr_scales >= 0) {
        ns = p->n_attr_scales;
        memcpy(scales, p->attr_scales, sizeof scales);
    } else if (n->op == QF_OP_UPSAMPLE || g->opset < 11) {
        QF_CHECK(const_floats(g, n, 1, scales, QF_MAX_DIMS, &ns));
    } else {
        QF_CHECK(const_floats(g, n, 2, scales, QF_MAX_DIMS, &ns));
        QF_CHECK(qfi_const_ints(g, n, 3, sizes, QF_MAX_DIMS, &nz));
        if (p->coord == QFI_COORD_TF_CROP_AND_RESIZE) QF_CHECK(const_floats(g, n, 1, roi, 2 * QF_MAX_DIMS, &nr));
    }
    if ((ns > 0) == (nz > 0)) return qf_error(QF_ERR_INVALID, "needs exactly one of scales and sizes");
    if ((ns ? ns : nz) != na || (nr && nr != 2 * na))
        return qf_error(QF_ERR_INVALID, "%d scales/sizes and %d roi values for %d axes", ns ? ns : nz, nr, na);

    int64_t dims[QF_MAX_DIMS];
    double scale[QF_MAX_DIMS], roi0[QF_MAX_DIMS], roi1[QF_MAX_DIMS];
    for (int d = 0; d < r; d++) {
        dims[d] = x->dims[d];
        scale[d] = 1.0;
        roi0[d] = 0.0;
        roi1[d] = 1.0;
    }
    const double limit = (double)QF_MAX_TENSOR_BYTES;
    if (nz) {
        double keep = p->aspect == QFI_ASPECT_NOT_LARGER ? INFINITY : 0.0;
        for (int i = 0; i < na; i++) {
            int d = axes[i];
            if (sizes[i] < 0 || (x->dims[d] == 0 && sizes[i] != 0) || (double)sizes[i] > limit)
                return qf_error(QF_ERR_INVALID, "size %lld for dim %d of %lld", (long long)sizes[i], d,
                                (long long)x->dims[d]);
            dims[d] = sizes[i];
            scale[d] = x->dims[d] ? (double)sizes[i] / (double)x->dims[d] : 1.0;
            if (p->aspect == QFI_ASPECT_NOT_LARGER && scale[d] < keep) keep = scale[d];
            if (p->aspect == QFI_ASPECT_NOT_SMALLER && scale[d] > keep) keep = scale[d];
        }
        if (p->aspect != QFI_ASPECT_STRETCH) {
            /* one scale for every resized axis, sizes rounded from it */
            for (int i = 0; i < na; i++) {
                int d = axes[i];
                scale[d] = keep;
                dims[d] = (int64_t)floor(keep * (double)x->dims[d] + 0.5);
            }
        }
    } else {
        for (int i = 0; i < na; i++) {
            int d = axes[i];
            double o = floor((double)scales[i] * (double)x->dims[d]);
            if (!(scales[i] > 0.0f) || !(o <= limit))
                return qf_error(QF_ERR_INVALID, "scale %g for dim %d of %lld", (double)scales[i], d,
                                (long long)x->dims[d]);
            scale[d] = scales[i];
            dims[d] = (int64_t)o;
        }
    }
    for (int i = 0; i < nr / 2; i++) {
        roi0[axes[i]] = roi[i];
        roi1[axes[i]] = roi[na + i];
    }
    int64_t n_taps = 0;
    double bytes = (double)qf_dtype_info(x->dtype)->size;
    for (int d = 0; d < r; d++) {
        n_taps += dims[d];
        bytes *= (double)dims[d];
    }
    if (bytes > limit)
        return qf_error(QF_ERR_INVALID, "output of more than %lld bytes", (long long)QF_MAX_TENSOR_BYTES);
    if (n_taps > QFI_RESIZE_MAX_TAPS)
        return qf_error(QF_ERR_INVALID, "output dims of %lld positions in all (at most %lld)", (long long)n_taps,
                        (long long)QFI_RESIZE_MAX_TAPS);
    qfi_resize_params *np = realloc(p, sizeof *p + (size_t)n_taps * sizeof(qfi_resize_tap));
    if (!np) return qf_error(QF_ERR_NOMEM, "out of memory");
    n->params = p = np;
    p->n_taps = n_taps;
    for (int64_t d = 0, at = 0; d < r; at += dims[d], d++) {
        p->tap_at[d] = at;
        dim_taps(p, x->dims[d], dims[d], scale[d], roi0[d], roi1[d], p->taps + at);
    }
    qfi_value_set_shape(qfi_out(g, n, 0), x->dtype, r, dims);
    return QF_OK;
}

/* Upsample-7 and Resize-10 read the experimental opset 6 Upsample's attributes differently. */
static qf_status upsample_from_opset6(qf_graph *g, qf_node *n)
{
    return qf_error(QF_ERR_UNSUPPORTED, "the experimental opset 6 Upsample is not supported");
}

/* Nearest only moves elements: int8 in, int8 out at the input's scale (both
 * engines' nearest kernels move stored elements of any width). YOLOv8n's
 * two 2x upsamplings between INT8 convs were FP16 islands with a
 * QuantizeLinear after each. Linear mixes values, and tf_crop_and_resize
 * writes its extrapolation value: those stay float. */
static bool resize_int8_ok(const qf_graph *g, const qf_node *n)
{
    (void)g;
    const qfi_resize_params *p = n->params;
    return p->mode == QFI_RESIZE_NEAREST && p->coord != QFI_COORD_TF_CROP_AND_RESIZE;
}

/* Nearest and linear keep the input's range (a linear output is a convex
 * combination of inputs); the parameter inputs say nothing of it. */
static qfi_range resize_range(const qf_graph *g, const qf_node *n, const qfi_range *in)
{
    (void)g;
    if (((const qfi_resize_params *)n->params)->coord == QFI_COORD_TF_CROP_AND_RESIZE)
        return (qfi_range){-INFINITY, INFINITY};
    return in[0];
}

/* roi, scales and sizes decide the output size: parameters, not data */
const qfi_op_desc qfi_op_resize = {
    .parse = resize_parse,
    .infer = resize_infer,
    .params = ~1u,
    .int8 = QFI_INT8_PASS,
    .int8_ok = resize_int8_ok,
    .range = resize_range,
};
const qfi_op_desc qfi_op_upsample = {
    .parse = resize_parse,
    .infer = resize_infer,
    .params = ~1u,
    .int8 = QFI_INT8_PASS,
    .int8_ok = resize_int8_ok,
    .range = resize_range,
    .from_opset6 = upsample_from_opset6,
};
