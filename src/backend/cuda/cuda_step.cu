/* Decode-step recording: the ops of one step are captured from the backend stream into a CUDA
 * Graph, and the executable graph kept for the step's key is updated in place from it
 * (cudaGraphExecUpdate: same topology, new arguments); step_run launches it. Measured on the
 * H200 (bench/results/2026-11-29-cuda-graph-cost-h200.txt): a tiny kernel costs 4.4 us of host
 * and GPU time when launched on a stream, 1.0 us of host capture + 0.24 us of update per node,
 * and 0.83 us of GPU time per node inside a graph. The step's token is read on the device from a
 * pinned host cell (the graph's first node copies it), so the graph layer records step p+1 while
 * step p runs and only fills in the token. Capture executes nothing, so a step that fails to
 * record (an op that synchronizes, a scratch buffer that must grow) leaves no trace.
 * DSV4_CUDA_GRAPH=0 turns recording off. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_pdl.h"

/* A joined tier's ops end in the lead's recording: the lead's stream follows them. */
static cudaError_t step_join_back(cuda_ctx *j, cuda_ctx *lead) {
    const cudaError_t e = j->step_capturing ? cu_stream_follow(lead, j) : cudaSuccess;
    j->step_capturing = false;
    j->step_lead = NULL;
    return e;
}

static void step_discard(cuda_ctx *c) {
    for (int i = 0; i < c->n_step_joined; i++) step_join_back(c->step_joined[i], c);
    c->n_step_joined = 0;
    cudaSetDevice(c->device);
    cudaGraph_t g = NULL;
    if (cudaStreamEndCapture(c->stream, &g) == cudaSuccess && g) cudaGraphDestroy(g);
    cudaGetLastError(); /* an invalidated capture reports here: nothing ran */
    c->step_capturing = false;
}

/* host clock for the recording cost counters (cu_step_stats *_us) */
static uint64_t step_now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

dsv4_status cu_step_begin(void *vctx, uint64_t key, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    if (!c->step_enabled) return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "step recording is off");
    if (c->step_capturing) step_discard(c);
    c->n_step_joined = 0;
    cudaError_t e = cudaSetDevice(c->device);
    if (e == cudaSuccess) e = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeRelaxed);
    if (e == cudaSuccess) {
        c->step_capturing = true;
        /* first node: the token cell, read when the graph runs */
        e = cudaMemcpyAsync(c->d_step_tok, c->pin_step_tok, sizeof(int32_t), cudaMemcpyHostToDevice,
                            c->stream);
        if (e != cudaSuccess) step_discard(c);
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "step recording: %s", cudaGetErrorString(e));
    }
    c->step_key = key;
    c->step_t0_us = step_now_us();
    return DSV4_OK;
}

/* The executable graph kept for key (NULL when none). */
static cu_step_exec *step_find(cuda_ctx *c, uint64_t key) {
    for (int i = 0; i < CU_STEP_EXECS; i++)
        if (c->step_exec[i].exec && c->step_exec[i].key == key) return &c->step_exec[i];
    return NULL;
}

/* A slot for a new key: a free one, else the least recently used. */
static cu_step_exec *step_slot(cuda_ctx *c) {
    cu_step_exec *best = &c->step_exec[0];
    for (int i = 0; i < CU_STEP_EXECS; i++) {
        if (!c->step_exec[i].exec) return &c->step_exec[i];
        if (c->step_exec[i].last_use < best->last_use) best = &c->step_exec[i];
    }
    cudaGraphExecDestroy(best->exec);
    best->exec = NULL;
    return best;
}

static bool pdl_listed(const cuda_ctx *c, const void *fn) {
    for (int i = 0; i < c->n_pdl_fns; i++)
        if (c->pdl_fns[i] == fn) return true;
    return false;
}

/* Every kernel -> kernel edge whose downstream kernel is listed (cuda_pdl.h) becomes programmatic:
 * the downstream blocks may launch once every upstream block has started (the upstream kernels
 * trigger at their start) and wait in griddepcontrol.wait for the upstream's completion. Listed
 * kernels wait before they touch memory, so the values are the same; only launch latency and the
 * weight loads issued before the wait overlap the previous kernel. Returns false if the graph
 * could not be rewritten (it is then used as captured). */
static bool step_pdl_edges(cuda_ctx *c, cudaGraph_t g) {
    size_t ne = 0;
    if (cudaGraphGetEdges(g, NULL, NULL, NULL, &ne) != cudaSuccess || ne == 0) return false;
    cudaGraphNode_t *from = (cudaGraphNode_t *)malloc(ne * sizeof *from);
    cudaGraphNode_t *to = (cudaGraphNode_t *)malloc(ne * sizeof *to);
    cudaGraphEdgeData *ed = (cudaGraphEdgeData *)malloc(ne * sizeof *ed);
    bool ok = from && to && ed && cudaGraphGetEdges(g, from, to, ed, &ne) == cudaSuccess;
    for (size_t i = 0; ok && i < ne; i++) {
        cudaGraphNodeType ta, tb;
        if (ed[i].type != cudaGraphDependencyTypeDefault ||
            cudaGraphNodeGetType(from[i], &ta) != cudaSuccess ||
            cudaGraphNodeGetType(to[i], &tb) != cudaSuccess || ta != cudaGraphNodeTypeKernel ||
            tb != cudaGraphNodeTypeKernel)
            continue;
        cudaKernelNodeParams kp;
        if (cudaGraphKernelNodeGetParams(to[i], &kp) != cudaSuccess || !pdl_listed(c, kp.func)) continue;
        cudaGraphEdgeData pe;
        memset(&pe, 0, sizeof pe);
        pe.from_port = cudaGraphKernelNodePortProgrammatic;
        pe.type = cudaGraphDependencyTypeProgrammatic;
        ok = cudaGraphRemoveDependencies(g, &from[i], &to[i], NULL, 1) == cudaSuccess &&
             cudaGraphAddDependencies(g, &from[i], &to[i], &pe, 1) == cudaSuccess;
        if (ok) c->step_stats.pdl_edges++;
    }
    free(from), free(to), free(ed);
    cudaGetLastError();
    return ok;
}

dsv4_status cu_step_end(void *vctx, bool abort, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    if (!c->step_capturing)
        return abort ? DSV4_OK : dsv4_fail(err, DSV4_ERR_INVALID, "step_end without step_begin");
    if (abort) {
        step_discard(c);
        return DSV4_OK;
    }
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < c->n_step_joined; i++) {
        const cudaError_t ej = step_join_back(c->step_joined[i], c);
        if (e == cudaSuccess) e = ej;
    }
    if (e != cudaSuccess) {
        step_discard(c);
        c->step_stats.failed++;
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "step recording: joining the tiers back: %s",
                         cudaGetErrorString(e));
    }
    cudaSetDevice(c->device);
    c->step_capturing = false;
    cudaGraph_t g = NULL;
    e = cudaStreamEndCapture(c->stream, &g);
    if (e != cudaSuccess || !g) {
        cudaGetLastError();
        c->step_stats.failed++;
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "step recording failed: %s", cudaGetErrorString(e));
    }
    const uint64_t t_cap = step_now_us();
    c->step_stats.capture_us += t_cap - c->step_t0_us;
    if (c->pdl && !step_pdl_edges(c, g)) {
        cudaGraphDestroy(g);
        c->step_stats.failed++;
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "step recording: programmatic edges could not be set");
    }
    const uint64_t t_pdl = step_now_us();
    c->step_stats.pdl_us += t_pdl - t_cap;
    cu_step_exec *x = step_find(c, c->step_key);
    if (x) {
        cudaGraphExecUpdateResultInfo info;
        e = cudaGraphExecUpdate(x->exec, g, &info);
        if (e == cudaSuccess) {
            c->step_stats.updated++;
            c->step_stats.update_us += step_now_us() - t_pdl;
        } else { /* another op sequence under this key: instantiate afresh */
            cudaGetLastError();
            cudaGraphExecDestroy(x->exec);
            x->exec = NULL;
            c->step_stats.update_failed++;
        }
    }
    if (!x || !x->exec) {
        if (!x) x = step_slot(c);
        e = cudaGraphInstantiate(&x->exec, g, 0);
        if (e != cudaSuccess) {
            cudaGetLastError();
            x->exec = NULL;
            cudaGraphDestroy(g);
            c->step_stats.failed++;
            return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "step graph instantiation: %s",
                             cudaGetErrorString(e));
        }
        x->key = c->step_key;
        c->step_stats.instantiated++;
        c->step_stats.instantiate_us += step_now_us() - t_pdl;
    }
    cudaGraphDestroy(g);
    x->mem_gen = c->mem_gen;
    x->n_joined = c->n_step_joined;
    for (int i = 0; i < c->n_step_joined; i++) {
        x->joined[i] = c->step_joined[i];
        x->joined_gen[i] = c->step_joined[i]->mem_gen;
    }
    c->n_step_joined = 0;
    return DSV4_OK;
}

dsv4_status cu_step_run(void *vctx, uint64_t key, int32_t token, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx;
    cu_step_exec *x = step_find(c, key);
    bool stale = !x || x->mem_gen != c->mem_gen;
    for (int i = 0; !stale && i < x->n_joined; i++) stale = x->joined[i]->mem_gen != x->joined_gen[i];
    if (stale) {
        c->step_stats.stale++;
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "no current recording of this step");
    }
    /* the previous step that read the cell has finished: the graph layer read its logits */
    *c->pin_step_tok = token;
    x->last_use = ++c->step_clock;
    /* the joined tiers' ops run after the work already queued on their streams */
    cudaError_t e = cudaSuccess;
    for (int i = 0; e == cudaSuccess && i < x->n_joined; i++) e = cu_stream_follow(c, x->joined[i]);
    if (e == cudaSuccess) e = cudaSetDevice(c->device);
    if (e == cudaSuccess) e = cudaGraphLaunch(x->exec, c->stream);
    if (e != cudaSuccess) { /* not launched: nothing ran */
        cudaGetLastError();
        c->step_stats.failed++;
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "step graph launch: %s", cudaGetErrorString(e));
    }
    c->step_stats.launched++;
    /* and the work queued on them later (the logits read, the next prefill) after the step */
    for (int i = 0; e == cudaSuccess && i < x->n_joined; i++) e = cu_stream_follow(x->joined[i], c);
    if (e == cudaSuccess) e = cudaSetDevice(c->device);
    return e == cudaSuccess ? DSV4_OK : cu_fail(err, e, "ordering the tiers after a recorded step");
}

dsv4_status cu_step_join(void *vctx, void *vlead, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx, *lead = (cuda_ctx *)vlead;
    if (!lead || lead == c || !lead->step_capturing || c->step_capturing)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "step join: the lead tier is not recording");
    if (lead->n_step_joined >= CU_STEP_JOINED)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "step join: more than %d tiers", CU_STEP_JOINED + 1);
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaSetDevice(c->device);
    if (e == cudaSuccess) e = cudaStreamIsCapturing(c->stream, &cs);
    if (e != cudaSuccess || cs != cudaStreamCaptureStatusActive) {
        cudaGetLastError();
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "step join: the tier's stream is not in the recording");
    }
    c->step_capturing = true;
    c->step_lead = lead;
    lead->step_joined[lead->n_step_joined++] = c;
    /* the tier's token cell (hash routing) from the lead's, when the step runs */
    if (c->device == lead->device)
        e = cudaMemcpyAsync(c->d_step_tok, lead->d_step_tok, sizeof(int32_t), cudaMemcpyDeviceToDevice,
                            c->stream);
    else
        e = cu_peer_copy(c, c->d_step_tok, lead->d_step_tok, lead->device, sizeof(int32_t));
    if (e != cudaSuccess) {
        cudaGetLastError();
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "step join: token copy: %s", cudaGetErrorString(e));
    }
    return DSV4_OK;
}

dsv4_status cu_step_leave(void *vctx, void *vlead, dsv4_error *err) {
    cuda_ctx *c = (cuda_ctx *)vctx, *lead = (cuda_ctx *)vlead;
    if (c->step_lead != lead)
        return dsv4_fail(err, DSV4_ERR_INVALID, "step leave: the tier did not join this lead");
    const cudaError_t e = step_join_back(c, lead);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "step leave: %s", cudaGetErrorString(e));
    }
    return DSV4_OK;
}

dsv4_status cu_step_init(cuda_ctx *c, dsv4_error *err) {
    const char *v = getenv("DSV4_CUDA_GRAPH");
    c->step_enabled = !(v && strcmp(v, "0") == 0);
    /* programmatic dependent launch inside recorded steps (sm_90: griddepcontrol) */
    const char *pv = getenv("DSV4_CUDA_PDL");
    c->pdl = c->caps.cc_major >= 9 && !(pv && strcmp(pv, "0") == 0);
    int (*const lists[])(const void **) = {
        cu_pdl_kernels_act,          cu_pdl_kernels_dense,      cu_pdl_kernels_hc,
        cu_pdl_kernels_attn_fused,   cu_pdl_kernels_attn_fast,  cu_pdl_kernels_attn_rope,
        cu_pdl_kernels_moe,          cu_pdl_kernels_attn_kvnum, cu_pdl_kernels_attn_compressor,
        cu_pdl_kernels_attn_indexer, cu_pdl_kernels_mvw,        cu_pdl_kernels_mv};
    c->n_pdl_fns = 0;
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++) {
        const void *f[CU_PDL_PER_FILE];
        const int n = lists[i](f);
        for (int j = 0; j < n && c->n_pdl_fns < (int)(sizeof c->pdl_fns / sizeof c->pdl_fns[0]); j++)
            c->pdl_fns[c->n_pdl_fns++] = f[j];
    }
    cudaError_t e = cudaHostAlloc((void **)&c->pin_step_tok, sizeof(int32_t), cudaHostAllocDefault);
    if (e == cudaSuccess) e = cudaMalloc((void **)&c->d_step_tok, sizeof(int32_t));
    return e == cudaSuccess ? DSV4_OK : cu_fail(err, e, "step token cell");
}

void cu_step_free(cuda_ctx *c) {
    if (c->step_capturing && !c->step_lead) step_discard(c);
    for (int i = 0; i < CU_STEP_EXECS; i++)
        if (c->step_exec[i].exec) cudaGraphExecDestroy(c->step_exec[i].exec);
    memset(c->step_exec, 0, sizeof c->step_exec);
    if (c->pin_step_tok) cudaFreeHost(c->pin_step_tok);
    if (c->d_step_tok) cudaFree(c->d_step_tok);
    c->pin_step_tok = NULL;
    c->d_step_tok = NULL;
}
