/* Host emulation of the F16 tensor-core prefill GEMM (src/backend/cuda/cuda_gemm_f16_mma.cu): every
 * CTA of the grid (split-K included) is run on the CPU with the kernel's own units
 * (cuda_gemm_f16_mma.cuh: zero-filling stage loader, fragment reads, split ranges, store), the MMA
 * emulated from the PTX fragment layout of mma.m16n8k16.row.col.f32.f16.f16.f32, and the split
 * partials summed in order as fm_reduce_kernel does. Ragged shapes (rows, tokens and k not
 * multiples of the tile, strided activations, padded weight rows and outputs) are compared with a
 * float64 sum of the same f16 operands: the products are exact in f32, so only the f32
 * accumulation differs, bounded here by 1e-5 of max|ref|. Output elements outside the product must
 * stay untouched. Needs no GPU (exit 0 = pass).
 * Build: make BUILD=build-x cuda-tests -> build-x/cuda/f16_mma_emu_check */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_gemm_f16_mma.cuh"
extern "C" {
#include "quant/quant.h"
}

#define CHECK_RNG_SEED 4242
#include "check_rng.h"

static float h2f(uint32_t reg, int hi) { return dsv4_f16_to_f32((uint16_t)(hi ? reg >> 16 : reg & 0xffff)); }

/* D += A B for one warp, operands in the per-lane fragment layout (PTX ISA, m16n8k16 .f16): the
 * register's low half holds the lower k. Sums in k order in f32. */
static void emu_mma(float d[32][4], uint32_t a[32][4], uint32_t b[32][2]) {
    float A[16][16], B[16][8];
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane >> 2, t = lane & 3;
        for (int h = 0; h < 2; h++) {
            A[g][2 * t + h] = h2f(a[lane][0], h);
            A[g + 8][2 * t + h] = h2f(a[lane][1], h);
            A[g][8 + 2 * t + h] = h2f(a[lane][2], h);
            A[g + 8][8 + 2 * t + h] = h2f(a[lane][3], h);
            B[2 * t + h][g] = h2f(b[lane][0], h);
            B[8 + 2 * t + h][g] = h2f(b[lane][1], h);
        }
    }
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane >> 2, t = lane & 3;
        for (int i = 0; i < 4; i++) {
            const int r = g + 8 * (i >> 1), c = 2 * t + (i & 1);
            float s = d[lane][i];
            for (int k = 0; k < 16; k++) s += A[r][k] * B[k][c];
            d[lane][i] = s;
        }
    }
}

/* the whole launch: grid (tokens, rows, splits), then the ordered reduction */
static void emulate(const fm_args &p) {
    static uint16_t sm[FM_STAGE];
    static float acc[FM_THREADS / 32][32][FM_MT][FM_NT][4];
    const long long gx = (p.n + FM_BN - 1) / FM_BN, gy = (p.n_out + FM_BM - 1) / FM_BM;
    for (int z = 0; z < p.splits; z++)
        for (long long by = 0; by < gy; by++)
            for (long long bx = 0; bx < gx; bx++) {
                const long long m0 = by * FM_BM, c0 = bx * FM_BN;
                memset(acc, 0, sizeof acc);
                long long t0, t1;
                fm_split_range(p, z, &t0, &t1);
                for (long long t = t0; t < t1; t++) {
                    memset(sm, 0xcd, sizeof sm); /* stale bytes must not leak into the result */
                    for (int tid = 0; tid < FM_THREADS; tid++)
                        fm_load_stage(p, m0, c0, t, sm, sm + FM_ATILE, tid, FM_THREADS);
                    for (int warp = 0; warp < FM_THREADS / 32; warp++) {
                        const int wm = warp % FM_WARPS_M, wn = warp / FM_WARPS_M;
                        const long long tok_left = p.n - (c0 + wn * FM_NT * 8);
                        for (int kk = 0; kk < FM_BK; kk += 16)
                            for (int nt = 0; nt < FM_NT && nt * 8 < tok_left; nt++)
                                for (int mt = 0; mt < FM_MT; mt++) {
                                    uint32_t a[32][4], b[32][2];
                                    float d[32][4];
                                    for (int lane = 0; lane < 32; lane++) {
                                        fm_frag_a(sm, wm * FM_MT * 16 + mt * 16, kk, lane, a[lane]);
                                        fm_frag_b(sm + FM_ATILE, wn * FM_NT * 8 + nt * 8, kk, lane, b[lane]);
                                        memcpy(d[lane], acc[warp][lane][mt][nt], sizeof d[lane]);
                                    }
                                    emu_mma(d, a, b);
                                    for (int lane = 0; lane < 32; lane++)
                                        memcpy(acc[warp][lane][mt][nt], d[lane], sizeof d[lane]);
                                }
                    }
                }
                for (int warp = 0; warp < FM_THREADS / 32; warp++)
                    for (int lane = 0; lane < 32; lane++)
                        fm_store(p, m0, c0, z, warp % FM_WARPS_M, warp / FM_WARPS_M, lane, acc[warp][lane]);
            }
    if (p.splits > 1)
        for (long long t = 0; t < p.n; t++)
            for (long long o = 0; o < p.n_out; o++) {
                float s = 0.0f;
                for (int z = 0; z < p.splits; z++) s += p.part[((uint64_t)z * p.n + t) * p.n_out + o];
                p.y[(uint64_t)t * p.y_stride + o] = s;
            }
}

/* terms 2: the two-term operand (hi = f16(x), lo = f16(x - hi)), checked against float64 of the f32
 * activations themselves (the CPU's operand): the same 1e-5 bound, which the hi term alone misses. */
static int run(long long in, long long n_out, long long n, int splits, int terms) {
    const uint64_t rb = ((uint64_t)in * 2 + 15) / 16 * 16 + 16; /* padded rows */
    const uint64_t xs = (uint64_t)in + 5, ys = (uint64_t)n_out + 3;
    uint8_t *w = (uint8_t *)malloc(rb * n_out);
    float *x = (float *)malloc(sizeof(float) * xs * n);
    uint16_t *x16 = (uint16_t *)malloc(2 * (size_t)in * n * terms);
    float *y = (float *)malloc(sizeof(float) * ys * n);
    float *part = (float *)malloc(sizeof(float) * (size_t)(splits > 1 ? splits : 1) * n * n_out);
    if (!w || !x || !x16 || !y || !part) abort();
    memset(w, 0x7c, rb * n_out); /* inf halves in the row padding: must never be read */
    for (long long o = 0; o < n_out; o++)
        for (long long i = 0; i < in; i++) {
            const uint16_t h = dsv4_f32_to_f16(0.05f * uni());
            memcpy(w + o * rb + 2 * i, &h, 2);
        }
    for (uint64_t i = 0; i < xs * n; i++) x[i] = 2.0f * uni();
    if (n > 1) x[xs + 3] = 1e6f; /* clamped to 65504 */
    /* host twin of fm_cvt_kernel: clamp, then round to nearest even */
    for (long long t = 0; t < n; t++)
        for (long long i = 0; i < in; i++) {
            float v = x[t * xs + i];
            v = v > FM_F16_MAX ? FM_F16_MAX : (v < -FM_F16_MAX ? -FM_F16_MAX : v);
            x16[t * in + i] = dsv4_f32_to_f16(v);
            if (terms > 1)
                x16[(size_t)in * n + t * in + i] = dsv4_f32_to_f16(v - dsv4_f16_to_f32(x16[t * in + i]));
        }
    for (uint64_t i = 0; i < ys * n; i++) y[i] = -7.0f;
    fm_args p;
    memset(&p, 0, sizeof p);
    p.w = w, p.row_bytes = rb, p.n_out = n_out, p.in = in, p.n = n, p.x16 = x16, p.y = y, p.y_stride = ys;
    p.part = part, p.splits = splits, p.terms = terms;
    emulate(p);
    double maxd = 0, maxr = 0;
    double tok_rel = 0, tok_rel_hi = 0; /* terms 2: the worst token's max|d| / its max|ref| */
    int bad = 0;
    for (long long t = 0; t < n; t++) {
        double td = 0, td_hi = 0, tr = 0;
        for (long long o = 0; o < n_out; o++) {
            double ref = 0, ref_hi = 0; /* terms 2: of the clamped f32 x; and of its hi term alone */
            for (long long i = 0; i < in; i++) {
                uint16_t h;
                memcpy(&h, w + o * rb + 2 * i, 2);
                const double wv = dsv4_f16_to_f32(h), hv = dsv4_f16_to_f32(x16[t * in + i]);
                float v = x[t * xs + i];
                v = v > FM_F16_MAX ? FM_F16_MAX : (v < -FM_F16_MAX ? -FM_F16_MAX : v);
                ref += wv * (terms > 1 ? (double)v : hv);
                ref_hi += wv * hv;
            }
            const double d = fabs((double)y[t * ys + o] - ref);
            if (!(d <= maxd)) maxd = d;
            if (!(d <= td)) td = d;
            if (fabs(ref - ref_hi) > td_hi) td_hi = fabs(ref - ref_hi);
            if (fabs(ref) > maxr) maxr = fabs(ref);
            if (fabs(ref) > tr) tr = fabs(ref);
        }
        if (tr > 0 && !(td / tr <= tok_rel)) tok_rel = td / tr;
        if (tr > 0 && td_hi / tr > tok_rel_hi) tok_rel_hi = td_hi / tr;
        for (uint64_t o = (uint64_t)n_out; o < ys; o++) bad += y[t * ys + o] != -7.0f;
    }
    const double rel = maxr > 0 ? maxd / maxr : maxd;
    /* terms 2, per token: within 1e-5 of the f32-activation product, which the hi term alone misses
     * (else this case would not test the lo term) */
    const bool ok = bad == 0 && rel <= 1e-5 && (terms == 1 || (tok_rel <= 1e-5 && tok_rel_hi > 1e-5));
    if (terms > 1)
        printf("%s in=%-5lld out=%-4lld n=%-4lld splits=%-2d two terms: worst token rel %.2e vs float64 of "
               "the f32 "
               "activations (hi alone %.2e), %d padding writes\n",
               ok ? "ok  " : "FAIL", in, n_out, n, splits, tok_rel, tok_rel_hi, bad);
    else
        printf("%s in=%-5lld out=%-4lld n=%-4lld splits=%-2d rel %.2e vs float64 of the f16 operands, %d "
               "padding "
               "writes\n",
               ok ? "ok  " : "FAIL", in, n_out, n, splits, rel, bad);
    free(w), free(x), free(x16), free(y), free(part);
    return ok ? 0 : 1;
}

int main(void) {
    int fails = 0;
    for (int terms = 1; terms <= 2; terms++) {
        fails += run(136, 24, 70, 1, terms);   /* ragged k tile (136 = 4 x 32 + 8), rows and tokens */
        fails += run(136, 24, 70, 3, terms);   /* split-K over 5 k tiles: uneven shares (terms 2: 10) */
        fails += run(512, 130, 9, 1, terms);   /* three row tiles, one short token tile */
        fails += run(1024, 64, 65, 4, terms);  /* token tile of one */
        fails += run(2048, 24, 16, 16, terms); /* the hc-mix-like shape, most splits */
    }
    /* the launcher's split choice for the flash shapes on 132 SMs (prints; n = 256 and 2048) */
    const long long shapes[5][2] = {{4096, 1024}, {4096, 512}, {4096, 256}, {16384, 24}, {4096, 64}};
    for (int s = 0; s < 5; s++) {
        const int a = fm_pick_splits(shapes[s][0], shapes[s][1], 256, 132);
        const int b = fm_pick_splits(shapes[s][0], shapes[s][1], 2048, 132);
        printf("     splits %5lld->%-5lld: n=256 %2d, n=2048 %2d\n", shapes[s][0], shapes[s][1], a, b);
        if (a < 1 || a > FM_MAX_SPLITS || b < 1 || b > FM_MAX_SPLITS) fails++;
    }
    printf("F16 MMA EMU: %s\n", fails ? "FAIL" : "PASS");
    return fails ? 1 : 0;
}
