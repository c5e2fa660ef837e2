#!/usr/bin/env bash
# Session 24 call 4: the prefill attention's Q loads batched (16 a thread in flight) and its output staged in shared
# memory then written as whole rows, against call 3's build (.carry/bin/bench/dsv4-bench-old, e50719d) interleaved;
# test_cuda_attn and cuda_ops_check; ncu durations of ft_kernel per layer; then the final defaults' long runs: 2K -> 32K
# and the 70K prompt + 128 tokens.
set -u
SUMMARY=s24_c4
. "$(dirname "$0")/ab_lib.sh"
ab_flash4
timeout 150 "$C/test_cuda_attn" >"$OUT/test_cuda_attn.txt" 2>&1
say "test_cuda_attn rc $?: $(tail -1 "$OUT/test_cuda_attn.txt")"; grep -E "^FAIL|TARGET" "$OUT/test_cuda_attn.txt" | head | tee -a "$S"
ops_moe flash4 X=1
grep -E "attention_chunk|hc_pre prefill" "$OUT/ops-flash4.txt" | cut -c1-200 | tee -a "$S"
env X=1 timeout 100 /usr/local/cuda/bin/ncu --section SpeedOfLight -k "regex:ft_kernel" -c 4 "$C/dsv4" -m "$M" \
  --backend cuda --chunk 2048 --ctx 4096 --tokens "$(cat "$W/toks-long")" --dump-logits "$W/ncu.bin" >"$OUT/ncu-ft.txt" 2>&1
say "== ncu ft rc $?"; grep -E "Duration" "$OUT/ncu-ft.txt" | sed 's/  */ /g' | tee -a "$S"
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 64"
for i in 1 2; do
  run new-$i "$A2" X=1
  BENCH="$OLD" BENCH_COMMIT=e50719d run old-$i "$A2" X=1
done
[ $SECONDS -lt 330 ] && run 32k "--ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64" X=1
[ $SECONDS -lt 450 ] && run 70k "--ctx-start 70000 --ctx-max 70000 --gen-tokens 128" X=1
grep -ho '"nonfinite[a-z_]*": [0-9]*' "$OUT"/*70k*.json 2>/dev/null | tee -a "$S"
rm -f /dev/shm/flash-q2.gguf
ab_finish "$SUMMARY"
