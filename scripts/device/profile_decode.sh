#!/usr/bin/env bash
# Per-op CUDA profile (DSV4_CUDA_PROFILE=1, src/backend/cuda/cuda_profile.cu) of a flash-width
# 4-layer q2 model: a decode run (a ~34-token prompt prefilled with chunk 1, then 64 decode steps)
# and a 256-token prefill in one chunk of 256 (dsv4-bench; its one decode step shows as n=1 rows,
# its snapshot save/restore as read/write rows). Each run is also made once without the profiler,
# so the summary shows what profiling costs. Run from the repo root on the GPU machine after
# `CUDA=1 scripts/device/pack.sh` here; results in $OUT (default ./profile-out):
#   profile_decode.txt, profile_prefill.txt (the tables, after the --stats / CSV lines),
#   profile_summary.txt (commit, unprofiled vs profiled speed, failures).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/profile-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Load every kernel at start-up: lazy loading would bill module loads to the first call of each op.
export CUDA_MODULE_LOADING="${CUDA_MODULE_LOADING:-EAGER}"
B="$ROOT/.carry/bin"; C="$B/cuda"; W=/dev/shm/dsv4-prof; mkdir -p "$W"
M="$W/flash4.gguf"; S="$OUT/profile_summary.txt"
PROMPT="Tell me a short story about a lighthouse keeper and a bottle."
fails=0
say() { echo "$*" | tee -a "$S"; }
: >"$S"
say "commit: $(cat "$ROOT/.carry/COMMIT" 2>/dev/null || echo unknown)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /' | tee -a "$S"
t0=$(date +%s)
"$B/dsv4-gguf" synth --preset flash --layers 4 --quant q2 "$M" >/dev/null || { say "FAIL synth"; exit 1; }
say "synth: $(( $(date +%s) - t0 )) s"

decode() { # profile(0|1) log
  DSV4_CUDA_PROFILE=$1 timeout 120 "$C/dsv4" -m "$M" --backend cuda --system "" -p "$PROMPT" -n 65 \
    --chunk 1 --seed 1 --ctx 512 --stats >/dev/null 2>"$2"
}
prefill() { # profile(0|1) log
  DSV4_CUDA_PROFILE=$1 timeout 120 "$C/dsv4-bench" -m "$M" --backend cuda \
    --prompt-file "$ROOT/data/tiny-corpus.txt" --ctx-start 256 --gen-tokens 1 --chunk 256 2>"$2"
}

decode 0 "$W/decode_plain.txt" || { say "FAIL decode without profiler"; fails=$((fails + 1)); }
decode 1 "$OUT/profile_decode.txt" || { say "FAIL decode with profiler"; fails=$((fails + 1)); }
prefill 0 "$W/prefill_plain.err" >"$W/prefill_plain.csv" || { say "FAIL prefill without profiler"; fails=$((fails + 1)); }
prefill 1 "$OUT/profile_prefill.txt" >"$W/prefill_prof.csv" || { say "FAIL prefill with profiler"; fails=$((fails + 1)); }
cat "$W/prefill_prof.csv" >>"$OUT/profile_prefill.txt"

say "decode without profiler:"; grep -E '^(prompt tokens|prefill|decode):' "$W/decode_plain.txt" | tee -a "$S"
say "decode with profiler:"; grep -E '^(prompt tokens|prefill|decode):' "$OUT/profile_decode.txt" | tee -a "$S"
say "prefill csv without / with profiler:"; tail -n 1 "$W/prefill_plain.csv" | tee -a "$S"
tail -n 1 "$W/prefill_prof.csv" | tee -a "$S"
for f in "$OUT/profile_decode.txt" "$OUT/profile_prefill.txt"; do
  grep -q '^== op profile' "$f" || { say "FAIL no profile table in $(basename "$f")"; fails=$((fails + 1)); }
done
rm -f "$M"
say "profile: $fails failure(s), $(( $(date +%s) - t0 )) s"
[ "$fails" -eq 0 ]
