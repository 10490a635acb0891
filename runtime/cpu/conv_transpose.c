/* PENDING: placeholder until the kernel is implemented (replace this whole file). */
#include "kernels.h"

qf_status qfi_cpu_conv_transpose(const qfi_kernel_args *a) { return qf_error(QF_ERR_UNSUPPORTED, "%s: no CPU kernel yet", a->n->name); }
size_t qfi_cpu_conv_transpose_scratch(const qf_graph *g, const qf_node *n) { return 0; }
