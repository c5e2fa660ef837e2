#!/usr/bin/env python3
"""Decode-step timeline from a DSV4_CUDA_PROFILE=graph stamp log (DSV4_CUDA_PROFILE_LOG=path).

Usage: stamps_report.py LOG.csv [STEP]
Prints, for the decode steps (the stretches between two `embed` stamps whose ops are all n=1 or
unsized), the per-step mean of each op key (count per step, mean us, share), the mean step span,
and the op-by-op timeline of one step (STEP: its index among the decode steps, default the
middle one): start and end in us from the step's first stamp, and the gap since the end of the
op before it on the same lane guess (ops that start before the previous one ended overlap: a
side lane)."""
import collections
import csv
import sys


def load(path):
    pairs = []  # (begin ns, end ns, key) in the order the ops began
    open_ = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            t, after, scope, key = int(r["ns"]), r["after"] == "1", r["scope"], r["key"]
            if not after:
                open_[scope] = (t, len(pairs))
                pairs.append(None)
            elif scope in open_:
                t0, i = open_.pop(scope)
                pairs[i] = (t0, t, key)
    return [p for p in pairs if p]


def steps(pairs):
    out, cur = [], None
    for p in pairs:
        if p[2] == "embed":
            if cur:
                out.append(cur)
            cur = [p]
        elif cur is not None:
            cur.append(p)
    if cur:
        out.append(cur)
    return [s for s in out if all(" n=" not in k or " n=1 " in k + " " for _, _, k in s)]


def main():
    pairs = load(sys.argv[1])
    dec = steps(pairs)
    if len(dec) < 2:
        print("fewer than 2 decode steps in the log")
        return 1
    dec = dec[1:]  # the first may hold warm-up work
    span = sorted(max(e for _, e, _ in s) - s[0][0] for s in dec)
    tot = collections.defaultdict(float)
    cnt = collections.defaultdict(int)
    for s in dec:
        for b, e, k in s:
            tot[k] += e - b
            cnt[k] += 1
    n = len(dec)
    busy = sum(tot.values()) / n
    print(f"decode steps: {n}, step span median {span[n // 2] / 1e3:.1f} us, "
          f"summed op time {busy / 1e3:.1f} us a step")
    print(f"{'op':70s} {'/step':>6s} {'mean us':>8s} {'us/step':>8s} {'share':>6s}")
    for k in sorted(tot, key=lambda k: -tot[k]):
        print(f"{k[:70]:70s} {cnt[k] / n:6.1f} {tot[k] / cnt[k] / 1e3:8.2f} {tot[k] / n / 1e3:8.1f} "
              f"{100 * tot[k] / n / busy:5.1f}%")
    i = int(sys.argv[2]) if len(sys.argv) > 2 else n // 2
    s = dec[i]
    t0 = s[0][0]
    print(f"\nstep {i}: op timeline (us from the step's first stamp)")
    last_end = t0
    for b, e, k in s:
        gap = (b - last_end) / 1e3
        print(f"{(b - t0) / 1e3:9.2f} {(e - t0) / 1e3:9.2f} {(e - b) / 1e3:7.2f} "
              f"{'overlap' if gap < 0 else f'+{gap:6.2f}':>8s}  {k[:80]}")
        last_end = max(last_end, e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
