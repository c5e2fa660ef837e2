/* Host emulation of the tensor-core grouped expert products (src/backend/cuda/cuda_ops_moe_mma.cu):
 * every CTA run on the CPU with the kernel's own units (cuda_moe_mma.cuh: activation staging into
 * a shared-memory image, per-lane raw loads and decode into the warps' int8 tiles and scales,
 * fragment reads, per-step integer scaling, per-superblock float update, the gate/up exchange
 * through the gate warps' tiles) and mma.m16n8k32.row.col.s8 emulated from its PTX fragment
 * layout. Each product is compared bit for bit with quant_dot_* (and its scalar reference) of the
 * same rows; mid values with cpu_silu(min(g, c)) * clamp(u) * w from those references. IQ2_XXS,
 * Q2_K, Q4_K experts, quantized rows and random bytes (largest grid values / scales / mins),
 * tiles of 16 and 32 pairs, ragged pair counts and row counts. Needs no GPU (exit 0 = pass).
 * Build: make BUILD=build-x cuda-tests -> build-x/cuda/moe_mma_emu_check */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_moe_mma.cuh"
extern "C" {
#include "backend/cpu/cpu_internal.h" /* cpu_silu */
}

#define CHECK_RNG_SEED 777
#include "check_rng.h"

/* D = A B + C for one warp, operands in the per-lane fragment layout (PTX ISA, m16n8k32 .s8). */
static void emu_mma(int32_t d[32][4], const uint32_t a[32][4], const uint32_t b[32][2],
                    const int32_t c[32][4]) {
    int8_t A[16][32], B[32][8];
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane >> 2, t = lane & 3;
        for (int i = 0; i < 4; i++) {
            A[g][4 * t + i] = (int8_t)(a[lane][0] >> (8 * i));
            A[g + 8][4 * t + i] = (int8_t)(a[lane][1] >> (8 * i));
            A[g][16 + 4 * t + i] = (int8_t)(a[lane][2] >> (8 * i));
            A[g + 8][16 + 4 * t + i] = (int8_t)(a[lane][3] >> (8 * i));
            B[4 * t + i][g] = (int8_t)(b[lane][0] >> (8 * i));
            B[16 + 4 * t + i][g] = (int8_t)(b[lane][1] >> (8 * i));
        }
    }
    int32_t D[32][4];
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane >> 2, t = lane & 3;
        for (int i = 0; i < 4; i++) {
            const int r = g + (i >> 1) * 8, col = 2 * t + (i & 1);
            int32_t s = c[lane][i];
            for (int k = 0; k < 32; k++) s += (int32_t)A[r][k] * (int32_t)B[k][col];
            D[lane][i] = s;
        }
    }
    memcpy(d, D, sizeof D);
}

struct prod {
    const uint8_t *w0, *w1; /* experts [E][rows][row_bytes] */
    uint64_t row_bytes;
    int rows, in;
    const uint8_t *act; /* Q8_K rows */
    uint64_t act_stride;
    int act_div;
    const float *weights;
    float clamp;
    float *out;
};

/* One CTA of mx_kernel<K, BN, DUAL>: tile (e, start, mt) of list, row block by. */
template <int K, int BN, bool DUAL>
static void emu_cta(const prod &p, const int32_t *list, int e, int start, int mt, int by, uint8_t *sm) {
    constexpr int NT = BN / 8;
    const int BB = K == GM_IQ2_XXS ? 66 : K == GM_Q2_K ? 84 : 144;
    const mx_layout L = mx_layout_of(BN, p.in);
    memset(sm, 0xa5, (size_t)L.total); /* stale bytes must not reach a result */
    int *pid = (int *)(sm + L.pid);
    uint64_t *grid = (uint64_t *)(sm + L.tables), *smask = grid + 256;
    for (int t = 0; t < mt; t++) pid[t] = list[start + t];
    if (K == GM_IQ2_XXS) {
        for (int i = 0; i < 256; i++) grid[i] = dsv4_iq2xxs_grid[i];
        for (int i = 0; i < 128; i++) smask[i] = mg_sign_mask(dsv4_ksigns_iq2xs, i);
    }
    mx_load_x(p.act, p.act_stride, p.act_div, pid, mt, BN, p.in, L.xrow, sm + L.xq, (float *)(sm + L.xd), 0,
              1);
    const float *xd = (const float *)(sm + L.xd);
    const int ROWS = DUAL ? MX_BM / 2 : MX_BM, nblk = p.in / 256, nt_act = (mt + 7) / 8;
    static float acc[MX_WARPS][32][NT][4];
    for (int warp = 0; warp < MX_WARPS; warp++) {
        const int rw = DUAL ? (warp & 3) : warp, which = DUAL ? warp >> 2 : 0;
        const int row0 = by * ROWS + 16 * rw;
        uint8_t *ws = sm + L.ws + warp * MX_WS, *dec = sm + L.dec + warp * MX_DEC;
        memset(acc[warp], 0, sizeof acc[warp]);
        for (int s = 0; s < nblk; s++) {
            for (int lane = 0; lane < 32; lane++) {
                const int lr = row0 + (lane >> 1);
                const uint8_t *wrow = (which ? p.w1 : p.w0) + (uint64_t)e * p.rows * p.row_bytes +
                                      (uint64_t)(lr < p.rows ? lr : p.rows - 1) * p.row_bytes;
                uint32_t raw[MX_RAW];
                mx_load_raw<K>(wrow + (uint64_t)s * BB, lane & 1, raw);
                mx_decode<K>(raw, lane, dec, ws, grid, smask);
            }
            static int32_t isum[NT][32][4], mn[NT][32][4];
            memset(isum, 0, sizeof isum), memset(mn, 0, sizeof mn);
            for (int j = 0; j < 8; j++) {
                static uint32_t a[32][4], am[32][4], b[32][2];
                static int32_t d[32][4], zero[32][4];
                for (int lane = 0; lane < 32; lane++) {
                    mx_frag_a(dec, j, lane, a[lane]);
                    if (K != GM_IQ2_XXS) mx_frag_m(ws, j, lane, am[lane]);
                }
                for (int nt = 0; nt < NT && nt < nt_act; nt++) {
                    for (int lane = 0; lane < 32; lane++)
                        mx_frag_b(sm + L.xq, L.xrow, 8 * nt, s, j, lane, b[lane]);
                    emu_mma(d, a, b, K == GM_Q2_K ? isum[nt] : zero);
                    for (int lane = 0; lane < 32; lane++) mx_step<K>(isum[nt][lane], d[lane], ws, j, lane);
                    if (K != GM_IQ2_XXS) emu_mma(mn[nt], am, b, mn[nt]);
                }
            }
            for (int nt = 0; nt < NT && nt < nt_act; nt++)
                for (int lane = 0; lane < 32; lane++)
                    mx_update<K>(acc[warp][lane][nt], isum[nt][lane], mn[nt][lane], ws, xd, nblk, 8 * nt, s,
                                 lane);
        }
        if (K == GM_IQ2_XXS)
            for (int lane = 0; lane < 32; lane++)
                for (int nt = 0; nt < NT; nt++)
                    for (int i = 0; i < 4; i++)
                        acc[warp][lane][nt][i] = qm_mul(0.125f, acc[warp][lane][nt][i]);
    }
    for (int phase = 0; phase < (DUAL ? 2 : 1); phase++)
        for (int warp = 0; warp < MX_WARPS; warp++) {
            const int rw = DUAL ? (warp & 3) : warp, which = DUAL ? warp >> 2 : 0;
            const int row0 = by * ROWS + 16 * rw;
            float *gsh = (float *)(sm + L.dec + (warp & 3) * MX_DEC);
            for (int lane = 0; lane < 32; lane++) {
                const int g = lane >> 2, t = lane & 3;
                for (int nt = 0; nt < NT; nt++)
                    for (int i = 0; i < 4; i++) {
                        const int rl = g + 8 * (i >> 1), tok = 8 * nt + 2 * t + (i & 1);
                        const float v = acc[warp][lane][nt][i];
                        if (DUAL && phase == 0) {
                            if (which == 0) gsh[rl * BN + tok] = v;
                            continue;
                        }
                        if (DUAL && which == 0) continue;
                        if (tok >= mt || row0 + rl >= p.rows) continue;
                        const int pr = pid[tok];
                        float *o = p.out + (uint64_t)pr * p.rows + row0 + rl;
                        if (!DUAL) {
                            *o = v;
                            continue;
                        }
                        float gv = gsh[rl * BN + tok], uv = v;
                        if (p.clamp > 1.0e-6f) {
                            if (gv > p.clamp) gv = p.clamp;
                            if (uv > p.clamp) uv = p.clamp;
                            if (uv < -p.clamp) uv = -p.clamp;
                        }
                        *o = cpu_silu(gv) * uv * p.weights[pr];
                    }
            }
        }
}

static float ref_dot(int kind, const uint8_t *w, const dsv4_q8_k *x, int in, float *scalar) {
    switch (kind) {
    case GM_Q2_K: *scalar = quant_dot_q2_k_scalar(w, x, in); return quant_dot_q2_k(w, x, in);
    case GM_Q4_K: *scalar = quant_dot_q4_k_scalar(w, x, in); return quant_dot_q4_k(w, x, in);
    default: *scalar = quant_dot_iq2_xxs_scalar(w, x, in); return quant_dot_iq2_xxs(w, x, in);
    }
}

static uint8_t *make_experts(uint32_t type, int in, int rows, int E, int random_bytes, uint64_t *rb) {
    dsv4_type_row_bytes(type, (uint64_t)in, rb);
    uint8_t *d = (uint8_t *)malloc(*rb * rows * E);
    float *wf = (float *)malloc(in * sizeof(float));
    const int nb = in / 256, bb = (int)(*rb / nb);
    for (int r = 0; r < rows * E; r++) {
        uint8_t *row = d + (size_t)r * *rb;
        if (random_bytes) {
            for (uint64_t i = 0; i < *rb; i++) row[i] = (uint8_t)nxt();
            for (int b = 0; b < nb; b++) {
                const uint16_t dv = dsv4_f32_to_f16(uni() * 0.01f), dm = dsv4_f32_to_f16(uni() * 0.01f);
                uint8_t *q = row + b * bb;
                if (type == DSV4_TYPE_IQ2_XXS) memcpy(q, &dv, 2);
                if (type == DSV4_TYPE_Q4_K) memcpy(q, &dv, 2), memcpy(q + 2, &dm, 2);
                if (type == DSV4_TYPE_Q2_K) memcpy(q + 80, &dv, 2), memcpy(q + 82, &dm, 2);
            }
        } else {
            for (int i = 0; i < in; i++) wf[i] = uni() * 0.05f;
            quant_quantize_row(type, wf, row, in);
        }
    }
    free(wf);
    return d;
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* n tokens, k slots each over E experts; gate/up [in -> ff] and down [ff -> embd] of type. */
template <int BN>
static int run_case(const char *name, uint32_t type, int in, int ff, int embd, int E, int n, int k,
                    int random_bytes, float clamp) {
    const int kind = type == DSV4_TYPE_Q2_K ? GM_Q2_K : type == DSV4_TYPE_Q4_K ? GM_Q4_K : GM_IQ2_XXS;
    const int P = n * k;
    uint64_t rb_gu, rb_d;
    uint8_t *gate = make_experts(type, in, ff, E, random_bytes, &rb_gu);
    uint8_t *up = make_experts(type, in, ff, E, random_bytes, &rb_gu);
    uint8_t *down = make_experts(type, ff, embd, E, random_bytes, &rb_d);
    /* routes: distinct experts per token, skewed towards a few */
    int32_t *sel = (int32_t *)malloc(P * sizeof(int32_t));
    float *wt = (float *)malloc(P * sizeof(float));
    for (int t = 0; t < n; t++)
        for (int s = 0; s < k; s++) {
            int ex;
            for (;;) {
                ex = nxt() % 3 == 0 ? (int)(nxt() % 3) : (int)(nxt() % E);
                int dup = 0;
                for (int q = 0; q < s; q++) dup |= sel[t * k + q] == ex;
                if (!dup) break;
            }
            sel[t * k + s] = ex;
            wt[t * k + s] = 0.1f + 0.5f * (uni() + 1.0f);
        }
    /* lists by expert in pair order, tiles of BN */
    int32_t *list = (int32_t *)malloc(P * sizeof(int32_t));
    int *tiles = (int *)malloc(3 * (P + E) * sizeof(int)), n_tiles = 0, at = 0;
    for (int ex = 0; ex < E; ex++) {
        const int first = at;
        for (int i = 0; i < P; i++)
            if (sel[i] == ex) list[at++] = i;
        for (int o = first; o < at; o += BN) {
            tiles[3 * n_tiles] = ex, tiles[3 * n_tiles + 1] = o;
            tiles[3 * n_tiles + 2] = at - o < BN ? at - o : BN;
            n_tiles++;
        }
    }
    const size_t xs = (size_t)(in / 256) * sizeof(dsv4_q8_k), ms = (size_t)(ff / 256) * sizeof(dsv4_q8_k);
    uint8_t *xq = (uint8_t *)malloc(xs * n);
    float *xf = (float *)malloc((size_t)(in > ff ? in : ff) * sizeof(float));
    for (int t = 0; t < n; t++) {
        const float sc = t % 5 == 0 ? 40.0f : (t % 7 == 3 ? 1e-3f : 1.0f);
        for (int i = 0; i < in; i++) xf[i] = uni() * sc;
        if (t % 4 == 1)
            for (int i = 0; i < 256; i++) xf[i] = 0.0f; /* a zero block: d = 0 */
        quant_act_q8_k(xf, (dsv4_q8_k *)(xq + xs * t), in);
    }
    float *mid = (float *)malloc((size_t)P * ff * sizeof(float));
    float *y = (float *)malloc((size_t)P * embd * sizeof(float));
    for (size_t i = 0; i < (size_t)P * ff; i++) mid[i] = nanf("");
    for (size_t i = 0; i < (size_t)P * embd; i++) y[i] = nanf("");
    uint8_t *sm = (uint8_t *)malloc((size_t)mx_layout_of(BN, in > ff ? in : ff).total);
    prod pg = {gate, up, rb_gu, ff, in, xq, xs, k, wt, clamp, mid};
    for (int ti = 0; ti < n_tiles; ti++)
        for (int by = 0; by < (ff + 63) / 64; by++) {
            if (kind == GM_Q2_K)
                emu_cta<GM_Q2_K, BN, true>(pg, list, tiles[3 * ti], tiles[3 * ti + 1], tiles[3 * ti + 2], by,
                                           sm);
            if (kind == GM_Q4_K)
                emu_cta<GM_Q4_K, BN, true>(pg, list, tiles[3 * ti], tiles[3 * ti + 1], tiles[3 * ti + 2], by,
                                           sm);
            if (kind == GM_IQ2_XXS)
                emu_cta<GM_IQ2_XXS, BN, true>(pg, list, tiles[3 * ti], tiles[3 * ti + 1], tiles[3 * ti + 2],
                                              by, sm);
        }
    /* mid against the CPU's dots; then quantize mid (as the op does) and run down */
    long long bad_mid = 0, bad_y = 0;
    for (int pr = 0; pr < P; pr++) {
        const uint64_t eo = (uint64_t)sel[pr] * ff * rb_gu;
        const dsv4_q8_k *xa = (const dsv4_q8_k *)(xq + xs * (pr / k));
        for (int r = 0; r < ff; r++) {
            float s1, s2;
            float gv = ref_dot(kind, gate + eo + r * rb_gu, xa, in, &s1);
            float uv = ref_dot(kind, up + eo + r * rb_gu, xa, in, &s2);
            if (bits(gv) != bits(s1) || bits(uv) != bits(s2)) bad_mid++;
            if (clamp > 1.0e-6f) {
                if (gv > clamp) gv = clamp;
                if (uv > clamp) uv = clamp;
                if (uv < -clamp) uv = -clamp;
            }
            const float ref = cpu_silu(gv) * uv * wt[pr], got = mid[(size_t)pr * ff + r];
            if (bits(ref) != bits(got)) {
                if (bad_mid < 3) printf("  mid pair %d row %d: %.9g vs CPU %.9g\n", pr, r, got, ref);
                bad_mid++;
            }
        }
    }
    uint8_t *mq = (uint8_t *)malloc(ms * P);
    for (int pr = 0; pr < P; pr++) quant_act_q8_k(mid + (size_t)pr * ff, (dsv4_q8_k *)(mq + ms * pr), ff);
    prod pd = {down, NULL, rb_d, embd, ff, mq, ms, 1, NULL, 0.0f, y};
    for (int ti = 0; ti < n_tiles; ti++)
        for (int by = 0; by < (embd + 127) / 128; by++) {
            if (kind == GM_Q2_K)
                emu_cta<GM_Q2_K, BN, false>(pd, list, tiles[3 * ti], tiles[3 * ti + 1], tiles[3 * ti + 2], by,
                                            sm);
            if (kind == GM_Q4_K)
                emu_cta<GM_Q4_K, BN, false>(pd, list, tiles[3 * ti], tiles[3 * ti + 1], tiles[3 * ti + 2], by,
                                            sm);
            if (kind == GM_IQ2_XXS)
                emu_cta<GM_IQ2_XXS, BN, false>(pd, list, tiles[3 * ti], tiles[3 * ti + 1], tiles[3 * ti + 2],
                                               by, sm);
        }
    for (int pr = 0; pr < P; pr++) {
        const uint64_t eo = (uint64_t)sel[pr] * embd * rb_d;
        for (int r = 0; r < embd; r++) {
            float s;
            const float ref = ref_dot(kind, down + eo + r * rb_d, (const dsv4_q8_k *)(mq + ms * pr), ff, &s);
            const float got = y[(size_t)pr * embd + r];
            if (bits(ref) != bits(got) || bits(ref) != bits(s)) {
                if (bad_y < 3) printf("  y pair %d row %d: %.9g vs CPU %.9g\n", pr, r, got, ref);
                bad_y++;
            }
        }
    }
    const bool ok = bad_mid == 0 && bad_y == 0;
    printf(
        "%s %-28s %-7s BN=%d in=%d ff=%d embd=%d E=%d n=%d k=%d: %d tiles, %lld mid and %lld y of %lld/%lld "
        "differ\n",
        ok ? "ok  " : "FAIL", name, dsv4_type_name(type), BN, in, ff, embd, E, n, k, n_tiles, bad_mid, bad_y,
        (long long)P * ff, (long long)P * embd);
    free(gate), free(up), free(down), free(sel), free(wt), free(list), free(tiles), free(xq), free(xf);
    free(mid), free(y), free(sm), free(mq);
    return ok ? 0 : 1;
}

int main(void) {
    int fails = 0;
    const uint32_t types[3] = {DSV4_TYPE_IQ2_XXS, DSV4_TYPE_Q2_K, DSV4_TYPE_Q4_K};
    for (int i = 0; i < 3; i++) {
        /* name, type, in, ff, embd, E, n, k, random bytes, clamp */
        fails += run_case<16>("quantized, ragged tiles", types[i], 512, 256, 384, 6, 23, 3, 0, 0.0f);
        fails += run_case<32>("quantized, clamp", types[i], 256, 256, 256, 4, 37, 2, 0, 0.02f);
        fails += run_case<16>("random bytes", types[i], 768, 256, 160, 5, 19, 2, 1, 0.0f);
        fails += run_case<32>("random bytes, >1 tile/expert", types[i], 256, 256, 128, 3, 60, 2, 1, 0.0f);
    }
    printf("%s: %d case(s) failed\n", fails ? "MOE MMA EMULATION FAILED" : "MOE MMA EMULATION PASSED", fails);
    return fails ? 1 : 0;
}
