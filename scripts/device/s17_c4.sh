#!/usr/bin/env bash
# Session 17, call 4: the streamed IQ2_XXS kernel with each lane on a span of one superblock (one d, one
# float term per lane and row): cuda_matvec_bench on the IQ2_XXS cases (streamed configs against each
# other, the pipeline variants against the pipeline's default plan, every row against the CPU), SASS
# opcode mix, ncu at the steady-state shape.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/s17-out}"; mkdir -p "$OUT"
TAG=${TAG:-s17c4}
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
S="$OUT/$TAG.txt"
say() { echo "$*" | tee -a "$S"; }
cat "$ROOT/.carry/COMMIT" | tee -a "$S"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
SECT="--section SpeedOfLight --section SchedulerStats --section WarpStateStats --section InstructionStats --section MemoryWorkloadAnalysis_Tables"
B="$ROOT/.carry/bin/bench/cuda_matvec_bench"
timeout 200 "$B" --filter "IQ2_XXS" >"$OUT/mv.txt" 2>&1; say "bench rc $?"
grep -E "FAIL|RESULT|check|cfg (0|2[0-9]) " "$OUT/mv.txt" | cut -c1-170 | tee -a "$S"
bash "$ROOT/scripts/device/sass_stats.sh" "$B" 'mvs_iq2_kernelILi4ELi4ELi2E' | tee -a "$S"
cuobjdump -sass -arch sm_90 "$B" 2>/dev/null | awk '/Function : .*mvs_iq2_kernelILi4ELi4ELi2E/{p=1} /Function : /{if($0 !~ /mvs_iq2_kernelILi4ELi4ELi2E/) p=0} p' >"$OUT/sass.txt"
timeout 120 "$NCU" --clock-control none $SECT --print-details all -k "regex:mvs_iq2" -c 1 \
  "$B" --quick --filter "BIG IQ2_XXS" >"$OUT/ncu.txt" 2>&1
say "ncu rc $?"
grep -E "Duration|Executed Instructions |No Eligible|Warp Cycles Per Issued|Stall (Math|Not Sel|Wait|Short|Long|LG|Dispatch)|Shared.*Wavefronts|Bank" \
  "$OUT/ncu.txt" | cut -c1-120 | head -24 | tee -a "$S"
say "$TAG done"
cd "$OUT" && tar czf $TAG.tgz --exclude=$TAG.tgz * && find . -type f ! -name $TAG.tgz ! -name $TAG.txt -delete
