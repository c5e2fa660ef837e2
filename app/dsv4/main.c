/* dsv4: one-shot generation (-p), interactive chat (no -p), and logits/token dumps. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define CLI_DEFAULT_CTX 4096u

static uint64_t pick_seed(uint64_t seed) {
    if (seed) return seed;
    return (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)clock();
}

static int dump_prompt_tokens(const cli_opts *o, const dsv4_tokenizer *t, uint32_t ctx) {
    dsv4_error err = {0};
    dsv4_tokens ids = {0};
    const dsv4_think_mode mode = dsv4_think_mode_for_context(o->think, ctx);
    if (dsv4_chat_encode_prompt(t, o->system, o->prompt, mode, &ids, &err) != DSV4_OK) {
        fprintf(stderr, "dsv4: %s\n", err.msg);
        return 1;
    }
    cli_dump_tokens(t, ids.ids, ids.n);
    dsv4_tokens_free(&ids);
    return 0;
}

int main(int argc, char **argv) {
    cli_opts o;
    int rc = cli_parse_args(argc, argv, &o);
    if (rc) return rc;
    if (o.help) {
        cli_usage(stdout);
        return 0;
    }
    cli_sigint_install();

    dsv4_error err = {0};
    dsv4_engine_params ep;
    dsv4_engine_params_default(&ep);
    ep.n_threads = o.threads;
    if (o.chunk) ep.chunk = o.chunk;
    ep.backend = o.backend;
    ep.device = o.device;
    ep.on_upload = cli_upload_progress;
    ep.tiers = o.tiers;
    ep.tier_mem = o.tier_mem;
    ep.tier_ctx = o.ctx;
    if (o.no_fusion) ep.fusion = false;
    if (o.numerics) ep.numerics = strcmp(o.numerics, "exact") == 0 ? DSV4_NUMERICS_EXACT : DSV4_NUMERICS_DS4;
    const bool tty = isatty(STDERR_FILENO);
    if (tty) fprintf(stderr, "loading %s ...", o.model), fflush(stderr);
    dsv4_engine *e = NULL;
    dsv4_status st = dsv4_engine_open(o.model, &ep, &e, &err);
    if (tty) fprintf(stderr, "\r\033[K"), fflush(stderr);
    if (st != DSV4_OK) {
        fprintf(stderr, "dsv4: cannot load model '%s': %s\n", o.model, err.msg);
        return 1;
    }
    if (o.device_info) {
        const uint64_t model_ctx = dsv4_engine_config(e)->context_length;
        uint32_t ctx = model_ctx && model_ctx < CLI_DEFAULT_CTX ? (uint32_t)model_ctx : CLI_DEFAULT_CTX;
        rc = cli_device_info(e, o.ctx ? o.ctx : ctx);
        dsv4_engine_close(e);
        return rc;
    }
    if (o.dump_logits) {
        rc = cli_dump_logits(&o, e);
        dsv4_engine_close(e);
        return rc;
    }

    dsv4_tokenizer *tok = NULL;
    if (dsv4_tokenizer_from_gguf(dsv4_engine_model(e)->file, &tok, &err) != DSV4_OK) {
        fprintf(stderr, "dsv4: cannot read the tokenizer of '%s': %s\n", o.model, err.msg);
        dsv4_engine_close(e);
        return 1;
    }
    uint32_t ctx = o.ctx;
    if (!ctx) {
        const uint64_t model_ctx = dsv4_engine_config(e)->context_length;
        ctx = model_ctx && model_ctx < CLI_DEFAULT_CTX ? (uint32_t)model_ctx : CLI_DEFAULT_CTX;
    }
    cli_ctx c = {.opts = &o, .engine = e, .tok = tok};
    c.eos = dsv4_tokenizer_special(tok, DSV4_SPECIAL_EOS);
    if (o.dump_tokens) {
        rc = dump_prompt_tokens(&o, tok, ctx);
    } else if (dsv4_session_create(e, ctx, &c.session, &err) != DSV4_OK) {
        fprintf(stderr, "dsv4: cannot create a session of %u tokens: %s\n", ctx, err.msg);
        rc = 1;
    } else {
        dsv4_sampler_init(&c.sampler, o.sampling, pick_seed(o.seed));
        rc = o.prompt ? cli_run_oneshot(&c) : cli_run_repl(&c);
        dsv4_sampler_free(&c.sampler);
        dsv4_session_free(c.session);
    }
    dsv4_tokenizer_free(tok);
    dsv4_engine_close(e);
    return rc;
}
