/* Single-row kernels of the CPU reference. Float evaluation order follows ds4's CPU path
 * (spec model-attention-hc.md), so results are reproducible bit for bit. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"

float cpu_sigmoid_stable(float x) {
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    const float e = expf(x);
    return e / (1.0f + e);
}

float cpu_silu(float x) { return x * cpu_sigmoid_stable(x); }

float cpu_softplus(float x) {
    if (x > 20.0f) return x;
    if (x < -20.0f) return expf(x);
    return log1pf(expf(x));
}

void cpu_rmsnorm_row(const float *x, const float *w, uint64_t n, float eps, float *y) {
    double ss = 0.0;
    for (uint64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float s = 1.0f / sqrtf((float)(ss / (double)n) + eps);
    if (w) {
        for (uint64_t i = 0; i < n; i++) y[i] = x[i] * s * w[i];
    } else {
        for (uint64_t i = 0; i < n; i++) y[i] = x[i] * s;
    }
}

/* YaRN ramp in pair units (i0 is the even dim index, as ds4/ggml pass it). */
static float rope_ramp(float lo, float hi, uint32_t i0) {
    const float y = ((float)(i0 / 2) - lo) / fmaxf(0.001f, hi - lo);
    return 1.0f - fminf(1.0f, fmaxf(0.0f, y));
}

void cpu_rope_thetas(const dsv4_rope *r, uint32_t pos, float *thetas, float *mscale_out) {
    /* theta_extrap is a running float product (ds4 CPU), not pos * powf(base, -2k/n_rot) as the
     * GPU kernels compute it; the two differ in the last bits. */
    const float theta_scale = powf(r->freq_base, -2.0f / (float)r->n_rot);
    float theta_extrap = (float)pos;
    float mscale = r->attn_factor;
    for (uint32_t i = 0; i < r->n_rot; i += 2) {
        const float theta_interp = r->freq_scale * theta_extrap;
        float theta = theta_interp;
        mscale = r->attn_factor;
        if (r->ext_factor != 0.0f) {
            const float ramp_mix = rope_ramp(r->corr_lo, r->corr_hi, i) * r->ext_factor;
            theta = theta_interp * (1.0f - ramp_mix) + theta_extrap * ramp_mix;
            mscale *= 1.0f + 0.1f * logf(1.0f / r->freq_scale);
        }
        thetas[i / 2] = theta;
        theta_extrap *= theta_scale;
    }
    if (mscale_out) *mscale_out = mscale;
}

void cpu_rope_row(float *x, uint32_t n_head, uint32_t head_dim, uint32_t pos, const dsv4_rope *r,
                  bool inverse) {
    float theta[256];
    float cs[256], sn[256];
    float mscale = 1.0f;
    const uint32_t half = r->n_rot / 2;
    cpu_rope_thetas(r, pos, theta, &mscale);
    const float sign = inverse ? -1.0f : 1.0f;
    for (uint32_t k = 0; k < half; k++) {
        cs[k] = cosf(theta[k]) * mscale;
        sn[k] = sign * sinf(theta[k]) * mscale;
    }
    const uint32_t nope = head_dim - r->n_rot;
    for (uint32_t h = 0; h < n_head; h++) {
        float *t = x + (uint64_t)h * head_dim + nope;
        for (uint32_t k = 0; k < half; k++) {
            const float x0 = t[2 * k], x1 = t[2 * k + 1];
            t[2 * k] = x0 * cs[k] - x1 * sn[k];
            t[2 * k + 1] = x0 * sn[k] + x1 * cs[k];
        }
    }
}

void cpu_hc_split(const float *mix, const float *scale, const float *base, uint32_t n_hc, uint32_t iters,
                  float eps, float *out) {
    /* Combine matrix C[r][c] at flat index r*n_hc + c (r = source stream, c = destination):
     * row softmax over c (+eps), column normalisation, then iters-1 row/column passes. */
    for (uint32_t i = 0; i < n_hc; i++) {
        const float z = mix[i] * scale[0] + base[i];
        out[i] = 1.0f / (1.0f + expf(-z)) + eps;
    }
    for (uint32_t i = 0; i < n_hc; i++) {
        const uint32_t o = n_hc + i;
        const float z = mix[o] * scale[1] + base[o];
        out[o] = 2.0f / (1.0f + expf(-z));
    }
    float *c = out + 2 * n_hc;
    const float *m = mix + 2 * n_hc;
    const float *b = base + 2 * n_hc;
    for (uint32_t r = 0; r < n_hc; r++) {
        float mx = CPU_NEG_INF;
        for (uint32_t j = 0; j < n_hc; j++) {
            const float v = m[r * n_hc + j] * scale[2] + b[r * n_hc + j];
            c[r * n_hc + j] = v;
            if (v > mx) mx = v;
        }
        float sum = 0.0f;
        for (uint32_t j = 0; j < n_hc; j++) {
            const float v = expf(c[r * n_hc + j] - mx);
            c[r * n_hc + j] = v;
            sum += v;
        }
        const float inv = 1.0f / sum;
        for (uint32_t j = 0; j < n_hc; j++) c[r * n_hc + j] = c[r * n_hc + j] * inv + eps;
    }
    for (uint32_t it = 0; it < iters; it++) {
        if (it > 0) { /* row pass (the first row normalisation is the softmax above) */
            for (uint32_t r = 0; r < n_hc; r++) {
                float sum = 0.0f;
                for (uint32_t j = 0; j < n_hc; j++) sum += c[r * n_hc + j];
                const float inv = 1.0f / (sum + eps);
                for (uint32_t j = 0; j < n_hc; j++) c[r * n_hc + j] *= inv;
            }
        }
        for (uint32_t j = 0; j < n_hc; j++) {
            float sum = 0.0f;
            for (uint32_t r = 0; r < n_hc; r++) sum += c[r * n_hc + j];
            const float inv = 1.0f / (sum + eps);
            for (uint32_t r = 0; r < n_hc; r++) c[r * n_hc + j] *= inv;
        }
    }
}

static float dot_f32_seq(const float *a, const float *b, uint32_t n) {
    float acc = 0.0f;
    for (uint32_t i = 0; i < n; i++) acc += a[i] * b[i];
    return acc;
}

void cpu_attention_head(const float *q, uint32_t head_dim, const float *const *rows, uint32_t n_rows,
                        float sink, float kq_scale, float *score, float *out) {
    float mx = sink;
    for (uint32_t r = 0; r < n_rows; r++) {
        score[r] = dot_f32_seq(q, rows[r], head_dim) * kq_scale;
        if (score[r] > mx) mx = score[r];
    }
    memset(out, 0, (size_t)head_dim * sizeof(float));
    float den = expf(sink - mx); /* the sink is a logit with no value */
    for (uint32_t r = 0; r < n_rows; r++) {
        const float w = expf(score[r] - mx);
        den += w;
        const float *v = rows[r];
        for (uint32_t i = 0; i < head_dim; i++) out[i] += w * v[i];
    }
    const float inv = 1.0f / den;
    for (uint32_t i = 0; i < head_dim; i++) out[i] *= inv;
}

void cpu_compressor_pool(const float *skv, const float *ssc, uint32_t d_c, uint32_t ratio, float *out) {
    cpu_compressor_pool_dims(skv, ssc, d_c, ratio, 0, d_c, out);
}

void cpu_compressor_pool_dims(const float *skv, const float *ssc, uint32_t d_c, uint32_t ratio, uint32_t j0,
                              uint32_t j1, float *out) {
    const uint32_t coff = ratio == 4 ? 2u : 1u;
    const uint64_t width = (uint64_t)coff * d_c;
    for (uint32_t j = j0; j < j1; j++) {
        float mx = CPU_NEG_INF;
        if (ratio == 4) {
            /* lane 0 of the previous window (rows 0..3), lane 1 of the current one (rows 4..7) */
            for (uint32_t r = 0; r < 4; r++) {
                const float sp = ssc[r * width + j];
                const float sc = ssc[(4 + r) * width + d_c + j];
                if (sp > mx) mx = sp;
                if (sc > mx) mx = sc;
            }
        } else {
            for (uint32_t r = 0; r < ratio; r++) {
                const float s = ssc[r * width + j];
                if (s > mx) mx = s;
            }
        }
        if (mx <= CPU_NEG_INF * 0.5f) {
            out[j] = 0.0f;
            continue;
        }
        float den = 0.0f, sum = 0.0f;
        if (ratio == 4) {
            for (uint32_t r = 0; r < 4; r++) {
                const float wp = expf(ssc[r * width + j] - mx);
                const float wc = expf(ssc[(4 + r) * width + d_c + j] - mx);
                den += wp + wc;
                sum += wp * skv[r * width + j];
                sum += wc * skv[(4 + r) * width + d_c + j];
            }
        } else {
            for (uint32_t r = 0; r < ratio; r++) {
                const float w = expf(ssc[r * width + j] - mx);
                den += w;
                sum += w * skv[r * width + j];
            }
        }
        out[j] = den > 0.0f ? sum / den : 0.0f;
    }
}

int cpu_cmp_i32(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

float cpu_indexer_score(const float *k, const float *q, const float *ws, uint32_t n_head, uint32_t head_dim) {
    float s = 0.0f;
    for (uint32_t h = 0; h < n_head; h++) {
        const float *qh = q + (uint64_t)h * head_dim;
        float dot = 0.0f;
        for (uint32_t d = 0; d < head_dim; d++) dot += k[d] * qh[d];
        if (dot < 0.0f) dot = 0.0f;
        s += dot * ws[h];
    }
    return s;
}

void cpu_topk_desc(const float *score, uint32_t n, uint32_t k, int32_t *idx) {
    for (uint32_t i = 0; i < k; i++) idx[i] = -1;
    for (uint32_t i = 0; i < n; i++) {
        for (uint32_t j = 0; j < k; j++) {
            if (idx[j] < 0 || score[i] > score[idx[j]]) {
                for (uint32_t m = k - 1; m > j; m--) idx[m] = idx[m - 1];
                idx[j] = (int32_t)i;
                break;
            }
        }
    }
}
