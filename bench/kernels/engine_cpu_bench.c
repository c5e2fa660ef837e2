/* CPU reference forward throughput: prefill of P random tokens (layer-major chunks), then G
 * decode steps, on one model file. Prints one line per phase with tokens/s.
 * Build: make BUILD=build-x build-x/libengine.a build-x/libmodel.a build-x/libtext.a \
 *          build-x/libquant.a build-x/libgguf.a build-x/libcommon.a &&
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Isrc bench/kernels/engine_cpu_bench.c build-x/libengine.a \
 *      build-x/libmodel.a build-x/libquant.a build-x/libgguf.a build-x/libcommon.a -lm -pthread \
 *      -o build-x/engine_cpu_bench
 * Usage: engine_cpu_bench MODEL.gguf [prompt_tokens=64] [gen_tokens=16] [threads=0] [chunk=0] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "engine/engine.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.gguf [prompt_tokens] [gen_tokens] [threads] [chunk]\n", argv[0]);
        return 2;
    }
    const uint32_t np = argc > 2 ? (uint32_t)atoi(argv[2]) : 64;
    const uint32_t ng = argc > 3 ? (uint32_t)atoi(argv[3]) : 16;
    dsv4_engine_params p;
    dsv4_engine_params_default(&p);
    p.n_threads = argc > 4 ? (uint32_t)atoi(argv[4]) : 0;
    const uint32_t chunk = argc > 5 ? (uint32_t)atoi(argv[5]) : 0;
    dsv4_error err;
    dsv4_engine *e;
    double t0 = now();
    if (dsv4_engine_open(argv[1], &p, &e, &err) != DSV4_OK) {
        fprintf(stderr, "open: %s\n", err.msg);
        return 1;
    }
    const double t_open = now() - t0;
    const uint32_t vocab = dsv4_engine_config(e)->n_vocab;
    dsv4_session *s;
    if (dsv4_session_create(e, np + ng + 1, &s, &err) != DSV4_OK) {
        fprintf(stderr, "session: %s\n", err.msg);
        return 1;
    }
    int32_t *tok = malloc(sizeof(int32_t) * (np + ng));
    uint64_t r = 88172645463325252ull;
    for (uint32_t i = 0; i < np + ng; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        tok[i] = (int32_t)(r % vocab);
    }
    dsv4_eval_opts o = {.chunk = chunk};
    t0 = now();
    if (dsv4_session_eval(s, tok, np, &o, &err) != DSV4_OK) {
        fprintf(stderr, "prefill: %s\n", err.msg);
        return 1;
    }
    const double t_pre = now() - t0;
    t0 = now();
    for (uint32_t i = 0; i < ng; i++)
        if (dsv4_session_decode(s, tok[np + i], &err) != DSV4_OK) {
            fprintf(stderr, "decode: %s\n", err.msg);
            return 1;
        }
    const double t_dec = now() - t0;
    printf("model=%s threads=%u chunk=%u open_s=%.2f\n", argv[1], dsv4_engine_threads(e), chunk, t_open);
    printf("prefill tokens=%u seconds=%.3f tok_per_s=%.2f\n", np, t_pre, np / t_pre);
    printf("decode  tokens=%u seconds=%.3f tok_per_s=%.2f ms_per_tok=%.1f\n", ng, t_dec, ng / t_dec,
           1e3 * t_dec / ng);
    free(tok);
    dsv4_session_free(s);
    dsv4_engine_close(e);
    return 0;
}
