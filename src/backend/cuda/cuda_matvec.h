/* Batch-1 quantized matrix-vector products on CUDA (decode path), and the activation
 * quantizers they consume. Plain C API: device pointers in, one stream, shapes.
 *
 * Numerics (shared/spec/model-moe-gguf-tokenizer.md §2.8):
 *   Q8_0 weights       x Q8_0 activations (f32 scale per 32, dsv4_q8_0_act layout)
 *   IQ2_XXS/Q2_K/Q4_K  x Q8_K activations (dsv4_q8_k layout, 292 B per 256)
 *   F16 weights        x f32 activations, f32 accumulation
 * Integer block sums are exact (dp4a); only the float combination order differs from the CPU
 * (quant_dot_*), so results match it to a few ulps of S = sum_i |w_i x_i| (bench/NOTES.md).
 * The device activation quantizers reproduce quant_act_q8_0 / quant_act_q8_k bit for bit.
 *
 * Weight layout: ggml row-major [in, out] (rows of `in` elements are contiguous); an expert
 * tensor [in, out, n_expert] stores expert e at e * out * row_bytes. The weight base and the
 * row size must be 16-byte aligned (true for every DeepSeek V4 shape: in a multiple of 256 for
 * Q8_0, 2048 for IQ2_XXS, 1024 for Q2_K, 256 for Q4_K, 8 for F16). */
#ifndef DSV4_CUDA_MATVEC_H
#define DSV4_CUDA_MATVEC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "common/status.h" /* a C header without its own extern "C" */

struct CUstream_st; /* = cudaStream_t, so C callers need no CUDA headers */

/* Launch configuration knobs (0 = the built-in default for the weight type). */
typedef struct dsv4_cuda_mv_tuning {
    int tile_bytes;  /* target weight bytes per pipeline stage (rows per stage = power of 2) */
    int stages;      /* cp.async pipeline depth, 2..4 */
    int ctas_per_sm; /* upper bound on resident CTAs per SM used to size the persistent grid */
    int iq2_decoder; /* DSV4_MV_IQ2_MASK or DSV4_MV_IQ2_SEL (same bits); 0: the context's default */
    /* IQ2_XXS with the selector decoder: 3 or 4 row pipelines per CTA sharing one copy of its tables,
     * one CTA per SM (more warps per SM; the same bits); 1: one pipeline per CTA; 0: the default (4) */
    int groups;
    /* Q2_K and IQ2_XXS: DSV4_MV_PIPE (mv_kernel) or DSV4_MV_STREAM (rows streamed per warp,
     * cuda_mv_stream.cuh; then `groups` is the rows per group, 2 or 4, `stages` the groups in flight per
     * warp, 2 or 3, for Q2_K `ctas_per_sm` the resident CTAs of 8 warps); 0: the context's default,
     * which is the pipeline whenever tile_bytes, stages or ctas_per_sm (IQ2_XXS: or iq2_decoder, groups)
     * are set (their plans are the pipeline's) */
    int kernel;
} dsv4_cuda_mv_tuning;

#define DSV4_MV_PIPE 1
#define DSV4_MV_STREAM 2

#define DSV4_MV_IQ2_MASK 1 /* sign masks from a table, two dp4a per word */
#define DSV4_MV_IQ2_SEL 2  /* PRMT selectors (signed grid bytes), one dp4a per word */

/* Per-device state: properties read once, the IQ2_XXS grid table on the device. */
typedef struct dsv4_cuda_mv_ctx {
    int device;
    int sm_count;
    int smem_per_sm;          /* bytes of shared memory per multiprocessor */
    int smem_per_block_optin; /* largest dynamic shared memory a block may opt into */
    uint64_t *d_iq2_grid;     /* 256 entries, copied from dsv4_iq2xxs_grid */
    uint32_t *d_iq2_sel;      /* 256 grid + 128 sign PRMT selectors (NULL: not expressible) */
    int iq2_decoder_default;  /* DSV4_CUDA_MV_IQ2=mask|sel at init */
    int q2k_kernel_default;   /* DSV4_CUDA_MV_Q2K=pipe|stream at init (DSV4_MV_PIPE / DSV4_MV_STREAM) */
    int iq2_kernel_default;   /* DSV4_CUDA_MV_IQ2=mask|sel: the pipeline; unset: DSV4_MV_STREAM */
    int smem_reserved; /* shared memory the runtime reserves per block: the dynamic block's first address */
    dsv4_cuda_mv_tuning tune; /* applies to every matvec launched with this context */
    /* per format (IQ2_XXS, Q2_K) from DSV4_CUDA_MV_PLAN_IQ2 / _Q2K="tile,stages,ctas[,groups]" at init, under
     * `tune`; zeros: the built-in plan */
    dsv4_cuda_mv_tuning fmt_tune[5];
    int *d_mid_tickets; /* DSV4_CUDA_MV_MID_TICKETS counters, zero between launches (the folded MoE mid) */
    int mvi_spare;      /* DSV4_CUDA_MVI_SPARE: SMs the streamed IQ2_XXS launch leaves out (A/B) */
} dsv4_cuda_mv_ctx;
#define DSV4_CUDA_MV_MID_TICKETS 4096

/* Read the device's properties, raise the kernels' shared-memory limits, upload the tables. */
dsv4_status dsv4_cuda_mv_init(dsv4_cuda_mv_ctx *ctx, int device, dsv4_error *err);
void dsv4_cuda_mv_destroy(dsv4_cuda_mv_ctx *ctx);

/* Bytes of the quantized activation buffer a weight type consumes for n inputs
 * (Q8_0: n/32 * 36; K-quants: n/256 * 292; F16: n * 4 (plain f32)); 0 if unsupported. */
size_t dsv4_cuda_act_bytes(uint32_t weight_type, int64_t n);

/* x (f32, n elements) -> dsv4_q8_0_act[n/32], exactly quant_act_q8_0 (n a multiple of 32). */
dsv4_status dsv4_cuda_quant_act_q8_0(const float *x, void *out, int64_t n, struct CUstream_st *stream,
                                     dsv4_error *err);
/* x (f32, n elements) -> dsv4_q8_k[n/256], exactly quant_act_q8_k (n a multiple of 256). */
dsv4_status dsv4_cuda_quant_act_q8_k(const float *x, void *out, int64_t n, struct CUstream_st *stream,
                                     dsv4_error *err);
/* `rows` independent vectors of n elements (row stride n floats -> row stride act_bytes(n)). */
dsv4_status dsv4_cuda_quant_act_rows(uint32_t weight_type, const float *x, void *out, int64_t n, int rows,
                                     struct CUstream_st *stream, dsv4_error *err);

/* y[out] = W[out, in] . x. x is the activation buffer for the weight type (see above), y f32.
 * Types: Q8_0, IQ2_XXS, Q2_K, Q4_K, F16. */
dsv4_status dsv4_cuda_matvec(const dsv4_cuda_mv_ctx *ctx, uint32_t type, const void *w, int64_t in,
                             int64_t out, const void *x, float *y, struct CUstream_st *stream,
                             dsv4_error *err);

/* k matvecs in one launch over the expert tensor w [in, out, n_expert]:
 *   y[s*out + r] = W[ids[s]][r, :] . x_s,  x_s = x + s * x_stride_bytes (0: one x for all slots).
 * ids is a device array of k int32; a slot whose id is outside [0, n_expert) yields NaN rows.
 * Types: IQ2_XXS, Q2_K, Q4_K (and Q8_0, F16). */
dsv4_status dsv4_cuda_matvec_experts(const dsv4_cuda_mv_ctx *ctx, uint32_t type, const void *w, int64_t in,
                                     int64_t out, int64_t n_expert, const int32_t *ids, int k, const void *x,
                                     int64_t x_stride_bytes, float *y, struct CUstream_st *stream,
                                     dsv4_error *err);

/* Two expert tensors of one type and shape (gate and up) over the same ids and activations, one
 * launch: y[s*out + r] for s < 2k, slots 0..k-1 from wa as dsv4_cuda_matvec_experts would write
 * them and slots k..2k-1 from wb (slot s uses ids[s - k] and x_{s - k}). Each row's value is the
 * same bits as the single-tensor call gives (the launch plan depends on in/out, not on k). */
dsv4_status dsv4_cuda_matvec_experts_pair(const dsv4_cuda_mv_ctx *ctx, uint32_t type, const void *wa,
                                          const void *wb, int64_t in, int64_t out, int64_t n_expert,
                                          const int32_t *ids, int k, const void *x, int64_t x_stride_bytes,
                                          float *y, struct CUstream_st *stream, dsv4_error *err);

/* The routed experts' mid (moe_mid_q8k_kernel: silu(gate) * up, clamped when clamp_on, times the slot's
 * route weight, then Q8_K blocks of 256) folded into the gate/up pair launch: the same bytes in midq
 * (k * out / 256 blocks) and the same gate/up rows in y. Only the streamed IQ2_XXS kernel takes it:
 * DSV4_ERR_UNSUPPORTED with nothing launched otherwise (other plans, out % 256 != 0, more blocks than
 * DSV4_CUDA_MV_MID_TICKETS). */
typedef struct dsv4_cuda_mv_mid {
    const float *weights; /* k route weights (device) */
    float clamp;
    int clamp_on;
    void *midq;
} dsv4_cuda_mv_mid;
dsv4_status dsv4_cuda_matvec_experts_pair_mid(const dsv4_cuda_mv_ctx *ctx, uint32_t type, const void *wa,
                                              const void *wb, int64_t in, int64_t out, int64_t n_expert,
                                              const int32_t *ids, int k, const void *x, float *y,
                                              const dsv4_cuda_mv_mid *mid, struct CUstream_st *stream,
                                              dsv4_error *err);

/* The launch geometry a matvec of this shape gets under ctx's tuning ("R=.. nseg=.. S=.. grid=..
 * smem=.."), for benchmarks and logs. */
dsv4_status dsv4_cuda_mv_describe(const dsv4_cuda_mv_ctx *ctx, uint32_t type, int64_t in, int64_t out, int k,
                                  char *buf, size_t len, dsv4_error *err);

#ifdef __cplusplus
}
#endif
#endif
