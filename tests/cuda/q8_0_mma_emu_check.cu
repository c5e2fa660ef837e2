/* Host emulation of the Q8_0 tensor-core prefill GEMMs, v1 (src/backend/cuda/cuda_gemm_q8_0_mma.cu)
 * and v2 (cuda_gemm_q8_0_mma2.cu, DSV4_CUDA_PREFILL_MMA=v2): every CTA of the grid is run on the
 * CPU with the kernel's own units (cuda_gemm_q8_0_mma.cuh, cuda_gemm_q8_0_mma2.cuh: stage loader
 * into the shared-memory ring, fragment reads, per-block update, store),
 * and the int8 MMA emulated from the PTX fragment layout of mma.m16n8k32.row.col.s8. Ragged
 * shapes (rows and tokens not multiples of the tile, n not a multiple of 8, row offsets, strided
 * activations and outputs, blocks per row not a multiple of 8, misaligned bases that force the
 * 2/4-byte loader) are compared bit for bit with quant_dot_q8_0 and its scalar reference; output
 * elements outside the product must stay untouched. Needs no GPU (exit 0 = pass).
 * Build: make BUILD=build-x cuda-tests -> build-x/cuda/q8_0_mma_emu_check */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_gemm_q8_0_mma.cuh"
#include "backend/cuda/cuda_gemm_q8_0_mma2.cuh"
extern "C" {
#include "quant/quant.h"
}

#define CHECK_RNG_SEED 2024
#include "check_rng.h"

/* D = C + A B for one warp, operands in the per-lane fragment layout (PTX ISA, m16n8k32 .s8). */
static void emu_mma(int32_t d[32][4], uint32_t a[32][4], uint32_t b[32][2], int32_t c) {
    int8_t A[16][32], B[32][8];
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane >> 2, t = lane & 3;
        for (int i = 0; i < 4; i++) { /* byte i of a register = element 4t + i */
            A[g][4 * t + i] = (int8_t)(a[lane][0] >> (8 * i));
            A[g + 8][4 * t + i] = (int8_t)(a[lane][1] >> (8 * i));
            A[g][16 + 4 * t + i] = (int8_t)(a[lane][2] >> (8 * i));
            A[g + 8][16 + 4 * t + i] = (int8_t)(a[lane][3] >> (8 * i));
            B[4 * t + i][g] = (int8_t)(b[lane][0] >> (8 * i));
            B[16 + 4 * t + i][g] = (int8_t)(b[lane][1] >> (8 * i));
        }
    }
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane >> 2, t = lane & 3;
        for (int i = 0; i < 4; i++) {
            const int r = g + (i >> 1) * 8, col = 2 * t + (i & 1);
            int32_t s = c;
            for (int k = 0; k < 32; k++) s += (int32_t)A[r][k] * (int32_t)B[k][col];
            d[lane][i] = s;
        }
    }
}

typedef float warp_acc[32][QM_MT][QM_NT][4];

/* One CTA, as qm_kernel runs it (one thread of the loader doing all copies). */
static void emu_cta(const qm_args &p, bool aligned, long long bx, long long by, uint8_t *smem,
                    warp_acc *acc) {
    const long long m0 = by * QM_BM, c0 = bx * QM_BN;
    memset(acc, 0, sizeof(warp_acc) * QM_WARPS_M * QM_WARPS_N);
    const long long ns = (p.nb + QM_KB - 1) / QM_KB;
    for (long long s = 0; s < ns; s++) {
        uint8_t *wt = smem + (s & 1) * QM_STAGE, *xt = wt + QM_WTILE;
        if (aligned)
            qm_load_stage<true>(p, m0, c0, s, wt, xt, 0, 1);
        else
            qm_load_stage<false>(p, m0, c0, s, wt, xt, 0, 1);
        const int kb = aligned ? QM_KB : qm_stage_blocks(p, s);
        for (int warp = 0; warp < QM_WARPS_M * QM_WARPS_N; warp++) {
            const int wm = warp % QM_WARPS_M, wn = warp / QM_WARPS_M;
            const int r_w = wm * QM_MT * 16, c_w = wn * QM_NT * 8;
            const long long tok_left = p.n - (c0 + c_w);
            for (int j = 0; j < kb; j++) {
                static uint32_t a[QM_MT][32][4], b[32][2];
                static float dw[QM_MT][32][2], dx[32][2];
                static int32_t d[32][4];
                for (int mt = 0; mt < QM_MT; mt++)
                    for (int lane = 0; lane < 32; lane++) {
                        qm_frag_a(wt, r_w + mt * 16, j, lane, a[mt][lane]);
                        qm_scale_w(wt, r_w + mt * 16, j, lane, dw[mt][lane]);
                    }
                for (int nt = 0; nt < QM_NT; nt++) {
                    if (nt * 8 >= tok_left) break;
                    for (int lane = 0; lane < 32; lane++) {
                        qm_frag_b(xt, c_w + nt * 8, j, lane, b[lane]);
                        qm_scale_x(xt, c_w + nt * 8, j, lane, dx[lane]);
                    }
                    for (int mt = 0; mt < QM_MT; mt++) {
                        emu_mma(d, a[mt], b, (int32_t)QM_MAGIC_I);
                        for (int lane = 0; lane < 32; lane++)
                            qm_epilogue(acc[warp][lane][mt][nt], d[lane], dw[mt][lane], dx[lane]);
                    }
                }
            }
        }
    }
    for (int warp = 0; warp < QM_WARPS_M * QM_WARPS_N; warp++)
        for (int lane = 0; lane < 32; lane++)
            qm_store(p, m0, c0, warp % QM_WARPS_M, warp / QM_WARPS_M, lane, acc[warp][lane]);
}

/* one shared-memory image and accumulator store big enough for every kernel */
static const size_t SMEM_BYTES = (size_t)q2_wide::SMEM;
static const size_t ACC2_FLOATS = (size_t)q2_wide::THREADS * q2_wide::MT * q2_wide::NT * 4;

template <class C>
static void emu_load2(const qm_args &p, bool aligned, long long m0, long long c0, long long s,
                      uint8_t *smem) {
    uint8_t *buf = smem + q2_buf<C>(s) * C::STAGE;
    if (aligned)
        q2_load_stage<C, true>(p, m0, c0, s, buf, buf + C::WTILE, 0, 1);
    else
        q2_load_stage<C, false>(p, m0, c0, s, buf, buf + C::WTILE, 0, 1);
}

/* One CTA of tile C, as q2_kernel runs it: the ring's prologue, then per stage the load of stage
 * q2_ahead(s) (issued after the barrier, before stage s is computed) and the warps' MMAs. */
template <class C>
static void emu_cta2(const qm_args &p, bool aligned, long long bx, long long by, uint8_t *smem, float *accf) {
    typedef float lane_acc[C::MT][C::NT][4];
    lane_acc *acc = (lane_acc *)accf; /* [warp * 32 + lane] */
    const long long m0 = by * C::BM, c0 = bx * C::BN;
    memset(acc, 0, sizeof(lane_acc) * C::THREADS);
    const long long ns = (p.nb + QM_KB - 1) / QM_KB;
    for (long long s = 0; s < C::STAGES - 1 && s < ns; s++) emu_load2<C>(p, aligned, m0, c0, s, smem);
    for (long long s = 0; s < ns; s++) {
        if (q2_ahead<C>(s) < ns) emu_load2<C>(p, aligned, m0, c0, q2_ahead<C>(s), smem);
        const uint8_t *wt = smem + q2_buf<C>(s) * C::STAGE, *xt = wt + C::WTILE;
        const int kb = aligned ? QM_KB : qm_stage_blocks(p, s);
        for (int warp = 0; warp < C::THREADS / 32; warp++) {
            const int r_w = q2_warp_row<C>(warp), c_w = q2_warp_tok<C>(warp);
            const long long tok_left = p.n - (c0 + c_w);
            for (int j = 0; j < kb; j++) {
                static uint32_t a[C::MT][32][4], b[32][2];
                static float dw[C::MT][32][2], dx[32][2];
                static int32_t d[32][4];
                for (int mt = 0; mt < C::MT; mt++)
                    for (int lane = 0; lane < 32; lane++) {
                        qm_frag_a(wt, r_w + mt * 16, j, lane, a[mt][lane]);
                        qm_scale_w(wt, r_w + mt * 16, j, lane, dw[mt][lane]);
                    }
                for (int nt = 0; nt < C::NT; nt++) {
                    if (nt * 8 >= tok_left) break;
                    for (int lane = 0; lane < 32; lane++) {
                        qm_frag_b(xt, c_w + nt * 8, j, lane, b[lane]);
                        qm_scale_x(xt, c_w + nt * 8, j, lane, dx[lane]);
                    }
                    for (int mt = 0; mt < C::MT; mt++) {
                        emu_mma(d, a[mt], b, (int32_t)QM_MAGIC_I);
                        for (int lane = 0; lane < 32; lane++)
                            qm_epilogue(acc[warp * 32 + lane][mt][nt], d[lane], dw[mt][lane], dx[lane]);
                    }
                }
            }
        }
    }
    for (int warp = 0; warp < C::THREADS / 32; warp++)
        for (int lane = 0; lane < 32; lane++) q2_store<C>(p, m0, c0, warp, lane, acc[warp * 32 + lane]);
}

template <class C> static void emu_grid2(const qm_args &p, bool aligned, uint8_t *smem, float *acc) {
    for (long long by = 0; by < (p.n_out + C::BM - 1) / C::BM; by++)
        for (long long bx = 0; bx < (p.n + C::BN - 1) / C::BN; bx++)
            emu_cta2<C>(p, aligned, bx, by, smem, acc);
}

/* weights: 0 quantized floats, 1 random bytes with random (also subnormal) f16 scales, 2 all -128
 * quants against all -128 activations (the largest |isum|, 2^19) */
static int run_case(const char *name, long long in, long long n_out, long long n, long long row0,
                    long long x_pad, long long y_pad, int misalign, int wkind) {
    const long long nb = in / 32, rows = row0 + n_out + 1;
    const uint64_t rb = (uint64_t)nb * 34;
    const uint64_t xs = (uint64_t)nb * 36 + (uint64_t)x_pad; /* activation row stride, bytes */
    const uint64_t ys = (uint64_t)n_out + (uint64_t)y_pad;
    uint8_t *wbuf = (uint8_t *)aligned_alloc(64, ((size_t)rows * rb + 64 + 63) / 64 * 64);
    uint8_t *xbuf = (uint8_t *)aligned_alloc(64, ((size_t)n * xs + 64 + 63) / 64 * 64);
    float *y = (float *)malloc(((size_t)n * ys + 1) * sizeof(float));
    float *xf = (float *)malloc((size_t)(in ? in : 1) * sizeof(float));
    uint8_t *smem = (uint8_t *)malloc(SMEM_BYTES);
    warp_acc *acc = (warp_acc *)malloc(sizeof(warp_acc) * QM_WARPS_M * QM_WARPS_N);
    float *acc2 = (float *)malloc(ACC2_FLOATS * sizeof(float));
    if (!wbuf || !xbuf || !y || !xf || !smem || !acc || !acc2) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    /* misalign 1: weights at +2 bytes, activations at +4 (the 2/4-byte loader) */
    uint8_t *w = wbuf + (misalign ? 2 : 0), *x = xbuf + (misalign ? 4 : 0);
    for (long long r = 0; r < rows; r++) {
        uint8_t *wr = w + (uint64_t)r * rb;
        if (wkind == 0) {
            for (long long i = 0; i < in; i++) xf[i] = uni() * (r % 3 == 0 ? 0.02f : 0.3f);
            quant_quantize_q8_0(xf, wr, in);
        } else {
            for (uint64_t i = 0; i < rb; i++) wr[i] = wkind == 2 ? 0x80 : (uint8_t)nxt();
            for (long long b = 0; b < nb; b++) {
                const int kind = (int)(nxt() % 8);
                const uint16_t d =
                    kind == 0 ? (uint16_t)(nxt() % 0x400) | (uint16_t)(nxt() & 0x8000) /* subnormal */
                              : dsv4_f32_to_f16(uni() * (kind == 1 ? 10.0f : 0.01f));
                memcpy(wr + 34 * b, &d, 2);
            }
        }
    }
    for (long long t = 0; t < n; t++) {
        dsv4_q8_0_act *xa = (dsv4_q8_0_act *)(x + (uint64_t)t * xs);
        if (wkind == 2) {
            for (long long b = 0; b < nb; b++) {
                xa[b].d = 0.75f + 0.001f * (float)b;
                memset(xa[b].qs, 0x80, 32);
            }
            continue;
        }
        const float sc = t % 5 == 0 ? 40.0f : (t % 7 == 3 ? 1e-3f : 1.0f);
        for (long long i = 0; i < in; i++) xf[i] = uni() * sc;
        if (t % 4 == 1 && in >= 64)
            for (int i = 32; i < 64; i++) xf[i] = 0.0f; /* a zero block: d = 0 */
        quant_act_q8_0(xf, xa, in);
    }
    qm_args p;
    memset(&p, 0, sizeof p);
    p.w = w + (uint64_t)row0 * rb;
    p.row_bytes = rb;
    p.n_out = n_out;
    p.nb = nb;
    p.x = x;
    p.x_stride = xs;
    p.n = n;
    p.y = y;
    p.y_stride = ys;
    const bool aligned = qm_aligned(p);
    int fails = 0;
    static const char *const kname[3] = {"v1 ", "v2 ", "v2n"};
    for (int v = 0; v < 3; v++) {
        const float poison = nanf("");
        for (size_t i = 0; i < (size_t)n * ys; i++) y[i] = poison;
        memset(smem, 0xa5, SMEM_BYTES); /* stale bytes must not reach a result */
        if (v == 0)
            for (long long by = 0; by < (n_out + QM_BM - 1) / QM_BM; by++)
                for (long long bx = 0; bx < (n + QM_BN - 1) / QM_BN; bx++)
                    emu_cta(p, aligned, bx, by, smem, acc);
        else if (v == 1)
            emu_grid2<q2_wide>(p, aligned, smem, acc2);
        else
            emu_grid2<q2_narrow>(p, aligned, smem, acc2);
        long long bad = 0, untouched_bad = 0;
        for (long long t = 0; t < n; t++) {
            for (long long o = 0; o < (long long)ys; o++) {
                const float got = y[(uint64_t)t * ys + (uint64_t)o];
                if (o >= n_out) {
                    if (!isnan(got)) untouched_bad++;
                    continue;
                }
                const uint8_t *wr = w + (uint64_t)(row0 + o) * rb;
                const dsv4_q8_0_act *xa = (const dsv4_q8_0_act *)(x + (uint64_t)t * xs);
                const float ref = quant_dot_q8_0(wr, xa, in), ref_s = quant_dot_q8_0_scalar(wr, xa, in);
                uint32_t ug, ur, us;
                memcpy(&ug, &got, 4), memcpy(&ur, &ref, 4), memcpy(&us, &ref_s, 4);
                if (ug != ur || ug != us) {
                    if (bad < 3)
                        printf("  %s %s: row %lld token %lld: %.9g (0x%08x) vs CPU %.9g (0x%08x)\n", kname[v],
                               name, o, t, got, ug, ref, ur);
                    bad++;
                }
            }
        }
        const bool ok = bad == 0 && untouched_bad == 0;
        printf("%s %s %-34s in=%-5lld out=%-4lld n=%-4lld row0=%lld %s: %lld of %lld differ, %lld stray "
               "writes\n",
               ok ? "ok  " : "FAIL", kname[v], name, in, n_out, n, row0, aligned ? "16B path" : "2/4B path",
               bad, n * n_out, untouched_bad);
        fails += !ok;
    }
    free(wbuf), free(xbuf), free(y), free(xf), free(smem), free(acc), free(acc2);
    return fails;
}

int main(void) {
    int fails = 0;
    /* name, in, n_out, n, row0, x_pad (bytes), y_pad (floats), misalign, weights */
    fails += run_case("aligned one tile", 256, 128, 64, 0, 0, 0, 0, 0);
    fails += run_case("aligned ragged rows/tokens", 512, 200, 130, 3, 0, 5, 0, 0);
    fails += run_case("aligned n=2", 256, 77, 2, 1, 0, 0, 0, 1);
    fails += run_case("aligned n=7 strided x", 768, 140, 7, 0, 32, 1, 0, 1);
    fails += run_case("aligned n=9, 1 row", 256, 1, 9, 5, 0, 0, 0, 0);
    fails += run_case("aligned extreme -128", 1024, 33, 11, 0, 0, 0, 0, 2);
    fails += run_case("nb=2 (tiny q_lora)", 64, 150, 4, 0, 0, 0, 0, 0);
    fails += run_case("nb=3 ragged", 96, 129, 65, 2, 0, 3, 0, 1);
    fails += run_case("nb=9 two stages, partial", 288, 40, 13, 0, 4, 0, 0, 1);
    fails += run_case("nb=1", 32, 20, 3, 0, 0, 0, 0, 0);
    fails += run_case("misaligned bases nb=8", 256, 50, 70, 1, 0, 0, 1, 0);
    fails += run_case("misaligned nb=17", 544, 130, 8, 0, 8, 2, 1, 1);
    fails += run_case("extreme -128 unaligned", 160, 17, 5, 0, 0, 0, 1, 2);
    /* v2's 256 x 128 and 128 x 128 tiles and their stage ring: ragged against them, three stages
     * through two buffers */
    fails += run_case("v2 tile ragged 300x200", 512, 300, 200, 3, 0, 5, 0, 0);
    fails += run_case("v2 ring 3 stages, 3 row tiles", 768, 513, 131, 1, 16, 2, 0, 1);
    fails += run_case("v2 ring unaligned nb=23", 736, 260, 129, 0, 4, 0, 1, 1);
    printf("%s: %d case(s) failed\n", fails ? "Q8_0 MMA EMULATION FAILED" : "Q8_0 MMA EMULATION PASSED",
           fails);
    return fails ? 1 : 0;
}
