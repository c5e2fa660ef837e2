/* Units of the warpgroup routed-expert products on tensor cores: the IQ2_XXS gate/up and the Q2_K down
 * (cuda_moe_ws.cu; checked by tests/cuda/moe_ws_emu_check.cu on the host; off unless DSV4_CUDA_MOE_WS is
 * set).
 *
 * The numerics are the f16 path's (cuda_moe_half.cuh): the same f16 weight elements (mh_decode8's
 * values: IQ2_XXS f16(g * sign * ls * d * 2^(p - 3)), one rounding; Q2_K fma(q, f16(d sc 2^p),
 * f16(-dmin m 2^p))), the same f16 activation rows (mh_pack's, mh_pack_mid's), f32 sums over the whole
 * row; only the order of the f32 additions differs (wgmma k16 steps). What changes is the work split.
 *
 * Session 21 wrote it with two producer warpgroups decoding and two consumer warpgroups running wgmma;
 * session 22 measured that form at 2.3 k cycles a stage with 8 decoding warps issuing at 0.45 a cycle
 * per scheduler (the consumers idle 80 %). Session 23's form: all four warpgroups decode and multiply.
 * Warpgroup g decodes its own 64 staged rows of each stage into the A tile (each thread one 64-k half of
 * a row: 8 chunks of 8 elements; 4 chunks a thread, measured first, paid the per-stage overhead twice),
 * syncs its 128 threads (named barrier), and runs its m64n64k16 products on them while the other
 * warpgroups decode: no producer / consumer hand-over of A. Only the B tile (the pairs' f16 activation
 * rows, two 16-byte cp.async a thread) is CTA-wide: it is copied a stage ahead into one of three slots and
 * handed over through the `full` / `empty` mbarriers; A has two slots.
 * A stage is 128 k (half a superblock) in two 64-k halves: each half of the A tile is 256 staged rows of
 * 64 f16 = 128 bytes, of the B tile 64 pair rows of 128 bytes, chunk ch (8 k) of row r at r * 128 +
 * ((ch ^ (r % 8)) * 16) in both (the layout the wgmma descriptors' 128-byte swizzle reads, as in
 * cuda_gemm_q8_wg.cuh). Staged rows: down, row s of the 256-row block; gate/up, warp W's 16 rows 16 W.. are
 * gate rows 8 W..8 W + 7 then the up rows of the same outputs, so a thread's accumulator holds the gate and
 * up sums of one output (rows r and r + 8 of the m64 layout) and the SwiGLU needs no exchange. Measured in
 * session 23 (bench/NOTES.md): at ncu's 1.35 GHz as fast as mh_kernel, at the real clock 2 % slower; off by
 * default. */
#ifndef DSV4_CUDA_MOE_WS_CUH
#define DSV4_CUDA_MOE_WS_CUH

#include "backend/cuda/cuda_moe_half.cuh" /* mh_* (tables, f16 helpers, mh_params), mw_*, MX_HD */

enum {
    MP_ROWS = 256,    /* staged weight rows of a stage: gate/up 128 outputs (gate and up rows), down 256 */
    MP_RB_ROWS = 128, /* gate/up output rows per row block */
    MP_BN = 64,       /* pairs per tile (MH_BN) */
    MP_BK = 128,      /* k per stage: half a superblock, two 64-k halves of 128-byte rows */
    MP_AHALF = MP_ROWS * 128, /* 32 KB */
    MP_ATILE = 2 * MP_AHALF,
    MP_BHALF = MP_BN * 128, /* 8 KB */
    MP_BTILE = 2 * MP_BHALF,
    MP_ASLOTS = 2,    /* A tiles: a warpgroup's rows are its own, retired in their stage */
    MP_BSLOTS = 3,    /* B tiles: copied a stage ahead, released by every warpgroup */
    MP_THREADS = 512, /* four warpgroups, 64 staged rows each */
    MP_WG_ROWS = 64,
    /* the raw superblock of every staged row (mp_raw_*): IQ2_XXS 17 words (the 68-byte 4-aligned window over
     * its 66 bytes), Q2_K 21 (84 bytes); both odd, so a warp's reads of one word of its 16 rows hit 16 banks
     */
    MP_RAW_IQ2 = 17,
    MP_RAW_Q2K = 21,
    MP_RAW_BYTES = MP_ROWS * MP_RAW_IQ2 * 4, /* after the grid; the Q2_K kernel's (no grid) overlays it */
    /* A and B tiles (1024-aligned), the replicated grid (the sign masks are computed from the 128 sign
     * bytes: the replicated sign table does not fit beside them), the raw rows, pid, xsc, the full and empty
     * barriers, the sign bytes, + the alignment: 232,112 bytes of the 232,448 an H200 CTA may have */
    MP_SMEM = MP_ASLOTS * MP_ATILE + MP_BSLOTS * MP_BTILE + MH_GRID_BYTES + MP_RAW_BYTES + 4 * MP_BN +
              4 * MP_BN + 16 * MP_BSLOTS + 128 + 1024
};
MX_HD int mp_off_b(void) { return MP_ASLOTS * MP_ATILE; }
MX_HD int mp_off_tables(void) { return mp_off_b() + MP_BSLOTS * MP_BTILE; }
MX_HD int mp_off_raw(bool dual) { return dual ? mp_off_tables() + MH_GRID_BYTES : mp_off_tables(); }
MX_HD int mp_off_pid(void) { return mp_off_tables() + MH_GRID_BYTES + MP_RAW_BYTES; }
MX_HD int mp_off_xsc(void) { return mp_off_pid() + 4 * MP_BN; }
MX_HD int mp_off_bars(void) { return mp_off_xsc() + 4 * MP_BN; }
MX_HD int mp_off_ksigns(void) { return mp_off_bars() + 16 * MP_BSLOTS; }

/* Chunk ch (8 k) of row r of a swizzled tile */
MX_HD int mp_chunk_off(int r, int ch) { return r * 128 + ((ch ^ (r & 7)) << 4); }

/* Output rows of a row block: gate/up (dual) 128, each as a gate and an up row; down 256 */
MX_HD int mp_rb_rows(bool dual) { return dual ? MP_RB_ROWS : MP_ROWS; }
/* Staged row s of a row block: which tensor (0 gate or down, 1 up) and its output row within the block */
MX_HD int mp_staged_out(bool dual, int s, int *which) {
    *which = dual && (s & 8);
    return dual ? 8 * (s >> 4) + (s & 7) : s;
}
/* Thread t's staged row and half (its 64-k half of every stage) */
MX_HD int mp_thread_row(int t) { return 16 * (t >> 5) + ((t & 31) >> 1); }
MX_HD int mp_thread_half(int t) { return t & 1; }
/* The output row within the row block of accumulator element i of warp w (of warpgroup g) and lane: down,
 * staged row 64 g + the m64 layout's row; gate/up, the output of the gate element i (i & 2 == 0; its up
 * sum is element i + 2, 8 staged rows further) */
MX_HD int mp_epi_row(bool dual, int g, int w, int lane, int i) {
    return dual ? 32 * g + 8 * w + (lane >> 2) : MP_WG_ROWS * g + 16 * w + (lane >> 2) + 8 * ((i & 3) >> 1);
}

/* Stage q of a row block covers k 128 q .. 128 q + 127: superblock q / 2; its half hf (of 64 k) is the
 * row's 64-k step qd = 2 q + hf. Step qd covers superblock qd / 4, sub-blocks 2 (qd % 4) + jj. */
MX_HD int mp_stage_step(int q, int hf) { return 2 * q + hf; }
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
/* Loads of a lane a superblock: warp W's 16 staged rows of RW words laid end to end, 32 words a load */
MX_HD constexpr int mp_raw_loads(int RW) { return (16 * RW + 31) / 32; }
/* Load i of a warp's lane: its staged row rr (of the warp's 16; 16 and up: none) and word k */
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
/* A lane's loads of superblock S of row block rb for warp W (staged rows 16 W..16 W + 15): rows past n_out
 * read as zero words (their sums are never stored; zero words decode to zeros) */
template <bool IQ2>
MX_HD void mp_raw_load(const mh_params &p, int e, int rb, int S, int W, int lane, uint32_t *v) {
    constexpr int RW = IQ2 ? MP_RAW_IQ2 : MP_RAW_Q2K;
    const uint64_t eoff = (uint64_t)e * p.expert_bytes + mp_raw_src(IQ2, S, 0);
    MG_UNROLL
    for (int i = 0; i < mp_raw_loads(RW); i++) {
        int rr, k, which;
        mp_raw_slot(RW, i, lane, &rr, &k);
        const int row = rb * mp_rb_rows(IQ2) + mp_staged_out(IQ2, 16 * W + (rr & 15), &which);
        v[i] = rr < 16 && row < p.n_out
                   ? mp_ldg32((which ? p.w1 : p.w0) + eoff + (uint64_t)row * p.row_bytes + 4u * (uint32_t)k)
                   : 0u;
    }
}
/* ... and their stores into the raw rows (staged row s at raw + RW s) */
template <bool IQ2> MX_HD void mp_raw_store(uint32_t *raw, int W, int lane, const uint32_t *v) {
    constexpr int RW = IQ2 ? MP_RAW_IQ2 : MP_RAW_Q2K;
    MG_UNROLL
    for (int i = 0; i < mp_raw_loads(RW); i++) {
        int rr, k;
        mp_raw_slot(RW, i, lane, &rr, &k);
        if (rr < 16) raw[(16 * W + rr) * RW + k] = v[i];
    }
}
/* Sub-block j of superblock S from its raw row R: the scale bits d and the words a0 (4 grid indices), a1 (4 x
 * 7 sign bits, the 4-bit scale). An odd superblock's window starts 2 bytes early, so d is R[0]'s high half
 * and the sub-block's words are whole words; an even one's start 2 bytes into a word. */
MX_HD void mp_iq2_sub_words(const uint32_t *R, int S, int j, uint32_t *d, uint32_t *a0, uint32_t *a1) {
    if (S & 1) {
        *d = R[0] >> 16, *a0 = R[1 + 2 * j], *a1 = R[2 + 2 * j];
    } else {
        *d = R[0] & 0xffffu;
        *a0 = (R[2 * j] >> 16) | (R[2 * j + 1] << 16);
        *a1 = (R[2 * j + 1] >> 16) | (R[2 * j + 2] << 16);
    }
}
MX_HD void mp_q2k_words(const uint8_t *row, int q, uint32_t w[10]);

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
 * replicated sign table holds (mh_fill_tables' expression): word k takes bit 2 k to bit 15 and bit 2 k + 1
 * to bit 31. One multiply and one mask a word (session 23: the shifts and masks of the plain expression were
 * the decoder's largest ALU item): sg (8 bits) times 2^(15 - 2k) + 2^(30 - 2k) lays two copies of sg at bits
 * 15 - 2k.. and 30 - 2k.. that do not overlap (so the sum is their OR), and the mask keeps bits 15 and 31. */
MX_HD void mp_sign_masks(uint32_t sg, uint32_t sw[4]) {
    MG_UNROLL
    for (int k = 0; k < 4; k++) sw[k] = (sg * ((1u << (15 - 2 * k)) + (1u << (30 - 2 * k)))) & 0x80008000u;
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

/* Thread t's B-tile copies of a stage: chunk t % 8 of both halves of pair t / 8 (clamped to the tile's last)
 */
MX_HD int mp_b_pair(int t) { return t >> 3; }
MX_HD int mp_b_chunk(int t) { return t & 7; }

/* A thread's accumulator element e (wgmma m64n64 f32 layout) of warp w of its warpgroup: row (of the
 * warpgroup's 64 staged rows) and pair column */
MX_HD int mp_acc_row(int w, int lane, int e) { return 16 * w + (lane >> 2) + 8 * ((e & 3) >> 1); }
MX_HD int mp_acc_col(int lane, int e) { return 8 * (e >> 2) + 2 * (lane & 3) + (e & 1); }

/* 4 chunks of 64-k step q of a staged row (sub-block 2 (q % 4) + hf of superblock q / 4) from the row's
 * raw superblock R: chunk c's 4 half2 words in h[c]. IQ2_XXS: the grid from the replicated table gh (copy
 * rep), the signs from the 128-byte table ks (mp_decode_chunk_ks) */
template <int K>
MX_HD void mp_decode_half(const uint32_t *R, int q, int hf, float wsc, int rep, const uint32_t *gh,
                          const uint8_t *ks, uint32_t h[4][4]) {
    if constexpr (K == GM_IQ2_XXS) {
        uint32_t d, a0, a1;
        mp_iq2_sub_words(R, mp_stage_sb(q), mp_stage_sub(q, hf), &d, &a0, &a1);
        const uint32_t dw2 = mp_dw2(d, wsc);
        MG_UNROLL
        for (int c = 0; c < 4; c++) mp_decode_chunk_ks(a0, a1, c, rep, gh, ks, dw2, h[c]);
    } else {
        uint32_t w[10], dw2, nm2;
        mp_q2k_words((const uint8_t *)R, q & 3, w); /* R holds superblock q / 4 only */
        mp_q2k_scales(w[9], wsc, &dw2, &nm2);
        MG_UNROLL
        for (int c = 0; c < 4; c++) mp_q2k_chunk(w, q, hf, c, dw2, nm2, h[c]);
    }
}

#endif
