#!/usr/bin/env bash
# Session 25 call 2: the queries' per-head norm + RoPE inside the tensor-core prefill attention's query load
# (DSV4_FUSED_ATTN_CHUNK_QNR, `attn_chunk_qnr`) against q_norm_rope then the attention (DSV4_FUSION_DISABLE=
# attn_chunk_qnr) in one build: test_cuda_attn (bitwise checks of the fused load), cuda_ops_check on flash4, flash4
# logits byte-identical with the fusion on / disabled / faulted (chunk 2048 and 300), ncu durations of ft_kernel
# and the full flash q2 2K prefill interleaved.
set -u
SUMMARY=s25_c2
. "$(dirname "$0")/ab_lib.sh"
ab_flash4
timeout 150 "$C/test_cuda_attn" >"$OUT/test_cuda_attn.txt" 2>&1
say "test_cuda_attn rc $?: $(tail -1 "$OUT/test_cuda_attn.txt")"
grep -E "^FAIL|qnr|TARGET" "$OUT/test_cuda_attn.txt" | head -20 | tee -a "$S"
ops_moe flash4 X=1
grep -E "q_norm_rope|attention_chunk" "$OUT/ops-flash4.txt" | cut -c1-200 | head -12 | tee -a "$S"
for ch in 2048 300; do
  dump on-$ch "$C/dsv4" $ch toks-long X=1
  dump dis-$ch "$C/dsv4" $ch toks-long DSV4_FUSION_DISABLE=attn_chunk_qnr
  dump flt-$ch "$C/dsv4" $ch toks-long DSV4_FAULT=attn_chunk_qnr
  same on-$ch dis-$ch; same on-$ch flt-$ch
  grep -h "attn_chunk_qnr\|fusion q_norm_rope:" "$OUT"/f.on-$ch.err "$OUT"/f.flt-$ch.err | head -6 | tee -a "$S"
done
NCU=/usr/local/cuda/bin/ncu
for v in on off; do
  env X=1 $([ $v = off ] && echo DSV4_FUSION_DISABLE=attn_chunk_qnr) timeout 100 "$NCU" --clock-control none \
    --metrics gpu__time_duration.sum -k "regex:ft_kernel|q_norm_rope" -c 8 "$C/dsv4" -m "$M" --backend cuda \
    --chunk 2048 --ctx 4096 --tokens "$(cat "$W/toks-long")" --dump-logits "$W/ncu.bin" >"$OUT/ncu-ft-$v.txt" 2>&1
  say "== ncu ft $v rc $?"; grep -E "ft_kernel|q_norm_rope|gpu__time" "$OUT/ncu-ft-$v.txt" | sed 's/  */ /g' | tee -a "$S"
done
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 64"
for i in 1 2; do
  run qnr-$i "$A2" X=1
  run noqnr-$i "$A2" DSV4_FUSION_DISABLE=attn_chunk_qnr
done
grep -ho '"attn_chunk_qnr[^}]*' "$OUT"/*qnr-1.json | head -2 | tee -a "$S"
rm -f /dev/shm/flash-q2.gguf
ab_finish "$SUMMARY"
