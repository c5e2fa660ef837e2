/* Block decoders of the matvec kernel (cuda_matvec.cu), host-callable too so that
 * bench/kernels/cuda_matvec_emu.cu can check them on a machine without a GPU. */
#ifndef DSV4_CUDA_MV_UNITS_CUH
#define DSV4_CUDA_MV_UNITS_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "backend/cuda/cuda_mv_common.cuh"

/* #pragma unroll for the device pass only (the host compiler does not know it) */
#ifdef __CUDA_ARCH__
#define MV_UNROLL _Pragma("unroll")
#else
#define MV_UNROLL
#endif

#define MV_WARPS 8
#define MV_THREADS (MV_WARPS * 32)
#define MV_IQ2_GRID_BYTES (256 * 16 * 8)
#define MV_IQ2_MASK_BYTES (128 * 16 * 8)
#define MV_MAX_STAGES 4

struct mv_params {
    const uint8_t *w;     /* tensor base */
    const int32_t *ids;   /* expert ids (device) or NULL: expert 0 */
    const uint8_t *x;     /* activation buffer of slot 0 */
    float *y;             /* [k * out] */
    const uint64_t *grid; /* IQ2_XXS grid (device) */
    const uint32_t *sel;  /* IQ2_XXS selector tables (device, 384 entries; the V = 1 decoder) */
    long long expert_bytes, x_stride;
    int row_bytes, in, out, n_expert, k;
    int R;    /* rows per stage */
    int nseg; /* segments per row group (a power of 2) */
    int lg_nseg;
    int S; /* stages */
    int stage_bytes, act_bytes, red_bytes, units;
    /* Two tensors in one launch (gate and up of the same experts): slots >= k1 read w2, with the
     * id and activation of slot - k1. w2 NULL: every slot reads w. */
    const uint8_t *w2;
    int k1;
    /* The MoE mid folded into a gate/up pair launch (mvs_iq2_kernel; NULL midq: not asked): the warp
     * that completes a 256-row block of gate and up rows forms its mid values and Q8_K block
     * (mvi_mid_tail). tickets: one counter per block, zero between launches. */
    uint8_t *midq;
    const float *mid_w;
    int *tickets;
    float mid_clamp;
    int mid_clamp_on;
};

/* Slot -> (tensor base, index into ids and the activations). */
static inline __host__ __device__ int mv_src(const mv_params &p, int slot, const uint8_t **base) {
    if (p.w2 && slot >= p.k1) {
        *base = p.w2;
        return slot - p.k1;
    }
    *base = p.w;
    return slot;
}

/* ---- format traits ---- */
__host__ __device__ constexpr int mv_rpl(int f) { return f == MV_IQ2_XXS ? 4 : 2; }
__host__ __device__ constexpr int mv_lut_bytes(int f) {
    return f == MV_IQ2_XXS ? MV_IQ2_GRID_BYTES + MV_IQ2_MASK_BYTES : 0;
}
static inline int64_t mv_row_bytes(int f, int64_t in) {
    switch (f) {
    case MV_Q8_0: return in / 32 * 34;
    case MV_IQ2_XXS: return in / 256 * 66;
    case MV_Q2_K: return in / 256 * 84;
    case MV_Q4_K: return in / 256 * 144;
    case MV_F16: return in * 2;
    default: return 0;
    }
}
static inline int64_t mv_block_elems(int f) { return f == MV_Q8_0 ? 32 : f == MV_F16 ? 8 : 256; }
static inline int64_t mv_units(int f, int64_t in) {
    switch (f) {
    case MV_Q8_0: return in / 32;
    case MV_IQ2_XXS: return in / 32;
    case MV_Q2_K:
    case MV_Q4_K: return in / 64;
    case MV_F16: return in / 8;
    default: return 0;
    }
}
static inline int64_t mv_act_smem(int f, int64_t in) {
    return f == MV_Q8_0 || f == MV_F16 ? (f == MV_Q8_0 ? in / 32 : in / 8) * 48 : in / 256 * 400;
}
static inline int64_t mv_act_global(int f, int64_t in) {
    return f == MV_Q8_0 ? in / 32 * 36 : f == MV_F16 ? in * 4 : in / 256 * 292;
}

/* ---- small helpers ---- */
/* Portable spellings of the intrinsics, so the decoders also run on the host (cuda_matvec_emu). */
static __host__ __device__ __forceinline__ int mv_dp4a(int a, int b, int c) {
#ifdef __CUDA_ARCH__
    return __dp4a(a, b, c);
#else
    for (int k = 0; k < 4; k++) c += (int)(int8_t)(a >> (8 * k)) * (int)(int8_t)(b >> (8 * k));
    return c;
#endif
}
/* unsigned bytes of a times signed bytes of b (dp4a.u32.s32) */
static __host__ __device__ __forceinline__ int mv_dp4a_us(uint32_t a, int b, int c) {
#ifdef __CUDA_ARCH__
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
#else
    for (int k = 0; k < 4; k++) c += (int)(uint8_t)(a >> (8 * k)) * (int)(int8_t)(b >> (8 * k));
    return c;
#endif
}
/* (hi:lo) >> min(sh, 32), low word */
static __host__ __device__ __forceinline__ uint32_t mv_fshr(uint32_t lo, uint32_t hi, unsigned sh) {
#ifdef __CUDA_ARCH__
    return __funnelshift_rc(lo, hi, sh);
#else
    return (uint32_t)((((uint64_t)hi << 32) | lo) >> (sh > 32 ? 32 : sh));
#endif
}
static __host__ __device__ __forceinline__ int mv_popc(uint32_t v) {
#ifdef __CUDA_ARCH__
    return __popc(v);
#else
    return __builtin_popcount(v);
#endif
}
static __host__ __device__ __forceinline__ float h2f(uint32_t h) {
    return __half2float(__ushort_as_half((unsigned short)h));
}
static __host__ __device__ __forceinline__ uint32_t ld32(const uint8_t *p) { return *(const uint32_t *)p; }
static __host__ __device__ __forceinline__ int4 ld128(const uint8_t *p) { return *(const int4 *)p; }
/* ---- IQ2_XXS by PRMT selectors (also the one-token MoE kernels, cuda_moe_decode_units.cuh) ----
 * One 32-bit PRMT selector per grid entry (nibble k = 0/1/2 for the grid byte 8/25/43 of element k)
 * OR one 32-bit sign selector per 7-bit sign index (nibble k gets 4 when element k is negative, the
 * 8th sign being the parity bit) picks each element from the byte pool {8, 25, 43, 0, -8, -25, -43,
 * 0}: two PRMTs give the signed grid words, two dp4a their sum with the activations (exact). */
#define MD_IQ2_POS 0x002b1908u /* bytes 0..3 of the PRMT pool: 8, 25, 43, 0 */
#define MD_IQ2_NEG 0x00d5e7f8u /* bytes 4..7: -8, -25, -43, 0 */

/* PRMT default mode (PTX prmt.b32): result byte n = byte (s_n & 7) of {b:a}, sign-replicated when
 * s_n & 8; only the low 16 bits of s are used. */
static __host__ __device__ __forceinline__ uint32_t md_prmt(uint32_t a, uint32_t b, uint32_t s) {
#ifdef __CUDA_ARCH__
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(s));
    return d;
#else
    const uint64_t pool = ((uint64_t)b << 32) | a;
    uint32_t d = 0;
    for (int n = 0; n < 4; n++) {
        const unsigned sn = (s >> (4 * n)) & 15u;
        uint32_t v = (uint32_t)(pool >> (8 * (sn & 7u))) & 0xffu;
        if (sn & 8u) v = (v & 0x80u) ? 0xffu : 0u;
        d |= v << (8 * n);
    }
    return d;
#endif
}
/* ---- tables (built on the host once, replicated per CTA in shared memory) ---- */
static inline uint32_t md_iq2_grid_sel(uint64_t grid_entry) {
    uint32_t s = 0;
    for (int k = 0; k < 8; k++) {
        const uint32_t v = (uint32_t)(grid_entry >> (8 * k)) & 0xffu;
        s |= (v == 0x08u ? 0u : v == 0x19u ? 1u : 2u) << (4 * k);
    }
    return s;
}
static inline uint32_t md_iq2_sign_sel(uint8_t ksigns) {
    uint32_t s = 0;
    for (int k = 0; k < 8; k++) s |= ((ksigns >> k) & 1u) << (4 * k + 2);
    return s;
}
/* A grid entry whose bytes are not all in {8, 25, 43} cannot be expressed (never the case for the
 * standard table; the context init checks it). */
static inline bool md_iq2_grid_ok(uint64_t grid_entry) {
    for (int k = 0; k < 8; k++) {
        const uint32_t v = (uint32_t)(grid_entry >> (8 * k)) & 0xffu;
        if (v != 0x08u && v != 0x19u && v != 0x2bu) return false;
    }
    return true;
}

/* Byte offset of entry ((x >> SH) & (MASK)) of a table whose entries are 1 << LG bytes apart:
 * one shift and one AND (the shifts are compile-time constants). */
template <int SH, int LG, uint32_t MASK>
static __host__ __device__ __forceinline__ uint32_t md_ent(uint32_t x) {
    return (SH >= LG ? x >> (SH - LG) : x << (LG - SH)) & (MASK << LG);
}
/* ---- unit dot products (shared-memory weights of RPL rows, one activation unit) ---- */

/* Q8_0 block u: 34 bytes at 34u (2-byte aligned). Nine aligned words cover it; the qs words are
 * re-aligned with a funnel shift (16 bits when the block starts on a word, 32 otherwise). */
template <int RPL>
static __host__ __device__ __forceinline__ void unit_q8_0(const uint8_t *wr, int rb, int u,
                                                          const uint8_t *act, float *acc) {
    const uint8_t *ab = act + u * 48;
    const int4 xa = ld128(ab), xb = ld128(ab + 16);
    const float ad = *(const float *)(ab + 32);
    const int a[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
    const int off = u * 34;
    const bool odd = (off & 2) != 0;
    const unsigned sh = odd ? 32u : 16u;
    const uint8_t *wb = wr + (off & ~3);
    MV_UNROLL
    for (int j = 0; j < RPL; j++) {
        const uint32_t *wp = (const uint32_t *)(wb + j * rb);
        uint32_t w[9];
        MV_UNROLL
        for (int k = 0; k < 9; k++) w[k] = wp[k];
        const uint32_t d16 = odd ? (w[0] >> 16) : (w[0] & 0xffffu);
        int s0 = 0, s1 = 0; /* two dp4a chains of 4 (integer: the same sum) */
        MV_UNROLL
        for (int k = 0; k < 8; k += 2) {
            s0 = mv_dp4a((int)mv_fshr(w[k], w[k + 1], sh), a[k], s0);
            s1 = mv_dp4a((int)mv_fshr(w[k + 1], w[k + 2], sh), a[k + 1], s1);
        }
        const int s = s0 + s1;
        acc[j] = fmaf(h2f(d16) * ad, (float)s, acc[j]);
    }
}

/* IQ2_XXS sub-block u (32 elements): a0 = 4 grid indices, a1 = 4 x 7 sign bits | scale << 28. Two
 * decoders of the same exact integer sum g*s*q (the float expression after it is shared, so both give
 * the same bits):
 *   V = 0, sign masks: with m = 0x00/0xff per byte, sum g*s*q = dp4a(g, q ^ m) - dp4a(g, m); G and M
 *     are the 16-copy grid and mask tables (16 table wavefronts per warp and row);
 *   V = 1, PRMT selectors (DSV4_CUDA_MV_IQ2=sel, the default): entry e at byte (e << LG) | loff of TG
 *     (grid selectors, 256) and TS (sign selectors, 128), OR-ed, pick the signed grid bytes; one dp4a per
 *     word. The kernel keeps 32 copies (LG = 7, loff = 4 * lane: one bank per lane), 8 wavefronts. */
struct mv_iq2_tabs {
    const uint2 *G, *M;     /* V = 0 (already offset by the lane's copy) */
    const uint8_t *TG, *TS; /* V = 1 */
    uint32_t loff;
};
/* The signed grid words picked by the four OR-ed selectors, times the activations: two dp4a chains of 4
 * (integer: the same sum in any order). */
static __host__ __device__ __forceinline__ int mv_iq2_sel_dots(const uint32_t (&sel)[4], const int (&q)[8]) {
    int s0 = 0, s1 = 0;
    MV_UNROLL
    for (int l = 0; l < 4; l++) {
        s0 = mv_dp4a((int)md_prmt(MD_IQ2_POS, MD_IQ2_NEG, sel[l]), q[2 * l], s0);
        s1 = mv_dp4a((int)md_prmt(MD_IQ2_POS, MD_IQ2_NEG, sel[l] >> 16), q[2 * l + 1], s1);
    }
    return s0 + s1;
}
#ifdef __CUDA_ARCH__
/* The device form of the LG = 7 selector lookups (session 14: the SASS spent shift + LOP3 + an add of
 * the table base on every lookup): a grid entry's address is one PRMT (index byte l to byte 0) and one
 * LEA ((index << 7) + base + 4 lane); a sign entry's is the 7-bit field masked in place (md_ent) plus
 * base + 4 lane. The same table words are read and the same PRMT / dp4a operations follow: the same
 * integer sum. (The PRMT pool's low word is still re-materialised before most PRMTs: ptxas sees
 * through an opaque register under the kernel's 64-register bound.) */
static __device__ __forceinline__ uint32_t mv_lds32(uint32_t addr) {
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(addr));
    return v;
}
template <int L> static __device__ __forceinline__ uint32_t mv_byte_lo(uint32_t x) {
    uint32_t d;
    asm("prmt.b32 %0, %1, 0, %2;" : "=r"(d) : "r"(x), "n"(0x4440 | L));
    return d;
}
/* base + (7-bit field of x at bit SH) * 128, written as mask-then-shift in PTX so that the mask and
 * the shift-add stay two instructions (LOP3, then LEA / LEA.HI / IADD) */
template <int SH> static __device__ __forceinline__ uint32_t mv_field_addr(uint32_t x, uint32_t base) {
    uint32_t d;
    if (SH <= 7)
        asm("{ .reg .b32 t; and.b32 t, %1, %2; shl.b32 t, t, %3; add.u32 %0, t, %4; }"
            : "=r"(d)
            : "r"(x), "n"(0x7fu << SH), "n"(7 - SH), "r"(base));
    else
        asm("{ .reg .b32 t; and.b32 t, %1, %2; shr.u32 t, t, %3; add.u32 %0, t, %4; }"
            : "=r"(d)
            : "r"(x), "n"(0x7fu << SH), "n"(SH - 7), "r"(base));
    return d;
}
static __device__ __forceinline__ void mv_iq2_sel_fast(uint32_t a0, uint32_t a1, const mv_iq2_tabs &t,
                                                       uint32_t (&sel)[4]) {
    const uint32_t g = (uint32_t)__cvta_generic_to_shared(t.TG) + t.loff;
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(t.TS) + t.loff;
    sel[0] = mv_lds32(g + (mv_byte_lo<0>(a0) << 7)) | mv_lds32(mv_field_addr<0>(a1, s));
    sel[1] = mv_lds32(g + (mv_byte_lo<1>(a0) << 7)) | mv_lds32(mv_field_addr<7>(a1, s));
    sel[2] = mv_lds32(g + (mv_byte_lo<2>(a0) << 7)) | mv_lds32(mv_field_addr<14>(a1, s));
    sel[3] = mv_lds32(g + (mv_byte_lo<3>(a0) << 7)) | mv_lds32(mv_field_addr<21>(a1, s));
}
#endif
template <int V, int LG>
static __host__ __device__ __forceinline__ int iq2_sub_sum(uint32_t a0, uint32_t a1, const int (&q)[8],
                                                           const mv_iq2_tabs &t) {
    if (V == 0) {
        int sp = 0, sn = 0;
        MV_UNROLL
        for (int l = 0; l < 4; l++) {
            const uint2 g = t.G[((a0 >> (8 * l)) & 255u) * 16];
            const uint2 m = t.M[((a1 >> (7 * l)) & 127u) * 16];
            sp = mv_dp4a((int)g.x, q[2 * l] ^ (int)m.x, sp);
            sp = mv_dp4a((int)g.y, q[2 * l + 1] ^ (int)m.y, sp);
            sn = mv_dp4a((int)g.x, (int)m.x, sn);
            sn = mv_dp4a((int)g.y, (int)m.y, sn);
        }
        return sp - sn;
    }
    uint32_t sel[4];
#ifdef __CUDA_ARCH__
    if (LG == 7) { /* the kernels' 32-copy tables: shared addresses, see mv_iq2_sel_fast */
        mv_iq2_sel_fast(a0, a1, t, sel);
        return mv_iq2_sel_dots(sel, q);
    }
#endif
    sel[0] =
        ld32(t.TG + (md_ent<0, LG, 255u>(a0) | t.loff)) | ld32(t.TS + (md_ent<0, LG, 127u>(a1) | t.loff));
    sel[1] =
        ld32(t.TG + (md_ent<8, LG, 255u>(a0) | t.loff)) | ld32(t.TS + (md_ent<7, LG, 127u>(a1) | t.loff));
    sel[2] =
        ld32(t.TG + (md_ent<16, LG, 255u>(a0) | t.loff)) | ld32(t.TS + (md_ent<14, LG, 127u>(a1) | t.loff));
    sel[3] =
        ld32(t.TG + (md_ent<24, LG, 255u>(a0) | t.loff)) | ld32(t.TS + (md_ent<21, LG, 127u>(a1) | t.loff));
    return mv_iq2_sel_dots(sel, q);
}
template <int RPL, int V, int LG>
static __host__ __device__ __forceinline__ void unit_iq2(const uint8_t *wr, int rb, int u, const uint8_t *act,
                                                         const mv_iq2_tabs &t, float *acc) {
    const int b = u >> 3, sb = u & 7;
    const uint8_t *ab = act + b * 400 + sb * 48;
    const int4 xa = ld128(ab), xb = ld128(ab + 16);
    const float ad = *(const float *)(ab + 32) * 0.125f;
    const int q[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
    const int off = b * 66 + 2 + sb * 8;
    const unsigned sh = (off & 2) ? 16u : 0u;
    const uint8_t *wb = wr + (off & ~3);
    const uint8_t *db = wr + b * 66;
    MV_UNROLL
    for (int j = 0; j < RPL; j++) {
        const uint32_t *wp = (const uint32_t *)(wb + j * rb);
        const uint32_t w0 = wp[0], w1 = wp[1], w2 = wp[2];
        const uint32_t a0 = mv_fshr(w0, w1, sh), a1 = mv_fshr(w1, w2, sh);
        const uint32_t d16 = *(const uint16_t *)(db + j * rb);
        const int s = iq2_sub_sum<V, LG>(a0, a1, q, t);
        const int ls = 2 * (int)(a1 >> 28) + 1;
        acc[j] = fmaf(h2f(d16) * ad, (float)(s * ls), acc[j]);
    }
}
template <int RPL>
static __host__ __device__ __forceinline__ void unit_iq2_xxs(const uint8_t *wr, int rb, int u,
                                                             const uint8_t *act, const uint2 *G,
                                                             const uint2 *M, float *acc) {
    const mv_iq2_tabs t = {G, M, nullptr, nullptr, 0u};
    unit_iq2<RPL, 0, 0>(wr, rb, u, act, t, acc);
}
template <int RPL, int LG>
static __host__ __device__ __forceinline__ void
unit_iq2_xxs_sel(const uint8_t *wr, int rb, int u, const uint8_t *act, const uint8_t *TG, const uint8_t *TS,
                 uint32_t loff, float *acc) {
    const mv_iq2_tabs t = {nullptr, nullptr, TG, TS, loff};
    unit_iq2<RPL, 1, LG>(wr, rb, u, act, t, acc);
}

/* Q2_K quarter u = 4b + 2h + s: 16 qs bytes (qs[32h+16s..]) x 4 bit planes j, scales[8h+2j+s].
 * The activations of one quarter: the 16 int8 of chunk 4h+j at offset 16s for each plane j, their
 * Q8_K bsums (8h+2j+s) and the superblock's d. */
struct q2k_act {
    int4 xq[4];
    int bs[4];
    float ad;
};
/* ... from the kernel's shared-memory re-layout (mv_act_map) */
static __host__ __device__ __forceinline__ void q2k_act_smem(const uint8_t *act, int u, q2k_act *a) {
    const int b = u >> 2, h = (u >> 1) & 1, s = u & 1;
    const uint8_t *ab = act + b * 400;
    a->ad = *(const float *)(ab + 32);
    MV_UNROLL
    for (int j = 0; j < 4; j++) {
        const uint8_t *cj = ab + (4 * h + j) * 48;
        a->xq[j] = ld128(cj + 16 * s);
        a->bs[j] = *(const int16_t *)(cj + 36 + 2 * s);
    }
}
/* ... straight from the dsv4_q8_k blocks (292 bytes: f32 d, 256 qs, 16 int16 bsums; 4-byte aligned) */
static __host__ __device__ __forceinline__ void q2k_act_q8k(const uint8_t *x, int u, q2k_act *a) {
    const int b = u >> 2, h = (u >> 1) & 1, s = u & 1;
    const uint8_t *blk = x + b * 292;
    a->ad = *(const float *)blk;
    MV_UNROLL
    for (int j = 0; j < 4; j++) {
        const uint8_t *q = blk + 4 + (4 * h + j) * 32 + 16 * s;
        a->xq[j] = make_int4((int)ld32(q), (int)ld32(q + 4), (int)ld32(q + 8), (int)ld32(q + 12));
        a->bs[j] = *(const int16_t *)(blk + 260 + 2 * (2 * (4 * h + j) + s));
    }
}
/* One row's quarter (superblock blk, quarter i = 2h + s) times its activations, added to *acc. The
 * quarter's four scale bytes (8h + 2j + s: bytes s and 2 + s of the scale words 2h, 2h + 1) are
 * gathered into one word by one PRMT; plane j is masked in place (no per-word shift), so its dp4a sum is
 * 4^j times the true one, shifted off exactly. The integers are quant_dot_q2_k's, the float term the
 * pipeline kernel's since session 3. */
static __host__ __device__ __forceinline__ void q2k_quarter_g(const uint8_t *blk, int i, const q2k_act &a,
                                                              float *acc) {
    const int h = i >> 1, s = i & 1;
    const uint32_t *qp = (const uint32_t *)(blk + 16 + 16 * i);
    const uint32_t q0 = qp[0], q1 = qp[1], q2 = qp[2], q3 = qp[3];
    const uint32_t sc4 = md_prmt(ld32(blk + 8 * h), ld32(blk + 8 * h + 4), s ? 0x7531u : 0x6420u);
    const uint32_t lo = sc4 & 0x0f0f0f0fu, hi = (sc4 >> 4) & 0x0f0f0f0fu;
    const uint32_t dm = ld32(blk + 80);
    int isum = 0, summs = 0;
    MV_UNROLL
    for (int j = 0; j < 4; j++) {
        const uint32_t m = 0x03030303u << (2 * j);
        int sub = mv_dp4a_us(q0 & m, a.xq[j].x, 0);
        sub = mv_dp4a_us(q1 & m, a.xq[j].y, sub);
        sub = mv_dp4a_us(q2 & m, a.xq[j].z, sub);
        sub = mv_dp4a_us(q3 & m, a.xq[j].w, sub);
        isum += (int)md_prmt(lo, 0u, 0x4440u | (uint32_t)j) * (sub >> (2 * j));
        summs += (int)md_prmt(hi, 0u, 0x4440u | (uint32_t)j) * a.bs[j];
    }
    *acc += (a.ad * h2f(dm & 0xffffu)) * (float)isum - (a.ad * h2f(dm >> 16)) * (float)summs;
}
template <int RPL>
static __host__ __device__ __forceinline__ void unit_q2_k(const uint8_t *wr, int rb, int u,
                                                          const uint8_t *act, float *acc) {
    q2k_act a;
    q2k_act_smem(act, u, &a);
    MV_UNROLL
    for (int r = 0; r < RPL; r++) q2k_quarter_g(wr + r * rb + (u >> 2) * 84, u & 3, a, &acc[r]);
}

/* The 6-bit scales and mins of a Q4_K superblock's sub-blocks 2c and 2c+1 (c = 0..3): hd holds the
 * superblock's first 16 bytes (d, dmin, then the 12 packed scale bytes as words y, z, w), sh = 16 *
 * (c & 1) selects the byte pair, lo = c < 2 the direct (not split) encoding. */
static __host__ __device__ __forceinline__ void q4k_scales_pair(const int4 hd, unsigned sh, bool lo,
                                                                uint32_t *sc0, uint32_t *m0, uint32_t *sc1,
                                                                uint32_t *m1) {
    const uint32_t S0 = (uint32_t)hd.y >> sh, S1 = (uint32_t)hd.z >> sh, S2 = (uint32_t)hd.w >> sh;
    if (lo) {
        *sc0 = S0 & 63u;
        *m0 = S1 & 63u;
        *sc1 = (S0 >> 8) & 63u;
        *m1 = (S1 >> 8) & 63u;
    } else {
        *sc0 = (S2 & 15u) | (((S0 >> 6) & 3u) << 4);
        *m0 = ((S2 >> 4) & 15u) | (((S1 >> 6) & 3u) << 4);
        *sc1 = ((S2 >> 8) & 15u) | (((S0 >> 14) & 3u) << 4);
        *m1 = ((S2 >> 12) & 15u) | (((S1 >> 14) & 3u) << 4);
    }
}
/* Q4_K quarter u = 4b + c: qs[32c..32c+31], low nibbles = sub-block 2c, high = 2c+1. */
template <int RPL>
static __host__ __device__ __forceinline__ void unit_q4_k(const uint8_t *wr, int rb, int u,
                                                          const uint8_t *act, float *acc) {
    const int b = u >> 2, c = u & 3;
    const uint8_t *c0 = act + b * 400 + 2 * c * 48, *c1 = c0 + 48;
    const int4 x0a = ld128(c0), x0b = ld128(c0 + 16), x1a = ld128(c1), x1b = ld128(c1 + 16);
    const float ad = *(const float *)(c0 + 32);
    const uint32_t bw0 = ld32(c0 + 36), bw1 = ld32(c1 + 36);
    const int bs0 = (int)(int16_t)(bw0 & 0xffffu) + (int)(int16_t)(bw0 >> 16);
    const int bs1 = (int)(int16_t)(bw1 & 0xffffu) + (int)(int16_t)(bw1 >> 16);
    const int x0[8] = {x0a.x, x0a.y, x0a.z, x0a.w, x0b.x, x0b.y, x0b.z, x0b.w};
    const int x1[8] = {x1a.x, x1a.y, x1a.z, x1a.w, x1b.x, x1b.y, x1b.z, x1b.w};
    const unsigned sh = 16u * (unsigned)(c & 1); /* byte (2c)&3 of a scales word */
    const bool lo = c < 2;
    MV_UNROLL
    for (int r = 0; r < RPL; r++) {
        const uint8_t *blk = wr + r * rb + b * 144;
        const int4 hd = ld128(blk);
        const int4 qa = ld128(blk + 16 + 32 * c), qb = ld128(blk + 32 + 32 * c);
        uint32_t sc0, m0, sc1, m1;
        q4k_scales_pair(hd, sh, lo, &sc0, &m0, &sc1, &m1);
        const uint32_t q[8] = {(uint32_t)qa.x, (uint32_t)qa.y, (uint32_t)qa.z, (uint32_t)qa.w,
                               (uint32_t)qb.x, (uint32_t)qb.y, (uint32_t)qb.z, (uint32_t)qb.w};
        int s0 = 0, s1 = 0;
        MV_UNROLL
        for (int k = 0; k < 8; k++) {
            s0 = mv_dp4a((int)(q[k] & 0x0f0f0f0fu), x0[k], s0);
            s1 = mv_dp4a((int)((q[k] >> 4) & 0x0f0f0f0fu), x1[k], s1);
        }
        const int isum = (int)sc0 * s0 + (int)sc1 * s1;
        const int summs = (int)m0 * bs0 + (int)m1 * bs1;
        const uint32_t dm = (uint32_t)hd.x;
        acc[r] += (ad * h2f(dm & 0xffffu)) * (float)isum - (ad * h2f(dm >> 16)) * (float)summs;
    }
}

/* F16 unit u: 8 halves (16 bytes) against 8 f32. */
template <int RPL>
static __host__ __device__ __forceinline__ void unit_f16(const uint8_t *wr, int rb, int u, const uint8_t *act,
                                                         float *acc) {
    const float4 xa = *(const float4 *)(act + u * 48), xb = *(const float4 *)(act + u * 48 + 16);
    MV_UNROLL
    for (int r = 0; r < RPL; r++) {
        const uint4 wv = *(const uint4 *)(wr + r * rb + u * 16);
        const float w0 = h2f(wv.x & 0xffffu), w1 = h2f(wv.x >> 16), w2 = h2f(wv.y & 0xffffu),
                    w3 = h2f(wv.y >> 16);
        const float w4 = h2f(wv.z & 0xffffu), w5 = h2f(wv.z >> 16), w6 = h2f(wv.w & 0xffffu),
                    w7 = h2f(wv.w >> 16);
        float a = acc[r];
        a = fmaf(w0, xa.x, a);
        a = fmaf(w1, xa.y, a);
        a = fmaf(w2, xa.z, a);
        a = fmaf(w3, xa.w, a);
        a = fmaf(w4, xb.x, a);
        a = fmaf(w5, xb.y, a);
        a = fmaf(w6, xb.z, a);
        a = fmaf(w7, xb.w, a);
        acc[r] = a;
    }
}

/* ---- activation re-layout into shared memory ----
 * Copy i of mv_act_ncopies moves one 4-byte word from x + *src to act + *dst:
 *   Q8_0: 9 words per 36-byte block (d -> +32, qs -> +0..31 of a 48-byte slot);
 *   F16:  one f32 each, 8 per 48-byte slot;
 *   Q8_K: 80 per 292-byte superblock (d replicated into the 8 slots' +32, 64 qs words, 8 bsums
 *         pairs -> +36). The kernel issues these as 4-byte cp.async (no serial prologue). */
template <int F> static __host__ __device__ __forceinline__ int mv_act_ncopies(int in) {
    return F == MV_Q8_0 ? in / 32 * 9 : F == MV_F16 ? in : in / 256 * 80;
}
template <int F> static __host__ __device__ __forceinline__ void mv_act_map(int i, int *src, int *dst) {
    if (F == MV_Q8_0) {
        const int b = i / 9, k = i - 9 * b;
        *src = 36 * b + 4 * k;
        *dst = 48 * b + (k == 0 ? 32 : 4 * (k - 1));
    } else if (F == MV_F16) {
        *src = 4 * i;
        *dst = 48 * (i >> 3) + 4 * (i & 7);
    } else {
        const int b = i / 80, k = i - 80 * b;
        if (k < 8) {
            *src = 292 * b;
            *dst = 400 * b + 48 * k + 32;
        } else if (k < 72) {
            const int w = k - 8;
            *src = 292 * b + 4 + 4 * w;
            *dst = 400 * b + 48 * (w >> 3) + 4 * (w & 7);
        } else {
            *src = 292 * b + 260 + 4 * (k - 72);
            *dst = 400 * b + 48 * (k - 72) + 36;
        }
    }
}
/* Synchronous re-layout (a slot change with per-slot activations, and the host emulation):
 * 4 independent loads per thread in flight before the stores. */
template <int F>
static inline __host__ __device__ void mv_load_act(const mv_params &p, uint8_t *act, const uint8_t *x,
                                                   int tid) {
    const int n = mv_act_ncopies<F>(p.in);
    for (int i0 = tid; i0 < n; i0 += 4 * MV_THREADS) {
        uint32_t v[4] = {0u, 0u, 0u, 0u};
        int d[4];
        MV_UNROLL
        for (int k = 0; k < 4; k++) {
            const int i = i0 + k * MV_THREADS;
            int sidx = 0;
            d[k] = -1;
            if (i < n) {
                mv_act_map<F>(i, &sidx, &d[k]);
                v[k] = ld32(x + sidx);
            }
        }
        MV_UNROLL
        for (int k = 0; k < 4; k++)
            if (d[k] >= 0) *(uint32_t *)(act + d[k]) = v[k];
    }
}

/* Grid entries and sign masks, replicated 16 times: entry e of copy l at (16 e + l) * 8, so the
 * 16 lanes of a half-warp (one 64-bit access phase) always hit distinct bank pairs. */
/* The sign masks need no loads (pure ALU, overlaps the first weight stage's latency). */
static inline __host__ __device__ void mv_build_iq2_masks(uint8_t *lut, int tid) {
    uint2 *M = (uint2 *)(lut + MV_IQ2_GRID_BYTES);
    for (int i = tid; i < 128 * 16; i += MV_THREADS) {
        const uint32_t s = (uint32_t)(i >> 4);
        const uint32_t kb = s | ((uint32_t)(mv_popc(s) & 1) << 7);
        uint32_t lo = 0, hi = 0;
        MV_UNROLL
        for (int k = 0; k < 4; k++) {
            lo |= ((kb >> k) & 1u) ? 0xffu << (8 * k) : 0u;
            hi |= ((kb >> (k + 4)) & 1u) ? 0xffu << (8 * k) : 0u;
        }
        M[i] = make_uint2(lo, hi);
    }
}
/* Synchronous build (host emulation); the kernel copies the grid part with 8-byte cp.async. */
static inline __host__ __device__ void mv_build_iq2_lut(const uint64_t *grid, uint8_t *lut, int tid) {
    uint2 *G = (uint2 *)lut;
    for (int i = tid; i < 256 * 16; i += MV_THREADS) {
        const uint64_t v = grid[i >> 4];
        G[i] = make_uint2((uint32_t)v, (uint32_t)(v >> 32));
    }
    mv_build_iq2_masks(lut, tid);
}

/* The selector tables in shared memory, 32 copies (unit_iq2_xxs_sel, LG = 7): entry i of tab (256
 * grid selectors, then 128 sign selectors) fills bytes [128 i, 128 i + 128) of lut, so the sign table
 * starts at MV_IQ2_GRID_BYTES. Consecutive threads write consecutive 16-byte chunks (no conflicts). */
static inline __host__ __device__ void mv_build_iq2_sel(const uint32_t *tab, uint8_t *lut, int tid) {
    for (int i = tid; i < 384 * 8; i += MV_THREADS) {
        const uint32_t v = tab[i >> 3];
        *(uint4 *)(lut + 16 * i) = make_uint4(v, v, v, v);
    }
}

/* ---- IQ2_XXS rows streamed per warp (cuda_mv_stream.cuh) ----
 * One 64 KB selector table per CTA at a 64 KB-aligned shared address, 256 lines of 256 bytes: line e holds
 * grid selector e in words 0..31 (one copy per lane) and, for e < 128, sign selector e in words 32..63. Lane
 * l's table register tg = base | 4 l (base: the table's shared address, its low 16 bits zero), so a grid
 * entry's address is one PRMT (the index byte to byte 1, tg's bytes 0, 2 and 3 kept) and a sign entry's a
 * shift and one LOP3 ((field << 8) & 0x7f00 | tg | 128). Session 17, call 1 (SASS of the kernel): with an
 * unaligned table every lookup paid one more IADD for the base, and the PRMT pool's low word was
 * re-materialised from a uniform register before most PRMTs; so the pool word is read from the table
 * (line 255, word 32: an unused sign slot), which ptxas cannot re-materialise. The words are
 * mv_build_iq2_sel's, so the sums are unit_iq2's (V = 1). */
#define MV_IQ2S_TABLE_BYTES (256 * 256)
#define MV_IQ2S_POS_OFF (255 * 256 + 128) /* MD_IQ2_POS, for the kernel's pool register */
static inline __host__ __device__ void mv_build_iq2s_table(const uint32_t *tab, uint8_t *lut, int tid,
                                                           int nthreads) {
    for (int i = tid; i < 256 * 16; i += nthreads) { /* 16 bytes per step: 16 steps a line */
        const int e = i >> 4, w = (i & 15) * 4;      /* first word of the step */
        const uint32_t v = w < 32 ? tab[e] : e < 128 ? tab[256 + e] : e == 255 && w == 32 ? MD_IQ2_POS : 0u;
        *(uint4 *)(lut + 16 * i) = make_uint4(v, v, v, v);
    }
}
/* mv_build_iq2s_table for NT threads (NT % 16 == 0, 4096 % NT == 0) with every table load issued before the
 * first store: a thread's 16-byte steps all have the same word (NT is a multiple of 16) and lines e0 + s NT /
 * 16, so its loads need no branch. Why (session 32, from the PTX): the generic loop's loads sat behind
 * branches, one L2 round trip after another (8 a thread at NT = 512), and a CTA that starts late (its SM
 * still busy with the kernel before) paid them in front of its first group. The same bytes (cuda_matvec_emu
 * compares the two). */
template <int NT>
static inline __host__ __device__ void mv_build_iq2s_table_nt(const uint32_t *tab, uint8_t *lut, int tid) {
    constexpr int STEPS = 4096 / NT;
    const int w = (tid & 15) * 4, e0 = tid >> 4;
    uint32_t v[STEPS];
    MV_UNROLL
    for (int s = 0; s < STEPS; s++) {
        const int e = e0 + s * (NT / 16);
        v[s] = tab[w < 32 ? e : 256 + (e & 127)];
    }
    MV_UNROLL
    for (int s = 0; s < STEPS; s++) {
        const int e = e0 + s * (NT / 16);
        const uint32_t x = w < 32 || e < 128 ? v[s] : e == 255 && w == 32 ? MD_IQ2_POS : 0u;
        *(uint4 *)(lut + 16 * (tid + NT * s)) = make_uint4(x, x, x, x);
    }
}
/* mvs_iq2_kernel's CTA: 16 warps, one table, the warps' rings around it */
#define MVI_WARPS 16
#define MVI_THREADS (MVI_WARPS * 32)
/* ring_bytes: one warp's ring. Returns the dynamic shared memory the layout needs (+ 16: a row's last
 * sub-block reads the word after it); *t: the table's offset in the block, *nb: rings before it. */
static __host__ __device__ __forceinline__ uint32_t mvi_layout(uint32_t block_base, uint32_t ring_bytes,
                                                               uint32_t *t, uint32_t *nb) {
    *t = (0x10000u - (block_base & 0xffffu)) & 0xffffu;
    uint32_t n = *t / ring_bytes;
    if (n > MVI_WARPS) n = MVI_WARPS;
    *nb = n;
    return *t + MV_IQ2S_TABLE_BYTES + (MVI_WARPS - n) * ring_bytes + 16u;
}

/* Lane l of a row (in = 1024 SPL, SPL = 2 or 4 sub-blocks per lane) takes the SPL consecutive sub-blocks
 * sb0 .. sb0 + SPL - 1 of superblock b = l / (8 / SPL), sb0 = (l % (8 / SPL)) SPL: its bytes are one span
 * (qs at 66 b + 2 + 8 sb0), its scale d is loaded and multiplied once, and the sub-blocks' integer sums
 * (sumi ls) add up exactly as the CPU's bsum does (quant_dot_iq2_xxs) before the one float term. Session
 * 17: with lane l taking sub-blocks l, l + 32, ... (mv_kernel's units) every sub-block paid d's load, its
 * conversion, two multiplies and a conversion of its integer (~5 of ~60 instructions), and the lanes'
 * 8-byte pieces 8.25 bytes apart shared banks; these spans, 33 bytes apart, hit 32 distinct banks. */
struct iq2s_lane {
    uint32_t woff, doff, sh, tg, ts; /* span's 4-aligned word, d's offset, funnel shift; table bits */
};
template <int SPL>
static __host__ __device__ __forceinline__ void iq2s_lane_init(int lane, uint32_t base, iq2s_lane *l) {
    const uint32_t b = (uint32_t)lane / (8u / SPL), sb0 = (uint32_t)lane % (8u / SPL) * SPL;
    const uint32_t at = 66u * b + 2u + 8u * sb0;
    l->woff = at & ~3u;
    l->doff = 66u * b;
    l->sh = (at & 2u) ? 16u : 0u;
    l->tg = base | 4u * (uint32_t)lane;
    l->ts = l->tg | 128u;
}
/* The lane's activations: the 8 SPL words of its span of the Q8_K block b (292 bytes, 4-byte aligned)
 * and that block's d / 8. */
template <int SPL> struct iq2s_act {
    int q[8 * SPL];
    float ad;
};
template <int SPL>
static __host__ __device__ __forceinline__ void iq2s_act_q8k(const uint8_t *x, int lane, iq2s_act<SPL> *a) {
    const int b = lane / (8 / SPL), sb0 = lane % (8 / SPL) * SPL;
    const uint8_t *blk = x + b * 292;
    a->ad = *(const float *)blk * 0.125f;
    MV_UNROLL
    for (int k = 0; k < 8 * SPL; k++) a->q[k] = (int)ld32(blk + 4 + 32 * sb0 + 4 * k);
}
/* (x & m) | y in one LOP3 */
static __host__ __device__ __forceinline__ uint32_t mv_andor(uint32_t x, uint32_t m, uint32_t y) {
#ifdef __CUDA_ARCH__
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(d) : "r"(x), "r"(m), "r"(y));
    return d;
#else
    return (x & m) | y;
#endif
}
/* Table word at address a (device: a shared-memory address; host: base 0, lut + a). */
static __host__ __device__ __forceinline__ uint32_t iq2s_word(const uint8_t *lut, uint32_t a) {
#ifdef __CUDA_ARCH__
    (void)lut;
    return mv_lds32(a);
#else
    return ld32(lut + (a & 0xffffu));
#endif
}
/* One sub-block's signed sum Σ sign g q (its 8 bytes a0, a1) with its scale: sumi (2 (a1 >> 28) + 1).
 * A grid selector's bits (0, 1 of each nibble) and a sign selector's (bit 2) are disjoint, so their OR is
 * their sum (which ptxas may issue to the IMAD pipe: session 17, call 3, the integer ALU is the busiest
 * pipe). pos: the PRMT pool's low word MD_IQ2_POS. */
static __host__ __device__ __forceinline__ int
iq2s_sub_isum(uint32_t a0, uint32_t a1, const int *q, const iq2s_lane &l, const uint8_t *lut, uint32_t pos) {
    uint32_t sel[4];
    sel[0] = iq2s_word(lut, md_prmt(a0, l.tg, 0x7604u)) + iq2s_word(lut, mv_andor(a1 << 8, 0x7f00u, l.ts));
    sel[1] = iq2s_word(lut, md_prmt(a0, l.tg, 0x7614u)) + iq2s_word(lut, mv_andor(a1 << 1, 0x7f00u, l.ts));
    sel[2] = iq2s_word(lut, md_prmt(a0, l.tg, 0x7624u)) + iq2s_word(lut, mv_andor(a1 >> 6, 0x7f00u, l.ts));
    sel[3] = iq2s_word(lut, md_prmt(a0, l.tg, 0x7634u)) + iq2s_word(lut, mv_andor(a1 >> 13, 0x7f00u, l.ts));
    int s = 0;
    MV_UNROLL
    for (int k = 0; k < 4; k++) {
        s = mv_dp4a((int)md_prmt(pos, MD_IQ2_NEG, sel[k]), q[2 * k], s);
        s = mv_dp4a((int)md_prmt(pos, MD_IQ2_NEG, sel[k] >> 16), q[2 * k + 1], s);
    }
    return s * (2 * (int)(a1 >> 28) + 1);
}
/* The lane's integer sum over its SPL sub-blocks of the row at wr (exact: |.| < 2^24). Reads up to 4 bytes
 * past the row (the funnel shift's last word): the buffer must have them. */
template <int SPL>
static __host__ __device__ __forceinline__ int iq2s_span_isum(const uint8_t *wr, const iq2s_lane &l,
                                                              const iq2s_act<SPL> &a, const uint8_t *lut,
                                                              uint32_t pos) {
    const uint32_t *wp = (const uint32_t *)(wr + l.woff);
    uint32_t w[2 * SPL + 1];
    MV_UNROLL
    for (int k = 0; k <= 2 * SPL; k++) w[k] = wp[k];
    int bsum = 0;
    MV_UNROLL
    for (int j = 0; j < SPL; j++)
        bsum += iq2s_sub_isum(mv_fshr(w[2 * j], w[2 * j + 1], l.sh),
                              mv_fshr(w[2 * j + 1], w[2 * j + 2], l.sh), a.q + 8 * j, l, lut, pos);
    return bsum;
}
/* The lane's part of the row's dot product: (d x d_x / 8) x its integer sum. */
template <int SPL>
static __host__ __device__ __forceinline__ float
iq2s_span(const uint8_t *wr, const iq2s_lane &l, const iq2s_act<SPL> &a, const uint8_t *lut, uint32_t pos) {
    const int bsum = iq2s_span_isum<SPL>(wr, l, a, lut, pos);
    return h2f(*(const uint16_t *)(wr + l.doff)) * a.ad * (float)bsum;
}

#endif
