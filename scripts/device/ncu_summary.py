#!/usr/bin/env python3
"""ncu_summary.py CSV: one line per kernel and launch shape (name, grid, registers) of an
`ncu --csv --print-units base` metrics run: the median over its launches of the duration (us),
issue activity, active warps, instructions and DRAM bytes read, where the run collected them."""
import collections
import csv
import sys

rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]
ki, mi, vi, ii = h.index("Kernel Name"), h.index("Metric Name"), h.index("Metric Value"), h.index("ID")
per = collections.OrderedDict()
for r in rows[1:]:
    per.setdefault(r[ii], {"k": r[ki].split("(")[0][:60]})[r[mi]] = r[vi].replace(",", "")
agg = collections.OrderedDict()
for d in per.values():
    key = "%s grid %s blk %s reg %s" % (d["k"], d.get("launch__grid_size"), d.get("launch__block_size"),
                                        d.get("launch__registers_per_thread"))
    agg.setdefault(key, []).append(d)
for key, ds in agg.items():
    def med(m):
        return sorted(float(x.get(m, "nan")) for x in ds)[len(ds) // 2]
    line = "%-90s n %3d  %8.2f us  issue %5.1f %%" % (key, len(ds), med("gpu__time_duration.sum") / 1000.0,
                                                    med("smsp__issue_active.avg.pct_of_peak_sustained_active"))
    if "sm__warps_active.avg.pct_of_peak_sustained_active" in ds[0]:
        line += "  warps %5.1f %%" % med("sm__warps_active.avg.pct_of_peak_sustained_active")
    line += "  inst %10.0f" % med("sm__inst_executed.sum")
    if "dram__bytes_read.sum" in ds[0]:
        line += "  dram %8.2f MB" % (med("dram__bytes_read.sum") / 1e6)
    print(line)
