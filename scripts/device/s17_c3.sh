#!/usr/bin/env bash
# Session 17, call 3: the streamed IQ2_XXS kernel with constant-offset copies and the right shifts on the
# IMAD pipe (mul.hi), against the same code with plain shifts (cuda_matvec_bench_alu, -DDSV4_MV_SHR_ALU: a switch
# of commit f538d76 only, built by hand from cuda_matvec.cu with it and linked ahead of libcuda_backend.a):
# cuda_matvec_bench IQ2_XXS cases for both, SASS opcode mix, ncu of both at the steady-state shape.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/s17-out}"; mkdir -p "$OUT"
TAG=${TAG:-s17c3}
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
S="$OUT/$TAG.txt"
say() { echo "$*" | tee -a "$S"; }
cat "$ROOT/.carry/COMMIT" | tee -a "$S"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
SECT="--section SpeedOfLight --section SchedulerStats --section WarpStateStats --section InstructionStats"
for v in cuda_matvec_bench cuda_matvec_bench_alu; do
  B="$ROOT/.carry/bin/bench/$v"
  timeout 200 "$B" --filter "IQ2_XXS" >"$OUT/mv-$v.txt" 2>&1; say "$v rc $?"
  grep -E "FAIL|RESULT|cfg (0|2[0-9]) " "$OUT/mv-$v.txt" | cut -c1-160 | tee -a "$S"
  bash "$ROOT/scripts/device/sass_stats.sh" "$B" 'mvs_iq2_kernelILi4ELi2ELi4ELi2E' | tee -a "$S"
  cuobjdump -sass -arch sm_90 "$B" 2>/dev/null | awk '/Function : .*mvs_iq2_kernelILi4ELi2ELi4ELi2E/{p=1} /Function : /{if($0 !~ /mvs_iq2_kernelILi4ELi2ELi4ELi2E/) p=0} p' >"$OUT/sass-$v.txt"
  timeout 120 "$NCU" --clock-control none $SECT --print-details all -k "regex:mvs_iq2" -c 1 \
    "$B" --quick --filter "BIG IQ2_XXS" >"$OUT/ncu-$v.txt" 2>&1
  say "ncu $v rc $?"
  grep -E "Duration|Executed Instructions |No Eligible|Warp Cycles Per Issued|Stall (Math|Not Sel|Wait|Short|Long|LG|Dispatch)" \
    "$OUT/ncu-$v.txt" | cut -c1-120 | head -14 | tee -a "$S"
done
say "$TAG done"
cd "$OUT" && tar czf $TAG.tgz --exclude=$TAG.tgz * && find . -type f ! -name $TAG.tgz ! -name $TAG.txt -delete
