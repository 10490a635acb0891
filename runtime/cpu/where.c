/* CPU kernel of Where: the output walked in order, each of the three inputs
 * read through its broadcast strides; elements are copied as bytes. */
#include "kernels.h"

static qf_status where_run(const qfi_kernel_args *a)
{
    const qf_value *c = qfi_in(a->g, a->n, 0), *x = qfi_in(a->g, a->n, 1), *y = qfi_in(a->g, a->n, 2);
    const qf_value *z = qfi_out(a->g, a->n, 0);
    const size_t es = qf_dtype_info(z->dtype)->size;
    int64_t sc[QF_MAX_DIMS], sx[QF_MAX_DIMS], sy[QF_MAX_DIMS], idx[QF_MAX_DIMS] = {0};
    qfi_broadcast_strides(c->ndim, c->dims, z->ndim, z->dims, sc);
    qfi_broadcast_strides(x->ndim, x->dims, z->ndim, z->dims, sx);
    qfi_broadcast_strides(y->ndim, y->dims, z->ndim, z->dims, sy);
    const uint8_t *cond = a->in[0];
    const char *xp = a->in[1], *yp = a->in[2];
    char *out = a->out[0];
    const int64_t total = qf_value_numel(z);
    int64_t oc = 0, ox = 0, oy = 0;
    for (int64_t i = 0; i < total; i++) {
        memcpy(out + (size_t)i * es, cond[oc] ? xp + ox * (int64_t)es : yp + oy * (int64_t)es, es);
        for (int d = z->ndim - 1; d >= 0; d--) { /* odometer */
            oc += sc[d], ox += sx[d], oy += sy[d];
            if (++idx[d] < z->dims[d]) break;
            oc -= sc[d] * z->dims[d], ox -= sx[d] * z->dims[d], oy -= sy[d] * z->dims[d];
            idx[d] = 0;
        }
    }
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_where = {.run = where_run};
