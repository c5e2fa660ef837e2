#!/usr/bin/env bash
# Session 28 call 2: where hc_tail_kernel's ~10 us a call go (call 1: skipping both HC tails of every layer
# gave +16.8 % decode). ncu on flash4's recorded 2K decode steps (node by node, real clock): the
# two hc_tail_kernel forms with warp-state and per-SASS-line stall samples; the durations of the small
# decode kernels whose removal call 1 measured (combine, router, q norm, mid).
set -u
SUMMARY=s28_c2
. "$(dirname "$0")/ab_lib.sh"
ab_flash4
NCU=/usr/local/cuda/bin/ncu CUOBJ=/usr/local/cuda/bin/cuobjdump
P="$ROOT/.carry/data/promessi_sposi.txt"
B=("$C/dsv4-bench" -m "$M" --backend cuda --prompt-file "$P" --ctx-start 2048 --ctx-max 2048 --gen-tokens 6)
"$CUOBJ" -sass "$C/dsv4-bench" 2>/dev/null | awk '/Function : .*hc_tail_kernel/{p=1} p&&/Function : /&&!/hc_tail_kernel/{p=0} p' >"$OUT/sass-hc_tail.txt"
say "sass hc_tail: $(grep -c '/\*[0-9a-f]*\*/' "$OUT/sass-hc_tail.txt") lines"
env X=1 timeout 200 "$NCU" --clock-control none --cache-control none --graph-profiling node \
  --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats \
  --section SourceCounters --section MemoryWorkloadAnalysis --import-source no -o "$OUT/rep-hct" \
  -k "regex:hc_tail_kernel" -s 16 -c 4 "${B[@]}" >"$OUT/ncu-hct.log" 2>&1
say "== ncu hct rc $?"
"$NCU" -i "$OUT/rep-hct.ncu-rep" --page details --print-details all >"$OUT/ncu-hct-details.txt" 2>&1
"$NCU" -i "$OUT/rep-hct.ncu-rep" --page source --csv --print-source sass >"$OUT/ncu-hct-sass.csv" 2>&1
say "   source csv: $(wc -l <"$OUT/ncu-hct-sass.csv") lines"
grep -E "hc_tail_kernel|Duration|Elapsed Cycles|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Issued Warp|No Eligible|Stall" "$OUT/ncu-hct-details.txt" | sed 's/  */ /g' | cut -c1-150 | head -60 | tee -a "$S"
MET=gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__inst_executed.sum,dram__bytes_read.sum,launch__grid_size,launch__block_size,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active
env X=1 timeout 200 "$NCU" --clock-control none --cache-control none --graph-profiling node --metrics $MET --print-units base --csv \
  -k "regex:hc_tail|fa_combine|fa_kernel|router_kernel|q_norm_rope|moe_mid|hc_post|mvw_kernel|mvs_" -c 300 "${B[@]}" \
  >"$OUT/ncu-small.csv" 2>"$OUT/ncu-small.err"
say "== ncu small rc $? ($(wc -l <"$OUT/ncu-small.csv") lines)"
python3 "$ROOT/scripts/device/ncu_summary.py" "$OUT/ncu-small.csv" | tee -a "$S"
ab_finish "$SUMMARY"
