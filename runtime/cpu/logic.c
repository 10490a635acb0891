/* CPU kernel of the bool-valued ops: Not, and Equal with numpy broadcasting
 * (f32, integer or bool operands). Exporters' shape and mask arithmetic,
 * folded at load time; the CUDA engine runs them on the host. */
#include "kernels.h"

/* Whether the two elements of es bytes are equal; floats by value (-0 == 0, NaN != NaN). */
static bool equal_at(qf_dtype dt, const char *a, const char *b, size_t es)
{
    if (dt == QF_F32) {
        float x, y;
        memcpy(&x, a, sizeof x);
        memcpy(&y, b, sizeof y);
        return x == y;
    }
    return memcmp(a, b, es) == 0;
}

static qf_status logic_run(const qfi_kernel_args *a)
{
    const qf_value *z = qfi_out(a->g, a->n, 0);
    uint8_t *out = a->out[0];
    const int64_t total = qf_value_numel(z);
    if (a->n->op == QF_OP_NOT) {
        const uint8_t *x = a->in[0];
        for (int64_t i = 0; i < total; i++) out[i] = !x[i];
        return QF_OK;
    }
    QF_ASSERT(a->n->op == QF_OP_EQUAL);
    const qf_value *x = qfi_in(a->g, a->n, 0), *y = qfi_in(a->g, a->n, 1);
    const size_t es = qf_dtype_info(x->dtype)->size;
    int64_t sx[QF_MAX_DIMS], sy[QF_MAX_DIMS], idx[QF_MAX_DIMS] = {0}, ox = 0, oy = 0;
    qfi_broadcast_strides(x->ndim, x->dims, z->ndim, z->dims, sx);
    qfi_broadcast_strides(y->ndim, y->dims, z->ndim, z->dims, sy);
    const char *xp = a->in[0], *yp = a->in[1];
    for (int64_t i = 0; i < total; i++) {
        out[i] = equal_at(x->dtype, xp + ox * (int64_t)es, yp + oy * (int64_t)es, es);
        for (int d = z->ndim - 1; d >= 0; d--) { /* odometer */
            ox += sx[d], oy += sy[d];
            if (++idx[d] < z->dims[d]) break;
            ox -= sx[d] * z->dims[d], oy -= sy[d] * z->dims[d];
            idx[d] = 0;
        }
    }
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_logic = {.run = logic_run};
