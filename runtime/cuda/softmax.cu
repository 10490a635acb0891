/* Softmax on the device over x viewed as (outer, len, inner), normalized
 * along len: the row max subtracted first, the sum in double, e^x from
 * lib/float_math.h, as runtime/cpu/softmax.c computes it; one warp per row
 * along the last axis (rows of up to 512 held in registers), one thread per
 * row otherwise. */
#include "cuda_internal.h"
#include "float_math.h" /* e^x as the CPU engine computes it */

typedef struct softmax_geo {
    int64_t outer, len, inner;
} softmax_geo;

__global__ void softmax_kernel(void *y, cu_elem ye, const void *x, cu_elem xe, softmax_geo p)
{
    int64_t rows = p.outer * p.inner;
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows; r += (int64_t)gridDim.x * blockDim.x) {
        int64_t o = r / p.inner, i = r % p.inner;
        int64_t base = o * p.len * p.inner + i; /* len elements, `inner` apart */
        float mx = -INFINITY;
        for (int64_t l = 0; l < p.len; l++) {
            float v = cu_load(x, xe, base + l * p.inner);
            if (v > mx) mx = v;
        }
        double sum = 0.0;
        for (int64_t l = 0; l < p.len; l++) sum += qfi_exp(__fsub_rn(cu_load(x, xe, base + l * p.inner), mx));
        float inv = (float)(1.0 / sum);
        for (int64_t l = 0; l < p.len; l++) {
            float e = qfi_exp(__fsub_rn(cu_load(x, xe, base + l * p.inner), mx));
            cu_store(y, ye, base + l * p.inner, __fmul_rn(e, inv));
        }
    }
}

/* The last axis (inner == 1: attention's scores), one warp per row: the
 * lanes stride along the row and reduce by shuffles, the sum still in double,
 * so it differs from the one-thread order only in how double rounds (a float
 * result one unit apart at most, rarely). */
__global__ void softmax_rows_kernel(void *y, cu_elem ye, const void *x, cu_elem xe, int64_t rows, int64_t len)
{
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t r = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32; r < rows; r += warps) {
        const int64_t base = r * len;
        float mx = -INFINITY;
        for (int64_t l = lane; l < len; l += 32) mx = fmaxf(mx, cu_load(x, xe, base + l));
        for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        double sum = 0.0;
        for (int64_t l = lane; l < len; l += 32) sum += qfi_exp(__fsub_rn(cu_load(x, xe, base + l), mx));
        for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        const float inv = (float)(1.0 / sum);
        for (int64_t l = lane; l < len; l += 32)
            cu_store(y, ye, base + l, __fmul_rn(qfi_exp(__fsub_rn(cu_load(x, xe, base + l), mx)), inv));
    }
}

/* Rows of at most 32 * PER elements (attention's 49 to 197 tokens): the row
 * read once into registers and each e^x computed once, kept for the output;
 * the same operations as softmax_rows_kernel. */
template <int PER>
__global__ void softmax_rows_reg_kernel(void *y, cu_elem ye, const void *x, cu_elem xe, int64_t rows, int64_t len)
{
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t r = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32; r < rows; r += warps) {
        const int64_t base = r * len;
        float v[PER];
        float mx = -INFINITY;
#pragma unroll
        for (int k = 0; k < PER; k++) {
            const int64_t l = lane + 32 * k;
            v[k] = l < len ? cu_load(x, xe, base + l) : -INFINITY;
            mx = fmaxf(mx, v[k]);
        }
        for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        double sum = 0.0;
#pragma unroll
        for (int k = 0; k < PER; k++)
            if (lane + 32 * k < len) {
                v[k] = qfi_exp(__fsub_rn(v[k], mx));
                sum += v[k];
            }
        for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        const float inv = (float)(1.0 / sum);
#pragma unroll
        for (int k = 0; k < PER; k++)
            if (lane + 32 * k < len) cu_store(y, ye, base + lane + 32 * k, __fmul_rn(v[k], inv));
    }
}

/* Float-like tensors. */
static qf_status softmax_check(const qf_graph *g, const qf_node *n)
{
    const qf_value *x = qfi_in(g, n, 0), *y = qfi_out(g, n, 0);
    if (!cu_float_like(g, n, x) || !cu_float_like(g, n, y))
        return qf_error(QF_ERR_UNSUPPORTED, "input %s of dtype %s", x->name, qf_dtype_info(x->dtype)->name);
    return QF_OK;
}

static qf_status softmax_prepare(cu_engine *c, cu_layer *L)
{
    const qf_node *n = L->n;
    softmax_geo *p = (softmax_geo *)qfi_calloc(1, sizeof *p);
    if (!p) return QF_ERR_NOMEM;
    L->state = p;
    QF_CHECK(qfi_softmax_geometry(cu_geo_graph(c, n), n, &p->outer, &p->len, &p->inner));
    cu_need_input_as(c, L, 0, CU_LOGICAL);
    void *ptr;
    return cu_value_ptr(c, n->in[0], &ptr);
}

static qf_status softmax_launch(cu_engine *c, cu_layer *L, cudaStream_t s)
{
    const softmax_geo *p = (const softmax_geo *)L->state;
    int yv = cu_out_value(L, 0);
    const void *x;
    void *y;
    QF_CHECK(cu_input_as(c, L, 0, CU_LOGICAL, s, &x));
    QF_CHECK(cu_value_ptr(c, yv, &y));
    int64_t rows = p->outer * p->inner;
    if (!rows || !p->len) return QF_OK;
    if (p->inner == 1 && p->len >= 32) {
        unsigned blocks = cu_blocks(rows, 8); /* 8 warps a block */
        if (blocks > 65536) blocks = 65536;
        const cu_elem ye = cu_elem_of(c, L->n, yv), xe = cu_elem_of(c, L->n, L->n->in[0]);
        if (p->len <= 32 * 16) {
            if (p->len <= 32 * 2) softmax_rows_reg_kernel<2><<<blocks, 256, 0, s>>>(y, ye, x, xe, rows, p->len);
            else if (p->len <= 32 * 4) softmax_rows_reg_kernel<4><<<blocks, 256, 0, s>>>(y, ye, x, xe, rows, p->len);
            else if (p->len <= 32 * 8) softmax_rows_reg_kernel<8><<<blocks, 256, 0, s>>>(y, ye, x, xe, rows, p->len);
            else softmax_rows_reg_kernel<16><<<blocks, 256, 0, s>>>(y, ye, x, xe, rows, p->len);
            CU_LAUNCHED();
            return QF_OK;
        }
        softmax_rows_kernel<<<blocks, 256, 0, s>>>(y, ye, x, xe, rows, p->len);
        CU_LAUNCHED();
        return QF_OK;
    }
    unsigned blocks = cu_blocks(rows, 128);
    softmax_kernel<<<blocks > 65536 ? 65536 : blocks, 128, 0, s>>>(y, cu_elem_of(c, L->n, yv), x,
                                                                    cu_elem_of(c, L->n, L->n->in[0]), *p);
    CU_LAUNCHED();
    return QF_OK;
}

const cu_op cu_op_softmax = {softmax_prepare, NULL, softmax_launch, CU_RULE_LOGICAL, CU_ALL_PRECISIONS, softmax_check};
