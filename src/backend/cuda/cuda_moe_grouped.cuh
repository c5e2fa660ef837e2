/* Units of the grouped (prefill) routed-expert product (cuda_ops_moe_grouped.cu), host and
 * device, so tests/cuda/moe_grouped_emu_check.cu runs the very code the kernel runs.
 *
 * A CTA takes one expert and a tile of up to MG_TT of its (token, slot) pairs; each thread owns one
 * weight row and computes its dot with every activation row of the tile, so a weight row is read
 * and decoded once per tile instead of once per pair. The tile's activation rows sit in shared
 * memory repacked (int8 values, block scales, Q8_K block sums apart, 16-byte aligned). Integer
 * sums are exact (dp4a on int8 values; sub-block scales and mins applied as integers), and per
 * (row, pair) the float terms are formed and added in block order exactly as quant/dot_scalar.c
 * does, so every value equals quant_dot_* bit for bit (the users build with --fmad=false). */
#ifndef DSV4_CUDA_MOE_GROUPED_CUH
#define DSV4_CUDA_MOE_GROUPED_CUH

#include <stdlib.h>

#include "backend/cuda/cuda_gemm_units.cuh"

#define MG_TT 8 /* pairs per tile */

#ifdef __CUDA_ARCH__
#define MG_UNROLL _Pragma("unroll")
#else
#define MG_UNROLL
#endif

/* Words of one activation block in global memory: Q8_0 act (d + 32 int8) or Q8_K (d + 256 int8 +
 * 16 int16 sums). */
GM_HD int mg_act_block_words(int kind) { return kind == GM_Q8_0 ? 9 : 73; }
GM_HD int mg_block_elems(int kind) { return kind == GM_Q8_0 ? 32 : 256; }

/* The tile's activations, repacked: q [MG_TT][in] int8, d [MG_TT][in / block] f32, bs [MG_TT][in /
 * 16] int16 (Q8_K only). */
struct mg_xtile {
    int8_t *q;
    float *d;
    int16_t *bs;
    int in, nblk;
};

/* Bytes of the repacked tile (each part rounded to 16 bytes). */
GM_HD size_t mg_xtile_bytes(int kind, int in) {
    const int nblk = in / mg_block_elems(kind);
    size_t b = ((size_t)MG_TT * in + 15) & ~(size_t)15;
    b += ((size_t)MG_TT * nblk * 4 + 15) & ~(size_t)15;
    if (kind != GM_Q8_0) b += ((size_t)MG_TT * (in / 16) * 2 + 15) & ~(size_t)15;
    return b;
}
GM_HD mg_xtile mg_xtile_at(uint8_t *base, int kind, int in) {
    mg_xtile x;
    x.in = in;
    x.nblk = in / mg_block_elems(kind);
    x.q = (int8_t *)base;
    size_t o = ((size_t)MG_TT * in + 15) & ~(size_t)15;
    x.d = (float *)(base + o);
    o += ((size_t)MG_TT * x.nblk * 4 + 15) & ~(size_t)15;
    x.bs = kind == GM_Q8_0 ? (int16_t *)0 : (int16_t *)(base + o);
    return x;
}

/* Word w of block b of tile row t's activation (as it lies in global memory) into the tile. */
GM_HD void mg_stage_put(const mg_xtile &x, int kind, int t, int b, int w, uint32_t v) {
    const int qwords = kind == GM_Q8_0 ? 8 : 64;
    if (w == 0) {
        x.d[t * x.nblk + b] = gm_bits(v);
    } else if (w <= qwords) {
        ((uint32_t *)x.q)[((size_t)t * x.in + (size_t)b * mg_block_elems(kind)) / 4 + (w - 1)] = v;
    } else {
        ((uint32_t *)x.bs)[((size_t)t * (x.in / 16) + 16 * b) / 2 + (w - 1 - qwords)] = v;
    }
}

/* ---- loads and integer helpers ---- */

GM_HD uint32_t mg_ld32(const uint8_t *p) { /* p 4-aligned */
#ifdef __CUDA_ARCH__
    return *(const uint32_t *)p;
#else
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
#endif
}
GM_HD uint32_t mg_ld16(const uint8_t *p) { /* p 2-aligned */
#ifdef __CUDA_ARCH__
    return *(const uint16_t *)p;
#else
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
#endif
}
/* N little-endian words from a 2-aligned p, with aligned loads only and no byte outside
 * [p, p + 4N). */
template <int N> GM_HD void mg_ld_a2(const uint8_t *p, uint32_t *w) {
    if (((uintptr_t)p & 3) == 0) {
        MG_UNROLL
        for (int i = 0; i < N; i++) w[i] = mg_ld32(p + 4 * i);
    } else {
        uint32_t prev = mg_ld16(p);
        MG_UNROLL
        for (int i = 0; i < N; i++) {
            const uint32_t nxt = i < N - 1 ? mg_ld32(p + 2 + 4 * i) : mg_ld16(p + 4 * N - 2);
            w[i] = prev | (nxt << 16);
            prev = nxt >> 16;
        }
    }
}
/* 4 words of the tile (16-byte aligned) */
GM_HD void mg_ld4(const int8_t *p, int v[4]) {
#ifdef __CUDA_ARCH__
    const int4 q = *(const int4 *)p;
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
#else
    memcpy(v, p, 16);
#endif
}
GM_HD int mg_dp4a(int a, int b, int c) {
#ifdef __CUDA_ARCH__
    return __dp4a(a, b, c);
#else
    for (int i = 0; i < 4; i++) c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    return c;
#endif
}
/* per byte: m ? -g : g (m bytes 0 or 0xff; g bytes 0..127) */
GM_HD uint32_t mg_neg(uint32_t g, uint32_t m) {
#ifdef __CUDA_ARCH__
    return __vsub4(g ^ m, m);
#else
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) r |= (uint32_t)(uint8_t)(((g ^ m) >> (8 * i)) - (m >> (8 * i))) << (8 * i);
    return r;
#endif
}
/* IQ2_XXS sign index (7 bits) -> byte mask of the negated grid bytes (0xff per negative). */
GM_HD uint64_t mg_sign_mask(const uint8_t *signs_tab, int s) {
    const uint8_t sg = signs_tab[s];
    uint64_t m = 0;
    for (int k = 0; k < 8; k++)
        if ((sg >> k) & 1) m |= (uint64_t)0xff << (8 * k);
    return m;
}

/* 16 tile values (int8) at q against 4 weight words. */
GM_HD int mg_dot16(const int8_t *q, const uint32_t w[4], int acc) {
    int x[4];
    mg_ld4(q, x);
    acc = mg_dp4a((int)w[0], x[0], acc);
    acc = mg_dp4a((int)w[1], x[1], acc);
    acc = mg_dp4a((int)w[2], x[2], acc);
    return mg_dp4a((int)w[3], x[3], acc);
}

/* ---- one weight row against the tile's rows 0..mt-1: acc[t] = quant_dot_*(wr, x_t) ---- */

template <int K>
GM_HD void mg_row(const uint8_t *wr, const mg_xtile &x, int mt, const uint64_t *grid, const uint64_t *smask,
                  float acc[MG_TT]) {
    MG_UNROLL
    for (int t = 0; t < MG_TT; t++) acc[t] = 0.0f;
    const int in = x.in;
    if (K == GM_IQ2_XXS) {
        for (int b = 0; b < x.nblk; b++) {
            const uint8_t *blk = wr + (size_t)b * 66;
            const float dw = gm_f16((uint16_t)mg_ld16(blk));
            uint32_t qw[16];
            mg_ld_a2<16>(blk + 2, qw);
            int isum[MG_TT];
            MG_UNROLL
            for (int t = 0; t < MG_TT; t++) isum[t] = 0;
            MG_UNROLL
            for (int sb = 0; sb < 8; sb++) {
                const uint32_t a0 = qw[2 * sb], a1 = qw[2 * sb + 1];
                uint32_t v[8];
                MG_UNROLL
                for (int l = 0; l < 4; l++) {
                    const uint64_t g = grid[(a0 >> (8 * l)) & 0xff];
                    const uint64_t m = smask[(a1 >> (7 * l)) & 127];
                    v[2 * l] = mg_neg((uint32_t)g, (uint32_t)m);
                    v[2 * l + 1] = mg_neg((uint32_t)(g >> 32), (uint32_t)(m >> 32));
                }
                const int ls = (int)(2 * (a1 >> 28) + 1);
                MG_UNROLL
                for (int t = 0; t < MG_TT; t++) {
                    if (t < mt) {
                        const int8_t *q = x.q + (size_t)t * in + 256 * b + 32 * sb;
                        const int s = mg_dot16(q + 16, v + 4, mg_dot16(q, v, 0));
                        isum[t] += s * ls;
                    }
                }
            }
            MG_UNROLL
            for (int t = 0; t < MG_TT; t++) {
                if (t < mt) {
                    const float d = dw * x.d[t * x.nblk + b];
                    acc[t] = acc[t] + d * (float)isum[t];
                }
            }
        }
        MG_UNROLL
        for (int t = 0; t < MG_TT; t++) acc[t] = 0.125f * acc[t];
    } else if (K == GM_Q2_K) {
        for (int b = 0; b < x.nblk; b++) {
            const uint8_t *blk = wr + (size_t)b * 84; /* scales[16], qs[64], d, dmin */
            uint32_t sc[4];
            MG_UNROLL
            for (int i = 0; i < 4; i++) sc[i] = mg_ld32(blk + 4 * i);
            const uint32_t dd = mg_ld32(blk + 80);
            const float dw = gm_f16((uint16_t)(dd & 0xffff)), mw = gm_f16((uint16_t)(dd >> 16));
            int isum[MG_TT], summs[MG_TT];
            MG_UNROLL
            for (int t = 0; t < MG_TT; t++) isum[t] = 0, summs[t] = 0;
            MG_UNROLL
            for (int h = 0; h < 2; h++) {
                MG_UNROLL
                for (int s = 0; s < 2; s++) {
                    uint32_t qw[4];
                    MG_UNROLL
                    for (int i = 0; i < 4; i++) qw[i] = mg_ld32(blk + 16 + 32 * h + 16 * s + 4 * i);
                    MG_UNROLL
                    for (int j = 0; j < 4; j++) {
                        uint32_t v[4];
                        MG_UNROLL
                        for (int i = 0; i < 4; i++) v[i] = (qw[i] >> (2 * j)) & 0x03030303u;
                        const int si = 8 * h + 2 * j + s;
                        const int scale = (int)((sc[si / 4] >> (8 * (si % 4))) & 15);
                        MG_UNROLL
                        for (int t = 0; t < MG_TT; t++) {
                            if (t < mt) {
                                const int8_t *q = x.q + (size_t)t * in + 256 * b + 128 * h + 32 * j + 16 * s;
                                isum[t] += scale * mg_dot16(q, v, 0);
                            }
                        }
                    }
                }
            }
            MG_UNROLL
            for (int t = 0; t < MG_TT; t++) {
                if (t < mt) {
                    const int16_t *bs = x.bs + (size_t)t * (in / 16) + 16 * b;
                    int sm = 0;
                    MG_UNROLL
                    for (int j = 0; j < 16; j++)
                        sm += (int)bs[j] * (int)((sc[j / 4] >> (8 * (j % 4) + 4)) & 15);
                    summs[t] = sm;
                    const float xd = x.d[t * x.nblk + b];
                    const float dall = xd * dw, dmin = xd * mw;
                    acc[t] = acc[t] + (dall * (float)isum[t] - dmin * (float)summs[t]);
                }
            }
        }
    } else if (K == GM_Q4_K) {
        for (int b = 0; b < x.nblk; b++) {
            const uint8_t *blk = wr + (size_t)b * 144; /* d, dmin, scales[12], qs[128] */
            const uint32_t dd = mg_ld32(blk);
            const float dw = gm_f16((uint16_t)(dd & 0xffff)), mw = gm_f16((uint16_t)(dd >> 16));
            uint8_t s[12];
            MG_UNROLL
            for (int i = 0; i < 3; i++) {
                const uint32_t v = mg_ld32(blk + 4 + 4 * i);
                MG_UNROLL
                for (int k = 0; k < 4; k++) s[4 * i + k] = (uint8_t)(v >> (8 * k));
            }
            int isum[MG_TT], summs[MG_TT];
            MG_UNROLL
            for (int t = 0; t < MG_TT; t++) isum[t] = 0, summs[t] = 0;
            MG_UNROLL
            for (int c = 0; c < 4; c++) {
                uint32_t qw[8];
                MG_UNROLL
                for (int i = 0; i < 8; i++) qw[i] = mg_ld32(blk + 16 + 32 * c + 4 * i);
                MG_UNROLL
                for (int hi = 0; hi < 2; hi++) {
                    const int j = 2 * c + hi;
                    int sc, m;
                    if (j < 4) {
                        sc = s[j] & 63;
                        m = s[j + 4] & 63;
                    } else {
                        sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
                        m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
                    }
                    uint32_t v[8];
                    MG_UNROLL
                    for (int i = 0; i < 8; i++) v[i] = (qw[i] >> (4 * hi)) & 0x0f0f0f0fu;
                    MG_UNROLL
                    for (int t = 0; t < MG_TT; t++) {
                        if (t < mt) {
                            const int8_t *q = x.q + (size_t)t * in + 256 * b + 32 * j;
                            isum[t] += sc * mg_dot16(q + 16, v + 4, mg_dot16(q, v, 0));
                            const int16_t *bs = x.bs + (size_t)t * (in / 16) + 16 * b;
                            summs[t] += m * ((int)bs[2 * j] + (int)bs[2 * j + 1]);
                        }
                    }
                }
            }
            MG_UNROLL
            for (int t = 0; t < MG_TT; t++) {
                if (t < mt) {
                    const float xd = x.d[t * x.nblk + b];
                    const float dall = xd * dw, dmin = xd * mw;
                    acc[t] = acc[t] + (dall * (float)isum[t] - dmin * (float)summs[t]);
                }
            }
        }
    } else { /* Q8_0 x Q8_0 activations, blocks of 32 */
        for (int b = 0; b < x.nblk; b++) {
            const uint8_t *blk = wr + (size_t)b * 34;
            const float dw = gm_f16((uint16_t)mg_ld16(blk));
            uint32_t qw[8];
            mg_ld_a2<8>(blk + 2, qw);
            MG_UNROLL
            for (int t = 0; t < MG_TT; t++) {
                if (t < mt) {
                    const int8_t *q = x.q + (size_t)t * in + 32 * b;
                    const int isum = mg_dot16(q + 16, qw + 4, mg_dot16(q, qw, 0));
                    acc[t] = acc[t] + (dw * x.d[t * x.nblk + b]) * (float)isum;
                }
            }
        }
    }
}

#define MG_MMA_MIN_N                                                                                         \
    4 /* tokens from which the tensor-core products run (types without a measured crossover) */
/* Whether a chunk of n tokens (P = n * k pairs over E experts) runs the tensor-core products; every
 * path gives the same bits, so only speed depends on it. IQ2_XXS gate/up: from 7.5 pairs per expert
 * (2P >= 15E; flash q2, E = 256, k = 6: n >= 320), below which the scalar grouped kernels are faster
 * (bench/results/2026-11-29-s5-moe-crossover-h200.txt: n = 256, 2.76 vs 3.17 ms; n = 384, 3.81 vs
 * 3.43); Q4_K wins at every size measured (n = 16: 1.05 vs 1.29 ms), the others are not measured:
 * from MG_MMA_MIN_N tokens. DSV4_CUDA_MOE_MMA_MIN_N=N: from N tokens, whatever the type. */
static inline bool mg_mma_chunk(uint32_t gate_type, uint64_t n, uint64_t P, uint64_t E) {
    const char *v = getenv("DSV4_CUDA_MOE_MMA_MIN_N");
    const long min_n = v ? strtol(v, NULL, 10) : 0;
    if (min_n >= 2 && min_n <= (1l << 24)) return n >= (uint64_t)min_n;
    if (gate_type == DSV4_TYPE_IQ2_XXS) return 2 * P >= 15 * E;
    return n >= MG_MMA_MIN_N;
}

#endif
