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
  python3 - "$OUT/ncu-$ctx.csv" <<'PY' | tee -a "$S"
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; ki = h.index("Kernel Name"); mi = h.index("Metric Name"); vi = h.index("Metric Value"); ii = h.index("ID")
per = collections.OrderedDict()
for r in rows[1:]:
    per.setdefault(r[ii], {"k": r[ki].split("(")[0][:60]})[r[mi]] = r[vi].replace(",", "")
agg = collections.OrderedDict()
for d in per.values():
    key = "%s grid %s blk %s reg %s" % (d["k"], d.get("launch__grid_size"), d.get("launch__block_size"), d.get("launch__registers_per_thread"))
    agg.setdefault(key, []).append(d)
for key, ds in agg.items():
    f = lambda m: sorted(float(x.get(m, "nan")) for x in ds)[len(ds) // 2]
    print("%-90s n %3d  %8.2f us  issue %5.1f %%  warps %5.1f %%  inst %10.0f  dram %8.2f MB" % (key, len(ds), f("gpu__time_duration.sum") / 1000.0, f("smsp__issue_active.avg.pct_of_peak_sustained_active"), f("sm__warps_active.avg.pct_of_peak_sustained_active"), f("sm__inst_executed.sum"), f("dram__bytes_read.sum") / 1e6))
PY
done
ab_finish "$SUMMARY"
