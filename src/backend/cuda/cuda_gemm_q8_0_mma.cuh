/* Units of the Q8_0 tensor-core prefill GEMM (cuda_gemm_q8_0_mma.cu), host and device: the
 * shared-memory tile layout, the stage loader, the mma.m16n8k32 fragment reads and the per-block
 * float update. The kernel and the host emulation (tests/cuda/q8_0_mma_emu_check.cu) call these
 * same functions, so the emulation checks the kernel's index arithmetic, not a copy of it.
 *
 * Why it is exact: one MMA k-step of 32 is one Q8_0 block, so the s32 result is the block's exact
 * integer sum. The MMA starts from the bit pattern of 1.5*2^23; |isum| <= 32*128*128 = 2^19, so
 * the s32 read as f32 is exactly 1.5*2^23 + isum and one subtraction gives (float)isum exactly.
 * Each (row, token) then does acc = acc + (f16(d_w) * d_x) * isum with separate roundings, blocks
 * in increasing order from 0.0f: quant/dot_scalar.c's quant_dot_q8_0 bit for bit. */
#ifndef DSV4_CUDA_GEMM_Q8_0_MMA_CUH
#define DSV4_CUDA_GEMM_Q8_0_MMA_CUH

#include <stdint.h>
#include <string.h>

#include "backend/cuda/cuda_gemm_units.cuh" /* gm_f16 (host), gm_bits */
#ifdef __CUDACC__
#include <cuda_fp16.h>
#endif

#define QM_HD __host__ __device__ __forceinline__

enum {
    QM_BM = 128,    /* weight rows per CTA */
    QM_BN = 64,     /* tokens per CTA */
    QM_KB = 8,      /* Q8_0 blocks per pipeline stage */
    QM_WARPS_M = 4, /* warps along the rows */
    QM_WARPS_N = 2, /* warps along the tokens */
    QM_THREADS = 32 * QM_WARPS_M * QM_WARPS_N,
    QM_MT = QM_BM / QM_WARPS_M / 16, /* m16 tiles per warp (2) */
    QM_NT = QM_BN / QM_WARPS_N / 8,  /* n8 tiles per warp (4) */
    /* A weight row's 8 raw blocks (34 B each) back to back: 272 B = 68 words, 68 = 4 mod 32, so
     * the 8 rows x 4 words of a fragment read hit 32 distinct banks. */
    QM_WROW = QM_KB * 34,
    /* A token's 8 activation blocks (36 B) + 16 B pad: 76 words, 76 = 12 mod 32 (conflict free). */
    QM_XROW = QM_KB * 36 + 16,
    QM_WTILE = QM_BM * QM_WROW,
    QM_XTILE = QM_BN * QM_XROW,
    QM_STAGE = QM_WTILE + QM_XTILE,
    QM_STAGES = 2,
    QM_SMEM = QM_STAGES * QM_STAGE, /* 108544 B */
    QM_MAGIC_I = 0x4B400000         /* 1.5 * 2^23 as f32 bits */
};
#define QM_MAGIC_F 12582912.0f

/* One product's operands: w is weight row 0 of the slice, x activation row 0 (dsv4_q8_0_act). */
typedef struct qm_args {
    const uint8_t *w;
    uint64_t row_bytes;
    long long n_out; /* rows */
    long long nb;    /* Q8_0 blocks per row */
    const uint8_t *x;
    uint64_t x_stride; /* bytes between activation rows */
    long long n;       /* tokens */
    float *y;
    uint64_t y_stride; /* floats between output rows (tokens) */
} qm_args;

QM_HD uint32_t qm_ld32(const uint8_t *p) { /* p 4-byte aligned */
#ifdef __CUDA_ARCH__
    return *(const uint32_t *)p;
#else
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
#endif
}
/* bytes 2,3 of lo then bytes 0,1 of hi: the word at a 2 mod 4 address */
QM_HD uint32_t qm_mid32(uint32_t lo, uint32_t hi) {
#ifdef __CUDA_ARCH__
    return __byte_perm(lo, hi, 0x5432);
#else
    return (lo >> 16) | (hi << 16);
#endif
}
QM_HD float qm_f16(const uint8_t *p) { /* p 2-byte aligned; exact */
#ifdef __CUDA_ARCH__
    return __half2float(__ushort_as_half(*(const uint16_t *)p));
#else
    return gm_f16((uint16_t)(p[0] | (p[1] << 8)));
#endif
}
QM_HD float qm_mul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
QM_HD float qm_add(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

/* Weight row `wr` (QM_WROW bytes in shared memory), block j of the stage: int8 k..k+3 (k % 4 == 0).
 * The quants start at 34*j + 2, which is 4-aligned for odd j and 2 mod 4 for even j. */
QM_HD uint32_t qm_w_word(const uint8_t *wr, int j, int k) {
    const int o = 34 * j + 2 + k;
    if ((j & 1) == 0) return qm_mid32(qm_ld32(wr + o - 2), qm_ld32(wr + o + 2));
    return qm_ld32(wr + o);
}
QM_HD uint32_t qm_x_word(const uint8_t *xr, int j, int k) { return qm_ld32(xr + 36 * j + 4 + k); }
QM_HD float qm_x_scale(const uint8_t *xr, int j) { return gm_bits(qm_ld32(xr + 36 * j)); }

/* Fragments of mma.m16n8k32.row.col.s8 for lane (g = lane/4, t = lane%4):
 *   A (16 x 32): a0 = row g, k 4t..4t+3; a1 = row g+8, same k; a2/a3 = the same rows, k + 16.
 *   B (32 x 8):  b0 = k 4t..4t+3 of column (token) g; b1 = k + 16.
 *   D (16 x 8):  d0,d1 = row g, tokens 2t, 2t+1; d2,d3 = row g+8, tokens 2t, 2t+1.
 * r0 / c0: first weight row / token of the tile within the CTA's shared-memory tile. */
QM_HD void qm_frag_a(const uint8_t *wt, int r0, int j, int lane, uint32_t a[4]) {
    const int g = lane >> 2, t = lane & 3;
    const uint8_t *lo = wt + (r0 + g) * QM_WROW, *hi = lo + 8 * QM_WROW;
    a[0] = qm_w_word(lo, j, 4 * t);
    a[1] = qm_w_word(hi, j, 4 * t);
    a[2] = qm_w_word(lo, j, 16 + 4 * t);
    a[3] = qm_w_word(hi, j, 16 + 4 * t);
}
QM_HD void qm_frag_b(const uint8_t *xt, int c0, int j, int lane, uint32_t b[2]) {
    const uint8_t *xr = xt + (c0 + (lane >> 2)) * QM_XROW;
    b[0] = qm_x_word(xr, j, 4 * (lane & 3));
    b[1] = qm_x_word(xr, j, 16 + 4 * (lane & 3));
}
/* d_w of rows g, g+8 and d_x of tokens 2t, 2t+1 (the D fragment's rows and columns) */
QM_HD void qm_scale_w(const uint8_t *wt, int r0, int j, int lane, float dw[2]) {
    const uint8_t *lo = wt + (r0 + (lane >> 2)) * QM_WROW + 34 * j;
    dw[0] = qm_f16(lo);
    dw[1] = qm_f16(lo + 8 * QM_WROW);
}
QM_HD void qm_scale_x(const uint8_t *xt, int c0, int j, int lane, float dx[2]) {
    const uint8_t *xr = xt + (c0 + 2 * (lane & 3)) * QM_XROW;
    dx[0] = qm_x_scale(xr, j);
    dx[1] = qm_x_scale(xr + QM_XROW, j);
}
/* acc = acc + (d_w * d_x) * isum, isum recovered exactly from the biased MMA result */
QM_HD float qm_update(float acc, float dw, float dx, int32_t biased) {
    const float isum = qm_add(gm_bits((uint32_t)biased), -QM_MAGIC_F);
    return qm_add(acc, qm_mul(qm_mul(dw, dx), isum));
}
QM_HD void qm_epilogue(float acc[4], const int32_t d[4], const float dw[2], const float dx[2]) {
    acc[0] = qm_update(acc[0], dw[0], dx[0], d[0]);
    acc[1] = qm_update(acc[1], dw[0], dx[1], d[1]);
    acc[2] = qm_update(acc[2], dw[1], dx[0], d[2]);
    acc[3] = qm_update(acc[3], dw[1], dx[1], d[3]);
}

/* Copies of the loader: 16 B (cp.async on the device), 4 B and 2 B (plain). */
QM_HD void qm_copy16(uint8_t *dst, const uint8_t *src) {
#ifdef __CUDA_ARCH__
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src));
#else
    memcpy(dst, src, 16);
#endif
}
QM_HD void qm_copy4(uint8_t *dst, const uint8_t *src) {
#ifdef __CUDA_ARCH__
    *(uint32_t *)dst = *(const uint32_t *)src;
#else
    memcpy(dst, src, 4);
#endif
}
QM_HD void qm_copy2(uint8_t *dst, const uint8_t *src) {
#ifdef __CUDA_ARCH__
    *(uint16_t *)dst = *(const uint16_t *)src;
#else
    memcpy(dst, src, 2);
#endif
}

/* Stage `s` (blocks 8s..8s+7) of the CTA at weight row m0, token c0 into wt / xt, by thread tid of
 * nthr. Rows past n_out and tokens past n re-read the last valid one (their results are dropped).
 * ALIGNED (nb % 8 == 0, 16-byte aligned rows and bases): 16-byte copies. Otherwise 2-byte weight
 * and 4-byte activation copies of the stage's kb <= 8 blocks only. */
template <bool ALIGNED>
QM_HD void qm_load_stage(const qm_args &p, long long m0, long long c0, long long s, uint8_t *wt, uint8_t *xt,
                         int tid, int nthr) {
    const long long b0 = s * QM_KB;
    if (ALIGNED) {
        for (int c = tid; c < QM_BM * (QM_WROW / 16); c += nthr) {
            const int r = c / (QM_WROW / 16), ch = c % (QM_WROW / 16);
            const long long row = m0 + r < p.n_out ? m0 + r : p.n_out - 1;
            qm_copy16(wt + r * QM_WROW + ch * 16, p.w + (uint64_t)row * p.row_bytes + b0 * 34 + ch * 16);
        }
        for (int c = tid; c < QM_BN * (QM_KB * 36 / 16); c += nthr) {
            const int r = c / (QM_KB * 36 / 16), ch = c % (QM_KB * 36 / 16);
            const long long tok = c0 + r < p.n ? c0 + r : p.n - 1;
            qm_copy16(xt + r * QM_XROW + ch * 16, p.x + (uint64_t)tok * p.x_stride + b0 * 36 + ch * 16);
        }
    } else {
        const int kb = p.nb - b0 < QM_KB ? (int)(p.nb - b0) : QM_KB;
        const int wu = kb * 17, xu = kb * 9; /* 2-byte / 4-byte units per row */
        for (int c = tid; c < QM_BM * wu; c += nthr) {
            const int r = c / wu, u = c % wu;
            const long long row = m0 + r < p.n_out ? m0 + r : p.n_out - 1;
            qm_copy2(wt + r * QM_WROW + 2 * u, p.w + (uint64_t)row * p.row_bytes + b0 * 34 + 2 * u);
        }
        for (int c = tid; c < QM_BN * xu; c += nthr) {
            const int r = c / xu, u = c % xu;
            const long long tok = c0 + r < p.n ? c0 + r : p.n - 1;
            qm_copy4(xt + r * QM_XROW + 4 * u, p.x + (uint64_t)tok * p.x_stride + b0 * 36 + 4 * u);
        }
    }
}

/* Blocks of stage s that exist (8 except in the last stage of an unaligned row) */
QM_HD int qm_stage_blocks(const qm_args &p, long long s) {
    const long long left = p.nb - s * QM_KB;
    return left < QM_KB ? (int)left : QM_KB;
}

/* Store the warp tile's accumulators of lane `lane`: warp (wm, wn) of the CTA at (m0, c0). */
QM_HD void qm_store(const qm_args &p, long long m0, long long c0, int wm, int wn, int lane,
                    const float acc[QM_MT][QM_NT][4]) {
    const int g = lane >> 2, t = lane & 3;
    for (int mt = 0; mt < QM_MT; mt++)
        for (int nt = 0; nt < QM_NT; nt++)
            for (int i = 0; i < 4; i++) {
                const long long row = m0 + wm * (QM_MT * 16) + mt * 16 + g + (i >> 1) * 8;
                const long long tok = c0 + wn * (QM_NT * 8) + nt * 8 + 2 * t + (i & 1);
                if (row < p.n_out && tok < p.n)
                    p.y[(uint64_t)tok * p.y_stride + (uint64_t)row] = acc[mt][nt][i];
            }
}

/* Does the 16-byte path apply? */
QM_HD bool qm_aligned(const qm_args &p) {
    return p.nb % QM_KB == 0 && ((uintptr_t)p.w & 15) == 0 && p.row_bytes % 16 == 0 &&
           ((uintptr_t)p.x & 15) == 0 && p.x_stride % 16 == 0;
}

#endif
