#!/usr/bin/env bash
# Session 31 call 2 (one H100 or H200, no full flash): issue 5's fusion matrix (fusion_check.sh, now with attn_qnr
# and attn_chunk_qnr: on == --no-fusion == gates off == each DSV4_FAULT, byte for byte, and the counters) and the
# virtual tiers (tiers_cuda.sh) on the current code.
set -u
SUMMARY=s31_c2
. "$(dirname "$0")/ab_lib.sh"
say "device: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
fusion_tiers 330 180
ab_finish "$SUMMARY"
