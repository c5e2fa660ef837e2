/* Products: the matmul op and the generic row-by-activation kernel behind it.
 *
 * Paths. n == 1 with a shape the tuned matvec accepts (16-byte rows): on-device activation
 * quantization in the CPU's format, then dsv4_cuda_matvec (a few ulps from the CPU); with
 * DSV4_CUDA_MVW_ACT=fused, Q8_0 products on the warp-direct matvec quantize inside that kernel
 * (same bytes, one launch less). Otherwise
 * (prefill chunks, odd shapes such as the tiny test models, F32/BF16 weights, or
 * DSV4_CUDA_MATVEC=generic) the generic kernel: one warp per (output row, activation row); each
 * lane computes whole blocks (exact integer sums, then the block's float term exactly as
 * quant/dot_scalar.c writes it) and the terms are added in block order, so a value equals the
 * CPU's bit for bit (the file is built with --fmad=false). F16/BF16 use 8 lanes that reproduce
 * the CPU's 8 running sums and its combination tree; F32 sums in double sequentially (lane 0), as
 * quant_dot_f32. EXACT numerics bypass all of this (cu_gemm_exact). Several tokens on the tensor
 * cores: Q8_0 bitwise the CPU (cuda_gemm_q8_0_mma.h); F16 for n >= CU_F16_MMA_MIN_N with
 * f16-rounded activations, as ds4's own CUDA prefill, NOT bitwise (cuda_gemm_f16_mma.h). Chunks of
 * DSV4_CUDA_BLAS_MIN_N (256) tokens or more of Q8_0 / F16 weights go to cuBLAS's f16 GEMM first
 * (cuda_ops_blas.cu; NOT bitwise: f16 operands), the batched form for matmul_grouped. */
#include <stdio.h>
#include <string.h>

extern "C" {
#include "quant/quant.h"
}
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_gemm_f16_mma.h"
#include "backend/cuda/cuda_gemm_q8_0_mma.h"
#include "backend/cuda/cuda_gemm_q8_0_mma2.h"
#include "backend/cuda/cuda_gemm_units.cuh"
#include "backend/cuda/cuda_mvw.h"

#define GM_WARPS 8
/* F16 weights go to the tensor cores from this many tokens on. Below it a 64-token tile is mostly
 * idle and the generic kernel (bitwise the CPU) costs a few microseconds, so short chunks keep the
 * CPU's bits. */
#define CU_F16_MMA_MIN_N 8

static int gm_kind_of(uint32_t type) {
    switch (type) {
    case DSV4_TYPE_F32: return GM_F32;
    case DSV4_TYPE_F16: return GM_F16;
    case DSV4_TYPE_BF16: return GM_BF16;
    case DSV4_TYPE_Q8_0: return GM_Q8_0;
    case DSV4_TYPE_Q2_K: return GM_Q2_K;
    case DSV4_TYPE_Q4_K: return GM_Q4_K;
    case DSV4_TYPE_IQ2_XXS: return GM_IQ2_XXS;
    default: return GM_NONE;
    }
}

bool cu_weight_type_ok(uint32_t type) { return gm_kind_of(type) != GM_NONE; }
bool cu_supports_weight_type(void *ctx, uint32_t type) {
    (void)ctx;
    return cu_weight_type_ok(type);
}

size_t cu_act_bytes(uint32_t type, uint64_t in) {
    switch (gm_kind_of(type)) {
    case GM_Q8_0: return (size_t)(in / DSV4_QK8_0) * sizeof(dsv4_q8_0_act);
    case GM_Q2_K:
    case GM_Q4_K:
    case GM_IQ2_XXS: return (size_t)(in / DSV4_QK_K) * sizeof(dsv4_q8_k);
    case GM_NONE: return 0;
    default: return (size_t)in * sizeof(float);
    }
}

static uint32_t gm_block_elems(int kind) {
    switch (kind) {
    case GM_Q8_0: return DSV4_QK8_0;
    case GM_Q2_K:
    case GM_Q4_K:
    case GM_IQ2_XXS: return DSV4_QK_K;
    default: return 1;
    }
}

struct gm_params {
    const uint8_t *w;      /* row 0 of expert 0 */
    uint64_t row_bytes;    /* bytes of one row */
    uint64_t expert_bytes; /* bytes of one expert (rows * row_bytes) */
    const int32_t *ids;    /* per slot expert, or NULL */
    long long n_expert;
    uint64_t row0;
    long long n_out;
    long long in;
    const uint8_t *act;  /* activation rows */
    uint64_t act_stride; /* bytes */
    unsigned act_div;
    long long n_items; /* n_out * n_slots */
    float *y;
    uint64_t y_stride; /* floats between slots */
    const uint64_t *grid;
    const uint8_t *signs;
};

template <int K> __global__ void __launch_bounds__(GM_WARPS * 32) gm_kernel(const gm_params p) {
    const long long item = (long long)blockIdx.x * GM_WARPS + (threadIdx.x >> 5);
    if (item >= p.n_items) return;
    const int lane = threadIdx.x & 31;
    const long long o = item % p.n_out, slot = item / p.n_out;
    long long e = 0;
    bool valid = true;
    if (p.ids) {
        e = p.ids[slot];
        valid = e >= 0 && e < p.n_expert;
        if (!valid) e = 0;
    }
    const uint8_t *wr = p.w + (uint64_t)e * p.expert_bytes + (p.row0 + (uint64_t)o) * p.row_bytes;
    const uint8_t *xa = p.act + (uint64_t)(slot / p.act_div) * p.act_stride;
    float result;
    if (K == GM_F32) {
        const float *wf = (const float *)wr;
        const float *xf = (const float *)xa;
        /* quant_dot_f32's order: one sequential double sum (F32 weights are small tensors) */
        double acc = 0.0;
        if (lane == 0)
            for (long long i = 0; i < p.in; i++) acc += (double)wf[i] * (double)xf[i];
        result = (float)acc;
    } else if (K == GM_F16 || K == GM_BF16) {
        /* lanes 0..7 are the CPU's 8 running sums (element i goes to sum i & 7, in order) */
        const uint16_t *wh = (const uint16_t *)wr;
        const float *xf = (const float *)xa;
        float l = 0.0f;
        if (lane < 8)
            for (long long i = lane; i < p.in; i += 8) {
                const float wv = K == GM_F16 ? gm_f16(wh[i]) : gm_bf16(wh[i]);
                l = l + wv * xf[i];
            }
        float v[8];
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = __shfl_sync(0xffffffffu, l, j);
        result = ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
    } else {
        const long long nb = p.in / (K == GM_Q8_0 ? 32 : 256);
        float acc = 0.0f;
        for (long long b0 = 0; b0 < nb; b0 += 32) {
            const long long b = b0 + lane;
            const float term = b < nb ? gm_block_term<K>(wr, xa, b, p.grid, p.signs) : 0.0f;
            const int cnt = nb - b0 < 32 ? (int)(nb - b0) : 32;
            for (int j = 0; j < cnt; j++) acc = acc + __shfl_sync(0xffffffffu, term, j);
        }
        result = K == GM_IQ2_XXS ? 0.125f * acc : acc;
    }
    if (lane == 0)
        p.y[(uint64_t)slot * p.y_stride + (uint64_t)o] = valid ? result : __int_as_float(0x7fc00000);
}

typedef void (*gm_fn)(const gm_params);
static gm_fn gm_kernel_of(int kind) {
    switch (kind) {
    case GM_F32: return gm_kernel<GM_F32>;
    case GM_F16: return gm_kernel<GM_F16>;
    case GM_BF16: return gm_kernel<GM_BF16>;
    case GM_Q8_0: return gm_kernel<GM_Q8_0>;
    case GM_Q2_K: return gm_kernel<GM_Q2_K>;
    case GM_Q4_K: return gm_kernel<GM_Q4_K>;
    case GM_IQ2_XXS: return gm_kernel<GM_IQ2_XXS>;
    default: return NULL;
    }
}

dsv4_status cu_gemm_generic(cuda_ctx *c, uint32_t type, const void *w, uint64_t row_bytes, uint64_t in,
                            uint64_t expert_rows, int64_t n_expert, const int32_t *ids, uint64_t row0,
                            uint64_t n_out, const void *act, uint64_t act_stride, uint32_t act_div,
                            uint32_t n_slots, float *y, uint64_t y_stride, dsv4_error *err) {
    const int kind = gm_kind_of(type);
    if (kind == GM_NONE)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "cuda matmul: weight type %s has no kernel",
                         dsv4_type_name(type));
    if (n_out == 0 || n_slots == 0) return DSV4_OK;
    gm_params p;
    memset(&p, 0, sizeof p);
    p.w = (const uint8_t *)w;
    p.row_bytes = row_bytes;
    p.expert_bytes = expert_rows * row_bytes;
    p.ids = ids;
    p.n_expert = n_expert;
    p.row0 = row0;
    p.n_out = (long long)n_out;
    p.in = (long long)in;
    p.act = (const uint8_t *)act;
    p.act_stride = act_stride;
    p.act_div = act_div ? act_div : 1;
    p.n_items = (long long)n_out * n_slots;
    p.y = y;
    p.y_stride = y_stride;
    p.grid = c->d_iq2_grid;
    p.signs = c->d_iq2_signs;
    const uint64_t blocks = ((uint64_t)p.n_items + GM_WARPS - 1) / GM_WARPS;
    if (blocks > 0x7fffffffull)
        return dsv4_fail(err, DSV4_ERR_RANGE, "cuda matmul: %llu outputs", (unsigned long long)p.n_items);
    gm_kernel_of(kind)<<<(unsigned)blocks, GM_WARPS * 32, 0, c->stream>>>(p);
    return cu_launched(err, "generic matmul");
}

/* ---- activation quantization ---- */

dsv4_status cu_quant_rows(cuda_ctx *c, uint32_t type, const float *x, uint64_t x_stride, uint64_t in,
                          uint32_t n, int slot, const void **act_out, uint64_t *act_stride, dsv4_error *err) {
    const int kind = gm_kind_of(type);
    if (kind == GM_F32 || kind == GM_F16 || kind == GM_BF16) {
        *act_out = x;
        *act_stride = x_stride * sizeof(float);
        return DSV4_OK;
    }
    /* one row whose Q8_0 blocks its producer wrote (cu_preq_*; rmsnorm's q_a norm -> q_b): used once */
    const uint8_t *pre = kind == GM_Q8_0 && n == 1 ? cu_preq_find(c, x, in) : NULL;
    c->preq_x = NULL;
    if (pre) {
        *act_out = pre;
        *act_stride = cu_act_bytes(type, in);
        return DSV4_OK;
    }
    const size_t ab = cu_act_bytes(type, in);
    if (!ab || in % gm_block_elems(kind) != 0)
        return dsv4_fail(err, DSV4_ERR_INVALID, "cuda: %llu inputs do not fill %s activation blocks",
                         (unsigned long long)in, dsv4_type_name(type));
    void *act = cu_scratch(c, slot, ab * n, err);
    if (!act) return DSV4_ERR_NOMEM;
    const float *rows = x;
    /* pack strided (or, for Q8_K, unaligned) rows first: the quantizer takes dense aligned rows */
    if ((x_stride != in && n > 1) || ((uintptr_t)x & 15) != 0) {
        float *pack = (float *)cu_scratch(c, CU_SLOT_PACK, (size_t)in * n * sizeof(float), err);
        if (!pack) return DSV4_ERR_NOMEM;
        const cudaError_t e = cudaMemcpy2DAsync(pack, in * sizeof(float), x, x_stride * sizeof(float),
                                                in * sizeof(float), n, cudaMemcpyDeviceToDevice, c->stream);
        if (e != cudaSuccess) return cu_fail(err, e, "packing activation rows");
        rows = pack;
    }
    /* the matvec module's quantizers reproduce quant_act_q8_0 / quant_act_q8_k bit for bit */
    const uint32_t qtype = kind == GM_Q8_0 ? DSV4_TYPE_Q8_0 : DSV4_TYPE_Q2_K;
    dsv4_status st = dsv4_cuda_quant_act_rows(qtype, rows, act, (int64_t)in, (int)n, c->stream, err);
    if (st != DSV4_OK) return st;
    *act_out = act;
    *act_stride = ab;
    return DSV4_OK;
}

/* ---- the op ---- */

/* Does the warp-direct matvec (cuda_mvw.h) take this one-token product? DS4 numerics, Q8_0 or
 * F16 weights, not DSV4_CUDA_MVW=0 or DSV4_CUDA_MATVEC=generic; an F16 product reads its f32 input
 * directly, so that must be 16-byte aligned. Each row's bits depend only on the row and its input,
 * so single, grouped and multi launches agree. */
static bool cu_mvw_take(const cuda_ctx *c, uint32_t type, const void *wslice, uint64_t row_bytes, uint64_t in,
                        const void *x) {
    if (!c->mvw || c->generic_only || c->numerics != DSV4_NUMERICS_DS4) return false;
    if (type != DSV4_TYPE_Q8_0 && type != DSV4_TYPE_F16) return false;
    if (type == DSV4_TYPE_F16 && ((uintptr_t)x & 15) != 0) return false;
    return dsv4_cuda_mvw_ok(type, wslice, row_bytes, (int64_t)in);
}

/* DSV4_CUDA_MVW_ACT=fused: a one-token Q8_0 product the warp-direct matvec takes, with a 16-byte
 * aligned f32 input, goes to it unquantized (x_f32: the kernel quantizes it to quant_act_q8_0's
 * bytes, the same bits as the separate quantizer launch it saves). */
static bool cu_mvw_fused_take(const cuda_ctx *c, uint32_t type, const void *wslice, uint64_t row_bytes,
                              uint64_t in, const float *x) {
    return c->mvw_act_fused && type == DSV4_TYPE_Q8_0 && ((uintptr_t)x & 15) == 0 &&
           cu_mvw_take(c, type, wslice, row_bytes, in, x);
}

/* Can the tuned matvec take this weight slice? */
bool cu_mv_ok(const cuda_ctx *c, uint32_t type, const void *w, uint64_t row_bytes, uint64_t in) {
    if (c->generic_only || !c->mv_ready) return false;
    if (type != DSV4_TYPE_Q8_0 && type != DSV4_TYPE_IQ2_XXS && type != DSV4_TYPE_Q2_K &&
        type != DSV4_TYPE_Q4_K && type != DSV4_TYPE_F16)
        return false;
    return row_bytes % 16 == 0 && ((uintptr_t)w & 15) == 0 && dsv4_cuda_act_bytes(type, (int64_t)in) != 0 &&
           in <= 0x1fffffff;
}

dsv4_status cu_matmul(void *vctx, const dsv4_tensor *w, uint64_t row0, uint64_t n_out, const float *x,
                      uint64_t x_stride, uint32_t n, float *y, uint64_t y_stride, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    const int kind = gm_kind_of(w->type);
    if (kind == GM_NONE)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED,
                         "matmul: tensor %s has type %s, which the CUDA backend cannot multiply",
                         w->name ? w->name : "?", dsv4_type_name(w->type));
    const uint64_t in = w->ne[0];
    const uint64_t rows = w->ne[1] * w->ne[2] * w->ne[3];
    if (in % gm_block_elems(kind) != 0 || row0 + n_out > rows)
        return dsv4_fail(err, DSV4_ERR_INVALID,
                         "matmul: rows [%llu, %llu) of tensor %s (%llu x %llu) out of range",
                         (unsigned long long)row0, (unsigned long long)(row0 + n_out),
                         w->name ? w->name : "?", (unsigned long long)in, (unsigned long long)rows);
    if (n == 0 || n_out == 0) return DSV4_OK;
    const uint8_t *wd = (const uint8_t *)cu_weight_dev(c, w, err);
    if (!wd) return DSV4_ERR_INVALID;
    if (c->numerics == DSV4_NUMERICS_EXACT) /* f32 activations, dequantized rows, double sums */
        return cu_gemm_exact(c, w->type, wd, w->row_bytes, in, rows, 1, NULL, row0, n_out, x, x_stride, 1, n,
                             y, y_stride, err);
    const uint8_t *wslice = wd + row0 * w->row_bytes;
    dsv4_status st;
    if (n == 1 && cu_mvw_fused_take(c, w->type, wslice, w->row_bytes, in, x)) {
        const dsv4_cuda_mvw_seg seg = {w->type, wslice, w->row_bytes, (int64_t)in, (int64_t)n_out, x, y, 1};
        st = dsv4_cuda_mvw(&seg, 1, c->stream, err);
        if (st != DSV4_ERR_UNSUPPORTED) return st;
        dsv4_error_clear(err); /* declined: nothing was launched; quantize and go on */
    }
    /* a prefill chunk on cuBLAS's f16 GEMM (cuda_ops_blas.cu: its gate; not bitwise) */
    if (n >= 2 && (w->type == DSV4_TYPE_Q8_0 || w->type == DSV4_TYPE_F16)) {
        st = cu_matmul_blas(c, w, wslice, n_out, 1, x, x_stride, n, y, y_stride, err);
        if (st != DSV4_ERR_UNSUPPORTED) return st;
        dsv4_error_clear(err);
    } else {
        c->bx_valid = false; /* the kernels below may write the shared f16 activations' slot */
    }
    const void *act;
    uint64_t act_stride;
    st = cu_quant_rows(c, w->type, x, x_stride, in, n, CU_SLOT_ACT, &act, &act_stride, err);
    if (st != DSV4_OK) return st;
    /* F16 prefill on the tensor cores (DS4 numerics only; DSV4_CUDA_PREFILL_F16=0 or
     * DSV4_CUDA_MATVEC=generic: off) */
    if (n >= CU_F16_MMA_MIN_N && w->type == DSV4_TYPE_F16 && !c->generic_only &&
        dsv4_cuda_f16_mma_enabled() && dsv4_cuda_f16_mma_device_ok(c->caps.cc_major) &&
        dsv4_cuda_f16_mma_ok(wslice, w->row_bytes, in, n_out, n)) {
        void *x16 = cu_scratch(c, CU_SLOT_ACT, dsv4_cuda_f16_mma_x16_bytes(in, n), err);
        if (!x16) return DSV4_ERR_NOMEM;
        const size_t pb = dsv4_cuda_f16_mma_part_bytes(in, n_out, n, c->caps.sm_count);
        float *part = pb ? (float *)cu_scratch(c, CU_SLOT_PACK, pb, err) : NULL;
        if (pb && !part) return DSV4_ERR_NOMEM;
        st = dsv4_cuda_gemm_f16_mma(wslice, w->row_bytes, in, n_out, x, x_stride, n, y, y_stride, x16, part,
                                    c->caps.sm_count, c->stream, err);
        if (st != DSV4_ERR_UNSUPPORTED) return st;
        dsv4_error_clear(err); /* declined (alignment): nothing was launched */
    }
    if (n == 1 && cu_mvw_take(c, w->type, wslice, w->row_bytes, in, act)) {
        const dsv4_cuda_mvw_seg seg = {w->type, wslice, w->row_bytes, (int64_t)in, (int64_t)n_out, act, y, 0};
        st = dsv4_cuda_mvw(&seg, 1, c->stream, err);
        if (st != DSV4_ERR_UNSUPPORTED) return st;
        dsv4_error_clear(err); /* declined: nothing was launched */
    }
    if (n == 1 && cu_mv_ok(c, w->type, wslice, w->row_bytes, in)) {
        st = dsv4_cuda_matvec(&c->mv, w->type, wslice, (int64_t)in, (int64_t)n_out, act, y, c->stream, err);
        if (st != DSV4_ERR_UNSUPPORTED) return st;
        dsv4_error_clear(err); /* a shape the tuned kernel declines (nothing was launched) */
    }
    /* several tokens of Q8_0: int8 tensor cores, bitwise the CPU's (DSV4_CUDA_PREFILL_MMA=0: off;
     * =v2|v2n: a larger-tile kernel where its grid fills the GPU, v1 where it declines; =v2-all|
     * v2n-all: that kernel for every shape it takes) */
    if (n >= 2 && w->type == DSV4_TYPE_Q8_0 && !c->generic_only && dsv4_cuda_q8_0_mma_enabled() &&
        dsv4_cuda_q8_0_mma_device_ok(c->caps.cc_major, c->caps.smem_per_block_optin)) {
        int tile;
        const int v2 = dsv4_cuda_q8_0_mma2_mode(&tile);
        if (v2 && dsv4_cuda_q8_0_mma2_device_ok(tile, c->caps.cc_major, c->caps.smem_per_block_optin)) {
            st =
                dsv4_cuda_gemm_q8_0_mma2(tile, wslice, w->row_bytes, in, n_out, act, act_stride, n, y,
                                         y_stride, v2 == 2 ? 0u : (uint32_t)c->caps.sm_count, c->stream, err);
            if (st != DSV4_ERR_UNSUPPORTED) return st;
            dsv4_error_clear(err); /* declined (alignment, size, a grid too small): nothing was launched */
        }
        st = dsv4_cuda_gemm_q8_0_mma(wslice, w->row_bytes, in, n_out, act, act_stride, n, y, y_stride,
                                     c->stream, err);
        if (st != DSV4_ERR_UNSUPPORTED) return st;
        dsv4_error_clear(err); /* declined (alignment, size): nothing was launched */
    }
    return cu_gemm_generic(c, w->type, wd, w->row_bytes, in, rows, 1, NULL, row0, n_out, act, act_stride, 1,
                           n, y, y_stride, err);
}

/* The grouped op: one token takes a single quantization of the whole row and one launch of the
 * expert matvec, the groups playing the experts (ids 0..G-1, activation slices act_bytes(in)
 * apart); every other case is one matmul per group. */
dsv4_status cu_matmul_grouped(void *vctx, const dsv4_tensor *w, uint32_t n_groups, const float *x,
                              uint64_t x_stride, uint32_t n, float *y, uint64_t y_stride, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    const uint64_t in = w->ne[0], rows = w->ne[1] * w->ne[2] * w->ne[3];
    if (n_groups == 0 || rows % n_groups != 0)
        return dsv4_fail(err, DSV4_ERR_INVALID,
                         "matmul_grouped: %llu rows of tensor %s do not split in %u groups",
                         (unsigned long long)rows, w->name ? w->name : "?", n_groups);
    const uint64_t R = rows / n_groups;
    const int kind = gm_kind_of(w->type);
    if (n == 1 && kind != GM_NONE && c->numerics != DSV4_NUMERICS_EXACT && n_groups <= CU_IOTA &&
        in % gm_block_elems(kind) == 0) {
        const uint8_t *wd = (const uint8_t *)cu_weight_dev(c, w, err);
        if (!wd) return DSV4_ERR_INVALID;
        if (n_groups <= DSV4_CUDA_MVW_MAX_SEGS && cu_mvw_fused_take(c, w->type, wd, w->row_bytes, in, x)) {
            /* each group reads its own f32 slice (in a multiple of 256: all 16-byte aligned) */
            dsv4_cuda_mvw_seg seg[DSV4_CUDA_MVW_MAX_SEGS];
            for (uint32_t g = 0; g < n_groups; g++)
                seg[g] = (dsv4_cuda_mvw_seg){w->type,
                                             wd + (uint64_t)g * R * w->row_bytes,
                                             w->row_bytes,
                                             (int64_t)in,
                                             (int64_t)R,
                                             x + (uint64_t)g * in,
                                             y + (uint64_t)g * R,
                                             1};
            const dsv4_status st = dsv4_cuda_mvw(seg, (int)n_groups, c->stream, err);
            if (st != DSV4_ERR_UNSUPPORTED) return st;
            dsv4_error_clear(err); /* declined: nothing was launched; quantize and go on */
        }
        if (cu_mv_ok(c, w->type, wd, w->row_bytes, in)) {
            const void *act;
            uint64_t act_stride;
            dsv4_status st =
                cu_quant_rows(c, w->type, x, x_stride, in * n_groups, 1, CU_SLOT_ACT, &act, &act_stride, err);
            if (st != DSV4_OK) return st;
            const size_t ab = cu_act_bytes(w->type, in);
            if (n_groups <= DSV4_CUDA_MVW_MAX_SEGS && cu_mvw_take(c, w->type, wd, w->row_bytes, in, act) &&
                (w->type != DSV4_TYPE_F16 || ab % 16 == 0)) {
                /* a group's input slice quantizes as the whole row's blocks do: the same bits as
                 * one matmul per group */
                dsv4_cuda_mvw_seg seg[DSV4_CUDA_MVW_MAX_SEGS];
                for (uint32_t g = 0; g < n_groups; g++)
                    seg[g] = (dsv4_cuda_mvw_seg){
                        w->type,    wd + (uint64_t)g * R * w->row_bytes, w->row_bytes,        (int64_t)in,
                        (int64_t)R, (const uint8_t *)act + g * ab,       y + (uint64_t)g * R, 0};
                st = dsv4_cuda_mvw(seg, (int)n_groups, c->stream, err);
                if (st != DSV4_ERR_UNSUPPORTED) return st;
                dsv4_error_clear(err); /* declined: nothing was launched */
            }
            st = dsv4_cuda_matvec_experts(&c->mv, w->type, wd, (int64_t)in, (int64_t)R, (int64_t)n_groups,
                                          c->d_iota, (int)n_groups, act, (int64_t)cu_act_bytes(w->type, in),
                                          y, c->stream, err);
            if (st != DSV4_ERR_UNSUPPORTED) return st;
            dsv4_error_clear(err); /* declined shape: nothing was launched */
        }
    }
    if (n >= 2 && kind != GM_NONE && c->numerics != DSV4_NUMERICS_EXACT) { /* one batched cuBLAS GEMM */
        const uint8_t *wd = (const uint8_t *)cu_weight_dev(c, w, err);
        if (!wd) return DSV4_ERR_INVALID;
        const dsv4_status st = cu_matmul_blas(c, w, wd, R, n_groups, x, x_stride, n, y, y_stride, err);
        if (st != DSV4_ERR_UNSUPPORTED) return st;
        dsv4_error_clear(err);
    }
    for (uint32_t g = 0; g < n_groups; g++) {
        const dsv4_status st = cu_matmul(vctx, w, (uint64_t)g * R, R, x + (uint64_t)g * in, x_stride, n,
                                         y + (uint64_t)g * R, y_stride, err);
        if (st != DSV4_OK) return st;
    }
    return DSV4_OK;
}

/* One token: every item a Q8_0/F16 product the warp-direct kernel takes -> each distinct input
 * quantized once (DSV4_CUDA_MVW_ACT=fused: by the kernel itself, no quantizer launch), then one
 * launch. Anything else: one matmul per item. */
/* The one-launch path of matmul_multi (one token, every item on the warp-direct kernel), with the
 * router epilogue when rt is set. DSV4_ERR_UNSUPPORTED when it does not apply: then at most some
 * quantizations were launched (harmless) and the producer-side Q8_0 record is dropped. */
static dsv4_status multi_one(cuda_ctx *c, const dsv4_matmul_item *items, uint32_t n_items, uint32_t n,
                             const dsv4_cuda_mvw_router_args *rt, dsv4_error *err) {
    bool one = n == 1 && n_items >= 1 && n_items <= DSV4_CUDA_MVW_MAX_SEGS;
    const uint8_t *wd[DSV4_CUDA_MVW_MAX_SEGS] = {0};
    size_t need = 0; /* bytes of quantized inputs */
    int xi[DSV4_CUDA_MVW_MAX_SEGS];
    for (uint32_t i = 0; one && i < n_items; i++) {
        const dsv4_tensor *w = items[i].w;
        const uint64_t in = w->ne[0], rows = w->ne[1] * w->ne[2] * w->ne[3];
        if (items[i].row0 + items[i].n_out > rows || items[i].n_out == 0 || !cu_weight_dev(c, w, err)) {
            dsv4_error_clear(err);
            one = false; /* the per-item matmul reports it */
            break;
        }
        wd[i] = (const uint8_t *)cu_weight_dev(c, w, err) + items[i].row0 * w->row_bytes;
        one =
            cu_mvw_take(c, w->type, wd[i], w->row_bytes, in, items[i].x) && ((uintptr_t)items[i].x & 15) == 0;
        xi[i] = -1;
        if (one && w->type == DSV4_TYPE_Q8_0 && !c->mvw_act_fused) {
            for (uint32_t j = 0; j < i && xi[i] < 0; j++)
                if (items[j].w->type == DSV4_TYPE_Q8_0 && items[j].x == items[i].x && items[j].w->ne[0] == in)
                    xi[i] = xi[j];
            if (xi[i] < 0) {
                xi[i] = (int)need;
                need += cu_act_bytes(DSV4_TYPE_Q8_0, in);
            }
        }
    }
    /* the producer-side Q8_0 record (cu_preq_*): used by this call at most, then dropped */
    const float *pq_x = c->preq_x;
    const uint64_t pq_n = c->preq_n;
    const uint8_t *pq_q = c->preq_q;
    c->preq_x = NULL; /* the Q8_K record stays for the moe op */
    if (one) {
        uint8_t *q = need ? (uint8_t *)cu_scratch(c, CU_SLOT_MULTI, need, err) : NULL;
        if (need && !q) return DSV4_ERR_NOMEM;
        dsv4_cuda_mvw_seg seg[DSV4_CUDA_MVW_MAX_SEGS];
        dsv4_status st = DSV4_OK;
        for (uint32_t i = 0; i < n_items && st == DSV4_OK; i++) {
            const dsv4_tensor *w = items[i].w;
            const void *x = items[i].x;
            uint32_t xf = 0;
            if (w->type == DSV4_TYPE_Q8_0 && c->mvw_act_fused) {
                xf = 1; /* the kernel quantizes it (16-byte aligned, checked above) */
            } else if (w->type == DSV4_TYPE_Q8_0 && pq_x && pq_x == items[i].x && pq_n == w->ne[0]) {
                x = pq_q; /* hc_pre_norm wrote these blocks (the quantizer's bytes) */
            } else if (w->type == DSV4_TYPE_Q8_0) {
                x = q + xi[i];
                bool first = true; /* quantize each distinct input once */
                for (uint32_t j = 0; j < i; j++)
                    if (items[j].w->type == DSV4_TYPE_Q8_0 && xi[j] == xi[i]) first = false;
                if (first)
                    st = dsv4_cuda_quant_act_q8_0(items[i].x, q + xi[i], (int64_t)w->ne[0], c->stream, err);
            }
            seg[i] = (dsv4_cuda_mvw_seg){
                w->type, wd[i], w->row_bytes, (int64_t)w->ne[0], (int64_t)items[i].n_out, x, items[i].y, xf};
        }
        if (st != DSV4_OK) return st;
        return rt ? dsv4_cuda_mvw_router(seg, (int)n_items, rt, c->stream, err)
                  : dsv4_cuda_mvw(seg, (int)n_items, c->stream, err);
    }
    return DSV4_ERR_UNSUPPORTED;
}

dsv4_status cu_matmul_multi(void *vctx, const dsv4_matmul_item *items, uint32_t n_items, uint32_t n,
                            dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    const dsv4_status so = multi_one(c, items, n_items, n, NULL, err);
    if (so != DSV4_ERR_UNSUPPORTED) return so;
    dsv4_error_clear(err); /* declined: the quantizations ran (harmless), nothing else; each item's
                              matmul below quantizes again if it must */
    /* several tokens: one product each; the cuBLAS path converts a shared input once */
    c->blas_share = true;
    c->bx_valid = false;
    dsv4_status st = DSV4_OK;
    for (uint32_t i = 0; i < n_items && st == DSV4_OK; i++)
        st = cu_matmul(vctx, items[i].w, items[i].row0, items[i].n_out, items[i].x, items[i].x_stride, n,
                       items[i].y, items[i].y_stride, err);
    c->blas_share = c->bx_valid = false;
    return st;
}

/* Gate of router_topk: switched on (DSV4_CUDA_ROUTER_FUSED=1; bitwise, but the full model decoded
 * 1-4 % slower with it in session 12: the router waits for the last CTA of a bandwidth-bound launch
 * instead of overlapping it, so off by default), one token, DS4 numerics, the tuned kernels,
 * at most DSV4_CUDA_MVW_ROUTER_MAX_EXPERTS experts. */
bool cu_router_topk_ok(const cuda_ctx *c, uint32_t n_tokens, uint32_t n_expert) {
    return c->router_fused_on && n_tokens == 1 && c->numerics == DSV4_NUMERICS_DS4 && c->mvw &&
           !c->generic_only && n_expert >= 1 && n_expert <= DSV4_CUDA_MVW_ROUTER_MAX_EXPERTS && c->d_hc_tail;
}

/* router_topk (backend.h): matmul_multi's one launch with the router's selection as its epilogue
 * (cuda_mvw.h dsv4_cuda_mvw_router). DSV4_ERR_UNSUPPORTED where it does not apply (items the
 * warp-direct kernel does not take, a bias that is not F32 of n_expert values). */
dsv4_status cu_matmuls_router(void *vctx, const dsv4_matmul_item *items, uint32_t n_items, uint32_t n,
                              uint32_t n_expert, uint32_t k, const dsv4_tensor *bias, float scale,
                              int32_t *sel, float *weights, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    if (!cu_router_topk_ok(c, n, n_expert) || n_items < 1 || items[0].n_out != n_expert ||
        items[0].row0 != 0 || k == 0 || k > n_expert ||
        (bias && (bias->ne[0] != n_expert || bias->type != DSV4_TYPE_F32)))
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "router_topk: not on the one-token fused path here");
    const float *bv = NULL;
    if (bias && !(bv = (const float *)cu_weight_dev(c, bias, err))) return DSV4_ERR_INVALID;
    const dsv4_cuda_mvw_router_args rt = {n_expert, k, bv, scale, sel, weights, c->d_hc_tail + 96};
    const dsv4_status st = multi_one(c, items, n_items, n, &rt, err);
    if (st == DSV4_ERR_UNSUPPORTED)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED,
                         "router_topk: the products are not on the warp-direct kernel");
    return st;
}
