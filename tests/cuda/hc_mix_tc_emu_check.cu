/* Host check of the prefill HC mix on TF32 tensor cores (src/backend/cuda/cuda_hc_mix_tc.cuh, used by
 * hmt_kernel in cuda_hc_mix_tc.cu): every CTA of a chunk played on the CPU from the kernel's units
 * (each lane's inputs by hmt_k, the hi / lo split, the fragments by hmt_frag_a / hmt_frag_b, the
 * accumulator map by hmt_acc_tok / hmt_acc_mix, the warps' sums in order, hmt_factor), with
 * mma.m16n8k8 emulated from the PTX ISA's fragment definition (products exact, each product's sum
 * rounded to f32), against float64 of rmsnorm_noweight(x) . W:
 *  - every output within 2e-7 of the row's sum of |w x| / rms (the split's 2^-22, f32 sums);
 *  - every output written once, none outside the chunk's tokens and mix rows;
 *  - controls: the hi terms alone (a one-term TF32 product) and a B fragment with its two registers
 *    swapped must both fail that bound, so the check can tell.
 * Needs no GPU (exit 0 = pass). Build: make BUILD=build-x cuda-tests -> build-x/cuda/hc_mix_tc_emu_check */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "backend/cuda/cuda_hc_mix_tc.cuh"

#define CHECK_RNG_SEED 2424
#include "check_rng.h"

static int g_fail = 0;
#define EXPECT(cond, ...)                                                                                    \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            if (g_fail < 20) {                                                                               \
                printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                  \
                printf(__VA_ARGS__);                                                                         \
                printf("\n");                                                                                \
            }                                                                                                \
            g_fail++;                                                                                        \
        }                                                                                                    \
    } while (0)

enum { MODE_KERNEL, MODE_HI_ONLY, MODE_SWAP_B };

/* d += A B for one warp: a[lane][4], b[lane][2] as the PTX ISA places m16n8k8 .tf32 fragments */
static void emu_mma(float d[32][4], const float a[32][4], const float b[32][2]) {
    double A[16][8], B[8][8];
    for (int l = 0; l < 32; l++) {
        const int g = l / 4, t = l % 4;
        A[g][t] = a[l][0];
        A[g + 8][t] = a[l][1];
        A[g][t + 4] = a[l][2];
        A[g + 8][t + 4] = a[l][3];
        B[t][g] = b[l][0];
        B[t + 4][g] = b[l][1];
    }
    for (int l = 0; l < 32; l++) {
        const int g = l / 4, t = l % 4;
        for (int i = 0; i < 4; i++) {
            const int r = g + (i >= 2 ? 8 : 0), c = 2 * t + (i & 1);
            double s = 0.0;
            for (int k = 0; k < 8; k++) s += A[r][k] * B[k][c];
            d[l][i] = (float)((double)d[l][i] + s);
        }
    }
}

/* The chunk's mix as the kernel computes it (mode: the kernel, or a control) */
static void emu_chunk(const std::vector<float> &x, uint64_t hd, uint32_t n, const std::vector<float> &w,
                      uint32_t n_mix, float eps, int mode, std::vector<float> &mix,
                      std::vector<int> &writes) {
    const uint32_t nt_n = (n_mix + 7) / 8;
    const uint64_t kper = hd / HMT_WARPS;
    static float part[HMT_WARPS][HMT_TOK][HMT_MIX_MAX];
    static double ssw[HMT_WARPS][HMT_TOK];
    for (uint32_t tok0 = 0; tok0 < n; tok0 += HMT_TOK) {
        memset(part, 0xff, sizeof part); /* garbage: every read must follow a write */
        for (uint32_t wp = 0; wp < HMT_WARPS; wp++) {
            static float acc[HMT_NT][32][4];
            double ss[32][2];
            memset(acc, 0, sizeof acc);
            memset(ss, 0, sizeof ss);
            for (uint64_t k = 0; k < kper; k += HMT_STEP) {
                float vh[32][2][4], vl[32][2][4], wv[HMT_NT][32][4];
                for (uint32_t l = 0; l < 32; l++) {
                    const uint32_t g = l / 4, t = l % 4;
                    for (uint32_t i = 0; i < 4; i++) {
                        const uint64_t kk = wp * kper + k + hmt_k(t, i / 2, i % 2);
                        for (uint32_t h = 0; h < 2; h++) {
                            const uint64_t tok = tok0 + g + 8 * h;
                            const float v = tok < n ? x[tok * hd + kk] : 0.0f;
                            ss[l][h] = fma((double)v, (double)v, ss[l][h]);
                            hmt_split(v, &vh[l][h][i], &vl[l][h][i]);
                            if (mode == MODE_HI_ONLY) vl[l][h][i] = 0.0f;
                        }
                        for (uint32_t nt = 0; nt < nt_n; nt++) {
                            const uint32_t j = 8 * nt + g;
                            wv[nt][l][i] = j < n_mix ? w[(uint64_t)j * hd + kk] : 0.0f;
                        }
                    }
                }
                for (uint32_t nt = 0; nt < nt_n; nt++)
                    for (uint32_t s = 0; s < 2; s++) {
                        float ah[32][4], al[32][4], b[32][2];
                        for (uint32_t l = 0; l < 32; l++) {
                            hmt_frag_a(vh[l][0], vh[l][1], s, ah[l]);
                            hmt_frag_a(vl[l][0], vl[l][1], s, al[l]);
                            hmt_frag_b(wv[nt][l], s, b[l]);
                            if (mode == MODE_SWAP_B) {
                                const float tmp = b[l][0];
                                b[l][0] = b[l][1], b[l][1] = tmp;
                            }
                        }
                        emu_mma(acc[nt], ah, b);
                        emu_mma(acc[nt], al, b);
                    }
            }
            /* the butterfly: xor 1, then xor 2, over the 4 lanes of a token */
            double s1[32][2];
            for (uint32_t l = 0; l < 32; l++)
                for (uint32_t h = 0; h < 2; h++) s1[l][h] = ss[l][h] + ss[l ^ 1][h];
            for (uint32_t l = 0; l < 32; l++)
                if (l % 4 == 0) {
                    ssw[wp][l / 4] = s1[l][0] + s1[l ^ 2][0];
                    ssw[wp][l / 4 + 8] = s1[l][1] + s1[l ^ 2][1];
                }
            for (uint32_t nt = 0; nt < nt_n; nt++)
                for (uint32_t l = 0; l < 32; l++)
                    for (uint32_t i = 0; i < 4; i++)
                        part[wp][hmt_acc_tok(l, i)][hmt_acc_mix(l, nt, i)] = acc[nt][l][i];
        }
        for (uint32_t i = 0; i < HMT_TOK * n_mix; i++) {
            const uint32_t tk = i / n_mix, j = i % n_mix;
            if (tok0 + tk >= n) continue;
            float s = 0.0f;
            double ss = 0.0;
            for (uint32_t v = 0; v < HMT_WARPS; v++) s += part[v][tk][j], ss += ssw[v][tk];
            mix[(uint64_t)(tok0 + tk) * n_mix + j] = s * hmt_factor(ss, hd, eps);
            writes[(uint64_t)(tok0 + tk) * n_mix + j]++;
        }
    }
}

/* The largest error of the chunk's outputs relative to their row's sum of |w x| / rms */
static double run_case(uint64_t hd, uint32_t n, uint32_t n_mix, float scale, int mode, bool *writes_ok) {
    std::vector<float> x((uint64_t)n * hd), w((uint64_t)n_mix * hd);
    for (auto &v : x) v = uni() * scale;
    for (auto &v : w) v = (float)((int)(nxt() % 2049) - 1024) * (1.0f / 4096.0f); /* exact f16 values */
    const float eps = 1e-6f;
    std::vector<float> mix((uint64_t)n * n_mix, NAN);
    std::vector<int> writes((uint64_t)n * n_mix, 0);
    emu_chunk(x, hd, n, w, n_mix, eps, mode, mix, writes);
    *writes_ok = true;
    for (int c : writes) *writes_ok = *writes_ok && c == 1;
    double worst = 0.0;
    for (uint32_t t = 0; t < n; t++) {
        double ss = 0.0;
        for (uint64_t k = 0; k < hd; k++) ss += (double)x[t * hd + k] * x[t * hd + k];
        const double r = 1.0 / sqrt(ss / (double)hd + eps);
        for (uint32_t j = 0; j < n_mix; j++) {
            double dot = 0.0, mag = 0.0;
            for (uint64_t k = 0; k < hd; k++) {
                dot += (double)w[j * hd + k] * x[t * hd + k];
                mag += fabs((double)w[j * hd + k] * x[t * hd + k]);
            }
            const double e = fabs((double)mix[(uint64_t)t * n_mix + j] - dot * r) / (mag * r);
            if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
        }
    }
    return worst;
}

int main(void) {
    const double bound = 2e-7;
    struct {
        uint64_t hd;
        uint32_t n, n_mix;
        float scale;
        const char *name;
    } cases[] = {
        {1024, 16, 24, 1.0f, "tiny hd 1024, one tile"},
        {1024, 37, 24, 3.0f, "tiny, 37 tokens (a partial tile)"},
        {2048, 20, 15, 0.25f, "3 streams' 15 mix rows (two n8 tiles, one partial)"},
        {1024, 9, 8, 100.0f, "one n8 tile, 9 tokens, large rows"},
        {16384, 18, 24, 2.0f, "flash hd 16384"},
    };
    for (const auto &c : cases) {
        EXPECT(hmt_shape_ok(c.hd, c.n_mix), "%s: shape refused", c.name);
        bool wok = false;
        const double e = run_case(c.hd, c.n, c.n_mix, c.scale, MODE_KERNEL, &wok);
        printf("%s %-50s err %.3e (bound %.0e)%s\n", e <= bound && wok ? "PASS" : "FAIL", c.name, e, bound,
               wok ? "" : ", an output not written exactly once");
        EXPECT(e <= bound && wok, "%s: err %.3e", c.name, e);
    }
    bool wok = false;
    const double ehi = run_case(1024, 16, 24, 1.0f, MODE_HI_ONLY, &wok);
    printf("%s control: hi terms only                               err %.3e (must exceed %.0e)\n",
           ehi > bound ? "PASS" : "FAIL", ehi, bound);
    EXPECT(ehi > bound, "the hi-only control passed the bound: %.3e", ehi);
    const double esw = run_case(1024, 16, 24, 1.0f, MODE_SWAP_B, &wok);
    printf("%s control: B registers swapped                         err %.3e (must exceed %.0e)\n",
           esw > bound ? "PASS" : "FAIL", esw, bound);
    EXPECT(esw > bound, "the swapped-B control passed the bound: %.3e", esw);
    EXPECT(!hmt_shape_ok(1000, 24) && !hmt_shape_ok(1024, 25) && !hmt_shape_ok(1024, 0), "shape gate");
    EXPECT(hmt_unroll(16384) == 8 && hmt_unroll(1024) == 4, "unroll choice");
    /* tf32 rounding: ties away from zero, 10 mantissa bits */
    EXPECT(hmt_tf32(1.0f + 0x1p-11f) == 1.0f + 0x1p-10f, "tf32 tie up");
    EXPECT(hmt_tf32(-(1.0f + 0x1p-11f)) == -(1.0f + 0x1p-10f), "tf32 tie away (negative)");
    EXPECT(hmt_tf32(1.0f + 0x1p-12f) == 1.0f, "tf32 below half");
    printf("%s\n", g_fail ? "hc_mix_tc_emu_check: FAILED" : "hc_mix_tc_emu_check: all passed");
    return g_fail ? 1 : 0;
}
