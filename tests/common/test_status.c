#include "testutil.h"

#include <string.h>

#include "common/status.h"
#include "common/types.h"

static void test_fail_fills_message(void **state) {
    (void)state;
    dsv4_error e;
    dsv4_error_clear(&e);
    assert_int_equal(dsv4_fail(&e, DSV4_ERR_FORMAT, "tensor %s bad", "x"), DSV4_ERR_FORMAT);
    assert_string_equal(e.msg, "tensor x bad");
    dsv4_error_prefix(&e, "file %d: ", 3);
    assert_string_equal(e.msg, "file 3: tensor x bad");
    assert_int_equal(dsv4_fail(NULL, DSV4_ERR_IO, "ignored"), DSV4_ERR_IO);
}

static void test_type_table(void **state) {
    (void)state;
    uint64_t b = 0;
    /* Hand-derived from the ggml block layouts. */
    assert_true(dsv4_type_row_bytes(DSV4_TYPE_Q8_0, 4096, &b));
    assert_int_equal(b, 4096 / 32 * 34);
    assert_true(dsv4_type_row_bytes(DSV4_TYPE_IQ2_XXS, 4096, &b));
    assert_int_equal(b, 1056);
    assert_true(dsv4_type_row_bytes(DSV4_TYPE_Q2_K, 2048, &b));
    assert_int_equal(b, 672);
    assert_true(dsv4_type_row_bytes(DSV4_TYPE_Q4_K, 4096, &b));
    assert_int_equal(b, 2304);
    assert_false(dsv4_type_row_bytes(DSV4_TYPE_Q4_K, 100, &b));
    assert_false(dsv4_type_row_bytes(99, 100, &b));
    assert_null(dsv4_type_get(4));
    assert_string_equal(dsv4_type_name(DSV4_TYPE_IQ2_XXS), "IQ2_XXS");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fail_fills_message),
        cmocka_unit_test(test_type_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
