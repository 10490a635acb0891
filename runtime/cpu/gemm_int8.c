/* INT8 Gemm and MatMul on the CPU with exact integer arithmetic: Y (rows, N)
 * = X (rows, K) x W through int8_simd.c's register blocks, the weights as u8
 * quads of four k (packed once, when the engine is built) and X's rows as the
 * broadcast s8 operand; the 128 the weights carry comes back out through
 * each row's sum. Then lib/quant_math.h's requantize epilogue per column. */
#include "kernels.h"
#include "ops/nn.h"

/* Y (rows, N) = X (rows, K) x op(W). Gemm: W is (K,N), or (N,K) with transB;
 * alpha and beta were folded into W and the bias when the node was
 * quantized. MatMul: X (..., M, K) is one tall matrix of rows = numel/K and
 * W is 2-D (K,N). */
typedef struct igemm_shape {
    int64_t rows, N, K, ldb;
    bool trans_b;
} igemm_shape;

static qf_status int8_shape(const qf_graph *g, const qf_node *n, igemm_shape *s)
{
    const qf_value *x = qfi_in(g, n, 0), *w = qfi_in(g, n, 1);
    if (n->op == QF_OP_GEMM) {
        const qfi_gemm_params *p = n->params;
        qfi_gemm_geom geo;
        QF_CHECK(qfi_gemm_geometry(g, n, &geo));
        if (p->trans_a)
            return qf_error(QF_ERR_UNSUPPORTED, "INT8 Gemm with transA");
        *s = (igemm_shape){.rows = geo.M, .N = geo.N, .K = geo.K, .ldb = w->dims[1], .trans_b = p->trans_b};
    } else {
        qfi_matmul_geom geo;
        QF_CHECK(qfi_matmul_geometry(g, n, &geo));
        if (w->ndim != 2 || x->ndim < 2)
            return qf_error(QF_ERR_UNSUPPORTED, "INT8 MatMul needs a 2-D weight and an input of 2 or more dims");
        *s = (igemm_shape){.rows = geo.K ? qf_value_numel(x) / geo.K : 0, .N = geo.N, .K = geo.K, .ldb = geo.N};
    }
    QF_CHECK(qfi_int8_operands(g, n, s->N));
    /* |sum| <= K * 128 * 127 plus a bias within QFI_INT8_BIAS_LIMIT must stay inside int32 */
    if (s->K > QFI_INT8_MAX_REDUCTION)
        return qf_error(QF_ERR_UNSUPPORTED, "INT8 reduction of %lld terms could overflow int32", (long long)s->K);
    return QF_OK;
}

static size_t align64(size_t b) { return (b + 63) / 64 * 64; }

/* The weights as u8 quads (k = 4q..4q+3 of column c at byte 4*(q*npad + c)),
 * npad columns per quad so a block may read a whole vector past N. */
typedef struct gemm8_state {
    const qfi_i8_kernels *k;
    int64_t quads, kq, npad;
    uint8_t *b;
} gemm8_state;

static int64_t padded_columns(int64_t N) { return (N + 15) / 16 * 16; }

qf_status qfi_cpu_gemm_prepare(const qf_graph *g, const qf_node *n, void **state)
{
    *state = NULL;
    if (n->precision != QF_PREC_INT8 || qfi_matmul_is_product(n)) return QF_OK; /* no weights to pack */
    igemm_shape s;
    QF_CHECK(int8_shape(g, n, &s));
    int64_t quads, kq;
    const qfi_i8_kernels *k = qfi_cpu_i8_reduction(s.K, &quads, &kq);
    const int64_t npad = padded_columns(s.N);
    const size_t head = align64(sizeof(gemm8_state));
    gemm8_state *st = malloc(head + (size_t)(quads * npad) * 4 + 1);
    if (!st) return qf_error(QF_ERR_NOMEM, "out of memory packing INT8 weights");
    *st = (gemm8_state){.k = k, .quads = quads, .kq = kq, .npad = npad, .b = (uint8_t *)st + head};
    const int8_t *w = qfi_in(g, n, 1)->data;
    for (int64_t q = 0; q < quads; q++)
        for (int64_t c = 0; c < npad; c++)
            for (int64_t j = 0; j < 4; j++) {
                const int64_t k = 4 * q + j;
                int8_t v = k < s.K && c < s.N ? w[s.trans_b ? c * s.ldb + k : k * s.ldb + c] : 0;
                st->b[(q * npad + c) * 4 + j] = (uint8_t)(v ^ 0x80);
            }
    *state = st;
    return QF_OK;
}

/* Scratch: m (N floats) | X's rows packed as s8 words (row blocks of mb, quads;
 * tiles: per group of kq quads, mb rows of 4*kq bytes) | the row sums. Sized
 * for the widest block of any instance. */
typedef struct gemm8_layout {
    size_t m, a, sums, total;
} gemm8_layout;

static void layout(const igemm_shape *s, gemm8_layout *L)
{
    int64_t quads, kq;
    qfi_cpu_i8_reduction(s->K, &quads, &kq);
    const int64_t blocks = (s->rows + QFI_I8_MB_MAX - 1) / QFI_I8_MB_MAX;
    L->m = 0;
    L->a = align64((size_t)s->N * 4);
    L->sums = L->a + align64((size_t)(blocks * QFI_I8_MB_MAX * quads * QFI_I8_WQ_MAX) * 4);
    L->total = L->sums + align64((size_t)s->rows * 4);
}

size_t qfi_cpu_gemm_scratch(const qf_graph *g, const qf_node *n)
{
    igemm_shape s = {0};
    if (n->precision != QF_PREC_INT8 || int8_shape(g, n, &s) != QF_OK) return 0;
    gemm8_layout L;
    layout(&s, &L);
    return L.total;
}

typedef struct gemm8_job {
    const igemm_shape *s;
    const gemm8_state *st;
    const qfi_requant *rq;
    const float *m;
    const int32_t *a, *sums, *bias;
    const int8_t *res;
    void *y;
    qfi_i8_geom bg;
    int64_t parts; /* column ranges per row block */
} gemm8_job;

/* Item = (row block, range of column chunks). */
static void gemm8_item(void *arg, int64_t item)
{
    const gemm8_job *j = arg;
    const qfi_i8_kernels *k = j->st->k;
    const int64_t mb = k->mb, widest = k->nv * k->vw, N = j->s->N;
    const int64_t rb = item / j->parts, part = item % j->parts, chunks = (N + widest - 1) / widest;
    const int64_t c0 = chunks * part / j->parts * widest, c1 = chunks * (part + 1) / j->parts * widest;
    const int64_t rows = j->s->rows - rb * mb < mb ? j->s->rows - rb * mb : mb;
    const int32_t *ab = j->a + rb * j->st->quads * mb * k->wq;
    int32_t out[QFI_I8_MB_MAX * QFI_I8_CHUNK_MAX];
    for (int64_t p0 = c0; p0 < c1 && p0 < N; p0 += widest) {
        const int64_t len = N - p0 < widest ? N - p0 : widest, nv = (len + k->vw - 1) / k->vw;
        k->block_1t[nv - 1](&j->bg, j->st->b + p0 * 4, ab, out);
        for (int64_t r = 0; r < rows; r++) {
            const int64_t row = rb * mb + r;
            /* the weights carried 128 each: take 128 * the row's sum back out */
            const int32_t add0 = (int32_t)(0u - 128u * (uint32_t)j->sums[row]);
            k->requant_cols(j->rq, out + r * nv * k->vw, len, add0, j->bias ? j->bias + p0 : NULL, j->m + p0, j->res,
                            j->y, row * N + p0);
        }
    }
}

qf_status qfi_cpu_gemm_int8(const qfi_kernel_args *a)
{
    const qf_graph *g = a->g;
    const qf_node *n = a->n;
    igemm_shape s = {0};
    QF_CHECK(int8_shape(g, n, &s));
    const qf_value *xv = qfi_in(g, n, 0), *rv = qfi_in(g, n, 4), *yv = qfi_out(g, n, 0);
    if (rv && qf_value_numel(rv) != s.rows * s.N)
        return qf_error(QF_ERR_INVALID, "residual %s does not match the output",
                        rv->name);
    if (s.rows == 0 || s.N == 0) return QF_OK;
    if (!a->scratch || !a->state)
        return qf_error(QF_ERR_USAGE, "no INT8 scratch or packed weights were provided");
    const gemm8_state *st = a->state;
    const qfi_i8_kernels *k = st->k;
    gemm8_layout L;
    layout(&s, &L);
    char *base = a->scratch;
    float *m = (float *)(base + L.m);
    int32_t *ap = (int32_t *)(base + L.a), *sums = (int32_t *)(base + L.sums);
    qfi_requant rq;
    qfi_requant_init(&rq, m, s.N, xv->scale, a->in[3], a->in[2], rv ? rv->scale : 0.0f, rv ? rv->zero_point : 0,
                     yv->dtype, yv->scale, yv->zero_point, n->act, n->act_lo, n->act_hi);
    /* X's rows as packed s8 quads: block rb, quad q, row r at quad (rb*quads + q)*mb + r (wq words each) */
    const int8_t *x = a->in[0];
    const int64_t mb = k->mb, blocks = (s.rows + mb - 1) / mb;
    int8_t *pa = (int8_t *)ap;
    if (k->tiles) /* block rb, group q0, row r: 4*kq bytes of k = 4*q0 .. 4*q0 + 4*kq - 1 */
        for (int64_t rb = 0; rb < blocks; rb++)
            for (int64_t q0 = 0; q0 < st->quads; q0 += st->kq)
                for (int64_t r = 0; r < mb; r++, pa += 4 * st->kq) {
                    const int64_t row = rb * mb + r, k0 = 4 * q0, have = row < s.rows ? s.K - k0 : 0;
                    const int64_t n = have < 4 * st->kq ? (have > 0 ? have : 0) : 4 * st->kq;
                    if (n > 0) memcpy(pa, x + row * s.K + k0, (size_t)n);
                    memset(pa + n, 0, (size_t)(4 * st->kq - n));
                }
    else {
        int32_t *pq = ap;
        for (int64_t rb = 0; rb < blocks; rb++)
            for (int64_t q = 0; q < st->quads; q++)
                for (int64_t r = 0; r < mb; r++) {
                    int8_t quad[4];
                    for (int64_t j = 0; j < 4; j++) {
                        const int64_t row = rb * mb + r, kk = 4 * q + j;
                        quad[j] = row < s.rows && kk < s.K ? x[row * s.K + kk] : 0;
                    }
                    pq = qfi_i8_put_quad(k, pq, quad);
                }
    }
    for (int64_t r = 0; r < s.rows; r++) {
        int32_t sum = 0;
        for (int64_t kk = 0; kk < s.K; kk++) sum += x[r * s.K + kk];
        sums[r] = sum;
    }
    static const int64_t zero_off[1] = {0};
    gemm8_job j = {.s = &s, .st = st, .rq = &rq, .m = m, .a = ap, .sums = sums, .bias = a->in[2],
                   .res = rv ? a->in[4] : NULL, .y = a->out[0],
                   .bg = {.quads = st->quads, .stride = st->npad * 4, .taps = 1, .kq = st->kq, .off = zero_off}};
    const int64_t widest = k->nv * k->vw, chunks = (s.N + widest - 1) / widest;
    const int64_t threads = qfi_cpu_threads(a->threads);
    j.parts = (threads + blocks - 1) / blocks;
    if (j.parts > chunks) j.parts = chunks;
    qfi_parallel_for((int)threads, blocks * j.parts, gemm8_item, &j);
    return QF_OK;
}
