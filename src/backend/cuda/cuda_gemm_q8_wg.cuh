/* Units of the exact Q8_0 prefill GEMM on warpgroup tensor cores (cuda_gemm_q8_wg.cu; the contract
 * is cuda_gemm_q8_wg.h). Device code for sm_90a only: the wgmma bodies are empty elsewhere; the
 * layout units (QW_HD) also run on the host in tests/cuda/q8_wg_emu_check.cu.
 *
 * The CTA tile: 128 tokens (M: two product warpgroups of 64) x 128 weight rows (N), one CTA per SM. A
 * stage is 64 k (two Q8_0 blocks): the token tile and the weight tile as 128 rows of 128 bytes in
 * the 128-byte swizzle (chunk c of row r at r * 128 + ((c ^ (r % 8)) * 16); 1024-byte aligned
 * tiles), then the token tile's block scales as [row][2] floats and the weight tile's as [block][row]. Per
 * block a warpgroup runs two wgmma.m64n128k16 f16 x f16 -> f32 (scale-d 0, then 1) into a block accumulator:
 * the integer isum of every (token, row), exact (each product |q_x q_w| <= 128 * 127 is an exact f32, their
 * sum stays below 2^24). Then the CPU's update acc = acc + (d_w * d_x) * isum for each of the thread's 64
 * outputs: three FP32 operations, no contraction.
 *
 * Two kernels share the tile, the stage image and the arithmetic. qw_kernel (session 20): every thread
 * loads its part of each stage (cp.async) and a CTA barrier per stage hands it over; both warpgroups'
 * products run while the other updates within a stage. qws_kernel (session 21, the default): a third,
 * producer warpgroup does all the loads and hands each stage over through mbarriers (full / empty per
 * stage), so the two consumer warpgroups never wait for each other or for a CTA barrier, and the grid is
 * persistent (one CTA per SM walks the tiles; the producer runs into the next tile while the consumers
 * store). Its consumers order products and updates in one of three forms (cuda_gemm_q8_wg.cu, FORM). */
#ifndef DSV4_CUDA_GEMM_Q8_WG_CUH
#define DSV4_CUDA_GEMM_Q8_WG_CUH

#include <stdint.h>

#include "backend/cuda/cuda_wgmma_x16.cuh" /* fence / commit / wait, the swizzled descriptor */

#define QW_WGMMA X16_WGMMA
#define QW_HD __host__ __device__ __forceinline__
#ifdef __CUDA_ARCH__ /* the host pass (tests/cuda/q8_wg_emu_check.cu) does not know the pragma */
#define QW_UNROLL _Pragma("unroll")
#else
#define QW_UNROLL
#endif

enum {
    QW_BM = 128,                            /* tokens per CTA */
    QW_BN = 128,                            /* weight rows per CTA */
    QW_BK = 64,                             /* k per stage: two Q8_0 blocks */
    QW_TILE = 128 * 128,                    /* one operand tile of a stage, bytes */
    QW_SCALES = 128 * 2 * 4,                /* one tile's block scales, bytes */
    QW_STAGE = 2 * QW_TILE + 2 * QW_SCALES, /* 34816 = 34 * 1024: tiles stay 1024-aligned */
    QW_STAGES = 5,
    QW_SMEM = QW_STAGES * QW_STAGE + 1024, /* + the alignment of the dynamic base */
    QW_THREADS = 256
};

/* Byte offset of 16-byte chunk ch (k 8 ch .. 8 ch + 7 of the stage) of tile row r. */
QW_HD int qw_chunk_off(int r, int ch) { return r * 128 + ((ch ^ (r & 7)) << 4); }

/* One product's operands (cuda_gemm_q8_wg.h dsv4_cuda_q8_wg_op, as the kernels read them). */
typedef struct qw_args {
    const uint16_t *xq; /* f16 codes */
    const float *xd;
    const uint16_t *wq;
    const float *wd;
    uint64_t L, in; /* activation row length (in * groups), weight row length */
    uint32_t rows, n;
    float *y;
    uint64_t y_stride;
    int vec2; /* float2 stores line up */
} qw_args;

/* A thread's part of every stage, for T loading threads: 1024 / T token-tile and as many weight-tile
 * chunks (rows tid / 8 + T / 8 i, chunk tid % 8) and the block scales, as byte offsets of stage 0 from
 * the operand bases (dsv4_cuda_q8_wg_ok keeps them below 2^32); stage s adds 128 s (codes) and 8 s
 * (scales). T = 256 (qw_kernel: every thread loads): thread tid < 128 copies token tid's two block
 * scales (sc), tid >= 128 weight row tid - 128's (sc). T = 128 (qws_kernel's producer warpgroup):
 * thread tid copies both, token tid's (sc) and row tid's (sw). Tokens past n and rows past `rows`
 * re-read the last one (their outputs are dropped at the store). */
template <int T> struct qw_src {
    uint32_t a[1024 / T], b[1024 / T], sc, sw;
    int dst; /* the chunks' offset in a tile (+ 16 T i) */
};
template <int T> QW_HD qw_src<T> qw_src_of(const qw_args &p, uint32_t t0, uint32_t o0, uint32_t g, int tid) {
    qw_src<T> q;
    const int ch = tid & 7;
    QW_UNROLL
    for (int i = 0; i < 1024 / T; i++) {
        const uint32_t r = (uint32_t)(tid >> 3) + T / 8 * i;
        const uint32_t tok = t0 + r < p.n ? t0 + r : p.n - 1;
        const uint32_t row = g * p.rows + (o0 + r < p.rows ? o0 + r : p.rows - 1);
        q.a[i] = (uint32_t)((tok * p.L + g * p.in) * 2 + 16 * ch);
        q.b[i] = (uint32_t)(row * p.in * 2 + 16 * ch);
    }
    const uint32_t r = (uint32_t)tid & 127;
    const uint32_t tok = t0 + r < p.n ? t0 + r : p.n - 1,
                   row = g * p.rows + (o0 + r < p.rows ? o0 + r : p.rows - 1);
    const uint32_t tok_off = (uint32_t)((tok * (p.L / 32) + g * (p.in / 32)) * 4),
                   row_off = (uint32_t)(row * (p.in / 32) * 4);
    q.sc = T == 128 || tid < 128 ? tok_off : row_off;
    q.sw = row_off;
    q.dst = qw_chunk_off(tid >> 3, ch);
    return q;
}
/* The tile of tile i of qws_kernel's walk: token tiles fastest, then row tiles, then groups */
struct qws_tile {
    uint32_t t0, o0, g;
};
QW_HD qws_tile qws_tile_of(uint32_t i, uint32_t nx, uint32_t ny) {
    qws_tile t;
    t.t0 = i % nx * QW_BM, t.o0 = i / nx % ny * QW_BN, t.g = i / (nx * ny);
    return t;
}

/* The thread's accumulator element e (wgmma m64nN f32 layout) of warp w (of its warpgroup):
 * token row (of the warpgroup's 64) and weight column (of the 128). */
QW_HD int qw_acc_row(int w, int lane, int e) { return 16 * w + (lane >> 2) + 8 * ((e & 3) >> 1); }
QW_HD int qw_acc_col(int lane, int e) { return 8 * (e >> 2) + 2 * (lane & 3) + (e & 1); }

/* d (64 floats) = A B (+ d when acc != 0): m64n128k16, A (64 x 16) and B (128 x 16) K-major in
 * shared memory through their descriptors */
__device__ __forceinline__ void qw_mma128(float (&d)[64], uint64_t da, uint64_t db, int acc) {
#if QW_WGMMA
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
                 "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "
                 "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "
                 "%56, %57, %58, %59, %60, %61, %62, %63}, "
                 "%64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
                   "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
                   "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
                   "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
                   "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
                   "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
                   "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
                   "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
                   "+f"(d[63])
                 : "l"(da), "l"(db), "r"(acc));
#else
    (void)d, (void)da, (void)db, (void)acc;
#endif
}

#endif
