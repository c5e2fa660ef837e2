#!/usr/bin/env bash
# Session 32 call 1 (one H100 or H200, ~8 min): the IQ2_XXS gate/up table built with its loads first
# (mv_build_iq2s_table_nt) and DSV4_CUDA_MVI_SPARE (SMs the gate/up launch leaves out). Bitwise against the
# previous build (.carry/bin/bench/dsv4-old, dsv4-bench-old: HEAD's cuda_matvec.o), ncu of the gate/up kernel
# old / new / spare, flash4 2K decode interleaved, then (H200 only, ~140 GB) the full flash q2 2K decode A/B,
# and last session 31's call 2 (fusion_check + tiers_cuda) while time is left.
set -u
SUMMARY=s32_c1
. "$(dirname "$0")/ab_lib.sh"
say "device: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1)"
ab_flash4
ab_ops_check "iq2|moe decode"
dump "new-c1" "$C/dsv4" 1 toks-long
dump "old-c1" "$OLD_CLI" 1 toks-long X=1
same "new-c1" "old-c1"
vs_env "sp2-c1" 1 toks-long DSV4_CUDA_MVI_SPARE=2
dump "new-c3" "$C/dsv4" 3 toks
vs_env "sp1-c3" 3 toks DSV4_CUDA_MVI_SPARE=1
python3 -c "print(','.join(str(i) for i in range(20,60)))" >"$W/toks40"
for m in old new sp1 sp2; do
  bin="$C/dsv4"; sp=0; [ $m = old ] && bin="$OLD_CLI"; [ $m = sp1 ] && sp=1; [ $m = sp2 ] && sp=2
  env DSV4_CUDA_MVI_SPARE=$sp timeout 120 /usr/local/cuda/bin/ncu -k "regex:mvs_iq2" -c 24 "$bin" -m "$M" \
    --backend cuda --chunk 1 --ctx 4096 --tokens "$(cat "$W/toks40")" --dump-logits "$W/ncu.bin" >"$OUT/ncu-$m.txt" 2>&1
  say "ncu $m rc $?: gate/up us $(grep -E '^\s*Duration' "$OUT/ncu-$m.txt" | awk '{print $3}' | sort -n | awk '{a[NR]=$1} END {print "min", a[1], "median", a[int((NR+1)/2)], "max", a[NR], "n", NR}')"
done
say "checks done at ${SECONDS} s"
P="$ROOT/.carry/data/promessi_sposi.txt"; [ -f "$P" ] || P="$ROOT/data/tiny-corpus.txt"
A="-m $M --backend cuda --prompt-file $P --ctx-start 2048 --ctx-max 2048 --gen-tokens 128"
for i in 1 2 3; do
  for m in old new sp1 sp2; do
    bin="$C/dsv4-bench"; sp=0; [ $m = old ] && bin="$OLD"; [ $m = sp1 ] && sp=1; [ $m = sp2 ] && sp=2
    DSV4_CUDA_MVI_SPARE=$sp timeout 60 "$bin" $A >"$OUT/bench-$m-$i.csv" 2>"$OUT/bench-$m-$i.err"
    say "flash4 2K $m $i: $(tail -1 "$OUT/bench-$m-$i.csv")"
  done
done
say "flash4 A/B done at ${SECONDS} s"
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
if [ "${mem:-0}" -gt 120000 ]; then
  for i in 1 2; do
    BENCH="$OLD" run "old-$i" "--ctx-start 2048 --ctx-max 2048 --gen-tokens 64"
    run "new-$i" "--ctx-start 2048 --ctx-max 2048 --gen-tokens 64"
    run "sp1-$i" "--ctx-start 2048 --ctx-max 2048 --gen-tokens 64" DSV4_CUDA_MVI_SPARE=1
  done
  say "full flash done at ${SECONDS} s"
fi
if [ $SECONDS -lt 330 ]; then
  fusion_tiers 200 100
else
  say "SKIP fusion_check, tiers_cuda: time (${SECONDS} s)"
fi
ab_finish "$SUMMARY"
