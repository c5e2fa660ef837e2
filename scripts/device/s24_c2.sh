#!/usr/bin/env bash
# Session 24 call 2: the prefill attention's epilogue once per head (was: two expf and a division for each output), its
# scores in four independent chains, the values' rescale skipped where no head's max moved; mh_kernel branching past
# empty n8 tiles (was: predicated, still issued). test_cuda_attn, cuda_ops_check on flash4, SASS of mh_kernel's IQ2_XXS
# instance (branches), the full flash q2 2K prefill against the session's first build (.carry/bin/bench/dsv4-bench-old,
# 8daa52b) interleaved, the per-op profile of both, the oracle fixtures on CUDA, and ncu of ft_kernel per layer.
set -u
SUMMARY=s24_c2
. "$(dirname "$0")/ab_lib.sh"
ab_flash4
timeout 150 "$C/test_cuda_attn" >"$OUT/test_cuda_attn.txt" 2>&1
say "test_cuda_attn rc $?: $(tail -1 "$OUT/test_cuda_attn.txt")"
grep -E "^FAIL|chunk tc|tc " "$OUT/test_cuda_attn.txt" | head -16 | cut -c1-200 | tee -a "$S"
ops_moe mh X=1
grep -E "attention_chunk" "$OUT/ops-mh.txt" | head -8 | cut -c1-200 | tee -a "$S"
/usr/local/cuda/bin/cuobjdump -sass -fun '_Z9mh_kernelILi6ELi16ELb1EEv9mh_params' "$C/dsv4" >"$OUT/sass-mh6.txt" 2>&1
say "sass mh6: $(grep -c '/\*[0-9a-f]*\*/' "$OUT/sass-mh6.txt") instructions, $(grep -c HMMA "$OUT/sass-mh6.txt") HMMA, $(grep -c ' BRA' "$OUT/sass-mh6.txt") BRA"
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 64"
for i in 1 2; do
  run new-$i "$A2" X=1
  BENCH="$OLD" BENCH_COMMIT=8daa52b run old-$i "$A2" X=1
done
run prof-new "--ctx-start 2048 --ctx-max 2048 --gen-tokens 4" DSV4_CUDA_PROFILE=1
BENCH="$OLD" BENCH_COMMIT=8daa52b run prof-old "--ctx-start 2048 --ctx-max 2048 --gen-tokens 4" DSV4_CUDA_PROFILE=1
for t in new old; do
  say "profile $t:"; grep -E "^(moe |attention_chunk|hc_pre |sum of GPU)" "$OUT"/*prof-$t.err | cut -c1-120 | tee -a "$S"
done
rm -f /dev/shm/flash-q2.gguf
oracle new X=1
env X=1 timeout 120 /usr/local/cuda/bin/ncu --section SpeedOfLight -k "regex:ft_kernel" -c 4 "$C/dsv4" -m "$M" \
  --backend cuda --chunk 2048 --ctx 4096 --tokens "$(cat "$W/toks-long")" --dump-logits "$W/ncu.bin" >"$OUT/ncu-ft.txt" 2>&1
say "== ncu ft rc $?"; grep -E "Duration" "$OUT/ncu-ft.txt" | sed 's/  */ /g' | tee -a "$S"
ab_finish "$SUMMARY"
