#!/usr/bin/env bash
# Session 17, call 5 (final code): cuda_matvec_bench (all cases once, the IQ2_XXS cases twice more); flash4
# teacher-forced decode logits of the streamed kernels vs the pipelines (DSV4_CUDA_MV_IQ2=sel) and both vs the
# CPU (ds4 numerics, statistics); cuda_ops_check; cuda_parity.sh; full flash q2 2K decode (128 tokens) x3 and
# once with the pipelines, 2K -> 32K.
set -u
SUMMARY=s17_c5${PART:-a} TOKS=120
. "$(dirname "$0")/ab_lib.sh"
B2="$ROOT/.carry/bin/bench"
if [ "${PART:-a}" = a ]; then # PART=a: kernels, logits, checks; PART=b: the full flash q2 runs
timeout 200 "$B2/cuda_matvec_bench" >"$OUT/mv_all.txt" 2>&1; say "cuda_matvec_bench rc $?"
grep -E "^FAIL|  FAIL|RESULT" "$OUT/mv_all.txt" | tee -a "$S"
for k in 2 3; do
  timeout 120 "$B2/cuda_matvec_bench" --filter IQ2_XXS >"$OUT/mv_iq2_$k.txt" 2>&1; say "IQ2_XXS run $k rc $?"
  grep -E "  FAIL|RESULT" "$OUT/mv_iq2_$k.txt" | tee -a "$S"
done
ab_flash4
dump stream-c1 "$C/dsv4" 1 toks
dump pipe-c1 "$C/dsv4" 1 toks DSV4_CUDA_MV_IQ2=sel
"$ROOT/.carry/bin/dsv4" -m "$M" --backend cpu --threads 16 --ctx 4096 --tokens "$(cat "$W/toks")" \
  --dump-logits "$W/f.cpu.bin" >/dev/null 2>"$OUT/f.cpu.err" || say "FAIL cpu dump: $(tail -1 "$OUT/f.cpu.err")"
for pr in "stream-c1 pipe-c1" "stream-c1 cpu" "pipe-c1 cpu"; do
  set -- $pr
  python3 "$ROOT/scripts/device/parity_compare.py" --ref "$W/f.$2.bin" --test "$W/f.$1.bin" --label "flash4 $TOKS $1 vs $2" --stats 2>&1 | tee -a "$S"
done
rm -f "$W"/f.*.bin
ab_ops_check "matvec|moe decode"
OUT="$OUT/parity" PARITY_TIMEOUT=200 timeout 400 bash "$ROOT/scripts/device/cuda_parity.sh" >/dev/null 2>&1; say "cuda_parity rc $?"
grep -E "^(PASS|FAIL|ERROR|TIMEOUT)" "$OUT/parity/parity_summary.txt" | cut -c1-200 | tee -a "$S"
fi
if [ "${PART:-a}" = b ]; then
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 128"
run s17c5-2k-1 "$A2" X=1
run s17c5-2k-pipe "$A2" DSV4_CUDA_MV_IQ2=sel
run s17c5-2k-2 "$A2" X=1
run s17c5-2k-3 "$A2" X=1
OUT="$OUT" timeout 150 "$FB" "s17c5-2k-32k" "--ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64" X=1 2>&1 | grep -v ^ctx_tokens | tee -a "$S"
fi
say "s17_c5 ${PART:-a} done"
cd "$OUT" && tar czf s17c5.tgz --exclude=s17c5.tgz * && find . -type f ! -name s17c5.tgz ! -name "s17_c5*.txt" -delete
