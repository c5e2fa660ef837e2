/* GPU check (needs a device): hcu_recip (cuda_smallops_units.cuh, the HC Sinkhorn's reciprocal; on
 * sm_90 its own fast path ahead of the range test) against __frcp_rn, bit for bit, for every one of
 * the 2^32 float inputs (NaN inputs: both NaN). Exit 0 only if none differs.
 * Build: make BUILD=build-x cuda  ->  build-x/cuda/recip_gpu_check */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include "backend/cuda/cuda_smallops_units.cuh"

__global__ void recip_all(unsigned long long *bad, uint32_t *first) {
    unsigned long long b = 0;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < (1ull << 32);
         i += stride) {
        const float x = __uint_as_float((uint32_t)i);
        const float r = hcu_recip(x), want = __frcp_rn(x);
        const bool same = __float_as_uint(r) == __float_as_uint(want) || (r != r && want != want);
        if (!same) {
            b++;
            atomicMin(first, (uint32_t)i);
        }
    }
    atomicAdd(bad, b);
}

int main(void) {
    unsigned long long *d_bad = NULL, bad = 0;
    uint32_t *d_first = NULL, first = 0xffffffffu;
    if (cudaMalloc((void **)&d_bad, sizeof bad) != cudaSuccess ||
        cudaMalloc((void **)&d_first, sizeof first) != cudaSuccess) {
        printf("recip_gpu_check: no device (%s)\n", cudaGetErrorString(cudaGetLastError()));
        return 2;
    }
    cudaMemcpy(d_bad, &bad, sizeof bad, cudaMemcpyHostToDevice);
    cudaMemcpy(d_first, &first, sizeof first, cudaMemcpyHostToDevice);
    recip_all<<<1024, 256>>>(d_bad, d_first);
    const cudaError_t e = cudaDeviceSynchronize();
    cudaMemcpy(&bad, d_bad, sizeof bad, cudaMemcpyDeviceToHost);
    cudaMemcpy(&first, d_first, sizeof first, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        printf("recip_gpu_check: FAIL launch: %s\n", cudaGetErrorString(e));
        return 1;
    }
    printf("recip_gpu_check: %s: hcu_recip vs __frcp_rn over all 2^32 inputs: %llu differ (first 0x%08x)\n",
           bad ? "FAIL" : "PASS", bad, bad ? first : 0u);
    return bad ? 1 : 0;
}
