/* GPT-2 byte-level map: every raw byte gets a printable codepoint so merges work on UTF-8
 * strings without losing byte identity (spec §5.1). Bytes 33-126, 161-172 and 174-255 map to
 * themselves; the other 68 bytes, ascending, map to 256, 257, ... */
#ifndef DSV4_TEXT_BYTEMAP_H
#define DSV4_TEXT_BYTEMAP_H

#include <stdint.h>

uint32_t dsv4_gpt2_byte_to_cp(uint8_t b);
/* The byte for a codepoint, or -1 if the codepoint is outside the map. */
int dsv4_gpt2_cp_to_byte(uint32_t cp);

#endif
