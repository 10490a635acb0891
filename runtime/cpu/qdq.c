/* CPU kernels of QuantizeLinear (f32/f16 -> i8: x/s rounded half to even,
 * saturated; per tensor) and DequantizeLinear (i8 -> f32/f16: q*s; per tensor
 * or per axis), zero point 0. The arithmetic is lib/quant_math.h's
 * qfi_quantize_f32 and qfi_dequantize_i8. */
#include "kernels.h"
#include "ops/nn.h"

static qf_status qdq_run(const qfi_kernel_args *a)
{
    const qf_graph *g = a->g;
    const qf_node *n = a->n;
    const qf_value *x = qfi_in(g, n, 0), *y = qfi_out(g, n, 0);
    const int64_t cnt = qf_value_numel(x);
    if (n->op == QF_OP_QUANTIZE_LINEAR) {
        float s;
        QF_CHECK(qfi_qdq_scale(g, n, &s));
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
    qfi_qdq_geom geo;
    QF_CHECK(qfi_qdq_geometry(g, n, &geo));
    const int8_t *q = a->in[0];
    /* x is (outer, channels, inner); per tensor it is one run of cnt elements */
    const int64_t inner = geo.channels == 1 ? cnt : geo.inner, run = geo.channels * inner;
    for (int64_t o = 0; o < cnt; o += run)
        for (int64_t c = 0; c < geo.channels; c++) {
            const float s = geo.s[c];
            const int64_t at = o + c * inner;
            if (y->dtype == QF_F16) {
                uint16_t *yh = (uint16_t *)a->out[0] + at;
                for (int64_t i = 0; i < inner; i++) yh[i] = qf_f32_to_f16(qfi_dequantize_i8(q[at + i], s));
            } else {
                float *yf = (float *)a->out[0] + at;
                for (int64_t i = 0; i < inner; i++) yf[i] = qfi_dequantize_i8(q[at + i], s);
            }
        }
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_qdq = {.run = qdq_run};
