#!/usr/bin/env bash
# Session 15, call 5: the B images in the 128-byte swizzle (call 4: 43-55 % of the x16 kernels' shared
# wavefronts were excess: the interleaved core matrices' reads by the tensor cores conflict).
#  wgmma_x16_check (both layouts); cuda_ops_check (x16 bitwise lines, timing); flash4 logits x16 == wide;
#  full flash q2 2K: x16 (swizzle), x16 interleaved, f16; then 2K -> 32K with the defaults.
set -u
SUMMARY=s15_c5 TOKS=600
. "$(dirname "$0")/ab_lib.sh"
timeout 60 "$C/wgmma_x16_check" >"$OUT/wgmma_check.txt" 2>&1; say "wgmma_x16_check rc $?"; tee -a "$S" <"$OUT/wgmma_check.txt"
ab_flash4
t0=$(date +%s)
timeout 240 "$C/cuda_ops_check" "$M" --numerics ds4 >"$OUT/ops_check.txt" 2>&1
say "cuda_ops_check rc $?: $(tail -1 "$OUT/ops_check.txt") ($(( $(date +%s) - t0 )) s)"
grep -E "^FAIL|moe x16|moe f16 timing IQ2_XXS/Q2_K n=2048" "$OUT/ops_check.txt" | tee -a "$S"
dump x16-c2048 "$C/dsv4" 2048 toks-long X=1
grep -E "warpgroup" "$OUT/f.x16-c2048.err" | tee -a "$S"
dump wide-c2048 "$C/dsv4" 2048 toks-long DSV4_CUDA_MOE_X16=0 DSV4_CUDA_MOE_F16=0
same x16-c2048 wide-c2048
rm -f "$W"/f.*.bin
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 32"
run s15c5-x16-1 "$A2" X=1
run s15c5-f16-1 "$A2" DSV4_CUDA_MOE_X16=0
run s15c5-x16il-1 "$A2" DSV4_CUDA_MOE_X16_SWIZZLE=0
run s15c5-x16-2 "$A2" X=1
run s15c5-f16-2 "$A2" DSV4_CUDA_MOE_X16=0
OUT="$OUT" timeout 150 "$FB" "s15c5-2k-32k" "--ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64" X=1 2>&1 | grep -v ^ctx_tokens | tee -a "$S"
say "s15_c5 done"
cd "$OUT" && tar czf s15c5.tgz --exclude=s15c5.tgz * && find . -type f ! -name s15c5.tgz ! -name s15_c5.txt -delete
