/* Writer argument checks and I/O failures: full devices, missing directories, a file size limit
 * hit mid-write (the temp file must not be left behind), atomic replacement. */
#include "builder.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>

#include "gguf/gguf.h"

#define OK(expr)                                                                                             \
    do {                                                                                                     \
        dsv4_status st_ = (expr);                                                                            \
        if (st_ != DSV4_OK) fail_msg("%s -> %s: %s", #expr, dsv4_status_name(st_), err.msg);                 \
    } while (0)

/* expr must fail with code and a message containing want */
#define FAILS(expr, code, want)                                                                              \
    do {                                                                                                     \
        memset(&err, 0, sizeof err);                                                                         \
        dsv4_status st_ = (expr);                                                                            \
        if (st_ != (code)) fail_msg("%s -> %s (%s)", #expr, dsv4_status_name(st_), err.msg);                 \
        if (!strstr(err.msg, (want))) fail_msg("%s: message '%s' lacks '%s'", #expr, err.msg, (want));       \
    } while (0)

static void test_key_errors(void **state) {
    (void)state;
    dsv4_error err = {0};
    gguf_writer *w = gguf_writer_new();
    OK(gguf_writer_set_u32(w, "k", 1, &err));
    FAILS(gguf_writer_set_u32(w, "k", 2, &err), DSV4_ERR_INVALID, "'k': set twice");
    FAILS(gguf_writer_set_str(w, "k", "x", &err), DSV4_ERR_INVALID, "'k': set twice");
    FAILS(gguf_writer_set_u8(w, "", 1, &err), DSV4_ERR_INVALID, "key");
    FAILS(gguf_writer_set_u8(w, NULL, 1, &err), DSV4_ERR_INVALID, "key");
    FAILS(gguf_writer_set_str(w, "s", NULL, &err), DSV4_ERR_INVALID, "'s'");
    FAILS(gguf_writer_set_arr(w, "a", GGUF_VT_STRING, "x", 1, &err), DSV4_ERR_INVALID, "'a'");
    FAILS(gguf_writer_set_arr(w, "a", GGUF_VT_ARRAY, "x", 1, &err), DSV4_ERR_INVALID, "'a'");
    FAILS(gguf_writer_set_arr(w, "a", (gguf_value_type)13, "x", 1, &err), DSV4_ERR_INVALID, "'a'");
    FAILS(gguf_writer_set_arr(w, "a", GGUF_VT_INT32, NULL, 2, &err), DSV4_ERR_INVALID, "'a'");
    const uint8_t bad_bools[] = {1, 0, 2};
    FAILS(gguf_writer_set_arr(w, "b", GGUF_VT_BOOL, bad_bools, 3, &err), DSV4_ERR_INVALID,
          "'b': bool item 2");
    const char *strs[] = {"a", NULL};
    const uint64_t lens[] = {1, 3};
    FAILS(gguf_writer_set_arr_str(w, "s", strs, lens, 2, &err), DSV4_ERR_INVALID, "'s': string item 1");
    FAILS(gguf_writer_set_arr_str(w, "s", NULL, NULL, 2, &err), DSV4_ERR_INVALID, "'s'");
    char *longkey = malloc(70000);
    memset(longkey, 'a', 69999);
    longkey[69999] = 0;
    FAILS(gguf_writer_set_u8(w, longkey, 1, &err), DSV4_ERR_INVALID, "longer than");
    free(longkey);
    /* failed calls left nothing behind: only "k" is in the file */
    assert_int_equal(gguf_writer_data_offset(w), 64); /* 24 + (8+1+4+4) = 41 -> 64 */
    gguf_writer_free(w);
}

static void test_alignment_errors(void **state) {
    (void)state;
    dsv4_error err = {0};
    gguf_writer *w = gguf_writer_new();
    FAILS(gguf_writer_set_alignment(w, 0, &err), DSV4_ERR_INVALID, "general.alignment");
    FAILS(gguf_writer_set_alignment(w, 3, &err), DSV4_ERR_INVALID, "general.alignment");
    FAILS(gguf_writer_set_alignment(w, 48, &err), DSV4_ERR_INVALID, "general.alignment");
    FAILS(gguf_writer_set_i32(w, "general.alignment", 32, &err), DSV4_ERR_INVALID, "must be u32");
    FAILS(gguf_writer_set_u64(w, "general.alignment", 32, &err), DSV4_ERR_INVALID, "must be u32");
    FAILS(gguf_writer_set_str(w, "general.alignment", "32", &err), DSV4_ERR_INVALID, "must be u32");
    FAILS(gguf_writer_set_arr(w, "general.alignment", GGUF_VT_UINT32, "\x20\0\0\0", 1, &err),
          DSV4_ERR_INVALID, "must be u32");
    OK(gguf_writer_set_alignment(w, 256, &err));
    FAILS(gguf_writer_set_alignment(w, 64, &err), DSV4_ERR_INVALID, "set twice");
    /* the failed second call did not change the alignment */
    assert_int_equal(gguf_writer_data_offset(w) % 256, 0);
    const uint64_t ne[] = {1};
    uint64_t a, b;
    OK(gguf_writer_add_tensor(w, "a", DSV4_TYPE_F32, 1, ne, &a, &err));
    OK(gguf_writer_add_tensor(w, "b", DSV4_TYPE_F32, 1, ne, &b, &err));
    assert_int_equal(gguf_writer_tensor_offset(w, b) - gguf_writer_tensor_offset(w, a), 256);
    assert_int_equal(gguf_writer_file_size(w), gguf_writer_data_offset(w) + 512);
    gguf_writer_free(w);
}

static void test_tensor_errors(void **state) {
    (void)state;
    dsv4_error err = {0};
    gguf_writer *w = gguf_writer_new();
    const uint64_t ne[] = {32, 2};
    uint64_t idx;
    OK(gguf_writer_add_tensor(w, "t", DSV4_TYPE_Q8_0, 2, ne, &idx, &err));
    FAILS(gguf_writer_add_tensor(w, "t", DSV4_TYPE_F32, 2, ne, &idx, &err), DSV4_ERR_INVALID,
          "'t': declared twice");
    FAILS(gguf_writer_add_tensor(w, "", DSV4_TYPE_F32, 2, ne, &idx, &err), DSV4_ERR_INVALID, "name");
    FAILS(gguf_writer_add_tensor(w, NULL, DSV4_TYPE_F32, 2, ne, &idx, &err), DSV4_ERR_INVALID, "name");
    FAILS(gguf_writer_add_tensor(w, "u", 4, 2, ne, &idx, &err), DSV4_ERR_INVALID,
          "'u': unknown tensor type id 4");
    FAILS(gguf_writer_add_tensor(w, "u", 31, 2, ne, &idx, &err), DSV4_ERR_INVALID, "type id 31");
    FAILS(gguf_writer_add_tensor(w, "u", DSV4_TYPE_F32, 0, ne, &idx, &err), DSV4_ERR_INVALID, "n_dims 0");
    FAILS(gguf_writer_add_tensor(w, "u", DSV4_TYPE_F32, 9, ne, &idx, &err), DSV4_ERR_INVALID, "n_dims 9");
    const uint64_t zero[] = {32, 0};
    FAILS(gguf_writer_add_tensor(w, "u", DSV4_TYPE_F32, 2, zero, &idx, &err), DSV4_ERR_INVALID,
          "dimension 1 is 0");
    const uint64_t odd[] = {48};
    FAILS(gguf_writer_add_tensor(w, "u", DSV4_TYPE_Q4_K, 1, odd, &idx, &err), DSV4_ERR_INVALID,
          "block size 256");
    const uint64_t big[] = {1ull << 40, 1ull << 40};
    FAILS(gguf_writer_add_tensor(w, "u", DSV4_TYPE_F32, 2, big, &idx, &err), DSV4_ERR_INVALID, "overflows");
    const uint64_t huge[] = {1ull << 62};
    FAILS(gguf_writer_add_tensor(w, "u", DSV4_TYPE_F32, 1, huge, &idx, &err), DSV4_ERR_INVALID, "overflows");
    FAILS(gguf_writer_set_tensor_data(w, 5, "x", &err), DSV4_ERR_INVALID, "index 5");
    FAILS(gguf_writer_set_tensor_data(w, 0, NULL, &err), DSV4_ERR_INVALID, "'t'");
    assert_int_equal(gguf_writer_tensor_count(w), 1);
    assert_int_equal(gguf_writer_tensor_nbytes(w, 0), 68);
    assert_int_equal(gguf_writer_tensor_nbytes(w, 1), 0);
    /* writing a file with a tensor that has no data fails before creating anything */
    char *path = tmp_path("nodata.gguf");
    int before = tmpdir_count();
    FAILS(gguf_writer_write_file(w, path, &err), DSV4_ERR_INVALID, "'t' has no data");
    assert_int_equal(tmpdir_count(), before);
    free(path);
    gguf_writer_free(w);
}

static gguf_writer *small_writer(uint8_t *data, size_t n) {
    dsv4_error err = {0};
    gguf_writer *w = gguf_writer_new();
    OK(gguf_writer_set_str(w, "general.name", "full", &err));
    const uint64_t ne[] = {n / 4};
    uint64_t idx;
    OK(gguf_writer_add_tensor(w, "big", DSV4_TYPE_F32, 1, ne, &idx, &err));
    for (size_t i = 0; i < n; i++) data[i] = (uint8_t)(i * 31 + 7);
    OK(gguf_writer_set_tensor_data(w, idx, data, &err));
    return w;
}

static void test_dev_full(void **state) {
    (void)state;
    int fd = open("/dev/full", O_WRONLY | O_CLOEXEC);
    if (fd < 0) skip();
    static uint8_t data[4096];
    gguf_writer *w = small_writer(data, sizeof data);
    dsv4_error err = {0};
    dsv4_status st = gguf_writer_write_header_fd(w, fd, &err);
    assert_true(st == DSV4_ERR_NOSPACE || st == DSV4_ERR_IO);
    assert_true(err.msg[0]);
    print_message("/dev/full: %s: %s\n", dsv4_status_name(st), err.msg);
    close(fd);
    FAILS(gguf_writer_write_header_fd(w, -1, &err), DSV4_ERR_INVALID, "file descriptor");
    gguf_writer_free(w);
}

static void test_missing_directory(void **state) {
    (void)state;
    static uint8_t data[64];
    gguf_writer *w = small_writer(data, sizeof data);
    dsv4_error err = {0};
    char *path = tmp_path("no/such/dir/x.gguf");
    FAILS(gguf_writer_write_file(w, path, &err), DSV4_ERR_IO, "no/such/dir/x.gguf");
    FAILS(gguf_writer_write_file(w, "", &err), DSV4_ERR_INVALID, "path");
    free(path);
    gguf_writer_free(w);
}

/* A file size limit makes a write fail part-way; the temp file must be removed and the target
 * left untouched. */
static void test_write_fails_midway(void **state) {
    (void)state;
    enum { N = 256 * 1024 };
    uint8_t *data = malloc(N);
    gguf_writer *w = small_writer(data, N);
    char *path = tmp_path("limited.gguf");
    FILE *fp = fopen(path, "wb");
    fputs("old contents", fp);
    fclose(fp);
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 64 * 1024;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    dsv4_error err = {0};
    dsv4_status st = gguf_writer_write_file(w, path, &err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    assert_true(st == DSV4_ERR_IO || st == DSV4_ERR_NOSPACE);
    assert_non_null(strstr(err.msg, "tensor 'big'"));
    print_message("size limit: %s\n", err.msg);
    assert_int_equal(tmpdir_count(), 1); /* only the old file; no temp file left */
    size_t n;
    uint8_t *got = read_whole(path, &n);
    assert_int_equal(n, 12);
    assert_memory_equal(got, "old contents", 12);
    free(got);
    /* without the limit the same writer replaces the file */
    OK(gguf_writer_write_file(w, path, &err));
    assert_int_equal(tmpdir_count(), 1);
    gguf_file *f = NULL;
    OK(gguf_open(path, &f, &err));
    assert_memory_equal(gguf_find_tensor(f, "big")->data, data, N);
    assert_true(gguf_str_eq(gguf_find_kv(f, "general.name")->v.str, "full"));
    gguf_close(f);
    unlink(path);
    free(path);
    free(data);
    gguf_writer_free(w);
}

static int teardown_all(void **state) {
    (void)state;
    tmpdir_remove();
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_errors),        cmocka_unit_test(test_alignment_errors),
        cmocka_unit_test(test_tensor_errors),     cmocka_unit_test(test_dev_full),
        cmocka_unit_test(test_missing_directory), cmocka_unit_test(test_write_fails_midway),
    };
    return cmocka_run_group_tests(tests, NULL, teardown_all);
}
