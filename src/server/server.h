/* dsv4-server: OpenAI- and Anthropic-compatible HTTP API over one engine session.
 *
 *   dsv4_server_config c; dsv4_server_config_default(&c);
 *   dsv4_server_create(&c, engine, tokenizer, &srv, &err);   // binds, starts the worker
 *   ... dsv4_server_port(srv) ...
 *   dsv4_server_shutdown(srv);  // stop accepting, cancel/finish in-flight work, join threads
 *   dsv4_server_free(srv);
 *
 * HTTP runs on libmicrohttpd (a thread per connection); ONE engine worker thread owns the engine
 * and the single live session, serving a bounded queue of jobs. See docs/SERVER.md. */
#ifndef DSV4_SERVER_SERVER_H
#define DSV4_SERVER_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "engine/engine.h"
#include "text/tokenizer.h"

typedef struct dsv4_server dsv4_server;

typedef struct dsv4_server_config {
    const char *host;           /* "127.0.0.1" */
    uint16_t port;              /* 8000; 0 = any free port */
    uint32_t n_ctx;             /* session context (tokens) */
    uint32_t queue_max;         /* waiting jobs before 429 (8) */
    const char *api_key;        /* NULL = no authentication */
    bool cors;                  /* CORS headers on every response */
    size_t max_body;            /* bytes (8 MiB) */
    double request_timeout_s;   /* per request deadline, 0 = none (600) */
    size_t tool_memory_max_ids; /* 100000 */
    const char *model_id;       /* served model name ("deepseek-v4-flash") */
    uint32_t ckpt_interval;     /* prefix checkpoints every N positions (64) */
    uint32_t ckpt_max;          /* at most this many checkpoints (16) */
    double keepalive_s;         /* SSE keep-alive comment interval (2) */
    uint32_t io_timeout_s;      /* drop a connection idle (no bytes) this long (10) */
    bool quiet;                 /* no request log lines on stderr */
} dsv4_server_config;

void dsv4_server_config_default(dsv4_server_config *c);

/* The engine and tokenizer must outlive the server; the worker is their only user meanwhile. */
dsv4_status dsv4_server_create(const dsv4_server_config *c, dsv4_engine *e, const dsv4_tokenizer *t,
                               dsv4_server **out, dsv4_error *err);
uint16_t dsv4_server_port(const dsv4_server *s);
/* Stops accepting (new requests get 503), cancels queued jobs, lets the running one stop at its
 * next token (finish "length") or cancels its prefill, then joins every thread. Idempotent. */
void dsv4_server_shutdown(dsv4_server *s);
void dsv4_server_free(dsv4_server *s);

#endif
