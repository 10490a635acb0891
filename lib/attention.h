/* Attention chains, the one definition both engines fuse: an FP16 MatMul of
 * Q by K^T, then Reshapes and Adds of bias operands (relative positions,
 * masks), a Softmax over the keys, Reshapes, and the MatMul of the
 * probabilities by V. Each node is the only reader of the one before (and
 * no intermediate is a graph output), so the chain can run as one kernel
 * that never writes the scores: runtime/cpu/attention.c and
 * runtime/cuda/attention.cu.
 *
 * What the fused chain computes (both engines, so that they agree to FP32
 * rounding instead of differing by half precision's): for each query row,
 *   s_j = q . k_j in FP32, plus each bias operand read as half (a float
 *         constant rounded to half; two or more constant operands summed in
 *         FP32 and rounded to half once where their table fits:
 *         qfi_attention_bias_table);
 *   keys in tiles of QFI_ATTN_KEY_TILE, the row max m kept online: at each
 *   tile m' = max(m, the tile's max), the running sum l and output o scaled
 *   by exp2((m - m') log2 e), then p_j = exp2((s_j - m') log2 e), l += p_j
 *   (unrounded), o += half(p_j) v_j in FP32;
 *   out = half(o * (1 / l)).
 * The unfused nodes round the scores, the biased scores and the
 * probabilities to half; the fused chain keeps them in FP32.
 *
 * The exporters' scaled dot product is taken in too: torch.onnx writes
 * softmax(Q K^T / sqrt(D)) as MatMul(Mul(Q, s), Mul(Transpose(K), s)). The
 * chain then reads Q and K themselves (K as [nb][N][D] rows: k_rows) and
 * multiplies each FP32 score by `scale`, the product of the two constants,
 * where the unfused Muls rounded the scaled Q and K to half. Heads of 32,
 * 64 or 128 only (the sizes the CUDA kernel is built for): both engines
 * must fuse the same chains to agree.
 *
 * An engine that reads operands through views (qfi_attention_rules.views)
 * also takes in the Reshapes, Transposes, Squeezes, Unsqueezes, Flattens,
 * Gathers of one constant index, Splits and the one per-tensor
 * DequantizeLinear that make Q, K or V from another value, the root (ViT's
 * heads split out of the int8 in-projection, [S, B, 3E] to three [B, H, S,
 * D]; DeiT's Split of its qkv output, whose int8 Q and K its scalar Muls
 * read dequantized, as the chain then reads all three): the chain
 * reads each element where the root holds it (qfi_attention_view) and an
 * int8 root's element as the DequantizeLinear's half, so the values read
 * are the unfused nodes'. A node shared by the operands goes only where all
 * its readers are the chain's. */
#ifndef QFORGE_ATTENTION_H
#define QFORGE_ATTENTION_H

#include "internal.h"

#define QFI_ATTN_MAX_BIAS 2
#define QFI_ATTN_MAX_NODES 12
#define QFI_ATTN_MAX_DIMS 6
#define QFI_ATTN_MAX_PRE 32
#define QFI_ATTN_MAX_LEAD 4
#define QFI_ATTN_KEY_TILE 64

typedef struct qfi_attention_bias {
    int value;                          /* the Add's other operand */
    int nd;                             /* the Add's output dims but the last: one row of scores each */
    int64_t dims[QFI_ATTN_MAX_DIMS];
    int64_t strides[QFI_ATTN_MAX_DIMS]; /* the operand's element strides along those (0: broadcast) */
    int64_t col_stride;                 /* and along the keys */
} qfi_attention_bias;

/* Where an operand's row i of batch matrix b starts in its value (the
 * root): offset + row_stride i + the batch index's digits (lead_dims,
 * outermost first) times lead_strides; a row's D elements are consecutive.
 * An int8 root's elements are dequantized (scale, zero_point) and rounded
 * to half. The plain operand: one lead dim of nb matrices, rows of D. */
typedef struct qfi_attention_view {
    int64_t offset, row_stride;
    int n_lead;
    int64_t lead_dims[QFI_ATTN_MAX_LEAD], lead_strides[QFI_ATTN_MAX_LEAD];
    bool int8;
    float scale;
    int32_t zero_point;
} qfi_attention_view;

enum { QFI_ATTN_Q, QFI_ATTN_K, QFI_ATTN_V };

typedef struct qfi_attention_chain {
    int first;                      /* node index of the Q K^T MatMul */
    int q, kt, v, out;              /* values: Q [nb][M][D], K^T [nb][D][N] (k_rows: K [nb][N][D]), V [nb][N][D], out [nb][M][D]
                                     * (q, kt and v: the roots their views read) */
    qfi_attention_view view[3];     /* Q, K (k_rows; K^T is read as it is), V */
    bool k_rows;                    /* kt is K, the input of the Transpose that made K^T */
    float scale;                    /* each score's factor: the scalar Muls' constants, else 1 */
    int pre[QFI_ATTN_MAX_PRE];      /* the nodes before `first` that the chain computes (scale Muls, K's Transpose, views) */
    int n_pre;
    int64_t nb, M, N, D;
    int nodes[QFI_ATTN_MAX_NODES];  /* the chain after the first MatMul, the AV MatMul last */
    int n_nodes;
    qfi_attention_bias bias[QFI_ATTN_MAX_BIAS];
    int n_bias;
} qfi_attention_chain;

/* What an engine adds to the graph's conditions. Either may be NULL. */
typedef struct qfi_attention_rules {
    /* May node i be part of a chain (the engine runs it itself)? */
    bool (*node)(void *user, const qf_graph *g, int i);
    /* May the fused kernel, run where node `first` runs, read value v (V
     * and the bias operands)? NULL: v is a constant, a graph input or the
     * output of a node before `first`. */
    bool (*operand)(void *user, const qf_graph *g, int v, int first);
    void *user;
    bool views; /* the engine reads Q, K and V through views (NULL rules: yes) */
    /* May the kernel read the chain's views as they came out (alignment,
     * int8 and half roots mixed)? NULL: yes; no: the chain reads Q, K and
     * V as they are. */
    bool (*views_ok)(void *user, const qfi_attention_chain *ch);
} qfi_attention_rules;

/* Whether node `first` of g starts an attention chain; fills *ch if so.
 * The scores' rows, nb * M, fit 31 bits (the CUDA kernel's bias arithmetic). */
bool qfi_attention_match(const qf_graph *g, int first, const qfi_attention_rules *rules, qfi_attention_chain *ch);

/* The debug line an engine logs for each chain it fuses (tests count them). */
void qfi_attention_log(const qf_graph *g, const qfi_attention_chain *ch);

/* Where row i of batch matrix b of an operand starts in its root. */
int64_t qfi_attention_view_row(const qfi_attention_view *w, int64_t b, int64_t i);

/* Where row r (batch * M + query) of the scores starts in bias operand b. */
int64_t qfi_attention_bias_row(const qfi_attention_bias *b, int64_t r);

/* Moves the conversion (DequantizeLinear, QuantizeLinear, Cast) that makes
 * a chain's V or bias operand after the chain's first MatMul to just before
 * it, where its own input exists by then, so that the chain can run where
 * the first MatMul stands: the quantizer converts a value where its first
 * reader needs it, and timm's DeiT makes V (int8) before the scores but its
 * half copy only at the AV MatMul. Values and their order of computation
 * are otherwise the same. */
qf_status qfi_attention_hoist_operands(qf_graph *g);

/* Constant bias operands as one half table of their sums (the semantics
 * above): the operands' rows repeat with a period (the rows their outermost
 * read dim spans), and so does the sum, over the lcm of the periods. *table
 * (period * N halves, row r % period for score row r; the caller frees it)
 * stays NULL where fewer than two operands, one not constant, or a period
 * past 2^24 elements: the operands are then added one by one. */
qf_status qfi_attention_bias_table(const qf_graph *g, const qfi_attention_chain *ch, uint16_t **table, int64_t *period);

#endif
