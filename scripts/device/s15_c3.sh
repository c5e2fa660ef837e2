#!/usr/bin/env bash
# Session 15, call 3: where the x16 MoE kernels' time goes (call 2: 7.43 ms per flash4 layer at n = 2048
# against 4.38 for the f16 products, no heavy steps). ncu of the first two x16_kernel launches (layer 0's
# gate/up, then its down) and of the packs in a flash4 2K prefill; the kernels' SASS statistics.
set -u
SUMMARY=s15_c3
. "$(dirname "$0")/ab_lib.sh"
ab_flash4
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
SECT="--section SpeedOfLight --section ComputeWorkloadAnalysis --section Occupancy --section SchedulerStats \
--section WarpStateStats --section MemoryWorkloadAnalysis --section InstructionStats --section LaunchStats \
--section SourceCounters"
P="$ROOT/.carry/data/promessi_sposi.txt"
prof() { local tag=$1 k=$2 c=$3; shift 3
  t0=$(date +%s)
  env "$@" timeout 200 "$NCU" --clock-control none $SECT --print-details all -k "regex:$k" -c "$c" "$C/dsv4-bench" -m "$M" \
    --backend cuda --prompt-file "$P" --ctx-start 2048 --ctx-max 2048 --gen-tokens 2 >"$OUT/ncu-$tag.txt" 2>&1
  say "== ncu $tag rc $? ($(( $(date +%s) - t0 )) s)"
  grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Compute \(SM\) Throughput|Issue Slots Busy|Issued Ipc Active|Achieved Occupancy|Registers Per Thread|Eligible Warps|Executed Instructions  |Shared Memory Configuration Size|Bank Conflicts|Tensor|Pipe Util" \
    "$OUT/ncu-$tag.txt" | sed 's/  */ /g' | head -40 | tee -a "$S"
  grep -iE "^ *(Stall|Warp Cycles Per Issued|Avg. Active Threads)" "$OUT/ncu-$tag.txt" | sed 's/  */ /g' | head -20 | tee -a "$S"
}
prof x16 'x16_kernel' 2 X=1
prof packs 'x16_pack' 2 X=1
prof f16 'mh_kernel' 2 DSV4_CUDA_MOE_X16=0
# SASS of the warpgroup kernels: instruction classes per kernel
command -v cuobjdump >/dev/null && cuobjdump -sass -fun x16_kernel "$C/dsv4-bench" >"$OUT/x16.sass" 2>&1
[ -s "$OUT/x16.sass" ] || cuobjdump -sass "$C/dsv4-bench" 2>/dev/null | awk '/Function : .*x16_kernel/{p=1} /Function : / && !/x16_kernel/{p=0} p' >"$OUT/x16.sass"
say "sass lines $(wc -l <"$OUT/x16.sass")"
grep -oE "^ +/\*[0-9a-f]+\*/ +[A-Z0-9_.]+" "$OUT/x16.sass" | awk '{print $2}' | sed 's/\..*//' | sort | uniq -c | sort -rn | head -30 | tee -a "$S"
say "s15_c3 done"
cd "$OUT" && tar czf s15c3.tgz --exclude=s15c3.tgz * && find . -type f ! -name s15c3.tgz ! -name s15_c3.txt -delete
