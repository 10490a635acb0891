/* Declarations shared by the files of calib/ (not installed): the observer's
 * layout for the report. (All-or-nothing writing is in lib/internal.h.) */
#ifndef QFORGE_CALIB_INTERNAL_H
#define QFORGE_CALIB_INTERNAL_H

#include "internal.h"
#include "qforge/calib.h"

/* Slots (tracked values) that have been observed, in graph value order; *n set.
 * Returns a malloc'd array the caller frees, or NULL with *n = 0 (also on OOM,
 * with the message set: check *n against qf_calib_tensor_count()). */
int *qfi_calib_seen_slots(const qf_calib *c, int *n);
const char *qfi_calib_slot_name(const qf_calib *c, int slot);
const qf_histogram *qfi_calib_slot_hist(const qf_calib *c, int slot);
/* The graph observed, and the histogram of one of its values (NULL if the
 * value is not tracked or was never observed). */
const qf_graph *qfi_calib_graph(const qf_calib *c);
const qf_histogram *qfi_calib_value_hist(const qf_calib *c, int value);

/* qf_histogram_add(h, x, n) and qf_histogram_add(hr, r, n) in one pass, where
 * r[i] = x[i] > 0 ? x[i] : 0 (NaN kept): a Relu's output histogrammed from its
 * input. histogram.c. */
void qfi_histogram_add_relu(qf_histogram *h, qf_histogram *hr, const float *x, size_t n);

/* The oldest table format version that holds t (what qf_calib_table_write
 * writes). table.c. */
int qfi_calib_table_version(const qf_calib_table *t);

/* The chooser's score of each auto candidate for graph value `value` (the sum
 * qf_auto_chooser_apply() compares); false if the value is not judged or was
 * never seen. auto.c. */
bool qfi_auto_chooser_scores(const qf_auto_chooser *a, int value, double score[QF_CALIB_AUTO_CANDIDATES]);

#endif
