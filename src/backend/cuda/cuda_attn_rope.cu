/* RoPE on the last n_rot dims of each head (interleaved pairs), cpu_rope_row on the device.
 *
 * Parity: theta of pair k is the CPU's running float product (k multiplications of (float)pos
 * by powf(base, -2/n_rot), that factor and the YaRN magnitude computed on the host by the same
 * libm calls), then the same ramp blend without contraction: bitwise. cos/sin are rounded
 * from double (see cuda_attn_common.cuh), so outputs match the CPU bitwise except where glibc's
 * cosf/sinf are off by an ulp (about 0.2 % of angles), then by ~1 ulp of the rotated value. */
#include <math.h>

#include "backend/cuda/cuda_attn_common.cuh"

namespace {

struct rope_args {
    float theta_scale, freq_scale, ext_factor, corr_lo, corr_hi, mscale, sign;
    uint32_t half, n_head, head_dim, pos0, pos_step;
};

/* One block per row: the pair angles first (one thread each), then every (head, pair). */
__global__ void rope_kernel(float *x, rope_args a) {
    __shared__ float cs[256], sn[256];
    const uint32_t r = blockIdx.x;
    const uint32_t pos = a.pos0 + r * a.pos_step;
    for (uint32_t k = threadIdx.x; k < a.half; k += blockDim.x) {
        float theta_extrap = (float)pos;
        for (uint32_t i = 0; i < k; i++) theta_extrap = __fmul_rn(theta_extrap, a.theta_scale);
        const float theta_interp = __fmul_rn(a.freq_scale, theta_extrap);
        float theta = theta_interp;
        if (a.ext_factor != 0.0f) {
            const float y =
                __fdiv_rn(__fsub_rn((float)k, a.corr_lo), fmaxf(0.001f, __fsub_rn(a.corr_hi, a.corr_lo)));
            const float ramp = __fsub_rn(1.0f, fminf(1.0f, fmaxf(0.0f, y)));
            const float mix = __fmul_rn(ramp, a.ext_factor);
            theta = __fadd_rn(__fmul_rn(theta_interp, __fsub_rn(1.0f, mix)), __fmul_rn(theta_extrap, mix));
        }
        cs[k] = __fmul_rn(attn_cosf(theta), a.mscale);
        sn[k] = __fmul_rn(__fmul_rn(a.sign, attn_sinf(theta)), a.mscale);
    }
    __syncthreads();
    float *row = x + (uint64_t)r * a.n_head * a.head_dim + (a.head_dim - 2 * a.half);
    const uint32_t n = a.n_head * a.half;
    for (uint32_t e = threadIdx.x; e < n; e += blockDim.x) {
        const uint32_t h = e / a.half, k = e % a.half;
        float *t = row + (uint64_t)h * a.head_dim + 2 * k;
        const float x0 = t[0], x1 = t[1];
        t[0] = __fsub_rn(__fmul_rn(x0, cs[k]), __fmul_rn(x1, sn[k]));
        t[1] = __fadd_rn(__fmul_rn(x0, sn[k]), __fmul_rn(x1, cs[k]));
    }
}

} // namespace

extern "C" int dsv4_cuda_rope_tail(dsv4_cuda_stream s, float *x, uint32_t n_rows, uint32_t n_head,
                                   uint32_t head_dim, uint32_t pos0, uint32_t pos_step, const dsv4_rope *rope,
                                   bool inverse) {
    if (!rope || rope->n_rot > head_dim || rope->n_rot % 2 || rope->n_rot > 512)
        return (int)cudaErrorInvalidValue;
    if (n_rows == 0 || n_head == 0 || rope->n_rot == 0) return 0;
    rope_args a;
    /* host libm, as cpu_rope_thetas: the factor of the running product and the magnitude */
    a.theta_scale = powf(rope->freq_base, -2.0f / (float)rope->n_rot);
    a.mscale = rope->attn_factor;
    if (rope->ext_factor != 0.0f) {
        const float l = logf(1.0f / rope->freq_scale);
        const float t = 0.1f * l;
        const float f = 1.0f + t;
        a.mscale = a.mscale * f;
    }
    a.freq_scale = rope->freq_scale;
    a.ext_factor = rope->ext_factor;
    a.corr_lo = rope->corr_lo;
    a.corr_hi = rope->corr_hi;
    a.sign = inverse ? -1.0f : 1.0f;
    a.half = rope->n_rot / 2;
    a.n_head = n_head;
    a.head_dim = head_dim;
    a.pos0 = pos0;
    a.pos_step = pos_step;
    rope_kernel<<<n_rows, 256, 0, (cudaStream_t)s>>>(x, a);
    return attn_launch_status();
}
