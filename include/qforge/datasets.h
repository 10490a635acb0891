/* Image folders in, float batches out: scanning, decoding (PNG, JPEG, PNM by
 * content), preprocessing (resize, crop, normalize, channel order, layout),
 * labels (class folders, synset files, label lists), deterministic subsets,
 * and a decode pool that prepares batches ahead of the engine. */
#ifndef QFORGE_DATASETS_H
#define QFORGE_DATASETS_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "qforge/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- decoded images ------------------------------------------------------------ */

/* Decoders refuse images with more pixels, or a longer side, than these
 * before allocating them. */
#define QF_IMAGE_MAX_PIXELS 100000000LL
#define QF_IMAGE_MAX_SIDE 1000000

/* An 8-bit image, rows top to bottom, channels interleaved: px is (h,w,c).
 * Decoders produce c = 1 (grayscale, grayscale+alpha) or c = 3 (RGB, RGBA,
 * palette, CMYK); alpha is dropped, 16-bit samples are rounded to 8 bits. */
typedef struct qf_image {
    int w, h, c;
    uint8_t *px;
} qf_image;

/* Reads and decodes an image file; the format is found from its first bytes
 * (PNG, JPEG, or PNM P2/P3/P5/P6), never from its name. */
qf_status qf_image_read(const char *path, qf_image *out);
/* Decodes an image held in memory; `name` is only used in messages. */
qf_status qf_image_decode(const void *buf, size_t size, const char *name, qf_image *out);
/* Converts to 1 channel (ITU-R 601 luma, as PIL's "L") or 3 channels
 * (gray replicated), in place. */
qf_status qf_image_convert(qf_image *img, int channels);
void qf_image_free(qf_image *img);

/* True if the file name ends in .png .jpg .jpeg .ppm .pgm .pnm (any case):
 * the files a folder scan picks up. */
bool qf_image_has_image_extension(const char *name);

/* ---- preprocessing --------------------------------------------------------------- */

typedef enum qf_layout { QF_LAYOUT_NCHW = 0, QF_LAYOUT_NHWC, QF_LAYOUT_COUNT } qf_layout;

/* What turns a decoded image into the model's input. Order of the steps:
 * channels (gray) -> resize (shorter side) or size (WxH) -> center crop ->
 * x/255 -> (x - mean) / std per output channel -> layout.
 * The fields set by options are the CLI's PREPROCESS flags; channels, width,
 * height and layout are the model's input, set by the caller. */
typedef struct qf_preprocess {
    int resize;            /* --resize N: shorter side to N, bilinear (0: no) */
    int size_w, size_h;    /* --size WxH: plain resize to W x H (0: no) */
    int crop_w, crop_h;    /* --crop N: center crop (0: no) */
    float mean[3];         /* per output channel (so in B,G,R order with --bgr) */
    float std[3];
    bool bgr;              /* --bgr: channel order B,G,R */
    bool gray;             /* --gray: luma, replicated if the model takes 3 channels */
    int channels;          /* model: 1 or 3 (default 3) */
    int width, height;     /* model: input W, H (0: whatever resize/size/crop give) */
    qf_layout layout;      /* model: NCHW (default) or NHWC */
} qf_preprocess;

/* Preset "none": no geometry, mean 0, std 1, 3 channels, NCHW. */
void qf_preprocess_init(qf_preprocess *pp);
/* Sets the geometry and normalization of "imagenet", "cifar10" or "none"
 * (leaves channels, width, height and layout alone). */
qf_status qf_preprocess_preset(qf_preprocess *pp, const char *name);

/* Applies one command-line option. `arg` is argv[i] ("--resize" or
 * "--resize=256"), `next` argv[i+1] or NULL. *used is set to how many argv
 * entries the option took (1 or 2), or 0 if `arg` is not a preprocessing
 * option (then nothing changes and QF_OK is returned). A bad value returns
 * QF_ERR_USAGE with a message naming the option. Options apply in order, so a
 * --preset given first can be overridden by later options. */
qf_status qf_preprocess_option(qf_preprocess *pp, const char *arg, const char *next, int *used);
/* Parses the text of qf_preprocess_format (or any run of options separated
 * by spaces) on top of *pp. */
qf_status qf_preprocess_parse(qf_preprocess *pp, const char *text);
/* Writes the option fields as command-line options ("--resize 256 --crop 224
 * --mean ... --std ..."), exact enough to round-trip; returns the length
 * snprintf would have written. */
int qf_preprocess_format(const qf_preprocess *pp, char *buf, size_t size);

/* Checks the fields and gives the shape of one preprocessed image; fails if
 * the options contradict each other or the model's size, or if nothing fixes
 * the size (no crop, no --size, no model width/height). */
qf_status qf_preprocess_shape(const qf_preprocess *pp, int *c, int *h, int *w);
/* Sets channels, width, height and layout from a model input of shape
 * (N,C,H,W) or (N,H,W,C) (NCHW when C and W are both 1 or 3) and checks the
 * options against it, as qf_preprocess_shape. */
qf_status qf_preprocess_fit(qf_preprocess *pp, int ndim, const int64_t *dims);
/* Preprocesses one decoded image into dst (c*h*w floats in pp->layout).
 * `name` is used in messages (an image whose size does not come out as the
 * model's is an error naming it). */
qf_status qf_preprocess_image(const qf_preprocess *pp, const qf_image *img, const char *name,
                              float *dst);

/* ---- class names ------------------------------------------------------------------ */

/* An ordered list of classes: a key used for lookups (a synset's wnid, a
 * folder name, a --classes line) and a name for printing. */
typedef struct qf_classes qf_classes;

/* `wnid name...` per line (ImageNet synsets.txt): key = wnid, name = the rest. */
qf_status qf_classes_read_synsets(const char *path, qf_classes **out);
/* One class per line (--classes FILE): key = name = the line. */
qf_status qf_classes_read_lines(const char *path, qf_classes **out);
int qf_classes_count(const qf_classes *c);
const char *qf_classes_key(const qf_classes *c, int k);
const char *qf_classes_name(const qf_classes *c, int k);
/* Index of the class with this key, or -1. */
int qf_classes_find(const qf_classes *c, const char *key);
void qf_classes_free(qf_classes *c);

/* ---- datasets ---------------------------------------------------------------------- */

/* The image files of a folder (recursively, sorted by strcmp on the path
 * relative to the folder) or of a list, with optional labels. */
typedef struct qf_dataset qf_dataset;

/* Scans `dir` for files with an image extension (see
 * qf_image_has_image_extension); names starting with '.' are skipped. Fails,
 * naming the folder, if it cannot be read or holds no image. */
qf_status qf_dataset_open(const char *dir, qf_dataset **out);
/* A dataset of the given files, in the given order (qforge run IMAGE...). */
qf_status qf_dataset_from_files(const char *const *paths, int n, qf_dataset **out);
void qf_dataset_free(qf_dataset *ds);

int64_t qf_dataset_count(const qf_dataset *ds);
/* Path relative to the folder (or as given to qf_dataset_from_files). */
const char *qf_dataset_path(const qf_dataset *ds, int64_t i);
/* Path usable with fopen. */
const char *qf_dataset_full_path(const qf_dataset *ds, int64_t i);

/* -n COUNT: keeps the files at indices i*total/COUNT, i = 0..COUNT-1
 * (evenly spaced, deterministic); COUNT <= 0 or >= total keeps all. */
void qf_dataset_subset(qf_dataset *ds, int64_t count);
/* The files qf_dataset_subset(ds, count) would drop, in order (none for
 * COUNT >= total, all for COUNT <= 0): what is left of a folder once its
 * -n COUNT part is taken, such as the images calibration never saw. */
void qf_dataset_subset_rest(qf_dataset *ds, int64_t count);

/* Labels. Each fails naming the first file whose label cannot be found.
 * Class folders: the label is the index of the file's first path component
 * among the folder's sorted sub-folders, or its line in `classes_file` when
 * that is not NULL. */
qf_status qf_dataset_label_folders(qf_dataset *ds, const char *classes_file);
/* ImageNet style: the label is the line in `synsets_file` of the wnid that
 * starts the file's name (the text before the first '_'). */
qf_status qf_dataset_label_synsets(qf_dataset *ds, const char *synsets_file);
/* Lines `relative/path index`; files of the list that are not in the dataset
 * are ignored. */
qf_status qf_dataset_label_list(qf_dataset *ds, const char *labels_file);
bool qf_dataset_has_labels(const qf_dataset *ds);
/* The label of file i, or -1 without labels. */
int qf_dataset_label(const qf_dataset *ds, int64_t i);
/* Names of the classes when the label source has them (folders, --classes,
 * synsets), else NULL. Owned by the dataset. */
const qf_classes *qf_dataset_classes(const qf_dataset *ds);

/* ---- the decode pool ------------------------------------------------------------------ */

/* Worker threads decode and preprocess images ahead of the consumer through a
 * bounded ring of batch + 2*threads images, so memory does not grow with the
 * folder; batches come out in dataset order whatever the thread count. */
typedef struct qf_loader qf_loader;

typedef struct qf_loader_options {
    int batch;       /* images per batch (>= 1) */
    int threads;     /* decode threads; 0 decodes on the caller's thread */
    bool strict;     /* a file that cannot be decoded is an error, not a warning */
} qf_loader_options;

/* Decode threads that keep an engine fed: 2 beside an engine computing on the
 * CPU cores (it wants them), every core beside one on a device (decoding is
 * then the host's work, and the device waits on it). */
int qf_loader_default_threads(bool engine_on_cpu);

/* Runs fn(user, i) for every i in [0, n) on up to `threads` threads (0: one
 * per core), the caller's among them, and returns when all are done; each
 * thread takes a contiguous range of i. For callers that fill an engine's
 * input from many sources at once (the Triton backend packing a batch). */
void qf_parallel_for(int threads, int64_t n, void (*fn)(void *user, int64_t i), void *user);

/* The dataset and preprocessing must outlive the loader (pp is copied). */
qf_status qf_loader_create(const qf_dataset *ds, const qf_preprocess *pp,
                           const qf_loader_options *opt, qf_loader **out);
/* Fills dst with up to `batch` images (batch*c*h*w floats) and labels (may be
 * NULL; -1 where the dataset has none) and sets *count; *count == 0 at the
 * end. A file that cannot be decoded is skipped with a qf_log warning naming
 * it (an error with opt.strict). Fails if no image of the dataset could be
 * decoded. */
qf_status qf_loader_next(qf_loader *l, float *dst, int *labels, int *count);
/* Dataset indices of the images of the last batch (*count of them). */
const int64_t *qf_loader_indices(const qf_loader *l);
/* Files skipped so far. */
int64_t qf_loader_skipped(const qf_loader *l);
/* Shape of one image: c, h, w as in qf_preprocess_shape. */
void qf_loader_shape(const qf_loader *l, int *c, int *h, int *w);
void qf_loader_free(qf_loader *l);

#ifdef __cplusplus
}
#endif
#endif
