/* The routed experts' IQ2_XXS gate/up product of large prefill chunks on f16 tensor cores
 * (cuda_ops_moe_half.cu; operands, error and layout in cuda_moe_half.cuh). Not bitwise the CPU;
 * the grouped path (cuda_ops_moe_grouped.cu) uses it in place of the wide kernel's gate/up where
 * cu_moe_half_ok says so. C++ only. */
#ifndef DSV4_CUDA_MOE_HALF_H
#define DSV4_CUDA_MOE_HALF_H

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_moe_wide.h"

/* At backend creation (DS4 numerics, sm_80+, not DSV4_CUDA_MOE_F16=0): the shift of every IQ2_XXS
 * tensor from its largest block scale (one scan each, one wait). Never fails: a tensor not
 * scanned is scanned on its first product. */
void cu_moe_half_prepare(cuda_ctx *c);
/* May this chunk of n tokens take the f16 gate/up? On true, wsc / winv hold 2^(p - 3) and 2^-p of
 * gate and up. May raise the kernel's shared-memory limit, and scan a tensor (one wait). */
bool cu_moe_half_ok(cuda_ctx *c, const dsv4_tensor *gate, const dsv4_tensor *up, uint32_t n, const void *gd,
                    const void *ud, float wsc[2], float winv[2]);
/* Scratch of the f16 token rows (a->scratch must hold this much). */
size_t cu_moe_half_scratch_bytes(uint64_t n, uint64_t in);
/* The n token rows to f16, then gate/up -> mid (a->mid), on c's stream. */
dsv4_status cu_moe_half_gate_up(cuda_ctx *c, const cu_moe_wide_args *a, uint32_t n, const float wsc[2],
                                const float winv[2], dsv4_error *err);

#endif
