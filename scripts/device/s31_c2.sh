#!/usr/bin/env bash
# Session 31 call 2 (one H100 or H200, no full flash): issue 5's fusion matrix (fusion_check.sh, now with attn_qnr
# and attn_chunk_qnr: on == --no-fusion == gates off == each DSV4_FAULT, byte for byte, and the counters) and the
# virtual tiers (tiers_cuda.sh) on the current code.
set -u
SUMMARY=s31_c2
. "$(dirname "$0")/ab_lib.sh"
say "device: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
OUT="$OUT/fusion" timeout 330 bash "$ROOT/scripts/device/fusion_check.sh" >"$OUT/fusion.log" 2>&1
say "fusion_check rc $?: $(tail -1 "$OUT/fusion.log")"
grep -E "^FAIL|qnr" "$OUT/fusion.log" | head -30 | tee -a "$S"
OUT="$OUT/tiers" timeout 180 bash "$ROOT/scripts/device/tiers_cuda.sh" >"$OUT/tiers.log" 2>&1
say "tiers_cuda rc $?: $(tail -1 "$OUT/tiers.log")"
grep -E "^FAIL|^ok|cost|boundary" "$OUT/tiers.log" | head -30 | tee -a "$S"
ab_finish "$SUMMARY"
