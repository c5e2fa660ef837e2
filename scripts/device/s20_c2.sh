#!/usr/bin/env bash
# Session 20, call 2: the long runs on the warpgroup Q8_0 path (default since 2a0e7d4): 2K -> 32K
# (prefill and decode at 32K) and the 70K prompt + 128 tokens (finite logits); outputs in one archive.
set -u
SUMMARY=s20_c2
. "$(dirname "$0")/ab_lib.sh"
run s20c2-32k "--ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64" X=1
run s20c2-70k "--ctx-start 70000 --ctx-max 70000 --gen-tokens 128" X=1
grep -ho '"nonfinite_logits": [0-9]*\|"q8_wg_products": [0-9]*\|"buffer_bytes": [0-9]*' "$OUT"/*s20c2-70k*.json | tee -a "$S"
rm -f /dev/shm/flash-q2.gguf
say "s20_c2 done"
cd "$OUT" && tar czf s20c2.tgz --exclude=s20c2.tgz * && find . -type f ! -name s20c2.tgz ! -name s20_c2.txt -delete
