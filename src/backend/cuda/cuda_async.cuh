/* Asynchronous-copy and hand-over primitives of the warp-specialized kernels (cuda_gemm_q8_wg.cu,
 * cuda_moe_ws.cu): cp.async into shared memory with its commit groups, mbarriers (init, arrive, wait on
 * a phase's parity) and setmaxnreg. Device code only; setmaxnreg exists for sm_90a (its body is empty
 * elsewhere, where the kernels that call it are never launched). */
#ifndef DSV4_CUDA_ASYNC_CUH
#define DSV4_CUDA_ASYNC_CUH

#include <stdint.h>

#include "backend/cuda/cuda_wgmma_x16.cuh" /* X16_WGMMA: the sm_90a feature test */

__device__ __forceinline__ void ca_cp16(uint8_t *dst, const void *src) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
}
__device__ __forceinline__ void ca_cp8(void *dst, const void *src) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(s), "l"(src) : "memory");
}
__device__ __forceinline__ void ca_cp4(void *dst, const void *src) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(src) : "memory");
}
__device__ __forceinline__ void ca_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void ca_cp_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ uint32_t ca_saddr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void ca_bar_init(uint64_t *b, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(ca_saddr(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void ca_bar_arrive(uint64_t *b) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(ca_saddr(b)) : "memory");
}
/* until the phase of parity `parity` of barrier b has completed */
__device__ __forceinline__ void ca_bar_wait(uint64_t *b, uint32_t parity) {
    asm volatile("{\n.reg .pred p;\nQW_WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra QW_WAIT;\n}\n" ::"r"(ca_saddr(b)),
                 "r"(parity)
                 : "memory");
}
/* Named barrier id (1..15; 0 is __syncthreads') over n threads, a multiple of 32 */
__device__ __forceinline__ void ca_named_sync(int id, int n) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
template <int N> __device__ __forceinline__ void ca_setmaxnreg_dec(void) {
#if X16_WGMMA
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
template <int N> __device__ __forceinline__ void ca_setmaxnreg_inc(void) {
#if X16_WGMMA
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}

#endif
