/* The dlopen side of cudnn_dl.h: finds libcudnn and fills the table. */
#define QFI_DNN_NO_REDIRECT
#include "cudnn_dl.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if QF_HAVE_CUDNN_H
struct qfi_dnn_table qfi_dnn;
#endif

static pthread_once_t once = PTHREAD_ONCE_INIT;
static bool loaded;
static size_t version;
static char why[320];

/* the reason, logged (debug) and kept for qfi_cudnn_why */
#define NO_CUDNN(...)                                                                                            \
    do {                                                                                                         \
        snprintf(why, sizeof why, __VA_ARGS__);                                                                  \
        qf_log(QF_LOG_DEBUG, "no cuDNN tactics: %s", why);                                                       \
    } while (0)

static void load(void)
{
#if QF_HAVE_CUDNN_H
    const char *env = getenv("QFORGE_CUDNN");
    if (env && strcmp(env, "0") == 0) {
        NO_CUDNN("off (QFORGE_CUDNN=0)");
        return;
    }
    const char *name = env && *env ? env : "libcudnn.so.9";
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        NO_CUDNN("cannot load %s: %s", name, dlerror());
        return;
    }
#define QFI_DNN_SYM(fn)                                                                                          \
    if (!(qfi_dnn.fn = (decltype(qfi_dnn.fn))dlsym(h, "cudnn" #fn))) {                                          \
        NO_CUDNN("%s has no cudnn%s", name, #fn);                                                                \
        return;                                                                                                  \
    }
    QFI_DNN_FUNCTIONS(QFI_DNN_SYM)
#undef QFI_DNN_SYM
    /* the backend attributes used here are cuDNN 9's */
    const size_t v = qfi_dnn.GetVersion();
    if (v < 90000 || v >= 100000) {
        NO_CUDNN("%s is version %zu, not 9.x", name, v);
        return;
    }
    version = v;
    loaded = true;
#else
    NO_CUDNN("built without cudnn_graph.h");
#endif
}

bool qfi_cudnn_load(void)
{
    pthread_once(&once, load);
    return loaded;
}

size_t qfi_cudnn_version(void)
{
    return loaded ? version : 0;
}

const char *qfi_cudnn_why(void)
{
    return why;
}
