/* Copies between tiers (backend instances) for placement transitions (DESIGN.md §3):
 *   CPU <-> CPU (host memory on both sides)    -> memcpy
 *   the same device                            -> device copy        (dst backend's copy_from)
 *   two devices with validated peer access     -> peer copy          (dst backend's copy_from)
 *   otherwise, or when forced (DSV4_TIER_BOUNCE=1) -> host bounce: src read into a (pinned, when
 *                                                 the backend offers it) host buffer, dst write.
 * The source tier's queued work is finished before its buffer is read; the copy is ordered
 * before the destination tier's later ops. */
#ifndef DSV4_BACKEND_TIER_COPY_H
#define DSV4_BACKEND_TIER_COPY_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/backend.h"

typedef enum dsv4_xcopy_path {
    DSV4_XCOPY_MEMCPY = 0,
    DSV4_XCOPY_DEVICE,
    DSV4_XCOPY_PEER,
    DSV4_XCOPY_BOUNCE,
    DSV4_XCOPY_PATHS
} dsv4_xcopy_path;

const char *dsv4_xcopy_path_name(dsv4_xcopy_path p);

/* A grow-only host bounce buffer, allocated through `owner` (pinned when it can). */
typedef struct dsv4_bounce {
    const dsv4_backend *owner;
    void *p;
    size_t bytes;
} dsv4_bounce;
void dsv4_bounce_free(dsv4_bounce *b);

/* Both backends keep their buffers in host memory (the CPU backend). */
bool dsv4_backend_host_memory(const dsv4_backend *b);

dsv4_status dsv4_backend_copy_xdev(const dsv4_backend *dst_b, void *dst, const dsv4_backend *src_b,
                                   const void *src, size_t bytes, dsv4_bounce *bounce, bool force_bounce,
                                   dsv4_xcopy_path *path, dsv4_error *err);

#endif
