/* Attention-side kernels of the CUDA backend: the device versions of the backend ops
 * rope_tail, fp8_kv, hadamard_fp4, store_f16, compressor_step, indexer_topk and attention
 * (src/backend/backend.h documents each op's semantics; the CPU backend in src/backend/cpu is the
 * reference). All pointers are device pointers except those marked host; every launcher only
 * enqueues work on `stream` (no host synchronization) and returns 0 or a cudaError_t value. */
#ifndef DSV4_CUDA_ATTN_H
#define DSV4_CUDA_ATTN_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st *dsv4_cuda_stream; /* == cudaStream_t */

int dsv4_cuda_rope_tail(dsv4_cuda_stream s, float *x, uint32_t n_rows, uint32_t n_head, uint32_t head_dim,
                        uint32_t pos0, uint32_t pos_step, const dsv4_rope *rope, bool inverse);
int dsv4_cuda_fp8_kv(dsv4_cuda_stream s, float *x, uint32_t n_rows, uint32_t width, uint32_t n_nope);
/* Fused (backend.h q_norm_rope, kv_norm_rope_fp8): in place, bitwise the unfused rmsnorm, rope
 * and fp8_kv launches. w_dev: the F32 norm weight; n_nope = 0 skips the FP8 step (EXACT). KV rows
 * live in shared memory: width <= DSV4_CUDA_KV_FUSED_MAX_WIDTH (48 KiB, no opt-in). */
#define DSV4_CUDA_KV_FUSED_MAX_WIDTH 12288u
int dsv4_cuda_q_norm_rope(dsv4_cuda_stream s, float *x, uint32_t n_rows, uint32_t n_head, uint32_t head_dim,
                          float eps, uint32_t pos0, uint32_t pos_step, const dsv4_rope *rope);
/* One token (backend.h q_norm_rope_idx): q_norm_rope of the n_head query heads and rope_tail +
 * hadamard_fp4 of the idx_n_head indexer query heads (idx_head_dim a power of two, a multiple of 32,
 * <= DSV4_CUDA_Q_IDX_MAX_WIDTH), one launch; bitwise the three launches. */
#define DSV4_CUDA_Q_IDX_MAX_WIDTH 1024u
int dsv4_cuda_q_norm_rope_idx(dsv4_cuda_stream s, float *q, uint32_t n_head, uint32_t head_dim, float eps,
                              float *iq, uint32_t idx_n_head, uint32_t idx_head_dim, uint32_t pos,
                              const dsv4_rope *rope);
/* A compressor's emitted row (backend.h emit_row): y = the rmsnorm (F32 weight w_dev) of x, RoPE at
 * pos, then FP8 over the first n_nope values or (hadamard) Hadamard + FP4; its cache copy to dst in
 * dst_type (F16, F32 or DSV4_KV_FP4). One launch; bitwise the rmsnorm, rope_tail, fp8_kv /
 * hadamard_fp4 and store_f16 launches. width <= DSV4_CUDA_KV_FUSED_MAX_WIDTH. */
int dsv4_cuda_emit_row(dsv4_cuda_stream s, const float *x, const float *w_dev, uint32_t width, float eps,
                       uint32_t pos, const dsv4_rope *rope, bool hadamard, uint32_t n_nope, float *y,
                       void *dst, uint32_t dst_type);
int dsv4_cuda_kv_norm_rope_fp8(dsv4_cuda_stream s, float *x, const float *w_dev, uint32_t n_rows,
                               uint32_t width, float eps, uint32_t pos0, uint32_t pos_step,
                               const dsv4_rope *rope, uint32_t n_nope);
int dsv4_cuda_hadamard_fp4(dsv4_cuda_stream s, float *x, uint32_t n_rows, uint32_t width);
/* dst_type DSV4_TYPE_F32 (f16-rounded floats), DSV4_TYPE_F16 or DSV4_KV_FP4 (width % 32 == 0). */
int dsv4_cuda_store_f16(dsv4_cuda_stream s, void *dst, uint32_t dst_type, const float *src, uint32_t n_rows,
                        uint32_t width);
/* ape_dev: the device copy of the F16 ape tensor [coff*d_c, ratio] (element (j, phase) at
 * phase*coff*d_c + j). */
int dsv4_cuda_compressor_step(dsv4_cuda_stream s, const float *kv, const float *score,
                              const uint16_t *ape_dev, uint32_t pos, uint32_t ratio, uint32_t d_c,
                              float *state_kv, float *state_score, float *pooled);
/* scratch: device buffer of at least dsv4_cuda_indexer_scratch_bytes(n_rows) bytes. */
size_t dsv4_cuda_indexer_scratch_bytes(uint32_t n_rows);
int dsv4_cuda_indexer_topk(dsv4_cuda_stream s, const float *q, const float *w, float w_scale, uint32_t n_head,
                           uint32_t head_dim, uint32_t rows_type, const void *rows, uint32_t n_rows,
                           uint32_t k, int32_t *sel, void *scratch);
/* sinks_dev: device copy of the F32 [n_head] sink logits. */
/* kv_type: DSV4_TYPE_F32 or DSV4_TYPE_F16 raw and comp rows. */
int dsv4_cuda_attention(dsv4_cuda_stream s, const float *q, uint32_t n_head, uint32_t head_dim,
                        uint32_t kv_type, const void *raw, uint32_t raw_cap, uint32_t raw_start,
                        uint32_t n_raw, const void *comp, uint32_t n_comp, const int32_t *sel, uint32_t n_sel,
                        const float *sinks_dev, float kq_scale, float *out);

/* Batched prefill ops (backend.h: compressor_chunk, indexer_topk_chunk, attention_chunk), each
 * one launch per chunk (the indexer: one scoring + one selection launch per group of tokens whose
 * scores fit DSV4_CUDA_INDEXER_CHUNK_SCRATCH), with the single-token kernels' float order. */
int dsv4_cuda_compressor_chunk(dsv4_cuda_stream s, const float *kv, uint64_t kv_stride, const float *score,
                               uint64_t score_stride, const uint16_t *ape_dev, uint32_t pos0, uint32_t n,
                               uint32_t ratio, uint32_t d_c, float *state_kv, float *state_score,
                               float *pooled);
#define DSV4_CUDA_INDEXER_CHUNK_SCRATCH ((size_t)128 << 20)
/* scratch of dsv4_cuda_indexer_topk_chunk for these arguments */
size_t dsv4_cuda_indexer_chunk_scratch_bytes(uint32_t pos0, uint32_t n, uint32_t ratio);
int dsv4_cuda_indexer_topk_chunk(dsv4_cuda_stream s, const float *q, const float *w, float w_scale,
                                 uint32_t n_head, uint32_t head_dim, uint32_t rows_type, const void *rows,
                                 uint32_t pos0, uint32_t n, uint32_t ratio, uint32_t k, int32_t *sel,
                                 void *scratch);
int dsv4_cuda_attention_chunk(dsv4_cuda_stream s, const float *q, uint32_t n, uint32_t n_head,
                              uint32_t head_dim, uint32_t pos0, const float *chunk_kv, uint32_t kv_type,
                              const void *raw, uint32_t raw_cap, const void *comp, uint32_t ratio,
                              const int32_t *sel, uint32_t n_sel, const float *sinks_dev, float kq_scale,
                              float *out);

/* Fast sink attention for DS4 numerics (cuda_attn_fast.cu): the same contracts as
 * dsv4_cuda_attention / dsv4_cuda_attention_chunk, f32 with fused multiply-adds in another order
 * (within 2e-6 of max|exact| per head on realistic data), deterministic. Applies when _ok says so
 * (head_dim 512, n_head a multiple of 16, 16-byte aligned q, out and rows); scratch: a device
 * buffer of dsv4_cuda_attention_fast_scratch_bytes() bytes (a constant) for the split partials
 * (decode always uses it: the same launches at every position, as a recorded step needs). bar (decode
 * only; NULL: none): DSV4_CUDA_FA_BAR_WORDS zeroed words of device memory that no other launch uses at
 * the same time; with it the split kernel's CTAs meet and fold their partials themselves (the
 * combine kernel's arithmetic: the same bits) and the combine launch is left out. */
#define DSV4_CUDA_FA_BAR_WORDS 128
size_t dsv4_cuda_attention_fast_scratch_bytes(void);
bool dsv4_cuda_attention_fast_ok(uint32_t n_head, uint32_t head_dim, const void *q, const void *out,
                                 const void *raw, const void *comp, const void *chunk_kv);
int dsv4_cuda_attention_fast(dsv4_cuda_stream s, const float *q, uint32_t n_head, uint32_t head_dim,
                             uint32_t kv_type, const void *raw, uint32_t raw_cap, uint32_t raw_start,
                             uint32_t n_raw, const void *comp, uint32_t n_comp, const int32_t *sel,
                             uint32_t n_sel, const float *sinks_dev, float kq_scale, float *out,
                             void *scratch, unsigned *bar);
/* dsv4_cuda_attention_fast, then the heads' inverse RoPE at position pos (dsv4_cuda_rope_tail(out, 1,
 * n_head, head_dim, pos, 1, rope, true)) inside the combine launch: the same bits as the two calls.
 * outq (NULL: none): the combine also writes out's Q8_0 activation blocks there (n_head * head_dim / 32
 * blocks of 36 B, quant_act_q8_0's bytes), so the output projection needs no quantizer launch. */
int dsv4_cuda_attention_fast_rope(dsv4_cuda_stream s, const float *q, uint32_t n_head, uint32_t head_dim,
                                  uint32_t kv_type, const void *raw, uint32_t raw_cap, uint32_t raw_start,
                                  uint32_t n_raw, const void *comp, uint32_t n_comp, const int32_t *sel,
                                  uint32_t n_sel, const float *sinks_dev, float kq_scale, float *out,
                                  void *scratch, uint32_t pos, const dsv4_rope *rope, void *outq,
                                  unsigned *bar);
/* dsv4_cuda_attention_fast_rope of the raw query heads q, normed (no weight, eps) and rotated at pos on the
 * way in, q itself left as it is: the same bits as dsv4_cuda_q_norm_rope(q, 1, n_head, head_dim, eps, pos,
 * 1, rope) before the call (DSV4_FUSED_ATTN_QNR). */
int dsv4_cuda_attention_fast_qnr_rope(dsv4_cuda_stream s, const float *q, uint32_t n_head, uint32_t head_dim,
                                      uint32_t kv_type, const void *raw, uint32_t raw_cap, uint32_t raw_start,
                                      uint32_t n_raw, const void *comp, uint32_t n_comp, const int32_t *sel,
                                      uint32_t n_sel, const float *sinks_dev, float kq_scale, float *out,
                                      void *scratch, uint32_t pos, const dsv4_rope *rope, float eps,
                                      void *outq, unsigned *bar);
int dsv4_cuda_attention_chunk_fast(dsv4_cuda_stream s, const float *q, uint32_t n, uint32_t n_head,
                                   uint32_t head_dim, uint32_t pos0, const float *chunk_kv, uint32_t kv_type,
                                   const void *raw, uint32_t raw_cap, const void *comp, uint32_t ratio,
                                   const int32_t *sel, uint32_t n_sel, const float *sinks_dev, float kq_scale,
                                   float *out, void *scratch);

/* Tensor-core prefill attention (cuda_attn_tc.cu, the prefill default, DSV4_CUDA_ATTN=fast switches back):
 * the contract of dsv4_cuda_attention_chunk with Q as f16 hi + lo and the softmax weights rounded to f16
 * (within 2e-3 of max|f64| per head vector; 2.9e-4 in the host emulation), deterministic, not bitwise the f32
 * decode. Applies when _ok says so (n > 0, head_dim 512, n_head a multiple of 64, F16 rows, a chunk_kv,
 * 16-byte aligned q, out and rows, the shared memory of an H100/H200). scratch (or nullptr): when it holds n
 * x head_dim halves, the chunk's rows are rounded to f16 there first (every row then copied asynchronously);
 * bitwise the same result either way. qnr_rope (or nullptr): q holds the raw query heads, normed (no
 * weight, qnr_eps) and rotated at positions pos0.. on the way in, q itself left as it is: the same bits as
 * dsv4_cuda_q_norm_rope(q, n, n_head, head_dim, qnr_eps, pos0, 1, qnr_rope) before the call
 * (DSV4_FUSED_ATTN_CHUNK_QNR; _qnr_ok: the rotations it takes). out_rope (or nullptr): the heads' inverse
 * RoPE on the way out, the same bits as dsv4_cuda_rope_tail(out, n, n_head, head_dim, pos0, 1, out_rope,
 * true) after the call. */
bool dsv4_cuda_attention_chunk_tc_ok(uint32_t n, uint32_t n_head, uint32_t head_dim, uint32_t kv_type,
                                     const void *q, const void *out, const void *raw, const void *comp,
                                     const void *chunk_kv);
int dsv4_cuda_attention_chunk_tc(dsv4_cuda_stream s, const float *q, uint32_t n, uint32_t n_head,
                                 uint32_t head_dim, uint32_t pos0, const float *chunk_kv, uint32_t kv_type,
                                 const void *raw, uint32_t raw_cap, const void *comp, uint32_t ratio,
                                 const int32_t *sel, uint32_t n_sel, const float *sinks_dev, float kq_scale,
                                 float *out, void *scratch, size_t scratch_bytes, float qnr_eps,
                                 const dsv4_rope *qnr_rope, const dsv4_rope *out_rope);
bool dsv4_cuda_attention_chunk_tc_qnr_ok(const dsv4_rope *rope);

#ifdef __cplusplus
}
#endif
#endif
