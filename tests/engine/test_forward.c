/* Whole-model tests on the synthesized tiny model (6 layers, ratios 0,0,4,16,4,16, window 16,
 * indexer top-8): prefill with any chunk size equals token-by-token decode bitwise over 130
 * tokens (past the window, many compressed rows, indexer selection active from position 35),
 * thread counts do not change logits, context overflow is a range error, snapshots restore
 * exactly, cancellation leaves a usable or clearly broken session. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine_testutil.h"

#define N_TOK 130

static char g_q2[512], g_f16[512];
static int32_t g_tokens[N_TOK];
static float *g_ref; /* N_TOK x vocab: decode logits of the q2 model, 1 thread */
static uint32_t g_vocab;

typedef struct {
    float *out;
    uint32_t n;
    uint32_t calls;
} collect;

static void on_logits(void *user, uint32_t pos, const float *logits, uint32_t n_vocab) {
    collect *c = user;
    c->calls++;
    if (pos < c->n) memcpy(c->out + (size_t)pos * n_vocab, logits, n_vocab * sizeof(float));
}

static dsv4_engine *open_engine(const char *path, uint32_t threads) {
    dsv4_engine_params p;
    dsv4_engine_params_default(&p);
    p.n_threads = threads;
    dsv4_engine *e = NULL;
    dsv4_error err;
    if (dsv4_engine_open(path, &p, &e, &err) != DSV4_OK) fail_msg("engine open %s: %s", path, err.msg);
    return e;
}

/* Decode token by token, collecting the logits of every position. */
static void decode_all(dsv4_engine *e, float *out) {
    dsv4_session *s;
    dsv4_error err;
    assert_int_equal(dsv4_session_create(e, 256, &s, &err), DSV4_OK);
    for (uint32_t i = 0; i < N_TOK; i++) {
        if (dsv4_session_decode(s, g_tokens[i], &err) != DSV4_OK) fail_msg("decode %u: %s", i, err.msg);
        memcpy(out + (size_t)i * g_vocab, dsv4_session_logits(s), g_vocab * sizeof(float));
    }
    assert_int_equal(dsv4_session_pos(s), N_TOK);
    dsv4_session_free(s);
}

static int setup(void **state) {
    (void)state;
    if (et_synth_tiny("q2", 7, "tiny-q2.gguf", g_q2, sizeof g_q2)) return -1;
    if (et_synth_tiny("f16", 7, "tiny-f16.gguf", g_f16, sizeof g_f16)) return -1;
    uint64_t r = 12345;
    for (int i = 0; i < N_TOK; i++) g_tokens[i] = (int32_t)(test_rng_next(&r) % 1024);
    dsv4_engine *e = open_engine(g_q2, 1);
    g_vocab = dsv4_engine_config(e)->n_vocab;
    g_ref = malloc((size_t)N_TOK * g_vocab * sizeof(float));
    decode_all(e, g_ref);
    dsv4_engine_close(e);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    free(g_ref);
    et_tmpdir_cleanup();
    return 0;
}

static void test_decode_logits_sane(void **state) {
    (void)state;
    /* finite, not constant within a position, and different between positions */
    for (uint32_t i = 0; i < N_TOK; i++) {
        const float *l = g_ref + (size_t)i * g_vocab;
        double mn = l[0], mx = l[0];
        for (uint32_t j = 0; j < g_vocab; j++) {
            assert_true(isfinite(l[j]));
            if (l[j] < mn) mn = l[j];
            if (l[j] > mx) mx = l[j];
        }
        assert_true(mx - mn > 0.1);
        if (i > 0) assert_memory_not_equal(l, l - g_vocab, g_vocab * sizeof(float));
    }
}

static void check_prefill(uint32_t chunk, uint32_t threads) {
    dsv4_engine *e = open_engine(g_q2, threads);
    float *got = calloc((size_t)N_TOK * g_vocab, sizeof(float));
    collect c = {got, N_TOK, 0};
    dsv4_session *s;
    dsv4_error err;
    assert_int_equal(dsv4_session_create(e, 256, &s, &err), DSV4_OK);
    dsv4_eval_opts o = {.chunk = chunk, .on_logits = on_logits, .logits_user = &c};
    if (dsv4_session_eval(s, g_tokens, N_TOK, &o, &err) != DSV4_OK)
        fail_msg("prefill chunk %u: %s", chunk, err.msg);
    assert_int_equal(c.calls, N_TOK);
    for (uint32_t i = 0; i < N_TOK; i++)
        if (memcmp(got + (size_t)i * g_vocab, g_ref + (size_t)i * g_vocab, g_vocab * sizeof(float)))
            fail_msg("chunk %u threads %u: logits of position %u differ from decode", chunk, threads, i);
    assert_memory_equal(dsv4_session_logits(s), g_ref + (size_t)(N_TOK - 1) * g_vocab,
                        g_vocab * sizeof(float));
    /* decode continues from the prefilled state exactly as from the decoded one */
    assert_int_equal(dsv4_session_decode(s, 3, &err), DSV4_OK);
    dsv4_session_free(s);
    free(got);
    dsv4_engine_close(e);
}

static void test_prefill_chunk1_equals_decode(void **state) {
    (void)state;
    check_prefill(1, 1);
}
static void test_prefill_chunk7_equals_decode(void **state) {
    (void)state;
    check_prefill(7, 1);
}
static void test_prefill_chunk64_equals_decode(void **state) {
    (void)state;
    check_prefill(64, 2);
}
static void test_prefill_whole_equals_decode(void **state) {
    (void)state;
    check_prefill(0, 1);
    check_prefill(N_TOK, 2);
}

static void test_threads_bitwise_equal(void **state) {
    (void)state;
    dsv4_engine *e = open_engine(g_q2, 2);
    assert_int_equal(dsv4_engine_threads(e), 2);
    float *got = malloc((size_t)N_TOK * g_vocab * sizeof(float));
    decode_all(e, got);
    assert_memory_equal(got, g_ref, (size_t)N_TOK * g_vocab * sizeof(float));
    free(got);
    dsv4_engine_close(e);
}

static void test_eval_all_logits_helper(void **state) {
    (void)state;
    dsv4_engine *e = open_engine(g_q2, 0);
    float *got = malloc((size_t)N_TOK * g_vocab * sizeof(float));
    dsv4_error err;
    assert_int_equal(dsv4_eval_all_logits(e, g_tokens, N_TOK, 0, 32, got, &err), DSV4_OK);
    assert_memory_equal(got, g_ref, (size_t)N_TOK * g_vocab * sizeof(float));
    free(got);
    dsv4_engine_close(e);
}

static void test_prompt_over_context(void **state) {
    (void)state;
    dsv4_engine *e = open_engine(g_q2, 1);
    dsv4_session *s;
    dsv4_error err;
    assert_int_equal(dsv4_session_create(e, 40, &s, &err), DSV4_OK);
    assert_int_equal(dsv4_session_eval(s, g_tokens, 41, NULL, &err), DSV4_ERR_RANGE);
    assert_non_null(strstr(err.msg, "context"));
    assert_int_equal(dsv4_session_pos(s), 0);
    assert_null(dsv4_session_logits(s));
    /* the session is untouched: filling it exactly still works and matches decode */
    assert_int_equal(dsv4_session_eval(s, g_tokens, 40, NULL, &err), DSV4_OK);
    assert_memory_equal(dsv4_session_logits(s), g_ref + (size_t)39 * g_vocab, g_vocab * sizeof(float));
    assert_int_equal(dsv4_session_decode(s, 1, &err), DSV4_ERR_RANGE);
    /* out-of-vocabulary token */
    assert_int_equal(dsv4_session_reset(s, &err), DSV4_OK);
    int32_t bad = 1024;
    assert_int_equal(dsv4_session_eval(s, &bad, 1, NULL, &err), DSV4_ERR_RANGE);
    dsv4_session_free(s);
    dsv4_engine_close(e);
}

static void test_snapshot_restore(void **state) {
    (void)state;
    dsv4_engine *e = open_engine(g_q2, 1);
    dsv4_session *s;
    dsv4_error err;
    assert_int_equal(dsv4_session_create(e, 256, &s, &err), DSV4_OK);
    assert_int_equal(dsv4_session_eval(s, g_tokens, 61, NULL, &err), DSV4_OK);
    size_t nb = dsv4_session_snapshot_bytes(s);
    void *snap = malloc(nb);
    assert_int_equal(dsv4_session_snapshot_save(s, snap, nb, &err), DSV4_OK);
    /* run on, then restore and replay: identical to the uninterrupted decode */
    assert_int_equal(dsv4_session_eval(s, g_tokens + 61, 20, NULL, &err), DSV4_OK);
    assert_int_equal(dsv4_session_reset(s, &err), DSV4_OK);
    assert_int_equal(dsv4_session_snapshot_load(s, snap, nb, &err), DSV4_OK);
    assert_int_equal(dsv4_session_pos(s), 61);
    assert_memory_equal(dsv4_session_logits(s), g_ref + (size_t)60 * g_vocab, g_vocab * sizeof(float));
    for (uint32_t i = 61; i < 81; i++) {
        assert_int_equal(dsv4_session_decode(s, g_tokens[i], &err), DSV4_OK);
        assert_memory_equal(dsv4_session_logits(s), g_ref + (size_t)i * g_vocab, g_vocab * sizeof(float));
    }
    free(snap);
    dsv4_session_free(s);
    dsv4_engine_close(e);
}

typedef struct {
    atomic_int *flag;
    uint32_t calls, last_done, total;
} progress;

static void on_progress(void *user, uint32_t done, uint32_t total) {
    progress *p = user;
    p->calls++;
    assert_true(done >= p->last_done);
    p->last_done = done;
    p->total = total;
    if (p->flag && p->calls == 2) atomic_store(p->flag, 1);
}

static void test_progress_and_cancel(void **state) {
    (void)state;
    dsv4_engine *e = open_engine(g_q2, 1);
    dsv4_session *s;
    dsv4_error err;
    assert_int_equal(dsv4_session_create(e, 256, &s, &err), DSV4_OK);
    /* progress: 6 layers x 3 chunks, ending at the total */
    progress pr = {0};
    dsv4_eval_opts o = {.chunk = 20, .on_progress = on_progress, .progress_user = &pr};
    assert_int_equal(dsv4_session_eval(s, g_tokens, 50, &o, &err), DSV4_OK);
    assert_int_equal(pr.calls, 18);
    assert_int_equal(pr.last_done, 50);
    assert_int_equal(pr.total, 50);
    /* cancel raised before the run: nothing happens, the session stays valid */
    atomic_int flag = 1;
    dsv4_eval_opts oc = {.cancel = &flag};
    assert_int_equal(dsv4_session_eval(s, g_tokens + 50, 10, &oc, &err), DSV4_ERR_CANCELLED);
    assert_false(dsv4_session_broken(s));
    assert_int_equal(dsv4_session_pos(s), 50);
    assert_int_equal(dsv4_session_eval(s, g_tokens + 50, 10, NULL, &err), DSV4_OK);
    assert_memory_equal(dsv4_session_logits(s), g_ref + (size_t)59 * g_vocab, g_vocab * sizeof(float));
    /* cancel raised mid-chunk: the session reports itself broken until reset */
    atomic_store(&flag, 0);
    progress pc = {.flag = &flag};
    dsv4_eval_opts om = {.cancel = &flag, .on_progress = on_progress, .progress_user = &pc};
    assert_int_equal(dsv4_session_eval(s, g_tokens + 60, 10, &om, &err), DSV4_ERR_CANCELLED);
    assert_true(dsv4_session_broken(s));
    assert_int_equal(dsv4_session_decode(s, 1, &err), DSV4_ERR_INVALID);
    assert_int_equal(dsv4_session_reset(s, &err), DSV4_OK);
    assert_int_equal(dsv4_session_eval(s, g_tokens, 5, NULL, &err), DSV4_OK);
    assert_memory_equal(dsv4_session_logits(s), g_ref + (size_t)4 * g_vocab, g_vocab * sizeof(float));
    dsv4_session_free(s);
    dsv4_engine_close(e);
}

/* The same weights with indexer top-k 64 (never reached: at most 32 compressed rows here) give
 * the same logits up to position 34 and different ones from position 35, where top-8 selection
 * starts ((p+1)/4 > 8): the selection path is live and starts exactly where the spec says. */
static void test_indexer_selection_starts_at_35(void **state) {
    (void)state;
    char path[512];
    assert_int_equal(et_synth_tiny_topk("q2", 7, 64, "tiny-q2-top64.gguf", path, sizeof path), 0);
    dsv4_engine *e = open_engine(path, 2);
    float *got = malloc((size_t)N_TOK * g_vocab * sizeof(float));
    dsv4_error err;
    assert_int_equal(dsv4_eval_all_logits(e, g_tokens, N_TOK, 256, 0, got, &err), DSV4_OK);
    assert_memory_equal(got, g_ref, (size_t)35 * g_vocab * sizeof(float));
    for (uint32_t i = 35; i < N_TOK; i++)
        if (!memcmp(got + (size_t)i * g_vocab, g_ref + (size_t)i * g_vocab, g_vocab * sizeof(float)))
            fail_msg("position %u: top-8 selection did not change the logits", i);
    free(got);
    dsv4_engine_close(e);
    unlink(path);
}

static void test_f16_model_runs(void **state) {
    (void)state;
    dsv4_engine *e = open_engine(g_f16, 2);
    dsv4_session *s;
    dsv4_error err;
    assert_int_equal(dsv4_session_create(e, 256, &s, &err), DSV4_OK);
    float *dec = malloc((size_t)N_TOK * g_vocab * sizeof(float));
    for (uint32_t i = 0; i < N_TOK; i++) {
        assert_int_equal(dsv4_session_decode(s, g_tokens[i], &err), DSV4_OK);
        memcpy(dec + (size_t)i * g_vocab, dsv4_session_logits(s), g_vocab * sizeof(float));
    }
    for (size_t i = 0; i < (size_t)N_TOK * g_vocab; i++) assert_true(isfinite(dec[i]));
    /* a different weight format gives different (but nearby in distribution) logits */
    assert_memory_not_equal(dec, g_ref, g_vocab * sizeof(float));
    float *pre = malloc((size_t)N_TOK * g_vocab * sizeof(float));
    assert_int_equal(dsv4_eval_all_logits(e, g_tokens, N_TOK, 256, 48, pre, &err), DSV4_OK);
    assert_memory_equal(pre, dec, (size_t)N_TOK * g_vocab * sizeof(float));
    free(pre);
    free(dec);
    dsv4_session_free(s);
    dsv4_engine_close(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_logits_sane),
        cmocka_unit_test(test_prefill_chunk1_equals_decode),
        cmocka_unit_test(test_prefill_chunk7_equals_decode),
        cmocka_unit_test(test_prefill_chunk64_equals_decode),
        cmocka_unit_test(test_prefill_whole_equals_decode),
        cmocka_unit_test(test_threads_bitwise_equal),
        cmocka_unit_test(test_eval_all_logits_helper),
        cmocka_unit_test(test_prompt_over_context),
        cmocka_unit_test(test_snapshot_restore),
        cmocka_unit_test(test_progress_and_cancel),
        cmocka_unit_test(test_indexer_selection_starts_at_35),
        cmocka_unit_test(test_f16_model_runs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
