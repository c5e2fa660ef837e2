#!/usr/bin/env bash
# Session 14, call 4 (after `CUDA=1 XZ=1 scripts/device/pack.sh` here, with the session-13 final build
# (bdff632) carried as .carry/bin/bench/dsv4-bench-old.xz and dsv4-old.xz): the q heads' norm + RoPE a
# warp per head in prefill chunks, the expert slot sum four outputs a thread, then the closing numbers.
#  1. cuda_ops_check on flash4 (DS4): every op (q_norm_rope n=70: the warp kernel, bitwise the unfused ops);
#  2. flash4 teacher-forced logits byte for byte: this build vs bdff632 at chunk 300 (600 positions, the
#     cuBLAS / f16 MoE prefill path) and chunk 1 (2,200 positions); DSV4_CUDA_QNR_WARP=0 at chunk 300;
#  3. full flash q2, 2K prompt, 128 tokens: this build 3x and bdff632 2x, interleaved;
#  4. this build: --ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64; a 70,000-token prompt
#     and 128 tokens.
set -u
SUMMARY=s14_c4 TOKS=600
. "$(dirname "$0")/ab_lib.sh"
ab_flash4
ab_ops_check "q_norm_rope L. bitwise.*n=70|hc_pre prefill"
t0=$(date +%s)
vs_old c300 300 toks
vs_env qnr0-c300 300 toks DSV4_CUDA_QNR_WARP=0
vs_old long 1 toks-long
rm -f "$W"/f.*.bin
say "dumps: $(( $(date +%s) - t0 )) s"
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 128"
run s14c4-new-1 "$A2" X=1
BENCH="$OLD" BENCH_COMMIT=bdff632 run s14c4-old-1 "$A2" X=1
run s14c4-new-2 "$A2" X=1
BENCH="$OLD" BENCH_COMMIT=bdff632 run s14c4-old-2 "$A2" X=1
run s14c4-new-3 "$A2" X=1
OUT="$OUT" timeout 150 "$FB" "s14c4-2k-32k" "--ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64" X=1 2>&1 | grep -v ^ctx_tokens | tee -a "$S"
OUT="$OUT" timeout 200 "$FB" "s14c4-ctx70k" "--ctx-start 70000 --ctx-max 70000 --gen-tokens 128" X=1 2>&1 | grep -v ^ctx_tokens | tee -a "$S"
say "s14_c4 done"
