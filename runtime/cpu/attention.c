/* A fused FP16 attention chain (lib/attention.h) on the CPU: what the CUDA
 * engine's attention kernel computes, step for step, so that the two
 * engines differ by FP32 summation order instead of by the half rounding
 * of scores and probabilities that the unfused nodes do. The batch matrices
 * are shared out among the threads; each has K^T and V widened to float
 * once, then each query row walks the keys in tiles with the online softmax. */
#include "kernels.h"
#include "attention.h"
#include <math.h>

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
    const uint16_t *q, *kt, *v;
    const uint16_t *bias[QFI_ATTN_MAX_BIAS]; /* each operand's halves (or the table) */
    uint16_t *out;
    float *buf;    /* per slot: K^T, V, a block of query rows, their outputs and a tile of scores each */
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

/* Query rows row0 .. row0 + nr - 1 (nr 1 or RB; row = batch * M + query) of
 * one batch matrix, K^T and V widened. Scratch: q and o RB x D, s RB x TILE. */
static void attend_rows(const attn_job *j, int64_t row0, int nr, const float *kt, const float *v, float *q, float *o,
                        float *s)
{
    const qfi_attention_chain *ch = &j->a->ch;
    const int64_t N = ch->N, D = ch->D;
    const float LOG2E = 1.44269504088896341f;
    const int nbias = j->a->table ? 1 : ch->n_bias;
    int64_t boff[RB][QFI_ATTN_MAX_BIAS], bstep[QFI_ATTN_MAX_BIAS];
    float m[RB], l[RB], qd[RB], ph[RB];
    for (int r = 0; r < nr; r++) {
        widen(q + r * D, j->q + (row0 + r) * D, D);
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
        float base[RB];
        for (int r = 0; r < nr; r++) {
            float *sr = s + r * TILE, mx = -INFINITY;
            for (int64_t t = 0; t < nk; t++) {
                for (int k = 0; k < nbias; k++) sr[t] += qf_f16_to_f32(j->bias[k][boff[r][k] + (k0 + t) * bstep[k]]);
                mx = fmaxf(mx, sr[t]);
            }
            const float m_new = fmaxf(m[r], mx);
            base[r] = m_new == -INFINITY ? 0.0f : m_new; /* a row masked so far: no inf - inf */
            const float corr = exp2f((m[r] - base[r]) * LOG2E);
            m[r] = m_new;
            l[r] *= corr;
            scale(o + r * D, corr, D);
        }
        for (int64_t t = 0; t < nk; t++) {
            for (int r = 0; r < nr; r++) {
                const float p = exp2f((s[r * TILE + t] - base[r]) * LOG2E);
                l[r] += p;
                ph[r] = qf_f16_to_f32(qf_f32_to_f16(p));
            }
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
    float *kt = j->buf + (size_t)k * j->buf_floats, *v = kt + N * D, *q = v + N * D, *o = q + RB * D, *s = o + RB * D;
    for (int64_t b = ch->nb * k / j->slots; b < ch->nb * (k + 1) / j->slots; b++) {
        widen(kt, j->kt + b * D * N, D * N);
        widen(v, j->v + b * N * D, N * D);
        int64_t i = 0;
        for (; i + RB <= ch->M; i += RB) attend_rows(j, b * ch->M + i, RB, kt, v, q, o, s);
        for (; i < ch->M; i++) attend_rows(j, b * ch->M + i, 1, kt, v, q, o, s);
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
    j.buf_floats = (size_t)(2 * ch->N * ch->D + 2 * RB * ch->D + RB * TILE);
    j.buf = malloc((size_t)j.slots * j.buf_floats * sizeof *j.buf);
    if (!j.buf) return qf_error(QF_ERR_NOMEM, "out of memory for attention's keys and values");
    qfi_parallel_for(t, j.slots, attn_slot, &j);
    free(j.buf);
    return QF_OK;
}
