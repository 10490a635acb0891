/* CPU kernel of Resize and Upsample. Per output row (all dims but the last)
 * the outer dims' taps expand into a short list of (input offset, weight)
 * terms; the last dim's taps then run along the row. Nearest works on any
 * dtype, linear on f32 (qfi_resize_infer enforces both). Nearest moves
 * stored elements by their width (a memcpy call an element took YOLOv8n's
 * two 2x upsamplings 16 of its 330 ms on 2 cores), and an output row whose
 * source row is the previous output row's is that row copied. */
#include "kernels.h"
#include "ops/tensor_ops.h"

/* At most two taps for each of the up to QF_MAX_DIMS-1 outer dims. */
#define MAX_TERMS (1 << (QF_MAX_DIMS - 1))

/* One nearest output row of n elements of es bytes from the input row x:
 * element o is x[tap[o].i0] (every tap inside the row). */
static void nearest_row(char *dst, const char *x, const qfi_resize_tap *tap, int64_t n, size_t es)
{
    switch (es) {
    case 1:
        for (int64_t o = 0; o < n; o++) ((uint8_t *)dst)[o] = ((const uint8_t *)x)[tap[o].i0];
        break;
    case 2:
        for (int64_t o = 0; o < n; o++) ((uint16_t *)dst)[o] = ((const uint16_t *)x)[tap[o].i0];
        break;
    case 4:
        for (int64_t o = 0; o < n; o++) ((uint32_t *)dst)[o] = ((const uint32_t *)x)[tap[o].i0];
        break;
    default:
        for (int64_t o = 0; o < n; o++) memcpy(dst + (size_t)o * es, x + (size_t)tap[o].i0 * es, es);
    }
}

static qf_status resize_run(const qfi_kernel_args *a)
{
    const qfi_resize_params *p = a->n->params;
    const qf_value *x = qfi_in(a->g, a->n, 0), *y = qfi_out(a->g, a->n, 0);
    int nd = y->ndim;
    size_t es = qf_dtype_info(x->dtype)->size;
    if (qf_value_numel(y) == 0) return QF_OK;
    if (nd == 0) {
        memcpy(a->out[0], a->in[0], es);
        return QF_OK;
    }
    int64_t xs[QF_MAX_DIMS];
    qfi_contiguous_strides(nd, x->dims, xs);
    int last = nd - 1;
    int64_t yn = y->dims[last];
    const qfi_resize_tap *lt = p->taps + p->tap_at[last];
    const char *src = a->in[0];
    char *dst = a->out[0];
    const size_t row_bytes = (size_t)yn * es;
    bool row_outside = false; /* a tap of the last dim outside the input: extrapolated, element by element */
    for (int64_t o = 0; o < yn; o++) row_outside |= lt[o].i0 < 0;
    int64_t rows = qfi_numel(last, y->dims), idx[QF_MAX_DIMS] = {0}, prev_off = -1;
    int64_t off[MAX_TERMS];
    float w[MAX_TERMS];
    for (int64_t r = 0; r < rows; r++, dst += row_bytes) {
        /* y row r is y[idx[0], ..., idx[last-1], :]; its terms read x rows off[t] with weights w[t] */
        int nt = 1;
        off[0] = 0;
        w[0] = 1.0f;
        bool outside = false;
        for (int d = 0; d < last && !outside; d++) {
            const qfi_resize_tap *t = &p->taps[p->tap_at[d] + idx[d]];
            if (t->i0 < 0) {
                outside = true;
            } else if (t->w1 == 0.0f || t->i1 == t->i0) {
                for (int k = 0; k < nt; k++) off[k] += t->i0 * xs[d];
            } else {
                for (int k = 0; k < nt; k++) {
                    off[nt + k] = off[k] + t->i1 * xs[d];
                    w[nt + k] = w[k] * t->w1;
                    off[k] += t->i0 * xs[d];
                    w[k] *= 1.0f - t->w1;
                }
                nt *= 2;
            }
        }
        if (p->mode == QFI_RESIZE_NEAREST && !outside && !row_outside) {
            /* the row above read the same input row (an upsampling's repeated rows): the same bytes */
            if (off[0] == prev_off) memcpy(dst, dst - row_bytes, row_bytes);
            else nearest_row(dst, src + (size_t)off[0] * es, lt, yn, es);
            prev_off = off[0];
        } else if (p->mode == QFI_RESIZE_NEAREST) {
            prev_off = -1;
            for (int64_t o = 0; o < yn; o++) {
                if (outside || lt[o].i0 < 0)
                    memcpy(dst + (size_t)o * es, &p->extrapolation, es); /* f32 only: checked by infer */
                else
                    memcpy(dst + (size_t)o * es, src + (size_t)(off[0] + lt[o].i0) * es, es);
            }
        } else {
            const float *xf = (const float *)src;
            float *yf = (float *)dst;
            for (int64_t o = 0; o < yn; o++) {
                if (outside || lt[o].i0 < 0) {
                    yf[o] = p->extrapolation;
                    continue;
                }
                float acc = 0.0f, w1 = lt[o].w1;
                for (int k = 0; k < nt; k++) {
                    const float *row = xf + off[k];
                    acc += w[k] * qfi_resize_lerp(w1, row[lt[o].i0], row[lt[o].i1]);
                }
                yf[o] = acc;
            }
        }
        for (int d = last - 1; d >= 0; d--) { /* odometer over the outer dims */
            if (++idx[d] < y->dims[d]) break;
            idx[d] = 0;
        }
    }
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_resize = {.run = resize_run};
