/* cuda_prefill_f16_bench [n ...]: TFLOPS of the F16 tensor-core prefill GEMM (cuda_gemm_f16_mma.h)
 * at the flash shapes (4096->1024, 4096->512, 4096->256, 16384->24, 4096->64) on random weights,
 * for n = 2048 and 256 tokens (or the n given). GPU only; times 20 launches after a warm-up with
 * CUDA events (the f32->f16 conversion and the split-K reduction included). */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_gemm_f16_mma.h"

__global__ void fill_kernel(uint16_t *w, size_t n, uint32_t seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15;
        w[i] = (uint16_t)(0x2000 | (h & 0x83ff)); /* small random halves of both signs */
    }
}

int main(int argc, char **argv) {
    uint32_t ns[8] = {2048, 256};
    int nn = 2;
    if (argc > 1) {
        nn = 0;
        for (int i = 1; i < argc && nn < 8; i++) ns[nn++] = (uint32_t)atoi(argv[i]);
    }
    const unsigned long long shapes[5][2] = {{4096, 1024}, {4096, 512}, {4096, 256}, {16384, 24}, {4096, 64}};
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
        fprintf(stderr, "cuda_prefill_f16_bench: no CUDA device\n");
        return 2;
    }
    printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
    int fails = 0;
    for (int s = 0; s < 5; s++)
        for (int j = 0; j < nn; j++) {
            const uint64_t in = shapes[s][0], out = shapes[s][1];
            const uint32_t n = ns[j];
            uint16_t *w = NULL;
            float *x = NULL, *y = NULL, *part = NULL;
            void *x16 = NULL;
            const size_t pb = dsv4_cuda_f16_mma_part_bytes(in, out, n, prop.multiProcessorCount);
            if (cudaMalloc(&w, in * out * 2) != cudaSuccess || cudaMalloc(&x, in * n * 4) != cudaSuccess ||
                cudaMalloc(&y, out * n * 4) != cudaSuccess ||
                cudaMalloc(&x16, dsv4_cuda_f16_mma_x16_bytes(in, n)) != cudaSuccess ||
                (pb && cudaMalloc(&part, pb) != cudaSuccess)) {
                fprintf(stderr, "cuda_prefill_f16_bench: out of device memory\n");
                return 2;
            }
            fill_kernel<<<1024, 256>>>(w, in * out, 17u * s + 1);
            fill_kernel<<<1024, 256>>>((uint16_t *)x, in * n * 2, 99u * j + 5); /* tiny finite f32 values */
            dsv4_error err;
            memset(&err, 0, sizeof err);
            cudaEvent_t e0, e1;
            cudaEventCreate(&e0);
            cudaEventCreate(&e1);
            dsv4_status st = dsv4_cuda_gemm_f16_mma(w, in * 2, in, out, x, in, n, y, out, x16, part,
                                                    prop.multiProcessorCount, 0, &err);
            const int reps = 20;
            cudaEventRecord(e0, 0);
            for (int r = 0; r < reps && st == DSV4_OK; r++)
                st = dsv4_cuda_gemm_f16_mma(w, in * 2, in, out, x, in, n, y, out, x16, part,
                                            prop.multiProcessorCount, 0, &err);
            cudaEventRecord(e1, 0);
            const cudaError_t ce = cudaEventSynchronize(e1);
            float ms = 0;
            cudaEventElapsedTime(&ms, e0, e1);
            const double t = ms * 1e-3 / reps, flop = 2.0 * in * out * n;
            if (st != DSV4_OK || ce != cudaSuccess) {
                printf("FAIL %5llu->%-5llu n=%-5u %s\n", (unsigned long long)in, (unsigned long long)out, n,
                       st != DSV4_OK ? err.msg : cudaGetErrorString(ce));
                fails++;
            } else {
                printf("f16 mma %5llu->%-5llu n=%-5u splits %2u: %8.2f us  %7.1f TFLOPS\n",
                       (unsigned long long)in, (unsigned long long)out, n,
                       dsv4_cuda_f16_mma_splits(in, out, n, prop.multiProcessorCount), t * 1e6,
                       flop / t / 1e12);
            }
            cudaEventDestroy(e0);
            cudaEventDestroy(e1);
            cudaFree(w), cudaFree(x), cudaFree(y), cudaFree(x16);
            if (part) cudaFree(part);
        }
    return fails ? 1 : 0;
}
