/* Netpbm decoding: P2/P5 (gray) and P3/P6 (RGB), ASCII and binary, maxval up
 * to 65535 (two bytes big-endian per binary sample above 255), scaled to
 * 0..255 with rounding. PBM bitmaps and PAM are refused. */
#include "datasets_impl.h"

typedef struct pnm_reader {
    const uint8_t *p, *end;
    const char *name;
} pnm_reader;

static bool is_space(uint8_t c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Skips whitespace and '#' comments (allowed anywhere in the header).
static void skip_space(pnm_reader *r)
{
    while (r->p < r->end) {
        if (is_space(*r->p)) {
            r->p++;
        } else if (*r->p == '#') {
            while (r->p < r->end && *r->p != '\n' && *r->p != '\r') r->p++;
        } else {
            break;
        }
    }
}

// A decimal number no larger than `max`; what it names is used in messages.
static qf_status read_uint(pnm_reader *r, unsigned max, const char *what, unsigned *out)
{
    skip_space(r);
    if (r->p >= r->end) return qf_error(QF_ERR_FORMAT, "%s: PNM is truncated (no %s)", r->name, what);
    if (*r->p < '0' || *r->p > '9')
        return qf_error(QF_ERR_FORMAT, "%s: PNM %s is not a number", r->name, what);
    unsigned long v = 0;
    while (r->p < r->end && *r->p >= '0' && *r->p <= '9') {
        v = v * 10 + (unsigned)(*r->p++ - '0');
        if (v > max) return qf_error(QF_ERR_FORMAT, "%s: PNM %s is larger than %u", r->name, what, max);
    }
    *out = (unsigned)v;
    return QF_OK;
}

qf_status qfi_decode_pnm(const uint8_t *buf, size_t size, const char *name, qf_image *out)
{
    pnm_reader r = {buf + 2, buf + size, name};
    char kind = (char)buf[1];
    if (kind != '2' && kind != '3' && kind != '5' && kind != '6')
        return qf_error(QF_ERR_UNSUPPORTED, "%s: PNM type P%c is not supported (only P2, P3, P5, P6)", name, kind);
    if (r.p >= r.end || !is_space(*r.p)) return qf_error(QF_ERR_FORMAT, "%s: bad PNM magic", name);
    bool ascii = kind == '2' || kind == '3';
    int c = (kind == '3' || kind == '6') ? 3 : 1;

    unsigned w, h, maxval;
    QF_CHECK(read_uint(&r, 1u << 30, "width", &w));
    QF_CHECK(read_uint(&r, 1u << 30, "height", &h));
    QF_CHECK(read_uint(&r, 65535, "maxval", &maxval));
    if (maxval == 0) return qf_error(QF_ERR_FORMAT, "%s: PNM maxval is 0", name);
    // Exactly one whitespace byte separates the header from a binary raster.
    if (r.p >= r.end || !is_space(*r.p)) return qf_error(QF_ERR_FORMAT, "%s: PNM is truncated after its header", name);
    r.p++;

    int bytes = maxval > 255 ? 2 : 1;
    size_t nsamples = (size_t)w * h * c;  // w, h < 2^30: no overflow in 64 bits
    QF_CHECK(qfi_image_check_size((int)w, (int)h, name));
    if (!ascii && (size_t)(r.end - r.p) / bytes < nsamples)
        return qf_error(QF_ERR_FORMAT, "%s: PNM is truncated (%zu bytes of pixels, %zu needed)",
                        name, (size_t)(r.end - r.p), nsamples * bytes);
    QF_CHECK(qfi_image_alloc(out, (int)w, (int)h, c, name));

    // 0..maxval -> 0..255, rounded to nearest.
    uint8_t *lut = malloc((size_t)maxval + 1);
    if (!lut) {
        qf_image_free(out);
        return qf_error(QF_ERR_NOMEM, "%s: out of memory", name);
    }
    for (unsigned v = 0; v <= maxval; v++) lut[v] = (uint8_t)((v * 510ull + maxval) / (2ull * maxval));

    qf_status st = QF_OK;
    for (size_t i = 0; i < nsamples; i++) {
        unsigned v;
        if (ascii) {
            if ((st = read_uint(&r, 65535, "sample", &v)) != QF_OK) break;
        } else if (bytes == 1) {
            v = r.p[i];
        } else {
            v = (unsigned)r.p[2 * i] << 8 | r.p[2 * i + 1];
        }
        if (v > maxval) {
            st = qf_error(QF_ERR_FORMAT, "%s: PNM sample %u is above maxval %u", name, v, maxval);
            break;
        }
        out->px[i] = lut[v];
    }
    free(lut);
    if (st != QF_OK) qf_image_free(out);
    return st;
}
