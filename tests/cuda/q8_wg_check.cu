/* GPU check (H100 / H200, sm_90a) of the exact Q8_0 warpgroup GEMM (cuda_gemm_q8_wg.h): random Q8_0
 * weights (row scales spread over 2^-12..2^4) and f32 activations (with outliers), the operands
 * prepared by the path's own conversions, and every output compared bit for bit with the CPU's
 * product: quant_dot_q8_0 of the weight row and quant_act_q8_0 of the activation slice. Small shapes
 * (edges: tokens and rows not multiples of the 128 x 128 tile, groups, one stage, one token) are
 * checked whole; the flash-shaped ones on 4096 sampled outputs each, and timed (median of 5, events)
 * to give their rate. Exit 0 = every compared output identical. The backend's switches select the kernel:
 * DSV4_CUDA_Q8_WG=fma (the fused update: compared within 1e-6 of the sum of |terms| instead),
 * DSV4_CUDA_Q8_WG_KERNEL=ws|pipe|v1 (the producer / consumer kernel's other forms, session 20's kernel).
 * Every output of every shape must have been written (the buffer starts as NaN; sampled shapes are scanned
 * whole for it), so a tile the persistent walk skips shows. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "quant/quant.h"
}
#include "backend/cuda/cuda_gemm_q8_wg.h"

#define CHECK_RNG_SEED 4242
#include "check_rng.h"
#include "q8_wg_data.h"

typedef struct shape {
    uint32_t n;
    uint64_t rows, in;
    uint32_t groups;
    int sampled; /* compare 4096 random outputs and time it */
} shape;

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static int sm_count; /* the persistent grid's CTAs at most (the backend passes its caps' count) */

static int run(const shape *s, cudaStream_t st) {
    const uint64_t R = s->rows * s->groups, L = s->in * s->groups, nbw = s->in / 32;
    const uint64_t wbytes = R * nbw * 34;
    uint8_t *w = q8wg_weights(R, s->in);
    float *x = q8wg_acts((uint64_t)s->n * L);

    void *dw, *dwc, *dxc;
    float *dxf, *dy;
    const size_t wc = dsv4_cuda_q8_wg_copy_bytes(R, s->in), xc = dsv4_cuda_q8_wg_copy_bytes(s->n, L);
    const size_t ybytes = (size_t)s->n * R * sizeof(float);
    if (cudaMalloc(&dw, wbytes) || cudaMalloc(&dwc, wc) || cudaMalloc(&dxc, xc) ||
        cudaMalloc((void **)&dxf, (size_t)s->n * L * 4) || cudaMalloc((void **)&dy, ybytes)) {
        printf("FAIL n=%u rows=%llu: device memory\n", s->n, (unsigned long long)s->rows);
        return 1;
    }
    cudaMemcpy(dw, w, wbytes, cudaMemcpyHostToDevice);
    cudaMemcpy(dxf, x, (size_t)s->n * L * 4, cudaMemcpyHostToDevice);
    cudaMemset(dy, 0xff, ybytes); /* NaN: an output never written shows */
    dsv4_error err;
    memset(&err, 0, sizeof err);
    dsv4_cuda_q8_wg_op op;
    memset(&op, 0, sizeof op);
    op.wq = (const uint16_t *)dwc,
    op.wd = (const float *)((uint8_t *)dwc + dsv4_cuda_q8_wg_scales_offset(R, s->in));
    op.in = s->in, op.rows = s->rows, op.groups = s->groups;
    op.xq = (const uint16_t *)dxc,
    op.xd = (const float *)((uint8_t *)dxc + dsv4_cuda_q8_wg_scales_offset(s->n, L));
    op.n = s->n, op.y = dy, op.y_stride = R, op.sm_count = (uint32_t)sm_count;
    if (dsv4_cuda_q8_wg_wconvert(dw, nbw * 34, s->in, R, dwc, st, &err) != DSV4_OK ||
        dsv4_cuda_q8_wg_xconvert(dxf, L, L, s->n, dxc, st, &err) != DSV4_OK ||
        dsv4_cuda_q8_wg_gemm(&op, st, &err) != DSV4_OK || cudaStreamSynchronize(st) != cudaSuccess) {
        printf("FAIL n=%u rows=%llu in=%llu: %s %s\n", s->n, (unsigned long long)s->rows,
               (unsigned long long)s->in, err.msg, cudaGetErrorString(cudaGetLastError()));
        return 1;
    }
    float med_ms = 0.0f;
    if (s->sampled) { /* the product alone, 5 times */
        cudaEvent_t a, b;
        cudaEventCreate(&a), cudaEventCreate(&b);
        float ms[5];
        for (int k = 0; k < 5; k++) {
            cudaEventRecord(a, st);
            dsv4_cuda_q8_wg_gemm(&op, st, &err);
            cudaEventRecord(b, st);
            cudaEventSynchronize(b);
            cudaEventElapsedTime(&ms[k], a, b);
        }
        qsort(ms, 5, sizeof ms[0], cmp_float);
        med_ms = ms[2];
        cudaEventDestroy(a), cudaEventDestroy(b);
    }
    float *y = (float *)malloc(ybytes);
    cudaMemcpy(y, dy, ybytes, cudaMemcpyDeviceToHost);
    dsv4_q8_0_act *act = (dsv4_q8_0_act *)malloc(nbw * sizeof *act);
    uint64_t compared = 0, bad = 0, bad_scalar = 0;
    const bool exact = dsv4_cuda_q8_wg_exact();
    double worst = 0.0; /* the fused form: |got - ref| / sum |terms| */
    const uint64_t total = (uint64_t)s->n * R, want = s->sampled ? 4096 : total;
    for (uint64_t i = 0; i < want; i++) {
        const uint64_t idx = s->sampled ? nxt() % total : i;
        const uint64_t t = idx / R, o = idx % R, g = o / s->rows;
        quant_act_q8_0(x + t * L + g * s->in, act, (int64_t)s->in);
        const float ref = quant_dot_q8_0(w + o * nbw * 34, act, (int64_t)s->in);
        const float refs = quant_dot_q8_0_scalar(w + o * nbw * 34, act, (int64_t)s->in);
        const float got = y[t * R + o];
        if (!exact) {
            double sa = 0.0; /* sum over blocks of |d_w d_x isum| bounds the rounding of the sum */
            for (uint64_t b = 0; b < nbw; b++) {
                const uint8_t *wb = w + o * nbw * 34 + b * 34;
                long long is = 0;
                for (int k = 0; k < 32; k++) is += (long long)(int8_t)wb[2 + k] * act[b].qs[k];
                sa += fabs((double)dsv4_f16_to_f32(*(const uint16_t *)wb) * act[b].d * (double)is);
            }
            const double rel =
                sa > 0 ? fabs((double)got - (double)ref) / sa : fabs((double)got - (double)ref);
            worst = rel > worst ? rel : worst;
            bad += !(rel <= 1e-6);
            compared++;
            continue;
        }
        if (memcmp(&ref, &got, 4) != 0) {
            if (bad < 4)
                printf("  token %llu row %llu: %.9g, CPU %.9g\n", (unsigned long long)t,
                       (unsigned long long)o, got, ref);
            bad++;
        }
        bad_scalar += memcmp(&refs, &got, 4) != 0;
        compared++;
    }
    uint64_t unwritten = 0;
    for (uint64_t i = 0; i < total; i++) unwritten += y[i] != y[i];
    bad += unwritten;
    const double ops = 2.0 * s->n * (double)R * (double)s->in;
    printf("%s n=%-5u rows=%-6llu in=%-5llu groups=%u: %llu of %llu outputs differ from quant_dot_q8_0 (%llu "
           "from "
           "the scalar form)",
           bad ? "FAIL" : "ok  ", s->n, (unsigned long long)s->rows, (unsigned long long)s->in, s->groups,
           (unsigned long long)bad, (unsigned long long)compared, (unsigned long long)bad_scalar);
    if (unwritten) printf(" [%llu outputs never written]", (unsigned long long)unwritten);
    if (!exact) printf(" [fused update: worst |d| / sum |terms| %.2e, bound 1e-6]", worst);
    if (s->sampled) printf("; %.3f ms, %.1f TOPS", med_ms, ops / (med_ms * 1e-3) / 1e12);
    printf("\n");
    cudaFree(dw), cudaFree(dwc), cudaFree(dxc), cudaFree(dxf), cudaFree(dy);
    free(w), free(x), free(y), free(act);
    return bad != 0;
}

int main(void) {
    cudaDeviceProp pr;
    if (cudaGetDeviceProperties(&pr, 0) != cudaSuccess ||
        !dsv4_cuda_q8_wg_device_ok(pr.major, pr.sharedMemPerBlockOptin)) {
        printf("FAIL q8_wg_check needs a compute capability 9.0 device with the sm_90a image\n");
        return 1;
    }
    sm_count = pr.multiProcessorCount;
    cudaStream_t st;
    cudaStreamCreate(&st);
    const shape shapes[] = {
        {1, 1, 64, 1, 0},          {5, 3, 64, 1, 0},         {128, 128, 256, 1, 0},
        {300, 200, 448, 1, 0},     {257, 130, 192, 3, 0},    {129, 255, 1024, 2, 0},
        {2048, 32768, 1024, 1, 1}, {2048, 4096, 8192, 1, 1}, {2048, 4096, 4096, 1, 1},
        {2048, 1024, 4096, 8, 1},  {2048, 1536, 4096, 1, 1}, {700, 600, 320, 2, 0},
        {1100, 2300, 128, 1, 0}, /* 162 tiles: more than an H200's 132 SMs, so CTAs walk on */
    };
    int fails = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) fails += run(&shapes[i], st);
    printf(fails ? "Q8 WG CHECK FAILED: %d\n" : "Q8 WG CHECK PASSED\n", fails);
    return fails ? 1 : 0;
}
