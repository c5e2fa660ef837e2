/* Attention-side ops: RoPE, KV rounding, compressor frontier, indexer, sink attention
 * (spec model-attention-hc.md §4, §6). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "quant/quant.h"

typedef struct {
    float *x;
    uint32_t n_head, head_dim, pos0, pos_step;
    const dsv4_rope *rope;
    bool inverse;
} rope_job;

static void rope_worker(void *arg, uint64_t r0, uint64_t r1, uint32_t th) {
    (void)th;
    const rope_job *j = arg;
    const uint64_t w = (uint64_t)j->n_head * j->head_dim;
    for (uint64_t r = r0; r < r1; r++)
        cpu_rope_row(j->x + r * w, j->n_head, j->head_dim, j->pos0 + (uint32_t)r * j->pos_step, j->rope,
                     j->inverse);
}

dsv4_status cpu_rope_tail(void *vctx, float *x, uint32_t n_rows, uint32_t n_head, uint32_t head_dim,
                          uint32_t pos0, uint32_t pos_step, const dsv4_rope *rope, bool inverse,
                          dsv4_error *err) {
    cpu_ctx *c = vctx;
    if (rope->n_rot > head_dim || rope->n_rot % 2 || rope->n_rot > 512)
        return dsv4_fail(err, DSV4_ERR_INVALID, "rope: %u rotated dims do not fit heads of %u", rope->n_rot,
                         head_dim);
    rope_job j = {x, n_head, head_dim, pos0, pos_step, rope, inverse};
    dsv4_tp_run(c->tp, n_rows, 4, rope_worker, &j);
    return DSV4_OK;
}

dsv4_status cpu_fp8_kv(void *vctx, float *x, uint32_t n_rows, uint32_t width, uint32_t n_nope,
                       dsv4_error *err) {
    const cpu_ctx *c = vctx;
    if (n_nope % 64 || n_nope > width)
        return dsv4_fail(err, DSV4_ERR_INVALID,
                         "fp8: %u quantized dims of rows of %u (need a multiple of 64)", n_nope, width);
    if (c->numerics == DSV4_NUMERICS_EXACT) return DSV4_OK;
    for (uint32_t r = 0; r < n_rows; r++) dsv4_fp8_roundtrip_blocks64(x + (uint64_t)r * width, n_nope);
    return DSV4_OK;
}

/* ---- fused: norm + RoPE (+ FP8) of the query heads / KV rows, one token at a time ---- */

typedef struct {
    float *x;
    const float *w; /* norm weight (KV) or NULL (query heads) */
    uint32_t n_head, head_dim, pos0, pos_step, n_nope;
    float eps;
    const dsv4_rope *rope;
    bool fp8;
} norm_rope_job;

/* Token r: the rmsnorm op's row kernel on each head, then the rope op's row kernel, then the
 * fp8_kv op's block round trip: the unfused ops' own kernels in their order, so bitwise. */
static void norm_rope_worker(void *arg, uint64_t r0, uint64_t r1, uint32_t th) {
    (void)th;
    const norm_rope_job *j = arg;
    const uint64_t w = (uint64_t)j->n_head * j->head_dim;
    for (uint64_t r = r0; r < r1; r++) {
        float *row = j->x + r * w;
        for (uint32_t h = 0; h < j->n_head; h++) {
            float *hr = row + (uint64_t)h * j->head_dim;
            cpu_rmsnorm_row(hr, j->w, j->head_dim, j->eps, hr);
        }
        cpu_rope_row(row, j->n_head, j->head_dim, j->pos0 + (uint32_t)r * j->pos_step, j->rope, false);
        if (j->fp8) dsv4_fp8_roundtrip_blocks64(row, j->n_nope);
    }
}

dsv4_status cpu_q_norm_rope(void *vctx, float *x, uint32_t n_rows, uint32_t n_head, uint32_t head_dim,
                            float eps, uint32_t pos0, uint32_t pos_step, const dsv4_rope *rope,
                            dsv4_error *err) {
    cpu_ctx *c = vctx;
    if (rope->n_rot > head_dim || rope->n_rot % 2 || rope->n_rot > 512)
        return dsv4_fail(err, DSV4_ERR_INVALID, "q_norm_rope: %u rotated dims do not fit heads of %u",
                         rope->n_rot, head_dim);
    norm_rope_job j = {x, NULL, n_head, head_dim, pos0, pos_step, 0, eps, rope, false};
    dsv4_tp_run(c->tp, n_rows, 1, norm_rope_worker, &j);
    return DSV4_OK;
}

/* The three ops in their order: the fused op's reference on every backend. */
dsv4_status cpu_q_norm_rope_idx(void *vctx, float *q, uint32_t n_head, uint32_t head_dim, float eps,
                                float *iq, uint32_t idx_n_head, uint32_t idx_head_dim, uint32_t pos,
                                const dsv4_rope *rope, dsv4_error *err) {
    dsv4_status st = cpu_q_norm_rope(vctx, q, 1, n_head, head_dim, eps, pos, 1, rope, err);
    if (st == DSV4_OK) st = cpu_rope_tail(vctx, iq, 1, idx_n_head, idx_head_dim, pos, 1, rope, false, err);
    if (st == DSV4_OK) st = cpu_hadamard_fp4(vctx, iq, idx_n_head, idx_head_dim, err);
    return st;
}

/* The four ops in their order: the fused op's reference on every backend. */
dsv4_status cpu_emit_row(void *vctx, const float *x, const dsv4_tensor *norm_w, uint32_t width, float eps,
                         uint32_t pos, const dsv4_rope *rope, bool hadamard, uint32_t n_nope, float *y,
                         void *dst, uint32_t dst_type, dsv4_error *err) {
    dsv4_status st = cpu_rmsnorm(vctx, x, norm_w, 1, width, eps, y, err);
    if (st == DSV4_OK) st = cpu_rope_tail(vctx, y, 1, 1, width, pos, 0, rope, false, err);
    if (st == DSV4_OK)
        st = hadamard ? cpu_hadamard_fp4(vctx, y, 1, width, err) : cpu_fp8_kv(vctx, y, 1, width, n_nope, err);
    if (st == DSV4_OK) st = cpu_store_f16(vctx, dst, dst_type, y, 1, width, err);
    return st;
}

dsv4_status cpu_kv_norm_rope_fp8(void *vctx, float *x, const dsv4_tensor *norm_w, uint32_t n_rows,
                                 uint32_t width, float eps, uint32_t pos0, uint32_t pos_step,
                                 const dsv4_rope *rope, uint32_t n_nope, dsv4_error *err) {
    cpu_ctx *c = vctx;
    if (!norm_w || norm_w->ne[0] != width)
        return dsv4_fail(err, DSV4_ERR_INVALID, "kv_norm_rope_fp8: norm weight %s does not have %u values",
                         norm_w && norm_w->name ? norm_w->name : "?", width);
    if (rope->n_rot > width || rope->n_rot % 2 || rope->n_rot > 512)
        return dsv4_fail(err, DSV4_ERR_INVALID, "kv_norm_rope_fp8: %u rotated dims do not fit rows of %u",
                         rope->n_rot, width);
    if (n_nope % 64 || n_nope > width)
        return dsv4_fail(err, DSV4_ERR_INVALID,
                         "kv_norm_rope_fp8: %u quantized dims of rows of %u (need a multiple of 64)", n_nope,
                         width);
    float *tmp = cpu_scratch(c, CPU_SLOT_VEC, (size_t)width * sizeof(float));
    if (!tmp) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory in kv_norm_rope_fp8");
    const float *wv = cpu_vec_f32(norm_w, tmp, width);
    if (!wv)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "kv_norm_rope_fp8: cannot read weight %s of type %s",
                         norm_w->name ? norm_w->name : "?", dsv4_type_name(norm_w->type));
    /* EXACT numerics skip the FP8 step, as fp8_kv does */
    norm_rope_job j = {x,        wv,     1,   width, pos0,
                       pos_step, n_nope, eps, rope,  c->numerics != DSV4_NUMERICS_EXACT};
    dsv4_tp_run(c->tp, n_rows, 1, norm_rope_worker, &j);
    return DSV4_OK;
}

dsv4_status cpu_hadamard_fp4(void *vctx, float *x, uint32_t n_rows, uint32_t width, dsv4_error *err) {
    const cpu_ctx *c = vctx;
    if (width == 0 || (width & (width - 1)) || width % 32)
        return dsv4_fail(err, DSV4_ERR_INVALID, "hadamard: row width %u is not a power of two >= 32", width);
    /* EXACT: the Hadamard is orthonormal and applied to both sides of every indexer dot, so
     * skipping it (and the FP4 step) leaves the scores mathematically unchanged */
    if (c->numerics == DSV4_NUMERICS_EXACT) return DSV4_OK;
    for (uint32_t r = 0; r < n_rows; r++) {
        float *row = x + (uint64_t)r * width;
        dsv4_hadamard_inplace(row, width);
        dsv4_fp4_roundtrip_blocks32(row, width);
    }
    return DSV4_OK;
}

dsv4_status cpu_store_f16(void *vctx, void *vdst, uint32_t dst_type, const float *src, uint32_t n_rows,
                          uint32_t width, dsv4_error *err) {
    const cpu_ctx *c = vctx;
    const uint64_t n = (uint64_t)n_rows * width;
    if (dst_type == DSV4_TYPE_F16) {
        uint16_t *h = vdst;
        for (uint64_t i = 0; i < n; i++) h[i] = dsv4_f32_to_f16(src[i]);
        return DSV4_OK;
    }
    if (dst_type == DSV4_KV_FP4) {
        if (width % 32)
            return dsv4_fail(err, DSV4_ERR_INVALID, "store_f16: FP4 rows of %u (need a multiple of 32)",
                             width);
        const uint64_t rb = (uint64_t)width / 32 * DSV4_KV_FP4_BLOCK_BYTES;
        for (uint32_t r = 0; r < n_rows; r++)
            dsv4_fp4_pack_row(src + (uint64_t)r * width, width, (uint8_t *)vdst + r * rb);
        return DSV4_OK;
    }
    if (dst_type != DSV4_TYPE_F32)
        return dsv4_fail(err, DSV4_ERR_INVALID, "store_f16: rows of type %s", dsv4_type_name(dst_type));
    float *dst = vdst;
    if (c->numerics == DSV4_NUMERICS_EXACT) {
        if (n && dst != src) memmove(dst, src, n * sizeof(float));
        return DSV4_OK;
    }
    for (uint64_t i = 0; i < n; i++) dst[i] = dsv4_f16_round(src[i]);
    return DSV4_OK;
}

dsv4_status cpu_compressor_step(void *vctx, const float *kv, const float *score, const dsv4_tensor *ape,
                                uint32_t pos, uint32_t ratio, uint32_t d_c, float *state_kv,
                                float *state_score, float *pooled, dsv4_error *err) {
    cpu_ctx *c = vctx;
    if (ratio < 2) return dsv4_fail(err, DSV4_ERR_INVALID, "compressor: ratio %u", ratio);
    const uint32_t coff = ratio == 4 ? 2u : 1u;
    const uint64_t width = (uint64_t)coff * d_c;
    const uint32_t phase = pos % ratio;
    const uint32_t row = ratio == 4 ? 4 + phase : phase;
    if (ape->ne[0] != width || ape->ne[1] < ratio)
        return dsv4_fail(err, DSV4_ERR_INVALID, "compressor: tensor %s is %llux%llu, expected %llux%u",
                         ape->name ? ape->name : "?", (unsigned long long)ape->ne[0],
                         (unsigned long long)ape->ne[1], (unsigned long long)width, ratio);
    float *ape_row = cpu_scratch(c, CPU_SLOT_VEC, width * sizeof(float));
    if (!ape_row) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory in compressor");
    if (!quant_dequant_row(ape->type, dsv4_tensor_row(ape, phase), ape_row, (int64_t)width))
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "compressor: cannot decode %s of type %s",
                         ape->name ? ape->name : "?", dsv4_type_name(ape->type));
    float *skv = state_kv + row * width, *ssc = state_score + row * width;
    for (uint64_t j = 0; j < width; j++) {
        skv[j] = kv[j];
        ssc[j] = score[j] + ape_row[j];
    }
    if ((pos + 1) % ratio != 0) return DSV4_OK;
    cpu_compressor_pool(state_kv, state_score, d_c, ratio, pooled);
    if (ratio == 4) { /* the current window becomes the previous one; rows 4..7 are rewritten next */
        memcpy(state_kv, state_kv + 4 * width, 4 * width * sizeof(float));
        memcpy(state_score, state_score + 4 * width, 4 * width * sizeof(float));
    }
    return DSV4_OK;
}

typedef struct {
    const float *q, *w, *rows;
    uint32_t n_head, head_dim;
    float *scores;
} iscore_job;

static void iscore_worker(void *arg, uint64_t i0, uint64_t i1, uint32_t th) {
    (void)th;
    const iscore_job *j = arg;
    for (uint64_t i = i0; i < i1; i++)
        j->scores[i] = cpu_indexer_score(j->rows + i * j->head_dim, j->q, j->w, j->n_head, j->head_dim);
}

dsv4_status cpu_indexer_topk(void *vctx, const float *q, const float *w, float w_scale, uint32_t n_head,
                             uint32_t head_dim, uint32_t rows_type, const void *krows, uint32_t n_rows,
                             uint32_t k, int32_t *sel, dsv4_error *err) {
    cpu_ctx *c = vctx;
    if (k > n_rows) return dsv4_fail(err, DSV4_ERR_INVALID, "indexer: top-%u of %u rows", k, n_rows);
    const float *rows = NULL;
    dsv4_status st = cpu_kv_rows_f32(c, CPU_SLOT_C, rows_type, krows, n_rows, head_dim, &rows, err);
    if (st != DSV4_OK) return st;
    float *scores = cpu_scratch(c, CPU_SLOT_A, (size_t)n_rows * sizeof(float));
    float *ws = cpu_scratch(c, CPU_SLOT_B, (size_t)n_head * sizeof(float));
    if (!scores || !ws) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory in indexer");
    for (uint32_t h = 0; h < n_head; h++) ws[h] = w[h] * w_scale; /* ds4 scales w before the head sum */
    iscore_job j = {q, ws, rows, n_head, head_dim, scores};
    dsv4_tp_run(c->tp, n_rows, 64, iscore_worker, &j);
    cpu_topk_desc(scores, n_rows, k, sel);
    qsort(sel, k, sizeof(int32_t), cpu_cmp_i32); /* attention visits selected rows in row order */
    return DSV4_OK;
}

typedef struct {
    const float *q;
    uint32_t head_dim;
    const float *const *rows;
    uint32_t n_rows;
    const float *sinks;
    float kq_scale;
    float *scores; /* per thread: n_rows */
    float *out;
} attn_job;

static void attn_worker(void *arg, uint64_t h0, uint64_t h1, uint32_t th) {
    const attn_job *j = arg;
    float *score = j->scores + (uint64_t)th * j->n_rows;
    for (uint64_t h = h0; h < h1; h++)
        cpu_attention_head(j->q + h * j->head_dim, j->head_dim, j->rows, j->n_rows, j->sinks[h], j->kq_scale,
                           score, j->out + h * j->head_dim);
}

dsv4_status cpu_attention(void *vctx, const float *q, uint32_t n_head, uint32_t head_dim, uint32_t kv_type,
                          const void *kraw, uint32_t raw_cap, uint32_t raw_start, uint32_t n_raw,
                          const void *kcomp, uint32_t n_comp, const int32_t *sel, uint32_t n_sel,
                          const dsv4_tensor *sinks, float kq_scale, float *out, dsv4_error *err) {
    cpu_ctx *c = vctx;
    if (n_raw > raw_cap || (n_raw && raw_start >= raw_cap))
        return dsv4_fail(err, DSV4_ERR_INVALID, "attention: raw window %u rows from %u in a ring of %u",
                         n_raw, raw_start, raw_cap);
    if (sinks->ne[0] < n_head)
        return dsv4_fail(err, DSV4_ERR_INVALID, "attention: sinks %s has %llu values for %u heads",
                         sinks->name ? sinks->name : "?", (unsigned long long)sinks->ne[0], n_head);
    const uint32_t n_c = sel ? n_sel : n_comp;
    const uint32_t n_rows = n_raw + n_c;
    if (kv_type != DSV4_TYPE_F32 && kv_type != DSV4_TYPE_F16)
        return dsv4_fail(err, DSV4_ERR_INVALID, "attention: KV rows of type %s", dsv4_type_name(kv_type));
    const uint64_t es = kv_type == DSV4_TYPE_F16 ? 2 : 4;
    const unsigned char *raw = kraw, *comp = kcomp;
    const uint32_t n_threads = dsv4_tp_threads(c->tp);
    const float **rows = cpu_scratch(c, CPU_SLOT_A, (size_t)(n_rows + 1) * sizeof(float *));
    float *scores = cpu_scratch(c, CPU_SLOT_B, (size_t)n_threads * (n_rows + 1) * sizeof(float));
    float *sink_tmp = cpu_scratch(c, CPU_SLOT_VEC, (size_t)n_head * sizeof(float));
    if (!rows || !scores || !sink_tmp) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory in attention");
    const float *sv = cpu_vec_f32(sinks, sink_tmp, n_head);
    if (!sv)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "attention: cannot read sinks %s",
                         sinks->name ? sinks->name : "?");
    float *f16buf = NULL; /* F16 rows read as f32 (exact), each into its own scratch row */
    if (kv_type == DSV4_TYPE_F16) {
        f16buf = cpu_scratch(c, CPU_SLOT_C, ((size_t)n_rows + 1) * head_dim * sizeof(float));
        if (!f16buf) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory in attention");
    }
    /* raw rows oldest -> newest, then compressed rows in increasing index (ds4 CPU order) */
    for (uint32_t i = 0; i < n_rows; i++) {
        const unsigned char *src;
        if (i < n_raw) {
            src = raw + (uint64_t)((raw_start + i) % raw_cap) * head_dim * es;
        } else {
            const uint32_t r = sel ? (uint32_t)sel[i - n_raw] : i - n_raw;
            if (r >= n_comp)
                return dsv4_fail(err, DSV4_ERR_INVALID, "attention: selected row %u of %u", r, n_comp);
            src = comp + (uint64_t)r * head_dim * es;
        }
        if (f16buf) {
            cpu_f16_to_f32_row(src, head_dim, f16buf + (uint64_t)i * head_dim);
            rows[i] = f16buf + (uint64_t)i * head_dim;
        } else {
            rows[i] = (const float *)(const void *)src;
        }
    }
    attn_job j = {q, head_dim, rows, n_rows, sv, kq_scale, scores, out};
    dsv4_tp_run(c->tp, n_head, 1, attn_worker, &j);
    return DSV4_OK;
}

/* attn_rope (backend.h): the attention of one token, then its heads' inverse RoPE; the two ops
 * themselves, so bitwise the pair (offered on the CPU so the graph's protocol runs in CI). */
dsv4_status cpu_attention_rope(void *vctx, const float *q, uint32_t n_head, uint32_t head_dim,
                               uint32_t kv_type, const void *raw, uint32_t raw_cap, uint32_t raw_start,
                               uint32_t n_raw, const void *comp, uint32_t n_comp, const int32_t *sel,
                               uint32_t n_sel, const dsv4_tensor *sinks, float kq_scale, uint32_t pos,
                               const dsv4_rope *rope, float *out, dsv4_error *err) {
    const dsv4_status st = cpu_attention(vctx, q, n_head, head_dim, kv_type, raw, raw_cap, raw_start, n_raw,
                                         comp, n_comp, sel, n_sel, sinks, kq_scale, out, err);
    if (st != DSV4_OK) return st;
    return cpu_rope_tail(vctx, out, 1, n_head, head_dim, pos, 1, rope, true, err);
}

/* attn_qnr (backend.h): q_norm_rope on a copy of the raw query, then attention_rope; the ops in their
 * order (offered on the CPU so the graph's protocol runs in CI). */
dsv4_status cpu_attention_qnr(void *vctx, const float *q, uint32_t n_head, uint32_t head_dim,
                              uint32_t kv_type, const void *raw, uint32_t raw_cap, uint32_t raw_start,
                              uint32_t n_raw, const void *comp, uint32_t n_comp, const int32_t *sel,
                              uint32_t n_sel, const dsv4_tensor *sinks, float kq_scale, float eps,
                              uint32_t pos, const dsv4_rope *rope, float *out, dsv4_error *err) {
    const size_t nq = (size_t)n_head * head_dim;
    if (nq == 0) return DSV4_OK;
    float *qn = malloc(nq * sizeof(float));
    if (!qn) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory in attention_qnr (%zu query values)", nq);
    memcpy(qn, q, nq * sizeof(float));
    dsv4_status st = cpu_q_norm_rope(vctx, qn, 1, n_head, head_dim, eps, pos, 1, rope, err);
    if (st == DSV4_OK)
        st = cpu_attention_rope(vctx, qn, n_head, head_dim, kv_type, raw, raw_cap, raw_start, n_raw, comp,
                                n_comp, sel, n_sel, sinks, kq_scale, pos, rope, out, err);
    free(qn);
    return st;
}
