/* ReduceMean on the device: one thread per output element (logical layout),
 * summing its input elements in double in the order runtime/cpu/reduce_mean.c
 * does (the innermost reduced dim fastest), so both engines give the same
 * float. The input may be NHWC (an SE block's mean over H and W, or over C). */
#include "cuda_internal.h"
#include <math.h>

typedef struct reduce_desc {
    int nk, nr;
    int64_t kdim[QF_MAX_DIMS], kstr[QF_MAX_DIMS]; /* kept dims, innermost first, and the input's strides */
    int64_t rdim[QF_MAX_DIMS], rstr[QF_MAX_DIMS]; /* reduced dims, innermost first */
    int64_t nred;
} reduce_desc;

__global__ void reduce_mean_kernel(void *y, cu_elem ye, const void *x, cu_elem xe, reduce_desc d, int64_t total)
{
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < total; o += (int64_t)gridDim.x * blockDim.x) {
        int64_t base = 0, r = o;
        for (int k = 0; k < d.nk; k++) {
            int64_t q = r / d.kdim[k];
            base += (r - q * d.kdim[k]) * d.kstr[k];
            r = q;
        }
        double sum = 0.0;
        int64_t idx[QF_MAX_DIMS] = {0}, off = 0;
        for (int64_t t = 0; t < d.nred; t++) {
            sum += cu_load(x, xe, base + off);
            for (int k = 0; k < d.nr; k++) { /* odometer over the reduced dims */
                off += d.rstr[k];
                if (++idx[k] < d.rdim[k]) break;
                off -= d.rstr[k] * d.rdim[k];
                idx[k] = 0;
            }
        }
        cu_store(y, ye, o, d.nred ? (float)(sum / (double)d.nred) : NAN);
    }
}

typedef struct reduce_state {
    reduce_desc d;
    bool noop;                  /* empty axes with noop_with_empty_axes: a copy */
} reduce_state;

static qf_status reduce_mean_check(const qf_graph *g, const qf_node *n)
{
    const qf_value *x = qfi_in(g, n, 0), *av = qfi_in(g, n, 1);
    if (av && !(av->flags & QF_VALUE_CONST))
        return qf_error(QF_ERR_UNSUPPORTED, "axes %s are computed at run time", av->name);
    if (!cu_float_like(g, n, x) || !cu_float_like(g, n, qfi_out(g, n, 0)))
        return qf_error(QF_ERR_UNSUPPORTED, "input %s of dtype %s", x->name, qf_dtype_info(x->dtype)->name);
    return QF_OK;
}

static qf_status reduce_mean_prepare(cu_engine *c, cu_layer *L)
{
    const qf_graph *g = c->g;
    const qf_node *n = L->n;
    const qf_value *x = qfi_in(g, n, 0);
    reduce_state *st = (reduce_state *)qfi_calloc(1, sizeof *st);
    if (!st) return QF_ERR_NOMEM;
    L->state = st;
    bool reduced[QF_MAX_DIMS];
    QF_CHECK(qfi_reduce_mean_axes(cu_geo_graph(c, n), n, NULL, reduced, &st->noop));
    int64_t xs[QF_MAX_DIMS];
    cu_strides(c, n->in[0], xs);
    reduce_desc &d = st->d;
    d.nred = 1;
    for (int k = x->ndim - 1; k >= 0; k--) {
        if (reduced[k]) {
            d.rdim[d.nr] = x->dims[k];
            d.rstr[d.nr++] = xs[k];
            d.nred *= x->dims[k];
        } else {
            d.kdim[d.nk] = x->dims[k];
            d.kstr[d.nk++] = xs[k];
        }
    }
    void *ptr;
    return cu_value_ptr(c, n->in[0], &ptr);
}

static qf_status reduce_mean_launch(cu_engine *c, cu_layer *L, cudaStream_t s)
{
    const reduce_state *st = (const reduce_state *)L->state;
    const int xv = L->n->in[0], yv = cu_out_value(L, 0);
    void *x, *y;
    QF_CHECK(cu_value_ptr(c, xv, &x));
    QF_CHECK(cu_value_ptr(c, yv, &y));
    const cu_elem xe = cu_elem_of(c, L->n, xv), ye = cu_elem_of(c, L->n, yv);
    const qf_value *val = &c->g->values[xv];
    if (st->noop) {
        int64_t ss[QF_MAX_DIMS], ds[QF_MAX_DIMS];
        cu_strides(c, xv, ss);
        qfi_contiguous_strides(val->ndim, val->dims, ds);
        return cu_strided_copy(s, y, ye, ds, 0, x, xe, ss, 0, val->ndim, val->dims);
    }
    int64_t total = 1;
    for (int k = 0; k < st->d.nk; k++) total *= st->d.kdim[k];
    if (!total) return QF_OK;
    unsigned blocks = cu_blocks(total, 128);
    reduce_mean_kernel<<<blocks > 65536 ? 65536 : blocks, 128, 0, s>>>(y, ye, x, xe, st->d, total);
    CU_LAUNCHED();
    return QF_OK;
}

const cu_op cu_op_reduce_mean = {reduce_mean_prepare, NULL, reduce_mean_launch, CU_RULE_LOGICAL, CU_ALL_PRECISIONS,
                                  reduce_mean_check};
