/* Q8_0 tensor-core prefill GEMM benchmark and self-check, v1 (src/backend/cuda/cuda_gemm_q8_0_mma.h)
 * against v2 (cuda_gemm_q8_0_mma2.h, DSV4_CUDA_PREFILL_MMA=v2).
 *
 * Build: make BUILD=build-x bench-cuda   ->  build-x/bench/cuda_prefill_q8_0_bench
 * Run:   cuda_prefill_q8_0_bench [--n TOKENS] [--reps R] [--device N]   (exit 0 only if every check passes)
 *
 * For each DeepSeek V4 Flash Q8_0 shape and n in {2048, 256} (or --n): random valid weights
 * (quant_fill_random_row), n random activation rows quantized on the device
 * (dsv4_cuda_quant_act_rows), then each kernel, timed with cudaEvents over R launches after a
 * warm-up (v2 forced: min_ctas 0, so it runs even where the engine would pick v1). Prints int8
 * TOPS (2*in*out*n ops per launch) and the weight bytes per second; checks that every output was
 * written (NaN poison), that 256 sampled (row, token) values equal quant_dot_q8_0 bit for bit, and
 * that every v2 / v2n output equals v1's bit for bit. One line per shape:
 *   RESULT <in>-><out>@n<n> v1_ms v2_ms v2n_ms      (nan where the device cannot run that kernel)
 * v2 = the 256 x 128 tile (DSV4_CUDA_PREFILL_MMA=v2), v2n = the 128 x 128 one (=v2n). */
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
#include "backend/cuda/cuda_gemm_q8_0_mma2.h"
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

typedef struct {
    const void *w;
    uint64_t rb, in, out;
    const void *q;
    uint64_t ab;
    uint32_t n;
    float *y;
} gemm_op;

static dsv4_status launch(int v, const gemm_op *g, cudaStream_t st, dsv4_error *err) {
    if (v == 1)
        return dsv4_cuda_gemm_q8_0_mma(g->w, g->rb, g->in, g->out, g->q, g->ab, g->n, g->y, g->out, st, err);
    const int tile = v == 2 ? DSV4_Q8_0_MMA2_WIDE : DSV4_Q8_0_MMA2_NARROW;
    return dsv4_cuda_gemm_q8_0_mma2(tile, g->w, g->rb, g->in, g->out, g->q, g->ab, g->n, g->y, g->out, 0, st,
                                    err);
}

/* ms per launch over reps launches after 2 warm-ups */
static float time_ms(int v, const gemm_op *g, int reps, cudaStream_t st, cudaEvent_t e0, cudaEvent_t e1) {
    dsv4_error err = {};
    for (int w = 0; w < 2; w++) launch(v, g, st, &err);
    CK(cudaEventRecord(e0, st));
    for (int i = 0; i < reps; i++) launch(v, g, st, &err);
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    return ms / (float)reps;
}

int main(int argc, char **argv) {
    int n_arg = 0, reps = 10, device = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--n")) n_arg = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--device")) device = atoi(argv[i + 1]);
    }
    if (n_arg < 0 || reps < 1) {
        fprintf(stderr, "usage: cuda_prefill_q8_0_bench [--n TOKENS] [--reps R] [--device N]\n");
        return 2;
    }
    const int ns_default[2] = {2048, 256};
    const int *n_list = n_arg ? &n_arg : ns_default, n_count = n_arg ? 1 : 2;
    CK(cudaSetDevice(device));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, device));
    printf("device %s (sm_%d%d, %d SMs), %d reps\n", prop.name, prop.major, prop.minor,
           prop.multiProcessorCount, reps);
    if (!dsv4_cuda_q8_0_mma_device_ok(prop.major, prop.sharedMemPerBlockOptin)) {
        printf("device cannot run the Q8_0 MMA kernel (needs sm_80+ and %zu B of shared memory per block)\n",
               dsv4_cuda_q8_0_mma_smem_bytes());
        return 1;
    }
    /* kernels: 1 = v1, 2 = v2 (wide tile), 3 = v2n (narrow tile) */
    const char *const kname[4] = {"", "v1 ", "v2 ", "v2n"};
    bool run_ok[4] = {false, true, false, false};
    for (int v = 2; v <= 3; v++) {
        const int tile = v == 2 ? DSV4_Q8_0_MMA2_WIDE : DSV4_Q8_0_MMA2_NARROW;
        run_ok[v] = dsv4_cuda_q8_0_mma2_device_ok(tile, prop.major, prop.sharedMemPerBlockOptin);
        if (!run_ok[v])
            printf("device cannot run %s (needs %zu B of shared memory per block)\n", kname[v],
                   dsv4_cuda_q8_0_mma2_smem_bytes(tile));
    }
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    int fails = 0;
    for (int ni = 0; ni < n_count; ni++) {
        const int n = n_list[ni];
        double tot_ops = 0, tot_ms[4] = {0, 0, 0, 0};
        for (size_t si = 0; si < sizeof SHAPES / sizeof SHAPES[0]; si++) {
            const shape *s = &SHAPES[si];
            const uint64_t rb = (uint64_t)(s->in / 32) * 34, wbytes = rb * (uint64_t)s->out;
            const size_t ab = (size_t)(s->in / 32) * sizeof(dsv4_q8_0_act), ny = (size_t)n * s->out;
            uint8_t *hw = (uint8_t *)malloc(wbytes);
            float *hx = (float *)malloc((size_t)n * s->in * sizeof(float));
            float *hy[4] = {NULL, (float *)malloc(ny * sizeof(float)), (float *)malloc(ny * sizeof(float)),
                            (float *)malloc(ny * sizeof(float))};
            dsv4_q8_0_act *hq = (dsv4_q8_0_act *)malloc(ab);
            if (!hw || !hx || !hy[1] || !hy[2] || !hy[3] || !hq) {
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
            CK(cudaMalloc(&dy, ny * sizeof(float)));
            CK(cudaMemcpy(dw, hw, wbytes, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dx, hx, (size_t)n * s->in * sizeof(float), cudaMemcpyHostToDevice));
            dsv4_error err = {};
            if (dsv4_cuda_quant_act_rows(DSV4_TYPE_Q8_0, dx, dq, s->in, n, st, &err) != DSV4_OK) {
                printf("FAIL %-26s %s\n", s->name, err.msg);
                return 1;
            }
            const gemm_op g = {dw, rb, (uint64_t)s->in, (uint64_t)s->out, dq, ab, (uint32_t)n, dy};
            const double ops = 2.0 * (double)s->in * (double)s->out * n;
            float ms[4] = {0, NAN, NAN, NAN};
            for (int v = 1; v <= 3; v++) {
                if (!run_ok[v]) continue;
                CK(cudaMemset(dy, 0xff, ny * sizeof(float))); /* NaN poison */
                if (launch(v, &g, st, &err) != DSV4_OK) {
                    printf("FAIL %s %-26s %s\n", kname[v], s->name, err.msg);
                    fails++;
                    continue;
                }
                CK(cudaStreamSynchronize(st));
                CK(cudaMemcpy(hy[v], dy, ny * sizeof(float), cudaMemcpyDeviceToHost));
                size_t unwritten = 0, vs_v1 = 0;
                for (size_t i = 0; i < ny; i++) unwritten += isnan(hy[v][i]) != 0;
                if (v > 1)
                    for (size_t i = 0; i < ny; i++) vs_v1 += memcmp(&hy[1][i], &hy[v][i], 4) != 0;
                int bad = 0, samples = 256;
                for (int k = 0; k < samples; k++) {
                    const int64_t r = k == 0 ? s->out - 1 : (int64_t)(nxt() % (uint64_t)s->out);
                    const int t = k == 1 ? n - 1 : (int)(nxt() % (uint64_t)n);
                    quant_act_q8_0(hx + (size_t)t * s->in, hq, s->in);
                    const float ref = quant_dot_q8_0(hw + (uint64_t)r * rb, hq, s->in),
                                got = hy[v][(size_t)t * s->out + r];
                    if (memcmp(&ref, &got, 4) != 0) {
                        if (bad < 3)
                            printf("  %s row %lld token %d: %.9g vs CPU %.9g\n", kname[v], (long long)r, t,
                                   got, ref);
                        bad++;
                    }
                }
                ms[v] = time_ms(v, &g, reps, st, e0, e1);
                tot_ms[v] += ms[v];
                const bool ok = bad == 0 && unwritten == 0 && vs_v1 == 0;
                fails += !ok;
                printf("%s %s %-26s n=%d: %8.3f ms  %7.1f TOPS(int8)  weights %6.1f GB/s  "
                       "%d/%d sampled bitwise, %zu unwritten, %zu differ from v1\n",
                       ok ? "ok  " : "FAIL", kname[v], s->name, n, ms[v], ops / (ms[v] * 1e-3) / 1e12,
                       (double)wbytes / (ms[v] * 1e-3) / 1e9, samples - bad, samples, unwritten, vs_v1);
            }
            tot_ops += ops;
            printf("RESULT %lld->%lld@n%d %.4f %.4f %.4f\n", (long long)s->in, (long long)s->out, n, ms[1],
                   ms[2], ms[3]);
            CK(cudaFree(dw));
            CK(cudaFree(dx));
            CK(cudaFree(dq));
            CK(cudaFree(dy));
            free(hw), free(hx), free(hy[1]), free(hy[2]), free(hy[3]), free(hq);
        }
        for (int v = 1; v <= 3; v++)
            if (run_ok[v])
                printf("all shapes at n=%d: %s %.3f ms (%.1f TOPS)\n", n, kname[v], tot_ms[v],
                       tot_ops / (tot_ms[v] * 1e-3) / 1e12);
    }
    printf("%s: %d failure(s)\n", fails ? "Q8_0 MMA BENCH FAILED" : "Q8_0 MMA BENCH PASSED", fails);
    return fails ? 1 : 0;
}
