/* `dsv4-gguf synth`: a random-weight model of any shape of the family. The tiny preset gets a BPE
 * vocabulary trained on a small corpus (so tokenizer tests see real merges); flash-sized
 * vocabularies are synthetic (byte tokens + generated merges), since training 129k merges on a
 * test corpus is neither fast nor meaningful. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/status.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/synth.h"
#include "text/bpe_train.h"
#include "tool.h"

static void synth_usage(FILE *o) {
    fprintf(
        o,
        "usage: dsv4-gguf synth [options] OUT.gguf\n"
        "  --preset tiny|flash     shape preset (default tiny)\n"
        "  --quant q2|q4|q8|f16|f32  type recipe (default q2: dense Q8_0, HC/router/compressor/indexer F16,\n"
        "                          experts IQ2_XXS gate/up + Q2_K down; q4/q8: experts Q4_K/Q8_0;\n"
        "                          f16: every matmul F16; f32: everything F32)\n"
        "  --layers N --embd N --vocab N --heads N --head-dim N --rot N --q-lora N --o-lora N\n"
        "  --groups N --experts N --experts-used N --ff N --hash-layers N --swa N --idx-heads N\n"
        "  --idx-dim N --idx-topk N --hc N --ratios R0,R1,...   shape overrides\n"
        "  --seed N                random seed (default 1)\n"
        "  --threads N             writer threads (default: online CPUs)\n"
        "  --sparse                write header (+ tid2eid) only; the data is a hole of the full size\n"
        "  --sparse-experts        routed expert weights are a hole (zeros); every other tensor is written\n"
        "                          (routing and attention real: speed and placement runs of huge shapes)\n"
        "  --tokenizer bpe|synthetic  vocabulary strings (default: bpe for tiny, synthetic for flash)\n"
        "  --corpus FILE           text for the BPE vocabulary (default data/tiny-corpus.txt)\n"
        "  --name NAME             general.name\n");
}

static bool parse_u32(const char *s, uint32_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || v > UINT32_MAX || s[0] == '-') return false;
    *out = (uint32_t)v;
    return true;
}

static bool parse_ratios(const char *s, uint32_t **out, uint32_t *n) {
    uint32_t cap = 16, k = 0;
    uint32_t *v = malloc(cap * sizeof *v);
    if (!v) return false;
    const char *p = s;
    while (*p) {
        char buf[32];
        size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof buf) goto bad;
        memcpy(buf, p, len);
        buf[len] = 0;
        if (k == cap) {
            uint32_t *nv = realloc(v, (cap *= 2) * sizeof *v);
            if (!nv) goto bad;
            v = nv;
        }
        if (!parse_u32(buf, &v[k++])) goto bad;
        p += len;
        if (*p == ',') p++;
    }
    if (k == 0) goto bad;
    *out = v;
    *n = k;
    return true;
bad:
    free(v);
    return false;
}

/* data/tiny-corpus.txt next to the build dir of this executable, else under the cwd. */
static bool find_default_corpus(char *out, size_t n) {
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = 0;
        for (int up = 0; up < 3; up++) {
            char *slash = strrchr(exe, '/');
            if (!slash) break;
            *slash = 0;
            if (strlen(exe) + 22 > n) break;
            memcpy(out, exe, strlen(exe));
            memcpy(out + strlen(exe), "/data/tiny-corpus.txt", 22);
            if (access(out, R_OK) == 0) return true;
        }
    }
    snprintf(out, n, "data/tiny-corpus.txt");
    return access(out, R_OK) == 0;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    while (b) {
        if (n == cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
        }
        size_t r = fread(b + n, 1, cap - n, f);
        if (r == 0) break;
        n += r;
    }
    if (b && ferror(f)) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = n;
    return b;
}

/* Set by SIGINT/SIGTERM so the writer stops and removes its partial file. */
static volatile sig_atomic_t g_cancel;
static void on_signal(int sig) {
    (void)sig;
    g_cancel = 1;
}

typedef struct progress_state {
    bool tty;
    double t0;
} progress_state;

#include <time.h>
static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void on_progress(void *ud, uint64_t done, uint64_t total) {
    progress_state *p = ud;
    if (!p->tty || !total) return;
    double dt = mono_s() - p->t0;
    double rate = dt > 0 ? done / dt : 0;
    fprintf(stderr, "\rsynth: %.2f / %.2f GiB (%3.0f%%)  %.0f MB/s  ETA %.0f s   ", done / 1073741824.0,
            total / 1073741824.0, 100.0 * done / total, rate / 1e6, rate > 0 ? (total - done) / rate : 0.0);
    if (done == total) fprintf(stderr, "\n");
}

int cmd_synth(int argc, char **argv) {
    const char *preset = "tiny", *quant = "q2", *corpus = NULL, *tokenizer = NULL, *name = NULL, *out = NULL;
    const char *ratios_arg = NULL;
    uint64_t seed = 1;
    uint32_t threads = 0, layers = 0;
    bool sparse = false, sparse_experts = false, hash_given = false;
    /* Field overrides, applied after the preset. */
    struct ov {
        const char *flag;
        size_t off;
        bool set;
        uint32_t v;
    } ovs[] = {
        {"--embd", offsetof(dsv4_config, n_embd), 0, 0},
        {"--vocab", offsetof(dsv4_config, n_vocab), 0, 0},
        {"--heads", offsetof(dsv4_config, n_head), 0, 0},
        {"--head-dim", offsetof(dsv4_config, head_dim), 0, 0},
        {"--rot", offsetof(dsv4_config, n_rot), 0, 0},
        {"--q-lora", offsetof(dsv4_config, q_lora_rank), 0, 0},
        {"--o-lora", offsetof(dsv4_config, o_lora_rank), 0, 0},
        {"--groups", offsetof(dsv4_config, n_out_group), 0, 0},
        {"--experts", offsetof(dsv4_config, n_expert), 0, 0},
        {"--experts-used", offsetof(dsv4_config, n_expert_used), 0, 0},
        {"--ff", offsetof(dsv4_config, n_ff_exp), 0, 0},
        {"--hash-layers", offsetof(dsv4_config, n_hash_layer), 0, 0},
        {"--swa", offsetof(dsv4_config, n_swa), 0, 0},
        {"--idx-heads", offsetof(dsv4_config, idx_n_head), 0, 0},
        {"--idx-dim", offsetof(dsv4_config, idx_head_dim), 0, 0},
        {"--idx-topk", offsetof(dsv4_config, idx_top_k), 0, 0},
        {"--hc", offsetof(dsv4_config, n_hc), 0, 0},
    };
    const size_t n_ovs = sizeof ovs / sizeof ovs[0];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            synth_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--sparse")) {
            sparse = true;
            continue;
        }
        if (!strcmp(a, "--sparse-experts")) {
            sparse_experts = true;
            continue;
        }
        if (a[0] != '-' || a[1] == 0) {
            if (out) {
                fprintf(stderr, "dsv4-gguf synth: more than one output path ('%s', '%s')\n", out, a);
                return 2;
            }
            out = a;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "dsv4-gguf synth: option %s needs a value\n", a);
            return 2;
        }
        const char *v = argv[++i];
        bool ok = true;
        if (!strcmp(a, "--preset"))
            preset = v;
        else if (!strcmp(a, "--quant"))
            quant = v;
        else if (!strcmp(a, "--corpus"))
            corpus = v;
        else if (!strcmp(a, "--tokenizer"))
            tokenizer = v;
        else if (!strcmp(a, "--name"))
            name = v;
        else if (!strcmp(a, "--ratios"))
            ratios_arg = v;
        else if (!strcmp(a, "--seed")) {
            char *end;
            errno = 0;
            seed = strtoull(v, &end, 10);
            ok = !errno && end != v && !*end;
        } else if (!strcmp(a, "--threads"))
            ok = parse_u32(v, &threads) && threads > 0;
        else if (!strcmp(a, "--layers"))
            ok = parse_u32(v, &layers) && layers > 0;
        else {
            size_t k = 0;
            while (k < n_ovs && strcmp(a, ovs[k].flag)) k++;
            if (k == n_ovs) {
                fprintf(stderr, "dsv4-gguf synth: unknown option '%s'\n", a);
                synth_usage(stderr);
                return 2;
            }
            ok = parse_u32(v, &ovs[k].v);
            ovs[k].set = true;
            if (!strcmp(a, "--hash-layers")) hash_given = true;
        }
        if (!ok) {
            fprintf(stderr, "dsv4-gguf synth: invalid value '%s' for %s\n", v, a);
            return 2;
        }
    }
    if (!out) {
        fprintf(stderr, "dsv4-gguf synth: missing OUT.gguf\n");
        synth_usage(stderr);
        return 2;
    }

    dsv4_error err;
    dsv4_error_clear(&err);
    dsv4_config cfg;
    if (dsv4_config_preset(preset, &cfg, &err) != DSV4_OK) {
        fprintf(stderr, "dsv4-gguf synth: %s\n", err.msg);
        return 2;
    }
    int rc = 1;
    dsv4_bpe_vocab bpe = {0};
    char *text = NULL;
    uint32_t long_ratio = strcmp(preset, "flash") == 0 ? 128 : 16;
    if (layers && dsv4_config_set_layers(&cfg, layers, long_ratio, cfg.swiglu_clamp[0], &err) != DSV4_OK)
        goto fail;
    if (ratios_arg) {
        uint32_t *r, nr;
        if (!parse_ratios(ratios_arg, &r, &nr)) {
            fprintf(stderr, "dsv4-gguf synth: invalid --ratios '%s' (expected N,N,...)\n", ratios_arg);
            rc = 2;
            goto done;
        }
        if (!layers && nr != cfg.n_layer &&
            dsv4_config_set_layers(&cfg, nr, long_ratio, cfg.swiglu_clamp[0], &err) != DSV4_OK) {
            free(r);
            goto fail;
        }
        if (nr != cfg.n_layer) {
            fprintf(stderr, "dsv4-gguf synth: --ratios has %u entries, the model has %u layers\n", nr,
                    cfg.n_layer);
            free(r);
            rc = 2;
            goto done;
        }
        memcpy(cfg.compress_ratio, r, nr * sizeof *r);
        free(r);
    }
    for (size_t k = 0; k < n_ovs; k++)
        if (ovs[k].set) *(uint32_t *)((uint8_t *)&cfg + ovs[k].off) = ovs[k].v;
    for (size_t k = 0; k < n_ovs; k++)
        if (ovs[k].set && !strcmp(ovs[k].flag, "--head-dim")) cfg.value_dim = cfg.head_dim;
    if (!hash_given && cfg.n_hash_layer > cfg.n_layer) cfg.n_hash_layer = cfg.n_layer;
    if (dsv4_config_validate(&cfg, &err) != DSV4_OK) {
        fprintf(stderr, "dsv4-gguf synth: invalid shape: %s\n", err.msg);
        rc = 2;
        goto done;
    }

    dsv4_synth_opts o = {.cfg = &cfg,
                         .seed = seed,
                         .n_threads = threads,
                         .sparse = sparse,
                         .sparse_experts = sparse_experts,
                         .name = name};
    if (!dsv4_type_recipe_named(quant, &o.types)) {
        fprintf(stderr, "dsv4-gguf synth: unknown --quant '%s' (expected q2, q4, q8, f16 or f32)\n", quant);
        rc = 2;
        goto done;
    }
    if (!tokenizer) tokenizer = strcmp(preset, "flash") == 0 ? "synthetic" : "bpe";
    dsv4_synth_vocab vocab = {0};
    if (!strcmp(tokenizer, "bpe")) {
        char found[PATH_MAX];
        if (!corpus) {
            if (!find_default_corpus(found, sizeof found)) {
                fprintf(stderr,
                        "dsv4-gguf synth: data/tiny-corpus.txt not found (next to the build dir or under the "
                        "current directory); pass --corpus FILE or --tokenizer synthetic\n");
                goto done;
            }
            corpus = found;
        }
        size_t len = 0;
        text = read_file(corpus, &len);
        if (!text) {
            fprintf(stderr, "dsv4-gguf synth: cannot read corpus '%s': %s\n", corpus, strerror(errno));
            goto done;
        }
        if (dsv4_bpe_train(text, len, cfg.n_vocab, &bpe, &err) != DSV4_OK) {
            dsv4_error_prefix(&err, "training the BPE vocabulary on '%s': ", corpus);
            goto fail;
        }
        vocab = (dsv4_synth_vocab){.tokens = bpe.tokens,
                                   .n_tokens = bpe.n_tokens,
                                   .merges = bpe.merges,
                                   .n_merges = bpe.n_merges,
                                   .bos_id = 0,
                                   .eos_id = 1};
        o.vocab = &vocab;
    } else if (strcmp(tokenizer, "synthetic") != 0) {
        fprintf(stderr, "dsv4-gguf synth: unknown --tokenizer '%s' (expected bpe or synthetic)\n", tokenizer);
        rc = 2;
        goto done;
    }

    /* A file-size limit must surface as a write error (EFBIG), not kill us before the cleanup. */
    signal(SIGXFSZ, SIG_IGN);
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    o.cancel = &g_cancel;
    progress_state ps = {.tty = isatty(STDERR_FILENO), .t0 = mono_s()};
    o.progress = on_progress;
    o.progress_ud = &ps;
    dsv4_synth_stats st;
    if (dsv4_synth_write(&o, out, &st, &err) != DSV4_OK) goto fail;
    printf("wrote %s: %" PRIu64 " tensors, %" PRIu64 " tensor bytes, %" PRIu64 " file bytes%s in %.2f s", out,
           st.n_tensors, st.tensor_bytes, st.file_size,
           sparse           ? " (sparse)"
           : sparse_experts ? " (experts sparse)"
                            : "",
           st.seconds);
    if (!sparse && !sparse_experts && st.seconds > 0)
        printf(" (%.0f MB/s)", st.tensor_bytes / st.seconds / 1e6);
    printf("\ntensors: %" PRIu64 "\ntensor_bytes: %" PRIu64 "\n", st.n_tensors, st.tensor_bytes);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "dsv4-gguf synth: %s\n", err.msg);
    rc = 1;
done:
    free(text);
    dsv4_bpe_vocab_free(&bpe);
    dsv4_config_free(&cfg);
    return rc;
}
