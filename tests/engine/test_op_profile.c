/* The op profiler's host side (backend/op_profile.c): keys map to one entry each (also after the
 * index and the entry array grow), sums per key, the order (GPU time, then host time, then key)
 * and the printed table and footer, checked against hand-computed values. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/op_profile.h"
#include "common/testutil.h"

static void test_slots(void **state) {
    (void)state;
    dsv4_opprof p;
    dsv4_error err = {0};
    assert_int_equal(dsv4_opprof_init(&p, &err), DSV4_OK);
    const int32_t a = dsv4_opprof_slot(&p, "matmul Q8_0 n=1 in=1024 out=32768");
    const int32_t b = dsv4_opprof_slot(&p, "add");
    assert_true(a >= 0 && b >= 0 && a != b);
    assert_int_equal(dsv4_opprof_slot(&p, "add"), b);
    assert_int_equal(dsv4_opprof_slot(&p, "matmul Q8_0 n=1 in=1024 out=32768"), a);
    /* 500 keys: the entry array (64) and the index (256) both grow several times */
    char key[64];
    int32_t slots[500];
    for (int i = 0; i < 500; i++) {
        snprintf(key, sizeof key, "op%d", i);
        slots[i] = dsv4_opprof_slot(&p, key);
        assert_int_equal(slots[i], i + 2);
    }
    for (int i = 499; i >= 0; i--) {
        snprintf(key, sizeof key, "op%d", i);
        assert_int_equal(dsv4_opprof_slot(&p, key), slots[i]);
        assert_string_equal(p.e[slots[i]].key, key);
    }
    assert_int_equal(p.n, 502);
    assert_int_equal(dsv4_opprof_slot(&p, "add"), b);
    /* keys are cut to DSV4_OPPROF_KEY - 1 characters: two keys equal up to there share an entry */
    char longk[200], longk2[200];
    memset(longk, 'x', sizeof longk - 1);
    longk[sizeof longk - 1] = 0;
    memcpy(longk2, longk, sizeof longk);
    longk2[150] = 'y';
    const int32_t l = dsv4_opprof_slot(&p, longk);
    assert_int_equal(dsv4_opprof_slot(&p, longk2), l);
    assert_int_equal(strlen(p.e[l].key), DSV4_OPPROF_KEY - 1);
    /* sums; an invalid slot (out of memory at lookup) is ignored */
    dsv4_opprof_add_call(&p, b, 2.5);
    dsv4_opprof_add_call(&p, b, 1.5);
    dsv4_opprof_add_gpu(&p, b, 0.25);
    dsv4_opprof_add_gpu(&p, a, 1.0);
    dsv4_opprof_add_call(&p, -1, 100.0);
    dsv4_opprof_add_gpu(&p, -1, 100.0);
    dsv4_opprof_add_gpu(&p, 100000, 100.0);
    assert_int_equal(p.e[b].calls, 2);
    assert_true(p.e[b].host_us == 4.0);
    assert_int_equal(p.e[b].gpu_calls, 1);
    assert_true(p.e[b].gpu_ms == 0.25);
    assert_true(dsv4_opprof_gpu_total_ms(&p) == 1.25);
    dsv4_opprof_free(&p);
}

/* Entries: (key, calls, gpu samples (ms each), host us per call). */
static void fill(dsv4_opprof *p) {
    struct {
        const char *key;
        int calls;
        double gpu_ms; /* per call; < 0: host-only op */
        double host_us;
    } rows[] = {
        {"rmsnorm", 4, 0.25, 3.0},                          /* 1.0 ms GPU, 12 us host */
        {"matmul Q8_0 n=1 in=4096 out=1024", 2, 1.5, 10.0}, /* 3.0 ms */
        {"buf_alloc", 1, -1, 5.0},                          /* host only */
        {"buf_free", 1, -1, 7.0},                           /* host only, more host time: before buf_alloc */
        {"add", 3, 1.0, 1.0},   /* 3.0 ms, host 3 us: after the matmul (host 20 us) */
        {"copy", 1, 1.0, 3.0},  /* 1.0 ms, host 3 us: ties rmsnorm's GPU, less host: after it */
        {"read", 1, 1.0, 12.0}, /* 1.0 ms, host 12 us: ties rmsnorm entirely: key order */
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        const int32_t s = dsv4_opprof_slot(p, rows[r].key);
        for (int i = 0; i < rows[r].calls; i++) {
            dsv4_opprof_add_call(p, s, rows[r].host_us);
            if (rows[r].gpu_ms >= 0) dsv4_opprof_add_gpu(p, s, rows[r].gpu_ms);
        }
    }
}

static const char *expect_order[] = {
    "matmul Q8_0 n=1 in=4096 out=1024", "add", "read", "rmsnorm", "copy", "buf_free", "buf_alloc",
};

static void test_order(void **state) {
    (void)state;
    dsv4_opprof p;
    dsv4_error err = {0};
    assert_int_equal(dsv4_opprof_init(&p, &err), DSV4_OK);
    fill(&p);
    uint32_t order[7];
    assert_int_equal(p.n, 7);
    dsv4_opprof_order(&p, order);
    for (int i = 0; i < 7; i++) assert_string_equal(p.e[order[i]].key, expect_order[i]);
    dsv4_opprof_free(&p);
}

static const char *find_line(const char *text, const char *start) {
    const size_t n = strlen(start);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (strncmp(l, start, n) == 0) return l;
    return NULL;
}

static void test_print(void **state) {
    (void)state;
    dsv4_opprof p;
    dsv4_error err = {0};
    assert_int_equal(dsv4_opprof_init(&p, &err), DSV4_OK);
    fill(&p);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    /* GPU sum 9.0 ms; 10 tokens in 4 steps; wall 12 ms -> gap 3 ms = 25 %, 0.3 ms/token; span 10 ms
     * -> 1 ms idle = 10 %; host inside GPU ops 12+20+3+3+12 = 50 us -> outside 11.95 ms */
    dsv4_opprof_totals t = {.host_wall_ms = 12.0,
                            .gpu_span_ms = 10.0,
                            .tokens = 10,
                            .steps = 4,
                            .syncs = 6,
                            .flushes = 2,
                            .profiler_ms = 0.026,
                            .sync_detail = "[read 4, sync 2]"};
    assert_true(dsv4_opprof_print(&p, &t, "test device", f));
    assert_int_equal(fclose(f), 0);
    assert_non_null(strstr(text, "== op profile: test device =="));
    /* rows in order, each line starting with its key */
    const char *prev = text;
    for (int i = 0; i < 7; i++) {
        const char *at = find_line(prev, expect_order[i]);
        assert_non_null(at);
        prev = at;
    }
    /* matmul: 2 calls, 3.000 ms, mean 1500.00 us, host 20.0, share 3/9 = 33.33 % */
    const char *m = find_line(text, "matmul Q8_0");
    unsigned long long calls = 0;
    double ms = 0, mean = 0, host = 0, share = 0;
    assert_int_equal(
        sscanf(m + strlen(expect_order[0]), "%llu %lf %lf %lf %lf%%", &calls, &ms, &mean, &host, &share), 5);
    assert_int_equal(calls, 2);
    assert_true(ms == 3.0 && mean == 1500.0 && host == 20.0 && share == 33.33);
    /* rmsnorm: 4 calls, 1 ms, mean 250 us, 11.11 % */
    const char *r = find_line(text, "rmsnorm ");
    assert_int_equal(sscanf(r + 7, "%llu %lf %lf %lf %lf%%", &calls, &ms, &mean, &host, &share), 5);
    assert_int_equal(calls, 4);
    assert_true(ms == 1.0 && mean == 250.0 && host == 12.0 && share == 11.11);
    /* host-only rows: GPU columns are dashes */
    const char *bf = find_line(text, "buf_free ");
    char d1[8], d2[8], d3[8];
    assert_int_equal(sscanf(bf + 8, "%llu %7s %7s %lf %7s", &calls, d1, d2, &host, d3), 5);
    assert_string_equal(d1, "-");
    assert_string_equal(d3, "-");
    assert_true(host == 7.0);
    /* footer */
    assert_non_null(strstr(text, "ops: 13 calls over 7 keys; tokens: 10 in 4 steps"));
    assert_non_null(strstr(text, "sum of GPU op time: 9.000 ms (0.900 ms/token)"));
    assert_non_null(strstr(text,
                           "host wall, first..last op: 12.000 ms (1.200 ms/token); gap (wall - sum GPU): "
                           "3.000 ms (25.0% of wall, 0.300 ms/token)"));
    assert_non_null(strstr(text, "GPU idle inside it (span - sum GPU): 1.000 ms (10.0%)"));
    assert_non_null(strstr(text, "host time inside GPU op calls: 0.050 ms (4.55 us/call)"));
    assert_non_null(strstr(text, "outside them (graph, engine, app): 11.950 ms"));
    /* 26 us over all 13 calls */
    assert_non_null(strstr(text, "inside the wall): 0.026 ms (2.00 us/call)"));
    assert_non_null(strstr(text, "host-device syncs: 6 (0.60 per token, 1.50 per step) [read 4, sync 2]; "
                                 "profiler flushes: 2"));
    free(text);
    dsv4_opprof_free(&p);
}

/* Stamps of two lanes interleaved, a replayed scope, and unusable stamps (hand-derived times). */
static void test_stamps(void **state) {
    (void)state;
    dsv4_opprof p;
    dsv4_error err;
    assert_int_equal(dsv4_opprof_init(&p, &err), DSV4_OK);
    const int32_t a = dsv4_opprof_slot(&p, "op a"), b = dsv4_opprof_slot(&p, "op b");
    const dsv4_opprof_stamp s[] = {
        {1000, (uint32_t)a, 0 << 1},     /* scope 0 (a) before */
        {1100, (uint32_t)b, 1 << 1},     /* scope 1 (b) before: the other lane */
        {1300, (uint32_t)a, 0 << 1 | 1}, /* a: 300 ns */
        {1600, (uint32_t)b, 1 << 1 | 1}, /* b: 500 ns */
        {2000, (uint32_t)a, 0 << 1},     /* scope 0 replayed */
        {2050, (uint32_t)a, 0 << 1 | 1}, /* a: 50 ns */
        {2100, (uint32_t)b, 1 << 1 | 1}, /* an after with nothing open: lost */
        {2200, 7, 1 << 1},               /* unknown slot: lost */
        {2300, (uint32_t)a, 9 << 1},     /* scope past n_scopes: lost */
    };
    char buf[4096] = {0};
    FILE *f = fmemopen(buf, sizeof buf, "w");
    assert_non_null(f);
    uint64_t span = 0;
    assert_int_equal(dsv4_opprof_add_stamps(&p, s, sizeof s / sizeof s[0], 2, f, &span), 3);
    fclose(f);
    assert_int_equal(span, 1300);
    assert_int_equal(p.e[a].gpu_calls, 2);
    assert_true(fabs(p.e[a].gpu_ms - 350e-6) < 1e-12);
    assert_int_equal(p.e[b].gpu_calls, 1);
    assert_true(fabs(p.e[b].gpu_ms - 500e-6) < 1e-12);
    assert_non_null(strstr(buf, "ns,after,scope,key\n0,0,0,\"op a\"\n100,0,1,\"op b\"\n300,1,0,\"op a\"\n"));
    dsv4_opprof_free(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slots),
        cmocka_unit_test(test_order),
        cmocka_unit_test(test_print),
        cmocka_unit_test(test_stamps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
