/* Units of the wide-tile grouped routed-expert products on int8 tensor cores
 * (cuda_ops_moe_wide.cu), host and device: tests/cuda/moe_wide_emu_check.cu runs these same
 * functions on the CPU with an emulated mma.
 *
 * What changes against cuda_moe_mma.cuh (which decodes each weight superblock into a
 * shared-memory int8 tile for every tile of at most 32 pairs, with random 64-bit table reads that
 * conflict in the shared-memory banks):
 *   - a tile holds up to MW_BN = 64 pairs of one expert (about all of its pairs at chunk 2048), and
 *     the activations are staged per superblock, so a CTA's 256 weight rows meet all its pairs;
 *   - each warp decodes its weights straight into mma A fragments in registers: the 32 elements of
 *     a k-step are ordered so that lane t holds elements 8t..8t+7 of its rows, which is exactly one
 *     IQ2_XXS grid entry (one table read, one sign-mask read) or 8 consecutive Q2_K / Q4_K quants;
 *     the activation B fragment of lane t is then elements 8t..8t+7 of its pair (one 8-byte read).
 *     The product over a k-step is a sum, so this order gives the same exact integer;
 *   - the IQ2_XXS grid and sign-mask tables are replicated 16 times, copy h read by lanes h and
 *     h + 16, so every table read is bank-conflict free;
 *   - the raw weight bytes and the activations (packed once per product in tile order by
 *     mw_pack_block) arrive by cp.async in a 2-4 stage pipeline;
 *   - each warp owns two m16 tiles (gate/up: the same 16 rows of gate and of up; down: 32 rows),
 *     so one activation fragment feeds two mma;
 *   - the Q2_K / Q4_K min terms are one m16n8k16 product per superblock against the block sums
 *     split as 128 * hi + lo (both int8), instead of an extra product per k-step.
 *
 * Exactness: per (row, pair) and superblock, the integers are the CPU's (quant/dot_scalar.c):
 * IQ2_XXS bsum = sum over sub-blocks of ls * (exact 32-element sum); Q4_K isum likewise with sc;
 * Q2_K with the 4-bit scale folded into the weights (<= 45); summs = sum of m_j * bsums_j =
 * 128 * sum(m * hi) + sum(m * lo). The float update per superblock is mx_update's expression with
 * separate roundings, superblocks in order from 0.0f, 0.125f * acc at the end for IQ2_XXS; the
 * mid is the same expression as the other grouped kernels. So the products are quant_dot_* bit
 * for bit, and equal the scalar grouped kernel and cuda_moe_mma.cuh. */
#ifndef DSV4_CUDA_MOE_WIDE_CUH
#define DSV4_CUDA_MOE_WIDE_CUH

#include "backend/cuda/cuda_moe_mma.cuh" /* mx_sign, mx_i2f, mx_sub, qm_*, mg_*, gm_* */

enum {
    MW_WARPS = 8,
    MW_THREADS = 32 * MW_WARPS,
    MW_BN = 64,                      /* pairs per tile */
    MW_NT = MW_BN / 8,               /* n8 tiles */
    MW_MT = 2,                       /* m16 tiles per warp */
    MW_ROWS = MW_WARPS * MW_MT * 16, /* weight rows per stage (gate/up: 128 + 128) */
    /* a pair's 256 activation bytes per stage + 32: 288 = 32 mod 128, so the 16 lanes of a half
     * warp (pairs g..g+3, 8 bytes at 8t) read 16 distinct 8-byte bank pairs */
    MW_XROW = 288,
    MW_XB = 32,  /* a pair's block sums per stage: per t, 4 lo bytes then 4 hi bytes */
    MW_REP = 16, /* copies of the IQ2_XXS tables */
    MW_TABLES = (256 + 128) * MW_REP * 8,
    MW_MAX_STAGES = 4
};

MX_HD bool mw_kq(int kind) { return kind == GM_Q2_K || kind == GM_Q4_K; }
MX_HD int mw_block_bytes(int kind) { return kind == GM_IQ2_XXS ? 66 : kind == GM_Q2_K ? 84 : 144; }
/* A staged weight row (bytes): 72 = 8 * 9 and 72 / 4 = 18 words (IQ2_XXS: 8 rows of a fragment
 * read land on distinct banks); 96 and 160 = 32 mod 128 bytes (Q2_K, Q4_K: the 4 rows x 32 bytes
 * of a half warp's 8-byte reads tile the 32 banks). */
MX_HD int mw_wrow(int kind) { return kind == GM_IQ2_XXS ? 72 : kind == GM_Q2_K ? 96 : 160; }
/* cp.async copies per staged row and their size: IQ2_XXS 17 words, Q2_K 21 words, Q4_K 9 x 16 B */
MX_HD int mw_wcopies(int kind) { return kind == GM_IQ2_XXS ? 17 : kind == GM_Q2_K ? 21 : 9; }
MX_HD int mw_wsize(int kind) { return kind == GM_Q4_K ? 16 : 4; }

/* The shared-memory image of a CTA (byte offsets). */
struct mw_layout {
    int pid, tables, stage0, stage_bytes, w, x, xd, xb, total, stages;
};
MX_HD mw_layout mw_layout_of(int kind, int stages) {
    mw_layout l;
    l.stages = stages;
    l.pid = 0;
    l.tables = 4 * MW_BN;
    l.stage0 = l.tables + (kind == GM_IQ2_XXS ? MW_TABLES : 0);
    l.w = 0;
    l.x = l.w + MW_ROWS * mw_wrow(kind);
    l.xd = l.x + MW_BN * MW_XROW;
    l.xb = l.xd + 4 * MW_BN;
    l.stage_bytes = l.xb + (mw_kq(kind) ? MW_BN * MW_XB : 0);
    l.total = l.stage0 + stages * l.stage_bytes;
    return l;
}

/* ---- activations packed in tile order (one per product) ----
 * Row i = the pair at list position i: q [pcap][in] int8, d [nblk][pcap] f32, and for the
 * K-quants b [pcap][nblk][32]: the 16 block sums of each superblock as bsum = 128 * hi + lo,
 * lo in 0..127, for t = 0..3: lo of sums 4t..4t+3, then hi of the same. */
struct mw_pack {
    uint64_t pcap, q, d, b, total;
    int nblk;
};
MX_HD mw_pack mw_pack_of(uint64_t P, uint64_t in, bool kq) {
    mw_pack k;
    k.nblk = (int)(in / 256);
    k.pcap = (P + 15) & ~(uint64_t)15;
    k.q = 0;
    k.d = k.pcap * in;
    k.b = k.d + ((k.pcap * (uint64_t)k.nblk * 4 + 255) & ~(uint64_t)255);
    k.total = k.b + (kq ? k.pcap * (uint64_t)k.nblk * MW_XB : 0);
    return k;
}
/* Lane `lane` of a warp copies Q8_K block b (292 B at blk) of list position i into the pack. */
MX_HD void mw_pack_block(const uint8_t *blk, int lane, const mw_pack &k, uint64_t i, int b, bool kq,
                         uint8_t *base) {
    const uint32_t q0 = qm_ld32(blk + 4 + 8 * lane), q1 = qm_ld32(blk + 8 + 8 * lane);
    uint8_t *q = base + k.q + i * (uint64_t)k.nblk * 256 + 256 * b + 8 * lane;
    mx_st4(q, q0);
    mx_st4(q + 4, q1);
    if (lane == 0) mx_st4(base + k.d + 4 * ((uint64_t)b * k.pcap + i), qm_ld32(blk));
    if (kq && lane < 16) {
        const int v = (int16_t)mg_ld16(blk + 260 + 2 * lane);
        uint8_t *o = base + k.b + (i * (uint64_t)k.nblk + b) * MW_XB + 8 * (lane >> 2) + (lane & 3);
        o[0] = (uint8_t)(v & 127);
        o[4] = (uint8_t)(int8_t)(v >> 7); /* arithmetic: v = 128 * hi + lo */
    }
}

/* ---- the CTA's work ---- */

/* Rows of output per row block: gate/up 128 (each as a gate row and an up row), down 256 (rows:
 * the staged rows of a step, MW_ROWS here; the f16 kernel of cuda_moe_half.cuh stages more). */
MX_HD int mw_rb_rows(bool dual, int rows = MW_ROWS) { return dual ? rows / 2 : rows; }
/* Weight row of staged row rr (of `rows`) in row block rb; *which: 0 gate (or down), 1 up. Rows
 * past n_out read the last row (their results are not stored). */
MX_HD int mw_stage_row(bool dual, int rb, int rr, int n_out, int *which, int rows = MW_ROWS) {
    *which = dual && rr >= rows / 2;
    const int r = rb * mw_rb_rows(dual, rows) + (dual ? rr % (rows / 2) : rr);
    return r < n_out ? r : n_out - 1;
}
/* First staged row of m-tile m of warp w, and its first output row within the row block. */
MX_HD int mw_tile_row(bool dual, int w, int m) { return dual ? m * (MW_ROWS / 2) + 16 * w : 32 * w + 16 * m; }
MX_HD int mw_out_row(bool dual, int w, int m) { return dual ? 16 * w : 32 * w + 16 * m; }

/* Source offset within a weight row and destination offset within the staged row of copy c of
 * superblock s. IQ2_XXS superblocks are 66 B, so odd ones start 2 mod 4: the copy covers the 4
 * bytes before an odd superblock (68 B from 66s - 2) and lands 4 bytes in, which puts the
 * (a0, a1) words of sub-block j at 8 + 8j; an even one lands at 0 with them at 2 + 8j. */
MX_HD uint64_t mw_wsrc(int kind, int s, int c) {
    if (kind == GM_IQ2_XXS) return (uint64_t)66 * s - 2 * (s & 1) + 4 * c;
    return (uint64_t)mw_block_bytes(kind) * s + mw_wsize(kind) * c;
}
MX_HD int mw_wdst(int kind, int s, int c) {
    return kind == GM_IQ2_XXS ? 4 * (s & 1) + 4 * c : mw_wsize(kind) * c;
}

/* ---- operands of one product (device pointers) ---- */
struct mw_params {
    const uint8_t *w0, *w1; /* expert tensors (w1: up, gate/up only) */
    uint64_t row_bytes, expert_bytes;
    int n_out, in;
    const uint8_t *pack; /* mw_pack image */
    mw_pack pk;
    const int4 *tiles;
    const int *n_tiles;
    const int32_t *list;
    const float *weights; /* route weights per pair (gate/up) */
    float clamp;
    int clamp_on;
    float *out; /* mid (gate/up) or y (down): pair p's row at p * out_stride */
    uint64_t out_stride;
    const uint64_t *grid;
    const uint8_t *signs;
    int n_rb, rb_per_cta; /* row blocks, row blocks per CTA (grid.x = ceil(n_rb / rb_per_cta)) */
    mw_layout lay;
};

/* One copy of a stage: cp.async on the device, memcpy on the host. */
struct mw_copy {
    MX_HD void operator()(uint8_t *dst, const uint8_t *src, int size) const {
#ifdef __CUDA_ARCH__
        const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
        if (size == 16)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
        else
            asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src) : "memory");
#else
        memcpy(dst, src, (size_t)size);
#endif
    }
};

/* The pipelines' cp.async groups: commit; wait until the oldest in-flight stage of a `stages`-deep
 * pipeline has landed (all but the newest stages - 2 groups complete). */
__device__ __forceinline__ void mw_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void mw_wait(int stages) {
    if (stages >= 4)
        asm volatile("cp.async.wait_group 2;\n" ::: "memory");
    else if (stages == 3)
        asm volatile("cp.async.wait_group 1;\n" ::: "memory");
    else
        asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

/* Thread tid (of ROWS threads) issues its weight copies of step (row block rb, superblock s) of
 * expert e into the ROWS staged rows at w: warp w copies staged rows 32w..32w+31, 8 rows at a time,
 * 4 lanes per row on consecutive words (each copy instruction covers 8 rows x 16 contiguous bytes). */
template <int K, bool DUAL, int ROWS = MW_ROWS>
MX_HD void mw_load_weights(const uint8_t *w0, const uint8_t *w1, uint64_t row_bytes, uint64_t expert_bytes,
                           int n_out, int e, int rb, int s, uint8_t *w, int tid) {
    const mw_copy cp;
    constexpr int NW = K == GM_IQ2_XXS ? 17 : K == GM_Q2_K ? 21 : 9;
    constexpr int SZ = K == GM_Q4_K ? 16 : 4;
    constexpr int WR = K == GM_IQ2_XXS ? 72 : K == GM_Q2_K ? 96 : 160;
    const uint8_t *e0 = w0 + (uint64_t)e * expert_bytes, *e1 = DUAL ? w1 + (uint64_t)e * expert_bytes : e0;
    const uint64_t so = mw_wsrc(K, s, 0);
    const int lane = tid & 31, q4 = lane & 3, dof = mw_wdst(K, s, 0) + SZ * q4;
    MG_UNROLL
    for (int pass = 0; pass < 4; pass++) {
        const int rr = 32 * (tid >> 5) + 8 * pass + (lane >> 2);
        int which;
        const int row = mw_stage_row(DUAL, rb, rr, n_out, &which, ROWS);
        const uint8_t *src = (which ? e1 : e0) + (uint64_t)row * row_bytes + so + SZ * q4;
        uint8_t *dst = w + rr * WR + dof;
        MG_UNROLL
        for (int u = 0; u < (NW + 3) / 4; u++)
            if (q4 + 4 * u < NW) cp(dst + 4 * SZ * u, src + 4 * SZ * u, SZ);
    }
}

/* Thread tid (of MW_THREADS) issues its copies of step (row block rb, superblock s) of tile (e,
 * start, mt) into stage st: the weights (mw_load_weights), then the activations: rows
 * 0..8*nact-1 of the tile (rows past mt repeat its last pair). */
template <int K, bool DUAL>
MX_HD void mw_load_stage(const mw_params &p, int e, int start, int mt, int rb, int s, uint8_t *st, int tid) {
    const mw_copy cp;
    mw_load_weights<K, DUAL>(p.w0, p.w1, p.row_bytes, p.expert_bytes, p.n_out, e, rb, s, st + p.lay.w, tid);
    const int rows = (mt + 7) & ~7;
    const uint64_t in = (uint64_t)p.in;
    for (int i = tid; i < rows * 16; i += MW_THREADS) {
        const int r = i >> 4, c = i & 15;
        const uint64_t li = (uint64_t)start + (r < mt ? r : mt - 1);
        cp(st + p.lay.x + r * MW_XROW + 16 * c, p.pack + p.pk.q + li * in + 256 * s + 16 * c, 16);
    }
    if (tid < rows) {
        const uint64_t li = (uint64_t)start + (tid < mt ? tid : mt - 1);
        cp(st + p.lay.xd + 4 * tid, p.pack + p.pk.d + 4 * ((uint64_t)s * p.pk.pcap + li), 4);
    }
    if (K != GM_IQ2_XXS && tid < 2 * rows) {
        const int r = tid >> 1, c = tid & 1;
        const uint64_t li = (uint64_t)start + (r < mt ? r : mt - 1);
        cp(st + p.lay.xb + r * MW_XB + 16 * c,
           p.pack + p.pk.b + (li * (uint64_t)p.pk.nblk + s) * MW_XB + 16 * c, 16);
    }
}

/* The replicated IQ2_XXS tables: grid[i * 16 + h] = grid entry i, smask[i * 16 + h] = byte mask
 * of sign index i, h = 0..15. */
MX_HD void mw_fill_tables(uint64_t *grid_rep, const uint64_t *grid, const uint8_t *signs, int tid, int nthr) {
    uint64_t *smask_rep = grid_rep + 256 * MW_REP;
    for (int i = tid; i < 256 * MW_REP; i += nthr) grid_rep[i] = grid[i / MW_REP];
    for (int i = tid; i < 128 * MW_REP; i += nthr) smask_rep[i] = mg_sign_mask(signs, i / MW_REP);
}

/* ---- fragments (lane: g = lane / 4, t = lane % 4) ----
 * mma.m16n8k32 A: a0 = row g, k 4t..4t+3; a1 = row g+8; a2 / a3 = the same rows, k 16+4t..;
 *              B: b0 = k 4t..4t+3 of column g; b1 = k 16+4t..; D: rows g, g+8 x columns 2t, 2t+1.
 * Element 8t+i of the k-step's 32 is placed at k 4t+i (i < 4) and 16+4t+(i-4) (i >= 4), in A and
 * B alike, so a0/a2 (b0/b1) of lane t are elements 8t..8t+3 / 8t+4..8t+7.
 * mma.m16n8k16 A: a0 = row g, k 4t..4t+3; a1 = row g+8;  B: b0 = k 4t..4t+3 of column g. */

MX_HD void mw_ld64(const uint8_t *p, uint32_t *x, uint32_t *y) { /* p 8-aligned */
#ifdef __CUDA_ARCH__
    const uint2 v = *(const uint2 *)p;
    *x = v.x, *y = v.y;
#else
    *x = qm_ld32(p), *y = qm_ld32(p + 4);
#endif
}
MX_HD uint32_t mw_perm(uint32_t a, uint32_t b, uint32_t sel) { /* selector nibbles 0..7 */
#ifdef __CUDA_ARCH__
    return __byte_perm(a, b, sel);
#else
    const uint64_t v = ((uint64_t)b << 32) | a;
    uint32_t r = 0;
    for (int k = 0; k < 4; k++) r |= (uint32_t)((v >> (8 * ((sel >> (4 * k)) & 7))) & 0xff) << (8 * k);
    return r;
#endif
}

/* The (a0, a1) words of IQ2_XXS sub-block j of a staged row (superblock parity s, mw_wdst): a0 the
 * four grid indices, a1 the four 7-bit sign indices and the 4-bit scale. */
MX_HD void mw_iq2_words(const uint8_t *row, int s, int j, uint32_t *a0, uint32_t *a1) {
    if (s & 1) {
        mw_ld64(row + 8 + 8 * j, a0, a1);
    } else {
        uint32_t w0, w1;
        mw_ld64(row + 8 * j, &w0, &w1);
        *a0 = qm_mid32(w0, w1);
        *a1 = qm_mid32(w1, qm_ld32(row + 8 * j + 8));
    }
}
/* Elements 8t..8t+7 of sub-block j of staged weight row `row` (superblock s) as (lo, hi) words,
 * and the sub-block's integer scale (IQ2_XXS ls, Q4_K sc; Q2_K: folded in, 1). */
template <int K>
MX_HD void mw_decode8(const uint8_t *row, int s, int j, int lane, const uint64_t *grid_rep, uint32_t *lo,
                      uint32_t *hi, int32_t *scale) {
    const int t = lane & 3;
    if (K == GM_IQ2_XXS) {
        uint32_t a0, a1;
        mw_iq2_words(row, s, j, &a0, &a1);
        const int h = lane & (MW_REP - 1);
        const uint64_t g = grid_rep[((a0 >> (8 * t)) & 0xff) * MW_REP + h];
        const uint64_t m = grid_rep[(256 + ((a1 >> (7 * t)) & 127)) * MW_REP + h];
        *lo = mx_sign((uint32_t)g, (uint32_t)m);
        *hi = mx_sign((uint32_t)(g >> 32), (uint32_t)(m >> 32));
        *scale = (int32_t)(2 * (a1 >> 28) + 1);
    } else if (K == GM_Q2_K) { /* scales[16], qs[64], d, dmin; sub-block j: half j/4, shift 2(j%4) */
        const int hf = j >> 2, sh = 2 * (j & 3);
        uint32_t q0, q1;
        mw_ld64(row + 16 + 32 * hf + 8 * t, &q0, &q1);
        /* scale index 8hf + 2(j%4) + t/2: the 16 elements 8t.. of the lane share it */
        const uint32_t sw = qm_ld32(row + 8 * hf + 4 * ((j & 3) >> 1));
        const uint32_t sc = (sw >> (8 * (2 * (j & 1) + (t >> 1)))) & 15;
        *lo = ((q0 >> sh) & 0x03030303u) * sc;
        *hi = ((q1 >> sh) & 0x03030303u) * sc;
        *scale = 1;
    } else { /* Q4_K: d, dmin, scales[12], qs[128]; sub-block j: bytes 32(j/2).., nibble j%2 */
        uint32_t q0, q1;
        mw_ld64(row + 16 + 32 * (j >> 1) + 8 * t, &q0, &q1);
        const int sh = 4 * (j & 1);
        *lo = (q0 >> sh) & 0x0f0f0f0fu;
        *hi = (q1 >> sh) & 0x0f0f0f0fu;
        const uint32_t s0 = qm_ld32(row + 4), s2 = qm_ld32(row + 12);
        /* quant_q4k_scale_min's sc, four at a time: j < 4: s[j] & 63; else (s[j+4] & 15) |
         * ((s[j-4] >> 6) << 4) */
        const uint32_t sw = j < 4 ? s0 & 0x3f3f3f3fu : (s2 & 0x0f0f0f0fu) | ((s0 >> 2) & 0x30303030u);
        *scale = (int32_t)((sw >> (8 * (j & 3))) & 0xff);
    }
}
/* A fragment of k-step j for rows r0 + g and r0 + g + 8 of the stage (w: staged rows) and the
 * two rows' scales. */
template <int K>
MX_HD void mw_frag_a(const uint8_t *w, int r0, int s, int j, int lane, const uint64_t *grid_rep,
                     uint32_t a[4], int32_t sc[2]) {
    constexpr int WR = K == GM_IQ2_XXS ? 72 : K == GM_Q2_K ? 96 : 160;
    const uint8_t *lo = w + (r0 + (lane >> 2)) * WR;
    mw_decode8<K>(lo, s, j, lane, grid_rep, &a[0], &a[2], &sc[0]);
    mw_decode8<K>(lo + 8 * WR, s, j, lane, grid_rep, &a[1], &a[3], &sc[1]);
}
/* The min fragment (m16n8k16) of rows r0 + g, r0 + g + 8: each 16-element group's min, groups
 * 4t..4t+3 (Q4_K: the min of 32 elements repeated for its two groups). */
template <int K> MX_HD uint32_t mw_min4(const uint8_t *row, int lane) {
    const int t = lane & 3;
    if (K == GM_Q2_K) return (qm_ld32(row + 4 * t) >> 4) & 0x0f0f0f0fu;
    /* Q4_K: j < 4: s[j+4] & 63; else (s[j+4] >> 4) | ((s[j] >> 6) << 4) */
    const uint32_t s1 = qm_ld32(row + 8), s2 = qm_ld32(row + 12);
    const uint32_t mw = t < 2 ? s1 & 0x3f3f3f3fu : ((s2 >> 4) & 0x0f0f0f0fu) | ((s1 >> 2) & 0x30303030u);
    const uint32_t b0 = 2 * (t & 1), b1 = b0 + 1;
    return mw_perm(mw, 0, b0 | (b0 << 4) | (b1 << 8) | (b1 << 12));
}
template <int K> MX_HD void mw_frag_min(const uint8_t *w, int r0, int lane, uint32_t am[2]) {
    constexpr int WR = K == GM_IQ2_XXS ? 72 : K == GM_Q2_K ? 96 : 160;
    const uint8_t *lo = w + (r0 + (lane >> 2)) * WR;
    am[0] = mw_min4<K>(lo, lane);
    am[1] = mw_min4<K>(lo + 8 * WR, lane);
}
/* f16 d (and dmin) of rows r0 + g, r0 + g + 8 */
template <int K>
MX_HD void mw_row_scales(const uint8_t *w, int r0, int s, int lane, float dw[2], float dm[2]) {
    constexpr int WR = K == GM_IQ2_XXS ? 72 : K == GM_Q2_K ? 96 : 160;
    for (int h = 0; h < 2; h++) {
        const uint8_t *row = w + (r0 + (lane >> 2) + 8 * h) * WR;
        if (K == GM_IQ2_XXS) {
            dw[h] = gm_f16((uint16_t)((s & 1) ? qm_ld32(row + 4) >> 16 : qm_ld32(row) & 0xffff));
            dm[h] = 0.0f;
        } else {
            const uint32_t v = qm_ld32(row + (K == GM_Q2_K ? 80 : 0));
            dw[h] = gm_f16((uint16_t)(v & 0xffff));
            dm[h] = gm_f16((uint16_t)(v >> 16));
        }
    }
}
/* B fragment of k-step j for pairs 8nt.. of the stage's activations */
MX_HD void mw_frag_b(const uint8_t *x, int nt, int j, int lane, uint32_t b[2]) {
    mw_ld64(x + (8 * nt + (lane >> 2)) * MW_XROW + 32 * j + 8 * (lane & 3), &b[0], &b[1]);
}
/* block-sum fragments (lo, hi) of pairs 8nt.. (m16n8k16 B) */
MX_HD void mw_frag_bs(const uint8_t *xb, int nt, int lane, uint32_t *lo, uint32_t *hi) {
    mw_ld64(xb + (8 * nt + (lane >> 2)) * MW_XB + 8 * (lane & 3), lo, hi);
}
/* d_x of pairs 8nt + 2t, 8nt + 2t + 1 */
MX_HD void mw_frag_dx(const uint8_t *xd, int nt, int lane, float dx[2]) {
    uint32_t a, b;
    mw_ld64(xd + 4 * (8 * nt + 2 * (lane & 3)), &a, &b);
    dx[0] = gm_bits(a), dx[1] = gm_bits(b);
}
/* Where a superblock's integer sums start: Q2_K chains them in the mma accumulator from the bits
 * of 1.5 * 2^23 (|isum| <= 256 * 45 * 128 and |summs| <= 16 * 15 * 2032 stay below 2^22, so the
 * s32 read as f32 is exactly 1.5 * 2^23 + the sum and one subtraction gives (float)sum without a
 * quarter-rate int-to-float conversion); IQ2_XXS and Q4_K sums can exceed 2^22 and start at 0. */
MX_HD int32_t mw_isum0(int kind) { return kind == GM_Q2_K ? (int32_t)QM_MAGIC_I : 0; }
MX_HD float mw_sum_f(int kind, int32_t v) {
    return kind == GM_Q2_K ? qm_add(gm_bits((uint32_t)v), -QM_MAGIC_F) : mx_i2f(v);
}

/* After a k-step's mma d (from 0): the per-row integer scale (IQ2_XXS, Q4_K). */
MX_HD void mw_step(int32_t isum[4], const int32_t d[4], const int32_t sc[2]) {
    isum[0] += d[0] * sc[0];
    isum[1] += d[1] * sc[0];
    isum[2] += d[2] * sc[1];
    isum[3] += d[3] * sc[1];
}
/* End of a superblock: the CPU's float update of a lane's 4 outputs (rows g, g+8 x pairs 2t,
 * 2t+1), as mx_update (Q2_K sums biased, mw_isum0). */
template <int K>
MX_HD void mw_update(float acc[4], const int32_t isum[4], const int32_t mn[4], const float dw[2],
                     const float dm[2], const float dx[2]) {
    for (int i = 0; i < 4; i++) {
        const float w = dw[i >> 1], x = dx[i & 1];
        if (K == GM_IQ2_XXS) { /* acc += (f16(d) * d_y) * (float)bsum */
            acc[i] = qm_add(acc[i], qm_mul(qm_mul(w, x), mx_i2f(isum[i])));
        } else { /* acc += dall * (float)isum - dmin * (float)summs */
            const float dall = qm_mul(x, w), dmin = qm_mul(x, dm[i >> 1]);
            acc[i] =
                qm_add(acc[i], mx_sub(qm_mul(dall, mw_sum_f(K, isum[i])), qm_mul(dmin, mw_sum_f(K, mn[i]))));
        }
    }
}

#endif
