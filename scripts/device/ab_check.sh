#!/usr/bin/env bash
# Every bitwise fast path against its switch-back reference on the GPU machine (after `CUDA=1
# scripts/device/pack.sh` here): teacher-forced logits of a flash-width 4-layer q2 model over 300
# positions, once one token per step (--chunk 1: the decode path, recorded steps, decode fusions)
# and once in chunks of 128 (the prefill path), with the default paths and with each switch
# (README "Runtime switches"; docs/PATHS.md). Each pair of dumps must be byte-identical.
# Not listed: DSV4_CUDA_PREFILL_F16=0 (the f16 tensor-core prefill is not bitwise by design),
# DSV4_CUDA_ATTN=exact (the fast attention sums in another order by design; tests/cuda says by how much),
# DSV4_CUDA_ATTN=tc (prefill attention with f16 weights on tensor cores, decode stays f32, so under tc
# the DSV4_PREFILL_SERIAL=1 pair is not byte-identical either; test_cuda_attn `chunk tc` says by how much),
# DSV4_CUDA_MVW=0 (the warp-direct products sum in another order) and DSV4_CUDA_MOE_DECODE=2launch
# (the 2-launch decode MoE adds each row's superblock terms in the CPU's order, the default path not).
# Every dump runs with DSV4_CUDA_ATTN=${AB_ATTN:-fast}: under the default tensor-core prefill attention
# the DSV4_PREFILL_SERIAL=1 pair differs by design (the other switches are bitwise under either).
# Results in $OUT (default ./ab-out)/ab_check.txt.
set -u
export DSV4_CUDA_ATTN="${AB_ATTN:-fast}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/ab-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
B="$ROOT/.carry/bin"; C="$B/cuda"; W=/dev/shm/dsv4-ab; mkdir -p "$W"
S="$OUT/ab_check.txt"; : >"$S"; fails=0
say() { echo "$*" | tee -a "$S"; }
SWITCHES="${AB_SWITCHES:-DSV4_CUDA_GRAPH=0 DSV4_STEP_AHEAD=0 DSV4_FUSION=off DSV4_KV_F32=1 DSV4_PREFILL_SERIAL=1 DSV4_CUDA_MOE_MMA=0 DSV4_CUDA_MOE_DECODE_FUSED=0 DSV4_CUDA_HC_FAST=0 DSV4_CUDA_HC_TAIL=multi DSV4_CUDA_HC_TAIL=off DSV4_CUDA_COMPRESSOR_CHUNK=serial DSV4_FUSION_DISABLE=parallel_ffn DSV4_FUSION_DISABLE=parallel_attn DSV4_CUDA_PDL=0 DSV4_CUDA_ROPE_EARLY=0 DSV4_CUDA_MOE_MMA_MIN_N=2 DSV4_CUDA_MOE_MID=warp DSV4_FUSION_DISABLE=hc_post_add DSV4_FUSION_DISABLE=attn_rope DSV4_FUSION_DISABLE=moe_sum_post DSV4_CUDA_PREQ_ATTN=0 DSV4_CUDA_EMIT_ROW=0 DSV4_CUDA_ROUTER_FUSED=1 DSV4_CUDA_HC_POST_PRE=0 DSV4_CUDA_COMPRESSOR_STAGED=0 DSV4_CUDA_MV_PLAN_IQ2=0,0,0,1 DSV4_CUDA_ISCORE=plain}"
say "commit: $(cat "$ROOT/.carry/COMMIT" 2>/dev/null || echo unknown)"
m="$W/flash4.gguf"
[ -s "$m" ] || "$B/dsv4-gguf" synth --preset flash --layers 4 --quant q2 "$m" >/dev/null || { say "FAIL synth"; exit 1; }
python3 -c "import random; r=random.Random(11); print(','.join(str(r.randrange(10,1000)) for _ in range(300)))" >"$W/toks"
for chunk in 1 128; do
  dump() { env "$@" "$C/dsv4" -m "$m" --backend cuda --chunk $chunk --ctx 1024 --tokens "$(cat "$W/toks")" \
      --stats --dump-logits "$W/d.$chunk.$tag.bin" >/dev/null 2>"$OUT/$chunk.$tag.err"; }
  tag=default; dump X=1 || { say "FAIL chunk $chunk default: $(tail -1 "$OUT/$chunk.$tag.err")"; fails=$((fails+1)); continue; }
  for sw in $SWITCHES; do
    tag=$sw
    # A=1+B=2: several switches in one run
    if ! dump $(echo "$sw" | tr + ' '); then say "FAIL chunk $chunk $sw: $(tail -1 "$OUT/$chunk.$tag.err")"; fails=$((fails+1)); continue; fi
    if cmp -s "$W/d.$chunk.default.bin" "$W/d.$chunk.$sw.bin"; then say "ok   chunk $chunk: default == $sw (byte-identical)"
    else say "FAIL chunk $chunk: default != $sw"; fails=$((fails+1)); fi
  done
  if [ "$chunk" = 1 ] && [ -z "${AB_SWITCHES:-}" ]; then
    tag=old; dump DSV4_CUDA_MOE_DECODE=old && tag=old_unfused && dump DSV4_CUDA_MOE_DECODE=old DSV4_CUDA_MOE_DECODE_FUSED=0
    if [ $? -ne 0 ]; then say "FAIL chunk 1 $tag: $(tail -1 "$OUT/1.$tag.err")"; fails=$((fails+1))
    elif cmp -s "$W/d.1.old.bin" "$W/d.1.old_unfused.bin"; then
      say "ok   chunk 1: DSV4_CUDA_MOE_DECODE=old == + DSV4_CUDA_MOE_DECODE_FUSED=0 (byte-identical)"
    else say "FAIL chunk 1: DSV4_CUDA_MOE_DECODE=old != + DSV4_CUDA_MOE_DECODE_FUSED=0"; fails=$((fails+1)); fi
  fi
  say "chunk $chunk default counters: $(grep -E '^fusion |^decode steps|^attention:' "$OUT/$chunk.default.err" | tr '\n' ' ')"
done
say "ab_check: $fails failure(s)"
