#!/usr/bin/env bash
# Session 29 call 2 (~5 min; attn_qnr's CUDA gate is closed by default until this has run, so the runs open it with DSV4_CUDA_ATTN_QNR=1 and the reference closes it with =0): the decode attention's query norm + RoPE in its query load (DSV4_FUSED_ATTN_QNR,
# `attn_qnr`, layers without the indexer). test_cuda_attn's attention_qnr lines (fused == q_norm_rope +
# attention_rope, bitwise), cuda_ops_check on flash4, flash4 teacher-forced logits with the fusion against
# DSV4_FUSION_DISABLE=attn_qnr and DSV4_FAULT=attn_qnr at chunk 1 and 2048 (byte-identical) and its counter,
# then full flash q2 2K decode interleaved x2 and 32K once each.
set -u
SUMMARY=s29_c2
. "$(dirname "$0")/ab_lib.sh"
ab_flash4
timeout 200 "$C/test_cuda_attn" >"$OUT/test_cuda_attn.txt" 2>&1
say "test_cuda_attn rc $?: $(tail -1 "$OUT/test_cuda_attn.txt")"
grep -E "^FAIL|attention_qnr" "$OUT/test_cuda_attn.txt" | cut -c1-160 | head -30 | tee -a "$S"
ab_ops_check "attention"
for ch in 1 2048; do
  dump "new-c$ch" "$C/dsv4" $ch toks-long DSV4_CUDA_ATTN_QNR=1
  vs_env "off-c$ch" $ch toks-long DSV4_CUDA_ATTN_QNR=0
  vs_env "flt-c$ch" $ch toks-long DSV4_CUDA_ATTN_QNR=1 DSV4_FAULT=attn_qnr
  grep -iE "attn_qnr|attn_rope|q_norm_rope " "$OUT/f.new-c$ch.err" "$OUT/f.off-c$ch.err" "$OUT/f.flt-c$ch.err" | head -12 | tee -a "$S"
done
say "checks done at ${SECONDS} s"
A="--ctx-start 2048 --ctx-max 2048 --gen-tokens 64"
for i in 1 2; do
  run "def-$i" "$A" DSV4_CUDA_ATTN_QNR=1
  run "off-$i" "$A" DSV4_CUDA_ATTN_QNR=0
done
B="--ctx-start 32768 --ctx-max 32768 --gen-tokens 32"
run "def32k" "$B" DSV4_CUDA_ATTN_QNR=1
run "off32k" "$B" DSV4_CUDA_ATTN_QNR=0
rm -f /dev/shm/flash-q2.gguf
ab_finish "$SUMMARY"
