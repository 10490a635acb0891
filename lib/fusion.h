/* The one planner of epilogue fusions: which Add, Relu, Clip and smooth
 * activation (Sigmoid, SiLU, HardSwish) nodes fold into the Conv/Gemm/MatMul
 * that writes their input. The quantizer
 * (quant/assign.c: INT8 chains, stored in the graph) and the CUDA engine
 * (runtime/cuda/fusion.cu: FP32/FP16 chains, planned at engine build) call it
 * with their own rules for which links their kernels can run. */
#ifndef QFORGE_FUSION_H
#define QFORGE_FUSION_H

#include "internal.h"

/* The links of a chain, in the order they follow the anchor; each is optional. */
typedef enum qfi_fuse_link {
    QFI_FUSE_BIAS,     /* an Add of a constant (a bias) */
    QFI_FUSE_RESIDUAL, /* an Add of another tensor */
    QFI_FUSE_RELU,
    QFI_FUSE_CLIP,
    QFI_FUSE_ACT,  /* a smooth activation (qfi_fusion.act): a Sigmoid, HardSwish or Gelu node, or
                    * the Mul of x * Sigmoid(x) (SiLU) or x * HardSigmoid(x) (HardSwish) */
    QFI_FUSE_GATE, /* with ACT's Mul: the Sigmoid or HardSigmoid it multiplies by */
    QFI_FUSE_LINK_COUNT
} qfi_fuse_link;

/* One chain: the anchor node and the nodes its epilogue absorbs. */
typedef struct qfi_fusion {
    int anchor;                     /* node index of the Conv, Gemm or MatMul */
    int node[QFI_FUSE_LINK_COUNT];  /* node index of each link, or -1 */
    int bias, residual;             /* the other operand of the bias / residual Add, or -1 */
    float clip_lo, clip_hi;         /* the Clip's bounds (qfi_clip_bounds) */
    qf_act act;                     /* ACT: QF_ACT_SIGMOID, SILU or HARD_SWISH; else QF_ACT_NONE */
    int out;                        /* the value the fused node writes: the last link's output */
    int last;                       /* the chain's last node (the anchor when it has no link) */
} qfi_fusion;

/* A link the planner offers a chain: `node` is the only reader of the chain's
 * end (f->out), which is not a graph output -- except ACT's Mul, which reads
 * it beside its gate, the only other reader, whose output only the Mul reads. */
typedef struct qfi_fuse_candidate {
    qfi_fuse_link link;
    const qf_node *node;
    const qf_node *gate;  /* ACT: the Mul's Sigmoid or HardSigmoid, or NULL */
    qf_act act;           /* ACT: the activation node (and gate) compute */
    int other;      /* BIAS (a constant) and RESIDUAL (not a constant): the Add's other operand */
    int other_born; /* RESIDUAL: the node that writes `other` once the fusions planned so far
                     * are applied (their anchor), -1 for a graph input */
    float lo, hi;   /* CLIP: its bounds */
} qfi_fuse_candidate;

typedef struct qfi_fusion_rules {
    /* May node i (a Conv, Gemm or MatMul) anchor a chain? */
    bool (*anchor)(void *user, const qf_graph *g, int i);
    /* May chain f take candidate c? */
    bool (*accept)(void *user, const qf_graph *g, const qfi_fusion *f, const qfi_fuse_candidate *c);
    void *user;
} qfi_fusion_rules;

/* Plans the chains of the prepared graph g: one entry per node the rules let
 * anchor, in node order, each with the links its rules accepted. Links join
 * in this order: every anchor's bias Add; then, Add by Add in node order,
 * residuals (offered to the earlier of two chains first), each followed by
 * its chain's activations (Relu, Clip, then a smooth one); then the
 * activations of the chains without a residual. A node joins one chain at
 * most, and only when it alone reads the chain's end (ACT's Mul and gate: the
 * two of them) and that end is not a graph output. A HardSigmoid gate needs
 * HardSwish's alpha 1/6 and beta 1/2. *out (free()) may be NULL when *n_out is 0. */
qf_status qfi_fusion_plan(const qf_graph *g, const qfi_fusion_rules *rules, qfi_fusion **out, int *n_out);

#endif
