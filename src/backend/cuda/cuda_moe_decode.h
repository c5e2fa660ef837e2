/* One-token routed experts in two launches (cuda_ops_moe_decode.cu): gate + up + mid + Q8_K of
 * the mid in the first, down + slot sum in the second. Plain C API: device pointers, one stream,
 * no host sync and no allocation in the launch path (CUDA Graph capturable).
 *
 * Numerics: the CPU's (backend/cpu/cpu_moe.c), operation for operation: x and the mids are
 * quantized by the Q8_K unit (bit-exact with quant_act_q8_k), integer block sums are exact, each
 * superblock's float term is formed as the CPU forms it and the terms of a row are added in the
 * CPU's sequential order, so every gate/up/down row equals quant_dot_* bit for bit; the mid
 * expression is moe_mid_q8k_kernel's (the device SiLU uses a correctly rounded exp, glibc's expf
 * is off by an ulp in rare cases) and the slots are summed in slot order from 0.0f. The 5-launch
 * path (cuda_ops_moe.cu moe_decode_fused) adds superblock terms in another order, so the two
 * differ in the last bits. Deterministic: a row depends only on its own bytes and activations.
 *
 * Taken shapes (else DSV4_ERR_UNSUPPORTED, nothing launched): gate/up IQ2_XXS or Q4_K with
 * in = n_embd = 4096, down Q2_K or Q4_K with in = n_ff = 2048, n_ff a multiple of 256, k <= 12,
 * 16-byte aligned tensors. */
#ifndef DSV4_CUDA_MOE_DECODE_H
#define DSV4_CUDA_MOE_DECODE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "common/status.h" /* a C header without its own extern "C" */

struct CUstream_st;

#define DSV4_MOE_DEC_TICKETS 1024 /* blocks of 256 mids one launch can quantize (k * n_ff / 256) */

/* Per-device state: IQ2_XXS selector tables and the block tickets (zero between launches). */
typedef struct dsv4_cuda_moe_dec_ctx {
    int sm_count;
    int smem_optin;      /* largest dynamic shared memory a block may use */
    uint32_t *d_tables;  /* 256 grid selectors, then 128 sign selectors */
    unsigned *d_tickets; /* DSV4_MOE_DEC_TICKETS counters */
    int pdl;             /* sm_90+: the down kernel is a programmatic dependent launch */
} dsv4_cuda_moe_dec_ctx;

dsv4_status dsv4_cuda_moe_dec_init(dsv4_cuda_moe_dec_ctx *ctx, int device, dsv4_error *err);
void dsv4_cuda_moe_dec_destroy(dsv4_cuda_moe_dec_ctx *ctx);

typedef struct dsv4_cuda_moe_dec_args {
    uint32_t gate_type, down_type; /* up has gate's type */
    const void *gate, *up, *down;  /* [n_embd, n_ff, n_expert], [n_ff, n_embd, n_expert] */
    int64_t n_embd, n_ff, n_expert;
    const int32_t *ids;   /* k expert ids (device); an id outside [0, n_expert) gives NaN */
    const float *weights; /* k route weights (device) */
    int k;
    const float *x; /* n_embd floats (device) */
    float clamp;    /* <= 1e-6: no clamp (as moe_mid_q8k_kernel) */
    float *out;     /* n_embd floats (device) */
    float *mid;     /* scratch: k * n_ff floats */
    void *midq;     /* scratch: k * n_ff / 256 Q8_K blocks (292 bytes each), 4-byte aligned */
    /* optional (NULL in the engine), for checks: gate/up values of slot s row r at
     * gu_debug[2 (s n_ff + r)] and [+1]; down values per slot at y_debug[s n_embd + d] */
    float *gu_debug, *y_debug;
    int no_pdl; /* launch the down kernel as an ordinary launch even where PDL is available */
} dsv4_cuda_moe_dec_args;

/* DSV4_OK when dsv4_cuda_moe_decode takes these types, shapes and tensors (the scratch pointers
 * are not looked at), else DSV4_ERR_UNSUPPORTED (reason in err) or DSV4_ERR_INVALID. Launches
 * nothing. */
dsv4_status dsv4_cuda_moe_dec_check(const dsv4_cuda_moe_dec_ctx *ctx, const dsv4_cuda_moe_dec_args *a,
                                    dsv4_error *err);
/* Two launches on stream: out[d] = sum over slots s (in order) of W_down[ids[s]][d] . Q8_K(mid_s),
 * mid_s[r] = silu(min(g, c)) * clamp(u, +-c) * weights[s], g/u = W_gate/up[ids[s]][r] . Q8_K(x). */
dsv4_status dsv4_cuda_moe_decode(const dsv4_cuda_moe_dec_ctx *ctx, const dsv4_cuda_moe_dec_args *a,
                                 struct CUstream_st *stream, dsv4_error *err);

#ifdef __cplusplus
}
#endif
#endif
