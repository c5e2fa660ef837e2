#!/usr/bin/env bash
# Session 26 call 3: the stamp profile of decode at 32K (issue 5's second decode target), beside the plain run.
set -u
SUMMARY=s26_c3
. "$(dirname "$0")/ab_lib.sh"
A32="--ctx-start 32768 --ctx-max 32768 --gen-tokens 32"
run plain32k "$A32" X=1
run prof32k "$A32" DSV4_CUDA_PROFILE=graph DSV4_CUDA_PROFILE_LOG=$OUT/stamps-32k.csv
python3 "$ROOT/scripts/device/stamps_report.py" "$OUT/stamps-32k.csv" >"$OUT/stamps_report-32k.txt" 2>&1
say "report rc $?"; head -34 "$OUT/stamps_report-32k.txt" | tee -a "$S"
xz -T4 "$OUT/stamps-32k.csv"
rm -f /dev/shm/flash-q2.gguf
ab_finish "$SUMMARY"
