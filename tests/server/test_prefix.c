/* Light checkpoints and prefix reuse on the synthesized tiny model (window 16, ratios 0,0,4,16,4,16):
 * checkpoint restore + replay gives the bitwise state of an uninterrupted run, and every
 * dsv4_prefix_sync path (extend, rewind to a shorter prefix, rewind after a divergence, rebuild,
 * recovery after a cancelled prefill) leaves logits bitwise equal to a fresh evaluation of the same
 * tokens, with the counters naming the path taken. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/engine_testutil.h"
#include "session/prefix.h"

#define CTX 256

static char g_path[512];
static dsv4_engine *g_e;
static uint32_t g_vocab;

static int setup(void **state) {
    (void)state;
    if (et_synth_tiny("q2", 5, "tiny-prefix.gguf", g_path, sizeof g_path)) return -1;
    dsv4_engine_params p;
    dsv4_engine_params_default(&p);
    p.n_threads = 2;
    dsv4_error err;
    if (dsv4_engine_open(g_path, &p, &g_e, &err) != DSV4_OK) return -1;
    g_vocab = dsv4_engine_config(g_e)->n_vocab;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    dsv4_engine_close(g_e);
    et_tmpdir_cleanup();
    return 0;
}

static void random_tokens(uint64_t seed, int32_t *out, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) out[i] = 2 + (int32_t)(test_rng_next(&seed) % (g_vocab - 2));
}

/* Fresh session, evaluate tokens in one call: the independent expectation. */
static float *fresh_logits(const int32_t *t, uint32_t n) {
    dsv4_session *s;
    dsv4_error err;
    assert_int_equal(dsv4_session_create(g_e, CTX, &s, &err), DSV4_OK);
    if (dsv4_session_eval(s, t, n, NULL, &err) != DSV4_OK) fail_msg("eval: %s", err.msg);
    float *l = malloc(g_vocab * sizeof(float));
    memcpy(l, dsv4_session_logits(s), g_vocab * sizeof(float));
    dsv4_session_free(s);
    return l;
}

static void expect_fresh(dsv4_session *s, const int32_t *t, uint32_t n) {
    assert_int_equal(dsv4_session_pos(s), n);
    float *want = fresh_logits(t, n);
    assert_non_null(dsv4_session_logits(s));
    assert_memory_equal(dsv4_session_logits(s), want, g_vocab * sizeof(float));
    free(want);
}

static void test_checkpoint_restore_replay(void **state) {
    (void)state;
    int32_t t[100];
    random_tokens(1, t, 100);
    dsv4_error err;
    dsv4_session *a, *b;
    assert_int_equal(dsv4_session_create(g_e, CTX, &a, &err), DSV4_OK);
    assert_int_equal(dsv4_session_create(g_e, CTX, &b, &err), DSV4_OK);
    /* a: uninterrupted 100 tokens */
    assert_int_equal(dsv4_session_eval(a, t, 100, NULL, &err), DSV4_OK);
    /* b: 37 tokens, checkpoint, run on 60 other tokens, restore, replay the real 63 */
    assert_int_equal(dsv4_session_eval(b, t, 37, NULL, &err), DSV4_OK);
    const size_t cb = dsv4_session_checkpoint_bytes(b);
    assert_true(cb < dsv4_session_snapshot_bytes(b)); /* lighter than a full snapshot */
    void *ck = malloc(cb);
    assert_int_equal(dsv4_session_checkpoint_save(b, ck, cb, &err), DSV4_OK);
    assert_int_equal(dsv4_session_checkpoint_pos(ck, cb), 37);
    int32_t other[60];
    random_tokens(99, other, 60);
    assert_int_equal(dsv4_session_eval(b, other, 60, NULL, &err), DSV4_OK);
    assert_int_equal(dsv4_session_checkpoint_load(b, ck, cb, &err), DSV4_OK);
    assert_int_equal(dsv4_session_pos(b), 37);
    assert_int_equal(dsv4_session_eval(b, t + 37, 63, NULL, &err), DSV4_OK);
    assert_memory_equal(dsv4_session_logits(a), dsv4_session_logits(b), g_vocab * sizeof(float));
    /* the whole state, not only the logits: every live row is identical */
    const size_t sb = dsv4_session_snapshot_bytes(a);
    void *sa = malloc(sb), *sbb = malloc(sb);
    assert_int_equal(dsv4_session_snapshot_save(a, sa, sb, &err), DSV4_OK);
    assert_int_equal(dsv4_session_snapshot_save(b, sbb, sb, &err), DSV4_OK);
    assert_memory_equal(sa, sbb, sb);
    /* a checkpoint ahead of the session is refused; garbage is refused */
    dsv4_session_reset(b, &err);
    assert_int_equal(dsv4_session_checkpoint_load(b, ck, cb, &err), DSV4_ERR_INVALID);
    memset(ck, 0, 16);
    assert_int_equal(dsv4_session_checkpoint_load(b, ck, cb, &err), DSV4_ERR_FORMAT);
    assert_int_equal(dsv4_session_checkpoint_pos(ck, cb), UINT32_MAX);
    free(ck), free(sa), free(sbb);
    dsv4_session_free(a);
    dsv4_session_free(b);
}

static void test_prefix_paths(void **state) {
    (void)state;
    dsv4_error err;
    dsv4_session *s;
    assert_int_equal(dsv4_session_create(g_e, CTX, &s, &err), DSV4_OK);
    dsv4_prefix_cache c;
    assert_int_equal(dsv4_prefix_init(&c, s, 8, 6, &err), DSV4_OK);
    int32_t A[120];
    random_tokens(7, A, 120);
    dsv4_prefix_result r;

    /* cold: rebuild */
    assert_int_equal(dsv4_prefix_sync(&c, A, 40, NULL, &r, &err), DSV4_OK);
    assert_int_equal(r.kind, DSV4_PREFIX_REBUILD);
    assert_int_equal(r.evaluated, 40);
    expect_fresh(s, A, 40);
    /* extend: only the suffix is evaluated */
    assert_int_equal(dsv4_prefix_sync(&c, A, 55, NULL, &r, &err), DSV4_OK);
    assert_int_equal(r.kind, DSV4_PREFIX_EXTEND);
    assert_int_equal(r.reused, 40);
    assert_int_equal(r.evaluated, 15);
    expect_fresh(s, A, 55);
    /* decode steps extend the live tokens too */
    for (uint32_t i = 55; i < 70; i++) assert_int_equal(dsv4_prefix_decode(&c, A[i], &err), DSV4_OK);
    expect_fresh(s, A, 70);
    assert_int_equal(dsv4_prefix_sync(&c, A, 75, NULL, &r, &err), DSV4_OK);
    assert_int_equal(r.kind, DSV4_PREFIX_EXTEND);
    assert_int_equal(r.evaluated, 5);
    expect_fresh(s, A, 75);
    /* the same prompt again: nothing to evaluate */
    assert_int_equal(dsv4_prefix_sync(&c, A, 75, NULL, &r, &err), DSV4_OK);
    assert_int_equal(r.kind, DSV4_PREFIX_REWIND);
    assert_int_equal(r.evaluated, 0);
    expect_fresh(s, A, 75);
    /* a shorter exact prefix: rewind to the prompt-end checkpoint taken at 39 */
    assert_int_equal(dsv4_prefix_sync(&c, A, 40, NULL, &r, &err), DSV4_OK);
    assert_int_equal(r.kind, DSV4_PREFIX_REWIND);
    assert_int_equal(r.reused, 39);
    assert_int_equal(r.evaluated, 1);
    expect_fresh(s, A, 40);
    /* a prefix between checkpoints: the nearest surviving one below plus a replay */
    assert_int_equal(dsv4_prefix_sync(&c, A, 29, NULL, &r, &err), DSV4_OK);
    assert_int_equal(r.kind, DSV4_PREFIX_REWIND);
    assert_true(r.reused > 0 && r.reused <= 28 && r.reused % 8 == 0);
    assert_int_equal(r.evaluated, 29 - r.reused);
    expect_fresh(s, A, 29);
    /* divergence after a shared prefix: rewind to a checkpoint inside it */
    int32_t B[60];
    memcpy(B, A, 26 * sizeof *B);
    random_tokens(8, B + 26, 34);
    assert_int_equal(dsv4_prefix_sync(&c, B, 60, NULL, &r, &err), DSV4_OK);
    assert_int_equal(r.kind, DSV4_PREFIX_REWIND);
    assert_true(r.reused > 0 && r.reused <= 26);
    expect_fresh(s, B, 60);
    /* nothing in common: rebuild */
    int32_t C[30];
    random_tokens(9, C, 30);
    assert_int_equal(dsv4_prefix_sync(&c, C, 30, NULL, &r, &err), DSV4_OK);
    assert_int_equal(r.kind, DSV4_PREFIX_REBUILD);
    expect_fresh(s, C, 30);
    assert_int_equal(c.n_rebuild, 2);
    assert_int_equal(c.n_extend, 2);
    assert_int_equal(c.n_rewind, 4);
    assert_true(c.n_ck <= 6);
    assert_int_equal(dsv4_prefix_sync(&c, C, 0, NULL, &r, &err), DSV4_ERR_RANGE);
    assert_int_equal(dsv4_prefix_sync(&c, C, CTX + 1, NULL, &r, &err), DSV4_ERR_RANGE);
    dsv4_prefix_free(&c);
    dsv4_session_free(s);
}

typedef struct {
    atomic_int flag;
    uint32_t after;
} canceller;

static void cancel_progress(void *user, uint32_t done, uint32_t total) {
    (void)total;
    canceller *k = user;
    if (done >= k->after) atomic_store(&k->flag, 1);
}

static void test_prefix_cancel_recovers(void **state) {
    (void)state;
    dsv4_error err;
    dsv4_session *s;
    assert_int_equal(dsv4_session_create(g_e, CTX, &s, &err), DSV4_OK);
    dsv4_prefix_cache c;
    assert_int_equal(dsv4_prefix_init(&c, s, 16, 0, &err), DSV4_OK);
    int32_t A[100];
    random_tokens(11, A, 100);
    assert_int_equal(dsv4_prefix_sync(&c, A, 20, NULL, NULL, &err), DSV4_OK);
    /* cancel part-way through a layer-major chunk of the extension */
    canceller k = {0, 30};
    dsv4_eval_opts o = {0};
    o.chunk = 64;
    o.on_progress = cancel_progress;
    o.progress_user = &k;
    o.cancel = &k.flag;
    assert_int_equal(dsv4_prefix_sync(&c, A, 100, &o, NULL, &err), DSV4_ERR_CANCELLED);
    assert_true(c.n_live <= 100);
    dsv4_prefix_result r;
    assert_int_equal(dsv4_prefix_sync(&c, A, 100, NULL, &r, &err), DSV4_OK);
    assert_true(r.reused > 0); /* repaired from a checkpoint, not from scratch */
    expect_fresh(s, A, 100);
    dsv4_prefix_free(&c);
    dsv4_session_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checkpoint_restore_replay),
        cmocka_unit_test(test_prefix_paths),
        cmocka_unit_test(test_prefix_cancel_recovers),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
