/* The generation loop shared by the one-shot run and the REPL: prefill the unevaluated suffix
 * (chunked, with a progress bar and Ctrl-C cancel), then sample/stream/decode token by token. */
#include <string.h>

#include "cli.h"

dsv4_status cli_generate(cli_ctx *c, const int32_t *tokens, uint32_t n, int64_t max_new, cli_out *out,
                         dsv4_tokens *gen, gen_stats *st, dsv4_error *err) {
    memset(st, 0, sizeof *st);
    dsv4_session *s = c->session;
    const uint32_t pos = dsv4_session_pos(s);
    if (pos > n)
        return dsv4_fail(err, DSV4_ERR_INVALID, "session is at position %u, past the %u history tokens", pos,
                         n);
    const uint32_t todo = n - pos;
    st->prompt_tokens = todo;
    if (todo) {
        cli_progress pr;
        cli_progress_init(&pr, "prefill");
        dsv4_eval_opts eo = {0};
        eo.chunk = c->opts->chunk;
        eo.on_progress = cli_progress_update;
        eo.progress_user = &pr;
        eo.cancel = cli_sigint_flag();
        const double t0 = cli_now();
        dsv4_status rc = dsv4_session_eval(s, tokens + pos, todo, &eo, err);
        st->prefill_s = cli_now() - t0;
        cli_progress_done(&pr);
        if (rc == DSV4_ERR_CANCELLED) {
            st->cancelled = true;
            return DSV4_OK;
        }
        if (rc != DSV4_OK) return rc;
    }
    st->prefill_done = true;
    if (!dsv4_session_logits(s))
        return dsv4_fail(err, DSV4_ERR_INVALID, "nothing was evaluated: empty prompt");

    const uint32_t n_vocab = dsv4_session_n_vocab(s), ctx = dsv4_session_ctx(s);
    const double t0 = cli_now();
    for (int64_t i = 0; max_new < 0 || i < max_new; i++) {
        if (atomic_load(cli_sigint_flag())) {
            st->cancelled = true;
            break;
        }
        int32_t id;
        dsv4_status rc = dsv4_sampler_sample(&c->sampler, dsv4_session_logits(s), n_vocab, &id, err);
        if (rc != DSV4_OK) return rc;
        if (id == c->eos) {
            st->hit_eos = true;
            break;
        }
        if ((rc = dsv4_tokens_push(gen, id, err)) != DSV4_OK) return rc;
        st->gen_tokens++;
        if ((rc = cli_out_token(out, c->tok, id, err)) != DSV4_OK) return rc;
        if (max_new >= 0 && i + 1 >= max_new) break; /* the last token needs no evaluation */
        if (dsv4_session_pos(s) >= ctx) {
            st->ctx_full = true;
            break;
        }
        if ((rc = dsv4_session_decode(s, id, err)) != DSV4_OK) return rc;
    }
    st->decode_s = cli_now() - t0;
    return DSV4_OK;
}

void cli_print_stats(const cli_ctx *c, const gen_stats *st) {
    fprintf(stderr, "prompt tokens: %u\n", st->prompt_tokens);
    fprintf(stderr, "prefill: %.2f tok/s (%u tokens in %.3f s)\n",
            st->prefill_s > 0 ? st->prompt_tokens / st->prefill_s : 0.0, st->prompt_tokens, st->prefill_s);
    fprintf(stderr, "decode: %.2f tok/s (%u tokens in %.3f s)\n",
            st->decode_s > 0 ? st->gen_tokens / st->decode_s : 0.0, st->gen_tokens, st->decode_s);
    fprintf(stderr, "KV bytes: %zu (context %u, used %u)\n", dsv4_session_state_bytes(c->session),
            dsv4_session_ctx(c->session), dsv4_session_pos(c->session));
    char place[512], buf[2048];
    const dsv4_placement *pl = dsv4_engine_placement(c->engine);
    dsv4_placement_format(pl, place, sizeof place);
    fprintf(stderr, "placement: %s (%u tiers, %u boundaries)\n", place, pl->n_tiers,
            dsv4_placement_boundaries(pl));
    dsv4_engine_stats es;
    dsv4_engine_stats_get(c->engine, &es);
    dsv4_engine_stats_format(&es, buf, sizeof buf);
    fputs(buf, stderr);
    dsv4_device_info di;
    dsv4_error err = {0};
    if (dsv4_engine_device_info(c->engine, &di, &err) == DSV4_OK && di.steps_launched + di.steps_failed)
        fprintf(stderr,
                "step graphs: launched %llu (updated %llu, instantiated %llu), update refused %llu, "
                "failed %llu, stale %llu, programmatic edges %llu\n",
                (unsigned long long)di.steps_launched, (unsigned long long)di.steps_updated,
                (unsigned long long)di.steps_instantiated, (unsigned long long)di.steps_update_failed,
                (unsigned long long)di.steps_failed, (unsigned long long)di.steps_stale,
                (unsigned long long)di.steps_pdl_edges);
    if (dsv4_engine_device_info(c->engine, &di, &err) == DSV4_OK && di.blas_products)
        fprintf(stderr,
                "prefill products on cuBLAS: %llu (activation conversions shared %llu, HC mixes with the "
                "rmsnorm folded %llu)\n",
                (unsigned long long)di.blas_products, (unsigned long long)di.blas_shared,
                (unsigned long long)di.blas_hc_mix_folded);
    if (dsv4_engine_device_info(c->engine, &di, &err) == DSV4_OK && di.q8_wg_products)
        fprintf(stderr, "Q8_0 prefill products on the exact warpgroup path: %llu\n",
                (unsigned long long)di.q8_wg_products);
    if (dsv4_engine_device_info(c->engine, &di, &err) == DSV4_OK && di.moe_f16_products)
        fprintf(stderr, "routed gate/up products on f16 tensor cores: %llu (%llu on the warpgroup kernel)\n",
                (unsigned long long)di.moe_f16_products, (unsigned long long)di.moe_ws_products);
    if (dsv4_engine_device_info(c->engine, &di, &err) == DSV4_OK && di.moe_x16_products)
        fprintf(
            stderr,
            "routed products on the exact warpgroup path: %llu (gate/up steps %llu, %llu with split codes)\n",
            (unsigned long long)di.moe_x16_products, (unsigned long long)di.moe_x16_steps,
            (unsigned long long)di.moe_x16_heavy_steps);
}
