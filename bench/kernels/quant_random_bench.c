/* Throughput of quant_fill_random_row per type (single thread), in GB/s of output.
 * Build: make BUILD=build-x build-x/libquant.a build-x/libcommon.a &&
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Isrc bench/kernels/quant_random_bench.c build-x/libquant.a \
 *      build-x/libcommon.a -lm -pthread -o build-x/quant_random_bench */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "quant/quant.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(void) {
    const uint32_t types[] = {DSV4_TYPE_Q8_0, DSV4_TYPE_Q2_K, DSV4_TYPE_Q4_K, DSV4_TYPE_IQ2_XXS,
                              DSV4_TYPE_F16,  DSV4_TYPE_BF16, DSV4_TYPE_F32};
    const int64_t n = 4096; /* one typical row; repeated so the output stays in cache-sized chunks */
    const int reps = 20000;
    void *buf = malloc((size_t)n * 4);
    if (!buf) return 1;
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        uint64_t rng = 1, bytes = 0;
        dsv4_type_row_bytes(types[t], (uint64_t)n, &bytes);
        const double t0 = now();
        for (int r = 0; r < reps; r++) quant_fill_random_row(types[t], &rng, 0.02f, buf, n);
        const double dt = now() - t0;
        printf("%-8s %7.2f GB/s\n", dsv4_type_name(types[t]), (double)bytes * reps / dt / 1e9);
    }
    free(buf);
    return 0;
}
