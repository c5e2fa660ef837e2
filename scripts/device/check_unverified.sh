#!/usr/bin/env bash
# First call of the session after session 10 (after `CUDA=1 XZ=1 scripts/device/pack.sh` here and
# scripts/device/unpack.sh there): the commits written after that session's device budget was spent
# (bench/NOTES.md, session 10: prefill chunks' scoring loops, the indexer's query product beside q's,
# the register-tiled scoring kernel DSV4_CUDA_ISCORE=tiled).
#  1. test_cuda_attn and cuda_ops_check on flash4 (indexer sets, attention, every op against the CPU);
#  2. ab_check with its default switches (byte-identical logits at chunk 1 and 128) and fusion_check;
#  3. flash4 32K prefill + decode, this build against OLD (a dsv4-bench of an earlier commit, if given)
#     interleaved, then the full flash q2 bench at 2K and 32K (flash_bench.sh).
# Usage: [PART=checks|bench] [OLD=path/to/dsv4-bench OLD_COMMIT=sha] scripts/device/check_unverified.sh;
# results in $OUT. Both parts together take over one call's 10 minutes: run PART=checks, then PART=bench.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/check-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
C="$ROOT/.carry/bin/cuda"; W=/dev/shm/dsv4-ab; mkdir -p "$W"; M="$W/flash4.gguf"
S="$OUT/check_unverified.txt"; : >"$S"
say() { echo "$*" | tee -a "$S"; }
say "commit: $(cat "$ROOT/.carry/COMMIT" 2>/dev/null || echo unknown)"
[ -s "$M" ] || "$ROOT/.carry/bin/dsv4-gguf" synth --preset flash --layers 4 --quant q2 "$M" >/dev/null || { say "FAIL synth"; exit 1; }
PART="${PART:-checks bench}"
if [[ " $PART " == *" checks "* ]]; then
timeout 150 "$C/test_cuda_attn" >"$OUT/test_cuda_attn.txt" 2>&1; say "test_cuda_attn rc $?: $(tail -1 "$OUT/test_cuda_attn.txt")"
timeout 200 "$C/cuda_ops_check" "$M" --numerics ds4 >"$OUT/ops_check.txt" 2>&1; say "cuda_ops_check rc $?: $(tail -1 "$OUT/ops_check.txt")"
grep -E "^FAIL" "$OUT/test_cuda_attn.txt" "$OUT/ops_check.txt" | head -20 | tee -a "$S"
OUT="$OUT/ab" timeout 300 "$ROOT/scripts/device/ab_check.sh" 2>&1 | grep -E "^FAIL|ab_check:" | tee -a "$S"
OUT="$OUT/fusion" timeout 300 "$ROOT/scripts/device/fusion_check.sh" 2>&1 | grep -E "^FAIL|fusion_check:" | tee -a "$S"
fi
[[ " $PART " == *" bench "* ]] || { say "check_unverified done ($PART)"; exit 0; }
P="$ROOT/.carry/data/promessi_sposi.txt"; [ -f "$P" ] || P="$ROOT/data/tiny-corpus.txt"
A="-m $M --backend cuda --prompt-file $P --ctx-start 32768 --ctx-max 32768 --gen-tokens 16"
for i in 1 2; do
  [ -n "${OLD:-}" ] && say "flash4 32K old ($OLD_COMMIT): $(timeout 100 "$OLD" $A 2>/dev/null | tail -1)"
  say "flash4 32K new: $(timeout 100 "$C/dsv4-bench" $A 2>/dev/null | tail -1)"
  say "flash4 32K new, DSV4_CUDA_ISCORE=tiled: $(DSV4_CUDA_ISCORE=tiled timeout 100 "$C/dsv4-bench" $A 2>/dev/null | tail -1)"
done
OUT="$OUT" "$ROOT/scripts/device/flash_bench.sh" check-32k "--ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64" X=1 2>&1 | tee -a "$S"
if [ -n "${OLD:-}" ]; then
  BENCH="$OLD" BENCH_COMMIT="${OLD_COMMIT:-old}" OUT="$OUT" "$ROOT/scripts/device/flash_bench.sh" check-32k-old \
    "--ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64" X=1 2>&1 | tee -a "$S"
fi
say "check_unverified done"
