/* Per-op timing aggregation: keyed entries, a stable order, the printed table. */
#include "backend/op_profile.h"

#include <stdlib.h>
#include <string.h>

static uint64_t key_hash(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static bool index_build(dsv4_opprof *p, size_t cap) {
    int32_t *ix = (int32_t *)malloc(cap * sizeof *ix);
    if (!ix) return false;
    for (size_t i = 0; i < cap; i++) ix[i] = -1;
    for (size_t i = 0; i < p->n; i++) {
        size_t h = (size_t)key_hash(p->e[i].key) & (cap - 1);
        while (ix[h] >= 0) h = (h + 1) & (cap - 1);
        ix[h] = (int32_t)i;
    }
    free(p->index);
    p->index = ix;
    p->index_cap = cap;
    return true;
}

dsv4_status dsv4_opprof_init(dsv4_opprof *p, dsv4_error *err) {
    memset(p, 0, sizeof *p);
    p->cap = 64;
    p->e = (dsv4_opprof_entry *)calloc(p->cap, sizeof *p->e);
    if (!p->e || !index_build(p, 256)) {
        dsv4_opprof_free(p);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory for the op profile");
    }
    return DSV4_OK;
}

void dsv4_opprof_free(dsv4_opprof *p) {
    free(p->e);
    free(p->index);
    memset(p, 0, sizeof *p);
}

int32_t dsv4_opprof_slot(dsv4_opprof *p, const char *key) {
    char k[DSV4_OPPROF_KEY];
    snprintf(k, sizeof k, "%s", key);
    const size_t mask = p->index_cap - 1;
    size_t h = (size_t)key_hash(k) & mask;
    for (; p->index[h] >= 0; h = (h + 1) & mask)
        if (strcmp(p->e[p->index[h]].key, k) == 0) return p->index[h];
    if (p->n == p->cap) {
        dsv4_opprof_entry *ne = (dsv4_opprof_entry *)realloc(p->e, 2 * p->cap * sizeof *ne);
        if (!ne) return -1;
        p->e = ne;
        p->cap *= 2;
    }
    dsv4_opprof_entry *e = &p->e[p->n];
    memset(e, 0, sizeof *e);
    memcpy(e->key, k, sizeof k);
    p->index[h] = (int32_t)p->n++;
    /* keep the index at most half full */
    if (2 * p->n > p->index_cap && !index_build(p, 2 * p->index_cap)) {
        p->index[h] = -1; /* the old index stays valid without the new key */
        p->n--;
        return -1;
    }
    return (int32_t)(p->n - 1);
}

void dsv4_opprof_add_call(dsv4_opprof *p, int32_t slot, double host_us) {
    if (slot < 0 || (size_t)slot >= p->n) return;
    p->e[slot].calls++;
    p->e[slot].host_us += host_us;
}

void dsv4_opprof_add_gpu(dsv4_opprof *p, int32_t slot, double gpu_ms) {
    if (slot < 0 || (size_t)slot >= p->n) return;
    p->e[slot].gpu_calls++;
    p->e[slot].gpu_ms += gpu_ms;
}

double dsv4_opprof_gpu_total_ms(const dsv4_opprof *p) {
    double s = 0;
    for (size_t i = 0; i < p->n; i++) s += p->e[i].gpu_ms;
    return s;
}

int64_t dsv4_opprof_add_stamps(dsv4_opprof *p, const dsv4_opprof_stamp *s, size_t n, uint32_t n_scopes,
                               FILE *log, uint64_t *span_ns) {
    *span_ns = 0;
    uint64_t *open = calloc((size_t)n_scopes + 1, sizeof *open); /* before's t + 1; 0: none open */
    if (!open) return -1;
    uint64_t t0 = UINT64_MAX, t1 = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i].t < t0) t0 = s[i].t;
        if (s[i].t > t1) t1 = s[i].t;
    }
    if (log) fprintf(log, "ns,after,scope,key\n");
    int64_t lost = 0;
    for (size_t i = 0; i < n; i++) {
        const uint32_t scope = s[i].tag >> 1;
        if (scope >= n_scopes || s[i].slot >= p->n) {
            lost++;
            continue;
        }
        if (log)
            fprintf(log, "%llu,%u,%u,\"%s\"\n", (unsigned long long)(s[i].t - t0), s[i].tag & 1u, scope,
                    p->e[s[i].slot].key);
        if (!(s[i].tag & 1u)) {
            open[scope] = s[i].t + 1;
        } else if (open[scope]) {
            dsv4_opprof_add_gpu(p, (int32_t)s[i].slot, (double)(s[i].t - (open[scope] - 1)) * 1e-6);
            open[scope] = 0;
        } else {
            lost++;
        }
    }
    free(open);
    *span_ns = n ? t1 - t0 : 0;
    return lost;
}

static int entry_cmp(const dsv4_opprof_entry *a, const dsv4_opprof_entry *b) {
    if (a->gpu_ms != b->gpu_ms) return a->gpu_ms > b->gpu_ms ? -1 : 1;
    if (a->host_us != b->host_us) return a->host_us > b->host_us ? -1 : 1;
    return strcmp(a->key, b->key);
}

void dsv4_opprof_order(const dsv4_opprof *p, uint32_t *order) {
    /* insertion sort: a few dozen keys, printed once */
    for (size_t i = 0; i < p->n; i++) {
        size_t j = i;
        while (j > 0 && entry_cmp(&p->e[i], &p->e[order[j - 1]]) < 0) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = (uint32_t)i;
    }
}

static double per(double v, uint64_t n) { return n ? v / (double)n : 0.0; }

bool dsv4_opprof_print(const dsv4_opprof *p, const dsv4_opprof_totals *t, const char *title, FILE *f) {
    fprintf(f, "== op profile: %s ==\n", title ? title : "");
    uint32_t *order = (uint32_t *)malloc((p->n ? p->n : 1) * sizeof *order);
    if (!order) {
        fprintf(f, "(out of memory sorting %zu keys)\n", p->n);
        return false;
    }
    dsv4_opprof_order(p, order);
    int kw = 2;
    for (size_t i = 0; i < p->n; i++) {
        const int l = (int)strlen(p->e[i].key);
        if (l > kw) kw = l;
    }
    const double gpu_sum = dsv4_opprof_gpu_total_ms(p);
    /* host time inside GPU ops only: host-only ops (allocation) may fall outside the wall window */
    double host_gpu_us = 0;
    uint64_t calls = 0, gpu_op_calls = 0;
    for (size_t i = 0; i < p->n; i++) {
        calls += p->e[i].calls;
        if (!p->e[i].gpu_calls) continue;
        host_gpu_us += p->e[i].host_us;
        gpu_op_calls += p->e[i].calls;
    }
    fprintf(f, "%-*s %9s %11s %11s %12s %7s\n", kw, "op", "calls", "GPU ms", "mean GPU us", "host us",
            "share");
    for (size_t r = 0; r < p->n; r++) {
        const dsv4_opprof_entry *e = &p->e[order[r]];
        if (e->gpu_calls)
            fprintf(f, "%-*s %9llu %11.3f %11.2f %12.1f %6.2f%%\n", kw, e->key, (unsigned long long)e->calls,
                    e->gpu_ms, 1e3 * per(e->gpu_ms, e->gpu_calls), e->host_us,
                    gpu_sum > 0 ? 100.0 * e->gpu_ms / gpu_sum : 0.0);
        else
            fprintf(f, "%-*s %9llu %11s %11s %12.1f %7s\n", kw, e->key, (unsigned long long)e->calls, "-",
                    "-", e->host_us, "-");
    }
    free(order);
    const uint64_t tok = t ? t->tokens : 0;
    fprintf(f, "ops: %llu calls over %zu keys; tokens: %llu in %llu steps (embed calls)\n",
            (unsigned long long)calls, p->n, (unsigned long long)tok, (unsigned long long)(t ? t->steps : 0));
    fprintf(f, "sum of GPU op time: %.3f ms (%.3f ms/token)\n", gpu_sum, per(gpu_sum, tok));
    if (t && t->host_wall_ms >= 0) {
        const double gap = t->host_wall_ms - gpu_sum;
        fprintf(f,
                "host wall, first..last op: %.3f ms (%.3f ms/token); gap (wall - sum GPU): %.3f ms "
                "(%.1f%% of wall, %.3f ms/token)\n",
                t->host_wall_ms, per(t->host_wall_ms, tok), gap,
                t->host_wall_ms > 0 ? 100.0 * gap / t->host_wall_ms : 0.0, per(gap, tok));
    }
    if (t && t->gpu_span_ms >= 0) {
        const double idle = t->gpu_span_ms - gpu_sum;
        fprintf(f,
                "GPU span, first..last op: %.3f ms; GPU idle inside it (span - sum GPU): %.3f ms (%.1f%%)\n",
                t->gpu_span_ms, idle, t->gpu_span_ms > 0 ? 100.0 * idle / t->gpu_span_ms : 0.0);
    }
    if (t && t->host_wall_ms >= 0)
        fprintf(f,
                "host time inside GPU op calls: %.3f ms (%.2f us/call); outside them (graph, engine, app): "
                "%.3f ms\n",
                host_gpu_us / 1e3, per(host_gpu_us, gpu_op_calls), t->host_wall_ms - host_gpu_us / 1e3);
    if (t && t->host_wall_ms >= 0)
        fprintf(
            f,
            "profiler's own host time (event records, harvests; inside the wall): %.3f ms (%.2f us/call)\n",
            t->profiler_ms, per(1e3 * t->profiler_ms, calls));
    if (t)
        fprintf(f, "host-device syncs: %llu (%.2f per token, %.2f per step)%s%s; profiler flushes: %llu\n",
                (unsigned long long)t->syncs, per((double)t->syncs, tok), per((double)t->syncs, t->steps),
                t->sync_detail ? " " : "", t->sync_detail ? t->sync_detail : "",
                (unsigned long long)t->flushes);
    return true;
}
