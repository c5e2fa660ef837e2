/* DSV4_CUDA_PROFILE=1: per-op timing of the CUDA backend.
 *
 * The backend then hands out a wrapper op table (a per-context copy of the real one with every
 * entry replaced), so the normal path runs no profiling code (it only bumps cuda_ctx's sync
 * counters, which the profile reports). Each wrapped GPU op records a pair of pooled events on
 * the backend stream around the real call and measures the host time spent inside it. Elapsed
 * times are read lazily: only when the pool is full (or at destroy) does the host wait for the
 * last event, then it reads every pair, so per-token timing is not serialized by the profiler.
 * The table (backend/op_profile.h) is printed on stderr at destroy. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/cuda_backend.h"
extern "C" {
#include "backend/op_profile.h"
#include "common/types.h"
}

enum { CU_PROF_PAIRS = 4096, CU_PROF_STAMPS = 1u << 21 };

/* DSV4_CUDA_PROFILE=graph: a one-thread kernel before and after each op stamps the GPU's global
 * timer into a device log instead of events, so the ops can stay inside recorded decode steps
 * (events cannot be timed there) and every replay leaves its stamps. The stamps end programmatic
 * launches between ops (each op then starts after the stamp after the op before), so an op's time
 * is its kernels' time at the real clock and cache state with no overlap. */
typedef dsv4_opprof_stamp cu_stamp; /* t: %globaltimer (ns); tag: scope << 1 | (1: after the op) */

static __global__ void prof_stamp_kernel(cu_stamp *log, unsigned *count, unsigned cap, uint32_t slot,
                                         uint32_t tag) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    const unsigned i = atomicAdd(count, 1u);
    if (i < cap) log[i] = cu_stamp{(uint64_t)t, slot, tag};
}

typedef struct cu_prof_pair {
    cudaEvent_t a, b;
    int32_t slot;
} cu_prof_pair;

struct cu_prof {
    dsv4_backend_ops ops;         /* the wrapper table handed out */
    const dsv4_backend_ops *base; /* the real one */
    dsv4_opprof agg;
    cu_prof_pair *pool;
    size_t n_events; /* pairs created */
    size_t n;        /* pairs recorded since the last harvest */
    cudaEvent_t origin;
    bool started;           /* origin recorded (first GPU op seen) */
    bool gpu_off;           /* an event call failed: host timing only from then on */
    double t_first, t_last; /* host clock (ms) of the first GPU op's entry / the last one's exit */
    double span_ms;
    double self_ms; /* host time of the profiler itself around the calls */
    uint64_t tokens, steps, flushes, lost;
    uint64_t sync0[CU_SYNC_KINDS]; /* counters when profiling began */
    bool stamps;                   /* DSV4_CUDA_PROFILE=graph */
    cu_stamp *d_log;
    unsigned *d_count;
    uint32_t n_scopes;      /* stamp scope instances handed out */
    uint64_t embeds_direct; /* embed calls run as issued (not recorded into a step) */
    int32_t embed_slot;
};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Read every recorded pair (waits for the last one). */
static void harvest(cu_prof *p) {
    if (!p->n) return;
    const cudaEvent_t last = p->pool[p->n - 1].b;
    if (cudaEventSynchronize(last) != cudaSuccess) {
        /* a failed kernel (sticky: the backend's own sync reports it); stop GPU timing */
        p->lost += p->n;
        p->n = 0;
        p->gpu_off = true;
        return;
    }
    p->flushes++;
    for (size_t i = 0; i < p->n; i++) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, p->pool[i].a, p->pool[i].b) == cudaSuccess)
            dsv4_opprof_add_gpu(&p->agg, p->pool[i].slot, ms);
        else
            cudaGetLastError(), p->lost++; /* the profiler's own error: keep it from the backend */
    }
    float span = 0;
    if (cudaEventElapsedTime(&span, p->origin, last) == cudaSuccess)
        p->span_ms = span;
    else
        cudaGetLastError();
    p->n = 0;
}

/* One timed call: host time inside the real op, and for GPU ops a pair of events around it. */
class prof_scope {
  public:
    prof_scope(cuda_ctx *c, const char *key, bool gpu) : p_(c->prof), pair_(-1) {
        const double enter = now_ms();
        slot_ = dsv4_opprof_slot(&p_->agg, key);
        if (p_->stamps && gpu && !p_->gpu_off && slot_ >= 0) {
            scope_ = p_->n_scopes++;
            stream_ = c->stream;
            stamp(0);
        } else if (gpu && !p_->gpu_off && slot_ >= 0) {
            if (p_->n == p_->n_events) harvest(p_);
            if (!p_->gpu_off) {
                cudaError_t e = cudaSuccess;
                if (!p_->started) e = cudaEventRecord(p_->origin, c->stream);
                if (e == cudaSuccess) e = cudaEventRecord(p_->pool[p_->n].a, c->stream);
                if (e == cudaSuccess) {
                    pair_ = (long)p_->n;
                    stream_ = c->stream;
                    if (!p_->started) p_->t_first = enter;
                    p_->started = true;
                } else {
                    cudaGetLastError();
                    p_->gpu_off = true;
                }
            }
        }
        t0_ = now_ms();
        p_->self_ms += t0_ - enter;
    }
    ~prof_scope() {
        const double t1 = now_ms();
        dsv4_opprof_add_call(&p_->agg, slot_, (t1 - t0_) * 1e3);
        if (scope_ != UINT32_MAX) stamp(1);
        if (pair_ >= 0) {
            if (cudaEventRecord(p_->pool[pair_].b, stream_) == cudaSuccess) {
                p_->pool[pair_].slot = slot_;
                p_->n = (size_t)pair_ + 1;
            } else {
                cudaGetLastError();
                p_->gpu_off = true;
            }
        }
        const double out = now_ms();
        if (pair_ >= 0) p_->t_last = out;
        p_->self_ms += out - t1;
    }
    prof_scope(const prof_scope &) = delete;
    prof_scope &operator=(const prof_scope &) = delete;

  private:
    /* on the op's stream (the lane it was issued on); a failed launch stops GPU timing */
    void stamp(uint32_t after) {
        if (p_->gpu_off) return;
        prof_stamp_kernel<<<1, 1, 0, stream_>>>(p_->d_log, p_->d_count, CU_PROF_STAMPS, (uint32_t)slot_,
                                                scope_ << 1 | after);
        if (cudaGetLastError() != cudaSuccess) p_->gpu_off = true;
        if (!p_->started) p_->t_first = now_ms();
        p_->started = true;
        p_->t_last = now_ms();
    }
    cu_prof *p_;
    int32_t slot_;
    uint32_t scope_ = UINT32_MAX;
    long pair_;
    cudaStream_t stream_ = nullptr;
    double t0_ = 0;
};

/* ---- the wrappers ---- */

/* Generic wrapper of a status-returning op keyed by its name. */
template <typename Sig, Sig dsv4_backend_ops::*M, const char *Name, bool Gpu> struct pw;
template <typename... A, dsv4_status (*dsv4_backend_ops::*M)(void *, A...), const char *Name, bool Gpu>
struct pw<dsv4_status (*)(void *, A...), M, Name, Gpu> {
    static dsv4_status fn(void *ctx, A... a) {
        cuda_ctx *c = (cuda_ctx *)ctx;
        const dsv4_backend_ops *base = c->prof->base;
        prof_scope s(c, Name, Gpu);
        return (base->*M)(ctx, a...);
    }
};

#define PW_NAME(op) static constexpr char k_##op[] = #op;
PW_NAME(buf_alloc)
PW_NAME(write)
PW_NAME(read)
PW_NAME(copy)
PW_NAME(fill_f32)
PW_NAME(sync)
PW_NAME(hc_pre)
PW_NAME(hc_post)
PW_NAME(hc_head)
PW_NAME(rmsnorm)
PW_NAME(add)
PW_NAME(swiglu)
PW_NAME(rope_tail)
PW_NAME(fp8_kv)
PW_NAME(hadamard_fp4)
PW_NAME(store_f16)
PW_NAME(compressor_step)
PW_NAME(indexer_topk)
PW_NAME(router_select)
PW_NAME(hc_pre_norm)
PW_NAME(q_norm_rope)
PW_NAME(q_norm_rope_idx)
PW_NAME(emit_row)
PW_NAME(matmuls_router)
PW_NAME(hc_post_pre_norm)
PW_NAME(kv_norm_rope_fp8)
PW_NAME(compressor_chunk)
PW_NAME(indexer_topk_chunk)
PW_NAME(attention_chunk)
PW_NAME(attention_chunk_qnr)
PW_NAME(hc_post_add)
PW_NAME(attention_rope)
PW_NAME(attention_qnr)
PW_NAME(activate)
PW_NAME(copy_from)
PW_NAME(host_alloc)
PW_NAME(hc_post_slots)
#define PW(op, gpu) pw<decltype(dsv4_backend_ops::op), &dsv4_backend_ops::op, k_##op, gpu>::fn

static void n_bucket(char *buf, size_t cap, uint32_t n) {
    if (n <= 1) {
        snprintf(buf, cap, "%u", n);
        return;
    }
    uint32_t hi = 2;
    while (hi < n && hi < 0x80000000u) hi <<= 1;
    snprintf(buf, cap, "%u-%u", hi / 2 + 1, hi);
}

static dsv4_status pw_matmul(void *ctx, const dsv4_tensor *w, uint64_t row0, uint64_t n_out, const float *x,
                             uint64_t x_stride, uint32_t n, float *y, uint64_t y_stride, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    char key[DSV4_OPPROF_KEY], nb[24];
    n_bucket(nb, sizeof nb, n);
    snprintf(key, sizeof key, "matmul %s n=%s in=%llu out=%llu", dsv4_type_name(w->type), nb,
             (unsigned long long)w->ne[0], (unsigned long long)n_out);
    const dsv4_backend_ops *base = c->prof->base;
    prof_scope s(c, key, true);
    return base->matmul(ctx, w, row0, n_out, x, x_stride, n, y, y_stride, err);
}

static dsv4_status pw_matmul_multi(void *ctx, const dsv4_matmul_item *items, uint32_t n_items, uint32_t n,
                                   dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    char key[DSV4_OPPROF_KEY], nb[24];
    n_bucket(nb, sizeof nb, n);
    uint64_t rows = 0;
    for (uint32_t i = 0; i < n_items; i++) rows += items[i].n_out;
    snprintf(key, sizeof key, "matmul_multi %s n=%s items=%u in=%llu out=%llu",
             n_items ? dsv4_type_name(items[0].w->type) : "-", nb, n_items,
             n_items ? (unsigned long long)items[0].w->ne[0] : 0ull, (unsigned long long)rows);
    const dsv4_backend_ops *base = c->prof->base;
    prof_scope s(c, key, true);
    return base->matmul_multi(ctx, items, n_items, n, err);
}

static dsv4_status pw_matmul_grouped(void *ctx, const dsv4_tensor *w, uint32_t n_groups, const float *x,
                                     uint64_t x_stride, uint32_t n, float *y, uint64_t y_stride,
                                     dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    char key[DSV4_OPPROF_KEY], nb[24];
    n_bucket(nb, sizeof nb, n);
    snprintf(key, sizeof key, "matmul_grouped %s n=%s groups=%u in=%llu out=%llu", dsv4_type_name(w->type),
             nb, n_groups, (unsigned long long)w->ne[0], (unsigned long long)w->ne[1]);
    const dsv4_backend_ops *base = c->prof->base;
    prof_scope s(c, key, true);
    return base->matmul_grouped(ctx, w, n_groups, x, x_stride, n, y, y_stride, err);
}

/* "NAME gate/up/down types n=BUCKET k=K in=IN ff=FF": the routed-expert ops' key */
static void moe_key(char *key, size_t cap, const char *name, const dsv4_tensor *gate, const dsv4_tensor *up,
                    const dsv4_tensor *down, uint32_t n, uint32_t k) {
    char nb[24];
    n_bucket(nb, sizeof nb, n);
    snprintf(key, cap, "%s %s/%s/%s n=%s k=%u in=%llu ff=%llu", name, dsv4_type_name(gate->type),
             dsv4_type_name(up->type), dsv4_type_name(down->type), nb, k, (unsigned long long)gate->ne[0],
             (unsigned long long)gate->ne[1]);
}

static dsv4_status pw_moe(void *ctx, const dsv4_tensor *gate, const dsv4_tensor *up, const dsv4_tensor *down,
                          const float *x, uint32_t n, const int32_t *sel, const float *weights, uint32_t k,
                          float clamp, float *out, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    char key[DSV4_OPPROF_KEY];
    moe_key(key, sizeof key, "moe", gate, up, down, n, k);
    const dsv4_backend_ops *base = c->prof->base;
    prof_scope s(c, key, true);
    return base->moe(ctx, gate, up, down, x, n, sel, weights, k, clamp, out, err);
}

static dsv4_status pw_moe_slots(void *ctx, const dsv4_tensor *gate, const dsv4_tensor *up,
                                const dsv4_tensor *down, const float *x, uint32_t n, const int32_t *sel,
                                const float *weights, uint32_t k, float clamp, float *slots,
                                dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    char key[DSV4_OPPROF_KEY];
    moe_key(key, sizeof key, "moe_slots", gate, up, down, n, k);
    const dsv4_backend_ops *base = c->prof->base;
    prof_scope s(c, key, true);
    return base->moe_slots(ctx, gate, up, down, x, n, sel, weights, k, clamp, slots, err);
}

static dsv4_status pw_attention(void *ctx, const float *q, uint32_t n_head, uint32_t head_dim,
                                uint32_t kv_type, const void *raw, uint32_t raw_cap, uint32_t raw_start,
                                uint32_t n_raw, const void *comp, uint32_t n_comp, const int32_t *sel,
                                uint32_t n_sel, const dsv4_tensor *sinks, float kq_scale, float *out,
                                dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    /* raw window only / all compressed rows / indexer-selected rows */
    const char *key = sel ? "attention sel" : n_comp ? "attention comp" : "attention raw";
    const dsv4_backend_ops *base = c->prof->base;
    prof_scope s(c, key, true);
    return base->attention(ctx, q, n_head, head_dim, kv_type, raw, raw_cap, raw_start, n_raw, comp, n_comp,
                           sel, n_sel, sinks, kq_scale, out, err);
}

static dsv4_status pw_embed(void *ctx, const dsv4_tensor *emb, const int32_t *host_tokens, uint32_t n,
                            uint32_t n_hc, float *out_hc, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(c->stream, &cs) != cudaSuccess) cudaGetLastError();
    if (cs == cudaStreamCaptureStatusNone || !c->prof->stamps) { /* a recorded one counts at its replays */
        c->prof->tokens += n;
        c->prof->steps++;
        c->prof->embeds_direct++;
    }
    const dsv4_backend_ops *base = c->prof->base;
    prof_scope s(c, "embed", true);
    return base->embed(ctx, emb, host_tokens, n, n_hc, out_hc, err);
}

static void pw_buf_free(void *ctx, void *ptr) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    const dsv4_backend_ops *base = c->prof->base;
    prof_scope s(c, "buf_free", false);
    base->buf_free(ctx, ptr);
}

static void pw_host_free(void *ctx, void *ptr) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    const dsv4_backend_ops *base = c->prof->base;
    prof_scope s(c, "host_free", false);
    base->host_free(ctx, ptr);
}

/* Replace an entry only where the real table has one (absent optional ops stay absent). */
#define PW_SET(op, fn)                                                                                       \
    do {                                                                                                     \
        if (base->op) p->ops.op = fn;                                                                        \
    } while (0)

static void install(cu_prof *p, const dsv4_backend_ops *base) {
    p->base = base;
    p->ops = *base; /* name, supports_weight_type, fused_available and destroy pass through */
    /* per-op events need the ops to run as issued: no step recording while profiling (stamps are
     * recorded with the step and run at each replay) */
    if (!p->stamps) {
        p->ops.step_begin = NULL;
        p->ops.step_end = NULL;
    }
    PW_SET(buf_alloc, PW(buf_alloc, false));
    PW_SET(buf_free, pw_buf_free);
    PW_SET(write, PW(write, true));
    PW_SET(read, PW(read, true));
    PW_SET(copy, PW(copy, true));
    PW_SET(fill_f32, PW(fill_f32, true));
    PW_SET(sync, PW(sync, true));
    PW_SET(embed, pw_embed);
    PW_SET(hc_pre, PW(hc_pre, true));
    PW_SET(hc_post, PW(hc_post, true));
    PW_SET(hc_head, PW(hc_head, true));
    PW_SET(rmsnorm, PW(rmsnorm, true));
    PW_SET(matmul, pw_matmul);
    PW_SET(matmul_grouped, pw_matmul_grouped);
    PW_SET(matmul_multi, pw_matmul_multi);
    PW_SET(add, PW(add, true));
    PW_SET(swiglu, PW(swiglu, true));
    PW_SET(rope_tail, PW(rope_tail, true));
    PW_SET(fp8_kv, PW(fp8_kv, true));
    PW_SET(hadamard_fp4, PW(hadamard_fp4, true));
    PW_SET(store_f16, PW(store_f16, true));
    PW_SET(compressor_step, PW(compressor_step, true));
    PW_SET(indexer_topk, PW(indexer_topk, true));
    PW_SET(attention, pw_attention);
    PW_SET(router_select, PW(router_select, true));
    PW_SET(moe, pw_moe);
    PW_SET(moe_slots, pw_moe_slots);
    PW_SET(hc_post_slots, PW(hc_post_slots, true));
    PW_SET(hc_pre_norm, PW(hc_pre_norm, true));
    PW_SET(q_norm_rope, PW(q_norm_rope, true));
    PW_SET(q_norm_rope_idx, PW(q_norm_rope_idx, true));
    PW_SET(emit_row, PW(emit_row, true));
    PW_SET(matmuls_router, PW(matmuls_router, true));
    PW_SET(hc_post_pre_norm, PW(hc_post_pre_norm, true));
    PW_SET(kv_norm_rope_fp8, PW(kv_norm_rope_fp8, true));
    PW_SET(compressor_chunk, PW(compressor_chunk, true));
    PW_SET(indexer_topk_chunk, PW(indexer_topk_chunk, true));
    PW_SET(attention_chunk, PW(attention_chunk, true));
    PW_SET(attention_chunk_qnr, PW(attention_chunk_qnr, true));
    PW_SET(hc_post_add, PW(hc_post_add, true));
    PW_SET(attention_rope, PW(attention_rope, true));
    PW_SET(attention_qnr, PW(attention_qnr, true));
    PW_SET(activate, PW(activate, false));
    PW_SET(copy_from, PW(copy_from, true));
    PW_SET(host_alloc, PW(host_alloc, false));
    PW_SET(host_free, pw_host_free);
}

bool cu_prof_requested(void) {
    const char *v = getenv("DSV4_CUDA_PROFILE");
    return v && *v && strcmp(v, "0") != 0;
}

static bool prof_stamps_requested(void) {
    const char *v = getenv("DSV4_CUDA_PROFILE");
    return v && strcmp(v, "graph") == 0;
}

/* The device log into the table (dsv4_opprof_add_stamps pairs it); with DSV4_CUDA_PROFILE_LOG=path
 * every stamp is also written as CSV for a timeline. */
static void stamps_harvest(cu_prof *p) {
    unsigned n = 0;
    if (cudaDeviceSynchronize() != cudaSuccess ||
        cudaMemcpy(&n, p->d_count, sizeof n, cudaMemcpyDeviceToHost) != cudaSuccess) {
        cudaGetLastError();
        p->gpu_off = true;
        return;
    }
    if (n > CU_PROF_STAMPS) p->lost += n - CU_PROF_STAMPS, n = CU_PROF_STAMPS;
    cu_stamp *h = (cu_stamp *)malloc((size_t)n * sizeof *h + 1);
    if (!h || cudaMemcpy(h, p->d_log, (size_t)n * sizeof *h, cudaMemcpyDeviceToHost) != cudaSuccess) {
        cudaGetLastError();
        free(h);
        p->lost += n;
        return;
    }
    const char *path = getenv("DSV4_CUDA_PROFILE_LOG");
    FILE *f = path && *path ? fopen(path, "w") : NULL;
    if (path && *path && !f) fprintf(stderr, "profiler: cannot write %s\n", path);
    uint64_t span = 0;
    const int64_t bad = dsv4_opprof_add_stamps(&p->agg, h, n, p->n_scopes, f, &span);
    p->lost += bad < 0 ? n : (uint64_t)bad;
    if (f) fclose(f);
    /* recorded steps embed one token at each replay */
    p->embed_slot = dsv4_opprof_slot(&p->agg, "embed");
    if (p->embed_slot >= 0 && p->agg.e[p->embed_slot].gpu_calls > p->embeds_direct) {
        const uint64_t replays = p->agg.e[p->embed_slot].gpu_calls - p->embeds_direct;
        p->tokens += replays;
        p->steps += replays;
    }
    p->span_ms = (double)span * 1e-6;
    p->flushes++;
    free(h);
}

static void prof_free(cu_prof *p) {
    if (p->d_log) cudaFree(p->d_log);
    if (p->d_count) cudaFree(p->d_count);
    for (size_t i = 0; i < p->n_events; i++) {
        cudaEventDestroy(p->pool[i].a);
        cudaEventDestroy(p->pool[i].b);
    }
    if (p->origin) cudaEventDestroy(p->origin);
    cudaGetLastError();
    free(p->pool);
    dsv4_opprof_free(&p->agg);
    free(p);
}

dsv4_status cu_prof_create(cuda_ctx *c, const dsv4_backend_ops *base, const dsv4_backend_ops **ops_out,
                           dsv4_error *err) {
    cu_prof *p = (cu_prof *)calloc(1, sizeof *p);
    if (!p) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory for the CUDA profiler");
    if (dsv4_opprof_init(&p->agg, err) != DSV4_OK) {
        free(p);
        return DSV4_ERR_NOMEM;
    }
    p->pool = (cu_prof_pair *)calloc(CU_PROF_PAIRS, sizeof *p->pool);
    if (!p->pool) {
        prof_free(p);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory for the CUDA profiler's events");
    }
    cudaError_t e = cudaEventCreate(&p->origin);
    for (; e == cudaSuccess && p->n_events < CU_PROF_PAIRS; p->n_events++) {
        e = cudaEventCreate(&p->pool[p->n_events].a);
        if (e != cudaSuccess) break;
        e = cudaEventCreate(&p->pool[p->n_events].b);
        if (e != cudaSuccess) {
            cudaEventDestroy(p->pool[p->n_events].a);
            break;
        }
    }
    if (e != cudaSuccess) {
        prof_free(p);
        return cu_fail(err, e, "profiler events");
    }
    p->stamps = prof_stamps_requested();
    if (p->stamps) {
        e = cudaMalloc((void **)&p->d_log, (size_t)CU_PROF_STAMPS * sizeof(cu_stamp));
        if (e == cudaSuccess) e = cudaMalloc((void **)&p->d_count, sizeof(unsigned));
        if (e == cudaSuccess) e = cudaMemset(p->d_count, 0, sizeof(unsigned));
        if (e != cudaSuccess) {
            prof_free(p);
            return cu_fail(err, e, "profiler stamp log");
        }
    }
    memcpy(p->sync0, c->n_sync, sizeof p->sync0);
    install(p, base);
    c->prof = p;
    *ops_out = &p->ops;
    return DSV4_OK;
}

void cu_prof_finish(cuda_ctx *c) {
    cu_prof *p = c->prof;
    if (!p) return;
    if (p->stamps)
        stamps_harvest(p);
    else
        harvest(p);
    static const char *const kind[CU_SYNC_KINDS] = {"read", "write", "sync", "free", "staging"};
    uint64_t syncs = 0;
    char detail[160];
    size_t len = (size_t)snprintf(detail, sizeof detail, "[");
    for (int k = 0; k < CU_SYNC_KINDS; k++) {
        const uint64_t v = c->n_sync[k] - p->sync0[k];
        syncs += v;
        if (len < sizeof detail)
            len += (size_t)snprintf(detail + len, sizeof detail - len, "%s%s %llu", k ? ", " : "", kind[k],
                                    (unsigned long long)v);
    }
    if (len < sizeof detail) snprintf(detail + len, sizeof detail - len, "]");
    dsv4_opprof_totals t;
    memset(&t, 0, sizeof t);
    t.host_wall_ms = p->started ? p->t_last - p->t_first : -1.0;
    t.gpu_span_ms = p->started && !p->gpu_off ? p->span_ms : -1.0;
    t.tokens = p->tokens;
    t.steps = p->steps;
    t.syncs = syncs;
    t.flushes = p->flushes;
    t.profiler_ms = p->self_ms;
    t.sync_detail = detail;
    char title[320];
    if (c->partial)
        snprintf(title, sizeof title, "cuda device %d (%s), layers %u-%u", c->device, c->caps.name,
                 c->layer_first, c->layer_end ? c->layer_end - 1 : 0);
    else
        snprintf(title, sizeof title, "cuda device %d (%s)", c->device, c->caps.name);
    dsv4_opprof_print(&p->agg, &t, title, stderr);
    if (p->lost || p->gpu_off)
        fprintf(stderr, "profiler: %llu GPU samples lost%s\n", (unsigned long long)p->lost,
                p->gpu_off ? " (event error: GPU timing stopped early)" : "");
    fflush(stderr);
    c->prof = NULL;
    prof_free(p);
}
