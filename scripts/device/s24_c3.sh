#!/usr/bin/env bash
# Session 24 call 3: the prefill HC mix on TF32 tensor cores (cuda_hc_mix_tc.cu) against the cuBLAS mix
# (DSV4_CUDA_HC_MIX=blas) in one build: cuda_ops_check on flash4 (hc_pre lines), the full flash q2 2K prefill
# interleaved (default, blas, the 4-step unroll), the per-op profile of the default, the oracle fixtures on CUDA
# and cuda_parity.sh.
set -u
SUMMARY=s24_c3
. "$(dirname "$0")/ab_lib.sh"
ab_flash4
ops_moe flash4 X=1
grep -E "hc_pre|attention_chunk" "$OUT/ops-flash4.txt" | head -24 | cut -c1-200 | tee -a "$S"
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 64"
for i in 1 2; do
  run tf32-$i "$A2" X=1
  run blas-$i "$A2" DSV4_CUDA_HC_MIX=blas
done
run u4-1 "$A2" DSV4_CUDA_HC_MIX_UNROLL=4
grep -ho '"hc_mix_tc": [0-9]*' "$OUT"/*tf32-1.json | tee -a "$S"
run prof "--ctx-start 2048 --ctx-max 2048 --gen-tokens 4" DSV4_CUDA_PROFILE=1
grep -E "^(moe |attention_chunk|hc_pre |matmul|sum of GPU)" "$OUT"/*prof.err | cut -c1-120 | head -14 | tee -a "$S"
rm -f /dev/shm/flash-q2.gguf
oracle tf32 X=1
[ $SECONDS -lt 430 ] && parity_run 150
# the prefill attention after call 2's change: per-SASS-line counts and stalls of layer 0 (dense) and layer 2 (ratio 4)
NCU=/usr/local/cuda/bin/ncu
env X=1 timeout 100 "$NCU" --section WarpStateStats --section SourceCounters --import-source yes -o "$OUT/rep-ft" \
  -k "regex:ft_kernel" -c 3 "$C/dsv4" -m "$M" --backend cuda --chunk 2048 --ctx 4096 --tokens "$(cat "$W/toks-long")" \
  --dump-logits "$W/ncu.bin" >"$OUT/ncu-ft.log" 2>&1
say "== ncu ft rc $?"
"$NCU" -i "$OUT/rep-ft.ncu-rep" --page source --csv --print-source sass 2>&1 | xz >"$OUT/ncu-ft-sass.csv.xz"
rm -f "$OUT/rep-ft.ncu-rep"
ab_finish "$SUMMARY"
