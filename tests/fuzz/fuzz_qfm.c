/* libFuzzer harness: a .qfm through qf_qfm_read, then, when the graph is
 * small, a CPU engine built and run once, and a write/read round trip (a file
 * the reader accepts must write and read back). The header's size and every
 * CRC are recomputed before the read: mutated bytes would otherwise almost
 * never pass the CRC checks and the parsers behind them would go unexplored
 * (test_qfm covers the CRC checks themselves). */
#include "fuzz_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* Offsets of qforge-model(5), format version 1. */
#define HEADER_BYTES 32
#define ENTRY_BYTES 32
#define MAX_SECTIONS 64

static char model[600], copy[600];

static uint32_t get32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t get64(const uint8_t *p) { return get32(p) | (uint64_t)get32(p + 4) << 32; }
static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

static uint32_t crc(const uint8_t *p, uint64_t n) { return (uint32_t)crc32_z(crc32_z(0, NULL, 0), p, (size_t)n); }

/* The file size, the sections' CRCs (those inside the file), the table's and the header's. */
static void fix_crcs(uint8_t *f, size_t size)
{
    if (size < HEADER_BYTES) return;
    put64(f + 8, size);
    uint32_t count = get32(f + 16);
    if (count >= 1 && count <= MAX_SECTIONS && HEADER_BYTES + (uint64_t)count * ENTRY_BYTES <= size) {
        for (uint32_t i = 0; i < count; i++) {
            uint8_t *e = f + HEADER_BYTES + i * ENTRY_BYTES;
            uint64_t off = get64(e + 8), n = get64(e + 16);
            if (off <= size && n <= size - off) put32(e + 24, crc(f + off, n));
        }
        put32(f + 24, crc(f + HEADER_BYTES, (uint64_t)count * ENTRY_BYTES));
    }
    put32(f + 28, crc(f, 28));
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fz_path(model, sizeof model, "model.qfm");
    fz_path(copy, sizeof copy, "copy.qfm");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *f = malloc(size ? size : 1);
    if (!f) return 0;
    memcpy(f, data, size);
    fix_crcs(f, size);
    fz_write(model, f, size);
    free(f);

    // an odd size reads at batch 2: every shape inferred again at another batch
    qf_graph *g = NULL;
    qf_qfm_meta meta;
    qf_status st = qf_qfm_read(model, (size & 1) ? 2 : 0, &g, &meta);
    fz_check_error(st, "model.qfm");
    if (st != QF_OK || !fz_graph_is_small(g)) {
        qf_graph_free(g);
        return 0;
    }
    fz_run_cpu(g, "model.qfm");
    st = qf_qfm_write(g, &meta, copy);
    fz_check_error(st, "copy.qfm");
    if (st == QF_OK) {
        qf_graph *back = NULL;
        st = qf_qfm_read(copy, 0, &back, NULL);
        if (st != QF_OK) {
            fprintf(stderr, "fuzz: a file qforge wrote does not read back: %s\n", qf_error_message());
            abort();
        }
        qf_graph_free(back);
    }
    qf_graph_free(g);
    return 0;
}
