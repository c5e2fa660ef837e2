/* Routed-MoE prefill benchmark and self-check through the CUDA backend's moe op (grouped path,
 * src/backend/cuda/cuda_ops_moe_grouped.cu) on DeepSeek V4 Flash shapes.
 *
 * Build: make BUILD=build-x bench-cuda   ->  build-x/bench/cuda_moe_prefill_bench
 * Run:   cuda_moe_prefill_bench [--reps R] [--device N] [--model q2|q4|both] [--ns 256,2048]
 *        (exit 0 only if every check passes; < 1 minute on an H200 with the default sizes).
 *        DSV4_CUDA_MOE_MMA_MIN_N is set to 2 here so the tensor-core paths run at every n compared.
 *
 * Per model (q2: gate/up IQ2_XXS, down Q2_K; q4: Q4_K everywhere) one layer of 256 experts
 * (in 4096, ff 2048) of random valid quant blocks (quant_fill_random_row) is uploaded as a
 * one-layer model. For n = 256 and 2048 tokens, k = 6, with uniform routing and with a skewed one
 * (30 % of the slots on 8 hot experts: hundreds of pairs each at n = 2048), the op runs with
 *   (a) DSV4_CUDA_MOE_MMA=0   the scalar grouped kernels,
 *   (b) DSV4_CUDA_MOE_MMA=old the first tensor-core kernels (cuda_ops_moe_mma.cu),
 *   (c) default               the wide-tile kernels (cuda_ops_moe_wide.cu; checked to be selected);
 * (b) and (c) must equal (a) bit for bit on every output. Times: median wall time per call (op +
 * stream sync) over R >= 5 calls after a warm-up; one line `RESULT <case> scalar_ms old_mma_ms
 * new_ms` per case. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern "C" {
#include "backend/backend_registry.h"
#include "model/model.h"
#include "quant/quant.h"
}
#include "backend/cuda/cuda_moe_wide.h"

#define CHECK_RNG_SEED 99
#include "../../tests/cuda/check_rng.h"

enum { N_EXPERT = 256, IN = 4096, FF = 2048, TOP_K = 6 };

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* [ne0, ne1, E] expert tensor of random valid blocks */
static bool make_tensor(dsv4_tensor *t, const char *name, uint32_t type, uint64_t ne0, uint64_t ne1,
                        uint64_t seed) {
    memset(t, 0, sizeof *t);
    t->name = name, t->type = type, t->n_dims = 3;
    t->ne[0] = ne0, t->ne[1] = ne1, t->ne[2] = N_EXPERT, t->ne[3] = 1;
    if (!dsv4_type_row_bytes(type, ne0, &t->row_bytes)) return false;
    t->nbytes = t->row_bytes * ne1 * N_EXPERT;
    uint8_t *d = (uint8_t *)malloc(t->nbytes);
    if (!d) return false;
    uint64_t rng = seed;
    for (uint64_t r = 0; r < ne1 * N_EXPERT; r++)
        if (!quant_fill_random_row(type, &rng, 1.0f / sqrtf((float)ne0), d + r * t->row_bytes, (int64_t)ne0))
            return false;
    t->data = d;
    return true;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    dsv4_backend b;
    const dsv4_layer_weights *L;
    float *dx, *dwt, *dout;
    int32_t *dsel;
    uint32_t n;
    float clamp;
} runner;

/* median seconds of reps calls with DSV4_CUDA_MOE_MMA=mode (NULL: unset); the output read into host */
static double run_mode(runner *r, const char *mode, int reps, float *host_out, dsv4_error *err) {
    if (mode)
        setenv("DSV4_CUDA_MOE_MMA", mode, 1);
    else
        unsetenv("DSV4_CUDA_MOE_MMA");
    const dsv4_backend_ops *o = r->b.ops;
    double *t = (double *)malloc(sizeof(double) * (size_t)reps);
    double med = -1;
    const size_t ob = (size_t)r->n * IN * sizeof(float);
    /* poison, warm-up (grows the scratch), then the timed calls */
    bool ok = o->fill_f32(r->b.ctx, r->dout, nanf(""), (size_t)r->n * IN, err) == DSV4_OK &&
              o->moe(r->b.ctx, &r->L->ffn_gate_exps, &r->L->ffn_up_exps, &r->L->ffn_down_exps, r->dx, r->n,
                     r->dsel, r->dwt, TOP_K, r->clamp, r->dout, err) == DSV4_OK &&
              o->sync(r->b.ctx, err) == DSV4_OK && o->read(r->b.ctx, host_out, r->dout, ob, err) == DSV4_OK;
    for (int i = 0; ok && i < reps; i++) {
        const double t0 = now_s();
        ok = o->moe(r->b.ctx, &r->L->ffn_gate_exps, &r->L->ffn_up_exps, &r->L->ffn_down_exps, r->dx, r->n,
                    r->dsel, r->dwt, TOP_K, r->clamp, r->dout, err) == DSV4_OK &&
             o->sync(r->b.ctx, err) == DSV4_OK;
        t[i] = now_s() - t0;
    }
    if (ok) {
        qsort(t, (size_t)reps, sizeof(double), cmp_double);
        med = t[reps / 2];
    }
    free(t);
    unsetenv("DSV4_CUDA_MOE_MMA");
    return med;
}

static size_t differ(const float *a, const float *b, size_t n, size_t *first) {
    size_t d = 0;
    *first = n;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4) != 0) {
            if (d == 0) *first = i;
            d++;
        }
    return d;
}

/* routes: k distinct experts per token; skewed: 30 % of the slots on experts 0..7 */
static void make_routes(uint32_t n, bool skewed, int32_t *sel, float *wt, int *max_pairs) {
    int cnt[N_EXPERT] = {0};
    for (uint32_t t = 0; t < n; t++)
        for (int s = 0; s < TOP_K; s++) {
            int e;
            for (;;) {
                e = skewed && nxt() % 10 < 3 ? (int)(nxt() % 8) : (int)(nxt() % N_EXPERT);
                bool dup = false;
                for (int q = 0; q < s; q++) dup |= sel[t * TOP_K + q] == e;
                if (!dup) break;
            }
            sel[t * TOP_K + s] = e;
            wt[t * TOP_K + s] = 0.05f + 0.25f * (uni() + 1.0f) * 0.5f;
            cnt[e]++;
        }
    *max_pairs = 0;
    for (int e = 0; e < N_EXPERT; e++)
        if (cnt[e] > *max_pairs) *max_pairs = cnt[e];
}

static uint32_t g_ns[32] = {256, 2048};
static int g_n_ns = 2;

static int run_model(const char *mname, uint32_t gu_type, uint32_t d_type, int device, int reps) {
    dsv4_layer_weights *L = (dsv4_layer_weights *)calloc(1, sizeof *L);
    dsv4_model m;
    memset(&m, 0, sizeof m);
    m.cfg.n_layer = 1;
    m.layers = L;
    printf("[%s] filling %s/%s experts ...\n", mname, dsv4_type_name(gu_type), dsv4_type_name(d_type));
    fflush(stdout);
    if (!make_tensor(&L->ffn_gate_exps, "blk.0.ffn_gate_exps.weight", gu_type, IN, FF, 11) ||
        !make_tensor(&L->ffn_up_exps, "blk.0.ffn_up_exps.weight", gu_type, IN, FF, 22) ||
        !make_tensor(&L->ffn_down_exps, "blk.0.ffn_down_exps.weight", d_type, FF, IN, 33)) {
        fprintf(stderr, "cannot build the %s experts (host memory)\n", mname);
        return 2;
    }
    const double wbytes = (double)(L->ffn_gate_exps.nbytes + L->ffn_up_exps.nbytes + L->ffn_down_exps.nbytes);
    dsv4_backend_params bp;
    memset(&bp, 0, sizeof bp);
    bp.name = "cuda", bp.device = device, bp.numerics = DSV4_NUMERICS_DS4, bp.model = &m;
    dsv4_error err;
    memset(&err, 0, sizeof err);
    runner r;
    memset(&r, 0, sizeof r);
    r.L = L;
    r.clamp = 10.0f;
    if (dsv4_backend_cuda_create(&bp, &r.b, &err) != DSV4_OK) {
        fprintf(stderr, "cuda backend: %s\n", err.msg);
        return 2;
    }
    const dsv4_backend_ops *o = r.b.ops;
    int fails = 0;
    /* the wide kernels must take these shapes */
    cuda_ctx *c = (cuda_ctx *)r.b.ctx;
    const void *gd = cu_weight_dev(c, &L->ffn_gate_exps, &err), *ud = cu_weight_dev(c, &L->ffn_up_exps, &err),
               *dd = cu_weight_dev(c, &L->ffn_down_exps, &err);
    const bool wide = gd && ud && dd &&
                      cu_moe_wide_ok(c, gu_type, d_type, IN, FF, IN, L->ffn_gate_exps.row_bytes,
                                     L->ffn_down_exps.row_bytes, gd, ud, dd);
    printf("[%s] weights %.2f GB per layer; wide kernels %s\n", mname, wbytes / 1e9,
           wide ? "selected" : "NOT selectable (FAIL)");
    fails += !wide;
    for (int ni = 0; ni < g_n_ns; ni++)
        for (int sk = 0; sk < 2; sk++) {
            const uint32_t n = g_ns[ni];
            const size_t P = (size_t)n * TOP_K, ys = (size_t)n * IN;
            float *x = (float *)malloc(ys * 4), *wt = (float *)malloc(P * 4);
            int32_t *sel = (int32_t *)malloc(P * 4);
            float *oa = (float *)malloc(ys * 4), *ob = (float *)malloc(ys * 4), *oc = (float *)malloc(ys * 4);
            for (size_t i = 0; i < ys; i++) x[i] = uni() * (i % 613 == 0 ? 6.0f : 1.0f);
            int max_pairs;
            make_routes(n, sk != 0, sel, wt, &max_pairs);
            r.n = n;
            void *p1, *p2, *p3, *p4;
            if (o->buf_alloc(r.b.ctx, ys * 4, &p1, &err) || o->buf_alloc(r.b.ctx, P * 4, &p2, &err) ||
                o->buf_alloc(r.b.ctx, P * 4, &p3, &err) || o->buf_alloc(r.b.ctx, ys * 4, &p4, &err)) {
                fprintf(stderr, "device buffers: %s\n", err.msg);
                return 2;
            }
            r.dx = (float *)p1, r.dsel = (int32_t *)p2, r.dwt = (float *)p3, r.dout = (float *)p4;
            o->write(r.b.ctx, r.dx, x, ys * 4, &err);
            o->write(r.b.ctx, r.dsel, sel, P * 4, &err);
            o->write(r.b.ctx, r.dwt, wt, P * 4, &err);
            char name[64];
            snprintf(name, sizeof name, "%s_n%u_%s", mname, n, sk ? "skewed" : "uniform");
            const double ta = run_mode(&r, "0", reps, oa, &err);
            const double tb = run_mode(&r, "old", reps, ob, &err);
            const double tc = run_mode(&r, NULL, reps, oc, &err);
            size_t fb, fc;
            const size_t db = ta > 0 && tb > 0 ? differ(ob, oa, ys, &fb) : ys;
            const size_t dc = ta > 0 && tc > 0 ? differ(oc, oa, ys, &fc) : ys;
            size_t nonfinite = 0;
            for (size_t i = 0; i < ys; i++) nonfinite += !isfinite(oa[i]);
            const bool ok = ta > 0 && tb > 0 && tc > 0 && db == 0 && dc == 0 && nonfinite == 0;
            fails += !ok;
            printf("%s %-22s max pairs/expert %4d: scalar %8.3f ms, old mma %8.3f ms, new %8.3f ms (%.2fx vs "
                   "scalar, %.2fx vs old); differ from scalar: old %zu, new %zu of %zu; non-finite %zu%s%s\n",
                   ok ? "ok  " : "FAIL", name, max_pairs, ta * 1e3, tb * 1e3, tc * 1e3, ta / tc, tb / tc, db,
                   dc, ys, nonfinite, ta > 0 && tb > 0 && tc > 0 ? "" : " (a call failed: ",
                   ta > 0 && tb > 0 && tc > 0 ? "" : err.msg);
            if (dc && dc < ys)
                printf("     first new difference at %zu: %.9g vs scalar %.9g\n", fc, oc[fc], oa[fc]);
            printf("RESULT %s %.3f %.3f %.3f\n", name, ta * 1e3, tb * 1e3, tc * 1e3);
            fflush(stdout);
            o->buf_free(r.b.ctx, p1), o->buf_free(r.b.ctx, p2), o->buf_free(r.b.ctx, p3),
                o->buf_free(r.b.ctx, p4);
            free(x), free(wt), free(sel), free(oa), free(ob), free(oc);
        }
    o->destroy(r.b.ctx);
    free((void *)L->ffn_gate_exps.data), free((void *)L->ffn_up_exps.data),
        free((void *)L->ffn_down_exps.data);
    free(L);
    return fails;
}

int main(int argc, char **argv) {
    int reps = 7, device = 0;
    const char *which = "both";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--device")) device = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--model")) which = argv[i + 1];
        if (!strcmp(argv[i], "--ns")) {
            g_n_ns = 0;
            for (char *p = argv[i + 1]; *p && g_n_ns < 32;) {
                const long v = strtol(p, &p, 10);
                if (v >= 2 && v <= 65536) g_ns[g_n_ns++] = (uint32_t)v;
                if (*p == ',')
                    p++;
                else if (*p)
                    break;
            }
            if (g_n_ns == 0) {
                fprintf(stderr, "--ns: expected sizes 2..65536, e.g. 64,256,2048\n");
                return 2;
            }
        }
    }
    setenv("DSV4_CUDA_MOE_MMA_MIN_N", "2", 1);
    if (reps < 5) reps = 5;
    int fails = 0;
    if (strcmp(which, "q4") != 0) fails += run_model("q2", DSV4_TYPE_IQ2_XXS, DSV4_TYPE_Q2_K, device, reps);
    if (strcmp(which, "q2") != 0) fails += run_model("q4", DSV4_TYPE_Q4_K, DSV4_TYPE_Q4_K, device, reps);
    printf("%s: %d failure(s)\n", fails ? "MOE PREFILL BENCH FAILED" : "MOE PREFILL BENCH PASSED", fails);
    return fails ? 1 : 0;
}
