/* Units of the producer / consumer routed-expert products on warpgroup tensor cores: the IQ2_XXS
 * gate/up and the Q2_K down (cuda_moe_ws.cu; session 21, written after the session's device time was
 * spent; session 22 measured it on the H200: correct, gate/up slower than mh_kernel, down faster,
 * bench/NOTES.md; checked by tests/cuda/moe_ws_emu_check.cu on the host; off unless DSV4_CUDA_MOE_WS=1).
 *
 * The numerics are the f16 path's (cuda_moe_half.cuh): the same f16 weight elements (mh_decode8's
 * values: IQ2_XXS f16(g * sign * ls * d * 2^(p - 3)), one rounding; Q2_K fma(q, f16(d sc 2^p),
 * f16(-dmin m 2^p))), the same f16 activation rows (mh_pack's, mh_pack_mid's), f32 sums over the whole
 * row; only the order of the f32 additions differs (wgmma k16 steps). What
 * changes is the work split. mh_kernel's warps each decode their own A fragments in registers and meet
 * at a CTA barrier per superblock (2.95 ms a flash layer at n = 2048, bench/NOTES.md session 15); here
 *   - two producer warpgroups decode the raw IQ2_XXS words (read from global memory) into f16 A tiles
 *     in shared memory, 128-byte swizzled, and copy the tile's f16 activation rows (the B tile) by
 *     cp.async; they hand each stage over through an mbarrier (`full`);
 *   - two consumer warpgroups only run wgmma.m64n64k16: consumer c owns gate rows 64 c.. and up rows
 *     64 c.. of the row block, against all 64 pairs of the tile, and release the stage (`empty`).
 * A stage is 64 k (two 32-element sub-blocks of a superblock): the A tile is 256 staged rows (gate
 * rows 0..127 of the row block, then up rows 0..127) of 64 f16 = 128 bytes, the B tile 64 pair rows of
 * 128 bytes, chunk ch (8 k) of row r at r * 128 + ((ch ^ (r % 8)) * 16) in both (the layout the
 * wgmma descriptors' 128-byte swizzle reads, as in cuda_gemm_q8_wg.cuh). */
#ifndef DSV4_CUDA_MOE_WS_CUH
#define DSV4_CUDA_MOE_WS_CUH

#include "backend/cuda/cuda_moe_half.cuh" /* mh_* (tables, f16 helpers, mh_params), mw_*, MX_HD */

enum {
    MP_ROWS = 256,                  /* staged weight rows of a stage: 128 gate, then 128 up */
    MP_RB_ROWS = 128,               /* output rows per row block */
    MP_BN = 64,                     /* pairs per tile (MH_BN) */
    MP_BK = 64,                     /* k per stage */
    MP_ATILE = MP_ROWS * 128,       /* 32 KB */
    MP_BTILE = MP_BN * 128,         /* 8 KB */
    MP_STAGE = MP_ATILE + MP_BTILE, /* 40 KB: tiles stay 1024-aligned */
    MP_STAGES = 4,
    MP_PRODUCERS = 256, /* two warpgroups */
    MP_THREADS = 512,   /* + two consumer warpgroups */
    MP_TABLES = MH_GRID_BYTES + MH_SIGN_BYTES,
    /* the raw superblock of every staged row (mp_raw_*): IQ2_XXS 17 words (the 68-byte 4-aligned window over
     * its 66 bytes), Q2_K 21 (84 bytes); both odd, so a warp's reads of one word of its 32 rows hit 32 banks
     */
    MP_RAW_IQ2 = 17,
    MP_RAW_Q2K = 21,
    MP_RAW_BYTES =
        MP_ROWS * MP_RAW_IQ2 * 4, /* after the tables; the Q2_K kernel's (no tables) overlays them */
    /* stages (1024-aligned), the tables, the raw rows, pid, xsc, the full and empty barriers, the 128 sign
     * bytes, + the alignment: 232,128 bytes of the 232,448 an H200 CTA may have */
    MP_SMEM =
        MP_STAGES * MP_STAGE + MP_TABLES + MP_RAW_BYTES + 4 * MP_BN + 4 * MP_BN + 16 * MP_STAGES + 128 + 1024
};
MX_HD int mp_off_tables(void) { return MP_STAGES * MP_STAGE; }
MX_HD int mp_off_raw(bool dual) { return dual ? mp_off_tables() + MP_TABLES : mp_off_tables(); }
MX_HD int mp_off_pid(void) { return mp_off_tables() + MP_TABLES + MP_RAW_BYTES; }
MX_HD int mp_off_xsc(void) { return mp_off_pid() + 4 * MP_BN; }
MX_HD int mp_off_bars(void) { return mp_off_xsc() + 4 * MP_BN; }
MX_HD int mp_off_ksigns(void) { return mp_off_bars() + 16 * MP_STAGES; }

/* Chunk ch (8 k) of row r of a swizzled tile */
MX_HD int mp_chunk_off(int r, int ch) { return r * 128 + ((ch ^ (r & 7)) << 4); }

/* Output rows of a row block: gate/up (dual) 128, each as a gate and an up row; down 256 */
MX_HD int mp_rb_rows(bool dual) { return dual ? MP_RB_ROWS : MP_ROWS; }
/* Staged row r of row block rb: which tensor (0 gate or down, 1 up) and its weight row (rows past
 * n_out re-read the last one; their outputs are not stored) */
MX_HD int mp_weight_row(bool dual, int rb, int r, int n_out, int *which) {
    *which = dual && r >= MP_RB_ROWS;
    const int row = rb * mp_rb_rows(dual) + (dual ? r & (MP_RB_ROWS - 1) : r);
    return row < n_out ? row : n_out - 1;
}
/* Consumer c's two m64 blocks of staged rows (start rows): gate/up 64 c (gate) and 128 + 64 c (up);
 * down 128 c and 128 c + 64. Output row of block m, row i of it: gate/up 64 c + i (both blocks); down
 * 128 c + 64 m + i. */
MX_HD int mp_block_row(bool dual, int c, int m) { return dual ? m * MP_RB_ROWS + 64 * c : 128 * c + 64 * m; }
MX_HD int mp_block_out(bool dual, int c, int m) { return dual ? 64 * c : 128 * c + 64 * m; }

/* Stage q of a row block covers k 64 q .. 64 q + 63: superblock q / 4, sub-blocks 2 (q % 4) + jj */
MX_HD int mp_stage_sb(int q) { return q >> 2; }
MX_HD int mp_stage_sub(int q, int jj) { return 2 * (q & 3) + jj; }

/* A 16-bit little-endian load (p 2-aligned) */
MX_HD uint32_t mp_ld16(const uint8_t *p) {
#ifdef __CUDA_ARCH__
    return *(const uint16_t *)p;
#else
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8);
#endif
}
/* Superblock S of an IQ2_XXS row (66 bytes each: f16 d, then 8 sub-blocks of two words): the scale
 * bits, and sub-block j's words a0 (4 grid indices) and a1 (4 x 7 sign bits, the 4-bit scale) */
MX_HD uint32_t mp_iq2_d(const uint8_t *row, int S) { return mp_ld16(row + 66 * S); }
MX_HD void mp_iq2_words(const uint8_t *row, int S, int j, uint32_t *a0, uint32_t *a1) {
    const uint8_t *b = row + 66 * S + 2 + 8 * j;
    *a0 = mp_ld16(b) | (mp_ld16(b + 2) << 16);
    *a1 = mp_ld16(b + 4) | (mp_ld16(b + 6) << 16);
}
/* ---- the raw rows: why and how ----
 * Each producer thread decodes its own staged row, so words read straight from global memory would be 32
 * rows (32 cache lines) a warp instruction: session 22's first run of this kernel spent its time on exactly
 * that (L1 wavefronts 77 %, long-scoreboard stalls 56 % of a warp's cycles). Instead warp w copies the
 * current superblock of its staged rows 32 w..32 w + 31 (RW words each) into shared memory with coalesced
 * loads (lane l of load i takes word 32 i + l of the warp's rows laid end to end), one superblock (four
 * stages) ahead through registers, and each thread reads its row's words from there. */
MX_HD int mp_raw_words(bool iq2) { return iq2 ? MP_RAW_IQ2 : MP_RAW_Q2K; }
/* Byte offset within a weight row of raw word k of superblock S: IQ2_XXS superblocks are 66 bytes, so an
 * odd one's window starts 2 bytes early (as mw_wsrc's copies), Q2_K's are 84 */
MX_HD uint64_t mp_raw_src(bool iq2, int S, int k) {
    return iq2 ? (uint64_t)66 * S - 2 * (S & 1) + 4 * k : (uint64_t)84 * S + 4 * k;
}
/* Load i (of RW) of a warp's lane: its staged row rr (of the warp's 32) and word k */
MX_HD void mp_raw_slot(int RW, int i, int lane, int *rr, int *k) {
    const int f = 32 * i + lane;
    *rr = f / RW, *k = f - *rr * RW;
}
MX_HD uint32_t mp_ldg32(const uint8_t *p) { /* p 4-aligned, read-only for the kernel's lifetime */
#ifdef __CUDA_ARCH__
    return __ldg((const unsigned int *)p);
#else
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
#endif
}
/* A lane's RW loads of superblock S of row block rb for the warp whose first staged row is wbase. The
 * warp's 32 rows are consecutive rows of one tensor; rows past n_out read as zero words (their sums are
 * never stored; zero words decode to zeros). Offsets within the warp's rows are 32-bit: an expert's
 * tensor is far below 4 GB. */
template <bool IQ2>
MX_HD void mp_raw_load(const mh_params &p, int e, int rb, int S, int wbase, int lane, uint32_t *v) {
    constexpr int RW = IQ2 ? MP_RAW_IQ2 : MP_RAW_Q2K;
    const bool up = IQ2 && wbase >= MP_RB_ROWS;
    const int row0 = rb * mp_rb_rows(IQ2) + (IQ2 ? wbase & (MP_RB_ROWS - 1) : wbase), nvalid = p.n_out - row0;
    const uint8_t *base = (up ? p.w1 : p.w0) + (uint64_t)e * p.expert_bytes + (uint64_t)row0 * p.row_bytes +
                          mp_raw_src(IQ2, S, 0);
    const uint32_t rbytes = (uint32_t)p.row_bytes;
    MG_UNROLL
    for (int i = 0; i < RW; i++) {
        int rr, k;
        mp_raw_slot(RW, i, lane, &rr, &k);
        v[i] = rr < nvalid ? mp_ldg32(base + ((uint32_t)rr * rbytes + 4u * (uint32_t)k)) : 0u;
    }
}
/* ... and their stores into the raw rows (row r at raw + RW r) */
template <bool IQ2> MX_HD void mp_raw_store(uint32_t *raw, int wbase, int lane, const uint32_t *v) {
    constexpr int RW = IQ2 ? MP_RAW_IQ2 : MP_RAW_Q2K;
    MG_UNROLL
    for (int i = 0; i < RW; i++) {
        int rr, k;
        mp_raw_slot(RW, i, lane, &rr, &k);
        raw[(wbase + rr) * RW + k] = v[i];
    }
}
/* Stage m (= q % 4) of superblock S from its raw row R: the scale bits w[0], then (a0, a1) of sub-blocks
 * 2 m and 2 m + 1. An odd superblock's window starts 2 bytes early, so d is R[0]'s high half and the
 * sub-blocks' words are whole words; an even one's sub-blocks start 2 bytes into a word. */
MX_HD void mp_iq2_stage_words(const uint32_t *R, int S, int m, uint32_t w[5]) {
    if (S & 1) {
        w[0] = R[0] >> 16;
        for (int jj = 0; jj < 2; jj++)
            w[1 + 2 * jj] = R[1 + 2 * (2 * m + jj)], w[2 + 2 * jj] = R[2 + 2 * (2 * m + jj)];
    } else {
        w[0] = R[0] & 0xffffu;
        for (int jj = 0; jj < 4; jj++) {
            const int i = 4 * m + jj;
            w[1 + jj] = (R[i] >> 16) | (R[i + 1] << 16);
        }
    }
}

/* A producer thread's words of stage q of its staged row from the row's raw superblock R: IQ2_XXS the
 * scale bits and the two sub-blocks' (a0, a1), Q2_K mp_q2k_words' ten (defined below) */
template <int K> struct mp_raw { uint32_t w[K == GM_IQ2_XXS ? 5 : 10]; };
MX_HD void mp_q2k_words(const uint8_t *row, int q, uint32_t w[10]);
template <int K> MX_HD mp_raw<K> mp_stage_words(const uint32_t *R, int q) {
    mp_raw<K> r;
    if constexpr (K == GM_IQ2_XXS)
        mp_iq2_stage_words(R, mp_stage_sb(q), q & 3, r.w);
    else
        mp_q2k_words((const uint8_t *)R, q & 3, r.w); /* R holds superblock q / 4 only */
    return r;
}

/* The superblock scale as mh_row_scales folds it: f16(d * wsc) in both halves (exact) */
MX_HD uint32_t mp_dw2(uint32_t d_bits, float wsc) { return mh_dup(mh_f2h(gm_f16((uint16_t)d_bits) * wsc)); }

/* Chunk c (elements 8 c .. 8 c + 7) of a sub-block with words a0, a1 as 4 half2 words: mh_decode8's
 * expression (the tables' copy rep = lane % 8, so a quarter warp's 16-byte reads hit distinct banks) */
MX_HD void mp_decode_chunk(uint32_t a0, uint32_t a1, int c, int rep, const uint32_t *grid_h,
                           const uint32_t *sign_h, uint32_t dw2, uint32_t h[4]) {
    const uint32_t ls2 = mh_small2(2 * (a1 >> 28) + 1);
    uint32_t gw[4], sw[4];
    mh_iq2_tables((a0 >> (8 * c)) & 255, (a1 >> (7 * c)) & 127, rep, grid_h, sign_h, gw, sw);
    MG_UNROLL
    for (int k = 0; k < 4; k++) h[k] = mh_hmul2(mh_hmul2(gw[k] ^ sw[k], ls2), dw2);
}

/* ---- Q2_K: the 84-byte superblock (scales[16]: sc | m << 4, qs[64], f16 d, f16 dmin) ----
 * A producer thread's words of stage q of a row (32-bit loads: rows and superblocks are 4-aligned): the
 * 32 quant bytes both 32-element sub-blocks of the stage read (the same half hf = (q % 4) / 2 of qs, at
 * shifts 2 (j % 4)), the scale word holding their 8 scale bytes, and the d / dmin word. */
MX_HD void mp_q2k_words(const uint8_t *row, int q, uint32_t w[10]) {
    const uint8_t *b = row + 84 * (q >> 2);
    const int hf = (q & 3) >> 1;
    for (int i = 0; i < 8; i++) w[i] = qm_ld32(b + 16 + 32 * hf + 4 * i);
    w[8] = qm_ld32(b + 8 * hf + 4 * (q & 1));
    w[9] = qm_ld32(b + 80);
}
/* The superblock's f16(d wsc) and f16(-dmin wsc) in both halves, as mh_row_scales folds them */
MX_HD void mp_q2k_scales(uint32_t ddm, float wsc, uint32_t *dw2, uint32_t *nm2) {
    *dw2 = mh_dup(mh_f2h(gm_f16((uint16_t)(ddm & 0xffff)) * wsc));
    *nm2 = mh_dup(mh_f2h(-(gm_f16((uint16_t)(ddm >> 16)) * wsc)));
}
/* Chunk c (elements 8 c .. 8 c + 7) of sub-block j = 2 (q % 4) + jj of the stage: mh_decode8<GM_Q2_K>'s
 * expression on the same bytes */
MX_HD void mp_q2k_chunk(const uint32_t w[10], int q, int jj, int c, uint32_t dw2, uint32_t nm2,
                        uint32_t h[4]) {
    const int j = 2 * (q & 3) + jj, sh = 2 * (j & 3);
    const uint32_t q0 = w[2 * c], q1 = w[2 * c + 1];
    const uint32_t sb = (w[8] >> (8 * (2 * (j & 1) + (c >> 1)))) & 0xff; /* sc | m << 4 */
    const uint32_t a2 = mh_hmul2(dw2, mh_small2(sb & 15)), nb2 = mh_hmul2(nm2, mh_small2(sb >> 4));
    const uint32_t x0 = (q0 >> sh) & 0x03030303u, x1 = (q1 >> sh) & 0x03030303u, m1024 = 0xE400E400u;
    h[0] = mh_hfma2(mh_hadd2(mw_perm(x0, 0x64u, 0x4140u), m1024), a2, nb2);
    h[1] = mh_hfma2(mh_hadd2(mw_perm(x0, 0x64u, 0x4342u), m1024), a2, nb2);
    h[2] = mh_hfma2(mh_hadd2(mw_perm(x1, 0x64u, 0x4140u), m1024), a2, nb2);
    h[3] = mh_hfma2(mh_hadd2(mw_perm(x1, 0x64u, 0x4342u), m1024), a2, nb2);
}

/* The sign bits of 8 elements (sg: bit i for element i, a ksigns byte) as the 4 words of 0x8000 bits the
 * replicated sign table holds (mh_fill_tables' expression) */
MX_HD void mp_sign_masks(uint32_t sg, uint32_t sw[4]) {
    for (int k = 0; k < 4; k++) sw[k] = (((sg >> (2 * k)) & 1u) << 15) | (((sg >> (2 * k + 1)) & 1u) << 31);
}
/* mp_decode_chunk with the sign masks computed from the 128-byte sign table (ksigns) instead of read from
 * the replicated 16-byte entries: 1 byte of shared memory a chunk instead of 16, some ALU more
 * (DSV4_CUDA_MOE_WS=2); the same words */
MX_HD void mp_decode_chunk_ks(uint32_t a0, uint32_t a1, int c, int rep, const uint32_t *grid_h,
                              const uint8_t *ksigns, uint32_t dw2, uint32_t h[4]) {
    const uint32_t ls2 = mh_small2(2 * (a1 >> 28) + 1);
    uint32_t gw[4], sw[4];
    const uint32_t *G = grid_h + ((((a0 >> (8 * c)) & 255) * MH_REP + rep) * 4);
#ifdef __CUDA_ARCH__
    const uint4 gv = *(const uint4 *)G;
    gw[0] = gv.x, gw[1] = gv.y, gw[2] = gv.z, gw[3] = gv.w;
#else
    for (int k = 0; k < 4; k++) gw[k] = G[k];
#endif
    mp_sign_masks(ksigns[(a1 >> (7 * c)) & 127], sw);
    MG_UNROLL
    for (int k = 0; k < 4; k++) h[k] = mh_hmul2(mh_hmul2(gw[k] ^ sw[k], ls2), dw2);
}

/* Producer thread u's B-tile copies of a stage: pair u / 4 (clamped to the tile's last), chunks
 * 2 (u % 4) and 2 (u % 4) + 1 */
MX_HD int mp_b_pair(int u) { return u >> 2; }
MX_HD int mp_b_chunk(int u, int i) { return 2 * (u & 3) + i; }

/* The consumer thread's accumulator element e (wgmma m64n64 f32 layout) of warp w: row (of the
 * consumer's 64) and pair column */
MX_HD int mp_acc_row(int w, int lane, int e) { return 16 * w + (lane >> 2) + 8 * ((e & 3) >> 1); }
MX_HD int mp_acc_col(int lane, int e) { return 8 * (e >> 2) + 2 * (lane & 3) + (e & 1); }

#endif
