/* The binder on synthesized files: a correct file binds; every single-tensor change of type, dims
 * or presence fails with a message naming that tensor; tensor contents are sane. */
#include "model_testutil.h"

#include <math.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "gguf/gguf.h"
#include "model/layout.h"
#include "model/model.h"
#include "model/synth.h"
#include "quant/quant.h"

static dsv4_config g_cfg;
static dsv4_synth_vocab g_vocab;

static int setup(void **state) {
    (void)state;
    dsv4_error err;
    if (dsv4_config_preset("tiny", &g_cfg, &err) != DSV4_OK) return -1;
    if (dsv4_synth_vocab_make(g_cfg.n_vocab, &g_vocab, &err) != DSV4_OK) return -1;
    return 0;
}
static int teardown(void **state) {
    (void)state;
    dsv4_config_free(&g_cfg);
    dsv4_synth_vocab_free(&g_vocab);
    mt_tmpdir_cleanup();
    return 0;
}

static void synth(const char *path, const char *recipe, uint64_t seed, unsigned threads) {
    dsv4_synth_opts o = {
        .cfg = &g_cfg, .seed = seed, .n_threads = threads, .vocab = &g_vocab, .name = "tiny-test"};
    assert_true(dsv4_type_recipe_named(recipe, &o.types));
    dsv4_error err;
    dsv4_synth_stats st;
    if (dsv4_synth_write(&o, path, &st, &err) != DSV4_OK) fail_msg("synth: %s", err.msg);
    assert_int_equal(st.n_tensors, 178);
}

/* ---------------------------------------------------------------- a good file ---- */

static double row_std(uint32_t type, const void *row, int64_t n, double *mean) {
    float *x = malloc(n * sizeof *x);
    assert_true(quant_dequant_row(type, row, x, n));
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) s += x[i], s2 += (double)x[i] * x[i];
    free(x);
    *mean = s / n;
    return sqrt(s2 / n - *mean * *mean);
}

static void test_synth_tiny_binds(void **state) {
    (void)state;
    char path[512];
    mt_path(path, sizeof path, "tiny-q2.gguf");
    synth(path, "q2", 7, 2);
    dsv4_model *m = NULL;
    dsv4_error err;
    if (dsv4_model_load(path, &m, &err) != DSV4_OK) fail_msg("bind: %s", err.msg);
    assert_int_equal(m->n_bound_tensors, 178);
    assert_int_equal(m->n_unexpected_tensors, 0);
    assert_int_equal(m->cfg.n_layer, 6);
    assert_int_equal(m->cfg.compress_ratio[3], 16);
    /* q2 recipe: spec §1.3 types */
    assert_int_equal(m->token_embd.type, DSV4_TYPE_F16);
    assert_int_equal(m->output.type, DSV4_TYPE_Q8_0);
    assert_int_equal(m->output_norm.type, DSV4_TYPE_F32);
    const dsv4_layer_weights *l0 = &m->layers[0], *l4 = &m->layers[4];
    assert_int_equal(l0->attn_q_b.type, DSV4_TYPE_Q8_0);
    assert_int_equal(l0->ffn_gate_exps.type, DSV4_TYPE_IQ2_XXS);
    assert_int_equal(l0->ffn_down_exps.type, DSV4_TYPE_Q2_K);
    assert_int_equal(l0->ffn_gate_tid2eid.type, DSV4_TYPE_I32);
    assert_int_equal(l4->indexer_attn_q_b.type, DSV4_TYPE_F16);
    assert_int_equal(l4->attn_compressor_ape.ne[0], 256);
    assert_int_equal(l4->attn_compressor_ape.ne[1], 4);
    /* presence */
    assert_false(dsv4_tensor_present(&l0->attn_compressor_kv));
    assert_false(dsv4_tensor_present(&m->layers[3].indexer_proj));
    assert_true(dsv4_tensor_present(&m->layers[3].attn_compressor_kv));
    for (uint32_t il = 0; il < 6; il++) {
        assert_int_equal(dsv4_tensor_present(&m->layers[il].exp_probs_b), il >= 3);
        assert_int_equal(dsv4_tensor_present(&m->layers[il].ffn_gate_tid2eid), il < 3);
    }
    /* geometry: expert e row r (spec §1.5 expert addressing) */
    assert_int_equal(l0->ffn_gate_exps.row_bytes, 66);
    assert_ptr_equal(dsv4_tensor_expert_row(&l0->ffn_gate_exps, 3, 5),
                     (const uint8_t *)l0->ffn_gate_exps.data + (3 * 256 + 5) * 66);
    assert_int_equal(l0->ffn_gate_exps.nbytes, 8ull * 256 * 66);

    /* values: tid2eid uses every expert, rows distinct (checked here independently of the binder) */
    for (uint32_t il = 0; il < 3; il++) {
        const int32_t *ids = m->layers[il].ffn_gate_tid2eid.data;
        int seen[8] = {0};
        for (uint32_t t = 0; t < 1024; t++) {
            assert_true(ids[2 * t] >= 0 && ids[2 * t] < 8 && ids[2 * t + 1] >= 0 && ids[2 * t + 1] < 8);
            assert_int_not_equal(ids[2 * t], ids[2 * t + 1]);
            seen[ids[2 * t]]++;
            seen[ids[2 * t + 1]]++;
        }
        for (int e = 0; e < 8; e++) assert_true(seen[e] > 2048 / 8 / 2); /* spread: near-uniform */
    }
    /* norms are 1 +- 0.05, not constant */
    const float *nw = l0->attn_norm.data;
    float lo = 2, hi = 0;
    for (int i = 0; i < 256; i++) lo = fminf(lo, nw[i]), hi = fmaxf(hi, nw[i]);
    assert_true(lo >= 0.95f && hi <= 1.05f && hi - lo > 0.01f);
    /* matmul weights: std ~ 1/sqrt(fan_in), mean ~ 0 */
    double mean, sd;
    sd = row_std(DSV4_TYPE_Q8_0, l0->attn_q_b.data, 64 * 1024, &mean);
    assert_true(fabs(sd - 1.0 / 8.0) < 0.2 / 8.0 && fabs(mean) < 0.01);
    sd = row_std(DSV4_TYPE_IQ2_XXS, l0->ffn_gate_exps.data, 256 * 256, &mean);
    assert_true(fabs(sd - 1.0 / 16.0) < 0.3 / 16.0 && fabs(mean) < 0.01);
    sd = row_std(DSV4_TYPE_Q2_K, l0->ffn_down_exps.data, 256 * 256, &mean);
    assert_true(fabs(sd - 1.0 / 16.0) < 0.3 / 16.0 && fabs(mean) < 0.01);
    sd = row_std(DSV4_TYPE_F16, l0->ffn_gate_inp.data, 256 * 8, &mean);
    assert_true(fabs(sd - 1.0 / 16.0) < 0.2 / 16.0);
    dsv4_model_free(m);
    unlink(path);
}

static void test_all_recipes_bind(void **state) {
    (void)state;
    const char *recipes[] = {"q4", "q8", "f16", "f32"};
    const uint32_t gu[] = {DSV4_TYPE_Q4_K, DSV4_TYPE_Q8_0, DSV4_TYPE_F16, DSV4_TYPE_F32};
    for (int i = 0; i < 4; i++) {
        char path[512];
        mt_path(path, sizeof path, "tiny-r.gguf");
        synth(path, recipes[i], 1, 2);
        dsv4_model *m = NULL;
        dsv4_error err;
        if (dsv4_model_load(path, &m, &err) != DSV4_OK) fail_msg("%s: %s", recipes[i], err.msg);
        assert_int_equal(m->layers[2].ffn_up_exps.type, gu[i]);
        assert_int_equal(m->layers[2].ffn_down_exps.type, gu[i]);
        dsv4_model_free(m);
        unlink(path);
    }
}

static bool files_equal(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool eq = fa && fb;
    while (eq) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) eq = false;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return eq;
}

static void test_deterministic_across_threads(void **state) {
    (void)state;
    char a[512], b[512], c[512];
    mt_path(a, sizeof a, "det-a.gguf");
    mt_path(b, sizeof b, "det-b.gguf");
    mt_path(c, sizeof c, "det-c.gguf");
    synth(a, "q2", 42, 1);
    synth(b, "q2", 42, 3);
    synth(c, "q2", 43, 2);
    assert_true(files_equal(a, b));
    assert_false(files_equal(a, c));
    unlink(a);
    unlink(b);
    unlink(c);
}

/* ---------------------------------------------------------------- variants ---- */

typedef enum { V_NONE, V_TYPE, V_DIMS, V_MISSING, V_EXTRA, V_TID_DUP, V_TID_RANGE, V_MIXED } vkind;

typedef struct variant {
    vkind kind;
    size_t idx;    /* changed tensor */
    uint32_t type; /* V_TYPE */
    int32_t layer; /* V_MIXED: layer whose experts all become Q4_K */
    const char *extra_name;
} variant;

/* Write the tiny q2 layout with one change into a memfd (data is a hole except tid2eid), bind it. */
static dsv4_status bind_variant(const dsv4_layout_tensor *ts, size_t n, variant v,
                                const dsv4_model_bind_opts *opts, dsv4_model **out_model, dsv4_error *err) {
    dsv4_type_recipe q2;
    assert_true(dsv4_type_recipe_named("q2", &q2));
    gguf_writer *w = gguf_writer_new();
    assert_non_null(w);
    dsv4_error werr;
    if (dsv4_synth_write_metadata(w, &g_cfg, "variant", &g_vocab, &werr) != DSV4_OK) fail_msg("%s", werr.msg);
    uint64_t *widx = calloc(n, sizeof *widx);
    uint32_t *types = calloc(n, sizeof *types);
    for (size_t i = 0; i < n; i++) {
        widx[i] = UINT64_MAX;
        if (v.kind == V_MISSING && i == v.idx) continue;
        uint32_t type = dsv4_type_recipe_type(&q2, ts[i].e->cls);
        uint64_t ne[4] = {ts[i].ne[0], ts[i].ne[1], ts[i].ne[2], ts[i].ne[3]};
        if (v.kind == V_TYPE && i == v.idx) type = v.type;
        if (v.kind == V_DIMS && i == v.idx) ne[ts[i].n_dims >= 2 ? 1 : 0] += 1;
        if (v.kind == V_MIXED && ts[i].layer == v.layer &&
            (ts[i].e->cls == DSV4_TC_ROUTED_GU || ts[i].e->cls == DSV4_TC_ROUTED_DOWN))
            type = DSV4_TYPE_Q4_K;
        types[i] = type;
        if (gguf_writer_add_tensor(w, ts[i].name, type, ts[i].n_dims, ne, &widx[i], &werr) != DSV4_OK)
            fail_msg("%s", werr.msg);
    }
    if (v.kind == V_EXTRA) {
        uint64_t ne[1] = {32}, idx;
        assert_int_equal(gguf_writer_add_tensor(w, v.extra_name, DSV4_TYPE_F32, 1, ne, &idx, &werr), DSV4_OK);
    }
    int fd = memfd_create("dsv4-variant", 0);
    assert_true(fd >= 0);
    assert_int_equal(gguf_writer_write_header_fd(w, fd, &werr), DSV4_OK);
    uint64_t size = gguf_writer_file_size(w);
    assert_int_equal(ftruncate(fd, (off_t)size), 0);
    /* tid2eid must hold real ids, or its value check would fire first. */
    float scratch[8];
    for (size_t i = 0; i < n; i++) {
        if (ts[i].e->cls != DSV4_TC_I32 || widx[i] == UINT64_MAX || types[i] != DSV4_TYPE_I32) continue;
        if (v.kind == V_DIMS && i == v.idx) continue;
        size_t nb = (size_t)(ts[i].ne[0] * ts[i].ne[1] * 4);
        int32_t *buf = malloc(nb);
        assert_int_equal(
            dsv4_synth_fill_rows(&g_cfg, &ts[i], DSV4_TYPE_I32, 5, i, 0, ts[i].ne[1], buf, scratch, &werr),
            DSV4_OK);
        if (v.kind == V_TID_DUP && i == v.idx) buf[2 * 77 + 1] = buf[2 * 77];
        if (v.kind == V_TID_RANGE && i == v.idx) buf[2 * 500] = 8;
        assert_int_equal(pwrite(fd, buf, nb, (off_t)gguf_writer_tensor_offset(w, widx[i])), (ssize_t)nb);
        free(buf);
    }
    gguf_writer_free(w);
    free(widx);
    free(types);
    void *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    assert_true(map != MAP_FAILED);
    gguf_file *f = NULL;
    if (gguf_open_memory(map, size, &f, &werr) != DSV4_OK) fail_msg("gguf_open_memory: %s", werr.msg);
    dsv4_model *m = NULL;
    dsv4_status st = dsv4_model_bind_ex(f, opts, &m, err);
    if (out_model) *out_model = NULL;
    if (st == DSV4_OK && out_model) { /* caller inspects counters only; release now (map goes away) */
        static dsv4_model snapshot;
        snapshot.n_bound_tensors = m->n_bound_tensors;
        snapshot.n_unexpected_tensors = m->n_unexpected_tensors;
        *out_model = &snapshot;
    }
    dsv4_model_free(m);
    munmap(map, size);
    close(fd);
    return st;
}

static void test_every_tensor_variant_fails_naming_it(void **state) {
    (void)state;
    dsv4_layout_tensor *ts;
    size_t n;
    dsv4_error err;
    assert_int_equal(dsv4_layout_build(&g_cfg, DSV4_LAYOUT_SYNTH, &ts, &n, &err), DSV4_OK);
    assert_int_equal(bind_variant(ts, n, (variant){.kind = V_NONE}, NULL, NULL, &err), DSV4_OK);
    for (size_t i = 0; i < n; i++) {
        /* A type of the class's set that deviates from the class's common type ... */
        static const uint32_t inconsistent[DSV4_TC_COUNT] = {
            [DSV4_TC_F16] = DSV4_TYPE_F32,        [DSV4_TC_DENSE] = DSV4_TYPE_F16,
            [DSV4_TC_ROUTED_GU] = DSV4_TYPE_Q4_K, [DSV4_TC_ROUTED_DOWN] = DSV4_TYPE_Q4_K,
            [DSV4_TC_NORM] = DSV4_TYPE_F16,       [DSV4_TC_VEC] = DSV4_TYPE_F16,
            [DSV4_TC_I32] = DSV4_TYPE_F32,
        };
        /* ... and a type outside the class's set. */
        static const uint32_t not_allowed[DSV4_TC_COUNT] = {
            [DSV4_TC_F16] = DSV4_TYPE_Q8_0,       [DSV4_TC_DENSE] = DSV4_TYPE_I32,
            [DSV4_TC_ROUTED_GU] = DSV4_TYPE_BF16, [DSV4_TC_ROUTED_DOWN] = DSV4_TYPE_BF16,
            [DSV4_TC_NORM] = DSV4_TYPE_BF16,      [DSV4_TC_VEC] = DSV4_TYPE_BF16,
            [DSV4_TC_I32] = DSV4_TYPE_I16,
        };
        const uint32_t types[2] = {inconsistent[ts[i].e->cls], not_allowed[ts[i].e->cls]};
        for (int k = 0; k < 2; k++) {
            dsv4_error_clear(&err);
            variant v = {.kind = V_TYPE, .idx = i, .type = types[k]};
            if (bind_variant(ts, n, v, NULL, NULL, &err) == DSV4_OK)
                fail_msg("%s as %s was accepted", ts[i].name, dsv4_type_name(types[k]));
            assert_contains(err.msg, ts[i].name);
            assert_contains(err.msg, dsv4_type_name(types[k]));
        }
        dsv4_error_clear(&err);
        if (bind_variant(ts, n, (variant){.kind = V_DIMS, .idx = i}, NULL, NULL, &err) == DSV4_OK)
            fail_msg("%s with a changed dim was accepted", ts[i].name);
        assert_contains(err.msg, ts[i].name);
        assert_contains(err.msg, "expected dims");

        dsv4_error_clear(&err);
        dsv4_status st = bind_variant(ts, n, (variant){.kind = V_MISSING, .idx = i}, NULL, NULL, &err);
        if (ts[i].required) {
            assert_int_equal(st, DSV4_ERR_NOT_FOUND);
            assert_contains(err.msg, ts[i].name);
            assert_contains(err.msg, "missing");
        } else {
            assert_int_equal(st, DSV4_OK); /* exp_probs_b is optional */
        }
    }
    free(ts);
}

static void test_exact_messages(void **state) {
    (void)state;
    dsv4_layout_tensor *ts;
    size_t n;
    dsv4_error err;
    assert_int_equal(dsv4_layout_build(&g_cfg, DSV4_LAYOUT_SYNTH, &ts, &n, &err), DSV4_OK);
    size_t kv = 0;
    while (strcmp(ts[kv].name, "blk.5.attn_kv.weight") != 0) kv++;
    assert_int_not_equal(
        bind_variant(ts, n, (variant){.kind = V_TYPE, .idx = kv, .type = DSV4_TYPE_F16}, NULL, NULL, &err),
        DSV4_OK);
    assert_string_equal(
        err.msg, "tensor 'blk.5.attn_kv.weight': expected type Q8_0 (like the other dense tensors), got F16");
    assert_int_not_equal(bind_variant(ts, n, (variant){.kind = V_DIMS, .idx = kv}, NULL, NULL, &err),
                         DSV4_OK);
    assert_string_equal(err.msg, "tensor 'blk.5.attn_kv.weight': expected dims [256, 128], got [256, 129]");
    free(ts);
}

static void test_tid2eid_values(void **state) {
    (void)state;
    dsv4_layout_tensor *ts;
    size_t n;
    dsv4_error err;
    assert_int_equal(dsv4_layout_build(&g_cfg, DSV4_LAYOUT_SYNTH, &ts, &n, &err), DSV4_OK);
    size_t t = 0;
    while (strcmp(ts[t].name, "blk.1.ffn_gate_tid2eid.weight") != 0) t++;
    assert_int_not_equal(bind_variant(ts, n, (variant){.kind = V_TID_DUP, .idx = t}, NULL, NULL, &err),
                         DSV4_OK);
    assert_contains(err.msg, "blk.1.ffn_gate_tid2eid.weight");
    assert_contains(err.msg, "token 77");
    assert_contains(err.msg, "twice");
    assert_int_not_equal(bind_variant(ts, n, (variant){.kind = V_TID_RANGE, .idx = t}, NULL, NULL, &err),
                         DSV4_OK);
    assert_contains(err.msg, "blk.1.ffn_gate_tid2eid.weight");
    assert_contains(err.msg, "token 500");
    /* with value checks off the same file binds */
    dsv4_model_bind_opts o = dsv4_model_bind_opts_default();
    o.check_values = false;
    assert_int_equal(bind_variant(ts, n, (variant){.kind = V_TID_RANGE, .idx = t}, &o, NULL, &err), DSV4_OK);
    free(ts);
}

static void test_extra_tensors_are_warnings(void **state) {
    (void)state;
    dsv4_layout_tensor *ts;
    size_t n;
    dsv4_error err;
    assert_int_equal(dsv4_layout_build(&g_cfg, DSV4_LAYOUT_SYNTH, &ts, &n, &err), DSV4_OK);
    const char *extras[] = {"blk.0.foo.weight", "blk.6.attn_norm.weight", "blk.0.attn_compressor_kv.weight",
                            "mtp.0.e_proj.weight"};
    for (int i = 0; i < 4; i++) {
        dsv4_model *snap = NULL;
        variant v = {.kind = V_EXTRA, .extra_name = extras[i]};
        if (bind_variant(ts, n, v, NULL, &snap, &err) != DSV4_OK) fail_msg("%s: %s", extras[i], err.msg);
        assert_int_equal(snap->n_unexpected_tensors, 1);
        assert_int_equal(snap->n_bound_tensors, 178);
    }
    free(ts);
}

static void test_mixed_experts(void **state) {
    (void)state;
    dsv4_layout_tensor *ts;
    size_t n;
    dsv4_error err;
    assert_int_equal(dsv4_layout_build(&g_cfg, DSV4_LAYOUT_SYNTH, &ts, &n, &err), DSV4_OK);
    variant v = {.kind = V_MIXED, .layer = 5};
    assert_int_not_equal(bind_variant(ts, n, v, NULL, NULL, &err), DSV4_OK);
    assert_contains(err.msg, "blk.5.ffn_gate_exps.weight");
    dsv4_model_bind_opts o = dsv4_model_bind_opts_default();
    o.allow_mixed_experts = true;
    if (bind_variant(ts, n, v, &o, NULL, &err) != DSV4_OK) fail_msg("%s", err.msg);
    /* even when mixing is allowed, gate and up must agree within a layer */
    size_t up = 0;
    while (strcmp(ts[up].name, "blk.4.ffn_up_exps.weight") != 0) up++;
    assert_int_not_equal(
        bind_variant(ts, n, (variant){.kind = V_TYPE, .idx = up, .type = DSV4_TYPE_Q4_K}, &o, NULL, &err),
        DSV4_OK);
    assert_contains(err.msg, "blk.4.ffn_up_exps.weight");
    free(ts);
}

/* ---------------------------------------------------------------- write errors ---- */

static bool exists(const char *p) {
    struct stat s;
    return stat(p, &s) == 0;
}

static void test_write_errors_leave_no_file(void **state) {
    (void)state;
    dsv4_synth_opts o = {.cfg = &g_cfg, .seed = 1, .n_threads = 2, .vocab = &g_vocab};
    assert_true(dsv4_type_recipe_named("q2", &o.types));
    dsv4_error err;
    assert_int_equal(dsv4_synth_write(&o, "/nonexistent-dir-dsv4/x.gguf", NULL, &err), DSV4_ERR_IO);
    assert_contains(err.msg, "/nonexistent-dir-dsv4/x.gguf.tmp");

    /* A file-size limit makes the write fail part way (EFBIG, like a full disk). */
    char path[512], tmp[600];
    mt_path(path, sizeof path, "limited.gguf");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 1 << 20;
    signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    dsv4_status st = dsv4_synth_write(&o, path, NULL, &err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    assert_int_not_equal(st, DSV4_OK);
    assert_contains(err.msg, tmp);
    assert_false(exists(path));
    assert_false(exists(tmp));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_synth_tiny_binds),
        cmocka_unit_test(test_all_recipes_bind),
        cmocka_unit_test(test_deterministic_across_threads),
        cmocka_unit_test(test_every_tensor_variant_fails_naming_it),
        cmocka_unit_test(test_exact_messages),
        cmocka_unit_test(test_tid2eid_values),
        cmocka_unit_test(test_extra_tensors_are_warnings),
        cmocka_unit_test(test_mixed_experts),
        cmocka_unit_test(test_write_errors_leave_no_file),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
