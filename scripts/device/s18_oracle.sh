#!/usr/bin/env bash
# Session 18: the HF-oracle fixture test (tests/engine/test_oracle.c) on the CUDA backend
# (DSV4_TEST_BACKEND=cuda), with the default paths and with the fast prefill paths switched off one
# family at a time. Run from the repo root after `CUDA=1 scripts/device/pack.sh`; results in $OUT.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd); cd "$ROOT"
OUT="${OUT:-$ROOT/oracle-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
S="$OUT/oracle_summary.txt"; : >"$S"
echo "commit: $(cat .carry/COMMIT 2>/dev/null)" | tee -a "$S"
v() { local tag=$1; shift
  env DSV4_TEST_BACKEND=cuda "$@" timeout 120 .carry/bin/cuda/test_oracle >"$OUT/oracle-$tag.txt" 2>&1
  echo "== $tag ($*): rc $?" | tee -a "$S"
  grep -E "^exact:|^ds4 .*median|OK \]|FAILED \]" "$OUT/oracle-$tag.txt" | grep -v "listed below" | tee -a "$S"; }
v default X=1
v cpu DSV4_TEST_BACKEND=cpu
v noblas DSV4_CUDA_BLAS=0
v nof16 DSV4_CUDA_BLAS=0 DSV4_CUDA_PREFILL_F16=0
v nomma DSV4_CUDA_BLAS=0 DSV4_CUDA_PREFILL_F16=0 DSV4_CUDA_PREFILL_MMA=0
v noattn DSV4_CUDA_BLAS=0 DSV4_CUDA_PREFILL_F16=0 DSV4_CUDA_PREFILL_MMA=0 DSV4_CUDA_ATTN=exact
v generic DSV4_CUDA_MATVEC=generic DSV4_CUDA_BLAS=0 DSV4_CUDA_PREFILL_F16=0 DSV4_CUDA_PREFILL_MMA=0 DSV4_CUDA_ATTN=exact DSV4_CUDA_MOE_F16=0
