/* GPT-2 byte map and the official three-pass pre-tokenizer. Expected splits are derived by hand
 * from the three regexes of spec §5.2b (the reasoning is in the comments). */
#include "common/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/bytemap.h"
#include "text/pretok.h"
#include "text/utf8.h"

static void test_byte_map(void **state) {
    (void)state;
    /* hand-checked entries */
    assert_int_equal(dsv4_gpt2_byte_to_cp(' '), 0x120);  /* 'Ġ' */
    assert_int_equal(dsv4_gpt2_byte_to_cp('\n'), 0x10a); /* 'Ċ' */
    assert_int_equal(dsv4_gpt2_byte_to_cp('\t'), 0x109); /* 'ĉ' */
    assert_int_equal(dsv4_gpt2_byte_to_cp(0), 0x100);
    assert_int_equal(dsv4_gpt2_byte_to_cp('!'), '!');
    assert_int_equal(dsv4_gpt2_byte_to_cp('~'), '~');
    assert_int_equal(dsv4_gpt2_byte_to_cp(127), 0x121); /* 33 non-self bytes (0..32) come first */
    assert_int_equal(dsv4_gpt2_byte_to_cp(160), 0x142); /* 127..160 -> 0x121..0x142 */
    assert_int_equal(dsv4_gpt2_byte_to_cp(173), 0x143); /* soft hyphen is the 68th */
    assert_int_equal(dsv4_gpt2_byte_to_cp(161), 161);
    assert_int_equal(dsv4_gpt2_byte_to_cp(172), 172);
    assert_int_equal(dsv4_gpt2_byte_to_cp(174), 174);
    assert_int_equal(dsv4_gpt2_byte_to_cp(255), 255);

    /* independent reconstruction: the non-self bytes in ascending order get 256, 257, ... */
    uint32_t next = 256;
    int seen[324] = {0};
    for (int b = 0; b < 256; b++) {
        int self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        uint32_t want = self ? (uint32_t)b : next++;
        assert_int_equal(dsv4_gpt2_byte_to_cp((uint8_t)b), want);
        assert_int_equal(dsv4_gpt2_cp_to_byte(want), b); /* round trip */
        seen[want]++;
    }
    assert_int_equal(next, 256 + 68);
    for (uint32_t cp = 0; cp < 324; cp++)
        if (!seen[cp]) assert_int_equal(dsv4_gpt2_cp_to_byte(cp), -1); /* e.g. raw ' ' is unmapped */
    assert_int_equal(dsv4_gpt2_cp_to_byte(' '), -1);
    assert_int_equal(dsv4_gpt2_cp_to_byte(324), -1);
    assert_int_equal(dsv4_gpt2_cp_to_byte(0xff5c), -1);
}

static void test_utf8_validation(void **state) {
    (void)state;
    uint32_t cp = 0;
    size_t bad = 0;
    assert_int_equal(dsv4_utf8_valid_len((const uint8_t *)"\xe2\x82\xac", 3, &cp, &bad), 3);
    assert_int_equal(cp, 0x20ac);
    assert_int_equal(dsv4_utf8_valid_len((const uint8_t *)"\xe2\x82", 2, &cp, &bad), -1);
    assert_int_equal(dsv4_utf8_valid_len((const uint8_t *)"\xe2\x82"
                                                          "A",
                                         3, &cp, &bad),
                     0);
    assert_int_equal(bad, 2); /* maximal subpart: E2 82 */
    assert_int_equal(dsv4_utf8_valid_len((const uint8_t *)"\xc0\xaf", 2, &cp, &bad), 0); /* overlong */
    assert_int_equal(bad, 1);
    assert_int_equal(dsv4_utf8_valid_len((const uint8_t *)"\xed\xa0\x80", 3, &cp, &bad), 0); /* surrogate */
    assert_int_equal(bad, 1);
    assert_int_equal(dsv4_utf8_valid_len((const uint8_t *)"\xf4\x90\x80\x80", 4, &cp, &bad), 0);
    assert_int_equal(dsv4_utf8_valid_len((const uint8_t *)"\xf0\x9f\x98\x80", 4, &cp, &bad), 4);
    assert_int_equal(cp, 0x1f600);
}

typedef struct golden {
    const char *in;
    const char *pieces[24]; /* NULL-terminated */
} golden;

static const golden GOLDEN[] = {
    /* pass 1 cuts digit runs into groups of at most 3 */
    {"12345", {"123", "45", NULL}},
    /* spec self-check; " " before digits stays alone: pass 1 leaves "number: " whose trailing
     * space matches \s+(?!\S) at the end of that piece */
    {"Answer with only the number: 2048 divided by 128 is",
     {"Answer", " with", " only", " the", " number", ":", " ", "204", "8", " divided", " by", " ", "128",
      " is", NULL}},
    /* \s+(?!\S) backtracks one space so " int" can take it */
    {"    int", {"   ", " int", NULL}},
    /* \s*[\r\n]+ takes "\n\n"; then "  x": \s+(?!\S) = " ", rest " x" */
    {"\n\n  x", {"\n\n", " ", " x", NULL}},
    /* ",b": ASCII punct followed by ASCII letters */
    {"a,b", {"a", ",b", NULL}},
    {"don't", {"don", "'t", NULL}},
    {"visit example.com", {"visit", " example", ".com", NULL}},
    {" hello", {" hello", NULL}},
    /* pass 2 isolates the CJK run (Han, hiragana, katakana all inside its class) */
    {"你好世界abc", {"你好世界", "abc", NULL}},
    {"日本語のテキスト", {"日本語のテキスト", NULL}},
    {"hello世界", {"hello", "世界", NULL}},
    {"abc123def", {"abc", "123", "def", NULL}},
    /* trailing whitespace at the end of a piece: (?!\S) holds at the end */
    {"x  ", {"x", "  ", NULL}},
    /* emoji are \p{S}; ZWJ (Cf) matches no alternative and stays an unmatched piece */
    {"\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 ok",
     {"\xf0\x9f\x91\xa8", "\xe2\x80\x8d", "\xf0\x9f\x91\xa9", "\xe2\x80\x8d", "\xf0\x9f\x91\xa7", " ok",
      NULL}},
    /* " <" is ' '?[\p{P}\p{S}]+ ; ".h" is punct+letters */
    {"#include <stdio.h>", {"#include", " <", "stdio", ".h", ">", NULL}},
    {"a~b", {"a", "~b", NULL}},
    /* punct run keeps the following newlines */
    {"foo;\n\nbar", {"foo", ";\n\n", "bar", NULL}},
    {"3.14159", {"3", ".", "141", "59", NULL}},
    /* non-ASCII punctuation is \p{P}, not a letter */
    {"\xc2\xabhello\xc2\xbb", {"\xc2\xab", "hello", "\xc2\xbb", NULL}},
    {" ...", {" ...", NULL}},
    {"Hello, World!\n", {"Hello", ",", " World", "!\n", NULL}},
    /* a tab (not \r\n, L, P, S) may lead a letter run */
    {"a\tb", {"a", "\tb", NULL}},
    /* \s*[\r\n]+ backtracks \s* to leave the \n for [\r\n]+ */
    {"a\r\nb", {"a", "\r\n", "b", NULL}},
    /* pass 1 leaves "x = " and "1" */
    {"x = 1", {"x", " =", " ", "1", NULL}},
    {"\xc3\x9cn\xc3\xaf"
     "c\xc3\xb6"
     "d\xc3\xa9 w\xc3\xb6rds",
     {"\xc3\x9cn\xc3\xaf"
      "c\xc3\xb6"
      "d\xc3\xa9",
      " w\xc3\xb6rds", NULL}},
    /* fullwidth digits are \p{N} */
    {"\xef\xbc\xa1\xef\xbc\xa2\xef\xbc\xa3\xef\xbc\x91\xef\xbc\x92\xef\xbc\x93",
     {"\xef\xbc\xa1\xef\xbc\xa2\xef\xbc\xa3", "\xef\xbc\x91\xef\xbc\x92\xef\xbc\x93", NULL}},
    /* NBSP is not \r\n/L/P/S, so it leads the letter run */
    {"\xc2\xa0x", {"\xc2\xa0x", NULL}},
    {"  \n  x", {"  \n", " ", " x", NULL}},
    {"...\n\n\nabc", {"...\n\n\n", "abc", NULL}},
    {"$12.50", {"$", "12", ".", "50", NULL}},
    /* superscript two is No (\p{N}) */
    {"x\xc2\xb2", {"x", "\xc2\xb2", NULL}},
    /* Arabic-Indic digits are Nd */
    {"\xd9\xa3\xd9\xa4\xd9\xa5\xd9\xa6", {"\xd9\xa3\xd9\xa4\xd9\xa5", "\xd9\xa6", NULL}},
    /* combining marks join letter runs; a space may lead a run of marks */
    {"e\xcc\x81 \xcc\x81", {"e\xcc\x81", " \xcc\x81", NULL}},
    /* NEL (U+0085) is Cc, so it may lead a letter run like a tab */
    {"a\xc2\x85"
     "b",
     {"a",
      "\xc2\x85"
      "b",
      NULL}},
    /* invalid UTF-8 never matches: it forms its own unmatched piece */
    {"ab\xff"
     "cd",
     {"ab", "\xff", "cd", NULL}},
    {"x\xe2\x82", {"x", "\xe2\x82", NULL}},
    {"\xc3", {"\xc3", NULL}},
    {"\xed\xa0\x80z", {"\xed\xa0\x80", "z", NULL}},
};

static char *show(const char *s, size_t n) {
    static char buf[4][512];
    static int k;
    char *o = buf[k++ & 3];
    size_t j = 0;
    for (size_t i = 0; i < n && j + 5 < sizeof(buf[0]); i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 32 && c < 127)
            o[j++] = (char)c;
        else
            j += (size_t)snprintf(o + j, 5, "\\x%02x", c);
    }
    o[j] = 0;
    return o;
}

static void test_golden_splits(void **state) {
    (void)state;
    dsv4_pretok *pt = NULL;
    dsv4_error err;
    assert_int_equal(dsv4_pretok_new(&pt, &err), DSV4_OK);
    int failures = 0;
    for (size_t g = 0; g < sizeof(GOLDEN) / sizeof(GOLDEN[0]); g++) {
        const golden *G = &GOLDEN[g];
        dsv4_span *sp = NULL;
        size_t n = 0;
        assert_int_equal(dsv4_pretok_split_spans(pt, G->in, strlen(G->in), &sp, &n, &err), DSV4_OK);
        size_t want = 0;
        while (G->pieces[want]) want++;
        int ok = n == want;
        for (size_t i = 0; ok && i < n; i++)
            ok = sp[i].len == strlen(G->pieces[i]) && memcmp(G->in + sp[i].off, G->pieces[i], sp[i].len) == 0;
        if (!ok) {
            failures++;
            fprintf(stderr, "split mismatch for \"%s\": got", show(G->in, strlen(G->in)));
            for (size_t i = 0; i < n; i++) fprintf(stderr, " [%s]", show(G->in + sp[i].off, sp[i].len));
            fprintf(stderr, "\n");
        }
        free(sp);
    }
    assert_int_equal(failures, 0);
    dsv4_pretok_free(pt);
}

/* Pieces tile the input exactly, for arbitrary bytes (including invalid UTF-8 and NULs). */
static void test_pieces_tile_random_bytes(void **state) {
    (void)state;
    dsv4_pretok *pt = NULL;
    dsv4_error err;
    assert_int_equal(dsv4_pretok_new(&pt, &err), DSV4_OK);
    uint64_t seed = 7;
    static const char alphabet[][5] = {"a",
                                       "Z",
                                       " ",
                                       "\n",
                                       "\r",
                                       "\t",
                                       "1",
                                       ".",
                                       "'",
                                       "\xc3\xa9",
                                       "\xe4\xb8\xad",
                                       "\xf0\x9f\x98\x80",
                                       "\xe2\x80\x8d",
                                       "\xff",
                                       "\x80",
                                       "\xe2\x82",
                                       "~",
                                       "<"};
    for (int iter = 0; iter < 300; iter++) {
        char buf[256];
        size_t len = 0;
        size_t parts = (size_t)(test_rng_next(&seed) % 40);
        for (size_t p = 0; p < parts; p++) {
            const char *a = alphabet[test_rng_next(&seed) % (sizeof(alphabet) / sizeof(alphabet[0]))];
            size_t l = strlen(a);
            memcpy(buf + len, a, l);
            len += l;
        }
        if (iter % 7 == 0 && len) buf[len / 2] = '\0'; /* embedded NUL */
        dsv4_span *sp = NULL;
        size_t n = 0;
        assert_int_equal(dsv4_pretok_split_spans(pt, buf, len, &sp, &n, &err), DSV4_OK);
        size_t pos = 0;
        for (size_t i = 0; i < n; i++) {
            assert_int_equal(sp[i].off, pos);
            assert_true(sp[i].len > 0);
            pos += sp[i].len;
        }
        assert_int_equal(pos, len);
        free(sp);
    }
    dsv4_pretok_free(pt);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_byte_map),
        cmocka_unit_test(test_utf8_validation),
        cmocka_unit_test(test_golden_splits),
        cmocka_unit_test(test_pieces_tile_random_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
