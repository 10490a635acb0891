/* A minimal parallel-for over pthreads for CPU kernels. One process-wide pool
 * of worker threads, started on first use and kept: starting and joining a
 * thread per call cost about 67 us on the development machine, which on
 * ResNet-20 (tens of calls a batch) was a large share of an INT8 batch. The
 * pool runs one call at a time; a call that finds it busy (another engine
 * on another thread, or a parallel-for inside a chunk) starts its own
 * threads as before. Each call splits its range into one static chunk per
 * thread, so results never depend on which thread ran what, and each chunk
 * runs in the caller's floating-point environment (the CPU engine flushes
 * subnormals: cpu_engine.c). */
#include "internal.h"
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define HAVE_MXCSR 1
#endif

#define MAX_THREADS 256

int qfi_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)(n > MAX_THREADS ? MAX_THREADS : n) : 1;
}

/* ---- the floating-point environment: x86's MXCSR (rounding, exception
 * masks, flush-to-zero and denormals-are-zero); nothing elsewhere ---------------------- */

unsigned qfi_fp_env_get(void)
{
#ifdef HAVE_MXCSR
    return _mm_getcsr();
#else
    return 0;
#endif
}

void qfi_fp_env_set(unsigned env)
{
#ifdef HAVE_MXCSR
    _mm_setcsr(env);
#else
    (void)env;
#endif
}

unsigned qfi_fp_env_flushing(unsigned env)
{
#ifdef HAVE_MXCSR
    return env | 0x8000u /* FTZ: subnormal results become 0 */ | 0x0040u /* DAZ: subnormal inputs read as 0 */;
#else
    return env;
#endif
}

typedef struct {
    void (*fn)(void *arg, int64_t i);
    void *arg;
    int64_t begin, end;
    unsigned env; /* the caller's floating-point environment */
} chunk;

static void run_chunk(const chunk *c)
{
    if (qfi_fp_env_get() != c->env) qfi_fp_env_set(c->env);
    for (int64_t i = c->begin; i < c->end; i++) c->fn(c->arg, i);
}

/* ---- per-call threads: the fallback when the pool is taken --------------------------- */

static void *chunk_thread(void *p)
{
    run_chunk(p);
    return NULL;
}

static void run_with_own_threads(chunk *ch, int threads)
{
    pthread_t tid[MAX_THREADS];
    bool running[MAX_THREADS] = {false};
    /* if a thread cannot start, its chunk runs here */
    for (int t = 1; t < threads; t++)
        if (!(running[t] = pthread_create(&tid[t], NULL, chunk_thread, &ch[t]) == 0)) run_chunk(&ch[t]);
    run_chunk(&ch[0]);
    for (int t = 1; t < threads; t++)
        if (running[t]) pthread_join(tid[t], NULL);
}

/* ---- the pool ------------------------------------------------------------------------ */

/* A call publishes its chunks, then one word: the call's number (upper
 * bits) and how many workers take part (lower 16), so a worker never pairs
 * one call's number with another's count. Workers, and the caller waiting
 * for them, spin a while before sleeping: back-to-back calls (a small
 * model's layers) then start without a futex wake-up each (ResNet-20's
 * INT8 batch spent 17 % of its time in the kernel's scheduler). */
#define SPINS 2000 /* pause instructions: tens of microseconds */
#define ACTIVE_BITS 16

static struct {
    atomic_flag taken;      /* held by the one call the pool serves */
    pthread_mutex_t mu;
    pthread_cond_t wake;    /* workers: a new call */
    pthread_cond_t done;    /* the caller: pending reached 0 */
    _Atomic uint64_t call;  /* (number << ACTIVE_BITS) | workers taking part */
    atomic_int pending;     /* workers of the current call still running */
    int workers;            /* started so far; worker w runs chunk w (1-based); under mu */
    uint64_t born[MAX_THREADS]; /* per worker: the call word when it was started (it waits for the next) */
    chunk ch[MAX_THREADS];
} pool = {ATOMIC_FLAG_INIT, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *worker(void *p)
{
    const int w = (int)(intptr_t)p;
    uint64_t seen = pool.born[w], c;
    for (;;) {
        for (int i = 0; (c = atomic_load_explicit(&pool.call, memory_order_acquire)) == seen && i < SPINS; i++)
            cpu_relax();
        if (c == seen) {
            pthread_mutex_lock(&pool.mu);
            while ((c = atomic_load_explicit(&pool.call, memory_order_acquire)) == seen)
                pthread_cond_wait(&pool.wake, &pool.mu);
            pthread_mutex_unlock(&pool.mu);
        }
        seen = c;
        if (w > (int)(c & ((1u << ACTIVE_BITS) - 1))) continue; /* a call with fewer threads */
        run_chunk(&pool.ch[w]);
        if (atomic_fetch_sub_explicit(&pool.pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&pool.mu);
            pthread_cond_signal(&pool.done);
            pthread_mutex_unlock(&pool.mu);
        }
    }
    return NULL;
}

/* Starts workers up to `want`; returns how many there are (fewer where
 * pthread_create failed). Under pool.mu. */
static int grow_pool(int want)
{
    while (pool.workers < want) {
        pthread_t t;
        pthread_attr_t at;
        if (pthread_attr_init(&at) != 0) break;
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        pool.born[pool.workers + 1] = atomic_load_explicit(&pool.call, memory_order_relaxed);
        const int ok = pthread_create(&t, &at, worker, (void *)(intptr_t)(pool.workers + 1)) == 0;
        pthread_attr_destroy(&at);
        if (!ok) break;
        pool.workers++;
    }
    return pool.workers;
}

static void run_on_pool(const chunk *ch, int threads)
{
    pthread_mutex_lock(&pool.mu);
    const int helpers = grow_pool(threads - 1) < threads - 1 ? pool.workers : threads - 1;
    for (int t = 1; t <= helpers; t++) pool.ch[t] = ch[t];
    atomic_store_explicit(&pool.pending, helpers, memory_order_relaxed);
    const uint64_t number = (atomic_load_explicit(&pool.call, memory_order_relaxed) >> ACTIVE_BITS) + 1;
    atomic_store_explicit(&pool.call, number << ACTIVE_BITS | (uint64_t)helpers, memory_order_release);
    if (helpers > 0) pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.mu);
    run_chunk(&ch[0]);
    for (int t = helpers + 1; t < threads; t++) run_chunk(&ch[t]); /* workers that could not start */
    for (int i = 0; atomic_load_explicit(&pool.pending, memory_order_acquire) > 0 && i < SPINS; i++) cpu_relax();
    if (atomic_load_explicit(&pool.pending, memory_order_acquire) > 0) {
        pthread_mutex_lock(&pool.mu);
        while (atomic_load_explicit(&pool.pending, memory_order_acquire) > 0) pthread_cond_wait(&pool.done, &pool.mu);
        pthread_mutex_unlock(&pool.mu);
    }
}

void qfi_parallel_for(int threads, int64_t n, void (*fn)(void *arg, int64_t i), void *arg)
{
    if (threads <= 0) threads = qfi_cpu_count();
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (threads > n) threads = (int)n;
    if (threads <= 1) {
        for (int64_t i = 0; i < n; i++) fn(arg, i);
        return;
    }
    chunk ch[MAX_THREADS];
    const unsigned env = qfi_fp_env_get();
    for (int t = 0; t < threads; t++) ch[t] = (chunk){fn, arg, n * t / threads, n * (t + 1) / threads, env};
    if (atomic_flag_test_and_set_explicit(&pool.taken, memory_order_acquire)) {
        run_with_own_threads(ch, threads);
        return;
    }
    run_on_pool(ch, threads);
    atomic_flag_clear_explicit(&pool.taken, memory_order_release);
}

void qf_parallel_for(int threads, int64_t n, void (*fn)(void *user, int64_t i), void *user)
{
    qfi_parallel_for(threads, n, fn, user);
}
