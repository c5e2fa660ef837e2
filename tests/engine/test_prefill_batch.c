/* The batched prefill attention (compressor_chunk, indexer_topk_chunk, attention_chunk) against
 * the per-token loop and against token-by-token decode, on the synthesized tiny model (ratios
 * 0,0,4,16,4,16, raw window 16, indexer top-8 from position 35), 150 tokens, in both numerics
 * modes: every position's logits, the final KV state (snapshot) and every on_indexer selection
 * are bitwise equal, for chunks below and above the raw window, not multiples of 4 or 16,
 * starting at unaligned positions and straddling the indexer start; the stats prove which path
 * ran (batched chunks vs per-token steps, DSV4_PREFILL_SERIAL's switch). */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine_testutil.h"

#define N_TOK 150
#define N_CTX 256
#define N_LAYER 6
#define TOPK 8

static char g_path[512];
static int32_t g_tokens[N_TOK];
static uint32_t g_vocab;

/* What one evaluation produced. */
typedef struct {
    float *logits;                      /* N_TOK x vocab */
    uint32_t ids[N_LAYER][N_TOK][TOPK]; /* on_indexer rows per (layer, pos) */
    uint8_t calls[N_LAYER][N_TOK];      /* on_indexer calls per (layer, pos) */
    int32_t last_pos[N_LAYER];          /* within a layer, calls come in position order */
    uint32_t order_errors, shape_errors;
    void *snap;
    size_t snap_bytes;
    dsv4_engine_stats stats;
} run_out;

static void on_logits(void *user, uint32_t pos, const float *logits, uint32_t n_vocab) {
    run_out *r = user;
    if (pos < N_TOK) memcpy(r->logits + (size_t)pos * n_vocab, logits, n_vocab * sizeof(float));
}

static void on_indexer(void *user, uint32_t layer, uint32_t pos, const uint32_t *rows, uint32_t n) {
    run_out *r = user;
    if (layer >= N_LAYER || pos >= N_TOK || n != TOPK) {
        r->shape_errors++;
        return;
    }
    if ((int32_t)pos <= r->last_pos[layer]) r->order_errors++;
    r->last_pos[layer] = (int32_t)pos;
    r->calls[layer][pos]++;
    memcpy(r->ids[layer][pos], rows, TOPK * sizeof(uint32_t));
}

static dsv4_engine *open_engine(dsv4_numerics mode, uint32_t threads, bool serial) {
    dsv4_engine_params p;
    dsv4_engine_params_default(&p);
    p.n_threads = threads;
    p.numerics = mode;
    p.prefill_serial = serial;
    dsv4_engine *e = NULL;
    dsv4_error err;
    if (dsv4_engine_open(g_path, &p, &e, &err) != DSV4_OK) fail_msg("engine open: %s", err.msg);
    return e;
}

/* Evaluate the tokens as a sequence of chunks (chunks[i] tokens each, 0-terminated; the last
 * size repeats until all tokens are in). chunk 1 throughout = decode. */
static run_out *run(dsv4_numerics mode, uint32_t threads, bool serial, const uint32_t *chunks) {
    run_out *r = calloc(1, sizeof *r);
    r->logits = calloc((size_t)N_TOK * g_vocab, sizeof(float));
    for (int l = 0; l < N_LAYER; l++) r->last_pos[l] = -1;
    dsv4_engine *e = open_engine(mode, threads, serial);
    dsv4_session *s;
    dsv4_error err;
    assert_int_equal(dsv4_session_create(e, N_CTX, &s, &err), DSV4_OK);
    dsv4_engine_stats_reset(e);
    dsv4_eval_opts o = {
        .on_logits = on_logits, .logits_user = r, .on_indexer = on_indexer, .indexer_user = r};
    uint32_t done = 0, ci = 0;
    while (done < N_TOK) {
        uint32_t c = chunks[ci];
        if (chunks[ci + 1]) ci++;
        if (c > N_TOK - done) c = N_TOK - done;
        o.chunk = c;
        if (dsv4_session_eval(s, g_tokens + done, c, &o, &err) != DSV4_OK)
            fail_msg("eval %u tokens at %u: %s", c, done, err.msg);
        done += c;
    }
    dsv4_engine_stats_get(e, &r->stats);
    r->snap_bytes = dsv4_session_snapshot_bytes(s);
    r->snap = malloc(r->snap_bytes);
    assert_int_equal(dsv4_session_snapshot_save(s, r->snap, r->snap_bytes, &err), DSV4_OK);
    dsv4_session_free(s);
    dsv4_engine_close(e);
    return r;
}

static void run_free(run_out *r) {
    free(r->logits);
    free(r->snap);
    free(r);
}

static void expect_same(const run_out *ref, const run_out *got, const char *what) {
    assert_int_equal(got->shape_errors, 0);
    if (got->order_errors) fail_msg("%s: on_indexer calls out of position order", what);
    for (uint32_t i = 0; i < N_TOK; i++)
        if (memcmp(got->logits + (size_t)i * g_vocab, ref->logits + (size_t)i * g_vocab,
                   g_vocab * sizeof(float)))
            fail_msg("%s: logits of position %u differ", what, i);
    assert_int_equal(got->snap_bytes, ref->snap_bytes);
    if (memcmp(got->snap, ref->snap, ref->snap_bytes)) fail_msg("%s: KV state differs", what);
    if (memcmp(got->calls, ref->calls, sizeof ref->calls))
        fail_msg("%s: on_indexer call counts differ", what);
    if (memcmp(got->ids, ref->ids, sizeof ref->ids)) fail_msg("%s: indexer selections differ", what);
}

static int setup(void **state) {
    (void)state;
    if (et_synth_tiny("q2", 11, "tiny-q2-batch.gguf", g_path, sizeof g_path)) return -1;
    uint64_t r = 777;
    for (int i = 0; i < N_TOK; i++) g_tokens[i] = (int32_t)(test_rng_next(&r) % 1024);
    dsv4_engine *e = open_engine(DSV4_NUMERICS_DS4, 1, false);
    g_vocab = dsv4_engine_config(e)->n_vocab;
    const dsv4_config *c = dsv4_engine_config(e);
    /* the shapes this test is written for */
    if (c->n_layer != N_LAYER || c->idx_top_k != TOPK || c->n_swa != 16) return -1;
    dsv4_engine_close(e);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    et_tmpdir_cleanup();
    return 0;
}

static void check_mode(dsv4_numerics mode) {
    static const uint32_t decode[] = {1, 0};
    run_out *ref = run(mode, 1, false, decode);
    assert_int_equal(ref->stats.attn_chunks, 0);
    assert_int_equal(ref->stats.attn_serial_tokens, (uint64_t)N_TOK * N_LAYER);
    /* the indexer ran exactly from position 35 on the two ratio-4 layers (2 and 4) */
    for (uint32_t l = 0; l < N_LAYER; l++)
        for (uint32_t p = 0; p < N_TOK; p++)
            assert_int_equal(ref->calls[l][p], (l == 2 || l == 4) && p >= 35 ? 1 : 0);

    /* chunk sequences: whole prompt; 37s (> window, not multiples of 4/16, boundaries 37, 74, ..);
     * 3 then 17s (unaligned starts, one chunk straddling position 35); 2s; 5s; 16s (= window);
     * 34 then 2 then 40 (a chunk starting exactly one before / at the indexer start) */
    static const uint32_t seqs[][4] = {{N_TOK, 0}, {37, 0}, {3, 17, 0},     {2, 0},
                                       {5, 0},     {16, 0}, {34, 2, 40, 0}, {35, 1, 64, 0}};
    for (size_t i = 0; i < sizeof seqs / sizeof seqs[0]; i++) {
        { /* alternate thread counts (results never depend on them) */
            const uint32_t threads = 1 + (uint32_t)(i % 2);
            run_out *got = run(mode, threads, false, seqs[i]);
            char what[96];
            snprintf(what, sizeof what, "mode %d chunks %u,%u,%u threads %u", (int)mode, seqs[i][0],
                     seqs[i][1], seqs[i][2], threads);
            assert_true(got->stats.attn_chunks > 0); /* the batched ops ran */
            expect_same(ref, got, what);
            run_free(got);
        }
    }
    /* the switch: the same chunks through the per-token loop, identical too */
    static const uint32_t c37[] = {37, 0};
    run_out *ser = run(mode, 2, true, c37);
    assert_int_equal(ser->stats.attn_chunks, 0);
    assert_int_equal(ser->stats.attn_serial_tokens, (uint64_t)N_TOK * N_LAYER);
    expect_same(ref, ser, "serial chunks of 37");
    run_free(ser);
    run_free(ref);
}

static void test_batched_prefill_ds4(void **state) {
    (void)state;
    check_mode(DSV4_NUMERICS_DS4);
}

static void test_batched_prefill_exact(void **state) {
    (void)state;
    check_mode(DSV4_NUMERICS_EXACT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batched_prefill_ds4),
        cmocka_unit_test(test_batched_prefill_exact),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
