/* A minimal parallel-for over pthreads for CPU kernels. Threads are started
 * per call: the CPU engine is the reference, not the fast path, and this keeps
 * it free of shared state. */
#include "internal.h"
#include <pthread.h>
#include <unistd.h>

int qfi_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)(n > 256 ? 256 : n) : 1;
}

typedef struct {
    void (*fn)(void *arg, int64_t i);
    void *arg;
    int64_t begin, end;
} chunk;

static void *run_chunk(void *p)
{
    chunk *c = p;
    for (int64_t i = c->begin; i < c->end; i++) c->fn(c->arg, i);
    return NULL;
}

void qfi_parallel_for(int threads, int64_t n, void (*fn)(void *arg, int64_t i), void *arg)
{
    if (threads <= 0) threads = qfi_cpu_count();
    if (threads > n) threads = (int)n;
    if (threads <= 1) {
        for (int64_t i = 0; i < n; i++) fn(arg, i);
        return;
    }
    chunk ch[256];
    pthread_t tid[256];
    bool running[256] = {false};
    if (threads > 256) threads = 256;
    for (int t = 0; t < threads; t++) {
        ch[t] = (chunk){fn, arg, n * t / threads, n * (t + 1) / threads};
        /* chunk 0 runs on the calling thread; if a thread cannot start, its
         * chunk runs here too */
        if (t > 0) {
            running[t] = pthread_create(&tid[t], NULL, run_chunk, &ch[t]) == 0;
            if (!running[t]) run_chunk(&ch[t]);
        }
    }
    run_chunk(&ch[0]);
    for (int t = 1; t < threads; t++)
        if (running[t]) pthread_join(tid[t], NULL);
}

void qf_parallel_for(int threads, int64_t n, void (*fn)(void *user, int64_t i), void *user)
{
    qfi_parallel_for(threads, n, fn, user);
}
