#!/usr/bin/env bash
# Session 33 call 2 (one H100 or H200, ~8 min; the full flash part on an H200 only): the decode attention fold
# (DSV4_CUDA_FA_FOLD=1: the split CTAs meet and combine their own partials; =2: two blocks a round trip; unset
# or 0, the default: the combine kernel). test_cuda_attn
# (fold == split + combine, bitwise, and graph timings of both), cuda_ops_check, flash4 logits fold vs
# DSV4_CUDA_FA_FOLD=0 at chunk 1 (2,200 positions: the indexer layers too) and 3, fusion_check (its
# q_norm_rope / attn_rope checks now with attn_qnr disabled), flash4 2K decode interleaved, then the full
# flash q2 2K decode fold / no fold and the 32K pair while time is left.
set -u
SUMMARY=s33_c2
. "$(dirname "$0")/ab_lib.sh"
say "device: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1)"
ab_flash4
timeout 150 "$C/test_cuda_attn" >"$OUT/test_cuda_attn.txt" 2>&1
say "test_cuda_attn rc $?: $(tail -1 "$OUT/test_cuda_attn.txt")"
grep -E "^FAIL|fold|^FOLD" "$OUT/test_cuda_attn.txt" | grep -v "^ok" | head -20 | tee -a "$S"
say "fold checks ok: $(grep -c '^ok.*fold' "$OUT/test_cuda_attn.txt"), failed: $(grep -c '^FAIL.*fold' "$OUT/test_cuda_attn.txt")"
say "test_cuda_attn done at ${SECONDS} s"
dump "new-c1" "$C/dsv4" 1 toks-long DSV4_CUDA_FA_FOLD=0
vs_env "fold-c1" 1 toks-long DSV4_CUDA_FA_FOLD=1
vs_env "pairs-c1" 1 toks-long DSV4_CUDA_FA_FOLD=2
dump "new-c3" "$C/dsv4" 3 toks DSV4_CUDA_FA_FOLD=0
vs_env "fold-c3" 3 toks DSV4_CUDA_FA_FOLD=1
say "checks done at ${SECONDS} s"
P="$ROOT/.carry/data/promessi_sposi.txt"; [ -f "$P" ] || P="$ROOT/data/tiny-corpus.txt"
A="-m $M --backend cuda --prompt-file $P --ctx-start 2048 --ctx-max 2048 --gen-tokens 128"
for i in 1 2 3; do
  for m in fold nofold pairs; do
    f=1; [ $m = nofold ] && f=0; [ $m = pairs ] && f=2
    DSV4_CUDA_FA_FOLD=$f timeout 60 "$C/dsv4-bench" $A >"$OUT/bench-$m-$i.csv" 2>"$OUT/bench-$m-$i.err"
    say "flash4 2K $m $i: $(tail -1 "$OUT/bench-$m-$i.csv")"
  done
done
say "flash4 A/B done at ${SECONDS} s"
export DSV4_CUDA_FA_FOLD=1; ab_ops_check "attention"; unset DSV4_CUDA_FA_FOLD
if [ $SECONDS -lt 200 ]; then
  DSV4_CUDA_FA_FOLD=2 timeout 150 "$C/test_cuda_attn" >"$OUT/test_cuda_attn-f2.txt" 2>&1
  say "test_cuda_attn (FOLD=2: pairs) rc $?: $(tail -1 "$OUT/test_cuda_attn-f2.txt")"
  grep -E "^FOLD" "$OUT/test_cuda_attn-f2.txt" | head -8 | sed 's/^/pairs /' | tee -a "$S"
  say "pair fold checks ok: $(grep -c '^ok.*fold' "$OUT/test_cuda_attn-f2.txt"), failed: $(grep -c '^FAIL.*fold' "$OUT/test_cuda_attn-f2.txt")"
fi
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
if [ "${mem:-0}" -gt 120000 ]; then
  for i in 1 2; do
    run "fold-$i" "--ctx-start 2048 --ctx-max 2048 --gen-tokens 64" DSV4_CUDA_FA_FOLD=1
    run "nofold-$i" "--ctx-start 2048 --ctx-max 2048 --gen-tokens 64" DSV4_CUDA_FA_FOLD=0
    [ $SECONDS -lt 400 ] && run "pairs-$i" "--ctx-start 2048 --ctx-max 2048 --gen-tokens 64" DSV4_CUDA_FA_FOLD=2
  done
  say "full flash 2K done at ${SECONDS} s"
  if [ $SECONDS -lt 400 ]; then
    run "fold-32k" "--ctx-start 32768 --ctx-max 32768 --gen-tokens 32" DSV4_CUDA_FA_FOLD=1
    run "nofold-32k" "--ctx-start 32768 --ctx-max 32768 --gen-tokens 32" DSV4_CUDA_FA_FOLD=0
  fi
fi
if [ $SECONDS -lt 380 ]; then
  export DSV4_CUDA_FA_FOLD=1 # the fusions' checks with the fold
  fusion_tiers 150 100
else
  say "SKIP fusion_check, tiers_cuda: time (${SECONDS} s)"
fi
ab_finish "$SUMMARY"
