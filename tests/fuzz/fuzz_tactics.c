/* libFuzzer harness: the tactic cache file (runtime/tactic_cache.c), the one
 * cache qforge reads back -- it keeps its own tactics, not TensorRT's. The
 * input is the file of device "fuzz" under $QFORGE_CACHE_DIR, looked up with
 * keys of the shapes the CUDA engine uses, then given a new entry. */
#include "fuzz_util.h"
#include "tactic_cache.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char file[4200];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    setenv("QFORGE_CACHE_DIR", fz_dir(), 1);
    qfi_tactic_cache *tc = qfi_tactic_cache_open("fuzz");
    if (!tc) abort();
    snprintf(file, sizeof file, "%s", qfi_tactic_cache_path(tc));
    qfi_tactic_cache_free(tc);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_write(file, data, size);
    qfi_tactic_cache *tc = qfi_tactic_cache_open("fuzz");
    if (!tc) abort();
    int v = 0;
    (void)qfi_tactic_cache_get(tc, "conv:i8:1,64,56,56,64:3x3:s1,1:p1,1:d1,1:r0:q0:l0:n0:v00000000", &v);
    (void)qfi_tactic_cache_get(tc, "gemm:k0:64x3136x576:ld576,576,64:t10:b1:r0:a0:al0:n8", &v);
    qfi_tactic_cache_put(tc, "gemm:k1:8x8x8:ld8,8,8:t10:b0:r0:a0:al0:n1", 3);
    qfi_tactic_cache_free(tc);
    return 0;
}
