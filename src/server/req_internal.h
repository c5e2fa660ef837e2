/* Helpers shared by the per-API request parsers (not part of the module's interface). */
#ifndef DSV4_SERVER_REQ_INTERNAL_H
#define DSV4_SERVER_REQ_INTERNAL_H

#include <jansson.h>

#include "server/request.h"

#define RQ_MAX_STOP 16
#define RQ_MAX_STOP_LEN 256
#define RQ_MAX_TOKENS_LIMIT 16777216 /* larger max_tokens values are rejected as absurd */

void *rq_own(srv_request *r, void *s); /* takes ownership (NULL stays NULL) */
/* snprintf for field paths (truncation is fine there) */
void rq_path(char *dst, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
char *rq_strdup(srv_request *r, const char *s);
dsv4_chat_message *rq_add_msg(srv_request *r, dsv4_chat_role role);
bool rq_oom(srv_err *e);

/* Field getters: an absent or null field leaves *present false and succeeds; a present field of
 * the wrong type or out of range fails with a 400 naming path.key. */
/* 400 invalid_value: "'path' what". Always returns false. */
bool rq_need(srv_err *e, const char *path, const char *what);
/* root.messages: required, a non-empty array. */
bool rq_messages(json_t *root, json_t **out, srv_err *e);
bool rq_string(json_t *o, const char *path, const char *key, const char **out, srv_err *e);
bool rq_bool(json_t *o, const char *path, const char *key, bool *out, bool *present, srv_err *e);
bool rq_number(json_t *o, const char *path, const char *key, double lo, double hi, double *out, bool *present,
               srv_err *e);
bool rq_int(json_t *o, const char *path, const char *key, int64_t lo, int64_t hi, int64_t *out, bool *present,
            srv_err *e);
/* A message content: string, null, or an array of text parts whose "type" is one of the
 * NULL-terminated accepted types (joined by "\n"). *out is owned by r ("" for null). */
bool rq_text_content(srv_request *r, json_t *v, const char *path, const char *const *types, const char **out,
                     srv_err *e);
/* temperature, top_p, top_k, min_p, seed, stop-like key, think switch (ds4 "think": bool). */
bool rq_sampling(json_t *root, srv_request *r, srv_err *e);
bool rq_stop(json_t *root, const char *key, srv_request *r, srv_err *e);
bool rq_max_tokens(json_t *root, const char *key, srv_request *r, bool *present, srv_err *e);
/* Tool call arguments (a JSON object, or its text) -> owned dsv4_tool_arg array on call. */
bool rq_call_args(srv_request *r, json_t *args, const char *path, dsv4_tool_call *call, srv_err *e);
/* Appends a call to the assistant message m (array owned by r). */
bool rq_add_call(srv_request *r, dsv4_chat_message *m, const char *name, json_t *args, const char *path,
                 srv_err *e);
/* A compact function schema {"name","description","parameters"} kept in r->tool_schemas. */
bool rq_add_tool(srv_request *r, json_t *name, json_t *desc, json_t *params, const char *path, srv_err *e);
/* tool_choice forcing a call (after the tools are parsed): name NULL = any tool. A 400 naming
 * path when there are no tools or no tool of that name. */
bool rq_force_tool(srv_request *r, const char *name, const char *path, srv_err *e);
/* Exact DSML replay: when every call id of assistant message m is remembered with the same
 * block, m->raw_dsml is set to it. */
void rq_replay_dsml(srv_request *r, const srv_parse_ctx *ctx, dsv4_chat_message *m, const char *const *ids,
                    size_t n_ids);
/* Think mode from the model name, then an explicit effort string (NULL = none) or switch. */
bool rq_think(srv_request *r, const srv_parse_ctx *ctx, const char *effort, int enabled /* -1 unset */,
              const char *effort_path, srv_err *e);
/* In thinking mode the client's sampling knobs are ignored (ds4 behaviour). */
void rq_finish_sampling(srv_request *r);

bool rq_parse_chat(json_t *root, const srv_parse_ctx *ctx, srv_request *r, srv_err *e);
bool rq_parse_completions(json_t *root, const srv_parse_ctx *ctx, srv_request *r, srv_err *e);
bool rq_parse_responses(json_t *root, const srv_parse_ctx *ctx, srv_request *r, srv_err *e);
bool rq_parse_messages(json_t *root, const srv_parse_ctx *ctx, srv_request *r, srv_err *e);

#endif
