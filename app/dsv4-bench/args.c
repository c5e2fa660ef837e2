/* dsv4-bench flags (ds4-bench's names and defaults, except --ctx-max = --ctx-start and 64 gen
 * tokens by default) and the frontier schedule. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

void bench_usage(FILE *f) {
    fprintf(
        f,
        "usage: dsv4-bench -m MODEL.gguf [options]\n"
        "Measures prefill and greedy decode speed at context frontiers ctx-start, ... ctx-max: at each\n"
        "frontier only the new interval is prefilled (timed), then --gen-tokens tokens are decoded\n"
        "greedily with EOS excluded (timed) and the state is restored (untimed).\n"
        "\n"
        "  -m, --model FILE         GGUF model (required)\n"
        "  --prompt-file FILE       benchmark text (default ../shared/data/promessi_sposi.txt if present)\n"
        "  --chat-prompt-file FILE  render FILE as one no-thinking chat user message instead\n"
        "  -sys, --system TEXT      system prompt for --chat-prompt-file\n"
        "  --ctx-start N            first frontier (default 2048)\n"
        "  --ctx-max N              last frontier (default: --ctx-start)\n"
        "  --ctx-alloc N            session context (default ctx-max + gen-tokens + 1)\n"
        "  --step-incr N            linear step when --step-mul is 1 (default 2048)\n"
        "  --step-mul F             multiplicative step (default 1)\n"
        "  --gen-tokens N           greedy decode tokens per frontier (default 64); also -n, --tokens\n"
        "  --backend cpu|cuda       compute backend (default cpu); --cpu, --cuda are shorthands\n"
        "  --tiers SPEC             layer placement, e.g. cuda0:0-21,cuda1:22-42 (see dsv4 --help)\n"
        "  --tier-mem SPEC          automatic placement from budgets, e.g. 0:120G,1:120G,cpu\n"
        "  --no-fusion              never use fused ops (also DSV4_FUSION=off)\n"
        "  -t, --threads N          CPU threads (default: all online CPUs)\n"
        "  --chunk N                prefill chunk (default: the engine's)\n"
        "  --csv FILE               CSV there instead of stdout\n"
        "  --json FILE              JSON report: time to first token, decode latency p50/p95, peak RSS,\n"
        "                           KV bytes, git commit, machine, decode tok/s / --floor-tps\n"
        "  --floor-tps F            decode speed bound for the JSON fraction (default 450)\n"
        "  -h, --help               this help\n"
        "CSV columns: ctx_tokens,prefill_tokens,prefill_tps,gen_tokens,gen_tps,kvcache_bytes\n");
}

static int bad(const char *flag, const char *val) {
    fprintf(stderr, "dsv4-bench: invalid value for %s: '%s'\n", flag, val);
    return 2;
}

static int pos_u32(const char *flag, const char *s, uint32_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno || v <= 0 || v > INT_MAX) return bad(flag, s);
    *out = (uint32_t)v;
    return 0;
}

static int num(const char *flag, const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v)) return bad(flag, s);
    *out = v;
    return 0;
}

static bool is(const char *a, const char *x, const char *y) { return !strcmp(a, x) || (y && !strcmp(a, y)); }

int bench_parse_args(int argc, char **argv, bench_opts *o) {
    memset(o, 0, sizeof *o);
    o->system = "You are a helpful assistant";
    o->backend = "cpu";
    o->ctx_start = 2048;
    o->step_incr = 2048;
    o->step_mul = 1.0;
    o->gen_tokens = 64;
    o->floor_tps = 450.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (is(a, "-h", "--help")) {
            o->help = true;
            return 0;
        }
        if (is(a, "--cpu", NULL) || is(a, "--cuda", NULL)) {
            o->backend = a + 2;
            continue;
        }
        if (is(a, "--no-fusion", NULL)) {
            o->no_fusion = true;
            continue;
        }
        static const char *const valued[] = {
            "-m",          "--model",     "--prompt-file", "--chat-prompt-file",
            "-sys",        "--system",    "--ctx-start",   "--ctx-max",
            "--ctx-alloc", "--step-incr", "--step-mul",    "--gen-tokens",
            "-n",          "--tokens",    "--backend",     "-t",
            "--threads",   "--chunk",     "--csv",         "--json",
            "--floor-tps", "--tiers",     "--tier-mem"};
        bool known = false;
        for (size_t k = 0; k < sizeof valued / sizeof *valued; k++) known |= !strcmp(a, valued[k]);
        if (!known) {
            fprintf(stderr, "dsv4-bench: unknown option '%s' (see dsv4-bench --help)\n", a);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "dsv4-bench: %s needs a value\n", a);
            return 2;
        }
        const char *v = argv[++i];
        int rc = 0;
        if (is(a, "-m", "--model"))
            o->model = v;
        else if (is(a, "--prompt-file", NULL))
            o->prompt_file = v;
        else if (is(a, "--chat-prompt-file", NULL))
            o->chat_prompt_file = v;
        else if (is(a, "-sys", "--system"))
            o->system = v;
        else if (is(a, "--csv", NULL))
            o->csv = v;
        else if (is(a, "--json", NULL))
            o->json = v;
        else if (is(a, "--tiers", NULL))
            o->tiers = v;
        else if (is(a, "--tier-mem", NULL))
            o->tier_mem = v;
        else if (is(a, "--backend", NULL)) {
            if (strcmp(v, "cpu") && strcmp(v, "cuda")) return bad(a, v);
            o->backend = v;
        } else if (is(a, "--ctx-start", NULL))
            rc = pos_u32(a, v, &o->ctx_start);
        else if (is(a, "--ctx-max", NULL))
            rc = pos_u32(a, v, &o->ctx_max);
        else if (is(a, "--ctx-alloc", NULL))
            rc = pos_u32(a, v, &o->ctx_alloc);
        else if (is(a, "--step-incr", NULL))
            rc = pos_u32(a, v, &o->step_incr);
        else if (is(a, "--step-mul", NULL))
            rc = num(a, v, &o->step_mul);
        else if (is(a, "--gen-tokens", "-n") || is(a, "--tokens", NULL))
            rc = pos_u32(a, v, &o->gen_tokens);
        else if (is(a, "-t", "--threads"))
            rc = pos_u32(a, v, &o->threads);
        else if (is(a, "--chunk", NULL))
            rc = pos_u32(a, v, &o->chunk);
        else if (is(a, "--floor-tps", NULL)) {
            rc = num(a, v, &o->floor_tps);
            if (!rc && o->floor_tps <= 0) return bad(a, v);
        }
        if (rc) return rc;
    }
    if (!o->model) {
        fprintf(stderr, "dsv4-bench: no model given (-m FILE.gguf)\n");
        return 2;
    }
    if (o->prompt_file && o->chat_prompt_file) {
        fprintf(stderr, "dsv4-bench: give only one of --prompt-file and --chat-prompt-file\n");
        return 2;
    }
    if (!o->ctx_max) o->ctx_max = o->ctx_start;
    if (o->ctx_start > o->ctx_max) {
        fprintf(stderr, "dsv4-bench: --ctx-start %u is above --ctx-max %u\n", o->ctx_start, o->ctx_max);
        return 2;
    }
    if (o->step_mul < 1.0) {
        fprintf(stderr, "dsv4-bench: --step-mul must be >= 1\n");
        return 2;
    }
    if ((uint64_t)o->ctx_max + o->gen_tokens + 1 > INT_MAX) {
        fprintf(stderr, "dsv4-bench: the requested context is too large\n");
        return 2;
    }
    if (!o->ctx_alloc) o->ctx_alloc = o->ctx_max + o->gen_tokens + 1;
    if (o->ctx_alloc <= o->ctx_max + o->gen_tokens) {
        fprintf(stderr, "dsv4-bench: --ctx-alloc %u must be greater than ctx-max + gen-tokens (%u)\n",
                o->ctx_alloc, o->ctx_max + o->gen_tokens);
        return 2;
    }
    return 0;
}

uint32_t bench_next_frontier(const bench_opts *o, uint32_t cur) {
    if (cur >= o->ctx_max) return o->ctx_max;
    uint64_t next;
    if (o->step_mul == 1.0) {
        next = (uint64_t)cur + o->step_incr;
    } else {
        const double v = ceil((double)cur * o->step_mul);
        next = v >= (double)o->ctx_max ? o->ctx_max : (uint64_t)v;
        if (next <= cur) next = (uint64_t)cur + 1;
    }
    return next > o->ctx_max ? o->ctx_max : (uint32_t)next;
}

static bool readable(const char *p) { return access(p, R_OK) == 0; }

const char *bench_default_prompt(char *buf, size_t cap) {
    static const char rel[] = "../shared/data/promessi_sposi.txt";
    if (readable(rel)) return rel;
    /* the binary lives in <repo>/<build>/: try <repo>/../shared/data */
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return NULL;
    exe[n] = 0;
    for (int up = 0; up < 2; up++) {
        char *slash = strrchr(exe, '/');
        if (!slash) return NULL;
        *slash = 0;
    }
    if ((size_t)snprintf(buf, cap, "%s/%s", exe, rel) >= cap) return NULL;
    return readable(buf) ? buf : NULL;
}
