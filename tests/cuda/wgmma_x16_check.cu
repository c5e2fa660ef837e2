/* GPU check (H100 / H200, sm_90a) of the warpgroup product the exact MoE kernels use
 * (cuda_wgmma_x16.cuh): one warpgroup chains wgmma.m64nNk16 over the 16 k16 steps of a superblock,
 * A from registers in the layout cuda_moe_x16.cuh's fragments have, B from a shared-memory image
 * laid out as the kernels' loader lays it (x16_b_chunk, x16_b_chunk_sw) and read through the
 * descriptors the kernels build (interleaved: start 2048 st, X16_LBO, X16_SBO; 128-byte swizzle). The inputs
 * are random exact f16 integers within the kernels' ranges (|a| <= 1333, |b| <= 128) with sums below 2^24, so
 * every output must equal the integer sum exactly, for N = 16, 32, 48, 64 and for a second chain started with
 * scale-d 0 over stale accumulators. Exit 0 = pass. (Session 15, first run on an H200: with the two offsets
 * swapped the product reads outside the image, an illegal address: the layout matters.) */
#include <cuda_fp16.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_moe_x16.cuh"
#include "backend/cuda/cuda_wgmma_x16.cuh"

#define CHECK_RNG_SEED 31337
#include "check_rng.h"

/* A[64][256], B[256][64] f16 bits; D[64][64] */
template <int NT>
__global__ void wg_kernel(const uint16_t *A, const uint16_t *B, float *D, int sw, int twice) {
    __shared__ __align__(1024) uint8_t bs[X16_B_BYTES];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    for (int i = tid; i < 256 * 64; i += 128) { /* element (p, n) where the loader puts it */
        const int p = i / 64, n = i % 64;
        *(uint16_t *)(bs + (sw ? x16_b_off_sw(p, n) : x16_b_off(p, n))) = B[p * 64 + n];
    }
    x16_proxy_fence();
    __syncthreads();
    const uint32_t base = (uint32_t)__cvta_generic_to_shared(bs);
    float d[32];
    for (int i = 0; i < 32; i++) d[i] = 12345.0f; /* stale: scale-d 0 must ignore it */
    for (int rep = 0; rep <= twice; rep++) {
        x16_fence_acc<4 * NT>(d);
        for (int st = 0; st < 16; st++) {
            uint32_t a[4];
            for (int ai = 0; ai < 4; ai++) {
                const int row = 16 * warp + g + 8 * (ai & 1), pos = 16 * st + 2 * t + 8 * (ai >> 1);
                a[ai] = (uint32_t)A[row * 256 + pos] | ((uint32_t)A[row * 256 + pos + 1] << 16);
            }
            x16_fence();
            const uint64_t desc = sw ? x16_desc_sw(base + (st >> 2) * 8192 + (st & 3) * 32, 1024)
                                     : x16_desc(base + 2048 * st, X16_LBO, X16_SBO);
            x16_mma<NT>(d, a[0], a[1], a[2], a[3], desc, st > 0);
            x16_commit();
            x16_wait<0>();
        }
        x16_fence_acc<4 * NT>(d);
    }
    for (int i = 0; i < NT; i++)
        for (int k = 0; k < 4; k++) {
            const int row = 16 * warp + g + 8 * (k >> 1), n = 8 * i + 2 * t + (k & 1);
            D[row * 64 + n] = d[4 * i + k];
        }
}

static uint16_t h16(int v) { return __half_as_ushort(__int2half_rn(v)); }

template <int NT>
static int run(const uint16_t *dA, const uint16_t *dB, float *dD, const double *ref, int sw) {
    float *D = (float *)malloc(64 * 64 * 4);
    cudaMemset(dD, 0xff, 64 * 64 * 4);
    wg_kernel<NT><<<1, 128>>>(dA, dB, dD, sw, 1);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        printf("FAIL N=%d: %s\n", 8 * NT, cudaGetErrorString(e));
        free(D);
        return 1;
    }
    cudaMemcpy(D, dD, 64 * 64 * 4, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int r = 0; r < 64; r++)
        for (int n = 0; n < 8 * NT; n++) bad += (double)D[r * 64 + n] != ref[r * 64 + n];
    printf("%s N=%-2d %-22s: %d of %d outputs differ from the exact sums\n", bad == 0 ? "ok  " : "FAIL",
           8 * NT, sw ? "128-byte swizzle" : "interleaved", bad, 64 * 8 * NT);
    free(D);
    return bad != 0;
}

int main(void) {
    int dev = 0;
    cudaDeviceProp pr;
    if (cudaGetDeviceProperties(&pr, dev) != cudaSuccess || pr.major != 9 || pr.minor != 0) {
        printf("FAIL wgmma_x16_check needs a compute capability 9.0 device\n");
        return 1;
    }
    static uint16_t A[64 * 256], B[256 * 64];
    static int Ai[64 * 256], Bi[256 * 64];
    for (int i = 0; i < 64 * 256; i++) Ai[i] = (int)(nxt() % 2667) - 1333, A[i] = h16(Ai[i]);
    (void)uni;
    for (int i = 0; i < 256 * 64; i++) Bi[i] = (int)(nxt() % 97) - 48, B[i] = h16(Bi[i]);
    static double ref[64 * 64];
    for (int r = 0; r < 64; r++)
        for (int n = 0; n < 64; n++) {
            long long s = 0, sa = 0;
            for (int p = 0; p < 256; p++)
                s += (long long)Ai[r * 256 + p] * Bi[p * 64 + n],
                    sa += llabs((long long)Ai[r * 256 + p] * Bi[p * 64 + n]);
            if (sa >= (1ll << 24)) { /* keep the test inside the exactness bound */
                printf("FAIL test data over the bound\n");
                return 1;
            }
            ref[r * 64 + n] = (double)s;
        }
    uint16_t *dA, *dB;
    float *dD;
    cudaMalloc(&dA, sizeof A), cudaMalloc(&dB, sizeof B), cudaMalloc(&dD, 64 * 64 * 4);
    cudaMemcpy(dA, A, sizeof A, cudaMemcpyHostToDevice), cudaMemcpy(dB, B, sizeof B, cudaMemcpyHostToDevice);
    int fails = 0;
    for (int sw = 0; sw < 2; sw++)
        fails += run<2>(dA, dB, dD, ref, sw) + run<4>(dA, dB, dD, ref, sw) + run<6>(dA, dB, dD, ref, sw) +
                 run<8>(dA, dB, dD, ref, sw);
    printf(fails ? "WGMMA X16 CHECK FAILED: %d\n" : "WGMMA X16 CHECK PASSED\n", fails);
    return fails ? 1 : 0;
}
