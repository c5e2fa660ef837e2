/* Host cost of one default-parameter draw (T = 1, min_p = 0.05, top_p = 1) over a 129,280-token
 * vocabulary with Gaussian-like logits (sum of 12 uniforms, scale 2): the per-token sampling time
 * the CLI and server add to every decoded token. Build and run:
 *   make programs && cc -O2 -Isrc -Iinclude bench/cpu/sampler_bench.c build/libtext.a build/libcommon.a -lm \
 *     -o build/sampler_bench && build/sampler_bench
 * "acc" sums the picked ids: equal across versions means the same tokens were drawn. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "text/sampler.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
    const uint32_t n = 129280;
    float *l = malloc(n * sizeof *l);
    if (!l) return 1;
    uint64_t s = 1;
    for (uint32_t i = 0; i < n; i++) {
        float a = 0;
        for (int k = 0; k < 12; k++) a += (float)((dsv4_rng_next(&s) >> 40) % 10000) / 10000.0f;
        l[i] = (a - 6.0f) * 2.0f;
    }
    const dsv4_sampling p = DSV4_SAMPLING_DEFAULTS;
    uint64_t rng = 7;
    long long acc = 0;
    const int reps = 200;
    const double t0 = now();
    for (int r = 0; r < reps; r++) acc += dsv4_sample(l, n, p, &rng, NULL);
    printf("%.3f ms per sample (acc %lld)\n", (now() - t0) / reps * 1e3, acc);
    free(l);
    return 0;
}
