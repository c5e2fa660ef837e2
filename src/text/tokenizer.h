/* Byte-level BPE tokenizer of DeepSeek V4 (spec §5.1-§5.3): official three-pass pre-tokenizer
 * (text/pretok.h), GPT-2 byte map, merges applied lowest rank first then leftmost, special
 * tokens resolved by string. Immutable after construction: encode/decode may run concurrently. */
#ifndef DSV4_TEXT_TOKENIZER_H
#define DSV4_TEXT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "gguf/gguf.h"
#include "text/special.h"
#include "text/strbuf.h"

typedef struct dsv4_tokenizer dsv4_tokenizer;

/* A growable token id list; zero-initialise it. Encoders append to it. */
typedef struct dsv4_tokens {
    int32_t *ids;
    size_t n;
    size_t cap;
} dsv4_tokens;

dsv4_status dsv4_tokens_push(dsv4_tokens *v, int32_t id, dsv4_error *err);
void dsv4_tokens_free(dsv4_tokens *v);

/* From tokenizer.ggml.tokens and tokenizer.ggml.merges (both STRING arrays). Everything needed
 * is copied: the tokenizer may outlive the file. */
dsv4_status dsv4_tokenizer_from_gguf(const gguf_file *f, dsv4_tokenizer **out, dsv4_error *err);
/* From in-memory arrays (copied). lens may be NULL for NUL-terminated strings. Merges are
 * "A B" strings, index = rank. Every DSV4_SPECIAL_TOKENS string must be in the vocabulary. */
dsv4_status dsv4_tokenizer_from_arrays(const char *const *tokens, const uint64_t *token_lens,
                                       uint64_t n_tokens, const char *const *merges,
                                       const uint64_t *merge_lens, uint64_t n_merges, dsv4_tokenizer **out,
                                       dsv4_error *err);
void dsv4_tokenizer_free(dsv4_tokenizer *t);

uint32_t dsv4_tokenizer_n_tokens(const dsv4_tokenizer *t);
uint32_t dsv4_tokenizer_n_merges(const dsv4_tokenizer *t);
int32_t dsv4_tokenizer_special(const dsv4_tokenizer *t, dsv4_special which);
/* Id of a token string (GPT-2 byte-level form), -1 if absent. */
int32_t dsv4_tokenizer_find(const dsv4_tokenizer *t, const char *s, size_t len);
/* The vocabulary string of id (not NUL-terminated); NULL for an id out of range. */
const char *dsv4_tokenizer_token_str(const dsv4_tokenizer *t, int32_t id, size_t *len);
/* Merge rank of "A B", -1 if absent. */
int32_t dsv4_tokenizer_merge_rank(const dsv4_tokenizer *t, const char *a, size_t alen, const char *b,
                                  size_t blen);

/* Plain text: pre-tokenize and BPE; special strings are NOT recognised. Appends to out. */
dsv4_status dsv4_tokenize_text(const dsv4_tokenizer *t, const char *text, size_t len, dsv4_tokens *out,
                               dsv4_error *err);
/* Rendered chat text: at every byte the 7 special strings are tried in table order; a match
 * becomes its id and the spans between matches are tokenized as plain text. Appends to out. */
dsv4_status dsv4_tokenize_rendered(const dsv4_tokenizer *t, const char *text, size_t len, dsv4_tokens *out,
                                   dsv4_error *err);

/* The bytes of one token (spec §5.3 detok): a token containing U+FF5C is its string verbatim;
 * otherwise each codepoint maps back through the inverse GPT-2 map and unmapped ones are dropped.
 * Ids out of range give "" (len 0). Points into the tokenizer. */
const char *dsv4_token_bytes(const dsv4_tokenizer *t, int32_t id, size_t *len);
/* Appends the bytes of ids[0..n) to out. */
dsv4_status dsv4_detokenize(const dsv4_tokenizer *t, const int32_t *ids, size_t n, dsv4_strbuf *out,
                            dsv4_error *err);

#endif
