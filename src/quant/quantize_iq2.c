/* IQ2_XXS weight quantizer: exhaustive nearest-grid search per group of 8 with the signs taken
 * from the data, exhaustive 4-bit sub-block scale choice, and a short search over the f16
 * superblock scale. The 8th sign of a group is implied (ksigns parity: an even number of
 * negatives), so when the data has an odd number of negatives the smallest-magnitude element is
 * represented with the opposite sign (its target becomes -|x|). */
#include <math.h>
#include <string.h>

#include "quant/quant_internal.h"

typedef struct {
    uint8_t sign7; /* 7 stored sign bits */
    float gt[256]; /* Σ_k grid_k * t_k for every grid entry */
    float tt;      /* Σ t_k² */
} iq2_group;

static void group_prepare(const float *x, iq2_group *gr) {
    float t[8];
    int neg = 0, smallest = 0;
    for (int k = 0; k < 8; k++) {
        t[k] = fabsf(x[k]);
        if (x[k] < 0.0f) neg ^= 1 << k;
        if (fabsf(x[k]) < fabsf(x[smallest])) smallest = k;
    }
    if (__builtin_popcount((unsigned)neg) & 1) {
        neg ^= 1 << smallest;
        t[smallest] = -t[smallest];
    }
    gr->sign7 = (uint8_t)(neg & 127);
    gr->tt = 0.0f;
    for (int k = 0; k < 8; k++) gr->tt += t[k] * t[k];
    for (int g = 0; g < 256; g++) {
        float s = 0.0f;
        for (int k = 0; k < 8; k++) s += (float)quant_iq2_grid_elem((uint32_t)g, k) * t[k];
        gr->gt[g] = s;
    }
}

/* Best grid entry for scale db; returns the squared error Σ (db*g_k - t_k)². */
static float group_best(const iq2_group *gr, const float *g2, float db, uint8_t *best_g) {
    float best = INFINITY;
    int bi = 0;
    for (int g = 0; g < 256; g++) {
        const float c = db * db * g2[g] - 2.0f * db * gr->gt[g];
        if (c < best) {
            best = c;
            bi = g;
        }
    }
    *best_g = (uint8_t)bi;
    return fmaxf(0.0f, best + gr->tt);
}

/* Best 4-bit scale of one sub-block for superblock scale d; returns its error. */
static float subblock_best(const iq2_group *grp, const float *g2, float d, uint8_t *ls_out, uint8_t idx[4]) {
    float best = INFINITY;
    for (int ls = 0; ls < 16; ls++) {
        const float db = d * (0.5f + (float)ls) * 0.25f;
        uint8_t gi[4];
        float err = 0.0f;
        for (int l = 0; l < 4; l++) err += group_best(&grp[l], g2, db, &gi[l]);
        if (err < best) {
            best = err;
            *ls_out = (uint8_t)ls;
            memcpy(idx, gi, 4);
        }
    }
    return best;
}

void quant_quantize_iq2_xxs(const float *x, void *dst, int64_t n) {
    dsv4_block_iq2_xxs *y = dst;
    float g2[256];
    for (int g = 0; g < 256; g++) {
        g2[g] = 0.0f;
        for (int k = 0; k < 8; k++)
            g2[g] += (float)(quant_iq2_grid_elem((uint32_t)g, k) * quant_iq2_grid_elem((uint32_t)g, k));
    }
    iq2_group grp[32];
    for (int64_t b = 0; b < n / DSV4_QK_K; b++, x += DSV4_QK_K) {
        float amax = 0.0f;
        for (int i = 0; i < DSV4_QK_K; i++) amax = fmaxf(amax, fabsf(x[i]));
        memset(&y[b], 0, sizeof(y[b]));
        if (amax == 0.0f) continue; /* d = 0: all zeros */
        for (int l = 0; l < 32; l++) group_prepare(x + 8 * l, &grp[l]);
        /* d0 maps the largest magnitude to the top grid value at the top sub-block scale; the
         * error-optimal d is usually smaller, so a few fractions of it are tried. */
        const float d0 = amax / (43.0f * 15.5f * 0.25f);
        static const float fracs[] = {0.45f, 0.55f, 0.65f, 0.75f, 0.85f, 1.0f};
        float best_err = INFINITY;
        for (size_t fi = 0; fi < sizeof(fracs) / sizeof(fracs[0]); fi++) {
            const uint16_t d16 = dsv4_f32_to_f16(d0 * fracs[fi]);
            const float d = dsv4_f16_to_f32(d16);
            if (!(d > 0.0f) || !isfinite(d)) continue;
            uint8_t ls[8], idx[8][4];
            float err = 0.0f;
            for (int sb = 0; sb < 8 && err < best_err; sb++)
                err += subblock_best(&grp[4 * sb], g2, d, &ls[sb], idx[sb]);
            if (err >= best_err) continue;
            best_err = err;
            y[b].d = d16;
            for (int sb = 0; sb < 8; sb++) {
                uint32_t a0 = 0, a1 = (uint32_t)ls[sb] << 28;
                for (int l = 0; l < 4; l++) {
                    a0 |= (uint32_t)idx[sb][l] << (8 * l);
                    a1 |= (uint32_t)grp[4 * sb + l].sign7 << (7 * l);
                }
                memcpy(y[b].qs + 4 * sb, &a0, 4);
                memcpy(y[b].qs + 4 * sb + 2, &a1, 4);
            }
        }
    }
}
