/* CPU kernels of QuantizeLinear (f32/f16 -> i8: x/s rounded half to even, plus
 * the zero point, saturated) and DequantizeLinear (i8, or a constant i32
 * bias, -> f32/f16: (q - z)*s), per tensor or per axis. The arithmetic is
 * lib/quant_math.h's qfi_quantize_f32_zp and qfi_dequantize_i8_zp, most
 * of it eight at a time (convert_simd.c). */
#include "kernels.h"
#include "ops/nn.h"

static qf_status qdq_run(const qfi_kernel_args *a)
{
    const qf_graph *g = a->g;
    const qf_node *n = a->n;
    const qf_value *x = qfi_in(g, n, 0), *y = qfi_out(g, n, 0);
    const int64_t cnt = qf_value_numel(x);
    qfi_qdq_geom geo;
    QF_CHECK(qfi_qdq_geometry(g, n, &geo));
    /* x is (outer, channels, inner); per tensor it is one run of cnt elements */
    const int64_t inner = geo.channels == 1 ? cnt : geo.inner, run = geo.channels * inner;
    for (int64_t o = 0; o < cnt; o += run)
        for (int64_t c = 0; c < geo.channels; c++) {
            const float s = geo.s[c];
            const int32_t z = geo.z ? geo.z[c] : 0;
            const int64_t at = o + c * inner;
            if (n->op == QF_OP_QUANTIZE_LINEAR) {
                const size_t es = qf_dtype_info(x->dtype)->size;
                qfi_cpu_quantize((const char *)a->in[0] + at * es, x->dtype, (int8_t *)a->out[0] + at, inner, s, z);
            } else if (x->dtype == QF_I32) {
                /* an int32 bias (zero point 0): one FP32 product, as ONNX computes it */
                const int32_t *q = (const int32_t *)a->in[0] + at;
                float *yf = (float *)a->out[0] + at;
                for (int64_t i = 0; i < inner; i++) yf[i] = (float)q[i] * s;
            } else if (y->dtype == QF_F16) {
                const int8_t *q = (const int8_t *)a->in[0] + at;
                uint16_t *yh = (uint16_t *)a->out[0] + at;
                for (int64_t i = 0; i < inner; i++) yh[i] = qf_f32_to_f16(qfi_dequantize_i8_zp(q[i], s, z));
            } else {
                qfi_cpu_dequantize((const int8_t *)a->in[0] + at, (float *)a->out[0] + at, inner, s, z);
            }
        }
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_qdq = {.run = qdq_run};
