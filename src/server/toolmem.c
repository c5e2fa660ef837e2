/* Chained hash table + doubly linked LRU list. Each entry owns its copy of the DSML block (a
 * block with several calls is stored once per id: blocks are small and ids are bounded). */
#include "server/toolmem.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct srv_toolmem_entry {
    char *id, *raw;
    srv_toolmem_entry *next_in_bucket, *prev, *next;
};

static uint64_t hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

int srv_toolmem_init(srv_toolmem *m, size_t max_ids) {
    memset(m, 0, sizeof *m);
    m->max_ids = max_ids ? max_ids : SRV_TOOLMEM_DEFAULT_IDS;
    size_t nb = 64;
    while (nb < m->max_ids && nb < ((size_t)1 << 24)) nb <<= 1;
    m->n_buckets = nb;
    m->buckets = calloc(nb, sizeof *m->buckets);
    if (!m->buckets) return -1;
    pthread_mutex_init(&m->mu, NULL);
    return 0;
}

static void unlink_lru(srv_toolmem *m, srv_toolmem_entry *e) {
    if (e->prev)
        e->prev->next = e->next;
    else
        m->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        m->tail = e->prev;
    e->prev = e->next = NULL;
}

static void push_front(srv_toolmem *m, srv_toolmem_entry *e) {
    e->next = m->head;
    e->prev = NULL;
    if (m->head) m->head->prev = e;
    m->head = e;
    if (!m->tail) m->tail = e;
}

static srv_toolmem_entry **slot(srv_toolmem *m, const char *id) {
    srv_toolmem_entry **p = &m->buckets[hash(id) & (m->n_buckets - 1)];
    while (*p && strcmp((*p)->id, id) != 0) p = &(*p)->next_in_bucket;
    return p;
}

static void remove_entry(srv_toolmem *m, srv_toolmem_entry *e) {
    srv_toolmem_entry **p = slot(m, e->id);
    if (*p == e) *p = e->next_in_bucket;
    unlink_lru(m, e);
    free(e->id);
    free(e->raw);
    free(e);
    m->n--;
}

void srv_toolmem_free(srv_toolmem *m) {
    if (!m->buckets) return;
    while (m->head) remove_entry(m, m->head);
    free(m->buckets);
    pthread_mutex_destroy(&m->mu);
    memset(m, 0, sizeof *m);
}

int srv_toolmem_put(srv_toolmem *m, const char *id, const char *raw, size_t raw_len) {
    char *copy = malloc(raw_len + 1);
    if (!copy) return -1;
    memcpy(copy, raw, raw_len);
    copy[raw_len] = 0;
    pthread_mutex_lock(&m->mu);
    srv_toolmem_entry **p = slot(m, id);
    if (*p) {
        free((*p)->raw);
        (*p)->raw = copy;
        unlink_lru(m, *p);
        push_front(m, *p);
        pthread_mutex_unlock(&m->mu);
        return 0;
    }
    srv_toolmem_entry *e = calloc(1, sizeof *e);
    char *idc = strdup(id);
    if (!e || !idc) {
        pthread_mutex_unlock(&m->mu);
        free(e), free(idc), free(copy);
        return -1;
    }
    e->id = idc;
    e->raw = copy;
    *p = e;
    push_front(m, e);
    m->n++;
    while (m->n > m->max_ids && m->tail) remove_entry(m, m->tail);
    pthread_mutex_unlock(&m->mu);
    return 0;
}

char *srv_toolmem_get(srv_toolmem *m, const char *id) {
    pthread_mutex_lock(&m->mu);
    srv_toolmem_entry *e = *slot(m, id);
    char *r = NULL;
    if (e) {
        unlink_lru(m, e);
        push_front(m, e);
        r = strdup(e->raw);
    }
    pthread_mutex_unlock(&m->mu);
    return r;
}

size_t srv_toolmem_count(srv_toolmem *m) {
    pthread_mutex_lock(&m->mu);
    size_t n = m->n;
    pthread_mutex_unlock(&m->mu);
    return n;
}
