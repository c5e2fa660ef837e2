/* Small UTF-8 helpers shared by the text module. */
#ifndef DSV4_TEXT_UTF8_H
#define DSV4_TEXT_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Length of the valid UTF-8 sequence at s[0..n) (1..4); -1 if s is a valid but incomplete prefix
 * cut by n; 0 if it is ill-formed (overlong, surrogate, > U+10FFFF, bad lead or continuation),
 * with *bad (if not NULL) set to the length of the maximal ill-formed subpart (Unicode §3.9),
 * i.e. the bytes one U+FFFD replaces. */
int dsv4_utf8_valid_len(const uint8_t *s, size_t n, uint32_t *cp, size_t *bad);
/* Writes cp (<= 0x10FFFF) as UTF-8; returns the byte count (1..4). */
int dsv4_utf8_put(uint8_t *out, uint32_t cp);

#endif
