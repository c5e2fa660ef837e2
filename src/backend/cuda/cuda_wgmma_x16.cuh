/* Warpgroup tensor-core primitives for the exact MoE prefill products (cuda_ops_moe_x16.cu):
 * wgmma.mma_async m64nNk16 f16 x f16 -> f32 with A from registers and B from shared memory
 * (K-major, no swizzle), N = 8 NT for NT = 2, 4, 6, 8, and the fence / commit / wait around it.
 * Device code for sm_90a only: every body is empty elsewhere (the kernels that call them are
 * launched only on compute capability 9.0, where the sm_90a image runs). The bodies below were
 * written out by a short script (one operand list per N); C++ only. */
#ifndef DSV4_CUDA_WGMMA_X16_CUH
#define DSV4_CUDA_WGMMA_X16_CUH

#include <stdint.h>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define X16_WGMMA 1
#else
#define X16_WGMMA 0
#endif

/* Descriptor of a K-major B operand without swizzle at shared address `addr`: 8 x 8 core matrices
 * of 128 contiguous bytes, lbo bytes between neighbours along k, sbo along n. */
__device__ __forceinline__ uint64_t x16_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32);
}
/* The same with the 128-byte swizzle (leading offset unused: 1, as the ISA asks; sbo between
 * 8-row groups; mode 1 in bits 62-63). */
__device__ __forceinline__ uint64_t x16_desc_sw(uint32_t addr, uint32_t sbo) {
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(sbo >> 4) << 32) |
           ((uint64_t)1 << 62);
}
__device__ __forceinline__ void x16_fence(void) {
#if X16_WGMMA
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void x16_commit(void) {
#if X16_WGMMA
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N> __device__ __forceinline__ void x16_wait(void) {
#if X16_WGMMA
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
/* Shared memory written through the generic proxy (cp.async, stores) before the tensor cores
 * read it: each writing thread, before the barrier. */
__device__ __forceinline__ void x16_proxy_fence(void) {
#if X16_WGMMA
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

/* Pins the accumulator registers in place around the asynchronous products: the compiler may not
 * move a read or write of d across this point (after a wait: the results are there; before a
 * product: the inputs are). */
template <int R> __device__ __forceinline__ void x16_fence_acc(float (&d)[32]) {
#pragma unroll
    for (int i = 0; i < R; i++) asm volatile("" : "+f"(d[i])::"memory");
}
/* The same for a whole accumulator array of any size (the Q8_0 GEMM's and the routed products' sets) */
template <int R> __device__ __forceinline__ void x16_pin(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; i++) asm volatile("" : "+f"(d[i])::"memory");
}

/* d (4 NT floats: n8 chunk i in d[4i..4i+3]) = A B (+ d when acc != 0) */
template <int NT>
__device__ __forceinline__ void x16_mma(float (&d)[32], const uint32_t a0, const uint32_t a1,
                                        const uint32_t a2, const uint32_t a3, uint64_t desc, int acc);
template <>
__device__ __forceinline__ void x16_mma<2>(float (&d)[32], const uint32_t a0, const uint32_t a1,
                                           const uint32_t a2, const uint32_t a3, uint64_t desc, int acc) {
#if X16_WGMMA
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, "
                 "%9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
                   "+f"(d[7])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(acc));
#else
    (void)d, (void)a0, (void)a1, (void)a2, (void)a3, (void)desc, (void)acc;
#endif
}
template <>
__device__ __forceinline__ void x16_mma<4>(float (&d)[32], const uint32_t a0, const uint32_t a1,
                                           const uint32_t a2, const uint32_t a3, uint64_t desc, int acc) {
#if X16_WGMMA
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
                 "%9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
                   "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
                   "+f"(d[14]), "+f"(d[15])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(acc));
#else
    (void)d, (void)a0, (void)a1, (void)a2, (void)a3, (void)desc, (void)acc;
#endif
}
template <>
__device__ __forceinline__ void x16_mma<6>(float (&d)[32], const uint32_t a0, const uint32_t a1,
                                           const uint32_t a2, const uint32_t a3, uint64_t desc, int acc) {
#if X16_WGMMA
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %29, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n48k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
                 "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23}, {%24, %25, %26, "
                 "%27}, %28, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
                   "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
                   "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
                   "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(acc));
#else
    (void)d, (void)a0, (void)a1, (void)a2, (void)a3, (void)desc, (void)acc;
#endif
}
template <>
__device__ __forceinline__ void x16_mma<8>(float (&d)[32], const uint32_t a0, const uint32_t a1,
                                           const uint32_t a2, const uint32_t a3, uint64_t desc, int acc) {
#if X16_WGMMA
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
                 "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
                 "%27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
                   "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
                   "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
                   "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
                   "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(acc));
#else
    (void)d, (void)a0, (void)a1, (void)a2, (void)a3, (void)desc, (void)acc;
#endif
}
#endif
