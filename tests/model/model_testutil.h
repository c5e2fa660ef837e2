/* Helpers shared by the model tests: a private temp directory and message checks. */
#ifndef DSV4_TESTS_MODEL_TESTUTIL_H
#define DSV4_TESTS_MODEL_TESTUTIL_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/testutil.h"

/* A fresh directory under $TMPDIR (or /tmp); removed (flat) by mt_tmpdir_cleanup. */
static char mt_dir[256];
static inline const char *mt_tmpdir(void) {
    if (!mt_dir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(mt_dir, sizeof mt_dir, "%s/dsv4-model-test-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(mt_dir)) {
            mt_dir[0] = 0;
            return NULL;
        }
    }
    return mt_dir;
}
static inline void mt_path(char *out, size_t n, const char *name) {
    snprintf(out, n, "%s/%s", mt_tmpdir(), name);
}
static inline void mt_tmpdir_cleanup(void) {
    if (!mt_dir[0]) return;
    DIR *d = opendir(mt_dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char p[512];
            snprintf(p, sizeof p, "%s/%s", mt_dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(mt_dir);
    mt_dir[0] = 0;
}

#define assert_contains(hay, needle)                                                                         \
    do {                                                                                                     \
        if (!strstr((hay), (needle))) fail_msg("expected \"%s\" in message \"%s\"", (needle), (hay));        \
    } while (0)

#endif
