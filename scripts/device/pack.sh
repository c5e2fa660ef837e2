#!/usr/bin/env bash
# Build here and gather what the GPU machine needs into .carry/ (ignored by git, named in the
# device tool's `carry`): the programs, test binaries, and the non-system shared libraries they
# link (the GPU image has none of our Debian -dev packages). CUDA=1 adds `make cuda` and copies the
# CUDA-enabled programs ($BUILD/cuda/*: dsv4, dsv4-bench, cuda_ops_check) into .carry/bin/cuda/. On the GPU machine:
#   export LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH; .carry/bin/dsv4-gguf ...
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD="${BUILD:-build}"
make -j2 BUILD="$BUILD" programs ${CUDA:+cuda cuda-tests} >/dev/null # cuda-tests: no stale GPU tests
rm -rf .carry && mkdir -p .carry/bin .carry/lib
for p in "$BUILD"/dsv4*; do [ -x "$p" ] && [ -f "$p" ] && cp "$p" .carry/bin/; done
for extra in "$@"; do cp "$extra" .carry/bin/; done
if [ -n "${CUDA:-}" ]; then # CUDA=1: the CUDA-enabled programs too, in .carry/bin/cuda/
  mkdir -p .carry/bin/cuda
  for p in "$BUILD"/cuda/*; do
    case "$p" in *_emu_check|*_units_check) continue ;; esac # host-only checks: they run here
    [ -x "$p" ] && [ -f "$p" ] && cp "$p" .carry/bin/cuda/
  done
fi
# BENCHES="cuda_mvw_bench ...": kernel benchmark programs ($BUILD/bench/, `make bench-cuda`) into
# .carry/bin/bench/ (scripts/device/flash4_check.sh runs each)
if [ -n "${BENCHES:-}" ]; then
  mkdir -p .carry/bin/bench
  for bn in $BENCHES; do make -j2 BUILD="$BUILD" "$BUILD/bench/$bn" >/dev/null && cp "$BUILD/bench/$bn" .carry/bin/bench/; done
fi
# debug info stays here (the carried tree must stay small)
strip --strip-debug .carry/bin/* .carry/bin/cuda/* .carry/bin/bench/* 2>/dev/null || true
for b in .carry/bin/* .carry/bin/cuda/* .carry/bin/bench/*; do
  [ -f "$b" ] || continue
  ldd "$b" 2>/dev/null | awk '/=> \//{print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libgcc_s.so*|libstdc++.so*|libcuda.so*) ;;
      *) cp -L "$lib" .carry/lib/ ;;
    esac
  done
done
# the ds4-bench prompt text (shared data, outside the repo)
if [ -f ../shared/data/promessi_sposi.txt ]; then mkdir -p .carry/data && cp ../shared/data/promessi_sposi.txt .carry/data/; fi
git rev-parse HEAD > .carry/COMMIT 2>/dev/null || echo unknown > .carry/COMMIT
du -sh .carry
# XZ=1: the CUDA programs compressed (the carried tree is limited to 64 MiB); on the GPU machine
# run scripts/device/unpack.sh first
if [ -n "${XZ:-}" ]; then
  for b in .carry/bin/cuda/* .carry/bin/bench/*; do [ -f "$b" ] && xz -T2 -6 "$b"; done
  du -sh .carry
fi
