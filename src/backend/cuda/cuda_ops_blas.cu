/* The prefill products' cuBLAS path (cuda_gemm_blas.h): which products take it and the state it
 * needs (the handle, the per-tensor f16 check, scratch). Not bitwise the CPU; the gate:
 *   - DS4 numerics, not DSV4_CUDA_MATVEC=generic, not while a decode step is being recorded;
 *   - n >= DSV4_CUDA_BLAS_MIN_N tokens (default 256: below it the f16 copy of the weights costs
 *     more than the integer tensor-core kernel, which is bitwise the CPU, saves);
 *   - Q8_0 or F16 weights; DSV4_CUDA_BLAS=0 turns the path off, =q8 / =f16 keeps one type (read on
 *     every call);
 *   - the library found (cuda_blas.h) and a handle made on this device;
 *   - a Q8_0 tensor whose largest block scale keeps every element a finite f16 (every tensor is
 *     scanned at backend creation, cu_blas_prepare; one created with the path off is scanned on its
 *     first product here).
 * Anything else returns DSV4_ERR_UNSUPPORTED with nothing launched, and the caller runs its own
 * kernels. */
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "common/log.h"
#include "quant/quant.h"
}
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_blas.h"
#include "backend/cuda/cuda_gemm_blas.h"
#include "backend/cuda/cuda_gemm_q8_wg.h"

static uint32_t blas_min_n(void) {
    const char *v = getenv("DSV4_CUDA_BLAS_MIN_N");
    if (v && *v) {
        const long n = strtol(v, NULL, 10);
        return n < 1 ? 1u : (uint32_t)n;
    }
    return 256;
}

static bool blas_type_on(uint32_t type) {
    const char *v = getenv("DSV4_CUDA_BLAS");
    if (!v || !*v || !strcmp(v, "1")) return true;
    if (!strcmp(v, "q8")) return type == DSV4_TYPE_Q8_0;
    if (!strcmp(v, "f16")) return type == DSV4_TYPE_F16;
    return false;
}

static bool blas_ready(cuda_ctx *c) {
    if (c->blas_state == 0) {
        dsv4_error e;
        memset(&e, 0, sizeof e);
        c->blas_state = dsv4_cuda_blas_create(&c->blas, &e) == DSV4_OK ? 1 : -1;
        if (c->blas_state < 0)
            DSV4_LOGI("cuda%d: %s; prefill products run on the own kernels", c->device, e.msg);
        if (c->blas_state > 0 && cudaMalloc((void **)&c->d_blas_scan, sizeof(uint32_t)) != cudaSuccess) {
            cudaGetLastError();
            dsv4_cuda_blas_destroy(c->blas);
            c->blas = NULL;
            c->blas_state = -1;
        }
    }
    return c->blas_state > 0;
}

/* Is the exact warpgroup Q8_0 path on here (DS4 numerics, not generic, sm_90a image, not
 * DSV4_CUDA_Q8_WG=0)? Asked once per context. */
static bool q8wg_on(cuda_ctx *c) {
    if (c->q8wg_state == 0)
        c->q8wg_state = c->numerics == DSV4_NUMERICS_DS4 && !c->generic_only && dsv4_cuda_q8_wg_enabled() &&
                                dsv4_cuda_q8_wg_device_ok(c->caps.cc_major, c->caps.smem_per_block_optin)
                            ? 1
                            : -1;
    return c->q8wg_state > 0;
}
/* Does this Q8_0 layer matrix take the warpgroup path's prepared copy? */
static bool q8wg_tensor(const dsv4_tensor *t) {
    return t->type == DSV4_TYPE_Q8_0 && t->ne[0] % 64 == 0 && t->row_bytes == t->ne[0] / 32 * 34;
}

/* May this Q8_0 tensor's elements all become f16? One scan of its block scales (and one wait for
 * the device) the first time. */
static bool blas_weight_ok(cuda_ctx *c, const dsv4_tensor *w) {
    if (w->type != DSV4_TYPE_Q8_0) return true;
    cu_weight *rec = cu_weight_rec(c, w);
    if (!rec) return false;
    if (rec->f16_ok == 0) {
        dsv4_error e;
        memset(&e, 0, sizeof e);
        uint32_t bits = 0xffffu;
        const bool ok =
            cudaMemsetAsync(c->d_blas_scan, 0, sizeof(uint32_t), c->stream) == cudaSuccess &&
            dsv4_cuda_q8_0_max_d(rec->dev, rec->bytes / 34, c->d_blas_scan, c->stream, &e) == DSV4_OK &&
            cudaMemcpyAsync(&bits, c->d_blas_scan, sizeof bits, cudaMemcpyDeviceToHost, c->stream) ==
                cudaSuccess &&
            cudaStreamSynchronize(c->stream) == cudaSuccess;
        if (!ok) {
            cudaGetLastError();
            return false; /* try again next time */
        }
        c->n_sync[CU_SYNC_READ]++;
        rec->f16_ok = dsv4_cuda_gemm_blas_d_safe(bits) ? 1 : -1;
        rec->w16_exp = (int8_t)dsv4_cuda_gemm_blas_w_exp(bits);
    }
    return rec->f16_ok > 0;
}

/* A Q8_0 op's Sw and the f16 rows converted at creation (when there was room) from row0 on. */
static void blas_op_weights(dsv4_cuda_blas_op *op, const dsv4_tensor *t, const cu_weight *rec,
                            uint64_t row0) {
    op->w_exp = rec->w16_exp;
    if (t->type != DSV4_TYPE_Q8_0 || !rec->dev16) return;
    const uint64_t rows = rec->bytes / t->row_bytes;
    op->w16_cached = (const uint16_t *)rec->dev16 + row0 * t->ne[0];
    if (dsv4_cuda_q8_three_terms())
        op->w16_lo_cached = (const uint16_t *)rec->dev16 + (rows + row0) * t->ne[0];
}

/* One zero-input GEMM of n tokens per distinct (type, in, rows, groups) of the uploaded layers'
 * Q8_0 / F16 matrices (attn_output_a as the grouped product), through the path itself. */
static void blas_warm(cuda_ctx *c, const dsv4_model *m, uint32_t n) {
    enum { MAXSHAPES = 64 };
    dsv4_cuda_blas_op seen[MAXSHAPES];
    int ns = 0;
    const size_t per_layer = sizeof(dsv4_layer_weights) / sizeof(dsv4_tensor);
    for (uint32_t il = 0; il < m->cfg.n_layer && ns < MAXSHAPES; il++) {
        if (c->partial && (il < c->layer_first || il >= c->layer_end)) continue;
        const dsv4_tensor *lt = (const dsv4_tensor *)&m->layers[il];
        for (size_t i = 0; i < per_layer && ns < MAXSHAPES; i++) {
            const dsv4_tensor *t = &lt[i];
            if (!dsv4_tensor_present(t) || (t->type != DSV4_TYPE_Q8_0 && t->type != DSV4_TYPE_F16) ||
                t->ne[2] * t->ne[3] != 1)
                continue;
            const uint32_t g =
                t == &m->layers[il].attn_output_a && m->cfg.n_out_group > 1 ? m->cfg.n_out_group : 1;
            if (t->ne[1] % g) continue;
            const cu_weight *rec = cu_weight_rec(c, t);
            if (!rec || (t->type == DSV4_TYPE_Q8_0 && rec->f16_ok <= 0)) continue;
            dsv4_cuda_blas_op op = {t->type, rec->dev, t->row_bytes, t->ne[0], t->ne[1] / g, g,    NULL,
                                    0,       n,        NULL,         0,        NULL,         NULL, 0};
            blas_op_weights(&op, t, rec, 0);
            bool dup = false;
            for (int k = 0; k < ns && !dup; k++)
                dup = seen[k].type == op.type && seen[k].in == op.in && seen[k].rows == op.rows &&
                      seen[k].groups == op.groups && seen[k].row_bytes == op.row_bytes;
            if (!dup && dsv4_cuda_gemm_blas_ok(&op)) seen[ns++] = op;
        }
    }
    size_t xin = 0, yout = 0;
    for (int k = 0; k < ns; k++) {
        xin = xin > seen[k].in * seen[k].groups ? xin : seen[k].in * seen[k].groups;
        yout = yout > seen[k].rows * seen[k].groups ? yout : seen[k].rows * seen[k].groups;
    }
    float *x = NULL, *y = NULL;
    if (!ns || cudaMalloc((void **)&x, xin * n * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&y, yout * n * sizeof(float)) != cudaSuccess ||
        cudaMemsetAsync(x, 0, xin * n * sizeof(float), c->stream) != cudaSuccess) {
        if (x) cudaFree(x);
        cudaGetLastError();
        return;
    }
    dsv4_error e;
    memset(&e, 0, sizeof e);
    for (int k = 0; k < ns; k++) {
        dsv4_cuda_blas_op op = seen[k];
        op.x = x, op.x_stride = op.in * op.groups, op.y = y, op.y_stride = op.rows * op.groups;
        const size_t wb = dsv4_cuda_gemm_blas_w16_bytes(&op), xb = dsv4_cuda_gemm_blas_x16_bytes(&op);
        void *w16 = wb ? cu_scratch(c, CU_SLOT_PACK, wb, &e) : NULL,
             *x16 = cu_scratch(c, CU_SLOT_ACT, xb, &e);
        if ((wb && !w16) || !x16 ||
            dsv4_cuda_gemm_blas(c->blas, &op, w16, x16, true, c->stream, &e) != DSV4_OK)
            break;
    }
    cudaStreamSynchronize(c->stream);
    cudaFree(x);
    cudaFree(y);
    cudaGetLastError();
}

/* The prepared rows of every Q8_0 layer matrix the prefill products take, in one allocation made only
 * when at least W16_RESERVE bytes of device memory stay free after it; DSV4_CUDA_W16_CACHE=0 turns it
 * off. With the warpgroup path on (q8wg_on) a matrix with in % 64 == 0 gets its prepared copy (devq:
 * f16 codes and float scales, 2.125 bytes per value), any other one its f16 rows (dev16: 1.88 bytes per
 * Q8_0 byte, twice that with the lo terms), the same halves each chunk would convert again. The
 * output head (one token at a time in prefill) is left out. */
#define W16_RESERVE ((size_t)16 << 30)
static void blas_cache_f16(cuda_ctx *c, const dsv4_model *m) {
    const char *v = getenv("DSV4_CUDA_W16_CACHE");
    if ((v && !strcmp(v, "0")) || !m || c->w16_cache) return;
    const size_t per_layer = sizeof(dsv4_layer_weights) / sizeof(dsv4_tensor);
    const bool wg = q8wg_on(c);
    size_t need = 0, nq = 0;
    for (int pass = 0; pass < 2; pass++) {
        uint8_t *at = (uint8_t *)c->w16_cache;
        for (uint32_t il = 0; il < m->cfg.n_layer; il++) {
            if (c->partial && (il < c->layer_first || il >= c->layer_end)) continue;
            const dsv4_tensor *lt = (const dsv4_tensor *)&m->layers[il];
            for (size_t i = 0; i < per_layer; i++) {
                const dsv4_tensor *t = &lt[i];
                if (!dsv4_tensor_present(t) || t->type != DSV4_TYPE_Q8_0 || t->ne[0] % 32 ||
                    t->row_bytes != t->ne[0] / 32 * 34)
                    continue;
                cu_weight *rec = cu_weight_rec(c, t);
                if (!rec || rec->dev16 || rec->devq) continue;
                const uint64_t rows = rec->bytes / t->row_bytes;
                const bool q = wg && q8wg_tensor(t);
                if (!q && rec->f16_ok <= 0) continue;
                const bool lo = dsv4_cuda_q8_three_terms();
                const size_t half_bytes = (size_t)(rows * t->ne[0] * 2),
                             bytes = q ? dsv4_cuda_q8_wg_copy_bytes(rows, t->ne[0])
                                       : (half_bytes * (lo ? 2 : 1) + 255) & ~(size_t)255;
                if (pass == 0) {
                    need += bytes;
                    continue;
                }
                dsv4_error e;
                memset(&e, 0, sizeof e);
                if (q) {
                    if (dsv4_cuda_q8_wg_wconvert(rec->dev, t->row_bytes, t->ne[0], rows, at, c->stream, &e) !=
                        DSV4_OK)
                        continue; /* this one takes the cuBLAS path, converting per product */
                    rec->devq = at;
                    nq++;
                } else {
                    if (dsv4_cuda_gemm_blas_w16_convert(rec->dev, t->row_bytes, t->ne[0], rows, rec->w16_exp,
                                                        at, lo ? at + half_bytes : NULL, c->stream,
                                                        &e) != DSV4_OK)
                        continue; /* this one converts per product */
                    rec->dev16 = at;
                }
                at += bytes;
            }
        }
        if (pass == 0) {
            size_t free_b = 0, total_b = 0;
            if (!need || cudaMemGetInfo(&free_b, &total_b) != cudaSuccess || free_b < need + W16_RESERVE ||
                cudaMalloc(&c->w16_cache, need) != cudaSuccess) {
                cudaGetLastError();
                c->w16_cache = NULL;
                if (need)
                    DSV4_LOGI(
                        "cuda%d: prefill weights convert per chunk (prepared copies: %zu MiB, free %zu MiB)",
                        c->device, need >> 20, free_b >> 20);
                return;
            }
            c->w16_cache_bytes = need;
        }
    }
    cudaStreamSynchronize(c->stream);
    cudaGetLastError();
    DSV4_LOGI("cuda%d: prepared copies of the Q8_0 layer matrices for prefill: %zu MiB (%zu for the exact "
              "warpgroup products)",
              c->device, (size_t)(c->w16_cache_bytes >> 20), nq);
}

void cu_blas_prepare(cuda_ctx *c, const dsv4_model *m, uint32_t chunk) {
    const char *v = getenv("DSV4_CUDA_BLAS");
    if (c->numerics != DSV4_NUMERICS_DS4 || c->generic_only || (v && !strcmp(v, "0")) || !blas_ready(c))
        return;
    /* the first GEMM sets the library up (heuristics, kernels): 256^3 on zeroed scratch */
    dsv4_error e;
    memset(&e, 0, sizeof e);
    void *buf = cu_scratch(c, CU_SLOT_ACT, 3 * 256 * 256 * 2, &e);
    if (!buf || cudaMemsetAsync(buf, 0, 3 * 256 * 256 * 2, c->stream) != cudaSuccess ||
        dsv4_cuda_blas_gemm_f16(
            c->blas, c->stream, 256, 256, 256, buf, 256, 0, (uint8_t *)buf + 256 * 256 * 2, 256, 0,
            (float *)((uint8_t *)buf + 2 * 256 * 256 * 2), 256, 0, 1, 1.0f, 0, &e) != DSV4_OK) {
        cudaGetLastError();
        return;
    }
    /* every Q8_0 tensor's largest block scale, one device word each */
    size_t nq = 0;
    for (size_t i = 0; i < c->map_cap; i++) nq += c->map[i].host && c->map[i].type == DSV4_TYPE_Q8_0;
    uint32_t *d = NULL, *h = (uint32_t *)calloc(nq ? nq : 1, sizeof *h);
    bool ok = h && nq && cudaMalloc((void **)&d, nq * sizeof *d) == cudaSuccess &&
              cudaMemsetAsync(d, 0, nq * sizeof *d, c->stream) == cudaSuccess;
    for (size_t i = 0, k = 0; ok && i < c->map_cap; i++)
        if (c->map[i].host && c->map[i].type == DSV4_TYPE_Q8_0)
            ok = dsv4_cuda_q8_0_max_d(c->map[i].dev, c->map[i].bytes / 34, d + k++, c->stream, &e) == DSV4_OK;
    ok = ok && cudaMemcpyAsync(h, d, nq * sizeof *d, cudaMemcpyDeviceToHost, c->stream) == cudaSuccess &&
         cudaStreamSynchronize(c->stream) == cudaSuccess;
    for (size_t i = 0, k = 0; ok && i < c->map_cap; i++)
        if (c->map[i].host && c->map[i].type == DSV4_TYPE_Q8_0)
            c->map[i].f16_ok = dsv4_cuda_gemm_blas_d_safe(h[k]) ? 1 : -1,
            c->map[i].w16_exp = (int8_t)dsv4_cuda_gemm_blas_w_exp(h[k]), k++;
    if (d) cudaFree(d);
    free(h);
    cudaGetLastError();
    if (ok && nq) blas_cache_f16(c, m);
    if ((ok || nq == 0) && m && chunk >= blas_min_n()) blas_warm(c, m, chunk);
}

bool cu_prefill_inexact_ok(const cuda_ctx *c, uint32_t n) {
    return n >= blas_min_n() && c->numerics == DSV4_NUMERICS_DS4 && !c->generic_only && !c->step_capturing;
}
/* The path's gate for a product of n tokens whose shape `shape_ok` says the kernels take. */
static bool blas_takes(cuda_ctx *c, const dsv4_tensor *w, uint32_t n, bool shape_ok) {
    return cu_prefill_inexact_ok(c, n) && blas_type_on(w->type) && shape_ok && blas_ready(c) &&
           blas_weight_ok(c, w);
}
/* The product's status; cuBLAS refusing (DSV4_ERR_UNSUPPORTED: the conversions wrote scratch only)
 * turns the path off for this context. */
static dsv4_status blas_done(cuda_ctx *c, dsv4_status st, const dsv4_error *err) {
    if (st == DSV4_ERR_UNSUPPORTED) {
        DSV4_LOGW("cuda%d: %s; prefill products go back to the own kernels", c->device,
                  err ? err->msg : "cuBLAS failed");
        c->blas_state = -1;
    }
    return st;
}

/* A Q8_0 product on the exact warpgroup path (cuda_gemm_q8_wg.h) from the weight's prepared copy;
 * DSV4_ERR_UNSUPPORTED with nothing launched where it does not take it. */
static dsv4_status q8wg_matmul(cuda_ctx *c, const dsv4_tensor *w, const uint8_t *wslice, uint64_t rows,
                               uint32_t groups, const float *x, uint64_t x_stride, uint32_t n, float *y,
                               uint64_t y_stride, dsv4_error *err) {
    const cu_weight *rec = cu_weight_rec(c, w);
    if (!rec || !rec->devq || wslice < (const uint8_t *)rec->dev || n < blas_min_n() || c->step_capturing ||
        !blas_type_on(DSV4_TYPE_Q8_0) || !q8wg_on(c))
        return DSV4_ERR_UNSUPPORTED;
    const uint64_t in = w->ne[0], all = rec->bytes / w->row_bytes, L = in * groups;
    const uint64_t row0 = (uint64_t)(wslice - (const uint8_t *)rec->dev) / w->row_bytes;
    const size_t xb = dsv4_cuda_q8_wg_copy_bytes(n, L);
    dsv4_cuda_q8_wg_op op;
    memset(&op, 0, sizeof op);
    op.wq = (const uint16_t *)rec->devq + row0 * in;
    op.wd = (const float *)((const uint8_t *)rec->devq + dsv4_cuda_q8_wg_scales_offset(all, in)) +
            row0 * (in / 32);
    op.in = in, op.rows = rows, op.groups = groups, op.n = n, op.y = y, op.y_stride = y_stride;
    op.sm_count = (uint32_t)c->caps.sm_count;
    op.xq = (const uint16_t *)(uintptr_t)256, op.xd = (const float *)(uintptr_t)256; /* scratch is aligned */
    if (!dsv4_cuda_q8_wg_ok(&op)) return DSV4_ERR_UNSUPPORTED;
    dsv4_error e;
    memset(&e, 0, sizeof e);
    c->bx_valid = c->bx_valid && c->blas_share; /* outside a matmul_multi nothing is kept */
    uint8_t *xq = (uint8_t *)cu_scratch(c, CU_SLOT_ACT, xb, &e);
    if (!xq) {
        c->bx_valid = false;
        return DSV4_ERR_UNSUPPORTED;
    }
    op.xq = (const uint16_t *)xq, op.xd = (const float *)(xq + dsv4_cuda_q8_wg_scales_offset(n, L));
    const bool reuse = c->blas_share && c->bx_valid && c->bx_x == x && c->bx_stride == x_stride &&
                       c->bx_n == n && c->bx_width == L && c->bx_q8 == 2;
    c->bx_valid = false;
    dsv4_status st = reuse ? DSV4_OK : dsv4_cuda_q8_wg_xconvert(x, x_stride, L, n, xq, c->stream, err);
    if (st == DSV4_OK) st = dsv4_cuda_q8_wg_gemm(&op, c->stream, err);
    if (st != DSV4_OK) return st == DSV4_ERR_UNSUPPORTED ? DSV4_ERR_INVALID : st; /* launched: no retry */
    if (c->blas_share)
        c->bx_valid = true, c->bx_x = x, c->bx_stride = x_stride, c->bx_n = n, c->bx_width = L, c->bx_q8 = 2;
    c->q8wg_calls++, c->blas_shared += reuse;
    return DSV4_OK;
}

dsv4_status cu_matmul_blas(cuda_ctx *c, const dsv4_tensor *w, const uint8_t *wslice, uint64_t rows,
                           uint32_t groups, const float *x, uint64_t x_stride, uint32_t n, float *y,
                           uint64_t y_stride, dsv4_error *err) {
    if (w->type == DSV4_TYPE_Q8_0 && c->numerics == DSV4_NUMERICS_DS4 && !c->generic_only) {
        const dsv4_status sq = q8wg_matmul(c, w, wslice, rows, groups, x, x_stride, n, y, y_stride, err);
        if (sq != DSV4_ERR_UNSUPPORTED) return sq;
    }
    dsv4_cuda_blas_op op = {w->type, wslice, w->row_bytes, w->ne[0], rows, groups, x, x_stride,
                            n,       y,      y_stride,     NULL,     NULL, 0};
    c->bx_valid = c->bx_valid && c->blas_share; /* outside a matmul_multi nothing is kept */
    if (!blas_takes(c, w, n, dsv4_cuda_gemm_blas_ok(&op))) {
        c->bx_valid = false; /* the caller's kernels may write the slot */
        return DSV4_ERR_UNSUPPORTED;
    }
    if (w->type == DSV4_TYPE_Q8_0) {
        const cu_weight *rec = cu_weight_rec(c, w);
        if (!rec || wslice < (const uint8_t *)rec->dev) {
            c->bx_valid = false;
            return DSV4_ERR_UNSUPPORTED;
        }
        blas_op_weights(&op, w, rec, (uint64_t)(wslice - (const uint8_t *)rec->dev) / w->row_bytes);
    }
    const size_t wb = op.w16_cached ? 0 : dsv4_cuda_gemm_blas_w16_bytes(&op),
                 xb = dsv4_cuda_gemm_blas_x16_bytes(&op);
    dsv4_error e;
    memset(&e, 0, sizeof e);
    void *w16 = wb ? cu_scratch(c, CU_SLOT_PACK, wb, &e) : NULL;
    void *x16 = (!wb || w16) ? cu_scratch(c, CU_SLOT_ACT, xb, &e) : NULL;
    if ((wb && !w16) || !x16) { /* no room: the own kernels need less */
        c->bx_valid = false;
        return DSV4_ERR_UNSUPPORTED;
    }
    const uint64_t width = op.in * op.groups;
    const int q8 = w->type == DSV4_TYPE_Q8_0;
    const bool reuse = c->blas_share && c->bx_valid && c->bx_x == x && c->bx_stride == x_stride &&
                       c->bx_n == n && c->bx_width == width && c->bx_q8 == q8;
    const dsv4_status st = dsv4_cuda_gemm_blas(c->blas, &op, w16, x16, !reuse, c->stream, err);
    c->bx_valid = st == DSV4_OK && c->blas_share;
    if (c->bx_valid) c->bx_x = x, c->bx_stride = x_stride, c->bx_n = n, c->bx_width = width, c->bx_q8 = q8;
    if (st == DSV4_OK) c->blas_calls++, c->blas_shared += reuse;
    return blas_done(c, st, err);
}

/* The HC mix of a prefill chunk: y = w . rmsnorm(x) (no norm weight) with the rmsnorm folded into the
 * f16 conversion of the operand (dsv4_cuda_gemm_blas_rms): the same bytes as cu_rms_rows into a buffer
 * and then cu_matmul_blas, without the f32 rows in between. The same gate as cu_matmul_blas; anything
 * else DSV4_ERR_UNSUPPORTED with nothing launched (the caller runs the pair). */
dsv4_status cu_matmul_blas_rms(cuda_ctx *c, const dsv4_tensor *w, uint64_t rows, const float *x,
                               uint64_t width, uint32_t n, float eps, float *y, uint64_t y_stride,
                               dsv4_error *err) {
    const char *fold = getenv("DSV4_CUDA_HC_MIX_FOLD"); /* =0: the rmsnorm then the product */
    if (w->type != DSV4_TYPE_F16 || w->ne[0] != width || (fold && !strcmp(fold, "0")))
        return DSV4_ERR_UNSUPPORTED;
    const uint8_t *wd = (const uint8_t *)cu_weight_dev(c, w, err);
    if (!wd) return DSV4_ERR_INVALID;
    const dsv4_cuda_blas_op op = {w->type, wd, w->row_bytes, width, rows, 1, x, width,
                                  n,       y,  y_stride,     NULL,  NULL, 0};
    if (!blas_takes(c, w, n, dsv4_cuda_gemm_blas_rms_ok(&op))) return DSV4_ERR_UNSUPPORTED;
    dsv4_error e;
    memset(&e, 0, sizeof e);
    void *x16 = cu_scratch(c, CU_SLOT_ACT, dsv4_cuda_gemm_blas_x16_bytes(&op), &e);
    if (!x16) return DSV4_ERR_UNSUPPORTED;
    c->bx_valid = false; /* the slot now holds this operand, which no other product shares */
    const dsv4_status st = dsv4_cuda_gemm_blas_rms(c->blas, &op, eps, x16, c->stream, err);
    if (st == DSV4_OK) c->blas_calls++, c->hc_mix_folded++;
    return blas_done(c, st, err);
}
