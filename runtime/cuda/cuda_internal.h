/* Shared state of the CUDA engine (runtime/cuda/): the engine object, the
 * per-node layer interface every op family implements, device value views
 * (NHWC or logical layout), scratch slots, error macros, and the element
 * load/store helpers that give every kernel the FP16/INT8 rules of the f32
 * view (lib/internal.h: f16 widened exactly, int8 as q*scale, results rounded
 * back to half or quantized half-to-even and saturated). */
#ifndef QFORGE_CUDA_INTERNAL_H
#define QFORGE_CUDA_INTERNAL_H

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include "cublaslt_dl.h"
#include "cudnn_dl.h"
#include <stdint.h>
#include <type_traits> /* cu_with_word's callers: std::remove_pointer_t */
#include "quant_math.h" /* the INT8 numerics, __host__ __device__ */

extern "C" {
#include "../engine_impl.h"
#include "../tactic_cache.h"
#include "ops/nn.h"
#include "ops/tensor_ops.h"
#include "attention.h"
}

/* ---- errors -------------------------------------------------------------------
 * Every CUDA and cuBLASLt call goes through one of these; a failure becomes a
 * qf_status with a message naming the call (out of memory: QF_ERR_NOMEM). */
qf_status cu_fail(cudaError_t e, const char *expr, const char *file, int line);
qf_status lt_fail(cublasStatus_t s, const char *expr, const char *file, int line);
#define CU_CHECK(expr)                                                                                                \
    do {                                                                                                              \
        cudaError_t e_ = (expr);                                                                                      \
        if (e_ != cudaSuccess) return cu_fail(e_, #expr, __FILE__, __LINE__);                                         \
    } while (0)
#define LT_CHECK(expr)                                                                                                \
    do {                                                                                                              \
        cublasStatus_t s_ = (expr);                                                                                   \
        if (s_ != CUBLAS_STATUS_SUCCESS) return lt_fail(s_, #expr, __FILE__, __LINE__);                              \
    } while (0)
/* After a <<<>>> launch: launch-configuration errors surface here. */
#define CU_LAUNCHED() CU_CHECK(cudaGetLastError())

/* ---- layouts ------------------------------------------------------------------
 * 4-D activations live NHWC on the device where the ops around them allow it
 * (Conv and pools need it; cuBLASLt reads NHWC im2col patches); everything
 * else is logical (row-major in ONNX dim order). A 4-D value with H*W == 1 or
 * C == 1 has the same bytes either way. */
typedef enum cu_layout { CU_LOGICAL = 0, CU_NHWC } cu_layout;

typedef struct cu_value {
    void *ptr;          /* device address; NULL for an unused value */
    cu_layout layout;
} cu_value;

/* Scratch slots: device buffers shared by all layers (layers run one after
 * another on one stream), each sized for the largest request. */
enum {
    CU_SCR_IN0,         /* an input converted to the layout a kernel needs (+k for input k) */
    CU_SCR_IN1,
    CU_SCR_IN2,
    CU_SCR_COL,         /* im2col patches */
    CU_SCR_ACC,         /* int32 accumulators of INT8 GEMMs */
    CU_SCR_HOST,        /* an NHWC input of a host node, in logical layout for its download */
    CU_SCR_PAD,         /* a conv's int8 input padded with its zero point, for cuDNN (cu_pad_nhwc_i8) */
    CU_SCR_COUNT
};

typedef struct cu_engine cu_engine;
typedef struct cu_layer cu_layer;

/* What an op family implements. check() (optional) says from the graph alone
 * whether the family runs a node (dtypes, dims, constant operands): the
 * engine asks it for every node before building anything, and
 * qf_engine_supports() asks it without a device. prepare() builds the node's
 * state (weights reordered and uploaded, descriptors) and declares scratch;
 * tune() (optional) runs once the buffers exist (algorithm timing); launch()
 * enqueues the node's work on `s` and must be capturable in a CUDA graph. */
typedef enum cu_layout_rule {
    CU_RULE_LOGICAL,    /* outputs logical */
    CU_RULE_NHWC,       /* 4-D output NHWC (Conv, pools, BatchNormalization) */
    CU_RULE_FOLLOW,     /* elementwise: output takes the layout of a same-shape input */
    CU_RULE_ANY_NHWC,   /* Concat: NHWC when any input is */
    CU_RULE_LIKE_INPUT, /* Pad, Resize: a 4-D output takes the layout of its 4-D input 0 */
} cu_layout_rule;

typedef struct cu_op {
    qf_status (*prepare)(cu_engine *c, cu_layer *L);
    qf_status (*tune)(cu_engine *c, cu_layer *L);
    qf_status (*launch)(cu_engine *c, cu_layer *L, cudaStream_t s);
    cu_layout_rule rule;
    unsigned precisions;      /* QFI_PREC_BIT of the node precisions it has kernels for */
    qf_status (*check)(const qf_graph *g, const qf_node *n);
} cu_op;
#define CU_ALL_PRECISIONS \
    (QFI_PREC_BIT(QF_PREC_FP32) | QFI_PREC_BIT(QF_PREC_FP16) | QFI_PREC_BIT(QF_PREC_INT8))

struct cu_layer {
    const qf_node *n;
    const cu_op *op;    /* its op family's kernels, or cu_op_host */
    int index;          /* node index */
    void *state;        /* op-specific; released with free_state (or free) */
    void (*free_state)(void *state);
    bool skip;          /* its work was fused into another layer */
    int out_override;   /* >= 0: write this value instead of n->out[0] (a fused consumer's output) */
    int residual;       /* >= 0: a fused Add's other operand, added in the epilogue (float Conv) */
    bool relu;          /* a fused Relu (float Conv/Gemm) */
    bool clip;          /* a fused Clip to [clip_lo, clip_hi] (float grouped Conv) */
    float clip_lo, clip_hi;
    qf_act act;         /* a fused SiLU, Sigmoid or HardSwish after all of those (float Conv), or QF_ACT_NONE */
    bool act_gated;     /* act came as Mul(y, Sigmoid(y)) or Mul(y, HardSigmoid(y)): two nodes, two roundings */
    int quant_in;       /* >= 0: a fused input QuantizeLinear; the layer reads this float value and quantizes it */
    int late_in[3];     /* >= 0: values the layer reads whose graph readers it took in (an attention chain's Q, K and V or their
                         * views' roots, a LayerNorm's int8 input) */
    float quant_scale;  /* that QuantizeLinear's scale and zero point */
    int32_t quant_zp;
};

/* The kernel families of include/qforge/ops.def: cu_op_<family>, defined in
 * the family's file (conv.cu, gemm.cu, elementwise.cu, pad.cu, ...); the
 * families without a CUDA kernel are defined empty in host.cu. */
#define QF_OP(id, onnx_name, desc, family) extern const cu_op cu_op_##family;
#include "qforge/ops.def"
#undef QF_OP
/* A node without a device kernel: its inputs downloaded, the CPU engine's
 * kernel run on the host from the stream (cudaLaunchHostFunc, so it is
 * captured in the CUDA graph), its outputs uploaded (host.cu). */
extern const cu_op cu_op_host;

struct cu_engine {
    qf_engine *e;
    const qf_graph *g;
    qf_graph view;            /* the f32 view of g (qfi_f32_view_init), for the geometry helpers */
    qf_value *view_values;
    int device;
    cudaDeviceProp prop;
    cudaStream_t stream;      /* compute */
    cudaStream_t copy;        /* uploads */
    cudaEvent_t uploaded;
    cublasLtHandle_t lt;
    void *dnn;                /* cudnnHandle_t, made when the first cuDNN tactic is (conv_cudnn.cu); NULL: none yet */
    bool dnn_failed;          /* cudnnCreate failed once: no cuDNN tactics in this engine */
    void *lt_ws;              /* cuBLASLt workspace */
    size_t lt_ws_bytes;
    char *arena;              /* activations, planned by liveness */
    size_t arena_bytes;
    cu_value *vals;
    void *scratch[CU_SCR_COUNT];
    size_t scratch_bytes[CU_SCR_COUNT];
    cu_layer *layers;
    int n_layers;
    /* device allocations owned by the engine (weights, constants, staging) */
    void **allocs;
    int n_allocs, cap_allocs;
    /* graph inputs and outputs: pinned host buffers; device staging where a
     * layout conversion sits between the host bytes and the value */
    void **h_in, **h_out;
    void **d_in, **d_out;
    bool *in_written;         /* per input: filled on the device by qf_engine_write_input since the last run */
    cudaGraphExec_t graph;
    bool fuse;                /* peephole fusions allowed (no observer) */
    qfi_tactic_cache *tactics; /* tuning results of earlier builds on this device (NULL: off) */
    /* observer staging */
    void *obs_dev, *obs_host;
    size_t obs_bytes;
    /* device histograms for a hist_observer (histogram.cu) */
    struct cu_hist *hist_dev, *hist_host;
    struct qf_histogram *hist_out;
    /* host nodes (host.cu) */
    bool *on_host;            /* per node: runs on the host */
    char **refused;           /* per node: why its prepare refused the device (the build starts over), or NULL */
    struct qfi_cpu_lowp *host_lowp; /* FP16/INT8 host nodes through the CPU's FP32 kernels; NULL if none */
};

/* ---- engine services (cuda_engine.cu) ------------------------------------------ */
/* The kernel family of op (the op table, from ops.def; prepare NULL where it has none). */
const cu_op *cu_op_of(qf_op op);
/* Whether a device kernel runs node n of g (QF_OK, or QF_ERR_UNSUPPORTED
 * with a message saying why); reads only the graph. */
qf_status cu_check_kernel(const qf_graph *g, const qf_node *n);
/* Device memory owned by the engine, freed with it. */
qf_status cu_alloc(cu_engine *c, size_t bytes, void **out);
/* Uploads host bytes into a new engine-owned buffer. */
qf_status cu_upload(cu_engine *c, const void *host, size_t bytes, void **out);
/* Device address of value v: arena slot, or the constant's uploaded copy. */
qf_status cu_value_ptr(cu_engine *c, int v, void **out);
/* The graph to hand lib/ops geometry helpers for node n (the f32 view for
 * the nodes qfi_node_f32_view names). */
const qf_graph *cu_geo_graph(const cu_engine *c, const qf_node *n);
/* Reserves `bytes` of scratch slot `slot`. */
void cu_need_scratch(cu_engine *c, int slot, size_t bytes);
/* True when v is stored NHWC and that differs from its logical bytes. */
bool cu_is_nhwc(const cu_engine *c, int v);
/* Element strides of v's logical dims in its device layout. */
void cu_strides(const cu_engine *c, int v, int64_t *strides);
/* Copies value v into dst (device) in logical layout, on s. */
qf_status cu_copy_logical(cu_engine *c, int v, void *dst, cudaStream_t s);
/* Input k of L's node in the wanted layout (a 4-D value): the value itself,
 * or a copy converted into scratch slot CU_SCR_IN0 + k (declared by
 * cu_need_input_as at prepare). */
void cu_need_input_as(cu_engine *c, cu_layer *L, int k, cu_layout want);
qf_status cu_input_as(cu_engine *c, cu_layer *L, int k, cu_layout want, cudaStream_t s, const void **out);
/* The value L writes as output k (a fused consumer's output for k = 0). */
int cu_out_value(const cu_layer *L, int k);
/* Launch shape for n threads. */
static inline unsigned cu_blocks(int64_t n, int threads)
{
    int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : b > 0x7fffffff ? 0x7fffffff : b);
}
/* SMs of the current device (1 if it cannot be asked), looked up once per
 * device: for launches sized by the machine outside any engine's state. */
static inline int cu_sm_count(void)
{
    static int counts[64];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 1;
    if (!counts[dev]) {
        int n = 0;
        counts[dev] = cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess && n > 0 ? n : 1;
    }
    return counts[dev];
}
/* ---- moving bytes in the widest words --------------------------------------------------------
 * Copy-like kernels (copies, Concat rows, nearest Resize rows) move whole
 * words. cu_word_bytes: the widest word (16, 8, 4, 2 or 1 bytes) that
 * divides `a`, the OR of every address, length and stride in bytes the
 * words must respect (a power of two divides each of them exactly when it
 * divides their OR). cu_with_word calls f with a null pointer to the
 * unsigned word of that many bytes, so that one generic lambda picks its
 * kernel instance: f((uint4 *)0) for 16 bytes. */
static inline size_t cu_word_bytes(uint64_t a)
{
    size_t v = 16;
    while (v > 1 && a % v) v /= 2;
    return v;
}
template <class F> static void cu_with_word(size_t bytes, F &&f)
{
    switch (bytes) {
    case 16: f((uint4 *)nullptr); break;
    case 8: f((uint2 *)nullptr); break;
    case 4: f((uint32_t *)nullptr); break;
    case 2: f((uint16_t *)nullptr); break;
    default: f((uint8_t *)nullptr); break;
    }
}
/* A value of a node's dtype the device kernels handle as data: f32, f16, or
 * i8 with a scale (quantized; only at FP16/INT8 precision, as the f32 view). */
bool cu_float_like(const qf_graph *g, const qf_node *n, const qf_value *v);

/* ---- host nodes (host.cu) ---------------------------------------------------------------- */
/* Which nodes run on the host before any device work: those of an op
 * without a device kernel and those QFORGE_CUDA_HOST_OPS names (a test
 * hook); why[i] gets the reason of each (strdup). */
qf_status cu_host_plan(const qf_graph *g, bool *on_host, char **why);
/* The CPU-side state host nodes share (after on_host is final). */
qf_status cu_host_setup(cu_engine *c);
void cu_host_teardown(cu_engine *c);
/* After the stream is synchronized: the first failure of a host node's
 * kernel since the last call (cleared), else QF_OK. */
qf_status cu_host_status(cu_engine *c);
static inline bool cu_on_host(const cu_layer *L) { return L->op == &cu_op_host; }

/* ---- fusions planned at engine build (fusion.cu) ---------------------------------------- */
/* Folds FP32/FP16 residual Adds, Relus and Clips into the layers that write
 * their inputs (lib/fusion.c plans the chains); plan_values (a copy of the
 * graph's values) gets the producers the memory plan must see. */
qf_status cu_fuse_layers(cu_engine *c, qf_value *plan_values);
/* Folds a graph input's QuantizeLinear into the RGB INT8 Conv that alone reads it. */
void cu_fuse_input_quantize(cu_engine *c, qf_value *plan_values);
/* Folds the Relu or Clip that alone reads a float BatchNormalization's
 * output into it (DenseNet's pre-activation BN-ReLU, int8 in, int8 out). */
void cu_fuse_batchnorm_act(cu_engine *c, qf_value *plan_values);

/* FP16 attention chains (lib/attention.h finds them, with the engine's
 * rules), each run by one layer at its first MatMul (attention.cu): the
 * scores never reach memory. */
/* Fuses every such chain (after cu_fuse_layers): the first MatMul's layer
 * runs cu_op_attention with the chain as its state. */
qf_status cu_fuse_attention(cu_engine *c, qf_value *plan_values);
/* Whether the attention kernel reads the chain's views (qfi_attention_rules.views_ok) */
bool cu_attention_views_ok(void *user, const qfi_attention_chain *ch);
/* LayerNorms take in the DequantizeLinear before and the QuantizeLinear after them (fusion.cu) */
qf_status cu_fuse_layer_norm_qdq(cu_engine *c, qf_value *plan_values);
extern const cu_op cu_op_attention;

/* A squeeze-excitation gate, GlobalAveragePool -> Conv -> Conv [-> Sigmoid
 * or HardSigmoid], the convs of one position (cu_conv_runs_vector) with
 * their fused Relu or activations, in halves: one layer at the pool, one
 * kernel, a block per image (se_gate.cu); the block's Mul stays a kernel of
 * its own, so an SE block takes two where it took six. */
#define CU_SE_THREADS 256
#define CU_SE_MAX_SMEM (48 * 1024)
typedef struct cu_se_chain {
    int conv[2];    /* the two Conv nodes (skipped layers; their fused Relu and act are the chain's) */
    int gate;       /* a Sigmoid or HardSigmoid node after them (skipped), or -1 */
    int out;        /* the value the layer writes: the gate */
} cu_se_chain;
/* Whether the kernel takes C pooled channels squeezed to M1. */
bool cu_se_gate_fits(int64_t C, int64_t M1);
/* Fuses every such chain (after cu_fuse_layers): the pool's layer runs cu_op_se_gate. */
qf_status cu_fuse_se_gates(cu_engine *c, qf_value *plan_values);
extern const cu_op cu_op_se_gate;

/* A channel shuffle, Reshape [N,C,H,W] -> [N,g,C/g,H,W] -> Transpose(0,2,1,3,4)
 * -> Reshape [N,C,H,W] (ShuffleNet's, between every two units), with the
 * Concat along channels that feeds it when only the shuffle reads it: one
 * layer, one gather kernel writing NHWC (channel_shuffle.cu), where the
 * chain was a Concat and two layout-changing copies (0.19 ms of each unit's
 * 0.4 at batch 256, INT8). Fused before the layouts are assigned, so that
 * the Slices after it see an NHWC value and keep it. */
#define CU_SHUFFLE_MAX_IN 8
#define CU_SHUFFLE_MAX_OUT 8
typedef struct cu_shuffle_chain {
    int n_in;                    /* the Concat's inputs, or the first Reshape's input */
    int in[CU_SHUFFLE_MAX_IN];
    int64_t groups;              /* g */
    int nodes[4];                /* the chain's nodes after the fused layer's own (skipped) */
    int n_nodes;
    int out;                     /* the last Reshape's output */
    int n_out;                   /* the values the layer writes: out, or the Slices that split it */
    int outs[CU_SHUFFLE_MAX_OUT];
    int64_t out_first[CU_SHUFFLE_MAX_OUT]; /* each one's first channel of out */
} cu_shuffle_chain;
/* Fuses every such chain (before the layouts): the Concat's layer, or the
 * first Reshape's, runs cu_op_channel_shuffle with the chain as its state. */
qf_status cu_fuse_channel_shuffles(cu_engine *c, qf_value *plan_values);
/* After the layouts: a shuffle read only by Slices along channels that
 * split it into NHWC parts (ShuffleNet's halves) writes those parts itself. */
qf_status cu_fuse_shuffle_slices(cu_engine *c, qf_value *plan_values);
extern const cu_op cu_op_channel_shuffle;

/* ---- strided copies (copy.cu) ----------------------------------------------------
 * Copies the nd-dim view `dims` of src (element strides ss, starting at
 * element so) into dst (strides ds, starting at element do_), converting
 * dtype and int8 scale where they differ. Used for layout conversion,
 * Reshape, Transpose, Slice, Concat, Split. */
typedef struct cu_elem {
    qf_dtype dt;
    float scale;              /* int8: the value's scale; else ignored */
    int32_t zp;               /* int8 with a scale: the value's zero point (0: symmetric); else 0 */
} cu_elem;
qf_status cu_strided_copy(cudaStream_t s, void *dst, cu_elem dt_dst, const int64_t *ds, int64_t do_, const void *src,
                          cu_elem dt_src, const int64_t *ss, int64_t so, int nd, const int64_t *dims);
/* cu_elem of value v (scale and zero point only for quantized int8 use). */
cu_elem cu_elem_of(const cu_engine *c, const qf_node *n, int v);
/* f32, f16, or int8 with a scale: elements cu_load and cu_store convert. */
static inline bool cu_elem_float_like(cu_elem e)
{
    return e.dt == QF_F32 || e.dt == QF_F16 || (e.dt == QF_I8 && e.scale > 0.0f);
}
/* Same dtype, and for int8 the same scale and zero point: a copy of the stored bytes converts nothing. */
static inline bool cu_elems_alike(cu_elem a, cu_elem b)
{
    return a.dt == b.dt && (a.dt != QF_I8 || (a.scale == b.scale && a.zp == b.zp));
}
/* Whether cu_with_mover has a mover from x to y (prepare checks it; launch relies on it). */
static inline bool cu_can_move(cu_elem y, cu_elem x)
{
    return (cu_elems_alike(y, x) && qf_dtype_info(y.dt)->size <= 8) || (cu_elem_float_like(y) && cu_elem_float_like(x));
}
/* The stored bytes of v as an element e (f32; f16 rounded to nearest even;
 * int8 quantized with e's scale and zero point), at out (8 bytes, zeroed first). */
void cu_elem_bytes(cu_elem e, float v, void *out);

/* A value's dims in its storage order (NHWC: N, H, W, C) and the logical
 * dim each one is, for cu_walk_coords. */
typedef struct cu_walk {
    int nd;
    int64_t dims[QF_MAX_DIMS];
    int dim_of[QF_MAX_DIMS];
} cu_walk;
void cu_walk_init(const cu_engine *c, int v, cu_walk *w);

/* ---- GEMM (gemm.cu) --------------------------------------------------------------
 * Y (rows, cols) = op(A) (rows, K) x op(B) (K, cols) on row-major buffers,
 * through cuBLASLt with the algorithm chosen by timing, or a plain kernel
 * where cuBLASLt has none. Types: F32 (no TF32), F16 (FP32 accumulate),
 * I8 x I8 -> I32, and I8Q: I8 x I8 -> I8 through cuBLASLt's own epilogue
 * (Y = sat(round(alpha * acc + beta * C + bias)), float alpha/beta/bias, C
 * int8 shaped like Y), the per-tensor requantization. Optional epilogue: bias
 * per column (Y's dtype; float for I8Q) and ReLU; `accumulate` adds C (beta =
 * 1, or `beta` for I8Q). */
typedef enum cu_gemm_kind { CU_GEMM_F32, CU_GEMM_F16, CU_GEMM_I8, CU_GEMM_I8Q } cu_gemm_kind;
typedef struct cu_gemm cu_gemm;
typedef struct cu_gemm_shape {
    cu_gemm_kind kind;
    int64_t rows, cols, K;
    int64_t lda, ldb, ldy;
    bool trans_a, trans_b;
    float alpha;
    bool accumulate;          /* Y = ... + C (beta 1); C is Y unless cu_gemm_run is given one shaped like Y */
    float beta;               /* I8Q: the C term's multiplier when accumulating */
    const void *bias;         /* device, cols elements of Y's type, or NULL */
    bool relu;
    uint32_t min_align;       /* bytes every operand address is aligned to; 0: 256 */
    /* a strided batch of such products (attention's QK^T and AV): matrix i
     * at A + i*stride_a, B + i*stride_b, Y (and C) + i*stride_y, in elements;
     * batch 0 or 1: one */
    int64_t batch, stride_a, stride_b, stride_y;
} cu_gemm_shape;
qf_status cu_gemm_create(cu_engine *c, const cu_gemm_shape *sh, cu_gemm **out);
void cu_gemm_free(cu_gemm *gm);
/* Picks the fastest algorithm on these buffers (contents are overwritten). */
qf_status cu_gemm_tune(cu_engine *c, cu_gemm *gm, const void *A, const void *B, void *Y);
qf_status cu_gemm_run(cu_engine *c, const cu_gemm *gm, const void *A, const void *B, const void *C, void *Y,
                      cudaStream_t s);
/* Short description of what was chosen, for logs ("cublasLt algo 23 (0.041 ms)"). */
const char *cu_gemm_describe(const cu_gemm *gm);
/* True when cuBLASLt runs it (false: the plain fallback kernel). */
bool cu_gemm_uses_lt(const cu_gemm *gm);

/* The INT8 epilogue of lib/quant_math.h on an int32 accumulator [rows][ld]
 * (channel = column): y [rows][cols] in dtype out. m[cols], bias[cols] (or
 * NULL), lo/hi, m_r and the residual [rows][cols] int8 (or NULL). */
/* lib/quant_math.h's epilogue constants with m and bias in device memory */
struct cu_requant : qfi_requant {
    /* every channel's multiplier is m0 (per-tensor weight scale): cuBLASLt's
     * scalar-alpha INT8 epilogue can compute it (within one unit, conv.cu) */
    bool uniform;
    float m0;
    /* the input's zero point: what a conv's padding taps read, as the CPU
     * engine's do (the bias holds -z_in times the weights' sum); 0: symmetric */
    int32_t z_in;
};
qf_status cu_requant_launch(cudaStream_t s, const cu_requant *rq, const int32_t *acc, int64_t rows, int64_t cols,
                            int64_t ld, const int8_t *res, void *y);
/* Host side: m and the bounds for an INT8 node (qfi_requant_init), m uploaded. */
qf_status cu_requant_setup(cu_engine *c, const qf_node *n, int64_t channels, cu_requant *rq);

/* ---- convolution geometry (conv.cu) and the implicit-GEMM INT8 kernel (conv_igemm.cu) ----
 * NHWC input (N,H,W,C), output (N,Ho,Wo,M). cu_igemm runs an ungrouped INT8
 * conv with an int8 or half output (M % 8 == 0) and lib/quant_math.h's epilogue bit
 * for bit, the patches gathered in shared memory; an input of C < 4 is first
 * rearranged in `scratch` (cu_igemm_scratch bytes). It offers several launch
 * variants (tile shape, persistent grid, split-K where the tiles leave most
 * SMs idle) for the tuner. */
typedef struct cu_conv_geo {
    int64_t N, C, H, W, M, Ho, Wo, group;
    int kh, kw, sh, sw, ph, pw, dh, dw;
} cu_conv_geo;
typedef struct cu_igemm cu_igemm;
bool cu_igemm_fits(const cu_conv_geo *g, qf_dtype out, qf_act act);
/* Whether the TMA kernel runs g on this GPU (a plain GEMM; a GELU too, which
 * cu_igemm_fits leaves out): cu_igemm_create then offers its variants. */
bool cu_igemm_tma_fits(const cu_engine *c, const cu_conv_geo *g, qf_dtype out, qf_act act);
/* Whether Conv node n can run on the implicit-GEMM kernel (conv.cu). */
bool cu_conv_igemm_fits(const cu_engine *c, const qf_node *n);
/* Scratch bytes its runs need: the prepared input, split-K's int32 sums. */
size_t cu_igemm_scratch(const cu_igemm *ig);
/* w: the graph's (M, C, kh, kw) int8 weights; bias: its int32 bias on the host, or NULL. */
qf_status cu_igemm_create(cu_engine *c, const cu_conv_geo *g, const int8_t *w, const int32_t *bias, const cu_requant *rq,
                          cu_igemm **out);
void cu_igemm_free(cu_igemm *ig);
int cu_igemm_variants(const cu_igemm *ig);
/* The split-K parts of a variant (1: none). */
int cu_igemm_split_k(const cu_igemm *ig, int variant);
/* At most this many (two per tile shape: plain, and a persistent grid or
 * split-K; and the TMA kernel's, up to five with its ping-pong form). */
#define CU_IGEMM_MAX_VARIANTS 24
/* A hash of the variant list, for tactic-cache keys: a cached index is only
 * reused by a build that offers the same variants in the same order. */
uint32_t cu_igemm_signature(const cu_igemm *ig);

/* ---- cuDNN convolutions (conv_cudnn.cu) ----
 * A conv and its fused epilogue as one cuDNN operation graph: the plans of
 * cuDNN's first heuristic choices whose numerics match qforge's, for conv.cu
 * to time. x and y NHWC, res like y, w [M][Cg][kh][kw] at element strides
 * w_strides. FP16 (in F16): y = act(clip(conv(x, w) + bias + res)), FP32
 * accumulation, bias [M] half, act none, SiLU or Sigmoid (not both act and clip). INT8 (in I8): the exact int32 sums of the
 * int8 operands, then lib/quant_math.h's epilogue in FP32,
 * y = clip((conv(x, w) + bias) * scale) with bias and scale [M] floats, y
 * int8 (rounded to nearest even, as rint, then z_out added) or a float type, no residual: the
 * same value as qforge's kernels, bit for bit (with a residual cuDNN 9.14
 * rounded its own way on 11 % of the outputs and wrote NaNs for a depthwise
 * conv's, bench/zoo/NOTES.md, session 16). With f16_operands the int8 levels
 * come as halves (x and w) and FP16 Tensor Cores sum them in FP32: the same
 * exact sums wherever no partial sum can pass 2^24, which the caller makes
 * sure of (conv.cu). The clip [lo, hi] applies when
 * `clip`. only_rank >= 0 builds that heuristic rank alone (a cached choice).
 * The plans are added to *out (NULL at first: a new set; an INT8 layer's
 * second call adds the graph of FP16 operands, same epilogue otherwise);
 * *out stays NULL where cuDNN is missing or has no plan: no tactic, no error. */
typedef struct cu_dnn_epilogue {
    qf_dtype in, out;
    bool bias, scale, residual, clip;
    /* INT8 output: its zero point, added to the rounded level as
     * lib/quant_math.h's qfi_requant_level does (two FP32 additions through
     * QFI_MAGIC, exact: cu_dnn_args.zp) */
    int32_t z_out;
    bool f16_operands; /* INT8 on FP16 Tensor Cores, x and w as halves */
    qf_act act;
    double lo, hi;
} cu_dnn_epilogue;
typedef struct cu_dnn_args {
    const void *x, *w, *bias, *scale, *res; /* x, w: halves for a plan of FP16 operands */
    void *y, *workspace;
    const float *zp; /* with z_out: QFI_MAGIC at zp[0], z_out - QFI_MAGIC at zp[4] (16-byte aligned scalars) */
} cu_dnn_args;
typedef struct cu_dnn_conv cu_dnn_conv;
qf_status cu_dnn_conv_create(cu_engine *c, const cu_conv_geo *g, const int64_t *w_strides, const cu_dnn_epilogue *ep,
                             int only_rank, cu_dnn_conv **out);
void cu_dnn_conv_free(cu_dnn_conv *d);
int cu_dnn_conv_plans(const cu_dnn_conv *d);
/* plan's heuristic rank: what the tactic cache keeps */
int cu_dnn_conv_rank(const cu_dnn_conv *d, int plan);
/* whether plan's graph takes the int8 levels (x and w) as halves */
bool cu_dnn_conv_f16_operands(const cu_dnn_conv *d, int plan);
size_t cu_dnn_conv_workspace(const cu_dnn_conv *d);
const char *cu_dnn_conv_describe(const cu_dnn_conv *d, int plan, char *buf, size_t len);
qf_status cu_dnn_conv_run(cu_engine *c, const cu_dnn_conv *d, int plan, cudaStream_t s, const cu_dnn_args *a);
/* x (N,H,W,C) int8 NHWC into y (N,Hp,Wp,C), x's pixels from row `top` and
 * column `left` on, every other position `fill` (pad.cu): cuDNN pads a conv
 * with zeros, so a conv whose input has a zero point, which its padding taps
 * must read, runs cuDNN's plan unpadded on this copy (conv.cu). */
qf_status cu_pad_nhwc_i8(cudaStream_t s, const int8_t *x, int8_t *y, int8_t fill, int64_t N, int64_t H, int64_t W,
                         int64_t C, int64_t Hp, int64_t Wp, int top, int left);
/* Releases the engine's cuDNN handle. */
void cu_dnn_destroy(cu_engine *c);

/* ---- calibration histograms on the device (histogram.cu) ----
 * out = the |x| histogram of the first n floats at x (calib/histogram.c's
 * bins), through dev and pinned host (cu_hist_bytes() each); syncs s. */
typedef struct cu_hist cu_hist;
size_t cu_hist_bytes(void);
qf_status cu_histogram(cudaStream_t s, const float *x, int64_t n, cu_hist *dev, cu_hist *host, struct qf_histogram *out);

/* Grouped and depthwise convolutions (conv_grouped.cu): x NHWC, w
 * [kh][kw][C/group][M]; INT8 when rq is given (exact sums, rq's epilogue,
 * residual res or NULL), else float of dtype dt with bias (or NULL), a
 * fused ReLU and then a clip to [lo, hi] (infinite bounds: none), as
 * Clip computes it. */
/* Whether the direct INT8 kernel for g reads its weights as words of 4
 * channels [kh][kw][Cg/4][M] (dp4a over whole words of a group's channels)
 * rather than [kh][kw][Cg][M]. */
bool cu_direct_conv_words(const cu_conv_geo *g, bool int8);
/* A float conv of one input position to one output position (conv_vector.cu):
 * sums in double in channel order, the CPU engine's bits. w is [C][M]; sms:
 * the device's multiprocessors (how many images a thread takes). */
bool cu_vector_conv_fits(const cu_conv_geo *g);
qf_status cu_vector_conv_run(cudaStream_t s, const cu_conv_geo *g, int sms, qf_dtype dt, const void *x, const void *w,
                             const void *bias, bool relu, float lo, float hi, void *y);
/* Whether float Conv layer L runs that kernel (conv.cu), its weights [C][M]
 * uploaded for it, and a float Conv's bias in dtype dt (conv.cu): what the
 * conv layer and the SE gate (se_gate.cu) both build. */
bool cu_conv_runs_vector(const cu_engine *c, const cu_layer *L);
qf_status cu_vector_conv_weights(cu_engine *c, const qf_node *n, void **w);
qf_status cu_conv_float_bias(cu_engine *c, const qf_node *n, qf_dtype dt, void **bias);
qf_status cu_direct_conv_run(cudaStream_t s, const cu_conv_geo *g, qf_dtype dt, const void *x, const void *w,
                             const void *bias, bool relu, float lo, float hi, const cu_requant *rq, const int8_t *res,
                             void *y);
qf_status cu_igemm_run(const cu_igemm *ig, int variant, cudaStream_t s, const int8_t *x, const int8_t *res, int8_t *y,
                       void *scratch);
/* The same from an f32 input (N,C,H,W) with element strides xs[4], quantized
 * to int8 with `scale` and zero point `zp` (QuantizeLinear's rule) while it
 * is rearranged; only for C < 4, whose input is rearranged anyway. */
qf_status cu_igemm_run_quantizing(const cu_igemm *ig, int variant, cudaStream_t s, const float *x, const int64_t *xs,
                                  float scale, int32_t zp, const int8_t *res, int8_t *y, void *scratch);
const char *cu_igemm_describe(const cu_igemm *ig, int variant, char *buf, size_t len);
/* The tactic of an INT8 layer that has an implicit-GEMM kernel ig (conv.cu):
 * *use = 0 for the layer's GEMM path (when gemm_ok), v + 1 for ig's variant
 * v; each timed through L's own launch on its real buffers, or taken from
 * the tactic cache under key0 (plus ig's variant list and act). `how`
 * describes the choice and the times. */
qf_status cu_igemm_choose(cu_engine *c, cu_layer *L, const cu_igemm *ig, const char *key0, qf_act act, bool gemm_ok,
                          int *use, char *how, size_t how_len);
/* QFORGE_CUDA_CONV_TACTIC names this tactic ("lt" or "igemm"): tests pin INT8 layers to one. */
bool cu_tactic_forced(const char *name);

/* Whether a walk over dims (nd of them) and every offset it makes with the
 * strides s1 and s2 (non-negative) fit 32-bit unsigned index arithmetic. */
static inline bool cu_index_fits(int nd, const int64_t *dims, const int64_t *s1, const int64_t *s2)
{
    int64_t total = 1, m1 = 0, m2 = 0;
    for (int k = 0; k < nd; k++) {
        if (dims[k] < 0 || s1[k] < 0 || s2[k] < 0) return false;
        total *= dims[k];
        m1 += (dims[k] - 1) * s1[k];
        m2 += (dims[k] - 1) * s2[k];
        if (total > INT32_MAX || m1 > INT32_MAX || m2 > INT32_MAX) return false;
    }
    return true;
}

/* ---- device element helpers -------------------------------------------------------- */
#ifdef __CUDACC__
/* An element of a typed kernel as float. */
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
/* y[i] = act(y[i]) for n float or half elements, in place: a float Conv's
 * fused SiLU, Sigmoid or HardSwish where its kernel has no such epilogue
 * (elementwise.cu; the activation ops' arithmetic; `gated`: the act was a
 * gate node and a Mul, whose two roundings to y's dtype it repeats). */
qf_status cu_act_inplace(cudaStream_t s, void *y, qf_dtype dt, int64_t n, qf_act act, bool gated);

/* An activation op's arithmetic (elementwise.cu's unary kernels; the SE gate
 * applies it too), from a node's attributes (cu_unary_params_of) or from a
 * fused act (cu_act_params: `gated` and dt as for cu_act_inplace). */
typedef struct cu_unary_params {
    int op;                 /* qf_op */
    float alpha, beta, lo, hi;
    bool tanh_approx;       /* Gelu */
    bool times_x;           /* x * f(x): SiLU as x * Sigmoid(x), fused into a Conv (cu_act_inplace) */
    bool gate_half;         /* with times_x: f(x) rounded to half first, as the gate node stored it */
} cu_unary_params;

__device__ __forceinline__ float cu_unary_apply(const cu_unary_params &p, float x)
{
    switch (p.op) {
    case QF_OP_RELU: return x > 0.0f ? x : 0.0f;
    case QF_OP_LEAKY_RELU: return x >= 0.0f ? x : __fmul_rn(x, p.alpha);
    case QF_OP_CLIP: {
        /* max then min: with lo > hi every element becomes hi; NaN stays NaN */
        float v = x < p.lo ? p.lo : x;
        return v > p.hi ? p.hi : v;
    }
    case QF_OP_SIGMOID: return qfi_sigmoid(x);
    case QF_OP_HARD_SIGMOID:
    case QF_OP_HARD_SWISH: {
        const float h = qfi_hard_sigmoid(x, p.alpha, p.beta);
        return p.op == QF_OP_HARD_SWISH ? __fmul_rn(x, h) : h;
    }
    case QF_OP_TANH: return qfi_tanh(x);
    case QF_OP_ERF: return qfi_erf(x);
    case QF_OP_GELU: return qfi_gelu(x, p.tanh_approx);
    case QF_OP_SQRT: return __fsqrt_rn(x);
    default: return x;
    }
}

__device__ __forceinline__ float cu_unary_value(const cu_unary_params &p, float x)
{
    float f = cu_unary_apply(p, x);
    if (p.gate_half) f = __half2float(__float2half_rn(f));
    return p.times_x ? __fmul_rn(x, f) : f;
}
qf_status cu_unary_params_of(const qf_graph *g, const qf_node *n, cu_unary_params *p);
qf_status cu_act_params(qf_act act, bool gated, qf_dtype dt, cu_unary_params *p);

/* Reads element i of e's dtype as float: f32, f16 exactly, int8 as
 * (q - zp) * scale (one rounding). */
__device__ __forceinline__ float cu_load(const void *p, cu_elem e, int64_t i)
{
    switch (e.dt) {
    case QF_F16: return __half2float(((const __half *)p)[i]);
    case QF_I8: return qfi_dequantize_i8_zp(((const int8_t *)p)[i], e.scale, e.zp);
    default: return ((const float *)p)[i];
    }
}
/* V consecutive elements of T (1 to 16 bytes, aligned to their size) as one
 * load or store. */
template <int B> struct cu_bytes;
template <> struct cu_bytes<1> { typedef uint8_t type; };
template <> struct cu_bytes<2> { typedef uint16_t type; };
template <> struct cu_bytes<4> { typedef uint32_t type; };
template <> struct cu_bytes<8> { typedef uint2 type; };
template <> struct cu_bytes<16> { typedef uint4 type; };
template <typename T, int V> struct cu_vec {
    typedef typename cu_bytes<sizeof(T) * V>::type raw_t;
    union {
        T e[V];
        raw_t raw;
    };
    __device__ __forceinline__ void load(const T *p) { raw = *(const raw_t *)p; }
    __device__ __forceinline__ void store(T *p) const { *(raw_t *)p = raw; }
    /* vector i of an array of them */
    __device__ __forceinline__ void load(const T *p, int i) { raw = ((const raw_t *)p)[i]; }
    __device__ __forceinline__ void store(T *p, int i) const { ((raw_t *)p)[i] = raw; }
};
/* n / d for 0 <= n < 2^31 as a multiply-high and a shift (the round-up
 * multiplier m = ceil(2^(31 + l) / d), l = ceil(log2 d)), where a kernel
 * divides by a divisor fixed at launch: the implicit GEMM's positions, the
 * broadcast binary kernel's image index. */
typedef struct cu_fast_div {
    uint32_t mul;           /* 0: d == 1 */
    uint32_t shift;
} cu_fast_div;
static inline cu_fast_div cu_make_fast_div(uint32_t d)
{
    cu_fast_div f = {0, 0};
    if (d <= 1) return f;
    uint32_t l = 0;
    while ((1ull << l) < d) l++;
    f.mul = (uint32_t)(((1ull << (31 + l)) + d - 1) / d);
    f.shift = l - 1;
    return f;
}
__device__ __forceinline__ int cu_div_by(int n, cu_fast_div f)
{
    return f.mul ? (int)(__umulhi((uint32_t)n, f.mul) >> f.shift) : n;
}
/* Asynchronous copies global -> shared (sm_80's cp.async): the implicit
 * GEMM's stages and the SE gate's weight slices. */
__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* 16/8/4 bytes global -> shared; src_bytes 0 (valid false) writes zeros. */
template <int VEC>
__device__ __forceinline__ void cp_async(uint32_t dst, const void *src, bool valid)
{
    if (VEC == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(src), "n"(VEC),
                     "r"(valid ? VEC : 0));
}
/* 16 bytes to shared of which the first `bytes` (0 to 16) come from src, the rest zeros. */
__device__ __forceinline__ void cp_async16_head(uint32_t dst, const void *src, int bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* One lane of a vector of int8 levels or halves as float, and back (int8
 * quantized with e's scale and zero point, half rounded to nearest even):
 * what cu_load and cu_store do for an element of e's dtype. */
template <typename T> __device__ __forceinline__ float cu_lane_in(T q, const cu_elem &e)
{
    if constexpr (sizeof(T) == 1) return qfi_dequantize_i8_zp(q, e.scale, e.zp);
    else return __half2float(q);
}
template <typename T> __device__ __forceinline__ T cu_lane_out(float v, const cu_elem &e)
{
    if constexpr (sizeof(T) == 1) return qfi_quantize_f32_zp(v, e.scale, e.zp);
    else return __float2half_rn(v);
}

/* Writes v as element i of e's dtype: f32, f16 rounded to nearest even,
 * int8 quantized with e's scale and zero point. */
__device__ __forceinline__ void cu_store(void *p, cu_elem e, int64_t i, float v)
{
    switch (e.dt) {
    case QF_F16: ((__half *)p)[i] = __float2half_rn(v); break;
    case QF_I8: ((int8_t *)p)[i] = qfi_quantize_f32_zp(v, e.scale, e.zp); break;
    default: ((float *)p)[i] = v;
    }
}

/* ---- walking a value in its device layout ----
 * For kernels that write element i of their output in storage order (so
 * writes coalesce) and need its logical coordinates (cu_walk_init). */
__device__ __forceinline__ void cu_walk_coords(const cu_walk &w, int64_t i, int64_t *coord)
{
    for (int k = w.nd - 1; k >= 0; k--) {
        int64_t q = i / w.dims[k];
        coord[w.dim_of[k]] = i - q * w.dims[k];
        i = q;
    }
}

/* ---- moving elements: the kernels of ops that only move or select values
 * (Pad, Gather, nearest Resize) take a mover. Where source and destination
 * elements are alike (dtype, and an int8 value's scale) it copies the stored
 * bytes, as the CPU's pass-through does; otherwise it converts through
 * float with the f32 view's rules (cu_load, cu_store). `fill` is what a
 * position outside the source gets. */
template <typename T> struct cu_raw_mover {
    T *y;
    const T *x;
    T fill;
    __device__ __forceinline__ void copy(int64_t i, int64_t j) const { y[i] = x[j]; }
    __device__ __forceinline__ void set(int64_t i) const { y[i] = fill; }
};
struct cu_convert_mover {
    void *y;
    const void *x;
    cu_elem ye, xe;
    float fill;
    __device__ __forceinline__ void copy(int64_t i, int64_t j) const
    {
        cu_store(y, ye, i, cu_load(x, xe, j));
    }
    __device__ __forceinline__ void set(int64_t i) const { cu_store(y, ye, i, fill); }
};
/* Calls launch(mover) (a generic lambda that launches the op's kernel
 * template with it) with the mover for x -> y. fill: the float the f32 view
 * fills with; fill_raw (or NULL: zeros) the bytes for dtypes that are not
 * float-like. */
template <typename F>
qf_status cu_with_mover(void *y, cu_elem ye, const void *x, cu_elem xe, float fill, const void *fill_raw, F launch)
{
    if (cu_elems_alike(ye, xe)) {
        uint64_t fb = 0;
        if (cu_elem_float_like(ye)) cu_elem_bytes(ye, fill, &fb);
        else if (fill_raw) memcpy(&fb, fill_raw, qf_dtype_info(ye.dt)->size);
        switch (qf_dtype_info(ye.dt)->size) {
        case 1: return launch(cu_raw_mover<uint8_t>{(uint8_t *)y, (const uint8_t *)x, (uint8_t)fb});
        case 2: return launch(cu_raw_mover<uint16_t>{(uint16_t *)y, (const uint16_t *)x, (uint16_t)fb});
        case 4: return launch(cu_raw_mover<uint32_t>{(uint32_t *)y, (const uint32_t *)x, (uint32_t)fb});
        case 8: return launch(cu_raw_mover<uint64_t>{(uint64_t *)y, (const uint64_t *)x, fb});
        default: return qf_error(QF_ERR_UNSUPPORTED, "no device copy for %s", qf_dtype_info(ye.dt)->name);
        }
    }
    if (!cu_elem_float_like(ye) || !cu_elem_float_like(xe))
        return qf_error(QF_ERR_UNSUPPORTED, "no device conversion from %s to %s", qf_dtype_info(xe.dt)->name,
                        qf_dtype_info(ye.dt)->name);
    return launch(cu_convert_mover{y, x, ye, xe, fill});
}
/* The launch of a moving op: input 0 of L's node to its output, one thread
 * per output element (grid-stride, at most 65536 blocks of 256): calls
 * launch(mover, blocks, total) as cu_with_mover does. */
template <typename F> qf_status cu_move_node(cu_engine *c, cu_layer *L, float fill, const void *fill_raw, F launch)
{
    const int xv = L->n->in[0], yv = cu_out_value(L, 0);
    void *x, *y;
    QF_CHECK(cu_value_ptr(c, xv, &x));
    QF_CHECK(cu_value_ptr(c, yv, &y));
    const int64_t total = qf_value_numel(&c->g->values[yv]);
    if (!total) return QF_OK;
    unsigned blocks = cu_blocks(total, 256);
    if (blocks > 65536) blocks = 65536;
    return cu_with_mover(y, cu_elem_of(c, L->n, yv), x, cu_elem_of(c, L->n, xv), fill, fill_raw,
                         [&](auto m) { return launch(m, blocks, total); });
}
#endif

#endif
