/* What programmatic dependent launch (PDL) would save per kernel boundary in a recorded decode
 * step: N dependent kernels in a chain, captured into a CUDA graph, replayed; (a) plain launches,
 * (b) launched with cudaLaunchAttributeProgrammaticStreamSerialization, each kernel waiting on
 * its predecessor with griddepcontrol.wait before touching memory, (c) as (b) with the
 * predecessor triggering its dependents at its start (griddepcontrol.launch_dependents). Kernels
 * of two sizes: tiny (4 blocks) and "small decode op" (132 blocks x 256 threads, a short loop).
 * Prints median us per kernel over 20 replays. sm_90 only (PDL needs compute capability 9.0). */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                                                \
    do {                                                                                                     \
        cudaError_t e_ = (x);                                                                                \
        if (e_ != cudaSuccess) {                                                                             \
            printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__);                  \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

template <int MODE> __global__ void op(float *x, int n, int iters, float a) {
#if __CUDA_ARCH__ >= 900
    if (MODE == 2) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (MODE >= 1) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        for (int k = 0; k < iters; k++) v = v * a + 1.0f;
        x[i] = v;
    }
}

static int cmp_f(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

template <int MODE> static float run(cudaStream_t s, float *x, int n_kernels, int blocks, int iters) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    for (int k = 0; k < n_kernels; k++) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(blocks);
        cfg.blockDim = dim3(256);
        cfg.stream = s;
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = at;
        cfg.numAttrs = MODE >= 1 ? 1 : 0;
        CK(cudaLaunchKernelEx(&cfg, op<MODE>, x, blocks * 256, iters, 0.999f));
    }
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float t[20];
    for (int r = 0; r < 22; r++) {
        CK(cudaEventRecord(e0, s));
        CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(e1, s));
        CK(cudaStreamSynchronize(s));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (r >= 2) t[r - 2] = ms * 1000.0f / n_kernels;
    }
    qsort(t, 20, sizeof(float), cmp_f);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return t[10];
}

int main(void) {
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float *x;
    CK(cudaMalloc(&x, 132 * 256 * sizeof(float)));
    CK(cudaMemset(x, 0, 132 * 256 * sizeof(float)));
    const int N = 1000;
    const int blocks[2] = {4, 132}, iters[2] = {1, 200};
    for (int c = 0; c < 2; c++) {
        const float a = run<0>(s, x, N, blocks[c], iters[c]);
        const float b = run<1>(s, x, N, blocks[c], iters[c]);
        const float d = run<2>(s, x, N, blocks[c], iters[c]);
        printf(
            "RESULT pdl %s blocks=%d iters=%d: plain %.3f us/kernel, pdl wait %.3f, pdl early trigger %.3f\n",
            c ? "small-op" : "tiny", blocks[c], iters[c], a, b, d);
    }
    return 0;
}
