/* Terminal-safe model text (text/termsafe.h): hand-written inputs and the bytes expected. */
#include "common/testutil.h"

#include <string.h>

#include "text/termsafe.h"

static void expect(const char *in, size_t n, const char *want) {
    dsv4_strbuf b = {0};
    dsv4_error err = {0};
    assert_int_equal(dsv4_term_sanitize(in, n, &b, &err), DSV4_OK);
    assert_int_equal(b.len, strlen(want));
    assert_memory_equal(b.data ? b.data : "", want, strlen(want));
    dsv4_strbuf_free(&b);
}

#define R "\xEF\xBF\xBD"

static void test_plain_text_unchanged(void **state) {
    (void)state;
    expect("hello, world", 12, "hello, world");
    expect("tab\tand\nnewline", 15, "tab\tand\nnewline");
    expect("caf\xC3\xA9 \xE2\x98\x85 \xF0\x9F\x98\x80", 14, "caf\xC3\xA9 \xE2\x98\x85 \xF0\x9F\x98\x80");
    expect("\xC2\xA0nbsp", 6, "\xC2\xA0nbsp"); /* U+00A0 is not a control */
    expect("", 0, "");
}

static void test_controls_replaced(void **state) {
    (void)state;
    /* an SGR sequence, a carriage return, a bell, NUL and DEL */
    expect("\x1b[31mred\x1b[0m", 12, R "[31mred" R "[0m");
    expect("a\rb\x07"
           "c",
           5, "a" R "b" R "c");
    expect("x\0y\x7fz", 5, "x" R "y" R "z");
    /* C1 controls: U+0085 (NEL), U+009B (CSI), U+0080 */
    expect("\xC2\x85"
           "a\xC2\x9B"
           "b\xC2\x80",
           8, R "a" R "b" R);
    /* every C0 control but tab and newline */
    char in[32];
    for (int i = 0; i < 32; i++) in[i] = (char)i;
    dsv4_strbuf b = {0};
    dsv4_error err = {0};
    assert_int_equal(dsv4_term_sanitize(in, 32, &b, &err), DSV4_OK);
    assert_int_equal(b.len, 30 * 3 + 2);
    dsv4_strbuf_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_text_unchanged),
        cmocka_unit_test(test_controls_replaced),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
