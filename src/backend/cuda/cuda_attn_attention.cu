/* Sink attention of one query on the device (spec model-attention-hc.md §4.6; CPU:
 * cpu_attention + cpu_attention_head). One block per head.
 *
 * Pass 1: scores of a tile of rows (one row per thread): the block stages 32 dims of every row
 * of the tile in shared memory (coalesced loads), then each thread continues its row's dot
 * q.k over those dims in ascending d, so each dot is the CPU's sequential dot_f32_seq; times
 * kq_scale; the block max joins the sink as the CPU's mx does.
 * Pass 2: weights expf(s - M) per row; then one thread per output dim walks the rows in the
 * CPU order (raw oldest -> newest, then the compressed rows) accumulating w*v and the
 * denominator (started at the sink term), and scales by 1/den. The scores stay in shared memory
 * when they fit (about 38K rows of 512 dims on an H200), else they are recomputed, identically,
 * chunk by chunk in pass 2.
 *
 * Parity: every float operation is the CPU's, in its order and without contraction; expf is
 * rounded from double, so outputs are bitwise equal to the CPU's unless glibc's expf is off by an
 * ulp on a weight (then ~1e-7 relative).
 * Selected rows out of range (sel[i] >= n_comp, which the CPU rejects) get weight 0.
 * KV rows are F32 or F16 (kv_type); a row reference carries its type in bit 0 (set: F16; rows
 * are at least 2-byte aligned), since a chunk token mixes F32 chunk rows and ring rows. An F16
 * element reads as __half2float (exact): the float operations are the same as for F32 rows. */
#include "backend/cuda/cuda_attn_common.cuh"

namespace {

constexpr uint32_t DCH = 32; /* dims of a row tile staged at once */

/* A row reference: the row's address, bit 0 set for an F16 row; 0 for a row out of range. */
typedef uintptr_t rowref;

__device__ __forceinline__ float row_ld(rowref p, uint32_t i) {
    if (p & 1u) return __half2float(((const __half *)(p - 1u))[i]);
    return ((const float *)p)[i];
}

struct attn_args {
    const float *q;
    const unsigned char *raw, *comp; /* KV rows of kv_type */
    const int32_t *sel;
    const float *sinks;
    float *out;
    uint32_t head_dim, raw_cap, raw_start, n_raw, n_comp, n_rows, chunk;
    float kq_scale;
    bool vec4; /* head_dim % 4 == 0 and raw, comp (and kv) 16-byte aligned */
    bool half; /* raw and comp rows are F16 */
    /* attention_chunk (kv != nullptr): query blockIdx.y at position pos0 + blockIdx.y; raw
     * positions >= pos0 come from kv rows; n_raw, raw_start, n_comp, sel, n_rows are per block */
    const float *kv;
    uint32_t pos0, ratio, n_sel;
};

/* The block's own arguments: a chunk block derives its token's window, rows and pointers. */
__device__ __forceinline__ attn_args block_args(const attn_args &a0) {
    attn_args a = a0;
    if (!a.kv) return a;
    const uint32_t t = blockIdx.y, p = a.pos0 + t;
    a.n_raw = p + 1 < a.raw_cap ? p + 1 : a.raw_cap;
    a.raw_start = p + 1 - a.n_raw; /* a position here (row_ptr takes it modulo raw_cap) */
    a.n_comp = a.ratio ? (p + 1) / a.ratio : 0;
    const bool use_sel = a.sel && a.n_comp > a.n_sel;
    a.sel = use_sel ? a.sel + (uint64_t)t * a.n_sel : nullptr;
    a.n_rows = a.n_raw + (use_sel ? a.n_sel : a.n_comp);
    const uint64_t qo = (uint64_t)t * gridDim.x * a.head_dim;
    a.q += qo;
    a.out += qo;
    return a;
}

__device__ __forceinline__ rowref kv_ref(const attn_args &a, const unsigned char *base, uint64_t row) {
    return (rowref)(base + row * a.head_dim * (a.half ? 2u : 4u)) | (a.half ? 1u : 0u);
}

__device__ __forceinline__ rowref row_ptr(const attn_args &a, uint32_t r) {
    if (r < a.n_raw && a.kv) {
        const uint32_t pos = a.raw_start + r;
        if (pos >= a.pos0) return (rowref)(a.kv + (uint64_t)(pos - a.pos0) * a.head_dim);
        return kv_ref(a, a.raw, pos % a.raw_cap);
    }
    if (r < a.n_raw) return kv_ref(a, a.raw, (a.raw_start + r) % a.raw_cap);
    const uint32_t c = r - a.n_raw;
    const int64_t i = a.sel ? (int64_t)a.sel[c] : (int64_t)c;
    if (i < 0 || i >= (int64_t)a.n_comp) return 0;
    return kv_ref(a, a.comp, (uint64_t)i);
}

/* 4 elements of row p from d (16-byte F32 or 8-byte F16 aligned) */
__device__ __forceinline__ float4 row_ld4(rowref p, uint32_t d) {
    if (p & 1u) {
        const uint2 u = *(const uint2 *)((const __half *)(p - 1u) + d);
        const float2 lo = __half22float2(*(const __half2 *)&u.x), hi = __half22float2(*(const __half2 *)&u.y);
        return make_float4(lo.x, lo.y, hi.x, hi.y);
    }
    return *(const float4 *)((const float *)p + d);
}

struct attn_smem {
    rowref *rowp; /* blockDim.x row references of the tile */
    float *qs;    /* head_dim */
    float *tile;  /* blockDim.x x (DCH + 1) */
    float *ws;    /* chunk scores / weights */
};

/* Score of row t0 + threadIdx.x for threads below nr (-inf for a row out of range); every
 * thread of the block must call it. */
__device__ float tile_score(const attn_args &a, const attn_smem &s, uint32_t t0, uint32_t nr) {
    const uint32_t tid = threadIdx.x, T = blockDim.x;
    __syncthreads(); /* the previous tile is consumed */
    for (uint32_t rr = tid; rr < nr; rr += T) s.rowp[rr] = row_ptr(a, t0 + rr);
    __syncthreads();
    float acc = 0.0f;
    for (uint32_t d0 = 0; d0 < a.head_dim; d0 += DCH) {
        const uint32_t dn = a.head_dim - d0 < DCH ? a.head_dim - d0 : DCH;
        if (a.vec4) { /* 16-byte loads; head_dim % 4 == 0 so dn is too */
#pragma unroll 4
            for (uint32_t e = tid; e < nr * (DCH / 4); e += T) {
                const uint32_t rr = e / (DCH / 4), dd = e % (DCH / 4) * 4;
                const rowref p = s.rowp[rr];
                const float4 v = p && dd < dn ? row_ld4(p, d0 + dd) : make_float4(0, 0, 0, 0);
                float *t = s.tile + rr * (DCH + 1) + dd;
                t[0] = v.x;
                t[1] = v.y;
                t[2] = v.z;
                t[3] = v.w;
            }
        } else {
#pragma unroll 8
            for (uint32_t e = tid; e < nr * DCH; e += T) {
                const uint32_t rr = e / DCH, dd = e % DCH;
                const rowref p = s.rowp[rr];
                s.tile[rr * (DCH + 1) + dd] = p && dd < dn ? row_ld(p, d0 + dd) : 0.0f;
            }
        }
        __syncthreads();
        if (tid < nr) {
            const float *t = s.tile + tid * (DCH + 1);
            for (uint32_t dd = 0; dd < dn; dd++) acc = __fadd_rn(acc, __fmul_rn(s.qs[d0 + dd], t[dd]));
        }
        __syncthreads();
    }
    return tid < nr && s.rowp[tid] ? __fmul_rn(acc, a.kq_scale) : -INFINITY;
}

__global__ void attention_kernel(attn_args a0) {
    const attn_args a = block_args(a0);
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ float red[32];
    const uint32_t h = blockIdx.x, tid = threadIdx.x, T = blockDim.x;
    attn_smem s;
    s.rowp = (rowref *)smem_raw;
    s.qs = (float *)(smem_raw + (size_t)T * sizeof(rowref));
    s.tile = s.qs + a.head_dim;
    s.ws = s.tile + (size_t)T * (DCH + 1);
    const float *qh = a.q + (uint64_t)h * a.head_dim;
    for (uint32_t i = tid; i < a.head_dim; i += T) s.qs[i] = qh[i];
    const bool cached = a.n_rows <= a.chunk;
    const float sink = a.sinks[h];

    /* pass 1: scores and their max (a max is exact in any order) */
    float mx_local = -INFINITY;
    for (uint32_t t0 = 0; t0 < a.n_rows; t0 += T) {
        const uint32_t nr = a.n_rows - t0 < T ? a.n_rows - t0 : T;
        const float sv = tile_score(a, s, t0, nr);
        if (tid < nr) {
            if (cached) s.ws[t0 + tid] = sv;
            mx_local = fmaxf(mx_local, sv);
        }
    }
    mx_local = warp_max(mx_local);
    if (tid % 32 == 0) red[tid / 32] = mx_local;
    __syncthreads();
    float mx_rows = -INFINITY;
    for (uint32_t w = 0; w < (T + 31) / 32; w++) mx_rows = fmaxf(mx_rows, red[w]);
    const float mx = mx_rows > sink ? mx_rows : sink;

    /* pass 2: weights, then one thread per dim in row order */
    const float den0 = attn_expf(__fsub_rn(sink, mx));
    if (cached) { /* each thread rewrites the scores it wrote */
        for (uint32_t r = tid; r < a.n_rows; r += T) s.ws[r] = attn_expf(__fsub_rn(s.ws[r], mx));
        __syncthreads();
    }
    for (uint32_t i0 = 0; i0 < a.head_dim; i0 += T) {
        const uint32_t i = i0 + tid;
        const bool mine = i < a.head_dim;
        float acc = 0.0f, den = den0;
        for (uint32_t c0 = 0; c0 < a.n_rows; c0 += a.chunk) {
            const uint32_t cn = a.n_rows - c0 < a.chunk ? a.n_rows - c0 : a.chunk;
            if (!cached) {
                for (uint32_t t0 = 0; t0 < cn; t0 += T) {
                    const uint32_t nr = cn - t0 < T ? cn - t0 : T;
                    const float sv = tile_score(a, s, c0 + t0, nr);
                    if (tid < nr) s.ws[t0 + tid] = attn_expf(__fsub_rn(sv, mx));
                }
                __syncthreads();
            }
            for (uint32_t t0 = 0; t0 < cn; t0 += T) { /* row pointers of a tile, then the sums in row order */
                const uint32_t nr = cn - t0 < T ? cn - t0 : T;
                __syncthreads(); /* the previous tile's pointers are consumed */
                if (tid < nr) s.rowp[tid] = row_ptr(a, c0 + t0 + tid);
                __syncthreads();
                uint32_t r = 0;
                for (; r + 8 <= nr; r += 8) { /* eight loads in flight */
                    float v[8];
#pragma unroll
                    for (int u = 0; u < 8; u++) {
                        const rowref p = s.rowp[r + u];
                        v[u] = p && mine ? row_ld(p, i) : 0.0f;
                    }
#pragma unroll
                    for (int u = 0; u < 8; u++) {
                        const float w = s.ws[t0 + r + u];
                        den = __fadd_rn(den, w);
                        if (s.rowp[r + u]) acc = __fadd_rn(acc, __fmul_rn(w, v[u]));
                    }
                }
                for (; r < nr; r++) {
                    const float w = s.ws[t0 + r];
                    den = __fadd_rn(den, w);
                    const rowref p = s.rowp[r];
                    if (p) acc = __fadd_rn(acc, __fmul_rn(w, mine ? row_ld(p, i) : 0.0f));
                }
            }
            if (!cached) __syncthreads(); /* the next chunk overwrites the weights */
        }
        if (mine) a.out[(uint64_t)h * a.head_dim + i] = __fmul_rn(acc, __fdiv_rn(1.0f, den));
    }
}

/* Shared memory: the fixed part, then as many cached scores as the device allows (up to the
 * widest block's rows), then the launch over grid. */
static int attention_launch(attn_args &a, uint32_t max_rows, dim3 grid, cudaStream_t st) {
    uint32_t threads = (a.head_dim + 31) / 32 * 32;
    if (threads < 128) threads = 128;
    if (threads > 1024) threads = 1024;
    int dev = 0, optin = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (e != cudaSuccess) return (int)e;
    const size_t fixed =
        threads * sizeof(rowref) + ((size_t)a.head_dim + (size_t)threads * (DCH + 1)) * sizeof(float);
    const size_t limit = (size_t)optin - 1024; /* room for the static red[] */
    if (fixed + threads * sizeof(float) > limit) return (int)cudaErrorInvalidValue;
    size_t chunk = (limit - fixed) / sizeof(float);
    if (chunk > max_rows) chunk = max_rows > threads ? max_rows : threads;
    a.chunk = (uint32_t)chunk;
    const size_t smem = fixed + chunk * sizeof(float);
    if (smem > 48 * 1024) {
        e = cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return (int)e;
    }
    attention_kernel<<<grid, threads, smem, st>>>(a);
    return attn_launch_status();
}

} // namespace

extern "C" int dsv4_cuda_attention(dsv4_cuda_stream s, const float *q, uint32_t n_head, uint32_t head_dim,
                                   uint32_t kv_type, const void *raw, uint32_t raw_cap, uint32_t raw_start,
                                   uint32_t n_raw, const void *comp, uint32_t n_comp, const int32_t *sel,
                                   uint32_t n_sel, const float *sinks_dev, float kq_scale, float *out) {
    if (n_raw > raw_cap || (n_raw && raw_start >= raw_cap) || head_dim == 0)
        return (int)cudaErrorInvalidValue;
    if (kv_type != DSV4_TYPE_F32 && kv_type != DSV4_TYPE_F16) return (int)cudaErrorInvalidValue;
    if (n_head == 0) return 0;
    attn_args a = {};
    a.q = q;
    a.raw = (const unsigned char *)raw;
    a.comp = (const unsigned char *)comp;
    a.half = kv_type == DSV4_TYPE_F16;
    a.sel = sel;
    a.sinks = sinks_dev;
    a.out = out;
    a.head_dim = head_dim;
    a.raw_cap = raw_cap;
    a.raw_start = raw_start;
    a.n_raw = n_raw;
    a.n_comp = n_comp;
    a.n_rows = n_raw + (sel ? n_sel : n_comp);
    a.kq_scale = kq_scale;
    a.vec4 = head_dim % 4 == 0 && (uintptr_t)raw % 16 == 0 && (uintptr_t)comp % 16 == 0;
    a.kv = nullptr;
    return attention_launch(a, a.n_rows, dim3(n_head, 1), (cudaStream_t)s);
}

extern "C" int dsv4_cuda_attention_chunk(dsv4_cuda_stream s, const float *q, uint32_t n, uint32_t n_head,
                                         uint32_t head_dim, uint32_t pos0, const float *chunk_kv,
                                         uint32_t kv_type, const void *raw, uint32_t raw_cap,
                                         const void *comp, uint32_t ratio, const int32_t *sel, uint32_t n_sel,
                                         const float *sinks_dev, float kq_scale, float *out) {
    if (head_dim == 0 || !chunk_kv || n > 65535) return (int)cudaErrorInvalidValue;
    if (kv_type != DSV4_TYPE_F32 && kv_type != DSV4_TYPE_F16) return (int)cudaErrorInvalidValue;
    if (n_head == 0 || n == 0) return 0;
    attn_args a = {};
    a.q = q;
    a.raw = (const unsigned char *)raw;
    a.comp = (const unsigned char *)comp;
    a.half = kv_type == DSV4_TYPE_F16;
    a.sel = sel;
    a.sinks = sinks_dev;
    a.out = out;
    a.head_dim = head_dim;
    a.raw_cap = raw_cap;
    a.kq_scale = kq_scale;
    a.vec4 = head_dim % 4 == 0 && (uintptr_t)raw % 16 == 0 && (uintptr_t)comp % 16 == 0 &&
             (uintptr_t)chunk_kv % 16 == 0;
    a.kv = chunk_kv;
    a.pos0 = pos0;
    a.ratio = ratio;
    a.n_sel = n_sel;
    /* the widest token: the last one (windows and compressed rows only grow) */
    const uint32_t p = pos0 + n - 1, n_comp = ratio ? (p + 1) / ratio : 0;
    const uint32_t max_rows = (p + 1 < raw_cap ? p + 1 : raw_cap) + (sel && n_comp > n_sel ? n_sel : n_comp);
    return attention_launch(a, max_rows, dim3(n_head, n), (cudaStream_t)s);
}
