/* CUDA backend: context, stream, memory ops, scratch, token staging and the op table. Weight
 * residency (the upload) lives in cuda_backend_weights.cu. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_blas.h"
#include "backend/cuda/cuda_moe_half.h"

dsv4_status cu_fail(dsv4_error *err, cudaError_t e, const char *what) {
    return dsv4_fail(err, e == cudaErrorMemoryAllocation ? DSV4_ERR_NOMEM : DSV4_ERR_IO, "cuda %s: %s (%s)",
                     what, cudaGetErrorString(e), cudaGetErrorName(e));
}

dsv4_status cu_launched(dsv4_error *err, const char *what) {
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? DSV4_OK : cu_fail(err, e, what);
}

/* The device is idle (after a stream sync): free the scratch retired during recordings. */
void cu_scratch_release_retired(cuda_ctx *c) {
    for (int i = 0; i < c->n_scratch_retired; i++) cudaFree(c->scratch_retired[i]);
    c->n_sync[CU_SYNC_FREE] += (uint64_t)c->n_scratch_retired;
    c->n_scratch_retired = 0;
}

void *cu_scratch(cuda_ctx *c, int slot, size_t bytes, dsv4_error *err) {
    if (bytes == 0) bytes = 256;
    if (c->lane == 1) slot += CU_SLOTS;
    if (c->scratch_bytes[slot] >= bytes) return c->scratch[slot];
    /* Freeing waits for the device, which a recording may not do: while recording, the old buffer
     * is retired (freed at the next sync) and the new one allocated (the capture is relaxed), so
     * the first decode step after a prefill is recorded like the others. */
    if (c->step_capturing && c->scratch[slot] && c->n_scratch_retired >= 2 * CU_SLOTS) {
        dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "cuda: scratch slot %d grows during a step recording", slot);
        return NULL;
    }
    size_t sz = (bytes + 255) & ~(size_t)255;
    sz += sz / 4; /* headroom so slowly growing chunks do not reallocate each time */
    sz = (sz + 255) & ~(size_t)255;
    if (c->scratch[slot] && c->step_capturing) {
        c->scratch_retired[c->n_scratch_retired++] = c->scratch[slot];
        c->mem_gen++;
    } else if (c->scratch[slot]) { /* waits for the device: pending work may read it */
        cudaFree(c->scratch[slot]);
        c->mem_gen++;
        c->n_sync[CU_SYNC_FREE]++;
    }
    c->scratch[slot] = NULL;
    c->scratch_bytes[slot] = 0;
    if (slot == CU_SLOT_TOK) c->tok_dev = NULL;
    void *p = NULL;
    const cudaError_t e = cudaMalloc(&p, sz);
    if (e != cudaSuccess) {
        cudaGetLastError();
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        dsv4_fail(err, DSV4_ERR_NOMEM,
                  "cuda: cannot allocate %zu bytes of scratch (%zu bytes free of %zu): %s", sz, fr, tot,
                  cudaGetErrorString(e));
        return NULL;
    }
    c->scratch[slot] = p;
    c->scratch_bytes[slot] = sz;
    return p;
}

dsv4_status cu_tokens(cuda_ctx *c, const int32_t *host_tokens, uint32_t n, const int32_t **out,
                      dsv4_error *err) {
    const size_t bytes = (size_t)n * sizeof(int32_t);
    if (c->tok_dev && c->tok_n == n && memcmp(c->tok_host_copy, host_tokens, bytes) == 0) {
        *out = c->tok_dev;
        return DSV4_OK;
    }
    c->tok_dev = NULL;
    /* the pinned buffer may still feed the previous copy */
    if (c->pin_ev_live) {
        const cudaError_t e = cudaEventSynchronize(c->pin_ev);
        c->n_sync[CU_SYNC_STAGING]++;
        if (e != cudaSuccess) return cu_fail(err, e, "token staging");
        c->pin_ev_live = false;
    }
    if (c->pin_tok_cap < n) {
        if (c->pin_tok) cudaFreeHost(c->pin_tok);
        c->pin_tok = NULL;
        c->pin_tok_cap = 0;
        const size_t cap = n < 4096 ? 4096 : (size_t)n + n / 4;
        cudaError_t e = cudaMallocHost((void **)&c->pin_tok, cap * sizeof(int32_t));
        if (e != cudaSuccess) return cu_fail(err, e, "pinned token buffer");
        c->pin_tok_cap = cap;
    }
    if (c->tok_host_cap < n) {
        int32_t *p = (int32_t *)realloc(c->tok_host_copy, bytes);
        if (!p) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory for %u token ids", n);
        c->tok_host_copy = p;
        c->tok_host_cap = n;
    }
    int32_t *d = (int32_t *)cu_scratch(c, CU_SLOT_TOK, bytes, err);
    if (!d) return DSV4_ERR_NOMEM;
    memcpy(c->pin_tok, host_tokens, bytes);
    cudaError_t e = cudaMemcpyAsync(d, c->pin_tok, bytes, cudaMemcpyHostToDevice, c->stream);
    if (e == cudaSuccess) e = cudaEventRecord(c->pin_ev, c->stream);
    if (e != cudaSuccess) return cu_fail(err, e, "token upload");
    c->pin_ev_live = true;
    memcpy(c->tok_host_copy, host_tokens, bytes);
    c->tok_n = n;
    c->tok_dev = d;
    *out = d;
    return DSV4_OK;
}

/* ---- memory ops ---- */

static dsv4_status cu_buf_alloc(void *vctx, size_t bytes, void **out, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    *out = NULL;
    if (c->n_bufs == c->bufs_cap) {
        const size_t cap = c->bufs_cap ? 2 * c->bufs_cap : 64;
        cu_buf *nb = (cu_buf *)realloc(c->bufs, cap * sizeof *nb);
        if (!nb) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of host memory tracking device buffers");
        c->bufs = nb;
        c->bufs_cap = cap;
    }
    const size_t sz = ((bytes ? bytes : 1) + 255) & ~(size_t)255;
    void *p = NULL;
    const cudaError_t e = cudaMalloc(&p, sz);
    if (e != cudaSuccess) {
        cudaGetLastError();
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        return dsv4_fail(err, DSV4_ERR_NOMEM,
                         "cannot allocate %zu bytes of device memory on %s (%zu bytes free of %zu): %s",
                         bytes, c->caps.name, fr, tot, cudaGetErrorString(e));
    }
    c->bufs[c->n_bufs].p = p;
    c->bufs[c->n_bufs].bytes = sz;
    c->n_bufs++;
    c->buffer_bytes += sz;
    *out = p;
    return DSV4_OK;
}

static void cu_buf_free(void *vctx, void *ptr) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    if (!ptr) return;
    for (size_t i = 0; i < c->n_bufs; i++) {
        if (c->bufs[i].p != ptr) continue;
        c->buffer_bytes -= c->bufs[i].bytes;
        c->bufs[i] = c->bufs[--c->n_bufs];
        break;
    }
    cudaFree(ptr); /* waits for pending work that may still use it */
    c->mem_gen++;
    c->n_sync[CU_SYNC_FREE]++;
    cudaGetLastError();
}

static dsv4_status cu_write(void *vctx, void *dst, const void *src, size_t bytes, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    cu_preq_clear(c); /* may rewrite a row the producer-side Q8_0 record holds */
    if (!bytes) return DSV4_OK;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream); /* the caller may reuse src at once */
    c->n_sync[CU_SYNC_WRITE]++;
    return e == cudaSuccess ? DSV4_OK : cu_fail(err, e, "write (host to device)");
}

static dsv4_status cu_read(void *vctx, void *dst, const void *src, size_t bytes, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    if (!bytes) return DSV4_OK;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    c->n_sync[CU_SYNC_READ]++;
    return e == cudaSuccess ? DSV4_OK : cu_fail(err, e, "read (device to host)");
}

dsv4_status cu_copy(void *vctx, void *dst, const void *src, size_t bytes, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    cu_preq_clear(c); /* may rewrite a row the producer-side Q8_0 record holds */
    if (!bytes || dst == src) return DSV4_OK;
    const uint8_t *d = (const uint8_t *)dst, *s = (const uint8_t *)src;
    if (d < s + bytes && s < d + bytes) { /* overlapping (memmove semantics): go through scratch */
        void *tmp = cu_scratch(c, CU_SLOT_PACK, bytes, err);
        if (!tmp) return DSV4_ERR_NOMEM;
        cudaError_t e = cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, c->stream);
        if (e == cudaSuccess) e = cudaMemcpyAsync(dst, tmp, bytes, cudaMemcpyDeviceToDevice, c->stream);
        return e == cudaSuccess ? DSV4_OK : cu_fail(err, e, "copy");
    }
    const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream);
    return e == cudaSuccess ? DSV4_OK : cu_fail(err, e, "copy");
}

static dsv4_status cu_sync(void *vctx, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    cudaError_t e = cudaStreamSynchronize(c->stream);
    c->n_sync[CU_SYNC_STREAM]++;
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e == cudaSuccess && !c->step_capturing) cu_scratch_release_retired(c);
    return e == cudaSuccess ? DSV4_OK : cu_fail(err, e, "sync (a queued kernel failed)");
}

/* SIDE: the side stream waits for everything issued so far on the main stream, and ops go to it;
 * MAIN: ops go to the main stream again (not waiting for the side); JOIN: the main stream waits
 * for the side stream. Events recorded while a step is being captured join the side stream to
 * the capture, so a recorded step holds both branches. */
dsv4_status cu_lanes(void *vctx, int what, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    cudaError_t e = cudaSuccess;
    switch (what) {
    case DSV4_LANE_SIDE:
        if (c->lane != 0) return dsv4_fail(err, DSV4_ERR_INVALID, "lanes: side lane opened twice");
        if ((e = cudaEventRecord(c->lane_fork, c->main_stream)) != cudaSuccess ||
            (e = cudaStreamWaitEvent(c->side_stream, c->lane_fork, 0)) != cudaSuccess)
            return cu_fail(err, e, "lanes: fork");
        c->stream = c->side_stream;
        c->lane = 1;
        return DSV4_OK;
    case DSV4_LANE_MAIN:
        if (c->lane != 1) return dsv4_fail(err, DSV4_ERR_INVALID, "lanes: main lane without a side lane");
        c->stream = c->main_stream;
        c->lane = 2;
        return DSV4_OK;
    case DSV4_LANE_JOIN:
        if (c->lane == 0) return dsv4_fail(err, DSV4_ERR_INVALID, "lanes: join without a side lane");
        c->stream = c->main_stream;
        c->lane = 0;
        if ((e = cudaEventRecord(c->lane_join, c->side_stream)) != cudaSuccess ||
            (e = cudaStreamWaitEvent(c->main_stream, c->lane_join, 0)) != cudaSuccess)
            return cu_fail(err, e, "lanes: join");
        return DSV4_OK;
    default: return dsv4_fail(err, DSV4_ERR_INVALID, "lanes: unknown switch %d", what);
    }
}

/* Fused-op gates (docs/PATHS.md). DSV4_CUDA_FUSED_GATE=off forces every gate false (to prove that
 * none is selected then). */
static bool cu_fused_available(void *ctx, dsv4_fused_op op, const dsv4_fused_query *q) {
    const cuda_ctx *c = (const cuda_ctx *)ctx;
    if (c->fused_gates_off) return false;
    switch (op) {
    case DSV4_FUSED_HC_PRE_NORM: return cu_hc_pre_norm_ok(c, q->n_tokens, q->n_hc, q->width, q->aux_type);
    case DSV4_FUSED_Q_NORM_ROPE: return cu_q_norm_rope_ok(c, q->n_tokens, q->width);
    case DSV4_FUSED_Q_NORM_ROPE_IDX: return cu_q_norm_rope_idx_ok(c, q->n_tokens, q->width, q->width2);
    case DSV4_FUSED_EMIT_ROW: return cu_emit_row_ok(c, q->n_tokens, q->width, q->aux_type, q->width2);
    case DSV4_FUSED_HC_POST_PRE_NORM:
        return cu_hc_post_pre_norm_ok(c, q->n_tokens, q->n_hc, q->width, q->aux_type);
    case DSV4_FUSED_ROUTER_TOPK: /* the router weight on the warp-direct kernel, an F32 bias */
        return cu_router_topk_ok(c, q->n_tokens, q->width) && q->aux_type == DSV4_TYPE_F32 &&
               (q->weight_type == DSV4_TYPE_Q8_0 || q->weight_type == DSV4_TYPE_F16);
    case DSV4_FUSED_KV_NORM_ROPE_FP8: return cu_kv_norm_rope_fp8_ok(c, q->n_tokens, q->width, q->aux_type);
    case DSV4_FUSED_PARALLEL_FFN: return c->side_stream && c->lane == 0 && q->n_tokens > 0;
    case DSV4_FUSED_PARALLEL_ATTN: return c->side_stream && c->lane == 0 && q->n_tokens == 1;
    case DSV4_FUSED_HC_POST_ADD: return q->n_tokens > 0 && q->n_hc > 0 && q->n_hc <= 16; /* HC_MAX */
    case DSV4_FUSED_ATTN_ROPE: return cu_attention_rope_ok(c, q->n_tokens, q->width);
    case DSV4_FUSED_ATTN_QNR: return cu_attention_qnr_ok(c, q->n_tokens, q->width);
    case DSV4_FUSED_ATTN_CHUNK_QNR: return cu_attention_chunk_qnr_ok(c, q->n_tokens, q->width, q->width2);
    case DSV4_FUSED_MOE_SUM_POST:
        return q->n_hc > 0 && q->n_hc <= 16 &&
               cu_moe_slots_ok(c, q->n_tokens, q->aux_type, q->weight_type, q->width, q->width2);
    default: return false;
    }
}

static void cu_destroy(void *vctx) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    if (!c) return;
    cudaSetDevice(c->device);
    cu_prof_finish(c);
    cu_step_free(c);
    if (c->stream) cudaStreamSynchronize(c->stream);
    cu_weights_free(c);
    if (c->blas) dsv4_cuda_blas_destroy(c->blas);
    if (c->d_blas_scan) cudaFree(c->d_blas_scan);
    if (c->w16_cache) cudaFree(c->w16_cache);
    for (int i = 0; i < 2 * CU_SLOTS; i++)
        if (c->scratch[i]) cudaFree(c->scratch[i]);
    cu_scratch_release_retired(c);
    if (c->side_stream) cudaStreamSynchronize(c->side_stream), cudaStreamDestroy(c->side_stream);
    if (c->lane_fork) cudaEventDestroy(c->lane_fork);
    if (c->lane_join) cudaEventDestroy(c->lane_join);
    if (c->d_iq2_grid) cudaFree(c->d_iq2_grid);
    if (c->d_x16_tab) cudaFree(c->d_x16_tab);
    if (c->d_x16_stats) cudaFree(c->d_x16_stats);
    if (c->d_iq2_signs) cudaFree(c->d_iq2_signs);
    if (c->d_iota) cudaFree(c->d_iota);
    if (c->d_hc_ticket) cudaFree(c->d_hc_ticket);
    if (c->d_hc_tail) cudaFree(c->d_hc_tail);
    if (c->pin_tok) cudaFreeHost(c->pin_tok);
    if (c->pin_ev) cudaEventDestroy(c->pin_ev);
    if (c->xev) cudaEventDestroy(c->xev);
    free(c->tok_host_copy);
    for (size_t i = 0; i < c->n_bufs; i++) cudaFree(c->bufs[i].p);
    free(c->bufs);
    if (c->mv_ready) dsv4_cuda_mv_destroy(&c->mv);
    if (c->moe_dec_ready) dsv4_cuda_moe_dec_destroy(&c->moe_dec);
    if (c->stream) cudaStreamDestroy(c->stream);
    cudaGetLastError();
    free(c);
}

static const dsv4_backend_ops cuda_ops = {
    .name = "cuda",
    .buf_alloc = cu_buf_alloc,
    .buf_free = cu_buf_free,
    .write = cu_write,
    .read = cu_read,
    .copy = cu_copy,
    .fill_f32 = cu_fill_f32,
    .sync = cu_sync,
    .supports_weight_type = cu_supports_weight_type,
    .fused_available = cu_fused_available,
    .embed = cu_embed,
    .hc_pre = cu_hc_pre,
    .hc_post = cu_hc_post,
    .hc_head = cu_hc_head,
    .rmsnorm = cu_rmsnorm,
    .matmul = cu_matmul,
    .matmul_grouped = cu_matmul_grouped,
    .matmul_multi = cu_matmul_multi,
    .lanes = cu_lanes,
    .add = cu_add,
    .swiglu = cu_swiglu,
    .rope_tail = cu_rope_tail,
    .fp8_kv = cu_fp8_kv,
    .hadamard_fp4 = cu_hadamard_fp4,
    .store_f16 = cu_store_f16,
    .compressor_step = cu_compressor_step,
    .indexer_topk = cu_indexer_topk,
    .attention = cu_attention,
    .router_select = cu_router_select,
    .moe = cu_moe,
    .hc_pre_norm = cu_hc_pre_norm,
    .q_norm_rope = cu_q_norm_rope,
    .kv_norm_rope_fp8 = cu_kv_norm_rope_fp8,
    .q_norm_rope_idx = cu_q_norm_rope_idx,
    .emit_row = cu_emit_row,
    .matmuls_router = cu_matmuls_router,
    .hc_post_pre_norm = cu_hc_post_pre_norm,
    .hc_post_add = cu_hc_post_add,
    .moe_slots = cu_moe_slots,
    .hc_post_slots = cu_hc_post_slots,
    .attention_rope = cu_attention_rope,
    .attention_qnr = cu_attention_qnr,
    .step_begin = cu_step_begin,
    .step_end = cu_step_end,
    .step_run = cu_step_run,
    .step_join = cu_step_join,
    .step_leave = cu_step_leave,
    .compressor_chunk = cu_compressor_chunk,
    .indexer_topk_chunk = cu_indexer_topk_chunk,
    .attention_chunk = cu_attention_chunk,
    .attention_chunk_qnr = cu_attention_chunk_qnr,
    .activate = cu_activate,
    .copy_from = cu_copy_from,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .destroy = cu_destroy,
};

extern "C" dsv4_status dsv4_backend_cuda_create(const dsv4_backend_params *p, dsv4_backend *out,
                                                dsv4_error *err) {
    out->ops = NULL;
    out->ctx = NULL;
    if (!p || !p->model)
        return dsv4_fail(err, DSV4_ERR_INVALID, "the CUDA backend needs the model at creation");
    const int n_dev = dsv4_cuda_device_count();
    if (n_dev <= 0)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "no CUDA device is visible (driver missing or no GPU)");
    if (p->device < 0 || p->device >= n_dev)
        return dsv4_fail(err, DSV4_ERR_INVALID, "CUDA device %d does not exist (%d visible)", p->device,
                         n_dev);
    if (p->numerics != DSV4_NUMERICS_DS4 && p->numerics != DSV4_NUMERICS_EXACT)
        return dsv4_fail(err, DSV4_ERR_INVALID, "numerics mode %d is neither ds4 (0) nor exact (1)",
                         (int)p->numerics);
    cuda_ctx *c = (cuda_ctx *)calloc(1, sizeof(*c));
    if (!c) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory creating the CUDA backend");
    c->device = p->device;
    c->partial = p->partial;
    c->layer_first = p->layer_first;
    c->layer_end = p->layer_end;
    c->with_embed = p->with_embed;
    c->with_head = p->with_head;
    c->numerics = p->numerics;
    char msg[256];
    dsv4_status st = DSV4_OK;
    cudaError_t e = cudaSetDevice(c->device);
    if (e != cudaSuccess) st = cu_fail(err, e, "set device");
    if (st == DSV4_OK && dsv4_cuda_query_caps(c->device, &c->caps, msg, sizeof msg) != 0)
        st = dsv4_fail(err, DSV4_ERR_IO, "cuda: %s", msg);
    if (st == DSV4_OK && (e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess)
        st = cu_fail(err, e, "stream");
    if (st == DSV4_OK && (e = cudaEventCreateWithFlags(&c->pin_ev, cudaEventDisableTiming)) != cudaSuccess)
        st = cu_fail(err, e, "event");
    c->main_stream = c->stream;
    if (st == DSV4_OK &&
        ((e = cudaStreamCreateWithFlags(&c->side_stream, cudaStreamNonBlocking)) != cudaSuccess ||
         (e = cudaEventCreateWithFlags(&c->lane_fork, cudaEventDisableTiming)) != cudaSuccess ||
         (e = cudaEventCreateWithFlags(&c->lane_join, cudaEventDisableTiming)) != cudaSuccess))
        st = cu_fail(err, e, "side lane");
    if (st == DSV4_OK) {
        st = dsv4_cuda_mv_init(&c->mv, c->device, err);
        c->mv_ready = st == DSV4_OK;
    }
    if (st == DSV4_OK) {
        st = dsv4_cuda_moe_dec_init(&c->moe_dec, c->device, err);
        c->moe_dec_ready = st == DSV4_OK;
    }
    if (st == DSV4_OK) {
        const char *mv = getenv("DSV4_CUDA_MATVEC");
        c->generic_only = mv && strcmp(mv, "generic") == 0;
        const char *fg = getenv("DSV4_CUDA_FUSED_GATE");
        c->fused_gates_off = fg && strcmp(fg, "off") == 0;
        const char *hf = getenv("DSV4_CUDA_HC_FAST");
        c->hc_fast = !(hf && strcmp(hf, "0") == 0);
        const char *ht = getenv("DSV4_CUDA_HC_TAIL");
        /* default `last`: bitwise the older kernel and faster on the H200 (bench/NOTES.md, session 4) */
        c->hc_tail = !ht                        ? CU_HC_TAIL_LAST
                     : strcmp(ht, "multi") == 0 ? CU_HC_TAIL_MULTI
                     : strcmp(ht, "off") == 0   ? CU_HC_TAIL_OFF
                                                : CU_HC_TAIL_LAST;
        cu_hc_tail_init(c);
        const char *pq = getenv("DSV4_CUDA_PREQ");
        c->preq_on = !(pq && strcmp(pq, "0") == 0);
        const char *pa = getenv("DSV4_CUDA_PREQ_ATTN"); /* 0: not from the attention's combine */
        c->preq_attn = c->preq_on && !(pa && strcmp(pa, "0") == 0);
        const char *pk = getenv("DSV4_CUDA_PREQK_ALL"); /* 1: Q8_K blocks from the attention's pre too */
        c->preqk_all = pk && strcmp(pk, "1") == 0;
        const char *mw = getenv("DSV4_CUDA_MVW");
        c->mvw = !(mw && strcmp(mw, "0") == 0);
        const char *ma = getenv("DSV4_CUDA_MVW_ACT");
        c->mvw_act_fused = ma && strcmp(ma, "fused") == 0;
        const char *er = getenv("DSV4_CUDA_EMIT_ROW");
        c->emit_row_on = !(er && strcmp(er, "0") == 0);
        const char *rf = getenv("DSV4_CUDA_ROUTER_FUSED");
        c->router_fused_on = rf && strcmp(rf, "1") == 0;
        const char *hp = getenv("DSV4_CUDA_HC_POST_PRE");
        c->hc_post_pre_on = !(hp && strcmp(hp, "0") == 0);
        const char *ff = getenv("DSV4_CUDA_FA_FOLD");
        c->fa_fold = ff && (strcmp(ff, "1") == 0 || strcmp(ff, "2") == 0); /* off until measured on a GPU */
        const char *at = getenv("DSV4_CUDA_ATTN");
        c->attn_exact = at && strcmp(at, "exact") == 0;
        /* prefill chunks on the tensor-core kernel unless `fast` or `exact` is asked for (the generic
         * matvec mode keeps the fast kernel, whose prefill is bitwise its decode) */
        c->attn_tc = !c->generic_only && !(at && (strcmp(at, "fast") == 0 || strcmp(at, "exact") == 0));
        st = cu_step_init(c, err);
        if (st == DSV4_OK) st = cu_tables_init(c, err);
    }
    if (st == DSV4_OK) st = cu_weights_upload(c, p->model, p->on_upload, p->upload_user, err);
    if (st == DSV4_OK) cu_blas_prepare(c, p->model, p->prefill_chunk);
    if (st == DSV4_OK) cu_moe_half_prepare(c);
    const dsv4_backend_ops *ops = &cuda_ops;
    if (st == DSV4_OK && cu_prof_requested()) st = cu_prof_create(c, &cuda_ops, &ops, err);
    if (st != DSV4_OK) {
        cu_destroy(c);
        return st;
    }
    out->ops = ops;
    out->ctx = c;
    return DSV4_OK;
}

/* The context behind a test hook's backend (the real table or the profiler's), or NULL with *err set. */
static cuda_ctx *cu_hook_ctx(const dsv4_backend *b, const char *what, dsv4_error *err) {
    if (!b || !b->ops || b->ops->destroy != cu_destroy) {
        dsv4_fail(err, DSV4_ERR_INVALID, "%s: not a CUDA backend", what);
        return NULL;
    }
    return (cuda_ctx *)b->ctx;
}

/* Test hook (cuda_ops_check): the one-launch hc pre step on or off, as DSV4_CUDA_HC_FAST=0 sets it
 * at creation. Returns the previous setting through *was (may be NULL). */
extern "C" dsv4_status dsv4_backend_cuda_set_hc_fast(const dsv4_backend *b, bool on, bool *was,
                                                     dsv4_error *err) {
    cuda_ctx *c = cu_hook_ctx(b, "set hc_fast", err);
    if (!c) return DSV4_ERR_INVALID;
    if (was) *was = c->hc_fast;
    c->hc_fast = on;
    return DSV4_OK;
}

/* Test hook (cuda_ops_check): the warp-direct matvec's fused Q8_0 activation quantization on or
 * off, as DSV4_CUDA_MVW_ACT=fused|separate sets it at creation. *was (may be NULL) gets the previous. */
extern "C" dsv4_status dsv4_backend_cuda_set_mvw_act(const dsv4_backend *b, bool fused, bool *was,
                                                     dsv4_error *err) {
    cuda_ctx *c = cu_hook_ctx(b, "set mvw_act", err);
    if (!c) return DSV4_ERR_INVALID;
    if (was) *was = c->mvw_act_fused;
    c->mvw_act_fused = fused;
    return DSV4_OK;
}

/* Test hook (cuda_ops_check): DSV4_CUDA_HC_TAIL's mode (0 off, 1 multi, 2 last) as creation sets
 * it, or 3: last with the cluster tail (DSV4_CUDA_HC_CLUSTER=1; DSV4_ERR_UNSUPPORTED where the device
 * does not run it); *was gets the previous mode and *launches the register/grid tail launches so far
 * (may be NULL). */
extern "C" dsv4_status dsv4_backend_cuda_set_hc_tail(const dsv4_backend *b, int mode, int *was,
                                                     uint64_t *launches, dsv4_error *err) {
    cuda_ctx *c = cu_hook_ctx(b, "set hc_tail", err);
    if (!c) return DSV4_ERR_INVALID;
    if (mode < CU_HC_TAIL_OFF || mode > CU_HC_TAIL_LAST + 1)
        return dsv4_fail(err, DSV4_ERR_INVALID, "set hc_tail: mode %d (0..3)", mode);
    if (mode == CU_HC_TAIL_LAST + 1 && !c->hc_cluster_ok)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "set hc_tail: the device does not run the cluster tail");
    if (was) *was = c->hc_cluster ? CU_HC_TAIL_LAST + 1 : c->hc_tail;
    if (launches) *launches = c->hc_tail_launches;
    c->hc_cluster = mode == CU_HC_TAIL_LAST + 1;
    c->hc_tail = c->hc_cluster ? CU_HC_TAIL_LAST : mode;
    return DSV4_OK;
}

/* Test hook (cuda_ops_check): products run on cuBLAS so far (cuda_gemm_blas.h), activation
 * conversions they shared inside matmul_multi, and whether the library is loaded. */
extern "C" dsv4_status dsv4_backend_cuda_blas_calls(const dsv4_backend *b, uint64_t *calls, uint64_t *shared,
                                                    bool *loaded, dsv4_error *err) {
    const cuda_ctx *c = cu_hook_ctx(b, "blas calls", err);
    if (!c) return DSV4_ERR_INVALID;
    if (calls) *calls = c->blas_calls;
    if (shared) *shared = c->blas_shared;
    if (loaded) *loaded = dsv4_cuda_blas_loaded(NULL);
    return DSV4_OK;
}

extern "C" dsv4_status dsv4_backend_cuda_device_info(const dsv4_backend *b, dsv4_device_info *out,
                                                     dsv4_error *err) {
    memset(out, 0, sizeof *out);
    const cuda_ctx *c = cu_hook_ctx(b, "device info", err);
    if (!c) return DSV4_ERR_INVALID;
    snprintf(out->backend, sizeof out->backend, "cuda");
    snprintf(out->name, sizeof out->name, "%s", c->caps.name);
    out->device = c->device;
    out->cc_major = c->caps.cc_major;
    out->cc_minor = c->caps.cc_minor;
    out->sm_count = c->caps.sm_count;
    out->hopper = c->caps.hopper;
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) == cudaSuccess) {
        out->free_mem = fr;
        out->total_mem = tot;
    } else {
        cudaGetLastError();
        out->total_mem = c->caps.total_mem;
    }
    out->weight_bytes = c->weight_bytes;
    out->n_weights = c->map_n;
    out->buffer_bytes = c->buffer_bytes + c->w16_cache_bytes; /* the prefill weights' prepared copies too */
    for (int i = 0; i < 2 * CU_SLOTS; i++) out->scratch_bytes += c->scratch_bytes[i];
    out->steps_launched = c->step_stats.launched;
    out->steps_updated = c->step_stats.updated;
    out->steps_instantiated = c->step_stats.instantiated;
    out->steps_update_failed = c->step_stats.update_failed;
    out->steps_failed = c->step_stats.failed;
    out->steps_stale = c->step_stats.stale;
    out->steps_pdl_edges = c->step_stats.pdl_edges;
    out->steps_capture_us = c->step_stats.capture_us;
    out->steps_pdl_us = c->step_stats.pdl_us;
    out->steps_update_us = c->step_stats.update_us;
    out->steps_instantiate_us = c->step_stats.instantiate_us;
    out->blas_loaded = c->blas_state > 0;
    out->blas_products = c->blas_calls;
    out->blas_shared = c->blas_shared;
    out->blas_hc_mix_folded = c->hc_mix_folded;
    out->hc_mix_tc = c->hc_mix_tc;
    out->q8_wg_products = c->q8wg_calls;
    out->moe_f16_products = c->moe_half_calls;
    out->moe_ws_products = c->moe_ws_calls;
    out->moe_x16_products = c->moe_x16_calls;
    unsigned long long xs[2] = {0, 0};
    if (c->d_x16_stats && !c->step_capturing &&
        cudaMemcpyAsync(xs, c->d_x16_stats, sizeof xs, cudaMemcpyDeviceToHost, c->stream) == cudaSuccess &&
        cudaStreamSynchronize(c->stream) == cudaSuccess) {
        out->moe_x16_steps = xs[0];
        out->moe_x16_heavy_steps = xs[1];
    } else {
        cudaGetLastError();
    }
    return DSV4_OK;
}
