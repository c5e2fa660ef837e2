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

#include "backend/cuda/cuda_attn_common.cuh"

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

__global__ void compressor_kernel(const float *kv, const float *score, const uint16_t *ape, uint32_t phase,
                                  uint32_t ratio, uint32_t d_c, bool emit, float *skv, float *ssc,
                                  float *pooled) {
    const uint32_t j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= d_c) return;
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

} // namespace

extern "C" int dsv4_cuda_compressor_step(dsv4_cuda_stream s, const float *kv, const float *score,
                                         const uint16_t *ape_dev, uint32_t pos, uint32_t ratio, uint32_t d_c,
                                         float *state_kv, float *state_score, float *pooled) {
    if (ratio < 2) return (int)cudaErrorInvalidValue;
    if (d_c == 0) return 0;
    const bool emit = (pos + 1) % ratio == 0;
    const uint32_t threads = 128;
    compressor_kernel<<<(d_c + threads - 1) / threads, threads, 0, (cudaStream_t)s>>>(
        kv, score, ape_dev, pos % ratio, ratio, d_c, emit, state_kv, state_score, pooled);
    return attn_launch_status();
}

extern "C" int dsv4_cuda_compressor_chunk(dsv4_cuda_stream s, const float *kv, uint64_t kv_stride,
                                          const float *score, uint64_t score_stride, const uint16_t *ape_dev,
                                          uint32_t pos0, uint32_t n, uint32_t ratio, uint32_t d_c,
                                          float *state_kv, float *state_score, float *pooled) {
    if (ratio < 2) return (int)cudaErrorInvalidValue;
    if (d_c == 0 || n == 0) return 0;
    const uint32_t threads = 64; /* more blocks: the steps of a column are sequential */
    compressor_chunk_kernel<<<(d_c + threads - 1) / threads, threads, 0, (cudaStream_t)s>>>(
        kv, kv_stride, score, score_stride, ape_dev, pos0, n, ratio, d_c, state_kv, state_score, pooled);
    return attn_launch_status();
}
