/* One-token routed-expert benchmark and check: the 2-launch path (src/backend/cuda/cuda_moe_decode.h)
 * against the 5-launch kernel sequence the backend ran before (cuda_ops_moe.cu moe_decode_fused,
 * which DSV4_CUDA_MOE_DECODE=old still selects: quantize x, gate+up pair matvec, mid + Q8_K, down
 * matvec, slot sum), at the DeepSeek V4 Flash shapes: n_embd 4096, n_ff 2048, 256 experts, k = 6.
 *
 * Build: make BUILD=build-x bench-cuda  ->  build-x/bench/cuda_moe_decode_bench
 * Run:   cuda_moe_decode_bench [--device N]   (exit 0 only if every check passes; ~20 s on an H200)
 *
 * Cases: q2 (gate/up IQ2_XXS, down Q2_K: 42.4 MB of expert rows per token) and q4 (Q4_K: 84.9 MB).
 * Expert tensors are random bytes made in device memory with random finite f16 scales (any bytes
 * are valid blocks of these types): 1.8 / 3.6 GB, and 64 random expert-id sets (6 distinct of 256)
 * are rotated through, so the timed working set is the whole tensors (>> the 60 MB L2).
 * Timing: a CUDA graph of 64 decodes (one per id set, back to back in one stream) replayed 25
 * times after 2 warm-up replays; the median per decode is reported (also stream launches without a
 * graph, for reference). GB/s counts the expert rows read; % of the measured device copy rate
 * (cudaMemcpy D2D of 1 GiB, read + write counted).
 * Checks of the new path (debug outputs of the kernels), against the quant module and the CPU backend:
 *   - gate/up rows and down rows (per slot) vs quant_dot_*: |y - ref| <= 1e-5 S + (n_blocks+8) 2^-24 S,
 *     S = sum over superblocks of |scale part| + |min part| (IQ2_XXS: |term|); the count of rows
 *     bit-equal to quant_dot_* is printed (the kernels add in the CPU's order: all of them);
 *   - the mids vs the mid expression on the CPU (cpu_silu; 1e-6 relative, bitwise count printed),
 *     the mid Q8_K blocks == quant_act_q8_k of the device mids (bitwise), the output == the slot sum
 *     of the per-slot down rows in slot order (bitwise);
 *   - the output vs the CPU backend's moe op on the same inputs: max |d| <= 1e-5 max |ref|;
 *   - determinism: the same set twice (another set in between) gives the same bits; a launch with
 *     only the first 3 slots gives the same bits for those slots' rows; an invalid id gives NaN. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "backend/backend.h"
#include "backend/cpu/cpu_internal.h" /* cpu_silu */
#include "quant/quant.h"
}
#include "backend/cuda/cuda_act_quant.cuh"
#include "backend/cuda/cuda_backend.h" /* cu_silu (the old mid kernel's copy) */
#include "backend/cuda/cuda_matvec.h"
#include "backend/cuda/cuda_moe_decode.h"

#define CK(call)                                                                                             \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess) {                                                                             \
            fprintf(stderr, "FATAL: %s at %s:%d: %s\n", #call, __FILE__, __LINE__, cudaGetErrorString(e_));  \
            exit(2);                                                                                         \
        }                                                                                                    \
    } while (0)
#define DK(call)                                                                                             \
    do {                                                                                                     \
        dsv4_error er_;                                                                                      \
        memset(&er_, 0, sizeof er_);                                                                         \
        dsv4_status s_ = (call);                                                                             \
        if (s_ != DSV4_OK) {                                                                                 \
            fprintf(stderr, "FATAL: %s at %s:%d: %s\n", #call, __FILE__, __LINE__, er_.msg);                 \
            exit(2);                                                                                         \
        }                                                                                                    \
    } while (0)

#define EMBD 4096
#define FF 2048
#define NE 256
#define K 6
#define N_SETS 64
#define N_BATCH 25
#define CLAMP 10.0f
#define QK_BYTES 292

static int g_fail = 0;
static uint64_t g_rng = 0x5eed1234abcdull;
static uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static uint64_t rnd(void) { return mix64(g_rng++); }
static float urand(void) { return (float)((rnd() >> 11) * (1.0 / 9007199254740992.0)); } /* [0, 1) */

/* ---- synthetic expert tensors on the device ---- */
static __global__ void fill_words(uint64_t *p, size_t n, uint64_t seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = seed + i * 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        p[i] = z ^ (z >> 31);
    }
}
/* f16 scales at byte doff (and moff when >= 0) of every block: finite, |v| in [2^-10, 2^-6] */
static __global__ void fix_scales(uint8_t *p, size_t nblocks, int bb, int doff, int moff, uint64_t seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < nblocks;
         i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = (seed ^ (i * 0xbf58476d1ce4e5b9ull)) * 0x94d049bb133111ebull;
        z ^= z >> 29;
        const float a = ldexpf(1.0f + (float)(z & 1023) / 1024.0f, -10 + (int)((z >> 10) % 4));
        *(unsigned short *)(p + i * bb + doff) = __half_as_ushort(__float2half_rn((z >> 20) & 1 ? -a : a));
        if (moff >= 0) *(unsigned short *)(p + i * bb + moff) = __half_as_ushort(__float2half_rn(a * 0.5f));
    }
}
static uint8_t *make_tensor(uint32_t type, int in, int rows, uint64_t *eb) {
    uint64_t rb = 0;
    dsv4_type_row_bytes(type, (uint64_t)in, &rb);
    *eb = rb * rows;
    const size_t bytes = (size_t)*eb * NE;
    uint8_t *d;
    CK(cudaMalloc((void **)&d, bytes));
    fill_words<<<4096, 256>>>((uint64_t *)d, bytes / 8, rnd());
    const int bb = type == DSV4_TYPE_IQ2_XXS ? 66 : type == DSV4_TYPE_Q2_K ? 84 : 144;
    const int doff = type == DSV4_TYPE_Q2_K ? 80 : 0, moff = type == DSV4_TYPE_Q2_K   ? 82
                                                             : type == DSV4_TYPE_Q4_K ? 2
                                                                                      : -1;
    fix_scales<<<4096, 256>>>(d, bytes / bb, bb, doff, moff, rnd());
    CK(cudaGetLastError());
    return d;
}

/* ---- the 5-launch sequence (moe_decode_fused's kernels; mid and sum kernels copied) ---- */
#define MIDQ_WARPS 8
static __global__ void __launch_bounds__(MIDQ_WARPS * 32)
    old_mid_q8k_kernel(const float *g, const float *u, const float *w, uint64_t nblocks, uint32_t ff,
                       float clamp, int clamp_on, uint8_t *midq) {
    const uint64_t b = (uint64_t)blockIdx.x * MIDQ_WARPS + (threadIdx.x >> 5);
    if (b >= nblocks) return;
    const int lane = threadIdx.x & 31;
    const uint64_t i0 = b * 256 + (uint64_t)lane * 8;
    const float wr = w[i0 / ff];
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        float gv = g[i0 + j], uv = u[i0 + j];
        if (clamp_on) {
            if (gv > clamp) gv = clamp;
            if (uv > clamp) uv = clamp;
            if (uv < -clamp) uv = -clamp;
        }
        v[j] = cu_silu(gv) * uv * wr;
    }
    act_q8_k_block(v, lane, midq + b * 292);
}
static __global__ void old_sum_kernel(const float *y, uint32_t k, uint32_t embd, float *out) {
    const uint32_t d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= embd) return;
    float acc = 0.0f;
    for (uint32_t s = 0; s < k; s++) acc += y[(size_t)s * embd + d];
    out[d] = acc;
}

struct bench_case {
    const char *name;
    uint32_t tg, td;
    uint8_t *gate, *up, *down;
    uint64_t geb, deb;
    int32_t *ids;   /* [N_SETS + 1][K] device; set N_SETS has an invalid id */
    float *wts, *x; /* [N_SETS + 1][K], [N_SETS + 1][EMBD] */
    float *out;     /* [N_SETS + 1][EMBD] */
    /* scratch */
    void *xq, *mq;
    float *gu, *y, *mid, *gu_dbg, *y_dbg;
    int32_t h_ids[N_SETS + 1][K];
    float h_w[N_SETS + 1][K];
    float *h_x; /* [N_SETS + 1][EMBD] */
};

static dsv4_cuda_mv_ctx g_mv;
static dsv4_cuda_moe_dec_ctx g_md;

static void run_old(bench_case *c, int set, cudaStream_t st) {
    const int32_t *ids = c->ids + set * K;
    DK(dsv4_cuda_quant_act_rows(c->tg, c->x + (size_t)set * EMBD, c->xq, EMBD, 1, st, &er_));
    DK(dsv4_cuda_matvec_experts_pair(&g_mv, c->tg, c->gate, c->up, EMBD, FF, NE, ids, K, c->xq, 0, c->gu, st,
                                     &er_));
    const uint64_t nb = (uint64_t)K * FF / 256;
    old_mid_q8k_kernel<<<(unsigned)((nb + MIDQ_WARPS - 1) / MIDQ_WARPS), MIDQ_WARPS * 32, 0, st>>>(
        c->gu, c->gu + (size_t)K * FF, c->wts + set * K, nb, FF, CLAMP, CLAMP > 1.0e-6f, (uint8_t *)c->mq);
    DK(dsv4_cuda_matvec_experts(&g_mv, c->td, c->down, FF, EMBD, NE, ids, K, c->mq, (FF / 256) * QK_BYTES,
                                c->y, st, &er_));
    old_sum_kernel<<<EMBD / 256, 256, 0, st>>>(c->y, K, EMBD, c->out + (size_t)set * EMBD);
}
static int g_no_pdl = 0; /* run_new's down kernel: ordinary launch instead of PDL */
static void run_new(bench_case *c, int set, int k, bool debug, cudaStream_t st) {
    dsv4_cuda_moe_dec_args a;
    memset(&a, 0, sizeof a);
    a.gate_type = c->tg, a.down_type = c->td;
    a.gate = c->gate, a.up = c->up, a.down = c->down;
    a.n_embd = EMBD, a.n_ff = FF, a.n_expert = NE;
    a.ids = c->ids + set * K, a.weights = c->wts + set * K, a.k = k;
    a.x = c->x + (size_t)set * EMBD, a.clamp = CLAMP, a.out = c->out + (size_t)set * EMBD;
    a.mid = c->mid, a.midq = c->mq;
    if (debug) a.gu_debug = c->gu_dbg, a.y_debug = c->y_dbg;
    a.no_pdl = g_no_pdl;
    DK(dsv4_cuda_moe_decode(&g_md, &a, st, &er_));
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
/* median us per decode: a graph of N_SETS decodes replayed N_BATCH times; *stream_us: the same
 * launches without a graph */
static double time_path(bench_case *c, bool is_new, cudaStream_t st, double *stream_us) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int s = 0; s < N_SETS; s++) is_new ? run_new(c, s, K, false, st) : run_old(c, s, st);
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int w = 0; w < 2; w++) CK(cudaGraphLaunch(ge, st));
    double t[N_BATCH];
    for (int b = 0; b < N_BATCH; b++) {
        CK(cudaEventRecord(e0, st));
        CK(cudaGraphLaunch(ge, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t[b] = ms * 1e3 / N_SETS;
    }
    qsort(t, N_BATCH, sizeof(double), cmp_double);
    for (int r = 0; r < 5; r++) {
        CK(cudaEventRecord(e0, st));
        for (int s = 0; s < N_SETS; s++) is_new ? run_new(c, s, K, false, st) : run_old(c, s, st);
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        const double us = ms * 1e3 / N_SETS;
        if (r == 0 || us < *stream_us) *stream_us = us;
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    return t[N_BATCH / 2];
}

static double measure_copy_bw(void) {
    const size_t bytes = (size_t)1 << 30;
    void *a, *b;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    CK(cudaMemset(a, 1, bytes));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    double t[7];
    for (int r = 0; r < 7; r++) {
        CK(cudaEventRecord(e0, 0));
        CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0));
        CK(cudaEventRecord(e1, 0));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t[r] = ms * 1e-3;
    }
    qsort(t, 7, sizeof(double), cmp_double);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaFree(a));
    CK(cudaFree(b));
    return 2.0 * bytes / t[3];
}

/* ---- host reference ---- */
static float ref_dot(uint32_t type, const uint8_t *w, const dsv4_q8_k *x, int n) {
    return type == DSV4_TYPE_IQ2_XXS ? quant_dot_iq2_xxs(w, x, n)
           : type == DSV4_TYPE_Q2_K  ? quant_dot_q2_k(w, x, n)
                                     : quant_dot_q4_k(w, x, n);
}
/* S of the bound: per superblock |scale part| + |min part| (each from quant_dot of the block with
 * the other scale zeroed), or |term| for IQ2_XXS. */
static double row_S(uint32_t type, const uint8_t *w, const dsv4_q8_k *x, int n) {
    const int bb = type == DSV4_TYPE_IQ2_XXS ? 66 : type == DSV4_TYPE_Q2_K ? 84 : 144;
    double S = 0;
    uint8_t blk[144];
    for (int b = 0; b < n / 256; b++) {
        const uint8_t *p = w + (size_t)b * bb;
        if (type == DSV4_TYPE_IQ2_XXS) {
            S += fabs((double)ref_dot(type, p, x + b, 256));
            continue;
        }
        const int doff = type == DSV4_TYPE_Q2_K ? 80 : 0, moff = doff + 2;
        memcpy(blk, p, bb);
        memset(blk + moff, 0, 2);
        S += fabs((double)ref_dot(type, blk, x + b, 256));
        memcpy(blk, p, bb);
        memset(blk + doff, 0, 2);
        S += fabs((double)ref_dot(type, blk, x + b, 256));
    }
    return S;
}
static bool within(double y, double ref, double S, int nb, double *worst) {
    const double err = fabs(y - ref);
    if (S > 0 && err / S > *worst) *worst = err / S;
    return err <= 1e-5 * S + (nb + 8) * ldexp(1.0, -24) * S;
}
static void report(bool ok, const char *what) {
    printf("  %s %s\n", ok ? "ok  " : "FAIL", what);
    g_fail += !ok;
}

/* The new path on set `set` with debug outputs, checked against the CPU; returns the output. */
static void check_set(bench_case *c, int set, dsv4_backend *cpu, cudaStream_t st, float *out_h) {
    run_new(c, set, K, true, st);
    CK(cudaStreamSynchronize(st));
    CK(cudaGetLastError());
    const int nb = K * FF / 256;
    float *gu = (float *)malloc(sizeof(float) * 2 * K * FF), *mid = (float *)malloc(sizeof(float) * K * FF);
    float *y = (float *)malloc(sizeof(float) * K * EMBD);
    uint8_t *mq = (uint8_t *)malloc((size_t)nb * QK_BYTES);
    CK(cudaMemcpy(gu, c->gu_dbg, sizeof(float) * 2 * K * FF, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(mid, c->mid, sizeof(float) * K * FF, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(y, c->y_dbg, sizeof(float) * K * EMBD, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(mq, c->mq, (size_t)nb * QK_BYTES, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(out_h, c->out + (size_t)set * EMBD, sizeof(float) * EMBD, cudaMemcpyDeviceToHost));
    /* the K experts' rows, compact: expert s of the copies is ids[s] */
    uint64_t grb = 0, drb = 0;
    dsv4_type_row_bytes(c->tg, EMBD, &grb);
    dsv4_type_row_bytes(c->td, FF, &drb);
    uint8_t *hg = (uint8_t *)malloc(c->geb * K), *hu = (uint8_t *)malloc(c->geb * K),
            *hd = (uint8_t *)malloc(c->deb * K);
    for (int s = 0; s < K; s++) {
        const int e = c->h_ids[set][s];
        CK(cudaMemcpy(hg + c->geb * s, c->gate + c->geb * e, c->geb, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hu + c->geb * s, c->up + c->geb * e, c->geb, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hd + c->deb * s, c->down + c->deb * e, c->deb, cudaMemcpyDeviceToHost));
    }
    const float *x = c->h_x + (size_t)set * EMBD;
    dsv4_q8_k *xq = (dsv4_q8_k *)malloc(sizeof(dsv4_q8_k) * EMBD / 256);
    quant_act_q8_k(x, xq, EMBD);
    char msg[1024];
    /* gate / up rows */
    int bad = 0, same = 0;
    double worst = 0;
    for (int s = 0; s < K; s++)
        for (int r = 0; r < FF; r++)
            for (int h = 0; h < 2; h++) {
                const uint8_t *row = (h ? hu : hg) + c->geb * s + grb * r;
                const float reff = ref_dot(c->tg, row, xq, EMBD);
                const double ref = reff, S = row_S(c->tg, row, xq, EMBD);
                bad += !within(gu[2 * (s * FF + r) + h], ref, S, EMBD / 256, &worst);
                same += memcmp(&gu[2 * (s * FF + r) + h], &reff, 4) == 0;
            }
    snprintf(msg, sizeof msg,
             "set %d: %d gate/up rows vs quant_dot: %d out of bound (worst |y-ref|/S %.2e), %d bitwise equal "
             "(the CPU's order: all expected)",
             set, 2 * K * FF, bad, worst, same);
    report(bad == 0, msg);
    /* mids: the mid expression on the CPU from the device's g and u */
    int mid_diff = 0, mid_bad = 0;
    for (int s = 0; s < K; s++)
        for (int r = 0; r < FF; r++) {
            float gv = gu[2 * (s * FF + r)], uv = gu[2 * (s * FF + r) + 1];
            if (gv > CLAMP) gv = CLAMP;
            if (uv > CLAMP) uv = CLAMP;
            if (uv < -CLAMP) uv = -CLAMP;
            volatile float m1 = cpu_silu(gv) * uv;
            volatile float m = m1 * c->h_w[set][s];
            const float got = mid[s * FF + r];
            mid_diff += memcmp(&got, (const void *)&m, 4) != 0;
            mid_bad += !(fabs((double)got - (double)m) <= 1e-6 * fabs((double)m) + 1e-30);
        }
    snprintf(msg, sizeof msg, "set %d: mids vs the CPU expression: %d of %d differ bitwise, %d beyond 1e-6",
             set, mid_diff, K * FF, mid_bad);
    report(mid_bad == 0, msg);
    /* mid Q8_K blocks */
    dsv4_q8_k *mref = (dsv4_q8_k *)malloc(sizeof(dsv4_q8_k) * nb);
    quant_act_q8_k(mid, mref, (int64_t)K * FF);
    int mq_bad = 0;
    for (int b = 0; b < nb; b++) mq_bad += memcmp(mq + (size_t)b * QK_BYTES, &mref[b], QK_BYTES) != 0;
    snprintf(msg, sizeof msg, "set %d: mid Q8_K blocks == quant_act_q8_k(device mids): %d of %d differ", set,
             mq_bad, nb);
    report(mq_bad == 0, msg);
    /* down rows per slot, and the slot sum */
    bad = 0, worst = 0, same = 0;
    int sum_bad = 0;
    for (int r = 0; r < EMBD; r++) {
        float acc = 0.0f;
        for (int s = 0; s < K; s++) {
            const uint8_t *row = hd + c->deb * s + drb * r;
            const dsv4_q8_k *xs = (const dsv4_q8_k *)(mq + (size_t)s * (FF / 256) * QK_BYTES);
            const float reff = ref_dot(c->td, row, xs, FF);
            const double ref = reff, S = row_S(c->td, row, xs, FF);
            bad += !within(y[(size_t)s * EMBD + r], ref, S, FF / 256, &worst);
            same += memcmp(&y[(size_t)s * EMBD + r], &reff, 4) == 0;
            volatile float a2 = acc + y[(size_t)s * EMBD + r];
            acc = a2;
        }
        sum_bad += memcmp(&acc, &out_h[r], 4) != 0;
    }
    snprintf(
        msg, sizeof msg,
        "set %d: %d down rows vs quant_dot: %d out of bound (worst |y-ref|/S %.2e), %d bitwise equal (all "
        "expected)",
        set, K * EMBD, bad, worst, same);
    report(bad == 0, msg);
    snprintf(msg, sizeof msg, "set %d: output == slot-ordered sum of the down rows: %d of %d differ", set,
             sum_bad, EMBD);
    report(sum_bad == 0, msg);
    /* end to end: the CPU backend's moe on the same inputs */
    dsv4_tensor tg, tu, td;
    memset(&tg, 0, sizeof tg);
    tg.name = "gate", tg.type = c->tg, tg.n_dims = 3, tg.ne[0] = EMBD, tg.ne[1] = FF, tg.ne[2] = K,
    tg.ne[3] = 1;
    tg.row_bytes = grb, tg.nbytes = c->geb * K, tg.data = hg;
    tu = tg, tu.name = "up", tu.data = hu;
    memset(&td, 0, sizeof td);
    td.name = "down", td.type = c->td, td.n_dims = 3, td.ne[0] = FF, td.ne[1] = EMBD, td.ne[2] = K,
    td.ne[3] = 1;
    td.row_bytes = drb, td.nbytes = c->deb * K, td.data = hd;
    int32_t sel[K];
    for (int s = 0; s < K; s++) sel[s] = s;
    float *ref = (float *)malloc(sizeof(float) * EMBD);
    dsv4_error err;
    memset(&err, 0, sizeof err);
    if (cpu->ops->moe(cpu->ctx, &tg, &tu, &td, x, 1, sel, c->h_w[set], K, CLAMP, ref, &err) != DSV4_OK) {
        snprintf(msg, sizeof msg, "set %d: cpu moe: %s", set, err.msg);
        report(false, msg);
    } else {
        double maxd = 0, maxr = 0;
        int same = 0;
        for (int r = 0; r < EMBD; r++) {
            const double d = fabs((double)out_h[r] - (double)ref[r]);
            if (!(d <= maxd)) maxd = d;
            if (fabs((double)ref[r]) > maxr) maxr = fabs((double)ref[r]);
            same += memcmp(&out_h[r], &ref[r], 4) == 0;
        }
        const double rel = maxr > 0 ? maxd / maxr : maxd;
        snprintf(msg, sizeof msg,
                 "set %d: output vs CPU backend moe: max|d|/max|ref| %.3e (<= 1e-5), %d of %d bitwise", set,
                 rel, same, EMBD);
        report(rel <= 1e-5, msg);
    }
    free(gu), free(mid), free(y), free(mq), free(hg), free(hu), free(hd), free(xq), free(mref), free(ref);
}

static int read_out(bench_case *c, int set, float *h) {
    return cudaMemcpy(h, c->out + (size_t)set * EMBD, sizeof(float) * EMBD, cudaMemcpyDeviceToHost) ==
           cudaSuccess;
}

static void run_case(const char *name, uint32_t tg, uint32_t td, dsv4_backend *cpu, cudaStream_t st,
                     double copy_bw) {
    const int fail0 = g_fail;
    bench_case c;
    memset(&c, 0, sizeof c);
    c.name = name, c.tg = tg, c.td = td;
    printf("== case %s: gate/up %s, down %s, n_embd %d, n_ff %d, %d experts, k %d\n", name,
           dsv4_type_name(tg), dsv4_type_name(td), EMBD, FF, NE, K);
    c.gate = make_tensor(tg, EMBD, FF, &c.geb);
    c.up = make_tensor(tg, EMBD, FF, &c.geb);
    c.down = make_tensor(td, FF, EMBD, &c.deb);
    c.h_x = (float *)malloc(sizeof(float) * (N_SETS + 1) * EMBD);
    for (int s = 0; s <= N_SETS; s++) {
        for (int j = 0; j < K; j++) {
            int e;
            for (;;) {
                e = (int)(rnd() % NE);
                bool dup = false;
                for (int q = 0; q < j; q++) dup |= c.h_ids[s][q] == e;
                if (!dup) break;
            }
            c.h_ids[s][j] = e;
            c.h_w[s][j] = 0.05f + 0.3f * urand();
        }
        for (int i = 0; i < EMBD; i++)
            c.h_x[(size_t)s * EMBD + i] = (2.0f * urand() - 1.0f) * (i % 97 == 0 ? 6.0f : 1.0f);
    }
    c.h_ids[N_SETS][2] = -1; /* the invalid-id set */
    CK(cudaMalloc((void **)&c.ids, sizeof c.h_ids));
    CK(cudaMalloc((void **)&c.wts, sizeof c.h_w));
    CK(cudaMalloc((void **)&c.x, sizeof(float) * (N_SETS + 1) * EMBD));
    CK(cudaMalloc((void **)&c.out, sizeof(float) * (N_SETS + 1) * EMBD));
    CK(cudaMemcpy(c.ids, c.h_ids, sizeof c.h_ids, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(c.wts, c.h_w, sizeof c.h_w, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(c.x, c.h_x, sizeof(float) * (N_SETS + 1) * EMBD, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&c.xq, EMBD / 256 * QK_BYTES));
    CK(cudaMalloc(&c.mq, K * FF / 256 * QK_BYTES));
    CK(cudaMalloc((void **)&c.gu, sizeof(float) * 2 * K * FF));
    CK(cudaMalloc((void **)&c.y, sizeof(float) * K * EMBD));
    CK(cudaMalloc((void **)&c.mid, sizeof(float) * K * FF));
    CK(cudaMalloc((void **)&c.gu_dbg, sizeof(float) * 2 * K * FF));
    CK(cudaMalloc((void **)&c.y_dbg, sizeof(float) * K * EMBD));
    CK(cudaDeviceSynchronize());

    float *o1 = (float *)malloc(sizeof(float) * EMBD), *o2 = (float *)malloc(sizeof(float) * EMBD);
    float *gu1 = (float *)malloc(sizeof(float) * 2 * K * FF),
          *gu2 = (float *)malloc(sizeof(float) * 2 * K * FF);
    float *y1 = (float *)malloc(sizeof(float) * K * EMBD), *y2 = (float *)malloc(sizeof(float) * K * EMBD);
    char msg[1024];
    /* checks against the CPU */
    check_set(&c, 0, cpu, st, o1);
    check_set(&c, 1, cpu, st, o2);
    /* determinism: set 0 again after set 1, and with only its first 3 slots */
    run_new(&c, 0, K, true, st);
    CK(cudaStreamSynchronize(st));
    read_out(&c, 0, o2);
    CK(cudaMemcpy(gu1, c.gu_dbg, sizeof(float) * 2 * K * FF, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(y1, c.y_dbg, sizeof(float) * K * EMBD, cudaMemcpyDeviceToHost));
    int nd = 0;
    for (int r = 0; r < EMBD; r++) nd += memcmp(&o1[r], &o2[r], 4) != 0;
    snprintf(msg, sizeof msg, "determinism: set 0 twice (set 1 in between): %d of %d outputs differ", nd,
             EMBD);
    report(nd == 0, msg);
    CK(cudaMemset(c.gu_dbg, 0xff, sizeof(float) * 2 * K * FF));
    CK(cudaMemset(c.y_dbg, 0xff, sizeof(float) * K * EMBD));
    run_new(&c, 0, 3, true, st);
    CK(cudaStreamSynchronize(st));
    CK(cudaMemcpy(gu2, c.gu_dbg, sizeof(float) * 2 * K * FF, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(y2, c.y_dbg, sizeof(float) * K * EMBD, cudaMemcpyDeviceToHost));
    nd = 0;
    for (int i = 0; i < 2 * 3 * FF; i++) nd += memcmp(&gu1[i], &gu2[i], 4) != 0;
    for (int i = 0; i < 3 * EMBD; i++) nd += memcmp(&y1[i], &y2[i], 4) != 0;
    snprintf(msg, sizeof msg, "determinism: k=3 launch vs k=6 launch, slots 0-2: %d of %d row values differ",
             nd, 2 * 3 * FF + 3 * EMBD);
    report(nd == 0, msg);
    /* an invalid id: NaN everywhere (as the old path gives) */
    run_new(&c, N_SETS, K, false, st);
    CK(cudaStreamSynchronize(st));
    read_out(&c, N_SETS, o2);
    int nn = 0;
    for (int r = 0; r < EMBD; r++) nn += isnan(o2[r]) != 0;
    snprintf(msg, sizeof msg, "invalid expert id in slot 2: %d of %d outputs NaN", nn, EMBD);
    report(nn == EMBD, msg);
    /* the old path on set 0 against the new one (information: the float order differs) */
    run_old(&c, 0, st);
    CK(cudaStreamSynchronize(st));
    CK(cudaGetLastError());
    read_out(&c, 0, o2);
    double maxd = 0, maxr = 0;
    nd = 0;
    for (int r = 0; r < EMBD; r++) {
        const double d = fabs((double)o1[r] - (double)o2[r]);
        if (!(d <= maxd)) maxd = d;
        if (fabs((double)o2[r]) > maxr) maxr = fabs((double)o2[r]);
        nd += memcmp(&o1[r], &o2[r], 4) != 0;
    }
    printf("  info old vs new path, set 0: max|d|/max|old| %.3e, %d of %d differ bitwise\n",
           maxr > 0 ? maxd / maxr : maxd, nd, EMBD);

    /* the down kernel as an ordinary launch: the same bits */
    g_no_pdl = 1;
    run_new(&c, 0, K, false, st);
    CK(cudaStreamSynchronize(st));
    read_out(&c, 0, o2);
    nd = 0;
    for (int r = 0; r < EMBD; r++) nd += memcmp(&o1[r], &o2[r], 4) != 0;
    snprintf(msg, sizeof msg, "ordinary launch of the down kernel (no PDL) vs PDL: %d of %d outputs differ",
             nd, EMBD);
    report(nd == 0, msg);

    /* timing */
    double s_old = 0, s_new = 0, s_np = 0;
    const double t_np = time_path(&c, true, st, &s_np);
    g_no_pdl = 0;
    const double t_old = time_path(&c, false, st, &s_old), t_new = time_path(&c, true, st, &s_new);
    const double bytes = (double)K * (2.0 * c.geb + c.deb);
    const double gb_old = bytes / (t_old * 1e-6) * 1e-9, gb_new = bytes / (t_new * 1e-6) * 1e-9;
    printf("  expert rows per decode %.2f MB; graph replay of %d decodes x %d batches (median):\n",
           bytes * 1e-6, N_SETS, N_BATCH);
    printf(
        "    old 5-launch path: %8.2f us/decode  %7.1f GB/s  %5.1f %% of copy   (stream launches: %.2f us)\n",
        t_old, gb_old, 100.0 * gb_old * 1e9 / copy_bw, s_old);
    printf(
        "    new 2-launch path: %8.2f us/decode  %7.1f GB/s  %5.1f %% of copy   (stream launches: %.2f us)\n",
        t_new, gb_new, 100.0 * gb_new * 1e9 / copy_bw, s_new);
    printf(
        "    new, no PDL:       %8.2f us/decode  %7.1f GB/s  %5.1f %% of copy   (stream launches: %.2f us)\n",
        t_np, bytes / (t_np * 1e-6) * 1e-9, 100.0 * bytes / (t_np * 1e-6) / copy_bw, s_np);
    printf("RESULT moe_decode %s old_us %.2f new_us %.2f new_nopdl_us %.2f speedup %.2f new_GBps %.1f "
           "new_pct_copy %.1f checks %s\n",
           name, t_old, t_new, t_np, t_old / t_new, gb_new, 100.0 * gb_new * 1e9 / copy_bw,
           g_fail > fail0 ? "FAIL" : "ok");
    free(o1), free(o2), free(gu1), free(gu2), free(y1), free(y2), free(c.h_x);
    cudaFree(c.gate), cudaFree(c.up), cudaFree(c.down), cudaFree(c.ids), cudaFree(c.wts), cudaFree(c.x);
    cudaFree(c.out), cudaFree(c.xq), cudaFree(c.mq), cudaFree(c.gu), cudaFree(c.y), cudaFree(c.mid);
    cudaFree(c.gu_dbg), cudaFree(c.y_dbg);
}

int main(int argc, char **argv) {
    int device = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--device") == 0 && i + 1 < argc)
            device = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--device N]\n", argv[0]);
            return 2;
        }
    }
    CK(cudaSetDevice(device));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, device));
    printf("device %d: %s, %d SMs\n", device, prop.name, prop.multiProcessorCount);
    DK(dsv4_cuda_mv_init(&g_mv, device, &er_));
    DK(dsv4_cuda_moe_dec_init(&g_md, device, &er_));
    dsv4_backend cpu;
    DK(dsv4_backend_cpu_create(8, &cpu, &er_));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const double copy_bw = measure_copy_bw();
    printf("device copy (cudaMemcpy D2D 1 GiB, read + write): %.1f GB/s\n", copy_bw * 1e-9);
    run_case("q2", DSV4_TYPE_IQ2_XXS, DSV4_TYPE_Q2_K, &cpu, st, copy_bw);
    run_case("q4", DSV4_TYPE_Q4_K, DSV4_TYPE_Q4_K, &cpu, st, copy_bw);
    dsv4_backend_destroy(&cpu);
    dsv4_cuda_moe_dec_destroy(&g_md);
    dsv4_cuda_mv_destroy(&g_mv);
    CK(cudaStreamDestroy(st));
    printf("%s: %d checks failed\n", g_fail ? "FAIL" : "PASS", g_fail);
    return g_fail ? 1 : 0;
}
