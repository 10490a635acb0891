/* Parameters and geometry of the compute ops (Conv, ConvTranspose, Gemm, MatMul,
 * pools, BatchNormalization, Softmax, ReduceMean): parsed by lib/ops/, read by
 * shape inference and by every engine's kernels, so all of them agree. */
#ifndef QFORGE_OPS_NN_H
#define QFORGE_OPS_NN_H

#include "internal.h"

/* Spatial dims of Conv/ConvTranspose/pools: 1-D, 2-D or 3-D. */
#define QFI_MAX_SPATIAL 3

typedef enum qfi_auto_pad {
    QFI_PAD_NOTSET,
    QFI_PAD_SAME_UPPER,
    QFI_PAD_SAME_LOWER,
    QFI_PAD_VALID,
} qfi_auto_pad;

/* Sliding-window attributes as the model wrote them; a count of 0 means the
 * attribute is absent. Shared by Conv, ConvTranspose, MaxPool, AveragePool. */
typedef struct qfi_window_attrs {
    qfi_auto_pad auto_pad;
    int n_kernel, n_strides, n_dilations, n_pads;
    int64_t kernel[QFI_MAX_SPATIAL];
    int64_t strides[QFI_MAX_SPATIAL];
    int64_t dilations[QFI_MAX_SPATIAL];
    int64_t pads[2 * QFI_MAX_SPATIAL]; /* x1_begin, x2_begin, ..., x1_end, x2_end, ... */
} qfi_window_attrs;

/* A window resolved against one input shape. The model's `nsp` spatial dims
 * are right-aligned into three (D,H,W) with leading 1s (k=1, stride=1, pad=0),
 * so kernels walk one 3-D loop nest for 1-D, 2-D and 3-D alike. Index
 * 3-nsp+i holds the model's spatial dim i. */
typedef struct qfi_window {
    int nsp;
    int64_t in[QFI_MAX_SPATIAL];
    int64_t k[QFI_MAX_SPATIAL];
    int64_t stride[QFI_MAX_SPATIAL];
    int64_t dil[QFI_MAX_SPATIAL];
    int64_t pad[QFI_MAX_SPATIAL];     /* padding before the first element */
    int64_t pad_end[QFI_MAX_SPATIAL];
    int64_t out[QFI_MAX_SPATIAL];
} qfi_window;

static inline int64_t qfi_window_in_size(const qfi_window *w) { return w->in[0] * w->in[1] * w->in[2]; }
static inline int64_t qfi_window_k_size(const qfi_window *w) { return w->k[0] * w->k[1] * w->k[2]; }
static inline int64_t qfi_window_out_size(const qfi_window *w) { return w->out[0] * w->out[1] * w->out[2]; }
/* Whether some tap of the window reads padding: before the first element,
 * or past the last (an end padding that no tap reaches is not read). All
 * three dims: the model's are the last nsp (the leading ones read none). */
static inline bool qfi_window_reads_padding(const qfi_window *w)
{
    for (int d = 0; d < QFI_MAX_SPATIAL; d++)
        if (w->pad[d] > 0 || (w->out[d] - 1) * w->stride[d] + (w->k[d] - 1) * w->dil[d] + 1 > w->in[d] + w->pad[d])
            return true;
    return false;
}

/* The run [*lo, *hi) of positions o in [0, n_out) whose input position
 * o*stride + offset lies inside [0, n_in): kernels walk that run without
 * bounds checks and treat the rest as padding. */
static inline void qfi_window_run(int64_t n_out, int64_t n_in, int64_t stride, int64_t offset, int64_t *lo,
                                  int64_t *hi)
{
    int64_t a = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
    int64_t b = offset >= n_in ? 0 : (n_in - 1 - offset) / stride + 1;
    *lo = a < n_out ? a : n_out;
    *hi = b < *lo ? *lo : b < n_out ? b : n_out;
}

/* Reads kernel_shape, strides, dilations, pads and auto_pad. */
qf_status qfi_window_parse(const qf_graph *g, const qf_node *n, qfi_window_attrs *a);
/* Checks the attribute counts against `nsp` and fills w's strides, dilations,
 * explicit pads and kernel `k` (nsp values), right-aligned. */
qf_status qfi_window_setup(const qf_graph *g, const qf_node *n, const qfi_window_attrs *a, int nsp,
                           const int64_t *in, const int64_t *k, qfi_window *w);
/* Forward window (Conv, pools): setup, then pads from auto_pad and the output
 * size; ceil_mode rounds the output up (pools) but never starts a window in
 * the end padding. */
qf_status qfi_window_resolve(const qf_graph *g, const qf_node *n, const qfi_window_attrs *a, int nsp,
                             const int64_t *in, const int64_t *k, bool ceil_mode, qfi_window *w);

/* ---- Conv / ConvTranspose ------------------------------------------------------ */
typedef struct qfi_conv_params {
    qfi_window_attrs win;
    int64_t group;
    /* ConvTranspose only */
    int n_output_padding, n_output_shape;
    int64_t output_padding[QFI_MAX_SPATIAL];
    int64_t output_shape[QFI_MAX_SPATIAL + 2];
} qfi_conv_params;

/* A convolution resolved against its input shapes. Conv: x (N,C,in...),
 * W (M,C/group,k...), y (N,M,out...). ConvTranspose: x (N,C,in...),
 * W (C,M/group,k...), y (N,M,out...). */
typedef struct qfi_conv_geom {
    int64_t N, C, M, group;
    bool has_bias;
    qfi_window w;
} qfi_conv_geom;

qf_status qfi_conv_geometry(const qf_graph *g, const qf_node *n, qfi_conv_geom *geo);
qf_status qfi_conv_transpose_geometry(const qf_graph *g, const qf_node *n, qfi_conv_geom *geo);

/* ---- pools ---------------------------------------------------------------------- */
typedef struct qfi_pool_params {
    qfi_window_attrs win;
    bool is_max;
    bool ceil_mode;
    bool count_include_pad;
} qfi_pool_params;

/* x (N,C,in...) -> y (N,C,out...); *nc = N*C. */
qf_status qfi_pool_geometry(const qf_graph *g, const qf_node *n, int64_t *nc, qfi_window *w);

/* ---- Gemm / MatMul ---------------------------------------------------------------- */
typedef struct qfi_gemm_params {
    float alpha, beta;
    bool trans_a, trans_b;
} qfi_gemm_params;

/* Y (M,N) = alpha * op(A) (M,K) * op(B) (K,N) + beta * C, C broadcast to (M,N). */
typedef struct qfi_gemm_geom {
    int64_t M, N, K;
    bool has_c;
} qfi_gemm_geom;
qf_status qfi_gemm_geometry(const qf_graph *g, const qf_node *n, qfi_gemm_geom *geo);

/* numpy matmul: A (batchA..., M, K) x B (batchB..., K, N); 1-D operands are
 * promoted (A to (1,K), B to (K,1)) and the promoted dim dropped from Y. */
typedef struct qfi_matmul_geom {
    int64_t M, N, K;
    int nbatch;                      /* broadcast batch dims of Y */
    int64_t batch[QF_MAX_DIMS];
    int64_t a_stride[QF_MAX_DIMS];   /* per batch dim, in matrices; 0 where broadcast */
    int64_t b_stride[QF_MAX_DIMS];
    int y_ndim;
    int64_t y_dims[QF_MAX_DIMS];
} qfi_matmul_geom;
qf_status qfi_matmul_geometry(const qf_graph *g, const qf_node *n, qfi_matmul_geom *geo);
/* Where batch matrix i of Y (row-major over the batch dims) reads A and B, in matrices. */
static inline void qfi_matmul_batch_offsets(const qfi_matmul_geom *geo, int64_t i, int64_t *ia, int64_t *ib)
{
    *ia = *ib = 0;
    for (int d = geo->nbatch - 1; d >= 0; d--) {
        const int64_t idx = i % geo->batch[d];
        i /= geo->batch[d];
        *ia += idx * geo->a_stride[d];
        *ib += idx * geo->b_stride[d];
    }
}
/* INT8 MatMul of two activations (quant's int8_attention: attention's Q x
 * K^T and softmax(A) x V): inputs A and B only, both i8 activations with a
 * scale (and zero point); Y = the exact int32 product of the stored integers
 * less their zero points, through the requantizing epilogue with the one
 * multiplier s_a * s_b / s_out and no bias, residual or activation. */
static inline bool qfi_matmul_is_product(const qf_node *n)
{
    return n->op == QF_OP_MATMUL && n->precision == QF_PREC_INT8 && n->n_in == 2;
}
/* Its longest reduction: |a - z_a| and |b - z_b| are at most 255, so 32768
 * terms keep the int32 sum exact. */
#define QFI_INT8_PRODUCT_MAX_K 32768
/* Whether an FP32 MatMul of two activations has a shape the INT8 product
 * takes: A and B of 2 or more dims, K within QFI_INT8_PRODUCT_MAX_K. */
bool qfi_matmul_product_fits(const qf_graph *g, const qf_node *n);

/* ---- BatchNormalization, Softmax, ReduceMean ------------------------------------------ */
typedef struct qfi_batchnorm_params {
    float epsilon;
    bool spatial;      /* opset < 9: false means per-activation parameters (C,D1,...) */
} qfi_batchnorm_params;

typedef struct qfi_softmax_params {
    int64_t axis;      /* as written; may be negative */
    bool coerce_2d;    /* opset < 13: the input is flattened to 2-D at axis */
} qfi_softmax_params;

/* Softmax over x viewed as (outer, len, inner), normalized along len. */
qf_status qfi_softmax_geometry(const qf_graph *g, const qf_node *n, int64_t *outer, int64_t *len, int64_t *inner);

/* LayerNormalization: each row of the trailing dims from `axis` on is
 * normalized to zero mean and unit variance, then scaled and shifted. */
typedef struct qfi_layer_norm_params {
    int64_t axis; /* as written (default -1) */
    float epsilon;
} qfi_layer_norm_params;

/* x viewed as (outer, len) rows of len elements; scale and bias (input 2,
 * may be absent) hold len elements or one. */
qf_status qfi_layer_norm_geometry(const qf_graph *g, const qf_node *n, int64_t *outer, int64_t *len);

/* ScatterND: `count` index tuples of k ints, each replacing a slice of `slice` elements. */
qf_status qfi_scatter_nd_geometry(const qf_graph *g, const qf_node *n, int64_t *count, int *k, int64_t *slice);

typedef struct qfi_reduce_params {
    bool keepdims;
    bool noop_with_empty_axes;
    int n_axes;                      /* from the attribute (opset < 18) */
    int64_t axes[QF_MAX_DIMS];
} qfi_reduce_params;

/* Which dims of the (ndim-dim) input a ReduceMean reduces. Axes come from the
 * optional second input (opset >= 18; `axes_data` is its data, or NULL to read
 * the constant) or else from the attribute. *noop is set when the node is an
 * identity (empty axes with noop_with_empty_axes). */
qf_status qfi_reduce_mean_axes(const qf_graph *g, const qf_node *n, const void *axes_data, bool reduced[QF_MAX_DIMS],
                               bool *noop);

/* ---- INT8 (lib/ops/qdq.c) ----------------------------------------------------------- */
/* The per-tensor scale and zero point of a QuantizeLinear/DequantizeLinear
 * node: its inputs when the model gives them (no zero point input: 0), else
 * the scale and zero point of its int8 value. Either output may be NULL. */
qf_status qfi_qdq_params(const qf_graph *g, const qf_node *n, float *scale, int32_t *zero_point);
qf_status qfi_qdq_scale(const qf_graph *g, const qf_node *n, float *scale);
/* The scales and zero points a QuantizeLinear/DequantizeLinear applies: per
 * tensor (channels = inner = 1, s = &s1, z = &z1), or with a 1-D constant
 * f32 scale of x's dims[axis] elements (per-axis, ONNX opset 13), per slice:
 * element i of x, viewed as (outer, channels, inner), uses s[(i / inner) %
 * channels] and z[...] (z NULL: every zero point 0). */
typedef struct qfi_qdq_geom {
    const float *s;
    float s1;
    const int8_t *z;
    int8_t z1;
    int64_t channels, inner;
    int axis;                 /* per axis: the axis */
} qfi_qdq_geom;
qf_status qfi_qdq_geometry(const qf_graph *g, const qf_node *n, qfi_qdq_geom *geo);
/* Checks the operands of an INT8 Conv, Gemm or MatMul: [0] x i8 with a scale,
 * [1] W i8 constant, [2] bias i32 constant [channels] (optional), [3] weight
 * scales f32 constant [channels], [4] residual i8 with a scale, shaped like the
 * output (optional); the output is i8 with a scale, f16 or f32. */
qf_status qfi_int8_operands(const qf_graph *g, const qf_node *n, int64_t channels);

/* ---- shared helpers ------------------------------------------------------------------ */
/* Messages of parsers, shape inference and kernels give only the detail:
 * whoever dispatches the node adds "model.onnx: node conv1 (Conv): " in front
 * (qfi_error_node, lib/internal.h). */

/* Fails with QF_ERR_UNSUPPORTED naming the node and tensor unless v is f32. */
qf_status qfi_require_f32(const qf_graph *g, const qf_node *n, const qf_value *v, const char *role);
/* Fails with QF_ERR_INVALID unless the node has n_in in [min_in, max_in] and
 * exactly one output. */
qf_status qfi_check_arity(const qf_graph *g, const qf_node *n, int min_in, int max_in);

#endif
