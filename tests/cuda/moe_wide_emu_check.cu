/* Host emulation of the wide-tile grouped expert products (src/backend/cuda/cuda_ops_moe_wide.cu):
 * every CTA run on the CPU with the kernel's own units (cuda_moe_wide.cuh: the activation pack,
 * the stage copies into a shared-memory image, the replicated IQ2_XXS tables, the per-lane decode
 * into A fragments, fragment reads, per-step integer scaling, the min products, the per-superblock
 * float update) in the kernel's order, with mma.m16n8k32 / m16n8k16 .s8 emulated from their PTX
 * fragment layouts and stale shared memory (0xa5) between steps. Each product is compared bit for
 * bit with quant_dot_* and its scalar reference; mid values with cpu_silu(min(g, c)) * clamp(u) *
 * w from those references. IQ2_XXS, Q2_K, Q4_K (and the q2 model's IQ2_XXS gate/up with Q2_K
 * down), quantized rows and random bytes (largest grid values / scales / mins), ragged pair
 * counts, experts over several tiles, partial row blocks, 1-3 row blocks per CTA, 2-4 pipeline
 * stages. Needs no GPU (exit 0 = pass). Build: make BUILD=build-x cuda-tests ->
 * build-x/cuda/moe_wide_emu_check */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_moe_wide.cuh"
extern "C" {
#include "backend/cpu/cpu_internal.h" /* cpu_silu */
}

#define CHECK_RNG_SEED 4242
#include "check_rng.h"

/* D = A B + C, m16n8k32 .s8 (PTX ISA fragment layout). */
static void emu_mma32(int32_t d[32][4], const uint32_t a[32][4], const uint32_t b[32][2],
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
/* D = A B + C, m16n8k16 .s8: a0 = row g, k 4t..; a1 = row g + 8; b0 = k 4t.. of column g. */
static void emu_mma16(int32_t d[32][4], const uint32_t a[32][2], const uint32_t b[32],
                      const int32_t c[32][4]) {
    int8_t A[16][16], B[16][8];
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane >> 2, t = lane & 3;
        for (int i = 0; i < 4; i++) {
            A[g][4 * t + i] = (int8_t)(a[lane][0] >> (8 * i));
            A[g + 8][4 * t + i] = (int8_t)(a[lane][1] >> (8 * i));
            B[4 * t + i][g] = (int8_t)(b[lane] >> (8 * i));
        }
    }
    int32_t D[32][4];
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane >> 2, t = lane & 3;
        for (int i = 0; i < 4; i++) {
            const int r = g + (i >> 1) * 8, col = 2 * t + (i & 1);
            int32_t s = c[lane][i];
            for (int k = 0; k < 16; k++) s += (int32_t)A[r][k] * (int32_t)B[k][col];
            D[lane][i] = s;
        }
    }
    memcpy(d, D, sizeof D);
}

/* One CTA of mw_kernel<K, DUAL>: tile ti, row-block group bx. */
template <int K, bool DUAL> static void emu_cta(const mw_params &p, int ti, int bx, uint8_t *sm) {
    constexpr bool KQ = K != GM_IQ2_XXS;
    const int4 tl = p.tiles[ti];
    const int e = tl.x, start = tl.y, mt = tl.z;
    const int S = p.lay.stages, nblk = p.in / 256, nact = (mt + 7) >> 3;
    const int rb0 = bx * p.rb_per_cta;
    const int nrb = p.rb_per_cta < p.n_rb - rb0 ? p.rb_per_cta : p.n_rb - rb0, nsteps = nrb * nblk;
    memset(sm, 0xa5, (size_t)p.lay.total); /* stale bytes must not reach a result */
    int *pid = (int *)(sm + p.lay.pid);
    const uint64_t *tab = (const uint64_t *)(sm + p.lay.tables);
    for (int t = 0; t < mt; t++) pid[t] = p.list[start + t];
    if (K == GM_IQ2_XXS) mw_fill_tables((uint64_t *)(sm + p.lay.tables), p.grid, p.signs, 0, 1);
    static float acc[MW_WARPS][32][MW_MT][MW_NT][4];
    memset(acc, 0, sizeof acc);
    for (int q = 0; q < nsteps; q++) {
        const int rb = rb0 + q / nblk, s = q % nblk;
        uint8_t *st = sm + p.lay.stage0 + (q % S) * p.lay.stage_bytes;
        for (int tid = 0; tid < MW_THREADS; tid++) mw_load_stage<K, DUAL>(p, e, start, mt, rb, s, st, tid);
        const uint8_t *W = st + p.lay.w, *X = st + p.lay.x;
        for (int warp = 0; warp < MW_WARPS; warp++) {
            static int32_t isum[MW_MT][MW_NT][32][4];
            static const int32_t zero[32][4] = {};
            for (int m = 0; m < MW_MT; m++)
                for (int nt = 0; nt < MW_NT; nt++)
                    for (int lane = 0; lane < 32; lane++)
                        for (int i = 0; i < 4; i++) isum[m][nt][lane][i] = mw_isum0(K);
            for (int j = 0; j < 8; j++) {
                static uint32_t a[MW_MT][32][4], b[32][2];
                static int32_t sc[MW_MT][32][2], d[32][4];
                for (int m = 0; m < MW_MT; m++)
                    for (int lane = 0; lane < 32; lane++)
                        mw_frag_a<K>(W, mw_tile_row(DUAL, warp, m), s, j, lane, tab, a[m][lane], sc[m][lane]);
                for (int nt = 0; nt < MW_NT && nt < nact; nt++) {
                    for (int lane = 0; lane < 32; lane++) mw_frag_b(X, nt, j, lane, b[lane]);
                    for (int m = 0; m < MW_MT; m++) {
                        if (K == GM_Q2_K) {
                            emu_mma32(isum[m][nt], a[m], b, isum[m][nt]);
                        } else {
                            emu_mma32(d, a[m], b, zero);
                            for (int lane = 0; lane < 32; lane++)
                                mw_step(isum[m][nt][lane], d[lane], sc[m][lane]);
                        }
                    }
                }
            }
            static float dw[MW_MT][32][2], dm[MW_MT][32][2];
            static uint32_t am[MW_MT][32][2];
            for (int m = 0; m < MW_MT; m++)
                for (int lane = 0; lane < 32; lane++) {
                    mw_row_scales<K>(W, mw_tile_row(DUAL, warp, m), s, lane, dw[m][lane], dm[m][lane]);
                    if (KQ) mw_frag_min<K>(W, mw_tile_row(DUAL, warp, m), lane, am[m][lane]);
                }
            for (int nt = 0; nt < MW_NT && nt < nact; nt++) {
                static float dx[32][2];
                static uint32_t blo[32], bhi[32];
                for (int lane = 0; lane < 32; lane++) {
                    mw_frag_dx(st + p.lay.xd, nt, lane, dx[lane]);
                    blo[lane] = bhi[lane] = 0;
                    if (KQ) mw_frag_bs(st + p.lay.xb, nt, lane, &blo[lane], &bhi[lane]);
                }
                for (int m = 0; m < MW_MT; m++) {
                    static int32_t mn[32][4], h[32][4], c[32][4];
                    memset(mn, 0, sizeof mn);
                    if (KQ) {
                        emu_mma16(h, am[m], bhi, zero);
                        for (int lane = 0; lane < 32; lane++)
                            for (int i = 0; i < 4; i++) c[lane][i] = h[lane][i] * 128 + mw_isum0(K);
                        emu_mma16(mn, am[m], blo, c);
                    }
                    for (int lane = 0; lane < 32; lane++)
                        mw_update<K>(acc[warp][lane][m][nt], isum[m][nt][lane], mn[lane], dw[m][lane],
                                     dm[m][lane], dx[lane]);
                }
            }
            if (s != nblk - 1) continue;
            const int orow = rb * mw_rb_rows(DUAL);
            for (int lane = 0; lane < 32; lane++) {
                const int g = lane >> 2, t = lane & 3;
                float(*ac)[MW_NT][4] = acc[warp][lane];
                if (K == GM_IQ2_XXS)
                    for (int m = 0; m < MW_MT; m++)
                        for (int nt = 0; nt < MW_NT; nt++)
                            for (int i = 0; i < 4; i++) ac[m][nt][i] = qm_mul(0.125f, ac[m][nt][i]);
                for (int nt = 0; nt < MW_NT && nt < nact; nt++)
                    for (int i = 0; i < 4; i++) {
                        const int tok = 8 * nt + 2 * t + (i & 1);
                        if (tok >= mt) continue;
                        const int pr = pid[tok];
                        if (DUAL) {
                            const int row = orow + mw_out_row(true, warp, 0) + g + 8 * (i >> 1);
                            if (row >= p.n_out) continue;
                            float gv = ac[0][nt][i], uv = ac[1][nt][i];
                            if (p.clamp_on) {
                                if (gv > p.clamp) gv = p.clamp;
                                if (uv > p.clamp) uv = p.clamp;
                                if (uv < -p.clamp) uv = -p.clamp;
                            }
                            p.out[(uint64_t)pr * p.out_stride + row] = cpu_silu(gv) * uv * p.weights[pr];
                        } else {
                            for (int m = 0; m < MW_MT; m++) {
                                const int row = orow + mw_out_row(false, warp, m) + g + 8 * (i >> 1);
                                if (row < p.n_out) p.out[(uint64_t)pr * p.out_stride + row] = ac[m][nt][i];
                            }
                        }
                    }
                memset(ac, 0, sizeof(float) * MW_MT * MW_NT * 4);
            }
        }
    }
}

template <bool DUAL> static void emu_product(int kind, const mw_params &p, int n_tiles, uint8_t *sm) {
    const int gx = (p.n_rb + p.rb_per_cta - 1) / p.rb_per_cta;
    for (int ti = 0; ti < n_tiles; ti++)
        for (int bx = 0; bx < gx; bx++) {
            if (kind == GM_IQ2_XXS) emu_cta<GM_IQ2_XXS, DUAL>(p, ti, bx, sm);
            if (kind == GM_Q2_K) emu_cta<GM_Q2_K, DUAL>(p, ti, bx, sm);
            if (kind == GM_Q4_K) emu_cta<GM_Q4_K, DUAL>(p, ti, bx, sm);
        }
}

static int kind_of(uint32_t type) {
    return type == DSV4_TYPE_Q2_K ? GM_Q2_K : type == DSV4_TYPE_Q4_K ? GM_Q4_K : GM_IQ2_XXS;
}
static float ref_dot(int kind, const uint8_t *w, const dsv4_q8_k *x, int in, float *scalar) {
    switch (kind) {
    case GM_Q2_K: *scalar = quant_dot_q2_k_scalar(w, x, in); return quant_dot_q2_k(w, x, in);
    case GM_Q4_K: *scalar = quant_dot_q4_k_scalar(w, x, in); return quant_dot_q4_k(w, x, in);
    default: *scalar = quant_dot_iq2_xxs_scalar(w, x, in); return quant_dot_iq2_xxs(w, x, in);
    }
}

/* rows x E expert rows of `type`: quantized from random floats, or random bytes with valid d
 * (extreme grid indices, scales and mins) */
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

/* the activation pack of P pairs (list order) from Q8_K rows: pair p uses row p / div */
static uint8_t *make_pack(const uint8_t *rows, size_t row_bytes, int div, const int32_t *list, int np, int P,
                          int in, bool kq, mw_pack *pk) {
    *pk = mw_pack_of((uint64_t)P, (uint64_t)in, kq);
    uint8_t *pack = (uint8_t *)malloc(pk->total);
    memset(pack, 0x5a, pk->total);
    for (int i = 0; i < np; i++)
        for (int b = 0; b < pk->nblk; b++)
            for (int lane = 0; lane < 32; lane++)
                mw_pack_block(rows + (size_t)(list[i] / div) * row_bytes + 292 * b, lane, *pk, (uint64_t)i, b,
                              kq, pack);
    return pack;
}

/* n tokens, k slots each over E experts; gate/up [in -> ff] of gtype, down [ff -> embd] of dtype. */
static int run_case(const char *name, uint32_t gtype, uint32_t dtype, int in, int ff, int embd, int E, int n,
                    int k, int random_bytes, float clamp, int rb_per_cta, int stages) {
    const int kg = kind_of(gtype), kd = kind_of(dtype);
    const int P = n * k;
    uint64_t rb_gu, rb_d;
    uint8_t *gate = make_experts(gtype, in, ff, E, random_bytes, &rb_gu);
    uint8_t *up = make_experts(gtype, in, ff, E, random_bytes, &rb_gu);
    uint8_t *down = make_experts(dtype, ff, embd, E, random_bytes, &rb_d);
    /* routes: distinct experts per token, a third of the slots on experts 0-2 (several tiles) */
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
    /* lists by expert in pair order, tiles of MW_BN (as mg_index_kernel cuts them) */
    int32_t *list = (int32_t *)malloc(P * sizeof(int32_t));
    int4 *tiles = (int4 *)malloc((P + E) * sizeof(int4));
    int n_tiles = 0, at = 0, max_mt = 0;
    for (int ex = 0; ex < E; ex++) {
        const int first = at;
        for (int i = 0; i < P; i++)
            if (sel[i] == ex) list[at++] = i;
        for (int o = first; o < at; o += MW_BN) {
            const int mt = at - o < MW_BN ? at - o : MW_BN;
            tiles[n_tiles++] = make_int4(ex, o, mt, 0);
            if (mt > max_mt) max_mt = mt;
        }
    }
    int nt_info[2] = {n_tiles, at};
    const size_t xs = (size_t)(in / 256) * sizeof(dsv4_q8_k), ms = (size_t)(ff / 256) * sizeof(dsv4_q8_k);
    uint8_t *xq = (uint8_t *)malloc(xs * n);
    float *xf = (float *)malloc((size_t)in * sizeof(float));
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
    const mw_layout lg = mw_layout_of(kg, stages), ld = mw_layout_of(kd, stages);
    uint8_t *sm = (uint8_t *)malloc((size_t)(lg.total > ld.total ? lg.total : ld.total));

    mw_params p;
    memset(&p, 0, sizeof p);
    p.w0 = gate, p.w1 = up, p.row_bytes = rb_gu, p.expert_bytes = rb_gu * ff;
    p.n_out = ff, p.in = in;
    p.pack = make_pack(xq, xs, k, list, at, P, in, mw_kq(kg), &p.pk);
    p.tiles = tiles, p.n_tiles = nt_info, p.list = list;
    p.weights = wt, p.clamp = clamp, p.clamp_on = clamp > 1.0e-6f;
    p.out = mid, p.out_stride = ff;
    p.grid = dsv4_iq2xxs_grid, p.signs = dsv4_ksigns_iq2xs;
    p.n_rb = (ff + mw_rb_rows(true) - 1) / mw_rb_rows(true), p.rb_per_cta = rb_per_cta;
    p.lay = lg;
    emu_product<true>(kg, p, n_tiles, sm);
    free((void *)p.pack);

    /* mid against the CPU's dots; then quantize mid (as the op does) and run down */
    long long bad_mid = 0, bad_y = 0;
    for (int pr = 0; pr < P; pr++) {
        const uint64_t eo = (uint64_t)sel[pr] * ff * rb_gu;
        const dsv4_q8_k *xa = (const dsv4_q8_k *)(xq + xs * (pr / k));
        for (int r = 0; r < ff; r++) {
            float s1, s2;
            float gv = ref_dot(kg, gate + eo + r * rb_gu, xa, in, &s1);
            float uv = ref_dot(kg, up + eo + r * rb_gu, xa, in, &s2);
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
    p.w0 = down, p.w1 = NULL, p.row_bytes = rb_d, p.expert_bytes = rb_d * embd;
    p.n_out = embd, p.in = ff;
    p.pack = make_pack(mq, ms, 1, list, at, P, ff, mw_kq(kd), &p.pk);
    p.weights = NULL;
    p.out = y, p.out_stride = embd;
    p.n_rb = (embd + mw_rb_rows(false) - 1) / mw_rb_rows(false);
    p.lay = ld;
    emu_product<false>(kd, p, n_tiles, sm);
    free((void *)p.pack);
    for (int pr = 0; pr < P; pr++) {
        const uint64_t eo = (uint64_t)sel[pr] * embd * rb_d;
        for (int r = 0; r < embd; r++) {
            float s;
            const float ref = ref_dot(kd, down + eo + r * rb_d, (const dsv4_q8_k *)(mq + ms * pr), ff, &s);
            const float got = y[(size_t)pr * embd + r];
            if (bits(ref) != bits(got) || bits(ref) != bits(s)) {
                if (bad_y < 3) printf("  y pair %d row %d: %.9g vs CPU %.9g\n", pr, r, got, ref);
                bad_y++;
            }
        }
    }
    const bool ok = bad_mid == 0 && bad_y == 0;
    printf("%s %-30s %s/%s in=%d ff=%d embd=%d E=%d n=%d k=%d rb/cta=%d stages=%d: %d tiles (largest %d), "
           "%lld mid and %lld y of %lld/%lld differ\n",
           ok ? "ok  " : "FAIL", name, dsv4_type_name(gtype), dsv4_type_name(dtype), in, ff, embd, E, n, k,
           rb_per_cta, stages, n_tiles, max_mt, bad_mid, bad_y, (long long)P * ff, (long long)P * embd);
    free(gate), free(up), free(down), free(sel), free(wt), free(list), free(tiles), free(xq), free(xf);
    free(mid), free(y), free(sm), free(mq);
    return ok ? 0 : 1;
}

int main(void) {
    int fails = 0;
    const uint32_t IQ2 = DSV4_TYPE_IQ2_XXS, Q2K = DSV4_TYPE_Q2_K, Q4K = DSV4_TYPE_Q4_K;
    /* name, gate/up type, down type, in, ff, embd, E, n, k, random bytes, clamp, rb/cta, stages */
    fails += run_case("q2 model, ragged tiles", IQ2, Q2K, 512, 512, 320, 6, 37, 3, 0, 0.0f, 2, 4);
    fails += run_case("q2 model, random bytes", IQ2, Q2K, 1024, 256, 256, 5, 29, 2, 1, 0.0f, 1, 3);
    fails += run_case("q2 model, >64 pairs, clamp", IQ2, Q2K, 512, 512, 384, 3, 150, 2, 0, 0.02f, 3, 2);
    fails += run_case("q4 model, ragged tiles", Q4K, Q4K, 512, 512, 320, 6, 37, 3, 0, 0.0f, 2, 3);
    fails += run_case("q4 model, random bytes", Q4K, Q4K, 256, 512, 256, 4, 41, 2, 1, 0.0f, 1, 4);
    fails += run_case("q4 model, >64 pairs, clamp", Q4K, Q4K, 256, 256, 300, 3, 150, 2, 0, 0.02f, 2, 2);
    fails += run_case("Q2_K gate/up, IQ2_XXS down", Q2K, IQ2, 256, 512, 260, 5, 33, 2, 1, 0.0f, 3, 3);
    fails += run_case("Q2_K everywhere", Q2K, Q2K, 768, 256, 512, 4, 25, 3, 0, 0.0f, 2, 4);
    fails += run_case("IQ2_XXS everywhere", IQ2, IQ2, 512, 512, 256, 4, 27, 2, 1, 0.0f, 4, 2);
    printf("%s: %d case(s) failed\n", fails ? "MOE WIDE EMULATION FAILED" : "MOE WIDE EMULATION PASSED",
           fails);
    return fails ? 1 : 0;
}
