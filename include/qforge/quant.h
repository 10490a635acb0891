/* Quantization: rewrites a prepared FP32 graph into a mixed INT8/FP16/FP32
 * graph in place — a precision per node, per-channel INT8 weights and INT32
 * biases, per-tensor activation scales from a calibration table, fused
 * epilogues (bias, residual add, ReLU/Clip) and explicit QuantizeLinear,
 * DequantizeLinear and Cast nodes wherever the precision changes. The result
 * runs on any engine (qf_engine_create). Numerics: ARCHITECTURE.md. */
#ifndef QFORGE_QUANT_H
#define QFORGE_QUANT_H

#include <stdbool.h>
#include "qforge/status.h"
#include "qforge/graph.h"
#include "qforge/calib.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "fp32", "fp16", "int8". */
const char *qf_precision_name(qf_precision p);
/* Parses a --precision argument (fp32, fp16, int8). */
qf_status qf_precision_parse(const char *s, qf_precision *out);

typedef struct qf_quant_opts {
    /* FP32: nothing changes. FP16: every float op in FP16 (half storage, FP32
     * arithmetic). INT8: Conv, Gemm and MatMul with constant weights (and
     * MatMuls of two activations with int8_attention), and the
     * ops between them that can stay INT8 (max-pool, concat, reshape, ...), in
     * INT8; FP16 elsewhere. FP32 is kept wherever FP16 would overflow (a
     * calibrated |x| above 65504). */
    qf_precision precision;
    /* The threshold of the table to use; QF_CALIB_METHOD_COUNT: the table's
     * default (qf_calib_table_default_method). */
    qf_calib_method method;
    /* One weight scale per tensor instead of per output channel. */
    bool per_tensor_weights;
    /* INT8: Conv, Gemm and MatMul nodes, by name, that stay out of INT8 and
     * compute in FP16 (FP32 where FP16 would overflow), as the layers that cost
     * the most accuracy under `qforge quant --precision best`. */
    const char *const *float_nodes;
    int n_float_nodes;
    /* INT8: per-channel bias corrections measured on images (qf_bias_fix), or NULL. */
    const struct qf_bias_fix *bias_fix;
    /* INT8: weight rounding learned on images (qf_adaround), or NULL: round to nearest. */
    const struct qf_adaround *adaround;
    /* INT8: also the Conv, Gemm and MatMul nodes that read a globally pooled
     * tensor (one value per channel per image: squeeze-and-excitation convs,
     * the classifier after the global pool), which otherwise stay FP16. */
    bool int8_pooled;
    /* INT8: the convs around each squeeze-and-excitation block in FP16: the
     * Conv, Gemm or MatMul that reads the block's output (a tensor times a
     * globally pooled per-channel gate, each image scaling each channel its
     * own way) and the one whose (activated) output the block's pool and gate
     * read. More accurate on SE models (bench/accuracy.md), but FP16 layers
     * round their sums their own way on each engine, where the INT8 ones give
     * the CPU engine's levels on the GPU too. False (the default): INT8. */
    bool fp16_se;
    /* INT8: an activation the graph bounds from below by more than -threshold
     * (the output of Relu, ReLU6, HardSwish, SiLU, Sigmoid, and what pools,
     * concatenates or reshapes them) gets a zero point, so that its range
     * [bound, threshold] spans all 256 levels instead of half of symmetric
     * INT8's: scale (threshold - bound) / 255. The default (qf_quant_opts_init).
     * False: every activation is symmetric (zero point 0), as TensorRT's INT8 is. */
    bool asymmetric;
    /* With asymmetric: not for an activation that a dense convolution (one
     * group, a kernel over one element) reads with padding, whose taps there
     * would read the zero point: cuDNN pads with zeros only, so such a conv
     * leaves cuDNN's tactics on the CUDA engine (ResNet-50: 23 % slower with
     * every zero point). Depthwise and grouped convs, 1x1 convs and the rest
     * keep their zero points (MobileNetV2 and EfficientNet-Lite1 get all
     * of asymmetric's gain, ResNet-20 none; bench/zoo/NOTES.md, session 21). */
    bool asymmetric_unpadded;
    /* With asymmetric: also an activation the graph leaves two-sided (a
     * projection conv's output, a residual Add, a Concat of those) whose
     * calibrated minimum (the table's, qforge-calib(5)) lies above
     * -threshold: [min, threshold] on 256 levels, scale (threshold - min) /
     * 255. Tables before version 3 record no minimum: such tensors stay
     * symmetric. False (the default): auto clips most such tensors inside
     * their minimum, so it reaches few beyond the graph inputs, and it did
     * not help overall (bench/accuracy.md: ResNet-20 +0.23 dB, MobileNetV2
     * -0.40, EfficientNet-Lite1 +0.03). */
    bool asymmetric_two_sided;
    /* INT8: also the MatMul nodes whose two inputs are both activations
     * (attention's Q x K^T and softmax(A) x V): each input quantized per
     * tensor at its calibrated scale, an exact int32 product, the requantizing
     * epilogue with the one multiplier s_a * s_b / s_out. False (the default):
     * they stay FP16. */
    bool int8_attention;
} qf_quant_opts;

/* INT8, the table's default method, per-channel weights. */
void qf_quant_opts_init(qf_quant_opts *o);

/* ---- cross-layer equalization --------------------------------------------------------
 * Moves weight range between consecutive convolutions of a prepared FP32 graph
 * (Nagel et al. 2019, sec. 4.1) so that per-channel ranges even out before
 * calibration: where Conv A alone feeds Conv B, directly, through a Relu or
 * through a Clip(0, hi) (ReLU6), output channel c of A (weights and bias) is
 * divided by 2^k and input channel c of B multiplied by it, k chosen so that
 * the two channels' largest |weight| lie within a factor 2; sweeps repeat
 * until no pair moves (depthwise layers join two pairs). Grouped and
 * depthwise convolutions included.
 * The graph computes the same function, bit for bit: the scales are powers of
 * two and a channel moves only where each weight it touches stays a normal
 * float. A Clip with an upper bound does not commute with scaling: through
 * it, a channel moves only where a bound from the weights and the Clip's
 * input range proves that it never reaches the upper bound, before and after
 * the move (in MobileNetV2, a share of the depthwise layers' channels; the
 * expand layers' inputs are unbounded, so their channels stay).
 * g->equalized then holds a digest of the moves, which calibration tables made
 * on the graph record: qf_quantize and qf_bias_fix_create refuse a table whose
 * record differs from the graph's. A graph equalized already, or quantized,
 * is refused. */
typedef struct qf_equalize_info {
    int pairs;                 /* Conv pairs found */
    int pairs_clipped;         /* of them, joined by a Clip with an upper bound (ReLU6) */
    int pairs_moved;           /* pairs with at least one channel moved */
    int64_t channels;          /* channels of all pairs */
    int64_t channels_moved;    /* channels scaled by 2^k, k != 0 */
    int sweeps;                /* sweeps that moved something */
    /* the mean over the pairs' channels of |log2(r1 / r2)|, r1 the largest |w|
     * of A's output channel and r2 of B's input channel, before and after */
    double imbalance_before, imbalance_after;
} qf_equalize_info;

/* info may be NULL. */
qf_status qf_graph_equalize(qf_graph *g, qf_equalize_info *info);

/* ---- bias correction ------------------------------------------------------------------
 * The mean error INT8 brings to each output channel of a layer (Conv, Gemm or
 * MatMul with constant weights), measured on images and added to the layer's
 * bias before it is quantized, so that the INT8 output is right on average.
 * Each layer runs alone on its FP32 input from the FP32 graph: the error is
 * y(x, W) - y(q(x), q(W)), x quantized at the table's threshold for it (the
 * method of the options) and W at the quantizer's weight scales, averaged over
 * the images and the positions of each channel. The graph (prepared, FP32)
 * and the table must outlive the runs; the corrections are kept by node name,
 * for any later load of the same model. */
typedef struct qf_bias_fix qf_bias_fix;
/* o: the method and weight scales qf_quantize will use (its float_nodes are not read). */
qf_status qf_bias_fix_create(const qf_graph *g, const qf_calib_table *t, const qf_quant_opts *o, int threads,
                             qf_bias_fix **out);
/* One batch (as qf_auto_chooser_run). */
qf_status qf_bias_fix_run(qf_bias_fix *b, const float *input, int images);
void qf_bias_fix_free(qf_bias_fix *b);
/* The layers it measures. */
int qf_bias_fix_layers(const qf_bias_fix *b);

/* ---- learned weight rounding (AdaRound) ------------------------------------------------
 * Each INT8 weight rounds down or up, whichever its layer's output on images
 * prefers, instead of to the nearest level (Nagel et al. 2020, "Up or Down?
 * Adaptive Rounding for Post-Training Quantization"): a weight w of output
 * channel c becomes floor(w / s[c]) or that plus one, at the quantizer's own
 * per-channel scale s[c], so only the rounding changes. For each INT8 layer
 * of the plan qf_quantize would make with the same table and options,
 * positions of its input are sampled from the FP32 graph run on images and
 * quantized as the layer's INT8 input holds them; the rounding of each output
 * channel is learned (a soft rounding variable per weight, a regularizer that
 * drives it to 0 or 1, Adam) so that the channel's output after the fused
 * activation, on those quantized inputs, comes closest to the FP32 layer's on
 * the exact ones. A channel keeps round-to-nearest unless the learned rounding
 * has the smaller error on held-out positions (a fifth of them, never trained
 * on). Runs on the CPU (OpenBLAS sgemm over blocks of output channels, spread
 * over the threads). Kept by node name with the scales it was learned at, for
 * any later load of the same model; a channel whose scale the quantizer then
 * raises (its bias would not fit the accumulator) rounds to nearest. */
typedef struct qf_adaround qf_adaround;
/* Per layer: training steps of QF_ADAROUND_BATCH positions each... */
#define QF_ADAROUND_ITERATIONS 1000
#define QF_ADAROUND_BATCH 256
/* ...out of at most this many sampled positions (fewer where a position's
 * input is long: a layer's sample holds at most 2^21 floats). */
#define QF_ADAROUND_POSITIONS 2048
/* Images the command samples the positions from. */
#define QF_ADAROUND_IMAGES 64

typedef struct qf_adaround_opts {
    int iterations;   /* per layer; 0: QF_ADAROUND_ITERATIONS */
    int images;       /* how many images the runs will bring, over which the positions spread;
                         0: QF_ADAROUND_IMAGES */
    int threads;      /* 0: all cores */
} qf_adaround_opts;

/* What learning one layer did (qf_adaround_learn's progress). Errors are sums
 * of squared output differences from FP32 over the held-out positions. */
typedef struct qf_adaround_layer {
    const char *node;
    int64_t weights, positions;    /* positions sampled (a fifth held out) */
    int channels, learned;         /* output channels; those that keep the learned rounding */
    double nearest_error, error;   /* round-to-nearest's; the result's (learned where it is smaller) */
} qf_adaround_layer;
typedef void (*qf_adaround_progress_fn)(void *user, int index, int total, const qf_adaround_layer *layer);

/* g: prepared FP32, outliving the runs and the learning; t and o: as
 * qf_quantize will get them (o->adaround and o->bias_fix are not read). */
qf_status qf_adaround_create(const qf_graph *g, const qf_calib_table *t, const qf_quant_opts *o,
                             const qf_adaround_opts *ao, qf_adaround **out);
/* One batch (as qf_bias_fix_run): samples every layer's input. */
qf_status qf_adaround_run(qf_adaround *r, const float *input, int images);
/* Learns every layer's rounding from the samples, layer after layer, calling
 * `progress` (may be NULL) after each; frees the samples. */
qf_status qf_adaround_learn(qf_adaround *r, qf_adaround_progress_fn progress, void *user);
/* The layers it learns for. */
int qf_adaround_layers(const qf_adaround *r);
void qf_adaround_free(qf_adaround *r);

/* What a qf_quantize call did. */
typedef struct qf_quant_summary {
    int nodes[QF_PRECISION_COUNT]; /* compute nodes (conversions excluded) per precision */
    int fused;                     /* nodes folded into an INT8 epilogue (bias/residual Add, Relu, Clip) */
    int conversions;               /* QuantizeLinear, DequantizeLinear and Cast nodes inserted (a Q/DQ
                                    * model: the ones it keeps) */
    bool from_model;               /* the scales are the model's own (a Q/DQ or QOperator ONNX model) */
    int float_between_qdq;         /* a Q/DQ model's nodes that compute in FP32 between its
                                    * DequantizeLinear and QuantizeLinear nodes (no INT8 form) */
    int rescaled_channels;         /* INT8 output channels whose weight scale was raised so that their
                                    * bias fits the int32 accumulator (weights near zero beside a bias) */
    int rescaled_layers;           /* the Conv/Gemm/MatMul nodes they belong to */
    int int8_activations;          /* activations stored as int8 */
    int zero_point_activations;    /* those of them with a zero point (qf_quant_opts.asymmetric) */
    int zero_point_two_sided;      /* of those, the ones the graph leaves two-sided, whose zero point
                                      comes from their calibrated minimum (asymmetric_two_sided) */
} qf_quant_summary;

/* Whether a prepared graph carries its own quantization: QuantizeLinear or
 * DequantizeLinear nodes with scale inputs, as a Q/DQ ONNX model has (and a
 * QOperator one after import). qf_quantize then needs no table. */
bool qf_graph_has_qdq(const qf_graph *g);
/* Whether node i of a quantized graph computes in float on what a
 * DequantizeLinear made: in a model imported with its own quantization, an
 * op the model quantized around that has no INT8 form (its rounding is kept
 * by the QuantizeLinear/DequantizeLinear nodes around it). */
bool qf_node_between_qdq(const qf_graph *g, int i);

/* Rewrites the prepared FP32 graph `g` (qf_graph_prepare) in place. `t` is
 * required for INT8 (a tensor the rewrite needs but the table lacks is an error
 * naming it); for FP16 it is optional and only used to find values that would
 * overflow half. Graph inputs and outputs keep their names and stay f32.
 * `summary` may be NULL. Bad options, a missing table entry or an unsupported
 * construct fail before the graph is touched.
 * A graph with its own quantization (qf_graph_has_qdq) takes no table and only
 * INT8: its Q/DQ patterns become qforge's INT8 nodes with the model's scales
 * and zero points (Conv/Gemm/MatMul with fused epilogues, pass-through ops,
 * global pools); what has no INT8 form keeps its QuantizeLinear and
 * DequantizeLinear nodes around an FP32 op. */
qf_status qf_quantize(qf_graph *g, const qf_calib_table *t, const qf_quant_opts *o, qf_quant_summary *summary);

/* Writes a quantized graph (qf_quantize's result; a plain prepared graph too)
 * to `path` as a standard ONNX model in Q/DQ form, as ONNX Runtime and
 * TensorRT read it: opset 13 (or the graph's own opset when newer; older
 * graphs' ops are upgraded). Each INT8 Conv/Gemm/MatMul becomes the FP32 op
 * reading DequantizeLinear(QuantizeLinear(x)) at the activation's scale and
 * an int8 weight initializer through a per-channel DequantizeLinear (axis 0
 * for Conv and for Gemm with transB, 1 for Gemm without it and MatMul), its
 * int32 bias dequantized to a float bias (bias_q * s_in * s_w[c]), its fused
 * epilogue written out as Add (residual), Relu or Clip, and an int8 output
 * QuantizeLinear'd at its scale. INT8 pass-through ops (max-pool, reshape,
 * concat, ...) sit between DequantizeLinear and QuantizeLinear. Zero points
 * are int8 zeros. Q/DQ has no notion of FP16: nodes qforge runs in FP16 are
 * written as FP32 ops (a deployment engine picks its own float precision).
 * Graph inputs and outputs keep their names and element types (f16 ones
 * become f32) with dim 0 symbolic ("batch"); a Reshape whose target
 * hard-codes the graph's batch gets 0 there. The file is written all or
 * nothing. */
qf_status qf_export_onnx(const qf_graph *quantized, const char *path);

/* ---- per-layer comparison (qforge eval --per-layer) --------------------------------
 * How far each tensor of a quantized graph lies from the same tensor of its FP32
 * original, as the SQNR 10 log10(sum r^2 / sum (q - r)^2) over the images run
 * (the error a tensor carries includes what its inputs brought). Both graphs are
 * prepared at the same batch; the quantized engine observes with
 * qf_layer_cmp_observe_quantized, the reference's with ..._reference, and each
 * batch runs the quantized engine first. Compared: every value a node of the
 * quantized graph writes whose name the reference holds, f32, with as many
 * elements (a graph output's f32 copy is its producer's row). Memory: one batch of each compared tensor as the quantized graph
 * stores it. */
#define QF_SQNR_EXACT_DB 300.0 /* the SQNR reported for identical tensors */

typedef struct qf_layer_cmp qf_layer_cmp;

typedef struct qf_layer_sqnr {
    const char *tensor;    /* value name; tensor and node point into the quantized graph */
    const char *node;      /* the node that writes it */
    qf_op op;
    qf_precision precision;
    qf_dtype dtype;        /* how the quantized graph stores it */
    int order;             /* position among the compared tensors, in graph order */
    int64_t elements;      /* elements compared */
    double signal, noise;  /* sum r^2, sum (q - r)^2 */
    double sqnr_db;        /* within +-QF_SQNR_EXACT_DB */
} qf_layer_sqnr;

qf_status qf_layer_cmp_create(const qf_graph *quantized, const qf_graph *reference, qf_layer_cmp **out);
void qf_layer_cmp_free(qf_layer_cmp *c);
/* Only the first `images` images of each batch count from now on; 0: all. */
void qf_layer_cmp_set_batch_valid(qf_layer_cmp *c, int images);
/* qf_observer_fn for the engine of the quantized graph (user = the comparison)... */
void qf_layer_cmp_observe_quantized(void *user, const qf_graph *g, int value, const void *data);
/* ...and for the reference engine, run after it on the same inputs. */
void qf_layer_cmp_observe_reference(void *user, const qf_graph *g, int value, const void *data);
/* The tensors compared so far, worst SQNR first (*n of them; free(*out)). */
qf_status qf_layer_cmp_results(const qf_layer_cmp *c, qf_layer_sqnr **out, int *n);
/* Writes the rows as a self-contained HTML page (a sortable table with a bar
 * per tensor) to path, atomically: on failure nothing is left there. */
qf_status qf_layer_report_write(const char *path, const char *model, const char *reference, int64_t images,
                                const qf_layer_sqnr *rows, int n);

#ifdef __cplusplus
}
#endif
#endif
