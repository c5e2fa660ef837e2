#include "backend/cpu/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* Workers spin this many rounds for the next job before sleeping: a forward issues thousands of
 * small ops, and a condition-variable wake-up per op would cost more than the op. */
#define SPIN_ROUNDS 4000

typedef struct worker {
    struct dsv4_threadpool *tp;
    uint32_t index;
    pthread_t thread;
} worker;

struct dsv4_threadpool {
    uint32_t n_threads;
    worker *workers; /* n_threads - 1 helpers */
    pthread_mutex_t mu;
    pthread_cond_t start_cv, done_cv;
    atomic_uint_fast64_t generation; /* bumped for each job */
    atomic_uint pending;             /* helpers still working on the current job */
    atomic_bool stop;
    uint32_t sleepers;    /* helpers blocked on start_cv (under mu) */
    bool caller_sleeping; /* under mu */
    /* current job (published by the generation bump) */
    dsv4_tp_fn fn;
    void *arg;
    uint64_t n_items;
    uint32_t active;
};

static void range_of(uint64_t n, uint32_t parts, uint32_t i, uint64_t *i0, uint64_t *i1) {
    *i0 = n * i / parts;
    *i1 = n * (i + 1) / parts;
}

static uint64_t wait_job(dsv4_threadpool *tp, uint64_t seen) {
    for (int i = 0; i < SPIN_ROUNDS; i++) {
        uint64_t g = atomic_load_explicit(&tp->generation, memory_order_acquire);
        if (g != seen || atomic_load_explicit(&tp->stop, memory_order_relaxed)) return g;
        CPU_RELAX();
    }
    pthread_mutex_lock(&tp->mu);
    tp->sleepers++;
    uint64_t g;
    while ((g = atomic_load(&tp->generation)) == seen && !atomic_load(&tp->stop))
        pthread_cond_wait(&tp->start_cv, &tp->mu);
    tp->sleepers--;
    pthread_mutex_unlock(&tp->mu);
    return g;
}

static void *worker_main(void *p) {
    worker *w = p;
    dsv4_threadpool *tp = w->tp;
    uint64_t seen = 0;
    for (;;) {
        seen = wait_job(tp, seen);
        if (atomic_load(&tp->stop)) return NULL;
        if (w->index < tp->active) {
            uint64_t i0, i1;
            range_of(tp->n_items, tp->active, w->index, &i0, &i1);
            if (i1 > i0) tp->fn(tp->arg, i0, i1, w->index);
        }
        if (atomic_fetch_sub_explicit(&tp->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&tp->mu);
            if (tp->caller_sleeping) pthread_cond_signal(&tp->done_cv);
            pthread_mutex_unlock(&tp->mu);
        }
    }
}

dsv4_status dsv4_tp_create(uint32_t n_threads, dsv4_threadpool **out, dsv4_error *err) {
    *out = NULL;
    if (n_threads == 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = c > 0 ? (uint32_t)c : 1;
    }
    if (n_threads > 1024) return dsv4_fail(err, DSV4_ERR_INVALID, "thread count %u is too large", n_threads);
    dsv4_threadpool *tp = calloc(1, sizeof(*tp));
    if (!tp) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory creating the thread pool");
    tp->n_threads = 1;
    atomic_init(&tp->generation, 0);
    atomic_init(&tp->pending, 0);
    atomic_init(&tp->stop, false);
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->start_cv, NULL);
    pthread_cond_init(&tp->done_cv, NULL);
    if (n_threads > 1) {
        tp->workers = calloc(n_threads - 1, sizeof(worker));
        if (!tp->workers) {
            dsv4_tp_free(tp);
            return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory creating the thread pool");
        }
        for (uint32_t i = 0; i + 1 < n_threads; i++) {
            tp->workers[i].tp = tp;
            tp->workers[i].index = i + 1;
            if (pthread_create(&tp->workers[i].thread, NULL, worker_main, &tp->workers[i]) != 0) {
                dsv4_tp_free(tp); /* joins the helpers started so far */
                return dsv4_fail(err, DSV4_ERR_NOMEM, "cannot start thread %u of %u", i + 2, n_threads);
            }
            tp->n_threads = i + 2;
        }
    }
    *out = tp;
    return DSV4_OK;
}

void dsv4_tp_free(dsv4_threadpool *tp) {
    if (!tp) return;
    if (tp->workers) {
        pthread_mutex_lock(&tp->mu);
        atomic_store(&tp->stop, true);
        pthread_cond_broadcast(&tp->start_cv);
        pthread_mutex_unlock(&tp->mu);
        for (uint32_t i = 0; i + 1 < tp->n_threads; i++) pthread_join(tp->workers[i].thread, NULL);
        free(tp->workers);
    }
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->start_cv);
    pthread_cond_destroy(&tp->done_cv);
    free(tp);
}

uint32_t dsv4_tp_threads(const dsv4_threadpool *tp) { return tp ? tp->n_threads : 1; }

void dsv4_tp_run(dsv4_threadpool *tp, uint64_t n_items, uint64_t min_per_thread, dsv4_tp_fn fn, void *arg) {
    if (n_items == 0) return;
    uint32_t active = tp ? tp->n_threads : 1;
    if (min_per_thread < 1) min_per_thread = 1;
    if (n_items / min_per_thread < active) active = (uint32_t)(n_items / min_per_thread);
    if (active < 1) active = 1;
    if (active == 1) {
        fn(arg, 0, n_items, 0);
        return;
    }
    tp->fn = fn;
    tp->arg = arg;
    tp->n_items = n_items;
    tp->active = active;
    atomic_store(&tp->pending, tp->n_threads - 1);
    atomic_fetch_add_explicit(&tp->generation, 1, memory_order_release);
    pthread_mutex_lock(&tp->mu);
    if (tp->sleepers) pthread_cond_broadcast(&tp->start_cv);
    pthread_mutex_unlock(&tp->mu);

    uint64_t i0, i1;
    range_of(n_items, active, 0, &i0, &i1);
    if (i1 > i0) fn(arg, i0, i1, 0);

    for (int i = 0; i < SPIN_ROUNDS; i++) {
        if (atomic_load_explicit(&tp->pending, memory_order_acquire) == 0) return;
        CPU_RELAX();
    }
    pthread_mutex_lock(&tp->mu);
    tp->caller_sleeping = true;
    while (atomic_load(&tp->pending) != 0) pthread_cond_wait(&tp->done_cv, &tp->mu);
    tp->caller_sleeping = false;
    pthread_mutex_unlock(&tp->mu);
}
