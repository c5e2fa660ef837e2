/* Cross-tier copies: the path choice (memcpy, device, peer, host bounce). */
#include "backend/tier_copy.h"

#include <stdlib.h>
#include <string.h>

const char *dsv4_xcopy_path_name(dsv4_xcopy_path p) {
    static const char *const names[DSV4_XCOPY_PATHS] = {"memcpy", "device", "peer", "bounce"};
    return (unsigned)p < DSV4_XCOPY_PATHS ? names[p] : "?";
}

bool dsv4_backend_host_memory(const dsv4_backend *b) {
    return b && b->ops && strcmp(b->ops->name, "cpu") == 0;
}

void dsv4_bounce_free(dsv4_bounce *b) {
    if (!b || !b->p) return;
    if (b->owner && b->owner->ops->host_free)
        b->owner->ops->host_free(b->owner->ctx, b->p);
    else
        free(b->p);
    memset(b, 0, sizeof *b);
}

static dsv4_status bounce_reserve(dsv4_bounce *b, const dsv4_backend *owner, size_t bytes, dsv4_error *err) {
    if (b->p && b->bytes >= bytes && b->owner == owner) return DSV4_OK;
    dsv4_bounce_free(b);
    const size_t sz = bytes + bytes / 4 + 64;
    if (owner->ops->host_alloc) {
        dsv4_status st = owner->ops->host_alloc(owner->ctx, sz, &b->p, err);
        if (st != DSV4_OK) return st;
    } else if (!(b->p = malloc(sz))) {
        return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory for a %zu-byte tier bounce buffer", sz);
    }
    b->owner = owner;
    b->bytes = sz;
    return DSV4_OK;
}

dsv4_status dsv4_backend_copy_xdev(const dsv4_backend *dst_b, void *dst, const dsv4_backend *src_b,
                                   const void *src, size_t bytes, dsv4_bounce *bounce, bool force_bounce,
                                   dsv4_xcopy_path *path, dsv4_error *err) {
    if (bytes == 0) {
        *path = DSV4_XCOPY_MEMCPY;
        return DSV4_OK;
    }
    if (!force_bounce && dsv4_backend_host_memory(dst_b) && dsv4_backend_host_memory(src_b)) {
        memcpy(dst, src, bytes);
        *path = DSV4_XCOPY_MEMCPY;
        return DSV4_OK;
    }
    if (!force_bounce && dst_b->ops->copy_from) {
        int p = DSV4_XCOPY_DEVICE;
        dsv4_status st = dst_b->ops->copy_from(dst_b->ctx, dst, src_b, src, bytes, true, &p, err);
        if (st == DSV4_OK) {
            *path = (dsv4_xcopy_path)p;
            return DSV4_OK;
        }
        if (st != DSV4_ERR_UNSUPPORTED) return st;
        dsv4_error_clear(err);
    }
    /* host bounce: pinned memory of the device side when there is one */
    const dsv4_backend *owner = dst_b->ops->host_alloc ? dst_b : src_b;
    dsv4_status st = bounce_reserve(bounce, owner, bytes, err);
    /* each side's transfer runs with its own device current */
    if (st == DSV4_OK && src_b->ops->activate) st = src_b->ops->activate(src_b->ctx, err);
    if (st == DSV4_OK) st = src_b->ops->sync(src_b->ctx, err);
    if (st == DSV4_OK) st = src_b->ops->read(src_b->ctx, bounce->p, src, bytes, err);
    if (st == DSV4_OK && dst_b->ops->activate) st = dst_b->ops->activate(dst_b->ctx, err);
    if (st == DSV4_OK) st = dst_b->ops->write(dst_b->ctx, dst, bounce->p, bytes, err);
    if (st != DSV4_OK) {
        dsv4_error_prefix(err, "tier copy of %zu bytes (host bounce): ", bytes);
        return st;
    }
    *path = DSV4_XCOPY_BOUNCE;
    return DSV4_OK;
}
