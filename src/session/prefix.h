/* Prefix reuse for one long-lived session (the server's single live KV state).
 *
 * The cache remembers the tokens the session's KV represents and keeps light checkpoints
 * (engine.h dsv4_session_checkpoint_*) every `interval` positions and at the position before the
 * last token of every synced prompt. dsv4_prefix_sync(tokens) then makes the session hold exactly
 * tokens[0..n) with the logits of position n-1, choosing the cheapest exact way:
 *   extend  - the live tokens are a prefix of the request: evaluate only the suffix;
 *   rewind  - the request shares a prefix with the live tokens but does not extend them (a shorter
 *             exact prefix, or a divergence later on): restore the nearest checkpoint at or before
 *             the shared prefix (and before the last token) and replay from there;
 *   rebuild - nothing reusable (no shared prefix with a checkpoint, or a cold session): reset and
 *             evaluate everything.
 * Every path gives bitwise the logits and state of a fresh evaluation (CPU backend). */
#ifndef DSV4_SESSION_PREFIX_H
#define DSV4_SESSION_PREFIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

typedef enum dsv4_prefix_kind {
    DSV4_PREFIX_EXTEND = 0,
    DSV4_PREFIX_REWIND,
    DSV4_PREFIX_REBUILD
} dsv4_prefix_kind;

#define DSV4_PREFIX_DEFAULT_INTERVAL 64u
#define DSV4_PREFIX_DEFAULT_MAX_CKPT 16u

typedef struct dsv4_prefix_ckpt {
    uint32_t pos;
    uint64_t seq;    /* insertion order */
    bool prompt_end; /* taken before the last token of a synced prompt (weighted up on eviction) */
    void *buf;
} dsv4_prefix_ckpt;

typedef struct dsv4_prefix_cache {
    dsv4_session *s; /* not owned */
    int32_t *live;   /* tokens [0, n_live) are what the KV state represents */
    uint32_t n_live;
    bool damaged; /* an evaluation broke the session: only a checkpoint or reset can repair it */
    uint32_t interval, max_ckpt;
    dsv4_prefix_ckpt *ck;
    uint32_t n_ck;
    uint64_t seq;
    size_t ck_bytes;
    uint64_t n_extend, n_rewind, n_rebuild; /* sync counters */
} dsv4_prefix_cache;

typedef struct dsv4_prefix_result {
    dsv4_prefix_kind kind;
    uint32_t reused;    /* positions not evaluated again (the cached prompt tokens) */
    uint32_t evaluated; /* positions evaluated by this sync */
} dsv4_prefix_result;

/* interval 0 / max_ckpt 0 = the defaults. The session should be fresh (position 0). */
dsv4_status dsv4_prefix_init(dsv4_prefix_cache *c, dsv4_session *s, uint32_t interval, uint32_t max_ckpt,
                             dsv4_error *err);
void dsv4_prefix_free(dsv4_prefix_cache *c);

/* Make the session hold tokens[0..n) (1 <= n <= context) with logits of position n-1. opts may
 * carry a progress callback (done/total count only the positions this call evaluates) and a
 * cancel flag; on cancellation or failure the cache stays consistent with whatever the session
 * kept (the next sync repairs it). res may be NULL. */
dsv4_status dsv4_prefix_sync(dsv4_prefix_cache *c, const int32_t *tokens, uint32_t n,
                             const dsv4_eval_opts *opts, dsv4_prefix_result *res, dsv4_error *err);
/* One decode step on top of the live tokens (checkpointing on the interval). */
dsv4_status dsv4_prefix_decode(dsv4_prefix_cache *c, int32_t token, dsv4_error *err);
/* Forget everything (next sync rebuilds). */
void dsv4_prefix_invalidate(dsv4_prefix_cache *c);
/* Bytes held by checkpoints. */
size_t dsv4_prefix_ckpt_bytes(const dsv4_prefix_cache *c);

#endif
