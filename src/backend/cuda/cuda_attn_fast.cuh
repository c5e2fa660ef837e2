/* Units of the fast sink attention (cuda_attn_fast.cu), host-callable so that
 * tests/cuda/attn_fast_emu_check.cu runs the kernels' own arithmetic on the CPU.
 *
 * Shape: head_dim FA_D = 512, heads in groups of FA_G = 16 sharing every KV row (MQA). A CTA of
 * FA_T = 256 threads (8 warps) serves one token, one head group and one segment (decode) or all
 * segments (prefill chunk) of tiles of FA_TR = 16 rows. Per tile:
 *   scores: warp w takes heads 4*(w%4)..+3 of the group and rows 8*(w/4)..+7 of the tile; lane l
 *     holds q dims {4l..4l+3} + 128j (j < 4) of its 4 heads in registers and accumulates the 32
 *     (head, row) partial dots over those 16 dims with fused multiply-adds; a butterfly
 *     reduce-scatter (31 shuffles) leaves lane l with the full dot of head l/8, row l%8;
 *   online softmax: half-warp h (16 lanes = 16 rows) of head h: tile max, running max m, weights
 *     p = expf(s - m), running sum l rescaled by expf(m_old - m);
 *   values: warp w takes heads 4*(w%4)..+3 and dims 256*(w/4) + {4l..4l+3} + 128j (j < 2); each
 *     row adds p * v to 32 accumulators (rescaled once per tile).
 * A query's tiles form segments (fa_token_plan); a segment's state (m, l, o) is folded into the
 * running (M, L, O) in segment order (fa_fold), then the sink: out = O e^(M-M*) / (e^(sink-M*) +
 * L e^(M-M*)), M* = max(sink, M). Decode: one CTA per segment, partials in the scratch, a combine
 * kernel folds; prefill chunk: one CTA per token folds its segments itself (bitwise the same).
 * Numerics (DS4 mode only): f32 with FMA, any order, accurate expf (<= 2 ulp); deterministic (no
 * atomics; the segments depend on the row count only). */
#ifndef DSV4_CUDA_ATTN_FAST_CUH
#define DSV4_CUDA_ATTN_FAST_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#define FA_HD __host__ __device__ __forceinline__
#ifdef __CUDA_ARCH__
#define FA_UNROLL _Pragma("unroll")
#else
#define FA_UNROLL
#endif

constexpr uint32_t FA_D = 512;         /* head_dim */
constexpr uint32_t FA_G = 16;          /* heads of a CTA */
constexpr uint32_t FA_TR = 16;         /* rows of a tile */
constexpr uint32_t FA_T = 256;         /* threads of a CTA */
constexpr uint32_t FA_HW = 4;          /* heads of a warp */
constexpr uint32_t FA_RW = 8;          /* rows of a warp in the scores */
constexpr uint32_t FA_SMAX = 64;       /* splits of one (token, head group) at most */
constexpr uint32_t FA_PART = 4096;     /* (token, head, split) partials the scratch holds */
constexpr uint32_t FA_ROWB = FA_D * 4; /* staged bytes of a row (F32 at most) */
/* scratch: o [FA_PART][FA_D], then m [FA_PART], then l [FA_PART] */
constexpr uint32_t FA_BAR_GROUPS = 64; /* decode fold: head groups a barrier buffer serves (2 words each) */
constexpr size_t FA_SCRATCH_BYTES = (size_t)FA_PART * (FA_D + 2) * sizeof(float);

static_assert(FA_T / 32 == (FA_G / FA_HW) * (FA_TR / FA_RW), "warps = head quads x row halves");
static_assert(FA_HW * FA_RW == 32, "one (head, row) dot per lane after the reduce-scatter");
static_assert(FA_T == FA_G * FA_TR, "one thread per (head, row) in the softmax");

/* A row reference: the row's address with bit 0 set for an F16 row; 0 for no row (masked). */
typedef uintptr_t fa_rowref;

struct fa_args {
    const float *q;                  /* [n][n_head][FA_D] */
    const unsigned char *raw, *comp; /* rows of kv_type */
    const int32_t *sel;
    const float *sinks;
    float *out;      /* [n][n_head][FA_D] */
    uint8_t *outq;   /* decode combine: out's Q8_0 activation blocks too (nullptr: none) */
    float *part;     /* scratch of the split partials, or nullptr: each CTA finishes its heads */
    unsigned *bar;   /* decode fold (fa_launch): 2 words a head group, zero at first; nullptr: the combine */
    uint32_t fold2;  /* the fold's warps take two blocks a round trip (DSV4_CUDA_FA_FOLD=2) */
    const float *kv; /* attention_chunk: the chunk's own F32 rows (positions >= pos0); decode: nullptr */
    uint32_t n_head, raw_cap, raw_start, n_raw, n_comp, n_sel, pos0, ratio;
    uint32_t slots;  /* CTAs the device holds at once (fa_token_plan) */
    uint32_t stride; /* part: partials per (token, head) (the grid's y) */
    float kq_scale;
    bool half; /* raw / comp rows are F16 */
};

/* The arguments of an attention_chunk launch (the fast and the tensor-core kernels). */
static inline fa_args fa_chunk_args(const float *q, const void *raw, const void *comp, const int32_t *sel,
                                    const float *sinks, float *out, const float *chunk_kv, uint32_t n_head,
                                    uint32_t raw_cap, uint32_t pos0, uint32_t ratio, uint32_t n_sel,
                                    float kq_scale, bool half) {
    fa_args a = {};
    a.q = q;
    a.raw = (const unsigned char *)raw;
    a.comp = (const unsigned char *)comp;
    a.sel = sel;
    a.sinks = sinks;
    a.out = out;
    a.kv = chunk_kv;
    a.n_head = n_head;
    a.raw_cap = raw_cap;
    a.pos0 = pos0;
    a.ratio = ratio;
    a.n_sel = n_sel;
    a.kq_scale = kq_scale;
    a.half = half;
    return a;
}

/* The rows one query attends (backend.h attention / attention_chunk). */
struct fa_tok {
    uint32_t n_raw, raw_start, n_comp, n_rows;
    const int32_t *sel; /* this token's selection or nullptr */
};

FA_HD fa_tok fa_token(const fa_args &a, uint32_t t) {
    fa_tok k;
    if (!a.kv) {
        k.n_raw = a.n_raw;
        k.raw_start = a.raw_start;
        k.n_comp = a.n_comp;
        k.sel = a.sel;
        k.n_rows = a.n_raw + (a.sel ? a.n_sel : a.n_comp);
        return k;
    }
    const uint32_t p = a.pos0 + t;
    k.n_raw = p + 1 < a.raw_cap ? p + 1 : a.raw_cap;
    k.raw_start = p + 1 - k.n_raw; /* a position (taken modulo raw_cap for the ring) */
    k.n_comp = a.ratio ? (p + 1) / a.ratio : 0;
    const bool use_sel = a.sel && k.n_comp > a.n_sel;
    k.sel = use_sel ? a.sel + (uint64_t)t * a.n_sel : nullptr;
    k.n_rows = k.n_raw + (use_sel ? a.n_sel : k.n_comp);
    return k;
}

/* Row r of token k in the exact kernel's order (raw oldest -> newest, then compressed); 0 past the
 * end and for a selection outside [0, n_comp) (weight 0, as the exact kernel). */
FA_HD fa_rowref fa_row(const fa_args &a, const fa_tok &k, uint32_t r) {
    if (r >= k.n_rows) return 0;
    const uint64_t rb = a.half ? FA_D * 2u : FA_D * 4u;
    const fa_rowref hb = a.half ? 1u : 0u;
    if (r < k.n_raw) {
        const uint32_t pos = k.raw_start + r;
        if (a.kv && pos >= a.pos0) return (fa_rowref)(a.kv + (uint64_t)(pos - a.pos0) * FA_D);
        return (fa_rowref)(a.raw + (uint64_t)(pos % a.raw_cap) * rb) | hb;
    }
    const uint32_t c = r - k.n_raw;
    const int64_t i = k.sel ? (int64_t)k.sel[c] : (int64_t)c;
    if (i < 0 || i >= (int64_t)k.n_comp) return 0;
    return (fa_rowref)(a.comp + (uint64_t)i * rb) | hb;
}

/* 16-byte chunks of a row as staged (F16: 64, F32: 128). */
FA_HD uint32_t fa_row_chunks(fa_rowref p) { return p & 1u ? FA_D * 2 / 16 : FA_D * 4 / 16; }
FA_HD const unsigned char *fa_row_bytes(fa_rowref p) { return (const unsigned char *)(p & ~(fa_rowref)1); }

/* Elements 4c..4c+3 of a staged row as floats (exact), zeros for no row. */
FA_HD float4 fa_convert(fa_rowref p, const unsigned char *staged, uint32_t c) {
    if (!p) return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (p & 1u) {
        const __half *h = (const __half *)(staged + (size_t)c * 8);
        return make_float4(__half2float(h[0]), __half2float(h[1]), __half2float(h[2]), __half2float(h[3]));
    }
    return *(const float4 *)(staged + (size_t)c * 16);
}

/* Scores: lane's partial dots acc[hh*FA_RW + rr] of head hh (q: its dims, see above) with row rr of
 * rows (the warp's FA_RW rows, FA_D floats each). */
FA_HD void fa_qk_lane(float acc[FA_HW * FA_RW], const float4 q[FA_HW][4], const float *rows, uint32_t lane) {
    FA_UNROLL
    for (uint32_t i = 0; i < FA_HW * FA_RW; i++) acc[i] = 0.0f;
    FA_UNROLL
    for (uint32_t rr = 0; rr < FA_RW; rr++) {
        FA_UNROLL
        for (uint32_t j = 0; j < 4; j++) {
            const float4 k = *(const float4 *)(rows + (size_t)rr * FA_D + lane * 4 + 128 * j);
            FA_UNROLL
            for (uint32_t hh = 0; hh < FA_HW; hh++) {
                float s = acc[hh * FA_RW + rr];
                s = fmaf(q[hh][j].x, k.x, s);
                s = fmaf(q[hh][j].y, k.y, s);
                s = fmaf(q[hh][j].z, k.z, s);
                s = fmaf(q[hh][j].w, k.w, s);
                acc[hh * FA_RW + rr] = s;
            }
        }
    }
}

/* One reduce-scatter stage over lanes at xor distance o (o = 16, 8, 4, 2, 1, with 2*o values
 * left): the value lane sends for slot i < o, and the one it keeps (to which the partner's sent
 * value is added). After the five stages slot 0 of lane l holds the sum over all lanes of the
 * original value l. */
FA_HD float fa_rs_send(const float *acc, uint32_t o, bool up, uint32_t i) { return up ? acc[i] : acc[i + o]; }
FA_HD float fa_rs_keep(const float *acc, uint32_t o, bool up, uint32_t i) { return up ? acc[i + o] : acc[i]; }

/* Online-softmax pieces. p of a score against the new running max (0 for a masked score and
 * while every score so far is masked). */
FA_HD float fa_weight(float s, float m_new) { return m_new == -INFINITY ? 0.0f : expf(s - m_new); }
/* The factor of the old sums (0 while empty: o and l are 0 then). */
FA_HD float fa_rescale(float m_old, float m_new) { return m_old == -INFINITY ? 0.0f : expf(m_old - m_new); }

/* Values: lane's 32 accumulators o[hh][j] (dims 4 of head hh at d0 + 128 j, d0 = 256*dh + 4*lane)
 * += p[r][hh] * v[r] over the FA_TR rows of the tile; pt: weights [FA_TR][FA_G] (quad's heads at
 * qd*FA_HW). */
FA_HD void fa_pv_lane(float4 o[FA_HW][2], const float *tile, const float *pt, uint32_t qd, uint32_t dh,
                      uint32_t lane) {
    FA_UNROLL
    for (uint32_t r = 0; r < FA_TR; r++) {
        const float4 p = *(const float4 *)(pt + r * FA_G + qd * FA_HW);
        const float pw[4] = {p.x, p.y, p.z, p.w};
        const float *v = tile + (size_t)r * FA_D + dh * 256 + lane * 4;
        FA_UNROLL
        for (uint32_t j = 0; j < 2; j++) {
            const float4 k = *(const float4 *)(v + 128 * j);
            FA_UNROLL
            for (uint32_t hh = 0; hh < FA_HW; hh++) {
                o[hh][j].x = fmaf(pw[hh], k.x, o[hh][j].x);
                o[hh][j].y = fmaf(pw[hh], k.y, o[hh][j].y);
                o[hh][j].z = fmaf(pw[hh], k.z, o[hh][j].z);
                o[hh][j].w = fmaf(pw[hh], k.w, o[hh][j].w);
            }
        }
    }
}

/* One split's (m, l) finished with the sink: the factor of its o (0 when everything is -inf). */
FA_HD float fa_finish_scale(float sink, float m, float l) {
    const float mx = fmaxf(sink, m);
    if (mx == -INFINITY) return 0.0f;
    const float em = m == -INFINITY ? 0.0f : expf(m - mx);
    const float den = fmaf(l, em, expf(sink - mx));
    return den > 0.0f ? em / den : 0.0f;
}

/* The segments of one query: its tiles are cut into `splits` runs of `tps` tiles (the last may be
 * shorter), a function of the row count only (and of n_head and slots = CTAs the device holds at
 * once, fixed for a model on a device). Decode runs one CTA per segment and the combine folds them;
 * a prefill chunk runs the same segments one after the other in one CTA and folds them the same
 * way, so that a token's output is bitwise the same whether it was decoded alone or in a chunk
 * (DSV4_PREFILL_SERIAL=1 == batched prefill). */
struct fa_plan {
    uint32_t splits, tps;
};

FA_HD uint32_t fa_max_splits(uint32_t n_head, uint32_t slots) {
    uint32_t s = FA_SMAX;
    if (s > FA_PART / n_head) s = FA_PART / n_head;
    const uint32_t units = n_head / FA_G,
                   fill = units < slots ? slots / units : 1; /* splits filling the device */
    if (s > fill) s = fill;
    return s ? s : 1;
}

FA_HD fa_plan fa_token_plan(uint32_t n_rows, uint32_t n_head, uint32_t slots) {
    fa_plan p;
    const uint32_t n_tiles = (n_rows + FA_TR - 1) / FA_TR, smax = fa_max_splits(n_head, slots);
    const uint32_t s = n_tiles < smax ? (n_tiles ? n_tiles : 1) : smax;
    p.tps = n_tiles ? (n_tiles + s - 1) / s : 1;
    p.splits = n_tiles ? (n_tiles + p.tps - 1) / p.tps : 1;
    return p;
}

/* Folding segment j's (m_j, l_j, o_j) into the running (M, L, O), in segment order:
 * M' = max(M, m_j), L' = l_j b + L a, O' = o_j b + O a with a = e^(M - M'), b = e^(m_j - M')
 * (0 for -inf). The kernel's in-CTA fold and the combine use exactly these operations. */
struct fa_fold_w {
    float a, b, m;
};
FA_HD fa_fold_w fa_fold_weights(float M, float m_j) {
    fa_fold_w w;
    w.m = fmaxf(M, m_j);
    w.a = fa_rescale(M, w.m);
    w.b = fa_rescale(m_j, w.m);
    return w;
}
FA_HD float fa_fold(float acc, float x_j, const fa_fold_w &w) { return fmaf(x_j, w.b, acc * w.a); }

/* The combine of one output element: segments j < n of (m[j], l[j], o[j*o_stride]) folded, then
 * the sink. */
FA_HD float fa_combine_one(const float *m, const float *l, const float *o, uint64_t o_stride, uint32_t n,
                           float sink) {
    float M = -INFINITY, L = 0.0f, O = 0.0f;
    for (uint32_t j = 0; j < n; j++) {
        const fa_fold_w w = fa_fold_weights(M, m[j]);
        L = fa_fold(L, l[j], w);
        O = fa_fold(O, o[(uint64_t)j * o_stride], w);
        M = w.m;
    }
    return O * fa_finish_scale(sink, M, L);
}

/* CG: a load that skips L1 (the fold reads partials other CTAs of the same launch wrote) */
template <bool CG> FA_HD float fa_ld(const float *p) {
#ifdef __CUDA_ARCH__
    if (CG) return __ldcg(p);
#endif
    return *p;
}

/* fa_combine_one with the loads of PF segments issued before their folds (the same folds in the same
 * order: the same bits). The decode combine's time was the chain of one L2 round trip per segment. */
template <uint32_t PF, bool CG = false>
FA_HD float fa_combine_pf(const float *m, const float *l, const float *o, uint64_t o_stride, uint32_t n,
                          float sink) {
    float M = -INFINITY, L = 0.0f, O = 0.0f;
    for (uint32_t j0 = 0; j0 < n; j0 += PF) {
        float mv[PF], lv[PF], ov[PF];
        FA_UNROLL
        for (uint32_t j = 0; j < PF; j++)
            if (j0 + j < n)
                mv[j] = fa_ld<CG>(m + j0 + j), lv[j] = fa_ld<CG>(l + j0 + j),
                ov[j] = fa_ld<CG>(o + (uint64_t)(j0 + j) * o_stride);
        FA_UNROLL
        for (uint32_t j = 0; j < PF; j++)
            if (j0 + j < n) {
                const fa_fold_w w = fa_fold_weights(M, mv[j]);
                L = fa_fold(L, lv[j], w);
                O = fa_fold(O, ov[j], w);
                M = w.m;
            }
    }
    return O * fa_finish_scale(sink, M, L);
}

/* Two fa_combine_pf elements at once (a and b: their own partials and sinks), every load of a batch of
 * both issued before the folds: each element's folds are fa_combine_pf's, in its order (the same bits);
 * the decode fold's warps take two 32-value blocks a round trip. */
template <uint32_t PF, bool CG = false>
FA_HD void fa_combine_pf2(const float *ma, const float *la, const float *oa, const float *mb, const float *lb,
                          const float *ob, uint64_t o_stride, uint32_t n, float sink_a, float sink_b,
                          float *va, float *vb) {
    float Ma = -INFINITY, La = 0.0f, Oa = 0.0f, Mb = -INFINITY, Lb = 0.0f, Ob = 0.0f;
    for (uint32_t j0 = 0; j0 < n; j0 += PF) {
        float mva[PF], lva[PF], ova[PF], mvb[PF], lvb[PF], ovb[PF];
        FA_UNROLL
        for (uint32_t j = 0; j < PF; j++)
            if (j0 + j < n) {
                mva[j] = fa_ld<CG>(ma + j0 + j), lva[j] = fa_ld<CG>(la + j0 + j);
                ova[j] = fa_ld<CG>(oa + (uint64_t)(j0 + j) * o_stride);
                mvb[j] = fa_ld<CG>(mb + j0 + j), lvb[j] = fa_ld<CG>(lb + j0 + j);
                ovb[j] = fa_ld<CG>(ob + (uint64_t)(j0 + j) * o_stride);
            }
        FA_UNROLL
        for (uint32_t j = 0; j < PF; j++)
            if (j0 + j < n) {
                const fa_fold_w wa = fa_fold_weights(Ma, mva[j]), wb = fa_fold_weights(Mb, mvb[j]);
                La = fa_fold(La, lva[j], wa);
                Oa = fa_fold(Oa, ova[j], wa);
                Ma = wa.m;
                Lb = fa_fold(Lb, lvb[j], wb);
                Ob = fa_fold(Ob, ovb[j], wb);
                Mb = wb.m;
            }
    }
    *va = Oa * fa_finish_scale(sink_a, Ma, La);
    *vb = Ob * fa_finish_scale(sink_b, Mb, Lb);
}

/* The launch: segments = one CTA per segment (grid y = the most segments a token has) with the
 * partials in the scratch and the combine; else grid y = 1 and each CTA folds its token. Decode
 * always takes segments (with a scratch): the same two launches at every position, as a recorded
 * step needs. */
struct fa_launch_shape {
    bool segments;
    uint32_t grid_y;
};

inline fa_launch_shape fa_shape(const fa_args &a, uint32_t n, uint32_t max_rows, bool scratch, bool decode) {
    fa_launch_shape g = {false, 1};
    if (!scratch) return g;
    if (decode) {
        g.segments = true;
        g.grid_y = fa_token_plan(max_rows, a.n_head, a.slots).splits;
        return g;
    }
    const uint32_t max_tiles = (max_rows + FA_TR - 1) / FA_TR, smax = fa_max_splits(a.n_head, a.slots);
    const uint32_t y = max_tiles < smax ? (max_tiles ? max_tiles : 1) : smax;
    const uint64_t units = (uint64_t)n * (a.n_head / FA_G);
    if (y > 1 && (uint64_t)n * a.n_head * y <= FA_PART && units < a.slots) {
        g.segments = true;
        g.grid_y = y;
    }
    return g;
}

#endif
