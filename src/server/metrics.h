/* Prometheus metrics of the server (text exposition format 0.0.4). All updates take the lock. */
#ifndef DSV4_SERVER_METRICS_H
#define DSV4_SERVER_METRICS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "graph/stats.h"
#include "text/strbuf.h"

enum {
    SRV_EP_CHAT = 0,
    SRV_EP_COMPLETIONS,
    SRV_EP_RESPONSES,
    SRV_EP_MESSAGES,
    SRV_EP_MODELS,
    SRV_EP_HEALTH,
    SRV_EP_METRICS,
    SRV_EP_OTHER,
    SRV_EP_COUNT
};
#define SRV_TTFT_BUCKETS 12
#define SRV_STATUS_SLOTS 16

typedef struct srv_metrics {
    pthread_mutex_t mu;
    struct {
        int status;
        uint64_t count;
    } req[SRV_EP_COUNT][SRV_STATUS_SLOTS];
    uint64_t prompt_tokens, cached_tokens, generated_tokens;
    uint64_t prefix_extend, prefix_rewind, prefix_rebuild;
    uint64_t cancelled, rejected_queue_full;
    double prefill_tps, decode_tps;
    uint64_t ttft_bucket[SRV_TTFT_BUCKETS + 1]; /* last = +Inf */
    double ttft_sum;
    uint64_t ttft_count;
    uint32_t queue_depth, busy;
    uint64_t kv_bytes, ckpt_bytes, tool_ids;
    dsv4_exec_stats engine; /* tier switches / bytes per mode, fused-op counters (cumulative) */
} srv_metrics;

void srv_metrics_init(srv_metrics *m);
void srv_metrics_free(srv_metrics *m);
const char *srv_endpoint_name(int ep);
void srv_metrics_request(srv_metrics *m, int ep, int status);
void srv_metrics_ttft(srv_metrics *m, double seconds);
/* Appends the exposition text. */
void srv_metrics_render(srv_metrics *m, dsv4_strbuf *out);

#endif
