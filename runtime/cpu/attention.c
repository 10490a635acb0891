/* A fused FP16 attention chain (lib/attention.h) on the CPU: what the CUDA
 * engine's attention kernel computes, step for step, so that the two
 * engines differ by FP32 summation order instead of by the half rounding
 * of scores and probabilities that the unfused nodes do. The batch matrices
 * are shared out among the threads; each has K^T (from K's rows where the
 * chain took K's Transpose in) and V widened to float once, then each block
 * of query rows walks the keys in tiles with the online softmax. Q, K and V
 * are read through the chain's views (their roots' strides; an int8 root
 * through the DequantizeLinear's half). */
#include "kernels.h"
#include "attention.h"
#include <math.h>
#include "float_math.h"
#include "quant_math.h"

struct qfi_cpu_attention {
    qfi_attention_chain ch;
    uint16_t *table;            /* the constant biases summed (qfi_attention_bias_table), or NULL */
    int64_t period;
    uint16_t *half[QFI_ATTN_MAX_BIAS]; /* a float constant bias rounded to half, else NULL */
};

void qfi_cpu_attention_free(qfi_cpu_attention *a)
{
    if (!a) return;
    free(a->table);
    for (int k = 0; k < QFI_ATTN_MAX_BIAS; k++) free(a->half[k]);
    free(a);
}

qf_status qfi_cpu_attention_create(const qf_graph *g, const qfi_attention_chain *ch, qfi_cpu_attention **out)
{
    *out = NULL;
    qfi_cpu_attention *a = qfi_calloc(1, sizeof *a);
    if (!a) return QF_ERR_NOMEM;
    a->ch = *ch;
    qf_status st = qfi_attention_bias_table(g, ch, &a->table, &a->period);
    for (int k = 0; k < ch->n_bias && st == QF_OK && !a->table; k++) {
        const qf_value *bv = &g->values[ch->bias[k].value];
        if (bv->dtype != QF_F32) continue;
        const int64_t n = qf_value_numel(bv);
        a->half[k] = qfi_calloc((size_t)n + 1, sizeof *a->half[k]);
        if (!a->half[k]) st = QF_ERR_NOMEM;
        for (int64_t i = 0; st == QF_OK && i < n; i++) a->half[k][i] = qf_f32_to_f16(((const float *)bv->data)[i]);
    }
    if (st != QF_OK) {
        qfi_cpu_attention_free(a);
        return st;
    }
    *out = a;
    return QF_OK;
}

typedef struct attn_job {
    const qfi_cpu_attention *a;
    const void *q, *kt, *v;        /* the roots the views read */
    const uint16_t *bias[QFI_ATTN_MAX_BIAS]; /* each operand's halves (or the table) */
    uint16_t *out;
    float *buf;    /* per slot: K^T, V, a block of query rows, their outputs, a tile of scores and of halves each */
    size_t buf_floats;
    int64_t slots;
} attn_job;

/* Query rows a block: each element of K^T and V loaded once for all of them
 * (one row at a time ran ViT-B/16 8 % slower than the unfused nodes'
 * sgemm calls). A row's sums come in the same order either way. */
enum { RB = 4, TILE = QFI_ATTN_KEY_TILE };

/* y[r][0..n) += x[r] * row[0..n) for RB rows of y, `stride` apart (scores
 * against a K^T row, outputs against a V row) */
QFI_SIMD_CLONES static void add_scaled_rows(float *restrict y, int64_t stride, const float *restrict x,
                                            const float *restrict row, int64_t n)
{
    for (int64_t j = 0; j < n; j++) {
        const float v = row[j];
        y[j] += x[0] * v;
        y[stride + j] += x[1] * v;
        y[2 * stride + j] += x[2] * v;
        y[3 * stride + j] += x[3] * v;
    }
}
QFI_SIMD_CLONES static void add_scaled(float *restrict s, float x, const float *restrict row, int64_t n)
{
    for (int64_t j = 0; j < n; j++) s[j] += x * row[j];
}
QFI_SIMD_CLONES static void scale(float *restrict o, float c, int64_t n)
{
    for (int64_t d = 0; d < n; d++) o[d] *= c;
}

static void widen(float *restrict dst, const uint16_t *restrict src, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dst[i] = qf_f16_to_f32(src[i]);
}
/* Row i of batch matrix b of an operand (root x, view w), its D elements
 * widened to float, `step` apart in dst */
static void load_row(float *restrict dst, int64_t step, const void *x, const qfi_attention_view *w, int64_t b, int64_t i,
                     int64_t D)
{
    const int64_t at = qfi_attention_view_row(w, b, i);
    if (w->int8) {
        const int8_t *q = (const int8_t *)x + at;
        for (int64_t d = 0; d < D; d++)
            dst[d * step] = qf_f16_to_f32(qf_f32_to_f16(qfi_dequantize_i8_zp(q[d], w->scale, w->zero_point)));
    } else {
        const uint16_t *h = (const uint16_t *)x + at;
        for (int64_t d = 0; d < D; d++) dst[d * step] = qf_f16_to_f32(h[d]);
    }
}

/* 2^x for x <= 0 (below -150, or NaN: 0) from single IEEE operations, no
 * libm call, so that a loop of it vectorizes and every instruction set gives
 * the same bits: x = n + f, |f| <= 1/2, 2^f by its Taylor polynomial of
 * degree 7 (truncation below 0.1 ulp), times 2^n in two normal steps.
 * Within 1.5 ulp of 2^x (checked against exp2 in double over [-151, 0] in
 * steps of 1.4e-4), as CUDA's exp2f is within 2. */
static inline float exp2_neg(float x)
{
    x = x >= -150.0f ? x : -150.0f;
    const float magic = 12582912.0f; /* 1.5 * 2^23: x + magic - magic is rint(x) */
    const float n = (x + magic) - magic, f = x - n;
    float p = 1.5252733804059840e-5f;
    p = p * f + 1.5403530393381608e-4f;
    p = p * f + 1.3333558146428443e-3f;
    p = p * f + 9.6181291076284772e-3f;
    p = p * f + 5.5504108664821580e-2f;
    p = p * f + 2.4022650695910071e-1f;
    p = p * f + 6.9314718055994531e-1f;
    p = p * f + 1.0f;
    const int32_t ni = (int32_t)n, e1 = ni / 2, e2 = ni - e1;
    return p * qfi_pow2i(e1) * qfi_pow2i(e2);
}

/* p in [0, 1] rounded to the nearest half value, ties to even: what
 * qf_f16_to_f32(qf_f32_to_f16(p)) gives (equal for every float in [0, 1]),
 * without branches: 13 mantissa bits rounded off where the half is normal,
 * whole units of 2^-24 below 2^-14. */
static inline float round_to_half(float p)
{
    uint32_t u = qfi_f32_bits(p);
    u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
    const float magic = 12582912.0f;
    const float sub = ((p * 16777216.0f + magic) - magic) * 5.9604644775390625e-8f;
    return p >= 6.103515625e-05f ? qfi_bits_f32(u) : sub;
}

/* The probabilities of a tile's scores s[0..n) against the row max base:
 * p[t] = 2^((s[t] - base) log2 e) into s, and rounded to half into h. */
QFI_SIMD_CLONES static void probabilities(float *restrict s, float *restrict h, float base, int64_t n)
{
    const float LOG2E = 1.44269504088896341f;
    for (int64_t t = 0; t < n; t++) {
        s[t] = exp2_neg((s[t] - base) * LOG2E);
        h[t] = round_to_half(s[t]);
    }
}

/* Query rows row0 .. row0 + nr - 1 (nr 1 or RB; row = batch * M + query) of
 * one batch matrix, K^T and V widened. Scratch: q and o RB x D, s and h RB x TILE. */
static void attend_rows(const attn_job *j, int64_t row0, int nr, const float *kt, const float *v, float *q, float *o,
                        float *s, float *h)
{
    const qfi_attention_chain *ch = &j->a->ch;
    const int64_t N = ch->N, D = ch->D;
    const float LOG2E = 1.44269504088896341f;
    const int nbias = j->a->table ? 1 : ch->n_bias;
    int64_t boff[RB][QFI_ATTN_MAX_BIAS], bstep[QFI_ATTN_MAX_BIAS];
    float m[RB], l[RB], qd[RB], ph[RB];
    for (int r = 0; r < nr; r++) {
        load_row(q + r * D, 1, j->q, &ch->view[QFI_ATTN_Q], (row0 + r) / ch->M, (row0 + r) % ch->M, D);
        for (int k = 0; k < nbias; k++)
            boff[r][k] = j->a->table ? (row0 + r) % j->a->period * N : qfi_attention_bias_row(&ch->bias[k], row0 + r);
        m[r] = -INFINITY, l[r] = 0.0f;
    }
    for (int k = 0; k < nbias; k++) bstep[k] = j->a->table ? 1 : ch->bias[k].col_stride;
    for (int64_t d = 0; d < nr * D; d++) o[d] = 0.0f;
    for (int64_t k0 = 0; k0 < N; k0 += TILE) {
        const int64_t nk = N - k0 < TILE ? N - k0 : TILE;
        for (int r = 0; r < nr; r++)
            for (int64_t t = 0; t < nk; t++) s[r * TILE + t] = 0.0f;
        for (int64_t d = 0; d < D; d++) {
            if (nr == RB) {
                for (int r = 0; r < RB; r++) qd[r] = q[r * D + d];
                add_scaled_rows(s, TILE, qd, kt + d * N + k0, nk);
            } else {
                add_scaled(s, q[d], kt + d * N + k0, nk);
            }
        }
        for (int r = 0; r < nr; r++) {
            float *sr = s + r * TILE, mx = -INFINITY;
            if (ch->scale != 1.0f) scale(sr, ch->scale, nk);
            for (int64_t t = 0; t < nk; t++) {
                for (int k = 0; k < nbias; k++) sr[t] += qf_f16_to_f32(j->bias[k][boff[r][k] + (k0 + t) * bstep[k]]);
                mx = fmaxf(mx, sr[t]);
            }
            const float m_new = fmaxf(m[r], mx);
            const float base = m_new == -INFINITY ? 0.0f : m_new; /* a row masked so far: no inf - inf */
            const float corr = exp2_neg((m[r] - base) * LOG2E);
            m[r] = m_new;
            l[r] *= corr;
            scale(o + r * D, corr, D);
            probabilities(sr, h + r * TILE, base, nk);
            for (int64_t t = 0; t < nk; t++) l[r] += sr[t];
        }
        for (int64_t t = 0; t < nk; t++) {
            for (int r = 0; r < nr; r++) ph[r] = h[r * TILE + t];
            if (nr == RB) add_scaled_rows(o, D, ph, v + (k0 + t) * D, D);
            else add_scaled(o, ph[0], v + (k0 + t) * D, D);
        }
    }
    for (int r = 0; r < nr; r++) {
        const float inv = 1.0f / l[r];
        uint16_t *y = j->out + (row0 + r) * D;
        for (int64_t d = 0; d < D; d++) y[d] = qf_f32_to_f16(o[r * D + d] * inv);
    }
}

/* Slot k's share of the batch matrices, with its own floats. */
static void attn_slot(void *arg, int64_t k)
{
    const attn_job *j = arg;
    const qfi_attention_chain *ch = &j->a->ch;
    const int64_t N = ch->N, D = ch->D;
    float *kt = j->buf + (size_t)k * j->buf_floats, *v = kt + N * D, *q = v + N * D, *o = q + RB * D, *s = o + RB * D, *h = s + RB * TILE;
    for (int64_t b = ch->nb * k / j->slots; b < ch->nb * (k + 1) / j->slots; b++) {
        for (int64_t t = 0; t < N; t++) { /* K's rows into K^T's columns */
            if (!ch->k_rows) break;
            load_row(kt + t, N, j->kt, &ch->view[QFI_ATTN_K], b, t, D);
        }
        if (!ch->k_rows) widen(kt, (const uint16_t *)j->kt + b * D * N, D * N);
        for (int64_t t = 0; t < N; t++) load_row(v + t * D, 1, j->v, &ch->view[QFI_ATTN_V], b, t, D);
        int64_t i = 0;
        for (; i + RB <= ch->M; i += RB) attend_rows(j, b * ch->M + i, RB, kt, v, q, o, s, h);
        for (; i < ch->M; i++) attend_rows(j, b * ch->M + i, 1, kt, v, q, o, s, h);
    }
}

qf_status qfi_cpu_attention_run(const qfi_cpu_attention *a, void *const *data, int threads)
{
    const qfi_attention_chain *ch = &a->ch;
    attn_job j = {.a = a, .q = data[ch->q], .kt = data[ch->kt], .v = data[ch->v], .out = data[ch->out]};
    if (a->table) {
        j.bias[0] = a->table;
    } else {
        for (int k = 0; k < ch->n_bias; k++) j.bias[k] = a->half[k] ? a->half[k] : data[ch->bias[k].value];
    }
    const int t = threads > 0 ? threads : qfi_cpu_count();
    j.slots = ch->nb < t ? ch->nb : t;
    j.buf_floats = (size_t)(2 * ch->N * ch->D + 2 * RB * ch->D + 2 * RB * TILE);
    j.buf = malloc((size_t)j.slots * j.buf_floats * sizeof *j.buf);
    if (!j.buf) return qf_error(QF_ERR_NOMEM, "out of memory for attention's keys and values");
    qfi_parallel_for(t, j.slots, attn_slot, &j);
    free(j.buf);
    return QF_OK;
}
