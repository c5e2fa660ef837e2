/* Placeholder until the warp-direct matvec lands: takes nothing, so every caller keeps its
 * current path. */
#include "backend/cuda/cuda_mvw.h"

extern "C" bool dsv4_cuda_mvw_ok(uint32_t type, const void *w, uint64_t row_bytes, int64_t in) {
    (void)type, (void)w, (void)row_bytes, (void)in;
    return false;
}

extern "C" dsv4_status dsv4_cuda_mvw(const dsv4_cuda_mvw_seg *segs, int n_segs, struct CUstream_st *stream,
                                     dsv4_error *err) {
    (void)segs, (void)n_segs, (void)stream;
    return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "mvw: not built");
}
