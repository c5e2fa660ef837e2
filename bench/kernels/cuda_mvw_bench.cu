/* Warp-per-row Q8_0/F16 matvec (src/backend/cuda/cuda_mvw.h) vs the persistent cp.async matvec
 * (cuda_matvec.h) on the decode shapes, with checks. Needs a GPU.
 *
 * Build: make BUILD=build-x bench-cuda   ->  build-x/bench/cuda_mvw_bench
 * Run:   cuda_mvw_bench [--device N] [--case SUBSTRING]
 *        (exit 0 only if every check passes; all cases < 1 minute on an H200)
 *
 * Each case is one launch of the new kernel: one segment (a single product) or several (the
 * projections of one attention layer from the same normed input; router + shared-expert gate/up;
 * eight grouped output projections, each its own input). Weights: random valid rows
 * (quant_fill_random_row, finite f16 scales), up to 8192 distinct rows per matrix replicated on
 * the device to full size, then whole copies so that each timed batch rotates over >= 512 MB
 * (>> the 60 MB L2). Activations: random with outliers and zero blocks; Q8_0 ones quantized on the
 * device (dsv4_cuda_quant_act_q8_0, checked bit-exact against quant_act_q8_0).
 * Checks (new kernel): outputs poisoned with NaN first; every row vs quant_dot_* within
 * 1e-5 S + (n_blocks + 8) 2^-24 S (S = sum |w_i x_i|) and bit-equal to the host model of the
 * kernel (mvw_emu_row, the kernel's own units); two runs bit-equal; a multi-segment launch
 * bit-equal to separate launches of each segment; the last weight copy gives the first copy's bits.
 * The old kernel's rows are checked against the same bound (it is timed, so it must be right).
 * Timing: the old kernel is one dsv4_cuda_matvec per segment, back to back; the new one launch per
 * case. Both by plain stream launches and by CUDA-graph replay of the same launches; median of 25
 * batches, per-launch microseconds. Bytes = weights + activations + outputs.
 * Output: per case `RESULT <case> <old_us> <new_us> <pct_copy>` (graph replay, as in production)
 * and `RESULT <case>:stream ...` (plain launches). For the attention set, q_b, wo_b and the grouped
 * wo_a: the separate quantizer launch + kernel against the kernel quantizing its f32 input itself
 * (x_f32, DSV4_CUDA_MVW_ACT=fused), bitwise equal, graph replay:
 * `RESULT mvw_act <case> separate_us <a> fused_us <b>`. */
#include <cuda_runtime.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern "C" {
#include "quant/quant.h"
}
#include "backend/cuda/cuda_matvec.h"
#include "backend/cuda/cuda_mvw.h"
#include "backend/cuda/cuda_mvw_units.cuh"

#define CK(call)                                                                                             \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess) {                                                                             \
            fprintf(stderr, "FATAL: %s at %s:%d: %s\n", #call, __FILE__, __LINE__, cudaGetErrorString(e_));  \
            exit(2);                                                                                         \
        }                                                                                                    \
    } while (0)

#define N_BATCH 25
#define ROT_BYTES (512ull << 20) /* bytes rotated through per case */
#define MAX_BASE 8192            /* distinct rows per matrix */
#define MAX_SEG DSV4_CUDA_MVW_MAX_SEGS

static int g_fail = 0;
static double g_copy_bw = 0.0;

static uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double urand(uint64_t *s) { return (double)(mix64((*s)++) >> 11) * (1.0 / 9007199254740992.0); }
static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "FATAL: out of host memory (%zu bytes)\n", n);
        exit(2);
    }
    return p;
}
static uint64_t row_bytes_of(uint32_t t, int64_t in) { return t == DSV4_TYPE_Q8_0 ? in / 32 * 34 : in * 2; }

/* ---- case table ---- */
struct seg_spec {
    uint32_t type;
    int64_t in, out;
    int xid; /* input vector of the case (segments with the same xid share it) */
};
struct bcase {
    const char *name;
    int nseg;
    struct seg_spec s[MAX_SEG];
    double target_us; /* the goal for the new kernel (0: none) */
};
#define Q8 DSV4_TYPE_Q8_0
#define F16 DSV4_TYPE_F16
static const struct bcase k_cases[] = {
    {"q8_4096x1024_attn_q_a", 1, {{Q8, 4096, 1024, 0}}, 4.0},
    {"q8_4096x512_attn_kv", 1, {{Q8, 4096, 512, 0}}, 4.0},
    {"q8_4096x2048_shared_gate", 1, {{Q8, 4096, 2048, 0}}, 4.0},
    {"q8_2048x4096_shared_down", 1, {{Q8, 2048, 4096, 0}}, 4.0},
    {"q8_1024x32768_attn_q_b", 1, {{Q8, 1024, 32768, 0}}, 11.0},
    {"q8_8192x4096_attn_out_b", 1, {{Q8, 8192, 4096, 0}}, 11.0},
    {"q8_4096x8192", 1, {{Q8, 4096, 8192, 0}}, 11.0},
    {"f16_4096x1024_compressor", 1, {{F16, 4096, 1024, 0}}, 4.0},
    {"f16_4096x512_compressor", 1, {{F16, 4096, 512, 0}}, 0.0},
    {"f16_4096x256_router", 1, {{F16, 4096, 256, 0}}, 0.0},
    {"set_attn_6seg",
     6,
     {{Q8, 4096, 1024, 0},
      {Q8, 4096, 512, 0},
      {F16, 4096, 1024, 0},
      {F16, 4096, 1024, 0},
      {F16, 4096, 256, 0},
      {F16, 4096, 256, 0}},
     8.0},
    {"set_router_shared_3seg", 3, {{F16, 4096, 256, 0}, {Q8, 4096, 2048, 0}, {Q8, 4096, 2048, 0}}, 6.0},
    {"set_attn_out_a_8x_own_x",
     8,
     {{Q8, 4096, 1024, 0},
      {Q8, 4096, 1024, 1},
      {Q8, 4096, 1024, 2},
      {Q8, 4096, 1024, 3},
      {Q8, 4096, 1024, 4},
      {Q8, 4096, 1024, 5},
      {Q8, 4096, 1024, 6},
      {Q8, 4096, 1024, 7}},
     11.0},
    {"BIG_q8_4096x131072_steady", 1, {{Q8, 4096, 131072, 0}}, 0.0},
};

/* ---- parallel host work: random rows, reference dots ---- */
struct job {
    int kind; /* 0: fill rows, 1: references */
    uint32_t type;
    int64_t in, r0, r1;
    uint64_t seed, rb;
    uint8_t *w;
    const dsv4_q8_0_act *q;
    const uint8_t *act;
    const float *x;
    float *cpu, *emu;
    double *S;
};
static double f16d(const uint8_t *p) { return (double)dsv4_f16_to_f32((uint16_t)(p[0] | (p[1] << 8))); }
static void *worker(void *arg) {
    struct job *j = (struct job *)arg;
    for (int64_t r = j->r0; r < j->r1; r++) {
        uint8_t *row = j->w + (size_t)r * j->rb;
        if (j->kind == 0) {
            uint64_t s = mix64(j->seed + (uint64_t)r);
            if (!quant_fill_random_row(j->type, &s, 1.0f / sqrtf((float)j->in), row, j->in)) {
                fprintf(stderr, "FATAL: quant_fill_random_row\n");
                exit(2);
            }
            continue;
        }
        double S = 0.0;
        if (j->type == Q8) {
            j->cpu[r] = quant_dot_q8_0(row, j->q, j->in);
            j->emu[r] = mvw_emu_row(MVW_Q8_0, row, (int)j->in, j->act, NULL);
            for (int64_t b = 0; b < j->in / 32; b++)
                for (int i = 0; i < 32; i++)
                    S += fabs(f16d(row + 34 * b) * (double)j->q[b].d * (double)(int8_t)row[34 * b + 2 + i] *
                              (double)j->q[b].qs[i]);
        } else {
            j->cpu[r] = quant_dot_f16((const uint16_t *)row, j->x, j->in);
            j->emu[r] = mvw_emu_row(MVW_F16, row, (int)j->in, NULL, j->x);
            for (int64_t i = 0; i < j->in; i++) S += fabs(f16d(row + 2 * i) * (double)j->x[i]);
        }
        j->S[r] = S;
    }
    return NULL;
}
static void run_jobs(struct job proto, int64_t rows) {
    long nt = sysconf(_SC_NPROCESSORS_ONLN);
    if (nt < 1) nt = 1;
    if (nt > 32) nt = 32;
    pthread_t th[32];
    struct job jobs[32];
    for (long t = 0; t < nt; t++) {
        jobs[t] = proto;
        jobs[t].r0 = rows * t / nt;
        jobs[t].r1 = rows * (t + 1) / nt;
        if (pthread_create(&th[t], NULL, worker, &jobs[t]) != 0) {
            fprintf(stderr, "FATAL: pthread_create\n");
            exit(2);
        }
    }
    for (long t = 0; t < nt; t++) pthread_join(th[t], NULL);
}

/* ---- runtime state of a case ---- */
struct vec {
    int64_t in;
    float *h_x, *d_x;
    dsv4_q8_0_act *h_q;
    void *d_q;
    uint8_t *h_act; /* re-laid Q8_0 activations for the host model */
};
struct seg_rt {
    const struct seg_spec *sp;
    uint64_t rb, bytes; /* row bytes, bytes of one matrix */
    int64_t base;       /* distinct rows */
    uint8_t *h_w, *d_w; /* base rows; copies on the device */
    float *d_y, *d_y2, *d_y3, *h_y, *h_y2;
    float *cpu, *emu;
    double *S;
};
struct case_rt {
    const struct bcase *c;
    struct vec v[MAX_SEG];
    int nv;
    struct seg_rt s[MAX_SEG];
    int copies;
    double bytes; /* per launch */
    const dsv4_cuda_mv_ctx *ctx;
};

static void gen_x(float *x, int64_t n, uint64_t seed) {
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) {
        const double u = urand(&s) + urand(&s) + urand(&s) - 1.5;
        x[i] = (float)(u * (urand(&s) < 0.01 ? 20.0 : 1.0));
    }
    for (int64_t b = 0; b < n / 32; b++)
        if (urand(&s) < 0.02)
            for (int i = 0; i < 32; i++) x[b * 32 + i] = 0.0f;
}

static void setup_vec(struct vec *v, int64_t in, uint64_t seed, cudaStream_t st) {
    memset(v, 0, sizeof *v);
    v->in = in;
    v->h_x = (float *)xmalloc((size_t)in * 4);
    gen_x(v->h_x, in, seed);
    CK(cudaMalloc((void **)&v->d_x, (size_t)in * 4));
    CK(cudaMemcpy(v->d_x, v->h_x, (size_t)in * 4, cudaMemcpyHostToDevice));
    const size_t qb = (size_t)in / 32 * sizeof(dsv4_q8_0_act);
    CK(cudaMalloc(&v->d_q, qb));
    dsv4_error err;
    if (dsv4_cuda_quant_act_q8_0(v->d_x, v->d_q, in, st, &err) != DSV4_OK) {
        fprintf(stderr, "FATAL: %s\n", err.msg);
        exit(2);
    }
    CK(cudaStreamSynchronize(st));
    v->h_q = (dsv4_q8_0_act *)xmalloc(qb);
    quant_act_q8_0(v->h_x, v->h_q, in);
    uint8_t *dq = (uint8_t *)xmalloc(qb);
    CK(cudaMemcpy(dq, v->d_q, qb, cudaMemcpyDeviceToHost));
    if (memcmp(dq, v->h_q, qb) != 0) {
        printf("  FAIL device Q8_0 activation differs from quant_act_q8_0\n");
        g_fail++;
    }
    free(dq);
    v->h_act = (uint8_t *)xmalloc((size_t)in / 32 * MVW_ACT_SLOT);
    for (int t = 0; t < MVW_THREADS; t++)
        mvw_stage_act((const uint8_t *)v->h_q, v->h_act, (int)in, t,
                      MVW_THREADS); /* the kernel's re-layout */
}

static void setup_case(struct case_rt *r, const struct bcase *c, const dsv4_cuda_mv_ctx *ctx,
                       cudaStream_t st) {
    memset(r, 0, sizeof *r);
    r->c = c;
    r->ctx = ctx;
    double wbytes = 0.0;
    for (int i = 0; i < c->nseg; i++) {
        if (c->s[i].xid + 1 > r->nv) r->nv = c->s[i].xid + 1;
        wbytes += (double)row_bytes_of(c->s[i].type, c->s[i].in) * c->s[i].out;
    }
    for (int k = 0; k < r->nv; k++) {
        int64_t in = 0;
        for (int i = 0; i < c->nseg; i++)
            if (c->s[i].xid == k) in = c->s[i].in;
        setup_vec(&r->v[k], in, mix64(0x5eedull + 131 * k + (uint64_t)in), st);
    }
    r->copies = (int)((ROT_BYTES + wbytes - 1) / wbytes);
    if (r->copies < 2) r->copies = 2;
    r->bytes = wbytes;
    for (int i = 0; i < c->nseg; i++) {
        struct seg_rt *s = &r->s[i];
        const struct seg_spec *sp = &c->s[i];
        const struct vec *v = &r->v[sp->xid];
        s->sp = sp;
        s->rb = row_bytes_of(sp->type, sp->in);
        s->bytes = s->rb * (uint64_t)sp->out;
        s->base = sp->out < MAX_BASE ? sp->out : MAX_BASE;
        r->bytes += (sp->type == Q8 ? (double)sp->in / 32 * 36 : (double)sp->in * 4) + 4.0 * sp->out;
        s->h_w = (uint8_t *)xmalloc((size_t)(s->base * s->rb));
        struct job jb;
        memset(&jb, 0, sizeof jb);
        jb.kind = 0;
        jb.type = sp->type;
        jb.in = sp->in;
        jb.rb = s->rb;
        jb.w = s->h_w;
        jb.seed = mix64((uint64_t)i * 7777 + sp->type * 1000003ull + (uint64_t)sp->in * 7919ull +
                        (uint64_t)sp->out);
        run_jobs(jb, s->base);
        CK(cudaMalloc((void **)&s->d_w, (size_t)s->bytes * r->copies));
        const size_t bb = (size_t)(s->base * s->rb);
        CK(cudaMemcpy(s->d_w, s->h_w, bb, cudaMemcpyHostToDevice));
        for (size_t o = bb; o < s->bytes; o *= 2) /* doubling keeps row r = base row r % base */
            CK(cudaMemcpy(s->d_w + o, s->d_w, o < s->bytes - o ? o : s->bytes - o, cudaMemcpyDeviceToDevice));
        for (int k = 1; k < r->copies; k++)
            CK(cudaMemcpy(s->d_w + (size_t)k * s->bytes, s->d_w, s->bytes, cudaMemcpyDeviceToDevice));
        const size_t yb = (size_t)sp->out * 4;
        CK(cudaMalloc((void **)&s->d_y, yb));
        CK(cudaMalloc((void **)&s->d_y2, yb));
        CK(cudaMalloc((void **)&s->d_y3, yb));
        s->h_y = (float *)xmalloc(yb);
        s->h_y2 = (float *)xmalloc(yb);
        s->cpu = (float *)xmalloc((size_t)s->base * 4);
        s->emu = (float *)xmalloc((size_t)s->base * 4);
        s->S = (double *)xmalloc((size_t)s->base * 8);
        jb.kind = 1;
        jb.q = v->h_q;
        jb.act = v->h_act;
        jb.x = v->h_x;
        jb.cpu = s->cpu;
        jb.emu = s->emu;
        jb.S = s->S;
        run_jobs(jb, s->base);
    }
    CK(cudaDeviceSynchronize());
}

static void free_case(struct case_rt *r) {
    for (int i = 0; i < r->c->nseg; i++) {
        struct seg_rt *s = &r->s[i];
        cudaFree(s->d_w);
        cudaFree(s->d_y);
        cudaFree(s->d_y2);
        cudaFree(s->d_y3);
        free(s->h_w);
        free(s->h_y);
        free(s->h_y2);
        free(s->cpu);
        free(s->emu);
        free(s->S);
    }
    for (int k = 0; k < r->nv; k++) {
        cudaFree(r->v[k].d_x);
        cudaFree(r->v[k].d_q);
        free(r->v[k].h_x);
        free(r->v[k].h_q);
        free(r->v[k].h_act);
    }
}

/* ---- launches ---- */
static void make_seg(const struct case_rt *r, int i, int iter, int ybuf, dsv4_cuda_mvw_seg *g) {
    const struct seg_rt *s = &r->s[i];
    const struct vec *v = &r->v[s->sp->xid];
    g->type = s->sp->type;
    g->w = s->d_w + (size_t)(iter % r->copies) * s->bytes;
    g->row_bytes = s->rb;
    g->in = s->sp->in;
    g->rows = s->sp->out;
    g->x = s->sp->type == Q8 ? (const void *)v->d_q : (const void *)v->d_x;
    g->y = ybuf == 0 ? s->d_y : ybuf == 1 ? s->d_y2 : s->d_y3;
    g->x_f32 = 0;
}
/* the whole case in one launch */
static dsv4_status launch_new(const struct case_rt *r, int iter, int ybuf, cudaStream_t st, dsv4_error *err) {
    dsv4_cuda_mvw_seg g[MAX_SEG];
    for (int i = 0; i < r->c->nseg; i++) make_seg(r, i, iter, ybuf, &g[i]);
    return dsv4_cuda_mvw(g, r->c->nseg, st, err);
}
/* the old kernel: one launch per segment */
static dsv4_status launch_old(const struct case_rt *r, int iter, int ybuf, cudaStream_t st, dsv4_error *err) {
    for (int i = 0; i < r->c->nseg; i++) {
        dsv4_cuda_mvw_seg g;
        make_seg(r, i, iter, ybuf, &g);
        const dsv4_status rc = dsv4_cuda_matvec(r->ctx, g.type, g.w, g.in, g.rows, g.x, g.y, st, err);
        if (rc != DSV4_OK) return rc;
    }
    return DSV4_OK;
}
typedef dsv4_status (*launch_fn)(const struct case_rt *, int, int, cudaStream_t, dsv4_error *);
/* today's decode path: each Q8_0 input quantized by its own launch, then the new kernel */
static dsv4_status launch_sep(const struct case_rt *r, int iter, int ybuf, cudaStream_t st, dsv4_error *err) {
    for (int k = 0; k < r->nv; k++) {
        bool q8 = false;
        for (int i = 0; i < r->c->nseg; i++) q8 |= r->c->s[i].xid == k && r->c->s[i].type == Q8;
        if (!q8) continue;
        const dsv4_status rc = dsv4_cuda_quant_act_q8_0(r->v[k].d_x, r->v[k].d_q, r->v[k].in, st, err);
        if (rc != DSV4_OK) return rc;
    }
    return launch_new(r, iter, ybuf, st, err);
}
/* the new kernel quantizing its Q8_0 inputs itself (x_f32) */
static dsv4_status launch_fused(const struct case_rt *r, int iter, int ybuf, cudaStream_t st,
                                dsv4_error *err) {
    dsv4_cuda_mvw_seg g[MAX_SEG];
    for (int i = 0; i < r->c->nseg; i++) {
        make_seg(r, i, iter, ybuf, &g[i]);
        if (g[i].type == Q8) {
            g[i].x = r->v[r->s[i].sp->xid].d_x;
            g[i].x_f32 = 1;
        }
    }
    return dsv4_cuda_mvw(g, r->c->nseg, st, err);
}

/* ---- checks ---- */
static void poison(const struct case_rt *r, int ybuf, cudaStream_t st) {
    for (int i = 0; i < r->c->nseg; i++) {
        const struct seg_rt *s = &r->s[i];
        CK(cudaMemsetAsync(ybuf == 0   ? s->d_y
                           : ybuf == 1 ? s->d_y2
                                       : s->d_y3,
                           0xff, (size_t)s->sp->out * 4, st));
    }
}
static void download(const struct case_rt *r, int i, int ybuf, float *h) {
    const struct seg_rt *s = &r->s[i];
    CK(cudaMemcpy(h,
                  ybuf == 0   ? s->d_y
                  : ybuf == 1 ? s->d_y2
                              : s->d_y3,
                  (size_t)s->sp->out * 4, cudaMemcpyDeviceToHost));
}
/* every row vs the CPU bound (and, for the new kernel, the host model's bits) */
static int check_rows(const struct case_rt *r, int i, const float *y, int model, const char *what,
                      double *maxe) {
    const struct seg_rt *s = &r->s[i];
    const int64_t in = s->sp->in;
    const double nb = s->sp->type == Q8 ? in / 32 : in / 8;
    const double tol = 1e-5 + (nb + 8) * ldexp(1.0, -24);
    int bad_bound = 0, bad_bits = 0;
    for (int64_t row = 0; row < s->sp->out; row++) {
        const int64_t b = row % s->base;
        const double S = s->S[b] > 0 ? s->S[b] : 1.0;
        const double e = fabs((double)y[row] - (double)s->cpu[b]) / S;
        if (!(e <= tol)) {
            if (bad_bound < 3)
                printf("  FAIL %s seg %d row %lld: %.9g vs cpu %.9g (err/S %.3g > %.3g)\n", what, i,
                       (long long)row, (double)y[row], (double)s->cpu[b], e, tol);
            bad_bound++;
        }
        if (e > *maxe || e != e) *maxe = e;
        if (model && memcmp(&y[row], &s->emu[b], 4) != 0) {
            if (bad_bits < 3)
                printf("  FAIL %s seg %d row %lld: %.9g, host model of the kernel %.9g (bits differ)\n", what,
                       i, (long long)row, (double)y[row], (double)s->emu[b]);
            bad_bits++;
        }
    }
    return bad_bound + bad_bits;
}

static int check_case(struct case_rt *r, cudaStream_t st, double *maxe_new, double *maxe_old) {
    const struct bcase *c = r->c;
    dsv4_error err;
    int bad = 0;
    /* run 1 (copy 0) and run 2 (same inputs): rows checked, bits equal */
    poison(r, 0, st);
    poison(r, 1, st);
    if (launch_new(r, 0, 0, st, &err) != DSV4_OK || launch_new(r, 0, 1, st, &err) != DSV4_OK) {
        printf("  FAIL launch: %s\n", err.msg);
        return 1;
    }
    CK(cudaStreamSynchronize(st));
    for (int i = 0; i < c->nseg; i++) {
        download(r, i, 0, r->s[i].h_y);
        download(r, i, 1, r->s[i].h_y2);
        bad += check_rows(r, i, r->s[i].h_y, 1, "new", maxe_new);
        if (memcmp(r->s[i].h_y, r->s[i].h_y2, (size_t)c->s[i].out * 4) != 0) {
            printf("  FAIL seg %d: two identical runs differ\n", i);
            bad++;
        }
    }
    /* the last copy (other addresses, same bytes) gives the same bits */
    poison(r, 1, st);
    if (launch_new(r, r->copies - 1, 1, st, &err) != DSV4_OK) {
        printf("  FAIL launch: %s\n", err.msg);
        return bad + 1;
    }
    CK(cudaStreamSynchronize(st));
    for (int i = 0; i < c->nseg; i++) {
        download(r, i, 1, r->s[i].h_y2);
        if (memcmp(r->s[i].h_y, r->s[i].h_y2, (size_t)c->s[i].out * 4) != 0) {
            printf("  FAIL seg %d: the last weight copy gives other bits\n", i);
            bad++;
        }
    }
    /* invariance: each segment alone (separate launches) == the multi-segment launch */
    if (c->nseg > 1) {
        poison(r, 1, st);
        for (int i = 0; i < c->nseg; i++) {
            dsv4_cuda_mvw_seg g;
            make_seg(r, i, 0, 1, &g);
            if (dsv4_cuda_mvw(&g, 1, st, &err) != DSV4_OK) {
                printf("  FAIL launch: %s\n", err.msg);
                return bad + 1;
            }
        }
        /* and the segments in reverse order, in one launch */
        dsv4_cuda_mvw_seg g[MAX_SEG];
        for (int i = 0; i < c->nseg; i++) make_seg(r, c->nseg - 1 - i, 0, 2, &g[i]);
        poison(r, 2, st);
        if (dsv4_cuda_mvw(g, c->nseg, st, &err) != DSV4_OK) {
            printf("  FAIL launch: %s\n", err.msg);
            return bad + 1;
        }
        CK(cudaStreamSynchronize(st));
        int diff = 0;
        for (int i = 0; i < c->nseg; i++) {
            download(r, i, 1, r->s[i].h_y2);
            if (memcmp(r->s[i].h_y, r->s[i].h_y2, (size_t)c->s[i].out * 4) != 0) diff++;
            download(r, i, 2, r->s[i].h_y2);
            if (memcmp(r->s[i].h_y, r->s[i].h_y2, (size_t)c->s[i].out * 4) != 0) diff++;
        }
        if (diff) {
            printf("  FAIL invariance: %d segment outputs differ between the multi-segment launch and "
                   "separate / "
                   "reordered launches\n",
                   diff);
            bad++;
        } else
            printf("  invariance: multi-segment == separate launches == reversed segment order (bitwise)\n");
    }
    /* the old kernel (timed below) against the same bound */
    poison(r, 1, st);
    if (launch_old(r, 0, 1, st, &err) != DSV4_OK) {
        printf("  FAIL old launch: %s\n", err.msg);
        return bad + 1;
    }
    CK(cudaStreamSynchronize(st));
    for (int i = 0; i < c->nseg; i++) {
        download(r, i, 1, r->s[i].h_y2);
        bad += check_rows(r, i, r->s[i].h_y2, 0, "old", maxe_old);
    }
    return bad;
}

/* Fused vs separate activation quantization: bitwise equal (and the fused rows equal the host model,
 * so the bound holds too); returns the failures. */
static int check_act(const struct case_rt *r, cudaStream_t st, double *maxe) {
    dsv4_error err;
    poison(r, 1, st);
    poison(r, 2, st);
    if (launch_sep(r, 0, 1, st, &err) != DSV4_OK || launch_fused(r, 0, 2, st, &err) != DSV4_OK) {
        printf("  FAIL mvw_act launch: %s\n", err.msg);
        return 1;
    }
    CK(cudaStreamSynchronize(st));
    int bad = 0, diff = 0;
    for (int i = 0; i < r->c->nseg; i++) {
        download(r, i, 1, r->s[i].h_y);
        download(r, i, 2, r->s[i].h_y2);
        for (int64_t row = 0; row < r->c->s[i].out; row++)
            diff += memcmp(&r->s[i].h_y[row], &r->s[i].h_y2[row], 4) != 0;
        bad += check_rows(r, i, r->s[i].h_y2, 1, "fused", maxe);
    }
    if (diff) printf("  FAIL mvw_act: %d rows differ between fused and separate quantization\n", diff);
    return bad + (diff != 0);
}

/* ---- timing ---- */
static double time_stream(const struct case_rt *r, launch_fn fn, int nl, cudaStream_t st) {
    cudaEvent_t e0, e1;
    dsv4_error err;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < nl; i++) fn(r, i, 0, st, &err); /* warm-up */
    double t[N_BATCH];
    for (int b = 0; b < N_BATCH; b++) {
        CK(cudaEventRecord(e0, st));
        for (int i = 0; i < nl; i++)
            if (fn(r, i, 0, st, &err) != DSV4_OK) {
                printf("  FAIL launch: %s\n", err.msg);
                g_fail++;
                return -1.0;
            }
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t[b] = (double)ms * 1000.0 / nl;
    }
    qsort(t, N_BATCH, sizeof t[0], cmp_double);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return t[N_BATCH / 2];
}
static double time_graph(const struct case_rt *r, launch_fn fn, int nl, cudaStream_t st) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    dsv4_error err;
    dsv4_status rc = DSV4_OK;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < nl && rc == DSV4_OK; i++) rc = fn(r, i, 0, st, &err);
    CK(cudaStreamEndCapture(st, &g));
    if (rc != DSV4_OK) {
        printf("  FAIL capture: %s\n", err.msg);
        g_fail++;
        cudaGraphDestroy(g);
        return -1.0;
    }
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int w = 0; w < 2; w++) CK(cudaGraphLaunch(ge, st));
    double t[N_BATCH];
    for (int b = 0; b < N_BATCH; b++) {
        CK(cudaEventRecord(e0, st));
        CK(cudaGraphLaunch(ge, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t[b] = (double)ms * 1000.0 / nl;
    }
    qsort(t, N_BATCH, sizeof t[0], cmp_double);
    CK(cudaGetLastError());
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return t[N_BATCH / 2];
}

static double measure_copy_bw(void) {
    const size_t n = 2ull << 30;
    uint8_t *a, *b;
    CK(cudaMalloc((void **)&a, n));
    CK(cudaMalloc((void **)&b, n));
    CK(cudaMemset(a, 1, n));
    CK(cudaMemset(b, 2, n));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice));
    double t[11];
    for (int i = 0; i < 11; i++) {
        CK(cudaEventRecord(e0, 0));
        CK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, 0));
        CK(cudaEventRecord(e1, 0));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t[i] = ms * 1e-3;
    }
    qsort(t, 11, sizeof t[0], cmp_double);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    CK(cudaFree(a));
    CK(cudaFree(b));
    const double bw = 2.0 * (double)n / t[5];
    printf("device copy (cudaMemcpy D2D, 2 GiB, read + write counted): %.1f GB/s\n", bw / 1e9);
    return bw;
}

/* A few argument checks that need no GPU work: nothing is launched for a rejected segment list. */
static void check_api(void) {
    dsv4_error err;
    dsv4_cuda_mvw_seg g;
    memset(&g, 0, sizeof g);
    int bad = 0;
    if (dsv4_cuda_mvw(&g, 0, 0, &err) != DSV4_ERR_UNSUPPORTED) bad++;
    if (dsv4_cuda_mvw(&g, DSV4_CUDA_MVW_MAX_SEGS + 1, 0, &err) != DSV4_ERR_UNSUPPORTED) bad++;
    g.type = Q8;
    g.w = (const void *)(uintptr_t)0x1000;
    g.row_bytes = 4352;
    g.in = 4096;
    g.rows = 4;
    g.x = g.w;
    g.y = (float *)(uintptr_t)0x2000;
    g.in = 4000; /* not a multiple of 256 */
    if (dsv4_cuda_mvw(&g, 1, 0, &err) != DSV4_ERR_UNSUPPORTED) bad++;
    g.in = 4096;
    g.x = (const void *)(uintptr_t)0x1002; /* misaligned activations */
    if (dsv4_cuda_mvw(&g, 1, 0, &err) != DSV4_ERR_UNSUPPORTED) bad++;
    g.x = (const void *)(uintptr_t)0x1004; /* 4-byte aligned: fine for Q8_0 blocks, not for f32 */
    g.x_f32 = 1;
    if (dsv4_cuda_mvw(&g, 1, 0, &err) != DSV4_ERR_UNSUPPORTED) bad++;
    g.x_f32 = 0;
    g.x = NULL;
    if (dsv4_cuda_mvw(&g, 1, 0, &err) != DSV4_ERR_INVALID) bad++;
    if (!dsv4_cuda_mvw_ok(Q8, (const void *)(uintptr_t)0x1000, 4352, 4096) ||
        dsv4_cuda_mvw_ok(Q8, (const void *)(uintptr_t)0x1008, 4352, 4096))
        bad++;
    printf("API argument checks: %s\n", bad ? "FAIL" : "ok");
    if (bad) g_fail++;
}

int main(int argc, char **argv) {
    int device = 0;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc)
            device = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--case") && i + 1 < argc)
            only = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--device N] [--case SUBSTRING]\n", argv[0]);
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, device));
    CK(cudaSetDevice(device));
    printf("device %d: %s, sm_%d%d, %d SMs, L2 %d MB\n", device, prop.name, prop.major, prop.minor,
           prop.multiProcessorCount, prop.l2CacheSize >> 20);
    (void)quant_simd_active(); /* settle the dispatch before the worker threads */
    dsv4_cuda_mv_ctx ctx;
    dsv4_error err;
    if (dsv4_cuda_mv_init(&ctx, device, &err) != DSV4_OK) {
        fprintf(stderr, "FATAL: %s\n", err.msg);
        return 2;
    }
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    g_copy_bw = measure_copy_bw();
    check_api();

    const int ncases = (int)(sizeof k_cases / sizeof k_cases[0]);
    char lines[2][64][200], act_lines[64][200];
    /* the cases of the fused-quantization comparison (RESULT mvw_act ...) */
    static const char *const act_case[][2] = {{"set_attn_6seg", "attn_6seg"},
                                              {"q8_1024x32768_attn_q_b", "q_b"},
                                              {"q8_8192x4096_attn_out_b", "wo_b"},
                                              {"set_attn_out_a_8x_own_x", "wo_a_grouped_8x"}};
    for (int ci = 0; ci < ncases; ci++) {
        const struct bcase *c = &k_cases[ci];
        if (only && !strstr(c->name, only)) {
            lines[0][ci][0] = lines[1][ci][0] = 0;
            if (ci < 64) act_lines[ci][0] = 0;
            continue;
        }
        struct case_rt r;
        setup_case(&r, c, &ctx, st);
        printf("\n== %s: %d segment%s, %.2f MB per launch, %d copies rotated (%.0f MB)\n", c->name, c->nseg,
               c->nseg > 1 ? "s" : "", r.bytes / 1e6, r.copies, r.bytes * r.copies / 1e6);
        double en = 0.0, eo = 0.0;
        const int bad = check_case(&r, st, &en, &eo);
        printf("  check: %s; max err/S vs CPU: new %.3g, old %.3g\n", bad ? "FAIL" : "ok", en, eo);
        if (bad) g_fail++;
        const double est_us = r.bytes / 3.0e12 * 1e6 + 3.0 * c->nseg;
        int nl = (int)(3000.0 / est_us) + 1;
        if (nl < 10) nl = 10;
        if (nl > 1000) nl = 1000;
        const double og = time_graph(&r, launch_old, nl, st), ng = time_graph(&r, launch_new, nl, st);
        const double os = time_stream(&r, launch_old, nl, st), ns = time_stream(&r, launch_new, nl, st);
        const double pg = 100.0 * r.bytes / (ng * 1e-6) / g_copy_bw,
                     ps = 100.0 * r.bytes / (ns * 1e-6) / g_copy_bw;
        printf("  graph : old %8.2f us  new %8.2f us  (%.2fx)  %7.1f GB/s  %5.1f%% of copy%s\n", og, ng,
               og / ng, r.bytes / (ng * 1e-6) / 1e9, pg,
               c->target_us > 0 ? (ng <= c->target_us ? "  [target met]" : "  [target missed]") : "");
        printf("  stream: old %8.2f us  new %8.2f us  (%.2fx)  %7.1f GB/s  %5.1f%% of copy\n", os, ns,
               os / ns, r.bytes / (ns * 1e-6) / 1e9, ps);
        if (c->target_us > 0) printf("  target (graph): <= %.1f us\n", c->target_us);
        if (ci < 64) {
            snprintf(lines[0][ci], sizeof lines[0][ci], "RESULT %s %.2f %.2f %.1f", c->name, og, ng, pg);
            snprintf(lines[1][ci], sizeof lines[1][ci], "RESULT %s:stream %.2f %.2f %.1f", c->name, os, ns,
                     ps);
        }
        if (ci < 64) act_lines[ci][0] = 0;
        for (int a = 0; a < 4; a++) {
            if (strcmp(c->name, act_case[a][0]) != 0) continue;
            double ea = 0.0;
            const int ab = check_act(&r, st, &ea);
            if (ab) g_fail++;
            const double sg = time_graph(&r, launch_sep, nl, st), fg = time_graph(&r, launch_fused, nl, st);
            printf("  mvw_act (graph): separate quantization %8.2f us  fused %8.2f us  (%.2fx); bitwise %s\n",
                   sg, fg, sg / fg, ab ? "FAIL" : "ok");
            if (ci < 64)
                snprintf(act_lines[ci], sizeof act_lines[ci],
                         "RESULT mvw_act %s separate_us %.2f fused_us %.2f%s", act_case[a][1], sg, fg,
                         ab ? " BITWISE_FAIL" : "");
        }
        free_case(&r);
    }
    printf("\n# RESULT <case> <old_us> <new_us> <new %% of copy %.0f GB/s>  (graph replay; :stream = plain "
           "launches)\n",
           g_copy_bw / 1e9);
    for (int k = 0; k < 2; k++)
        for (int ci = 0; ci < ncases && ci < 64; ci++)
            if (lines[k][ci][0]) printf("%s\n", lines[k][ci]);
    printf("# RESULT mvw_act <case> separate_us <quantizer launch + kernel> fused_us <kernel quantizing "
           "itself> (graph replay)\n");
    for (int ci = 0; ci < ncases && ci < 64; ci++)
        if (act_lines[ci][0]) printf("%s\n", act_lines[ci]);
    dsv4_cuda_mv_destroy(&ctx);
    CK(cudaStreamDestroy(st));
    printf("\nRESULT: %s (%d failed checks)\n", g_fail ? "FAIL" : "PASS", g_fail);
    return g_fail ? 1 : 0;
}
