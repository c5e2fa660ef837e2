/* Streaming detokenizer: token bytes go in, only complete UTF-8 characters come out. An
 * incomplete trailing sequence is held back until the next push; flush ends the stream.
 * Ill-formed bytes are replaced by U+FFFD, one per maximal ill-formed subpart (Unicode §3.9),
 * and an incomplete sequence still pending at flush becomes one U+FFFD. The output is therefore
 * always valid UTF-8 (what JSON/SSE output needs). Callers wanting raw bytes use
 * dsv4_token_bytes directly. */
#ifndef DSV4_TEXT_DETOK_H
#define DSV4_TEXT_DETOK_H

#include <stddef.h>
#include <stdint.h>

#include "text/strbuf.h"
#include "text/tokenizer.h"

typedef struct dsv4_detok {
    uint8_t pend[4];
    uint8_t n_pend;
} dsv4_detok;

void dsv4_detok_init(dsv4_detok *d);
/* Appends the complete characters now available to out. */
dsv4_status dsv4_detok_push(dsv4_detok *d, const char *bytes, size_t len, dsv4_strbuf *out, dsv4_error *err);
dsv4_status dsv4_detok_push_token(dsv4_detok *d, const dsv4_tokenizer *t, int32_t id, dsv4_strbuf *out,
                                  dsv4_error *err);
/* Emits whatever is pending (as U+FFFD) and resets the state. */
dsv4_status dsv4_detok_flush(dsv4_detok *d, dsv4_strbuf *out, dsv4_error *err);
/* Bytes currently held back (0..3). */
size_t dsv4_detok_pending(const dsv4_detok *d);

#endif
