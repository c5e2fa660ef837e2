#include "common/status.h"

#include <stdio.h>
#include <string.h>

dsv4_status dsv4_vfail(dsv4_error *err, dsv4_status code, const char *fmt, va_list ap) {
    if (err) {
        err->code = code;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    }
    return code;
}

dsv4_status dsv4_fail(dsv4_error *err, dsv4_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    dsv4_vfail(err, code, fmt, ap);
    va_end(ap);
    return code;
}

void dsv4_error_prefix(dsv4_error *err, const char *fmt, ...) {
    if (!err) return;
    char prefix[DSV4_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    size_t plen = strlen(prefix), olen = strlen(err->msg);
    if (plen >= sizeof err->msg) plen = sizeof err->msg - 1;
    if (plen + olen >= sizeof err->msg) olen = sizeof err->msg - 1 - plen;
    memmove(err->msg + plen, err->msg, olen);
    memcpy(err->msg, prefix, plen);
    err->msg[plen + olen] = '\0';
}

void dsv4_error_clear(dsv4_error *err) {
    if (!err) return;
    err->code = DSV4_OK;
    err->msg[0] = '\0';
}

const char *dsv4_status_name(dsv4_status code) {
    switch (code) {
    case DSV4_OK: return "ok";
    case DSV4_ERR_INVALID: return "invalid argument";
    case DSV4_ERR_FORMAT: return "format error";
    case DSV4_ERR_IO: return "I/O error";
    case DSV4_ERR_NOMEM: return "out of memory";
    case DSV4_ERR_RANGE: return "out of range";
    case DSV4_ERR_UNSUPPORTED: return "unsupported";
    case DSV4_ERR_NOT_FOUND: return "not found";
    case DSV4_ERR_CANCELLED: return "cancelled";
    case DSV4_ERR_NOSPACE: return "no space left";
    }
    return "unknown error";
}
