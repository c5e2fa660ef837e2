/* Random-weight model files of the DeepSeek V4 family (any shape of the family, any type recipe),
 * written from the same layout table the binder reads. Used by `dsv4-gguf synth` and by tests.
 * Values are sane rather than zero: matmul weights have std 1/sqrt(fan_in), norms are 1 + small
 * noise, tid2eid routes every token to n_expert_used distinct experts. Output is deterministic for a
 * given seed regardless of the thread count. */
#ifndef DSV4_MODEL_SYNTH_H
#define DSV4_MODEL_SYNTH_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/status.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "model/layout.h"

/* Token strings (GPT-2 byte-level) and merges ("A B", index = rank). */
typedef struct dsv4_synth_vocab {
    char **tokens;
    uint64_t n_tokens;
    char **merges;
    uint64_t n_merges;
    uint32_t bos_id, eos_id;
} dsv4_synth_vocab;

/* A synthetic byte-level vocabulary of exactly n_vocab tokens with the trainer's layout: id 0 BOS,
 * id 1 EOS, 256 byte tokens, generated merges of existing tokens (printable bytes first), the other
 * ds4 special tokens last. Needs n_vocab >= 263. For shapes where training a real BPE vocabulary of
 * that size is impractical (flash: 129280). */
dsv4_status dsv4_synth_vocab_make(uint32_t n_vocab, dsv4_synth_vocab *out, dsv4_error *err);
void dsv4_synth_vocab_free(dsv4_synth_vocab *v);

typedef struct dsv4_synth_opts {
    const dsv4_config *cfg;
    dsv4_type_recipe types;
    uint64_t seed;
    unsigned n_threads; /* 0 = online CPUs */
    bool sparse;        /* header + tid2eid only; the rest is a hole of the full size */
    /* Routed expert weights are a hole (they read as zeros); every other tensor holds its values, so
     * routing and attention are those of the random model. For placement and speed runs of files
     * larger than the disk (flash q4). */
    bool sparse_experts;
    const char *name;              /* general.name (NULL: "dsv4-synth") */
    const dsv4_synth_vocab *vocab; /* NULL: dsv4_synth_vocab_make(cfg->n_vocab) */
    /* Called on the calling thread about twice a second while data is written (may be NULL). */
    void (*progress)(void *ud, uint64_t done_bytes, uint64_t total_bytes);
    void *progress_ud;
    /* When non-NULL and set non-zero (e.g. by a signal handler), writing stops with
     * DSV4_ERR_CANCELLED and the partial file is removed. */
    const volatile sig_atomic_t *cancel;
} dsv4_synth_opts;

typedef struct dsv4_synth_stats {
    uint64_t n_tensors;
    uint64_t tensor_bytes; /* sum of tensor sizes, padding excluded */
    uint64_t file_size;
    uint64_t data_offset;
    double seconds;
} dsv4_synth_stats;

/* Write the model to path (via path.tmp + rename; the partial file is removed on any error, e.g.
 * a full disk). stats may be NULL. */
dsv4_status dsv4_synth_write(const dsv4_synth_opts *o, const char *path, dsv4_synth_stats *stats,
                             dsv4_error *err);

/* Declare the metadata (general.*, deepseek4.*, tokenizer.*) of a model on a writer. */
dsv4_status dsv4_synth_write_metadata(gguf_writer *w, const dsv4_config *cfg, const char *name,
                                      const dsv4_synth_vocab *vocab, dsv4_error *err);

/* Fill one tensor's rows [row0, row0+n_rows) (a row is ne[0] elements; 3-D tensors count
 * ne[1]*ne[2] rows) of `type` into dst. scratch holds at least ne[0] floats. Deterministic in
 * (seed, tensor index, row0). */
dsv4_status dsv4_synth_fill_rows(const dsv4_config *cfg, const dsv4_layout_tensor *t, uint32_t type,
                                 uint64_t seed, uint64_t tensor_index, uint64_t row0, uint64_t n_rows,
                                 void *dst, float *scratch, dsv4_error *err);

#endif
