/* cuBLASLt is loaded with dlopen when the first CUDA engine is built, not
 * linked: the library alone adds about 210 MiB of resident memory and 0.1 s to
 * every process that maps it, CPU-only runs included. After this header, the
 * cublasLt* calls of runtime/cuda go through the table below. */
#ifndef QFORGE_CUBLASLT_DL_H
#define QFORGE_CUBLASLT_DL_H

#include <cublasLt.h>
#include "qforge/status.h"

#define QFI_LT_FUNCTIONS(X)                                                    \
    X(Create) X(Destroy) X(Matmul) X(MatmulAlgoGetHeuristic)                   \
    X(MatmulDescCreate) X(MatmulDescDestroy) X(MatmulDescSetAttribute)         \
    X(MatmulPreferenceCreate) X(MatmulPreferenceDestroy)                       \
    X(MatmulPreferenceSetAttribute) X(MatrixLayoutCreate) X(MatrixLayoutDestroy) \
    X(MatrixLayoutSetAttribute) \
    X(GetVersion)

struct qfi_lt_table {
#define QFI_LT_FIELD(name) decltype(&cublasLt##name) name;
    QFI_LT_FUNCTIONS(QFI_LT_FIELD)
#undef QFI_LT_FIELD
};
extern struct qfi_lt_table qfi_lt;

/* Loads libcublasLt.so.<CUDA major> once; an error names the library. */
qf_status qfi_cublaslt_load(void);

#ifndef QFI_LT_NO_REDIRECT
#define cublasLtCreate (qfi_lt.Create)
#define cublasLtDestroy (qfi_lt.Destroy)
#define cublasLtMatmul (qfi_lt.Matmul)
#define cublasLtMatmulAlgoGetHeuristic (qfi_lt.MatmulAlgoGetHeuristic)
#define cublasLtMatmulDescCreate (qfi_lt.MatmulDescCreate)
#define cublasLtMatmulDescDestroy (qfi_lt.MatmulDescDestroy)
#define cublasLtMatmulDescSetAttribute (qfi_lt.MatmulDescSetAttribute)
#define cublasLtMatmulPreferenceCreate (qfi_lt.MatmulPreferenceCreate)
#define cublasLtMatmulPreferenceDestroy (qfi_lt.MatmulPreferenceDestroy)
#define cublasLtMatmulPreferenceSetAttribute (qfi_lt.MatmulPreferenceSetAttribute)
#define cublasLtMatrixLayoutCreate (qfi_lt.MatrixLayoutCreate)
#define cublasLtMatrixLayoutDestroy (qfi_lt.MatrixLayoutDestroy)
#define cublasLtMatrixLayoutSetAttribute (qfi_lt.MatrixLayoutSetAttribute)
#define cublasLtGetVersion (qfi_lt.GetVersion)
#endif

#endif
