/* Bounded LRU map tool-call id -> the exact DSML block the model sampled for it, so a client
 * sending those calls back gets them re-rendered byte-identically (matching the live KV tokens).
 * Thread-safe (HTTP threads look up, the engine worker inserts). */
#ifndef DSV4_SERVER_TOOLMEM_H
#define DSV4_SERVER_TOOLMEM_H

#include <pthread.h>
#include <stddef.h>

#define SRV_TOOLMEM_DEFAULT_IDS 100000

typedef struct srv_toolmem_entry srv_toolmem_entry;

typedef struct srv_toolmem {
    pthread_mutex_t mu;
    size_t max_ids, n;
    size_t n_buckets;
    srv_toolmem_entry **buckets;
    srv_toolmem_entry *head, *tail; /* most / least recently used */
} srv_toolmem;

int srv_toolmem_init(srv_toolmem *m, size_t max_ids); /* 0 ok, -1 OOM; max_ids 0 = default */
void srv_toolmem_free(srv_toolmem *m);
/* Remembers raw for id (replacing an older value); evicts the least recently used beyond max. */
int srv_toolmem_put(srv_toolmem *m, const char *id, const char *raw, size_t raw_len);
/* A malloc'd copy of the DSML for id, or NULL. Marks id as recently used. */
char *srv_toolmem_get(srv_toolmem *m, const char *id);
size_t srv_toolmem_count(srv_toolmem *m);

#endif
