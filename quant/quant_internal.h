/* The quantization plan shared by quant/assign.c (which decides: fusions,
 * precision per node, storage dtype and scale per value) and quant/rewrite.c
 * (which edits the graph accordingly), plus the weight quantizers of
 * quant/weights.c. */
#ifndef QFORGE_QUANT_INTERNAL_H
#define QFORGE_QUANT_INTERNAL_H

#include "internal.h"
#include "qforge/quant.h"

typedef enum qfi_qrole {
    QFI_QROLE_FLOAT,    /* computes in FP16 or FP32 */
    QFI_QROLE_ANCHOR,   /* INT8 Conv/Gemm/MatMul: int32 accumulation, requantizing epilogue */
    QFI_QROLE_REQUANT,  /* INT8 op with its own output scale, through the FP32 kernel (GlobalAveragePool) */
    QFI_QROLE_PASS,     /* INT8 op that moves or selects values: output scale = input scale */
    QFI_QROLE_PRODUCT,  /* INT8 MatMul of two activations (int8_attention): int32 product, the
                         * epilogue's per-tensor multiplier s_a * s_b / s_out, nothing fused */
} qfi_qrole;

typedef struct qfi_qnode {
    qf_precision prec;
    qfi_qrole role;
    int absorbed_by;       /* -1, or the anchor whose epilogue this node became */
    int emit_at;           /* anchors: the node whose place the fused node takes */
    int out;               /* anchors: the value the fused chain writes */
    int bias_add;          /* Gemm/MatMul: the constant of a fused bias Add, or -1 */
    int residual;          /* the value a fused Add adds in the epilogue, or -1 */
    qf_act act;
    float act_lo, act_hi;
    bool float_out;        /* anchors: a fused smooth activation read by float ops, stored float */
    bool writes_se_input;  /* a Conv/Gemm/MatMul left float: its (activated) output is an SE block's input */
} qfi_qnode;

typedef struct qfi_qvalue {
    qf_dtype dtype;        /* before the rewrite */
    qf_dtype store;        /* what its writer stores: F32, F16 or I8 for float values */
    int writer;            /* the node that writes it after fusion; -1 for inputs, constants, dead values */
    int parent;            /* union-find of INT8 values that share one scale */
    float amax;            /* the table's threshold (INT8) or |x| bound (FP16 overflow); < 0: unknown */
    float scale;           /* I8 storage: the scale of its class; else the scale a QuantizeLinear of it uses */
    int32_t zero_point;    /* with the scale: 0 unless the options ask for zero points and it is one-sided */
    float lo;              /* its values lie at or above this (lib/value_ranges.c); -INFINITY: unknown */
    float data_min;        /* the table's minimum where a zero point may take it (qfi_quant_act_lo); NAN: not */
    bool read_i8;          /* some INT8 node reads it as int8 */
    bool no_range;         /* its threshold (its class's) is below QF_CALIB_AMAX_MIN: INT8 holds it as 0 */
} qfi_qvalue;

typedef struct qfi_qplan {
    qf_graph *g;
    const qf_calib_table *t;
    qf_quant_opts o;
    unsigned char *float_anchor; /* per node, or NULL: a Conv/Gemm/MatMul kept in float (the plan's; the summary's reasons read it) */
    qf_calib_method method;
    int n_nodes, n_values; /* of the graph before the rewrite */
    qfi_qnode *nodes;
    qfi_qvalue *values;
    int *use_start;        /* consumers of value v: use_node[use_start[v] .. use_start[v+1]) */
    int *use_node;
    qf_quant_summary sum;
} qfi_qplan;

/* quant/quantize.c: the plan qf_quantize makes of the prepared FP32 graph g
 * with table t and options o (the table's method by default), anchors whose
 * bias fits no weight scale already kept float (qfi_quant_check_biases, whose
 * warnings it logs); nothing reported, nothing in the graph touched. On
 * failure *p holds nothing to free. */
qf_status qfi_quant_plan(qf_graph *g, const qf_calib_table *t, const qf_quant_opts *o, qfi_qplan *p);
/* quant/equalize.c: fails naming g's source unless table t was made on a graph
 * equalized as g is (qf_graph.equalized; both "" when neither is). */
qf_status qfi_equalize_check_table(const qf_graph *g, const qf_calib_table *t);

/* quant/assign.c: fills p->nodes and p->values; touches nothing in the graph. */
qf_status qfi_quant_assign(qfi_qplan *p);
/* quant/assign.c, after qfi_quant_assign: marks in float_anchor (one byte per
 * node) each INT8 anchor whose bias the int32 accumulator cannot hold at any
 * weight scale (qfi_quant_anchor_scales), naming it in a warning; *marked
 * counts them. The plan must then be made again with float_anchor. Counts in
 * p->sum the channels (and their anchors) whose weight scale was raised. */
qf_status qfi_quant_check_biases(qfi_qplan *p, unsigned char *float_anchor, int *marked);
/* quant/assign.c: one warning per value of the plan whose INT8 range is
 * degenerate (no_range), naming it and its threshold. */
void qfi_quant_warn_ranges(const qfi_qplan *p);
/* quant/assign.c: an INT8 plan's float nodes, counted by op and reason (no
 * INT8 form, attention's activation x activation MatMuls, residual Adds of a
 * LayerNorm stream, ...), one info line per group. */
void qfi_quant_report_float(const qfi_qplan *p);
/* Logs (info) the nodes kept FP32 for their values' ranges, by cause. */
void qfi_quant_report_fp32(const qfi_qplan *p);
/* quant/rewrite.c: applies the plan to p->g. */
qf_status qfi_quant_rewrite(qfi_qplan *p);
void qfi_quant_plan_free(qfi_qplan *p);

/* quant/qdq_import.c: the prepared Q/DQ graph g becomes qforge's INT8 graph
 * with the model's scales; fills *sum (zeroed by the caller). */
qf_status qfi_qdq_import(qf_graph *g, qf_quant_summary *sum);

/* quant/rewrite.c's pieces that quant/qdq_import.c builds with too. */
/* Adds a constant of dtype dt shaped (n) or like value `like`, taking `data`
 * (freed on failure); returns its index or -1. */
int qfi_quant_add_const(qf_graph *g, const char *name, qf_dtype dt, int like, int64_t n, void *data);
/* Appends node n (taken out of an old node list: its attributes and params
 * move, the rest is cleared) with new inputs, outputs and precision; returns
 * its index, or -1 with *st set. */
int qfi_quant_move_node(qf_graph *g, qf_node *n, int n_in, const int *in, int n_out, const int *out, qf_precision prec,
                        qf_status *st);
/* Appends the INT8 node of anchor n (Conv, Gemm or MatMul; moved as above):
 * inputs x (i8), int8 weights w, int32 bias (or -1), per-channel f32 weight
 * scales and the residual (or -1), output `out`, the fused activation; Gemm's
 * alpha and beta become 1 (they live in the weights and bias). Infers it,
 * which checks every operand. */
qf_status qfi_quant_int8_node(qf_graph *g, qf_node *n, int x, int w, int bias, int scales, int res, int out, qf_act act,
                              float act_lo, float act_hi);

/* True for a value the plan treats as a float tensor (f32 before the rewrite). */
static inline bool qfi_qfloat(const qfi_qplan *p, int v) { return v >= 0 && p->values[v].dtype == QF_F32; }
static inline bool qfi_qconst(const qfi_qplan *p, int v)
{
    return v >= 0 && (p->g->values[v].flags & QF_VALUE_CONST);
}

/* ---- quant/layer_feed.c ----------------------------------------------------------
 * The INT8 layers' inputs as calibration images bring them, for the passes that
 * learn from images before quantizing (quant/bias.c, quant/adaround.c). The
 * plan qf_quantize would make (qfi_quant_plan, at INT8 with the caller's
 * options) names the INT8 Conv/Gemm/MatMul anchors, their fused epilogues and
 * the scale and zero point of each one's input; a batch of the FP32 graph run
 * on the CPU (qfi_run_observed) hands each anchor its exact input and that
 * input as INT8 holds it. */
typedef struct qfi_feed_layer {
    int node;              /* in the FP32 graph */
    int bias_add;          /* the fused bias Add's constant (qfi_anchor_f_make), or -1 */
    int residual;          /* the value a fused residual Add adds, or -1 */
    qf_act act;            /* the fused activation (Clip: to [act_lo, act_hi]) */
    float act_lo, act_hi;
    float scale;           /* its input's INT8 scale and zero point */
    int32_t zero_point;
    bool no_range;         /* INT8 holds its input as zeros */
} qfi_feed_layer;
/* Layer `layer`'s input of one batch: x exact, xq as INT8 holds it (n elements
 * each, the whole batch, of which the first `images` images are real). */
typedef qf_status (*qfi_feed_fn)(void *user, int layer, const float *x, const float *xq, size_t n, int images);
typedef struct qfi_layer_feed {
    const qf_graph *g;     /* prepared FP32; must outlive the feed */
    int threads;
    const char *what;      /* the pass, in messages */
    int n;
    qfi_feed_layer *layers;
    float *xq;             /* room for the largest input */
    qfi_feed_fn fn;        /* the current run's */
    void *user;
    int images;
    qf_status st;          /* the first failure inside the observer, and its message */
    char msg[1024];
} qfi_layer_feed;
qf_status qfi_layer_feed_init(qfi_layer_feed *f, const qf_graph *g, const qf_calib_table *t, const qf_quant_opts *o,
                              int threads, const char *what);
/* One batch (g->batch images, the first `images` real; 0: all): fn for every
 * layer as the graph writes its input; the first failure stops the batch. */
qf_status qfi_layer_feed_run(qfi_layer_feed *f, const float *input, int images, qfi_feed_fn fn, void *user);
void qfi_layer_feed_free(qfi_layer_feed *f);

/* ---- quant/weights.c ------------------------------------------------------------- */
/* An anchor (Conv/Gemm/MatMul) in float as quantization reads it: the weights
 * viewed as (outer, ch, inner) with Gemm's alpha folded in, and one bias per
 * output channel (Conv's B, Gemm's beta*C and the fused bias Add, summed). */
typedef struct qfi_anchor_f {
    int64_t outer, ch, inner;
    float *w;     /* outer * ch * inner */
    float *bias;  /* ch; zeros without a bias */
    const int8_t *learned;  /* learned rounding of w (quant/adaround.c), in w's layout, or NULL */
    const float *learned_s; /* ch: the scales it was learned at */
} qfi_anchor_f;
/* Fills *a for node n (bias_add: the fused bias Add's constant, or -1) with
 * what the options (may be NULL) learned from images: the bias corrected by
 * o->bias_fix, the rounding of o->adaround; a weight that holds NaN or Inf is
 * an error naming it. */
qf_status qfi_anchor_f_make(const qf_graph *g, const qf_node *n, int bias_add, const qf_quant_opts *o,
                            qfi_anchor_f *a);
/* Adds node `name`'s corrections to bias[0..ch) (quant/bias.c); nothing if it has none. */
void qfi_bias_fix_add(const qf_bias_fix *fix, const char *name, float *bias, int64_t ch);
/* Node `name`'s learned int8 weights (count of them, ch output channels) and
 * the scales they were learned at (quant/adaround.c); NULLs if it has none. */
void qfi_adaround_find(const qf_adaround *r, const char *name, int64_t count, int64_t ch, const int8_t **q,
                       const float **s);
/* Anchor a's int8 weights at scales s (qfi_anchor_f_make's view), the one
 * place the plan and the rewrite make them: rounded to nearest
 * (qfi_quant_weights_at), except the channels whose rounding was learned at
 * these very scales. */
void qfi_anchor_weights_at(const qfi_anchor_f *a, const float *s, int8_t *q);
void qfi_anchor_f_free(qfi_anchor_f *a);
/* Symmetric INT8 weights. w is viewed as (outer, channels, inner); channel c is
 * every w[o][c][i]. Per channel: s[c] = qf_calib_scale(absmax of channel c)
 * (a zero channel gets 1); per tensor: one scale from the absmax of all of w,
 * repeated in every s[c]. q = qfi_quantize_f32(w, s[c]). */
void qfi_quant_weights(const float *w, int64_t outer, int64_t channels, int64_t inner, bool per_channel, int8_t *q,
                       float *s);
/* The scales alone. */
void qfi_quant_weight_scales(const float *w, int64_t outer, int64_t channels, int64_t inner, bool per_channel,
                             float *s);
/* The quantization of qfi_quant_weights at given scales s[channels]. */
void qfi_quant_weights_at(const float *w, int64_t outer, int64_t channels, int64_t inner, const float *s, int8_t *q);
/* The weight scales s[a->ch] of anchor a's INT8 form at input scale s_in, the
 * one place that decides them: qfi_quant_weight_scales, then where a channel's
 * bias is more than QFI_INT8_BIAS_LIMIT accumulator steps (a dead channel:
 * weights near zero after BatchNorm folding beside a bias near 1) its scale is
 * raised to the smallest at which the bias fits, with room for the share an
 * input zero point z_in adds (qfi_quant_bias_zp); its weights then round to 0
 * or near it, what they are beside that bias. Per tensor, the one shared
 * scale is raised for every channel. Returns the number of channels raised,
 * or -1 with *bad = a channel whose bias fits at no scale (a NaN or infinite
 * bias, or one beyond what FP32 scales reach at s_in): the anchor must then
 * compute in float. */
int64_t qfi_quant_anchor_scales(const qfi_anchor_f *a, float s_in, int32_t z_in, bool per_channel, float *s,
                                int64_t *bad);
/* bias_q = round(bias / (s_in * s_w)) half to even, with the product in FP32
 * as the epilogue computes it; clamped to +-2^30 so accumulator + bias cannot
 * overflow int32 (lib/internal.h bounds the reduction length). */
int32_t qfi_quant_bias(float bias, float s_in, float s_w);
/* True when qfi_quant_bias needs no clamp (a bias of 0 always fits). */
bool qfi_quant_bias_fits(float bias, float s_in, float s_w);
/* The int32 bias of an output channel whose input has zero point z_in:
 * qfi_quant_bias less z_in times the channel's int8 weight sum wsum
 * (qfi_int8_weight_sum: the accumulator counts the input as stored). False
 * where it does not fit in +-2^30 (then *out is clamped there). */
bool qfi_quant_bias_zp(float bias, float s_in, float s_w, int32_t z_in, int64_t wsum, int32_t *out);
/* The int32 biases bq[a->ch] of anchor a at input scale s_in and zero point
 * z_in, weight scales s and int8 weights wq (qfi_quant_weights_at): the one
 * place they are made. Returns -1, or the first channel whose bias does not
 * fit (clamped there). */
int64_t qfi_quant_anchor_biases(const qfi_anchor_f *a, float s_in, const float *s, int32_t z_in, const int8_t *wq,
                                int32_t *bq);
/* The sum of output channel c's int8 weights, w viewed as (outer, channels,
 * inner). An INT8 node's accumulator counts its input as stored, so an input
 * zero point z is corrected for in its int32 bias, which holds
 * -z * qfi_int8_weight_sum (quant/qdq_import.c adds it, quant/export_onnx.c
 * takes it out again). */
int64_t qfi_int8_weight_sum(const int8_t *w, int64_t outer, int64_t channels, int64_t inner, int64_t c);

#endif
