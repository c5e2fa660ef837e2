/* Layout checks: the block structs must match the GGUF byte layouts exactly. */
#include <stddef.h>

#include "quant/quant.h"

_Static_assert(sizeof(dsv4_block_q8_0) == 34, "Q8_0 block is 34 bytes");
_Static_assert(sizeof(dsv4_block_q2_k) == 84, "Q2_K block is 84 bytes");
_Static_assert(offsetof(dsv4_block_q2_k, d) == 80, "Q2_K d follows scales and qs");
_Static_assert(sizeof(dsv4_block_q4_k) == 144, "Q4_K block is 144 bytes");
_Static_assert(offsetof(dsv4_block_q4_k, qs) == 16, "Q4_K qs at byte 16");
_Static_assert(sizeof(dsv4_block_iq2_xxs) == 66, "IQ2_XXS block is 66 bytes");
_Static_assert(sizeof(dsv4_q8_0_act) == 36, "Q8_0 activation block is 36 bytes");
_Static_assert(sizeof(dsv4_q8_k) == 292, "Q8_K block is 292 bytes");
_Static_assert(offsetof(dsv4_q8_k, bsums) == 260, "Q8_K bsums at byte 260");
