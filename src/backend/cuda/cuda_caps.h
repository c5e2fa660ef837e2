/* Device capabilities reported by the CUDA backend; fused and Hopper-only paths are gated on
 * these values (never on the presence of a symbol). */
#ifndef DSV4_CUDA_CAPS_H
#define DSV4_CUDA_CAPS_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dsv4_cuda_caps {
    int device;
    char name[256];
    int cc_major, cc_minor; /* compute capability */
    int sm_count;
    size_t smem_per_block_optin;
    size_t total_mem, free_mem;
    bool hopper;   /* sm_90-class: wgmma, TMA, clusters available */
    int peer_mask; /* bit d set: peer access to device d is possible */
} dsv4_cuda_caps;

/* Number of visible CUDA devices (0 when no driver or no device). */
int dsv4_cuda_device_count(void);
/* Fill caps for one device; returns 0 on success, -1 with a message otherwise. */
int dsv4_cuda_query_caps(int device, dsv4_cuda_caps *caps, char *msg, size_t msg_len);

#ifdef __cplusplus
}
#endif
#endif
