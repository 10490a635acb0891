/* Numpy-style broadcasting of shapes, shared by every op that broadcasts. */
#include "internal.h"

qf_status qfi_broadcast_shape(int na, const int64_t *a, int nb, const int64_t *b, int *nout, int64_t *out)
{
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        /* align from the right */
        int64_t da = i < n - na ? 1 : a[i - (n - na)];
        int64_t db = i < n - nb ? 1 : b[i - (n - nb)];
        if (da != db && da != 1 && db != 1)
            return qf_error(QF_ERR_INVALID, "shapes do not broadcast: dim %d is %lld vs %lld", i, (long long)da,
                            (long long)db);
        out[i] = da == 1 ? db : da;
    }
    *nout = n;
    return QF_OK;
}

void qfi_broadcast_strides(int n, const int64_t *dims, int nout, const int64_t *out_dims, int64_t *strides)
{
    int64_t s = 1;
    for (int i = nout - 1; i >= 0; i--) {
        int k = i - (nout - n);
        if (k < 0 || dims[k] == 1) {
            strides[i] = 0;
        } else {
            strides[i] = s;
        }
        if (k >= 0) s *= dims[k];
        (void)out_dims;
    }
}

void qfi_contiguous_strides(int ndim, const int64_t *dims, int64_t *strides)
{
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        strides[d] = s;
        s *= dims[d];
    }
}

bool qfi_is_channel_vector(const qf_value *c, int64_t channels)
{
    int64_t cnt = qf_value_numel(c);
    if (cnt == 1 && c->ndim <= 2) return true;
    return cnt == channels && c->ndim >= 1 && c->ndim <= 2 && c->dims[c->ndim - 1] == channels;
}
