/* ConvTranspose on the CPU: per (image, group), col = W_g^T x X_g by
 * cblas_sgemm, then col2im scatters every column into the output. Items are
 * spread over threads; each thread owns one col slot of the scratch. */
#include "kernels.h"
#include "ops/nn.h"
#include <cblas.h>
#include <limits.h>

/* Elements of one col matrix: (M/group * K) rows of IN columns. */
static int64_t col_elems(const qfi_conv_geom *geo)
{
    return geo->M / geo->group * qfi_window_k_size(&geo->w) * qfi_window_in_size(&geo->w);
}

size_t qfi_cpu_conv_transpose_scratch(const qf_graph *g, const qf_node *n, int threads)
{
    qfi_conv_geom geo;
    if (qfi_conv_transpose_geometry(g, n, &geo) != QF_OK) return 0;
    return (size_t)(qfi_cpu_slots(geo.N * geo.group, threads) * col_elems(&geo)) * sizeof(float);
}

/* Adds col (Mg*Kd*Kh*Kw, Di*Hi*Wi) into y (Mg, Do,Ho,Wo): input position i under
 * kernel tap k lands on output position i*stride - pad + k*dil, if inside. */
static void col2im_add(const float *col, int64_t mg, const qfi_window *w, float *y)
{
    const int64_t Di = w->in[0], Hi = w->in[1], Wi = w->in[2];
    const int64_t Do = w->out[0], Ho = w->out[1], Wo = w->out[2];
    const float *row = col;
    for (int64_t m = 0; m < mg; m++) {
        float *ym = y + m * Do * Ho * Wo;
        for (int64_t kd = 0; kd < w->k[0]; kd++)
            for (int64_t kh = 0; kh < w->k[1]; kh++)
                for (int64_t kw = 0; kw < w->k[2]; kw++) {
                    const float *r = row;
                    for (int64_t id = 0; id < Di; id++) {
                        int64_t od = id * w->stride[0] - w->pad[0] + kd * w->dil[0];
                        for (int64_t ih = 0; ih < Hi; ih++, r += Wi) {
                            int64_t oh = ih * w->stride[1] - w->pad[1] + kh * w->dil[1];
                            if (od < 0 || od >= Do || oh < 0 || oh >= Ho) continue;
                            float *yr = ym + (od * Ho + oh) * Wo;
                            int64_t ow = -w->pad[2] + kw * w->dil[2];
                            for (int64_t iw = 0; iw < Wi; iw++, ow += w->stride[2])
                                if (ow >= 0 && ow < Wo) yr[ow] += r[iw];
                        }
                    }
                    row += Di * Hi * Wi;
                }
    }
}

typedef struct convt_job {
    const qfi_conv_geom *geo;
    const float *x, *w, *b;
    float *y;
    float *scratch;
    int64_t items, slots;
} convt_job;

static void convt_item(const convt_job *j, int64_t item, float *col)
{
    const qfi_conv_geom *geo = j->geo;
    const int64_t n = item / geo->group, gi = item % geo->group;
    const int64_t cg = geo->C / geo->group, mg = geo->M / geo->group;
    const int64_t in_sz = qfi_window_in_size(&geo->w), out_sz = qfi_window_out_size(&geo->w);
    const int64_t rows = mg * qfi_window_k_size(&geo->w);
    const float *xg = j->x + (n * geo->C + gi * cg) * in_sz; /* (Cg, IN) */
    const float *wg = j->w + gi * cg * rows;                 /* (Cg, Mg*K) */
    float *yg = j->y + (n * geo->M + gi * mg) * out_sz;      /* (Mg, OUT) */
    for (int64_t m = 0; m < mg; m++)
        for (int64_t o = 0; o < out_sz; o++) yg[m * out_sz + o] = j->b ? j->b[gi * mg + m] : 0.0f;
    if (cg == 0 || in_sz == 0 || rows == 0 || !col) return; /* nothing to scatter (and BLAS rejects zero leading dims) */
    /* col (Mg*K, IN) = W_g^T (Mg*K, Cg) x X_g (Cg, IN) */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)rows, (int)in_sz, (int)cg, 1.0f, wg, (int)rows, xg,
                (int)in_sz, 0.0f, col, (int)in_sz);
    col2im_add(col, mg, &geo->w, yg);
}

static void convt_slot(void *arg, int64_t t)
{
    const convt_job *j = arg;
    /* no scratch when a shape is empty: nothing is scattered then (convt_item) */
    float *col = j->scratch ? j->scratch + t * col_elems(j->geo) : NULL;
    for (int64_t item = t; item < j->items; item += j->slots) convt_item(j, item, col);
}

static qf_status conv_transpose_run(const qfi_kernel_args *a)
{
    qfi_conv_geom geo;
    QF_CHECK(qfi_conv_transpose_geometry(a->g, a->n, &geo));
    convt_job j = {.geo = &geo, .x = a->in[0], .w = a->in[1], .b = geo.has_bias ? a->in[2] : NULL, .y = a->out[0]};
    if (geo.N == 0 || geo.M == 0 || qfi_window_out_size(&geo.w) == 0) return QF_OK;
    int64_t rows = geo.M / geo.group * qfi_window_k_size(&geo.w), in_sz = qfi_window_in_size(&geo.w);
    if (rows > INT_MAX || in_sz > INT_MAX || geo.C > INT_MAX)
        return qf_error(QF_ERR_UNSUPPORTED, "GEMM dimensions exceed the BLAS int range");
    if (!a->scratch && col_elems(&geo) > 0) return qf_error(QF_ERR_USAGE, "no col2im scratch was provided");
    int threads = a->threads > 0 ? a->threads : qfi_cpu_count();
    j.items = geo.N * geo.group;
    j.slots = qfi_cpu_slots(j.items, threads);
    j.scratch = a->scratch;
    qfi_parallel_for((int)j.slots, j.slots, convt_slot, &j);
    return QF_OK;
}

const qfi_cpu_kernel qfi_cpu_conv_transpose = {.run = conv_transpose_run, .scratch = qfi_cpu_conv_transpose_scratch};
