#!/usr/bin/env bash
# Static SASS instruction mix of the kernels in a CUDA binary whose mangled name matches $2 (needs
# cuobjdump, present on the GPU machine): per kernel, the count of each opcode, most frequent first.
# Usage: scripts/device/sass_stats.sh .carry/bin/bench/cuda_matvec_bench 'mv_kernel'
set -u
BIN="$1"; PAT="${2:-.}"
command -v cuobjdump >/dev/null || { echo "sass_stats: no cuobjdump"; exit 0; }
cuobjdump -sass -arch sm_90 "$BIN" 2>/dev/null | python3 -c '
import re, sys, collections
pat = re.compile(sys.argv[1]); cur = None; counts = {}
for line in sys.stdin:
    m = re.match(r"\s*Function : (\S+)", line)
    if m:
        cur = m.group(1) if pat.search(m.group(1)) else None
        if cur: counts[cur] = collections.Counter()
        continue
    if cur is None: continue
    m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
    if m: counts[cur][m.group(1).split(".")[0]] += 1
for k, c in counts.items():
    print(k, "total", sum(c.values()))
    print("  " + " ".join(f"{o}:{n}" for o, n in c.most_common(28)))
' "$PAT"
