#!/usr/bin/env bash
# Where the routed-MoE tensor-core prefill products start to beat the scalar grouped kernels
# (DSV4_CUDA_MOE_MMA_MIN_N), after `CUDA=1 XZ=1 BENCHES=cuda_moe_prefill_bench scripts/device/pack.sh`:
#  1. cuda_moe_prefill_bench over chunk sizes (q2 and q4 flash experts; every path bitwise equal
#     to the scalar one at every size, or the bench fails);
#  2. flash4 (4 layers, flash widths) dsv4-bench prefill at chunks 32..512 with the tensor-core
#     products from 2 tokens on (the old default) and never (scalar), side by side.
# Results in $OUT: moe_crossover.txt.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/moe-crossover-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
B="$ROOT/.carry/bin"; C="$B/cuda"; W=/dev/shm/dsv4-moex; mkdir -p "$W"
S="$OUT/moe_crossover.txt"; : >"$S"
say() { echo "$*" | tee -a "$S"; }
say "commit: $(cat "$ROOT/.carry/COMMIT")"
"$B/bench/cuda_moe_prefill_bench" --reps 7 --ns "${NS:-16,32,64,128,192,256,320,384,512,768,1024}" 2>&1 | tee -a "$S" | grep -E "^(RESULT|FAIL|MOE)"
"$B/dsv4-gguf" synth --preset flash --layers 4 --quant q2 "$W/flash4.gguf" >/dev/null || { say "FAIL synth flash4"; exit 1; }
P="$ROOT/.carry/data/promessi_sposi.txt"
for chunk in 32 64 128 256 512; do
  for mn in 2 1000000; do
    r=$(DSV4_CUDA_MOE_MMA_MIN_N=$mn "$C/dsv4-bench" -m "$W/flash4.gguf" --backend cuda --prompt-file "$P" \
      --ctx-start 2048 --gen-tokens 8 --chunk $chunk 2>/dev/null | tail -1)
    say "flash4 chunk $chunk min_n $mn: $r"
  done
done
rm -f "$W/flash4.gguf"
