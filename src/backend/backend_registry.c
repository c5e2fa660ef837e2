/* Backend creation by name and device reports. */
#include "backend/backend_registry.h"

#include <stdio.h>
#include <string.h>

dsv4_status dsv4_backend_create(const dsv4_backend_params *p, dsv4_backend *out, dsv4_error *err) {
    out->ops = NULL;
    out->ctx = NULL;
    const char *name = p && p->name ? p->name : "cpu";
    if (strcmp(name, "cpu") == 0) {
        dsv4_status st = dsv4_backend_cpu_create(p ? p->n_threads : 0, out, err);
        if (st == DSV4_OK && p) st = dsv4_backend_cpu_set_numerics(out, p->numerics, err);
        if (st != DSV4_OK) dsv4_backend_destroy(out);
        return st;
    }
    if (strcmp(name, "cuda") == 0) {
        if (!p->model)
            return dsv4_fail(err, DSV4_ERR_INVALID, "the CUDA backend needs the model at creation");
        if (p->numerics != DSV4_NUMERICS_DS4 && p->numerics != DSV4_NUMERICS_EXACT)
            return dsv4_fail(err, DSV4_ERR_INVALID, "numerics mode %d is neither ds4 (0) nor exact (1)",
                             (int)p->numerics);
        return dsv4_backend_cuda_create(p, out, err); /* takes p->numerics (EXACT: validation mode) */
    }
    return dsv4_fail(err, DSV4_ERR_INVALID, "unknown backend '%s' (expected cpu or cuda)", name);
}

dsv4_status dsv4_backend_device_info(const dsv4_backend *b, dsv4_device_info *out, dsv4_error *err) {
    memset(out, 0, sizeof *out);
    if (!b || !b->ops) return dsv4_fail(err, DSV4_ERR_INVALID, "device info: no backend");
    if (strcmp(b->ops->name, "cuda") == 0) return dsv4_backend_cuda_device_info(b, out, err);
    snprintf(out->backend, sizeof out->backend, "%s", b->ops->name);
    snprintf(out->name, sizeof out->name, "host CPU (%u threads)", dsv4_backend_cpu_threads(b));
    return DSV4_OK;
}
