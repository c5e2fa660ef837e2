#!/usr/bin/env bash
# Session 25 call 1: the HC weighted sum in float4s with the token's rows prefetched into L2 during its Sinkhorn
# split (default) against the scalar loop (DSV4_CUDA_HC_SUM_VEC=0) in one build: cuda_ops_check on flash4 (hc_pre
# lines, bitwise runs), per-kernel GPU time of the first 2K chunk of flash4 (ncu, real clocks, both forms), the full
# flash q2 2K prefill interleaved.
set -u
SUMMARY=s25_c1
. "$(dirname "$0")/ab_lib.sh"
ab_flash4
ops_moe flash4 X=1
grep -E "hc_pre" "$OUT/ops-flash4.txt" | head -24 | cut -c1-200 | tee -a "$S"
NCU=/usr/local/cuda/bin/ncu
for v in 1 0; do
  env X=1 DSV4_CUDA_HC_SUM_VEC=$v timeout 120 "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv \
    -c 260 "$C/dsv4" -m "$M" --backend cuda --chunk 2048 --ctx 4096 --tokens "$(cat "$W/toks-long")" \
    --dump-logits "$W/ncu.bin" >"$OUT/ncu-all-vec$v.csv" 2>"$OUT/ncu-all-vec$v.err"
  say "== ncu all vec=$v rc $?"
  python3 - "$OUT/ncu-all-vec$v.csv" <<'PY' | tee -a "$S"
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; ki = h.index("Kernel Name"); vi = h.index("Metric Value"); ui = h.index("Metric Unit")
tot = collections.OrderedDict()
for r in rows[1:]:
    v = float(r[vi].replace(",", "")); v = v / 1000 if r[ui] == "nsecond" else v
    k = r[ki].split("(")[0][:70]; tot.setdefault(k, [0, 0.0]); tot[k][0] += 1; tot[k][1] += v
s = sum(v for _, v in tot.values())
print("kernels %d, sum %.1f us" % (sum(c for c, _ in tot.values()), s))
for k, (c, v) in sorted(tot.items(), key=lambda kv: -kv[1][1])[:40]:
    print("%-70s %4d %10.1f us %8.1f us/call" % (k, c, v, v / c))
PY
done
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 64"
for i in 1 2; do
  run vec-$i "$A2" X=1
  run novec-$i "$A2" DSV4_CUDA_HC_SUM_VEC=0
done
rm -f /dev/shm/flash-q2.gguf
ab_finish "$SUMMARY"
