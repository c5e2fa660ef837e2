/* The kernels that may start before their predecessor in a recorded step has finished (they call
 * cuda_pdl.cuh's wait before touching memory an earlier kernel writes or reads); cuda_step.cu
 * makes the edges into them programmatic. Each function fills out[] (at most CU_PDL_PER_FILE
 * entries) and returns the count. */
#ifndef DSV4_CUDA_PDL_H
#define DSV4_CUDA_PDL_H

#ifdef __cplusplus
extern "C" {
#endif

#define CU_PDL_PER_FILE 32
int cu_pdl_kernels_act(const void **out);
int cu_pdl_kernels_dense(const void **out);
int cu_pdl_kernels_hc(const void **out);
int cu_pdl_kernels_attn_fused(const void **out);
int cu_pdl_kernels_attn_fast(const void **out);
int cu_pdl_kernels_attn_rope(const void **out);
int cu_pdl_kernels_moe(const void **out);
int cu_pdl_kernels_attn_kvnum(const void **out);
int cu_pdl_kernels_attn_compressor(const void **out);
int cu_pdl_kernels_attn_indexer(const void **out);
int cu_pdl_kernels_mvw(const void **out);
int cu_pdl_kernels_mv(const void **out);

#ifdef __cplusplus
}
#endif
#endif
