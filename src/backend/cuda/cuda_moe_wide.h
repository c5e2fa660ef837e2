/* Wide-tile grouped routed-expert products on int8 tensor cores (cuda_ops_moe_wide.cu, units and
 * the exactness argument in cuda_moe_wide.cuh), used by cu_moe_grouped for IQ2_XXS / Q2_K / Q4_K
 * experts on sm_80+; bitwise equal to the scalar grouped kernel and to cuda_ops_moe_mma.cu.
 * C++ only (included by cuda_ops_moe_*.cu). */
#ifndef DSV4_CUDA_MOE_WIDE_H
#define DSV4_CUDA_MOE_WIDE_H

#include "backend/cuda/cuda_backend.h"

/* Pairs per tile of the wide kernels (the tiles cu_moe_grouped cuts for them). */
#define CU_MOE_WIDE_TILE 64

/* Which tensor-core product DSV4_CUDA_MOE_MMA asks for: 0 ("0": the scalar grouped kernels),
 * 1 ("old": cuda_ops_moe_mma.cu), 2 (unset or anything else: the wide kernels where they apply,
 * else the old ones). Read on every call. */
int cu_moe_mma_mode(void);

/* Do the wide kernels take these experts (gate/up: in -> ff, down: ff -> embd; device copies gd,
 * ud, dd) on this device? May raise the kernels' shared-memory limit. */
bool cu_moe_wide_ok(const cuda_ctx *c, uint32_t gu_type, uint32_t down_type, uint64_t in, uint64_t ff,
                    uint64_t embd, uint64_t gu_row_bytes, uint64_t down_row_bytes, const void *gd,
                    const void *ud, const void *dd);

/* One routed-expert pass after the token rows are quantized and the lists and tiles are built. */
typedef struct cu_moe_wide_args {
    uint32_t gu_type, down_type;
    const uint8_t *gd, *ud, *dd; /* expert tensors on the device */
    uint64_t gu_row_bytes, down_row_bytes;
    uint64_t in, ff, embd, P; /* P = n * k pairs */
    uint64_t n_expert;
    uint32_t k;
    const uint8_t *xq; /* Q8_K token rows, xq_stride bytes apart */
    uint64_t xq_stride;
    const int4 *tiles;  /* tiles of <= CU_MOE_WIDE_TILE pairs (expert, first list entry, pairs) */
    const int *n_tiles; /* [0] tiles, [1] pairs in the lists */
    const int32_t *list;
    uint64_t max_tiles; /* grid bound (<= 65535) */
    const float *weights;
    float clamp;
    float *mid;    /* [P][ff] */
    float *y;      /* [P][embd] */
    void *scratch; /* cu_moe_wide_scratch_bytes */
} cu_moe_wide_args;

/* Bytes of the activation packs (one product at a time). */
size_t cu_moe_wide_scratch_bytes(uint32_t gu_type, uint32_t down_type, uint64_t P, uint64_t in, uint64_t ff);
/* Pack, gate/up -> mid (on c's stream). */
dsv4_status cu_moe_wide_gate_up(cuda_ctx *c, const cu_moe_wide_args *a, dsv4_error *err);
/* Pack (the mid rows quantized to Q8_K), down -> y (on c's stream). */
dsv4_status cu_moe_wide_down(cuda_ctx *c, const cu_moe_wide_args *a, dsv4_error *err);
/* Row blocks per CTA for n_rb row blocks, P pairs over E experts. */
int cu_moe_wide_rb_per_cta(const cuda_ctx *c, int n_rb, uint64_t P, uint64_t E);

#endif
