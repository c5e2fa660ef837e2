/* Writing a GGUF image: the header to an fd, or a whole file through a temp file and rename. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/writer_internal.h"

static dsv4_status write_errno(dsv4_error *err, int e, const char *what, const char *where, uint64_t n,
                               uint64_t off) {
    dsv4_status code = (e == ENOSPC || e == EDQUOT) ? DSV4_ERR_NOSPACE : DSV4_ERR_IO;
    return dsv4_fail(err, code, "%s: writing %s (%llu bytes at offset %llu) failed: %s", where, what,
                     (unsigned long long)n, (unsigned long long)off, e ? strerror(e) : "no progress");
}

static dsv4_status pwrite_all(int fd, const void *buf, uint64_t n, uint64_t off, const char *what,
                              const char *where, dsv4_error *err) {
    const uint8_t *p = buf;
    uint64_t done = 0;
    while (done < n) {
        size_t chunk = n - done > (1u << 30) ? (1u << 30) : (size_t)(n - done);
        if (off + done > (uint64_t)INT64_MAX) return write_errno(err, EFBIG, what, where, n, off);
        ssize_t r = pwrite(fd, p + done, chunk, (off_t)(off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return write_errno(err, r < 0 ? errno : 0, what, where, n, off);
        done += (uint64_t)r;
    }
    return DSV4_OK;
}

dsv4_status gguf_writer_serialize_header(gguf_writer *w, uint8_t **out, size_t *out_len, dsv4_error *err) {
    *out = NULL;
    *out_len = 0;
    if (!gguf_writer_layout(w))
        return dsv4_fail(err, DSV4_ERR_RANGE, "gguf writer: file size overflows 64 bits");
    if (w->data_offset > SIZE_MAX) return dsv4_fail(err, DSV4_ERR_NOMEM, "gguf writer: header too large");
    size_t n = (size_t)w->data_offset;
    uint8_t *b = calloc(n, 1); /* zeroed, so the padding before the data section is zeros */
    if (!b) return dsv4_fail(err, DSV4_ERR_NOMEM, "gguf writer: out of memory for a %zu-byte header", n);
    uint32_t magic = GGUF_MAGIC, version = GGUF_VERSION;
    uint64_t nt = w->n_t, nkv = w->n_kv;
    size_t o = 0;
    memcpy(b + o, &magic, 4), o += 4;
    memcpy(b + o, &version, 4), o += 4;
    memcpy(b + o, &nt, 8), o += 8;
    memcpy(b + o, &nkv, 8), o += 8;
    if (w->kv.n) memcpy(b + o, w->kv.p, w->kv.n);
    o += w->kv.n;
    for (uint64_t i = 0; i < w->n_t; i++) {
        const gguf_wtensor *t = &w->t[i];
        uint64_t len = t->name_len;
        memcpy(b + o, &len, 8), o += 8;
        memcpy(b + o, t->name, t->name_len), o += t->name_len;
        memcpy(b + o, &t->n_dims, 4), o += 4;
        memcpy(b + o, t->ne, 8ull * t->n_dims), o += 8ull * t->n_dims;
        memcpy(b + o, &t->type, 4), o += 4;
        memcpy(b + o, &t->rel, 8), o += 8;
    }
    *out = b;
    *out_len = n;
    return DSV4_OK;
}

dsv4_status gguf_writer_write_header_fd(gguf_writer *w, int fd, dsv4_error *err) {
    if (!w) return dsv4_fail(err, DSV4_ERR_INVALID, "gguf writer is NULL");
    if (fd < 0) return dsv4_fail(err, DSV4_ERR_INVALID, "gguf writer: invalid file descriptor %d", fd);
    uint8_t *b = NULL;
    size_t n = 0;
    dsv4_status st = gguf_writer_serialize_header(w, &b, &n, err);
    if (st == DSV4_OK) st = pwrite_all(fd, b, n, 0, "the GGUF header", "gguf writer", err);
    free(b);
    return st;
}

/* Everything after the temp file exists; the caller removes it on failure. */
static dsv4_status write_body(gguf_writer *w, int fd, const char *tmp, dsv4_error *err) {
    if (fchmod(fd, 0644) != 0)
        return dsv4_fail(err, DSV4_ERR_IO, "%s: chmod failed: %s", tmp, strerror(errno));
    uint8_t *b = NULL;
    size_t n = 0;
    dsv4_status st = gguf_writer_serialize_header(w, &b, &n, err);
    if (st == DSV4_OK) st = pwrite_all(fd, b, n, 0, "the GGUF header", tmp, err);
    free(b);
    for (uint64_t i = 0; i < w->n_t && st == DSV4_OK; i++) {
        const gguf_wtensor *t = &w->t[i];
        char what[128];
        snprintf(what, sizeof what, "tensor '%s'", gguf_printable_of(t->name, t->name_len).s);
        st = pwrite_all(fd, t->data, t->nbytes, w->data_offset + t->rel, what, tmp, err);
    }
    if (st != DSV4_OK) return st;
    /* Gaps between tensors and the final padding are holes, which read as zeros. */
    if (ftruncate(fd, (off_t)w->file_size) != 0) {
        int e = errno;
        return dsv4_fail(err, (e == ENOSPC || e == EDQUOT) ? DSV4_ERR_NOSPACE : DSV4_ERR_IO,
                         "%s: extending to %llu bytes failed: %s", tmp, (unsigned long long)w->file_size,
                         strerror(e));
    }
    if (fsync(fd) != 0) {
        int e = errno;
        return dsv4_fail(err, (e == ENOSPC || e == EDQUOT) ? DSV4_ERR_NOSPACE : DSV4_ERR_IO,
                         "%s: fsync failed: %s", tmp, strerror(e));
    }
    return DSV4_OK;
}

/* Makes the rename durable. File systems that cannot fsync a directory (EINVAL) are accepted. */
static dsv4_status sync_parent_dir(const char *path, dsv4_error *err) {
    size_t n = strlen(path);
    char *dir = malloc(n + 2);
    if (!dir) return dsv4_fail(err, DSV4_ERR_NOMEM, "%s: out of memory", path);
    memcpy(dir, path, n + 1);
    char *slash = strrchr(dir, '/');
    if (!slash)
        strcpy(dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    dsv4_status st = DSV4_OK;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        st = dsv4_fail(err, DSV4_ERR_IO, "%s: written, but its directory %s cannot be opened to sync: %s",
                       path, dir, strerror(errno));
    } else {
        if (fsync(fd) != 0 && errno != EINVAL && errno != ENOTSUP)
            st = dsv4_fail(err, DSV4_ERR_IO, "%s: written, but syncing directory %s failed: %s", path, dir,
                           strerror(errno));
        close(fd); /* read-only directory fd: nothing to flush */
    }
    free(dir);
    return st;
}

dsv4_status gguf_writer_write_file(gguf_writer *w, const char *path, dsv4_error *err) {
    if (!w) return dsv4_fail(err, DSV4_ERR_INVALID, "gguf writer is NULL");
    if (!path || !path[0]) return dsv4_fail(err, DSV4_ERR_INVALID, "gguf writer: path is NULL or empty");
    for (uint64_t i = 0; i < w->n_t; i++)
        if (!w->t[i].data)
            return dsv4_fail(err, DSV4_ERR_INVALID, "%s: tensor '%s' has no data attached", path,
                             gguf_printable_of(w->t[i].name, w->t[i].name_len).s);
    size_t n = strlen(path);
    static const char suffix[] = ".tmp-XXXXXX";
    char *tmp = malloc(n + sizeof suffix);
    if (!tmp) return dsv4_fail(err, DSV4_ERR_NOMEM, "%s: out of memory", path);
    memcpy(tmp, path, n);
    memcpy(tmp + n, suffix, sizeof suffix);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        dsv4_status code = (e == ENOSPC || e == EDQUOT) ? DSV4_ERR_NOSPACE : DSV4_ERR_IO;
        free(tmp);
        return dsv4_fail(err, code, "%s: cannot create a temporary file beside it: %s", path, strerror(e));
    }
    dsv4_status st = write_body(w, fd, tmp, err);
    if (close(fd) != 0 && st == DSV4_OK) {
        int e = errno;
        st = dsv4_fail(err, (e == ENOSPC || e == EDQUOT) ? DSV4_ERR_NOSPACE : DSV4_ERR_IO,
                       "%s: close failed: %s", tmp, strerror(e));
    }
    if (st == DSV4_OK && rename(tmp, path) != 0)
        st = dsv4_fail(err, DSV4_ERR_IO, "%s: renaming %s into place failed: %s", path, tmp, strerror(errno));
    if (st != DSV4_OK)
        unlink(tmp);
    else
        st = sync_parent_dir(path, err);
    free(tmp);
    return st;
}
