#!/usr/bin/env bash
# Session 15, call 4: the x16 kernels after the loader rework (per-CTA pack-row offsets, bank-conflict-free
# B copies, no division in the loop) and two sub-blocks per product group. cuda_ops_check's moe lines,
# flash4 logits x16 == wide at chunk 2048, ncu (both x16 launches of layer 0), the SASS opcode mix,
# full flash 2K x16 vs f16 interleaved. Everything in $OUT/s15c4.tgz.
set -u
SUMMARY=s15_c4 TOKS=600
. "$(dirname "$0")/ab_lib.sh"
timeout 60 "$C/wgmma_x16_check" >"$OUT/wgmma_check.txt" 2>&1; say "wgmma_x16_check rc $? $(tail -1 "$OUT/wgmma_check.txt")"
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
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
P="$ROOT/.carry/data/promessi_sposi.txt"
timeout 200 "$NCU" --clock-control none --section SpeedOfLight --section SchedulerStats --section WarpStateStats \
  --section InstructionStats --section SourceCounters --print-details all -k "regex:x16_kernel" -c 2 "$C/dsv4-bench" -m "$M" \
  --backend cuda --prompt-file "$P" --ctx-start 2048 --ctx-max 2048 --gen-tokens 2 >"$OUT/ncu-x16.txt" 2>&1
say "== ncu rc $?"
grep -E "x16_kernel<|Duration|Executed Instructions  |Issued Ipc Active|Eligible Warps|Tensor Cycles Active|Wavefronts Shared Excessive" \
  "$OUT/ncu-x16.txt" | sed 's/  */ /g' | head -24 | tee -a "$S"
grep -iE "^ *Stall" "$OUT/ncu-x16.txt" | sed 's/  */ /g' | sort -k3 -g -r | head -12 | tee -a "$S"
cuobjdump -sass "$C/dsv4-bench" 2>/dev/null | awk '/Function : _Z10x16_kernelILi6E/{p=1;print;next} /Function : /{p=0} p' >"$OUT/x16_6.sass"
say "sass lines $(wc -l <"$OUT/x16_6.sass")"
grep -oE "^ +/\*[0-9a-f]+\*/ +(@!?U?P[0-9T] +)?[A-Z0-9_]+" "$OUT/x16_6.sass" | awk '{print $NF}' | sort | uniq -c | sort -rn | head -24 | tee -a "$S"
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 32"
run s15c4-x16-1 "$A2" X=1
run s15c4-f16-1 "$A2" DSV4_CUDA_MOE_X16=0
run s15c4-x16-2 "$A2" X=1
say "s15_c4 done"
cd "$OUT" && tar czf s15c4.tgz --exclude=s15c4.tgz * && find . -type f ! -name s15c4.tgz ! -name s15_c4.txt -delete
