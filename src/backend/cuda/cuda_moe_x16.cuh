/* Units of the exact routed-expert prefill products on Hopper warpgroup tensor cores
 * (cuda_ops_moe_x16.cu): IQ2_XXS gate/up and Q2_K down, f16 operands holding exact integers, f32
 * sums that stay exact, the CPU's float update per superblock. Host and device: the host copies
 * run in tests/cuda/moe_x16_emu_check.cu against quant_dot_* with an emulated product.
 *
 * Why exact (bit for bit quant_dot_iq2_xxs / quant_dot_q2_k over Q8_K activations):
 *   - A (weights) holds integers: IQ2_XXS w' = sign * g * ls (g <= 43 a grid value, ls = 2 l + 1
 *     <= 31: |w'| <= 1333), Q2_K w' = q * sc (<= 45), and for the Q2_K min term the 4-bit mins m;
 *     all are exact f16 (integers up to 2048 are), and so are the decoding steps that form them
 *     (a product or fused multiply-add whose exact result is such an integer is that integer);
 *   - B (activations) holds the Q8_K codes q (|q| <= 128) and, for the min term, the Q8_K block
 *     sums (|bsum| <= 2048): exact f16;
 *   - every product of an f16 pair is exact in the tensor core, and a sum of integers whose
 *     absolute values add up to less than 2^24 is exact in f32 in any order and grouping. Per
 *     (row, pair, superblock): Q2_K |isum| <= 256 * 45 * 128 and |summs| <= 16 * 15 * 2048, far
 *     below; IQ2_XXS Σ|w' q| <= sqrt(Σ w'^2) sqrt(Σ q^2) (Cauchy-Schwarz), so the sums of a tile's
 *     superblock are exact when W2 * Q2 < 2^48, W2 the largest Σ w'^2 of any row superblock of the
 *     tile's expert (gate and up; scanned once per tensor) and Q2 the largest Σ q^2 of the tile's
 *     tokens there ("light"). A heavy superblock of a tile takes the codes split q = 16 hi + lo
 *     (lo = q & 15, hi = q >> 4 in -8..7): two chains (Σ|w' lo| <= 1333 * 15 * 256,
 *     Σ|w' hi| <= 1333 * 8 * 256, both exact) and one fused multiply-add fma(16, c_hi, c_lo): the
 *     single rounding of the exact integer bsum, which is what the CPU's (float)bsum is;
 *   - so each superblock's integer arrives as the CPU's (float)isum / (float)bsum / (float)summs,
 *     and the float update is the CPU's expression with its roundings (no contraction), superblocks
 *     in order from 0.0f, 0.125f * acc at the end for IQ2_XXS.
 *
 * The k order inside a superblock (A and B alike; a product over k is a sum, so any order gives
 * the same integer): k16 step st = 2 j + u of sub-block j (32 elements) holds at position
 * p = 8 hi + 2 t + jj the element 32 j + 8 t + 4 u + 2 hi + jj. Lane t of a warp (g = lane / 4,
 * t = lane % 4) then holds in the A fragment (the mma.m16n8k16 layout: a0 = row g, positions 2t,
 * 2t+1; a1 = row g+8; a2, a3 = positions + 8) elements 8t..8t+7 of its two rows: one IQ2_XXS
 * grid entry, or 8 consecutive Q2_K quants of one byte plane. The activation rows are packed in
 * this order once per chunk, so the tensor cores read B straight from the canonical K-major
 * layout (8 x 8 core matrices of 128 bytes).
 *
 * CTA: 2 warpgroups (256 threads), a tile of <= 64 pairs of one expert, 128 staged weight rows a
 * step (gate/up: warpgroup 0 the gate rows rb * 64 .., warpgroup 1 the same up rows; down:
 * warpgroup w rows rb * 128 + 64 w ..), steps (row block, superblock) through a cp.async
 * pipeline; per superblock each warp decodes its 16 rows sub-block by sub-block into A registers
 * while the previous sub-block's wgmma.m64nNk16 runs. */
#ifndef DSV4_CUDA_MOE_X16_CUH
#define DSV4_CUDA_MOE_X16_CUH

#include "backend/cuda/cuda_moe_half.cuh" /* mh_*: f16 helpers, tables; mw_*: the staged rows */

enum {
    X16_THREADS = 256,
    X16_BN = MW_BN,                          /* pairs per tile (64) */
    X16_ROWS = 128,                          /* staged weight rows per step */
    X16_WG_ROWS = 64,                        /* rows of a warpgroup */
    X16_CORE = 128,                          /* bytes of an 8 x 8 f16 core matrix */
    X16_NCORE = 8,                           /* core matrices along the pairs (64 / 8) */
    X16_LBO = X16_NCORE * X16_CORE,          /* between core matrices along k */
    X16_SBO = X16_CORE,                      /* between core matrices along the pairs */
    X16_B_BYTES = 32 * X16_NCORE * X16_CORE, /* a superblock of 64 pairs: 32 k-cores x 8 */
    X16_BM_BYTES = 2 * X16_NCORE * X16_CORE, /* the min term's k16 (Q2_K) */
};

/* Element of a superblock at k position p (0..255). */
MX_HD int x16_pos_elem(int p) {
    const int st = p >> 4, q = p & 15;
    return 32 * (st >> 1) + 8 * ((q & 7) >> 1) + 4 * (st & 1) + 2 * (q >> 3) + (q & 1);
}
/* Byte offset in a stage's B image of the 16-byte chunk of pair n holding k positions 8 kb ..
 * 8 kb + 7 (core matrix (kb, n / 8), its row n % 8), and of one element (position p, pair n). */
MX_HD int x16_b_chunk(int n, int kb) { return (kb * X16_NCORE + (n >> 3)) * X16_CORE + (n & 7) * 16; }
MX_HD int x16_b_off(int p, int n) { return x16_b_chunk(n, p >> 3) + (p & 7) * 2; }
/* The same with the 128-byte swizzle (the default: the tensor cores then read B without bank
 * conflicts; the interleaved layout above serialises the reads of core matrices 128 bytes apart):
 * atoms of 8 pairs x 64 positions (1024 bytes, pair r of the atom a 128-byte row), atom (n / 8,
 * p / 64) at (p / 64 * X16_NCORE + n / 8) * 1024, the 16-byte chunk c of a row stored at c ^ r. */
MX_HD int x16_b_chunk_sw(int n, int kb) {
    return ((kb >> 3) * X16_NCORE + (n >> 3)) * 1024 + (n & 7) * 128 + (((kb & 7) ^ (n & 7)) * 16);
}
MX_HD int x16_b_off_sw(int p, int n) { return x16_b_chunk_sw(n, p >> 3) + (p & 7) * 2; }
/* Where the tensor cores read element (p, n) of k16 step st with the swizzled descriptor the kernel
 * gives that step (start (st / 4) * 8 atoms + (st % 4) * 32 bytes, 1024 bytes between the 8-pair
 * groups, 128-byte swizzle): the logical address start + (n / 8) * 1024 + (n % 8) * 128 + the
 * position's byte in the step's 32, with its bits 4..6 XOR-ed with bits 7..9 (PTX ISA, the
 * 128-byte swizzle mode; the atoms are 1024-byte aligned). */
MX_HD int x16_b_desc_off_sw(int p, int n) {
    const int st = p >> 4, q = p & 15;
    const int a = (st >> 2) * X16_NCORE * 1024 + (st & 3) * 32 + (n >> 3) * 1024 + (n & 7) * 128 + q * 2;
    return a ^ (((a >> 7) & 7) << 4);
}
/* Where the tensor cores read element (position p, pair n) of k16 step st = p / 16 by the
 * descriptor the kernel gives that step (start 2048 st, X16_LBO along k, X16_SBO along the pairs,
 * rows of a core matrix 16 bytes apart): the PTX ISA's K-major layout without swizzle. */
MX_HD int x16_b_desc_off(int p, int n) {
    const int st = p >> 4, q = p & 15;
    return 2048 * st + (q >> 3) * X16_LBO + (n >> 3) * X16_SBO + (n & 7) * 16 + (q & 7) * 2;
}

/* The shared-memory image of a CTA (byte offsets). IQ2_XXS: the replicated f16 grid and sign
 * tables, the ls table, and x: one extra B image (the heavy chain's) that also carries the gate
 * values to the up warpgroup at the end of a row block. Stage: weights, B, (Q2_K) the min term's
 * B, the pairs' d. */
struct x16_layout {
    int pid, prow, misc, grid, sign, lstab, x, stage0, stage_bytes, w, b, bm, dx, total, stages;
};
MX_HD x16_layout x16_layout_of(int kind, int stages) {
    x16_layout l;
    const bool iq = kind == GM_IQ2_XXS;
    l.stages = stages;
    l.pid = 0;              /* 64 pair ids */
    l.prow = 4 * X16_BN;    /* their pack rows */
    l.misc = 8 * X16_BN;    /* 16 words: the tile's heavy mask */
    l.lstab = l.misc + 64;  /* 16 half2 (IQ2_XXS ls) or 16 x 2 half2 (Q2_K sc, -1024 sc) */
    l.grid = l.lstab + 128; /* 1024-aligned below */
    l.grid = (l.grid + 1023) & ~1023;
    l.sign = l.grid + (iq ? MH_GRID_BYTES : 0);
    l.x = l.sign + (iq ? MH_SIGN_BYTES : 0);
    l.stage0 = l.x + (iq ? X16_B_BYTES : 0);
    l.w = 0;
    l.b = X16_ROWS * mw_wrow(kind); /* 9216 / 12288: multiples of 1024 */
    l.bm = l.b + X16_B_BYTES;
    l.dx = l.bm + (iq ? 0 : X16_BM_BYTES);
    l.stage_bytes = (l.dx + 4 * X16_BN + 1023) & ~1023;
    l.total = l.stage0 + stages * l.stage_bytes;
    return l;
}

/* ---- activation packs (one per product) ----
 * gate/up, per token row r: b1[r][in] the codes as f16 in the k order, blo / bhi the same of
 * q & 15 and q >> 4, q2[r][nblk] Σ q^2 of each superblock, dx[r][nblk] the Q8_K d.
 * down, per pair row r: b1 as above (its sums are always exact), bm[r][nblk][16] the block sums as
 * f16, dx. */
struct x16_pack {
    uint64_t b1, blo, bhi, bm, dx, q2, total;
    int nblk;
};
MX_HD uint64_t x16_al256(uint64_t v) { return (v + 255) & ~(uint64_t)255; }
MX_HD x16_pack x16_pack_of(uint64_t rows, uint64_t in, bool dual) {
    x16_pack k;
    k.nblk = (int)(in / 256);
    const uint64_t b = rows * in * 2, nb = rows * (uint64_t)k.nblk;
    k.b1 = 0;
    k.blo = b;
    k.bhi = k.blo + (dual ? b : 0);
    k.bm = k.bhi + (dual ? b : 0);
    k.dx = k.bm + (dual ? 0 : x16_al256(nb * 32));
    k.q2 = k.dx + x16_al256(nb * 4);
    k.total = k.q2 + (dual ? x16_al256(nb * 4) : 0);
    return k;
}
/* May a tile superblock's sums exceed 2^24 (IQ2_XXS: w2 = the expert's largest Σ w'^2, q2 = the
 * tile's largest Σ q^2 in the superblock; both < 2^32)? */
MX_HD bool x16_heavy(uint32_t w2, uint32_t q2) { return (uint64_t)w2 * q2 >= ((uint64_t)1 << 48); }
/* Lane `lane` (of 32) of the warp packing a superblock of a row: the 8 codes at k positions
 * 8 lane .. 8 lane + 7 as f16, and their lo / hi parts (q = 16 hi + lo). qs: the block's codes. */
MX_HD void x16_pack_lane(const int8_t *qs, int lane, uint16_t o1[8], uint16_t olo[8], uint16_t ohi[8]) {
    for (int i = 0; i < 8; i++) {
        const int q = qs[x16_pos_elem(8 * lane + i)];
        o1[i] = mh_f2h((float)q);
        olo[i] = mh_f2h((float)(q & 15));
        ohi[i] = mh_f2h((float)(q >> 4));
    }
}
/* Σ w'^2 of one IQ2_XXS superblock (66 bytes, 2-aligned): Σ over its sub-blocks of ls^2 times the
 * grid entries' Σ g^2 (g2[i]: that sum of grid entry i). Exact: <= 256 * 1333^2 < 2^32. */
MX_HD uint32_t x16_iq2_w2(const uint8_t *blk, const uint32_t *g2) {
    uint32_t s = 0;
    for (int j = 0; j < 8; j++) {
        const uint8_t *q = blk + 2 + 8 * j;
        const uint32_t a1 =
            (uint32_t)q[4] | ((uint32_t)q[5] << 8) | ((uint32_t)q[6] << 16) | ((uint32_t)q[7] << 24);
        const uint32_t ls = 2 * (a1 >> 28) + 1;
        s += ls * ls * (g2[q[0]] + g2[q[1]] + g2[q[2]] + g2[q[3]]);
    }
    return s;
}
/* g2[i] = Σ of the squares of grid entry i's 8 values */
MX_HD uint32_t x16_grid_sq(uint64_t entry) {
    uint32_t s = 0;
    for (int k = 0; k < 8; k++) {
        const uint32_t v = (uint32_t)(entry >> (8 * k)) & 0xff;
        s += v * v;
    }
    return s;
}

/* ---- A fragments ---- */

/* The IQ2_XXS ls table: lstab[l] = half2 (2 l + 1, 2 l + 1). */
MX_HD void x16_fill_lstab_iq2(uint32_t *lstab, int tid, int nthr) {
    for (int l = tid; l < 16; l += nthr) lstab[l] = mh_small2((uint32_t)(2 * l + 1));
}
/* The Q2_K scale table: lstab[2 sc] = half2 (sc, sc), lstab[2 sc + 1] = half2 (-1024 sc, ..). */
MX_HD void x16_fill_lstab_q2k(uint32_t *lstab, int tid, int nthr) {
    for (int s = tid; s < 16; s += nthr) {
        const uint32_t v = mh_small2((uint32_t)s);
        lstab[2 * s] = v;
        lstab[2 * s + 1] = mh_hmul2(v, 0xE400E400u); /* -1024 sc, exact */
    }
}

/* Elements 8t..8t+7 of sub-block j of staged IQ2_XXS row `row` (superblock parity s) as 4 half2:
 * sign * g * ls, exact. */
MX_HD void x16_decode_iq2(const uint8_t *row, int s, int j, int lane, const uint32_t *grid_h,
                          const uint32_t *sign_h, const uint32_t *lstab, uint32_t h[4]) {
    uint32_t gw[4], sw[4];
    const uint32_t ls2 = lstab[mh_iq2_entry(row, s, j, lane, grid_h, sign_h, gw, sw) >> 28];
    MG_UNROLL
    for (int k = 0; k < 4; k++) h[k] = mh_hmul2(gw[k], ls2) ^ sw[k];
}
/* Elements 8t..8t+7 of sub-block j of staged Q2_K row `row` as 4 half2: q * sc, exact. */
MX_HD void x16_decode_q2k(const uint8_t *row, int j, int lane, const uint32_t *lstab, uint32_t h[4]) {
    const int t = lane & 3, hf = j >> 2, sh = 2 * (j & 3);
    uint32_t q0, q1;
    mw_ld64(row + 16 + 32 * hf + 8 * t, &q0, &q1);
    const uint32_t sc = row[2 * j + (t >> 1)] & 15; /* scale of elements 32 j + 8 t .. */
    const uint32_t sc2 = lstab[2 * sc], nsc2 = lstab[2 * sc + 1];
    const uint32_t x0 = (q0 >> sh) & 0x03030303u, x1 = (q1 >> sh) & 0x03030303u;
    /* 0x6400 | q is the half 1024 + q: (1024 + q) sc - 1024 sc = q sc in one rounding */
    h[0] = mh_hfma2(mw_perm(x0, 0x64u, 0x4140u), sc2, nsc2);
    h[1] = mh_hfma2(mw_perm(x0, 0x64u, 0x4342u), sc2, nsc2);
    h[2] = mh_hfma2(mw_perm(x1, 0x64u, 0x4140u), sc2, nsc2);
    h[3] = mh_hfma2(mw_perm(x1, 0x64u, 0x4342u), sc2, nsc2);
}
/* The A fragments of sub-block j for the warp's rows r0 + g, r0 + g + 8 (w: the stage's rows):
 * a[0..3] k16 step 2 j (elements 8t..8t+3), a[4..7] step 2 j + 1 (8t+4..8t+7). */
template <int K>
MX_HD void x16_frag_a(const uint8_t *w, int r0, int s, int j, int lane, const uint32_t *grid_h,
                      const uint32_t *sign_h, const uint32_t *lstab, uint32_t a[8]) {
    constexpr int WR = K == GM_IQ2_XXS ? 72 : 96;
    const uint8_t *lo = w + (r0 + (lane >> 2)) * WR;
    uint32_t h0[4], h1[4];
    if (K == GM_IQ2_XXS) {
        x16_decode_iq2(lo, s, j, lane, grid_h, sign_h, lstab, h0);
        x16_decode_iq2(lo + 8 * WR, s, j, lane, grid_h, sign_h, lstab, h1);
    } else {
        x16_decode_q2k(lo, j, lane, lstab, h0);
        x16_decode_q2k(lo + 8 * WR, j, lane, lstab, h1);
    }
    a[0] = h0[0], a[1] = h1[0], a[2] = h0[1], a[3] = h1[1];
    a[4] = h0[2], a[5] = h1[2], a[6] = h0[3], a[7] = h1[3];
}
/* The Q2_K min term's A fragment (k = the 16 scale groups in order): rows r0 + g, r0 + g + 8,
 * positions 2t, 2t+1 (a0, a1) and 2t+8, 2t+9 (a2, a3): m = scales[k] >> 4 as halves. */
MX_HD void x16_frag_min(const uint8_t *w, int r0, int lane, uint32_t a[4]) {
    const int t = lane & 3;
    const uint8_t *lo = w + (r0 + (lane >> 2)) * 96, *hi = lo + 8 * 96;
    const uint8_t *rows[2] = {lo, hi};
    for (int h = 0; h < 2; h++) {
        const uint32_t m01 = ((uint32_t)rows[h][2 * t] >> 4) | (((uint32_t)rows[h][2 * t + 1] >> 4) << 8);
        const uint32_t m89 = ((uint32_t)rows[h][2 * t + 8] >> 4) | (((uint32_t)rows[h][2 * t + 9] >> 4) << 8);
        a[h] = mh_hadd2(mw_perm(m01, 0x64u, 0x4140u), 0xE400E400u);
        a[2 + h] = mh_hadd2(mw_perm(m89, 0x64u, 0x4140u), 0xE400E400u);
    }
}

/* ---- the float update at the end of a superblock (a lane's 4 outputs of one n8 chunk: rows
 * g, g + 8 x pairs 2t, 2t + 1) ---- */
MX_HD float x16_fma(float a, float b, float c) {
#ifdef __CUDA_ARCH__
    return __fmaf_rn(a, b, c);
#else
    return fmaf(a, b, c);
#endif
}
/* IQ2_XXS: acc += (f16(d) * d_y) * (float)bsum, bsum = c1 (+ 16 c2 for a heavy superblock) */
MX_HD void x16_update_iq2(float acc[4], const float c1[4], const float c2[4], bool heavy, const float dw[2],
                          const float dx[2]) {
    for (int i = 0; i < 4; i++) {
        const float bf = heavy ? x16_fma(16.0f, c2[i], c1[i]) : c1[i];
        acc[i] = qm_add(acc[i], qm_mul(qm_mul(dw[i >> 1], dx[i & 1]), bf));
    }
}
/* Q2_K: acc += dall * (float)isum - dmin * (float)summs, dall = d_y * f16(d), dmin = d_y * f16(dmin) */
MX_HD void x16_update_q2k(float acc[4], const float is[4], const float mn[4], const float dw[2],
                          const float dm[2], const float dx[2]) {
    for (int i = 0; i < 4; i++) {
        const float x = dx[i & 1], dall = qm_mul(x, dw[i >> 1]), dmin = qm_mul(x, dm[i >> 1]);
        acc[i] = qm_add(acc[i], mx_sub(qm_mul(dall, is[i]), qm_mul(dmin, mn[i])));
    }
}

#endif
