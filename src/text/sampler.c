#include "text/sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define NEG_INF_START (-1.0e30f) /* ds4's DS4_NEG_INF: the argmax scan starts here */

uint64_t dsv4_rng_next(uint64_t *state) {
    uint64_t x = *state;
    if (x == 0) x = DSV4_RNG_ZERO_REPLACEMENT;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545f4914f6cdd1dull;
}

float dsv4_rng_uniform(uint64_t *state) {
    return (float)((dsv4_rng_next(state) >> 40) & 0xffffffu) / 16777216.0f;
}

int32_t dsv4_sample_argmax(const float *logits, uint32_t n) {
    int32_t best = 0;
    float best_v = NEG_INF_START;
    for (uint32_t i = 0; i < n; i++) {
        if (logits[i] > best_v) {
            best_v = logits[i];
            best = (int32_t)i;
        }
    }
    return best;
}

typedef struct cand {
    int32_t id;
    float logit;
    float prob;
} cand;

/* Total order (logit desc, id asc) so the result does not depend on the sort algorithm. */
static int cand_cmp(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    if (a->logit != b->logit) return a->logit > b->logit ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* min_p / top_p walk over candidates sorted best first; returns how many survive. */
static uint32_t filter_sorted(const float *prob, size_t stride, uint32_t n, float sum, float top_p,
                              float min_p, float *fsum_out) {
#define PROB(i) (*(const float *)((const char *)prob + (size_t)(i)*stride))
    const float min_prob = (PROB(0) / sum) * min_p;
    float fsum = 0.0f;
    uint32_t kept = 0;
    for (uint32_t i = 0; i < n; i++) {
        const float p = PROB(i) / sum;
        if (i > 0 && p < min_prob) break;
        fsum += PROB(i);
        kept++;
        if (fsum / sum >= top_p) break;
    }
#undef PROB
    *fsum_out = fsum;
    return kept;
}

static int32_t sample_full_vocab(const float *logits, uint32_t n, float temp, float top_p, float min_p,
                                 uint64_t *rng, cand *scratch) {
    float max_logit = NEG_INF_START;
    int32_t best = 0;
    uint32_t finite = 0;
    for (uint32_t i = 0; i < n; i++) {
        const float v = logits[i];
        if (!isfinite(v)) continue;
        finite++;
        if (v > max_logit) {
            max_logit = v;
            best = (int32_t)i;
        }
    }
    if (finite == 0) return dsv4_sample_argmax(logits, n);

    if (top_p >= 1.0f) {
        /* two passes in id order; q_max = 1 so min_p compares directly with q. A token whose
         * exponent x lies 0.01 below log(min_p) has expf(x) < min_p whatever expf's last-ulp
         * rounding (expf is monotonic), so it is skipped without calling expf: the same tokens
         * and the same float sums as computing every q (about 20x less work at min_p = 0.05). */
        const float x_min = min_p > 0.0f ? logf(min_p) - 0.01f : -INFINITY;
        /* and d = logit - max below d_min implies d / temp < x_min (division by temp > 0 is
         * monotonic): most tokens cost one subtraction and one comparison */
        float d_min = x_min * temp;
        while (isfinite(d_min) && d_min / temp >= x_min) d_min = nextafterf(d_min, -INFINITY);
        float sum = 0.0f;
        for (uint32_t i = 0; i < n; i++) {
            const float d = logits[i] - max_logit;
            if (d < d_min || !isfinite(logits[i])) continue;
            const float x = d / temp;
            if (x < x_min) continue;
            const float q = expf(x);
            if (q >= min_p) sum += q;
        }
        if (sum <= 0.0f || !isfinite(sum)) return best;
        float r = dsv4_rng_uniform(rng) * sum;
        for (uint32_t i = 0; i < n; i++) {
            const float d = logits[i] - max_logit;
            if (d < d_min || !isfinite(logits[i])) continue;
            const float x = d / temp;
            if (x < x_min) continue;
            const float q = expf(x);
            if (q < min_p) continue;
            r -= q;
            if (r <= 0.0f) return (int32_t)i;
        }
        return best;
    }

    /* Every q enters the normalizer (in id order), but only tokens that can pass the min_p walk
     * are sorted: one whose exponent is 0.01 below log(min_p) has q / sum < min_p / sum whatever
     * the roundings, and such tokens rank below every kept one (x grows with the logit), so the
     * walk of filter_sorted stops at or before them either way. */
    const float x_min = min_p > 0.0f ? logf(min_p) - 0.01f : -INFINITY;
    uint32_t m = 0;
    float sum = 0.0f;
    for (uint32_t i = 0; i < n; i++) {
        const float v = logits[i];
        if (!isfinite(v)) continue;
        const float x = (v - max_logit) / temp;
        const float q = expf(x);
        if (x >= x_min) scratch[m++] = (cand){.id = (int32_t)i, .logit = v, .prob = q};
        sum += q;
    }
    if (sum <= 0.0f || !isfinite(sum)) return best;
    qsort(scratch, m, sizeof(*scratch), cand_cmp);
    float fsum = 0.0f;
    uint32_t kept = filter_sorted(&scratch[0].prob, sizeof(cand), m, sum, top_p, min_p, &fsum);
    if (kept == 0) return best;
    float r = dsv4_rng_uniform(rng) * fsum;
    for (uint32_t i = 0; i < kept; i++) {
        r -= scratch[i].prob;
        if (r <= 0.0f) return scratch[i].id;
    }
    return scratch[kept - 1].id;
}

static int32_t sample_top_k(const float *logits, uint32_t n, float temp, int32_t top_k, float top_p,
                            float min_p, uint64_t *rng) {
    int32_t ids[DSV4_SAMPLER_MAX_TOP_K];
    float vals[DSV4_SAMPLER_MAX_TOP_K];
    float probs[DSV4_SAMPLER_MAX_TOP_K];
    int32_t k = 0;
    /* insertion keeps the best k; a later equal logit never displaces an earlier one */
    for (uint32_t i = 0; i < n; i++) {
        const float v = logits[i];
        if (!isfinite(v)) continue;
        if (k == top_k && v <= vals[k - 1]) continue;
        int32_t j = k < top_k ? k++ : k - 1;
        while (j > 0 && vals[j - 1] < v) {
            vals[j] = vals[j - 1];
            ids[j] = ids[j - 1];
            j--;
        }
        vals[j] = v;
        ids[j] = (int32_t)i;
    }
    if (k == 0) return dsv4_sample_argmax(logits, n);
    float sum = 0.0f;
    for (int32_t i = 0; i < k; i++) {
        probs[i] = expf((vals[i] - vals[0]) / temp);
        sum += probs[i];
    }
    if (sum <= 0.0f || !isfinite(sum)) return ids[0];
    float fsum = 0.0f;
    uint32_t kept = filter_sorted(probs, sizeof(float), (uint32_t)k, sum, top_p, min_p, &fsum);
    if (kept == 0) return ids[0];
    float r = dsv4_rng_uniform(rng) * fsum;
    for (uint32_t i = 0; i < kept; i++) {
        r -= probs[i];
        if (r <= 0.0f) return ids[i];
    }
    return ids[kept - 1];
}

int32_t dsv4_sample(const float *logits, uint32_t n, dsv4_sampling p, uint64_t *rng, void *scratch) {
    if (p.temperature <= 0.0f) return dsv4_sample_argmax(logits, n);
    float top_p = p.top_p, min_p = p.min_p;
    if (!(top_p > 0.0f) || top_p > 1.0f) top_p = 1.0f;
    if (!(min_p >= 0.0f)) min_p = 0.0f;
    if (p.top_k <= 0) return sample_full_vocab(logits, n, p.temperature, top_p, min_p, rng, scratch);
    int32_t top_k = p.top_k > DSV4_SAMPLER_MAX_TOP_K ? DSV4_SAMPLER_MAX_TOP_K : p.top_k;
    if ((uint32_t)top_k > n) top_k = (int32_t)n;
    if (top_k == 0) return 0;
    return sample_top_k(logits, n, p.temperature, top_k, top_p, min_p, rng);
}

void dsv4_sampler_init(dsv4_sampler *s, dsv4_sampling params, uint64_t seed) {
    memset(s, 0, sizeof(*s));
    s->params = params;
    s->rng = seed;
}

void dsv4_sampler_free(dsv4_sampler *s) {
    free(s->scratch);
    s->scratch = NULL;
    s->scratch_cap = 0;
}

dsv4_status dsv4_sampler_sample(dsv4_sampler *s, const float *logits, uint32_t n, int32_t *out,
                                dsv4_error *err) {
    if (n == 0) return dsv4_fail(err, DSV4_ERR_INVALID, "sampler: empty logits");
    const dsv4_sampling *p = &s->params;
    const bool need_scratch = p->temperature > 0.0f && p->top_k <= 0 && p->top_p > 0.0f && p->top_p < 1.0f;
    if (need_scratch && s->scratch_cap < n) {
        void *q = realloc(s->scratch, (size_t)n * sizeof(cand));
        if (!q) return dsv4_fail(err, DSV4_ERR_NOMEM, "sampler: out of memory (%u candidates)", n);
        s->scratch = q;
        s->scratch_cap = n;
    }
    *out = dsv4_sample(logits, n, s->params, &s->rng, s->scratch);
    return DSV4_OK;
}

double dsv4_logsumexp(const float *logits, uint32_t n) {
    float max_logit = NEG_INF_START;
    int any = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!isfinite(logits[i])) continue;
        any = 1;
        if (logits[i] > max_logit) max_logit = logits[i];
    }
    if (!any) return -INFINITY;
    double sum = 0.0;
    for (uint32_t i = 0; i < n; i++)
        if (isfinite(logits[i])) sum += exp((double)logits[i] - (double)max_logit);
    return (double)max_logit + log(sum);
}

uint32_t dsv4_top_logprobs(const float *logits, uint32_t n, uint32_t k, dsv4_token_logprob *out) {
    if (k > n) k = n;
    uint32_t filled = 0;
    for (uint32_t i = 0; i < n && k; i++) {
        const float v = logits[i];
        if (!isfinite(v)) continue;
        if (filled == k && v <= out[k - 1].logit) continue;
        uint32_t j = filled < k ? filled++ : k - 1;
        while (j > 0 && out[j - 1].logit < v) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = (dsv4_token_logprob){.id = (int32_t)i, .logit = v};
    }
    const double lse = dsv4_logsumexp(logits, n);
    for (uint32_t i = 0; i < filled; i++) out[i].logprob = (float)((double)out[i].logit - lse);
    return filled;
}
