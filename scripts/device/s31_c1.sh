#!/usr/bin/env bash
# Session 31 call 1 (~4 min, one H100 or H200: no full flash q2): s30_c2.sh's checks of the folded MoE mid
# (DSV4_CUDA_MOE_MID=fold) on flash4 and tiny q2, the ncu kernel names, then flash4 2K decode (128 tokens)
# default / fold interleaved three times, side by side on the one card.
set -u
SUMMARY=s31_c1
. "$(dirname "$0")/ab_lib.sh"
say "device: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
ab_flash4
ops_moe fold DSV4_CUDA_MOE_MID=fold
grep -E "moe decode" "$OUT/ops-fold.txt" | cut -c1-200 | head -12 | tee -a "$S"
DSV4_CUDA_MOE_MID=fold tiny_ops q2 "moe"
dump "new-c1" "$C/dsv4" 1 toks-long
vs_env "fold-c1" 1 toks-long DSV4_CUDA_MOE_MID=fold
dump "new-c3" "$C/dsv4" 3 toks
vs_env "fold-c3" 3 toks DSV4_CUDA_MOE_MID=fold
dump "new-c2k" "$C/dsv4" 2048 toks-long
vs_env "fold-c2k" 2048 toks-long DSV4_CUDA_MOE_MID=fold
python3 -c "print(','.join(str(i) for i in range(20,60)))" >"$W/toks40"
for m in default fold; do
  env DSV4_CUDA_MOE_MID=$m timeout 120 /usr/local/cuda/bin/ncu -k "regex:moe_mid|mvs_iq2" -c 24 "$C/dsv4" -m "$M" \
    --backend cuda --chunk 1 --ctx 4096 --tokens "$(cat "$W/toks40")" --dump-logits "$W/ncu.bin" >"$OUT/ncu-$m.txt" 2>&1
  say "ncu $m rc $?: mid launches $(grep -c 'moe_mid' "$OUT/ncu-$m.txt"), gate/up launches $(grep -c 'mvs_iq2' "$OUT/ncu-$m.txt")"
done
say "checks done at ${SECONDS} s"
P="$ROOT/.carry/data/promessi_sposi.txt"; [ -f "$P" ] || P="$ROOT/data/tiny-corpus.txt"
A="-m $M --backend cuda --prompt-file $P --ctx-start 2048 --ctx-max 2048 --gen-tokens 128"
for i in 1 2 3; do
  for m in default fold; do
    DSV4_CUDA_MOE_MID=$m timeout 60 "$C/dsv4-bench" $A >"$OUT/bench-$m-$i.csv" 2>"$OUT/bench-$m-$i.err"
    say "flash4 2K $m $i: $(tail -1 "$OUT/bench-$m-$i.csv")"
  done
done
ab_finish "$SUMMARY"
