/* Corrupted and truncated variants of a valid GGUF image, each patched at a known field offset.
 * Every variant must be rejected with a non-empty message (naming the key or tensor where one is
 * involved) and without a crash; sanitizer builds check the "without a crash" part. */
#include "builder.h"

#include "gguf/gguf.h"

#define NK 9
#define NT 3

typedef struct layout {
    size_t n_tensors, n_kv;
    size_t key_len[NK], key[NK], type[NK], val[NK]; /* field offsets of each kv */
    size_t name_len[NT], name[NT], n_dims[NT], dims[NT], ttype[NT], toff[NT];
    size_t strs_item_len[3]; /* kv 4: string item length fields */
    size_t nested_inner_type, nested_inner_len;
    size_t data_start, min_valid_size;
} layout;

static const char *kv_names[NK] = {
    "general.architecture", "test.u32",          "test.bool", "test.arr", "test.strs",
    "test.nested",          "general.alignment", "test.barr", "test.tail"};
static const char *t_names[NT] = {"blk.0.attn_q_a.weight", "blk.0.attn_q_b.weight", "x"};

/* The base file. Tensors: t0 F32 [8,2] at rel 0 (64 B), t1 Q8_0 [32,2] at rel 64 (68 B),
 * t2 F16 [3] at rel 160 (6 B); data section padded to 192 bytes. */
static void build_base(tb *b, layout *L) {
    memset(L, 0, sizeof *L);
    tb_u32(b, 0x46554747u), tb_u32(b, 3);
    L->n_tensors = b->n, tb_u64(b, NT);
    L->n_kv = b->n, tb_u64(b, NK);
    for (int i = 0; i < NK; i++) {
        L->key_len[i] = b->n;
        L->key[i] = b->n + 8;
        tb_str(b, kv_names[i]);
        L->type[i] = b->n;
        switch (i) {
        case 0: tb_u32(b, 8), L->val[i] = b->n, tb_str(b, "deepseek4"); break;
        case 1: tb_u32(b, 4), L->val[i] = b->n, tb_u32(b, 7); break;
        case 2: tb_u32(b, 7), L->val[i] = b->n, tb_u8(b, 1); break;
        case 3: /* array i32 [1,2,3]; val = item type field */
            tb_u32(b, 9), L->val[i] = b->n, tb_u32(b, 5), tb_u64(b, 3);
            tb_u32(b, 1), tb_u32(b, 2), tb_u32(b, 3);
            break;
        case 4: /* array of strings ["a", "", "bc"] */
            tb_u32(b, 9), L->val[i] = b->n, tb_u32(b, 8), tb_u64(b, 3);
            L->strs_item_len[0] = b->n, tb_str(b, "a");
            L->strs_item_len[1] = b->n, tb_str(b, "");
            L->strs_item_len[2] = b->n, tb_str(b, "bc");
            break;
        case 5: /* array of 2 arrays: u8 [1,2], u8 [3] */
            tb_u32(b, 9), L->val[i] = b->n, tb_u32(b, 9), tb_u64(b, 2);
            L->nested_inner_type = b->n, tb_u32(b, 0);
            L->nested_inner_len = b->n, tb_u64(b, 2), tb_u8(b, 1), tb_u8(b, 2);
            tb_u32(b, 0), tb_u64(b, 1), tb_u8(b, 3);
            break;
        case 6: tb_u32(b, 4), L->val[i] = b->n, tb_u32(b, 32); break;
        case 7: /* bool array [1,0,1]; val = first item */
            tb_u32(b, 9), tb_u32(b, 7), tb_u64(b, 3), L->val[i] = b->n;
            tb_u8(b, 1), tb_u8(b, 0), tb_u8(b, 1);
            break;
        case 8: tb_u32(b, 11), L->val[i] = b->n, tb_u64(b, (uint64_t)-5); break;
        }
    }
    static const uint32_t types[NT] = {0, 8, 1}, ndims[NT] = {2, 2, 1};
    static const uint64_t ne[NT][2] = {{8, 2}, {32, 2}, {3, 1}}, rel[NT] = {0, 64, 160};
    for (int i = 0; i < NT; i++) {
        L->name_len[i] = b->n;
        L->name[i] = b->n + 8;
        tb_str(b, t_names[i]);
        L->n_dims[i] = b->n, tb_u32(b, ndims[i]);
        L->dims[i] = b->n;
        for (uint32_t d = 0; d < ndims[i]; d++) tb_u64(b, ne[i][d]);
        L->ttype[i] = b->n, tb_u32(b, types[i]);
        L->toff[i] = b->n, tb_u64(b, rel[i]);
    }
    tb_pad(b, 32);
    L->data_start = b->n;
    for (int i = 0; i < 192; i++) tb_u8(b, (uint8_t)(0xa0 + i % 7)); /* never zero: no accidental lengths */
    L->min_valid_size = L->data_start + 160 + 6;
}

enum { P8, P32, P64, TRUNC };
typedef struct variant {
    const char *desc;
    const char *expect; /* substring the message must contain (NULL: any non-empty message) */
    int kind;
    size_t off;
    uint64_t val;
    size_t off2; /* optional second u64 patch when off2 != 0 */
    uint64_t val2;
} variant;

#define MAXV 128

static int make_variants(const layout *L, size_t size, variant *v) {
    int n = 0;
#define V(d, e, k, o, x)                                                                                     \
    v[n++] = (variant) { d, e, k, o, x, 0, 0 }
#define V2(d, e, o, x, o2, x2)                                                                               \
    v[n++] = (variant) { d, e, P64, o, x, o2, x2 }
    /* header */
    V("magic byte flipped", "not a GGUF file", P8, 3, 'G');
    V("magic zero", "not a GGUF file", P32, 0, 0);
    V("version 2", "version 2", P32, 4, 2);
    V("version 1", "version 1", P32, 4, 1);
    V("version 4", "version 4", P32, 4, 4);
    V("version big-endian 3", "big-endian", P32, 4, 0x03000000u);
    V("version max", "version", P32, 4, 0xffffffffu);
    V("n_tensors max", "tensor count", P64, L->n_tensors, UINT64_MAX);
    V("n_tensors 2^40", "tensor count", P64, L->n_tensors, 1ull << 40);
    V("n_kv max", "key count", P64, L->n_kv, UINT64_MAX);
    V("n_kv 2^32", "key count", P64, L->n_kv, 1ull << 32);
    V("n_kv fits bound barely over", "key count", P64, L->n_kv, (size - 24) / 14 + 1);
    V("n_tensors one more", NULL, P64, L->n_tensors, NT + 1);
    V("n_kv one more", NULL, P64, L->n_kv, NK + 1);
    V("n_kv zero", NULL, P64, L->n_kv, 0);
    /* keys */
    V("key len max", "key #0", P64, L->key_len[0], UINT64_MAX);
    V("key len 0", "key #0: key is empty", P64, L->key_len[0], 0);
    V("key len past EOF", "key #0", P64, L->key_len[0], size);
    V("key len over limit", "limit", P64, L->key_len[0], 65537);
    V("key with NUL", "NUL", P8, L->key[1] + 2, 0);
    uint64_t test_arr;
    memcpy(&test_arr, "test.arr", 8);
    V("duplicate key", "'test.arr': duplicate key", P64, L->key[1], test_arr); /* test.u32 -> test.arr */
    V("value type 13", "'test.u32': value type 13", P32, L->type[1], 13);
    V("value type max", "'test.u32'", P32, L->type[1], 0xffffffffu);
    V("string len max", "'general.architecture'", P64, L->val[0], UINT64_MAX);
    V("string len past EOF", "'general.architecture'", P64, L->val[0], size - L->val[0] - 8 + 1);
    V("bool 2", "'test.bool': bool", P8, L->val[2], 2);
    V("bool 0xff", "'test.bool'", P8, L->val[2], 0xff);
    V("array item type 13", "'test.arr': array item type 13", P32, L->val[3], 13);
    V("array item type max", "'test.arr'", P32, L->val[3], 0xffffffffu);
    V("array len max", "'test.arr'", P64, L->val[3] + 4, UINT64_MAX);
    V("array len wraps *4", "'test.arr'", P64, L->val[3] + 4, (1ull << 62) + 1);
    V("array len 2^40", "'test.arr'", P64, L->val[3] + 4, 1ull << 40);
    V("array len one past EOF", "'test.arr'", P64, L->val[3] + 4, (size - L->val[3] - 12) / 4 + 1);
    V("string array len max", "'test.strs'", P64, L->val[4] + 4, UINT64_MAX);
    V("string array len wraps *8", "'test.strs'", P64, L->val[4] + 4, 1ull << 61);
    V("string item 0 len max", "'test.strs'", P64, L->strs_item_len[0], UINT64_MAX);
    V("string item 2 len past EOF", "'test.strs'", P64, L->strs_item_len[2], size);
    V("string item 1 len 2^63", "'test.strs'", P64, L->strs_item_len[1], 1ull << 63);
    V("nested inner item type 13", "'test.nested'", P32, L->nested_inner_type, 13);
    V("nested inner len max", "'test.nested'", P64, L->nested_inner_len, UINT64_MAX);
    V("nested outer len max", "'test.nested'", P64, L->val[5] + 4, UINT64_MAX);
    V("nested outer len 2^60", "'test.nested'", P64, L->val[5] + 4, 1ull << 60);
    V("bool array item 2", "'test.barr': bool array item 0", P8, L->val[7], 2);
    V("bool array item 0x80", "'test.barr': bool array item 2", P8, L->val[7] + 2, 0x80);
    V("alignment type i32", "'general.alignment': type is i32", P32, L->type[6], 5);
    V("alignment type f32", "'general.alignment'", P32, L->type[6], 6);
    V("alignment 0", "'general.alignment': value 0", P32, L->val[6], 0);
    V("alignment 3", "'general.alignment': value 3", P32, L->val[6], 3);
    V("alignment 48", "'general.alignment'", P32, L->val[6], 48);
    V("alignment 0x80000001", "'general.alignment'", P32, L->val[6], 0x80000001u);
    V("alignment 64 misaligns t2", "'x': offset 160", P32, L->val[6], 64);
    V("alignment 2^31 misaligns t1", "alignment 2147483648", P32, L->val[6], 0x80000000u);
    /* tensors */
    V("tensor name len 0", "tensor #0: name is empty", P64, L->name_len[0], 0);
    V("tensor name len max", "tensor #0", P64, L->name_len[0], UINT64_MAX);
    V("tensor name len over 64K", "tensor #0", P64, L->name_len[0], 65537);
    V("tensor name len past EOF", "tensor #0", P64, L->name_len[0], size - L->name[0] + 1);
    V("tensor name with NUL", "NUL", P8, L->name[0] + 3, 0);
    V("duplicate tensor name", "'blk.0.attn_q_a.weight': duplicate tensor name", P8, L->name[1] + 13, 'a');
    V("n_dims 0", "'blk.0.attn_q_a.weight': n_dims is 0", P32, L->n_dims[0], 0);
    V("n_dims 9", "'blk.0.attn_q_a.weight': n_dims is 9", P32, L->n_dims[0], 9);
    V("n_dims max", "'blk.0.attn_q_a.weight'", P32, L->n_dims[0], 0xffffffffu);
    V("n_dims 8 (reads into type/offset)", NULL, P32, L->n_dims[1], 8);
    V("dim0 zero", "'blk.0.attn_q_a.weight': dimension 0 is 0", P64, L->dims[0], 0);
    V("dim1 zero", "'blk.0.attn_q_a.weight': dimension 1 is 0", P64, L->dims[0] + 8, 0);
    V("dim over int64", "'blk.0.attn_q_a.weight'", P64, L->dims[0], 1ull << 63);
    V("dim max", "'blk.0.attn_q_a.weight'", P64, L->dims[0] + 8, UINT64_MAX);
    V("dims product overflows", "'blk.0.attn_q_a.weight': element count overflows", P64, L->dims[0] + 8,
      1ull << 61);
    V2("F32 byte size overflows", "'blk.0.attn_q_a.weight': byte size overflows", L->dims[0], 1ull << 62,
       L->dims[0] + 8, 1);
    V2("F32 rows * row bytes overflows", "'blk.0.attn_q_a.weight': byte size overflows", L->dims[0],
       1ull << 61, L->dims[0] + 8, 2);
    V2("F16 near 2^63 elements past EOF", "'x': data", L->dims[2], (1ull << 63) - 1, L->toff[2], 160);
    V("tensor data past EOF by size", "'blk.0.attn_q_a.weight': data", P64, L->dims[0] + 8, 1000);
    V("unknown type 4", "'blk.0.attn_q_a.weight': unknown tensor type id 4", P32, L->ttype[0], 4);
    V("unknown type 31", "type id 31", P32, L->ttype[0], 31);
    V("unknown type max", "type id 4294967295", P32, L->ttype[0], 0xffffffffu);
    V("ne0 16 for Q8_0", "'blk.0.attn_q_b.weight': ne[0]=16", P64, L->dims[1], 16);
    V("ne0 33 for Q8_0", "'blk.0.attn_q_b.weight'", P64, L->dims[1], 33);
    V("Q8_0 -> Q4_K with ne0 32", "Q4_K block size 256", P32, L->ttype[1], 12);
    V("ne0 3 for IQ2_XXS", "'x'", P32, L->ttype[2], 16);
    V("offset 1", "'blk.0.attn_q_a.weight': offset 1 is not a multiple", P64, L->toff[0], 1);
    V("offset 16", "offset 16", P64, L->toff[0], 16);
    V("offset at EOF", "'x': data", P64, L->toff[2], 192);
    V("offset past EOF", "'x': data", P64, L->toff[2], 1ull << 40);
    V("offset max aligned", "'x': offset 18446744073709551584 overflows", P64, L->toff[2], UINT64_MAX - 31);
    V("last tensor data past EOF", "'x': data", P64, L->dims[2], 20);
    V("first tensor grows into the next", "overlaps", P64, L->dims[0] + 8, 3);
    V("overlap t1 into t0", "overlaps", P64, L->toff[1], 32);
    V("overlap t2 onto t1", "overlaps", P64, L->toff[2], 64);
    V("overlap identical", "overlaps", P64, L->toff[1], 0);
    V("overlap t0 into t1", "overlaps", P64, L->toff[0], 96);
    /* truncation at a few field boundaries; every prefix is also tried below */
    V("truncated to 0", "too small", TRUNC, 0, 0);
    V("truncated in magic", "too small", TRUNC, 3, 0);
    V("truncated in version", "version", TRUNC, 6, 0);
    V("truncated in counts", "truncated header", TRUNC, 20, 0);
    V("truncated in key 0", "key", TRUNC, L->key[0] + 3, 0);
    V("truncated in tensor names", "tensor", TRUNC, L->name[1] + 2, 0);
    V("truncated in data", "'x': data", TRUNC, L->min_valid_size - 1, 0);
#undef V
#undef V2
    assert_true(n <= MAXV);
    return n;
}

static void apply(tb *img, const variant *v) {
    switch (v->kind) {
    case P8:
        assert_true(v->off < img->n);
        img->p[v->off] = (uint8_t)v->val;
        break;
    case P32: tb_patch_u32(img, v->off, (uint32_t)v->val); break;
    case P64: tb_patch_u64(img, v->off, v->val); break;
    case TRUNC: img->n = v->off; break;
    }
    if (v->off2) tb_patch_u64(img, v->off2, v->val2);
}

static void expect_reject(const uint8_t *p, size_t n, const char *desc, const char *expect, bool show) {
    /* a private copy of exactly n bytes, so ASan catches any read past the end */
    uint8_t *copy = malloc(n ? n : 1);
    assert_non_null(copy);
    if (n) memcpy(copy, p, n);
    dsv4_error err;
    memset(&err, 0, sizeof err);
    gguf_file *f = (gguf_file *)copy; /* must be reset to NULL */
    dsv4_status st = gguf_open_memory(copy, n, &f, &err);
    if (st == DSV4_OK) fail_msg("variant '%s' was accepted", desc);
    assert_null(f);
    if (!err.msg[0]) fail_msg("variant '%s': empty message", desc);
    if (expect && !strstr(err.msg, expect))
        fail_msg("variant '%s': message '%s' lacks '%s'", desc, err.msg, expect);
    if (show) print_message("%-36s -> %s\n", desc, err.msg);
    free(copy);
}

static void test_base_is_valid(void **state) {
    (void)state;
    tb b = {0};
    layout L;
    build_base(&b, &L);
    dsv4_error err = {0};
    gguf_file *f = NULL;
    assert_int_equal(gguf_open_memory(b.p, b.n, &f, &err), DSV4_OK);
    assert_int_equal(gguf_kv_count(f), NK);
    assert_int_equal(gguf_tensor_count(f), NT);
    assert_int_equal(gguf_data_offset(f), L.data_start);
    assert_int_equal(gguf_find_tensor(f, "x")->offset, L.data_start + 160);
    assert_int_equal(gguf_find_tensor(f, "blk.0.attn_q_b.weight")->nbytes, 68);
    assert_true(gguf_find_kv(f, "test.tail")->v.i64 == -5);
    gguf_close(f);
    /* the shortest valid prefix ends with the last tensor's last byte */
    f = NULL;
    assert_int_equal(gguf_open_memory(b.p, L.min_valid_size, &f, &err), DSV4_OK);
    gguf_close(f);
    tb_free(&b);
}

static void test_patched_variants(void **state) {
    (void)state;
    tb base = {0};
    layout L;
    build_base(&base, &L);
    variant v[MAXV];
    int n = make_variants(&L, base.n, v);
    assert_true(n >= 60);
    for (int i = 0; i < n; i++) {
        tb img = {0};
        tb_bytes(&img, base.p, base.n);
        apply(&img, &v[i]);
        expect_reject(img.p, img.n, v[i].desc, v[i].expect, true);
        tb_free(&img);
    }
    print_message("%d patched variants rejected\n", n);
    tb_free(&base);
}

/* Every strict prefix shorter than the last tensor's end must be rejected. */
static void test_every_truncation(void **state) {
    (void)state;
    tb base = {0};
    layout L;
    build_base(&base, &L);
    for (size_t cut = 0; cut < L.min_valid_size; cut++) {
        char desc[48];
        snprintf(desc, sizeof desc, "truncated to %zu bytes", cut);
        expect_reject(base.p, cut, desc, NULL, false);
    }
    tb_free(&base);
}

/* Every single byte of the header region set to 0xff: accepted or rejected, never a crash; and a
 * rejection always carries a message. */
static void test_every_byte_0xff(void **state) {
    (void)state;
    tb base = {0};
    layout L;
    build_base(&base, &L);
    int rejected = 0;
    for (size_t off = 0; off < L.data_start; off++) {
        uint8_t *copy = malloc(base.n);
        memcpy(copy, base.p, base.n);
        copy[off] = 0xff;
        dsv4_error err = {0};
        gguf_file *f = NULL;
        if (gguf_open_memory(copy, base.n, &f, &err) != DSV4_OK) {
            assert_null(f);
            assert_true(err.msg[0]);
            rejected++;
        } else {
            /* accepted: then every accessor must stay inside the image */
            for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
                const gguf_tensor *t = gguf_tensor_at(f, i);
                assert_true(t->offset + t->nbytes <= base.n);
            }
            gguf_close(f);
        }
        free(copy);
    }
    assert_true(rejected > 0);
    tb_free(&base);
}

/* Nesting deeper than 8 levels, built from the base file's shape. */
static void test_nested_depth(void **state) {
    (void)state;
    for (int depth = 9; depth <= 100; depth += 91) {
        tb b = {0};
        tb_u32(&b, 0x46554747u), tb_u32(&b, 3), tb_u64(&b, 0), tb_u64(&b, 1);
        tb_str(&b, "deep.key"), tb_u32(&b, 9);
        for (int d = 1; d < depth; d++) tb_u32(&b, 9), tb_u64(&b, 1);
        tb_u32(&b, 0), tb_u64(&b, 0);
        expect_reject(b.p, b.n, "nested arrays too deep", "'deep.key': arrays nested deeper than 8", true);
        tb_free(&b);
    }
}

/* Messages sanitize hostile names. */
static void test_message_sanitized(void **state) {
    (void)state;
    tb b = {0};
    tb_u32(&b, 0x46554747u), tb_u32(&b, 3), tb_u64(&b, 0), tb_u64(&b, 1);
    tb_u64(&b, 6), tb_bytes(&b, "a\n\x1b[2J", 6), tb_u32(&b, 13);
    dsv4_error err = {0};
    gguf_file *f = NULL;
    assert_int_equal(gguf_open_memory(b.p, b.n, &f, &err), DSV4_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "'a\\x0a\\x1b[2J'"));
    assert_null(strchr(err.msg, '\n'));
    tb_free(&b);
    /* a very long key is cut short in the message */
    tb_u32(&b, 0x46554747u), tb_u32(&b, 3), tb_u64(&b, 0), tb_u64(&b, 1);
    char key[5000];
    memset(key, 'k', sizeof key - 1);
    key[sizeof key - 1] = 0;
    tb_str(&b, key), tb_u32(&b, 77);
    assert_int_equal(gguf_open_memory(b.p, b.n, &f, &err), DSV4_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "..."));
    assert_non_null(strstr(err.msg, "value type 77"));
    tb_free(&b);
}

/* A rejected file through the mmap path names the file. */
static void test_file_path_in_message(void **state) {
    (void)state;
    tb base = {0};
    layout L;
    build_base(&base, &L);
    tb_patch_u32(&base, L.ttype[2], 99);
    char *path = tmp_path("bad.gguf");
    FILE *fp = fopen(path, "wb");
    assert_int_equal(fwrite(base.p, 1, base.n, fp), base.n);
    fclose(fp);
    dsv4_error err = {0};
    gguf_file *f = NULL;
    assert_int_equal(gguf_open(path, &f, &err), DSV4_ERR_FORMAT);
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, "tensor 'x': unknown tensor type id 99"));
    free(path);
    tb_free(&base);
}

static int teardown_all(void **state) {
    (void)state;
    tmpdir_remove();
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base_is_valid),        cmocka_unit_test(test_patched_variants),
        cmocka_unit_test(test_every_truncation),     cmocka_unit_test(test_every_byte_0xff),
        cmocka_unit_test(test_nested_depth),         cmocka_unit_test(test_message_sanitized),
        cmocka_unit_test(test_file_path_in_message),
    };
    return cmocka_run_group_tests(tests, NULL, teardown_all);
}
