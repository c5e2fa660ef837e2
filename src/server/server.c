/* Server lifecycle: the session and prefix cache, the worker thread, the MHD daemon, shutdown. */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "server/srv.h"

void dsv4_server_config_default(dsv4_server_config *c) {
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8000;
    c->n_ctx = 4096;
    c->queue_max = 8;
    c->max_body = (size_t)8 << 20;
    c->request_timeout_s = 600;
    c->tool_memory_max_ids = SRV_TOOLMEM_DEFAULT_IDS;
    c->model_id = "deepseek-v4-flash";
    c->ckpt_interval = DSV4_PREFIX_DEFAULT_INTERVAL;
    c->ckpt_max = DSV4_PREFIX_DEFAULT_MAX_CKPT;
    c->keepalive_s = 2.0;
    c->io_timeout_s = 10;
}

uint16_t dsv4_server_port(const dsv4_server *s) { return s->port; }

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    const dsv4_server *s = cls;
    if (s->cfg.quiet) return;
    fputs("dsv4-server: http: ", stderr);
    vfprintf(stderr, fmt, ap);
}

static dsv4_status start_http(dsv4_server *s, dsv4_error *err) {
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char port[16];
    snprintf(port, sizeof port, "%u", (unsigned)s->cfg.port);
    int rc = getaddrinfo(s->cfg.host, port, &hints, &ai);
    if (rc != 0 || !ai)
        return dsv4_fail(err, DSV4_ERR_INVALID, "cannot resolve --host '%s': %s", s->cfg.host,
                         gai_strerror(rc));
    unsigned flags =
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    s->mhd = MHD_start_daemon(flags, s->cfg.port, NULL, NULL, srv_http_handler, s, MHD_OPTION_EXTERNAL_LOGGER,
                              mhd_log, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_NOTIFY_COMPLETED,
                              srv_http_completed, s, MHD_OPTION_CONNECTION_LIMIT, (unsigned)256,
                              MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->cfg.io_timeout_s, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->mhd)
        return dsv4_fail(err, DSV4_ERR_IO, "cannot listen on %s:%u (address in use or not permitted)",
                         s->cfg.host, (unsigned)s->cfg.port);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : s->cfg.port;
    return DSV4_OK;
}

dsv4_status dsv4_server_create(const dsv4_server_config *c, dsv4_engine *e, const dsv4_tokenizer *t,
                               dsv4_server **out, dsv4_error *err) {
    *out = NULL;
    if (!c->queue_max || c->queue_max > 65536)
        return dsv4_fail(err, DSV4_ERR_INVALID, "--queue must be between 1 and 65536");
    if (c->n_ctx < 2) return dsv4_fail(err, DSV4_ERR_INVALID, "--ctx must be at least 2 tokens");
    dsv4_server *s = calloc(1, sizeof *s);
    if (!s) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory creating the server");
    s->cfg = *c;
    if (!s->cfg.host) s->cfg.host = "127.0.0.1";
    if (!s->cfg.model_id) s->cfg.model_id = "deepseek-v4-flash";
    if (s->cfg.keepalive_s <= 0) s->cfg.keepalive_s = 2.0;
    if (!s->cfg.io_timeout_s) s->cfg.io_timeout_s = 10;
    if (s->cfg.keepalive_s > s->cfg.io_timeout_s / 2.0) s->cfg.keepalive_s = s->cfg.io_timeout_s / 2.0;
    s->engine = e;
    s->tok = t;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    srv_metrics_init(&s->metrics);
    dsv4_status st = DSV4_OK;
    s->queue = calloc(c->queue_max, sizeof *s->queue);
    if (!s->queue || srv_toolmem_init(&s->toolmem, c->tool_memory_max_ids) != 0)
        st = dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory creating the server");
    if (st == DSV4_OK) st = dsv4_session_create(e, c->n_ctx, &s->session, err);
    if (st == DSV4_OK) st = dsv4_prefix_init(&s->cache, s->session, c->ckpt_interval, c->ckpt_max, err);
    if (st == DSV4_OK) {
        s->metrics.kv_bytes = dsv4_session_state_bytes(s->session);
        if (pthread_create(&s->worker, NULL, srv_worker_main, s) != 0)
            st = dsv4_fail(err, DSV4_ERR_NOMEM, "cannot start the engine worker thread");
        else
            s->worker_started = true;
    }
    if (st == DSV4_OK) st = start_http(s, err);
    if (st != DSV4_OK) {
        dsv4_server_free(s);
        return st;
    }
    *out = s;
    return DSV4_OK;
}

void dsv4_server_shutdown(dsv4_server *s) {
    if (!s || s->shut) return;
    s->shut = true;
    if (s->mhd) MHD_quiesce_daemon(s->mhd); /* stop accepting */
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    if (s->running) {
        atomic_store(&s->running->wind_up, 1);
        atomic_store(&s->running->cancel, 1); /* a prefill in progress stops; decoding winds up */
    }
    s->worker_exit = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->worker_started) {
        pthread_join(s->worker, NULL);
        s->worker_started = false;
    }
    if (s->mhd) {
        MHD_stop_daemon(s->mhd);
        s->mhd = NULL;
    }
}

void dsv4_server_free(dsv4_server *s) {
    if (!s) return;
    dsv4_server_shutdown(s);
    if (s->session) {
        dsv4_prefix_free(&s->cache);
        dsv4_session_free(s->session);
    }
    srv_toolmem_free(&s->toolmem);
    srv_metrics_free(&s->metrics);
    free(s->queue);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
