/* Batch-1 (decode) matrix-vector products for dense Q8_0 and F16 weights, several products in one
 * launch ("segments": each its own weights, type, width, input and output).
 *
 * Numerics: Q8_0 weights x Q8_0 activations (dsv4_q8_0_act, from dsv4_cuda_quant_act_q8_0 or, with
 * x_f32, quantized by the kernel to the same bytes), exact
 * integer block sums (dp4a), f32 block combination; F16 weights x f32 activations, f32 FMA.
 * Every output row is within |y - quant_dot_*| <= 1e-5 S + (n_blocks + 8) 2^-24 S of the CPU
 * (S = sum_i |w_i x_i|), and its bits depend only on (type, in, the row's bytes, x): never on the
 * segment it is in, the other segments, the grid or the row index. So one multi-segment launch
 * gives exactly the bits of separate launches, on every run.
 *
 * Weight layout: ggml row-major (rows of `in` elements, row_bytes apart). Requirements (see
 * dsv4_cuda_mvw_ok): w and row_bytes 16-byte aligned; Q8_0: in a multiple of 256, <= 16384;
 * F16: in a multiple of 8, <= 65536. x: 4-byte aligned (Q8_0 blocks) or 16-byte aligned (F16, and
 * Q8_0 with x_f32). */
#ifndef DSV4_CUDA_MVW_H
#define DSV4_CUDA_MVW_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "common/status.h" /* a C header without its own extern "C" */

struct CUstream_st; /* = cudaStream_t, so C callers need no CUDA headers */

typedef struct dsv4_cuda_mvw_seg {
    uint32_t type;      /* DSV4_TYPE_Q8_0 or DSV4_TYPE_F16 */
    const void *w;      /* device: first row of this segment; rows row_bytes apart */
    uint64_t row_bytes; /* in/32*34 (Q8_0) or in*2 (F16) for a plain tensor */
    int64_t in;         /* elements per row */
    int64_t rows;
    const void *x; /* device: Q8_0 -> dsv4_q8_0_act[in/32] (or float[in], x_f32); F16 -> float[in] */
    float *y;      /* device: rows floats */
    /* Q8_0 only: nonzero -> x is float[in], 16-byte aligned, and every CTA quantizes it itself while
     * staging (quant_act_q8_0's bytes, so y has the bits of dsv4_cuda_quant_act_q8_0 then this call
     * with x_f32 = 0; no separate quantization launch). Ignored for F16 (its x is always f32). */
    uint32_t x_f32;
} dsv4_cuda_mvw_seg;

#define DSV4_CUDA_MVW_MAX_SEGS 8
#define DSV4_CUDA_MVW_Q8_0_MAX_IN 16384
#define DSV4_CUDA_MVW_F16_MAX_IN 65536

/* Can the kernel take this segment (type, 16-byte aligned w and row_bytes, in a multiple of 256
 * (Q8_0) / 8 (F16), in <= DSV4_CUDA_MVW_*_MAX_IN, row_bytes >= the row's size)? */
bool dsv4_cuda_mvw_ok(uint32_t type, const void *w, uint64_t row_bytes, int64_t in);

/* y_s = W_s . x_s for every segment, one launch. DSV4_ERR_UNSUPPORTED (nothing launched) if a
 * segment is not ok (or its x is misaligned) or n_segs is 0 or > DSV4_CUDA_MVW_MAX_SEGS;
 * DSV4_ERR_INVALID for NULL x / y or negative rows. Segments with 0 rows are skipped. No host
 * synchronization and no allocation (safe to record into CUDA graphs). */
dsv4_status dsv4_cuda_mvw(const dsv4_cuda_mvw_seg *segs, int n_segs, struct CUstream_st *stream,
                          dsv4_error *err);

/* The router's selection after its logits, in the same launch (the router_topk fused op): segment 0
 * holds the n_expert router logits of one token; when its last CTA has written its rows, that CTA
 * runs the router block (cuda_router.cuh, the router op's code) on them and writes the k ids and
 * weights. ticket: a device word at 0, put back to 0 by that CTA (graph replays find it at 0); one
 * launch at a time per word. Written after session 11's device budget was spent: not yet run on a GPU. */
typedef struct dsv4_cuda_mvw_router_args {
    uint32_t n_expert, k; /* n_expert == segment 0's rows, <= DSV4_CUDA_MVW_ROUTER_MAX_EXPERTS */
    const float *bias;    /* device, n_expert floats, or NULL */
    float scale;
    int32_t *sel;   /* device, k ids */
    float *weights; /* device, k weights */
    unsigned *ticket;
} dsv4_cuda_mvw_router_args;
#define DSV4_CUDA_MVW_ROUTER_MAX_EXPERTS 1024
dsv4_status dsv4_cuda_mvw_router(const dsv4_cuda_mvw_seg *segs, int n_segs,
                                 const dsv4_cuda_mvw_router_args *rt, struct CUstream_st *stream,
                                 dsv4_error *err);

#ifdef __cplusplus
}
#endif
#endif
