#!/usr/bin/env bash
# Session 30 call 2 (~5 min): the MoE mid folded into the routed gate/up launch (DSV4_CUDA_MOE_MID=fold,
# mvi_mid_tail in cuda_mv_stream.cuh: the warp that completes a 256-row block's ticket forms its mid and Q8_K
# block, no moe_mid_q8k_wide_kernel launch). cuda_ops_check on flash4 and tiny q2 with the switch (tiny q2
# declines: in = 256), flash4 teacher-forced logits at chunk 1 with and without it (byte-identical), ncu
# names of the mid kernel launched or not, then full flash q2 2K decode interleaved x2 and 32K once each.
set -u
SUMMARY=s30_c2
. "$(dirname "$0")/ab_lib.sh"
ab_flash4
ops_moe fold DSV4_CUDA_MOE_MID=fold
grep -E "moe decode" "$OUT/ops-fold.txt" | cut -c1-200 | head -12 | tee -a "$S"
DSV4_CUDA_MOE_MID=fold tiny_ops q2 "moe"
dump "new-c1" "$C/dsv4" 1 toks-long
vs_env "fold-c1" 1 toks-long DSV4_CUDA_MOE_MID=fold
dump "new-c3" "$C/dsv4" 3 toks
vs_env "fold-c3" 3 toks DSV4_CUDA_MOE_MID=fold
python3 -c "print(','.join(str(i) for i in range(20,60)))" >"$W/toks40"
for m in default fold; do
  env DSV4_CUDA_MOE_MID=$m timeout 120 /usr/local/cuda/bin/ncu -k "regex:moe_mid|mvs_iq2" -c 24 "$C/dsv4" -m "$M" \
    --backend cuda --chunk 1 --ctx 4096 --tokens "$(cat "$W/toks40")" --dump-logits "$W/ncu.bin" >"$OUT/ncu-$m.txt" 2>&1
  say "ncu $m rc $?: mid launches $(grep -c 'moe_mid' "$OUT/ncu-$m.txt"), gate/up launches $(grep -c 'mvs_iq2' "$OUT/ncu-$m.txt")"
done
say "checks done at ${SECONDS} s"
A="--ctx-start 2048 --ctx-max 2048 --gen-tokens 64"
for i in 1 2; do
  run "def-$i" "$A"
  run "fold-$i" "$A" DSV4_CUDA_MOE_MID=fold
done
B="--ctx-start 32768 --ctx-max 32768 --gen-tokens 32"
run "def32k" "$B"
run "fold32k" "$B" DSV4_CUDA_MOE_MID=fold
rm -f /dev/shm/flash-q2.gguf
ab_finish "$SUMMARY"
