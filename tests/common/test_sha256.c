/* The tests' SHA-256 against the FIPS 180-4 / NIST example digests (empty, "abc", the two-block
 * 448-bit message, one million 'a' fed in uneven pieces) and the padding boundary lengths. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/t_sha256.h"
#include "common/testutil.h"

static void digest(const char *msg, char out[65]) {
    t_sha256 s;
    t_sha256_init(&s);
    t_sha256_update(&s, msg, strlen(msg));
    t_sha256_hex(&s, out);
}

static void test_fips_vectors(void **state) {
    (void)state;
    char h[65];
    digest("", h);
    assert_string_equal(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    digest("abc", h);
    assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    digest("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", h);
    assert_string_equal(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

static void test_million_a_in_pieces(void **state) {
    (void)state;
    char *a = malloc(1000000);
    assert_non_null(a);
    memset(a, 'a', 1000000);
    t_sha256 s;
    t_sha256_init(&s);
    size_t done = 0, step = 1;
    while (done < 1000000) { /* piece sizes 1, 2, ... cross every block offset */
        size_t n = step < 1000000 - done ? step : 1000000 - done;
        t_sha256_update(&s, a + done, n);
        done += n, step = step % 97 + 1;
    }
    char h[65];
    t_sha256_hex(&s, h);
    assert_string_equal(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(a);
}

static void test_same_digest_file_and_memory(void **state) {
    (void)state;
    /* lengths around the 55/56/64-byte padding boundaries: file digest == one-shot digest */
    char path[] = "/tmp/dsv4-sha-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char msg[130];
    for (size_t len = 50; len < 130; len++) {
        for (size_t i = 0; i < len; i++) msg[i] = (char)('A' + (i * 7 + len) % 26);
        msg[len] = 0;
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(msg, 1, len, f), len);
        fclose(f);
        char h1[65], h2[65];
        digest(msg, h1);
        assert_int_equal(t_sha256_file(path, h2), 0);
        assert_string_equal(h1, h2);
    }
    unlink(path);
    char h[65];
    assert_int_equal(t_sha256_file("/nonexistent/dsv4-sha", h), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fips_vectors),
        cmocka_unit_test(test_million_a_in_pieces),
        cmocka_unit_test(test_same_digest_file_and_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
