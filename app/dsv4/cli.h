/* dsv4 command-line program: shared types of its small parts (args, one-shot run, REPL,
 * generation loop, progress bar, logits dump, Ctrl-C handling). */
#ifndef DSV4_APP_CLI_H
#define DSV4_APP_CLI_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/engine.h"
#include "text/chat.h"
#include "text/detok.h"
#include "text/sampler.h"
#include "text/tokenizer.h"

typedef struct cli_opts {
    const char *model;
    const char *prompt;      /* NULL: interactive */
    const char *system;      /* default DSV4_DEFAULT_SYSTEM */
    const char *dump_logits; /* output file, or NULL */
    const char *tokens;      /* file or comma list for --dump-logits */
    const char *backend;     /* "cpu" */
    const char *numerics;    /* "ds4", "exact" or NULL (engine default: $DSV4_NUMERICS, else ds4) */
    int64_t n_predict;       /* -n */
    uint32_t ctx;            /* 0 = default */
    uint32_t threads;        /* 0 = all CPUs */
    uint32_t chunk;          /* 0 = engine default */
    uint64_t seed;           /* 0 = time/pid based */
    dsv4_sampling sampling;
    dsv4_think_mode think;
    bool stats;
    bool dump_tokens;
    bool device_info;     /* --device-info: print the backend's device and memory use, then exit */
    int device;           /* --device N: CUDA device index */
    const char *tiers;    /* --tiers SPEC (graph/placement.h) */
    const char *tier_mem; /* --tier-mem SPEC */
    bool no_fusion;       /* --no-fusion */
    bool help;
} cli_opts;

/* Parses argv into o. Returns 0 on success, prints a one-line error and returns 2 otherwise. */
int cli_parse_args(int argc, char **argv, cli_opts *o);
void cli_usage(FILE *f);

/* ---- Ctrl-C: the handler only sets flags (the one global a signal handler needs) ---- */
void cli_sigint_install(void);
atomic_int *cli_sigint_flag(void); /* nonzero after Ctrl-C; also the engine cancel flag */
void cli_sigint_clear(void);

/* ---- progress bars on stderr (no-ops unless stderr is a tty) ---- */
typedef struct cli_progress {
    bool tty;
    const char *label;
    double t0, last;
    bool drawn;
} cli_progress;

double cli_now(void); /* monotonic seconds */
void cli_progress_init(cli_progress *p, const char *label);
void cli_progress_update(void *user, uint32_t done, uint32_t total); /* an on_progress callback */
void cli_progress_done(cli_progress *p);

/* ---- streamed output: detok + dimmed thinking on a tty ---- */
typedef struct cli_out {
    FILE *f;
    bool tty;
    bool thinking; /* between <think> and </think> */
    bool dimmed;   /* an SGR dim is active */
    dsv4_detok detok;
    dsv4_strbuf buf;
    int32_t think_start, think_end;
} cli_out;

void cli_out_init(cli_out *o, FILE *f, const dsv4_tokenizer *t, bool thinking);
dsv4_status cli_out_token(cli_out *o, const dsv4_tokenizer *t, int32_t id, dsv4_error *err);
dsv4_status cli_out_finish(cli_out *o, dsv4_error *err); /* flush detok, reset colour */
void cli_out_free(cli_out *o);

/* ---- generation ---- */
typedef struct cli_ctx {
    const cli_opts *opts;
    dsv4_engine *engine;
    const dsv4_tokenizer *tok;
    dsv4_session *session;
    dsv4_sampler sampler;
    int32_t eos;
} cli_ctx;

typedef struct gen_stats {
    uint32_t prompt_tokens;
    double prefill_s;
    uint32_t gen_tokens;
    double decode_s;
    bool cancelled;    /* Ctrl-C during prefill or generation */
    bool prefill_done; /* the prefix was fully evaluated */
    bool hit_eos;
    bool ctx_full; /* stopped because the context is full */
} gen_stats;

/* Evaluates tokens[pos..n) (the session has evaluated tokens[0..pos) already), then samples up
 * to max_new tokens, streaming them to out and appending them (not the stopping EOS) to gen.
 * Stops at EOS, max_new, the context end or Ctrl-C (cancel flag). */
dsv4_status cli_generate(cli_ctx *c, const int32_t *tokens, uint32_t n, int64_t max_new, cli_out *out,
                         dsv4_tokens *gen, gen_stats *st, dsv4_error *err);
void cli_print_stats(const cli_ctx *c, const gen_stats *st);

/* ---- modes ---- */
int cli_run_oneshot(cli_ctx *c);
int cli_run_repl(cli_ctx *c);
int cli_dump_logits(const cli_opts *o, dsv4_engine *e);
/* --device-info: backend, device, compute capability, SMs, memory of weights and of a KV state
 * of `ctx` tokens. */
int cli_device_info(dsv4_engine *e, uint32_t ctx);
/* Weight upload progress on a tty (an engine on_upload callback; user = NULL). */
void cli_upload_progress(void *user, uint64_t done, uint64_t total);
/* Prints "index id string" lines for the ids on stdout. */
void cli_dump_tokens(const dsv4_tokenizer *t, const int32_t *ids, size_t n);

#endif
