/* Preprocessing: the PREPROCESS options of the command line (parsing,
 * presets, printing them back for .calib/.qfm files) and the pipeline that
 * turns one decoded image into the model's input:
 * luma (--gray) -> resize -> center crop -> x/255 -> (x-mean)/std -> layout. */
#include <errno.h>
#include <math.h>
#include "datasets_impl.h"

#define MAX_OPTION_SIZE 65535

void qf_preprocess_init(qf_preprocess *pp)
{
    memset(pp, 0, sizeof(*pp));
    for (int i = 0; i < 3; i++) pp->std[i] = 1.0f;
    pp->channels = 3;
    pp->layout = QF_LAYOUT_NCHW;
}

static void set3(float *dst, float a, float b, float c)
{
    dst[0] = a;
    dst[1] = b;
    dst[2] = c;
}

qf_status qf_preprocess_preset(qf_preprocess *pp, const char *name)
{
    if (strcmp(name, "imagenet") != 0 && strcmp(name, "cifar10") != 0 && strcmp(name, "none") != 0)
        return qf_error(QF_ERR_USAGE, "--preset: unknown preset '%s' (imagenet, cifar10, none)", name);
    // A preset sets every option field, so it acts the same wherever it is given.
    pp->resize = pp->size_w = pp->size_h = pp->crop_w = pp->crop_h = 0;
    pp->bgr = pp->gray = false;
    set3(pp->mean, 0, 0, 0);
    set3(pp->std, 1, 1, 1);
    if (strcmp(name, "imagenet") == 0) {
        pp->resize = 256;
        pp->crop_w = pp->crop_h = 224;
        set3(pp->mean, 0.485f, 0.456f, 0.406f);
        set3(pp->std, 0.229f, 0.224f, 0.225f);
    } else if (strcmp(name, "cifar10") == 0) {
        set3(pp->mean, 0.4914f, 0.4822f, 0.4465f);
        set3(pp->std, 0.2023f, 0.1994f, 0.2010f);
    }
    return QF_OK;
}

// A whole-string integer in [1, MAX_OPTION_SIZE].
static bool parse_size1(const char *s, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 1 || v > MAX_OPTION_SIZE) return false;
    *out = (int)v;
    return true;
}

// "N" (square) or "WxH".
static bool parse_wxh(const char *s, int *w, int *h)
{
    const char *x = strpbrk(s, "xX");
    if (!x) {
        if (!parse_size1(s, w)) return false;
        *h = *w;
        return true;
    }
    char a[32];
    size_t n = (size_t)(x - s);
    if (n == 0 || n >= sizeof(a)) return false;
    memcpy(a, s, n);
    a[n] = 0;
    return parse_size1(a, w) && parse_size1(x + 1, h);
}

// "a,b,c" or a single value used for all three channels.
static bool parse_floats3(const char *s, float out[3])
{
    float v[3];
    int n = 0;
    const char *p = s;
    for (;;) {
        char *end;
        errno = 0;
        v[n] = strtof(p, &end);
        if (errno || end == p || !isfinite(v[n])) return false;
        n++;
        if (*end == 0) break;
        if (*end != ',' || n == 3) return false;
        p = end + 1;
    }
    if (n == 2) return false;
    for (int i = 0; i < 3; i++) out[i] = v[n == 1 ? 0 : i];
    return true;
}

qf_status qf_preprocess_option(qf_preprocess *pp, const char *arg, const char *next, int *used)
{
    enum { PRESET, RESIZE, CROP, SIZE, MEAN, STD };
    static const char *const with_value[] = {"preset", "resize", "crop", "size", "mean", "std"};
    static const char *const expect[] = {"", "a size in pixels", "N or WxH", "WxH", "a,b,c", "a,b,c (not zero)"};
    *used = 0;
    if (strncmp(arg, "--", 2) != 0) return QF_OK;
    const char *name = arg + 2, *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    if (!eq && (strcmp(name, "bgr") == 0 || strcmp(name, "gray") == 0)) {
        *(name[0] == 'b' ? &pp->bgr : &pp->gray) = true;
        *used = 1;
        return QF_OK;
    }
    int which = -1;
    for (size_t i = 0; i < QF_ARRAY_LEN(with_value); i++)
        if (strlen(with_value[i]) == len && strncmp(name, with_value[i], len) == 0) which = (int)i;
    if (which < 0) return QF_OK;
    const char *val = eq ? eq + 1 : next;
    if (!val) return qf_error(QF_ERR_USAGE, "--%s needs a value", with_value[which]);
    *used = eq ? 1 : 2;

    // Values are parsed into locals first: a bad value leaves *pp unchanged.
    bool ok = true;
    int a, b;
    float f[3];
    switch (which) {
    case PRESET: return qf_preprocess_preset(pp, val);
    case RESIZE:
        if ((ok = parse_size1(val, &a))) pp->resize = a;
        break;
    case CROP:
        if ((ok = parse_wxh(val, &a, &b))) pp->crop_w = a, pp->crop_h = b;
        break;
    case SIZE:
        if ((ok = parse_wxh(val, &a, &b))) pp->size_w = a, pp->size_h = b;
        break;
    case MEAN:
        if ((ok = parse_floats3(val, f))) memcpy(pp->mean, f, sizeof(f));
        break;
    case STD:
        ok = parse_floats3(val, f) && f[0] != 0 && f[1] != 0 && f[2] != 0;
        if (ok) memcpy(pp->std, f, sizeof(f));
        break;
    }
    if (!ok)
        return qf_error(QF_ERR_USAGE, "--%s: bad value '%s' (expected %s)", with_value[which], val, expect[which]);
    return QF_OK;
}

qf_status qf_preprocess_parse(qf_preprocess *pp, const char *text)
{
    char *copy = qfi_strdup(text);
    if (!copy) return QF_ERR_NOMEM;
    char *tok[64];
    int n = 0;
    for (char *save, *t = strtok_r(copy, " \t\n", &save); t; t = strtok_r(NULL, " \t\n", &save)) {
        if (n == (int)QF_ARRAY_LEN(tok)) {
            free(copy);
            return qf_error(QF_ERR_USAGE, "preprocessing '%s': too many options", text);
        }
        tok[n++] = t;
    }
    qf_status st = QF_OK;
    for (int i = 0; i < n && st == QF_OK;) {
        int used;
        st = qf_preprocess_option(pp, tok[i], i + 1 < n ? tok[i + 1] : NULL, &used);
        if (st == QF_OK && used == 0) st = qf_error(QF_ERR_USAGE, "preprocessing: unknown option '%s'", tok[i]);
        i += used;
    }
    free(copy);
    return st;
}

// The shortest %g text that reads back as the same float (0.485, not
// 0.485000014); 9 digits always suffice.
static void format_float(char *buf, size_t size, float v)
{
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(buf, size, "%.*g", digits, v);
        if (strtof(buf, NULL) == v) return;
    }
}

int qf_preprocess_format(const qf_preprocess *pp, char *buf, size_t size)
{
    char tmp[512], f[6][24];
    int n = 0;
    for (int i = 0; i < 3; i++) {
        format_float(f[i], sizeof(f[i]), pp->mean[i]);
        format_float(f[3 + i], sizeof(f[i]), pp->std[i]);
    }
#define PUT(...) n += snprintf(tmp + n, sizeof(tmp) - (size_t)n, __VA_ARGS__)
    if (pp->resize) PUT("--resize %d ", pp->resize);
    if (pp->size_w) PUT("--size %dx%d ", pp->size_w, pp->size_h);
    if (pp->crop_w) PUT("--crop %dx%d ", pp->crop_w, pp->crop_h);
    PUT("--mean %s,%s,%s ", f[0], f[1], f[2]);
    PUT("--std %s,%s,%s", f[3], f[4], f[5]);
    if (pp->bgr) PUT(" --bgr");
    if (pp->gray) PUT(" --gray");
#undef PUT
    return snprintf(buf, size, "%s", tmp);
}

qf_status qf_preprocess_shape(const qf_preprocess *pp, int *c, int *h, int *w)
{
    if (pp->channels != 1 && pp->channels != 3)
        return qf_error(QF_ERR_UNSUPPORTED, "the model takes %d channels; qforge feeds 1 or 3", pp->channels);
    if ((unsigned)pp->layout >= QF_LAYOUT_COUNT) return qf_error(QF_ERR_USAGE, "bad tensor layout %d", pp->layout);
    if (pp->resize && pp->size_w)
        return qf_error(QF_ERR_USAGE, "--resize and --size cannot be used together");
    for (int i = 0; i < pp->channels; i++)
        if (pp->std[i] == 0 || !isfinite(pp->std[i]) || !isfinite(pp->mean[i]))
            return qf_error(QF_ERR_USAGE, "--mean/--std: channel %d has mean %g, std %g", i, pp->mean[i], pp->std[i]);
    int ow = 0, oh = 0;
    const char *what = NULL;
    if (pp->crop_w) {
        ow = pp->crop_w, oh = pp->crop_h, what = "--crop";
    } else if (pp->size_w) {
        ow = pp->size_w, oh = pp->size_h, what = "--size";
    }
    if (ow && pp->width && (ow != pp->width || oh != pp->height))
        return qf_error(QF_ERR_INVALID, "%s gives %dx%d images but the model takes %dx%d", what, ow, oh,
                        pp->width, pp->height);
    if (!ow) ow = pp->width, oh = pp->height;
    if (ow <= 0 || oh <= 0)
        return qf_error(QF_ERR_USAGE, "the image size is not fixed: give --crop or --size (or a model input size)");
    *c = pp->channels;
    *h = oh;
    *w = ow;
    return QF_OK;
}

qf_status qf_preprocess_fit(qf_preprocess *pp, int ndim, const int64_t *dims)
{
    if (ndim != 4) return qf_error(QF_ERR_UNSUPPORTED, "an image input has 4 dimensions (N,C,H,W or N,H,W,C), not %d", ndim);
    int64_t c = dims[1], h = dims[2], w = dims[3];
    if (c == 1 || c == 3) {
        pp->layout = QF_LAYOUT_NCHW;
    } else if (w == 1 || w == 3) { /* (N,H,W,C) */
        pp->layout = QF_LAYOUT_NHWC;
        int64_t t = c;
        c = w;
        w = h;
        h = t;
    } else {
        return qf_error(QF_ERR_UNSUPPORTED, "%lld channels; images have 1 or 3", (long long)c);
    }
    if (h <= 0 || w <= 0 || h > QF_IMAGE_MAX_SIDE || w > QF_IMAGE_MAX_SIDE)
        return qf_error(QF_ERR_UNSUPPORTED, "the input's image size %lldx%lld is not a fixed image size", (long long)w,
                        (long long)h);
    pp->channels = (int)c;
    pp->height = (int)h;
    pp->width = (int)w;
    int pc, ph, pw;
    return qf_preprocess_shape(pp, &pc, &ph, &pw);
}

// Offset of a centered crop of `crop` pixels on an axis of `size` pixels, as
// torchvision's center_crop: int(round((size - crop) / 2)) with Python's
// round-half-to-even (117 -> 58, not 59), and a crop larger than the image
// is zero-padded by (crop - size) // 2 in front (a negative offset here).
static int center_offset(int size, int crop)
{
    int d = size - crop;
    if (d < 0) return -((crop - size) / 2);
    int half = d / 2;
    if (d % 2 == 1 && half % 2 == 1) half++;  // k + 0.5 rounds to the even one of k, k+1
    return half;
}

qf_status qf_preprocess_image(const qf_preprocess *pp, const qf_image *img, const char *name, float *dst)
{
    int c, oh, ow;
    QF_CHECK(qf_preprocess_shape(pp, &c, &oh, &ow));
    QF_ASSERT(img->c == 1 || img->c == 3);

    // Work in one channel when the result is gray anyway; a gray image fed to
    // a 3-channel model is resized once and replicated at the end.
    const uint8_t *src = img->px;
    uint8_t *luma = NULL;
    int wc = img->c;
    if (wc == 3 && (pp->gray || c == 1)) {
        luma = malloc((size_t)img->w * img->h);
        if (!luma) return qf_error(QF_ERR_NOMEM, "%s: out of memory", name);
        qfi_rgb_to_luma(img->px, luma, (size_t)img->w * img->h);
        src = luma;
        wc = 1;
    }

    // Resized size: --resize N sets the shorter side to N and the longer to
    // int(N * long / short), as torchvision's Resize(N).
    // An extreme aspect ratio can make that absurd: bounded like a decoded image.
    int64_t rw64 = img->w, rh64 = img->h;
    if (pp->resize) {
        if (img->w <= img->h) {
            rw64 = pp->resize;
            rh64 = (int64_t)pp->resize * img->h / img->w;
        } else {
            rh64 = pp->resize;
            rw64 = (int64_t)pp->resize * img->w / img->h;
        }
    } else if (pp->size_w) {
        rw64 = pp->size_w;
        rh64 = pp->size_h;
    }
    qf_status st = QF_OK;
    if (rw64 > QF_IMAGE_MAX_SIDE || rh64 > QF_IMAGE_MAX_SIDE || rw64 * rh64 > QF_IMAGE_MAX_PIXELS) {
        st = qf_error(QF_ERR_FORMAT, "%s: resizing the %dx%d image gives %lldx%lld, too large", name,
                      img->w, img->h, (long long)rw64, (long long)rh64);
        goto out;
    }
    int rw = (int)rw64, rh = (int)rh64;
    int x0 = 0, y0 = 0, ww = rw, wh = rh;
    if (pp->crop_w) {
        ww = pp->crop_w;
        wh = pp->crop_h;
        x0 = center_offset(rw, ww);
        y0 = center_offset(rh, wh);
    }
    if (ww != ow || wh != oh) {
        st = qf_error(QF_ERR_INVALID, "%s: image comes out %dx%d but the model takes %dx%d (use --crop or --size)",
                      name, ww, wh, ow, oh);
        goto out;
    }

    float *tmp = malloc(sizeof(float) * (size_t)ww * wh * wc);
    if (!tmp) {
        st = qf_error(QF_ERR_NOMEM, "%s: out of memory", name);
        goto out;
    }
    st = qfi_resize_window(src, img->w, img->h, wc, rw, rh, x0, y0, ww, wh, tmp);
    if (st != QF_OK) {
        free(tmp);
        st = qf_error_prefix(st, "%s", name);
        goto out;
    }

    // (v/255 - mean) / std folded into one multiply-add per value.
    float scale[3], bias[3];
    int srcch[3];
    for (int o = 0; o < c; o++) {
        scale[o] = 1.0f / (255.0f * pp->std[o]);
        bias[o] = -pp->mean[o] / pp->std[o];
        srcch[o] = wc == 1 ? 0 : (pp->bgr ? 2 - o : o);
    }
    size_t hw = (size_t)ww * wh;
    // tmp is (H,W,wc); dst is (C,H,W) or (H,W,C).
    if (pp->layout == QF_LAYOUT_NCHW) {
        for (int o = 0; o < c; o++) {
            const float *t = tmp + srcch[o];
            float *d = dst + (size_t)o * hw;
            for (size_t i = 0; i < hw; i++) d[i] = t[i * wc] * scale[o] + bias[o];
        }
    } else {
        for (size_t i = 0; i < hw; i++)
            for (int o = 0; o < c; o++) dst[i * c + o] = tmp[i * wc + srcch[o]] * scale[o] + bias[o];
    }
    free(tmp);
out:
    free(luma);
    return st;
}
