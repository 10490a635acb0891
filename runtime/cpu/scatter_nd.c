/* CPU kernel of ScatterND (reduction none): data copied, then each index
 * tuple's slice overwritten by its updates, in order (a repeated index keeps
 * the last, as the reference implementation does). */
#include "kernels.h"
#include "ops/nn.h"

static qf_status scatter_nd_run(const qfi_kernel_args *a)
{
    int64_t count, slice;
    int k;
    QF_CHECK(qfi_scatter_nd_geometry(a->g, a->n, &count, &k, &slice));
    const qf_value *d = qfi_in(a->g, a->n, 0);
    const size_t es = qf_dtype_info(d->dtype)->size;
    memcpy(a->out[0], a->in[0], (size_t)qf_value_numel(d) * es);
    const int64_t *idx = a->in[1];
    for (int64_t t = 0; t < count; t++) {
        int64_t off = 0;
        for (int i = 0; i < k; i++) {
            int64_t v = idx[t * k + i];
            if (v < 0) v += d->dims[i];
            if (v < 0 || v >= d->dims[i])
                return qf_error(QF_ERR_INVALID, "index %lld is out of range for dim %d of %s (%lld)",
                                (long long)idx[t * k + i], i, d->name, (long long)d->dims[i]);
            off = off * d->dims[i] + v;
        }
        memcpy((char *)a->out[0] + (size_t)(off * slice) * es, (const char *)a->in[2] + (size_t)(t * slice) * es,
               (size_t)slice * es);
    }
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_scatter_nd = {.run = scatter_nd_run};
