/* The qf_image type: reading a file, choosing the decoder from the first
 * bytes (never the name), allocation under the pixel bound, channel
 * conversion. */
#include <errno.h>
#include <strings.h>
#include <sys/stat.h>
#include "datasets_impl.h"

qf_status qfi_image_check_size(int w, int h, const char *name)
{
    if (w <= 0 || h <= 0)
        return qf_error(QF_ERR_FORMAT, "%s: image has size %dx%d", name, w, h);
    // The side bound keeps one axis's resize weights small (see resize.c).
    if (w > QF_IMAGE_MAX_SIDE || h > QF_IMAGE_MAX_SIDE)
        return qf_error(QF_ERR_NOMEM, "%s: image is %dx%d, wider or taller than the %d pixels qforge accepts",
                        name, w, h, QF_IMAGE_MAX_SIDE);
    // Checked before anything is allocated: a header may promise any size.
    if ((long long)w * h > QF_IMAGE_MAX_PIXELS)
        return qf_error(QF_ERR_NOMEM, "%s: image is %dx%d, more than the %lld pixels qforge accepts",
                        name, w, h, (long long)QF_IMAGE_MAX_PIXELS);
    return QF_OK;
}

qf_status qfi_image_alloc(qf_image *img, int w, int h, int c, const char *name)
{
    img->px = NULL;
    QF_CHECK(qfi_image_check_size(w, h, name));
    img->px = malloc((size_t)w * h * c);
    if (!img->px)
        return qf_error(QF_ERR_NOMEM, "%s: out of memory for a %dx%d image", name, w, h);
    img->w = w;
    img->h = h;
    img->c = c;
    return QF_OK;
}

void qf_image_free(qf_image *img)
{
    if (!img) return;
    free(img->px);
    img->px = NULL;
    img->w = img->h = img->c = 0;
}

bool qf_image_has_image_extension(const char *name)
{
    static const char *const ext[] = {".png", ".jpg", ".jpeg", ".ppm", ".pgm", ".pnm"};
    const char *dot = strrchr(name, '.');
    if (!dot) return false;
    for (size_t i = 0; i < QF_ARRAY_LEN(ext); i++)
        if (strcasecmp(dot, ext[i]) == 0) return true;
    return false;
}

qf_status qf_image_decode(const void *buf, size_t size, const char *name, qf_image *out)
{
    static const uint8_t png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    const uint8_t *b = buf;
    memset(out, 0, sizeof(*out));
    if (size == 0) return qf_error(QF_ERR_FORMAT, "%s: empty file", name);
    if (size >= 8 && memcmp(b, png_magic, 8) == 0) return qfi_decode_png(b, size, name, out);
    if (size >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return qfi_decode_jpeg(b, size, name, out);
    if (size >= 2 && b[0] == 'P' && b[1] >= '1' && b[1] <= '7') return qfi_decode_pnm(b, size, name, out);
    return qf_error(QF_ERR_FORMAT, "%s: not a PNG, JPEG or PNM image", name);
}

qf_status qf_image_read(const char *path, qf_image *out)
{
    memset(out, 0, sizeof(*out));
    FILE *f = fopen(path, "rb");
    if (!f) return qf_error(QF_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return qf_error(QF_ERR_IO, "%s: not a regular file", path);
    }
    if (st.st_size > QFI_IMAGE_MAX_FILE_BYTES) {
        fclose(f);
        return qf_error(QF_ERR_NOMEM, "%s: file of %lld bytes is larger than qforge reads",
                        path, (long long)st.st_size);
    }
    size_t size = (size_t)st.st_size;
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) {
        fclose(f);
        return qf_error(QF_ERR_NOMEM, "%s: out of memory reading %zu bytes", path, size);
    }
    size_t got = fread(buf, 1, size, f);
    int err = ferror(f);
    fclose(f);
    if (err || got != size) {
        free(buf);
        return qf_error(QF_ERR_IO, "%s: read error", path);
    }
    qf_status s = qf_image_decode(buf, size, path, out);
    free(buf);
    return s;
}

void qfi_rgb_to_luma(const uint8_t *rgb, uint8_t *gray, size_t n)
{
    // ITU-R 601-2 luma in 16-bit fixed point, rounded: the same numbers as
    // PIL's convert("L"), so --gray matches a PIL pipeline exactly. Safe in
    // place: gray[i] is written after rgb[3i..3i+2] was read.
    for (size_t i = 0; i < n; i++) {
        const uint8_t *s = rgb + 3 * i;
        gray[i] = (uint8_t)((s[0] * 19595u + s[1] * 38470u + s[2] * 7471u + 0x8000u) >> 16);
    }
}

qf_status qf_image_convert(qf_image *img, int channels)
{
    if (channels != 1 && channels != 3)
        return qf_error(QF_ERR_USAGE, "images can have 1 or 3 channels, not %d", channels);
    if (img->c == channels) return QF_OK;
    size_t n = (size_t)img->w * img->h;
    if (channels == 1) {
        QF_ASSERT(img->c == 3);
        qfi_rgb_to_luma(img->px, img->px, n);
        uint8_t *shrunk = realloc(img->px, n ? n : 1);
        if (shrunk) img->px = shrunk;
    } else {
        QF_ASSERT(img->c == 1);
        uint8_t *p = malloc(n * 3);
        if (!p) return qf_error(QF_ERR_NOMEM, "out of memory converting a %dx%d image", img->w, img->h);
        for (size_t i = 0; i < n; i++) p[3 * i] = p[3 * i + 1] = p[3 * i + 2] = img->px[i];
        free(img->px);
        img->px = p;
    }
    img->c = channels;
    return QF_OK;
}
