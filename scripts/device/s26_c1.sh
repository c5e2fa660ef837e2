#!/usr/bin/env bash
# Session 26 call 1: where a decode step's time goes on the full flash q2 at 2K. The default build unprofiled,
# then DSV4_CUDA_PROFILE=graph (stamp kernels around every op, kept inside the recorded steps) with the stamp
# log and its report (scripts/device/stamps_report.py), then DSV4_CUDA_PDL=0 for what programmatic launches give.
set -u
SUMMARY=s26_c1
. "$(dirname "$0")/ab_lib.sh"
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 64"
run base-1 "$A2" X=1
run prof "--ctx-start 2048 --ctx-max 2048 --gen-tokens 32" DSV4_CUDA_PROFILE=graph DSV4_CUDA_PROFILE_LOG=$OUT/stamps.csv
python3 "$ROOT/scripts/device/stamps_report.py" "$OUT/stamps.csv" >"$OUT/stamps_report.txt" 2>&1
say "report rc $?"; head -60 "$OUT/stamps_report.txt" | tee -a "$S"
grep -A40 "^cuda device" "$OUT"/*-prof.err | head -50 | tee -a "$S"
run pdl0 "$A2" DSV4_CUDA_PDL=0
run base-2 "$A2" X=1
xz -T4 "$OUT/stamps.csv"
rm -f /dev/shm/flash-q2.gguf
ab_finish "$SUMMARY"
