/* INT8 Conv on the CPU with exact integer semantics: per (image, group) the
 * int8 input is widened to float, unfolded by the FP32 kernel's im2col and
 * multiplied by the widened int8 weights through qfi_cpu_igemm (exact int32
 * sums); depthwise convolutions sum in int32 directly. Each output plane then
 * goes through the shared requantize epilogue (bias, scales, residual,
 * activation, saturation). */
#include "kernels.h"
#include "ops/nn.h"
#include <limits.h>

static size_t align64(size_t b) { return (b + 63) / 64 * 64; }

static bool is_depthwise(const qfi_conv_geom *geo) { return geo->C == geo->group; }

static int64_t conv_slots(int64_t items)
{
    int64_t cpus = qfi_cpu_count();
    return items < cpus ? items : cpus;
}

/* Scratch layout. Shared: m (M floats) | W as float (M*Kdim), not for depthwise.
 * Per slot: depthwise: acc (OUT int32); else x as float (Cg*IN) | col (Kdim*OUT)
 * | tmp (Mg*OUT floats) | acc (Mg*OUT int32). */
typedef struct conv8_layout {
    size_t m, wf, slot;
    size_t xf, col, tmp, acc; /* offsets within a slot */
    int64_t slots;
} conv8_layout;

static void layout(const qfi_conv_geom *geo, conv8_layout *L)
{
    const int64_t cg = geo->C / geo->group, mg = geo->M / geo->group;
    const int64_t ksz = qfi_window_k_size(&geo->w), in = qfi_window_in_size(&geo->w),
                  out = qfi_window_out_size(&geo->w), kdim = cg * ksz;
    memset(L, 0, sizeof *L);
    L->m = align64((size_t)geo->M * 4);
    L->slots = conv_slots(is_depthwise(geo) ? geo->N * geo->M : geo->N * geo->group);
    if (is_depthwise(geo)) {
        L->slot = align64((size_t)out * 4);
        return;
    }
    L->wf = align64((size_t)(geo->M * kdim) * 4);
    L->xf = 0;
    L->col = align64((size_t)(cg * in) * 4);
    L->tmp = L->col + align64((size_t)(kdim * out) * 4);
    L->acc = L->tmp + align64((size_t)(mg * out) * 4);
    L->slot = L->acc + align64((size_t)(mg * out) * 4);
}

size_t qfi_cpu_conv_int8_scratch(const qf_graph *g, const qf_node *n)
{
    qfi_conv_geom geo;
    if (qfi_conv_geometry(g, n, &geo) != QF_OK) return 0;
    conv8_layout L;
    layout(&geo, &L);
    return L.m + L.wf + (size_t)L.slots * L.slot;
}

typedef struct conv8_job {
    const qfi_conv_geom *geo;
    const conv8_layout *L;
    const int8_t *x, *w, *res;
    const float *wf;
    char *y;
    size_t es; /* bytes per output element */
    const qfi_requant *rq;
    char *slots;
    int64_t items;
} conv8_job;

/* Requantizes plane `c` of image `nimg` from acc (OUT int32). */
static void emit_plane(const conv8_job *j, int64_t nimg, int64_t c, const int32_t *acc)
{
    const int64_t out = qfi_window_out_size(&j->geo->w), at = (nimg * j->geo->M + c) * out;
    qfi_requantize(j->rq, acc, j->res ? j->res + at : NULL, out, c, 0, j->y + (size_t)at * j->es);
}

/* Image n, group gi: acc (Mg, OUT) = W_g (Mg, Cg*K) x col (Cg*K, OUT). */
static void conv8_item(const conv8_job *j, int64_t item, char *slot)
{
    const qfi_conv_geom *geo = j->geo;
    const int64_t nimg = item / geo->group, gi = item % geo->group;
    const int64_t cg = geo->C / geo->group, mg = geo->M / geo->group;
    const int64_t in = qfi_window_in_size(&geo->w), out = qfi_window_out_size(&geo->w);
    const int64_t kdim = cg * qfi_window_k_size(&geo->w);
    float *xf = (float *)(slot + j->L->xf), *col = (float *)(slot + j->L->col), *tmp = (float *)(slot + j->L->tmp);
    int32_t *acc = (int32_t *)(slot + j->L->acc);
    const int8_t *xg = j->x + (nimg * geo->C + gi * cg) * in; /* (Cg, D,H,W) */
    for (int64_t i = 0; i < cg * in; i++) xf[i] = xg[i];
    qfi_cpu_im2col(xf, cg, &geo->w, col);
    qfi_cpu_igemm(mg, out, kdim, j->wf + gi * mg * kdim, kdim, col, out, false, tmp, acc);
    for (int64_t m = 0; m < mg; m++) emit_plane(j, nimg, gi * mg + m, acc + m * out);
}

/* Depthwise: output channel m of image n reads only input channel m / (M/group). */
static void depthwise8_plane(const conv8_job *j, int64_t plane, int32_t *acc)
{
    const qfi_conv_geom *geo = j->geo;
    const qfi_window *w = &geo->w;
    const int64_t n = plane / geo->M, m = plane % geo->M, c = m / (geo->M / geo->group);
    const int64_t D = w->in[0], H = w->in[1], W = w->in[2];
    const int8_t *xc = j->x + (n * geo->C + c) * qfi_window_in_size(w); /* (D,H,W) */
    const int8_t *wm = j->w + m * qfi_window_k_size(w);                   /* (Kd,Kh,Kw) */
    int32_t *a = acc;
    for (int64_t od = 0; od < w->out[0]; od++)
        for (int64_t oh = 0; oh < w->out[1]; oh++)
            for (int64_t ow = 0; ow < w->out[2]; ow++) {
                int32_t s = 0;
                for (int64_t kd = 0; kd < w->k[0]; kd++) {
                    int64_t id = od * w->stride[0] - w->pad[0] + kd * w->dil[0];
                    if (id < 0 || id >= D) continue;
                    for (int64_t kh = 0; kh < w->k[1]; kh++) {
                        int64_t ih = oh * w->stride[1] - w->pad[1] + kh * w->dil[1];
                        if (ih < 0 || ih >= H) continue;
                        const int8_t *xr = xc + (id * H + ih) * W;
                        const int8_t *wr = wm + (kd * w->k[1] + kh) * w->k[2];
                        for (int64_t kw = 0; kw < w->k[2]; kw++) {
                            int64_t iw = ow * w->stride[2] - w->pad[2] + kw * w->dil[2];
                            if (iw >= 0 && iw < W) s += (int32_t)wr[kw] * xr[iw];
                        }
                    }
                }
                *a++ = s;
            }
    emit_plane(j, n, m, acc);
}

/* Slot t runs items t, t+slots, ... with its own buffers. */
static void conv8_slot(void *arg, int64_t t)
{
    const conv8_job *j = arg;
    char *slot = j->slots + (size_t)t * j->L->slot;
    for (int64_t item = t; item < j->items; item += j->L->slots) {
        if (is_depthwise(j->geo)) depthwise8_plane(j, item, (int32_t *)slot);
        else conv8_item(j, item, slot);
    }
}

qf_status qfi_cpu_conv_int8(const qfi_kernel_args *a)
{
    const qf_graph *g = a->g;
    const qf_node *n = a->n;
    qfi_conv_geom geo;
    QF_CHECK(qfi_conv_geometry(g, n, &geo));
    QF_CHECK(qfi_int8_operands(g, n, geo.M));
    const qf_value *xv = qfi_in(g, n, 0), *rv = qfi_in(g, n, 4), *yv = qfi_out(g, n, 0);
    const int64_t out = qfi_window_out_size(&geo.w), kdim = geo.C / geo.group * qfi_window_k_size(&geo.w);
    if (rv && qf_value_numel(rv) != geo.N * geo.M * out)
        return qf_error(QF_ERR_INVALID, "residual %s does not match the output", rv->name);
    /* |sum| <= Kdim * 128 * 127 plus a bias within QFI_INT8_BIAS_LIMIT must stay inside int32 */
    if (kdim > QFI_INT8_MAX_REDUCTION)
        return qf_error(QF_ERR_UNSUPPORTED, "INT8 reduction of %lld terms could overflow int32", (long long)kdim);
    if (kdim > INT_MAX || out > INT_MAX || geo.M > INT_MAX)
        return qf_error(QF_ERR_UNSUPPORTED, "GEMM dimensions exceed the BLAS int range");
    if (geo.N == 0 || geo.M == 0 || out == 0) return QF_OK;
    if (!a->scratch) return qf_error(QF_ERR_USAGE, "no INT8 scratch was provided");
    conv8_layout L;
    layout(&geo, &L);
    char *base = a->scratch;
    float *m = (float *)base;
    qfi_requant rq;
    qfi_requant_init(&rq, m, geo.M, xv->scale, a->in[3], a->in[2], rv ? rv->scale : 0.0f, yv->dtype, yv->scale, n->act,
                     n->act_lo, n->act_hi);
    conv8_job j = {.geo = &geo, .L = &L, .x = a->in[0], .w = a->in[1], .res = rv ? a->in[4] : NULL,
                   .y = a->out[0], .es = qf_dtype_info(yv->dtype)->size, .rq = &rq, .slots = base + L.m + L.wf};
    if (!is_depthwise(&geo)) {
        float *wf = (float *)(base + L.m);
        const int8_t *w = a->in[1];
        for (int64_t i = 0; i < geo.M * kdim; i++) wf[i] = w[i];
        j.wf = wf;
    }
    j.items = is_depthwise(&geo) ? geo.N * geo.M : geo.N * geo.group;
    int threads = a->threads > 0 ? a->threads : qfi_cpu_count();
    int64_t slots = L.slots < threads ? L.slots : threads;
    /* L.slots buffers exist; run at most that many slots, striding by L.slots */
    conv8_layout Lrun = L;
    Lrun.slots = slots;
    j.L = &Lrun;
    qfi_parallel_for((int)slots, slots, conv8_slot, &j);
    return QF_OK;
}
