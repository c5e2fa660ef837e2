/* Dense ops: RMSNorm, matmul with ds4's per-type activation formats, add, SwiGLU. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "quant/quant.h"

/* ---- matmul ---- */

bool cpu_supports_weight_type(void *ctx, uint32_t type) {
    (void)ctx;
    cpu_act_kind k;
    cpu_dot_fn d;
    return cpu_kernel_for(type, &k, &d, NULL);
}

typedef struct {
    cpu_act_kind kind;
    const float *x;
    uint64_t x_stride, in;
    void *act;
    size_t act_bytes;
} quant_job;

static void quant_worker(void *arg, uint64_t t0, uint64_t t1, uint32_t th) {
    (void)th;
    quant_job *j = arg;
    for (uint64_t t = t0; t < t1; t++) {
        void *dst = (uint8_t *)j->act + t * j->act_bytes;
        cpu_act_quant_row(j->kind, j->x + t * j->x_stride, dst, j->in);
    }
}

/* Quantize n activation rows for `kind` into scratch; for f32 returns NULL (use x directly). */
static dsv4_status quantize_acts(cpu_ctx *c, cpu_act_kind kind, const float *x, uint64_t x_stride,
                                 uint64_t in, uint32_t n, int slot, void **out, size_t *row_bytes,
                                 dsv4_error *err) {
    *out = NULL;
    /* f32 activations are read in place: no buffer, no row size */
    if (kind == CPU_ACT_F32) {
        *row_bytes = 0;
        return DSV4_OK;
    }
    *row_bytes = cpu_act_bytes(kind, in);
    void *act = cpu_scratch(c, slot, *row_bytes * n);
    if (!act) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory for %u activation rows", n);
    quant_job j = {kind, x, x_stride, in, act, *row_bytes};
    dsv4_tp_run(c->tp, n, 4, quant_worker, &j);
    *out = act;
    return DSV4_OK;
}

typedef struct {
    const dsv4_tensor *w;
    uint64_t row0, in;
    cpu_dot_fn dot;
    const float *x;
    uint64_t x_stride;
    const uint8_t *act;
    size_t act_bytes;
    uint32_t n;
    float *y;
    uint64_t y_stride;
    float *rowbuf; /* EXACT: per thread `in` floats for the dequantized row; NULL in DS4 mode */
} matmul_job;

#define MM_ROW_TILE 8
#define MM_TOK_TILE 32
#define MM_DOT_X 8 /* activation rows per multi-row dot call */

/* EXACT numerics: each weight row dequantized once, dotted with the f32 rows in double. */
static void matmul_exact_worker(void *arg, uint64_t o0, uint64_t o1, uint32_t th) {
    const matmul_job *j = arg;
    float *tmp = j->rowbuf + (uint64_t)th * j->in;
    for (uint64_t o = o0; o < o1; o++) {
        const float *wrow = cpu_row_f32(j->w->type, dsv4_tensor_row(j->w, j->row0 + o), j->in, tmp);
        for (uint32_t t = 0; t < j->n; t++)
            j->y[t * j->y_stride + o] = cpu_dot_exact(wrow, j->x + t * j->x_stride, j->in);
    }
}

static void matmul_worker(void *arg, uint64_t o0, uint64_t o1, uint32_t th) {
    (void)th;
    const matmul_job *j = arg;
    for (uint64_t ob = o0; ob < o1; ob += MM_ROW_TILE) {
        const uint64_t oe = ob + MM_ROW_TILE < o1 ? ob + MM_ROW_TILE : o1;
        for (uint32_t tb = 0; tb < j->n; tb += MM_TOK_TILE) {
            const uint32_t te = tb + MM_TOK_TILE < j->n ? tb + MM_TOK_TILE : j->n;
            for (uint64_t o = ob; o < oe; o++) {
                const void *wrow = dsv4_tensor_row(j->w, j->row0 + o);
                /* up to MM_DOT_X tokens per call share the weight row's loads and decoding */
                for (uint32_t t = tb; t < te; t += MM_DOT_X) {
                    const int nx = te - t < MM_DOT_X ? (int)(te - t) : MM_DOT_X;
                    const void *xa[MM_DOT_X];
                    float r[MM_DOT_X];
                    for (int i = 0; i < nx; i++)
                        xa[i] = j->act ? (const void *)(j->act + (t + i) * j->act_bytes)
                                       : (const void *)(j->x + (t + i) * j->x_stride);
                    j->dot(wrow, xa, nx, (int64_t)j->in, r);
                    for (int i = 0; i < nx; i++) j->y[(t + i) * j->y_stride + o] = r[i];
                }
            }
        }
    }
}

dsv4_status cpu_matmul(void *vctx, const dsv4_tensor *w, uint64_t row0, uint64_t n_out, const float *x,
                       uint64_t x_stride, uint32_t n, float *y, uint64_t y_stride, dsv4_error *err) {
    cpu_ctx *c = vctx;
    cpu_act_kind kind;
    cpu_dot_fn dot;
    uint32_t block;
    if (!cpu_kernel_for(w->type, &kind, &dot, &block))
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED,
                         "matmul: tensor %s has type %s, which the CPU backend cannot multiply",
                         w->name ? w->name : "?", dsv4_type_name(w->type));
    const uint64_t in = w->ne[0];
    const uint64_t rows = w->ne[1] * w->ne[2] * w->ne[3];
    if (in % block != 0 || row0 + n_out > rows)
        return dsv4_fail(err, DSV4_ERR_INVALID,
                         "matmul: rows [%llu, %llu) of tensor %s (%llu x %llu) out of range",
                         (unsigned long long)row0, (unsigned long long)(row0 + n_out),
                         w->name ? w->name : "?", (unsigned long long)in, (unsigned long long)rows);
    if (n == 0 || n_out == 0) return DSV4_OK;
    /* enough rows per thread that waking a helper pays off */
    uint64_t min_rows = (uint64_t)(65536 / ((in ? in : 1) * n)) + 1;
    if (c->numerics == DSV4_NUMERICS_EXACT) {
        float *rowbuf = cpu_scratch(c, CPU_SLOT_ACT, (size_t)dsv4_tp_threads(c->tp) * in * sizeof(float));
        if (!rowbuf)
            return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory for dequantized rows of %llu",
                             (unsigned long long)in);
        matmul_job j = {w, row0, in, NULL, x, x_stride, NULL, 0, n, y, y_stride, rowbuf};
        dsv4_tp_run(c->tp, n_out, min_rows, matmul_exact_worker, &j);
        return DSV4_OK;
    }
    void *act;
    size_t act_bytes;
    dsv4_status st = quantize_acts(c, kind, x, x_stride, in, n, CPU_SLOT_ACT, &act, &act_bytes, err);
    if (st != DSV4_OK) return st;
    matmul_job j = {w, row0, in, dot, x, x_stride, act, act_bytes, n, y, y_stride, NULL};
    dsv4_tp_run(c->tp, n_out, min_rows, matmul_worker, &j);
    return DSV4_OK;
}

/* ---- rmsnorm ---- */

typedef struct {
    const float *x, *w;
    uint32_t width;
    float eps;
    float *y;
} rms_job;

static void rms_worker(void *arg, uint64_t r0, uint64_t r1, uint32_t th) {
    (void)th;
    const rms_job *j = arg;
    for (uint64_t r = r0; r < r1; r++)
        cpu_rmsnorm_row(j->x + r * j->width, j->w, j->width, j->eps, j->y + r * j->width);
}

dsv4_status cpu_rmsnorm(void *vctx, const float *x, const dsv4_tensor *w, uint32_t n_rows, uint32_t width,
                        float eps, float *y, dsv4_error *err) {
    cpu_ctx *c = vctx;
    const float *wv = NULL;
    if (w) {
        if (w->ne[0] != width)
            return dsv4_fail(err, DSV4_ERR_INVALID, "rmsnorm: weight %s has %llu values, rows have %u",
                             w->name ? w->name : "?", (unsigned long long)w->ne[0], width);
        float *tmp = cpu_scratch(c, CPU_SLOT_VEC, (size_t)width * sizeof(float));
        if (!tmp) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory in rmsnorm");
        wv = cpu_vec_f32(w, tmp, width);
        if (!wv)
            return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "rmsnorm: cannot read weight %s of type %s",
                             w->name ? w->name : "?", dsv4_type_name(w->type));
    }
    rms_job j = {x, wv, width, eps, y};
    dsv4_tp_run(c->tp, n_rows, 1 + 16384 / (width ? width : 1), rms_worker, &j);
    return DSV4_OK;
}

dsv4_status cpu_add(void *ctx, const float *a, const float *b, size_t n, float *out, dsv4_error *err) {
    (void)ctx, (void)err;
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
    return DSV4_OK;
}

dsv4_status cpu_swiglu(void *ctx, const float *g, const float *u, size_t n, float clamp, float *out,
                       dsv4_error *err) {
    (void)ctx, (void)err;
    for (size_t i = 0; i < n; i++) {
        float gv = g[i], uv = u[i];
        if (clamp > 1.0e-6f) {
            if (gv > clamp) gv = clamp; /* the gate is clamped from above only */
            if (uv > clamp) uv = clamp;
            if (uv < -clamp) uv = -clamp;
        }
        out[i] = cpu_silu(gv) * uv;
    }
    return DSV4_OK;
}
