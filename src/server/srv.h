/* Server internals shared by the HTTP side (http.c), the engine worker (worker.c, gen.c) and
 * the lifecycle (server.c). */
#ifndef DSV4_SERVER_SRV_H
#define DSV4_SERVER_SRV_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>

#include "server/metrics.h"
#include "server/request.h"
#include "server/server.h"
#include "server/toolmem.h"
#include "session/prefix.h"

typedef struct srv_job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    atomic_int cancel;  /* engine cancel flag: disconnect, deadline or shutdown */
    atomic_int gone;    /* the client disconnected */
    atomic_int wind_up; /* shutdown: stop generating at the next token */
    srv_request req;
    int32_t *tokens;
    uint32_t n_tokens;
    char *text; /* the rendered prompt text the tokens came from */
    size_t text_len;
    double t_arrive, deadline; /* monotonic seconds; deadline 0 = none */
    int endpoint;
    /* results (under mu) */
    dsv4_strbuf sse; /* streaming bytes not yet sent */
    size_t sse_off;
    bool done;
    int status; /* non-streaming: HTTP status of body */
    char *body; /* non-streaming: JSON body */
} srv_job;

struct dsv4_server {
    dsv4_server_config cfg;
    dsv4_engine *engine;
    const dsv4_tokenizer *tok;
    dsv4_session *session;
    dsv4_prefix_cache cache;
    struct MHD_Daemon *mhd;
    uint16_t port;
    /* queue */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_job **queue;
    uint32_t q_head, q_len;
    srv_job *running;
    bool stopping, worker_exit;
    pthread_t worker;
    bool worker_started, shut;
    srv_toolmem toolmem;
    srv_metrics metrics;
    atomic_uint_fast64_t seq;
};

double srv_now(void);
srv_job *srv_job_new(void);
void srv_job_ref(srv_job *j);
void srv_job_unref(srv_job *j);
/* Queue a job (takes a reference). Returns 0, or 429 when full, 503 when shutting down. */
int srv_enqueue(dsv4_server *s, srv_job *j);
void *srv_worker_main(void *arg);
/* Runs one job on the worker (gen.c). */
void srv_run_job(dsv4_server *s, srv_job *j);
/* Finishes a job with an error (non-streaming: the body; streaming: an in-stream error). */
void srv_job_fail(dsv4_server *s, srv_job *j, const srv_err *e);

/* HTTP (http.c) */
enum MHD_Result srv_http_handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                 const char *version, const char *upload, size_t *upload_size,
                                 void **con_cls);
void srv_http_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                        enum MHD_RequestTerminationCode tc);

#endif
