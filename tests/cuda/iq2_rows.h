/* IQ2_XXS weight rows for the MoE kernels' host emulations (moe_half_emu_check, moe_ws_emu_check): rows
 * quantized from random floats, or random bytes with block scales of about dscale (every code pattern).
 * Include after check_rng.h (nxt, uni). */
#ifndef DSV4_TEST_IQ2_ROWS_H
#define DSV4_TEST_IQ2_ROWS_H

#include <stdlib.h>
#include <string.h>

static uint8_t *make_rows(int in, int rows, int random_bytes, float dscale, uint64_t *rb) {
    dsv4_type_row_bytes(DSV4_TYPE_IQ2_XXS, (uint64_t)in, rb);
    uint8_t *d = (uint8_t *)malloc(*rb * rows);
    float *wf = (float *)malloc(in * sizeof(float));
    const int nb = in / 256;
    for (int r = 0; r < rows; r++) {
        uint8_t *row = d + (size_t)r * *rb;
        if (random_bytes) {
            for (uint64_t i = 0; i < *rb; i++) row[i] = (uint8_t)nxt();
            for (int b = 0; b < nb; b++) {
                const uint16_t dv = dsv4_f32_to_f16(uni() * dscale);
                memcpy(row + 66 * b, &dv, 2);
            }
        } else {
            for (int i = 0; i < in; i++) wf[i] = uni() * 5.0f * dscale;
            quant_quantize_row(DSV4_TYPE_IQ2_XXS, wf, row, in);
        }
    }
    free(wf);
    return d;
}

#endif
