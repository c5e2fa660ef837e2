/* dsv4-bench: ds4-bench's sweep and CSV, plus a JSON report (latency percentiles, RSS, machine). */
#ifndef DSV4_APP_BENCH_H
#define DSV4_APP_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/engine.h"

typedef struct bench_opts {
    const char *model;
    const char *prompt_file;      /* raw text, tokenized without a template */
    const char *chat_prompt_file; /* rendered as one no-think user message */
    const char *system;
    const char *backend;
    const char *csv;  /* NULL: stdout */
    const char *json; /* NULL: none */
    uint32_t ctx_start, ctx_max, ctx_alloc;
    uint32_t step_incr;
    double step_mul;
    uint32_t gen_tokens;
    uint32_t threads, chunk;
    const char *tiers, *tier_mem; /* placement (graph/placement.h) */
    bool no_fusion;
    double floor_tps;
    bool help;
} bench_opts;

/* One measured frontier. */
typedef struct bench_row {
    uint32_t ctx_tokens, prefill_tokens, gen_tokens;
    double prefill_s, gen_s, ttft_s;
    double p50_ms, p95_ms; /* per-token decode latency */
    uint64_t kvcache_bytes;
    uint64_t nonfinite_logits; /* NaN/Inf logit values seen over the frontier's decode steps */
} bench_row;

int bench_parse_args(int argc, char **argv, bench_opts *o);
void bench_usage(FILE *f);
/* The default prompt file if it exists (../shared/data/promessi_sposi.txt next to the repo). */
const char *bench_default_prompt(char *buf, size_t cap);
uint32_t bench_next_frontier(const bench_opts *o, uint32_t cur);

double bench_now(void);
/* p in [0,1]: nearest-rank percentile of v[0..n) (sorts v). */
double bench_percentile(double *v, size_t n, double p);

/* e: the engine whose placement and statistics (tier switches, fused ops) go into the report. */
int bench_write_json(const bench_opts *o, const bench_row *rows, size_t n_rows, uint32_t prompt_tokens,
                     uint32_t threads, const double *all_lat_ms, size_t n_lat, const dsv4_engine *e,
                     double load_s);

#endif
