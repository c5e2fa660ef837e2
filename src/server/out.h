/* Response shaping: the worker reports what the model produced (reasoning text, content text,
 * tool calls with streamed argument JSON, the finish) and this turns it into each API's SSE
 * events (appended to `sse`) and, at the end, its non-streaming JSON body. */
#ifndef DSV4_SERVER_OUT_H
#define DSV4_SERVER_OUT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "server/request.h"
#include "text/strbuf.h"

typedef enum srv_finish { SRV_FINISH_STOP = 0, SRV_FINISH_LENGTH, SRV_FINISH_TOOLS } srv_finish;

typedef struct srv_call {
    char id[48];      /* call_... (OpenAI) or toolu_... (Anthropic) */
    char item_id[48]; /* Responses fc_... */
    char *name;
    dsv4_strbuf args; /* arguments JSON text */
} srv_call;

typedef enum srv_phase { SRV_PH_NONE = 0, SRV_PH_REASONING, SRV_PH_TEXT, SRV_PH_TOOL } srv_phase;

typedef struct srv_out {
    srv_api api;
    bool stream, include_usage;
    const char *model;
    char id[48];
    int64_t created;
    uint64_t rng; /* for ids */
    dsv4_strbuf reasoning, content;
    srv_call *calls;
    size_t n_calls, cap_calls;
    uint32_t prompt_tokens, cached_tokens, completion_tokens, reasoning_tokens;
    srv_finish finish;
    const char *stop_seq; /* the stop string that ended generation, or NULL */
    /* streaming state */
    srv_phase phase;
    int block;   /* Anthropic content block index / Responses output index of the open item */
    int n_items; /* Responses output items opened so far */
    uint64_t seq;
    char item_id[48];
    bool begun;
    dsv4_strbuf sse;      /* pending SSE bytes for the client */
    json_t *request_echo; /* Responses: fields echoed in the response object (borrowed) */
} srv_out;

void srv_out_init(srv_out *o, const srv_request *r, const char *model, uint64_t seed);
void srv_out_free(srv_out *o);
void srv_out_begin(srv_out *o);
void srv_out_reasoning(srv_out *o, const char *s, size_t n);
void srv_out_text(srv_out *o, const char *s, size_t n);
/* A tool call starts (returns its index); then argument JSON pieces; then its end. */
size_t srv_out_tool_begin(srv_out *o, const char *name);
void srv_out_tool_args(srv_out *o, const char *s, size_t n);
void srv_out_tool_end(srv_out *o);
/* Drops calls from index `from` on (a DSML block that turned out malformed). */
void srv_out_drop_calls(srv_out *o, size_t from);
void srv_out_finish(srv_out *o);
/* Streaming error after the stream began (the API's in-stream error event). */
void srv_out_stream_error(srv_out *o, const srv_err *e);
/* The complete non-streaming body (malloc'd JSON), NULL on OOM. */
char *srv_out_body(srv_out *o);

/* shared helpers of the per-API writers */
void srv_sse(srv_out *o, const char *event, json_t *data); /* steals data */
json_t *srv_jstrn(const char *s, size_t n);
void srv_rand_id(srv_out *o, const char *prefix, char *out, size_t cap);

/* per-API writers (out_openai.c, out_responses.c, out_anthropic.c) */
void srv_chat_event(srv_out *o, int what, const char *s, size_t n);
char *srv_chat_body(srv_out *o);
void srv_resp_event(srv_out *o, int what, const char *s, size_t n);
char *srv_resp_body(srv_out *o);
void srv_msg_event(srv_out *o, int what, const char *s, size_t n);
char *srv_msg_body(srv_out *o);

enum {
    SRV_EV_BEGIN = 0,
    SRV_EV_REASONING,
    SRV_EV_TEXT,
    SRV_EV_TOOL_BEGIN,
    SRV_EV_TOOL_ARGS,
    SRV_EV_TOOL_END,
    SRV_EV_FINISH
};

#endif
