/* ReduceMean on the CPU: for every output element, the mean (accumulated in
 * double) of the input elements that the reduced dims collapse onto it. */
#include "kernels.h"
#include "ops/nn.h"
#include <math.h>

static qf_status reduce_mean_run(const qfi_kernel_args *a)
{
    const qf_value *xv = qfi_in(a->g, a->n, 0);
    QF_CHECK(qfi_require_f32(a->g, a->n, xv, "input"));
    bool reduced[QF_MAX_DIMS], noop;
    QF_CHECK(qfi_reduce_mean_axes(a->g, a->n, a->n->n_in > 1 ? a->in[1] : NULL, reduced, &noop));
    const float *x = a->in[0];
    float *y = a->out[0];
    if (noop) {
        if (y != x) memcpy(y, x, qf_value_bytes(xv));
        return QF_OK;
    }
    /* split x's dims into kept (walked by the output index) and reduced ones */
    int64_t kdim[QF_MAX_DIMS], kstr[QF_MAX_DIMS], rdim[QF_MAX_DIMS], rstr[QF_MAX_DIMS];
    int nk = 0, nr = 0;
    int64_t stride = 1;
    for (int d = xv->ndim - 1; d >= 0; d--) {
        if (reduced[d]) {
            rdim[nr] = xv->dims[d];
            rstr[nr++] = stride;
        } else {
            kdim[nk] = xv->dims[d];
            kstr[nk++] = stride;
        }
        stride *= xv->dims[d];
    }
    /* index 0 of kdim/rdim is the innermost dim */
    const int64_t nout = qfi_numel(nk, kdim), nred = qfi_numel(nr, rdim);
    int64_t kidx[QF_MAX_DIMS] = {0}, base = 0;
    for (int64_t o = 0; o < nout; o++) {
        double sum = 0.0;
        int64_t ridx[QF_MAX_DIMS] = {0}, off = 0;
        for (int64_t r = 0; r < nred; r++) {
            sum += x[base + off];
            /* odometer over the reduced dims */
            for (int k = 0; k < nr; k++) {
                off += rstr[k];
                if (++ridx[k] < rdim[k]) break;
                off -= rstr[k] * rdim[k];
                ridx[k] = 0;
            }
        }
        y[o] = nred ? (float)(sum / (double)nred) : NAN;
        for (int k = 0; k < nk; k++) {
            base += kstr[k];
            if (++kidx[k] < kdim[k]) break;
            base -= kstr[k] * kdim[k];
            kidx[k] = 0;
        }
    }
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_reduce_mean = {.run = reduce_mean_run};
