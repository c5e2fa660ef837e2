// Regenerates tests/fuzz/seeds/ with the GGUF writer (not built by default). The seeds have no
// .gguf extension because .gitignore ignores *.gguf outside tests/fixtures/.
//   cc -std=c11 -D_GNU_SOURCE -Isrc tests/fuzz/make_seeds.c src/gguf/*.c src/common/*.c -o /tmp/ms -lm
//   /tmp/ms tests/fuzz/seeds
// nested is assembled by hand: the writer has no API for arrays of arrays.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"

static void check(dsv4_status st, const dsv4_error *err) {
    if (st != DSV4_OK) {
        fprintf(stderr, "make_seeds: %s\n", err->msg);
        exit(1);
    }
}

static void write_seed(gguf_writer *w, const char *dir, const char *name, uint8_t **bufs, uint64_t n_bufs) {
    dsv4_error err = {0};
    for (uint64_t i = 0; i < gguf_writer_tensor_count(w); i++) {
        uint64_t nb = gguf_writer_tensor_nbytes(w, i);
        bufs[i] = malloc(nb);
        for (uint64_t j = 0; j < nb; j++) bufs[i][j] = (uint8_t)(j * 37 + i);
        check(gguf_writer_set_tensor_data(w, i, bufs[i], &err), &err);
    }
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    check(gguf_writer_write_file(w, path, &err), &err);
    for (uint64_t i = 0; i < n_bufs && i < gguf_writer_tensor_count(w); i++) free(bufs[i]);
    gguf_writer_free(w);
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : ".";
    dsv4_error err = {0};
    uint8_t *bufs[16];

    /* 1: scalars of every type + tensors of several types */
    gguf_writer *w = gguf_writer_new();
    check(gguf_writer_set_str(w, "general.architecture", "deepseek4", &err), &err);
    check(gguf_writer_set_u8(w, "s.u8", 200, &err), &err);
    check(gguf_writer_set_i8(w, "s.i8", -3, &err), &err);
    check(gguf_writer_set_u16(w, "s.u16", 60000, &err), &err);
    check(gguf_writer_set_i16(w, "s.i16", -300, &err), &err);
    check(gguf_writer_set_u32(w, "deepseek4.block_count", 2, &err), &err);
    check(gguf_writer_set_i32(w, "s.i32", -70000, &err), &err);
    check(gguf_writer_set_f32(w, "deepseek4.rope.freq_base", 10000.0f, &err), &err);
    check(gguf_writer_set_bool(w, "s.bool", true, &err), &err);
    check(gguf_writer_set_u64(w, "s.u64", 1ull << 40, &err), &err);
    check(gguf_writer_set_i64(w, "s.i64", -(1ll << 40), &err), &err);
    check(gguf_writer_set_f64(w, "s.f64", 0.1, &err), &err);
    const uint64_t ne_a[] = {8, 2}, ne_b[] = {32, 2}, ne_c[] = {256, 1}, ne_d[] = {3};
    check(gguf_writer_add_tensor(w, "blk.0.attn_norm.weight", DSV4_TYPE_F32, 2, ne_a, NULL, &err), &err);
    check(gguf_writer_add_tensor(w, "blk.0.attn_q_a.weight", DSV4_TYPE_Q8_0, 2, ne_b, NULL, &err), &err);
    check(gguf_writer_add_tensor(w, "blk.0.ffn_gate_exps.weight", DSV4_TYPE_IQ2_XXS, 2, ne_c, NULL, &err),
          &err);
    check(gguf_writer_add_tensor(w, "output_norm.weight", DSV4_TYPE_F16, 1, ne_d, NULL, &err), &err);
    write_seed(w, dir, "scalars_tensors", bufs, 16);

    /* 2: arrays of every item type, incl. a small vocabulary */
    w = gguf_writer_new();
    const uint8_t u8s[] = {1, 2, 3};
    const uint8_t bools[] = {0, 1};
    const int32_t i32s[] = {-1, 0, 7};
    const float f32s[] = {0.5f, -2.0f};
    const uint64_t u64s[] = {9, 10};
    const double f64s[] = {1.25};
    const int16_t i16s[] = {-5, 5};
    check(gguf_writer_set_arr(w, "a.u8", GGUF_VT_UINT8, u8s, 3, &err), &err);
    check(gguf_writer_set_arr(w, "a.i8", GGUF_VT_INT8, u8s, 3, &err), &err);
    check(gguf_writer_set_arr(w, "a.u16", GGUF_VT_UINT16, i16s, 2, &err), &err);
    check(gguf_writer_set_arr(w, "a.i16", GGUF_VT_INT16, i16s, 2, &err), &err);
    check(gguf_writer_set_arr(w, "a.u32", GGUF_VT_UINT32, i32s, 3, &err), &err);
    check(gguf_writer_set_arr(w, "a.i32", GGUF_VT_INT32, i32s, 3, &err), &err);
    check(gguf_writer_set_arr(w, "a.f32", GGUF_VT_FLOAT32, f32s, 2, &err), &err);
    check(gguf_writer_set_arr(w, "a.bool", GGUF_VT_BOOL, bools, 2, &err), &err);
    check(gguf_writer_set_arr(w, "a.u64", GGUF_VT_UINT64, u64s, 2, &err), &err);
    check(gguf_writer_set_arr(w, "a.i64", GGUF_VT_INT64, u64s, 2, &err), &err);
    check(gguf_writer_set_arr(w, "a.f64", GGUF_VT_FLOAT64, f64s, 1, &err), &err);
    const char *toks[] = {"<s>", "</s>", "", "a", "\xc4\xa0the", "ing", ""};
    check(gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, 7, &err), &err);
    check(gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", toks + 3, NULL, 3, &err), &err);
    const uint64_t ne_e[] = {4, 4};
    check(gguf_writer_add_tensor(w, "token_embd.weight", DSV4_TYPE_BF16, 2, ne_e, NULL, &err), &err);
    write_seed(w, dir, "arrays", bufs, 16);

    /* 3: non-default alignment, 8-dim tensor */
    w = gguf_writer_new();
    check(gguf_writer_set_alignment(w, 64, &err), &err);
    const uint64_t ne_f[] = {2, 1, 1, 1, 1, 1, 1, 2}, ne_g[] = {256};
    check(gguf_writer_add_tensor(w, "eight", DSV4_TYPE_I32, 8, ne_f, NULL, &err), &err);
    check(gguf_writer_add_tensor(w, "q2k", DSV4_TYPE_Q2_K, 1, ne_g, NULL, &err), &err);
    check(gguf_writer_add_tensor(w, "q4k", DSV4_TYPE_Q4_K, 1, ne_g, NULL, &err), &err);
    write_seed(w, dir, "align64", bufs, 16);

    /* 4: arrays of arrays (depth 3) */
    {
        uint8_t b[256];
        size_t o = 0;
#define PUT(v, n) (memcpy(b + o, &(v), n), o += n)
        uint32_t magic = GGUF_MAGIC, ver = 3, t_arr = 9, t_u16 = 2, t_str = 8;
        uint64_t nt = 0, nkv = 2, klen = 6, one = 1, two = 2, slen = 2;
        uint16_t items[2] = {7, 8};
        PUT(magic, 4), PUT(ver, 4), PUT(nt, 8), PUT(nkv, 8);
        PUT(klen, 8), memcpy(b + o, "nested", 6), o += 6, PUT(t_arr, 4);
        PUT(t_arr, 4), PUT(one, 8), PUT(t_arr, 4), PUT(two, 8);
        PUT(t_u16, 4), PUT(two, 8), PUT(items, 4), PUT(t_str, 4), PUT(one, 8), PUT(slen, 8);
        memcpy(b + o, "hi", 2), o += 2;
        PUT(klen, 8), memcpy(b + o, "after!", 6), o += 6, PUT(t_u16, 4), PUT(items, 2);
        while (o % 32) b[o++] = 0;
#undef PUT
        char path[512];
        snprintf(path, sizeof path, "%s/nested", dir);
        FILE *fp = fopen(path, "wb");
        if (!fp || fwrite(b, 1, o, fp) != o || fclose(fp) != 0) {
            fprintf(stderr, "make_seeds: cannot write %s\n", path);
            return 1;
        }
        gguf_file *f = NULL;
        check(gguf_open(path, &f, &err), &err);
        gguf_close(f);
    }

    /* 5: empty */
    w = gguf_writer_new();
    write_seed(w, dir, "empty", bufs, 16);
    return 0;
}
