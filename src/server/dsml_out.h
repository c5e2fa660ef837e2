/* DSML parser events -> tool calls on a srv_out: OpenAI/Anthropic argument JSON built and
 * streamed piecewise (strings escaped as they arrive, JSON literals validated at their end), calls
 * of a block that turns out malformed dropped, and each completed block's exact bytes remembered
 * per call id for replay. */
#ifndef DSV4_SERVER_DSML_OUT_H
#define DSV4_SERVER_DSML_OUT_H

#include "server/out.h"
#include "server/toolmem.h"
#include "text/dsml.h"

typedef struct srv_dsml_sink {
    srv_out *out;
    srv_toolmem *mem; /* may be NULL */
    bool arg_first, arg_string, in_block;
    size_t block_first_call;
    dsv4_strbuf lit;
} srv_dsml_sink;

/* A dsv4_dsml_callback; user is the srv_dsml_sink. */
void srv_dsml_event(void *user, const dsv4_dsml_event *ev);
void srv_dsml_sink_free(srv_dsml_sink *k);

#endif
