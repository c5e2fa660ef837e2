/* Status codes and error messages shared by every module.
 * Functions return a dsv4_status and, on failure, fill a dsv4_error with a message that names
 * the thing that was wrong (key, tensor, file, argument). No module below app/ calls exit(). */
#ifndef DSV4_COMMON_STATUS_H
#define DSV4_COMMON_STATUS_H

#include <stdarg.h>

typedef enum dsv4_status {
    DSV4_OK = 0,
    DSV4_ERR_INVALID,     /* bad argument or malformed input */
    DSV4_ERR_FORMAT,      /* file content violates its format */
    DSV4_ERR_IO,          /* read/write/open/mmap failure */
    DSV4_ERR_NOMEM,       /* allocation failed */
    DSV4_ERR_RANGE,       /* value out of the allowed range (e.g. prompt over the context) */
    DSV4_ERR_UNSUPPORTED, /* valid but not supported by this build or path */
    DSV4_ERR_NOT_FOUND,   /* a required key/tensor/token is missing */
    DSV4_ERR_CANCELLED,   /* stopped on request */
    DSV4_ERR_NOSPACE      /* disk full */
} dsv4_status;

#define DSV4_ERROR_MSG_MAX 512

typedef struct dsv4_error {
    dsv4_status code;
    char msg[DSV4_ERROR_MSG_MAX];
} dsv4_error;

/* Record an error (err may be NULL) and return code, so callers can `return dsv4_fail(...)`. */
dsv4_status dsv4_fail(dsv4_error *err, dsv4_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
dsv4_status dsv4_vfail(dsv4_error *err, dsv4_status code, const char *fmt, va_list ap);
/* Prepend context ("while loading X: ") to an existing message. */
void dsv4_error_prefix(dsv4_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dsv4_error_clear(dsv4_error *err);
const char *dsv4_status_name(dsv4_status code);

#endif
