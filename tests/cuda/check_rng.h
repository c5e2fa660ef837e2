/* The splitmix64 stream shared by the host-side CUDA checks and benchmarks: define CHECK_RNG_SEED
 * (each program keeps its own, so its inputs stay what they were) before including. nxt() gives
 * 64 random bits, uni() a float in [-1, 1). */
#ifndef DSV4_CHECK_RNG_H
#define DSV4_CHECK_RNG_H

#include <stdint.h>

#ifndef CHECK_RNG_SEED
#error "define CHECK_RNG_SEED before including check_rng.h"
#endif

static uint64_t g_s = CHECK_RNG_SEED;
static uint64_t nxt(void) {
    uint64_t z = (g_s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float uni(void) { return (float)((nxt() >> 11) * (2.0 / 9007199254740992.0) - 1.0); }

#endif
