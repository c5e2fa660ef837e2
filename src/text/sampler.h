/* Token sampling exactly as ds4's CPU path (spec §6): xorshift64* RNG with a 24-bit uniform,
 * temperature inside exp, then top_k (<= 1024), min_p relative to the top token, top_p
 * (cumulative, inclusive), then one draw. All arithmetic in f32 like ds4. */
#ifndef DSV4_TEXT_SAMPLER_H
#define DSV4_TEXT_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

#define DSV4_SAMPLER_MAX_TOP_K 1024
#define DSV4_RNG_ZERO_REPLACEMENT 0x9e3779b97f4a7c15ull

typedef struct dsv4_sampling {
    float temperature; /* <= 0: greedy */
    float top_p;       /* (0,1]; other values mean 1 */
    float min_p;       /* relative to the top token; < 0 means 0 */
    int32_t top_k;     /* <= 0: whole vocabulary; capped at 1024 */
} dsv4_sampling;

/* ds4.h defaults. */
#define DSV4_SAMPLING_DEFAULTS                                                                               \
    ((dsv4_sampling){.temperature = 1.0f, .top_p = 1.0f, .min_p = 0.05f, .top_k = 0})

/* Per-session sampler: parameters, RNG state and a scratch buffer (not for sharing by threads). */
typedef struct dsv4_sampler {
    dsv4_sampling params;
    uint64_t rng;
    void *scratch;
    size_t scratch_cap;
} dsv4_sampler;

/* rng state = seed (0 is allowed: the RNG replaces a zero state on use). */
void dsv4_sampler_init(dsv4_sampler *s, dsv4_sampling params, uint64_t seed);
void dsv4_sampler_free(dsv4_sampler *s);
/* Picks one token from logits[0..n). Consumes exactly one uniform unless greedy. */
dsv4_status dsv4_sampler_sample(dsv4_sampler *s, const float *logits, uint32_t n, int32_t *out,
                                dsv4_error *err);

uint64_t dsv4_rng_next(uint64_t *state);
float dsv4_rng_uniform(uint64_t *state); /* ((next >> 40) & 0xffffff) / 2^24 */

/* First index of the strictly greatest value, scanning from -1e30 (0 if none exceeds it). */
int32_t dsv4_sample_argmax(const float *logits, uint32_t n);

/* The same selection as dsv4_sampler_sample, with the RNG and scratch given explicitly. For
 * top_p < 1 over the whole vocabulary the candidates are sorted by logit descending with ties
 * by lower id first (deterministic); ds4 used an unstable qsort there, so its tie order is
 * unspecified (UNSURE-6). scratch must hold n entries of 12 bytes when top_k <= 0 and top_p < 1. */
int32_t dsv4_sample(const float *logits, uint32_t n, dsv4_sampling p, uint64_t *rng, void *scratch);

/* log(sum(exp(l))) over the finite logits: max + log(sum exp(l - max)) with the sum in double.
 * -INFINITY if no logit is finite. logprob(i) = logits[i] - this. */
double dsv4_logsumexp(const float *logits, uint32_t n);

typedef struct dsv4_token_logprob {
    int32_t id;
    float logit;
    float logprob;
} dsv4_token_logprob;

/* The k (<= n) best finite logits, descending, ties lower id first, with their logprobs.
 * Returns how many were filled (fewer than k when fewer logits are finite). */
uint32_t dsv4_top_logprobs(const float *logits, uint32_t n, uint32_t k, dsv4_token_logprob *out);

#endif
