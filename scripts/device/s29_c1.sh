#!/usr/bin/env bash
# Written in session 28 for the next session's first call (~6 min): the HC pre step's cluster tail
# (DSV4_CUDA_HC_CLUSTER=1, written in session 28, not yet run on a GPU). Checks first: cuda_ops_check
# (`hc pre tail=cluster vs off`, `hc_post_pre_norm cluster bitwise`, the tail timing line's cluster column) on
# flash4 and the tiny model (n_embd 1024: clusters of 4), flash4 teacher-forced logits with the switch against the
# default at chunk 1 (decode past the indexer start) and 2048; then full flash q2 2K decode interleaved and ncu of
# the cluster kernels.
set -u
SUMMARY=s29_c1
. "$(dirname "$0")/ab_lib.sh"
ab_flash4
ab_ops_check "hc pre|hc_post_pre_norm|cluster"
tiny_ops f16 "hc pre|hc_post_pre_norm|cluster"
for ch in 1 2048; do
  dump "new-c$ch" "$C/dsv4" $ch toks-long X=1
  vs_env "cl-c$ch" $ch toks-long DSV4_CUDA_HC_CLUSTER=1
done
say "checks done at ${SECONDS} s"
A="--ctx-start 2048 --ctx-max 2048 --gen-tokens 64"
for i in 1 2; do
  run "def-$i" "$A" X=1
  run "cl-$i" "$A" DSV4_CUDA_HC_CLUSTER=1
done
NCU=/usr/local/cuda/bin/ncu
P="$ROOT/.carry/data/promessi_sposi.txt"
MET=gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__inst_executed.sum,launch__grid_size,launch__registers_per_thread
for v in def cl; do
  env X=1 $([ $v = cl ] && echo DSV4_CUDA_HC_CLUSTER=1) timeout 120 "$NCU" --clock-control none --cache-control none \
    --graph-profiling node --metrics $MET --print-units base --csv -k "regex:hc_tail" -c 40 \
    "$C/dsv4-bench" -m "$M" --backend cuda --prompt-file "$P" --ctx-start 2048 --ctx-max 2048 --gen-tokens 5 \
    >"$OUT/ncu-$v.csv" 2>"$OUT/ncu-$v.err"
  say "== ncu $v rc $?"
  python3 "$ROOT/scripts/device/ncu_summary.py" "$OUT/ncu-$v.csv" | tee -a "$S"
done
rm -f /dev/shm/flash-q2.gguf
ab_finish "$SUMMARY"
