#ifndef DSV4_CUDA_MVW_H
#define DSV4_CUDA_MVW_H
#include <stdbool.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
#include "common/status.h"
struct CUstream_st;
typedef struct dsv4_cuda_mvw_seg {
    uint32_t type;
    const void *w;
    uint64_t row_bytes;
    int64_t in;
    int64_t rows;
    const void *x;
    float *y;
} dsv4_cuda_mvw_seg;
#define DSV4_CUDA_MVW_MAX_SEGS 8
bool dsv4_cuda_mvw_ok(uint32_t type, const void *w, uint64_t row_bytes, int64_t in);
dsv4_status dsv4_cuda_mvw(const dsv4_cuda_mvw_seg *segs, int n_segs, struct CUstream_st *stream,
                          dsv4_error *err);
#ifdef __cplusplus
}
#endif
#endif
