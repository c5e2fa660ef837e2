/* Text for a terminal: model output is arbitrary text, and control characters in it (ESC
 * sequences, C1 controls) would reconfigure the user's terminal (colors, modes, key encodings,
 * titles). On a terminal the CLI writes generated text through this filter; files and pipes get
 * the bytes verbatim. */
#ifndef DSV4_TEXT_TERMSAFE_H
#define DSV4_TEXT_TERMSAFE_H

#include <stddef.h>

#include "common/status.h"
#include "text/strbuf.h"

/* Appends s[0..n) (valid UTF-8, as the streaming detokenizer emits) to out with every C0 control
 * other than tab and newline, DEL, and every C1 control (U+0080..U+009F) replaced by U+FFFD. */
dsv4_status dsv4_term_sanitize(const char *s, size_t n, dsv4_strbuf *out, dsv4_error *err);

#endif
