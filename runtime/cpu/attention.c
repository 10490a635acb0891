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
    float *buf;    /* per slot: K^T, V, a query row, its output and a tile of scores */
    size_t buf_floats;
    int64_t slots;
} attn_job;

/* s[0..n) += x * row[0..n) */
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

/* Query row `row` (batch * M + query) of batch matrix b, K^T and V widened. */
static void attend_row(const attn_job *j, int64_t row, const float *kt, const float *v, float *q, float *o, float *s)
{
    const qfi_attention_chain *ch = &j->a->ch;
    const int64_t N = ch->N, D = ch->D;
    const float LOG2E = 1.44269504088896341f;
    widen(q, j->q + row * D, D);
    int64_t boff[QFI_ATTN_MAX_BIAS], bstep[QFI_ATTN_MAX_BIAS];
    const int nbias = j->a->table ? 1 : ch->n_bias;
    for (int k = 0; k < nbias; k++) {
        boff[k] = j->a->table ? row % j->a->period * N : qfi_attention_bias_row(&ch->bias[k], row);
        bstep[k] = j->a->table ? 1 : ch->bias[k].col_stride;
    }
    for (int64_t d = 0; d < D; d++) o[d] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int64_t k0 = 0; k0 < N; k0 += QFI_ATTN_KEY_TILE) {
        const int64_t nk = N - k0 < QFI_ATTN_KEY_TILE ? N - k0 : QFI_ATTN_KEY_TILE;
        for (int64_t t = 0; t < nk; t++) s[t] = 0.0f;
        for (int64_t d = 0; d < D; d++) add_scaled(s, q[d], kt + d * N + k0, nk);
        float mx = -INFINITY;
        for (int64_t t = 0; t < nk; t++) {
            for (int k = 0; k < nbias; k++) s[t] += qf_f16_to_f32(j->bias[k][boff[k] + (k0 + t) * bstep[k]]);
            mx = fmaxf(mx, s[t]);
        }
        const float m_new = fmaxf(m, mx);
        const float base = m_new == -INFINITY ? 0.0f : m_new; /* a row masked so far: no inf - inf */
        const float corr = exp2f((m - base) * LOG2E);
        m = m_new;
        l *= corr;
        scale(o, corr, D);
        for (int64_t t = 0; t < nk; t++) {
            const float p = exp2f((s[t] - base) * LOG2E);
            l += p;
            add_scaled(o, qf_f16_to_f32(qf_f32_to_f16(p)), v + (k0 + t) * D, D);
        }
    }
    const float inv = 1.0f / l;
    uint16_t *y = j->out + row * D;
    for (int64_t d = 0; d < D; d++) y[d] = qf_f32_to_f16(o[d] * inv);
}

/* Slot k's share of the batch matrices, with its own floats. */
static void attn_slot(void *arg, int64_t k)
{
    const attn_job *j = arg;
    const qfi_attention_chain *ch = &j->a->ch;
    const int64_t N = ch->N, D = ch->D;
    float *kt = j->buf + (size_t)k * j->buf_floats, *v = kt + N * D, *q = v + N * D, *o = q + D, *s = o + D;
    for (int64_t b = ch->nb * k / j->slots; b < ch->nb * (k + 1) / j->slots; b++) {
        widen(kt, j->kt + b * D * N, D * N);
        widen(v, j->v + b * N * D, N * D);
        for (int64_t i = 0; i < ch->M; i++) attend_row(j, b * ch->M + i, kt, v, q, o, s);
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
    j.buf_floats = (size_t)(2 * ch->N * ch->D + 2 * ch->D) + QFI_ATTN_KEY_TILE;
    j.buf = malloc((size_t)j.slots * j.buf_floats * sizeof *j.buf);
    if (!j.buf) return qf_error(QF_ERR_NOMEM, "out of memory for attention's keys and values");
    qfi_parallel_for(t, j.slots, attn_slot, &j);
    free(j.buf);
    return QF_OK;
}
