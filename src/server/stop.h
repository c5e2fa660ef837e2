/* Stop strings over streamed text with tail hold-back: text that could still become the start of
 * a stop string is held until decided, so a stop string split across tokens is never emitted. */
#ifndef DSV4_SERVER_STOP_H
#define DSV4_SERVER_STOP_H

#include <stdbool.h>
#include <stddef.h>

#include "text/strbuf.h"

typedef struct srv_stop {
    char *const *stops;
    size_t n_stops;
    dsv4_strbuf held;
    bool hit;
    size_t which; /* index of the stop string that matched */
} srv_stop;

void srv_stop_init(srv_stop *s, char *const *stops, size_t n);
void srv_stop_free(srv_stop *s);
/* Feeds text; appends what is safe to emit to out. Returns true when a stop string matched (the
 * text before it was appended; everything from the match on is dropped). */
bool srv_stop_feed(srv_stop *s, const char *text, size_t len, dsv4_strbuf *out);
/* End of generation: the held tail is emitted. */
void srv_stop_flush(srv_stop *s, dsv4_strbuf *out);

#endif
