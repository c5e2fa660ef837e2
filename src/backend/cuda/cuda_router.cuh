/* The router's selection for one token by one block (router_kernel's, and the router epilogue of the
 * warp-direct matvec, cuda_mvw.cu). Written once so that both give the same ids and weights.
 *
 * Scores p = sqrt(softplus(logit)), s = p + bias; the top k of s (higher first, ties to the lower
 * index: the CPU's insertion order) by rank: the candidates are the experts scoring at least the k-th
 * largest of the warp maxima of ROUTER_VT virtual threads (expert e belongs to virtual thread
 * e % ROUTER_VT), a superset of the top k, and each candidate's rank among them, if below k, is its
 * slot. Any superset gives the same slots; the virtual threads make the candidates the same for
 * every block size. Scores with a NaN take the CPU's insertion loop; hash layers copy their table
 * row. The weights (the unbiased p of the slots, over their sum floored at 2^-14, times scale) by
 * thread 0 in slot order, as the CPU. An id that is not an expert gets a NaN weight. smem_slots = false
 * (DSV4_CUDA_ROUTER_SMEM=0, A/B): the slots and weights formed in st / wt (global) as before session 13;
 * the same values. */
#ifndef DSV4_CUDA_ROUTER_CUH
#define DSV4_CUDA_ROUTER_CUH

#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_smallops_units.cuh"

#define ROUTER_SUM_FLOOR 6.103515625e-5f /* 2^-14 */
#define ROUTER_VT 256                    /* the virtual threads whose warp maxima bound the candidates */
#define ROUTER_KMAX 32                   /* slots formed in shared memory (more: in st / wt themselves) */
#define ROUTER_CMAX 128                  /* candidates whose scores are kept beside their ids */

/* NT threads (a multiple of 32 dividing ROUTER_VT) call it together. lg: the n_expert logits (read
 * through L2: another block may have just written them); hash_row: the token's k ids (hash layers)
 * or NULL; sh: 3 * n_expert words of shared memory. st, wt: the k ids and weights (global). */
template <int NT>
__device__ __forceinline__ void router_block(const float *lg, uint32_t n_expert, uint32_t k,
                                             const float *bias, const int32_t *hash_row, float scale,
                                             float *sh, int32_t *st, float *wt, bool smem_slots = true) {
    static_assert(NT % 32 == 0 && ROUTER_VT % NT == 0, "router_block: whole warps dividing ROUTER_VT");
    __shared__ float wmax[ROUTER_VT / 32];
    __shared__ uint32_t n_cand;
    /* the slots and weights formed in shared memory (k <= ROUTER_KMAX), each stored to st / wt once:
     * reading them back from global memory put two L2 round trips on thread 0's chain */
    __shared__ int32_t s_st[ROUTER_KMAX];
    __shared__ float s_wt[ROUTER_KMAX];
    /* the first ROUTER_CMAX candidates' scores beside their ids: the rank loop then reads both
     * without the dependent s[cand[j]] load (session 28; the same scores, so the same ranks) */
    __shared__ float s_cs[ROUTER_CMAX];
    __shared__ float s_sum;
    int32_t *sv = smem_slots && k <= ROUTER_KMAX ? s_st : st;
    float *wv = smem_slots && k <= ROUTER_KMAX ? s_wt : wt;
    float *p = sh, *s = sh + n_expert;
    int32_t *cand = (int32_t *)(s + n_expert);
    const uint32_t lane = threadIdx.x & 31;
    int has_nan = 0;
    for (uint32_t pass = 0; pass < ROUTER_VT / NT; pass++) {
        const uint32_t v = threadIdx.x + pass * NT; /* the virtual thread */
        float mx = -INFINITY;
        for (uint32_t e = v; e < n_expert; e += ROUTER_VT) {
            p[e] = sqrtf(cu_softplus(__ldcg(lg + e)));
            s[e] = bias ? p[e] + bias[e] : p[e];
            has_nan |= isnan(s[e]) ? 1 : 0;
            mx = fmaxf(mx, s[e]);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        if (lane == 0) wmax[v / 32] = mx;
    }
    if (threadIdx.x == 0) n_cand = 0;
    const bool serial = __syncthreads_or(has_nan) != 0;
    if (hash_row) {
        if (threadIdx.x == 0)
            for (uint32_t i = 0; i < k; i++) sv[i] = hash_row[i];
    } else if (serial) {
        if (threadIdx.x == 0) {
            for (uint32_t i = 0; i < k; i++) sv[i] = -1;
            for (uint32_t i = 0; i < n_expert; i++) {
                for (uint32_t j = 0; j < k; j++) {
                    if (sv[j] < 0 || s[i] > s[sv[j]]) {
                        for (uint32_t m = k - 1; m > j; m--) sv[m] = sv[m - 1];
                        sv[j] = (int32_t)i;
                        break;
                    }
                }
            }
        }
    } else {
        const float lo = rtu_kth_max(wmax, ROUTER_VT / 32, k);
        for (uint32_t e = threadIdx.x; e < n_expert; e += NT)
            if (s[e] >= lo) {
                const uint32_t at = atomicAdd(&n_cand, 1u);
                cand[at] = (int32_t)e;
                if (at < ROUTER_CMAX) s_cs[at] = s[e];
            }
        __syncthreads();
        const uint32_t nc = n_cand;
        for (uint32_t i = threadIdx.x; i < nc; i += NT) {
            const uint32_t r = smem_slots && nc <= ROUTER_CMAX ? rtu_rank_cs(s_cs, cand, nc, s_cs[i], cand[i])
                                                               : rtu_rank(s, cand, nc, cand[i]);
            if (r < k) sv[r] = cand[i];
        }
    }
    __syncthreads();  /* sv written by other threads of the block */
    if (sv == s_st) { /* k <= 32: lane i forms slot i's weight, lane 0 sums them in slot order */
        const uint32_t i = threadIdx.x;
        if (i >= 32) return;
        if (i < k) {
            const int32_t id = sv[i];
            const bool ok = id >= 0 && (uint32_t)id < n_expert;
            wv[i] = ok ? p[id] : __int_as_float(0x7fc00000); /* weights use the unbiased scores */
            st[i] = id;
        }
        __syncwarp();
        if (i == 0) {
            float sum = 0.0f;
            for (uint32_t j = 0; j < k; j++) sum += wv[j];
            s_sum = sum < ROUTER_SUM_FLOOR ? ROUTER_SUM_FLOOR : sum;
        }
        __syncwarp();
        if (i < k) wt[i] = wv[i] / s_sum * scale;
        return;
    }
    if (threadIdx.x != 0) return;
    float sum = 0.0f;
    for (uint32_t i = 0; i < k; i++) {
        const int32_t id = sv[i];
        const bool ok = id >= 0 && (uint32_t)id < n_expert;
        wv[i] = ok ? p[id] : __int_as_float(0x7fc00000); /* weights use the unbiased scores */
        if (sv != st) st[i] = id;
        sum += wv[i];
    }
    if (sum < ROUTER_SUM_FLOOR) sum = ROUTER_SUM_FLOOR;
    for (uint32_t i = 0; i < k; i++) wt[i] = wv[i] / sum * scale;
}

#endif
