/* Per-op timing aggregation for a device backend's profiler (DSV4_CUDA_PROFILE=1).
 *
 * Host-only, so it is unit-tested without a GPU: the CUDA profiler (backend/cuda/cuda_profile.cu)
 * measures, this file accumulates per key ("matmul Q8_0 n=1 in=1024 out=32768"), sorts and
 * prints. A key's GPU time may arrive long after its call (events are harvested in batches), so
 * calls/host time and GPU time are added separately. */
#ifndef DSV4_BACKEND_OP_PROFILE_H
#define DSV4_BACKEND_OP_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/status.h"

#define DSV4_OPPROF_KEY 80

typedef struct dsv4_opprof_entry {
    char key[DSV4_OPPROF_KEY];
    uint64_t calls;     /* calls of the op with this key */
    uint64_t gpu_calls; /* calls whose GPU time was measured (host-only ops: 0) */
    double gpu_ms;      /* summed GPU time */
    double host_us;     /* summed host time inside the op function (launch cost, or waiting) */
} dsv4_opprof_entry;

typedef struct dsv4_opprof {
    dsv4_opprof_entry *e;
    size_t n, cap;
    int32_t *index; /* open addressing on the key's hash: entry index or -1 */
    size_t index_cap;
} dsv4_opprof;

/* Run-wide figures the table's footer reports (negative times: not measured). */
typedef struct dsv4_opprof_totals {
    double host_wall_ms;     /* host clock, entry of the first timed op .. exit of the last */
    double gpu_span_ms;      /* GPU clock, start of the first timed op .. end of the last */
    uint64_t tokens;         /* tokens the run embedded (prefill + decode) */
    uint64_t steps;          /* embed calls (decode steps + prefill chunks) */
    uint64_t syncs;          /* host-device synchronizations made by the backend */
    uint64_t flushes;        /* profiler harvests (each one a host wait the normal path lacks) */
    double profiler_ms;      /* the profiler's own host time around the op calls (in the wall) */
    const char *sync_detail; /* optional breakdown printed after the count (may be NULL) */
} dsv4_opprof_totals;

dsv4_status dsv4_opprof_init(dsv4_opprof *p, dsv4_error *err);
void dsv4_opprof_free(dsv4_opprof *p);
/* Entry index of key (truncated to DSV4_OPPROF_KEY - 1 chars), added on first use; -1 when out
 * of memory (the caller then skips the sample). */
int32_t dsv4_opprof_slot(dsv4_opprof *p, const char *key);
void dsv4_opprof_add_call(dsv4_opprof *p, int32_t slot, double host_us);
void dsv4_opprof_add_gpu(dsv4_opprof *p, int32_t slot, double gpu_ms);
double dsv4_opprof_gpu_total_ms(const dsv4_opprof *p);
/* One global-timer stamp of DSV4_CUDA_PROFILE=graph: before (tag & 1 == 0) or after an op of scope
 * tag >> 1 keyed by slot; the device log's layout. */
typedef struct dsv4_opprof_stamp {
    uint64_t t; /* ns */
    uint32_t slot;
    uint32_t tag;
} dsv4_opprof_stamp;
/* Pair a log's stamps in log order (a scope's before and after; a scope seen again, as in a replayed
 * step, opens a new pair) and add each pair's time as a GPU sample of its slot; with log != NULL
 * also write every stamp as CSV (ns from the earliest stamp, after, scope, key). *span_ns gets the
 * latest minus the earliest stamp. Returns the stamps that could not be used (scope >= n_scopes,
 * unknown slot, an after with no open before); -1 when out of memory. */
int64_t dsv4_opprof_add_stamps(dsv4_opprof *p, const dsv4_opprof_stamp *s, size_t n, uint32_t n_scopes,
                               FILE *log, uint64_t *span_ns);
/* Entry indices by GPU time (descending), then host time (descending), then key; order has
 * room for p->n. */
void dsv4_opprof_order(const dsv4_opprof *p, uint32_t *order);
/* The table (title line, one row per key, footer with t's figures). Returns false when the
 * order buffer cannot be allocated (nothing printed but the title). */
bool dsv4_opprof_print(const dsv4_opprof *p, const dsv4_opprof_totals *t, const char *title, FILE *f);

#endif
