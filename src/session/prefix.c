/* Prefix reuse: extend / rewind (checkpoint + replay) / rebuild of the live session. */
#include "session/prefix.h"

#include <stdlib.h>
#include <string.h>

dsv4_status dsv4_prefix_init(dsv4_prefix_cache *c, dsv4_session *s, uint32_t interval, uint32_t max_ckpt,
                             dsv4_error *err) {
    memset(c, 0, sizeof *c);
    c->s = s;
    c->interval = interval ? interval : DSV4_PREFIX_DEFAULT_INTERVAL;
    c->max_ckpt = max_ckpt ? max_ckpt : DSV4_PREFIX_DEFAULT_MAX_CKPT;
    c->ck_bytes = dsv4_session_checkpoint_bytes(s);
    c->live = malloc((size_t)dsv4_session_ctx(s) * sizeof *c->live);
    c->ck = calloc(c->max_ckpt, sizeof *c->ck);
    if (!c->live || !c->ck) {
        dsv4_prefix_free(c);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory for the prefix cache");
    }
    c->damaged = dsv4_session_pos(s) != 0;
    return DSV4_OK;
}

void dsv4_prefix_free(dsv4_prefix_cache *c) {
    if (c->ck)
        for (uint32_t i = 0; i < c->n_ck; i++) free(c->ck[i].buf);
    free(c->ck);
    free(c->live);
    memset(c, 0, sizeof *c);
}

size_t dsv4_prefix_ckpt_bytes(const dsv4_prefix_cache *c) { return (size_t)c->n_ck * c->ck_bytes; }

static void drop_ckpt(dsv4_prefix_cache *c, uint32_t i) {
    free(c->ck[i].buf);
    c->ck[i] = c->ck[--c->n_ck];
}

/* Checkpoints above pos describe tokens that are no longer live. */
static void drop_above(dsv4_prefix_cache *c, uint32_t pos) {
    for (uint32_t i = 0; i < c->n_ck;)
        if (c->ck[i].pos > pos)
            drop_ckpt(c, i);
        else
            i++;
}

void dsv4_prefix_invalidate(dsv4_prefix_cache *c) {
    drop_above(c, 0);
    c->n_live = 0;
    c->damaged = true;
}

/* When full, thin out: drop the checkpoint (never the newest) that covers the smallest span
 * since the one below it, prompt-end checkpoints counting four times their span. */
static void evict_one(dsv4_prefix_cache *c) {
    uint32_t victim = UINT32_MAX, top = 0;
    uint64_t best = UINT64_MAX;
    for (uint32_t i = 1; i < c->n_ck; i++)
        if (c->ck[i].pos > c->ck[top].pos) top = i;
    for (uint32_t i = 0; i < c->n_ck; i++) {
        if (i == top) continue;
        uint32_t below = 0;
        for (uint32_t j = 0; j < c->n_ck; j++)
            if (c->ck[j].pos < c->ck[i].pos && c->ck[j].pos > below) below = c->ck[j].pos;
        uint64_t score = (uint64_t)(c->ck[i].pos - below) * (c->ck[i].prompt_end ? 4 : 1);
        if (score < best) best = score, victim = i;
    }
    drop_ckpt(c, victim == UINT32_MAX ? top : victim);
}

/* A checkpoint of the current position (skipped when one exists there). Failure to allocate
 * only loses reuse, never correctness, so it is not an error. */
static void take_ckpt(dsv4_prefix_cache *c, bool prompt_end) {
    const uint32_t pos = dsv4_session_pos(c->s);
    if (pos == 0) return;
    for (uint32_t i = 0; i < c->n_ck; i++)
        if (c->ck[i].pos == pos) {
            c->ck[i].prompt_end |= prompt_end;
            return;
        }
    if (c->n_ck == c->max_ckpt) evict_one(c);
    void *buf = malloc(c->ck_bytes);
    if (!buf) return;
    dsv4_error e;
    if (dsv4_session_checkpoint_save(c->s, buf, c->ck_bytes, &e) != DSV4_OK) {
        free(buf);
        return;
    }
    c->ck[c->n_ck++] = (dsv4_prefix_ckpt){pos, ++c->seq, prompt_end, buf};
}

typedef struct {
    const dsv4_eval_opts *o;
    uint32_t before, total;
} progress_shift;

static void shifted_progress(void *user, uint32_t done, uint32_t total) {
    (void)total;
    progress_shift *p = user;
    p->o->on_progress(p->o->progress_user, p->before + done, p->total);
}

/* Evaluates tokens[from..n) in segments that end on checkpoint positions (multiples of the
 * interval, and n-1 so the same prompt can be rewound to later), recording live tokens as they
 * become part of the state. */
static dsv4_status eval_from(dsv4_prefix_cache *c, const int32_t *tokens, uint32_t from, uint32_t n,
                             const dsv4_eval_opts *opts, uint32_t *evaluated, dsv4_error *err) {
    dsv4_eval_opts o = opts ? *opts : (dsv4_eval_opts){0};
    progress_shift ps = {opts, 0, n - from};
    if (opts && opts->on_progress) {
        o.on_progress = shifted_progress;
        o.progress_user = &ps;
    }
    uint32_t pos = from;
    while (pos < n) {
        uint32_t end = (pos / c->interval + 1) * c->interval;
        if (pos < n - 1 && end > n - 1) end = n - 1;
        if (end > n) end = n;
        ps.before = pos - from;
        dsv4_status st = dsv4_session_eval(c->s, tokens + pos, end - pos, &o, err);
        const uint32_t now = dsv4_session_pos(c->s);
        if (now > pos) memcpy(c->live + pos, tokens + pos, (size_t)(now - pos) * sizeof *tokens);
        *evaluated += now > pos ? now - pos : 0;
        c->n_live = now;
        if (st != DSV4_OK) {
            c->damaged = dsv4_session_broken(c->s);
            return st;
        }
        pos = end;
        if (pos % c->interval == 0 || pos == n - 1) take_ckpt(c, pos == n - 1);
    }
    return DSV4_OK;
}

static dsv4_status full_rebuild(dsv4_prefix_cache *c, const int32_t *tokens, uint32_t n,
                                const dsv4_eval_opts *opts, dsv4_prefix_result *r, dsv4_error *err) {
    drop_above(c, 0);
    c->n_live = 0;
    dsv4_status st = dsv4_session_reset(c->s, err);
    if (st != DSV4_OK) return st;
    c->damaged = false;
    r->kind = DSV4_PREFIX_REBUILD;
    r->reused = 0;
    c->n_rebuild++;
    return eval_from(c, tokens, 0, n, opts, &r->evaluated, err);
}

dsv4_status dsv4_prefix_sync(dsv4_prefix_cache *c, const int32_t *tokens, uint32_t n,
                             const dsv4_eval_opts *opts, dsv4_prefix_result *res, dsv4_error *err) {
    dsv4_prefix_result tmp;
    dsv4_prefix_result *r = res ? res : &tmp;
    memset(r, 0, sizeof *r);
    const uint32_t ctx = dsv4_session_ctx(c->s);
    if (n == 0 || n > ctx)
        return dsv4_fail(err, DSV4_ERR_RANGE, "prompt of %u tokens does not fit the context of %u tokens", n,
                         ctx);
    uint32_t lcp = 0;
    const uint32_t m = n < c->n_live ? n : c->n_live;
    while (lcp < m && c->live[lcp] == tokens[lcp]) lcp++;

    if (!c->damaged && c->n_live > 0 && lcp == c->n_live && dsv4_session_logits(c->s)) {
        r->kind = n > c->n_live ? DSV4_PREFIX_EXTEND : DSV4_PREFIX_REWIND; /* equal: nothing to do */
        r->reused = c->n_live;
        if (r->kind == DSV4_PREFIX_EXTEND)
            c->n_extend++;
        else
            c->n_rewind++;
        return eval_from(c, tokens, c->n_live, n, opts, &r->evaluated, err);
    }
    /* The state must go back: the shared prefix stays valid for checkpoints at or below it. */
    drop_above(c, lcp);
    uint32_t best = UINT32_MAX;
    for (uint32_t i = 0; i < c->n_ck; i++)
        if (c->ck[i].pos <= n - 1 && (best == UINT32_MAX || c->ck[i].pos > c->ck[best].pos)) best = i;
    if (best == UINT32_MAX) return full_rebuild(c, tokens, n, opts, r, err);
    dsv4_status st = dsv4_session_checkpoint_load(c->s, c->ck[best].buf, c->ck_bytes, err);
    if (st != DSV4_OK) {
        dsv4_prefix_invalidate(c);
        return full_rebuild(c, tokens, n, opts, r, err);
    }
    c->damaged = false;
    c->n_live = c->ck[best].pos;
    c->ck[best].seq = ++c->seq; /* recently useful: evict later */
    r->kind = DSV4_PREFIX_REWIND;
    r->reused = c->n_live;
    c->n_rewind++;
    return eval_from(c, tokens, c->n_live, n, opts, &r->evaluated, err);
}

dsv4_status dsv4_prefix_decode(dsv4_prefix_cache *c, int32_t token, dsv4_error *err) {
    if (c->damaged)
        return dsv4_fail(err, DSV4_ERR_INVALID, "the live session was interrupted; sync a prompt first");
    const uint32_t pos = dsv4_session_pos(c->s);
    dsv4_status st = dsv4_session_decode(c->s, token, err);
    if (st != DSV4_OK) {
        c->damaged = dsv4_session_broken(c->s);
        return st;
    }
    c->live[pos] = token;
    c->n_live = pos + 1;
    if (c->n_live % c->interval == 0) take_ckpt(c, false);
    return DSV4_OK;
}
