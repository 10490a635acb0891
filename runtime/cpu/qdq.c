/* CPU kernels of QuantizeLinear (f32/f16 -> i8: x/s rounded half to even,
 * saturated) and DequantizeLinear (i8 -> f32/f16: q*s), per tensor, zero
 * point 0. The arithmetic is lib/internal.h's qfi_quantize_f32. */
#include "kernels.h"
#include "ops/nn.h"

qf_status qfi_cpu_qdq(const qfi_kernel_args *a)
{
    const qf_graph *g = a->g;
    const qf_node *n = a->n;
    const qf_value *x = qfi_in(g, n, 0), *y = qfi_out(g, n, 0);
    float s;
    QF_CHECK(qfi_qdq_scale(g, n, &s));
    const int64_t cnt = qf_value_numel(x);
    if (n->op == QF_OP_QUANTIZE_LINEAR) {
        int8_t *q = a->out[0];
        if (x->dtype == QF_F16) {
            const uint16_t *xh = a->in[0];
            for (int64_t i = 0; i < cnt; i++) q[i] = qfi_quantize_f32(qf_f16_to_f32(xh[i]), s);
        } else {
            const float *xf = a->in[0];
            for (int64_t i = 0; i < cnt; i++) q[i] = qfi_quantize_f32(xf[i], s);
        }
        return QF_OK;
    }
    const int8_t *q = a->in[0];
    if (y->dtype == QF_F16) {
        uint16_t *yh = a->out[0];
        for (int64_t i = 0; i < cnt; i++) yh[i] = qf_f32_to_f16(qfi_dequantize_i8(q[i], s));
    } else {
        float *yf = a->out[0];
        for (int64_t i = 0; i < cnt; i++) yf[i] = qfi_dequantize_i8(q[i], s);
    }
    return QF_OK;
}
