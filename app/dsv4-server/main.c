/* dsv4-server: OpenAI- and Anthropic-compatible HTTP server (see docs/SERVER.md).
 * SIGINT/SIGTERM are blocked in every thread and taken here with sigwait, so no handler or
 * global is needed: the main thread then shuts the server down cleanly. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "server/server.h"
#include "text/tokenizer.h"

#define DEFAULT_CTX 4096u

static void usage(FILE *f) {
    fprintf(f,
            "usage: dsv4-server -m MODEL.gguf [options]\n"
            "\n"
            "  -m, --model FILE          GGUF model (required)\n"
            "      --host ADDR           listen address (default 127.0.0.1)\n"
            "      --port N              listen port (default 8000; 0 = any free port, printed)\n"
            "  -c, --ctx N               context size in tokens (default %u, or the model's if smaller)\n"
            "  -t, --threads N           CPU threads (default: all online CPUs)\n"
            "      --queue N             requests waiting for the engine before 429 (default 8)\n"
            "      --api-key KEY         require Authorization: Bearer KEY or x-api-key: KEY\n"
            "      --cors                send CORS headers (Access-Control-Allow-Origin: *)\n"
            "      --max-body BYTES      largest request body (default 8388608)\n"
            "      --request-timeout S   per-request deadline in seconds (default 600; 0 = none)\n"
            "      --tool-memory-max-ids N  tool-call ids remembered for exact DSML replay (default 100000)\n"
            "      --model-name NAME     model id reported by /v1/models (default deepseek-v4-flash)\n"
            "      --io-timeout S        drop connections idle (no bytes moving) for S seconds (default 10)\n"
            "      --backend cpu|cuda    compute backend (default cpu)\n"
            "      --tiers SPEC          layer placement, e.g. cuda0:0-21,cuda1:22-42 or cpu:0-1,cpu:2-5\n"
            "      --tier-mem SPEC       automatic placement from budgets, e.g. 0:120G,1:120G,cpu\n"
            "      --no-fusion           never use fused ops (also DSV4_FUSION=off)\n"
            "      --quiet               no per-request log lines\n"
            "  -h, --help                this help\n",
            DEFAULT_CTX);
}

static int bad(const char *flag, const char *val, const char *what) {
    fprintf(stderr, "dsv4-server: invalid value '%s' for %s: %s\n", val, flag, what);
    return 2;
}

static int parse_u64(const char *flag, const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
    char *end;
    errno = 0;
    if (!*s || *s == '-') return bad(flag, s, "expected a non-negative integer");
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || errno || v < lo || v > hi) {
        fprintf(stderr, "dsv4-server: %s %s must be an integer in [%" PRIu64 ", %" PRIu64 "]\n", flag, s, lo,
                hi);
        return 2;
    }
    *out = v;
    return 0;
}

typedef struct opts {
    const char *model, *backend, *tiers, *tier_mem;
    bool no_fusion;
    uint32_t ctx, threads;
    dsv4_server_config cfg;
    bool help;
} opts;

static int parse_args(int argc, char **argv, opts *o) {
    memset(o, 0, sizeof *o);
    dsv4_server_config_default(&o->cfg);
    o->backend = "cpu";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            o->help = true;
            continue;
        }
        if (!strcmp(a, "--cors")) {
            o->cfg.cors = true;
            continue;
        }
        if (!strcmp(a, "--quiet")) {
            o->cfg.quiet = true;
            continue;
        }
        if (!strcmp(a, "--cpu")) {
            o->backend = "cpu";
            continue;
        }
        if (!strcmp(a, "--no-fusion")) {
            o->no_fusion = true;
            continue;
        }
        static const char *const with_value[] = {"-m",
                                                 "--model",
                                                 "--host",
                                                 "--port",
                                                 "-c",
                                                 "--ctx",
                                                 "-t",
                                                 "--threads",
                                                 "--queue",
                                                 "--api-key",
                                                 "--max-body",
                                                 "--request-timeout",
                                                 "--tool-memory-max-ids",
                                                 "--model-name",
                                                 "--backend",
                                                 "--tiers",
                                                 "--tier-mem",
                                                 "--io-timeout"};
        bool known = false;
        for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++)
            known |= !strcmp(a, with_value[k]);
        if (!known) {
            fprintf(stderr, "dsv4-server: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "dsv4-server: %s needs a value\n", a);
            return 2;
        }
        const char *v = argv[++i];
        uint64_t x = 0;
        int rc = 0;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            o->model = v;
        } else if (!strcmp(a, "--host")) {
            o->cfg.host = v;
        } else if (!strcmp(a, "--port")) {
            if (!(rc = parse_u64(a, v, 0, 65535, &x))) o->cfg.port = (uint16_t)x;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) {
            if (!(rc = parse_u64(a, v, 2, UINT32_MAX, &x))) o->ctx = (uint32_t)x;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(rc = parse_u64(a, v, 1, 4096, &x))) o->threads = (uint32_t)x;
        } else if (!strcmp(a, "--queue")) {
            if (!(rc = parse_u64(a, v, 1, 65536, &x))) o->cfg.queue_max = (uint32_t)x;
        } else if (!strcmp(a, "--api-key")) {
            if (!*v) return bad(a, v, "must not be empty");
            o->cfg.api_key = v;
        } else if (!strcmp(a, "--max-body")) {
            if (!(rc = parse_u64(a, v, 1024, (uint64_t)1 << 32, &x))) o->cfg.max_body = (size_t)x;
        } else if (!strcmp(a, "--request-timeout")) {
            char *end;
            errno = 0;
            double d = strtod(v, &end);
            if (!*v || *end || errno || !isfinite(d) || d < 0 || d > 1e7)
                return bad(a, v, "expected seconds >= 0");
            o->cfg.request_timeout_s = d;
        } else if (!strcmp(a, "--tool-memory-max-ids")) {
            if (!(rc = parse_u64(a, v, 1, 100000000, &x))) o->cfg.tool_memory_max_ids = (size_t)x;
        } else if (!strcmp(a, "--model-name")) {
            if (!*v) return bad(a, v, "must not be empty");
            o->cfg.model_id = v;
        } else if (!strcmp(a, "--io-timeout")) {
            if (!(rc = parse_u64(a, v, 1, 3600, &x))) o->cfg.io_timeout_s = (uint32_t)x;
        } else if (!strcmp(a, "--backend")) {
            if (strcmp(v, "cpu") && strcmp(v, "cuda")) return bad(a, v, "expected cpu or cuda");
            o->backend = v;
        } else if (!strcmp(a, "--tiers")) {
            o->tiers = v;
        } else if (!strcmp(a, "--tier-mem")) {
            o->tier_mem = v;
        }
        if (rc) return rc;
    }
    if (!o->help && !o->model) {
        fprintf(stderr, "dsv4-server: -m MODEL is required (see --help)\n");
        return 2;
    }
    return 0;
}

int main(int argc, char **argv) {
    opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc;
    if (o.help) {
        usage(stdout);
        return 0;
    }
    /* every thread created from here on inherits the blocked set */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);

    dsv4_error err = {0};
    dsv4_engine_params ep;
    dsv4_engine_params_default(&ep);
    ep.n_threads = o.threads;
    ep.backend = o.backend;
    ep.tiers = o.tiers;
    ep.tier_mem = o.tier_mem;
    ep.tier_ctx = o.ctx;
    if (o.no_fusion) ep.fusion = false;
    dsv4_engine *e = NULL;
    if (dsv4_engine_open(o.model, &ep, &e, &err) != DSV4_OK) {
        fprintf(stderr, "dsv4-server: cannot load model '%s': %s\n", o.model, err.msg);
        return 1;
    }
    dsv4_tokenizer *tok = NULL;
    if (dsv4_tokenizer_from_gguf(dsv4_engine_model(e)->file, &tok, &err) != DSV4_OK) {
        fprintf(stderr, "dsv4-server: cannot read the tokenizer of '%s': %s\n", o.model, err.msg);
        dsv4_engine_close(e);
        return 1;
    }
    const uint64_t model_ctx = dsv4_engine_config(e)->context_length;
    uint32_t ctx = o.ctx ? o.ctx : DEFAULT_CTX;
    if (model_ctx && ctx > model_ctx) ctx = (uint32_t)model_ctx;
    o.cfg.n_ctx = ctx;
    dsv4_server *srv = NULL;
    if (dsv4_server_create(&o.cfg, e, tok, &srv, &err) != DSV4_OK) {
        fprintf(stderr, "dsv4-server: %s\n", err.msg);
        dsv4_tokenizer_free(tok);
        dsv4_engine_close(e);
        return 1;
    }
    fprintf(stderr, "dsv4-server: listening on http://%s:%u (model %s, context %u tokens, %s backend)\n",
            o.cfg.host, (unsigned)dsv4_server_port(srv), o.cfg.model_id, ctx, dsv4_engine_backend_name(e));
    printf("port %u\n", (unsigned)dsv4_server_port(srv));
    fflush(stdout);
    int sig = 0;
    while (sigwait(&stop, &sig) != 0) {
    }
    fprintf(stderr, "dsv4-server: %s, shutting down\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    dsv4_server_shutdown(srv);
    dsv4_server_free(srv);
    dsv4_tokenizer_free(tok);
    dsv4_engine_close(e);
    return 0;
}
