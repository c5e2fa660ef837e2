/* Opening a GGUF image (mmap'ed file or caller memory), the header, and the handle accessors. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf_internal.h"

dsv4_status gguf_parse_header(gguf_file *f, gguf_cursor *c, uint64_t *n_tensors, uint64_t *n_kv,
                              dsv4_error *err) {
    uint32_t magic = 0, version = 0;
    if (!gguf_cur_u32(c, &magic))
        return dsv4_fail(err, DSV4_ERR_FORMAT, "file is %llu bytes, too small for the GGUF magic",
                         (unsigned long long)c->size);
    if (magic != GGUF_MAGIC)
        return dsv4_fail(err, DSV4_ERR_FORMAT, "not a GGUF file (magic 0x%08x, expected 0x%08x \"GGUF\")",
                         magic, GGUF_MAGIC);
    if (!gguf_cur_u32(c, &version))
        return dsv4_fail(err, DSV4_ERR_FORMAT, "truncated header: no version field (file size %llu)",
                         (unsigned long long)c->size);
    if (version != GGUF_VERSION) {
        if (version == 0x03000000u)
            return dsv4_fail(err, DSV4_ERR_FORMAT,
                             "big-endian GGUF files are not supported (only little-endian v3)");
        return dsv4_fail(err, DSV4_ERR_FORMAT, "unsupported GGUF version %u (only version 3 is supported)",
                         version);
    }
    f->version = version;
    if (!gguf_cur_u64(c, n_tensors) || !gguf_cur_u64(c, n_kv))
        return dsv4_fail(err, DSV4_ERR_FORMAT,
                         "truncated header: tensor and key counts need 24 bytes, file has %llu",
                         (unsigned long long)c->size);
    /* Bound both counts by the smallest possible entry sizes before allocating anything. */
    uint64_t left = gguf_cur_left(c);
    if (*n_kv > left / GGUF_MIN_KV_BYTES)
        return dsv4_fail(
            err, DSV4_ERR_FORMAT,
            "key count %llu cannot fit in the %llu bytes after the header (each entry needs >= %u)",
            (unsigned long long)*n_kv, (unsigned long long)left, GGUF_MIN_KV_BYTES);
    left -= *n_kv * GGUF_MIN_KV_BYTES;
    if (*n_tensors > left / GGUF_MIN_TENSOR_BYTES)
        return dsv4_fail(err, DSV4_ERR_FORMAT,
                         "tensor count %llu cannot fit in the file (%llu bytes left after the minimal key "
                         "entries, each tensor entry needs >= %u)",
                         (unsigned long long)*n_tensors, (unsigned long long)left, GGUF_MIN_TENSOR_BYTES);
    return DSV4_OK;
}

static dsv4_status parse_image(gguf_file *f, dsv4_error *err) {
    gguf_cursor c = {f->base, f->size, 0};
    uint64_t n_tensors = 0, n_kv = 0;
    dsv4_status st = gguf_parse_header(f, &c, &n_tensors, &n_kv, err);
    if (st == DSV4_OK) st = gguf_parse_kvs(f, &c, n_kv, err);
    if (st == DSV4_OK) st = gguf_parse_tensors(f, &c, n_tensors, err);
    return st;
}

static dsv4_status new_handle(const char *path, gguf_file **out, dsv4_error *err) {
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory for a GGUF handle");
    size_t n = strlen(path);
    f->path = malloc(n + 1);
    if (!f->path) {
        free(f);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory for a GGUF handle");
    }
    memcpy(f->path, path, n + 1);
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    *out = f;
    return DSV4_OK;
}

/* Validates f->base/f->size; on failure frees f and prefixes the message with the path. */
static dsv4_status finish_open(gguf_file *f, gguf_file **out, dsv4_error *err) {
    dsv4_status st = parse_image(f, err);
    if (st != DSV4_OK) {
        dsv4_error_prefix(err, "%s: ", f->path);
        gguf_close(f);
        return st;
    }
    *out = f;
    return DSV4_OK;
}

dsv4_status gguf_open_memory(const void *data, size_t size, gguf_file **out, dsv4_error *err) {
    if (!out) return dsv4_fail(err, DSV4_ERR_INVALID, "gguf_open_memory: out is NULL");
    *out = NULL;
    if (!data && size) return dsv4_fail(err, DSV4_ERR_INVALID, "gguf_open_memory: data is NULL");
    gguf_file *f = NULL;
    dsv4_status st = new_handle("<memory>", &f, err);
    if (st != DSV4_OK) return st;
    f->base = data ? data : (const uint8_t *)"";
    f->size = size;
    return finish_open(f, out, err);
}

dsv4_status gguf_open(const char *path, gguf_file **out, dsv4_error *err) {
    if (!out) return dsv4_fail(err, DSV4_ERR_INVALID, "gguf_open: out is NULL");
    *out = NULL;
    if (!path) return dsv4_fail(err, DSV4_ERR_INVALID, "gguf_open: path is NULL");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return dsv4_fail(err, e == ENOENT ? DSV4_ERR_NOT_FOUND : DSV4_ERR_IO, "%s: cannot open: %s", path,
                         strerror(e));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return dsv4_fail(err, DSV4_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return dsv4_fail(err, DSV4_ERR_INVALID, "%s: not a regular file", path);
    }
    if (sb.st_size <= 0) {
        close(fd);
        return dsv4_fail(err, DSV4_ERR_FORMAT, "%s: file is empty, not a GGUF file", path);
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        close(fd);
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "%s: file too large to map", path);
    }
    size_t size = (size_t)sb.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd); /* the mapping keeps the file alive */
    if (map == MAP_FAILED)
        return dsv4_fail(err, map_errno == ENOMEM ? DSV4_ERR_NOMEM : DSV4_ERR_IO,
                         "%s: mmap of %zu bytes failed: %s", path, size, strerror(map_errno));
    gguf_file *f = NULL;
    dsv4_status st = new_handle(path, &f, err);
    if (st != DSV4_OK) {
        munmap(map, size);
        return st;
    }
    f->map = map;
    f->map_size = size;
    f->base = map;
    f->size = size;
    return finish_open(f, out, err);
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    free(f->kvs);
    free(f->str_offsets);
    gguf_hash_free(&f->kv_hash);
    free(f->tensors);
    free(f->name_pool);
    gguf_hash_free(&f->tensor_hash);
    if (f->map) munmap(f->map, (size_t)f->map_size);
    free(f->path);
    free(f);
}

const char *gguf_path(const gguf_file *f) { return f ? f->path : NULL; }
uint64_t gguf_file_size(const gguf_file *f) { return f ? f->size : 0; }
const uint8_t *gguf_base(const gguf_file *f) { return f ? f->base : NULL; }
uint32_t gguf_version(const gguf_file *f) { return f ? f->version : 0; }
uint32_t gguf_alignment(const gguf_file *f) { return f ? f->alignment : 0; }
uint64_t gguf_data_offset(const gguf_file *f) { return f ? f->data_offset : 0; }

uint64_t gguf_kv_count(const gguf_file *f) { return f ? f->n_kv : 0; }
const gguf_kv *gguf_kv_at(const gguf_file *f, uint64_t i) { return f && i < f->n_kv ? &f->kvs[i] : NULL; }
uint64_t gguf_tensor_count(const gguf_file *f) { return f ? f->n_tensors : 0; }
const gguf_tensor *gguf_tensor_at(const gguf_file *f, uint64_t i) {
    return f && i < f->n_tensors ? &f->tensors[i] : NULL;
}
