/* cuda_ops_check MODEL.gguf: every backend op on the CUDA backend against the CPU reference, op by
 * op, on the model's own weights and random inputs (GPU machine only; built by `make cuda`).
 * Prints one line per op (max |diff| over max |ref|, or the count of differing ids) and exits 1
 * if any op is off by more than --tol (default 1e-3), so a failing whole-model parity run can be
 * traced to the op that diverges. Not a CPU test (its name does not start with test_). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend_registry.h"
#include "backend/cuda/cuda_gemm_blas.h"  /* dsv4_cuda_f16_two_term */
#include "backend/cuda/cuda_gemm_q8_wg.h" /* dsv4_cuda_q8_wg_exact */
#include "graph/rope.h"
#include "model/model.h"
#include "quant/quant.h"

typedef struct {
    dsv4_backend cpu, gpu;
    const dsv4_model *m;
    double tol;
    int fails, checks;
    uint64_t rng;
    dsv4_error err;
    bool ds4;   /* DS4 numerics (the DS4-only fusions' gates open) */
    bool flash; /* the flash width (n_embd 4096): the prefill tensor-core and folded paths take the shapes */
} chk;

/* A fusion's gate against what its design says for this model and numerics: open, or closed for the
 * stated reason (EXACT numerics, a width the kernel does not take). Session 17: these lines expected
 * every gate open, so the checks failed on the tiny models and in EXACT numerics, and cuda_parity.sh's
 * op-by-op runs there no longer gave a verdict (one real fault, q_norm_rope_idx open in EXACT, hid
 * among them). */
static void gate_check(chk *c, const char *label, bool open, bool expect, const char *why_closed) {
    const bool ok = open == expect;
    printf("%s %-34s %s%s%s%s\n", ok ? "ok  " : "FAIL", label, open ? "open" : "closed",
           expect ? "" : " (expected: ", expect ? "" : why_closed, expect ? "" : ")");
    c->fails += !ok, c->checks++;
}

static uint64_t rnd(chk *c) {
    uint64_t z = (c->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float rndf(chk *c) { return (float)((rnd(c) >> 11) * (2.0 / 9007199254740992.0) - 1.0); }

/* host buffer of n random values in [-scale, scale] */
static float *hrand(chk *c, size_t n, float scale) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    if (!p) abort();
    for (size_t i = 0; i < n; i++) p[i] = rndf(c) * scale;
    return p;
}

/* device copy of a host array */
static void *dcopy(chk *c, const void *h, size_t bytes) {
    void *d = NULL;
    if (c->gpu.ops->buf_alloc(c->gpu.ctx, bytes ? bytes : 4, &d, &c->err) != DSV4_OK ||
        c->gpu.ops->write(c->gpu.ctx, d, h, bytes, &c->err) != DSV4_OK) {
        fprintf(stderr, "cuda_ops_check: device buffer: %s\n", c->err.msg);
        exit(2);
    }
    return d;
}
static void dfree(chk *c, void *d) { c->gpu.ops->buf_free(c->gpu.ctx, d); }

static bool ran(chk *c, const char *name, dsv4_status sc, dsv4_status sg, dsv4_error *ec) {
    if (sc == DSV4_OK && sg == DSV4_OK) return true;
    printf("FAIL %-34s cpu status %d, cuda status %d: %s | %s\n", name, sc, sg, sc ? ec->msg : "",
           sg ? c->err.msg : "");
    c->fails++;
    c->checks++;
    return false;
}

/* compare a host reference with a device result of n floats */
static void cmp_f(chk *c, const char *name, const float *ref, const float *dev, size_t n) {
    float *got = malloc((n ? n : 1) * sizeof(float));
    if (!got) abort();
    if (c->gpu.ops->read(c->gpu.ctx, got, dev, n * sizeof(float), &c->err) != DSV4_OK) {
        printf("FAIL %-34s read back: %s\n", name, c->err.msg);
        c->fails++, c->checks++;
        free(got);
        return;
    }
    double maxd = 0, maxr = 0;
    size_t worst = 0, nonfinite = 0, differ = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i]) && isfinite(ref[i])) nonfinite++;
        const double d = fabs((double)got[i] - ref[i]);
        if (got[i] != ref[i]) differ++;
        if (d > maxd || (isnan(d) && !isnan(maxd))) maxd = d, worst = i;
        if (fabs(ref[i]) > maxr) maxr = fabs(ref[i]);
    }
    const double rel = maxr > 0 ? maxd / maxr : maxd;
    const bool ok = nonfinite == 0 && rel <= c->tol;
    printf("%s %-34s n=%-8zu rel %.3e (|d| %.3e at %zu: %.6g vs %.6g), %zu of %zu differ%s\n",
           ok ? "ok  " : "FAIL", name, n, rel, maxd, worst, n ? got[worst] : 0.0, n ? ref[worst] : 0.0,
           differ, n, nonfinite ? ", NON-FINITE" : "");
    c->fails += !ok;
    c->checks++;
    free(got);
}

static void cmp_i(chk *c, const char *name, const int32_t *ref, const int32_t *dev, size_t n) {
    int32_t *got = malloc((n ? n : 1) * sizeof(int32_t));
    if (!got) abort();
    size_t bad = 0, first = n;
    if (c->gpu.ops->read(c->gpu.ctx, got, dev, n * sizeof(int32_t), &c->err) != DSV4_OK) bad = n;
    for (size_t i = 0; i < n && bad < n; i++)
        if (got[i] != ref[i]) {
            if (first == n) first = i;
            bad++;
        }
    printf("%s %-34s n=%-8zu %zu ids differ", bad ? "FAIL" : "ok  ", name, n, bad);
    if (first < n) printf(" (first at %zu: %d vs %d)", first, got[first], ref[first]);
    printf("\n");
    c->fails += bad != 0;
    c->checks++;
    free(got);
}

/* moe_sum_post on the device: moe_slots' rows summed in slot order from 0 are moe's output (dout) bit
 * for bit, and hc_post_slots(slots, shared) is hc_post_add(moe, shared) bit for bit. */
static void moe_sum_post_check(chk *c, const dsv4_layer_weights *L, const dsv4_config *cf, const float *dx,
                               const int32_t *dsel, const float *dwt, float clamp, const float *dout) {
    const dsv4_backend_ops *G = c->gpu.ops;
    void *gc = c->gpu.ctx;
    const uint32_t E = cf->n_embd, K = cf->n_expert_used, HC = cf->n_hc, NM = 2 * HC + HC * HC;
    float *slots = calloc((size_t)K * E, 4), *sum = calloc(E, 4), *moe = calloc(E, 4);
    float *dslots = dcopy(c, slots, (size_t)K * E * 4);
    float *b = hrand(c, E, 1.0f), *xh = hrand(c, (size_t)HC * E, 1.0f), *sp = hrand(c, NM, 1.0f);
    float *db = dcopy(c, b, (size_t)E * 4), *dxh = dcopy(c, xh, (size_t)HC * E * 4),
          *dsp = dcopy(c, sp, NM * 4);
    float *dpa = dcopy(c, xh, (size_t)HC * E * 4), *dps = dcopy(c, xh, (size_t)HC * E * 4);
    float *pa = calloc((size_t)HC * E, 4), *ps = calloc((size_t)HC * E, 4);
    const dsv4_status s1 = G->moe_slots(gc, &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps, dx, 1,
                                        dsel, dwt, K, clamp, dslots, &c->err);
    const dsv4_status s2 = s1 ? s1 : G->hc_post_add(gc, dout, db, dxh, dsp, 1, HC, E, dpa, &c->err);
    const dsv4_status s3 = s2 ? s2 : G->hc_post_slots(gc, dslots, K, db, dxh, dsp, 1, HC, E, dps, &c->err);
    if (s3 == DSV4_OK && G->read(gc, slots, dslots, (size_t)K * E * 4, &c->err) == DSV4_OK &&
        G->read(gc, moe, dout, (size_t)E * 4, &c->err) == DSV4_OK &&
        G->read(gc, pa, dpa, (size_t)HC * E * 4, &c->err) == DSV4_OK &&
        G->read(gc, ps, dps, (size_t)HC * E * 4, &c->err) == DSV4_OK) {
        for (uint32_t d = 0; d < E; d++) {
            float acc = 0.0f;
            for (uint32_t k = 0; k < K; k++) acc += slots[(size_t)k * E + d];
            sum[d] = acc;
        }
        const bool ok1 = memcmp(sum, moe, (size_t)E * 4) == 0, ok2 = memcmp(pa, ps, (size_t)HC * E * 4) == 0;
        printf("%s %-34s the slot rows summed in order == moe (bitwise)\n", ok1 ? "ok  " : "FAIL",
               "moe_slots n=1");
        printf("%s %-34s == hc_post_add(moe, shared) (bitwise)\n", ok2 ? "ok  " : "FAIL",
               "hc_post_slots n=1");
        c->fails += !ok1 + !ok2;
        c->checks += 2;
    } else {
        printf("FAIL %-34s %s\n", "moe_sum_post n=1", c->err.msg);
        c->fails++, c->checks++;
    }
    free(slots), free(sum), free(moe), free(b), free(xh), free(sp), free(pa), free(ps);
    dfree(c, dslots), dfree(c, db), dfree(c, dxh), dfree(c, dsp), dfree(c, dpa), dfree(c, dps);
}

/* KV rows of `type` (backend.h: F32, F16, DSV4_KV_FP4) holding src's rows; *bytes gets the size */
static void *typed_rows(const float *src, size_t n_rows, uint32_t width, uint32_t type, size_t *bytes) {
    const size_t rb = type == DSV4_KV_FP4     ? (size_t)width / 32 * DSV4_KV_FP4_BLOCK_BYTES
                      : type == DSV4_TYPE_F16 ? (size_t)width * 2
                                              : (size_t)width * 4;
    *bytes = n_rows * rb;
    unsigned char *p = malloc(*bytes ? *bytes : 1);
    if (!p) abort();
    for (size_t r = 0; r < n_rows; r++) {
        const float *x = src + r * width;
        if (type == DSV4_KV_FP4)
            dsv4_fp4_pack_row(x, width, p + r * rb);
        else if (type == DSV4_TYPE_F16)
            for (uint32_t i = 0; i < width; i++) ((uint16_t *)(p + r * rb))[i] = dsv4_f32_to_f16(x[i]);
        else
            memcpy(p + r * rb, x, rb);
    }
    return p;
}

static const char *kv_type_name(uint32_t t) {
    return t == DSV4_KV_FP4 ? "fp4" : t == DSV4_TYPE_F16 ? "f16" : "f32";
}

/* compare a host reference with a device result byte for byte */
static void cmp_bytes(chk *c, const char *name, const void *ref, const void *dev, size_t n) {
    unsigned char *got = malloc(n ? n : 1);
    if (!got) abort();
    size_t bad = 0, first = n;
    if (c->gpu.ops->read(c->gpu.ctx, got, dev, n, &c->err) != DSV4_OK) bad = n;
    for (size_t i = 0; i < n && bad < n; i++)
        if (got[i] != ((const unsigned char *)ref)[i]) {
            if (first == n) first = i;
            bad++;
        }
    printf("%s %-34s n=%-8zu %zu bytes differ\n", bad ? "FAIL" : "ok  ", name, n, bad);
    c->fails += bad != 0;
    c->checks++;
    free(got);
}

#define CPU c->cpu.ops
#define GPU c->gpu.ops
#define CC c->cpu.ctx
#define GC c->gpu.ctx

static void check_matmul(chk *c, const char *name, const dsv4_tensor *w, uint64_t row0, uint64_t n_out,
                         uint64_t x_stride, uint32_t n) {
    if (!dsv4_tensor_present(w)) return;
    const uint64_t in = w->ne[0];
    const size_t xs = (size_t)x_stride * n, ys = (size_t)(n_out + 3) * n;
    float *x = hrand(c, xs, 1.0f), *y = calloc(ys, sizeof(float));
    float *dx = dcopy(c, x, xs * 4), *dy = dcopy(c, y, ys * 4);
    dsv4_error ec = {0};
    char label[96];
    snprintf(label, sizeof label, "matmul %s %s n=%u", name, dsv4_type_name(w->type), n);
    if (ran(c, label, CPU->matmul(CC, w, row0, n_out, x, x_stride, n, y, n_out + 3, &ec),
            GPU->matmul(GC, w, row0, n_out, dx, x_stride, n, dy, n_out + 3, &c->err), &ec))
        cmp_f(c, label, y, dy, ys);
    (void)in;
    free(x), free(y), dfree(c, dx), dfree(c, dy);
}

/* matmul_grouped on the device against the CPU's matmul run once per group (the op's
 * definition): G groups of rows(W)/G rows, group g reading inputs [g*in, (g+1)*in) of each row. */
static void check_matmul_grouped(chk *c, const dsv4_tensor *w, uint32_t G, uint32_t n) {
    if (!dsv4_tensor_present(w) || !GPU->matmul_grouped) return;
    const uint64_t in = w->ne[0], R = w->ne[1] / G, xst = in * G, yst = R * G + 5;
    const size_t xs = (size_t)xst * n, ys = (size_t)yst * n;
    float *x = hrand(c, xs, 1.0f), *y = calloc(ys, sizeof(float));
    float *dx = dcopy(c, x, xs * 4), *dy = dcopy(c, y, ys * 4);
    dsv4_error ec = {0};
    dsv4_status sc = DSV4_OK;
    for (uint32_t g = 0; g < G && sc == DSV4_OK; g++)
        sc = CPU->matmul(CC, w, (uint64_t)g * R, R, x + (uint64_t)g * in, xst, n, y + (uint64_t)g * R, yst,
                         &ec);
    char label[96];
    snprintf(label, sizeof label, "matmul_grouped %s G=%u n=%u", dsv4_type_name(w->type), G, n);
    if (ran(c, label, sc, GPU->matmul_grouped(GC, w, G, dx, xst, n, dy, yst, &c->err), &ec))
        cmp_f(c, label, y, dy, ys);
    free(x), free(y), dfree(c, dx), dfree(c, dy);
}

/* matmul_multi on the device: each item against the CPU's matmul (the op's definition), and bit
 * for bit against the device's own single matmul of the item (one launch must not change a row). */
static void check_matmul_multi(chk *c, const char *name, const dsv4_tensor *const *ws, uint32_t n_items,
                               uint32_t n) {
    if (!GPU->matmul_multi || n_items > 8) return;
    for (uint32_t i = 0; i < n_items; i++)
        if (!dsv4_tensor_present(ws[i]) || ws[i]->ne[0] != ws[0]->ne[0]) return;
    const uint64_t in = ws[0]->ne[0];
    float *x = hrand(c, (size_t)in * n, 1.0f), *dx = dcopy(c, x, (size_t)in * n * 4);
    dsv4_matmul_item it[8];
    float *ref[8], *dy[8], *dy1[8];
    size_t ys[8];
    dsv4_error ec = {0};
    dsv4_status sc = DSV4_OK, s1 = DSV4_OK;
    for (uint32_t i = 0; i < n_items; i++) {
        const uint64_t rows = ws[i]->ne[1];
        ys[i] = (size_t)rows * n;
        ref[i] = calloc(ys[i], sizeof(float));
        if (!ref[i]) abort();
        dy[i] = dcopy(c, ref[i], ys[i] * 4);
        dy1[i] = dcopy(c, ref[i], ys[i] * 4);
        it[i] = (dsv4_matmul_item){ws[i], 0, rows, dx, in, dy[i], rows};
        if (sc == DSV4_OK) sc = CPU->matmul(CC, ws[i], 0, rows, x, in, n, ref[i], rows, &ec);
        if (s1 == DSV4_OK) s1 = GPU->matmul(GC, ws[i], 0, rows, dx, in, n, dy1[i], rows, &c->err);
    }
    char label[96];
    snprintf(label, sizeof label, "matmul_multi %s x%u n=%u", name, n_items, n);
    if (s1 != DSV4_OK) {
        printf("FAIL %-34s single matmul: %s\n", label, c->err.msg);
        c->fails++, c->checks++;
    } else if (ran(c, label, sc, GPU->matmul_multi(GC, it, n_items, n, &c->err), &ec)) {
        for (uint32_t i = 0; i < n_items; i++) {
            cmp_f(c, label, ref[i], dy[i], ys[i]);
            float *a = malloc(ys[i] * 4), *b = malloc(ys[i] * 4);
            if (!a || !b) abort();
            size_t differ = 0;
            if (GPU->read(GC, a, dy[i], ys[i] * 4, &c->err) != DSV4_OK ||
                GPU->read(GC, b, dy1[i], ys[i] * 4, &c->err) != DSV4_OK)
                differ = ys[i];
            for (size_t j = 0; j < ys[i] && differ < ys[i]; j++) differ += memcmp(&a[j], &b[j], 4) != 0;
            printf("%s %-34s item %u: %zu of %zu values differ from the single matmul\n",
                   differ ? "FAIL" : "ok  ", label, i, differ, ys[i]);
            c->fails += differ != 0;
            c->checks++;
            free(a), free(b);
        }
    }
    for (uint32_t i = 0; i < n_items; i++) free(ref[i]), dfree(c, dy[i]), dfree(c, dy1[i]);
    free(x), dfree(c, dx);
}

/* Q8_0 with n >= 2 tokens (the tensor-core prefill path, cuda_gemm_q8_0_mma.cu, or with
 * DSV4_CUDA_PREFILL_MMA=0 the generic kernel): every value must equal the CPU's bit for bit, and
 * the 3 floats after each output row must stay untouched. */
static void check_matmul_bitwise(chk *c, const char *name, const dsv4_tensor *w, uint64_t row0,
                                 uint64_t n_out, uint64_t x_stride, uint32_t n) {
    if (!dsv4_tensor_present(w) || w->type != DSV4_TYPE_Q8_0) return;
    const size_t xs = (size_t)x_stride * n, ys = (size_t)(n_out + 3) * n;
    float *x = hrand(c, xs, 1.0f), *y = calloc(ys, sizeof(float)), *got = malloc(ys * sizeof(float));
    if (!y || !got) abort();
    float *dx = dcopy(c, x, xs * 4), *dy = dcopy(c, y, ys * 4);
    dsv4_error ec = {0};
    char label[96];
    snprintf(label, sizeof label, "matmul bitwise %s n=%u", name, n);
    if (ran(c, label, CPU->matmul(CC, w, row0, n_out, x, x_stride, n, y, n_out + 3, &ec),
            GPU->matmul(GC, w, row0, n_out, dx, x_stride, n, dy, n_out + 3, &c->err), &ec)) {
        size_t differ = 0, first = ys;
        if (GPU->read(GC, got, dy, ys * sizeof(float), &c->err) != DSV4_OK) differ = ys;
        for (size_t i = 0; i < ys && differ < ys; i++)
            if (memcmp(&got[i], &y[i], sizeof(float)) != 0) {
                if (first == ys) first = i;
                differ++;
            }
        printf("%s %-34s n=%-8zu %zu of %zu bitwise equal", differ ? "FAIL" : "ok  ", label, ys, ys - differ,
               ys);
        if (first < ys) printf(" (first at %zu: %.9g vs %.9g)", first, got[first], y[first]);
        printf("\n");
        c->fails += differ != 0;
        c->checks++;
    }
    free(x), free(y), free(got), dfree(c, dx), dfree(c, dy);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Set an environment switch for a section of checks; blas_restore puts the previous value back. */
typedef struct {
    const char *name;
    bool had;
    char prev[32];
} env_saved;
static env_saved env_set(const char *name, const char *value) {
    env_saved e = {name, false, ""};
    const char *v = getenv(name);
    if (v) e.had = true, snprintf(e.prev, sizeof e.prev, "%s", v);
    setenv(name, value, 1);
    return e;
}
static void env_restore(const env_saved *e) {
    if (e->had)
        setenv(e->name, e->prev, 1);
    else
        unsetenv(e->name);
}

static uint64_t blas_calls(chk *c) {
    uint64_t n = 0;
    dsv4_backend_cuda_blas_calls(&c->gpu, &n, NULL, NULL, &c->err);
    return n;
}
/* Q8_0 prefill products run on the exact warpgroup path (cuda_gemm_q8_wg.h) so far */
static uint64_t q8wg_calls(chk *c) {
    dsv4_device_info di;
    return dsv4_backend_device_info(&c->gpu, &di, &c->err) == DSV4_OK ? di.q8_wg_products : 0;
}

/* The HC pre step of a prefill chunk (n >= 256). Five runs: the default (the TF32 mix kernel,
 * cuda_hc_mix_tc.h), DSV4_CUDA_HC_SUM_BLOCKS=4 (the weighted sum over 4 blocks a token), the cuBLAS
 * mix (DSV4_CUDA_HC_MIX=blas) with its rmsnorm folded into the f16 conversion and without
 * (DSV4_CUDA_HC_MIX_FOLD=0), and DSV4_CUDA_HC_SUM_VEC=0 (the weighted sum's scalar loop). Required: the
 * default counted on the TF32 kernel and the cuBLAS run as folded (at the flash width), runs 1 and 4
 * bitwise run 0 and run 3 bitwise run 2 (u and split), the TF32 run within 1e-4 and the cuBLAS run
 * within 2e-3 (f16 operands) of the CPU. */
static void check_hc_pre_prefill(chk *c, const dsv4_model *m, uint32_t n) {
    const dsv4_config *cf = &m->cfg;
    const dsv4_layer_weights *L0 = &m->layers[0];
    const uint32_t HC = cf->n_hc, E = cf->n_embd, MIX = dsv4_cfg_hc_mix(cf);
    const size_t HD = (size_t)HC * E;
    dsv4_error ec = {0};
    float *x = hrand(c, (size_t)n * HD, 2.0f), *u = calloc((size_t)n * E, 4),
          *sp = calloc((size_t)n * MIX, 4);
    float *dx = dcopy(c, x, (size_t)n * HD * 4);
    enum { RUNS = 5 };
    float *du[RUNS], *dsp[RUNS], *gu[RUNS], *gs[RUNS];
    const char *cfg_env[RUNS][2][2] = {{{NULL, NULL}, {NULL, NULL}},
                                       {{"DSV4_CUDA_HC_SUM_BLOCKS", "4"}, {NULL, NULL}},
                                       {{"DSV4_CUDA_HC_MIX", "blas"}, {NULL, NULL}},
                                       {{"DSV4_CUDA_HC_MIX", "blas"}, {"DSV4_CUDA_HC_MIX_FOLD", "0"}},
                                       {{"DSV4_CUDA_HC_SUM_VEC", "0"}, {NULL, NULL}}};
    const char *run_name[RUNS] = {"TF32 mix", "HC_SUM_BLOCKS=4", "cuBLAS mix", "cuBLAS mix, HC_MIX_FOLD=0",
                                  "HC_SUM_VEC=0"};
    const int ref_of[RUNS] = {-1, 0, -1, 2, 0}; /* the run each must equal bit for bit */
    dsv4_device_info di[RUNS][2];
    memset(di, 0, sizeof di);
    bool ok = true;
    for (int k = 0; k < RUNS && ok; k++) {
        du[k] = dcopy(c, u, (size_t)n * E * 4), dsp[k] = dcopy(c, sp, (size_t)n * MIX * 4);
        gu[k] = malloc((size_t)n * E * 4), gs[k] = malloc((size_t)n * MIX * 4);
        env_saved es[2] = {{0}, {0}};
        for (int v = 0; v < 2; v++)
            if (cfg_env[k][v][0]) es[v] = env_set(cfg_env[k][v][0], cfg_env[k][v][1]);
        dsv4_backend_device_info(&c->gpu, &di[k][0], &c->err);
        const dsv4_status st =
            c->gpu.ops->hc_pre(c->gpu.ctx, &L0->hc_attn_fn, &L0->hc_attn_scale, &L0->hc_attn_base, dx, n, HC,
                               E, cf->hc_sinkhorn_iter, cf->rms_eps, cf->hc_eps, du[k], dsp[k], &c->err);
        dsv4_backend_device_info(&c->gpu, &di[k][1], &c->err);
        for (int v = 1; v >= 0; v--)
            if (cfg_env[k][v][0]) env_restore(&es[v]);
        ok = ran(c, "hc_pre prefill", DSV4_OK, st, &ec) &&
             c->gpu.ops->read(c->gpu.ctx, gu[k], du[k], (size_t)n * E * 4, &c->err) == DSV4_OK &&
             c->gpu.ops->read(c->gpu.ctx, gs[k], dsp[k], (size_t)n * MIX * 4, &c->err) == DSV4_OK;
    }
    if (ok) {
        const uint64_t tc = di[0][1].hc_mix_tc - di[0][0].hc_mix_tc,
                       folded = di[2][1].blas_hc_mix_folded - di[2][0].blas_hc_mix_folded;
        const bool counts_ok = c->flash ? tc == 1 && folded == 1 : tc <= 1 && folded <= 1;
        printf("%s %-34s n=%-8u %llu on the TF32 kernel, %llu folded cuBLAS (required: %s)\n",
               counts_ok ? "ok  " : "FAIL", "hc_pre prefill mix paths", n, (unsigned long long)tc,
               (unsigned long long)folded, c->flash ? "1 and 1" : "0 or 1 each");
        c->fails += !counts_ok, c->checks++;
        for (int k = 1; k < RUNS; k++) {
            const int r = ref_of[k];
            if (r < 0) continue;
            size_t differ = 0;
            for (size_t i = 0; i < (size_t)n * E; i++) differ += memcmp(&gu[r][i], &gu[k][i], 4) != 0;
            for (size_t i = 0; i < (size_t)n * MIX; i++) differ += memcmp(&gs[r][i], &gs[k][i], 4) != 0;
            char lb[64];
            snprintf(lb, sizeof lb, "hc_pre prefill %s", run_name[k]);
            printf("%s %-34s n=%-8u %zu of %zu values differ from the %s (required: 0)\n",
                   differ ? "FAIL" : "ok  ", lb, n, differ, (size_t)n * (E + MIX), run_name[r]);
            c->fails += differ != 0, c->checks++;
        }
        if (ran(c, "hc_pre prefill cpu",
                c->cpu.ops->hc_pre(c->cpu.ctx, &L0->hc_attn_fn, &L0->hc_attn_scale, &L0->hc_attn_base, x, n,
                                   HC, E, cf->hc_sinkhorn_iter, cf->rms_eps, cf->hc_eps, u, sp, &ec),
                DSV4_OK, &ec)) {
            char lb[64];
            const double tol = c->tol;
            for (int k = 0; k <= 2; k += 2) {
                c->tol = k == 0 ? 1e-4 : 2e-3; /* TF32 hi + lo operands; f16 operands (check_matmul_blas's) */
                snprintf(lb, sizeof lb, "hc_pre n=%u u (%s)", n, run_name[k]);
                cmp_f(c, lb, u, du[k], (size_t)n * E);
                snprintf(lb, sizeof lb, "hc_pre n=%u split (%s)", n, run_name[k]);
                cmp_f(c, lb, sp, dsp[k], (size_t)n * MIX);
            }
            c->tol = tol;
        }
    }
    for (int k = 0; k < RUNS; k++)
        if (k == 0 || ok) dfree(c, du[k]), dfree(c, dsp[k]), free(gu[k]), free(gs[k]);
    free(x), free(u), free(sp), dfree(c, dx);
}

/* float64 of the exact operands of weight row `row` and activation row x (in values): the CPU's
 * Q8_0 activation values for Q8_0 weights, x itself for F16 weights. */
static double exact_dot(const dsv4_tensor *w, uint64_t row, const float *x, uint64_t in) {
    const uint8_t *wr = (const uint8_t *)w->data + row * w->row_bytes;
    double s = 0;
    if (w->type == DSV4_TYPE_F16) {
        for (uint64_t k = 0; k < in; k++) s += (double)dsv4_f16_to_f32(((const uint16_t *)wr)[k]) * x[k];
        return s;
    }
    const dsv4_block_q8_0 *b = (const dsv4_block_q8_0 *)wr;
    dsv4_q8_0_act xq;
    for (uint64_t j = 0; j < in / 32; j++) {
        quant_act_q8_0(x + 32 * j, &xq, 32);
        const double dw = dsv4_f16_to_f32(b[j].d);
        for (int k = 0; k < 32; k++) s += (double)b[j].qs[k] * dw * ((double)xq.qs[k] * xq.d);
    }
    return s;
}

/* A prefill product on cuBLAS (cuda_gemm_blas.h, n >= 256 tokens): not bitwise. max|d| / max|ref|
 * against the CPU must stay <= 2e-3 per token, when `big` too (token 1 scaled by 2e5, token 3 by
 * 3e6: the power-of-two row scaling); with the two-term operands (the defaults) also <= 1e-5
 * against float64 of the exact operands (exact_dot; one term per side gives ~2e-4 on random data);
 * the product must have run on cuBLAS (its counter grew) and the 3 floats after each output row
 * stay untouched. groups > 1: the grouped op (one batched GEMM). A Q8_0 product the exact warpgroup
 * path took instead (its counter grew; sm_90) must equal the CPU's bit for bit (with its default,
 * exact update). */
static void check_matmul_blas(chk *c, const char *name, const dsv4_tensor *w, uint64_t row0, uint64_t n_out,
                              uint32_t groups, uint32_t n, bool big) {
    if (!dsv4_tensor_present(w) || (w->type != DSV4_TYPE_Q8_0 && w->type != DSV4_TYPE_F16)) return;
    const uint64_t in = w->ne[0], xs = in * groups, width = n_out * groups, ys = width + 3;
    float *x = hrand(c, (size_t)xs * n, 1.0f), *y = calloc((size_t)ys * n, 4),
          *got = malloc((size_t)ys * n * 4);
    if (!y || !got) abort();
    if (big && n > 3) {
        for (uint64_t i = 0; i < xs; i++) x[xs + i] *= 2.0e5f, x[3 * xs + i] *= 3.0e6f;
    }
    float *dx = dcopy(c, x, (size_t)xs * n * 4), *dy = dcopy(c, y, (size_t)ys * n * 4);
    dsv4_error ec = {0};
    char label[96];
    snprintf(label, sizeof label, "matmul blas %s %s n=%u%s", dsv4_type_name(w->type), name, n,
             big ? " big" : "");
    const uint64_t calls0 = blas_calls(c), wg0 = q8wg_calls(c);
    dsv4_status sc = DSV4_OK; /* the CPU reference: one matmul per group */
    for (uint32_t g = 0; g < groups && sc == DSV4_OK; g++)
        sc = CPU->matmul(CC, w, row0 + (uint64_t)g * n_out, n_out, x + (uint64_t)g * in, xs, n,
                         y + (uint64_t)g * n_out, ys, &ec);
    const dsv4_status sg = groups > 1 ? GPU->matmul_grouped(GC, w, groups, dx, xs, n, dy, ys, &c->err)
                                      : GPU->matmul(GC, w, row0, n_out, dx, xs, n, dy, ys, &c->err);
    if (ran(c, label, sc, sg, &ec)) {
        bool ok = GPU->read(GC, got, dy, (size_t)ys * n * 4, &c->err) == DSV4_OK;
        const uint64_t calls = blas_calls(c) - calls0, wg = q8wg_calls(c) - wg0;
        const bool wg_exact = wg > 0 && dsv4_cuda_q8_wg_exact();
        const bool terms =
            !wg && (w->type == DSV4_TYPE_F16 ? dsv4_cuda_f16_two_term() : dsv4_cuda_q8_three_terms());
        double worst = 0, worst_x = 0;
        size_t pad = 0, differ = 0;
        for (uint32_t t = 0; ok && t < n; t++) {
            double d = 0, r = 0, dx = 0, rx = 0;
            const bool exact_tok = terms && (t < 8 || t % 37 == 0 || t == 1 || t == 3); /* a sample */
            for (uint64_t o = 0; o < width; o++) {
                const double g = got[(size_t)t * ys + o], ref = y[(size_t)t * ys + o];
                differ += memcmp(&got[(size_t)t * ys + o], &y[(size_t)t * ys + o], 4) != 0;
                if (!(fabs(g - ref) <= d)) d = fabs(g - ref);
                if (fabs(ref) > r) r = fabs(ref);
                if (exact_tok) {
                    const uint64_t grp = o / n_out;
                    const double e = exact_dot(w, row0 + o, x + (size_t)t * xs + grp * in, in);
                    if (!(fabs(g - e) <= dx)) dx = fabs(g - e);
                    if (fabs(e) > rx) rx = fabs(e);
                }
            }
            for (uint64_t o = width; o < ys; o++) pad += got[(size_t)t * ys + o] != 0.0f;
            const double rel = r > 0 ? d / r : d, relx = rx > 0 ? dx / rx : dx;
            if (!(rel <= worst)) worst = rel;
            if (!(relx <= worst_x)) worst_x = relx;
        }
        ok = ok && worst <= 2e-3 && (!terms || worst_x <= 1e-5) && pad == 0 && calls + wg >= 1 &&
             (!wg_exact || differ == 0);
        char exact[80] = "";
        if (terms) snprintf(exact, sizeof exact, ", to the exact operands %.3e (<= 1e-5)", worst_x);
        if (wg)
            snprintf(exact, sizeof exact, ", %zu outputs not bitwise the CPU%s", differ,
                     wg_exact ? " (must be 0)" : "");
        printf(
            "%s %-44s rel to cpu %.3e (<= 2e-3, worst token)%s, %llu cuBLAS + %llu warpgroup products, %zu "
            "padding writes\n",
            ok ? "ok  " : "FAIL", label, worst, exact, (unsigned long long)calls, (unsigned long long)wg,
            pad);
        c->fails += !ok;
        c->checks++;
    }
    free(x), free(y), free(got), dfree(c, dx), dfree(c, dy);
}

/* matmul_multi of n >= 256 tokens on cuBLAS, the items sharing one input: each item against the
 * CPU's matmul (rel <= 2e-3), and the activation conversions shared (a Q8_0 item after a Q8_0
 * item, an F16 item after an F16 item: at least n_items - 2 of them). */
static void check_multi_blas(chk *c, const char *name, const dsv4_tensor *const *ws, int n_items,
                             uint32_t n) {
    if (!GPU->matmul_multi || n_items > 8) return;
    for (int i = 0; i < n_items; i++)
        if (!dsv4_tensor_present(ws[i])) return;
    const uint64_t in = ws[0]->ne[0];
    float *x = hrand(c, (size_t)in * n, 1.0f), *dx = dcopy(c, x, (size_t)in * n * 4);
    dsv4_matmul_item it[8];
    float *dy[8] = {0}, *ref[8] = {0};
    dsv4_error ec = {0};
    bool ok = true;
    for (int i = 0; ok && i < n_items; i++) {
        const uint64_t no = ws[i]->ne[1];
        ref[i] = calloc((size_t)no * n, 4);
        ok = ref[i] && GPU->buf_alloc(GC, (size_t)no * n * 4, (void **)&dy[i], &c->err) == DSV4_OK &&
             CPU->matmul(CC, ws[i], 0, no, x, in, n, ref[i], no, &ec) == DSV4_OK;
        it[i] = (dsv4_matmul_item){ws[i], 0, no, dx, in, dy[i], no};
    }
    uint64_t sh0 = 0, sh1 = 0, ca0 = 0, ca1 = 0;
    dsv4_backend_cuda_blas_calls(&c->gpu, &ca0, &sh0, NULL, &c->err);
    ca0 += q8wg_calls(c); /* a Q8_0 item may take the warpgroup path instead */
    ok = ok && GPU->matmul_multi(GC, it, (uint32_t)n_items, n, &c->err) == DSV4_OK;
    dsv4_backend_cuda_blas_calls(&c->gpu, &ca1, &sh1, NULL, &c->err);
    ca1 += q8wg_calls(c);
    double worst = 0;
    for (int i = 0; ok && i < n_items; i++) {
        const uint64_t no = ws[i]->ne[1];
        float *got = malloc((size_t)no * n * 4);
        ok = got && GPU->read(GC, got, dy[i], (size_t)no * n * 4, &c->err) == DSV4_OK;
        double d = 0, r = 0;
        for (size_t k = 0; ok && k < (size_t)no * n; k++) {
            if (!(fabs((double)got[k] - ref[i][k]) <= d)) d = fabs((double)got[k] - ref[i][k]);
            if (fabs(ref[i][k]) > r) r = fabs(ref[i][k]);
        }
        const double rel = r > 0 ? d / r : d;
        if (!(rel <= worst)) worst = rel;
        free(got);
    }
    const uint64_t shared = sh1 - sh0, calls = ca1 - ca0;
    ok = ok && worst <= 2e-3 && calls == (uint64_t)n_items && shared + 2 >= (uint64_t)n_items;
    printf("%s matmul_multi blas %-26s n=%u: %d items, worst rel to cpu %.3e, %llu cuBLAS / warpgroup "
           "products, %llu "
           "conversions shared\n",
           ok ? "ok  " : "FAIL", name, n, n_items, worst, (unsigned long long)calls,
           (unsigned long long)shared);
    c->fails += !ok;
    c->checks++;
    for (int i = 0; i < n_items; i++) {
        free(ref[i]);
        if (dy[i]) dfree(c, dy[i]);
    }
    free(x), dfree(c, dx);
}

/* Seconds per GPU matmul of n tokens (after one warm-up) with the switch `env` set to `value` for the
 * call (the switches are read on every call); dy receives the device result. */
static double time_matmul_env(chk *c, const dsv4_tensor *w, uint64_t n_out, const float *dx, uint32_t n,
                              float *dy, const char *env, const char *value, int reps) {
    env_saved e = env_set(env, value);
    double t = -1;
    if (GPU->matmul(GC, w, 0, n_out, dx, w->ne[0], n, dy, n_out, &c->err) == DSV4_OK &&
        GPU->sync(GC, &c->err) == DSV4_OK) {
        const double t0 = now_s();
        bool ok = true;
        for (int r = 0; r < reps && ok; r++)
            ok = GPU->matmul(GC, w, 0, n_out, dx, w->ne[0], n, dy, n_out, &c->err) == DSV4_OK;
        if (ok && GPU->sync(GC, &c->err) == DSV4_OK) t = (now_s() - t0) / reps;
    }
    env_restore(&e);
    return t;
}

/* One product of n random tokens timed twice, `env` = va (reps_a calls) then vb (reps_b), the two
 * device results compared: *ta, *tb (seconds, -1 on failure), *differ (values not bitwise equal)
 * and *rel (max|a - b| / max|b|). false (and a FAIL line under `what`) when the buffers fail. */
static bool time_pair(chk *c, const char *what, const char *name, const dsv4_tensor *w, uint32_t n,
                      const char *env, const char *va, int reps_a, const char *vb, int reps_b, double *ta,
                      double *tb, size_t *differ, double *rel) {
    const uint64_t in = w->ne[0], n_out = w->ne[1];
    const size_t xs = (size_t)in * n, ys = (size_t)n_out * n;
    float *x = hrand(c, xs, 1.0f), *a = malloc(ys * 4), *b = malloc(ys * 4);
    if (!a || !b) abort();
    float *dx = dcopy(c, x, xs * 4), *dy = NULL, *dy2 = NULL;
    if (GPU->buf_alloc(GC, ys * 4, (void **)&dy, &c->err) != DSV4_OK ||
        GPU->buf_alloc(GC, ys * 4, (void **)&dy2, &c->err) != DSV4_OK) {
        printf("FAIL %s %s: %s\n", what, name, c->err.msg);
        c->fails++, c->checks++;
        free(x), free(a), free(b), dfree(c, dx);
        if (dy) dfree(c, dy);
        return false;
    }
    *ta = time_matmul_env(c, w, n_out, dx, n, dy, env, va, reps_a);
    *tb = time_matmul_env(c, w, n_out, dx, n, dy2, env, vb, reps_b);
    *differ = ys;
    double maxd = 0, maxr = 0;
    if (*ta > 0 && *tb > 0 && GPU->read(GC, a, dy, ys * 4, &c->err) == DSV4_OK &&
        GPU->read(GC, b, dy2, ys * 4, &c->err) == DSV4_OK) {
        *differ = 0;
        for (size_t i = 0; i < ys; i++) {
            *differ += memcmp(&a[i], &b[i], 4) != 0;
            const double d = fabs((double)a[i] - (double)b[i]);
            if (!(d <= maxd)) maxd = d;
            if (fabs((double)b[i]) > maxr) maxr = fabs((double)b[i]);
        }
    }
    *rel = maxr > 0 ? maxd / maxr : maxd;
    free(x), free(a), free(b), dfree(c, dx), dfree(c, dy), dfree(c, dy2);
    return true;
}

/* Timing of a 2048-token product: cuBLAS against the own tensor-core kernel (DSV4_CUDA_BLAS=0), the
 * same inputs; the two results compared (rel <= 2e-3). */
static void time_blas(chk *c, const char *name, const dsv4_tensor *w, uint32_t n) {
    if (!dsv4_tensor_present(w) || (w->type != DSV4_TYPE_Q8_0 && w->type != DSV4_TYPE_F16)) return;
    double tb, to, rel;
    size_t differ;
    if (!time_pair(c, "blas timing", name, w, n, "DSV4_CUDA_BLAS", "1", 5, "0", 5, &tb, &to, &differ, &rel))
        return;
    const uint64_t in = w->ne[0], n_out = w->ne[1];
    const double fl = 2.0 * (double)in * (double)n_out * n;
    const bool ok = tb > 0 && to > 0 && rel <= 2e-3;
    printf(
        "%s blas timing %-22s %s %llu->%llu n=%u: cuBLAS %.3f ms (%.1f TFLOPS), own kernel %.3f ms (%.2fx); "
        "rel %.2e\n",
        ok ? "ok  " : "FAIL", name, dsv4_type_name(w->type), (unsigned long long)in,
        (unsigned long long)n_out, n, tb * 1e3, fl / tb / 1e12, to * 1e3, to / tb, rel);
    c->fails += !ok;
    c->checks++;
}

/* Prefill timing of a Q8_0 weight: tensor cores against the generic kernel, same inputs; the two
 * device results must agree bit for bit (both are the CPU's numbers). F16: the weight type's own
 * switch, the results only compared (not bitwise). */
static void time_prefill(chk *c, const char *name, const dsv4_tensor *w, uint32_t n) {
    if (!dsv4_tensor_present(w) || (w->type != DSV4_TYPE_Q8_0 && w->type != DSV4_TYPE_F16)) return;
    const bool f16 = w->type == DSV4_TYPE_F16;
    const char *env = f16 ? "DSV4_CUDA_PREFILL_F16" : "DSV4_CUDA_PREFILL_MMA";
    double tm, tg, rel;
    size_t differ;
    if (!time_pair(c, "prefill timing", name, w, n, env, "1", 5, "0", 2, &tm, &tg, &differ, &rel)) return;
    const uint64_t in = w->ne[0], n_out = w->ne[1];
    const double ops = 2.0 * (double)in * (double)n_out * n;
    const bool bad = f16 ? !(tm > 0 && tg > 0 && rel <= 2e-3) : differ != 0;
    printf("%s prefill timing %-22s %llu->%llu n=%u: tensor cores %.3f ms (%.1f %s, %.2f us/token), "
           "generic %.3f ms (%.1fx); %zu of %zu differ (rel %.2e)\n",
           bad ? "FAIL" : "ok  ", name, (unsigned long long)in, (unsigned long long)n_out, n, tm * 1e3,
           ops / tm / 1e12, f16 ? "TFLOPS f16" : "TOPS int8", tm * 1e6 / n, tg * 1e3, tg / tm, differ,
           (size_t)n_out * n, rel);
    c->fails += bad;
    c->checks++;
}

/* F16 weights with n >= 8 tokens: the tensor-core GEMM (cuda_gemm_f16_mma.h), not bitwise. Two bounds
 * on max|d| / max|ref| over the n x n_out outputs: against the CPU's f32 result 2e-3, and against a
 * float64 sum of the operands the kernel is meant to multiply: with the two-term operand (the default
 * since session 18: hi + lo = x to ~2^-22) the f32 activations themselves, 1e-5; with
 * DSV4_CUDA_F16_TWO_TERM=0 the f16-rounded activations, 1e-4 (only the f32 accumulation differs:
 * ~sqrt(in) 2^-24; the f16 rounding of x alone gives ~3e-4 on these random inputs). The 3 floats
 * after each output row stay untouched. */
static void check_matmul_f16(chk *c, const char *name, const dsv4_tensor *w, uint64_t n_out, uint32_t n) {
    if (!dsv4_tensor_present(w) || w->type != DSV4_TYPE_F16) return;
    const bool two = dsv4_cuda_f16_two_term();
    const double bound64 = two ? 1e-5 : 1e-4;
    const uint64_t in = w->ne[0], ys = n_out + 3;
    float *x = hrand(c, (size_t)in * n, 1.0f), *y = calloc((size_t)ys * n, 4),
          *got = malloc((size_t)ys * n * 4);
    if (!y || !got) abort();
    float *dx = dcopy(c, x, (size_t)in * n * 4), *dy = dcopy(c, y, (size_t)ys * n * 4);
    dsv4_error ec = {0};
    char label[96];
    snprintf(label, sizeof label, "matmul f16 mma %s %llu->%llu n=%u", name, (unsigned long long)in,
             (unsigned long long)n_out, n);
    if (ran(c, label, CPU->matmul(CC, w, 0, n_out, x, in, n, y, ys, &ec),
            GPU->matmul(GC, w, 0, n_out, dx, in, n, dy, ys, &c->err), &ec)) {
        bool ok = GPU->read(GC, got, dy, (size_t)ys * n * 4, &c->err) == DSV4_OK;
        double d_cpu = 0, d_64 = 0, r_cpu = 0, r_64 = 0;
        size_t pad = 0;
        for (uint32_t t = 0; ok && t < n; t++) {
            const float *xt = x + (size_t)t * in;
            for (uint64_t o = 0; o < n_out; o++) {
                const uint16_t *wr = (const uint16_t *)dsv4_tensor_row(w, o);
                double s = 0;
                for (uint64_t i = 0; i < in; i++)
                    s += (double)dsv4_f16_to_f32(wr[i]) *
                         (two ? (double)xt[i] : (double)dsv4_f16_round(xt[i]));
                const double g = got[(size_t)t * ys + o], cref = y[(size_t)t * ys + o];
                if (!(fabs(g - cref) <= d_cpu)) d_cpu = fabs(g - cref);
                if (!(fabs(g - s) <= d_64)) d_64 = fabs(g - s);
                if (fabs(cref) > r_cpu) r_cpu = fabs(cref);
                if (fabs(s) > r_64) r_64 = fabs(s);
            }
            for (uint64_t o = n_out; o < ys; o++) pad += got[(size_t)t * ys + o] != 0.0f;
        }
        const double rc = r_cpu > 0 ? d_cpu / r_cpu : d_cpu, r6 = r_64 > 0 ? d_64 / r_64 : d_64;
        ok = ok && rc <= 2e-3 && r6 <= bound64 && pad == 0;
        printf("%s %-44s rel to cpu %.3e (<= 2e-3), to float64 of %s %.3e (<= %.0e), %zu padding writes\n",
               ok ? "ok  " : "FAIL", label, rc, two ? "f32 activations" : "f16 operands", r6, bound64, pad);
        c->fails += !ok;
        c->checks++;
    }
    free(x), free(y), free(got), dfree(c, dx), dfree(c, dy);
}

/* Routed experts of one token or a prefill chunk: the CPU router's selection for random logits,
 * then the op on both backends; the device result must equal the CPU's bit for bit (n == 1: the
 * fused decode path of cuda_ops_moe.cu; n >= 2: the grouped path, cuda_ops_moe_grouped.cu). */
static void check_moe_bitwise(chk *c, const dsv4_layer_weights *L, float clamp, uint32_t n) {
    const dsv4_config *cf = &c->m->cfg;
    const uint32_t NE = cf->n_expert, K = cf->n_expert_used, E = cf->n_embd;
    const dsv4_tensor *bias = dsv4_tensor_present(&L->exp_probs_b) ? &L->exp_probs_b : NULL;
    float *lg = hrand(c, (size_t)n * NE, 4.0f), *x = hrand(c, (size_t)n * E, 1.0f);
    float *wt = malloc((size_t)n * K * 4), *o = malloc((size_t)n * E * 4), *got = malloc((size_t)n * E * 4);
    int32_t *sel = malloc((size_t)n * K * 4);
    if (!wt || !o || !got || !sel) abort();
    dsv4_error ec = {0};
    char lb[96];
    snprintf(lb, sizeof lb, "moe bitwise %s/%s n=%u", dsv4_type_name(L->ffn_gate_exps.type),
             dsv4_type_name(L->ffn_down_exps.type), n);
    if (CPU->router_select(CC, lg, n, NE, K, bias, NULL, NULL, cf->expert_weights_scale, sel, wt, &ec) !=
        DSV4_OK) {
        printf("FAIL %-34s cpu router: %s\n", lb, ec.msg);
        c->fails++, c->checks++;
    } else {
        float *dx = dcopy(c, x, (size_t)n * E * 4), *dwt = dcopy(c, wt, (size_t)n * K * 4);
        int32_t *dsel = dcopy(c, sel, (size_t)n * K * 4);
        float *dout = dcopy(c, o, (size_t)n * E * 4);
        if (ran(c, lb,
                CPU->moe(CC, &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps, x, n, sel, wt, K, clamp,
                         o, &ec),
                GPU->moe(GC, &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps, dx, n, dsel, dwt, K,
                         clamp, dout, &c->err),
                &ec)) {
            const size_t ys = (size_t)n * E;
            /* The block dots are exact and summed in the CPU's order, but SiLU's expf on the device is
             * correctly rounded while glibc's is 1 ulp off in rare cases (docs/VALIDATION.md "CUDA"); such
             * a mid value can then round to another Q8_K code, which moves every output of that slot by
             * one code step times the down weights: up to ~2e-4 of the largest output (H200, session 4:
             * 8.9e-5 of 0.45 at n = 1 with the inputs of that run). So report the bitwise count, and fail
             * beyond that: max |diff| > 1e-3 of the largest reference value (the ops check's tolerance). */
            size_t differ = 0, first = ys;
            double maxd = 0, maxr = 0;
            bool read_ok = GPU->read(GC, got, dout, ys * 4, &c->err) == DSV4_OK;
            if (!read_ok) differ = ys;
            for (size_t i = 0; read_ok && i < ys; i++) {
                const double r = fabs((double)o[i]), d = fabs((double)got[i] - (double)o[i]);
                if (r > maxr) maxr = r;
                if (!(d <= maxd)) maxd = d; /* NaN propagates as a failure */
                if (memcmp(&got[i], &o[i], 4) != 0) {
                    if (first == ys) first = i;
                    differ++;
                }
            }
            const bool bad = !read_ok || !(maxd <= 1e-3 * (maxr > 0 ? maxr : 1));
            printf("%s %-34s n=%-8zu %zu of %zu bitwise equal, max|d| %.3g (max|ref| %.3g)",
                   bad ? "FAIL" : "ok  ", lb, ys, ys - differ, ys, maxd, maxr);
            if (first < ys) printf(" (first at %zu: %.9g vs %.9g)", first, got[first], o[first]);
            printf("\n");
            c->fails += bad;
            c->checks++;
        }
        dfree(c, dx), dfree(c, dwt), dfree(c, dsel), dfree(c, dout);
    }
    free(lg), free(x), free(wt), free(o), free(got), free(sel);
}

/* Seconds per GPU moe call (after one warm-up) with the path that `env` switches on or off
 * (DSV4_CUDA_MOE_GROUPED, DSV4_CUDA_MOE_DECODE_FUSED: read on every call). */
static double time_moe(chk *c, const dsv4_layer_weights *L, float clamp, const float *dx, uint32_t n,
                       const int32_t *dsel, const float *dwt, float *dout, const char *env, bool on,
                       int reps) {
    const char *prev = getenv(env);
    char saved[16] = "";
    if (prev) snprintf(saved, sizeof saved, "%s", prev);
    setenv(env, on ? "1" : "0", 1);
    const uint32_t K = c->m->cfg.n_expert_used;
    double t = -1;
    if (GPU->moe(GC, &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps, dx, n, dsel, dwt, K, clamp, dout,
                 &c->err) == DSV4_OK &&
        GPU->sync(GC, &c->err) == DSV4_OK) {
        const double t0 = now_s();
        bool ok = true;
        for (int r = 0; r < reps && ok; r++)
            ok = GPU->moe(GC, &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps, dx, n, dsel, dwt, K,
                          clamp, dout, &c->err) == DSV4_OK;
        if (ok && GPU->sync(GC, &c->err) == DSV4_OK) t = (now_s() - t0) / reps;
    }
    if (prev)
        setenv(env, saved, 1);
    else
        unsetenv(env);
    return t;
}

static uint64_t moe_f16_calls(chk *c) {
    dsv4_device_info di;
    return dsv4_backend_device_info(&c->gpu, &di, &c->err) == DSV4_OK ? di.moe_f16_products : 0;
}
/* of them, on the warpgroup kernel (DSV4_CUDA_MOE_WS set, cuda_moe_ws.h) */
static uint64_t moe_ws_calls(chk *c) {
    dsv4_device_info di;
    return dsv4_backend_device_info(&c->gpu, &di, &c->err) == DSV4_OK ? di.moe_ws_products : 0;
}

/* Routed experts of a large chunk with the f16 products (cuda_ops_moe_half.cu, n >= 256): not
 * bitwise. Per token, max|d| / max|ref| against the CPU must stay <= 1e-2 (f16 operands in gate,
 * up and down; the mid's Q8_K rounding then moves some codes by one step); the path must have run
 * (its counter grew). `big`: token 1 scaled by 1e5 (the row's power-of-two scaling), run without the
 * SwiGLU clamp: with it nearly every gate and up of that token saturate and the few near the clamp
 * or near 0 decide the output, where an f16 operand's error moves them (a property of the
 * arithmetic, not of the scaling). `timing`: the time against the exact kernels
 * (DSV4_CUDA_MOE_F16=0), the 8-warp variant (DSV4_CUDA_MOE_F16_WARPS=8) and the f16 gate/up alone
 * (=gate_up) on the same selection. With DSV4_CUDA_MOE_WS set (1, 2, down, gateup) the products it names
 * must have run on the warpgroup kernel (its counter grew with the f16 one). */
static void check_moe_half(chk *c, const dsv4_layer_weights *L, float clamp, uint32_t n, bool big,
                           bool timing) {
    const dsv4_config *cf = &c->m->cfg;
    const uint32_t NE = cf->n_expert, K = cf->n_expert_used, E = cf->n_embd;
    if (L->ffn_gate_exps.type != DSV4_TYPE_IQ2_XXS) return;
    const dsv4_tensor *bias = dsv4_tensor_present(&L->exp_probs_b) ? &L->exp_probs_b : NULL;
    float *lg = hrand(c, (size_t)n * NE, 4.0f), *x = hrand(c, (size_t)n * E, 1.0f);
    float *wt = malloc((size_t)n * K * 4), *o = malloc((size_t)n * E * 4), *got = malloc((size_t)n * E * 4);
    int32_t *sel = malloc((size_t)n * K * 4);
    if (!wt || !o || !got || !sel) abort();
    if (big)
        for (uint32_t i = 0; i < E; i++) x[E + i] *= 1.0e5f;
    dsv4_error ec = {0};
    char lb[96];
    const char *wv = getenv("DSV4_CUDA_MOE_F16_WARPS"), *sv = getenv("DSV4_CUDA_MOE_F16");
    snprintf(lb, sizeof lb, "moe f16 %s/%s n=%u%s%s%s%s%s", dsv4_type_name(L->ffn_gate_exps.type),
             dsv4_type_name(L->ffn_down_exps.type), n, big ? " big" : "", wv ? " warps=" : "", wv ? wv : "",
             sv ? " only " : "", sv ? sv : "");
    if (CPU->router_select(CC, lg, n, NE, K, bias, NULL, NULL, cf->expert_weights_scale, sel, wt, &ec) !=
        DSV4_OK) {
        printf("FAIL %-34s cpu router: %s\n", lb, ec.msg);
        c->fails++, c->checks++;
        free(lg), free(x), free(wt), free(o), free(got), free(sel);
        return;
    }
    float *dx = dcopy(c, x, (size_t)n * E * 4), *dwt = dcopy(c, wt, (size_t)n * K * 4);
    int32_t *dsel = dcopy(c, sel, (size_t)n * K * 4);
    float *dout = dcopy(c, o, (size_t)n * E * 4);
    const uint64_t calls0 = moe_f16_calls(c), ws0 = moe_ws_calls(c);
    const char *wse = getenv("DSV4_CUDA_MOE_WS");
    const bool want_ws =
        wse && (!strcmp(wse, "1") || !strcmp(wse, "2") || !strcmp(wse, "down") || !strcmp(wse, "gateup"));
    if (ran(c, lb,
            CPU->moe(CC, &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps, x, n, sel, wt, K, clamp, o,
                     &ec),
            GPU->moe(GC, &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps, dx, n, dsel, dwt, K, clamp,
                     dout, &c->err),
            &ec)) {
        const bool read_ok = GPU->read(GC, got, dout, (size_t)n * E * 4, &c->err) == DSV4_OK;
        const uint64_t calls = moe_f16_calls(c) - calls0, ws = moe_ws_calls(c) - ws0;
        double worst = read_ok ? 0 : 1e30, med_sum = 0;
        uint32_t worst_t = 0;
        for (uint32_t t = 0; read_ok && t < n; t++) {
            double d = 0, r = 0;
            for (uint32_t i = 0; i < E; i++) {
                const double g = got[(size_t)t * E + i], ref = o[(size_t)t * E + i];
                if (!(fabs(g - ref) <= d)) d = fabs(g - ref);
                if (fabs(ref) > r) r = fabs(ref);
            }
            const double rel = r > 0 ? d / r : d;
            med_sum += rel;
            if (!(rel <= worst)) worst = rel, worst_t = t;
        }
        const bool ok = read_ok && worst <= 1e-2 &&
                        (calls >= 1 || !c->flash) && /* taken at the flash width */
                        (!want_ws || calls == 0 || ws >= 1);
        printf("%s %-34s rel to cpu: worst token %.3e (token %u, <= 1e-2), mean %.3e; %llu f16 products "
               "(%llu on "
               "the warpgroup kernel%s)\n",
               ok ? "ok  " : "FAIL", lb, worst, worst_t, med_sum / n, (unsigned long long)calls,
               (unsigned long long)ws, want_ws ? ", DSV4_CUDA_MOE_WS set" : "");
        c->fails += !ok;
        c->checks++;
        if (timing) {
            const double th = time_moe(c, L, clamp, dx, n, dsel, dwt, dout, "DSV4_CUDA_MOE_F16", true, 5);
            env_saved w8 = env_set("DSV4_CUDA_MOE_F16_WARPS", "8");
            const double t8 = time_moe(c, L, clamp, dx, n, dsel, dwt, dout, "DSV4_CUDA_MOE_F16", true, 5);
            env_restore(&w8);
            /* time_moe sets the switch to "1" / "0": the gate/up-only run sets it itself */
            env_saved gu = env_set("DSV4_CUDA_MOE_F16", "gate_up");
            double tg = -1;
            if (GPU->moe(GC, &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps, dx, n, dsel, dwt, K,
                         clamp, dout, &c->err) == DSV4_OK &&
                GPU->sync(GC, &c->err) == DSV4_OK) {
                const double t0 = now_s();
                bool ok2 = true;
                for (int r = 0; r < 5 && ok2; r++)
                    ok2 = GPU->moe(GC, &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps, dx, n, dsel,
                                   dwt, K, clamp, dout, &c->err) == DSV4_OK;
                if (ok2 && GPU->sync(GC, &c->err) == DSV4_OK) tg = (now_s() - t0) / 5;
            }
            env_restore(&gu);
            const double tw = time_moe(c, L, clamp, dx, n, dsel, dwt, dout, "DSV4_CUDA_MOE_F16", false, 5);
            const bool tok = th > 0 && t8 > 0 && tg > 0 && tw > 0;
            printf(
                "%s moe f16 timing %s/%s n=%u: f16 gate/up + down %.3f ms, 8 warps %.3f ms, f16 gate/up only "
                "%.3f ms, exact (DSV4_CUDA_MOE_F16=0) %.3f ms (%.2fx)\n",
                tok ? "ok  " : "FAIL", dsv4_type_name(L->ffn_gate_exps.type),
                dsv4_type_name(L->ffn_down_exps.type), n, th * 1e3, t8 * 1e3, tg * 1e3, tw * 1e3,
                th > 0 ? tw / th : 0.0);
            c->fails += !tok;
            c->checks++;
        }
    }
    dfree(c, dx), dfree(c, dwt), dfree(c, dsel), dfree(c, dout);
    free(lg), free(x), free(wt), free(o), free(got), free(sel);
}

static uint64_t moe_x16_calls(chk *c) {
    dsv4_device_info di;
    return dsv4_backend_device_info(&c->gpu, &di, &c->err) == DSV4_OK ? di.moe_x16_products : 0;
}

/* Routed experts of a chunk on the exact warpgroup products (cuda_ops_moe_x16.cu, compute capability
 * 9.0): the device result must equal the exact wide kernels' (DSV4_CUDA_MOE_X16=0
 * DSV4_CUDA_MOE_F16=0) bit for bit, and (with_cpu) the CPU's as check_moe_bitwise counts it (SiLU's expf);
 * both products must have run on the path (its counter grew by 2; DSV4_CUDA_MOE_X16=1 here, the path is off
 * by default). gauss: inputs summed from 4 uniforms; else uniform. `timing`: against the f16 products
 * (DSV4_CUDA_MOE_X16=0, the default) and the wide ones, same selection. */
static void check_moe_x16(chk *c, const dsv4_layer_weights *L, float clamp, uint32_t n, bool gauss,
                          bool timing, bool with_cpu) {
    const dsv4_config *cf = &c->m->cfg;
    const uint32_t NE = cf->n_expert, K = cf->n_expert_used, E = cf->n_embd;
    if (L->ffn_gate_exps.type != DSV4_TYPE_IQ2_XXS || L->ffn_down_exps.type != DSV4_TYPE_Q2_K) return;
    const dsv4_tensor *bias = dsv4_tensor_present(&L->exp_probs_b) ? &L->exp_probs_b : NULL;
    float *lg = hrand(c, (size_t)n * NE, 4.0f), *x = hrand(c, (size_t)n * E, 1.0f);
    if (gauss)
        for (size_t i = 0; i < (size_t)n * E; i++) x[i] += rndf(c) + rndf(c) + rndf(c);
    const size_t ys = (size_t)n * E;
    float *wt = malloc((size_t)n * K * 4), *o = malloc(ys * 4), *got = malloc(ys * 4), *ref = malloc(ys * 4);
    int32_t *sel = malloc((size_t)n * K * 4);
    if (!wt || !o || !got || !ref || !sel) abort();
    dsv4_error ec = {0};
    char lb[96];
    snprintf(lb, sizeof lb, "moe x16 %s/%s n=%u %s", dsv4_type_name(L->ffn_gate_exps.type),
             dsv4_type_name(L->ffn_down_exps.type), n, gauss ? "gauss" : "uniform");
    if (CPU->router_select(CC, lg, n, NE, K, bias, NULL, NULL, cf->expert_weights_scale, sel, wt, &ec) !=
        DSV4_OK) {
        printf("FAIL %-34s cpu router: %s\n", lb, ec.msg);
        c->fails++, c->checks++;
        free(lg), free(x), free(wt), free(o), free(got), free(ref), free(sel);
        return;
    }
    float *dx = dcopy(c, x, (size_t)n * E * 4), *dwt = dcopy(c, wt, (size_t)n * K * 4);
    int32_t *dsel = dcopy(c, sel, (size_t)n * K * 4);
    float *dout = dcopy(c, o, ys * 4), *dref = dcopy(c, o, ys * 4);
    env_saved xon = env_set("DSV4_CUDA_MOE_X16", "1"); /* off by default */
    const uint64_t calls0 = moe_x16_calls(c);
    if (ran(c, lb,
            with_cpu ? CPU->moe(CC, &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps, x, n, sel, wt, K,
                                clamp, o, &ec)
                     : DSV4_OK,
            GPU->moe(GC, &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps, dx, n, dsel, dwt, K, clamp,
                     dout, &c->err),
            &ec)) {
        const uint64_t calls = moe_x16_calls(c) - calls0;
        env_saved xo = env_set("DSV4_CUDA_MOE_X16", "0"), fo = env_set("DSV4_CUDA_MOE_F16", "0");
        const dsv4_status sw = GPU->moe(GC, &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps, dx, n,
                                        dsel, dwt, K, clamp, dref, &c->err);
        env_restore(&fo), env_restore(&xo);
        const bool read_ok = sw == DSV4_OK && GPU->read(GC, got, dout, ys * 4, &c->err) == DSV4_OK &&
                             GPU->read(GC, ref, dref, ys * 4, &c->err) == DSV4_OK;
        size_t dw = ys, dc = ys;
        double maxd = 0, maxr = 0;
        if (read_ok) {
            dw = dc = 0;
            if (!with_cpu) memcpy(o, got, ys * 4); /* no CPU reference: nothing to count there */
            for (size_t i = 0; i < ys; i++) {
                dw += memcmp(&got[i], &ref[i], 4) != 0;
                dc += memcmp(&got[i], &o[i], 4) != 0;
                const double r = fabs((double)o[i]), d = fabs((double)got[i] - (double)o[i]);
                if (r > maxr) maxr = r;
                if (!(d <= maxd)) maxd = d;
            }
        }
        const bool ok = read_ok && dw == 0 && (calls == 2 || (!c->flash && calls == 0)) &&
                        maxd <= 1e-3 * (maxr > 0 ? maxr : 1); /* taken at the flash width */
        if (with_cpu)
            printf(
                "%s %-34s %zu of %zu differ from the wide kernels, %zu from the cpu (max|d| %.3g of %.3g); "
                "%llu x16 products\n",
                ok ? "ok  " : "FAIL", lb, dw, ys, dc, maxd, maxr, (unsigned long long)calls);
        else
            printf("%s %-34s %zu of %zu differ from the wide kernels (no cpu run); %llu x16 products\n",
                   ok ? "ok  " : "FAIL", lb, dw, ys, (unsigned long long)calls);
        c->fails += !ok;
        c->checks++;
        if (timing) {
            const double tx = time_moe(c, L, clamp, dx, n, dsel, dwt, dout, "DSV4_CUDA_MOE_X16", true, 5);
            const double th = time_moe(c, L, clamp, dx, n, dsel, dwt, dout, "DSV4_CUDA_MOE_X16", false, 5);
            env_saved f0 = env_set("DSV4_CUDA_MOE_F16", "0");
            const double tw = time_moe(c, L, clamp, dx, n, dsel, dwt, dout, "DSV4_CUDA_MOE_X16", false, 5);
            env_restore(&f0);
            const bool tok = tx > 0 && th > 0 && tw > 0;
            printf(
                "%s moe x16 timing %s/%s n=%u: warpgroup %.3f ms, f16 (DSV4_CUDA_MOE_X16=0) %.3f ms (%.2fx), "
                "wide exact (and DSV4_CUDA_MOE_F16=0) %.3f ms (%.2fx)\n",
                tok ? "ok  " : "FAIL", dsv4_type_name(L->ffn_gate_exps.type),
                dsv4_type_name(L->ffn_down_exps.type), n, tx * 1e3, th * 1e3, tx > 0 ? th / tx : 0.0,
                tw * 1e3, tx > 0 ? tw / tx : 0.0);
            c->fails += !tok;
            c->checks++;
        }
    }
    env_restore(&xon);
    dfree(c, dx), dfree(c, dwt), dfree(c, dsel), dfree(c, dout), dfree(c, dref);
    free(lg), free(x), free(wt), free(o), free(got), free(ref), free(sel);
}

/* Values of two device results of ys floats (read into a, b) that differ bitwise; ys when a timing run
 * failed (ta or tb <= 0) or a read did. */
static size_t moe_bits_differ(chk *c, double ta, double tb, const float *da, const float *db, float *a,
                              float *b, size_t ys) {
    if (!(ta > 0 && tb > 0) || GPU->read(GC, a, da, ys * 4, &c->err) != DSV4_OK ||
        GPU->read(GC, b, db, ys * 4, &c->err) != DSV4_OK)
        return ys;
    size_t d = 0;
    for (size_t i = 0; i < ys; i++) d += memcmp(&a[i], &b[i], 4) != 0;
    return d;
}

/* Timing of the routed experts: for n >= 2 grouped against generic, for n == 1 the fused decode
 * path (5 launches) against the unfused one (7), on the same CPU-router selection; the two device
 * results must agree bit for bit. */
static void time_moe_prefill(chk *c, const dsv4_layer_weights *L, float clamp, uint32_t n) {
    const dsv4_config *cf = &c->m->cfg;
    const uint32_t NE = cf->n_expert, K = cf->n_expert_used, E = cf->n_embd;
    const dsv4_tensor *bias = dsv4_tensor_present(&L->exp_probs_b) ? &L->exp_probs_b : NULL;
    float *lg = hrand(c, (size_t)n * NE, 4.0f), *x = hrand(c, (size_t)n * E, 1.0f);
    float *wt = malloc((size_t)n * K * 4), *a = malloc((size_t)n * E * 4), *b = malloc((size_t)n * E * 4);
    int32_t *sel = malloc((size_t)n * K * 4);
    if (!wt || !a || !b || !sel) abort();
    dsv4_error ec = {0};
    if (CPU->router_select(CC, lg, n, NE, K, bias, NULL, NULL, cf->expert_weights_scale, sel, wt, &ec) !=
        DSV4_OK) {
        printf("FAIL moe prefill timing: cpu router: %s\n", ec.msg);
        c->fails++, c->checks++;
        free(lg), free(x), free(wt), free(a), free(b), free(sel);
        return;
    }
    float *dx = dcopy(c, x, (size_t)n * E * 4), *dwt = dcopy(c, wt, (size_t)n * K * 4);
    int32_t *dsel = dcopy(c, sel, (size_t)n * K * 4);
    float *dy = dcopy(c, a, (size_t)n * E * 4), *dy2 = dcopy(c, a, (size_t)n * E * 4);
    const char *env = n == 1 ? "DSV4_CUDA_MOE_DECODE_FUSED" : "DSV4_CUDA_MOE_GROUPED";
    const char *pd = getenv("DSV4_CUDA_MOE_DECODE");
    char saved_dec[16] = "";
    if (pd) snprintf(saved_dec, sizeof saved_dec, "%s", pd);
    if (n == 1) setenv("DSV4_CUDA_MOE_DECODE", "old", 1); /* the 5-launch path is the fused one here */
    const double tg = time_moe(c, L, clamp, dx, n, dsel, dwt, dy, env, true, n == 1 ? 200 : 5);
    const double tr = time_moe(c, L, clamp, dx, n, dsel, dwt, dy2, env, false, n == 1 ? 200 : 2);
    if (n == 1 && !pd) unsetenv("DSV4_CUDA_MOE_DECODE");
    if (n == 1 && pd) setenv("DSV4_CUDA_MOE_DECODE", saved_dec, 1);
    const size_t ys = (size_t)n * E;
    const size_t differ = moe_bits_differ(c, tg, tr, dy, dy2, a, b, ys);
    printf("%s moe %s timing %s/%s n=%u k=%u: %s %.3f ms (%.2f us/token), %s %.3f ms (%.2fx); "
           "%zu of %zu differ\n",
           differ ? "FAIL" : "ok  ", n == 1 ? "decode" : "prefill", dsv4_type_name(L->ffn_gate_exps.type),
           dsv4_type_name(L->ffn_down_exps.type), n, K, n == 1 ? "fused" : "grouped", tg * 1e3, tg * 1e6 / n,
           n == 1 ? "unfused" : "generic", tr * 1e3, tr / tg, differ, ys);
    c->fails += differ != 0;
    c->checks++;
    if (n == 1) { /* the 2-launch decode path against the 5-launch one: timing, sanity of the values */
        setenv("DSV4_CUDA_MOE_DECODE", "old", 1);
        const double to = time_moe(c, L, clamp, dx, n, dsel, dwt, dy, env, true, 200);
        setenv("DSV4_CUDA_MOE_DECODE", "2launch", 1);
        const double tn = time_moe(c, L, clamp, dx, n, dsel, dwt, dy2, env, true, 200);
        if (pd)
            setenv("DSV4_CUDA_MOE_DECODE", saved_dec, 1);
        else
            unsetenv("DSV4_CUDA_MOE_DECODE");
        double maxd = 0, maxr = 0;
        size_t d3 = ys;
        if (to > 0 && tn > 0 && GPU->read(GC, a, dy, ys * 4, &c->err) == DSV4_OK &&
            GPU->read(GC, b, dy2, ys * 4, &c->err) == DSV4_OK) {
            d3 = 0;
            for (size_t i = 0; i < ys; i++) {
                const double d = fabs((double)a[i] - (double)b[i]);
                if (!(d <= maxd)) maxd = d;
                if (fabs((double)a[i]) > maxr) maxr = fabs((double)a[i]);
                d3 += memcmp(&a[i], &b[i], 4) != 0;
            }
        }
        /* the 2-launch path's rows are the CPU's bits (its accuracy: the `moe bitwise` lines); the
         * 5-launch one adds superblock terms in a tree, and a last-bit difference in g or u can move a
         * mid to the next Q8_K code (~1e-4 of max|out|): only a gross difference fails here */
        const bool bad = !(to > 0 && tn > 0) || !(maxd <= 1e-3 * (maxr > 0 ? maxr : 1));
        printf(
            "%s moe decode timing %s/%s k=%u: 2-launch %.2f us, 5-launch (DSV4_CUDA_MOE_DECODE=old) %.2f us "
            "(%.2fx); max|d| %.3g of max|old| %.3g (<= 1e-3), %zu of %zu differ bitwise\n",
            bad ? "FAIL" : "ok  ", dsv4_type_name(L->ffn_gate_exps.type),
            dsv4_type_name(L->ffn_down_exps.type), K, tn * 1e6, to * 1e6, to / tn, maxd, maxr, d3, ys);
        c->fails += bad;
        c->checks++;
        /* the mid folded into the gate/up launch (DSV4_CUDA_MOE_MID=fold) against the mid kernel: bitwise
         * over 201 calls each (the last call's output: the tickets must be back at zero after every launch);
         * shapes the streamed IQ2_XXS plan declines run the mid kernel either way */
        const env_saved mm = env_set("DSV4_CUDA_MOE_MID", "fold");
        const double tf = time_moe(c, L, clamp, dx, n, dsel, dwt, dy, env, true, 200);
        setenv("DSV4_CUDA_MOE_MID", "wide", 1);
        const double tw = time_moe(c, L, clamp, dx, n, dsel, dwt, dy2, env, true, 200);
        env_restore(&mm);
        const size_t df = moe_bits_differ(c, tf, tw, dy, dy2, a, b, ys);
        printf("%s moe decode mid fold %s/%s k=%u: folded %.2f us, mid kernel %.2f us (stream, no graph); "
               "%zu of %zu differ (required: 0)\n",
               df ? "FAIL" : "ok  ", dsv4_type_name(L->ffn_gate_exps.type),
               dsv4_type_name(L->ffn_down_exps.type), K, tf * 1e6, tw * 1e6, df, ys);
        c->fails += df != 0;
        c->checks++;
    }
    if (n >= 2) { /* the grouped path's tensor-core products (default: the wide kernels; "old": the
                   * first ones) against its scalar ones (bitwise) */
        const char *prev = getenv("DSV4_CUDA_MOE_MMA");
        char saved[16] = "";
        if (prev) snprintf(saved, sizeof saved, "%s", prev);
        const char *modes[2] = {"0", "old"};
        for (int mi = 0; mi < 2; mi++) {
            setenv("DSV4_CUDA_MOE_MMA", modes[mi], 1);
            const double ts = time_moe(c, L, clamp, dx, n, dsel, dwt, dy2, env, true, 3);
            size_t d2 = ys;
            if (ts > 0 && GPU->read(GC, b, dy2, ys * 4, &c->err) == DSV4_OK) {
                d2 = 0;
                for (size_t i = 0; i < ys; i++) d2 += memcmp(&a[i], &b[i], 4) != 0;
            }
            printf("%s moe prefill timing %s/%s n=%u: grouped (default tensor-core path) %.3f ms (%.2f "
                   "us/token), DSV4_CUDA_MOE_MMA=%s %.3f ms (%.2fx); %zu of %zu differ\n",
                   d2 ? "FAIL" : "ok  ", dsv4_type_name(L->ffn_gate_exps.type),
                   dsv4_type_name(L->ffn_down_exps.type), n, tg * 1e3, tg * 1e6 / n, modes[mi], ts * 1e3,
                   ts / tg, d2, ys);
            c->fails += d2 != 0;
            c->checks++;
        }
        if (prev)
            setenv("DSV4_CUDA_MOE_MMA", saved, 1);
        else
            unsetenv("DSV4_CUDA_MOE_MMA");
    }
    free(lg), free(x), free(wt), free(a), free(b), free(sel);
    dfree(c, dx), dfree(c, dwt), dfree(c, dsel), dfree(c, dy), dfree(c, dy2);
}

/* One decode pre step of sublayer `ffn` of L: hc_pre (y = u) or hc_pre_norm (y = the normed row). */
static dsv4_status hc_pre_call(chk *c, const dsv4_layer_weights *L, bool ffn, bool norm, const float *dx,
                               float *dy, float *ds) {
    const dsv4_config *cf = &c->m->cfg;
    const dsv4_tensor *fn = ffn ? &L->hc_ffn_fn : &L->hc_attn_fn,
                      *sc = ffn ? &L->hc_ffn_scale : &L->hc_attn_scale,
                      *bs = ffn ? &L->hc_ffn_base : &L->hc_attn_base,
                      *nw = ffn ? &L->ffn_norm : &L->attn_norm;
    if (norm)
        return GPU->hc_pre_norm(GC, fn, sc, bs, nw, dx, 1, cf->n_hc, cf->n_embd, cf->hc_sinkhorn_iter,
                                cf->rms_eps, cf->hc_eps, dy, ds, &c->err);
    return GPU->hc_pre(GC, fn, sc, bs, dx, 1, cf->n_hc, cf->n_embd, cf->hc_sinkhorn_iter, cf->rms_eps,
                       cf->hc_eps, dy, ds, &c->err);
}

/* The one-launch decode pre step (DSV4_CUDA_HC_FAST, switched through the test hook) against the
 * two-launch kernels, bit for bit: hc_pre (u, split) and hc_pre_norm (normed row, split) of one token,
 * both HC sublayers of L, inputs of several magnitudes. The outputs are poisoned (NaN) before every
 * call and the one-launch path runs 3 times in a row on each input (its ticket must be back at 0
 * after every launch, or a later launch writes nothing). Then the time per call of both paths. */
static void check_hc_one(chk *c, const dsv4_layer_weights *L) {
    const dsv4_config *cf = &c->m->cfg;
    const uint32_t E = cf->n_embd, HD = cf->n_hc * E, MIX = dsv4_cfg_hc_mix(cf);
    bool was = true;
    if (dsv4_backend_cuda_set_hc_fast(&c->gpu, true, &was, &c->err) != DSV4_OK) {
        printf("FAIL hc one-launch: %s\n", c->err.msg);
        c->fails++, c->checks++;
        return;
    }
    float *x0 = calloc(HD, 4), *ya = malloc((size_t)E * 4), *yb = malloc((size_t)E * 4);
    float *sa = malloc((size_t)MIX * 4), *sb = malloc((size_t)MIX * 4);
    if (!x0 || !ya || !yb || !sa || !sb) abort();
    float *dx = dcopy(c, x0, (size_t)HD * 4), *dy[2], *ds[2];
    for (int k = 0; k < 2; k++) dy[k] = dcopy(c, ya, (size_t)E * 4), ds[k] = dcopy(c, sa, (size_t)MIX * 4);
    const float mags[5] = {1e-3f, 0.05f, 1.0f, 2.0f, 40.0f};
    size_t differ = 0, total = 0;
    bool ok = true;
    for (int ffn = 0; ffn < 2 && ok; ffn++)
        for (int mi = 0; mi < 5 && ok; mi++) {
            float *x = hrand(c, HD, mags[mi]);
            ok = GPU->write(GC, dx, x, (size_t)HD * 4, &c->err) == DSV4_OK;
            free(x);
            for (int norm = 0; norm < 2 && ok; norm++)
                for (int fast = 0; fast < 2 && ok; fast++)
                    for (int rep = 0; rep < (fast ? 3 : 1) && ok; rep++) {
                        ok = dsv4_backend_cuda_set_hc_fast(&c->gpu, fast, NULL, &c->err) == DSV4_OK &&
                             GPU->fill_f32(GC, dy[fast], NAN, E, &c->err) == DSV4_OK &&
                             GPU->fill_f32(GC, ds[fast], NAN, MIX, &c->err) == DSV4_OK &&
                             hc_pre_call(c, L, ffn, norm, dx, dy[fast], ds[fast]) == DSV4_OK;
                        if (!ok || !fast) continue;
                        ok = GPU->read(GC, ya, dy[0], (size_t)E * 4, &c->err) == DSV4_OK &&
                             GPU->read(GC, yb, dy[1], (size_t)E * 4, &c->err) == DSV4_OK &&
                             GPU->read(GC, sa, ds[0], (size_t)MIX * 4, &c->err) == DSV4_OK &&
                             GPU->read(GC, sb, ds[1], (size_t)MIX * 4, &c->err) == DSV4_OK;
                        for (uint32_t i = 0; ok && i < E; i++) differ += memcmp(&ya[i], &yb[i], 4) != 0;
                        for (uint32_t i = 0; ok && i < MIX; i++) differ += memcmp(&sa[i], &sb[i], 4) != 0;
                        total += E + MIX;
                    }
        }
    if (!ok) printf("FAIL hc one-launch: %s\n", c->err.msg);
    printf("%s %-34s %zu of %zu values differ (required: 0)\n", ok && !differ ? "ok  " : "FAIL",
           "hc pre one-launch vs two-launch", differ, total);
    c->fails += !ok || differ != 0, c->checks++;
    for (int norm = 0; norm < 2 && ok; norm++) {
        double t[2] = {-1, -1};
        for (int fast = 0; fast < 2 && ok; fast++) {
            ok = dsv4_backend_cuda_set_hc_fast(&c->gpu, fast, NULL, &c->err) == DSV4_OK &&
                 hc_pre_call(c, L, false, norm, dx, dy[fast], ds[fast]) == DSV4_OK &&
                 GPU->sync(GC, &c->err) == DSV4_OK;
            const double t0 = now_s();
            for (int r = 0; r < 500 && ok; r++)
                ok = hc_pre_call(c, L, false, norm, dx, dy[fast], ds[fast]) == DSV4_OK;
            if (ok && GPU->sync(GC, &c->err) == DSV4_OK) t[fast] = (now_s() - t0) / 500;
        }
        printf("     hc %-12s timing n=1: one launch %.2f us, two launches %.2f us (stream, no graph)\n",
               norm ? "pre_norm" : "pre", t[1] * 1e6, t[0] * 1e6);
    }
    dsv4_backend_cuda_set_hc_fast(&c->gpu, was, NULL, &c->err);
    free(x0), free(ya), free(yb), free(sa), free(sb);
    dfree(c, dx);
    for (int k = 0; k < 2; k++) dfree(c, dy[k]), dfree(c, ds[k]);
}

/* One-token products with the warp-direct matvec's fused Q8_0 activation quantization
 * (DSV4_CUDA_MVW_ACT=fused, switched through the test hook) against the separate quantizer launch,
 * bit for bit: single matmuls, the grouped output projection and the multi-product sets. Outputs
 * poisoned (NaN) before every call; inputs of several magnitudes. Then the time per call of both. */
typedef struct {
    const char *label;
    int kind; /* 0 matmul, 1 matmul_grouped (G groups), 2 matmul_multi (n_w items, one input) */
    const dsv4_tensor *w[8];
    uint32_t n_w, G;
} mvw_act_op;
static uint64_t mvw_act_rows(const mvw_act_op *op) {
    uint64_t r = 0;
    for (uint32_t i = 0; i < op->n_w; i++) r += op->w[i]->ne[1];
    return r;
}
static dsv4_status mvw_act_call(chk *c, const mvw_act_op *op, const float *dx, float *dy) {
    const dsv4_tensor *w = op->w[0];
    if (op->kind == 0) return GPU->matmul(GC, w, 0, w->ne[1], dx, w->ne[0], 1, dy, w->ne[1], &c->err);
    if (op->kind == 1)
        return GPU->matmul_grouped(GC, w, op->G, dx, w->ne[0] * op->G, 1, dy, w->ne[1], &c->err);
    dsv4_matmul_item it[8];
    uint64_t off = 0;
    for (uint32_t i = 0; i < op->n_w; i++) {
        it[i] = (dsv4_matmul_item){op->w[i], 0, op->w[i]->ne[1], dx, w->ne[0], dy + off, op->w[i]->ne[1]};
        off += op->w[i]->ne[1];
    }
    return GPU->matmul_multi(GC, it, op->n_w, 1, &c->err);
}
static void check_mvw_act(chk *c, const mvw_act_op *ops, int n_ops) {
    bool was = false;
    if (dsv4_backend_cuda_set_mvw_act(&c->gpu, false, &was, &c->err) != DSV4_OK) {
        printf("FAIL mvw_act: %s\n", c->err.msg);
        c->fails++, c->checks++;
        return;
    }
    for (int k = 0; k < n_ops; k++) {
        const mvw_act_op *op = &ops[k];
        bool present = op->n_w > 0 && (op->kind != 1 || (op->G > 1 && GPU->matmul_grouped)) &&
                       (op->kind != 2 || GPU->matmul_multi);
        for (uint32_t i = 0; i < op->n_w && present; i++)
            present = dsv4_tensor_present(op->w[i]) && op->w[i]->ne[0] == op->w[0]->ne[0];
        if (!present) continue;
        const uint64_t in = op->w[0]->ne[0] * (op->kind == 1 ? op->G : 1), rows = mvw_act_rows(op);
        float *ha = malloc(rows * 4), *hb = malloc(rows * 4), *x0 = calloc(in, 4);
        if (!ha || !hb || !x0) abort();
        float *dx = dcopy(c, x0, in * 4), *dy[2] = {dcopy(c, ha, rows * 4), dcopy(c, hb, rows * 4)};
        const float mags[3] = {1e-3f, 1.0f, 40.0f};
        size_t differ = 0, total = 0;
        bool ok = true;
        for (int mi = 0; mi < 3 && ok; mi++) {
            float *x = hrand(c, in, mags[mi]);
            for (uint64_t b = 0; b + 32 <= in; b += 32) /* some all-zero blocks */
                if ((rnd(c) & 15) == 0) memset(x + b, 0, 32 * sizeof(float));
            ok = GPU->write(GC, dx, x, in * 4, &c->err) == DSV4_OK;
            free(x);
            for (int f = 0; f < 2 && ok; f++)
                ok = dsv4_backend_cuda_set_mvw_act(&c->gpu, f, NULL, &c->err) == DSV4_OK &&
                     GPU->fill_f32(GC, dy[f], NAN, rows, &c->err) == DSV4_OK &&
                     mvw_act_call(c, op, dx, dy[f]) == DSV4_OK;
            ok = ok && GPU->read(GC, ha, dy[0], rows * 4, &c->err) == DSV4_OK &&
                 GPU->read(GC, hb, dy[1], rows * 4, &c->err) == DSV4_OK;
            for (uint64_t i = 0; ok && i < rows; i++) differ += memcmp(&ha[i], &hb[i], 4) != 0;
            total += rows;
        }
        char label[96];
        snprintf(label, sizeof label, "mvw_act fused vs separate %s", op->label);
        if (!ok) printf("FAIL %s: %s\n", label, c->err.msg);
        printf("%s %-34s %zu of %zu values differ (required: 0)\n", ok && !differ ? "ok  " : "FAIL", label,
               differ, total);
        c->fails += !ok || differ != 0, c->checks++;
        double t[2] = {-1, -1};
        for (int f = 0; f < 2 && ok; f++) {
            ok = dsv4_backend_cuda_set_mvw_act(&c->gpu, f, NULL, &c->err) == DSV4_OK &&
                 mvw_act_call(c, op, dx, dy[f]) == DSV4_OK && GPU->sync(GC, &c->err) == DSV4_OK;
            const double t0 = now_s();
            for (int r = 0; r < 300 && ok; r++) ok = mvw_act_call(c, op, dx, dy[f]) == DSV4_OK;
            if (ok && GPU->sync(GC, &c->err) == DSV4_OK) t[f] = (now_s() - t0) / 300;
        }
        printf("     mvw_act timing %-22s n=1: separate %.2f us, fused %.2f us (stream, no graph)\n",
               op->label, t[0] * 1e6, t[1] * 1e6);
        free(ha), free(hb), free(x0), dfree(c, dx), dfree(c, dy[0]), dfree(c, dy[1]);
    }
    dsv4_backend_cuda_set_mvw_act(&c->gpu, was, NULL, &c->err);
}

/* n device vector pairs (pa[v], pb[v], nv[v] floats) compared bit for bit: one ok / FAIL line, counted. */
static void dev_bitwise(chk *c, const char *lb, const float *const *pa, const float *const *pb,
                        const size_t *nv, int n) {
    size_t differ = 0, total = 0;
    for (int v = 0; v < n; v++) {
        float *a = malloc(nv[v] * 4), *b = malloc(nv[v] * 4);
        if (!a || !b) abort();
        GPU->read(GC, a, pa[v], nv[v] * 4, &c->err);
        GPU->read(GC, b, pb[v], nv[v] * 4, &c->err);
        for (size_t i = 0; i < nv[v]; i++) differ += memcmp(&a[i], &b[i], 4) != 0;
        total += nv[v];
        free(a), free(b);
    }
    printf("%s %-34s %zu of %zu values differ (required: 0)\n", differ ? "FAIL" : "ok  ", lb, differ, total);
    c->fails += differ != 0, c->checks++;
}

/* The register / grid tail of the one-launch pre step (DSV4_CUDA_HC_TAIL=last / multi, switched
 * through the test hook) against today's one-launch kernel (off), bit for bit: hc_pre (u, split)
 * and hc_pre_norm (normed row, split), both HC sublayers, inputs of several magnitudes, outputs
 * poisoned (NaN) before every call, each tail 3 times in a row (its count / ticket words must be
 * back at 0 after every launch). The hook's launch count says whether the tail ran (it needs
 * n_hc = 4, n_embd 1024 or 4096; multi also the grid resident at once). Then the time per call:
 * the median over 9 rounds of 200 calls (stream, no graph; rounds interleaved over the modes). */
static void check_hc_tail(chk *c, const dsv4_layer_weights *L) {
    const dsv4_config *cf = &c->m->cfg;
    const uint32_t E = cf->n_embd, HD = cf->n_hc * E, MIX = dsv4_cfg_hc_mix(cf);
    static const char *const names[4] = {"off", "multi", "last", "cluster"};
    bool was_fast = true;
    int was = 0;
    uint64_t l0 = 0, l1 = 0;
    if (dsv4_backend_cuda_set_hc_fast(&c->gpu, true, &was_fast, &c->err) != DSV4_OK ||
        dsv4_backend_cuda_set_hc_tail(&c->gpu, 0, &was, &l0, &c->err) != DSV4_OK) {
        printf("FAIL hc tail: %s\n", c->err.msg);
        c->fails++, c->checks++;
        return;
    }
    float *x0 = calloc(HD, 4), *yr = malloc((size_t)E * 4), *yt = malloc((size_t)E * 4);
    float *sr = malloc((size_t)MIX * 4), *s_t = malloc((size_t)MIX * 4);
    if (!x0 || !yr || !yt || !sr || !s_t) abort();
    float *dx = dcopy(c, x0, (size_t)HD * 4), *dy[4], *ds[4];
    for (int k = 0; k < 4; k++) dy[k] = dcopy(c, yr, (size_t)E * 4), ds[k] = dcopy(c, sr, (size_t)MIX * 4);
    const float mags[5] = {1e-3f, 0.05f, 1.0f, 2.0f, 40.0f};
    size_t differ[4] = {0, 0, 0, 0}, total[4] = {0, 0, 0, 0};
    uint64_t ran_n[4] = {0, 0, 0, 0};
    /* the cluster tail (mode 3) where the device runs it (session 28; off by default) */
    const int modes = dsv4_backend_cuda_set_hc_tail(&c->gpu, 3, NULL, NULL, &c->err) == DSV4_OK ? 4 : 3;
    dsv4_error_clear(&c->err);
    bool ok = true;
    for (int ffn = 0; ffn < 2 && ok; ffn++)
        for (int mi = 0; mi < 5 && ok; mi++) {
            float *x = hrand(c, HD, mags[mi]);
            ok = GPU->write(GC, dx, x, (size_t)HD * 4, &c->err) == DSV4_OK;
            free(x);
            for (int norm = 0; norm < 2 && ok; norm++)
                for (int mode = 0; mode < modes && ok; mode++)
                    for (int rep = 0; rep < (mode ? 3 : 1) && ok; rep++) {
                        ok = dsv4_backend_cuda_set_hc_tail(&c->gpu, mode, NULL, &l0, &c->err) == DSV4_OK &&
                             GPU->fill_f32(GC, dy[mode], NAN, E, &c->err) == DSV4_OK &&
                             GPU->fill_f32(GC, ds[mode], NAN, MIX, &c->err) == DSV4_OK &&
                             hc_pre_call(c, L, ffn, norm, dx, dy[mode], ds[mode]) == DSV4_OK &&
                             dsv4_backend_cuda_set_hc_tail(&c->gpu, mode, NULL, &l1, &c->err) == DSV4_OK;
                        if (!ok || !mode) continue;
                        ran_n[mode] += l1 - l0;
                        ok = GPU->read(GC, yr, dy[0], (size_t)E * 4, &c->err) == DSV4_OK &&
                             GPU->read(GC, yt, dy[mode], (size_t)E * 4, &c->err) == DSV4_OK &&
                             GPU->read(GC, sr, ds[0], (size_t)MIX * 4, &c->err) == DSV4_OK &&
                             GPU->read(GC, s_t, ds[mode], (size_t)MIX * 4, &c->err) == DSV4_OK;
                        for (uint32_t i = 0; ok && i < E; i++) differ[mode] += memcmp(&yr[i], &yt[i], 4) != 0;
                        for (uint32_t i = 0; ok && i < MIX; i++)
                            differ[mode] += memcmp(&sr[i], &s_t[i], 4) != 0;
                        total[mode] += E + MIX;
                    }
        }
    if (!ok) printf("FAIL hc tail: %s\n", c->err.msg);
    if (modes == 3)
        printf("skip %-34s the device does not run the cluster tail\n", "hc pre tail=cluster vs off");
    for (int mode = 1; mode < modes && ok; mode++) {
        char lb[64];
        snprintf(lb, sizeof lb, "hc pre tail=%s vs off", names[mode]);
        if (!ran_n[mode]) {
            printf("skip %-34s the tail did not run (n_hc=%u n_embd=%u: needs 4 x 1024|4096%s)\n", lb,
                   cf->n_hc, E, mode == 1 ? ", the grid resident" : "");
            continue;
        }
        printf("%s %-34s %zu of %zu values differ (required: 0; %llu tail launches)\n",
               !differ[mode] ? "ok  " : "FAIL", lb, differ[mode], total[mode],
               (unsigned long long)ran_n[mode]);
        c->fails += differ[mode] != 0, c->checks++;
    }
    c->fails += !ok, c->checks += !ok;
    for (int norm = 0; norm < 2 && ok; norm++) {
        double t[4][9];
        for (int r = 0; r < 9 && ok; r++)
            for (int mode = 0; mode < modes && ok; mode++) {
                ok = dsv4_backend_cuda_set_hc_tail(&c->gpu, mode, NULL, NULL, &c->err) == DSV4_OK &&
                     hc_pre_call(c, L, false, norm, dx, dy[mode], ds[mode]) == DSV4_OK &&
                     GPU->sync(GC, &c->err) == DSV4_OK;
                const double t0 = now_s();
                for (int k = 0; k < 200 && ok; k++)
                    ok = hc_pre_call(c, L, false, norm, dx, dy[mode], ds[mode]) == DSV4_OK;
                ok = ok && GPU->sync(GC, &c->err) == DSV4_OK;
                t[mode][r] = (now_s() - t0) / 200;
            }
        double med[4] = {-1, -1, -1, -1};
        for (int mode = 0; mode < modes && ok; mode++) {
            for (int i = 1; i < 9; i++) /* insertion sort of 9 */
                for (int j = i; j > 0 && t[mode][j] < t[mode][j - 1]; j--) {
                    const double v = t[mode][j];
                    t[mode][j] = t[mode][j - 1], t[mode][j - 1] = v;
                }
            med[mode] = t[mode][4];
        }
        printf("     hc %-12s tail timing n=1 (median of 9 x 200 calls): off %.2f us, multi %.2f us, last "
               "%.2f us, cluster %.2f us (stream, no graph; -1: not run)\n",
               norm ? "pre_norm" : "pre", med[0] * 1e6, med[1] * 1e6, med[2] * 1e6,
               med[3] < 0 ? -1.0 : med[3] * 1e6);
    }
    dsv4_backend_cuda_set_hc_tail(&c->gpu, was, NULL, NULL, &c->err);
    dsv4_backend_cuda_set_hc_fast(&c->gpu, was_fast, NULL, &c->err);
    free(x0), free(yr), free(yt), free(sr), free(s_t);
    dfree(c, dx);
    for (int k = 0; k < 4; k++) dfree(c, dy[k]), dfree(c, ds[k]);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* a crash keeps every line printed so far */
    /* the routed-MoE tensor-core paths at every chunk size checked here, whatever the crossover */
    if (!getenv("DSV4_CUDA_MOE_MMA_MIN_N")) setenv("DSV4_CUDA_MOE_MMA_MIN_N", "2", 1);
    /* router_topk (off by default: measured slower) is checked here too */
    if (!getenv("DSV4_CUDA_ROUTER_FUSED")) setenv("DSV4_CUDA_ROUTER_FUSED", "1", 1);
    if (argc < 2) {
        fprintf(stderr, "usage: cuda_ops_check MODEL.gguf [--tol X] [--device N] [--against cpu] "
                        "[--numerics ds4|exact]\n");
        return 2;
    }
    chk cs;
    memset(&cs, 0, sizeof cs);
    chk *c = &cs;
    c->tol = 1e-3;
    c->rng = 12345;
    int device = 0;
    const char *against = "cuda";               /* --against cpu: checks the checker (all bitwise equal) */
    dsv4_numerics numerics = DSV4_NUMERICS_DS4; /* --numerics exact: both backends in EXACT mode */
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--tol")) c->tol = atof(argv[i + 1]);
        if (!strcmp(argv[i], "--device")) device = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--against")) against = argv[i + 1];
        if (!strcmp(argv[i], "--numerics")) {
            if (strcmp(argv[i + 1], "ds4") && strcmp(argv[i + 1], "exact")) {
                fprintf(stderr, "cuda_ops_check: --numerics takes ds4 or exact, not '%s'\n", argv[i + 1]);
                return 2;
            }
            numerics = strcmp(argv[i + 1], "exact") == 0 ? DSV4_NUMERICS_EXACT : DSV4_NUMERICS_DS4;
        }
    }
    dsv4_model *m = NULL;
    if (dsv4_model_load(argv[1], &m, &c->err) != DSV4_OK) {
        fprintf(stderr, "cuda_ops_check: %s\n", c->err.msg);
        return 2;
    }
    c->m = m;
    c->ds4 = numerics == DSV4_NUMERICS_DS4;
    c->flash = m->cfg.n_embd == 4096;
    printf("numerics: %s\n", numerics == DSV4_NUMERICS_EXACT ? "exact" : "ds4");
    dsv4_backend_params bp = {.name = "cpu", .numerics = numerics};
    if (dsv4_backend_create(&bp, &c->cpu, &c->err) != DSV4_OK) return 2;
    bp.name = against, bp.model = m, bp.device = device;
    if (dsv4_backend_create(&bp, &c->gpu, &c->err) != DSV4_OK) {
        fprintf(stderr, "cuda_ops_check: %s\n", c->err.msg);
        return 2;
    }
    const dsv4_config *cf = &m->cfg;
    const uint32_t E = cf->n_embd, HC = cf->n_hc, HD = HC * E, MIX = dsv4_cfg_hc_mix(cf);
    const uint32_t H = cf->n_head, Dh = cf->head_dim, Id = cf->idx_head_dim, IH = cf->idx_n_head;
    dsv4_error ec = {0};
    /* a compressed ratio-4 layer and a hash layer, if the model has them */
    uint32_t l4 = 0, lr = 0, lnh = 0;
    for (uint32_t il = 0; il < cf->n_layer; il++) {
        if (cf->compress_ratio[il] == 4 && !l4) l4 = il;
        if (cf->compress_ratio[il] > 4 && !lr) lr = il;
        if (!dsv4_cfg_is_hash_layer(cf, il) && !lnh) lnh = il;
    }
    const dsv4_layer_weights *L0 = &m->layers[0], *L4 = &m->layers[l4], *LN = &m->layers[lnh];

    /* ---- embed ---- */
    {
        const int32_t tok[3] = {1, (int32_t)(cf->n_vocab / 2), (int32_t)cf->n_vocab - 1};
        const size_t n = 3 * (size_t)HD;
        float *o = calloc(n, 4), *d = dcopy(c, o, n * 4);
        if (ran(c, "embed", CPU->embed(CC, &m->token_embd, tok, 3, HC, o, &ec),
                GPU->embed(GC, &m->token_embd, tok, 3, HC, d, &c->err), &ec))
            cmp_f(c, "embed", o, d, n);
        free(o), dfree(c, d);
    }
    /* ---- hc pre / post / head, n = 1 and 3 ---- */
    for (uint32_t n = 1; n <= 3; n += 2) {
        char lb[64];
        float *x = hrand(c, (size_t)n * HD, 2.0f), *u = calloc((size_t)n * E, 4),
              *sp = calloc((size_t)n * MIX, 4);
        float *dx = dcopy(c, x, (size_t)n * HD * 4), *du = dcopy(c, u, (size_t)n * E * 4),
              *dsp = dcopy(c, sp, (size_t)n * MIX * 4);
        snprintf(lb, sizeof lb, "hc_pre n=%u", n);
        if (ran(c, lb,
                CPU->hc_pre(CC, &L0->hc_attn_fn, &L0->hc_attn_scale, &L0->hc_attn_base, x, n, HC, E,
                            cf->hc_sinkhorn_iter, cf->rms_eps, cf->hc_eps, u, sp, &ec),
                GPU->hc_pre(GC, &L0->hc_attn_fn, &L0->hc_attn_scale, &L0->hc_attn_base, dx, n, HC, E,
                            cf->hc_sinkhorn_iter, cf->rms_eps, cf->hc_eps, du, dsp, &c->err),
                &ec)) {
            snprintf(lb, sizeof lb, "hc_pre n=%u u", n);
            cmp_f(c, lb, u, du, (size_t)n * E);
            snprintf(lb, sizeof lb, "hc_pre n=%u split", n);
            cmp_f(c, lb, sp, dsp, (size_t)n * MIX);
        }
        /* the fused hc_pre_norm: bitwise the device's unfused hc_pre + rmsnorm, close to the CPU's */
        if (n == 1 && GPU->hc_pre_norm && GPU->fused_available) {
            dsv4_fused_query q = {.n_tokens = 1,
                                  .width = E,
                                  .weight_type = L0->hc_attn_fn.type,
                                  .n_hc = HC,
                                  .aux_type = L0->attn_norm.type,
                                  .n_tiers = 1};
            const bool gate = GPU->fused_available(GC, DSV4_FUSED_HC_PRE_NORM, &q);
            printf("%s %-34s %s\n", gate ? "ok  " : "FAIL", "hc_pre_norm gate n=1", gate ? "open" : "closed");
            c->fails += !gate, c->checks++;
            float *dy1 = dcopy(c, u, (size_t)E * 4), *dy2 = dcopy(c, u, (size_t)E * 4);
            float *ds2 = dcopy(c, sp, (size_t)MIX * 4);
            float *y = calloc(E, 4), *sp2 = calloc(MIX, 4), *g1 = calloc(E, 4), *g2 = calloc(E, 4);
            float *gs1 = calloc(MIX, 4), *gs2 = calloc(MIX, 4);
            const dsv4_status s1 =
                GPU->hc_pre(GC, &L0->hc_attn_fn, &L0->hc_attn_scale, &L0->hc_attn_base, dx, 1, HC, E,
                            cf->hc_sinkhorn_iter, cf->rms_eps, cf->hc_eps, du, dsp, &c->err);
            const dsv4_status s2 =
                s1 == DSV4_OK ? GPU->rmsnorm(GC, du, &L0->attn_norm, 1, E, cf->rms_eps, dy1, &c->err) : s1;
            const dsv4_status s3 =
                s2 == DSV4_OK ? GPU->hc_pre_norm(GC, &L0->hc_attn_fn, &L0->hc_attn_scale, &L0->hc_attn_base,
                                                 &L0->attn_norm, dx, 1, HC, E, cf->hc_sinkhorn_iter,
                                                 cf->rms_eps, cf->hc_eps, dy2, ds2, &c->err)
                              : s2;
            if (ran(c, "hc_pre_norm fused vs unfused", DSV4_OK, s3, &ec)) {
                GPU->read(GC, g1, dy1, (size_t)E * 4, &c->err);
                GPU->read(GC, g2, dy2, (size_t)E * 4, &c->err);
                GPU->read(GC, gs1, dsp, (size_t)MIX * 4, &c->err);
                GPU->read(GC, gs2, ds2, (size_t)MIX * 4, &c->err);
                size_t differ = 0;
                for (uint32_t i = 0; i < E; i++) differ += memcmp(&g1[i], &g2[i], 4) != 0;
                for (uint32_t i = 0; i < MIX; i++) differ += memcmp(&gs1[i], &gs2[i], 4) != 0;
                printf("%s %-34s n=%-8u %zu of %u values differ (required: 0)\n", differ ? "FAIL" : "ok  ",
                       "hc_pre_norm fused bitwise", E + MIX, differ, E + MIX);
                c->fails += differ != 0, c->checks++;
                if (ran(c, "hc_pre_norm cpu",
                        CPU->hc_pre_norm(CC, &L0->hc_attn_fn, &L0->hc_attn_scale, &L0->hc_attn_base,
                                         &L0->attn_norm, x, 1, HC, E, cf->hc_sinkhorn_iter, cf->rms_eps,
                                         cf->hc_eps, y, sp2, &ec),
                        DSV4_OK, &ec))
                    cmp_f(c, "hc_pre_norm fused vs cpu", y, dy2, E);
            }
            free(y), free(sp2), free(g1), free(g2), free(gs1), free(gs2);
            dfree(c, dy1), dfree(c, dy2), dfree(c, ds2);
        }
        /* hc_post from the CPU split (valid mixing weights) */
        float *f = hrand(c, (size_t)n * E, 1.0f), *o = calloc((size_t)n * HD, 4);
        float *df = dcopy(c, f, (size_t)n * E * 4), *do_ = dcopy(c, o, (size_t)n * HD * 4);
        c->gpu.ops->write(GC, dsp, sp, (size_t)n * MIX * 4, &c->err);
        snprintf(lb, sizeof lb, "hc_post n=%u", n);
        if (ran(c, lb, CPU->hc_post(CC, f, x, sp, n, HC, E, o, &ec),
                GPU->hc_post(GC, df, dx, dsp, n, HC, E, do_, &c->err), &ec))
            cmp_f(c, lb, o, do_, (size_t)n * HD);
        /* hc_post_pre_norm (one token): the post's output, the normed row and the new split bitwise
         * hc_post then hc_pre_norm on the device */
        if (n == 1 && GPU->hc_post_pre_norm && GPU->hc_pre_norm && GPU->fused_available) {
            const dsv4_fused_query q = {.n_tokens = 1,
                                        .width = E,
                                        .weight_type = L0->hc_ffn_fn.type,
                                        .n_hc = HC,
                                        .aux_type = L0->ffn_norm.type,
                                        .n_tiers = 1};
            const bool gate = GPU->fused_available(GC, DSV4_FUSED_HC_POST_PRE_NORM, &q);
            gate_check(c, "hc_post_pre_norm gate n=1", gate, c->ds4 && (E == 1024 || E == 4096),
                       "EXACT numerics, or a width the register tail does not take");
            float *zh = calloc(HD, 4), *ze = calloc(E + MIX, 4);
            float *o1 = dcopy(c, zh, (size_t)HD * 4), *o2 = dcopy(c, zh, (size_t)HD * 4);
            float *y1 = dcopy(c, ze, (size_t)E * 4), *y2 = dcopy(c, ze, (size_t)E * 4);
            float *s1 = dcopy(c, ze, (size_t)MIX * 4), *s2 = dcopy(c, ze, (size_t)MIX * 4);
            dsv4_status su = GPU->hc_post(GC, df, dx, dsp, 1, HC, E, o1, &c->err);
            if (su == DSV4_OK)
                su = GPU->hc_pre_norm(GC, &L0->hc_ffn_fn, &L0->hc_ffn_scale, &L0->hc_ffn_base, &L0->ffn_norm,
                                      o1, 1, HC, E, cf->hc_sinkhorn_iter, cf->rms_eps, cf->hc_eps, y1, s1,
                                      &c->err);
            const dsv4_status sf =
                su == DSV4_OK
                    ? GPU->hc_post_pre_norm(GC, df, dx, dsp, o2, &L0->hc_ffn_fn, &L0->hc_ffn_scale,
                                            &L0->hc_ffn_base, &L0->ffn_norm, HC, E, cf->hc_sinkhorn_iter,
                                            cf->rms_eps, cf->hc_eps, y2, s2, &c->err)
                    : su;
            if (gate && ran(c, "hc_post_pre_norm fused vs unfused", DSV4_OK, sf, &ec)) {
                const float *pa[3] = {o1, y1, s1}, *pb[3] = {o2, y2, s2};
                const size_t nv[3] = {HD, E, MIX};
                dev_bitwise(c, "hc_post_pre_norm bitwise", pa, pb, nv, 3);
                /* the same call as the cluster tail (DSV4_CUDA_HC_CLUSTER=1) where the device runs it */
                int was_tail = 0;
                if (dsv4_backend_cuda_set_hc_tail(&c->gpu, 3, &was_tail, NULL, &c->err) == DSV4_OK) {
                    GPU->fill_f32(GC, y2, NAN, E, &c->err);
                    GPU->fill_f32(GC, s2, NAN, MIX, &c->err);
                    GPU->fill_f32(GC, o2, NAN, HD, &c->err);
                    const dsv4_status sc = GPU->hc_post_pre_norm(
                        GC, df, dx, dsp, o2, &L0->hc_ffn_fn, &L0->hc_ffn_scale, &L0->hc_ffn_base,
                        &L0->ffn_norm, HC, E, cf->hc_sinkhorn_iter, cf->rms_eps, cf->hc_eps, y2, s2, &c->err);
                    dsv4_backend_cuda_set_hc_tail(&c->gpu, was_tail, NULL, NULL, &c->err);
                    if (ran(c, "hc_post_pre_norm cluster vs unfused", DSV4_OK, sc, &ec))
                        dev_bitwise(c, "hc_post_pre_norm cluster bitwise", pa, pb, nv, 3);
                } else {
                    dsv4_error_clear(&c->err);
                    printf("skip %-34s the device does not run the cluster tail\n",
                           "hc_post_pre_norm cluster");
                }
            }
            free(zh), free(ze);
            dfree(c, o1), dfree(c, o2), dfree(c, y1), dfree(c, y2), dfree(c, s1), dfree(c, s2);
        }
        snprintf(lb, sizeof lb, "hc_head n=%u", n);
        if (ran(c, lb,
                CPU->hc_head(CC, &m->output_hc_fn, &m->output_hc_scale, &m->output_hc_base, x, n, HC, E,
                             cf->rms_eps, cf->hc_eps, u, &ec),
                GPU->hc_head(GC, &m->output_hc_fn, &m->output_hc_scale, &m->output_hc_base, dx, n, HC, E,
                             cf->rms_eps, cf->hc_eps, du, &c->err),
                &ec))
            cmp_f(c, lb, u, du, (size_t)n * E);
        free(x), free(u), free(sp), free(f), free(o);
        dfree(c, dx), dfree(c, du), dfree(c, dsp), dfree(c, df), dfree(c, do_);
    }
    if (numerics == DSV4_NUMERICS_DS4 && !strcmp(against, "cuda")) {
        check_hc_one(c, L0);
        check_hc_tail(c, L0);
    }
    /* ---- rmsnorm, add, swiglu ---- */
    {
        const size_t n = 3 * (size_t)E;
        float *x = hrand(c, n, 3.0f), *y = calloc(n, 4), *b = hrand(c, n, 3.0f);
        float *dx = dcopy(c, x, n * 4), *dy = dcopy(c, y, n * 4), *db = dcopy(c, b, n * 4);
        if (ran(c, "rmsnorm weighted", CPU->rmsnorm(CC, x, &L0->attn_norm, 3, E, cf->rms_eps, y, &ec),
                GPU->rmsnorm(GC, dx, &L0->attn_norm, 3, E, cf->rms_eps, dy, &c->err), &ec))
            cmp_f(c, "rmsnorm weighted", y, dy, n);
        if (ran(c, "rmsnorm in place", CPU->rmsnorm(CC, x, NULL, 3 * E / Dh, Dh, cf->rms_eps, x, &ec),
                GPU->rmsnorm(GC, dx, NULL, 3 * E / Dh, Dh, cf->rms_eps, dx, &c->err), &ec))
            cmp_f(c, "rmsnorm in place", x, dx, n);
        if (ran(c, "add", CPU->add(CC, x, b, n, y, &ec), GPU->add(GC, dx, db, n, dy, &c->err), &ec))
            cmp_f(c, "add", y, dy, n);
        for (int k = 0; k < 2; k++) {
            const float cl = k ? 10.0f : 0.0f;
            float *g = hrand(c, n, 15.0f), *dg = dcopy(c, g, n * 4);
            const char *lb = k ? "swiglu clamp 10" : "swiglu no clamp";
            if (ran(c, lb, CPU->swiglu(CC, g, b, n, cl, y, &ec), GPU->swiglu(GC, dg, db, n, cl, dy, &c->err),
                    &ec))
                cmp_f(c, lb, y, dy, n);
            free(g), dfree(c, dg);
        }
        float *dz = dcopy(c, y, n * 4);
        for (size_t i = 0; i < n; i++) y[i] = -1e30f;
        if (ran(c, "fill_f32", DSV4_OK, GPU->fill_f32(GC, dz, -1e30f, n, &c->err), &ec))
            cmp_f(c, "fill_f32", y, dz, n);
        free(x), free(y), free(b), dfree(c, dx), dfree(c, dy), dfree(c, db), dfree(c, dz);
    }
    /* ---- matmul: every weight kind of layer 0 / the ratio-4 layer, decode and a small batch ---- */
    for (uint32_t n = 1; n <= 4; n += 3) {
        check_matmul(c, "attn_q_a", &L0->attn_q_a, 0, cf->q_lora_rank, E, n);
        check_matmul(c, "attn_q_b", &L0->attn_q_b, 0, (uint64_t)H * Dh, cf->q_lora_rank, n);
        check_matmul(c, "attn_kv", &L0->attn_kv, 0, Dh, E, n);
        const uint32_t G = cf->n_out_group, OL = cf->o_lora_rank;
        if (G > 1) /* group 1 of the grouped output projection: row offset and strided rows */
            check_matmul(c, "attn_output_a g1", &L0->attn_output_a, OL, OL, (uint64_t)H * Dh, n);
        if (G > 1) check_matmul_grouped(c, &L0->attn_output_a, G, n);
        check_matmul(c, "attn_output_b", &L0->attn_output_b, 0, E, (uint64_t)G * OL, n);
        check_matmul(c, "hc_attn_fn", &L0->hc_attn_fn, 0, MIX, HD, n);
        check_matmul(c, "compressor_kv", &L4->attn_compressor_kv, 0, L4->attn_compressor_kv.ne[1], E, n);
        check_matmul(c, "indexer_q_b", &L4->indexer_attn_q_b, 0, (uint64_t)IH * Id, cf->q_lora_rank, n);
        check_matmul(c, "indexer_proj", &L4->indexer_proj, 0, IH, E, n);
        check_matmul(c, "ffn_gate_inp", &L0->ffn_gate_inp, 0, cf->n_expert, E, n);
        check_matmul(c, "ffn_down_shexp", &L0->ffn_down_shexp, 0, E, L0->ffn_down_shexp.ne[0], n);
        check_matmul(c, "output", &m->output, 0, cf->n_vocab, E, n);
        /* the products of one normed input the graph issues together */
        const dsv4_tensor *att[7] = {&L4->attn_q_a,
                                     &L4->attn_kv,
                                     &L4->attn_compressor_kv,
                                     &L4->attn_compressor_gate,
                                     &L4->indexer_compressor_kv,
                                     &L4->indexer_compressor_gate,
                                     &L4->indexer_proj};
        check_matmul_multi(c, "attention", att, 7, n);
        const dsv4_tensor *ffn[3] = {&L0->ffn_gate_inp, &L0->ffn_gate_shexp, &L0->ffn_up_shexp};
        check_matmul_multi(c, "ffn", ffn, 3, n);
        if (n == 1 && numerics == DSV4_NUMERICS_DS4 && !strcmp(against, "cuda")) {
            const mvw_act_op ops[] = {
                {"attn_q_a", 0, {&L0->attn_q_a}, 1, 0},
                {"attn_q_b", 0, {&L0->attn_q_b}, 1, 0},
                {"attn_output_b", 0, {&L0->attn_output_b}, 1, 0},
                {"ffn_down_shexp", 0, {&L0->ffn_down_shexp}, 1, 0},
                {"attn_output_a grouped", 1, {&L0->attn_output_a}, 1, G},
                {"multi attention x7", 2, {att[0], att[1], att[2], att[3], att[4], att[5], att[6]}, 7, 0},
                {"multi ffn x3", 2, {ffn[0], ffn[1], ffn[2]}, 3, 0},
            };
            check_mvw_act(c, ops, (int)(sizeof ops / sizeof ops[0]));
        }
    }
    /* ---- Q8_0 prefill products: bitwise the CPU (tensor cores for n >= 2), then timing; the
     * cuBLAS path (not bitwise) is off here and checked on its own below ---- */
    env_saved blas_off = env_set("DSV4_CUDA_BLAS", "0");
    if (numerics == DSV4_NUMERICS_DS4) {
        const uint32_t G = cf->n_out_group, OL = cf->o_lora_rank;
        const uint32_t ns[4] = {2, 7, 64, 200};
        for (int k = 0; k < 4; k++) {
            const uint32_t n = ns[k];
            check_matmul_bitwise(c, "attn_q_a", &L0->attn_q_a, 0, cf->q_lora_rank, E, n);
            check_matmul_bitwise(c, "attn_q_b", &L0->attn_q_b, 0, (uint64_t)H * Dh, cf->q_lora_rank, n);
            check_matmul_bitwise(c, "attn_kv", &L0->attn_kv, 0, Dh, E, n);
            if (G > 1)
                check_matmul_bitwise(c, "attn_output_a g1", &L0->attn_output_a, OL, OL, (uint64_t)H * Dh, n);
            check_matmul_bitwise(c, "attn_output_b", &L0->attn_output_b, 0, E, (uint64_t)G * OL, n);
            check_matmul_bitwise(c, "ffn_gate_shexp", &L0->ffn_gate_shexp, 0, L0->ffn_gate_shexp.ne[1], E, n);
            check_matmul_bitwise(c, "ffn_down_shexp", &L0->ffn_down_shexp, 0, E, L0->ffn_down_shexp.ne[0], n);
            /* a ragged slice of the vocabulary: row offset 7, 1000 + 37 rows */
            const uint64_t vo = cf->n_vocab > 1044 ? 1037 : cf->n_vocab - 7;
            check_matmul_bitwise(c, "output rows 7..", &m->output, 7, vo, E, n);
        }
        /* the v2 kernels (DSV4_CUDA_PREFILL_MMA=v2-all / v2n-all: even where v2 would leave a small
         * grid to v1), ragged in rows and tokens against their tiles; the switch is restored after */
        const char *prev_mma = getenv("DSV4_CUDA_PREFILL_MMA");
        char saved_mma[16] = "";
        if (prev_mma) snprintf(saved_mma, sizeof saved_mma, "%s", prev_mma);
        static const char *const v2_modes[2] = {"v2-all", "v2n-all"}, *const v2_tags[2] = {"v2", "v2n"};
        for (int vm = 0; vm < 2; vm++) {
            setenv("DSV4_CUDA_PREFILL_MMA", v2_modes[vm], 1);
            const uint32_t ns2[3] = {2, 130, 300};
            for (int k = 0; k < 3; k++) {
                const uint32_t n = ns2[k];
                char tag[48];
                snprintf(tag, sizeof tag, "%s attn_q_a", v2_tags[vm]);
                check_matmul_bitwise(c, tag, &L0->attn_q_a, 0, cf->q_lora_rank, E, n);
                snprintf(tag, sizeof tag, "%s attn_q_b", v2_tags[vm]);
                check_matmul_bitwise(c, tag, &L0->attn_q_b, 0, (uint64_t)H * Dh, cf->q_lora_rank, n);
                snprintf(tag, sizeof tag, "%s attn_output_b", v2_tags[vm]);
                check_matmul_bitwise(c, tag, &L0->attn_output_b, 0, E, (uint64_t)G * OL, n);
                const uint64_t vo = cf->n_vocab > 1044 ? 1037 : cf->n_vocab - 7;
                snprintf(tag, sizeof tag, "%s output rows 7..", v2_tags[vm]);
                check_matmul_bitwise(c, tag, &m->output, 7, vo, E, n);
            }
        }
        if (prev_mma)
            setenv("DSV4_CUDA_PREFILL_MMA", saved_mma, 1);
        else
            unsetenv("DSV4_CUDA_PREFILL_MMA");
        if (!strcmp(against, "cuda")) {
            time_prefill(c, "attn_q_b", &L0->attn_q_b, 2048);
            time_prefill(c, "attn_q_a", &L0->attn_q_a, 2048);
            time_prefill(c, "attn_output_b", &L0->attn_output_b, 2048);
            time_prefill(c, "ffn_down_shexp", &L0->ffn_down_shexp, 2048);
        }
    }
    /* ---- F16 prefill products on the tensor cores (n >= 8), the flash shapes, then timing ---- */
    if (numerics == DSV4_NUMERICS_DS4 && !strcmp(against, "cuda")) {
        const dsv4_layer_weights *LR = &m->layers[lr];
        const struct {
            const char *name;
            const dsv4_tensor *w;
        } f16w[6] = {{"compressor_kv r4", &L4->attn_compressor_kv},
                     {"compressor_kv rlong", &LR->attn_compressor_kv},
                     {"indexer_compressor_kv", &L4->indexer_compressor_kv},
                     {"ffn_gate_inp", &L0->ffn_gate_inp},
                     {"hc_attn_fn", &L0->hc_attn_fn},
                     {"indexer_proj", &L4->indexer_proj}};
        const uint32_t nf[3] = {8, 37, 256};
        for (int i = 0; i < 6; i++) {
            if (i == 1 && !lr) continue;
            for (int k = 0; k < 3; k++) check_matmul_f16(c, f16w[i].name, f16w[i].w, f16w[i].w->ne[1], nf[k]);
        }
        for (int i = 0; i < 6; i++) {
            if (i == 1 && !lr) continue;
            time_prefill(c, f16w[i].name, f16w[i].w, 256);
            time_prefill(c, f16w[i].name, f16w[i].w, 2048);
        }
    }
    env_restore(&blas_off);
    /* ---- prefill products on cuBLAS (n >= 256; f16 operands, not bitwise), then timing ---- */
    if (numerics == DSV4_NUMERICS_DS4 && !strcmp(against, "cuda")) {
        bool loaded = false;
        dsv4_backend_cuda_blas_calls(&c->gpu, NULL, NULL, &loaded, &c->err);
        if (!loaded) {
            printf("skip matmul blas: cuBLAS is not loaded on this machine\n");
        } else {
            const uint32_t G = cf->n_out_group, OL = cf->o_lora_rank;
            const uint32_t nb[2] = {256, 300};
            check_hc_pre_prefill(c, m, 300);
            for (int k = 0; k < 2; k++) {
                check_matmul_blas(c, "attn_q_a", &L0->attn_q_a, 0, cf->q_lora_rank, 1, nb[k], k == 1);
                check_matmul_blas(c, "attn_q_b", &L0->attn_q_b, 0, (uint64_t)H * Dh, 1, nb[k], false);
                check_matmul_blas(c, "attn_output_b", &L0->attn_output_b, 0, E, 1, nb[k], k == 1);
                check_matmul_blas(c, "ffn_down_shexp", &L0->ffn_down_shexp, 0, E, 1, nb[k], false);
                if (G > 1)
                    check_matmul_blas(c, "attn_output_a grouped", &L0->attn_output_a, 0, OL, G, nb[k],
                                      k == 1);
                const uint64_t vo = cf->n_vocab > 1044 ? 1037 : cf->n_vocab - 7;
                check_matmul_blas(c, "output rows 7..", &m->output, 7, vo, 1, nb[k], false);
                check_matmul_blas(c, "indexer_proj", &L4->indexer_proj, 0, L4->indexer_proj.ne[1], 1, nb[k],
                                  k == 1);
                check_matmul_blas(c, "ffn_gate_inp", &L0->ffn_gate_inp, 0, L0->ffn_gate_inp.ne[1], 1, nb[k],
                                  false);
            }
            {
                const dsv4_tensor *att[4] = {&L4->attn_q_a, &L4->attn_kv, &L4->attn_compressor_kv,
                                             &L4->attn_compressor_gate};
                check_multi_blas(c, "attention set", att, 4, 300);
            }
            time_blas(c, "attn_q_b", &L0->attn_q_b, 2048);
            time_blas(c, "attn_q_a", &L0->attn_q_a, 2048);
            time_blas(c, "attn_output_b", &L0->attn_output_b, 2048);
            time_blas(c, "ffn_gate_shexp", &L0->ffn_gate_shexp, 2048);
            time_blas(c, "ffn_down_shexp", &L0->ffn_down_shexp, 2048);
            time_blas(c, "compressor_kv r4", &L4->attn_compressor_kv, 2048);
            time_blas(c, "indexer_proj", &L4->indexer_proj, 2048);
        }
    }
    /* ---- rope, fp8, hadamard+fp4, f16 store ---- */
    for (uint32_t li = 0; li < 2; li++) {
        const uint32_t il = li ? l4 : 0;
        const dsv4_rope r = dsv4_rope_for_layer(cf, il);
        const size_t n = 3 * (size_t)H * Dh;
        float *x = hrand(c, n, 2.0f), *dx = dcopy(c, x, n * 4);
        char lb[64];
        for (int inv = 0; inv < 2; inv++) {
            snprintf(lb, sizeof lb, "rope layer %u%s", il, inv ? " inverse" : "");
            if (ran(c, lb, CPU->rope_tail(CC, x, 3, H, Dh, 1000 + 37 * li, 1, &r, inv, &ec),
                    GPU->rope_tail(GC, dx, 3, H, Dh, 1000 + 37 * li, 1, &r, inv, &c->err), &ec))
                cmp_f(c, lb, x, dx, n);
            c->gpu.ops->write(GC, dx, x, n * 4, &c->err); /* resync inputs */
        }
        free(x), dfree(c, dx);
    }
    /* ---- fused q norm + rope, kv norm + rope + fp8: bitwise the device's unfused ops (0 of N
     * differ), close to the CPU's fused op; decode (n = 1) and a prefill chunk (n = 7) ---- */
    if (GPU->q_norm_rope && GPU->kv_norm_rope_fp8 && GPU->fused_available) {
        for (uint32_t li = 0; li < 2; li++) {
            const uint32_t il = li ? l4 : 0;
            const dsv4_rope r = dsv4_rope_for_layer(cf, il);
            const dsv4_tensor *kn = &m->layers[il].attn_kv_a_norm;
            const uint32_t nope = Dh - cf->n_rot, p0 = 2000 + 53 * li;
            const uint32_t ns[3] = {1, 7, 70}; /* 70: the prefill shape (8 heads per block) */
            for (uint32_t ni = 0; ni < 3; ni++) {
                const uint32_t n = ns[ni];
                char lb[64];
                const dsv4_fused_query fq = {.n_tokens = n,
                                             .width = Dh,
                                             .weight_type = DSV4_TYPE_F32,
                                             .mode = n > 1,
                                             .n_hc = HC,
                                             .aux_type = DSV4_TYPE_F32,
                                             .n_tiers = 1};
                dsv4_fused_query fk = fq;
                fk.weight_type = m->layers[il].attn_kv.type;
                fk.aux_type = kn->type;
                const bool gq = GPU->fused_available(GC, DSV4_FUSED_Q_NORM_ROPE, &fq);
                const bool gk = GPU->fused_available(GC, DSV4_FUSED_KV_NORM_ROPE_FP8, &fk);
                snprintf(lb, sizeof lb, "q/kv norm_rope gates n=%u", n);
                printf("%s %-34s q %s, kv %s\n", gq && gk ? "ok  " : "FAIL", lb, gq ? "open" : "closed",
                       gk ? "open" : "closed");
                c->fails += !(gq && gk), c->checks++;
                for (int kv = 0; kv < 2; kv++) {
                    const size_t nv = (size_t)n * (kv ? 1 : H) * Dh;
                    float *x = hrand(c, nv, 3.0f), *du = dcopy(c, x, nv * 4), *df = dcopy(c, x, nv * 4);
                    float *gu = malloc(nv * 4), *gf = malloc(nv * 4);
                    dsv4_status su, sf, sc;
                    if (kv) {
                        su = GPU->rmsnorm(GC, du, kn, n, Dh, cf->rms_eps, du, &c->err);
                        if (su == DSV4_OK) su = GPU->rope_tail(GC, du, n, 1, Dh, p0, 1, &r, false, &c->err);
                        if (su == DSV4_OK) su = GPU->fp8_kv(GC, du, n, Dh, nope, &c->err);
                        sf = su == DSV4_OK ? GPU->kv_norm_rope_fp8(GC, df, kn, n, Dh, cf->rms_eps, p0, 1, &r,
                                                                   nope, &c->err)
                                           : su;
                        sc = CPU->kv_norm_rope_fp8(CC, x, kn, n, Dh, cf->rms_eps, p0, 1, &r, nope, &ec);
                    } else {
                        su = GPU->rmsnorm(GC, du, NULL, n * H, Dh, cf->rms_eps, du, &c->err);
                        if (su == DSV4_OK) su = GPU->rope_tail(GC, du, n, H, Dh, p0, 1, &r, false, &c->err);
                        sf = su == DSV4_OK
                                 ? GPU->q_norm_rope(GC, df, n, H, Dh, cf->rms_eps, p0, 1, &r, &c->err)
                                 : su;
                        sc = CPU->q_norm_rope(CC, x, n, H, Dh, cf->rms_eps, p0, 1, &r, &ec);
                    }
                    const char *nm = kv ? "kv_norm_rope_fp8" : "q_norm_rope";
                    snprintf(lb, sizeof lb, "%s L%u n=%u fused vs unfused", nm, il, n);
                    if (ran(c, lb, DSV4_OK, sf, &ec)) {
                        GPU->read(GC, gu, du, nv * 4, &c->err);
                        GPU->read(GC, gf, df, nv * 4, &c->err);
                        size_t differ = 0;
                        for (size_t i = 0; i < nv; i++) differ += memcmp(&gu[i], &gf[i], 4) != 0;
                        snprintf(lb, sizeof lb, "%s L%u bitwise", nm, il);
                        printf("%s %-34s n=%-8u %zu of %zu values differ (required: 0)\n",
                               differ ? "FAIL" : "ok  ", lb, n, differ, nv);
                        c->fails += differ != 0, c->checks++;
                        snprintf(lb, sizeof lb, "%s L%u n=%u vs cpu", nm, il, n);
                        if (ran(c, lb, sc, DSV4_OK, &ec)) cmp_f(c, lb, x, df, nv);
                    }
                    free(x), free(gu), free(gf), dfree(c, du), dfree(c, df);
                }
            }
        }
    }
    /* ---- q_norm_rope_idx (one decode token): the query heads and the indexer's query heads in one
     * launch, bitwise the device's q_norm_rope + rope_tail + hadamard_fp4; close to the CPU's ---- */
    if (GPU->q_norm_rope_idx && GPU->fused_available && cf->idx_n_head && cf->idx_head_dim) {
        const uint32_t IH = cf->idx_n_head, Id = cf->idx_head_dim;
        const dsv4_fused_query fq = {.n_tokens = 1,
                                     .width = Dh,
                                     .weight_type = DSV4_TYPE_F32,
                                     .n_hc = HC,
                                     .aux_type = DSV4_TYPE_F32,
                                     .n_tiers = 1,
                                     .width2 = Id};
        const bool open = GPU->fused_available(GC, DSV4_FUSED_Q_NORM_ROPE_IDX, &fq);
        gate_check(c, "q_norm_rope_idx gate n=1", open, c->ds4, "EXACT numerics skip the Hadamard and FP4");
        for (uint32_t li = 0; li < 2 && open; li++) {
            const uint32_t il = li ? l4 : 0;
            const dsv4_rope r = dsv4_rope_for_layer(cf, il);
            const uint32_t p0 = 2051 + 977 * li;
            const size_t nq = (size_t)H * Dh, ni = (size_t)IH * Id;
            float *q = hrand(c, nq, 3.0f), *iq = hrand(c, ni, 2.0f);
            float *duq = dcopy(c, q, nq * 4), *dfq = dcopy(c, q, nq * 4);
            float *dui = dcopy(c, iq, ni * 4), *dfi = dcopy(c, iq, ni * 4);
            dsv4_status su = GPU->q_norm_rope(GC, duq, 1, H, Dh, cf->rms_eps, p0, 1, &r, &c->err);
            if (su == DSV4_OK) su = GPU->rope_tail(GC, dui, 1, IH, Id, p0, 1, &r, false, &c->err);
            if (su == DSV4_OK) su = GPU->hadamard_fp4(GC, dui, IH, Id, &c->err);
            const dsv4_status sf = su == DSV4_OK ? GPU->q_norm_rope_idx(GC, dfq, H, Dh, cf->rms_eps, dfi, IH,
                                                                        Id, p0, &r, &c->err)
                                                 : su;
            const dsv4_status sc = CPU->q_norm_rope_idx(CC, q, H, Dh, cf->rms_eps, iq, IH, Id, p0, &r, &ec);
            char lb[64];
            snprintf(lb, sizeof lb, "q_norm_rope_idx L%u fused vs unfused", il);
            if (ran(c, lb, DSV4_OK, sf, &ec)) {
                const float *dev[4] = {duq, dfq, dui, dfi};
                const size_t nv[2] = {nq, ni};
                for (int part = 0; part < 2; part++) {
                    float *a = malloc(nv[part] * 4), *b = malloc(nv[part] * 4);
                    GPU->read(GC, a, dev[2 * part], nv[part] * 4, &c->err);
                    GPU->read(GC, b, dev[2 * part + 1], nv[part] * 4, &c->err);
                    size_t differ = 0;
                    for (size_t i = 0; i < nv[part]; i++) differ += memcmp(&a[i], &b[i], 4) != 0;
                    snprintf(lb, sizeof lb, "q_norm_rope_idx L%u %s bitwise", il, part ? "iq" : "q");
                    printf("%s %-34s %zu of %zu values differ (required: 0)\n", differ ? "FAIL" : "ok  ", lb,
                           differ, nv[part]);
                    c->fails += differ != 0, c->checks++;
                    free(a), free(b);
                }
                snprintf(lb, sizeof lb, "q_norm_rope_idx L%u q vs cpu", il);
                if (ran(c, lb, sc, DSV4_OK, &ec)) cmp_f(c, lb, q, dfq, nq);
                /* iq vs the CPU: an angle whose glibc cosf/sinf is an ulp off (~0.2 %) may move a value
                 * across an FP4 step, so a few values may differ by a step; at most 1 % may */
                float *gi = malloc(ni * 4);
                GPU->read(GC, gi, dfi, ni * 4, &c->err);
                float mx = 0.0f;
                for (size_t i = 0; i < ni; i++) mx = fmaxf(mx, fabsf(iq[i]));
                size_t off = 0;
                for (size_t i = 0; i < ni; i++) off += !(fabsf(gi[i] - iq[i]) <= 1e-3f * mx);
                snprintf(lb, sizeof lb, "q_norm_rope_idx L%u iq vs cpu", il);
                printf("%s %-34s %zu of %zu values off by more than 1e-3 of max (allowed: 1 %%)\n",
                       sc == DSV4_OK && off * 100 <= ni ? "ok  " : "FAIL", lb, off, ni);
                c->fails += !(sc == DSV4_OK && off * 100 <= ni), c->checks++;
                free(gi);
            }
            free(q), free(iq), dfree(c, duq), dfree(c, dfq), dfree(c, dui), dfree(c, dfi);
        }
    }
    /* ---- emit_row (a compressor's emitted row): one launch, bitwise the device's rmsnorm, rope_tail,
     * fp8_kv / hadamard_fp4 and store_f16; the attention row into F16 and F32 rows, the indexer row into
     * FP4 and F16 rows ---- */
    if (GPU->emit_row && GPU->fused_available && cf->idx_head_dim) {
        const uint32_t l4i = l4; /* a ratio-4 layer: both compressors */
        const dsv4_layer_weights *LL = &m->layers[l4i];
        const dsv4_rope r = dsv4_rope_for_layer(cf, l4i);
        for (int v = 0; v < 4; v++) {
            const bool idx = v >= 2;
            const uint32_t W = idx ? cf->idx_head_dim : Dh, dt = v == 0   ? DSV4_TYPE_F16
                                                                 : v == 1 ? DSV4_TYPE_F32
                                                                 : v == 2 ? DSV4_KV_FP4
                                                                          : DSV4_TYPE_F16;
            const dsv4_tensor *nw = idx ? &LL->indexer_compressor_norm : &LL->attn_compressor_norm;
            const uint32_t pos = 4 * (511 + 97 * v), nope = idx ? 0 : W - cf->n_rot;
            const dsv4_fused_query fq = {.n_tokens = 1,
                                         .width = W,
                                         .weight_type = DSV4_TYPE_F32,
                                         .n_hc = HC,
                                         .aux_type = nw->type,
                                         .n_tiers = 1,
                                         .width2 = dt};
            char lb[64];
            snprintf(lb, sizeof lb, "emit_row gate %s row -> %#x", idx ? "indexer" : "attention", dt);
            const bool open = GPU->fused_available(GC, DSV4_FUSED_EMIT_ROW, &fq);
            gate_check(c, lb, open, c->ds4, "EXACT numerics skip the FP8 and store roundings");
            if (!open) continue;
            const size_t rb = dt == DSV4_KV_FP4     ? (size_t)W / 32 * DSV4_KV_FP4_BLOCK_BYTES
                              : dt == DSV4_TYPE_F16 ? (size_t)W * 2
                                                    : (size_t)W * 4;
            float *x = hrand(c, W, 3.0f), *dx = dcopy(c, x, (size_t)W * 4);
            float *zero = calloc(W, 4);
            float *yu = dcopy(c, zero, (size_t)W * 4), *yf = dcopy(c, zero, (size_t)W * 4);
            uint8_t *hu = calloc(rb, 1), *hf = calloc(rb, 1);
            void *du = dcopy(c, hu, rb), *df = dcopy(c, hu, rb);
            dsv4_status su = GPU->rmsnorm(GC, dx, nw, 1, W, cf->rms_eps, yu, &c->err);
            if (su == DSV4_OK) su = GPU->rope_tail(GC, yu, 1, 1, W, pos, 0, &r, false, &c->err);
            if (su == DSV4_OK)
                su =
                    idx ? GPU->hadamard_fp4(GC, yu, 1, W, &c->err) : GPU->fp8_kv(GC, yu, 1, W, nope, &c->err);
            if (su == DSV4_OK) su = GPU->store_f16(GC, du, dt, yu, 1, W, &c->err);
            const dsv4_status sf = su == DSV4_OK ? GPU->emit_row(GC, dx, nw, W, cf->rms_eps, pos, &r, idx,
                                                                 nope, yf, df, dt, &c->err)
                                                 : su;
            snprintf(lb, sizeof lb, "emit_row %s -> %#x fused vs unfused", idx ? "indexer" : "attention", dt);
            if (ran(c, lb, DSV4_OK, sf, &ec)) {
                float *a = malloc((size_t)W * 4), *b = malloc((size_t)W * 4);
                GPU->read(GC, a, yu, (size_t)W * 4, &c->err);
                GPU->read(GC, b, yf, (size_t)W * 4, &c->err);
                GPU->read(GC, hu, du, rb, &c->err);
                GPU->read(GC, hf, df, rb, &c->err);
                size_t differ = 0;
                for (uint32_t i = 0; i < W; i++) differ += memcmp(&a[i], &b[i], 4) != 0;
                const int row_differs = memcmp(hu, hf, rb) != 0;
                snprintf(lb, sizeof lb, "emit_row %s -> %#x bitwise", idx ? "indexer" : "attention", dt);
                printf("%s %-34s %zu of %u values differ, cache row %s (required: 0, same)\n",
                       differ || row_differs ? "FAIL" : "ok  ", lb, differ, W,
                       row_differs ? "differs" : "same");
                c->fails += differ != 0 || row_differs, c->checks++;
                free(a), free(b);
            }
            free(x), free(zero), free(hu), free(hf);
            dfree(c, dx), dfree(c, yu), dfree(c, yf), dfree(c, du), dfree(c, df);
        }
    }
    /* ---- router_topk (one token of a top-k layer): the router + shared gate/up products and the
     * selection in one launch, bitwise matmul_multi + router_select (logits, shared rows, ids, weights);
     * with the layer's bias and without ---- */
    if (GPU->matmuls_router && GPU->matmul_multi && GPU->fused_available && lnh) {
        const dsv4_layer_weights *LR = &m->layers[lnh];
        const uint32_t NE = cf->n_expert, K = cf->n_expert_used;
        const uint32_t ff = dsv4_tensor_present(&LR->ffn_gate_shexp) ? (uint32_t)LR->ffn_gate_shexp.ne[1] : 0;
        const dsv4_fused_query fq = {.n_tokens = 1,
                                     .width = NE,
                                     .weight_type = LR->ffn_gate_inp.type,
                                     .n_hc = HC,
                                     .aux_type = DSV4_TYPE_F32,
                                     .n_tiers = 1,
                                     .width2 = K};
        const bool open = GPU->fused_available(GC, DSV4_FUSED_ROUTER_TOPK, &fq);
        gate_check(c, "router_topk gate n=1", open, c->ds4, "DS4 numerics only");
        for (int b = 0; b < 2 && open && ff; b++) {
            const dsv4_tensor *bias = b && dsv4_tensor_present(&LR->exp_probs_b) ? &LR->exp_probs_b : NULL;
            float *x = hrand(c, E, 1.0f), *dx = dcopy(c, x, (size_t)E * 4);
            const size_t ny = (size_t)NE + 2 * ff;
            float *zero = calloc(ny, 4);
            float *yu = dcopy(c, zero, ny * 4), *yf = dcopy(c, zero, ny * 4);
            int32_t *su0 = calloc(K, 4), *sf0 = calloc(K, 4);
            int32_t *dsu = dcopy(c, su0, (size_t)K * 4), *dsf = dcopy(c, sf0, (size_t)K * 4);
            float *wu = dcopy(c, zero, (size_t)K * 4), *wf = dcopy(c, zero, (size_t)K * 4);
            dsv4_matmul_item iu[3] = {{&LR->ffn_gate_inp, 0, NE, dx, E, yu, NE},
                                      {&LR->ffn_gate_shexp, 0, ff, dx, E, yu + NE, ff},
                                      {&LR->ffn_up_shexp, 0, ff, dx, E, yu + NE + ff, ff}};
            dsv4_matmul_item jf[3] = {{&LR->ffn_gate_inp, 0, NE, dx, E, yf, NE},
                                      {&LR->ffn_gate_shexp, 0, ff, dx, E, yf + NE, ff},
                                      {&LR->ffn_up_shexp, 0, ff, dx, E, yf + NE + ff, ff}};
            dsv4_status su = GPU->matmul_multi(GC, iu, 3, 1, &c->err);
            if (su == DSV4_OK)
                su = GPU->router_select(GC, yu, 1, NE, K, bias, NULL, NULL, cf->expert_weights_scale, dsu, wu,
                                        &c->err);
            const dsv4_status sf = su == DSV4_OK
                                       ? GPU->matmuls_router(GC, jf, 3, 1, NE, K, bias,
                                                             cf->expert_weights_scale, dsf, wf, &c->err)
                                       : su;
            char lb[64];
            snprintf(lb, sizeof lb, "router_topk L%u %s fused vs unfused", lnh, bias ? "bias" : "no bias");
            if (ran(c, lb, DSV4_OK, sf, &ec)) {
                float *a = malloc(ny * 4), *bb = malloc(ny * 4), *wa = malloc((size_t)K * 4),
                      *wb = malloc((size_t)K * 4);
                GPU->read(GC, a, yu, ny * 4, &c->err);
                GPU->read(GC, bb, yf, ny * 4, &c->err);
                GPU->read(GC, su0, dsu, (size_t)K * 4, &c->err);
                GPU->read(GC, sf0, dsf, (size_t)K * 4, &c->err);
                GPU->read(GC, wa, wu, (size_t)K * 4, &c->err);
                GPU->read(GC, wb, wf, (size_t)K * 4, &c->err);
                size_t differ = 0;
                for (size_t i = 0; i < ny; i++) differ += memcmp(&a[i], &bb[i], 4) != 0;
                const int ids = memcmp(su0, sf0, (size_t)K * 4) != 0,
                          wts = memcmp(wa, wb, (size_t)K * 4) != 0;
                snprintf(lb, sizeof lb, "router_topk L%u %s bitwise", lnh, bias ? "bias" : "no bias");
                printf("%s %-34s %zu of %zu products differ, ids %s, weights %s (required: 0, same, same)\n",
                       differ || ids || wts ? "FAIL" : "ok  ", lb, differ, ny, ids ? "differ" : "same",
                       wts ? "differ" : "same");
                c->fails += differ || ids || wts, c->checks++;
                free(a), free(bb), free(wa), free(wb);
            }
            free(x), free(zero), free(su0), free(sf0);
            dfree(c, dx), dfree(c, yu), dfree(c, yf), dfree(c, dsu), dfree(c, dsf), dfree(c, wu),
                dfree(c, wf);
        }
    }
    {
        const size_t n = 5 * (size_t)Dh;
        float *x = hrand(c, n, 4.0f), *dx = dcopy(c, x, n * 4), *y = calloc(n, 4), *dy = dcopy(c, y, n * 4);
        if (ran(c, "fp8_kv", CPU->fp8_kv(CC, x, 5, Dh, Dh - cf->n_rot, &ec),
                GPU->fp8_kv(GC, dx, 5, Dh, Dh - cf->n_rot, &c->err), &ec))
            cmp_f(c, "fp8_kv", x, dx, n);
        if (ran(c, "store_f16", CPU->store_f16(CC, y, DSV4_TYPE_F32, x, 5, Dh, &ec),
                GPU->store_f16(GC, dy, DSV4_TYPE_F32, dx, 5, Dh, &c->err), &ec))
            cmp_f(c, "store_f16", y, dy, n);
        if (ran(c, "store_f16 -> f16 rows", CPU->store_f16(CC, y, DSV4_TYPE_F16, x, 5, Dh, &ec),
                GPU->store_f16(GC, dy, DSV4_TYPE_F16, dx, 5, Dh, &c->err), &ec))
            cmp_bytes(c, "store_f16 -> f16 rows", y, dy, n * 2);
        free(x), free(y), dfree(c, dx), dfree(c, dy);
        const size_t ni = 6 * (size_t)Id;
        float *z = hrand(c, ni, 3.0f), *dz = dcopy(c, z, ni * 4);
        if (ran(c, "hadamard_fp4", CPU->hadamard_fp4(CC, z, 6, Id, &ec),
                GPU->hadamard_fp4(GC, dz, 6, Id, &c->err), &ec))
            cmp_f(c, "hadamard_fp4", z, dz, ni);
        /* packed FP4 rows: of the Hadamard + FP4 output (exact) and of raw values (rounded) */
        for (int raw_in = 0; raw_in < 2; raw_in++) {
            const char *lb = raw_in ? "store_f16 -> fp4 rows (raw)" : "store_f16 -> fp4 rows";
            float *zi = raw_in ? hrand(c, ni, 3.0f) : z, *dzi = raw_in ? dcopy(c, zi, ni * 4) : dz;
            const size_t pb = 6 * (size_t)Id / 32 * DSV4_KV_FP4_BLOCK_BYTES;
            unsigned char *pk = calloc(pb, 1), *dpk = dcopy(c, pk, pb);
            if (ran(c, lb, CPU->store_f16(CC, pk, DSV4_KV_FP4, zi, 6, Id, &ec),
                    GPU->store_f16(GC, dpk, DSV4_KV_FP4, dzi, 6, Id, &c->err), &ec))
                cmp_bytes(c, lb, pk, dpk, pb);
            if (!raw_in && numerics == DSV4_NUMERICS_DS4) { /* the packed rows read back as f16_round(z) */
                float *back = malloc(ni * 4);
                dsv4_fp4_unpack_row(pk, (int64_t)ni, back);
                size_t bad = 0;
                for (size_t i = 0; i < ni; i++) bad += back[i] != dsv4_f16_round(z[i]);
                printf("%s %-34s n=%-8zu %zu differ from f16_round\n", bad ? "FAIL" : "ok  ",
                       "fp4 rows exact", ni, bad);
                c->fails += bad != 0, c->checks++;
                free(back);
            }
            free(pk), dfree(c, dpk);
            if (raw_in) free(zi), dfree(c, dzi);
        }
        free(z), dfree(c, dz);
    }
    /* ---- compressor: ratio 4 (attention width and indexer width) and the long ratio ---- */
    for (int which = 0; which < 3; which++) {
        const uint32_t il = which == 2 ? lr : l4;
        const uint32_t R = cf->compress_ratio[il];
        if (R == 0 || (which == 2 && !lr)) continue;
        const dsv4_layer_weights *L = &m->layers[il];
        const dsv4_tensor *ape = which == 1 ? &L->indexer_compressor_ape : &L->attn_compressor_ape;
        const uint32_t dc = which == 1 ? Id : Dh, coff = R == 4 ? 2 : 1, W = coff * dc;
        const size_t fr = (size_t)coff * R * W;
        float *skv = calloc(fr, 4), *ssc = malloc(fr * 4), *pool = calloc(dc, 4);
        for (size_t i = 0; i < fr; i++) ssc[i] = -1e30f;
        float *dkv = dcopy(c, skv, fr * 4), *dsc = dcopy(c, ssc, fr * 4), *dpool = dcopy(c, pool, dc * 4);
        char lb[64];
        bool ok = true;
        for (uint32_t pos = 0; pos < 2 * R && ok; pos++) {
            float *kv = hrand(c, W, 2.0f), *sc = hrand(c, W, 3.0f);
            float *dk = dcopy(c, kv, W * 4), *ds = dcopy(c, sc, W * 4);
            snprintf(lb, sizeof lb, "compressor r%u %s pos %u", R, which == 1 ? "idx" : "attn", pos);
            ok = ran(c, lb, CPU->compressor_step(CC, kv, sc, ape, pos, R, dc, skv, ssc, pool, &ec),
                     GPU->compressor_step(GC, dk, ds, ape, pos, R, dc, dkv, dsc, dpool, &c->err), &ec);
            if (ok && (pos + 1) % R == 0) {
                snprintf(lb, sizeof lb, "compressor r%u %s pooled @%u", R, which == 1 ? "idx" : "attn", pos);
                cmp_f(c, lb, pool, dpool, dc);
            }
            free(kv), free(sc), dfree(c, dk), dfree(c, ds);
        }
        if (ok) {
            snprintf(lb, sizeof lb, "compressor r%u %s state kv", R, which == 1 ? "idx" : "attn");
            cmp_f(c, lb, skv, dkv, fr);
            snprintf(lb, sizeof lb, "compressor r%u %s state score", R, which == 1 ? "idx" : "attn");
            cmp_f(c, lb, ssc, dsc, fr);
        }
        free(skv), free(ssc), free(pool), dfree(c, dkv), dfree(c, dsc), dfree(c, dpool);
    }
    /* ---- indexer top-k and attention ---- */
    {
        const uint32_t nr = 3 * cf->idx_top_k + 5, k = cf->idx_top_k;
        float *q = hrand(c, (size_t)IH * Id, 1.0f), *w = hrand(c, IH, 1.0f),
              *rows = hrand(c, (size_t)nr * Id, 1.0f);
        float *dq = dcopy(c, q, (size_t)IH * Id * 4), *dw = dcopy(c, w, IH * 4),
              *drows = dcopy(c, rows, (size_t)nr * Id * 4);
        int32_t *sel = calloc(k, 4), *dsel = dcopy(c, sel, k * 4);
        const float ws = 1.0f / sqrtf((float)(Id * IH));
        for (int ti = 0; ti < 3; ti++) { /* F32, F16 and packed FP4 rows */
            const uint32_t rt = ti == 0 ? DSV4_TYPE_F32 : ti == 1 ? DSV4_TYPE_F16 : DSV4_KV_FP4;
            size_t rb;
            void *trows = typed_rows(rows, nr, Id, rt, &rb), *dtrows = dcopy(c, trows, rb);
            char lb[64];
            snprintf(lb, sizeof lb, "indexer_topk %s rows", kv_type_name(rt));
            if (ran(c, lb, CPU->indexer_topk(CC, q, w, ws, IH, Id, rt, trows, nr, k, sel, &ec),
                    GPU->indexer_topk(GC, dq, dw, ws, IH, Id, rt, dtrows, nr, k, dsel, &c->err), &ec))
                cmp_i(c, lb, sel, dsel, k);
            free(trows), dfree(c, dtrows);
        }
        const uint32_t cap = 16, ncomp = 2 * k;
        float *qa = hrand(c, (size_t)H * Dh, 1.0f), *raw = hrand(c, (size_t)cap * Dh, 1.0f);
        float *comp = hrand(c, (size_t)ncomp * Dh, 1.0f), *out = calloc((size_t)H * Dh, 4);
        float *dqa = dcopy(c, qa, (size_t)H * Dh * 4), *draw = dcopy(c, raw, (size_t)cap * Dh * 4);
        float *dcomp = dcopy(c, comp, (size_t)ncomp * Dh * 4), *dout = dcopy(c, out, (size_t)H * Dh * 4);
        int32_t *asel = malloc(k * 4);
        for (uint32_t i = 0; i < k; i++) asel[i] = (int32_t)(2 * i + (i & 1));
        int32_t *dasel = dcopy(c, asel, k * 4);
        const float kq = 1.0f / sqrtf((float)Dh);
        for (int ti = 0; ti < 2; ti++) { /* F32 and F16 rows */
            const uint32_t kt = ti ? DSV4_TYPE_F16 : DSV4_TYPE_F32;
            size_t rb, cb;
            void *traw = typed_rows(raw, cap, Dh, kt, &rb), *tcomp = typed_rows(comp, ncomp, Dh, kt, &cb);
            void *dtraw = dcopy(c, traw, rb), *dtcomp = dcopy(c, tcomp, cb);
            char lb[64];
            snprintf(lb, sizeof lb, "attention raw+comp %s", kv_type_name(kt));
            if (ran(c, lb,
                    CPU->attention(CC, qa, H, Dh, kt, traw, cap, 5, 14, tcomp, ncomp, NULL, 0,
                                   &L0->attn_sinks, kq, out, &ec),
                    GPU->attention(GC, dqa, H, Dh, kt, dtraw, cap, 5, 14, dtcomp, ncomp, NULL, 0,
                                   &L0->attn_sinks, kq, dout, &c->err),
                    &ec))
                cmp_f(c, lb, out, dout, (size_t)H * Dh);
            snprintf(lb, sizeof lb, "attention raw+sel %s", kv_type_name(kt));
            if (ran(c, lb,
                    CPU->attention(CC, qa, H, Dh, kt, traw, cap, 9, 16, tcomp, ncomp, asel, k,
                                   &L0->attn_sinks, kq, out, &ec),
                    GPU->attention(GC, dqa, H, Dh, kt, dtraw, cap, 9, 16, dtcomp, ncomp, dasel, k,
                                   &L0->attn_sinks, kq, dout, &c->err),
                    &ec))
                cmp_f(c, lb, out, dout, (size_t)H * Dh);
            free(traw), free(tcomp), dfree(c, dtraw), dfree(c, dtcomp);
        }
        free(q), free(w), free(rows), free(sel), free(qa), free(raw), free(comp), free(out), free(asel);
        dfree(c, dq), dfree(c, dw), dfree(c, drows), dfree(c, dsel), dfree(c, dqa), dfree(c, draw),
            dfree(c, dcomp);
        dfree(c, dout), dfree(c, dasel);
    }
    /* ---- batched prefill ops (CPU chunk ops == the per-token ops: tests/engine/test_prefill_batch) ---- */
    /* compressor_chunk from an unaligned position, an aligned one, and a chunk that emits nothing
     * (the final state: the rows of the last tokens of each phase, bitwise) */
    for (int which = 0; which < 9; which++) {
        const int where = which / 3;
        const uint32_t il = which % 3 == 2 ? lr : l4;
        const uint32_t R = cf->compress_ratio[il];
        if (R == 0 || (which % 3 == 2 && !lr) || !GPU->compressor_chunk) continue;
        const dsv4_layer_weights *L = &m->layers[il];
        const dsv4_tensor *ape = which % 3 == 1 ? &L->indexer_compressor_ape : &L->attn_compressor_ape;
        const uint32_t dc = which % 3 == 1 ? Id : Dh, coff = R == 4 ? 2 : 1, W = coff * dc;
        const uint32_t pos0 = where == 0 ? R + 3 : where == 1 ? 2 * R : R + 1;
        const uint32_t n = where == 0 ? 3 * R + 5 : where == 1 ? 2 * R + 1 : R - 3;
        const uint32_t n_emit = (pos0 + n) / R - pos0 / R;
        const size_t fr = (size_t)coff * R * W;
        float *skv = hrand(c, fr, 1.0f), *ssc = hrand(c, fr, 3.0f),
              *pool = calloc((size_t)n_emit * dc + 1, 4);
        float *kv = hrand(c, (size_t)n * W, 2.0f), *sc = hrand(c, (size_t)n * W, 3.0f);
        float *dkv = dcopy(c, skv, fr * 4), *dsc = dcopy(c, ssc, fr * 4);
        float *dpool = dcopy(c, pool, ((size_t)n_emit * dc + 1) * 4);
        float *dk = dcopy(c, kv, (size_t)n * W * 4), *ds = dcopy(c, sc, (size_t)n * W * 4);
        char lb[80];
        const char *nm = which % 3 == 1 ? "idx" : "attn";
        snprintf(lb, sizeof lb, "compressor_chunk r%u %s @%u+%u", R, nm, pos0, n);
        if (ran(c, lb, CPU->compressor_chunk(CC, kv, W, sc, W, ape, pos0, n, R, dc, skv, ssc, pool, &ec),
                GPU->compressor_chunk(GC, dk, W, ds, W, ape, pos0, n, R, dc, dkv, dsc, dpool, &c->err),
                &ec)) {
            snprintf(lb, sizeof lb, "compressor_chunk r%u %s @%u pooled", R, nm, pos0);
            if (n_emit) cmp_f(c, lb, pool, dpool, (size_t)n_emit * dc);
            snprintf(lb, sizeof lb, "compressor_chunk r%u %s @%u state kv", R, nm, pos0);
            cmp_bytes(c, lb, skv, dkv, fr * sizeof(float));
            snprintf(lb, sizeof lb, "compressor_chunk r%u %s @%u state sc", R, nm, pos0);
            cmp_bytes(c, lb, ssc, dsc, fr * sizeof(float));
        }
        free(skv), free(ssc), free(pool), free(kv), free(sc);
        dfree(c, dkv), dfree(c, dsc), dfree(c, dpool), dfree(c, dk), dfree(c, ds);
    }
    /* indexer_topk_chunk: tokens straddling the indexer start; then > 8192 rows */
    for (int big = 0; big < 2 && GPU->indexer_topk_chunk; big++) {
        const uint32_t k = cf->idx_top_k, R = 4;
        const uint32_t pos0 = big ? 4 * 9000 : 4 * k - 20, n = big ? 6 : 40, nr = (pos0 + n) / R;
        float *q = hrand(c, (size_t)n * IH * Id, 1.0f), *w = hrand(c, (size_t)n * IH, 1.0f);
        float *rows = hrand(c, (size_t)nr * Id, 1.0f);
        int32_t *sel = malloc((size_t)n * k * 4);
        for (size_t i = 0; i < (size_t)n * k; i++) sel[i] = -1;
        float *dq = dcopy(c, q, (size_t)n * IH * Id * 4), *dw = dcopy(c, w, (size_t)n * IH * 4);
        float *drows = dcopy(c, rows, (size_t)nr * Id * 4);
        int32_t *dsel = dcopy(c, sel, (size_t)n * k * 4);
        const float ws = 1.0f / sqrtf((float)(Id * IH));
        for (int ti = 0; ti < 3; ti++) { /* F32, F16 and packed FP4 rows */
            const uint32_t rt = ti == 0 ? DSV4_TYPE_F32 : ti == 1 ? DSV4_TYPE_F16 : DSV4_KV_FP4;
            size_t rb;
            void *trows = typed_rows(rows, nr, Id, rt, &rb), *dtrows = dcopy(c, trows, rb);
            char lb[64];
            snprintf(lb, sizeof lb, "%s %s",
                     big ? "indexer_topk_chunk 9000+ rows" : "indexer_topk_chunk start", kv_type_name(rt));
            if (ran(c, lb, CPU->indexer_topk_chunk(CC, q, w, ws, IH, Id, rt, trows, pos0, n, R, k, sel, &ec),
                    GPU->indexer_topk_chunk(GC, dq, dw, ws, IH, Id, rt, dtrows, pos0, n, R, k, dsel, &c->err),
                    &ec))
                cmp_i(c, lb, sel, dsel, (size_t)n * k);
            /* the plain-loop scoring (DSV4_CUDA_ISCORE=plain; the register-tiled kernel is the
             * default): the same sets */
            const char *old_is = getenv("DSV4_CUDA_ISCORE");
            setenv("DSV4_CUDA_ISCORE", "plain", 1);
            snprintf(lb, sizeof lb, "%s %s plain",
                     big ? "indexer_topk_chunk 9000+" : "indexer_topk_chunk start", kv_type_name(rt));
            if (c->gpu.ops->write(GC, dsel, (int32_t[]){-1}, 4, &c->err) == DSV4_OK &&
                ran(c, lb, DSV4_OK,
                    GPU->indexer_topk_chunk(GC, dq, dw, ws, IH, Id, rt, dtrows, pos0, n, R, k, dsel, &c->err),
                    &ec))
                cmp_i(c, lb, sel, dsel, (size_t)n * k);
            if (old_is)
                setenv("DSV4_CUDA_ISCORE", old_is, 1);
            else
                unsetenv("DSV4_CUDA_ISCORE");
            free(trows), dfree(c, dtrows);
        }
        free(q), free(w), free(rows), free(sel);
        dfree(c, dq), dfree(c, dw), dfree(c, drows), dfree(c, dsel);
    }
    /* attention_chunk: ratio 4 with selections (windows straddling pos0, chunk > window), the long
     * ratio without, ratio 0 */
    for (int v = 0; v < 3 && GPU->attention_chunk; v++) {
        const uint32_t k = cf->idx_top_k, cap = 16,
                       R = v == 0   ? 4
                           : v == 1 ? (lr ? cf->compress_ratio[lr] : 16)
                                    : 0;
        const uint32_t pos0 = 4 * k - 10, n = 40, ncomp = R ? (pos0 + n) / R : 0;
        float *qa = hrand(c, (size_t)n * H * Dh, 1.0f), *ckv = hrand(c, (size_t)n * Dh, 1.0f);
        float *raw = hrand(c, (size_t)cap * Dh, 1.0f), *comp = hrand(c, (size_t)(ncomp + 1) * Dh, 1.0f);
        float *out = calloc((size_t)n * H * Dh, 4);
        int32_t *asel = calloc((size_t)n * k, 4);
        for (uint32_t t = 0; t < n; t++) { /* ascending, spread over the visible rows */
            const uint32_t nc = R ? (pos0 + t + 1) / R : 0;
            for (uint32_t i = 0; i < k && nc > k; i++)
                asel[(size_t)t * k + i] = (int32_t)((uint64_t)i * nc / k);
        }
        float *dqa = dcopy(c, qa, (size_t)n * H * Dh * 4), *dckv = dcopy(c, ckv, (size_t)n * Dh * 4);
        float *draw = dcopy(c, raw, (size_t)cap * Dh * 4),
              *dcomp = dcopy(c, comp, (size_t)(ncomp + 1) * Dh * 4);
        float *dout = dcopy(c, out, (size_t)n * H * Dh * 4);
        int32_t *dasel = dcopy(c, asel, (size_t)n * k * 4);
        const float kq = 1.0f / sqrtf((float)Dh);
        for (int ti = 0; ti < 2; ti++) { /* F32 and F16 rows (the chunk's own rows stay F32) */
            const uint32_t kt = ti ? DSV4_TYPE_F16 : DSV4_TYPE_F32;
            size_t rb, cb;
            void *traw = typed_rows(raw, cap, Dh, kt, &rb), *tcomp = typed_rows(comp, ncomp + 1, Dh, kt, &cb);
            void *dtraw = dcopy(c, traw, rb), *dtcomp = dcopy(c, tcomp, cb);
            char lb[64];
            snprintf(lb, sizeof lb, "%s %s",
                     v == 0   ? "attention_chunk r4 sel"
                     : v == 1 ? "attention_chunk long"
                              : "attention_chunk r0",
                     kv_type_name(kt));
            if (ran(c, lb,
                    CPU->attention_chunk(CC, qa, n, H, Dh, pos0, ckv, kt, traw, cap, R ? tcomp : NULL, R,
                                         v == 0 ? asel : NULL, v == 0 ? k : 0, &L0->attn_sinks, kq, out, &ec),
                    GPU->attention_chunk(GC, dqa, n, H, Dh, pos0, dckv, kt, dtraw, cap, R ? dtcomp : NULL, R,
                                         v == 0 ? dasel : NULL, v == 0 ? k : 0, &L0->attn_sinks, kq, dout,
                                         &c->err),
                    &ec))
                cmp_f(c, lb, out, dout, (size_t)n * H * Dh);
            free(traw), free(tcomp), dfree(c, dtraw), dfree(c, dtcomp);
        }
        free(qa), free(ckv), free(raw), free(comp), free(out), free(asel);
        dfree(c, dqa), dfree(c, dckv), dfree(c, draw), dfree(c, dcomp), dfree(c, dout), dfree(c, dasel);
    }
    /* ---- router (bias, hash) and routed experts ---- */
    for (uint32_t n = 1; n <= 3; n += 2) {
        const uint32_t NE = cf->n_expert, K = cf->n_expert_used;
        const int32_t tok[3] = {7, (int32_t)cf->n_vocab - 2, 300 % (int32_t)cf->n_vocab};
        float *lg = hrand(c, (size_t)n * NE, 4.0f), *dlg = dcopy(c, lg, (size_t)n * NE * 4);
        int32_t *sel = calloc((size_t)n * K, 4), *dsel = dcopy(c, sel, (size_t)n * K * 4);
        float *wt = calloc((size_t)n * K, 4), *dwt = dcopy(c, wt, (size_t)n * K * 4);
        char lb[64];
        /* hash = -1: the top-k router on logits rounded to whole numbers (many tied scores; the
         * device ranks them by index as the CPU's insertion does) */
        for (int hash = 1; hash >= -1; hash--) {
            const dsv4_layer_weights *L = hash > 0 ? L0 : LN;
            if (hash > 0 && !dsv4_tensor_present(&L0->ffn_gate_tid2eid)) continue;
            if (hash < 0) {
                for (size_t i = 0; i < (size_t)n * NE; i++) lg[i] = roundf(lg[i]);
                c->gpu.ops->write(GC, dlg, lg, (size_t)n * NE * 4, &c->err);
            }
            /* (the ties run without the bias, whose random values would separate them) */
            const dsv4_tensor *bias =
                hash == 0 && dsv4_tensor_present(&L->exp_probs_b) ? &L->exp_probs_b : NULL;
            const dsv4_tensor *t2e = hash > 0 ? &L->ffn_gate_tid2eid : NULL;
            const char *kind = hash > 0 ? "hash" : hash == 0 ? "bias" : "ties";
            snprintf(lb, sizeof lb, "router %s n=%u", kind, n);
            if (!ran(c, lb,
                     CPU->router_select(CC, lg, n, NE, K, bias, t2e, tok, cf->expert_weights_scale, sel, wt,
                                        &ec),
                     GPU->router_select(GC, dlg, n, NE, K, bias, t2e, tok, cf->expert_weights_scale, dsel,
                                        dwt, &c->err),
                     &ec))
                continue;
            snprintf(lb, sizeof lb, "router %s n=%u ids", kind, n);
            cmp_i(c, lb, sel, dsel, (size_t)n * K);
            snprintf(lb, sizeof lb, "router %s n=%u weights", kind, n);
            cmp_f(c, lb, wt, dwt, (size_t)n * K);
        }
        /* moe on the CPU's selection (bias layer) */
        c->gpu.ops->write(GC, dsel, sel, (size_t)n * K * 4, &c->err);
        c->gpu.ops->write(GC, dwt, wt, (size_t)n * K * 4, &c->err);
        float *x = hrand(c, (size_t)n * E, 1.0f), *o = calloc((size_t)n * E, 4);
        float *dx = dcopy(c, x, (size_t)n * E * 4), *dout = dcopy(c, o, (size_t)n * E * 4);
        const float clamp = cf->swiglu_clamp ? cf->swiglu_clamp[lnh] : 0.0f;
        snprintf(lb, sizeof lb, "moe %s/%s n=%u", dsv4_type_name(LN->ffn_gate_exps.type),
                 dsv4_type_name(LN->ffn_down_exps.type), n);
        if (ran(c, lb,
                CPU->moe(CC, &LN->ffn_gate_exps, &LN->ffn_up_exps, &LN->ffn_down_exps, x, n, sel, wt, K,
                         clamp, o, &ec),
                GPU->moe(GC, &LN->ffn_gate_exps, &LN->ffn_up_exps, &LN->ffn_down_exps, dx, n, dsel, dwt, K,
                         clamp, dout, &c->err),
                &ec))
            cmp_f(c, lb, o, dout, (size_t)n * E);
        const dsv4_fused_query mq = {.n_tokens = n,
                                     .width = E,
                                     .weight_type = LN->ffn_down_exps.type,
                                     .n_hc = cf->n_hc,
                                     .aux_type = LN->ffn_gate_exps.type,
                                     .n_tiers = 1,
                                     .width2 = (uint32_t)LN->ffn_gate_exps.ne[1]};
        if (GPU->moe_slots && GPU->hc_post_slots && GPU->fused_available(GC, DSV4_FUSED_MOE_SUM_POST, &mq))
            moe_sum_post_check(c, LN, cf, dx, dsel, dwt, clamp, dout);
        free(lg), free(sel), free(wt), free(x), free(o);
        dfree(c, dlg), dfree(c, dsel), dfree(c, dwt), dfree(c, dx), dfree(c, dout);
    }
    /* ---- routed experts of prefill chunks: bitwise the CPU (grouped path, the f16 products off),
     * then timing; then the f16 products on their own ---- */
    if (numerics == DSV4_NUMERICS_DS4) {
        const float clamp = cf->swiglu_clamp ? cf->swiglu_clamp[lnh] : 0.0f;
        const uint32_t ns[7] = {1, 2, 7, 37, 64, 200, 256};
        env_saved f16_off = env_set("DSV4_CUDA_MOE_F16", "0");
        for (int k = 0; k < 7; k++) check_moe_bitwise(c, LN, clamp, ns[k]);
        if (!strcmp(against, "cuda")) {
            time_moe_prefill(c, LN, clamp, 1); /* decode: fused against unfused, bitwise */
            time_moe_prefill(c, LN, clamp, 37);
            time_moe_prefill(c, LN, clamp, 256);
            time_moe_prefill(c, LN, clamp, 2048);
        }
        env_restore(&f16_off);
        /* the exact warpgroup products (sm_90; nothing to check elsewhere) */
        dsv4_device_info gdi;
        if (dsv4_backend_device_info(&c->gpu, &gdi, &c->err) == DSV4_OK && gdi.cc_major == 9 &&
            gdi.cc_minor == 0) {
            check_moe_x16(c, LN, clamp, 300, false, false, true);
            check_moe_x16(c, LN, clamp, 300, true, false, true);
            check_moe_x16(c, LN, 0.0f, 260, true, false, true);
            check_moe_x16(c, LN, clamp, 2048, true, !strcmp(against, "cuda"), false);
            check_moe_x16(c, LN, clamp, 2048, false, false, false);
        }
        env_saved x16_off = env_set("DSV4_CUDA_MOE_X16", "0"); /* the f16 products' own checks */
        check_moe_half(c, LN, clamp, 256, false, false);
        check_moe_half(c, LN, clamp, 300, false, !strcmp(against, "cuda"));
        check_moe_half(c, LN, 0.0f, 300, true, false);
        env_saved w8 = env_set("DSV4_CUDA_MOE_F16_WARPS", "8");
        check_moe_half(c, LN, clamp, 300, false, false);
        env_restore(&w8);
        env_saved dn = env_set("DSV4_CUDA_MOE_F16", "down");
        check_moe_half(c, LN, clamp, 300, false, false);
        env_restore(&dn);
        check_moe_half(c, LN, clamp, 2048, false, !strcmp(against, "cuda"));
        env_restore(&x16_off);
    }
    if (c->gpu.ops->sync(GC, &c->err) != DSV4_OK) {
        printf("FAIL final sync: %s\n", c->err.msg);
        c->fails++;
    }
    printf("%s: %d of %d checks failed (tolerance %.0e relative to the largest reference value)\n",
           c->fails ? "CUDA OPS FAILED" : "CUDA OPS PASSED", c->fails, c->checks, c->tol);
    dsv4_backend_destroy(&c->gpu);
    dsv4_backend_destroy(&c->cpu);
    dsv4_model_free(m);
    return c->fails ? 1 : 0;
}
