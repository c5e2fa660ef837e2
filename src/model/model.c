/* Binder: config from metadata, then every tensor of the layout table looked up by name with its
 * dims, its type class and the type consistency of its class checked. One error per mismatch,
 * naming the tensor. */
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "model/layout.h"

static void fmt_dims(char *buf, size_t n, uint32_t n_dims, const uint64_t *ne) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (uint32_t i = 0; i < n_dims && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%llu", i ? ", " : "", (unsigned long long)ne[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

static const char *why_required(const dsv4_layout_tensor *t) {
    switch (t->e->presence) {
    case DSV4_PR_COMPRESSED: return " (layer has compress ratio != 0)";
    case DSV4_PR_INDEXER: return " (layer has compress ratio 4: indexer)";
    case DSV4_PR_HASH: return " (hash-routed layer)";
    default: return "";
    }
}

/* Shape equality with unused dims treated as 1 on both sides. */
static bool dims_match(const gguf_tensor *gt, const dsv4_layout_tensor *t) {
    for (uint32_t i = 0; i < GGUF_MAX_DIMS; i++) {
        uint64_t got = i < gt->n_dims ? gt->ne[i] : 1;
        uint64_t exp = i < 4 ? t->ne[i] : 1;
        if (got != exp) return false;
    }
    return true;
}

static dsv4_status bind_one(dsv4_model *m, const dsv4_layout_tensor *t, const gguf_tensor *gt,
                            dsv4_tensor **slot, dsv4_error *err) {
    if (!dims_match(gt, t)) {
        char e[96], g[128];
        fmt_dims(e, sizeof e, t->n_dims, t->ne);
        fmt_dims(g, sizeof g, gt->n_dims, gt->ne);
        return dsv4_fail(err, DSV4_ERR_FORMAT, "tensor '%s': expected dims %s, got %s", t->name, e, g);
    }
    if (!dsv4_class_allows(t->e->cls, gt->type))
        return dsv4_fail(
            err, DSV4_ERR_FORMAT, "tensor '%s': type %s is not allowed for %s tensors (allowed: %s)", t->name,
            dsv4_type_name(gt->type), dsv4_tensor_class_name(t->e->cls), dsv4_class_allowed_names(t->e->cls));
    uint64_t row_bytes = 0;
    if (!dsv4_type_row_bytes(gt->type, t->ne[0], &row_bytes))
        return dsv4_fail(err, DSV4_ERR_FORMAT, "tensor '%s': type %s cannot hold rows of %llu elements",
                         t->name, dsv4_type_name(gt->type), (unsigned long long)t->ne[0]);
    uint8_t *base = t->layer < 0 ? (uint8_t *)m : (uint8_t *)&m->layers[t->layer];
    dsv4_tensor *d = (dsv4_tensor *)(base + t->e->bind_offset);
    d->name = gt->name;
    d->type = gt->type;
    d->n_dims = t->n_dims;
    for (int i = 0; i < 4; i++) d->ne[i] = t->ne[i];
    d->row_bytes = row_bytes;
    d->nbytes = gt->nbytes;
    d->file_offset = gt->offset;
    d->data = gt->data;
    *slot = d;
    return DSV4_OK;
}

/* Most frequent type among the tensors of one class (ties: the one seen first). */
static uint32_t majority_type(dsv4_tensor *const *slots, const dsv4_layout_tensor *ts, size_t n,
                              dsv4_tensor_class c, bool *any) {
    uint64_t count[DSV4_TYPE_COUNT] = {0};
    uint32_t first_seen[DSV4_TYPE_COUNT];
    uint32_t order = 0;
    *any = false;
    for (size_t i = 0; i < n; i++) {
        if (!slots[i] || ts[i].e->cls != c || slots[i]->type >= DSV4_TYPE_COUNT) continue;
        if (count[slots[i]->type]++ == 0) first_seen[slots[i]->type] = order++;
        *any = true;
    }
    uint32_t best = 0;
    for (uint32_t t = 1; t < DSV4_TYPE_COUNT; t++) {
        if (count[t] > count[best] ||
            (count[t] && count[t] == count[best] && first_seen[t] < first_seen[best]))
            best = t;
    }
    return best;
}

static const char *class_plural(dsv4_tensor_class c) {
    switch (c) {
    case DSV4_TC_F16: return "f16-class tensors (embedding, HC fns, router, compressor, indexer)";
    case DSV4_TC_DENSE: return "dense tensors";
    case DSV4_TC_ROUTED_GU: return "routed gate/up expert tensors";
    case DSV4_TC_ROUTED_DOWN: return "routed down expert tensors";
    default: return "tensors of its class";
    }
}

static dsv4_status check_consistency(const dsv4_model *m, dsv4_tensor *const *slots,
                                     const dsv4_layout_tensor *ts, size_t n, const dsv4_model_bind_opts *o,
                                     dsv4_error *err) {
    static const dsv4_tensor_class shared[] = {DSV4_TC_F16, DSV4_TC_DENSE, DSV4_TC_ROUTED_GU,
                                               DSV4_TC_ROUTED_DOWN};
    for (size_t ci = 0; ci < sizeof shared / sizeof shared[0]; ci++) {
        dsv4_tensor_class c = shared[ci];
        bool routed = c == DSV4_TC_ROUTED_GU || c == DSV4_TC_ROUTED_DOWN;
        if (routed && o->allow_mixed_experts) continue;
        bool any;
        uint32_t maj = majority_type(slots, ts, n, c, &any);
        if (!any) continue;
        for (size_t i = 0; i < n; i++) {
            if (!slots[i] || ts[i].e->cls != c || slots[i]->type == maj) continue;
            return dsv4_fail(err, DSV4_ERR_FORMAT,
                             "tensor '%s': expected type %s (like the other %s), got %s", ts[i].name,
                             dsv4_type_name(maj), class_plural(c), dsv4_type_name(slots[i]->type));
        }
    }
    /* ds4's own rule (spec §1.3): gate and up share a type within each layer. */
    for (uint32_t il = 0; il < m->cfg.n_layer; il++) {
        const dsv4_layer_weights *l = &m->layers[il];
        if (l->ffn_gate_exps.type != l->ffn_up_exps.type)
            return dsv4_fail(err, DSV4_ERR_FORMAT,
                             "tensor 'blk.%u.ffn_up_exps.weight': expected type %s (like "
                             "blk.%u.ffn_gate_exps.weight), got %s",
                             il, dsv4_type_name(l->ffn_gate_exps.type), il,
                             dsv4_type_name(l->ffn_up_exps.type));
    }
    return DSV4_OK;
}

static dsv4_status check_tid2eid(const dsv4_config *c, const dsv4_tensor *t, dsv4_error *err) {
    uint32_t used = c->n_expert_used;
    /* stamp[e] = last token (+1) that used expert e: detects repeats within a row in O(used). */
    uint64_t *stamp = calloc(c->n_expert, sizeof *stamp);
    if (!stamp) return dsv4_fail(err, DSV4_ERR_NOMEM, "tensor '%s': out of memory", t->name);
    dsv4_status st = DSV4_OK;
    for (uint64_t tok = 0; tok < c->n_vocab && st == DSV4_OK; tok++) {
        const uint8_t *row = (const uint8_t *)t->data + tok * used * 4;
        for (uint32_t k = 0; k < used; k++) {
            int32_t v;
            memcpy(&v, row + 4 * k, 4);
            if (v < 0 || (uint32_t)v >= c->n_expert) {
                st = dsv4_fail(err, DSV4_ERR_FORMAT,
                               "tensor '%s': token %llu routes to expert %d, outside [0, %u) (expert_count)",
                               t->name, (unsigned long long)tok, v, c->n_expert);
                break;
            }
            if (stamp[v] == tok + 1) {
                st = dsv4_fail(err, DSV4_ERR_FORMAT, "tensor '%s': token %llu routes to expert %d twice",
                               t->name, (unsigned long long)tok, v);
                break;
            }
            stamp[v] = tok + 1;
        }
    }
    free(stamp);
    return st;
}

/* Count (and warn about) file tensors the family does not use. */
static uint64_t scan_unexpected(const gguf_file *f, const dsv4_config *c) {
    uint64_t n_extra = 0;
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const char *name = gguf_tensor_at(f, i)->name;
        int32_t il = -1;
        const dsv4_layout_entry *e = dsv4_layout_lookup(name, &il);
        bool known =
            e && (il < 0 || ((uint32_t)il < c->n_layer &&
                             (e->presence == DSV4_PR_OPTIONAL || dsv4_layout_in_layer(c, e, (uint32_t)il))));
        if (known) continue;
        if (n_extra < 10) DSV4_LOGW("tensor '%s' is not part of the model layout; ignored", name);
        n_extra++;
    }
    if (n_extra > 10) DSV4_LOGW("%llu unexpected tensors ignored in total", (unsigned long long)n_extra);
    return n_extra;
}

dsv4_status dsv4_model_bind_ex(gguf_file *f, const dsv4_model_bind_opts *opts, dsv4_model **out,
                               dsv4_error *err) {
    *out = NULL;
    dsv4_model_bind_opts o = opts ? *opts : dsv4_model_bind_opts_default();
    dsv4_model *m = calloc(1, sizeof *m);
    if (!m) {
        gguf_close(f);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "model: out of memory");
    }
    m->file = f;
    dsv4_layout_tensor *ts = NULL;
    dsv4_tensor **slots = NULL;
    size_t n = 0;
    dsv4_status st = dsv4_config_load(f, &m->cfg, err);
    if (st != DSV4_OK) goto fail;
    m->layers = calloc(m->cfg.n_layer, sizeof *m->layers);
    if (!m->layers) {
        st = dsv4_fail(err, DSV4_ERR_NOMEM, "model: out of memory for %u layers", m->cfg.n_layer);
        goto fail;
    }
    st = dsv4_layout_build(&m->cfg, DSV4_LAYOUT_BIND, &ts, &n, err);
    if (st != DSV4_OK) goto fail;
    slots = calloc(n ? n : 1, sizeof *slots);
    if (!slots) {
        st = dsv4_fail(err, DSV4_ERR_NOMEM, "model: out of memory");
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        const gguf_tensor *gt = gguf_find_tensor(f, ts[i].name);
        if (!gt) {
            if (!ts[i].required) continue;
            st = dsv4_fail(err, DSV4_ERR_NOT_FOUND, "tensor '%s' is missing%s", ts[i].name,
                           why_required(&ts[i]));
            goto fail;
        }
        st = bind_one(m, &ts[i], gt, &slots[i], err);
        if (st != DSV4_OK) goto fail;
        m->n_bound_tensors++;
    }
    st = check_consistency(m, slots, ts, n, &o, err);
    if (st != DSV4_OK) goto fail;
    if (o.check_values) {
        for (uint32_t il = 0; il < m->cfg.n_hash_layer; il++) {
            st = check_tid2eid(&m->cfg, &m->layers[il].ffn_gate_tid2eid, err);
            if (st != DSV4_OK) goto fail;
        }
    }
    m->n_unexpected_tensors = scan_unexpected(f, &m->cfg);
    free(ts);
    free(slots);
    *out = m;
    return DSV4_OK;
fail:
    free(ts);
    free(slots);
    dsv4_model_free(m);
    return st;
}

dsv4_status dsv4_model_bind(gguf_file *f, dsv4_model **out, dsv4_error *err) {
    return dsv4_model_bind_ex(f, NULL, out, err);
}

dsv4_status dsv4_model_load(const char *path, dsv4_model **out, dsv4_error *err) {
    *out = NULL;
    gguf_file *f = NULL;
    dsv4_status st = gguf_open(path, &f, err);
    if (st != DSV4_OK) return st;
    st = dsv4_model_bind(f, out, err);
    if (st != DSV4_OK) dsv4_error_prefix(err, "%s: ", path);
    return st;
}

void dsv4_model_free(dsv4_model *m) {
    if (!m) return;
    dsv4_config_free(&m->cfg);
    free(m->layers);
    gguf_close(m->file);
    free(m);
}
