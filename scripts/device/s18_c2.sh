#!/usr/bin/env bash
# (Run at e799464; the graph change measured slower and was reverted after this call: bench/NOTES.md session 18.)
# Session 18, call 2: the decode FFN with the shared gate/up on the side lane (graph change) against
# the call-1 build (OLD, carried as .carry/bin/bench/dsv4-bench-old / dsv4-old): flash4 logits byte
# comparisons (new vs old at chunk 1 and 128; new vs parallel_ffn disabled / faulted; the router's
# selection fused); full flash q2 2K decode interleaved new / old, DSV4_CUDA_ROUTER_FUSED=1; 2K -> 32K.
set -u
SUMMARY=s18_c2
. "$(dirname "$0")/ab_lib.sh"
ab_flash4
vs_old c1 1 toks
vs_old c128 128 toks
vs_env off-c1 1 toks DSV4_FUSION_DISABLE=parallel_ffn
vs_env fault-c1 1 toks DSV4_FAULT=parallel_ffn
vs_env rfused-c1 1 toks DSV4_CUDA_ROUTER_FUSED=1
grep -h "parallel_ffn\|router_topk" "$OUT"/f.new-c1.err "$OUT"/f.fault-c1.err "$OUT"/f.rfused-c1.err 2>/dev/null | head -6 | tee -a "$S"
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 128"
run s18c2-new-1 "$A2" X=1
BENCH="$OLD" run s18c2-old-1 "$A2" X=1
run s18c2-new-2 "$A2" X=1
BENCH="$OLD" run s18c2-old-2 "$A2" X=1
run s18c2-rfused-1 "$A2" DSV4_CUDA_ROUTER_FUSED=1
OUT="$OUT" timeout 150 "$FB" "s18c2-2k-32k" "--ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64" X=1 2>&1 | grep -v ^ctx_tokens | tee -a "$S"
say "s18_c2 done"
cd "$OUT" && tar czf s18c2.tgz --exclude=s18c2.tgz * && find . -type f ! -name s18c2.tgz ! -name s18_c2.txt -delete
