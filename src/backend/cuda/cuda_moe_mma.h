/* Grouped routed-expert products on the int8 tensor cores (cuda_ops_moe_mma.cu), used by
 * cu_moe_grouped for IQ2_XXS / Q2_K / Q4_K experts; bitwise quant_dot_* like its scalar kernels.
 * C++ only (included by cuda_ops_moe_*.cu). */
#ifndef DSV4_CUDA_MOE_MMA_H
#define DSV4_CUDA_MOE_MMA_H

#include "backend/cuda/cuda_backend.h"

/* One grouped product: the expert tiles (expert, first list entry, pairs) of list, each pair p
 * against its activation row p / act_div (Q8_K rows act_stride bytes apart). dual: w0 gate, w1 up
 * and out = mid (silu(min(g, c)) * clamp(u, +-c) * weight per pair); else out = the product. */
struct mx_params {
    const uint8_t *w0, *w1;
    uint64_t row_bytes, expert_bytes;
    int n_out, in;
    const uint8_t *act;
    uint64_t act_stride;
    int act_div;
    const int4 *tiles;
    const int *n_tiles;
    const int32_t *list;
    const float *weights;
    float clamp;
    int clamp_on;
    float *out;
    uint64_t out_stride;
    const uint64_t *grid;
    const uint8_t *signs;
};

/* Pairs per tile for P pairs over E experts (16 or 32). */
int cu_moe_mma_tile(uint64_t P, uint64_t E);
/* Does the tensor-core path take these expert types and widths (gate/up in -> ff, down ff -> embd)
 * on this device with tiles of bn pairs? DSV4_CUDA_MOE_MMA=0 turns it off (cu_moe_mma_mode). May raise the
 * kernels' shared-memory limit. */
bool cu_moe_mma_ok(const cuda_ctx *c, uint32_t gu_type, uint32_t down_type, uint64_t in, uint64_t ff,
                   uint64_t gu_row_bytes, uint64_t down_row_bytes, int bn);
/* Launch one product over grid (max_tiles, row tiles); tiles past *n_tiles exit at once. */
dsv4_status cu_moe_mma_launch(cuda_ctx *c, uint32_t type, bool dual, int bn, const mx_params *p,
                              uint64_t max_tiles, dsv4_error *err);

#endif
