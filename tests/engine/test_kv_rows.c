/* The KV state's row storage (graph/kv.h): in DS4 numerics raw and compressed rows are F16 and
 * indexer rows packed FP4, in EXACT (and with the kv_f32 test switch) every row is F32. Checks:
 *  - the state's size against a formula written here from the config (16-byte aligned regions);
 *  - DS4 logits with the small rows equal those with F32 rows bitwise (prefill in chunks, serial
 *    prefill and decode; past the window and with the indexer selecting, on the tiny model:
 *    ratios 0,0,4,16,4,16, window 16, top-8 from position 35);
 *  - snapshots and checkpoints of the old format (version 1: f32 rows) are refused by magic, and
 *    a snapshot of an F32-row session does not load into an F16-row one. */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine_testutil.h"

#define N_TOK 100
#define N_CTX 128

static char g_path[512];
static int32_t g_tok[N_TOK];

static uint64_t al16(uint64_t x) { return (x + 15) / 16 * 16; }

/* Bytes of the state for n_ctx tokens: f16 = DS4 storage (F16 rows, FP4 indexer rows: 17 bytes
 * per 32 elements), else every row F32. Frontiers are F32 in both. */
static uint64_t expected_bytes(const dsv4_config *c, uint32_t n_ctx, bool f16) {
    const uint64_t es = f16 ? 2 : 4, dh = c->head_dim, di = c->idx_head_dim;
    const uint64_t cap = c->n_swa < n_ctx ? c->n_swa : n_ctx;
    uint64_t total = 0;
    for (uint32_t il = 0; il < c->n_layer; il++) {
        const uint64_t r = c->compress_ratio[il];
        total += al16(cap * dh * es);
        if (r == 0) continue;
        const uint64_t rows = n_ctx / r + 2, coff = r == 4 ? 2 : 1;
        total += al16(rows * dh * es) + 2 * al16(coff * r * coff * dh * 4);
        if (r == 4) total += al16(rows * (f16 ? di / 32 * 17 : di * 4)) + 2 * al16(8 * 2 * di * 4);
    }
    return total;
}

static dsv4_engine *open_eng(dsv4_numerics nm, bool kv_f32, bool serial) {
    dsv4_engine_params p;
    dsv4_engine_params_default(&p);
    p.n_threads = 2;
    p.numerics = nm;
    p.kv_f32 = kv_f32;
    p.prefill_serial = serial;
    dsv4_engine *e = NULL;
    dsv4_error err;
    if (dsv4_engine_open(g_path, &p, &e, &err) != DSV4_OK) fail_msg("open: %s", err.msg);
    return e;
}

static int setup(void **state) {
    (void)state;
    if (et_synth_tiny("q2", 17, "tiny-kv.gguf", g_path, sizeof g_path)) return -1;
    uint64_t s = 99;
    for (int i = 0; i < N_TOK; i++) g_tok[i] = (int32_t)(test_rng_next(&s) % 1024);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    et_tmpdir_cleanup();
    return 0;
}

static void test_state_bytes(void **state) {
    (void)state;
    dsv4_error err;
    const dsv4_numerics nms[3] = {DSV4_NUMERICS_DS4, DSV4_NUMERICS_DS4, DSV4_NUMERICS_EXACT};
    const bool f32[3] = {false, true, false};
    uint64_t got[3];
    for (int k = 0; k < 3; k++) {
        dsv4_engine *e = open_eng(nms[k], f32[k], false);
        const dsv4_config *c = dsv4_engine_config(e);
        const uint32_t ctxs[3] = {1, 37, N_CTX};
        for (int j = 0; j < 3; j++) {
            dsv4_session *s;
            assert_int_equal(dsv4_session_create(e, ctxs[j], &s, &err), DSV4_OK);
            const uint64_t want = expected_bytes(c, ctxs[j], k == 0);
            if (dsv4_session_state_bytes(s) != want)
                fail_msg("numerics %d f32 %d ctx %u: %zu state bytes, expected %llu", nms[k], f32[k], ctxs[j],
                         dsv4_session_state_bytes(s), (unsigned long long)want);
            if (j == 2) got[k] = dsv4_session_state_bytes(s);
            dsv4_session_free(s);
        }
        dsv4_engine_close(e);
    }
    assert_true(got[1] == got[2]); /* forced F32 rows: the EXACT layout */
    assert_true(got[0] < got[1]);
    print_message("state bytes at %u tokens: DS4 %llu, F32 rows %llu\n", N_CTX, (unsigned long long)got[0],
                  (unsigned long long)got[1]);
}

typedef struct {
    float *out;
    uint32_t n;
} sink_t;

static void take(void *user, uint32_t pos, const float *logits, uint32_t n_vocab) {
    sink_t *s = user;
    if (pos < s->n) memcpy(s->out + (size_t)pos * n_vocab, logits, n_vocab * sizeof(float));
}

/* Logits of every position: prefill of the first n_pre tokens in chunks of `chunk`, then decode. */
static void run(dsv4_engine *e, uint32_t n_pre, uint32_t chunk, float *out) {
    dsv4_session *s;
    dsv4_error err;
    const uint32_t V = dsv4_engine_config(e)->n_vocab;
    assert_int_equal(dsv4_session_create(e, N_CTX, &s, &err), DSV4_OK);
    sink_t sk = {out, N_TOK};
    dsv4_eval_opts o = {0};
    o.chunk = chunk;
    o.on_logits = take;
    o.logits_user = &sk;
    if (dsv4_session_eval(s, g_tok, n_pre, &o, &err) != DSV4_OK) fail_msg("prefill: %s", err.msg);
    for (uint32_t i = n_pre; i < N_TOK; i++) {
        if (dsv4_session_decode(s, g_tok[i], &err) != DSV4_OK) fail_msg("decode %u: %s", i, err.msg);
        memcpy(out + (size_t)i * V, dsv4_session_logits(s), V * sizeof(float));
    }
    dsv4_session_free(s);
}

static void test_logits_bitwise_f32_rows(void **state) {
    (void)state;
    dsv4_engine *ef = open_eng(DSV4_NUMERICS_DS4, true, false);
    const uint32_t V = dsv4_engine_config(ef)->n_vocab;
    float *ref = malloc((size_t)N_TOK * V * 4), *got = malloc((size_t)N_TOK * V * 4);
    assert_non_null(ref);
    assert_non_null(got);
    run(ef, 0, 1, ref); /* F32 rows, token by token */
    dsv4_engine_close(ef);
    for (int serial = 0; serial < 2; serial++) {
        dsv4_engine *e = open_eng(DSV4_NUMERICS_DS4, false, serial);
        const uint32_t cases[3][2] = {{0, 1}, {N_TOK - 30, 16}, {N_TOK - 10, 37}};
        for (int k = 0; k < 3; k++) {
            memset(got, 0xff, (size_t)N_TOK * V * 4);
            run(e, cases[k][0], cases[k][1], got);
            if (memcmp(ref, got, (size_t)N_TOK * V * 4) != 0)
                fail_msg("serial %d, prefill %u in chunks of %u: logits differ from F32 rows", serial,
                         cases[k][0], cases[k][1]);
        }
        dsv4_engine_close(e);
    }
    free(ref), free(got);
}

static void test_old_formats_refused(void **state) {
    (void)state;
    dsv4_error err;
    dsv4_engine *e = open_eng(DSV4_NUMERICS_DS4, false, false);
    dsv4_session *s, *t;
    assert_int_equal(dsv4_session_create(e, N_CTX, &s, &err), DSV4_OK);
    assert_int_equal(dsv4_session_eval(s, g_tok, 50, NULL, &err), DSV4_OK);
    const size_t sb = dsv4_session_snapshot_bytes(s), cb = dsv4_session_checkpoint_bytes(s);
    unsigned char *snap = malloc(sb), *ck = malloc(cb);
    assert_int_equal(dsv4_session_snapshot_save(s, snap, sb, &err), DSV4_OK);
    assert_int_equal(dsv4_session_checkpoint_save(s, ck, cb, &err), DSV4_OK);
    assert_int_equal(dsv4_session_checkpoint_pos(ck, cb), 50);
    /* the current format round-trips */
    assert_int_equal(dsv4_session_create(e, N_CTX, &t, &err), DSV4_OK);
    assert_int_equal(dsv4_session_snapshot_load(t, snap, sb, &err), DSV4_OK);
    assert_int_equal(dsv4_session_decode(s, g_tok[50], &err), DSV4_OK);
    assert_int_equal(dsv4_session_decode(t, g_tok[50], &err), DSV4_OK);
    const uint32_t V = dsv4_engine_config(e)->n_vocab;
    assert_memory_equal(dsv4_session_logits(s), dsv4_session_logits(t), V * sizeof(float));
    assert_int_equal(dsv4_session_checkpoint_load(t, ck, cb, &err), DSV4_OK);
    assert_int_equal(dsv4_session_pos(t), 50);
    /* version 1 magics ("DSv4" snapshot, "DsCk" checkpoint) */
    const uint32_t v1s = 0x34765344u, v1c = 0x6b437344u;
    memcpy(snap, &v1s, 4);
    assert_int_equal(dsv4_session_snapshot_load(t, snap, sb, &err), DSV4_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "version 1"));
    memcpy(ck, &v1c, 4);
    assert_int_equal(dsv4_session_checkpoint_load(t, ck, cb, &err), DSV4_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "version 1"));
    assert_int_equal(dsv4_session_checkpoint_pos(ck, cb), UINT32_MAX);
    /* a snapshot of F32 rows does not load into F16 rows */
    dsv4_engine *ef = open_eng(DSV4_NUMERICS_DS4, true, false);
    dsv4_session *u;
    assert_int_equal(dsv4_session_create(ef, N_CTX, &u, &err), DSV4_OK);
    const size_t ub = dsv4_session_snapshot_bytes(u);
    unsigned char *us = malloc(ub);
    assert_int_equal(dsv4_session_snapshot_save(u, us, ub, &err), DSV4_OK);
    assert_int_equal(dsv4_session_snapshot_load(t, us, ub, &err), DSV4_ERR_FORMAT);
    free(us), free(snap), free(ck);
    dsv4_session_free(u), dsv4_session_free(s), dsv4_session_free(t);
    dsv4_engine_close(ef), dsv4_engine_close(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_state_bytes),
        cmocka_unit_test(test_logits_bitwise_f32_rows),
        cmocka_unit_test(test_old_formats_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
