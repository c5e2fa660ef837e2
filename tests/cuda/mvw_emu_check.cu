/* Host check of the warp-per-row matvec (src/backend/cuda/cuda_mvw.cu) through its own units
 * (cuda_mvw_units.cuh): the per-lane loads, the Q8_0 piece buffer and block decoder, the F16 lane
 * sums, the activation re-layout and the fixed summation order (mvw_emu_row), compared with
 * quant_dot_q8_0 / quant_dot_f16 (CPU) and a float64 sum within the bench's bound, plus hand-derived
 * rows with exact results; the launch plan and segment lookup cover every row of every segment
 * exactly once for several device sizes; dsv4_cuda_mvw_ok's rules. Needs no GPU (exit 0 = pass).
 * Build: make BUILD=build-x cuda-tests -> build-x/cuda/mvw_emu_check */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_mvw_units.cuh"
extern "C" {
#include "quant/quant.h"
}

#define CHECK_RNG_SEED 777
#include "check_rng.h"

static int g_fail = 0;
#define EXPECT(cond, ...)                                                                                    \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            if (g_fail < 20) {                                                                               \
                printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                  \
                printf(__VA_ARGS__);                                                                         \
                printf("\n");                                                                                \
            }                                                                                                \
            g_fail++;                                                                                        \
        }                                                                                                    \
    } while (0)

static void *xcalloc(size_t n) {
    void *p = calloc(1, n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

/* activations with all-zero blocks and outliers */
static void gen_x(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = uni() * ((nxt() & 63) == 0 ? 30.0f : 1.0f);
    for (int64_t b = 0; b + 32 <= n; b += 32)
        if ((nxt() & 31) == 0) memset(x + b, 0, 32 * sizeof(float));
}

static double f16d(const uint8_t *p) { return (double)dsv4_f16_to_f32((uint16_t)(p[0] | (p[1] << 8))); }
/* float64 value and S = sum |w_i x_i| */
static double exact_dot(int fmt, const uint8_t *w, const void *xin, int in, double *S) {
    double acc = 0.0, s = 0.0;
    if (fmt == MVW_F16) {
        const float *x = (const float *)xin;
        for (int i = 0; i < in; i++) {
            const double v = f16d(w + 2 * i) * (double)x[i];
            acc += v;
            s += fabs(v);
        }
    } else {
        const dsv4_q8_0_act *a = (const dsv4_q8_0_act *)xin;
        for (int b = 0; b < in / 32; b++) {
            const double dd = f16d(w + 34 * b) * (double)a[b].d;
            for (int i = 0; i < 32; i++) {
                const double v = dd * (double)(int8_t)w[34 * b + 2 + i] * (double)a[b].qs[i];
                acc += v;
                s += fabs(v);
            }
        }
    }
    *S = s;
    return acc;
}

/* The kernel's re-layout, run for every thread of a CTA; checked against the struct fields. */
static void relayout(const dsv4_q8_0_act *a, int in, uint8_t *act) {
    memset(act, 0xcd, (size_t)in / 32 * MVW_ACT_SLOT);
    for (int t = 0; t < MVW_THREADS; t++) mvw_stage_act((const uint8_t *)a, act, in, t, MVW_THREADS);
    for (int b = 0; b < in / 32; b++) {
        float d;
        memcpy(&d, act + b * MVW_ACT_SLOT + 32, 4);
        EXPECT(memcmp(act + b * MVW_ACT_SLOT, a[b].qs, 32) == 0 && memcmp(&d, &a[b].d, 4) == 0,
               "activation re-layout, in=%d block %d", in, b);
    }
}

static void check_rows(int fmt, int in, int rows) {
    const uint32_t type = fmt == MVW_Q8_0 ? DSV4_TYPE_Q8_0 : DSV4_TYPE_F16;
    const size_t rb = fmt == MVW_Q8_0 ? (size_t)in / 32 * 34 : (size_t)in * 2;
    uint8_t *w = (uint8_t *)xcalloc(rb * rows);
    for (int r = 0; r < rows; r++) {
        uint64_t s = nxt();
        if (!quant_fill_random_row(type, &s, 1.0f / sqrtf((float)in), w + rb * r, in)) {
            printf("FAIL quant_fill_random_row\n");
            exit(1);
        }
    }
    float *x = (float *)xcalloc((size_t)in * 4);
    gen_x(x, in);
    dsv4_q8_0_act *q = NULL;
    uint8_t *act = NULL;
    if (fmt == MVW_Q8_0) {
        q = (dsv4_q8_0_act *)xcalloc((size_t)in / 32 * sizeof *q);
        quant_act_q8_0(x, q, in);
        act = (uint8_t *)xcalloc((size_t)in / 32 * MVW_ACT_SLOT);
        relayout(q, in, act);
    }
    const double nb = fmt == MVW_Q8_0 ? in / 32 : in / 8;
    const double tol_cpu = 1e-5 + (nb + 8) * ldexp(1.0, -24);
    double mc = 0.0, me = 0.0;
    for (int r = 0; r < rows; r++) {
        const uint8_t *row = w + rb * r;
        const float y = mvw_emu_row(fmt, row, in, act, x);
        double S = 0.0;
        const double ex = exact_dot(fmt, row, fmt == MVW_Q8_0 ? (const void *)q : (const void *)x, in, &S);
        const float cpu =
            fmt == MVW_Q8_0 ? quant_dot_q8_0(row, q, in) : quant_dot_f16((const uint16_t *)row, x, in);
        const double ec = fabs((double)y - cpu) / (S > 0 ? S : 1.0),
                     ee = fabs((double)y - ex) / (S > 0 ? S : 1.0);
        EXPECT(ec <= tol_cpu && ee <= 1e-5,
               "%s in=%d row %d: emu %.9g cpu %.9g exact %.9g (err/S %.3g, %.3g)",
               fmt == MVW_Q8_0 ? "Q8_0" : "F16", in, r, (double)y, (double)cpu, ex, ec, ee);
        if (ec > mc) mc = ec;
        if (ee > me) me = ee;
        /* same bits again with the row at another (16-byte aligned) address */
        uint8_t *copy = (uint8_t *)xcalloc(rb + 48);
        memcpy(copy + 32, row, rb);
        const float y2 = mvw_emu_row(fmt, copy + 32, in, act, x);
        EXPECT(memcmp(&y, &y2, 4) == 0, "row bits depend on its address (in=%d)", in);
        free(copy);
    }
    printf("  %-4s in=%-6d rows=%d: max err/S vs CPU %.3g (tol %.3g), vs exact %.3g (tol 1e-5)\n",
           fmt == MVW_Q8_0 ? "Q8_0" : "F16", in, rows, mc, tol_cpu, me);
    free(w);
    free(x);
    free(q);
    free(act);
}

/* Hand-derived rows with exact results. */
static void check_exact(void) {
    /* Q8_0 in=2304 (two pieces: 64 + 8 blocks): block b has d = 1, qs = b%5 - 2 (all 32), activation
     * d = 0.5, qs = 3: block sum = 32 * 3 * (b%5 - 2) * 0.5 = 48 (b%5 - 2). */
    const int in = 2304, nb = in / 32;
    uint8_t *w = (uint8_t *)xcalloc((size_t)nb * 34);
    dsv4_q8_0_act *a = (dsv4_q8_0_act *)xcalloc((size_t)nb * sizeof *a);
    double want = 0.0;
    for (int b = 0; b < nb; b++) {
        w[34 * b] = 0x00;
        w[34 * b + 1] = 0x3c; /* f16 1.0 */
        memset(w + 34 * b + 2, (uint8_t)(int8_t)(b % 5 - 2), 32);
        a[b].d = 0.5f;
        memset(a[b].qs, 3, 32);
        want += 48.0 * (b % 5 - 2);
    }
    uint8_t *act = (uint8_t *)xcalloc((size_t)nb * MVW_ACT_SLOT);
    relayout(a, in, act);
    const float y = mvw_emu_row(MVW_Q8_0, w, in, act, NULL);
    EXPECT((double)y == want, "Q8_0 exact row: %.9g want %.9g", (double)y, want);
    /* F16 in=1032 (pieces of 1024 + 8): w = 1.0, x_i = i + 1 -> n (n + 1) / 2 = 533028 */
    const int n = 1032;
    uint16_t *wf = (uint16_t *)xcalloc((size_t)n * 2);
    float *x = (float *)xcalloc((size_t)n * 4);
    for (int i = 0; i < n; i++) {
        wf[i] = 0x3c00;
        x[i] = (float)(i + 1);
    }
    const float yf = mvw_emu_row(MVW_F16, (const uint8_t *)wf, n, NULL, x);
    EXPECT(yf == 533028.0f, "F16 exact row: %.9g want 533028", (double)yf);
    printf("  exact rows: Q8_0 %.1f (want %.1f), F16 %.1f (want 533028)\n", (double)y, want, (double)yf);
    free(w);
    free(a);
    free(act);
    free(wf);
    free(x);
}

/* Every row of every segment is computed by exactly one warp, whatever the device size. */
static void check_plan(const char *name, const int64_t *rows, const uint32_t *types, const int64_t *ins,
                       int n) {
    dsv4_cuda_mvw_seg segs[DSV4_CUDA_MVW_MAX_SEGS];
    memset(segs, 0, sizeof segs);
    for (int s = 0; s < n; s++) {
        segs[s].type = types[s];
        segs[s].w = (const void *)(uintptr_t)(0x10000 * (s + 1));
        segs[s].in = ins[s];
        segs[s].row_bytes = types[s] == DSV4_TYPE_Q8_0 ? ins[s] / 32 * 34 : ins[s] * 2;
        segs[s].rows = rows[s];
        segs[s].x = segs[s].w;
        segs[s].y = (float *)(uintptr_t)(0x1000000 * (s + 1));
    }
    const int sms_list[] = {1, 3, 78, 132};
    for (int si = 0; si < 4; si++) {
        const int sms = sms_list[si];
        mvw_params p;
        int grid = 0, smem = 0;
        mvw_plan(segs, n, sms, &p, &grid, &smem);
        int64_t total = 0;
        for (int s = 0; s < n; s++) total += rows[s];
        unsigned char *seen[DSV4_CUDA_MVW_MAX_SEGS];
        for (int s = 0; s < n; s++) seen[s] = (unsigned char *)xcalloc((size_t)rows[s] + 1);
        int64_t covered = 0, bad = 0;
        for (int b = 0; b < grid; b++) {
            int local = -1;
            const mvw_seg_dev sg = mvw_find_seg(p, b, &local);
            int s = 0;
            while (s < n && p.seg[s].y != sg.y) s++;
            if (s == n || local < 0) {
                bad++;
                continue;
            }
            for (int wp = 0; wp < MVW_WARPS; wp++) {
                long long r0;
                const int nr = mvw_warp_rows(sg, local, wp, &r0);
                for (int i = 0; i < nr; i++) {
                    if (r0 + i < 0 || r0 + i >= rows[s] || seen[s][r0 + i]) {
                        bad++;
                        continue;
                    }
                    seen[s][r0 + i] = 1;
                    covered++;
                }
            }
        }
        EXPECT(bad == 0 && covered == total, "%s sms=%d: %lld rows covered of %lld, %lld bad", name, sms,
               (long long)covered, (long long)total, (long long)bad);
        int nonempty = 0;
        for (int s = 0; s < n; s++) nonempty += rows[s] > 0;
        EXPECT(grid <= sms * MVW_MIN_CTAS || grid == nonempty, "%s sms=%d: grid %d exceeds one wave", name,
               sms, grid);
        int need = 0;
        for (int s = 0; s < n; s++)
            if (types[s] == DSV4_TYPE_Q8_0 && ins[s] / 32 * MVW_ACT_SLOT > need)
                need = (int)(ins[s] / 32 * MVW_ACT_SLOT);
        EXPECT(p.act_smem == need && smem <= 48 * 1024 &&
                   (need == 0 ? smem == 0 : smem == need + MVW_WARPS * MVW_Q8_PIECE_BYTES),
               "%s: shared memory plan act %d (want %d), total %d", name, p.act_smem, need, smem);
        if (sms == 132) {
            printf("  plan %-30s sms=132: grid %d, smem %d B, rows/warp", name, grid, smem);
            for (int s = 0; s < n; s++) printf(" %d", p.seg[s].rpw);
            printf("\n");
        }
        for (int s = 0; s < n; s++) free(seen[s]);
    }
}

static void check_ok(void) {
    const void *a16 = (const void *)(uintptr_t)0x1000, *a8 = (const void *)(uintptr_t)0x1008;
    EXPECT(mvw_ok(DSV4_TYPE_Q8_0, a16, 4352, 4096), "Q8_0 4096 plain");
    EXPECT(mvw_ok(DSV4_TYPE_Q8_0, a16, 272, 256), "Q8_0 256");
    EXPECT(mvw_ok(DSV4_TYPE_Q8_0, a16, 17408, 16384), "Q8_0 16384");
    EXPECT(!mvw_ok(DSV4_TYPE_Q8_0, a16, 17680, 16640), "Q8_0 over the limit");
    EXPECT(!mvw_ok(DSV4_TYPE_Q8_0, a16, 136, 128), "Q8_0 in not a multiple of 256");
    EXPECT(!mvw_ok(DSV4_TYPE_Q8_0, a8, 4352, 4096), "Q8_0 misaligned w");
    EXPECT(!mvw_ok(DSV4_TYPE_Q8_0, a16, 4354, 4096), "Q8_0 row_bytes not 16-aligned");
    EXPECT(!mvw_ok(DSV4_TYPE_Q8_0, a16, 4336, 4096), "Q8_0 row_bytes below the row");
    EXPECT(mvw_ok(DSV4_TYPE_Q8_0, a16, 4368, 4096), "Q8_0 padded rows");
    EXPECT(!mvw_ok(DSV4_TYPE_Q8_0, NULL, 4352, 4096), "NULL w");
    EXPECT(mvw_ok(DSV4_TYPE_F16, a16, 16, 8), "F16 8");
    EXPECT(mvw_ok(DSV4_TYPE_F16, a16, 131072, 65536), "F16 65536");
    EXPECT(!mvw_ok(DSV4_TYPE_F16, a16, 131088, 65544), "F16 over the limit");
    EXPECT(!mvw_ok(DSV4_TYPE_F16, a16, 24, 12), "F16 in not a multiple of 8");
    EXPECT(!mvw_ok(DSV4_TYPE_F32, a16, 16384, 4096), "F32");
    EXPECT(!mvw_ok(DSV4_TYPE_Q4_K, a16, 2304, 4096), "Q4_K");
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("mvw_emu_check: warp-per-row matvec units vs quant_dot_* (no GPU)\n");
    check_ok();
    check_exact();
    const int q8_in[] = {256, 1024, 2048, 2304, 4096, 8192, 16384};
    for (int i = 0; i < 7; i++) check_rows(MVW_Q8_0, q8_in[i], q8_in[i] >= 8192 ? 4 : 12);
    const int f16_in[] = {8, 1000, 1024, 1032, 4096, 65536};
    for (int i = 0; i < 6; i++) check_rows(MVW_F16, f16_in[i], f16_in[i] >= 65536 ? 2 : 12);

    const uint32_t Q = DSV4_TYPE_Q8_0, F = DSV4_TYPE_F16;
    {
        const int64_t rows[] = {1024, 512, 1024, 1024, 256, 256};
        const uint32_t t[] = {Q, Q, F, F, F, F};
        const int64_t in[] = {4096, 4096, 4096, 4096, 4096, 4096};
        check_plan("attention set", rows, t, in, 6);
    }
    {
        const int64_t rows[] = {256, 2048, 2048};
        const uint32_t t[] = {F, Q, Q};
        const int64_t in[] = {4096, 4096, 4096};
        check_plan("router + shared gate/up", rows, t, in, 3);
    }
    {
        const int64_t rows[] = {131072};
        const uint32_t t[] = {Q};
        const int64_t in[] = {4096};
        check_plan("BIG Q8_0 4096->131072", rows, t, in, 1);
    }
    {
        const int64_t rows[] = {0, 7, 1, 0, 1000, 33, 16384, 0};
        const uint32_t t[] = {Q, F, Q, F, Q, F, Q, F};
        const int64_t in[] = {256, 8, 16384, 64, 1024, 65536, 8192, 1024};
        check_plan("8 ragged segments, empty ones", rows, t, in, 8);
    }
    {
        const int64_t rows[] = {1};
        const uint32_t t[] = {F};
        const int64_t in[] = {4096};
        check_plan("one row", rows, t, in, 1);
    }
    printf("mvw_emu_check: %s (%d failures)\n", g_fail ? "FAIL" : "PASS", g_fail);
    return g_fail ? 1 : 0;
}
