/* Batched attention ops of a prefill chunk: the compressor frontier over n tokens, the indexer
 * and sink attention for n queries (backend.h documents them). Each reuses the per-token kernels
 * (cpu_compressor_pool_dims, cpu_indexer_score + cpu_topk_desc, cpu_attention_head), so a
 * token's values are bitwise those of compressor_step / indexer_topk / attention. Work splits
 * over independent items (compressor dims, tokens, token x head), never over a reduction. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "quant/quant.h"

#define GBC(call)                                                                                            \
    do {                                                                                                     \
        const dsv4_status st_ = (call);                                                                      \
        if (st_ != DSV4_OK) return st_;                                                                      \
    } while (0)

typedef struct {
    const float *kv, *score, *ape; /* ape: ratio rows of width, dequantized */
    uint64_t kv_stride, score_stride;
    uint32_t pos0, n, ratio, d_c;
    float *skv, *ssc, *pooled;
} comp_job;

/* Dims [j0, j1) of every step: a thread owns state columns j and d_c + j and nothing else. */
static void comp_worker(void *arg, uint64_t j0, uint64_t j1, uint32_t th) {
    (void)th;
    const comp_job *J = arg;
    const uint32_t R = J->ratio, coff = R == 4 ? 2u : 1u, d = J->d_c;
    const uint64_t width = (uint64_t)coff * d;
    uint32_t e = 0;
    for (uint32_t t = 0; t < J->n; t++) {
        const uint32_t p = J->pos0 + t, phase = p % R, row = R == 4 ? 4 + phase : phase;
        const float *kv = J->kv + t * J->kv_stride, *sc = J->score + t * J->score_stride;
        const float *ape = J->ape + phase * width;
        float *skv = J->skv + row * width, *ssc = J->ssc + row * width;
        for (uint32_t l = 0; l < coff; l++)
            for (uint64_t j = l * (uint64_t)d + j0; j < l * (uint64_t)d + j1; j++) {
                skv[j] = kv[j];
                ssc[j] = sc[j] + ape[j];
            }
        if ((p + 1) % R != 0) continue;
        cpu_compressor_pool_dims(J->skv, J->ssc, d, R, (uint32_t)j0, (uint32_t)j1,
                                 J->pooled + (uint64_t)e * d);
        e++;
        if (R == 4) /* the current window becomes the previous one (this thread's columns) */
            for (uint32_t r = 0; r < 4; r++)
                for (uint32_t l = 0; l < 2; l++) {
                    const uint64_t c0 = l * (uint64_t)d + j0, nb = (j1 - j0) * sizeof(float);
                    memcpy(J->skv + r * width + c0, J->skv + (4 + r) * width + c0, nb);
                    memcpy(J->ssc + r * width + c0, J->ssc + (4 + r) * width + c0, nb);
                }
    }
}

dsv4_status cpu_compressor_chunk(void *vctx, const float *kv, uint64_t kv_stride, const float *score,
                                 uint64_t score_stride, const dsv4_tensor *ape, uint32_t pos0, uint32_t n,
                                 uint32_t ratio, uint32_t d_c, float *state_kv, float *state_score,
                                 float *pooled, dsv4_error *err) {
    cpu_ctx *c = vctx;
    if (ratio < 2) return dsv4_fail(err, DSV4_ERR_INVALID, "compressor_chunk: ratio %u", ratio);
    const uint32_t coff = ratio == 4 ? 2u : 1u;
    const uint64_t width = (uint64_t)coff * d_c;
    if (ape->ne[0] != width || ape->ne[1] < ratio)
        return dsv4_fail(err, DSV4_ERR_INVALID, "compressor_chunk: tensor %s is %llux%llu, expected %llux%u",
                         ape->name ? ape->name : "?", (unsigned long long)ape->ne[0],
                         (unsigned long long)ape->ne[1], (unsigned long long)width, ratio);
    if (n == 0 || d_c == 0) return DSV4_OK;
    float *ape_f = cpu_scratch(c, CPU_SLOT_VEC, (size_t)ratio * width * sizeof(float));
    if (!ape_f) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory in compressor_chunk");
    for (uint32_t ph = 0; ph < ratio; ph++)
        if (!quant_dequant_row(ape->type, dsv4_tensor_row(ape, ph), ape_f + ph * width, (int64_t)width))
            return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "compressor_chunk: cannot decode %s of type %s",
                             ape->name ? ape->name : "?", dsv4_type_name(ape->type));
    comp_job j = {kv, score, ape_f, kv_stride, score_stride, pos0,
                  n,  ratio, d_c,   state_kv,  state_score,  pooled};
    dsv4_tp_run(c->tp, d_c, 32, comp_worker, &j);
    return DSV4_OK;
}

typedef struct {
    const float *q, *ws, *rows;
    uint32_t n_head, head_dim, pos0, ratio, k, max_rows;
    int32_t *sel;
    float *scores; /* per thread: max_rows */
} itopk_job;

static void itopk_worker(void *arg, uint64_t t0, uint64_t t1, uint32_t th) {
    const itopk_job *J = arg;
    float *scores = J->scores + (uint64_t)th * J->max_rows;
    const uint64_t qw = (uint64_t)J->n_head * J->head_dim;
    for (uint64_t t = t0; t < t1; t++) {
        const uint32_t nr = (J->pos0 + (uint32_t)t + 1) / J->ratio;
        if (nr <= J->k) continue;
        const float *q = J->q + t * qw;
        for (uint32_t i = 0; i < nr; i++)
            scores[i] = cpu_indexer_score(J->rows + (uint64_t)i * J->head_dim, q, J->ws + t * J->n_head,
                                          J->n_head, J->head_dim);
        int32_t *sel = J->sel + t * J->k;
        cpu_topk_desc(scores, nr, J->k, sel);
        qsort(sel, J->k, sizeof(int32_t), cpu_cmp_i32);
    }
}

dsv4_status cpu_indexer_topk_chunk(void *vctx, const float *q, const float *w, float w_scale, uint32_t n_head,
                                   uint32_t head_dim, uint32_t rows_type, const void *krows, uint32_t pos0,
                                   uint32_t n, uint32_t ratio, uint32_t k, int32_t *sel, dsv4_error *err) {
    cpu_ctx *c = vctx;
    if (ratio == 0) return dsv4_fail(err, DSV4_ERR_INVALID, "indexer_topk_chunk: ratio 0");
    if (n == 0) return DSV4_OK;
    const uint32_t max_rows = (uint32_t)(((uint64_t)pos0 + n) / ratio);
    if (max_rows <= k) return DSV4_OK; /* no token runs the indexer */
    const float *rows = NULL;
    GBC(cpu_kv_rows_f32(c, CPU_SLOT_C, rows_type, krows, max_rows, head_dim, &rows, err));
    const uint32_t n_threads = dsv4_tp_threads(c->tp);
    float *scores = cpu_scratch(c, CPU_SLOT_A, (size_t)n_threads * max_rows * sizeof(float));
    float *ws = cpu_scratch(c, CPU_SLOT_B, (size_t)n * n_head * sizeof(float));
    if (!scores || !ws) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory in indexer_topk_chunk");
    /* ds4 scales w before the head sum (as indexer_topk) */
    for (uint64_t i = 0; i < (uint64_t)n * n_head; i++) ws[i] = w[i] * w_scale;
    itopk_job j = {q, ws, rows, n_head, head_dim, pos0, ratio, k, max_rows, sel, scores};
    dsv4_tp_run(c->tp, n, 1, itopk_worker, &j);
    return DSV4_OK;
}

typedef struct {
    const float *q, *chunk_kv, *raw, *comp, *sinks;
    const int32_t *sel;
    uint32_t n_head, head_dim, pos0, raw_cap, ratio, n_sel, max_rows;
    float kq_scale;
    const float **rows; /* per thread: max_rows */
    float *scores;      /* per thread: max_rows */
    float *out;
} achunk_job;

/* Token t's rows in attention's order: raw window oldest -> newest, then compressed rows. */
static uint32_t achunk_rows(const achunk_job *J, uint32_t t, const float **rows) {
    const uint32_t p = J->pos0 + t, hd = J->head_dim;
    const uint32_t n_raw = p + 1 < J->raw_cap ? p + 1 : J->raw_cap;
    uint32_t m = 0;
    for (uint32_t r = p + 1 - n_raw; r <= p && n_raw; r++)
        rows[m++] = r >= J->pos0 ? J->chunk_kv + (uint64_t)(r - J->pos0) * hd
                                 : J->raw + (uint64_t)(r % J->raw_cap) * hd;
    const uint32_t n_comp = J->ratio ? (p + 1) / J->ratio : 0;
    if (J->sel && n_comp > J->n_sel) {
        const int32_t *s = J->sel + (uint64_t)t * J->n_sel;
        for (uint32_t i = 0; i < J->n_sel; i++) rows[m++] = J->comp + (uint64_t)s[i] * hd;
    } else {
        for (uint32_t i = 0; i < n_comp; i++) rows[m++] = J->comp + (uint64_t)i * hd;
    }
    return m;
}

static void achunk_worker(void *arg, uint64_t i0, uint64_t i1, uint32_t th) {
    const achunk_job *J = arg;
    const float **rows = J->rows + (uint64_t)th * J->max_rows;
    float *score = J->scores + (uint64_t)th * J->max_rows;
    uint32_t cur = UINT32_MAX, n_rows = 0;
    for (uint64_t i = i0; i < i1; i++) {
        const uint32_t t = (uint32_t)(i / J->n_head), h = (uint32_t)(i % J->n_head);
        if (t != cur) {
            n_rows = achunk_rows(J, t, rows);
            cur = t;
        }
        cpu_attention_head(J->q + i * J->head_dim, J->head_dim, rows, n_rows, J->sinks[h], J->kq_scale, score,
                           J->out + i * J->head_dim);
    }
}

dsv4_status cpu_attention_chunk(void *vctx, const float *q, uint32_t n, uint32_t n_head, uint32_t head_dim,
                                uint32_t pos0, const float *chunk_kv, uint32_t kv_type, const void *kraw,
                                uint32_t raw_cap, const void *kcomp, uint32_t ratio, const int32_t *sel,
                                uint32_t n_sel, const dsv4_tensor *sinks, float kq_scale, float *out,
                                dsv4_error *err) {
    cpu_ctx *c = vctx;
    if (sinks->ne[0] < n_head)
        return dsv4_fail(err, DSV4_ERR_INVALID, "attention_chunk: sinks %s has %llu values for %u heads",
                         sinks->name ? sinks->name : "?", (unsigned long long)sinks->ne[0], n_head);
    if (n == 0 || n_head == 0) return DSV4_OK;
    /* selected ids out of range are rejected up front, as attention does */
    uint32_t max_c = 0;
    for (uint32_t t = 0; t < n; t++) {
        const uint32_t n_comp = ratio ? (pos0 + t + 1) / ratio : 0;
        if (sel && n_comp > n_sel) {
            for (uint32_t i = 0; i < n_sel; i++)
                if (sel[(uint64_t)t * n_sel + i] < 0 || (uint32_t)sel[(uint64_t)t * n_sel + i] >= n_comp)
                    return dsv4_fail(err, DSV4_ERR_INVALID, "attention_chunk: token %u selected row %d of %u",
                                     t, sel[(uint64_t)t * n_sel + i], n_comp);
            if (n_sel > max_c) max_c = n_sel;
        } else if (n_comp > max_c) {
            max_c = n_comp;
        }
    }
    const uint32_t max_rows = raw_cap + max_c + 1;
    /* F16 rows read as f32 once per chunk: the ring rows older than the chunk, the compressed
     * rows the last token can see */
    const float *raw = NULL, *comp = NULL;
    const uint32_t n_comp_last = ratio ? (pos0 + n) / ratio : 0;
    GBC(cpu_kv_rows_f32(c, CPU_SLOT_C, kv_type, kraw, pos0 ? raw_cap : 0, head_dim, &raw, err));
    GBC(cpu_kv_rows_f32(c, CPU_SLOT_D, kv_type, kcomp, n_comp_last, head_dim, &comp, err));
    const uint32_t n_threads = dsv4_tp_threads(c->tp);
    const float **rows = cpu_scratch(c, CPU_SLOT_A, (size_t)n_threads * max_rows * sizeof(float *));
    float *scores = cpu_scratch(c, CPU_SLOT_B, (size_t)n_threads * max_rows * sizeof(float));
    float *sink_tmp = cpu_scratch(c, CPU_SLOT_VEC, (size_t)n_head * sizeof(float));
    if (!rows || !scores || !sink_tmp)
        return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory in attention_chunk");
    const float *sv = cpu_vec_f32(sinks, sink_tmp, n_head);
    if (!sv)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "attention_chunk: cannot read sinks %s",
                         sinks->name ? sinks->name : "?");
    achunk_job j = {q,       chunk_kv, raw,   comp,     sv,       sel,  n_head, head_dim, pos0,
                    raw_cap, ratio,    n_sel, max_rows, kq_scale, rows, scores, out};
    dsv4_tp_run(c->tp, (uint64_t)n * n_head, 1, achunk_worker, &j);
    return DSV4_OK;
}

/* The fused op's reference: q_norm_rope on a copy of the raw queries, attention_chunk, then (rope_out)
 * the heads' inverse rope_tail: the ops in their order, so the graph's fusion protocol runs on the CPU
 * too. */
dsv4_status cpu_attention_chunk_qnr(void *vctx, const float *q, uint32_t n, uint32_t n_head,
                                    uint32_t head_dim, uint32_t pos0, const float *chunk_kv, uint32_t kv_type,
                                    const void *kraw, uint32_t raw_cap, const void *kcomp, uint32_t ratio,
                                    const int32_t *sel, uint32_t n_sel, const dsv4_tensor *sinks,
                                    float kq_scale, float eps, const dsv4_rope *rope, bool rope_out,
                                    float *out, dsv4_error *err) {
    const size_t nq = (size_t)n * n_head * head_dim;
    if (nq == 0) return DSV4_OK;
    float *qn = malloc(nq * sizeof(float));
    if (!qn) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory in attention_chunk_qnr (%zu queries)", nq);
    memcpy(qn, q, nq * sizeof(float));
    dsv4_status st = cpu_q_norm_rope(vctx, qn, n, n_head, head_dim, eps, pos0, 1, rope, err);
    if (st == DSV4_OK)
        st = cpu_attention_chunk(vctx, qn, n, n_head, head_dim, pos0, chunk_kv, kv_type, kraw, raw_cap, kcomp,
                                 ratio, sel, n_sel, sinks, kq_scale, out, err);
    if (st == DSV4_OK && rope_out)
        st = cpu_rope_tail(vctx, out, n, n_head, head_dim, pos0, 1, rope, true, err);
    free(qn);
    return st;
}
