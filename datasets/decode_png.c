/* PNG decoding with libpng from a memory buffer: every color type and bit
 * depth becomes 8-bit gray or RGB (palette expanded, alpha dropped, 16-bit
 * rounded), and libpng errors come back as a qf_status instead of abort(). */
#include <png.h>
#include <setjmp.h>
#include "datasets_impl.h"

typedef struct png_ctx {
    const uint8_t *buf;
    size_t size, pos;
    const char *name;
    char msg[200];          // libpng's error text, for our message
    qf_status status;       // set when we (not libpng) decide to fail
    qf_image img;
    png_bytep *rows;
} png_ctx;

static void on_error(png_structp png, png_const_charp msg)
{
    png_ctx *ctx = png_get_error_ptr(png);
    snprintf(ctx->msg, sizeof(ctx->msg), "%s", msg);
    png_longjmp(png, 1);
}

// The library never prints: libpng's warnings (bad ancillary chunks) are dropped.
static void on_warning(png_structp png, png_const_charp msg) {}

static void read_mem(png_structp png, png_bytep out, png_size_t n)
{
    png_ctx *ctx = png_get_io_ptr(png);
    if (n > ctx->size - ctx->pos) png_error(png, "file is truncated");
    memcpy(out, ctx->buf + ctx->pos, n);
    ctx->pos += n;
}

// All state lives in *ctx (not in this frame), so nothing is lost by longjmp.
static int decode(png_structp png, png_infop info, png_ctx *ctx)
{
    if (setjmp(png_jmpbuf(png))) return -1;
    png_set_read_fn(png, ctx, read_mem);
    png_read_info(png, info);

    png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    int color = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
    // libpng caps each side at 1,000,000, so the casts are safe.
    if ((ctx->status = qfi_image_check_size((int)w, (int)h, ctx->name)) != QF_OK) return -1;
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (depth == 16) png_set_scale_16(png);
    // Alpha (and tRNS) is dropped, not composited, as PIL's convert("RGB") does.
    png_set_strip_alpha(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);

    int c = png_get_channels(png, info);
    if (png_get_bit_depth(png, info) != 8 || (c != 1 && c != 3) ||
        png_get_rowbytes(png, info) != (size_t)w * c) {
        ctx->status = qf_error(QF_ERR_UNSUPPORTED, "%s: PNG color type %d, bit depth %d is not supported",
                               ctx->name, color, depth);
        return -1;
    }
    ctx->status = qfi_image_alloc(&ctx->img, (int)w, (int)h, c, ctx->name);
    if (ctx->status != QF_OK) return -1;
    ctx->rows = malloc(sizeof(png_bytep) * h);
    if (!ctx->rows) {
        ctx->status = qf_error(QF_ERR_NOMEM, "%s: out of memory", ctx->name);
        return -1;
    }
    for (png_uint_32 y = 0; y < h; y++) ctx->rows[y] = ctx->img.px + (size_t)y * w * c;
    // No png_read_end: chunks after the pixels cannot change them, and a file
    // cut just before IEND still holds the whole image.
    png_read_image(png, ctx->rows);
    return 0;
}

qf_status qfi_decode_png(const uint8_t *buf, size_t size, const char *name, qf_image *out)
{
    png_ctx ctx = {.buf = buf, .size = size, .name = name, .status = QF_OK};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &ctx, on_error, on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return qf_error(QF_ERR_NOMEM, "%s: out of memory starting libpng", name);
    }
    int rc = decode(png, info, &ctx);
    png_destroy_read_struct(&png, &info, NULL);
    free(ctx.rows);
    if (rc != 0) {
        qf_image_free(&ctx.img);
        if (ctx.status != QF_OK) return ctx.status;
        return qf_error(QF_ERR_FORMAT, "%s: bad PNG: %s", name, ctx.msg);
    }
    *out = ctx.img;
    return QF_OK;
}
