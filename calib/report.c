/* The calibration report: one self-contained HTML file (inline CSS and SVG, a few
 * lines of inline script to sort the table, nothing fetched from anywhere) showing
 * each tensor's |x| histogram on a log scale with every method's threshold, so a
 * user can see where clipping happens and which tensors clip hardest. The
 * per-layer report (eval --per-layer --report) shares its page. */
#include "calib_internal.h"
#include "qforge/quant.h"
#include <math.h>

#define PLOT_W 880.0
#define PLOT_H 170.0
#define PLOT_LEFT 56.0   /* room for the count axis labels */
#define PLOT_TOP 71.0    /* room for one label row per method */
#define PLOT_BOTTOM 26.0 /* room for the |x| axis labels */
#define PLOT_COLUMNS 512 /* histogram bins are merged down to at most this many columns */

static const char *const method_color[QF_CALIB_METHOD_COUNT] = {
    [QF_CALIB_AUTO] = "#ff7f0e",
    [QF_CALIB_ENTROPY] = "#d62728",
    [QF_CALIB_MINMAX] = "#1f77b4",
    [QF_CALIB_PERCENTILE] = "#2ca02c",
    [QF_CALIB_MSE] = "#9467bd",
};

static void put_html(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* A round tick step (1, 2 or 5 times a power of ten) giving about `ticks` ticks. */
static double nice_step(double span, int ticks)
{
    double raw = span / ticks, mag = pow(10.0, floor(log10(raw))), r = raw / mag;
    return (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10) * mag;
}

typedef struct tensor_row {
    int slot;
    const char *name;
    const qf_histogram *h;
    float thr[QF_CALIB_METHOD_COUNT];
} tensor_row;

static void plot(FILE *f, const tensor_row *row, unsigned chosen)
{
    const qf_histogram *h = row->h;
    int n = QF_HIST_BINS;
    while (n > 0 && !h->bins[n - 1]) n--;
    double W = PLOT_LEFT + PLOT_W + 12, H = PLOT_TOP + PLOT_H + PLOT_BOTTOM;
    fprintf(f, "<svg width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" role=\"img\">\n",
            W, H, W, H);
    double y0 = PLOT_TOP + PLOT_H;
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" class=\"frame\"/>\n",
            PLOT_LEFT, PLOT_TOP, PLOT_W, PLOT_H);
    if (n == 0) {
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" class=\"empty\">no nonzero finite values</text></svg>\n",
                PLOT_LEFT + 20, PLOT_TOP + PLOT_H / 2);
        return;
    }
    // Columns of `per` bins; x is (columns,) over [0, n * bin width).
    int per = (n + PLOT_COLUMNS - 1) / PLOT_COLUMNS, cols = (n + per - 1) / per;
    double w = qf_histogram_bin_width(h), xmax = n * w, cw = PLOT_W / cols;
    uint64_t top = 1;
    for (int c = 0; c < cols; c++) {
        uint64_t s = 0;
        for (int b = c * per; b < (c + 1) * per && b < n; b++) s += h->bins[b];
        if (s > top) top = s;
    }
    double ly = log10((double)top) + 0.3;  // log10(count) -> height, headroom above the tallest
    fputs("<path class=\"bars\" d=\"", f);
    fprintf(f, "M%.1f %.1f", PLOT_LEFT, y0);
    for (int c = 0; c < cols; c++) {
        uint64_t s = 0;
        for (int b = c * per; b < (c + 1) * per && b < n; b++) s += h->bins[b];
        // A count of 1 still shows as a sliver: log10(1) = 0 would hide singletons.
        double y = s ? y0 - PLOT_H * (log10((double)s) + 0.1) / ly : y0;
        fprintf(f, "V%.1fH%.1f", y, PLOT_LEFT + (c + 1) * cw);
    }
    fprintf(f, "V%.1fZ\"/>\n", y0);
    // Count axis: powers of ten.
    for (int e = 0; e <= (int)floor(log10((double)top)); e += (int)ly > 6 ? 2 : 1) {
        double y = y0 - PLOT_H * (e + 0.1) / ly;
        fprintf(f, "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>"
                   "<text x=\"%.0f\" y=\"%.1f\" class=\"ylab\">1e%d</text>\n",
                PLOT_LEFT, PLOT_LEFT + PLOT_W, y, y, PLOT_LEFT - 4, y + 4, e);
    }
    // |x| axis.
    double step = nice_step(xmax, 8);
    for (double x = 0; x <= xmax * 1.0001; x += step) {
        double px = PLOT_LEFT + PLOT_W * x / xmax;
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" class=\"tick\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" class=\"xlab\">%g</text>\n",
                px, px, y0, y0 + 4, px, y0 + 17, x);
    }
    // One label row per method, so labels of nearby thresholds never overlap.
    for (int m = 0; m < QF_CALIB_METHOD_COUNT; m++) {
        double px = PLOT_LEFT + PLOT_W * row->thr[m] / xmax, ty = 12 + 13.0 * m;
        bool right = px > PLOT_LEFT + PLOT_W * 0.75;
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" class=\"%s\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" fill=\"%s\" text-anchor=\"%s\" class=\"%s\">%s %.4g</text>\n",
                px, px, ty + 2, y0, method_color[m], chosen & (1u << m) ? "thr chosen" : "thr",
                right ? px - 4 : px + 4, ty, method_color[m], right ? "end" : "start",
                chosen & (1u << m) ? "tl chosen" : "tl", qf_calib_method_name(m), row->thr[m]);
    }
    fputs("</svg>\n", f);
}

static const char style[] =
    "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1000px}\n"
    "h1{font-size:22px}h2{font-size:18px;margin-top:32px}h3{font-size:15px;margin:24px 0 2px;word-break:break-all}\n"
    "table{border-collapse:collapse;font-size:13px}td,th{padding:3px 8px;border-bottom:1px solid #ddd;text-align:right}\n"
    "td.n,th.n{text-align:left;word-break:break-all;max-width:360px}th{cursor:pointer;background:#f4f4f4;position:sticky;top:0}\n"
    "th:hover{background:#e4e4e4}.facts td{text-align:left;border:0;padding:1px 8px 1px 0}.facts td:first-child{color:#666}\n"
    "tr.warn td{background:#fff3e0}.hot{color:#b00;font-weight:600}.mono{font-family:monospace}\n"
    ".stats{color:#555;font-size:12px;margin:0 0 4px}.legend span{margin-right:16px;font-weight:600}\n"
    "svg .frame{fill:#fafafa;stroke:#bbb}svg .bars{fill:#8fa8c8;stroke:#4a6a92;stroke-width:.6}\n"
    "svg .grid{stroke:#e2e2e2}svg .tick{stroke:#888}svg text{font:11px system-ui,sans-serif}\n"
    "svg .ylab{text-anchor:end;fill:#666}svg .xlab{text-anchor:middle;fill:#444}svg .empty{fill:#999}\n"
    "svg .thr{stroke-width:1.2;stroke-dasharray:4 3}svg .thr.chosen{stroke-width:2.2;stroke-dasharray:none}\n"
    "svg .tl{font-size:11px}svg .tl.chosen{font-weight:700}\n";

/* Click a header to sort by it (numbers by data-v); click again to reverse. */
static const char script[] =
    "document.querySelectorAll('table.sort th').forEach(function(th,col){\n"
    "  th.addEventListener('click',function(){\n"
    "    var tb=th.closest('table').tBodies[0],rows=Array.prototype.slice.call(tb.rows);\n"
    "    var dir=th.dataset.dir==='desc'?1:-1;th.dataset.dir=dir<0?'desc':'asc';\n"
    "    rows.sort(function(a,b){var x=a.cells[col].dataset.v,y=b.cells[col].dataset.v;\n"
    "      if(x!==undefined&&y!==undefined)return dir*(parseFloat(x)-parseFloat(y));\n"
    "      return dir*a.cells[col].textContent.localeCompare(b.cells[col].textContent);});\n"
    "    rows.forEach(function(r){tb.appendChild(r);});});});\n";

static int cmp_ratio_desc(const void *a, const void *b, void *arg)
{
    const tensor_row *x = a, *y = b;
    qf_calib_method m = *(const qf_calib_method *)arg;
    double rx = x->thr[m] > 0 ? x->h->absmax / x->thr[m] : 0, ry = y->thr[m] > 0 ? y->h->absmax / y->thr[m] : 0;
    if (rx != ry) return rx < ry ? 1 : -1;
    return x->slot - y->slot;  // stable: graph order among equals
}

static void write_report(FILE *f, const qf_calib *c, const qf_calib_table *t, tensor_row *rows, int n)
{
    unsigned chosen = t ? t->methods : 0;
    qf_calib_method ref = t ? qf_calib_table_default_method(t) : QF_CALIB_ENTROPY;
    double pct = t && (t->methods & (1u << QF_CALIB_PERCENTILE)) ? t->percentile : QF_CALIB_PERCENTILE_DEFAULT;

    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
          "<title>qforge calibration report</title>\n<style>\n", f);
    fputs(style, f);
    fputs("</style></head><body>\n<h1>qforge calibration report</h1>\n<table class=\"facts\">\n", f);
    if (t) {
        fprintf(f, "<tr><td>model SHA-256</td><td class=\"mono\">%s</td></tr>\n", t->model_sha256);
        fprintf(f, "<tr><td>images</td><td>%lld</td></tr>\n", (long long)t->images);
        fputs("<tr><td>method</td><td>", f);
        for (int m = 0, k = 0; m < QF_CALIB_METHOD_COUNT; m++)
            if (t->methods & (1u << m)) fprintf(f, "%s%s", k++ ? ", " : "", qf_calib_method_name(m));
        fprintf(f, " (the table's amax: %s)</td></tr>\n<tr><td>preprocessing</td><td>", qf_calib_method_name(ref));
        put_html(f, t->preprocess && t->preprocess[0] ? t->preprocess : "(none recorded)");
        fputs("</td></tr>\n", f);
    }
    fprintf(f, "<tr><td>tensors</td><td>%d</td></tr>\n<tr><td>percentile</td><td>%g%%</td></tr>\n</table>\n", n, pct);

    int warn = 0;
    for (int i = 0; i < n; i++) warn += rows[i].h->nonfinite != 0;
    if (warn) {
        fprintf(f, "<p class=\"hot\">%d tensor%s produced NaN or Inf values (left out of the statistics):</p><ul>\n",
                warn, warn > 1 ? "s" : "");
        for (int i = 0; i < n; i++) {
            if (!rows[i].h->nonfinite) continue;
            fputs("<li>", f);
            put_html(f, rows[i].name);
            fprintf(f, ": %llu</li>\n", (unsigned long long)rows[i].h->nonfinite);
        }
        fputs("</ul>\n", f);
    }

    fputs("<p class=\"legend\">", f);
    for (int m = 0; m < QF_CALIB_METHOD_COUNT; m++)
        fprintf(f, "<span style=\"color:%s\">%s%s</span>", method_color[m], qf_calib_method_name(m),
                chosen & (1u << m) ? " (recorded)" : "");
    fputs("</p>\n<p>Solid lines mark the thresholds recorded in the table, dashed lines the other methods'. "
          "The ratio absmax / threshold says how hard a tensor is clipped: large ratios spend INT8 levels "
          "on the bulk of the values and saturate the tail. Click a column to sort.</p>\n", f);

    fprintf(f, "<h2>Tensors, by absmax / %s threshold</h2>\n<table class=\"sort\"><thead><tr>"
               "<th>#</th><th class=\"n\">tensor</th><th>absmax</th>", qf_calib_method_name(ref));
    for (int m = 0; m < QF_CALIB_METHOD_COUNT; m++) fprintf(f, "<th>%s</th>", qf_calib_method_name(m));
    fputs("<th>absmax / threshold</th><th>zeros %</th><th>NaN/Inf</th></tr></thead><tbody>\n", f);
    for (int i = 0; i < n; i++) {
        const tensor_row *r = &rows[i];
        uint64_t count = qf_histogram_count(r->h);
        double ratio = r->thr[ref] > 0 ? r->h->absmax / r->thr[ref] : 0;
        double zeros = count ? 100.0 * (double)r->h->zeros / (double)count : 0;
        fprintf(f, "<tr%s><td data-v=\"%d\">%d</td><td class=\"n\"><a href=\"#t%d\">", r->h->nonfinite ? " class=\"warn\"" : "",
                r->slot, r->slot, r->slot);
        put_html(f, r->name);
        fprintf(f, "</a></td><td data-v=\"%.9g\">%.4g</td>", r->h->absmax, r->h->absmax);
        for (int m = 0; m < QF_CALIB_METHOD_COUNT; m++) fprintf(f, "<td data-v=\"%.9g\">%.4g</td>", r->thr[m], r->thr[m]);
        char rtxt[32] = "&ndash;";  // no threshold, no ratio
        if (ratio > 0) snprintf(rtxt, sizeof rtxt, "%.3g", ratio);
        fprintf(f, "<td data-v=\"%.9g\"%s>%s</td><td data-v=\"%.9g\">%.1f</td><td data-v=\"%llu\">%llu</td></tr>\n",
                ratio, ratio >= 4 ? " class=\"hot\"" : "", rtxt, zeros, zeros,
                (unsigned long long)r->h->nonfinite, (unsigned long long)r->h->nonfinite);
    }
    fputs("</tbody></table>\n<h2>Histograms of |x| (log scale)</h2>\n", f);

    for (int i = 0; i < n; i++) {
        const tensor_row *r = &rows[i];
        uint64_t count = qf_histogram_count(r->h);
        fprintf(f, "<h3 id=\"t%d\">", r->slot);
        put_html(f, r->name);
        fprintf(f, "</h3>\n<p class=\"stats\">%llu values, %.1f%% zeros, absmax %.6g",
                (unsigned long long)count, count ? 100.0 * (double)r->h->zeros / (double)count : 0.0,
                r->h->absmax);
        if (r->h->absmax > 0) fprintf(f, ", bin width %.4g", qf_histogram_bin_width(r->h));
        if (r->h->nonfinite) fprintf(f, ", <span class=\"hot\">%llu NaN/Inf</span>", (unsigned long long)r->h->nonfinite);
        fputs("</p>\n", f);
        plot(f, r, chosen);
    }
    fprintf(f, "<script>\n%s</script>\n</body></html>\n", script);
}

qf_status qf_calib_report_write(const char *path, const qf_calib *c, const qf_calib_table *t)
{
    int n = 0;
    int *slots = qfi_calib_seen_slots(c, &n);
    if (!slots && qf_calib_tensor_count(c)) return QF_ERR_NOMEM;
    tensor_row *rows = qfi_calloc((size_t)n, sizeof *rows);
    if (!rows) {
        free(slots);
        return QF_ERR_NOMEM;
    }
    double pct = t && (t->methods & (1u << QF_CALIB_PERCENTILE)) ? t->percentile : QF_CALIB_PERCENTILE_DEFAULT;
    for (int i = 0; i < n; i++) {
        rows[i].slot = slots[i];
        rows[i].name = qfi_calib_slot_name(c, slots[i]);
        rows[i].h = qfi_calib_slot_hist(c, slots[i]);
        // Every method, recorded or not: the report is where methods get compared.
        // A recorded auto threshold is the table's (chosen on images, not from the histogram).
        for (int m = 0; m < QF_CALIB_METHOD_COUNT; m++)
            rows[i].thr[m] = qf_calib_threshold(rows[i].h, (qf_calib_method)m, pct);
        int e = t && (t->methods & (1u << QF_CALIB_AUTO)) ? qf_calib_table_find(t, rows[i].name) : -1;
        if (e >= 0) rows[i].thr[QF_CALIB_AUTO] = t->entries[e].amax[QF_CALIB_AUTO];
    }
    free(slots);
    qf_calib_method ref = t ? qf_calib_table_default_method(t) : QF_CALIB_ENTROPY;
    qsort_r(rows, (size_t)n, sizeof *rows, cmp_ratio_desc, &ref);

    qfi_atomic_file af;
    qf_status st = qfi_atomic_open(&af, path);
    if (st == QF_OK) {
        write_report(af.f, c, t, rows, n);
        st = qfi_atomic_commit(&af);
    }
    free(rows);
    return st;
}

/* ---- the per-layer report: each tensor's SQNR against the reference, worst first ---- */

#define SQNR_BAR_W 240.0
#define SQNR_BAR_MAX_DB 60.0 /* bars are full at this SQNR and above */
#define SQNR_HOT_DB 20.0     /* rows below this are marked */

static void write_layer_report(FILE *f, const char *model, const char *reference, int64_t images,
                               const qf_layer_sqnr *rows, int n)
{
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
          "<title>qforge per-layer report</title>\n<style>\n", f);
    fputs(style, f);
    fputs("svg .sq{fill:#8fa8c8}svg .sq.hot{fill:#d62728}\n</style></head><body>\n"
          "<h1>qforge per-layer report</h1>\n<table class=\"facts\">\n<tr><td>model</td><td>", f);
    put_html(f, model);
    fputs("</td></tr>\n<tr><td>reference</td><td>", f);
    put_html(f, reference);
    fprintf(f, "</td></tr>\n<tr><td>images</td><td>%lld</td></tr>\n<tr><td>tensors</td><td>%d</td></tr>\n</table>\n",
            (long long)images, n);
    fprintf(f, "<p>SQNR = 10 log10(&Sigma; ref&sup2; / &Sigma; (out &minus; ref)&sup2;) of each tensor the two "
               "models share by name, over every image. A tensor's error includes what its inputs brought: the "
               "first of a run of bad tensors (in graph order, column #) is the layer to look at. Rows below "
               "%.0f dB are red; bars are full at %.0f dB. Click a column to sort.</p>\n",
            SQNR_HOT_DB, SQNR_BAR_MAX_DB);
    fputs("<table class=\"sort\"><thead><tr><th>#</th><th class=\"n\">tensor</th><th class=\"n\">node</th>"
          "<th>op</th><th>precision</th><th>dtype</th><th>SQNR dB</th><th></th></tr></thead><tbody>\n", f);
    for (int i = 0; i < n; i++) {
        const qf_layer_sqnr *r = &rows[i];
        bool hot = r->sqnr_db < SQNR_HOT_DB;
        double w = r->sqnr_db <= 0 ? 0 : r->sqnr_db >= SQNR_BAR_MAX_DB ? SQNR_BAR_W : SQNR_BAR_W * r->sqnr_db / SQNR_BAR_MAX_DB;
        fprintf(f, "<tr><td data-v=\"%d\">%d</td><td class=\"n\">", r->order, r->order);
        put_html(f, r->tensor);
        fputs("</td><td class=\"n\">", f);
        put_html(f, r->node);
        fprintf(f, "</td><td>%s</td><td>%s</td><td>%s</td><td data-v=\"%.6f\"%s>%.2f</td>"
                   "<td data-v=\"%.6f\"><svg width=\"%.0f\" height=\"10\"><rect class=\"sq%s\" width=\"%.1f\" "
                   "height=\"10\"/></svg></td></tr>\n",
                qf_op_name(r->op), qf_precision_name(r->precision), qf_dtype_info(r->dtype)->name, r->sqnr_db,
                hot ? " class=\"hot\"" : "", r->sqnr_db, r->sqnr_db, SQNR_BAR_W, hot ? " hot" : "", w);
    }
    fprintf(f, "</tbody></table>\n<script>\n%s</script>\n</body></html>\n", script);
}

qf_status qf_layer_report_write(const char *path, const char *model, const char *reference, int64_t images,
                                const qf_layer_sqnr *rows, int n)
{
    qfi_atomic_file af;
    QF_CHECK(qfi_atomic_open(&af, path));
    write_layer_report(af.f, model, reference, images, rows, n);
    return qfi_atomic_commit(&af);
}
