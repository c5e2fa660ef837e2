/* Host-only emulation of the grouped routed-expert path (src/backend/cuda/cuda_ops_moe_grouped.cu):
 * the device list/tile construction replayed lane by lane (warp scan, match_any ranks), the
 * kernels' staging (mg_stage_put) and row units (mg_row, the very code the kernel runs) for every
 * tile and row, the mid and slot sums as the kernels write them. Checked against independent
 * references: the lists against a stable sort by expert, each product against quant_dot_* of the
 * same rows, and the op's output against the CPU backend's moe op, bit for bit. Expert types
 * IQ2_XXS, Q2_K, Q4_K, Q8_0 (quantized rows and random bytes with finite scales), widths with an
 * odd number of blocks (2-byte aligned rows), experts with more pairs than a tile. Needs no GPU
 * (exit 0 = pass). Build: make BUILD=build-x cuda-tests -> build-x/cuda/moe_grouped_emu_check */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_moe_grouped.cuh"
extern "C" {
#include "backend/backend.h"
#include "backend/cpu/cpu_internal.h" /* cpu_silu: the CPU's SiLU */
}

#define CHECK_RNG_SEED 4242
#include "check_rng.h"

static int kind_of(uint32_t type) {
    return type == DSV4_TYPE_Q8_0   ? GM_Q8_0
           : type == DSV4_TYPE_Q2_K ? GM_Q2_K
           : type == DSV4_TYPE_Q4_K ? GM_Q4_K
                                    : GM_IQ2_XXS;
}
static size_t act_bytes(int kind, int in) {
    return kind == GM_Q8_0 ? (size_t)(in / 32) * sizeof(dsv4_q8_0_act)
                           : (size_t)(in / 256) * sizeof(dsv4_q8_k);
}
static void quant_act(int kind, const float *x, uint8_t *dst, int in) {
    if (kind == GM_Q8_0)
        quant_act_q8_0(x, (dsv4_q8_0_act *)dst, in);
    else
        quant_act_q8_k(x, (dsv4_q8_k *)dst, in);
}
static float ref_dot(int kind, const uint8_t *w, const uint8_t *x, int in) {
    switch (kind) {
    case GM_Q8_0: return quant_dot_q8_0(w, (const dsv4_q8_0_act *)x, in);
    case GM_Q2_K: return quant_dot_q2_k(w, (const dsv4_q8_k *)x, in);
    case GM_Q4_K: return quant_dot_q4_k(w, (const dsv4_q8_k *)x, in);
    default: return quant_dot_iq2_xxs(w, (const dsv4_q8_k *)x, in);
    }
}

/* An expert tensor [in, rows, E]: quantized random rows, or random bytes with finite scales. */
static dsv4_tensor make_experts(const char *name, uint32_t type, int in, int rows, int E, int random_bytes) {
    dsv4_tensor t;
    memset(&t, 0, sizeof t);
    uint64_t rb = 0;
    dsv4_type_row_bytes(type, (uint64_t)in, &rb);
    t.name = name, t.type = type, t.n_dims = 3;
    t.ne[0] = (uint64_t)in, t.ne[1] = (uint64_t)rows, t.ne[2] = (uint64_t)E, t.ne[3] = 1;
    t.row_bytes = rb, t.nbytes = rb * rows * E;
    uint8_t *d = (uint8_t *)malloc(t.nbytes);
    float *wf = (float *)malloc(in * sizeof(float));
    const int kind = kind_of(type), blk = mg_block_elems(kind), bb = (int)(rb / (in / blk));
    for (int r = 0; r < rows * E; r++) {
        uint8_t *row = d + (size_t)r * rb;
        if (random_bytes) {
            for (uint64_t i = 0; i < rb; i++) row[i] = (uint8_t)nxt();
            for (int b = 0; b < in / blk; b++) {
                const uint16_t dv = dsv4_f32_to_f16(uni() * 0.01f), dm = dsv4_f32_to_f16(uni() * 0.01f);
                uint8_t *p = row + b * bb;
                if (kind == GM_Q8_0 || kind == GM_IQ2_XXS) memcpy(p, &dv, 2);
                if (kind == GM_Q4_K) memcpy(p, &dv, 2), memcpy(p + 2, &dm, 2);
                if (kind == GM_Q2_K) memcpy(p + 80, &dv, 2), memcpy(p + 82, &dm, 2);
            }
        } else {
            for (int i = 0; i < in; i++) wf[i] = uni() * 0.05f;
            quant_quantize_row(type, wf, row, in);
        }
    }
    free(wf);
    t.data = d;
    return t;
}

/* mg_index_kernel replayed: counts, the warp scan of 32 experts at a time (tiles in expert order),
 * then the scatter of 32 pairs at a time, a lane's place = cursor + lanes below with its expert. */
static int emu_index(const int32_t *sel, int P, int E, int *tiles /* 3 per tile */, int32_t *list) {
    int *cnt = (int *)calloc(E, sizeof(int)), *cur = (int *)calloc(E, sizeof(int));
    for (int i = 0; i < P; i++)
        if (sel[i] >= 0 && sel[i] < E) cnt[sel[i]]++;
    int pbase = 0, tbase = 0;
    for (int e0 = 0; e0 < E; e0 += 32) {
        int ic[32], it[32], c[32], nt[32];
        for (int l = 0; l < 32; l++) {
            c[l] = e0 + l < E ? cnt[e0 + l] : 0, nt[l] = (c[l] + MG_TT - 1) / MG_TT;
            ic[l] = c[l] + (l ? ic[l - 1] : 0), it[l] = nt[l] + (l ? it[l - 1] : 0);
        }
        for (int l = 0; l < 32 && e0 + l < E; l++) {
            const int off = pbase + ic[l] - c[l], toff = tbase + it[l] - nt[l];
            cur[e0 + l] = off;
            for (int j = 0; j < nt[l]; j++) {
                tiles[3 * (toff + j)] = e0 + l;
                tiles[3 * (toff + j) + 1] = off + j * MG_TT;
                tiles[3 * (toff + j) + 2] = c[l] - j * MG_TT < MG_TT ? c[l] - j * MG_TT : MG_TT;
            }
        }
        pbase += ic[31], tbase += it[31];
    }
    for (int i0 = 0; i0 < P; i0 += 32) {
        int e[32], place[32];
        for (int l = 0; l < 32; l++) {
            e[l] = i0 + l < P ? sel[i0 + l] : -1;
            if (e[l] < 0 || e[l] >= E) e[l] = -1;
        }
        for (int l = 0; l < 32; l++) {
            int below = 0;
            for (int m = 0; m < l; m++) below += e[m] == e[l];
            place[l] = e[l] >= 0 ? cur[e[l]] + below : -1;
        }
        for (int l = 0; l < 32; l++)
            if (place[l] >= 0) list[place[l]] = i0 + l;
        for (int l = 0; l < 32; l++)
            if (e[l] >= 0) {
                int below = 0, same = 0;
                for (int m = 0; m < 32; m++) same += e[m] == e[l], below += m < l && e[m] == e[l];
                if (below == 0) cur[e[l]] += same;
            }
    }
    free(cnt), free(cur);
    return tbase;
}

/* One grouped product (mg_kernel): for every tile and row, the tile staged from the activation
 * rows' words and mg_row; out rows per pair. Also checks each value against quant_dot_*. */
static int emu_products(const dsv4_tensor *w, const uint8_t *act, size_t act_stride, int act_div,
                        const int *tiles, int n_tiles, const int32_t *list, float *out, int *bad_dots) {
    const int kind = kind_of(w->type), in = (int)w->ne[0], rows = (int)w->ne[1];
    uint8_t *sm = (uint8_t *)aligned_alloc(16, (mg_xtile_bytes(kind, in) + 15) & ~(size_t)15);
    const mg_xtile x = mg_xtile_at(sm, kind, in);
    uint64_t smask[128];
    for (int s = 0; s < 128; s++) smask[s] = mg_sign_mask(dsv4_ksigns_iq2xs, s);
    const int wpb = mg_act_block_words(kind), wpr = x.nblk * wpb;
    int tiles_seen = 0;
    for (int ti = 0; ti < n_tiles; ti++) {
        const int e = tiles[3 * ti], start = tiles[3 * ti + 1], mt = tiles[3 * ti + 2];
        memset(sm, 0xa5, mg_xtile_bytes(kind, in)); /* stale shared memory */
        for (int t = 0; t < mt; t++) {
            const uint8_t *row = act + (size_t)(list[start + t] / act_div) * act_stride;
            for (int i = 0; i < wpr; i++) {
                uint32_t v;
                memcpy(&v, row + 4 * (size_t)i, 4);
                mg_stage_put(x, kind, t, i / wpb, i % wpb, v);
            }
        }
        for (int r = 0; r < rows; r++) {
            const uint8_t *wr = (const uint8_t *)dsv4_tensor_expert_row(w, (uint64_t)e, (uint64_t)r);
            float acc[MG_TT];
            switch (kind) {
            case GM_Q8_0: mg_row<GM_Q8_0>(wr, x, mt, dsv4_iq2xxs_grid, smask, acc); break;
            case GM_Q2_K: mg_row<GM_Q2_K>(wr, x, mt, dsv4_iq2xxs_grid, smask, acc); break;
            case GM_Q4_K: mg_row<GM_Q4_K>(wr, x, mt, dsv4_iq2xxs_grid, smask, acc); break;
            default: mg_row<GM_IQ2_XXS>(wr, x, mt, dsv4_iq2xxs_grid, smask, acc); break;
            }
            for (int t = 0; t < mt; t++) {
                const int pr = list[start + t];
                const float ref = ref_dot(kind, wr, act + (size_t)(pr / act_div) * act_stride, in);
                if (memcmp(&ref, &acc[t], 4)) {
                    if (*bad_dots < 3)
                        fprintf(stderr, "  %s expert %d row %d pair %d: %.9g vs quant_dot %.9g\n", w->name, e,
                                r, pr, acc[t], ref);
                    (*bad_dots)++;
                }
                out[(size_t)pr * rows + r] = acc[t];
            }
        }
        tiles_seen++;
    }
    free(sm);
    return tiles_seen;
}

static int run_case(uint32_t tg, uint32_t tdn, int in, int ff, int embd, int E, int n, int k,
                    int random_bytes, float clamp, dsv4_backend *cpu) {
    char nm[3][32];
    snprintf(nm[0], 32, "gate %s", dsv4_type_name(tg));
    snprintf(nm[1], 32, "up %s", dsv4_type_name(tg));
    snprintf(nm[2], 32, "down %s", dsv4_type_name(tdn));
    dsv4_tensor gate = make_experts(nm[0], tg, in, ff, E, random_bytes);
    dsv4_tensor up = make_experts(nm[1], tg, in, ff, E, random_bytes);
    dsv4_tensor down = make_experts(nm[2], tdn, ff, embd, E, random_bytes);
    const int P = n * k, kg = kind_of(tg), kd = kind_of(tdn);
    float *x = (float *)malloc(sizeof(float) * n * in), *wt = (float *)malloc(sizeof(float) * P);
    int32_t *sel = (int32_t *)malloc(sizeof(int32_t) * P);
    for (int i = 0; i < n * in; i++) x[i] = uni() * (i % 97 == 0 ? 8.0f : 1.0f);
    for (int t = 0; t < n; t++) /* distinct experts per token, expert 1 and 2 popular */
        for (int s = 0; s < k; s++) {
            int e = s == 0 && t % 3 ? 1 : (s == 1 && t % 2 ? 2 : (int)(nxt() % (uint64_t)E));
            for (;;) {
                bool dup = false;
                for (int q = 0; q < s; q++) dup |= sel[t * k + q] == e;
                if (!dup) break;
                e = (int)(nxt() % (uint64_t)E);
            }
            sel[t * k + s] = e, wt[t * k + s] = 0.1f + 0.9f * fabsf(uni());
        }
    /* CPU reference */
    float *ref = (float *)malloc(sizeof(float) * n * embd), *got = (float *)malloc(sizeof(float) * n * embd);
    dsv4_error err;
    memset(&err, 0, sizeof err);
    int fails = 0;
    if (cpu->ops->moe(cpu->ctx, &gate, &up, &down, x, (uint32_t)n, sel, wt, (uint32_t)k, clamp, ref, &err) !=
        DSV4_OK) {
        printf("FAIL cpu moe: %s\n", err.msg);
        return 1;
    }
    /* 1. inputs */
    const size_t xb = act_bytes(kg, in), mb = act_bytes(kd, ff);
    uint8_t *xq = (uint8_t *)malloc(xb * n), *mq = (uint8_t *)malloc(mb * P);
    for (int t = 0; t < n; t++) quant_act(kg, x + (size_t)t * in, xq + xb * t, in);
    /* 2. lists */
    const int max_tiles = (P + (MG_TT - 1) * (E < P ? E : P) + MG_TT - 1) / MG_TT;
    int *tiles = (int *)malloc(sizeof(int) * 3 * max_tiles);
    int32_t *list = (int32_t *)malloc(sizeof(int32_t) * P);
    const int n_tiles = emu_index(sel, P, E, tiles, list);
    int bad_list = n_tiles > max_tiles;
    { /* independent: a stable sort of pair ids by expert, and tiles covering each expert's run */
        int pos = 0, ti = 0;
        for (int e = 0; e < E; e++) {
            const int first = pos;
            for (int i = 0; i < P; i++)
                if (sel[i] == e) bad_list += list[pos++] != i;
            for (int s0 = first; s0 < pos; s0 += MG_TT, ti++)
                bad_list += ti >= n_tiles || tiles[3 * ti] != e || tiles[3 * ti + 1] != s0 ||
                            tiles[3 * ti + 2] != (pos - s0 < MG_TT ? pos - s0 : MG_TT);
        }
        bad_list += ti != n_tiles;
    }
    /* 3. gate and up, mid as the up thread writes it */
    float *g = (float *)malloc(sizeof(float) * P * ff), *u = (float *)malloc(sizeof(float) * P * ff);
    float *mid = (float *)malloc(sizeof(float) * P * ff), *y = (float *)malloc(sizeof(float) * P * embd);
    int bad_dots = 0;
    emu_products(&gate, xq, xb, k, tiles, n_tiles, list, g, &bad_dots);
    emu_products(&up, xq, xb, k, tiles, n_tiles, list, u, &bad_dots);
    for (int p = 0; p < P; p++)
        for (int r = 0; r < ff; r++) {
            float gv = g[(size_t)p * ff + r], uv = u[(size_t)p * ff + r];
            if (clamp > 1.0e-6f) {
                if (gv > clamp) gv = clamp;
                if (uv > clamp) uv = clamp;
                if (uv < -clamp) uv = -clamp;
            }
            mid[(size_t)p * ff + r] = cpu_silu(gv) * uv * wt[p];
        }
    /* 4.-6. */
    for (int p = 0; p < P; p++) quant_act(kd, mid + (size_t)p * ff, mq + mb * p, ff);
    emu_products(&down, mq, mb, 1, tiles, n_tiles, list, y, &bad_dots);
    for (int t = 0; t < n; t++)
        for (int d = 0; d < embd; d++) {
            float acc = 0.0f;
            for (int s = 0; s < k; s++) acc += y[((size_t)t * k + s) * embd + d];
            got[(size_t)t * embd + d] = acc;
        }
    int bad_out = 0;
    for (int i = 0; i < n * embd; i++) bad_out += memcmp(&got[i], &ref[i], 4) != 0;
    fails = bad_list || bad_dots || bad_out;
    printf("%s %s/%s in=%d ff=%d embd=%d E=%d n=%d k=%d %s clamp %g: %d tiles, list %s, %d dots and %d of %d "
           "outputs differ from the CPU\n",
           fails ? "FAIL" : "ok  ", dsv4_type_name(tg), dsv4_type_name(tdn), in, ff, embd, E, n, k,
           random_bytes ? "random bytes" : "quantized", clamp, n_tiles, bad_list ? "WRONG" : "ok", bad_dots,
           bad_out, n * embd);
    free((void *)gate.data), free((void *)up.data), free((void *)down.data);
    free(x), free(wt), free(sel), free(ref), free(got), free(xq), free(mq), free(tiles), free(list);
    free(g), free(u), free(mid), free(y);
    return fails;
}

/* The chunk-size rule between the scalar and the tensor-core products (mg_mma_chunk), against the
 * measured crossover it encodes: IQ2_XXS from 7.5 pairs per expert, other types from 4 tokens, and
 * DSV4_CUDA_MOE_MMA_MIN_N over both. */
static int check_mma_chunk_rule(void) {
    int bad = 0;
    unsetenv("DSV4_CUDA_MOE_MMA_MIN_N");
    /* flash q2: E = 256, k = 6 -> n >= 320 */
    bad += mg_mma_chunk(DSV4_TYPE_IQ2_XXS, 319, 319 * 6, 256) != false;
    bad += mg_mma_chunk(DSV4_TYPE_IQ2_XXS, 320, 320 * 6, 256) != true;
    bad += mg_mma_chunk(DSV4_TYPE_IQ2_XXS, 2048, 2048 * 6, 256) != true;
    /* a small model: E = 8, k = 2 -> 2P >= 120 -> n >= 30 */
    bad += mg_mma_chunk(DSV4_TYPE_IQ2_XXS, 29, 58, 8) != false;
    bad += mg_mma_chunk(DSV4_TYPE_IQ2_XXS, 30, 60, 8) != true;
    /* Q4_K and the others: from 4 tokens */
    bad += mg_mma_chunk(DSV4_TYPE_Q4_K, 3, 18, 256) != false;
    bad += mg_mma_chunk(DSV4_TYPE_Q4_K, 4, 24, 256) != true;
    bad += mg_mma_chunk(DSV4_TYPE_Q8_0, 16, 96, 256) != true;
    /* the override, for every type; values outside 2..2^24 are ignored */
    setenv("DSV4_CUDA_MOE_MMA_MIN_N", "2", 1);
    bad += mg_mma_chunk(DSV4_TYPE_IQ2_XXS, 2, 12, 256) != true;
    setenv("DSV4_CUDA_MOE_MMA_MIN_N", "100", 1);
    bad += mg_mma_chunk(DSV4_TYPE_Q4_K, 99, 594, 256) != false;
    bad += mg_mma_chunk(DSV4_TYPE_IQ2_XXS, 100, 600, 256) != true;
    setenv("DSV4_CUDA_MOE_MMA_MIN_N", "1", 1);
    bad += mg_mma_chunk(DSV4_TYPE_IQ2_XXS, 100, 600, 256) != false;
    unsetenv("DSV4_CUDA_MOE_MMA_MIN_N");
    printf("%s tensor-core chunk rule: %d wrong decisions\n", bad ? "FAIL" : "ok  ", bad);
    return bad != 0;
}

int main(void) {
    dsv4_backend cpu;
    dsv4_error err;
    memset(&err, 0, sizeof err);
    if (dsv4_backend_cpu_create(1, &cpu, &err) != DSV4_OK) {
        fprintf(stderr, "cpu backend: %s\n", err.msg);
        return 2;
    }
    int fails = check_mma_chunk_rule();
    /* the model's combination (odd block counts: rows only 2-byte aligned), then the others */
    fails += run_case(DSV4_TYPE_IQ2_XXS, DSV4_TYPE_Q2_K, 256, 256, 128, 5, 37, 3, 0, 10.0f, &cpu);
    fails += run_case(DSV4_TYPE_IQ2_XXS, DSV4_TYPE_Q2_K, 512, 256, 256, 12, 7, 6, 1, 0.0f, &cpu);
    fails += run_case(DSV4_TYPE_IQ2_XXS, DSV4_TYPE_IQ2_XXS, 768, 256, 64, 5, 2, 2, 1, 10.0f, &cpu);
    fails += run_case(DSV4_TYPE_Q2_K, DSV4_TYPE_Q4_K, 512, 256, 128, 6, 23, 4, 1, 0.0f, &cpu);
    fails += run_case(DSV4_TYPE_Q4_K, DSV4_TYPE_Q4_K, 256, 512, 96, 7, 19, 2, 0, 10.0f, &cpu);
    fails += run_case(DSV4_TYPE_Q8_0, DSV4_TYPE_Q8_0, 96, 160, 64, 5, 29, 3, 0, 10.0f, &cpu);
    fails += run_case(DSV4_TYPE_Q8_0, DSV4_TYPE_Q2_K, 224, 256, 64, 4, 11, 2, 1, 0.0f, &cpu);
    fails += run_case(DSV4_TYPE_Q4_K, DSV4_TYPE_Q8_0, 256, 96, 64, 3, 70, 3, 0, 10.0f, &cpu);
    /* the model's input width (random bytes: the IQ2_XXS quantizer is slow) */
    fails += run_case(DSV4_TYPE_IQ2_XXS, DSV4_TYPE_Q2_K, 4096, 256, 64, 6, 9, 6, 1, 10.0f, &cpu);
    dsv4_backend_destroy(&cpu);
    printf("%s\n", fails ? "MOE GROUPED EMULATION FAILED" : "MOE GROUPED EMULATION PASSED");
    return fails ? 1 : 0;
}
