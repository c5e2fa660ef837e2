/* `dsv4-gguf info FILE`: metadata, tensor table, bytes per tensor class, bytes read per decoded
 * token (spec model-moe-gguf-tokenizer.md §7.2-7.3) and the binder's verdict. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/status.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/model.h"
#include "tool.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

static void print_str(gguf_str s, size_t max) {
    putchar('"');
    for (uint64_t i = 0; i < s.len && i < max; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            printf("\\x%02x", c);
        else
            putchar(c);
    }
    if (s.len > max) printf("...");
    putchar('"');
}

static void print_scalar(const gguf_kv *kv) {
    switch (kv->type) {
    case GGUF_VT_UINT8:
    case GGUF_VT_UINT16:
    case GGUF_VT_UINT32:
    case GGUF_VT_UINT64: printf("%" PRIu64, kv->v.u64); break;
    case GGUF_VT_INT8:
    case GGUF_VT_INT16:
    case GGUF_VT_INT32:
    case GGUF_VT_INT64: printf("%" PRId64, kv->v.i64); break;
    case GGUF_VT_FLOAT32:
    case GGUF_VT_FLOAT64: printf("%.9g", kv->v.f64); break;
    case GGUF_VT_BOOL: printf("%s", kv->v.b ? "true" : "false"); break;
    case GGUF_VT_STRING: print_str(kv->v.str, 120); break;
    default: printf("?"); break;
    }
}

static void print_array(const gguf_kv *kv) {
    uint64_t show = kv->arr_type == GGUF_VT_STRING ? 6 : 16;
    printf("[");
    for (uint64_t i = 0; i < kv->arr_len && i < show; i++) {
        if (i) printf(", ");
        double d;
        int64_t v;
        if (kv->arr_type == GGUF_VT_STRING)
            print_str(gguf_kv_arr_str(kv, i), 40);
        else if ((kv->arr_type == GGUF_VT_FLOAT32 || kv->arr_type == GGUF_VT_FLOAT64) &&
                 gguf_kv_arr_f64(kv, i, &d))
            printf("%.9g", d);
        else if (gguf_kv_arr_i64(kv, i, &v))
            printf("%" PRId64, v);
        else
            printf("?");
    }
    if (kv->arr_len > show) printf(", ... (%" PRIu64 " items)", kv->arr_len);
    printf("]");
}

static void print_kv(const gguf_kv *kv) {
    printf("  %-48.*s ", (int)kv->key.len, kv->key.ptr);
    if (kv->type == GGUF_VT_ARRAY) {
        char t[32];
        snprintf(t, sizeof t, "%s[%" PRIu64 "]", gguf_value_type_name(kv->arr_type), kv->arr_len);
        printf("%-14s ", t);
        print_array(kv);
    } else {
        printf("%-14s ", gguf_value_type_name(kv->type));
        print_scalar(kv);
    }
    printf("\n");
}

static void fmt_dims(char *b, size_t n, const gguf_tensor *t) {
    size_t k = (size_t)snprintf(b, n, "[");
    for (uint32_t i = 0; i < t->n_dims && k < n; i++)
        k += (size_t)snprintf(b + k, n - k, "%s%" PRIu64, i ? ", " : "", t->ne[i]);
    if (k < n) snprintf(b + k, n - k, "]");
}

/* Components of the per-token read (spec §7.3). */
enum {
    PT_ATTN,
    PT_HC,
    PT_ROUTER,
    PT_SHARED,
    PT_ROUTED,
    PT_CMP,
    PT_IDX_CMP,
    PT_IDX_Q,
    PT_HEAD,
    PT_EMBD,
    PT_COUNT
};
static const char *pt_name[PT_COUNT] = {
    "Attention projections",
    "HC fns (attn + ffn)",
    "Router",
    "Shared expert",
    "Routed experts (used)",
    "Compressor kv+gate",
    "Indexer compressor kv+gate",
    "Indexer q_b + proj (long context only)",
    "Output head (output + output_hc_fn)",
    "Embedding row",
};

static int pt_of(const dsv4_layout_entry *e, int32_t layer) {
    if (layer < 0) return e->group == DSV4_TG_EMBD ? PT_EMBD : PT_HEAD;
    switch (e->group) {
    case DSV4_TG_ATTN_PROJ: return PT_ATTN;
    case DSV4_TG_HC_FN: return PT_HC;
    case DSV4_TG_ROUTER: return PT_ROUTER;
    case DSV4_TG_SHARED: return PT_SHARED;
    case DSV4_TG_ROUTED: return PT_ROUTED;
    case DSV4_TG_COMPRESSOR: return PT_CMP;
    case DSV4_TG_IDX_COMPRESSOR: return PT_IDX_CMP;
    case DSV4_TG_INDEXER_Q: return PT_IDX_Q;
    default: return -1;
    }
}

static void per_token(const gguf_file *f, const dsv4_config *cfg) {
    uint64_t comp[PT_COUNT] = {0};
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        int32_t layer;
        const dsv4_layout_entry *e = dsv4_layout_lookup(t->name, &layer);
        if (!e || e->read == DSV4_TR_NONE) continue;
        if (layer >= 0 && (uint32_t)layer >= cfg->n_layer) continue;
        int c = pt_of(e, layer);
        if (c < 0) continue;
        uint64_t b = t->nbytes;
        if (e->read == DSV4_TR_USED) b = b / cfg->n_expert * cfg->n_expert_used;
        if (e->read == DSV4_TR_ROW) b = b / cfg->n_vocab;
        comp[c] += b;
    }
    uint64_t all = 0;
    for (int c = 0; c < PT_COUNT; c++) all += comp[c];
    uint64_t short_ctx = all - comp[PT_IDX_Q];
    printf("\nbytes read per decoded token (matmul weights; norms and small vectors excluded; %u of %u "
           "experts):\n",
           cfg->n_expert_used, cfg->n_expert);
    for (int c = 0; c < PT_COUNT; c++)
        printf("  %-44s %16" PRIu64 "  %8.3f GB\n", pt_name[c], comp[c], comp[c] / 1e9);
    char label[64];
    snprintf(label, sizeof label, "Total, ctx <= %llu (4*idx_top_k)", 4ull * cfg->idx_top_k);
    printf("  %-44s %16" PRIu64 "  %8.3f GB  (%.2f GiB)\n", label, short_ctx, short_ctx / 1e9,
           short_ctx / GIB);
    printf("  %-44s %16" PRIu64 "  %8.3f GB  (%.2f GiB)\n", "Total, longer ctx", all, all / 1e9, all / GIB);
}

static void per_class(const gguf_file *f, uint64_t total) {
    uint64_t g[DSV4_TG_COUNT + 1] = {0};
    uint64_t cnt[DSV4_TG_COUNT + 1] = {0};
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        int32_t layer;
        const dsv4_layout_entry *e = dsv4_layout_lookup(t->name, &layer);
        int k = e ? (int)e->group : DSV4_TG_COUNT;
        g[k] += t->nbytes;
        cnt[k]++;
    }
    printf("\nbytes per tensor class:\n");
    for (int k = 0; k <= DSV4_TG_COUNT; k++) {
        if (!cnt[k]) continue;
        const char *name =
            k < DSV4_TG_COUNT ? dsv4_tensor_group_name((dsv4_tensor_group)k) : "Other (not in the layout)";
        printf("  %-52s %5" PRIu64 " tensors %16" PRIu64 "  %8.3f GiB  %6.2f%%\n", name, cnt[k], g[k],
               g[k] / GIB, total ? 100.0 * g[k] / total : 0.0);
    }
}

int cmd_info(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: dsv4-gguf info FILE\n");
        return 2;
    }
    const char *path = argv[1];
    gguf_file *f = NULL;
    dsv4_error err;
    dsv4_error_clear(&err);
    if (gguf_open(path, &f, &err) != DSV4_OK) {
        fprintf(stderr, "dsv4-gguf: %s\n", err.msg);
        return 1;
    }
    printf("file: %s\n", path);
    printf("size: %" PRIu64 " bytes, GGUF v%u, alignment %u, data offset %" PRIu64 "\n", gguf_file_size(f),
           gguf_version(f), gguf_alignment(f), gguf_data_offset(f));

    printf("\ngeneral:\n");
    for (uint64_t i = 0; i < gguf_kv_count(f); i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        if (kv->key.len >= 8 && !memcmp(kv->key.ptr, "general.", 8)) print_kv(kv);
    }
    printf("\nmetadata (%" PRIu64 " keys):\n", gguf_kv_count(f));
    for (uint64_t i = 0; i < gguf_kv_count(f); i++) print_kv(gguf_kv_at(f, i));

    uint64_t total = 0;
    printf("\ntensors (%" PRIu64 "):\n", gguf_tensor_count(f));
    printf("  %5s  %-40s %-8s %-24s %14s %14s\n", "#", "name", "type", "dims", "bytes", "offset");
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        char dims[96];
        fmt_dims(dims, sizeof dims, t);
        printf("  %5" PRIu64 "  %-40s %-8s %-24s %14" PRIu64 " %14" PRIu64 "\n", i, t->name,
               dsv4_type_name(t->type), dims, t->nbytes, t->offset);
        total += t->nbytes;
    }
    per_class(f, total);

    dsv4_config cfg;
    if (dsv4_config_load(f, &cfg, &err) == DSV4_OK) {
        per_token(f, &cfg);
        dsv4_config_free(&cfg);
    } else {
        printf("\nbytes read per decoded token: unavailable (config: %s)\n", err.msg);
    }

    printf("\ntensors: %" PRIu64 "\n", gguf_tensor_count(f));
    printf("tensor_bytes: %" PRIu64 "\n", total);
    fflush(stdout);
    dsv4_model *m = NULL;
    if (dsv4_model_bind(f, &m, &err) != DSV4_OK) { /* takes f */
        printf("binder: error: %s\n", err.msg);
        fprintf(stderr, "dsv4-gguf: %s: %s\n", path, err.msg);
        return 1;
    }
    printf("binder: ok (%" PRIu64 " tensors bound, %" PRIu64 " ignored)\n", m->n_bound_tensors,
           m->n_unexpected_tensors);
    dsv4_model_free(m);
    return 0;
}
