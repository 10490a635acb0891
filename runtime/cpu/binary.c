/* CPU kernel of Add, Sub, Mul, Div, Mod (f32, i32, i64, i8, u8), PRelu and
 * Pow (f32) with numpy broadcasting. Dims are coalesced first so the common cases (equal
 * shapes, a per-channel (1,C,1,1) operand, a scalar) run as long inner rows. */
#include <math.h>
#include "kernels.h"
#include "ops/tensor_ops.h"

/* One output row: o[i] = a[i*sa] op b[i*sb], strides in elements (0 = broadcast). */
typedef void (*row_fn)(const void *a, int64_t sa, const void *b, int64_t sb, void *o, int64_t n);

#define ROW(name, T, expr)                                                                \
    static void name(const void *pa, int64_t sa, const void *pb, int64_t sb, void *po, int64_t n) \
    {                                                                                     \
        const T *a = pa, *b = pb;                                                         \
        T *o = po;                                                                        \
        for (int64_t i = 0; i < n; i++) {                                                 \
            T x = a[i * sa], y = b[i * sb];                                               \
            o[i] = (expr);                                                                \
        }                                                                                 \
    }

/* Integer arithmetic wraps (two's complement) as numpy and ONNX Runtime do;
 * going through the unsigned type keeps C's signed overflow out of it. */
#define WRAP(T, UT, e) ((T)(UT)(e))

static inline int32_t div_i32(int32_t x, int32_t y)
{
    if (y == 0) return 0; /* undefined in ONNX; numpy also yields 0 */
    if (y == -1) return (int32_t)(0u - (uint32_t)x); /* INT32_MIN / -1 wraps */
    return x / y;
}
static inline int64_t div_i64(int64_t x, int64_t y)
{
    if (y == 0) return 0;
    if (y == -1) return (int64_t)(0u - (uint64_t)x);
    return x / y;
}

/* Mod with fmod 0: the remainder takes the divisor's sign (Python's %); 0 for a 0 divisor */
#define PYMOD(T, x, y) ((y) == 0 ? (T)0 : (T)(((x) % (y) != 0 && (((x) % (y) < 0) != ((y) < 0))) ? (x) % (y) + (y) : (x) % (y)))
static inline int64_t pymod_i64(int64_t x, int64_t y) { return y == -1 ? 0 : PYMOD(int64_t, x, y); }
static inline int32_t pymod_i32(int32_t x, int32_t y) { return y == -1 ? 0 : PYMOD(int32_t, x, y); }
/* fmod 1: C's remainder (the dividend's sign) */
static inline int64_t cmod_i64(int64_t x, int64_t y) { return y == 0 || y == -1 ? 0 : x % y; }
static inline int32_t cmod_i32(int32_t x, int32_t y) { return y == 0 || y == -1 ? 0 : x % y; }

ROW(add_f32, float, x + y)
ROW(sub_f32, float, x - y)
ROW(mul_f32, float, x * y)
ROW(div_f32, float, x / y)
ROW(prelu_f32, float, x < 0.0f ? x * y : x)
ROW(pow_f32, float, powf(x, y))
ROW(add_i32, int32_t, WRAP(int32_t, uint32_t, (uint32_t)x + (uint32_t)y))
ROW(sub_i32, int32_t, WRAP(int32_t, uint32_t, (uint32_t)x - (uint32_t)y))
ROW(mul_i32, int32_t, WRAP(int32_t, uint32_t, (uint32_t)x * (uint32_t)y))
ROW(div_i32r, int32_t, div_i32(x, y))
ROW(add_i64, int64_t, WRAP(int64_t, uint64_t, (uint64_t)x + (uint64_t)y))
ROW(sub_i64, int64_t, WRAP(int64_t, uint64_t, (uint64_t)x - (uint64_t)y))
ROW(mul_i64, int64_t, WRAP(int64_t, uint64_t, (uint64_t)x * (uint64_t)y))
ROW(div_i64r, int64_t, div_i64(x, y))
/* 8-bit operands promote to int, where nothing overflows; the store wraps */
ROW(add_i8, int8_t, WRAP(int8_t, uint8_t, x + y))
ROW(sub_i8, int8_t, WRAP(int8_t, uint8_t, x - y))
ROW(mul_i8, int8_t, WRAP(int8_t, uint8_t, x * y))
ROW(div_i8, int8_t, WRAP(int8_t, uint8_t, y ? x / y : 0))
ROW(fmod_f32, float, fmodf(x, y))
ROW(pymod_i32r, int32_t, pymod_i32(x, y))
ROW(pymod_i64r, int64_t, pymod_i64(x, y))
ROW(pymod_i8, int8_t, (int8_t)pymod_i32(x, y))
ROW(pymod_u8, uint8_t, (uint8_t)(y ? x % y : 0))
ROW(cmod_i32r, int32_t, cmod_i32(x, y))
ROW(cmod_i64r, int64_t, cmod_i64(x, y))
ROW(cmod_i8, int8_t, (int8_t)cmod_i32(x, y))
ROW(add_u8, uint8_t, (uint8_t)(x + y))
ROW(sub_u8, uint8_t, (uint8_t)(x - y))
ROW(mul_u8, uint8_t, (uint8_t)(x * y))
ROW(div_u8, uint8_t, (uint8_t)(y ? x / y : 0))

enum { ADD, SUB, MUL, DIV, PRELU, POW, PYMOD, CMOD, N_BIN };

static const row_fn rows[N_BIN][QF_DTYPE_COUNT] = {
    [ADD] = {[QF_F32] = add_f32, [QF_I32] = add_i32, [QF_I64] = add_i64, [QF_I8] = add_i8, [QF_U8] = add_u8},
    [SUB] = {[QF_F32] = sub_f32, [QF_I32] = sub_i32, [QF_I64] = sub_i64, [QF_I8] = sub_i8, [QF_U8] = sub_u8},
    [MUL] = {[QF_F32] = mul_f32, [QF_I32] = mul_i32, [QF_I64] = mul_i64, [QF_I8] = mul_i8, [QF_U8] = mul_u8},
    [DIV] = {[QF_F32] = div_f32, [QF_I32] = div_i32r, [QF_I64] = div_i64r, [QF_I8] = div_i8, [QF_U8] = div_u8},
    [PRELU] = {[QF_F32] = prelu_f32},
    [POW] = {[QF_F32] = pow_f32},
    [PYMOD] = {[QF_I32] = pymod_i32r, [QF_I64] = pymod_i64r, [QF_I8] = pymod_i8, [QF_U8] = pymod_u8},
    [CMOD] = {[QF_F32] = fmod_f32, [QF_I32] = cmod_i32r, [QF_I64] = cmod_i64r, [QF_I8] = cmod_i8, [QF_U8] = pymod_u8},
};

/* The float ops, which FP16 and INT8 nodes compute in f32. */
static bool float_op(qf_op op)
{
    return op == QF_OP_ADD || op == QF_OP_SUB || op == QF_OP_MUL || op == QF_OP_DIV || op == QF_OP_PRELU ||
           op == QF_OP_POW;
}

static bool storable(const qf_value *v)
{
    return v->dtype == QF_F32 || v->dtype == QF_F16 || (v->dtype == QF_I8 && v->scale > 0.0f);
}

bool qfi_cpu_binary_takes_stored(const qf_graph *g, const qf_node *n)
{
    if (!float_op(n->op) || n->n_in != 2 || n->n_out != 1 || n->out[0] < 0) return false;
    for (int k = 0; k < 2; k++)
        if (n->in[k] < 0 || !storable(&g->values[n->in[k]])) return false;
    return storable(&g->values[n->out[0]]);
}

/* A broadcast walk over the output, split into chunks of flat indices. */
typedef struct walk {
    row_fn fn;
    const char *a, *b;
    char *o;
    size_t esa, esb, eso; /* element sizes */
    bool stored;          /* an FP16 or INT8 node: fn is the f32 row, operands as in sa_, sb_, so_ */
    qfi_cpu_stored sa_, sb_, so_;
    int nd; /* >= 1 after coalescing */
    int64_t dims[QF_MAX_DIMS], sa[QF_MAX_DIMS], sb[QF_MAX_DIMS];
    int64_t total, chunk;
} walk;

/* One output row of an FP16 or INT8 node (an operand's stride along a row is
 * 1, or 0 where it broadcasts), a piece at a time through f32 on
 * the stack: one pass over the stored values where the wrapper made three
 * over whole f32 copies (EfficientNet-B0's squeeze-excitation gate Muls,
 * half in, int8 out). */
static void stored_row(const walk *w, const char *a, int64_t sa, const char *b, int64_t sb, char *o, int64_t n)
{
    enum { PIECE = 256 };
    float fa[PIECE], fb[PIECE], fo[PIECE];
    for (int64_t i = 0; i < n; i += PIECE) {
        const int64_t m = n - i < PIECE ? n - i : PIECE;
        qfi_cpu_widen(&w->sa_, a + i * sa * (int64_t)w->esa, fa, sa ? m : 1);
        qfi_cpu_widen(&w->sb_, b + i * sb * (int64_t)w->esb, fb, sb ? m : 1);
        w->fn(fa, sa ? 1 : 0, fb, sb ? 1 : 0, fo, m);
        qfi_cpu_narrow(&w->so_, fo, o + i * (int64_t)w->eso, m);
    }
}

static void walk_chunk(void *arg, int64_t task)
{
    const walk *w = arg;
    int last = w->nd - 1;
    int64_t lo = task * w->chunk;
    int64_t hi = lo + w->chunk < w->total ? lo + w->chunk : w->total;
    int64_t idx[QF_MAX_DIMS], offa = 0, offb = 0, rem = lo;
    for (int d = last; d >= 0; d--) {
        idx[d] = rem % w->dims[d];
        rem /= w->dims[d];
        offa += idx[d] * w->sa[d];
        offb += idx[d] * w->sb[d];
    }
    for (int64_t pos = lo; pos < hi;) {
        int64_t len = w->dims[last] - idx[last];
        if (len > hi - pos) len = hi - pos;
        const char *ra = w->a + offa * (int64_t)w->esa, *rb = w->b + offb * (int64_t)w->esb;
        char *ro = w->o + pos * (int64_t)w->eso;
        if (w->stored) stored_row(w, ra, w->sa[last], rb, w->sb[last], ro, len);
        else w->fn(ra, w->sa[last], rb, w->sb[last], ro, len);
        pos += len;
        idx[last] += len;
        offa += len * w->sa[last];
        offb += len * w->sb[last];
        for (int d = last; d > 0 && idx[d] == w->dims[d]; d--) { /* carry */
            idx[d] = 0;
            offa += w->sa[d - 1] - w->dims[d] * w->sa[d];
            offb += w->sb[d - 1] - w->dims[d] * w->sb[d];
            idx[d - 1]++;
        }
    }
}

static qf_status binary_run(const qfi_kernel_args *a)
{
    const qf_node *n = a->n;
    const qf_value *x = qfi_in(a->g, n, 0), *y = qfi_in(a->g, n, 1), *z = qfi_out(a->g, n, 0);
    int op;
    switch (n->op) {
    case QF_OP_ADD: op = ADD; break;
    case QF_OP_SUB: op = SUB; break;
    case QF_OP_MUL: op = MUL; break;
    case QF_OP_DIV: op = DIV; break;
    case QF_OP_PRELU: op = PRELU; break;
    case QF_OP_POW: op = POW; break;
    case QF_OP_MOD: op = ((const qfi_mod_params *)n->params)->fmod ? CMOD : PYMOD; break;
    default: QF_ASSERT(!"binary kernel called for another op"); return QF_ERR_INVALID;
    }
    /* an FP16 or INT8 node the wrapper left to this kernel (qfi_cpu_lowp_wraps);
     * through the wrapper (f32 labels) or of other dtypes (an int64 shape
     * product) it runs the rows of its dtype as at FP32 */
    const bool st = qfi_node_f32_view(n) && qfi_cpu_binary_takes_stored(a->g, n) &&
                    (x->dtype != QF_F32 || y->dtype != QF_F32 || z->dtype != QF_F32);
    walk w = {.fn = rows[op][st ? QF_F32 : z->dtype], .a = a->in[0], .b = a->in[1], .o = a->out[0], .stored = st};
    if (!w.fn) return qf_error(QF_ERR_UNSUPPORTED, "no CPU kernel for dtype %s", qf_dtype_info(z->dtype)->name);
    w.esa = qf_dtype_info(x->dtype)->size, w.esb = qf_dtype_info(y->dtype)->size, w.eso = qf_dtype_info(z->dtype)->size;
    if (st) {
        w.sa_ = (qfi_cpu_stored){x->dtype, x->scale, x->zero_point};
        w.sb_ = (qfi_cpu_stored){y->dtype, y->scale, y->zero_point};
        w.so_ = (qfi_cpu_stored){z->dtype, z->scale, z->zero_point};
    }
    w.total = qf_value_numel(z);
    if (w.total == 0) return QF_OK;
    /* an omitted operand (a node given "" for an input) has no data to broadcast */
    if (!w.a || !w.b) return qf_error(QF_ERR_INVALID, "node %s: an input has no data", n->name);

    int64_t sa[QF_MAX_DIMS], sb[QF_MAX_DIMS];
    qfi_broadcast_strides(x->ndim, x->dims, z->ndim, z->dims, sa);
    qfi_broadcast_strides(y->ndim, y->dims, z->ndim, z->dims, sb);
    /* coalesce: drop unit dims, merge a dim into the next when both operands
     * step through the pair as through one dim */
    for (int i = 0; i < z->ndim; i++) {
        if (z->dims[i] == 1) continue;
        int k = w.nd - 1;
        if (k >= 0 && w.sa[k] == sa[i] * z->dims[i] && w.sb[k] == sb[i] * z->dims[i]) {
            w.dims[k] *= z->dims[i];
            w.sa[k] = sa[i];
            w.sb[k] = sb[i];
            continue;
        }
        w.dims[w.nd] = z->dims[i];
        w.sa[w.nd] = sa[i];
        w.sb[w.nd] = sb[i];
        w.nd++;
    }
    if (w.nd == 0) { /* every dim is 1: one element */
        w.dims[0] = 1;
        w.sa[0] = w.sb[0] = 0;
        w.nd = 1;
    }
    w.chunk = 1 << 15;
    int64_t tasks = (w.total + w.chunk - 1) / w.chunk;
    if (tasks == 1)
        walk_chunk(&w, 0);
    else
        qfi_parallel_for(a->threads, tasks, walk_chunk, &w);
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_binary = {.run = binary_run};
