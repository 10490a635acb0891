/* CPU kernels of QuantizeLinear (f32/f16 -> i8: x/s rounded half to even, plus
 * the zero point, saturated) and DequantizeLinear (i8, or a constant i32
 * bias, -> f32/f16: (q - z)*s), per tensor or per axis. The arithmetic is
 * lib/quant_math.h's qfi_quantize_f32_zp and qfi_dequantize_i8_zp, most
 * of it eight at a time (convert_simd.c). */
#include "kernels.h"
#include "ops/nn.h"

/* Pieces of at most CHUNK elements of one channel's run, spread over the
 * threads: a network's input quantized on one thread was 3 % of
 * MobileNetV2's INT8 batch (a division an element). */
#define CHUNK 32768

typedef struct qdq_job {
    const qf_graph *g;
    const qf_node *n;
    const qfi_qdq_geom *geo;
    const void *x;
    void *y;
    int64_t inner, chunks; /* elements of a channel's run, pieces per run */
} qdq_job;

static void qdq_piece(void *arg, int64_t item)
{
    const qdq_job *j = arg;
    const qf_value *x = qfi_in(j->g, j->n, 0), *y = qfi_out(j->g, j->n, 0);
    const int64_t r = item / j->chunks, c = r % j->geo->channels, i0 = item % j->chunks * CHUNK;
    const int64_t len = j->inner - i0 < CHUNK ? j->inner - i0 : CHUNK, at = r * j->inner + i0;
    const float s = j->geo->s[c];
    const int32_t z = j->geo->z ? j->geo->z[c] : 0;
    if (j->n->op == QF_OP_QUANTIZE_LINEAR) {
        const size_t es = qf_dtype_info(x->dtype)->size;
        qfi_cpu_quantize((const char *)j->x + at * es, x->dtype, (int8_t *)j->y + at, len, s, z);
    } else if (x->dtype == QF_I32) {
        /* an int32 bias (zero point 0): one FP32 product, as ONNX computes it */
        const int32_t *q = (const int32_t *)j->x + at;
        float *yf = (float *)j->y + at;
        for (int64_t i = 0; i < len; i++) yf[i] = (float)q[i] * s;
    } else if (y->dtype == QF_F16) {
        /* through f32 a block at a time: both conversions vectorized, the
         * same bits as one element at a time (YOLOv8n's DFL input: 7.7 ms a
         * batch of 4 that way) */
        enum { BLOCK = 512 };
        float f[BLOCK];
        for (int64_t i = 0; i < len; i += BLOCK) {
            const int64_t b = len - i < BLOCK ? len - i : BLOCK;
            qfi_cpu_dequantize((const int8_t *)j->x + at + i, f, b, s, z);
            qfi_cpu_f32_to_f16(f, (uint16_t *)j->y + at + i, b);
        }
    } else {
        qfi_cpu_dequantize((const int8_t *)j->x + at, (float *)j->y + at, len, s, z);
    }
}

static qf_status qdq_run(const qfi_kernel_args *a)
{
    const qf_graph *g = a->g;
    const qf_node *n = a->n;
    const int64_t cnt = qf_value_numel(qfi_in(g, n, 0));
    qfi_qdq_geom geo;
    QF_CHECK(qfi_qdq_geometry(g, n, &geo));
    /* x is (outer, channels, inner) = runs of inner elements, channel r % channels;
     * per tensor it is one run of cnt elements */
    const int64_t inner = geo.channels == 1 ? cnt : geo.inner;
    if (cnt == 0 || inner == 0) return QF_OK;
    qdq_job j = {.g = g, .n = n, .geo = &geo, .x = a->in[0], .y = a->out[0], .inner = inner,
                 .chunks = (inner + CHUNK - 1) / CHUNK};
    qfi_parallel_for(a->threads, cnt / inner * j.chunks, qdq_piece, &j);
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_qdq = {.run = qdq_run};
