/* Test-only GGUF byte builder, written independently of src/gguf/writer*.c so that the writer
 * can be checked against hand-assembled bytes and files can be corrupted at known offsets. */
#ifndef DSV4_TEST_GGUF_BUILDER_H
#define DSV4_TEST_GGUF_BUILDER_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/testutil.h"

typedef struct tb {
    uint8_t *p;
    size_t n, cap;
} tb;

static inline void tb_bytes(tb *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->n + n) cap *= 2;
        b->p = realloc(b->p, cap);
        assert_non_null(b->p);
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
}
static inline void tb_u8(tb *b, uint8_t v) { tb_bytes(b, &v, 1); }
static inline void tb_u32(tb *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    tb_bytes(b, x, 4);
}
static inline void tb_u64(tb *b, uint64_t v) {
    tb_u32(b, (uint32_t)v);
    tb_u32(b, (uint32_t)(v >> 32));
}
static inline void tb_str(tb *b, const char *s) {
    tb_u64(b, strlen(s));
    tb_bytes(b, s, strlen(s));
}
static inline void tb_pad(tb *b, size_t align) {
    while (b->n % align) tb_u8(b, 0);
}
static inline void tb_free(tb *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}
static inline void tb_patch_u32(tb *b, size_t off, uint32_t v) {
    assert_true(off + 4 <= b->n);
    for (int i = 0; i < 4; i++) b->p[off + i] = (uint8_t)(v >> (8 * i));
}
static inline void tb_patch_u64(tb *b, size_t off, uint64_t v) {
    assert_true(off + 8 <= b->n);
    for (int i = 0; i < 8; i++) b->p[off + i] = (uint8_t)(v >> (8 * i));
}

/* A private temp directory per test binary; files in it are removed by tmpdir_clean. */
static inline const char *tmpdir_get(void) {
    static char dir[64];
    if (!dir[0]) {
        strcpy(dir, "/tmp/dsv4-gguf-test-XXXXXX");
        assert_non_null(mkdtemp(dir));
    }
    return dir;
}
static inline char *tmp_path(const char *name) {
    const char *d = tmpdir_get();
    char *p = malloc(strlen(d) + strlen(name) + 2);
    assert_non_null(p);
    sprintf(p, "%s/%s", d, name);
    return p;
}
/* Number of entries in the temp dir (other than . and ..). */
static inline int tmpdir_count(void) {
    DIR *d = opendir(tmpdir_get());
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}
static inline void tmpdir_clean(void) {
    DIR *d = opendir(tmpdir_get());
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char *p = tmp_path(e->d_name);
        unlink(p);
        free(p);
    }
    closedir(d);
}
static inline void tmpdir_remove(void) {
    tmpdir_clean();
    rmdir(tmpdir_get());
}
static inline uint8_t *read_whole(const char *path, size_t *n) {
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    long sz = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *p = malloc(sz ? (size_t)sz : 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)sz, fp), (size_t)sz);
    fclose(fp);
    *n = (size_t)sz;
    return p;
}

#endif
