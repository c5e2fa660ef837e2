#!/usr/bin/env bash
# Session 26 call 2: the lean (64-register) Q8_0 matvec instance, DSV4_CUDA_MVW_CTAS=N (N CTAs per SM planned):
# flash4 teacher-forced logits at chunk 1 (every decode matvec) byte-identical to the default for N = 4, 6, 8; the
# full flash q2 2K decode, the settings interleaved with the default; the stamp profiles (moe_slots wrapped now).
set -u
SUMMARY=s26_c2
. "$(dirname "$0")/ab_lib.sh"
ab_flash4
dump def-1 "$C/dsv4" 1 toks X=1
for n in 4 8; do dump w$n-1 "$C/dsv4" 1 toks DSV4_CUDA_MVW_CTAS=$n; same def-1 w$n-1; done
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 64"
run def-1 "$A2" X=1
for n in 4 6 8; do run w$n "$A2" DSV4_CUDA_MVW_CTAS=$n; done
run def-2 "$A2" X=1
run w8-2 "$A2" DSV4_CUDA_MVW_CTAS=8
run w4-2 "$A2" DSV4_CUDA_MVW_CTAS=4
# the stamp profile with the routed experts' op wrapped too (moe_slots, hc_post_slots), default and N = 8
for v in def w8; do
  run prof-$v "--ctx-start 2048 --ctx-max 2048 --gen-tokens 32" DSV4_CUDA_PROFILE=graph \
    DSV4_CUDA_PROFILE_LOG=$OUT/stamps-$v.csv $([ $v = w8 ] && echo DSV4_CUDA_MVW_CTAS=8)
  python3 "$ROOT/scripts/device/stamps_report.py" "$OUT/stamps-$v.csv" >"$OUT/stamps_report-$v.txt" 2>&1
  say "report $v rc $?"; head -34 "$OUT/stamps_report-$v.txt" | tee -a "$S"
  xz -T4 "$OUT/stamps-$v.csv"
done
rm -f /dev/shm/flash-q2.gguf
ab_finish "$SUMMARY"
