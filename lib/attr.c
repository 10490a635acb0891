/* Attribute lookup for op parsers: typed getters with defaults. */
#include "internal.h"

const qf_attr *qfi_attr_find(const qf_node *n, const char *name)
{
    for (int i = 0; i < n->n_attr; i++)
        if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
    return NULL;
}

int64_t qfi_attr_int(const qf_node *n, const char *name, int64_t dflt)
{
    const qf_attr *a = qfi_attr_find(n, name);
    return a && a->type == QF_ATTR_INT ? a->i : dflt;
}

float qfi_attr_float(const qf_node *n, const char *name, float dflt)
{
    const qf_attr *a = qfi_attr_find(n, name);
    if (!a) return dflt;
    if (a->type == QF_ATTR_FLOAT) return a->f;
    if (a->type == QF_ATTR_INT) return (float)a->i;
    return dflt;
}

const char *qfi_attr_string(const qf_node *n, const char *name, const char *dflt)
{
    const qf_attr *a = qfi_attr_find(n, name);
    return a && a->type == QF_ATTR_STRING && a->s ? a->s : dflt;
}

const int64_t *qfi_attr_ints(const qf_node *n, const char *name, int *count)
{
    const qf_attr *a = qfi_attr_find(n, name);
    if (!a || a->type != QF_ATTR_INTS) {
        *count = 0;
        return NULL;
    }
    *count = a->n;
    return a->ints;
}

qf_status qfi_node_set_params(qf_node *n, void *p, qf_status st)
{
    if (st != QF_OK) {
        free(p);
        return st;
    }
    free(n->params);
    n->params = p;
    return QF_OK;
}

void qfi_attr_drop(qf_node *n, const char *name)
{
    for (int i = 0; i < n->n_attr; i++) {
        if (strcmp(n->attrs[i].name, name) != 0) continue;
        qfi_attr_free(&n->attrs[i]);
        memmove(&n->attrs[i], &n->attrs[i + 1], (size_t)(n->n_attr - i - 1) * sizeof *n->attrs);
        n->n_attr--;
        return;
    }
}
