/* One API request, parsed and validated from its JSON body into what the engine worker needs:
 * the chat messages (or a raw prompt), tool schemas, sampling, limits and streaming options.
 * Parsing is strict about types (a wrong type is a 400 naming the field) and never trusts sizes.
 * The four APIs map onto the same struct; rendering (server rendering, spec §5.4) is shared. */
#ifndef DSV4_SERVER_REQUEST_H
#define DSV4_SERVER_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "text/chat.h"
#include "text/sampler.h"
#include "text/strbuf.h"

typedef enum srv_api { SRV_API_CHAT = 0, SRV_API_COMPLETIONS, SRV_API_RESPONSES, SRV_API_MESSAGES } srv_api;

/* An HTTP error in the API's own shape (srv_error_body). */
typedef struct srv_err {
    int status;       /* 400, 401, 404, ... */
    const char *type; /* "invalid_request_error", "authentication_error", ... */
    const char *code; /* OpenAI "code" (NULL = null) */
    char param[96];   /* OpenAI "param" ("" = null) */
    char message[384];
    int64_t n_prompt_tokens, n_ctx; /* context_length_exceeded only (else -1) */
} srv_err;

void srv_err_set(srv_err *e, int status, const char *type, const char *code, const char *param,
                 const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* The JSON error body: OpenAI {"error":{message,type,param,code}}, Anthropic
 * {"type":"error","error":{type,message}}. Returns a malloc'd string (NULL on OOM). */
char *srv_error_body(srv_api api, const srv_err *e);

/* Tool-call id -> exact sampled DSML lookup used while parsing (may be NULL). Returns a malloc'd
 * copy or NULL. */
typedef char *(*srv_tool_lookup)(void *user, const char *id);

typedef struct srv_parse_ctx {
    uint32_t n_ctx;       /* for Think-Max downgrade and limit checks */
    const char *model_id; /* the served model name */
    srv_tool_lookup lookup;
    void *lookup_user;
} srv_parse_ctx;

typedef enum srv_tool_choice { SRV_TOOLS_AUTO = 0, SRV_TOOLS_NONE, SRV_TOOLS_REQUIRED } srv_tool_choice;

typedef struct srv_request {
    srv_api api;
    char *model;
    bool stream, include_usage;
    int64_t max_tokens; /* -1: until the context is full */
    dsv4_sampling sampling;
    uint64_t seed; /* 0: time based */
    char **stop;
    size_t n_stop;
    dsv4_think_mode think; /* already capped by the context */
    srv_tool_choice tool_choice;
    const char *tool_force; /* REQUIRED: the function that must be called (NULL: any tool) */
    char **tool_schemas;    /* compact JSON function schemas */
    size_t n_tools;
    dsv4_chat_message *msgs;
    size_t n_msgs, cap_msgs;
    char *raw_prompt; /* completions: the prompt text (rendered as is) */
    bool echo_reasoning;
    /* every string the messages point at */
    void **owned;
    size_t n_owned, cap_owned;
} srv_request;

/* Maximum nesting of JSON arrays/objects accepted (deeper bodies are rejected before parsing). */
#define SRV_JSON_MAX_DEPTH 64
/* Depth of the deepest array/object nesting in body (strings skipped), or -1 if it exceeds max. */
int srv_json_depth(const char *body, size_t len, int max);

/* Parses body for api. On failure fills e (status 400 etc.) and returns false; r is then freed. */
bool srv_request_parse(srv_api api, const char *body, size_t len, const srv_parse_ctx *ctx, srv_request *r,
                       srv_err *e);
void srv_request_free(srv_request *r);

/* The prompt text to tokenize with dsv4_tokenize_rendered: the server chat rendering, or BOS +
 * the raw prompt for completions (BOS not doubled). Appends to out. */
dsv4_status srv_request_render(const srv_request *r, dsv4_strbuf *out, dsv4_error *err);

#endif
