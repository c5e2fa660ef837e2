/* One compressor frontier step on the device (spec model-attention-hc.md §4.4; CPU:
 * cpu_compressor_step + cpu_compressor_pool), and compressor_chunk: the same column step for n
 * tokens in order, in one launch. One thread per pooled dimension j owns the state
 * columns j (and d_c + j for ratio 4): it writes the token's row, pools, and shifts the frontier,
 * so one launch needs no synchronization between threads.
 *
 * Parity: the row write is bitwise (f16 ape decode is exact, one float add). The pool follows
 * the CPU's order (max, then den += wp + wc, sum += w*v per candidate, sum/den) without
 * contraction; expf is rounded from double, so pooled values are bitwise equal to the CPU except
 * where glibc's expf is off by an ulp (about 1e-4 of arguments), then by ~1 ulp. */
#include <cuda_fp16.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_attn_common.cuh"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_pdl.h"

namespace {

__device__ __forceinline__ float f16_bits_to_f32(uint16_t h) { return __half2float(__ushort_as_half(h)); }

/* One step of column j (and d_c + j for ratio 4): write the token's row, pool, shift. */
__device__ void compressor_col(const float *kv, const float *score, const uint16_t *ape, uint32_t phase,
                               uint32_t ratio, uint32_t d_c, bool emit, float *skv, float *ssc, float *pooled,
                               uint32_t j) {
    const bool r4 = ratio == 4;
    const uint32_t coff = r4 ? 2u : 1u;
    const uint64_t width = (uint64_t)coff * d_c;
    const uint32_t row = r4 ? 4 + phase : phase;
    for (uint32_t l = 0; l < coff; l++) {
        const uint64_t c = (uint64_t)l * d_c + j;
        skv[row * width + c] = kv[c];
        ssc[row * width + c] = __fadd_rn(score[c], f16_bits_to_f32(ape[phase * width + c]));
    }
    if (!emit) return;
    float mx = DSV4_ATTN_NEG_INF;
    if (r4) {
        for (uint32_t r = 0; r < 4; r++) {
            const float sp = ssc[r * width + j];
            const float sc = ssc[(4 + r) * width + d_c + j];
            if (sp > mx) mx = sp;
            if (sc > mx) mx = sc;
        }
    } else {
        for (uint32_t r = 0; r < ratio; r++) {
            const float sv = ssc[r * width + j];
            if (sv > mx) mx = sv;
        }
    }
    float out = 0.0f;
    if (!(mx <= DSV4_ATTN_NEG_INF * 0.5f)) {
        float den = 0.0f, sum = 0.0f;
        if (r4) {
            for (uint32_t r = 0; r < 4; r++) {
                const float wp = attn_expf(__fsub_rn(ssc[r * width + j], mx));
                const float wc = attn_expf(__fsub_rn(ssc[(4 + r) * width + d_c + j], mx));
                den = __fadd_rn(den, __fadd_rn(wp, wc));
                sum = __fadd_rn(sum, __fmul_rn(wp, skv[r * width + j]));
                sum = __fadd_rn(sum, __fmul_rn(wc, skv[(4 + r) * width + d_c + j]));
            }
        } else {
            for (uint32_t r = 0; r < ratio; r++) {
                const float w = attn_expf(__fsub_rn(ssc[r * width + j], mx));
                den = __fadd_rn(den, w);
                sum = __fadd_rn(sum, __fmul_rn(w, skv[r * width + j]));
            }
        }
        out = den > 0.0f ? __fdiv_rn(sum, den) : 0.0f;
    }
    pooled[j] = out;
    if (r4) { /* the current window becomes the previous one (this thread's columns only) */
        for (uint32_t r = 0; r < 4; r++) {
            for (uint32_t l = 0; l < 2; l++) {
                const uint64_t c = (uint64_t)l * d_c + j;
                skv[r * width + c] = skv[(4 + r) * width + c];
                ssc[r * width + c] = ssc[(4 + r) * width + c];
            }
        }
    }
}

/* compressor_col for a ratio-4 emission with every state value read once, up front: in
 * compressor_col each shift store may alias the next load, so the 16 moves of the shift run one
 * L2 round trip after another (the decode token that closes a window waited on them in every
 * ratio-4 layer). The same values in the same expressions, so the same bits. */
__device__ void compressor_col_r4_emit(const float *kv, const float *score, const uint16_t *ape,
                                       uint32_t phase, uint32_t d_c, float *skv, float *ssc, float *pooled,
                                       uint32_t j) {
    const uint64_t width = 2ull * d_c;
    float pv[4], ps[4], cv[4][2], cs[4][2]; /* previous window (first half), current window (both) */
    for (uint32_t r = 0; r < 4; r++) {
        pv[r] = skv[r * width + j];
        ps[r] = ssc[r * width + j];
        for (uint32_t l = 0; l < 2; l++) {
            const uint64_t c = (uint64_t)l * d_c + j;
            if (r == phase) {
                cv[r][l] = kv[c];
                cs[r][l] = __fadd_rn(score[c], f16_bits_to_f32(ape[phase * width + c]));
            } else {
                cv[r][l] = skv[(4 + r) * width + c];
                cs[r][l] = ssc[(4 + r) * width + c];
            }
        }
    }
    float mx = DSV4_ATTN_NEG_INF;
    for (uint32_t r = 0; r < 4; r++) {
        if (ps[r] > mx) mx = ps[r];
        if (cs[r][1] > mx) mx = cs[r][1];
    }
    float out = 0.0f;
    if (!(mx <= DSV4_ATTN_NEG_INF * 0.5f)) {
        float den = 0.0f, sum = 0.0f;
        for (uint32_t r = 0; r < 4; r++) {
            const float wp = attn_expf(__fsub_rn(ps[r], mx));
            const float wc = attn_expf(__fsub_rn(cs[r][1], mx));
            den = __fadd_rn(den, __fadd_rn(wp, wc));
            sum = __fadd_rn(sum, __fmul_rn(wp, pv[r]));
            sum = __fadd_rn(sum, __fmul_rn(wc, cv[r][1]));
        }
        out = den > 0.0f ? __fdiv_rn(sum, den) : 0.0f;
    }
    pooled[j] = out;
    for (uint32_t l = 0; l < 2; l++) { /* the token's row, then the current window becomes the previous */
        const uint64_t c = (uint64_t)l * d_c + j;
        skv[(4 + phase) * width + c] = cv[phase][l];
        ssc[(4 + phase) * width + c] = cs[phase][l];
        for (uint32_t r = 0; r < 4; r++) {
            skv[r * width + c] = cv[r][l];
            ssc[r * width + c] = cs[r][l];
        }
    }
}

__global__ void compressor_kernel(const float *kv, const float *score, const uint16_t *ape, uint32_t phase,
                                  uint32_t ratio, uint32_t d_c, bool emit, float *skv, float *ssc,
                                  float *pooled, bool staged) {
    cu_pdl_enter();
    const uint32_t j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= d_c) return;
    if (ratio == 4 && emit && staged)
        compressor_col_r4_emit(kv, score, ape, phase, d_c, skv, ssc, pooled, j);
    else
        compressor_col(kv, score, ape, phase, ratio, d_c, emit, skv, ssc, pooled, j);
}

/* compressor_chunk: each column thread runs the n steps in order (a column's steps depend on
 * each other, columns do not), pooled rows going to consecutive rows of pooled. */
__global__ void compressor_chunk_kernel(const float *kv, uint64_t kv_stride, const float *score,
                                        uint64_t score_stride, const uint16_t *ape, uint32_t pos0, uint32_t n,
                                        uint32_t ratio, uint32_t d_c, float *skv, float *ssc, float *pooled) {
    const uint32_t j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= d_c) return;
    uint32_t e = 0;
    for (uint32_t t = 0; t < n; t++) {
        const uint32_t p = pos0 + t;
        const bool emit = (p + 1) % ratio == 0;
        compressor_col(kv + t * kv_stride, score + t * score_stride, ape, p % ratio, ratio, d_c, emit, skv,
                       ssc, pooled + (uint64_t)e * d_c, j);
        if (emit) e++;
    }
}

/* ---- compressor_chunk in parallel ----
 * A pooled row depends only on the rows of its window (and, ratio 4, of the window before), and
 * a state row's final value is the row of the last token that wrote it, so the sequential chunk
 * splits into one thread per (emitted window, column) for the pool and one per (state row,
 * column) for the final state, with the same values in the same expressions: bitwise the
 * column-sequential kernel above. Token rows come from the chunk's inputs when the token is in
 * the chunk, else from the state as the chunk found it. */
struct cmp_chunk {
    const float *kv, *score;
    uint64_t kv_stride, score_stride;
    const uint16_t *ape;
    const float *skv, *ssc; /* the state before the chunk (pool kernel: read only) */
    uint32_t pos0, n, ratio, d_c, width;
};

/* Token w*ratio + r (w may be -1: the window before position 0) at column c: its (value, score). */
__device__ __forceinline__ void cmp_row_value(const cmp_chunk &a, int64_t w, uint32_t r, uint64_t c, float *v,
                                              float *sc) {
    const int64_t q = w * (int64_t)a.ratio + r;
    if (q >= (int64_t)a.pos0) {
        const uint64_t t = (uint64_t)(q - a.pos0);
        *v = a.kv[t * a.kv_stride + c];
        *sc = __fadd_rn(a.score[t * a.score_stride + c], f16_bits_to_f32(a.ape[(uint64_t)r * a.width + c]));
        return;
    }
    /* ratio 4: the open window (the chunk's first position's, begun before it) sits in rows 4..7,
     * the emitted window before it in rows 0..3; other ratios: one open window in rows 0..ratio-1 */
    const uint32_t row = a.ratio == 4 && w == (int64_t)(a.pos0 / 4) ? 4 + r : r;
    *v = a.skv[(uint64_t)row * a.width + c];
    *sc = a.ssc[(uint64_t)row * a.width + c];
}

__global__ void compressor_pool_kernel(const cmp_chunk a, float *pooled, uint32_t n_emit) {
    const uint32_t j = blockIdx.x * blockDim.x + threadIdx.x, e = blockIdx.y;
    if (j >= a.d_c || e >= n_emit) return;
    const int64_t w = (int64_t)(a.pos0 / a.ratio) + e; /* the window emitted e-th in the chunk */
    float mx = DSV4_ATTN_NEG_INF;
    float vp[4], sp[4], vc[4], scc[4];
    if (a.ratio == 4) {
        for (uint32_t r = 0; r < 4; r++) {
            cmp_row_value(a, w - 1, r, j, &vp[r], &sp[r]);
            cmp_row_value(a, w, r, a.d_c + j, &vc[r], &scc[r]);
            if (sp[r] > mx) mx = sp[r];
            if (scc[r] > mx) mx = scc[r];
        }
    } else {
        for (uint32_t r = 0; r < a.ratio; r++) {
            float v, sv;
            cmp_row_value(a, w, r, j, &v, &sv);
            if (sv > mx) mx = sv;
        }
    }
    float out = 0.0f;
    if (!(mx <= DSV4_ATTN_NEG_INF * 0.5f)) {
        float den = 0.0f, sum = 0.0f;
        if (a.ratio == 4) {
            for (uint32_t r = 0; r < 4; r++) {
                const float wp = attn_expf(__fsub_rn(sp[r], mx));
                const float wc = attn_expf(__fsub_rn(scc[r], mx));
                den = __fadd_rn(den, __fadd_rn(wp, wc));
                sum = __fadd_rn(sum, __fmul_rn(wp, vp[r]));
                sum = __fadd_rn(sum, __fmul_rn(wc, vc[r]));
            }
        } else {
            for (uint32_t r = 0; r < a.ratio; r++) {
                float v, sv;
                cmp_row_value(a, w, r, j, &v, &sv);
                const float wt = attn_expf(__fsub_rn(sv, mx));
                den = __fadd_rn(den, wt);
                sum = __fadd_rn(sum, __fmul_rn(wt, v));
            }
        }
        out = den > 0.0f ? __fdiv_rn(sum, den) : 0.0f;
    }
    pooled[(uint64_t)e * a.d_c + j] = out;
}

/* The state after the chunk. Row r (ratio 4: row 4 + r) holds the last token of phase r; ratio
 * 4's rows 0..3 hold the last window emitted in the chunk (rows 4..7 as its emit found them).
 * One thread per (phase, column) reads what it needs of the old state before writing. */
__global__ void compressor_state_kernel(const cmp_chunk a, float *skv, float *ssc) {
    const uint64_t c = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const uint32_t r = blockIdx.y;
    if (c >= a.width || r >= a.ratio) return;
    const uint32_t last = a.pos0 + a.n - 1, ph = last % a.ratio;
    const uint32_t back = (ph + a.ratio - r) % a.ratio; /* tokens from phase r's last one to `last` */
    const bool cur_new = back < a.n;                    /* that token is in the chunk */
    float cv = 0.0f, cs = 0.0f, pv = 0.0f, ps = 0.0f;
    if (cur_new) cmp_row_value(a, (int64_t)((last - back) / a.ratio), r, c, &cv, &cs);
    const bool r4 = a.ratio == 4;
    const int64_t we = (int64_t)((last + 1) / 4) - 1; /* ratio 4: the last window emitted by `last` */
    const bool prev_new = r4 && we >= (int64_t)(a.pos0 / 4);
    if (prev_new) cmp_row_value(a, we, r, c, &pv, &ps);
    const uint32_t row = r4 ? 4 + r : r;
    if (cur_new) {
        skv[(uint64_t)row * a.width + c] = cv;
        ssc[(uint64_t)row * a.width + c] = cs;
    }
    if (prev_new) {
        skv[(uint64_t)r * a.width + c] = pv;
        ssc[(uint64_t)r * a.width + c] = ps;
    }
}

} // namespace

extern "C" int dsv4_cuda_compressor_step(dsv4_cuda_stream s, const float *kv, const float *score,
                                         const uint16_t *ape_dev, uint32_t pos, uint32_t ratio, uint32_t d_c,
                                         float *state_kv, float *state_score, float *pooled) {
    if (ratio < 2) return (int)cudaErrorInvalidValue;
    if (d_c == 0) return 0;
    const bool emit = (pos + 1) % ratio == 0;
    const char *sv = getenv("DSV4_CUDA_COMPRESSOR_STAGED"); /* =0: the load-after-store order (A/B) */
    const bool staged = !(sv && strcmp(sv, "0") == 0);
    const uint32_t threads = 128;
    compressor_kernel<<<(d_c + threads - 1) / threads, threads, 0, (cudaStream_t)s>>>(
        kv, score, ape_dev, pos % ratio, ratio, d_c, emit, state_kv, state_score, pooled, staged);
    return attn_launch_status();
}

extern "C" int dsv4_cuda_compressor_chunk(dsv4_cuda_stream s, const float *kv, uint64_t kv_stride,
                                          const float *score, uint64_t score_stride, const uint16_t *ape_dev,
                                          uint32_t pos0, uint32_t n, uint32_t ratio, uint32_t d_c,
                                          float *state_kv, float *state_score, float *pooled) {
    if (ratio < 2) return (int)cudaErrorInvalidValue;
    if (d_c == 0 || n == 0) return 0;
    const char *serial = getenv("DSV4_CUDA_COMPRESSOR_CHUNK");
    if (serial && strcmp(serial, "serial") == 0) { /* the column-sequential kernel (A/B switch) */
        const uint32_t threads = 64;               /* more blocks: the steps of a column are sequential */
        compressor_chunk_kernel<<<(d_c + threads - 1) / threads, threads, 0, (cudaStream_t)s>>>(
            kv, kv_stride, score, score_stride, ape_dev, pos0, n, ratio, d_c, state_kv, state_score, pooled);
        return attn_launch_status();
    }
    const uint32_t width = (ratio == 4 ? 2u : 1u) * d_c;
    const uint32_t n_emit = (pos0 + n) / ratio - pos0 / ratio;
    if (n_emit > 65535 || ratio > 65535) return (int)cudaErrorInvalidValue;
    const cmp_chunk a = {kv,          score, kv_stride, score_stride, ape_dev, state_kv,
                         state_score, pos0,  n,         ratio,        d_c,     width};
    const uint32_t threads = 128;
    if (n_emit > 0) {
        compressor_pool_kernel<<<dim3((d_c + threads - 1) / threads, n_emit), threads, 0, (cudaStream_t)s>>>(
            a, pooled, n_emit);
        const int rc = attn_launch_status();
        if (rc != 0) return rc;
    }
    compressor_state_kernel<<<dim3((width + threads - 1) / threads, ratio), threads, 0, (cudaStream_t)s>>>(
        a, state_kv, state_score);
    return attn_launch_status();
}

/* kernels that wait before touching earlier kernels' memory (cuda_pdl.cuh) */
extern "C" int cu_pdl_kernels_attn_compressor(const void **out) {
    out[0] = (const void *)compressor_kernel;
    return 1;
}
