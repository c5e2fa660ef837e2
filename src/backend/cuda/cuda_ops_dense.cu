/* Element-wise and row ops: rmsnorm (Σx² in double), add, SwiGLU, fill. Float expressions are
 * the CPU's (backend/cpu/cpu_kernels.c, cpu_dense.c), evaluated in the same order without FMA. */
#include "backend/cuda/cuda_act_quant.cuh"
#include "backend/cuda/cuda_backend.h"

#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_pdl.h"
#include "backend/cuda/cuda_smallops_units.cuh"

/* One block per row. The double sum is reduced in a fixed tree (cu_row_sumsq), so results do not
 * depend on the launch; it differs from the CPU's sequential double sum only below float
 * resolution. The loads are issued several at a time (float4 where aligned): the row is read in
 * one or two memory round trips instead of one per element. */
/* yq (VEC with w, width a multiple of 4 * RMS_THREADS: every thread in every round): the row's Q8_0
 * activation blocks too, quant_act_q8_0's bytes (cuda_act_quant.cuh; the amax an fmaxf reduction,
 * order-free): a block's 8 float4 groups are 8 consecutive threads of a warp. */
template <bool VEC>
__global__ void __launch_bounds__(RMS_THREADS)
    rms_kernel(const float *x, const float *w, uint32_t width, float eps, float *y, uint8_t *yq) {
    cu_pdl_enter();
    __shared__ double part[RMS_THREADS / 32];
    const float *xr = x + (uint64_t)blockIdx.x * width;
    float *yr = y + (uint64_t)blockIdx.x * width;
    /* the thread's first weight group is loaded before the row's sum of squares, so its latency
     * (a weight: usually not in L2) overlaps the reduction (a load only: the same values) */
    float4 w_first = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (VEC && w && threadIdx.x < width / 4) w_first = ((const float4 *)w)[threadIdx.x];
    const double tot = cu_row_sumsq(xr, width, VEC, part);
    const float s = cu_rms_inv(tot, width, eps);
    if (VEC) {
        const float4 *x4 = (const float4 *)xr;
        float4 *y4 = (float4 *)yr;
        const uint32_t groups = width / 4;
        if (w) {
            const float4 *w4 = (const float4 *)w;
#pragma unroll 4
            for (uint32_t g = threadIdx.x; g < groups; g += RMS_THREADS) {
                const float4 v = x4[g], wv = g == threadIdx.x ? w_first : w4[g];
                const float4 o = make_float4(v.x * s * wv.x, v.y * s * wv.y, v.z * s * wv.z, v.w * s * wv.w);
                y4[g] = o;
                if (yq) act_q8_0_store_group(o, g, yq + (uint64_t)blockIdx.x * (width / 32) * 36);
            }
        } else {
#pragma unroll 4
            for (uint32_t g = threadIdx.x; g < groups; g += RMS_THREADS) {
                const float4 v = x4[g];
                y4[g] = make_float4(v.x * s, v.y * s, v.z * s, v.w * s);
            }
        }
    } else if (w) {
        for (uint32_t i = threadIdx.x; i < width; i += RMS_THREADS) yr[i] = xr[i] * s * w[i];
    } else {
        for (uint32_t i = threadIdx.x; i < width; i += RMS_THREADS) yr[i] = xr[i] * s;
    }
}

dsv4_status cu_rmsnorm(void *vctx, const float *x, const dsv4_tensor *w, uint32_t n_rows, uint32_t width,
                       float eps, float *y, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    cu_preq_clear(c); /* may rewrite a row the producer-side Q8_0 record holds */
    const float *wd = NULL;
    if (w) {
        if (w->ne[0] != width)
            return dsv4_fail(err, DSV4_ERR_INVALID, "rmsnorm: weight %s has %llu values, rows have %u",
                             w->name ? w->name : "?", (unsigned long long)w->ne[0], width);
        if (w->type != DSV4_TYPE_F32)
            return dsv4_fail(err, DSV4_ERR_UNSUPPORTED,
                             "rmsnorm: weight %s has type %s (the CUDA backend reads F32)",
                             w->name ? w->name : "?", dsv4_type_name(w->type));
        if (!(wd = (const float *)cu_weight_dev(c, w, err))) return DSV4_ERR_INVALID;
    }
    /* one weighted row (the q_a norm before q_b): its Q8_0 blocks beside it for the next matmul */
    const bool vec = width % 4 == 0 && (((uintptr_t)x | (uintptr_t)y | (uintptr_t)wd) & 15) == 0;
    if (c->preq_on && n_rows == 1 && wd && vec && width % (4 * RMS_THREADS) == 0) {
        uint8_t *yq = (uint8_t *)cu_scratch(c, CU_SLOT_PREQR, (size_t)width / 32 * 36, err);
        if (!yq) return DSV4_ERR_NOMEM;
        rms_kernel<true><<<1, RMS_THREADS, 0, c->stream>>>(x, wd, width, eps, y, yq);
        const dsv4_status st = cu_launched(err, "rmsnorm (+ Q8_0)");
        if (st == DSV4_OK) cu_preq_set(c, y, width, yq);
        return st;
    }
    return cu_rms_rows(c, x, wd, n_rows, width, eps, y, err);
}

dsv4_status cu_rms_rows(cuda_ctx *c, const float *x, const float *w_dev, uint32_t n_rows, uint32_t width,
                        float eps, float *y, dsv4_error *err) {
    if (n_rows == 0 || width == 0) return DSV4_OK;
    const bool vec = width % 4 == 0 && (((uintptr_t)x | (uintptr_t)y | (uintptr_t)w_dev) & 15) == 0;
    if (vec)
        rms_kernel<true><<<n_rows, RMS_THREADS, 0, c->stream>>>(x, w_dev, width, eps, y, NULL);
    else
        rms_kernel<false><<<n_rows, RMS_THREADS, 0, c->stream>>>(x, w_dev, width, eps, y, NULL);
    return cu_launched(err, "rmsnorm");
}

__global__ void add_kernel(const float *a, const float *b, size_t n, float *out) {
    cu_pdl_enter();
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

dsv4_status cu_add(void *vctx, const float *a, const float *b, size_t n, float *out, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    if (!n) return DSV4_OK;
    add_kernel<<<cu_blocks(n, 256), 256, 0, c->stream>>>(a, b, n, out);
    return cu_launched(err, "add");
}

__global__ void swiglu_kernel(const float *g, const float *u, size_t n, float clamp, float *out) {
    cu_pdl_enter();
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float gv = g[i], uv = u[i];
    if (clamp > 1.0e-6f) {
        if (gv > clamp) gv = clamp; /* the gate is clamped from above only */
        if (uv > clamp) uv = clamp;
        if (uv < -clamp) uv = -clamp;
    }
    out[i] = cu_silu(gv) * uv;
}

dsv4_status cu_swiglu(void *vctx, const float *g, const float *u, size_t n, float clamp, float *out,
                      dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    if (!n) return DSV4_OK;
    swiglu_kernel<<<cu_blocks(n, 256), 256, 0, c->stream>>>(g, u, n, clamp, out);
    return cu_launched(err, "swiglu");
}

__global__ void fill_kernel(float *dst, float v, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = v;
}

dsv4_status cu_fill_f32(void *vctx, float *dst, float value, size_t n, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    cu_preq_clear(c); /* may rewrite a row the producer-side Q8_0 record holds */
    if (!n) return DSV4_OK;
    const size_t blocks = cu_blocks(n, 256);
    fill_kernel<<<(unsigned)(blocks < 65536 ? blocks : 65536), 256, 0, c->stream>>>(dst, value, n);
    return cu_launched(err, "fill_f32");
}

/* kernels that wait before touching earlier kernels' memory (cuda_pdl.cuh) */
extern "C" int cu_pdl_kernels_dense(const void **out) {
    out[0] = (const void *)rms_kernel<true>;
    out[1] = (const void *)rms_kernel<false>;
    out[2] = (const void *)add_kernel;
    out[3] = (const void *)swiglu_kernel;
    return 4;
}
