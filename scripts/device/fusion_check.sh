#!/usr/bin/env bash
# CUDA fused ops against their unfused sequences on the GPU machine (after `CUDA=1
# scripts/device/pack.sh` here; issue 5 acceptance, docs/PATHS.md). For a tiny q2 and a flash-width
# 4-layer q2 model, teacher-forced logits one token per step (--chunk 1: the decode path, where
# the CUDA fusions apply), under: fusions on (default), --no-fusion, DSV4_FAULT=<each fusion>
# (the fused op runs, its outputs are poisoned, the fallback must rewrite them; parallel_attn, which
# advances KV state, fails before it starts) and
# DSV4_CUDA_FUSED_GATE=off (every CUDA gate false). All dumps must be byte-identical (the CUDA
# fusions are bitwise by construction) and the --stats counters must show each fusion selected by
# default, never selected with the gates off, and failing over under DSV4_FAULT. q_norm_rope and
# kv_norm_rope_fp8 also apply to prefill chunks: --chunk 64 on / off / faulted must match too.
# With FLASH=1 (the full model in /dev/shm/flash-q2.gguf, see flash_bench.sh) also 128 greedy tokens
# with fusions on and off. Results in $OUT (default ./fusion-out)/fusion_check.txt.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/fusion-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
B="$ROOT/.carry/bin"; C="$B/cuda"; W=/dev/shm/dsv4-fusion; mkdir -p "$W"
S="$OUT/fusion_check.txt"; : >"$S"; fails=0
say() { echo "$*" | tee -a "$S"; }
FUSIONS="hc_pre_norm q_norm_rope kv_norm_rope_fp8 parallel_ffn parallel_attn hc_post_add attn_rope moe_sum_post q_norm_rope_idx emit_row router_topk hc_post_pre_norm attn_qnr"
# the fused router is off by default (measured slower): on for every run here
export DSV4_CUDA_ROUTER_FUSED="${DSV4_CUDA_ROUTER_FUSED:-1}"
say "commit: $(cat "$ROOT/.carry/COMMIT" 2>/dev/null || echo unknown)"
"$B/dsv4-gguf" synth --preset tiny --quant q2 "$W/tiny.gguf" >/dev/null || say "FAIL synth tiny"
"$B/dsv4-gguf" synth --preset flash --layers 4 --quant q2 "$W/flash4.gguf" >/dev/null || say "FAIL synth flash4"
python3 -c "import random; r=random.Random(9); print(','.join(str(r.randrange(10,1000)) for _ in range(300)))" >"$W/toks"
for name in tiny flash4; do
  m="$W/$name.gguf"
  dump() { # tag env... ; extra args after --
    local tag=$1; shift
    env "$@" "$C/dsv4" -m "$m" --backend cuda --chunk "$ch" --ctx 1024 --tokens "$(cat "$W/toks")" --stats \
      --dump-logits "$W/$name.$tag.bin" 2>"$OUT/$name.$tag.err" >/dev/null || { say "FAIL $name $tag: $(tail -1 "$OUT/$name.$tag.err")"; fails=$((fails+1)); }
    say "$name $tag: $(grep -E '^fusion ' "$OUT/$name.$tag.err" | tr '\n' ' ')"
  }
  ch=1
  dump on X=1
  dump nofusion DSV4_FUSION=off
  dump gateoff DSV4_CUDA_FUSED_GATE=off
  for f in $FUSIONS; do dump "fault-$f" DSV4_FAULT=$f; done
  # flash4 decode: attn_qnr takes the query norm + RoPE (q_norm_rope, attn_rope) into the attention;
  # those two are checked with attn_qnr disabled by name
  QNR_TAGS=""
  if [ "$name" = flash4 ]; then
    dump noqnr DSV4_FUSION_DISABLE=attn_qnr
    for f in q_norm_rope attn_rope; do dump "noqnr-fault-$f" DSV4_FUSION_DISABLE=attn_qnr DSV4_FAULT=$f; done
    QNR_TAGS="noqnr noqnr-fault-q_norm_rope noqnr-fault-attn_rope"
  fi
  # every decode step recorded: none fell back to op-by-op (a scratch buffer growing during a
  # recording used to make the first steps after a prefill run unrecorded)
  grep -qE "unrecorded after a failed recording 0" "$OUT/$name.on.err" && say "ok   $name: every decode step recorded" || { say "FAIL $name: decode steps ran unrecorded: $(grep -E 'decode steps' "$OUT/$name.on.err")"; fails=$((fails+1)); }
  for tag in nofusion gateoff $(for f in $FUSIONS; do echo fault-$f; done) $QNR_TAGS; do
    if cmp -s "$W/$name.on.bin" "$W/$name.$tag.bin"; then say "ok   $name: fusions on == $tag (byte-identical)"
    else say "FAIL $name: fusions on != $tag"; fails=$((fails+1)); fi
  done
  # prefill chunks of 64 (q_norm_rope and kv_norm_rope_fp8 also fuse there): on == off == faulted
  ch=64
  dump p64on X=1
  dump p64off DSV4_FUSION=off
  dump p64fault DSV4_FAULT=q_norm_rope,kv_norm_rope_fp8,parallel_ffn,hc_post_add,attn_chunk_qnr
  dump p64gateoff DSV4_CUDA_FUSED_GATE=off
  ch=1
  for tag in p64off p64fault p64gateoff; do
    if cmp -s "$W/$name.p64on.bin" "$W/$name.$tag.bin"; then say "ok   $name: chunk 64 fusions on == $tag (byte-identical)"
    else say "FAIL $name: chunk 64 fusions on != $tag"; fails=$((fails+1)); fi
  done
  for f in $FUSIONS; do
    if [ "$name" = tiny ] && [ "$f" = moe_sum_post ]; then # its gate wants the tuned matvec's 16-byte rows
      grep -qE "^fusion $f: selected 0, fallback 0, faulted 0, skipped [1-9]" "$OUT/$name.on.err" && say "ok   $name: $f gated off (expert rows not 16-byte multiples)" || { say "FAIL $name: $f counters"; fails=$((fails+1)); }
      continue
    fi
    if [ "$name" = tiny ] && [ "$f" = hc_post_pre_norm ]; then # its gate wants the register tail's widths (1024, 4096)
      grep -qE "^fusion $f: selected 0, fallback 0, faulted 0, skipped [1-9]" "$OUT/$name.on.err" && say "ok   $name: $f gated off (n_embd not 1024 or 4096)" || { say "FAIL $name: $f counters"; fails=$((fails+1)); }
      continue
    fi
    if [ "$name" = tiny ] && { [ "$f" = attn_rope ] || [ "$f" = attn_qnr ]; }; then # its gate wants 512-wide heads (the fast attention)
      grep -qE "^fusion $f: selected 0, fallback 0, faulted 0, skipped [1-9]" "$OUT/$name.on.err" && say "ok   $name: $f gated off (heads narrower than 512)" || { say "FAIL $name: $f counters"; fails=$((fails+1)); }
      continue
    fi
    if [ "$name" = flash4 ] && [ "$f" = q_norm_rope_idx ]; then # the indexer starts past position 2050: the long run below
      grep -qE "^fusion $f: selected 0, fallback 0, faulted 0, skipped 0" "$OUT/$name.on.err" && say "ok   $name: $f not reached in 300 positions" || { say "FAIL $name: $f counters"; fails=$((fails+1)); }
      continue
    fi
    son="$OUT/$name.on.err"; sfault="$OUT/$name.fault-$f.err"
    if [ "$name" = flash4 ] && [ "$f" = hc_post_add ]; then # decode FFNs take moe_sum_post: the prefill runs
      son="$OUT/$name.p64on.err"; sfault="$OUT/$name.p64fault.err"
    fi
    if [ "$name" = flash4 ] && { [ "$f" = q_norm_rope ] || [ "$f" = attn_rope ]; }; then # superseded by attn_qnr
      grep -qE "^fusion $f: selected 0, fallback 0, faulted 0, skipped 0" "$son" && say "ok   $name: $f superseded by attn_qnr" || { say "FAIL $name: $f ran beside attn_qnr"; fails=$((fails+1)); }
      son="$OUT/$name.noqnr.err"; sfault="$OUT/$name.noqnr-fault-$f.err"
    fi
    grep -qE "^fusion $f: selected [1-9]" "$son" && say "ok   $name: $f selected" || { say "FAIL $name: $f not selected"; fails=$((fails+1)); }
    grep -qE "^fusion $f: selected 0," "$OUT/$name.gateoff.err" && say "ok   $name: $f never selected with the gates off" || { say "FAIL $name: $f selected with gates off"; fails=$((fails+1)); }
    grep -qE "^fusion $f: selected 0, fallback [1-9][0-9]*, faulted [1-9]" "$sfault" && say "ok   $name: DSV4_FAULT=$f fell back every time" || { say "FAIL $name: fault counters for $f"; fails=$((fails+1)); }
  done
  # the prefill chunk's query norm + RoPE inside the attention (512-wide heads only: flash4)
  f=attn_chunk_qnr
  if [ "$name" = tiny ]; then
    grep -qE "^fusion $f: selected 0, fallback 0, faulted 0, skipped [1-9]" "$OUT/$name.p64on.err" && say "ok   $name: $f gated off (heads narrower than 512)" || { say "FAIL $name: $f counters"; fails=$((fails+1)); }
  else
    grep -qE "^fusion $f: selected [1-9]" "$OUT/$name.p64on.err" && say "ok   $name: $f selected" || { say "FAIL $name: $f not selected"; fails=$((fails+1)); }
    grep -qE "^fusion $f: selected 0," "$OUT/$name.p64gateoff.err" && say "ok   $name: $f never selected with the gates off" || { say "FAIL $name: $f selected with gates off"; fails=$((fails+1)); }
    grep -qE "^fusion $f: selected 0, fallback [1-9][0-9]*, faulted [1-9]" "$OUT/$name.p64fault.err" && say "ok   $name: DSV4_FAULT=$f fell back every time" || { say "FAIL $name: fault counters for $f"; fails=$((fails+1)); }
  fi
done
# flash4 past the indexer's start (2,200 positions, one token per step): q_norm_rope_idx selected
# in the ratio-4 layers, and on == disabled by name == faulted, byte for byte
python3 -c "import random; r=random.Random(5); print(','.join(str(r.randrange(10,1000)) for _ in range(2200)))" >"$W/toks-long"
for tag in on off fault; do
  case $tag in on) e=X=1 ;; off) e=DSV4_FUSION_DISABLE=q_norm_rope_idx ;; fault) e=DSV4_FAULT=q_norm_rope_idx ;; esac
  env "$e" "$C/dsv4" -m "$W/flash4.gguf" --backend cuda --chunk 1 --ctx 4096 --tokens "$(cat "$W/toks-long")" --stats \
    --dump-logits "$W/long.$tag.bin" 2>"$OUT/long.$tag.err" >/dev/null || { say "FAIL long $tag: $(tail -1 "$OUT/long.$tag.err")"; fails=$((fails+1)); }
  say "flash4 long $tag: $(grep -E '^fusion q_norm_rope' "$OUT/long.$tag.err" | tr '\n' ' ')"
done
grep -qE "^fusion q_norm_rope_idx: selected [1-9]" "$OUT/long.on.err" && say "ok   flash4 long: q_norm_rope_idx selected" || { say "FAIL flash4 long: q_norm_rope_idx not selected"; fails=$((fails+1)); }
grep -qE "^fusion q_norm_rope_idx: selected 0, fallback [1-9][0-9]*, faulted [1-9]" "$OUT/long.fault.err" && say "ok   flash4 long: DSV4_FAULT=q_norm_rope_idx fell back every time" || { say "FAIL flash4 long: fault counters"; fails=$((fails+1)); }
for tag in off fault; do
  cmp -s "$W/long.on.bin" "$W/long.$tag.bin" && say "ok   flash4 long: on == $tag (byte-identical)" || { say "FAIL flash4 long: on != $tag"; fails=$((fails+1)); }
done
rm -f "$W"/long.*.bin
if [ -n "${FLASH:-}" ] && [ -s /dev/shm/flash-q2.gguf ]; then
  for tag in on off; do
    a=""; [ $tag = off ] && a=--no-fusion
    "$C/dsv4" -m /dev/shm/flash-q2.gguf --backend cuda --system "" -p "Tell me about the lighthouse." -n 128 --temp 0 \
      --ctx 2048 --stats $a >"$OUT/flash.$tag.txt" 2>"$OUT/flash.$tag.err"
    say "flash $tag: $(grep -E '^decode:|^fusion ' "$OUT/flash.$tag.err" | tr '\n' ' ')"
  done
  cmp -s "$OUT/flash.on.txt" "$OUT/flash.off.txt" && say "ok   full flash: 128 greedy tokens identical with fusions on and off" || { say "FAIL full flash greedy text differs"; fails=$((fails+1)); }
fi
say "fusion_check: $fails failure(s)"
