/* libFuzzer harness: PNG, JPEG and PNM bytes through qf_image_decode (the
 * decoder is picked by content), then channel conversion and three
 * preprocessings: resize + center crop, a plain resize to gray in NHWC, and a
 * crop larger than most images (the zero-padded border). A PNG's chunk CRCs
 * are recomputed first, or mutated chunks would stop at libpng's CRC check. */
#include "fuzz_util.h"
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static const uint8_t png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

static uint32_t get_be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

static void fix_png_crcs(uint8_t *f, size_t size)
{
    size_t at = 8;
    while (at + 12 <= size) {
        uint32_t len = get_be32(f + at);
        if (len > size - at - 12) break;
        uint32_t c = (uint32_t)crc32_z(crc32_z(0, NULL, 0), f + at + 4, (size_t)len + 4);
        uint8_t *p = f + at + 8 + len;
        p[0] = (uint8_t)(c >> 24), p[1] = (uint8_t)(c >> 16), p[2] = (uint8_t)(c >> 8), p[3] = (uint8_t)c;
        at += (size_t)len + 12;
    }
}

static void preprocess(const qf_preprocess *pp, const qf_image *img)
{
    int c, h, w;
    if (qf_preprocess_shape(pp, &c, &h, &w) != QF_OK) abort(); /* the harness's own settings */
    float *dst = malloc(sizeof(float) * (size_t)c * h * w);
    if (!dst) return;
    fz_check_error(qf_preprocess_image(pp, img, "image", dst), "image");
    free(dst);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    if (size >= 8 && !memcmp(buf, png_magic, 8)) fix_png_crcs(buf, size);
    qf_image img;
    qf_status st = qf_image_decode(buf, size, "image", &img);
    free(buf);
    fz_check_error(st, "image");
    if (st != QF_OK) return 0;
    if (img.w <= 0 || img.h <= 0 || (img.c != 1 && img.c != 3) || !img.px) abort();

    qf_preprocess a, b, c;
    qf_preprocess_init(&a);
    if (qf_preprocess_preset(&a, "imagenet") != QF_OK) abort();
    a.resize = 7, a.crop_w = a.crop_h = 5;
    qf_preprocess_init(&b);
    b.size_w = 6, b.size_h = 4, b.gray = true, b.bgr = true, b.layout = QF_LAYOUT_NHWC;
    qf_preprocess_init(&c);
    c.channels = 1, c.crop_w = 40, c.crop_h = 3;
    preprocess(&a, &img);
    preprocess(&b, &img);
    fz_check_error(qf_image_convert(&img, 1), NULL);
    preprocess(&c, &img);
    fz_check_error(qf_image_convert(&img, 3), NULL);
    preprocess(&a, &img);
    qf_image_free(&img);
    return 0;
}
