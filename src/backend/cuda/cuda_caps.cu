#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_caps.h"

extern "C" int dsv4_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" int dsv4_cuda_query_caps(int device, dsv4_cuda_caps *caps, char *msg, size_t msg_len) {
    cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, device);
    if (e != cudaSuccess) {
        snprintf(msg, msg_len, "cudaGetDeviceProperties(%d): %s", device, cudaGetErrorString(e));
        return -1;
    }
    memset(caps, 0, sizeof *caps);
    caps->device = device;
    snprintf(caps->name, sizeof caps->name, "%s", prop.name);
    caps->cc_major = prop.major;
    caps->cc_minor = prop.minor;
    caps->sm_count = prop.multiProcessorCount;
    caps->smem_per_block_optin = prop.sharedMemPerBlockOptin;
    caps->total_mem = prop.totalGlobalMem;
    caps->hopper = prop.major == 9;
    int prev = -1;
    cudaGetDevice(&prev);
    if (cudaSetDevice(device) == cudaSuccess) {
        size_t fr = 0, tot = 0;
        if (cudaMemGetInfo(&fr, &tot) == cudaSuccess) caps->free_mem = fr;
    }
    int n = dsv4_cuda_device_count();
    for (int d = 0; d < n && d < 31; d++) {
        int ok = 0;
        if (d != device && cudaDeviceCanAccessPeer(&ok, device, d) == cudaSuccess && ok)
            caps->peer_mask |= 1 << d;
    }
    if (prev >= 0) cudaSetDevice(prev);
    cudaGetLastError();
    return 0;
}
