/* Router selection and routed experts (spec model-moe-gguf-tokenizer.md §2). */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "quant/quant.h"

#define ROUTER_SUM_FLOOR 6.103515625e-5f /* 2^-14 */

dsv4_status cpu_router_select(void *vctx, const float *logits, uint32_t n, uint32_t n_expert, uint32_t k,
                              const dsv4_tensor *bias, const dsv4_tensor *tid2eid, const int32_t *tokens,
                              float scale, int32_t *sel, float *weights, dsv4_error *err) {
    cpu_ctx *c = vctx;
    if (k == 0 || k > n_expert)
        return dsv4_fail(err, DSV4_ERR_INVALID, "router: %u of %u experts", k, n_expert);
    float *p = cpu_scratch(c, CPU_SLOT_A, (size_t)n_expert * sizeof(float));
    float *s = cpu_scratch(c, CPU_SLOT_B, (size_t)n_expert * sizeof(float));
    float *b = cpu_scratch(c, CPU_SLOT_VEC, (size_t)n_expert * sizeof(float));
    if (!p || !s || !b) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory in router");
    const float *bv = NULL;
    if (bias && !tid2eid) { /* the bias never applies to hash-routed layers */
        if (bias->ne[0] != n_expert || !(bv = cpu_vec_f32(bias, b, n_expert)))
            return dsv4_fail(err, DSV4_ERR_INVALID, "router: cannot use bias %s",
                             bias->name ? bias->name : "?");
    }
    if (tid2eid && (tid2eid->type != DSV4_TYPE_I32 || tid2eid->ne[0] != k))
        return dsv4_fail(err, DSV4_ERR_INVALID, "router: hash table %s must be I32 [%u, vocab]",
                         tid2eid->name ? tid2eid->name : "?", k);
    for (uint32_t t = 0; t < n; t++) {
        const float *lg = logits + (uint64_t)t * n_expert;
        int32_t *st = sel + (uint64_t)t * k;
        float *wt = weights + (uint64_t)t * k;
        for (uint32_t e = 0; e < n_expert; e++) p[e] = sqrtf(cpu_softplus(lg[e]));
        if (tid2eid) {
            if (tokens[t] < 0 || (uint64_t)tokens[t] >= tid2eid->ne[1])
                return dsv4_fail(err, DSV4_ERR_RANGE, "router: token %d outside hash table %s", tokens[t],
                                 tid2eid->name ? tid2eid->name : "?");
            const int32_t *row = dsv4_tensor_row(tid2eid, (uint64_t)tokens[t]);
            for (uint32_t i = 0; i < k; i++) {
                if (row[i] < 0 || (uint32_t)row[i] >= n_expert)
                    return dsv4_fail(err, DSV4_ERR_FORMAT, "router: %s maps token %d to expert %d of %u",
                                     tid2eid->name ? tid2eid->name : "?", tokens[t], row[i], n_expert);
                st[i] = row[i];
            }
        } else {
            for (uint32_t e = 0; e < n_expert; e++) s[e] = bv ? p[e] + bv[e] : p[e];
            cpu_topk_desc(s, n_expert, k, st);
        }
        float sum = 0.0f;
        for (uint32_t i = 0; i < k; i++) {
            wt[i] = p[st[i]]; /* weights use the unbiased scores */
            sum += wt[i];
        }
        if (sum < ROUTER_SUM_FLOOR) sum = ROUTER_SUM_FLOOR;
        for (uint32_t i = 0; i < k; i++) wt[i] = wt[i] / sum * scale;
    }
    return DSV4_OK;
}

/* ---- routed experts, grouped by expert so each expert's rows are read once per sub-batch ---- */

#define MOE_SUB 64 /* tokens per sub-batch: bounds the scratch, results do not depend on it */

typedef struct {
    const dsv4_tensor *gate, *up, *down;
    uint32_t k, in, ff, embd, clamp_on;
    float clamp;
    cpu_act_kind kin, kmid;
    cpu_dot_fn dgu, dd;
    size_t xbytes, mbytes;
    const float *x;       /* sub-batch rows */
    const float *weights; /* sub-batch n x k */
    uint8_t *xq;          /* per token */
    float *mid;           /* per pair (t*k + s) x ff */
    uint8_t *midq;        /* per pair */
    float *y;             /* per pair x embd */
    /* pairs grouped by expert */
    uint32_t n_active;
    const uint32_t *act_expert; /* [n_active] */
    const uint32_t *start;      /* [n_active + 1] offsets into pairs */
    const uint32_t *pairs;      /* t*k + s */
    float *rowbuf;              /* EXACT: per thread 2 * max(in, ff) floats; NULL in DS4 mode */
    uint32_t rowbuf_n;
} moe_job;

static void quant_x_worker(void *arg, uint64_t t0, uint64_t t1, uint32_t th) {
    (void)th;
    moe_job *j = arg;
    for (uint64_t t = t0; t < t1; t++)
        cpu_act_quant_row(j->kin, j->x + t * j->in, j->xq + t * j->xbytes, j->in);
}

#define MOE_DOT_X 8 /* pairs per multi-row dot call */

static void store_mid(const moe_job *j, uint32_t pair, uint32_t r, float g, float u) {
    if (j->clamp_on) {
        if (g > j->clamp) g = j->clamp;
        if (u > j->clamp) u = j->clamp;
        if (u < -j->clamp) u = -j->clamp;
    }
    /* the route weight scales mid before the down projection */
    j->mid[(uint64_t)pair * j->ff + r] = cpu_silu(g) * u * j->weights[pair];
}

static void gate_up_worker(void *arg, uint64_t i0, uint64_t i1, uint32_t th) {
    moe_job *j = arg;
    float *gtmp = j->rowbuf ? j->rowbuf + (uint64_t)th * j->rowbuf_n : NULL;
    float *utmp = gtmp ? gtmp + j->rowbuf_n / 2 : NULL;
    for (uint64_t i = i0; i < i1; i++) { /* item = (active expert, ff row) */
        const uint32_t a = (uint32_t)(i / j->ff), r = (uint32_t)(i % j->ff);
        const uint32_t e = j->act_expert[a];
        const void *grow = dsv4_tensor_expert_row(j->gate, e, r);
        const void *urow = dsv4_tensor_expert_row(j->up, e, r);
        if (gtmp) { /* EXACT: dequantize once per row, f32 activations, double dots */
            grow = cpu_row_f32(j->gate->type, grow, j->in, gtmp);
            urow = cpu_row_f32(j->up->type, urow, j->in, utmp);
            for (uint32_t p = j->start[a]; p < j->start[a + 1]; p++) {
                const uint32_t pair = j->pairs[p];
                const float *xa = (const float *)(j->xq + (uint64_t)(pair / j->k) * j->xbytes);
                store_mid(j, pair, r, cpu_dot_exact(grow, xa, j->in), cpu_dot_exact(urow, xa, j->in));
            }
            continue;
        }
        for (uint32_t p = j->start[a]; p < j->start[a + 1]; p += MOE_DOT_X) {
            const int nx = j->start[a + 1] - p < MOE_DOT_X ? (int)(j->start[a + 1] - p) : MOE_DOT_X;
            const void *xa[MOE_DOT_X];
            float g[MOE_DOT_X], u[MOE_DOT_X];
            for (int q = 0; q < nx; q++) xa[q] = j->xq + (uint64_t)(j->pairs[p + q] / j->k) * j->xbytes;
            j->dgu(grow, xa, nx, j->in, g);
            j->dgu(urow, xa, nx, j->in, u);
            for (int q = 0; q < nx; q++) store_mid(j, j->pairs[p + q], r, g[q], u[q]);
        }
    }
}

static void quant_mid_worker(void *arg, uint64_t p0, uint64_t p1, uint32_t th) {
    (void)th;
    moe_job *j = arg;
    for (uint64_t p = p0; p < p1; p++)
        cpu_act_quant_row(j->kmid, j->mid + p * j->ff, j->midq + p * j->mbytes, j->ff);
}

static void down_worker(void *arg, uint64_t i0, uint64_t i1, uint32_t th) {
    moe_job *j = arg;
    float *dtmp = j->rowbuf ? j->rowbuf + (uint64_t)th * j->rowbuf_n : NULL;
    for (uint64_t i = i0; i < i1; i++) { /* item = (active expert, embd row) */
        const uint32_t a = (uint32_t)(i / j->embd), r = (uint32_t)(i % j->embd);
        const void *drow = dsv4_tensor_expert_row(j->down, j->act_expert[a], r);
        if (dtmp) {
            drow = cpu_row_f32(j->down->type, drow, j->ff, dtmp);
            for (uint32_t p = j->start[a]; p < j->start[a + 1]; p++) {
                const uint32_t pair = j->pairs[p];
                const float *m = (const float *)(j->midq + (uint64_t)pair * j->mbytes);
                j->y[(uint64_t)pair * j->embd + r] = cpu_dot_exact(drow, m, j->ff);
            }
            continue;
        }
        for (uint32_t p = j->start[a]; p < j->start[a + 1]; p += MOE_DOT_X) {
            const int nx = j->start[a + 1] - p < MOE_DOT_X ? (int)(j->start[a + 1] - p) : MOE_DOT_X;
            const void *m[MOE_DOT_X];
            float yv[MOE_DOT_X];
            for (int q = 0; q < nx; q++) m[q] = j->midq + (uint64_t)j->pairs[p + q] * j->mbytes;
            j->dd(drow, m, nx, j->ff, yv);
            for (int q = 0; q < nx; q++) j->y[(uint64_t)j->pairs[p + q] * j->embd + r] = yv[q];
        }
    }
}

/* out: the slot sums (moe); slots: the slot rows themselves (moe_slots); one of the two. */
static dsv4_status moe_run(cpu_ctx *c, const dsv4_tensor *gate, const dsv4_tensor *up,
                           const dsv4_tensor *down, const float *x, uint32_t n, const int32_t *sel,
                           const float *weights, uint32_t k, float clamp, float *out, float *slots,
                           dsv4_error *err) {
    moe_job j;
    memset(&j, 0, sizeof(j));
    cpu_act_kind kup;
    cpu_dot_fn dup;
    if (!cpu_kernel_for(gate->type, &j.kin, &j.dgu, NULL) || !cpu_kernel_for(up->type, &kup, &dup, NULL) ||
        gate->type != up->type || !cpu_kernel_for(down->type, &j.kmid, &j.dd, NULL))
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED,
                         "moe: expert types %s/%s/%s are not supported (gate and up must match)",
                         dsv4_type_name(gate->type), dsv4_type_name(up->type), dsv4_type_name(down->type));
    const uint32_t n_expert = (uint32_t)gate->ne[2];
    j.gate = gate, j.up = up, j.down = down, j.k = k;
    j.in = (uint32_t)gate->ne[0], j.ff = (uint32_t)gate->ne[1], j.embd = (uint32_t)down->ne[1];
    if (up->ne[0] != j.in || up->ne[1] != j.ff || down->ne[0] != j.ff || up->ne[2] != n_expert ||
        down->ne[2] != n_expert)
        return dsv4_fail(err, DSV4_ERR_INVALID, "moe: expert tensors %s/%s/%s have mismatched shapes",
                         gate->name ? gate->name : "?", up->name ? up->name : "?",
                         down->name ? down->name : "?");
    j.clamp = clamp, j.clamp_on = clamp > 1.0e-6f;
    if (c->numerics == DSV4_NUMERICS_EXACT) {
        j.kin = j.kmid = CPU_ACT_F32; /* activations stay f32; rows are dequantized in the workers */
        j.rowbuf_n = 2 * (j.in > j.ff ? j.in : j.ff);
        j.rowbuf = cpu_scratch(c, CPU_SLOT_ACT, (size_t)dsv4_tp_threads(c->tp) * j.rowbuf_n * sizeof(float));
        if (!j.rowbuf) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory in moe");
    }
    j.xbytes = cpu_act_bytes(j.kin, j.in), j.mbytes = cpu_act_bytes(j.kmid, j.ff);

    const uint32_t sub = n < MOE_SUB ? n : MOE_SUB;
    const size_t npair = (size_t)sub * k;
    j.xq = cpu_scratch(c, CPU_SLOT_A, sub * j.xbytes);
    j.mid = cpu_scratch(c, CPU_SLOT_B, npair * j.ff * sizeof(float));
    j.midq = cpu_scratch(c, CPU_SLOT_C, npair * j.mbytes);
    j.y = cpu_scratch(c, CPU_SLOT_FLAT, npair * j.embd * sizeof(float));
    uint32_t *idx = cpu_scratch(c, CPU_SLOT_D, (npair + 2 * (size_t)n_expert + 2) * sizeof(uint32_t) * 2);
    if (!j.xq || !j.mid || !j.midq || !j.y || !idx)
        return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory in moe");
    uint32_t *count = idx;                       /* [n_expert + 1] */
    uint32_t *act_expert = count + n_expert + 1; /* [n_expert] */
    uint32_t *start = act_expert + n_expert;     /* [n_expert + 1] */
    uint32_t *pairs = start + n_expert + 1;      /* [npair] */

    for (uint32_t t0 = 0; t0 < n; t0 += sub) {
        const uint32_t nb = n - t0 < sub ? n - t0 : sub;
        const int32_t *s = sel + (uint64_t)t0 * k;
        for (uint32_t i = 0; i < nb * k; i++)
            if (s[i] < 0 || (uint32_t)s[i] >= n_expert)
                return dsv4_fail(err, DSV4_ERR_INVALID, "moe: selected expert %d of %u", s[i], n_expert);
        memset(count, 0, (n_expert + 1) * sizeof(uint32_t));
        for (uint32_t i = 0; i < nb * k; i++) count[s[i]]++;
        j.n_active = 0;
        uint32_t off = 0;
        for (uint32_t e = 0; e < n_expert; e++) {
            if (!count[e]) continue;
            act_expert[j.n_active] = e;
            start[j.n_active] = off;
            off += count[e];
            count[e] = start[j.n_active]; /* becomes the fill cursor */
            j.n_active++;
        }
        start[j.n_active] = off;
        for (uint32_t i = 0; i < nb * k; i++) pairs[count[s[i]]++] = i;
        j.act_expert = act_expert, j.start = start, j.pairs = pairs;
        j.x = x + (uint64_t)t0 * j.in;
        j.weights = weights + (uint64_t)t0 * k;

        dsv4_tp_run(c->tp, nb, 4, quant_x_worker, &j);
        dsv4_tp_run(c->tp, (uint64_t)j.n_active * j.ff, 8, gate_up_worker, &j);
        dsv4_tp_run(c->tp, (uint64_t)nb * k, 4, quant_mid_worker, &j);
        dsv4_tp_run(c->tp, (uint64_t)j.n_active * j.embd, 8, down_worker, &j);
        if (slots) {
            memcpy(slots + (uint64_t)t0 * k * j.embd, j.y, (size_t)nb * k * j.embd * sizeof(float));
            continue;
        }
        for (uint32_t t = 0; t < nb; t++) {
            float *o = out + (uint64_t)(t0 + t) * j.embd;
            for (uint32_t d = 0; d < j.embd; d++) {
                float acc = 0.0f; /* slots summed in order, as ds4 */
                for (uint32_t sl = 0; sl < k; sl++) acc += j.y[((uint64_t)t * k + sl) * j.embd + d];
                o[d] = acc;
            }
        }
    }
    return DSV4_OK;
}

dsv4_status cpu_moe(void *vctx, const dsv4_tensor *gate, const dsv4_tensor *up, const dsv4_tensor *down,
                    const float *x, uint32_t n, const int32_t *sel, const float *weights, uint32_t k,
                    float clamp, float *out, dsv4_error *err) {
    return moe_run(vctx, gate, up, down, x, n, sel, weights, k, clamp, out, NULL, err);
}

dsv4_status cpu_moe_slots(void *vctx, const dsv4_tensor *gate, const dsv4_tensor *up, const dsv4_tensor *down,
                          const float *x, uint32_t n, const int32_t *sel, const float *weights, uint32_t k,
                          float clamp, float *slots, dsv4_error *err) {
    return moe_run(vctx, gate, up, down, x, n, sel, weights, k, clamp, NULL, slots, err);
}

/* The products then the selection, in their order: the fused op's reference on every backend. */
dsv4_status cpu_matmuls_router(void *vctx, const dsv4_matmul_item *items, uint32_t n_items, uint32_t n,
                               uint32_t n_expert, uint32_t k, const dsv4_tensor *bias, float scale,
                               int32_t *sel, float *weights, dsv4_error *err) {
    if (n_items < 1 || items[0].n_out != n_expert)
        return dsv4_fail(err, DSV4_ERR_INVALID, "router_topk: the first product must give the %u logits",
                         n_expert);
    for (uint32_t i = 0; i < n_items; i++) {
        const dsv4_status st = cpu_matmul(vctx, items[i].w, items[i].row0, items[i].n_out, items[i].x,
                                          items[i].x_stride, n, items[i].y, items[i].y_stride, err);
        if (st != DSV4_OK) return st;
    }
    return cpu_router_select(vctx, items[0].y, n, n_expert, k, bias, NULL, NULL, scale, sel, weights, err);
}
