/* The tactics an engine times when it is built (a cuBLASLt algorithm, an
 * implicit-GEMM variant), kept on disk so that the next build of the same
 * layers on the same device and library versions skips the timing. One text
 * file per device key (runtime/tactic_cache.c; the format is in qforge(1),
 * ENVIRONMENT). */
#ifndef QFORGE_TACTIC_CACHE_H
#define QFORGE_TACTIC_CACHE_H

#include <stdbool.h>
#include "qforge/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qfi_tactic_cache qfi_tactic_cache;

/* The cache of `device_key` (any printable text naming the device, driver
 * and library versions), read from its file when one exists. NULL when
 * caching is off (QFORGE_CACHE_DIR set to "") or no cache folder can be
 * found or made; every function below accepts NULL and then does nothing. */
qfi_tactic_cache *qfi_tactic_cache_open(const char *device_key);
/* The value stored under `key` (printable, no spaces), if any. */
bool qfi_tactic_cache_get(const qfi_tactic_cache *tc, const char *key, int *value);
void qfi_tactic_cache_put(qfi_tactic_cache *tc, const char *key, int value);
/* Writes the file (atomically) when something was put; a failure is only
 * logged: a cache that cannot be written costs time, not results. */
void qfi_tactic_cache_save(qfi_tactic_cache *tc);
void qfi_tactic_cache_free(qfi_tactic_cache *tc);
/* The file the cache reads and writes. */
const char *qfi_tactic_cache_path(const qfi_tactic_cache *tc);

#ifdef __cplusplus
}
#endif
#endif
