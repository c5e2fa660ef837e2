/* The exact routed-expert prefill products on Hopper warpgroup tensor cores: IQ2_XXS gate/up and
 * Q2_K down (cuda_ops_moe_x16.cu; units and the exactness argument in cuda_moe_x16.cuh). Bitwise
 * the CPU and the wide kernels (cuda_ops_moe_wide.cu) they replace; the grouped path
 * (cuda_ops_moe_grouped.cu) takes them where cu_moe_x16_ok says so (DSV4_CUDA_MOE_X16=1). C++ only. */
#ifndef DSV4_CUDA_MOE_X16_H
#define DSV4_CUDA_MOE_X16_H

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_moe_wide.h"

/* Which products of these experts take the warpgroup kernels on this device: bit 0 gate/up
 * (IQ2_XXS), bit 1 down (Q2_K); 0 where none does. The gate: DS4 numerics and not
 * DSV4_CUDA_MATVEC=generic; DSV4_CUDA_MOE_X16 (read per call) "1" (off by default: slower than the
 * f16 products on the H200 so far; "gate_up" / "down": that product only); a device of compute capability 9.0
 * whose runtime found the kernels' sm_90a image and raised their shared-memory limit; shapes and alignments
 * the staging takes. The first call for an IQ2_XXS tensor scans it for its experts' largest Σ w'^2 (on c's
 * stream; not while a step is recorded). */
typedef struct cu_moe_x16_plan {
    int which;             /* bit 0 gate/up, bit 1 down */
    const uint32_t *w2[2]; /* gate, up: each expert's largest Σ w'^2 of a row superblock (device) */
} cu_moe_x16_plan;
int cu_moe_x16_ok(cuda_ctx *c, const dsv4_tensor *gate, const dsv4_tensor *up, const dsv4_tensor *down,
                  const void *gd, const void *ud, const void *dd, cu_moe_x16_plan *plan);
/* Scratch of the activation packs: gate/up n token rows of in, down P pair rows of ff. */
size_t cu_moe_x16_scratch_bytes(uint64_t n, uint64_t P, uint64_t in, uint64_t ff);
/* The n token rows packed (f16 codes in the kernels' k order, the heavy superblocks split), then
 * gate/up -> mid (a->mid), on c's stream. */
dsv4_status cu_moe_x16_gate_up(cuda_ctx *c, const cu_moe_wide_args *a, uint32_t n,
                               const cu_moe_x16_plan *plan, dsv4_error *err);
/* The P mid rows quantized to Q8_K as the CPU does and packed, then down -> y (a->y). */
dsv4_status cu_moe_x16_down(cuda_ctx *c, const cu_moe_wide_args *a, dsv4_error *err);

#endif
