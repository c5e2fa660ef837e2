#include "server/metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const double TTFT_BOUNDS[SRV_TTFT_BUCKETS] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                     1,    2.5,   5,    10,  30,   60};

void srv_metrics_init(srv_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
}

void srv_metrics_free(srv_metrics *m) { pthread_mutex_destroy(&m->mu); }

const char *srv_endpoint_name(int ep) {
    static const char *const names[SRV_EP_COUNT] = {
        "/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages",
        "/v1/models",           "/health",         "/metrics",      "other"};
    return ep >= 0 && ep < SRV_EP_COUNT ? names[ep] : "other";
}

void srv_metrics_request(srv_metrics *m, int ep, int status) {
    if (ep < 0 || ep >= SRV_EP_COUNT) ep = SRV_EP_OTHER;
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < SRV_STATUS_SLOTS; i++) {
        if (m->req[ep][i].count && m->req[ep][i].status != status) continue;
        m->req[ep][i].status = status;
        m->req[ep][i].count++;
        break;
    }
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_ttft(srv_metrics *m, double s) {
    pthread_mutex_lock(&m->mu);
    int b = 0;
    while (b < SRV_TTFT_BUCKETS && s > TTFT_BOUNDS[b]) b++;
    m->ttft_bucket[b]++;
    m->ttft_sum += s;
    m->ttft_count++;
    pthread_mutex_unlock(&m->mu);
}

static void line(dsv4_strbuf *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void line(dsv4_strbuf *o, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    dsv4_error err;
    if (n > 0) dsv4_strbuf_append(o, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1, &err);
}

static void counter(dsv4_strbuf *o, const char *name, const char *help, uint64_t v) {
    line(o, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, (unsigned long long)v);
}

static void gauge(dsv4_strbuf *o, const char *name, const char *help, double v) {
    line(o, "# HELP %s %s\n# TYPE %s gauge\n%s %.6g\n", name, help, name, name, v);
}

void srv_metrics_render(srv_metrics *m, dsv4_strbuf *o) {
    pthread_mutex_lock(&m->mu);
    line(o, "# HELP dsv4_requests_total HTTP requests by endpoint and status code.\n"
            "# TYPE dsv4_requests_total counter\n");
    for (int ep = 0; ep < SRV_EP_COUNT; ep++)
        for (int i = 0; i < SRV_STATUS_SLOTS && m->req[ep][i].count; i++)
            line(o, "dsv4_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n", srv_endpoint_name(ep),
                 m->req[ep][i].status, (unsigned long long)m->req[ep][i].count);
    counter(o, "dsv4_prompt_tokens_total", "Prompt tokens of completed generations.", m->prompt_tokens);
    counter(o, "dsv4_cached_tokens_total", "Prompt tokens reused from the live KV state.", m->cached_tokens);
    counter(o, "dsv4_generated_tokens_total", "Generated tokens.", m->generated_tokens);
    counter(o, "dsv4_prefix_extend_total", "Prompts that extended the live session (suffix prefill only).",
            m->prefix_extend);
    counter(o, "dsv4_prefix_rewind_total",
            "Prompts served by rewinding the live session to a checkpoint and replaying.", m->prefix_rewind);
    counter(o, "dsv4_prefix_rebuild_total", "Prompts prefilled from scratch.", m->prefix_rebuild);
    counter(o, "dsv4_requests_cancelled_total", "Generations cancelled by a client disconnect.",
            m->cancelled);
    counter(o, "dsv4_requests_rejected_total", "Requests rejected with 429 because the queue was full.",
            m->rejected_queue_full);
    gauge(o, "dsv4_prefill_tokens_per_second", "Prefill speed of the last request.", m->prefill_tps);
    gauge(o, "dsv4_decode_tokens_per_second", "Decode speed of the last request.", m->decode_tps);
    line(o, "# HELP dsv4_time_to_first_token_seconds Time from request arrival to the first token.\n"
            "# TYPE dsv4_time_to_first_token_seconds histogram\n");
    uint64_t cum = 0;
    for (int b = 0; b < SRV_TTFT_BUCKETS; b++) {
        cum += m->ttft_bucket[b];
        line(o, "dsv4_time_to_first_token_seconds_bucket{le=\"%g\"} %llu\n", TTFT_BOUNDS[b],
             (unsigned long long)cum);
    }
    cum += m->ttft_bucket[SRV_TTFT_BUCKETS];
    line(o, "dsv4_time_to_first_token_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)cum);
    line(o, "dsv4_time_to_first_token_seconds_sum %.6f\n", m->ttft_sum);
    line(o, "dsv4_time_to_first_token_seconds_count %llu\n", (unsigned long long)m->ttft_count);
    gauge(o, "dsv4_queue_depth", "Requests waiting for the engine worker.", m->queue_depth);
    gauge(o, "dsv4_busy", "1 while the engine worker runs a request.", m->busy);
    gauge(o, "dsv4_kv_bytes", "Bytes of the live session's KV state.", (double)m->kv_bytes);
    gauge(o, "dsv4_checkpoint_bytes", "Bytes held by prefix-rewind checkpoints.", (double)m->ckpt_bytes);
    gauge(o, "dsv4_tool_memory_ids", "Tool-call ids remembered for exact DSML replay.", (double)m->tool_ids);
    line(o,
         "# HELP dsv4_tier_switches_total Active-tier changes by transition mode (decode, batch, nocopy).\n"
         "# TYPE dsv4_tier_switches_total counter\n");
    for (int k = 0; k < DSV4_TIER_MODES; k++)
        line(o, "dsv4_tier_switches_total{mode=\"%s\"} %llu\n", dsv4_tier_mode_name((dsv4_tier_mode)k),
             (unsigned long long)m->engine.tier_switches[k]);
    line(o, "# HELP dsv4_tier_bytes_total Bytes of hidden state copied across tiers by transition mode.\n"
            "# TYPE dsv4_tier_bytes_total counter\n");
    for (int k = 0; k < DSV4_TIER_MODES; k++)
        line(o, "dsv4_tier_bytes_total{mode=\"%s\"} %llu\n", dsv4_tier_mode_name((dsv4_tier_mode)k),
             (unsigned long long)m->engine.tier_bytes[k]);
    line(o, "# HELP dsv4_fusion_total Fused-op decisions by fusion and outcome.\n"
            "# TYPE dsv4_fusion_total counter\n");
    for (int f = 0; f < DSV4_FUSED_COUNT; f++) {
        const dsv4_fusion_counts *c = &m->engine.fusion[f];
        const char *nm = dsv4_fusion_name((dsv4_fused_op)f);
        line(o, "dsv4_fusion_total{fusion=\"%s\",outcome=\"selected\"} %llu\n", nm,
             (unsigned long long)c->selected);
        line(o, "dsv4_fusion_total{fusion=\"%s\",outcome=\"fallback\"} %llu\n", nm,
             (unsigned long long)c->fallback);
        line(o, "dsv4_fusion_total{fusion=\"%s\",outcome=\"faulted\"} %llu\n", nm,
             (unsigned long long)c->faulted);
        line(o, "dsv4_fusion_total{fusion=\"%s\",outcome=\"skipped\"} %llu\n", nm,
             (unsigned long long)c->skipped);
    }
    pthread_mutex_unlock(&m->mu);
}
