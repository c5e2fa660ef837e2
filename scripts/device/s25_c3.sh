#!/usr/bin/env bash
# Session 25 call 3: the session's final defaults: the HF-oracle fixtures on CUDA, cuda_parity.sh, cuda_ops_check on
# the tiny f16 / q2 models, ncu detail of the prefill HC mix and weighted sum (for the next session), the full flash
# q2 2K prefill twice, 2K -> 32K, and the 70K prompt + 128 tokens.
set -u
SUMMARY=s25_c3
. "$(dirname "$0")/ab_lib.sh"
ab_flash4
oracle final X=1
tiny_ops f16 "hc_pre prefill"
tiny_ops q2 "hc_pre prefill"
NCU=/usr/local/cuda/bin/ncu
env X=1 timeout 100 "$NCU" --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
  -k "regex:hmt_kernel|hc_weights_sum" -c 2 "$C/dsv4" -m "$M" --backend cuda --chunk 2048 --ctx 4096 \
  --tokens "$(cat "$W/toks-long")" --dump-logits "$W/ncu.bin" >"$OUT/ncu-hc.txt" 2>&1
say "== ncu hc rc $?"
grep -E "hmt_kernel|hc_weights_sum|Duration|Memory Throughput|Achieved Occupancy|Registers Per|Stall|Warp Cycles Per Issued" \
  "$OUT/ncu-hc.txt" | sed 's/  */ /g' | head -30 | tee -a "$S"
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 64"
run final-1 "$A2" X=1
run final-2 "$A2" X=1
[ $SECONDS -lt 330 ] && run 32k "--ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64" X=1
[ $SECONDS -lt 440 ] && run 70k "--ctx-start 70000 --ctx-max 70000 --gen-tokens 128" X=1
grep -ho '"nonfinite[a-z_]*": [0-9]*' "$OUT"/*70k*.json 2>/dev/null | tee -a "$S"
rm -f /dev/shm/flash-q2.gguf
[ $SECONDS -lt 470 ] && parity_run 120
ab_finish "$SUMMARY"
