/* Which forms of a cross-device step can CUDA stream capture record (issue 7: decode steps recorded
 * across two GPUs)? One graph: a kernel on device 0 writes a buffer, device 1's stream joins the
 * capture through an event, copies the buffer over (variant), and a kernel on device 1 adds 1;
 * device 0's stream joins back and ends the capture. Each variant is captured, instantiated,
 * launched twice and its result checked against the value computed here. Prints one line per
 * variant: the first CUDA error, or "ok".
 * Variants: peer = cudaMemcpyPeerAsync, default = cudaMemcpyAsync(cudaMemcpyDefault),
 * kernel = a device-1 kernel loading device 0's memory (peer access). */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#define N 16384

__global__ void fill(float *p, float v) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) p[i] = v + (float)i;
}
__global__ void add_one(float *p) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) p[i] += 1.0f;
}
__global__ void pull(float *dst, const float *src) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) dst[i] = src[i];
}

#define TRY(x)                                                                                               \
    do {                                                                                                     \
        cudaError_t e_ = (x);                                                                                \
        if (e_ != cudaSuccess) {                                                                             \
            snprintf(why, sizeof why, "%s: %s", #x, cudaGetErrorString(e_));                                 \
            goto out;                                                                                        \
        }                                                                                                    \
    } while (0)

static void variant(const char *name, int kind, float *a, float *b, cudaStream_t s0, cudaStream_t s1,
                    cudaEvent_t e0, cudaEvent_t e1) {
    char why[512] = "ok";
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    static float host[N];
    TRY(cudaSetDevice(0));
    TRY(cudaStreamBeginCapture(s0, cudaStreamCaptureModeRelaxed));
    fill<<<N / 256, 256, 0, s0>>>(a, 3.0f);
    TRY(cudaGetLastError());
    TRY(cudaEventRecord(e0, s0));
    TRY(cudaSetDevice(1));
    TRY(cudaStreamWaitEvent(s1, e0, 0));
    if (kind == 0) TRY(cudaMemcpyPeerAsync(b, 1, a, 0, N * sizeof(float), s1));
    if (kind == 1) TRY(cudaMemcpyAsync(b, a, N * sizeof(float), cudaMemcpyDefault, s1));
    if (kind == 2) {
        pull<<<N / 256, 256, 0, s1>>>(b, a);
        TRY(cudaGetLastError());
    }
    add_one<<<N / 256, 256, 0, s1>>>(b);
    TRY(cudaGetLastError());
    TRY(cudaEventRecord(e1, s1));
    TRY(cudaSetDevice(0));
    TRY(cudaStreamWaitEvent(s0, e1, 0));
    TRY(cudaStreamEndCapture(s0, &g));
    TRY(cudaGraphInstantiate(&x, g, 0));
    for (int rep = 0; rep < 2; rep++) {
        TRY(cudaSetDevice(1));
        TRY(cudaMemset(b, 0, N * sizeof(float)));
        TRY(cudaDeviceSynchronize());
        TRY(cudaSetDevice(0));
        TRY(cudaGraphLaunch(x, s0));
        TRY(cudaStreamSynchronize(s0));
        TRY(cudaSetDevice(1));
        TRY(cudaMemcpy(host, b, sizeof host, cudaMemcpyDeviceToHost));
        for (int i = 0; i < N; i++)
            if (host[i] != 4.0f + (float)i) {
                snprintf(why, sizeof why, "wrong value at %d: %g, expected %g", i, host[i], 4.0 + i);
                goto out;
            }
    }
out:
    cudaGetLastError();
    if (x) cudaGraphExecDestroy(x);
    if (g) cudaGraphDestroy(g);
    /* leave no stream in a capture */
    cudaStreamCaptureStatus cs;
    cudaSetDevice(0);
    if (cudaStreamIsCapturing(s0, &cs) == cudaSuccess && cs != cudaStreamCaptureStatusNone) {
        cudaGraph_t junk = NULL;
        cudaStreamEndCapture(s0, &junk);
        if (junk) cudaGraphDestroy(junk);
    }
    cudaGetLastError();
    printf("peer capture %-8s %s\n", name, why);
}

int main(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
        printf("peer capture: needs two devices (have %d)\n", n);
        return 0;
    }
    int can01 = 0, can10 = 0;
    cudaDeviceCanAccessPeer(&can01, 0, 1);
    cudaDeviceCanAccessPeer(&can10, 1, 0);
    printf("peer access 0->1 %d, 1->0 %d\n", can01, can10);
    float *a = NULL, *b = NULL;
    cudaStream_t s0, s1;
    cudaEvent_t e0, e1;
    cudaSetDevice(0);
    cudaDeviceEnablePeerAccess(1, 0);
    cudaMalloc(&a, N * sizeof(float));
    cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&e0, cudaEventDisableTiming);
    cudaSetDevice(1);
    cudaDeviceEnablePeerAccess(0, 0);
    cudaMalloc(&b, N * sizeof(float));
    cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&e1, cudaEventDisableTiming);
    cudaGetLastError();
    variant("peer", 0, a, b, s0, s1, e0, e1);
    variant("default", 1, a, b, s0, s1, e0, e1);
    variant("kernel", 2, a, b, s0, s1, e0, e1);
    return 0;
}
