/* JPEG decoding with libjpeg-turbo from a memory buffer. libjpeg's fatal
 * errors and its "premature end" warning longjmp back here, so a corrupt or
 * truncated file becomes a qf_status instead of exit() or a gray-filled image. */
#include "datasets_impl.h"  // first: jpeglib.h needs stdio.h's FILE and size_t
#include <setjmp.h>
#include <jpeglib.h>
#include <jerror.h>

typedef struct jpeg_ctx {
    struct jpeg_error_mgr pub;  // first: libjpeg hands us &pub as cinfo->err
    jmp_buf jmp;
    const char *name;
    qf_status status;           // set when we (not libjpeg) decide to fail
    qf_image img;
    uint8_t *row;               // one CMYK row
} jpeg_ctx;

static void on_error_exit(j_common_ptr cinfo)
{
    jpeg_ctx *ctx = (jpeg_ctx *)cinfo->err;
    longjmp(ctx->jmp, 1);
}

// Level -1 is a warning. Most are harmless ("extraneous bytes before
// marker") and PIL ignores them too; a premature end means missing pixels,
// which libjpeg would paint gray, so that one fails. Nothing is printed.
static void on_emit_message(j_common_ptr cinfo, int level)
{
    jpeg_ctx *ctx = (jpeg_ctx *)cinfo->err;
    if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) longjmp(ctx->jmp, 1);
}

static void on_output_message(j_common_ptr cinfo) {}

// C*M*Y*K to RGB as R = (255-C)(255-K)/255. Adobe's CMYK JPEGs (nearly all of
// them) store inverted values, as PIL also assumes when the APP14 marker is there.
static void cmyk_to_rgb(const uint8_t *in, uint8_t *out, int w, bool inverted)
{
    for (int x = 0; x < w; x++, in += 4, out += 3) {
        unsigned k = inverted ? in[3] : 255u - in[3];
        for (int j = 0; j < 3; j++) {
            unsigned v = inverted ? in[j] : 255u - in[j];
            out[j] = (uint8_t)((v * k * 2 + 255) / 510);
        }
    }
}

// All state lives in *ctx (not in this frame), so nothing is lost by longjmp.
static int decode(struct jpeg_decompress_struct *cinfo, jpeg_ctx *ctx, const uint8_t *buf, size_t size)
{
    if (setjmp(ctx->jmp)) return -1;
    jpeg_create_decompress(cinfo);
    jpeg_mem_src(cinfo, buf, (unsigned long)size);
    jpeg_read_header(cinfo, TRUE);

    // JPEG caps each side at 65500, so the casts are safe.
    ctx->status = qfi_image_check_size((int)cinfo->image_width, (int)cinfo->image_height, ctx->name);
    if (ctx->status != QF_OK) return -1;
    bool cmyk = false;
    switch (cinfo->jpeg_color_space) {
    case JCS_GRAYSCALE: cinfo->out_color_space = JCS_GRAYSCALE; break;
    case JCS_CMYK:
    case JCS_YCCK: cinfo->out_color_space = JCS_CMYK; cmyk = true; break;
    default: cinfo->out_color_space = JCS_RGB; break;
    }
    jpeg_start_decompress(cinfo);
    int w = (int)cinfo->output_width, h = (int)cinfo->output_height;
    int c = cmyk ? 3 : cinfo->output_components;
    if (c != 1 && c != 3) {
        ctx->status = qf_error(QF_ERR_UNSUPPORTED, "%s: JPEG with %d components is not supported",
                               ctx->name, cinfo->output_components);
        return -1;
    }
    ctx->status = qfi_image_alloc(&ctx->img, w, h, c, ctx->name);
    if (ctx->status != QF_OK) return -1;
    if (cmyk && !(ctx->row = malloc((size_t)w * 4))) {
        ctx->status = qf_error(QF_ERR_NOMEM, "%s: out of memory", ctx->name);
        return -1;
    }
    while (cinfo->output_scanline < cinfo->output_height) {
        uint8_t *dst = ctx->img.px + (size_t)cinfo->output_scanline * w * c;
        JSAMPROW row = cmyk ? ctx->row : dst;
        // A memory source cannot suspend, but rows must never be left unset.
        if (jpeg_read_scanlines(cinfo, &row, 1) != 1) {
            ctx->status = qf_error(QF_ERR_FORMAT, "%s: JPEG ended early", ctx->name);
            return -1;
        }
        if (cmyk) cmyk_to_rgb(ctx->row, dst, w, cinfo->saw_Adobe_marker);
    }
    // No jpeg_finish_decompress: it only reads past the pixels, and would
    // fail a file whose EOI marker alone is missing.
    return 0;
}

qf_status qfi_decode_jpeg(const uint8_t *buf, size_t size, const char *name, qf_image *out)
{
    struct jpeg_decompress_struct cinfo;
    jpeg_ctx ctx = {.name = name, .status = QF_OK};
    memset(&cinfo, 0, sizeof(cinfo));
    cinfo.err = jpeg_std_error(&ctx.pub);
    ctx.pub.error_exit = on_error_exit;
    ctx.pub.emit_message = on_emit_message;
    ctx.pub.output_message = on_output_message;
    int rc = decode(&cinfo, &ctx, buf, size);
    char msg[JMSG_LENGTH_MAX] = "";
    if (rc != 0 && ctx.status == QF_OK) ctx.pub.format_message((j_common_ptr)&cinfo, msg);
    jpeg_destroy_decompress(&cinfo);
    free(ctx.row);
    if (rc != 0) {
        qf_image_free(&ctx.img);
        if (ctx.status != QF_OK) return ctx.status;
        return qf_error(QF_ERR_FORMAT, "%s: bad JPEG: %s", name, msg);
    }
    *out = ctx.img;
    return QF_OK;
}
