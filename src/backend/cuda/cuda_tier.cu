/* Tier ops of the CUDA backend: device selection, copies from another tier's buffer (same device:
 * device copy; another device with validated peer access: peer copy) and pinned host memory for
 * the host bounce (backend/tier_copy.c). The destination stream waits on an event recorded on
 * the source tier's stream, so the copy sees all of the source's queued work without a host
 * synchronization. */
#include <string.h>

#include "backend/cuda/cuda_backend.h"
extern "C" {
#include "backend/tier_copy.h"
}

dsv4_status cu_activate(void *vctx, dsv4_error *err) {
    const cuda_ctx *c = (const cuda_ctx *)vctx;
    const cudaError_t e = cudaSetDevice(c->device);
    return e == cudaSuccess ? DSV4_OK : cu_fail(err, e, "set device (tier switch)");
}

/* Peer access from c's device to device d: checked and enabled once. */
static bool peer_ok(cuda_ctx *c, int d) {
    if (d < 0 || d >= (int)sizeof c->peer) return false;
    if (c->peer[d]) return c->peer[d] > 0;
    int can = 0;
    cudaError_t e = cudaDeviceCanAccessPeer(&can, c->device, d);
    if (e == cudaSuccess && can) {
        e = cudaDeviceEnablePeerAccess(d, 0); /* c's device is current */
        if (e == cudaErrorPeerAccessAlreadyEnabled) e = cudaSuccess;
    }
    cudaGetLastError();
    c->peer[d] = e == cudaSuccess && can ? 1 : -1;
    return c->peer[d] > 0;
}

dsv4_status cu_copy_from(void *vctx, void *dst, const dsv4_backend *src_b, const void *src, size_t bytes,
                         bool allow_peer, int *path, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    if (!src_b || !src_b->ops || strcmp(src_b->ops->name, "cuda") != 0)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "cuda copy_from: the source tier is not a CUDA device");
    cuda_ctx *s = (cuda_ctx *)src_b->ctx;
    if (s->device != c->device && !(allow_peer && peer_ok(c, s->device)))
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "cuda copy_from: no peer access from device %d to %d",
                         c->device, s->device);
    cudaError_t e = cudaSetDevice(s->device);
    if (e == cudaSuccess && !s->xev) e = cudaEventCreateWithFlags(&s->xev, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord(s->xev, s->stream);
    if (e == cudaSuccess) e = cudaSetDevice(c->device);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(c->stream, s->xev, 0);
    if (e != cudaSuccess) return cu_fail(err, e, "tier copy (ordering after the source tier)");
    if (s->device == c->device) {
        e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream);
        *path = DSV4_XCOPY_DEVICE;
    } else {
        e = cudaMemcpyPeerAsync(dst, c->device, src, s->device, bytes, c->stream);
        *path = DSV4_XCOPY_PEER;
    }
    return e == cudaSuccess ? DSV4_OK : cu_fail(err, e, "tier copy");
}

dsv4_status cu_host_alloc(void *vctx, size_t bytes, void **out, dsv4_error *err) {
    (void)vctx;
    const cudaError_t e = cudaMallocHost(out, bytes ? bytes : 1);
    return e == cudaSuccess ? DSV4_OK : cu_fail(err, e, "pinned host bounce buffer");
}

void cu_host_free(void *vctx, void *ptr) {
    (void)vctx;
    if (ptr) cudaFreeHost(ptr);
    cudaGetLastError();
}
