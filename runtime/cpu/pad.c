/* CPU kernel of Pad. Every output index maps to an input index of its dim
 * (or to "outside" in constant mode); rows along the last dim copy their
 * in-range middle at once. Any dtype. */
#include "kernels.h"
#include "ops/tensor_ops.h"

static void fill(char *dst, const unsigned char *val, int64_t cnt, size_t es)
{
    for (int64_t i = 0; i < cnt; i++) memcpy(dst + (size_t)i * es, val, es);
}

static qf_status pad_run(const qfi_kernel_args *a)
{
    const qfi_pad_params *p = a->n->params;
    const qf_value *x = qfi_in(a->g, a->n, 0), *y = qfi_out(a->g, a->n, 0);
    size_t es = qf_dtype_info(x->dtype)->size;
    int nd = y->ndim;
    if (qf_value_numel(y) == 0) return QF_OK;

    unsigned char val[8] = {0};
    const qf_value *cv = qfi_in(a->g, a->n, 2);
    if (cv && qf_value_numel(cv) == 1)
        memcpy(val, a->in[2], es);
    else if (x->dtype == QF_F32)
        memcpy(val, &p->value, 4); /* infer allows a non-zero attribute value only on f32 */
    if (nd == 0) {
        memcpy(a->out[0], a->in[0], es);
        return QF_OK;
    }

    int64_t xs[QF_MAX_DIMS];
    qfi_contiguous_strides(nd, x->dims, xs);
    int last = nd - 1;
    int64_t xn = x->dims[last], yn = y->dims[last], b = p->begin[last];
    /* the output indices of the last dim that read the input in order */
    int64_t mid0 = b > 0 ? b : 0, mid1 = b + xn < yn ? b + xn : yn;
    const char *src = a->in[0];
    char *dst = a->out[0];
    int64_t rows = qfi_numel(last, y->dims), idx[QF_MAX_DIMS] = {0};
    for (int64_t r = 0; r < rows; r++, dst += (size_t)yn * es) {
        /* y row r is y[idx[0], ..., idx[last-1], :] */
        int64_t off = 0;
        bool outside = false;
        for (int d = 0; d < last && !outside; d++) {
            int64_t i = qfi_pad_source(idx[d], p->begin[d], x->dims[d], p->mode);
            if (i < 0) outside = true;
            off += i * xs[d];
        }
        if (outside) {
            fill(dst, val, yn, es);
        } else {
            const char *row = src + (size_t)off * es;
            for (int64_t o = 0; o < yn; o++) {
                if (o == mid0 && mid1 > mid0) { /* the in-range run */
                    memcpy(dst + (size_t)o * es, row + (size_t)(o - b) * es, (size_t)(mid1 - mid0) * es);
                    o = mid1 - 1;
                    continue;
                }
                int64_t i = qfi_pad_source(o, b, xn, p->mode);
                if (i < 0)
                    memcpy(dst + (size_t)o * es, val, es);
                else
                    memcpy(dst + (size_t)o * es, row + (size_t)i * es, es);
            }
        }
        for (int d = last - 1; d >= 0; d--) { /* odometer over the outer dims */
            if (++idx[d] < y->dims[d]) break;
            idx[d] = 0;
        }
    }
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_pad = {.run = pad_run};
