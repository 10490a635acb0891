/* The CPU engine's kernels, one file per kernel family in runtime/cpu/; each
 * file registers its family as qfi_cpu_<family> (the kernels column of
 * include/qforge/ops.def). Activations are NCHW. */
#ifndef QFORGE_CPU_KERNELS_H
#define QFORGE_CPU_KERNELS_H

#include "internal.h"

typedef struct qfi_kernel_args {
    const qf_graph *g;       /* the f32 view for nodes qfi_node_f32_view names (lowp.c) */
    const qf_node *n;
    const void *const *in;   /* n->n_in pointers; NULL for an omitted input */
    void *const *out;        /* n->n_out pointers */
    void *scratch;           /* scratch(g, n) bytes, or NULL */
    const void *state;       /* what prepare(g, n) built, or NULL */
    int threads;
    const struct qfi_cpu_epilogue *epilogue; /* an FP32 Conv's fused activations (cpu_engine.c), or NULL */
} qfi_kernel_args;

/* The activations an FP32 Conv applies to its own output where the CPU
 * engine fuses them (no observer needs the Conv's output): a Relu or Clip,
 * then a Sigmoid, SiLU (Mul(x, Sigmoid(x))) or HardSwish (the node, or
 * Mul(x, HardSigmoid(x))), computed by the expressions of the kernels of
 * those nodes (unary.c, binary.c's Mul), so the same bits. y may be x. */
typedef struct qfi_cpu_epilogue {
    bool relu, clip;  /* Relu: x > 0 ? x : 0 (NaN and -0 become +0); Clip: max then min */
    float lo, hi;     /* Clip's bounds */
    qf_act act;       /* QF_ACT_NONE, SIGMOID, SILU or HARD_SWISH */
    float alpha, beta; /* HARD_SWISH: its HardSigmoid's */
} qfi_cpu_epilogue;
void qfi_cpu_epilogue_floats(const qfi_cpu_epilogue *e, const float *x, float *y, int64_t n);

/* The threads a call runs on at most: `threads` (<= 0: all cores), never
 * more than the cores; and the scratch slots a call over `items`
 * independent items needs (one per such thread, never more than items). */
static inline int64_t qfi_cpu_threads(int threads)
{
    const int64_t cpus = qfi_cpu_count();
    return threads > 0 && threads < cpus ? threads : cpus;
}
static inline int64_t qfi_cpu_slots(int64_t items, int threads)
{
    const int64_t t = qfi_cpu_threads(threads);
    return items < t ? items : t;
}

/* A kernel family. run() computes FP32 nodes and nodes of the op's typed
 * precisions (qfi_op_desc.typed: INT8 Conv, the conversions) in their own
 * dtypes; every other FP16 or INT8 node runs it on the f32 view through
 * lowp.c. */
typedef struct qfi_cpu_kernel {
    qf_status (*run)(const qfi_kernel_args *a);
    /* Bytes of scratch run() needs (im2col) on up to `threads` threads (0:
     * all cores), or NULL for none. */
    size_t (*scratch)(const qf_graph *g, const qf_node *n, int threads);
    /* Per-node state built once with the engine (INT8 weights packed for the
     * kernel), freed by release(); NULL for none. *state may stay NULL. */
    qf_status (*prepare)(const qf_graph *g, const qf_node *n, void **state);
    void (*release)(void *state);
} qfi_cpu_kernel;

#define QF_OP(id, onnx_name, desc, kernels) extern const qfi_cpu_kernel qfi_cpu_##kernels;
#include "qforge/ops.def"
#undef QF_OP

/* The kernel of op (runtime/cpu/cpu_engine.c's table, built from ops.def). */
const qfi_cpu_kernel *qfi_cpu_kernel_of(qf_op op);
/* Runs node a->n as the CPU engine does: through lp (NULL where no node
 * needs it) when the node sees the f32 view, else its kernel. a->g is the
 * real graph; a->scratch holds qfi_cpu_node_scratch() bytes. */
typedef struct qfi_cpu_lowp qfi_cpu_lowp; /* lowp.c, below */
qf_status qfi_cpu_node_run(qfi_cpu_lowp *lp, const qfi_kernel_args *a);
size_t qfi_cpu_node_scratch(const qfi_cpu_lowp *lp, const qf_graph *g, const qf_node *n, int threads);
/* What n's kernel builds once before its runs (INT8 weights packed), for
 * a->state; *state stays NULL for kernels without. Release frees it. */
qf_status qfi_cpu_node_prepare(const qf_graph *g, const qf_node *n, void **state);
void qfi_cpu_node_release(const qf_node *n, void *state);
/* Runs node n of g (FP32, or a typed precision) once on one thread with
 * freshly allocated scratch (tests). */
qf_status qfi_cpu_run_node(const qf_graph *g, const qf_node *n, const void *const *in, void *const *out);

/* Copies the view of `src` with these dims and element strides (negative
 * strides walk backwards) into contiguous `dst`; `es` bytes per element.
 * Transpose and Slice are this copy. Defined in runtime/cpu/transpose.c. */
void qfi_cpu_strided_copy(void *dst, const void *src, int nd, const int64_t *dims, const int64_t *strides, size_t es);

/* r[0..n) = 0 and r[0..n) = x[0..n) for short rows (ResNet-style rows are
 * 8-32 floats, where a libc call per row cost more than the copy: memset +
 * memmove were 15% of a ResNet-20 run through im2col). Blocks of 8 with a
 * fixed inner count vectorize; gcc would still turn the loops back into
 * library calls, which QFI_NO_LIBCALL_LOOPS on the function they are inlined
 * into forbids. (__restrict: this header is also read by nvcc as C++.) */
#if defined(__GNUC__) && !defined(__clang__)
#define QFI_NO_LIBCALL_LOOPS __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define QFI_NO_LIBCALL_LOOPS
#endif
/* `#pragma GCC unroll n` inside a macro body (n = 0: not unrolled), for the
 * register blocks of conv_direct.c and int8_simd.c. clang refuses "unroll 0";
 * it is left to its own judgement. */
#ifdef __clang__
#define QFI_UNROLL(n)
#else
#define QFI_PRAGMA(x) _Pragma(#x)
#define QFI_UNROLL(n) QFI_PRAGMA(GCC unroll n)
#endif
/* FMA contraction is asked for explicitly because -std=c11 turns it off in
 * gcc (a fused multiply-add only rounds less). */
#if defined(__GNUC__) && !defined(__clang__)
#define QFI_FMA_CONTRACT __attribute__((optimize("fp-contract=fast")))
#else
#define QFI_FMA_CONTRACT
#endif
/* GNU vector types of the FP32 register-block kernels (conv_direct.c,
 * sgemm_rows.c). Loads and stores go through the *u twins, which may sit at
 * any float and alias float arrays. (memcpy instead took the accumulators'
 * address, and gcc then kept them in memory.) QFI_X86_FLOAT_KERNELS: the
 * AVX2 and AVX-512 instances are compiled (gcc, x86-64, ELF). Not for nvcc,
 * which reads this header for host.cu. */
#ifndef __CUDACC__
typedef float vf16 __attribute__((vector_size(64)));
typedef float vf8 __attribute__((vector_size(32)));
typedef float vf4 __attribute__((vector_size(16)));
typedef float vf16u __attribute__((vector_size(64), aligned(4), may_alias));
typedef float vf8u __attribute__((vector_size(32), aligned(4), may_alias));
typedef float vf4u __attribute__((vector_size(16), aligned(4), may_alias));
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__)
#define QFI_X86_FLOAT_KERNELS 1
#endif
#endif
static inline void qfi_zero_floats(float *__restrict r, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int u = 0; u < 8; u++) r[i + u] = 0.0f;
    for (; i < n; i++) r[i] = 0.0f;
}
static inline void qfi_copy_floats(float *__restrict r, const float *__restrict x, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int u = 0; u < 8; u++) r[i + u] = x[i + u];
    for (; i < n; i++) r[i] = x[i];
}

size_t qfi_cpu_conv_scratch(const qf_graph *g, const qf_node *n, int threads);
size_t qfi_cpu_conv_transpose_scratch(const qf_graph *g, const qf_node *n, int threads);
/* Unfolds one group of one image for Conv: x is (Cg, D,H,W), col is
 * (Cg*Kd*Kh*Kw, Do*Ho*Wo), 0 where a tap falls in the padding. runtime/cpu/conv.c. */
struct qfi_window;
void qfi_cpu_im2col(const float *x, int64_t cg, const struct qfi_window *w, float *col);
/* Direct FP32 Conv of group-1 windows on 1-D/2-D images, without im2col or
 * BLAS; runtime/cpu/conv_direct.c. _supports says whether it can run geo
 * (whether it should is conv.c's choose_conv_path). Scratch: one padded image
 * per slot; _slots is how many slots `threads` (<= 0: all cores) use.
 * x (N,C,H,W), w (M,C,kh,kw), b (M) or NULL, y (N,M,Ho,Wo). The kernel comes
 * in vector widths; qfi_cpu_direct_isa() is the widest this CPU runs, and
 * tests run every narrower one too. */
typedef enum qfi_direct_isa { QFI_DIRECT_PORTABLE, QFI_DIRECT_AVX2, QFI_DIRECT_AVX512 } qfi_direct_isa;
qfi_direct_isa qfi_cpu_direct_isa(void);

/* Y (rows, N) = alpha * op(A) (rows, K) x op(B) (K, N) + beta * Y, row-major
 * as cblas_sgemm (lda, ldb: stored row lengths), so that a row gets the same
 * bits whatever the other rows are: for GEMMs whose rows grow with the
 * batch. Large GEMMs are spread over `threads` (<= 0: all cores). isa: the
 * widest instruction set to use (qfi_cpu_direct_isa() in the kernels; tests
 * run the narrower ones too, where AVX2 and AVX-512 give the same bits).
 * runtime/cpu/sgemm_rows.c. */
size_t qfi_cpu_sgemm_rows_scratch(int64_t rows, int64_t N, int64_t K, bool trans_a, int threads, qfi_direct_isa isa);
qf_status qfi_cpu_sgemm_rows(bool trans_a, bool trans_b, int64_t rows, int64_t N, int64_t K, float alpha,
                             const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *Y,
                             void *scratch, int threads, qfi_direct_isa isa);
struct qfi_conv_geom;
bool qfi_cpu_conv_direct_supports(const struct qfi_conv_geom *geo);
/* The padded phase-plane layout of one image (the top of conv_direct.c),
 * which the INT8 direct kernel shares. Offsets and sizes count elements. */
#define QFI_DIRECT_MAX_TAPS 1024 /* kh*kw of the largest window the direct paths take */
typedef struct qfi_direct_plan {
    int64_t C, M, H, W;
    int64_t Hp, Wp, Ho, Wo;
    int64_t sh, sw;                    /* strides */
    int64_t Hq, Wq;                    /* one phase plane; Wq elements per row */
    int64_t pt, pl;                    /* padding before the first row and column */
    int64_t plane;                     /* sh*sw*Hq*Wq elements per channel */
    int64_t grid;                      /* Ho*Wq flat output positions */
    int64_t taps;                      /* kh*kw */
    int64_t slack;                     /* elements after the last plane that a chunk may read */
    int64_t off[QFI_DIRECT_MAX_TAPS];  /* per tap: its offset in a channel's planes */
} qfi_direct_plan;
/* Whether the window is one the plan lays out: 1-D or 2-D, at most
 * QFI_DIRECT_MAX_TAPS taps. */
bool qfi_cpu_direct_window_ok(const struct qfi_window *w);
/* The plan of geo's window for C = geo->C channels. share_rows: with stride
 * 1, a row's right padding is the next row's left padding (narrower rows;
 * the whole image must then be laid out). chunk: the most positions one
 * register block computes past its start. */
void qfi_cpu_direct_plan(const struct qfi_conv_geom *geo, bool share_rows, int64_t chunk, qfi_direct_plan *p);
int64_t qfi_cpu_conv_direct_slots(const struct qfi_conv_geom *geo, int threads);
size_t qfi_cpu_conv_direct_scratch(const struct qfi_conv_geom *geo, int64_t slots);
void qfi_cpu_conv_direct(const struct qfi_conv_geom *geo, const float *x, const float *w, const float *b, float *y,
                         void *scratch, int threads, qfi_direct_isa isa);

/* FP32 depthwise convolutions (runtime/cpu/conv_depthwise.c): the scratch
 * (padded planes, one a thread) and the run. */
size_t qfi_cpu_conv_depthwise_scratch(const struct qfi_conv_geom *geo, int threads);
qf_status qfi_cpu_conv_depthwise(const struct qfi_conv_geom *geo, const float *x, const float *w, const float *b,
                                 float *y, const qfi_cpu_epilogue *epilogue, float *scratch, int threads);

/* Bulk conversions between f32 and stored f16 / int8 values (convert_simd.c),
 * bit for bit lib/dtype.c's and lib/quant_math.h's element functions: f16 <->
 * f32, x (f32 or f16) quantized at scale s and zero point z, (q - z) * s. */
bool qfi_cpu_has_avx2_f16c(void); /* these conversions (and int8_simd.c's avx2 set) run vectors */
void qfi_cpu_f16_to_f32(const uint16_t *h, float *f, int64_t n);
void qfi_cpu_f32_to_f16(const float *f, uint16_t *h, int64_t n);
void qfi_cpu_quantize(const void *x, qf_dtype dt, int8_t *q, int64_t n, float s, int32_t z);
void qfi_cpu_dequantize(const int8_t *q, float *f, int64_t n, float s, int32_t z);
/* A stored value's dtype (f32, f16, or int8 at scale and zero point) */
typedef struct qfi_cpu_stored {
    qf_dtype dt;
    float scale;
    int32_t zero_point;
} qfi_cpu_stored;
/* n stored elements as f32 (f16 exactly, int8 as (q - z) * s), and back
 * (half rounded to nearest even, int8 quantized): the conversions of an
 * FP16 or INT8 node's values (lowp.c's wrapper, binary.c's pieces, Cast). */
void qfi_cpu_widen(const qfi_cpu_stored *v, const void *src, float *f, int64_t n);
void qfi_cpu_narrow(const qfi_cpu_stored *v, const float *f, void *dst, int64_t n);
/* The same over cnt elements, in chunks over the threads. */
void qfi_cpu_convert(const qfi_cpu_stored *v, const void *src, void *dst, int64_t cnt, bool widen, int threads);

/* ---- INT8 (exact integer arithmetic, lib/quant_math.h's requantize epilogue) ----
 * Products are u8 x s8 dot products of four (vpdpbusd on CPUs with VNNI): one
 * operand is stored with 128 added (u = q ^ 0x80), and the 128 * sum of the
 * other operand that this adds is subtracted in the epilogue's int32 addend.
 * |sum of u*s| <= 65536 * 255 * 128 < 2^31, so every partial sum is exact in
 * int32 in any order, and every instance below gives the same bits. */
typedef enum qfi_i8_isa {
    QFI_I8_PORTABLE, /* plain C */
    QFI_I8_AVX2,     /* 8 x int32: AVX2 without VNNI, each quad's products as 16-bit pairs (vpmaddwd) */
    QFI_I8_VNNI256,  /* 8 x int32 per vector: AVX-VNNI, or AVX512-VNNI at 256 bits */
    QFI_I8_VNNI512,  /* 16 x int32: AVX512-VNNI with VBMI (byte permutes) */
    QFI_I8_AMX,      /* VNNI512, with the direct convolutions' blocks on AMX-INT8 tiles (int8_amx.c) */
    QFI_I8_ISAS
} qfi_i8_isa;
/* The instruction set INT8 kernels use: the widest this CPU runs, unless a
 * test chose another with qfi_cpu_i8_set_isa (not thread-safe: tests only;
 * an isa the CPU does not run clears the choice) or QFORGE_CPU_INT8_ISA names
 * one (qfi_cpu_i8_isa_name's names). Engines keep the kernels of their build. */
qfi_i8_isa qfi_cpu_i8_isa(void);
bool qfi_cpu_i8_isa_runs(qfi_i8_isa isa);
void qfi_cpu_i8_set_isa(qfi_i8_isa isa);
const char *qfi_cpu_i8_isa_name(qfi_i8_isa isa);

/* What a register block reduces: `quads` groups of 4 bytes, each at `taps`
 * byte offsets from the block's base, groups `stride` bytes apart. Tile
 * blocks reduce them kq at a time (quads a multiple of kq). */
typedef struct qfi_i8_geom {
    int64_t quads, stride, taps, kq;
    const int64_t *off;
} qfi_i8_geom;
/* out (mb, nv*vw) int32 = sum over quads q and taps t of the dot product of
 * the u8 quad at x + q*stride + off[t] + 4*i (position i) with the s8 quad
 * w[(q*taps + t)*mb + m] (row m): mb rows of w broadcast against nv vectors
 * of vw consecutive positions. Each s8 quad of w takes `wq` int32 words
 * (qfi_i8_put_quad), so w's index is scaled by wq. A kernel set with `tiles`
 * packs w per tap t and group of kq quads instead: mb rows (output channels)
 * of 4*kq bytes. */
typedef void (*qfi_i8_block_fn)(const qfi_i8_geom *g, const uint8_t *x, const int32_t *w, int32_t *out);
/* The int32 addend of an output element rides along with the accumulator;
 * the requantizing epilogue then runs on acc + add. */
typedef struct qfi_i8_kernels {
    qfi_i8_isa isa;
    int mb, nv, vw;              /* rows x vectors x positions per vector of the widest block */
    int wq;                      /* int32 words a packed s8 quad of the broadcast operand takes (1 or 2) */
    bool tiles;                  /* blocks on AMX tiles: the weights' tile layout, geom kq */
    qfi_i8_block_fn block[3];    /* block[k]: k+1 vectors; any number of taps */
    qfi_i8_block_fn block_1t[3]; /* the same, for taps == 1 */
    qfi_i8_block_fn block_9t[3]; /* taps == 9 */
    /* y[at + i] = epilogue(acc[i] + add, channel multiplier m, residual res[at + i])
     * for i < n, in rq->out's dtype (y and res index the whole tensor). */
    void (*requant_run)(const qfi_requant *rq, const int32_t *acc, int64_t n, int32_t add, float m,
                        const int8_t *res, void *y, int64_t at);
    /* requant_run of `rows` channels at once: row r is acc + r*acc_stride,
     * its addend add[r], multiplier m[r], outputs at + r*y_stride. */
    void (*requant_rows)(const qfi_requant *rq, const int32_t *acc, int64_t acc_stride, int64_t rows, int64_t n,
                         const int32_t *add, const float *m, const int8_t *res, void *y, int64_t at, int64_t y_stride);
    /* The same with element i of channel i: add[i] (+ add0) and m[i]. */
    void (*requant_cols)(const qfi_requant *rq, const int32_t *acc, int64_t n, int32_t add0, const int32_t *add,
                         const float *m, const int8_t *res, void *y, int64_t at);
    /* r[i] = the bytes x[i], x[plane + i], x[2*plane + i], x[3*plane + i],
     * each ^ 0x80, for i < n: four channels' rows as u8 quads. */
    void (*interleave4)(const uint8_t *x, int64_t plane, int64_t n, uint32_t *r);
    /* The u8 padded plane (hp rows of prow bytes) of an int8 plane x (h x w):
     * x ^ 0x80 at row pt + i, column pl + j, `fill` everywhere else. */
    void (*dw_pad)(const int8_t *x, int64_t h, int64_t w, int64_t pt, int64_t pl, int64_t hp, int64_t prow,
                   uint8_t fill, uint8_t *out);
    /* Rows r < nr of e, n quads each: byte j of quad i of row r is
     * src[r*src_stride + s*i + d*j], the four horizontal taps of output i of
     * a depthwise window (each src row: >= s*n + 3*d + 64 bytes). */
    void (*dw_expand)(const uint8_t *src, int64_t src_stride, int64_t nr, int64_t s, int64_t d, int64_t n,
                      uint8_t *e);
    /* Optional (NULL, or false returned: dw_pad then dw_expand): the
     * expanded rows of dw_pad's plane straight from x, with no padded plane;
     * the same bytes (rows of n quads), padded row r stored as row
     * (r % phases) * ((hp + phases - 1) / phases) + r / phases. */
    bool (*dw_pad_expand)(const int8_t *x, int64_t h, int64_t w, int64_t pt, int64_t pl, int64_t hp, int64_t s,
                          int64_t d, int64_t n, int64_t phases, uint8_t fill, uint8_t *e);
    /* A depthwise plane from expanded quads: acc[oh*wo + i] (oh < ho, i <
     * wo) = sum over window rows r < kh and dwords k < nd of the u8 quad
     * oh*step + off[r] + i + k*kstep of e . the s8 quad w[r*nd + k]. Writes
     * up to 16 elements past the last; reads rows rounded up to 16. */
    void (*dw_plane)(const uint8_t *e, int64_t step, const int64_t *off, int kh, int nd, int64_t kstep,
                     const int32_t *w, int64_t ho, int64_t wo, int32_t *acc);
} qfi_i8_kernels;
const qfi_i8_kernels *qfi_cpu_i8_kernels(qfi_i8_isa isa);
/* The chosen kernels for register blocks reducing `k` bytes a tap (a direct
 * convolution's channels a group, a Gemm's K): tiles only where a tile row
 * holds 4 quads or more (a narrower one wastes most of a TDPBSUD), else the
 * ISA's vector blocks. *quads: the packed reduction (tiles: padded to a
 * multiple of kq with zero weights), *kq: the tiles' group (0: vector blocks). */
const qfi_i8_kernels *qfi_cpu_i8_reduction(int64_t k, int64_t *quads, int64_t *kq);
/* Widest register block of any instance, for buffers sized before the choice. */
#define QFI_I8_MB_MAX 32
#define QFI_I8_CHUNK_MAX 48
#define QFI_I8_WQ_MAX 2

/* The s8 quad q as kernels k's blocks read their broadcast operand, at dst;
 * returns the next quad's place. One word, or (wq 2: the avx2 set, whose
 * products are 16-bit words) q0 and q2 then q1 and q3 as int16 pairs: each
 * word broadcast is then the even or odd bytes' operand as it is, where
 * splitting a word at each use cost three shifts (x86 only: little-endian). */
static inline int32_t *qfi_i8_put_quad(const struct qfi_i8_kernels *k, int32_t *dst, const int8_t q[4])
{
    if (k->wq == 1) {
        memcpy(dst, q, 4);
        return dst + 1;
    }
    const int16_t h[4] = {q[0], q[2], q[1], q[3]};
    memcpy(dst, h, sizeof h);
    return dst + 2;
}

/* AMX (int8_amx.c): whether this CPU and OS run the tiles (asks Linux for
 * them once); the tile blocks of 1 and 2 vectors of 16 positions, 32 rows;
 * the group of quads a reduction of `quads` runs in (at most QFI_I8_TILE_KQ,
 * chosen to pad least: the packed reduction is rounded up to a multiple). */
#define QFI_I8_TILE_KQ 16
#define QFI_I8_TILE_MIN_QUADS 4
bool qfi_cpu_amx_usable(void);
void qfi_cpu_amx_block_1(const qfi_i8_geom *g, const uint8_t *x, const int32_t *w, int32_t *out);
void qfi_cpu_amx_block_2(const qfi_i8_geom *g, const uint8_t *x, const int32_t *w, int32_t *out);
int64_t qfi_cpu_i8_tile_kq(int64_t quads);

/* Conv nodes of precision INT8; runtime/cpu/conv_int8.c. */
qf_status qfi_cpu_conv_int8(const qfi_kernel_args *a);
size_t qfi_cpu_conv_int8_scratch(const qf_graph *g, const qf_node *n, int threads);
qf_status qfi_cpu_conv_int8_prepare(const qf_graph *g, const qf_node *n, void **state);
/* Gemm and MatMul nodes of precision INT8; runtime/cpu/gemm_int8.c. */
qf_status qfi_cpu_gemm_int8(const qfi_kernel_args *a);
/* Scratch and state of an INT8 Gemm or MatMul node (none for other precisions). */
size_t qfi_cpu_gemm_scratch(const qf_graph *g, const qf_node *n);
qf_status qfi_cpu_gemm_prepare(const qf_graph *g, const qf_node *n, void **state);
/* Frees what the INT8 prepares built (one allocation each). */
void qfi_cpu_int8_release(void *state);

/* ---- FP16 and INT8 through FP32 kernels (runtime/cpu/lowp.c) ----------------------
 * Nodes of FP32 arithmetic at FP16 or INT8 precision (qfi_node_f32_view) run
 * the FP32 kernel on the f32 view of the graph: f16 and int8 inputs are
 * widened into staging buffers (f16 exactly, int8 as q*scale) and outputs
 * rounded back to half, or quantized with the output's scale. That is FP16
 * storage with FP32 arithmetic, and exact for the INT8 ops that only move or
 * select values (max-pool, concat, reshape, ...). */
/* Whether the wrapper runs node n: a qfi_node_f32_view node, except one that
 * only moves elements (Concat, Slice, Split, Transpose, the reshapes) of one
 * stored dtype and scale, which its kernel moves as they are, and the float
 * binary ops and half average pools whose kernels widen their inputs a
 * piece at a time (qfi_cpu_binary_takes_stored,
 * qfi_cpu_global_pool_takes_stored). */
bool qfi_cpu_lowp_wraps(const qf_graph *g, const qf_node *n);
/* Whether the binary kernel runs FP16/INT8 node n itself on its stored
 * values (Add, Sub, Mul, Div, PRelu, Pow of f32, f16 or scaled int8 values),
 * widening them a piece of a row at a time with the wrapper's conversions. */
bool qfi_cpu_binary_takes_stored(const qf_graph *g, const qf_node *n);
/* The same for an FP16 GlobalAveragePool of a half input (global_pool.c). */
bool qfi_cpu_global_pool_takes_stored(const qf_graph *g, const qf_node *n);
/* *out stays NULL when no node needs the wrapper. FP16 constants are widened
 * once, here. `only` (NULL: every node) limits it to the nodes it marks
 * true: the CUDA engine's host nodes (runtime/cuda/host.cu). */
qf_status qfi_cpu_lowp_create(const qf_graph *g, const bool *only, qfi_cpu_lowp **out);
void qfi_cpu_lowp_free(qfi_cpu_lowp *lp);
/* The graph node n's kernel must be given: the f32 view if n is wrapped, else g. */
const qf_graph *qfi_cpu_lowp_graph(const qfi_cpu_lowp *lp, const qf_graph *g, const qf_node *n);
/* Runs a wrapped node; `a` carries the real graph and the engine's pointers. */
qf_status qfi_cpu_lowp_run(qfi_cpu_lowp *lp, const qfi_kernel_args *a);

/* ---- fused FP16 attention (runtime/cpu/attention.c) --------------------------------
 * A chain lib/attention.h found, run as one kernel where its first MatMul
 * runs: reads Q, K^T, V and the bias operands, writes the chain's output;
 * the scores are never stored. `data`: the engine's pointer of each value. */
typedef struct qfi_cpu_attention qfi_cpu_attention;
struct qfi_attention_chain;
qf_status qfi_cpu_attention_create(const qf_graph *g, const struct qfi_attention_chain *ch, qfi_cpu_attention **out);
void qfi_cpu_attention_free(qfi_cpu_attention *a);
qf_status qfi_cpu_attention_run(const qfi_cpu_attention *a, void *const *data, int threads);

#endif
