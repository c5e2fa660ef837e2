#include "graph/rope.h"

#include <math.h>

static float corr_dim(uint32_t n_dims, uint64_t n_ctx_orig, float beta, float base) {
    return (float)n_dims * logf((float)n_ctx_orig / (beta * 2.0f * (float)M_PI)) / (2.0f * logf(base));
}

void dsv4_rope_yarn_corr_dims(uint32_t n_rot, uint64_t orig_ctx, float base, float beta_fast, float beta_slow,
                              float *lo, float *hi) {
    const float start = floorf(corr_dim(n_rot, orig_ctx, beta_fast, base));
    const float end = ceilf(corr_dim(n_rot, orig_ctx, beta_slow, base));
    *lo = fmaxf(0.0f, start);
    *hi = fminf((float)(n_rot - 1), end);
}

dsv4_rope dsv4_rope_for_layer(const dsv4_config *cfg, uint32_t il) {
    dsv4_rope r = {0};
    const bool compressed = cfg->compress_ratio[il] != 0;
    r.n_rot = cfg->n_rot;
    r.freq_base = compressed && cfg->compress_rope_freq_base > 0.0f ? cfg->compress_rope_freq_base
                                                                    : cfg->rope_freq_base;
    r.freq_scale = compressed && cfg->rope_scale_factor > 0.0f ? 1.0f / cfg->rope_scale_factor : 1.0f;
    r.ext_factor = compressed && cfg->rope_scale_factor > 1.0f ? 1.0f : 0.0f;
    r.attn_factor = 1.0f;
    if (r.ext_factor != 0.0f) {
        /* The YaRN helper multiplies by 1 + 0.1 ln(1/scale); DeepSeek V4 interpolates without a
         * magnitude change, so ds4 passes the inverse factor (the product is exactly 1.0f for 16).
         * Spec §11 lists the YaRN softmax temperature as UNSURE for the official model; ds4.c
         * (rope_tail_layer_inplace, 8d57664) applies none and keeps the 1/sqrt(head_dim) scale,
         * and so do we. */
        r.attn_factor /= 1.0f + 0.1f * logf(1.0f / r.freq_scale);
        dsv4_rope_yarn_corr_dims(r.n_rot, cfg->rope_orig_ctx, r.freq_base, cfg->yarn_beta_fast,
                                 cfg->yarn_beta_slow, &r.corr_lo, &r.corr_hi);
    }
    return r;
}
