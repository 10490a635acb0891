/* Gather on the device: slices of data along an axis picked by constant
 * indices (checked and made non-negative once, at build; indices computed
 * at run time leave the node to the host, where runtime/cpu/gather.c checks
 * them). One thread per output element (logical layout), or a strided copy
 * for a single index; the data may be NHWC. INT8 is a pass-through. */
#include "cuda_internal.h"

/* y is data.dims[:axis] + indices.dims + data.dims[axis+1:]. Output dim k
 * steps the data by xs[k] (0 for the indices' dims) and the flat index
 * position by is[k] (0 for the others). */
typedef struct gather_desc {
    int nd;
    int64_t ydims[QF_MAX_DIMS];
    int64_t xs[QF_MAX_DIMS];
    int64_t is[QF_MAX_DIMS];
    int64_t axis_stride;        /* the data's element stride along the axis */
    const int64_t *idx;         /* device, non-negative */
    /* one index (ViT's q, k, v picked from one tensor): a strided copy from
     * the data at `first` (cu_strided_copy moves whole rows in vectors) */
    bool single;
    int64_t first;
} gather_desc;

template <typename M> __global__ void gather_kernel(M m, gather_desc d, int64_t total)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i, off = 0, j = 0;
        for (int k = d.nd - 1; k >= 0; k--) {
            int64_t q = r / d.ydims[k], o = r - q * d.ydims[k];
            off += o * d.xs[k];
            j += o * d.is[k];
            r = q;
        }
        m.copy(i, off + d.idx[j] * d.axis_stride);
    }
}

static qf_status gather_check(const qf_graph *g, const qf_node *n)
{
    const qf_value *iv = qfi_in(g, n, 1);
    if (!(iv->flags & QF_VALUE_CONST) || !iv->data)
        return qf_error(QF_ERR_UNSUPPORTED, "indices %s are computed at run time", iv->name);
    return QF_OK;
}

static qf_status gather_prepare(cu_engine *c, cu_layer *L)
{
    const qf_graph *g = c->g;
    const qf_node *n = L->n;
    const qfi_axis_params *p = (const qfi_axis_params *)n->params;
    const qf_value *x = qfi_in(g, n, 0), *iv = qfi_in(g, n, 1), *y = qfi_out(g, n, 0);
    const int yv = cu_out_value(L, 0);
    if (!cu_can_move(cu_elem_of(c, n, yv), cu_elem_of(c, n, n->in[0])))
        return qf_error(QF_ERR_UNSUPPORTED, "no device copy from %s to %s", qf_dtype_info(x->dtype)->name,
                        qf_dtype_info(g->values[yv].dtype)->name);
    gather_desc *d = (gather_desc *)qfi_calloc(1, sizeof *d);
    if (!d) return QF_ERR_NOMEM;
    L->state = d;
    const int64_t dim = x->dims[p->norm], nidx = qf_value_numel(iv);
    int64_t *idx = (int64_t *)malloc((size_t)(nidx ? nidx : 1) * sizeof *idx);
    if (!idx) return qf_error(QF_ERR_NOMEM, "out of memory for indices %s", iv->name);
    for (int64_t j = 0; j < nidx; j++) {
        int64_t i = iv->dtype == QF_I64 ? ((const int64_t *)iv->data)[j] : ((const int32_t *)iv->data)[j];
        if (i < -dim || i >= dim) {
            free(idx);
            return qf_error(QF_ERR_INVALID, "index %lld out of range for dim %lld", (long long)i, (long long)dim);
        }
        idx[j] = i < 0 ? i + dim : i;
    }
    qf_status st = cu_upload(c, idx, (size_t)nidx * sizeof *idx, (void **)&d->idx);
    free(idx);
    QF_CHECK(st);
    int64_t xs[QF_MAX_DIMS], istr[QF_MAX_DIMS];
    cu_strides(c, n->in[0], xs);
    qfi_contiguous_strides(iv->ndim, iv->dims, istr);
    d->nd = y->ndim;
    d->axis_stride = xs[p->norm];
    for (int k = 0; k < y->ndim; k++) {
        d->ydims[k] = y->dims[k];
        const bool in_idx = k >= p->norm && k < p->norm + iv->ndim;
        d->xs[k] = in_idx ? 0 : k < p->norm ? xs[k] : xs[k - iv->ndim + 1];
        d->is[k] = in_idx ? istr[k - p->norm] : 0;
    }
    if (nidx == 1) {
        int64_t i0 = iv->dtype == QF_I64 ? ((const int64_t *)iv->data)[0] : ((const int32_t *)iv->data)[0];
        d->single = true;
        d->first = (i0 < 0 ? i0 + dim : i0) * xs[p->norm];
    }
    void *ptr;
    return cu_value_ptr(c, n->in[0], &ptr);
}

static qf_status gather_launch(cu_engine *c, cu_layer *L, cudaStream_t s)
{
    const gather_desc *d = (const gather_desc *)L->state;
    if (d->single) {
        const int xv = L->n->in[0], yv = cu_out_value(L, 0);
        const qf_value *y = &c->g->values[yv];
        void *x, *yp;
        QF_CHECK(cu_value_ptr(c, xv, &x));
        QF_CHECK(cu_value_ptr(c, yv, &yp));
        int64_t ys[QF_MAX_DIMS];
        qfi_contiguous_strides(y->ndim, y->dims, ys);
        return cu_strided_copy(s, yp, cu_elem_of(c, L->n, yv), ys, 0, x, cu_elem_of(c, L->n, xv), d->xs, d->first,
                               y->ndim, y->dims);
    }
    return cu_move_node(c, L, 0.0f, NULL, [&](auto m, unsigned blocks, int64_t total) {
        gather_kernel<<<blocks, 256, 0, s>>>(m, *d, total);
        CU_LAUNCHED();
        return QF_OK;
    });
}

const cu_op cu_op_gather = {gather_prepare, NULL, gather_launch, CU_RULE_LOGICAL, CU_ALL_PRECISIONS, gather_check};
