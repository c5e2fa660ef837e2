#!/usr/bin/env bash
# Session 12, first call (after `CUDA=1 XZ=1 scripts/device/pack.sh` here, with the last
# GPU-validated build's dsv4 carried as .carry/bin/cuda/dsv4-old.xz; scripts/device/unpack.sh there):
#  1. the refactors since that build (router_block, norm_rope_row, hc_post_value, experts_dev) change
#     nothing: flash4 teacher-forced logits, all defaults, old == new byte for byte at chunk 1 and
#     128 (300 positions) and at chunk 1 over 2,200 positions (the indexer's fused query);
#  2. cuda_ops_check (emit_row, router_topk, hc_post_pre_norm bitwise vs their unfused ops);
#  3. ab_check with the three new switches, each alone and all together;
#  4. fusion_check (the three switched on).
# Results in $OUT.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/s12-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
C="$ROOT/.carry/bin/cuda"; W=/dev/shm/dsv4-ab; mkdir -p "$W"; M="$W/flash4.gguf"
S="$OUT/s12_checks.txt"; : >"$S"
say() { echo "$*" | tee -a "$S"; }
say "commit: $(cat "$ROOT/.carry/COMMIT" 2>/dev/null || echo unknown)"
[ -s "$M" ] || "$ROOT/.carry/bin/dsv4-gguf" synth --preset flash --layers 4 --quant q2 "$M" >/dev/null || { say "FAIL synth"; exit 1; }
python3 -c "import random; r=random.Random(11); print(','.join(str(r.randrange(10,1000)) for _ in range(300)))" >"$W/toks"
python3 -c "import random; r=random.Random(5); print(','.join(str(r.randrange(10,1000)) for _ in range(2200)))" >"$W/toks-long"
if [ -x "$C/dsv4-old" ]; then
  for run in "1 toks 1024" "128 toks 1024" "1 toks-long 4096"; do
    set -- $run
    for b in dsv4 dsv4-old; do
      "$C/$b" -m "$M" --backend cuda --chunk $1 --ctx $3 --tokens "$(cat "$W/$2")" --stats \
        --dump-logits "$W/oldnew.$b.bin" >/dev/null 2>"$OUT/oldnew.$1.$2.$b.err" || say "FAIL $b chunk $1 $2: $(tail -1 "$OUT/oldnew.$1.$2.$b.err")"
    done
    cmp -s "$W/oldnew.dsv4.bin" "$W/oldnew.dsv4-old.bin" && say "ok   old == new, chunk $1, $2 ($(stat -c %s "$W/oldnew.dsv4.bin") bytes)" || say "FAIL old != new, chunk $1, $2"
  done
else say "no dsv4-old carried: old/new comparison skipped"; fi
timeout 170 "$C/cuda_ops_check" "$M" --numerics ds4 >"$OUT/ops_check.txt" 2>&1; say "cuda_ops_check rc $?: $(tail -1 "$OUT/ops_check.txt")"
grep -E "^FAIL|emit_row|router|post_pre|q_norm_rope_idx" "$OUT/ops_check.txt" | head -30 | tee -a "$S"
AB_SWITCHES="DSV4_CUDA_EMIT_ROW=1 DSV4_CUDA_ROUTER_FUSED=1 DSV4_CUDA_HC_POST_PRE=1 DSV4_CUDA_EMIT_ROW=1+DSV4_CUDA_ROUTER_FUSED=1+DSV4_CUDA_HC_POST_PRE=1 DSV4_FUSION=off" \
  OUT="$OUT/ab" timeout 150 "$ROOT/scripts/device/ab_check.sh" 2>&1 | grep -E "^FAIL|ab_check:|counters" | tee -a "$S"
OUT="$OUT/fusion" timeout 280 "$ROOT/scripts/device/fusion_check.sh" 2>&1 | grep -E "^FAIL|fusion_check:|long|emit_row|router_topk|hc_post_pre" | tee -a "$S"
say "s12_checks done"
