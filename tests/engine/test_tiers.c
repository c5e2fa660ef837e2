/* Tier placement and the fused-op protocol on the CPU backend, tiny model (6 layers, window 16,
 * indexer top-8; 72 tokens reach indexer selection). Three virtual CPU tiers (cpu:0-1,cpu:2-3,
 * cpu:4-5: 2 boundaries) give logits bitwise equal to one tier for decode and for chunked
 * prefill, and the transition counters equal the formulas exactly: decode 2 x HC*EMBD*4 bytes
 * per token, batch 2 x chunk x HC*EMBD*4 per chunk, no-copy 0 bytes. The host bounce gives the
 * same logits; placement strings fail with clear errors; the memory fill puts entries where the
 * budgets say; fusion on / off / disabled / fault-injected runs are bitwise equal in logits and
 * KV state with counters proving which path ran; snapshots, checkpoints and server prefix reuse
 * stay bitwise with three tiers. */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine_testutil.h"
#include "session/prefix.h"

#define N_TOK 72
#define N_CTX 128
#define TIERS3 "cpu:0-1,cpu:2-3,cpu:4-5"

static char g_q2[512];
static int32_t g_tokens[N_TOK];
static float *g_ref; /* N_TOK x vocab: one-tier decode logits */
static uint32_t g_vocab, g_layers;
static uint64_t g_row; /* HC x EMBD x 4 bytes: one token's hidden state */

typedef struct {
    const char *tiers;
    bool fusion, bounce;
    const char *disable, *fault;
} eng_opts;

static dsv4_engine *open_eng(const eng_opts *o) {
    dsv4_engine_params p;
    dsv4_engine_params_default(&p);
    p.n_threads = 1;
    p.tiers = o->tiers;
    p.fusion = o->fusion;
    p.tier_bounce = o->bounce;
    p.fusion_disable = o->disable;
    p.fault = o->fault;
    dsv4_engine *e = NULL;
    dsv4_error err;
    if (dsv4_engine_open(g_q2, &p, &e, &err) != DSV4_OK) fail_msg("engine open: %s", err.msg);
    return e;
}

static void decode_all(dsv4_engine *e, float *out) {
    dsv4_session *s;
    dsv4_error err;
    assert_int_equal(dsv4_session_create(e, N_CTX, &s, &err), DSV4_OK);
    for (uint32_t i = 0; i < N_TOK; i++) {
        if (dsv4_session_decode(s, g_tokens[i], &err) != DSV4_OK) fail_msg("decode %u: %s", i, err.msg);
        memcpy(out + (size_t)i * g_vocab, dsv4_session_logits(s), g_vocab * sizeof(float));
    }
    dsv4_session_free(s);
}

static int setup(void **state) {
    (void)state;
    if (et_synth_tiny("q2", 7, "tiny-q2.gguf", g_q2, sizeof g_q2)) return -1;
    uint64_t r = 777;
    for (int i = 0; i < N_TOK; i++) g_tokens[i] = (int32_t)(test_rng_next(&r) % 1024);
    /* the reference: one tier, no fusion */
    eng_opts o = {NULL, false, false, NULL, NULL};
    dsv4_engine *e = open_eng(&o);
    const dsv4_config *c = dsv4_engine_config(e);
    g_vocab = c->n_vocab;
    g_layers = c->n_layer;
    g_row = (uint64_t)c->n_hc * c->n_embd * sizeof(float);
    g_ref = malloc((size_t)N_TOK * g_vocab * sizeof(float));
    decode_all(e, g_ref);
    dsv4_engine_close(e);
    return g_layers == 6 ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    free(g_ref);
    et_tmpdir_cleanup();
    return 0;
}

static void test_decode_three_tiers(void **state) {
    (void)state;
    eng_opts o = {TIERS3, true, false, NULL, NULL};
    dsv4_engine *e = open_eng(&o);
    const dsv4_placement *pl = dsv4_engine_placement(e);
    assert_int_equal(pl->n_tiers, 3);
    assert_int_equal(dsv4_placement_boundaries(pl), 2);
    dsv4_session *s;
    dsv4_error err;
    assert_int_equal(dsv4_session_create(e, N_CTX, &s, &err), DSV4_OK);
    dsv4_engine_stats_reset(e);
    for (uint32_t i = 0; i < N_TOK; i++) {
        assert_int_equal(dsv4_session_decode(s, g_tokens[i], &err), DSV4_OK);
        assert_memory_equal(dsv4_session_logits(s), g_ref + (size_t)i * g_vocab, g_vocab * sizeof(float));
    }
    dsv4_engine_stats st;
    dsv4_engine_stats_get(e, &st);
    assert_int_equal(st.tier_switches[DSV4_TIER_DECODE], 2ull * N_TOK);
    assert_int_equal(st.tier_bytes[DSV4_TIER_DECODE], 2ull * N_TOK * g_row);
    assert_int_equal(st.tier_switches[DSV4_TIER_BATCH], 0);
    assert_int_equal(st.tier_bytes[DSV4_TIER_BATCH], 0);
    /* each step starts at the embedding tier (0) after ending on the head tier (2) */
    assert_int_equal(st.tier_switches[DSV4_TIER_NOCOPY], N_TOK);
    assert_int_equal(st.tier_bytes[DSV4_TIER_NOCOPY], 0);
    assert_int_equal(st.xcopy[DSV4_XCOPY_MEMCPY], 2ull * N_TOK);
    assert_int_equal(st.xcopy[DSV4_XCOPY_BOUNCE], 0);
    dsv4_session_free(s);
    dsv4_engine_close(e);
}

/* Prefill N_TOK tokens in chunks of `chunk` on `e`; logits must equal the reference; returns the
 * stats of the evaluation only. */
static void prefill_check(dsv4_engine *e, uint32_t chunk, dsv4_engine_stats *st) {
    float *got = malloc((size_t)N_TOK * g_vocab * sizeof(float));
    dsv4_session *s;
    dsv4_error err;
    assert_int_equal(dsv4_session_create(e, N_CTX, &s, &err), DSV4_OK);
    dsv4_engine_stats_reset(e);
    for (uint32_t done = 0; done < N_TOK;) { /* one eval call per chunk: logits of every row */
        const uint32_t m = N_TOK - done < chunk ? N_TOK - done : chunk;
        assert_int_equal(dsv4_session_eval(s, g_tokens + done, m, NULL, &err), DSV4_OK);
        done += m;
        assert_memory_equal(dsv4_session_logits(s), g_ref + (size_t)(done - 1) * g_vocab,
                            g_vocab * sizeof(float));
    }
    dsv4_engine_stats_get(e, st);
    dsv4_session_free(s);
    /* every position, through the all-logits path */
    assert_int_equal(dsv4_eval_all_logits(e, g_tokens, N_TOK, N_CTX, chunk, got, &err), DSV4_OK);
    assert_memory_equal(got, g_ref, (size_t)N_TOK * g_vocab * sizeof(float));
    free(got);
}

static void test_prefill_three_tiers(void **state) {
    (void)state;
    eng_opts o = {TIERS3, true, false, NULL, NULL};
    dsv4_engine *e = open_eng(&o);
    const uint32_t chunks[] = {1, 7, 64, N_TOK};
    for (size_t k = 0; k < sizeof chunks / sizeof *chunks; k++) {
        const uint32_t chunk = chunks[k];
        dsv4_engine_stats st;
        prefill_check(e, chunk, &st);
        /* expected from the chunk lengths: a chunk of 1 is a decode step */
        uint64_t dsw = 0, dby = 0, bsw = 0, bby = 0, evals = 0;
        for (uint32_t done = 0; done < N_TOK; evals++) {
            const uint32_t m = N_TOK - done < chunk ? N_TOK - done : chunk;
            if (m == 1)
                dsw += 2, dby += 2 * g_row;
            else
                bsw += 2, bby += 2ull * m * g_row;
            done += m;
        }
        assert_int_equal(st.tier_switches[DSV4_TIER_DECODE], dsw);
        assert_int_equal(st.tier_bytes[DSV4_TIER_DECODE], dby);
        assert_int_equal(st.tier_switches[DSV4_TIER_BATCH], bsw);
        assert_int_equal(st.tier_bytes[DSV4_TIER_BATCH], bby);
        assert_int_equal(st.tier_bytes[DSV4_TIER_NOCOPY], 0);
        assert_true(st.tier_switches[DSV4_TIER_NOCOPY] >= evals);
    }
    dsv4_engine_close(e);
}

static void test_bounce_same_logits(void **state) {
    (void)state;
    /* through the environment, as the CLI and server see it */
    setenv("DSV4_TIER_BOUNCE", "1", 1);
    dsv4_engine_params p;
    dsv4_engine_params_default(&p);
    unsetenv("DSV4_TIER_BOUNCE");
    assert_true(p.tier_bounce);
    eng_opts o = {TIERS3, true, true, NULL, NULL};
    dsv4_engine *e = open_eng(&o);
    dsv4_engine_stats st;
    prefill_check(e, 7, &st);
    const uint64_t copies = st.tier_switches[DSV4_TIER_DECODE] + st.tier_switches[DSV4_TIER_BATCH];
    assert_int_equal(copies, 2 * ((N_TOK + 6) / 7));
    assert_int_equal(st.xcopy[DSV4_XCOPY_BOUNCE], copies);
    assert_int_equal(st.xcopy[DSV4_XCOPY_MEMCPY], 0);
    dsv4_engine_close(e);
}

static void expect_parse_error(const char *spec, uint32_t n_layer, const char *needle) {
    dsv4_placement p;
    dsv4_error err = {0};
    dsv4_status st = dsv4_placement_parse(spec, n_layer, &p, &err);
    if (st == DSV4_OK) fail_msg("'%s' parsed", spec);
    if (!strstr(err.msg, needle)) fail_msg("'%s': message '%s' lacks '%s'", spec, err.msg, needle);
}

static void test_placement_parse(void **state) {
    (void)state;
    dsv4_placement p;
    dsv4_error err;
    /* the form: CUDA device ids */
    assert_int_equal(dsv4_placement_parse("0:0-21,1:22-42", 43, &p, &err), DSV4_OK);
    assert_int_equal(p.n_tiers, 2);
    assert_string_equal(p.tier[0].backend, "cuda");
    assert_int_equal(p.tier[1].device, 1);
    assert_int_equal(p.entry[0], 0);      /* embedding with layer 0 */
    assert_int_equal(p.entry[1 + 21], 0); /* layer 21 */
    assert_int_equal(p.entry[1 + 22], 1); /* layer 22 */
    assert_int_equal(p.entry[43 + 1], 1); /* head with the last layer */
    assert_int_equal(dsv4_placement_boundaries(&p), 1);
    assert_int_equal(dsv4_placement_parse("cuda0:0-21,cuda1:22-42", 43, &p, &err), DSV4_OK);
    assert_int_equal(p.tier[1].device, 1);
    assert_int_equal(dsv4_placement_parse("cpu:0,cpu:1-4,cpu:5", 6, &p, &err), DSV4_OK);
    assert_int_equal(p.n_tiers, 3);
    uint32_t a, b;
    dsv4_placement_layers(&p, 1, &a, &b);
    assert_int_equal(a, 1);
    assert_int_equal(b, 5);
    char buf[128];
    dsv4_placement_format(&p, buf, sizeof buf);
    assert_string_equal(buf, "cpu:0,cpu:1-4,cpu:5");
    expect_parse_error("cpu:0-1,cpu:3-5", 6, "gap: layer 2 is not placed");
    expect_parse_error("cpu:0-1,cpu:4-5", 6, "gap: layers 2-3");
    expect_parse_error("cpu:0-3", 6, "layers 4-5 are not placed");
    expect_parse_error("cpu:0-3,cpu:3-5", 6, "overlap");
    expect_parse_error("cpu:2-5,cpu:0-1", 6, "gap: layers 0-1");
    expect_parse_error("cpu:0-3,cpu:4-6", 6, "layer 6 is out of range (the model has 6 layers: 0-5)");
    expect_parse_error("gpu0:0-5", 6, "unknown device 'gpu0'");
    expect_parse_error("cudax:0-5", 6, "unknown device");
    expect_parse_error("cpu:3-1,cpu:4-5", 6, "empty layer range 3-1");
    expect_parse_error("cpu0-5", 6, "expected TIER:LAYERS");
    expect_parse_error("cpu:a-b", 6, "not A-B or A");
    expect_parse_error("", 6, "empty placement");
    /* the engine reports the same errors, and an unknown fusion name */
    eng_opts o = {NULL, true, false, NULL, NULL};
    dsv4_engine_params prm;
    dsv4_engine_params_default(&prm);
    prm.tiers = "cpu:0-1,cpu:3-5";
    dsv4_engine *e = NULL;
    assert_int_not_equal(dsv4_engine_open(g_q2, &prm, &e, &err), DSV4_OK);
    assert_non_null(strstr(err.msg, "gap"));
    prm.tiers = NULL;
    prm.fault = "no_such_fusion";
    assert_int_not_equal(dsv4_engine_open(g_q2, &prm, &e, &err), DSV4_OK);
    assert_non_null(strstr(err.msg, "unknown fusion 'no_such_fusion'"));
    /* the message names every fusion (it once listed only the first three) */
    for (int op = 0; op < DSV4_FUSED_COUNT; op++)
        assert_non_null(strstr(err.msg, dsv4_fusion_name((dsv4_fused_op)op)));
    assert_null(e);
    (void)o;
}

static void test_tier_mem_fill(void **state) {
    (void)state;
    dsv4_placement p;
    dsv4_error err = {0};
    /* entries: embedding 10, six layers of 20, head 10 */
    const uint64_t eb[8] = {10, 20, 20, 20, 20, 20, 20, 10};
    assert_int_equal(dsv4_placement_fill("0:50,1:50,cpu", eb, 6, &p, &err), DSV4_OK);
    /* device 0: emb + L0 + L1 = 50 (exactly full); device 1: L2 + L3 = 40 (L4 would be 60); cpu: rest */
    const uint8_t want[8] = {0, 0, 0, 1, 1, 2, 2, 2};
    assert_memory_equal(p.entry, want, 8);
    assert_int_equal(p.n_tiers, 3);
    assert_string_equal(p.tier[0].backend, "cuda");
    assert_int_equal(p.tier[1].device, 1);
    assert_string_equal(p.tier[2].backend, "cpu");
    /* binary suffixes; a device too small for the embedding is skipped (never gone back to) */
    const uint64_t eb2[8] = {3 << 20, 1 << 30, 1 << 30, 1 << 30, 1 << 30, 1 << 30, 1 << 30, 2 << 20};
    assert_int_equal(dsv4_placement_fill("cuda0:2M,cuda3:3.5G,cuda5:4G", eb2, 6, &p, &err), DSV4_OK);
    const uint8_t want2[8] = {0, 0, 0, 0, 1, 1, 1, 1};
    assert_memory_equal(p.entry, want2, 8);
    assert_int_equal(p.n_tiers, 2);
    assert_int_equal(p.tier[0].device, 3);
    assert_int_equal(p.tier[1].device, 5);
    /* errors */
    assert_int_equal(dsv4_placement_fill("0:50,1:50", eb, 6, &p, &err), DSV4_ERR_NOMEM);
    assert_non_null(strstr(err.msg, "layer 4"));
    assert_int_not_equal(dsv4_placement_fill("cpu,0:50", eb, 6, &p, &err), DSV4_OK);
    assert_non_null(strstr(err.msg, "must come last"));
    assert_int_not_equal(dsv4_placement_fill("0:12Q", eb, 6, &p, &err), DSV4_OK);
    assert_non_null(strstr(err.msg, "not a byte count"));
    assert_int_not_equal(dsv4_placement_fill("tpu:1G", eb, 6, &p, &err), DSV4_OK);
    assert_non_null(strstr(err.msg, "unknown device 'tpu'"));
    assert_int_not_equal(dsv4_placement_fill("0:1G,0:1G", eb, 6, &p, &err), DSV4_OK);
    assert_non_null(strstr(err.msg, "listed twice"));
    /* the tiny model's own estimates: a budget of exactly embedding + layers 0-2 puts layer 3 on
     * the next device */
    eng_opts o = {NULL, true, false, NULL, NULL};
    dsv4_engine *e = open_eng(&o);
    uint64_t mb[8];
    assert_int_equal(dsv4_placement_entry_bytes(dsv4_engine_model(e), N_CTX, DSV4_TYPE_F16, mb, &err),
                     DSV4_OK);
    for (int i = 0; i < 8; i++) assert_true(mb[i] > 0);
    assert_true(mb[1 + 2] > mb[1 + 0]); /* a compressed layer holds more KV than a window-only one */
    char spec[128];
    snprintf(spec, sizeof spec, "0:%llu,1:%llu,cpu", (unsigned long long)(mb[0] + mb[1] + mb[2] + mb[3]),
             (unsigned long long)(mb[4] + mb[5]));
    assert_int_equal(dsv4_placement_fill(spec, mb, 6, &p, &err), DSV4_OK);
    const uint8_t want3[8] = {0, 0, 0, 0, 1, 1, 2, 2};
    assert_memory_equal(p.entry, want3, 8);
    dsv4_engine_close(e);
    /* through the engine: an all-CPU budget is one tier */
    dsv4_engine_params prm;
    dsv4_engine_params_default(&prm);
    prm.n_threads = 1;
    prm.tier_mem = "cpu";
    assert_int_equal(dsv4_engine_open(g_q2, &prm, &e, &err), DSV4_OK);
    assert_int_equal(dsv4_engine_placement(e)->n_tiers, 1);
    dsv4_engine_close(e);
}

/* Prefill in chunks of 7 then 4 decode steps; returns the final snapshot (caller frees). */
static uint8_t *fusion_run(const eng_opts *o, dsv4_engine_stats *st, size_t *snap_bytes) {
    dsv4_engine *e = open_eng(o);
    dsv4_session *s;
    dsv4_error err;
    assert_int_equal(dsv4_session_create(e, N_CTX, &s, &err), DSV4_OK);
    dsv4_engine_stats_reset(e);
    const uint32_t n_pre = N_TOK - 4;
    dsv4_eval_opts eo = {.chunk = 7};
    assert_int_equal(dsv4_session_eval(s, g_tokens, n_pre, &eo, &err), DSV4_OK);
    assert_memory_equal(dsv4_session_logits(s), g_ref + (size_t)(n_pre - 1) * g_vocab,
                        g_vocab * sizeof(float));
    for (uint32_t i = n_pre; i < N_TOK; i++) {
        assert_int_equal(dsv4_session_decode(s, g_tokens[i], &err), DSV4_OK);
        assert_memory_equal(dsv4_session_logits(s), g_ref + (size_t)i * g_vocab, g_vocab * sizeof(float));
    }
    dsv4_engine_stats_get(e, st);
    *snap_bytes = dsv4_session_snapshot_bytes(s);
    uint8_t *snap = malloc(*snap_bytes);
    assert_int_equal(dsv4_session_snapshot_save(s, snap, *snap_bytes, &err), DSV4_OK);
    dsv4_session_free(s);
    dsv4_engine_close(e);
    return snap;
}

/* Expected counts of one fusion in one run. */
static void expect_counts(const dsv4_engine_stats *st, dsv4_fused_op op, uint64_t selected, uint64_t fallback,
                          uint64_t faulted, uint64_t skipped) {
    const dsv4_fusion_counts *f = &st->fusion[op];
    assert_int_equal(f->selected, selected);
    assert_int_equal(f->fallback, fallback);
    assert_int_equal(f->faulted, faulted);
    assert_int_equal(f->skipped, skipped);
}

/* One fusion over the five runs of test_fusion_on_off_fault: on, off, disabled by name (`dis_named`:
 * this one is in the list), every fusion faulted, only kv_norm_rope_fp8 faulted. */
static void expect_run_counts(const dsv4_engine_stats *on, const dsv4_engine_stats *off,
                              const dsv4_engine_stats *dis, const dsv4_engine_stats *flt,
                              const dsv4_engine_stats *flt1, dsv4_fused_op op, uint64_t n, bool dis_named) {
    expect_counts(on, op, n, 0, 0, 0);
    expect_counts(off, op, 0, 0, 0, n);
    if (dis_named)
        expect_counts(dis, op, 0, 0, 0, n);
    else
        expect_counts(dis, op, n, 0, 0, 0);
    expect_counts(flt, op, 0, n, n, 0);
    expect_counts(flt1, op, n, 0, 0, 0);
}

static void test_fusion_on_off_fault(void **state) {
    (void)state;
    const uint64_t evals = (N_TOK - 4 + 6) / 7 + 4;
    const uint64_t calls = 2ull * g_layers * evals;   /* hc_pre_norm: attention and FFN halves */
    const uint64_t attn = (uint64_t)g_layers * evals; /* q_norm_rope, kv_norm_rope_fp8: attention */
    const uint64_t ffn = (uint64_t)g_layers * evals; /* parallel_ffn: FFN halves (all with a shared expert) */
    const uint64_t dec = (uint64_t)g_layers * 4; /* parallel_attn: attention halves of the 4 decode steps */
    /* q_norm_rope_idx: the 4 decode steps (positions 68..71) in the tiny model's two ratio-4 layers
     * (2 and 4), whose indexer runs there (top_k 8); q_norm_rope then does not run */
    const uint64_t idxd = 4ull * 2;
    /* emit_row: the rows the compressors emit in those decode steps: at position 71 the ratio-4
     * layers' windows close (72 % 4 == 0, 72 % 16 != 0): an attention and an indexer row in each of
     * the two (prefill chunks emit through compressor_chunk) */
    const uint64_t emits = 2ull * 2;
    /* router_topk: the FFN halves of the 4 decode steps in the top-k layers (3..5; 0..2 are hash-routed) */
    const uint64_t topk = 4ull * 3;
    /* hc_post_pre_norm: the FFN halves of the decode steps (the attention's post in the FFN's pre step;
     * hc_pre_norm is then not asked there) */
    const uint64_t hcpp = dec;
    /* attn_chunk_qnr: the attention halves of the prefill chunks (68 tokens in chunks of 7: 10 chunks, all
     * of 2+ tokens); q_norm_rope is then not asked there, except on its fallback */
    const uint64_t qnr = (uint64_t)g_layers * ((N_TOK - 4 + 6) / 7);
    /* attn_qnr: the attention halves of the decode steps without the indexer (q_norm_rope and attn_rope
     * are then not asked there, except on its fallback) */
    const uint64_t aqn = dec - idxd;
    const dsv4_fused_op HC = DSV4_FUSED_HC_PRE_NORM, Q = DSV4_FUSED_Q_NORM_ROPE,
                        KV = DSV4_FUSED_KV_NORM_ROPE_FP8, PF = DSV4_FUSED_PARALLEL_FFN,
                        PA = DSV4_FUSED_PARALLEL_ATTN, PA2 = DSV4_FUSED_HC_POST_ADD,
                        AR = DSV4_FUSED_ATTN_ROPE, MS = DSV4_FUSED_MOE_SUM_POST,
                        QI = DSV4_FUSED_Q_NORM_ROPE_IDX, ER = DSV4_FUSED_EMIT_ROW,
                        RT = DSV4_FUSED_ROUTER_TOPK, HP = DSV4_FUSED_HC_POST_PRE_NORM,
                        QN = DSV4_FUSED_ATTN_CHUNK_QNR, AQ = DSV4_FUSED_ATTN_QNR;
    dsv4_engine_stats on, off, dis, flt, flt1;
    size_t b_on, b_off, b_dis, b_flt, b_flt1;
    eng_opts o_on = {TIERS3, true, false, NULL, NULL};
    eng_opts o_off = {TIERS3, false, false, NULL, NULL};
    /* disabled by name: q_norm_rope stays on (the names act one by one) */
    eng_opts o_dis = {TIERS3, true, false, "hc_pre_norm,kv_norm_rope_fp8,parallel_ffn", NULL};
    eng_opts o_flt = {
        TIERS3, true, false, NULL,
        "hc_pre_norm,q_norm_rope,kv_norm_rope_fp8,parallel_ffn,parallel_attn,hc_post_add,attn_"
        "rope,moe_sum_post,q_norm_rope_idx,emit_row,router_topk,hc_post_pre_norm,attn_chunk_qnr,attn_qnr"};
    /* one fault next to selected fusions: kv's fallback redoes its projection only */
    eng_opts o_flt1 = {TIERS3, true, false, NULL, "kv_norm_rope_fp8"};
    uint8_t *s_on = fusion_run(&o_on, &on, &b_on);
    uint8_t *s_off = fusion_run(&o_off, &off, &b_off);
    uint8_t *s_dis = fusion_run(&o_dis, &dis, &b_dis);
    uint8_t *s_flt = fusion_run(&o_flt, &flt, &b_flt);
    uint8_t *s_flt1 = fusion_run(&o_flt1, &flt1, &b_flt1);
    /* KV state and logits (checked in fusion_run) identical on every path */
    assert_int_equal(b_on, b_off);
    assert_int_equal(b_on, b_dis);
    assert_int_equal(b_on, b_flt);
    assert_int_equal(b_on, b_flt1);
    assert_memory_equal(s_on, s_off, b_on);
    assert_memory_equal(s_on, s_dis, b_on);
    assert_memory_equal(s_on, s_flt, b_on);
    assert_memory_equal(s_on, s_flt1, b_on);
    expect_counts(&on, HC, calls - hcpp, 0, 0, 0);
    expect_counts(&on, Q, attn - idxd - qnr - aqn, 0, 0, 0);
    expect_counts(&on, KV, attn, 0, 0, 0);
    expect_counts(&off, HC, 0, 0, 0, calls);
    expect_counts(&off, Q, 0, 0, 0, attn);
    expect_counts(&off, KV, 0, 0, 0, attn);
    expect_counts(&dis, HC, 0, 0, 0, calls - hcpp);
    expect_counts(&dis, Q, attn - idxd - qnr - aqn, 0, 0, 0);
    expect_counts(&dis, KV, 0, 0, 0, attn);
    expect_counts(&flt, HC, 0, calls, calls, 0);
    expect_counts(&flt, Q, 0, attn, attn, 0);
    expect_counts(&flt, KV, 0, attn, attn, 0);
    expect_counts(&flt1, HC, calls - hcpp, 0, 0, 0);
    expect_counts(&flt1, Q, attn - idxd - qnr - aqn, 0, 0, 0);
    expect_counts(&flt1, KV, 0, attn, attn, 0);
    /* parallel_ffn (disabled by name in `dis`), parallel_attn, attn_rope and moe_sum_post (the decode
     * halves) */
    expect_run_counts(&on, &off, &dis, &flt, &flt1, PF, ffn, true);
    expect_run_counts(&on, &off, &dis, &flt, &flt1, PA, dec, false);
    /* attn_rope: the decode halves attn_qnr did not take; where it falls back (faulted), all of them */
    expect_counts(&on, AR, dec - aqn, 0, 0, 0);
    expect_counts(&off, AR, 0, 0, 0, dec);
    expect_counts(&dis, AR, dec - aqn, 0, 0, 0);
    expect_counts(&flt, AR, 0, dec, dec, 0);
    expect_counts(&flt1, AR, dec - aqn, 0, 0, 0);
    expect_run_counts(&on, &off, &dis, &flt, &flt1, MS, dec, false);
    /* q_norm_rope_idx; where it falls back (faulted), q_norm_rope runs (and is faulted too: attn) */
    expect_run_counts(&on, &off, &dis, &flt, &flt1, QI, idxd, false);
    expect_run_counts(&on, &off, &dis, &flt, &flt1, ER, emits, false);
    expect_run_counts(&on, &off, &dis, &flt, &flt1, RT, topk, false);
    expect_run_counts(&on, &off, &dis, &flt, &flt1, HP, hcpp, false);
    /* attn_chunk_qnr; where it falls back (faulted), q_norm_rope runs before the attention (faulted too) */
    expect_run_counts(&on, &off, &dis, &flt, &flt1, QN, qnr, false);
    /* attn_qnr; where it falls back (faulted), q_norm_rope then attn_rope run (faulted too) */
    expect_run_counts(&on, &off, &dis, &flt, &flt1, AQ, aqn, false);
    /* hc_post_add: every FFN half (all have a shared expert) but the decode ones moe_sum_post took;
     * where that one falls back (faulted), the decode halves ask for hc_post_add too */
    expect_counts(&on, PA2, ffn - dec, 0, 0, 0);
    expect_counts(&off, PA2, 0, 0, 0, ffn);
    expect_counts(&dis, PA2, ffn - dec, 0, 0, 0);
    expect_counts(&flt, PA2, 0, ffn, ffn, 0);
    expect_counts(&flt1, PA2, ffn - dec, 0, 0, 0);
    /* a fallback leaves the other counters as they were */
    assert_memory_equal(on.tier_switches, flt.tier_switches, sizeof on.tier_switches);
    assert_memory_equal(on.tier_bytes, off.tier_bytes, sizeof on.tier_bytes);
    assert_memory_equal(on.tier_bytes, flt.tier_bytes, sizeof on.tier_bytes);
    assert_memory_equal(on.tier_bytes, flt1.tier_bytes, sizeof on.tier_bytes);
    /* the environment switches reach the parameters */
    setenv("DSV4_FUSION", "off", 1);
    setenv("DSV4_FUSION_DISABLE", "q_norm_rope", 1);
    setenv("DSV4_FAULT", "kv_norm_rope_fp8", 1);
    dsv4_engine_params p;
    dsv4_engine_params_default(&p);
    assert_false(p.fusion);
    assert_string_equal(p.fusion_disable, "q_norm_rope");
    assert_string_equal(p.fault, "kv_norm_rope_fp8");
    unsetenv("DSV4_FUSION");
    unsetenv("DSV4_FUSION_DISABLE");
    unsetenv("DSV4_FAULT");
    /* the names resolve to their ops, an unknown one is refused */
    uint32_t mask = 0;
    dsv4_error err;
    assert_int_equal(dsv4_fusion_mask("kv_norm_rope_fp8,q_norm_rope", "test", &mask, &err), DSV4_OK);
    assert_int_equal(mask, (1u << Q) | (1u << KV));
    assert_int_equal(dsv4_fusion_mask("all", "test", &mask, &err), DSV4_OK);
    assert_int_equal(mask, (1u << DSV4_FUSED_COUNT) - 1);
    assert_int_equal(dsv4_fusion_mask("q_norm", "test", &mask, &err), DSV4_ERR_INVALID);
    assert_string_equal(dsv4_fusion_name(KV), "kv_norm_rope_fp8");
    free(s_on), free(s_off), free(s_dis), free(s_flt), free(s_flt1);
}

static void test_snapshot_checkpoint_three_tiers(void **state) {
    (void)state;
    eng_opts o1 = {NULL, true, false, NULL, NULL};
    eng_opts o3 = {TIERS3, true, false, NULL, NULL};
    dsv4_engine *e1 = open_eng(&o1), *e3 = open_eng(&o3);
    dsv4_session *s1, *s3;
    dsv4_error err;
    assert_int_equal(dsv4_session_create(e1, N_CTX, &s1, &err), DSV4_OK);
    assert_int_equal(dsv4_session_create(e3, N_CTX, &s3, &err), DSV4_OK);
    const uint32_t cut = 40;
    assert_int_equal(dsv4_session_eval(s1, g_tokens, cut, NULL, &err), DSV4_OK);
    assert_int_equal(dsv4_session_eval(s3, g_tokens, cut, NULL, &err), DSV4_OK);
    /* the snapshot format does not depend on the placement: byte-identical across engines */
    const size_t nb = dsv4_session_snapshot_bytes(s3);
    assert_int_equal(nb, dsv4_session_snapshot_bytes(s1));
    uint8_t *a = malloc(nb), *b = malloc(nb);
    assert_int_equal(dsv4_session_snapshot_save(s1, a, nb, &err), DSV4_OK);
    assert_int_equal(dsv4_session_snapshot_save(s3, b, nb, &err), DSV4_OK);
    assert_memory_equal(a, b, nb);
    const size_t cb = dsv4_session_checkpoint_bytes(s3);
    uint8_t *ck = malloc(cb);
    assert_int_equal(dsv4_session_checkpoint_save(s3, ck, cb, &err), DSV4_OK);
    /* run on, then restore each way and replay: bitwise the reference */
    assert_int_equal(dsv4_session_eval(s3, g_tokens + cut, 20, NULL, &err), DSV4_OK);
    assert_int_equal(dsv4_session_snapshot_load(s3, a, nb, &err), DSV4_OK); /* taken on one tier */
    assert_int_equal(dsv4_session_pos(s3), cut);
    for (uint32_t i = cut; i < cut + 10; i++) {
        assert_int_equal(dsv4_session_decode(s3, g_tokens[i], &err), DSV4_OK);
        assert_memory_equal(dsv4_session_logits(s3), g_ref + (size_t)i * g_vocab, g_vocab * sizeof(float));
    }
    assert_int_equal(dsv4_session_checkpoint_load(s3, ck, cb, &err), DSV4_OK);
    assert_int_equal(dsv4_session_pos(s3), cut);
    assert_memory_equal(dsv4_session_logits(s3), g_ref + (size_t)(cut - 1) * g_vocab,
                        g_vocab * sizeof(float));
    assert_int_equal(dsv4_session_eval(s3, g_tokens + cut, N_TOK - cut, NULL, &err), DSV4_OK);
    assert_memory_equal(dsv4_session_logits(s3), g_ref + (size_t)(N_TOK - 1) * g_vocab,
                        g_vocab * sizeof(float));
    free(a), free(b), free(ck);
    dsv4_session_free(s1);
    dsv4_session_free(s3);
    dsv4_engine_close(e1);
    dsv4_engine_close(e3);
}

static void test_prefix_reuse_three_tiers(void **state) {
    (void)state;
    eng_opts o3 = {TIERS3, true, false, NULL, NULL};
    dsv4_engine *e = open_eng(&o3);
    dsv4_session *s;
    dsv4_error err;
    assert_int_equal(dsv4_session_create(e, N_CTX, &s, &err), DSV4_OK);
    dsv4_prefix_cache c;
    assert_int_equal(dsv4_prefix_init(&c, s, 8, 6, &err), DSV4_OK);
    dsv4_prefix_result r;
    assert_int_equal(dsv4_prefix_sync(&c, g_tokens, 50, NULL, &r, &err), DSV4_OK);
    assert_int_equal(r.kind, DSV4_PREFIX_REBUILD);
    assert_memory_equal(dsv4_session_logits(s), g_ref + 49 * (size_t)g_vocab, g_vocab * sizeof(float));
    assert_int_equal(dsv4_prefix_sync(&c, g_tokens, 60, NULL, &r, &err), DSV4_OK);
    assert_int_equal(r.kind, DSV4_PREFIX_EXTEND);
    assert_memory_equal(dsv4_session_logits(s), g_ref + 59 * (size_t)g_vocab, g_vocab * sizeof(float));
    /* a shorter prefix: rewind to a checkpoint and replay */
    assert_int_equal(dsv4_prefix_sync(&c, g_tokens, 30, NULL, &r, &err), DSV4_OK);
    assert_int_equal(r.kind, DSV4_PREFIX_REWIND);
    assert_memory_equal(dsv4_session_logits(s), g_ref + 29 * (size_t)g_vocab, g_vocab * sizeof(float));
    for (uint32_t i = 30; i < 36; i++) {
        assert_int_equal(dsv4_prefix_decode(&c, g_tokens[i], &err), DSV4_OK);
        assert_memory_equal(dsv4_session_logits(s), g_ref + (size_t)i * g_vocab, g_vocab * sizeof(float));
    }
    dsv4_prefix_free(&c);
    dsv4_session_free(s);
    dsv4_engine_close(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_three_tiers),
        cmocka_unit_test(test_prefill_three_tiers),
        cmocka_unit_test(test_bounce_same_logits),
        cmocka_unit_test(test_placement_parse),
        cmocka_unit_test(test_tier_mem_fill),
        cmocka_unit_test(test_fusion_on_off_fault),
        cmocka_unit_test(test_snapshot_checkpoint_three_tiers),
        cmocka_unit_test(test_prefix_reuse_three_tiers),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
