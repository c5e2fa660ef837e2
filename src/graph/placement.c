/* Placement parsing, validation and the greedy memory fill. */
#include "graph/placement.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/kv.h"

static void entry_name(uint32_t i, uint32_t n_layer, char *buf, size_t n) {
    if (i == 0)
        snprintf(buf, n, "the embedding");
    else if (i == n_layer + 1)
        snprintf(buf, n, "the output head");
    else
        snprintf(buf, n, "layer %u", i - 1);
}

dsv4_status dsv4_placement_single(uint32_t n_layer, const char *backend, int device, dsv4_placement *out,
                                  dsv4_error *err) {
    memset(out, 0, sizeof *out);
    if (n_layer == 0 || n_layer > DSV4_PLACE_MAX_LAYERS)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "placement: %u layers (1..%u supported)", n_layer,
                         DSV4_PLACE_MAX_LAYERS);
    out->n_tiers = 1;
    snprintf(out->tier[0].backend, sizeof out->tier[0].backend, "%s", backend ? backend : "cpu");
    out->tier[0].device = strcmp(out->tier[0].backend, "cpu") == 0 ? 0 : device;
    out->n_layer = n_layer;
    return DSV4_OK;
}

/* "cpu", "cudaN" or "N" -> tier spec. */
static bool parse_device(const char *s, size_t len, dsv4_tier_spec *t) {
    memset(t, 0, sizeof *t);
    if (len == 3 && strncmp(s, "cpu", 3) == 0) {
        snprintf(t->backend, sizeof t->backend, "cpu");
        return true;
    }
    size_t i = 0;
    if (len > 4 && strncmp(s, "cuda", 4) == 0) i = 4;
    if (i == len) return false;
    long v = 0;
    for (size_t k = i; k < len; k++) {
        if (!isdigit((unsigned char)s[k]) || v > 1000) return false;
        v = v * 10 + (s[k] - '0');
    }
    snprintf(t->backend, sizeof t->backend, "cuda");
    t->device = (int)v;
    return true;
}

static bool parse_u32(const char *s, size_t len, uint32_t *out) {
    if (len == 0 || len > 9) return false;
    uint32_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)s[i])) return false;
        v = v * 10 + (uint32_t)(s[i] - '0');
    }
    *out = v;
    return true;
}

dsv4_status dsv4_placement_parse(const char *spec, uint32_t n_layer, dsv4_placement *out, dsv4_error *err) {
    dsv4_status st = dsv4_placement_single(n_layer, "cpu", 0, out, err);
    if (st != DSV4_OK) return st;
    if (!spec || !*spec) return dsv4_fail(err, DSV4_ERR_INVALID, "--tiers: empty placement");
    out->n_tiers = 0;
    uint32_t next = 0; /* first layer not yet placed */
    const char *p = spec;
    for (uint32_t item = 1;; item++) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *colon = memchr(p, ':', len);
        if (!colon)
            return dsv4_fail(err, DSV4_ERR_INVALID,
                             "--tiers item %u '%.*s': expected TIER:LAYERS (e.g. cuda0:0-21 or cpu:4-5)",
                             item, (int)len, p);
        dsv4_tier_spec t;
        if (!parse_device(p, (size_t)(colon - p), &t))
            return dsv4_fail(err, DSV4_ERR_INVALID,
                             "--tiers item %u '%.*s': unknown device '%.*s' (expected cpu, cudaN or a CUDA "
                             "device number N)",
                             item, (int)len, p, (int)(colon - p), p);
        const char *r = colon + 1;
        const size_t rlen = len - (size_t)(r - p);
        const char *dash = memchr(r, '-', rlen);
        uint32_t a, b;
        bool ok = dash ? parse_u32(r, (size_t)(dash - r), &a) &&
                             parse_u32(dash + 1, rlen - (size_t)(dash + 1 - r), &b)
                       : parse_u32(r, rlen, &a);
        if (!dash) b = a;
        if (!ok)
            return dsv4_fail(err, DSV4_ERR_INVALID,
                             "--tiers item %u '%.*s': layers '%.*s' are not A-B or A (decimal layer indices)",
                             item, (int)len, p, (int)rlen, r);
        if (a > b)
            return dsv4_fail(err, DSV4_ERR_INVALID, "--tiers item %u '%.*s': empty layer range %u-%u", item,
                             (int)len, p, a, b);
        if (b >= n_layer)
            return dsv4_fail(
                err, DSV4_ERR_RANGE,
                "--tiers item %u '%.*s': layer %u is out of range (the model has %u layers: 0-%u)", item,
                (int)len, p, b, n_layer, n_layer - 1);
        if (a < next)
            return dsv4_fail(
                err, DSV4_ERR_INVALID,
                "--tiers item %u '%.*s': layers %u-%u overlap layers already placed (0-%u); list "
                "each layer once, in layer order",
                item, (int)len, p, a, next - 1 < b ? next - 1 : b, next - 1);
        if (a == next + 1)
            return dsv4_fail(err, DSV4_ERR_INVALID,
                             "--tiers item %u '%.*s': gap: layer %u is not placed on any tier", item,
                             (int)len, p, next);
        if (a > next)
            return dsv4_fail(err, DSV4_ERR_INVALID,
                             "--tiers item %u '%.*s': gap: layers %u-%u are not placed on any tier", item,
                             (int)len, p, next, a - 1);
        if (out->n_tiers == DSV4_MAX_TIERS)
            return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "--tiers: more than %u tiers", DSV4_MAX_TIERS);
        const uint32_t ti = out->n_tiers++;
        out->tier[ti] = t;
        for (uint32_t il = a; il <= b; il++) out->entry[1 + il] = (uint8_t)ti;
        next = b + 1;
        if (!end) break;
        p = end + 1;
    }
    if (next < n_layer)
        return dsv4_fail(err, DSV4_ERR_INVALID,
                         "--tiers: gap: layers %u-%u are not placed on any tier (the model "
                         "has %u layers)",
                         next, n_layer - 1, n_layer);
    out->entry[0] = out->entry[1];
    out->entry[n_layer + 1] = out->entry[n_layer];
    return DSV4_OK;
}

bool dsv4_parse_bytes(const char *s, size_t len, uint64_t *out) {
    char buf[64];
    if (len == 0 || len >= sizeof buf) return false;
    memcpy(buf, s, len);
    buf[len] = 0;
    char *e = NULL;
    const double v = strtod(buf, &e);
    if (e == buf || !(v >= 0)) return false;
    double mul = 1;
    switch (toupper((unsigned char)*e)) {
    case 0: break;
    case 'K': mul = 1024.0, e++; break;
    case 'M': mul = 1024.0 * 1024, e++; break;
    case 'G': mul = 1024.0 * 1024 * 1024, e++; break;
    case 'T': mul = 1024.0 * 1024 * 1024 * 1024, e++; break;
    default: return false;
    }
    if (*e == 'i') e++;
    if (*e == 'B' || *e == 'b') e++;
    if (*e) return false;
    const double bytes = v * mul;
    if (bytes > 1.8e19) return false;
    *out = (uint64_t)bytes;
    return true;
}

dsv4_status dsv4_placement_fill(const char *mem_spec, const uint64_t *eb, uint32_t n_layer,
                                dsv4_placement *out, dsv4_error *err) {
    dsv4_status st = dsv4_placement_single(n_layer, "cpu", 0, out, err);
    if (st != DSV4_OK) return st;
    if (!mem_spec || !*mem_spec) return dsv4_fail(err, DSV4_ERR_INVALID, "--tier-mem: empty budget list");
    dsv4_tier_spec dev[DSV4_MAX_TIERS];
    uint64_t budget[DSV4_MAX_TIERS];
    uint32_t n_dev = 0;
    const char *p = mem_spec;
    for (uint32_t item = 1;; item++) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *colon = memchr(p, ':', len);
        const size_t dlen = colon ? (size_t)(colon - p) : len;
        if (n_dev == DSV4_MAX_TIERS)
            return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "--tier-mem: more than %u devices", DSV4_MAX_TIERS);
        if (!parse_device(p, dlen, &dev[n_dev]))
            return dsv4_fail(
                err, DSV4_ERR_INVALID,
                "--tier-mem item %u '%.*s': unknown device '%.*s' (expected cpu, cudaN or a CUDA "
                "device number N)",
                item, (int)len, p, (int)dlen, p);
        const bool cpu = strcmp(dev[n_dev].backend, "cpu") == 0;
        if (!colon) {
            if (!cpu)
                return dsv4_fail(err, DSV4_ERR_INVALID,
                                 "--tier-mem item %u '%.*s': expected DEV:SIZE (e.g. 0:120G)", item, (int)len,
                                 p);
            budget[n_dev] = UINT64_MAX;
        } else if (!dsv4_parse_bytes(colon + 1, len - dlen - 1, &budget[n_dev])) {
            return dsv4_fail(err, DSV4_ERR_INVALID,
                             "--tier-mem item %u '%.*s': size '%.*s' is not a byte count (e.g. 120G, 512M)",
                             item, (int)len, p, (int)(len - dlen - 1), colon + 1);
        }
        for (uint32_t k = 0; k < n_dev; k++) {
            if (strcmp(dev[k].backend, "cpu") == 0)
                return dsv4_fail(err, DSV4_ERR_INVALID,
                                 "--tier-mem item %u '%.*s': cpu (the spill tier) must come last", item,
                                 (int)len, p);
            if (!cpu && dev[k].device == dev[n_dev].device)
                return dsv4_fail(err, DSV4_ERR_INVALID,
                                 "--tier-mem item %u '%.*s': device %d is listed twice", item, (int)len, p,
                                 dev[k].device);
        }
        n_dev++;
        if (!end) break;
        p = end + 1;
    }
    uint32_t d = 0;
    uint64_t used = 0;
    uint8_t tier_of[DSV4_PLACE_MAX_LAYERS + 2];
    for (uint32_t i = 0; i < n_layer + 2; i++) {
        while (d < n_dev && (eb[i] > budget[d] || used > budget[d] - eb[i])) d++, used = 0;
        if (d == n_dev) {
            char nm[32];
            entry_name(i, n_layer, nm, sizeof nm);
            return dsv4_fail(
                err, DSV4_ERR_NOMEM,
                "--tier-mem: %s (%.1f MiB of weights and KV) does not fit in the remaining budgets "
                "(add a larger device or `cpu` last to spill)",
                nm, (double)eb[i] / 1048576.0);
        }
        tier_of[i] = (uint8_t)d;
        used += eb[i];
    }
    /* keep only devices that received entries, renumbered in order */
    int map[DSV4_MAX_TIERS];
    for (uint32_t k = 0; k < n_dev; k++) map[k] = -1;
    out->n_tiers = 0;
    for (uint32_t i = 0; i < n_layer + 2; i++) {
        if (map[tier_of[i]] < 0) {
            map[tier_of[i]] = (int)out->n_tiers;
            out->tier[out->n_tiers++] = dev[tier_of[i]];
        }
        out->entry[i] = (uint8_t)map[tier_of[i]];
    }
    return DSV4_OK;
}

dsv4_status dsv4_placement_entry_bytes(const dsv4_model *m, uint32_t kv_ctx, uint32_t kv_type, uint64_t *out,
                                       dsv4_error *err) {
    const uint32_t nl = m->cfg.n_layer;
    dsv4_kv_layout l;
    dsv4_status st = dsv4_kv_layout_init(&m->cfg, kv_ctx ? kv_ctx : 1, kv_type, &l, err);
    if (st != DSV4_OK) return st;
    out[0] = m->token_embd.nbytes;
    out[nl + 1] = m->output_hc_fn.nbytes + m->output_hc_scale.nbytes + m->output_hc_base.nbytes +
                  m->output_norm.nbytes + m->output.nbytes;
    const size_t per_layer = sizeof(dsv4_layer_weights) / sizeof(dsv4_tensor);
    for (uint32_t il = 0; il < nl; il++) {
        const dsv4_tensor *t = (const dsv4_tensor *)&m->layers[il];
        uint64_t b = 0;
        for (size_t k = 0; k < per_layer; k++)
            if (dsv4_tensor_present(&t[k])) b += t[k].nbytes;
        out[1 + il] = b + (dsv4_kv_layer_end(&l, il) - l.layers[il].raw);
    }
    dsv4_kv_layout_free(&l);
    return DSV4_OK;
}

dsv4_status dsv4_placement_check(const dsv4_placement *p, uint32_t n_layer, dsv4_error *err) {
    if (p->n_layer != n_layer)
        return dsv4_fail(err, DSV4_ERR_INVALID, "placement is for %u layers, the model has %u", p->n_layer,
                         n_layer);
    if (p->n_tiers == 0 || p->n_tiers > DSV4_MAX_TIERS)
        return dsv4_fail(err, DSV4_ERR_INVALID, "placement has %u tiers (1..%u)", p->n_tiers, DSV4_MAX_TIERS);
    if (p->entry[0] != 0 || p->entry[n_layer + 1] != p->n_tiers - 1)
        return dsv4_fail(err, DSV4_ERR_INVALID,
                         "placement: the embedding must be on the first tier and the head on "
                         "the last");
    for (uint32_t i = 1; i < n_layer + 2; i++)
        if (p->entry[i] != p->entry[i - 1] && p->entry[i] != p->entry[i - 1] + 1)
            return dsv4_fail(
                err, DSV4_ERR_INVALID,
                "placement: entry %u goes from tier %u to tier %u (tiers must be contiguous and in "
                "order, each holding at least one entry)",
                i, p->entry[i - 1], p->entry[i]);
    for (uint32_t t = 0; t < p->n_tiers; t++)
        if (strcmp(p->tier[t].backend, "cpu") != 0 && strcmp(p->tier[t].backend, "cuda") != 0)
            return dsv4_fail(err, DSV4_ERR_INVALID, "placement: tier %u has unknown backend '%.8s'", t,
                             p->tier[t].backend);
    return DSV4_OK;
}

uint32_t dsv4_placement_boundaries(const dsv4_placement *p) {
    uint32_t b = 0;
    for (uint32_t i = 1; i < p->n_layer + 2; i++) b += p->entry[i] != p->entry[i - 1];
    return b;
}

void dsv4_placement_layers(const dsv4_placement *p, uint32_t t, uint32_t *first, uint32_t *end) {
    *first = *end = 0;
    bool any = false;
    for (uint32_t il = 0; il < p->n_layer; il++) {
        if (p->entry[1 + il] != t) continue;
        if (!any) *first = il;
        any = true;
        *end = il + 1;
    }
}

void dsv4_placement_format(const dsv4_placement *p, char *buf, size_t n) {
    size_t o = 0;
    buf[0] = 0;
    for (uint32_t t = 0; t < p->n_tiers && o < n; t++) {
        uint32_t a, b;
        dsv4_placement_layers(p, t, &a, &b);
        char dev[16];
        if (strcmp(p->tier[t].backend, "cpu") == 0)
            snprintf(dev, sizeof dev, "cpu");
        else
            snprintf(dev, sizeof dev, "cuda%d", p->tier[t].device);
        int k;
        if (a == b)
            k = snprintf(buf + o, n - o, "%s%s:-", t ? "," : "", dev);
        else if (b - a == 1)
            k = snprintf(buf + o, n - o, "%s%s:%u", t ? "," : "", dev, a);
        else
            k = snprintf(buf + o, n - o, "%s%s:%u-%u", t ? "," : "", dev, a, b - 1);
        if (k < 0) return;
        o += (size_t)k;
        if (o < n && p->entry[0] == t && p->entry[1] != t) o += (size_t)snprintf(buf + o, n - o, "+emb");
        if (o < n && p->entry[p->n_layer + 1] == t && p->entry[p->n_layer] != t)
            o += (size_t)snprintf(buf + o, n - o, "+head");
    }
}
