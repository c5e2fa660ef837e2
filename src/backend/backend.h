/* The backend op table: what graph/ may ask a device to do.
 *
 * A backend is a struct of function pointers plus an opaque context. graph/ expresses one layer
 * as calls into this table; it never dereferences a device pointer and never knows how a kernel
 * is written. A backend never knows what a layer is: every op takes plain shapes, device
 * pointers and weight views.
 *
 * Conventions shared by every op:
 *  - "device pointer" (float *, int32_t *, void *) means memory obtained from buf_alloc (or a
 *    pointer offset into it). graph/ only does pointer arithmetic on them. On the CPU backend
 *    they are host pointers.
 *  - Weights are `const dsv4_tensor *` views into the GGUF mmap (model/model.h); a device backend
 *    resolves a view to its own resident copy. A 2-D weight [in, out] computes y[o] = W[o] . x.
 *  - Ops are batched over `n` tokens (rows); decode is n == 1. The result for one row never
 *    depends on n, on the other rows or on the number of threads: a CPU decode step and a CPU
 *    prefill chunk of any size are bitwise identical.
 *  - Host pointers (token ids, positions) are marked `host`.
 *  - Every op returns DSV4_OK or fills err. Ops run in call order (a device backend may queue
 *    them; `sync` waits).
 *  - KV rows (the session state's raw, compressed and indexer rows) have an element type
 *    (`kv_type`, `rows_type`, `dst_type`): DSV4_TYPE_F32, DSV4_TYPE_F16 (IEEE half, 2 bytes) or,
 *    for indexer rows only (indexer_topk*, store_f16), DSV4_KV_FP4 (below); ops that read them
 *    decode each element to f32 exactly and otherwise compute as for f32 rows.
 *  - Fused ops are optional: graph/ asks `fused_available` first and, if the fused op is absent
 *    or fails, runs the unfused sequence, which must leave the same state. */
#ifndef DSV4_BACKEND_H
#define DSV4_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "model/model.h"

/* RoPE on the last n_rot dims of each head (interleaved pairs, GGML "normal" mode). The layer's
 * choice of base / YaRN is made by graph/ (graph/rope.c); the backend only evaluates it. */
typedef struct dsv4_rope {
    uint32_t n_rot;
    float freq_base;
    float freq_scale;       /* 1 or 1/factor (YaRN) */
    float ext_factor;       /* 0 (plain) or 1 (YaRN ramp on) */
    float attn_factor;      /* magnitude multiplier fed to the YaRN helper (cancels its own scaling) */
    float corr_lo, corr_hi; /* YaRN correction range in pair units */
} dsv4_rope;

/* Fused ops a backend may offer (graph/ falls back to the unfused sequence). */
typedef enum dsv4_fused_op {
    DSV4_FUSED_HC_PRE_NORM = 0,       /* hc_pre + rmsnorm(weight) of the collapsed row */
    DSV4_FUSED_Q_NORM_ROPE = 1,       /* per-head rmsnorm (no weight) + rope_tail of the queries */
    DSV4_FUSED_KV_NORM_ROPE_FP8 = 2,  /* rmsnorm(weight) + rope_tail + fp8_kv of the KV rows */
    DSV4_FUSED_PARALLEL_FFN = 3,      /* the shared expert on a side lane while the routed experts run */
    DSV4_FUSED_PARALLEL_ATTN = 4,     /* decode: the KV row's norm/RoPE/FP8, cache push and compressors on a
                                         side lane while the query projections run */
    DSV4_FUSED_HC_POST_ADD = 5,       /* add(routed, shared) inside the FFN's hc_post */
    DSV4_FUSED_ATTN_ROPE = 6,         /* decode: the heads' inverse rope_tail inside the attention */
    DSV4_FUSED_MOE_SUM_POST = 7,      /* decode: the routed experts' slot sum inside the FFN's hc_post */
    DSV4_FUSED_Q_NORM_ROPE_IDX = 8,   /* decode with the indexer: q_norm_rope of the query heads and
                                         rope_tail + hadamard_fp4 of the indexer's query heads, one pass */
    DSV4_FUSED_EMIT_ROW = 9,          /* a compressor's emitted row: rmsnorm(weight), rope_tail, fp8_kv or
                                         hadamard_fp4, and its cache store, one pass */
    DSV4_FUSED_ROUTER_TOPK = 10,      /* decode, non-hash layers: router_select after its logits' products, in
                                         the same call (the router + shared gate/up matmul_multi) */
    DSV4_FUSED_HC_POST_PRE_NORM = 11, /* decode: the attention's hc_post inside the FFN's hc_pre_norm */
    DSV4_FUSED_ATTN_CHUNK_QNR = 12,   /* prefill chunks: the queries' per-head norm + rope_tail (q_norm_rope)
                                         inside attention_chunk, which reads them raw, and the heads'
                                         inverse rope_tail on its way out */
    DSV4_FUSED_ATTN_QNR = 13,         /* decode without the indexer: q_norm_rope inside attention_rope, which
                                         reads the queries raw */
    DSV4_FUSED_COUNT
} dsv4_fused_op;

/* What graph/ is about to run, so a backend can gate a fused path on its device caps (its own
 * context), mode, shapes, types and placement. */
typedef struct dsv4_fused_query {
    uint32_t n_tokens;      /* rows of this call (1 = decode) */
    uint32_t width;         /* main row width (e.g. n_embd) */
    uint32_t weight_type;   /* dsv4_type of the main weight */
    uint32_t mode;          /* 0 = decode (one token), 1 = batch (prefill chunk) */
    uint32_t n_hc;          /* HC streams */
    uint32_t aux_type;      /* dsv4_type of the secondary weight (hc_pre_norm, kv_norm_rope_fp8: the
                               norm weight) */
    uint32_t tier, n_tiers; /* placement: the tier running the op and how many there are */
    uint32_t width2;        /* a second width where the op has one (moe_sum_post: the experts' ff;
                               q_norm_rope_idx: the indexer's head_dim; emit_row: the cache row type) */
} dsv4_fused_query;

struct dsv4_backend; /* copy_from takes the source tier's backend */

/* KV row type of packed indexer rows (not a GGUF type id): per block of 32 elements one int8
 * exponent e, then 16 bytes of 4-bit codes (element 2i in the low nibble): sign << 3 | index of
 * the E2M1 magnitude {0, 0.5, 1, 1.5, 2, 3, 4, 6}. An element reads as f16_round(±m * 2^e).
 * Stored from x: e = the smallest exponent with max|x| <= 6 * 2^e (clamped to [-128, 127]),
 * m = the E2M1 value nearest |x| / 2^e (ties to even). A row after hadamard_fp4 is stored
 * exactly: it reads back as f16_round(x), as an F16 row does. */
#define DSV4_KV_FP4 0x1000u
#define DSV4_KV_FP4_BLOCK_BYTES 17u /* per 32 elements */

/* Lanes (the `lanes` op): ops issued after DSV4_LANE_SIDE run on a side lane that starts once
 * everything issued before it is done; after DSV4_LANE_MAIN they run on the main lane again,
 * concurrently with the side lane's ops; after DSV4_LANE_JOIN the main lane also waits for the
 * side lane. Ops on the two lanes must not touch the same buffers. */
enum { DSV4_LANE_SIDE = 1, DSV4_LANE_MAIN = 2, DSV4_LANE_JOIN = 3 };

/* One product of matmul_multi: y[t*y_stride + o] = W[row0 + o] . x[t*x_stride : + W.ne[0]]. */
typedef struct dsv4_matmul_item {
    const dsv4_tensor *w;
    uint64_t row0, n_out;
    const float *x;
    uint64_t x_stride;
    float *y;
    uint64_t y_stride;
} dsv4_matmul_item;
typedef struct dsv4_backend_ops {
    const char *name;

    /* ---- memory ---- */
    dsv4_status (*buf_alloc)(void *ctx, size_t bytes, void **out, dsv4_error *err);
    void (*buf_free)(void *ctx, void *ptr);
    dsv4_status (*write)(void *ctx, void *dst, const void *host_src, size_t bytes, dsv4_error *err);
    dsv4_status (*read)(void *ctx, void *host_dst, const void *src, size_t bytes, dsv4_error *err);
    dsv4_status (*copy)(void *ctx, void *dst, const void *src, size_t bytes, dsv4_error *err);
    dsv4_status (*fill_f32)(void *ctx, float *dst, float value, size_t n, dsv4_error *err);
    dsv4_status (*sync)(void *ctx, dsv4_error *err);
    /* Can matmul / moe take weights of this dsv4_type? */
    bool (*supports_weight_type)(void *ctx, uint32_t type);
    /* Is a fused op available for this device, mode, shapes, types and placement? (docs/PATHS.md) */
    bool (*fused_available)(void *ctx, dsv4_fused_op op, const dsv4_fused_query *q);

    /* ---- embedding and hyper-connections ---- */
    /* out[t][h][:] = f32(row tokens[t] of emb), for every one of n_hc streams. */
    dsv4_status (*embed)(void *ctx, const dsv4_tensor *emb, const int32_t *host_tokens, uint32_t n,
                         uint32_t n_hc, float *out_hc, dsv4_error *err);
    /* HC pre: flat = rmsnorm_noweight(x[t]) (n_hc*n_embd), mix = fn . flat, split (pre sigmoid+eps,
     * post 2*sigmoid, combine row-softmax+eps then column/row Sinkhorn, `iters` passes in all),
     * u[t] = sum_h pre[h] * x[t][h]. split[t] holds [pre(n_hc), post(n_hc), comb(n_hc*n_hc)]. */
    dsv4_status (*hc_pre)(void *ctx, const dsv4_tensor *fn, const dsv4_tensor *scale, const dsv4_tensor *base,
                          const float *x_hc, uint32_t n, uint32_t n_hc, uint32_t n_embd, uint32_t iters,
                          float rms_eps, float hc_eps, float *u, float *split, dsv4_error *err);
    /* HC post: out[t][c][d] = f[t][d]*post[c] + sum_r comb[r*n_hc + c] * x[t][r][d]. */
    dsv4_status (*hc_post)(void *ctx, const float *f, const float *x_hc, const float *split, uint32_t n,
                           uint32_t n_hc, uint32_t n_embd, float *out_hc, dsv4_error *err);
    /* HC head: w = sigmoid(fn . rmsnorm_noweight(x) * scale[0] + base) + hc_eps; y = sum_h w[h] x[h]. */
    dsv4_status (*hc_head)(void *ctx, const dsv4_tensor *fn, const dsv4_tensor *scale,
                           const dsv4_tensor *base, const float *x_hc, uint32_t n, uint32_t n_hc,
                           uint32_t n_embd, float rms_eps, float hc_eps, float *y, dsv4_error *err);

    /* ---- dense ---- */
    /* y[r] = x[r] * (1/sqrtf(mean(x[r]^2)+eps)) (* w when w != NULL), n_rows rows of `width`.
     * Σx² is accumulated in double (ds4 CPU). y may equal x (in place). */
    dsv4_status (*rmsnorm)(void *ctx, const float *x, const dsv4_tensor *w, uint32_t n_rows, uint32_t width,
                           float eps, float *y, dsv4_error *err);
    /* y[t*y_stride + o] = W[row0 + o] . x[t*x_stride : + W.ne[0]] for o < n_out, t < n. The
     * activation format follows the weight type (Q8_0 weights: Q8_0 activations; K-quants and
     * IQ2: Q8_K; float weights: f32). */
    dsv4_status (*matmul)(void *ctx, const dsv4_tensor *w, uint64_t row0, uint64_t n_out, const float *x,
                          uint64_t x_stride, uint32_t n, float *y, uint64_t y_stride, dsv4_error *err);
    /* Optional (NULL: graph/ calls matmul once per group): a block-diagonal product. Group g takes
     * rows [g*R, (g+1)*R) of W (R = rows(W) / n_groups) and inputs x[t*x_stride + g*in : + in]
     * (in = W.ne[0]) into y[t*y_stride + g*R : + R]. Each value is what matmul gives for it. */
    dsv4_status (*matmul_grouped)(void *ctx, const dsv4_tensor *w, uint32_t n_groups, const float *x,
                                  uint64_t x_stride, uint32_t n, float *y, uint64_t y_stride,
                                  dsv4_error *err);
    /* Optional (NULL: graph/ calls matmul once per item): independent products over n tokens in
     * one call, so a backend may launch products that share their input (or just follow each
     * other) together. Each value is exactly what matmul gives for its item. */
    dsv4_status (*matmul_multi)(void *ctx, const dsv4_matmul_item *items, uint32_t n_items, uint32_t n,
                                dsv4_error *err);
    /* Optional (NULL: no concurrency): switch lanes (DSV4_LANE_*), see above. JOIN must follow a
     * SIDE even when an op in between failed; it reports a failure of the lane machinery only. */
    dsv4_status (*lanes)(void *ctx, int what, dsv4_error *err);
    /* out = a + b (n floats). */
    dsv4_status (*add)(void *ctx, const float *a, const float *b, size_t n, float *out, dsv4_error *err);
    /* out = silu(min(g, clamp)) * clamp(u, -clamp, clamp) (no clamp when clamp <= 1e-6). */
    dsv4_status (*swiglu)(void *ctx, const float *g, const float *u, size_t n, float clamp, float *out,
                          dsv4_error *err);

    /* ---- attention pieces ---- */
    /* RoPE on rows of n_head heads of head_dim; row r has position pos0 + r*pos_step. */
    dsv4_status (*rope_tail)(void *ctx, float *x, uint32_t n_rows, uint32_t n_head, uint32_t head_dim,
                             uint32_t pos0, uint32_t pos_step, const dsv4_rope *rope, bool inverse,
                             dsv4_error *err);
    /* FP8 E4M3 round trip of dims [0, n_nope) of each row (blocks of 64, power-of-two scales). */
    dsv4_status (*fp8_kv)(void *ctx, float *x, uint32_t n_rows, uint32_t width, uint32_t n_nope,
                          dsv4_error *err);
    /* Hadamard (width) then FP4 E2M1 round trip (blocks of 32) of each row of width dims. */
    dsv4_status (*hadamard_fp4)(void *ctx, float *x, uint32_t n_rows, uint32_t width, dsv4_error *err);
    /* dst rows = f16_round(src rows), stored as dst_type: F32 (f32 values, dst may equal src) or F16
     * (the halves themselves: exact, since the values are f16-rounded; in EXACT numerics, where
     * F32 rows take src unrounded, an F16 dst still gets the halves). */
    dsv4_status (*store_f16)(void *ctx, void *dst, uint32_t dst_type, const float *src, uint32_t n_rows,
                             uint32_t width, dsv4_error *err);
    /* One compressor frontier step (spec model-attention-hc.md §4.4) for the token at `pos`:
     * state row (ratio 4: 4 + pos%4, else pos%ratio) <- (kv, score + ape[:, pos%ratio]), both
     * `coff*d_c` wide (coff = 2 for ratio 4, else 1). When (pos+1) % ratio == 0 it also writes the
     * per-dimension softmax pooling of the window into pooled (d_c) and, for ratio 4, shifts the
     * frontier (rows 0..3 <- rows 4..7). state_* hold coff*ratio rows of coff*d_c. */
    dsv4_status (*compressor_step)(void *ctx, const float *kv, const float *score, const dsv4_tensor *ape,
                                   uint32_t pos, uint32_t ratio, uint32_t d_c, float *state_kv,
                                   float *state_score, float *pooled, dsv4_error *err);
    /* Indexer: score[i] = sum_h relu(rows[i] . q[h]) * (w[h] * w_scale) for i < n_rows, then the
     * k best rows (ties to the lower index) as ascending row indices in sel (k <= n_rows). */
    dsv4_status (*indexer_topk)(void *ctx, const float *q, const float *w, float w_scale, uint32_t n_head,
                                uint32_t head_dim, uint32_t rows_type, const void *rows, uint32_t n_rows,
                                uint32_t k, int32_t *sel, dsv4_error *err);
    /* Sink attention of one query (n_head x head_dim) over K = V rows: the raw window (n_raw rows,
     * logical row i at raw[((raw_start + i) % raw_cap) * head_dim]) then the compressed rows
     * comp[0..n_comp) or, when sel != NULL, comp[sel[0..n_sel)); raw and comp rows are kv_type.
     * sinks: F32 [n_head] logits. */
    dsv4_status (*attention)(void *ctx, const float *q, uint32_t n_head, uint32_t head_dim, uint32_t kv_type,
                             const void *raw, uint32_t raw_cap, uint32_t raw_start, uint32_t n_raw,
                             const void *comp, uint32_t n_comp, const int32_t *sel, uint32_t n_sel,
                             const dsv4_tensor *sinks, float kq_scale, float *out, dsv4_error *err);

    /* ---- MoE ---- */
    /* From router logits (n x n_expert): p = sqrt(softplus(logit)); select k experts per token by
     * tid2eid[host_tokens[t]] (when tid2eid != NULL) or by top-k of p + bias (bias may be NULL;
     * ties to the lower index); weights = p[sel] / max(sum p[sel], 2^-14) * scale. */
    dsv4_status (*router_select)(void *ctx, const float *logits, uint32_t n, uint32_t n_expert, uint32_t k,
                                 const dsv4_tensor *bias, const dsv4_tensor *tid2eid,
                                 const int32_t *host_tokens, float scale, int32_t *sel, float *weights,
                                 dsv4_error *err);
    /* Routed experts: out[t] = sum_slot down[sel] . (silu(min(g,c)) * clamp(u,+-c) * weight), with
     * g = gate[sel] . x[t], u = up[sel] . x[t]; slots summed in order from 0. */
    dsv4_status (*moe)(void *ctx, const dsv4_tensor *gate, const dsv4_tensor *up, const dsv4_tensor *down,
                       const float *x, uint32_t n, const int32_t *sel, const float *weights, uint32_t k,
                       float clamp, float *out, dsv4_error *err);

    /* ---- fused (optional; NULL when not offered) ---- */
    dsv4_status (*hc_pre_norm)(void *ctx, const dsv4_tensor *fn, const dsv4_tensor *scale,
                               const dsv4_tensor *base, const dsv4_tensor *norm_w, const float *x_hc,
                               uint32_t n, uint32_t n_hc, uint32_t n_embd, uint32_t iters, float rms_eps,
                               float hc_eps, float *u_normed, float *split, dsv4_error *err);
    /* In place: rmsnorm(x, NULL, n_rows * n_head rows of head_dim, eps) then rope_tail(x, n_rows,
     * n_head, head_dim, pos0, pos_step, rope, forward); every value bitwise the unfused pair's. */
    dsv4_status (*q_norm_rope)(void *ctx, float *x, uint32_t n_rows, uint32_t n_head, uint32_t head_dim,
                               float eps, uint32_t pos0, uint32_t pos_step, const dsv4_rope *rope,
                               dsv4_error *err);
    /* In place: rmsnorm(x, norm_w, n_rows, width, eps), rope_tail(x, n_rows, 1, width, pos0,
     * pos_step, rope, forward), fp8_kv(x, n_rows, width, n_nope); bitwise the unfused three. */
    dsv4_status (*kv_norm_rope_fp8)(void *ctx, float *x, const dsv4_tensor *norm_w, uint32_t n_rows,
                                    uint32_t width, float eps, uint32_t pos0, uint32_t pos_step,
                                    const dsv4_rope *rope, uint32_t n_nope, dsv4_error *err);

    /* One token at pos, in place: q_norm_rope(q, 1, n_head, head_dim, eps, pos, 1, rope), then
     * rope_tail(iq, 1, idx_n_head, idx_head_dim, pos, 1, rope, forward) and hadamard_fp4(iq,
     * idx_n_head, idx_head_dim); bitwise the three. */
    dsv4_status (*q_norm_rope_idx)(void *ctx, float *q, uint32_t n_head, uint32_t head_dim, float eps,
                                   float *iq, uint32_t idx_n_head, uint32_t idx_head_dim, uint32_t pos,
                                   const dsv4_rope *rope, dsv4_error *err);

    /* One compressed row, out of place: y = rmsnorm(x, norm_w, 1, width, eps), then in y rope_tail(y, 1,
     * 1, width, pos, 0, rope, forward) and fp8_kv(y, 1, width, n_nope) (hadamard false) or
     * hadamard_fp4(y, 1, width) (hadamard true), then store_f16(dst, dst_type, y, 1, width); bitwise
     * the four ops. x is left as it was. */
    dsv4_status (*emit_row)(void *ctx, const float *x, const dsv4_tensor *norm_w, uint32_t width, float eps,
                            uint32_t pos, const dsv4_rope *rope, bool hadamard, uint32_t n_nope, float *y,
                            void *dst, uint32_t dst_type, dsv4_error *err);

    /* One token: the products of items (as matmul_multi; items[0] gives the n_expert router logits),
     * then router_select(items[0].y, 1, n_expert, k, bias, NULL, NULL, scale, sel, weights); bitwise
     * the pair. */
    dsv4_status (*matmuls_router)(void *ctx, const dsv4_matmul_item *items, uint32_t n_items, uint32_t n,
                                  uint32_t n_expert, uint32_t k, const dsv4_tensor *bias, float scale,
                                  int32_t *sel, float *weights, dsv4_error *err);

    /* One token: hc_post(f, x_hc, split_old, 1, n_hc, n_embd, out_hc), then hc_pre_norm(fn, scale, base,
     * norm_w, out_hc, 1, n_hc, n_embd, iters, rms_eps, hc_eps, u_normed, split_new), split_new another
     * buffer than split_old (which the fallback still needs); bitwise the pair. */
    dsv4_status (*hc_post_pre_norm)(void *ctx, const float *f, const float *x_hc, const float *split_old,
                                    float *out_hc, const dsv4_tensor *fn, const dsv4_tensor *scale,
                                    const dsv4_tensor *base, const dsv4_tensor *norm_w, uint32_t n_hc,
                                    uint32_t n_embd, uint32_t iters, float rms_eps, float hc_eps,
                                    float *u_normed, float *split_new, dsv4_error *err);

    /* hc_post(f = a + b, ...): each f[d] is the add op's a[d] + b[d]; bitwise add + hc_post. */
    dsv4_status (*hc_post_add)(void *ctx, const float *a, const float *b, const float *x_hc,
                               const float *split, uint32_t n, uint32_t n_hc, uint32_t n_embd, float *out_hc,
                               dsv4_error *err);
    /* moe without its slot sum: slots[(t * k + s) * embd + d] is slot s's weighted down output, so
     * that moe's out[t][d] = 0.0f + slots[t][0][d] + ... + slots[t][k-1][d] (in that order). */
    dsv4_status (*moe_slots)(void *ctx, const dsv4_tensor *gate, const dsv4_tensor *up,
                             const dsv4_tensor *down, const float *x, uint32_t n, const int32_t *sel,
                             const float *weights, uint32_t k, float clamp, float *slots, dsv4_error *err);
    /* hc_post_add(a, b, ...) with a = the slot sum of moe_slots' output (moe's order); bitwise moe +
     * hc_post_add. */
    dsv4_status (*hc_post_slots)(void *ctx, const float *slots, uint32_t k, const float *b, const float *x_hc,
                                 const float *split, uint32_t n, uint32_t n_hc, uint32_t n_embd,
                                 float *out_hc, dsv4_error *err);
    /* attention(...) of one query token at position pos, then rope_tail(out, 1, n_head, head_dim,
     * pos, 1, rope, inverse); bitwise the pair. */
    dsv4_status (*attention_rope)(void *ctx, const float *q, uint32_t n_head, uint32_t head_dim,
                                  uint32_t kv_type, const void *raw, uint32_t raw_cap, uint32_t raw_start,
                                  uint32_t n_raw, const void *comp, uint32_t n_comp, const int32_t *sel,
                                  uint32_t n_sel, const dsv4_tensor *sinks, float kq_scale, uint32_t pos,
                                  const dsv4_rope *rope, float *out, dsv4_error *err);
    /* attention_rope(...) of one raw query token at pos whose heads are first normed and rotated as
     * q_norm_rope(q, 1, n_head, head_dim, eps, pos, 1, rope) does; q is left as it was (the fallback
     * runs the ops on it); bitwise q_norm_rope + attention_rope. */
    dsv4_status (*attention_qnr)(void *ctx, const float *q, uint32_t n_head, uint32_t head_dim,
                                 uint32_t kv_type, const void *raw, uint32_t raw_cap, uint32_t raw_start,
                                 uint32_t n_raw, const void *comp, uint32_t n_comp, const int32_t *sel,
                                 uint32_t n_sel, const dsv4_tensor *sinks, float kq_scale, float eps,
                                 uint32_t pos, const dsv4_rope *rope, float *out, dsv4_error *err);

    /* ---- step recording (optional; NULL: every op runs as it is issued) ---- */
    /* step_begin: the ops issued until step_end form one decode step (n = 1), which the backend
     * records without running it (a CUDA Graph, captured per step and updated in place; one per
     * key: equal keys = the same ops, arguments may differ). The step's token (embed, hash
     * routing) comes from step_run, not from the ops' host arguments, so the next step can be
     * recorded while the current one runs. DSV4_ERR_UNSUPPORTED: no recording (ops then run as
     * issued). Between begin and end no op may read to the host or synchronize. step_end(abort)
     * keeps (or drops) the recording; on failure nothing was recorded. step_run runs the last
     * recording of key with that token; DSV4_ERR_UNSUPPORTED when there is none or it is stale
     * (memory it used was freed since): record it again. Nothing of a step runs before step_run. */
    dsv4_status (*step_begin)(void *ctx, uint64_t key, dsv4_error *err);
    dsv4_status (*step_end)(void *ctx, bool abort, dsv4_error *err);
    dsv4_status (*step_run)(void *ctx, uint64_t key, int32_t token, dsv4_error *err);
    /* A step across tiers (optional; NULL: steps are recorded on one tier only). The graph begins
     * the step on the lead tier (the embedding's); when it switches to another tier (the tier copy
     * has ordered that tier after the lead's work), step_join(tier, lead) makes the tier's ops
     * part of the lead's recording and gives them the step's token; before step_end, step_leave
     * orders the lead after each joined tier's ops. step_run on the lead then runs every tier's
     * ops, after the work already queued on each joined tier and before any queued later. Both
     * contexts are of this backend. */
    dsv4_status (*step_join)(void *ctx, void *lead_ctx, dsv4_error *err);
    dsv4_status (*step_leave)(void *ctx, void *lead_ctx, dsv4_error *err);
    /* ---- batched attention of a prefill chunk (optional; NULL when not offered) ----
     * graph/ uses them only when all three are offered and the chunk has n > 1 tokens; each
     * result is bitwise what the per-token ops above give (the per-token loop is the fallback). */
    /* n successive compressor_step calls for positions pos0..pos0+n-1, token t reading
     * kv + t*kv_stride and score + t*score_stride: the state ends as after those calls, and the
     * pooled row of every position p with (p+1) % ratio == 0 goes, in position order, to
     * pooled + e*d_c for e < n_emit = (pos0+n)/ratio - pos0/ratio (compressed row pos0/ratio + e).
     * pooled does not overlap the inputs or the state. */
    dsv4_status (*compressor_chunk)(void *ctx, const float *kv, uint64_t kv_stride, const float *score,
                                    uint64_t score_stride, const dsv4_tensor *ape, uint32_t pos0, uint32_t n,
                                    uint32_t ratio, uint32_t d_c, float *state_kv, float *state_score,
                                    float *pooled, dsv4_error *err);
    /* indexer_topk for n query tokens at positions pos0..pos0+n-1: token t (q + t*n_head*head_dim,
     * w + t*n_head) sees the first n_rows[t] = (pos0+t+1)/ratio rows and writes its top-k to
     * sel + t*k exactly as indexer_topk would; a token with n_rows[t] <= k is skipped (its sel
     * row is left untouched). */
    dsv4_status (*indexer_topk_chunk)(void *ctx, const float *q, const float *w, float w_scale,
                                      uint32_t n_head, uint32_t head_dim, uint32_t rows_type,
                                      const void *rows, uint32_t pos0, uint32_t n, uint32_t ratio, uint32_t k,
                                      int32_t *sel, dsv4_error *err);
    /* attention for n queries (q, out: n rows of n_head*head_dim) at positions pos0..pos0+n-1.
     * Token t (p = pos0+t) reads the raw window positions p+1-min(p+1, raw_cap) .. p, oldest first:
     * a position r >= pos0 from chunk_kv + (r-pos0)*head_dim, an older one from
     * raw + (r % raw_cap)*head_dim (the ring as it was before the chunk); then n_comp = (p+1)/ratio
     * compressed rows (ratio 0: none): comp[sel[t*n_sel + j]] for j < n_sel when sel != NULL and
     * n_comp > n_sel (the token ran the indexer), else comp[0..n_comp). raw and comp rows are
     * kv_type, chunk_kv rows F32. Sinks and kq_scale as in attention; each token's output equals
     * attention's for the same rows. */
    dsv4_status (*attention_chunk)(void *ctx, const float *q, uint32_t n, uint32_t n_head, uint32_t head_dim,
                                   uint32_t pos0, const float *chunk_kv, uint32_t kv_type, const void *raw,
                                   uint32_t raw_cap, const void *comp, uint32_t ratio, const int32_t *sel,
                                   uint32_t n_sel, const dsv4_tensor *sinks, float kq_scale, float *out,
                                   dsv4_error *err);
    /* attention_chunk with q holding the raw query heads: each head row normed (no weight, eps) and
     * rotated (rope at pos0 + t, as q_norm_rope(q, n, n_head, head_dim, eps, pos0, 1, rope)) on the way
     * in, q itself left as it is; with rope_out the heads also get their inverse RoPE on the way out
     * (rope_tail(out, n, n_head, head_dim, pos0, 1, rope, true)); out equals the ops in that order bit
     * for bit. Optional
     * (DSV4_FUSED_ATTN_CHUNK_QNR); DSV4_ERR_UNSUPPORTED where the call's shapes are not taken (the
     * graph then runs the pair). */
    dsv4_status (*attention_chunk_qnr)(void *ctx, const float *q, uint32_t n, uint32_t n_head,
                                       uint32_t head_dim, uint32_t pos0, const float *chunk_kv,
                                       uint32_t kv_type, const void *raw, uint32_t raw_cap, const void *comp,
                                       uint32_t ratio, const int32_t *sel, uint32_t n_sel,
                                       const dsv4_tensor *sinks, float kq_scale, float eps,
                                       const dsv4_rope *rope, bool rope_out, float *out, dsv4_error *err);

    /* ---- tiers (optional; NULL when the backend has a single device / host memory) ---- */
    /* Make this backend's device current for the calling thread (a tier switch). */
    dsv4_status (*activate)(void *ctx, dsv4_error *err);
    /* dst (this backend) <- src (a buffer of backend src_b, another tier): a device copy on the
     * same device, a peer copy where peer access is validated (allow_peer). *path gets the
     * dsv4_xcopy_path taken (backend/tier_copy.h). DSV4_ERR_UNSUPPORTED: the caller bounces
     * through host memory instead. */
    dsv4_status (*copy_from)(void *ctx, void *dst, const struct dsv4_backend *src_b, const void *src,
                             size_t bytes, bool allow_peer, int *path, dsv4_error *err);
    /* Pinned host memory for bounce copies (CPU backends: absent, plain malloc is used). */
    dsv4_status (*host_alloc)(void *ctx, size_t bytes, void **out, dsv4_error *err);
    void (*host_free)(void *ctx, void *ptr);

    void (*destroy)(void *ctx);
} dsv4_backend_ops;

typedef struct dsv4_backend {
    const dsv4_backend_ops *ops;
    void *ctx;
} dsv4_backend;

/* Numerics of the ops. DS4 (default): ds4's CPU roundings as documented per op above. EXACT
 * (validation against a float reference only): fp8_kv, hadamard_fp4 and store_f16's rounding are
 * the identity (Hadamard is orthonormal, so indexer scores keep their value), and matmul / moe
 * multiply f32 activations with the dequantized weight row, accumulated in double, for every
 * weight type. Rows stay independent of n and of the thread count in both modes. */
typedef enum dsv4_numerics { DSV4_NUMERICS_DS4 = 0, DSV4_NUMERICS_EXACT = 1 } dsv4_numerics;

/* The CPU reference backend (backend/cpu). n_threads 0 = number of online CPUs. */
dsv4_status dsv4_backend_cpu_create(uint32_t n_threads, dsv4_backend *out, dsv4_error *err);
uint32_t dsv4_backend_cpu_threads(const dsv4_backend *b);
/* Select the numerics of a CPU backend (before running ops; default DS4). */
dsv4_status dsv4_backend_cpu_set_numerics(dsv4_backend *b, dsv4_numerics mode, dsv4_error *err);
void dsv4_backend_destroy(dsv4_backend *b);

#endif
