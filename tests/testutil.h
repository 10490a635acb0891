/* Helpers shared by the check programs in tests/: deterministic random numbers,
 * building small graphs by hand (values, constants, nodes, attributes), running
 * and calibrating them on the CPU engine, and the srunner boilerplate of main().
 * Test code only: these assert with check's ck_assert_* on failure. */
#ifndef QF_TESTUTIL_H
#define QF_TESTUTIL_H

#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include "qforge/qforge.h"

/* Asserts that a qf_status expression is QF_OK, showing the expression and qf_error_message(). */
#define OK(expr)                                                                                                      \
    do {                                                                                                              \
        qf_status st_ = (expr);                                                                                       \
        ck_assert_msg(st_ == QF_OK, "%s: %s", #expr, qf_error_message());                                             \
    } while (0)

/* ---- deterministic random numbers ---------------------------------------------------- */

/* The generator's state: tests seed it (rng = seed) so every run sees the same data. */
extern uint64_t rng;
/* false (default): rng steps as a 64-bit LCG; true: as xorshift64* (see rng_use_xorshift). */
extern bool rng_xorshift;
/* Switches to xorshift64* from seed (nonzero): the sequence test_ops_compute and test_cuda were written with. */
void rng_use_xorshift(uint64_t seed);
/* A uniform float in [lo, hi) from the top 24 bits of the next step. */
float frand(float lo, float hi);

/* ---- building graphs by hand ------------------------------------------------------------ */

/* Appends v to the int array *arr of *n elements (g->inputs, g->outputs). */
void list_add(int **arr, int *n, int v);
/* A graph input: an F32 value of shape d, flagged and listed as an input. */
int input(qf_graph *g, const char *name, int nd, const int64_t *d);
/* Flags and lists v as a graph output. */
void output(qf_graph *g, int v);
/* An F32 constant of shape d filled with frand(lo, hi). */
int weight(qf_graph *g, const char *name, int nd, const int64_t *d, float lo, float hi);
/* An F32 value whose shape qf_graph_prepare infers. */
int value(qf_graph *g, const char *name);
/* A node with one output; asserts that it was added. */
qf_node *op(qf_graph *g, const char *name, qf_op o, int n_in, const int *in, int out);
/* A Conv node with pads `pad` on every side and `group` groups (b < 0: no bias). */
qf_node *conv_node(qf_graph *g, const char *name, int x, int w, int b, int out, int pad, int group);
/* Parses every node's attributes, then qf_graph_prepare at `batch`. */
void prepare_graph(qf_graph *g, int batch);
/* The index of the node called name, or -1. */
int node_index(const qf_graph *g, const char *name);
/* The node called name, or NULL. */
const qf_node *node_named(const qf_graph *g, const char *name);
/* Appends a zeroed attribute of type t to n and returns it for the caller to fill. */
qf_attr *attr(qf_node *n, const char *name, qf_attr_type t);
void set_int(qf_node *n, const char *name, int64_t v);
void set_float(qf_node *n, const char *name, float v);
void set_ints(qf_node *n, const char *name, int cnt, const int64_t *v);

/* ---- running and calibrating ----------------------------------------------------------------- */

/* n = numel of g's input 0 values frand(lo, hi) after seeding rng with seed (caller frees). */
float *random_input(const qf_graph *g, uint64_t seed, float lo, float hi);
/* Runs g (batch g->batch) on x with an optional observer on the CPU engine (2 threads);
 * returns a copy of output 0, asserted to be F32 (caller frees). */
float *run(const qf_graph *g, const float *x, qf_observer_fn obs, void *user);
/* Runs g0 and g1 on x (run()) and asserts that their outputs are the same
 * bits (and within 1e-5 of the largest |output|, which the message names
 * when they are not); returns the largest difference. */
double assert_same_function(const qf_graph *g0, const qf_graph *g1, const float *x);
/* 10 log10(sum ref^2 / sum (y - ref)^2) in dB; +inf when y equals ref. */
double sqnr_db(const float *ref, const float *y, int64_t n);
/* A minmax calibration table of g's tensors observed on one run of x. */
qf_calib_table *calibrate_minmax(const qf_graph *g, const float *x);
/* A table of every method (--method all) calibrated by qf_calibrate() on n evenly
 * spaced images of the folder dir (all for n <= 0), on device dev with `threads`
 * decode threads. */
qf_calib_table *calibrate_folder(qf_graph *g, const char *dir, int64_t n, const qf_preprocess *pp,
                                 qf_device_kind dev, int threads);

/* Runs every test of s (srunner, CK_NORMAL); returns main()'s exit status: 0 when all passed, else 1. */
int run_suite(Suite *s);

#endif
