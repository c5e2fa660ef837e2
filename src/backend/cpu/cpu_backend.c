/* CPU backend: the op table, host "device" memory and scratch. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "quant/quant.h"

void *cpu_scratch(cpu_ctx *c, int slot, size_t bytes) {
    if (bytes == 0) bytes = 64;
    if (c->scratch_bytes[slot] >= bytes) return c->scratch[slot];
    size_t sz = (bytes + 63) & ~(size_t)63;
    sz += sz / 4; /* grow with headroom so slowly growing chunks do not reallocate each time */
    sz = (sz + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, sz);
    if (!p) return NULL;
    free(c->scratch[slot]);
    c->scratch[slot] = p;
    c->scratch_bytes[slot] = sz;
    return p;
}

void cpu_f16_to_f32_row(const void *h, uint64_t n, float *out) {
    const uint16_t *p = h;
    for (uint64_t i = 0; i < n; i++) out[i] = dsv4_f16_to_f32(p[i]);
}

dsv4_status cpu_kv_rows_f32(cpu_ctx *c, int slot, uint32_t rows_type, const void *rows, uint64_t n_rows,
                            uint32_t width, const float **out, dsv4_error *err) {
    if (rows_type == DSV4_TYPE_F32) {
        *out = rows;
        return DSV4_OK;
    }
    if (rows_type != DSV4_TYPE_F16 && (rows_type != DSV4_KV_FP4 || width % 32))
        return dsv4_fail(err, DSV4_ERR_INVALID, "KV rows of type %#x and width %u (F32, F16 or FP4)",
                         rows_type, width);
    float *f = cpu_scratch(c, slot, ((size_t)n_rows * width + 1) * sizeof(float));
    if (!f)
        return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory reading %llu KV rows",
                         (unsigned long long)n_rows);
    if (rows_type == DSV4_TYPE_F16)
        cpu_f16_to_f32_row(rows, n_rows * width, f);
    else
        for (uint64_t r = 0; r < n_rows; r++)
            dsv4_fp4_unpack_row((const uint8_t *)rows + r * (width / 32 * DSV4_KV_FP4_BLOCK_BYTES), width,
                                f + r * width);
    *out = f;
    return DSV4_OK;
}

const float *cpu_vec_f32(const dsv4_tensor *t, float *tmp, uint64_t n) {
    if (t->type == DSV4_TYPE_F32) return (const float *)t->data;
    if (!quant_dequant_row(t->type, t->data, tmp, (int64_t)n)) return NULL;
    return tmp;
}

const float *cpu_row_f32(uint32_t type, const void *row, uint64_t n, float *tmp) {
    if (type == DSV4_TYPE_F32) return (const float *)row;
    return quant_dequant_row(type, row, tmp, (int64_t)n) ? tmp : NULL;
}

float cpu_dot_exact(const float *w, const float *x, uint64_t n) {
    /* four fixed lanes: independent chains (speed), same order for every call (reproducible) */
    double acc[4] = {0.0, 0.0, 0.0, 0.0};
    uint64_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int l = 0; l < 4; l++) acc[l] += (double)w[i + l] * (double)x[i + l];
    for (; i < n; i++) acc[0] += (double)w[i] * (double)x[i];
    return (float)((acc[0] + acc[1]) + (acc[2] + acc[3]));
}

static dsv4_status cpu_buf_alloc(void *ctx, size_t bytes, void **out, dsv4_error *err) {
    (void)ctx;
    size_t sz = ((bytes ? bytes : 1) + 63) & ~(size_t)63;
    *out = aligned_alloc(64, sz);
    if (!*out) return dsv4_fail(err, DSV4_ERR_NOMEM, "cannot allocate %zu bytes of CPU buffer memory", bytes);
    return DSV4_OK;
}

static void cpu_buf_free(void *ctx, void *p) {
    (void)ctx;
    free(p);
}

static dsv4_status cpu_write(void *ctx, void *dst, const void *src, size_t bytes, dsv4_error *err) {
    (void)ctx, (void)err;
    if (bytes) memcpy(dst, src, bytes);
    return DSV4_OK;
}

static dsv4_status cpu_copy(void *ctx, void *dst, const void *src, size_t bytes, dsv4_error *err) {
    (void)ctx, (void)err;
    if (bytes && dst != src) memmove(dst, src, bytes);
    return DSV4_OK;
}

static dsv4_status cpu_fill_f32(void *ctx, float *dst, float v, size_t n, dsv4_error *err) {
    (void)ctx, (void)err;
    for (size_t i = 0; i < n; i++) dst[i] = v;
    return DSV4_OK;
}

static dsv4_status cpu_sync(void *ctx, dsv4_error *err) {
    (void)ctx, (void)err;
    return DSV4_OK;
}

/* Every fusion: any mode, tier and row count (its arithmetic is the unfused ops' own row kernels,
 * bitwise), as long as the shapes and types are ones the unfused ops take. */
static bool cpu_fused_available(void *ctx, dsv4_fused_op op, const dsv4_fused_query *q) {
    switch (op) {
    case DSV4_FUSED_HC_PRE_NORM:
        return q->n_tokens > 0 && q->n_hc > 0 && q->n_hc <= 16 && q->width > 0 &&
               cpu_supports_weight_type(ctx, q->weight_type) &&
               (q->aux_type == DSV4_TYPE_F32 || q->aux_type == DSV4_TYPE_F16);
    case DSV4_FUSED_Q_NORM_ROPE: return q->n_tokens > 0 && q->width > 0;
    case DSV4_FUSED_KV_NORM_ROPE_FP8:
        return q->n_tokens > 0 && q->width > 0 &&
               (q->aux_type == DSV4_TYPE_F32 || q->aux_type == DSV4_TYPE_F16);
    case DSV4_FUSED_PARALLEL_FFN: return q->n_tokens > 0;
    case DSV4_FUSED_PARALLEL_ATTN: return q->n_tokens == 1;
    case DSV4_FUSED_HC_POST_ADD: return q->n_tokens > 0 && q->n_hc > 0;
    case DSV4_FUSED_ATTN_ROPE: return q->n_tokens == 1 && q->width > 0;
    case DSV4_FUSED_MOE_SUM_POST: return q->n_tokens == 1 && q->n_hc > 0;
    case DSV4_FUSED_Q_NORM_ROPE_IDX: return q->n_tokens == 1 && q->width > 0 && q->width2 > 0;
    case DSV4_FUSED_HC_POST_PRE_NORM:
        return q->n_tokens == 1 && q->n_hc > 0 && q->n_hc <= 16 && q->width > 0 &&
               cpu_supports_weight_type(ctx, q->weight_type) &&
               (q->aux_type == DSV4_TYPE_F32 || q->aux_type == DSV4_TYPE_F16);
    case DSV4_FUSED_ROUTER_TOPK:
        return q->n_tokens == 1 && q->width > 0 && q->width2 > 0 && q->width2 <= q->width;
    case DSV4_FUSED_ATTN_CHUNK_QNR: return q->n_tokens > 1 && q->width > 0 && q->width % 2 == 0;
    case DSV4_FUSED_ATTN_QNR: return q->n_tokens == 1 && q->width > 0 && q->width % 2 == 0;
    case DSV4_FUSED_EMIT_ROW:
        return q->n_tokens == 1 && q->width > 0 &&
               (q->aux_type == DSV4_TYPE_F32 || q->aux_type == DSV4_TYPE_F16);
    default: return false;
    }
}

/* One lane: running the side lane's ops first and the main lane's after them is a valid schedule
 * of the lanes, so parallel_ffn and parallel_attn run through the graph's protocol on the CPU too. */
static dsv4_status cpu_lanes(void *ctx, int what, dsv4_error *err) {
    (void)ctx;
    if (what != DSV4_LANE_SIDE && what != DSV4_LANE_MAIN && what != DSV4_LANE_JOIN)
        return dsv4_fail(err, DSV4_ERR_INVALID, "lanes: unknown switch %d", what);
    return DSV4_OK;
}

static void cpu_destroy(void *vctx) {
    cpu_ctx *c = vctx;
    if (!c) return;
    dsv4_tp_free(c->tp);
    for (int i = 0; i < CPU_SCRATCH_SLOTS; i++) free(c->scratch[i]);
    free(c);
}

static const dsv4_backend_ops cpu_ops = {
    .name = "cpu",
    .buf_alloc = cpu_buf_alloc,
    .buf_free = cpu_buf_free,
    .write = cpu_write,
    .read = cpu_write,
    .copy = cpu_copy,
    .fill_f32 = cpu_fill_f32,
    .sync = cpu_sync,
    .supports_weight_type = cpu_supports_weight_type,
    .fused_available = cpu_fused_available,
    .embed = cpu_embed,
    .hc_pre = cpu_hc_pre,
    .hc_post = cpu_hc_post,
    .hc_head = cpu_hc_head,
    .rmsnorm = cpu_rmsnorm,
    .matmul = cpu_matmul,
    .lanes = cpu_lanes,
    .add = cpu_add,
    .swiglu = cpu_swiglu,
    .rope_tail = cpu_rope_tail,
    .fp8_kv = cpu_fp8_kv,
    .hadamard_fp4 = cpu_hadamard_fp4,
    .store_f16 = cpu_store_f16,
    .compressor_step = cpu_compressor_step,
    .indexer_topk = cpu_indexer_topk,
    .attention = cpu_attention,
    .attention_rope = cpu_attention_rope,
    .attention_qnr = cpu_attention_qnr,
    .hc_post_add = cpu_hc_post_add,
    .moe_slots = cpu_moe_slots,
    .hc_post_slots = cpu_hc_post_slots,
    .router_select = cpu_router_select,
    .moe = cpu_moe,
    .hc_pre_norm = cpu_hc_pre_norm,
    .q_norm_rope = cpu_q_norm_rope,
    .kv_norm_rope_fp8 = cpu_kv_norm_rope_fp8,
    .q_norm_rope_idx = cpu_q_norm_rope_idx,
    .emit_row = cpu_emit_row,
    .matmuls_router = cpu_matmuls_router,
    .hc_post_pre_norm = cpu_hc_post_pre_norm,
    .compressor_chunk = cpu_compressor_chunk,
    .indexer_topk_chunk = cpu_indexer_topk_chunk,
    .attention_chunk = cpu_attention_chunk,
    .attention_chunk_qnr = cpu_attention_chunk_qnr,
    .destroy = cpu_destroy,
};

dsv4_status dsv4_backend_cpu_create(uint32_t n_threads, dsv4_backend *out, dsv4_error *err) {
    out->ops = NULL;
    out->ctx = NULL;
    cpu_ctx *c = calloc(1, sizeof(*c));
    if (!c) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory creating the CPU backend");
    dsv4_status st = dsv4_tp_create(n_threads, &c->tp, err);
    if (st != DSV4_OK) {
        free(c);
        return st;
    }
    out->ops = &cpu_ops;
    out->ctx = c;
    return DSV4_OK;
}

uint32_t dsv4_backend_cpu_threads(const dsv4_backend *b) {
    if (!b || b->ops != &cpu_ops) return 0;
    return dsv4_tp_threads(((const cpu_ctx *)b->ctx)->tp);
}

dsv4_status dsv4_backend_cpu_set_numerics(dsv4_backend *b, dsv4_numerics mode, dsv4_error *err) {
    if (!b || b->ops != &cpu_ops) return dsv4_fail(err, DSV4_ERR_INVALID, "set_numerics: not a CPU backend");
    if (mode != DSV4_NUMERICS_DS4 && mode != DSV4_NUMERICS_EXACT)
        return dsv4_fail(err, DSV4_ERR_INVALID, "numerics mode %d is neither ds4 (0) nor exact (1)",
                         (int)mode);
    ((cpu_ctx *)b->ctx)->numerics = mode;
    return DSV4_OK;
}
