/* Engine and sessions: model + backend + graph, per-session KV state and logits. */
#include "engine/engine.h"

#include <stdlib.h>
#include <string.h>

#include <stdio.h>

#include "backend/backend.h"
#include "graph/graph.h"

struct dsv4_engine {
    dsv4_model *model;
    dsv4_backend backend;                    /* tier 0 */
    dsv4_backend tier_b[DSV4_MAX_TIERS - 1]; /* tiers 1.. */
    dsv4_placement place;
    dsv4_graph *graph;
    uint32_t chunk;
};

static dsv4_backend *tier_backend(dsv4_engine *e, uint32_t t) {
    return t == 0 ? &e->backend : &e->tier_b[t - 1];
}

struct dsv4_session {
    dsv4_engine *e;
    dsv4_kv_state kv;
    float *logits; /* n_vocab */
    bool has_logits;
    bool broken;
};

void dsv4_engine_params_default(dsv4_engine_params *p) {
    memset(p, 0, sizeof(*p));
    p->chunk = DSV4_DEFAULT_CHUNK;
    const char *f = getenv("DSV4_FUSION");
    p->fusion = !(f && strcmp(f, "off") == 0);
    const char *nm = getenv("DSV4_NUMERICS");
    p->numerics = nm && strcmp(nm, "exact") == 0 ? DSV4_NUMERICS_EXACT : DSV4_NUMERICS_DS4;
    p->fusion_disable = getenv("DSV4_FUSION_DISABLE");
    p->fault = getenv("DSV4_FAULT");
    const char *tb = getenv("DSV4_TIER_BOUNCE");
    p->tier_bounce = tb && strcmp(tb, "1") == 0;
    const char *ps = getenv("DSV4_PREFILL_SERIAL");
    p->prefill_serial = ps && strcmp(ps, "1") == 0;
    const char *sr = getenv("DSV4_STEP_RECORD"), *sa = getenv("DSV4_STEP_AHEAD");
    p->no_step_record = sr && strcmp(sr, "0") == 0;
    p->no_step_ahead = sa && strcmp(sa, "0") == 0;
    const char *sw = getenv("DSV4_STEP_WARM");
    p->no_step_warm = sw && strcmp(sw, "0") == 0;
    const char *kf = getenv("DSV4_KV_F32");
    p->kv_f32 = kf && strcmp(kf, "1") == 0;
}

/* The placement the parameters ask for (needs the bound model for --tier-mem). */
static dsv4_status resolve_placement(const dsv4_model *m, const dsv4_engine_params *p, dsv4_placement *out,
                                     dsv4_error *err) {
    const uint32_t nl = m->cfg.n_layer;
    if (p->placement) {
        *out = *p->placement;
        return dsv4_placement_check(out, nl, err);
    }
    if (p->tiers && *p->tiers) return dsv4_placement_parse(p->tiers, nl, out, err);
    if (p->tier_mem && *p->tier_mem) {
        if (nl > DSV4_PLACE_MAX_LAYERS)
            return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "placement: %u layers (at most %u)", nl,
                             DSV4_PLACE_MAX_LAYERS);
        uint64_t eb[DSV4_PLACE_MAX_LAYERS + 2];
        dsv4_status st = dsv4_placement_entry_bytes(m, p->tier_ctx ? p->tier_ctx : 4096,
                                                    dsv4_kv_row_type(p->numerics, p->kv_f32), eb, err);
        if (st != DSV4_OK) return st;
        return dsv4_placement_fill(p->tier_mem, eb, nl, out, err);
    }
    return dsv4_placement_single(nl, p->backend ? p->backend : "cpu", p->device, out, err);
}

dsv4_status dsv4_engine_open_model(dsv4_model *m, const dsv4_engine_params *p, dsv4_engine **out,
                                   dsv4_error *err) {
    *out = NULL;
    dsv4_engine_params def;
    if (!p) {
        dsv4_engine_params_default(&def);
        p = &def;
    }
    const char *nm = getenv("DSV4_NUMERICS");
    if (nm && strcmp(nm, "ds4") != 0 && strcmp(nm, "exact") != 0) {
        dsv4_model_free(m);
        return dsv4_fail(err, DSV4_ERR_INVALID, "DSV4_NUMERICS='%s' is neither ds4 nor exact", nm);
    }
    dsv4_engine *e = calloc(1, sizeof(*e));
    if (!e) {
        dsv4_model_free(m);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory creating the engine");
    }
    e->model = m;
    e->chunk = p->chunk ? p->chunk : DSV4_DEFAULT_CHUNK;
    dsv4_graph_params gp = {0};
    gp.chunk_cap = 1; /* the workspace starts small and grows to the largest chunk evaluated */
    gp.fusion = p->fusion;
    gp.force_bounce = p->tier_bounce;
    gp.prefill_serial = p->prefill_serial;
    gp.no_step_record = p->no_step_record;
    gp.no_step_ahead = p->no_step_ahead;
    gp.no_step_warm = p->no_step_warm;
    gp.numerics = p->numerics;
    gp.kv_f32 = p->kv_f32;
    dsv4_status st = resolve_placement(m, p, &e->place, err);
    if (st == DSV4_OK)
        st = dsv4_fusion_mask(p->fusion_disable, "DSV4_FUSION_DISABLE", &gp.fusion_disable, err);
    if (st == DSV4_OK) st = dsv4_fusion_mask(p->fault, "DSV4_FAULT", &gp.fusion_fault, err);
    const bool multi = e->place.n_tiers > 1;
    for (uint32_t t = 0; st == DSV4_OK && t < e->place.n_tiers; t++) {
        uint32_t a, b;
        dsv4_placement_layers(&e->place, t, &a, &b);
        const dsv4_backend_params bp = {.name = e->place.tier[t].backend,
                                        .device = e->place.tier[t].device,
                                        .n_threads = p->n_threads,
                                        .numerics = p->numerics,
                                        .model = m,
                                        .on_upload = p->on_upload,
                                        .upload_user = p->upload_user,
                                        .partial = multi,
                                        .layer_first = a,
                                        .layer_end = b,
                                        .with_embed = e->place.entry[0] == t,
                                        .with_head = e->place.entry[m->cfg.n_layer + 1] == t,
                                        .prefill_chunk = e->chunk};
        st = dsv4_backend_create(&bp, tier_backend(e, t), err);
        if (st != DSV4_OK && (multi || p->tiers || p->tier_mem))
            dsv4_error_prefix(err, "tier %u (%s%d): ", t, bp.name, bp.device);
        gp.tiers[t] = tier_backend(e, t);
    }
    gp.placement = &e->place;
    if (st == DSV4_OK) st = dsv4_graph_create_ex(m, &gp, &e->graph, err);
    if (st != DSV4_OK) {
        dsv4_engine_close(e);
        return st;
    }
    *out = e;
    return DSV4_OK;
}

dsv4_status dsv4_engine_open(const char *path, const dsv4_engine_params *p, dsv4_engine **out,
                             dsv4_error *err) {
    *out = NULL;
    gguf_file *f = NULL;
    dsv4_status st = gguf_open(path, &f, err);
    if (st != DSV4_OK) return st;
    /* The CPU backend multiplies each layer's experts with that layer's types, so files with
     * per-layer expert types (ds4's gguf-tools/mixed) are fine. */
    dsv4_model_bind_opts bo = dsv4_model_bind_opts_default();
    bo.allow_mixed_experts = true;
    dsv4_model *m = NULL;
    st = dsv4_model_bind_ex(f, &bo, &m, err);
    if (st != DSV4_OK) return st;
    return dsv4_engine_open_model(m, p, out, err);
}

void dsv4_engine_close(dsv4_engine *e) {
    if (!e) return;
    dsv4_graph_free(e->graph);
    dsv4_backend_destroy(&e->backend);
    for (uint32_t t = 0; t + 1 < DSV4_MAX_TIERS; t++) dsv4_backend_destroy(&e->tier_b[t]);
    dsv4_model_free(e->model);
    free(e);
}

const dsv4_model *dsv4_engine_model(const dsv4_engine *e) { return e->model; }
const dsv4_config *dsv4_engine_config(const dsv4_engine *e) { return &e->model->cfg; }
uint32_t dsv4_engine_threads(const dsv4_engine *e) { return dsv4_backend_cpu_threads(&e->backend); }
const char *dsv4_engine_backend_name(const dsv4_engine *e) { return e->backend.ops->name; }
dsv4_status dsv4_engine_device_info(const dsv4_engine *e, dsv4_device_info *out, dsv4_error *err) {
    return dsv4_backend_device_info(&e->backend, out, err);
}
const dsv4_placement *dsv4_engine_placement(const dsv4_engine *e) { return &e->place; }
dsv4_status dsv4_engine_tier_device_info(const dsv4_engine *e, uint32_t tier, dsv4_device_info *out,
                                         dsv4_error *err) {
    if (tier >= e->place.n_tiers)
        return dsv4_fail(err, DSV4_ERR_RANGE, "tier %u does not exist (%u tiers)", tier, e->place.n_tiers);
    return dsv4_backend_device_info(tier == 0 ? &e->backend : &e->tier_b[tier - 1], out, err);
}

void dsv4_engine_stats_get(const dsv4_engine *e, dsv4_engine_stats *out) { dsv4_graph_stats(e->graph, out); }
void dsv4_engine_stats_reset(dsv4_engine *e) { dsv4_graph_stats_reset(e->graph); }

size_t dsv4_engine_stats_format(const dsv4_engine_stats *s, char *buf, size_t n) {
    size_t o = 0;
#define OUT(...)                                                                                             \
    do {                                                                                                     \
        int k_ = snprintf(buf + o, o < n ? n - o : 0, __VA_ARGS__);                                          \
        if (k_ > 0) o += (size_t)k_;                                                                         \
    } while (0)
    if (n) buf[0] = 0;
    OUT("tier switches: decode %llu (%llu bytes), batch %llu (%llu bytes), nocopy %llu (%llu bytes)\n",
        (unsigned long long)s->tier_switches[DSV4_TIER_DECODE],
        (unsigned long long)s->tier_bytes[DSV4_TIER_DECODE],
        (unsigned long long)s->tier_switches[DSV4_TIER_BATCH],
        (unsigned long long)s->tier_bytes[DSV4_TIER_BATCH],
        (unsigned long long)s->tier_switches[DSV4_TIER_NOCOPY],
        (unsigned long long)s->tier_bytes[DSV4_TIER_NOCOPY]);
    OUT("tier copies:");
    for (int p = 0; p < DSV4_XCOPY_PATHS; p++)
        OUT(" %s %llu", dsv4_xcopy_path_name((dsv4_xcopy_path)p), (unsigned long long)s->xcopy[p]);
    OUT("\n");
    for (int f = 0; f < DSV4_FUSED_COUNT; f++)
        OUT("fusion %s: selected %llu, fallback %llu, faulted %llu, skipped %llu\n",
            dsv4_fusion_name((dsv4_fused_op)f), (unsigned long long)s->fusion[f].selected,
            (unsigned long long)s->fusion[f].fallback, (unsigned long long)s->fusion[f].faulted,
            (unsigned long long)s->fusion[f].skipped);
    OUT("decode steps: recorded %llu, unrecorded after a failed recording %llu\n",
        (unsigned long long)s->steps_recorded, (unsigned long long)s->steps_unrecorded);
    OUT("decode step host time: recording ahead %.1f ms, waiting for logits %.1f ms\n",
        s->step_prepare_us * 1e-3, s->step_wait_us * 1e-3);
    OUT("attention: batched layer chunks %llu, per-token layer steps %llu\n",
        (unsigned long long)s->attn_chunks, (unsigned long long)s->attn_serial_tokens);
#undef OUT
    return o < n ? o : (n ? n - 1 : 0);
}

/* Device scratch a prefill chunk of n tokens needs beyond the workspace and the KV state (CUDA:
 * the routed experts' gate/up/mid/down intermediates of n x k (token, expert) pairs, the indexer's
 * score buffer (at most 128 MiB) and a margin for activations), an estimate from the shapes. */
static uint64_t device_scratch_estimate(const dsv4_config *c, uint32_t n, uint32_t n_ctx) {
    const uint64_t pairs = (uint64_t)n * c->n_expert_used;
    const uint64_t moe = pairs * (3ull * c->n_ff_exp + c->n_embd) * sizeof(float);
    uint64_t idx = (uint64_t)n * (n_ctx / 4 + 2) * sizeof(float);
    if (idx > (128ull << 20)) idx = 128ull << 20;
    return moe + idx + (256ull << 20);
}

/* A context that cannot run is refused when the session is created, not mid-generation: on device
 * tiers the prefill workspace is allocated now (the KV state already is), and each device must
 * still have room for the scratch estimate above. */
static dsv4_status session_device_check(dsv4_engine *e, uint32_t n_ctx, uint64_t kv_bytes, dsv4_error *err) {
    bool device = false;
    for (uint32_t t = 0; t < e->place.n_tiers; t++) {
        dsv4_device_info di;
        if (dsv4_engine_tier_device_info(e, t, &di, err) != DSV4_OK) return DSV4_ERR_INVALID;
        device |= di.total_mem > 0;
    }
    if (!device) return DSV4_OK;
    const uint32_t chunk = e->chunk < n_ctx ? e->chunk : n_ctx;
    dsv4_status st = dsv4_graph_reserve(e->graph, chunk, err);
    if (st != DSV4_OK) {
        dsv4_error_prefix(err, "context of %u tokens (KV state %llu bytes): ", n_ctx,
                          (unsigned long long)kv_bytes);
        return st;
    }
    const uint64_t need = device_scratch_estimate(&e->model->cfg, chunk, n_ctx);
    for (uint32_t t = 0; t < e->place.n_tiers; t++) {
        dsv4_device_info di;
        if (dsv4_engine_tier_device_info(e, t, &di, err) != DSV4_OK) return DSV4_ERR_INVALID;
        if (di.total_mem == 0 || di.free_mem + di.scratch_bytes >= need) continue;
        return dsv4_fail(
            err, DSV4_ERR_NOMEM,
            "context of %u tokens does not fit on %s (tier %u): after the KV state (%llu bytes) "
            "and the prefill workspace, prefill chunks of %u tokens need about %llu bytes of scratch "
            "but %llu bytes are free; use a smaller --ctx or --chunk",
            n_ctx, di.name, t, (unsigned long long)kv_bytes, chunk, (unsigned long long)need,
            (unsigned long long)(di.free_mem + di.scratch_bytes));
    }
    return DSV4_OK;
}

dsv4_status dsv4_session_create(dsv4_engine *e, uint32_t n_ctx, dsv4_session **out, dsv4_error *err) {
    *out = NULL;
    if (n_ctx == 0) return dsv4_fail(err, DSV4_ERR_INVALID, "session context size must be at least 1 token");
    dsv4_session *s = calloc(1, sizeof(*s));
    if (!s) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory creating a session");
    s->e = e;
    s->logits = malloc((size_t)e->model->cfg.n_vocab * sizeof(float));
    if (!s->logits) {
        free(s);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory for the session logits");
    }
    dsv4_status st = dsv4_kv_state_init(e->graph, n_ctx, &s->kv, err);
    if (st == DSV4_OK) {
        st = session_device_check(e, n_ctx, s->kv.layout.n_bytes, err);
        if (st != DSV4_OK) dsv4_kv_state_free(e->graph, &s->kv);
    }
    if (st != DSV4_OK) {
        free(s->logits);
        free(s);
        return st;
    }
    dsv4_graph_warm(e->graph, &s->kv); /* the decode step graphs, while the device is idle */
    *out = s;
    return DSV4_OK;
}

void dsv4_session_free(dsv4_session *s) {
    if (!s) return;
    dsv4_kv_state_free(s->e->graph, &s->kv);
    free(s->logits);
    free(s);
}

dsv4_status dsv4_session_reset(dsv4_session *s, dsv4_error *err) {
    s->has_logits = false;
    s->broken = false;
    dsv4_status st = dsv4_kv_state_reset(s->e->graph, &s->kv, err);
    if (st != DSV4_OK) s->broken = true;
    return st;
}

uint32_t dsv4_session_pos(const dsv4_session *s) { return s->kv.pos; }
uint32_t dsv4_session_ctx(const dsv4_session *s) { return s->kv.layout.n_ctx; }
size_t dsv4_session_state_bytes(const dsv4_session *s) { return (size_t)s->kv.layout.n_bytes; }
const float *dsv4_session_logits(const dsv4_session *s) { return s->has_logits ? s->logits : NULL; }
uint32_t dsv4_session_n_vocab(const dsv4_session *s) { return s->e->model->cfg.n_vocab; }
bool dsv4_session_broken(const dsv4_session *s) { return s->broken; }

typedef struct {
    dsv4_session *s;
    const dsv4_eval_opts *o;
    uint32_t chunk_start; /* absolute position of chunk row 0 */
    uint32_t chunk_n, done_before, total;
    uint32_t last_row;
} eval_cb;

static void cb_logits(void *user, uint32_t row, const float *logits, uint32_t n_vocab) {
    eval_cb *c = user;
    if (c->o && c->o->on_logits) c->o->on_logits(c->o->logits_user, c->chunk_start + row, logits, n_vocab);
    if (row == c->last_row) {
        memcpy(c->s->logits, logits, (size_t)n_vocab * sizeof(float));
        c->s->has_logits = true;
    }
}

static void cb_indexer(void *user, uint32_t il, uint32_t pos, const uint32_t *rows, uint32_t n) {
    eval_cb *c = user;
    c->o->on_indexer(c->o->indexer_user, il, pos, rows, n);
}

static void cb_layer(void *user, uint32_t il, uint32_t n_layer) {
    eval_cb *c = user;
    if (!c->o || !c->o->on_progress) return;
    const uint64_t part = (uint64_t)c->chunk_n * (il + 1) / n_layer;
    c->o->on_progress(c->o->progress_user, c->done_before + (uint32_t)part, c->total);
}

dsv4_status dsv4_session_eval(dsv4_session *s, const int32_t *tokens, uint32_t n, const dsv4_eval_opts *o,
                              dsv4_error *err) {
    if (s->broken)
        return dsv4_fail(err, DSV4_ERR_INVALID,
                         "session state is inconsistent after an interrupted evaluation; reset it first");
    if (n == 0) return DSV4_OK;
    if (!tokens) return dsv4_fail(err, DSV4_ERR_INVALID, "eval: NULL token array");
    const uint32_t pos = s->kv.pos, ctx = s->kv.layout.n_ctx;
    if ((uint64_t)pos + n > ctx)
        return dsv4_fail(
            err, DSV4_ERR_RANGE,
            "prompt too long: %u tokens at position %u need %llu positions, the session context is %u", n,
            pos, (unsigned long long)pos + n, ctx);
    const uint32_t vocab = s->e->model->cfg.n_vocab;
    for (uint32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= vocab)
            return dsv4_fail(err, DSV4_ERR_RANGE, "token %d at index %u is outside the vocabulary of %u",
                             tokens[i], i, vocab);
    const uint32_t chunk = o && o->chunk ? o->chunk : s->e->chunk;
    eval_cb cb = {s, o, 0, 0, 0, n, 0};
    dsv4_graph_hooks h = {0};
    h.cancel = o ? o->cancel : NULL;
    h.on_layer = cb_layer;
    h.on_logits = cb_logits;
    h.on_indexer = o && o->on_indexer ? cb_indexer : NULL;
    h.user = &cb;
    h.all_logits = o && o->on_logits;
    for (uint32_t done = 0; done < n;) {
        const uint32_t m = n - done < chunk ? n - done : chunk;
        cb.chunk_start = s->kv.pos;
        cb.chunk_n = m;
        cb.done_before = done;
        cb.last_row = m - 1;
        bool damaged = false;
        dsv4_status st = dsv4_graph_eval(s->e->graph, &s->kv, tokens + done, m, &h, &damaged, err);
        if (st != DSV4_OK) {
            if (damaged) s->broken = true;
            if (done > 0 || damaged) dsv4_error_prefix(err, "after %u of %u tokens: ", done, n);
            return st;
        }
        done += m;
    }
    return DSV4_OK;
}

dsv4_status dsv4_session_decode(dsv4_session *s, int32_t token, dsv4_error *err) {
    return dsv4_session_eval(s, &token, 1, NULL, err);
}

/* ---- snapshots ---- */

/* Version 2 ("DSv5"): the state as layout bytes, rows of kv_type. Version 1 ("DSv4") held every
 * row as f32 and is refused. */
#define SNAP_MAGIC_V1 0x34765344u /* "DSv4" */
#define SNAP_MAGIC 0x35765344u    /* "DSv5" */

typedef struct {
    uint32_t magic, pos, n_ctx, has_logits;
    uint64_t n_bytes, n_vocab;
    uint32_t kv_type, pad;
} snap_header;

size_t dsv4_session_snapshot_bytes(const dsv4_session *s) {
    return sizeof(snap_header) + dsv4_session_state_bytes(s) +
           (size_t)s->e->model->cfg.n_vocab * sizeof(float);
}

dsv4_status dsv4_session_snapshot_save(const dsv4_session *s, void *buf, size_t bytes, dsv4_error *err) {
    if (bytes < dsv4_session_snapshot_bytes(s))
        return dsv4_fail(err, DSV4_ERR_INVALID, "snapshot buffer of %zu bytes, need %zu", bytes,
                         dsv4_session_snapshot_bytes(s));
    if (s->broken)
        return dsv4_fail(err, DSV4_ERR_INVALID,
                         "cannot snapshot a session left inconsistent by an interrupted evaluation");
    snap_header h = {SNAP_MAGIC,
                     s->kv.pos,
                     s->kv.layout.n_ctx,
                     s->has_logits,
                     s->kv.layout.n_bytes,
                     s->e->model->cfg.n_vocab,
                     s->kv.layout.row_type,
                     0};
    uint8_t *p = buf;
    memcpy(p, &h, sizeof h);
    dsv4_status st = dsv4_kv_state_read(s->e->graph, &s->kv, 0, s->kv.layout.n_bytes, p + sizeof h, err);
    if (st != DSV4_OK) return st;
    memcpy(p + sizeof h + dsv4_session_state_bytes(s), s->logits, (size_t)h.n_vocab * sizeof(float));
    return DSV4_OK;
}

dsv4_status dsv4_session_snapshot_load(dsv4_session *s, const void *buf, size_t bytes, dsv4_error *err) {
    snap_header h;
    if (bytes < sizeof(uint32_t))
        return dsv4_fail(err, DSV4_ERR_FORMAT, "snapshot of %zu bytes is truncated", bytes);
    memcpy(&h.magic, buf, sizeof h.magic);
    if (h.magic == SNAP_MAGIC_V1)
        return dsv4_fail(
            err, DSV4_ERR_FORMAT,
            "snapshot is in the old version 1 format (f32 KV rows); this build reads version 2 only");
    if (h.magic != SNAP_MAGIC) return dsv4_fail(err, DSV4_ERR_FORMAT, "not a dsv4 session snapshot");
    if (bytes < sizeof h) return dsv4_fail(err, DSV4_ERR_FORMAT, "snapshot of %zu bytes is truncated", bytes);
    memcpy(&h, buf, sizeof h);
    if (h.n_ctx != s->kv.layout.n_ctx || h.n_bytes != s->kv.layout.n_bytes ||
        h.kv_type != s->kv.layout.row_type || h.n_vocab != s->e->model->cfg.n_vocab || h.pos > h.n_ctx ||
        bytes < dsv4_session_snapshot_bytes(s))
        return dsv4_fail(err, DSV4_ERR_FORMAT,
                         "snapshot does not match this session (context %u, %llu state bytes, %s rows)",
                         s->kv.layout.n_ctx, (unsigned long long)s->kv.layout.n_bytes,
                         dsv4_type_name(s->kv.layout.row_type));
    const uint8_t *p = buf;
    dsv4_status st = dsv4_kv_state_write(s->e->graph, &s->kv, 0, s->kv.layout.n_bytes, p + sizeof h, err);
    if (st != DSV4_OK) {
        s->broken = true;
        return st;
    }
    memcpy(s->logits, p + sizeof h + dsv4_session_state_bytes(s), (size_t)h.n_vocab * sizeof(float));
    s->kv.pos = h.pos;
    s->has_logits = h.has_logits != 0;
    s->broken = false;
    return DSV4_OK;
}

/* ---- oracle helper ---- */

typedef struct {
    float *out;
    uint32_t n;
} all_logits_ctx;

static void store_logits(void *user, uint32_t pos, const float *logits, uint32_t n_vocab) {
    all_logits_ctx *c = user;
    if (pos < c->n) memcpy(c->out + (uint64_t)pos * n_vocab, logits, (size_t)n_vocab * sizeof(float));
}

dsv4_status dsv4_eval_all_logits(dsv4_engine *e, const int32_t *tokens, uint32_t n, uint32_t n_ctx,
                                 uint32_t chunk, float *out, dsv4_error *err) {
    dsv4_session *s = NULL;
    dsv4_status st = dsv4_session_create(e, n_ctx ? n_ctx : (n ? n : 1), &s, err);
    if (st != DSV4_OK) return st;
    all_logits_ctx c = {out, n};
    dsv4_eval_opts o = {0};
    o.chunk = chunk;
    o.on_logits = store_logits;
    o.logits_user = &c;
    st = dsv4_session_eval(s, tokens, n, &o, err);
    dsv4_session_free(s);
    return st;
}

/* ---- light checkpoints ---- */

/* Version 2 ("DsC2"): regions as layout bytes, rows of kv_type. Version 1 ("DsCk") is refused. */
#define CKPT_MAGIC_V1 0x6b437344u /* "DsCk" */
#define CKPT_MAGIC 0x32437344u    /* "DsC2" */

typedef struct {
    uint32_t magic, pos, n_ctx, has_logits;
    uint64_t n_bytes, n_vocab, region_bytes;
    uint32_t kv_type, pad;
} ckpt_header;

/* The state regions a later position can overwrite, in layout order (byte offset, bytes): per
 * layer the raw ring, then the compressor frontier (kv + score) and the indexer frontier
 * (kv + score). */
static uint64_t ckpt_regions(const dsv4_session *s, uint64_t (*reg)[2], uint32_t cap) {
    const dsv4_kv_layout *l = &s->kv.layout;
    const uint64_t dh = s->e->model->cfg.head_dim;
    uint32_t n = 0;
    uint64_t total = 0;
    for (uint32_t il = 0; il < l->n_layer; il++) {
        const dsv4_kv_layer *ly = &l->layers[il];
        uint64_t r[3][2] = {{ly->raw, (uint64_t)l->raw_cap * dh * l->row_esize}, {0, 0}, {0, 0}};
        if (ly->comp_kv != DSV4_KV_ABSENT) r[1][0] = ly->comp_kv, r[1][1] = 2 * (ly->comp_sc - ly->comp_kv);
        if (ly->idx_kv != DSV4_KV_ABSENT) r[2][0] = ly->idx_kv, r[2][1] = 2 * (ly->idx_sc - ly->idx_kv);
        for (int k = 0; k < 3; k++) {
            if (!r[k][1]) continue;
            if (reg && n < cap) reg[n][0] = r[k][0], reg[n][1] = r[k][1];
            n++;
            total += r[k][1];
        }
    }
    return total;
}

size_t dsv4_session_checkpoint_bytes(const dsv4_session *s) {
    return sizeof(ckpt_header) + (size_t)ckpt_regions(s, NULL, 0) +
           (size_t)s->e->model->cfg.n_vocab * sizeof(float);
}

uint32_t dsv4_session_checkpoint_pos(const void *buf, size_t bytes) {
    ckpt_header h;
    if (!buf || bytes < sizeof h) return UINT32_MAX;
    memcpy(&h, buf, sizeof h);
    return h.magic == CKPT_MAGIC ? h.pos : UINT32_MAX;
}

/* Copies every region between the state buffer and the packed host buffer (save: to host). */
static dsv4_status ckpt_copy(const dsv4_session *s, uint8_t *host, bool save, dsv4_error *err) {
    const uint32_t cap = s->kv.layout.n_layer * 3;
    uint64_t(*reg)[2] = malloc((size_t)cap * sizeof *reg);
    if (!reg) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory for the checkpoint region list");
    ckpt_regions(s, reg, cap);
    uint32_t n = 0;
    for (uint32_t il = 0; il < s->kv.layout.n_layer; il++) {
        const dsv4_kv_layer *ly = &s->kv.layout.layers[il];
        n += 1 + (ly->comp_kv != DSV4_KV_ABSENT) + (ly->idx_kv != DSV4_KV_ABSENT);
    }
    dsv4_status st = DSV4_OK;
    dsv4_session *ms = (dsv4_session *)s; /* save only reads the state */
    for (uint32_t i = 0; i < n && st == DSV4_OK; i++) {
        st = save ? dsv4_kv_state_read(s->e->graph, &s->kv, reg[i][0], reg[i][1], host, err)
                  : dsv4_kv_state_write(s->e->graph, &ms->kv, reg[i][0], reg[i][1], host, err);
        host += reg[i][1];
    }
    free(reg);
    return st;
}

dsv4_status dsv4_session_checkpoint_save(const dsv4_session *s, void *buf, size_t bytes, dsv4_error *err) {
    const size_t need = dsv4_session_checkpoint_bytes(s);
    if (bytes < need)
        return dsv4_fail(err, DSV4_ERR_INVALID, "checkpoint buffer of %zu bytes, need %zu", bytes, need);
    if (s->broken)
        return dsv4_fail(err, DSV4_ERR_INVALID,
                         "cannot checkpoint a session left inconsistent by an interrupted evaluation");
    ckpt_header h = {CKPT_MAGIC,
                     s->kv.pos,
                     s->kv.layout.n_ctx,
                     s->has_logits,
                     s->kv.layout.n_bytes,
                     s->e->model->cfg.n_vocab,
                     ckpt_regions(s, NULL, 0),
                     s->kv.layout.row_type,
                     0};
    uint8_t *p = buf;
    memcpy(p, &h, sizeof h);
    dsv4_status st = ckpt_copy(s, p + sizeof h, true, err);
    if (st != DSV4_OK) return st;
    memcpy(p + need - (size_t)h.n_vocab * sizeof(float), s->logits, (size_t)h.n_vocab * sizeof(float));
    return DSV4_OK;
}

dsv4_status dsv4_session_checkpoint_load(dsv4_session *s, const void *buf, size_t bytes, dsv4_error *err) {
    ckpt_header h;
    const size_t need = dsv4_session_checkpoint_bytes(s);
    if (bytes >= sizeof h.magic) {
        memcpy(&h.magic, buf, sizeof h.magic);
        if (h.magic == CKPT_MAGIC_V1)
            return dsv4_fail(err, DSV4_ERR_FORMAT,
                             "checkpoint is in the old version 1 format (f32 KV rows); this build reads "
                             "version 2 only");
    }
    if (bytes < sizeof h || bytes < need)
        return dsv4_fail(err, DSV4_ERR_FORMAT, "checkpoint of %zu bytes is truncated (need %zu)", bytes,
                         need);
    memcpy(&h, buf, sizeof h);
    if (h.magic != CKPT_MAGIC || h.n_ctx != s->kv.layout.n_ctx || h.n_bytes != s->kv.layout.n_bytes ||
        h.kv_type != s->kv.layout.row_type || h.n_vocab != s->e->model->cfg.n_vocab ||
        h.region_bytes != ckpt_regions(s, NULL, 0) || h.pos > h.n_ctx)
        return dsv4_fail(err, DSV4_ERR_FORMAT, "checkpoint does not match this session (context %u)",
                         s->kv.layout.n_ctx);
    if (!s->broken && h.pos > s->kv.pos)
        return dsv4_fail(err, DSV4_ERR_INVALID,
                         "checkpoint at position %u is ahead of the session (position %u)", h.pos, s->kv.pos);
    const uint8_t *p = buf;
    dsv4_status st = ckpt_copy(s, (uint8_t *)p + sizeof h, false, err);
    if (st != DSV4_OK) {
        s->broken = true;
        return st;
    }
    memcpy(s->logits, p + need - (size_t)h.n_vocab * sizeof(float), (size_t)h.n_vocab * sizeof(float));
    s->kv.pos = h.pos;
    s->has_logits = h.has_logits != 0;
    s->broken = false;
    return DSV4_OK;
}
