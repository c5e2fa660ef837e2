#!/usr/bin/env bash
# Session 8: the cuBLAS prefill products (cuda_gemm_blas.h) in one call (after
# `CUDA=1 XZ=1 scripts/device/pack.sh` here and scripts/device/unpack.sh there):
#  1. where libcublas is on this machine (LD_LIBRARY_PATH extended with its folder);
#  2. flash4: cuda_ops_check (the blas lines: rel to the CPU, timings against the own kernels);
#  3. flash4 2K bench, default vs DSV4_CUDA_BLAS=0;
#  4. flash4 teacher-forced logits of 300 tokens: CUDA chunk 300 with and without cuBLAS against the
#     CPU (parity_compare.py --stats, as cuda_parity.sh does for DS4 numerics);
#     (SKIP_PARITY=1 skips it; F4STEPS adds dsv4-bench step flags to 3.)
#  5. SKIP_FULL unset: full flash q2 2K bench (and 2K->32K when FULL32K=1), default vs DSV4_CUDA_BLAS=0.
# Summary in $OUT/s8_blas.txt.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/s8-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
S="$OUT/s8_blas.txt"; : >"$S"
say() { echo "$*" | tee -a "$S"; }
say "commit: $(cat "$ROOT/.carry/COMMIT" 2>/dev/null || echo unknown), $(date -u +%FT%TZ)"
CB=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -e "$d/libcublas.so.13" ] && CB="$d/libcublas.so.13" && break; done
[ -n "$CB" ] || CB=$(find /usr /opt /root -name 'libcublas.so.13*' 2>/dev/null | head -1)
say "libcublas: ${CB:-not found}"
[ -n "$CB" ] && export LD_LIBRARY_PATH="$(dirname "$CB"):$LD_LIBRARY_PATH"
B="$ROOT/.carry/bin"; C="$B/cuda"; W=/dev/shm/dsv4-ab; mkdir -p "$W"; M="$W/flash4.gguf"
[ -s "$M" ] || "$B/dsv4-gguf" synth --preset flash --layers 4 --quant q2 "$M" >/dev/null || { say "FAIL synth"; exit 1; }
t0=$(date +%s)
timeout 300 "$C/cuda_ops_check" "$M" --numerics ds4 >"$OUT/ops_check.txt" 2>&1; rc=$?
say "ops_check rc $rc ($(( $(date +%s) - t0 )) s): $(grep -c '^FAIL' "$OUT/ops_check.txt") FAIL lines"
grep -E "blas|^FAIL|CUDA OPS" "$OUT/ops_check.txt" | tee -a "$S"
P="$ROOT/.carry/data/promessi_sposi.txt"; [ -f "$P" ] || P="$ROOT/data/tiny-corpus.txt"
for mode in default blas0 default2 blas0-2; do
  e="X=1"; case $mode in blas0*) e="DSV4_CUDA_BLAS=0" ;; esac
  env $e timeout 120 "$C/dsv4-bench" -m "$M" --backend cuda --prompt-file "$P" --ctx-start 2048 --ctx-max 2048 \
    --gen-tokens 16 --chunk 2048 ${F4STEPS:-} --json "$OUT/f4-$mode.json" >"$OUT/f4-$mode.csv" 2>"$OUT/f4-$mode.err"
  say "flash4 $mode ($e):"; tail -n +2 "$OUT/f4-$mode.csv" | tee -a "$S"
done
# teacher-forced logits, 300 tokens
[ -z "${SKIP_PARITY:-}" ] && {
T="$W/tok300.txt"
python3 -c 'import random; r=random.Random(4242); print("\n".join(str(r.randrange(129280)) for _ in range(300)))' >"$T"
timeout 300 "$B/dsv4" -m "$M" --tokens "$T" --chunk 64 --dump-logits "$W/f4.cpu.bin" >"$OUT/dump-cpu.txt" 2>&1 || say "FAIL cpu dump"
timeout 120 "$C/dsv4" -m "$M" --backend cuda --tokens "$T" --chunk 300 --dump-logits "$W/f4.blas.bin" >"$OUT/dump-blas.txt" 2>&1 || say "FAIL blas dump"
DSV4_CUDA_BLAS=0 timeout 120 "$C/dsv4" -m "$M" --backend cuda --tokens "$T" --chunk 300 --dump-logits "$W/f4.own.bin" >"$OUT/dump-own.txt" 2>&1 || say "FAIL own dump"
for p in "blas cpu" "own cpu" "blas own"; do
  set -- $p
  python3 "$ROOT/scripts/device/parity_compare.py" --ref "$W/f4.$2.bin" --test "$W/f4.$1.bin" --label "flash4 300 $1 vs $2" --stats 2>&1 | tee -a "$S"
done
}
if [ -z "${SKIP_FULL:-}" ]; then
  ARGS="${FULL_ARGS:---ctx-start 2048 --ctx-max 2048 --gen-tokens 32}"
  [ -n "${FULL32K:-}" ] && ARGS="--ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64"
  OUT="$OUT" "$ROOT/scripts/device/flash_bench.sh" s8-blas0 "$ARGS" DSV4_CUDA_BLAS=0 2>&1 | tee -a "$S"
  OUT="$OUT" "$ROOT/scripts/device/flash_bench.sh" s8-default "$ARGS" X=1 2>&1 | tee -a "$S"
fi
say "s8_blas done"
