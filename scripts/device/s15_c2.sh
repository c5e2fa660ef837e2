#!/usr/bin/env bash
# Session 15, call 2 (after `CUDA=1 XZ=1 scripts/device/pack.sh` here): the exact warpgroup MoE products
# with the Cauchy-Schwarz rule for heavy tile superblocks (call 1: nearly all were heavy on the
# synthetic model under the |q| bound, and the split path's synchronous loads made it slower).
#  1. wgmma_x16_check; cuda_ops_check on flash4 (x16 lines and timing at n = 2048);
#  2. flash4 logits at chunk 2048: x16 == the exact wide kernels; the heavy step counts;
#  3. ncu of the first x16 gate/up and down launches of a flash4 2K prefill;
#  4. full flash q2, 2K prompt, 32 tokens: default vs DSV4_CUDA_MOE_X16=0, interleaved.
# Everything lands in $OUT/s15c2.tgz (the device tool returns at most 8 files).
set -u
SUMMARY=s15_c2 TOKS=600
. "$(dirname "$0")/ab_lib.sh"
timeout 60 "$C/wgmma_x16_check" >"$OUT/wgmma_check.txt" 2>&1; say "wgmma_x16_check rc $? $(tail -1 "$OUT/wgmma_check.txt")"
ab_flash4
t0=$(date +%s)
timeout 240 "$C/cuda_ops_check" "$M" --numerics ds4 >"$OUT/ops_check.txt" 2>&1
say "cuda_ops_check rc $?: $(tail -1 "$OUT/ops_check.txt") ($(( $(date +%s) - t0 )) s)"
grep -E "^FAIL|moe x16|moe f16 timing|moe prefill timing IQ2_XXS/Q2_K n=2048 k" "$OUT/ops_check.txt" | tee -a "$S"
dump x16-c2048 "$C/dsv4" 2048 toks-long X=1
grep -E "warpgroup|f16 tensor" "$OUT/f.x16-c2048.err" | tee -a "$S"
dump wide-c2048 "$C/dsv4" 2048 toks-long DSV4_CUDA_MOE_X16=0 DSV4_CUDA_MOE_F16=0
same x16-c2048 wide-c2048
rm -f "$W"/f.*.bin
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
SECT="--section SpeedOfLight --section ComputeWorkloadAnalysis --section Occupancy --section SchedulerStats \
--section WarpStateStats --section MemoryWorkloadAnalysis --section InstructionStats --section LaunchStats"
P="$ROOT/.carry/data/promessi_sposi.txt"
for k in "x16_kernel<6>" "x16_kernel<4>"; do
  tag=$(echo "$k" | tr -dc 'a-z0-9')
  t0=$(date +%s)
  timeout 150 "$NCU" --clock-control none $SECT --print-details all -k "regex:$k" -c 1 "$C/dsv4-bench" -m "$M" \
    --backend cuda --prompt-file "$P" --ctx-start 2048 --ctx-max 2048 --gen-tokens 2 >"$OUT/ncu-$tag.txt" 2>&1
  say "== ncu $k rc $? ($(( $(date +%s) - t0 )) s)"
  grep -E "Duration|DRAM Throughput|L2 Cache Throughput|Memory Throughput|Issue Slots Busy|Issued Ipc Active|SM Busy|Achieved Occupancy|Registers Per Thread|Eligible Warps|Executed Instructions  |Shared Memory|Bank|Tensor|Pipe" \
    "$OUT/ncu-$tag.txt" | sed 's/  */ /g' | head -30 | tee -a "$S"
  grep -iE "stall" "$OUT/ncu-$tag.txt" | grep -E "[0-9]" | sed 's/  */ /g' | head -14 | tee -a "$S"
done
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 32"
run s15c2-x16-1 "$A2" X=1
grep -oE '"moe_x16_[a-z_]+": [0-9]+' "$OUT"/*s15c2-x16-1.json | tee -a "$S"
run s15c2-f16-1 "$A2" DSV4_CUDA_MOE_X16=0
run s15c2-x16-2 "$A2" X=1
run s15c2-f16-2 "$A2" DSV4_CUDA_MOE_X16=0
say "s15_c2 done"
cd "$OUT" && tar czf s15c2.tgz --exclude=s15c2.tgz * && find . -type f ! -name s15c2.tgz ! -name s15_c2.txt -delete
