"""ds4 CPU numerics as small pure torch functions (shared/spec/model-attention-hc.md §6, model-moe-gguf-tokenizer.md
§1.5/§2.8), used by the oracle's monkeypatches, plus their self-tests (hand-derived values and brute-force
references). Works on any device; inputs of any float dtype; outputs have the input's dtype.

Where the engine computes a quantity in float32, it is computed here as the float32 result: every single float32
operation (a/b, a*b, log2) is done in float64 and rounded once to float32, which gives exactly the correctly rounded
float32 result for +,-,*,/ (53 >= 2*24+2), independent of the device's float32 division/reciprocal code.

    python3 scripts/oracle/numerics.py      # runs the self-tests (CPU)
"""

import math
import sys

import torch

F32 = torch.float32
F64 = torch.float64


# ------------------------------------------------------------------------------------------------ helpers
def _fl32(x64):
    """Round a float64 tensor to float32 (once) and return it as float32."""
    return x64.to(F32)


def _div32(a32, b32):
    return _fl32(a32.to(F64) / b32.to(F64))


def _mul32(a32, b32):
    return _fl32(a32.to(F64) * b32.to(F64))


def e4m3_grid():
    """The 127 non-negative finite e4m3fn values, ascending (index i: e = i>>3, m = i&7)."""
    vals = []
    for i in range(127):
        e, m = (i >> 3) & 15, i & 7
        vals.append(m * 2.0 ** -9 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7))
    assert vals[-1] == 448.0 and all(a < b for a, b in zip(vals, vals[1:]))
    return vals


E2M1_GRID = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
E4M3_GRID = e4m3_grid()
FP8_AMAX_FLOOR = 1e-4
FP4_AMAX_FLOOR = 7.052966104933725e-38


def grid_round(v32, grid):
    """Nearest grid value of |v| (v float32, |v| <= grid max), ties to the even grid index, sign restored.
    Same rule as ds4 (binary search for the largest value <= |v|, then compare with the next one)."""
    g = torch.tensor(grid, dtype=F64, device=v32.device)
    a = v32.abs().to(F64)
    lo = torch.searchsorted(g, a.contiguous(), right=True) - 1
    lo = lo.clamp(0, len(grid) - 1)
    hi = (lo + 1).clamp(max=len(grid) - 1)
    d_lo = a - g[lo]
    d_hi = g[hi] - a
    take_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    q = torch.where(take_hi, g[hi], g[lo])
    return torch.where(v32 < 0, -q, q).to(F32)


def pow2_scale(amax32, qmax):
    """ldexpf(1, (int)ceilf(log2f(amax / qmax))) with float32 semantics; amax32 float32 tensor."""
    r = _div32(amax32, torch.tensor(qmax, dtype=F32, device=amax32.device))
    l2 = _fl32(torch.log2(r.to(F64)))          # log2f: the float32-rounded log2
    e = torch.ceil(l2).to(torch.int32)
    return torch.ldexp(torch.ones_like(r, dtype=F64), e).to(F32)


def _block_roundtrip(x, block, qmax, floor, grid):
    shp = x.shape
    n = shp[-1]
    if n % block:
        raise ValueError("last dim %d is not a multiple of the block %d" % (n, block))
    x32 = x.to(F32).reshape(*shp[:-1], n // block, block)
    amax = x32.abs().amax(dim=-1, keepdim=True)
    amax = torch.maximum(amax, torch.tensor(floor, dtype=F32, device=x.device))
    scale = pow2_scale(amax, qmax)
    v = _div32(x32, scale)
    v = v.clamp(-qmax, qmax)
    q = grid_round(v, grid)
    y = _mul32(q, scale)
    return y.reshape(shp).to(x.dtype)


def fp8_e4m3_roundtrip(x):
    """FP8 E4M3 round trip of the last dim in blocks of 64 (ds4 dsv4_fp8_kv_quantize_row_inplace_cpu)."""
    return _block_roundtrip(x, 64, 448.0, FP8_AMAX_FLOOR, E4M3_GRID)


def fp4_e2m1_roundtrip(x):
    """FP4 E2M1 round trip of the last dim in blocks of 32 (ds4 dsv4_fp4_act_quantize_row_inplace_cpu)."""
    return _block_roundtrip(x, 32, 6.0, FP4_AMAX_FLOOR, E2M1_GRID)


def kv_fp8_nope(x, n_rot):
    """FP8 round trip of dims [0, D - n_rot) of the last dim; the trailing n_rot (RoPE) dims are untouched."""
    d = x.shape[-1]
    nope = d - n_rot
    if nope <= 0 or nope % 64:
        raise ValueError("FP8 KV: %d non-RoPE dims are not a positive multiple of 64" % nope)
    return torch.cat([fp8_e4m3_roundtrip(x[..., :nope]), x[..., nope:]], dim=-1)


def hadamard_f32(x):
    """Fast Walsh-Hadamard of the last dim (power of two) in float32 butterflies, strides 1, 2, 4, ..., n/2,
    then times float32(1/sqrt(n)) (for n = 128: 0.08838834764831845f), natural (Sylvester) order."""
    n = x.shape[-1]
    if n & (n - 1):
        raise ValueError("Hadamard size %d is not a power of two" % n)
    v = x.to(F32)
    shp = v.shape
    s = 1
    while s < n:
        v = v.reshape(*shp[:-1], n // (2 * s), 2, s)
        a, b = v[..., 0, :], v[..., 1, :]
        v = torch.stack([a + b, a - b], dim=-2)
        s *= 2
    v = v.reshape(shp)
    scale = torch.tensor(1.0 / math.sqrt(n), dtype=F32, device=x.device)
    return (v * scale).to(x.dtype)


def indexer_qat(x):
    """Hadamard then FP4 (ds4 indexer q heads and indexer compressed rows)."""
    return fp4_e2m1_roundtrip(hadamard_f32(x))


def f16_round(x):
    """f32(f16(f32(x))): the engine's cache rows are float32 values rounded to binary16 (RNE)."""
    return x.to(F32).to(torch.float16).to(F32).to(x.dtype)


def q8_0_act(x):
    """ds4 CPU Q8_0 activation quantization of the last dim (blocks of 32), dequantized back:
    d = amax/127 (float32), id = 1/d (0 if d = 0), q = clamp(rint(x*id), -128, 127), value = q*d."""
    shp = x.shape
    n = shp[-1]
    if n % 32:
        raise ValueError("Q8_0 activation: last dim %d is not a multiple of 32" % n)
    x32 = x.to(F32).reshape(*shp[:-1], n // 32, 32)
    amax = x32.abs().amax(dim=-1, keepdim=True)
    d = _div32(amax, torch.tensor(127.0, dtype=F32, device=x.device))
    safe = torch.where(d != 0, d, torch.ones_like(d))
    idv = torch.where(d != 0, _div32(torch.ones_like(d), safe), torch.zeros_like(d))
    q = torch.round(_mul32(x32, idv)).clamp(-128, 127)
    y = q.to(F64) * d.to(F64)
    return y.reshape(shp).to(x.dtype)


def q8_k_act(x):
    """ds4 Q8_K activation quantization of the last dim (blocks of 256), dequantized back:
    max = signed value of largest |x| (first wins); iscale = -127/max (float32); q = clamp(rint(iscale*x), -128, 127);
    value = q * (1/iscale); a block of zeros stays zero."""
    shp = x.shape
    n = shp[-1]
    if n % 256:
        raise ValueError("Q8_K activation: last dim %d is not a multiple of 256" % n)
    x32 = x.to(F32).reshape(*shp[:-1], n // 256, 256)
    ax = x32.abs()
    amax = ax.amax(dim=-1, keepdim=True)
    pos = torch.arange(256, device=x.device).expand_as(ax)
    first = torch.where(ax == amax, pos, torch.full_like(pos, 256)).amin(dim=-1, keepdim=True)
    mx = torch.gather(x32, -1, first.clamp(max=255))
    nz = amax != 0
    safe = torch.where(nz, mx, torch.ones_like(mx))
    iscale = _div32(torch.full_like(safe, -127.0), safe)
    q = torch.round(_mul32(x32, iscale)).clamp(-128, 127)
    d = _div32(torch.ones_like(iscale), iscale)
    y = torch.where(nz, q.to(F64) * d.to(F64), torch.zeros_like(q, dtype=F64))
    return y.reshape(shp).to(x.dtype)


# ------------------------------------------------------------------------------------------------ self-tests
class _T:
    def __init__(self):
        self.n_pass = 0
        self.fails = []

    def check(self, cond, what):
        if bool(cond):
            self.n_pass += 1
        else:
            self.fails.append(what)
            print("FAIL:", what)


def _brute_grid(v, grid):
    """One value at a time: nearest grid value, ties to even index (independent of grid_round)."""
    a = abs(v)
    best = None
    for i, g in enumerate(grid):
        d = abs(a - g)
        if best is None or d < best[0] or (d == best[0] and i % 2 == 0 and best[1] % 2 == 1):
            best = (d, i)
    q = grid[best[1]]
    return -q if v < 0 else q


def selftest(device="cpu", verbose=True):
    t = _T()
    dev = torch.device(device)

    def T(v, dt=F32):
        return torch.tensor(v, dtype=dt, device=dev)

    # --- e4m3 grid rounding: hand values (scale 1: block amax 448) ---
    blk = [0.0] * 64
    blk[0] = 448.0
    cases = {1: (0.3, 0.3125), 2: (1.0625, 1.0), 3: (1.1875, 1.25), 4: (-0.3, -0.3125), 5: (447.0, 448.0),
             6: (0.0009765625, 0.0), 7: (0.00146484375, 0.001953125), 8: (0.0029296875, 0.00390625),
             9: (17.0, 16.0), 10: (19.0, 20.0), 11: (240.0, 240.0), 12: (232.0, 224.0), 13: (-0.0, 0.0)}
    for k, (v, _) in cases.items():
        blk[k] = v
    y = fp8_e4m3_roundtrip(T(blk, F64))
    t.check(y.dtype == F64, "fp8 keeps dtype")
    t.check(y[0].item() == 448.0, "fp8 448 stays")
    for k, (v, e) in cases.items():
        t.check(y[k].item() == e, "fp8 %r -> %r (got %r)" % (v, e, y[k].item()))
    # amax floor: a block of 1e-5 -> floor 1e-4 -> scale 2^ceil(log2(1e-4/448)) = 2^-22; 1e-5/2^-22 = 41.94 -> 40
    y = fp8_e4m3_roundtrip(T([1e-5] + [0.0] * 63))
    t.check(y[0].item() == 40.0 * 2.0 ** -22, "fp8 amax floor: got %r" % y[0].item())
    t.check(torch.all(fp8_e4m3_roundtrip(T([0.0] * 64)) == 0).item(), "fp8 zero block")
    # scale selection: amax 449 -> scale 2 (449/2 = 224.5 -> 224, tie to even mantissa), amax 56 -> scale 1/8
    y = fp8_e4m3_roundtrip(T([449.0] + [1.0] * 63))
    t.check(y[0].item() == 448.0 and y[1].item() == 1.0, "fp8 amax 449: got %r %r" % (y[0].item(), y[1].item()))
    y = fp8_e4m3_roundtrip(T([56.0, 0.3] + [0.0] * 62))
    t.check(y[0].item() == 56.0 and y[1].item() == 0.3125,
            "fp8 amax 56 (scale 1/8): got %r %r" % (y[0].item(), y[1].item()))
    t.check(pow2_scale(T([448.0]), 448.0).item() == 1.0 and pow2_scale(T([448.5]), 448.0).item() == 2.0
            and pow2_scale(T([224.0]), 448.0).item() == 0.5, "pow2_scale exact powers")
    # brute force on random values, several blocks with different scales
    g = torch.Generator().manual_seed(5)
    xr = (torch.randn(8, 128, generator=g, dtype=F64) * torch.logspace(-6, 3, 8, dtype=F64)[:, None]).to(dev)
    y = fp8_e4m3_roundtrip(xr).cpu()
    ok = True
    x32 = xr.to(F32).cpu()
    for r in range(8):
        for b in range(2):
            seg = x32[r, 64 * b:64 * b + 64].tolist()
            amax = max(max(abs(v) for v in seg), float(torch.tensor(1e-4, dtype=F32)))
            ratio = float(torch.tensor(amax, dtype=F32) / torch.tensor(448.0, dtype=F32))
            sc = 2.0 ** math.ceil(float(torch.tensor(math.log2(ratio), dtype=F32)))
            for i, v in enumerate(seg):
                e = _brute_grid(max(-448.0, min(448.0, v / sc)), E4M3_GRID) * sc
                if float(torch.tensor(e, dtype=F32)) != y[r, 64 * b + i].item():
                    ok = False
    t.check(ok, "fp8 matches brute force on random blocks")
    if hasattr(torch, "float8_e4m3fn"):
        v = (torch.rand(20000, generator=g, dtype=F32) * 896 - 448)
        v = torch.cat([v, torch.tensor([e + 0.5 * (b - e) for e, b in zip(E4M3_GRID, E4M3_GRID[1:])], dtype=F32)])
        mine = grid_round(v.to(dev), E4M3_GRID).cpu()
        ref = v.to(torch.float8_e4m3fn).to(F32)
        t.check(torch.equal(mine, ref), "e4m3 rounding == torch.float8_e4m3fn cast (%d differ)" % int((mine != ref).sum()))

    # --- FP4 ---
    blk = [0.0] * 32
    blk[0] = 6.0
    cases = {1: (0.25, 0.0), 2: (0.75, 1.0), 3: (1.25, 1.0), 4: (1.75, 2.0), 5: (2.5, 2.0), 6: (3.5, 4.0),
             7: (5.0, 4.0), 8: (5.5, 6.0), 9: (-0.75, -1.0), 10: (0.3, 0.5), 11: (2.6, 3.0), 12: (-5.01, -6.0)}
    for k, (v, _) in cases.items():
        blk[k] = v
    y = fp4_e2m1_roundtrip(T(blk, F64))
    for k, (v, e) in cases.items():
        t.check(y[k].item() == e, "fp4 %r -> %r (got %r)" % (v, e, y[k].item()))
    # amax 12 -> scale 2: 5 -> 2.5 -> 2 -> 4; amax 7 -> scale 2: 7 -> 3.5 -> 4 -> 8
    y = fp4_e2m1_roundtrip(T([12.0, 5.0] + [0.0] * 30))
    t.check(y[0].item() == 12.0 and y[1].item() == 4.0, "fp4 amax 12: %r %r" % (y[0].item(), y[1].item()))
    y = fp4_e2m1_roundtrip(T([7.0, 1.0] + [0.0] * 30))
    t.check(y[0].item() == 8.0 and y[1].item() == 0.0 + 1.0, "fp4 amax 7: %r %r" % (y[0].item(), y[1].item()))
    t.check(torch.all(fp4_e2m1_roundtrip(T([0.0] * 32)) == 0).item(), "fp4 zero block")

    # --- Hadamard ---
    n = 128
    e0 = torch.zeros(n, dtype=F64, device=dev)
    e0[0] = 1.0
    h0 = hadamard_f32(e0)
    c = float(torch.tensor(1.0 / math.sqrt(128), dtype=F32))
    t.check(c == float(torch.tensor(0.08838834764831845, dtype=F32)), "1/sqrt(128) constant")
    t.check(torch.all(h0 == c).item(), "H(e0) = 1/sqrt(128) everywhere")
    e1 = torch.zeros(n, dtype=F64, device=dev)
    e1[1] = 1.0
    h1 = hadamard_f32(e1).cpu()
    t.check(all(h1[k].item() == (c if k % 2 == 0 else -c) for k in range(n)), "H(e1) alternates")
    idx = torch.arange(n)
    pc = torch.zeros(n, n, dtype=torch.int64)
    for b in range(7):
        pc += ((idx[:, None] >> b) & 1) * ((idx[None, :] >> b) & 1)
    Hm = torch.where(pc % 2 == 0, 1.0, -1.0).to(F64) / math.sqrt(n)
    xr = torch.randn(3, n, generator=g, dtype=F64)
    ref = xr @ Hm.T
    got = hadamard_f32(xr.to(dev)).cpu()
    t.check(torch.max(torch.abs(ref - got)).item() < 1e-5, "Hadamard == Sylvester matrix (%g)" % torch.max(torch.abs(ref - got)).item())
    back = hadamard_f32(got.to(dev)).cpu()
    t.check(torch.max(torch.abs(back - xr)).item() < 1e-5, "Hadamard is an involution")
    yq = indexer_qat(xr.to(dev)).cpu()
    t.check(torch.equal(yq, fp4_e2m1_roundtrip(hadamard_f32(xr))), "indexer_qat = fp4(hadamard)")

    # --- f16 ---
    t.check(f16_round(T([1.0 + 2 ** -11, 1.0 + 3 * 2 ** -11, 65520.0, 1e-8], F64)).tolist()
            == [1.0, 1.0 + 2 ** -9, math.inf, 0.0], "f16 RNE ties/overflow/underflow")
    t.check(f16_round(T([6e-8], F64)).item() == 2.0 ** -24, "f16 subnormal kept")

    # --- kv_fp8_nope ---
    x = torch.randn(2, 3, 128, generator=g, dtype=F64).to(dev)
    y = kv_fp8_nope(x, 64)
    t.check(torch.equal(y[..., 64:], x[..., 64:]) and torch.equal(y[..., :64], fp8_e4m3_roundtrip(x[..., :64])),
            "kv_fp8_nope touches only the non-RoPE dims")

    # --- Q8_0 activations ---
    blk = [0.0] * 32
    vals = [127.0, 0.5, 1.5, 2.5, -0.5, -1.5, 3.2, -126.6]
    blk[:len(vals)] = vals
    y = q8_0_act(T(blk, F64))
    t.check(y[:8].tolist() == [127.0, 0.0, 2.0, 2.0, 0.0, -2.0, 3.0, -127.0], "Q8_0 act hand values %s" % y[:8].tolist())
    t.check(torch.all(q8_0_act(T([0.0] * 32)) == 0).item(), "Q8_0 zero block")
    xr = torch.randn(4, 64, generator=g, dtype=F64)
    y = q8_0_act(xr.to(dev)).cpu()
    ok = True
    for r in range(4):
        for b in range(2):
            seg = xr[r, 32 * b:32 * b + 32].to(F32).tolist()
            amax = max(abs(v) for v in seg)
            d = float(torch.tensor(amax, dtype=F32) / torch.tensor(127.0, dtype=F32))
            idv = float(torch.tensor(1.0, dtype=F32) / torch.tensor(d, dtype=F32))
            for i, v in enumerate(seg):
                p = float(torch.tensor(v, dtype=F32) * torch.tensor(idv, dtype=F32))
                q = max(-128, min(127, round(p)))      # Python round: half to even
                if q * d != y[r, 32 * b + i].item():
                    ok = False
    t.check(ok, "Q8_0 act matches a scalar float32 reference")

    # --- Q8_K activations ---
    blk = [0.0] * 256
    blk[:5] = [-4.0, 2.0, -2.0, 1.0, 4.0]
    y = q8_k_act(T(blk, F64))
    d = float(torch.tensor(1.0, dtype=F32) / torch.tensor(31.75, dtype=F32))
    # max = -4 (first of the largest |x|), iscale = 31.75: q = -127, 64 (63.5 ties to even), -64, 32, 127
    t.check(y[:5].tolist() == [-127 * d, 64 * d, -64 * d, 32 * d, 127 * d],
            "Q8_K act hand values %s (d %r)" % (y[:5].tolist(), d))
    t.check(torch.all(q8_k_act(T([0.0] * 256)) == 0).item(), "Q8_K zero block")
    xr = torch.randn(2, 512, generator=g, dtype=F64)
    y = q8_k_act(xr.to(dev)).cpu()
    ok = True
    for r in range(2):
        for b in range(2):
            seg = xr[r, 256 * b:256 * b + 256].to(F32).tolist()
            mx, am = 0.0, 0.0
            for v in seg:
                if abs(v) > am:
                    am, mx = abs(v), v
            isc = float(torch.tensor(-127.0, dtype=F32) / torch.tensor(mx, dtype=F32))
            dd = float(torch.tensor(1.0, dtype=F32) / torch.tensor(isc, dtype=F32))
            for i, v in enumerate(seg):
                p = float(torch.tensor(isc, dtype=F32) * torch.tensor(v, dtype=F32))
                q = max(-128, min(127, round(p)))
                if q * dd != y[r, 256 * b + i].item():
                    ok = False
    t.check(ok, "Q8_K act matches a scalar float32 reference")

    if verbose:
        print("numerics selftest (%s): %d passed, %d failed" % (device, t.n_pass, len(t.fails)))
    return t.n_pass, t.fails


if __name__ == "__main__":
    np_, fails = selftest("cpu")
    if torch.cuda.is_available():
        np2, fails2 = selftest("cuda")
        fails = fails + fails2
    sys.exit(1 if fails else 0)
