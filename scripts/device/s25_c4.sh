#!/usr/bin/env bash
# Session 25 call 4: attn_chunk_qnr also rotates the heads back (inverse RoPE) on the output's way out, against
# call 3's build (.carry/bin/bench/dsv4-bench-old, 29eba75) interleaved: test_cuda_attn (bitwise checks), flash4
# logits byte-identical with the fusion on / disabled / faulted (chunk 2048 and 300), the full flash q2 2K prefill.
set -u
SUMMARY=s25_c4
. "$(dirname "$0")/ab_lib.sh"
ab_flash4
timeout 150 "$C/test_cuda_attn" >"$OUT/test_cuda_attn.txt" 2>&1
say "test_cuda_attn rc $?: $(tail -1 "$OUT/test_cuda_attn.txt")"
grep -E "^FAIL|qnr" "$OUT/test_cuda_attn.txt" | head -6 | tee -a "$S"
for ch in 2048 300; do
  dump on-$ch "$C/dsv4" $ch toks-long X=1
  dump dis-$ch "$C/dsv4" $ch toks-long DSV4_FUSION_DISABLE=attn_chunk_qnr
  dump flt-$ch "$C/dsv4" $ch toks-long DSV4_FAULT=attn_chunk_qnr
  same on-$ch dis-$ch; same on-$ch flt-$ch
  grep -h "attn_chunk_qnr" "$OUT"/f.on-$ch.err "$OUT"/f.flt-$ch.err | head -2 | tee -a "$S"
done
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 64"
for i in 1 2; do
  run new-$i "$A2" X=1
  BENCH="$OLD" BENCH_COMMIT=29eba75 run old-$i "$A2" X=1
done
rm -f /dev/shm/flash-q2.gguf
ab_finish "$SUMMARY"
