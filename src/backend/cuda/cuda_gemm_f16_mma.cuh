/* Units of the F16 tensor-core prefill GEMM (cuda_gemm_f16_mma.cu), host and device: tile layout,
 * stage loader, mma.m16n8k16 fragment reads, split-K ranges and the store. The kernel and the host
 * emulation (tests/cuda/f16_mma_emu_check.cu) call these same functions, so the emulation checks
 * the kernel's index arithmetic (ragged rows, tokens and k, split-K), not a copy of it. */
#ifndef DSV4_CUDA_GEMM_F16_MMA_CUH
#define DSV4_CUDA_GEMM_F16_MMA_CUH

#include <stdint.h>
#include <string.h>

#define FM_HD __host__ __device__ __forceinline__
/* #pragma unroll for the device pass only (keeps the accumulators in registers) */
#ifdef __CUDA_ARCH__
#define FM_UNROLL _Pragma("unroll")
#else
#define FM_UNROLL
#endif

enum {
    FM_BM = 64,     /* weight rows per CTA */
    FM_BN = 64,     /* tokens per CTA */
    FM_BK = 32,     /* halves of k per pipeline stage */
    FM_WARPS_M = 2, /* warps along the rows */
    FM_WARPS_N = 2, /* warps along the tokens */
    FM_THREADS = 32 * FM_WARPS_M * FM_WARPS_N,
    FM_MT = FM_BM / FM_WARPS_M / 16, /* m16 tiles per warp (2) */
    FM_NT = FM_BN / FM_WARPS_N / 8,  /* n8 tiles per warp (4) */
    /* a row of 32 halves + 8 pad: 20 words, so rows g = 0..7 x words t = 0..3 of a fragment read
     * (20 g + t mod 32) hit 32 distinct banks; 80 bytes keeps the 16-byte cp.async chunks aligned */
    FM_LD = FM_BK + 8,
    FM_ATILE = FM_BM * FM_LD, /* halves */
    FM_BTILE = FM_BN * FM_LD,
    FM_STAGE = FM_ATILE + FM_BTILE,
    FM_STAGES = 3,
    FM_SMEM = FM_STAGES * FM_STAGE * 2, /* 30720 B: static shared memory */
    FM_MAX_SPLITS = 16
};
#define FM_F16_MAX 65504.0f

typedef struct fm_args {
    const uint8_t *w;   /* weight row 0 */
    uint64_t row_bytes; /* bytes between weight rows */
    long long n_out, in, n;
    const uint16_t *x16; /* f16 activations, n rows of `in` halves (dense); terms 2: then the lo term's */
    int terms;           /* 1: W f16(x); 2: W hi + W lo, hi = f16(x), lo = f16(x - hi), over 2 KT k tiles */
    float *y;
    uint64_t y_stride; /* floats between output rows (tokens) */
    float *part;       /* splits > 1: [split][token][n_out] partial sums */
    int splits;
} fm_args;

/* k tiles of one term, and of the product (terms x that: term j's tiles are j KT .. j KT + KT - 1) */
FM_HD long long fm_term_ktiles(const fm_args &p) { return (p.in + FM_BK - 1) / FM_BK; }
FM_HD long long fm_ktiles(const fm_args &p) { return (p.terms > 1 ? 2 : 1) * fm_term_ktiles(p); }
/* k tiles [*t0, *t1) of split z: an even share, fixed by the shape (deterministic results) */
FM_HD void fm_split_range(const fm_args &p, int z, long long *t0, long long *t1) {
    const long long kt = fm_ktiles(p);
    *t0 = kt * z / p.splits;
    *t1 = kt * (z + 1) / p.splits;
}

/* 16-byte copy, zero-filled when !valid (rows past n_out, tokens past n, k past in) */
FM_HD void fm_copy16(uint16_t *dst, const void *src, bool valid) {
#ifdef __CUDA_ARCH__
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 16 : 0));
#else
    if (valid)
        memcpy(dst, src, 16);
    else
        memset(dst, 0, 16);
#endif
}

/* k tile kt of the CTA at weight row m0, token c0 into as / bs, by thread tid of nthr. The chunks
 * are 8 halves; in % 8 == 0, so a chunk is wholly inside or past the row. */
FM_HD void fm_load_stage(const fm_args &p, long long m0, long long c0, long long kt, uint16_t *as,
                         uint16_t *bs, int tid, int nthr) {
    const long long KT = fm_term_ktiles(p), term = kt / KT, k0 = (kt - term * KT) * FM_BK;
    const uint16_t *xt = p.x16 + (uint64_t)term * (uint64_t)p.n * (uint64_t)p.in; /* the term's rows */
    for (int c = tid; c < FM_BM * (FM_BK / 8); c += nthr) {
        const int r = c / (FM_BK / 8), ch = c % (FM_BK / 8);
        const long long row = m0 + r, k = k0 + ch * 8;
        const bool ok = row < p.n_out && k < p.in;
        fm_copy16(as + r * FM_LD + ch * 8, ok ? p.w + (uint64_t)row * p.row_bytes + (uint64_t)k * 2 : p.w,
                  ok);
    }
    for (int c = tid; c < FM_BN * (FM_BK / 8); c += nthr) {
        const int r = c / (FM_BK / 8), ch = c % (FM_BK / 8);
        const long long tok = c0 + r, k = k0 + ch * 8;
        const bool ok = tok < p.n && k < p.in;
        fm_copy16(bs + r * FM_LD + ch * 8, ok ? xt + (uint64_t)tok * p.in + k : p.x16, ok);
    }
}

FM_HD uint32_t fm_ld32(const uint16_t *p) { /* 4-byte aligned */
#ifdef __CUDA_ARCH__
    return *(const uint32_t *)p;
#else
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
#endif
}

/* Fragments of mma.m16n8k16.row.col.f32.f16.f16.f32 for lane (g = lane/4, t = lane%4), each
 * register two halves (lower k in the low half):
 *   A (16 x 16): a0 = row g, k 2t,2t+1; a1 = row g+8; a2 = row g, k + 8; a3 = row g+8, k + 8.
 *   B (16 x 8):  b0 = k 2t,2t+1 of column (token) g; b1 = k + 8.
 *   D (16 x 8):  d0,d1 = row g, tokens 2t, 2t+1; d2,d3 = row g+8.
 * r0 / c0: first row / token of the m16 / n8 tile in the stage; kk: 0 or 16 within the stage. */
FM_HD void fm_frag_a(const uint16_t *as, int r0, int kk, int lane, uint32_t a[4]) {
    const uint16_t *lo = as + (r0 + (lane >> 2)) * FM_LD + kk + 2 * (lane & 3), *hi = lo + 8 * FM_LD;
    a[0] = fm_ld32(lo);
    a[1] = fm_ld32(hi);
    a[2] = fm_ld32(lo + 8);
    a[3] = fm_ld32(hi + 8);
}
FM_HD void fm_frag_b(const uint16_t *bs, int c0, int kk, int lane, uint32_t b[2]) {
    const uint16_t *p = bs + (c0 + (lane >> 2)) * FM_LD + kk + 2 * (lane & 3);
    b[0] = fm_ld32(p);
    b[1] = fm_ld32(p + 8);
}

/* Store lane's accumulators of warp (wm, wn) of the CTA at (m0, c0), split z: straight to y, or to
 * the split's partial sums (reduced in split order by fm_reduce_kernel). */
FM_HD void fm_store(const fm_args &p, long long m0, long long c0, int z, int wm, int wn, int lane,
                    const float acc[FM_MT][FM_NT][4]) {
    const int g = lane >> 2, t = lane & 3;
    FM_UNROLL
    for (int mt = 0; mt < FM_MT; mt++) FM_UNROLL
    for (int nt = 0; nt < FM_NT; nt++) FM_UNROLL
    for (int i = 0; i < 4; i++) {
        const long long row = m0 + wm * (FM_MT * 16) + mt * 16 + g + (i >> 1) * 8;
        const long long tok = c0 + wn * (FM_NT * 8) + nt * 8 + 2 * t + (i & 1);
        if (row >= p.n_out || tok >= p.n) continue;
        if (p.splits > 1)
            p.part[((uint64_t)z * p.n + tok) * p.n_out + row] = acc[mt][nt][i];
        else
            p.y[(uint64_t)tok * p.y_stride + row] = acc[mt][nt][i];
    }
}

/* The split-K factor: enough CTAs for ~2 waves of the sm_count multiprocessors, each split at least
 * 4 k tiles (128 inputs), at most FM_MAX_SPLITS. */
static inline int fm_pick_splits(long long in, long long n_out, long long n, int sm_count) {
    const long long tiles = ((n_out + FM_BM - 1) / FM_BM) * ((n + FM_BN - 1) / FM_BN);
    const long long kt = (in + FM_BK - 1) / FM_BK;
    const long long want = 2LL * (sm_count > 0 ? sm_count : 132);
    if (tiles >= want) return 1;
    long long s = (want + tiles - 1) / tiles;
    if (s > kt / 4) s = kt / 4;
    if (s > FM_MAX_SPLITS) s = FM_MAX_SPLITS;
    return s < 1 ? 1 : (int)s;
}

#endif
