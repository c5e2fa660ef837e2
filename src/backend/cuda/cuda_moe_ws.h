/* The warpgroup routed-expert products (cuda_moe_ws.cu, units cuda_moe_ws.cuh), IQ2_XXS gate/up and Q2_K
 * down: the f16 path's numerics (cuda_moe_half.cuh) on warpgroup tensor cores. Built for sm_90a only.
 * Taken only with DSV4_CUDA_MOE_WS set (sessions 21-22: the producer / consumer form, slower than mh_kernel
 * for gate/up; session 23: every warpgroup decodes and multiplies). C++ callers only (the parameters are
 * cuda_moe_half.cuh's mh_params). */
#ifndef DSV4_CUDA_MOE_WS_H
#define DSV4_CUDA_MOE_WS_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/cuda/cuda_moe_half.cuh"
#include "common/status.h"

/* DSV4_CUDA_MOE_WS (read once): unset off, 1 (or 2, which chose the computed IQ2_XXS sign masks before they
 * became the only form) both products, down or gateup one of them; the bits below */
enum { DSV4_MOE_WS_GATE_UP = 1, DSV4_MOE_WS_DOWN = 2 };
int dsv4_cuda_moe_ws_mode(void);
/* Compute capability 9.0, the kernel's image present and its shared memory granted on the current
 * device (ask once per device). */
bool dsv4_cuda_moe_ws_device_ok(int cc_major, size_t smem_per_block_optin);
/* Shapes it takes: whole superblocks (down in % 256 == 0; gate/up in % 512 == 0, mp_raw_src), 4-aligned
 * rows, 16-aligned activation rows. */
bool dsv4_cuda_moe_ws_ok(const mh_params *p, bool down);
/* The gate/up (down = false) or down product of p (mh_params as cu_moe_half_gate_up / _down fill them, with
 * n_rb and rb_per_cta for mp_rb_rows-row blocks): grid (row-block groups, tiles), as mh_kernel's. */
dsv4_status dsv4_cuda_moe_ws_product(const mh_params *p, bool down, unsigned groups, unsigned max_tiles,
                                     cudaStream_t stream, dsv4_error *err);

#endif
