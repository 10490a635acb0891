/* tests/smooth_sweep.cu: the fast smooth-activation levels against the exact form, every float. */
#ifndef QFORGE_TESTS_SMOOTH_SWEEP_H
#define QFORGE_TESTS_SMOOTH_SWEEP_H
#include "qforge/graph.h"
#include <stdbool.h>
#ifdef __cplusplus
extern "C" {
#endif
/* What is swept: the int8 levels (qfi_smooth_level_fast_try), the half
 * outputs' fast form (qfi_sigmoid_f16_fast) or its approximate one
 * (qfi_sigmoid_f16_approx). */
enum { QFT_SWEEP_INT8, QFT_SWEEP_HALF, QFT_SWEEP_HALF_APPROX };
/* For act at output scale s with the int8 bounds lo, hi (relative to the
 * zero point): *wrong counts the v of all 2^32 floats (*total) whose level
 * (the half forms: whose half output, act SiLU or Sigmoid) the fast form called sure
 * but got wrong, *unsure the v with 1 <= |v| <= 2048 (half: 1/16 <= |v|
 * <= 16; *total_big of them) it left to the exact form. 0, or -1 on a CUDA
 * error. */
int qft_smooth_sweep(qf_act act, int form, float s, float lo, float hi, unsigned long long *wrong,
                     unsigned long long *unsure, unsigned long long *total, unsigned long long *total_big);
#ifdef __cplusplus
}
#endif
#endif
