#!/usr/bin/env bash
# Session 17, call 2: the streamed IQ2_XXS kernel with the 64 KB-aligned table and the pool word in a register:
# cuda_matvec_bench on the IQ2_XXS cases (bits against mv_kernel's default plan), the SASS opcode mix and
# listing, ncu of the decode shape (gate+up x12) and the steady-state shape (x128).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/s17-out}"; mkdir -p "$OUT"
TAG=${TAG:-s17c2}
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
B="$ROOT/.carry/bin/bench/cuda_matvec_bench"
S="$OUT/$TAG.txt"
say() { echo "$*" | tee -a "$S"; }
cat "$ROOT/.carry/COMMIT" | tee -a "$S"
timeout 200 "$B" --filter "${FILTER:-IQ2_XXS}" >"$OUT/mv.txt" 2>&1; say "cuda_matvec_bench rc $?"
grep -E "FAIL|RESULT|cfg|differ|==" "$OUT/mv.txt" | tee -a "$S"
bash "$ROOT/scripts/device/sass_stats.sh" "$B" 'mvs_iq2' | tee -a "$S"
cuobjdump -sass -arch sm_90 "$B" 2>/dev/null | awk '/Function : .*mvs_iq2/{p=1} /Function : /{if($0 !~ /mvs_iq2/) p=0} p' >"$OUT/sass_mvs_iq2.txt"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
SECT="--section SpeedOfLight --section SchedulerStats --section WarpStateStats --section InstructionStats \
--section MemoryWorkloadAnalysis_Tables --section Occupancy"
for f in "gate+up 4096->2048 x12" "BIG IQ2_XXS"; do
  tag="$(echo "$f" | tr -c 'A-Za-z0-9' '_' | cut -c1-12)"
  timeout 120 "$NCU" --clock-control none $SECT --print-details all -k "regex:mvs_iq2" -c 1 \
    "$B" --quick --filter "$f" >"$OUT/ncu-$tag.txt" 2>&1
  say "ncu $tag rc $?"
  grep -E "mvs_iq2_kernel|Duration|Executed Instructions |Registers Per|Eligible Warps|No Eligible|Warp Cycles Per Issued" \
    "$OUT/ncu-$tag.txt" | cut -c1-150 | head -20 | tee -a "$S"
done
say "$TAG done"
cd "$OUT" && tar czf $TAG.tgz --exclude=$TAG.tgz * && find . -type f ! -name $TAG.tgz ! -name $TAG.txt -delete
