#!/usr/bin/env bash
# Pack everything under $OUT into one file, $OUT/results.tgz, so that the device tool (which
# brings back only a few files per call, and none whose name has '=') returns all of it. Run as the
# last command of a device call:  ...; scripts/device/bundle.sh
# Here: mkdir -p bench/results/x && tar xzf <files_at>/results.tgz -C bench/results/x
set -u
[ -n "${OUT:-}" ] && [ -d "$OUT" ] || { echo "bundle: OUT is not a directory"; exit 1; }
tmp=$(mktemp /tmp/bundle.XXXXXX.tgz)
tar czf "$tmp" -C "$OUT" . && find "$OUT" -mindepth 1 -delete && mv "$tmp" "$OUT/results.tgz" &&
  echo "bundle: $(tar tzf "$OUT/results.tgz" | grep -vc '/$') files in results.tgz ($(du -h "$OUT/results.tgz" | cut -f1))"
