/* Jobs (reference counted: the HTTP connection, the queue/worker and a streaming response each
 * hold one), the bounded queue and the engine worker loop. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/out.h"
#include "server/srv.h"

double srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

srv_job *srv_job_new(void) {
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_mutex_init(&j->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j->cv, &ca);
    pthread_condattr_destroy(&ca);
    j->refs = 1;
    return j;
}

void srv_job_ref(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
}

void srv_job_unref(srv_job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    const int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left) return;
    srv_request_free(&j->req);
    free(j->tokens);
    free(j->text);
    dsv4_strbuf_free(&j->sse);
    free(j->body);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

int srv_enqueue(dsv4_server *s, srv_job *j) {
    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        return 503;
    }
    if (s->q_len >= s->cfg.queue_max) {
        pthread_mutex_unlock(&s->mu);
        return 429;
    }
    srv_job_ref(j);
    s->queue[(s->q_head + s->q_len) % s->cfg.queue_max] = j;
    s->q_len++;
    pthread_mutex_lock(&s->metrics.mu);
    s->metrics.queue_depth = s->q_len;
    pthread_mutex_unlock(&s->metrics.mu);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static void finish_job(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    j->done = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void srv_job_fail(dsv4_server *s, srv_job *j, const srv_err *e) {
    (void)s;
    if (j->req.stream) {
        srv_out o;
        srv_out_init(&o, &j->req, j->req.model, 1);
        srv_out_stream_error(&o, e);
        pthread_mutex_lock(&j->mu);
        dsv4_error err;
        dsv4_strbuf_append(&j->sse, o.sse.data ? o.sse.data : "", o.sse.len, &err);
        pthread_mutex_unlock(&j->mu);
        srv_out_free(&o);
    } else {
        char *body = srv_error_body(j->req.api, e);
        pthread_mutex_lock(&j->mu);
        free(j->body);
        j->body = body;
        j->status = e->status;
        pthread_mutex_unlock(&j->mu);
    }
    finish_job(j);
}

void *srv_worker_main(void *arg) {
    dsv4_server *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->q_len && !s->worker_exit) pthread_cond_wait(&s->cv, &s->mu);
        if (!s->q_len && s->worker_exit) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        srv_job *j = s->queue[s->q_head];
        s->q_head = (s->q_head + 1) % s->cfg.queue_max;
        s->q_len--;
        s->running = j;
        const bool stopping = s->stopping;
        pthread_mutex_lock(&s->metrics.mu);
        s->metrics.queue_depth = s->q_len;
        s->metrics.busy = 1;
        pthread_mutex_unlock(&s->metrics.mu);
        pthread_mutex_unlock(&s->mu);

        if (stopping) {
            srv_err e;
            srv_err_set(&e, 503, j->req.api == SRV_API_MESSAGES ? "overloaded_error" : "server_error", NULL,
                        NULL, "the server is shutting down");
            srv_job_fail(s, j, &e);
        } else if (atomic_load(&j->gone)) {
            finish_job(j);
        } else {
            srv_run_job(s, j);
            pthread_mutex_lock(&j->mu);
            const bool done = j->done;
            pthread_mutex_unlock(&j->mu);
            if (!done) finish_job(j);
        }
        pthread_mutex_lock(&s->mu);
        s->running = NULL;
        pthread_mutex_unlock(&s->mu);
        pthread_mutex_lock(&s->metrics.mu);
        s->metrics.busy = 0;
        pthread_mutex_unlock(&s->metrics.mu);
        srv_job_unref(j);
    }
    return NULL;
}
