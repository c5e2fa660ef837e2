#!/usr/bin/env bash
# Session 27 call 3: the selection two bits a round with the live keys compacted after the top half
# (select_bits_kernel, default) against the radix passes (DSV4_CUDA_SELECT=radix); iscore_one back to its call-1 form:
# test_cuda_attn (every selection vs the CPU), cuda_ops_check on flash4 (indexer_topk_chunk vs the CPU), flash4 logits
# byte-identical both ways (decode past the indexer start at chunk 1, a 2,200-token prefill at chunk 2048), ncu of
# the two kernels at 2K / 32K, the full flash q2 decode at 2K and 32K interleaved.
set -u
SUMMARY=s27_c3
. "$(dirname "$0")/ab_lib.sh"
ab_flash4
timeout 150 "$C/test_cuda_attn" >"$OUT/test_cuda_attn.txt" 2>&1
say "test_cuda_attn rc $?: $(tail -1 "$OUT/test_cuda_attn.txt")"
grep -E "^FAIL|indexer_topk|iscore" "$OUT/test_cuda_attn.txt" | cut -c1-150 | head -40 | tee -a "$S"
ops_moe flash4 X=1
grep -E "indexer" "$OUT/ops-flash4.txt" | cut -c1-200 | head -12 | tee -a "$S"
dump new-c1 "$C/dsv4" 1 toks-long X=1
dump radix-c1 "$C/dsv4" 1 toks-long DSV4_CUDA_SELECT=radix
same new-c1 radix-c1
dump new-c2048 "$C/dsv4" 2048 toks-long X=1
dump radix-c2048 "$C/dsv4" 2048 toks-long DSV4_CUDA_SELECT=radix
same new-c2048 radix-c2048
NCU=/usr/local/cuda/bin/ncu
P="$ROOT/.carry/data/promessi_sposi.txt"
MET=gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__inst_executed.sum,launch__grid_size,launch__registers_per_thread
for v in bits; do
for ctx in 2048 32768; do
  env X=1 $([ $v = radix ] && echo DSV4_CUDA_SELECT=radix) timeout 200 "$NCU" --clock-control none --cache-control none \
    --graph-profiling node --metrics $MET --print-units base --csv -k "regex:iscore_one|select_" -c 40 \
    "$C/dsv4-bench" -m "$M" --backend cuda --prompt-file "$P" --ctx-start $ctx --ctx-max $ctx --gen-tokens 5 \
    >"$OUT/ncu-$v-$ctx.csv" 2>"$OUT/ncu-$v-$ctx.err"
  say "== ncu $v ctx $ctx rc $?"
  python3 "$ROOT/scripts/device/ncu_summary.py" "$OUT/ncu-$v-$ctx.csv" | tee -a "$S"
done
done
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 64"
A32="--ctx-start 32768 --ctx-max 32768 --gen-tokens 32"
run bits2k-1 "$A2" X=1
run radix2k-1 "$A2" DSV4_CUDA_SELECT=radix
run bits32k-1 "$A32" X=1
run radix32k-1 "$A32" DSV4_CUDA_SELECT=radix
[ $SECONDS -lt 380 ] && run bits2k-2 "$A2" X=1
[ $SECONDS -lt 410 ] && run radix2k-2 "$A2" DSV4_CUDA_SELECT=radix
[ $SECONDS -lt 440 ] && run bits32k-2 "$A32" X=1
[ $SECONDS -lt 490 ] && run radix32k-2 "$A32" DSV4_CUDA_SELECT=radix
rm -f /dev/shm/flash-q2.gguf
ab_finish "$SUMMARY"
