/* Building the tokenizer from GGUF metadata (tokenizer.ggml.tokens / tokenizer.ggml.merges). */
#include "common/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "text/tokenizer.h"
#include "text_fixture.h"

static char g_dir[64];

static const char *tmp_path(const char *name) {
    static char p[128];
    if (!g_dir[0]) {
        strcpy(g_dir, "/tmp/dsv4-text-XXXXXX");
        assert_non_null(mkdtemp(g_dir));
    }
    snprintf(p, sizeof(p), "%s/%s", g_dir, name);
    return p;
}

/* tokens: 7 specials, 256 bytes, "he", "hello"...; written with the GGUF writer. */
static void write_file(const char *path, int with_tokens, int with_merges, int tokens_wrong_type) {
    const char *toks[7 + 256 + 4];
    char bytes[256][4];
    size_t n = 0;
    for (int s = 0; s < DSV4_SPECIAL_COUNT; s++) toks[n++] = DSV4_SPECIAL_TOKENS[s];
    for (unsigned b = 0; b < 256; b++) fx_byte_token(b, bytes[b]), toks[n++] = bytes[b];
    toks[n++] = "he";
    toks[n++] = "ll";
    toks[n++] = "hell";
    toks[n++] = "hello";
    const char *merges[] = {"h e", "l l", "he ll", "hell o"};
    /* the 1-byte token for byte 0 is U+0100 (2 bytes), so NUL-terminated strings are fine */
    gguf_writer *w = gguf_writer_new();
    assert_non_null(w);
    dsv4_error err;
    assert_int_equal(gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2", &err), DSV4_OK);
    if (with_tokens && !tokens_wrong_type)
        assert_int_equal(gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, n, &err), DSV4_OK);
    if (tokens_wrong_type) {
        uint32_t x[3] = {1, 2, 3};
        assert_int_equal(gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_VT_UINT32, x, 3, &err),
                         DSV4_OK);
    }
    if (with_merges)
        assert_int_equal(gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, NULL, 4, &err), DSV4_OK);
    assert_int_equal(gguf_writer_write_file(w, path, &err), DSV4_OK);
    gguf_writer_free(w);
}

static void test_from_gguf(void **state) {
    (void)state;
    const char *path = tmp_path("tok.gguf");
    write_file(path, 1, 1, 0);
    gguf_file *f = NULL;
    dsv4_error err;
    assert_int_equal(gguf_open(path, &f, &err), DSV4_OK);
    dsv4_tokenizer *t = NULL;
    assert_int_equal(dsv4_tokenizer_from_gguf(f, &t, &err), DSV4_OK);
    gguf_close(f); /* the tokenizer copies what it needs */
    assert_int_equal(dsv4_tokenizer_n_tokens(t), 7 + 256 + 4);
    assert_int_equal(dsv4_tokenizer_n_merges(t), 4);
    dsv4_tokens out = {0};
    assert_int_equal(
        dsv4_tokenize_rendered(t, DSV4_USER_STR "hello", strlen(DSV4_USER_STR "hello"), &out, &err), DSV4_OK);
    assert_int_equal(out.n, 2);
    assert_int_equal(out.ids[0], DSV4_SPECIAL_USER);
    assert_int_equal(out.ids[1], 7 + 256 + 3);
    size_t l;
    const char *b = dsv4_token_bytes(t, 7, &l); /* byte 0 */
    assert_int_equal(l, 1);
    assert_int_equal(b[0], 0);
    dsv4_tokens_free(&out);
    dsv4_tokenizer_free(t);
    unlink(path);
}

static void test_gguf_errors(void **state) {
    (void)state;
    const char *path = tmp_path("bad.gguf");
    dsv4_error err;
    gguf_file *f = NULL;
    dsv4_tokenizer *t = NULL;

    write_file(path, 0, 1, 0);
    assert_int_equal(gguf_open(path, &f, &err), DSV4_OK);
    assert_int_equal(dsv4_tokenizer_from_gguf(f, &t, &err), DSV4_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "tokenizer.ggml.tokens"));
    assert_null(t);
    gguf_close(f);

    write_file(path, 1, 0, 0);
    assert_int_equal(gguf_open(path, &f, &err), DSV4_OK);
    assert_int_equal(dsv4_tokenizer_from_gguf(f, &t, &err), DSV4_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "tokenizer.ggml.merges"));
    gguf_close(f);

    write_file(path, 1, 1, 1);
    assert_int_equal(gguf_open(path, &f, &err), DSV4_OK);
    assert_int_equal(dsv4_tokenizer_from_gguf(f, &t, &err), DSV4_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "tokenizer.ggml.tokens"));
    gguf_close(f);
    unlink(path);
    rmdir(g_dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_from_gguf),
        cmocka_unit_test(test_gguf_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
