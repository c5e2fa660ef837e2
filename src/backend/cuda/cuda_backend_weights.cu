/* Weight residency: every tensor of the model is copied once into its own device allocation at
 * backend creation; ops find the copy through a hash map keyed by the tensor's host (mmap) data
 * pointer. The copy streams through two pinned staging buffers so that reading the mmap and the
 * PCIe transfer overlap. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "quant/quant.h"
}
#include "backend/cuda/cuda_backend.h"

#define CU_STAGE_BYTES ((size_t)64 << 20)
#define CU_PROGRESS_STEP ((uint64_t)256 << 20)

static size_t map_slot(const void *p, size_t cap) {
    uint64_t h = (uint64_t)(uintptr_t)p;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return (size_t)h & (cap - 1);
}

static cu_weight *map_find(const cuda_ctx *c, const void *host) {
    if (!c->map_cap) return NULL;
    for (size_t i = map_slot(host, c->map_cap);; i = (i + 1) & (c->map_cap - 1)) {
        cu_weight *w = &c->map[i];
        if (w->host == host) return w;
        if (!w->host) return NULL;
    }
}

const void *cu_weight_dev(const cuda_ctx *c, const dsv4_tensor *t, dsv4_error *err) {
    if (!t || !dsv4_tensor_present(t)) {
        dsv4_fail(err, DSV4_ERR_INVALID, "cuda: tensor %s is absent", t && t->name ? t->name : "?");
        return NULL;
    }
    const cu_weight *w = map_find(c, t->data);
    if (!w) {
        dsv4_fail(err, DSV4_ERR_INVALID,
                  "cuda: tensor %s has no device copy (not part of the uploaded model)",
                  t->name ? t->name : "?");
        return NULL;
    }
    return w->dev;
}

cu_weight *cu_weight_rec(const cuda_ctx *c, const dsv4_tensor *t) {
    return t && dsv4_tensor_present(t) ? map_find(c, t->data) : NULL;
}

/* Every tensor view of the model: the globals, then each layer's struct (made of tensors only). */
static_assert(sizeof(dsv4_layer_weights) % sizeof(dsv4_tensor) == 0, "layer weights hold tensors only");
typedef struct {
    const dsv4_tensor **v;
    size_t n;
} tensor_list;

/* A tier uploads only what it runs (dsv4_backend_params.partial). */
static dsv4_status list_tensors(const cuda_ctx *c, const dsv4_model *m, tensor_list *out, dsv4_error *err) {
    const size_t per_layer = sizeof(dsv4_layer_weights) / sizeof(dsv4_tensor);
    const dsv4_tensor *globals[] = {&m->token_embd,     &m->output_hc_fn, &m->output_hc_scale,
                                    &m->output_hc_base, &m->output_norm,  &m->output};
    const size_t n_glob = sizeof globals / sizeof globals[0];
    const size_t cap = n_glob + (size_t)m->cfg.n_layer * per_layer;
    out->v = (const dsv4_tensor **)malloc(cap * sizeof *out->v);
    out->n = 0;
    if (!out->v) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory listing %zu tensors", cap);
    for (size_t i = 0; i < n_glob; i++) {
        const bool embed = globals[i] == &m->token_embd;
        if (c->partial && !(embed ? c->with_embed : c->with_head)) continue;
        if (dsv4_tensor_present(globals[i])) out->v[out->n++] = globals[i];
    }
    for (uint32_t il = 0; il < m->cfg.n_layer; il++) {
        if (c->partial && (il < c->layer_first || il >= c->layer_end)) continue;
        const dsv4_tensor *lt = (const dsv4_tensor *)&m->layers[il];
        for (size_t i = 0; i < per_layer; i++)
            if (dsv4_tensor_present(&lt[i])) out->v[out->n++] = &lt[i];
    }
    return DSV4_OK;
}

typedef struct {
    uint8_t *pin[2];
    cudaEvent_t ev[2];
    bool live[2];
    int next;
} stager;

static dsv4_status copy_tensor(cuda_ctx *c, stager *sg, void *dev, const void *host, uint64_t bytes,
                               const char *name, dsv4_error *err) {
    char what[320];
    snprintf(what, sizeof what, "uploading tensor %s (%llu bytes)", name, (unsigned long long)bytes);
    if (!sg->pin[0]) {
        const cudaError_t e = cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice);
        return e == cudaSuccess ? DSV4_OK : cu_fail(err, e, what);
    }
    for (uint64_t off = 0; off < bytes;) {
        const size_t len = bytes - off < CU_STAGE_BYTES ? (size_t)(bytes - off) : CU_STAGE_BYTES;
        const int b = sg->next;
        sg->next ^= 1;
        cudaError_t e = cudaSuccess;
        if (sg->live[b]) e = cudaEventSynchronize(sg->ev[b]);
        if (e != cudaSuccess) return cu_fail(err, e, what);
        memcpy(sg->pin[b], (const uint8_t *)host + off, len);
        e = cudaMemcpyAsync((uint8_t *)dev + off, sg->pin[b], len, cudaMemcpyHostToDevice, c->stream);
        if (e == cudaSuccess) e = cudaEventRecord(sg->ev[b], c->stream);
        if (e != cudaSuccess) return cu_fail(err, e, what);
        sg->live[b] = true;
        off += len;
    }
    return DSV4_OK;
}

static void stager_free(stager *sg) {
    for (int b = 0; b < 2; b++) {
        if (sg->ev[b]) cudaEventDestroy(sg->ev[b]);
        if (sg->pin[b]) cudaFreeHost(sg->pin[b]);
    }
}

static dsv4_status upload_all(cuda_ctx *c, const tensor_list *tl, uint64_t total,
                              void (*on_upload)(void *, uint64_t, uint64_t), void *user, dsv4_error *err) {
    stager sg;
    memset(&sg, 0, sizeof sg);
    for (int b = 0; b < 2; b++) {
        if (cudaMallocHost((void **)&sg.pin[b], CU_STAGE_BYTES) != cudaSuccess ||
            cudaEventCreateWithFlags(&sg.ev[b], cudaEventDisableTiming) != cudaSuccess) {
            cudaGetLastError();
            stager_free(&sg); /* no pinned memory: plain synchronous copies */
            memset(&sg, 0, sizeof sg);
            break;
        }
    }
    dsv4_status st = DSV4_OK;
    uint64_t done = 0, reported = 0;
    if (on_upload) on_upload(user, 0, total);
    for (size_t i = 0; i < tl->n && st == DSV4_OK; i++) {
        const dsv4_tensor *t = tl->v[i];
        cu_weight *w = &c->map[map_slot(t->data, c->map_cap)];
        while (w->host && w->host != t->data) w = &c->map[(size_t)(w - c->map + 1) & (c->map_cap - 1)];
        if (w->host) continue; /* the same bytes bound twice */
        void *dev = NULL;
        const cudaError_t e = cudaMalloc(&dev, t->nbytes ? t->nbytes : 1);
        if (e != cudaSuccess) {
            cudaGetLastError();
            size_t fr = 0, tot = 0;
            cudaMemGetInfo(&fr, &tot);
            st = dsv4_fail(err, DSV4_ERR_NOMEM,
                           "cannot place tensor %s on %s: it needs %llu bytes, %zu bytes are free of %zu "
                           "(%llu bytes of weights uploaded, %llu needed in all): %s",
                           t->name ? t->name : "?", c->caps.name, (unsigned long long)t->nbytes, fr, tot,
                           (unsigned long long)c->weight_bytes, (unsigned long long)total,
                           cudaGetErrorString(e));
            break;
        }
        w->host = t->data;
        w->dev = dev;
        w->bytes = t->nbytes;
        w->type = t->type;
        c->map_n++;
        c->weight_bytes += t->nbytes;
        st = copy_tensor(c, &sg, dev, t->data, t->nbytes, t->name ? t->name : "?", err);
        done += t->nbytes;
        if (on_upload && done - reported >= CU_PROGRESS_STEP) {
            on_upload(user, done, total);
            reported = done;
        }
    }
    if (st == DSV4_OK) {
        const cudaError_t e = cudaStreamSynchronize(c->stream);
        if (e != cudaSuccess) st = cu_fail(err, e, "finishing the weight upload");
    } else {
        cudaStreamSynchronize(c->stream);
        cudaGetLastError();
    }
    stager_free(&sg);
    if (st == DSV4_OK && on_upload) on_upload(user, total, total);
    return st;
}

dsv4_status cu_weights_upload(cuda_ctx *c, const dsv4_model *m, void (*on_upload)(void *, uint64_t, uint64_t),
                              void *user, dsv4_error *err) {
    tensor_list tl;
    dsv4_status st = list_tensors(c, m, &tl, err);
    if (st != DSV4_OK) return st;
    size_t cap = 16;
    while (cap < 2 * tl.n + 1) cap *= 2;
    c->map = (cu_weight *)calloc(cap, sizeof *c->map);
    if (!c->map) {
        free(tl.v);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory for the device weight map");
    }
    c->map_cap = cap;
    uint64_t total = 0;
    for (size_t i = 0; i < tl.n; i++) total += tl.v[i]->nbytes; /* duplicates (if any) counted once below */
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) == cudaSuccess && total > fr)
        st = dsv4_fail(
            err, DSV4_ERR_NOMEM,
            "the model's %zu weight tensors need %llu bytes of device memory; %s has %zu bytes free of "
            "%zu",
            tl.n, (unsigned long long)total, c->caps.name, fr, tot);
    cudaGetLastError();
    if (st == DSV4_OK) st = upload_all(c, &tl, total, on_upload, user, err);
    free(tl.v);
    return st;
}

void cu_weights_free(cuda_ctx *c) {
    for (size_t i = 0; i < c->map_cap; i++) {
        if (c->map[i].dev) cudaFree(c->map[i].dev);
        if (c->map[i].x16_w2) cudaFree(c->map[i].x16_w2);
    }
    free(c->map);
    c->map = NULL;
    c->map_cap = c->map_n = 0;
    c->weight_bytes = 0;
}

dsv4_status cu_tables_init(cuda_ctx *c, dsv4_error *err) {
    cudaError_t e = cudaMalloc((void **)&c->d_iq2_grid, sizeof dsv4_iq2xxs_grid);
    if (e == cudaSuccess) e = cudaMalloc((void **)&c->d_iq2_signs, sizeof dsv4_ksigns_iq2xs);
    if (e == cudaSuccess)
        e = cudaMemcpy(c->d_iq2_grid, dsv4_iq2xxs_grid, sizeof dsv4_iq2xxs_grid, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(c->d_iq2_signs, dsv4_ksigns_iq2xs, sizeof dsv4_ksigns_iq2xs, cudaMemcpyHostToDevice);
    int32_t iota[CU_IOTA];
    for (int i = 0; i < CU_IOTA; i++) iota[i] = i;
    if (e == cudaSuccess) e = cudaMalloc((void **)&c->d_iota, sizeof iota);
    if (e == cudaSuccess) e = cudaMemcpy(c->d_iota, iota, sizeof iota, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMalloc((void **)&c->d_hc_ticket, sizeof(unsigned));
    if (e == cudaSuccess) e = cudaMemset(c->d_hc_ticket, 0, sizeof(unsigned));
    if (e == cudaSuccess) e = cudaMalloc((void **)&c->d_hc_tail, CU_SYNC_WORDS * sizeof(unsigned));
    if (e == cudaSuccess) e = cudaMemset(c->d_hc_tail, 0, CU_SYNC_WORDS * sizeof(unsigned));
    return e == cudaSuccess ? DSV4_OK : cu_fail(err, e, "device tables");
}
