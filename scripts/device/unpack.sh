#!/usr/bin/env bash
# Decompress the programs `XZ=1 scripts/device/pack.sh` carried (python's lzma: no xz needed).
cd "$(dirname "$0")/../.."
for f in .carry/bin/cuda/*.xz .carry/bin/bench/*.xz; do
  [ -f "$f" ] || continue
  python3 -c 'import lzma, sys; open(sys.argv[1][:-3], "wb").write(lzma.open(sys.argv[1]).read())' "$f" && chmod +x "${f%.xz}" && rm -f "$f"
done
