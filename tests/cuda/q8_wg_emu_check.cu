/* Host emulation of the exact Q8_0 warpgroup GEMM's data movement (cuda_gemm_q8_wg.cuh; the kernels
 * are cuda_gemm_q8_wg.cu), runs anywhere. For both ways the kernels load a stage (T = 256: qw_kernel,
 * every thread; T = 128: qws_kernel's producer warpgroup), with the products of two warpgroups of 64
 * tokens x 128 weight rows, and shapes with tokens and rows off the 128 x 128 tile and groups, it
 *   1. plays every loading thread's stage copies from the kernels' own offsets (qw_src_of) and
 *      destinations (qw_chunk_off + 16 T i; the scales at 8 tid and, for the weights, [block][row]) into a
 *      stage image, and checks that every 16-byte chunk of both tiles and every scale is written exactly
 * once;
 *   2. reads the image the way the tensor cores read it (the PTX ISA's K-major 128-byte-swizzle
 *      address of element (m, k): start + (m / 8) * 1024 + (m % 8) * 128 + 2 k, with address bits 4..6
 *      XOR-ed with bits 7..9), from the start addresses the kernels give each warpgroup, block and k16
 *      step, and the scales from where the kernels read them;
 *   3. maps the m64nNk16 accumulator elements of each thread to outputs (the ISA's D layout, written
 *      here independently: row 16 warp + lane / 4 + 8 (e % 4 / 2), column 8 (e / 4) + 2 (lane % 4) +
 *      e % 2) and checks the kernels' qw_acc_row / qw_acc_col agree;
 * then applies the kernels' update, acc + (d_w * d_x) * isum in block order, and compares every
 * output bit for bit with quant_dot_q8_0 of the CPU (which is what the H200 check q8_wg_check
 * proves of the real kernels). Exit 0 = pass. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "quant/quant.h"
}
#include "backend/cuda/cuda_gemm_q8_wg.cuh"

#define CHECK_RNG_SEED 777
#include "check_rng.h"
#include "q8_wg_data.h"

typedef struct shape {
    uint32_t n;
    uint64_t rows, in;
    uint32_t groups;
} shape;

/* the ISA's K-major 128-byte-swizzle address of element (m, k) (16-bit) of an operand at `start` */
static uint32_t isa_sw128(uint32_t start, int m, int k) {
    const uint32_t a = start + (uint32_t)(m / 8) * 1024 + (uint32_t)(m % 8) * 128 + 2u * (uint32_t)k;
    return a ^ (((a >> 7) & 7u) << 4);
}
static int isa_row(int w, int lane, int e) { return 16 * w + lane / 4 + 8 * ((e % 4) / 2); }
static int isa_col(int lane, int e) { return 8 * (e / 4) + 2 * (lane % 4) + e % 2; }

/* One CTA tile (bx, by, bz) loaded by T threads: fills y for it. Returns the number of
 * layout errors (chunks written twice or never, accumulator maps that disagree). */
template <int T>
static int emulate_cta(const qw_args &p, const uint16_t *xq, const float *xd, const uint16_t *wq,
                       const float *wd, uint32_t bx, uint32_t by, uint32_t bz, float *y) {
    static uint8_t st[QW_STAGE];
    static int cover[QW_STAGE];
    const uint32_t t0 = bx * QW_BM, o0 = by * QW_BN, g = bz;
    const int ns = (int)(p.in / QW_BK), E = 64, C = 256; /* the product threads (two warpgroups) */
    int errors = 0;
    /* the product threads' accumulators: [thread][E] */
    float *acc = (float *)calloc((size_t)C * E, sizeof(float));
    for (int s = 0; s < ns; s++) {
        memset(st, 0xee, sizeof st);
        memset(cover, 0, sizeof cover);
        for (int tid = 0; tid < T; tid++) { /* 1: the loads of stage s */
            const qw_src<T> q = qw_src_of<T>(p, t0, o0, g, tid);
            for (int i = 0; i < 1024 / T; i++) {
                const int dst = q.dst + 16 * T * i;
                memcpy(st + dst, (const uint8_t *)xq + q.a[i] + 128u * s, 16);
                memcpy(st + QW_TILE + dst, (const uint8_t *)wq + q.b[i] + 128u * s, 16);
                cover[dst]++, cover[QW_TILE + dst]++;
            }
            /* T = 256: token tid's scales (tid < 128) or row tid - 128's, from sc; T = 128: both, from sc and
             * sw */
            if (tid < 128) {
                memcpy(st + 2 * QW_TILE + 8 * tid, (const uint8_t *)xd + q.sc + 8u * s, 8);
                cover[2 * QW_TILE + 8 * tid]++;
            }
            if (tid >= 128 || T == 128) {
                const int r = tid & 127;
                const uint8_t *src = (const uint8_t *)wd + (T == 128 ? q.sw : q.sc) + 8u * s;
                uint8_t *d = st + 2 * QW_TILE + QW_SCALES + 4 * r;
                memcpy(d, src, 4), memcpy(d + 512, src + 4, 4);
                cover[2 * QW_TILE + QW_SCALES + 4 * r]++, cover[2 * QW_TILE + QW_SCALES + 512 + 4 * r]++;
            }
        }
        for (int c = 0; c < 2 * QW_TILE; c += 16) errors += cover[c] != 1;
        for (int c = 0; c < 128; c++) errors += cover[2 * QW_TILE + 8 * c] != 1;
        for (int c = 0; c < 256; c++) errors += cover[2 * QW_TILE + QW_SCALES + 4 * c] != 1;
        const float *XD = (const float *)(st + 2 * QW_TILE), *WD = XD + 2 * 128;
        for (int tid = 0; tid < C; tid++) { /* 2 + 3: the products and the update of each block */
            /* product warpgroup v (qw_kernel's warpgroup v, qws_kernel's v + 1): tokens 64 v, all 128 rows */
            const int v = tid / 128, w = (tid / 32) % 4, lane = tid % 32, ta = v, rb = 0;
            for (int j = 0; j < 2; j++)
                for (int e = 0; e < E; e++) {
                    const int m = isa_row(w, lane, e), nn = isa_col(lane, e);
                    errors += qw_acc_row(w, lane, e) != m || qw_acc_col(lane, e) != nn;
                    int32_t isum = 0;
                    for (int kk = 0; kk < 2; kk++) {
                        const uint32_t a0 = (uint32_t)(64 * 128 * ta + 64 * j + 32 * kk);
                        const uint32_t b0 = (uint32_t)(QW_TILE + 64 * 128 * rb + 64 * j + 32 * kk);
                        for (int k = 0; k < 16; k++) {
                            uint16_t ha, hb;
                            memcpy(&ha, st + isa_sw128(a0, m, k), 2);
                            memcpy(&hb, st + isa_sw128(b0, nn, k), 2);
                            isum += (int32_t)dsv4_f16_to_f32(ha) * (int32_t)dsv4_f16_to_f32(hb);
                        }
                    }
                    const int row = 64 * ta + m, col = 64 * rb + nn; /* in the CTA tile */
                    const float dx = XD[2 * row + j], dw = WD[128 * j + col];
                    float *a = &acc[(size_t)tid * E + e];
                    const float sc = dw * dx, term = sc * (float)isum;
                    *a = *a + term;
                }
        }
    }
    for (int tid = 0; tid < C; tid++) { /* the stores */
        const int v = tid / 128, w = (tid / 32) % 4, lane = tid % 32, ta = v, rb = 0;
        for (int e = 0; e < E; e++) {
            const uint32_t tok = t0 + 64 * ta + isa_row(w, lane, e), o = o0 + 64 * rb + isa_col(lane, e);
            if (tok < p.n && o < p.rows)
                y[(uint64_t)tok * p.y_stride + (uint64_t)g * p.rows + o] = acc[(size_t)tid * E + e];
        }
    }
    free(acc);
    return errors;
}

template <int T> static int run(const shape *s) {
    const uint64_t R = s->rows * s->groups, L = s->in * s->groups, nbw = s->in / 32, nbx = L / 32;
    uint8_t *w = q8wg_weights(R, s->in);
    float *x = q8wg_acts((uint64_t)s->n * L);
    /* the prepared operands as the conversion kernels write them: f16 codes and float scales */
    uint16_t *wq = (uint16_t *)malloc(R * s->in * 2), *xq = (uint16_t *)malloc((size_t)s->n * L * 2);
    float *wdv = (float *)malloc(R * nbw * 4), *xdv = (float *)malloc((size_t)s->n * nbx * 4);
    for (uint64_t b = 0; b < R * nbw; b++) {
        const dsv4_block_q8_0 *blk = (const dsv4_block_q8_0 *)(w + b * 34);
        for (int k = 0; k < 32; k++) wq[b * 32 + k] = dsv4_f32_to_f16((float)blk->qs[k]);
        wdv[b] = dsv4_f16_to_f32(blk->d);
    }
    dsv4_q8_0_act *act = (dsv4_q8_0_act *)malloc(nbx * sizeof *act);
    for (uint32_t t = 0; t < s->n; t++) {
        quant_act_q8_0(x + (uint64_t)t * L, act, (int64_t)L);
        for (uint64_t b = 0; b < nbx; b++) {
            for (int k = 0; k < 32; k++)
                xq[((uint64_t)t * nbx + b) * 32 + k] = dsv4_f32_to_f16((float)act[b].qs[k]);
            xdv[(uint64_t)t * nbx + b] = act[b].d;
        }
    }
    qw_args p;
    memset(&p, 0, sizeof p);
    p.xq = xq, p.xd = xdv, p.wq = wq, p.wd = wdv, p.L = L, p.in = s->in, p.rows = (uint32_t)s->rows,
    p.n = s->n;
    const size_t ybytes = (size_t)s->n * R * sizeof(float);
    float *y = (float *)malloc(ybytes);
    memset(y, 0xff, ybytes);
    p.y = y, p.y_stride = R;
    int layout = 0;
    const uint32_t nx = (s->n + QW_BM - 1) / QW_BM, ny = (uint32_t)((s->rows + QW_BN - 1) / QW_BN);
    if (T == 256) /* qw_kernel: a CTA per tile */
        for (uint32_t bz = 0; bz < s->groups; bz++)
            for (uint32_t by = 0; by < ny; by++)
                for (uint32_t bx = 0; bx < nx; bx++)
                    layout += emulate_cta<T>(p, xq, xdv, wq, wdv, bx, by, bz, y);
    else /* qws_kernel: the tiles of its walk, each once */
        for (uint32_t i = 0; i < nx * ny * s->groups; i++) {
            const qws_tile tl = qws_tile_of(i, nx, ny);
            layout += emulate_cta<T>(p, xq, xdv, wq, wdv, tl.t0 / QW_BM, tl.o0 / QW_BN, tl.g, y);
        }
    uint64_t bad = 0;
    for (uint32_t t = 0; t < s->n; t++)
        for (uint64_t o = 0; o < R; o++) {
            const uint64_t g = o / s->rows;
            quant_act_q8_0(x + (uint64_t)t * L + g * s->in, act, (int64_t)s->in);
            const float ref = quant_dot_q8_0(w + o * nbw * 34, act, (int64_t)s->in);
            bad += memcmp(&ref, &y[(uint64_t)t * R + o], 4) != 0;
        }
    printf("%s T=%d n=%u rows=%llu in=%llu groups=%u: %d layout errors, %llu of %llu outputs differ from "
           "quant_dot_q8_0\n",
           layout || bad ? "FAIL" : "ok  ", T, s->n, (unsigned long long)s->rows, (unsigned long long)s->in,
           s->groups, layout, (unsigned long long)bad, (unsigned long long)((uint64_t)s->n * R));
    free(w), free(x), free(wq), free(xq), free(wdv), free(xdv), free(act), free(y);
    return layout || bad;
}

int main(void) {
    const shape shapes[] = {{5, 3, 64, 1}, {130, 140, 128, 2}, {128, 128, 192, 1}, {257, 64, 64, 3}};
    int fails = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        fails += run<256>(&shapes[i]) + run<128>(&shapes[i]);
    printf(fails ? "Q8 WG EMULATION FAILED: %d\n" : "Q8 WG EMULATION PASSED\n", fails);
    return fails ? 1 : 0;
}
