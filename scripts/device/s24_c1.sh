#!/usr/bin/env bash
# Written in session 23 for the next session's first call (~4 min): where the routed-expert prefill kernels'
# instructions go. The SASS of mp_kernel (DSV4_CUDA_MOE_WS) and mh_kernel (the default), IQ2_XXS gate/up and Q2_K
# down, from the carried dsv4 binary; then one ncu report per kernel on flash4's first 2K chunk with per-instruction
# counts (the source page as CSV: executed instructions and stall samples per SASS line, -lineinfo maps them to
# cuda_moe_ws.cuh / cuda_moe_half.cuh), and the instruction-statistics section.
set -u
SUMMARY=s24_c1
. "$(dirname "$0")/ab_lib.sh"
ab_flash4
CUOBJ=/usr/local/cuda/bin/cuobjdump NCU=/usr/local/cuda/bin/ncu
for f in '_Z9mp_kernelILi6EEv9mh_params' '_Z9mp_kernelILi4EEv9mh_params' '_Z9mh_kernelILi6ELi16ELb1EEv9mh_params' \
  '_Z9mh_kernelILi4ELi16ELb0EEv9mh_params'; do
  "$CUOBJ" -sass -fun "$f" "$C/dsv4" >"$OUT/sass-$f.txt" 2>&1
  say "sass $f: rc $?, $(grep -c '/\*[0-9a-f]*\*/' "$OUT/sass-$f.txt") instructions"
done
for k in ws mh; do
  env $([ $k = ws ] && echo DSV4_CUDA_MOE_WS=1) X=1 timeout 150 "$NCU" --section InstructionStats \
    --section SourceCounters --section WarpStateStats --import-source yes -o "$OUT/rep-$k" \
    -k "regex:mp_kernel|mh_kernel" -c 2 "$C/dsv4" -m "$M" --backend cuda --chunk 2048 --ctx 4096 \
    --tokens "$(cat "$W/toks-long")" --dump-logits "$W/ncu.bin" >"$OUT/ncu-$k.log" 2>&1
  say "== ncu $k rc $?"
  "$NCU" -i "$OUT/rep-$k.ncu-rep" --page details --print-details all >"$OUT/ncu-$k-details.txt" 2>&1
  "$NCU" -i "$OUT/rep-$k.ncu-rep" --page source --csv --print-source sass >"$OUT/ncu-$k-sass.csv" 2>&1
  say "   source csv: $(wc -l <"$OUT/ncu-$k-sass.csv") lines"
  grep -E "Executed Instructions|Issued Instructions|Warp Cycles Per Issued|Stall" "$OUT/ncu-$k-details.txt" | sed 's/  */ /g' | head -24 | tee -a "$S"
done
# the tensor-core prefill attention (ft_kernel), every layer of the first chunk: stalls per SASS line
env X=1 timeout 150 "$NCU" --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
  --section SourceCounters --section Occupancy --import-source yes -o "$OUT/rep-ft" -k "regex:ft_kernel" -c 4 \
  "$C/dsv4" -m "$M" --backend cuda --chunk 2048 --ctx 4096 --tokens "$(cat "$W/toks-long")" \
  --dump-logits "$W/ncu.bin" >"$OUT/ncu-ft.log" 2>&1
say "== ncu ft rc $?"
"$NCU" -i "$OUT/rep-ft.ncu-rep" --page details --print-details all >"$OUT/ncu-ft-details.txt" 2>&1
"$NCU" -i "$OUT/rep-ft.ncu-rep" --page source --csv --print-source sass >"$OUT/ncu-ft-sass.csv" 2>&1
grep -E "Duration|Executed Ipc|Issue Slots Busy|Warp Cycles Per Issued|Achieved Occupancy|Pipe" "$OUT/ncu-ft-details.txt" | sed 's/  */ /g' | head -40 | tee -a "$S"
ab_finish "$SUMMARY"
