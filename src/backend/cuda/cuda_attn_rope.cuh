/* RoPE pieces shared by the rope op (cuda_attn_rope.cu) and the fused norm + RoPE ops
 * (cuda_attn_fused.cu): the launch arguments, the per-pair angle and the pair rotation, written
 * once so the fused kernels are bitwise the rope op by construction. Every float operation is an
 * explicit _rn intrinsic (no contraction whatever --fmad says); cos/sin are attn_cosf/attn_sinf.
 * Parity with the CPU: see cuda_attn_rope.cu. */
#ifndef DSV4_CUDA_ATTN_ROPE_CUH
#define DSV4_CUDA_ATTN_ROPE_CUH

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_attn_common.cuh"
#include "backend/cuda/cuda_pdl.cuh"

struct rope_args {
    float theta_scale, freq_scale, ext_factor, corr_lo, corr_hi, mscale, sign;
    uint32_t half, n_head, head_dim, pos0, pos_step;
    /* 1: the kernels compute the angles before waiting for the previous kernel (programmatic
     * dependent launch; they depend on the arguments only); DSV4_CUDA_ROPE_EARLY=0: after */
    uint32_t early;
};

static inline uint32_t rope_early(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("DSV4_CUDA_ROPE_EARLY");
        v = !(e && strcmp(e, "0") == 0);
    }
    return (uint32_t)v;
}

/* griddepcontrol.wait before the angles (early == 0) or after them (early == 1) */
static __device__ __forceinline__ void rope_wait_if(const rope_args &a, uint32_t early) {
    if (a.early == early) cu_pdl_wait();
}

/* The launch arguments; the running product's factor and the magnitude come from host libm, as
 * cpu_rope_thetas computes them. */
static inline rope_args rope_args_make(const dsv4_rope *rope, bool inverse, uint32_t n_head,
                                       uint32_t head_dim, uint32_t pos0, uint32_t pos_step) {
    rope_args a;
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
    a.early = rope_early();
    return a;
}

/* cos and sin (times the magnitude, sin times the sign) of pair k at position pos. */
static __device__ __forceinline__ void rope_pair_cs_sn(const rope_args &a, uint32_t pos, uint32_t k,
                                                       float *cs, float *sn) {
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
    *cs = __fmul_rn(attn_cosf(theta), a.mscale);
    *sn = __fmul_rn(__fmul_rn(a.sign, attn_sinf(theta)), a.mscale);
}

/* Rotate the pair (x0, x1) in place. */
static __device__ __forceinline__ void rope_rotate(float *x0, float *x1, float cs, float sn) {
    const float a = *x0, b = *x1;
    *x0 = __fsub_rn(__fmul_rn(a, cs), __fmul_rn(b, sn));
    *x1 = __fadd_rn(__fmul_rn(a, sn), __fmul_rn(b, cs));
}

#endif
