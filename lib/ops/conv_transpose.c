/* ConvTranspose: attribute parsing (the window attributes of Conv plus
 * output_padding and output_shape), output size and padding resolution, shape
 * inference and FLOP count. */
#include "ops/nn.h"
#include "ops/ops.h"

static qf_status conv_transpose_parse(qf_graph *g, qf_node *n)
{
    QF_CHECK(qfi_check_arity(g, n, 2, 3));
    qfi_conv_params *p = qfi_calloc(1, sizeof *p);
    if (!p) return QF_ERR_NOMEM;
    qf_status st = qfi_window_parse(g, n, &p->win);
    p->group = qfi_attr_int(n, "group", 1);
    if (st == QF_OK && p->group < 1) st = qf_error(QF_ERR_INVALID, "group is %lld", (long long)p->group);
    int cnt = 0;
    const int64_t *v = qfi_attr_ints(n, "output_padding", &cnt);
    if (st == QF_OK && cnt > QFI_MAX_SPATIAL) st = qf_error(QF_ERR_UNSUPPORTED, "output_padding has %d values", cnt);
    for (int i = 0; st == QF_OK && i < cnt; i++) {
        if (v[i] < 0 || v[i] > ((int64_t)1 << 24))
            st = qf_error(QF_ERR_INVALID, "output_padding[%d] = %lld", i, (long long)v[i]);
        else p->output_padding[i] = v[i];
    }
    p->n_output_padding = cnt;
    v = qfi_attr_ints(n, "output_shape", &cnt);
    if (st == QF_OK && cnt > QFI_MAX_SPATIAL + 2) st = qf_error(QF_ERR_UNSUPPORTED, "output_shape has %d values", cnt);
    for (int i = 0; st == QF_OK && i < cnt; i++) {
        if (v[i] < 1 || v[i] > ((int64_t)1 << 30))
            st = qf_error(QF_ERR_INVALID, "output_shape[%d] = %lld", i, (long long)v[i]);
        else p->output_shape[i] = v[i];
    }
    p->n_output_shape = cnt;
    return qfi_node_set_params(n, p, st);
}

qf_status qfi_conv_transpose_geometry(const qf_graph *g, const qf_node *n, qfi_conv_geom *geo)
{
    const qfi_conv_params *p = n->params;
    QF_ASSERT(p);
    const qf_value *x = qfi_in(g, n, 0), *w = qfi_in(g, n, 1), *b = qfi_in(g, n, 2);
    QF_ASSERT(x && w);
    QF_CHECK(qfi_require_f32(g, n, x, "input"));
    QF_CHECK(qfi_require_f32(g, n, w, "weight"));
    if (b) QF_CHECK(qfi_require_f32(g, n, b, "bias"));
    if (x->ndim < 3 || x->ndim > 2 + QFI_MAX_SPATIAL)
        return qf_error(QF_ERR_UNSUPPORTED, "input %s has %d dims; 3 to %d are supported", x->name, x->ndim,
                        2 + QFI_MAX_SPATIAL);
    if (w->ndim != x->ndim)
        return qf_error(QF_ERR_INVALID, "weight %s has %d dims but the input has %d", w->name, w->ndim, x->ndim);
    int nsp = x->ndim - 2;
    geo->N = x->dims[0];
    geo->C = x->dims[1];
    geo->group = p->group;
    geo->M = w->dims[1] * p->group;
    if (geo->C % geo->group || w->dims[0] != geo->C)
        return qf_error(QF_ERR_INVALID, "input has %lld channels, weight %s is (%lld,%lld,...) and group is %lld",
                        (long long)geo->C, w->name, (long long)w->dims[0], (long long)w->dims[1],
                        (long long)geo->group);
    geo->has_bias = b != NULL;
    if (b && (b->ndim != 1 || b->dims[0] != geo->M))
        return qf_error(QF_ERR_INVALID, "bias %s must have %lld elements", b->name, (long long)geo->M);
    if (p->n_output_padding && p->n_output_padding != nsp)
        return qf_error(QF_ERR_INVALID, "output_padding has %d values for %d spatial dims", p->n_output_padding, nsp);
    if (p->n_output_shape && p->n_output_shape != nsp && p->n_output_shape != nsp + 2)
        return qf_error(QF_ERR_INVALID, "output_shape has %d values for %d spatial dims", p->n_output_shape, nsp);
    qfi_window *win = &geo->w;
    QF_CHECK(qfi_window_setup(g, n, &p->win, nsp, x->dims + 2, w->dims + 2, win));
    const int64_t *oshape = p->n_output_shape ? p->output_shape + (p->n_output_shape - nsp) : NULL;
    bool same = p->win.auto_pad == QFI_PAD_SAME_UPPER || p->win.auto_pad == QFI_PAD_SAME_LOWER;
    for (int i = 0; i < nsp; i++) {
        int s = QFI_MAX_SPATIAL - nsp + i;
        int64_t ek = (win->k[s] - 1) * win->dil[s] + 1;
        /* the size of the output the input fully determines, before any padding is removed */
        int64_t full = win->stride[s] * (win->in[s] - 1) + p->output_padding[i] + ek;
        if (oshape || same) {
            /* The output size is given (or in*stride for SAME): the padding is what is
             * left over, split as the spec says (SAME_UPPER puts the odd one at the end).
             * A requested output larger than `full` just gets zeros (plus bias) at the end. */
            win->out[s] = oshape ? oshape[i] : win->in[s] * win->stride[s];
            int64_t total = full - win->out[s];
            if (total < 0) total = 0;
            win->pad[s] = p->win.auto_pad == QFI_PAD_SAME_UPPER ? total / 2 : total - total / 2;
            win->pad_end[s] = total - win->pad[s];
        } else {
            if (p->win.auto_pad == QFI_PAD_VALID) win->pad[s] = win->pad_end[s] = 0;
            win->out[s] = full - win->pad[s] - win->pad_end[s];
            if (win->out[s] < 1)
                return qf_error(QF_ERR_INVALID, "pads leave an output dim of %lld", (long long)win->out[s]);
        }
    }
    return QF_OK;
}

static qf_status conv_transpose_infer(qf_graph *g, qf_node *n)
{
    qfi_conv_geom geo;
    QF_CHECK(qfi_conv_transpose_geometry(g, n, &geo));
    int64_t dims[2 + QFI_MAX_SPATIAL] = {geo.N, geo.M};
    for (int i = 0; i < geo.w.nsp; i++) dims[2 + i] = geo.w.out[QFI_MAX_SPATIAL - geo.w.nsp + i];
    qfi_value_set_shape(qfi_out(g, n, 0), QF_F32, 2 + geo.w.nsp, dims);
    return QF_OK;
}

static int64_t conv_transpose_flops(const qf_graph *g, const qf_node *n)
{
    qfi_conv_geom geo;
    if (!n->params || qfi_conv_transpose_geometry(g, n, &geo) != QF_OK) return 0;
    /* per image: every input element is scattered through (M/group)*K weights */
    return 2 * geo.C * qfi_window_in_size(&geo.w) * (geo.M / geo.group) * qfi_window_k_size(&geo.w);
}

const qfi_op_desc qfi_op_conv_transpose = {
    .parse = conv_transpose_parse,
    .infer = conv_transpose_infer,
    .flops = conv_transpose_flops,
};
