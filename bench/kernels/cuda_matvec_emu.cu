/* Host-only check of the CUDA matvec decoders (src/backend/cuda/cuda_mv_units.cuh): runs the
 * real unit decoders, activation re-layout and IQ2_XXS tables on the CPU, through a sequential
 * copy of the kernel's partitioning (CTA row ranges, stage cuts, row groups, segments), and
 * compares every output row with quant_dot_* (src/quant). Needs no GPU.
 * Build: make BUILD=build-x bench-cuda  ->  build-x/bench/cuda_matvec_emu (exit 0 = pass) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

extern "C" {
#include "quant/quant.h"
}
#include "backend/cuda/cuda_mv_units.cuh"

static uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float cpu_dot(uint32_t type, const uint8_t *w, const void *act, int64_t in) {
    switch (type) {
    case DSV4_TYPE_Q8_0: return quant_dot_q8_0(w, (const dsv4_q8_0_act *)act, in);
    case DSV4_TYPE_IQ2_XXS: return quant_dot_iq2_xxs(w, (const dsv4_q8_k *)act, in);
    case DSV4_TYPE_Q2_K: return quant_dot_q2_k(w, (const dsv4_q8_k *)act, in);
    case DSV4_TYPE_Q4_K: return quant_dot_q4_k(w, (const dsv4_q8_k *)act, in);
    default: return quant_dot_f16((const uint16_t *)w, (const float *)act, in);
    }
}

/* v: the IQ2_XXS decoder (mv_kernel's V: 0 sign masks, 1 PRMT selectors) */
template <int F>
static void unit_any(const uint8_t *wr, int rb, int u, const uint8_t *act, const uint8_t *lut, int lane,
                     int v, float *acc) {
    constexpr int RPL = mv_rpl(F);
    const uint2 *G = (const uint2 *)lut + (lane & 15);
    const uint2 *M = (const uint2 *)(lut + MV_IQ2_GRID_BYTES) + (lane & 15);
    if (F == MV_Q8_0) unit_q8_0<RPL>(wr, rb, u, act, acc);
    if (F == MV_IQ2_XXS && v == 0) unit_iq2_xxs<RPL>(wr, rb, u, act, G, M, acc);
    if (F == MV_IQ2_XXS && v == 1)
        unit_iq2_xxs_sel<RPL, 7>(wr, rb, u, act, lut, lut + MV_IQ2_GRID_BYTES, 4u * (uint32_t)lane, acc);
    if (F == MV_Q2_K) unit_q2_k<RPL>(wr, rb, u, act, acc);
    if (F == MV_Q4_K) unit_q4_k<RPL>(wr, rb, u, act, acc);
    if (F == MV_F16) unit_f16<RPL>(wr, rb, u, act, acc);
}

/* Sequential model of mv_kernel: same ranges, stage cuts, items and segments; smem = buffers. */
template <int F> static void emulate(const mv_params &p, int grid, const uint8_t *x_all, int v, float *y) {
    constexpr int RPL = mv_rpl(F);
    uint8_t *lut = (uint8_t *)calloc(1, MV_IQ2_GRID_BYTES + MV_IQ2_MASK_BYTES);
    uint8_t *act = (uint8_t *)calloc(1, (size_t)p.act_bytes);
    uint8_t *stage = (uint8_t *)calloc(1, (size_t)p.stage_bytes);
    float *red = (float *)calloc((size_t)p.R * p.nseg, sizeof(float));
    if (F == MV_IQ2_XXS && v == 0)
        for (int t = 0; t < MV_THREADS; t++) mv_build_iq2_lut(dsv4_iq2xxs_grid, lut, t);
    if (F == MV_IQ2_XXS && v == 1) { /* the table dsv4_cuda_mv_init uploads, replicated as the kernel does */
        uint32_t tab[384];
        for (int i = 0; i < 256; i++) tab[i] = md_iq2_grid_sel(dsv4_iq2xxs_grid[i]);
        for (int i = 0; i < 128; i++) tab[256 + i] = md_iq2_sign_sel(dsv4_ksigns_iq2xs[i]);
        for (int t = 0; t < MV_THREADS; t++) mv_build_iq2_sel(tab, lut, t);
    }
    const long long total = (long long)p.k * p.out;
    for (int b = 0; b < grid; b++) {
        const int begin = (int)(total * b / grid), end = (int)(total * (b + 1) / grid);
        int act_slot = -1;
        for (int c = begin; c < end;) {
            const int slot = c / p.out, r0 = c - slot * p.out;
            int n = p.R;
            if (end - c < n) n = end - c;
            if (p.out - r0 < n) n = p.out - r0;
            const uint8_t *base;
            const int si = mv_src(p, slot, &base); /* the kernel's slot mapping (pair launches) */
            const int e = p.ids ? p.ids[si] : 0;
            const bool valid = e >= 0 && e < p.n_expert;
            memset(stage, 0xcd, (size_t)p.stage_bytes); /* stale bytes beyond the tile */
            if (valid)
                memcpy(stage, base + (long long)e * p.expert_bytes + (long long)r0 * p.row_bytes,
                       (size_t)n * p.row_bytes);
            if (act_slot < 0 || (p.x_stride != 0 && si != act_slot)) {
                for (int t = 0; t < MV_THREADS; t++)
                    mv_load_act<F>(p, act, x_all + (long long)si * p.x_stride, t);
                act_slot = si;
            }
            const int groups = (n + RPL - 1) / RPL, items = groups * p.nseg;
            for (int it = 0; it < items; it++) {
                const int g = it / p.nseg, sg = it - g * p.nseg, r = g * RPL;
                const int u0 = sg * p.units / p.nseg, u1 = (sg + 1) * p.units / p.nseg;
                float tot[RPL] = {0};
                for (int lane = 0; lane < 32; lane++) {
                    float acc[RPL] = {0};
                    for (int u = u0 + lane; u < u1; u += 32)
                        unit_any<F>(stage + r * p.row_bytes, p.row_bytes, u, act, lut, lane, v, acc);
                    for (int j = 0; j < RPL; j++) tot[j] += acc[j];
                }
                for (int j = 0; j < RPL; j++)
                    if (r + j < n) {
                        if (p.nseg == 1)
                            y[c + r + j] = valid ? tot[j] : NAN;
                        else
                            red[(r + j) * p.nseg + sg] = tot[j];
                    }
            }
            if (p.nseg > 1)
                for (int t = 0; t < n; t++) {
                    float v = 0;
                    for (int sg = 0; sg < p.nseg; sg++) v += red[t * p.nseg + sg];
                    y[c + t] = valid ? v : NAN;
                }
            c += n;
        }
    }
    free(lut);
    free(act);
    free(stage);
    free(red);
}

/* An independent form of one Q2_K quarter's term (the pipeline unit's arithmetic before session 16: each
 * scale byte shifted out of its word, the planes' sums shifted by 2j): the gathered-scale unit
 * (q2k_quarter_g) must give its bits. */
static void ref_q2k_quarter(const uint8_t *blk, int i, const q2k_act &a, float *acc) {
    const int h = i >> 1, s = i & 1;
    const uint32_t *qp = (const uint32_t *)(blk + 16 + 16 * i);
    const uint32_t sw0 = ld32(blk + 8 * h), sw1 = ld32(blk + 8 * h + 4), dm = ld32(blk + 80);
    int isum = 0, summs = 0;
    for (int j = 0; j < 4; j++) {
        const uint32_t sc = ((j < 2 ? sw0 : sw1) >> (8 * (2 * (j & 1) + s))) & 0xffu;
        const int xs[4] = {a.xq[j].x, a.xq[j].y, a.xq[j].z, a.xq[j].w};
        int sub = 0;
        for (int w = 0; w < 4; w++) sub = mv_dp4a_us((qp[w] >> (2 * j)) & 0x03030303u, xs[w], sub);
        isum += (int)(sc & 15u) * sub;
        summs += (int)(sc >> 4) * a.bs[j];
    }
    *acc += (a.ad * h2f(dm & 0xffffu)) * (float)isum - (a.ad * h2f(dm >> 16)) * (float)summs;
}

/* Sequential model of the streamed Q2_K kernel (cuda_mv_stream.cuh): `nw` warps each own a contiguous
 * range of rows; lane l decodes quarters l, l + 32 with its activations taken straight from the Q8_K
 * blocks, and the lanes meet in the kernel's butterfly (xor 16, 8, 4, 2, 1). Each lane's partial must be
 * the bits mv_kernel's lane gets from its shared-memory re-layout (unit_q2_k) and those of the
 * shifted-scale reference; returns the mismatches. */
static int emulate_stream_q2k(const mv_params &p, int nw, const uint8_t *x_all, float *y) {
    uint8_t *act = (uint8_t *)calloc(1, (size_t)p.act_bytes);
    int bad = 0;
    const long long total = (long long)p.k * p.out;
    for (int wg = 0; wg < nw; wg++) {
        const int begin = (int)(total * wg / nw), end = (int)(total * (wg + 1) / nw);
        for (int v = begin; v < end; v++) {
            const int slot = v / p.out, r = v - slot * p.out;
            const uint8_t *base;
            const int si = mv_src(p, slot, &base);
            const int e = p.ids ? p.ids[si] : 0;
            const bool valid = e >= 0 && e < p.n_expert;
            const uint8_t *x = x_all + (long long)si * p.x_stride;
            for (int t = 0; t < MV_THREADS; t++) mv_load_act<MV_Q2_K>(p, act, x, t);
            const uint8_t *row =
                base + (long long)(valid ? e : 0) * p.expert_bytes + (long long)r * p.row_bytes;
            float lanes[32];
            for (int lane = 0; lane < 32; lane++) {
                float acc = 0.0f, ref[1] = {0.0f}, ref2 = 0.0f;
                for (int u = lane; u < p.units; u += 32) {
                    q2k_act a;
                    q2k_act_q8k(x, u, &a);
                    q2k_quarter_g(row + (u >> 2) * 84, u & 3, a, &acc);
                    unit_q2_k<1>(row, p.row_bytes, u, act, ref); /* the pipeline's activations */
                    ref_q2k_quarter(row + (u >> 2) * 84, u & 3, a, &ref2);
                }
                if (memcmp(&acc, &ref[0], sizeof acc) != 0 || memcmp(&acc, &ref2, sizeof acc) != 0) bad++;
                lanes[lane] = acc;
            }
            for (int o = 16; o > 0; o >>= 1) {
                float nxt[32];
                for (int l = 0; l < 32; l++) nxt[l] = lanes[l] + lanes[l ^ o];
                memcpy(lanes, nxt, sizeof lanes);
            }
            y[v] = valid ? lanes[0] : NAN;
        }
    }
    free(act);
    return bad;
}

/* The lanes' butterfly sum (warp_sum's pairs), as mvs_warp_sums gives it */
static float host_butterfly(const float *v) {
    float a[32];
    memcpy(a, v, sizeof a);
    for (int o = 16; o > 0; o >>= 1) {
        float n[32];
        for (int l = 0; l < 32; l++) n[l] = a[l] + a[l ^ o];
        memcpy(a, n, sizeof a);
    }
    return a[0];
}

/* The streamed IQ2_XXS unit (iq2s_span over the 64 KB table, activations from the Q8_K blocks): every lane's
 * integer sum against one written here from the format's definition (grid bytes, sign bits with the parity
 * bit, scale 2 ls + 1), and every row (the lanes' float terms through the butterfly) against
 * quant_dot_iq2_xxs. Returns the mismatches. */
template <int SPL> static int check_iq2_stream_units(int rows) {
    const int64_t in = 1024 * SPL, rb = mv_row_bytes(MV_IQ2_XXS, in);
    /* The rows end 16 bytes before an inaccessible page, as the kernel's last ring ends 16 bytes before the
     * end of its shared memory: a unit reading further than its slack faults here (session 16, call 3) */
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE), used = (size_t)(rb * rows + 16);
    const size_t span = (used + pg - 1) / pg * pg;
    uint8_t *map =
        (uint8_t *)mmap(NULL, span + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED || mprotect(map + span, pg, PROT_NONE) != 0) {
        printf("streamed IQ2_XXS unit: FAIL (no guard page)\n");
        return 1;
    }
    uint8_t *w = map + span - used;
    for (int r = 0; r < rows; r++) {
        uint64_t st = mix64((uint64_t)r * 77 + 5);
        quant_fill_random_row(DSV4_TYPE_IQ2_XXS, &st, 0.05f, w + r * rb, in);
    }
    float *x = (float *)malloc(sizeof(float) * in);
    uint64_t st = 3;
    for (int64_t i = 0; i < in; i++) x[i] = (float)((int64_t)(mix64(st++) >> 40) - (1 << 23)) / (1 << 23);
    uint8_t *xa = (uint8_t *)malloc((size_t)mv_act_global(MV_IQ2_XXS, in));
    quant_act_q8_k(x, (dsv4_q8_k *)xa, in);
    uint32_t tab[384];
    for (int i = 0; i < 256; i++) tab[i] = md_iq2_grid_sel(dsv4_iq2xxs_grid[i]);
    for (int i = 0; i < 128; i++) tab[256 + i] = md_iq2_sign_sel(dsv4_ksigns_iq2xs[i]);
    uint8_t *lut = (uint8_t *)calloc(1, MV_IQ2S_TABLE_BYTES);
    mv_build_iq2s_table(tab, lut, 0, 1);
    int bad = 0;
    if (ld32(lut + MV_IQ2S_POS_OFF) != MD_IQ2_POS) {
        printf("streamed IQ2_XXS unit: FAIL (the table does not hold the PRMT pool word)\n");
        bad++;
    }
    uint8_t *lut_nt = (uint8_t *)calloc(1, MV_IQ2S_TABLE_BYTES); /* the kernel's build, thread by thread */
    for (int t = 0; t < MVI_THREADS; t++) mv_build_iq2s_table_nt<MVI_THREADS>(tab, lut_nt, t);
    if (memcmp(lut, lut_nt, MV_IQ2S_TABLE_BYTES) != 0) {
        printf(
            "streamed IQ2_XXS unit: FAIL (the kernel's %d-thread table build differs from the reference)\n",
            MVI_THREADS);
        bad++;
    }
    free(lut_nt);
    const dsv4_q8_k *xq = (const dsv4_q8_k *)xa;
    double worst = 0.0;
    for (int r = 0; r < rows; r++) {
        const uint8_t *wr = w + r * rb;
        float part[32], mag[32];
        for (int lane = 0; lane < 32; lane++) {
            iq2s_lane lc; /* base 0: the host table's offsets are the device's addresses less the base */
            iq2s_lane_init<SPL>(lane, 0u, &lc);
            iq2s_act<SPL> a;
            iq2s_act_q8k<SPL>(xa, lane, &a);
            const int got = iq2s_span_isum<SPL>(wr, lc, a, lut, MD_IQ2_POS);
            const int b = lane / (8 / SPL), sb0 = lane % (8 / SPL) * SPL;
            const uint8_t *blk = wr + 66 * b;
            int want = 0;
            for (int sb = sb0; sb < sb0 + SPL; sb++) {
                uint32_t a0, a1;
                memcpy(&a0, blk + 2 + 8 * sb, 4);
                memcpy(&a1, blk + 6 + 8 * sb, 4);
                int sumi = 0;
                for (int g = 0; g < 4; g++) {
                    const uint64_t grid = dsv4_iq2xxs_grid[(a0 >> (8 * g)) & 255u];
                    uint32_t sg = (a1 >> (7 * g)) & 127u;
                    sg |= (uint32_t)(__builtin_popcount(sg) & 1) << 7; /* an even count of minus signs */
                    for (int k = 0; k < 8; k++) {
                        const int v = (int)((grid >> (8 * k)) & 255u) * xq[b].qs[32 * sb + 8 * g + k];
                        sumi += (sg >> k) & 1u ? -v : v;
                    }
                }
                want += sumi * (2 * (int)(a1 >> 28) + 1);
            }
            if (got != want) bad++;
            part[lane] = iq2s_span<SPL>(wr, lc, a, lut, MD_IQ2_POS);
            mag[lane] = fabsf(part[lane]);
        }
        const float y = host_butterfly(part), ref = quant_dot_iq2_xxs(wr, xq, in), m = host_butterfly(mag);
        const double err = fabs((double)y - ref) / (m > 0.0f ? m : 1.0f);
        if (err > worst) worst = err;
        if (err > 1e-5) bad++;
    }
    printf("streamed IQ2_XXS unit, in=%lld, %d rows: %s (rows vs quant_dot_iq2_xxs: max err / sum |part| "
           "%.2g)\n",
           (long long)in, rows, bad ? "FAIL" : "ok (every lane's integer sum exact)", worst);
    munmap(map, span + pg);
    free(x);
    free(xa);
    free(lut);
    return bad != 0;
}

/* mvs_warp_sums' transposed reduction of PR rows, lane by lane on the host: row r must come out of lane
 * r * 32 / PR with the bits of the plain butterfly (every lane of which holds the same value). */
static int check_warp_sums(int pr) {
    int bad = 0;
    uint64_t st = 99 + pr;
    for (int t = 0; t < 2000; t++) {
        float v[8][32], w[8][32];
        for (int r = 0; r < pr; r++)
            for (int l = 0; l < 32; l++) {
                const double u = (double)(mix64(st++) >> 11) / 9007199254740992.0;
                v[r][l] = (float)((u - 0.5) * pow(2.0, (double)(mix64(st++) % 40) - 20.0));
                w[r][l] = v[r][l];
            }
        /* mvs_warp_sums<pr>, every lane at once: keep the upper half where the level bit is set */
        int n = pr;
        for (int o = 16; o > 0; o >>= 1) {
            float nw[8][32];
            if (n > 1) {
                for (int l = 0; l < 32; l++) {
                    const bool up = l & o;
                    for (int i = 0; i < n / 2; i++) {
                        const int q = l ^ o;
                        const bool qup = q & o;
                        const float keep = up ? w[i + n / 2][l] : w[i][l];
                        const float recv = qup ? w[i][q] : w[i + n / 2][q]; /* the partner's send */
                        nw[i][l] = keep + recv;
                    }
                }
                n /= 2;
            } else {
                for (int l = 0; l < 32; l++) nw[0][l] = w[0][l] + w[0][l ^ o];
            }
            for (int i = 0; i < (n > 1 ? n : 1); i++) memcpy(w[i], nw[i], sizeof w[i]);
        }
        for (int r = 0; r < pr; r++) {
            const float want = host_butterfly(v[r]), got = w[0][r * 32 / pr];
            if (memcmp(&want, &got, sizeof got) != 0) bad++;
        }
    }
    printf("streamed warp sums, %d values: %s\n", pr,
           bad ? "FAIL" : "ok (2000 x same bits as the butterfly)");
    return bad != 0;
}

/* pair: a second tensor w2 in the same launch (dsv4_cuda_matvec_experts_pair), slots k..2k-1 */
static int run(uint32_t type, int64_t in, int64_t out, int n_expert, int k, int x_per_slot, int tile,
               int grid, int pair) {
    const int f = mv_format_of(type);
    const int rpl = f == MV_IQ2_XXS ? 4 : 2;
    const int64_t rb = mv_row_bytes(f, in);
    const int64_t ne = n_expert > 0 ? n_expert : 1;
    uint8_t *w = (uint8_t *)malloc((size_t)(rb * out * ne * 2)), *w2 = w + rb * out * ne;
    for (int64_t r = 0; r < 2 * out * ne; r++) {
        uint64_t s = mix64((uint64_t)r * 31 + type);
        quant_fill_random_row(type, &s, 0.05f, w + r * rb, in);
    }
    const int slots = pair ? 2 * k : k;
    const int kx = x_per_slot ? k : 1;
    float *x = (float *)malloc(sizeof(float) * in * kx);
    uint64_t s = 7;
    for (int64_t i = 0; i < in * kx; i++) x[i] = (float)((int64_t)(mix64(s++) >> 40) - (1 << 23)) / (1 << 23);
    const size_t ab = (size_t)mv_act_global(f, in);
    uint8_t *xa = (uint8_t *)malloc(ab * kx);
    for (int j = 0; j < kx; j++) {
        if (f == MV_Q8_0)
            quant_act_q8_0(x + j * in, (dsv4_q8_0_act *)(xa + j * ab), in);
        else if (f == MV_F16)
            memcpy(xa + j * ab, x + j * in, ab);
        else
            quant_act_q8_k(x + j * in, (dsv4_q8_k *)(xa + j * ab), in);
    }
    int32_t ids[8];
    for (int j = 0; j < k; j++) ids[j] = (int)((j * 5 + 3) % ne);
    if (k >= 3) ids[1] = -1; /* invalid -> NaN rows */
    /* plan: same formulas as mv_plan */
    mv_params p;
    memset(&p, 0, sizeof p);
    int64_t R = 1;
    while (R * 2 <= out && R * 2 * rb <= tile) R *= 2;
    if (R < rpl && out >= rpl) R = rpl;
    const int64_t units = mv_units(f, in), groups = (R + rpl - 1) / rpl;
    int64_t nseg = 1;
    while (groups * nseg < MV_WARPS && units / (nseg * 2) >= 32) nseg *= 2;
    p.w = w;
    p.ids = n_expert > 0 ? ids : NULL;
    p.expert_bytes = rb * out;
    p.x_stride = x_per_slot ? (long long)ab : 0;
    p.row_bytes = (int)rb;
    p.in = (int)in;
    p.out = (int)out;
    p.n_expert = (int)ne;
    p.k = slots;
    if (pair) p.w2 = w2, p.k1 = k;
    p.R = (int)R;
    p.nseg = (int)nseg;
    p.S = 3;
    p.stage_bytes = (int)((((R > rpl ? R : rpl) * rb + 16) + 15) & ~15);
    p.act_bytes = (int)mv_act_smem(f, in);
    p.units = (int)units;
    float *y = (float *)malloc(sizeof(float) * out * slots);
    for (int64_t i = 0; i < out * slots; i++) y[i] = 12345.0f;
    switch (f) {
    case MV_Q8_0: emulate<MV_Q8_0>(p, grid, xa, 0, y); break;
    case MV_IQ2_XXS: emulate<MV_IQ2_XXS>(p, grid, xa, 0, y); break;
    case MV_Q2_K: emulate<MV_Q2_K>(p, grid, xa, 0, y); break;
    case MV_Q4_K: emulate<MV_Q4_K>(p, grid, xa, 0, y); break;
    default: emulate<MV_F16>(p, grid, xa, 0, y); break;
    }
    int bad = 0;
    if (f == MV_IQ2_XXS) { /* the selector decoder: the same bits as the sign masks, row for row */
        float *y2 = (float *)malloc(sizeof(float) * out * slots);
        emulate<MV_IQ2_XXS>(p, grid, xa, 1, y2);
        int64_t diff = 0;
        for (int64_t i = 0; i < out * slots; i++) diff += memcmp(&y[i], &y2[i], sizeof(float)) != 0;
        if (diff) {
            printf("  IQ2_XXS selector decoder: %lld of %lld outputs differ from the sign-mask decoder\n",
                   (long long)diff, (long long)(out * slots));
            bad++;
        }
        free(y2);
    }
    if (f == MV_Q2_K) { /* the streamed kernel: its rows replace the pipeline's in the check below */
        const int bits = emulate_stream_q2k(p, grid * 8, xa, y);
        if (bits) {
            printf("  Q2_K streamed rows: %d lane partials differ from the pipeline's unit\n", bits);
            bad++;
        }
    }
    double maxe = 0;
    for (int js = 0; js < slots; js++) {
        const int j = js % k; /* ids / activation index; slots >= k read w2 */
        const bool valid = n_expert == 0 || ids[j] >= 0;
        for (int64_t r = 0; r < out; r++) {
            const float v = y[js * out + r];
            if (!valid) {
                if (!isnan(v)) bad++;
                continue;
            }
            const uint8_t *wr = (js >= k ? w2 : w) + (n_expert ? (int64_t)ids[j] * rb * out : 0) + r * rb;
            const float ref = cpu_dot(type, wr, xa + (x_per_slot ? j * ab : 0), in);
            float sabs = 0; /* loose scale: |ref| + 1e-3 * sqrt(in) std products */
            sabs = fabsf(ref) + 1e-2f;
            const double e = fabs((double)v - ref) / sabs;
            if (!(e < 1e-3)) {
                if (bad < 3)
                    printf("  mismatch %s in=%lld slot %d row %lld: emu %.8g cpu %.8g\n",
                           dsv4_type_name(type), (long long)in, j, (long long)r, v, ref);
                bad++;
            }
            if (e > maxe) maxe = e;
        }
    }
    printf(
        "%-8s in=%-5lld out=%-5lld k=%d%s xslot=%d tile=%-6d grid=%-3d R=%lld nseg=%lld: %s (max rel %.2g)\n",
        dsv4_type_name(type), (long long)in, (long long)out, k, pair ? " pair" : "", x_per_slot, tile, grid,
        (long long)R, (long long)nseg, bad ? "FAIL" : "ok", maxe);
    free(w);
    free(x);
    free(xa);
    free(y);
    return bad != 0;
}

/* mvs_iq2_kernel's shared-memory layout (mvi_layout) for every plan it has and several block bases: the
 * table starts at a 64 KB-aligned shared address, the 16 rings and the table are disjoint, and all of them
 * end 16 bytes or more before the end of the block (the over-read slack). Returns the failures. */
static int check_iq2_layout(void) {
    const uint32_t bases[] = {0x400u, 0u, 0x10u, 0x8000u, 0xfff0u, 0x1000400u};
    int bad = 0;
    for (int in = 2048; in <= 4096; in *= 2)
        for (int pr = 2; pr <= 4; pr += 2)
            for (int d = 2; d <= 3; d++)
                for (size_t b = 0; b < sizeof bases / sizeof bases[0]; b++) {
                    const uint32_t ring = (uint32_t)(d * pr * (in / 256 * 66)), base = bases[b];
                    uint32_t t, nb;
                    const uint32_t need = mvi_layout(base, ring, &t, &nb);
                    uint32_t lo[MVI_WARPS + 1], hi[MVI_WARPS + 1];
                    for (int w = 0; w < MVI_WARPS; w++) {
                        lo[w] = (uint32_t)w < nb ? w * ring : t + MV_IQ2S_TABLE_BYTES + (w - nb) * ring;
                        hi[w] = lo[w] + ring;
                    }
                    lo[MVI_WARPS] = t;
                    hi[MVI_WARPS] = t + MV_IQ2S_TABLE_BYTES;
                    int ok = ((base + t) & 0xffffu) == 0;
                    for (int i = 0; i <= MVI_WARPS; i++) {
                        ok &= hi[i] + (i < MVI_WARPS ? 16u : 0u) <= need;
                        for (int j = 0; j < i; j++) ok &= hi[i] <= lo[j] || hi[j] <= lo[i];
                    }
                    if (!ok) {
                        printf("IQ2_XXS stream layout: FAIL in=%d rows=%d depth=%d base=0x%x\n", in, pr, d,
                               base);
                        bad++;
                    }
                }
    printf("IQ2_XXS stream layout: %s\n", bad ? "FAIL" : "ok (aligned table, disjoint rings, slack)");
    return bad;
}

int main(void) {
    int fails = 0;
    const uint32_t types[] = {DSV4_TYPE_Q8_0, DSV4_TYPE_IQ2_XXS, DSV4_TYPE_Q2_K, DSV4_TYPE_Q4_K,
                              DSV4_TYPE_F16};
    for (int t = 0; t < 5; t++) {
        const uint32_t ty = types[t];
        const int64_t in1 = ty == DSV4_TYPE_Q2_K ? 2048 : 4096;
        fails += run(ty, in1, 96, 0, 1, 0, 12288, 7, 0);
        fails += run(ty, in1, 64, 0, 1, 0, 65536, 3, 0);
        fails += run(ty, 8192, 20, 0, 1, 0, 4096, 5, 0);
        fails += run(ty, ty == DSV4_TYPE_IQ2_XXS ? 2048 : 1024, 50, 0, 1, 0, 16384, 4, 0);
        fails += run(ty, in1, 40, 9, 4, 1, 16384, 6, 0);
        fails += run(ty, in1, 33, 9, 3, 0, 8192, 5, 0);
        fails += run(ty, in1, 33, 9, 3, 0, 8192, 5, 1);  /* gate + up in one launch, shared x */
        fails += run(ty, in1, 40, 9, 4, 1, 16384, 7, 1); /* per-slot x, CTAs straddling the two */
    }
    fails += check_iq2_stream_units<4>(24);
    fails += check_iq2_stream_units<2>(24);
    fails += check_iq2_layout();
    fails += check_warp_sums(2);
    fails += check_warp_sums(4);
    fails += check_warp_sums(8);
    printf("EMU RESULT: %s\n", fails ? "FAIL" : "PASS");
    return fails ? 1 : 0;
}
