#!/usr/bin/env bash
# Session 27 call 4 (closing): the selection's compaction for 8 / 16 keys a thread (default) against the plain
# bit-by-bit kernel (DSV4_CUDA_SELECT=bits1) and the radix passes (=radix); iscore_one's q staging by shifts:
# test_cuda_attn, cuda_ops_check on flash4, flash4 logits byte-identical across the three selections (chunk 1 past
# the indexer start, chunk 2048), ncu of the indexer kernels, then the full flash q2 at 2K and 32K as time allows.
set -u
SUMMARY=s27_c4
. "$(dirname "$0")/ab_lib.sh"
ab_flash4
timeout 150 "$C/test_cuda_attn" >"$OUT/test_cuda_attn.txt" 2>&1
say "test_cuda_attn rc $?: $(tail -1 "$OUT/test_cuda_attn.txt")"
grep -E "^FAIL|indexer_topk|iscore_one .*8192" "$OUT/test_cuda_attn.txt" | cut -c1-150 | head -30 | tee -a "$S"
ops_moe flash4 X=1
grep -E "indexer_topk" "$OUT/ops-flash4.txt" | cut -c1-200 | head -8 | tee -a "$S"
dump new-c1 "$C/dsv4" 1 toks-long X=1
dump bits1-c1 "$C/dsv4" 1 toks-long DSV4_CUDA_SELECT=bits1
dump radix-c1 "$C/dsv4" 1 toks-long DSV4_CUDA_SELECT=radix
same new-c1 bits1-c1; same new-c1 radix-c1
dump new-c2048 "$C/dsv4" 2048 toks-long X=1
dump radix-c2048 "$C/dsv4" 2048 toks-long DSV4_CUDA_SELECT=radix
same new-c2048 radix-c2048
say "checks done at ${SECONDS} s"
NCU=/usr/local/cuda/bin/ncu
P="$ROOT/.carry/data/promessi_sposi.txt"
MET=gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__inst_executed.sum,launch__grid_size,launch__registers_per_thread
for vc in def:2048 def:32768 bits1:32768; do
  v=${vc%%:*}; ctx=${vc##*:}
  env X=1 $([ $v = bits1 ] && echo DSV4_CUDA_SELECT=bits1) timeout 100 "$NCU" --clock-control none --cache-control none \
    --graph-profiling node --metrics $MET --print-units base --csv -k "regex:iscore_one|select_" -c 40 \
    "$C/dsv4-bench" -m "$M" --backend cuda --prompt-file "$P" --ctx-start $ctx --ctx-max $ctx --gen-tokens 5 \
    >"$OUT/ncu-$v-$ctx.csv" 2>"$OUT/ncu-$v-$ctx.err"
  say "== ncu $v ctx $ctx rc $?"
  python3 "$ROOT/scripts/device/ncu_summary.py" "$OUT/ncu-$v-$ctx.csv" | tee -a "$S"
done
[ $SECONDS -lt 200 ] && run final2k "--ctx-start 2048 --ctx-max 2048 --gen-tokens 64" X=1
[ $SECONDS -lt 290 ] && run final32k "--ctx-start 32768 --ctx-max 32768 --gen-tokens 32" X=1
rm -f /dev/shm/flash-q2.gguf
ab_finish "$SUMMARY"
