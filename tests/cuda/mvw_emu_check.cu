/* Host check of the warp-per-row matvec (src/backend/cuda/cuda_mvw.cu) through its own units
 * (cuda_mvw_units.cuh): the per-lane loads, the Q8_0 piece buffer and block decoder, the F16 lane
 * sums, the activation re-layout and the fixed summation order (mvw_emu_row), compared with
 * quant_dot_q8_0 / quant_dot_f16 (CPU) and a float64 sum within the bench's bound, plus hand-derived
 * rows with exact results; the launch plan and segment lookup cover every row of every segment
 * exactly once for several device sizes; dsv4_cuda_mvw_ok's rules. The fused staging of f32 inputs
 * (x_f32): its host model (the kernel's units and lane order) writes exactly the slots of
 * quant_act_q8_0 + the re-layout, over inputs with the quantizer's hard cases, and whole launches
 * emulated CTA by CTA give every row the bits of the separate path. Needs no GPU (exit 0 = pass).
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
    for (int ci = 0; ci < 12; ci++) { /* every device size, with the router launches' rest_mul 2 and 4 too */
        const int sms = sms_list[ci % 4], rest = ci < 4 ? 1 : ci < 8 ? 2 : 4;
        mvw_params p;
        int grid = 0, smem = 0;
        mvw_plan(segs, n, sms, &p, &grid, &smem, rest);
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
        EXPECT(bad == 0 && covered == total, "%s sms=%d rest=%d: %lld rows covered of %lld, %lld bad", name,
               sms, rest, (long long)covered, (long long)total, (long long)bad);
        int nonempty = 0;
        for (int s = 0; s < n; s++) nonempty += rows[s] > 0;
        EXPECT(grid <= sms * MVW_MIN_CTAS || grid == nonempty, "%s sms=%d: grid %d exceeds one wave", name,
               sms, grid);
        int need = 0;
        for (int s = 0; s < n; s++)
            if (types[s] == DSV4_TYPE_Q8_0 && ins[s] / 32 * MVW_ACT_SLOT > need)
                need = (int)(ins[s] / 32 * MVW_ACT_SLOT);
        EXPECT(p.act_smem == need &&
                   smem <= MVW_WARPS * MVW_Q8_RING_BYTES + DSV4_CUDA_MVW_Q8_0_MAX_IN / 32 * MVW_ACT_SLOT &&
                   (need == 0 ? smem == 0 : smem == need + MVW_WARPS * MVW_Q8_RING_BYTES),
               "%s: shared memory plan act %d (want %d), total %d", name, p.act_smem, need, smem);
        if (sms == 132) {
            printf("  plan %-30s sms=132 rest=%d: grid %d, smem %d B, rows/warp", name, rest, grid, smem);
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

/* ---- fused staging (x_f32) ---- */
/* Blocks of the quantizer's hard cases, by kind: random with outliers; all zeros; huge and tiny
 * magnitudes; exact ties at .5 after scaling (amax 127 -> id 1, amax 63.5 -> id 2) with a negative
 * largest element; one nonzero element; +-amax twice; values just below amax; signed zeros. */
enum {
    HK_RANDOM,
    HK_ZERO,
    HK_HUGE,
    HK_TINY,
    HK_TIE1,
    HK_TIE2,
    HK_ONE,
    HK_TWIN,
    HK_NEAR,
    HK_SZERO,
    HK_SUBTINY,
    HK_N
};
static int gen_block(float *v, int kind) {
    switch (kind) {
    case HK_RANDOM:
        for (int i = 0; i < 32; i++) v[i] = uni() * ((nxt() & 15) == 0 ? 40.0f : 1.0f);
        break;
    case HK_ZERO: memset(v, 0, 32 * sizeof(float)); break;
    case HK_HUGE:
        for (int i = 0; i < 32; i++) v[i] = uni() * ((nxt() & 1) ? 3.0e38f : 1.0e30f);
        break;
    case HK_TINY: /* amax well above ~3.7e-37, where 1/d overflows */
        for (int i = 0; i < 32; i++) v[i] = uni() * ((nxt() & 1) ? 1.0e-30f : 1.0e-20f);
        break;
    case HK_SUBTINY: /* amax below ~3.7e-37: id = +inf, the codes saturate (127 / -128 / 0) */
        for (int i = 0; i < 32; i++) v[i] = (nxt() & 3) ? uni() * 1.0e-38f : 0.0f;
        v[nxt() & 31] = -2.0e-38f;
        break;
    case HK_TIE1:
    case HK_TIE2: {
        const float s = kind == HK_TIE1 ? 1.0f : 0.5f; /* x * id = k + 0.5 exactly */
        for (int i = 0; i < 32; i++) {
            const int k = (int)(nxt() % 253) - 126;
            v[i] = ((float)k + ((nxt() & 1) ? 0.5f : -0.5f)) * s;
        }
        v[nxt() & 31] = -127.0f * s; /* the largest |x| is negative */
        break;
    }
    case HK_ONE:
        memset(v, 0, 32 * sizeof(float));
        v[nxt() & 31] = -uni() * 5.0f - 1e-3f;
        break;
    case HK_TWIN: {
        const float a = fabsf(uni()) * 7.0f + 0.25f;
        for (int i = 0; i < 32; i++) v[i] = uni() * a;
        v[nxt() & 31] = -a;
        v[nxt() & 31] = a;
        break;
    }
    case HK_NEAR: {
        const float a = fabsf(uni()) * 100.0f + 1.0f;
        for (int i = 0; i < 32; i++) v[i] = nextafterf(a, 0.0f) * ((nxt() & 1) ? 1.0f : -1.0f);
        v[nxt() & 31] = (nxt() & 1) ? a : -a;
        break;
    }
    case HK_SZERO: /* signed zeros and one small value */
        for (int i = 0; i < 32; i++) v[i] = (nxt() & 1) ? -0.0f : 0.0f;
        v[nxt() & 31] = 1e-3f;
        break;
    }
    return kind;
}
/* 16-byte aligned f32 input of in elements: hard-case blocks (every kind at least once for in >=
 * 32 * HK_N), the rest random; kinds counted in seen[]. */
static float *gen_x_hard(int in, int *seen) {
    float *x = (float *)xcalloc((size_t)in * 4); /* glibc calloc: 16-byte aligned */
    for (int b = 0; b < in / 32; b++) {
        const int kind = b < HK_N ? b : (int)(nxt() % HK_N);
        seen[gen_block(x + 32 * b, kind)]++;
    }
    for (int b = in / 32 - 1; b > 0; b--) { /* shuffle the blocks */
        const int j = (int)(nxt() % (uint64_t)(b + 1));
        float t[32];
        memcpy(t, x + 32 * b, sizeof t);
        memcpy(x + 32 * b, x + 32 * j, sizeof t);
        memcpy(x + 32 * j, t, sizeof t);
    }
    return x;
}
/* quant_act_q8_0 then the kernel's re-layout: the separate path's slots */
static uint8_t *separate_slots(const float *x, int in) {
    dsv4_q8_0_act *q = (dsv4_q8_0_act *)xcalloc((size_t)in / 32 * sizeof *q);
    quant_act_q8_0(x, q, in);
    uint8_t *act = (uint8_t *)xcalloc((size_t)in / 32 * MVW_ACT_SLOT);
    relayout(q, in, act);
    free(q);
    return act;
}
/* blocks whose 36 meaningful slot bytes (qs, d) differ */
static int slot_diff(const uint8_t *a, const uint8_t *b, int in) {
    int bad = 0;
    for (int k = 0; k < in / 32; k++) bad += memcmp(a + k * MVW_ACT_SLOT, b + k * MVW_ACT_SLOT, 36) != 0;
    return bad;
}

/* The fused staging's slots vs the separate path's, and rows through both. */
static void check_fused_stage(int in, int reps) {
    int seen[HK_N] = {0}, bad_blocks = 0, bad_rows = 0, rows = 0;
    const size_t rb = (size_t)in / 32 * 34;
    for (int r = 0; r < reps; r++) {
        float *x = gen_x_hard(in, seen);
        uint8_t *ref = separate_slots(x, in);
        uint8_t *f = (uint8_t *)xcalloc((size_t)in / 32 * MVW_ACT_SLOT);
        memset(f, 0xcd, (size_t)in / 32 * MVW_ACT_SLOT); /* every slot must be written */
        mvw_emu_stage_act_f32(x, f, in);
        const int bb = slot_diff(ref, f, in);
        EXPECT(bb == 0, "fused staging in=%d rep %d: %d of %d blocks differ from quant_act_q8_0", in, r, bb,
               in / 32);
        bad_blocks += bb;
        uint8_t *w = (uint8_t *)xcalloc(rb * 3);
        for (int k = 0; k < 3; k++) {
            uint64_t sd = nxt();
            if (!quant_fill_random_row(DSV4_TYPE_Q8_0, &sd, 1.0f / sqrtf((float)in), w + rb * k, in)) exit(1);
            const float ys = mvw_emu_row(MVW_Q8_0, w + rb * k, in, ref, NULL),
                        yf = mvw_emu_row(MVW_Q8_0, w + rb * k, in, f, NULL);
            bad_rows += memcmp(&ys, &yf, 4) != 0;
            rows++;
        }
        free(w), free(x), free(ref), free(f);
    }
    EXPECT(bad_rows == 0, "fused staging in=%d: %d of %d rows differ", in, bad_rows, rows);
    printf("  fused staging in=%-6d x%d: %d blocks differ (kinds", in, reps, bad_blocks);
    for (int k = 0; k < HK_N; k++) printf(" %d", seen[k]);
    printf("), %d of %d rows differ\n", bad_rows, rows);
}

/* A whole launch emulated CTA by CTA: each CTA stages its segment's input (fused from f32 x, or the
 * separate path's blocks) into a fresh poisoned buffer and its warps compute their rows; every row
 * must have the bits of the separate path (quant_act_q8_0 + re-layout + the same row model). */
static void check_fused_launch(const char *name, int n, const int64_t *ins, const int64_t *rows_of,
                               const uint32_t *types, const uint32_t *xf32, int sms) {
    dsv4_cuda_mvw_seg segs[DSV4_CUDA_MVW_MAX_SEGS];
    memset(segs, 0, sizeof segs);
    float *x[DSV4_CUDA_MVW_MAX_SEGS], *yref[DSV4_CUDA_MVW_MAX_SEGS], *ygot[DSV4_CUDA_MVW_MAX_SEGS];
    uint8_t *w[DSV4_CUDA_MVW_MAX_SEGS], *sep[DSV4_CUDA_MVW_MAX_SEGS];
    dsv4_q8_0_act *q[DSV4_CUDA_MVW_MAX_SEGS];
    int seen[HK_N] = {0};
    for (int s = 0; s < n; s++) {
        const int in = (int)ins[s];
        const bool q8 = types[s] == DSV4_TYPE_Q8_0;
        const size_t rb = q8 ? (size_t)in / 32 * 34 : (size_t)in * 2;
        w[s] = (uint8_t *)xcalloc(rb * (size_t)rows_of[s]);
        for (int64_t r = 0; r < rows_of[s]; r++) {
            uint64_t sd = nxt();
            if (!quant_fill_random_row(types[s], &sd, 1.0f / sqrtf((float)in), w[s] + rb * r, in)) exit(1);
        }
        x[s] = gen_x_hard(in, seen);
        q[s] = q8 ? (dsv4_q8_0_act *)xcalloc((size_t)in / 32 * sizeof(dsv4_q8_0_act)) : NULL;
        if (q8) quant_act_q8_0(x[s], q[s], in);
        sep[s] = q8 ? separate_slots(x[s], in) : NULL;
        yref[s] = (float *)xcalloc((size_t)rows_of[s] * 4 + 4);
        ygot[s] = (float *)xcalloc((size_t)rows_of[s] * 4 + 4);
        for (int64_t r = 0; r < rows_of[s]; r++) {
            yref[s][r] = mvw_emu_row(q8 ? MVW_Q8_0 : MVW_F16, w[s] + rb * r, in, sep[s], x[s]);
            ygot[s][r] = NAN;
        }
        segs[s].type = types[s];
        segs[s].w = w[s];
        segs[s].row_bytes = rb;
        segs[s].in = in;
        segs[s].rows = rows_of[s];
        segs[s].x = q8 && !xf32[s] ? (const void *)q[s] : (const void *)x[s];
        segs[s].y = ygot[s];
        segs[s].x_f32 = xf32[s];
    }
    mvw_params p;
    int grid = 0, smem = 0;
    mvw_plan(segs, n, sms, &p, &grid, &smem, 1);
    int bad_plan = 0;
    for (int s = 0; s < n; s++) bad_plan += p.seg[s].xf32 != (types[s] == DSV4_TYPE_Q8_0 && xf32[s] != 0);
    EXPECT(bad_plan == 0, "%s: the plan's x_f32 flags", name);
    uint8_t *act = (uint8_t *)xcalloc((size_t)p.act_smem + 16);
    int bad_slots = 0;
    for (int b = 0; b < grid; b++) {
        int local = -1;
        const mvw_seg_dev sg = mvw_find_seg(p, b, &local);
        int s = 0;
        while (s < n && p.seg[s].y != sg.y) s++;
        if (s == n) {
            EXPECT(0, "%s: CTA %d has no segment", name, b);
            continue;
        }
        memset(act, 0xcd, (size_t)p.act_smem + 16);
        if (sg.fmt == MVW_Q8_0) {
            if (sg.xf32)
                mvw_emu_stage_act_f32((const float *)sg.x, act, sg.in);
            else
                for (int t = 0; t < MVW_THREADS; t++) mvw_stage_act(sg.x, act, sg.in, t, MVW_THREADS);
            bad_slots += slot_diff(act, sep[s], sg.in) != 0;
        }
        for (int wp = 0; wp < MVW_WARPS; wp++) {
            long long r0;
            const int nr = mvw_warp_rows(sg, local, wp, &r0);
            for (int i = 0; i < nr; i++)
                sg.y[r0 + i] = mvw_emu_row(sg.fmt, sg.w + (size_t)(r0 + i) * sg.row_bytes, sg.in,
                                           sg.fmt == MVW_Q8_0 ? act : NULL, (const float *)sg.x);
        }
    }
    int64_t bad = 0, total = 0;
    for (int s = 0; s < n; s++)
        for (int64_t r = 0; r < rows_of[s]; r++, total++) bad += memcmp(&yref[s][r], &ygot[s][r], 4) != 0;
    EXPECT(bad == 0 && bad_slots == 0, "%s sms=%d: %lld of %lld rows differ, %d CTAs staged other slots",
           name, sms, (long long)bad, (long long)total, bad_slots);
    printf("  fused launch %-26s sms=%-3d grid %-4d: %lld of %lld rows differ from the separate path, "
           "%d CTAs staged other slots\n",
           name, sms, grid, (long long)bad, (long long)total, bad_slots);
    free(act);
    for (int s = 0; s < n; s++)
        free(x[s]), free(yref[s]), free(ygot[s]), free(w[s]), free(sep[s]), free(q[s]);
}

/* The host model's hard cases against quant_act_q8_0 one by one, with hand-derived bytes. */
static void check_fused_hand(void) {
    /* amax 127 (negative): d = 1, id = 1; ties round to even: 2.5 -> 2, -3.5 -> -4, 0.5 -> 0, -0.5 -> 0,
     * 126.5 -> 126; 1e-3 -> 0 */
    float x[256];
    memset(x, 0, sizeof x);
    const float v[7] = {-127.0f, 2.5f, -3.5f, 0.5f, -0.5f, 126.5f, 1e-3f};
    const int8_t want[7] = {-127, 2, -4, 0, 0, 126, 0};
    memcpy(x + 32, v, sizeof v); /* block 1; block 0 all zero: d = 0, qs = 0 */
    uint8_t act[8 * MVW_ACT_SLOT];
    memset(act, 0xcd, sizeof act);
    mvw_emu_stage_act_f32(x, act, 256);
    float d0, d1;
    memcpy(&d0, act + 32, 4);
    memcpy(&d1, act + MVW_ACT_SLOT + 32, 4);
    int bad = d0 != 0.0f || d1 != 1.0f;
    for (int i = 0; i < 32; i++) bad += act[i] != 0;
    for (int i = 0; i < 7; i++) bad += (int8_t)act[MVW_ACT_SLOT + i] != want[i];
    uint8_t *ref = separate_slots(x, 256);
    bad += slot_diff(ref, act, 256);
    EXPECT(bad == 0, "fused staging, hand-derived block: %d wrong values", bad);
    printf("  fused staging hand-derived block (d 0 and 1, ties to even, negative amax): %s\n",
           bad ? "FAIL" : "ok");
    free(ref);
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

    check_fused_hand();
    const int fin[] = {256, 512, 768, 1024, 1280, 2048, 4096, 8192, 16384};
    for (int i = 0; i < 9; i++) check_fused_stage(fin[i], fin[i] >= 8192 ? 2 : 4);
    {
        const int64_t rows[] = {64, 64, 64, 64, 64, 64, 64, 64};
        const uint32_t t[] = {Q, Q, Q, Q, Q, Q, Q, Q};
        const int64_t in[] = {4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096};
        const uint32_t xf[] = {1, 1, 1, 1, 1, 1, 1, 1};
        check_fused_launch("grouped wo_a 8x own x", 8, in, rows, t, xf, 132);
        check_fused_launch("grouped wo_a 8x own x", 8, in, rows, t, xf, 3);
    }
    {
        const int64_t rows[] = {96, 40, 32, 32, 8, 8};
        const uint32_t t[] = {Q, Q, F, F, F, F};
        const int64_t in[] = {4096, 4096, 4096, 4096, 4096, 4096};
        const uint32_t xf[] = {1, 1, 1, 1, 1, 1}; /* F16 ignores it */
        check_fused_launch("attention set", 6, in, rows, t, xf, 132);
    }
    {
        const int64_t rows[] = {300, 7, 64, 33};
        const uint32_t t[] = {Q, Q, Q, F};
        const int64_t in[] = {1024, 16384, 8192, 1000};
        const uint32_t xf[] = {1, 0, 1, 0}; /* fused and separate segments in one launch */
        check_fused_launch("mixed q_b/16384/wo_b", 4, in, rows, t, xf, 132);
        check_fused_launch("mixed q_b/16384/wo_b", 4, in, rows, t, xf, 1);
    }
    printf("mvw_emu_check: %s (%d failures)\n", g_fail ? "FAIL" : "PASS", g_fail);
    return g_fail ? 1 : 0;
}
