#!/usr/bin/env bash
# The paths written at the end of session 3 and not yet run on a GPU (all off by default), checked
# and timed in one call (after `CUDA=1 XZ=1 BENCHES="cuda_prefill_q8_0_bench" scripts/device/pack.sh`):
#   DSV4_CUDA_HC_TAIL=multi|last   (decode HC pre; bitwise vs the default)
#   DSV4_CUDA_PREFILL_MMA=v2|v2n   (Q8_0 prefill GEMM; bitwise vs v1 and the CPU)
#   DSV4_CUDA_ATTN=tc              (prefill attention on tensor cores; within 2e-3 of float64)
# Then flash4 dsv4-bench at 2K with each switch against the default. A path whose checks pass and
# whose bench wins can become the default (README "Runtime switches", docs/PATHS.md).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/pending-out}"; mkdir -p "$OUT"
D="$ROOT/scripts/device"; "$D/unpack.sh"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
B="$ROOT/.carry/bin"; C="$B/cuda"; W=/dev/shm/dsv4-ab; mkdir -p "$W"; M="$W/flash4.gguf"
[ -s "$M" ] || "$B/dsv4-gguf" synth --preset flash --layers 4 --quant q2 "$M" >/dev/null || { echo "FAIL synth"; exit 1; }
timeout 300 "$C/cuda_ops_check" "$M" --numerics ds4 >"$OUT/ops.txt" 2>&1; echo "ops check rc $?"
grep -E "hc pre tail|bitwise v2|FAIL" "$OUT/ops.txt" | head -20
timeout 200 "$C/test_cuda_attn" >"$OUT/attn.txt" 2>&1; echo "test_cuda_attn rc $?"
grep -E "chunk tc|RESULT tc_|TARGET|FAIL" "$OUT/attn.txt" | head -20
[ -x "$B/bench/cuda_prefill_q8_0_bench" ] && { timeout 200 "$B/bench/cuda_prefill_q8_0_bench" --reps 20 >"$OUT/q8.txt" 2>&1; echo "q8 bench rc $?"; grep -E "RESULT|FAIL" "$OUT/q8.txt" | head -20; }
OUT="$OUT/ab" AB_SWITCHES="DSV4_CUDA_HC_TAIL=multi DSV4_CUDA_HC_TAIL=last DSV4_CUDA_PREFILL_MMA=v2-all DSV4_CUDA_PREFILL_MMA=v2n-all" \
  timeout 300 "$D/ab_check.sh" >/dev/null 2>&1; grep -E "^(ok|FAIL)|ab_check" "$OUT/ab/ab_check.txt"
P="$ROOT/.carry/data/promessi_sposi.txt"; [ -f "$P" ] || P="$ROOT/data/tiny-corpus.txt"
for e in X=1 DSV4_CUDA_HC_TAIL=multi DSV4_CUDA_HC_TAIL=last DSV4_CUDA_PREFILL_MMA=v2 DSV4_CUDA_PREFILL_MMA=v2n DSV4_CUDA_ATTN=tc; do
  env $e timeout 120 "$C/dsv4-bench" -m "$M" --backend cuda --prompt-file "$P" --ctx-start 2048 --ctx-max 2048 \
    --gen-tokens 128 --chunk 2048 2>/dev/null | tail -1 | sed "s/^/flash4 2K $e: /"
done
