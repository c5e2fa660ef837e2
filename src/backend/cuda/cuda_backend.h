/* Internals of the CUDA backend (C++ only, shared by cuda_backend*.cu and cuda_ops_*.cu).
 *
 * One context per backend: a device, one non-blocking stream every op enqueues on (ops never
 * synchronize the host; `read`, `write` and `sync` do, as the op table allows), device copies of
 * every weight tensor keyed by the tensor's host (mmap) data pointer, grow-only device scratch
 * and a pinned staging buffer for host token ids. */
#ifndef DSV4_CUDA_BACKEND_H
#define DSV4_CUDA_BACKEND_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "backend/backend.h"
#include "backend/backend_registry.h"
}
#include "backend/cuda/cuda_caps.h"
#include "backend/cuda/cuda_matvec.h"
#include "backend/cuda/cuda_moe_decode.h"

/* Device scratch slots: an op may use its own slots and those of the helpers it calls (noted
 * per helper), never a caller's. */
enum {
    CU_SLOT_ACT = 0,    /* matmul: quantized activations */
    CU_SLOT_PACK = 1,   /* matmul: packed strided rows before quantization */
    CU_SLOT_FLAT = 2,   /* hc: normalized rows */
    CU_SLOT_MIX = 3,    /* hc: mix vectors */
    CU_SLOT_TOK = 4,    /* token ids */
    CU_SLOT_G = 5,      /* moe gate / generic */
    CU_SLOT_U = 6,      /* moe up */
    CU_SLOT_MID = 7,    /* moe mid */
    CU_SLOT_MIDQ = 8,   /* moe quantized mid */
    CU_SLOT_Y = 9,      /* moe per-slot down outputs */
    CU_SLOT_XQ = 10,    /* moe quantized input rows */
    CU_SLOT_IDX = 11,   /* indexer scratch */
    CU_SLOT_MULTI = 12, /* matmul_multi: the quantized inputs */
    CU_SLOT_ATTN = 13,  /* fast attention: split partials */
    CU_SLOT_PREQ = 14,  /* hc_pre_norm: its row's Q8_0 activation blocks (cu_preq_*) */
    CU_SLOT_PREQR = 15, /* rmsnorm of one weighted row: its Q8_0 blocks (cu_preq_*) */
    CU_SLOT_PREQA = 16, /* attention_rope: the heads' Q8_0 blocks (cu_preq_*) */
    CU_SLOTS = 17
};

/* DSV4_CUDA_HC_TAIL: the older one-launch pre step (off), its register tail in the last block
 * (last, the default), or every block after a grid-wide point (multi); cuda_ops_hc.cu. */
enum { CU_HC_TAIL_OFF = 0, CU_HC_TAIL_MULTI = 1, CU_HC_TAIL_LAST = 2 };

/* Host waits on the device, counted for the profiler (cuda_profile.cu): read / write / sync
 * (stream syncs), cudaFree of a buffer or a growing scratch slot (waits for the device), the
 * token staging buffer's event. */
enum { CU_SYNC_READ = 0, CU_SYNC_WRITE, CU_SYNC_STREAM, CU_SYNC_FREE, CU_SYNC_STAGING, CU_SYNC_KINDS };

struct cu_prof;

typedef struct cu_weight {
    const void *host; /* key: dsv4_tensor.data */
    void *dev;
    uint64_t bytes;
    uint32_t type; /* the tensor's type */
    int8_t f16_ok; /* Q8_0: may its elements become f16 (cuda_gemm_blas.h)? 0 not known yet, 1, -1 */
    int8_t
        half_state; /* IQ2_XXS: may the f16 MoE gate/up take it (cuda_moe_half.h)? 0 not known yet, 1, -1 */
    int8_t half_shift; /* its power-of-two shift p (cuda_moe_half.cuh) */
    int8_t w16_exp;    /* Q8_0 with f16_ok 1: its Sw (cuda_gemm_blas.h dsv4_cuda_gemm_blas_w_exp) */
    /* Q8_0 layer matrix: its f16 rows for the prefill products (cu_blas_prepare), then (three terms)
     * their lo terms, or NULL */
    void *dev16;
    /* Q8_0 layer matrix with in % 64 == 0 while the warpgroup Q8_0 path is on (cuda_gemm_q8_wg.h): its
     * prepared copy (f16 codes, then block scales), in place of dev16, or NULL */
    void *devq;
    uint32_t *x16_w2; /* IQ2_XXS experts: each expert's largest Σ w'^2 (cuda_moe_x16.h), or NULL */
} cu_weight;

typedef struct cu_buf {
    void *p;
    size_t bytes;
} cu_buf;

/* Recorded decode steps (cuda_step.cu): one executable graph per step key. */
#define CU_STEP_EXECS 16
#define CU_STEP_JOINED 8 /* other tiers' contexts one recorded step may span */
struct cuda_ctx;
typedef struct cu_step_exec {
    uint64_t key;
    cudaGraphExec_t exec;
    uint64_t last_use;
    uint64_t mem_gen; /* cuda_ctx.mem_gen when recorded: a later free makes it stale */
    /* the other tiers whose ops the step holds (step_join), and their mem_gen when recorded */
    int n_joined;
    struct cuda_ctx *joined[CU_STEP_JOINED];
    uint64_t joined_gen[CU_STEP_JOINED];
} cu_step_exec;
typedef struct cu_step_stats {
    uint64_t launched, updated, instantiated, update_failed, failed, stale, pdl_edges;
    /* host time of the recordings: capture (step_begin to the end of the capture), the programmatic
     * edge pass, the in-place updates and the instantiations (an instantiation after a refused
     * update counts both) */
    uint64_t capture_us, pdl_us, update_us, instantiate_us;
} cu_step_stats;

typedef struct cuda_ctx {
    int device;
    cudaStream_t stream;
    dsv4_cuda_caps caps;
    dsv4_cuda_mv_ctx mv;
    bool mv_ready;
    dsv4_cuda_moe_dec_ctx moe_dec; /* one-token routed experts (cuda_ops_moe_decode.cu) */
    bool moe_dec_ready;
    bool generic_only;      /* DSV4_CUDA_MATVEC=generic: every product through the CPU-order kernels */
    bool fused_gates_off;   /* DSV4_CUDA_FUSED_GATE=off: fused_available says no to everything */
    bool hc_fast;           /* not DSV4_CUDA_HC_FAST=0: one-launch decode hc_pre / hc_pre_norm */
    bool mvw;               /* not DSV4_CUDA_MVW=0: warp-direct Q8_0/F16 matvec (cuda_mvw.h) for one token */
    bool mvw_act_fused;     /* DSV4_CUDA_MVW_ACT=fused: that matvec quantizes Q8_0 inputs itself (x_f32) */
    bool attn_exact;        /* DSV4_CUDA_ATTN=exact: the exact attention kernel in DS4 numerics too */
    bool attn_tc;           /* DSV4_CUDA_ATTN=tc: prefill chunks on the tensor-core kernel (f16 Q, P) */
    bool emit_row_on;       /* not DSV4_CUDA_EMIT_ROW=0: the fused emitted-row op */
    bool router_fused_on;   /* DSV4_CUDA_ROUTER_FUSED=1: the router in its logits' matvec (slower: off) */
    bool hc_post_pre_on;    /* not DSV4_CUDA_HC_POST_PRE=0: the attention's post in the FFN's pre */
    dsv4_numerics numerics; /* EXACT: fp8/f16/FP4 roundings off, products in double (cu_gemm_exact) */

    /* Producer-side Q8_0 (not DSV4_CUDA_PREQ=0): the one-token hc_pre_norm also writes its row's
     * Q8_0 activation blocks (quant_act_q8_0's bytes) into CU_SLOT_PREQ, and the next matmul_multi
     * on that row uses them instead of launching the quantizer. The record holds until that call or
     * until an op that writes rows the graph passes as such inputs (hc_pre, hc_pre_norm, rmsnorm,
     * write, copy, fill, copy_from) clears it. The Q8_K record (preqk_*: the same row for the
     * routed experts) holds past matmul_multi and the router until the moe op takes it. */
    bool preq_on;
    bool preq_attn; /* and from the decode attention's combine (the heads, for the output projection) */
    bool preqk_all; /* DSV4_CUDA_PREQK_ALL=1: Q8_K blocks from every pre step (default: the FFN's only) */
    const float *preq_x; /* the row (NULL: no record) */
    uint64_t preq_n;     /* its length */
    const uint8_t *preq_q;
    const float *preqk_x; /* the same row's Q8_K blocks (the routed experts' input), until the moe op */
    uint64_t preqk_n;
    const uint8_t *preqk_q;
    int hc_tail;               /* DSV4_CUDA_HC_TAIL: CU_HC_TAIL_* (register / grid tail of the pre step) */
    uint32_t hc_tail_resident; /* blocks of hc_tail_kernel resident at once (cu_hc_tail_init) */
    uint64_t hc_tail_launches; /* launches of hc_tail_kernel (the test hook reports it) */
    bool hc_cluster;           /* DSV4_CUDA_HC_CLUSTER=1 and the device runs its clusters (cu_hc_tail_init) */
    bool hc_cluster_ok;        /* the device runs the cluster tail's clusters */
    uint64_t hc_cluster_launches; /* of them, the cluster tail's */
    /* prefill products on cuBLAS (cuda_gemm_blas.h): the handle (made on the first such product),
     * 0 not tried / 1 ready / -1 unavailable, one device word for the weight scan, products run */
    void *blas;
    int8_t blas_state;
    int8_t q8wg_state; /* the exact warpgroup Q8_0 products (cuda_gemm_q8_wg.h): 0 not asked, 1 on, -1 off */
    uint64_t q8wg_calls;
    uint32_t *d_blas_scan;
    uint64_t blas_calls;
    /* inside one matmul_multi (blas_share): the f16 activations in CU_SLOT_ACT are those of
     * (bx_x, bx_stride, bx_n, bx_width, bx_q8: 0 F16, 1 Q8_0 terms, 2 the warpgroup path's codes) while
     * bx_valid; the next product of the same input and weight kind reuses them. Any product that does not
     * take the cuBLAS path drops it (its kernels may write that slot). */
    bool blas_share, bx_valid;
    const float *bx_x;
    uint64_t bx_stride, bx_width;
    uint32_t bx_n;
    int bx_q8;
    uint64_t blas_shared;   /* conversions saved */
    uint64_t hc_mix_folded; /* HC mixes of prefill chunks with the rmsnorm in the f16 conversion */
    uint64_t hc_mix_tc;     /* HC mixes of prefill chunks on the TF32 kernel (cuda_hc_mix_tc.h) */
    void *w16_cache;        /* the f16 rows of the Q8_0 layer matrices (one allocation), or NULL */
    uint64_t w16_cache_bytes;
    /* the f16 MoE gate/up (cuda_moe_half.h): its kernels' shared-memory limits raised, products run */
    int moe_half_attr; /* limits raised: bits 0/1 gate/up 8/16 warps, bits 2/3 down 8/16 warps */
    uint64_t moe_half_calls;
    int8_t
        moe_ws_state; /* the producer / consumer gate/up kernel (cuda_moe_ws.h): 0 not asked, 1 on, -1 off */
    uint64_t moe_ws_calls;
    /* the exact warpgroup MoE products (cuda_moe_x16.h): bits 0/1 IQ2_XXS / Q2_K kernel ready, bits
     * 4/5 refused; products run; the f16 decode tables (made on first use) */
    int moe_x16_attr;
    uint64_t moe_x16_calls;
    void *d_x16_tab;
    unsigned long long *d_x16_stats; /* gate/up steps (row block, superblock) run, of them heavy */
    /* weights: open addressing on the host pointer */
    cu_weight *map;
    size_t map_cap, map_n;
    uint64_t weight_bytes;
    /* tables of the generic quantized kernels */
    uint64_t *d_iq2_grid;  /* 256 */
    uint8_t *d_iq2_signs;  /* 128 */
    int32_t *d_iota;       /* 0, 1, ..., CU_IOTA-1: group ids of matmul_grouped */
    unsigned *d_hc_ticket; /* one-launch hc pre step: blocks done (0 between launches) */
    unsigned *d_hc_tail;   /* hc_tail_kernel: [0] count, [32] generation (grid); [64] ticket (last); [96] the
                              router epilogue's ticket (cu_matmuls_router); [128] the decode attention
                              fold's barriers, a set per lane (cu_fa_bar); CU_SYNC_WORDS in all, zeroed */
    bool fa_fold;          /* DSV4_CUDA_FA_FOLD=1 or 2: the decode attention folds its splits (no combine) */
    /* scratch */
    void *scratch[2 * CU_SLOTS]; /* per lane: the side lane's ops get slots of their own */
    size_t scratch_bytes[2 * CU_SLOTS];
    /* scratch replaced while a step was being recorded: freed at the next sync (the device may
     * still run a step that reads them) */
    void *scratch_retired[2 * CU_SLOTS];
    int n_scratch_retired;
    /* lanes (cu_lanes): `stream` is the current lane's stream; main_stream the main lane's */
    cudaStream_t main_stream, side_stream;
    cudaEvent_t lane_fork, lane_join;
    int lane;     /* 0 main, 1 side (after DSV4_LANE_SIDE), 2 main with the side lane outstanding */
    cu_buf *bufs; /* live buf_alloc buffers */
    size_t n_bufs, bufs_cap;
    uint64_t buffer_bytes;
    /* host token ids -> device: pinned staging; the event marks the last copy out of it */
    int32_t *pin_tok;
    size_t pin_tok_cap;
    cudaEvent_t pin_ev;
    bool pin_ev_live;
    /* the last uploaded token array (same host array and contents: reuse the device copy) */
    int32_t *tok_host_copy;
    size_t tok_host_cap;
    uint32_t tok_n;
    const int32_t *tok_dev;
    /* tiers (cuda_tier.cu): the weights this tier uploads, validated peer access (0 unknown,
     * 1 enabled, -1 not possible) and the event other tiers' streams wait on before copying */
    bool partial, with_embed, with_head;
    uint32_t layer_first, layer_end;
    int8_t peer[64];
    cudaEvent_t xev;
    uint64_t n_sync[CU_SYNC_KINDS];
    struct cu_prof *prof; /* DSV4_CUDA_PROFILE=1: the per-op profiler, else NULL */
    /* step recording (cuda_step.cu) */
    bool step_enabled, step_capturing;
    bool pdl;      /* DSV4_CUDA_PDL (default on where cc >= 9.0): programmatic edges */
    int n_pdl_fns; /* kernels listed by cu_pdl_kernels_* (cuda_pdl.h) */
    const void *pdl_fns[128];
    uint64_t step_key, step_clock;
    cu_step_exec step_exec[CU_STEP_EXECS];
    cu_step_stats step_stats;
    uint64_t step_t0_us;                /* host clock at step_begin */
    int32_t *pin_step_tok, *d_step_tok; /* the recorded step's token: pinned cell -> device */
    uint64_t mem_gen;                   /* bumped whenever device memory an op used is freed */
    /* a step recorded across tiers: on the lead, the contexts joined so far; on a joined one, the
     * lead it joined */
    int n_step_joined;
    struct cuda_ctx *step_joined[CU_STEP_JOINED];
    struct cuda_ctx *step_lead;
} cuda_ctx;

/* cudaError_t -> dsv4_status with the op name and the CUDA message. */
dsv4_status cu_fail(dsv4_error *err, cudaError_t e, const char *what);
/* After a launch: report a launch error (does not synchronize). */
dsv4_status cu_launched(dsv4_error *err, const char *what);
/* Grow-only device scratch of at least `bytes` (growing frees the old buffer, which waits for
 * the device: it happens only when a larger chunk than before arrives). NULL + err on failure. */
void *cu_scratch(cuda_ctx *c, int slot, size_t bytes, dsv4_error *err);
void cu_scratch_release_retired(cuda_ctx *c);
/* Device copy of a weight tensor (NULL when absent or not uploaded; err names the tensor). */
const void *cu_weight_dev(const cuda_ctx *c, const dsv4_tensor *t, dsv4_error *err);
/* The residency record of an uploaded tensor (NULL when not uploaded). */
cu_weight *cu_weight_rec(const cuda_ctx *c, const dsv4_tensor *t);
/* Host token ids -> device int32 array (slot CU_SLOT_TOK); reuses the last upload when the same
 * ids arrive again (embed and router of one chunk). */
dsv4_status cu_tokens(cuda_ctx *c, const int32_t *host_tokens, uint32_t n, const int32_t **out,
                      dsv4_error *err);
static inline unsigned cu_blocks(uint64_t n, unsigned threads) {
    return (unsigned)((n + threads - 1) / threads);
}

/* ---- weights and tables (cuda_backend_weights.cu) ---- */
/* Copy every present tensor of the model to the device (deduplicated by host pointer). */
dsv4_status cu_weights_upload(cuda_ctx *c, const dsv4_model *m,
                              void (*on_upload)(void *user, uint64_t done, uint64_t total), void *user,
                              dsv4_error *err);
void cu_weights_free(cuda_ctx *c);
/* IQ2_XXS grid and sign tables for the generic kernels. */
dsv4_status cu_tables_init(cuda_ctx *c, dsv4_error *err);

/* ---- products (cuda_ops_gemm.cu) ---- */
/* The activation format a weight type takes (ds4 CPU: Q8_0 -> Q8_0, K-quants/IQ2 -> Q8_K, float
 * weights -> f32) and its bytes for `in` inputs; false when the type has no kernel. */
bool cu_weight_type_ok(uint32_t type);
size_t cu_act_bytes(uint32_t type, uint64_t in);
/* Quantize n rows (x rows `x_stride` floats apart, `in` wide) into act (act_bytes(type, in) per
 * row). Float types: no-op, *act_out = x. Uses CU_SLOT_PACK (and `slot` for the output). */
dsv4_status cu_quant_rows(cuda_ctx *c, uint32_t type, const float *x, uint64_t x_stride, uint64_t in,
                          uint32_t n, int slot, const void **act_out, uint64_t *act_stride, dsv4_error *err);
/* The generic product: y[s*y_stride + o] = W_e[row0 + o] . act[(s / act_div)] for o < n_out,
 * s < n_slots, with e = ids ? ids[s] : 0 (an id outside [0, n_expert) gives NaN). Weight rows
 * are combined in the CPU's order (quant/dot_scalar.c), so each value equals the CPU's. */
dsv4_status cu_gemm_generic(cuda_ctx *c, uint32_t type, const void *w, uint64_t row_bytes, uint64_t in,
                            uint64_t expert_rows, int64_t n_expert, const int32_t *ids, uint64_t row0,
                            uint64_t n_out, const void *act, uint64_t act_stride, uint32_t act_div,
                            uint32_t n_slots, float *y, uint64_t y_stride, dsv4_error *err);
/* The EXACT-numerics product (cuda_ops_exact.cu): y[s*y_stride + o] = dequant(W_e[row0 + o]) .
 * x[(s / x_div) * x_stride] in double, CPU EXACT lane order, for f32 activation rows x; experts as
 * in cu_gemm_generic (an id outside [0, n_expert) gives NaN). */
dsv4_status cu_gemm_exact(cuda_ctx *c, uint32_t type, const void *w, uint64_t row_bytes, uint64_t in,
                          uint64_t expert_rows, int64_t n_expert, const int32_t *ids, uint64_t row0,
                          uint64_t n_out, const float *x, uint64_t x_stride, uint32_t x_div, uint32_t n_slots,
                          float *y, uint64_t y_stride, dsv4_error *err);
/* Does the tuned batch-1 matvec (cuda_matvec.h) take this weight (type, 16-byte rows and base)? */
bool cu_mv_ok(const cuda_ctx *c, uint32_t type, const void *w, uint64_t row_bytes, uint64_t in);
/* A prefill product on cuBLAS (cuda_ops_blas.cu): `groups` groups of `rows` rows from wslice, group
 * g reading x[t][g * in ..] and writing y[t][g * rows ..]. DSV4_ERR_UNSUPPORTED: not taken (the
 * gate says no, or cuBLAS refused after the conversions, which write scratch only); the caller
 * runs its own kernels. */
dsv4_status cu_matmul_blas(cuda_ctx *c, const dsv4_tensor *w, const uint8_t *wslice, uint64_t rows,
                           uint32_t groups, const float *x, uint64_t x_stride, uint32_t n, float *y,
                           uint64_t y_stride, dsv4_error *err);
dsv4_status cu_matmul_blas_rms(cuda_ctx *c, const dsv4_tensor *w, uint64_t rows, const float *x,
                               uint64_t width, uint32_t n, float eps, float *y, uint64_t y_stride,
                               dsv4_error *err);
/* May a product of n tokens leave the CPU's bits (DS4 numerics, not generic-only, not a recorded
 * step, n >= DSV4_CUDA_BLAS_MIN_N, default 256: the parity checks' small chunks stay bitwise)? The
 * cuBLAS path's own gate adds its library and types to this. */
bool cu_prefill_inexact_ok(const cuda_ctx *c, uint32_t n);
/* At backend creation, after the upload (DS4 numerics, cuBLAS found, not DSV4_CUDA_BLAS=0): the
 * handle, the f16 bound of every Q8_0 tensor (one scan each, one wait) and, for a prefill chunk
 * >= the path's minimum, one GEMM of `chunk` tokens per distinct product shape of the uploaded
 * layers on zeros (the library picks and loads its kernels on a shape's first call), so the first
 * prefill pays none of it. Never fails: the path just stays off or unwarmed. */
void cu_blas_prepare(cuda_ctx *c, const dsv4_model *m, uint32_t chunk);
/* The matmul op (also used by hc_pre / hc_head). Uses CU_SLOT_ACT and CU_SLOT_PACK. */
dsv4_status cu_matmul(void *ctx, const dsv4_tensor *w, uint64_t row0, uint64_t n_out, const float *x,
                      uint64_t x_stride, uint32_t n, float *y, uint64_t y_stride, dsv4_error *err);
bool cu_supports_weight_type(void *ctx, uint32_t type);
/* The lanes op (cuda_backend.cu): a second stream forked from and joined into the main one. */
dsv4_status cu_lanes(void *ctx, int what, dsv4_error *err);
/* The matmul_multi op: one token's Q8_0/F16 products in one warp-direct launch, else one matmul
 * per item (the same bits either way). Uses CU_SLOT_MULTI. */
dsv4_status cu_matmul_multi(void *ctx, const dsv4_matmul_item *items, uint32_t n_items, uint32_t n,
                            dsv4_error *err);
/* The matmul_grouped op (one launch for one token, else one matmul per group). */
#define CU_IOTA 64
/* d_hc_tail's words: the hc tail's and router's 128, then a decode attention fold set per lane */
#define CU_SYNC_WORDS (128 + 2 * 128) /* 128: DSV4_CUDA_FA_BAR_WORDS (cu_fa_bar checks) */
dsv4_status cu_matmul_grouped(void *ctx, const dsv4_tensor *w, uint32_t n_groups, const float *x,
                              uint64_t x_stride, uint32_t n, float *y, uint64_t y_stride, dsv4_error *err);

/* Row RMS norm (cuda_ops_dense.cu): y = x * 1/sqrt(mean(x^2) + eps) (* w when w != NULL). */
dsv4_status cu_rms_rows(cuda_ctx *c, const float *x, const float *w_dev, uint32_t n_rows, uint32_t width,
                        float eps, float *y, dsv4_error *err);

/* At creation: how many blocks of the HC pre step's register tail fit on the device at once
 * (DSV4_CUDA_HC_TAIL=multi launches only a grid that fits; cuda_ops_hc.cu). */
void cu_hc_tail_init(cuda_ctx *c);

/* ---- fused ops ---- */
/* hc_pre + sublayer RMSNorm for one token (cuda_ops_hc.cu) and its gate. */
bool cu_hc_pre_norm_ok(const cuda_ctx *c, uint32_t n_tokens, uint32_t n_hc, uint32_t n_embd,
                       uint32_t norm_type);
dsv4_status cu_hc_pre_norm(void *ctx, const dsv4_tensor *fn, const dsv4_tensor *scale,
                           const dsv4_tensor *base, const dsv4_tensor *norm_w, const float *x_hc, uint32_t n,
                           uint32_t n_hc, uint32_t n_embd, uint32_t iters, float rms_eps, float hc_eps,
                           float *u_normed, float *split, dsv4_error *err);
/* Query heads: per-head rmsnorm + RoPE; KV rows: rmsnorm(weight) + RoPE + FP8 (cuda_ops_attn.cu,
 * kernels in cuda_attn_fused.cu), and their gates. */
bool cu_q_norm_rope_ok(const cuda_ctx *c, uint32_t n_tokens, uint32_t head_dim);
bool cu_attention_qnr_ok(const cuda_ctx *c, uint32_t n_tokens, uint32_t head_dim);
dsv4_status cu_attention_qnr(void *ctx, const float *q, uint32_t n_head, uint32_t head_dim, uint32_t kv_type,
                             const void *raw, uint32_t raw_cap, uint32_t raw_start, uint32_t n_raw,
                             const void *comp, uint32_t n_comp, const int32_t *sel, uint32_t n_sel,
                             const dsv4_tensor *sinks, float kq_scale, float eps, uint32_t pos,
                             const dsv4_rope *rope, float *out, dsv4_error *err);
bool cu_attention_rope_ok(const cuda_ctx *c, uint32_t n_tokens, uint32_t head_dim);
dsv4_status cu_attention_rope(void *ctx, const float *q, uint32_t n_head, uint32_t head_dim, uint32_t kv_type,
                              const void *raw, uint32_t raw_cap, uint32_t raw_start, uint32_t n_raw,
                              const void *comp, uint32_t n_comp, const int32_t *sel, uint32_t n_sel,
                              const dsv4_tensor *sinks, float kq_scale, uint32_t pos, const dsv4_rope *rope,
                              float *out, dsv4_error *err);
dsv4_status cu_hc_post_add(void *ctx, const float *a, const float *b, const float *x_hc, const float *split,
                           uint32_t n, uint32_t n_hc, uint32_t n_embd, float *out_hc, dsv4_error *err);
dsv4_status cu_hc_post_slots(void *ctx, const float *slots, uint32_t k, const float *b, const float *x_hc,
                             const float *split, uint32_t n, uint32_t n_hc, uint32_t n_embd, float *out_hc,
                             dsv4_error *err);
bool cu_kv_norm_rope_fp8_ok(const cuda_ctx *c, uint32_t n_tokens, uint32_t width, uint32_t norm_type);
dsv4_status cu_q_norm_rope(void *ctx, float *x, uint32_t n_rows, uint32_t n_head, uint32_t head_dim,
                           float eps, uint32_t pos0, uint32_t pos_step, const dsv4_rope *rope,
                           dsv4_error *err);
bool cu_q_norm_rope_idx_ok(const cuda_ctx *c, uint32_t n_tokens, uint32_t head_dim, uint32_t idx_head_dim);
bool cu_emit_row_ok(const cuda_ctx *c, uint32_t n_tokens, uint32_t width, uint32_t norm_type,
                    uint32_t dst_type);
bool cu_hc_post_pre_norm_ok(const cuda_ctx *c, uint32_t n_tokens, uint32_t n_hc, uint32_t n_embd,
                            uint32_t norm_type);
dsv4_status cu_hc_post_pre_norm(void *ctx, const float *f, const float *x_hc, const float *split_old,
                                float *out_hc, const dsv4_tensor *fn, const dsv4_tensor *scale,
                                const dsv4_tensor *base, const dsv4_tensor *norm_w, uint32_t n_hc,
                                uint32_t n_embd, uint32_t iters, float rms_eps, float hc_eps, float *u_normed,
                                float *split_new, dsv4_error *err);
bool cu_router_topk_ok(const cuda_ctx *c, uint32_t n_tokens, uint32_t n_expert);
dsv4_status cu_matmuls_router(void *ctx, const dsv4_matmul_item *items, uint32_t n_items, uint32_t n,
                              uint32_t n_expert, uint32_t k, const dsv4_tensor *bias, float scale,
                              int32_t *sel, float *weights, dsv4_error *err);
dsv4_status cu_emit_row(void *ctx, const float *x, const dsv4_tensor *norm_w, uint32_t width, float eps,
                        uint32_t pos, const dsv4_rope *rope, bool hadamard, uint32_t n_nope, float *y,
                        void *dst, uint32_t dst_type, dsv4_error *err);
dsv4_status cu_q_norm_rope_idx(void *ctx, float *q, uint32_t n_head, uint32_t head_dim, float eps, float *iq,
                               uint32_t idx_n_head, uint32_t idx_head_dim, uint32_t pos,
                               const dsv4_rope *rope, dsv4_error *err);
dsv4_status cu_kv_norm_rope_fp8(void *ctx, float *x, const dsv4_tensor *norm_w, uint32_t n_rows,
                                uint32_t width, float eps, uint32_t pos0, uint32_t pos_step,
                                const dsv4_rope *rope, uint32_t n_nope, dsv4_error *err);
/* ---- step recording (cuda_step.cu) ---- */
dsv4_status cu_step_begin(void *ctx, uint64_t key, dsv4_error *err);
dsv4_status cu_step_end(void *ctx, bool abort, dsv4_error *err);
dsv4_status cu_step_run(void *ctx, uint64_t key, int32_t token, dsv4_error *err);
dsv4_status cu_step_join(void *ctx, void *lead_ctx, dsv4_error *err);
/* to's stream waits for the work queued on from's so far (an event of from's device, recorded on
 * from's stream; works inside a stream capture too). Leaves to's device current (cuda_tier.cu). */
cudaError_t cu_stream_follow(cuda_ctx *to, cuda_ctx *from);
/* A copy from src_device's memory into c's on c's stream (c's device current), in the form
 * DSV4_CUDA_TIER_COPY picks (cuda_tier.cu). */
cudaError_t cu_peer_copy(cuda_ctx *c, void *dst, const void *src, int src_device, size_t bytes);
dsv4_status cu_step_leave(void *ctx, void *lead_ctx, dsv4_error *err);
dsv4_status cu_step_init(cuda_ctx *c, dsv4_error *err); /* reads DSV4_CUDA_GRAPH */
void cu_step_free(cuda_ctx *c);
/* ---- tier ops (cuda_tier.cu) ---- */
dsv4_status cu_activate(void *ctx, dsv4_error *err);
dsv4_status cu_copy_from(void *ctx, void *dst, const dsv4_backend *src_b, const void *src, size_t bytes,
                         bool allow_peer, int *path, dsv4_error *err);
dsv4_status cu_host_alloc(void *ctx, size_t bytes, void **out, dsv4_error *err);
void cu_host_free(void *ctx, void *ptr);

/* ---- profiler (cuda_profile.cu) ---- */
/* DSV4_CUDA_PROFILE set (and not "0")? */
bool cu_prof_requested(void);
/* Start profiling c: *ops_out gets the wrapper table around base (hand it out instead of base). */
dsv4_status cu_prof_create(cuda_ctx *c, const dsv4_backend_ops *base, const dsv4_backend_ops **ops_out,
                           dsv4_error *err);
/* Read the outstanding timings, print the table on stderr and stop profiling (destroy calls it). */
void cu_prof_finish(cuda_ctx *c);

/* ---- op implementations installed by cuda_backend.cu ---- */
/* Device-to-device copy with memmove semantics (the copy op; store_f16 uses it in EXACT mode). */
dsv4_status cu_copy(void *ctx, void *dst, const void *src, size_t bytes, dsv4_error *err);
dsv4_status cu_embed(void *ctx, const dsv4_tensor *emb, const int32_t *host_tokens, uint32_t n, uint32_t n_hc,
                     float *out_hc, dsv4_error *err);
dsv4_status cu_hc_pre(void *ctx, const dsv4_tensor *fn, const dsv4_tensor *scale, const dsv4_tensor *base,
                      const float *x_hc, uint32_t n, uint32_t n_hc, uint32_t n_embd, uint32_t iters,
                      float rms_eps, float hc_eps, float *u, float *split, dsv4_error *err);
dsv4_status cu_hc_post(void *ctx, const float *f, const float *x_hc, const float *split, uint32_t n,
                       uint32_t n_hc, uint32_t n_embd, float *out_hc, dsv4_error *err);
dsv4_status cu_hc_head(void *ctx, const dsv4_tensor *fn, const dsv4_tensor *scale, const dsv4_tensor *base,
                       const float *x_hc, uint32_t n, uint32_t n_hc, uint32_t n_embd, float rms_eps,
                       float hc_eps, float *y, dsv4_error *err);
dsv4_status cu_rmsnorm(void *ctx, const float *x, const dsv4_tensor *w, uint32_t n_rows, uint32_t width,
                       float eps, float *y, dsv4_error *err);
dsv4_status cu_add(void *ctx, const float *a, const float *b, size_t n, float *out, dsv4_error *err);
dsv4_status cu_swiglu(void *ctx, const float *g, const float *u, size_t n, float clamp, float *out,
                      dsv4_error *err);
dsv4_status cu_fill_f32(void *ctx, float *dst, float value, size_t n, dsv4_error *err);
dsv4_status cu_rope_tail(void *ctx, float *x, uint32_t n_rows, uint32_t n_head, uint32_t head_dim,
                         uint32_t pos0, uint32_t pos_step, const dsv4_rope *rope, bool inverse,
                         dsv4_error *err);
dsv4_status cu_fp8_kv(void *ctx, float *x, uint32_t n_rows, uint32_t width, uint32_t n_nope, dsv4_error *err);
dsv4_status cu_hadamard_fp4(void *ctx, float *x, uint32_t n_rows, uint32_t width, dsv4_error *err);
dsv4_status cu_store_f16(void *ctx, void *dst, uint32_t dst_type, const float *src, uint32_t n_rows,
                         uint32_t width, dsv4_error *err);
dsv4_status cu_compressor_step(void *ctx, const float *kv, const float *score, const dsv4_tensor *ape,
                               uint32_t pos, uint32_t ratio, uint32_t d_c, float *state_kv,
                               float *state_score, float *pooled, dsv4_error *err);
dsv4_status cu_indexer_topk(void *ctx, const float *q, const float *w, float w_scale, uint32_t n_head,
                            uint32_t head_dim, uint32_t rows_type, const void *rows, uint32_t n_rows,
                            uint32_t k, int32_t *sel, dsv4_error *err);
dsv4_status cu_attention(void *ctx, const float *q, uint32_t n_head, uint32_t head_dim, uint32_t kv_type,
                         const void *raw, uint32_t raw_cap, uint32_t raw_start, uint32_t n_raw,
                         const void *comp, uint32_t n_comp, const int32_t *sel, uint32_t n_sel,
                         const dsv4_tensor *sinks, float kq_scale, float *out, dsv4_error *err);
dsv4_status cu_compressor_chunk(void *ctx, const float *kv, uint64_t kv_stride, const float *score,
                                uint64_t score_stride, const dsv4_tensor *ape, uint32_t pos0, uint32_t n,
                                uint32_t ratio, uint32_t d_c, float *state_kv, float *state_score,
                                float *pooled, dsv4_error *err);
dsv4_status cu_indexer_topk_chunk(void *ctx, const float *q, const float *w, float w_scale, uint32_t n_head,
                                  uint32_t head_dim, uint32_t rows_type, const void *rows, uint32_t pos0,
                                  uint32_t n, uint32_t ratio, uint32_t k, int32_t *sel, dsv4_error *err);
dsv4_status cu_attention_chunk(void *ctx, const float *q, uint32_t n, uint32_t n_head, uint32_t head_dim,
                               uint32_t pos0, const float *chunk_kv, uint32_t kv_type, const void *raw,
                               uint32_t raw_cap, const void *comp, uint32_t ratio, const int32_t *sel,
                               uint32_t n_sel, const dsv4_tensor *sinks, float kq_scale, float *out,
                               dsv4_error *err);
bool cu_attention_chunk_qnr_ok(const cuda_ctx *c, uint32_t n_tokens, uint32_t head_dim, uint32_t n_head);
dsv4_status cu_attention_chunk_qnr(void *ctx, const float *q, uint32_t n, uint32_t n_head, uint32_t head_dim,
                                   uint32_t pos0, const float *chunk_kv, uint32_t kv_type, const void *raw,
                                   uint32_t raw_cap, const void *comp, uint32_t ratio, const int32_t *sel,
                                   uint32_t n_sel, const dsv4_tensor *sinks, float kq_scale, float eps,
                                   const dsv4_rope *rope, bool rope_out, float *out, dsv4_error *err);
dsv4_status cu_router_select(void *ctx, const float *logits, uint32_t n, uint32_t n_expert, uint32_t k,
                             const dsv4_tensor *bias, const dsv4_tensor *tid2eid, const int32_t *host_tokens,
                             float scale, int32_t *sel, float *weights, dsv4_error *err);
dsv4_status cu_moe(void *ctx, const dsv4_tensor *gate, const dsv4_tensor *up, const dsv4_tensor *down,
                   const float *x, uint32_t n, const int32_t *sel, const float *weights, uint32_t k,
                   float clamp, float *out, dsv4_error *err);
dsv4_status cu_moe_slots(void *ctx, const dsv4_tensor *gate, const dsv4_tensor *up, const dsv4_tensor *down,
                         const float *x, uint32_t n, const int32_t *sel, const float *weights, uint32_t k,
                         float clamp, float *slots, dsv4_error *err);
bool cu_moe_slots_ok(const cuda_ctx *c, uint32_t n_tokens, uint32_t gate_type, uint32_t down_type,
                     uint64_t in, uint64_t ff);

/* ---- device helpers shared by the op kernels (CPU order, no FMA: cuda_ops_* build with
 * --fmad=false) ---- */
#ifdef __CUDACC__
/* expf / log1pf evaluated in double and rounded: the correctly rounded value, which glibc's
 * float functions (the CPU backend) return in all but rare cases; CUDA's own expf is off by up
 * to 2 ulp (as the attention-side kernels do, cuda_attn_common.cuh). */
__device__ __forceinline__ float cu_expf(float x) { return (float)exp((double)x); }
__device__ __forceinline__ float cu_log1pf(float x) { return (float)log1p((double)x); }
__device__ __forceinline__ float cu_sigmoid_stable(float x) {
    if (x >= 0.0f) return 1.0f / (1.0f + cu_expf(-x));
    const float e = cu_expf(x);
    return e / (1.0f + e);
}
__device__ __forceinline__ float cu_silu(float x) { return x * cu_sigmoid_stable(x); }
/* The routed experts' mid value as the CPU's store_mid forms it: gate and up clamped when clamp_on
 * (gate from above, up both ways), then silu(gate) * up (the caller multiplies by the route weight) */
__device__ __forceinline__ float cu_swiglu_mid(float gv, float uv, int clamp_on, float clamp) {
    if (clamp_on) {
        if (gv > clamp) gv = clamp;
        if (uv > clamp) uv = clamp;
        if (uv < -clamp) uv = -clamp;
    }
    return cu_silu(gv) * uv;
}
__device__ __forceinline__ float cu_softplus(float x) {
    if (x > 20.0f) return x;
    if (x < -20.0f) return cu_expf(x);
    return cu_log1pf(cu_expf(x));
}
#endif

/* ---- producer-side Q8_0 record (cuda_ctx.preq_*) ---- */
static inline void cu_preq_clear(cuda_ctx *c) { c->preq_x = c->preqk_x = NULL; }
static inline void cu_preqk_set(cuda_ctx *c, const float *x, uint64_t n, const uint8_t *q) {
    c->preqk_x = x;
    c->preqk_n = n;
    c->preqk_q = q;
}
static inline void cu_preq_set(cuda_ctx *c, const float *x, uint64_t n, const uint8_t *q) {
    c->preq_x = x;
    c->preq_n = n;
    c->preq_q = q;
}
/* The Q8_0 blocks of row x (n values) if the record holds them, else NULL. */
static inline const uint8_t *cu_preq_find(const cuda_ctx *c, const float *x, uint64_t n) {
    return c->preq_x && c->preq_x == x && c->preq_n == n ? c->preq_q : NULL;
}

#endif
