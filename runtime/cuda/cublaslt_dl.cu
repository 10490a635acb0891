/* The dlopen side of cublaslt_dl.h: finds libcublasLt and fills the table. */
#define QFI_LT_NO_REDIRECT
#include "cublaslt_dl.h"
#include <dlfcn.h>
#include <pthread.h>

struct qfi_lt_table qfi_lt;

#define QFI_STR2(x) #x
#define QFI_STR(x) QFI_STR2(x)
static const char lt_soname[] = "libcublasLt.so." QFI_STR(CUBLAS_VER_MAJOR);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static qf_status load_status;
static char load_error[512];

static void load(void)
{
    void *h = dlopen(lt_soname, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        load_status = QF_ERR_DEVICE;
        snprintf(load_error, sizeof load_error, "cannot load %s: %s", lt_soname, dlerror());
        return;
    }
#define QFI_LT_SYM(name)                                                                            \
    if (!(qfi_lt.name = (decltype(qfi_lt.name))dlsym(h, "cublasLt" #name))) {                      \
        load_status = QF_ERR_DEVICE;                                                                \
        snprintf(load_error, sizeof load_error, "%s has no cublasLt%s", lt_soname, #name);          \
        return;                                                                                     \
    }
    QFI_LT_FUNCTIONS(QFI_LT_SYM)
#undef QFI_LT_SYM
    load_status = QF_OK;
}

qf_status qfi_cublaslt_load(void)
{
    pthread_once(&once, load);
    if (load_status != QF_OK) return qf_error(load_status, "%s", load_error);
    return QF_OK;
}
