/* cuDNN is optional: loaded with dlopen when the first CUDA engine wants a
 * cuDNN tactic, never linked. Where libcudnn.so.9 is missing (or too old, or
 * QFORGE_CUDNN=0), qfi_cudnn_load() says so once and the engine keeps its own
 * kernels and cuBLASLt. After this header, the cudnn* calls of runtime/cuda go
 * through the table below. QFORGE_CUDNN=PATH loads that file instead of the
 * soname (PyTorch's nvidia-cudnn wheel, say). */
#ifndef QFORGE_CUDNN_DL_H
#define QFORGE_CUDNN_DL_H

#include "config.h" /* QF_HAVE_CUDNN_H */
#include "qforge/status.h"
#include <stdbool.h>
#include <stddef.h>

#if QF_HAVE_CUDNN_H && defined(__cplusplus) /* the table is for runtime/cuda (C++) */
#include <cudnn_graph.h>

#define QFI_DNN_FUNCTIONS(X)                                                                                     \
    X(GetVersion) X(GetErrorString) X(Create) X(Destroy) X(SetStream) X(BackendCreateDescriptor)                \
    X(BackendDestroyDescriptor) X(BackendSetAttribute) X(BackendGetAttribute) X(BackendFinalize) X(BackendExecute)

struct qfi_dnn_table {
#define QFI_DNN_FIELD(name) decltype(&cudnn##name) name;
    QFI_DNN_FUNCTIONS(QFI_DNN_FIELD)
#undef QFI_DNN_FIELD
};
extern struct qfi_dnn_table qfi_dnn;

#ifndef QFI_DNN_NO_REDIRECT
#define cudnnGetVersion (qfi_dnn.GetVersion)
#define cudnnGetErrorString (qfi_dnn.GetErrorString)
#define cudnnCreate (qfi_dnn.Create)
#define cudnnDestroy (qfi_dnn.Destroy)
#define cudnnSetStream (qfi_dnn.SetStream)
#define cudnnBackendCreateDescriptor (qfi_dnn.BackendCreateDescriptor)
#define cudnnBackendDestroyDescriptor (qfi_dnn.BackendDestroyDescriptor)
#define cudnnBackendSetAttribute (qfi_dnn.BackendSetAttribute)
#define cudnnBackendGetAttribute (qfi_dnn.BackendGetAttribute)
#define cudnnBackendFinalize (qfi_dnn.BackendFinalize)
#define cudnnBackendExecute (qfi_dnn.BackendExecute)
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif
/* Loads cuDNN once: true when its table is filled. The first failure is
 * logged (debug) with the reason; later calls are free. (C linkage: the
 * loader's test, tests/test_cudnn_dl.c, runs without a GPU.) */
bool qfi_cudnn_load(void);
/* The loaded library's version (cudnnGetVersion: 91400 for 9.14.0), 0 if none. */
size_t qfi_cudnn_version(void);
/* Why qfi_cudnn_load() failed ("" when it did not, or was not called). */
const char *qfi_cudnn_why(void);
#ifdef __cplusplus
}
#endif

#endif
