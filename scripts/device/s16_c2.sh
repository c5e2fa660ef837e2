#!/usr/bin/env bash
# Session 16, call 2: the Q2_K rows streamed per warp in groups of PR rows (v2) (cuda_mv_stream.cuh) against the pipeline kernel.
#  cuda_matvec_bench on the Q2_K cases (sweep incl. the pipeline and the stream plans; bitwise checks);
#  flash4 decode logits (chunk 1) stream == pipe; full flash q2 2K decode, interleaved.
set -u
SUMMARY=s16_c2 TOKS=300
. "$(dirname "$0")/ab_lib.sh"
B2="$ROOT/.carry/bin/bench"
timeout 150 "$B2/cuda_matvec_bench" --filter Q2_K >"$OUT/mv_q2k.txt" 2>&1; say "cuda_matvec_bench Q2_K rc $?"
grep -E "FAIL|RESULT|cfg|differ" "$OUT/mv_q2k.txt" | tee -a "$S"
ab_flash4
dump stream-c1 "$C/dsv4" 1 toks
dump pipe-c1 "$C/dsv4" 1 toks DSV4_CUDA_MV_Q2K=pipe
same stream-c1 pipe-c1
rm -f "$W"/f.*.bin
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 32"
run s16c2-stream-1 "$A2" X=1
run s16c2-pipe-1 "$A2" DSV4_CUDA_MV_Q2K=pipe
run s16c2-stream-2 "$A2" X=1
run s16c2-pipe-2 "$A2" DSV4_CUDA_MV_Q2K=pipe
say "s16_c2 done"
cd "$OUT" && tar czf s16c2.tgz --exclude=s16c2.tgz * && find . -type f ! -name s16c2.tgz ! -name s16_c2.txt -delete
