/* RoPE on the last n_rot dims of each head (interleaved pairs), cpu_rope_row on the device.
 *
 * Parity: theta of pair k is the CPU's running float product (k multiplications of (float)pos
 * by powf(base, -2/n_rot), that factor and the YaRN magnitude computed on the host by the same
 * libm calls), then the same ramp blend without contraction: bitwise. cos/sin are rounded
 * from double (see cuda_attn_common.cuh), so outputs match the CPU bitwise except where glibc's
 * cosf/sinf are off by an ulp (about 0.2 % of angles), then by ~1 ulp of the rotated value. */
#include <math.h>

#include "backend/cuda/cuda_attn_rope.cuh"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_pdl.h"

namespace {

constexpr uint32_t ROPE_PF = 8; /* pairs per thread in flight */

/* One block per row: the pair angles first (one thread each), then every (head, pair). */
__global__ void rope_kernel(float *x, rope_args a) {
    cu_pdl_trigger();
    __shared__ float cs[256], sn[256];
    const uint32_t r = blockIdx.x;
    const uint32_t pos = a.pos0 + r * a.pos_step;
    /* the angles depend on the arguments only: computed while the previous kernel still runs */
    rope_wait_if(a, 0);
    for (uint32_t k = threadIdx.x; k < a.half; k += blockDim.x) rope_pair_cs_sn(a, pos, k, &cs[k], &sn[k]);
    rope_wait_if(a, 1);
    __syncthreads();
    float *row = x + (uint64_t)r * a.n_head * a.head_dim + (a.head_dim - 2 * a.half);
    const uint32_t n = a.n_head * a.half;
    /* ROPE_PF pairs per thread loaded before any is rotated and stored (the stores could alias the
     * next loads, so one at a time each pair waited for its own round trip) */
    for (uint32_t e0 = threadIdx.x; e0 < n; e0 += ROPE_PF * blockDim.x) {
        float v0[ROPE_PF], v1[ROPE_PF];
#pragma unroll
        for (uint32_t j = 0; j < ROPE_PF; j++) {
            const uint32_t e = e0 + j * blockDim.x;
            if (e < n) {
                const float *t = row + (uint64_t)(e / a.half) * a.head_dim + 2 * (e % a.half);
                v0[j] = t[0], v1[j] = t[1];
            }
        }
#pragma unroll
        for (uint32_t j = 0; j < ROPE_PF; j++) {
            const uint32_t e = e0 + j * blockDim.x;
            if (e < n) {
                const uint32_t k = e % a.half;
                float *t = row + (uint64_t)(e / a.half) * a.head_dim + 2 * k;
                rope_rotate(&v0[j], &v1[j], cs[k], sn[k]);
                t[0] = v0[j], t[1] = v1[j];
            }
        }
    }
}

} // namespace

extern "C" int dsv4_cuda_rope_tail(dsv4_cuda_stream s, float *x, uint32_t n_rows, uint32_t n_head,
                                   uint32_t head_dim, uint32_t pos0, uint32_t pos_step, const dsv4_rope *rope,
                                   bool inverse) {
    if (!rope || rope->n_rot > head_dim || rope->n_rot % 2 || rope->n_rot > 512)
        return (int)cudaErrorInvalidValue;
    if (n_rows == 0 || n_head == 0 || rope->n_rot == 0) return 0;
    const rope_args a = rope_args_make(rope, inverse, n_head, head_dim, pos0, pos_step);
    rope_kernel<<<n_rows, 256, 0, (cudaStream_t)s>>>(x, a);
    return attn_launch_status();
}

/* kernels that wait before touching earlier kernels' memory (cuda_pdl.cuh) */
extern "C" int cu_pdl_kernels_attn_rope(const void **out) {
    out[0] = (const void *)rope_kernel;
    return 1;
}
