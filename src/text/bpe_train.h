/* Byte-level BPE vocabulary training (used by `dsv4-gguf synth` to give test models a real
 * tokenizer). Pieces come from the same official pre-tokenizer split as encoding (PCRE2). */
#ifndef DSV4_TEXT_BPE_TRAIN_H
#define DSV4_TEXT_BPE_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

typedef struct dsv4_bpe_vocab {
    char **tokens; /* GPT-2 byte-level token strings (UTF-8), index = token id */
    uint64_t n_tokens;
    char **merges; /* "A B", index = rank */
    uint64_t n_merges;
} dsv4_bpe_vocab;

/* Train a vocabulary of exactly vocab_size tokens from text:
 * id 0 = "<｜begin▁of▁sentence｜>", id 1 = "<｜end▁of▁sentence｜>", then the 256 byte tokens,
 * then one token per learned merge, and the remaining ds4 special tokens at the end
 * (DSV4_SPECIAL_TOKENS in text/special.h). Deterministic for a given text and size. */
dsv4_status dsv4_bpe_train(const char *text, size_t len, uint32_t vocab_size, dsv4_bpe_vocab *out,
                           dsv4_error *err);
void dsv4_bpe_vocab_free(dsv4_bpe_vocab *v);

#endif
