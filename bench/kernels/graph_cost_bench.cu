/* What a CUDA Graph decode step would cost on the host and the GPU, measured with N tiny kernels
 * in a chain (the shape of one decode step: ~45 launches per layer x 43 layers):
 *  - direct stream launches (host us per launch, wall per step),
 *  - stream capture (host us per captured launch), instantiate, graph launch (wall per step),
 *  - re-capture + cudaGraphExecUpdate (per token, no re-instantiation),
 *  - cudaGraphExecKernelNodeSetParams on every node / on 1 in 5 nodes (patching arguments). */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

__global__ void tiny(float *x, int n, int pos, float a) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * a + (float)pos;
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

#define CK(x)                                                                                                \
    do {                                                                                                     \
        cudaError_t e_ = (x);                                                                                \
        if (e_ != cudaSuccess) {                                                                             \
            printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__);                  \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

static void issue(cudaStream_t s, float *x, int n_kernels, int pos) {
    for (int k = 0; k < n_kernels; k++) tiny<<<4, 256, 0, s>>>(x, 1024, pos + k, 0.999f);
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const int N = argc > 1 ? atoi(argv[1]) : 2000, REPS = 15;
    float *x;
    CK(cudaMalloc(&x, 1024 * sizeof(float)));
    CK(cudaMemset(x, 0, 1024 * sizeof(float)));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    double host[REPS], wall[REPS];
    /* direct */
    issue(s, x, N, 0);
    CK(cudaStreamSynchronize(s));
    for (int r = 0; r < REPS; r++) {
        const double t0 = now_us();
        issue(s, x, N, r);
        const double t1 = now_us();
        CK(cudaStreamSynchronize(s));
        host[r] = t1 - t0, wall[r] = now_us() - t0;
    }
    qsort(host, REPS, sizeof(double), cmp_d), qsort(wall, REPS, sizeof(double), cmp_d);
    printf("direct: %d launches: host %.1f us (%.2f us/launch), wall %.1f us (%.2f us/kernel)\n", N,
           host[REPS / 2], host[REPS / 2] / N, wall[REPS / 2], wall[REPS / 2] / N);
    /* capture + instantiate */
    cudaGraph_t g;
    cudaGraphExec_t ge;
    double t0 = now_us();
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    issue(s, x, N, 0);
    CK(cudaStreamEndCapture(s, &g));
    double t1 = now_us();
    CK(cudaGraphInstantiate(&ge, g, 0));
    double t2 = now_us();
    printf("capture: %.1f us (%.2f us/launch); instantiate %.1f us\n", t1 - t0, (t1 - t0) / N, t2 - t1);
    CK(cudaGraphLaunch(ge, s));
    CK(cudaStreamSynchronize(s));
    for (int r = 0; r < REPS; r++) {
        t0 = now_us();
        CK(cudaGraphLaunch(ge, s));
        t1 = now_us();
        CK(cudaStreamSynchronize(s));
        host[r] = t1 - t0, wall[r] = now_us() - t0;
    }
    qsort(host, REPS, sizeof(double), cmp_d), qsort(wall, REPS, sizeof(double), cmp_d);
    printf("graph launch: host %.1f us, wall %.1f us (%.2f us/kernel)\n", host[REPS / 2], wall[REPS / 2],
           wall[REPS / 2] / N);
    /* re-capture + exec update */
    double cap[REPS], upd[REPS];
    for (int r = 0; r < REPS; r++) {
        cudaGraph_t g2;
        t0 = now_us();
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        issue(s, x, N, r + 7);
        CK(cudaStreamEndCapture(s, &g2));
        t1 = now_us();
        cudaGraphExecUpdateResultInfo info;
        CK(cudaGraphExecUpdate(ge, g2, &info));
        t2 = now_us();
        CK(cudaGraphDestroy(g2));
        cap[r] = t1 - t0, upd[r] = t2 - t1;
        CK(cudaGraphLaunch(ge, s));
        CK(cudaStreamSynchronize(s));
    }
    qsort(cap, REPS, sizeof(double), cmp_d), qsort(upd, REPS, sizeof(double), cmp_d);
    printf("recapture %.1f us + exec update %.1f us per step (%.2f us/node)\n", cap[REPS / 2], upd[REPS / 2],
           (cap[REPS / 2] + upd[REPS / 2]) / N);
    /* node param patching */
    size_t nn = 0;
    CK(cudaGraphGetNodes(g, NULL, &nn));
    cudaGraphNode_t *nodes = (cudaGraphNode_t *)malloc(nn * sizeof *nodes);
    CK(cudaGraphGetNodes(g, nodes, &nn));
    cudaKernelNodeParams kp;
    CK(cudaGraphKernelNodeGetParams(nodes[0], &kp));
    for (int every = 1; every <= 5; every += 4) {
        for (int r = 0; r < REPS; r++) {
            int pos = r;
            float a = 0.999f;
            int n = 1024;
            void *args[4] = {&x, &n, &pos, &a};
            kp.kernelParams = args;
            t0 = now_us();
            for (size_t i = 0; i < nn; i += every) CK(cudaGraphExecKernelNodeSetParams(ge, nodes[i], &kp));
            t1 = now_us();
            host[r] = t1 - t0;
            CK(cudaGraphLaunch(ge, s));
            CK(cudaStreamSynchronize(s));
        }
        qsort(host, REPS, sizeof(double), cmp_d);
        printf("SetParams on 1 in %d of %zu nodes: %.1f us (%.2f us/node)\n", every, nn, host[REPS / 2],
               host[REPS / 2] / ((nn + every - 1) / every));
    }
    free(nodes);
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    return 0;
}
