/* The JSON report: per-frontier rows plus time to first token, decode latency percentiles, peak
 * host RSS (getrusage), git commit, machine, and decode tok/s as a fraction of --floor-tps. */
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_percentile(double *v, size_t n, double p) {
    if (!n) return 0.0;
    qsort(v, n, sizeof *v, cmp_d);
    size_t rank = (size_t)(p * (double)n + 0.999999); /* nearest rank, 1-based */
    if (rank < 1) rank = 1;
    if (rank > n) rank = n;
    return v[rank - 1];
}

static void jstr(FILE *f, const char *s) {
    if (!s) {
        fputs("null", f);
        return;
    }
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p == '\t')
            fputs("\\t", f);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void trim(char *s) {
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ')) s[--n] = 0;
}

static bool cpu_model(char *out, size_t cap) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return false;
    char line[512];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *c = strchr(line, ':');
        if (!c) continue;
        c += 1 + (c[1] == ' ');
        snprintf(out, cap, "%s", c);
        trim(out);
        found = true;
    }
    fclose(f);
    return found;
}

/* DSV4_GIT_COMMIT if set (device copies may lack .git), else `git rev-parse HEAD` in the repo
 * the binary was built in, else in the current directory. */
static bool git_commit(char *out, size_t cap) {
    const char *env = getenv("DSV4_GIT_COMMIT");
    if (env && *env) {
        snprintf(out, cap, "%s", env);
        return true;
    }
    char exe[4096] = "";
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    for (int up = 0; up < 2; up++) {
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
    }
    const char *dirs[2] = {exe[0] ? exe : ".", "."};
    for (int i = 0; i < 2; i++) {
        if (strchr(dirs[i], '\'')) continue;
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "git -C '%s' rev-parse HEAD 2>/dev/null", dirs[i]);
        FILE *p = popen(cmd, "r");
        if (!p) continue;
        bool ok = fgets(out, (int)cap, p) != NULL;
        int rc = pclose(p);
        if (ok && rc == 0) {
            trim(out);
            if (strlen(out) >= 7) return true;
        }
    }
    return false;
}

/* "placement", "tier_switches", "tier_bytes", "tier_copies" and "fusion" members. */
static void write_engine_stats(FILE *f, const dsv4_engine *e) {
    char place[512];
    const dsv4_placement *pl = dsv4_engine_placement(e);
    dsv4_placement_format(pl, place, sizeof place);
    dsv4_engine_stats s;
    dsv4_engine_stats_get(e, &s);
    fprintf(f, "  \"placement\": ");
    jstr(f, place);
    fprintf(f, ",\n  \"tiers\": %u,\n  \"tier_boundaries\": %u,\n", pl->n_tiers,
            dsv4_placement_boundaries(pl));
    const char *key[2] = {"tier_switches", "tier_bytes"};
    for (int k = 0; k < 2; k++) {
        fprintf(f, "  \"%s\": {", key[k]);
        for (int m = 0; m < DSV4_TIER_MODES; m++)
            fprintf(f, "%s\"%s\": %llu", m ? ", " : "", dsv4_tier_mode_name((dsv4_tier_mode)m),
                    (unsigned long long)(k ? s.tier_bytes[m] : s.tier_switches[m]));
        fprintf(f, "},\n");
    }
    fprintf(f, "  \"tier_copies\": {");
    for (int p = 0; p < DSV4_XCOPY_PATHS; p++)
        fprintf(f, "%s\"%s\": %llu", p ? ", " : "", dsv4_xcopy_path_name((dsv4_xcopy_path)p),
                (unsigned long long)s.xcopy[p]);
    fprintf(f, "},\n  \"fusion\": {");
    for (int op = 0; op < DSV4_FUSED_COUNT; op++) {
        const dsv4_fusion_counts *c = &s.fusion[op];
        fprintf(f, "%s\"%s\": {\"selected\": %llu, \"fallback\": %llu, \"faulted\": %llu, \"skipped\": %llu}",
                op ? ", " : "", dsv4_fusion_name((dsv4_fused_op)op), (unsigned long long)c->selected,
                (unsigned long long)c->fallback, (unsigned long long)c->faulted,
                (unsigned long long)c->skipped);
    }
    fprintf(f, "},\n  \"steps_recorded\": %llu,\n  \"steps_unrecorded\": %llu,\n",
            (unsigned long long)s.steps_recorded, (unsigned long long)s.steps_unrecorded);
    fprintf(f, "  \"step_host_ms\": {\"prepare_next\": %.3f, \"wait_logits\": %.3f},\n",
            s.step_prepare_us * 1e-3, s.step_wait_us * 1e-3);
    /* each tier's device: memory in use now (weights, buffers incl. KV, scratch) and step graphs */
    fprintf(f, "  \"devices\": [");
    for (uint32_t t = 0; t < pl->n_tiers; t++) {
        dsv4_device_info di;
        dsv4_error err = {0};
        if (dsv4_engine_tier_device_info(e, t, &di, &err) != DSV4_OK) continue;
        fprintf(f, "%s\n    {\"tier\": %u, \"backend\": ", t ? "," : "", t);
        jstr(f, di.backend);
        fprintf(f, ", \"name\": ");
        jstr(f, di.name);
        fprintf(
            f,
            ", \"total_mem\": %llu, \"free_mem\": %llu, \"weight_bytes\": %llu, \"buffer_bytes\": %llu, "
            "\"scratch_bytes\": %llu, \"used_mem\": %llu, \"step_graphs\": {\"launched\": %llu, "
            "\"updated\": %llu, \"instantiated\": %llu, \"update_refused\": %llu, \"failed\": %llu, "
            "\"stale\": %llu, \"host_ms\": {\"capture\": %.3f, \"pdl\": %.3f, \"update\": %.3f, "
            "\"instantiate\": %.3f}}, \"blas\": {\"ready\": %s, \"products\": %llu, \"conversions_shared\": "
            "%llu, \"hc_mix_rms_folded\": %llu}, \"hc_mix_tc\": %llu, \"q8_wg_products\": %llu, "
            "\"moe_f16_products\": %llu, "
            "\"moe_ws_products\": %llu, \"moe_x16_products\": %llu, "
            "\"moe_x16_steps\": %llu, \"moe_x16_heavy_steps\": %llu}",
            (unsigned long long)di.total_mem, (unsigned long long)di.free_mem,
            (unsigned long long)di.weight_bytes, (unsigned long long)di.buffer_bytes,
            (unsigned long long)di.scratch_bytes,
            (unsigned long long)(di.total_mem > di.free_mem ? di.total_mem - di.free_mem : 0),
            (unsigned long long)di.steps_launched, (unsigned long long)di.steps_updated,
            (unsigned long long)di.steps_instantiated, (unsigned long long)di.steps_update_failed,
            (unsigned long long)di.steps_failed, (unsigned long long)di.steps_stale,
            di.steps_capture_us * 1e-3, di.steps_pdl_us * 1e-3, di.steps_update_us * 1e-3,
            di.steps_instantiate_us * 1e-3, di.blas_loaded ? "true" : "false",
            (unsigned long long)di.blas_products, (unsigned long long)di.blas_shared,
            (unsigned long long)di.blas_hc_mix_folded, (unsigned long long)di.hc_mix_tc,
            (unsigned long long)di.q8_wg_products, (unsigned long long)di.moe_f16_products,
            (unsigned long long)di.moe_ws_products, (unsigned long long)di.moe_x16_products,
            (unsigned long long)di.moe_x16_steps, (unsigned long long)di.moe_x16_heavy_steps);
    }
    fprintf(f, "\n  ],\n");
}

int bench_write_json(const bench_opts *o, const bench_row *rows, size_t n_rows, uint32_t prompt_tokens,
                     uint32_t threads, const double *all_lat_ms, size_t n_lat, const dsv4_engine *e,
                     double load_s) {
    FILE *f = fopen(o->json, "w");
    if (!f) {
        perror(o->json);
        return 1;
    }
    double *lat = malloc((n_lat ? n_lat : 1) * sizeof *lat);
    if (!lat) {
        fclose(f);
        fprintf(stderr, "dsv4-bench: out of memory writing the JSON report\n");
        return 1;
    }
    if (n_lat) memcpy(lat, all_lat_ms, n_lat * sizeof *lat);
    const double p50 = bench_percentile(lat, n_lat, 0.50), p95 = bench_percentile(lat, n_lat, 0.95);
    free(lat);
    double gen_s = 0, gen_tok = 0;
    for (size_t i = 0; i < n_rows; i++) gen_s += rows[i].gen_s, gen_tok += rows[i].gen_tokens;
    const double tps = gen_s > 0 ? gen_tok / gen_s : 0.0;

    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    struct utsname un;
    const bool have_un = uname(&un) == 0;
    char cpu[256] = "", commit[128] = "", unbuf[1024] = "";
    const bool have_cpu = cpu_model(cpu, sizeof cpu), have_git = git_commit(commit, sizeof commit);
    if (have_un)
        snprintf(unbuf, sizeof unbuf, "%s %s %s %s", un.sysname, un.nodename, un.release, un.machine);

    fprintf(f, "{\n  \"tool\": \"dsv4-bench\",\n  \"model\": ");
    jstr(f, o->model);
    fprintf(f, ",\n  \"prompt_file\": ");
    jstr(f, o->chat_prompt_file ? o->chat_prompt_file : o->prompt_file);
    fprintf(f, ",\n  \"chat\": %s,\n  \"prompt_tokens\": %u,\n  \"backend\": ",
            o->chat_prompt_file ? "true" : "false", prompt_tokens);
    jstr(f, o->backend);
    fprintf(f,
            ",\n  \"threads\": %u,\n  \"chunk\": %u,\n  \"ctx_start\": %u,\n  \"ctx_max\": %u,\n  "
            "\"ctx_alloc\": %u,\n"
            "  \"gen_tokens\": %u,\n  \"git_commit\": ",
            threads, o->chunk, o->ctx_start, o->ctx_max, o->ctx_alloc, o->gen_tokens);
    jstr(f, have_git ? commit : NULL);
    fprintf(f, ",\n  \"machine\": {\"uname\": ");
    jstr(f, have_un ? unbuf : NULL);
    fprintf(f, ", \"cpu_model\": ");
    jstr(f, have_cpu ? cpu : NULL);
    fprintf(f, ", \"online_cpus\": %ld},\n", sysconf(_SC_NPROCESSORS_ONLN));
    fprintf(f, "  \"peak_rss_bytes\": %lld,\n", (long long)ru.ru_maxrss * 1024);
    fprintf(f, "  \"model_load_s\": %.6f,\n", load_s);
    write_engine_stats(f, e);
    fprintf(f, "  \"time_to_first_token_s\": %.6f,\n", n_rows ? rows[0].ttft_s : 0.0);
    fprintf(f, "  \"decode_latency_ms\": {\"p50\": %.4f, \"p95\": %.4f, \"samples\": %zu, \"all\": [", p50,
            p95, n_lat);
    /* every step in order (raw data: the warm-up steps show here, not in the percentiles) */
    for (size_t i = 0; i < n_lat; i++) fprintf(f, "%s%.4f", i ? ", " : "", all_lat_ms[i]);
    fprintf(f, "]},\n");
    fprintf(f, "  \"decode_tps\": %.4f,\n  \"floor_tps\": %.4f,\n  \"decode_floor_fraction\": %.6f,\n", tps,
            o->floor_tps, tps / o->floor_tps);
    fprintf(f, "  \"kvcache_bytes\": %llu,\n  \"rows\": [",
            n_rows ? (unsigned long long)rows[n_rows - 1].kvcache_bytes : 0ull);
    for (size_t i = 0; i < n_rows; i++) {
        const bench_row *r = &rows[i];
        const double rtps = r->gen_s > 0 ? r->gen_tokens / r->gen_s : 0.0;
        fprintf(f,
                "%s\n    {\"ctx_tokens\": %u, \"prefill_tokens\": %u, \"prefill_s\": %.6f, \"prefill_tps\": "
                "%.4f, "
                "\"ttft_s\": %.6f, \"gen_tokens\": %u, \"gen_s\": %.6f, \"gen_tps\": %.4f, "
                "\"decode_p50_ms\": %.4f, "
                "\"decode_p95_ms\": %.4f, \"decode_floor_fraction\": %.6f, \"kvcache_bytes\": %llu, "
                "\"nonfinite_logits\": %llu}",
                i ? "," : "", r->ctx_tokens, r->prefill_tokens, r->prefill_s,
                r->prefill_s > 0 ? r->prefill_tokens / r->prefill_s : 0.0, r->ttft_s, r->gen_tokens, r->gen_s,
                rtps, r->p50_ms, r->p95_ms, rtps / o->floor_tps, (unsigned long long)r->kvcache_bytes,
                (unsigned long long)r->nonfinite_logits);
    }
    fprintf(f, "\n  ]\n}\n");
    if (fclose(f) != 0) {
        fprintf(stderr, "dsv4-bench: writing '%s' failed\n", o->json);
        return 1;
    }
    return 0;
}
