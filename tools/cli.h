/* Shared pieces of the qforge command: option parsing helpers, error
 * reporting, and the subcommand entry points. Only tools/ prints. */
#ifndef QFORGE_CLI_H
#define QFORGE_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <qforge/qforge.h>

/* Exit codes (qforge(1)): 0 success, 1 failure, 2 bad usage. */
enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

/* Prints "qforge: <message>" for the last library failure and returns 1 (or 2 for usage). */
int cli_fail(qf_status st);
/* Prints "qforge CMD: <formatted message>" and returns EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Parses a positive int option value; false with a message on failure. */
bool cli_parse_int(const char *cmd, const char *opt, const char *s, int lo, int hi, int *out);

extern bool cli_quiet;
/* Library messages below min_level are not shown (QF_LOG_INFO by default;
 * QFORGE_DEBUG in the environment shows every message). */
void cli_log_level(qf_log_level min_level);

#define QF_CHECK_CLI(expr)                                                     \
    do {                                                                       \
        qf_status st_ = (expr);                                                \
        if (st_ != QF_OK) return st_;                                          \
    } while (0)

/* ---- progress bar (progress.c) ---------------------------------------------- */
typedef struct progress {
    const char *label;
    const char *unit;   /* what is counted: "img" unless progress_start_units */
    int64_t total, done;
    double t0, last;
    bool enabled;
} progress;
void progress_start(progress *p, const char *label, int64_t total);
void progress_start_units(progress *p, const char *label, int64_t total, const char *unit);
void progress_update(progress *p, int64_t done);
/* Clears the bar; returns seconds since progress_start. */
double progress_end(progress *p);

/* ---- models and image input shared by calib, eval, run (input.c) ---------------- */
/* Loads an ONNX or .qfm model (told apart by the .qfm magic) prepared at
 * `batch`; `meta` (may be NULL) receives a .qfm's provenance and stored
 * preprocessing, and is empty for ONNX. An ONNX model quantized elsewhere
 * (Q/DQ or QOperator) comes back as qforge's INT8 graph with its own scales
 * (meta->scale_source "model"). */
qf_status cli_load_model(const char *path, int batch, qf_graph **out, qf_qfm_meta *meta);
/* --device: parses it into eo, or, when NULL, picks the default (cuda in a
 * CUDA build, else cpu); *given tells which. */
qf_status cli_device_opts(const char *device, qf_engine_opts *eo, bool *given);
/* Builds the engine. When the user named no device and the GPU is unusable or
 * lacks a kernel for an op, falls back to the CPU and says so (qforge-eval(1), qf_engine_create_or_cpu);
 * eo->device then tells where the engine runs. */
qf_status cli_engine_create(const qf_graph *g, qf_engine_opts *eo, bool device_given, qf_engine **out);
/* For `st`, a failure to load or build `path` at `batch`: when it is the batch
 * that does not fit (QF_ERR_NOMEM), adds to the message the largest batch that
 * would (qf_engine_max_batch on the model at batch 1, on eo's device, or on
 * the CPU where no GPU answers). */
qf_status cli_batch_hint(qf_status st, const char *path, int batch, const qf_engine_opts *eo);
/* The most --batch accepts (as bench): a larger one that does not fit is told what would. */
#define CLI_MAX_BATCH 65536
/* "cpu", "cuda" or "cuda:N" for eo (buf holds the cuda:N text). */
const char *cli_device_name(const qf_engine_opts *eo, char *buf, size_t size);
/* MODEL's file name with its extension replaced by `ext` (".calib", ".qfm"),
 * in the current folder: where calib and quant write by default. */
void cli_default_output(const char *model, const char *ext, char *out, size_t size);
/* --equalize: cross-layer equalization of the prepared FP32 graph g
 * (qf_graph_equalize), with one line on stderr saying what moved unless
 * `quiet` (or --quiet). */
qf_status cli_equalize(qf_graph *g, bool quiet);
/* --zero-points MODE of calib and quant (all, two-sided, unpadded or none; NULL:
 * the library's default): qo's asymmetric flags, and the grid co's auto
 * judges thresholds on, quant's for that mode (either may be NULL); false for
 * another word. */
bool cli_zero_points(const char *mode, qf_quant_opts *qo, qf_calibrate_opts *co);
#define CLI_ZERO_POINTS_MODES "all, two-sided, unpadded or none"
/* Fills model-given fields of pp (channels, height, width, layout) from the
 * graph's first input, which must be (N,C,H,W) float. */
qf_status cli_preprocess_for_model(const qf_graph *g, qf_preprocess *pp);

/* Options every image-reading command shares. */
typedef struct image_opts {
    const char *images;         /* --images DIR */
    int64_t count;              /* -n COUNT */
    const char *classes, *synsets, *labels;
    bool want_folder_labels;    /* use class sub-folders when no other label source */
    int threads;                /* --threads: decode threads (0 = auto) */
    bool strict;
    qf_preprocess pp;
    bool pp_given;              /* any PREPROCESS option on the command line */
} image_opts;
void image_opts_init(image_opts *o);
/* Tries argv[*i] as a shared option; returns 1 if consumed (advancing *i), 0 if
 * not ours, -1 after printing a usage error. */
int image_opts_parse(image_opts *o, const char *cmd, int argc, char **argv, int *i);
/* Adopts the preprocessing a .qfm was calibrated with, unless the command line
 * gave any PREPROCESS option (the user's word wins). */
qf_status image_opts_use_stored(image_opts *o, const qf_qfm_meta *meta);
/* Opens the dataset with labels per the options; labels are optional unless
 * `need_labels`. */
qf_status image_opts_dataset(const image_opts *o, qf_dataset **out);
/* Decode threads: --threads, else 2 beside a CPU engine (which wants the
 * cores) and every core beside a device engine (decoding is then the work
 * the host does, and the GPU waits on it). */
int image_opts_decode_threads(const image_opts *o, qf_device_kind engine);

/* ---- scoring a model on images, shared by eval and quant (evaluate.c) ----------------- */
/* A model opened for evaluation: its graph, engine, and scores per image. */
typedef struct eval_model {
    qf_graph *g;
    qf_engine *e;
    int classes;
} eval_model;
/* Loads a model at `batch` for evaluation at `precision` (NULL: as stored): an
 * ONNX model is FP32 or, with fp16, rewritten to FP16 here (INT8 needs
 * calibration); a .qfm runs at the precisions stored in it. Output 0 must be
 * float scores (N, classes). eval_model_close() is safe after a failure. */
qf_status eval_model_open(eval_model *m, const char *path, int batch, const char *precision, qf_engine_opts *eo,
                          bool device_given, qf_qfm_meta *meta);
/* Its first half: the graph alone, loaded and rewritten as above (no engine). */
qf_status eval_model_load(const char *path, int batch, const char *precision, const qf_engine_opts *eo,
                          qf_qfm_meta *meta, qf_graph **out);
/* The same for a prepared graph in memory, which m then owns. */
qf_status eval_model_adopt(eval_model *m, qf_graph *g, qf_engine_opts *eo, bool device_given);
void eval_model_close(eval_model *m);

/* What the model scored reads against: a reference model run on the same
 * inputs, or that model's outputs kept from an earlier pass over the same
 * images (`saved`, images x classes floats, when not NULL: filled by the first
 * pass, which sets have_saved, and read by later passes instead of running it). */
typedef struct eval_ref {
    eval_model *model;
    float *saved;
    bool have_saved;
    /* when not NULL, the per-layer comparison whose observers both engines
     * carry; eval_run tells it how many images of each batch are real */
    qf_layer_cmp *layers;
} eval_ref;

/* Tallies of one pass. A detector's outputs (boxes, scores) differ in range
 * by orders of magnitude: one SQNR over all of them would be the largest's. */
#define EVAL_MAX_OUTPUTS 8
typedef struct eval_scores {
    int64_t images, skipped;
    int64_t top1, top5;         /* the model's, against labels */
    int64_t ref_top1, ref_top5; /* the reference's */
    int64_t agree;              /* images whose top-1 class is the reference's */
    double sig, noise;          /* sum of ref^2 and of (out - ref)^2 over every score of output 0 */
    /* the same per output (k = 0 is sig, noise) for the first n_outputs
     * outputs: every output both models have alike (float32, the same size),
     * up to EVAL_MAX_OUTPUTS, where the reference model runs beside; output 0
     * alone where its outputs are kept (eval_ref.saved) */
    int n_outputs;
    double out_sig[EVAL_MAX_OUTPUTS], out_noise[EVAL_MAX_OUTPUTS];
    bool labeled, referenced;
    double seconds;
} eval_scores;
/* Runs the images of ds, preprocessed by pp, through m (at its batch) and ref
 * (may be NULL), with a progress bar labelled `label`. */
qf_status eval_run(eval_model *m, eval_ref *ref, const qf_dataset *ds, const qf_preprocess *pp, int decode_threads,
                   bool strict, const char *label, eval_scores *s);
/* Output SQNR against the reference in dB (300 for identical outputs): of
 * output 0, resp. of output k < s->n_outputs. */
double eval_sqnr(const eval_scores *s);
double eval_output_sqnr(const eval_scores *s, int k);
/* Fraction of images whose top-1 class is the reference's. */
double eval_agreement(const eval_scores *s);

/* ---- timing an engine, shared by bench and quant (speed.c) ------------------------------ */
typedef struct speed_result {
    int batch;
    int iterations;
    double ips, p50, p90, p99, mean, e2e_p50; /* images/s; latencies in ms */
    double build_s;                           /* the caller's: loading and building */
} speed_result;
/* Times e (built for g on `device`): end-to-end runs, a warm-up, then
 * `iterations` runs back to back, or as many as fill `duration` seconds
 * (at least min_iterations, at most 20000). */
qf_status speed_measure(qf_engine *e, const qf_graph *g, qf_device_kind device, int iterations, double duration,
                        int min_iterations, speed_result *r);

/* ---- output helpers (qforge.c) ------------------------------------------------- */
/* Writes s as a JSON string literal (quoted, escaped). */
void json_string(FILE *f, const char *s);
/* Index of the largest of n scores (first on ties). */
int argmax_index(const float *x, int n);

/* With auto in the table: one line on stderr saying how many tensors took each
 * candidate threshold (cmd_calib.c; calib and quant --images print it). */
void cli_auto_summary(const qf_calib_table *t, const qf_calibrate_info *info);

int cmd_info(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_calib(int argc, char **argv);
int cmd_quant(int argc, char **argv);
int cmd_bench(int argc, char **argv);

#endif
