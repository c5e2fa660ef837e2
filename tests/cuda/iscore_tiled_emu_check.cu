/* Host replay of the register-tiled indexer scoring (cuda_iscore_tiled_units.cuh, DSV4_CUDA_ISCORE=tiled):
 * every thread of a block runs ist_thread_dots on a staged tile and stores where ist_dot_at says;
 * the dots and the row scores must equal, bit for bit, the plain kernel's sequential chains
 * (dot = dot + k[d] * q[d] over d in order; score = score + relu(dot) * w[h] over h in order),
 * for random rows, rows with zeros, huge and tiny values. The layout's arrays must be 16-byte
 * aligned and disjoint. Needs no GPU (exit 0 = pass). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "backend/cuda/cuda_iscore_tiled_units.cuh"

#define CHECK_RNG_SEED 0x15c0
#include "check_rng.h"

static float plain_mul_add(float acc, float x, float y) {
    volatile float p = x * y;
    return acc + p;
}

static int check_block(uint32_t head_dim, float mag, int zero_rows) {
    const ist_layout L = ist_layout_of(head_dim);
    int bad = 0;
    if (L.ks % 4 || L.dots % 4 || L.qs % 4 || L.st % 4 || L.ks < IST_HEADS ||
        L.dots < L.ks + IST_TILE * L.st || L.qs < L.dots + IST_TILE * (IST_HEADS + 1) ||
        L.total != L.qs + IST_HEADS * L.st) {
        fprintf(stderr, "FAIL layout head_dim=%u\n", head_dim);
        return 1;
    }
    std::vector<float> sh(L.total, NAN), k((size_t)IST_TILE * head_dim), q((size_t)IST_HEADS * head_dim),
        w(IST_HEADS);
    for (uint32_t r = 0; r < IST_TILE; r++)
        for (uint32_t d = 0; d < head_dim; d++)
            k[(size_t)r * head_dim + d] = (int)r < zero_rows ? 0.0f : uni() * mag;
    for (auto &v : q) v = uni() * mag;
    for (auto &v : w) v = uni();
    for (uint32_t h = 0; h < IST_HEADS; h++) sh[L.ws + h] = w[h];
    for (uint32_t r = 0; r < IST_TILE; r++)
        for (uint32_t d = 0; d < head_dim; d++) sh[L.ks + r * L.st + d] = k[(size_t)r * head_dim + d];
    for (uint32_t h = 0; h < IST_HEADS; h++)
        for (uint32_t d = 0; d < head_dim; d++) sh[L.qs + h * L.st + d] = q[(size_t)h * head_dim + d];
    for (uint32_t warp = 0; warp < IST_WARPS; warp++) /* the threads' dots, then their stores */
        for (uint32_t lane = 0; lane < 32; lane++) {
            float d[2][2];
            ist_thread_dots(sh.data(), L, head_dim, warp, lane, d);
            for (uint32_t i = 0; i < 2; i++)
                for (uint32_t j = 0; j < 2; j++) sh[ist_dot_at(L, warp, lane, i, j)] = d[i][j];
        }
    for (uint32_t r = 0; r < IST_TILE; r++) {
        float sv = 0.0f;
        for (uint32_t h = 0; h < IST_HEADS; h++) {
            float dot = 0.0f;
            for (uint32_t d = 0; d < head_dim; d++)
                dot = plain_mul_add(dot, k[(size_t)r * head_dim + d], q[(size_t)h * head_dim + d]);
            const float got = sh[L.dots + r * (IST_HEADS + 1) + h];
            if (memcmp(&got, &dot, sizeof dot) != 0) bad++;
            sv = plain_mul_add(sv, dot < 0.0f ? 0.0f : dot, w[h]);
        }
        const float sc = ist_row_score(sh.data(), L, r);
        if (memcmp(&sc, &sv, sizeof sv) != 0) bad++;
    }
    if (bad)
        fprintf(stderr, "FAIL tiled scoring head_dim=%u mag=%g zero_rows=%d: %d values differ\n", head_dim,
                mag, zero_rows, bad);
    return bad != 0;
}

int main(void) {
    int fails = 0, checks = 0;
    const uint32_t dims[] = {4, 32, 128, 132, 256};
    const float mags[] = {1e-20f, 1.0f, 3.0f, 1e15f};
    for (uint32_t a = 0; a < sizeof dims / sizeof *dims; a++)
        for (uint32_t m = 0; m < sizeof mags / sizeof *mags; m++)
            for (int z = 0; z <= 3; z += 3, checks++) fails += check_block(dims[a], mags[m], z);
    printf("%s: %d of %d checks failed\n",
           fails ? "ISCORE TILED EMULATION FAILED" : "ISCORE TILED EMULATION PASSED", fails, checks);
    return fails ? 1 : 0;
}
