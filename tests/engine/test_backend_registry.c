/* Backend choice by name: "cpu" builds the reference backend with the requested threads and
 * numerics, unknown names and CUDA in a CPU build fail with messages that say why, the engine
 * passes its params through, and device info reports the CPU backend. */
#include <string.h>

#include "backend/backend_registry.h"
#include "engine/engine.h"
#include "engine_testutil.h"

static char g_model[512];

static int setup(void **state) {
    (void)state;
    return et_synth_tiny("q2", 3, "tiny-q2-registry.gguf", g_model, sizeof g_model);
}

static int teardown(void **state) {
    (void)state;
    et_tmpdir_cleanup();
    return 0;
}

static void test_cpu_by_name(void **state) {
    (void)state;
    dsv4_error err = {0};
    dsv4_backend b;
    dsv4_backend_params p = {.name = "cpu", .n_threads = 3, .numerics = DSV4_NUMERICS_EXACT};
    assert_int_equal(dsv4_backend_create(&p, &b, &err), DSV4_OK);
    assert_string_equal(b.ops->name, "cpu");
    assert_int_equal(dsv4_backend_cpu_threads(&b), 3);
    /* EXACT numerics took effect: an f16 round trip is the identity in EXACT, not in DS4 */
    float *buf = NULL;
    assert_int_equal(b.ops->buf_alloc(b.ctx, 2 * sizeof(float), (void **)&buf, &err), DSV4_OK);
    const float v = 1.0f + 1.0f / 4096.0f; /* not representable in f16 (11-bit significand) */
    buf[0] = v;
    assert_int_equal(b.ops->store_f16(b.ctx, buf + 1, DSV4_TYPE_F32, buf, 1, 1, &err), DSV4_OK);
    assert_true(buf[1] == v);
    b.ops->buf_free(b.ctx, buf);
    dsv4_device_info di;
    assert_int_equal(dsv4_backend_device_info(&b, &di, &err), DSV4_OK);
    assert_string_equal(di.backend, "cpu");
    assert_int_equal(di.cc_major, 0);
    assert_int_equal(di.weight_bytes, 0);
    dsv4_backend_destroy(&b);

    /* NULL params and NULL name mean the CPU backend */
    assert_int_equal(dsv4_backend_create(NULL, &b, &err), DSV4_OK);
    assert_string_equal(b.ops->name, "cpu");
    dsv4_backend_destroy(&b);
}

static void test_unknown_and_stub(void **state) {
    (void)state;
    dsv4_error err = {0};
    dsv4_backend b;
    dsv4_backend_params p = {.name = "tpu"};
    assert_int_equal(dsv4_backend_create(&p, &b, &err), DSV4_ERR_INVALID);
    assert_non_null(strstr(err.msg, "unknown backend 'tpu'"));
    assert_null(b.ops);

    p.name = "cuda"; /* no model */
    assert_int_equal(dsv4_backend_create(&p, &b, &err), DSV4_ERR_INVALID);
    assert_non_null(strstr(err.msg, "needs the model"));

    dsv4_model *m = NULL;
    assert_int_equal(dsv4_model_load(g_model, &m, &err), DSV4_OK);
    p.model = m;
    p.numerics = (dsv4_numerics)7; /* neither mode: refused before any device is touched */
    assert_int_equal(dsv4_backend_create(&p, &b, &err), DSV4_ERR_INVALID);
    assert_non_null(strstr(err.msg, "numerics mode 7"));
    assert_null(b.ops);
    /* this test binary links the CPU engine only: the stub answers, in both numerics modes */
    const dsv4_numerics modes[2] = {DSV4_NUMERICS_DS4, DSV4_NUMERICS_EXACT};
    for (int i = 0; i < 2; i++) {
        p.numerics = modes[i];
        assert_int_equal(dsv4_backend_create(&p, &b, &err), DSV4_ERR_UNSUPPORTED);
        assert_non_null(strstr(err.msg, "this build has no CUDA backend (build with make cuda)"));
        assert_null(b.ops);
    }
    dsv4_model_free(m);
}

static void test_engine_backend_param(void **state) {
    (void)state;
    dsv4_error err = {0};
    dsv4_engine_params ep;
    dsv4_engine_params_default(&ep);
    assert_null(ep.backend); /* default: CPU */
    ep.n_threads = 2;
    dsv4_engine *e = NULL;
    assert_int_equal(dsv4_engine_open(g_model, &ep, &e, &err), DSV4_OK);
    assert_string_equal(dsv4_engine_backend_name(e), "cpu");
    assert_int_equal(dsv4_engine_threads(e), 2);
    dsv4_device_info di;
    assert_int_equal(dsv4_engine_device_info(e, &di, &err), DSV4_OK);
    assert_string_equal(di.backend, "cpu");
    dsv4_engine_close(e);

    ep.backend = "cuda";
    e = NULL;
    assert_int_equal(dsv4_engine_open(g_model, &ep, &e, &err), DSV4_ERR_UNSUPPORTED);
    assert_null(e);
    assert_non_null(strstr(err.msg, "no CUDA backend"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_by_name),
        cmocka_unit_test(test_unknown_and_stub),
        cmocka_unit_test(test_engine_backend_param),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
