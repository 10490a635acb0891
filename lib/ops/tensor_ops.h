/* Parameters of the elementwise and tensor-manipulation ops whose CPU kernels
 * need more than the value shapes: filled by parse() and infer() in lib/ops/,
 * read by the kernels in runtime/cpu/. Axes named "norm" are normalized. */
#ifndef QFORGE_OPS_TENSOR_OPS_H
#define QFORGE_OPS_TENSOR_OPS_H

#include "internal.h"
#include "quant_math.h" /* QFI_HD: helpers both engines' kernels call */

/* Relu LeakyRelu Clip Sigmoid HardSigmoid HardSwish Tanh Erf Gelu Sqrt Not */
typedef struct qfi_unary_params {
    float alpha, beta; /* LeakyRelu slope; HardSigmoid/HardSwish y = max(0, min(1, alpha*x + beta)) */
    float lo, hi;      /* Clip bounds from attributes (opset < 11); inputs override them */
    bool tanh_approx;  /* Gelu approximate="tanh" */
} qfi_unary_params;

/* Mod: fmod 1 is C's fmod (the sign of the dividend), 0 the sign of the divisor */
typedef struct qfi_mod_params {
    bool fmod;
} qfi_mod_params;

/* Clip's bound input k (1: min, 2: max), or NULL when absent (an empty tensor counts as absent). */
const qf_value *qfi_clip_bound(const qf_graph *g, const qf_node *n, int k);
/* Clip's bounds where they are known before a run: the attributes (opset < 11)
 * or -FLT_MAX/FLT_MAX, overridden by constant bound inputs; an error naming
 * the bound when one is computed at run time. */
qf_status qfi_clip_bounds(const qf_graph *g, const qf_node *n, float *lo, float *hi);

/* Concat, Split, Gather: the axis they work along */
typedef struct qfi_axis_params {
    int64_t axis; /* as written */
    int norm;     /* normalized by infer() */
} qfi_axis_params;

typedef struct qfi_transpose_params {
    int n_perm; /* 0: reverse the dims */
    int perm[QF_MAX_DIMS];
} qfi_transpose_params;

typedef enum qfi_pad_mode { QFI_PADMODE_CONSTANT, QFI_PADMODE_REFLECT, QFI_PADMODE_EDGE, QFI_PADMODE_WRAP } qfi_pad_mode;

typedef struct qfi_pad_params {
    qfi_pad_mode mode;
    float value;                 /* constant value from the attribute (opset < 11) */
    int n_attr_pads;             /* pads attribute (opset < 11), -1 if absent */
    int64_t attr_pads[2 * QF_MAX_DIMS];
    int64_t begin[QF_MAX_DIMS];  /* by infer(): elements added before each dim (negative crops) */
} qfi_pad_params;

/* The input index output index o of a dim reads, the dim (n elements)
 * padded by `begin` in front; -1 for the constant value. Reflect mirrors
 * without repeating the edge (period 2(n-1), as numpy's reflect). */
static QFI_HD int64_t qfi_pad_source(int64_t o, int64_t begin, int64_t n, qfi_pad_mode mode)
{
    int64_t i = o - begin;
    if (i >= 0 && i < n) return i;
    switch (mode) {
    case QFI_PADMODE_CONSTANT: return -1;
    case QFI_PADMODE_EDGE: return i < 0 ? 0 : n - 1;
    case QFI_PADMODE_WRAP: return ((i % n) + n) % n;
    case QFI_PADMODE_REFLECT: {
        if (n == 1) return 0;
        int64_t period = 2 * (n - 1);
        int64_t m = ((i % period) + period) % period;
        return m < n ? m : period - m;
    }
    }
    return -1;
}

typedef struct qfi_slice_params {
    int n_attr;                  /* starts/ends/axes attributes (opset < 10), -1 if absent */
    int64_t attr_starts[QF_MAX_DIMS], attr_ends[QF_MAX_DIMS], attr_axes[QF_MAX_DIMS];
    int n_attr_axes;
    int64_t start[QF_MAX_DIMS];  /* by infer(): first input index and step of each dim */
    int64_t step[QF_MAX_DIMS];
} qfi_slice_params;

typedef struct qfi_split_params {
    int64_t axis;
    int norm;
    int n_attr_split;            /* split attribute (opset < 13), -1 if absent */
    int64_t num_outputs;         /* opset 18, 0 if absent */
    int64_t attr_split[];        /* n_attr_split entries */
} qfi_split_params;

typedef struct qfi_shape_params {
    int64_t start, end;          /* as written (opset 15); end INT64_MAX when absent */
    int first;                   /* by infer(): first dim reported */
} qfi_shape_params;

typedef enum qfi_constant_kind {
    QFI_CONST_TENSOR, QFI_CONST_FLOAT, QFI_CONST_FLOATS, QFI_CONST_INT, QFI_CONST_INTS
} qfi_constant_kind;

typedef struct qfi_constant_params {
    qfi_constant_kind kind;
    int attr;                    /* index in node->attrs */
} qfi_constant_params;

/* Resize and Upsample */
typedef enum qfi_resize_mode { QFI_RESIZE_NEAREST, QFI_RESIZE_LINEAR } qfi_resize_mode;
typedef enum qfi_resize_coord {
    QFI_COORD_HALF_PIXEL,
    QFI_COORD_HALF_PIXEL_SYMMETRIC,
    QFI_COORD_PYTORCH_HALF_PIXEL,
    QFI_COORD_ALIGN_CORNERS,
    QFI_COORD_ASYMMETRIC,
    QFI_COORD_TF_HALF_PIXEL_FOR_NN,
    QFI_COORD_TF_CROP_AND_RESIZE,
} qfi_resize_coord;
typedef enum qfi_resize_nearest {
    QFI_NEAREST_ROUND_PREFER_FLOOR,
    QFI_NEAREST_ROUND_PREFER_CEIL,
    QFI_NEAREST_FLOOR,
    QFI_NEAREST_CEIL,
    QFI_NEAREST_LEGACY, /* Upsample and Resize-10: floor, or ceil when shrinking (as ONNX Runtime) */
} qfi_resize_nearest;
typedef enum qfi_resize_aspect { QFI_ASPECT_STRETCH, QFI_ASPECT_NOT_LARGER, QFI_ASPECT_NOT_SMALLER } qfi_resize_aspect;

/* Where output index o of one dim reads: input i0 (weight 1 - w1) and i1
 * (weight w1); i0 < 0 means outside the input (extrapolation_value). */
/* The most output positions a Resize may have over all its dims (one tap
 * each, 24 bytes): an empty or one-dimensional output of a few bytes per
 * position would otherwise need a tap table many times its own size. */
#define QFI_RESIZE_MAX_TAPS ((int64_t)1 << 22)

typedef struct qfi_resize_tap {
    int64_t i0, i1;
    float w1;
} qfi_resize_tap;

/* One linear tap pair: (1 - w1) * a + w1 * b, two products and a sum, each
 * rounded (the CPU and CUDA kernels of Resize). */
static QFI_HD float qfi_resize_lerp(float w1, float a, float b)
{
    return qfi_add(qfi_mul(qfi_sub(1.0f, w1), a), qfi_mul(w1, b));
}

typedef struct qfi_resize_params {
    qfi_resize_mode mode;
    qfi_resize_coord coord;
    qfi_resize_nearest nearest;
    qfi_resize_aspect aspect;
    float extrapolation;
    int n_axes;                     /* opset 18 axes attribute, -1 if absent */
    int64_t axes[QF_MAX_DIMS];
    int n_attr_scales;              /* Upsample-7 scales attribute, -1 if absent */
    float attr_scales[QF_MAX_DIMS];
    /* by infer(): */
    int64_t tap_at[QF_MAX_DIMS];    /* first tap of each dim in taps[] */
    int64_t n_taps;
    qfi_resize_tap taps[];          /* one per output index of every dim */
} qfi_resize_params;

#endif
