/* Engine API: a loaded model + a backend + a thread pool, and sessions that own KV state.
 *
 *   dsv4_engine_open(path, &params, &e, &err);
 *   dsv4_session_create(e, n_ctx, &s, &err);
 *   dsv4_session_eval(s, prompt, n, NULL, &err);     // prefill (chunked, layer-major)
 *   const float *logits = dsv4_session_logits(s);     // last position
 *   dsv4_session_decode(s, next_token, &err);          // one token
 *
 * On the CPU backend, decode steps and prefill with any chunk size give bitwise identical logits
 * and state. An engine and its sessions are used from one thread at a time (the engine's thread
 * pool parallelizes inside each op). */
#ifndef DSV4_ENGINE_H
#define DSV4_ENGINE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h" /* dsv4_numerics */
#include "backend/backend_registry.h"
#include "common/status.h"
#include "graph/placement.h"
#include "graph/stats.h"
#include "model/model.h"

typedef struct dsv4_engine dsv4_engine;
typedef struct dsv4_session dsv4_session;

#define DSV4_DEFAULT_CHUNK 2048

typedef struct dsv4_engine_params {
    uint32_t n_threads; /* 0 = number of online CPUs */
    uint32_t chunk;     /* default prefill chunk (tokens); 0 = DSV4_DEFAULT_CHUNK */
    bool fusion;        /* try fused backend ops (DSV4_FUSION=off in the environment disables) */
    /* DSV4_NUMERICS_DS4 (default): ds4's roundings. DSV4_NUMERICS_EXACT: for validation against a
     * float reference only (backend/backend.h says what changes). The environment variable
     * DSV4_NUMERICS=ds4|exact sets the default; any other value makes dsv4_engine_open fail. */
    dsv4_numerics numerics;
    /* "cpu" (default, also when NULL) or "cuda"; the CUDA backend copies every weight to device
     * `device` at open and reports the upload through on_upload (may be NULL). */
    const char *backend;
    int device;
    void (*on_upload)(void *user, uint64_t done_bytes, uint64_t total_bytes);
    void *upload_user;
    /* Tier placement (graph/placement.h), first match wins: `placement` (programmatic), `tiers`
     * (--tiers SPEC), `tier_mem` (--tier-mem SPEC, estimated for sessions of tier_ctx tokens,
     * 0 = 4096); none: one tier on `backend` / `device`. Each tier is its own backend instance
     * holding its layers' weights (CUDA: uploaded only there) and KV state. */
    const dsv4_placement *placement;
    const char *tiers;
    const char *tier_mem;
    uint32_t tier_ctx;
    bool tier_bounce; /* force cross-tier copies through host memory (env DSV4_TIER_BOUNCE=1) */
    /* prefill attention token by token even where the backend offers the batched chunk ops
     * (env DSV4_PREFILL_SERIAL=1; results are bitwise the same, for tests and comparisons) */
    bool prefill_serial;
    /* decode steps: never recorded (DSV4_STEP_RECORD=0), or recorded only when evaluated, not one
     * ahead while the previous one runs (DSV4_STEP_AHEAD=0) */
    bool no_step_record, no_step_ahead;
    /* a prefill also records the decode steps after it while the device runs it (DSV4_STEP_WARM=0:
     * not; the first steps of each recording key then wait for its graph) */
    bool no_step_warm;
    /* KV rows stay F32 in DS4 numerics too (they are F16 there by default: lossless, half the
     * bytes; EXACT always uses F32). Results are bitwise the same; a test switch. */
    bool kv_f32;
    /* Comma-separated fusion names never tried (env DSV4_FUSION_DISABLE) and made to fail at run
     * time (env DSV4_FAULT, a test hook); "all" names every fusion. Unknown names fail the open. */
    const char *fusion_disable;
    const char *fault;
} dsv4_engine_params;

void dsv4_engine_params_default(dsv4_engine_params *p);

/* Load a GGUF (weights stay in the mmap) and create the chosen backend. */
dsv4_status dsv4_engine_open(const char *model_path, const dsv4_engine_params *p, dsv4_engine **out,
                             dsv4_error *err);
/* Same with an already loaded model; the engine takes ownership of m (also on failure). */
dsv4_status dsv4_engine_open_model(dsv4_model *m, const dsv4_engine_params *p, dsv4_engine **out,
                                   dsv4_error *err);
void dsv4_engine_close(dsv4_engine *e);
const dsv4_model *dsv4_engine_model(const dsv4_engine *e);
const dsv4_config *dsv4_engine_config(const dsv4_engine *e);
uint32_t dsv4_engine_threads(const dsv4_engine *e);
/* The backend's name ("cpu", "cuda") and what it runs on / holds (device memory in use). */
const char *dsv4_engine_backend_name(const dsv4_engine *e);
dsv4_status dsv4_engine_device_info(const dsv4_engine *e, dsv4_device_info *out, dsv4_error *err);
/* The placement in use (one tier when none was asked for) and one tier's device report. */
const dsv4_placement *dsv4_engine_placement(const dsv4_engine *e);
dsv4_status dsv4_engine_tier_device_info(const dsv4_engine *e, uint32_t tier, dsv4_device_info *out,
                                         dsv4_error *err);

/* ---- statistics (graph/stats.h): tier switches and bytes per mode, cross-tier copy paths,
 * fused-op selected / fallback / faulted / skipped counts; cumulative since open or reset ---- */
typedef dsv4_exec_stats dsv4_engine_stats;
void dsv4_engine_stats_get(const dsv4_engine *e, dsv4_engine_stats *out);
void dsv4_engine_stats_reset(dsv4_engine *e);
/* Human-readable lines ("tier switches decode=... bytes ...", one per fusion); returns the
 * length written (truncated to n - 1). */
size_t dsv4_engine_stats_format(const dsv4_engine_stats *s, char *buf, size_t n);

/* ---- sessions ---- */
/* A session owns per-layer KV state for n_ctx positions (one contiguous backend buffer). */
dsv4_status dsv4_session_create(dsv4_engine *e, uint32_t n_ctx, dsv4_session **out, dsv4_error *err);
void dsv4_session_free(dsv4_session *s);
/* Back to position 0 with empty state. */
dsv4_status dsv4_session_reset(dsv4_session *s, dsv4_error *err);
uint32_t dsv4_session_pos(const dsv4_session *s); /* tokens evaluated so far */
uint32_t dsv4_session_ctx(const dsv4_session *s); /* context size */
/* Bytes of the session's KV state buffer. */
size_t dsv4_session_state_bytes(const dsv4_session *s);
/* In-memory snapshot: KV state, position and last logits. A snapshot can only be loaded into a
 * session of the same engine and context size; loading it restores the exact state. */
size_t dsv4_session_snapshot_bytes(const dsv4_session *s);
dsv4_status dsv4_session_snapshot_save(const dsv4_session *s, void *buf, size_t bytes, dsv4_error *err);
dsv4_status dsv4_session_snapshot_load(dsv4_session *s, const void *buf, size_t bytes, dsv4_error *err);

typedef struct dsv4_eval_opts {
    uint32_t chunk; /* tokens per layer-major chunk; 0 = the engine default */
    /* Logits of EVERY evaluated position (pos = absolute position), e.g. for teacher-forced dumps.
     * The pointer is valid during the call only. NULL: only the last position's logits are kept. */
    void (*on_logits)(void *user, uint32_t pos, const float *logits, uint32_t n_vocab);
    void *logits_user;
    /* Progress: called after every layer of every chunk with tokens done (a fraction of a chunk
     * is reported as the share of its layers completed) and the total. */
    void (*on_progress)(void *user, uint32_t done, uint32_t total);
    void *progress_user;
    /* Nonzero stops the evaluation before the next layer with DSV4_ERR_CANCELLED. If that happens
     * inside a chunk after its first layer ran, the session is marked broken (evaluating it again
     * fails until dsv4_session_reset); between chunks it stays valid at the last chunk end. */
    const atomic_int *cancel;
    /* Debug: the indexer's selection whenever it selects (a ratio-4 layer with more than top_k
     * compressed rows visible): layer, absolute position and the n selected compressed-row ids in
     * ascending order (valid during the call). NULL: no cost. */
    void (*on_indexer)(void *user, uint32_t layer, uint32_t pos, const uint32_t *rows, uint32_t n);
    void *indexer_user;
} dsv4_eval_opts;

/* Evaluate tokens at positions pos..pos+n-1 (prefill when n > 1). A sequence that does not fit
 * in the remaining context fails with DSV4_ERR_RANGE and leaves the session unchanged. */
dsv4_status dsv4_session_eval(dsv4_session *s, const int32_t *tokens, uint32_t n, const dsv4_eval_opts *opts,
                              dsv4_error *err);
/* One decode step (same as eval with n = 1). */
dsv4_status dsv4_session_decode(dsv4_session *s, int32_t token, dsv4_error *err);
/* Logits (n_vocab floats) of the last evaluated position; NULL before the first eval. */
const float *dsv4_session_logits(const dsv4_session *s);
uint32_t dsv4_session_n_vocab(const dsv4_session *s);
/* True after a cancelled or failed evaluation left the KV state inconsistent. */
bool dsv4_session_broken(const dsv4_session *s);

/* Oracle comparison helper: evaluate tokens[0..n) from position 0 in a fresh session of context
 * n_ctx (0 = n) with the given chunk (0 = default) and write every position's logits to
 * out[pos * n_vocab ...] (n * n_vocab floats). */
dsv4_status dsv4_eval_all_logits(dsv4_engine *e, const int32_t *tokens, uint32_t n, uint32_t n_ctx,
                                 uint32_t chunk, float *out, dsv4_error *err);

/* ---- light checkpoints (prefix rewind, src/session) ----
 * Only what later positions overwrite: every layer's raw window ring and compressor/indexer
 * frontiers, the position and the last logits. Compressed and indexer rows are append-only and
 * their counts derive from the position, so loading a checkpoint taken at position p is exact as
 * long as the tokens [0, p) of the session are still the ones evaluated when it was taken (the
 * session was only extended since, or rewound no further back than p). */
size_t dsv4_session_checkpoint_bytes(const dsv4_session *s);
dsv4_status dsv4_session_checkpoint_save(const dsv4_session *s, void *buf, size_t bytes, dsv4_error *err);
/* The session's position must be >= the checkpoint's (the append-only rows below it exist). */
dsv4_status dsv4_session_checkpoint_load(dsv4_session *s, const void *buf, size_t bytes, dsv4_error *err);
/* Position a checkpoint buffer was taken at (UINT32_MAX if it is not a checkpoint). */
uint32_t dsv4_session_checkpoint_pos(const void *buf, size_t bytes);

#endif
