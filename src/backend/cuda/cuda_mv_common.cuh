/* Private helpers shared by the matvec and activation-quantization translation units. */
#ifndef DSV4_CUDA_MV_COMMON_CUH
#define DSV4_CUDA_MV_COMMON_CUH

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "common/types.h" /* C header without its own extern "C" */
#ifdef __cplusplus
}
#endif

/* Weight formats with a matvec kernel (also the kernel template argument). */
enum mv_format { MV_Q8_0 = 0, MV_IQ2_XXS = 1, MV_Q2_K = 2, MV_Q4_K = 3, MV_F16 = 4, MV_NONE = -1 };

static inline int mv_format_of(uint32_t type) {
    switch (type) {
    case DSV4_TYPE_Q8_0: return MV_Q8_0;
    case DSV4_TYPE_IQ2_XXS: return MV_IQ2_XXS;
    case DSV4_TYPE_Q2_K: return MV_Q2_K;
    case DSV4_TYPE_Q4_K: return MV_Q4_K;
    case DSV4_TYPE_F16: return MV_F16;
    default: return MV_NONE;
    }
}

#endif
