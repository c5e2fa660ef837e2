/* Index and reduction-order pieces of the register-tail decode pre step (hc_tail_kernel in
 * cuda_ops_hc.cu, DSV4_CUDA_HC_TAIL), host-callable so tests/cuda/hc_tail_emu_check.cu can replay
 * them against an emulation of cu_row_sumsq's tree.
 *
 * Thread t of a 256-thread block holds the float4 groups t + 256 k of the whole HC row (k < 4 KE,
 * KE = n_embd / 1024): exactly the groups cu_row_sumsq gives thread t over the row, in its order,
 * so Σx² is that tree's value. Slot k = h KE + e is stream h, group t + 256 e of that stream (the
 * n_embd / 4 = 256 KE groups of a stream start at h 256 KE), so u's group t + 256 e is formed
 * from the thread's own slots, and its Σu² (groups t + 256 e, e in order) is cu_row_sumsq's tree
 * over u too. */
#ifndef DSV4_CUDA_HC_TAIL_UNITS_CUH
#define DSV4_CUDA_HC_TAIL_UNITS_CUH

#include <stdint.h>

#define HCT_THREADS 256u
#define HCT_NH 4u /* streams: the unrolled n_hc = 4 split */

/* Float4 group of slot k of thread t (a row group over the whole row, or a u group for k < KE). */
__host__ __device__ inline uint32_t hct_group(uint32_t t, uint32_t k) { return t + HCT_THREADS * k; }

/* Slot of stream h, stream group e (t + 256 e). */
__host__ __device__ inline uint32_t hct_slot(uint32_t h, uint32_t e, uint32_t ke) { return h * ke + e; }

/* Does block b write u / y group g? All of them in the one-block tail; in the grid tail each
 * block the groups g % P == b (P blocks), so each group is written once. */
__host__ __device__ inline bool hct_writes(uint32_t g, uint32_t P, uint32_t b, bool grid) {
    return !grid || g % P == b;
}

/* The cluster tail (CL = 4 KE CTAs): CTA b writes the u / y groups [64 b, 64 b + 64): one Q8_K block
 * (block b), held by the row threads 64 m .. 64 m + 63 (m = b % 4) in slot e = b / 4; and it computes
 * the mix chunks b CPC .. b CPC + CPC - 1 of the row's 16 KE chunks of 256 values (CPC = 4). */
__host__ __device__ inline bool hct_cl_mine(uint32_t g, uint32_t b, uint32_t ke, uint32_t cl) {
    return g / (256 * ke / (cl ? cl : 1)) == b;
}
__host__ __device__ inline uint32_t hct_cl_q8k_e(uint32_t b) { return b / 4; }
__host__ __device__ inline uint32_t hct_cl_q8k_m(uint32_t b) { return b % 4; }

/* ss + v.x² + v.y² + v.z² + v.w², element by element: cu_row_sumsq's step (explicit _rn on the
 * device: no contraction). */
__host__ __device__ inline double hct_sq4(double ss, float a, float b, float c, float d) {
#ifdef __CUDA_ARCH__
    ss = __dadd_rn(ss, __dmul_rn((double)a, (double)a));
    ss = __dadd_rn(ss, __dmul_rn((double)b, (double)b));
    ss = __dadd_rn(ss, __dmul_rn((double)c, (double)c));
    ss = __dadd_rn(ss, __dmul_rn((double)d, (double)d));
#else
    ss = ss + (double)a * (double)a;
    ss = ss + (double)b * (double)b;
    ss = ss + (double)c * (double)c;
    ss = ss + (double)d * (double)d;
#endif
    return ss;
}

#ifdef __CUDACC__
/* Barrier of the block's HCT_THREADS row threads (threads 0..255) alone: named barrier 1, which
 * threads past them (hc_tail_kernel's split warp) never wait at. */
__device__ __forceinline__ void hct_row_sync() {
    asm volatile("bar.sync 1, %0;" ::"n"(HCT_THREADS) : "memory");
}

/* cu_row_sumsq's last steps on the thread's sum: xor butterfly, warp sums stored, barrier (the row
 * threads'), the 8 warp sums in order. Every row thread gets the total. */
__device__ inline double hct_finish(double ss, double *part) {
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
    hct_row_sync();
    double tot = 0.0;
    for (int i = 0; i < (int)(HCT_THREADS / 32); i++) tot += part[i];
    return tot;
}
#endif

#endif
