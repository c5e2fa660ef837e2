/* dsv4 flags: strict parsing (whole-string numbers, ranges), one-line errors. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

void cli_usage(FILE *f) {
    fprintf(f,
            "usage: dsv4 -m MODEL.gguf [-p PROMPT] [options]\n"
            "  without -p: interactive multi-turn chat (type /help there)\n"
            "\n"
            "  -m, --model FILE        GGUF model (required)\n"
            "  -p, --prompt TEXT       one-shot prompt: generate, print, exit\n"
            "  -n, --n-predict N       tokens to generate (default -1: until EOS or the context end)\n"
            "      --system TEXT       system prompt (default \"%s\"; \"\" for none)\n"
            "      --nothink           no thinking (the assistant turn starts with </think>)\n"
            "      --think             thinking (default)\n"
            "      --think-max         maximum-effort thinking (HIGH below a %u-token context)\n"
            "      --temp T            temperature (default 1.0; <= 0: greedy)\n"
            "      --top-p P           nucleus sampling (default 1.0)\n"
            "      --top-k K           top-k (default 0: whole vocabulary; at most 1024)\n"
            "      --min-p P           min-p relative to the top token (default 0.05)\n"
            "      --seed N            RNG seed (default 0: time/pid based)\n"
            "  -c, --ctx N             context size in tokens (default 4096, or the model's if smaller)\n"
            "  -t, --threads N         CPU threads (default: all online CPUs)\n"
            "      --backend cpu|cuda  compute backend (default cpu); --cpu, --cuda are shorthands\n"
            "      --device N          CUDA device index (default 0)\n"
            "      --tiers SPEC        layer placement over tiers, e.g. cuda0:0-21,cuda1:22-42 or\n"
            "                          cpu:0-1,cpu:2-3,cpu:4-5 (N:A-B = CUDA device N)\n"
            "      --tier-mem SPEC     automatic placement from per-device budgets, e.g. 0:120G,1:120G,cpu\n"
            "      --no-fusion         never use fused ops (also DSV4_FUSION=off)\n"
            "      --device-info       print the backend's device, compute capability, SMs and the memory\n"
            "                          used by weights and by a KV state of --ctx tokens, then exit\n"
            "      --chunk N           prefill chunk in tokens (default %u)\n"
            "      --numerics ds4|exact  ds4's roundings (default) or plain float math without FP8/f16/FP4\n"
            "                          rounding or activation quantization (validation only)\n"
            "      --stats             print prompt tokens, prefill/decode tok/s, KV bytes, tier switches\n"
            "                          and fused-op counters on stderr (with --dump-logits: the counters)\n"
            "      --dump-tokens       print the prompt's token ids and strings, then exit\n"
            "      --dump-logits FILE  teacher-forced logits of --tokens as raw little-endian float32\n"
            "                          [n_pos][n_vocab] into FILE, plus FILE.meta; then exit\n"
            "      --tokens LIST       token ids for --dump-logits: a file (one id per line) or \"1,2,3\"\n"
            "  -h, --help              this help\n",
            DSV4_DEFAULT_SYSTEM, DSV4_THINK_MAX_MIN_CONTEXT, DSV4_DEFAULT_CHUNK);
}

static int bad(const char *flag, const char *val, const char *what) {
    fprintf(stderr, "dsv4: invalid value '%s' for %s: %s\n", val, flag, what);
    return 2;
}

static int parse_i64(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno) return bad(flag, s, "expected an integer");
    if (v < lo || v > hi) {
        fprintf(stderr, "dsv4: %s %s is out of range [%" PRId64 ", %" PRId64 "]\n", flag, s, lo, hi);
        return 2;
    }
    *out = v;
    return 0;
}

static int parse_u64(const char *flag, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    if (!*s || *s == '-') return bad(flag, s, "expected a non-negative integer");
    unsigned long long v = strtoull(s, &end, 0);
    if (*end || errno) return bad(flag, s, "expected a non-negative integer");
    *out = v;
    return 0;
}

static int parse_f(const char *flag, const char *s, float *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v)) return bad(flag, s, "expected a number");
    *out = (float)v;
    return 0;
}

static int parse_u32(const char *flag, const char *s, int64_t lo, uint32_t *out) {
    int64_t v;
    int rc = parse_i64(flag, s, lo, UINT32_MAX, &v);
    if (rc == 0) *out = (uint32_t)v;
    return rc;
}

static bool is(const char *a, const char *s, const char *l) {
    return (s && !strcmp(a, s)) || (l && !strcmp(a, l));
}

int cli_parse_args(int argc, char **argv, cli_opts *o) {
    memset(o, 0, sizeof(*o));
    o->system = DSV4_DEFAULT_SYSTEM;
    o->backend = "cpu";
    o->n_predict = -1;
    o->sampling = DSV4_SAMPLING_DEFAULTS;
    o->think = DSV4_THINK_HIGH;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        /* --flag=value is accepted as well as --flag value */
        char name[64];
        const char *val = NULL;
        const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        if (eq && (size_t)(eq - a) < sizeof name) {
            memcpy(name, a, (size_t)(eq - a));
            name[eq - a] = 0;
            a = name;
            val = eq + 1;
        }
        /* flags without a value */
        int flag = 1;
        if (is(a, "-h", "--help"))
            o->help = true;
        else if (is(a, NULL, "--nothink"))
            o->think = DSV4_THINK_NONE;
        else if (is(a, NULL, "--think"))
            o->think = DSV4_THINK_HIGH;
        else if (is(a, NULL, "--think-max"))
            o->think = DSV4_THINK_MAX;
        else if (is(a, NULL, "--stats"))
            o->stats = true;
        else if (is(a, NULL, "--dump-tokens"))
            o->dump_tokens = true;
        else if (is(a, NULL, "--device-info"))
            o->device_info = true;
        else if (is(a, NULL, "--no-fusion"))
            o->no_fusion = true;
        else if (is(a, NULL, "--cpu"))
            o->backend = "cpu";
        else if (is(a, NULL, "--cuda"))
            o->backend = "cuda";
        else
            flag = 0;
        if (flag) {
            if (val) {
                fprintf(stderr, "dsv4: %s takes no value\n", a);
                return 2;
            }
            continue;
        }
        static const char *const with_value[] = {
            "-m",         "--model",  "-p",        "--prompt",  "-n",      "--n-predict",   "--system",
            "-sys",       "--temp",   "--top-p",   "--top-k",   "--min-p", "--seed",        "-c",
            "--ctx",      "-t",       "--threads", "--backend", "--chunk", "--dump-logits", "--tokens",
            "--numerics", "--device", "--tiers",   "--tier-mem"};
        bool known = false;
        for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++)
            known |= !strcmp(a, with_value[k]);
        if (!known) {
            fprintf(stderr, "dsv4: unknown option '%s' (see dsv4 --help)\n", argv[i]);
            return 2;
        }
        if (!val) {
            if (i + 1 >= argc) {
                fprintf(stderr, "dsv4: %s needs a value\n", a);
                return 2;
            }
            val = argv[++i];
        }
        int rc = 0;
        int64_t v;
        if (is(a, "-m", "--model"))
            o->model = val;
        else if (is(a, "-p", "--prompt"))
            o->prompt = val;
        else if (is(a, "-sys", "--system"))
            o->system = val;
        else if (is(a, NULL, "--dump-logits"))
            o->dump_logits = val;
        else if (is(a, NULL, "--tokens"))
            o->tokens = val;
        else if (is(a, NULL, "--tiers"))
            o->tiers = val;
        else if (is(a, NULL, "--tier-mem"))
            o->tier_mem = val;
        else if (is(a, NULL, "--backend")) {
            if (strcmp(val, "cpu") && strcmp(val, "cuda")) return bad(a, val, "expected cpu or cuda");
            o->backend = val;
        } else if (is(a, "-n", "--n-predict")) {
            rc = parse_i64(a, val, -1, INT32_MAX, &o->n_predict);
        } else if (is(a, NULL, "--temp")) {
            rc = parse_f(a, val, &o->sampling.temperature);
        } else if (is(a, NULL, "--top-p")) {
            rc = parse_f(a, val, &o->sampling.top_p);
            if (!rc && !(o->sampling.top_p > 0 && o->sampling.top_p <= 1))
                return bad(a, val, "expected (0, 1]");
        } else if (is(a, NULL, "--min-p")) {
            rc = parse_f(a, val, &o->sampling.min_p);
            if (!rc && !(o->sampling.min_p >= 0 && o->sampling.min_p <= 1))
                return bad(a, val, "expected [0, 1]");
        } else if (is(a, NULL, "--top-k")) {
            rc = parse_i64(a, val, 0, DSV4_SAMPLER_MAX_TOP_K, &v);
            o->sampling.top_k = (int32_t)v;
        } else if (is(a, NULL, "--seed")) {
            rc = parse_u64(a, val, &o->seed);
        } else if (is(a, "-c", "--ctx")) {
            rc = parse_u32(a, val, 1, &o->ctx);
        } else if (is(a, "-t", "--threads")) {
            rc = parse_u32(a, val, 1, &o->threads);
            if (!rc && o->threads > 4096) return bad(a, val, "at most 4096 threads");
        } else if (is(a, NULL, "--numerics")) {
            if (strcmp(val, "ds4") && strcmp(val, "exact")) return bad(a, val, "expected ds4 or exact");
            o->numerics = val;
        } else if (is(a, NULL, "--chunk")) {
            rc = parse_u32(a, val, 1, &o->chunk);
        } else if (is(a, NULL, "--device")) {
            rc = parse_i64(a, val, 0, 255, &v);
            o->device = (int)v;
        }
        if (rc) return rc;
    }
    if (o->help) return 0;
    if (!o->model) {
        fprintf(stderr, "dsv4: no model given (-m FILE.gguf; see dsv4 --help)\n");
        return 2;
    }
    if (o->tiers && o->tier_mem) {
        fprintf(stderr, "dsv4: --tiers and --tier-mem are alternatives; give one\n");
        return 2;
    }
    if (o->dump_logits && !o->tokens) {
        fprintf(stderr, "dsv4: --dump-logits needs --tokens FILE_OR_LIST\n");
        return 2;
    }
    if (o->tokens && !o->dump_logits) {
        fprintf(stderr, "dsv4: --tokens is only used with --dump-logits FILE\n");
        return 2;
    }
    if (o->dump_tokens && !o->prompt) {
        fprintf(stderr, "dsv4: --dump-tokens needs a prompt (-p TEXT)\n");
        return 2;
    }
    return 0;
}
