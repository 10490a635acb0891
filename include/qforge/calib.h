/* Calibration: streaming |x| histograms of every activation, the calibrators
 * that turn a histogram into a clipping threshold (amax), the table.calib and
 * TensorRT cache files, and an HTML report. The file format is in qforge-calib(5). */
#ifndef QFORGE_CALIB_H
#define QFORGE_CALIB_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "qforge/status.h"
#include "qforge/graph.h"
#include "qforge/engine.h"
#include "qforge/datasets.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- histograms ------------------------------------------------------------------
 * A histogram of |x| over [0, 2^exp) in QF_HIST_BINS equal bins. One pass, bounded
 * memory: when a value at or above 2^exp arrives, the range doubles (as often as
 * needed) and pairs of bins merge. Because the range is always a power of two, the
 * bin of a value at the wider range is exactly (its bin at the narrower range) >> 1,
 * so the result is the histogram that would have been built at the final range from
 * the start: it does not depend on the order, the batch split or the threading of
 * the data, and two histograms merge exactly. The final range is the smallest power
 * of two above absmax, so absmax lies in [2^exp / 2, 2^exp).
 * Exact zeros are counted apart (they quantize exactly at any scale, and a ReLU
 * output's spike of zeros would otherwise dominate the entropy search); NaN and Inf
 * are excluded and counted. Beside |x|, the smallest finite x keeps the sign the
 * bins drop: how far a two-sided tensor reaches below zero (quant's zero points). */
#define QF_HIST_BINS 2048
#define QF_HIST_EXP_EMPTY (-200) /* exp of a histogram that saw no nonzero value */

typedef struct qf_histogram {
    uint64_t bins[QF_HIST_BINS]; /* bin b counts nonzero finite |x| in [b*w, (b+1)*w), w = 2^exp/2048 */
    uint64_t zeros;              /* exact zeros */
    uint64_t nonfinite;          /* NaN and +-Inf, excluded from everything else */
    float absmax;                /* largest finite |x|; 0 if none */
    float min;                   /* smallest finite x (a zero counts as +0); +INFINITY if none */
    int exp;                     /* range is [0, 2^exp) */
} qf_histogram;

void qf_histogram_init(qf_histogram *h);
/* Adds n values (any order, any split: the result is the same). */
void qf_histogram_add(qf_histogram *h, const float *x, size_t n);
/* dst += src, exactly; the narrower of the two ranges widens to the other. */
void qf_histogram_merge(qf_histogram *dst, const qf_histogram *src);
/* Widens the range to [0, 2^exp) by merging bins; no-op if already that wide. */
void qf_histogram_widen(qf_histogram *h, int exp);
double qf_histogram_bin_width(const qf_histogram *h);
/* Finite values seen: zeros plus the bins. */
uint64_t qf_histogram_count(const qf_histogram *h);

/* ---- calibrators ------------------------------------------------------------------
 * Each returns amax, the clipping threshold of symmetric INT8 (scale = amax/127).
 * All return 0 for a histogram without nonzero values, never exceed absmax, and
 * depend only on the histogram (so equal histograms give bit-identical results). */
typedef enum qf_calib_method {
    QF_CALIB_AUTO,       /* per tensor, the candidate below that costs least (qf_calib_auto) */
    QF_CALIB_ENTROPY,    /* KL divergence search, as TensorRT's EntropyCalibration2 */
    QF_CALIB_MINMAX,     /* absmax */
    QF_CALIB_PERCENTILE, /* the |x| below which P% of the values lie */
    QF_CALIB_MSE,        /* minimum expected squared quantization error */
    QF_CALIB_METHOD_COUNT
} qf_calib_method;
#define QF_CALIB_ALL ((1u << QF_CALIB_METHOD_COUNT) - 1)
/* What calib and quant use unless told (qf_calibrate_opts_init). */
#define QF_CALIB_METHOD_DEFAULT QF_CALIB_AUTO
#define QF_CALIB_PERCENTILE_DEFAULT 99.99

/* "auto", "entropy", "minmax", "percentile", "mse". */
const char *qf_calib_method_name(qf_calib_method m);
/* Parses a --method argument: "auto", "entropy", "minmax", "percentile",
 * "percentile=P" (0 < P <= 100), "mse" or "all" into a bit mask of
 * (1u << method) and the P of the percentile method
 * (QF_CALIB_PERCENTILE_DEFAULT when not given). */
qf_status qf_calib_method_parse(const char *s, unsigned *methods, double *percentile);

float qf_calib_entropy(const qf_histogram *h);
float qf_calib_minmax(const qf_histogram *h);
float qf_calib_percentile(const qf_histogram *h, double percent);
float qf_calib_mse(const qf_histogram *h);
/* auto's candidates, in this order (ties go to the earlier): entropy, mse,
 * percentile 99.99, percentile 99.999, minmax. */
#define QF_CALIB_AUTO_CANDIDATES 5
/* "entropy", "mse", "percentile=99.99", "percentile=99.999", "minmax". */
const char *qf_calib_auto_candidate_name(int k);
void qf_calib_auto_candidates(const qf_histogram *h, float amax[QF_CALIB_AUTO_CANDIDATES]);
/* From the histogram alone: the candidate with the least expected squared
 * quantization error of the tensor itself (mse's error model). qf_calibrate()
 * and qf_calib_choose_auto() judge candidates by their readers' outputs instead. */
float qf_calib_auto(const qf_histogram *h);
/* One of the above by enum; `percent` is used by QF_CALIB_PERCENTILE only. */
float qf_calib_threshold(const qf_histogram *h, qf_calib_method m, double percent);

/* The smallest amax an INT8 scale can hold: amax/127 must be a normal float
 * (127 * 2^-126, about 1.49e-36). */
#define QF_CALIB_AMAX_MIN (127.0f * 0x1p-126f)
/* The INT8 scale of an amax: amax/127, and 1 for an amax below QF_CALIB_AMAX_MIN,
 * 0 included (such a tensor quantizes to zeros; 1 keeps every later division
 * finite). The one place this rule lives; weights use it for their channel
 * absmax too. */
float qf_calib_scale(float amax);

/* ---- tables (table.calib, qforge-calib(5)) ------------------------------------------ */
/* The newest format version read and written; a table is written at the
 * oldest version that holds it (3 where an entry records its minimum, 2 for
 * an equalized graph's without). */
#define QF_CALIB_TABLE_VERSION 3

typedef struct qf_calib_entry {
    char *name;                         /* tensor (graph value) name */
    float amax[QF_CALIB_METHOD_COUNT];  /* valid where the table's `methods` has the bit */
    bool has_min;                       /* min is recorded (tables before version 3 record none) */
    float min;                          /* the smallest finite value calibration saw (qf_histogram.min) */
} qf_calib_entry;

typedef struct qf_calib_table {
    int version;
    unsigned methods;         /* bit mask of (1u << qf_calib_method); never 0 */
    double percentile;        /* P of the percentile method (if recorded) */
    int64_t images;           /* images calibrated on */
    char model_sha256[65];    /* lowercase hex of the FP32 model file's SHA-256 */
    char *preprocess;         /* one-line description of the preprocessing ("" if none) */
    char equalized[65];       /* qf_graph.equalized of the graph calibrated: "" unless it was
                               * cross-layer equalized (qf_graph_equalize) */
    int n;
    qf_calib_entry *entries;  /* in graph order */
} qf_calib_table;

void qf_calib_table_free(qf_calib_table *t);
/* The method a table's amax means by default: the first recorded, in enum order
 * (auto for --method all). */
qf_calib_method qf_calib_table_default_method(const qf_calib_table *t);
/* Index of the entry named `name`, or -1. */
int qf_calib_table_find(const qf_calib_table *t, const char *name);
/* amax of entry i by method (use qf_calib_table_default_method() for the default);
 * fails naming the tensor if the table did not record that method. */
qf_status qf_calib_table_amax(const qf_calib_table *t, int i, qf_calib_method m, float *amax);
/* The smallest value entry i recorded, or NAN where the table records none. */
float qf_calib_table_min(const qf_calib_table *t, int i);

/* Writes table.calib. Like every writer here, it writes a temporary file in the
 * same folder and renames it over `path`, so a failure never leaves a half-written
 * file. Floats are written with %.9g and read back bit for bit. */
qf_status qf_calib_table_write(const qf_calib_table *t, const char *path);
/* Reads a table; any malformed, truncated or hand-mangled line fails with a
 * one-line message naming the file and the line number. */
qf_status qf_calib_table_read(const char *path, qf_calib_table **out);
/* Compares the table's model hash with `model_sha256` (hex, from qf_sha256_file()).
 * A mismatch fails naming `table_path`, unless `force`, which only logs a warning. */
qf_status qf_calib_table_check_model(const qf_calib_table *t, const char *table_path,
                                     const char *model_sha256, bool force);
/* Writes TensorRT's calibration cache for method m: a header line
 * "TRT-8601-EntropyCalibration2" ("TRT-8601-MinMaxCalibration" for minmax), then
 * "name: hhhhhhhh" per tensor, the hex digits being the IEEE float32 bits of the
 * scale qf_calib_scale(amax). Auto, percentile and MSE tables use the entropy
 * header, the calibrator TensorRT users load caches with. */
qf_status qf_calib_table_write_trt(const qf_calib_table *t, qf_calib_method m, const char *path);

/* ---- the calibration observer ----------------------------------------------------------
 * One histogram per non-constant FP32 value of a graph (graph inputs included).
 * Typical use:
 *     qf_calib_create(g, NULL, &c);
 *     opts.observer = qf_calib_observe; opts.observer_user = c;   (qf_engine_opts)
 *     for each batch: fill inputs; qf_calib_set_batch_valid(c, real_images); qf_engine_run(e);
 *     qf_calib_finalize(c, methods, percentile, &meta, &table);
 *     qf_calib_table_write(table, "table.calib"); qf_calib_report_write("r.html", c, table);
 * (qf_calibrate() below is that loop over a folder of images.)
 * Counts are integers and maxima are exact, so the table is bit-identical whatever
 * the batch size, the thread count or the number of devices (one qf_calib per
 * device, merged with qf_calib_merge()). */
typedef struct qf_calib qf_calib;

typedef struct qf_calib_opts {
    int threads;    /* threads that histogram one large tensor; 0 = all cores; default 1 */
} qf_calib_opts;

typedef struct qf_calib_meta {
    int64_t images;             /* images observed */
    const char *model_sha256;   /* 64 hex digits (qf_sha256_file() of the model) */
    const char *preprocess;     /* one line describing the preprocessing, or NULL */
} qf_calib_meta;

/* The graph must be prepared (concrete shapes) and outlive the calibrator. */
qf_status qf_calib_create(const qf_graph *g, const qf_calib_opts *opts, qf_calib **out);
void qf_calib_free(qf_calib *c);
/* A qf_observer_fn (user = the qf_calib). Values that are constant or not f32 are
 * ignored. Different values may be observed from different threads at once; one
 * value must not be observed by two threads at once. */
void qf_calib_observe(void *user, const qf_graph *g, int value, const void *data);
/* The same for engines that build the histograms themselves (qf_engine_opts'
 * hist_observer and hist_count, user = the qf_calib): h is one observation's
 * histogram of the value, merged exactly; the count is the value's elements
 * that belong to real images. */
void qf_calib_observe_histogram(void *user, const qf_graph *g, int value, const qf_histogram *h);
int64_t qf_calib_observe_count(void *user, const qf_graph *g, int value);
/* Only the first `images` images of each batch are counted from now on (a final
 * batch padded up to the engine's batch size); 0 counts every image. A value counts
 * as batched when its leading dimension equals the graph's batch; other values are
 * counted whole. */
void qf_calib_set_batch_valid(qf_calib *c, int images);
/* dst += src for calibrators of graphs with the same value names (several devices). */
qf_status qf_calib_merge(qf_calib *dst, const qf_calib *src);

/* Tensors observed so far, in graph value order. */
int qf_calib_tensor_count(const qf_calib *c);
const char *qf_calib_tensor_name(const qf_calib *c, int i);
const qf_histogram *qf_calib_tensor_hist(const qf_calib *c, int i);

/* Computes the thresholds of `methods` (a mask from qf_calib_method_parse()) for
 * every observed tensor into a new table (auto from the histograms alone: see
 * qf_calib_choose_auto). Tensors that saw NaN or Inf are named in a warning
 * through qf_log (their finite values still count). */
qf_status qf_calib_finalize(const qf_calib *c, unsigned methods, double percentile,
                            const qf_calib_meta *meta, qf_calib_table **out);

/* --method auto by the error where it lands. A chooser runs batches of images
 * through c's FP32 graph (on the CPU unless qf_auto_chooser_set_device says
 * otherwise) and measures, for every tensor of t, each
 * candidate threshold's INT8 error (rounding and clipping) in the outputs of the
 * layers that read the tensor: the relative squared error of each Conv, Gemm or
 * MatMul with constant weights that reads it (computed in FP32 from the
 * quantized tensor), plus the tensor's own relative squared error where another
 * op reads it or it is a graph output. qf_auto_chooser_apply() sets each
 * tensor's auto threshold to the candidate with the least sum. Errors are summed
 * image by image in order, so the choice does not depend on how the images are
 * split into batches. */
typedef struct qf_auto_chooser qf_auto_chooser;

/* c (its graph prepared, its histograms complete) and t (with its entries) must
 * outlive the chooser; threads: of the CPU engines and the host's quantizing
 * and summing, 0 = all cores. */
qf_status qf_auto_chooser_create(const qf_calib *c, const qf_calib_table *t, int threads, qf_auto_chooser **out);
void qf_auto_chooser_free(qf_auto_chooser *a);
/* Runs the graph and the layers judged on `device` (cuda:index) instead, before
 * the first batch; quantizing and summing stay on the host. A device computes
 * FP32 in another order than the CPU, so where two candidates cost nearly the
 * same a device may choose the other one. */
qf_status qf_auto_chooser_set_device(qf_auto_chooser *a, qf_device_kind device, int index);
/* Judges each candidate on the grid qforge quant gives the tensor with zero
 * points (true, the default: qf_quant_opts.asymmetric) or without, and with
 * two_sided (default false) also those from the table's minimums
 * (qf_quant_opts.asymmetric_two_sided); before the first batch. */
void qf_auto_chooser_set_zero_points(qf_auto_chooser *a, bool zero_points, bool two_sided);
/* One batch: `input` laid out as the graph's input at its batch, the first
 * `images` images real (0: all). */
qf_status qf_auto_chooser_run(qf_auto_chooser *a, const float *input, int images);
/* Sets the auto threshold of every tensor of t the runs saw (t must record auto)
 * and counts the choices per candidate (`chosen`, may be NULL). */
void qf_auto_chooser_apply(const qf_auto_chooser *a, qf_calib_table *t, int64_t chosen[QF_CALIB_AUTO_CANDIDATES]);

/* ---- calibrating on a folder of images -------------------------------------------------
 * qf_calibrate() is the whole of `qforge calib` but the files: it decodes the
 * dataset's images (qf_loader), runs them through an engine for the graph with
 * the observer above and returns the table. On the CPU it runs data-parallel,
 * one single-threaded engine and qf_calib per core taking whole batches, merged
 * at the end; on a CUDA device the engine builds each activation's histogram
 * where it is (hist_observer) instead of copying it to the host. With auto among
 * the methods, a qf_auto_chooser then runs QF_CALIB_AUTO_IMAGES of the images
 * (evenly spaced) on the same device. Either way the table is the same for any
 * batch or thread count, and for any device but for FP32 rounding (which can
 * tip auto's choice between two candidates of nearly the same cost). */
#define QF_CALIB_AUTO_IMAGES 32

/* Runs fn on batches of `count` images evenly spaced among the dataset's (all
 * of them if it has fewer), decoded and preprocessed for g (one float input,
 * prepared at its batch): `input` holds g->batch images, the first `images`
 * real, the rest zeros. Stops at fn's first failure. *images (may be NULL):
 * the images fn saw (files that cannot be decoded are skipped unless strict).
 * qf_calibrate's auto pass and quant's bias correction take their images so. */
typedef qf_status (*qf_batch_fn)(void *user, const float *input, int images);
qf_status qf_calib_sample_batches(const qf_graph *g, const qf_dataset *ds, const qf_preprocess *pp, int64_t count,
                                  int decode_threads, bool strict, qf_batch_fn fn, void *user, int64_t *images);
typedef void (*qf_progress_fn)(void *user, int64_t done, int64_t total);

typedef struct qf_calibrate_opts {
    qf_device_kind device;
    int device_index;          /* cuda:N */
    bool cpu_fallback;         /* a device engine that cannot be built (no usable GPU, an op
                                  without a kernel) gives way to the CPU, said through qf_log */
    int threads;               /* CPU threads for the engines and histograms; 0 = all cores */
    int decode_threads;        /* 0: qf_loader_default_threads() for where the engine runs */
    bool strict;               /* an image that cannot be decoded fails instead of being skipped */
    unsigned methods;          /* qf_calib_method_parse() mask */
    double percentile;         /* P of the percentile method */
    bool auto_zero_points;     /* auto judges its candidates on the grid of INT8 with zero
                                  points (quant's default; qf_auto_chooser_set_zero_points);
                                  false: of symmetric INT8 (quant --zero-points none). Default true */
    bool auto_two_sided;       /* with auto_zero_points: also those two-sided tensors get from
                                  their minimums (qf_quant_opts.asymmetric_two_sided). Default false */
    const char *model_sha256;  /* the table's model hash (qf_sha256_file()); NULL: 64 zeros */
    qf_progress_fn progress;   /* optional: called with 0 when the first batch is asked for,
                                  then after every batch (from worker threads, one at a time) */
    void *progress_user;
} qf_calibrate_opts;

/* CPU, no fallback, all cores, QF_CALIB_METHOD_DEFAULT, auto judged with zero points. */
void qf_calibrate_opts_init(qf_calibrate_opts *o);

/* What a qf_calibrate() run did. */
typedef struct qf_calibrate_info {
    qf_device_kind device;     /* where it ran (the CPU after a fallback) */
    int64_t images;            /* images calibrated on */
    int64_t skipped;           /* files that could not be decoded */
    double seconds;            /* from the first batch to the last, engines built */
    int64_t auto_chosen[QF_CALIB_AUTO_CANDIDATES]; /* with auto: tensors per candidate */
    int64_t auto_images;       /* with auto: images the choosing pass ran */
    double auto_seconds;       /* with auto: its time */
} qf_calibrate_info;

/* Calibrates the prepared FP32 graph g (its batch is the batch size) on the
 * images of ds, preprocessed by pp (its model fields set for g's input), into a
 * new *table recording pp's qf_preprocess_format() text. `hists` (may be NULL)
 * receives the merged histograms, for qf_calib_report_write(); `info` may be NULL. */
qf_status qf_calibrate(const qf_graph *g, const qf_dataset *ds, const qf_preprocess *pp,
                       const qf_calibrate_opts *o, qf_calib_table **table, qf_calib **hists,
                       qf_calibrate_info *info);

/* ---- report ---------------------------------------------------------------------------
 * One self-contained HTML file (inline SVG and a small inline sorting script, no
 * external resources): per tensor its histogram on a log scale with every method's
 * threshold marked (those recorded in `t` highlighted), and a table of tensors
 * sortable by absmax / threshold. `t` supplies the header facts and the chosen
 * thresholds; it may be NULL. */
qf_status qf_calib_report_write(const char *path, const qf_calib *c, const qf_calib_table *t);

/* ---- SHA-256 (FIPS 180-4), for the model hash in tables and .qfm provenance ------------- */
typedef struct qf_sha256_ctx {
    uint32_t h[8];
    uint64_t bytes;
    uint8_t buf[64];
    size_t nbuf;
} qf_sha256_ctx;

void qf_sha256_init(qf_sha256_ctx *c);
void qf_sha256_update(qf_sha256_ctx *c, const void *data, size_t n);
void qf_sha256_final(qf_sha256_ctx *c, uint8_t digest[32]);
/* 64 lowercase hex digits and a NUL. */
void qf_sha256_hex(const uint8_t digest[32], char hex[65]);
qf_status qf_sha256_file(const char *path, char hex[65]);

#ifdef __cplusplus
}
#endif
#endif
