/* --dump-logits: teacher-forced logits of a given token sequence, every position, as raw
 * little-endian float32 [n_pos][n_vocab] plus a FILE.meta text file; and --dump-tokens. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Ids separated by whitespace and/or commas. */
static dsv4_status parse_ids(const char *s, const char *what, dsv4_tokens *out, dsv4_error *err) {
    while (*s) {
        if (isspace((unsigned char)*s) || *s == ',') {
            s++;
            continue;
        }
        if (!isdigit((unsigned char)*s))
            return dsv4_fail(err, DSV4_ERR_INVALID, "%s: expected a token id at '%.16s'", what, s);
        char *end;
        errno = 0;
        unsigned long v = strtoul(s, &end, 10);
        if (errno || v > INT32_MAX)
            return dsv4_fail(err, DSV4_ERR_RANGE, "%s: token id '%.16s' is too large", what, s);
        if (*end && !isspace((unsigned char)*end) && *end != ',')
            return dsv4_fail(err, DSV4_ERR_INVALID, "%s: expected a token id at '%.16s'", what, s);
        dsv4_status st = dsv4_tokens_push(out, (int32_t)v, err);
        if (st != DSV4_OK) return st;
        s = end;
    }
    if (!out->n) return dsv4_fail(err, DSV4_ERR_INVALID, "%s: no token ids", what);
    return DSV4_OK;
}

static char *slurp(FILE *f) {
    size_t cap = 4096, len = 0;
    char *b = malloc(cap);
    if (!b) return NULL;
    for (;;) {
        if (len + 1 >= cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) {
                free(b);
                return NULL;
            }
            b = nb;
        }
        size_t got = fread(b + len, 1, cap - 1 - len, f);
        len += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        free(b);
        return NULL;
    }
    b[len] = 0;
    return b;
}

/* A readable file of ids, else a literal comma list. */
static dsv4_status load_ids(const char *arg, dsv4_tokens *out, dsv4_error *err) {
    FILE *f = fopen(arg, "rb");
    if (!f) {
        const int e = errno;
        if (strchr(arg, ',') || arg[strspn(arg, "0123456789")] == 0)
            return parse_ids(arg, "--tokens list", out, err);
        return dsv4_fail(err, DSV4_ERR_IO, "--tokens: cannot open '%s': %s", arg, strerror(e));
    }
    char *text = slurp(f);
    fclose(f);
    if (!text) return dsv4_fail(err, DSV4_ERR_IO, "--tokens: cannot read '%s'", arg);
    char what[300];
    snprintf(what, sizeof what, "--tokens file '%s'", arg);
    dsv4_status st = parse_ids(text, what, out, err);
    free(text);
    return st;
}

typedef struct {
    FILE *f;
    uint32_t next; /* positions must arrive in order */
    bool failed;
} dump_sink;

static void write_logits(void *user, uint32_t pos, const float *logits, uint32_t n_vocab) {
    dump_sink *d = user;
    if (d->failed) return;
    if (pos != d->next) {
        d->failed = true;
        return;
    }
    d->next++;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    for (uint32_t i = 0; i < n_vocab; i++) {
        uint32_t u;
        memcpy(&u, &logits[i], 4);
        u = __builtin_bswap32(u);
        if (fwrite(&u, 4, 1, d->f) != 1) d->failed = true;
    }
#else
    if (fwrite(logits, sizeof(float), n_vocab, d->f) != n_vocab) d->failed = true;
#endif
}

int cli_dump_logits(const cli_opts *o, dsv4_engine *e) {
    dsv4_error err = {0};
    dsv4_tokens ids = {0};
    dsv4_session *s = NULL;
    FILE *f = NULL;
    char *meta_path = NULL;
    int rc = 1;
    if (load_ids(o->tokens, &ids, &err) != DSV4_OK) goto fail;
    if (ids.n > UINT32_MAX) {
        dsv4_fail(&err, DSV4_ERR_RANGE, "--tokens: too many ids");
        goto fail;
    }
    const uint32_t n = (uint32_t)ids.n;
    const uint32_t n_ctx = o->ctx > n ? o->ctx : n;
    if (dsv4_session_create(e, n_ctx, &s, &err) != DSV4_OK) goto fail;
    const uint32_t n_vocab = dsv4_session_n_vocab(s);
    if (!(f = fopen(o->dump_logits, "wb"))) {
        fprintf(stderr, "dsv4: cannot create '%s': %s\n", o->dump_logits, strerror(errno));
        goto done;
    }
    dump_sink sink = {f, 0, false};
    cli_progress pr;
    cli_progress_init(&pr, "eval");
    dsv4_eval_opts eo = {0};
    eo.chunk = o->chunk;
    eo.on_logits = write_logits;
    eo.logits_user = &sink;
    eo.on_progress = cli_progress_update;
    eo.progress_user = &pr;
    eo.cancel = cli_sigint_flag();
    dsv4_status st = dsv4_session_eval(s, ids.ids, n, &eo, &err);
    cli_progress_done(&pr);
    if (st != DSV4_OK) goto fail;
    if (o->stats) { /* which paths ran (fusion, tier and decode-step counters) */
        dsv4_engine_stats es;
        char buf[2048];
        dsv4_engine_stats_get(e, &es);
        dsv4_engine_stats_format(&es, buf, sizeof buf);
        fputs(buf, stderr);
    }
    if (sink.failed || sink.next != n || fclose(f) != 0) {
        f = NULL;
        fprintf(stderr, "dsv4: writing '%s' failed (%u of %u positions written)\n", o->dump_logits, sink.next,
                n);
        goto done;
    }
    f = NULL;
    const size_t ml = strlen(o->dump_logits) + 6;
    if (!(meta_path = malloc(ml))) {
        dsv4_fail(&err, DSV4_ERR_NOMEM, "out of memory");
        goto fail;
    }
    snprintf(meta_path, ml, "%s.meta", o->dump_logits);
    FILE *m = fopen(meta_path, "w");
    if (!m) {
        fprintf(stderr, "dsv4: cannot create '%s': %s\n", meta_path, strerror(errno));
        goto done;
    }
    fprintf(m, "n_pos=%u\nn_vocab=%u\nchunk=%u\nmodel=%s\ndtype=float32\nendian=little\n", n, n_vocab,
            o->chunk ? o->chunk : DSV4_DEFAULT_CHUNK, o->model);
    if (fclose(m) != 0) {
        fprintf(stderr, "dsv4: writing '%s' failed\n", meta_path);
        goto done;
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "dsv4: %s\n", err.msg);
done:
    if (f) fclose(f);
    free(meta_path);
    dsv4_session_free(s);
    dsv4_tokens_free(&ids);
    return rc;
}

void cli_dump_tokens(const dsv4_tokenizer *t, const int32_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++) {
        size_t len = 0;
        const char *b = dsv4_token_bytes(t, ids[i], &len);
        printf("%zu\t%d\t'", i, ids[i]);
        for (size_t k = 0; k < len; k++) {
            unsigned char ch = (unsigned char)b[k];
            if (ch == '\n')
                fputs("\\n", stdout);
            else if (ch == '\t')
                fputs("\\t", stdout);
            else if (ch == '\\')
                fputs("\\\\", stdout);
            else if (ch < 0x20 || ch == 0x7f)
                printf("\\x%02x", ch);
            else
                fputc(ch, stdout);
        }
        fputs("'\n", stdout);
    }
}
