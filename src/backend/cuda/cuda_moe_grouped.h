/* Grouped (prefill) routed experts on CUDA: per-expert token lists built on the device, then each
 * expert's weight rows read once per tile of its tokens (cuda_moe_grouped.cuh). Bitwise the CPU's
 * moe op, like the generic path it replaces for n >= 2. */
#ifndef DSV4_CUDA_MOE_GROUPED_H
#define DSV4_CUDA_MOE_GROUPED_H

#include "backend/cuda/cuda_backend.h"

/* The moe op for n >= 2 tokens with IQ2_XXS / Q2_K / Q4_K / Q8_0 experts (DS4 numerics, not
 * DSV4_CUDA_MATVEC=generic, not DSV4_CUDA_MOE_GROUPED=0). gd/ud/dd: the device copies of the
 * expert tensors. DSV4_ERR_UNSUPPORTED, with nothing launched and err untouched, when it declines:
 * the caller runs the generic path. Uses CU_SLOT_G (token lists), CU_SLOT_XQ, CU_SLOT_MID,
 * CU_SLOT_MIDQ, CU_SLOT_Y, CU_SLOT_U (the wide kernels' activation packs) and cu_quant_rows'
 * CU_SLOT_PACK. */
dsv4_status cu_moe_grouped(cuda_ctx *c, const dsv4_tensor *gate, const dsv4_tensor *up,
                           const dsv4_tensor *down, const uint8_t *gd, const uint8_t *ud, const uint8_t *dd,
                           const float *x, uint32_t n, const int32_t *sel, const float *weights, uint32_t k,
                           float clamp, float *out, dsv4_error *err);

#endif
