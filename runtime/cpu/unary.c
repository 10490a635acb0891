/* CPU kernel of the elementwise activations and functions (Relu, LeakyRelu,
 * Clip, Sigmoid, HardSigmoid, HardSwish, Tanh, Erf, Gelu, Sqrt),
 * split into chunks across threads. */
#include <math.h>
#include <string.h>
#include "kernels.h"
#include "ops/tensor_ops.h"
#include "float_math.h" /* Sigmoid, Tanh, Erf, Gelu: as the CUDA engine computes them, in lane forms */

typedef struct unary_job {
    const qf_node *n;
    const qfi_unary_params *p;
    qf_dtype dt;
    const void *x;
    void *y;
    const void *lo, *hi; /* Clip bounds given as inputs (opset >= 11), or NULL */
    int64_t total, chunk;
} unary_job;

/* Compiled per ISA: 16 floats a step on AVX-512 (the baseline build
 * vectorizes only 4 wide). */
QFI_SIMD_CLONES void qfi_cpu_epilogue_floats(const qfi_cpu_epilogue *e, const float *x, float *y, int64_t n)
{
    if (e->relu) {
        for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
        x = y;
    } else if (e->clip) {
        const float lo = e->lo, hi = e->hi;
        /* max then min: when lo > hi every element becomes hi, as the spec says */
        for (int64_t i = 0; i < n; i++) {
            float v = x[i] < lo ? lo : x[i];
            y[i] = v > hi ? hi : v;
        }
        x = y;
    }
    switch (e->act) {
    case QF_ACT_SIGMOID:
        for (int64_t i = 0; i < n; i++) y[i] = qfi_sigmoid(x[i]);
        break;
    case QF_ACT_SILU: /* Mul(x, Sigmoid(x)): the sigmoid rounded to float, then the product */
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * qfi_sigmoid(x[i]);
        break;
    case QF_ACT_HARD_SWISH:
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * qfi_hard_sigmoid(x[i], e->alpha, e->beta);
        break;
    default:
        if (x != y) memcpy(y, x, (size_t)n * sizeof *y);
    }
}

/* Compiled per ISA, as the epilogues above. */
QFI_SIMD_CLONES static void run_f32(const unary_job *j, const float *x, float *y, int64_t n)
{
    const qfi_unary_params *p = j->p;
    switch (j->n->op) {
    case QF_OP_RELU: qfi_cpu_epilogue_floats(&(qfi_cpu_epilogue){.relu = true}, x, y, n); break;
    case QF_OP_LEAKY_RELU:
        for (int64_t i = 0; i < n; i++) y[i] = x[i] >= 0.0f ? x[i] : x[i] * p->alpha;
        break;
    case QF_OP_CLIP: {
        const qfi_cpu_epilogue c = {
            .clip = true, .lo = j->lo ? *(const float *)j->lo : p->lo, .hi = j->hi ? *(const float *)j->hi : p->hi};
        qfi_cpu_epilogue_floats(&c, x, y, n);
        break;
    }
    case QF_OP_SIGMOID: qfi_cpu_epilogue_floats(&(qfi_cpu_epilogue){.act = QF_ACT_SIGMOID}, x, y, n); break;
    case QF_OP_HARD_SIGMOID:
        for (int64_t i = 0; i < n; i++) y[i] = qfi_hard_sigmoid(x[i], p->alpha, p->beta);
        break;
    case QF_OP_HARD_SWISH:
        qfi_cpu_epilogue_floats(&(qfi_cpu_epilogue){.act = QF_ACT_HARD_SWISH, .alpha = p->alpha, .beta = p->beta}, x, y, n);
        break;
    case QF_OP_TANH:
        for (int64_t i = 0; i < n; i++) y[i] = qfi_tanh_lanes(x[i]);
        break;
    case QF_OP_ERF:
        for (int64_t i = 0; i < n; i++) y[i] = qfi_erf_lanes(x[i]);
        break;
    case QF_OP_GELU:
        for (int64_t i = 0; i < n; i++) y[i] = qfi_gelu_lanes(x[i], p->tanh_approx);
        break;
    case QF_OP_SQRT: /* correctly rounded in IEEE arithmetic, as CUDA's sqrtf */
        for (int64_t i = 0; i < n; i++) y[i] = sqrtf(x[i]);
        break;
    default: QF_ASSERT(!"unary kernel called for another op");
    }
}

/* Relu and Clip on integer tensors; the bounds come from inputs of X's type. */
#define RUN_INT(name, T, TMIN, TMAX)                                             \
    static void name(const unary_job *j, const T *x, T *y, int64_t n)           \
    {                                                                            \
        T lo = 0, hi = TMAX;                                                     \
        if (j->n->op == QF_OP_CLIP) {                                            \
            lo = j->lo ? *(const T *)j->lo : TMIN;                               \
            hi = j->hi ? *(const T *)j->hi : TMAX;                               \
        }                                                                        \
        for (int64_t i = 0; i < n; i++) {                                        \
            T v = x[i] < lo ? lo : x[i];                                         \
            y[i] = v > hi ? hi : v;                                              \
        }                                                                        \
    }
RUN_INT(run_i8, int8_t, INT8_MIN, INT8_MAX)
RUN_INT(run_u8, uint8_t, 0, UINT8_MAX)
RUN_INT(run_i32, int32_t, INT32_MIN, INT32_MAX)
RUN_INT(run_i64, int64_t, INT64_MIN, INT64_MAX)

static void unary_chunk(void *arg, int64_t task)
{
    const unary_job *j = arg;
    int64_t lo = task * j->chunk;
    int64_t n = lo + j->chunk < j->total ? j->chunk : j->total - lo;
    switch (j->dt) {
    case QF_F32: run_f32(j, (const float *)j->x + lo, (float *)j->y + lo, n); break;
    case QF_I8: run_i8(j, (const int8_t *)j->x + lo, (int8_t *)j->y + lo, n); break;
    case QF_U8: run_u8(j, (const uint8_t *)j->x + lo, (uint8_t *)j->y + lo, n); break;
    case QF_I32: run_i32(j, (const int32_t *)j->x + lo, (int32_t *)j->y + lo, n); break;
    case QF_I64: run_i64(j, (const int64_t *)j->x + lo, (int64_t *)j->y + lo, n); break;
    default: QF_ASSERT(!"dtype rejected by qfi_unary_infer");
    }
}

static qf_status unary_run(const qfi_kernel_args *a)
{
    const qf_node *n = a->n;
    const qf_value *x = qfi_in(a->g, n, 0);
    unary_job j = {.n = n, .p = n->params, .dt = x->dtype, .x = a->in[0], .y = a->out[0]};
    if (n->op == QF_OP_CLIP)
        for (int k = 1; k < 3; k++)
            if (qfi_clip_bound(a->g, n, k)) *(k == 1 ? &j.lo : &j.hi) = a->in[k];
    j.total = qf_value_numel(x);
    j.chunk = 1 << 15;
    int64_t tasks = (j.total + j.chunk - 1) / j.chunk;
    if (tasks == 1)
        unary_chunk(&j, 0);
    else if (tasks > 1)
        qfi_parallel_for(a->threads, tasks, unary_chunk, &j);
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_unary = {.run = unary_run};
