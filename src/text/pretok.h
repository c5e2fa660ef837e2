/* The official DeepSeek V4 pre-tokenizer (spec §5.2b): three regex Split passes with behavior
 * Isolated, each later pass re-splitting every piece of the previous one on its own:
 *   1. \p{N}{1,3}
 *   2. [\x{4E00}-\x{9FA5}\x{3040}-\x{30FF}]+
 *   3. [ASCII punct][A-Za-z]+ | [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ | ' '?[\p{P}\p{S}]+[\r\n]*
 *      | \s*[\r\n]+ | \s+(?!\S) | \s+
 * Isolated keeps matches and the unmatched stretches between them as pieces, so the pieces
 * always tile the input exactly.
 *
 * PCRE2 with UTF+UCP, compiled (and JIT-compiled when available) once per object; every call
 * allocates its own match data, so one object may be shared by threads.
 *
 * Invalid UTF-8: patterns are compiled with PCRE2_MATCH_INVALID_UTF, so an ill-formed byte never
 * matches any pattern. It ends up in an unmatched stretch, i.e. in a piece of its own together
 * with any neighbouring unmatched bytes; byte-level BPE then encodes it like any other byte, so
 * decode(encode(x)) == x holds for arbitrary bytes.
 *
 * Engine note: HF `tokenizers` runs these patterns with Oniguruma. The classes used agree between
 * the two engines for the cases tested (tests/text/test_pretok.c); \s is PCRE2's UCP white space
 * (Z categories, \t \n \v \f \r and U+0085), which is also what Oniguruma's Unicode \s covers. */
#ifndef DSV4_TEXT_PRETOK_H
#define DSV4_TEXT_PRETOK_H

#include <stddef.h>

#include "common/status.h"

typedef struct dsv4_pretok dsv4_pretok;

typedef struct dsv4_span {
    size_t off;
    size_t len;
} dsv4_span;

/* Called once per piece, in text order; a non-OK return stops the split and is returned. */
typedef dsv4_status (*dsv4_piece_fn)(void *ctx, const char *piece, size_t len, dsv4_error *err);

dsv4_status dsv4_pretok_new(dsv4_pretok **out, dsv4_error *err);
void dsv4_pretok_free(dsv4_pretok *pt);

dsv4_status dsv4_pretok_split(const dsv4_pretok *pt, const char *text, size_t len, dsv4_piece_fn fn,
                              void *ctx, dsv4_error *err);
/* Convenience: all pieces as spans into text (caller frees *spans). */
dsv4_status dsv4_pretok_split_spans(const dsv4_pretok *pt, const char *text, size_t len, dsv4_span **spans,
                                    size_t *n_spans, dsv4_error *err);

#endif
