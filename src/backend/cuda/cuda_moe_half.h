/* The routed experts' products of large prefill chunks on f16 tensor cores, IQ2_XXS gate/up and
 * Q2_K down (cuda_ops_moe_half.cu; operands, error and layout in cuda_moe_half.cuh). Not bitwise
 * the CPU; the grouped path (cuda_ops_moe_grouped.cu) uses them in place of the wide kernels where
 * cu_moe_half_ok says so. C++ only. */
#ifndef DSV4_CUDA_MOE_HALF_H
#define DSV4_CUDA_MOE_HALF_H

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_moe_wide.h"

/* Which products take the f16 path and their scales (cu_moe_half_ok). */
typedef struct cu_moe_half_plan {
    int which;             /* bit 0: gate/up, bit 1: down */
    float wsc[2], winv[2]; /* gate, up: 2^(p - 3), 2^-p */
    float dsc, dinv;       /* down: 2^p, 2^-p */
} cu_moe_half_plan;

/* At backend creation (DS4 numerics, sm_80+, not DSV4_CUDA_MOE_F16=0): the shift of every IQ2_XXS
 * and Q2_K tensor from its largest block scales (one scan each, one wait). Never fails: a tensor
 * not scanned is scanned on its first product. */
void cu_moe_half_prepare(cuda_ctx *c);
/* Which of this chunk's products (n tokens) take the f16 path: plan->which, also returned. May
 * raise the kernels' shared-memory limit, and scan a tensor (one wait). */
int cu_moe_half_ok(cuda_ctx *c, const dsv4_tensor *gate, const dsv4_tensor *up, const dsv4_tensor *down,
                   uint32_t n, const void *gd, const void *ud, const void *dd, cu_moe_half_plan *plan);
/* Scratch of `rows` f16 activation rows of `in` (a->scratch must hold: gate/up n rows of in, down P
 * rows of ff). */
size_t cu_moe_half_scratch_bytes(uint64_t rows, uint64_t in);
/* The n token rows to f16, then gate/up -> mid (a->mid), on c's stream. */
dsv4_status cu_moe_half_gate_up(cuda_ctx *c, const cu_moe_wide_args *a, uint32_t n,
                                const cu_moe_half_plan *plan, dsv4_error *err);
/* The P mid rows to f16 (their Q8_K values), then down -> y (a->y), on c's stream. */
dsv4_status cu_moe_half_down(cuda_ctx *c, const cu_moe_wide_args *a, const cu_moe_half_plan *plan,
                             dsv4_error *err);

#endif
