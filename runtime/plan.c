/* Memory planning shared by every backend: one arena per engine, offsets
 * chosen by value liveness so the run path allocates nothing. */
#include "engine_impl.h"
#include <stdint.h>

typedef struct {
    int value;
    int first, last; /* node steps; inputs start at -1, outputs end at n_nodes */
    size_t size;
} life;

static int by_size_desc(const void *a, const void *b)
{
    const life *x = a, *y = b;
    if (x->size != y->size) return x->size < y->size ? 1 : -1;
    return x->value - y->value; /* deterministic */
}

qf_status qfi_plan_memory(const qf_graph *g, size_t align, size_t *offsets, size_t *total)
{
    return qfi_plan_memory_views(g, NULL, NULL, align, offsets, total);
}

qf_status qfi_plan_memory_views(const qf_graph *g, const int *view_of, const int *read_at, size_t align, size_t *offsets,
                                size_t *total)
{
    int nv = g->n_values;
    life *lv = qfi_calloc((size_t)nv + 1, sizeof *lv);
    int *index = qfi_calloc((size_t)nv + 1, sizeof *index);
    if (!lv || !index) {
        free(lv);
        free(index);
        return QF_ERR_NOMEM;
    }
    for (int v = 0; v < nv; v++) {
        offsets[v] = SIZE_MAX;
        index[v] = -1;
    }
    int n = 0;
    for (int v = 0; v < nv; v++) {
        const qf_value *val = &g->values[v];
        if (val->flags & QF_VALUE_CONST) continue;
        if (view_of && view_of[v] >= 0) continue; /* placed with its root, below */
        bool is_in = val->flags & QF_VALUE_INPUT;
        if (!is_in && val->producer < 0) continue; /* unused */
        size_t sz = qf_value_bytes(val);
        sz = (sz + align - 1) / align * align;
        if (!sz) sz = align;
        lv[n] = (life){.value = v, .first = is_in ? -1 : val->producer, .last = is_in ? -1 : val->producer,
                       .size = sz};
        if (val->flags & QF_VALUE_OUTPUT) lv[n].last = g->n_nodes;
        index[v] = n++;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const qf_node *nd = &g->nodes[i];
        for (int k = 0; k < nd->n_in; k++) {
            int v = nd->in[k];
            if (v >= 0 && view_of && view_of[v] >= 0) v = view_of[v]; /* a view's reader keeps its root alive */
            if (v >= 0 && index[v] >= 0 && lv[index[v]].last < i) lv[index[v]].last = i;
        }
    }
    for (int v = 0; read_at && v < nv; v++) {
        const int r = view_of && view_of[v] >= 0 ? view_of[v] : v;
        if (read_at[v] >= 0 && index[r] >= 0 && lv[index[r]].last < read_at[v]) lv[index[r]].last = read_at[v];
    }
    qsort(lv, (size_t)n, sizeof *lv, by_size_desc);
    /* greedy: each value takes the lowest offset that fits beside every placed
     * value whose life overlaps its own */
    size_t top = 0;
    for (int i = 0; i < n; i++) {
        size_t off = 0;
        bool moved = true;
        while (moved) {
            moved = false;
            for (int j = 0; j < i; j++) {
                if (lv[j].last < lv[i].first || lv[i].last < lv[j].first) continue;
                size_t a = offsets[lv[j].value], b = a + lv[j].size;
                if (off < b && a < off + lv[i].size) {
                    off = b;
                    moved = true;
                }
            }
        }
        offsets[lv[i].value] = off;
        if (off + lv[i].size > top) top = off + lv[i].size;
    }
    if (view_of)
        for (int v = 0; v < nv; v++)
            if (view_of[v] >= 0) offsets[v] = offsets[view_of[v]];
    *total = top;
    free(lv);
    free(index);
    return QF_OK;
}
