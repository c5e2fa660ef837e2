/* Open-addressed FNV-1a hash table from byte strings to int32 values. Keys are not copied: they
 * must outlive the table. Inserting an existing key replaces its value (the later entry wins). */
#ifndef DSV4_TEXT_STRTAB_H
#define DSV4_TEXT_STRTAB_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

typedef struct dsv4_strtab_slot {
    const char *key; /* NULL = empty */
    uint32_t len;
    int32_t value;
    uint64_t hash;
} dsv4_strtab_slot;

typedef struct dsv4_strtab {
    dsv4_strtab_slot *slots;
    size_t cap; /* power of two */
    size_t count;
} dsv4_strtab;

/* Sized for about `expected` keys (it grows if more are inserted). */
dsv4_status dsv4_strtab_init(dsv4_strtab *t, size_t expected, dsv4_error *err);
void dsv4_strtab_free(dsv4_strtab *t);
dsv4_status dsv4_strtab_put(dsv4_strtab *t, const char *key, size_t len, int32_t value, dsv4_error *err);
/* -1 if absent. */
int32_t dsv4_strtab_get(const dsv4_strtab *t, const char *key, size_t len);
/* Looks up the concatenation a + sep + b without building it (sep may be 0 bytes long). */
int32_t dsv4_strtab_get3(const dsv4_strtab *t, const char *a, size_t alen, const char *sep, size_t seplen,
                         const char *b, size_t blen);

#endif
