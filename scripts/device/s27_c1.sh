#!/usr/bin/env bash
# Session 27 call 1: where the decode indexer (scores + selection) and the routed-expert kernels spend their time at
# 2K and 32K: ncu at the real clock on flash4's recorded decode steps (node by node), per-kernel duration, issue
# activity, instructions and DRAM bytes, for iscore_one / select / the expert matvecs / the mid kernel.
set -u
SUMMARY=s27_c1
. "$(dirname "$0")/ab_lib.sh"
ab_flash4
NCU=/usr/local/cuda/bin/ncu
P="$ROOT/.carry/data/promessi_sposi.txt"
MET=gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__inst_executed.sum,dram__bytes_read.sum,launch__grid_size,launch__block_size,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active
for ctx in 2048 32768; do
  env X=1 timeout 200 "$NCU" --clock-control none --cache-control none --graph-profiling node --metrics $MET --print-units base --csv \
    -k "regex:iscore_one|select_kernel|mvs_iq2|mvs_q2k|moe_mid" -c 90 \
    "$C/dsv4-bench" -m "$M" --backend cuda --prompt-file "$P" --ctx-start $ctx --ctx-max $ctx --gen-tokens 5 \
    >"$OUT/ncu-$ctx.csv" 2>"$OUT/ncu-$ctx.err"
  say "== ncu ctx $ctx rc $? ($(wc -l <"$OUT/ncu-$ctx.csv") lines)"
  python3 "$ROOT/scripts/device/ncu_summary.py" "$OUT/ncu-$ctx.csv" | tee -a "$S"
done
ab_finish "$SUMMARY"
