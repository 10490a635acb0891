/* The pieces of the .qfm format (qforge-model(5)) that the writer and the
 * reader share: CRC-32, the string and name rules, and the
 * metadata defaults. */
#include "qfm_internal.h"
#include <zlib.h>

void qf_qfm_meta_init(qf_qfm_meta *m)
{
    memset(m, 0, sizeof *m);
    m->precision = QF_PREC_INT8;
}

/* zlib's crc32 takes a 32-bit length: large sections go in pieces. */
uint32_t qfi_qfm_crc_update(uint32_t crc, const uint8_t *p, uint64_t n)
{
    while (n > 0) {
        uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = (uint32_t)crc32(crc, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return crc;
}
uint32_t qfi_qfm_crc(const uint8_t *p, uint64_t n) { return qfi_qfm_crc_update((uint32_t)crc32(0, NULL, 0), p, n); }

bool qfi_qfm_has_control(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] < 0x20 || p[i] == 0x7f) return true;
    return false;
}

static int cmp_str_ptr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

const char *qfi_qfm_duplicate_name(char **names, size_t n)
{
    qsort(names, n, sizeof *names, cmp_str_ptr);
    for (size_t i = 1; i < n; i++)
        if (strcmp(names[i - 1], names[i]) == 0) return names[i];
    return NULL;
}

bool qfi_qfm_is_method_name(const char *s)
{
    for (int m = 0; m < QF_CALIB_METHOD_COUNT; m++)
        if (strcmp(s, qf_calib_method_name((qf_calib_method)m)) == 0) return true;
    return false;
}

bool qfi_qfm_is_scale_source(const char *s) { return strcmp(s, "calibration") == 0 || strcmp(s, "model") == 0; }
