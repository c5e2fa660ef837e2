/* One job on the engine worker: prefix sync (extend / rewind / rebuild), then sampling with the
 * reasoning/content split, stop strings with hold-back, DSML tool-call parsing (greedy inside
 * DSML structure) and per-token streaming of the API's events. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/constrain.h"
#include "server/dsml_out.h"
#include "server/out.h"
#include "server/srv.h"
#include "server/stop.h"
#include "text/detok.h"
#include "text/dsml.h"

typedef struct gen {
    dsv4_server *s;
    srv_job *j;
    srv_out out;
    dsv4_detok detok;
    dsv4_strbuf text, piece;
    srv_stop stop;
    dsv4_dsml_parser *dsml;
    srv_constrain *force; /* tool_choice forces a call: the tokens come from the constraint */
    bool reasoning;
    int32_t think_start, think_end, eos;
    srv_dsml_sink sink;
} gen;

/* Moves pending SSE bytes to the job for the HTTP thread. */
static void publish(gen *g) {
    if (!g->out.sse.len) return;
    dsv4_error err;
    pthread_mutex_lock(&g->j->mu);
    dsv4_strbuf_append(&g->j->sse, g->out.sse.data, g->out.sse.len, &err);
    pthread_cond_broadcast(&g->j->cv);
    pthread_mutex_unlock(&g->j->mu);
    g->out.sse.len = 0;
}

static void content(gen *g, const char *s, size_t n, bool *hit) {
    dsv4_error err;
    g->piece.len = 0;
    *hit = srv_stop_feed(&g->stop, s, n, &g->piece);
    if (!g->piece.len) return;
    if (g->dsml)
        dsv4_dsml_parser_feed(g->dsml, g->piece.data, g->piece.len, &err);
    else
        srv_out_text(&g->out, g->piece.data, g->piece.len);
}

static void route(gen *g, bool *hit) {
    if (!g->text.len) return;
    if (g->reasoning)
        srv_out_reasoning(&g->out, g->text.data, g->text.len);
    else
        content(g, g->text.data, g->text.len, hit);
    g->text.len = 0;
}

/* Returns true when a stop string matched. */
static bool on_token(gen *g, int32_t id) {
    dsv4_error err;
    bool hit = false;
    if (g->reasoning && (id == g->think_end || id == g->think_start)) {
        if (id == g->think_end) {
            dsv4_detok_flush(&g->detok, &g->text, &err);
            route(g, &hit);
            g->reasoning = false;
        }
        return false;
    }
    if (g->reasoning) g->out.reasoning_tokens++;
    dsv4_detok_push_token(&g->detok, g->s->tok, id, &g->text, &err);
    route(g, &hit);
    return hit;
}

static void finish_text(gen *g) {
    dsv4_error err;
    bool hit = false;
    dsv4_detok_flush(&g->detok, &g->text, &err);
    route(g, &hit);
    g->piece.len = 0;
    srv_stop_flush(&g->stop, &g->piece);
    if (g->piece.len) {
        if (g->dsml)
            dsv4_dsml_parser_feed(g->dsml, g->piece.data, g->piece.len, &err);
        else
            srv_out_text(&g->out, g->piece.data, g->piece.len);
    }
    if (g->dsml) dsv4_dsml_parser_finish(g->dsml, &err);
}

/* Bytes of the rendered text covered by the live tokens, or 0: their exact bytes, else the text
 * the client was sent for them (ill-formed UTF-8 in sampled tokens replaced by U+FFFD, as the
 * streamed output does it: dsv4_detok over the whole sequence; valid text passes unchanged). */
static size_t live_text_match(dsv4_server *s, const srv_job *j) {
    const dsv4_prefix_cache *c = &s->cache;
    size_t at = 0;
    uint32_t i = 0;
    for (; i < c->n_live; i++) {
        size_t n;
        const char *b = dsv4_token_bytes(s->tok, c->live[i], &n);
        if (at + n > j->text_len || memcmp(j->text + at, b, n) != 0) break;
        at += n;
    }
    if (i == c->n_live) return at;
    dsv4_detok d;
    dsv4_detok_init(&d);
    dsv4_strbuf seen = {0};
    dsv4_error err;
    bool ok = true;
    for (i = 0; i < c->n_live && ok; i++)
        ok = dsv4_detok_push_token(&d, s->tok, c->live[i], &seen, &err) == DSV4_OK;
    ok = ok && dsv4_detok_flush(&d, &seen, &err) == DSV4_OK;
    at = ok && seen.len <= j->text_len && memcmp(j->text, seen.data, seen.len) == 0 ? seen.len : 0;
    dsv4_strbuf_free(&seen);
    return at;
}

/* Follow-up turns: when the rendered text starts with the text of the live tokens (the model's
 * own sampled tokens, which a fresh tokenization may split differently, and whose ill-formed
 * UTF-8 the client only saw as U+FFFD), keep those tokens and tokenize only the rest, so the
 * request extends the live session. */
static void splice_live(dsv4_server *s, srv_job *j) {
    const dsv4_prefix_cache *c = &s->cache;
    if (!c->n_live || c->damaged || !j->text) return;
    if (c->n_live <= j->n_tokens && memcmp(c->live, j->tokens, (size_t)c->n_live * sizeof *c->live) == 0)
        return;
    const size_t at = live_text_match(s, j);
    if (!at) return;
    dsv4_tokens t = {0};
    dsv4_error err;
    bool ok = true;
    for (uint32_t i = 0; i < c->n_live && ok; i++) ok = dsv4_tokens_push(&t, c->live[i], &err) == DSV4_OK;
    ok = ok && dsv4_tokenize_rendered(s->tok, j->text + at, j->text_len - at, &t, &err) == DSV4_OK;
    if (ok && t.n >= 1 && t.n < dsv4_session_ctx(s->session)) {
        free(j->tokens);
        j->tokens = t.ids;
        j->n_tokens = (uint32_t)t.n;
        return;
    }
    dsv4_tokens_free(&t);
}

typedef struct {
    srv_job *j;
    double deadline;
} prefill_watch;

static void on_prefill_progress(void *user, uint32_t done, uint32_t total) {
    (void)done, (void)total;
    prefill_watch *w = user;
    if (w->deadline > 0 && srv_now() > w->deadline) atomic_store(&w->j->cancel, 1);
}

static void update_metrics(dsv4_server *s, const srv_job *j, const dsv4_prefix_result *pr, const gen *g,
                           double prefill_s, double decode_s) {
    srv_metrics *m = &s->metrics;
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += j->n_tokens;
    m->cached_tokens += pr->reused;
    m->generated_tokens += g->out.completion_tokens;
    if (pr->evaluated && prefill_s > 0) m->prefill_tps = pr->evaluated / prefill_s;
    if (g->out.completion_tokens > 1 && decode_s > 0)
        m->decode_tps = (g->out.completion_tokens - 1) / decode_s;
    m->prefix_extend = s->cache.n_extend;
    m->prefix_rewind = s->cache.n_rewind;
    m->prefix_rebuild = s->cache.n_rebuild;
    m->kv_bytes = dsv4_session_state_bytes(s->session);
    m->ckpt_bytes = dsv4_prefix_ckpt_bytes(&s->cache);
    dsv4_engine_stats_get(s->engine, &m->engine); /* the worker owns the engine */
    pthread_mutex_unlock(&m->mu);
}

void srv_run_job(dsv4_server *s, srv_job *j) {
    srv_request *r = &j->req;
    srv_err e;
    gen g;
    memset(&g, 0, sizeof g);
    g.s = s;
    g.j = j;
    g.think_start = dsv4_tokenizer_special(s->tok, DSV4_SPECIAL_THINK_START);
    g.think_end = dsv4_tokenizer_special(s->tok, DSV4_SPECIAL_THINK_END);
    g.eos = dsv4_tokenizer_special(s->tok, DSV4_SPECIAL_EOS);
    g.reasoning = r->api != SRV_API_COMPLETIONS && dsv4_think_enabled(r->think);
    dsv4_detok_init(&g.detok);
    const bool forced = r->tool_choice == SRV_TOOLS_REQUIRED && r->n_tools && r->api != SRV_API_COMPLETIONS;
    srv_stop_init(&g.stop, r->stop, forced ? 0 : r->n_stop); /* a forced call is DSML only */
    const uint64_t seed =
        r->seed ? r->seed
                : ((uint64_t)time(NULL) ^ ((uint64_t)atomic_fetch_add(&s->seq, 1) << 32) ^ (uint64_t)clock());
    srv_out_init(&g.out, r, r->model, seed);
    if (r->n_tools && r->tool_choice != SRV_TOOLS_NONE && r->api != SRV_API_COMPLETIONS) {
        g.sink.out = &g.out;
        g.sink.mem = &s->toolmem;
        g.dsml = dsv4_dsml_parser_new(srv_dsml_event, &g.sink);
        if (!g.dsml) {
            srv_err_set(&e, 500, "server_error", NULL, NULL, "out of memory");
            srv_job_fail(s, j, &e);
            goto out;
        }
    }
    if (forced) {
        dsv4_error ce;
        if (srv_constrain_new(s->tok, (const char *const *)r->tool_schemas, r->n_tools, r->tool_force,
                              g.reasoning, 0, &g.force, &ce) != DSV4_OK) {
            srv_err_set(&e, 500, "server_error", NULL, NULL, "%s", ce.msg);
            srv_job_fail(s, j, &e);
            goto out;
        }
    }

    /* ---- prefill ---- */
    prefill_watch w = {j, j->deadline};
    dsv4_eval_opts eo = {0};
    eo.cancel = &j->cancel;
    eo.on_progress = on_prefill_progress;
    eo.progress_user = &w;
    dsv4_prefix_result pr = {0};
    dsv4_error err = {0};
    const double t0 = srv_now();
    splice_live(s, j);
    dsv4_status st = dsv4_prefix_sync(&s->cache, j->tokens, j->n_tokens, &eo, &pr, &err);
    const double prefill_s = srv_now() - t0;
    if (st != DSV4_OK) {
        update_metrics(s, j, &pr, &g, prefill_s, 0);
        if (atomic_load(&j->gone)) {
            pthread_mutex_lock(&s->metrics.mu);
            s->metrics.cancelled++;
            pthread_mutex_unlock(&s->metrics.mu);
            goto out; /* nobody is listening */
        }
        if (st == DSV4_ERR_CANCELLED && atomic_load(&j->wind_up))
            srv_err_set(&e, 503, r->api == SRV_API_MESSAGES ? "overloaded_error" : "server_error", NULL, NULL,
                        "the server is shutting down");
        else if (st == DSV4_ERR_CANCELLED)
            srv_err_set(&e, 504, r->api == SRV_API_MESSAGES ? "timeout_error" : "timeout", "timeout", NULL,
                        "the request timed out during prefill (--request-timeout)");
        else
            srv_err_set(&e, 500, r->api == SRV_API_MESSAGES ? "api_error" : "server_error", NULL, NULL,
                        "prefill failed: %s", err.msg);
        srv_job_fail(s, j, &e);
        goto out;
    }
    g.out.prompt_tokens = j->n_tokens;
    g.out.cached_tokens = pr.reused;

    /* ---- generation ---- */
    srv_out_begin(&g.out);
    publish(&g);
    dsv4_sampler sp;
    dsv4_sampler_init(&sp, r->sampling, seed);
    const uint32_t n_vocab = dsv4_session_n_vocab(s->session), ctx = dsv4_session_ctx(s->session);
    const int64_t max_new = r->max_tokens < 0 ? INT64_MAX : r->max_tokens;
    bool cancelled = false, stop_hit = false;
    g.out.finish = SRV_FINISH_STOP;
    const double t1 = srv_now();
    for (;;) {
        if (atomic_load(&j->gone)) {
            cancelled = true;
            break;
        }
        if (atomic_load(&j->wind_up) || (j->deadline > 0 && srv_now() > j->deadline)) {
            g.out.finish = SRV_FINISH_LENGTH;
            break;
        }
        const float *logits = dsv4_session_logits(s->session);
        int32_t id;
        bool call_done = false;
        if (g.force) {
            if (srv_constrain_next(g.force, logits, n_vocab, &sp, &id, &call_done, &err) != DSV4_OK) {
                srv_err_set(&e, 500, "server_error", NULL, NULL, "tool_choice: %s", err.msg);
                break;
            }
            if (call_done) break; /* the forced call is complete: end as after EOS */
        } else if (g.dsml && dsv4_dsml_parser_in_structure(g.dsml)) {
            id = dsv4_sample_argmax(logits, n_vocab);
        } else if (dsv4_sampler_sample(&sp, logits, n_vocab, &id, &err) != DSV4_OK) {
            srv_err_set(&e, 500, "server_error", NULL, NULL, "sampling failed: %s", err.msg);
            break;
        }
        if (g.out.completion_tokens == 0) srv_metrics_ttft(&s->metrics, srv_now() - j->t_arrive);
        if (id == g.eos) break;
        g.out.completion_tokens++;
        stop_hit = on_token(&g, id);
        publish(&g);
        if (stop_hit) {
            g.out.stop_seq = r->stop[g.stop.which];
            break;
        }
        if ((int64_t)g.out.completion_tokens >= max_new || dsv4_session_pos(s->session) >= ctx) {
            g.out.finish = SRV_FINISH_LENGTH;
            break;
        }
        if (dsv4_prefix_decode(&s->cache, id, &err) != DSV4_OK) {
            if (atomic_load(&j->gone)) {
                cancelled = true;
                break;
            }
            srv_err_set(&e, 500, "server_error", NULL, NULL, "decode failed: %s", err.msg);
            dsv4_sampler_free(&sp);
            update_metrics(s, j, &pr, &g, prefill_s, srv_now() - t1);
            srv_job_fail(s, j, &e);
            goto out;
        }
    }
    dsv4_sampler_free(&sp);
    const double decode_s = srv_now() - t1;
    update_metrics(s, j, &pr, &g, prefill_s, decode_s);
    if (cancelled) {
        pthread_mutex_lock(&s->metrics.mu);
        s->metrics.cancelled++;
        pthread_mutex_unlock(&s->metrics.mu);
        goto out;
    }
    finish_text(&g);
    if (g.out.n_calls && g.out.finish == SRV_FINISH_STOP && !stop_hit) g.out.finish = SRV_FINISH_TOOLS;
    srv_out_finish(&g.out);
    publish(&g);
    if (!r->stream) {
        char *body = srv_out_body(&g.out);
        pthread_mutex_lock(&j->mu);
        j->body = body;
        j->status = body ? 200 : 500;
        pthread_mutex_unlock(&j->mu);
    }
    if (!s->cfg.quiet)
        fprintf(
            stderr,
            "dsv4-server: %s: %u prompt tokens (%u reused, %s), %u generated, %.2fs prefill, %.2fs decode\n",
            srv_endpoint_name(j->endpoint), j->n_tokens, pr.reused,
            pr.kind == DSV4_PREFIX_EXTEND   ? "extend"
            : pr.kind == DSV4_PREFIX_REWIND ? "rewind"
                                            : "rebuild",
            g.out.completion_tokens, prefill_s, decode_s);
out:
    srv_stop_free(&g.stop);
    dsv4_dsml_parser_free(g.dsml);
    srv_constrain_free(g.force);
    dsv4_strbuf_free(&g.text);
    dsv4_strbuf_free(&g.piece);
    srv_dsml_sink_free(&g.sink);
    srv_out_free(&g.out);
}
