/* CPU builds: the CUDA entry points exist but refuse. CUDA builds link libcuda_backend.a first
 * (with the symbol forced undefined), so this object is never pulled from libengine.a there.
 * Keep it alone in its file and defining exactly the symbols cuda_backend.cu exports. */
#include "backend/backend_registry.h"

dsv4_status dsv4_backend_cuda_create(const dsv4_backend_params *p, dsv4_backend *out, dsv4_error *err) {
    (void)p;
    out->ops = NULL;
    out->ctx = NULL;
    return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "this build has no CUDA backend (build with make cuda)");
}

dsv4_status dsv4_backend_cuda_device_info(const dsv4_backend *b, dsv4_device_info *out, dsv4_error *err) {
    (void)b, (void)out;
    return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "this build has no CUDA backend (build with make cuda)");
}

dsv4_status dsv4_backend_cuda_set_hc_fast(const dsv4_backend *b, bool on, bool *was, dsv4_error *err) {
    (void)b, (void)on, (void)was;
    return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "this build has no CUDA backend (build with make cuda)");
}

dsv4_status dsv4_backend_cuda_set_hc_tail(const dsv4_backend *b, int mode, int *was, uint64_t *launches,
                                          dsv4_error *err) {
    (void)b, (void)mode, (void)was, (void)launches;
    return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "this build has no CUDA backend (build with make cuda)");
}

dsv4_status dsv4_backend_cuda_set_mvw_act(const dsv4_backend *b, bool fused, bool *was, dsv4_error *err) {
    (void)b, (void)fused, (void)was;
    return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "this build has no CUDA backend (build with make cuda)");
}

dsv4_status dsv4_backend_cuda_blas_calls(const dsv4_backend *b, uint64_t *calls, uint64_t *shared,
                                         bool *loaded, dsv4_error *err) {
    (void)b, (void)calls, (void)shared, (void)loaded;
    return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "this build has no CUDA backend (build with make cuda)");
}
