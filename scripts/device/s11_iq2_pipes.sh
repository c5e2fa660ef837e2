#!/usr/bin/env bash
# Session 11: the IQ2_XXS matvec with 3 or 4 row pipelines per CTA over one selector table
# (DSV4_CUDA_MV_PLAN_IQ2=0,0,0,G; after `CUDA=1 XZ=1 BENCHES=cuda_matvec_bench scripts/device/pack.sh`
# here and scripts/device/unpack.sh there):
#  1. cuda_matvec_bench on the IQ2_XXS cases: every config checked against the CPU, the pipeline
#     configs bitwise against the default config, and timed;
#  2. ab_check: byte-identical teacher-forced logits of flash4 with G = 3 and 4 (chunk 1 and 128);
#  3. flash4 decode (2K prompt, 128 tokens): default, G = 3, G = 4, interleaved, twice.
# Results in $OUT.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/s11-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
C="$ROOT/.carry/bin/cuda"; W=/dev/shm/dsv4-ab; mkdir -p "$W"; M="$W/flash4.gguf"
S="$OUT/s11_iq2_pipes.txt"; : >"$S"
say() { echo "$*" | tee -a "$S"; }
say "commit: $(cat "$ROOT/.carry/COMMIT" 2>/dev/null || echo unknown)"
[ -s "$M" ] || "$ROOT/.carry/bin/dsv4-gguf" synth --preset flash --layers 4 --quant q2 "$M" >/dev/null || { say "FAIL synth"; exit 1; }
if [ -z "${SKIP_BENCH:-}" ]; then
  timeout 240 "$ROOT/.carry/bin/bench/cuda_matvec_bench" --filter "IQ2_XXS" >"$OUT/matvec-iq2.txt" 2>&1
  say "cuda_matvec_bench rc $?"
  grep -E "^==|cfg 0 |cfg 9 |cfg 19 |cfg 20 |config 19|config 20|FAIL|check \(" "$OUT/matvec-iq2.txt" | tee -a "$S"
fi
AB_SWITCHES="DSV4_CUDA_MV_PLAN_IQ2=0,0,0,3 DSV4_CUDA_MV_PLAN_IQ2=0,0,0,4" OUT="$OUT/ab" timeout 240 \
  "$ROOT/scripts/device/ab_check.sh" 2>&1 | grep -E "^FAIL|ab_check:" | tee -a "$S"
P="$ROOT/.carry/data/promessi_sposi.txt"; [ -f "$P" ] || P="$ROOT/data/tiny-corpus.txt"
A="-m $M --backend cuda --prompt-file $P --ctx-start 2048 --ctx-max 2048 --gen-tokens 128"
for i in 1 2; do
  for g in 0 3 4; do
    say "flash4 2K G=$g: $(DSV4_CUDA_MV_PLAN_IQ2=0,0,0,$g timeout 60 "$C/dsv4-bench" $A 2>/dev/null | tail -1)"
  done
done
say "s11_iq2_pipes done"
