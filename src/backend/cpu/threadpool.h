/* A small fork-join thread pool. `run` splits [0, n_items) into one contiguous range per thread
 * (static partition; the caller runs range 0) and returns when all ranges are done. Work items
 * must be independent, so the result never depends on the number of threads. */
#ifndef DSV4_CPU_THREADPOOL_H
#define DSV4_CPU_THREADPOOL_H

#include <stdint.h>

#include "common/status.h"

typedef struct dsv4_threadpool dsv4_threadpool;
/* fn(arg, i0, i1, thread_index) handles items [i0, i1). */
typedef void (*dsv4_tp_fn)(void *arg, uint64_t i0, uint64_t i1, uint32_t thread);

/* n_threads 0 = number of online CPUs. */
dsv4_status dsv4_tp_create(uint32_t n_threads, dsv4_threadpool **out, dsv4_error *err);
void dsv4_tp_free(dsv4_threadpool *tp);
uint32_t dsv4_tp_threads(const dsv4_threadpool *tp);
/* Items below min_per_thread per thread are not worth waking workers: fewer threads are used. */
void dsv4_tp_run(dsv4_threadpool *tp, uint64_t n_items, uint64_t min_per_thread, dsv4_tp_fn fn, void *arg);

#endif
