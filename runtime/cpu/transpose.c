/* CPU kernel of Transpose, and the strided copy it shares with Slice: the
 * output is contiguous, the input is read through permuted or stepped strides. */
#include "kernels.h"
#include "ops/tensor_ops.h"

/* Copies n elements of es bytes, src stepping by `stride` elements. */
static void copy_row(char *dst, const char *src, int64_t n, int64_t stride, size_t es)
{
    if (stride == 1) {
        memcpy(dst, src, (size_t)n * es);
        return;
    }
    /* fixed-size memcpy compiles to one load and store per element */
    switch (es) {
    case 1: for (int64_t i = 0; i < n; i++) dst[i] = src[i * stride]; break;
    case 2: for (int64_t i = 0; i < n; i++) memcpy(dst + 2 * i, src + 2 * i * stride, 2); break;
    case 4: for (int64_t i = 0; i < n; i++) memcpy(dst + 4 * i, src + 4 * i * stride, 4); break;
    case 8: for (int64_t i = 0; i < n; i++) memcpy(dst + 8 * i, src + 8 * i * stride, 8); break;
    default: for (int64_t i = 0; i < n; i++) memcpy(dst + es * (size_t)i, src + (int64_t)es * i * stride, es);
    }
}

void qfi_cpu_strided_copy(void *dst, const void *src, int nd, const int64_t *dims, const int64_t *strides, size_t es)
{
    /* coalesce: drop unit dims, merge a dim into the next where the input is contiguous across both */
    int64_t cd[QF_MAX_DIMS], cs[QF_MAX_DIMS];
    int m = 0;
    for (int i = 0; i < nd; i++) {
        if (dims[i] == 0) return;
        if (dims[i] == 1) continue;
        if (m > 0 && cs[m - 1] == strides[i] * dims[i]) {
            cd[m - 1] *= dims[i];
            cs[m - 1] = strides[i];
            continue;
        }
        cd[m] = dims[i];
        cs[m] = strides[i];
        m++;
    }
    if (m == 0) {
        memcpy(dst, src, es);
        return;
    }
    int last = m - 1;
    int64_t idx[QF_MAX_DIMS] = {0};
    const char *s = src;
    char *d = dst;
    size_t row = (size_t)cd[last] * es;
    int64_t rows = qfi_numel(last, cd);
    for (int64_t r = 0; r < rows; r++) {
        copy_row(d, s, cd[last], cs[last], es);
        d += row;
        /* next row: odometer over the outer dims, moving s by their strides */
        for (int k = last - 1; k >= 0; k--) {
            s += cs[k] * (int64_t)es;
            if (++idx[k] < cd[k]) break;
            s -= cs[k] * cd[k] * (int64_t)es;
            idx[k] = 0;
        }
    }
}

static qf_status transpose_run(const qfi_kernel_args *a)
{
    const qf_value *x = qfi_in(a->g, a->n, 0), *y = qfi_out(a->g, a->n, 0);
    const qfi_transpose_params *p = a->n->params;
    int64_t xs[QF_MAX_DIMS], strides[QF_MAX_DIMS];
    /* x is contiguous: its own strides, then read in the output's order */
    qfi_contiguous_strides(x->ndim, x->dims, xs);
    for (int i = 0; i < y->ndim; i++) strides[i] = xs[p->n_perm ? p->perm[i] : y->ndim - 1 - i];
    qfi_cpu_strided_copy(a->out[0], a->in[0], y->ndim, y->dims, strides, qf_dtype_info(y->dtype)->size);
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_transpose = {.run = transpose_run};
