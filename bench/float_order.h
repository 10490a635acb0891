/* Floats as int32 in the order of their values (-0 and +0 next to each
 * other, the negatives below), and back: the studies in bench/ bisect and
 * walk floats ulp by ulp with them. For C and C++. */
#ifndef QFORGE_BENCH_FLOAT_ORDER_H
#define QFORGE_BENCH_FLOAT_ORDER_H
#include <stdint.h>
#include <string.h>

static inline int32_t ordered(float f)
{
    int32_t i;
    memcpy(&i, &f, 4);
    return i < 0 ? (int32_t)(0x80000000u - (uint32_t)i) : i;
}
static inline float from_ordered(int32_t i)
{
    const int32_t b = i < 0 ? (int32_t)(0x80000000u - (uint32_t)i) : i;
    float f;
    memcpy(&f, &b, 4);
    return f;
}
#endif
