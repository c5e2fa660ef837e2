#include "text/bytemap.h"

#include <stdbool.h>

static bool maps_to_self(uint32_t b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174; }

/* Computed on the fly (no table, so no global state): the rank of b among non-self bytes. */
uint32_t dsv4_gpt2_byte_to_cp(uint8_t b) {
    if (maps_to_self(b)) return b;
    uint32_t rank;
    if (b <= 32)
        rank = b; /* 0..32 -> 33 bytes */
    else if (b <= 160)
        rank = 33 + (b - 127); /* 127..160 -> 34 bytes */
    else
        rank = 67; /* 173 */
    return 256 + rank;
}

int dsv4_gpt2_cp_to_byte(uint32_t cp) {
    if (cp < 256) return maps_to_self(cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    uint32_t rank = cp - 256;
    if (rank <= 32) return (int)rank;
    if (rank <= 66) return (int)(127 + rank - 33);
    return 173;
}
