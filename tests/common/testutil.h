/* Shared helpers for cmocka tests. */
#ifndef DSV4_TESTUTIL_H
#define DSV4_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs the headers above first: keep it in its own block (clang-format sorts per block) */
#include <cmocka.h>

/* Directory for temporary files of one test binary (created on first use). */
const char *test_tmpdir(void);

/* Fixed-seed generator for test data (splitmix64), independent of any code under test. */
static inline uint64_t test_rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static inline double test_rng_uniform(uint64_t *s) {
    return (test_rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

#endif
