/* libmicrohttpd glue: routing, auth, CORS, body limits, JSON error responses, and handing
 * generation jobs to the worker. MHD runs a thread per connection, so a non-streaming request
 * waits for its job in its own thread (watching the socket for a hang-up) and a streaming
 * response's reader blocks on the job's SSE buffer, sending keep-alive comments while idle. */
#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/srv.h"
#include "text/special.h"

typedef struct conn_ctx {
    int ep;
    srv_api api;
    dsv4_strbuf body;
    bool too_big, answered;
    srv_job *job;
} conn_ctx;

typedef struct stream_ctx {
    dsv4_server *s;
    srv_job *j;
    int fd;
    double last;
} stream_ctx;

/* ---- responses ---- */

static void add_cors(dsv4_server *s, struct MHD_Connection *c, struct MHD_Response *r) {
    if (!s->cfg.cors) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    const char *req = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    MHD_add_response_header(r, "Access-Control-Allow-Headers",
                            req && strlen(req) < 1024
                                ? req
                                : "Authorization, Content-Type, x-api-key, anthropic-version, "
                                  "anthropic-beta, openai-beta");
    MHD_add_response_header(r, "Access-Control-Max-Age", "86400");
}

static enum MHD_Result send_buf(dsv4_server *s, struct MHD_Connection *c, int ep, int status,
                                const char *ctype, char *body /* malloc'd, taken */, const char *extra_k,
                                const char *extra_v) {
    const size_t n = body ? strlen(body) : 0;
    struct MHD_Response *r = MHD_create_response_from_buffer(
        n, body ? body : (char *)"", body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    if (ctype) MHD_add_response_header(r, "Content-Type", ctype);
    if (extra_k) MHD_add_response_header(r, extra_k, extra_v);
    add_cors(s, c, r);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    srv_metrics_request(&s->metrics, ep, status);
    return ret;
}

static enum MHD_Result send_json(dsv4_server *s, struct MHD_Connection *c, int ep, int status, json_t *j) {
    char *body = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return send_buf(s, c, ep, status, "application/json", body, NULL, NULL);
}

static enum MHD_Result send_error(dsv4_server *s, struct MHD_Connection *c, int ep, srv_api api,
                                  const srv_err *e, const char *extra_k, const char *extra_v) {
    return send_buf(s, c, ep, e->status, "application/json", srv_error_body(api, e), extra_k, extra_v);
}

static enum MHD_Result simple_error(dsv4_server *s, struct MHD_Connection *c, int ep, srv_api api, int status,
                                    const char *type, const char *code, const char *msg) {
    srv_err e;
    srv_err_set(&e, status, type, code, NULL, "%s", msg);
    return send_error(s, c, ep, api, &e, NULL, NULL);
}

/* ---- routing ---- */

typedef struct route {
    const char *path;
    int ep;
    srv_api api;
    bool post;
} route;

static const route ROUTES[] = {
    {"/v1/chat/completions", SRV_EP_CHAT, SRV_API_CHAT, true},
    {"/chat/completions", SRV_EP_CHAT, SRV_API_CHAT, true},
    {"/v1/completions", SRV_EP_COMPLETIONS, SRV_API_COMPLETIONS, true},
    {"/completions", SRV_EP_COMPLETIONS, SRV_API_COMPLETIONS, true},
    {"/v1/responses", SRV_EP_RESPONSES, SRV_API_RESPONSES, true},
    {"/responses", SRV_EP_RESPONSES, SRV_API_RESPONSES, true},
    {"/v1/messages", SRV_EP_MESSAGES, SRV_API_MESSAGES, true},
    {"/messages", SRV_EP_MESSAGES, SRV_API_MESSAGES, true},
    {"/v1/models", SRV_EP_MODELS, SRV_API_CHAT, false},
    {"/models", SRV_EP_MODELS, SRV_API_CHAT, false},
    {"/health", SRV_EP_HEALTH, SRV_API_CHAT, false},
    {"/metrics", SRV_EP_METRICS, SRV_API_CHAT, false},
};

static const route *find_route(const char *url, const char **model_id) {
    *model_id = NULL;
    for (size_t i = 0; i < sizeof ROUTES / sizeof *ROUTES; i++) {
        const size_t n = strlen(ROUTES[i].path);
        if (strcmp(url, ROUTES[i].path) == 0) return &ROUTES[i];
        if (ROUTES[i].ep == SRV_EP_MODELS && strncmp(url, ROUTES[i].path, n) == 0 && url[n] == '/' &&
            url[n + 1]) {
            *model_id = url + n + 1;
            return &ROUTES[i];
        }
    }
    return NULL;
}

/* Constant-time comparison (length differences are folded into the result too). */
static bool key_equal(const char *a, const char *b) {
    const size_t na = strlen(a), nb = strlen(b);
    unsigned diff = (unsigned)(na ^ nb);
    for (size_t i = 0; i < nb; i++) diff |= (unsigned char)(i < na ? a[i] : 0) ^ (unsigned char)b[i];
    return diff == 0;
}

static bool authorized(dsv4_server *s, struct MHD_Connection *c) {
    if (!s->cfg.api_key || !*s->cfg.api_key) return true;
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    const char *xkey = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    bool ok = false;
    if (auth && strncasecmp(auth, "Bearer ", 7) == 0) ok |= key_equal(auth + 7, s->cfg.api_key);
    if (xkey) ok |= key_equal(xkey, s->cfg.api_key);
    return ok;
}

static bool is_known_model(dsv4_server *s, const char *id) {
    return strcmp(id, s->cfg.model_id) == 0 || strcmp(id, "deepseek-chat") == 0 ||
           strcmp(id, "deepseek-reasoner") == 0;
}

static json_t *model_obj(const char *id) {
    return json_pack("{s:s,s:s,s:I,s:s}", "id", id, "object", "model", "created", (json_int_t)0, "owned_by",
                     "dsv4");
}

static enum MHD_Result handle_get(dsv4_server *s, struct MHD_Connection *c, const route *rt,
                                  const char *model) {
    if (rt->ep == SRV_EP_HEALTH) {
        pthread_mutex_lock(&s->mu);
        const bool stopping = s->stopping;
        pthread_mutex_unlock(&s->mu);
        return send_json(
            s, c, rt->ep, stopping ? 503 : 200,
            json_pack("{s:s,s:s}", "status", stopping ? "shutting_down" : "ok", "model", s->cfg.model_id));
    }
    if (rt->ep == SRV_EP_METRICS) {
        pthread_mutex_lock(&s->metrics.mu);
        s->metrics.tool_ids = 0;
        pthread_mutex_unlock(&s->metrics.mu);
        const size_t ids = srv_toolmem_count(&s->toolmem);
        pthread_mutex_lock(&s->metrics.mu);
        s->metrics.tool_ids = ids;
        pthread_mutex_unlock(&s->metrics.mu);
        dsv4_strbuf b = {0};
        srv_metrics_render(&s->metrics, &b);
        return send_buf(s, c, rt->ep, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, NULL, NULL);
    }
    if (model) {
        if (!is_known_model(s, model)) {
            srv_err e;
            srv_err_set(&e, 404, "invalid_request_error", "model_not_found", "model",
                        "The model '%.200s' does not exist", model);
            return send_error(s, c, rt->ep, SRV_API_CHAT, &e, NULL, NULL);
        }
        return send_json(s, c, rt->ep, 200, model_obj(model));
    }
    json_t *data = json_array();
    json_array_append_new(data, model_obj(s->cfg.model_id));
    return send_json(s, c, rt->ep, 200, json_pack("{s:s,s:o}", "object", "list", "data", data));
}

/* ---- generation requests ---- */

static char *lookup_tool(void *user, const char *id) { return srv_toolmem_get(user, id); }

static bool peer_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {fd, POLLRDHUP, 0};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

static void mark_gone(srv_job *j) {
    atomic_store(&j->gone, 1);
    atomic_store(&j->cancel, 1);
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream_ctx *sc = cls;
    srv_job *j = sc->j;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        const size_t avail = j->sse.len - j->sse_off;
        if (avail) {
            const size_t n = avail < max ? avail : max;
            memcpy(buf, j->sse.data + j->sse_off, n);
            j->sse_off += n;
            if (j->sse_off == j->sse.len) j->sse_off = j->sse.len = 0;
            pthread_mutex_unlock(&j->mu);
            sc->last = srv_now();
            return (ssize_t)n;
        }
        if (j->done) {
            pthread_mutex_unlock(&j->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
        if (j->sse.len - j->sse_off || j->done) continue;
        if (peer_gone(sc->fd)) {
            mark_gone(j);
            pthread_mutex_unlock(&j->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (srv_now() - sc->last >= sc->s->cfg.keepalive_s) {
            pthread_mutex_unlock(&j->mu);
            static const char ka[] = ": keep-alive\n\n";
            if (max < sizeof ka - 1) return 0;
            memcpy(buf, ka, sizeof ka - 1);
            sc->last = srv_now();
            return (ssize_t)(sizeof ka - 1);
        }
    }
}

static void stream_free(void *cls) {
    stream_ctx *sc = cls;
    pthread_mutex_lock(&sc->j->mu);
    const bool done = sc->j->done;
    pthread_mutex_unlock(&sc->j->mu);
    if (!done) mark_gone(sc->j);
    srv_job_unref(sc->j);
    free(sc);
}

static enum MHD_Result wait_and_send(dsv4_server *s, struct MHD_Connection *c, conn_ctx *cc) {
    srv_job *j = cc->job;
    const int fd = conn_fd(c);
    /* the idle timeout must not count the time spent generating */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    pthread_mutex_lock(&j->mu);
    while (!j->done) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
        if (!j->done && peer_gone(fd)) {
            mark_gone(j);
            pthread_mutex_unlock(&j->mu);
            return MHD_NO; /* close the connection */
        }
    }
    char *body = j->body;
    const int status = j->status ? j->status : 500;
    j->body = NULL;
    pthread_mutex_unlock(&j->mu);
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)s->cfg.io_timeout_s);
    if (!body) return simple_error(s, c, cc->ep, cc->api, 500, "server_error", NULL, "generation failed");
    return send_buf(s, c, cc->ep, status, "application/json", body, NULL, NULL);
}

static enum MHD_Result handle_post(dsv4_server *s, struct MHD_Connection *c, conn_ctx *cc) {
    srv_err e;
    const srv_api api = cc->api;
    srv_job *j = srv_job_new();
    if (!j) return simple_error(s, c, cc->ep, api, 500, "server_error", NULL, "out of memory");
    cc->job = j;
    j->endpoint = cc->ep;
    j->t_arrive = srv_now();
    if (s->cfg.request_timeout_s > 0) j->deadline = j->t_arrive + s->cfg.request_timeout_s;
    srv_parse_ctx pc = {s->cfg.n_ctx, s->cfg.model_id, lookup_tool, &s->toolmem};
    if (!srv_request_parse(api, cc->body.data ? cc->body.data : "", cc->body.len, &pc, &j->req, &e)) {
        if (api == SRV_API_MESSAGES && e.status == 400) e.type = "invalid_request_error";
        return send_error(s, c, cc->ep, api, &e, NULL, NULL);
    }
    dsv4_strbuf text = {0};
    dsv4_tokens toks = {0};
    dsv4_error err = {0};
    dsv4_status st = srv_request_render(&j->req, &text, &err);
    if (st == DSV4_OK) st = dsv4_tokenize_rendered(s->tok, text.data ? text.data : "", text.len, &toks, &err);
    j->text = text.data;
    j->text_len = text.len;
    if (st != DSV4_OK) {
        dsv4_tokens_free(&toks);
        srv_err_set(&e, st == DSV4_ERR_NOMEM ? 500 : 400,
                    st == DSV4_ERR_NOMEM ? "server_error" : "invalid_request_error", NULL, NULL,
                    "cannot render the prompt: %s", err.msg);
        return send_error(s, c, cc->ep, api, &e, NULL, NULL);
    }
    if (toks.n >= s->cfg.n_ctx) {
        srv_err_set(&e, 400, "invalid_request_error", "context_length_exceeded", "messages",
                    "the prompt is %zu tokens, the context is %u tokens", toks.n, s->cfg.n_ctx);
        e.n_prompt_tokens = (int64_t)toks.n;
        e.n_ctx = s->cfg.n_ctx;
        dsv4_tokens_free(&toks);
        return send_error(s, c, cc->ep, api, &e, NULL, NULL);
    }
    j->tokens = toks.ids;
    j->n_tokens = (uint32_t)toks.n;
    const int q = srv_enqueue(s, j);
    if (q == 429) {
        pthread_mutex_lock(&s->metrics.mu);
        s->metrics.rejected_queue_full++;
        pthread_mutex_unlock(&s->metrics.mu);
        srv_err_set(&e, 429, api == SRV_API_MESSAGES ? "rate_limit_error" : "rate_limit_exceeded",
                    "queue_full", NULL, "the request queue is full (%u waiting); retry later",
                    s->cfg.queue_max);
        return send_error(s, c, cc->ep, api, &e, "Retry-After", "1");
    }
    if (q == 503)
        return simple_error(s, c, cc->ep, api, 503,
                            api == SRV_API_MESSAGES ? "overloaded_error" : "server_error", NULL,
                            "the server is shutting down");
    if (!j->req.stream) return wait_and_send(s, c, cc);
    stream_ctx *sc = calloc(1, sizeof *sc);
    if (!sc) {
        mark_gone(j);
        return MHD_NO;
    }
    sc->s = s;
    sc->j = j;
    sc->fd = conn_fd(c);
    sc->last = srv_now();
    srv_job_ref(j);
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, sc, stream_free);
    if (!r) {
        stream_free(sc);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    add_cors(s, c, r);
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    srv_metrics_request(&s->metrics, cc->ep, 200);
    return ret;
}

enum MHD_Result srv_http_handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                 const char *version, const char *upload, size_t *upload_size,
                                 void **con_cls) {
    (void)version;
    dsv4_server *s = cls;
    conn_ctx *cc = *con_cls;
    if (!cc) {
        cc = calloc(1, sizeof *cc);
        if (!cc) return MHD_NO;
        *con_cls = cc;
        const char *model = NULL;
        const route *rt = find_route(url, &model);
        cc->ep = rt ? rt->ep : SRV_EP_OTHER;
        cc->api = rt ? rt->api : SRV_API_CHAT;
        cc->answered = true; /* unless we wait for a body below */
        if (!strcmp(method, "OPTIONS")) {
            return send_buf(s, c, cc->ep, 204, NULL, NULL, "Allow", "GET, POST, OPTIONS");
        }
        if (!rt)
            return simple_error(s, c, cc->ep, cc->api, 404, "invalid_request_error", "not_found",
                                "no such endpoint");
        const bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
        if ((rt->post && strcmp(method, "POST") != 0) || (!rt->post && !get) || (model && !get)) {
            srv_err e;
            srv_err_set(&e, 405, "invalid_request_error", "method_not_allowed", NULL,
                        "method %s is not allowed here", method);
            return send_error(s, c, cc->ep, cc->api, &e, "Allow",
                              rt->post ? "POST, OPTIONS" : "GET, OPTIONS");
        }
        if (rt->ep != SRV_EP_HEALTH && !authorized(s, c))
            return simple_error(s, c, cc->ep, cc->api, 401,
                                cc->api == SRV_API_MESSAGES ? "authentication_error"
                                                            : "invalid_request_error",
                                "invalid_api_key", "missing or invalid API key");
        if (!rt->post) return handle_get(s, c, rt, model);
        const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
        if (!ct || strncasecmp(ct, "application/json", 16) != 0 || (ct[16] && ct[16] != ';' && ct[16] != ' '))
            return simple_error(s, c, cc->ep, cc->api, 415, "invalid_request_error", "unsupported_media_type",
                                "the request body must be JSON (Content-Type: application/json)");
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body)
            return simple_error(s, c, cc->ep, cc->api, 413, "invalid_request_error", "request_too_large",
                                "the request body is larger than --max-body");
        cc->answered = false;
        return MHD_YES;
    }
    if (cc->answered) { /* an early error response is queued: discard the rest of the body */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cc->too_big) {
            if (cc->body.len + *upload_size > s->cfg.max_body) {
                cc->too_big = true;
                dsv4_strbuf_free(&cc->body);
            } else {
                dsv4_error err;
                if (dsv4_strbuf_append(&cc->body, upload, *upload_size, &err) != DSV4_OK) cc->too_big = true;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    cc->answered = true;
    if (cc->too_big)
        return simple_error(s, c, cc->ep, cc->api, 413, "invalid_request_error", "request_too_large",
                            "the request body is larger than --max-body");
    return handle_post(s, c, cc);
}

void srv_http_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                        enum MHD_RequestTerminationCode tc) {
    (void)cls, (void)c, (void)tc;
    conn_ctx *cc = *con_cls;
    if (!cc) return;
    if (cc->job) {
        pthread_mutex_lock(&cc->job->mu);
        const bool done = cc->job->done;
        pthread_mutex_unlock(&cc->job->mu);
        if (!done && !cc->job->req.stream) mark_gone(cc->job);
        srv_job_unref(cc->job);
    }
    dsv4_strbuf_free(&cc->body);
    free(cc);
    *con_cls = NULL;
}
