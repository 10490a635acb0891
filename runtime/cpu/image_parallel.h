/* Image-parallel runs of the CPU engine (image_parallel.c). */
#ifndef QFORGE_CPU_IMAGE_PARALLEL_H
#define QFORGE_CPU_IMAGE_PARALLEL_H

#include "internal.h"

/* Whether every node of prepared graph g keeps the images of its batch (of
 * at least 2) apart along dim 0; when not, *why says which node and why
 * (valid until the next call on this thread). */
bool qfi_cpu_images_independent(const qf_graph *g, const char **why);
/* g viewed at `images` images of its batch, for an image-independent g: its
 * nodes and constants shared, its own values with dim 0 of every activation
 * set to `images`. Release with free(view->values). */
qf_status qfi_cpu_batch_view(const qf_graph *g, int images, qf_graph *view);

#endif
