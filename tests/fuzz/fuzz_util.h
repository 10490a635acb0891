/* What the libFuzzer harnesses of tests/fuzz share: the loaders take paths, so
 * an input is written to a file in a private temporary folder; an oracle for
 * the library's error contract (a one-line message naming the culprit); and a
 * size guard that keeps engine builds within what a fuzzer can afford. */
#ifndef QF_FUZZ_UTIL_H
#define QF_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include "qforge/qforge.h"

/* The harness's folder ($TMPDIR or /tmp), made on first use, removed at exit. */
const char *fz_dir(void);
/* dir/name into buf (size bytes); returns buf. */
const char *fz_path(char *buf, size_t size, const char *name);
/* Writes data to the file at path (replacing it); aborts if the folder is unusable. */
void fz_write(const char *path, const void *data, size_t size);

/* The contract of a failed call: a message, on one line, that contains
 * `culprit` (the file name) when culprit is not NULL. Aborts otherwise, so
 * libFuzzer records the input. */
void fz_check_error(qf_status st, const char *culprit);

/* True if a prepared graph is small enough to build and run an engine on
 * every input (activations and weights together, and work per run). */
bool fz_graph_is_small(const qf_graph *g);
/* Builds a one-thread CPU engine for g and runs it once on zeroed inputs;
 * a failure must follow the error contract (culprit as above). */
void fz_run_cpu(const qf_graph *g, const char *culprit);

#endif
