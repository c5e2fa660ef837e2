/* Tensor-core prefill attention (`attention_chunk`, the default for prefill chunks; DSV4_CUDA_ATTN=fast
 * switches back): one CTA per (token, 64 heads), scores and values on mma.m16n8k16 f16 -> f32, fragments by
 * ldmatrix. Design and numerics: cuda_attn_tc.cuh. Pipeline: the next tile's F16 rows are copied (cp.async)
 * into the other buffer while the current one is used (the chunk's own F32 rows are rounded synchronously at
 * the issue); three barriers per tile. Checked on the H200 by test_cuda_attn; host emulation:
 * attn_tc_emu_check. */
#include "backend/cuda/cuda_attn_common.cuh"
#include "backend/cuda/cuda_attn_qnr.cuh"
#include "backend/cuda/cuda_attn_tc.cuh"

namespace {

/* The queries' per-head norm + RoPE inside the query load (DSV4_FUSED_ATTN_CHUNK_QNR): on = 0 reads q
 * as it is (normed by q_norm_rope before the call); out_on: the heads' inverse RoPE (ai: the rope op's
 * inverse arguments) on the output's way out. */
struct ft_qnr {
    uint32_t on, out_on;
    float eps;
    rope_args a, ai;
};

__device__ __forceinline__ void ft_cp16(void *dst, const void *src) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
}

__device__ __forceinline__ void ft_mma(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void ft_ldm(uint32_t r[4], const uint16_t *p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
}
__device__ __forceinline__ void ft_ldm_t(uint32_t r[4], const uint16_t *p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
}

/* Tile i's rows of token k into buffer b (row references into rowp[b]); one commit group. */
__device__ __forceinline__ void ft_issue(ft_smem &s, const ft_args &x, const fa_tok &k, uint32_t i,
                                         uint32_t b, uint32_t tid) {
    for (uint32_t e = tid; e < FT_TR * FT_CH; e += FT_T) {
        const uint32_t r = e / FT_CH, c = e % FT_CH;
        const fa_rowref p = fa_row(x.a, k, i * FT_TR + r);
        uint16_t *dst = s.kv[b] + r * FT_LDK + c * 8;
        if (c == 0) s.rowp[b][r] = p;
        const uint16_t *src = ft_row_f16(x, p);
        if (src)
            ft_cp16(dst, src + c * 8);
        else {
            uint16_t h[8];
            ft_stage_chunk(p, c, h);
            *(uint4 *)dst = make_uint4(ft_pack(h[0], h[1]), ft_pack(h[2], h[3]), ft_pack(h[4], h[5]),
                                       ft_pack(h[6], h[7]));
        }
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* The chunk's own rows as f16 (the same rounding as ft_stage_chunk). */
__global__ void ft_kv16_kernel(const float *kv, uint16_t *kv16, uint64_t n) {
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x)
        kv16[i] = ft_f16(kv[i]);
}

/* Q value group c (4 values) of head h into shared memory: f16 hi and lo */
__device__ __forceinline__ void ft_put_q(ft_smem &s, uint32_t h, uint32_t c, const float4 &v) {
    const uint16_t h0 = ft_f16(v.x), h1 = ft_f16(v.y), h2 = ft_f16(v.z), h3 = ft_f16(v.w);
    *(uint2 *)(s.q + h * FT_LDK + 4 * c) = make_uint2(ft_pack(h0, h1), ft_pack(h2, h3));
#if FT_QSPLIT
    *(uint2 *)(s.qlo + h * FT_LDK + 4 * c) =
        make_uint2(ft_pack(ft_q_lo(v.x, h0), ft_q_lo(v.y, h1)), ft_pack(ft_q_lo(v.z, h2), ft_q_lo(v.w, h3)));
#endif
}

/* The token's 64 query heads as they are (normed before the call): 16 loads a thread in flight, then
 * their conversions (session 24: one load at a time, the conversions waited on each) */
__device__ __forceinline__ void ft_load_q(ft_smem &s, const float *qg, uint32_t tid) {
    constexpr uint32_t QB = 16;
    static_assert(FT_H * FA_D / 4 % (QB * FT_T) == 0, "whole batches of Q loads");
    for (uint32_t e0 = 0; e0 < FT_H * FA_D / 4; e0 += QB * FT_T) {
        float4 qv[QB];
#pragma unroll
        for (uint32_t i = 0; i < QB; i++) qv[i] = __ldg((const float4 *)qg + e0 + i * FT_T + tid);
#pragma unroll
        for (uint32_t i = 0; i < QB; i++) {
            const uint32_t e = e0 + i * FT_T + tid;
            ft_put_q(s, e / (FA_D / 4), e % (FA_D / 4), qv[i]);
        }
    }
}

/* The token's 64 raw query heads, normed and rotated on the way in (qnr_head512: the q_norm_rope op's
 * bits): the pair angles into the score space (free until the first tile's scores), then a warp per
 * head, 4 heads' loads in flight. */
__device__ __forceinline__ void ft_load_q_normed(ft_smem &s, const float *qg, const ft_qnr &r, uint32_t t,
                                                 uint32_t tid) {
    static_assert(FA_D == QNR_W && FT_H * FT_LDS >= 512, "512-wide heads; angles fit the scores");
    const uint32_t lane = tid & 31, w = tid >> 5, pos = r.a.pos0 + t * r.a.pos_step;
    float *cs = s.sc, *sn = s.sc + 256;
    for (uint32_t k = tid; k < r.a.half; k += FT_T) rope_pair_cs_sn(r.a, pos, k, &cs[k], &sn[k]);
    __syncthreads();
    constexpr uint32_t QH = 4, NW = FT_T / 32;
    static_assert(FT_H % (QH * NW) == 0, "whole batches of heads");
    for (uint32_t h0 = w; h0 < FT_H; h0 += QH * NW) {
        float4 v[QH][QNR_GR];
#pragma unroll
        for (uint32_t j = 0; j < QH; j++)
#pragma unroll
            for (uint32_t k = 0; k < QNR_GR; k++)
                v[j][k] = __ldg((const float4 *)(qg + (uint64_t)(h0 + j * NW) * FA_D) + k * 32 + lane);
#pragma unroll
        for (uint32_t j = 0; j < QH; j++) {
            qnr_head512(v[j], lane, r.eps, r.a.half, cs, sn);
#pragma unroll
            for (uint32_t k = 0; k < QNR_GR; k++) ft_put_q(s, h0 + j * NW, k * 32 + lane, v[j][k]);
        }
    }
}

__global__ void __launch_bounds__(FT_T, 1) ft_kernel(ft_args x, ft_qnr r) {
    const fa_args &a = x.a;
    extern __shared__ __align__(16) unsigned char ft_dyn[];
    ft_smem &s = *reinterpret_cast<ft_smem *>(ft_dyn);
    const uint32_t tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const uint32_t hb = 16 * (w % 4), half = w / 4; /* head block; row half (scores) / dim half (values) */
    const uint32_t t = gridDim.x - 1 - blockIdx.x, hg = blockIdx.y * FT_H; /* widest tokens first */
    const fa_tok k = fa_token(a, t);
    const uint32_t n_tiles = (k.n_rows + FT_TR - 1) / FT_TR;

    if (n_tiles) ft_issue(s, x, k, 0, 0, tid);
    const float *qg = a.q + ((uint64_t)t * a.n_head + hg) * FA_D;
    if (r.on)
        ft_load_q_normed(s, qg, r, t, tid);
    else
        ft_load_q(s, qg, tid);
    if (tid < FT_H) {
        s.m[tid] = -INFINITY;
        s.l[tid] = 0.0f;
    }
    float o[32][4];
#pragma unroll
    for (uint32_t j = 0; j < 32; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;

    for (uint32_t i = 0; i < n_tiles; i++) {
        const uint32_t b = i & 1u;
        asm volatile("cp.async.wait_all;\n" ::: "memory");
        __syncthreads(); /* tile i landed; tile i-1 consumed (its buffer, sc, p free) */
        if (i + 1 < n_tiles) ft_issue(s, x, k, i + 1, b ^ 1u, tid);
        const uint16_t *kv = s.kv[b];
        { /* scores: heads hb..+15 x rows 16*half..+15; Q hi and lo into separate sums (four independent
           * chains instead of two), the next k-step's fragments loaded before this one's products */
            float dh[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#if FT_QSPLIT
            float dl[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
            uint32_t al[4];
            ft_ldm(al, ft_ldm_a(s.qlo, FT_LDK, hb, 0, lane));
#endif
            uint32_t ah[4], bk[4];
            ft_ldm(ah, ft_ldm_a(s.q, FT_LDK, hb, 0, lane));
            ft_ldm(bk, ft_ldm_k(kv, 16 * half, 0, lane));
#pragma unroll 4
            for (uint32_t ks = 0; ks < FA_D / 16; ks++) {
                const uint32_t kn =
                    16 * (ks + 1 < FA_D / 16 ? ks + 1 : ks); /* the last step reloads its own */
                uint32_t nah[4], nbk[4];
                ft_ldm(nah, ft_ldm_a(s.q, FT_LDK, hb, kn, lane));
                ft_ldm(nbk, ft_ldm_k(kv, 16 * half, kn, lane));
                ft_mma(dh[0], ah, bk);
                ft_mma(dh[1], ah, bk + 2);
#if FT_QSPLIT
                uint32_t nal[4];
                ft_ldm(nal, ft_ldm_a(s.qlo, FT_LDK, hb, kn, lane));
                ft_mma(dl[0], al, bk);
                ft_mma(dl[1], al, bk + 2);
#pragma unroll
                for (uint32_t i = 0; i < 4; i++) al[i] = nal[i];
#endif
#pragma unroll
                for (uint32_t i = 0; i < 4; i++) ah[i] = nah[i], bk[i] = nbk[i];
            }
#pragma unroll
            for (uint32_t nt = 0; nt < 2; nt++) {
#if FT_QSPLIT
                ft_add_lo(dh[nt], dl[nt]);
#endif
                ft_store_scores(s.sc, s.rowp[b], hb, 16 * half + 8 * nt, lane, dh[nt], a.kq_scale);
            }
        }
        __syncthreads();
        { /* online softmax: 4 threads per head */
            const uint32_t h = tid / 4;
            float mx = ft_sm_max(s.sc, tid);
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_old = s.m[h], m_new = fmaxf(m_old, mx);
            float ps = ft_sm_weights(s.sc, s.p, tid, m_new);
            ps += __shfl_xor_sync(0xffffffffu, ps, 1);
            ps += __shfl_xor_sync(0xffffffffu, ps, 2);
            if (tid % 4 == 0) { /* after the shuffles: the 4 threads have read m_old */
                const float f = fa_rescale(m_old, m_new);
                s.f[h] = f;
                s.l[h] = fmaf(s.l[h], f, ps);
                s.m[h] = m_new;
            }
        }
        __syncthreads();
        { /* values: heads hb..+15 x dims 256*half..+255 */
            const float f0 = s.f[hb + lane / 4], f1 = s.f[hb + lane / 4 + 8];
            /* o *= f only where a head's max moved (f == 1 leaves every value as it is) */
            if (__any_sync(0xffffffffu, f0 != 1.0f || f1 != 1.0f)) {
#pragma unroll
                for (uint32_t j = 0; j < 32; j++) {
                    o[j][0] *= f0;
                    o[j][1] *= f0;
                    o[j][2] *= f1;
                    o[j][3] *= f1;
                }
            }
            uint32_t fa[2][4];
#pragma unroll
            for (uint32_t ks = 0; ks < 2; ks++) ft_ldm(fa[ks], ft_ldm_a(s.p, FT_LDP, hb, 16 * ks, lane));
#pragma unroll
            for (uint32_t j = 0; j < 32; j += 2) {
                uint32_t fb[2][4];
#pragma unroll
                for (uint32_t ks = 0; ks < 2; ks++)
                    ft_ldm_t(fb[ks], ft_ldm_v(kv, 256 * half + 8 * j, 16 * ks, lane));
#pragma unroll
                for (uint32_t jj = 0; jj < 2; jj++)
#pragma unroll
                    for (uint32_t ks = 0; ks < 2; ks++) ft_mma(o[j + jj], fa[ks], fb[ks] + 2 * jj);
            }
        }
    }
    __syncthreads(); /* m, l final (the empty token: the values set above); f free; scores free */
    if (tid < FT_H) ft_head_scales(s.f, s.m, s.l, a.sinks + hg, tid);
    float *ocs = s.sc, *osn = s.sc + 256; /* the output's inverse-RoPE angles (the rope op's) */
    if (r.out_on)
        for (uint32_t k = tid; k < r.ai.half; k += FT_T)
            rope_pair_cs_sn(r.ai, r.ai.pos0 + t * r.ai.pos_step, k, &ocs[k], &osn[k]);
    __syncthreads();
    float *out = a.out + ((uint64_t)t * a.n_head + hg) * FA_D;
#if FT_QSPLIT
    /* through shared memory (Q's space, free now), then whole rows: a warp's fragment stores touched 8
     * rows of 32 bytes each and held the CTA a quarter of its time on the dense layers (session 24) */
    float *ob = reinterpret_cast<float *>(s.q);
#pragma unroll
    for (uint32_t j = 0; j < 32; j++) ft_store_out(ob, FT_LDO, s.f, hb, 256 * half + 8 * j, lane, o[j]);
    __syncthreads();
    const uint32_t onope = FA_D - 2 * r.ai.half;
    for (uint32_t e = tid; e < FT_H * FA_D / 4; e += FT_T) {
        const uint32_t h = e / (FA_D / 4), c = e % (FA_D / 4), i = 4 * c;
        float4 v = *(const float4 *)(ob + h * FT_LDO + i);
        if (r.out_on &&
            i + 2 >= onope) { /* pairs (i, i + 1) and (i + 2, i + 3), as rope_kernel rotates them */
            if (i >= onope) rope_rotate(&v.x, &v.y, ocs[(i - onope) / 2], osn[(i - onope) / 2]);
            rope_rotate(&v.z, &v.w, ocs[(i + 2 - onope) / 2], osn[(i + 2 - onope) / 2]);
        }
        *((float4 *)(out + (size_t)h * FA_D) + c) = v;
    }
#else
#pragma unroll
    for (uint32_t j = 0; j < 32; j++) ft_store_out(out, FA_D, s.f, hb, 256 * half + 8 * j, lane, o[j]);
#endif
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* The CTA's shared memory (~210 KB) fits an H100/H200 (227 KB), not an A100 (163 KB). */
bool smem_fits(void) {
    int dev = 0, mx = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&mx, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
        return false;
    return (size_t)mx >= sizeof(ft_smem);
}

} // namespace

extern "C" bool dsv4_cuda_attention_chunk_tc_ok(uint32_t n, uint32_t n_head, uint32_t head_dim,
                                                uint32_t kv_type, const void *q, const void *out,
                                                const void *raw, const void *comp, const void *chunk_kv) {
    return n > 0 && n <= 0x7fffffffu && head_dim == FA_D && n_head > 0 && n_head % FT_H == 0 &&
           n_head / FT_H <= 65535 && kv_type == DSV4_TYPE_F16 && chunk_kv && aligned16(q) && aligned16(out) &&
           aligned16(raw) && aligned16(comp) && aligned16(chunk_kv) && smem_fits();
}

extern "C" bool dsv4_cuda_attention_chunk_tc_qnr_ok(const dsv4_rope *rope) {
    return rope && rope->n_rot % 2 == 0 && rope->n_rot <= FA_D && rope->n_rot / 2 <= 256;
}

extern "C" int dsv4_cuda_attention_chunk_tc(dsv4_cuda_stream s, const float *q, uint32_t n, uint32_t n_head,
                                            uint32_t head_dim, uint32_t pos0, const float *chunk_kv,
                                            uint32_t kv_type, const void *raw, uint32_t raw_cap,
                                            const void *comp, uint32_t ratio, const int32_t *sel,
                                            uint32_t n_sel, const float *sinks_dev, float kq_scale,
                                            float *out, void *scratch, size_t scratch_bytes, float qnr_eps,
                                            const dsv4_rope *qnr_rope, const dsv4_rope *out_rope) {
    if (!dsv4_cuda_attention_chunk_tc_ok(n, n_head, head_dim, kv_type, q, out, raw, comp, chunk_kv) ||
        (qnr_rope && !dsv4_cuda_attention_chunk_tc_qnr_ok(qnr_rope)) ||
        (out_rope && (!FT_QSPLIT || !dsv4_cuda_attention_chunk_tc_qnr_ok(out_rope))))
        return (int)cudaErrorInvalidValue;
    ft_qnr r;
    memset(&r, 0, sizeof r);
    if (qnr_rope) {
        r.on = 1, r.eps = qnr_eps;
        r.a = rope_args_make(qnr_rope, false, n_head, head_dim, pos0, 1);
    }
    if (out_rope) {
        r.out_on = 1;
        r.ai = rope_args_make(out_rope, true, n_head, head_dim, pos0, 1);
    }
    fa_args a = fa_chunk_args(q, raw, comp, sel, sinks_dev, out, chunk_kv, n_head, raw_cap, pos0, ratio,
                              n_sel, kq_scale, true);
    const size_t smem = sizeof(ft_smem);
    const cudaError_t e =
        cudaFuncSetAttribute(ft_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return (int)e;
    ft_args x = {a, nullptr};
    const uint64_t nkv = (uint64_t)n * FA_D;
    if (scratch && aligned16(scratch) && nkv * 2 <= scratch_bytes) {
        x.kv16 = (const uint16_t *)scratch;
        const uint64_t blocks = (nkv + 255) / 256;
        ft_kv16_kernel<<<(unsigned)(blocks < 4096 ? blocks : 4096), 256, 0, (cudaStream_t)s>>>(
            chunk_kv, (uint16_t *)scratch, nkv);
    }
    ft_kernel<<<dim3(n, n_head / FT_H), FT_T, smem, (cudaStream_t)s>>>(x, r);
    return attn_launch_status();
}
