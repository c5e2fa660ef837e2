/* Synthesized model files: metadata + tensor directory from the layout table, then the tensor data
 * generated in chunks of a few MB by worker threads and pwrite'n into place. Memory stays at one
 * chunk buffer per thread, whatever the model size. */
#include "model/synth.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "quant/quant.h"

#define CHUNK_BYTES (4u << 20)

static uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static uint64_t rng_next(uint64_t *s) { return mix64(*s += 0x9e3779b97f4a7c15ull); }
static float rng_unit(uint64_t *s) { return (float)((rng_next(s) >> 40) * (1.0 / 16777216.0)); } /* [0,1) */
static float rng_sym(uint64_t *s, float a) { return (2.0f * rng_unit(s) - 1.0f) * a; }           /* U(-a,a) */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------- metadata ---- */

dsv4_status dsv4_synth_write_metadata(gguf_writer *w, const dsv4_config *cfg, const char *name,
                                      const dsv4_synth_vocab *v, dsv4_error *err) {
    dsv4_status st;
#define TRY(x)                                                                                               \
    do {                                                                                                     \
        if ((st = (x)) != DSV4_OK) return st;                                                                \
    } while (0)
    TRY(gguf_writer_set_str(w, "general.architecture", "deepseek4", err));
    TRY(gguf_writer_set_str(w, "general.name", name ? name : "dsv4-synth", err));
    TRY(gguf_writer_set_u32(w, "general.quantization_version", 2, err));
    TRY(dsv4_config_write_metadata(cfg, w, NULL, err));
    TRY(gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2", err));
    TRY(gguf_writer_set_str(w, "tokenizer.ggml.pre", "joyai-llm", err));
    TRY(gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens, NULL, v->n_tokens,
                                err));
    TRY(gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merges, NULL, v->n_merges,
                                err));
    TRY(gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", v->bos_id, err));
    TRY(gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", v->eos_id, err));
#undef TRY
    return DSV4_OK;
}

/* ---------------------------------------------------------------- values ---- */

static uint64_t tensor_rows(const dsv4_layout_tensor *t) { return t->ne[1] * t->ne[2] * t->ne[3]; }

static void fill_tid2eid(const dsv4_config *cfg, uint64_t *rng, uint64_t n_rows, int32_t *dst) {
    uint32_t used = cfg->n_expert_used;
    for (uint64_t r = 0; r < n_rows; r++) {
        int32_t *row = dst + r * used;
        for (uint32_t k = 0; k < used; k++) {
            int32_t e;
            bool dup;
            do { /* rejection keeps the choice uniform over the experts not yet in the row */
                e = (int32_t)(rng_next(rng) % cfg->n_expert);
                dup = false;
                for (uint32_t j = 0; j < k; j++) dup |= row[j] == e;
            } while (dup);
            row[k] = e;
        }
    }
}

static float small_value(dsv4_init init, uint64_t *rng) {
    switch (init) {
    case DSV4_INIT_NORM: return 1.0f + rng_sym(rng, 0.05f);
    case DSV4_INIT_HC_SCALE: return 0.5f * (1.0f + rng_sym(rng, 0.1f));
    case DSV4_INIT_HC_BASE: return rng_sym(rng, 0.1f);
    case DSV4_INIT_SINK: return rng_sym(rng, 0.5f);
    case DSV4_INIT_BIAS: return rng_sym(rng, 0.01f);
    case DSV4_INIT_APE: return rng_sym(rng, 0.05f);
    default: return 0.0f;
    }
}

dsv4_status dsv4_synth_fill_rows(const dsv4_config *cfg, const dsv4_layout_tensor *t, uint32_t type,
                                 uint64_t seed, uint64_t tensor_index, uint64_t row0, uint64_t n_rows,
                                 void *dst, float *scratch, dsv4_error *err) {
    uint64_t rng = mix64(seed ^ mix64(tensor_index * 0x100000001b3ull + 1) ^ mix64(row0 + 0x51ed27ull));
    uint64_t row_bytes = 0;
    if (!dsv4_type_row_bytes(type, t->ne[0], &row_bytes))
        return dsv4_fail(err, DSV4_ERR_INVALID, "tensor '%s': type %s cannot hold rows of %llu elements",
                         t->name, dsv4_type_name(type), (unsigned long long)t->ne[0]);
    uint8_t *out = dst;
    dsv4_init init = t->e->init;
    if (init == DSV4_INIT_TID2EID) {
        if (type != DSV4_TYPE_I32)
            return dsv4_fail(err, DSV4_ERR_INVALID, "tensor '%s': tid2eid must be I32, got %s", t->name,
                             dsv4_type_name(type));
        fill_tid2eid(cfg, &rng, n_rows, (int32_t *)dst);
        return DSV4_OK;
    }
    if (init == DSV4_INIT_MATMUL || init == DSV4_INIT_EMBD) {
        float std = init == DSV4_INIT_EMBD ? 1.0f : 1.0f / sqrtf((float)t->ne[0]);
        for (uint64_t r = 0; r < n_rows; r++)
            if (!quant_fill_random_row(type, &rng, std, out + r * row_bytes, (int64_t)t->ne[0]))
                return dsv4_fail(err, DSV4_ERR_INVALID, "tensor '%s': cannot generate random %s rows",
                                 t->name, dsv4_type_name(type));
        return DSV4_OK;
    }
    for (uint64_t r = 0; r < n_rows; r++) {
        for (uint64_t i = 0; i < t->ne[0]; i++) scratch[i] = small_value(init, &rng);
        if (!quant_quantize_row(type, scratch, out + r * row_bytes, (int64_t)t->ne[0]))
            return dsv4_fail(err, DSV4_ERR_INVALID, "tensor '%s': cannot quantize rows to %s", t->name,
                             dsv4_type_name(type));
    }
    return DSV4_OK;
}

/* ---------------------------------------------------------------- writing ---- */

typedef struct job {
    const dsv4_layout_tensor *t;
    uint32_t type;
    uint64_t index;  /* tensor index (seed) */
    uint64_t offset; /* absolute file offset */
    uint64_t row_bytes;
    uint64_t rows;
    uint64_t rows_per_chunk;
    uint64_t first_chunk; /* global chunk number of this tensor's chunk 0 */
} job;

typedef struct shared_state {
    const dsv4_config *cfg;
    const char *tmp;
    int fd;
    uint64_t seed;
    job *jobs;
    size_t n_jobs;
    uint64_t n_chunks;
    size_t buf_bytes, scratch_floats;
    const volatile sig_atomic_t *cancel;
    atomic_uint_fast64_t next_chunk;
    atomic_uint_fast64_t done_bytes;
    atomic_bool stop;
    atomic_uint n_finished;
    pthread_mutex_t err_mu;
    dsv4_status st;
    dsv4_error err;
} shared_state;

static dsv4_status pwrite_full(int fd, const void *p, uint64_t n, uint64_t off, const char *path,
                               const char *what, dsv4_error *err) {
    const uint8_t *b = p;
    while (n) {
        size_t step = n > (1u << 30) ? (1u << 30) : (size_t)n;
        ssize_t w = pwrite(fd, b, step, (off_t)off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = w < 0 ? errno : EIO;
            bool full = e == ENOSPC || e == EDQUOT;
            return dsv4_fail(err, full ? DSV4_ERR_NOSPACE : DSV4_ERR_IO, "writing %s to '%s' failed: %s%s",
                             what, path, strerror(e), full ? " (disk full)" : "");
        }
        b += w;
        off += (uint64_t)w;
        n -= (uint64_t)w;
    }
    return DSV4_OK;
}

static size_t find_job(const shared_state *s, uint64_t chunk) {
    size_t lo = 0, hi = s->n_jobs; /* last job with first_chunk <= chunk */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (s->jobs[mid].first_chunk <= chunk)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static dsv4_status do_chunk(shared_state *s, uint64_t chunk, uint8_t *buf, float *scratch, dsv4_error *err) {
    const job *j = &s->jobs[find_job(s, chunk)];
    uint64_t c = chunk - j->first_chunk;
    uint64_t row0 = c * j->rows_per_chunk;
    uint64_t nr = j->rows - row0 < j->rows_per_chunk ? j->rows - row0 : j->rows_per_chunk;
    dsv4_status st =
        dsv4_synth_fill_rows(s->cfg, j->t, j->type, s->seed, j->index, row0, nr, buf, scratch, err);
    if (st != DSV4_OK) return st;
    char what[80];
    snprintf(what, sizeof what, "tensor '%s'", j->t->name);
    st = pwrite_full(s->fd, buf, nr * j->row_bytes, j->offset + row0 * j->row_bytes, s->tmp, what, err);
    if (st == DSV4_OK) atomic_fetch_add(&s->done_bytes, nr * j->row_bytes);
    return st;
}

static void record_error(shared_state *s, dsv4_status st, const dsv4_error *e) {
    pthread_mutex_lock(&s->err_mu);
    if (s->st == DSV4_OK) {
        s->st = st;
        s->err = *e;
    }
    pthread_mutex_unlock(&s->err_mu);
    atomic_store(&s->stop, true);
}

static void *worker(void *arg) {
    shared_state *s = arg;
    uint8_t *buf = malloc(s->buf_bytes);
    float *scratch = malloc(s->scratch_floats * sizeof(float));
    dsv4_error e;
    dsv4_error_clear(&e);
    if (!buf || !scratch) {
        dsv4_fail(&e, DSV4_ERR_NOMEM, "synth: out of memory for a %zu-byte chunk buffer", s->buf_bytes);
        record_error(s, DSV4_ERR_NOMEM, &e);
    } else {
        while (!atomic_load(&s->stop)) {
            if (s->cancel && *s->cancel) {
                dsv4_fail(&e, DSV4_ERR_CANCELLED, "writing '%s' was cancelled", s->tmp);
                record_error(s, DSV4_ERR_CANCELLED, &e);
                break;
            }
            uint64_t c = atomic_fetch_add(&s->next_chunk, 1);
            if (c >= s->n_chunks) break;
            dsv4_status st = do_chunk(s, c, buf, scratch, &e);
            if (st != DSV4_OK) {
                record_error(s, st, &e);
                break;
            }
        }
    }
    free(buf);
    free(scratch);
    atomic_fetch_add(&s->n_finished, 1);
    return NULL;
}

static unsigned online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (unsigned)n : 1;
}

static dsv4_status run_workers(shared_state *s, unsigned n_threads, const dsv4_synth_opts *o, uint64_t total,
                               dsv4_error *err) {
    if (n_threads > s->n_chunks) n_threads = s->n_chunks ? (unsigned)s->n_chunks : 1;
    pthread_t *th = calloc(n_threads, sizeof *th);
    if (!th) return dsv4_fail(err, DSV4_ERR_NOMEM, "synth: out of memory for %u threads", n_threads);
    unsigned started = 0;
    for (; started < n_threads; started++)
        if (pthread_create(&th[started], NULL, worker, s) != 0) break;
    if (started == 0) {
        free(th);
        return dsv4_fail(err, DSV4_ERR_IO, "synth: cannot start worker threads");
    }
    double last = now_s();
    while (atomic_load(&s->n_finished) < started) {
        struct timespec d = {0, 50 * 1000 * 1000};
        nanosleep(&d, NULL);
        if (o->progress && now_s() - last >= 0.5) {
            last = now_s();
            o->progress(o->progress_ud, atomic_load(&s->done_bytes), total);
        }
    }
    for (unsigned i = 0; i < started; i++) pthread_join(th[i], NULL);
    free(th);
    if (o->progress && s->st == DSV4_OK) o->progress(o->progress_ud, atomic_load(&s->done_bytes), total);
    if (s->st != DSV4_OK) {
        if (err) *err = s->err;
        return s->st;
    }
    return DSV4_OK;
}

static dsv4_status declare_tensors(gguf_writer *w, const dsv4_synth_opts *o, const dsv4_layout_tensor *ts,
                                   size_t n, job *jobs, dsv4_error *err) {
    for (size_t i = 0; i < n; i++) {
        uint32_t type = dsv4_type_recipe_type(&o->types, ts[i].e->cls);
        uint64_t row_bytes;
        if (!dsv4_type_row_bytes(type, ts[i].ne[0], &row_bytes))
            return dsv4_fail(
                err, DSV4_ERR_INVALID,
                "tensor '%s': type %s cannot hold rows of %llu elements (choose another --quant or shape)",
                ts[i].name, dsv4_type_name(type), (unsigned long long)ts[i].ne[0]);
        uint64_t idx;
        dsv4_status st = gguf_writer_add_tensor(w, ts[i].name, type, ts[i].n_dims, ts[i].ne, &idx, err);
        if (st != DSV4_OK) return st;
        jobs[i] =
            (job){.t = &ts[i], .type = type, .index = i, .row_bytes = row_bytes, .rows = tensor_rows(&ts[i])};
        jobs[i].rows_per_chunk = row_bytes >= CHUNK_BYTES ? 1 : CHUNK_BYTES / row_bytes;
    }
    return DSV4_OK;
}

/* Whether the tensor's bytes are written (the others stay a hole of zeros). */
static bool writes_values(const dsv4_synth_opts *o, const dsv4_layout_tensor *t) {
    if (o->sparse) return t->e->init == DSV4_INIT_TID2EID;
    if (o->sparse_experts) return t->e->group != DSV4_TG_ROUTED;
    return true;
}

dsv4_status dsv4_synth_write(const dsv4_synth_opts *o, const char *path, dsv4_synth_stats *stats,
                             dsv4_error *err) {
    double t0 = now_s();
    const dsv4_config *cfg = o->cfg;
    dsv4_status st = dsv4_config_validate(cfg, err);
    if (st != DSV4_OK) return st;
    if (stats) memset(stats, 0, sizeof *stats);

    dsv4_synth_vocab own_vocab = {0};
    const dsv4_synth_vocab *vocab = o->vocab;
    dsv4_layout_tensor *ts = NULL;
    size_t n = 0;
    job *jobs = NULL;
    gguf_writer *w = NULL;
    char *tmp = NULL;
    int fd = -1;
    bool created = false;
    if (!vocab) {
        st = dsv4_synth_vocab_make(cfg->n_vocab, &own_vocab, err);
        if (st != DSV4_OK) return st;
        vocab = &own_vocab;
    }
    st = dsv4_layout_build(cfg, DSV4_LAYOUT_SYNTH, &ts, &n, err);
    if (st != DSV4_OK) goto done;
    jobs = calloc(n ? n : 1, sizeof *jobs);
    w = gguf_writer_new();
    tmp = malloc(strlen(path) + 5);
    if (!jobs || !w || !tmp) {
        st = dsv4_fail(err, DSV4_ERR_NOMEM, "synth: out of memory");
        goto done;
    }
    sprintf(tmp, "%s.tmp", path);
    st = dsv4_synth_write_metadata(w, cfg, o->name, vocab, err);
    if (st != DSV4_OK) goto done;
    st = declare_tensors(w, o, ts, n, jobs, err);
    if (st != DSV4_OK) goto done;

    uint64_t total = 0, written = 0, n_chunks = 0;
    size_t buf_bytes = 0, scratch_floats = 1;
    for (size_t i = 0; i < n; i++) {
        jobs[i].offset = gguf_writer_tensor_offset(w, i);
        total += gguf_writer_tensor_nbytes(w, i);
        if (!writes_values(o, &ts[i])) continue;
        written += gguf_writer_tensor_nbytes(w, i);
        jobs[i].first_chunk = n_chunks;
        n_chunks += (jobs[i].rows + jobs[i].rows_per_chunk - 1) / jobs[i].rows_per_chunk;
        uint64_t b = jobs[i].rows_per_chunk * jobs[i].row_bytes;
        if (b > buf_bytes) buf_bytes = (size_t)b;
        if (ts[i].ne[0] > scratch_floats) scratch_floats = (size_t)ts[i].ne[0];
    }
    uint64_t file_size = gguf_writer_file_size(w);

    fd = open(tmp, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        st = dsv4_fail(err, (e == ENOSPC || e == EDQUOT) ? DSV4_ERR_NOSPACE : DSV4_ERR_IO,
                       "cannot create '%s': %s", tmp, strerror(e));
        goto done;
    }
    created = true;
    st = gguf_writer_write_header_fd(w, fd, err);
    if (st != DSV4_OK) goto done;
    if (ftruncate(fd, (off_t)file_size) != 0) {
        int e = errno;
        st = dsv4_fail(err, (e == ENOSPC || e == EDQUOT || e == EFBIG) ? DSV4_ERR_NOSPACE : DSV4_ERR_IO,
                       "cannot size '%s' to %llu bytes: %s", tmp, (unsigned long long)file_size, strerror(e));
        goto done;
    }

    /* Jobs that write nothing (sparse) are dropped so chunk numbers map onto the remaining ones. */
    size_t nj = 0;
    for (size_t i = 0; i < n; i++)
        if (writes_values(o, &ts[i])) jobs[nj++] = jobs[i];
    shared_state s = {.cfg = cfg,
                      .tmp = tmp,
                      .fd = fd,
                      .seed = o->seed,
                      .jobs = jobs,
                      .n_jobs = nj,
                      .n_chunks = n_chunks,
                      .buf_bytes = buf_bytes,
                      .scratch_floats = scratch_floats,
                      .cancel = o->cancel};
    atomic_init(&s.next_chunk, 0);
    atomic_init(&s.done_bytes, 0);
    atomic_init(&s.stop, false);
    atomic_init(&s.n_finished, 0);
    pthread_mutex_init(&s.err_mu, NULL);
    if (n_chunks)
        st = run_workers(&s, o->n_threads ? o->n_threads : online_cpus(), o, o->sparse ? 0 : written, err);
    pthread_mutex_destroy(&s.err_mu);
    if (st != DSV4_OK) goto done;

    int rc = close(fd);
    fd = -1;
    if (rc != 0) {
        int e = errno;
        st = dsv4_fail(err, (e == ENOSPC || e == EDQUOT) ? DSV4_ERR_NOSPACE : DSV4_ERR_IO,
                       "closing '%s' failed: %s", tmp, strerror(e));
        goto done;
    }
    if (rename(tmp, path) != 0) {
        st = dsv4_fail(err, DSV4_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
        goto done;
    }
    if (stats) {
        stats->n_tensors = n;
        stats->tensor_bytes = total;
        stats->file_size = file_size;
        stats->data_offset = gguf_writer_data_offset(w);
        stats->seconds = now_s() - t0;
    }
done:
    if (fd >= 0) close(fd);
    if (st != DSV4_OK && created) unlink(tmp);
    free(tmp);
    gguf_writer_free(w);
    free(jobs);
    free(ts);
    dsv4_synth_vocab_free(&own_vocab);
    return st;
}
