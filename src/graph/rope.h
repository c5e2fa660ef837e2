/* Which RoPE a layer uses (spec model-attention-hc.md §4.3): ratio-0 layers plain RoPE with
 * rope.freq_base; compressed layers (ratio != 0) the compress base with YaRN, whose correction
 * range comes from the config's rope params. Magnitude scaling is cancelled as ds4 does. */
#ifndef DSV4_GRAPH_ROPE_H
#define DSV4_GRAPH_ROPE_H

#include "backend/backend.h"
#include "model/config.h"

dsv4_rope dsv4_rope_for_layer(const dsv4_config *cfg, uint32_t il);
/* ggml/ds4 YaRN correction dims: floor/ceil of the dims where the wavelength crosses
 * orig_ctx / beta, clamped to [0, n_rot - 1]. */
void dsv4_rope_yarn_corr_dims(uint32_t n_rot, uint64_t orig_ctx, float base, float beta_fast, float beta_slow,
                              float *lo, float *hi);

#endif
