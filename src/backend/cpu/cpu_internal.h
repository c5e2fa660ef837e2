/* Internals of the CPU reference backend: context, scratch and the kernels that tests check
 * directly. The numerics follow shared/spec/model-attention-hc.md §3-§6 (ds4's CPU path). */
#ifndef DSV4_CPU_INTERNAL_H
#define DSV4_CPU_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cpu/threadpool.h"

#define CPU_NEG_INF (-1e30f) /* ds4's "minus infinity" sentinel (empty frontier score) */
#define CPU_SCRATCH_SLOTS 8
/* Scratch slots: an op may use its own slots and those of the ops it calls, never a caller's. */
enum {
    CPU_SLOT_ACT = 0,
    CPU_SLOT_FLAT = 1,
    CPU_SLOT_MIX = 2,
    CPU_SLOT_A = 3,
    CPU_SLOT_B = 4,
    CPU_SLOT_C = 5,
    CPU_SLOT_D = 6,
    CPU_SLOT_VEC = 7
};

typedef struct cpu_ctx {
    dsv4_threadpool *tp;
    dsv4_numerics numerics;
    void *scratch[CPU_SCRATCH_SLOTS];
    size_t scratch_bytes[CPU_SCRATCH_SLOTS];
} cpu_ctx;

/* Grow-only scratch buffer `slot` of at least `bytes` (64-byte aligned); NULL on failure. */
void *cpu_scratch(cpu_ctx *c, int slot, size_t bytes);
/* A small F32 vector of a weight (norm weights, sinks, hc scale/base). Non-F32 types are
 * converted into `tmp` (n floats). NULL if the type cannot be decoded. */
const float *cpu_vec_f32(const dsv4_tensor *t, float *tmp, uint64_t n);

/* EXACT numerics: a weight row as f32 (F32 rows in place, others dequantized into tmp, n
 * floats); NULL if the type cannot be decoded. */
const float *cpu_row_f32(uint32_t type, const void *row, uint64_t n, float *tmp);
/* w . x with products and sum in double (EXACT numerics). */
float cpu_dot_exact(const float *w, const float *x, uint64_t n);

/* KV rows of rows_type (F32 or F16) as f32: F32 rows in place, F16 rows converted (exactly) into
 * scratch `slot`. */
dsv4_status cpu_kv_rows_f32(cpu_ctx *c, int slot, uint32_t rows_type, const void *rows, uint64_t n_rows,
                            uint32_t width, const float **out, dsv4_error *err);
void cpu_f16_to_f32_row(const void *h, uint64_t n, float *out);

/* ---- kernels (single row / single token) ---- */
float cpu_sigmoid_stable(float x);
float cpu_silu(float x);
float cpu_softplus(float x);
/* rmsnorm with Σx² in double; w may be NULL. */
void cpu_rmsnorm_row(const float *x, const float *w, uint64_t n, float eps, float *y);
/* theta[k] (k < n_rot/2) and the magnitude factor for position pos, computed as ds4's CPU does
 * (iterative theta_extrap product, YaRN ramp blend). */
void cpu_rope_thetas(const dsv4_rope *r, uint32_t pos, float *theta, float *mscale);
void cpu_rope_row(float *x, uint32_t n_head, uint32_t head_dim, uint32_t pos, const dsv4_rope *r,
                  bool inverse);
/* HC split of one mix vector (2*n_hc + n_hc^2) into out (same layout). */
void cpu_hc_split(const float *mix, const float *scale, const float *base, uint32_t n_hc, uint32_t iters,
                  float eps, float *out);
/* One query head over rows (K = V); rows given by a row-pointer callback-free list. */
void cpu_attention_head(const float *q, uint32_t head_dim, const float *const *rows, uint32_t n_rows,
                        float sink, float kq_scale, float *score_tmp, float *out);
/* Per-dimension softmax pool of a compressor frontier (ratio 4: two lanes over 8 rows). */
void cpu_compressor_pool(const float *state_kv, const float *state_score, uint32_t d_c, uint32_t ratio,
                         float *out);
/* The same pool for dims [j0, j1) only (out[j] for those j): columns are independent. */
void cpu_compressor_pool_dims(const float *state_kv, const float *state_score, uint32_t d_c, uint32_t ratio,
                              uint32_t j0, uint32_t j1, float *out);
/* Indexer score of one row k: sum_h relu(k . q[h]) * ws[h] (ws already scaled), in head order. */
float cpu_indexer_score(const float *k, const float *q, const float *ws, uint32_t n_head, uint32_t head_dim);
/* qsort comparator of int32_t, ascending. */
int cpu_cmp_i32(const void *a, const void *b);
/* Insertion top-k descending (ties to lower index), idx gets k indices. */
void cpu_topk_desc(const float *score, uint32_t n, uint32_t k, int32_t *idx);

/* Op implementations (cpu_*.c), installed in the op table by cpu_backend.c. */
dsv4_status cpu_embed(void *ctx, const dsv4_tensor *emb, const int32_t *tokens, uint32_t n, uint32_t n_hc,
                      float *out_hc, dsv4_error *err);
dsv4_status cpu_hc_pre(void *ctx, const dsv4_tensor *fn, const dsv4_tensor *scale, const dsv4_tensor *base,
                       const float *x_hc, uint32_t n, uint32_t n_hc, uint32_t n_embd, uint32_t iters,
                       float rms_eps, float hc_eps, float *u, float *split, dsv4_error *err);
dsv4_status cpu_hc_pre_norm(void *ctx, const dsv4_tensor *fn, const dsv4_tensor *scale,
                            const dsv4_tensor *base, const dsv4_tensor *norm_w, const float *x_hc, uint32_t n,
                            uint32_t n_hc, uint32_t n_embd, uint32_t iters, float rms_eps, float hc_eps,
                            float *u_normed, float *split, dsv4_error *err);
dsv4_status cpu_q_norm_rope(void *ctx, float *x, uint32_t n_rows, uint32_t n_head, uint32_t head_dim,
                            float eps, uint32_t pos0, uint32_t pos_step, const dsv4_rope *rope,
                            dsv4_error *err);
dsv4_status cpu_q_norm_rope_idx(void *ctx, float *q, uint32_t n_head, uint32_t head_dim, float eps, float *iq,
                                uint32_t idx_n_head, uint32_t idx_head_dim, uint32_t pos,
                                const dsv4_rope *rope, dsv4_error *err);
dsv4_status cpu_emit_row(void *ctx, const float *x, const dsv4_tensor *norm_w, uint32_t width, float eps,
                         uint32_t pos, const dsv4_rope *rope, bool hadamard, uint32_t n_nope, float *y,
                         void *dst, uint32_t dst_type, dsv4_error *err);
dsv4_status cpu_kv_norm_rope_fp8(void *ctx, float *x, const dsv4_tensor *norm_w, uint32_t n_rows,
                                 uint32_t width, float eps, uint32_t pos0, uint32_t pos_step,
                                 const dsv4_rope *rope, uint32_t n_nope, dsv4_error *err);
dsv4_status cpu_hc_post_pre_norm(void *ctx, const float *f, const float *x_hc, const float *split_old,
                                 float *out_hc, const dsv4_tensor *fn, const dsv4_tensor *scale,
                                 const dsv4_tensor *base, const dsv4_tensor *norm_w, uint32_t n_hc,
                                 uint32_t n_embd, uint32_t iters, float rms_eps, float hc_eps,
                                 float *u_normed, float *split_new, dsv4_error *err);
dsv4_status cpu_hc_post(void *ctx, const float *f, const float *x_hc, const float *split, uint32_t n,
                        uint32_t n_hc, uint32_t n_embd, float *out_hc, dsv4_error *err);
dsv4_status cpu_hc_head(void *ctx, const dsv4_tensor *fn, const dsv4_tensor *scale, const dsv4_tensor *base,
                        const float *x_hc, uint32_t n, uint32_t n_hc, uint32_t n_embd, float rms_eps,
                        float hc_eps, float *y, dsv4_error *err);
dsv4_status cpu_rmsnorm(void *ctx, const float *x, const dsv4_tensor *w, uint32_t n_rows, uint32_t width,
                        float eps, float *y, dsv4_error *err);
dsv4_status cpu_matmul(void *ctx, const dsv4_tensor *w, uint64_t row0, uint64_t n_out, const float *x,
                       uint64_t x_stride, uint32_t n, float *y, uint64_t y_stride, dsv4_error *err);
bool cpu_supports_weight_type(void *ctx, uint32_t type);
dsv4_status cpu_add(void *ctx, const float *a, const float *b, size_t n, float *out, dsv4_error *err);
dsv4_status cpu_swiglu(void *ctx, const float *g, const float *u, size_t n, float clamp, float *out,
                       dsv4_error *err);
dsv4_status cpu_rope_tail(void *ctx, float *x, uint32_t n_rows, uint32_t n_head, uint32_t head_dim,
                          uint32_t pos0, uint32_t pos_step, const dsv4_rope *rope, bool inverse,
                          dsv4_error *err);
dsv4_status cpu_fp8_kv(void *ctx, float *x, uint32_t n_rows, uint32_t width, uint32_t n_nope,
                       dsv4_error *err);
dsv4_status cpu_hadamard_fp4(void *ctx, float *x, uint32_t n_rows, uint32_t width, dsv4_error *err);
dsv4_status cpu_store_f16(void *ctx, void *dst, uint32_t dst_type, const float *src, uint32_t n_rows,
                          uint32_t width, dsv4_error *err);
dsv4_status cpu_compressor_step(void *ctx, const float *kv, const float *score, const dsv4_tensor *ape,
                                uint32_t pos, uint32_t ratio, uint32_t d_c, float *state_kv,
                                float *state_score, float *pooled, dsv4_error *err);
dsv4_status cpu_indexer_topk(void *ctx, const float *q, const float *w, float w_scale, uint32_t n_head,
                             uint32_t head_dim, uint32_t rows_type, const void *rows, uint32_t n_rows,
                             uint32_t k, int32_t *sel, dsv4_error *err);
dsv4_status cpu_attention_rope(void *ctx, const float *q, uint32_t n_head, uint32_t head_dim,
                               uint32_t kv_type, const void *raw, uint32_t raw_cap, uint32_t raw_start,
                               uint32_t n_raw, const void *comp, uint32_t n_comp, const int32_t *sel,
                               uint32_t n_sel, const dsv4_tensor *sinks, float kq_scale, uint32_t pos,
                               const dsv4_rope *rope, float *out, dsv4_error *err);
dsv4_status cpu_attention_qnr(void *ctx, const float *q, uint32_t n_head, uint32_t head_dim, uint32_t kv_type,
                              const void *raw, uint32_t raw_cap, uint32_t raw_start, uint32_t n_raw,
                              const void *comp, uint32_t n_comp, const int32_t *sel, uint32_t n_sel,
                              const dsv4_tensor *sinks, float kq_scale, float eps, uint32_t pos,
                              const dsv4_rope *rope, float *out, dsv4_error *err);
dsv4_status cpu_hc_post_add(void *ctx, const float *a, const float *b, const float *x_hc, const float *split,
                            uint32_t n, uint32_t n_hc, uint32_t n_embd, float *out_hc, dsv4_error *err);
dsv4_status cpu_hc_post_slots(void *ctx, const float *slots, uint32_t k, const float *b, const float *x_hc,
                              const float *split, uint32_t n, uint32_t n_hc, uint32_t n_embd, float *out_hc,
                              dsv4_error *err);
dsv4_status cpu_attention(void *ctx, const float *q, uint32_t n_head, uint32_t head_dim, uint32_t kv_type,
                          const void *raw, uint32_t raw_cap, uint32_t raw_start, uint32_t n_raw,
                          const void *comp, uint32_t n_comp, const int32_t *sel, uint32_t n_sel,
                          const dsv4_tensor *sinks, float kq_scale, float *out, dsv4_error *err);
dsv4_status cpu_compressor_chunk(void *ctx, const float *kv, uint64_t kv_stride, const float *score,
                                 uint64_t score_stride, const dsv4_tensor *ape, uint32_t pos0, uint32_t n,
                                 uint32_t ratio, uint32_t d_c, float *state_kv, float *state_score,
                                 float *pooled, dsv4_error *err);
dsv4_status cpu_indexer_topk_chunk(void *ctx, const float *q, const float *w, float w_scale, uint32_t n_head,
                                   uint32_t head_dim, uint32_t rows_type, const void *rows, uint32_t pos0,
                                   uint32_t n, uint32_t ratio, uint32_t k, int32_t *sel, dsv4_error *err);
dsv4_status cpu_attention_chunk(void *ctx, const float *q, uint32_t n, uint32_t n_head, uint32_t head_dim,
                                uint32_t pos0, const float *chunk_kv, uint32_t kv_type, const void *raw,
                                uint32_t raw_cap, const void *comp, uint32_t ratio, const int32_t *sel,
                                uint32_t n_sel, const dsv4_tensor *sinks, float kq_scale, float *out,
                                dsv4_error *err);
dsv4_status cpu_attention_chunk_qnr(void *ctx, const float *q, uint32_t n, uint32_t n_head, uint32_t head_dim,
                                    uint32_t pos0, const float *chunk_kv, uint32_t kv_type, const void *raw,
                                    uint32_t raw_cap, const void *comp, uint32_t ratio, const int32_t *sel,
                                    uint32_t n_sel, const dsv4_tensor *sinks, float kq_scale, float eps,
                                    const dsv4_rope *rope, bool rope_out, float *out, dsv4_error *err);
dsv4_status cpu_router_select(void *ctx, const float *logits, uint32_t n, uint32_t n_expert, uint32_t k,
                              const dsv4_tensor *bias, const dsv4_tensor *tid2eid, const int32_t *tokens,
                              float scale, int32_t *sel, float *weights, dsv4_error *err);
dsv4_status cpu_matmuls_router(void *ctx, const dsv4_matmul_item *items, uint32_t n_items, uint32_t n,
                               uint32_t n_expert, uint32_t k, const dsv4_tensor *bias, float scale,
                               int32_t *sel, float *weights, dsv4_error *err);
dsv4_status cpu_moe(void *ctx, const dsv4_tensor *gate, const dsv4_tensor *up, const dsv4_tensor *down,
                    const float *x, uint32_t n, const int32_t *sel, const float *weights, uint32_t k,
                    float clamp, float *out, dsv4_error *err);
dsv4_status cpu_moe_slots(void *ctx, const dsv4_tensor *gate, const dsv4_tensor *up, const dsv4_tensor *down,
                          const float *x, uint32_t n, const int32_t *sel, const float *weights, uint32_t k,
                          float clamp, float *slots, dsv4_error *err);

/* Weight type -> activation format + dot kernel (cpu_dot.c), shared by matmul and the experts. */
typedef enum { CPU_ACT_F32, CPU_ACT_Q8_0, CPU_ACT_Q8_K } cpu_act_kind;
/* One weight row against nx activation rows; out[i] is bitwise the single-row dot of x[i]. */
typedef void (*cpu_dot_fn)(const void *w, const void *const *x, int nx, int64_t n, float *out);
/* false for types without a CPU dot; block (may be NULL) gets the type's block size. */
bool cpu_kernel_for(uint32_t type, cpu_act_kind *kind, cpu_dot_fn *dot, uint32_t *block);
/* Bytes of one activation row of n values in `kind` (f32: n floats). */
size_t cpu_act_bytes(cpu_act_kind kind, uint64_t n);
/* x (n floats) -> dst in `kind` (f32: a copy). */
void cpu_act_quant_row(cpu_act_kind kind, const float *x, void *dst, uint64_t n);

#endif
