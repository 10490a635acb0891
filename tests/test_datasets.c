/* Unit tests for datasets/: the three decoders on fixtures written here with
 * libpng/libjpeg and on tests/images/bad/, every preprocessing option against
 * hand-computed values, the crop convention, resize, labels, subsets, and the
 * decode pool's order across thread counts. */
#include <check.h>
#include <math.h>
#include <ftw.h>
#include <png.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../datasets/datasets_impl.h"
#include <jpeglib.h>
#include "testutil.h"

#define BAD_DIR QF_SRCDIR "/tests/images/bad"

// ---- fixtures -------------------------------------------------------------------------

static char tmp_root[64];

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    return remove(p);
}

static void make_tmp(void)
{
    snprintf(tmp_root, sizeof(tmp_root), "/tmp/qf_test_datasets_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp_root));
}

static void rm_tmp(void)
{
    nftw(tmp_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

// A path under the temporary folder, creating parent folders.
static const char *tmp_path(const char *rel)
{
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 512, "%s/%s", tmp_root, rel);
    for (char *s = p + strlen(tmp_root) + 1; (s = strchr(s, '/')); s++) {
        *s = 0;
        mkdir(p, 0755);
        *s = '/';
    }
    return p;
}

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

// color: PNG_COLOR_TYPE_*; depth 8 or 16 (16-bit samples given big-endian in px).
static void write_png(const char *path, int w, int h, int color, int depth, const uint8_t *px,
                      const png_color *palette, int npal, bool interlace)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    ck_assert(png && info);
    png_init_io(png, f);
    png_set_IHDR(png, info, w, h, depth, color, interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    if (palette) png_set_PLTE(png, info, palette, npal);
    png_write_info(png, info);
    int ch = color == PNG_COLOR_TYPE_RGB ? 3 : color == PNG_COLOR_TYPE_RGBA ? 4
           : color == PNG_COLOR_TYPE_GRAY_ALPHA ? 2 : 1;
    size_t rowbytes = (size_t)w * ch * (depth / 8 ? depth / 8 : 1);
    if (depth < 8) rowbytes = ((size_t)w * depth + 7) / 8;
    png_bytep rows[64];
    ck_assert_int_le(h, 64);
    for (int y = 0; y < h; y++) rows[y] = (png_bytep)px + y * rowbytes;
    png_write_image(png, rows);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    fclose(f);
}

static void write_jpeg(const char *path, int w, int h, int c, const uint8_t *px, int quality)
{
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr err;
    ci.err = jpeg_std_error(&err);
    jpeg_create_compress(&ci);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    jpeg_stdio_dest(&ci, f);
    ci.image_width = w;
    ci.image_height = h;
    ci.input_components = c;
    ci.in_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, quality, TRUE);
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW row = (JSAMPROW)px + (size_t)ci.next_scanline * w * c;
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    fclose(f);
}

// An RGB image whose pixel (x,y) is (x*10+y, 100+y, seed) -- busy but known.
static void write_rgb_png(const char *path, int w, int h, int seed)
{
    uint8_t px[64 * 64 * 3];
    ck_assert(w <= 64 && h <= 64);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = px + (y * w + x) * 3;
            p[0] = (uint8_t)(x * 10 + y), p[1] = (uint8_t)(100 + y), p[2] = (uint8_t)seed;
        }
    write_png(path, w, h, PNG_COLOR_TYPE_RGB, 8, px, NULL, 0, false);
}

static qf_image read_ok(const char *path)
{
    qf_image img;
    qf_status st = qf_image_read(path, &img);
    ck_assert_msg(st == QF_OK, "%s: %s", path, qf_error_message());
    return img;
}

// Preprocessing with no geometry or normalization: out = x*255/255 -> x/255... so
// tests that want raw values use mean 0, std 1/255, giving back x itself.
static void pp_raw(qf_preprocess *pp)
{
    qf_preprocess_init(pp);
    for (int i = 0; i < 3; i++) pp->std[i] = 1.0f / 255.0f;
}

// ---- decoders ---------------------------------------------------------------------------

START_TEST(png_color_types)
{
    make_tmp();
    // RGB, interlaced: exact values back.
    uint8_t rgb[2 * 3 * 3];
    for (int i = 0; i < 18; i++) rgb[i] = (uint8_t)(i * 13 + 1);
    write_png(tmp_path("rgb.png"), 3, 2, PNG_COLOR_TYPE_RGB, 8, rgb, NULL, 0, true);
    qf_image img = read_ok(tmp_path("rgb.png"));
    ck_assert_int_eq(img.w, 3);
    ck_assert_int_eq(img.h, 2);
    ck_assert_int_eq(img.c, 3);
    ck_assert_mem_eq(img.px, rgb, 18);
    qf_image_free(&img);

    // Gray 8-bit: one channel.
    uint8_t g[4] = {0, 50, 200, 255};
    write_png(tmp_path("g.png"), 2, 2, PNG_COLOR_TYPE_GRAY, 8, g, NULL, 0, false);
    img = read_ok(tmp_path("g.png"));
    ck_assert_int_eq(img.c, 1);
    ck_assert_mem_eq(img.px, g, 4);
    qf_image_free(&img);

    // Gray 1-bit: 0/1 become 0/255. Row 0 = 1,0,1 -> bits 101.....
    uint8_t bits[2] = {0xA0, 0x40};
    write_png(tmp_path("g1.png"), 3, 2, PNG_COLOR_TYPE_GRAY, 1, bits, NULL, 0, false);
    img = read_ok(tmp_path("g1.png"));
    uint8_t want1[6] = {255, 0, 255, 0, 255, 0};
    ck_assert_int_eq(img.c, 1);
    ck_assert_mem_eq(img.px, want1, 6);
    qf_image_free(&img);

    // RGBA: alpha dropped, color kept as is (not premultiplied).
    uint8_t rgba[8] = {10, 20, 30, 0, 40, 50, 60, 128};
    write_png(tmp_path("a.png"), 2, 1, PNG_COLOR_TYPE_RGBA, 8, rgba, NULL, 0, false);
    img = read_ok(tmp_path("a.png"));
    uint8_t want_a[6] = {10, 20, 30, 40, 50, 60};
    ck_assert_int_eq(img.c, 3);
    ck_assert_mem_eq(img.px, want_a, 6);
    qf_image_free(&img);

    // Palette: expanded to RGB.
    png_color pal[3] = {{255, 0, 0}, {0, 255, 0}, {1, 2, 3}};
    uint8_t idx[3] = {2, 0, 1};
    write_png(tmp_path("p.png"), 3, 1, PNG_COLOR_TYPE_PALETTE, 8, idx, pal, 3, false);
    img = read_ok(tmp_path("p.png"));
    uint8_t want_p[9] = {1, 2, 3, 255, 0, 0, 0, 255, 0};
    ck_assert_int_eq(img.c, 3);
    ck_assert_mem_eq(img.px, want_p, 9);
    qf_image_free(&img);

    // 16-bit gray: rounded to nearest 8-bit value (v/257).
    uint8_t g16[4] = {0x80, 0x80, 0x01, 0x00};  // 32896 -> 128, 256 -> 1
    write_png(tmp_path("g16.png"), 2, 1, PNG_COLOR_TYPE_GRAY, 16, g16, NULL, 0, false);
    img = read_ok(tmp_path("g16.png"));
    ck_assert_int_eq(img.c, 1);
    ck_assert_int_eq(img.px[0], 128);
    ck_assert_int_eq(img.px[1], 1);
    qf_image_free(&img);
    rm_tmp();
}
END_TEST

START_TEST(jpeg_rgb_and_gray)
{
    make_tmp();
    // A smooth RGB gradient at quality 95 decodes within a few levels.
    uint8_t px[16 * 16 * 3];
    for (int y = 0; y < 16; y++)
        for (int x = 0; x < 16; x++) {
            uint8_t *p = px + (y * 16 + x) * 3;
            p[0] = (uint8_t)(x * 8 + 50), p[1] = (uint8_t)(y * 8 + 40), p[2] = 128;
        }
    write_jpeg(tmp_path("c.jpg"), 16, 16, 3, px, 95);
    qf_image img = read_ok(tmp_path("c.jpg"));
    ck_assert_int_eq(img.w, 16);
    ck_assert_int_eq(img.h, 16);
    ck_assert_int_eq(img.c, 3);
    double err = 0;
    for (int i = 0; i < 16 * 16 * 3; i++) err += fabs((double)img.px[i] - px[i]);
    ck_assert_double_lt(err / (16 * 16 * 3), 2.0);
    qf_image_free(&img);

    // Grayscale JPEG: one channel; a constant image comes back exactly.
    uint8_t g[8 * 8];
    memset(g, 77, sizeof(g));
    write_jpeg(tmp_path("g.jpeg"), 8, 8, 1, g, 90);
    img = read_ok(tmp_path("g.jpeg"));
    ck_assert_int_eq(img.c, 1);
    for (int i = 0; i < 64; i++) ck_assert_int_eq(img.px[i], 77);
    qf_image_free(&img);
    rm_tmp();
}
END_TEST

static void check_pnm(const char *text, size_t n, int w, int h, int c, const uint8_t *want)
{
    qf_image img;
    qf_status st = qf_image_decode(text, n, "mem.pnm", &img);
    ck_assert_msg(st == QF_OK, "%s", qf_error_message());
    ck_assert_int_eq(img.w, w);
    ck_assert_int_eq(img.h, h);
    ck_assert_int_eq(img.c, c);
    ck_assert_mem_eq(img.px, want, (size_t)w * h * c);
    qf_image_free(&img);
}

START_TEST(pnm_variants)
{
    static const char p2[] = "P2\n# a comment\n3 1\n# another\n10\n0 5 10\n";
    check_pnm(p2, sizeof(p2) - 1, 3, 1, 1, (const uint8_t[]){0, 128, 255});  // 5/10 -> 127.5 rounds up
    static const char p3[] = "P3 2 1 255  1 2 3\n4 5 6";
    check_pnm(p3, sizeof(p3) - 1, 2, 1, 3, (const uint8_t[]){1, 2, 3, 4, 5, 6});
    static const char p5[] = "P5\n2 2\n255\n\x00\x7f\x80\xff";
    check_pnm(p5, sizeof(p5) - 1, 2, 2, 1, (const uint8_t[]){0, 127, 128, 255});
    static const char p6[] = "P6\n1 1\n255\n\x0a\x14\x1e";
    check_pnm(p6, sizeof(p6) - 1, 1, 1, 3, (const uint8_t[]){10, 20, 30});
    // 16-bit binary (big-endian), maxval 65535: 0x8080 = 32896 -> 128; 1000 -> 4.
    static const char p6w[] = "P6\n1 1\n65535\n\xff\xff\x80\x80\x03\xe8";
    check_pnm(p6w, sizeof(p6w) - 1, 1, 1, 3, (const uint8_t[]){255, 128, 4});
    // maxval 1000 binary (two bytes): 500 -> 127.5 -> 128; 1000 -> 255.
    static const char p5w[] = "P5 2 1 1000\n\x01\xf4\x03\xe8";
    check_pnm(p5w, sizeof(p5w) - 1, 2, 1, 1, (const uint8_t[]){128, 255});

    struct { const char *text; qf_status st; } bad[] = {
        {"P4\n8 1\n\xff", QF_ERR_UNSUPPORTED},       // PBM
        {"P7\nWIDTH 1\n", QF_ERR_UNSUPPORTED},       // PAM
        {"P5\n2 1\n255\n\x01", QF_ERR_FORMAT},        // truncated raster
        {"P2\n2 1\n10\n3 11\n", QF_ERR_FORMAT},       // sample above maxval
        {"P5\n2 1\n0\n\x00\x00", QF_ERR_FORMAT},      // maxval 0
        {"P5\n2 1\n70000\n\x00\x00\x00\x00", QF_ERR_FORMAT},
        {"P5\n0 1\n255\n", QF_ERR_FORMAT},            // zero width
        {"P6\n20000 20000\n255\n", QF_ERR_NOMEM},     // absurd size: refused before allocating
        {"P3\n1 1\n255\n1 2", QF_ERR_FORMAT},         // ASCII, a sample missing
        {"P5\nx 1\n255\n", QF_ERR_FORMAT},
    };
    for (size_t i = 0; i < QF_ARRAY_LEN(bad); i++) {
        qf_image img;
        qf_status st = qf_image_decode(bad[i].text, strlen(bad[i].text), "bad.pnm", &img);
        ck_assert_msg(st == bad[i].st, "case %zu: got %d (%s)", i, st, qf_error_message());
        ck_assert_ptr_null(img.px);
        ck_assert_ptr_nonnull(strstr(qf_error_message(), "bad.pnm"));
    }
}
END_TEST

START_TEST(sniffing_by_content)
{
    make_tmp();
    // A PNG named .jpg and a JPEG named .png are decoded by what they are.
    uint8_t px[3] = {1, 2, 3};
    write_png(tmp_path("really_png.jpg"), 1, 1, PNG_COLOR_TYPE_RGB, 8, px, NULL, 0, false);
    qf_image img = read_ok(tmp_path("really_png.jpg"));
    ck_assert_mem_eq(img.px, px, 3);
    qf_image_free(&img);
    uint8_t g[64];
    memset(g, 200, sizeof(g));
    write_jpeg(tmp_path("really_jpeg.PNG"), 8, 8, 1, g, 90);
    img = read_ok(tmp_path("really_jpeg.PNG"));
    ck_assert_int_eq(img.px[0], 200);
    qf_image_free(&img);
    // Not an image: a format error naming the file.
    write_bytes(tmp_path("text.png"), "hello", 5);
    ck_assert_int_eq(qf_image_read(tmp_path("text.png"), &img), QF_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), "text.png"));
    ck_assert_int_eq(qf_image_read(tmp_path("missing.png"), &img), QF_ERR_IO);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), "missing.png"));
    rm_tmp();

    ck_assert(qf_image_has_image_extension("a/b.JPEG"));
    ck_assert(qf_image_has_image_extension("x.Pgm"));
    ck_assert(!qf_image_has_image_extension("x.gif"));
    ck_assert(!qf_image_has_image_extension("png"));
    ck_assert(!qf_image_has_image_extension("x.png.txt"));
}
END_TEST

// tests/images/bad/: what decodes and what fails cleanly (see make_images.py).
START_TEST(bad_image_corpus)
{
    struct { const char *name; int w, h, c; uint8_t first[3]; } good[] = {
        {"one.png", 1, 1, 3, {10, 200, 30}},
        {"rgb16.png", 2, 1, 3, {255, 100, 0}},     // 65535, 25828 (100.5*257) rounded down: 100.498
        {"palette.png", 3, 1, 3, {0, 0, 255}},
        {"gray.jpg", 8, 8, 1, {120}},
        {"gray_alpha.png", 2, 2, 1, {77}},
        {"cmyk.jpg", 8, 8, 3, {255, 0, 0}},
    };
    for (size_t i = 0; i < QF_ARRAY_LEN(good); i++) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", BAD_DIR, good[i].name);
        qf_image img = read_ok(path);
        ck_assert_int_eq(img.w, good[i].w);
        ck_assert_int_eq(img.h, good[i].h);
        ck_assert_int_eq(img.c, good[i].c);
        for (int k = 0; k < img.c; k++)
            ck_assert_msg(abs(img.px[k] - good[i].first[k]) <= 2, "%s channel %d: %d", good[i].name, k, img.px[k]);
        qf_image_free(&img);
    }
    // The second pixel of rgb16.png: 1000, 30000, 50000 -> 4, 117, 195 (rounded, not truncated).
    qf_image img = read_ok(BAD_DIR "/rgb16.png");
    ck_assert_int_eq(img.px[3], 4);
    ck_assert_int_eq(img.px[4], 117);
    ck_assert_int_eq(img.px[5], 195);
    qf_image_free(&img);

    struct { const char *name; qf_status st; } fail[] = {
        {"empty.png", QF_ERR_FORMAT},  {"truncated.png", QF_ERR_FORMAT}, {"truncated.jpg", QF_ERR_FORMAT},
        {"corrupt.jpg", QF_ERR_FORMAT}, {"huge.png", QF_ERR_NOMEM},      {"huge.jpg", QF_ERR_NOMEM},
        {"notimage.jpg", QF_ERR_FORMAT}, {"maxval.pgm", QF_ERR_FORMAT},  {"bitdepth.png", QF_ERR_FORMAT},
    };
    for (size_t i = 0; i < QF_ARRAY_LEN(fail); i++) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", BAD_DIR, fail[i].name);
        qf_status st = qf_image_read(path, &img);
        ck_assert_msg(st == fail[i].st, "%s: status %d (%s)", fail[i].name, st, qf_error_message());
        ck_assert_msg(strstr(qf_error_message(), fail[i].name), "%s: message '%s'", fail[i].name,
                      qf_error_message());
        ck_assert_ptr_null(img.px);
    }
}
END_TEST

START_TEST(channel_conversion)
{
    uint8_t rgb[] = {255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 200, 30};
    qf_image img;
    ck_assert_int_eq(qfi_image_alloc(&img, 4, 1, 3, "t"), QF_OK);
    memcpy(img.px, rgb, sizeof(rgb));
    ck_assert_int_eq(qf_image_convert(&img, 1), QF_OK);
    // PIL convert("L"): red 76, green 150, blue 29; (10,200,30): 2.99+117.4+3.42 = 123.8 -> 124
    ck_assert_int_eq(img.c, 1);
    ck_assert_int_eq(img.px[0], 76);
    ck_assert_int_eq(img.px[1], 150);
    ck_assert_int_eq(img.px[2], 29);
    ck_assert_int_eq(img.px[3], 124);
    ck_assert_int_eq(qf_image_convert(&img, 3), QF_OK);
    ck_assert_int_eq(img.c, 3);
    ck_assert_int_eq(img.px[9], 124);
    ck_assert_int_eq(img.px[10], 124);
    ck_assert_int_eq(img.px[11], 124);
    ck_assert_int_eq(qf_image_convert(&img, 2), QF_ERR_USAGE);
    qf_image_free(&img);
}
END_TEST

// ---- resize -----------------------------------------------------------------------------

START_TEST(resize_known_values)
{
    // Constant stays constant, shrinking and growing, any size.
    uint8_t c[37 * 23];
    memset(c, 77, sizeof(c));
    float out[64 * 64];
    int sizes[][2] = {{11, 7}, {60, 50}, {1, 1}, {37, 23}, {5, 40}};
    for (size_t s = 0; s < QF_ARRAY_LEN(sizes); s++) {
        int dw = sizes[s][0], dh = sizes[s][1];
        ck_assert_int_eq(qfi_resize_window(c, 37, 23, 1, dw, dh, 0, 0, dw, dh, out), QF_OK);
        for (int i = 0; i < dw * dh; i++) ck_assert_float_eq_tol(out[i], 77.0f, 1e-4f);
    }

    // 2x downscale of rows [0 40 80 120], by hand: output 0 has center 1.0, the
    // filter widened to 2 pixels: weights 0.75, 0.75, 0.25 on inputs 0,1,2 over
    // 1.75 -> 50/1.75 = 28.5714; output 1: 0.25, 0.75, 0.75 on 1,2,3 -> 160/1.75.
    uint8_t row[3][4] = {{0, 40, 80, 120}, {0, 40, 80, 120}, {0, 40, 80, 120}};
    ck_assert_int_eq(qfi_resize_window(&row[0][0], 4, 3, 1, 2, 3, 0, 0, 2, 3, out), QF_OK);
    for (int y = 0; y < 3; y++) {
        ck_assert_float_eq_tol(out[y * 2 + 0], 50.0f / 1.75f, 1e-4f);
        ck_assert_float_eq_tol(out[y * 2 + 1], 160.0f / 1.75f, 1e-4f);
    }

    // 2x upscale [0 100] -> [0 25 75 100] (half-pixel centers, edges clamped).
    uint8_t two[2] = {0, 100};
    ck_assert_int_eq(qfi_resize_window(two, 2, 1, 1, 4, 1, 0, 0, 4, 1, out), QF_OK);
    float up[4] = {0, 25, 75, 100};
    for (int i = 0; i < 4; i++) ck_assert_float_eq_tol(out[i], up[i], 1e-4f);

    // 7x5 -> 3x2, both axes shrinking by non-integer factors; expected values
    // are PIL's BILINEAR on a float ("F") image, which does not round.
    uint8_t src[5 * 7];
    for (int i = 0; i < 35; i++) src[i] = (uint8_t)(i * 7 % 50);
    float pil[6] = {17.175325f, 20.0f, 35.0f, 20.857143f, 18.0f, 33.0f};
    ck_assert_int_eq(qfi_resize_window(src, 7, 5, 1, 3, 2, 0, 0, 3, 2, out), QF_OK);
    for (int i = 0; i < 6; i++) ck_assert_float_eq_tol(out[i], pil[i], 1e-4f);

    // A window gives the same pixels as the full resize, and zeros outside.
    float full[3 * 2], win[4 * 3];
    ck_assert_int_eq(qfi_resize_window(src, 7, 5, 1, 3, 2, 0, 0, 3, 2, full), QF_OK);
    ck_assert_int_eq(qfi_resize_window(src, 7, 5, 1, 3, 2, 1, -1, 4, 3, win), QF_OK);
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 4; x++) {
            int sy = y - 1, sx = x + 1;
            float want = (sy >= 0 && sy < 2 && sx < 3) ? full[sy * 3 + sx] : 0.0f;
            ck_assert_float_eq_tol(win[y * 4 + x], want, 1e-6f);
        }

    // Same size is the identity, three channels kept apart.
    uint8_t rgb[2 * 2 * 3] = {1, 2, 3, 40, 50, 60, 70, 80, 90, 200, 210, 220};
    ck_assert_int_eq(qfi_resize_window(rgb, 2, 2, 3, 2, 2, 0, 0, 2, 2, out), QF_OK);
    for (int i = 0; i < 12; i++) ck_assert_float_eq_tol(out[i], rgb[i], 1e-5f);
}
END_TEST

// ---- preprocessing ------------------------------------------------------------------------

START_TEST(normalize_layout_bgr_gray)
{
    // 2x1 RGB image: (255,128,0) (0,51,255).
    qf_image img;
    ck_assert_int_eq(qfi_image_alloc(&img, 2, 1, 3, "t"), QF_OK);
    uint8_t px[6] = {255, 128, 0, 0, 51, 255};
    memcpy(img.px, px, 6);
    qf_preprocess pp;
    qf_preprocess_init(&pp);
    pp.width = 2, pp.height = 1;
    float m[3] = {0.5f, 0.5f, 0.5f}, s[3] = {0.5f, 0.25f, 0.125f};
    memcpy(pp.mean, m, sizeof(m));
    memcpy(pp.std, s, sizeof(s));
    float out[6];
    // NCHW: channel planes. (255/255-.5)/.5 = 1; (128/255-.5)/.25 = 0.007843; (0-.5)/.125 = -4
    ck_assert_int_eq(qf_preprocess_image(&pp, &img, "t", out), QF_OK);
    float nchw[6] = {1.0f, -1.0f, (128 / 255.0f - 0.5f) / 0.25f, (51 / 255.0f - 0.5f) / 0.25f, -4.0f, 4.0f};
    for (int i = 0; i < 6; i++) ck_assert_float_eq_tol(out[i], nchw[i], 1e-5f);
    // NHWC: pixels interleaved.
    pp.layout = QF_LAYOUT_NHWC;
    ck_assert_int_eq(qf_preprocess_image(&pp, &img, "t", out), QF_OK);
    float nhwc[6] = {nchw[0], nchw[2], nchw[4], nchw[1], nchw[3], nchw[5]};
    for (int i = 0; i < 6; i++) ck_assert_float_eq_tol(out[i], nhwc[i], 1e-5f);
    // BGR: blue first; mean/std apply to output channels in output order.
    pp.layout = QF_LAYOUT_NCHW;
    pp.bgr = true;
    ck_assert_int_eq(qf_preprocess_image(&pp, &img, "t", out), QF_OK);
    float bgr[6] = {-1.0f, 1.0f, (128 / 255.0f - 0.5f) / 0.25f, (51 / 255.0f - 0.5f) / 0.25f, 4.0f, -4.0f};
    for (int i = 0; i < 6; i++) ck_assert_float_eq_tol(out[i], bgr[i], 1e-5f);
    // --gray with a 3-channel model: luma replicated. (255,128,0) -> 151, (0,51,255) -> 59.
    pp.bgr = false;
    pp.gray = true;
    ck_assert_int_eq(qf_preprocess_image(&pp, &img, "t", out), QF_OK);
    float l0 = 151 / 255.0f, l1 = 59 / 255.0f;
    float gray[6] = {(l0 - .5f) / .5f, (l1 - .5f) / .5f, (l0 - .5f) / .25f, (l1 - .5f) / .25f,
                     (l0 - .5f) / .125f, (l1 - .5f) / .125f};
    for (int i = 0; i < 6; i++) ck_assert_float_eq_tol(out[i], gray[i], 1e-5f);
    // A 1-channel model gets luma without --gray, with mean[0]/std[0].
    pp.gray = false;
    pp.channels = 1;
    ck_assert_int_eq(qf_preprocess_image(&pp, &img, "t", out), QF_OK);
    ck_assert_float_eq_tol(out[0], gray[0], 1e-5f);
    ck_assert_float_eq_tol(out[1], gray[1], 1e-5f);
    qf_image_free(&img);

    // A gray image into a 3-channel model: replicated, each with its own mean/std.
    ck_assert_int_eq(qfi_image_alloc(&img, 1, 1, 1, "t"), QF_OK);
    img.px[0] = 102;
    pp.channels = 3;
    pp.width = pp.height = 1;
    ck_assert_int_eq(qf_preprocess_image(&pp, &img, "t", out), QF_OK);
    for (int ch = 0; ch < 3; ch++) ck_assert_float_eq_tol(out[ch], (0.4f - 0.5f) / s[ch], 1e-5f);
    qf_image_free(&img);
}
END_TEST

// Runs center crop `crop` over a 1-row gray image of width w whose pixel x is 10+x.
static void crop_row(int w, int crop, float *out)
{
    qf_image img;
    ck_assert_int_eq(qfi_image_alloc(&img, w, 1, 1, "t"), QF_OK);
    for (int x = 0; x < w; x++) img.px[x] = (uint8_t)(10 + x);
    qf_preprocess pp;
    pp_raw(&pp);
    pp.channels = 1;
    pp.crop_w = crop;
    pp.crop_h = 1;
    ck_assert_int_eq(qf_preprocess_image(&pp, &img, "t", out), QF_OK);
    qf_image_free(&img);
}

START_TEST(center_crop_convention)
{
    // torchvision: left = int(round((W - N) / 2)), Python rounding half to even.
    struct { int w, crop, left; } cases[] = {
        {8, 4, 2},   // 2.0
        {5, 4, 0},   // 0.5 -> 0
        {7, 4, 2},   // 1.5 -> 2
        {9, 4, 2},   // 2.5 -> 2
        {11, 4, 4},  // 3.5 -> 4
        {341, 224, 58},  // a 500x375 ImageNet image after resize 256: 58.5 -> 58
    };
    float out[224];
    for (size_t i = 0; i < QF_ARRAY_LEN(cases); i++) {
        crop_row(cases[i].w, cases[i].crop, out);
        ck_assert_msg(fabsf(out[0] - (float)(uint8_t)(10 + cases[i].left)) < 1e-3f, "W=%d crop=%d: first %g",
                      cases[i].w, cases[i].crop, out[0]);
    }
    // Crop wider than the image: zero padding, (N - W) // 2 in front: 2 -> 4 gives 0 a b 0.
    crop_row(2, 4, out);
    float padded[4] = {0, 10, 11, 0};
    for (int i = 0; i < 4; i++) ck_assert_float_eq_tol(out[i], padded[i], 1e-4f);
    crop_row(2, 5, out);  // (5-2)//2 = 1 in front, 2 behind
    float padded5[5] = {0, 10, 11, 0, 0};
    for (int i = 0; i < 5; i++) ck_assert_float_eq_tol(out[i], padded5[i], 1e-4f);
}
END_TEST

START_TEST(resize_shorter_side_and_size)
{
    // --resize N: shorter side N, longer int(N * long / short): 30x20 -> 22x15 (22.5).
    qf_image img;
    ck_assert_int_eq(qfi_image_alloc(&img, 30, 20, 1, "t"), QF_OK);
    memset(img.px, 90, 600);
    qf_preprocess pp;
    pp_raw(&pp);
    pp.channels = 1;
    pp.resize = 15;
    pp.width = 22, pp.height = 15;
    float out[40 * 40];
    ck_assert_int_eq(qf_preprocess_image(&pp, &img, "t", out), QF_OK);
    for (int i = 0; i < 22 * 15; i++) ck_assert_float_eq_tol(out[i], 90.0f, 1e-3f);
    pp.width = 23;  // the model takes another size: an error naming the image
    ck_assert_int_eq(qf_preprocess_image(&pp, &img, "pic.png", out), QF_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), "pic.png"));
    ck_assert_ptr_nonnull(strstr(qf_error_message(), "22x15"));
    // Portrait: 20x30 -> 15x22.
    qf_image_free(&img);
    ck_assert_int_eq(qfi_image_alloc(&img, 20, 30, 1, "t"), QF_OK);
    memset(img.px, 90, 600);
    pp.width = 15, pp.height = 22;
    ck_assert_int_eq(qf_preprocess_image(&pp, &img, "t", out), QF_OK);
    qf_image_free(&img);

    // --size WxH: plain resize, aspect not kept. 4x3 rows [0 40 80 120] -> 2x3.
    ck_assert_int_eq(qfi_image_alloc(&img, 4, 3, 1, "t"), QF_OK);
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 4; x++) img.px[y * 4 + x] = (uint8_t)(40 * x);
    pp_raw(&pp);
    pp.channels = 1;
    pp.size_w = 2, pp.size_h = 3;
    ck_assert_int_eq(qf_preprocess_image(&pp, &img, "t", out), QF_OK);
    for (int y = 0; y < 3; y++) {
        ck_assert_float_eq_tol(out[y * 2], 50.0f / 1.75f, 1e-3f);
        ck_assert_float_eq_tol(out[y * 2 + 1], 160.0f / 1.75f, 1e-3f);
    }
    // Resize then crop: 4x3 --size 2x3 --crop 2x1 keeps row 1.
    pp.crop_w = 2, pp.crop_h = 1;
    ck_assert_int_eq(qf_preprocess_image(&pp, &img, "t", out), QF_OK);
    ck_assert_float_eq_tol(out[0], 50.0f / 1.75f, 1e-3f);
    qf_image_free(&img);
}
END_TEST

START_TEST(options_and_presets)
{
    qf_preprocess pp;
    qf_preprocess_init(&pp);
    int used;
    ck_assert_int_eq(qf_preprocess_option(&pp, "--preset", "imagenet", &used), QF_OK);
    ck_assert_int_eq(used, 2);
    ck_assert_int_eq(pp.resize, 256);
    ck_assert_int_eq(pp.crop_w, 224);
    ck_assert_int_eq(pp.crop_h, 224);
    ck_assert_float_eq(pp.mean[1], 0.456f);
    ck_assert_float_eq(pp.std[2], 0.225f);
    int c, h, w;
    ck_assert_int_eq(qf_preprocess_shape(&pp, &c, &h, &w), QF_OK);
    ck_assert(c == 3 && h == 224 && w == 224);

    // Later options override the preset; --opt=value takes one argv entry.
    ck_assert_int_eq(qf_preprocess_option(&pp, "--resize=300", "ignored", &used), QF_OK);
    ck_assert_int_eq(used, 1);
    ck_assert_int_eq(pp.resize, 300);
    ck_assert_int_eq(qf_preprocess_option(&pp, "--crop", "100x50", &used), QF_OK);
    ck_assert(pp.crop_w == 100 && pp.crop_h == 50);
    ck_assert_int_eq(qf_preprocess_option(&pp, "--bgr", "x", &used), QF_OK);
    ck_assert(used == 1 && pp.bgr);
    ck_assert_int_eq(qf_preprocess_option(&pp, "--gray", NULL, &used), QF_OK);
    ck_assert(used == 1 && pp.gray);
    ck_assert_int_eq(qf_preprocess_option(&pp, "--mean", "0.25", &used), QF_OK);
    ck_assert(pp.mean[0] == 0.25f && pp.mean[2] == 0.25f);
    ck_assert_int_eq(qf_preprocess_option(&pp, "--std", "1,2,3", &used), QF_OK);
    ck_assert(pp.std[0] == 1 && pp.std[1] == 2 && pp.std[2] == 3);
    // Not ours: untouched, used 0.
    ck_assert_int_eq(qf_preprocess_option(&pp, "--batch", "8", &used), QF_OK);
    ck_assert_int_eq(used, 0);
    ck_assert_int_eq(qf_preprocess_option(&pp, "model.onnx", NULL, &used), QF_OK);
    ck_assert_int_eq(used, 0);

    // Round trip through the text stored in .calib/.qfm files.
    char text[256];
    qf_preprocess_format(&pp, text, sizeof(text));
    ck_assert_str_eq(text, "--resize 300 --crop 100x50 --mean 0.25,0.25,0.25 --std 1,2,3 --bgr --gray");
    qf_preprocess back;
    qf_preprocess_init(&back);
    ck_assert_int_eq(qf_preprocess_parse(&back, text), QF_OK);
    ck_assert_mem_eq(&back, &pp, sizeof(pp));
    qf_preprocess_init(&pp);
    qf_preprocess_preset(&pp, "cifar10");
    qf_preprocess_format(&pp, text, sizeof(text));
    ck_assert_str_eq(text, "--mean 0.4914,0.4822,0.4465 --std 0.2023,0.1994,0.201");
    ck_assert_float_eq(pp.mean[0], 0.4914f);
    ck_assert_int_eq(pp.resize, 0);

    // Bad values: usage errors naming the option.
    const char *bad[][2] = {{"--resize", "0"},    {"--resize", "12px"}, {"--size", "3x"},
                            {"--size", "x4"},     {"--crop", "-1"},     {"--mean", "1,2"},
                            {"--mean", "1,2,3,4"}, {"--std", "1,0,1"},   {"--std", "nan"},
                            {"--preset", "coco"}, {"--resize", NULL}};
    for (size_t i = 0; i < QF_ARRAY_LEN(bad); i++) {
        ck_assert_msg(qf_preprocess_option(&pp, bad[i][0], bad[i][1], &used) == QF_ERR_USAGE, "%s %s",
                      bad[i][0], bad[i][1]);
        ck_assert_ptr_nonnull(strstr(qf_error_message(), bad[i][0]));
    }
    ck_assert_int_eq(qf_preprocess_parse(&pp, "--resize 10 --frobnicate"), QF_ERR_USAGE);
    // A bad value leaves the settings as they were.
    qf_preprocess before = pp;
    ck_assert_int_eq(qf_preprocess_option(&pp, "--crop", "7x", &used), QF_ERR_USAGE);
    ck_assert_int_eq(qf_preprocess_option(&pp, "--preset", "coco", &used), QF_ERR_USAGE);
    ck_assert_mem_eq(&before, &pp, sizeof(pp));

    // Shapes: nothing fixes the size; resize and size together; crop vs model.
    qf_preprocess_init(&pp);
    ck_assert_int_eq(qf_preprocess_shape(&pp, &c, &h, &w), QF_ERR_USAGE);
    pp.width = 32, pp.height = 32;
    ck_assert_int_eq(qf_preprocess_shape(&pp, &c, &h, &w), QF_OK);
    ck_assert(h == 32 && w == 32);
    pp.crop_w = pp.crop_h = 28;
    ck_assert_int_eq(qf_preprocess_shape(&pp, &c, &h, &w), QF_ERR_INVALID);
    qf_preprocess_init(&pp);
    pp.resize = 10;
    pp.size_w = pp.size_h = 10;
    ck_assert_int_eq(qf_preprocess_shape(&pp, &c, &h, &w), QF_ERR_USAGE);
}
END_TEST

// ---- datasets and labels --------------------------------------------------------------

// root/cat/a.png, root/cat/sub/b.png, root/dog/C.JPG, root/zebra/ (empty),
// root/notes.txt, root/.hidden.png, root/dog/._x.png
static void make_class_tree(void)
{
    make_tmp();
    write_rgb_png(tmp_path("cat/a.png"), 4, 3, 1);
    write_rgb_png(tmp_path("cat/sub/b.png"), 4, 3, 2);
    uint8_t g[64];
    memset(g, 9, 64);
    write_jpeg(tmp_path("dog/C.JPG"), 8, 8, 1, g, 90);
    mkdir(tmp_path("zebra"), 0755);
    write_bytes(tmp_path("notes.txt"), "x", 1);
    write_bytes(tmp_path(".hidden.png"), "x", 1);
    write_bytes(tmp_path("dog/._x.png"), "x", 1);
}

START_TEST(scan_order_and_folder_labels)
{
    make_class_tree();
    qf_dataset *ds;
    ck_assert_int_eq(qf_dataset_open(tmp_root, &ds), QF_OK);
    ck_assert_int_eq(qf_dataset_count(ds), 3);
    ck_assert_str_eq(qf_dataset_path(ds, 0), "cat/a.png");
    ck_assert_str_eq(qf_dataset_path(ds, 1), "cat/sub/b.png");
    ck_assert_str_eq(qf_dataset_path(ds, 2), "dog/C.JPG");
    ck_assert_str_eq(qf_dataset_full_path(ds, 2), tmp_path("dog/C.JPG"));
    ck_assert(!qf_dataset_has_labels(ds));
    ck_assert_int_eq(qf_dataset_label(ds, 0), -1);

    // Sorted sub-folders cat, dog, zebra: cat=0, dog=1.
    ck_assert_int_eq(qf_dataset_label_folders(ds, NULL), QF_OK);
    ck_assert_int_eq(qf_dataset_label(ds, 0), 0);
    ck_assert_int_eq(qf_dataset_label(ds, 1), 0);
    ck_assert_int_eq(qf_dataset_label(ds, 2), 1);
    const qf_classes *cl = qf_dataset_classes(ds);
    ck_assert_int_eq(qf_classes_count(cl), 3);
    ck_assert_str_eq(qf_classes_name(cl, 2), "zebra");

    // --classes FILE: the line decides.
    write_bytes(tmp_path("classes.txt"), "dog\r\ncat\n\n", 10);
    ck_assert_int_eq(qf_dataset_label_folders(ds, tmp_path("classes.txt")), QF_OK);
    ck_assert_int_eq(qf_dataset_label(ds, 0), 1);
    ck_assert_int_eq(qf_dataset_label(ds, 2), 0);
    ck_assert_str_eq(qf_classes_name(qf_dataset_classes(ds), 0), "dog");
    // A folder missing from the list: error naming the file.
    write_bytes(tmp_path("classes2.txt"), "cat\nbird\n", 9);
    ck_assert_int_eq(qf_dataset_label_folders(ds, tmp_path("classes2.txt")), QF_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), "C.JPG"));
    write_bytes(tmp_path("classes3.txt"), "cat\n\ndog\n", 9);  // a hole would shift indices
    ck_assert_int_eq(qf_dataset_label_folders(ds, tmp_path("classes3.txt")), QF_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), "classes3.txt:2"));
    qf_dataset_free(ds);

    // A file at the top level has no class folder.
    write_rgb_png(tmp_path("top.png"), 2, 2, 3);
    ck_assert_int_eq(qf_dataset_open(tmp_root, &ds), QF_OK);
    ck_assert_int_eq(qf_dataset_count(ds), 4);
    ck_assert_str_eq(qf_dataset_path(ds, 3), "top.png");
    ck_assert_int_eq(qf_dataset_label_folders(ds, NULL), QF_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), "top.png"));
    ck_assert(!qf_dataset_has_labels(ds));
    qf_dataset_free(ds);

    // A trailing slash changes nothing.
    char slash[128];
    snprintf(slash, sizeof(slash), "%s/", tmp_root);
    ck_assert_int_eq(qf_dataset_open(slash, &ds), QF_OK);
    ck_assert_str_eq(qf_dataset_path(ds, 0), "cat/a.png");
    qf_dataset_free(ds);
    rm_tmp();
}
END_TEST

START_TEST(empty_folders)
{
    make_tmp();
    qf_dataset *ds = (qf_dataset *)1;
    ck_assert_int_eq(qf_dataset_open(tmp_root, &ds), QF_ERR_INVALID);
    ck_assert_ptr_null(ds);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), tmp_root));
    write_bytes(tmp_path("sub/readme.txt"), "x", 1);
    ck_assert_int_eq(qf_dataset_open(tmp_root, &ds), QF_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), tmp_root));
    ck_assert_int_eq(qf_dataset_open(tmp_path("nowhere"), &ds), QF_ERR_IO);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), "nowhere"));
    ck_assert_int_eq(qf_dataset_open(tmp_path("sub/readme.txt"), &ds), QF_ERR_USAGE);
    rm_tmp();
}
END_TEST

START_TEST(synset_labels)
{
    make_tmp();
    write_rgb_png(tmp_path("val/n002_tabby_cat.png"), 2, 2, 1);
    write_rgb_png(tmp_path("val/n001_dog.png"), 2, 2, 1);
    write_rgb_png(tmp_path("calib/n003_x.png"), 2, 2, 1);
    write_bytes(tmp_path("synsets.txt"), "n003 third one\nn002 tabby, tabby cat\nn001 dog\n", 46);
    qf_dataset *ds;
    ck_assert_int_eq(qf_dataset_open(tmp_root, &ds), QF_OK);
    ck_assert_int_eq(qf_dataset_label_synsets(ds, tmp_path("synsets.txt")), QF_OK);
    // Order: calib/n003_x, val/n001_dog, val/n002_tabby_cat.
    ck_assert_int_eq(qf_dataset_label(ds, 0), 0);
    ck_assert_int_eq(qf_dataset_label(ds, 1), 2);
    ck_assert_int_eq(qf_dataset_label(ds, 2), 1);
    const qf_classes *cl = qf_dataset_classes(ds);
    ck_assert_str_eq(qf_classes_name(cl, 1), "tabby, tabby cat");
    ck_assert_str_eq(qf_classes_key(cl, 1), "n002");
    ck_assert_int_eq(qf_classes_find(cl, "n001"), 2);
    ck_assert_int_eq(qf_classes_find(cl, "n004"), -1);
    qf_dataset_free(ds);

    // An unknown wnid, and a name without '_': errors naming the file.
    write_rgb_png(tmp_path("val/n009_other.png"), 2, 2, 1);
    ck_assert_int_eq(qf_dataset_open(tmp_root, &ds), QF_OK);
    ck_assert_int_eq(qf_dataset_label_synsets(ds, tmp_path("synsets.txt")), QF_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), "n009_other.png"));
    qf_dataset_free(ds);
    remove(tmp_path("val/n009_other.png"));
    write_rgb_png(tmp_path("val/plain.png"), 2, 2, 1);
    ck_assert_int_eq(qf_dataset_open(tmp_root, &ds), QF_OK);
    ck_assert_int_eq(qf_dataset_label_synsets(ds, tmp_path("synsets.txt")), QF_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), "plain.png"));
    qf_dataset_free(ds);

    // Duplicate wnids are refused.
    write_bytes(tmp_path("dup.txt"), "n1 a\nn2 b\nn1 c\n", 15);
    qf_classes *c;
    ck_assert_int_eq(qf_classes_read_synsets(tmp_path("dup.txt"), &c), QF_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), "dup.txt"));
    ck_assert_int_eq(qf_classes_read_lines(tmp_path("missing.txt"), &c), QF_ERR_IO);
    rm_tmp();
}
END_TEST

START_TEST(list_labels)
{
    make_class_tree();
    const char list[] = "cat/a.png 3\n./dog/C.JPG\t5\r\ncat/sub/b.png 7\nelsewhere/x.png 1\n\n";
    write_bytes(tmp_path("labels.txt"), list, sizeof(list) - 1);
    qf_dataset *ds;
    ck_assert_int_eq(qf_dataset_open(tmp_root, &ds), QF_OK);
    ck_assert_int_eq(qf_dataset_label_list(ds, tmp_path("labels.txt")), QF_OK);
    ck_assert_int_eq(qf_dataset_label(ds, 0), 3);
    ck_assert_int_eq(qf_dataset_label(ds, 1), 7);
    ck_assert_int_eq(qf_dataset_label(ds, 2), 5);
    ck_assert_ptr_null(qf_dataset_classes(ds));

    // A file missing from the list: error naming it; the old labels stay.
    write_bytes(tmp_path("short.txt"), "cat/a.png 3\ndog/C.JPG 5\n", 24);
    ck_assert_int_eq(qf_dataset_label_list(ds, tmp_path("short.txt")), QF_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), "cat/sub/b.png"));
    ck_assert_int_eq(qf_dataset_label(ds, 1), 7);
    // Malformed lines: error with file and line number.
    write_bytes(tmp_path("bad.txt"), "cat/a.png 3\ncat/sub/b.png seven\n", 32);
    ck_assert_int_eq(qf_dataset_label_list(ds, tmp_path("bad.txt")), QF_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), "bad.txt:2"));
    write_bytes(tmp_path("neg.txt"), "cat/a.png -1\n", 13);
    ck_assert_int_eq(qf_dataset_label_list(ds, tmp_path("neg.txt")), QF_ERR_FORMAT);
    qf_dataset_free(ds);
    rm_tmp();
}
END_TEST

START_TEST(subset_evenly_spaced)
{
    make_tmp();
    char name[32];
    for (int i = 0; i < 10; i++) {
        snprintf(name, sizeof(name), "img%02d.png", i);
        write_rgb_png(tmp_path(name), 2, 2, i);
    }
    // Labels (10 * file number) must follow their files through the subset.
    char list[256];
    int len = 0;
    for (int i = 0; i < 10; i++) len += snprintf(list + len, sizeof(list) - len, "img%02d.png %d\n", i, 10 * i);
    write_bytes(tmp_path("labels.txt"), list, (size_t)len);
    qf_dataset *ds;
    int64_t counts[] = {3, 4, 1, 9};
    int want[][9] = {{0, 3, 6}, {0, 2, 5, 7}, {0}, {0, 1, 2, 3, 4, 5, 6, 7, 8}};
    for (size_t t = 0; t < QF_ARRAY_LEN(counts); t++) {
        ck_assert_int_eq(qf_dataset_open(tmp_root, &ds), QF_OK);
        ck_assert_int_eq(qf_dataset_label_list(ds, tmp_path("labels.txt")), QF_OK);
        qf_dataset_subset(ds, counts[t]);
        ck_assert_int_eq(qf_dataset_count(ds), counts[t]);
        for (int k = 0; k < counts[t]; k++) {
            snprintf(name, sizeof(name), "img%02d.png", want[t][k]);
            ck_assert_str_eq(qf_dataset_path(ds, k), name);
            ck_assert_int_eq(qf_dataset_label(ds, k), 10 * want[t][k]);
        }
        qf_dataset_free(ds);
    }
    // Subset before labels works too: only the kept files need a label.
    ck_assert_int_eq(qf_dataset_open(tmp_root, &ds), QF_OK);
    qf_dataset_subset(ds, 2);
    write_bytes(tmp_path("two.txt"), "img00.png 1\nimg05.png 2\n", 24);
    ck_assert_int_eq(qf_dataset_label_list(ds, tmp_path("two.txt")), QF_OK);
    ck_assert_int_eq(qf_dataset_label(ds, 1), 2);
    qf_dataset_free(ds);
    // COUNT <= 0 or >= total keeps everything.
    ck_assert_int_eq(qf_dataset_open(tmp_root, &ds), QF_OK);
    qf_dataset_subset(ds, 0);
    ck_assert_int_eq(qf_dataset_count(ds), 10);
    qf_dataset_subset(ds, 25);
    ck_assert_int_eq(qf_dataset_count(ds), 10);
    qf_dataset_free(ds);
    rm_tmp();
}
END_TEST

// ---- the decode pool --------------------------------------------------------------------

static int warnings;
static char last_warning[512];
static void count_warn(void *user, qf_log_level lvl, const char *msg)
{
    if (lvl == QF_LOG_WARN) {
        warnings++;
        snprintf(last_warning, sizeof(last_warning), "%s", msg);
    }
}

// Reads the whole dataset through a loader; returns the images read.
static int64_t load_all(const qf_dataset *ds, const qf_preprocess *pp, int batch, int threads, float *all,
                        int *labels, int64_t *indices, int64_t *skipped)
{
    qf_loader_options opt = {.batch = batch, .threads = threads};
    qf_loader *l;
    ck_assert_int_eq(qf_loader_create(ds, pp, &opt, &l), QF_OK);
    int c, h, w;
    qf_loader_shape(l, &c, &h, &w);
    size_t img = (size_t)c * h * w;
    int64_t total = 0;
    for (;;) {
        int count;
        ck_assert_int_eq(qf_loader_next(l, all + total * img, labels + total, &count), QF_OK);
        ck_assert_int_le(count, batch);
        for (int k = 0; k < count; k++) indices[total + k] = qf_loader_indices(l)[k];
        if (count == 0) break;
        total += count;
    }
    *skipped = qf_loader_skipped(l);
    qf_loader_free(l);
    return total;
}

START_TEST(loader_order_across_threads)
{
    make_tmp();
    // 30 images of assorted sizes and formats in 3 class folders, plus one
    // corrupt file: every thread count must give the same bytes in order.
    char name[64];
    for (int i = 0; i < 30; i++) {
        int w = 3 + (i * 7) % 40, h = 2 + (i * 11) % 30;
        snprintf(name, sizeof(name), "c%d/img%02d.%s", i % 3, i, i % 4 == 3 ? "jpg" : "png");
        if (i % 4 == 3) {
            uint8_t px[64 * 64 * 3];
            for (int k = 0; k < w * h * 3; k++) px[k] = (uint8_t)(k * 31 + i);
            write_jpeg(tmp_path(name), w, h, 3, px, 85);
        } else {
            write_rgb_png(tmp_path(name), w, h, i);
        }
    }
    write_bytes(tmp_path("c1/broken.png"), "\x89PNG\r\n\x1a\nxx", 10);
    qf_dataset *ds;
    ck_assert_int_eq(qf_dataset_open(tmp_root, &ds), QF_OK);
    ck_assert_int_eq(qf_dataset_count(ds), 31);
    ck_assert_int_eq(qf_dataset_label_folders(ds, NULL), QF_OK);

    qf_preprocess pp;
    qf_preprocess_init(&pp);
    ck_assert_int_eq(qf_preprocess_parse(&pp, "--resize 20 --crop 16 --mean 0.5 --std 0.25"), QF_OK);
    size_t img = 3 * 16 * 16;
    float *ref = malloc(sizeof(float) * img * 31), *got = malloc(sizeof(float) * img * 31);
    int ref_lab[31], got_lab[31];
    int64_t ref_idx[31], got_idx[31], skipped;
    qf_log_set(count_warn, NULL, QF_LOG_WARN);
    warnings = 0;
    int64_t n = load_all(ds, &pp, 4, 0, ref, ref_lab, ref_idx, &skipped);
    ck_assert_int_eq(n, 30);
    ck_assert_int_eq(skipped, 1);
    ck_assert_int_eq(warnings, 1);
    ck_assert_ptr_nonnull(strstr(last_warning, "broken.png"));
    // broken.png sorts first in c1: dataset indices skip it.
    ck_assert_str_eq(qf_dataset_path(ds, 10), "c1/broken.png");
    ck_assert_int_eq(ref_idx[9], 9);
    ck_assert_int_eq(ref_idx[10], 11);
    for (int k = 0; k < 30; k++) ck_assert_int_eq(ref_lab[k], qf_dataset_label(ds, ref_idx[k]));
    // The synchronous result equals qf_preprocess_image on the decoded file.
    float one[3 * 16 * 16];
    qf_image im = read_ok(qf_dataset_full_path(ds, ref_idx[17]));
    ck_assert_int_eq(qf_preprocess_image(&pp, &im, "x", one), QF_OK);
    qf_image_free(&im);
    ck_assert_mem_eq(one, ref + 17 * img, sizeof(one));

    int threads[] = {1, 2, 4}, batches[] = {1, 4, 7, 64};
    for (size_t t = 0; t < QF_ARRAY_LEN(threads); t++)
        for (size_t b = 0; b < QF_ARRAY_LEN(batches); b++) {
            memset(got, 0, sizeof(float) * img * 31);
            n = load_all(ds, &pp, batches[b], threads[t], got, got_lab, got_idx, &skipped);
            ck_assert_int_eq(n, 30);
            ck_assert_int_eq(skipped, 1);
            ck_assert_mem_eq(got, ref, sizeof(float) * img * 30);
            ck_assert_mem_eq(got_lab, ref_lab, sizeof(int) * 30);
            ck_assert_mem_eq(got_idx, ref_idx, sizeof(int64_t) * 30);
        }

    // strict: the broken file is an error naming it.
    qf_loader_options opt = {.batch = 8, .threads = 2, .strict = true};
    qf_loader *l;
    ck_assert_int_eq(qf_loader_create(ds, &pp, &opt, &l), QF_OK);
    int count;
    ck_assert_int_eq(qf_loader_next(l, got, got_lab, &count), QF_OK);
    ck_assert_int_eq(count, 8);
    ck_assert_int_eq(qf_loader_next(l, got, got_lab, &count), QF_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), "broken.png"));
    ck_assert_int_eq(qf_loader_next(l, got, got_lab, &count), QF_ERR_FORMAT);  // stays failed
    qf_loader_free(l);

    // Freed early, with workers still busy: no hang, no leak under sanitizers.
    opt = (qf_loader_options){.batch = 2, .threads = 4};
    ck_assert_int_eq(qf_loader_create(ds, &pp, &opt, &l), QF_OK);
    ck_assert_int_eq(qf_loader_next(l, got, NULL, &count), QF_OK);
    qf_loader_free(l);
    free(ref);
    free(got);
    qf_dataset_free(ds);
    qf_log_set(NULL, NULL, QF_LOG_WARN);
    rm_tmp();
}
END_TEST

START_TEST(loader_bad_corpus)
{
    qf_dataset *ds;
    ck_assert_int_eq(qf_dataset_open(BAD_DIR, &ds), QF_OK);
    ck_assert_int_eq(qf_dataset_count(ds), 15);  // make_images.py writes 15 images, not itself
    qf_preprocess pp;
    qf_preprocess_init(&pp);
    pp.size_w = pp.size_h = 4;
    float out[16 * 3 * 4 * 4];
    int labels[16];
    int64_t idx[16], skipped;
    qf_log_set(count_warn, NULL, QF_LOG_WARN);
    warnings = 0;
    for (int threads = 0; threads <= 2; threads += 2) {
        int64_t n = load_all(ds, &pp, 16, threads, out, labels, idx, &skipped);
        ck_assert_int_eq(n, 6);
        ck_assert_int_eq(skipped, 9);
    }
    ck_assert_int_eq(warnings, 18);
    // strict: the first bad file in sorted order (bitdepth.png) is the error.
    qf_loader_options opt = {.batch = 16, .threads = 2, .strict = true};
    qf_loader *l;
    ck_assert_int_eq(qf_loader_create(ds, &pp, &opt, &l), QF_OK);
    int count;
    ck_assert_int_ne(qf_loader_next(l, out, labels, &count), QF_OK);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), "bitdepth.png"));
    qf_loader_free(l);
    qf_dataset_free(ds);

    // Only bad files: the loader fails naming the folder.
    const char *files[] = {BAD_DIR "/empty.png", BAD_DIR "/huge.png"};
    ck_assert_int_eq(qf_dataset_from_files(files, 2, &ds), QF_OK);
    opt = (qf_loader_options){.batch = 4, .threads = 1};
    ck_assert_int_eq(qf_loader_create(ds, &pp, &opt, &l), QF_OK);
    ck_assert_int_eq(qf_loader_next(l, out, labels, &count), QF_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), "could be read"));
    qf_loader_free(l);
    qf_dataset_free(ds);
    qf_log_set(NULL, NULL, QF_LOG_WARN);
}
END_TEST

START_TEST(loader_setup_errors)
{
    make_tmp();
    write_rgb_png(tmp_path("a.png"), 5, 4, 1);
    write_rgb_png(tmp_path("b.png"), 4, 4, 1);
    qf_dataset *ds;
    ck_assert_int_eq(qf_dataset_open(tmp_root, &ds), QF_OK);
    qf_preprocess pp;
    qf_preprocess_init(&pp);
    qf_loader *l;
    qf_loader_options opt = {.batch = 2, .threads = 1};
    ck_assert_int_eq(qf_loader_create(ds, &pp, &opt, &l), QF_ERR_USAGE);  // no size fixed
    // The model takes 4x4 and nothing resizes: a.png (5x4) is a setup error
    // that stops the run, not a skipped file.
    pp.width = pp.height = 4;
    ck_assert_int_eq(qf_loader_create(ds, &pp, &opt, &l), QF_OK);
    int count;
    float out[2 * 3 * 16];
    ck_assert_int_eq(qf_loader_next(l, out, NULL, &count), QF_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(qf_error_message(), "a.png"));
    qf_loader_free(l);
    opt.batch = 0;
    ck_assert_int_eq(qf_loader_create(ds, &pp, &opt, &l), QF_ERR_USAGE);
    qf_dataset_free(ds);
    rm_tmp();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("datasets");
    TCase *tc = tcase_create("datasets");
    tcase_add_test(tc, png_color_types);
    tcase_add_test(tc, jpeg_rgb_and_gray);
    tcase_add_test(tc, pnm_variants);
    tcase_add_test(tc, sniffing_by_content);
    tcase_add_test(tc, bad_image_corpus);
    tcase_add_test(tc, channel_conversion);
    tcase_add_test(tc, resize_known_values);
    tcase_add_test(tc, normalize_layout_bgr_gray);
    tcase_add_test(tc, center_crop_convention);
    tcase_add_test(tc, resize_shorter_side_and_size);
    tcase_add_test(tc, options_and_presets);
    tcase_add_test(tc, scan_order_and_folder_labels);
    tcase_add_test(tc, empty_folders);
    tcase_add_test(tc, synset_labels);
    tcase_add_test(tc, list_labels);
    tcase_add_test(tc, subset_evenly_spaced);
    tcase_add_test(tc, loader_order_across_threads);
    tcase_add_test(tc, loader_bad_corpus);
    tcase_add_test(tc, loader_setup_errors);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
