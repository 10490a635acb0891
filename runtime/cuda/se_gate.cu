/* A squeeze-excitation gate in one kernel: GlobalAveragePool -> Conv ->
 * Conv [-> Sigmoid | HardSigmoid] over halves, a block per image (fusion.cu's
 * cu_fuse_se_gates finds the chain). Unfused it took a pool, two vector
 * convs and an activation pass after each (five kernels for EfficientNet's
 * SiLU/Sigmoid gate, each a launch over a few hundred bytes an image).
 *
 * The numbers are the unfused layers', bit for bit, so the CPU engine's too:
 *  - the pool sums in double (exact for int8 levels and halves, whatever
 *    the order: pool.cu) and rounds the mean to half, the pool's output;
 *  - each conv output is summed in double in channel order from its bias,
 *    rounded to float, Relu'd and clipped, rounded to half (conv_vector.cu),
 *    then its fused activation as cu_act_inplace computes it, and the gate
 *    node's as its unary kernel does (each rounded to half).
 *
 * The first conv's sums are chains of C dependent adds, one thread each
 * (M1 <= 256 of them); its weights, [C][M1], stream through shared memory
 * in slices of channels by cp.async, three slices in flight while the
 * chains run on a fourth. The second conv's M2 outputs are short chains
 * (M1 terms), eight a thread, their weights [M1][M2] read straight from
 * global memory, 16 bytes a load. */
#include "cuda_internal.h"

namespace {

constexpr int TPB = CU_SE_THREADS;
/* shared memory: the pool's partial sums, then the first conv's NSTAGE
 * weight slices; the pooled channels and the squeezed ones after them as floats */
constexpr int STAGE_BYTES = 16 * 1024;
constexpr int NSTAGE = 4;                          /* first-conv weight slices in shared memory */
constexpr int SLICE_BYTES = STAGE_BYTES / NSTAGE;

struct se_params {
    int S, C, M1, M2;         /* positions an image, pooled channels, squeezed, gate outputs */
    int ct;                   /* channels of w1 a slice (a multiple of 8: slices start 16-byte aligned) */
    cu_elem xe;               /* the pool's input: int8 levels or halves */
    const __half *w1, *b1;    /* [C][M1], [M1] or NULL */
    const __half *w2, *b2;    /* [M1][M2], [M2] or NULL */
    bool relu[2];
    float lo[2], hi[2];
    bool has_act[2];
    cu_unary_params act[2];   /* each conv's fused activation (cu_act_params) */
    bool has_gate;
    cu_unary_params gate;     /* the trailing gate node's */
};

__device__ __forceinline__ float half_round(float v) { return __half2float(__float2half_rn(v)); }

/* A conv output's sum to the half its layer (and fused activation) stores. */
__device__ __forceinline__ float conv_out(const se_params &p, int k, double acc)
{
    float v = (float)acc;
    if (p.relu[k]) v = v > 0.0f ? v : 0.0f;
    v = v < p.lo[k] ? p.lo[k] : v;
    v = v > p.hi[k] ? p.hi[k] : v;
    v = half_round(v);
    return p.has_act[k] ? half_round(cu_unary_value(p.act[k], v)) : v;
}

/* xs[c] = the pooled mean of channel c of this image, as its half. V
 * channels a thread (one load of V lanes per position), TPB / (C / V)
 * threads down the positions of each column when it has fewer than TPB. */
template <typename TX, int V>
__device__ void pool_image(const se_params &p, const TX *x, double *part, float *xs)
{
    const int tid = threadIdx.x, Cv = p.C / V;
    const double S = (double)p.S;
    if (Cv >= TPB) {
        for (int cv = tid; cv < Cv; cv += TPB) {
            double acc[V] = {};
            for (int s = 0; s < p.S; s++) {
                cu_vec<TX, V> v;
                v.load(x, s * Cv + cv);
#pragma unroll
                for (int j = 0; j < V; j++) acc[j] += cu_lane_in(v.e[j], p.xe);
            }
#pragma unroll
            for (int j = 0; j < V; j++) xs[cv * V + j] = half_round(p.S ? (float)(acc[j] / S) : 0.0f);
        }
        return;
    }
    const int rows = TPB / Cv, cv = tid % Cv, r = tid / Cv;
    double acc[V] = {};
    if (r < rows) {
        int s = r;
        /* four loads in flight a thread: a block per image must keep enough
         * of them outstanding to stream the tensor */
        for (; s + 3 * rows < p.S; s += 4 * rows) {
            cu_vec<TX, V> v[4];
#pragma unroll
            for (int u = 0; u < 4; u++) v[u].load(x, (s + u * rows) * Cv + cv);
#pragma unroll
            for (int u = 0; u < 4; u++)
#pragma unroll
                for (int j = 0; j < V; j++) acc[j] += cu_lane_in(v[u].e[j], p.xe);
        }
        for (; s < p.S; s += rows) {
            cu_vec<TX, V> v;
            v.load(x, s * Cv + cv);
#pragma unroll
            for (int j = 0; j < V; j++) acc[j] += cu_lane_in(v.e[j], p.xe);
        }
#pragma unroll
        for (int j = 0; j < V; j++) part[r * p.C + cv * V + j] = acc[j];
    }
    __syncthreads();
    for (int c = tid; c < p.C; c += TPB) {
        double sum = 0.0;
        for (int k = 0; k < rows; k++) sum += part[k * p.C + c];
        xs[c] = half_round(p.S ? (float)(sum / S) : 0.0f);
    }
}

/* Slice k of w1 (channels k*ct on, all M1 outputs: contiguous) into buf,
 * as one cp.async group (an empty one past the last slice, so that every
 * step commits one). */
__device__ __forceinline__ void stage_w1(const se_params &p, int k, __half *buf)
{
    const int c0 = k * p.ct, cn = min(p.ct, p.C - c0);
    const int bytes = cn > 0 ? cn * p.M1 * (int)sizeof(__half) : 0;
    const char *src = (const char *)(p.w1 + (int64_t)c0 * p.M1);
    for (int off = threadIdx.x * 16; off < bytes; off += TPB * 16)
        cp_async16_head(smem_addr((char *)buf + off), src + off, min(16, bytes - off));
    cp_async_commit();
}

/* The second conv's outputs m .. m + V - 1 and the gate into yi: V chains
 * of M1 terms, the weights [M1][M2] read V halves a load. */
template <int V>
__device__ __forceinline__ void gate_outputs(const se_params &p, const float *hs, int m, __half *yi)
{
    double a[V];
    cu_vec<__half, V> b;
    if (p.b2) b.load(p.b2 + m);
#pragma unroll
    for (int j = 0; j < V; j++) a[j] = p.b2 ? (double)__half2float(b.e[j]) : 0.0;
    const __half *w = p.w2 + m;
#pragma unroll 8
    for (int k = 0; k < p.M1; k++) {
        cu_vec<__half, V> wk;
        wk.load(w + (int64_t)k * p.M2);
        const double h = hs[k];
#pragma unroll
        for (int j = 0; j < V; j++) a[j] = __dadd_rn(a[j], __dmul_rn((double)__half2float(wk.e[j]), h));
    }
    cu_vec<__half, V> out;
#pragma unroll
    for (int j = 0; j < V; j++) {
        float v = conv_out(p, 1, a[j]);
        if (p.has_gate) v = cu_unary_value(p.gate, v);
        out.e[j] = __float2half_rn(v);
    }
    out.store(yi + m);
}

template <typename TX, int V>
__global__ void __launch_bounds__(TPB) se_gate_kernel(se_params p, const TX *x, __half *y)
{
    extern __shared__ __align__(16) unsigned char sm[];
    double *part = (double *)sm;
    float *xs = (float *)(sm + STAGE_BYTES), *hs = xs + p.C;
    const int n = blockIdx.x, tid = threadIdx.x;
    pool_image<TX, V>(p, x + (int64_t)n * p.S * p.C, part, xs);
    __syncthreads(); /* xs complete; part free for the weight slices */

    /* first conv: thread m sums output m's chain, slice by slice, NSTAGE - 1
     * slices loading while one is summed (a chain step is a few cycles, a
     * slice's trip from L2 a microsecond) */
    const int slices = (p.C + p.ct - 1) / p.ct;
    double acc = tid < p.M1 && p.b1 ? (double)__half2float(p.b1[tid]) : 0.0;
#pragma unroll
    for (int k = 0; k < NSTAGE - 1; k++) stage_w1(p, k, (__half *)(sm + k * SLICE_BYTES));
    for (int k = 0; k < slices; k++) {
        stage_w1(p, k + NSTAGE - 1, (__half *)(sm + (k + NSTAGE - 1) % NSTAGE * SLICE_BYTES));
        cp_async_wait<NSTAGE - 1>(); /* slice k has landed */
        __syncthreads();
        if (tid < p.M1) {
            const __half *w = (const __half *)(sm + k % NSTAGE * SLICE_BYTES) + tid;
            const float *xk = xs + k * p.ct;
            const int cn = min(p.ct, p.C - k * p.ct);
#pragma unroll 8
            for (int c = 0; c < cn; c++)
                acc = __dadd_rn(acc, __dmul_rn((double)__half2float(w[c * p.M1]), (double)xk[c]));
        }
        __syncthreads(); /* this slice's buffer is refilled at the next step */
    }
    cp_async_wait<0>();
    if (tid < p.M1) hs[tid] = conv_out(p, 0, acc);
    __syncthreads();

    /* second conv and the gate: 8 outputs a thread where M2 allows */
    __half *yi = y + (int64_t)n * p.M2;
    if (p.M2 % 8 == 0)
        for (int m = tid * 8; m < p.M2; m += TPB * 8) gate_outputs<8>(p, hs, m, yi);
    else
        for (int m = tid; m < p.M2; m += TPB) gate_outputs<1>(p, hs, m, yi);
}

struct se_state {
    se_params p;
    int N;
    size_t smem;
};

size_t smem_for(int64_t C, int64_t M1) { return (size_t)STAGE_BYTES + (size_t)(C + M1) * sizeof(float); }

/* The conv layer k of the chain (a Conv node, skipped) into p's weights and epilogue. */
qf_status take_conv(cu_engine *c, const cu_layer *L, int k, se_params *p, const __half **w, const __half **b)
{
    const qf_node *n = L->n;
    QF_CHECK(cu_vector_conv_weights(c, n, (void **)w));
    *b = NULL;
    if (n->n_in > 2 && n->in[2] >= 0) QF_CHECK(cu_conv_float_bias(c, n, QF_F16, (void **)b));
    p->relu[k] = L->relu;
    p->lo[k] = L->clip ? L->clip_lo : -INFINITY;
    p->hi[k] = L->clip ? L->clip_hi : INFINITY;
    p->has_act[k] = L->act != QF_ACT_NONE;
    return p->has_act[k] ? cu_act_params(L->act, L->act_gated, QF_F16, &p->act[k]) : QF_OK;
}

qf_status se_prepare(cu_engine *c, cu_layer *L)
{
    const qf_graph *g = c->g;
    const cu_se_chain *ch = (const cu_se_chain *)L->state;
    const qf_value *x = qfi_in(g, L->n, 0);
    se_state *st = (se_state *)qfi_calloc(1, sizeof *st);
    if (!st) return QF_ERR_NOMEM;
    se_params &p = st->p;
    st->N = (int)x->dims[0];
    p.C = (int)x->dims[1];
    p.S = (int)(qf_value_numel(x) / (x->dims[0] * x->dims[1]));
    p.M1 = (int)qfi_in(g, &g->nodes[ch->conv[0]], 1)->dims[0];
    p.M2 = (int)qfi_in(g, &g->nodes[ch->conv[1]], 1)->dims[0];
    p.ct = SLICE_BYTES / ((int)sizeof(__half) * p.M1) / 8 * 8;
    p.xe = cu_elem_of(c, L->n, L->n->in[0]);
    qf_status s = take_conv(c, &c->layers[ch->conv[0]], 0, &p, &p.w1, &p.b1);
    if (s == QF_OK) s = take_conv(c, &c->layers[ch->conv[1]], 1, &p, &p.w2, &p.b2);
    p.has_gate = ch->gate >= 0;
    if (s == QF_OK && p.has_gate) s = cu_unary_params_of(g, &g->nodes[ch->gate], &p.gate);
    st->smem = smem_for(p.C, p.M1);
    free(L->state); /* the chain: fusion.cu's */
    L->state = st;
    L->free_state = free;
    QF_CHECK(s);
    cu_need_input_as(c, L, 0, CU_NHWC);
    void *ptr;
    return cu_value_ptr(c, L->n->in[0], &ptr);
}

template <typename TX, int V> void launch(cudaStream_t s, const se_state *st, const void *x, void *y)
{
    se_gate_kernel<TX, V><<<(unsigned)st->N, TPB, st->smem, s>>>(st->p, (const TX *)x, (__half *)y);
}

qf_status se_launch(cu_engine *c, cu_layer *L, cudaStream_t s)
{
    const se_state *st = (const se_state *)L->state;
    const void *x;
    void *y;
    QF_CHECK(cu_input_as(c, L, 0, CU_NHWC, s, &x));
    QF_CHECK(cu_value_ptr(c, cu_out_value(L, 0), &y));
    if (!st->N) return QF_OK;
    const bool vec = st->p.C % 8 == 0;
    if (st->p.xe.dt == QF_I8) vec ? launch<int8_t, 8>(s, st, x, y) : launch<int8_t, 1>(s, st, x, y);
    else vec ? launch<__half, 8>(s, st, x, y) : launch<__half, 1>(s, st, x, y);
    CU_LAUNCHED();
    return QF_OK;
}

} // namespace

bool cu_se_gate_fits(int64_t C, int64_t M1)
{
    return C > 0 && M1 > 0 && M1 <= TPB && smem_for(C, M1) <= CU_SE_MAX_SMEM;
}

const cu_op cu_op_se_gate = {se_prepare, NULL, se_launch, CU_RULE_NHWC, QFI_PREC_BIT(QF_PREC_FP16), NULL};
