/* DeepSeek V4 chat rendering (spec §5.4): the engine/CLI one-shot token encoding, CLI
 * multi-turn appends, and the server's text rendering (tokenised later with
 * dsv4_tokenize_rendered), including DSML tool-call rendering. */
#ifndef DSV4_TEXT_CHAT_H
#define DSV4_TEXT_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "text/strbuf.h"
#include "text/tokenizer.h"

typedef enum dsv4_think_mode { DSV4_THINK_NONE = 0, DSV4_THINK_HIGH, DSV4_THINK_MAX } dsv4_think_mode;

/* DeepSeek recommends Think Max only with a context of at least 384K tokens. */
#define DSV4_THINK_MAX_MIN_CONTEXT 393216u
#define DSV4_DEFAULT_SYSTEM "You are a helpful assistant"

/* The Think-Max prefix (three sentences, '\n'-joined, ending in "\n\n"). */
extern const char DSV4_THINK_MAX_PREFIX[];

bool dsv4_think_enabled(dsv4_think_mode m); /* HIGH and MAX */
/* MAX becomes HIGH when ctx < DSV4_THINK_MAX_MIN_CONTEXT. */
dsv4_think_mode dsv4_think_mode_for_context(dsv4_think_mode m, uint64_t ctx);
/* Server reasoning effort: "max" -> MAX; "xhigh","high","medium","low","minimal" -> HIGH;
 * "none" -> NONE. Returns false (and leaves *out) for anything else. */
bool dsv4_think_mode_from_effort(const char *effort, dsv4_think_mode *out);

/* BOS, [MAX prefix], [system if non-empty], <｜User｜>, prompt, <｜Assistant｜>, <think>|</think>.
 * The mode is used as given (apply dsv4_think_mode_for_context first). Appends to out. */
dsv4_status dsv4_chat_encode_prompt(const dsv4_tokenizer *t, const char *system, const char *prompt,
                                    dsv4_think_mode mode, dsv4_tokens *out, dsv4_error *err);

typedef enum dsv4_chat_role {
    DSV4_ROLE_SYSTEM = 0,
    DSV4_ROLE_DEVELOPER,
    DSV4_ROLE_USER,
    DSV4_ROLE_ASSISTANT,
    DSV4_ROLE_TOOL, /* "tool" and "function" */
} dsv4_chat_role;

/* "system", "developer", "user", "assistant", "tool", "function"; false for others. */
bool dsv4_chat_role_from_name(const char *name, dsv4_chat_role *out);

/* CLI multi-turn (ds4_chat_append_message): system/developer -> BPE(text); user -> <｜User｜> text;
 * tool -> <｜User｜> "Tool: " text; assistant -> <｜Assistant｜> [</think> unless text starts with
 * <think> or </think>] text. Text is plain (specials in it are not recognised). */
dsv4_status dsv4_chat_append_message(const dsv4_tokenizer *t, dsv4_chat_role role, const char *text,
                                     dsv4_tokens *out, dsv4_error *err);
/* <｜Assistant｜> then <think> (thinking) or </think>. */
dsv4_status dsv4_chat_append_assistant_prefix(const dsv4_tokenizer *t, dsv4_think_mode mode, dsv4_tokens *out,
                                              dsv4_error *err);
/* After a generated turn: the sampled tokens verbatim, then EOS. */
dsv4_status dsv4_chat_append_generated(const dsv4_tokenizer *t, const int32_t *ids, size_t n,
                                       dsv4_tokens *out, dsv4_error *err);

/* One tool-call argument. For is_string the value is the decoded string (written raw); else it
 * is the JSON literal text (number, bool, null, array, object), written as is. */
typedef struct dsv4_tool_arg {
    const char *key;
    const char *value;
    bool is_string;
} dsv4_tool_arg;

typedef struct dsv4_tool_call {
    const char *name;
    const dsv4_tool_arg *args;
    size_t n_args;
} dsv4_tool_call;

typedef struct dsv4_chat_message {
    dsv4_chat_role role;
    const char *content;         /* NULL = "" */
    const char *reasoning;       /* assistant only; NULL = "" */
    const dsv4_tool_call *calls; /* assistant only */
    size_t n_calls;
    /* assistant only: when non-empty, written verbatim instead of rendering calls (the exact
     * DSML the model produced) */
    const char *raw_dsml;
} dsv4_chat_message;

/* "\n\n<｜DSML｜tool_calls>\n" + per call an invoke block + "</｜DSML｜tool_calls>"; nothing for
 * n == 0. Names and keys are attribute-escaped (& < > "); a string value has each
 * "</｜DSML｜parameter>" written as "&lt;/｜DSML｜parameter>"; a JSON value has it written with
 * "\u003c" for the '<'. */
dsv4_status dsv4_chat_render_tool_calls(const dsv4_tool_call *calls, size_t n, dsv4_strbuf *out,
                                        dsv4_error *err);

/* The server rendering (render_chat_prompt_text): BOS, [MAX prefix], system region (tools_block
 * if non-empty, then every system/developer content, joined by "\n\n"), the messages, then
 * <｜Assistant｜><think>|</think> if a user/tool message is pending. tools_block is the complete
 * tools system text (built by the server); non-empty tools_block counts as tool context.
 * The mode is used as given. Appends to out. */
dsv4_status dsv4_chat_render_text(const dsv4_chat_message *msgs, size_t n, const char *tools_block,
                                  dsv4_think_mode mode, dsv4_strbuf *out, dsv4_error *err);

#endif
