/* Tier ops of the CUDA backend: device selection, copies from another tier's buffer (same device:
 * device copy; another device with validated peer access: peer copy) and pinned host memory for
 * the host bounce (backend/tier_copy.c). The destination stream waits on an event recorded on
 * the source tier's stream, so the copy sees all of the source's queued work without a host
 * synchronization. */
#include <stdlib.h>
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

cudaError_t cu_stream_follow(cuda_ctx *to, cuda_ctx *from) {
    cudaError_t e = cudaSetDevice(from->device);
    if (e == cudaSuccess && !from->xev) e = cudaEventCreateWithFlags(&from->xev, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord(from->xev, from->stream);
    if (e == cudaSuccess) e = cudaSetDevice(to->device);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(to->stream, from->xev, 0);
    return e;
}

/* How a copy from another device is issued (DSV4_CUDA_TIER_COPY): 1 default (the default) =
 * cudaMemcpyAsync(cudaMemcpyDefault) over unified addresses, 2 kernel = a kernel on the destination
 * device loading the source over the peer link, 0 peer = cudaMemcpyPeerAsync. Stream capture
 * refuses cudaMemcpyPeerAsync (cudaErrorStreamCaptureUnsupported: bench/kernels/peer_capture_probe
 * on two H200s), so with "peer" a decode step across devices is not recorded. */
static int tier_copy_form(void) {
    static int form = -1;
    if (form < 0) {
        const char *v = getenv("DSV4_CUDA_TIER_COPY");
        form = v && !strcmp(v, "peer") ? 0 : v && !strcmp(v, "kernel") ? 2 : 1;
    }
    return form;
}

__global__ void tier_pull_words(uint32_t *dst, const uint32_t *src, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

cudaError_t cu_peer_copy(cuda_ctx *c, void *dst, const void *src, int src_device, size_t bytes) {
    const int form = tier_copy_form();
    if (form == 2 && bytes % 4 == 0 && peer_ok(c, src_device)) {
        const size_t n = bytes / 4;
        const unsigned blocks = (unsigned)(n / 256 < 512 ? (n + 255) / 256 : 512);
        tier_pull_words<<<blocks, 256, 0, c->stream>>>((uint32_t *)dst, (const uint32_t *)src, n);
        return cudaGetLastError();
    }
    if (form == 1) return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, c->stream);
    return cudaMemcpyPeerAsync(dst, c->device, src, src_device, bytes, c->stream);
}

dsv4_status cu_copy_from(void *vctx, void *dst, const dsv4_backend *src_b, const void *src, size_t bytes,
                         bool allow_peer, int *path, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    cu_preq_clear(c); /* may rewrite a row the producer-side Q8_0 record holds */
    if (!src_b || !src_b->ops || strcmp(src_b->ops->name, "cuda") != 0)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "cuda copy_from: the source tier is not a CUDA device");
    cuda_ctx *s = (cuda_ctx *)src_b->ctx;
    if (s->device != c->device && !(allow_peer && peer_ok(c, s->device)))
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "cuda copy_from: no peer access from device %d to %d",
                         c->device, s->device);
    cudaError_t e = cu_stream_follow(c, s);
    if (e != cudaSuccess) return cu_fail(err, e, "tier copy (ordering after the source tier)");
    if (s->device == c->device) {
        e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream);
        *path = DSV4_XCOPY_DEVICE;
    } else {
        e = cu_peer_copy(c, dst, src, s->device, bytes);
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
