#!/usr/bin/env bash
# Session 15, call 1 (after `CUDA=1 XZ=1 scripts/device/pack.sh` here): the exact warpgroup MoE
# products (cuda_ops_moe_x16.cu, the default on compute capability 9.0).
#  0. wgmma_x16_check: the warpgroup product and the B layout; a failure stops the call here;
#  1. cuda_ops_check on flash4 (DS4): every op; the moe lines (x16 bitwise vs the wide kernels and the
#     CPU, the counters; timing of one layer's routed experts at n = 2048: x16 / f16 / wide);
#  2. flash4 teacher-forced logits byte for byte: default (x16) vs DSV4_CUDA_MOE_X16=0 DSV4_CUDA_MOE_F16=0
#     (the exact wide kernels) at chunk 300 and chunk 2048;
#  3. full flash q2, 2K prompt, 32 tokens: default vs DSV4_CUDA_MOE_X16=0 (the f16 products, the previous
#     default), interleaved; then --ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64.
set -u
SUMMARY=s15_c1 TOKS=600
. "$(dirname "$0")/ab_lib.sh"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$S"
timeout 60 "$C/wgmma_x16_check" >"$OUT/wgmma_check.txt" 2>&1; rc=$?
say "wgmma_x16_check rc $rc"; tee -a "$S" <"$OUT/wgmma_check.txt"
[ $rc = 0 ] || { say "stop: the warpgroup product does not match"; exit 1; }
ab_flash4
ab_ops_check "moe x16|moe bitwise|moe prefill timing|moe f16 timing"
t0=$(date +%s)
dump x16-c300 "$C/dsv4" 300 toks X=1
grep -E "warpgroup|f16 tensor" "$OUT/f.x16-c300.err" | head -3 | tee -a "$S"
dump wide-c300 "$C/dsv4" 300 toks DSV4_CUDA_MOE_X16=0 DSV4_CUDA_MOE_F16=0
same x16-c300 wide-c300
dump x16-c2048 "$C/dsv4" 2048 toks-long X=1
dump wide-c2048 "$C/dsv4" 2048 toks-long DSV4_CUDA_MOE_X16=0 DSV4_CUDA_MOE_F16=0
same x16-c2048 wide-c2048
rm -f "$W"/f.*.bin
say "dumps: $(( $(date +%s) - t0 )) s"
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 32"
run s15c1-x16-1 "$A2" X=1
grep -hE "x16_products" "$OUT"/*s15c1-x16-1.json | head -1 | grep -oE '"moe_x16_products": [0-9]+' | tee -a "$S"
run s15c1-f16-1 "$A2" DSV4_CUDA_MOE_X16=0
run s15c1-x16-2 "$A2" X=1
run s15c1-f16-2 "$A2" DSV4_CUDA_MOE_X16=0
OUT="$OUT" timeout 150 "$FB" "s15c1-2k-32k" "--ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64" X=1 2>&1 | grep -v ^ctx_tokens | tee -a "$S"
say "s15_c1 done"
