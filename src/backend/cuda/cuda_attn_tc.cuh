/* Units of the tensor-core prefill attention (cuda_attn_tc.cu, DSV4_CUDA_ATTN=tc), host-callable so
 * that tests/cuda/attn_tc_emu_check.cu runs the kernel's own index arithmetic on the CPU.
 *
 * Shape: head_dim 512, MQA (every head reads the same KV row, as key and as value). A CTA of
 * FT_T = 256 threads (8 warps) serves ONE query token and FT_H = 64 heads: the 64 heads of a token
 * share every row exactly, so the mma M dimension is heads and no row is masked between queries
 * (the rows of a token: fa_token / fa_row of cuda_attn_fast.cuh: raw window, then compressed or
 * selected rows; the selection case runs here too). Shared memory (~210 KB): Q (64 x 512) as f16
 * hi and lo, two tiles of FT_TR = 32 KV rows (f16, masked rows zero), scores, f16 weights. Per tile:
 *   scores: warp w: heads 16*(w%4)..+15, rows 16*(w/4)..+15 (two n8 tiles), 32 k-steps of
 *     mma.m16n8k16 (f16 x f16 -> f32), Q hi and Q lo into separate sums added at the end (session
 *     24: four independent chains); s = (hi + lo) * kq_scale, -inf for a masked row;
 *   online softmax: 4 threads per head, 8 rows each: tile max, running max m, p = expf(s - m)
 *     rounded to f16 (the PV operand), l = l * e^(m_old - m) + sum of the rounded p;
 *   values: warp w: heads 16*(w%4)..+15, dims 256*(w/4)..+255 (32 n8 tiles, 128 f32 accumulators
 *     per lane), rescaled by e^(m_old - m) (skipped by a warp whose 16 factors are all 1), then 2
 *     k-steps (32 rows) of P x V.
 * End: out = O * e^(m - M*) / (e^(sink - M*) + l e^(m - M*)), M* = max(sink, m) (fa_finish_scale,
 * once per head: ft_head_scales).
 * The chunk's own f32 rows are rounded to f16 by the launcher into a scratch (ft_kv16_kernel), so
 * that every row is copied by cp.async, or by the issuing threads without one (bitwise the same).
 * CTAs run the widest tokens (the last) first.
 * Numerics: rows f16 (the chunk's own f32 rows rounded, as store_f16 has already made them in the
 * graph), Q = hi + lo (f16 each: the scores lose only ~2^-22 of |q|), the weights P rounded to f16
 * (round to nearest even), products exact and sums f32 in the tensor core, softmax f32. Host
 * emulation vs float64: <= 2.9e-4 of max|out| per head vector (1.7e-4..2.6e-4 with scores to
 * +-30); Q as a single f16 (FT_QSPLIT 0) gave 2.5e-3 with scores of std 6. Deterministic (fixed
 * order, no atomics); not bitwise the decode path (f32 FMA): DSV4_PREFILL_SERIAL=1 differs under tc.
 * Budget per token (ratio 4, ~640 rows): 2 x 64 x 640 x 512 x 2 (scores, hi + lo) + 64 x 640 x
 * 512 x 2 (values) = 126 MFLOP on tensor cores; rows read once per token (640 KB from L2), q 128 KB
 * and out 128 KB from memory. */
#ifndef DSV4_CUDA_ATTN_TC_CUH
#define DSV4_CUDA_ATTN_TC_CUH

#include "backend/cuda/cuda_attn_fast.cuh"

#include <stddef.h>
#include <string.h>

constexpr uint32_t FT_H = 64;          /* heads of a CTA */
constexpr uint32_t FT_TR = 32;         /* rows of a tile */
constexpr uint32_t FT_T = 256;         /* threads */
constexpr uint32_t FT_LDK = FA_D + 8;  /* halves per staged row (Q and KV): 1040 B, 16-B aligned */
constexpr uint32_t FT_LDP = FT_TR + 8; /* halves per P row */
constexpr uint32_t FT_LDS = FT_TR + 1; /* floats per score row */
constexpr uint32_t FT_CH = FA_D / 8;   /* 16-byte chunks (8 halves) of a row */
/* floats per row of the output staged in Q's space (hi and lo: 2 x 64 x FT_LDK halves); 520 = 8 mod
 * 32, so a half warp's 8-byte fragment stores hit 32 distinct banks */
constexpr uint32_t FT_LDO = FA_D + 8;

/* Q as hi + lo f16 pairs (x = hi + lo to ~2^-22): the scores take two products, so that only the
 * weights' f16 rounding is left (see the header comment); 0: Q rounded once to f16. */
#ifndef FT_QSPLIT
#define FT_QSPLIT 1
#endif

static_assert(FT_T / 32 == (FT_H / 16) * (FT_TR / 16), "warps = head blocks x row halves");
static_assert(FT_T / 32 == (FT_H / 16) * 2, "warps = head blocks x dim halves");
static_assert(FT_T == FT_H * 4, "4 softmax threads per head");

struct ft_smem {               /* q and qlo first and adjacent: the output staging (FT_LDO) reuses them */
    uint16_t q[FT_H * FT_LDK]; /* Q of the token, f16 (hi) */
#if FT_QSPLIT
    uint16_t qlo[FT_H * FT_LDK]; /* lo = f16(x - hi) */
#endif
    uint16_t kv[2][FT_TR * FT_LDK];  /* tiles: current / next */
    float sc[FT_H * FT_LDS];         /* scores [head][row] */
    uint16_t p[FT_H * FT_LDP];       /* weights [head][row], f16 */
    float m[FT_H], l[FT_H], f[FT_H]; /* running max and sum; this tile's rescale */
    fa_rowref rowp[2][FT_TR];        /* row references of the tiles */
};
#if FT_QSPLIT
static_assert(offsetof(ft_smem, qlo) == sizeof(uint16_t) * FT_H * FT_LDK &&
                  sizeof(float) * FT_H * FT_LDO <= 2 * sizeof(uint16_t) * FT_H * FT_LDK,
              "the staged output fits Q hi and lo");
#endif

/* f32 -> f16 bits, round to nearest even (as __float2half_rn), host and device. */
FA_HD uint16_t ft_f16(float x) {
#ifdef __CUDA_ARCH__
    return __half_as_ushort(__float2half_rn(x));
#else
    uint32_t u;
    memcpy(&u, &x, 4);
    const uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520: inf */
    if (a < 0x38800000u) {                                   /* subnormal half (or zero) */
        if (a < 0x33000000u) return (uint16_t)sign;          /* < 2^-25: rounds to 0 */
        const uint32_t e = a >> 23, mant = (a & 0x7fffffu) | 0x800000u;
        const uint32_t drop = 126 - e; /* units of 2^-24: mant * 2^(e-150) / 2^-24 */
        const uint32_t q = mant >> drop, rem = mant & ((1u << drop) - 1), half = 1u << (drop - 1);
        const uint32_t r = q + (rem > half || (rem == half && (q & 1u)));
        return (uint16_t)(sign | r);
    }
    const uint32_t rem = a & 0x1fffu, half = 0x1000u;
    uint32_t r = ((a >> 13) - ((127 - 15) << 10));
    if (rem > half || (rem == half && (r & 1u))) r++;
    return (uint16_t)(sign | r);
#endif
}

FA_HD float ft_f32(uint16_t h) {
#ifdef __CUDA_ARCH__
    return __half2float(__ushort_as_half(h));
#else
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    float v;
    if (e == 0)
        v = ldexpf((float)m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexpf((float)(m | 0x400u), (int)e - 25);
    uint32_t u;
    memcpy(&u, &v, 4);
    u |= sign;
    memcpy(&v, &u, 4);
    return v;
#endif
}

/* The f16 pair of a Q element: hi = f16(x), lo = f16(x - hi) (x - hi is exact in f32). */
FA_HD uint16_t ft_q_lo(float x, uint16_t hi) { return ft_f16(x - ft_f32(hi)); }

FA_HD uint32_t ft_pack(uint16_t lo, uint16_t hi) { return (uint32_t)lo | ((uint32_t)hi << 16); }
FA_HD uint32_t ft_ld32(const uint16_t *p) { /* 4-byte aligned (even offsets in the tiles) */
#ifdef __CUDA_ARCH__
    return *(const uint32_t *)p;
#else
    return ft_pack(p[0], p[1]);
#endif
}

/* Chunk c (8 halves) of a staged row from its reference: an F16 row copied, an F32 row (the chunk's
 * own rows) rounded, no row zeros. The kernel copies F16 chunks with cp.async instead (same bytes). */
FA_HD void ft_stage_chunk(fa_rowref p, uint32_t c, uint16_t *dst) {
    if (!p) {
        for (uint32_t i = 0; i < 8; i++) dst[i] = 0;
        return;
    }
    const unsigned char *b = fa_row_bytes(p);
    if (p & 1u) {
        const uint16_t *h = (const uint16_t *)(b + (size_t)c * 16);
        for (uint32_t i = 0; i < 8; i++) dst[i] = h[i];
        return;
    }
    const float *x = (const float *)b + (size_t)c * 8;
    for (uint32_t i = 0; i < 8; i++) dst[i] = ft_f16(x[i]);
}

/* The launch's arguments: the fast kernel's (a.half: ring and compressed rows are F16) and the
 * chunk's own rows as f16 (kv16: the launcher rounds a.kv into the scratch first, so that every row
 * is copied by cp.async), or nullptr (those rows rounded at the issue by ft_stage_chunk). */
struct ft_args {
    fa_args a;
    const uint16_t *kv16;
};

/* The f16 row of a row reference when there is one to copy: F16 rows themselves, a chunk row's
 * copy in kv16; nullptr for no row and for a chunk row without kv16. */
FA_HD const uint16_t *ft_row_f16(const ft_args &x, fa_rowref p) {
    if (!p) return nullptr;
    if (p & 1u) return (const uint16_t *)fa_row_bytes(p);
    if (!x.kv16) return nullptr;
    const uint64_t idx = (uint64_t)((const float *)fa_row_bytes(p) - x.a.kv) / FA_D;
    return x.kv16 + idx * FA_D;
}

/* Fragments of mma.m16n8k16.row.col.f32.f16.f16.f32 for lane (g = lane/4, t = lane%4):
 *   A (16 x 16): a0 = row g, k 2t,2t+1; a1 = row g+8; a2 = row g, k+8; a3 = row g+8, k+8.
 *   B (16 x 8):  b0 = k 2t,2t+1 of column g; b1 = k+8.
 *   D (16 x 8):  d0,d1 = row g, columns 2t,2t+1; d2,d3 = row g+8.
 * A: rows of `a` (ld halves) from r0, k from k0. */
FA_HD void ft_frag_a(const uint16_t *a, uint32_t ld, uint32_t r0, uint32_t k0, uint32_t lane, uint32_t f[4]) {
    const uint16_t *lo = a + (size_t)(r0 + (lane >> 2)) * ld + k0 + 2 * (lane & 3), *hi = lo + 8 * ld;
    f[0] = ft_ld32(lo);
    f[1] = ft_ld32(hi);
    f[2] = ft_ld32(lo + 8);
    f[3] = ft_ld32(hi + 8);
}
/* B of the scores: column = KV row n0 + g, k = dims from k0 (contiguous in the row). */
FA_HD void ft_frag_k(const uint16_t *kv, uint32_t n0, uint32_t k0, uint32_t lane, uint32_t f[2]) {
    const uint16_t *p = kv + (size_t)(n0 + (lane >> 2)) * FT_LDK + k0 + 2 * (lane & 3);
    f[0] = ft_ld32(p);
    f[1] = ft_ld32(p + 8);
}
/* B of the values: column = dim n0 + g, k = KV rows from k0 (a column of the tile). */
FA_HD void ft_frag_v(const uint16_t *kv, uint32_t n0, uint32_t k0, uint32_t lane, uint32_t f[2]) {
    const uint16_t *p = kv + (size_t)(k0 + 2 * (lane & 3)) * FT_LDK + n0 + (lane >> 2);
    f[0] = ft_pack(p[0], p[FT_LDK]);
    f[1] = ft_pack(p[8 * FT_LDK], p[9 * FT_LDK]);
}

/* The same fragments by ldmatrix.x4 (the kernel's reads): lane l gives the address of row l%8 of
 * 8x8 matrix j = l/8 (16 bytes; every row address here is 16-byte aligned); without .trans register
 * j of lane l is (row l/4, columns 2(l%4), +1) of matrix j, with .trans (rows 2(l%4), +1 of column
 * l/4). attn_tc_emu_check models that and checks it against the ft_frag_* above.
 * A (Q, P): matrices (r0, k0), (r0+8, k0), (r0, k0+8), (r0+8, k0+8) -> a0..a3. */
FA_HD const uint16_t *ft_ldm_a(const uint16_t *a, uint32_t ld, uint32_t r0, uint32_t k0, uint32_t lane) {
    const uint32_t j = lane >> 3;
    return a + (size_t)(r0 + (lane & 7) + 8 * (j & 1)) * ld + k0 + 8 * (j >> 1);
}
/* K of two n8 tiles (KV rows n0.., n0+8..): (n0, k0), (n0, k0+8), (n0+8, k0), (n0+8, k0+8) -> b0, b1
 * of the first tile, b0, b1 of the second. */
FA_HD const uint16_t *ft_ldm_k(const uint16_t *kv, uint32_t n0, uint32_t k0, uint32_t lane) {
    const uint32_t j = lane >> 3;
    return kv + (size_t)(n0 + (lane & 7) + 8 * (j >> 1)) * FT_LDK + k0 + 8 * (j & 1);
}
/* V of two n8 tiles (dims n0.., n0+8..), .trans: rows k0.. / k0+8.. of dims n0.., then of n0+8... */
FA_HD const uint16_t *ft_ldm_v(const uint16_t *kv, uint32_t n0, uint32_t k0, uint32_t lane) {
    const uint32_t j = lane >> 3;
    return kv + (size_t)(k0 + (lane & 7) + 8 * (j & 1)) * FT_LDK + n0 + 8 * (j >> 1);
}

/* The score sums of Q hi and of Q lo, kept apart over the k-steps, added once: d += lo. */
FA_HD void ft_add_lo(float d[4], const float lo[4]) {
    for (uint32_t i = 0; i < 4; i++) d[i] += lo[i];
}

/* The scores of one n8 tile (heads from h0, rows from r0) into sc, masked rows -inf. */
FA_HD void ft_store_scores(float *sc, const fa_rowref *rowp, uint32_t h0, uint32_t r0, uint32_t lane,
                           const float d[4], float kq_scale) {
    const uint32_t g = lane >> 2, c = r0 + 2 * (lane & 3);
    for (uint32_t i = 0; i < 4; i++) {
        const uint32_t h = h0 + g + (i >= 2 ? 8 : 0), r = c + (i & 1);
        sc[h * FT_LDS + r] = rowp[r] ? d[i] * kq_scale : -INFINITY;
    }
}

/* Softmax thread tid: head tid/4, rows 8*(tid%4)..+7. ft_sm_max: its rows' max; the kernel takes
 * the max over the 4 threads (xor 1, 2). ft_sm_weights: p rounded into P, returns the sum of its
 * rounded p (in row order); the 4 sums are added as (s0 + s1) + (s2 + s3) (xor 1, then 2). */
FA_HD float ft_sm_max(const float *sc, uint32_t tid) {
    const float *s = sc + (tid / 4) * FT_LDS + 8 * (tid % 4);
    float mx = s[0];
    for (uint32_t i = 1; i < 8; i++) mx = fmaxf(mx, s[i]);
    return mx;
}
FA_HD float ft_sm_weights(const float *sc, uint16_t *p, uint32_t tid, float m_new) {
    const uint32_t h = tid / 4, r0 = 8 * (tid % 4);
    float ps = 0.0f;
    for (uint32_t i = 0; i < 8; i++) {
        const uint16_t w = ft_f16(fa_weight(sc[h * FT_LDS + r0 + i], m_new));
        p[h * FT_LDP + r0 + i] = w;
        ps += ft_f32(w);
    }
    return ps;
}

/* The output factor of each head, fa_finish_scale once per head (the epilogue used to evaluate it,
 * two expf and a division, for each of a lane's 128 outputs: half the kernel's instructions on the
 * dense layers, session 24's ncu). sc[h] for h < FT_H; the values are the same bits. */
FA_HD void ft_head_scales(float *sc, const float *m, const float *l, const float *sinks, uint32_t h) {
    sc[h] = fa_finish_scale(sinks[h], m[h], l[h]);
}
/* Output of one n8 tile of the values (heads from h0, dims from d0) times its head's factor sc[h]:
 * out row stride ld floats (FA_D, or FT_LDO where the kernel stages it); the two columns of a lane's row are
 * adjacent (one 8-byte store). */
FA_HD void ft_store_out(float *out, uint32_t ld, const float *sc, uint32_t h0, uint32_t d0, uint32_t lane,
                        const float d[4]) {
    const uint32_t g = lane >> 2, c = d0 + 2 * (lane & 3);
    for (uint32_t i = 0; i < 4; i += 2) {
        const uint32_t h = h0 + g + (i >= 2 ? 8 : 0);
        const float f = sc[h];
        float *o = out + (size_t)h * ld + c;
#ifdef __CUDA_ARCH__
        *(float2 *)o = make_float2(d[i] * f, d[i + 1] * f);
#else
        o[0] = d[i] * f;
        o[1] = d[i + 1] * f;
#endif
    }
}

#endif
