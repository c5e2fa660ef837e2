/* Q8_0 tensor-core prefill GEMM benchmark and self-check (src/backend/cuda/cuda_gemm_q8_0_mma.h).
 *
 * Build: make BUILD=build-x bench-cuda   ->  build-x/bench/cuda_prefill_q8_0_bench
 * Run:   cuda_prefill_q8_0_bench [--n TOKENS] [--reps R] [--device N]   (exit 0 only if every check passes)
 *
 * For each DeepSeek V4 Flash Q8_0 shape: random valid weights (quant_fill_random_row), n (default
 * 2048) random activation rows quantized on the device (dsv4_cuda_quant_act_rows), then the GEMM,
 * timed with cudaEvents over R launches after a warm-up. Prints int8 TOPS (2*in*out*n ops per
 * launch), time per token, and the weight bytes per second; checks that every output was written
 * (NaN poison) and that 256 sampled (row, token) values equal quant_dot_q8_0 bit for bit. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "quant/quant.h"
}
#include "backend/cuda/cuda_gemm_q8_0_mma.h"
#include "backend/cuda/cuda_matvec.h"

#define CK(call)                                                                                             \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess) {                                                                             \
            fprintf(stderr, "FATAL: %s at %s:%d: %s\n", #call, __FILE__, __LINE__, cudaGetErrorString(e_));  \
            exit(2);                                                                                         \
        }                                                                                                    \
    } while (0)

typedef struct {
    const char *name;
    int64_t in, out;
} shape;

static const shape SHAPES[] = {
    {"attn_q_b 1024->32768", 1024, 32768},    {"4096->32768", 4096, 32768},
    {"attn_q_a 4096->1024", 4096, 1024},      {"attn_kv 4096->512", 4096, 512},
    {"attn_output_a 4096->1024", 4096, 1024}, {"attn_output_b 8192->4096", 8192, 4096},
    {"shexp gate/up 4096->2048", 4096, 2048}, {"shexp down 2048->4096", 2048, 4096},
    {"output 4096->129280", 4096, 129280},
};

#define CHECK_RNG_SEED 7
#include "../../tests/cuda/check_rng.h"

int main(int argc, char **argv) {
    int n = 2048, reps = 10, device = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--n")) n = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--device")) device = atoi(argv[i + 1]);
    }
    if (n < 1 || reps < 1) {
        fprintf(stderr, "usage: cuda_prefill_q8_0_bench [--n TOKENS] [--reps R] [--device N]\n");
        return 2;
    }
    CK(cudaSetDevice(device));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, device));
    printf("device %s (sm_%d%d, %d SMs), n = %d tokens, %d reps\n", prop.name, prop.major, prop.minor,
           prop.multiProcessorCount, n, reps);
    if (!dsv4_cuda_q8_0_mma_device_ok(prop.major, prop.sharedMemPerBlockOptin)) {
        printf("device cannot run the Q8_0 MMA kernel (needs sm_80+ and %zu B of shared memory per block)\n",
               dsv4_cuda_q8_0_mma_smem_bytes());
        return 1;
    }
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    int fails = 0;
    double tot_ops = 0, tot_ms = 0;
    for (size_t si = 0; si < sizeof SHAPES / sizeof SHAPES[0]; si++) {
        const shape *s = &SHAPES[si];
        const uint64_t rb = (uint64_t)(s->in / 32) * 34, wbytes = rb * (uint64_t)s->out;
        const size_t ab = (size_t)(s->in / 32) * sizeof(dsv4_q8_0_act);
        uint8_t *hw = (uint8_t *)malloc(wbytes);
        float *hx = (float *)malloc((size_t)n * s->in * sizeof(float));
        float *hy = (float *)malloc((size_t)n * s->out * sizeof(float));
        dsv4_q8_0_act *hq = (dsv4_q8_0_act *)malloc(ab);
        if (!hw || !hx || !hy || !hq) {
            fprintf(stderr, "out of host memory\n");
            return 2;
        }
        uint64_t rng = 1234 + si;
        for (int64_t r = 0; r < s->out; r++)
            quant_fill_random_row(DSV4_TYPE_Q8_0, &rng, 1.0f / sqrtf((float)s->in), hw + (uint64_t)r * rb,
                                  s->in);
        for (size_t i = 0; i < (size_t)n * s->in; i++) hx[i] = uni() * (i % 977 == 0 ? 8.0f : 1.0f);
        void *dw, *dq;
        float *dx, *dy;
        CK(cudaMalloc(&dw, wbytes));
        CK(cudaMalloc(&dx, (size_t)n * s->in * sizeof(float)));
        CK(cudaMalloc(&dq, ab * n));
        CK(cudaMalloc(&dy, (size_t)n * s->out * sizeof(float)));
        CK(cudaMemcpy(dw, hw, wbytes, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dx, hx, (size_t)n * s->in * sizeof(float), cudaMemcpyHostToDevice));
        CK(cudaMemset(dy, 0xff, (size_t)n * s->out * sizeof(float))); /* NaN poison */
        dsv4_error err = {};
        if (dsv4_cuda_quant_act_rows(DSV4_TYPE_Q8_0, dx, dq, s->in, n, st, &err) != DSV4_OK ||
            dsv4_cuda_gemm_q8_0_mma(dw, rb, (uint64_t)s->in, (uint64_t)s->out, dq, ab, (uint32_t)n, dy,
                                    (uint64_t)s->out, st, &err) != DSV4_OK) {
            printf("FAIL %-26s %s\n", s->name, err.msg);
            fails++;
            continue;
        }
        CK(cudaStreamSynchronize(st));
        CK(cudaMemcpy(hy, dy, (size_t)n * s->out * sizeof(float), cudaMemcpyDeviceToHost));
        size_t unwritten = 0;
        for (size_t i = 0; i < (size_t)n * s->out; i++) unwritten += isnan(hy[i]) != 0;
        int bad = 0, samples = 256;
        for (int k = 0; k < samples; k++) {
            const int64_t r = k == 0 ? s->out - 1 : (int64_t)(nxt() % (uint64_t)s->out);
            const int t = k == 1 ? n - 1 : (int)(nxt() % (uint64_t)n);
            quant_act_q8_0(hx + (size_t)t * s->in, hq, s->in);
            const float ref = quant_dot_q8_0(hw + (uint64_t)r * rb, hq, s->in),
                        got = hy[(size_t)t * s->out + r];
            if (memcmp(&ref, &got, 4) != 0) {
                if (bad < 3) printf("  row %lld token %d: %.9g vs CPU %.9g\n", (long long)r, t, got, ref);
                bad++;
            }
        }
        for (int w = 0; w < 2; w++)
            dsv4_cuda_gemm_q8_0_mma(dw, rb, (uint64_t)s->in, (uint64_t)s->out, dq, ab, (uint32_t)n, dy,
                                    (uint64_t)s->out, st, &err);
        CK(cudaEventRecord(e0, st));
        for (int i = 0; i < reps; i++)
            dsv4_cuda_gemm_q8_0_mma(dw, rb, (uint64_t)s->in, (uint64_t)s->out, dq, ab, (uint32_t)n, dy,
                                    (uint64_t)s->out, st, &err);
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        CK(cudaGetLastError());
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        ms /= (float)reps;
        const double ops = 2.0 * (double)s->in * (double)s->out * n;
        tot_ops += ops, tot_ms += ms;
        const bool ok = bad == 0 && unwritten == 0;
        fails += !ok;
        printf("%s %-26s n=%d: %8.3f ms  %7.1f TOPS(int8)  %7.2f us/token  weights %6.1f GB/s  "
               "%d/%d sampled bitwise, %zu unwritten\n",
               ok ? "ok  " : "FAIL", s->name, n, ms, ops / (ms * 1e-3) / 1e12, ms * 1e3 / n,
               (double)wbytes / (ms * 1e-3) / 1e9, samples - bad, samples, unwritten);
        CK(cudaFree(dw));
        CK(cudaFree(dx));
        CK(cudaFree(dq));
        CK(cudaFree(dy));
        free(hw), free(hx), free(hy), free(hq);
    }
    printf("%s: all shapes %.3f ms per %d-token pass (%.1f TOPS), %d failure(s)\n",
           fails ? "Q8_0 MMA BENCH FAILED" : "Q8_0 MMA BENCH PASSED", tot_ms, n,
           tot_ops / (tot_ms * 1e-3) / 1e12, fails);
    return fails ? 1 : 0;
}
