/* Choosing and creating a backend by name, and what a device backend reports about itself.
 *
 * "cpu" is always available. "cuda" exists only in CUDA builds (`make cuda`): there
 * dsv4_backend_cuda_create comes from libcuda_backend.a; in CPU builds a stub (cuda_stub.c)
 * answers DSV4_ERR_UNSUPPORTED. The CUDA backend copies every weight tensor of the model into
 * device memory at creation, so the model must outlive the backend. */
#ifndef DSV4_BACKEND_REGISTRY_H
#define DSV4_BACKEND_REGISTRY_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "common/status.h"
#include "model/model.h"

typedef struct dsv4_backend_params {
    const char *name;        /* "cpu" (also when NULL) or "cuda" */
    int device;              /* CUDA device index */
    uint32_t n_threads;      /* CPU: 0 = online CPUs */
    dsv4_numerics numerics;  /* DS4 or EXACT (both backends; see backend.h) */
    const dsv4_model *model; /* CUDA: whose weights are uploaded (required) */
    /* CUDA: weight upload progress, called on the calling thread (may be NULL) */
    void (*on_upload)(void *user, uint64_t done_bytes, uint64_t total_bytes);
    void *upload_user;
    /* CUDA tiers: when `partial`, upload only layers [layer_first, layer_end) and, when set, the
     * embedding / the output head (graph/placement.h); otherwise every tensor. */
    bool partial;
    uint32_t layer_first, layer_end;
    bool with_embed, with_head;
    /* CUDA: the engine's prefill chunk; the library GEMMs of its layers' products are set up for
     * it at creation (cuda_ops_blas.cu), so the first chunk runs at the speed of the next (0: not) */
    uint32_t prefill_chunk;
} dsv4_backend_params;

dsv4_status dsv4_backend_create(const dsv4_backend_params *p, dsv4_backend *out, dsv4_error *err);
dsv4_status dsv4_backend_cuda_create(const dsv4_backend_params *p, dsv4_backend *out, dsv4_error *err);

/* What a backend runs on and what it holds. */
typedef struct dsv4_device_info {
    char backend[16]; /* "cpu" or "cuda" */
    char name[256];   /* device name ("host CPU" for the CPU backend) */
    int device;
    int cc_major, cc_minor; /* compute capability (0 on the CPU) */
    int sm_count;
    bool hopper;            /* sm_90-class paths selectable */
    uint64_t total_mem;     /* device memory (0 on the CPU) */
    uint64_t free_mem;      /* free now */
    uint64_t weight_bytes;  /* resident weight copies */
    uint64_t n_weights;     /* tensors uploaded */
    uint64_t buffer_bytes;  /* live buf_alloc memory (workspace, KV state) */
    uint64_t scratch_bytes; /* backend-internal scratch */
    /* recorded decode steps (CUDA Graphs): launched; of those, updated in place vs instantiated;
     * updates refused (another op sequence under a key); recordings that failed; runs refused
     * because the recording was stale (recorded again) */
    uint64_t steps_launched, steps_updated, steps_instantiated, steps_update_failed, steps_failed,
        steps_stale;
    uint64_t steps_pdl_edges; /* programmatic kernel -> kernel edges set in recorded steps (cuda_pdl.h) */
    /* host microseconds spent recording them: capture, programmatic edge pass, updates, instantiations */
    uint64_t steps_capture_us, steps_pdl_us, steps_update_us, steps_instantiate_us;
    /* prefill products on cuBLAS (CUDA, cuda_gemm_blas.h): library loaded, products run, activation
     * conversions shared inside matmul_multi */
    bool blas_loaded;
    uint64_t blas_products, blas_shared;
    uint64_t blas_hc_mix_folded; /* of them, HC mixes with the rmsnorm in the f16 conversion */
    uint64_t hc_mix_tc;          /* HC mixes of prefill chunks on the TF32 kernel (CUDA, cuda_hc_mix_tc.h) */
    uint64_t q8_wg_products;     /* Q8_0 prefill products on the exact warpgroup path (CUDA, sm_90) */
    uint64_t moe_f16_products;   /* routed gate/up products on the f16 path (CUDA) */
    uint64_t moe_ws_products;    /* of them, on the producer / consumer warpgroup kernel (CUDA, sm_90) */
    uint64_t moe_x16_products;   /* routed products on the exact warpgroup path (CUDA, sm_90) */
    uint64_t moe_x16_steps, moe_x16_heavy_steps; /* its gate/up CTA steps, of them with split codes */
} dsv4_device_info;

dsv4_status dsv4_backend_device_info(const dsv4_backend *b, dsv4_device_info *out, dsv4_error *err);
/* The CUDA part of dsv4_backend_device_info (stubbed in CPU builds). */
dsv4_status dsv4_backend_cuda_device_info(const dsv4_backend *b, dsv4_device_info *out, dsv4_error *err);
/* Test hook: the CUDA backend's one-launch decode hc pre step on or off (DSV4_CUDA_HC_FAST=0 turns
 * it off at creation); *was (may be NULL) gets the previous setting. Stubbed in CPU builds. */
dsv4_status dsv4_backend_cuda_set_hc_fast(const dsv4_backend *b, bool on, bool *was, dsv4_error *err);
/* Test hook: the CUDA warp-direct matvec quantizes its Q8_0 inputs itself (fused) or takes them from
 * the separate quantizer launch, as DSV4_CUDA_MVW_ACT=fused|separate sets it at creation; *was (may
 * be NULL) gets the previous setting. Stubbed in CPU builds. */
dsv4_status dsv4_backend_cuda_set_mvw_act(const dsv4_backend *b, bool fused, bool *was, dsv4_error *err);
/* Test hook: DSV4_CUDA_HC_TAIL's mode (0 off, 1 multi, 2 last; 3 last as the cluster tail,
 * DSV4_CUDA_HC_CLUSTER=1, unsupported where the device does not run it) for the one-launch pre step;
 * *was gets the previous mode, *launches the tail kernel's launches so far (either may be NULL). */
dsv4_status dsv4_backend_cuda_set_hc_tail(const dsv4_backend *b, int mode, int *was, uint64_t *launches,
                                          dsv4_error *err);
/* Test hook: products the CUDA backend ran on cuBLAS so far, the activation conversions they shared
 * inside matmul_multi, and whether the library is loaded (any may be NULL). Stubbed in CPU builds. */
dsv4_status dsv4_backend_cuda_blas_calls(const dsv4_backend *b, uint64_t *calls, uint64_t *shared,
                                         bool *loaded, dsv4_error *err);

#endif
