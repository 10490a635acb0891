/* libFuzzer harness: a table.calib through qf_calib_table_read, then the
 * lookups quant makes, and a round trip: a table the reader accepts must write
 * and read back to the same table, every threshold bit for bit
 * (qforge-calib(5)). qforge writes TensorRT caches but never reads one. */
#include "fuzz_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char table[600], copy[600];

static void fail(const char *what)
{
    fprintf(stderr, "fuzz: the table read back differs: %s\n", what);
    abort();
}

static void same_table(const qf_calib_table *a, const qf_calib_table *b)
{
    if (a->version != b->version || a->methods != b->methods || a->images != b->images || a->n != b->n)
        fail("header numbers");
    if ((a->methods & (1u << QF_CALIB_PERCENTILE)) && a->percentile != b->percentile) fail("percentile");
    if (strcmp(a->model_sha256, b->model_sha256) || strcmp(a->preprocess ? a->preprocess : "", b->preprocess ? b->preprocess : ""))
        fail("model hash or preprocessing");
    if (strcmp(a->equalized, b->equalized)) fail("equalization record");
    for (int i = 0; i < a->n; i++) {
        if (strcmp(a->entries[i].name, b->entries[i].name)) fail("a tensor name");
        for (int m = 0; m < QF_CALIB_METHOD_COUNT; m++)
            if ((a->methods & (1u << m)) && memcmp(&a->entries[i].amax[m], &b->entries[i].amax[m], sizeof(float)) &&
                !(a->entries[i].amax[m] == 0 && b->entries[i].amax[m] == 0))
                fail("a threshold");
        if (a->entries[i].has_min != b->entries[i].has_min ||
            (a->entries[i].has_min && memcmp(&a->entries[i].min, &b->entries[i].min, sizeof(float)) &&
             !(a->entries[i].min == 0 && b->entries[i].min == 0)))
            fail("a minimum");
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fz_path(table, sizeof table, "table.calib");
    fz_path(copy, sizeof copy, "copy.calib");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_write(table, data, size);
    qf_calib_table *t = NULL;
    qf_status st = qf_calib_table_read(table, &t);
    fz_check_error(st, "table.calib");
    if (st != QF_OK) return 0;

    qf_calib_method dm = qf_calib_table_default_method(t);
    if (dm >= QF_CALIB_METHOD_COUNT || !(t->methods & (1u << dm))) fail("default method not recorded");
    for (int i = 0; i < t->n; i++) {
        if (qf_calib_table_find(t, t->entries[i].name) != i) fail("lookup by name");
        for (int m = 0; m < QF_CALIB_METHOD_COUNT; m++) {
            float amax;
            fz_check_error(qf_calib_table_amax(t, i, (qf_calib_method)m, &amax), t->entries[i].name);
        }
    }
    fz_check_error(qf_calib_table_check_model(t, table, "0123", false), "table.calib");

    st = qf_calib_table_write(t, copy);
    fz_check_error(st, "copy.calib");
    if (st != QF_OK) fail("a table the reader accepts cannot be written");
    qf_calib_table *back = NULL;
    st = qf_calib_table_read(copy, &back);
    if (st != QF_OK) {
        fprintf(stderr, "fuzz: %s\n", qf_error_message());
        fail("a table qforge wrote does not read");
    }
    same_table(t, back);
    qf_calib_table_free(back);
    qf_calib_table_free(t);
    return 0;
}
