/* Programmatic dependent launch inside recorded decode steps (cuda_step.cu turns a kernel -> kernel
 * edge into a programmatic one when the downstream kernel is listed by cu_pdl_kernels_*).
 *
 * A listed kernel calls cu_pdl_enter() (or cu_pdl_trigger() then, after reading only weights or
 * computing from its arguments into registers and shared memory, cu_pdl_wait()) before it reads
 * anything an earlier kernel wrote or writes global memory: it may start
 * while its predecessor still runs, and griddepcontrol.wait returns once the predecessor has
 * completed and its writes are visible. Without a programmatic edge (stream launches, sm_80,
 * DSV4_CUDA_PDL=0) both instructions do nothing. The trigger lets the next kernel's blocks launch as
 * soon as every block of this one has started. */
#ifndef DSV4_CUDA_PDL_CUH
#define DSV4_CUDA_PDL_CUH

static __device__ __forceinline__ void cu_pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
static __device__ __forceinline__ void cu_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
static __device__ __forceinline__ void cu_pdl_enter() {
    cu_pdl_trigger();
    cu_pdl_wait();
}

#endif
