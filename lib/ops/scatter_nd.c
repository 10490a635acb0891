/* ScatterND (reduction "none"): a copy of data with the slices that int64
 * indices [..., k] address replaced by updates. Swin's TorchScript export
 * builds its shifted-window mask with it, from constants: folded at load
 * time. The CPU kernel is runtime/cpu/scatter_nd.c; the CUDA engine runs it on
 * the host. */
#include <string.h>
#include "ops/nn.h"
#include "ops/ops.h"

static qf_status scatter_nd_parse(qf_graph *g, qf_node *n)
{
    QF_CHECK(qfi_check_arity(g, n, 3, 3));
    const char *r = qfi_attr_string(n, "reduction", "none");
    if (strcmp(r, "none") != 0) return qf_error(QF_ERR_UNSUPPORTED, "reduction = \"%s\" (only none)", r);
    return QF_OK;
}

qf_status qfi_scatter_nd_geometry(const qf_graph *g, const qf_node *n, int64_t *count, int *k, int64_t *slice)
{
    const qf_value *d = qfi_in(g, n, 0), *iv = qfi_in(g, n, 1), *u = qfi_in(g, n, 2);
    if (!d || !iv || !u) return qf_error(QF_ERR_INVALID, "missing input");
    if (iv->dtype != QF_I64 || iv->ndim < 1)
        return qf_error(QF_ERR_UNSUPPORTED, "indices %s must be int64 of rank >= 1", iv->name);
    if (u->dtype != d->dtype)
        return qf_error(QF_ERR_INVALID, "updates %s and data %s have dtypes %s and %s", u->name, d->name,
                        qf_dtype_info(u->dtype)->name, qf_dtype_info(d->dtype)->name);
    *k = (int)iv->dims[iv->ndim - 1];
    if (*k < 1 || *k > d->ndim) return qf_error(QF_ERR_INVALID, "indices %s address %d of %d dims", iv->name, *k, d->ndim);
    /* updates: indices.shape[:-1] + data.shape[k:] */
    bool ok = u->ndim == iv->ndim - 1 + d->ndim - *k;
    for (int i = 0; ok && i < iv->ndim - 1; i++) ok = u->dims[i] == iv->dims[i];
    for (int i = *k; ok && i < d->ndim; i++) ok = u->dims[iv->ndim - 1 + i - *k] == d->dims[i];
    if (!ok) return qf_error(QF_ERR_INVALID, "updates %s do not have the shape indices and data imply", u->name);
    *count = qfi_numel(iv->ndim - 1, iv->dims);
    *slice = qfi_numel(d->ndim - *k, d->dims + *k);
    return QF_OK;
}

static qf_status scatter_nd_infer(qf_graph *g, qf_node *n)
{
    int64_t count, slice;
    int k;
    QF_CHECK(qfi_scatter_nd_geometry(g, n, &count, &k, &slice));
    const qf_value *d = qfi_in(g, n, 0);
    qfi_value_set_shape(qfi_out(g, n, 0), d->dtype, d->ndim, d->dims);
    return QF_OK;
}

const qfi_op_desc qfi_op_scatter_nd = {.parse = scatter_nd_parse, .infer = scatter_nd_infer, .params = 1u << 1};
