/* Per-thread units of the indexer's bit-by-bit top-k selection (cuda_attn_indexer.cu select_bits_kernel),
 * host-callable so that tests/cuda/select_emu_check.cu can replay every thread of the kernel on a machine
 * without a GPU. A thread owns the keys of KPT consecutive rows (v[j]: row i0 + j, key 0 past the rows);
 * what the units return is summed over the block (integers: any order) or scanned by the kernel. */
#ifndef DSV4_CUDA_SELECT_UNITS_CUH
#define DSV4_CUDA_SELECT_UNITS_CUH

#include <stdint.h>
#include <string.h>

#define SELB_FN static __host__ __device__ __forceinline__
#ifdef __CUDA_ARCH__ /* #pragma unroll for the device pass only (the host compiler does not know it) */
#define SELB_UNROLL _Pragma("unroll")
#else
#define SELB_UNROLL
#endif

/* Larger float <=> larger key; -0 and +0 share a key (they compare equal on the CPU). */
SELB_FN uint32_t sel_order_key(float f) {
#ifdef __CUDA_ARCH__
    const uint32_t u = __float_as_uint(f == 0.0f ? 0.0f : f);
#else
    const float g = f == 0.0f ? 0.0f : f;
    uint32_t u;
    memcpy(&u, &g, 4);
#endif
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* The thread's keys >= cand (a round's count; cand always has a bit set, so padding never counts). */
template <uint32_t N> SELB_FN uint32_t selb_count_ge(const uint32_t (&v)[N], uint32_t cand) {
    uint32_t cnt = 0;
    SELB_UNROLL
    for (uint32_t j = 0; j < N; j++) cnt += v[j] >= cand ? 1u : 0u;
    return cnt;
}

/* After the top 16 bits: the thread's keys whose top half is T's (they alone can still be split) in the
 * low half, those above it in the high half (n < 65,536). */
template <uint32_t N> SELB_FN uint32_t selb_half_counts(const uint32_t (&v)[N], uint32_t T) {
    uint32_t nl = 0, na = 0;
    SELB_UNROLL
    for (uint32_t j = 0; j < N; j++) {
        nl += v[j] >> 16 == T >> 16 ? 1u : 0u;
        na += v[j] >> 16 > T >> 16 ? 1u : 0u;
    }
    return nl | na << 16;
}

/* The thread's keys whose top half is T's into live[at ..] (at: the exclusive scan of the low halves). */
template <uint32_t N>
SELB_FN void selb_compact(const uint32_t (&v)[N], uint32_t T, uint32_t at, uint32_t *live) {
    SELB_UNROLL
    for (uint32_t j = 0; j < N; j++)
        if (v[j] >> 16 == T >> 16) live[at++] = v[j];
}

/* With T final: the thread's rows above T in the low half, equal to T in the high half. */
template <uint32_t N>
SELB_FN uint32_t selb_out_counts(const uint32_t (&v)[N], uint32_t i0, uint32_t n, uint32_t T) {
    uint32_t gt = 0, eq = 0;
    SELB_UNROLL
    for (uint32_t j = 0; j < N; j++)
        if (i0 + j < n) gt += v[j] > T ? 1u : 0u, eq += v[j] == T ? 1u : 0u;
    return gt | eq << 16;
}

/* The thread's selected rows in row order: every row above T and, of the rows equal to it, those whose rank
 * among the equal rows (eq_before + their place) is below need_eq = k - #(> T). before / tot: the exclusive
 * scan and total of selb_out_counts. */
template <uint32_t N>
SELB_FN void selb_write(const uint32_t (&v)[N], uint32_t i0, uint32_t n, uint32_t T, uint32_t before,
                        uint32_t tot, uint32_t k, int32_t *sel) {
    const uint32_t need_eq = k - (tot & 0xffffu), eq_before = before >> 16;
    uint32_t at = (before & 0xffffu) + (eq_before < need_eq ? eq_before : need_eq), r = eq_before;
    SELB_UNROLL
    for (uint32_t j = 0; j < N; j++)
        if (i0 + j < n) {
            if (v[j] > T)
                sel[at++] = (int32_t)(i0 + j);
            else if (v[j] == T && r++ < need_eq)
                sel[at++] = (int32_t)(i0 + j);
        }
}

#undef SELB_FN
#undef SELB_UNROLL
#endif
