/* Backend-independent helpers of the op table. */
#include "backend/backend.h"

#include <stddef.h>

void dsv4_backend_destroy(dsv4_backend *b) {
    if (!b || !b->ops) return;
    b->ops->destroy(b->ctx);
    b->ops = NULL;
    b->ctx = NULL;
}
