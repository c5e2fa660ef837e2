/* Units of the f16 tensor-core routed-expert products (cuda_ops_moe_half.cu): the IQ2_XXS gate/up
 * and the Q2_K down, host and device: tests/cuda/moe_half_emu_check.cu runs these same functions on
 * the CPU with an emulated mma.m16n8k16 f16 product.
 *
 * Not bitwise the CPU (the exact path is cuda_ops_moe_wide.cu; this one is its faster companion
 * for large prefill chunks, as the cuBLAS path is for the dense products). What it computes:
 *   - activations: the CPU's Q8_K values q * d (one rounding in f32) of each token row, times 2^-e
 *     where the row's largest |value| is over XB_XMAX (the cuBLAS path's rule), rounded to f16;
 *   - IQ2_XXS weights: the element is d * ls * g * sign / 8 (ls = 2 * (a1 >> 28) + 1 <= 31, g a
 *     grid value <= 43). (g * sign) * ls is an exact f16 integer (|.| <= 1333), and d * 2^(p - 3)
 *     is an exact f16 (d is one; p is the tensor's power-of-two shift), so the one rounding is
 *     their product: f16(d * ls * g * sign * 2^(p - 3)), relative error <= 2^-11. p is chosen per
 *     tensor from its largest |d| (one scan at backend creation) so that every element stays
 *     below 2^15 in magnitude; the outputs are multiplied by 2^-p (exact);
 *   - Q2_K weights (the down product): the element is a q - b with a = d sc, b = dmin m (q <= 3,
 *     sc, m <= 15; both exact in f32), computed as fma(f16(q), f16(a 2^p), f16(-b 2^p)) in f16:
 *     three roundings, each relative 2^-11 of |a q| or |b| (p from the tensor's largest d and
 *     dmin: max(45 d, 15 dmin) 2^p <= 2^15); its activations are the Q8_K values of the mid rows
 *     (as the CPU quantizes them), scaled and rounded as above;
 *   - the sums: mma.m16n8k16 f16 x f16 -> f32 over the whole row (no per-superblock update).
 * So each output is the exact dot product of the two rounded operand rows up to the tensor
 * cores' f32 accumulation; against the CPU's quant_dot_iq2_xxs the difference is that of f16
 * operands (~1e-3 of the row's sum of |w x| at worst, ~1e-4 typical).
 *
 * The CTA is cuda_moe_wide.cuh's with W = 8 or 16 warps: a tile of up to 64 pairs of one expert,
 * row blocks of 16 W gate + the same 16 W up rows (each warp two m16 tiles: rows 16w.. of gate and
 * of up), superblock steps through a cp.async pipeline (the raw weight superblocks as the wide kernel stages
 * them; the tile's f16 activations for the superblock). Lane t decodes elements 8t..8t+7 of its rows of a
 * 32-element sub-block (one grid entry): the f16 grid and sign tables are replicated 8 times, copy h read by
 * lanes with lane % 8 == h, so each 16-byte table read of a quarter warp hits 8 distinct bank groups. The k
 * order: element 8t + i of the sub-block is k 2t + i (i < 2), 2t + 8 + (i - 2) (i = 2, 3) of the first
 * m16n8k16 and the same with 8t + 4 + i of the second, in A and B alike (a product over k is a sum). */
#ifndef DSV4_CUDA_MOE_HALF_CUH
#define DSV4_CUDA_MOE_HALF_CUH

#include "backend/cuda/cuda_gemm_blas.cuh" /* xb_pow2, xb_row_exp, XB_XMAX */
#include "backend/cuda/cuda_moe_wide.cuh"  /* mw_*: the staged rows, mw_decode8's words */

#ifdef __CUDA_ARCH__
#include <cuda_fp16.h>
#endif

enum {
    MH_BN = MW_BN, /* pairs per tile */
    MH_NT = MW_NT,
    MH_MT = MW_MT,
    /* a pair's 256 f16 activations per stage + 64 B: 576 = 64 mod 128, so the two pairs of a
     * quarter warp's 16-byte reads (4 lanes each, 64 contiguous bytes) fill the 32 banks */
    MH_XROW = 576,
    MH_REP = 8,                        /* copies of the f16 tables */
    MH_GRID_BYTES = 256 * MH_REP * 16, /* 256 grid entries as 4 half2 words */
    MH_SIGN_BYTES = 128 * MH_REP * 16, /* 128 sign indices as 4 words of 0x8000 bits */
    MH_ELEM_MAX = 1333                 /* 43 * 31: the largest |g * ls| */
};
/* A CTA of W warps (8 or 16) stages 32 W weight rows per step, each warp two m16 tiles. Gate/up
 * (DUAL): 16 W gate rows and the same up rows, warp w owns gate rows 16w.. (m = 0) and up rows
 * 16w.. (m = 1); down: rows 32w + 16m... */
MX_HD int mh_rows(int W) { return 32 * W; }
MX_HD int mh_rb_rows(int W, bool dual) { return dual ? 16 * W : 32 * W; }
MX_HD int mh_tile_row(int W, bool dual, int w, int m) { return dual ? m * 16 * W + 16 * w : 32 * w + 16 * m; }
MX_HD int mh_out_row(bool dual, int w, int m) { return dual ? 16 * w : 32 * w + 16 * m; }
MX_HD int mh_max_stages(int W) { return W >= 16 ? 2 : 3; }
MX_HD int mh_wrow(int kind) { return mw_wrow(kind); } /* staged row bytes: IQ2_XXS 72, Q2_K 96 */

/* The shared-memory image of a CTA (byte offsets); the f16 tables only for IQ2_XXS. */
struct mh_layout {
    int pid, xs, grid, sign, stage0, stage_bytes, w, x, total, stages;
};
MX_HD mh_layout mh_layout_of(int kind, int stages, int W) {
    mh_layout l;
    l.stages = stages;
    l.pid = 0;
    l.xs = 4 * MH_BN;
    l.grid = l.xs + 4 * MH_BN;
    l.sign = l.grid + (kind == GM_IQ2_XXS ? MH_GRID_BYTES : 0);
    l.stage0 = l.sign + (kind == GM_IQ2_XXS ? MH_SIGN_BYTES : 0);
    l.w = 0;
    l.x = mh_rows(W) * mh_wrow(kind);
    l.stage_bytes = l.x + MH_BN * MH_XROW;
    l.total = l.stage0 + stages * l.stage_bytes;
    return l;
}

/* ---- f16 helpers (host: the same IEEE operations) ---- */
MX_HD uint16_t mh_f2h(float f) {
#ifdef __CUDA_ARCH__
    return __half_as_ushort(__float2half_rn(f));
#else
    return dsv4_f32_to_f16(f);
#endif
}
/* a * b per half, rounded to nearest even (the f32 product of two halves is exact) */
MX_HD uint32_t mh_hmul2(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
    uint32_t r;
    asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(b));
    return r;
#else
    const uint16_t lo = mh_f2h(gm_f16((uint16_t)a) * gm_f16((uint16_t)b));
    const uint16_t hi = mh_f2h(gm_f16((uint16_t)(a >> 16)) * gm_f16((uint16_t)(b >> 16)));
    return (uint32_t)lo | ((uint32_t)hi << 16);
#endif
}
/* a + b per half (used only where the sum is exact) */
MX_HD uint32_t mh_hadd2(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
    uint32_t r;
    asm("add.rn.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(b));
    return r;
#else
    const uint16_t lo = mh_f2h(gm_f16((uint16_t)a) + gm_f16((uint16_t)b));
    const uint16_t hi = mh_f2h(gm_f16((uint16_t)(a >> 16)) + gm_f16((uint16_t)(b >> 16)));
    return (uint32_t)lo | ((uint32_t)hi << 16);
#endif
}
/* a * b + c per half, one rounding (the host sums in double, then rounds through f32: it can
 * differ from the device in the last bit at a double-rounding tie; the checks bound, not match) */
MX_HD uint32_t mh_hfma2(uint32_t a, uint32_t b, uint32_t c) {
#ifdef __CUDA_ARCH__
    uint32_t r;
    asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
#else
    uint32_t r = 0;
    for (int h = 0; h < 2; h++) {
        const double v = (double)gm_f16((uint16_t)(a >> (16 * h))) * gm_f16((uint16_t)(b >> (16 * h))) +
                         gm_f16((uint16_t)(c >> (16 * h)));
        r |= (uint32_t)mh_f2h((float)v) << (16 * h);
    }
    return r;
#endif
}
MX_HD uint32_t mh_dup(uint16_t h) { return (uint32_t)h * 0x10001u; }

/* ---- a tensor's shift p ----
 * IQ2_XXS, from the largest |d| (half bits, sign dropped): the largest p with
 * d_max * 2^(p - 3) * 1333 <= 2^15, so no element's f16 reaches 2^15 (room below 65504).
 * Q2_K, from the largest |d| and |dmin|: the largest p with max(45 d_max, 15 dmin_max) 2^p <= 2^15.
 * 0 for an all-zero tensor. *ok is false for a non-finite scale (such tensors stay exact). */
MX_HD int mh_shift_of(int kind, uint32_t max_d_bits, uint32_t max_m_bits, bool *ok) {
    *ok = max_d_bits < 0x7c00u && (kind == GM_IQ2_XXS || max_m_bits < 0x7c00u);
    if (!*ok) return 0;
    const float top = kind == GM_IQ2_XXS
                          ? gm_f16((uint16_t)max_d_bits) * (float)MH_ELEM_MAX * 0.125f
                          : fmaxf(45.0f * gm_f16((uint16_t)max_d_bits), 15.0f * gm_f16((uint16_t)max_m_bits));
    if (top == 0.0f) return 0;
    int p = 60; /* top >= 2^-24: top * 2^60 > 2^15, so the loop always runs */
    while (p > -60 && top * xb_pow2(p) > 32768.0f) p--;
    return p;
}

/* ---- the IQ2_XXS tables (built per CTA from the grid and the 7-bit sign patterns) ----
 * grid[(i * 8 + h) * 4 + k] = half2 of grid bytes 2k, 2k + 1 of entry i;
 * sign[(i * 8 + h) * 4 + k] = 0x8000 if element 2k of sign index i is negative, | 0x80000000 for
 * element 2k + 1. */
MX_HD void mh_fill_tables(uint32_t *grid_h, uint32_t *sign_h, const uint64_t *grid, const uint8_t *signs,
                          int tid, int nthr) {
    for (int i = tid; i < 256 * MH_REP * 4; i += nthr) {
        const int e = i / (MH_REP * 4), k = i & 3;
        const uint64_t gv = grid[e];
        const uint32_t b0 = (uint32_t)(gv >> (16 * k)) & 0xff, b1 = (uint32_t)(gv >> (16 * k + 8)) & 0xff;
        grid_h[i] = (uint32_t)mh_f2h((float)b0) | ((uint32_t)mh_f2h((float)b1) << 16);
    }
    if (!sign_h) return; /* the grid alone (cuda_moe_ws.cu computes the sign masks) */
    for (int i = tid; i < 128 * MH_REP * 4; i += nthr) {
        const int e = i / (MH_REP * 4), k = i & 3;
        const uint32_t sg = signs[e];
        sign_h[i] = (((sg >> (2 * k)) & 1u) << 15) | (((sg >> (2 * k + 1)) & 1u) << 31);
    }
}

/* The superblock scales of rows r0 + g and r0 + g + 8 of the stage (IQ2_XXS: parity s), as f16 in
 * both halves; exact, as an f16 times a power of two that keeps it in the normal range. IQ2_XXS:
 * dw2 = d 2^(p - 3) (wsc = 2^(p - 3)); Q2_K: dw2 = d 2^p, nm2 = -dmin 2^p (wsc = 2^p). */
struct mh_scales {
    uint32_t dw2[2], nm2[2];
};
template <int K>
MX_HD void mh_row_scales(const uint8_t *w, int r0, int s, int lane, float wsc, mh_scales *o) {
    float dw[2], dm[2];
    mw_row_scales<K>(w, r0, s, lane, dw, dm);
    for (int h = 0; h < 2; h++) {
        o->dw2[h] = mh_dup(mh_f2h(dw[h] * wsc));
        o->nm2[h] = K == GM_Q2_K ? mh_dup(mh_f2h(-(dm[h] * wsc))) : 0u;
    }
}
/* v <= 1023 as an f16 integer in both halves without a conversion instruction: the halves
 * 0x6400 | v are 1024 + v, and adding -1024 (0xE400) is exact */
MX_HD uint32_t mh_small2(uint32_t v) { return mh_hadd2(v * 0x10001u + 0x64006400u, 0xE400E400u); }

/* Grid entry gi and sign index si from copy rep of the replicated tables: the entry's f16 values gw and
 * its sign bits sw (4 words each) */
MX_HD void mh_iq2_tables(uint32_t gi, uint32_t si, int rep, const uint32_t *grid_h, const uint32_t *sign_h,
                         uint32_t gw[4], uint32_t sw[4]) {
    const uint32_t *G = grid_h + (gi * MH_REP + rep) * 4;
    const uint32_t *S = sign_h + (si * MH_REP + rep) * 4;
#ifdef __CUDA_ARCH__
    const uint4 gv = *(const uint4 *)G, sv = *(const uint4 *)S;
    gw[0] = gv.x, gw[1] = gv.y, gw[2] = gv.z, gw[3] = gv.w;
    sw[0] = sv.x, sw[1] = sv.y, sw[2] = sv.z, sw[3] = sv.w;
#else
    for (int k = 0; k < 4; k++) gw[k] = G[k], sw[k] = S[k];
#endif
}
/* Lane t's IQ2_XXS grid entry of sub-block j of a staged row (superblock parity s): its f16 grid
 * values gw and the f16 sign bits sw from the replicated tables (copy lane % 8: a quarter warp's
 * 16-byte reads hit 8 distinct bank groups); returns the sub-block's a1 word (signs, scale). */
MX_HD uint32_t mh_iq2_entry(const uint8_t *row, int s, int j, int lane, const uint32_t *grid_h,
                            const uint32_t *sign_h, uint32_t gw[4], uint32_t sw[4]) {
    const int t = lane & 3, rep = lane & (MH_REP - 1);
    uint32_t a0, a1;
    mw_iq2_words(row, s, j, &a0, &a1);
    /* grid index: byte t of a0 (one PRMT); sign index: bits 7t.. of a1 */
    mh_iq2_tables(mw_perm(a0, 0, 0x4440u | (uint32_t)t), (a1 >> (7 * t)) & 127, rep, grid_h, sign_h, gw, sw);
    return a1;
}

/* Elements 8t..8t+7 of sub-block j of a staged row (IQ2_XXS: superblock parity s) as 4 half2
 * words. IQ2_XXS: f16(g * sign * ls * d 2^(p-3)); Q2_K: fma(q, f16(d sc 2^p), f16(-dmin m 2^p)). */
template <int K>
MX_HD void mh_decode8(const uint8_t *row, int s, int j, int lane, const uint32_t *grid_h,
                      const uint32_t *sign_h, const mh_scales &sc, int h2, uint32_t h[4]) {
    const int t = lane & 3;
    if (K == GM_Q2_K) { /* scales[16], qs[64]: sub-block j in half j/4 at shift 2(j%4) */
        const int hf = j >> 2, sh = 2 * (j & 3);
        uint32_t q0, q1;
        mw_ld64(row + 16 + 32 * hf + 8 * t, &q0, &q1);
        const uint32_t sw = qm_ld32(row + 8 * hf + 4 * ((j & 3) >> 1));
        const uint32_t sb = (sw >> (8 * (2 * (j & 1) + (t >> 1)))) & 0xff; /* sc | m << 4 */
        /* f16(d sc 2^p) and f16(-dmin m 2^p): one rounding each of the exact products */
        const uint32_t a2 = mh_hmul2(sc.dw2[h2], mh_small2(sb & 15));
        const uint32_t nb2 = mh_hmul2(sc.nm2[h2], mh_small2(sb >> 4));
        const uint32_t x0 = (q0 >> sh) & 0x03030303u, x1 = (q1 >> sh) & 0x03030303u;
        /* 0x6400 | q is the half 1024 + q; minus 1024 (0xE400) is q, exactly */
        const uint32_t m1024 = 0xE400E400u;
        h[0] = mh_hfma2(mh_hadd2(mw_perm(x0, 0x64u, 0x4140u), m1024), a2, nb2);
        h[1] = mh_hfma2(mh_hadd2(mw_perm(x0, 0x64u, 0x4342u), m1024), a2, nb2);
        h[2] = mh_hfma2(mh_hadd2(mw_perm(x1, 0x64u, 0x4140u), m1024), a2, nb2);
        h[3] = mh_hfma2(mh_hadd2(mw_perm(x1, 0x64u, 0x4342u), m1024), a2, nb2);
        return;
    }
    uint32_t gw[4], sw[4];
    const uint32_t a1 = mh_iq2_entry(row, s, j, lane, grid_h, sign_h, gw, sw);
    /* ls = 2 * (a1 >> 28) + 1, an exact f16 integer */
    const uint32_t ls2 = mh_small2(2 * (a1 >> 28) + 1);
    MG_UNROLL
    for (int k = 0; k < 4; k++) h[k] = mh_hmul2(mh_hmul2(gw[k] ^ sw[k], ls2), sc.dw2[h2]);
}

/* A fragments of sub-block j for rows r0 + g, r0 + g + 8: a[0..3] the first m16n8k16 (elements
 * 8t..8t+3), a[4..7] the second (8t+4..8t+7). */
template <int K>
MX_HD void mh_frag_a(const uint8_t *w, int r0, int s, int j, int lane, const uint32_t *grid_h,
                     const uint32_t *sign_h, const mh_scales &sc, uint32_t a[8]) {
    constexpr int WR = K == GM_IQ2_XXS ? 72 : 96;
    const uint8_t *lo = w + (r0 + (lane >> 2)) * WR;
    uint32_t h0[4], h1[4];
    mh_decode8<K>(lo, s, j, lane, grid_h, sign_h, sc, 0, h0);
    mh_decode8<K>(lo + 8 * WR, s, j, lane, grid_h, sign_h, sc, 1, h1);
    a[0] = h0[0], a[1] = h1[0], a[2] = h0[1], a[3] = h1[1];
    a[4] = h0[2], a[5] = h1[2], a[6] = h0[3], a[7] = h1[3];
}
/* B fragments of sub-block j for pairs 8nt..: elements 8t..8t+7 of pair g (16 bytes) */
MX_HD void mh_frag_b(const uint8_t *x, int nt, int j, int lane, uint32_t b[4]) {
    const uint8_t *p = x + (8 * nt + (lane >> 2)) * MH_XROW + 64 * j + 16 * (lane & 3);
#ifdef __CUDA_ARCH__
    const uint4 v = *(const uint4 *)p;
    b[0] = v.x, b[1] = v.y, b[2] = v.z, b[3] = v.w;
#else
    for (int k = 0; k < 4; k++) b[k] = qm_ld32(p + 4 * k);
#endif
}

/* ---- activations: f16 rows ----
 * Row r (gate/up: a token; down: a pair's mid row): the Q8_K values times 2^-e in halves; xs[r] =
 * 2^e multiplies the outputs. Element v of block b of a Q8_K row (292 B: f32 d, int8 qs[256],
 * int16 bsums[16]). */
MX_HD float mh_act_value(const uint8_t *blk, int v, float scale) {
    const float d = gm_bits(qm_ld32(blk));
    return xb_mul(xb_mul((float)(int8_t)blk[4 + v], d), scale);
}
/* The row's largest |value| bound from its block scales: the Q8_K quantizer maps the block's
 * largest |x| to |q| = 127 (or 128 for -128 = round(-127.5...)), so 128 |d| bounds every value. */
MX_HD float mh_block_bound(const uint8_t *blk) { return 128.0f * fabsf(gm_bits(qm_ld32(blk))); }

/* ---- operands of one product (device pointers) ---- */
struct mh_params {
    const uint8_t *w0, *w1; /* gate, up (IQ2_XXS) or down (Q2_K, w1 unused) expert tensors */
    uint64_t row_bytes, expert_bytes;
    int n_out, in, kdiv;   /* activation row of pair p: p / kdiv (gate/up: k; down: 1) */
    const uint16_t *xh;    /* [rows][in] f16 */
    const float *xs;       /* [rows] 2^e */
    float wsc[2], winv[2]; /* w0, w1: the scale folded into the weights (mh_row_scales), 2^-p */
    const int4 *tiles;
    const int *n_tiles;
    const int32_t *list;
    const float *weights; /* route weights (gate/up) */
    float clamp;
    int clamp_on;
    float *out; /* mid (gate/up) or y (down): pair p's row at p * out_stride */
    uint64_t out_stride;
    const uint64_t *grid;
    const uint8_t *signs;
    int n_rb, rb_per_cta;
    mh_layout lay;
};

/* Thread tid (of 32 W) copies step (row block rb, superblock s) of tile (e, pairs pid[0..mt)) into
 * stage st: the weights as the wide kernel stages them (32 W rows), then 16 bytes at a time the
 * tile's f16 activations (rows past mt repeat its last pair). */
template <int K, int W, bool DUAL>
MX_HD void mh_load_stage(const mh_params &p, int e, const int *pid, int mt, int rb, int s, uint8_t *st,
                         int tid) {
    mw_load_weights<K, DUAL, 32 * W>(p.w0, p.w1, p.row_bytes, p.expert_bytes, p.n_out, e, rb, s, st + p.lay.w,
                                     tid);
    const mw_copy cp;
    const int rows = (mt + 7) & ~7;
    for (int i = tid; i < rows * 32; i += 32 * W) {
        const int r = i >> 5, c = i & 31;
        const uint64_t xr = (uint64_t)(pid[r < mt ? r : mt - 1] / p.kdiv);
        cp(st + p.lay.x + r * MH_XROW + 16 * c,
           (const uint8_t *)(p.xh + xr * (uint64_t)p.in + 256 * s) + 16 * c, 16);
    }
}

#endif
