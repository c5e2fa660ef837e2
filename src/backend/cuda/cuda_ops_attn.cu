/* Attention-side ops: argument checks (as the CPU backend makes them), weight resolution and
 * scratch, then the launchers of cuda_attn.h, which enqueue on the backend's stream. */
extern "C" { /* cuda_attn.h includes the C headers without C linkage: include them first */
#include "backend/backend.h"
}
#include "backend/cuda/cuda_attn.h"
#include "backend/cuda/cuda_backend.h"

static dsv4_status attn_rc(int rc, const char *what, dsv4_error *err) {
    if (rc == 0) return DSV4_OK;
    return cu_fail(err, (cudaError_t)rc, what);
}

#define STREAM(c) ((dsv4_cuda_stream)(c)->stream)
#define GCU(call)                                                                                            \
    do {                                                                                                     \
        const dsv4_status st_ = (call);                                                                      \
        if (st_ != DSV4_OK) return st_;                                                                      \
    } while (0)

dsv4_status cu_rope_tail(void *vctx, float *x, uint32_t n_rows, uint32_t n_head, uint32_t head_dim,
                         uint32_t pos0, uint32_t pos_step, const dsv4_rope *rope, bool inverse,
                         dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    if (rope->n_rot > head_dim || rope->n_rot % 2 || rope->n_rot > 512)
        return dsv4_fail(err, DSV4_ERR_INVALID, "rope: %u rotated dims in heads of %u", rope->n_rot,
                         head_dim);
    if (!n_rows || !n_head) return DSV4_OK;
    return attn_rc(dsv4_cuda_rope_tail(STREAM(c), x, n_rows, n_head, head_dim, pos0, pos_step, rope, inverse),
                   "rope", err);
}

dsv4_status cu_fp8_kv(void *vctx, float *x, uint32_t n_rows, uint32_t width, uint32_t n_nope,
                      dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    if (n_nope > width || n_nope % 64)
        return dsv4_fail(err, DSV4_ERR_INVALID, "fp8_kv: %u of %u dims is not a whole number of 64-blocks",
                         n_nope, width);
    if (!n_rows || !n_nope || c->numerics == DSV4_NUMERICS_EXACT) return DSV4_OK;
    return attn_rc(dsv4_cuda_fp8_kv(STREAM(c), x, n_rows, width, n_nope), "fp8_kv", err);
}

/* ---- fused norm + RoPE (+ FP8) (cuda_attn_fused.cu) ---- */

/* Gates (backend.h fused_available): any row count and mode; even head width; the KV row fits
 * shared memory and its norm weight is F32 (what cu_rmsnorm reads). The rotated width and the FP8
 * blocks are checked by the ops, as the unfused ones check them. */
bool cu_q_norm_rope_ok(const cuda_ctx *c, uint32_t n_tokens, uint32_t head_dim) {
    (void)c;
    return n_tokens > 0 && head_dim > 0 && head_dim % 2 == 0;
}

bool cu_kv_norm_rope_fp8_ok(const cuda_ctx *c, uint32_t n_tokens, uint32_t width, uint32_t norm_type) {
    (void)c;
    return n_tokens > 0 && width > 0 && width % 2 == 0 && width <= DSV4_CUDA_KV_FUSED_MAX_WIDTH &&
           norm_type == DSV4_TYPE_F32;
}

dsv4_status cu_q_norm_rope(void *vctx, float *x, uint32_t n_rows, uint32_t n_head, uint32_t head_dim,
                           float eps, uint32_t pos0, uint32_t pos_step, const dsv4_rope *rope,
                           dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    if (!cu_q_norm_rope_ok(c, n_rows ? n_rows : 1, head_dim) || rope->n_rot > head_dim || rope->n_rot % 2 ||
        rope->n_rot > 512)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "q_norm_rope: %u rotated dims of heads of %u",
                         rope->n_rot, head_dim);
    if (!n_rows || !n_head) return DSV4_OK;
    return attn_rc(dsv4_cuda_q_norm_rope(STREAM(c), x, n_rows, n_head, head_dim, eps, pos0, pos_step, rope),
                   "q_norm_rope", err);
}

/* Gate of q_norm_rope_idx: one token, DS4 numerics (its indexer heads get the Hadamard and FP4 steps,
 * which EXACT skips on both sides of the indexer dot: cu_hadamard_fp4; session 17 found the fused op
 * open in EXACT, where decode past the indexer's start then scored Hadamard queries against plain keys),
 * q_norm_rope's head condition, an indexer head width the Hadamard takes (a power of two, a multiple of
 * 32) within the kernel's shared row. */
bool cu_q_norm_rope_idx_ok(const cuda_ctx *c, uint32_t n_tokens, uint32_t head_dim, uint32_t idx_head_dim) {
    return n_tokens == 1 && c->numerics == DSV4_NUMERICS_DS4 && cu_q_norm_rope_ok(c, 1, head_dim) &&
           idx_head_dim >= 32 && idx_head_dim % 32 == 0 && (idx_head_dim & (idx_head_dim - 1)) == 0 &&
           idx_head_dim <= DSV4_CUDA_Q_IDX_MAX_WIDTH;
}

dsv4_status cu_q_norm_rope_idx(void *vctx, float *q, uint32_t n_head, uint32_t head_dim, float eps, float *iq,
                               uint32_t idx_n_head, uint32_t idx_head_dim, uint32_t pos,
                               const dsv4_rope *rope, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    if (!cu_q_norm_rope_idx_ok(c, 1, head_dim, idx_head_dim) || rope->n_rot > idx_head_dim ||
        rope->n_rot > head_dim || rope->n_rot % 2 || rope->n_rot > 512 || !n_head || !idx_n_head)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED,
                         "q_norm_rope_idx: %u rotated dims of heads of %u and indexer heads of %u",
                         rope->n_rot, head_dim, idx_head_dim);
    return attn_rc(dsv4_cuda_q_norm_rope_idx(STREAM(c), q, n_head, head_dim, eps, iq, idx_n_head,
                                             idx_head_dim, pos, rope),
                   "q_norm_rope_idx", err);
}

/* Gate of emit_row: not switched off (DSV4_CUDA_EMIT_ROW=0; bitwise the four ops and 1.5 % faster
 * at 2K, session 12), DS4 numerics (EXACT's FP8 and store skip roundings), an
 * F32 norm weight, a row the kernel's shared memory holds, a cache row type the store op takes. */
bool cu_emit_row_ok(const cuda_ctx *c, uint32_t n_tokens, uint32_t width, uint32_t norm_type,
                    uint32_t dst_type) {
    return c->emit_row_on && c->numerics == DSV4_NUMERICS_DS4 && n_tokens == 1 && width > 0 &&
           width % 2 == 0 && width <= DSV4_CUDA_KV_FUSED_MAX_WIDTH && norm_type == DSV4_TYPE_F32 &&
           (dst_type == DSV4_TYPE_F16 || dst_type == DSV4_TYPE_F32 ||
            (dst_type == DSV4_KV_FP4 && width % 32 == 0));
}

dsv4_status cu_emit_row(void *vctx, const float *x, const dsv4_tensor *norm_w, uint32_t width, float eps,
                        uint32_t pos, const dsv4_rope *rope, bool hadamard, uint32_t n_nope, float *y,
                        void *dst, uint32_t dst_type, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    cu_preq_clear(c); /* writes a row (y) as rmsnorm does */
    if (!cu_emit_row_ok(c, 1, width, norm_w->type, dst_type) || norm_w->ne[0] != width ||
        rope->n_rot > width || rope->n_rot % 2 || rope->n_rot > 512 || (hadamard && (width & (width - 1))) ||
        (!hadamard && (n_nope % 64 || n_nope > width)))
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "emit_row: a row of %u (%s) into type %#x", width,
                         hadamard ? "Hadamard/FP4" : "FP8", dst_type);
    const float *wd = (const float *)cu_weight_dev(c, norm_w, err);
    if (!wd) return DSV4_ERR_INVALID;
    return attn_rc(
        dsv4_cuda_emit_row(STREAM(c), x, wd, width, eps, pos, rope, hadamard, n_nope, y, dst, dst_type),
        "emit_row", err);
}

dsv4_status cu_kv_norm_rope_fp8(void *vctx, float *x, const dsv4_tensor *norm_w, uint32_t n_rows,
                                uint32_t width, float eps, uint32_t pos0, uint32_t pos_step,
                                const dsv4_rope *rope, uint32_t n_nope, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    if (!norm_w || norm_w->ne[0] != width)
        return dsv4_fail(err, DSV4_ERR_INVALID, "kv_norm_rope_fp8: norm weight %s does not have %u values",
                         norm_w && norm_w->name ? norm_w->name : "?", width);
    if (!cu_kv_norm_rope_fp8_ok(c, n_rows ? n_rows : 1, width, norm_w->type) || rope->n_rot > width ||
        rope->n_rot % 2 || rope->n_rot > 512 || n_nope % 64 || n_nope > width)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED,
                         "kv_norm_rope_fp8: rows of %u (%u rotated, %u FP8 dims) with norm %s of type %s",
                         width, rope->n_rot, n_nope, norm_w->name ? norm_w->name : "?",
                         dsv4_type_name(norm_w->type));
    if (!n_rows) return DSV4_OK;
    const float *wd = (const float *)cu_weight_dev(c, norm_w, err);
    if (!wd) return DSV4_ERR_INVALID;
    /* EXACT numerics skip the FP8 step, as fp8_kv does */
    const uint32_t fp8 = c->numerics == DSV4_NUMERICS_EXACT ? 0 : n_nope;
    return attn_rc(
        dsv4_cuda_kv_norm_rope_fp8(STREAM(c), x, wd, n_rows, width, eps, pos0, pos_step, rope, fp8),
        "kv_norm_rope_fp8", err);
}

dsv4_status cu_hadamard_fp4(void *vctx, float *x, uint32_t n_rows, uint32_t width, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    if (width < 32 || (width & (width - 1)))
        return dsv4_fail(err, DSV4_ERR_INVALID, "hadamard_fp4: width %u is not a power of two >= 32", width);
    /* EXACT: the Hadamard is orthonormal and applied to both sides of every indexer dot, so
     * skipping it (and the FP4 step) leaves the scores unchanged (as the CPU backend) */
    if (!n_rows || c->numerics == DSV4_NUMERICS_EXACT) return DSV4_OK;
    return attn_rc(dsv4_cuda_hadamard_fp4(STREAM(c), x, n_rows, width), "hadamard_fp4", err);
}

/* The fast attention kernels (cuda_attn_fast.cu) in DS4 numerics unless DSV4_CUDA_ATTN=exact; EXACT
 * numerics keep the CPU-order kernel (cuda_attn_attention.cu). Unless DSV4_CUDA_ATTN=fast, the tensor-core
 * prefill kernel (cuda_attn_tc.cu) takes attention_chunk; decode stays on the fast kernel. */
static bool attn_fast(const cuda_ctx *c) { return c->numerics == DSV4_NUMERICS_DS4 && !c->attn_exact; }

/* The decode attention fold's barrier words (the current lane's set: the lanes may each run an
 * attention), or NULL (the default, DSV4_CUDA_FA_FOLD unset or 0: the split kernel and the combine; the
 * same bits). */
static_assert(DSV4_CUDA_FA_BAR_WORDS == 128 && CU_SYNC_WORDS == 128 + 2 * DSV4_CUDA_FA_BAR_WORDS,
              "d_hc_tail holds a fold set per lane after its first 128 words");
static unsigned *cu_fa_bar(const cuda_ctx *c) {
    if (!c->fa_fold || !c->d_hc_tail) return NULL;
    return c->d_hc_tail + 128 + (c->lane == 1 ? DSV4_CUDA_FA_BAR_WORDS : 0);
}

/* KV row types the attention / indexer ops read (FP4: indexer rows only) */
static dsv4_status kv_type_ok(uint32_t type, uint32_t width, bool fp4, const char *op, dsv4_error *err) {
    if (type == DSV4_TYPE_F32 || type == DSV4_TYPE_F16 || (fp4 && type == DSV4_KV_FP4 && width % 32 == 0))
        return DSV4_OK;
    return dsv4_fail(err, DSV4_ERR_INVALID, "%s: KV rows of type %#x and width %u", op, type, width);
}

dsv4_status cu_store_f16(void *vctx, void *dst, uint32_t dst_type, const float *src, uint32_t n_rows,
                         uint32_t width, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    GCU(kv_type_ok(dst_type, width, true, "store_f16", err));
    if (!n_rows || !width) return DSV4_OK;
    if (dst_type == DSV4_TYPE_F32 && c->numerics == DSV4_NUMERICS_EXACT) { /* a plain copy (memmove) */
        if (dst == src) return DSV4_OK;
        return cu_copy(c, dst, src, (size_t)n_rows * width * sizeof(float), err);
    }
    return attn_rc(dsv4_cuda_store_f16(STREAM(c), dst, dst_type, src, n_rows, width), "store_f16", err);
}

dsv4_status cu_compressor_step(void *vctx, const float *kv, const float *score, const dsv4_tensor *ape,
                               uint32_t pos, uint32_t ratio, uint32_t d_c, float *state_kv,
                               float *state_score, float *pooled, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    const uint32_t coff = ratio == 4 ? 2u : 1u;
    if (ratio == 0) return dsv4_fail(err, DSV4_ERR_INVALID, "compressor: ratio 0");
    if (ape->ne[0] != (uint64_t)coff * d_c || ape->ne[1] < ratio)
        return dsv4_fail(err, DSV4_ERR_INVALID, "compressor: ape %s is %llux%llu, expected %ux%u",
                         ape->name ? ape->name : "?", (unsigned long long)ape->ne[0],
                         (unsigned long long)ape->ne[1], coff * d_c, ratio);
    if (ape->type != DSV4_TYPE_F16)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED,
                         "compressor: ape %s has type %s (the CUDA backend reads F16)",
                         ape->name ? ape->name : "?", dsv4_type_name(ape->type));
    const uint16_t *ad = (const uint16_t *)cu_weight_dev(c, ape, err);
    if (!ad) return DSV4_ERR_INVALID;
    return attn_rc(
        dsv4_cuda_compressor_step(STREAM(c), kv, score, ad, pos, ratio, d_c, state_kv, state_score, pooled),
        "compressor_step", err);
}

dsv4_status cu_indexer_topk(void *vctx, const float *q, const float *w, float w_scale, uint32_t n_head,
                            uint32_t head_dim, uint32_t rows_type, const void *rows, uint32_t n_rows,
                            uint32_t k, int32_t *sel, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    GCU(kv_type_ok(rows_type, head_dim, true, "indexer_topk", err));
    if (k > n_rows) return dsv4_fail(err, DSV4_ERR_INVALID, "indexer: top-%u of %u rows", k, n_rows);
    if (k == 0) return DSV4_OK;
    void *scratch = cu_scratch(c, CU_SLOT_IDX, dsv4_cuda_indexer_scratch_bytes(n_rows), err);
    if (!scratch) return DSV4_ERR_NOMEM;
    return attn_rc(dsv4_cuda_indexer_topk(STREAM(c), q, w, w_scale, n_head, head_dim, rows_type, rows, n_rows,
                                          k, sel, scratch),
                   "indexer_topk", err);
}

/* The decode attention's operand checks (sinks, raw ring window); the sinks on the device or NULL. */
static const float *attn_sinks_dev(cuda_ctx *c, const dsv4_tensor *sinks, uint32_t n_head, uint32_t n_raw,
                                   uint32_t raw_cap, uint32_t raw_start, dsv4_error *err) {
    if (sinks->ne[0] < n_head || sinks->type != DSV4_TYPE_F32) {
        dsv4_fail(err, DSV4_ERR_INVALID, "attention: sinks %s must be F32 with %u values",
                  sinks->name ? sinks->name : "?", n_head);
        return NULL;
    }
    if (n_raw > raw_cap || (n_raw && raw_start >= raw_cap)) {
        dsv4_fail(err, DSV4_ERR_INVALID, "attention: %u raw rows from %u in a ring of %u", n_raw, raw_start,
                  raw_cap);
        return NULL;
    }
    return (const float *)cu_weight_dev(c, sinks, err);
}

dsv4_status cu_attention(void *vctx, const float *q, uint32_t n_head, uint32_t head_dim, uint32_t kv_type,
                         const void *raw, uint32_t raw_cap, uint32_t raw_start, uint32_t n_raw,
                         const void *comp, uint32_t n_comp, const int32_t *sel, uint32_t n_sel,
                         const dsv4_tensor *sinks, float kq_scale, float *out, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    GCU(kv_type_ok(kv_type, head_dim, false, "attention", err));
    const float *sd = attn_sinks_dev(c, sinks, n_head, n_raw, raw_cap, raw_start, err);
    if (!sd) return DSV4_ERR_INVALID;
    if (attn_fast(c) && dsv4_cuda_attention_fast_ok(n_head, head_dim, q, out, raw, comp, NULL)) {
        void *scr = cu_scratch(c, CU_SLOT_ATTN, dsv4_cuda_attention_fast_scratch_bytes(), err);
        if (!scr) return c->step_capturing ? DSV4_ERR_UNSUPPORTED : DSV4_ERR_NOMEM;
        return attn_rc(dsv4_cuda_attention_fast(STREAM(c), q, n_head, head_dim, kv_type, raw, raw_cap,
                                                raw_start, n_raw, comp, n_comp, sel, n_sel, sd, kq_scale, out,
                                                scr, cu_fa_bar(c)),
                       "attention (fast)", err);
    }
    return attn_rc(dsv4_cuda_attention(STREAM(c), q, n_head, head_dim, kv_type, raw, raw_cap, raw_start,
                                       n_raw, comp, n_comp, sel, n_sel, sd, kq_scale, out),
                   "attention", err);
}

/* Gate of attn_rope (backend.h fused_available): one decode token on the fast kernels (the RoPE
 * rides on their combine launch), 512-wide heads. The row types and alignment are checked at run
 * time (DSV4_ERR_UNSUPPORTED with nothing launched: the graph then runs the pair). */
bool cu_attention_rope_ok(const cuda_ctx *c, uint32_t n_tokens, uint32_t head_dim) {
    return n_tokens == 1 && head_dim == 512 && attn_fast(c);
}

/* attention_rope and attention_qnr (qnr: the raw query's norm + RoPE on the way in, eps) */
static dsv4_status attention_rope_run(cuda_ctx *c, const float *q, uint32_t n_head, uint32_t head_dim,
                                      uint32_t kv_type, const void *raw, uint32_t raw_cap, uint32_t raw_start,
                                      uint32_t n_raw, const void *comp, uint32_t n_comp, const int32_t *sel,
                                      uint32_t n_sel, const dsv4_tensor *sinks, float kq_scale, uint32_t pos,
                                      const dsv4_rope *rope, bool qnr, float eps, float *out, const char *op,
                                      dsv4_error *err) {
    GCU(kv_type_ok(kv_type, head_dim, false, op, err));
    if (!cu_attention_rope_ok(c, 1, head_dim) ||
        !dsv4_cuda_attention_fast_ok(n_head, head_dim, q, out, raw, comp, NULL) || !rope ||
        rope->n_rot > head_dim || rope->n_rot % 2)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "%s: not on the fast kernels here", op);
    const float *sd = attn_sinks_dev(c, sinks, n_head, n_raw, raw_cap, raw_start, err);
    if (!sd) return DSV4_ERR_INVALID;
    void *scr = cu_scratch(c, CU_SLOT_ATTN, dsv4_cuda_attention_fast_scratch_bytes(), err);
    if (!scr) return c->step_capturing ? DSV4_ERR_UNSUPPORTED : DSV4_ERR_NOMEM;
    /* producer-side Q8_0 (cu_preq_*): the heads' blocks for the output projection that follows */
    const uint64_t qd = (uint64_t)n_head * head_dim;
    uint8_t *oq = c->preq_attn ? (uint8_t *)cu_scratch(c, CU_SLOT_PREQA, qd / 32 * 36, err) : NULL;
    if (c->preq_attn && !oq) return c->step_capturing ? DSV4_ERR_UNSUPPORTED : DSV4_ERR_NOMEM;
    cu_preq_clear(c); /* out is rewritten */
    const int rc = qnr ? dsv4_cuda_attention_fast_qnr_rope(
                             STREAM(c), q, n_head, head_dim, kv_type, raw, raw_cap, raw_start, n_raw, comp,
                             n_comp, sel, n_sel, sd, kq_scale, out, scr, pos, rope, eps, oq, cu_fa_bar(c))
                       : dsv4_cuda_attention_fast_rope(STREAM(c), q, n_head, head_dim, kv_type, raw, raw_cap,
                                                       raw_start, n_raw, comp, n_comp, sel, n_sel, sd,
                                                       kq_scale, out, scr, pos, rope, oq, cu_fa_bar(c));
    const dsv4_status st = attn_rc(
        rc, qnr ? "attention (fast) + query norm, rope + inverse rope" : "attention (fast) + inverse rope",
        err);
    if (st == DSV4_OK && oq) cu_preq_set(c, out, qd, oq);
    return st;
}

dsv4_status cu_attention_rope(void *vctx, const float *q, uint32_t n_head, uint32_t head_dim,
                              uint32_t kv_type, const void *raw, uint32_t raw_cap, uint32_t raw_start,
                              uint32_t n_raw, const void *comp, uint32_t n_comp, const int32_t *sel,
                              uint32_t n_sel, const dsv4_tensor *sinks, float kq_scale, uint32_t pos,
                              const dsv4_rope *rope, float *out, dsv4_error *err) {
    return attention_rope_run((cuda_ctx *)vctx, q, n_head, head_dim, kv_type, raw, raw_cap, raw_start, n_raw,
                              comp, n_comp, sel, n_sel, sinks, kq_scale, pos, rope, false, 0.0f, out,
                              "attention_rope", err);
}

/* DSV4_CUDA_ATTN_QNR=0 / =1: the CUDA gate of attn_qnr closed / open (ATTN_QNR_DEFAULT when unset) */
#define ATTN_QNR_DEFAULT 1 /* bitwise on the H200 (session 30 call 1, bench/results/2026-12-06-s30-c1-*) */
static bool attn_qnr_enabled(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("DSV4_CUDA_ATTN_QNR");
        v = e && *e ? strcmp(e, "0") != 0 : ATTN_QNR_DEFAULT;
    }
    return v != 0;
}

/* Gate of attn_qnr: attn_rope's (the fast decode kernels take 512-wide heads, qnr_head512's width). */
bool cu_attention_qnr_ok(const cuda_ctx *c, uint32_t n_tokens, uint32_t head_dim) {
    return cu_attention_rope_ok(c, n_tokens, head_dim) && head_dim == 512 && attn_qnr_enabled();
}

dsv4_status cu_attention_qnr(void *vctx, const float *q, uint32_t n_head, uint32_t head_dim, uint32_t kv_type,
                             const void *raw, uint32_t raw_cap, uint32_t raw_start, uint32_t n_raw,
                             const void *comp, uint32_t n_comp, const int32_t *sel, uint32_t n_sel,
                             const dsv4_tensor *sinks, float kq_scale, float eps, uint32_t pos,
                             const dsv4_rope *rope, float *out, dsv4_error *err) {
    if (!cu_attention_qnr_ok((const cuda_ctx *)vctx, 1, head_dim))
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "attention_qnr: heads of %u not taken", head_dim);
    return attention_rope_run((cuda_ctx *)vctx, q, n_head, head_dim, kv_type, raw, raw_cap, raw_start, n_raw,
                              comp, n_comp, sel, n_sel, sinks, kq_scale, pos, rope, true, eps, out,
                              "attention_qnr", err);
}

dsv4_status cu_compressor_chunk(void *vctx, const float *kv, uint64_t kv_stride, const float *score,
                                uint64_t score_stride, const dsv4_tensor *ape, uint32_t pos0, uint32_t n,
                                uint32_t ratio, uint32_t d_c, float *state_kv, float *state_score,
                                float *pooled, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    const uint32_t coff = ratio == 4 ? 2u : 1u;
    if (ratio < 2) return dsv4_fail(err, DSV4_ERR_INVALID, "compressor_chunk: ratio %u", ratio);
    if (ape->ne[0] != (uint64_t)coff * d_c || ape->ne[1] < ratio)
        return dsv4_fail(err, DSV4_ERR_INVALID, "compressor_chunk: ape %s is %llux%llu, expected %ux%u",
                         ape->name ? ape->name : "?", (unsigned long long)ape->ne[0],
                         (unsigned long long)ape->ne[1], coff * d_c, ratio);
    if (ape->type != DSV4_TYPE_F16)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED,
                         "compressor_chunk: ape %s has type %s (the CUDA backend reads F16)",
                         ape->name ? ape->name : "?", dsv4_type_name(ape->type));
    const uint16_t *ad = (const uint16_t *)cu_weight_dev(c, ape, err);
    if (!ad) return DSV4_ERR_INVALID;
    return attn_rc(dsv4_cuda_compressor_chunk(STREAM(c), kv, kv_stride, score, score_stride, ad, pos0, n,
                                              ratio, d_c, state_kv, state_score, pooled),
                   "compressor_chunk", err);
}

dsv4_status cu_indexer_topk_chunk(void *vctx, const float *q, const float *w, float w_scale, uint32_t n_head,
                                  uint32_t head_dim, uint32_t rows_type, const void *rows, uint32_t pos0,
                                  uint32_t n, uint32_t ratio, uint32_t k, int32_t *sel, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    GCU(kv_type_ok(rows_type, head_dim, true, "indexer_topk_chunk", err));
    if (ratio == 0) return dsv4_fail(err, DSV4_ERR_INVALID, "indexer_topk_chunk: ratio 0");
    if (n == 0 || k == 0 || ((uint64_t)pos0 + n) / ratio <= k) return DSV4_OK;
    void *scratch = cu_scratch(c, CU_SLOT_IDX, dsv4_cuda_indexer_chunk_scratch_bytes(pos0, n, ratio), err);
    if (!scratch) return DSV4_ERR_NOMEM;
    return attn_rc(dsv4_cuda_indexer_topk_chunk(STREAM(c), q, w, w_scale, n_head, head_dim, rows_type, rows,
                                                pos0, n, ratio, k, sel, scratch),
                   "indexer_topk_chunk", err);
}

/* The device copy of an attention op's F32 sinks (at least n_head values), or NULL with err set. */
static const float *chunk_sinks(cuda_ctx *c, const dsv4_tensor *sinks, uint32_t n_head, const char *op,
                                dsv4_error *err) {
    if (sinks->ne[0] < n_head || sinks->type != DSV4_TYPE_F32) {
        dsv4_fail(err, DSV4_ERR_INVALID, "%s: sinks %s must be F32 with %u values", op,
                  sinks->name ? sinks->name : "?", n_head);
        return NULL;
    }
    return (const float *)cu_weight_dev(c, sinks, err);
}

/* The tensor-core prefill attention (qrope / orope: the queries' norm + RoPE in, the heads' inverse RoPE
 * out, or NULL), in the fast kernel's scratch slot at its fixed size (never regrown here): the chunk's
 * f16 rows when they fit (n <= 8224), else the kernel rounds them itself. */
static dsv4_status chunk_tc(cuda_ctx *c, const float *q, uint32_t n, uint32_t n_head, uint32_t head_dim,
                            uint32_t pos0, const float *chunk_kv, uint32_t kv_type, const void *raw,
                            uint32_t raw_cap, const void *comp, uint32_t ratio, const int32_t *sel,
                            uint32_t n_sel, const float *sd, float kq_scale, float eps,
                            const dsv4_rope *qrope, const dsv4_rope *orope, float *out, const char *what,
                            dsv4_error *err) {
    const size_t sb = dsv4_cuda_attention_fast_scratch_bytes();
    void *scr = cu_scratch(c, CU_SLOT_ATTN, sb, err);
    if (!scr) return DSV4_ERR_NOMEM;
    return attn_rc(dsv4_cuda_attention_chunk_tc(STREAM(c), q, n, n_head, head_dim, pos0, chunk_kv, kv_type,
                                                raw, raw_cap, comp, ratio, sel, n_sel, sd, kq_scale, out, scr,
                                                sb, eps, qrope, orope),
                   what, err);
}

dsv4_status cu_attention_chunk(void *vctx, const float *q, uint32_t n, uint32_t n_head, uint32_t head_dim,
                               uint32_t pos0, const float *chunk_kv, uint32_t kv_type, const void *raw,
                               uint32_t raw_cap, const void *comp, uint32_t ratio, const int32_t *sel,
                               uint32_t n_sel, const dsv4_tensor *sinks, float kq_scale, float *out,
                               dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    GCU(kv_type_ok(kv_type, head_dim, false, "attention_chunk", err));
    if (n > 65535) return dsv4_fail(err, DSV4_ERR_INVALID, "attention_chunk: %u queries (at most 65535)", n);
    const float *sd = chunk_sinks(c, sinks, n_head, "attention_chunk", err);
    if (!sd) return DSV4_ERR_INVALID;
    /* DSV4_CUDA_ATTN=tc: the tensor-core kernel where it applies (else the fast kernel) */
    if (attn_fast(c) && c->attn_tc &&
        dsv4_cuda_attention_chunk_tc_ok(n, n_head, head_dim, kv_type, q, out, raw, comp, chunk_kv))
        return chunk_tc(c, q, n, n_head, head_dim, pos0, chunk_kv, kv_type, raw, raw_cap, comp, ratio, sel,
                        n_sel, sd, kq_scale, 0.0f, NULL, NULL, out, "attention_chunk (tc)", err);
    if (n > 0 && attn_fast(c) && dsv4_cuda_attention_fast_ok(n_head, head_dim, q, out, raw, comp, chunk_kv)) {
        void *scr = cu_scratch(c, CU_SLOT_ATTN, dsv4_cuda_attention_fast_scratch_bytes(), err);
        if (!scr) return DSV4_ERR_NOMEM;
        return attn_rc(dsv4_cuda_attention_chunk_fast(STREAM(c), q, n, n_head, head_dim, pos0, chunk_kv,
                                                      kv_type, raw, raw_cap, comp, ratio, sel, n_sel, sd,
                                                      kq_scale, out, scr),
                       "attention_chunk (fast)", err);
    }
    return attn_rc(dsv4_cuda_attention_chunk(STREAM(c), q, n, n_head, head_dim, pos0, chunk_kv, kv_type, raw,
                                             raw_cap, comp, ratio, sel, n_sel, sd, kq_scale, out),
                   "attention_chunk", err);
}

/* Gate of attn_chunk_qnr: a prefill chunk the tensor-core attention takes (DS4 numerics, not
 * DSV4_CUDA_ATTN=fast / exact; 512-wide heads in blocks of 64); the call itself checks the rest
 * (alignment, row types, the rotation) and declines with DSV4_ERR_UNSUPPORTED. */
bool cu_attention_chunk_qnr_ok(const cuda_ctx *c, uint32_t n_tokens, uint32_t head_dim, uint32_t n_head) {
    return n_tokens > 1 && attn_fast(c) && c->attn_tc && head_dim == 512 && n_head > 0 && n_head % 64 == 0;
}

dsv4_status cu_attention_chunk_qnr(void *vctx, const float *q, uint32_t n, uint32_t n_head, uint32_t head_dim,
                                   uint32_t pos0, const float *chunk_kv, uint32_t kv_type, const void *raw,
                                   uint32_t raw_cap, const void *comp, uint32_t ratio, const int32_t *sel,
                                   uint32_t n_sel, const dsv4_tensor *sinks, float kq_scale, float eps,
                                   const dsv4_rope *rope, bool rope_out, float *out, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    if (!cu_attention_chunk_qnr_ok(c, n, head_dim, n_head) || n > 65535 ||
        !dsv4_cuda_attention_chunk_tc_ok(n, n_head, head_dim, kv_type, q, out, raw, comp, chunk_kv) ||
        !dsv4_cuda_attention_chunk_tc_qnr_ok(rope))
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED,
                         "attention_chunk_qnr: %u queries of %u heads of %u not taken", n, n_head, head_dim);
    const float *sd = chunk_sinks(c, sinks, n_head, "attention_chunk_qnr", err);
    if (!sd) return DSV4_ERR_INVALID;
    return chunk_tc(c, q, n, n_head, head_dim, pos0, chunk_kv, kv_type, raw, raw_cap, comp, ratio, sel, n_sel,
                    sd, kq_scale, eps, rope, rope_out ? rope : NULL, out, "attention_chunk_qnr (tc)", err);
}
