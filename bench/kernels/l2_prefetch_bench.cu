/* Would dense decode weights read faster if pulled into L2 while the step is busy with
 * latency-bound work? A recorded graph replays NSET independent iterations (rotating weight
 * sets, together far larger than L2), each:
 *   spin      a 1-block kernel that waits T us (stands for the attention phase: HBM idle)
 *   cold      spin, then the warp-direct Q8_0 matvec (dsv4_cuda_mvw) of M MB
 *   pf-bulk   spin on the main stream while a side stream prefetches the same M MB into L2
 *             (cp.async.bulk.prefetch.L2), join, then the matvec
 *   pf-line   as pf-bulk with one prefetch.global.L2::evict_last per 128-byte line
 * matvec time = (mode - spin) per iteration. sm_90 (bulk prefetch). */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

extern "C" {
#include "quant/quant.h"
}
#include "backend/cuda/cuda_mvw.h"

#define CK(x)                                                                                                \
    do {                                                                                                     \
        cudaError_t e_ = (x);                                                                                \
        if (e_ != cudaSuccess) {                                                                             \
            printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__);                  \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

__global__ void spin_kernel(long long ns) {
    long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

__global__ void pf_bulk_kernel(const uint8_t *p, long long bytes, int chunk) {
    for (long long o = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * chunk; o < bytes;
         o += (long long)gridDim.x * blockDim.x * chunk) {
        const long long n = bytes - o < chunk ? bytes - o : chunk;
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + o), "r"((unsigned)n) : "memory");
    }
}

__global__ void pf_line_kernel(const uint8_t *p, long long bytes) {
    for (long long o = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * 128; o < bytes;
         o += (long long)gridDim.x * blockDim.x * 128)
        asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(p + o));
}

static int cmp_f(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

enum { M_SPIN, M_COLD, M_BULK, M_LINE, M_ONLY };

#define NSET 12
static float run(int mode, cudaStream_t s, cudaStream_t side, uint8_t **w, int nmat, int64_t in, int64_t rows,
                 const void *x, float *y, long long spin_ns) {
    cudaEvent_t fork, join;
    CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    const uint64_t rb = (uint64_t)in / 32 * 34;
    const long long bytes = (long long)(rb * rows);
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    for (int i = 0; i < NSET; i++) {
        if (mode == M_BULK || mode == M_LINE) {
            CK(cudaEventRecord(fork, s));
            CK(cudaStreamWaitEvent(side, fork, 0));
            for (int m = 0; m < nmat; m++) {
                if (mode == M_BULK)
                    pf_bulk_kernel<<<16, 128, 0, side>>>(w[i * nmat + m], bytes, 16384);
                else
                    pf_line_kernel<<<132, 256, 0, side>>>(w[i * nmat + m], bytes);
            }
            CK(cudaEventRecord(join, side));
        }
        if (mode != M_ONLY) spin_kernel<<<1, 32, 0, s>>>(spin_ns);
        if (mode == M_BULK || mode == M_LINE) CK(cudaStreamWaitEvent(s, join, 0));
        if (mode != M_SPIN) {
            for (int m = 0; m < nmat; m++) {
                dsv4_cuda_mvw_seg sg = {DSV4_TYPE_Q8_0, w[i * nmat + m], rb, in, rows, x, y, 0};
                dsv4_error err;
                if (dsv4_cuda_mvw(&sg, 1, s, &err) != DSV4_OK) {
                    printf("mvw failed: %s\n", err.msg);
                    exit(1);
                }
            }
        }
    }
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float t[21];
    for (int r = 0; r < 24; r++) {
        CK(cudaEventRecord(e0, s));
        CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(e1, s));
        CK(cudaStreamSynchronize(s));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (r >= 3) t[r - 3] = ms * 1000.0f / NSET;
    }
    qsort(t, 21, sizeof(float), cmp_f);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return t[10];
}

int main(void) {
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device %s, L2 %d bytes, persisting max %d\n", prop.name, prop.l2CacheSize,
           prop.persistingL2CacheMaxSize);
    cudaStream_t s, side;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    /* shapes: wo_b-like 8192->4096 (35.7 MB), shared-expert-like 4096->2048 x? (8.9 MB), two 35.7 MB */
    struct {
        const char *name;
        int64_t in, rows;
        int nmat;
    } cases[] = {{"8192->4096 (35.7 MB)", 8192, 4096, 1},
                 {"4096->4096 (17.8 MB)", 4096, 4096, 1},
                 {"4096->1024 (4.5 MB)", 4096, 1024, 1},
                 {"2 x 8192->4096 (71 MB)", 8192, 4096, 2}};
    dsv4_q8_0_act *x;
    float *y;
    CK(cudaMalloc(&x, 16384 / 32 * sizeof(dsv4_q8_0_act)));
    CK(cudaMemset(x, 0, 16384 / 32 * sizeof(dsv4_q8_0_act)));
    CK(cudaMalloc(&y, 1 << 20));
    const long long spins[2] = {20000, 40000};
    for (unsigned c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int64_t in = cases[c].in, rows = cases[c].rows;
        const int nm = cases[c].nmat;
        const size_t bytes = (size_t)in / 32 * 34 * rows;
        uint8_t *w[NSET * 2];
        for (int i = 0; i < NSET * nm; i++) {
            CK(cudaMalloc(&w[i], bytes));
            CK(cudaMemset(w[i], 0x11, bytes));
        }
        for (int sp = 0; sp < 2; sp++) {
            float r[5];
            for (int m = 0; m < 5; m++) r[m] = run(m, s, side, w, nm, in, rows, x, y, spins[sp]);
            printf("RESULT %s spin %lld us: spin %.2f cold %.2f pf-bulk %.2f pf-line %.2f mvw-only %.2f | "
                   "matvec after spin: cold %.2f us, bulk-prefetched %.2f us, line-prefetched %.2f us\n",
                   cases[c].name, spins[sp] / 1000, r[0], r[1], r[2], r[3], r[4], r[1] - r[0], r[2] - r[0],
                   r[3] - r[0]);
        }
        for (int i = 0; i < NSET * nm; i++) CK(cudaFree(w[i]));
    }

    return 0;
}
