/* Helpers for the engine tests: a private temp dir and tiny random models written by synth. */
#ifndef DSV4_TESTS_ENGINE_TESTUTIL_H
#define DSV4_TESTS_ENGINE_TESTUTIL_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/testutil.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/synth.h"

static char et_dir[256];
static inline const char *et_tmpdir(void) {
    if (!et_dir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(et_dir, sizeof et_dir, "%s/dsv4-engine-test-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(et_dir)) {
            et_dir[0] = 0;
            return NULL;
        }
    }
    return et_dir;
}
static inline void et_tmpdir_cleanup(void) {
    if (!et_dir[0]) return;
    DIR *d = opendir(et_dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char p[512];
            snprintf(p, sizeof p, "%s/%s", et_dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(et_dir);
    et_dir[0] = 0;
}

/* Write the tiny preset with type recipe `recipe` ("q2", "f16", ...) to <tmp>/<name>. Uses the
 * library (the same code as `dsv4-gguf synth --preset tiny --quant RECIPE --seed SEED`). */
static inline int et_synth_tiny_topk(const char *recipe, uint64_t seed, uint32_t idx_top_k, const char *name,
                                     char *path, size_t n) {
    dsv4_error err;
    dsv4_config cfg;
    if (dsv4_config_preset("tiny", &cfg, &err) != DSV4_OK) {
        fprintf(stderr, "preset: %s\n", err.msg);
        return -1;
    }
    if (idx_top_k) cfg.idx_top_k = idx_top_k;
    dsv4_synth_opts o = {.cfg = &cfg, .seed = seed, .n_threads = 1, .name = "tiny-engine-test"};
    if (!dsv4_type_recipe_named(recipe, &o.types)) {
        dsv4_config_free(&cfg);
        return -1;
    }
    snprintf(path, n, "%s/%s", et_tmpdir(), name);
    dsv4_status st = dsv4_synth_write(&o, path, NULL, &err);
    dsv4_config_free(&cfg);
    if (st != DSV4_OK) {
        fprintf(stderr, "synth: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static inline int et_synth_tiny(const char *recipe, uint64_t seed, const char *name, char *path, size_t n) {
    return et_synth_tiny_topk(recipe, seed, 0, name, path, n);
}

#endif
