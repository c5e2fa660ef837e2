# Pieces the session A/B scripts share (source it; SUMMARY names the summary file): the paths, `say`,
# the flash4 model and token lists, teacher-forced logits dumps and their byte comparison, cuda_ops_check,
# and the full flash q2 runner. OLD / OLD_CLI: an older build's dsv4-bench / dsv4 carried in .carry/bin/bench.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT="${OUT:-$ROOT/ab-out}"; mkdir -p "$OUT"
S="$OUT/${SUMMARY:-summary}.txt"; touch "$S"
FB="$ROOT/scripts/device/flash_bench.sh"
OLD="$ROOT/.carry/bin/bench/dsv4-bench-old"
OLD_CLI="$ROOT/.carry/bin/bench/dsv4-old"
C="$ROOT/.carry/bin/cuda"; W=/dev/shm/dsv4-ab; M="$W/flash4.gguf"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
say() { echo "$*" | tee -a "$S"; }
say "commit: $(cat "$ROOT/.carry/COMMIT" 2>/dev/null || echo unknown)"
# flash4 (4 layers at the full width) and two token lists: toks-long (2,200) and toks (TOKS, default 300)
ab_flash4() {
  mkdir -p "$W"
  [ -s "$M" ] || "$ROOT/.carry/bin/dsv4-gguf" synth --preset flash --layers 4 --quant q2 "$M" >/dev/null || say "FAIL synth flash4"
  python3 -c "import random; r=random.Random(5); print(','.join(str(r.randrange(10,1000)) for _ in range(2200)))" >"$W/toks-long"
  python3 -c "import random; r=random.Random(11); print(','.join(str(r.randrange(10,1000)) for _ in range(${TOKS:-300})))" >"$W/toks"
}
# dump TAG BIN CHUNK TOKS [ENV=VAL ...]: teacher-forced logits of flash4 into $W/f.TAG.bin
dump() { local tag=$1 bin=$2 chunk=$3 toks=$4; shift 4
  env "$@" "$bin" -m "$M" --backend cuda --chunk $chunk --ctx 4096 --tokens "$(cat "$W/$toks")" --stats \
    --dump-logits "$W/f.$tag.bin" >/dev/null 2>"$OUT/f.$tag.err" || say "FAIL dump $tag: $(tail -1 "$OUT/f.$tag.err")"; }
same() { cmp -s "$W/f.$1.bin" "$W/f.$2.bin" && say "ok   $1 == $2 ($(stat -c %s "$W/f.$1.bin") bytes)" || say "FAIL $1 != $2"; }
# ab_ops_check PATTERN: cuda_ops_check on flash4 (DS4), its failures and the lines matching PATTERN
ab_ops_check() {
  local t0; t0=$(date +%s)
  timeout 200 "$C/cuda_ops_check" "$M" --numerics ds4 >"$OUT/ops_check.txt" 2>&1
  say "cuda_ops_check rc $?: $(tail -1 "$OUT/ops_check.txt") ($(( $(date +%s) - t0 )) s)"
  grep -E "^FAIL${1:+|$1}" "$OUT/ops_check.txt" | head -20 | tee -a "$S"
}
# ops_moe TAG [ENV=VAL ...]: cuda_ops_check on flash4 (DS4) under the switches into $OUT/ops-TAG.txt, its verdict,
# failures and moe f16 lines; returns its status
ops_moe() {
  local tag=$1 t0; shift; t0=$(date +%s)
  env "$@" timeout 240 "$C/cuda_ops_check" "$M" --numerics ds4 >"$OUT/ops-$tag.txt" 2>&1; local rc=$?
  say "== cuda_ops_check $tag ($*): rc $rc, $(tail -1 "$OUT/ops-$tag.txt") ($(( $(date +%s) - t0 )) s)"
  grep -E "^FAIL|moe f16" "$OUT/ops-$tag.txt" | cut -c1-230 | head -24 | tee -a "$S"
  return $rc
}
# ncu_moe KIND LIMIT "SECTIONS" "PATTERN": ncu of the routed-expert prefill kernels (KIND ws: DSV4_CUDA_MOE_WS=1,
# mh: the default) on flash4's first 2K chunk (gate/up and down of layer 0) into $OUT/ncu-moe-KIND.txt, skipped once
# the script has run LIMIT seconds; the summary gets the lines matching PATTERN
ncu_moe() {
  local k=$1 limit=$2 sections=$3 pat=$4 sec=""
  [ $SECONDS -lt "$limit" ] || { say "SKIP ncu $k: time"; return; }
  for x in $sections; do sec="$sec --section $x"; done
  env $([ "$k" = ws ] && echo DSV4_CUDA_MOE_WS=1) X=1 timeout 120 /usr/local/cuda/bin/ncu $sec --print-details all \
    -k "regex:mp_kernel|mh_kernel" -c 2 "$C/dsv4" -m "$M" --backend cuda --chunk 2048 --ctx 4096 \
    --tokens "$(cat "$W/toks-long")" --dump-logits "$W/ncu.bin" >"$OUT/ncu-moe-$k.txt" 2>&1
  say "== ncu moe $k rc $?"
  grep -E "$pat" "$OUT/ncu-moe-$k.txt" | sed 's/  */ /g' | cut -c1-160 | tee -a "$S"
}
# run TAG "BENCH ARGS" [ENV=VAL ...]: flash_bench.sh on the full flash q2 (BENCH=... runs another build)
run() { OUT="$OUT" "$FB" "$@" 2>&1 | grep -v ^ctx_tokens | tee -a "$S"; }
# vs_old TAG CHUNK TOKS: this build's and the older build's logits (new-TAG, old-TAG), compared
vs_old() { dump "new-$1" "$C/dsv4" "$2" "$3" X=1; dump "old-$1" "$OLD_CLI" "$2" "$3" X=1; same "new-$1" "old-$1"; }
# vs_env TAG CHUNK TOKS ENV=VAL: this build with the switch against new-TAG (dumped before)
vs_env() { local tag=$1 chunk=$2 toks=$3; shift 3; dump "$tag" "$C/dsv4" "$chunk" "$toks" "$@"; same "new-${tag#*-}" "$tag"; }
# tiny_ops QUANT PATTERN: synthesize the tiny model of QUANT (f16, q2) into /dev/shm, cuda_ops_check on it (DS4),
# its failures and up to 12 lines matching PATTERN
tiny_ops() {
  local q=$1 m=/dev/shm/tiny-$1.gguf
  "$ROOT/.carry/bin/dsv4-gguf" synth --preset tiny --quant "$q" "$m" >/dev/null 2>&1 || say "FAIL synth $q"
  timeout 100 "$C/cuda_ops_check" "$m" --numerics ds4 >"$OUT/ops-$q.txt" 2>&1
  say "ops $q rc $?: $(tail -1 "$OUT/ops-$q.txt")"
  grep -E "^FAIL|$2" "$OUT/ops-$q.txt" | head -12 | cut -c1-220 | tee -a "$S"
}
# oracle TAG [ENV=VAL ...]: the HF-oracle fixtures on the CUDA backend (test_oracle), its per-fixture DS4 lines
oracle() {
  local tag=$1; shift
  (cd "$ROOT" && env DSV4_TEST_BACKEND=cuda "$@" timeout 120 .carry/bin/cuda/test_oracle) >"$OUT/oracle-$tag.txt" 2>&1
  say "== oracle $tag ($*): rc $?"
  grep -E "^ds4 .*median|OK \]|FAILED \]" "$OUT/oracle-$tag.txt" | grep -v "listed below" | tee -a "$S"
}
# parity_run: cuda_parity.sh into $OUT/parity, its PASS / FAIL lines
parity_run() {
  mkdir -p "$OUT/parity"
  OUT="$OUT/parity" PARITY_TIMEOUT=150 timeout "${1:-300}" bash "$ROOT/scripts/device/cuda_parity.sh" >"$OUT/parity.log" 2>&1
  say "parity rc $?"
  grep -E "PASS|FAIL" "$OUT/parity.log" | head -40 | tee -a "$S"
}
# q8wg_chk TAG [ENV=VAL ...]: q8_wg_check (the exact Q8_0 warpgroup GEMM, bitwise and TOPS) into
# $OUT/q8wg-TAG.txt, its verdict and TOPS / failure lines; returns its status
q8wg_chk() {
  local tag=$1; shift
  env "$@" timeout 150 "$C/q8_wg_check" >"$OUT/q8wg-$tag.txt" 2>&1; local rc=$?
  say "== q8_wg_check $tag ($*): rc $rc, $(tail -1 "$OUT/q8wg-$tag.txt")"
  grep -E "FAIL|TOPS|never" "$OUT/q8wg-$tag.txt" | sed 's/.*n=/n=/; s/outputs differ from quant_dot_q8_0/differ/' | cut -c1-160 | tee -a "$S"
  return $rc
}
# fusion_tiers FUSION_LIMIT TIERS_LIMIT: fusion_check.sh and tiers_cuda.sh (seconds each at most) into
# $OUT/fusion, $OUT/tiers, their verdicts and FAIL / qnr / boundary lines
fusion_tiers() {
  OUT="$OUT/fusion" timeout "$1" bash "$ROOT/scripts/device/fusion_check.sh" >"$OUT/fusion.log" 2>&1
  say "fusion_check rc $?: $(tail -1 "$OUT/fusion.log")"
  grep -E "^FAIL|^ok.*qnr" "$OUT/fusion.log" | head -30 | tee -a "$S"
  OUT="$OUT/tiers" timeout "$2" bash "$ROOT/scripts/device/tiers_cuda.sh" >"$OUT/tiers.log" 2>&1
  say "tiers_cuda rc $?: $(tail -1 "$OUT/tiers.log")"
  grep -E "^FAIL|^ok|cost|boundary" "$OUT/tiers.log" | head -30 | tee -a "$S"
}
# ab_finish NAME: the closing line, then everything under $OUT but the summary in one archive NAME.tgz
# (the device tool brings back few files)
ab_finish() {
  say "$1 done"
  (cd "$OUT" && tar czf "$1.tgz" --exclude="$1.tgz" * && find . -type f ! -name "$1.tgz" ! -name "${SUMMARY:-summary}.txt" -delete)
}
