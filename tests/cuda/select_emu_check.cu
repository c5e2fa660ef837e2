/* Host replay of the indexer's bit-by-bit top-k selection (cuda_attn_indexer.cu select_bits_kernel): 1,024
 * threads of KPT rows each run the kernel's units (cuda_select_units.cuh) round by round, the block sums and
 * exclusive scans done here in thread order (integers), with and without the compaction after the top 16
 * bits. The selected rows must equal, in order:
 *   - the CPU's selection (cpu_topk_desc, then ascending row order, as cpu_indexer_topk does) for finite
 *     scores: random, with -0 and +0 mixed, long runs of equal scores, all equal, negative, huge and tiny;
 *   - for any scores (NaN and infinities included), the k largest keys of sel_order_key with ties to the
 *     lower row, in row order (a sort, independent of the rounds);
 * and every output slot must be written by exactly one thread.
 * Shapes: 1 to 16,384 rows, k from 1 to n, every KPT the kernel has, the compaction taken and declined (more
 * than 1,024 keys sharing T's top half). Needs no GPU (exit 0 = pass). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

extern "C" {
#include "backend/cpu/cpu_internal.h" /* cpu_topk_desc, cpu_cmp_i32 */
}
#include "backend/cuda/cuda_select_units.cuh"

#define CHECK_RNG_SEED 0x5e1b
#include "check_rng.h"

#define THREADS 1024u

static int g_fail = 0, g_cases = 0, g_compacted = 0, g_overlap = 0;

/* exclusive scan of per-thread values in thread order; *tot their sum */
static std::vector<uint32_t> excl_scan(const std::vector<uint32_t> &v, uint32_t *tot) {
    std::vector<uint32_t> out(v.size());
    uint32_t acc = 0;
    for (size_t i = 0; i < v.size(); i++) out[i] = acc, acc += v[i];
    *tot = acc;
    return out;
}

/* thread t's keys as the kernel holds them (a register array) */
template <uint32_t N>
static void keys_of(const std::vector<std::vector<uint32_t>> &key, uint32_t t, uint32_t (&v)[N]) {
    for (uint32_t j = 0; j < N; j++) v[j] = key[t][j];
}

template <uint32_t N>
static uint32_t rounds(const std::vector<std::vector<uint32_t>> &keys, uint32_t T, int hi, int lo,
                       uint32_t above, uint32_t k) {
    for (int b = hi; b >= lo; b--) {
        const uint32_t cand = T | (1u << b);
        uint32_t tot = above;
        for (uint32_t t = 0; t < THREADS; t++) {
            uint32_t v[N];
            keys_of<N>(keys, t, v);
            tot += selb_count_ge<N>(v, cand);
        }
        if (tot >= k) T = cand;
    }
    return T;
}

/* The kernel's threads, replayed: the selection of k of the n scores. */
template <uint32_t KPT>
static std::vector<int32_t> replay(const std::vector<float> &s, uint32_t k, bool compact) {
    const uint32_t n = (uint32_t)s.size();
    std::vector<std::vector<uint32_t>> key(THREADS, std::vector<uint32_t>(KPT));
    for (uint32_t t = 0; t < THREADS; t++)
        for (uint32_t j = 0; j < KPT; j++) key[t][j] = t * KPT + j < n ? sel_order_key(s[t * KPT + j]) : 0u;
    uint32_t T;
    if (!compact) {
        T = rounds<KPT>(key, 0u, 31, 0, 0u, k);
    } else {
        T = rounds<KPT>(key, 0u, 31, 16, 0u, k);
        std::vector<uint32_t> hc(THREADS), nl(THREADS);
        for (uint32_t t = 0; t < THREADS; t++) {
            uint32_t v[KPT];
            keys_of<KPT>(key, t, v);
            hc[t] = selb_half_counts<KPT>(v, T);
        }
        uint32_t tot;
        const std::vector<uint32_t> before = excl_scan(hc, &tot);
        if ((tot & 0xffffu) <= THREADS) {
            g_compacted++;
            std::vector<uint32_t> live(THREADS, 0xdeadbeefu);
            for (uint32_t t = 0; t < THREADS; t++) {
                uint32_t v[KPT];
                keys_of<KPT>(key, t, v);
                selb_compact<KPT>(v, T, before[t] & 0xffffu, live.data());
            }
            std::vector<std::vector<uint32_t>> one(THREADS, std::vector<uint32_t>(1));
            for (uint32_t t = 0; t < THREADS; t++) one[t][0] = t < (tot & 0xffffu) ? live[t] : 0u;
            T = rounds<1>(one, T, 15, 0, tot >> 16, k);
        } else {
            T = rounds<KPT>(key, T, 15, 0, 0u, k);
        }
    }
    std::vector<uint32_t> oc(THREADS);
    for (uint32_t t = 0; t < THREADS; t++) {
        uint32_t v[KPT];
        keys_of<KPT>(key, t, v);
        oc[t] = selb_out_counts<KPT>(v, t * KPT, n, T);
    }
    uint32_t tot;
    const std::vector<uint32_t> before = excl_scan(oc, &tot);
    /* each thread into a buffer of its own (k slots and KPT beyond), merged: every slot must be written by
     * exactly one thread and none beyond k (threads of the kernel write side by side) */
    std::vector<int32_t> sel(k, -1), mine(k + KPT);
    for (uint32_t t = 0; t < THREADS; t++) {
        uint32_t v[KPT];
        keys_of<KPT>(key, t, v);
        std::fill(mine.begin(), mine.end(), -1);
        selb_write<KPT>(v, t * KPT, n, T, before[t], tot, k, mine.data());
        for (uint32_t i = 0; i < k + KPT; i++)
            if (mine[i] >= 0) {
                if (i >= k || sel[i] >= 0) {
                    g_overlap++;
                    continue;
                }
                sel[i] = mine[i];
            }
    }
    return sel;
}

static std::vector<int32_t> replay_any(const std::vector<float> &s, uint32_t k, bool compact) {
    const uint32_t kpt = ((uint32_t)s.size() + THREADS - 1) / THREADS;
    if (kpt <= 1) return replay<1>(s, k, false); /* the launcher's choices (select_launch) */
    if (kpt <= 2) return replay<2>(s, k, false);
    if (kpt <= 4) return replay<4>(s, k, false);
    if (kpt <= 8) return replay<8>(s, k, compact);
    return replay<16>(s, k, compact);
}

/* the k largest keys, ties to the lower row, in row order */
static std::vector<int32_t> by_sort(const std::vector<float> &s, uint32_t k) {
    std::vector<int32_t> idx(s.size());
    for (size_t i = 0; i < s.size(); i++) idx[i] = (int32_t)i;
    std::stable_sort(idx.begin(), idx.end(),
                     [&](int32_t a, int32_t b) { return sel_order_key(s[a]) > sel_order_key(s[b]); });
    idx.resize(k);
    std::sort(idx.begin(), idx.end());
    return idx;
}
static std::vector<int32_t> by_cpu(const std::vector<float> &s, uint32_t k) {
    std::vector<int32_t> idx(k);
    cpu_topk_desc(s.data(), (uint32_t)s.size(), k, idx.data());
    qsort(idx.data(), k, sizeof(int32_t), cpu_cmp_i32);
    return idx;
}

static void check(const char *what, const std::vector<float> &s, uint32_t k, bool finite) {
    const std::vector<int32_t> ref = by_sort(s, k);
    if (finite && by_cpu(s, k) != ref) {
        fprintf(stderr, "FAIL %s n=%zu k=%u: the sort reference differs from the CPU's selection\n", what,
                s.size(), k);
        g_fail++;
    }
    for (int compact = 0; compact < 2; compact++) {
        g_cases++;
        const int overlap0 = g_overlap;
        const std::vector<int32_t> got = replay_any(s, k, compact != 0);
        if (g_overlap != overlap0) {
            fprintf(stderr, "FAIL %s n=%zu k=%u compact=%d: %d writes past k or over another thread's\n",
                    what, s.size(), k, compact, g_overlap - overlap0);
            g_fail++;
        } else if (got != ref) {
            size_t i = 0;
            while (i < k && got[i] == ref[i]) i++;
            fprintf(stderr, "FAIL %s n=%zu k=%u compact=%d: first difference at %zu (got %d, want %d)\n",
                    what, s.size(), k, compact, i, got[i], ref[i]);
            g_fail++;
        }
    }
}

enum kind { RANDOM, SIGNED_ZERO, RUNS, ALL_EQUAL, NEGATIVE, WIDE, NONFINITE };
static std::vector<float> make(kind kd, uint32_t n) {
    std::vector<float> s(n);
    float pool[7];
    for (float &p : pool) p = uni();
    for (uint32_t i = 0; i < n; i++) {
        switch (kd) {
        case RANDOM: s[i] = uni(); break;
        case SIGNED_ZERO: s[i] = (i % 3 == 0) ? (i % 2 ? -0.0f : 0.0f) : uni() * 1e-3f; break;
        case RUNS: s[i] = pool[(i / 37) % 7]; break;
        case ALL_EQUAL: s[i] = 0.25f; break;
        case NEGATIVE: s[i] = -fabsf(uni()) - 1.0f; break;
        case WIDE: s[i] = ldexpf(uni(), (int)(i % 200) - 100); break;
        case NONFINITE: {
            const uint32_t r = i % 11;
            s[i] = r == 0 ? NAN : r == 1 ? -NAN : r == 2 ? INFINITY : r == 3 ? -INFINITY : uni();
            break;
        }
        }
    }
    return s;
}

int main(void) {
    static const char *names[] = {"random",   "signed zeros", "runs of 7 values", "all equal",
                                  "negative", "wide",         "nan/inf"};
    const uint32_t ns[] = {1, 7, 513, 1024, 1025, 2048, 3001, 4097, 8192, 8193, 12000, 16384};
    for (int kd = RANDOM; kd <= NONFINITE; kd++)
        for (uint32_t n : ns) {
            const std::vector<float> s = make((kind)kd, n);
            const uint32_t ks[] = {1, n < 17 ? n : 17, n < 512 ? n : 512, n};
            for (uint32_t k : ks) check(names[kd], s, k, kd != NONFINITE);
        }
    /* the compaction declined: more than 1,024 keys share T's top half (and taken right at 1,024) */
    for (uint32_t same : {1024u, 1025u, 5000u}) {
        std::vector<float> s = make(RANDOM, 12000);
        for (uint32_t i = 0; i < same; i++) s[(i * 7) % 12000] = 1.5f + (float)(i % 4) * 1e-6f;
        check("shared top half", s, 512, true);
        check("shared top half", s, same, true);
    }
    printf("select_emu_check: %d cases, %d with the compaction taken, %d failed\n", g_cases, g_compacted,
           g_fail);
    return g_fail ? 1 : 0;
}
