/* dsv4 public API: what the programs (dsv4, dsv4-server, dsv4-bench) build on.
 *
 *   engine   src/engine/engine.h   load a GGUF, choose a backend (cpu | cuda), sessions with KV
 *                                  state, prefill/decode, logits, snapshots and checkpoints
 *   text     src/text/tokenizer.h  byte-level BPE with the official pre-tokenizer
 *            src/text/chat.h       chat rendering (CLI tokens, server text), think modes, DSML calls
 *            src/text/detok.h      streaming UTF-8-safe detokenization
 *            src/text/sampler.h    temperature / top-k / min-p / top-p with ds4's RNG
 *            src/text/dsml.h       tools block and streaming DSML tool-call parser
 *
 * Errors: every function returns a dsv4_status and fills a dsv4_error (common/status.h). */
#ifndef DSV4_H
#define DSV4_H

#include "common/status.h"
#include "engine/engine.h"
#include "text/chat.h"
#include "text/detok.h"
#include "text/dsml.h"
#include "text/sampler.h"
#include "text/tokenizer.h"

#endif
