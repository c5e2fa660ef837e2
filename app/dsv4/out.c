/* Streams generated tokens: bytes go through the streaming detokenizer so a UTF-8 character is
 * never split; on a terminal the reasoning between <think> and </think> is dimmed, the two tags
 * are hidden and control characters are replaced (text/termsafe.h), elsewhere every byte is
 * written verbatim. */
#include <stdlib.h>
#include <unistd.h>

#include "cli.h"
#include "text/termsafe.h"

#define SGR_DIM "\033[2m"
#define SGR_RESET "\033[0m"

void cli_out_init(cli_out *o, FILE *f, const dsv4_tokenizer *t, bool thinking) {
    o->f = f;
    o->tty = isatty(fileno(f));
    o->thinking = thinking;
    o->dimmed = false;
    dsv4_detok_init(&o->detok);
    o->buf = (dsv4_strbuf){0};
    o->think_start = dsv4_tokenizer_special(t, DSV4_SPECIAL_THINK_START);
    o->think_end = dsv4_tokenizer_special(t, DSV4_SPECIAL_THINK_END);
}

static void emit(cli_out *o) {
    if (!o->buf.len) return;
    if (o->tty && o->thinking && !o->dimmed) {
        fputs(SGR_DIM, o->f);
        o->dimmed = true;
    }
    if (o->tty) { /* model text must not drive the terminal (escape sequences, C1 controls) */
        dsv4_strbuf safe = {0};
        dsv4_error err;
        if (dsv4_term_sanitize(o->buf.data, o->buf.len, &safe, &err) == DSV4_OK)
            fwrite(safe.data, 1, safe.len, o->f);
        dsv4_strbuf_free(&safe);
    } else {
        fwrite(o->buf.data, 1, o->buf.len, o->f);
    }
    o->buf.len = 0;
    fflush(o->f);
}

static void undim(cli_out *o) {
    if (o->dimmed) fputs(SGR_RESET, o->f);
    o->dimmed = false;
}

dsv4_status cli_out_token(cli_out *o, const dsv4_tokenizer *t, int32_t id, dsv4_error *err) {
    if (o->tty && (id == o->think_start || id == o->think_end)) {
        const bool was = o->thinking;
        o->thinking = id == o->think_start;
        if (was && !o->thinking) {
            undim(o);
            fputc('\n', o->f);
            fflush(o->f);
        }
        return DSV4_OK;
    }
    dsv4_status st = dsv4_detok_push_token(&o->detok, t, id, &o->buf, err);
    if (st != DSV4_OK) return st;
    emit(o);
    if (id == o->think_start) o->thinking = true;
    if (id == o->think_end) o->thinking = false;
    return DSV4_OK;
}

dsv4_status cli_out_finish(cli_out *o, dsv4_error *err) {
    dsv4_status st = dsv4_detok_flush(&o->detok, &o->buf, err);
    if (st == DSV4_OK) emit(o);
    undim(o);
    fflush(o->f);
    return st;
}

void cli_out_free(cli_out *o) { dsv4_strbuf_free(&o->buf); }
