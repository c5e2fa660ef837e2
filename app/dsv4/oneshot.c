/* One-shot run: encode the chat prompt, generate up to -n tokens, print, exit. */
#include "cli.h"

int cli_run_oneshot(cli_ctx *c) {
    const cli_opts *o = c->opts;
    dsv4_error err = {0};
    dsv4_tokens prompt = {0}, gen = {0};
    cli_out out;
    int rc = 1;
    const uint32_t ctx = dsv4_session_ctx(c->session);
    const dsv4_think_mode mode = dsv4_think_mode_for_context(o->think, ctx);
    cli_out_init(&out, stdout, c->tok, dsv4_think_enabled(mode));
    if (dsv4_chat_encode_prompt(c->tok, o->system, o->prompt, mode, &prompt, &err) != DSV4_OK) goto fail;
    if (prompt.n > ctx) {
        fprintf(stderr, "dsv4: the prompt is %zu tokens, longer than the context of %u tokens (--ctx)\n",
                prompt.n, ctx);
        goto done;
    }
    gen_stats st;
    if (cli_generate(c, prompt.ids, (uint32_t)prompt.n, o->n_predict, &out, &gen, &st, &err) != DSV4_OK) {
        cli_out_finish(&out, &err);
        fputc('\n', stdout);
        goto fail;
    }
    if (cli_out_finish(&out, &err) != DSV4_OK) goto fail;
    fputc('\n', stdout);
    fflush(stdout);
    if (st.ctx_full) fprintf(stderr, "dsv4: stopped at the end of the %u-token context (--ctx)\n", ctx);
    if (o->stats) cli_print_stats(c, &st);
    if (st.cancelled) {
        fprintf(stderr, "dsv4: interrupted\n");
        rc = 130;
    } else {
        rc = 0;
    }
    goto done;
fail:
    fprintf(stderr, "dsv4: %s\n", err.msg);
done:
    cli_out_free(&out);
    dsv4_tokens_free(&prompt);
    dsv4_tokens_free(&gen);
    return rc;
}
