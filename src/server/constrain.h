/* Forced tool calls (tool_choice "required" / a named function / Anthropic "any" / "tool"):
 * grammar-constrained generation of exactly one DSML tool call.
 *
 * The constraint walks the structure of dsv4_chat_render_tool_calls for one invoke:
 *   [</think>] "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"" NAME "\">\n"
 *   per parameter: "<｜DSML｜parameter name=\"K\" string=\"true|false\">" VALUE "</｜DSML｜parameter>\n"
 *   "</｜DSML｜invoke>\n</｜DSML｜tool_calls>"
 * Structural text is FORCED (its tokens are fed to the engine as if sampled, so they are part of
 * the live KV exactly like model-emitted DSML). Choices among fixed texts (the tool name when any
 * tool may be called, booleans, enums) are made greedily over the token trie of the candidates:
 * at each step the candidate token with the highest logit wins. Free values are SAMPLED by the
 * normal sampler with the disallowed logits set to -inf:
 *   string: tokens whose bytes contain no '<' or NUL, no special token, well-formed UTF-8
 *           continuing any pending partial character; the first token of the closing tag ends
 *           the value (the rest of the tag is then forced); at the cap the tag is forced.
 *   number/integer: tokens of digits, '-' and '.' keeping the value a prefix of a JSON number
 *           (-?(0|[1-9][0-9]*)(\.[0-9]+)?, no fraction for integers, at most 15 characters); the
 *           closing tag only once the number is complete; at the cap it is completed with "0".
 * Parameters: every property of the schema, the required ones first, each group in schema order
 * (required names without a property schema are strings). array/object/null types get "[]",
 * "{}", "null"; an untyped property is a string. */
#ifndef DSV4_SERVER_CONSTRAIN_H
#define DSV4_SERVER_CONSTRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "text/sampler.h"
#include "text/tokenizer.h"

#define SRV_CONSTRAIN_VALUE_CAP 16  /* sampled tokens per value before the server closes it */
#define SRV_CONSTRAIN_NUMBER_MAX 15 /* characters of a number value */

typedef struct srv_constrain srv_constrain;

typedef enum srv_constrain_mode {
    SRV_CM_FORCED = 0, /* the next token is fixed */
    SRV_CM_CHOOSE,     /* a choice among fixed candidate texts */
    SRV_CM_STRING,     /* a sampled string value */
    SRV_CM_NUMBER,     /* a sampled number value */
    SRV_CM_DONE        /* the call is complete: generation ends */
} srv_constrain_mode;

/* schemas[i]: compact JSON {"name","description","parameters"} (srv_request.tool_schemas).
 * tool_name NULL: any tool (chosen by the model). close_think: thinking is open, force
 * "</think>" first. value_cap 0 = SRV_CONSTRAIN_VALUE_CAP. */
dsv4_status srv_constrain_new(const dsv4_tokenizer *t, const char *const *schemas, size_t n_tools,
                              const char *tool_name, bool close_think, uint32_t value_cap,
                              srv_constrain **out, dsv4_error *err);
void srv_constrain_free(srv_constrain *c);

srv_constrain_mode srv_constrain_get_mode(const srv_constrain *c);
/* allowed[0..n) = 1 for the tokens the constraint accepts next (0 elsewhere); returns how many. */
uint32_t srv_constrain_mask(const srv_constrain *c, uint8_t *allowed, uint32_t n);
/* Picks the next token from the model's logits: forced tokens as they are, choices greedily,
 * values with sp over the masked logits (sp NULL: greedy). Accepts it (as srv_constrain_accept).
 * *done (no token) once the call is complete. */
dsv4_status srv_constrain_next(srv_constrain *c, const float *logits, uint32_t n_vocab, dsv4_sampler *sp,
                               int32_t *id, bool *done, dsv4_error *err);
/* Advances over a token the caller picked; it must be allowed (DSV4_ERR_INVALID otherwise). */
dsv4_status srv_constrain_accept(srv_constrain *c, int32_t id, dsv4_error *err);

/* s[0..n) is a prefix of a JSON number of the form above (*complete: it is a whole number). */
bool srv_constrain_number_prefix(const char *s, size_t n, bool integer, bool *complete);

#endif
