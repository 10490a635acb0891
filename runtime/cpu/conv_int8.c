/* INT8 Conv on the CPU with exact integer arithmetic (kernels.h's INT8
 * section), on one of three paths:
 *  - depthwise (one input channel per group), 1-D/2-D windows: the padded
 *    input plane's rows are expanded into the horizontal taps of every
 *    output, four to a quad, then each output row is a sum of quad dot
 *    products (dw_plane), the plane requantized in one run;
 *  - direct, other 1-D/2-D windows, per group: the image's channels in quads
 *    interleaved into padded phase planes (conv_direct.c's layout), then
 *    register blocks of output channels x positions (int8_simd.c);
 *  - any other window (3-D): a plain loop.
 * The weights are packed once, when the engine is built (prepare). A tap in
 * the padding reads the input's zero point (0 unless the model was quantized
 * elsewhere with asymmetric activations; the bias holds its correction).
 * Every path ends in lib/quant_math.h's requantizing epilogue. */
#include "kernels.h"
#include "ops/nn.h"

static size_t align64(size_t b) { return (b + 63) / 64 * 64; }

typedef enum conv8_path { PATH_DEPTHWISE, PATH_DIRECT, PATH_LOOP } conv8_path;

/* Quads of taps per row of a depthwise window: taps 4k..4k+3 of output i are
 * quad i + k*kstep of the expanded row, which needs 4*dw to be a multiple of
 * sw when a row has more than four taps. */
static int64_t dw_quads_per_row(const qfi_window *w) { return (w->k[2] + 3) / 4; }
static int64_t dw_kstep(const qfi_window *w) { return 4 * w->dil[2] / w->stride[2]; }

static conv8_path choose_path(const qfi_conv_geom *geo)
{
    const qfi_window *w = &geo->w;
    if (!qfi_cpu_direct_window_ok(w)) return PATH_LOOP;
    if (geo->C != geo->group) return PATH_DIRECT;
    if (dw_quads_per_row(w) == 1 || 4 * w->dil[2] % w->stride[2] == 0) return PATH_DEPTHWISE;
    return PATH_LOOP;
}

/* What prepare builds: the path, the kernels it was packed for, and per
 * output channel the epilogue's addend: bias - 128 * (sum of the channel's
 * weights), the 128 that the u8 activations carry (wrapping int32: exact
 * once the accumulator is added). Direct weights: per group and block of mb
 * output channels, (quad, tap, mb) quads of four s8 (channels 4q..4q+3,
 * zero past the group's), each as qfi_i8_put_quad packs it for the kernels.
 * Depthwise: per output channel, (kh, quads per row) words of four s8 (taps
 * 4k..4k+3 of the row, zero past kw). */
typedef struct conv8_state {
    conv8_path path;
    const qfi_i8_kernels *k;
    int32_t *add;
    int32_t *w;
    /* direct */
    int64_t quads, blocks;      /* channel quads (tiles: a multiple of kq) and weight blocks per group */
    int64_t kq;                 /* tiles: quads per tile row group */
    int64_t reach;              /* phase rows below an output row that its taps read */
    qfi_i8_geom bg;             /* a block's reduction: quads, planes, tap offsets in bytes */
    const unsigned char *phase; /* per phase plane: whether a tap reads it */
    qfi_direct_plan plan;       /* of one group */
} conv8_state;

void qfi_cpu_int8_release(void *state) { free(state); }

static qfi_conv_geom group_geom(const qfi_conv_geom *geo)
{
    qfi_conv_geom g1 = *geo;
    g1.C = geo->C / geo->group;
    g1.M = geo->M / geo->group;
    g1.group = 1;
    return g1;
}

/* The direct path's layout: the plan of one group, the phases and rows the
 * taps read, the taps' byte offsets (off: plan.taps entries). */
static void direct_setup(const qfi_conv_geom *geo, conv8_state *st, int64_t *off, unsigned char *phase)
{
    const qfi_window *w = &geo->w;
    qfi_conv_geom g1 = group_geom(geo);
    qfi_direct_plan *p = &st->plan;
    qfi_cpu_direct_plan(&g1, false, QFI_I8_CHUNK_MAX, p);
    memset(phase, 0, (size_t)(p->sh * p->sw));
    st->reach = 0;
    for (int64_t kh = 0; kh < w->k[1]; kh++)
        for (int64_t kw = 0; kw < w->k[2]; kw++) {
            int64_t i = kh * w->dil[1], j = kw * w->dil[2];
            phase[i % p->sh * p->sw + j % p->sw] = 1;
            if (i / p->sh + 1 > st->reach) st->reach = i / p->sh + 1;
        }
    for (int64_t t = 0; t < p->taps; t++) off[t] = p->off[t] * 4;
    st->phase = phase;
    st->bg = (qfi_i8_geom){.quads = st->quads, .stride = p->plane * 4, .taps = p->taps, .kq = st->kq, .off = off};
}

qf_status qfi_cpu_conv_int8_prepare(const qf_graph *g, const qf_node *n, void **state)
{
    *state = NULL;
    qfi_conv_geom geo;
    QF_CHECK(qfi_conv_geometry(g, n, &geo));
    QF_CHECK(qfi_int8_operands(g, n, geo.M));
    const qfi_window *win = &geo.w;
    const conv8_path path = choose_path(&geo);
    const int64_t cg = geo.C / geo.group, mg = geo.M / geo.group, taps = qfi_window_k_size(win);
    int64_t quads, kq; /* the direct path's reduction; the other paths use k's epilogue and depthwise kernels */
    const qfi_i8_kernels *k = qfi_cpu_i8_reduction(cg, &quads, &kq);
    const int64_t blocks = (mg + k->mb - 1) / k->mb;
    const int64_t kh = win->k[1], kw = win->k[2], nd = dw_quads_per_row(win);
    const int64_t words = path == PATH_DIRECT      ? geo.group * blocks * quads * taps * k->mb * k->wq
                          : path == PATH_DEPTHWISE ? geo.M * kh * nd
                                                   : 0;
    const int64_t phases = path == PATH_DIRECT ? win->stride[1] * win->stride[2] : 0;
    const size_t head = align64(sizeof(conv8_state)), addb = align64((size_t)geo.M * 4),
                 wb = align64((size_t)words * 4), offb = path == PATH_DIRECT ? align64((size_t)taps * 8) : 0;
    conv8_state *st = malloc(head + addb + wb + offb + (size_t)phases + 1);
    if (!st) return qf_error(QF_ERR_NOMEM, "out of memory packing INT8 weights");
    memset(st, 0, sizeof *st);
    st->path = path, st->k = k, st->quads = quads, st->kq = kq, st->blocks = blocks;
    char *base = (char *)st;
    st->add = (int32_t *)(base + head);
    st->w = (int32_t *)(base + head + addb);
    if (path == PATH_DIRECT)
        direct_setup(&geo, st, (int64_t *)(base + head + addb + wb), (unsigned char *)(base + head + addb + wb + offb));
    const int8_t *w = qfi_in(g, n, 1)->data;
    const qf_value *bv = qfi_in(g, n, 2);
    const int32_t *bias = bv ? bv->data : NULL;
    const int64_t per_m = cg * taps;
    for (int64_t m = 0; m < geo.M; m++) {
        uint32_t s = 0;
        for (int64_t i = 0; i < per_m; i++) s += (uint32_t)(int32_t)w[m * per_m + i];
        st->add[m] = (int32_t)((bias ? (uint32_t)bias[m] : 0u) - 128u * s);
    }
    int8_t *pw = (int8_t *)st->w; /* words written byte by byte: byte j of a word is in memory order */
    if (path == PATH_DIRECT && k->tiles) {
        for (int64_t gi = 0; gi < geo.group; gi++)
            for (int64_t b = 0; b < blocks; b++)
                for (int64_t t = 0; t < taps; t++)
                    for (int64_t q0 = 0; q0 < quads; q0 += kq)
                        for (int64_t r = 0; r < k->mb; r++)
                            for (int64_t j = 0; j < 4 * kq; j++) {
                                int64_t mi = b * k->mb + r, c = 4 * q0 + j;
                                *pw++ = mi < mg && c < cg ? w[((gi * mg + mi) * cg + c) * taps + t] : 0;
                            }
    } else if (path == PATH_DIRECT) {
        int32_t *pq = st->w;
        for (int64_t gi = 0; gi < geo.group; gi++)
            for (int64_t b = 0; b < blocks; b++)
                for (int64_t q = 0; q < quads; q++)
                    for (int64_t t = 0; t < taps; t++)
                        for (int64_t r = 0; r < k->mb; r++) {
                            int8_t quad[4];
                            for (int64_t j = 0; j < 4; j++) {
                                int64_t mi = b * k->mb + r, c = 4 * q + j;
                                quad[j] = mi < mg && c < cg ? w[((gi * mg + mi) * cg + c) * taps + t] : 0;
                            }
                            pq = qfi_i8_put_quad(k, pq, quad);
                        }
    } else if (path == PATH_DEPTHWISE) {
        for (int64_t m = 0; m < geo.M; m++)
            for (int64_t i = 0; i < kh; i++)
                for (int64_t q = 0; q < nd; q++)
                    for (int64_t j = 0; j < 4; j++) *pw++ = 4 * q + j < kw ? w[(m * kh + i) * kw + 4 * q + j] : 0;
    }
    *state = st;
    return QF_OK;
}

/* ---- scratch ---------------------------------------------------------------------- */

/* Depthwise: the padded u8 plane, its rows expanded, the plane's sums. */
typedef struct dw8_layout {
    bool flat;                    /* the plane's outputs are one run (below) */
    int64_t nq;                   /* quads per expanded row */
    int64_t phases;               /* flat: the expanded rows stored as this many phase planes */
    int64_t per_phase;            /* expanded rows of a phase plane */
    int64_t step;                 /* quads from an output row's window to the next's (not flat) */
    int64_t kstep;                /* quads from a window row's dword to the next */
    int64_t dplane;               /* flat: quads of one dword's expanded plane */
    int64_t off[QFI_DIRECT_MAX_TAPS]; /* per window row: its first quad for output row 0 */
    int64_t prow;                 /* bytes of one padded input row */
    size_t plane, e, acc, slot;   /* offsets in a slot, its size */
} dw8_layout;

static int64_t vectors(int64_t n) { return (n + 15) / 16; }

static void dw_layout(const qfi_conv_geom *geo, dw8_layout *L)
{
    const qfi_window *w = &geo->w;
    const int64_t Hp = w->in[1] + w->pad[1] + w->pad_end[1], Wp = w->in[2] + w->pad[2] + w->pad_end[2];
    const int64_t sh = w->stride[1], dh = w->dil[1], kh = w->k[1], Ho = w->out[1], Wo = w->out[2];
    const int64_t nd = dw_quads_per_row(w), rows_nq = vectors(Wo) * 16 + (nd - 1) * dw_kstep(w);
    /* Flat: each dword k of the window rows (taps 4k..4k+3) expanded into a
     * plane of its own, rows of exactly Wo quads stored as sh phase planes
     * (padded rows a, a + sh, a + 2sh, ... in phase a), so that dword k of
     * window row r of output p = (oh, ow) is quad p + (r*dh / sh)*Wo of
     * phase (r*dh) % sh of plane k: the plane's outputs are one run, vectors
     * across rows (a 7x7 map: 49 outputs in 4 vectors instead of 7). Taken
     * where it costs fewer vectors than output row by row, which a window
     * one dword wide always does; a wider one only on narrow maps (8x8 with
     * 5x5 windows: 64 outputs in 4 vectors instead of 8 half-empty ones). */
    const int64_t flat_cost = nd * (Hp * vectors(Wo) + kh * vectors(Ho * Wo));
    const int64_t rows_cost = Hp * vectors(rows_nq) + Ho * kh * nd * vectors(Wo);
    L->flat = nd == 1 || flat_cost < rows_cost;
    L->nq = L->flat ? Wo : rows_nq;
    L->phases = L->flat ? sh : 1;
    const int64_t per_phase = L->per_phase = (Hp + L->phases - 1) / L->phases;
    L->dplane = L->phases * per_phase * L->nq;
    L->step = sh * L->nq;
    L->kstep = L->flat ? L->dplane : dw_kstep(w);
    for (int64_t r = 0; r < kh; r++)
        L->off[r] = L->flat ? ((r * dh) % sh * per_phase + r * dh / sh) * L->nq : r * dh * L->nq;
    /* the bytes dw_expand reads of a padded row: dword k of the flat planes starts 4k*dil columns in */
    int64_t need = w->stride[2] * L->nq + 3 * w->dil[2] + (L->flat ? 4 * (nd - 1) * w->dil[2] : 0);
    L->prow = (need > Wp ? need : Wp) + 64;
    L->plane = 0;
    L->e = L->plane + align64((size_t)(Hp * L->prow));
    /* a run's last vectors read past the plane */
    L->acc = L->e + align64((size_t)((L->flat ? nd : 1) * L->dplane + 32) * 4);
    L->slot = L->acc + align64((size_t)(Ho * Wo + 16) * 4);
}

/* Direct: a slot holds one group of one image (or a band of its rows) in
 * padded phase planes of channel quads. */
static size_t direct_slot_bytes(const qfi_direct_plan *p, int64_t quads)
{
    return align64((size_t)(quads * p->plane + p->slack) * 4);
}

size_t qfi_cpu_conv_int8_scratch(const qf_graph *g, const qf_node *n, int threads)
{
    qfi_conv_geom geo;
    if (qfi_conv_geometry(g, n, &geo) != QF_OK || geo.group < 1) return 0;
    size_t m = align64((size_t)geo.M * 4), per_slot = 0;
    switch (choose_path(&geo)) {
    case PATH_DEPTHWISE: {
        dw8_layout L;
        dw_layout(&geo, &L);
        per_slot = L.slot;
        break;
    }
    case PATH_DIRECT: {
        qfi_conv_geom g1 = group_geom(&geo);
        qfi_direct_plan *p = malloc(sizeof *p);
        if (!p) return SIZE_MAX; /* the engine then fails to allocate, and says so */
        qfi_cpu_direct_plan(&g1, false, QFI_I8_CHUNK_MAX, p);
        int64_t quads, kq;
        qfi_cpu_i8_reduction(g1.C, &quads, &kq);
        per_slot = direct_slot_bytes(p, quads);
        free(p);
        break;
    }
    case PATH_LOOP: per_slot = align64((size_t)qfi_window_out_size(&geo.w) * 4); break;
    }
    return m + (size_t)qfi_cpu_threads(threads) * per_slot;
}

/* ---- the job every path shares ---------------------------------------------------- */

typedef struct conv8_job {
    const qfi_conv_geom *geo;
    const conv8_state *st;
    const qfi_requant *rq;
    const float *m; /* per output channel: the epilogue's multiplier */
    const int8_t *x, *w, *res;
    int32_t zx;    /* the input's zero point: what a tap in the padding reads (0 unless asymmetric) */
    uint8_t fill;  /* the same as the packed u8 (zx ^ 0x80) */
    void *y;
    char *scratch;
    size_t slot_bytes;
    int64_t items, slots;
    int64_t bands, mparts; /* direct: an image's output rows and weight blocks are split this many ways */
    const dw8_layout *L;   /* depthwise */
} conv8_job;

/* ---- depthwise ------------------------------------------------------------------------ */

/* Plane c of image n: padded (u8, the zero point in the padding) and its
 * rows expanded once, then every output channel that reads it, in one call
 * for the sums and one for the epilogue. */
static void dw8_plane(const conv8_job *j, int64_t plane, char *slot)
{
    const qfi_conv_geom *geo = j->geo;
    const qfi_window *w = &geo->w;
    const qfi_i8_kernels *k = j->st->k;
    const dw8_layout *L = j->L;
    const int64_t n = plane / geo->C, c = plane % geo->C, mult = geo->M / geo->C;
    const int64_t H = w->in[1], W = w->in[2], pt = w->pad[1], pl = w->pad[2];
    const int64_t Hp = H + pt + w->pad_end[1], Ho = w->out[1], Wo = w->out[2];
    const int64_t kh = w->k[1], nd = dw_quads_per_row(w), prow = L->prow;
    uint8_t *padded = (uint8_t *)slot + L->plane, *e = (uint8_t *)slot + L->e;
    int32_t *acc = (int32_t *)(slot + L->acc);
    const int8_t *x = j->x + (n * geo->C + c) * H * W;
    const int64_t s = w->stride[2], d = w->dil[2];
    bool padded_made = false;
    for (int64_t kd = 0; kd < (L->flat ? nd : 1); kd++) { /* flat: a plane per dword, its taps 4kd*d columns in */
        uint8_t *ek = e + 4 * kd * L->dplane;
        if (k->dw_pad_expand && k->dw_pad_expand(x, H, W, pt, pl - 4 * kd * d, Hp, s, d, L->nq, L->phases, j->fill, ek))
            continue;
        if (!padded_made) k->dw_pad(x, H, W, pt, pl, Hp, prow, j->fill, padded);
        padded_made = true;
        for (int64_t a = 0; a < L->phases && a < Hp; a++) /* phase a: padded rows a, a + phases, ... */
            k->dw_expand(padded + a * prow + 4 * kd * d, L->phases * prow, (Hp - a + L->phases - 1) / L->phases, s, d,
                         L->nq, ek + 4 * a * L->per_phase * L->nq);
    }
    for (int64_t mm = 0; mm < mult; mm++) {
        const int64_t m = c * mult + mm;
        /* flat: one output row of Ho*Wo */
        k->dw_plane(e, L->step, L->off, (int)kh, (int)nd, L->kstep, j->st->w + m * kh * nd, L->flat ? 1 : Ho,
                    L->flat ? Ho * Wo : Wo, acc);
        k->requant_run(j->rq, acc, Ho * Wo, j->st->add[m], j->m[m], j->res, j->y, (n * geo->M + m) * Ho * Wo);
    }
}

/* ---- direct ------------------------------------------------------------------------------ */

/* Phase rows [q0, q1) of every phase plane a tap reads, for the channel
 * quads of group gi of image n: u8 (x ^ 0x80, so 0x80 is zero) with the
 * input's zero point in the padding and 0x80 in the channels past the
 * group's (their weights are zero). */
QFI_SIMD_CLONES QFI_NO_LIBCALL_LOOPS
static void pack_rows(const conv8_job *j, int64_t n, int64_t gi, uint8_t *xp, int64_t q0, int64_t q1)
{
    const qfi_direct_plan *p = &j->st->plan;
    const int64_t H = p->H, W = p->W, Hq = p->Hq, Wq = p->Wq, cg = p->C;
    const uint32_t fill = j->fill * 0x01010101u;
    const uint8_t *x = (const uint8_t *)(j->x + (n * j->geo->C + gi * cg) * H * W);
    for (int64_t cq = 0; cq < j->st->quads; cq++) {
        const int64_t nch = cg - 4 * cq < 4 ? cg - 4 * cq : 4;
        for (int64_t a = 0; a < p->sh; a++)
            for (int64_t b = 0; b < p->sw; b++) {
                if (!j->st->phase[a * p->sw + b]) continue;
                uint32_t *plane = (uint32_t *)(xp + (cq * p->plane + (a * p->sw + b) * Hq * Wq) * 4);
                int64_t lo, hi; /* phase columns [lo, hi) hold input columns col*sw + b - pl */
                qfi_window_run(Wq, W, p->sw, b - p->pl, &lo, &hi);
                if (nch == 4 && p->sh == 1 && p->sw == 1 && p->pt == 0 && lo == 0 && hi == W && Wq == W && q1 <= H) {
                    /* unpadded (1x1 convs): rows q0..q1 are one run of every channel's plane */
                    j->st->k->interleave4(x + 4 * cq * H * W + q0 * W, H * W, (q1 - q0) * W, plane + q0 * Wq);
                    continue;
                }
                for (int64_t q = q0; q < q1; q++) {
                    uint32_t *r = plane + q * Wq;
                    const int64_t ih = q * p->sh + a - p->pt;
                    if (ih < 0 || ih >= H) {
                        for (int64_t col = 0; col < Wq; col++) r[col] = fill;
                        continue;
                    }
                    for (int64_t col = 0; col < lo; col++) r[col] = fill;
                    for (int64_t col = hi; col < Wq; col++) r[col] = fill;
                    const uint8_t *x0 = x + (4 * cq * H + ih) * W + b - p->pl; /* column col: x0[col*sw] */
                    if (nch == 4 && p->sw == 1) {
                        j->st->k->interleave4(x0 + lo, H * W, hi - lo, r + lo);
                        continue;
                    }
                    for (int64_t col = lo; col < hi; col++) {
                        uint8_t *o = (uint8_t *)(r + col);
                        for (int64_t ci = 0; ci < 4; ci++)
                            o[ci] = ci < nch ? (uint8_t)(x0[ci * H * W + col * p->sw] ^ 0x80) : 0x80;
                    }
                }
            }
    }
}

/* Output rows [oh0, oh1) and weight blocks [b0, b1) of group gi of image n,
 * from the packed planes xp: block by block, each over all the positions, so
 * the requantized rows go to mb output planes at a time, each written front
 * to back. Positions outermost wrote every plane of the layer 32 bytes at a
 * time, more streams than the store prefetchers follow: MobileNetV2's 16 ->
 * 96 expansion took 5.5 ms a batch of 16 that way, 3.7 this way. */
static void direct8_range(const conv8_job *j, const uint8_t *xp, int64_t n, int64_t gi, int64_t oh0, int64_t oh1,
                          int64_t b0, int64_t b1)
{
    const qfi_direct_plan *p = &j->st->plan;
    const qfi_i8_kernels *k = j->st->k;
    const int64_t mb = k->mb, mg = p->M, widest = k->nv * k->vw, plane = p->Ho * p->Wo, wq = k->wq;
    const qfi_i8_block_fn *fns = p->taps == 1 ? k->block_1t : p->taps == 9 ? k->block_9t : k->block;
    const int32_t *wg = j->st->w + gi * j->st->blocks * j->st->quads * p->taps * mb * wq;
    int32_t out[QFI_I8_MB_MAX * QFI_I8_CHUNK_MAX];
    const int64_t end = oh1 * p->Wq;
    const char *y = j->y;
    const size_t esz = qf_dtype_info(j->rq->out)->size;
    for (int64_t b = b0; b < b1; b++) {
        const int64_t rows = mg - b * mb < mb ? mg - b * mb : mb, m = gi * mg + b * mb; /* its first channel */
        const int64_t y0 = (n * j->geo->M + m) * plane;                                  /* its plane */
        for (int64_t p0 = oh0 * p->Wq; p0 < end; p0 += widest) {
            const int64_t len = end - p0 < widest ? end - p0 : widest, nv = (len + k->vw - 1) / k->vw;
            const int64_t chunk = nv * k->vw;
            fns[nv - 1](&j->st->bg, xp + p0 * 4, wg + b * j->st->quads * p->taps * mb * wq, out);
            /* two lines past this chunk's stores: what a plane's next chunks write (+3 % on MobileNetV2) */
            for (int64_t r = 0; r < rows; r++) __builtin_prefetch(y + (size_t)(y0 + r * plane + p0) * esz + 128, 1, 3);
            if (p->Wq == p->Wo) {
                /* the grid's rows are the output's (1x1 convs): each channel's chunk is one run of the
                 * output plane, requantized in one call rather than one per output row (7x7 maps: 7x fewer) */
                k->requant_rows(j->rq, out, chunk, rows, len, j->st->add + m, j->m + m, j->res, j->y, y0 + p0, plane);
                continue;
            }
            /* the grid's columns >= Wo are dropped */
            int64_t oh = p0 / p->Wq, ow = p0 % p->Wq;
            for (int64_t i = 0; i < len;) {
                const int64_t run = p->Wq - ow < len - i ? p->Wq - ow : len - i;
                const int64_t valid = ow < p->Wo ? (p->Wo - ow < run ? p->Wo - ow : run) : 0;
                if (valid > 0)
                    k->requant_rows(j->rq, out + i, chunk, rows, valid, j->st->add + m, j->m + m, j->res, j->y,
                                    y0 + oh * p->Wo + ow, plane);
                i += run;
                ow = 0;
                oh++;
            }
        }
    }
}

/* Item = (image, group, band of output rows, part of the channel blocks). */
static void direct8_item(const conv8_job *j, int64_t item, uint8_t *xp, int64_t *packed)
{
    const qfi_direct_plan *p = &j->st->plan;
    const int64_t mpart = item % j->mparts, rest = item / j->mparts, band = rest % j->bands;
    const int64_t ng = rest / j->bands, n = ng / j->geo->group, gi = ng % j->geo->group;
    const int64_t oh0 = p->Ho * band / j->bands, oh1 = p->Ho * (band + 1) / j->bands;
    if (oh0 == oh1) return;
    if (*packed != rest) { /* consecutive items of one band reuse its planes */
        int64_t q1 = oh1 + j->st->reach < p->Hq ? oh1 + j->st->reach : p->Hq;
        pack_rows(j, n, gi, xp, oh0, q1);
        *packed = rest;
    }
    const int64_t blocks = j->st->blocks;
    direct8_range(j, xp, n, gi, oh0, oh1, blocks * mpart / j->mparts, blocks * (mpart + 1) / j->mparts);
}

/* ---- the plain loop ---------------------------------------------------------------------- */

/* Output channel m of image n, any window, with the node's own bias. */
static void loop8_plane(const conv8_job *j, int64_t plane, int32_t *acc)
{
    const qfi_conv_geom *geo = j->geo;
    const qfi_window *w = &geo->w;
    const int64_t n = plane / geo->M, m = plane % geo->M, cg = geo->C / geo->group, c0 = m / (geo->M / geo->group) * cg;
    const int64_t D = w->in[0], H = w->in[1], W = w->in[2];
    int32_t *a = acc;
    for (int64_t od = 0; od < w->out[0]; od++)
        for (int64_t oh = 0; oh < w->out[1]; oh++)
            for (int64_t ow = 0; ow < w->out[2]; ow++) {
                int32_t s = 0;
                for (int64_t c = 0; c < cg; c++) {
                    const int8_t *xc = j->x + (n * geo->C + c0 + c) * D * H * W;
                    const int8_t *wc = j->w + (m * cg + c) * qfi_window_k_size(w);
                    /* a tap in the padding reads the input's zero point */
                    for (int64_t kd = 0; kd < w->k[0]; kd++) {
                        int64_t id = od * w->stride[0] - w->pad[0] + kd * w->dil[0];
                        for (int64_t kh = 0; kh < w->k[1]; kh++) {
                            int64_t ih = oh * w->stride[1] - w->pad[1] + kh * w->dil[1];
                            for (int64_t kw = 0; kw < w->k[2]; kw++) {
                                int64_t iw = ow * w->stride[2] - w->pad[2] + kw * w->dil[2];
                                bool in = id >= 0 && id < D && ih >= 0 && ih < H && iw >= 0 && iw < W;
                                int32_t v = in ? xc[(id * H + ih) * W + iw] : j->zx;
                                s += (int32_t)wc[(kd * w->k[1] + kh) * w->k[2] + kw] * v;
                            }
                        }
                    }
                }
                *a++ = s;
            }
    const int64_t out = qfi_window_out_size(w);
    qfi_requantize(j->rq, acc, j->res ? j->res + plane * out : NULL, out, m, 0,
                   (char *)j->y + (size_t)(plane * out) * qf_dtype_info(j->rq->out)->size);
}

/* Slot t runs a contiguous range of items with its own buffers. */
static void conv8_slot(void *arg, int64_t t)
{
    const conv8_job *j = arg;
    char *slot = j->scratch + (size_t)t * j->slot_bytes;
    const int64_t lo = j->items * t / j->slots, hi = j->items * (t + 1) / j->slots;
    int64_t packed = -1;
    for (int64_t item = lo; item < hi; item++) switch (j->st->path) {
        case PATH_DEPTHWISE: dw8_plane(j, item, slot); break;
        case PATH_DIRECT: direct8_item(j, item, (uint8_t *)slot, &packed); break;
        case PATH_LOOP: loop8_plane(j, item, (int32_t *)slot); break;
        }
}

/* The direct path's split: bands of output rows when the grid is tall
 * enough to keep two chunks per band, else parts of the weight blocks. */
static void direct8_split(conv8_job *j, int64_t slots)
{
    const conv8_state *st = j->st;
    const int64_t images = j->geo->N * j->geo->group, parts = (slots + images - 1) / images;
    const int64_t chunk = st->k->nv * st->k->vw;
    j->bands = j->mparts = 1;
    if (parts > 1 && st->plan.Ho >= parts && st->plan.grid >= parts * 2 * chunk) j->bands = parts;
    else if (parts > 1) j->mparts = parts < st->blocks ? parts : st->blocks;
    j->items = images * j->bands * j->mparts;
    j->slot_bytes = direct_slot_bytes(&st->plan, st->quads);
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
        return qf_error(QF_ERR_INVALID, "residual %s does not match the output",
                        rv->name);
    /* |sum| <= Kdim * 128 * 127 plus a bias within QFI_INT8_BIAS_LIMIT must stay inside int32 */
    if (kdim > QFI_INT8_MAX_REDUCTION)
        return qf_error(QF_ERR_UNSUPPORTED, "INT8 reduction of %lld terms could overflow int32", (long long)kdim);
    if (geo.N == 0 || geo.M == 0 || out == 0) return QF_OK;
    if (!a->scratch || !a->state)
        return qf_error(QF_ERR_USAGE, "no INT8 scratch or packed weights were provided");
    const conv8_state *st = a->state;
    float *m = a->scratch;
    qfi_requant rq;
    qfi_requant_init(&rq, m, geo.M, xv->scale, a->in[3], a->in[2], rv ? rv->scale : 0.0f, rv ? rv->zero_point : 0,
                     yv->dtype, yv->scale, yv->zero_point, n->act, n->act_lo, n->act_hi);
    const int64_t threads = qfi_cpu_threads(a->threads);
    conv8_job j = {.geo = &geo, .st = st, .rq = &rq, .m = m, .x = a->in[0], .w = a->in[1],
                   .res = rv ? a->in[4] : NULL, .zx = xv->zero_point, .fill = (uint8_t)(xv->zero_point ^ 0x80),
                   .y = a->out[0],
                   .scratch = (char *)a->scratch + align64((size_t)geo.M * 4)};
    dw8_layout L;
    switch (st->path) {
    case PATH_DEPTHWISE:
        dw_layout(&geo, &L);
        j.L = &L;
        j.slot_bytes = L.slot;
        j.items = geo.N * geo.C;
        break;
    case PATH_DIRECT: direct8_split(&j, threads); break;
    case PATH_LOOP:
        j.slot_bytes = align64((size_t)out * 4);
        j.items = geo.N * geo.M;
        break;
    }
    /* the scratch holds a slot per thread */
    j.slots = j.items < threads ? j.items : threads;
    qfi_parallel_for((int)j.slots, j.slots, conv8_slot, &j);
    return QF_OK;
}
