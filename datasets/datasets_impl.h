/* Declarations shared by the files of datasets/ (decoders, resize, scan),
 * not installed. Symbols are qfi_ and stay inside libqforge. */
#ifndef QFORGE_DATASETS_IMPL_H
#define QFORGE_DATASETS_IMPL_H

#include "internal.h"
#include "qforge/datasets.h"

/* Files larger than this are refused before they are read. */
#define QFI_IMAGE_MAX_FILE_BYTES (1024LL * 1024 * 1024)

/* Fails unless w, h > 0 and w*h <= QF_IMAGE_MAX_PIXELS; names `name`. */
qf_status qfi_image_check_size(int w, int h, const char *name);
/* Allocates img->px for a w x h x c image after checking w, h > 0 and the
 * QF_IMAGE_MAX_PIXELS bound; the message names `name`. */
qf_status qfi_image_alloc(qf_image *img, int w, int h, int c, const char *name);

/* n RGB pixels to luma as PIL's convert("L"); rgb == gray is allowed. */
void qfi_rgb_to_luma(const uint8_t *rgb, uint8_t *gray, size_t n);

/* Decoders: buf/size is the whole file, already sniffed as the format. */
qf_status qfi_decode_png(const uint8_t *buf, size_t size, const char *name, qf_image *out);
qf_status qfi_decode_jpeg(const uint8_t *buf, size_t size, const char *name, qf_image *out);
qf_status qfi_decode_pnm(const uint8_t *buf, size_t size, const char *name, qf_image *out);

/* The one image resize of qforge (see resize.c for the filter convention).
 * Resizes src (sh,sw,c) uint8 to a virtual (dh,dw,c) image and writes only the
 * window of it whose top-left corner is (x0,y0) and size ww x wh into dst
 * (wh,ww,c) floats in [0,255]; window pixels outside the resized image are 0
 * (torchvision pads a crop larger than the image with zeros). */
qf_status qfi_resize_window(const uint8_t *src, int sw, int sh, int c, int dw, int dh,
                            int x0, int y0, int ww, int wh, float *dst);

/* A dataset: files in order, with optional labels (datasets/scan.c builds
 * it, labels.c labels it, loader.c reads it). */
struct qf_dataset {
    char *root;          // the folder as given, trailing '/' removed; NULL for a file list
    size_t rel_off;      // full[i] + rel_off is the path relative to root
    int64_t n, cap;
    char **full;         // paths usable with fopen, sorted by strcmp when scanned
    int *labels;         // NULL without labels
    qf_classes *classes; // class names of the label source, or NULL
    char **folders;      // the root's sub-folders, sorted (the class folders)
    int n_folders;
};

/* Reads a whole text file (bounded size), NUL-terminated. */
qf_status qfi_read_text_file(const char *path, size_t max_bytes, char **out, size_t *len);

/* A class list built from given keys and names (copied). */
qf_status qfi_classes_from_names(char *const *names, int n, qf_classes **out);

#endif
