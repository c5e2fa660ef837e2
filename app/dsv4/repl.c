/* Interactive multi-turn chat on libedit. The conversation's tokens are kept here; the session
 * has evaluated a prefix of them, so each turn evaluates only the new suffix. Ctrl-C stops a
 * generation (or a prefill) and returns to the prompt; at the prompt it clears the line, and a
 * second one at an empty prompt exits. */
#include <errno.h>
#include <histedit.h>
#include <locale.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <wchar.h>

#include "cli.h"

typedef struct repl {
    cli_ctx *c;
    EditLine *el;
    History *hist;
    dsv4_tokens conv; /* every token of the conversation so far */
    dsv4_think_mode think;
    bool interrupted;    /* the last el_gets ended by Ctrl-C */
    bool line_was_empty; /* ... at an empty line */
    bool armed;          /* one Ctrl-C at an empty prompt already */
} repl;

static char *prompt_fn(EditLine *el) {
    (void)el;
    return "> ";
}

/* Reads one character for libedit; a Ctrl-C (signal, or byte 0x03 when the terminal delivers
 * it raw) ends el_gets with an error so the loop can clear the line. */
static int repl_getc(EditLine *el, wchar_t *wc) {
    repl *r = NULL;
    el_get(el, EL_CLIENTDATA, &r);
    mbstate_t ps;
    memset(&ps, 0, sizeof ps);
    for (;;) {
        unsigned char ch = 0;
        ssize_t got = 0;
        if (!atomic_load(cli_sigint_flag())) got = read(STDIN_FILENO, &ch, 1);
        if (atomic_load(cli_sigint_flag()) || (got == 1 && ch == 3)) {
            cli_sigint_clear();
            const LineInfoW *li = el_wline(el);
            r->line_was_empty = li->lastchar == li->buffer;
            r->interrupted = true;
            errno = EINTR;
            return -1;
        }
        if (got == 0) return 0;
        if (got < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        size_t k = mbrtowc(wc, (const char *)&ch, 1, &ps);
        if (k == (size_t)-2) continue;
        if (k == (size_t)-1)
            *wc = ch; /* not valid in the locale: pass the byte through */
        else if (k == 0)
            *wc = 0;
        return 1;
    }
}

static void help(void) {
    printf("commands:\n"
           "  /help          this list\n"
           "  /think         thinking on (reasoning shown dimmed)\n"
           "  /nothink       thinking off\n"
           "  /think-max     maximum-effort thinking (HIGH below a %u-token context)\n"
           "  /ctx           context used / total\n"
           "  /read FILE     send the file's content as your message\n"
           "  /reset         start a new conversation\n"
           "  /tokens        print the conversation's token ids (for debugging)\n"
           "  /quit          exit (also Ctrl-D, or Ctrl-C twice at an empty prompt)\n"
           "Ctrl-C during a reply stops it.\n",
           DSV4_THINK_MAX_MIN_CONTEXT);
}

static const char *mode_name(dsv4_think_mode m) {
    return m == DSV4_THINK_NONE ? "off" : m == DSV4_THINK_HIGH ? "high" : "max";
}

/* Drops the session's state when it no longer matches a prefix of the kept history; the next
 * turn then re-evaluates the history from position 0. */
static void resync(repl *r) {
    dsv4_session *s = r->c->session;
    if (!dsv4_session_broken(s) && dsv4_session_pos(s) <= r->conv.n) return;
    dsv4_error err = {0};
    if (dsv4_session_reset(s, &err) != DSV4_OK) fprintf(stderr, "dsv4: resetting the session: %s\n", err.msg);
}

static void turn(repl *r, const char *text) {
    cli_ctx *c = r->c;
    const cli_opts *o = c->opts;
    const uint32_t ctx = dsv4_session_ctx(c->session);
    const dsv4_think_mode mode = dsv4_think_mode_for_context(r->think, ctx);
    const size_t keep = r->conv.n;
    dsv4_error err = {0};
    dsv4_tokens gen = {0};
    cli_out out;
    cli_out_init(&out, stdout, c->tok, dsv4_think_enabled(mode));
    dsv4_status st = DSV4_OK;
    if (keep == 0) { /* the one-shot prefix: BOS, [MAX prefix], [system] */
        st = dsv4_tokens_push(&r->conv, dsv4_tokenizer_special(c->tok, DSV4_SPECIAL_BOS), &err);
        if (st == DSV4_OK && mode == DSV4_THINK_MAX)
            st = dsv4_chat_append_message(c->tok, DSV4_ROLE_SYSTEM, DSV4_THINK_MAX_PREFIX, &r->conv, &err);
        if (st == DSV4_OK && o->system && o->system[0])
            st = dsv4_chat_append_message(c->tok, DSV4_ROLE_SYSTEM, o->system, &r->conv, &err);
    }
    if (st == DSV4_OK) st = dsv4_chat_append_message(c->tok, DSV4_ROLE_USER, text, &r->conv, &err);
    if (st == DSV4_OK) st = dsv4_chat_append_assistant_prefix(c->tok, mode, &r->conv, &err);
    if (st != DSV4_OK) goto fail;
    if (r->conv.n > ctx) {
        printf("context full: this message needs %zu tokens, %zu of %u are used; /reset starts over\n",
               r->conv.n - keep, keep, ctx);
        r->conv.n = keep;
        goto done;
    }
    resync(r);
    gen_stats gs;
    cli_sigint_clear();
    st = cli_generate(c, r->conv.ids, (uint32_t)r->conv.n, o->n_predict, &out, &gen, &gs, &err);
    cli_out_finish(&out, &err);
    if (st != DSV4_OK) {
        if (gen.n) fputc('\n', stdout);
        r->conv.n = keep;
        resync(r);
        goto fail;
    }
    if (!gs.prefill_done) { /* interrupted prefill: forget the message */
        r->conv.n = keep;
        resync(r);
        printf("[interrupted]\n");
        goto done;
    }
    fputc('\n', stdout);
    if (gs.cancelled) printf("[interrupted]\n");
    if (gs.ctx_full) printf("[context full: /reset starts a new conversation]\n");
    st = dsv4_chat_append_generated(c->tok, gen.ids, gen.n, &r->conv, &err);
    if (st != DSV4_OK) {
        r->conv.n = keep;
        resync(r);
        goto fail;
    }
    if (o->stats) cli_print_stats(c, &gs);
    goto done;
fail:
    fprintf(stderr, "dsv4: %s\n", err.msg);
done:
    fflush(stdout);
    cli_out_free(&out);
    dsv4_tokens_free(&gen);
}

static char *read_whole(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            size_t nc = cap ? cap * 2 : 8192;
            char *nb = realloc(b, nc);
            if (!nb) {
                free(b);
                fclose(f);
                errno = ENOMEM;
                return NULL;
            }
            b = nb, cap = nc;
        }
        size_t got = fread(b + n, 1, cap - n - 1, f);
        n += got;
        if (!got) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(b);
        errno = EIO;
        return NULL;
    }
    b[n] = 0;
    *len = n;
    return b;
}

/* Returns false when the REPL should end. */
static bool command(repl *r, char *line) {
    char *arg = line + strcspn(line, " \t");
    if (*arg) *arg++ = 0;
    arg += strspn(arg, " \t");
    const uint32_t ctx = dsv4_session_ctx(r->c->session);
    if (!strcmp(line, "/quit") || !strcmp(line, "/exit")) return false;
    if (!strcmp(line, "/help")) {
        help();
    } else if (!strcmp(line, "/think") || !strcmp(line, "/nothink") || !strcmp(line, "/think-max")) {
        r->think = !strcmp(line, "/think")     ? DSV4_THINK_HIGH
                   : !strcmp(line, "/nothink") ? DSV4_THINK_NONE
                                               : DSV4_THINK_MAX;
        const dsv4_think_mode eff = dsv4_think_mode_for_context(r->think, ctx);
        printf("thinking: %s", mode_name(r->think));
        if (eff != r->think)
            printf(" (runs as %s: the context is below %u tokens)", mode_name(eff),
                   DSV4_THINK_MAX_MIN_CONTEXT);
        printf("\n");
    } else if (!strcmp(line, "/ctx")) {
        printf("context: %zu/%u tokens used (%u evaluated)\n", r->conv.n, ctx,
               dsv4_session_pos(r->c->session));
    } else if (!strcmp(line, "/tokens")) {
        for (size_t i = 0; i < r->conv.n; i++) printf("%s%d", i ? "," : "", r->conv.ids[i]);
        printf("\n");
    } else if (!strcmp(line, "/reset")) {
        r->conv.n = 0;
        dsv4_error err = {0};
        if (dsv4_session_reset(r->c->session, &err) != DSV4_OK)
            fprintf(stderr, "dsv4: %s\n", err.msg);
        else
            printf("conversation cleared\n");
    } else if (!strcmp(line, "/read")) {
        if (!*arg) {
            printf("usage: /read FILE\n");
            return true;
        }
        size_t len = 0;
        char *text = read_whole(arg, &len);
        if (!text) {
            fprintf(stderr, "dsv4: cannot read '%s': %s\n", arg, strerror(errno));
            return true;
        }
        if (strlen(text) != len)
            fprintf(stderr, "dsv4: '%s' contains NUL bytes; sent up to the first\n", arg);
        printf("(read %zu bytes from %s)\n", len, arg);
        turn(r, text);
        free(text);
    } else {
        printf("unknown command %s (/help lists them)\n", line);
    }
    return true;
}

int cli_run_repl(cli_ctx *c) {
    setlocale(LC_CTYPE, "");
    repl r = {.c = c, .think = c->opts->think};
    r.el = el_init("dsv4", stdin, stdout, stderr);
    r.hist = history_init();
    if (!r.el || !r.hist) {
        fprintf(stderr, "dsv4: cannot initialise line editing\n");
        if (r.el) el_end(r.el);
        if (r.hist) history_end(r.hist);
        return 1;
    }
    HistEvent ev;
    history(r.hist, &ev, H_SETSIZE, 1000);
    el_set(r.el, EL_EDITOR, "emacs");
    el_set(r.el, EL_PROMPT, prompt_fn);
    el_set(r.el, EL_HIST, history, r.hist);
    el_set(r.el, EL_CLIENTDATA, &r);
    el_set(r.el, EL_GETCFN, repl_getc);
    if (isatty(STDIN_FILENO))
        printf("dsv4 chat: %s, context %u tokens, thinking %s. /help for commands, /quit to exit.\n",
               c->opts->model, dsv4_session_ctx(c->session), mode_name(r.think));
    for (;;) {
        fflush(stdout);
        cli_sigint_clear();
        r.interrupted = false;
        int count = 0;
        const char *got = el_gets(r.el, &count);
        if (!got) {
            if (r.interrupted) {
                if (r.line_was_empty && r.armed) {
                    printf("\n");
                    break;
                }
                r.armed = r.line_was_empty;
                printf(r.armed ? "\n(Ctrl-C again or /quit to exit)\n" : "\n");
                continue;
            }
            printf("\n"); /* Ctrl-D / end of input */
            break;
        }
        r.armed = false;
        char *line = strdup(got);
        if (!line) {
            fprintf(stderr, "dsv4: out of memory\n");
            break;
        }
        size_t n = strlen(line);
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (n) history(r.hist, &ev, H_ENTER, line);
        bool go_on = true;
        if (line[0] == '/')
            go_on = command(&r, line);
        else if (line[strspn(line, " \t")])
            turn(&r, line);
        free(line);
        if (!go_on) break;
    }
    el_end(r.el);
    history_end(r.hist);
    dsv4_tokens_free(&r.conv);
    return 0;
}
