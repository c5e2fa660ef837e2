/* Units of the grouped routed-expert product on int8 tensor cores (cuda_ops_moe_mma.cu), host and
 * device; tests/cuda/moe_mma_emu_check.cu runs these same functions with an emulated mma.
 *
 * CTA: one expert tile of up to BN (token, slot) pairs and 128 weight rows, 8 warps of 16 rows
 * each (for gate/up: warps 0-3 take 64 gate rows, warps 4-7 the same 64 up rows). The tile's
 * activation int8 values (Q8_K qs) for the whole row length sit in shared memory once; each warp
 * then walks its rows superblock by superblock: every lane loads its half row of the next
 * superblock into registers, decodes the current one into the warp's int8 tile (IQ2_XXS: signed
 * grid values; Q2_K: q * (scale & 15), at most 45; Q4_K: q) plus its per-row scales, and the warp
 * runs mma.m16n8k32.s8 over the 8 k-steps of 32 for every 8 pairs.
 *
 * Why it is exact: each step's s32 result is an exact integer sum (|sum| < 2^21). IQ2_XXS and
 * Q4_K scale it per 32-element sub-block in integers (ls, sc); Q2_K folds the 4-bit scale into
 * the weights so the steps chain in the accumulator. The min terms (Q2_K, Q4_K) are a second
 * mma against the mins broadcast over their 16 / 32 elements: Σ_l m(l) q8_l = Σ_j m_j bsums_j
 * exactly, since the quantizers' bsums are the exact sums of the qs. So per (row, pair) and
 * superblock the integers equal quant/dot_scalar.c's isum / bsum / summs, and the float update
 * is its expression with separate roundings, superblocks in order from 0.0f (0.125f * acc at the
 * end for IQ2_XXS): quant_dot_* bit for bit. */
#ifndef DSV4_CUDA_MOE_MMA_CUH
#define DSV4_CUDA_MOE_MMA_CUH

#include "backend/cuda/cuda_gemm_q8_0_mma.cuh" /* qm_ld32, qm_mul, qm_add, qm_f16 */
#include "backend/cuda/cuda_moe_grouped.cuh"   /* mg_ld_a2, mg_ld16, mg_sign_mask */

#define MX_HD __host__ __device__ __forceinline__

enum {
    MX_WARPS = 8,
    MX_THREADS = 32 * MX_WARPS,
    MX_BM = 16 * MX_WARPS, /* weight rows per CTA (gate/up: 64 + 64) */
    MX_DROW = 272,         /* decoded row: 256 int8 + 16 pad; 68 words = 4 mod 32, no bank conflict */
    MX_DEC = 16 * MX_DROW, /* a warp's decoded superblock */
    MX_WS = 512,           /* a warp's row scales: dw[16], dm[16] f32, sc[16][8], mn[16][16] u8 */
    MX_TABLES = 384 * 8,   /* IQ2_XXS grid (256) and sign masks (128) */
    MX_RAW = 20            /* words of a lane's raw half superblock (Q4_K: 16 qs, 3 scales, d/dmin) */
};

/* The shared-memory image of a CTA (offsets in bytes). */
struct mx_layout {
    int pid, tables, ws, dec, xd, xq, total, xrow;
};
MX_HD mx_layout mx_layout_of(int bn, int in) {
    mx_layout l;
    l.pid = 0;
    l.tables = 128; /* bn <= 32 pair ids */
    l.ws = l.tables + MX_TABLES;
    l.dec = l.ws + MX_WARPS * MX_WS;
    l.xd = l.dec + MX_WARPS * MX_DEC;
    l.xq = l.xd + ((bn * (in / 256) * 4 + 15) & ~15);
    l.xrow = in + 16; /* (in + 16) / 4 = 4 mod 32 words for in % 128 == 0: conflict-free B reads */
    l.total = l.xq + bn * l.xrow;
    return l;
}

MX_HD float mx_sub(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}
MX_HD float mx_i2f(int32_t v) {
#ifdef __CUDA_ARCH__
    return __int2float_rn(v);
#else
    return (float)v;
#endif
}

/* ---- weights: a lane's raw half superblock (row lane / 2, elements 128 h.., h = lane % 2) ---- */

/* blk: the superblock's first byte (row base 4-aligned, so an IQ2_XXS block is 2-aligned). */
template <int K> MX_HD void mx_load_raw(const uint8_t *blk, int h, uint32_t w[MX_RAW]) {
    if (K == GM_IQ2_XXS) { /* d, then 8 bytes (a0, a1) per sub-block of 32: sub-blocks 4h..4h+3 */
        mg_ld_a2<8>(blk + 2 + 32 * h, w);
        w[8] = mg_ld16(blk);
    } else if (K == GM_Q2_K) { /* scales[16], qs[64], d, dmin: qs 32h.. and scales 8h.. */
        for (int i = 0; i < 8; i++) w[i] = qm_ld32(blk + 16 + 32 * h + 4 * i);
        w[8] = qm_ld32(blk + 8 * h);
        w[9] = qm_ld32(blk + 8 * h + 4);
        w[10] = qm_ld32(blk + 80);
    } else { /* Q4_K: d, dmin, scales[12], qs[128]: sub-blocks 4h..4h+3 are qs bytes 64h.. */
        for (int i = 0; i < 16; i++) w[i] = qm_ld32(blk + 16 + 64 * h + 4 * i);
        for (int i = 0; i < 3; i++) w[16 + i] = qm_ld32(blk + 4 + 4 * i);
        w[19] = qm_ld32(blk);
    }
}

MX_HD void mx_st16(uint8_t *p, uint32_t a, uint32_t b, uint32_t c, uint32_t d) { /* p 16-aligned */
#ifdef __CUDA_ARCH__
    *(uint4 *)p = make_uint4(a, b, c, d);
#else
    const uint32_t v[4] = {a, b, c, d};
    memcpy(p, v, 16);
#endif
}
MX_HD void mx_st4(uint8_t *p, uint32_t v) { /* p 4-aligned */
#ifdef __CUDA_ARCH__
    *(uint32_t *)p = v;
#else
    memcpy(p, &v, 4);
#endif
}
/* per byte: m ? -g : g for grid bytes 1..127 and mask bytes 0 / 0xff (no carry between bytes) */
MX_HD uint32_t mx_sign(uint32_t g, uint32_t m) { return (g ^ m) + (m & 0x01010101u); }

/* Decode a lane's raw half superblock into the warp's tile: row r = lane / 2 of dec (MX_DROW
 * stride), its scales into ws. grid / smask: IQ2_XXS tables (grid entries, sign byte masks). */
template <int K>
MX_HD void mx_decode(const uint32_t w[MX_RAW], int lane, uint8_t *dec, uint8_t *ws, const uint64_t *grid,
                     const uint64_t *smask) {
    const int r = lane >> 1, h = lane & 1;
    uint8_t *row = dec + r * MX_DROW;
    float *dw = (float *)ws, *dm = (float *)(ws + 64);
    uint8_t *sc = ws + 128 + 8 * r, *mn = ws + 256 + 16 * r;
    if (K == GM_IQ2_XXS) {
        for (int q = 0; q < 4; q++) {
            const uint32_t a0 = w[2 * q], a1 = w[2 * q + 1];
            uint32_t v[8];
            for (int l = 0; l < 4; l++) {
                const uint64_t g = grid[(a0 >> (8 * l)) & 0xff], m = smask[(a1 >> (7 * l)) & 127];
                v[2 * l] = mx_sign((uint32_t)g, (uint32_t)m);
                v[2 * l + 1] = mx_sign((uint32_t)(g >> 32), (uint32_t)(m >> 32));
            }
            const int sb = 4 * h + q;
            mx_st16(row + 32 * sb, v[0], v[1], v[2], v[3]);
            mx_st16(row + 32 * sb + 16, v[4], v[5], v[6], v[7]);
            sc[sb] = (uint8_t)(2 * (a1 >> 28) + 1);
        }
        if (h == 0) dw[r] = gm_f16((uint16_t)w[8]);
    } else if (K == GM_Q2_K) {
        for (int j = 0; j < 4; j++)
            for (int s = 0; s < 2; s++) {
                const int si = 2 * j + s; /* scale 8h + si */
                const uint32_t sb = (w[8 + si / 4] >> (8 * (si % 4))) & 0xff, scale = sb & 15;
                uint32_t v[4];
                for (int i = 0; i < 4; i++) v[i] = ((w[4 * s + i] >> (2 * j)) & 0x03030303u) * scale;
                mx_st16(row + 128 * h + 32 * j + 16 * s, v[0], v[1], v[2], v[3]);
                mn[8 * h + si] = (uint8_t)(sb >> 4);
            }
        if (h == 0) dw[r] = gm_f16((uint16_t)(w[10] & 0xffff)), dm[r] = gm_f16((uint16_t)(w[10] >> 16));
    } else { /* Q4_K */
        uint8_t s[12];
        for (int i = 0; i < 3; i++)
            for (int k = 0; k < 4; k++) s[4 * i + k] = (uint8_t)(w[16 + i] >> (8 * k));
        for (int jj = 0; jj < 4; jj++) {
            /* quant_q4k_scale_min of j = 4h + jj, with constant indices (no local array) */
            const int j = 4 * h + jj, shift = 4 * (jj & 1);
            const int scv = h == 0 ? s[jj] & 63 : (s[jj + 8] & 15) | ((s[jj] >> 6) << 4);
            const int m = h == 0 ? s[jj + 4] & 63 : (s[jj + 8] >> 4) | ((s[jj + 4] >> 6) << 4);
            uint32_t v[8];
            for (int i = 0; i < 8; i++) v[i] = (w[8 * (jj >> 1) + i] >> shift) & 0x0f0f0f0fu;
            mx_st16(row + 32 * j, v[0], v[1], v[2], v[3]);
            mx_st16(row + 32 * j + 16, v[4], v[5], v[6], v[7]);
            sc[j] = (uint8_t)scv;
            mn[2 * j] = mn[2 * j + 1] = (uint8_t)m;
        }
        if (h == 0) dw[r] = gm_f16((uint16_t)(w[19] & 0xffff)), dm[r] = gm_f16((uint16_t)(w[19] >> 16));
    }
}

/* ---- fragments of mma.m16n8k32.row.col.s8 (lane: g = lane / 4, t = lane % 4) ----
 *   A: a0 = row g, k 4t..4t+3; a1 = row g + 8; a2, a3 = the same rows, k + 16.
 *   B: b0 = k 4t..4t+3 of column (pair) g; b1 = k + 16.   D: rows g, g + 8 x pairs 2t, 2t + 1. */
MX_HD void mx_frag_a(const uint8_t *dec, int j, int lane, uint32_t a[4]) {
    const uint8_t *lo = dec + (lane >> 2) * MX_DROW + 32 * j + 4 * (lane & 3), *hi = lo + 8 * MX_DROW;
    a[0] = qm_ld32(lo);
    a[1] = qm_ld32(hi);
    a[2] = qm_ld32(lo + 16);
    a[3] = qm_ld32(hi + 16);
}
/* The mins of step j broadcast over their elements (16 per min: k 0..15 and 16..31). */
MX_HD void mx_frag_m(const uint8_t *ws, int j, int lane, uint32_t a[4]) {
    const uint8_t *mn = ws + 256 + 16 * (lane >> 2) + 2 * j;
    a[0] = (uint32_t)mn[0] * 0x01010101u;
    a[1] = (uint32_t)mn[8 * 16] * 0x01010101u;
    a[2] = (uint32_t)mn[1] * 0x01010101u;
    a[3] = (uint32_t)mn[8 * 16 + 1] * 0x01010101u;
}
/* xq: the tile's int8 rows (xrow bytes apart); pairs c0.., superblock s, step j */
MX_HD void mx_frag_b(const uint8_t *xq, int xrow, int c0, int s, int j, int lane, uint32_t b[2]) {
    const uint8_t *p = xq + (c0 + (lane >> 2)) * xrow + 256 * s + 32 * j + 4 * (lane & 3);
    b[0] = qm_ld32(p);
    b[1] = qm_ld32(p + 16);
}

/* After step j's mma (d = A B + c): the integer sums of the lane's 4 outputs.
 * IQ2_XXS / Q4_K: the step started from 0 and is scaled per row; Q2_K: it chained (isum = d). */
template <int K> MX_HD void mx_step(int32_t isum[4], const int32_t d[4], const uint8_t *ws, int j, int lane) {
    if (K == GM_Q2_K) {
        for (int i = 0; i < 4; i++) isum[i] = d[i];
    } else {
        const uint8_t *sc = ws + 128 + 8 * (lane >> 2) + j;
        const int32_t lo = sc[0], hi = sc[8 * 8];
        isum[0] += d[0] * lo;
        isum[1] += d[1] * lo;
        isum[2] += d[2] * hi;
        isum[3] += d[3] * hi;
    }
}
/* End of superblock s: the CPU's float update of the lane's 4 outputs (xd: the tile's f32 scales,
 * nblk per pair). */
template <int K>
MX_HD void mx_update(float acc[4], const int32_t isum[4], const int32_t mn[4], const uint8_t *ws,
                     const float *xd, int nblk, int c0, int s, int lane) {
    const int g = lane >> 2, t = lane & 3;
    const float *dw = (const float *)ws, *dm = (const float *)(ws + 64);
    for (int i = 0; i < 4; i++) {
        const int r = g + 8 * (i >> 1);
        const float dx = xd[(c0 + 2 * t + (i & 1)) * nblk + s];
        if (K == GM_IQ2_XXS) { /* acc += (f16(d) * d_y) * (float)bsum */
            acc[i] = qm_add(acc[i], qm_mul(qm_mul(dw[r], dx), mx_i2f(isum[i])));
        } else { /* acc += dall * (float)isum - dmin * (float)summs */
            const float dall = qm_mul(dx, dw[r]), dmin = qm_mul(dx, dm[r]);
            acc[i] = qm_add(acc[i], mx_sub(qm_mul(dall, mx_i2f(isum[i])), qm_mul(dmin, mx_i2f(mn[i]))));
        }
    }
}

/* ---- the tile's activations: pair ids pid[0..mt), rows of Q8_K blocks (d, qs[256], bsums) ----
 * Copies qs and d of pair t's row into xq / xd by thread tid of nthr; rows mt..bn-1 are zeroed. */
MX_HD void mx_load_x(const uint8_t *act, uint64_t act_stride, int act_div, const int *pid, int mt, int bn,
                     int in, int xrow, uint8_t *xq, float *xd, int tid, int nthr) {
    const int nblk = in / 256, wpr = in / 4;
    for (int i = tid; i < bn * wpr; i += nthr) {
        const int t = i / wpr, wi = i - t * wpr, b = wi >> 6;
        uint32_t v = 0;
        if (t < mt) {
            const uint8_t *row = act + (uint64_t)(pid[t] / act_div) * act_stride;
            v = qm_ld32(row + 292 * b + 4 + 4 * (wi & 63));
        }
        mx_st4(xq + t * xrow + 4 * wi, v);
    }
    for (int i = tid; i < bn * nblk; i += nthr) {
        const int t = i / nblk, b = i - t * nblk;
        float v = 0.0f;
        if (t < mt) v = gm_bits(qm_ld32(act + (uint64_t)(pid[t] / act_div) * act_stride + 292 * b));
        xd[i] = v;
    }
}

#endif
