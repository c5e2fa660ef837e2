/* dsv4-bench: for each context frontier, prefill only the new interval of one fixed token
 * sequence (timed), snapshot (untimed), decode --gen-tokens greedy tokens with EOS excluded
 * (timed, per token), restore (untimed). Prints ds4-bench's CSV. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "engine/engine.h"
#include "text/chat.h"
#include "text/tokenizer.h"

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    while (b) {
        if (n + 1 >= cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
        }
        size_t got = fread(b + n, 1, cap - 1 - n, f);
        n += got;
        if (!got) {
            if (ferror(f)) {
                free(b);
                b = NULL;
            }
            break;
        }
    }
    fclose(f);
    if (b) b[n] = 0;
    return b;
}

/* First index of the strictly greatest logit, EOS excluded. */
/* Greedy pick skipping one id; *nonfinite counts NaN/Inf logits (a broken step must not pass as a
 * speed result). */
static int32_t argmax_excluding(const float *l, uint32_t n, int32_t skip, uint64_t *nonfinite) {
    int32_t best = -1;
    float bv = -1e30f;
    for (uint32_t i = 0; i < n; i++) {
        if (!isfinite(l[i])) {
            (*nonfinite)++;
            continue;
        }
        if ((int32_t)i != skip && (best < 0 || l[i] > bv)) best = (int32_t)i, bv = l[i];
    }
    return best < 0 ? 0 : best;
}

typedef struct bench {
    const bench_opts *o;
    double load_s; /* model open: bind + weight upload */
    dsv4_engine *e;
    dsv4_tokenizer *tok;
    dsv4_session *s;
    dsv4_tokens prompt;
    void *snap;
    size_t snap_bytes;
    bench_row *rows;
    size_t n_rows, cap_rows;
    double *lat_ms; /* every decode step of every row */
    size_t n_lat, cap_lat;
    double *row_lat;
} bench;

static int fail(const char *what, const dsv4_error *err) {
    fprintf(stderr, "dsv4-bench: %s: %s\n", what, err->msg);
    return 1;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap * 2 : 16;
    while (nc < need) nc *= 2;
    void *np = realloc(*p, nc * elem);
    if (!np) return 1;
    *p = np, *cap = nc;
    return 0;
}

static int measure(bench *b, uint32_t prev, uint32_t frontier, FILE *csv) {
    const bench_opts *o = b->o;
    dsv4_error err = {0};
    dsv4_eval_opts eo = {0};
    eo.chunk = o->chunk;
    bench_row r = {.ctx_tokens = frontier, .prefill_tokens = frontier - prev, .gen_tokens = o->gen_tokens};
    const double t0 = bench_now();
    if (dsv4_session_eval(b->s, b->prompt.ids + prev, frontier - prev, &eo, &err) != DSV4_OK) {
        fprintf(stderr, "dsv4-bench: prefill to %u failed: %s\n", frontier, err.msg);
        return 1;
    }
    r.prefill_s = bench_now() - t0;
    if (dsv4_session_snapshot_save(b->s, b->snap, b->snap_bytes, &err) != DSV4_OK)
        return fail("snapshot", &err);
    r.kvcache_bytes = b->snap_bytes;
    const uint32_t n_vocab = dsv4_session_n_vocab(b->s);
    const int32_t eos = dsv4_tokenizer_special(b->tok, DSV4_SPECIAL_EOS);
    if (grow((void **)&b->lat_ms, &b->cap_lat, b->n_lat + o->gen_tokens, sizeof(double))) {
        fprintf(stderr, "dsv4-bench: out of memory\n");
        return 1;
    }
    const double g0 = bench_now();
    for (uint32_t i = 0; i < o->gen_tokens; i++) {
        if (dsv4_session_pos(b->s) + 1 >= dsv4_session_ctx(b->s)) {
            fprintf(stderr, "dsv4-bench: generation would exceed the allocated context at frontier %u\n",
                    frontier);
            return 1;
        }
        const double ts = bench_now();
        const int32_t t = argmax_excluding(dsv4_session_logits(b->s), n_vocab, eos, &r.nonfinite_logits);
        if (i == 0) r.ttft_s = r.prefill_s + (bench_now() - ts);
        if (dsv4_session_decode(b->s, t, &err) != DSV4_OK) {
            fprintf(stderr, "dsv4-bench: decode at frontier %u failed: %s\n", frontier, err.msg);
            return 1;
        }
        b->row_lat[i] = (bench_now() - ts) * 1e3;
        b->lat_ms[b->n_lat++] = b->row_lat[i];
    }
    r.gen_s = bench_now() - g0;
    if (dsv4_session_snapshot_load(b->s, b->snap, b->snap_bytes, &err) != DSV4_OK)
        return fail("restore", &err);
    if (r.nonfinite_logits)
        fprintf(stderr, "dsv4-bench: %llu non-finite logit values during the decode at frontier %u\n",
                (unsigned long long)r.nonfinite_logits, frontier);
    r.p50_ms = bench_percentile(b->row_lat, o->gen_tokens, 0.50);
    r.p95_ms = bench_percentile(b->row_lat, o->gen_tokens, 0.95);
    fprintf(csv, "%u,%u,%.2f,%u,%.2f,%llu\n", r.ctx_tokens, r.prefill_tokens,
            r.prefill_s > 0 ? r.prefill_tokens / r.prefill_s : 0.0, r.gen_tokens,
            r.gen_s > 0 ? r.gen_tokens / r.gen_s : 0.0, (unsigned long long)r.kvcache_bytes);
    fflush(csv);
    if (grow((void **)&b->rows, &b->cap_rows, b->n_rows + 1, sizeof *b->rows)) {
        fprintf(stderr, "dsv4-bench: out of memory\n");
        return 1;
    }
    b->rows[b->n_rows++] = r;
    return 0;
}

static int run(bench *b) {
    const bench_opts *o = b->o;
    dsv4_error err = {0};
    const char *path = o->chat_prompt_file ? o->chat_prompt_file : o->prompt_file;
    char *text = read_text(path);
    if (!text) {
        fprintf(stderr, "dsv4-bench: cannot read '%s': %s\n", path, strerror(errno));
        return 1;
    }
    dsv4_status st = o->chat_prompt_file
                         ? dsv4_chat_encode_prompt(b->tok, o->system, text, DSV4_THINK_NONE, &b->prompt, &err)
                         : dsv4_tokenize_text(b->tok, text, strlen(text), &b->prompt, &err);
    free(text);
    if (st != DSV4_OK) return fail("tokenizing the prompt", &err);
    if (b->prompt.n < o->ctx_max) {
        fprintf(stderr, "dsv4-bench: the prompt has %zu tokens, need at least --ctx-max=%u\n", b->prompt.n,
                o->ctx_max);
        return 1;
    }
    if (dsv4_session_create(b->e, o->ctx_alloc, &b->s, &err) != DSV4_OK)
        return fail("creating the session", &err);
    b->snap_bytes = dsv4_session_snapshot_bytes(b->s);
    b->snap = malloc(b->snap_bytes);
    b->row_lat = malloc(o->gen_tokens * sizeof(double));
    if (!b->snap || !b->row_lat) {
        fprintf(stderr, "dsv4-bench: out of memory for a %zu-byte snapshot\n", b->snap_bytes);
        return 1;
    }
    fprintf(stderr, "dsv4-bench: %zu prompt tokens, context %u, KV state %.2f MiB, %u threads\n", b->prompt.n,
            o->ctx_alloc, dsv4_session_state_bytes(b->s) / 1048576.0, dsv4_engine_threads(b->e));
    FILE *csv = stdout;
    if (o->csv && !(csv = fopen(o->csv, "w"))) {
        fprintf(stderr, "dsv4-bench: cannot create '%s': %s\n", o->csv, strerror(errno));
        return 1;
    }
    fprintf(csv, "ctx_tokens,prefill_tokens,prefill_tps,gen_tokens,gen_tps,kvcache_bytes\n");
    fflush(csv);
    int rc = 0;
    uint32_t prev = 0;
    for (uint32_t frontier = o->ctx_start;; frontier = bench_next_frontier(o, frontier)) {
        if ((rc = measure(b, prev, frontier, csv)) != 0) break;
        prev = frontier;
        if (frontier >= o->ctx_max) break;
    }
    if (csv != stdout && fclose(csv) != 0) {
        fprintf(stderr, "dsv4-bench: writing '%s' failed\n", o->csv);
        rc = 1;
    }
    if (rc == 0 && o->json)
        rc = bench_write_json(o, b->rows, b->n_rows, (uint32_t)b->prompt.n, dsv4_engine_threads(b->e),
                              b->lat_ms, b->n_lat, b->e, b->load_s);
    for (size_t i = 0; rc == 0 && i < b->n_rows; i++)
        if (b->rows[i].nonfinite_logits) rc = 3; /* reported above; the CSV/JSON are written */
    return rc;
}

int main(int argc, char **argv) {
    bench_opts o;
    int rc = bench_parse_args(argc, argv, &o);
    if (rc) return rc;
    if (o.help) {
        bench_usage(stdout);
        return 0;
    }
    char def[PATH_MAX];
    if (!o.prompt_file && !o.chat_prompt_file && !(o.prompt_file = bench_default_prompt(def, sizeof def))) {
        fprintf(stderr,
                "dsv4-bench: no --prompt-file given and ../shared/data/promessi_sposi.txt not found\n");
        return 2;
    }
    dsv4_error err = {0};
    dsv4_engine_params ep;
    dsv4_engine_params_default(&ep);
    ep.n_threads = o.threads;
    if (o.chunk) ep.chunk = o.chunk;
    ep.backend = o.backend;
    ep.tiers = o.tiers;
    ep.tier_mem = o.tier_mem;
    ep.tier_ctx = o.ctx_alloc;
    if (o.no_fusion) ep.fusion = false;
    bench b = {.o = &o};
    const double l0 = bench_now();
    if (dsv4_engine_open(o.model, &ep, &b.e, &err) != DSV4_OK) {
        fprintf(stderr, "dsv4-bench: cannot load model '%s': %s\n", o.model, err.msg);
        return 1;
    }
    b.load_s = bench_now() - l0;
    fprintf(stderr, "dsv4-bench: model loaded in %.2f s\n", b.load_s);
    if (dsv4_tokenizer_from_gguf(dsv4_engine_model(b.e)->file, &b.tok, &err) != DSV4_OK)
        rc = fail("tokenizer", &err);
    else
        rc = run(&b);
    free(b.snap);
    free(b.row_lat);
    free(b.rows);
    free(b.lat_ms);
    dsv4_tokens_free(&b.prompt);
    dsv4_session_free(b.s);
    dsv4_tokenizer_free(b.tok);
    dsv4_engine_close(b.e);
    return rc;
}
