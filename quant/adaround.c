/* Learned weight rounding (qf_adaround, `quant --optimize-rounding`): samples
 * each INT8 layer's input from the FP32 graph (quant/layer_feed.c), then
 * learns per weight whether it rounds down or up so that the layer's output
 * on those inputs, as INT8 holds them, comes closer to FP32's (AdaRound,
 * Nagel et al. 2020). Output channels learn independently: blocks of them
 * run on the threads, each step two OpenBLAS sgemm calls. */
#include <cblas.h>
#include <math.h>
#include "quant_internal.h"
#include "quant_math.h"
#include "ops/nn.h"

/* A layer's sample holds at most this many floats (positions x input length). */
#define POOL_FLOATS ((int64_t)1 << 21)
/* One position in HELD_OUT judges the result and is never trained on. */
#define HELD_OUT 5
/* Output channels learned together: one sgemm's rows. Fixed, so that the
 * result does not depend on the thread count. */
#define BLOCK 32
/* The rectified sigmoid h(V) = clamp(sigmoid(V) (ZETA - GAMMA) + GAMMA, 0, 1)
 * reaches 0 and 1 at finite V (AdaRound's stretch). */
#define ZETA 1.1f
#define GAMMA (-0.1f)
/* The regularizer sum(1 - |2h - 1|^beta) pushes h to 0 or 1; it starts after
 * the first WARMUP of the steps, beta falling from BETA_START to BETA_END. */
#define WARMUP 0.2
#define BETA_START 20.0
#define BETA_END 2.0
/* Its weight against the output error (both normalized per channel: the
 * error by round-to-nearest's, the regularizer by the weights' count). */
#define LAMBDA 30.0f
/* Adam. */
#define LR 1e-2f
#define ADAM_B1 0.9f
#define ADAM_B2 0.999f
#define ADAM_EPS 1e-8f

typedef struct ada_layer {
    const qfi_feed_layer *fl;
    char *name;
    int64_t ch, k;          /* output channels; weights of one channel (one group's input length) */
    int64_t groups;         /* conv groups; 1 for Gemm and MatMul */
    bool conv;
    qfi_conv_geom geo;      /* conv */
    int64_t per_image;      /* output positions (conv) or rows (Gemm, MatMul) of one image */
    int64_t take;           /* positions sampled per image */
    int64_t cap, rows;      /* positions the sample holds at most, and holds */
    int64_t images;         /* images sampled */
    float *pool;            /* groups x cap x k: each group's input at the sampled positions */
    /* learned */
    int64_t count;          /* weights */
    int8_t *q;              /* in the weight's (outer, ch, inner) layout */
    float *s;               /* per channel: the scale learned at; NaN where rounding stays nearest */
} ada_layer;

struct qf_adaround {
    qfi_layer_feed feed;
    qf_adaround_opts ao;
    bool per_channel;
    int n;
    ada_layer *layers;
};

void qf_adaround_free(qf_adaround *r)
{
    if (!r) return;
    for (int i = 0; r->layers && i < r->n; i++) {
        free(r->layers[i].name);
        free(r->layers[i].pool);
        free(r->layers[i].q);
        free(r->layers[i].s);
    }
    free(r->layers);
    qfi_layer_feed_free(&r->feed);
    free(r);
}

int qf_adaround_layers(const qf_adaround *r)
{
    return r ? r->n : 0;
}

/* Where layer l's input can be sampled: a Conv's windows, or rows of a Gemm's
 * or MatMul's input that divide into images. False: it keeps rounding to nearest. */
static bool layer_shape(const qf_graph *g, const qf_node *n, ada_layer *l)
{
    const qf_value *x = &g->values[n->in[0]];
    int64_t outer, inner;
    qfi_ops[n->op]->weight_layout(g, n, &outer, &l->ch, &inner);
    l->count = outer * l->ch * inner;
    l->groups = 1;
    if (n->op == QF_OP_CONV) {
        if (qfi_conv_geometry(g, n, &l->geo) != QF_OK) return false;
        l->conv = true;
        l->groups = l->geo.group;
        l->k = l->geo.C / l->geo.group * qfi_window_k_size(&l->geo.w);
        l->per_image = qfi_window_out_size(&l->geo.w);
        return l->geo.N == g->batch && l->k == inner;
    }
    l->k = outer * inner;
    const int64_t rows = l->k > 0 ? qf_value_numel(x) / l->k : 0;
    l->per_image = g->batch > 0 ? rows / g->batch : 0;
    return x->dims[x->ndim - 1] == l->k && l->per_image > 0 && rows == l->per_image * g->batch;
}

qf_status qf_adaround_create(const qf_graph *g, const qf_calib_table *t, const qf_quant_opts *o,
                             const qf_adaround_opts *ao, qf_adaround **out)
{
    *out = NULL;
    qf_adaround *r = qfi_calloc(1, sizeof *r);
    if (!r) return QF_ERR_NOMEM;
    r->ao = ao ? *ao : (qf_adaround_opts){0};
    if (r->ao.iterations <= 0) r->ao.iterations = QF_ADAROUND_ITERATIONS;
    if (r->ao.images <= 0) r->ao.images = QF_ADAROUND_IMAGES;
    r->per_channel = !o->per_tensor_weights;
    qf_quant_opts fo = *o;
    fo.bias_fix = NULL;
    fo.adaround = NULL;
    qf_status st = qfi_layer_feed_init(&r->feed, g, t, &fo, r->ao.threads, "learned rounding");
    if (st != QF_OK) {
        free(r);
        return st;
    }
    r->layers = qfi_calloc((size_t)r->feed.n + 1, sizeof *r->layers);
    st = r->layers ? QF_OK : QF_ERR_NOMEM;
    for (int i = 0; i < r->feed.n && st == QF_OK; i++) {
        const qfi_feed_layer *fl = &r->feed.layers[i];
        const qf_node *n = &g->nodes[fl->node];
        ada_layer *l = &r->layers[r->n];
        if (fl->no_range || !layer_shape(g, n, l)) {
            qf_log(QF_LOG_DEBUG, "%s: node %s keeps rounding to nearest (%s)", g->source, n->name,
                   fl->no_range ? "its input holds zeros" : "its input is not sampled");
            memset(l, 0, sizeof *l);
            continue;
        }
        l->fl = fl;
        r->n++;
        const int64_t row = l->groups * l->k;
        int64_t cap = POOL_FLOATS / row;
        if (cap > QF_ADAROUND_POSITIONS) cap = QF_ADAROUND_POSITIONS;
        if (cap < QF_ADAROUND_BATCH) cap = QF_ADAROUND_BATCH;
        l->take = cap / r->ao.images;
        if (l->take < 1) l->take = 1;
        if (l->take > l->per_image) l->take = l->per_image;
        l->cap = l->take * r->ao.images;
        l->name = qfi_strdup(n->name);
        l->pool = qfi_calloc((size_t)(l->cap * row) + 1, sizeof *l->pool);
        if (!l->name || !l->pool) st = QF_ERR_NOMEM;
    }
    if (st != QF_OK) {
        qf_adaround_free(r);
        return st == QF_ERR_NOMEM ? qf_error(st, "learned rounding: out of memory for the samples") : st;
    }
    *out = r;
    return QF_OK;
}

/* ---- sampling ----------------------------------------------------------------------- */

/* splitmix64: the positions are a fixed function of the layer and the image. */
static uint64_t mix(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Conv input x (one image, C x in...) at output position p into each group's
 * row: dst[grp * cap * k + j], zeros where the window reads padding. */
static void conv_patch(const ada_layer *l, const float *x, int64_t p, float *dst)
{
    const qfi_window *w = &l->geo.w;
    const int64_t o2 = p % w->out[2], o1 = p / w->out[2] % w->out[1], o0 = p / (w->out[2] * w->out[1]);
    const int64_t cg = l->geo.C / l->geo.group, kk = qfi_window_k_size(w), plane = qfi_window_in_size(w);
    for (int64_t c = 0; c < l->geo.C; c++) {
        float *d = dst + (c / cg) * l->cap * l->k + (c % cg) * kk;
        const float *xc = x + c * plane;
        int64_t j = 0;
        for (int64_t k0 = 0; k0 < w->k[0]; k0++) {
            const int64_t i0 = o0 * w->stride[0] - w->pad[0] + k0 * w->dil[0];
            for (int64_t k1 = 0; k1 < w->k[1]; k1++) {
                const int64_t i1 = o1 * w->stride[1] - w->pad[1] + k1 * w->dil[1];
                for (int64_t k2 = 0; k2 < w->k[2]; k2++, j++) {
                    const int64_t i2 = o2 * w->stride[2] - w->pad[2] + k2 * w->dil[2];
                    const bool in = i0 >= 0 && i0 < w->in[0] && i1 >= 0 && i1 < w->in[1] && i2 >= 0 && i2 < w->in[2];
                    d[j] = in ? xc[(i0 * w->in[1] + i1) * w->in[2] + i2] : 0.0f;
                }
            }
        }
    }
}

/* The feed's function: `take` positions of each real image, spread evenly
 * (one drawn in each of `take` equal runs), into the sample. */
static qf_status sample(void *user, int k, const float *x, const float *x_q, size_t n, int images)
{
    qf_adaround *r = user;
    ada_layer *l = NULL;
    for (int i = 0; i < r->n && !l; i++)
        if (r->layers[i].fl == &r->feed.layers[k]) l = &r->layers[i];
    if (!l) return QF_OK;
    const size_t per = n / (size_t)r->feed.g->batch;
    for (int m = 0; m < images && l->rows + l->take <= l->cap; m++, l->images++) {
        uint64_t state = ((uint64_t)k << 32) ^ (uint64_t)l->images;
        const float *xm = x + (size_t)m * per;
        for (int64_t j = 0; j < l->take; j++, l->rows++) {
            const double u = (double)(mix(&state) >> 11) * 0x1.0p-53;
            int64_t p = (int64_t)(((double)j + u) * (double)l->per_image / (double)l->take);
            if (p >= l->per_image) p = l->per_image - 1;
            if (l->conv)
                conv_patch(l, xm, p, l->pool + l->rows * l->k);
            else
                memcpy(l->pool + l->rows * l->k, xm + p * l->k, (size_t)l->k * sizeof *l->pool);
        }
    }
    return QF_OK;
}

qf_status qf_adaround_run(qf_adaround *r, const float *input, int images)
{
    return qfi_layer_feed_run(&r->feed, input, images, sample, r);
}

/* ---- learning ----------------------------------------------------------------------- */

/* One layer's learning, shared by its blocks. */
typedef struct learn_job {
    const ada_layer *l;
    const qfi_anchor_f *af;
    const float *s;         /* per channel scale */
    const float *x;         /* groups x cap x k: the sample (rows shuffled), exact while the targets are
                               made, then as INT8 holds it */
    float *target;          /* ch x rows: the FP32 layer's output after its activation */
    int64_t rows, train, batch, held;  /* train rows [0, train) in windows of `batch`; held [rows - held, rows) */
    int iterations;
    qf_act act;             /* in the loss: the fused activation (none beside a fused residual) */
    float lo, hi;
    int8_t *q;              /* results, in the weight's layout */
    float *learned_s;
    double *near_err, *err; /* per channel, over the held-out rows */
    unsigned char *failed;  /* per block: out of memory */
} learn_job;

/* A weight's index in the (outer, ch, inner) layout from (channel, position in
 * the channel's input). */
static int64_t weight_at(const qfi_anchor_f *af, int64_t c, int64_t j)
{
    return ((j / af->inner) * af->ch + c) * af->inner + j % af->inner;
}

static float act_apply(const learn_job *j, float z)
{
    if (j->act == QF_ACT_RELU) return z > 0.0f ? z : 0.0f;
    if (j->act == QF_ACT_CLIP) return z < j->lo ? j->lo : z > j->hi ? j->hi : z;
    return qfi_act_value(j->act, z, 1.0f); /* the smooth ones as the epilogue computes them; else z */
}

/* The activation's derivative at z. */
static float act_slope(const learn_job *j, float z)
{
    switch (j->act) {
    case QF_ACT_RELU: return z > 0.0f;
    case QF_ACT_CLIP: return z > j->lo && z < j->hi;
    case QF_ACT_SIGMOID: {
        const float s = qfi_sigmoid(z);
        return s * (1.0f - s);
    }
    case QF_ACT_SILU: {
        const float s = qfi_sigmoid(z);
        return s + z * s * (1.0f - s);
    }
    case QF_ACT_HARD_SWISH: return z <= -3.0f ? 0.0f : z >= 3.0f ? 1.0f : z / 3.0f + 0.5f;
    case QF_ACT_GELU:
    case QF_ACT_GELU_TANH: /* Phi(z) + z phi(z), for both forms (the tanh one approximates it) */
        return 0.5f * (1.0f + erff(z * 0.70710678f)) + z * 0.39894228f * expf(-0.5f * z * z);
    default: return 1.0f;
    }
}

/* Block b's channels: [*c0, *c0 + *cb) of group *grp. */
static void block_range(const ada_layer *l, int64_t b, int64_t *c0, int64_t *cb, int64_t *grp)
{
    const int64_t per_group = l->ch / l->groups, blocks = (per_group + BLOCK - 1) / BLOCK;
    *grp = b / blocks;
    *c0 = *grp * per_group + b % blocks * BLOCK;
    const int64_t end = (*grp + 1) * per_group;
    *cb = end - *c0 < BLOCK ? end - *c0 : BLOCK;
}

static int64_t block_count(const ada_layer *l)
{
    const int64_t per_group = l->ch / l->groups;
    return l->groups * ((per_group + BLOCK - 1) / BLOCK);
}

/* y (cb x n) = w (cb x k) times rows [r0, r0 + n) of x (x's rows hold k). */
static void forward(const float *w, int64_t cb, int64_t k, const float *x, int64_t r0, int64_t n, float *y)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)cb, (int)n, (int)k, 1.0f, w, (int)k, x + r0 * k, (int)k,
                0.0f, y, (int)n);
}

/* Per channel of the block: the sum over rows [r0, r1) of (act(w x + b) - target)^2, in chunks of `batch`. */
static void block_error(const learn_job *j, const float *w, int64_t c0, int64_t cb, const float *x, int64_t r0,
                        int64_t r1, float *y, double *sum)
{
    for (int64_t c = 0; c < cb; c++) sum[c] = 0.0;
    for (int64_t r = r0; r < r1; r += j->batch) {
        const int64_t n = r1 - r < j->batch ? r1 - r : j->batch;
        forward(w, cb, j->l->k, x, r, n, y);
        for (int64_t c = 0; c < cb; c++) {
            const float *t = j->target + (c0 + c) * j->rows + r;
            for (int64_t i = 0; i < n; i++) {
                const double d = (double)act_apply(j, y[c * n + i] + j->af->bias[c0 + c]) - t[i];
                sum[c] += d * d;
            }
        }
    }
}

/* The FP32 output after the activation on the exact sample (before it is quantized). */
static void target_block(void *arg, int64_t b)
{
    learn_job *j = arg;
    const ada_layer *l = j->l;
    int64_t c0, cb, grp;
    block_range(l, b, &c0, &cb, &grp);
    float *w = malloc((size_t)(cb * l->k) * sizeof *w);
    if (!w) {
        j->failed[b] = 1;
        return;
    }
    for (int64_t c = 0; c < cb; c++)
        for (int64_t i = 0; i < l->k; i++) w[c * l->k + i] = j->af->w[weight_at(j->af, c0 + c, i)];
    float *t = j->target + c0 * j->rows;
    forward(w, cb, l->k, j->x + grp * l->cap * l->k, 0, j->rows, t);
    for (int64_t c = 0; c < cb; c++)
        for (int64_t i = 0; i < j->rows; i++) t[c * j->rows + i] = act_apply(j, t[c * j->rows + i] + j->af->bias[c0 + c]);
    free(w);
}

/* One block's state: per weight (cb x k, row-major) its floor level, the
 * rounding variable V and Adam's moments, and scratch. */
typedef struct block {
    int64_t c0, cb, grp, k;
    const float *x;          /* its group's sample */
    float *base, *V, *m1, *m2, *wt, *grad, *sig, *e;
    unsigned char *free_w;   /* the weight has two roundings to choose from */
    double *norm;            /* per channel: train rows / round-to-nearest's error there (0: it is exact) */
} block;

/* Round to nearest's error normalizes the loss; V starts where h(V) is the
 * fractional part of w / s, so that the soft weight is w. */
static void block_init(const learn_job *j, block *bk)
{
    const int64_t k = bk->k;
    for (int64_t c = 0; c < bk->cb; c++) {
        const float s = j->s[bk->c0 + c];
        for (int64_t i = 0; i < k; i++) {
            const float w = j->af->w[weight_at(j->af, bk->c0 + c, i)];
            const float v = qfi_div(w, s), f = floorf(v);
            bk->base[c * k + i] = f;
            bk->wt[c * k + i] = qfi_dequantize_i8(qfi_quantize_f32(w, s), s);
            /* a weight on a level, or at the ends of the range, has one rounding */
            bk->free_w[c * k + i] = v > f && f >= -128.0f && f < 127.0f;
            bk->V[c * k + i] = -logf((ZETA - GAMMA) / (v - f - GAMMA) - 1.0f);
        }
    }
    block_error(j, bk->wt, bk->c0, bk->cb, bk->x, 0, j->train, bk->e, bk->norm);
    for (int64_t c = 0; c < bk->cb; c++) bk->norm[c] = bk->norm[c] > 0.0 ? (double)j->train / bk->norm[c] : 0.0;
}

/* Step t on the window of training rows [r0, r0 + batch). */
static void block_step(const learn_job *j, block *bk, int t)
{
    const int64_t k = bk->k, B = j->batch, r0 = t % (j->train / B) * B;
    for (int64_t c = 0; c < bk->cb; c++) {
        const float s = j->s[bk->c0 + c];
        for (int64_t i = 0; i < k; i++) {
            const int64_t a = c * k + i;
            const float sig = 1.0f / (1.0f + expf(-bk->V[a]));
            const float h = fminf(fmaxf(sig * (ZETA - GAMMA) + GAMMA, 0.0f), 1.0f);
            bk->sig[a] = sig;
            bk->wt[a] = s * (bk->base[a] + (bk->free_w[a] ? h : 0.0f));
        }
    }
    forward(bk->wt, bk->cb, k, bk->x, r0, B, bk->e);
    for (int64_t c = 0; c < bk->cb; c++) { /* e becomes d loss / d (w x) */
        const float *tg = j->target + (bk->c0 + c) * j->rows + r0;
        const float scale = (float)(2.0 * bk->norm[c] / (double)B), bias = j->af->bias[bk->c0 + c];
        for (int64_t i = 0; i < B; i++) {
            const float z = bk->e[c * B + i] + bias;
            const float d = act_slope(j, z);
            bk->e[c * B + i] = d != 0.0f ? (act_apply(j, z) - tg[i]) * d * scale : 0.0f;
        }
    }
    /* d loss / d soft weight = e (cb x B) times the window's rows (B x k) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)bk->cb, (int)k, (int)B, 1.0f, bk->e, (int)B,
                bk->x + r0 * k, (int)k, 0.0f, bk->grad, (int)k);
    const int warm = (int)(WARMUP * j->iterations);
    const bool reg = t >= warm;
    const float beta =
        reg ? (float)(BETA_END + (BETA_START - BETA_END) * (1.0 - (double)(t - warm) / (double)(j->iterations - warm)))
            : 0.0f;
    const float lam = LAMBDA / (float)k;
    const float bc1 = 1.0f - powf(ADAM_B1, (float)(t + 1)), bc2 = 1.0f - powf(ADAM_B2, (float)(t + 1));
    for (int64_t c = 0; c < bk->cb; c++) {
        if (bk->norm[c] == 0.0) continue;
        const float s = j->s[bk->c0 + c];
        for (int64_t i = 0; i < k; i++) {
            const int64_t a = c * k + i;
            const float sig = bk->sig[a], hu = sig * (ZETA - GAMMA) + GAMMA;
            if (!bk->free_w[a] || !(hu > 0.0f && hu < 1.0f)) continue; /* clamped h: no gradient reaches V */
            float dh = bk->grad[a] * s;
            if (reg) { /* d(1 - |2h - 1|^beta)/dh */
                const float u = 2.0f * hu - 1.0f, au = fabsf(u);
                const float d = au > 0.0f ? 2.0f * beta * powf(au, beta - 1.0f) : 0.0f;
                dh -= lam * (u > 0.0f ? d : -d);
            }
            const float dv = dh * (ZETA - GAMMA) * sig * (1.0f - sig);
            bk->m1[a] = ADAM_B1 * bk->m1[a] + (1.0f - ADAM_B1) * dv;
            bk->m2[a] = ADAM_B2 * bk->m2[a] + (1.0f - ADAM_B2) * dv * dv;
            bk->V[a] -= LR * (bk->m1[a] / bc1) / (sqrtf(bk->m2[a] / bc2) + ADAM_EPS);
        }
    }
}

/* Hard rounding (up where h(V) >= 1/2, that is V >= 0), kept per channel
 * where its held-out error is below round to nearest's. */
static void block_finish(learn_job *j, block *bk)
{
    const int64_t k = bk->k, c0 = bk->c0;
    const int64_t h0 = j->rows - j->held;
    double *near = j->near_err + c0, *mine = j->err + c0;
    float *level = bk->grad;
    for (int64_t c = 0; c < bk->cb; c++)
        for (int64_t i = 0; i < k; i++) {
            const int64_t a = c * k + i;
            const float up = bk->free_w[a] && bk->norm[c] > 0.0 && bk->V[a] >= 0.0f ? 1.0f : 0.0f;
            level[a] = fminf(fmaxf(bk->base[a] + up, -128.0f), 127.0f);
            bk->wt[a] = j->s[c0 + c] * level[a];
        }
    block_error(j, bk->wt, c0, bk->cb, bk->x, h0, j->rows, bk->e, mine);
    for (int64_t c = 0; c < bk->cb; c++)
        for (int64_t i = 0; i < k; i++) {
            const float w = j->af->w[weight_at(j->af, c0 + c, i)];
            bk->wt[c * k + i] = qfi_dequantize_i8(qfi_quantize_f32(w, j->s[c0 + c]), j->s[c0 + c]);
        }
    block_error(j, bk->wt, c0, bk->cb, bk->x, h0, j->rows, bk->e, near);
    for (int64_t c = 0; c < bk->cb; c++) {
        const bool keep = mine[c] < near[c];
        if (!keep) mine[c] = near[c];
        j->learned_s[c0 + c] = keep ? j->s[c0 + c] : NAN;
        for (int64_t i = 0; i < k; i++) {
            const int64_t at = weight_at(j->af, c0 + c, i);
            j->q[at] = keep ? (int8_t)level[c * k + i] : qfi_quantize_f32(j->af->w[at], j->s[c0 + c]);
        }
    }
}

/* Learns block b's rounding: AdaRound's loop (soft weights s (floor + h(V)),
 * the output error on a window of training rows, the regularizer on h, Adam
 * on V) for the job's iterations. */
static void learn_block(void *arg, int64_t b)
{
    learn_job *j = arg;
    block bk = {.k = j->l->k};
    block_range(j->l, b, &bk.c0, &bk.cb, &bk.grp);
    const int64_t nw = bk.cb * bk.k;
    bk.x = j->x + bk.grp * j->l->cap * bk.k;
    float *buf = qfi_calloc((size_t)(7 * nw + bk.cb * j->batch) + 1, sizeof *buf);
    bk.norm = qfi_calloc((size_t)bk.cb + 1, sizeof *bk.norm);
    bk.free_w = qfi_calloc((size_t)nw + 1, 1);
    if (buf && bk.norm && bk.free_w) {
        bk.base = buf, bk.V = bk.base + nw, bk.m1 = bk.V + nw, bk.m2 = bk.m1 + nw, bk.wt = bk.m2 + nw;
        bk.grad = bk.wt + nw, bk.sig = bk.grad + nw, bk.e = bk.sig + nw;
        block_init(j, &bk);
        for (int t = 0; t < j->iterations; t++) block_step(j, &bk, t);
        block_finish(j, &bk);
    } else {
        j->failed[b] = 1;
    }
    free(buf);
    free(bk.norm);
    free(bk.free_w);
}

/* Shuffles the sample's rows (the same order in every group), so that a window
 * of training rows mixes images and the held-out rows are a random fifth. */
static qf_status shuffle_rows(ada_layer *l, int64_t rows)
{
    int64_t *perm = qfi_calloc((size_t)rows + 1, sizeof *perm);
    float *tmp = qfi_calloc((size_t)(rows * l->k) + 1, sizeof *tmp);
    if (!perm || !tmp) {
        free(perm), free(tmp);
        return QF_ERR_NOMEM;
    }
    uint64_t state = 0x5EEDull;
    for (int64_t i = 0; i < rows; i++) perm[i] = i;
    for (int64_t i = rows - 1; i > 0; i--) {
        const int64_t r = (int64_t)(mix(&state) % (uint64_t)(i + 1)), s = perm[i];
        perm[i] = perm[r];
        perm[r] = s;
    }
    for (int64_t grp = 0; grp < l->groups; grp++) {
        float *x = l->pool + grp * l->cap * l->k;
        for (int64_t i = 0; i < rows; i++) memcpy(tmp + i * l->k, x + perm[i] * l->k, (size_t)l->k * sizeof *tmp);
        memcpy(x, tmp, (size_t)(rows * l->k) * sizeof *tmp);
    }
    free(perm);
    free(tmp);
    return QF_OK;
}

/* Learns layer l's rounding; *info says what it did. */
static qf_status learn_layer(qf_adaround *r, ada_layer *l, qf_adaround_layer *info)
{
    const qf_graph *g = r->feed.g;
    const qf_node *n = &g->nodes[l->fl->node];
    memset(info, 0, sizeof *info);
    info->node = n->name;
    info->weights = l->count;
    info->positions = l->rows;
    info->channels = (int)l->ch;
    learn_job j = {.l = l, .rows = l->rows, .iterations = r->ao.iterations, .act = l->fl->act, .lo = l->fl->act_lo,
                   .hi = l->fl->act_hi};
    if (l->fl->residual >= 0) j.act = QF_ACT_NONE; /* the activation follows the residual, which is not sampled */
    j.held = j.rows / HELD_OUT;
    j.batch = j.rows - j.held < QF_ADAROUND_BATCH ? j.rows - j.held : QF_ADAROUND_BATCH;
    j.train = j.batch > 0 ? (j.rows - j.held) / j.batch * j.batch : 0;
    if (j.held < 1 || j.train < 1) return QF_OK; /* too few positions: rounds to nearest */
    qfi_anchor_f af;
    QF_CHECK(qfi_anchor_f_make(g, n, l->fl->bias_add, NULL, &af));
    float *s = qfi_calloc((size_t)l->ch + 1, sizeof *s);
    float *target = qfi_calloc((size_t)(l->ch * j.rows) + 1, sizeof *target);
    double *errs = qfi_calloc((size_t)(2 * l->ch) + 1, sizeof *errs);
    const int64_t blocks = block_count(l);
    unsigned char *failed = qfi_calloc((size_t)blocks + 1, 1);
    l->q = qfi_calloc((size_t)l->count + 1, 1);
    l->s = qfi_calloc((size_t)l->ch + 1, sizeof *l->s);
    qf_status st = s && target && errs && failed && l->q && l->s ? QF_OK : QF_ERR_NOMEM;
    if (st == QF_OK) st = shuffle_rows(l, j.rows);
    if (st == QF_OK) {
        qfi_quant_weight_scales(af.w, af.outer, af.ch, af.inner, r->per_channel, s);
        j.af = &af;
        j.s = s;
        j.x = l->pool;
        j.target = target;
        j.q = l->q;
        j.learned_s = l->s;
        j.near_err = errs;
        j.err = errs + l->ch;
        j.failed = failed;
        qfi_parallel_for(r->ao.threads, blocks, target_block, &j);
        for (int64_t grp = 0; grp < l->groups; grp++) { /* the sample as INT8 holds it from here on */
            float *x = l->pool + grp * l->cap * l->k;
            qfi_fake_quantize_zp(x, x, (size_t)(j.rows * l->k), l->fl->scale, l->fl->zero_point);
        }
        qfi_parallel_for(r->ao.threads, blocks, learn_block, &j);
        for (int64_t b = 0; b < blocks; b++)
            if (failed[b]) st = QF_ERR_NOMEM;
    }
    if (st == QF_ERR_NOMEM) st = qf_error(st, "out of memory");
    for (int64_t c = 0; st == QF_OK && c < l->ch; c++) {
        info->nearest_error += errs[c];
        info->error += errs[l->ch + c];
        info->learned += l->s[c] == l->s[c];
    }
    if (st != QF_OK || !info->learned) {
        free(l->q);
        free(l->s);
        l->q = NULL;
        l->s = NULL;
    }
    free(s);
    free(target);
    free(errs);
    free(failed);
    qfi_anchor_f_free(&af);
    return st;
}

qf_status qf_adaround_learn(qf_adaround *r, qf_adaround_progress_fn progress, void *user)
{
    /* the blocks spread over the threads; OpenBLAS's own threads on top of
     * them would only contend (as in the CPU engine) */
    openblas_set_num_threads(1);
    qf_status st = QF_OK;
    for (int i = 0; i < r->n && st == QF_OK; i++) {
        ada_layer *l = &r->layers[i];
        qf_adaround_layer info;
        st = learn_layer(r, l, &info);
        free(l->pool);
        l->pool = NULL;
        if (st != QF_OK) {
            st = qfi_error_node(st, r->feed.g, &r->feed.g->nodes[l->fl->node]);
            break;
        }
        qf_log(QF_LOG_DEBUG, "learned rounding: %s: %lld weights, %lld positions, %d of %d channels learned, held-out "
               "error %.4g of round-to-nearest's %.4g", info.node, (long long)info.weights, (long long)info.positions,
               info.learned, info.channels, info.error, info.nearest_error);
        if (progress) progress(user, i, r->n, &info);
    }
    return st;
}

void qfi_adaround_find(const qf_adaround *r, const char *name, int64_t count, int64_t ch, const int8_t **q,
                       const float **s)
{
    *q = NULL;
    *s = NULL;
    for (int i = 0; i < r->n; i++) {
        const ada_layer *l = &r->layers[i];
        if (!l->q || l->count != count || l->ch != ch || strcmp(l->name, name)) continue;
        *q = l->q;
        *s = l->s;
        return;
    }
}
