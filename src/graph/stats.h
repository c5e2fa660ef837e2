/* Execution statistics kept by the graph: tier transitions and fused-op selection (DESIGN.md
 * §1-§3). Tests read them to prove which transition mode and which path ran. */
#ifndef DSV4_GRAPH_STATS_H
#define DSV4_GRAPH_STATS_H

#include <stdint.h>

#include "backend/backend.h"
#include "backend/tier_copy.h"

/* decode: one token crosses (copies HC x EMBD floats); batch: a prefill chunk of n > 1 tokens
 * crosses once (n x HC x EMBD floats); nocopy: the tier becomes active without copying
 * (embedding start, allocation, KV preparation, snapshots). */
typedef enum dsv4_tier_mode {
    DSV4_TIER_DECODE = 0,
    DSV4_TIER_BATCH,
    DSV4_TIER_NOCOPY,
    DSV4_TIER_MODES
} dsv4_tier_mode;

const char *dsv4_tier_mode_name(dsv4_tier_mode m);

/* Per fused op: selected = the fused op ran and its result was used; fallback = it was tried and
 * failed, the unfused sequence ran; faulted = those fallbacks injected by DSV4_FAULT; skipped =
 * not tried (fusion off, disabled by name, or available() said no). */
typedef struct dsv4_fusion_counts {
    uint64_t selected, fallback, faulted, skipped;
} dsv4_fusion_counts;

typedef struct dsv4_exec_stats {
    uint64_t tier_switches[DSV4_TIER_MODES];
    uint64_t tier_bytes[DSV4_TIER_MODES];
    uint64_t xcopy[DSV4_XCOPY_PATHS]; /* cross-tier copies by path */
    dsv4_fusion_counts fusion[DSV4_FUSED_COUNT];
    /* decode steps the backend recorded and ran as a whole (step_begin/step_end), and recordings
     * that failed so the step was issued again unrecorded */
    uint64_t steps_recorded, steps_unrecorded;
    /* host microseconds of recorded decode steps: recording the next step while one runs
     * (prepare_next), and then waiting for the running step's logits. A wait near zero means the
     * host, not the device, sets the pace. */
    uint64_t step_prepare_us, step_wait_us;
    /* attention of prefill chunks: layer chunks run with the batched ops, and tokens x layers run
     * by the per-token loop (decode, n == 1, or no batched ops / DSV4_PREFILL_SERIAL=1) */
    uint64_t attn_chunks, attn_serial_tokens;
} dsv4_exec_stats;

/* "hc_pre_norm", ... (NULL for an unknown op). */
const char *dsv4_fusion_name(dsv4_fused_op op);
/* Comma-separated fusion names -> bit mask (bit = dsv4_fused_op); "all" sets every bit. */
dsv4_status dsv4_fusion_mask(const char *list, const char *what, uint32_t *mask, dsv4_error *err);

#endif
