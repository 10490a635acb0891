/* Weight and bias quantization: symmetric INT8 weights per output channel (or
 * per tensor), INT32 biases in the accumulator's units. */
#include <math.h>
#include "quant_internal.h"

void qfi_quant_weights(const float *w, int64_t outer, int64_t channels, int64_t inner, bool per_channel, int8_t *q,
                       float *s)
{
    /* w is (outer, channels, inner) */
    for (int64_t c = 0; c < channels; c++) s[c] = 0.0f;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t c = 0; c < channels; c++) {
            const float *wc = w + (o * channels + c) * inner;
            for (int64_t i = 0; i < inner; i++)
                if (fabsf(wc[i]) > s[c]) s[c] = fabsf(wc[i]);
        }
    if (!per_channel) {
        float amax = 0.0f;
        for (int64_t c = 0; c < channels; c++)
            if (s[c] > amax) amax = s[c];
        for (int64_t c = 0; c < channels; c++) s[c] = amax;
    }
    for (int64_t c = 0; c < channels; c++) s[c] = qf_calib_scale(s[c]);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t c = 0; c < channels; c++) {
            int64_t at = (o * channels + c) * inner;
            for (int64_t i = 0; i < inner; i++) q[at + i] = qfi_quantize_f32(w[at + i], s[c]);
        }
}

int32_t qfi_quant_bias(float bias, float s_in, float s_w)
{
    const double lim = QFI_INT8_BIAS_LIMIT;
    float s = s_in * s_w;
    double v = rint((double)bias / (double)s);
    if (!(v == v)) return 0;
    return (int32_t)(v < -lim ? -lim : v > lim ? lim : v);
}
